"""What the SDK instrumentations share: requests as JSON, secrets scrubbed, streams timed.

`openai_instrument` and `anthropic_instrument` wrap vendor clients for `RunRecorder.instrument`
(see `agentledger.ledger.CallRecord` for what a recorded call holds). This module owns the part
that needs no SDK: `Passthrough` (an object with the wrapped one's interface, refusing what it
cannot record), `Scrubber` and `to_json` (request arguments as JSON with every API key and
bearer token replaced by ``[redacted]``), `CallSite` (one intercepted method: a live call sent
and recorded, or a replayed one served from the record with no network call),
`RecordedStream`/`AsyncRecordedStream` (chunks passed through as they arrive, timed, assembled,
and the call recorded when the stream ends, fails or is closed) and `distribute` (a recorded
answer's text cut back into chunks of the recorded sizes). A vendor module supplies the
`Vendor` strategy: its error classes, how a chunk is assembled, how a recorded answer becomes
real SDK objects again.

Must not import a vendor SDK, and must never let a secret into a `CallRecord`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from time import perf_counter
from types import TracebackType
from typing import Any, ClassVar, Protocol

import httpx2
from pydantic import BaseModel

from agentledger.agents.models.errors import UnrecordedCallError
from agentledger.ledger import CallRecord, ModelCallPort, ServedCall
from agentledger.ledger.events import Attempt, ErrorInfo

__all__ = [
    "REDACTED",
    "Assembler",
    "AsyncRecordedStream",
    "CallSite",
    "Passthrough",
    "RecordedStream",
    "Scrubber",
    "Vendor",
    "distribute",
    "to_json",
]

REDACTED = "[redacted]"
"""What a secret is replaced by in a record."""

_SECRET_NAME = re.compile(
    r"(?i)authorization|api[-_]?key|secret|password|passwd|cookie|(?:^|[-_])token$|"
    r"auth[-_]?token|access[-_]?token|bearer"
)
"""Mapping keys whose string values are secrets whatever they hold (headers, extra_body...)."""

_SECRET_TEXT = re.compile(
    r"(?i)(?P<bearer>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}|\bsk-[A-Za-z0-9_-]{16,}"
)
"""Key-shaped text inside any string: a bearer credential, an ``sk-...`` key."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_DEPTH = 64
_MAX_REPR = 1000
_ERROR_TEXT = 4000


def _redact_match(match: re.Match[str]) -> str:
    bearer = match.group("bearer")
    return f"{bearer}{REDACTED}" if bearer else REDACTED


class Scrubber:
    """Removes secrets from text: the client's own keys, and anything shaped like a key."""

    def __init__(self, secrets: Iterable[object] = ()) -> None:
        found = {s for s in secrets if isinstance(s, str) and len(s) >= 6}
        self._secrets = tuple(sorted(found, key=len, reverse=True))

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by ``[redacted]``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if len(text) >= 11:
            text = _SECRET_TEXT.sub(_redact_match, text)
        return text


def to_json(  # noqa: PLR0911, PLR0912 - one case per kind of value reads best as one flat dispatch
    value: Any, scrub: Scrubber, omitted: Callable[[object], bool], depth: int = 0
) -> Any:
    """``value`` as a JSON-native value, secrets scrubbed and omitted arguments left out.

    Pydantic models become their JSON dump (``None`` fields left out, so an SDK object passed
    back in a conversation records the same live and in replay), bytes become base64 text, a
    class its qualified name, anything else its ``repr`` without memory addresses. A string
    under a key that names a credential (``Authorization``, ``api_key``, ``x-api-key``...) is
    replaced whole.
    """
    if isinstance(value, str):
        return scrub.text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > _MAX_DEPTH:
        return _describe(value, scrub)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if omitted(item):
                continue
            name = str(key)
            if isinstance(item, str) and _SECRET_NAME.search(name):
                out[name] = REDACTED
            else:
                out[name] = to_json(item, scrub, omitted, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [to_json(item, scrub, omitted, depth + 1) for item in value]
    if isinstance(value, BaseModel):
        dumped = value.model_dump(mode="json", exclude_none=True)
        return to_json(dumped, scrub, omitted, depth + 1)
    if isinstance(value, set | frozenset):
        items = [to_json(item, scrub, omitted, depth + 1) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return _describe(value, scrub)


def _describe(value: object, scrub: Scrubber) -> str:
    return scrub.text(_ADDRESS.sub("", repr(value))[:_MAX_REPR])


def _never(value: object) -> bool:
    del value
    return False


def distribute(segments: Sequence[str], sizes: Iterable[float]) -> list[list[tuple[int, str]]]:
    """Cut the texts of ``segments`` (in order) into chunks of ``sizes`` characters.

    Each chunk is a list of ``(segment index, text)`` pieces (a chunk may end one segment and
    start the next). Sizes of zero make no chunk; text left after the last size makes one more
    chunk, so the chunks always join to the segments' whole text.
    """
    chunks: list[list[tuple[int, str]]] = []
    segment, offset = 0, 0
    for size in sizes:
        need = int(size)
        if need <= 0:
            continue
        pieces: list[tuple[int, str]] = []
        while need > 0 and segment < len(segments):
            piece = segments[segment][offset : offset + need]
            if piece:
                pieces.append((segment, piece))
                need -= len(piece)
                offset += len(piece)
            if offset >= len(segments[segment]):
                segment, offset = segment + 1, 0
        if pieces:
            chunks.append(pieces)
    rest: list[tuple[int, str]] = []
    while segment < len(segments):
        if segments[segment][offset:]:
            rest.append((segment, segments[segment][offset:]))
        segment, offset = segment + 1, 0
    if rest:
        chunks.append(rest)
    return chunks


def first_token_ms(chunks: Sequence[Sequence[float]] | None) -> float | None:
    """Time to first token: the first chunk carrying text, else the first chunk at all."""
    if not chunks:
        return None
    for at, chars in chunks:
        if chars > 0:
            return float(at)
    return float(chunks[0][0])


class Assembler(Protocol):
    """Folds a stream's chunks into the response a non-streamed call would have returned."""

    def add(self, chunk: Any) -> int:
        """Take one chunk; returns how many characters of text it carried."""
        ...

    def result(self) -> dict[str, Any]:
        """The assembled response as JSON (what was received, if the stream ended early)."""
        ...


class Vendor(Protocol):
    """What an SDK instrumentation tells `CallSite` about its vendor."""

    provider: str
    errors: tuple[type[Exception], ...]
    """The SDK's errors that make a call fail (recorded as failed calls, then re-raised)."""

    def omitted(self, value: object) -> bool:
        """Whether an argument's value is the SDK's "not given" marker."""
        ...

    def outcome(self, response: Mapping[str, Any]) -> tuple[dict[str, int], str | None]:
        """Usage (input, output and total tokens) and finish reason of a response's JSON."""
        ...

    def status(self, error: BaseException) -> int | None:
        """The HTTP status of an SDK error, if it has one."""
        ...

    def assembler(self) -> Assembler:
        """A fresh assembler for one stream."""
        ...

    def response(self, response: Mapping[str, Any]) -> Any:
        """A recorded response as the SDK's own response object."""
        ...

    def chunks(self, response: Mapping[str, Any], sizes: Sequence[float]) -> list[Any]:
        """A recorded (assembled) response as the SDK's stream chunks, cut to ``sizes``."""
        ...

    def exception(self, error: ErrorInfo, status: int | None, url: str) -> Exception:
        """A recorded error as the SDK exception that raised it (see the vendor module)."""
        ...


class Passthrough:
    """An object with the wrapped one's interface: what it does not define is the wrapped one's.

    Names in `refused` raise `UnrecordedCallError` (they would call the model unrecorded).
    """

    refused: ClassVar[Mapping[str, str]] = {}

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        wrapped = self.__dict__.get("_wrapped")
        if wrapped is None:
            raise AttributeError(name)
        instead = type(self).refused.get(name)
        if instead is not None:
            kind = type(wrapped)
            raise UnrecordedCallError(
                client=f"{kind.__module__}.{kind.__qualname__}", attribute=name, instead=instead
            )
        return getattr(wrapped, name)

    def __dir__(self) -> list[str]:
        return sorted((set(dir(type(self))) | set(dir(self._wrapped))) - set(type(self).refused))

    def __repr__(self) -> str:
        return f"<instrumented {self._wrapped!r}>"


class CallSite:
    """Where the calls of one instrumented client go: sent and recorded, or served in replay.

    Live, a call is sent through the SDK and recorded once it completes (a stream when it ends);
    an SDK error is recorded as a failed call and re-raised unchanged. In replay (the port is
    replaying) no network call is made: the port serves the recorded answer to the same request,
    which comes back as real SDK objects (a stream as chunks of the recorded sizes), and the
    call is recorded again with the served answer, so the replay compares it.
    """

    def __init__(self, vendor: Vendor, port: ModelCallPort, scrub: Scrubber, url: str) -> None:
        self.vendor = vendor
        self.port = port
        self.scrub = scrub
        self.url = url

    # Requests ----------------------------------------------------------------------------

    def request(
        self, kwargs: Mapping[str, Any], **implied: Any
    ) -> tuple[dict[str, Any], CallRecord]:
        """The arguments to send (iterables made lists, so they can be read twice) and the record.

        ``messages`` and ``tools`` have their own fields, the model its own; every other
        argument is a param (``implied`` ones too, such as ``stream`` for a stream helper).
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
            params=to_json({**params, **implied}, self.scrub, omitted),
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
        clean = to_json(response, self.scrub, _never)
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

    def _failure(self, error: BaseException, latency_ms: float) -> tuple[ErrorInfo, list[Attempt]]:
        kind = type(error).__name__
        message = self.scrub.text(str(error))[:_ERROR_TEXT]
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
            chunks=(served.chunks or []) if stream else None,
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
        if self.port.replaying:
            return self.replay(request, stream=stream)
        started = perf_counter()
        try:
            result = send(**sent)
        except self.vendor.errors as error:
            self.port.record_call(self.failed(request, error, started))
            raise
        if stream:
            return RecordedStream(result, self, request, started)
        self.port.record_call(self.completed(request, result.model_dump(mode="json"), started))
        return result

    async def acall(self, send: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
        """Make (or in replay, serve) one call of an async client."""
        sent, request = self.request(kwargs)
        stream = sent.get("stream") is True
        if self.port.replaying:
            return await self.areplay(request, stream=stream)
        started = perf_counter()
        try:
            result = await send(**sent)
        except self.vendor.errors as error:
            await self.port.arecord_call(self.failed(request, error, started))
            raise
        if stream:
            return AsyncRecordedStream(result, self, request, started)
        response = result.model_dump(mode="json")
        await self.port.arecord_call(self.completed(request, response, started))
        return result

    def replay(self, request: CallRecord, *, stream: bool) -> Any:
        """Serve a sync call from the record: an SDK object, a stream of chunks, or its error."""
        started = perf_counter()
        served = self.port.serve_call(request)
        if served.response is None or (served.error is not None and not stream):
            error = self.served_exception(served)
            self.port.record_call(self.served(request, served, started, stream=stream, error=error))
            raise error
        if stream:
            return RecordedStream(None, self, request, started, served=served)
        answer = self.vendor.response(served.response)
        self.port.record_call(self.served(request, served, started, stream=False))
        return answer

    async def areplay(self, request: CallRecord, *, stream: bool) -> Any:
        """Serve an async call from the record (see `replay`)."""
        started = perf_counter()
        served = self.port.serve_call(request)
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
        assert served.response is not None
        sizes = [chunk[1] for chunk in served.chunks or []]
        yield from self.vendor.chunks(served.response, sizes)
        if served.error is not None:
            raise self.served_exception(served)


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
    """The error a stream ended with, as recorded: none when the consumer stopped it."""
    return error if isinstance(error, Exception) else None


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
        state = self.__dict__.get("_state")
        if state is not None and not state.done:
            self._finish(None)


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
            self._source = _as_async(site.replayed_chunks(served))

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
        """Close the SDK stream and record the call with what was received."""
        try:
            await self._inner.close()
        finally:
            await self._finish(None)

    async def __aenter__(self) -> AsyncRecordedStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def __del__(self) -> None:
        state = self.__dict__.get("_state")
        if state is not None and not state.done:
            record = state.record(None)
            if record is not None:
                state.site.port.record_call(record)


async def _as_async(chunks: Iterator[Any]) -> AsyncIterator[Any]:
    for chunk in chunks:
        yield chunk
