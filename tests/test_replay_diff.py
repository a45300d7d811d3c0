"""`diff_runs`: causal alignment, first divergence, per-step changes, world state, totals, text."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from agentledger.agents import AgentConfig, AgentResult, run_agent
from agentledger.agents.models import ScriptedModel
from agentledger.agents.testing import memory_ledger, pipeline_script, tool_agent_script
from agentledger.ledger import Ledger, RecordedEvent, UnknownRunError
from agentledger.ledger.events import Attempt
from agentledger.projections import apply_patch, fold_patches
from agentledger.replay import Overrides, RunDiff, diff_runs, render_diff, rerun
from agentledger.replay._diff_units import payload_of

QUESTION = "Is 13 June 2026 good for a harbour walk, and how do I get there from Central Station?"
WEATHER = {"place": "Harbour Front", "date": "2026-06-13"}
ROUTE = {"origin": "Central Station", "destination": "Harbour Front"}
OLD_TOWN = {"place": "Old Town"}
STEP_WEATHER = {"goal": "weather at the harbour", "tool": "weather", "args": WEATHER}
STEP_ROUTE = {"goal": "route from the station", "tool": "transit", "args": ROUTE}
STEP_GEOCODE = {"goal": "where is the old town", "tool": "geocode", "args": OLD_TOWN}
TWO_STEPS = {"steps": [STEP_WEATHER, STEP_ROUTE]}
THREE_STEPS = {"steps": [STEP_WEATHER, STEP_GEOCODE, STEP_ROUTE]}
ANSWER = "Sunny; the tram takes 14 minutes."


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def pipeline(
    ledger: Ledger,
    plan: Mapping[str, Any] = TWO_STEPS,
    calls: list[tuple[str, Mapping[str, Any]]] | None = None,
    answer: str = ANSWER,
    config: AgentConfig | None = None,
) -> AgentResult:
    """Record one scripted pipeline run; the executor calls each plan step's tool by default."""
    if calls is None:
        calls = [(step["tool"], step["args"]) for step in plan["steps"]]
    models = pipeline_script(plan=dict(plan), calls=list(calls), answer=answer)
    return run_agent(ledger, "pipeline", QUESTION, models=models, config=config)


def unit(diff: RunDiff, label_start: str) -> Any:
    """The one unit whose label starts with `label_start`."""
    found = [u for u in diff.units if u.label.startswith(label_start)]
    assert len(found) == 1, [u.label for u in diff.units]
    return found[0]


def test_the_same_script_twice_diffs_as_identical(ledger: Ledger) -> None:
    """Two runs of one script differ only in ids, times and tool latencies: identical."""
    a, b = pipeline(ledger), pipeline(ledger)
    diff = diff_runs(ledger, a.run_id, b.run_id)
    assert diff.identical
    assert diff.first_divergence is None
    assert {u.status for u in diff.units} == {"same"}
    assert diff.world is None
    assert diff.answer is None
    assert diff.delta.tokens == 0
    assert diff.delta.model_calls == 0


def test_a_different_plan_diverges_first_at_the_planner_call(book: Ledger) -> None:
    """The planner's answer is the first divergence; the inserted step is added, not shifted."""
    a, b = pipeline(book), pipeline(book, THREE_STEPS)
    diff = diff_runs(book, a.run_id, b.run_id)
    assert not diff.identical
    first = diff.first_divergence
    assert first is not None
    assert first.unit == "step plan #1"
    assert first.item == "model planner #1"
    assert "response" in first.what
    planner = next(e.position for e in book.events(a.run_id) if e.kind == "ModelCalled")
    assert first.a_position == planner
    assert [(u.label.split(" (")[0], u.status) for u in diff.units if u.key[0] == "step"] == [
        ("step plan #1", "changed"),
        ("step execute #1 [weather]", "same"),
        ("step execute #2 [geocode]", "added"),
        ("step execute #2 [transit]", "changed"),
        ("step synthesize #1", "changed"),
    ]
    added = unit(diff, "step execute #2 [geocode]")
    assert added.a_positions is None
    assert [i.label for i in added.items if i.kind == "tool"] == ["tool geocode #1"]
    plan = next(i for i in unit(diff, "step plan #1").items if i.label == "PlanProposed #1")
    assert [(p.path, p.op) for p in plan.value.paths] == [("/plan/steps/1", "added")]


def test_aligned_steps_compare_with_their_ids_renamed(book: Ledger) -> None:
    """After an inserted step, the transit step's delta (keyed by its shifted step id) matches."""
    a, b = pipeline(book), pipeline(book, THREE_STEPS)
    transit = unit(diff_runs(book, a.run_id, b.run_id), "step execute #2 [transit]")
    assert transit.status == "changed"
    assert "(b: #3)" in transit.label
    labels = {i.label for i in transit.items}
    assert "tool transit #1" not in labels
    assert "DeltaApplied #1" not in labels
    assert "model executor #1" in labels


def test_a_removed_step_shows_as_removed(book: Ledger) -> None:
    """A plan without the route step: that step is removed, synthesis still pairs."""
    a = pipeline(book)
    b = pipeline(book, {"steps": [STEP_WEATHER]})
    diff = diff_runs(book, a.run_id, b.run_id)
    removed = unit(diff, "step execute #2 [transit]")
    assert removed.status == "removed"
    assert removed.b_positions is None
    assert unit(diff, "step synthesize #1").status == "changed"
    assert diff.delta.tool_calls == -1


def test_changed_tool_arguments_show_the_json_path(book: Ledger) -> None:
    """The executor asks for another date: the tool item names /date and its merge patch."""
    later = {**WEATHER, "date": "2026-06-14"}
    a = pipeline(book)
    b = pipeline(book, calls=[("weather", later), ("transit", ROUTE)])
    diff = diff_runs(book, a.run_id, b.run_id)
    weather = unit(diff, "step execute #1 [weather]")
    tool = next(i for i in weather.items if i.label == "tool weather #1")
    assert "arguments" in tool.fields
    assert tool.arguments.patch == {"date": "2026-06-14"}
    assert [(p.path, p.a, p.b) for p in tool.arguments.paths] == [
        ("/date", "2026-06-13", "2026-06-14")
    ]
    assert "result" in tool.fields
    assert diff.first_divergence is not None
    assert diff.first_divergence.unit == "step execute #1 [weather]"


def test_the_world_state_diff_is_a_merge_patch_from_a_to_b(book: Ledger) -> None:
    """apply_patch(final state of a, diff.world.patch) is the final state of b."""
    a = pipeline(book)
    b = pipeline(book, THREE_STEPS, answer="Sunny, by tram.")
    diff = diff_runs(book, a.run_id, b.run_id)
    assert diff.world is not None
    assert diff.world.representable
    assert apply_patch(a.world_state, diff.world.patch) == b.world_state
    paths = {p.path for p in diff.world.paths}
    assert "/results/step-4" in paths


def test_per_step_world_state_is_reported_where_deltas_differ(book: Ledger) -> None:
    """A changed tool result changes that step's delta; the step carries the world change."""
    later = {**WEATHER, "date": "2026-06-14"}
    a = pipeline(book)
    b = pipeline(book, calls=[("weather", later), ("transit", ROUTE)])
    weather = unit(diff_runs(book, a.run_id, b.run_id), "step execute #1 [weather]")
    assert weather.world is not None
    world_a = fold_patches(_patches(book, a.run_id, upto=weather.a_positions[1]))
    world_b = fold_patches(_patches(book, b.run_id, upto=weather.b_positions[1]))
    assert apply_patch(world_a, weather.world.patch) == world_b


def _patches(ledger: Ledger, run_id: str, upto: int) -> list[Any]:
    return [
        e.payload["patch"] for e in ledger.events(run_id, upto=upto) if e.kind == "DeltaApplied"
    ]


def test_a_changed_answer_is_a_unified_diff(book: Ledger) -> None:
    """Only the synthesizer's answer differs: answer diff, and the synthesize step first."""
    a, b = pipeline(book), pipeline(book, answer="Rain; take the bus.")
    diff = diff_runs(book, a.run_id, b.run_id)
    assert diff.answer is not None
    assert (diff.answer.a, diff.answer.b) == (ANSWER, "Rain; take the bus.")
    assert f"-{ANSWER}" in diff.answer.diff
    assert "+Rain; take the bus." in diff.answer.diff
    assert diff.first_divergence is not None
    assert diff.first_divergence.unit == "step synthesize #1"
    assert diff.world is None


def test_totals_count_each_run_and_the_delta(book: Ledger) -> None:
    """Totals agree with the recorded events; the delta is b minus a."""
    a, b = pipeline(book), pipeline(book, THREE_STEPS)
    diff = diff_runs(book, a.run_id, b.run_id)
    for run_id, totals in ((a.run_id, diff.totals_a), (b.run_id, diff.totals_b)):
        events = book.events(run_id)
        calls = [e.payload for e in events if e.kind == "ModelCalled"]
        assert totals.events == len(events)
        assert totals.model_calls == len(calls)
        assert totals.tool_calls == sum(e.kind == "ToolCalled" for e in events)
        assert totals.input_tokens == sum(c["usage"]["input_tokens"] for c in calls)
        assert totals.output_tokens == sum(c["usage"]["output_tokens"] for c in calls)
    assert diff.delta.model_calls == 1
    assert diff.delta.tool_calls == 1
    assert diff.delta.events == diff.totals_b.events - diff.totals_a.events
    assert diff.delta.input_tokens == diff.totals_b.input_tokens - diff.totals_a.input_tokens


def test_a_tool_error_is_a_result_change_and_counted(book: Ledger) -> None:
    """A transit call with a bad place fails: result change (ok false) and one more tool error."""
    a = pipeline(book)
    b = pipeline(book, calls=[("weather", WEATHER), ("transit", {"origin": "Nowhere"})])
    diff = diff_runs(book, a.run_id, b.run_id)
    transit = unit(diff, "step execute #2 [transit]")
    tool = next(i for i in transit.items if i.label == "tool transit #1")
    assert {"arguments", "result"} <= set(tool.fields)
    assert any(p.path == "/ok" and p.b is False for p in tool.result.paths)
    assert diff.delta.tool_errors == 1
    assert transit.step_status == ("ok", "failed")


def test_a_new_prompt_version_shows_config_prompt_and_message_diffs(book: Ledger) -> None:
    """Planner prompt v2: config names the version, the planner call its prompt and messages."""
    a = pipeline(book)
    b = pipeline(book, config=AgentConfig(prompt_versions={"planner": "v2"}))
    diff = diff_runs(book, a.run_id, b.run_id)
    assert diff.config is not None
    assert ("/prompts/planner/version", "v1", "v2") in [
        (p.path, p.a, p.b) for p in diff.config.paths
    ]
    first = diff.first_divergence
    assert first is not None
    assert first.item == "model planner #1"
    assert {"prompt", "messages"} <= set(first.what)
    planner = unit(diff, "step plan #1").items[0]
    assert planner.prompt is not None
    assert (planner.prompt.a["version"], planner.prompt.b["version"]) == ("v1", "v2")
    assert planner.prompt.text_diff is not None
    assert planner.prompt.text_diff.startswith("--- a prompt pipeline.planner v1")
    assert planner.shared_messages == 0
    assert planner.messages is not None
    assert "response" not in planner.fields


def test_a_run_served_from_the_record_diffs_as_identical(book: Ledger) -> None:
    """served_from, zero usage and cost, lineage and latency are not differences."""
    a = _recorded(book, served=False)
    b = _recorded(book, served=True, parent=a)
    diff = diff_runs(book, a, b)
    assert diff.identical, render_diff(diff)
    assert diff.b.relation == "rerun"
    assert diff.delta.input_tokens == -10
    assert diff.delta.cost_usd == pytest.approx(-0.25)


def test_a_rerun_without_overrides_diffs_as_identical(book: Ledger) -> None:
    """Every call served from the record: identical, and the delta shows the tokens saved."""
    a = pipeline(book)
    again = rerun(book, a.run_id)
    assert again.live_model_calls == 0
    diff = diff_runs(book, a.run_id, again.run_id)
    assert diff.identical, render_diff(diff, only_changes=True)
    assert diff.totals_b.tokens == 0
    assert diff.delta.tokens == -diff.totals_a.tokens


def test_a_rerun_with_a_new_planner_prompt_names_the_planner_step_first(book: Ledger) -> None:
    """Planner v2 with a live (scripted) model: the diff starts at the planner's call."""
    a = pipeline(book)
    live = pipeline_script(plan=TWO_STEPS, calls=[], answer=ANSWER)
    again = rerun(book, a.run_id, Overrides(prompt_versions={"planner": "v2"}), models=live)
    diff = diff_runs(book, a.run_id, again.run_id)
    assert diff.first_divergence is not None
    assert (diff.first_divergence.unit, diff.first_divergence.item) == (
        "step plan #1",
        "model planner #1",
    )
    assert diff.answer is None


def _recorded(ledger: Ledger, *, served: bool, parent: str | None = None) -> str:
    """A small run through the public recording API; `served` marks calls served from record."""
    marker = f"{parent}:5" if served else None
    with ledger.record_run(
        "custom",
        {"question": "hi"},
        run_id=None,
        parent_run_id=parent,
        relation="rerun" if parent else None,
        tags=["x"] if parent else [],
    ) as run:
        with run.step("answer") as step:
            run.model_call(
                provider="p",
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                response={"role": "assistant", "content": "hello"},
                usage={} if served else {"input_tokens": 10, "output_tokens": 2},
                cost_usd=0.0 if served else 0.25,
                latency_ms=0.0 if served else 812.5,
                attempts=[] if served else [Attempt(number=1, status_code=200, latency_ms=812.5)],
                served_from=marker,
                step_id=step,
                actor="agent",
            )
            run.tool("lookup", {"q": "hi"}, result={"n": 1}, latency_ms=3.0, step_id=step)
            run.delta({"seen": {"hi": True}}, step_id=step)
        run.answer("hello")
    return run.run_id


def test_a_growing_conversation_diffs_only_its_differing_tail(book: Ledger) -> None:
    """A changed tool result: the next call's messages diff starts after the shared ones."""
    a = run_agent(
        book,
        "tools",
        "What is 6 times 7?",
        models=tool_agent_script(turns=[("calculator", {"expression": "6*7"}), "42."]),
    )
    b = run_agent(
        book,
        "tools",
        "What is 6 times 7?",
        models=tool_agent_script(turns=[("calculator", {"expression": "6*8"}), "42."]),
    )
    diff = diff_runs(book, a.run_id, b.run_id)
    second = diff.units[2]
    call = second.items[0]
    assert call.label == "model agent #1"
    assert call.fields == ("messages",)
    assert call.shared_messages == 2
    assert call.messages is not None
    assert '-  -> calculator({"expression": "6*7"})' in call.messages
    assert diff.first_divergence is not None
    assert diff.first_divergence.unit.startswith("step agent:turn #1")


def test_text_report_shows_unchanged_steps_unless_only_changes(book: Ledger) -> None:
    """Full report lists '=' steps and every total; --only-changes leaves them out."""
    a, b = pipeline(book), pipeline(book, THREE_STEPS)
    diff = diff_runs(book, a.run_id, b.run_id)
    full = render_diff(diff)
    short = render_diff(diff, only_changes=True)
    assert full.splitlines()[2].startswith("first divergence: step plan #1 > model planner #1")
    assert "  = step execute #1 [weather]" in full
    assert "  = step execute #1 [weather]" not in short
    assert "unchanged step(s) not shown" in short
    assert "  + step execute #2 [geocode]" in short
    assert "guardrail trips" in full
    assert "guardrail trips" not in short
    assert "\x1b[" not in full
    assert "\x1b[31m" in render_diff(diff, color=True)


def test_identical_runs_render_no_differences(book: Ledger) -> None:
    """The report of identical runs says so."""
    a, b = pipeline(book), pipeline(book)
    text = render_diff(diff_runs(book, a.run_id, b.run_id), only_changes=True)
    assert "no differences" in text
    assert "first divergence" not in text


def test_json_form_round_trips_through_json(book: Ledger) -> None:
    """to_json() is plain JSON with the divergence, units and totals."""
    a, b = pipeline(book), pipeline(book, THREE_STEPS)
    body = json.loads(json.dumps(diff_runs(book, a.run_id, b.run_id).to_json()))
    assert body["identical"] is False
    assert body["first_divergence"]["item"] == "model planner #1"
    assert body["totals"]["delta"]["tool_calls"] == 1
    assert any(u["status"] == "added" for u in body["units"])


def test_an_unknown_run_is_named(book: Ledger) -> None:
    """Diffing against a run the ledger lacks raises UnknownRunError."""
    a = pipeline(book)
    with pytest.raises(UnknownRunError):
        diff_runs(book, a.run_id, "00000000-0000-0000-0000-000000000000")


def test_old_schema_payloads_are_read_upcast() -> None:
    """A ToolReturned v1 (latency_s) is read as v2 (latency_ms)."""
    record = RecordedEvent(
        "r", 3, "ToolReturned", 1, "t", "e", "0" * 64, "0" * 64,
        {"call_id": "tool-1", "ok": True, "type": "x", "latency_s": 0.5},
    )  # fmt: skip
    assert payload_of(record)["latency_ms"] == 500.0


def test_models_that_fail_differ_from_models_that_answer(book: Ledger) -> None:
    """A planner that answers nothing usable: the plan step fails and the run falls back."""
    a = pipeline(book)
    broken = pipeline_script(plan=["not json", "still not"], calls=[], answer=ANSWER)
    b = run_agent(book, "pipeline", QUESTION, models=dict[str, ScriptedModel](broken))
    diff = diff_runs(book, a.run_id, b.run_id)
    assert diff.status == ("completed/answered", "completed/fallback")
    assert unit(diff, "step plan #1").step_status == ("ok", "failed")
