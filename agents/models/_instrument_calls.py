"""Calls of an instrumented SDK client: sent and recorded live, or served from the record.

Owns `CallSite` (one client's intercepted methods: a live call is sent through the SDK and
recorded once it completes, an SDK error recorded as a failed call and re-raised unchanged; in
replay no network call is made and the recorded answer comes back as real SDK objects) and
`RecordedStream`/`AsyncRecordedStream` (a stream's chunks passed through as they arrive, timed,
assembled, and the call recorded once when the stream ends, fails or is closed, or its reader is
cancelled: then as a cancelled call, which replay serves as the chunks that arrived followed by
nothing until the code cancels the reader again). Records go through the `ModelCallPort`
only. Must not import a vendor SDK (see `_instrument_support` for the `Vendor` strategy that
speaks for one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from time import perf_counter
from types import TracebackType
from typing import Any

import httpx2

from agentledger.agents.models._instrument_support import (
    Scrubber,
    Vendor,
    first_token_ms,
    scrubbed_json,
    to_json,
)
from agentledger.ledger import CallRecord, ModelCallPort, RunClosedError, ServedCall
from agentledger.ledger.events import Attempt, ErrorInfo

__all__ = ["CANCELLED", "AsyncRecordedStream", "CallSite", "RecordedStream"]

_ERROR_TEXT = 4000
"""How much of an error's message a failed call records (its start)."""
CANCELLED = "CancelledError"
"""The error type of a call cancelled before it answered (`CallSite.cancelled`), and of an
async stream whose reader was cancelled mid-way (recorded with the chunks that arrived)."""
_CANCELLED_TEXT = "the call was cancelled before it answered"
_CANCELLED_STREAM_TEXT = "the stream was cancelled while it was read"
CANCEL_GRACE_S = 5.0
"""How much longer than recorded replay waits for a call recorded as cancelled to be cancelled."""


class CallSite:
    """Where the calls of one instrumented client go: sent and recorded, or served in replay.

    Live, a call is sent through the SDK and recorded once it completes (a stream when it ends);
    an SDK error is recorded as a failed call and re-raised unchanged. In replay (the port is
    replaying) no network call is made: the port serves the recorded answer to the same request,
    which comes back as real SDK objects (a stream as chunks of the recorded sizes), and the
    call is recorded again with the served answer, so the replay compares it.
    """

    def __init__(
        self,
        vendor: Vendor,
        port: ModelCallPort,
        scrub: Scrubber,
        url: str,
        *,
        implied: Mapping[str, Any] | None = None,
    ) -> None:
        self.vendor = vendor
        self.port = port
        self.scrub = scrub
        self.url = url
        self.implied = dict(implied or {})
        """Params every request of this site records though no argument names them (the
        endpoint's: Anthropic's ``beta.messages`` records ``beta: true``)."""

    # Requests ----------------------------------------------------------------------------

    def request(
        self, kwargs: Mapping[str, Any], **implied: Any
    ) -> tuple[dict[str, Any], CallRecord]:
        """The arguments to send (iterables made lists, so they can be read twice) and the record.

        ``messages`` and ``tools`` have their own fields, the model its own; every other
        argument is a param (``implied`` ones too, such as ``stream`` for a stream helper, and
        the site's own `implied` params).
        """
        sent = dict(kwargs)
        for name in ("messages", "tools"):
            value = sent.get(name)
            if value is not None and not self.vendor.omitted(value) and not isinstance(value, list):
                sent[name] = list(value)
        omitted = self.vendor.omitted
        messages = [
            m if isinstance(m, dict) else {"value": m}
            for m in to_json(sent.get("messages") or [], self.scrub, omitted)
        ]
        tools = sent.get("tools")
        params = {k: v for k, v in sent.items() if k not in ("model", "messages", "tools")}
        record = CallRecord(
            provider=self.vendor.provider,
            model=str(sent.get("model", "")),
            messages=messages,
            params=to_json({**params, **self.implied, **implied}, self.scrub, omitted),
            tools=None if tools is None or omitted(tools) else to_json(tools, self.scrub, omitted),
        )
        return sent, record

    # Outcomes ----------------------------------------------------------------------------

    def completed(
        self,
        request: CallRecord,
        response: Mapping[str, Any],
        started: float,
        *,
        chunks: list[list[float]] | None = None,
        error: BaseException | None = None,
    ) -> CallRecord:
        """The record of a call that answered (a stream: what it assembled, and its timings)."""
        clean = scrubbed_json(response, self.scrub)
        usage, finish = self.vendor.outcome(clean)
        latency = (perf_counter() - started) * 1000.0
        failure, attempts = self._failure(error, latency) if error is not None else (None, [])
        return dataclasses.replace(
            request,
            response=clean,
            usage=usage,
            finish_reason=finish,
            latency_ms=latency,
            ttft_ms=first_token_ms(chunks) if chunks is not None else None,
            chunks=chunks,
            error=failure,
            attempts=attempts,
        )

    def failed(self, request: CallRecord, error: BaseException, started: float) -> CallRecord:
        """The record of a call the SDK raised for: no response, the error and its status."""
        latency = (perf_counter() - started) * 1000.0
        failure, attempts = self._failure(error, latency)
        return dataclasses.replace(request, latency_ms=latency, error=failure, attempts=attempts)

    def cancelled(self, request: CallRecord, started: float) -> CallRecord:
        """The record of a call cancelled before it answered (`CANCELLED`, no response).

        The request was sent (and may be billed), so the call is recorded; replay serves it as
        a call that answers nothing until the code cancels it again.
        """
        latency = (perf_counter() - started) * 1000.0
        attempt = Attempt(
            number=1, error_type=CANCELLED, error_message=_CANCELLED_TEXT, latency_ms=latency
        )
        return dataclasses.replace(
            request,
            latency_ms=latency,
            error=ErrorInfo(type=CANCELLED, message=_CANCELLED_TEXT),
            attempts=[attempt],
        )

    def _failure(self, error: BaseException, latency_ms: float) -> tuple[ErrorInfo, list[Attempt]]:
        if isinstance(error, asyncio.CancelledError):  # a stream's reader, cancelled mid-way
            kind, message = CANCELLED, _CANCELLED_STREAM_TEXT
        else:
            kind, message = type(error).__name__, self.scrub.text(str(error))[:_ERROR_TEXT]
        attempt = Attempt(
            number=1,
            status_code=self.vendor.status(error),
            error_type=kind,
            error_message=message,
            latency_ms=latency_ms,
        )
        return ErrorInfo(type=kind, message=message), [attempt]

    def served(
        self,
        request: CallRecord,
        served: ServedCall,
        started: float,
        *,
        stream: bool,
        error: BaseException | None = None,
    ) -> CallRecord:
        """The record of a replayed call: the served answer, as it was recorded.

        Its attempts are the served ones; a port that serves none gets the one attempt a live
        failure records, rebuilt from the error (``error`` is the exception replay raised).
        """
        usage, finish = (
            self.vendor.outcome(served.response) if served.response is not None else ({}, None)
        )
        attempts = list(served.attempts)
        if not attempts and served.error is not None:
            status = self.vendor.status(error) if error is not None else None
            attempts = [
                Attempt(
                    number=1,
                    status_code=status,
                    error_type=served.error.type,
                    error_message=served.error.message,
                )
            ]
        return dataclasses.replace(
            request,
            response=served.response,
            usage=usage,
            finish_reason=finish,
            latency_ms=(perf_counter() - started) * 1000.0,
            ttft_ms=first_token_ms(served.chunks) if stream else None,
            chunks=served.chunks if stream else None,
            error=served.error,
            attempts=attempts,
        )

    def served_exception(self, served: ServedCall) -> Exception:
        """The SDK exception a recorded failure raised (its status from the recorded attempts)."""
        error = served.error or ErrorInfo(
            type="APIError", message="the record holds neither a response nor an error"
        )
        status = next(
            (a.status_code for a in reversed(served.attempts) if a.status_code is not None), None
        )
        return self.vendor.exception(error, status, self.url)

    # Calls -------------------------------------------------------------------------------

    def call(self, send: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
        """Make (or in replay, serve) one call of a sync client."""
        sent, request = self.request(kwargs)
        stream = sent.get("stream") is True
        served = self.port.serve_call(request) if self.port.replaying else None
        if served is not None:
            return self.replay(request, served, stream=stream)
        self.check_open()
        started = perf_counter()  # live (a rerun's port serves None for a changed request)
        try:
            result = send(**sent)
        except self.vendor.errors as error:
            self.port.record_call(self.failed(request, error, started))
            raise
        if stream:
            return RecordedStream(result, self, request, started)
        response = result.model_dump(mode="json")
        self.port.record_call(self.completed(request, response, started))
        return self.as_recorded(result, response)

    async def acall(self, send: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
        """Make (or in replay, serve) one call of an async client."""
        sent, request = self.request(kwargs)
        stream = sent.get("stream") is True
        served = await self._aserve(request) if self.port.replaying else None
        if served is not None:
            return await self.areplay(request, served, stream=stream)
        self.check_open()
        started = perf_counter()  # live (a rerun's port serves None for a changed request)
        try:
            result = await send(**sent)
        except self.vendor.errors as error:
            await self.port.arecord_call(self.failed(request, error, started))
            raise
        except asyncio.CancelledError:  # a timeout or a cancelled task: the model was asked
            await self.port.arecord_call(self.cancelled(request, started))
            raise
        if stream:
            return AsyncRecordedStream(result, self, request, started)
        response = result.model_dump(mode="json")
        await self.port.arecord_call(self.completed(request, response, started))
        return self.as_recorded(result, response)

    def check_open(self) -> None:
        """Refuse a live call the port could not record (its run has ended), before sending.

        A port that can tell offers ``check_open`` (the recording run's port does).
        """
        check = getattr(self.port, "check_open", None)
        if check is not None:
            check()

    async def _aserve(self, request: CallRecord) -> ServedCall | None:
        """`serve_call`, awaited when the port can wait without blocking the loop."""
        aserve = getattr(self.port, "aserve_call", None)
        if aserve is not None:
            served: ServedCall | None = await aserve(request)
            return served
        return self.port.serve_call(request)

    async def served_cancellation(
        self, request: CallRecord, served: ServedCall, started: float, *, stream: bool
    ) -> None:
        """Serve a call recorded as cancelled: it answers nothing until it is cancelled again.

        The code that cancelled it (a timeout, a task cancelled) does so again in replay, about
        as long after the call as recorded; a call still waiting `CANCEL_GRACE_S` after that
        is cancelled here, as the record says it was. Either way it is recorded when it ends.
        """
        try:
            await _answer_nothing(served)
        finally:
            await self.port.arecord_call(self.served(request, served, started, stream=stream))

    def as_recorded(self, result: Any, response: dict[str, Any]) -> Any:
        """The SDK answer the code goes on with: rebuilt from the record when it was redacted.

        A port that redacts what it records offers ``redacted`` (the run's policy applied to a
        value); when that changes the answer, the code gets the answer as recorded, which is
        what a replay serves.
        """
        redact = getattr(self.port, "redacted", None)
        if redact is None:
            return result
        recorded = redact(response)
        return result if recorded == response else self.vendor.response(recorded)

    def replay(self, request: CallRecord, served: ServedCall, *, stream: bool) -> Any:
        """Serve a sync call from the record: an SDK object, a stream of chunks, or its error."""
        started = perf_counter()
        if served.response is None or (served.error is not None and not stream):
            error = self.served_exception(served)
            self.port.record_call(self.served(request, served, started, stream=stream, error=error))
            raise error
        if stream:
            return RecordedStream(None, self, request, started, served=served)
        answer = self.vendor.response(served.response)
        self.port.record_call(self.served(request, served, started, stream=False))
        return answer

    async def areplay(self, request: CallRecord, served: ServedCall, *, stream: bool) -> Any:
        """Serve an async call from the record (see `replay`)."""
        started = perf_counter()
        if _cancelled(served) and (not stream or served.response is None):
            await self.served_cancellation(request, served, started, stream=stream)
        if served.response is None or (served.error is not None and not stream):
            error = self.served_exception(served)
            await self.port.arecord_call(
                self.served(request, served, started, stream=stream, error=error)
            )
            raise error
        if stream:
            return AsyncRecordedStream(None, self, request, started, served=served)
        answer = self.vendor.response(served.response)
        await self.port.arecord_call(self.served(request, served, started, stream=False))
        return answer

    def replayed_chunks(self, served: ServedCall) -> Iterator[Any]:
        """A served stream's chunks, then its recorded error if it failed mid-stream."""
        yield from self._served_chunks(served)
        if served.error is not None:
            raise self.served_exception(served)

    async def areplayed_chunks(self, served: ServedCall) -> AsyncIterator[Any]:
        """`replayed_chunks` for an async stream; one cancelled mid-way is cancelled again.

        Its reader was cancelled (a timeout, its task cancelled) after the chunks recorded: they
        are served, then the next one never comes until the code cancels the reader again, or
        `CANCEL_GRACE_S` after the recorded wait, when it is cancelled here (as for a call).
        """
        for chunk in self._served_chunks(served):
            yield chunk
        if _cancelled(served):
            await _answer_nothing(served)
        if served.error is not None:
            raise self.served_exception(served)

    def _served_chunks(self, served: ServedCall) -> list[Any]:
        """The chunks of a served stream: the recorded text, cut to the recorded sizes.

        A stream that ended mid-way (an error, a cancellation) gives no more chunks than
        arrived when it was recorded (the text all in them): none of the closing chunks that
        never came (a finish chunk, ``message_stop``...).
        """
        assert served.response is not None
        sizes = [chunk[1] for chunk in served.chunks or []]
        chunks = self.vendor.chunks(served.response, sizes)
        if served.error is None or served.chunks is None:
            return chunks
        text, seen = sum(int(size) for size in sizes), 0
        assembler = self.vendor.assembler()
        for count, chunk in enumerate(chunks):
            if count >= len(sizes) and seen >= text:
                return chunks[:count]
            seen += assembler.add(chunk)
        return chunks


class _StreamState:
    """One stream's recording: its timings, its assembly, and whether it was recorded yet."""

    def __init__(
        self,
        site: CallSite,
        request: CallRecord,
        started: float,
        served: ServedCall | None,
    ) -> None:
        self.site = site
        self.request = request
        self.started = started
        self.served = served
        self.chunks: list[list[float]] = []
        self.assembler = site.vendor.assembler() if served is None else None
        self.done = False

    def observe(self, chunk: Any) -> None:
        if self.assembler is not None:
            chars = self.assembler.add(chunk)
            self.chunks.append([round((perf_counter() - self.started) * 1000.0, 3), chars])

    def record(self, error: BaseException | None) -> CallRecord | None:
        """The call's record, once (None if it was already taken)."""
        if self.done:
            return None
        self.done = True
        if self.served is not None:
            return self.site.served(
                self.request, self.served, self.started, stream=True, error=error
            )
        assert self.assembler is not None
        return self.site.completed(
            self.request, self.assembler.result(), self.started, chunks=self.chunks, error=error
        )


class _ReplayedResponse:
    """What a replayed stream has in place of the SDK's stream: a synthetic HTTP response."""

    def __init__(self, url: str) -> None:
        self.response = httpx2.Response(
            200,
            headers={"content-type": "text/event-stream"},
            request=httpx2.Request("POST", url),
        )

    def close(self) -> None:
        """Nothing to release: no connection was made."""


class _AsyncReplayedResponse(_ReplayedResponse):
    async def close(self) -> None:  # type: ignore[override]
        """Nothing to release: no connection was made."""


def _ended(error: BaseException) -> BaseException | None:
    """The error a stream ended with, as recorded: none when the consumer stopped it.

    A cancellation of its reader (``asyncio.CancelledError``) is recorded as such.
    """
    return error if isinstance(error, Exception | asyncio.CancelledError) else None


def _cancelled(served: ServedCall) -> bool:
    """Whether a served call was recorded as cancelled (before it answered, or mid-stream)."""
    return served.error is not None and served.error.type == CANCELLED


async def _answer_nothing(served: ServedCall) -> None:
    """Wait as a call recorded as cancelled did, and `CANCEL_GRACE_S` more; then cancel it."""
    waited_ms = max((a.latency_ms or 0.0 for a in served.attempts), default=0.0)
    await asyncio.sleep(waited_ms / 1000.0 + CANCEL_GRACE_S)
    raise asyncio.CancelledError  # as a cancelled task raises it: with no message


def _being_cancelled() -> bool:
    """Whether the running task is being cancelled (its code is unwinding a cancellation)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class RecordedStream:
    """A sync SDK stream passed through chunk by chunk, recorded when it ends.

    It ends when the chunks run out, when reading one raises (the error is recorded, then
    re-raised), when it is closed (``close()`` or leaving a ``with`` block: what was assembled
    so far is recorded), or at the latest when it is garbage-collected. Every other attribute is
    the SDK stream's (``response``...).
    """

    def __init__(
        self,
        inner: Any,
        site: CallSite,
        request: CallRecord,
        started: float,
        *,
        served: ServedCall | None = None,
    ) -> None:
        self._state = _StreamState(site, request, started, served)
        if served is None:
            self._inner = inner
            self._source: Iterator[Any] = iter(inner)
        else:
            self._inner = _ReplayedResponse(site.url)
            self._source = site.replayed_chunks(served)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._source)
        except StopIteration:
            self._finish(None)
            raise
        except BaseException as error:
            self._finish(_ended(error))
            raise
        self._state.observe(chunk)
        return chunk

    def _finish(self, error: BaseException | None) -> None:
        record = self._state.record(error)
        if record is not None:
            self._state.site.port.record_call(record)

    def close(self) -> None:
        """Close the SDK stream and record the call with what was received."""
        try:
            self._inner.close()
        finally:
            self._finish(None)

    def __enter__(self) -> RecordedStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def __del__(self) -> None:
        _record_dropped(self.__dict__.get("_state"))


class AsyncRecordedStream:
    """An async SDK stream passed through chunk by chunk, recorded when it ends.

    As `RecordedStream`, with ``await stream.close()`` and ``async with``; the record is
    written with the port's `arecord_call`, so the event loop never waits on the database. A
    stream dropped unclosed is recorded when garbage-collected, with the port's blocking
    `record_call` (close your streams).
    """

    def __init__(
        self,
        inner: Any,
        site: CallSite,
        request: CallRecord,
        started: float,
        *,
        served: ServedCall | None = None,
    ) -> None:
        self._state = _StreamState(site, request, started, served)
        if served is None:
            self._inner = inner
            self._source: AsyncIterator[Any] = aiter(inner)
        else:
            self._inner = _AsyncReplayedResponse(site.url)
            self._source = site.areplayed_chunks(served)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await anext(self._source)
        except StopAsyncIteration:
            await self._finish(None)
            raise
        except BaseException as error:
            await self._finish(_ended(error))
            raise
        self._state.observe(chunk)
        return chunk

    async def _finish(self, error: BaseException | None) -> None:
        record = self._state.record(error)
        if record is not None:
            await self._state.site.port.arecord_call(record)

    async def close(self) -> None:
        """Close the SDK stream and record the call with what was received.

        Closed while its task is being cancelled (a timeout fired while the code was busy
        between two chunks), the stream is recorded as cancelled.
        """
        await self._close(asyncio.CancelledError() if _being_cancelled() else None)

    async def _close(self, error: BaseException | None) -> None:
        try:
            await self._inner.close()
        finally:
            await self._finish(error)

    async def __aenter__(self) -> AsyncRecordedStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        cancelled = isinstance(exc, asyncio.CancelledError) or _being_cancelled()
        await self._close(asyncio.CancelledError() if cancelled else None)

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def __del__(self) -> None:
        _record_dropped(self.__dict__.get("_state"))


def _record_dropped(state: _StreamState | None) -> None:
    """Record a stream dropped unclosed (from ``__del__``: with the blocking `record_call`).

    A run already closed takes nothing more: the call is then left out, since a finalizer has
    no caller to raise to; for the same reason a commit of the run that failed earlier is left
    for the run's next call to raise (the recording port's ``record_dropped``).
    """
    if state is None or state.done:
        return
    record = state.record(None)
    if record is not None:
        port = state.site.port
        # a recording port that can leaves an earlier commit's failure for the run's next call
        record_dropped = getattr(port, "record_dropped", port.record_call)
        with contextlib.suppress(RunClosedError):
            record_dropped(record)
