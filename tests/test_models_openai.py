"""OpenAIChatModel, driven through the real openai SDK over an in-memory httpx2 transport."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any, NoReturn

import httpx2
import pytest

from agentledger.agents.models import (
    ChatModel,
    Message,
    MissingAPIKeyError,
    ModelCallError,
    ModelPrice,
    ModelRequest,
    OpenAIChatModel,
    PriceTable,
    StreamChunk,
    StreamingChatModel,
    ToolCallRequest,
    stream_completion,
)

KEY = "sk-test-0123456789abcdef"
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
    """Refuse real network connections and keep the developer's OpenAI settings out."""

    def refuse(*_args: object, **_kwargs: object) -> NoReturn:
        msg = "real network connections are refused in model tests"
        raise OSError(msg)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_ADMIN_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "OPENAI_CUSTOM_HEADERS",
    ):
        monkeypatch.delenv(var, raising=False)


class FakeOpenAI:
    """An in-memory Chat Completions server: answers with queued responses, keeps requests."""

    def __init__(self) -> None:
        self.queue: list[httpx2.Response | Exception] = []
        self.requests: list[httpx2.Request] = []

    def then(self, *answers: httpx2.Response | Exception) -> FakeOpenAI:
        """Queue answers for the next requests, in order."""
        self.queue.extend(answers)
        return self

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        """Answer one request with the next queued response (or raise the queued error)."""
        self.requests.append(request)
        if not self.queue:
            return error_response(500, "the fake server has no answer queued")
        answer = self.queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies the server received."""
        return [json.loads(request.content) for request in self.requests]


def completion(
    *,
    content: str | None = "Hello there.",
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
    model: str = "gpt-4o-mini-2024-07-18",
    usage: dict[str, Any] | None = None,
) -> httpx2.Response:
    """Build a 200 Chat Completions response in the API's wire format."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body = {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1_763_000_000,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": usage or {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }
    return httpx2.Response(200, json=body)


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None
) -> httpx2.Response:
    """Build an OpenAI-style error body with the given HTTP status."""
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return httpx2.Response(status, json=body, headers=headers)


def sse(*events: dict[str, Any] | str) -> httpx2.Response:
    """Build a stream: each event as a `data:` line, as OpenAI sends them."""
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content="".join(lines).encode()
    )


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """Build one `chat.completion.chunk` with a single choice."""
    return {
        "id": "chatcmpl-stream1",
        "object": "chat.completion.chunk",
        "created": 1_763_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def request(**overrides: Any) -> ModelRequest:
    """Build a small conversation asking about the weather."""
    fields: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [Message.system("Be brief."), Message.user("Weather in Oslo?")],
    }
    fields.update(overrides)
    return ModelRequest(**fields)


@pytest.fixture
def server() -> FakeOpenAI:
    """Give each test a fresh fake server."""
    return FakeOpenAI()


@pytest.fixture
def sleeps() -> list[float]:
    """Collect the backoff delays the model asks to sleep, instead of sleeping."""
    return []


@pytest.fixture
def model(server: FakeOpenAI, sleeps: list[float]) -> Iterator[OpenAIChatModel]:
    """Wire an OpenAIChatModel to the fake server, with no real sleeping and fixed jitter."""
    client = httpx2.Client(transport=httpx2.MockTransport(server.handle))
    chat = OpenAIChatModel(
        "gpt-4o-mini",
        api_key=KEY,
        http_client=client,
        sleep=sleeps.append,
        jitter=lambda: 0.5,
    )
    yield chat
    chat.close()
    client.close()


def test_text_answer_becomes_a_neutral_response(server: FakeOpenAI, model: OpenAIChatModel) -> None:
    """A plain answer maps to an assistant message with usage, ids and one successful attempt."""
    server.then(completion())
    response = model.complete(request())
    assert response.message == Message.assistant("Hello there.")
    assert response.finish_reason == "stop"
    assert response.raw_finish_reason == "stop"
    assert response.model == "gpt-4o-mini-2024-07-18"
    assert response.provider == "openai"
    assert response.raw_id == "chatcmpl-abc123"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (20, 5)
    assert response.usage.total == 25
    assert [a.succeeded for a in response.attempts] == [True]
    assert response.latency_ms >= 0


def test_the_model_satisfies_the_chat_model_protocol(model: OpenAIChatModel) -> None:
    """The adapter is a ChatModel named provider:model."""
    assert isinstance(model, ChatModel)
    assert model.name == "openai:gpt-4o-mini"
    assert model.provider == "openai"


def test_tool_call_arguments_are_parsed(server: FakeOpenAI, model: OpenAIChatModel) -> None:
    """A tool call comes back as a ToolCallRequest with its JSON arguments parsed."""
    call = {
        "id": "call_w1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    server.then(completion(content=None, tool_calls=[call], finish_reason="tool_calls"))
    response = model.complete(request(tools=[WEATHER_TOOL]))
    assert response.finish_reason == "tool_calls"
    assert response.message.content == ""
    assert response.message.tool_calls == [
        ToolCallRequest(id="call_w1", name="get_weather", arguments={"city": "Oslo"})
    ]


def test_unparsable_tool_arguments_are_kept_raw(server: FakeOpenAI, model: OpenAIChatModel) -> None:
    """Broken argument JSON is kept verbatim in arguments_raw with empty arguments."""
    call = {
        "id": "call_bad",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"'},
    }
    server.then(completion(content=None, tool_calls=[call], finish_reason="tool_calls"))
    (tool_call,) = model.complete(request(tools=[WEATHER_TOOL])).message.tool_calls
    assert tool_call.arguments == {}
    assert tool_call.arguments_raw == '{"city": "Oslo"'
    assert not tool_call.arguments_ok


def test_request_body_maps_tools_tool_messages_and_sampling(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """The wire body carries function tools, assistant tool calls, tool results and parameters."""
    server.then(completion())
    conversation = [
        Message.system("Be brief."),
        Message.user("Weather in Oslo?"),
        Message.assistant(
            "",
            [ToolCallRequest(id="call_1", name="get_weather", arguments={"city": "Oslo"})],
        ),
        Message.tool("call_1", '{"temp_c": 3}'),
    ]
    model.complete(
        request(
            messages=conversation,
            tools=[WEATHER_TOOL],
            temperature=0.2,
            top_p=0.9,
            max_tokens=64,
            stop=["END"],
            extra={"seed": 7},
        )
    )
    (sent,) = server.requests
    assert sent.url.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = server.bodies[0]
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "content": '{"temp_c": 3}', "tool_call_id": "call_1"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER_TOOL["parameters"],
            },
        }
    ]
    assert body["temperature"] == 0.2
    assert body["top_p"] == 0.9
    assert body["max_completion_tokens"] == 64
    assert body["stop"] == ["END"]
    assert body["seed"] == 7
    assert "stream" not in body


def test_unset_parameters_are_left_out_of_the_body(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """Parameters the request leaves as None are not sent, so the server's defaults apply."""
    server.then(completion())
    model.complete(request())
    body = server.bodies[0]
    for absent in ("tools", "temperature", "top_p", "max_completion_tokens", "stop", "stream"):
        assert absent not in body


def test_an_empty_request_model_calls_the_adapters_model(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """A request with model="" is sent with the model the adapter was built for."""
    server.then(completion())
    model.complete(request(model=""))
    assert server.bodies[0]["model"] == "gpt-4o-mini"


def test_streamed_chunks_are_assembled_into_one_response(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """Text deltas, tool-call argument fragments and the final usage chunk make one answer."""
    server.then(
        sse(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Checking "}),
            chunk({"content": "the weather."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_s1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]}),
            chunk({}, finish_reason="tool_calls"),
            {
                **chunk({}),
                "choices": [],
                "usage": {
                    "prompt_tokens": 30,
                    "completion_tokens": 12,
                    "total_tokens": 42,
                    "prompt_tokens_details": {"cached_tokens": 10},
                },
            },
            "[DONE]",
        )
    )
    response = model.complete(request(tools=[WEATHER_TOOL], stream=True))
    body = server.bodies[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert response.message.content == "Checking the weather."
    assert response.message.tool_calls == [
        ToolCallRequest(id="call_s1", name="get_weather", arguments={"city": "Oslo"})
    ]
    assert response.finish_reason == "tool_calls"
    assert response.raw_id == "chatcmpl-stream1"
    assert response.usage.model_dump() == {
        "input_tokens": 30,
        "output_tokens": 12,
        "total": 42,
        "cache_read_tokens": 10,
        "cache_write_tokens": None,
    }


def test_a_rate_limit_is_retried_after_a_backoff(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """429 then 200 records two attempts and sleeps once for the first backoff."""
    server.then(error_response(429, "Rate limit reached"), completion())
    response = model.complete(request())
    first, second = response.attempts
    assert (first.number, first.status_code, first.error_type) == (1, 429, "RateLimitError")
    assert first.backoff_s == 0.5
    assert second.succeeded
    assert sleeps == [0.5]
    assert len(server.requests) == 2


def test_a_servers_retry_after_header_lengthens_the_backoff(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """A retry-after longer than the computed backoff is what the loop waits."""
    server.then(error_response(429, "slow down", headers={"retry-after": "3"}), completion())
    model.complete(request())
    assert sleeps == [3.0]


def test_server_errors_exhaust_the_attempts_and_raise(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """Four 500s give a ModelCallError carrying all four attempts; the SDK adds no retries."""
    server.then(*(error_response(500, "boom") for _ in range(4)))
    with pytest.raises(ModelCallError) as caught:
        model.complete(request())
    error = caught.value
    assert (error.provider, error.model, error.status_code) == ("openai", "gpt-4o-mini", 500)
    assert error.retryable
    assert [a.status_code for a in error.attempts] == [500, 500, 500, 500]
    assert [a.backoff_s for a in error.attempts] == [0.5, 1.0, 2.0, 0.0]
    assert sleeps == [0.5, 1.0, 2.0]
    assert len(server.requests) == 4
    assert isinstance(error.__cause__, Exception)


def test_a_bad_request_is_not_retried(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """A 400 fails at once with one attempt and retryable=False."""
    server.then(error_response(400, "Invalid 'messages'"))
    with pytest.raises(ModelCallError) as caught:
        model.complete(request())
    assert caught.value.status_code == 400
    assert not caught.value.retryable
    assert len(caught.value.attempts) == 1
    assert caught.value.attempts[0].error_type == "BadRequestError"
    assert sleeps == []


def test_a_connection_error_is_retried(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """A dropped connection counts as an attempt with no status and is retried."""
    server.then(httpx2.ConnectError("connection refused"), completion())
    response = model.complete(request())
    assert response.attempts[0].status_code is None
    assert response.attempts[0].error_type == "APIConnectionError"
    assert sleeps == [0.5]


def test_an_error_event_inside_a_stream_is_retried_when_the_server_failed(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """A `server_error` sent mid-stream is retried, and the next stream's answer is used."""
    server.then(
        sse({"error": {"message": "The server had an error", "type": "server_error"}}),
        sse(chunk({"content": "ok"}, finish_reason="stop"), "[DONE]"),
    )
    response = model.complete(request(stream=True))
    assert response.message.content == "ok"
    assert response.attempts[0].error_type == "APIError"


def test_cost_comes_from_a_custom_price_table(server: FakeOpenAI, sleeps: list[float]) -> None:
    """Usage and a custom price table give the exact cost, snapshot ids priced as the base model."""
    server.then(
        completion(
            model="house-model-2025-01-31",
            usage={"prompt_tokens": 1_000, "completion_tokens": 500, "total_tokens": 1_500},
        )
    )
    prices = PriceTable(
        prices={"house-model": ModelPrice(input_usd_per_mtok=2.0, output_usd_per_mtok=8.0)}
    )
    client = httpx2.Client(transport=httpx2.MockTransport(server.handle))
    chat = OpenAIChatModel(
        "house-model", api_key=KEY, http_client=client, prices=prices, sleep=sleeps.append
    )
    response = chat.complete(request(model="house-model"))
    client.close()
    assert response.cost_usd == pytest.approx(1_000 * 2.0 / 1e6 + 500 * 8.0 / 1e6)


def test_an_unknown_model_has_no_cost(server: FakeOpenAI, model: OpenAIChatModel) -> None:
    """A model missing from the price table costs None, not zero."""
    server.then(completion(model="mystery-model"))
    assert model.complete(request(model="mystery-model")).cost_usd is None


def test_a_missing_key_names_the_environment_variable() -> None:
    """Without api_key and OPENAI_API_KEY the adapter refuses to start and says what to set."""
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY") as caught:
        OpenAIChatModel("gpt-4o-mini")
    assert caught.value.env_var == "OPENAI_API_KEY"


def test_the_key_comes_from_the_environment_and_never_shows_in_repr(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OPENAI_API_KEY is sent as the bearer token but appears in neither repr nor attributes."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server.then(completion())
    client = httpx2.Client(transport=httpx2.MockTransport(server.handle))
    chat = OpenAIChatModel("gpt-4o-mini", http_client=client)
    chat.complete(request())
    client.close()
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(chat)
    assert KEY not in repr(vars(chat))


def test_base_url_points_at_an_openai_compatible_server(server: FakeOpenAI) -> None:
    """base_url sends the call to another server with the same wire format."""
    server.then(completion(model="llama3"))
    client = httpx2.Client(transport=httpx2.MockTransport(server.handle))
    chat = OpenAIChatModel(
        "llama3", api_key="unused", base_url="http://localhost:11434/v1", http_client=client
    )
    response = chat.complete(request(model=""))
    client.close()
    assert str(server.requests[0].url) == "http://localhost:11434/v1/chat/completions"
    assert response.model == "llama3"
    assert "localhost:11434" in repr(chat)


# Streaming to a caller -------------------------------------------------------------------------


def sse_lines(*events: dict[str, Any] | str) -> list[bytes]:
    """The `data:` lines of a stream, one per event, to send one by one."""
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]


def incremental(parts: Iterator[bytes]) -> httpx2.Response:
    """A 200 stream whose body is produced lazily, part by part, as the client reads it."""
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=parts)


TOOL_STREAM = (
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Checking "}),
    chunk({"content": "the weather."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_s1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]}),
    chunk({}, finish_reason="tool_calls"),
    {
        **chunk({}),
        "choices": [],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
    },
    "[DONE]",
)


def test_the_model_satisfies_the_streaming_protocol(model: OpenAIChatModel) -> None:
    """The adapter has the optional streaming capability."""
    assert isinstance(model, StreamingChatModel)


def test_stream_hands_text_and_tool_fragments_over_in_order_and_assembles_the_answer(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """Each text delta and tool-call fragment reaches the handler; the answer is assembled."""
    server.then(sse(*TOOL_STREAM))
    seen: list[StreamChunk] = []
    response = model.stream(request(tools=[WEATHER_TOOL]), seen.append)
    body = server.bodies[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert [(c.text, c.tool_index, c.tool_name, c.tool_arguments) for c in seen] == [
        ("Checking ", None, "", ""),
        ("the weather.", None, "", ""),
        ("", 0, "get_weather", ""),
        ("", 0, "", '{"ci'),
        ("", 0, "", 'ty": "Oslo"}'),
    ]
    assert response.message.content == "Checking the weather."
    assert response.message.tool_calls == [
        ToolCallRequest(id="call_s1", name="get_weather", arguments={"city": "Oslo"})
    ]
    assert response.usage.total == 42
    assert response.chunks == [(c.at_ms, c.chars) for c in seen]
    assert [chars for _, chars in response.chunks] == [9, 12, 11, 4, 12]
    assert response.ttft_ms == seen[0].at_ms
    times = [at for at, _ in response.chunks]
    assert times == sorted(times)
    assert 0 <= response.ttft_ms <= response.latency_ms


def test_stream_delivers_each_chunk_before_the_next_one_is_read(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """Chunks reach the handler as they arrive, not once the whole stream has been read."""
    seen: list[str] = []
    handed_before: list[int] = []

    def body() -> Iterator[bytes]:
        for line in sse_lines(
            chunk({"content": "One "}),
            chunk({"content": "two "}),
            chunk({"content": "three."}, finish_reason="stop"),
            "[DONE]",
        ):
            handed_before.append(len(seen))
            yield line

    server.then(incremental(body()))
    response = model.stream(request(), lambda c: seen.append(c.text))
    assert seen == ["One ", "two ", "three."]
    assert handed_before == [0, 1, 2, 3]
    assert response.message.content == "One two three."


def test_a_failure_before_the_first_chunk_is_retried_and_streams_once(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """A 503, then a stream cut before any content: both retried; the caller sees one answer."""

    def cut_before_content() -> Iterator[bytes]:
        yield from sse_lines(chunk({"role": "assistant", "content": ""}))
        raise httpx2.ReadError("connection reset by peer")

    server.then(
        error_response(503, "overloaded"),
        incremental(cut_before_content()),
        sse(chunk({"content": "Sunny "}), chunk({"content": "in Oslo."}, "stop"), "[DONE]"),
    )
    seen: list[str] = []
    response = model.stream(request(), lambda c: seen.append(c.text))
    assert seen == ["Sunny ", "in Oslo."]
    assert [a.status_code for a in response.attempts] == [503, None, None]
    assert [a.error_type for a in response.attempts] == [
        "InternalServerError",
        "APIConnectionError",
        None,
    ]
    assert sleeps == [0.5, 1.0]
    assert response.message.content == "Sunny in Oslo."
    assert response.chunks is not None
    assert len(response.chunks) == 2


def test_a_stream_broken_after_its_first_chunk_is_not_retried(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """Once text reached the caller, a dropped connection fails the call at once."""

    def cut_mid_answer() -> Iterator[bytes]:
        yield from sse_lines(chunk({"content": "Sunny "}), chunk({"content": "and "}))
        raise httpx2.ReadError("connection reset by peer")

    server.then(incremental(cut_mid_answer()), completion())
    seen: list[str] = []
    with pytest.raises(ModelCallError) as caught:
        model.stream(request(), lambda c: seen.append(c.text))
    error = caught.value
    assert seen == ["Sunny ", "and "]
    assert not error.retryable
    assert [a.error_type for a in error.attempts] == ["APIConnectionError"]
    assert "after 2 chunks" in str(error)
    assert sleeps == []
    assert len(server.requests) == 1


def test_an_error_event_after_the_first_chunk_is_not_retried(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """A retryable `server_error` event mid-answer still ends a call the caller watched."""
    server.then(
        sse(
            chunk({"content": "Sunny"}),
            {"error": {"message": "The server had an error", "type": "server_error"}},
        ),
        completion(),
    )
    with pytest.raises(ModelCallError) as caught:
        model.stream(request(), lambda _: None)
    assert caught.value.error_type == "APIError"
    assert len(caught.value.attempts) == 1
    assert sleeps == []


def test_complete_with_stream_reports_timings_and_retries_a_stream_no_one_watched(
    server: FakeOpenAI, model: OpenAIChatModel, sleeps: list[float]
) -> None:
    """`complete` on a streamed request has no caller to protect: a cut stream is retried."""

    def cut_mid_answer() -> Iterator[bytes]:
        yield from sse_lines(chunk({"content": "Sunny "}))
        raise httpx2.ReadError("connection reset by peer")

    server.then(
        incremental(cut_mid_answer()),
        sse(chunk({"content": "Rain."}, "stop"), "[DONE]"),
    )
    response = model.complete(request(stream=True))
    assert response.message.content == "Rain."
    assert sleeps == [0.5]
    assert response.chunks is not None
    assert [chars for _, chars in response.chunks] == [5]
    assert response.ttft_ms == response.chunks[0][0]


def test_an_unstreamed_answer_reports_no_stream_timings(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """A plain call has no time to first token and no chunks."""
    server.then(completion())
    response = model.complete(request())
    assert (response.ttft_ms, response.chunks) == (None, None)


def test_stream_completion_streams_through_the_adapter(
    server: FakeOpenAI, model: OpenAIChatModel
) -> None:
    """`stream_completion` streams a streaming model even when the request does not ask."""
    server.then(sse(chunk({"content": "Hi "}), chunk({"content": "there."}, "stop"), "[DONE]"))
    seen: list[str] = []
    response = stream_completion(model, request(), lambda c: seen.append(c.text))
    assert seen == ["Hi ", "there."]
    assert server.bodies[0]["stream"] is True
    assert response.chunks is not None
