"""agentledger.ledger: the event store of agent runs.

The event catalogue, the `Run` aggregate, the per-run hash chain, content-addressed blobs,
persistence (SQLite, PostgreSQL, memory), the ledger-wide transparency log with its signed
checkpoints, and the `Ledger` facade with its recording API. The submodules `merkle` (RFC 9162),
`signed_note` (C2SP signed notes, Ed25519 keys) and `redaction` (personal data and secrets found
and redacted) are public too. Knows nothing of agents or
vendor SDKs.
"""

from typing import TYPE_CHECKING, Any

from agentledger.ledger.errors import (
    CheckpointError,
    ConcurrencyError,
    CorruptBlobError,
    CorruptEventError,
    ExportRefusedError,
    ImportRefusedError,
    InvalidEventError,
    InvalidPayloadError,
    LedgerError,
    LimitExceededError,
    ReadOnlyDatabaseError,
    RunClosedError,
    StorageError,
    TransparencyLogError,
    UnknownBlobError,
    UnknownRunError,
    UnknownSchemeError,
    UnknownSubjectError,
    UsageError,
)

if TYPE_CHECKING:
    from agentledger.ledger._audit_file import ExportVerification, verify_export
    from agentledger.ledger._canonical import as_recorded, canonical_json
    from agentledger.ledger._checkpoint import Checkpoint, CheckpointFormatError
    from agentledger.ledger._codec import DICTIONARY_V1, pack_blob, unpack_blob, unpack_state
    from agentledger.ledger._entry import (
        EntryError,
        PromptSpec,
        RecordedFunction,
        entry_point,
        load_entry,
        recorded_function,
    )
    from agentledger.ledger._erasure import ErasureResult
    from agentledger.ledger._hashing import GENESIS, blob_ref, envelope_hash
    from agentledger.ledger._instrument import (
        ENTRY_POINT_GROUP,
        CallRecord,
        Instrumentation,
        ModelCallPort,
        ServedCall,
        UninstrumentableClientError,
        instrumentation_for,
        instrumentations,
        register_instrumentation,
    )
    from agentledger.ledger._ledger import Ledger
    from agentledger.ledger._limits import Limits
    from agentledger.ledger._logging import EventLogger
    from agentledger.ledger._ports import (
        Clock,
        IdSource,
        RandomIds,
        SequentialIds,
        StepClock,
        SystemClock,
        format_timestamp,
        parse_timestamp,
    )
    from agentledger.ledger._privacy import RunPrivacy, policy_of
    from agentledger.ledger._recording import (
        INLINE_LIMIT,
        AsyncRunStart,
        ModelCallRecord,
        RequestKeys,
        RunRecorder,
        call_fingerprint,
        request_refs,
    )
    from agentledger.ledger._records import RecordedEvent, RunInfo, RunQuery, RunTotals
    from agentledger.ledger._run import Run
    from agentledger.ledger._subjects import ERASED, ERASURE_STREAM, Erased, SubjectKey
    from agentledger.ledger._tlog import CheckpointCheck, LogHead, LogProblem, TransparencyLog
    from agentledger.ledger._tooling import RecordedToolError, ToolSpec, raise_recorded
    from agentledger.ledger._verify import Problem, VerifyReport, blob_refs_in, verify_run

_LAZY = {
    "ExportVerification": "_audit_file",
    "verify_export": "_audit_file",
    "as_recorded": "_canonical",
    "canonical_json": "_canonical",
    "Checkpoint": "_checkpoint",
    "CheckpointFormatError": "_checkpoint",
    "DICTIONARY_V1": "_codec",
    "pack_blob": "_codec",
    "unpack_blob": "_codec",
    "unpack_state": "_codec",
    "EntryError": "_entry",
    "PromptSpec": "_entry",
    "RecordedFunction": "_entry",
    "entry_point": "_entry",
    "load_entry": "_entry",
    "recorded_function": "_entry",
    "ErasureResult": "_erasure",
    "GENESIS": "_hashing",
    "blob_ref": "_hashing",
    "envelope_hash": "_hashing",
    "CallRecord": "_instrument",
    "ENTRY_POINT_GROUP": "_instrument",
    "Instrumentation": "_instrument",
    "ModelCallPort": "_instrument",
    "ServedCall": "_instrument",
    "UninstrumentableClientError": "_instrument",
    "instrumentation_for": "_instrument",
    "instrumentations": "_instrument",
    "register_instrumentation": "_instrument",
    "Ledger": "_ledger",
    "RunQuery": "_records",
    "Limits": "_limits",
    "EventLogger": "_logging",
    "Clock": "_ports",
    "IdSource": "_ports",
    "RandomIds": "_ports",
    "SequentialIds": "_ports",
    "StepClock": "_ports",
    "SystemClock": "_ports",
    "format_timestamp": "_ports",
    "parse_timestamp": "_ports",
    "RunPrivacy": "_privacy",
    "policy_of": "_privacy",
    "AsyncRunStart": "_recording",
    "INLINE_LIMIT": "_recording",
    "ModelCallRecord": "_recording",
    "RequestKeys": "_recording",
    "RunRecorder": "_recording",
    "call_fingerprint": "_recording",
    "request_refs": "_recording",
    "RecordedEvent": "_records",
    "RunInfo": "_records",
    "RunTotals": "_records",
    "Run": "_run",
    "ERASED": "_subjects",
    "ERASURE_STREAM": "_subjects",
    "Erased": "_subjects",
    "SubjectKey": "_subjects",
    "CheckpointCheck": "_tlog",
    "LogHead": "_tlog",
    "LogProblem": "_tlog",
    "TransparencyLog": "_tlog",
    "RecordedToolError": "_tooling",
    "ToolSpec": "_tooling",
    "raise_recorded": "_tooling",
    "Problem": "_verify",
    "VerifyReport": "_verify",
    "blob_refs_in": "_verify",
    "verify_run": "_verify",
}
"""Where each name is defined: it is imported on first use, so that importing the package (or
one of its names) loads only what that name needs. A command that lists runs never builds the
event catalogue's models, the redaction detectors, the recorder or the signing library."""

_SUBMODULES = frozenset({"events", "merkle", "redaction", "signed_note"})
"""The public submodules, also reachable as attributes of the package."""


def __getattr__(name: str) -> Any:
    import importlib

    module = _LAZY.get(name)
    if module is None:
        if name in _SUBMODULES:
            return importlib.import_module(f"{__name__}.{name}")
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "DICTIONARY_V1",
    "ENTRY_POINT_GROUP",
    "ERASED",
    "ERASURE_STREAM",
    "GENESIS",
    "INLINE_LIMIT",
    "AsyncRunStart",
    "CallRecord",
    "Checkpoint",
    "CheckpointCheck",
    "CheckpointError",
    "CheckpointFormatError",
    "Clock",
    "ConcurrencyError",
    "CorruptBlobError",
    "CorruptEventError",
    "EntryError",
    "Erased",
    "ErasureResult",
    "EventLogger",
    "ExportRefusedError",
    "ExportVerification",
    "IdSource",
    "ImportRefusedError",
    "Instrumentation",
    "InvalidEventError",
    "InvalidPayloadError",
    "Ledger",
    "LedgerError",
    "LimitExceededError",
    "Limits",
    "LogHead",
    "LogProblem",
    "ModelCallPort",
    "ModelCallRecord",
    "Problem",
    "PromptSpec",
    "RandomIds",
    "ReadOnlyDatabaseError",
    "RecordedEvent",
    "RecordedFunction",
    "RecordedToolError",
    "RequestKeys",
    "Run",
    "RunClosedError",
    "RunInfo",
    "RunPrivacy",
    "RunQuery",
    "RunRecorder",
    "RunTotals",
    "SequentialIds",
    "ServedCall",
    "StepClock",
    "StorageError",
    "SubjectKey",
    "SystemClock",
    "ToolSpec",
    "TransparencyLog",
    "TransparencyLogError",
    "UninstrumentableClientError",
    "UnknownBlobError",
    "UnknownRunError",
    "UnknownSchemeError",
    "UnknownSubjectError",
    "UsageError",
    "VerifyReport",
    "as_recorded",
    "blob_ref",
    "blob_refs_in",
    "call_fingerprint",
    "canonical_json",
    "entry_point",
    "envelope_hash",
    "format_timestamp",
    "instrumentation_for",
    "instrumentations",
    "load_entry",
    "pack_blob",
    "parse_timestamp",
    "policy_of",
    "raise_recorded",
    "recorded_function",
    "register_instrumentation",
    "request_refs",
    "unpack_blob",
    "unpack_state",
    "verify_export",
    "verify_run",
]
