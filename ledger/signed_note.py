r"""Signed notes (C2SP ``signed-note``) with Ed25519 keys, byte-compatible with Go's sumdb/note.

This module owns the key text forms, key files, signing a text, co-signing a signed note and
opening (parsing and verifying) one. It must not know what a note's text means (checkpoints
live in ``_checkpoint``), must not touch the event store, and must never put private key
material in an exception message or a repr.

Key texts are the ones ``golang.org/x/mod/sumdb/note`` reads and writes::

    signer key    PRIVATE+KEY+<name>+<hash>+base64(0x01 || 32-byte Ed25519 seed)
    verifier key  <name>+<hash>+base64(0x01 || 32-byte Ed25519 public key)

where ``<hash>`` is 8 hex digits of ``SHA-256(name || "\n" || 0x01 || public key)[:4]``,
big-endian. A signed note is the text (ending in a newline), a blank line, then one line per
signature: ``— <name> base64(4-byte key hash || 64-byte signature)``.

Rules mirrored from Go's ``note.Open`` and ``note.Sign``: the note must be UTF-8 without
ASCII control characters other than newline; the text ends at the last blank line; at most
100 signature lines are read (a 101st is malformed); a repeated identical line from an unknown
key is dropped, and so is any later line from a known key that already signed, unverified; a
known key whose signature fails rejects the whole note; a (name, hash) pair listed by two
verifier keys is ambiguous once a signature uses it. ``add_signature`` keeps the existing
lines, drops one by the same key, and appends the new line last, as ``note.Sign`` does.
Stricter than Go: base64 must be canonical (zero padding bits; Go ignores them, which lets one
signature be spelled four ways), and key texts may not carry the newlines Go's decoder skips.

The error tree::

    NoteError (ValueError)
    ├── MalformedNoteError      the note's text breaks the format (reason, line)
    ├── MalformedKeyError       a key text or key file is not a valid key (kind, reason, name, path)
    ├── UnverifiedNoteError     no known key signed the note (note)
    ├── InvalidSignatureError   a known key's signature does not verify (name, key_hash)
    └── AmbiguousKeyError       two verifier keys share a name and hash (name, key_hash)
"""

from __future__ import annotations

import base64 as _b64
import errno
import hashlib
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "MAX_SIGNATURES",
    "AmbiguousKeyError",
    "InvalidSignatureError",
    "MalformedKeyError",
    "MalformedNoteError",
    "Note",
    "NoteError",
    "Signature",
    "UnverifiedNoteError",
    "add_signature",
    "generate_key",
    "open_note",
    "read_signer_key",
    "read_verifier_key",
    "sign_note",
    "verifier_key_of",
    "write_key_pair",
]

MAX_SIGNATURES = 100
_ALG_ED25519 = 1
_SIGNER_PREFIX = "PRIVATE+KEY+"
_SIG_PREFIX = "\u2014 "  # em dash, space
# Go's unicode.IsSpace: the Unicode White_Space property.
_SPACES = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f]")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_HASH16 = re.compile(r"[0-9a-fA-F]{8}")

_KeyKind = Literal["signer", "verifier"]


# Errors ----------------------------------------------------------------------------------------


class NoteError(ValueError):
    """Base of every error about signed notes and their keys."""


class MalformedNoteError(NoteError):
    """The note (or the text to sign) breaks the signed-note format."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason = reason
        self.line = line
        where = f" (signature line {line})" if line is not None else ""
        super().__init__(f"malformed note{where}: {reason}")


class MalformedKeyError(NoteError):
    """A key text or key file is not a valid key of the kind expected; never quotes a secret."""

    def __init__(
        self, kind: _KeyKind, reason: str, *, name: str | None = None, path: Path | None = None
    ) -> None:
        self.kind = kind
        self.reason = reason
        self.name = name
        self.path = path
        named = f" {name!r}" if name is not None else ""
        where = f" in {path}" if path is not None else ""
        super().__init__(f"malformed {kind} key{named}{where}: {reason}")


class UnverifiedNoteError(NoteError):
    """The note parsed, but no known key signed it; ``note`` holds what was read."""

    def __init__(self, note: Note) -> None:
        self.note = note
        unknown = ", ".join(f"{s.name}+{s.key_hash:08x}" for s in note.unverified)
        detail = f" (signed only by unknown keys: {unknown})" if unknown else ""
        super().__init__(f"note has no verifiable signatures{detail}")


class InvalidSignatureError(NoteError):
    """A known key's signature on the note does not verify: the note is rejected."""

    def __init__(self, name: str, key_hash: int) -> None:
        self.name = name
        self.key_hash = key_hash
        super().__init__(f"invalid signature for key {name}+{key_hash:08x}")


class AmbiguousKeyError(NoteError):
    """Two verifier keys share the name and hash a signature names."""

    def __init__(self, name: str, key_hash: int) -> None:
        self.name = name
        self.key_hash = key_hash
        super().__init__(
            f"ambiguous key {name}+{key_hash:08x}: more than one verifier key has this name "
            "and hash"
        )


# Values ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    """One signature line of a note: the key's name and hash, and the base64 as written."""

    name: str
    key_hash: int
    base64: str


@dataclass(frozen=True)
class Note:
    """An opened note: its text, the signatures verified, and those from unknown keys."""

    text: str
    signatures: tuple[Signature, ...]
    unverified: tuple[Signature, ...] = ()


# Keys ------------------------------------------------------------------------------------------


def _is_valid_name(name: str) -> bool:
    """Whether ``name`` is a key name Go accepts: non-empty UTF-8, no Unicode space, no '+'."""
    if not name or "+" in name or any(c in _SPACES for c in name):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _b64decode(text: str) -> bytes | None:
    """Decode canonical standard base64 (padded, zero padding bits), or return None."""
    if _BASE64.fullmatch(text) is None:
        return None
    raw = _b64.b64decode(text)
    return raw if _b64.b64encode(raw).decode("ascii") == text else None


def _key_hash(name: str, key: bytes) -> int:
    """The 32-bit key hash: the first 4 bytes of SHA-256(name, newline, key), big-endian."""
    return int.from_bytes(hashlib.sha256(name.encode() + b"\n" + key).digest()[:4], "big")


def _chop(text: str, sep: str) -> tuple[str, str]:
    """Split ``text`` at the first ``sep`` (Go's ``chop``); no ``sep`` gives ``(text, "")``."""
    before, _, after = text.partition(sep)
    return before, after


class _Verifier:
    """A parsed verifier key."""

    __slots__ = ("key_hash", "name", "public")

    def __init__(self, name: str, key_hash: int, public: Ed25519PublicKey) -> None:
        self.name = name
        self.key_hash = key_hash
        self.public = public

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's Ed25519 signature of ``message``."""
        try:
            self.public.verify(signature, message)
        except InvalidSignature:
            return False
        return True


class _Signer:
    """A parsed signer key; its repr names the key and never shows the secret."""

    __slots__ = ("_private", "key_hash", "name")

    def __init__(self, name: str, key_hash: int, private: Ed25519PrivateKey) -> None:
        self.name = name
        self.key_hash = key_hash
        self._private = private

    def __repr__(self) -> str:
        return f"<signer key {self.name}+{self.key_hash:08x}>"

    def signature_line(self, text: str) -> str:
        """The note signature line for ``text``, newline included."""
        raw = self.key_hash.to_bytes(4, "big") + self._private.sign(text.encode())
        return f"{_SIG_PREFIX}{self.name} {_b64.b64encode(raw).decode('ascii')}\n"


def _parse_verifier(vkey: str, path: Path | None = None) -> _Verifier:
    """Parse a verifier key text, checking in the order Go's ``NewVerifier`` does."""
    if vkey.startswith(_SIGNER_PREFIX):
        raise MalformedKeyError(
            "verifier",
            "this is a signer (private) key, not a verifier key: keep it secret and pass the "
            "verifier key (the .vkey file) instead",
            path=path,
        )
    name, rest = _chop(vkey, "+")
    hash16, key64 = _chop(rest, "+")
    shown = name if _is_valid_name(name) else None
    key = _b64decode(key64)
    if not _is_valid_name(name):
        reason = "the name must be non-empty, without spaces or '+' (want name+hash+keydata)"
    elif _HASH16.fullmatch(hash16) is None:
        reason = f"the key hash {hash16!r} is not 8 hex digits"
    elif key is None or not key:
        reason = "the key data is not non-empty canonical standard base64"
    else:
        expected = _key_hash(name, key)
        if int(hash16, 16) != expected:
            reason = (
                f"the key hash {hash16} does not match the key data (it hashes to {expected:08x})"
            )
        elif key[0] != _ALG_ED25519:
            reason = f"unknown key algorithm {key[0]} (only 1, Ed25519, is supported)"
        elif len(key) != 33:
            reason = f"an Ed25519 public key is 32 bytes, this one is {len(key) - 1}"
        else:
            return _Verifier(name, expected, Ed25519PublicKey.from_public_bytes(key[1:]))
    raise MalformedKeyError("verifier", reason, name=shown, path=path)


def _parse_signer(skey: str, path: Path | None = None) -> _Signer:
    """Parse a signer key text as Go's ``NewSigner`` does; errors never quote the key."""
    if not skey.startswith(_SIGNER_PREFIX):
        looks_public = _HASH16.fullmatch(_chop(_chop(skey, "+")[1], "+")[0]) is not None
        reason = (
            "this is a verifier (public) key, not a signer key: signing needs the "
            "PRIVATE+KEY+... text (the .key file)"
            if looks_public
            else "a signer key starts with PRIVATE+KEY+"
        )
        raise MalformedKeyError("signer", reason, path=path)
    name, rest = _chop(skey[len(_SIGNER_PREFIX) :], "+")
    hash16, key64 = _chop(rest, "+")
    shown = name if _is_valid_name(name) else None
    key = _b64decode(key64)
    if not _is_valid_name(name):
        reason = "the name must be non-empty, without spaces or '+'"
    elif _HASH16.fullmatch(hash16) is None:
        reason = "the key hash is not 8 hex digits"
    elif key is None or not key:
        reason = "the key data is not non-empty canonical standard base64"
    elif key[0] != _ALG_ED25519:
        reason = f"unknown key algorithm {key[0]} (only 1, Ed25519, is supported)"
    elif len(key) != 33:
        reason = "an Ed25519 seed is 32 bytes, this one is not"
    else:
        private = Ed25519PrivateKey.from_private_bytes(key[1:])
        public = bytes([_ALG_ED25519]) + private.public_key().public_bytes_raw()
        if int(hash16, 16) == _key_hash(name, public):
            return _Signer(name, int(hash16, 16), private)
        reason = "the key hash does not match the key data"
    raise MalformedKeyError("signer", reason, name=shown, path=path)


def generate_key(name: str) -> tuple[str, str]:
    """Return a new (signer key, verifier key) pair for ``name``, seeded from ``os.urandom``."""
    if not _is_valid_name(name) or _CONTROL.search(name):
        raise MalformedKeyError(
            "signer", "the name must be non-empty, without spaces, control characters or '+'"
        )
    seed = os.urandom(32)
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    key_hash = _key_hash(name, bytes([_ALG_ED25519]) + public)
    skey_data = _b64.b64encode(bytes([_ALG_ED25519]) + seed).decode("ascii")
    vkey_data = _b64.b64encode(bytes([_ALG_ED25519]) + public).decode("ascii")
    return (
        f"{_SIGNER_PREFIX}{name}+{key_hash:08x}+{skey_data}",
        f"{name}+{key_hash:08x}+{vkey_data}",
    )


def verifier_key_of(signer_key: str) -> str:
    """The verifier key (``name+hash+keydata``) that checks `signer_key`'s signatures."""
    signer = _parse_signer(signer_key)
    public = signer._private.public_key().public_bytes_raw()
    vkey_data = _b64.b64encode(bytes([_ALG_ED25519]) + public).decode("ascii")
    return f"{signer.name}+{signer.key_hash:08x}+{vkey_data}"


# Notes -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Line:
    """One parsed signature line: its 1-based number, text, signature and raw signature bytes."""

    number: int
    text: str
    signature: Signature
    signed: bytes


def _check_chars(note: str | bytes) -> str:
    """Return ``note`` as text if it is UTF-8 with no control character but newline."""
    try:
        text = note.decode("utf-8") if isinstance(note, bytes) else note
        text.encode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError) as e:
        raise MalformedNoteError(f"not valid UTF-8 at offset {e.start}") from e
    bad = _CONTROL.search(text)
    if bad is not None:
        raise MalformedNoteError(
            f"control character {bad.group()!r} at offset {bad.start()} (only newline is allowed)"
        )
    return text


def _split(note: str | bytes) -> tuple[str, Iterator[_Line]]:
    """Split a note into its text and a lazy reader of its signature lines, in Go's order."""
    message = _check_chars(note)
    split = message.rfind("\n\n")
    if split < 0:
        raise MalformedNoteError("no blank line separates the text from the signatures")
    text, block = message[: split + 1], message[split + 2 :]
    if not block:
        raise MalformedNoteError("no signature lines follow the blank line")
    if not block.endswith("\n"):
        raise MalformedNoteError("the last signature line does not end in a newline")
    return text, _lines(block[:-1].split("\n"))


def _lines(lines: list[str]) -> Iterator[_Line]:
    """Parse signature lines one by one, so errors surface in the order Go reports them."""
    for number, line in enumerate(lines, start=1):
        if not line.startswith(_SIG_PREFIX):
            raise MalformedNoteError("does not start with an em dash and a space", number)
        name, b64 = _chop(line[len(_SIG_PREFIX) :], " ")
        raw = _b64decode(b64)
        if not _is_valid_name(name):
            raise MalformedNoteError("the key name is empty or has a space or '+'", number)
        if raw is None or not b64:
            raise MalformedNoteError("the signature is not canonical standard base64", number)
        if len(raw) < 5:
            raise MalformedNoteError("the signature is shorter than 5 bytes", number)
        if number > MAX_SIGNATURES:
            raise MalformedNoteError(f"more than {MAX_SIGNATURES} signatures", number)
        key_hash = int.from_bytes(raw[:4], "big")
        yield _Line(number, line, Signature(name, key_hash, b64), raw[4:])


def open_note(note: str | bytes, verifier_keys: Iterable[str]) -> Note:
    """Parse ``note`` and verify it against ``verifier_keys``, as Go's ``note.Open`` does.

    Signatures from unknown keys are kept in ``Note.unverified``; a failing signature by a
    known key raises `InvalidSignatureError`; no verified signature raises
    `UnverifiedNoteError`, which carries the parsed note.
    """
    if isinstance(verifier_keys, str):
        raise TypeError("verifier_keys is a list of verifier keys, not one key string")
    known: dict[tuple[str, int], list[_Verifier]] = {}
    for vkey in verifier_keys:
        verifier = _parse_verifier(vkey)
        known.setdefault((verifier.name, verifier.key_hash), []).append(verifier)
    text, lines = _split(note)
    message = text.encode()
    verified: list[Signature] = []
    unverified: list[Signature] = []
    seen: set[tuple[str, int]] = set()
    seen_unknown: set[str] = set()
    for line in lines:
        key = (line.signature.name, line.signature.key_hash)
        candidates = known.get(key)
        if candidates is None:
            if line.text not in seen_unknown:
                seen_unknown.add(line.text)
                unverified.append(line.signature)
            continue
        if len(candidates) > 1:
            raise AmbiguousKeyError(*key)
        if key in seen:
            continue
        seen.add(key)
        if not candidates[0].verify(message, line.signed):
            raise InvalidSignatureError(*key)
        verified.append(line.signature)
    opened = Note(text, tuple(verified), tuple(unverified))
    if not verified:
        raise UnverifiedNoteError(opened)
    return opened


def sign_note(text: str, signer_key: str) -> str:
    """Return ``text`` signed by ``signer_key``: text, a blank line, one signature line."""
    signer = _parse_signer(signer_key)
    if not text.endswith("\n"):
        raise MalformedNoteError("the text must end in a newline")
    _check_chars(text)
    return f"{text}\n{signer.signature_line(text)}"


def add_signature(note: str, signer_key: str) -> str:
    """Co-sign a signed note: keep its lines, drop one by the same key, append the new one.

    This is Go's ``note.Sign`` applied to the note its ``note.Open`` returns: identical lines
    are kept once, the existing order is kept, and the new signature comes last. The existing
    signatures are not verified here; `open_note` the result to check them.
    """
    signer = _parse_signer(signer_key)
    text, lines = _split(note)
    kept: list[str] = []
    for line in lines:
        if (line.signature.name, line.signature.key_hash) == (signer.name, signer.key_hash):
            continue
        if line.text not in kept:
            kept.append(line.text)
    if len(kept) >= MAX_SIGNATURES:
        raise MalformedNoteError(f"the note already carries {MAX_SIGNATURES} signatures")
    existing = "".join(f"{line}\n" for line in kept)
    return f"{text}\n{existing}{signer.signature_line(text)}"


# Key files -------------------------------------------------------------------------------------


def _write_new(path: Path, content: str, mode: int) -> None:
    """Create ``path`` with ``mode``, refusing to replace anything already there."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
    except FileExistsError as e:
        raise FileExistsError(
            errno.EEXIST, "refusing to overwrite an existing key file", str(path)
        ) from e
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), mode)  # exactly ``mode``, whatever the umask
        f.write(content.encode())


def write_key_pair(name: str, directory: Path) -> tuple[Path, Path]:
    """Generate a key pair and write ``NAME.key`` (0600) and ``NAME.vkey`` (0644).

    A '/' in the name (names are often URLs) becomes '_' in the file names. Existing files are
    never overwritten: `FileExistsError` names the file and nothing is written.
    """
    signer_key, verifier_key = generate_key(name)
    stem = name.replace("/", "_")
    key_path, vkey_path = directory / f"{stem}.key", directory / f"{stem}.vkey"
    for path in (key_path, vkey_path):
        if path.exists() or path.is_symlink():
            raise FileExistsError(
                errno.EEXIST, "refusing to overwrite an existing key file", str(path)
            )
    _write_new(key_path, signer_key + "\n", 0o600)
    try:
        _write_new(vkey_path, verifier_key + "\n", 0o644)
    except BaseException:
        key_path.unlink()
        raise
    return key_path, vkey_path


def _read_key_file(path: Path, kind: _KeyKind) -> str:
    """Read a one-line key file, without surrounding whitespace."""
    try:
        content = path.read_bytes().decode("utf-8").strip()
    except UnicodeDecodeError as e:
        raise MalformedKeyError(kind, "the file is not UTF-8 text", path=path) from e
    if not content:
        raise MalformedKeyError(kind, "the file is empty", path=path)
    if any(c in _SPACES for c in content):
        raise MalformedKeyError(kind, "the file holds more than one word or line", path=path)
    return content


def read_signer_key(path: Path | str) -> str:
    """Read and check a signer key file (``NAME.key``); return the key text."""
    path = Path(path)
    signer_key = _read_key_file(path, "signer")
    _parse_signer(signer_key, path)
    return signer_key


def _is_file(text: str) -> bool:
    """Whether ``text`` names an existing file (a key text, too long for a path, does not)."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def read_verifier_key(path_or_text: Path | str) -> str:
    """Check a verifier key given as text, or read one from a file; return the key text.

    A `Path`, or a string naming an existing file, is read as a ``NAME.vkey`` file; any other
    string is taken as the key text itself.
    """
    if isinstance(path_or_text, Path) or _is_file(path_or_text):
        path: Path | None = Path(path_or_text)
        verifier_key = _read_key_file(Path(path_or_text), "verifier")
    else:
        path, verifier_key = None, path_or_text.strip()
        if "+" not in verifier_key:
            raise MalformedKeyError(
                "verifier", "neither a key file that exists nor a name+hash+keydata key text"
            )
    _parse_verifier(verifier_key, path)
    return verifier_key
