"""`run.instrument(anthropic.Anthropic(...))`: the real SDK against the loopback server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic  # noqa: TID251 - these tests drive the real SDK through its instrumentation
import httpx2
import pytest
from _ports import KeptCalls, NoMatchingCallError, ServedCalls, without_timing

from agentledger.agents.loopback import LoopbackServer, Reply, ToolCallReply
from agentledger.agents.models import UnrecordedCallError
from agentledger.agents.models.anthropic_instrument import InstrumentedAnthropic
from agentledger.agents.testing import database_bytes
from agentledger.ledger import Ledger, instrumentation_for

KEY = "sk-ant-test-0123456789abcdefghijkl"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
_OPEN: list[anthropic.Anthropic] = []


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A loopback Anthropic-compatible server for the test."""
    with LoopbackServer() as running:
        yield running


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    """Close every sync client a test made when it ends."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def client(server: LoopbackServer) -> anthropic.Anthropic:
    """A real sync client of the loopback server (no SDK retries), closed after the test."""
    made = anthropic.Anthropic(api_key=KEY, base_url=server.anthropic_url, max_retries=0)
    _OPEN.append(made)
    return made


def aclient(server: LoopbackServer) -> anthropic.AsyncAnthropic:
    """A real async client of the loopback server: use it in ``async with``."""
    return anthropic.AsyncAnthropic(api_key=KEY, base_url=server.anthropic_url, max_retries=0)


def wrap(sdk: Any, port: Any) -> Any:
    """``sdk`` instrumented through ``port``, as `RunRecorder.instrument` does."""
    return instrumentation_for(sdk).wrap(sdk, port)


def test_a_message_is_recorded_with_system_as_a_param(server: LoopbackServer) -> None:
    """messages.create: messages, tools, the system prompt and max_tokens as params."""
    server.reply(Reply(text="Sunny."))
    port = KeptCalls()
    message = wrap(client(server), port).messages.create(
        model="claude-x", max_tokens=64, system="Be brief.", messages=USER, tools=[WEATHER]
    )
    assert isinstance(message, anthropic.types.Message)
    (call,) = port.calls
    assert (call.provider, call.model, call.messages, call.tools) == (
        "anthropic",
        "claude-x",
        USER,
        [WEATHER],
    )
    assert call.params == {"max_tokens": 64, "system": "Be brief."}
    assert call.response == message.model_dump(mode="json")
    assert call.finish_reason == "end_turn"
    usage = message.usage
    assert call.usage == {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def test_a_raw_event_stream_is_passed_through_and_assembled(server: LoopbackServer) -> None:
    """messages.create(stream=True): events as they come; the Message they make is recorded."""
    server.reply(Reply(text="Sunny and warm.", chunk_chars=4))
    port = KeptCalls()
    events = list(
        wrap(client(server), port).messages.create(
            model="claude-x", max_tokens=64, messages=USER, stream=True
        )
    )
    assert events[0].type == "message_start"
    assert events[-1].type == "message_stop"
    (call,) = port.calls
    assert call.response is not None
    assert call.response["content"] == [
        {"type": "text", "text": "Sunny and warm.", "citations": None}
    ]
    assert call.response["stop_reason"] == "end_turn"
    assert call.usage["output_tokens"] > 0
    assert call.chunks is not None
    assert len(call.chunks) == len(events)
    assert [int(c[1]) for c in call.chunks if c[1]] == [4, 4, 4, 3]


def test_the_stream_helper_works_and_is_recorded(server: LoopbackServer) -> None:
    """messages.stream: text_stream and get_final_message work; one call is recorded."""
    server.reply(Reply(text="Sunny and warm.", chunk_chars=5))
    port = KeptCalls()
    with wrap(client(server), port).messages.stream(
        model="claude-x", max_tokens=64, messages=USER
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert texts == ["Sunny", " and ", "warm."]
    (call,) = port.calls
    assert call.params == {"max_tokens": 64, "stream": True}
    assert call.response is not None
    assert call.response["content"][0]["text"] == final.content[0].text == "Sunny and warm."  # type: ignore[union-attr]
    assert call.ttft_ms is not None


def test_a_stream_helper_left_early_records_what_was_received(server: LoopbackServer) -> None:
    """Leaving the ``with`` block after the first text records that text only."""
    server.reply(Reply(text="abcdefghij", chunk_chars=3))
    port = KeptCalls()
    with wrap(client(server), port).messages.stream(
        model="claude-x", max_tokens=64, messages=USER
    ) as stream:
        first = next(iter(stream.text_stream))
    (call,) = port.calls
    assert first == "abc"
    assert call.response is not None
    assert call.response["content"][0]["text"] == "abc"
    assert call.response["stop_reason"] is None


def test_a_tool_use_answer_is_recorded_plain_and_streamed(server: LoopbackServer) -> None:
    """A tool_use block: its input assembled from the streamed JSON fragments."""
    answer = Reply(tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})], chunk_chars=5)
    server.reply(answer, answer)
    port = KeptCalls()
    messages = wrap(client(server), port).messages
    plain = messages.create(model="c", max_tokens=64, messages=USER, tools=[WEATHER])
    with messages.stream(model="c", max_tokens=64, messages=USER, tools=[WEATHER]) as stream:
        final = stream.get_final_message()
    assert plain.content[0].input == final.content[0].input == {"city": "Paris"}  # type: ignore[union-attr]
    first, second = port.calls
    assert first.finish_reason == second.finish_reason == "tool_use"
    assert second.response is not None
    assert second.response["content"][0]["input"] == {"city": "Paris"}


def test_a_401_is_recorded_without_the_key_and_reraised(
    server: LoopbackServer, tmp_path: Path
) -> None:
    """An error echoing the x-api-key: recorded scrubbed, the SDK's error re-raised as it was."""
    server.reply(Reply(status=401, error="invalid x-api-key: {api_key}"))
    path = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        with (
            ledger.record_run("keys") as run,
            pytest.raises(anthropic.AuthenticationError) as caught,
        ):
            run.instrument(client(server)).messages.create(model="c", max_tokens=8, messages=USER)
        assert ledger.verify(run.run_id).ok
        (called,) = [e.payload for e in ledger.events(run.run_id) if e.kind == "ModelCalled"]
    assert KEY in str(caught.value)
    assert called["error"]["type"] == "AuthenticationError"
    assert called["attempts"][0]["status_code"] == 401
    assert KEY.encode() not in database_bytes(path)


@pytest.mark.parametrize(
    "path",
    [
        ("with_raw_response",),
        ("with_streaming_response",),
        ("messages", "with_raw_response"),
        ("messages", "parse"),
        ("beta", "with_raw_response"),
        ("beta", "messages", "with_streaming_response"),
        ("beta", "messages", "parse"),
        ("beta", "messages", "tool_runner"),
        ("beta", "messages", "thread"),
    ],
)
def test_what_would_bypass_recording_is_refused(
    server: LoopbackServer, path: tuple[str, ...]
) -> None:
    """Raw responses, parse, and beta's tool runner and threads raise UnrecordedCallError."""
    target: Any = wrap(client(server), KeptCalls())
    for name in path[:-1]:
        target = getattr(target, name)
    with pytest.raises(UnrecordedCallError):
        getattr(target, path[-1])


def test_everything_else_passes_through(server: LoopbackServer) -> None:
    """The client's other attributes and resources are its own; with_options stays recorded."""
    sdk = client(server)
    port = KeptCalls()
    wrapped = wrap(sdk, port)
    assert isinstance(wrapped, InstrumentedAnthropic)
    assert wrapped.models is sdk.models
    assert wrapped.messages.batches is sdk.messages.batches
    assert wrapped.base_url == sdk.base_url
    wrapped.with_options(timeout=5.0).messages.create(model="c", max_tokens=8, messages=USER)
    assert len(port.calls) == 1


def test_async_create_and_stream_helper_are_recorded(server: LoopbackServer) -> None:
    """AsyncAnthropic: create, create(stream=True) and ``async with messages.stream``."""
    server.reply(Reply(text="one"), Reply(text="two two", chunk_chars=3))
    server.reply(Reply(text="three three", chunk_chars=4))
    port = KeptCalls()

    async def main() -> list[str]:
        async with wrap(aclient(server), port) as sdk:
            plain = await sdk.messages.create(model="c", max_tokens=8, messages=USER)
            events = await sdk.messages.create(model="c", max_tokens=8, messages=USER, stream=True)
            texts = [
                e.delta.text
                async for e in events
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            ]
            async with sdk.messages.stream(model="c", max_tokens=8, messages=USER) as stream:
                helper = [text async for text in stream.text_stream]
            return [plain.content[0].text, "".join(texts), "".join(helper)]

    assert asyncio.run(main()) == ["one", "two two", "three three"]
    assert [c.response["content"][0]["text"] for c in port.calls] == [  # type: ignore[index]
        "one",
        "two two",
        "three three",
    ]


def user_code(wrapped: Any) -> list[Any]:
    """Plain user code: a tool round trip, a raw stream, the stream helper, a caught error."""
    messages = wrapped.messages
    out: list[Any] = []
    first = messages.create(model="c", max_tokens=64, messages=USER, tools=[WEATHER])
    out.append(first)
    use = first.content[0]
    followup = [
        *USER,
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "24 C"}],
        },
    ]
    out.append(
        [
            e.model_dump(mode="json")
            for e in messages.create(model="c", max_tokens=64, messages=followup, stream=True)
        ]
    )
    with messages.stream(model="c", max_tokens=64, messages=followup, system="again") as stream:
        out.append(([*stream.text_stream], stream.get_final_message()))
    try:
        messages.create(model="c", max_tokens=64, messages=USER)
    except anthropic.APIStatusError as error:
        out.append((type(error).__name__, error.status_code))
    return out


def test_replay_answers_with_real_sdk_objects_and_makes_no_network_call(
    server: LoopbackServer,
) -> None:
    """Recorded, then replayed against a closed port: the same Messages, events and records."""
    server.reply(
        Reply(tool_calls=[ToolCallReply("get_weather", {"city": "Paris"})]),
        Reply(text="It is 24 C.", chunk_chars=4),
        Reply(text="Still 24 C.", chunk_chars=3),
        Reply(status=529, error="overloaded"),
    )
    live = KeptCalls()
    recorded = user_code(wrap(client(server), live))
    replaying = ServedCalls(live.calls)
    with anthropic.Anthropic(api_key=KEY, base_url="http://127.0.0.1:9", max_retries=0) as nowhere:
        replayed = user_code(wrap(nowhere, replaying))
    assert replayed[0] == recorded[0]
    assert isinstance(replayed[0], anthropic.types.Message)
    texts = [e["delta"]["text"] for e in replayed[1] if e["type"] == "content_block_delta"]
    assert "".join(texts) == "It is 24 C."
    assert replayed[2][0] == ["Sti", "ll ", "24 ", "C."]
    assert replayed[2][1] == recorded[2][1]
    assert replayed[3] == recorded[3] == ("OverloadedError", 529)
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


def test_async_replay_serves_the_stream_helper(server: LoopbackServer) -> None:
    """``async with messages.stream`` replays from the record with no request sent."""
    server.reply(Reply(text="async helper text", chunk_chars=5))

    async def main(port: Any) -> tuple[str, str]:
        async with wrap(aclient(server), port) as sdk:
            async with sdk.messages.stream(model="c", max_tokens=8, messages=USER) as stream:
                text = "".join([t async for t in stream.text_stream])
                final = await stream.get_final_text()
            return text, final

    live = KeptCalls()
    recorded = asyncio.run(main(live))
    replaying = ServedCalls(live.calls)
    assert asyncio.run(main(replaying)) == recorded == ("async helper text",) * 2
    assert len(server.requests) == 1
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


def test_a_transport_failure_is_recorded_as_a_connection_error() -> None:
    """No server: APIConnectionError, recorded with no status."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    sdk = anthropic.Anthropic(
        api_key=KEY,
        base_url="http://loopback.invalid",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    port = KeptCalls()
    with wrap(sdk, port) as wrapped, pytest.raises(anthropic.APIConnectionError):
        wrapped.messages.create(model="c", max_tokens=8, messages=USER)
    (call,) = port.calls
    assert call.error is not None
    assert call.error.type == "APIConnectionError"


# Beta messages -----------------------------------------------------------------------------


def beta_code(wrapped: Any) -> list[Any]:
    """User code on ``client.beta.messages``: create, create(stream=True), the stream helper."""
    messages = wrapped.beta.messages
    first = messages.create(model="c", max_tokens=64, messages=USER, betas=["files-api-2025-04-14"])
    events = list(messages.create(model="c", max_tokens=64, messages=USER, stream=True))
    with messages.stream(model="c", max_tokens=64, messages=USER, system="again") as stream:
        helper = (type(stream).__name__, [*stream.text_stream], stream.get_final_message())
    return [first, events, helper]


def test_beta_messages_are_recorded_and_replayed_as_beta_objects(server: LoopbackServer) -> None:
    """beta.messages: recorded with ``beta: true``, replayed offline as BetaMessage and events."""
    server.reply(
        Reply(text="Sunny."),
        Reply(text="It is 24 C.", chunk_chars=4),
        Reply(text="Still 24 C.", chunk_chars=3),
    )
    live = KeptCalls()
    recorded = beta_code(wrap(client(server), live))
    assert [r.path for r in server.requests] == ["/v1/messages"] * 3
    assert server.requests[0].headers["anthropic-beta"] == "files-api-2025-04-14"
    assert [c.params for c in live.calls] == [
        {"max_tokens": 64, "betas": ["files-api-2025-04-14"], "beta": True},
        {"max_tokens": 64, "stream": True, "beta": True},
        {"max_tokens": 64, "system": "again", "stream": True, "beta": True},
    ]
    replaying = ServedCalls(live.calls)
    with anthropic.Anthropic(api_key=KEY, base_url="http://127.0.0.1:9", max_retries=0) as nowhere:
        replayed = beta_code(wrap(nowhere, replaying))
    assert len(server.requests) == 3
    assert isinstance(replayed[0], anthropic.types.beta.BetaMessage)
    assert replayed[0] == recorded[0]
    assert isinstance(replayed[1][0], anthropic.types.beta.BetaRawMessageStartEvent)
    assert [type(e) for e in replayed[1]] == [type(e) for e in recorded[1]]
    texts = [e.delta.text for e in replayed[1] if e.type == "content_block_delta"]
    assert "".join(texts) == "It is 24 C."
    assert replayed[2][:2] == ("BetaMessageStream", ["Sti", "ll ", "24 ", "C."])
    assert replayed[2][2] == recorded[2][2]
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


def test_a_beta_answer_is_not_served_to_a_plain_messages_call(server: LoopbackServer) -> None:
    """The same request through ``messages`` is another request: the record does not answer it."""
    server.reply(Reply(text="Sunny."))
    live = KeptCalls()
    wrap(client(server), live).beta.messages.create(model="c", max_tokens=8, messages=USER)
    assert len(live.calls) == 1
    with (
        anthropic.Anthropic(api_key=KEY, base_url="http://127.0.0.1:9", max_retries=0) as nowhere,
        pytest.raises(NoMatchingCallError),
    ):
        wrap(nowhere, ServedCalls(live.calls)).messages.create(
            model="c", max_tokens=8, messages=USER
        )


def test_async_beta_stream_helper_replays_offline(server: LoopbackServer) -> None:
    """``async with client.beta.messages.stream(...)``: the SDK's BetaAsyncMessageStream."""
    server.reply(Reply(text="async beta text", chunk_chars=5))

    async def main(port: Any) -> tuple[str, str, str]:
        async with wrap(aclient(server), port) as sdk:
            async with sdk.beta.messages.stream(model="c", max_tokens=8, messages=USER) as stream:
                text = "".join([t async for t in stream.text_stream])
                final = await stream.get_final_message()
            return type(stream).__name__, text, type(final).__name__

    live = KeptCalls()
    recorded = asyncio.run(main(live))
    replaying = ServedCalls(live.calls)
    assert asyncio.run(main(replaying)) == recorded
    assert recorded[:2] == ("BetaAsyncMessageStream", "async beta text")
    assert len(server.requests) == 1
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


# Cancelled streams -------------------------------------------------------------------------


def test_a_stream_helper_whose_reader_is_cancelled_is_recorded_as_cancelled(
    server: LoopbackServer,
) -> None:
    """A timeout while ``text_stream`` waits: recorded cancelled, with the text that arrived.

    Replayed, the same pieces come, then the timeout fires again while the next never comes.
    """
    server.reply(Reply(text="abcdefghijklmnop", chunk_chars=2, chunk_delay_s=0.08))

    async def main(port: Any) -> list[str]:
        seen: list[str] = []
        async with wrap(aclient(server), port) as sdk:

            async def read() -> None:
                async with sdk.messages.stream(model="c", max_tokens=8, messages=USER) as stream:
                    async for text in stream.text_stream:
                        seen.append(text)

            with pytest.raises(TimeoutError):
                await asyncio.wait_for(read(), timeout=0.5)
        return seen

    live = KeptCalls()
    recorded = asyncio.run(main(live))
    (call,) = live.calls
    assert call.error is not None
    assert call.error.type == "CancelledError"
    text = call.response["content"][0]["text"]  # type: ignore[index]
    assert text == "".join(recorded)
    assert text
    assert "abcdefghijklmnop".startswith(text)
    assert text != "abcdefghijklmnop"
    replaying = ServedCalls(live.calls)
    assert asyncio.run(main(replaying)) == recorded
    assert len(server.requests) == 1
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]


def test_a_stream_helper_cancelled_before_it_answers_is_recorded_and_replayed(
    server: LoopbackServer,
) -> None:
    """Cancelled while ``messages.stream`` waits for its response: recorded as cancelled.

    In replay it answers nothing until the timeout fires again.
    """
    server.reply(Reply(text="too late", delay_s=1.0))

    async def main(port: Any) -> None:
        async with wrap(aclient(server), port) as sdk:

            async def read() -> None:
                async with sdk.messages.stream(model="c", max_tokens=8, messages=USER) as stream:
                    await stream.get_final_text()

            with pytest.raises(TimeoutError):
                await asyncio.wait_for(read(), timeout=0.2)

    live = KeptCalls()
    asyncio.run(main(live))
    (call,) = live.calls
    assert call.error is not None
    assert (call.error.type, call.response) == ("CancelledError", None)
    replaying = ServedCalls(live.calls)
    asyncio.run(main(replaying))
    assert len(server.requests) == 1
    assert [without_timing(c) for c in replaying.calls] == [without_timing(c) for c in live.calls]
