"""The event catalogue: every kind of fact a run records, as frozen pydantic models.

Owns the payload schemas, their `class_version`s and upcasters. Events are past tense; payloads
are JSON-native (`JSONValue` is checked strictly, never coerced). Fields named ``*_ref`` hold
content-addressed blob references (``sha256:<hex>``); ``*_refs`` hold lists of them. Must not know
storage, hashing or agents.

Versioning follows eventsourcing's convention: a class with ``class_version = 2`` defines
``upcast_v1_v2(payload: dict) -> None`` which edits an old stored payload in place on read. The
stored payload itself is never edited, so its hash still verifies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from agentledger.ledger._canonical import MAX_SAFE_INTEGER, canonical_json, check_json_native

__all__ = [
    "EVENT_TYPES",
    "Attempt",
    "BlobRef",
    "ClarificationRequested",
    "ConfigIdentity",
    "DeltaApplied",
    "EntryPoint",
    "ErasureRecorded",
    "ErrorInfo",
    "GuardrailTripped",
    "JSONValue",
    "LedgerEvent",
    "ModelCalled",
    "ModelConfig",
    "PlanProposed",
    "PolicyDecided",
    "PromptRef",
    "Redaction",
    "RunAnnotated",
    "RunCompleted",
    "RunFailed",
    "RunStarted",
    "StepCompleted",
    "StepStarted",
    "SynthesisProduced",
    "ToolCalled",
    "ToolErrorInfo",
    "ToolReturned",
    "Usage",
    "event_type",
    "request_fingerprint",
]


def _strict_json(value: Any) -> Any:
    check_json_native(value)
    return value


JSONValue = Annotated[Any, BeforeValidator(_strict_json)]
"""Any JSON-native value, checked under the hashing rules and never coerced."""

JSONObject = Annotated[dict[str, Any], BeforeValidator(_strict_json)]
BlobRef = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
HashHex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
"""An integer JSON carries exactly (the hashing rules); larger numbers are recorded as strings."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, defer_build=True)


class LedgerEvent(_Model):
    """Base of every recorded event payload.

    `actor` names who acted (agent role, model, tool); `caused_by` is the position of the event
    that caused this one (a model call causes a tool call, a tool result causes a delta).
    """

    kind: ClassVar[str] = "LedgerEvent"
    class_version: ClassVar[int] = 1

    actor: str | None = None
    caused_by: SafeInt | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" not in cls.__dict__:
            cls.kind = cls.__name__


class PromptRef(_Model):
    """A named, versioned prompt and the hash of its exact text."""

    name: str
    version: str
    hash: BlobRef
    text_ref: BlobRef | None = None


class ModelConfig(_Model):
    """What a model role was configured as for a run."""

    provider: str
    model: str
    params: JSONObject = Field(default_factory=dict)


class ConfigIdentity(_Model):
    """Everything that identifies how a run was configured, for audit and diff."""

    models: dict[str, ModelConfig] = Field(default_factory=dict)
    prompts: dict[str, PromptRef] = Field(default_factory=dict)
    tools: dict[str, str] = Field(default_factory=dict)
    code_version: str = "unknown"
    settings: JSONObject = Field(default_factory=dict)
    redaction: JSONObject | Literal["off"] | None = None
    """The redaction policy the run recorded with (``RedactionPolicy`` as JSON), ``"off"`` for
    none; None for a run recorded before redaction was configurable (it redacted nothing)."""


class ErrorInfo(_Model):
    """An error as recorded: its type, message and, when useful, a short traceback."""

    type: str
    message: str
    traceback: str | None = None


class Usage(_Model):
    """Token usage of one model call."""

    input_tokens: SafeInt = 0
    output_tokens: SafeInt = 0
    total_tokens: SafeInt = 0


class Attempt(_Model):
    """One attempt at a model call, as the retry loop saw it."""

    number: SafeInt
    status_code: SafeInt | None = None
    error_type: str | None = None
    error_message: str | None = None
    latency_ms: float = 0.0
    backoff_s: float = 0.0


class Redaction(_Model):
    """What the policy gate redacted: the kind of data and how many occurrences."""

    kind: str
    count: SafeInt


class ToolErrorInfo(_Model):
    """The error half of a tool result envelope."""

    code: str
    message: str
    retryable: bool = False


class EntryPoint(_Model):
    """The user function a run recorded (`Ledger.record_function`): where its code lives.

    `path` is its import path (``module:qualname``; a script run as ``python my_agent.py`` is
    named by its module name, never ``__main__``), `file` the source file as given at recording
    time and `source_hash` the SHA-256 of the function's source text (``sha256:<hex>``).
    """

    path: str
    file: str | None = None
    source_hash: str | None = None


class RunStarted(LedgerEvent):
    """A run began: its input, configuration identity, tags and lineage.

    `entry` is set for a run recorded from a user's function (`Ledger.record_function`): replay
    imports that function and runs it again against the record.
    """

    agent: str
    input: JSONValue = None
    input_ref: BlobRef | None = None
    config: ConfigIdentity = Field(default_factory=ConfigIdentity)
    tags: list[str] = Field(default_factory=list)
    parent_run_id: str | None = None
    parent_position: SafeInt | None = None
    relation: Literal["fork", "rerun", "resume"] | None = None
    overrides: JSONObject = Field(default_factory=dict)
    entry: EntryPoint | None = None
    subject_key: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")] | None = None
    """For a run tied to a data subject (``record_run(..., subject=...)``): the id of the
    subject's key, under which its content blobs are sealed. Never the subject or the key."""


class PolicyDecided(LedgerEvent):
    """The policy gate allowed, redacted or blocked a request before anything else ran."""

    decision: Literal["allow", "redact", "block"]
    reasons: list[str] = Field(default_factory=list)
    redactions: list[Redaction] = Field(default_factory=list)
    risk_tags: list[str] = Field(default_factory=list)


class PlanProposed(LedgerEvent):
    """A plan (or router plan) that an agent proposed."""

    plan: JSONValue
    step_id: str | None = None


class StepStarted(LedgerEvent):
    """A step of a plan or loop began."""

    step_id: str
    name: str
    args: JSONValue = None
    parent_step_id: str | None = None


class StepCompleted(LedgerEvent):
    """A step finished: ok, failed or skipped."""

    step_id: str
    status: Literal["ok", "failed", "skipped"]
    output: JSONValue = None
    error: ErrorInfo | None = None


class ModelCalled(LedgerEvent):
    """One model call: request by reference, response, usage, latency, attempts and errors.

    `messages_ref` is the head of the conversation's message chain (each node a blob holding one
    message and its parent's ref), so a growing conversation stores each message once.
    `response_ref` is the node the response adds to that chain. Two calls made the same
    request exactly when `request_fingerprint(payload)` agrees (model, params, messages_ref,
    tools_ref): it is derived, so it is not stored. A streamed call also records its time to
    first token (`ttft_ms`), its chunk count and `chunks_ref`, a blob of per-chunk timings
    (``[[ms since the request, characters], ...]``); the response is the assembled one.
    """

    call_id: str
    step_id: str | None = None
    provider: str
    model: str
    params: JSONObject = Field(default_factory=dict)
    prompt: PromptRef | None = None
    messages_ref: BlobRef
    message_count: SafeInt
    tools_ref: BlobRef | None = None
    response_ref: BlobRef | None = None
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    latency_ms: float = 0.0
    attempts: list[Attempt] = Field(default_factory=list)
    error: ErrorInfo | None = None
    served_from: str | None = None
    ttft_ms: float | None = None
    chunk_count: SafeInt | None = None
    chunks_ref: BlobRef | None = None


class ToolCalled(LedgerEvent):
    """A tool was called with these arguments."""

    call_id: str
    tool: str
    tool_version: str = "1"
    arguments: JSONValue = None
    arguments_ref: BlobRef | None = None
    step_id: str | None = None
    risk: str = "low"
    effectful: bool = False


class ToolReturned(LedgerEvent):
    """A tool's result envelope, as the executor received it.

    Version 2 records latency in milliseconds (`latency_ms`); version 1 recorded seconds as
    `latency_s`. Version 1 payloads are upcast on read and still verify as stored.
    """

    class_version: ClassVar[int] = 2

    @staticmethod
    def upcast_v1_v2(payload: dict[str, Any]) -> None:
        """Version 1 recorded `latency_s` (seconds); version 2 records `latency_ms`."""
        seconds = payload.pop("latency_s", None)
        if seconds is not None:
            payload["latency_ms"] = float(seconds) * 1000.0

    call_id: str
    ok: bool
    type: str
    data: JSONValue = None
    data_ref: BlobRef | None = None
    error: ToolErrorInfo | None = None
    latency_ms: float = 0.0
    served_from: str | None = None


class DeltaApplied(LedgerEvent):
    """A JSON Merge Patch (RFC 7386) applied to the run's world state.

    A delta tied to a data subject stores its patch as a sealed blob: `patch` is then ``{}``
    and `patch_ref` names the blob holding the patch.
    """

    patch: JSONObject
    patch_ref: BlobRef | None = None
    step_id: str | None = None
    source: str | None = None


class GuardrailTripped(LedgerEvent):
    """A guardrail stopped or changed what the run would have done."""

    guardrail: str
    limit: JSONValue = None
    observed: JSONValue = None
    action: str
    message: str
    step_id: str | None = None


class ClarificationRequested(LedgerEvent):
    """The run stopped to ask the user a question instead of answering."""

    question: str
    step_id: str | None = None


class SynthesisProduced(LedgerEvent):
    """The answer, with the evidence ids it cites."""

    answer: str | None = None
    answer_ref: BlobRef | None = None
    evidence_ids: list[str] = Field(default_factory=list)
    step_id: str | None = None


class RunCompleted(LedgerEvent):
    """The run ended normally. `event_count` counts this event; `head_hash` is its prev."""

    event_count: SafeInt
    head_hash: HashHex
    outcome: str = "answered"


class RunFailed(LedgerEvent):
    """The run ended with an error. Carries the count and head hash, like RunCompleted."""

    event_count: SafeInt
    head_hash: HashHex
    error: ErrorInfo


class RunAnnotated(LedgerEvent):
    """A later human note on a run: who, when (the envelope's time), why. Never an edit."""

    author: str
    note: str
    reason: str | None = None
    about_position: SafeInt | None = None
    labels: list[str] = Field(default_factory=list)


class ErasureRecorded(LedgerEvent):
    """A data subject's key was destroyed: their sealed content now reads as ``[erased]``.

    Recorded in the ledger's own erasure stream (not a run). `subject_digest` is an HMAC-SHA256
    of the subject under the ledger's salt (``hmac-sha256:<hex>``), so the record never holds
    the subject itself; `key_id` names the destroyed key, `runs` the runs whose content it
    sealed and `blobs` how many of their blobs became unreadable. Who asked and why are
    `requested_by` and `reason`; when is the envelope's time.
    """

    subject_digest: str
    key_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
    requested_by: str
    reason: str
    runs: list[str] = Field(default_factory=list)
    blobs: SafeInt = 0


_CATALOGUE: tuple[type[LedgerEvent], ...] = (
    RunStarted,
    PolicyDecided,
    PlanProposed,
    StepStarted,
    StepCompleted,
    ModelCalled,
    ToolCalled,
    ToolReturned,
    DeltaApplied,
    GuardrailTripped,
    ClarificationRequested,
    SynthesisProduced,
    RunCompleted,
    RunFailed,
    RunAnnotated,
    ErasureRecorded,
)

EVENT_TYPES: Mapping[str, type[LedgerEvent]] = MappingProxyType({c.kind: c for c in _CATALOGUE})
"""Every event kind the ledger knows, by name."""

TERMINAL_KINDS = frozenset({"RunCompleted", "RunFailed"})


def event_type(kind: str) -> type[LedgerEvent]:
    """Return the event class recorded under `kind`."""
    try:
        return EVENT_TYPES[kind]
    except KeyError:
        msg = f"unknown event kind {kind!r}; known: {', '.join(sorted(EVENT_TYPES))}"
        raise KeyError(msg) from None


def request_fingerprint(payload: Mapping[str, Any]) -> str:
    """Identify a ModelCalled's request: equal exactly when model, params, messages, tools are."""
    body = {
        "model": payload.get("model"),
        "params": payload.get("params", {}),
        "messages_ref": payload.get("messages_ref"),
        "tools_ref": payload.get("tools_ref"),
    }
    return "sha256:" + hashlib.sha256(canonical_json(body)).hexdigest()


def upcast(kind: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of a stored payload brought up to its class's current version."""
    cls = event_type(kind)
    if version == cls.class_version:
        return payload
    if version > cls.class_version:
        msg = f"{kind} v{version} is newer than this code's v{cls.class_version}"
        raise ValueError(msg)
    upgraded = dict(payload)
    while version < cls.class_version:
        getattr(cls, f"upcast_v{version}_v{version + 1}")(upgraded)
        version += 1
    return upgraded
