"""ScriptedModel, model_from_spec and the neutral model types (fingerprints, usage, prices)."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest
from pydantic import JsonValue, ValidationError

from agentledger.agents.models import (
    ChatModel,
    Message,
    ModelPrice,
    ModelRequest,
    ModelResponse,
    OpenAIChatModel,
    PriceTable,
    ScriptedModel,
    ScriptExhaustedError,
    ScriptFormatError,
    StreamChunk,
    StreamingChatModel,
    ToolCallRequest,
    UnknownModelSpecError,
    Usage,
    model_from_spec,
    scripted_tool_call,
    stream_completion,
)


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse real network connections: nothing here may need one."""

    def refuse(*_args: object, **_kwargs: object) -> NoReturn:
        msg = "real network connections are refused in model tests"
        raise OSError(msg)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def ask(text: str, model: str = "test-model") -> ModelRequest:
    """Build a one-message request."""
    return ModelRequest(model=model, messages=[Message.user(text)])


def test_answers_come_in_script_order_as_assistant_messages() -> None:
    """Strings become assistant text answers, given one per request, in order."""
    model = ScriptedModel(["first", "second"])
    first = model.complete(ask("a"))
    second = model.complete(ask("b"))
    assert first.message == Message.assistant("first")
    assert second.message == Message.assistant("second")
    assert (first.finish_reason, first.provider, first.latency_ms) == ("stop", "scripted", 0.0)
    assert first.cost_usd == 0.0
    assert model.remaining == 0


def test_every_request_is_recorded() -> None:
    """The model keeps each request it saw, in order."""
    model = ScriptedModel(["one", "two"])
    model.complete(ask("hello"))
    model.complete(ask("again"))
    assert [r.messages[-1].content for r in model.requests] == ["hello", "again"]


def test_running_out_of_script_raises_instead_of_answering_nothing() -> None:
    """A request past the end raises ScriptExhaustedError naming how many requests came."""
    model = ScriptedModel(["only"])
    model.complete(ask("a"))
    with pytest.raises(ScriptExhaustedError) as caught:
        model.complete(ask("b"))
    assert caught.value.requests_seen == 2
    assert caught.value.script_length == 1
    assert "scripted:test" in str(caught.value)
    assert len(model.requests) == 2


def test_scripted_tool_calls_get_deterministic_ids() -> None:
    """Calls without an id are numbered call_1, call_2... across answers; given ids are kept."""
    model = ScriptedModel(
        [
            scripted_tool_call("search", {"q": "oslo"}),
            scripted_tool_call("search", {"q": "bergen"}, call_id="mine"),
            scripted_tool_call("fetch", {"url": "https://example.org"}),
        ]
    )
    calls = [model.complete(ask(str(n))).message.tool_calls[0] for n in range(3)]
    assert [c.id for c in calls] == ["call_1", "mine", "call_2"]
    assert calls[0].arguments == {"q": "oslo"}
    assert model.requests[0].messages[0].content == "0"


def test_a_tool_call_answer_finishes_with_tool_calls() -> None:
    """An answer that calls a tool reports finish_reason tool_calls."""
    response = ScriptedModel([scripted_tool_call("search", {"q": "x"})]).complete(ask("go"))
    assert response.finish_reason == "tool_calls"


def test_usage_is_estimated_from_text_length() -> None:
    """Tokens are len(text)//4, at least one, so usage is deterministic."""
    response = ScriptedModel(["x" * 40]).complete(ask("y" * 8))
    assert response.usage == Usage(input_tokens=2, output_tokens=10)
    tiny = ScriptedModel(["ok"]).complete(ask("a"))
    assert (tiny.usage.input_tokens, tiny.usage.output_tokens) == (1, 1)


def test_usage_counts_the_whole_prompt_as_a_history_grows_and_forks() -> None:
    """A grown, forked or rebuilt history is estimated as len(all contents)//4, counted anew."""
    a, b, c = Message.user("a" * 11), Message.assistant("b" * 9), Message.user("c" * 13)
    histories = [[a], [a, b], [a, b, c], [a, c], [Message.user("a" * 11), b], [c, a, b], []]
    model = ScriptedModel(["ok"] * len(histories))
    for history in histories:
        request = ModelRequest(model="m", messages=history)
        expected = max(1, len("".join(m.content for m in history)) // 4)
        assert model.complete(request).usage.input_tokens == expected


def test_a_callable_step_answers_from_the_request() -> None:
    """A callable script step receives the request it answers."""
    model = ScriptedModel([lambda request: f"echo: {request.messages[-1].content}"])
    assert model.complete(ask("ping")).message.content == "echo: ping"


def test_a_single_function_answers_every_request() -> None:
    """A function as the whole script never runs out."""
    model = ScriptedModel(lambda request: Message.assistant(str(len(request.messages))))
    answers = [model.complete(ask("q")).message.content for _ in range(5)]
    assert answers == ["1"] * 5
    assert model.remaining is None


def test_a_full_response_in_the_script_is_returned_as_given() -> None:
    """A scripted ModelResponse comes back unchanged apart from numbering its tool calls."""
    scripted = ModelResponse(
        message=Message.assistant("cut off"),
        finish_reason="length",
        usage=Usage(input_tokens=100, output_tokens=4096),
        model="gpt-4o",
        provider="openai",
    )
    assert ScriptedModel([scripted]).complete(ask("long")) == scripted


def test_a_bare_string_script_is_refused() -> None:
    """A string is not a script: it would otherwise become one answer per character."""
    with pytest.raises(TypeError, match="list of answers"):
        ScriptedModel("hello")


def test_a_non_assistant_message_in_the_script_is_refused() -> None:
    """Scripted answers must be assistant messages."""
    model = ScriptedModel([Message.user("not an answer")])
    with pytest.raises(TypeError, match="assistant"):
        model.complete(ask("q"))


def test_the_scripted_model_is_a_chat_model() -> None:
    """ScriptedModel satisfies the ChatModel protocol."""
    model = ScriptedModel(["x"], name="scripted:demo")
    assert isinstance(model, ChatModel)
    assert (model.name, model.provider) == ("scripted:demo", "scripted")


def test_a_json_script_file_loads_text_and_tool_call_answers(tmp_path: Path) -> None:
    """A JSON list of strings and {content, tool_calls} objects becomes the script."""
    path = tmp_path / "answers.json"
    path.write_text(
        json.dumps(
            [
                {"content": "Let me look.", "tool_calls": [{"name": "search", "arguments": {}}]},
                "Done.",
            ]
        ),
        encoding="utf-8",
    )
    model = ScriptedModel.from_file(path)
    first = model.complete(ask("find it"))
    assert first.message.content == "Let me look."
    assert first.message.tool_calls == [ToolCallRequest(id="call_1", name="search")]
    assert model.complete(ask("and?")).message.content == "Done."
    assert model.name == f"scripted:{path}"


def test_a_jsonl_script_file_has_one_answer_per_line(tmp_path: Path) -> None:
    """Each non-blank JSONL line is one answer."""
    path = tmp_path / "answers.jsonl"
    lines = ['"hello"', "", '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = ScriptedModel.from_file(path)
    assert model.complete(ask("1")).message.content == "hello"
    assert model.complete(ask("2")).message.tool_calls[0].arguments == {"a": 1, "b": 2}
    assert model.remaining == 0


def test_a_malformed_script_file_names_the_file_and_the_answer(tmp_path: Path) -> None:
    """An answer with an unknown field is refused with the path and the answer's number."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(["fine", {"text": "wrong key"}]), encoding="utf-8")
    with pytest.raises(ScriptFormatError, match="answer 2") as caught:
        ScriptedModel.from_file(path)
    assert caught.value.path == path


def test_a_script_file_that_is_not_a_list_is_refused(tmp_path: Path) -> None:
    """A JSON object at the top level is not a script."""
    path = tmp_path / "object.json"
    path.write_text('{"content": "x"}', encoding="utf-8")
    with pytest.raises(ScriptFormatError, match="list of answers"):
        ScriptedModel.from_file(path)


def test_a_scripted_spec_loads_the_file(tmp_path: Path) -> None:
    """`scripted:FILE` builds a ScriptedModel from that file."""
    path = tmp_path / "s.json"
    path.write_text('["hi"]', encoding="utf-8")
    model = model_from_spec(f"scripted:{path}")
    assert isinstance(model, ScriptedModel)
    assert model.complete(ask("x")).message.content == "hi"


def test_a_vendor_spec_builds_that_vendors_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    """`openai:MODEL` builds an OpenAIChatModel for MODEL."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = model_from_spec("openai:gpt-4o-mini", base_url="http://localhost:8000/v1")
    assert isinstance(model, OpenAIChatModel)
    assert model.name == "openai:gpt-4o-mini"
    model.close()


@pytest.mark.parametrize("spec", ["gpt-4o", "mistral:large", "openai:", "", "scripted:  "])
def test_an_unknown_spec_names_itself_and_the_accepted_forms(spec: str) -> None:
    """A bad spec raises a ValueError that quotes it and lists what is accepted."""
    with pytest.raises(UnknownModelSpecError) as caught:
        model_from_spec(spec)
    assert isinstance(caught.value, ValueError)
    assert repr(spec) in str(caught.value)
    assert "openai:MODEL" in str(caught.value)
    assert "scripted:FILE" in str(caught.value)


def test_importing_the_package_does_not_import_the_vendor_sdks() -> None:
    """The adapters load lazily, so a scripted run never imports openai or anthropic."""
    code = (
        "import sys, agentledger.agents.models as m; "
        "m.ScriptedModel(['x']); "
        "print('openai' in sys.modules, 'anthropic' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]


def test_the_fingerprint_is_stable_for_identical_requests() -> None:
    """Equal requests built apart share a fingerprint: SHA-256 of the canonical JSON."""
    tool: dict[str, JsonValue] = {"name": "search", "parameters": {"type": "object"}}
    one = ModelRequest(model="m", messages=[Message.user("hé")], tools=[tool], temperature=0.0)
    other = ModelRequest.model_validate(json.loads(one.model_dump_json()))
    assert one.fingerprint() == other.fingerprint()
    assert one.fingerprint() == hashlib.sha256(one.canonical_json().encode()).hexdigest()
    assert len(one.fingerprint()) == 64
    assert '"content":"hé"' in one.canonical_json()


def test_the_fingerprint_ignores_dict_key_order() -> None:
    """Tool schemas and extras written in a different key order give the same fingerprint."""
    a = ModelRequest(model="m", messages=[], extra={"x": 1, "y": 2})
    b = ModelRequest(model="m", messages=[], extra={"y": 2, "x": 1})
    assert a.fingerprint() == b.fingerprint()


@pytest.mark.parametrize(
    "change",
    [
        {"messages": [Message.user("Hello!")]},
        {"model": "other"},
        {"temperature": 0.7},
        {"tools": [{"name": "search"}]},
    ],
)
def test_the_fingerprint_changes_when_the_request_changes(change: dict[str, object]) -> None:
    """Changing a message, the model, a parameter or the tools changes the fingerprint."""
    base = ModelRequest(model="m", messages=[Message.user("Hello")])
    assert base.model_copy(update=change).fingerprint() != base.fingerprint()


def test_tool_arguments_that_are_not_an_object_are_kept_raw() -> None:
    """from_raw parses objects, treats blank as no arguments, and keeps anything else raw."""
    assert ToolCallRequest.from_raw("c", "f", '{"a": [1, 2]}').arguments == {"a": [1, 2]}
    assert ToolCallRequest.from_raw("c", "f", "  ").arguments_ok
    for raw in ('"just a string"', "[1, 2]", "{oops"):
        call = ToolCallRequest.from_raw("c", "f", raw)
        assert (call.arguments, call.arguments_raw, call.arguments_json()) == ({}, raw, raw)


def test_messages_check_their_role_fields() -> None:
    """A tool message needs its call id; only assistants carry tool calls."""
    with pytest.raises(ValidationError, match="tool_call_id"):
        Message(role="tool", content="42")
    with pytest.raises(ValidationError, match="only assistant"):
        Message(role="user", tool_calls=[ToolCallRequest(id="c", name="f")])


def test_types_are_frozen_and_refuse_unknown_fields() -> None:
    """Values cannot be changed or given fields they do not declare."""
    message = Message.user("hi")
    with pytest.raises(ValidationError):
        message.content = "changed"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "user", "content": "hi", "mood": "happy"})


def test_usage_total_defaults_to_input_plus_output() -> None:
    """The total is input plus output unless the vendor reported its own."""
    assert Usage(input_tokens=3, output_tokens=4).total == 7
    assert Usage(input_tokens=3, output_tokens=4, total=9).total == 9


def test_prices_cover_snapshots_and_can_be_overridden() -> None:
    """Dated snapshots price as their base model; unknown models cost None; overrides win."""
    table = PriceTable.default()
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    base = table.cost("gpt-4o-mini", usage)
    assert base is not None
    assert table.cost("gpt-4o-mini-2024-07-18", usage) == base
    assert table.cost("gpt-4o-mini-preview", usage) is None
    assert table.cost("unheard-of", usage) is None
    cheaper = table.with_prices(
        {"gpt-4o-mini": ModelPrice(input_usd_per_mtok=0.0, output_usd_per_mtok=1.0)}
    )
    assert cheaper.cost("gpt-4o-mini", usage) == pytest.approx(1.0)


# Streaming -------------------------------------------------------------------------------------


def test_a_scripted_answer_streams_word_by_word_at_the_chosen_interval() -> None:
    """Words keep their trailing whitespace; the k-th chunk arrives at k * interval."""
    model = ScriptedModel(["  Sunny in\nOslo, 21 C."], chunk_interval_ms=10.0)
    seen: list[StreamChunk] = []
    response = model.stream(ask("weather?"), seen.append)
    assert [c.text for c in seen] == ["  ", "Sunny ", "in\n", "Oslo, ", "21 ", "C."]
    assert "".join(c.text for c in seen) == response.message.content
    assert [c.at_ms for c in seen] == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    assert response.ttft_ms == 10.0
    assert response.chunks == [(10.0, 2), (20.0, 6), (30.0, 3), (40.0, 6), (50.0, 3), (60.0, 2)]
    assert response.latency_ms == 60.0


def test_a_streamed_answer_is_the_same_answer_as_a_completed_one() -> None:
    """Streaming changes how the answer is handed over, never what it is."""
    script: list[str | Message] = [
        "Two words.",
        scripted_tool_call("weather", {"city": "Oslo"}, content="Checking."),
    ]
    completed = ScriptedModel(script)
    streamed = ScriptedModel(script)
    for question in ("a", "b"):
        plain = completed.complete(ask(question))
        seen: list[StreamChunk] = []
        live = streamed.stream(ask(question), seen.append)
        assert live.message == plain.message
        assert live.usage == plain.usage
        assert (plain.ttft_ms, plain.chunks) == (None, None)
    assert [(c.text, c.tool_index, c.tool_name, c.tool_arguments) for c in seen] == [
        ("Checking.", None, "", ""),
        ("", 0, "weather", '{"city":"Oslo"}'),
    ]


def test_default_timings_are_zero_and_an_empty_answer_has_no_chunks() -> None:
    """Without an interval every chunk is at 0 ms; an answer with nothing in it sends nothing."""
    model = ScriptedModel(["a b", ""])
    first = model.stream(ask("x"), lambda _: None)
    assert first.chunks == [(0.0, 2), (0.0, 1)]
    assert first.ttft_ms == 0.0
    seen: list[StreamChunk] = []
    empty = model.stream(ask("y"), seen.append)
    assert seen == []
    assert (empty.ttft_ms, empty.chunks) == (None, [])


def test_complete_on_a_streamed_request_reports_the_stream_timings() -> None:
    """`complete` with `stream` set streams to no one, like the vendor adapters."""
    model = ScriptedModel(["one two"], chunk_interval_ms=5.0)
    response = model.complete(ask("x").model_copy(update={"stream": True}))
    assert response.chunks == [(5.0, 4), (10.0, 3)]


def test_a_negative_interval_is_refused() -> None:
    """Chunks cannot arrive before the call started."""
    with pytest.raises(ValueError, match="chunk_interval_ms"):
        ScriptedModel(["x"], chunk_interval_ms=-1.0)


class PlainModel:
    """A model with no streaming capability (like a replay's recorded model)."""

    name = "plain:model"
    provider = "plain"

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The whole answer at once."""
        del request
        return ModelResponse(
            message=Message.assistant("All at once."),
            finish_reason="stop",
            model="model",
            provider="plain",
            latency_ms=12.0,
        )


def test_a_model_that_cannot_stream_hands_its_whole_answer_over_as_one_chunk() -> None:
    """`stream_completion`'s default: one chunk at the answer's latency, no timings reported."""
    plain = PlainModel()
    assert isinstance(plain, ChatModel)
    assert not isinstance(plain, StreamingChatModel)
    seen: list[StreamChunk] = []
    response = stream_completion(plain, ask("x"), seen.append)
    assert seen == [StreamChunk(at_ms=12.0, text="All at once.")]
    assert (response.ttft_ms, response.chunks) == (None, None)


def test_stream_completion_streams_a_scripted_model() -> None:
    """A streaming model streams through `stream_completion`, with or without a handler."""
    model = ScriptedModel(["a b", "c"])
    assert isinstance(model, StreamingChatModel)
    seen: list[str] = []
    stream_completion(model, ask("x"), lambda c: seen.append(c.text))
    assert seen == ["a ", "b"]
    assert stream_completion(model, ask("y")).chunks == [(0.0, 1)]


def test_keep_requests_bounds_what_the_model_keeps_and_nothing_else() -> None:
    """A long run's model keeps its latest requests only; answers and counts are unchanged."""
    model = ScriptedModel([f"answer {n}" for n in range(10)], keep_requests=3)
    answers = [model.complete(ask(f"question {n}")).message.content for n in range(10)]
    assert answers == [f"answer {n}" for n in range(10)]
    assert [r.messages[-1].content for r in model.requests] == [
        "question 7",
        "question 8",
        "question 9",
    ]
    assert model.remaining == 0
    with pytest.raises(ScriptExhaustedError) as caught:
        model.complete(ask("one too many"))
    assert caught.value.requests_seen == 11
    with pytest.raises(ValueError, match="keep_requests must be at least 1"):
        ScriptedModel(["x"], keep_requests=0)


def test_a_model_named_by_a_spec_keeps_a_bounded_number_of_requests(tmp_path: Path) -> None:
    """`scripted:FILE` (what the CLI runs) does not hold every request of a long run."""
    script = tmp_path / "long.json"
    script.write_text(json.dumps([f"answer {n}" for n in range(100)]), encoding="utf-8")
    model = model_from_spec(f"scripted:{script}")
    assert isinstance(model, ScriptedModel)
    for n in range(100):
        model.complete(ask(f"question {n}"))
    assert 1 <= len(model.requests) <= 16
    assert model.requests[-1].messages[-1].content == "question 99"
