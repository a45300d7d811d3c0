"""`RunRecorder`: the documented API for recording a run from any Python code.

A recorder appends catalogue events to one run, stores large values and conversations as
content-addressed blobs (a conversation is a chain of message nodes, so a growing history
stores each message once), batches a step's events into one transaction, and closes the run:
RunCompleted on normal exit, RunFailed (then re-raise) if the block raises. Each event is checked
(schema, JSON rules, the ledger's `Limits`) when it is recorded, and a method that records
several events or blobs builds and checks all of them before recording any: if one is refused,
nothing of that call is recorded. Must not know agents or vendor SDKs: model calls and tool
calls arrive as plain JSON.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from agentledger.ledger._canonical import canonical_json
from agentledger.ledger._hashing import blob_ref
from agentledger.ledger._instrument import (
    CallRecord,
    ModelCallPort,
    ServedCall,
    instrumentation_for,
)
from agentledger.ledger._ledger import Prepared
from agentledger.ledger._records import RecordedEvent
from agentledger.ledger.errors import (
    InvalidEventError,
    InvalidPayloadError,
    LedgerError,
    RunClosedError,
)
from agentledger.ledger.events import (
    Attempt,
    ClarificationRequested,
    DeltaApplied,
    ErrorInfo,
    GuardrailTripped,
    LedgerEvent,
    ModelCalled,
    PlanProposed,
    PolicyDecided,
    PromptRef,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepCompleted,
    StepStarted,
    SynthesisProduced,
    ToolCalled,
    ToolErrorInfo,
    ToolReturned,
    Usage,
    request_fingerprint,
)

if TYPE_CHECKING:
    from agentledger.ledger._ledger import Ledger
    from agentledger.ledger._run import Run

__all__ = ["ModelCallRecord", "RunRecorder"]

_M = TypeVar("_M", bound=BaseModel)

INLINE_LIMIT = 4096
"""JSON values larger than this (serialised bytes) are stored as blobs, referenced by hash."""
_SIZER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class ModelCallRecord:
    """What recording a model call produced: where, and the refs of its request and answer."""

    position: int
    call_id: str
    messages_ref: str
    response_ref: str | None
    fingerprint: str


class RunRecorder:
    """Records one run. Use as a context manager; see `Ledger.record_run`."""

    def __init__(self, ledger: Ledger, run: Run) -> None:
        self._ledger = ledger
        self._run = run
        self._pending: list[Prepared] = []
        self._blobs: dict[str, bytes] = {}
        self._staged_refs: list[str] | None = None
        self._ready: tuple[LedgerEvent, Prepared] | None = None
        self._depth = 0
        self._counters: dict[str, int] = {}
        self._chain_messages: list[Any] = []
        self._chain_refs: list[str] = []
        self._written: set[str] = set()
        self.recorded: list[RecordedEvent] = []

    @classmethod
    def _start(cls, ledger: Ledger, started: RunStarted, run_id: str) -> RunRecorder:
        blobs: dict[str, bytes] = {}
        if started.input is not None and len(canonical_json(started.input)) > INLINE_LIMIT:
            canonical = ledger.limits.canonical(started.input, "the run's input")
            ref = blob_ref(canonical)
            blobs[ref] = canonical
            started = started.model_copy(update={"input": None, "input_ref": ref})
        recorded = ledger._commit(None, [started], blobs, started=(run_id, started))
        recorder = cls(ledger, ledger.load(run_id))
        recorder.recorded.extend(recorded)
        return recorder

    # State -----------------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._run.run_id

    @property
    def position(self) -> int:
        """Position of the last event recorded or pending."""
        return self._run.position + len(self._pending)

    @property
    def status(self) -> str:
        """'running', 'completed' or 'failed'."""
        return self._run.status

    @property
    def ledger(self) -> Ledger:
        """The ledger this run records into."""
        return self._ledger

    def new_id(self, prefix: str) -> str:
        """A run-local id such as ``call-3`` (deterministic: replay reproduces it)."""
        self._counters[prefix] = self._counters.get(prefix, 0) + 1
        return f"{prefix}-{self._counters[prefix]}"

    # Core ------------------------------------------------------------------------------------

    def record(self, event: LedgerEvent) -> int:
        """Append any catalogue event; returns its position. Flushed now unless in a batch.

        The event is checked against the ledger's `Limits` here, so a refused one raises at
        this call and never joins the batch.
        """
        if not isinstance(event, LedgerEvent):
            raise InvalidEventError(type(event).__name__, "record() takes a catalogue event")
        if self._run.status != "running":
            raise RunClosedError(self.run_id, self._run.status)
        if event.kind == "RunStarted":
            raise InvalidEventError(event.kind, "a run starts once: use Ledger.record_run()")
        ready, self._ready = self._ready, None
        prepared = ready[1] if ready is not None and ready[0] is event else None
        self._pending.append(prepared or self._ledger._prepare(event))
        position = self.position
        if self._depth == 0:
            self.flush()
        return position

    def flush(self) -> None:
        """Commit pending events and their blobs in one transaction."""
        if not self._pending:
            return
        events, blobs = self._pending, self._blobs
        self._pending, self._blobs = [], {}
        self.recorded.extend(self._ledger._commit(self._run, events, blobs))
        self._written.update(blobs)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group the events recorded inside the block into one transaction."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.flush()

    def put_blob(self, value: Any) -> str:
        """Store a JSON value by content (written with the next flush); returns its ref.

        Raises `LimitExceededError` if the value is over the ledger's `Limits`.
        """
        canonical = self._ledger.limits.canonical(value, "a blob")
        ref = blob_ref(canonical)
        if ref not in self._written and ref not in self._blobs:
            self._blobs[ref] = canonical
            if self._staged_refs is not None:
                self._staged_refs.append(ref)
        return ref

    @contextmanager
    def _staged(self, *, chain: bool = False) -> Iterator[None]:
        """Undo what the block staged if it raises: pending events, blobs, ids (and the chain).

        Wraps each recording method, so a refused value leaves nothing behind for a later flush.
        """
        pending = len(self._pending)
        counters = dict(self._counters)
        saved = (list(self._chain_messages), list(self._chain_refs)) if chain else None
        outer, self._staged_refs = self._staged_refs, []
        try:
            yield
        except BaseException:
            del self._pending[pending:]
            for ref in self._staged_refs:
                self._blobs.pop(ref, None)
            self._counters = counters
            if saved is not None:
                self._chain_messages, self._chain_refs = saved
            self._ready = None
            raise
        finally:
            staged, self._staged_refs = self._staged_refs, outer
            if outer is not None:
                outer.extend(staged)

    def _inline_or_ref(self, value: Any) -> tuple[Any, str | None]:
        if value is None:
            return None, None
        try:
            size = len(_SIZER.encode(value))
        except (TypeError, ValueError, RecursionError):
            return value, None  # not JSON, or too deep: the event's validation names the problem
        if size > INLINE_LIMIT:
            return None, self.put_blob(value)
        return value, None

    # Conversation chains ---------------------------------------------------------------------

    def messages_ref(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The ref of a conversation's head node, storing only messages not stored before."""
        if not messages:
            return self.put_blob({"message": None, "parent_ref": None})
        chain = self._chain_messages
        known = len(chain)
        if len(messages) >= known and list(messages[:known]) == chain:
            shared = known  # the usual case: the history grew (one C-level comparison)
        else:
            shared = 0
            limit = min(len(messages), known)
            while shared < limit and messages[shared] == chain[shared]:
                shared += 1
        refs = self._chain_refs[:shared]
        parent = refs[-1] if refs else None
        del chain[shared:]
        for message in messages[shared:]:
            copy = dict(message)  # a copy: the caller may mutate its list of messages later
            parent = self.put_blob({"message": copy, "parent_ref": parent})
            refs.append(parent)
            chain.append(copy)
        self._chain_refs = refs
        assert parent is not None
        return parent

    def prompt(self, name: str, version: str, text: str) -> PromptRef:
        """Store a prompt's text and return its versioned, hashed reference."""
        ref = self.put_blob(text)
        return PromptRef(name=name, version=version, hash=ref, text_ref=ref)

    # Instrumented clients --------------------------------------------------------------------

    def instrument(self, client: Any) -> Any:
        """``client`` (an OpenAI or Anthropic SDK client, sync or async) with its calls recorded.

        The returned object has the client's interface; every model call made through it is
        recorded as ModelCalled (streams are passed through chunk by chunk and recorded when they
        end). Raises `UninstrumentableClientError` when no installed instrumentation handles the
        client's type.
        """
        return instrumentation_for(client).wrap(client, self.model_port())

    def model_port(self) -> ModelCallPort:
        """The port instrumented clients record through (a replaying recorder serves instead)."""
        return _LivePort(self)

    def record_call(self, call: CallRecord) -> int:
        """Record one instrumented call as ModelCalled; returns its position."""
        return self.model_call(
            provider=call.provider,
            model=call.model,
            messages=call.messages,
            response=call.response,
            params=call.params,
            tools=call.tools,
            usage=dict(call.usage),
            latency_ms=call.latency_ms,
            attempts=call.attempts,
            error=call.error,
            finish_reason=call.finish_reason,
            ttft_ms=call.ttft_ms,
            chunks=call.chunks,
        ).position

    # Typed helpers ---------------------------------------------------------------------------

    def model_call(
        self,
        *,
        provider: str,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        response: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        usage: Usage | Mapping[str, int] | None = None,
        cost_usd: float | None = None,
        latency_ms: float = 0.0,
        attempts: Sequence[Attempt] = (),
        error: ErrorInfo | None = None,
        finish_reason: str | None = None,
        prompt: PromptRef | None = None,
        step_id: str | None = None,
        call_id: str | None = None,
        actor: str | None = None,
        caused_by: int | None = None,
        served_from: str | None = None,
        ttft_ms: float | None = None,
        chunks: Sequence[Sequence[float]] | None = None,
    ) -> ModelCallRecord:
        """Record one model call: messages (as a chain), response, usage, latency, attempts.

        A streamed call also gives its time to first token and per-chunk timings
        (``[[ms since the request, characters], ...]``, stored as a blob).
        """
        with self._staged(chain=True):
            return self._model_call(
                provider=provider,
                model=model,
                messages=messages,
                response=response,
                params=params,
                tools=tools,
                usage=usage,
                cost_usd=cost_usd,
                latency_ms=latency_ms,
                attempts=attempts,
                error=error,
                finish_reason=finish_reason,
                prompt=prompt,
                step_id=step_id,
                call_id=call_id,
                actor=actor,
                caused_by=caused_by,
                served_from=served_from,
                ttft_ms=ttft_ms,
                chunks=chunks,
            )

    def _model_call(
        self,
        *,
        provider: str,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        response: Mapping[str, Any] | None,
        params: Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        usage: Usage | Mapping[str, int] | None,
        cost_usd: float | None,
        latency_ms: float,
        attempts: Sequence[Attempt],
        error: ErrorInfo | None,
        finish_reason: str | None,
        prompt: PromptRef | None,
        step_id: str | None,
        call_id: str | None,
        actor: str | None,
        caused_by: int | None,
        served_from: str | None,
        ttft_ms: float | None = None,
        chunks: Sequence[Sequence[float]] | None = None,
    ) -> ModelCallRecord:
        head = self.messages_ref(messages)
        chunks_ref = None
        if chunks is not None:
            chunks_ref = self.put_blob({"chunks": [list(chunk) for chunk in chunks]})
        tools_ref = self.put_blob(list(tools)) if tools else None
        params_dict = dict(params or {})
        response_ref = None
        if response is not None:
            response_ref = self.put_blob({"message": dict(response), "parent_ref": head})
        call_id = call_id or self.new_id("call")
        event = _build(
            ModelCalled,
            call_id=call_id,
            step_id=step_id,
            provider=provider,
            model=model,
            params=params_dict,
            prompt=prompt,
            messages_ref=head,
            message_count=len(messages),
            tools_ref=tools_ref,
            response_ref=response_ref,
            finish_reason=finish_reason,
            usage=usage if isinstance(usage, Usage) else _build(Usage, **dict(usage or {})),
            cost_usd=cost_usd,
            latency_ms=latency_ms,
            attempts=list(attempts),
            error=error,
            actor=actor or f"{provider}:{model}",
            caused_by=caused_by,
            served_from=served_from,
            ttft_ms=ttft_ms,
            chunk_count=len(chunks) if chunks is not None else None,
            chunks_ref=chunks_ref,
        )
        position = self.record(event)
        fingerprint = request_fingerprint(
            {"model": model, "params": params_dict, "messages_ref": head, "tools_ref": tools_ref}
        )
        return ModelCallRecord(position, call_id, head, response_ref, fingerprint)

    def tool_call(
        self,
        tool: str,
        arguments: Any,
        *,
        call_id: str | None = None,
        tool_version: str = "1",
        risk: str = "low",
        effectful: bool = False,
        step_id: str | None = None,
        caused_by: int | None = None,
    ) -> tuple[str, int]:
        """Record that a tool was called; returns (call id, position)."""
        with self._staged():
            call_id = call_id or self.new_id("tool")
            event = self._tool_called(
                tool,
                arguments,
                call_id=call_id,
                tool_version=tool_version,
                risk=risk,
                effectful=effectful,
                step_id=step_id,
                caused_by=caused_by,
            )
            return call_id, self.record(event)

    def _tool_called(
        self,
        tool: str,
        arguments: Any,
        *,
        call_id: str,
        tool_version: str,
        risk: str,
        effectful: bool,
        step_id: str | None,
        caused_by: int | None,
    ) -> ToolCalled:
        inline, ref = self._inline_or_ref(arguments)
        return _build(
            ToolCalled,
            call_id=call_id,
            tool=tool,
            tool_version=tool_version,
            arguments=inline,
            arguments_ref=ref,
            step_id=step_id,
            risk=risk,
            effectful=effectful,
            actor=f"tool:{tool}",
            caused_by=caused_by,
        )

    def tool_result(
        self,
        call_id: str,
        *,
        ok: bool,
        type: str,  # noqa: A002 - the envelope's field name
        data: Any = None,
        error: ToolErrorInfo | None = None,
        latency_ms: float = 0.0,
        caused_by: int | None = None,
        served_from: str | None = None,
    ) -> int:
        """Record a tool's result envelope."""
        with self._staged():
            return self.record(
                self._tool_returned(
                    call_id,
                    ok=ok,
                    type=type,
                    data=data,
                    error=error,
                    latency_ms=latency_ms,
                    caused_by=caused_by,
                    served_from=served_from,
                )
            )

    def _tool_returned(
        self,
        call_id: str,
        *,
        ok: bool,
        type: str,  # noqa: A002 - the envelope's field name
        data: Any,
        error: ToolErrorInfo | None,
        latency_ms: float,
        caused_by: int | None,
        served_from: str | None,
    ) -> ToolReturned:
        inline, ref = self._inline_or_ref(data)
        return _build(
            ToolReturned,
            call_id=call_id,
            ok=ok,
            type=type,
            data=inline,
            data_ref=ref,
            error=error,
            latency_ms=latency_ms,
            caused_by=caused_by,
            served_from=served_from,
        )

    def tool(
        self,
        tool: str,
        arguments: Any,
        *,
        result: Any = None,
        error: ToolErrorInfo | None = None,
        latency_ms: float = 0.0,
        step_id: str | None = None,
        effectful: bool = False,
    ) -> str:
        """Record a tool call and its result together; returns the call id.

        Both events (and their blobs) are built and checked first: a refused argument or result
        records neither, so a ToolCalled never stands without its ToolReturned.
        """
        with self.batch(), self._staged():
            call_id = self.new_id("tool")
            called = self._tool_called(
                tool,
                arguments,
                call_id=call_id,
                tool_version="1",
                risk="low",
                effectful=effectful,
                step_id=step_id,
                caused_by=None,
            )
            returned = self._tool_returned(
                call_id,
                ok=error is None,
                type=tool,
                data=result,
                error=error,
                latency_ms=latency_ms,
                caused_by=self.position + 1,
                served_from=None,
            )
            ready = (returned, self._ledger._prepare(returned))
            position = self.record(called)
            if position == returned.caused_by:
                self._ready = ready
            else:  # a hook recorded something first: the result points at the call's position
                returned = returned.model_copy(update={"caused_by": position})
            self.record(returned)
        return call_id

    def delta(
        self,
        patch: Mapping[str, Any],
        *,
        step_id: str | None = None,
        source: str | None = None,
        caused_by: int | None = None,
    ) -> int:
        """Record a JSON Merge Patch to the world state (must be an object at top level)."""
        if not isinstance(patch, Mapping):
            raise InvalidPayloadError(
                "", f"a delta must be a JSON object, not {type(patch).__name__}"
            )
        return self.record(
            _build(
                DeltaApplied, patch=dict(patch), step_id=step_id, source=source, caused_by=caused_by
            )
        )

    def plan(self, plan: Any, *, step_id: str | None = None, caused_by: int | None = None) -> int:
        """Record a proposed plan."""
        return self.record(_build(PlanProposed, plan=plan, step_id=step_id, caused_by=caused_by))

    def policy(self, decision: str, **fields: Any) -> int:
        """Record a policy decision (allow, redact or block)."""
        return self.record(_build(PolicyDecided, decision=decision, **fields))

    def guardrail(self, guardrail: str, *, action: str, message: str, **fields: Any) -> int:
        """Record a guardrail trip."""
        return self.record(
            _build(GuardrailTripped, guardrail=guardrail, action=action, message=message, **fields)
        )

    def clarify(self, question: str, *, step_id: str | None = None) -> int:
        """Record that the run asks the user a question instead of answering."""
        return self.record(_build(ClarificationRequested, question=question, step_id=step_id))

    def answer(
        self,
        answer: str,
        *,
        evidence_ids: Sequence[str] = (),
        step_id: str | None = None,
        caused_by: int | None = None,
    ) -> int:
        """Record the synthesized answer and the evidence ids it cites."""
        with self._staged():
            inline, ref = self._inline_or_ref(answer)
            return self.record(
                _build(
                    SynthesisProduced,
                    answer=inline,
                    answer_ref=ref,
                    evidence_ids=list(evidence_ids),
                    step_id=step_id,
                    caused_by=caused_by,
                )
            )

    @contextmanager
    def step(self, name: str, args: Any = None, *, step_id: str | None = None) -> Iterator[str]:
        """Record a step: StepStarted, the block's events, StepCompleted (one transaction)."""
        step_id = step_id or self.new_id("step")
        with self.batch():
            self.record(_build(StepStarted, step_id=step_id, name=name, args=args))
            try:
                yield step_id
            except BaseException as e:
                self.record(
                    _build(StepCompleted, step_id=step_id, status="failed", error=_error(e))
                )
                raise
            self.record(_build(StepCompleted, step_id=step_id, status="ok"))

    # Closing ---------------------------------------------------------------------------------

    def complete(self, outcome: str = "answered") -> RecordedEvent:
        """Record RunCompleted (with the event count and head hash) and close the run."""
        self.flush()
        event = _build(
            RunCompleted,
            event_count=self.position + 1,
            head_hash=self._run.head_hash,
            outcome=outcome,
        )
        self.record(event)
        return self.recorded[-1]

    def fail(self, error: BaseException | ErrorInfo) -> RecordedEvent:
        """Record RunFailed with the error and close the run."""
        try:
            self.flush()
        except LedgerError:
            self._pending.clear()
            self._blobs.clear()
        info = error if isinstance(error, ErrorInfo) else _error(error)
        self.record(
            _build(
                RunFailed,
                event_count=self.position + 1,
                head_hash=self._run.head_hash,
                error=info,
            )
        )
        return self.recorded[-1]

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._run.status != "running":
            return
        if exc is None:
            self.complete()
        else:
            self._depth = 0
            self.fail(exc)


class _LivePort:
    """The recording port: each finished call becomes a ModelCalled; nothing is served."""

    def __init__(self, recorder: RunRecorder) -> None:
        self._recorder = recorder

    @property
    def replaying(self) -> bool:
        return False

    def record_call(self, call: CallRecord) -> int:
        return self._recorder.record_call(call)

    async def arecord_call(self, call: CallRecord) -> int:
        import asyncio  # only async callers pay for it

        return await asyncio.to_thread(self._recorder.record_call, call)

    def serve_call(self, call: CallRecord) -> ServedCall:
        del call
        msg = "a recording run serves nothing from a record: call the model"
        raise LedgerError(msg)


def _build(schema: type[_M], /, **fields: Any) -> _M:
    """Construct a catalogue model, reporting a schema failure as `InvalidEventError`."""
    try:
        return schema(**fields)
    except ValidationError as e:
        details = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or '(event)'}: {item['msg']}"
            for item in e.errors()
        )
        kind = getattr(schema, "kind", schema.__name__)
        raise InvalidEventError(kind, details) from None


_ERROR_TEXT = 4000
"""How much of an error's message (its start) and traceback (its end) a failure records."""


def _error(error: BaseException) -> ErrorInfo:
    """An exception as recorded: always recordable (bounded, lone surrogates escaped).

    A failed step or run must be recordable whatever the exception holds, so the message keeps
    its first and the traceback its last 4,000 characters, and a lone surrogate (which JSON
    cannot carry) becomes its backslash escape.
    """
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__, limit=5))
    return ErrorInfo(
        type=_text(type(error).__name__),
        message=_text(str(error)[:_ERROR_TEXT]),
        traceback=_text(text[-_ERROR_TEXT:]),
    )


def _text(text: str) -> str:
    """`text` with each lone surrogate written as its backslash escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
