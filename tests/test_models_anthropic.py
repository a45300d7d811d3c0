"""AnthropicChatModel, driven through the real anthropic SDK over an in-memory httpx2 transport."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any, NoReturn

import httpx2
import pytest

from agentledger.agents.models import (
    AnthropicChatModel,
    ChatModel,
    Message,
    MissingAPIKeyError,
    ModelCallError,
    ModelPrice,
    ModelRequest,
    PriceTable,
    StreamChunk,
    StreamingChatModel,
    ToolCallRequest,
)

KEY = "sk-ant-test-0123456789abcdef"
MODEL = "claude-haiku-4-5"
WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse real network connections and keep the developer's Anthropic settings out."""

    def refuse(*_args: object, **_kwargs: object) -> NoReturn:
        msg = "real network connections are refused in model tests"
        raise OSError(msg)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for var in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CONFIG_DIR",
        "ANTHROPIC_CUSTOM_HEADERS",
    ):
        monkeypatch.delenv(var, raising=False)


class FakeAnthropic:
    """An in-memory Messages API: answers with queued responses, keeps the requests."""

    def __init__(self) -> None:
        self.queue: list[httpx2.Response | Exception] = []
        self.requests: list[httpx2.Request] = []

    def then(self, *answers: httpx2.Response | Exception) -> FakeAnthropic:
        """Queue answers for the next requests, in order."""
        self.queue.extend(answers)
        return self

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        """Answer one request with the next queued response (or raise the queued error)."""
        self.requests.append(request)
        if not self.queue:
            return error_response(500, "api_error", "the fake server has no answer queued")
        answer = self.queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies the server received."""
        return [json.loads(request.content) for request in self.requests]


def message(
    content: list[dict[str, Any]] | None = None,
    *,
    stop_reason: str = "end_turn",
    model: str = "claude-haiku-4-5-20251001",
    usage: dict[str, Any] | None = None,
) -> httpx2.Response:
    """Build a 200 Messages response in the API's wire format."""
    body = {
        "id": "msg_01abc",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content if content is not None else [{"type": "text", "text": "Hello."}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 20, "output_tokens": 5},
    }
    return httpx2.Response(200, json=body)


def error_response(status: int, error_type: str, text: str) -> httpx2.Response:
    """Build an Anthropic-style error body with the given HTTP status."""
    body = {"type": "error", "error": {"type": error_type, "message": text}}
    return httpx2.Response(status, json=body)


def sse(*events: dict[str, Any]) -> httpx2.Response:
    """Build a stream: each event as `event:` and `data:` lines, as Anthropic sends them."""
    text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=text.encode()
    )


def message_start(input_tokens: int = 25) -> dict[str, Any]:
    """Build the stream's first event, carrying the id, model and input usage."""
    return {
        "type": "message_start",
        "message": {
            "id": "msg_stream1",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5-20251001",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": 1,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 0,
            },
        },
    }


def text_delta(index: int, text: str) -> dict[str, Any]:
    """Build a text fragment for content block `index`."""
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


def json_delta(index: int, partial: str) -> dict[str, Any]:
    """Build a fragment of a tool_use block's input JSON."""
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": partial},
    }


def tool_use_stream(*fragments: str) -> list[dict[str, Any]]:
    """Build a text block then a tool_use block whose input arrives in `fragments`."""
    return [
        message_start(),
        {"type": "ping"},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        },
        text_delta(0, "Let me "),
        text_delta(0, "check."),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_s1",
                "name": "get_weather",
                "input": {},
            },
        },
        *(json_delta(1, fragment) for fragment in fragments),
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 40},
        },
        {"type": "message_stop"},
    ]


def request(**overrides: Any) -> ModelRequest:
    """Build a small conversation asking about the weather."""
    fields: dict[str, Any] = {
        "model": MODEL,
        "messages": [Message.system("Be brief."), Message.user("Weather in Oslo?")],
    }
    fields.update(overrides)
    return ModelRequest(**fields)


@pytest.fixture
def server() -> FakeAnthropic:
    """Give each test a fresh fake server."""
    return FakeAnthropic()


@pytest.fixture
def sleeps() -> list[float]:
    """Collect the backoff delays the model asks to sleep, instead of sleeping."""
    return []


@pytest.fixture
def model(server: FakeAnthropic, sleeps: list[float]) -> Iterator[AnthropicChatModel]:
    """Wire an AnthropicChatModel to the fake server, without sleeping, with fixed jitter."""
    client = httpx2.Client(transport=httpx2.MockTransport(server.handle))
    chat = AnthropicChatModel(
        MODEL, api_key=KEY, http_client=client, sleep=sleeps.append, jitter=lambda: 0.5
    )
    yield chat
    chat.close()
    client.close()


def test_text_answer_becomes_a_neutral_response(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """A text answer maps to an assistant message, end_turn to stop, with usage and ids."""
    server.then(message())
    response = model.complete(request())
    assert response.message == Message.assistant("Hello.")
    assert response.finish_reason == "stop"
    assert response.raw_finish_reason == "end_turn"
    assert response.model == "claude-haiku-4-5-20251001"
    assert response.provider == "anthropic"
    assert response.raw_id == "msg_01abc"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (20, 5)
    assert [a.succeeded for a in response.attempts] == [True]


def test_the_model_satisfies_the_chat_model_protocol(model: AnthropicChatModel) -> None:
    """The adapter is a ChatModel named provider:model."""
    assert isinstance(model, ChatModel)
    assert model.name == "anthropic:claude-haiku-4-5"
    assert model.provider == "anthropic"


def test_tool_use_blocks_become_tool_calls(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """Text and tool_use blocks map to content and parsed ToolCallRequests."""
    server.then(
        message(
            [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
            stop_reason="tool_use",
        )
    )
    response = model.complete(request(tools=[WEATHER_TOOL]))
    assert response.finish_reason == "tool_calls"
    assert response.message.content == "Checking."
    assert response.message.tool_calls == [
        ToolCallRequest(id="toolu_1", name="get_weather", arguments={"city": "Oslo"})
    ]


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "other"),
    ],
)
def test_stop_reasons_map_to_neutral_finish_reasons(
    server: FakeAnthropic, model: AnthropicChatModel, stop_reason: str, finish_reason: str
) -> None:
    """Each Anthropic stop_reason has its neutral finish_reason; the original is kept."""
    server.then(message(stop_reason=stop_reason))
    response = model.complete(request())
    assert response.finish_reason == finish_reason
    assert response.raw_finish_reason == stop_reason


def test_request_body_splits_system_and_merges_tool_results(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """System text goes to `system`; tool calls become tool_use; tool results share a user turn."""
    server.then(message())
    conversation = [
        Message.system("Be brief."),
        Message.user("Weather in Oslo and Bergen?"),
        Message.assistant(
            "Checking both.",
            [
                ToolCallRequest(id="toolu_1", name="get_weather", arguments={"city": "Oslo"}),
                ToolCallRequest(id="toolu_2", name="get_weather", arguments={"city": "Bergen"}),
            ],
        ),
        Message.tool("toolu_1", '{"temp_c": 3}'),
        Message.tool("toolu_2", '{"temp_c": 7}'),
        Message.system("Answer in Celsius."),
    ]
    model.complete(
        request(messages=conversation, tools=[WEATHER_TOOL], temperature=0.2, stop=["END"])
    )
    (sent,) = server.requests
    assert sent.url.path == "/v1/messages"
    body = server.bodies[0]
    assert body["model"] == MODEL
    assert body["system"] == "Be brief.\n\nAnswer in Celsius."
    assert body["max_tokens"] == 1024
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "get_weather",
                    "input": {"city": "Bergen"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp_c": 3}'},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": '{"temp_c": 7}'},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER_TOOL["parameters"],
        }
    ]
    assert body["temperature"] == 0.2
    assert body["stop_sequences"] == ["END"]
    assert "stream" not in body


def test_the_requests_max_tokens_wins_over_the_default(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """max_tokens from the request replaces the adapter's default of 1024."""
    server.then(message())
    model.complete(request(max_tokens=50))
    assert server.bodies[0]["max_tokens"] == 50


def test_streamed_events_are_assembled_into_one_response(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """Text deltas, input_json_delta fragments and message_delta usage make one answer."""
    server.then(sse(*tool_use_stream('{"ci', 'ty": ', '"Oslo"}')))
    response = model.complete(request(tools=[WEATHER_TOOL], stream=True))
    assert server.bodies[0]["stream"] is True
    assert response.message.content == "Let me check."
    assert response.message.tool_calls == [
        ToolCallRequest(id="toolu_s1", name="get_weather", arguments={"city": "Oslo"})
    ]
    assert response.finish_reason == "tool_calls"
    assert response.raw_id == "msg_stream1"
    assert response.model == "claude-haiku-4-5-20251001"
    assert response.usage.model_dump() == {
        "input_tokens": 125,
        "output_tokens": 40,
        "total": 165,
        "cache_read_tokens": 100,
        "cache_write_tokens": 0,
    }


def test_streamed_tool_input_that_is_not_json_is_kept_raw(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """Tool input fragments that do not join into a JSON object stay in arguments_raw."""
    server.then(sse(*tool_use_stream('{"city": ', "Oslo}")))
    (call,) = model.complete(request(tools=[WEATHER_TOOL], stream=True)).message.tool_calls
    assert call.arguments == {}
    assert call.arguments_raw == '{"city": Oslo}'


def test_an_overloaded_api_is_retried(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """A 529 overloaded_error is retried; the attempt records status 529."""
    server.then(error_response(529, "overloaded_error", "Overloaded"), message())
    response = model.complete(request())
    first, second = response.attempts
    assert (first.status_code, first.error_type) == (529, "OverloadedError")
    assert first.error_message == "Overloaded"
    assert second.succeeded
    assert sleeps == [0.5]


def test_an_overloaded_error_event_inside_a_stream_is_retried(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """An `error` event mid-stream counts as a 529 attempt and the call is retried."""
    server.then(
        sse(
            message_start(),
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
        sse(*tool_use_stream('{"city": "Oslo"}')),
    )
    response = model.complete(request(stream=True))
    assert response.attempts[0].status_code == 529
    assert response.message.tool_calls[0].arguments == {"city": "Oslo"}
    assert sleeps == [0.5]


def test_a_rate_limit_is_retried_after_a_backoff(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """429 then 200 records two attempts and sleeps once."""
    server.then(error_response(429, "rate_limit_error", "Slow down"), message())
    response = model.complete(request())
    assert [a.status_code for a in response.attempts] == [429, None]
    assert sleeps == [0.5]


def test_server_errors_exhaust_the_attempts_and_raise(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """Four 500s give a ModelCallError with every attempt; the SDK adds no retries of its own."""
    server.then(*(error_response(500, "api_error", "Internal") for _ in range(4)))
    with pytest.raises(ModelCallError) as caught:
        model.complete(request())
    assert caught.value.provider == "anthropic"
    assert caught.value.status_code == 500
    assert caught.value.retryable
    assert len(caught.value.attempts) == 4
    assert sleeps == [0.5, 1.0, 2.0]
    assert len(server.requests) == 4


def test_a_bad_request_is_not_retried(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """A 400 fails at once with one attempt and retryable=False."""
    server.then(error_response(400, "invalid_request_error", "messages: empty"))
    with pytest.raises(ModelCallError) as caught:
        model.complete(request())
    assert caught.value.status_code == 400
    assert not caught.value.retryable
    assert [a.error_type for a in caught.value.attempts] == ["BadRequestError"]
    assert sleeps == []


def test_cache_tokens_count_as_input_and_are_priced_at_their_rates(
    server: FakeAnthropic, sleeps: list[float]
) -> None:
    """Input includes cache reads and writes; a custom table prices each at its own rate."""
    server.then(
        message(
            usage={
                "input_tokens": 1_000,
                "output_tokens": 200,
                "cache_read_input_tokens": 4_000,
                "cache_creation_input_tokens": 500,
            }
        )
    )
    price = ModelPrice(
        input_usd_per_mtok=1.0,
        output_usd_per_mtok=5.0,
        cache_read_usd_per_mtok=0.1,
        cache_write_usd_per_mtok=1.25,
    )
    client = httpx2.Client(transport=httpx2.MockTransport(server.handle))
    chat = AnthropicChatModel(
        MODEL,
        api_key=KEY,
        http_client=client,
        prices=PriceTable(prices={MODEL: price}),
        sleep=sleeps.append,
    )
    response = chat.complete(request())
    client.close()
    assert response.usage.input_tokens == 5_500
    assert (response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (4_000, 500)
    expected = (1_000 * 1.0 + 4_000 * 0.1 + 500 * 1.25 + 200 * 5.0) / 1e6
    assert response.cost_usd == pytest.approx(expected)


def test_a_missing_key_names_the_environment_variable() -> None:
    """Without api_key and ANTHROPIC_API_KEY the adapter refuses to start and says what to set."""
    with pytest.raises(MissingAPIKeyError, match="ANTHROPIC_API_KEY") as caught:
        AnthropicChatModel(MODEL)
    assert caught.value.env_var == "ANTHROPIC_API_KEY"


def test_the_key_comes_from_the_environment_and_never_shows_in_repr(
    server: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ANTHROPIC_API_KEY authenticates the call but appears in neither repr nor attributes."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    server.then(message())
    client = httpx2.Client(transport=httpx2.MockTransport(server.handle))
    chat = AnthropicChatModel(MODEL, http_client=client)
    chat.complete(request())
    client.close()
    headers = server.requests[0].headers
    assert KEY in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert KEY not in repr(chat)
    assert KEY not in repr(vars(chat))


def test_a_connection_dropped_mid_stream_is_retried(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """A stream cut by the network counts as a failed attempt with no status, then is retried."""

    def cut_short() -> Iterator[bytes]:
        yield f"event: message_start\ndata: {json.dumps(message_start())}\n\n".encode()
        raise httpx2.ReadError("connection reset by peer")

    dropped = httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=cut_short()
    )
    server.then(dropped, sse(*tool_use_stream('{"city": "Oslo"}')))
    response = model.complete(request(stream=True))
    first = response.attempts[0]
    assert (first.status_code, first.error_type) == (None, "ReadError")
    assert response.message.tool_calls[0].arguments == {"city": "Oslo"}
    assert sleeps == [0.5]


# Streaming to a caller -------------------------------------------------------------------------


def event_bytes(*events: dict[str, Any]) -> list[bytes]:
    """The `event:`/`data:` lines of a stream, one item per event, to send one by one."""
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def incremental(parts: Iterator[bytes]) -> httpx2.Response:
    """A 200 stream whose body is produced lazily, part by part, as the client reads it."""
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=parts)


def test_the_model_satisfies_the_streaming_protocol(model: AnthropicChatModel) -> None:
    """The adapter has the optional streaming capability."""
    assert isinstance(model, StreamingChatModel)


def test_stream_hands_text_and_tool_input_over_in_order_and_assembles_the_answer(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """Text deltas, the tool_use start and its input fragments reach the handler in order."""
    server.then(sse(*tool_use_stream('{"ci', 'ty": ', '"Oslo"}')))
    seen: list[StreamChunk] = []
    response = model.stream(request(tools=[WEATHER_TOOL]), seen.append)
    assert server.bodies[0]["stream"] is True
    assert [(c.text, c.tool_index, c.tool_name, c.tool_arguments) for c in seen] == [
        ("Let me ", None, "", ""),
        ("check.", None, "", ""),
        ("", 0, "get_weather", ""),
        ("", 0, "", '{"ci'),
        ("", 0, "", 'ty": '),
        ("", 0, "", '"Oslo"}'),
    ]
    assert response.message.content == "Let me check."
    assert response.message.tool_calls == [
        ToolCallRequest(id="toolu_s1", name="get_weather", arguments={"city": "Oslo"})
    ]
    assert response.finish_reason == "tool_calls"
    assert response.chunks == [(c.at_ms, c.chars) for c in seen]
    assert response.ttft_ms == seen[0].at_ms
    times = [at for at, _ in response.chunks]
    assert times == sorted(times)
    assert response.ttft_ms is not None
    assert 0 <= response.ttft_ms <= response.latency_ms


def test_stream_delivers_each_chunk_before_the_next_event_is_read(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """Chunks reach the handler as their events arrive."""
    seen: list[str] = []
    handed_before: list[int] = []
    events = [
        message_start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        text_delta(0, "One "),
        text_delta(0, "two."),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]

    def body() -> Iterator[bytes]:
        for line in event_bytes(*events):
            handed_before.append(len(seen))
            yield line

    server.then(incremental(body()))
    response = model.stream(request(), lambda c: seen.append(c.text))
    assert seen == ["One ", "two."]
    assert handed_before == [0, 0, 0, 1, 2, 2, 2]
    assert response.message.content == "One two."


def test_an_overloaded_stream_before_its_first_chunk_is_retried(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """An `overloaded_error` event before any content is retried; the caller sees one answer."""
    server.then(
        sse(
            message_start(),
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
        sse(*tool_use_stream('{"city": "Oslo"}')),
    )
    seen: list[StreamChunk] = []
    response = model.stream(request(), seen.append)
    assert [c.text for c in seen if c.text] == ["Let me ", "check."]
    assert [a.status_code for a in response.attempts] == [529, None]
    assert sleeps == [0.5]
    assert response.chunks is not None
    assert len(response.chunks) == len(seen)


def test_a_stream_broken_after_its_first_chunk_is_not_retried(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """Once text reached the caller, a dropped connection fails the call at once."""
    events = tool_use_stream('{"city": "Oslo"}')[:4]  # up to the first text delta

    def cut_short() -> Iterator[bytes]:
        yield from event_bytes(*events)
        raise httpx2.ReadError("connection reset by peer")

    server.then(incremental(cut_short()), sse(*tool_use_stream('{"city": "Oslo"}')))
    seen: list[str] = []
    with pytest.raises(ModelCallError) as caught:
        model.stream(request(), lambda c: seen.append(c.text))
    assert seen == ["Let me "]
    assert not caught.value.retryable
    assert [a.error_type for a in caught.value.attempts] == ["ReadError"]
    assert "after 1 chunk had reached the caller" in str(caught.value)
    assert sleeps == []
    assert len(server.requests) == 1


def test_an_overloaded_error_event_after_the_first_chunk_is_not_retried(
    server: FakeAnthropic, model: AnthropicChatModel, sleeps: list[float]
) -> None:
    """A 529 event mid-answer still ends a call the caller watched."""
    events = tool_use_stream('{"city": "Oslo"}')[:4]
    server.then(
        sse(*events, {"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}}),
        sse(*tool_use_stream('{"city": "Oslo"}')),
    )
    with pytest.raises(ModelCallError) as caught:
        model.stream(request(), lambda _: None)
    assert caught.value.status_code == 529
    assert len(caught.value.attempts) == 1
    assert sleeps == []


def test_complete_with_stream_reports_timings(
    server: FakeAnthropic, model: AnthropicChatModel
) -> None:
    """`complete` on a streamed request assembles it and reports its chunk timings."""
    server.then(sse(*tool_use_stream('{"city": "Oslo"}')))
    response = model.complete(request(stream=True))
    assert response.chunks is not None
    assert [chars for _, chars in response.chunks] == [7, 6, 11, 16]
    assert response.ttft_ms == response.chunks[0][0]
