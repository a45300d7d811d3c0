"""Cohort diff: two selections of runs (say prompt v1 vs v2) compared input by input.

Owns selecting runs (explicit ids, or by tag, agent, status, start time and prompt version read
from each RunStarted), pairing the two selections by identical input (canonical JSON of the
recorded input; several runs with one input pair in order of start time), diffing each pair
with `diff_runs`, and the per-input outcome changes and aggregate deltas. Must not write to the
ledger; its text form is `render_cohort`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentledger.ledger import Ledger, RunQuery, canonical_json
from agentledger.replay._diff import diff_runs
from agentledger.replay._diff_model import Totals
from agentledger.replay._diff_render import TextWriter
from agentledger.replay.errors import ReplayUsageError

__all__ = [
    "CohortDiff",
    "CohortSide",
    "PairOutcome",
    "RunSelection",
    "UnpairedRun",
    "cohort_diff",
    "render_cohort",
    "select_runs",
]

_PREVIEW = 60


@dataclass(frozen=True)
class RunSelection:
    """Which runs form one side of a cohort diff.

    Explicit `run_ids`, or every run matching all the filters given: `tag`, `agent`, `status`,
    start time window (`since`/`until`, RFC 3339) and `prompt` (``(name, version)``, where the
    name is a role such as ``planner`` or a prompt name such as ``pipeline.planner``).
    """

    run_ids: tuple[str, ...] = ()
    tag: str | None = None
    agent: str | None = None
    status: str | None = None
    since: str | None = None
    until: str | None = None
    prompt: tuple[str, str] | None = None

    def describe(self) -> str:
        """A short description: ``tag=v1 prompt=planner@v2``."""
        if self.run_ids:
            return f"{len(self.run_ids)} run id(s)"
        parts = [
            f"{name}={value}"
            for name, value in (
                ("tag", self.tag),
                ("agent", self.agent),
                ("status", self.status),
                ("since", self.since),
                ("until", self.until),
            )
            if value is not None
        ]
        if self.prompt is not None:
            parts.append(f"prompt={self.prompt[0]}@{self.prompt[1]}")
        return " ".join(parts)

    @property
    def empty(self) -> bool:
        """True when the selection names no run and no filter."""
        filters = (self.tag, self.agent, self.status, self.since, self.until, self.prompt)
        return not self.run_ids and all(value is None for value in filters)


@dataclass(frozen=True)
class _Started:
    run_id: str
    key: bytes
    preview: str
    timestamp: str


def select_runs(ledger: Ledger, selection: RunSelection | Sequence[str]) -> list[str]:
    """The run ids a selection picks, oldest first; a list of ids is taken as given."""
    if not isinstance(selection, RunSelection):
        return [ledger.run(run_id).run_id for run_id in selection]
    if selection.run_ids:
        return [ledger.run(run_id).run_id for run_id in selection.run_ids]
    if selection.empty:
        raise ReplayUsageError("a run selection needs run ids or at least one filter")
    query = RunQuery(
        status=selection.status,
        agent=selection.agent,
        tag=selection.tag,
        since=selection.since,
        until=selection.until,
    )
    infos = sorted(ledger.runs(query), key=lambda info: (info.started_at, info.run_id))
    ids = [info.run_id for info in infos]
    if selection.prompt is not None:
        ids = [rid for rid in ids if _uses_prompt(ledger, rid, selection.prompt)]
    return ids


def _uses_prompt(ledger: Ledger, run_id: str, prompt: tuple[str, str]) -> bool:
    name, version = prompt
    started = ledger.events(run_id, upto=1)[0].payload
    prompts = (started.get("config") or {}).get("prompts") or {}
    return any(
        (role == name or ref.get("name") == name) and ref.get("version") == version
        for role, ref in prompts.items()
    )


def _started(ledger: Ledger, run_id: str) -> _Started:
    first = ledger.events(run_id, upto=1)[0]
    payload = first.payload
    value = payload.get("input")
    key = canonical_json(value) if payload.get("input_ref") is None else payload["input_ref"]
    key_bytes = key if isinstance(key, bytes) else str(key).encode()
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict) and isinstance(value.get("question"), str) and len(value) == 1:
        text = value["question"]
    if payload.get("input_ref") is not None:
        text = f"<input {payload['input_ref'][:19]}>"
    preview = text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "\u2026"
    return _Started(run_id, key_bytes, preview, first.timestamp)


@dataclass(frozen=True)
class PairOutcome:
    """How one input's run in b compares with its run in a."""

    input: str
    a_run: str
    b_run: str
    identical: bool
    first_divergence: str | None
    status_a: str
    status_b: str
    answer_changed: bool
    tool_errors_a: int
    tool_errors_b: int
    totals_a: Totals
    totals_b: Totals

    @property
    def status_changed(self) -> bool:
        """Whether the run's final status or outcome changed."""
        return self.status_a != self.status_b


@dataclass(frozen=True)
class UnpairedRun:
    """A run whose input has no partner in the other selection."""

    side: str
    run_id: str
    input: str


@dataclass(frozen=True)
class CohortSide:
    """Aggregates of one side over its paired runs: means and error rates."""

    runs: int
    mean_tokens: float
    mean_cost_usd: float
    mean_latency_ms: float
    tool_error_rate: float
    failed_runs: int
    outcomes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CohortDiff:
    """A cohort diff: per-input outcomes, unpaired runs, aggregates of each side and deltas."""

    a: str
    b: str
    pairs: tuple[PairOutcome, ...]
    unpaired: tuple[UnpairedRun, ...]
    side_a: CohortSide
    side_b: CohortSide

    @property
    def identical(self) -> bool:
        """Every input paired, and every pair identical."""
        return not self.unpaired and all(p.identical for p in self.pairs)

    @property
    def answers_changed(self) -> int:
        """How many inputs got a different answer."""
        return sum(1 for p in self.pairs if p.answer_changed)

    def delta(self) -> dict[str, float]:
        """B minus a for each aggregate figure."""
        names = ("mean_tokens", "mean_cost_usd", "mean_latency_ms", "tool_error_rate")
        out = {n: round(getattr(self.side_b, n) - getattr(self.side_a, n), 9) for n in names}
        out["failed_runs"] = self.side_b.failed_runs - self.side_a.failed_runs
        return out

    def to_json(self) -> dict[str, Any]:
        """The cohort diff as a JSON object."""
        pairs = []
        for pair in self.pairs:
            body = asdict(pair)
            body["totals_a"], body["totals_b"] = pair.totals_a.as_dict(), pair.totals_b.as_dict()
            body["delta"] = pair.totals_b.minus(pair.totals_a).as_dict()
            pairs.append(body)
        return {
            "a": self.a,
            "b": self.b,
            "identical": self.identical,
            "pairs": pairs,
            "unpaired": [asdict(u) for u in self.unpaired],
            "aggregate": {
                "a": asdict(self.side_a),
                "b": asdict(self.side_b),
                "delta": self.delta(),
                "answers_changed": self.answers_changed,
                "identical_pairs": sum(1 for p in self.pairs if p.identical),
                "status_changed": sum(1 for p in self.pairs if p.status_changed),
            },
        }


def _side_of(selection: RunSelection | Sequence[str]) -> str:
    if isinstance(selection, RunSelection):
        return selection.describe()
    return f"{len(selection)} run id(s)"


def cohort_diff(
    ledger: Ledger,
    runs_a: RunSelection | Sequence[str],
    runs_b: RunSelection | Sequence[str],
) -> CohortDiff:
    """Diff two selections of runs input by input (runs with the same recorded input pair up).

    Several runs with one input pair in order of start time; the rest are reported unpaired.
    Raises `ReplayUsageError` for a selection with no criteria or one that selects no run.
    """
    ids_a, ids_b = select_runs(ledger, runs_a), select_runs(ledger, runs_b)
    for name, ids, sel in (("a", ids_a, runs_a), ("b", ids_b, runs_b)):
        if not ids:
            raise ReplayUsageError(f"selection {name} ({_side_of(sel)}) matches no run")
    groups_a = _grouped([_started(ledger, rid) for rid in ids_a])
    groups_b = _grouped([_started(ledger, rid) for rid in ids_b])
    pairs: list[PairOutcome] = []
    unpaired: list[UnpairedRun] = []
    for key in [*groups_a, *(k for k in groups_b if k not in groups_a)]:
        left, right = groups_a.get(key, []), groups_b.get(key, [])
        for run_a, run_b in zip(left, right, strict=False):
            pairs.append(_pair(ledger, run_a, run_b))
        unpaired += [UnpairedRun("a", s.run_id, s.preview) for s in left[len(right) :]]
        unpaired += [UnpairedRun("b", s.run_id, s.preview) for s in right[len(left) :]]
    return CohortDiff(
        a=_side_of(runs_a),
        b=_side_of(runs_b),
        pairs=tuple(pairs),
        unpaired=tuple(unpaired),
        side_a=_aggregate([p.totals_a for p in pairs], [p.status_a for p in pairs]),
        side_b=_aggregate([p.totals_b for p in pairs], [p.status_b for p in pairs]),
    )


def _grouped(started: list[_Started]) -> dict[bytes, list[_Started]]:
    groups: dict[bytes, list[_Started]] = {}
    for item in sorted(started, key=lambda s: (s.timestamp, s.run_id)):
        groups.setdefault(item.key, []).append(item)
    return groups


def _pair(ledger: Ledger, run_a: _Started, run_b: _Started) -> PairOutcome:
    diff = diff_runs(ledger, run_a.run_id, run_b.run_id)
    status_a = f"{diff.a.status}/{diff.a.outcome}" if diff.a.outcome else diff.a.status
    status_b = f"{diff.b.status}/{diff.b.outcome}" if diff.b.outcome else diff.b.status
    first = diff.first_divergence
    return PairOutcome(
        input=run_a.preview,
        a_run=run_a.run_id,
        b_run=run_b.run_id,
        identical=diff.identical,
        first_divergence=None if first is None else first.describe(),
        status_a=status_a,
        status_b=status_b,
        answer_changed=diff.answer is not None,
        tool_errors_a=diff.totals_a.tool_errors,
        tool_errors_b=diff.totals_b.tool_errors,
        totals_a=diff.totals_a,
        totals_b=diff.totals_b,
    )


def _aggregate(totals: list[Totals], statuses: list[str]) -> CohortSide:
    runs = len(totals)
    if not runs:
        return CohortSide(0, 0.0, 0.0, 0.0, 0.0, 0)
    tool_calls = sum(t.tool_calls for t in totals)
    outcomes: dict[str, int] = {}
    for status in statuses:
        outcomes[status] = outcomes.get(status, 0) + 1
    return CohortSide(
        runs=runs,
        mean_tokens=round(sum(t.tokens for t in totals) / runs, 3),
        mean_cost_usd=round(sum(t.cost_usd for t in totals) / runs, 9),
        mean_latency_ms=round(sum(t.latency_ms for t in totals) / runs, 3),
        tool_error_rate=round(sum(t.tool_errors for t in totals) / tool_calls, 6)
        if tool_calls
        else 0.0,
        failed_runs=sum(1 for s in statuses if s.startswith("failed")),
        outcomes=dict(sorted(outcomes.items())),
    )


def render_cohort(diff: CohortDiff, *, color: bool = False, only_changes: bool = False) -> str:
    """The cohort diff as terminal text: one line per input, unpaired runs, aggregates."""
    out = TextWriter(color)
    out.line(f"--- a {diff.a}", "bold")
    out.line(f"+++ b {diff.b}", "bold")
    out.line(f"{len(diff.pairs)} input(s) paired, {len(diff.unpaired)} run(s) unpaired")
    hidden = 0
    for pair in diff.pairs:
        if only_changes and pair.identical:
            hidden += 1
            continue
        mark = out.paint("=", "dim") if pair.identical else out.paint("~", "yellow")
        delta = pair.totals_b.minus(pair.totals_a)
        out.line(f"  {mark} {pair.input}  a:{pair.a_run[:8]} b:{pair.b_run[:8]}")
        if pair.identical:
            continue
        status = f"{pair.status_a} -> {pair.status_b}" if pair.status_changed else pair.status_a
        out.line(
            f"      status {status}; answer {'changed' if pair.answer_changed else 'same'}; "
            f"tool errors {pair.tool_errors_a} -> {pair.tool_errors_b}; "
            f"tokens {delta.tokens:+,}; cost {delta.cost_usd:+.6f} USD"
        )
        out.line(f"      first divergence: {pair.first_divergence}", "dim")
    if hidden:
        out.line(f"  ({hidden} identical input(s) not shown)", "dim")
    for run in diff.unpaired:
        mark = out.paint("-" if run.side == "a" else "+", "red" if run.side == "a" else "green")
        out.line(f"  {mark} unpaired in {run.side}: {run.input}  {run.run_id[:8]}")
    _aggregates(out, diff)
    return "\n".join(out.lines)


def _aggregates(out: TextWriter, diff: CohortDiff) -> None:
    a, b, delta = diff.side_a, diff.side_b, diff.delta()
    out.line(f"{'aggregate (paired runs)':26}{'a':>14}{'b':>14}{'delta':>14}", "bold")
    rows = (
        ("mean tokens", "mean_tokens", "{:,.1f}"),
        ("mean cost (USD)", "mean_cost_usd", "{:.6f}"),
        ("mean latency (ms)", "mean_latency_ms", "{:,.1f}"),
        ("tool error rate", "tool_error_rate", "{:.3f}"),
        ("failed runs", "failed_runs", "{:,}"),
    )
    for label, name, fmt in rows:
        moved = delta[name]
        change = ("+" if moved >= 0 else "") + fmt.format(moved)
        out.line(
            f"{label:26}{fmt.format(getattr(a, name)):>14}{fmt.format(getattr(b, name)):>14}"
            f"{change:>14}"
        )
    changed = diff.answers_changed
    identical = sum(1 for p in diff.pairs if p.identical)
    out.line(
        f"answers changed: {changed} of {len(diff.pairs)}; identical runs: {identical} of "
        f"{len(diff.pairs)}"
    )
