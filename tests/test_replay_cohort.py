"""Cohort diffs: two selections of runs paired by input, per-input outcomes and aggregates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentledger.agents import AgentConfig, AgentResult, run_agent
from agentledger.agents.testing import memory_ledger, pipeline_script
from agentledger.ledger import Ledger
from agentledger.replay import ReplayUsageError, RunSelection, cohort_diff, render_cohort

WEATHER = {"place": "Harbour Front", "date": "2026-06-13"}
PLAN: dict[str, Any] = {"steps": [{"goal": "weather", "tool": "weather", "args": WEATHER}]}
BAD_PLAN: dict[str, Any] = {
    "steps": [{"goal": "route", "tool": "transit", "args": {"origin": "Nowhere"}}]
}
INPUTS = ("Weather at the harbour?", "Is it sunny at the harbour?", "Harbour forecast, please.")


@pytest.fixture
def book() -> Iterator[Ledger]:
    """A deterministic in-memory ledger."""
    opened = memory_ledger()
    yield opened
    opened.close()


def record(
    ledger: Ledger,
    question: str,
    tag: str,
    *,
    answer: str = "Sunny.",
    plan: dict[str, Any] = PLAN,
    planner: str = "v1",
) -> AgentResult:
    """One tagged pipeline run whose executor calls the plan's one tool."""
    step = plan["steps"][0]
    models = pipeline_script(plan=plan, calls=[(step["tool"], step["args"])], answer=answer)
    config = AgentConfig(prompt_versions={"planner": planner})
    return run_agent(ledger, "pipeline", question, models=models, config=config, tags=[tag])


def two_cohorts(ledger: Ledger) -> None:
    """Three inputs under v1 and v2: v2 answers the second differently, the third fails a tool."""
    for question in INPUTS:
        record(ledger, question, "v1")
    record(ledger, INPUTS[0], "v2", planner="v2")
    record(ledger, INPUTS[1], "v2", planner="v2", answer="Cloudy later.")
    record(ledger, INPUTS[2], "v2", planner="v2", plan=BAD_PLAN)


def test_three_inputs_pair_by_input_and_report_outcomes(book: Ledger) -> None:
    """Each input pairs with its run; answer changes and tool errors are per input."""
    two_cohorts(book)
    diff = cohort_diff(book, RunSelection(tag="v1"), RunSelection(tag="v2"))
    assert [p.input for p in diff.pairs] == list(INPUTS)
    assert not diff.unpaired
    assert [p.answer_changed for p in diff.pairs] == [False, True, False]
    assert [p.tool_errors_b - p.tool_errors_a for p in diff.pairs] == [0, 0, 1]
    assert all(not p.identical for p in diff.pairs)
    assert all(p.first_divergence and "planner" in p.first_divergence for p in diff.pairs)
    assert diff.answers_changed == 1
    assert not diff.identical


def test_aggregates_are_means_over_paired_runs(book: Ledger) -> None:
    """Mean tokens and tool error rate per side, and b minus a."""
    two_cohorts(book)
    diff = cohort_diff(book, RunSelection(tag="v1"), RunSelection(tag="v2"))
    tokens_a = [p.totals_a.tokens for p in diff.pairs]
    tokens_b = [p.totals_b.tokens for p in diff.pairs]
    assert diff.side_a.runs == diff.side_b.runs == 3
    assert diff.side_a.mean_tokens == pytest.approx(sum(tokens_a) / 3, abs=1e-3)
    assert diff.side_b.mean_tokens == pytest.approx(sum(tokens_b) / 3, abs=1e-3)
    assert diff.side_a.tool_error_rate == 0.0
    assert diff.side_b.tool_error_rate == pytest.approx(1 / 3, abs=1e-6)
    delta = diff.delta()
    assert delta["tool_error_rate"] == pytest.approx(1 / 3, abs=1e-6)
    assert delta["mean_tokens"] == pytest.approx((sum(tokens_b) - sum(tokens_a)) / 3, abs=1e-3)


def test_selection_by_prompt_version(book: Ledger) -> None:
    """--prompt planner=v2 (role) and pipeline.planner=v2 (prompt name) pick the v2 runs."""
    two_cohorts(book)
    by_role = cohort_diff(
        book, RunSelection(prompt=("planner", "v1")), RunSelection(prompt=("planner", "v2"))
    )
    by_name = cohort_diff(
        book,
        RunSelection(prompt=("pipeline.planner", "v1")),
        RunSelection(prompt=("pipeline.planner", "v2")),
    )
    assert [p.b_run for p in by_role.pairs] == [p.b_run for p in by_name.pairs]
    assert len(by_role.pairs) == 3


def test_unpaired_inputs_and_repeated_inputs(book: Ledger) -> None:
    """An input only b has is unpaired; two runs of one input pair in start order."""
    first = record(book, INPUTS[0], "a")
    second = record(book, INPUTS[0], "a")
    again_1 = record(book, INPUTS[0], "b")
    again_2 = record(book, INPUTS[0], "b")
    extra = record(book, INPUTS[1], "b")
    diff = cohort_diff(book, RunSelection(tag="a"), RunSelection(tag="b"))
    assert [(p.a_run, p.b_run) for p in diff.pairs] == [
        (first.run_id, again_1.run_id),
        (second.run_id, again_2.run_id),
    ]
    assert all(p.identical for p in diff.pairs)
    assert [(u.side, u.run_id) for u in diff.unpaired] == [("b", extra.run_id)]
    assert not diff.identical


def test_identical_cohorts_and_lists_of_run_ids(book: Ledger) -> None:
    """Explicit run ids work; the same script on both sides is an identical cohort."""
    a = [record(book, q, "a").run_id for q in INPUTS]
    b = [record(book, q, "b").run_id for q in INPUTS]
    diff = cohort_diff(book, a, b)
    assert diff.identical
    assert diff.delta()["mean_tokens"] == 0


def test_text_and_json_forms(book: Ledger) -> None:
    """The text names each input and the aggregate table; JSON parses with the same facts."""
    two_cohorts(book)
    diff = cohort_diff(book, RunSelection(tag="v1"), RunSelection(tag="v2"))
    text = render_cohort(diff)
    assert "3 input(s) paired, 0 run(s) unpaired" in text
    assert "answer changed" in text
    assert "tool errors 0 -> 1" in text
    assert "answers changed: 1 of 3" in text
    body = json.loads(json.dumps(diff.to_json()))
    assert body["aggregate"]["answers_changed"] == 1
    assert body["pairs"][2]["delta"]["tool_errors"] == 1


def test_bad_selections_are_refused(book: Ledger) -> None:
    """A selection with no criteria, or one matching no run, is a usage error."""
    record(book, INPUTS[0], "v1")
    with pytest.raises(ReplayUsageError, match="needs run ids or at least one filter"):
        cohort_diff(book, RunSelection(), RunSelection(tag="v1"))
    with pytest.raises(ReplayUsageError, match="selection b"):
        cohort_diff(book, RunSelection(tag="v1"), RunSelection(tag="nope"))
