"""Data subjects: per-subject keys, sealed (encrypted) blobs, and the key table on each backend.

A run (or one recording call) tied to a data subject stores its content out of line, each blob
sealed under the subject's key. A sealed blob is itself a JSON object (so it is stored, hashed,
verified and exported as any blob)::

    {"sealed": "agentledger/aes-gcm-hmac-nonce/v1", "key_id": "<32 hex>",
     "data": "<base64: 12-byte nonce, ciphertext, 16-byte tag>", "inner_refs": [...]}

Its ref is the SHA-256 of that object's canonical bytes: anyone checks it offline without a key,
and once the key is gone it tells nothing about the content (a short value cannot be guessed by
hashing candidates). ``inner_refs`` lists the refs the sealed value holds (a conversation node's
parent), in the clear, so that verify and export still walk every blob.

Encryption is deterministic per subject (so replay and rerun reproduce a subject run's refs):
AES-256-GCM with the nonce taken from an HMAC-SHA256 of the plaintext (a synthetic IV, as
AES-GCM-SIV does); both keys are derived with HKDF from a random 32-byte secret per subject. It
reveals only which of one subject's blobs are equal; two subjects' equal content is sealed
under different keys and stored twice. (AES-GCM-SIV proper needs OpenSSL 3.2 or later: a ledger
must stay readable wherever the ``cryptography`` package runs.)

Keys live apart from the events, in the key table (`_subject_keys`); once a key is destroyed the
sealed blobs stay, verifiable, and read back as `ERASED`. Must not know storage, events or agents.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any
from uuid import NAMESPACE_URL, uuid5

from agentledger.ledger._canonical import canonical_json, loads

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM


__all__ = [
    "ERASED",
    "ERASURE_STREAM",
    "SEALED",
    "Erased",
    "SubjectKey",
    "check_subject",
    "is_sealed",
    "new_subject_key",
    "sealed_parts",
]

SEALED = "agentledger/aes-gcm-hmac-nonce/v1"
"""The ``sealed`` member of a sealed blob: names the scheme (a new scheme gets a new name)."""
_FIELDS = frozenset({"sealed", "key_id", "data"})
ERASURE_STREAM = str(uuid5(NAMESPACE_URL, "agentledger:erasures"))
"""The id of the ledger's erasure stream: a chain of ErasureRecorded facts, not a run."""
MAX_SUBJECT = 512
"""The longest subject id accepted (characters)."""
_INFO = b"agentledger/subject-key/v1"


class Erased(str):
    """What a sealed blob reads as once its subject's key is destroyed: the text ``[erased]``.

    A `str` so that every reader (text, JSON, reports) shows ``[erased]`` where the content was;
    ``isinstance(value, Erased)`` tells it from a user's own text.
    """

    __slots__ = ()


ERASED = Erased("[erased]")


def check_subject(subject: object) -> str:
    """``subject`` if it is a usable subject id; `UsageError` naming what is wrong otherwise."""
    from agentledger.ledger.errors import UsageError

    if not isinstance(subject, str):
        msg = f"subject must be a string (a data subject's id), not {type(subject).__name__}"
        raise UsageError(msg)
    if not subject.strip():
        raise UsageError("subject must not be empty (give the data subject's id)")
    if len(subject) > MAX_SUBJECT or not subject.isprintable():
        msg = f"subject must be printable text of at most {MAX_SUBJECT} characters"
        raise UsageError(msg)
    return subject


def is_sealed(value: Any) -> bool:
    """Whether a blob's value is a sealed envelope (see the module doc)."""
    return (
        isinstance(value, dict)
        and value.get("sealed") == SEALED
        and set(value) >= _FIELDS
        and set(value) <= {*_FIELDS, "inner_refs"}
    )


_HEAD = b'{"data":"'
_TAIL = b'","sealed":"' + SEALED.encode() + b'"}'
_KEY_AT = -len(_TAIL) - 32


def sealed_parts(canonical: bytes) -> tuple[str, str] | None:
    """(key id, data) of a sealed blob's canonical bytes, read without a JSON parse; or None.

    Canonical JSON orders the members ``data``, ``inner_refs``, ``key_id``, ``sealed``, so a
    sealed blob starts with its data and ends with its key id and scheme. Anything else (a
    user's value that merely looks similar included) gives None and is parsed as JSON.
    """
    if not (canonical.startswith(_HEAD) and canonical.endswith(_TAIL)):
        return None
    key_mark = canonical[_KEY_AT - 10 : _KEY_AT]
    if key_mark != b'"key_id":"':
        return None
    end = canonical.find(b'"', len(_HEAD))
    rest = canonical[end : _KEY_AT - 10]
    if rest != b'",' and not (rest.startswith(b'","inner_refs":[') and rest.endswith(b"],")):
        return None
    key_id = canonical[_KEY_AT : -len(_TAIL)].decode("ascii", "replace")
    return key_id, canonical[len(_HEAD) : end].decode("ascii", "replace")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class SubjectKey:
    """One subject's key: its id (in sealed blobs and RunStarted) and its secret (never)."""

    key_id: str
    secret: bytes = field(repr=False)

    @cached_property
    def _keys(self) -> tuple[AESGCM, bytes]:
        return _derived(self.key_id, self.secret)

    def seal(self, canonical: bytes, inner_refs: Sequence[str] = ()) -> bytes:
        """The canonical bytes of the sealed envelope of ``canonical`` (deterministic)."""
        cipher, mac_key = self._keys
        nonce = hmac.new(mac_key, canonical, hashlib.sha256).digest()[:12]
        data = cipher.encrypt(nonce, canonical, self.key_id.encode())
        envelope: dict[str, Any] = {
            "sealed": SEALED,
            "key_id": self.key_id,
            "data": _b64(nonce + data),
        }
        if inner_refs:
            envelope["inner_refs"] = list(dict.fromkeys(inner_refs))
        return canonical_json(envelope)

    def open(self, envelope: Mapping[str, Any]) -> bytes:
        """The canonical bytes sealed in ``envelope``; ValueError when they do not open."""
        return self.open_data(envelope["data"])

    @cached_property
    def _aad(self) -> bytes:
        return self.key_id.encode()

    def open_data(self, text: str) -> bytes:
        """The canonical bytes sealed in an envelope's ``data``; ValueError if they do not open."""
        cipher, _ = self._keys
        try:
            data = binascii.a2b_base64(text, strict_mode=True)
            return cipher.decrypt(data[:12], data[12:], self._aad)
        except (_invalid_tag(), ValueError, TypeError) as e:  # evaluated only on an error
            msg = f"the sealed blob does not open with its key ({type(e).__name__})"
            raise ValueError(msg) from None

    def open_value(self, envelope: Mapping[str, Any]) -> Any:
        """The JSON value sealed in ``envelope``."""
        return loads(self.open(envelope))


@functools.cache
def _invalid_tag() -> type[Exception]:
    from cryptography.exceptions import InvalidTag

    return InvalidTag


@functools.lru_cache(maxsize=64)
def _derived(key_id: str, secret: bytes) -> tuple[AESGCM, bytes]:
    """The cipher and MAC key of a subject key (HKDF-SHA256), derived once per process.

    Readers look a key up in its table on every read, so a destroyed key is never used again;
    this only spares deriving the same key's ciphers for every read.
    """
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    derived = HKDF(
        algorithm=hashes.SHA256(), length=64, salt=None, info=_INFO + key_id.encode()
    ).derive(secret)
    return AESGCM(derived[:32]), derived[32:]


def new_subject_key() -> SubjectKey:
    """A fresh key: a random id and a random 32-byte secret."""
    return SubjectKey(os.urandom(16).hex(), os.urandom(32))
