"""The values a run diff returns: `RunDiff` and its parts, all frozen and JSON-serialisable.

Owns the shape of a diff (what `diff_runs` reports and what `--json` prints): per aligned unit
an `UnitDiff`, per differing call or event an `ItemDiff`, JSON changes as `JsonChange` (a merge
patch plus the paths that changed), run totals as `Totals`. Must not read a ledger or render
text: `_diff` builds these values and `_diff_render` prints them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

__all__ = [
    "AnswerDiff",
    "FirstDivergence",
    "ItemDiff",
    "JsonChange",
    "PathChange",
    "PromptChange",
    "RunDiff",
    "RunSide",
    "Totals",
    "UnitDiff",
    "UnitStatus",
]

UnitStatus = Literal["same", "changed", "added", "removed"]
"""How an aligned unit (or item) of run b relates to run a."""


@dataclass(frozen=True)
class PathChange:
    """One JSON path whose value differs: RFC 6901 pointer, what happened, old and new value."""

    path: str
    op: Literal["added", "removed", "changed"]
    a: Any = None
    b: Any = None


@dataclass(frozen=True)
class JsonChange:
    """How one JSON value changed from run a to run b.

    `patch` is the RFC 7386 merge patch taking a's value to b's (``apply_patch(a, patch) ==
    b``); when no merge patch can (b holds a ``null`` inside an object), `representable` is
    False and `patch` is None. `paths` lists the changed paths (at most a few hundred; then
    `truncated` is True).
    """

    patch: Any
    paths: tuple[PathChange, ...]
    representable: bool = True
    truncated: bool = False


@dataclass(frozen=True)
class PromptChange:
    """A model call's recorded prompt on each side (name, version, hash) and a text diff."""

    a: dict[str, str] | None
    b: dict[str, str] | None
    text_diff: str | None = None


@dataclass(frozen=True)
class ItemDiff:
    """One call or event inside a unit that differs, was added (in b) or removed (from a).

    `fields` names what differs (``response``, ``messages``, ``prompt``, ``arguments``,
    ``result``, ``status``...). The optional parts hold the detail: unified text diffs of the
    prompt text, of the request messages after the `shared_messages` they have in common and of
    the response; JSON changes of tool arguments, tool results and any other payload fields.
    """

    label: str
    kind: str
    status: UnitStatus
    a_position: int | None
    b_position: int | None
    fields: tuple[str, ...] = ()
    summary: str = ""
    prompt: PromptChange | None = None
    messages: str | None = None
    shared_messages: int | None = None
    response: str | None = None
    arguments: JsonChange | None = None
    result: JsonChange | None = None
    value: JsonChange | None = None


@dataclass(frozen=True)
class UnitDiff:
    """One aligned unit: a step (StepStarted..StepCompleted) or an event outside any step.

    Positions are the (first, last) event positions of the unit in each run (None on the side
    where it is missing). `items` holds only the items that differ. `tools` is (a's, b's) tool
    sequence when they differ; `step_status` (a's, b's) step status when it changed; `world`
    the world-state change right after the unit, when the unit's own deltas differ.
    """

    label: str
    key: tuple[str, ...]
    status: UnitStatus
    a_positions: tuple[int, int] | None
    b_positions: tuple[int, int] | None
    items: tuple[ItemDiff, ...] = ()
    tools: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    step_status: tuple[str | None, str | None] | None = None
    world: JsonChange | None = None


@dataclass(frozen=True)
class FirstDivergence:
    """Where two runs first part: the unit (its index in `RunDiff.units`), item and positions."""

    index: int
    unit: str
    item: str | None
    a_position: int | None
    b_position: int | None
    what: tuple[str, ...]

    def describe(self) -> str:
        """One line: ``step plan #1 > model planner #1 (a:5, b:5): response``."""
        where = self.unit if self.item is None else f"{self.unit} > {self.item}"
        a = "-" if self.a_position is None else str(self.a_position)
        b = "-" if self.b_position is None else str(self.b_position)
        return f"{where} (a:{a}, b:{b}): {', '.join(self.what)}"


_TOTAL_NAMES = (
    "events",
    "model_calls",
    "tool_calls",
    "tool_errors",
    "guardrail_trips",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_ms",
)


@dataclass(frozen=True)
class Totals:
    """What a run consumed and did: counts, tokens, cost and latency (model + tool)."""

    events: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    guardrail_trips: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def minus(self, other: Totals) -> Totals:
        """Field by field, this minus `other` (b.minus(a) is the delta from a to b)."""
        values = {
            name: _rounded(getattr(self, name) - getattr(other, name)) for name in _TOTAL_NAMES
        }
        return Totals(**values)

    def as_dict(self) -> dict[str, float | int]:
        """The totals as a JSON object."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _rounded(value: float) -> Any:
    return round(value, 9) if isinstance(value, float) else value


@dataclass(frozen=True)
class RunSide:
    """One run of the diff as the report names it: id, agent, status, outcome and lineage."""

    run_id: str
    agent: str
    status: str
    outcome: str | None
    tags: tuple[str, ...] = ()
    parent_run_id: str | None = None
    relation: str | None = None
    code_version: str | None = None


@dataclass(frozen=True)
class AnswerDiff:
    """The final answers (or clarification questions) and their unified diff."""

    a: str | None
    b: str | None
    diff: str


@dataclass(frozen=True)
class RunDiff:
    """A causal diff of run b against run a; see `diff_runs`.

    `identical` is True when nothing differs but timing and ids (timestamps, event ids, hashes,
    latencies, run/step/call ids, lineage, served-from-record markers and their zero usage).
    """

    a: RunSide
    b: RunSide
    units: tuple[UnitDiff, ...]
    first_divergence: FirstDivergence | None
    totals_a: Totals
    totals_b: Totals
    input: JsonChange | None = None
    config: JsonChange | None = None
    world: JsonChange | None = None
    answer: AnswerDiff | None = None
    status: tuple[str, str] | None = None

    @property
    def identical(self) -> bool:
        """Whether the runs are the same but for timing, ids and lineage."""
        return (
            self.first_divergence is None
            and self.input is None
            and self.config is None
            and self.world is None
            and self.answer is None
            and self.status is None
        )

    @property
    def delta(self) -> Totals:
        """Totals of b minus totals of a."""
        return self.totals_b.minus(self.totals_a)

    @property
    def changed_units(self) -> tuple[UnitDiff, ...]:
        """The units that differ, were added or were removed."""
        return tuple(u for u in self.units if u.status != "same")

    def to_json(self) -> dict[str, Any]:
        """The whole diff as a JSON object (what ``agentledger diff --json`` prints)."""
        body = asdict(self)
        body.pop("totals_a")
        body.pop("totals_b")
        body["identical"] = self.identical
        body["first_divergence"] = (
            None
            if self.first_divergence is None
            else {**asdict(self.first_divergence), "description": self.first_divergence.describe()}
        )
        body["totals"] = {
            "a": self.totals_a.as_dict(),
            "b": self.totals_b.as_dict(),
            "delta": self.delta.as_dict(),
        }
        plain: dict[str, Any] = _jsonable(body)
        return plain


def _jsonable(value: Any) -> Any:
    """Tuples to lists, recursively (asdict keeps tuples), so the value is plain JSON."""
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value
