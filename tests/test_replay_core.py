"""replay_run, rerun and fork_run on recorded runs of every orchestration.

Replay is the audit promise: a recorded run re-executes from its record alone and records the
same events, and anything that makes it behave differently is reported at the exact position.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_agents_runner import RUNS

from agentledger.agents import AgentConfig, GuardrailLimits, default_library, run_agent
from agentledger.agents.models import Message, ScriptedModel
from agentledger.agents.testing import (
    json_answer,
    load_scenario,
    memory_ledger,
    reasoning_script,
)
from agentledger.ledger import Ledger, blob_refs_in
from agentledger.ledger.events import RunStarted, event_type
from agentledger.projections import world_state
from agentledger.replay import (
    NotResumableError,
    Overrides,
    ReplayDivergenceError,
    ReplayUsageError,
    fork_run,
    replay_all,
    replay_run,
    rerun,
    rerun_many,
    resume_run,
)

Run = tuple[Ledger, str]


def record(agent: str) -> Run:
    """One recorded run of ``agent`` (the scripts of tests/test_agents_runner.py)."""
    name, question, models, config = RUNS[agent]()
    book = memory_ledger()
    return book, run_agent(book, name, question, models=models, config=config).run_id


def started(book: Ledger, run_id: str) -> RunStarted:
    """The run's RunStarted."""
    return RunStarted.model_validate(book.events(run_id)[0].payload)


def stand_in(book: Ledger, run_id: str, role: str, script: list[Any]) -> ScriptedModel:
    """A scripted model with the recorded identity of ``role`` (so requests compare equal)."""
    m = started(book, run_id).config.models[role]
    return ScriptedModel(script, name=f"{m.provider}:{m.model}")


def positions(book: Ledger, run_id: str, kind: str, **match: Any) -> list[int]:
    """Positions of the run's events of ``kind`` whose payload has ``match``."""
    return [
        e.position
        for e in book.events(run_id)
        if e.kind == kind and all(e.payload.get(k) == v for k, v in match.items())
    ]


# Replay ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", sorted(RUNS))
def test_every_orchestration_replays_identically_and_writes_nothing(agent: str) -> None:
    """The same events, compared one by one; the audited ledger is unchanged."""
    book, run_id = record(agent)
    before = [(e.position, e.hash) for e in book.events(run_id)]
    result = replay_run(book, run_id)
    assert result.identical
    assert result.finished
    assert result.events == len(before)
    assert [(e.position, e.hash) for e in book.events(run_id)] == before
    assert book.run_ids() == [run_id]


def test_a_model_answering_differently_diverges_at_that_model_call() -> None:
    """Re-evaluated against a model changing its 2nd executor answer: diverges exactly there."""
    book, run_id = record("pipeline")
    executor_calls = positions(book, run_id, "ModelCalled", actor="executor")
    answers = _executor_tail(book, run_id, 0)
    call = answers[1].tool_calls[0]
    moved = call.model_copy(update={"arguments": {**call.arguments, "origin": "Old Town"}})
    answers[1] = answers[1].model_copy(update={"tool_calls": [moved]})
    changed = stand_in(book, run_id, "executor", answers)
    with pytest.raises(ReplayDivergenceError) as caught:
        replay_run(book, run_id, models={"executor": changed})
    found = caught.value.divergence
    assert found.position == executor_calls[1]
    assert (found.expected_kind, found.actual_kind) == ("ModelCalled", "ModelCalled")
    assert any(c.path == "/response_ref" for c in found.changes)
    assert f"position {executor_calls[1]}" in str(caught.value)


def test_an_edited_prompt_text_under_the_same_version_is_replayed_with_the_recorded_text() -> None:
    """The recorded prompt text wins: a library whose v1 changed still replays the run."""
    book, run_id = record("pipeline")
    edited = default_library().with_prompt("pipeline.planner", "v1", "Plan. Differently.")
    assert replay_run(book, run_id, prompts=edited).identical


def test_a_run_that_never_finished_replays_up_to_its_last_event() -> None:
    """A crashed run's prefix is compared; the result says it is unfinished."""
    book, run_id = record("pipeline")
    copy = memory_ledger("copy")
    events = book.events(run_id)
    cut = positions(book, run_id, "StepCompleted")[1]
    copy_id = _copy_prefix(book, run_id, copy, cut)
    result = replay_run(copy, copy_id)
    assert (result.identical, result.finished, result.events) == (True, False, cut)
    assert len(events) > cut


def test_replay_all_reports_each_run_without_raising() -> None:
    """Every run replayed; progress reported per run."""
    book = memory_ledger()
    ids = []
    for agent in ("pipeline", "router"):
        name, question, models, config = RUNS[agent]()
        ids.append(run_agent(book, name, question, models=models, config=config).run_id)
    seen: list[tuple[int, int]] = []
    results = replay_all(book, progress=lambda i, n, _r: seen.append((i, n)))
    assert sorted(r.run_id for r in results) == sorted(ids)
    assert all(r.identical for r in results)
    assert seen == [(1, 2), (2, 2)]


# Rerun -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", sorted(RUNS))
def test_a_rerun_without_overrides_is_served_entirely_from_the_record(agent: str) -> None:
    """No model or tool is called; calls are marked served, with zero tokens; it replays."""
    book, run_id = record(agent)
    result = rerun(book, run_id)
    assert result.status == "completed"
    assert (result.live_model_calls, result.live_tool_calls) == (0, 0)
    assert result.served_model_calls == len(positions(book, run_id, "ModelCalled"))
    calls = [e.payload for e in book.events(result.run_id) if e.kind == "ModelCalled"]
    assert all(c["served_from"].startswith(f"{run_id}@") for c in calls)
    assert all(c.get("usage", {}).get("total_tokens", 0) == 0 for c in calls)
    new = started(book, result.run_id)
    assert (new.parent_run_id, new.relation) == (run_id, "rerun")
    assert replay_run(book, result.run_id).identical
    assert book.verify(result.run_id).problems == []


def test_a_changed_planner_prompt_calls_the_model_from_the_first_changed_request_on() -> None:
    """Only the planner's request changed: it goes live; the executor's are served."""
    book, run_id = record("pipeline")
    library = default_library().with_prompt("pipeline.planner", "v2", "Plan carefully. $tools")
    planner = stand_in(book, run_id, "planner", [_first_answer(load_scenario().models["planner"])])
    executor = stand_in(book, run_id, "executor", [])
    synthesizer = stand_in(book, run_id, "synthesizer", [])
    result = rerun(
        book,
        run_id,
        Overrides(prompt_versions={"planner": "v2"}),
        prompts=library,
        models={"planner": planner, "executor": executor, "synthesizer": synthesizer},
    )
    assert result.status == "completed", result.stopped
    assert len(planner.requests) == 1
    assert (len(executor.requests), len(synthesizer.requests)) == (0, 0)
    assert result.live_model_calls == 1
    new = started(book, result.run_id)
    assert new.config.prompts["planner"].version == "v2"
    assert new.overrides == {"prompt_versions": {"planner": "v2"}}


def test_a_rerun_refuses_to_send_a_changed_effectful_call_and_records_why() -> None:
    """send_message with new arguments is not sent: RunFailed names the tool; nothing sent."""
    args = {"to": "sam", "subject": "hi", "body": "hello"}
    models = reasoning_script(
        plan={"plan": ["TOOL", "ANSWER"]},
        choices=[{"tool": "send_message", "args": args}, {"tool": "", "args": {}}],
        answer="Sent.",
    )
    config = AgentConfig(limits=GuardrailLimits(max_tool_risk="high"))
    book = memory_ledger()
    run_id = run_agent(book, "reasoning", "Tell Sam hello", models=models, config=config).run_id
    same = rerun(book, run_id)
    assert (same.status, same.served_tool_calls, same.live_tool_calls) == ("completed", 1, 0)
    changed = {**args, "body": "HELLO"}
    reasoner = stand_in(
        book,
        run_id,
        "reasoner",
        [
            json_answer({"plan": ["TOOL", "ANSWER"]}),
            json_answer({"tool": "send_message", "args": changed}),
        ],
    )
    stopped = rerun(book, run_id, Overrides(temperature=0.5), models={"reasoner": reasoner})
    assert stopped.status == "stopped"
    assert stopped.stopped is not None
    assert "send_message" in stopped.stopped
    last = book.events(stopped.run_id)[-1]
    assert last.kind == "RunFailed"
    assert last.payload["error"]["type"] == "EffectRefusedError"
    assert stopped.live_tool_calls == 0
    assert book.verify(stopped.run_id).problems == []
    allowed = rerun(
        book,
        run_id,
        Overrides(temperature=0.5),
        models={"reasoner": stand_in(book, run_id, "reasoner", _script_of(book, stopped.run_id))},
        allow_effects=True,
    )
    assert allowed.live_tool_calls == 1


def test_rerun_many_reports_progress_and_bad_overrides_are_refused() -> None:
    """A selection reruns with progress; an unknown prompt role is a clear usage error."""
    book = memory_ledger()
    ids = []
    for _ in range(2):
        name, question, models, config = RUNS["router"]()
        ids.append(run_agent(book, name, question, models=models, config=config).run_id)
    seen: list[int] = []
    results = rerun_many(book, ids, progress=lambda i, _n, _r: seen.append(i))
    assert [r.parent_run_id for r in results] == ids
    assert seen == [1, 2]
    with pytest.raises(ReplayUsageError, match="no such role or prompt"):
        rerun(book, ids[0], Overrides(prompt_versions={"nobody": "v1"}))
    with pytest.raises(ReplayUsageError, match="no version 'v9'"):
        rerun(book, ids[0], Overrides(prompt_versions={"router": "v9"}))


# Fork ------------------------------------------------------------------------------------------


def test_a_fork_copies_the_prefix_applies_its_patch_and_continues_live() -> None:
    """Events 1..N repeat the parent's; the patch lands at N+1; the fork replays and verifies."""
    book, run_id = record("pipeline")
    at = positions(book, run_id, "StepCompleted")[1]
    synthesizer = stand_in(
        book, run_id, "synthesizer", ["Forked answer [weather:place:harbour:2026-06-13]."]
    )
    executor = stand_in(book, run_id, "executor", _executor_tail(book, run_id, at))
    result = fork_run(
        book,
        run_id,
        at,
        patch={"note": "forked"},
        models={
            "executor": executor,
            "synthesizer": synthesizer,
            "planner": stand_in(book, run_id, "planner", []),
        },
    )
    parent = book.events(run_id)
    child = book.events(result.run_id)
    assert [e.payload for e in child[1:at]] == [e.payload for e in parent[1:at]]
    assert (child[at].kind, child[at].payload["source"]) == ("DeltaApplied", "fork")
    assert world_state(book, result.run_id)["note"] == "forked"
    assert result.status == "completed"
    info = started(book, result.run_id)
    assert (info.parent_run_id, info.parent_position, info.relation) == (run_id, at, "fork")
    assert replay_run(book, result.run_id).identical
    assert book.verify().problems == []


def test_fork_and_resume_refuse_bad_requests_clearly() -> None:
    """A position outside the run, a finished run to resume, a scripted run with no model."""
    book, run_id = record("router")
    last = len(book.events(run_id))
    with pytest.raises(ReplayUsageError, match=f"has positions 1..{last}"):
        fork_run(book, run_id, last, models={"default": ScriptedModel([])})
    with pytest.raises(ReplayUsageError, match="no live model for"):
        fork_run(book, run_id, 3)
    with pytest.raises(NotResumableError, match="already ended"):
        resume_run(book, run_id)


# Helpers ---------------------------------------------------------------------------------------


def _first_answer(model: ScriptedModel) -> Any:
    script = model._script
    assert script is not None
    return script[0]


def _script_of(book: Ledger, run_id: str) -> list[str]:
    """The text answers the reasoner gave in a run (to script the same answers again)."""
    calls = [
        e.payload
        for e in book.events(run_id)
        if e.kind == "ModelCalled" and e.payload["actor"] == "reasoner"
    ]
    texts = [book.blob(c["response_ref"])["message"]["content"] for c in calls]
    return [*texts, json_answer({"tool": "", "args": {}})]


def _executor_tail(book: Ledger, run_id: str, at: int) -> list[Any]:
    """The executor's recorded answers after position ``at`` (a fork's live executor)."""
    return [
        Message.model_validate(book.blob(e.payload["response_ref"])["message"])
        for e in book.events(run_id, after=at)
        if e.kind == "ModelCalled" and e.payload["actor"] == "executor"
    ]


def _copy_prefix(source: Ledger, run_id: str, target: Ledger, upto: int) -> str:
    """A copy of the run's first ``upto`` events (a run whose process died there)."""
    events = source.events(run_id, upto=upto)
    first = RunStarted.model_validate(events[0].payload)
    recorder = target.record_run(
        first.agent, input=first.input, config=first.config, tags=first.tags
    )
    with recorder.batch():
        for value in _blobs(source, events).values():
            recorder.put_blob(value)
        for event in events[1:]:
            recorder.record(event_type(event.kind).model_validate(event.payload))
    return recorder.run_id


def _blobs(source: Ledger, events: list[Any]) -> dict[str, Any]:
    """Every blob the events refer to, message-chain parents included."""
    refs: set[str] = set()
    for e in events:
        refs.update(blob_refs_in(e.payload))
    out = dict(source.blobs(sorted(refs)))
    frontier = list(out.values())
    while frontier:
        node = frontier.pop()
        parent = node.get("parent_ref") if isinstance(node, dict) else None
        if parent and parent not in out:
            out[parent] = source.blob(parent)
            frontier.append(out[parent])
    return out
