"""Cutting a recorded run into causal units and items, and aligning two runs' units.

Owns the causal skeleton a run diff compares. A *unit* is one step (StepStarted..StepCompleted,
with every event that names the step or happens while it is the innermost open step) or one
event outside any step (policy, a seeding delta, synthesis, the outcome). A unit's alignment key
is its step name plus the tools called in it, or its event kind; so an inserted step shows as
added instead of shifting every later step. Inside a unit, *items* are keyed by call order: the
nth call of a model role, the nth call of a tool (ToolCalled joined with its ToolReturned by
call id), the nth event of a kind. Must not compare payloads or read blobs (`_diff_compare` and
`_diff` do).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from agentledger.ledger import RecordedEvent
from agentledger.ledger.events import event_type

__all__ = [
    "Item",
    "Unit",
    "align_items",
    "align_served",
    "align_units",
    "build_units",
    "payload_of",
]

_SKIPPED = frozenset({"RunStarted", "RunAnnotated"})
"""Kinds that are not units: RunStarted is compared as input and config; notes are not runs."""


@dataclass
class Item:
    """One model call, tool call (called + returned), step boundary or other event of a unit."""

    key: tuple[str, str, int]
    kind: str
    name: str
    records: list[RecordedEvent] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``model planner #1``, ``tool weather #2``, ``StepCompleted``, ``DeltaApplied #1``."""
        nth = f" #{self.key[2] + 1}"
        if self.kind == "model":
            return f"model {self.name}{nth}"
        if self.kind == "tool":
            return f"tool {self.name}{nth}"
        if self.kind in {"start", "end"}:
            return self.name
        return f"{self.name}{nth}"

    @property
    def position(self) -> int:
        """The position of the item's first event."""
        return self.records[0].position

    @property
    def call_id(self) -> str | None:
        """The call id of a model or tool call item."""
        value = payload_of(self.records[0]).get("call_id")
        return value if isinstance(value, str) else None


@dataclass
class Unit:
    """A step or an outside event, with its items in recorded order."""

    kind: str
    name: str
    step_id: str | None = None
    items: list[Item] = field(default_factory=list)
    occurrence: int = 0
    detail: str = ""
    _counts: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)

    def add(self, kind: str, name: str, record: RecordedEvent) -> Item:
        """Append a new item for `record`, numbered among the unit's items of that kind/name."""
        nth = self._counts.get((kind, name), 0)
        self._counts[kind, name] = nth + 1
        item = Item((kind, name, nth), kind, name, [record])
        self.items.append(item)
        return item

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools called directly in this unit, in order."""
        return tuple(item.name for item in self.items if item.kind == "tool")

    @property
    def key(self) -> tuple[str, ...]:
        """The alignment key: step name and the tools it called, or event kind and detail."""
        if self.kind == "step":
            return ("step", self.name, *self.tools)
        return ("event", self.name, self.detail)

    @property
    def coarse_key(self) -> tuple[str, str]:
        """The key without tools: pairs a step whose tool changed with its counterpart."""
        return (self.kind, self.name)

    @property
    def label(self) -> str:
        """``step execute #2 [weather]`` or ``PolicyDecided #1``."""
        base = f"step {self.name}" if self.kind == "step" else self.name
        label = f"{base} #{self.occurrence + 1}"
        if self.kind == "step" and self.tools:
            label += f" [{', '.join(self.tools)}]"
        elif self.detail:
            label += f" [{self.detail}]"
        return label

    @property
    def positions(self) -> tuple[int, int]:
        """The first and last position of the unit's events."""
        found = [r.position for item in self.items for r in item.records]
        return (min(found), max(found))

    @property
    def step_status(self) -> str | None:
        """The status its StepCompleted recorded (None for an event unit or an open step)."""
        for item in self.items:
            if item.kind == "end":
                status = payload_of(item.records[0]).get("status")
                return status if isinstance(status, str) else None
        return None


def payload_of(record: RecordedEvent) -> dict[str, Any]:
    """A record's payload at the current schema version (old versions upcast, the rest as is)."""
    if record.version == event_type(record.kind).class_version:
        return record.payload
    upcast: dict[str, Any] = record.event.model_dump(mode="json", exclude_defaults=True)
    return upcast


class _Builder:
    """Assigns each event to its unit and item in one pass."""

    def __init__(self) -> None:
        self.units: list[Unit] = []
        self.by_step: dict[str, Unit] = {}
        self.open: list[str] = []
        self.tool_items: dict[str, Item] = {}
        self.occurrences: dict[tuple[str, str], int] = {}

    def new_unit(self, kind: str, name: str, step_id: str | None, detail: str = "") -> Unit:
        occurrence = self.occurrences.get((kind, name), 0)
        self.occurrences[kind, name] = occurrence + 1
        unit = Unit(kind, name, step_id, occurrence=occurrence, detail=detail)
        self.units.append(unit)
        return unit

    def feed(self, record: RecordedEvent) -> None:
        kind = record.kind
        if kind in _SKIPPED:
            return
        payload = payload_of(record)
        if kind == "StepStarted":
            step_id = str(payload["step_id"])
            unit = self.new_unit("step", str(payload["name"]), step_id)
            unit.add("start", "StepStarted", record)
            self.by_step[step_id] = unit
            self.open.append(step_id)
            return
        if kind == "ToolReturned":
            item = self.tool_items.get(str(payload.get("call_id")))
            if item is not None:
                item.records.append(record)
                return
        unit = self.unit_for(kind, payload)
        if kind == "StepCompleted":
            unit.add("end", "StepCompleted", record)
            ended = payload.get("step_id")
            if ended in self.open:
                self.open.remove(ended)
        elif kind == "ModelCalled":
            unit.add("model", str(payload.get("actor") or payload.get("model")), record)
        elif kind == "ToolCalled":
            item = unit.add("tool", str(payload.get("tool")), record)
            self.tool_items[str(payload.get("call_id"))] = item
        elif kind == "GuardrailTripped":
            unit.add("event", f"GuardrailTripped {payload.get('guardrail')}", record)
        else:
            unit.add("event", kind, record)

    def unit_for(self, kind: str, payload: dict[str, Any]) -> Unit:
        step_id = payload.get("step_id")
        if isinstance(step_id, str) and step_id in self.by_step:
            return self.by_step[step_id]
        if self.open:
            return self.by_step[self.open[-1]]
        detail = str(payload.get("guardrail", "")) if kind == "GuardrailTripped" else ""
        return self.new_unit("event", kind, None, detail)


def build_units(records: Iterable[RecordedEvent]) -> list[Unit]:
    """Cut a run's events (RunStarted and annotations aside) into units, in order of start."""
    builder = _Builder()
    for record in records:
        builder.feed(record)
    return builder.units


Pair = tuple[int | None, int | None]


def align_units(a: Sequence[Unit], b: Sequence[Unit]) -> list[Pair]:
    """Pair a's units with b's causally: LCS on keys, then on coarse keys inside replaced runs.

    Returns (index in a, index in b) pairs in causal order; None marks a unit only one run has.
    Common prefix and suffix are matched first, so runs that differ in a few places cost
    linear time plus the matcher's work on the differing middle.
    """
    keys_a = [u.key for u in a]
    keys_b = [u.key for u in b]
    head = 0
    while head < len(a) and head < len(b) and keys_a[head] == keys_b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and keys_a[-1 - tail] == keys_b[-1 - tail]:
        tail += 1
    pairs: list[Pair] = [(i, i) for i in range(head)]
    middle = _match(keys_a[head : len(a) - tail], keys_b[head : len(b) - tail])
    for i, j in middle:
        pairs.append((None if i is None else i + head, None if j is None else j + head))
    pairs += [(len(a) - tail + k, len(b) - tail + k) for k in range(tail)]
    return _refine(a, b, pairs)


def align_served(a: Sequence[Unit], b: Sequence[Unit], a_run_id: str) -> list[Pair] | None:
    """Pair b's units served from run a (a rerun's ``served_from``) with what served them.

    A rerun marks each call and tool result it took from its parent ``PARENT@POSITION``: that
    names the parent's unit exactly, whatever order concurrent calls completed in, where
    aligning by order would pair one thread's call with another's. The units the record did
    not serve (changed, live) are aligned among themselves as `align_units` does. None when
    no unit of b was served from a.
    """
    where: dict[int, int] = {}
    for i, unit in enumerate(a):
        for item in unit.items:
            for record in item.records:
                where[record.position] = i
    prefix = f"{a_run_id}@"
    links: dict[int, int] = {}
    taken: set[int] = set()
    for j, unit in enumerate(b):
        for record in (r for item in unit.items for r in item.records):
            served = payload_of(record).get("served_from")
            if not isinstance(served, str) or not served.startswith(prefix):
                continue
            position = served[len(prefix) :]
            source = where.get(int(position)) if position.isdigit() else None
            if source is not None and source not in taken:
                links[j] = source
                taken.add(source)
                break
    if not links:
        return None
    rest_a = [i for i in range(len(a)) if i not in taken]
    rest_b = [j for j in range(len(b)) if j not in links]
    pairs: list[Pair] = [(i, j) for j, i in links.items()]
    for x, y in align_units([a[i] for i in rest_a], [b[j] for j in rest_b]):
        pairs.append((None if x is None else rest_a[x], None if y is None else rest_b[y]))
    by_b = {y: x for x, y in pairs if y is not None}
    anchor, order = -1, {}
    for j in range(len(b)):  # a unit only b has goes after the a unit its predecessor pairs
        paired = by_b.get(j)
        if paired is not None:
            anchor = paired
        order[j] = anchor
    return sorted(
        pairs,
        key=lambda p: (p[0], 0, 0) if p[0] is not None else (order[p[1] or 0], 1, p[1] or 0),
    )


def _match(keys_a: Sequence[Any], keys_b: Sequence[Any]) -> list[Pair]:
    """LCS alignment of two key lists (difflib, no junk heuristic)."""
    if not keys_a or not keys_b:
        return [(i, None) for i in range(len(keys_a))] + [(None, j) for j in range(len(keys_b))]
    matcher = SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    pairs: list[Pair] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs += zip(range(i1, i2), range(j1, j2), strict=True)
        else:
            pairs += [(i, None) for i in range(i1, i2)]
            pairs += [(None, j) for j in range(j1, j2)]
    return pairs


def _refine(a: Sequence[Unit], b: Sequence[Unit], pairs: list[Pair]) -> list[Pair]:
    """Inside each stretch of unpaired units, pair units of the same step name or event kind."""
    out: list[Pair] = []
    stretch: list[Pair] = []
    for pair in [*pairs, (-1, -1)]:
        if pair[0] is None or pair[1] is None:
            stretch.append(pair)
            continue
        if stretch:
            only_a = [i for i, _ in stretch if i is not None]
            only_b = [j for _, j in stretch if j is not None]
            if only_a and only_b:
                coarse = _match(
                    [a[i].coarse_key for i in only_a], [b[j].coarse_key for j in only_b]
                )
                out += [
                    (None if i is None else only_a[i], None if j is None else only_b[j])
                    for i, j in coarse
                ]
            else:
                out += stretch
            stretch = []
        if pair != (-1, -1):
            out.append(pair)
    return out


def align_items(a: Sequence[Item], b: Sequence[Item]) -> list[tuple[Item | None, Item | None]]:
    """Pair two units' items by key; a-only and b-only items keep their place in order."""
    if len(a) == len(b) and all(x.key == y.key for x, y in zip(a, b, strict=True)):
        return list(zip(a, b, strict=True))
    index_a = {item.key: i for i, item in enumerate(a)}
    ordered: list[tuple[tuple[int, int, int], Item | None, Item | None]] = []
    paired: set[int] = set()
    anchor = -1
    for j, item in enumerate(b):
        i = index_a.get(item.key)
        if i is None:
            ordered.append(((anchor, 1, j), None, item))
        else:
            paired.add(i)
            anchor = i
            ordered.append(((i, 0, 0), a[i], item))
    ordered += [((i, 0, 0), item, None) for i, item in enumerate(a) if i not in paired]
    ordered.sort(key=lambda entry: entry[0])
    return [(left, right) for _, left, right in ordered]
