"""Streaming in the bundled agents: the ``stream`` option, chunk timings recorded, replay.

A streamed call hands its chunks to the ``on_chunk`` hook as they arrive and records, besides the
assembled answer, its time to first token and per-chunk timings (``ttft_ms``, ``chunk_count``,
``chunks_ref``). Replay serves the recorded answer whole and compares everything but those
timing fields, so a streamed run replays identical, on every backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_agents_runner import RUNS

from agentledger.agents import (
    AGENTS,
    AgentConfig,
    ChunkInfo,
    ModelCallInfo,
    PipelineConfig,
    RouterConfig,
    RunHooks,
    ToolAgentConfig,
    normalize_config,
    rebuild_agent,
    run_agent,
)
from agentledger.agents.models import (
    ChunkHandler,
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    StreamChunk,
    scripted_tool_call,
)
from agentledger.agents.testing import json_answer, memory_ledger, pipeline_script, router_script
from agentledger.ledger import Ledger
from agentledger.ledger.events import RunStarted
from agentledger.replay import Overrides, replay_run, rerun

STREAM = AgentConfig(options={"stream": True})
SCOUT: dict[str, Any] = {"name": "scout", "description": "finds places", "tools": ["find_pois"]}


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def calls(ledger: Ledger, run_id: str) -> list[dict[str, Any]]:
    """The payloads of a run's ModelCalled events."""
    return [e.payload for e in ledger.events(run_id) if e.kind == "ModelCalled"]


def tools_models(interval: float = 0.0) -> dict[str, ScriptedModel]:
    """The agent calls the calculator, then answers; chunks ``interval`` ms apart."""
    script = [scripted_tool_call("calculator", {"expression": "6*7"}), "Six times seven is 42."]
    return {"agent": ScriptedModel(script, name="scripted:agent", chunk_interval_ms=interval)}


class Observer:
    """Hooks that log chunks and finished calls in the order they come."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, str]] = []

    def hooks(self) -> RunHooks:
        """The hooks to run with."""
        return RunHooks(on_chunk=self.chunk, on_model_call=self.call)

    def chunk(self, info: ChunkInfo) -> None:
        """Log a chunk (its text, or the tool it starts)."""
        self.log.append(("chunk", info.role, info.chunk.text or info.chunk.tool_name))

    def call(self, info: ModelCallInfo) -> None:
        """Log a finished call."""
        self.log.append(("call", info.role, ""))


# Recording -------------------------------------------------------------------------------------


def test_a_streamed_tools_run_records_chunk_timings_on_every_model_call(book: Ledger) -> None:
    """ttft_ms, chunk_count and a chunks blob ``[[ms, chars], ...]`` on each ModelCalled."""
    result = run_agent(
        book, "tools", "What is 6*7?", models=tools_models(interval=7.5), config=STREAM
    )
    assert result.answer == "Six times seven is 42."
    first, second = calls(book, result.run_id)
    assert (first["ttft_ms"], first["chunk_count"]) == (7.5, 1)
    assert book.blob(first["chunks_ref"]) == {
        "chunks": [[7.5, len("calculator") + len('{"expression":"6*7"}')]]
    }
    assert (second["ttft_ms"], second["chunk_count"]) == (7.5, 5)
    assert book.blob(second["chunks_ref"]) == {
        "chunks": [[7.5, 4], [15.0, 6], [22.5, 6], [30.0, 3], [37.5, 3]]
    }
    assert second["latency_ms"] == 37.5
    assert book.verify(result.run_id).ok


def test_chunks_reach_the_hook_as_they_arrive_before_their_call_is_recorded(
    book: Ledger,
) -> None:
    """Each call's chunks come in order, then its on_model_call."""
    observer = Observer()
    run_agent(
        book, "tools", "What is 6*7?", models=tools_models(), config=STREAM, hooks=observer.hooks()
    )
    assert observer.log == [
        ("chunk", "agent", "calculator"),
        ("call", "agent", ""),
        ("chunk", "agent", "Six "),
        ("chunk", "agent", "times "),
        ("chunk", "agent", "seven "),
        ("chunk", "agent", "is "),
        ("chunk", "agent", "42."),
        ("call", "agent", ""),
    ]


def test_sub_agent_calls_stream_too(book: Ledger) -> None:
    """With stream on, every model call of a tools run records its chunk timings."""
    models = {
        "agent": ScriptedModel(
            [scripted_tool_call("ask_scout", {"task": "a cafe"}), "Go to the cafe."],
            name="scripted:agent",
        ),
        "agent:scout": ScriptedModel(["The cafe by the harbour."], name="scripted:scout"),
    }
    config = AgentConfig(options={"stream": True, "sub_agents": [SCOUT]})
    observer = Observer()
    result = run_agent(
        book, "tools", "Coffee?", models=models, config=config, hooks=observer.hooks()
    )
    recorded = calls(book, result.run_id)
    assert [c["actor"] for c in recorded] == ["agent", "agent:scout", "agent"]
    assert all(c["chunk_count"] >= 1 and "chunks_ref" in c for c in recorded)
    assert ("chunk", "agent:scout", "The ") in observer.log


def test_without_stream_nothing_streams_and_the_settings_are_unchanged(book: Ledger) -> None:
    """The option is recorded only when on: a run that does not stream records what it did."""
    observer = Observer()
    result = run_agent(book, "tools", "What is 6*7?", models=tools_models(), hooks=observer.hooks())
    assert [kind for kind, _, _ in observer.log] == ["call", "call"]
    assert all("ttft_ms" not in c and "chunks_ref" not in c for c in calls(book, result.run_id))
    options = book.events(result.run_id)[0].payload["config"]["settings"]["options"]
    assert "stream" not in options
    assert normalize_config("tools", AgentConfig()).options == ToolAgentConfig().model_dump(
        mode="json"
    )


def test_the_stream_option_is_recorded_and_rebuilt_for_replay(book: Ledger) -> None:
    """RunStarted holds ``stream: true`` and rebuild_agent gives a streaming tools agent."""
    result = run_agent(book, "tools", "What is 6*7?", models=tools_models(), config=STREAM)
    payload = book.events(result.run_id)[0].payload
    assert payload["config"]["settings"]["options"]["stream"] is True
    orchestration, config = rebuild_agent(RunStarted.model_validate(payload))
    assert config.options["stream"] is True
    assert getattr(orchestration, "config", None) == ToolAgentConfig(stream=True)


def test_the_pipeline_streams_only_its_synthesizer(book: Ledger) -> None:
    """The planner's JSON and the executor's tool calls are not streamed; the answer is."""
    models = pipeline_script(
        plan={"steps": [{"goal": "add", "tool": "calculator", "args": {"expression": "2+3"}}]},
        calls=[("calculator", {"expression": "2+3"})],
        answer="2 + 3 = 5.",
    )
    observer = Observer()
    config = AgentConfig(options=PipelineConfig(stream=True).model_dump(mode="json"))
    result = run_agent(
        book, "pipeline", "2+3?", models=models, config=config, hooks=observer.hooks()
    )
    streamed = {c["actor"]: "chunks_ref" in c for c in calls(book, result.run_id)}
    assert streamed == {"planner": False, "executor": False, "synthesizer": True}
    assert [text for kind, _, text in observer.log if kind == "chunk"] == [
        "2 ",
        "+ ",
        "3 ",
        "= ",
        "5.",
    ]


def test_the_router_streams_its_chat_reply(book: Ledger) -> None:
    """The chat agent writes the reply: its call streams."""
    models = router_script(plan={"router_plan": []}, answer="Nothing to look up.")
    config = AgentConfig(options=RouterConfig(stream=True).model_dump(mode="json"))
    result = run_agent(book, "router", "Hello?", models=models, config=config)
    streamed = {c["actor"]: "chunks_ref" in c for c in calls(book, result.run_id)}
    assert streamed == {"router": False, "chat": True}


class BrokenStream:
    """A model whose stream delivers two chunks, then fails for good."""

    name = "broken:stream"
    provider = "broken"

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Never called: the run streams."""
        del request
        raise AssertionError("the run asked for a stream")

    def stream(self, request: ModelRequest, on_chunk: ChunkHandler) -> ModelResponse:
        """Two chunks, then a failure."""
        del request
        on_chunk(StreamChunk(at_ms=3.0, text="Six "))
        on_chunk(StreamChunk(at_ms=6.0, text="times "))
        raise ModelCallError(
            provider="broken",
            model="stream",
            status_code=None,
            attempts=[],
            retryable=False,
            error_type="ReadError",
            message="the stream broke after 2 chunks had reached the caller; not retried",
        )


def test_a_stream_that_breaks_is_recorded_as_a_failed_call_and_the_run_falls_back(
    book: Ledger,
) -> None:
    """The chunks that arrived reached the hook; the call is a recorded failure."""
    observer = Observer()
    result = run_agent(
        book,
        "tools",
        "What is 6*7?",
        models={"agent": BrokenStream()},
        config=STREAM,
        hooks=observer.hooks(),
    )
    assert observer.log == [
        ("chunk", "agent", "Six "),
        ("chunk", "agent", "times "),
        ("call", "agent", ""),
    ]
    (call,) = calls(book, result.run_id)
    assert call["error"]["type"] == "ReadError"
    assert "response_ref" not in call
    assert result.status == "fallback"


# Replay ----------------------------------------------------------------------------------------


def test_a_streamed_run_replays_identically_on_every_backend(ledger: Ledger) -> None:
    """Replay serves the recorded answers whole; the stream fields cause no divergence."""
    result = run_agent(
        ledger, "tools", "What is 6*7?", models=tools_models(interval=4.0), config=STREAM
    )
    assert all("chunks_ref" in c for c in calls(ledger, result.run_id))
    replayed = replay_run(ledger, result.run_id)
    assert replayed.identical
    assert replayed.finished
    assert replayed.events == len(ledger.events(result.run_id))


def test_replay_of_a_streamed_run_still_finds_a_changed_answer(book: Ledger) -> None:
    """Stripping the timings hides nothing else: a different answer is a divergence."""
    result = run_agent(book, "tools", "What is 6*7?", models=tools_models(), config=STREAM)
    other = ScriptedModel(
        [scripted_tool_call("calculator", {"expression": "6*7"}), "It is 42."],
        name="scripted:agent",
        chunk_interval_ms=9.0,
    )
    replayed = replay_run(book, result.run_id, models={"agent": other}, raise_on_divergence=False)
    assert not replayed.identical
    assert replayed.divergence is not None
    second = [e.position for e in book.events(result.run_id) if e.kind == "ModelCalled"][1]
    assert replayed.divergence.position == second


def test_a_streamed_pipeline_run_replays_identically(book: Ledger) -> None:
    """A streamed synthesizer, a JSON planner and a tool-calling executor: identical."""
    models = pipeline_script(
        plan=json_answer(
            {"steps": [{"goal": "add", "tool": "calculator", "args": {"expression": "2+3"}}]}
        ),
        calls=[("calculator", {"expression": "2+3"})],
        answer="2 + 3 = 5.",
    )
    config = AgentConfig(options={"stream": True})
    result = run_agent(book, "pipeline", "2+3?", models=models, config=config)
    assert replay_run(book, result.run_id).identical


def test_a_message_streams_as_recorded(book: Ledger) -> None:
    """The recorded response of a streamed call is the assembled answer, exactly."""
    result = run_agent(book, "tools", "What is 6*7?", models=tools_models(), config=STREAM)
    last = calls(book, result.run_id)[-1]
    assert Message.model_validate(book.blob(last["response_ref"])["message"]) == Message.assistant(
        "Six times seven is 42."
    )


def test_a_rerun_of_a_streamed_run_streams_its_live_calls_and_replays(book: Ledger) -> None:
    """Changed requests go to the live model, streamed (the option is rebuilt); then replay."""
    result = run_agent(book, "tools", "What is 6*7?", models=tools_models(), config=STREAM)
    live = ScriptedModel(
        [scripted_tool_call("calculator", {"expression": "6*7"}), "42."],
        name="scripted:agent",
        chunk_interval_ms=3.0,
    )
    again = rerun(book, result.run_id, Overrides(temperature=0.5), models={"agent": live})
    recorded = calls(book, again.run_id)
    assert [c["chunk_count"] for c in recorded] == [1, 1]
    assert all(c["ttft_ms"] == 3.0 for c in recorded)
    options = book.events(again.run_id)[0].payload["config"]["settings"]["options"]
    assert options["stream"] is True
    assert replay_run(book, again.run_id).identical


@pytest.mark.parametrize("agent", ["pipeline", "reasoning", "router", "tools"])
def test_each_streaming_orchestration_streams_its_answer_and_replays_identically(
    agent: str, book: Ledger
) -> None:
    """The answer role's calls stream (every call for tools); the run replays identical."""
    name, question, models, config = RUNS[agent]()
    config = config.model_copy(update={"options": {**config.options, "stream": True}})
    observer = Observer()
    result = run_agent(book, name, question, models=models, config=config, hooks=observer.hooks())
    recorded = calls(book, result.run_id)
    streamed = {c["actor"] for c in recorded if "chunks_ref" in c}
    role = AGENTS[name].answer_role
    assert streamed == ({c["actor"] for c in recorded} if agent == "tools" else {role})
    assert any(kind == "chunk" and who == role for kind, who, _ in observer.log)
    replayed = replay_run(book, result.run_id)
    assert replayed.identical
    assert replayed.finished
