"""Serving a user function's run from its record: the book, the recorder and its model port.

Owns what makes ``record_function`` runs re-executable. ``CallBook`` holds a recorded run's
model calls (by request fingerprint, with their answers and stream timings) and recorded-tool
results (by tool and arguments), decoded once. ``ServingRecorder`` is a ``CheckingRecorder``
whose ``model_port()`` serves instrumented clients and whose recorded tools are served too:

- a request matching an unserved recorded call gets its recorded answer (``serve_call``) and,
  when the replay is **gated**, is recorded at its recorded position: the recording waits until
  every event before it has been recorded (threads block; tasks await). That is how a run whose
  calls ran concurrently replays deterministically: each ModelCalled was appended when its call
  completed, and replay appends each at the same place.
- a request matching none is a divergence (replay), reported at the position of the recorded
  call it most resembles, with the changed request fields; in rerun, resume and fork it goes
  live (``serve_call`` answers ``None``: the instrumentation calls the model).
- recorded tools are served the same way (the function is not called), by tool and arguments.

A wait that can never end (the events before a call are never recorded: the code changed) is
reported as a divergence at once when nothing else of the run could record them (every other
thread and task waits for its turn, has ended, or waits on those that do: see `_stuck`), else
after ``stall_timeout`` seconds. Must not write to the audited run's ledger except through the
recorder it is given.
"""

from __future__ import annotations

import asyncio
import difflib
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from agentledger.ledger import (
    CallRecord,
    Ledger,
    ModelCallPort,
    RecordedEvent,
    RequestKeys,
    Run,
    ServedCall,
    ToolSpec,
    raise_recorded,
    request_refs,
)
from agentledger.ledger.events import (
    Attempt,
    ErrorInfo,
    ModelCalled,
    ToolErrorInfo,
    request_fingerprint,
    upcast,
)
from agentledger.replay._compare import comparable, comparable_event, divergence
from agentledger.replay._ports import arguments_key
from agentledger.replay._recorder import (
    Beyond,
    CheckingRecorder,
    ReplayStopped,
    redaction_fact,
)
from agentledger.replay._stuck import Participants
from agentledger.replay.errors import EffectRefusedError, ReplayDivergenceError

__all__ = ["BookCall", "BookTool", "CallBook", "ServingPort", "ServingRecorder"]

STALL_TIMEOUT_S = 5.0
"""How long a gated call waits for the events recorded before it (see the module doc)."""


@dataclass
class BookCall:
    """One recorded model call: where, its request key, its payload, answer and chunk timings."""

    position: int
    key: str
    payload: dict[str, Any]
    response: dict[str, Any] | None
    chunks: list[list[float]] | None
    served: bool = False


@dataclass
class BookTool:
    """One recorded tool call: ToolCalled's position, ToolReturned's (None: it never returned)."""

    called: int
    returned: int | None
    tool: str
    key: bytes
    payload: dict[str, Any]
    result: dict[str, Any] | None
    served: bool = False


class CallBook:
    """A recorded run's model calls and tool results, read forward as replay asks for them.

    The record is read a page (the ledger's ``page_size``) at a time, with that page's answers
    and arguments in one blob query; a call or tool is kept until it is served, so a replay
    that asks in recorded order holds about one page of a long run. A request the record does
    not hold reads the rest of the record (to name the nearest recorded call).
    """

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        events: Sequence[RecordedEvent],
        *,
        upto: int | None,
        lock: threading.RLock | None = None,
    ) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.finished = bool(events) and events[-1].kind in ("RunCompleted", "RunFailed")
        self._lock = lock or threading.RLock()
        """Held while the book changes or reads (give it the lock of the record's other readers:
        some stores' connection pools do not take concurrent first reads from several threads)."""
        self._source = iter(events)
        self._upto = upto
        self._page = max(ledger.page_size, 1)
        self._calls: dict[str, deque[BookCall]] = {}
        self._tools: dict[tuple[str, bytes], deque[BookTool]] = {}
        self._unreturned: dict[str, BookTool] = {}
        """Tool calls read whose ToolReturned is not read yet, by call id."""

    def _read_page(self) -> bool:
        """Read the next page of the record into the book; False at its end (or ``upto``)."""
        page: list[RecordedEvent] = []
        for e in self._source:
            if self._upto is not None and e.position > self._upto:
                self._source = iter(())  # past what the book holds
                break
            page.append(e)
            if len(page) == self._page:
                break
        if not page:
            return False
        refs: list[str] = []
        for e in page:
            if e.kind == "ModelCalled":
                refs += [e.payload[k] for k in ("response_ref", "chunks_ref") if e.payload.get(k)]
            elif e.kind in ("ToolCalled", "ToolReturned"):
                refs += [e.payload[k] for k in ("arguments_ref", "data_ref") if e.payload.get(k)]
        blobs = self.ledger.blobs(refs) if refs else {}
        for e in page:
            self._take_in(e, blobs)
        return True

    def _take_in(self, e: RecordedEvent, blobs: Mapping[str, Any]) -> None:
        """Add one recorded event to the book (a call, a tool call, or a tool's result)."""
        p = e.payload
        if e.kind == "ModelCalled":
            response = blobs[p["response_ref"]]["message"] if p.get("response_ref") else None
            chunks = blobs[p["chunks_ref"]]["chunks"] if p.get("chunks_ref") else None
            key = f"{p['provider']}:{request_fingerprint(p)}"
            call = BookCall(e.position, key, p, response, chunks)
            self._calls.setdefault(key, deque()).append(call)
        elif e.kind == "ToolCalled":
            arguments = blobs[p["arguments_ref"]] if p.get("arguments_ref") else p.get("arguments")
            tool = BookTool(e.position, None, p["tool"], arguments_key(arguments), p, None)
            self._tools.setdefault((tool.tool, tool.key), deque()).append(tool)
            self._unreturned[p["call_id"]] = tool
        elif e.kind == "ToolReturned":
            payload = upcast(e.kind, e.version, p)
            if payload.get("data_ref"):
                payload = {**payload, "data": blobs[payload["data_ref"]]}
            called = self._unreturned.pop(payload["call_id"], None)
            if called is not None:
                called.returned, called.result = e.position, payload

    def _read_all(self) -> None:
        while self._read_page():
            pass

    def take_call(self, key: str) -> BookCall | None:
        """The first unserved recorded call with this request key, now served."""
        with self._lock:
            while not self._calls.get(key):
                if not self._read_page():
                    return None
            queue = self._calls[key]
            call = queue.popleft()
            if not queue:
                del self._calls[key]
            call.served = True
            return call

    def take_tool(self, tool: str, key: bytes) -> BookTool | None:
        """The first unserved recorded call of ``tool`` with these arguments, now served."""
        with self._lock:
            while not self._tools.get((tool, key)):
                if not self._read_page():
                    return None
            queue = self._tools[tool, key]
            item = queue.popleft()
            if not queue:
                del self._tools[tool, key]
            item.served = True
            call_id = item.payload["call_id"]
            while self._unreturned.get(call_id) is item and self._read_page():
                pass  # its result is recorded further on
            self._unreturned.pop(call_id, None)
            return item

    def unserved_calls(self) -> list[BookCall]:
        """The recorded model calls not served yet, in position order (reads the whole rest)."""
        with self._lock:
            self._read_all()
            calls = [c for queue in self._calls.values() for c in queue]
        return sorted(calls, key=lambda c: c.position)

    def unserved_tools(self, tool: str | None = None) -> list[BookTool]:
        """The recorded calls of ``tool`` (default: every tool) not served yet, in position order.

        Reads the whole rest of the record.
        """
        with self._lock:
            self._read_all()
            tools = [
                t for (name, _), queue in self._tools.items() if tool in (None, name) for t in queue
            ]
        return sorted(tools, key=lambda t: t.called)

    def messages(self, call: BookCall) -> list[Any]:
        """The messages a recorded call sent (read from the ledger: for reports only)."""
        return self.ledger.conversation(call.payload["messages_ref"])


class ServingPort:
    """The `ModelCallPort` of a `ServingRecorder` (replaying: calls are offered to it first)."""

    def __init__(self, recorder: ServingRecorder) -> None:
        self._recorder = recorder

    @property
    def replaying(self) -> bool:
        """Always True: the record answers what it can."""
        return True

    def serve_call(self, call: CallRecord) -> ServedCall | None:
        """The recorded answer to ``call``'s request; None: call the model (past the record)."""
        return self._recorder.serve_model(call)

    async def aserve_call(self, call: CallRecord) -> ServedCall | None:
        """`serve_call` for async clients: a live call awaits the end of the repeated prefix."""
        served = self._recorder.serve_model(call)
        if served is None:
            await self._recorder._alive_after_prefix()
        return served

    def record_call(self, call: CallRecord) -> int:
        """Record the finished call (at its recorded position when gated)."""
        return self._recorder.record_served(call)

    async def arecord_call(self, call: CallRecord) -> int:
        """`record_call` for async clients: a gated call awaits its turn."""
        return await self._recorder.arecord_served(call)

    def redacted(self, value: Any) -> Any:
        """``value`` as the run records it (see `RunRecorder.redacted`)."""
        return self._recorder.redacted(value)


class ServingRecorder(CheckingRecorder):
    """A checking recorder that serves instrumented clients and recorded tools from a record.

    ``live``: a call the record does not answer goes to the real client or tool (rerun,
    resume, fork) instead of diverging (replay). ``gate``: served calls are recorded at their
    recorded positions. ``mark``: served calls and tools are marked served from this run (a
    rerun) and cost nothing. ``allow_effects``: an effectful tool may run live.
    """

    def __init__(
        self,
        ledger: Ledger,
        run: Run,
        *,
        recorded_run_id: str,
        expected: Sequence[RecordedEvent],
        prefix_end: int,
        write_prefix: bool,
        beyond: Beyond,
        book: CallBook,
        live: bool,
        gate: bool,
        mark: str | None = None,
        allow_effects: bool = False,
        stall_timeout: float = STALL_TIMEOUT_S,
    ) -> None:
        super().__init__(
            ledger,
            run,
            recorded_run_id=recorded_run_id,
            expected=expected,
            prefix_end=prefix_end,
            write_prefix=write_prefix,
            beyond=beyond,
        )
        self.book = book
        self._live = live
        self._gate = gate
        self._mark = mark
        self._allow_effects = allow_effects
        self._stall = stall_timeout
        self._turns = threading.Condition()
        self._waiting: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._reserved: list[tuple[str, Sequence[Any], BookCall]] = []
        """Served calls not recorded yet: (request key, the messages served, the record)."""
        self._participants = Participants()
        """Who runs the function, and whether any of them could still record (stalls)."""
        self._sleepers = 0
        """Threads waiting on ``_turns`` for their turn (changed and read under its lock)."""
        self._requests = RequestKeys(self.redacted)
        """The calls' fingerprints, worked out incrementally as the conversation grows."""
        self.served_calls = 0
        self.live_calls = 0
        self.served_tools = 0
        self.live_tools = 0

    def join(self) -> None:
        """Count the calling thread or task as the one beginning the function (see `_stuck`)."""
        self._participants.begin()
        self._join(_party())

    def _join(self, party: Any) -> None:
        self._participants.join(party)

    def model_port(self) -> ModelCallPort:
        """The port instrumented clients record through: it serves from the record."""
        return ServingPort(self)

    # Recording, and telling waiters ------------------------------------------------------------

    def _record_checked(self, event: Any) -> int:
        self._join(_party())
        try:
            return super()._record_checked(event)
        finally:
            self._advanced()

    def _advanced(self) -> None:
        """Wake the calls waiting for their turn (and all of them after a divergence)."""
        with self._turns:
            if self._sleepers:
                self._turns.notify_all()
            if not self._waiting:
                return
            now = self.position
            due = [w for w in self._waiting if self.divergence is not None or now >= w[0] - 1]
            self._waiting = [w for w in self._waiting if w not in due]
        for _, loop, future in due:
            loop.call_soon_threadsafe(_settle, future)

    # Model calls -------------------------------------------------------------------------------

    def serve_model(self, call: CallRecord) -> ServedCall | None:
        """Serve ``call`` from the record; None (live) or a divergence when it cannot be."""
        self._join(_party())
        key = self._requests.fingerprint(call, self._key(None))
        found = self.book.take_call(key)
        if found is None:
            if self._live:
                if asyncio._get_running_loop() is None:  # a task awaits in `aserve_call`
                    self._live_after_prefix()
                self.live_calls += 1
                return None
            raise self._unmatched_call(call)
        with self._lock:
            self._reserved.append((key, call.messages, found))
        self.served_calls += 1
        error = found.payload.get("error")
        return ServedCall(
            response=found.response,
            error=ErrorInfo.model_validate(error) if error else None,
            chunks=found.chunks,
            position=found.position,
            # a failure's attempts give the SDK error its status (and a cancellation its wait)
            attempts=[_attempt(a) for a in found.payload.get("attempts", [])] if error else [],
        )

    def record_served(self, call: CallRecord) -> int:
        """Record a finished instrumented call (served ones at their turn, when gated).

        A live one is recorded after the repeated prefix, even when its client asked the
        record from a task without awaiting the prefix (``serve_call``, not ``aserve_call``).
        """
        found = self._reservation(call)
        if found is not None and self._gate:
            self._wait_turn(found.position)
        elif found is None and asyncio._get_running_loop() is None:  # a loop's: never blocked
            self._live_after_prefix()
        return self._record_model(call, found)

    async def arecord_served(self, call: CallRecord) -> int:
        """`record_served` for async clients."""
        found = self._reservation(call)
        if found is not None and self._gate:
            await self._await_turn(found.position)
        elif found is None:
            await self._alive_after_prefix()
        position: int = await self._aop("_record_model", call, found)
        return position

    def _reservation(self, call: CallRecord) -> BookCall | None:
        """The served call ``call`` finishes: the same messages object, else the same request."""
        with self._lock:
            for index, (_, messages, found) in enumerate(self._reserved):
                if messages is call.messages:
                    del self._reserved[index]
                    return found
        key = self._requests.fingerprint(call, self._key(None))
        with self._lock:
            for index, (reserved, _, found) in enumerate(self._reserved):
                if reserved == key:
                    del self._reserved[index]
                    return found
        return None

    def _record_model(self, call: CallRecord, found: BookCall | None) -> int:
        if found is None:
            return self.record_call(call)
        p = found.payload
        served_from = f"{self._mark}@{found.position}" if self._mark else p.get("served_from")
        usage: Mapping[str, int] = {} if self._mark else p.get("usage", {})
        return self.model_call(
            provider=call.provider,
            model=call.model,
            messages=call.messages,
            params=call.params,
            tools=call.tools,
            response=found.response,
            usage=usage,
            cost_usd=(0.0 if p.get("cost_usd") is not None else None)
            if self._mark
            else p.get("cost_usd"),
            latency_ms=0.0 if self._mark else call.latency_ms,
            attempts=[] if self._mark else [_attempt(a) for a in p.get("attempts", [])],
            error=ErrorInfo.model_validate(p["error"]) if p.get("error") else None,
            finish_reason=p.get("finish_reason"),
            served_from=served_from,
            ttft_ms=call.ttft_ms,
            chunks=call.chunks,
        ).position

    def _unmatched_call(self, call: CallRecord) -> BaseException:
        """The divergence of a request the record does not hold (or the record's end)."""
        candidates = self.book.unserved_calls()
        if not candidates:
            if not self.book.finished:
                return ReplayStopped()
            position = self.position + 1
            actual = self._called_event(call, None)
            found = divergence(
                position,
                self._expected_at(position),
                ("ModelCalled", comparable_event(actual)),
                "replay made a model call the record does not hold",
            )
        else:
            best = self._most_like(candidates, call)
            if self._gate and asyncio._get_running_loop() is None:
                # A thread: report at the recorded call's turn, so that of several threads
                # diverging at once the earliest position is reported, whatever the scheduling.
                self._wait_turn(best.position, soft=True)
                if self.divergence is not None:
                    return ReplayDivergenceError(self._recorded_run_id, self.divergence)
            actual = self._called_event(call, best)
            expected = comparable("ModelCalled", ModelCalled.class_version, best.payload)
            found = divergence(
                best.position,
                ("ModelCalled", expected),
                ("ModelCalled", comparable_event(actual)),
            )
            detail = _request_change(best.payload, self.book.messages(best), call)
            paths = ", ".join(c.path for c in found.changes[:5])
            found = replace(found, reason=f"ModelCalled differs at {paths}: {detail}")
        return self._diverged(found)

    def _most_like(self, candidates: Sequence[BookCall], call: CallRecord) -> BookCall:
        """The recorded call ``call``'s request most resembles (`_likeness`).

        Among those alike by the count of equal messages, the one whose differing messages
        read most alike (a changed word, not another question) wins, then the nearest.
        """
        scored = [(self._likeness(c, call), c) for c in candidates]
        top = max(score[0] for score, _ in scored)
        tied = [(score, c) for score, c in scored if score[0] == top]
        if len(tied) == 1:
            return tied[0][1]
        return max(tied, key=lambda t: (self._text_likeness(t[1], call), t[0][1]))[1]

    def _text_likeness(self, recorded: BookCall, call: CallRecord) -> float:
        """How alike the messages that differ read (0 to 1, by `difflib`)."""
        sent = self.book.messages(recorded)
        pairs = [(repr(a), repr(b)) for a, b in zip(sent, call.messages, strict=False) if a != b]
        if not pairs:
            return 1.0
        return sum(
            difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() for a, b in pairs
        ) / len(pairs)

    def _likeness(self, recorded: BookCall, call: CallRecord) -> tuple[int, int]:
        """How much a recorded call's request resembles ``call``'s (the nearest wins ties)."""
        sent = self.book.messages(recorded)
        same = sum(1 for a, b in zip(sent, call.messages, strict=False) if a == b)
        p = recorded.payload
        score = same - abs(len(sent) - len(call.messages))
        score += int(p["provider"] == call.provider) + int(p["model"] == call.model)
        score += int(p.get("params", {}) == dict(call.params))
        return score, -abs(recorded.position - (self.position + 1))

    def _called_event(self, call: CallRecord, like: BookCall | None) -> ModelCalled:
        """The ModelCalled ``call`` would record, its answer taken from ``like`` (if any)."""
        base = dict(like.payload) if like is not None else {"call_id": "call-?"}
        head, tools_ref = request_refs(call.messages, call.tools, self._key(None))
        fields = {
            **base,
            "provider": call.provider,
            "model": call.model,
            "params": dict(call.params),
            "messages_ref": head,
            "message_count": len(call.messages),
            "tools_ref": tools_ref,
        }
        if like is None or base.get("actor") == f"{base['provider']}:{base['model']}":
            fields["actor"] = f"{call.provider}:{call.model}"
        fields = {k: v for k, v in fields.items() if v is not None}
        return ModelCalled.model_validate(upcast("ModelCalled", ModelCalled.class_version, fields))

    def _expected_at(self, position: int) -> tuple[str, dict[str, Any]] | None:
        if position > len(self._expected):
            return None
        e = self._expected[position - 1]
        return e.kind, comparable(e.kind, e.version, e.payload)

    def _diverged(self, found: Any) -> ReplayDivergenceError:
        with self._lock:
            if self.divergence is None:
                self.divergence = found
                self._pending.clear()
        self._advanced()
        assert self.divergence is not None
        return ReplayDivergenceError(self._recorded_run_id, self.divergence)

    # Recorded tools ----------------------------------------------------------------------------

    def _call_tool(self, spec: ToolSpec, arguments: Any, invoke: Callable[[], Any]) -> Any:
        found = self._serving_tool(spec, arguments)
        if found is None:
            self._refuse_effect(spec, arguments)
            if asyncio._get_running_loop() is None:
                self._live_after_prefix()
            self.live_tools += 1
            return super()._call_tool(spec, arguments, invoke)
        if self._gate:
            self._wait_turn(found.called)
        call_id, position = self._tool_called_again(spec, arguments)
        if found.result is None:  # it never returned: run it (resume checked effects first)
            if asyncio._get_running_loop() is None:
                self._live_after_prefix()
            return self._finish_tool(spec, call_id, position, invoke)
        if self._gate:
            self._wait_turn(found.returned or 0)
        return self._tool_returned_again(spec, found, call_id, position)

    async def _acall_tool(
        self, spec: ToolSpec, arguments: Any, invoke: Callable[[], Coroutine[Any, Any, Any]]
    ) -> Any:
        found = self._serving_tool(spec, arguments)
        if found is None:
            self._refuse_effect(spec, arguments)
            await self._alive_after_prefix()
            self.live_tools += 1
            return await super()._acall_tool(spec, arguments, invoke)
        if self._gate:
            await self._await_turn(found.called)
        call_id, position = await self._aop("_tool_called_again", spec, arguments)
        if found.result is None:
            await self._alive_after_prefix()
            return await self._afinish_tool(spec, call_id, position, invoke)
        if self._gate:
            await self._await_turn(found.returned or 0)
        return await self._aop("_tool_returned_again", spec, found, call_id, position)

    def _serving_tool(self, spec: ToolSpec, arguments: Any) -> BookTool | None:
        self._join(_party())
        found = self.book.take_tool(spec.tool, arguments_key(arguments))
        if found is not None:
            self.served_tools += 1
            return found
        if self._live:
            return None
        raise self._unmatched_tool(spec, arguments)

    def _refuse_effect(self, spec: ToolSpec, arguments: Any) -> None:
        if spec.effectful and not self._allow_effects:
            raise EffectRefusedError(spec.tool, arguments, "the record holds no identical call")

    def _tool_called_again(self, spec: ToolSpec, arguments: Any) -> tuple[str, int]:
        return self.tool_call(
            spec.tool, arguments, tool_version=spec.version, effectful=spec.effectful
        )

    def _tool_returned_again(
        self, spec: ToolSpec, found: BookTool, call_id: str, position: int
    ) -> Any:
        p = found.result
        assert p is not None
        error: dict[str, Any] = p.get("error") or {}
        self.tool_result(
            call_id,
            ok=bool(p["ok"]),
            type=str(p["type"]),
            data=p.get("data") if p["ok"] else None,
            error=ToolErrorInfo.model_validate(error) if error else None,
            latency_ms=0.0 if self._mark else float(p.get("latency_ms", 0.0)),
            caused_by=position,
            served_from=f"{self._mark}@{found.returned}" if self._mark else p.get("served_from"),
        )
        if p["ok"]:
            return p.get("data")
        raise raise_recorded(spec.tool, str(error.get("code", "")), str(error.get("message", "")))

    def _unmatched_tool(self, spec: ToolSpec, arguments: Any) -> BaseException:
        candidates = self.book.unserved_tools(spec.tool)
        if not candidates and not self.book.finished:
            return ReplayStopped()
        if not candidates:
            self._tool_called_again(spec, arguments)  # the checker reports what it finds there
            return self._diverged(
                divergence(self.position + 1, None, None, f"replay called tool {spec.tool!r} again")
            )
        like = candidates[0]
        with self._lock, self._staged():
            event = self._tool_called(
                spec.tool,
                arguments,
                call_id=like.payload["call_id"],
                tool_version=spec.version,
                risk=like.payload.get("risk", "low"),
                effectful=spec.effectful,
                step_id=like.payload.get("step_id"),
                caused_by=like.payload.get("caused_by"),
            )
        expected = comparable("ToolCalled", 1, like.payload)
        return self._diverged(
            divergence(
                like.called, ("ToolCalled", expected), ("ToolCalled", comparable_event(event))
            )
        )

    # Turns -------------------------------------------------------------------------------------

    def _turn(self, position: int) -> int:
        """Where a recorded event's operation began: before the redaction facts it comes with."""
        while position > 2 and redaction_fact(self._expected[position - 2]):
            position -= 1
        return position

    def _wait_turn(self, position: int, *, soft: bool = False) -> None:
        """Block until every event before ``position`` is recorded (a thread's served call).

        ``soft`` (the run's end): when the wait cannot end, return instead of reporting a
        stall, so that the end is recorded and compared where it falls.
        """
        position = self._turn(position)
        if self.divergence is None and self.position >= position - 1:
            return  # already its turn (the usual case: one call at a time)
        me = _party()
        deadline = time.monotonic() + self._stall
        with self._turns:
            self._participants.wait(me, position - 1)
            self._sleepers += 1
            try:
                while True:
                    if self.divergence is not None:
                        if soft:
                            return
                        raise ReplayDivergenceError(self._recorded_run_id, self.divergence)
                    if self.position >= position - 1:
                        return
                    left = deadline - time.monotonic()
                    if left <= 0 or self._participants.nobody_else(me, self.position):
                        break
                    self._turns.wait(min(left, 0.05))
            finally:
                self._sleepers -= 1
                self._participants.waited(me)
        if not soft:
            raise self._stalled(position)

    async def _await_turn(self, position: int, *, soft: bool = False) -> None:
        """`_wait_turn` for a task: awaits, so the other tasks go on."""
        position = self._turn(position)
        if self.divergence is None and self.position >= position - 1:
            return  # already its turn
        me = _party()
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self._stall
        while True:
            with self._turns:
                if self.divergence is not None:
                    if soft:
                        return
                    raise ReplayDivergenceError(self._recorded_run_id, self.divergence)
                if self.position >= position - 1:
                    return
                if time.monotonic() >= deadline:
                    break
                future: asyncio.Future[None] = loop.create_future()
                self._waiting.append((position, loop, future))
                self._participants.wait(me, position - 1)
            try:
                await asyncio.wait([future], timeout=0.05)
            finally:
                with self._turns:
                    self._participants.waited(me)
                    self._waiting = [w for w in self._waiting if w[2] is not future]
            if future.done():
                continue
            with self._turns:
                if self._participants.nobody_else(me, self.position):
                    break
        if not soft:
            raise self._stalled(position)

    def _live_after_prefix(self) -> None:
        """Before a live call, wait until the repeated prefix is recorded (a fork, a resume).

        Threads repeating a run's first events while another goes live would otherwise record
        the live call among them: the live part starts after the prefix, as it did recorded.
        """
        if self._gate and self.position < self._prefix_end:
            self._wait_turn(self._prefix_end + 1, soft=True)

    async def _alive_after_prefix(self) -> None:
        """`_live_after_prefix` for a task."""
        if self._gate and self.position < self._prefix_end:
            await self._await_turn(self._prefix_end + 1, soft=True)

    def _end_turn(self) -> int | None:
        """The recorded end's position, when the run's end is to be gated; else None.

        A run can end (its function returns or raises) while other threads or tasks of it
        still record: a gathered tool that failed leaves the others running. Their events were
        recorded before the end; replay records the end at its turn too, so it waits for them.
        """
        if not self._gate or not self.book.finished or self.divergence is not None:
            return None
        return len(self._expected)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        end = None if self.closed else self._end_turn()
        if end is not None:
            self._wait_turn(end, soft=True)
        super().__exit__(exc_type, exc, tb)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        end = None if self.closed else self._end_turn()
        if end is not None:
            await self._await_turn(end, soft=True)
        await super().__aexit__(exc_type, exc, tb)

    def _stalled(self, position: int) -> ReplayDivergenceError:
        at = self.position + 1
        reason = (
            f"replay stalled at position {at}: the call recorded at position {position} waits "
            f"for the events recorded before it, and the run records nothing more"
        )
        return self._diverged(divergence(at, self._expected_at(at), None, reason))


def _request_change(recorded: Mapping[str, Any], sent: list[Any], call: CallRecord) -> str:
    """What differs between a recorded request and ``call``'s, in words (the first thing)."""
    if recorded["model"] != call.model or recorded["provider"] != call.provider:
        return f"model {recorded['provider']}:{recorded['model']} -> {call.provider}:{call.model}"
    for index, (old, new) in enumerate(zip(sent, call.messages, strict=False), 1):
        if old != new:
            role = new.get("role", "?") if isinstance(new, Mapping) else "?"
            return f"message {index} ({role}) {_short(old)} -> {_short(new)}"
    if len(sent) != len(call.messages):
        return f"{len(sent)} messages recorded, {len(call.messages)} sent"
    before, after = recorded.get("params", {}), dict(call.params)
    if before != after:
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                return f"param {name} {_short(before.get(name))} -> {_short(after.get(name))}"
    return "the tools offered changed"


def _short(value: Any) -> str:
    if isinstance(value, Mapping) and "content" in value:
        value = value["content"]
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _party() -> Any:
    """Who is recording: the asyncio task, else the thread."""
    loop = asyncio._get_running_loop()  # None outside a loop (current_task would raise)
    task = asyncio.current_task(loop) if loop is not None else None
    return task or threading.current_thread()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _attempt(recorded: Mapping[str, Any]) -> Attempt:
    return Attempt.model_validate(recorded)
