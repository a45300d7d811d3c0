"""Replay, rerun, resume, fork and diff of runs recorded from a user's function."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from user_code import agents

from agentledger.agents.loopback import LoopbackServer, Reply
from agentledger.agents.prompts import PromptLibrary
from agentledger.ledger import Ledger, RunRecorder
from agentledger.replay import (
    Overrides,
    ReplayDivergenceError,
    ReplayUsageError,
    diff_runs,
    fork_run,
    replay_run,
    rerun,
    resume_run,
)

TERSE = agents.SYSTEM


@pytest.fixture(autouse=True)
def original_prompt() -> Iterator[None]:
    """Each test starts (and ends) with the agents' original prompt, questions and reading."""
    agents.SYSTEM = TERSE
    ask, agents.SHOUT = agents.ASK, ""
    yield
    agents.SYSTEM = TERSE
    agents.ASK, agents.SHOUT = ask, ""
    agents.CLAUDE_READ = "helper"


@pytest.mark.parametrize("agent", ["triage", "gathered", "threaded", "streamed", "marked"])
def test_a_function_run_replays_identically(ledger: Ledger, agent: str) -> None:
    """Sync, async (gather), four threads, a stream, the decorator form: identical, no calls."""
    _, run_id = ledger.record_function(getattr(agents, agent), "Weather in Oslo?")
    result = replay_run(ledger, run_id)
    assert result.identical
    assert result.finished
    assert result.events == ledger.run(run_id).event_count


@pytest.mark.parametrize("agent", ["triage", "gathered", "threaded", "streamed", "marked"])
def test_a_function_run_replays_identically_read_two_events_at_a_time(
    ledger: Ledger, agent: str
) -> None:
    """Replay reads the record in pages; calls are served across pages, concurrent ones too."""
    _, run_id = ledger.record_function(getattr(agents, agent), "Weather in Oslo?")
    ledger.page_size = 2
    result = replay_run(ledger, run_id)
    assert result.identical
    assert result.events == ledger.run(run_id).event_count >= 4


@pytest.mark.parametrize("agent", ["triage", "gathered"])
def test_a_divergence_is_the_same_whatever_the_page_size(ledger: Ledger, agent: str) -> None:
    """A changed prompt diverges at the same call, with the same changes, in pages of one."""
    _, run_id = ledger.record_function(getattr(agents, agent), "Weather in Oslo?")
    agents.SYSTEM = "You are a chatty travel assistant."
    whole = replay_run(ledger, run_id, raise_on_divergence=False).divergence
    ledger.page_size = 1
    paged = replay_run(ledger, run_id, raise_on_divergence=False).divergence
    assert whole is not None
    assert paged == whole


def test_concurrent_calls_replay_in_their_recorded_completion_order(ledger: Ledger) -> None:
    """The gathered calls completed in reverse start order; replay puts each at its position."""
    _, run_id = ledger.record_function(agents.gathered, "q")
    asked = [
        ledger.conversation(e.payload["messages_ref"])[-1]["content"]
        for e in ledger.events(run_id)
        if e.kind == "ModelCalled"
    ]
    assert asked == list(reversed(agents.CITIES))  # the fastest answered first
    for _ in range(3):
        assert replay_run(ledger, run_id).identical


def test_a_run_ended_while_its_tasks_still_ran_replays_identically(ledger: Ledger) -> None:
    """Tools still finishing when a gathered one failed the run are replayed before its end."""
    with pytest.raises(ValueError, match="below zero"):
        ledger.record_function(agents.gathered_failing, "q")
    (run,) = ledger.runs()
    kinds = [e.kind for e in ledger.events(run.run_id)]
    assert kinds[-2:] == ["ToolReturned", "RunFailed"]
    assert kinds.count("ToolReturned") == 3  # Lima's returned after Nuuk's failure
    for _ in range(3):
        assert replay_run(ledger, run.run_id).identical


def test_a_call_given_up_on_is_recorded_and_replays_offline(ledger: Ledger) -> None:
    """A call cancelled by a timeout is recorded (it was sent) and replays as given up again."""
    with LoopbackServer() as server:
        server.reply(Reply(text="too late", delay_s=1.0), Reply(text="on time"))
        agents.OPENAI_URL = server.openai_url
        result, run_id = asyncio.run(ledger.arecord_function(agents.impatient, "q"))
    agents.OPENAI_URL = "http://127.0.0.1:9/v1"  # nothing answers there: replay is offline
    assert result == ["gave up", "on time"]
    calls = [e.payload for e in ledger.events(run_id) if e.kind == "ModelCalled"]
    assert [c["error"]["type"] if c.get("error") else None for c in calls] == [
        "CancelledError",
        None,
    ]
    assert calls[0]["latency_ms"] >= 150
    assert replay_run(ledger, run_id).identical


def first_call(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """The first ModelCalled of a run, with its response and chunk timings read."""
    call = next(e.payload for e in ledger.events(run_id) if e.kind == "ModelCalled")
    return {
        **call,
        "response": ledger.blob(call["response_ref"])["message"],
        "chunks": ledger.blob(call["chunks_ref"])["chunks"],
    }


def test_a_stream_cancelled_mid_way_is_recorded_cancelled_and_replays_offline(
    ledger: Ledger,
) -> None:
    """A timeout cancels a stream's reader after a few chunks: recorded as cancelled with them.

    Replay serves the same chunks, then the timeout fires again: the code sees what it saw
    (recorded as a delta, so compared), and the run replays identically.
    """
    full = "abcdefghijklmnop"
    with LoopbackServer() as server:
        server.reply(Reply(text=full, chunk_chars=2, chunk_delay_s=0.1), Reply(text="on time"))
        agents.OPENAI_URL = server.openai_url
        result, run_id = asyncio.run(ledger.arecord_function(agents.impatient_stream, "q"))
    agents.OPENAI_URL = "http://127.0.0.1:9/v1"  # nothing answers there: replay is offline
    ended, seen, quick = result
    assert (ended, quick) == ("gave up", "on time")
    call = first_call(ledger, run_id)
    assert call["error"]["type"] == "CancelledError"
    text = call["response"]["choices"][0]["message"]["content"]
    assert text == "".join(seen)
    assert text
    assert full.startswith(text)
    assert text != full
    assert len(call["chunks"]) == len(seen)
    assert replay_run(ledger, run_id).identical


@pytest.mark.parametrize("read", ["helper", "events", "busy"])
def test_an_anthropic_stream_cancelled_mid_way_is_recorded_cancelled(
    ledger: Ledger, read: str
) -> None:
    """Its reading task cancelled mid-stream: recorded as cancelled, replayed identically.

    Read three ways: the stream helper's text stream, the raw events of
    ``create(stream=True)``, and the helper cancelled while its reader was busy elsewhere.
    """
    agents.CLAUDE_READ = read
    with LoopbackServer() as server:
        server.reply(Reply(text="abcdefghijklmnop", chunk_chars=2, chunk_delay_s=0.08))
        agents.ANTHROPIC_URL = server.anthropic_url
        result, run_id = asyncio.run(ledger.arecord_function(agents.impatient_claude, "q"))
    agents.ANTHROPIC_URL = "http://127.0.0.1:9"
    ended, seen = result
    assert ended == "cancelled"
    if read == "busy":
        assert len(seen) == 2
    call = first_call(ledger, run_id)
    assert call["error"]["type"] == "CancelledError"
    text = call["response"]["content"][0]["text"] if call["response"]["content"] else ""
    assert "abcdefghijklmnop".startswith(text)
    assert text != "abcdefghijklmnop"
    if read != "events":
        assert text == "".join(seen)
    assert replay_run(ledger, run_id).identical


def test_anthropic_beta_messages_are_recorded_and_replay_offline(ledger: Ledger) -> None:
    """``client.beta.messages`` create and stream: recorded (``beta: true``), served in replay."""
    with LoopbackServer() as server:
        server.reply(Reply(text="Sunny."), Reply(text="Sun.", chunk_chars=2))
        agents.ANTHROPIC_URL = server.anthropic_url
        answer, run_id = ledger.record_function(agents.beta_claude, "Weather in Oslo?")
    agents.ANTHROPIC_URL = "http://127.0.0.1:9"
    assert answer == "BetaMessage: Sunny. | ParsedBetaMessage: Sun."
    calls = [e.payload for e in ledger.events(run_id) if e.kind == "ModelCalled"]
    assert [c["params"] for c in calls] == [
        {"max_tokens": 64, "betas": ["context-management-2025-06-27"], "beta": True},
        {"max_tokens": 64, "stream": True, "beta": True},
    ]
    assert replay_run(ledger, run_id).identical


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_threads_diverging_at_once_report_the_earliest_call_every_time(ledger: Ledger) -> None:
    """Four threads whose calls all changed: the first recorded call is named, every replay."""
    _, run_id = ledger.record_function(agents.threaded, "Weather in")
    first = next(e.position for e in ledger.events(run_id) if e.kind == "ModelCalled")
    agents.ASK = "{question} {city} on turn {turn}?"
    for _ in range(4):
        found = replay_run(ledger, run_id, raise_on_divergence=False).divergence
        assert found is not None
        assert found.position == first


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_one_thread_changed_is_reported_at_its_own_call(ledger: Ledger) -> None:
    """Only Lima's questions changed: the divergence is Lima's first call, not another's."""
    _, run_id = ledger.record_function(agents.threaded, "Weather in")
    lima = next(
        e.position
        for e in ledger.events(run_id)
        if e.kind == "ModelCalled"
        and ledger.conversation(e.payload["messages_ref"])[-1]["content"] == "Weather in Lima #0"
    )
    agents.SHOUT = "Lima"
    for _ in range(3):
        found = replay_run(ledger, run_id, raise_on_divergence=False).divergence
        assert found is not None
        assert found.position == lima
        assert "'Weather in Lima #0' -> 'WEATHER IN LIMA #0'" in found.summary()


def test_a_changed_prompt_string_diverges_at_that_call(ledger: Ledger) -> None:
    """Replay names the first call whose request changed, the path and the message."""
    _, run_id = ledger.record_function(agents.triage, "Weather in Oslo?")
    agents.SYSTEM = "You are a chatty travel assistant."
    with pytest.raises(ReplayDivergenceError) as caught:
        replay_run(ledger, run_id)
    found = caught.value.divergence
    assert (found.position, found.expected_kind, found.actual_kind) == (
        2,
        "ModelCalled",
        "ModelCalled",
    )
    assert [c.path for c in found.changes] == ["/messages_ref"]
    assert "message 1 (system)" in found.summary()
    assert "chatty" in found.summary()


def test_a_changed_prompt_in_concurrent_code_diverges_at_its_own_call(ledger: Ledger) -> None:
    """Under asyncio.gather the changed request is matched to the call it resembles most."""
    _, run_id = ledger.record_function(agents.gathered, "q")
    first = next(e for e in ledger.events(run_id) if e.kind == "ModelCalled").position
    agents.SYSTEM = "Changed."
    result = replay_run(ledger, run_id, raise_on_divergence=False)
    assert not result.identical
    assert result.divergence is not None
    assert result.divergence.expected_kind == "ModelCalled"
    assert result.divergence.position >= first


def test_a_recorded_tool_is_served_not_called_in_replay(ledger: Ledger) -> None:
    """A failed effectful tool replays its recorded failure as the same exception type."""
    with pytest.raises(ConnectionError):
        ledger.record_function(agents.failing, "ops@example.com")
    (info,) = ledger.runs()
    assert replay_run(ledger, info.run_id).identical


def test_an_imported_run_requires_an_entry(ledger: Ledger, tmp_path: Path) -> None:
    """Replay never runs code named only by a record it did not make; --entry says which."""
    with Ledger.open("memory://") as source:
        _, run_id = source.record_function(agents.triage, "Weather in Oslo?")
        source.export_run(run_id, tmp_path / "run.jsonl")
    ledger.import_file(tmp_path / "run.jsonl")
    with pytest.raises(ReplayUsageError, match="did not record it"):
        replay_run(ledger, run_id)
    with pytest.raises(ReplayUsageError, match="did not record it"):
        rerun(ledger, run_id)
    assert replay_run(ledger, run_id, entry="user_code.agents:triage").identical
    with pytest.raises(ReplayUsageError, match="cannot import module 'nowhere'"):
        replay_run(ledger, run_id, entry="nowhere:agent")


def test_a_run_without_an_entry_replays_a_function_given_one(ledger: Ledger) -> None:
    """A run recorded by record_run can be checked against a function named with entry."""
    with ledger.record_run("plain", input="Weather in Oslo?") as run:
        agents.triage(run, "Weather in Oslo?")
    assert replay_run(ledger, run.run_id, entry="user_code.agents:triage").identical
    other = replay_run(
        ledger, run.run_id, entry="user_code.agents:prompted", raise_on_divergence=False
    )
    assert not other.identical


def test_rerun_serves_unchanged_calls_and_sends_changed_ones_live(ledger: Ledger) -> None:
    """An unchanged rerun is all served; a changed prompt goes live; diff shows the message."""
    _, run_id = ledger.record_function(agents.triage, "Weather in Oslo?")
    same = rerun(ledger, run_id)
    assert (same.served_model_calls, same.live_model_calls, same.served_tool_calls) == (2, 0, 1)
    called = [e for e in ledger.events(same.run_id) if e.kind == "ModelCalled"]
    assert called[0].payload["served_from"] == f"{run_id}@2"
    assert called[0].payload.get("usage", {}) == {}
    assert replay_run(ledger, same.run_id).identical
    agents.SYSTEM = "You are a chatty travel assistant."
    changed = rerun(ledger, run_id)
    assert (changed.served_model_calls, changed.live_model_calls) == (0, 2)
    started = ledger.events(changed.run_id)[0].payload
    assert (started["relation"], started["parent_run_id"]) == ("rerun", run_id)
    diff = diff_runs(ledger, run_id, changed.run_id)
    assert not diff.identical


def test_diff_of_a_concurrent_rerun_shows_only_the_changed_thread(ledger: Ledger) -> None:
    """Served calls pair with what served them, whatever order the threads completed in."""
    _, run_id = ledger.record_function(agents.threaded, "Weather in")
    agents.SHOUT = "Lima"
    changed = rerun(ledger, run_id)
    assert changed.live_model_calls == 3
    diff = diff_runs(ledger, run_id, changed.run_id)
    differing = [item for unit in diff.units for item in unit.items if item.kind == "model"]
    a_events = {e.position: e for e in ledger.events(run_id)}
    asked = {
        ledger.conversation(a_events[item.a_position].payload["messages_ref"])[-1]["content"]
        for item in differing
        if item.a_position is not None
    }
    assert asked == {f"Weather in Lima #{turn}" for turn in range(3)}


def test_rerun_with_a_new_prompt_version_reads_it_through_prompt_text(ledger: Ledger) -> None:
    """A prompt version from the library reaches run.prompt_text; overriding a model is refused."""
    _, run_id = ledger.record_function(agents.prompted, "hi", prompts={"system": ("v1", "Brief.")})
    library = PromptLibrary({"system": {"v2": "Thorough."}})
    result = rerun(ledger, run_id, Overrides(prompt_versions={"system": "v2"}), prompts=library)
    assert (result.served_model_calls, result.live_model_calls) == (0, 1)
    prompts = ledger.events(result.run_id)[0].payload["config"]["prompts"]
    assert prompts["system"]["version"] == "v2"
    with pytest.raises(ReplayUsageError, match="has no version 'v9'"):
        rerun(ledger, run_id, Overrides(prompt_versions={"system": "v9"}), prompts=library)
    with pytest.raises(ReplayUsageError, match="cannot override model"):
        rerun(ledger, run_id, Overrides(model="openai:gpt-4o"))


def test_fork_repeats_the_prefix_then_goes_live(ledger: Ledger) -> None:
    """A fork at N copies 1..N from the record and runs the rest; a patch is refused."""
    _, run_id = ledger.record_function(agents.triage, "Weather in Oslo?")
    forked = fork_run(ledger, run_id, 4)
    assert forked.status == "completed"
    assert forked.replayed_events == 4
    assert replay_run(ledger, forked.run_id).identical
    with pytest.raises(ReplayUsageError, match="takes no --patch"):
        fork_run(ledger, run_id, 4, patch={"a": 1})


@pytest.mark.parametrize("agent", ["threaded", "gathered"])
def test_a_fork_of_concurrent_code_goes_live_only_after_its_prefix(
    ledger: Ledger, agent: str
) -> None:
    """Forked at any position, four threads (or tasks) repeat the prefix, then go live."""
    _, run_id = ledger.record_function(getattr(agents, agent), "Weather in")
    count = ledger.run(run_id).event_count
    for at in range(2, count - 1):
        forked = fork_run(ledger, run_id, at)
        assert forked.status == "completed", at
        assert forked.replayed_events == at


def test_resume_continues_a_function_run_whose_process_died(ledger: Ledger) -> None:
    """A run cut short after its first call resumes: served prefix, live rest, verifies."""
    _, full = ledger.record_function(agents.triage, "Weather in Oslo?")
    with ledger.record_run("triage", input="Weather in Oslo?", entry=_entry(ledger, full)) as run:
        _replay_prefix(run, ledger, full, upto=2)
        cut = run.run_id
        run._ended = True  # the process "died": no end event
    result = resume_run(ledger, cut)
    assert result.status == "completed"
    assert [e.kind for e in ledger.events(cut)] == [e.kind for e in ledger.events(full)]
    assert ledger.verify(cut).ok
    assert replay_run(ledger, cut).identical


def _entry(ledger: Ledger, run_id: str) -> object:
    from agentledger.ledger.events import EntryPoint

    return EntryPoint.model_validate(ledger.events(run_id)[0].payload["entry"])


def _replay_prefix(run: RunRecorder, ledger: Ledger, source: str, upto: int) -> None:
    """Record the source run's events 2..upto again in ``run`` (same request, same answer)."""
    for event in ledger.events(source, after=1, upto=upto):
        run.record(event.event)


def test_a_changed_param_is_named_with_its_values() -> None:
    """An Anthropic system prompt is a param: the divergence names it, old and new."""
    from agentledger.ledger import CallRecord
    from agentledger.replay._serving import _request_change

    recorded = {
        "provider": "anthropic",
        "model": "claude",
        "params": {"max_tokens": 256, "system": "Be terse.", "temperature": 0.2},
    }
    call = CallRecord(
        provider="anthropic",
        model="claude",
        messages=[],
        params={"max_tokens": 256, "system": "Be chatty.", "temperature": 0.2},
    )
    assert _request_change(recorded, [], call) == "param system 'Be terse.' -> 'Be chatty.'"


def test_an_sdk_tool_call_is_shown_by_name_and_arguments() -> None:
    """OpenAI SDK messages carry ``function`` with JSON text arguments: shown as a call."""
    from agentledger.replay._diff_compare import message_lines

    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "beta"}'},
            }
        ],
    }
    assert message_lines([message], 3) == ["[3] assistant:", '  -> lookup({"q": "beta"})']
