"""agentledger.ledger: the event store of agent runs.

The event catalogue, the `Run` aggregate, the per-run hash chain, content-addressed blobs,
persistence (SQLite, PostgreSQL, memory), the ledger-wide transparency log with its signed
checkpoints, and the `Ledger` facade with its recording API. The submodules `merkle` (RFC 9162),
`signed_note` (C2SP signed notes, Ed25519 keys) and `redaction` (personal data and secrets found
and redacted) are public too. Knows nothing of agents or
vendor SDKs.
"""

from typing import TYPE_CHECKING, Any

from agentledger.ledger._canonical import as_recorded, canonical_json
from agentledger.ledger._codec import DICTIONARY_V1, pack_blob, unpack_blob, unpack_state
from agentledger.ledger._entry import (
    EntryError,
    PromptSpec,
    RecordedFunction,
    entry_point,
    load_entry,
    recorded_function,
)
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
from agentledger.ledger._ledger import Ledger, RunQuery
from agentledger.ledger._limits import Limits
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
from agentledger.ledger._records import RecordedEvent, RunInfo, RunTotals
from agentledger.ledger._run import Run
from agentledger.ledger._subjects import ERASED, ERASURE_STREAM, Erased, SubjectKey
from agentledger.ledger._tooling import RecordedToolError, ToolSpec, raise_recorded
from agentledger.ledger._verify import Problem, VerifyReport, blob_refs_in, verify_run
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
    from agentledger.ledger._checkpoint import Checkpoint, CheckpointFormatError
    from agentledger.ledger._erasure import ErasureResult
    from agentledger.ledger._logging import EventLogger
    from agentledger.ledger._tlog import CheckpointCheck, LogHead, LogProblem, TransparencyLog

_LAZY = {
    "ExportVerification": "_audit_file",
    "verify_export": "_audit_file",
    "Checkpoint": "_checkpoint",
    "CheckpointFormatError": "_checkpoint",
    "ErasureResult": "_erasure",
    "EventLogger": "_logging",
    "CheckpointCheck": "_tlog",
    "LogHead": "_tlog",
    "LogProblem": "_tlog",
    "TransparencyLog": "_tlog",
}
"""Names loaded on first use: the transparency log, audit files and logging pull in the signing
library, psycopg's SQL composer and structlog, which most commands never need."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
