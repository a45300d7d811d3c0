r"""An export file's bytes: read line by line once, then single lines again, unchanged or refused.

The file is opened once and read through that descriptor only (a pipe or other non-regular
file is first copied to a scratch file). The first pass (`ExportSource.lines`) splits it into
lines where Python's universal newlines mode does ("\n", "\r\n" or "\r"; never at U+2028 or
other Unicode line breaks, which a JSON string may hold), decodes each as UTF-8 (an error names
its byte position in the file, as decoding the whole file at once would) and hashes each line
and the whole file. A line longer than any the limits allow is never held whole: its characters
are counted piece by piece. Later passes read a line again by its offset (`ExportSource.line`)
only if it hashes as it did, and `ExportSource.check_unchanged` re-hashes the whole file: what
a second pass uses is what the first checked, or `FileChangedError` says where it differs. Must
not parse JSON.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ExportSource", "FileChangedError", "Line", "UnreadableError"]

_CHUNK = 1 << 20
"""Bytes read at once from a line too long to hold, and when re-hashing the file."""


class UnreadableError(Exception):
    """The file cannot be read, or is not UTF-8 (the message says where)."""


class FileChangedError(Exception):
    """The file is not what the first pass read: `number` is the line that differs (if known)."""

    def __init__(self, number: int | None) -> None:
        self.number = number
        super().__init__(f"line {number} changed" if number is not None else "the file changed")


@dataclass(frozen=True, slots=True)
class Line:
    """One line as the first pass read it: where it is, its hash, and its text if kept.

    `text` is None for a line longer than the limit (only its `length` in characters is
    known). `blank`: the line holds nothing but whitespace (a reader skips it).
    """

    number: int
    offset: int
    size: int
    digest: bytes
    text: str | None
    length: int
    blank: bool


class ExportSource:
    """An export file opened for reading; close it (or use it as a context manager)."""

    def __init__(self, path: Path, scratch: Path) -> None:
        """Open `path` (a non-regular file is copied into the folder `scratch` first).

        Raises `UnreadableError` if it cannot be opened.
        """
        try:
            opened = path.open("rb")
            if not stat.S_ISREG(os.fstat(opened.fileno()).st_mode):
                with opened:
                    copy = scratch / "source.jsonl"
                    with copy.open("wb") as out:
                        shutil.copyfileobj(opened, out)
                opened = copy.open("rb")
        except OSError as e:
            raise UnreadableError(str(e)) from e
        self._file = opened
        self._whole = hashlib.sha256()
        self._size = 0

    def __enter__(self) -> ExportSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the file."""
        self._file.close()

    def lines(self, limit: int) -> Iterator[Line]:
        """The file's lines from the start, each kept if it has at most `limit` characters.

        Raises `UnreadableError` at the first byte that is not UTF-8 (or a read that fails).
        """
        number = offset = 0
        pending: _LongLine | None = None
        try:
            self._file.seek(0)
            for piece, ends in self._pieces():
                if pending is None and ends:  # a whole line in one piece: most lines
                    number += 1
                    text = _strip_break(_decode(piece, offset))
                    digest = hashlib.sha256(piece).digest()
                    line = Line(
                        number, offset, len(piece), digest, text, len(text), not text.strip()
                    )
                else:
                    if pending is None:
                        number += 1
                        pending = _LongLine(number, offset, limit)
                    pending.add(piece, ends)
                    if not ends:
                        continue
                    line, pending = pending.line(), None
                offset += line.size
                self._size = offset
                yield line
            if pending is not None:  # the last line, ending where the file ends
                pending.add(b"", ends=True)
                line = pending.line()
                self._size = offset + line.size
                yield line
        except OSError as e:
            raise UnreadableError(str(e)) from e

    def _pieces(self) -> Iterator[tuple[bytes, bool]]:
        r"""The file's bytes in pieces, each marked where a line ends (after its line break).

        A line break is "\n", "\r\n" or "\r" (what reading the file as text in Python's
        universal newlines mode splits at). A line longer than `_CHUNK` bytes comes in several
        pieces. Every byte read is hashed into the whole file's digest.
        """
        file, whole = self._file, self._whole
        while True:
            raw = file.readline(_CHUNK)
            if not raw:
                return
            ends = raw.endswith(b"\n") or len(raw) < _CHUNK  # or the file ends
            start = 0
            while (at := raw.find(b"\r", start)) >= 0:
                end = at + 1
                if end < len(raw):
                    end += raw[end] == 0x0A
                elif file.peek(1)[:1] == b"\n":  # "\r\n" across two reads
                    raw += file.read(1)
                    end += 1
                whole.update(raw[start:end])
                yield raw[start:end], True
                start = end
            if start < len(raw):
                whole.update(raw[start:])
                yield raw[start:], ends

    def line(self, number: int, offset: int, size: int, digest: bytes) -> bytes:
        """Line `number` read again: its bytes, line break included.

        Raises `FileChangedError` if they are not the bytes the first pass read.
        """
        try:
            self._file.seek(offset)
            raw = self._file.read(size)
        except OSError as e:
            raise FileChangedError(number) from e
        if len(raw) != size or hashlib.sha256(raw).digest() != digest:
            raise FileChangedError(number)
        return raw

    def check_unchanged(self) -> None:
        """Raise `FileChangedError` unless the file holds the bytes the first pass read."""
        file = self._file
        if os.fstat(file.fileno()).st_size != self._size:
            raise FileChangedError(None)
        again = hashlib.sha256()
        file.seek(0)
        while piece := file.read(_CHUNK):
            again.update(piece)
        if again.digest() != self._whole.digest():
            raise FileChangedError(None)


class _LongLine:
    """A line read in pieces: its characters counted, its bytes kept while within `limit`."""

    def __init__(self, number: int, offset: int, limit: int) -> None:
        self._number, self._offset, self._limit = number, offset, limit
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._digest = hashlib.sha256()
        self._kept: list[str] | None = []
        self._size = self._length = 0
        self._blank = True

    def add(self, piece: bytes, ends: bool) -> None:
        """Take the line's next piece (`ends`: its last, line break included)."""
        carried = len(self._decoder.getstate()[0])
        try:
            text = self._decoder.decode(piece, final=ends)
        except UnicodeDecodeError as e:
            raise UnreadableError(_decode_error(e, self._offset + self._size - carried)) from None
        self._digest.update(piece)
        self._size += len(piece)
        if ends:
            text = _strip_break(text)
        self._length += len(text)
        self._blank = self._blank and not text.strip()
        if self._kept is not None:
            self._kept.append(text)
            if self._length > self._limit:
                self._kept = None

    def line(self) -> Line:
        """The line read (its text only if within the limit)."""
        text = None if self._kept is None else "".join(self._kept)
        digest = self._digest.digest()
        return Line(self._number, self._offset, self._size, digest, text, self._length, self._blank)


def _strip_break(text: str) -> str:
    r"""`text` without the line break it ends with ("\n", "\r\n" or "\r"), if any."""
    if text.endswith("\n"):
        return text[:-2] if text.endswith("\r\n") else text[:-1]
    return text.removesuffix("\r")


def _decode(raw: bytes, offset: int) -> str:
    """`raw` (the bytes at `offset` in the file) as text."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnreadableError(_decode_error(e, offset)) from None


def _decode_error(error: UnicodeDecodeError, offset: int) -> str:
    """`error`'s message, its positions moved by `offset`: what decoding the whole file says."""
    start, end = offset + error.start, offset + error.end
    if error.end - error.start == 1:
        what = f"byte 0x{error.object[error.start]:02x} in position {start}"
    else:
        what = f"bytes in position {start}-{end - 1}"
    return f"'{error.encoding}' codec can't decode {what}: {error.reason}"
