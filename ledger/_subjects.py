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

Keys live in ``agentledger_subject_keys`` (subject as given, key id, secret), apart from the
events; ``agentledger_subject_runs`` lists which runs sealed content for which key. Erasure
deletes both rows (SQLite with ``secure_delete``, then a WAL checkpoint): the sealed blobs stay,
verifiable, and read back as `ERASED`. Must not know events or agents.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, cast
from uuid import NAMESPACE_URL, uuid5

from agentledger.ledger._canonical import canonical_json, loads

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from agentledger.ledger._store import Store

__all__ = [
    "ERASED",
    "ERASURE_STREAM",
    "SEALED",
    "Erased",
    "KeyTable",
    "SubjectKey",
    "check_subject",
    "is_sealed",
    "key_table",
    "new_subject_key",
    "sealed_key_id",
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


def sealed_key_id(value: Any) -> str | None:
    """The key id a sealed blob names, or None for any other value."""
    return str(value["key_id"]) if is_sealed(value) else None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


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

    def open_data(self, text: str) -> bytes:
        """The canonical bytes sealed in an envelope's ``data``; ValueError if they do not open."""
        from cryptography.exceptions import InvalidTag

        cipher, _ = self._keys
        try:
            data = _unb64(text)
            return cipher.decrypt(data[:12], data[12:], self.key_id.encode())
        except (InvalidTag, ValueError, TypeError) as e:
            msg = f"the sealed blob does not open with its key ({type(e).__name__})"
            raise ValueError(msg) from None

    def open_value(self, envelope: Mapping[str, Any]) -> Any:
        """The JSON value sealed in ``envelope``."""
        return loads(self.open(envelope))


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


class KeyTable(Protocol):
    """The subject keys of one ledger's database."""

    def key_for(self, subject: str, created_at: str, *, create: bool) -> SubjectKey | None:
        """The subject's key (made and stored first when ``create`` and it has none)."""
        ...

    def keys(self, key_ids: Iterable[str]) -> dict[str, SubjectKey]:
        """The keys among ``key_ids`` that exist."""
        ...

    def subject_of(self, key_id: str) -> str | None:
        """The subject a key belongs to, or None when the key does not exist."""
        ...

    def link(self, key_id: str, run_id: str) -> None:
        """Note that ``run_id`` sealed content under ``key_id``."""
        ...

    def runs_of(self, key_id: str) -> list[str]:
        """The runs that sealed content under ``key_id``."""
        ...

    def destroy(self, subject: str) -> str | None:
        """Delete the subject's key and its run links; its key id, or None if it had none."""
        ...

    def scrub(self, *, vacuum: bool, tables: Sequence[str] = ()) -> None:
        """Make deleted rows unrecoverable from the files (checkpoint; ``vacuum``: rewrite).

        ``tables`` names other tables of the same database whose rows were deleted (derived
        data); SQLite's VACUUM rewrites the whole file anyway.
        """
        ...


_SQLITE_DDL = (
    (
        "CREATE TABLE IF NOT EXISTS agentledger_subject_keys (subject TEXT PRIMARY KEY, "
        "key_id TEXT NOT NULL UNIQUE, secret BLOB NOT NULL, created_at TEXT NOT NULL)"
    ),
    (
        "CREATE TABLE IF NOT EXISTS agentledger_subject_runs (key_id TEXT NOT NULL, "
        "run_id TEXT NOT NULL, PRIMARY KEY (key_id, run_id)) WITHOUT ROWID"
    ),
)


class SQLiteKeyTable:
    """The key tables in a SQLite file, created on first need (most ledgers never use them)."""

    def __init__(self, store: Store) -> None:
        self._store: Any = store

    def _exists(self, c: Any) -> bool:
        c.execute("SELECT 1 FROM sqlite_master WHERE name = 'agentledger_subject_keys'")
        return c.fetchone() is not None

    def key_for(self, subject: str, created_at: str, *, create: bool) -> SubjectKey | None:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=False) as c:
            if self._exists(c):
                c.execute(
                    "SELECT key_id, secret FROM agentledger_subject_keys WHERE subject = ?",
                    [subject],
                )
                row = c.fetchone()
                if row is not None:
                    return SubjectKey(row["key_id"], bytes(row["secret"]))
        if not create:
            return None
        fresh = new_subject_key()
        with datastore.transaction(commit=True) as c:
            for statement in _SQLITE_DDL:
                c.execute(statement)
            c.execute(
                "INSERT OR IGNORE INTO agentledger_subject_keys (subject, key_id, secret, "
                "created_at) VALUES (?, ?, ?, ?)",
                [subject, fresh.key_id, fresh.secret, created_at],
            )
            c.execute(
                "SELECT key_id, secret FROM agentledger_subject_keys WHERE subject = ?", [subject]
            )
            row = c.fetchone()
            return SubjectKey(row["key_id"], bytes(row["secret"]))

    def keys(self, key_ids: Iterable[str]) -> dict[str, SubjectKey]:
        wanted = sorted(set(key_ids))
        if not wanted:
            return {}
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=False) as c:
            if not self._exists(c):
                return {}
            c.execute(
                "SELECT key_id, secret FROM agentledger_subject_keys WHERE key_id IN "
                f"({','.join('?' * len(wanted))})",
                wanted,
            )
            return {r["key_id"]: SubjectKey(r["key_id"], bytes(r["secret"])) for r in c.fetchall()}

    def subject_of(self, key_id: str) -> str | None:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=False) as c:
            if not self._exists(c):
                return None
            c.execute("SELECT subject FROM agentledger_subject_keys WHERE key_id = ?", [key_id])
            row = c.fetchone()
            return None if row is None else str(row["subject"])

    def link(self, key_id: str, run_id: str) -> None:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=True) as c:
            c.execute(
                "INSERT OR IGNORE INTO agentledger_subject_runs (key_id, run_id) VALUES (?, ?)",
                [key_id, run_id],
            )

    def runs_of(self, key_id: str) -> list[str]:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=False) as c:
            if not self._exists(c):
                return []
            c.execute(
                "SELECT run_id FROM agentledger_subject_runs WHERE key_id = ? ORDER BY run_id",
                [key_id],
            )
            return [str(r["run_id"]) for r in c.fetchall()]

    def destroy(self, subject: str) -> str | None:
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.transaction(commit=True) as c:
            if not self._exists(c):
                return None
            # secure_delete: SQLite overwrites the deleted row's bytes with zeros in the page
            # (and so in the WAL frame that carries it), instead of leaving them in free space.
            c.execute("PRAGMA secure_delete = ON")
            c.execute("SELECT key_id FROM agentledger_subject_keys WHERE subject = ?", [subject])
            row = c.fetchone()
            if row is None:
                return None
            key_id = str(row["key_id"])
            c.execute("DELETE FROM agentledger_subject_keys WHERE subject = ?", [subject])
            c.execute("DELETE FROM agentledger_subject_runs WHERE key_id = ?", [key_id])
            return key_id

    def scrub(self, *, vacuum: bool, tables: Sequence[str] = ()) -> None:
        del tables  # VACUUM rewrites every table of the file
        datastore = self._store.datastore
        assert datastore is not None
        with datastore.get_connection(commit=True) as connection:
            raw: sqlite3.Connection = connection.raw
            raw.execute("PRAGMA secure_delete = ON")
            if vacuum:
                raw.execute("VACUUM")
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


class PostgresKeyTable:
    """The key tables in a PostgreSQL schema (created with the schema, `SCHEMA_VERSION` 6)."""

    def __init__(self, store: Store) -> None:
        from psycopg.sql import SQL, Identifier

        self._datastore: Any = cast("Any", store.datastore)
        schema = Identifier(str(self._datastore.schema))
        self._keys = SQL("{}.agentledger_subject_keys").format(schema)
        self._runs = SQL("{}.agentledger_subject_runs").format(schema)

    def _rows(self, query: Any, params: Sequence[Any] = (), *, commit: bool = False) -> list[Any]:
        with self._datastore.transaction(commit=commit) as curs:
            curs.execute(query, params)
            return list(curs.fetchall()) if curs.description else []

    def key_for(self, subject: str, created_at: str, *, create: bool) -> SubjectKey | None:
        from psycopg.sql import SQL

        select = SQL("SELECT key_id, secret FROM {} WHERE subject = %s").format(self._keys)
        rows = self._rows(select, (subject,))
        if not rows and create:
            fresh = new_subject_key()
            with self._datastore.transaction(commit=True) as curs:
                curs.execute(
                    SQL(
                        "INSERT INTO {} (subject, key_id, secret, created_at) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT (subject) DO NOTHING"
                    ).format(self._keys),
                    (subject, fresh.key_id, fresh.secret, created_at),
                )
                curs.execute(select, (subject,))
                rows = list(curs.fetchall())
        if not rows:
            return None
        return SubjectKey(rows[0]["key_id"], bytes(rows[0]["secret"]))

    def keys(self, key_ids: Iterable[str]) -> dict[str, SubjectKey]:
        from psycopg.sql import SQL

        wanted = sorted(set(key_ids))
        if not wanted:
            return {}
        query = SQL("SELECT key_id, secret FROM {} WHERE key_id = ANY(%s)").format(self._keys)
        return {
            r["key_id"]: SubjectKey(r["key_id"], bytes(r["secret"]))
            for r in self._rows(query, (wanted,))
        }

    def subject_of(self, key_id: str) -> str | None:
        from psycopg.sql import SQL

        query = SQL("SELECT subject FROM {} WHERE key_id = %s").format(self._keys)
        rows = self._rows(query, (key_id,))
        return str(rows[0]["subject"]) if rows else None

    def link(self, key_id: str, run_id: str) -> None:
        from psycopg.sql import SQL

        query = SQL(
            "INSERT INTO {} (key_id, run_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
        ).format(self._runs)
        self._rows(query, (key_id, run_id), commit=True)

    def runs_of(self, key_id: str) -> list[str]:
        from psycopg.sql import SQL

        query = SQL("SELECT run_id FROM {} WHERE key_id = %s ORDER BY run_id").format(self._runs)
        return [str(r["run_id"]) for r in self._rows(query, (key_id,))]

    def destroy(self, subject: str) -> str | None:
        from psycopg.sql import SQL

        with self._datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL("DELETE FROM {} WHERE subject = %s RETURNING key_id").format(self._keys),
                (subject,),
            )
            row = curs.fetchone()
            if row is None:
                return None
            key_id = str(row["key_id"])
            curs.execute(SQL("DELETE FROM {} WHERE key_id = %s").format(self._runs), (key_id,))
            return key_id

    def scrub(self, *, vacuum: bool, tables: Sequence[str] = ()) -> None:
        # VACUUM cannot run in a transaction: an autocommit connection of the pool's settings.
        import psycopg
        from psycopg.sql import SQL, Identifier

        params = {k: v for k, v in self._datastore.pool.kwargs.items() if k != "row_factory"}
        with psycopg.connect(**params, autocommit=True) as conn:
            # FULL rewrites each table into a new file and drops the old one: deleted row
            # versions do not linger in its pages until later writes reuse them.
            full = SQL("VACUUM (FULL) {}") if vacuum else SQL("VACUUM {}")
            schema = Identifier(str(self._datastore.schema))
            derived = [SQL("{}.{}").format(schema, Identifier(t)) for t in tables]
            for table in (self._keys, self._runs, *derived):
                conn.execute(full.format(table))


class MemoryKeyTable:
    """The key tables of a memory ledger (kept on its recorder, gone with the process)."""

    def __init__(self, recorder: Any) -> None:
        self._lock = threading.Lock()
        tables = recorder.__dict__.setdefault("_subject_tables", ({}, {}))
        self._keys: dict[str, SubjectKey] = tables[0]
        self._runs: dict[str, set[str]] = tables[1]

    def key_for(self, subject: str, created_at: str, *, create: bool) -> SubjectKey | None:
        del created_at
        with self._lock:
            if subject not in self._keys and create:
                self._keys[subject] = new_subject_key()
            return self._keys.get(subject)

    def keys(self, key_ids: Iterable[str]) -> dict[str, SubjectKey]:
        wanted = set(key_ids)
        with self._lock:
            return {k.key_id: k for k in self._keys.values() if k.key_id in wanted}

    def subject_of(self, key_id: str) -> str | None:
        with self._lock:
            return next((s for s, k in self._keys.items() if k.key_id == key_id), None)

    def link(self, key_id: str, run_id: str) -> None:
        with self._lock:
            self._runs.setdefault(key_id, set()).add(run_id)

    def runs_of(self, key_id: str) -> list[str]:
        with self._lock:
            return sorted(self._runs.get(key_id, ()))

    def destroy(self, subject: str) -> str | None:
        with self._lock:
            key = self._keys.pop(subject, None)
            if key is None:
                return None
            self._runs.pop(key.key_id, None)
            return key.key_id

    def scrub(self, *, vacuum: bool, tables: Sequence[str] = ()) -> None:
        del vacuum, tables


def key_table(store: Store) -> KeyTable:
    """The key table of ``store``'s backend."""
    if store.kind == "sqlite":
        return SQLiteKeyTable(store)
    if store.kind == "postgresql":
        return PostgresKeyTable(store)
    return MemoryKeyTable(store.recorder)
