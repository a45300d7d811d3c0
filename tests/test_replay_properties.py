"""Replay properties over generated scripted runs (Hypothesis).

Runs are generated, not hand-picked: pipeline runs (a plan of 1-4 steps over the built-in tools
geocode, weather, find_pois, transit and calculator, with valid arguments drawn from the bundled
city data), REASON/THINK/TOOL runs and tool-agent runs over the same tools. For each:

1. replay of the recorded run is identical, to its last event;
2. a run whose model answers differ in exactly one call (the k-th of a role) diverges at
   exactly that call's ModelCalled position;
3. a copy of the run whose recorded result of one tool call differs diverges after that
   ToolReturned, never at or before it.

What they do not prove: property 3 changes a value the agents pass on (a field outside the
"noise" fields the agents drop from results: opening hours, sources, coordinates...). A change
to a dropped field changes nothing the agent does, so replay rightly finds the copy identical
(replay serves tool results from the record and never re-runs the tool, so it cannot notice a
result the agent ignores). Only scripted models and the offline built-in tools are exercised.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.agents import AgentConfig, run_agent
from agentledger.agents.models import Message, ScriptedModel
from agentledger.agents.testing import ScriptItem, json_answer, memory_ledger, tool_call
from agentledger.ledger import Ledger, RecordedEvent, blob_refs_in
from agentledger.ledger.events import ErrorInfo, RunStarted, event_type, upcast
from agentledger.replay import replay_run

PROPERTY_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
"""Modest on purpose: each example records a run and replays it (tens of milliseconds)."""

CITY: dict[str, Any] = json.loads(
    resources.files("agentledger.tools").joinpath("city.json").read_text("utf-8")
)
PLACES = sorted(p["name"] for p in CITY["places"]) + sorted(p["id"] for p in CITY["pois"])
CATEGORIES = sorted({p["category"] for p in CITY["pois"]})
MODES = ("walk", "bike", "transit", "drive")
NOISE = frozenset({"opening_hours", "source", "method", "requested", "tags", "lat", "lng"})
"""Result fields the agents leave out of the world state and of what models see."""


# Generated runs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GeneratedRun:
    """An agent, a question, a config and each role's script (answers in order)."""

    agent: str
    question: str
    scripts: dict[str, list[ScriptItem]]
    config: AgentConfig = field(default_factory=AgentConfig)

    def models(self, prefix: str = "scripted") -> dict[str, ScriptedModel]:
        """Fresh scripted models, one per role, named ``<prefix>:<role>``."""
        return {
            role: ScriptedModel([answer(item) for item in items], name=f"{prefix}:{role}")
            for role, items in self.scripts.items()
        }


def answer(item: ScriptItem) -> str | Message:
    """A script item as the answer a ``ScriptedModel`` gives (a mapping as JSON text)."""
    if isinstance(item, str | Message):
        return item
    return json_answer(dict(item))


def changed(item: ScriptItem) -> ScriptItem:
    """A different answer: the same kind of item with one thing added."""
    if isinstance(item, str):
        return item + " (changed)"
    if isinstance(item, Message):
        return item.model_copy(update={"content": item.content + " (changed)"})
    return {**item, "changed": True}


places = st.sampled_from(PLACES)


def _dates() -> st.SearchStrategy[str]:
    return st.dates(dt.date(2026, 1, 1), dt.date(2027, 12, 31)).map(dt.date.isoformat)


def _find_pois() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"near": places},
        optional={"category": st.sampled_from(CATEGORIES), "limit": st.integers(1, 10)},
    )


def _expression() -> st.SearchStrategy[str]:
    safe = st.sampled_from(["+", "-", "*"])
    dividing = st.sampled_from(["//", "%"])
    left = st.integers(0, 999)
    return st.one_of(
        st.tuples(left, safe, st.integers(0, 999)),
        st.tuples(left, dividing, st.integers(1, 999)),
    ).map(lambda t: f"{t[0]} {t[1]} {t[2]}")


tool_calls: st.SearchStrategy[tuple[str, dict[str, Any]]] = st.one_of(
    st.fixed_dictionaries({"place": places}).map(lambda a: ("geocode", a)),
    st.fixed_dictionaries({"place": places, "date": _dates()}).map(lambda a: ("weather", a)),
    _find_pois().map(lambda a: ("find_pois", a)),
    st.tuples(st.lists(places, min_size=2, max_size=2, unique=True), st.sampled_from(MODES)).map(
        lambda t: ("transit", {"origin": t[0][0], "destination": t[0][1], "mode": t[1]})
    ),
    st.fixed_dictionaries({"expression": _expression()}).map(lambda a: ("calculator", a)),
)
final_answers = st.sampled_from(["Done.", "Here is what I found.", "All set, see above."])


@st.composite
def pipeline_runs(draw: st.DrawFn) -> GeneratedRun:
    """A pipeline run: a plan of 1-4 tool steps, the executor calling each, an answer."""
    steps = draw(st.lists(tool_calls, min_size=1, max_size=4))
    plan = {
        "steps": [
            {"goal": f"step {n}: {tool}", "tool": tool, "args": args}
            for n, (tool, args) in enumerate(steps, 1)
        ],
        "needs_clarification": None,
    }
    return GeneratedRun(
        "pipeline",
        "Plan my afternoon in Vellmar.",
        {
            "planner": [plan],
            "executor": [tool_call(tool, args) for tool, args in steps],
            "synthesizer": [draw(final_answers)],
        },
    )


@st.composite
def reasoning_runs(draw: st.DrawFn) -> GeneratedRun:
    """A REASON/THINK/TOOL run: a plan, 0-3 tool choices, "ready", an answer."""
    steps = draw(st.lists(tool_calls, max_size=3))
    choices: list[ScriptItem] = [{"tool": tool, "args": args} for tool, args in steps]
    return GeneratedRun(
        "reasoning",
        "What should I know about Vellmar today?",
        {
            "reasoner": [{"plan": ["TOOL"] * len(steps) + ["ANSWER"]}, *choices, {"tool": ""}],
            "thinker": [{"tool": ""}] * len(steps),  # no repair, should a tool fail
            "synthesizer": [draw(final_answers)],
        },
        AgentConfig(seed=draw(st.integers(0, 99))),
    )


@st.composite
def tool_agent_runs(draw: st.DrawFn) -> GeneratedRun:
    """A tool-agent run: 0-3 turns each calling one tool, then a final text."""
    steps = draw(st.lists(tool_calls, max_size=3))
    turns: list[ScriptItem] = [tool_call(tool, args) for tool, args in steps]
    return GeneratedRun(
        "tools", "Help me around Vellmar.", {"agent": [*turns, draw(final_answers)]}
    )


scripted_runs = st.one_of(pipeline_runs(), reasoning_runs(), tool_agent_runs())


def record(run: GeneratedRun) -> tuple[Ledger, str]:
    """Record ``run`` in a fresh deterministic memory ledger."""
    ledger = memory_ledger("properties")
    result = run_agent(ledger, run.agent, run.question, models=run.models(), config=run.config)
    return ledger, result.run_id


# Copying a run with one tool result changed --------------------------------------------------


def leaf_paths(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Paths of the scalar leaves of ``value`` the agents pass on (noise fields left out)."""
    if isinstance(value, dict):
        return [
            found
            for key in sorted(value)
            if key not in NOISE
            for found in leaf_paths(value[key], (*path, key))
        ]
    if isinstance(value, list):
        return [found for n, item in enumerate(value) for found in leaf_paths(item, (*path, n))]
    return [path]


def different(value: Any) -> Any:
    """A JSON value that differs from ``value``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "~"
    return "was null"


def with_leaf_changed(data: Any, path: Sequence[str | int]) -> Any:
    """A copy of ``data`` with the leaf at ``path`` changed (the root for an empty path)."""
    if not path:
        return different(data)
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = different(node[path[-1]])
    return out


def copy_blobs(source: Ledger, target: Ledger, events: Sequence[RecordedEvent]) -> None:
    """Put every blob the events refer to (directly or through other blobs) into ``target``."""
    seen: set[str] = set()
    frontier = [ref for e in events for ref in blob_refs_in(e.payload)]
    while frontier:
        wanted = [ref for ref in dict.fromkeys(frontier) if ref not in seen]
        seen.update(wanted)
        found = source.blobs(wanted)
        target.put_blobs(found.values())
        frontier = [ref for value in found.values() for ref in blob_refs_in(value)]


def copy_with_result(source: Ledger, run_id: str, position: int, data: Any) -> tuple[Ledger, str]:
    """Re-record ``run_id`` in a fresh ledger with the ToolReturned at ``position`` changed.

    Every event is rebuilt from its payload and recorded through ``RunRecorder.record``; the
    one at ``position`` carries ``data`` instead (the chain is recomputed, so the copy verifies).
    """
    events = source.events(run_id)
    target = memory_ledger("copy")
    copy_blobs(source, target, events)
    started = RunStarted.model_validate(upcast("RunStarted", 1, events[0].payload))
    value = started.input if started.input_ref is None else source.blob(started.input_ref)
    recorder = target.record_run(
        started.agent, input=value, config=started.config, tags=started.tags
    )
    for event in events[1:]:
        payload = upcast(event.kind, event.version, event.payload)
        if event.position == position:
            payload = {**payload, "data": data, "data_ref": None}
        if event.kind == "RunCompleted":
            recorder.complete(payload.get("outcome", "answered"))
        elif event.kind == "RunFailed":
            recorder.fail(ErrorInfo.model_validate(payload["error"]))
        else:
            recorder.record(event_type(event.kind).model_validate(payload))
    return target, recorder.run_id


def result_data(ledger: Ledger, event: RecordedEvent) -> Any:
    """The data a ToolReturned carries (inline or in its blob)."""
    ref = event.payload.get("data_ref")
    return ledger.blob(ref) if ref else event.payload.get("data")


# Properties -----------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(run=scripted_runs)
def test_replay_of_a_generated_run_is_identical(run: GeneratedRun) -> None:
    """Whatever the plan, tools and answers, replay re-derives every recorded event."""
    ledger, run_id = record(run)
    result = replay_run(ledger, run_id)
    assert result.identical
    assert result.finished
    assert result.events == len(ledger.events(run_id))


@PROPERTY_SETTINGS
@given(run=scripted_runs, data=st.data())
def test_one_changed_model_answer_diverges_at_exactly_that_call(
    run: GeneratedRun, data: st.DataObject
) -> None:
    """Replaying with a live model whose k-th answer differs diverges at that ModelCalled.

    The stand-in for the role answers every call of that role (its earlier answers are the
    recorded ones, so they must match); the other roles answer from the record.
    """
    ledger, run_id = record(run)
    events = ledger.events(run_id)
    calls = [e for e in events if e.kind == "ModelCalled"]
    target = data.draw(st.sampled_from(calls), label="model call")
    role = str(target.payload["actor"])
    k = sum(1 for e in calls if e.payload["actor"] == role and e.position < target.position)
    script = list(run.scripts[role])
    script[k] = changed(script[k])
    recorded = RunStarted.model_validate(events[0].payload).config.models[role]
    stand_in = ScriptedModel(
        [answer(item) for item in script], name=f"{recorded.provider}:{recorded.model}"
    )
    result = replay_run(ledger, run_id, models={role: stand_in}, raise_on_divergence=False)
    assert result.divergence is not None
    assert result.divergence.position == target.position
    assert result.divergence.expected_kind == result.divergence.actual_kind == "ModelCalled"
    assert result.events == target.position - 1


@PROPERTY_SETTINGS
@given(run=scripted_runs, data=st.data())
def test_one_changed_tool_result_diverges_after_it_and_never_before(
    run: GeneratedRun, data: st.DataObject
) -> None:
    """A copy of the run whose ToolReturned at p carries other data diverges at a position > p.

    Replay serves tool results from the record, so the copy's changed result is served as
    recorded and ToolReturned at p itself matches; what the agent derives from it next (the
    world-state delta, the next model request) no longer matches the copy's recorded events.
    Everything before p is untouched by construction; the test checks replay agrees.
    """
    ledger, run_id = record(run)
    returned = [
        e
        for e in ledger.events(run_id)
        if e.kind == "ToolReturned" and e.payload["ok"] and leaf_paths(result_data(ledger, e))
    ]
    if not returned:
        return  # a run without tool calls (a generated tool agent may answer at once)
    target = data.draw(st.sampled_from(returned), label="tool result")
    original = result_data(ledger, target)
    path = data.draw(st.sampled_from(leaf_paths(original)), label="changed leaf")
    copy_ledger, copy_id = copy_with_result(
        ledger, run_id, target.position, with_leaf_changed(original, path)
    )
    assert copy_ledger.verify(copy_id).ok
    result = replay_run(copy_ledger, copy_id, raise_on_divergence=False)
    assert result.divergence is not None, f"changing {path} went unnoticed"
    assert result.divergence.position > target.position
    assert result.events >= target.position


def test_an_unchanged_copy_of_a_run_replays_identically() -> None:
    """The copying used above changes nothing by itself (else property 3 would be vacuous)."""
    run = GeneratedRun(
        "pipeline",
        "q",
        {
            "planner": [
                {"steps": [{"goal": "g", "tool": "geocode", "args": {"place": "Old Town"}}]}
            ],
            "executor": [tool_call("geocode", {"place": "Old Town"})],
            "synthesizer": ["Done."],
        },
    )
    ledger, run_id = record(run)
    target = next(e for e in ledger.events(run_id) if e.kind == "ToolReturned")
    copy_ledger, copy_id = copy_with_result(
        ledger, run_id, target.position, result_data(ledger, target)
    )
    assert replay_run(copy_ledger, copy_id).identical
