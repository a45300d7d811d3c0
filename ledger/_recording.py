"""`RunRecorder`: the documented API for recording a run from any Python code.

A recorder appends catalogue events to one run, stores large values and conversations as
content-addressed blobs (a conversation is a chain of message nodes, so a growing history
stores each message once), batches a step's events into one transaction, and closes the run:
RunCompleted on normal exit, RunFailed (then re-raise) if the block raises. Each event is checked
(schema, JSON rules, the ledger's `Limits`) when it is recorded, and a method that records
several events or blobs builds and checks all of them before recording any: if one is refused,
nothing of that call is recorded. Must not know agents or vendor SDKs: model calls and tool
calls arrive as plain JSON.

**Threads and tasks.** One recorder may be written from several threads and asyncio tasks at
once. Each recording method runs under the recorder's lock and takes the next position when it
records (a model call's single ModelCalled when the call has completed, so concurrent calls are
recorded in completion order; a recorded tool's ToolCalled when it is called and its
ToolReturned when it returns); a method that records several events (``tool``, ``model_call``'s
blobs) records them together. Commits go through the ledger's group committer in the order the
positions were taken, so no two writers of one run ever race for a position. While a batch (a
``step``) is open, events from every thread and task join its transaction.

**Async.** The ``a``-prefixed methods (``amodel_call``, ``atool``, ``adelta``...) record the
same events and hand the commit to a worker thread without waiting for it (write-behind): the
event loop never waits on database I/O, and concurrent runs share each commit (the worker
commits within 5 ms, so the calls of that window share one transaction). Durability
points wait for every commit of the run: ``await run.aflush()``, the end of the run (``async
with`` exit, ``acomplete``, ``afail``) and a recorded effectful tool, whose ToolCalled is
committed before the tool runs. A commit that failed is raised by the run's next recording call,
before it records anything.
The sync methods commit before they return, with one exception: a call through an instrumented
client (``run.instrument``), sync or async, is recorded the same write-behind way, since the code
that made it gets the SDK's answer, not a record to act on. Its commit then shares the worker's
next transaction instead of delaying the caller (with ``durability="full"``, instead of an
``fsync`` per call), and the run's next sync recording method, flush or end waits for it.
"""

from __future__ import annotations

import functools
import json
import threading
import traceback
import warnings
from collections import deque
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent import futures
from concurrent.futures import Future
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from pydantic import BaseModel, ValidationError

from agentledger.ledger._canonical import canonical_json
from agentledger.ledger._committer import CommitRequest
from agentledger.ledger._hashing import GENESIS, blob_ref
from agentledger.ledger._instrument import (
    CallRecord,
    ModelCallPort,
    ServedCall,
    instrumentation_for,
)
from agentledger.ledger._ledger import Head, Prepared, Sealed
from agentledger.ledger._privacy import RunPrivacy
from agentledger.ledger._records import RecordedEvent
from agentledger.ledger._run import Run
from agentledger.ledger._subjects import SubjectKey
from agentledger.ledger._tooling import ToolSpec, tool_wrapper
from agentledger.ledger.errors import (
    InvalidEventError,
    InvalidPayloadError,
    LedgerError,
    RunClosedError,
    UsageError,
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

__all__ = [
    "AsyncRunStart",
    "ModelCallRecord",
    "RequestKeys",
    "RunRecorder",
    "call_fingerprint",
    "request_refs",
]

_M = TypeVar("_M", bound=BaseModel)
_P = ParamSpec("_P")
_R = TypeVar("_R")
_F = TypeVar("_F", bound=Callable[..., Any])

_DEFERRED: ContextVar[frozenset[int]] = ContextVar("agentledger_deferred", default=frozenset())
"""Recorders (by id) whose flush the current thread or task leaves to an enclosing operation."""
_END_KINDS = frozenset({"RunCompleted", "RunFailed"})

RECENT_EVENTS = 1024
"""How many of its last committed events a recorder keeps (`RunRecorder.recent_events`)."""
WRITTEN_REFS = 16384
"""How many written blob refs a recorder remembers per generation (it keeps two)."""

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
    request: Mapping[str, Any] = field(repr=False, compare=False)
    """The fields `request_fingerprint` reads (model, params, messages_ref, tools_ref)."""
    response: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    """The answer as recorded (redacted by the run's policy): what the run's code should use."""

    @functools.cached_property
    def fingerprint(self) -> str:
        """The request's fingerprint (see `request_fingerprint`), worked out when first read."""
        return request_fingerprint(self.request)


def _operation(method: _F) -> _F:
    """Run a recording method as one operation: under the lock, flushed once at its end."""

    @functools.wraps(method)
    def operation(self: RunRecorder, *args: Any, **kwargs: Any) -> Any:
        # `_op` spelled out: this wraps every recording call, and a generator costs
        deferred = _DEFERRED.get()
        if id(self) in deferred:
            with self._lock:
                return method(self, *args, **kwargs)
        if self._failure is not None:  # a write-behind commit failed: say so before recording
            self._raise_failure()
        token = _DEFERRED.set(deferred | {id(self)})
        try:
            with self._lock:
                result = method(self, *args, **kwargs)
        finally:
            _DEFERRED.reset(token)
        if self._depth == 0:
            self.flush()
        return result

    return cast("_F", operation)


def _awaitable(
    method: Callable[Concatenate[RunRecorder, _P], _R],
) -> Callable[Concatenate[RunRecorder, _P], Coroutine[Any, Any, _R]]:
    """The awaitable twin of a recording method (``delta`` -> ``adelta``).

    It records exactly what the method records (a subclass's override included) and queues the
    commit for a worker thread without waiting for it (see the module doc): the event loop
    never waits on the database.
    """
    name = method.__name__

    async def twin(self: RunRecorder, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        result: _R = await self._aop(name, *args, **kwargs)
        return result

    twin.__name__ = twin.__qualname__ = f"a{name}"
    twin.__doc__ = f"`{name}`, awaitable: records the same events and queues their commit."
    return twin


class _Operation:
    """`RunRecorder._op` as a plain context manager (a generator costs, per recorded event).

    On entering: the recorder marked as deferring its flush (unless an outer operation already
    did) and its lock taken. On leaving: the lock released, the mark undone, and, when the block
    ended normally and this was the outermost operation outside a batch, the recorder flushed.
    """

    __slots__ = ("_recorder", "_token")

    def __init__(self, recorder: RunRecorder) -> None:
        self._recorder = recorder
        self._token: Token[frozenset[int]] | None = None

    def __enter__(self) -> None:
        recorder = self._recorder
        deferred = _DEFERRED.get()
        if id(recorder) not in deferred:
            self._token = _DEFERRED.set(deferred | {id(recorder)})
        recorder._lock.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        recorder = self._recorder
        recorder._lock.release()
        token = self._token
        if token is not None:
            _DEFERRED.reset(token)
            if exc_type is None and recorder._depth == 0:
                recorder.flush()


class _Staged:
    """`RunRecorder._staged` as a plain context manager (it wraps every recording method).

    On entering it notes what a recording may stage (pending events, ids, with ``chain`` the
    conversation chain) and starts a list of the blobs staged inside; if the block raises, all
    of it is undone before the error propagates. Either way the blobs staged inside join the
    enclosing block's list (nested recording methods undo together).
    """

    __slots__ = ("_chain", "_counters", "_outer", "_pending", "_recorder", "_saved")

    def __init__(self, recorder: RunRecorder, chain: bool) -> None:
        self._recorder = recorder
        self._chain = chain

    def __enter__(self) -> None:
        recorder = self._recorder
        self._pending = len(recorder._pending)
        self._counters = dict(recorder._counters)
        # The chain only grows in place (or is replaced by new lists): its lengths undo it.
        self._saved = (
            (
                recorder._chain_messages,
                recorder._chain_refs,
                len(recorder._chain_messages),
                recorder._chain_key,
            )
            if self._chain
            else None
        )
        self._outer, recorder._staged_refs = recorder._staged_refs, []

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        recorder = self._recorder
        try:
            if exc_type is not None:
                self._undo(recorder)
        finally:
            staged, recorder._staged_refs = recorder._staged_refs, self._outer
            if self._outer is not None:
                self._outer.extend(staged or ())

    def _undo(self, recorder: RunRecorder) -> None:
        del recorder._pending[self._pending :]
        for ref in recorder._staged_refs or ():
            recorder._blobs.pop(ref, None)
        recorder._counters = self._counters
        if self._saved is not None:
            messages, refs, known, chain_key = self._saved
            del messages[known:], refs[known:]
            recorder._chain_messages, recorder._chain_refs = messages, refs
            recorder._chain_key = chain_key
        recorder._ready = None
        if recorder._privacy is not None:
            recorder._privacy.forget()


class RunRecorder:
    """Records one run: a context manager (``with`` or ``async with``); see `Ledger.record_run`.

    Safe to share between threads and asyncio tasks: see the module doc for the ordering rule.
    """

    def __init__(self, ledger: Ledger, run: Run) -> None:
        self._ledger = ledger
        self._run = run
        self._lock = threading.RLock()  # one recording operation at a time
        self._state = threading.Lock()  # the run's committed head and what is in flight
        self._inflight = 0
        self._tail: Future[list[RecordedEvent]] | None = None
        self._open_request: CommitRequest | None = None  # write-behind, still open to `extend`
        self._failure: BaseException | None = None
        self._ended = False
        self._prompt_texts: dict[str, str] = {}
        self._pending: list[Prepared] = []
        self._blobs: dict[str, bytes] = {}
        self._staged_refs: list[str] | None = None
        self._ready: tuple[LedgerEvent, Prepared] | None = None
        self._depth = 0
        self._counters: dict[str, int] = {}
        self._chain_messages: list[Any] = []
        self._chain_refs: list[str] = []
        self._written: set[str] = set()
        self._privacy: RunPrivacy | None = None
        self._subject: SubjectKey | None = None
        self._subject_keys: dict[str, SubjectKey] = {}
        self._subject_source: Ledger | None = None
        self._chain_key: str | None = None
        self._recent: deque[RecordedEvent] = deque(maxlen=RECENT_EVENTS)
        self._written_old: set[str] = set()
        self.input: Any = None
        """The run's input as recorded (redacted by the run's policy): what its code should use."""

    @classmethod
    def _start(
        cls,
        ledger: Ledger,
        started: RunStarted,
        run_id: str,
        *,
        blobs: Mapping[str, bytes] | None = None,
        prompt_texts: Mapping[str, str] | None = None,
        privacy: RunPrivacy | None = None,
        subject: SubjectKey | None = None,
    ) -> RunRecorder:
        given = started.input
        started, prepared, all_blobs = _starting(ledger, started, blobs, subject)
        recorded = ledger._commit(None, [prepared], all_blobs, started=(run_id, started))
        recorder = cls._opened(ledger, recorded, prepared, prompt_texts)
        recorder._privacy = privacy
        recorder._subject = subject
        recorder.input = given
        decided = privacy.decided() if privacy is not None else None
        if decided is not None:  # what was redacted from the input: right after RunStarted
            recorder.record(decided)
        return recorder

    @classmethod
    async def _astart(
        cls,
        ledger: Ledger,
        started: RunStarted,
        run_id: str,
        *,
        blobs: Mapping[str, bytes] | None = None,
        prompt_texts: Mapping[str, str] | None = None,
        privacy: RunPrivacy | None = None,
        subject: SubjectKey | None = None,
    ) -> RunRecorder:
        """`_start` for async code: RunStarted is committed by a worker thread."""
        given = started.input
        started, prepared, all_blobs = _starting(ledger, started, blobs, subject)
        request = CommitRequest(
            run_id=run_id,
            first=1,
            events=[prepared],
            blobs=all_blobs,
            head=lambda: Head(run_id, "running", GENESIS, 0),
            committed=lambda _: None,
            failed=lambda _: None,
            started=(run_id, started),
        )
        recorded = await ledger._committer.acommit(request)
        recorder = cls._opened(ledger, recorded, prepared, prompt_texts)
        recorder._privacy = privacy
        recorder._subject = subject
        recorder.input = given
        decided = privacy.decided() if privacy is not None else None
        if decided is not None:  # what was redacted from the input: right after RunStarted
            await recorder.arecord(decided)
        return recorder

    @classmethod
    def _opened(
        cls,
        ledger: Ledger,
        recorded: list[RecordedEvent],
        prepared: Prepared,
        prompt_texts: Mapping[str, str] | None,
    ) -> RunRecorder:
        """The recorder of a run whose RunStarted was just committed (no read needed)."""
        first = recorded[0]
        run = Run.started_by(first, prepared.payload_jcs)
        run.collect_events()
        recorder = cls(ledger, run)
        recorder._recent.extend(recorded)
        recorder._prompt_texts = dict(prompt_texts or {})
        return recorder

    # State -----------------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._run.run_id

    @property
    def position(self) -> int:
        """Position of the last event recorded, being committed or pending."""
        with self._state:
            return self._run.position + self._inflight + len(self._pending)

    @property
    def status(self) -> str:
        """'running', 'completed' or 'failed'."""
        return self._run.status

    @property
    def last_recorded(self) -> RecordedEvent | None:
        """The last event this recorder committed (None before its first commit)."""
        with self._state:
            return self._recent[-1] if self._recent else None

    def recent_events(self, after: int = 0) -> list[RecordedEvent]:
        """The last events this recorder committed (positions after ``after``), oldest first.

        A recorder keeps at most ``RECENT_EVENTS``, so a long run records in bounded memory: when
        the first event returned is past ``after + 1``, read the ones before it from the ledger
        (`Ledger.iter_events`, `Ledger.events`).
        """
        newer: list[RecordedEvent] = []
        with self._state:
            for record in reversed(self._recent):
                if record.position <= after:
                    break
                newer.append(record)
        newer.reverse()
        return newer

    @property
    def recorded(self) -> list[RecordedEvent]:
        """Deprecated: the last events this recorder committed (at most ``RECENT_EVENTS``).

        It used to hold every event, which made a long run's memory grow with its length. Use
        `last_recorded`, `recent_events` or `Ledger.iter_events`.
        """
        warnings.warn(
            "RunRecorder.recorded is deprecated and holds only the last "
            f"{RECENT_EVENTS:,} committed events; use run.last_recorded, run.recent_events() "
            "or ledger.iter_events(run_id)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.recent_events()

    @property
    def ledger(self) -> Ledger:
        """The ledger this run records into."""
        return self._ledger

    def new_id(self, prefix: str) -> str:
        """A run-local id such as ``call-3`` (deterministic: replay reproduces it)."""
        with self._lock:
            self._counters[prefix] = self._counters.get(prefix, 0) + 1
            return f"{prefix}-{self._counters[prefix]}"

    def prompt_text(self, role: str) -> str:
        """The text of the prompt ``role`` (given to `Ledger.record_function` as ``prompts``).

        Replay and rerun hand the function the text the run recorded (or the rerun's new
        version), so code that reads its prompts here can be re-evaluated under new ones.
        """
        try:
            return self._prompt_texts[role]
        except KeyError:
            known = ", ".join(sorted(self._prompt_texts)) or "none"
            msg = f"run {self.run_id} has no prompt {role!r} (known: {known})"
            raise UsageError(msg) from None

    @property
    def prompts(self) -> Mapping[str, str]:
        """Every prompt text of the run, by role."""
        return dict(self._prompt_texts)

    # Core ------------------------------------------------------------------------------------

    @_operation
    def record(self, event: LedgerEvent) -> int:
        """Append any catalogue event; returns its position. Flushed now unless in a batch.

        The event is checked against the ledger's `Limits` here, so a refused one raises at
        this call and never joins the batch. Its free text is redacted by the run's policy
        first, and what was redacted is recorded as a PolicyDecided right before it.
        """
        if isinstance(event, LedgerEvent):
            event, decided = self._private(event)
            if decided is not None:
                self._write(decided)
        return self._write(event)

    @_operation
    def _write(self, event: LedgerEvent) -> int:
        """`record` without redaction: the event as it is (replay writes what it compared)."""
        if not isinstance(event, LedgerEvent):
            raise InvalidEventError(type(event).__name__, "record() takes a catalogue event")
        if event.kind == "RunStarted":
            raise InvalidEventError(event.kind, "a run starts once: use Ledger.record_run()")
        if self._ended or self._run.status != "running":
            raise RunClosedError(self.run_id, self._run.status)
        ready, self._ready = self._ready, None
        prepared = ready[1] if ready is not None and ready[0] is event else None
        self._pending.append(prepared or self._ledger._prepare(event))
        if event.kind in _END_KINDS:
            self._ended = True
        return self.position

    def _private(self, event: LedgerEvent) -> tuple[LedgerEvent, LedgerEvent | None]:
        """``event`` redacted by the run's policy, and the PolicyDecided to record before it."""
        if self._privacy is None:
            return event, None
        event = self._privacy.event(event)
        return event, self._privacy.decided()

    def _redacted(self, value: Any, where: str, path: str) -> Any:
        """A JSON value about to be stored, redacted by the run's policy (noted for its event)."""
        if self._privacy is None or value is None:
            return value
        return self._privacy.value(value, where, path)

    def redacted(self, value: Any) -> Any:
        """``value`` (JSON) as this run stores it: redacted by the run's policy (nothing noted).

        What the run's code should go on with where a value flows back into the run, so that
        replay, which serves what was recorded, sees the same. A value with nothing to redact
        comes back as it is (not a copy), as it does from a run that redacts nothing.
        """
        if self._privacy is None or value is None or self._privacy.redactor.clean(value):
            return value
        try:
            return self._privacy.redactor.json(value)[0]
        except (InvalidPayloadError, RecursionError):
            return value

    @property
    def redaction(self) -> RunPrivacy | None:
        """The run's redaction (policy and redactor), or None when the run redacts nothing."""
        return self._privacy

    def flush(self) -> None:
        """Commit pending events and their blobs in one transaction; wait for earlier ones.

        Returns when every event recorded before the call (from any thread or task) is
        committed; raises the error of a commit that failed since the last one reported.
        """
        with self._lock:
            request = self._submit()
            tail = self._tail
        if request is not None and request.leader:
            self._ledger._committer.drain(request)
        if tail is not None and not tail.done():
            self._ledger._committer.kick()  # an earlier write-behind commit may be waiting
            futures.wait([tail])
        if self._failure is not None:
            self._raise_failure()

    async def aflush(self) -> None:
        """`flush`, awaitable: a worker thread commits; the event loop does not wait on I/O."""
        with self._lock:
            request = self._submit()
            tail = self._tail
        if request is not None and request.leader:
            self._ledger._committer.drain_elsewhere()
        if tail is not None:
            if not tail.done():
                self._ledger._committer.kick()  # an earlier write-behind commit may be waiting
            import asyncio  # only async callers pay for it

            await asyncio.wait([asyncio.wrap_future(tail)])
        self._raise_failure()

    def _write_behind(self) -> None:
        """Queue what is pending for commit without waiting (the awaitable methods)."""
        with self._lock:
            request = self._submit(behind=True) if self._depth == 0 else None
        if request is not None and request.leader:
            self._ledger._committer.drain_elsewhere()

    def _raise_failure(self) -> None:
        """Raise (once) the error of a commit of this run that failed."""
        with self._state:
            error, self._failure = self._failure, None
        if error is not None:
            raise error

    def _submit(self, *, behind: bool = False) -> CommitRequest | None:
        """Queue the pending events as one commit (under the lock); None when there are none.

        ``behind``: nobody waits for this commit yet (see `GroupCommitter.enqueue`).
        """
        if not self._pending:
            return None
        events, blobs = self._pending, self._blobs
        self._pending, self._blobs = [], {}
        with self._state:
            first = self._run.position + self._inflight + 1
            self._inflight += len(events)
        open_request, self._open_request = self._open_request, None
        if (
            behind
            and open_request is not None
            and self._ledger._committer.extend(open_request, events, blobs)
        ):
            self._open_request = open_request  # one request per write-behind window
            return None

        # `events` and `blobs` are the request's own: `extend` may add to them until a drain
        # takes the request, so the callbacks count them when they run.
        def committed(sealed: Sealed) -> None:
            with self._state:
                self._run.advance(sealed.end.position, sealed.end.hash, sealed.end.status)
                self._inflight -= len(events)
                self._recent.extend(sealed.recorded)
                self._wrote(blobs)

        def failed(error: BaseException) -> None:
            with self._state:
                self._inflight -= len(events)
                if self._failure is None:
                    self._failure = error

        request = CommitRequest(
            run_id=self.run_id,
            first=first,
            events=events,
            blobs=blobs,
            head=self._head,
            committed=committed,
            failed=failed,
        )
        self._tail = request.future
        request.leader = self._ledger._committer.enqueue(request, behind=behind)
        if behind and not request.leader:
            self._open_request = request
        return request

    def _wrote(self, refs: Iterable[str]) -> None:
        """Remember blobs already written (two generations, so memory stays bounded).

        A blob written again is ignored by the store: forgetting an old ref costs at most one
        redundant write of a node a long run re-sends after a long while.
        """
        self._written.update(refs)
        if len(self._written) > WRITTEN_REFS:
            self._written_old, self._written = self._written, set()

    def _head(self) -> Head:
        with self._state:
            run = self._run
            return Head(run.run_id, run.status, run.head_hash, run.position)

    def _op(self) -> _Operation:
        """One recording operation: under the lock, flushed at its end unless nested or batched.

        Nested operations (``tool`` records through ``record``) and the awaitable twins leave
        the flush to the outermost one, which flushes after releasing the lock: no thread ever
        waits on a commit while holding it.
        """
        return _Operation(self)

    @contextmanager
    def _deferring(self) -> Iterator[None]:
        """Leave the flush of what the block records to the caller (see `_write_behind`)."""
        token = _DEFERRED.set(_DEFERRED.get() | {id(self)})
        try:
            yield
        finally:
            _DEFERRED.reset(token)

    async def _aop(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run recording method ``name`` and queue its commit (write-behind: see the class doc)."""
        return self._behind(getattr(self, name), *args, **kwargs)

    def _behind(self, method: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
        """Run recording ``method`` and queue its commit without waiting for it."""
        self._raise_failure()
        with self._deferring():
            result = method(*args, **kwargs)
        self._write_behind()
        return result

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group the events recorded inside the block into one transaction.

        Events other threads and tasks record while it is open join the same transaction.
        """
        with self._lock:
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                due = self._depth == 0 and id(self) not in _DEFERRED.get()
            if due:
                self.flush()

    @asynccontextmanager
    async def abatch(self) -> AsyncIterator[None]:
        """`batch` for async code: the transaction is awaited when the block ends."""
        with self._lock:
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                due = self._depth == 0
            if due:
                await self.aflush()

    def put_blob(self, value: Any, *, subject: str | None = None) -> str:
        """Store a JSON value by content (written with the next flush); returns its ref.

        In a run tied to a data subject (or with ``subject=``) the value is sealed under the
        subject's key first, and the ref is the sealed blob's. Raises `LimitExceededError` if
        the value is over the ledger's `Limits`.
        """
        return self._put(value, self._key(subject))

    def _key(self, subject: str | None) -> SubjectKey | None:
        """The key content is sealed under: ``subject``'s, else the run's (None: not sealed)."""
        if subject is None:
            return self._subject
        key = self._subject_keys.get(subject)
        if key is None:
            source = self._subject_source
            if source is not None and source is not self._ledger:  # a replay: look, never write
                key = source.existing_subject_key(subject)
            if key is None:
                key = self._ledger._subject_key(subject, self.run_id)
            self._subject_keys[subject] = key
        return key

    def seal_like(self, origin: Ledger, started: Mapping[str, Any]) -> None:
        """Seal content as a recorded run did (replay, rerun, resume and fork call it).

        ``started`` is the RunStarted payload of the run whose subject this run shares; keys
        of the subjects its calls name are looked up in ``origin`` (the recorded run's ledger)
        without writing to it when this recorder writes elsewhere (a replay's scratch ledger).
        """
        self._subject = origin.run_subject_key(started)
        self._subject_source = origin

    def _put(self, value: Any, key: SubjectKey | None, inner: Sequence[str] = ()) -> str:
        canonical = self._ledger.limits.canonical(value, "a blob")
        if key is not None:
            canonical = key.seal(canonical, inner)
        ref = blob_ref(canonical)
        with self._lock:
            if ref not in self._written and ref not in self._written_old and ref not in self._blobs:
                self._blobs[ref] = canonical
                if self._staged_refs is not None:
                    self._staged_refs.append(ref)
        return ref

    def _staged(self, *, chain: bool = False) -> _Staged:
        """Undo what the block staged if it raises: pending events, blobs, ids (and the chain).

        Wraps each recording method, so a refused value leaves nothing behind for a later flush.
        """
        return _Staged(self, chain)

    def _inline_or_ref(
        self, value: Any, where: str, path: str, key: SubjectKey | None = None
    ) -> tuple[Any, str | None]:
        """``value`` inline (redacted with its event), or the ref of a blob (redacted now).

        Content tied to a data subject (``key``) is always a sealed blob, never inline.
        """
        if value is None:
            return None, None
        if key is not None:
            return None, self._put(self._redacted(value, where, path), key)
        try:
            size = len(_SIZER.encode(value))
        except (TypeError, ValueError, RecursionError):
            return value, None  # not JSON, or too deep: the event's validation names the problem
        if size > INLINE_LIMIT:
            return None, self.put_blob(self._redacted(value, where, path))
        return value, None

    # Conversation chains ---------------------------------------------------------------------

    def messages_ref(
        self, messages: Sequence[Mapping[str, Any]], *, subject: str | None = None
    ) -> str:
        """The ref of a conversation's head node, storing only messages not stored before."""
        with self._lock:
            return self._messages_ref(messages, self._key(subject))

    def _messages_ref(self, messages: Sequence[Mapping[str, Any]], key: SubjectKey | None) -> str:
        """The head ref of ``messages``; the chain of what was stored grows in place.

        A conversation re-sends its history with every call, so the stored prefix is compared
        first: a read-only message (a ``MappingProxyType``, as agents built on this package pass
        their cached dumps) is kept as it is and compares by identity, at no cost per message; a
        plain dict is kept as a copy (the caller may change its dicts later) and compares by
        content. Only messages after the shared prefix are stored. Content sealed under another
        subject's key shares no node with the chain so far.
        """
        if not messages:
            return self._put({"message": None, "parent_ref": None}, key)
        key_id = key.key_id if key is not None else None
        if key_id != self._chain_key:  # sealed under another key: no node is shared
            self._chain_messages, self._chain_refs, self._chain_key = [], [], key_id
        chain, refs = self._chain_messages, self._chain_refs
        known = len(chain)
        if len(messages) >= known and list(messages[:known]) == chain:
            shared = known  # the usual case: the history grew (one C-level comparison)
        else:
            shared = 0
            limit = min(len(messages), known)
            while shared < limit and messages[shared] == chain[shared]:
                shared += 1
            # New lists, so that an undo (`_staged`) finds the old ones as they were.
            chain, refs = chain[:shared], refs[:shared]
        parent = refs[-1] if refs else None
        for index, message in enumerate(messages[shared:], start=shared):
            copy = dict(message)  # the caller may mutate a plain dict later
            stored = self._redacted(copy, "ModelCalled", f"messages[{index}]")
            inner = [parent] if parent else []
            parent = self._put({"message": stored, "parent_ref": parent}, key, inner)
            refs.append(parent)
            chain.append(message if isinstance(message, MappingProxyType) else copy)
        self._chain_messages, self._chain_refs = chain, refs
        assert parent is not None
        return parent

    def prompt(self, name: str, version: str, text: str) -> PromptRef:
        """Store a prompt's text and return its versioned, hashed reference.

        A prompt is the agent's code, not a data subject's content: it is stored as it is, also
        in a subject's run, so its ref stays the hash of its text (what the run's config names).
        """
        ref = self._put(text, None)
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

    @_operation
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
        subject: str | None = None,
    ) -> ModelCallRecord:
        """Record one model call: messages (as a chain), response, usage, latency, attempts.

        A streamed call also gives its time to first token and per-chunk timings
        (``[[ms since the request, characters], ...]``, stored as a blob). ``subject`` ties
        the call's messages and response to a data subject (default: the run's).
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
                key=self._key(subject),
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
        key: SubjectKey | None = None,
    ) -> ModelCallRecord:
        head = self._messages_ref(messages, key)
        chunks_ref = None
        if chunks is not None:
            chunks_ref = self.put_blob({"chunks": [list(chunk) for chunk in chunks]})
        tools_ref = self.put_blob(list(tools)) if tools else None
        params_dict = dict(params or {})  # redacted with the event (see `record`)
        response_ref = None
        answer = None
        if response is not None:
            answer = self._redacted(dict(response), "ModelCalled", "response")
            response_ref = self._put({"message": answer, "parent_ref": head}, key, [head])
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
        request = {
            "model": model,
            "params": self.redacted(params_dict),
            "messages_ref": head,
            "tools_ref": tools_ref,
        }
        return ModelCallRecord(position, call_id, head, response_ref, request, answer)

    @_operation
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
        subject: str | None = None,
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
                key=self._key(subject),
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
        key: SubjectKey | None = None,
    ) -> ToolCalled:
        inline, ref = self._inline_or_ref(arguments, "ToolCalled", "arguments", key)
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

    @_operation
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
        subject: str | None = None,
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
                    key=self._key(subject),
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
        key: SubjectKey | None = None,
    ) -> ToolReturned:
        inline, ref = self._inline_or_ref(data, "ToolReturned", "data", key)
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

    @_operation
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
        subject: str | None = None,
    ) -> str:
        """Record a tool call and its result together; returns the call id.

        Both events (and their blobs) are built and checked first: a refused argument or result
        records neither, so a ToolCalled never stands without its ToolReturned.
        """
        with self._staged():
            key = self._key(subject)
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
                key=key,
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
                key=key,
            )
            ready = (returned, self._ledger._prepare(returned))
            position = self.record(called)
            if position == returned.caused_by:
                self._ready = ready
            else:  # a hook recorded something first: the result points at the call's position
                returned = returned.model_copy(update={"caused_by": position})
            self.record(returned)
        return call_id

    @_operation
    def delta(
        self,
        patch: Mapping[str, Any],
        *,
        step_id: str | None = None,
        source: str | None = None,
        caused_by: int | None = None,
        subject: str | None = None,
    ) -> int:
        """Record a JSON Merge Patch to the world state (must be an object at top level).

        A delta tied to a data subject (``subject``, default the run's) stores its patch as a
        sealed blob (``patch_ref``), redacted first.
        """
        if not isinstance(patch, Mapping):
            raise InvalidPayloadError(
                "", f"a delta must be a JSON object, not {type(patch).__name__}"
            )
        with self._staged():
            key = self._key(subject)
            fields: dict[str, Any] = {"patch": dict(patch)}
            if key is not None:
                sealed = self._put(self._redacted(dict(patch), "DeltaApplied", "patch"), key)
                fields = {"patch": {}, "patch_ref": sealed}
            return self.record(
                _build(DeltaApplied, **fields, step_id=step_id, source=source, caused_by=caused_by)
            )

    @_operation
    def plan(self, plan: Any, *, step_id: str | None = None, caused_by: int | None = None) -> int:
        """Record a proposed plan."""
        return self.record(_build(PlanProposed, plan=plan, step_id=step_id, caused_by=caused_by))

    @_operation
    def policy(self, /, decision: str, **fields: Any) -> int:
        """Record a policy decision (allow, redact or block)."""
        return self.record(_build(PolicyDecided, decision=decision, **fields))

    @_operation
    def guardrail(self, /, guardrail: str, *, action: str, message: str, **fields: Any) -> int:
        """Record a guardrail trip."""
        return self.record(
            _build(GuardrailTripped, guardrail=guardrail, action=action, message=message, **fields)
        )

    @_operation
    def clarify(self, question: str, *, step_id: str | None = None) -> int:
        """Record that the run asks the user a question instead of answering."""
        return self.record(_build(ClarificationRequested, question=question, step_id=step_id))

    @_operation
    def answer(
        self,
        answer: str,
        *,
        evidence_ids: Sequence[str] = (),
        step_id: str | None = None,
        caused_by: int | None = None,
        subject: str | None = None,
    ) -> int:
        """Record the synthesized answer and the evidence ids it cites."""
        with self._staged():
            key = self._key(subject)
            inline, ref = self._inline_or_ref(answer, "SynthesisProduced", "answer", key)
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

    @asynccontextmanager
    async def astep(
        self, name: str, args: Any = None, *, step_id: str | None = None
    ) -> AsyncIterator[str]:
        """`step` for async code: one transaction, awaited when the block ends."""
        step_id = step_id or self.new_id("step")
        async with self.abatch():
            self.record(_build(StepStarted, step_id=step_id, name=name, args=args))
            try:
                yield step_id
            except BaseException as e:
                self.record(
                    _build(StepCompleted, step_id=step_id, status="failed", error=_error(e))
                )
                raise
            self.record(_build(StepCompleted, step_id=step_id, status="ok"))

    # Recorded tools --------------------------------------------------------------------------

    def recorded_tool(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        effectful: bool = False,
        version: str = "1",
    ) -> Any:
        """Record every call of a function as a tool call: ``@run.recorded_tool``.

        Works on plain and ``async`` functions, bare or as ``@run.recorded_tool(name=...,
        effectful=...)``. Each call records ToolCalled (the bound arguments as JSON) when it is
        made and ToolReturned when it returns: its result as JSON (redacted by the run's
        policy), which is also what the call returns (the ledger's form: a replay hands back
        exactly this), or, when the function raises, a failed result naming the exception
        before it is re-raised. In replay the recorded result is served and the function is
        not called.
        """
        spec = ToolSpec(name=name, effectful=effectful, version=version)
        if fn is not None:
            return tool_wrapper(self, fn, spec)
        return functools.partial(tool_wrapper, self, spec=spec)

    def _call_tool(self, spec: ToolSpec, arguments: Any, invoke: Callable[[], Any]) -> Any:
        """Record a recorded tool's call around ``invoke`` (replay overrides: it serves)."""
        call_id, position = self.tool_call(
            spec.tool, arguments, tool_version=spec.version, effectful=spec.effectful
        )
        return self._finish_tool(spec, call_id, position, invoke)

    def _finish_tool(
        self, spec: ToolSpec, call_id: str, position: int, invoke: Callable[[], Any]
    ) -> Any:
        """Run a tool whose ToolCalled is recorded; record its result and hand it back."""
        outcome = spec.run(invoke)
        self.tool_result(call_id, caused_by=position, **outcome.envelope)
        return self.redacted(outcome.result())

    async def _acall_tool(
        self, spec: ToolSpec, arguments: Any, invoke: Callable[[], Coroutine[Any, Any, Any]]
    ) -> Any:
        """`_call_tool` for async functions."""
        call_id, position = await self.atool_call(
            spec.tool, arguments, tool_version=spec.version, effectful=spec.effectful
        )
        return await self._afinish_tool(spec, call_id, position, invoke)

    async def _afinish_tool(
        self,
        spec: ToolSpec,
        call_id: str,
        position: int,
        invoke: Callable[[], Coroutine[Any, Any, Any]],
    ) -> Any:
        """`_finish_tool` for async functions."""
        if spec.effectful:  # durable before the effect: resume must know it may have run
            await self.aflush()
        outcome = await spec.arun(invoke)
        await self.atool_result(call_id, caused_by=position, **outcome.envelope)
        return self.redacted(outcome.result())

    # Closing ---------------------------------------------------------------------------------

    def complete(self, outcome: str = "answered") -> RecordedEvent:
        """Record RunCompleted (with the event count and head hash) and close the run.

        Waits for every commit in flight first (from any thread): the end event names the head
        of the committed chain.
        """
        while True:
            self.flush()
            with self._op():
                closed = self._close(
                    lambda count, head: _build(
                        RunCompleted, event_count=count, head_hash=head, outcome=outcome
                    )
                )
            if closed:
                return self._recent[-1]

    async def acomplete(self, outcome: str = "answered") -> RecordedEvent:
        """`complete`, awaitable."""
        while True:
            await self.aflush()
            with self._deferring(), self._op():
                closed = self._close(
                    lambda count, head: _build(
                        RunCompleted, event_count=count, head_hash=head, outcome=outcome
                    )
                )
            if closed:
                await self.aflush()
                return self._recent[-1]

    def fail(self, error: BaseException | ErrorInfo) -> RecordedEvent:
        """Record RunFailed with the error and close the run.

        What was pending and cannot be committed is dropped, so the failure itself is recorded.
        """
        info, decided = self._failure_info(error if isinstance(error, ErrorInfo) else _error(error))
        while True:
            self._settle()
            if decided is not None:
                self.record(decided)
                decided = None
            with self._op():
                closed = self._close(
                    lambda count, head: _build(
                        RunFailed, event_count=count, head_hash=head, error=info
                    )
                )
            if closed:
                return self._recent[-1]

    async def afail(self, error: BaseException | ErrorInfo) -> RecordedEvent:
        """`fail`, awaitable."""
        info, decided = self._failure_info(error if isinstance(error, ErrorInfo) else _error(error))
        while True:
            try:
                await self.aflush()
            except LedgerError:
                self._drop_pending()
            if decided is not None:
                await self.arecord(decided)
                decided = None
            with self._deferring(), self._op():
                closed = self._close(
                    lambda count, head: _build(
                        RunFailed, event_count=count, head_hash=head, error=info
                    )
                )
            if closed:
                await self.aflush()
                return self._recent[-1]

    def _failure_info(self, info: ErrorInfo) -> tuple[ErrorInfo, LedgerEvent | None]:
        """A failure's error redacted, and the PolicyDecided to record before RunFailed."""
        if self._privacy is None:
            return info, None
        data = self._privacy.value(info.model_dump(mode="json"), "RunFailed", "error", changed=True)
        return ErrorInfo.model_validate(data), self._privacy.decided()

    def _settle(self) -> None:
        """Flush, dropping what cannot be committed (before recording a failure)."""
        try:
            self.flush()
        except LedgerError:
            self._drop_pending()

    def _drop_pending(self) -> None:
        with self._lock:
            self._pending.clear()
            self._blobs.clear()

    def _close(self, build: Callable[[int, str], LedgerEvent]) -> bool:
        """Record the end event built from the committed head, if nothing is in flight.

        Called inside an operation after a flush; False when another thread recorded in between
        (the caller flushes again and retries).
        """
        with self._state:
            busy = bool(self._inflight or self._pending)
            head = self._run.head_hash
        if busy:
            return False
        self.record(build(self.position + 1, head))
        return True

    @property
    def _open(self) -> bool:
        return not self._ended and self._run.status == "running"

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._open:
            return
        if exc is None:
            self.complete()
        else:
            self._depth = 0
            self.fail(exc)

    async def __aenter__(self) -> RunRecorder:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._open:
            return
        if exc is None:
            await self.acomplete()
        else:
            self._depth = 0
            await self.afail(exc)

    # Awaitable twins -------------------------------------------------------------------------

    arecord = _awaitable(record)
    amodel_call = _awaitable(model_call)
    arecord_call = _awaitable(record_call)
    atool_call = _awaitable(tool_call)
    atool_result = _awaitable(tool_result)
    atool = _awaitable(tool)
    adelta = _awaitable(delta)
    aplan = _awaitable(plan)
    apolicy = _awaitable(policy)
    aguardrail = _awaitable(guardrail)
    aclarify = _awaitable(clarify)
    aanswer = _awaitable(answer)


class AsyncRunStart:
    """What `Ledger.arecord_run` returns: ``async with`` it, or ``await`` it for the recorder.

    ``async with ledger.arecord_run(...) as run:`` commits RunStarted when the block is entered
    and RunCompleted (or RunFailed, then re-raises) when it ends; ``run = await
    ledger.arecord_run(...)`` only starts the run (close it with ``async with run:`` or
    ``await run.acomplete()``).
    """

    def __init__(
        self,
        ledger: Ledger,
        started: RunStarted,
        run_id: str,
        blobs: Mapping[str, bytes],
        prompt_texts: Mapping[str, str],
        *,
        privacy: RunPrivacy | None = None,
        subject: SubjectKey | None = None,
    ) -> None:
        self._ledger = ledger
        self._privacy = privacy
        self._subject = subject
        self._started = started
        self.run_id = run_id
        self._blobs = blobs
        self._texts = prompt_texts
        self._recorder: RunRecorder | None = None

    async def _open(self) -> RunRecorder:
        if self._recorder is None:
            self._recorder = await RunRecorder._astart(
                self._ledger,
                self._started,
                self.run_id,
                blobs=self._blobs,
                prompt_texts=self._texts,
                privacy=self._privacy,
                subject=self._subject,
            )
        return self._recorder

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> RunRecorder:
        return await self._open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._recorder is not None
        await self._recorder.__aexit__(exc_type, exc, tb)


class _LivePort:
    """The recording port: each finished call becomes a ModelCalled; nothing is served."""

    def __init__(self, recorder: RunRecorder) -> None:
        self._recorder = recorder

    @property
    def replaying(self) -> bool:
        return False

    def record_call(self, call: CallRecord) -> int:
        return self._recorder._behind(self._recorder.record_call, call)

    def record_dropped(self, call: CallRecord) -> int | None:
        """`record_call` from a finalizer (a stream dropped unclosed): raises no earlier failure.

        A commit of the run that failed stays for the run's next call to raise (a finalizer
        has no caller to raise to), and nothing is recorded after it: the run's later events
        would be refused for the same reason.
        """
        recorder = self._recorder
        if recorder._failure is not None:
            return None
        with recorder._deferring():
            position = recorder.record_call(call)
        recorder._write_behind()
        return position

    def redacted(self, value: Any) -> Any:
        return self._recorder.redacted(value)

    def check_open(self) -> None:
        """Raise `RunClosedError` when the run has ended: a call now could not be recorded.

        Instrumented clients ask before sending, so a client kept past its run does not call
        (and pay for) the model only to fail when the answer comes back.
        """
        recorder = self._recorder
        if recorder._ended or recorder._run.status != "running":
            raise RunClosedError(recorder.run_id, recorder._run.status)

    async def arecord_call(self, call: CallRecord) -> int:
        return await self._recorder.arecord_call(call)

    def serve_call(self, call: CallRecord) -> ServedCall | None:
        del call
        msg = "a recording run serves nothing from a record: call the model"
        raise LedgerError(msg)


_EMPTY_NODE = blob_ref(canonical_json({"message": None, "parent_ref": None}))


def call_fingerprint(call: CallRecord, key: SubjectKey | None = None) -> str:
    """The request fingerprint a recorder stores for ``call``, prefixed with its provider.

    Equal for two calls exactly when provider, model, params, messages and tools are: what a
    replay matches an instrumented call against its record by (``provider:`` +
    `request_fingerprint` of the ModelCalled it would record). Nothing is stored.
    """
    messages_ref, tools_ref = request_refs(call.messages, call.tools, key)
    fingerprint = request_fingerprint(
        {
            "model": call.model,
            "params": dict(call.params),
            "messages_ref": messages_ref,
            "tools_ref": tools_ref,
        }
    )
    return f"{call.provider}:{fingerprint}"


class RequestKeys:
    """`call_fingerprint` of the calls of one conversation, each in time of its new messages.

    A conversation re-sends its history with every call, so working each call's fingerprint
    out from scratch costs time that grows with the history (a long run's replay, which
    matches every call by it, would grow with the square of its length). This keeps the
    chain of the last request's message nodes: the prefix a request shares with it is found
    by one C-level comparison (messages compare by content; a plain dict is kept as a copy),
    and only the messages after it are redacted (``redact``: what the run records), hashed
    and chained. Thread-safe; equal to ``call_fingerprint`` with the messages and params as
    ``redact`` gives them.
    """

    def __init__(self, redact: Callable[[Any], Any]) -> None:
        self._redact = redact
        self._lock = threading.Lock()
        self._chain: list[Any] = []
        self._refs: list[str] = []
        self._key_id: str | None = None

    def fingerprint(self, call: CallRecord, key: SubjectKey | None = None) -> str:
        """``call``'s request fingerprint, prefixed with its provider (see `call_fingerprint`)."""
        with self._lock:
            head = self._head(call.messages, key)
        tools_ref = _tools_ref(call.tools, key)
        fingerprint = request_fingerprint(
            {
                "model": call.model,
                "params": self._redact(dict(call.params)),
                "messages_ref": head,
                "tools_ref": tools_ref,
            }
        )
        return f"{call.provider}:{fingerprint}"

    def _head(self, messages: Sequence[Mapping[str, Any]], key: SubjectKey | None) -> str:
        if not messages:
            return request_refs((), None, key)[0]
        key_id = key.key_id if key is not None else None
        if key_id != self._key_id:
            self._chain, self._refs, self._key_id = [], [], key_id
        chain, refs = self._chain, self._refs
        known = len(chain)
        if len(messages) >= known and list(messages[:known]) == chain:
            shared = known
        else:
            shared = 0
            limit = min(len(messages), known)
            while shared < limit and messages[shared] == chain[shared]:
                shared += 1
            del chain[shared:], refs[shared:]
        parent = refs[-1] if refs else None
        for message in messages[shared:]:
            copy = dict(message)  # the caller may mutate a plain dict later
            node = canonical_json({"message": self._redact(copy), "parent_ref": parent})
            parent = blob_ref(node if key is None else key.seal(node, [parent] if parent else []))
            refs.append(parent)
            chain.append(message if isinstance(message, MappingProxyType) else copy)
        assert parent is not None
        return parent


def request_refs(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    key: SubjectKey | None = None,
) -> tuple[str, str | None]:
    """The ``messages_ref`` and ``tools_ref`` a recorder stores for a request (nothing stored).

    With a subject's ``key``, the refs of the sealed nodes and tools (what a subject's run stores).
    """
    parent: str | None = None
    for message in messages:
        node = canonical_json({"message": dict(message), "parent_ref": parent})
        parent = blob_ref(node if key is None else key.seal(node, [parent] if parent else []))
    if parent is None:
        empty = canonical_json({"message": None, "parent_ref": None})
        parent = _EMPTY_NODE if key is None else blob_ref(key.seal(empty))
    return parent, _tools_ref(tools, key)


def _tools_ref(tools: Sequence[Mapping[str, Any]] | None, key: SubjectKey | None) -> str | None:
    """The ref of the tools blob a recorder stores (`put_blob`: sealed in a subject's run)."""
    if not tools:
        return None
    canonical = canonical_json(list(tools))
    return blob_ref(canonical if key is None else key.seal(canonical))


def _starting(
    ledger: Ledger,
    started: RunStarted,
    blobs: Mapping[str, bytes] | None,
    subject: SubjectKey | None = None,
) -> tuple[RunStarted, Prepared, dict[str, bytes]]:
    """RunStarted as committed (a large input moved to a blob), prepared, with its blobs.

    A subject's run always moves its input to a blob sealed under the subject's key.
    """
    all_blobs = dict(blobs or {})
    if started.input is not None and (
        subject is not None or len(canonical_json(started.input)) > INLINE_LIMIT
    ):
        canonical = ledger.limits.canonical(started.input, "the run's input")
        if subject is not None:
            canonical = subject.seal(canonical)
        ref = blob_ref(canonical)
        all_blobs[ref] = canonical
        started = started.model_copy(update={"input": None, "input_ref": ref})
    return started, ledger._prepare(started), all_blobs


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
    message = str(error)[:_ERROR_TEXT] or _NO_MESSAGE.get(type(error).__name__, "")
    return ErrorInfo(
        type=_text(type(error).__name__),
        message=_text(message),
        traceback=_text(text[-_ERROR_TEXT:]),
    )


_NO_MESSAGE = {
    "CancelledError": "the task was cancelled",
    "KeyboardInterrupt": "interrupted (Ctrl-C)",
    "TimeoutError": "timed out",
}
"""What a run's failure says for exceptions that usually carry no message of their own."""


def _text(text: str) -> str:
    """`text` with each lone surrogate written as its backslash escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
