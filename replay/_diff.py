"""`diff_runs`: a causal diff of two recorded runs.

Owns the diff's procedure: read both runs' events once, cut them into units (`_diff_units`),
align the units by causal keys (LCS on step name + tools, then on step name), pair items inside
each unit by call order, rename b's run-local ids to a's through that alignment, compare the
normalised items (`_diff_compare`), and only then read the blobs the differing items need, in
batches. Also derives the run-level parts: input and configuration changes, the final world
state's merge patch, the answer diff, the status change and totals. Must not write to the
ledger and must not render text (`_diff_render` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentledger.ledger import Ledger
from agentledger.projections import fold_patches
from agentledger.replay._diff_blobs import BlobCache, ConversationTails, conversation_tails
from agentledger.replay._diff_compare import (
    IdMap,
    comparable,
    describe_pair,
    describe_single,
    drop_served,
    json_change,
    refs_wanted,
    resolve,
    served,
    text_diff,
    text_lines,
)
from agentledger.replay._diff_model import (
    AnswerDiff,
    FirstDivergence,
    ItemDiff,
    JsonChange,
    RunDiff,
    RunSide,
    Totals,
    UnitDiff,
)
from agentledger.replay._diff_units import (
    Item,
    Unit,
    align_items,
    align_served,
    align_units,
    build_units,
    payload_of,
)

__all__ = ["diff_runs"]


@dataclass
class _Run:
    """One side of the diff as read: events, units, totals and run-level facts."""

    run_id: str
    started: dict[str, Any]
    units: list[Unit]
    totals: Totals
    deltas: list[tuple[int, dict[str, Any]]]
    status: str = "running"
    outcome: str | None = None
    answer: dict[str, Any] | None = None

    @property
    def side(self) -> RunSide:
        return RunSide(
            run_id=self.run_id,
            agent=str(self.started.get("agent", "")),
            status=self.status,
            outcome=self.outcome,
            tags=tuple(self.started.get("tags", ())),
            parent_run_id=self.started.get("parent_run_id"),
            relation=self.started.get("relation"),
            code_version=(self.started.get("config") or {}).get("code_version"),
        )

    @property
    def final_status(self) -> str:
        return f"{self.status}/{self.outcome}" if self.outcome else self.status


_COUNTS = (
    "events",
    "model_calls",
    "tool_calls",
    "tool_errors",
    "guardrail_trips",
    "input_tokens",
    "output_tokens",
)


def _zeros() -> dict[str, Any]:
    return {**dict.fromkeys(_COUNTS, 0), "cost_usd": 0.0, "latency_ms": 0.0}


@dataclass
class _Counter:
    """Totals accumulated over one pass of a run's events (annotations are not counted)."""

    values: dict[str, Any] = field(default_factory=_zeros)

    def feed(self, kind: str, payload: dict[str, Any]) -> None:
        values = self.values
        values["events"] += 1
        if kind == "ModelCalled":
            usage = payload.get("usage") or {}
            values["model_calls"] += 1
            values["input_tokens"] += usage.get("input_tokens", 0)
            values["output_tokens"] += usage.get("output_tokens", 0)
            values["cost_usd"] += payload.get("cost_usd") or 0.0
            values["latency_ms"] += payload.get("latency_ms", 0.0)
        elif kind == "ToolCalled":
            values["tool_calls"] += 1
        elif kind == "ToolReturned":
            values["latency_ms"] += payload.get("latency_ms", 0.0)
            if not payload.get("ok"):
                values["tool_errors"] += 1
        elif kind == "GuardrailTripped":
            values["guardrail_trips"] += 1

    def totals(self) -> Totals:
        values = dict(self.values)
        values["cost_usd"] = round(float(values["cost_usd"]), 9)
        values["latency_ms"] = round(float(values["latency_ms"]), 6)
        return Totals(**values)


def _read(ledger: Ledger, run_id: str) -> _Run:
    records = ledger.events(run_id)
    counter = _Counter()
    deltas: list[tuple[int, dict[str, Any]]] = []
    run = _Run(run_id, {}, [], Totals(), deltas)
    for record in records:
        kind = record.kind
        if kind == "RunAnnotated":
            continue
        payload = payload_of(record)
        counter.feed(kind, payload)
        if kind == "RunStarted":
            run.started = payload
        elif kind == "DeltaApplied":
            deltas.append((record.position, payload["patch"]))
        elif kind == "SynthesisProduced":
            run.answer = payload
        elif kind == "ClarificationRequested":
            run.answer = {"answer": payload.get("question")}
        elif kind == "RunCompleted":
            run.status, run.outcome = "completed", payload.get("outcome", "answered")
        elif kind == "RunFailed":
            run.status, run.outcome = "failed", (payload.get("error") or {}).get("type")
    run.units = build_units(records)
    run.totals = counter.totals()
    return run


def diff_runs(ledger: Ledger, a: str, b: str) -> RunDiff:
    """Diff run `b` against run `a`, both recorded in `ledger`; see `RunDiff`.

    Steps are aligned causally (step name, tools called, call order), not by time, so a step
    inserted in b shows as added and the steps after it still pair with their counterparts.
    Raises `UnknownRunError` (a `LedgerError`) naming a run id that is not in the ledger.
    """
    run_a, run_b = _read(ledger, a), _read(ledger, b)
    cache = BlobCache(ledger)
    pairs = align_served(run_a.units, run_b.units, a) or align_units(run_a.units, run_b.units)
    ids = IdMap()
    aligned: list[tuple[Unit | None, Unit | None, list[tuple[Item | None, Item | None]]]] = []
    for i, j in pairs:
        unit_a = None if i is None else run_a.units[i]
        unit_b = None if j is None else run_b.units[j]
        items: list[tuple[Item | None, Item | None]] = []
        if unit_a is not None and unit_b is not None:
            ids.add(unit_b.step_id, unit_a.step_id)
            items = align_items(unit_a.items, unit_b.items)
            for item_a, item_b in items:
                if item_a is not None and item_b is not None:
                    ids.add(item_b.call_id, item_a.call_id)
        aligned.append((unit_a, unit_b, items))
    comparison = _Comparison(cache, ids)
    for unit_a, unit_b, items in aligned:
        comparison.collect(unit_a, unit_b, items)
    unit_diffs = comparison.finish(aligned, run_a, run_b)
    return RunDiff(
        a=run_a.side,
        b=run_b.side,
        units=tuple(unit_diffs),
        first_divergence=_first_divergence(unit_diffs),
        totals_a=run_a.totals,
        totals_b=run_b.totals,
        input=_input_change(cache, run_a.started, run_b.started),
        config=_config_change(run_a.started, run_b.started),
        world=_world_change(run_a, run_b),
        answer=_answer_change(cache, run_a.answer, run_b.answer),
        status=None
        if run_a.final_status == run_b.final_status
        else (run_a.final_status, run_b.final_status),
    )


Pending = tuple[Item, Item, Any, Any]


class _Comparison:
    """Compares aligned items in two passes: find what differs, then read blobs and describe."""

    def __init__(self, cache: BlobCache, ids: IdMap) -> None:
        self.cache = cache
        self.ids = ids
        self.pending: dict[int, Pending] = {}
        self.refs: list[str] = []

    def collect(
        self,
        unit_a: Unit | None,
        unit_b: Unit | None,
        items: list[tuple[Item | None, Item | None]],
    ) -> None:
        """Note which item pairs differ, and the refs their descriptions will read."""
        if unit_a is None or unit_b is None:
            only = unit_a or unit_b
            for item in only.items if only is not None else []:
                self.refs += refs_wanted(item)
            return
        for item_a, item_b in items:
            if item_a is None or item_b is None:
                self.refs += refs_wanted(item_a or item_b)  # type: ignore[arg-type]
                continue
            ca, cb = comparable(item_a), comparable(item_b)
            if item_a.kind == "model" and (served(item_a) or served(item_b)):
                ca, cb = drop_served(ca), drop_served(cb)
            if ca != cb:
                cb = self.ids.apply(cb)  # only now: most items hold no run-local ids
            if ca != cb:
                self.pending[id(item_a)] = (item_a, item_b, ca, cb)
                self.refs += refs_wanted(item_a) + refs_wanted(item_b)

    def finish(
        self,
        aligned: list[tuple[Unit | None, Unit | None, list[tuple[Item | None, Item | None]]]],
        run_a: _Run,
        run_b: _Run,
    ) -> list[UnitDiff]:
        """Fetch the blobs, walk the differing conversations, build every `UnitDiff`."""
        self.cache.fetch(self.refs)
        tails = self._tails()
        worlds = _unit_worlds(self, aligned, run_a, run_b)
        out: list[UnitDiff] = []
        for index, (unit_a, unit_b, items) in enumerate(aligned):
            out.append(self._unit(unit_a, unit_b, items, tails, worlds.get(index)))
        return out

    def _tails(self) -> dict[int, ConversationTails]:
        keys: list[int] = []
        heads: list[tuple[str, str]] = []
        counts: list[tuple[int, int]] = []
        for key, (item_a, _item_b, ca, cb) in self.pending.items():
            if item_a.kind == "model" and ca.get("messages_ref") != cb.get("messages_ref"):
                keys.append(key)
                heads.append((ca["messages_ref"], cb["messages_ref"]))
                counts.append((ca.get("message_count", 0), cb.get("message_count", 0)))
        return dict(zip(keys, conversation_tails(self.cache, heads, counts), strict=True))

    def _unit(
        self,
        unit_a: Unit | None,
        unit_b: Unit | None,
        items: list[tuple[Item | None, Item | None]],
        tails: dict[int, ConversationTails],
        world: JsonChange | None,
    ) -> UnitDiff:
        if unit_a is None or unit_b is None:
            only = unit_a or unit_b
            assert only is not None
            side = "a" if unit_a is not None else "b"
            return UnitDiff(
                label=only.label,
                key=only.key,
                status="removed" if side == "a" else "added",
                a_positions=only.positions if side == "a" else None,
                b_positions=only.positions if side == "b" else None,
                items=tuple(describe_single(self.cache, item, side) for item in only.items),
            )
        diffs: list[ItemDiff] = []
        for item_a, item_b in items:
            if item_a is None or item_b is None:
                side = "a" if item_a is not None else "b"
                diffs.append(describe_single(self.cache, item_a or item_b, side))  # type: ignore[arg-type]
            elif id(item_a) in self.pending:
                _, _, ca, cb = self.pending[id(item_a)]
                diffs.append(
                    describe_pair(self.cache, item_a, item_b, ca, cb, tails=tails.get(id(item_a)))
                )
        tools = None if unit_a.tools == unit_b.tools else (unit_a.tools, unit_b.tools)
        status_a, status_b = unit_a.step_status, unit_b.step_status
        return UnitDiff(
            label=_pair_label(unit_a, unit_b),
            key=unit_a.key,
            status="changed" if diffs else "same",
            a_positions=unit_a.positions,
            b_positions=unit_b.positions,
            items=tuple(diffs),
            tools=tools,
            step_status=None if status_a == status_b else (status_a, status_b),
            world=world,
        )


def _pair_label(unit_a: Unit, unit_b: Unit) -> str:
    label = unit_a.label
    if unit_b.occurrence != unit_a.occurrence:
        label += f" (b: #{unit_b.occurrence + 1})"
    if unit_b.tools != unit_a.tools:
        label += f" (b: [{', '.join(unit_b.tools)}])"
    return label


def _unit_worlds(
    comparison: _Comparison,
    aligned: list[tuple[Unit | None, Unit | None, list[tuple[Item | None, Item | None]]]],
    run_a: _Run,
    run_b: _Run,
) -> dict[int, JsonChange]:
    """The world-state change right after each paired unit whose own deltas differ."""
    wanted: dict[int, tuple[int, int]] = {}
    for index, (unit_a, unit_b, items) in enumerate(aligned):
        if unit_a is None or unit_b is None:
            continue
        differs = any(
            (ia is None or ib is None or id(ia) in comparison.pending)
            and (ia or ib).name == "DeltaApplied"  # type: ignore[union-attr]
            for ia, ib in items
        )
        if differs:
            wanted[index] = (unit_a.positions[1], unit_b.positions[1])
    if not wanted:
        return {}
    states_a = _states_at(run_a.deltas, [p for p, _ in wanted.values()])
    states_b = _states_at(run_b.deltas, [p for _, p in wanted.values()])
    out: dict[int, JsonChange] = {}
    for index, (pa, pb) in wanted.items():
        if states_a[pa] != states_b[pb]:
            out[index] = json_change(states_a[pa], states_b[pb])
    return out


def _states_at(
    deltas: Sequence[tuple[int, dict[str, Any]]], positions: list[int]
) -> dict[int, Any]:
    """The world state after each of `positions`, in one fold (one copy per snapshot)."""
    out: dict[int, Any] = {}
    state: Any = {}
    index = 0
    for position in sorted(set(positions)):
        segment: list[Any] = []
        while index < len(deltas) and deltas[index][0] <= position:
            segment.append(deltas[index][1])
            index += 1
        state = fold_patches(segment, start=state)
        out[position] = state
    return out


def _world_change(run_a: _Run, run_b: _Run) -> JsonChange | None:
    state_a = fold_patches(patch for _, patch in run_a.deltas)
    state_b = fold_patches(patch for _, patch in run_b.deltas)
    return None if state_a == state_b else json_change(state_a, state_b)


def _input_change(
    cache: BlobCache, started_a: dict[str, Any], started_b: dict[str, Any]
) -> JsonChange | None:
    raw_a = (started_a.get("input"), started_a.get("input_ref"))
    raw_b = (started_b.get("input"), started_b.get("input_ref"))
    if raw_a == raw_b:
        return None
    value_a, value_b = resolve(cache, started_a, "input"), resolve(cache, started_b, "input")
    return None if value_a == value_b else json_change(value_a, value_b)


def _config_change(started_a: dict[str, Any], started_b: dict[str, Any]) -> JsonChange | None:
    """The agent and configuration (lineage, tags, overrides and code version not compared)."""
    config_a = _identity(started_a)
    config_b = _identity(started_b)
    return None if config_a == config_b else json_change(config_a, config_b)


def _identity(started: dict[str, Any]) -> dict[str, Any]:
    config = {k: v for k, v in started.get("config", {}).items() if k != "code_version"}
    return {"agent": started.get("agent"), **config}


def _answer_change(
    cache: BlobCache, payload_a: dict[str, Any] | None, payload_b: dict[str, Any] | None
) -> AnswerDiff | None:
    answer_a = None if payload_a is None else resolve(cache, payload_a, "answer")
    answer_b = None if payload_b is None else resolve(cache, payload_b, "answer")
    if answer_a == answer_b:
        return None
    diff = text_diff(
        [] if answer_a is None else text_lines(answer_a),
        [] if answer_b is None else text_lines(answer_b),
        "a answer",
        "b answer",
    )
    return AnswerDiff(
        None if answer_a is None else str(answer_a),
        None if answer_b is None else str(answer_b),
        diff or "",
    )


def _first_divergence(units: Sequence[UnitDiff]) -> FirstDivergence | None:
    for index, unit in enumerate(units):
        if unit.status == "same":
            continue
        if unit.status in {"added", "removed"} or not unit.items:
            positions = unit.a_positions or (None, None), unit.b_positions or (None, None)
            return FirstDivergence(
                index, unit.label, None, positions[0][0], positions[1][0], (unit.status,)
            )
        item = unit.items[0]
        what = item.fields or (item.status,)
        return FirstDivergence(
            index, unit.label, item.label, item.a_position, item.b_position, what
        )
    return None
