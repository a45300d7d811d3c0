"""`run.instrument(openai.OpenAI(...))`: the real SDK against the loopback server, recorded."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import openai  # noqa: TID251 - these tests drive the real SDK through its instrumentation
import pytest
from _ports import KeptCalls, NoMatchingCallError, ServedCalls, without_timing

from agentledger.agents.loopback import LoopbackServer, Reply, ToolCallReply
from agentledger.agents.models import UnrecordedCallError, _instrument_calls
from agentledger.agents.models.openai_instrument import InstrumentedOpenAI, instrumentation
from agentledger.agents.testing import database_bytes
from agentledger.ledger import (
    Ledger,
    RunClosedError,
    UninstrumentableClientError,
    instrumentation_for,
)

KEY = "sk-test-openai-0123456789abcdefghij"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A loopback OpenAI-compatible server for the test."""
    with LoopbackServer() as running:
        yield running


_OPEN: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    """Close every sync client a test made (their connections) when it ends."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def client(server: LoopbackServer, **options: Any) -> openai.OpenAI:
    """A real sync client of the loopback server (no SDK retries), closed after the test."""
    made = openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0, **options)
    _OPEN.append(made)
    return made


def aclient(server: LoopbackServer) -> openai.AsyncOpenAI:
    """A real async client of the loopback server (no SDK retries): use it in ``async with``."""
    return openai.AsyncOpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0)


def wrap(sdk: Any, port: Any) -> Any:
    """``sdk`` instrumented through ``port``, as `RunRecorder.instrument` does."""
    return instrumentation_for(sdk).wrap(sdk, port)


# Recording -------------------------------------------------------------------------------


def test_a_completion_is_recorded_with_its_request_response_and_usage(
    server: LoopbackServer,
) -> None:
    """One create: the messages, the other arguments as params, the response as SDK JSON."""
    server.reply(Reply(text="Sunny, 24 C."))
    port = KeptCalls()
    answer = wrap(client(server), port).chat.completions.create(
        model="gpt-4o-mini", messages=USER, temperature=0.2, tools=[WEATHER], seed=7
    )
    assert isinstance(answer, openai.types.chat.ChatCompletion)
    assert answer.choices[0].message.content == "Sunny, 24 C."
    (call,) = port.calls
    assert (call.provider, call.model, call.messages) == ("openai", "gpt-4o-mini", USER)
    assert call.params == {"temperature": 0.2, "seed": 7}
    assert call.tools == [WEATHER]
    assert call.response == answer.model_dump(mode="json")
    assert call.finish_reason == "stop"
    assert call.usage["total_tokens"] == answer.usage.total_tokens
    assert call.latency_ms > 0
    assert (call.ttft_ms, call.chunks, call.error) == (None, None, None)


def test_a_stream_passes_chunks_through_as_they_arrive(server: LoopbackServer) -> None:
    """Each chunk reaches the caller as the server sends it; the assembly is recorded."""
    server.reply(Reply(text="one two three four", chunk_chars=5, chunk_delay_s=0.05))
    port = KeptCalls()
    stream = wrap(client(server), port).chat.completions.create(
        model="gpt-4o-mini", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    arrivals, texts = [], []
    for chunk in stream:
        arrivals.append(time.perf_counter())
        texts.append(chunk.choices[0].delta.content if chunk.choices else None)
        assert isinstance(chunk, openai.types.chat.ChatCompletionChunk)
    assert "".join(t for t in texts if t) == "one two three four"
    assert arrivals[-1] - arrivals[1] > 0.15  # chunks came one by one, not all at the end
    (call,) = port.calls
    assert call.params == {"stream": True, "stream_options": {"include_usage": True}}
    assert call.response is not None
    assert call.response["choices"][0]["message"]["content"] == "one two three four"
    assert call.response["object"] == "chat.completion"
    assert call.usage["output_tokens"] > 0
    assert call.finish_reason == "stop"
    assert call.chunks is not None
    assert len(call.chunks) == len(texts)
    assert [int(c[1]) for c in call.chunks if c[1]] == [5, 5, 5, 3]
    assert call.ttft_ms is not None
    assert call.ttft_ms == call.chunks[1][0] < call.latency_ms


def test_a_stream_closed_early_records_what_was_received(server: LoopbackServer) -> None:
    """Closing a stream after two text chunks records those two chunks' text."""
    server.reply(Reply(text="abcdefghijkl", chunk_chars=3), Reply(text="xyz uvw", chunk_chars=2))
    port = KeptCalls()
    wrapped = wrap(client(server), port)
    stream = wrapped.chat.completions.create(model="m", messages=USER, stream=True)
    next(stream), next(stream), next(stream)
    stream.close()
    with wrapped.chat.completions.create(model="m", messages=USER, stream=True) as second:
        for chunk in second:
            if chunk.choices[0].delta.content:
                break
    first, then = port.calls
    assert first.response is not None
    assert then.response is not None
    assert first.response["choices"][0]["message"]["content"] == "abcdef"
    assert first.response["choices"][0]["finish_reason"] is None
    assert then.response["choices"][0]["message"]["content"] == "xy"
    assert first.error is None


def test_a_stream_dropped_without_closing_is_recorded_when_collected(
    server: LoopbackServer,
) -> None:
    """A consumer that breaks out of its loop and drops the stream still gets it recorded."""
    server.reply(Reply(text="hello world", chunk_chars=2))
    port = KeptCalls()
    wrapped = wrap(client(server), port)

    def first_words() -> str:
        for chunk in wrapped.chat.completions.create(model="m", messages=USER, stream=True):
            if chunk.choices[0].delta.content:
                return str(chunk.choices[0].delta.content)
        return ""

    assert first_words() == "he"
    gc.collect()
    (call,) = port.calls
    assert call.response is not None
    assert call.response["choices"][0]["message"]["content"] == "he"


def test_tool_calls_are_recorded_and_a_streamed_one_is_assembled(server: LoopbackServer) -> None:
    """A tool call answer, plain and streamed, records the call's id, name and arguments."""
    call_reply = Reply(tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})], chunk_chars=4)
    server.reply(call_reply, call_reply)
    port = KeptCalls()
    completions = wrap(client(server), port).chat.completions
    plain = completions.create(model="m", messages=USER, tools=[WEATHER])
    streamed = list(completions.create(model="m", messages=USER, tools=[WEATHER], stream=True))
    fragments = [
        f.function.arguments
        for chunk in streamed
        for f in chunk.choices[0].delta.tool_calls or ()
        if f.function
    ]
    assert json.loads("".join(a for a in fragments if a)) == {"city": "Paris"}
    first, second = port.calls
    assert first.finish_reason == second.finish_reason == "tool_calls"
    (recorded,) = second.response["choices"][0]["message"]["tool_calls"]  # type: ignore[index]
    assert recorded["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert recorded["id"] == "call_2_0"
    assert plain.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert second.chunks is not None
    assert sum(int(c[1]) for c in second.chunks) == len('{"city": "Paris"}')


def test_an_api_error_is_recorded_as_a_failed_call_and_reraised_unchanged(
    server: LoopbackServer,
) -> None:
    """A 500 is recorded (error, attempt with its status) and the SDK's own error propagates."""
    server.reply(Reply(status=500, error="the model is down"))
    port = KeptCalls()
    with pytest.raises(openai.InternalServerError) as caught:
        wrap(client(server), port).chat.completions.create(model="m", messages=USER)
    (call,) = port.calls
    assert call.response is None
    assert call.error is not None
    assert call.error.type == "InternalServerError"
    assert call.error.message == str(caught.value)
    (attempt,) = call.attempts
    assert (attempt.number, attempt.status_code, attempt.error_type) == (
        1,
        500,
        "InternalServerError",
    )


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (httpx2.ConnectError("refused"), openai.APIConnectionError),
        (httpx2.ReadTimeout("slow"), openai.APITimeoutError),
    ],
)
def test_connection_errors_and_timeouts_are_recorded_as_failed_calls(
    raised: Exception, expected: type[Exception]
) -> None:
    """A transport failure is recorded with no status and re-raised as the SDK raised it."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        del request
        raise raised

    sdk = openai.OpenAI(
        api_key=KEY,
        base_url="http://loopback.invalid/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    port = KeptCalls()
    with wrap(sdk, port) as wrapped, pytest.raises(expected):
        wrapped.chat.completions.create(model="m", messages=USER)
    (call,) = port.calls
    assert call.error is not None
    assert call.error.type == expected.__name__
    assert call.attempts[0].status_code is None


def test_a_stream_cut_mid_way_records_the_error_and_the_text_received(
    server: LoopbackServer,
) -> None:
    """A dropped connection mid-stream: the SDK error propagates, the partial text is kept."""
    server.reply(Reply(text="abcdefghij", chunk_chars=2, fail_after_chunks=3))
    port = KeptCalls()
    stream = wrap(client(server), port).chat.completions.create(
        model="m", messages=USER, stream=True
    )
    with pytest.raises(openai.APIError):
        list(stream)
    (call,) = port.calls
    assert call.error is not None
    assert call.response is not None
    assert call.response["choices"][0]["message"]["content"] == "abcd"


def test_no_api_key_or_bearer_token_is_ever_recorded(
    server: LoopbackServer, tmp_path: Path
) -> None:
    """A 401 echoing the key, a token in extra_headers or in a message: none reach the file."""
    server.reply(Reply(status=401, error="Incorrect API key provided: {api_key}."), Reply())
    token = "tok-0123456789-secret-bearer"  # noqa: S105 - a fake credential to search for
    path = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        with ledger.record_run("keys") as run:
            wrapped = run.instrument(client(server))
            with pytest.raises(openai.AuthenticationError) as caught:
                wrapped.chat.completions.create(model="m", messages=USER)
            assert KEY in str(caught.value)  # the SDK's own error is left as it was
            wrapped.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": f"my key is {KEY}"}],
                extra_headers={"Authorization": f"Bearer {token}", "X-Trace": "t1"},
                extra_body={"note": f"Bearer {token}"},
            )
        assert ledger.verify(run.run_id).ok
        failed, answered = [e for e in ledger.events(run.run_id) if e.kind == "ModelCalled"]
    assert failed.payload["error"]["type"] == "AuthenticationError"
    assert "[redacted]" in failed.payload["error"]["message"]
    assert answered.payload["params"]["extra_headers"] == {
        "Authorization": "[redacted]",
        "X-Trace": "t1",
    }
    stored = database_bytes(path)
    assert KEY.encode() not in stored
    assert token.encode() not in stored


# The wrapped client's interface ------------------------------------------------------------


def test_the_wrapped_client_passes_everything_else_through(server: LoopbackServer) -> None:
    """Attributes and resources not intercepted are the client's own."""
    sdk = client(server)
    wrapped = wrap(sdk, KeptCalls())
    assert isinstance(wrapped, InstrumentedOpenAI)
    assert wrapped.base_url == sdk.base_url
    assert wrapped.max_retries == 0
    assert wrapped.models is sdk.models
    assert wrapped.chat.completions.messages is sdk.chat.completions.messages
    assert "chat" in dir(wrapped)
    assert "with_raw_response" not in dir(wrapped)
    assert "instrumented" in repr(wrapped)


def test_with_options_returns_a_client_still_recorded(server: LoopbackServer) -> None:
    """``with_options(...)`` and ``copy(...)`` record into the same port."""
    port = KeptCalls()
    wrapped = wrap(client(server), port)
    wrapped.with_options(timeout=5.0).chat.completions.create(model="a", messages=USER)
    wrapped.copy(max_retries=1).chat.completions.create(model="b", messages=USER)
    assert [c.model for c in port.calls] == ["a", "b"]


@pytest.mark.parametrize(
    "path",
    [
        ("with_raw_response",),
        ("with_streaming_response",),
        ("chat", "with_raw_response"),
        ("chat", "completions", "with_raw_response"),
        ("chat", "completions", "with_streaming_response"),
        ("chat", "completions", "parse"),
        ("chat", "completions", "stream"),
        ("beta", "with_raw_response"),
        ("beta", "chat", "completions", "parse"),
        ("beta", "chat", "completions", "stream"),
    ],
)
def test_what_would_bypass_recording_is_refused_clearly(
    server: LoopbackServer, path: tuple[str, ...]
) -> None:
    """Raw responses and the parse/stream helpers raise instead of calling unrecorded."""
    target: Any = wrap(client(server), KeptCalls())
    for name in path[:-1]:
        target = getattr(target, name)
    with pytest.raises(UnrecordedCallError, match=path[-1]) as caught:
        getattr(target, path[-1])
    assert caught.value.attribute == path[-1]


def test_beta_chat_completions_are_recorded_as_chat_completions(server: LoopbackServer) -> None:
    """``client.beta.chat`` is the SDK's chat resource: its calls land in the run too."""
    port = KeptCalls()
    wrapped = wrap(client(server), port)
    reply = wrapped.beta.chat.completions.create(model="gpt-4o-mini", messages=USER)
    assert reply.choices[0].message.content
    assert [c.model for c in port.calls] == ["gpt-4o-mini"]
    assert wrapped.beta.assistants is wrapped._wrapped.beta.assistants  # the rest passes through


def test_a_client_kept_past_its_run_refuses_before_calling_the_model(
    server: LoopbackServer,
) -> None:
    """After the run ended, a call raises RunClosedError and no request reaches the server."""
    with Ledger.open("memory://") as ledger:
        with ledger.record_run("short") as run:
            kept = run.instrument(client(server))
            kept.chat.completions.create(model="m", messages=USER)
        sent = len(server.requests)
        with pytest.raises(RunClosedError):
            kept.chat.completions.create(model="m", messages=USER)
        with pytest.raises(RunClosedError):
            kept.chat.completions.create(model="m", messages=USER, stream=True)
        assert len(server.requests) == sent
        assert [e.kind for e in ledger.events(run.run_id)].count("ModelCalled") == 1


def test_an_instrumented_client_is_not_instrumented_again(server: LoopbackServer) -> None:
    """Passing what run.instrument returned to it again says so, not "no instrumentation"."""
    with Ledger.open("memory://") as ledger, ledger.record_run("twice") as run:
        wrapped = run.instrument(client(server))
        with pytest.raises(UninstrumentableClientError, match="already instrumented"):
            run.instrument(wrapped)


def test_a_client_no_instrumentation_handles_is_refused() -> None:
    """An object of no known SDK type raises UninstrumentableClientError, naming the known."""
    with pytest.raises(UninstrumentableClientError, match="openai") as caught:
        instrumentation_for(object())
    assert caught.value.client_type == "builtins.object"
    assert instrumentation().handles(openai.AsyncOpenAI(api_key=KEY))
    with httpx2.Client() as other:
        assert not instrumentation().handles(other)


# Async -------------------------------------------------------------------------------------


def test_async_calls_and_streams_are_recorded(server: LoopbackServer) -> None:
    """AsyncOpenAI: create, a stream read to the end, one closed early, gathered calls."""
    server.reply(Reply(text="plain"), Reply(text="streamed text", chunk_chars=4))
    server.reply(Reply(text="closed early", chunk_chars=3))
    port = KeptCalls()

    async def main() -> list[str]:
        async with wrap(aclient(server), port) as sdk:
            return await calls(sdk.chat.completions)

    async def calls(completions: Any) -> list[str]:
        plain = await completions.create(model="m", messages=USER)
        stream = await completions.create(model="m", messages=USER, stream=True)
        texts = [c.choices[0].delta.content or "" async for c in stream]
        async with await completions.create(model="m", messages=USER, stream=True) as early:
            async for chunk in early:
                if chunk.choices[0].delta.content:
                    break
        gathered = await asyncio.gather(
            *(
                completions.create(model="m", messages=[{"role": "user", "content": q}])
                for q in ("a", "b", "c")
            )
        )
        return [plain.choices[0].message.content, "".join(texts)] + [
            g.choices[0].message.content for g in gathered
        ]

    assert asyncio.run(main()) == ["plain", "streamed text", "echo: a", "echo: b", "echo: c"]
    contents = [c.response["choices"][0]["message"]["content"] for c in port.calls]  # type: ignore[index]
    assert contents[:3] == ["plain", "streamed text", "clo"]
    assert sorted(contents[3:]) == ["echo: a", "echo: b", "echo: c"]
    assert port.calls[1].chunks is not None


# Replay ------------------------------------------------------------------------------------


def user_code(wrapped: Any) -> list[Any]:
    """Plain user code: a call, a stream, a tool round trip, an error it catches."""
    completions = wrapped.chat.completions
    out: list[Any] = []
    first = completions.create(model="m", messages=USER, tools=[WEATHER])
    out.append(first)
    call = first.choices[0].message.tool_calls[0]
    followup = [
        *USER,
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "24 C"},
    ]
    stream = completions.create(
        model="m", messages=followup, stream=True, stream_options={"include_usage": True}
    )
    out.append([chunk.model_dump(mode="json") for chunk in stream])
    try:
        completions.create(model="m", messages=USER, temperature=1.5)
    except openai.AuthenticationError as error:
        out.append((type(error).__name__, error.status_code, str(error)))
    return out


def test_replay_answers_with_real_sdk_objects_and_makes_no_network_call(
    server: LoopbackServer,
) -> None:
    """Recorded, then replayed with the server stopped: same objects, same records."""
    server.reply(
        Reply(tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})]),
        Reply(text="It is 24 C in Paris.", chunk_chars=6),
        Reply(status=401, error="bad key {api_key}"),
    )
    live = KeptCalls()
    recorded = user_code(wrap(client(server), live))
    server.stop()

    replaying = ServedCalls(live.calls)
    with openai.OpenAI(api_key=KEY, base_url="http://127.0.0.1:9/v1", max_retries=0) as nowhere:
        replayed = user_code(wrap(nowhere, replaying))
    assert isinstance(replayed[0], openai.types.chat.ChatCompletion)
    assert replayed[0] == recorded[0]
    text = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in replayed[1] if c["choices"]
    )
    assert text == "It is 24 C in Paris."
    assert replayed[1][-1]["usage"] == recorded[1][-1]["usage"]
    assert replayed[2][:2] == ("AuthenticationError", 401)
    assert "[redacted]" in replayed[2][2]
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]
    assert replaying.calls[1].chunks == live.calls[1].chunks


def test_replay_of_a_changed_request_finds_no_recorded_answer(server: LoopbackServer) -> None:
    """A prompt changed after recording: the port is asked for a request it never saw."""
    live = KeptCalls()
    wrap(client(server), live).chat.completions.create(model="m", messages=USER)
    replaying = ServedCalls(live.calls)
    changed = [{"role": "user", "content": "What is the weather in Rome?"}]
    with pytest.raises(NoMatchingCallError):
        wrap(client(server), replaying).chat.completions.create(model="m", messages=changed)
    assert len(server.requests) == 1  # replay sent nothing


def test_async_replay_serves_calls_and_streams(server: LoopbackServer) -> None:
    """AsyncOpenAI replays a call and a stream from the record, comparing equal."""
    server.reply(Reply(text="first"), Reply(text="second answer", chunk_chars=4))

    async def main(port: Any) -> list[str]:
        async with wrap(aclient(server), port) as sdk:
            return await calls(sdk.chat.completions)

    async def calls(completions: Any) -> list[str]:
        plain = await completions.create(model="m", messages=USER)
        stream = await completions.create(model="m", messages=USER, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        return [plain.choices[0].message.content, text]

    live = KeptCalls()
    assert asyncio.run(main(live)) == ["first", "second answer"]
    replaying = ServedCalls(live.calls)
    assert asyncio.run(main(replaying)) == ["first", "second answer"]
    assert len(server.requests) == 2
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


def test_a_replayed_stream_that_failed_mid_way_fails_again_after_its_text(
    server: LoopbackServer,
) -> None:
    """The recorded partial text is served, then the recorded error is raised."""
    server.reply(Reply(text="abcdefghij", chunk_chars=2, fail_after_chunks=3))
    live = KeptCalls()

    def consume(port: Any) -> tuple[str, str]:
        stream = wrap(client(server), port).chat.completions.create(
            model="m", messages=USER, stream=True
        )
        text = []
        try:
            for chunk in stream:
                text.append(chunk.choices[0].delta.content or "")
        except openai.APIError as error:
            return "".join(text), type(error).__name__
        return "".join(text), ""

    recorded = consume(live)
    replaying = ServedCalls(live.calls)
    assert consume(replaying) == recorded == ("abcd", recorded[1])
    assert recorded[1]
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


def read_until_cancelled(port: Any, server: LoopbackServer, timeout: float | None) -> list[str]:
    """Read a stream's text, its reader cancelled by a timeout (none: read until it ends)."""
    seen: list[str] = []

    async def main() -> None:
        async with wrap(aclient(server), port) as sdk:

            async def read() -> None:
                stream = await sdk.chat.completions.create(model="m", messages=USER, stream=True)
                async for chunk in stream:
                    seen.append(chunk.choices[0].delta.content or "")

            await asyncio.wait_for(read(), timeout=timeout)

    with pytest.raises(TimeoutError if timeout is not None else asyncio.CancelledError):
        asyncio.run(main())
    return seen


def test_a_stream_whose_reader_is_cancelled_is_recorded_as_cancelled(
    server: LoopbackServer,
) -> None:
    """A timeout mid-stream: recorded as cancelled, with the chunks that arrived.

    Replayed, the same chunks come, then nothing until the timeout fires again (no closing
    chunk that never arrived).
    """
    server.reply(Reply(text="abcdefghijklmnop", chunk_chars=2, chunk_delay_s=0.1))
    live = KeptCalls()
    recorded = read_until_cancelled(live, server, timeout=0.5)
    (call,) = live.calls
    assert call.error is not None
    assert (call.error.type, call.error.message) == (
        "CancelledError",
        "the stream was cancelled while it was read",
    )
    assert [a.error_type for a in call.attempts] == ["CancelledError"]
    text = call.response["choices"][0]["message"]["content"]  # type: ignore[index]
    assert text == "".join(recorded)
    assert text
    assert "abcdefghijklmnop".startswith(text)
    assert text != "abcdefghijklmnop"
    assert call.chunks is not None
    assert len(call.chunks) == len(recorded)
    replaying = ServedCalls(live.calls)
    assert read_until_cancelled(replaying, server, timeout=0.5) == recorded
    assert len(server.requests) == 1
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


def test_a_replayed_cancelled_stream_nobody_cancels_is_cancelled_after_its_wait(
    server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replayed by code that no longer times out, the stream is cancelled as recorded.

    It is, once it has waited as long as recorded and the grace (here 0.1 s) more.
    """
    monkeypatch.setattr(_instrument_calls, "CANCEL_GRACE_S", 0.1)
    server.reply(Reply(text="abcdefghijklmnop", chunk_chars=2, chunk_delay_s=0.1))
    live = KeptCalls()
    recorded = read_until_cancelled(live, server, timeout=0.5)
    replaying = ServedCalls(live.calls)
    began = time.monotonic()
    assert read_until_cancelled(replaying, server, timeout=None) == recorded
    assert 0.5 <= time.monotonic() - began < 3.0
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


# Through the ledger ------------------------------------------------------------------------


def record_with_ledger(url: str, server: LoopbackServer) -> tuple[Ledger, str]:
    """Record a call and a stream through `record_run` and `run.instrument`."""
    server.reply(Reply(text="plain answer"), Reply(text="a streamed answer", chunk_chars=4))
    ledger = Ledger.open(url)
    with ledger.record_run("my-agent", {"question": "weather"}) as run:
        wrapped = run.instrument(client(server))
        wrapped.chat.completions.create(model="gpt-4o-mini", messages=USER)
        for _ in wrapped.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True):
            pass
    return ledger, run.run_id


def check_recorded_run(ledger: Ledger, run_id: str) -> None:
    """The run verifies; the stream's ModelCalled has its timings and its chunk blob."""
    assert ledger.verify(run_id).ok
    plain, streamed = [e.payload for e in ledger.events(run_id) if e.kind == "ModelCalled"]
    assert "ttft_ms" not in plain
    assert plain["finish_reason"] == "stop"
    assert streamed["chunk_count"] == 7  # role, five text chunks, finish
    assert 0 < streamed["ttft_ms"] <= streamed["latency_ms"]
    blobs = ledger.blobs([streamed["chunks_ref"], streamed["response_ref"]])
    chunks = blobs[streamed["chunks_ref"]]["chunks"]
    assert [int(c[1]) for c in chunks] == [0, 4, 4, 4, 4, 1, 0]
    response = blobs[streamed["response_ref"]]["message"]
    assert response["choices"][0]["message"]["content"] == "a streamed answer"


def test_a_run_recorded_on_sqlite_verifies_with_stream_timings(
    server: LoopbackServer, sqlite_url: str
) -> None:
    """`record_run` + `run.instrument` on SQLite: ModelCalled with ttft, chunks and blob."""
    ledger, run_id = record_with_ledger(sqlite_url, server)
    with ledger:
        check_recorded_run(ledger, run_id)


@pytest.mark.postgres
def test_a_run_recorded_on_postgresql_verifies_with_stream_timings(
    server: LoopbackServer, pg_url: str
) -> None:
    """The same on the real PostgreSQL server."""
    ledger, run_id = record_with_ledger(pg_url, server)
    with ledger:
        check_recorded_run(ledger, run_id)


def test_a_stream_dropped_after_its_run_closed_is_left_out_quietly(
    server: LoopbackServer, sqlite_url: str
) -> None:
    """A stream still open when its run completes has nowhere to record: no error is raised."""
    with Ledger.open(sqlite_url) as ledger:
        with ledger.record_run("late") as run:
            stream = run.instrument(client(server)).chat.completions.create(
                model="m", messages=USER, stream=True
            )
            next(stream)
        del stream
        gc.collect()
        assert [e.kind for e in ledger.events(run.run_id)] == ["RunStarted", "RunCompleted"]


def test_one_client_used_from_several_threads_records_every_call(server: LoopbackServer) -> None:
    """Calls and streams from four threads through one wrapped client: each recorded once."""
    port = KeptCalls()
    completions = wrap(client(server), port).chat.completions

    def ask(number: int) -> str:
        messages = [{"role": "user", "content": f"q{number}"}]
        if number % 2:
            stream = completions.create(model="m", messages=messages, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in stream)
        return str(completions.create(model="m", messages=messages).choices[0].message.content)

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(ask, range(8)))
    assert answers == [f"echo: q{n}" for n in range(8)]
    recorded = sorted(c.response["choices"][0]["message"]["content"] for c in port.calls)  # type: ignore[index]
    assert recorded == sorted(answers)


def test_a_hundred_runs_at_once_each_record_their_calls(
    server: LoopbackServer, ledger: Ledger
) -> None:
    """100 async runs connecting to one server at once: every call is answered and recorded.

    (The server queues as many connections as arrive together; with the standard library's
    default of five, most of them were reset before it accepted them.)
    """

    async def one(client: openai.AsyncOpenAI, number: int) -> str:
        async with ledger.arecord_run("many-at-once") as run:
            wrapped = run.instrument(client)
            reply = await wrapped.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"q{number}"}]
            )
            return str(reply.choices[0].message.content)

    async def all_at_once() -> list[str]:
        async with aclient(server) as shared:
            return await asyncio.gather(*(one(shared, n) for n in range(100)))

    assert asyncio.run(all_at_once()) == [f"echo: q{n}" for n in range(100)]
    runs = ledger.runs(limit=200)
    assert len(runs) == 100
    assert all(r.status == "completed" for r in runs)
    assert sum(1 for r in runs for e in ledger.events(r.run_id) if e.kind == "ModelCalled") == 100
    assert ledger.verify().ok
