r"""The C2SP ``tlog-checkpoint`` note text: a log's origin, tree size and root hash.

This module owns writing and strictly parsing the checkpoint body::

    <origin>\n
    <tree size, ASCII decimal, no leading zeros>\n
    <standard base64 of the 32-byte RFC 6962 root hash>\n
    [<extension line>\n ...]

It must not sign or verify (that is ``signed_note``) and must not compute tree hashes (that is
``merkle``). Parsing follows c2sp.org/tlog-checkpoint and is stricter than transparency-dev's
``log.Checkpoint.Unmarshal``, which accepts leading zeros ("007"), root hashes of any length,
non-canonical base64 and empty trailing lines. The size is capped at 2**64 - 1, as Go's
``uint64`` is, and, since the body is a signed note's text, ASCII control characters other
than newline are refused.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

__all__ = ["ROOT_SIZE", "Checkpoint", "CheckpointFormatError"]

ROOT_SIZE = 32
_MAX_SIZE = 2**64 - 1
_SIZE = re.compile(r"0|[1-9][0-9]*")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f]")
_LINE_NAMES = {1: "origin", 2: "tree size", 3: "root hash"}


class CheckpointFormatError(ValueError):
    """A checkpoint body, or a value for one, breaks the tlog-checkpoint format."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason = reason
        self.line = line
        where = ""
        if line is not None:
            where = f" (line {line}, {_LINE_NAMES.get(line, 'extension')})"
        super().__init__(f"malformed checkpoint{where}: {reason}")


def _check_line(value: str, line: int) -> None:
    """Refuse an empty line, or one holding a newline or another control character."""
    if not value:
        raise CheckpointFormatError("the line is empty", line)
    if "\n" in value:
        raise CheckpointFormatError("the value holds a newline", line)
    bad = _CONTROL.search(value)
    if bad is not None:
        raise CheckpointFormatError(f"control character {bad.group()!r} in the line", line)


@dataclass(frozen=True)
class Checkpoint:
    """A log's signed claim: ``origin`` had ``size`` leaves with Merkle root ``root``."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse values no checkpoint body can carry."""
        _check_line(self.origin, 1)
        if isinstance(self.size, bool) or not 0 <= self.size <= _MAX_SIZE:
            raise CheckpointFormatError(f"the tree size must be 0 to 2**64 - 1, not {self.size}", 2)
        if len(self.root) != ROOT_SIZE:
            raise CheckpointFormatError(
                f"the root hash must be {ROOT_SIZE} bytes, not {len(self.root)}", 3
            )
        for number, extension in enumerate(self.extensions, start=4):
            _check_line(extension, number)

    def body(self) -> str:
        """The checkpoint's note text: each line, extensions included, ends in a newline."""
        root = base64.b64encode(self.root).decode("ascii")
        lines = [self.origin, str(self.size), root, *self.extensions]
        return "".join(f"{line}\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Parse a checkpoint body strictly, naming the first line that breaks the format."""
        if not text.endswith("\n"):
            raise CheckpointFormatError("the text must end in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise CheckpointFormatError(
                f"want at least 3 lines (origin, tree size, root hash), got {len(lines)}"
            )
        for number, line in enumerate(lines, start=1):
            _check_line(line, number)
        origin, size_text, root_text, *extensions = lines
        if _SIZE.fullmatch(size_text) is None:
            raise CheckpointFormatError(
                f"{size_text!r} is not a decimal number without leading zeros", 2
            )
        size = int(size_text) if len(size_text) <= 20 else _MAX_SIZE + 1
        if size > _MAX_SIZE:
            raise CheckpointFormatError(f"{size_text} is larger than 2**64 - 1", 2)
        if _BASE64.fullmatch(root_text) is None:
            raise CheckpointFormatError(f"{root_text!r} is not standard padded base64", 3)
        root = base64.b64decode(root_text)
        if base64.b64encode(root).decode("ascii") != root_text:
            raise CheckpointFormatError(f"{root_text!r} is not canonical base64", 3)
        return cls(origin, size, root, tuple(extensions))
