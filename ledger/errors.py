"""Errors raised by the ledger layer.

The tree::

    LedgerError
    ├── UsageError                  the caller's code is wrong
    │   ├── InvalidPayloadError     a value is not JSON-native (path, reason)
    │   │   └── LimitExceededError  too large or too deep for `Limits` (limit, actual, allowed)
    │   ├── InvalidEventError       an event failed its schema (kind, details)
    │   ├── UnknownSchemeError      a database URL we cannot open (url)
    │   └── RunClosedError          append to a completed or failed run (run_id, status)
    ├── UnknownRunError             no run with that id (run_id)
    ├── UnknownBlobError            no blob with that hash (ref)
    ├── UnknownSubjectError         no key for that data subject: nothing to erase (subject)
    ├── CorruptEventError           a stored event cannot be read back (run_id, position, detail)
    ├── CorruptBlobError            a stored blob cannot be unpacked (ref, detail)
    ├── ConcurrencyError            another writer took the position first (run_id, position)
    ├── StorageError                the database cannot be opened or written (url, reason)
    ├── ImportRefusedError          an export file failed verification; nothing written (problems)
    ├── ExportRefusedError          an export onto the ledger's own files (path, reason)
    ├── TransparencyLogError        the log cannot be integrated or read (detail, run_id, position)
    └── CheckpointError             a checkpoint cannot be issued, published or trusted
                                    (reason, detail, source)

Database and eventsourcing errors are translated at the storage adapter, with ``from e``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "CheckpointError",
    "ConcurrencyError",
    "CorruptBlobError",
    "CorruptEventError",
    "ExportRefusedError",
    "ImportRefusedError",
    "InvalidEventError",
    "InvalidPayloadError",
    "LedgerError",
    "LimitExceededError",
    "ReadOnlyDatabaseError",
    "RunClosedError",
    "StorageError",
    "TransparencyLogError",
    "UnknownBlobError",
    "UnknownRunError",
    "UnknownSchemeError",
    "UnknownSubjectError",
    "UsageError",
]


class LedgerError(Exception):
    """Base of every error the ledger raises."""


class UsageError(LedgerError):
    """The caller's code is wrong: fix the call, not the data store."""


class InvalidPayloadError(UsageError):
    """A value handed to the ledger is not JSON-native under the hashing rules."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"payload at {path or '/'} is not JSON-native: {reason}")


class LimitExceededError(InvalidPayloadError):
    """A payload or blob is larger or deeper than the ledger's `Limits` allow.

    `limit` names the limit (``max_payload_bytes`` or ``max_depth``), `actual` is what the value
    measured and `allowed` the limit in force; the message says how to raise it.
    """

    def __init__(
        self, limit: str, actual: int, allowed: int, *, subject: str, hint: str, path: str = ""
    ) -> None:
        self.path = path
        self.limit = limit
        self.actual = actual
        self.allowed = allowed
        if limit == "max_payload_bytes":
            measured = f"is {actual:,} bytes of canonical JSON"
        else:
            measured = f"is nested {actual:,} levels deep"
        self.reason = f"{subject} {measured}, over {limit}={allowed:,}; {hint}"
        UsageError.__init__(self, self.reason)


class InvalidEventError(UsageError):
    """An event failed validation against its schema."""

    def __init__(self, kind: str, details: str) -> None:
        self.kind = kind
        self.details = details
        super().__init__(f"invalid {kind} event: {details}")


class UnknownSchemeError(UsageError):
    """A database URL whose scheme the ledger does not support."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(
            f"cannot open {url!r}: use sqlite:///path/to/file.db, postgresql://user@host/db "
            "or memory://"
        )


class RunClosedError(UsageError):
    """An append to a run that already recorded RunCompleted or RunFailed."""

    def __init__(self, run_id: str, status: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(f"run {run_id} is {status}: a closed run takes no more events")


class UnknownRunError(LedgerError):
    """No run with that id is recorded in this ledger."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run {run_id!r} in this ledger")


class UnknownBlobError(LedgerError):
    """No blob with that content hash is stored."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"no blob {ref!r} in this ledger")


class UnknownSubjectError(LedgerError):
    """No key is stored for that data subject: none of their content is sealed here.

    Also what a second erasure of one subject raises (`erased_at` then names the first).
    """

    def __init__(self, subject: str, erased_at: str | None = None) -> None:
        self.subject = subject
        self.erased_at = erased_at
        detail = (
            f"it was erased at {erased_at}"
            if erased_at
            else "no run recorded content for it (check the spelling)"
        )
        super().__init__(f"no key for data subject {subject!r} in this ledger: {detail}")


class CorruptEventError(LedgerError):
    """A stored event's bytes no longer decode: the database was altered outside the ledger."""

    def __init__(self, run_id: str, position: int, detail: str) -> None:
        self.run_id = run_id
        self.position = position
        self.detail = detail
        super().__init__(
            f"run {run_id} position {position}: the stored event cannot be read ({detail}); "
            "`agentledger verify` reports what is broken"
        )


class CorruptBlobError(LedgerError):
    """A stored blob's bytes no longer unpack: the database was altered outside the ledger."""

    def __init__(self, ref: str, detail: str) -> None:
        self.ref = ref
        self.detail = detail
        super().__init__(
            f"blob {ref}: the stored bytes cannot be unpacked ({detail}); "
            "`agentledger verify` reports what is broken"
        )


class ConcurrencyError(LedgerError):
    """Another writer recorded this run's position first; nothing of ours was written."""

    def __init__(self, run_id: str, position: int) -> None:
        self.run_id = run_id
        self.position = position
        super().__init__(
            f"run {run_id}: position {position} was recorded by another writer; "
            "reload the run and retry"
        )


class StorageError(LedgerError):
    """The database could not be opened, read or written."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"{url}: {reason}")


class ReadOnlyDatabaseError(StorageError):
    """A SQLite file marked read-only (an auditor's copy, a sealed ledger) was opened to write.

    Open it with ``read_only=True`` to read it: nothing is then written to it, and derived data
    (snapshots, read models) is computed in memory.
    """


class ImportRefusedError(LedgerError):
    """An export file failed verification; nothing was written.

    `limit` names the first `Limits` field a line of the file exceeded, if that is a reason.
    One case writes: a file that changes while its run is being written (after it verified) is
    refused at the first line that is not what was checked, and the events committed before it
    are a start of the run that verifies (the problem says how many); importing the intact file
    completes the run.
    """

    def __init__(self, source: str, problems: Sequence[str], *, limit: str | None = None) -> None:
        self.source = source
        self.problems = list(problems)
        self.limit = limit
        listed = "; ".join(self.problems[:5])
        more = f" (+{len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        super().__init__(f"refused to import {source}: {listed}{more}")


class ExportRefusedError(LedgerError):
    """An export that would overwrite the ledger's own database, or whose file cannot be written."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"refused to export to {path}: {reason}")


class TransparencyLogError(LedgerError):
    """The log cannot be integrated or read: names the run and position where it can."""

    def __init__(self, detail: str, run_id: str | None = None, position: int | None = None):
        self.detail = detail
        self.run_id = run_id
        self.position = position
        where = f"run {run_id} position {position}: " if run_id else ""
        super().__init__(f"transparency log: {where}{detail}")


class CheckpointError(LedgerError):
    """A checkpoint cannot be issued, published or trusted: `reason` says which and why.

    `reason` is one of "bad signature", "malformed", "wrong origin", "rolled back", "forked",
    "not of this ledger", "not covered" (recorded after the checkpoint), "unreadable",
    "published concurrently", "re-chained" (an event to prove no longer hashes to its stored
    hash).
    """

    def __init__(self, reason: str, detail: str, source: str = "") -> None:
        self.reason = reason
        self.detail = detail
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{reason}: {detail}")
