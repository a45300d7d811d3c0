"""Terminal rendering of a `RunDiff`: a compact report, optionally coloured.

Owns the text form of a run diff: a header naming both runs, the first divergence, input and
configuration changes, one line per aligned unit (``=`` same, ``~`` changed, ``+`` added in b,
``-`` removed from a) with the differing items under it, the final world-state change, the
answer diff, the status change, and a totals table with deltas. ANSI colour only when asked
(the CLI decides from the stream and ``--color``). Must not read the ledger or print.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agentledger.replay._diff_model import (
    ItemDiff,
    JsonChange,
    PathChange,
    RunDiff,
    RunSide,
    Totals,
    UnitDiff,
)

__all__ = ["TextWriter", "render_diff", "render_totals"]

_RESET = "\x1b[0m"
_STYLES = {
    "red": "\x1b[31m",
    "green": "\x1b[32m",
    "yellow": "\x1b[33m",
    "cyan": "\x1b[36m",
    "bold": "\x1b[1m",
    "dim": "\x1b[2m",
}
_MARKS = {"same": "=", "changed": "~", "added": "+", "removed": "-"}
_MARK_STYLE = {"same": "dim", "changed": "yellow", "added": "green", "removed": "red"}
_PATHS_SHOWN = 20
_VALUE_WIDTH = 100
_PATCH_WIDTH = 300
_TOTAL_ROWS = (
    ("events", "events"),
    ("model calls", "model_calls"),
    ("tool calls", "tool_calls"),
    ("tool errors", "tool_errors"),
    ("guardrail trips", "guardrail_trips"),
    ("tokens in", "input_tokens"),
    ("tokens out", "output_tokens"),
    ("cost (USD)", "cost_usd"),
    ("latency (ms)", "latency_ms"),
)


class TextWriter:
    """Collects output lines, colouring them when asked."""

    def __init__(self, color: bool) -> None:
        self.color = color
        self.lines: list[str] = []

    def paint(self, text: str, style: str) -> str:
        if not self.color or not text:
            return text
        return f"{_STYLES[style]}{text}{_RESET}"

    def line(self, text: str = "", style: str | None = None) -> None:
        self.lines.append(self.paint(text, style) if style else text)

    def block(self, text: str, indent: str) -> None:
        """A unified diff, indented, with -/+ lines red/green and hunk headers cyan."""
        for raw in text.splitlines():
            style = None
            if raw.startswith(("---", "+++")):
                style = "bold"
            elif raw.startswith("@@"):
                style = "cyan"
            elif raw.startswith("-"):
                style = "red"
            elif raw.startswith("+"):
                style = "green"
            self.line(indent + raw if style is None else self.paint(indent + raw, style))


def render_diff(diff: RunDiff, *, color: bool = False, only_changes: bool = False) -> str:
    """The diff as terminal text: divergence first, then per-unit changes, then totals.

    `only_changes` leaves out units that are the same and totals that did not move.
    """
    out = TextWriter(color)
    _header(out, diff)
    if diff.identical:
        out.line("no differences (timing, ids, lineage and served-from-record usage ignored)")
    if diff.input is not None:
        out.line("input:", "bold")
        _json_change(out, diff.input, "  ")
    if diff.config is not None:
        out.line("configuration:", "bold")
        _json_change(out, diff.config, "  ", patch=False)
    _units(out, diff.units, only_changes)
    if diff.world is not None:
        out.line("world state (final), merge patch a -> b:", "bold")
        _json_change(out, diff.world, "  ")
    if diff.answer is not None:
        out.line("answer:", "bold")
        out.block(diff.answer.diff, "  ")
    if diff.status is not None:
        out.line("status: ", "bold")
        out.lines[-1] += f"{diff.status[0]} -> {diff.status[1]}"
    out.lines += render_totals(diff.totals_a, diff.totals_b, color=color, only_changes=only_changes)
    return "\n".join(out.lines)


def _side(side: RunSide) -> str:
    status = f"{side.status}/{side.outcome}" if side.outcome else side.status
    text = f"{side.run_id} {side.agent} {status}"
    if side.relation and side.parent_run_id:
        text += f" ({side.relation} of {side.parent_run_id[:8]})"
    if side.tags:
        text += f" tags={','.join(side.tags)}"
    return text


def _header(out: TextWriter, diff: RunDiff) -> None:
    out.line(f"--- a {_side(diff.a)}", "bold")
    out.line(f"+++ b {_side(diff.b)}", "bold")
    if diff.a.code_version != diff.b.code_version:
        out.line(f"code version: {diff.a.code_version} -> {diff.b.code_version}")
    if diff.first_divergence is not None:
        out.line("first divergence: ", "bold")
        out.lines[-1] += out.paint(diff.first_divergence.describe(), "yellow")


def _span(positions: tuple[int, int] | None) -> str:
    if positions is None:
        return "-"
    first, last = positions
    return str(first) if first == last else f"{first}-{last}"


def _units(out: TextWriter, units: Iterable[UnitDiff], only_changes: bool) -> None:
    hidden = 0
    shown: list[UnitDiff] = []
    for unit in units:
        if only_changes and unit.status == "same":
            hidden += 1
        else:
            shown.append(unit)
    if not shown:
        return
    out.line("steps:", "bold")
    width = min(max(len(u.label) for u in shown) + 2, 60)
    for unit in shown:
        mark = out.paint(_MARKS[unit.status], _MARK_STYLE[unit.status])
        where = f"a:{_span(unit.a_positions)} b:{_span(unit.b_positions)}"
        out.line(f"  {mark} {unit.label.ljust(width)} {out.paint(where, 'dim')}")
        if unit.tools is not None:
            out.line(f"      tools: {list(unit.tools[0])} -> {list(unit.tools[1])}")
        if unit.step_status is not None:
            out.line(f"      step status: {unit.step_status[0]} -> {unit.step_status[1]}")
        for item in unit.items:
            _item(out, item)
        if unit.world is not None:
            out.line("      world state after this step:")
            _json_change(out, unit.world, "        ", patch=False)
    if hidden:
        out.line(f"  ({hidden} unchanged step(s) not shown)", "dim")


def _item(out: TextWriter, item: ItemDiff) -> None:
    mark = out.paint(_MARKS[item.status], _MARK_STYLE[item.status])
    a = "-" if item.a_position is None else str(item.a_position)
    b = "-" if item.b_position is None else str(item.b_position)
    detail = ", ".join(item.fields) if item.fields else item.summary
    out.line(f"      {mark} {item.label} (a:{a}, b:{b}): {detail}")
    indent = "          "
    if item.prompt is not None:
        pa, pb = item.prompt.a or {}, item.prompt.b or {}
        out.line(f"{indent}prompt: {_prompt(pa)} -> {_prompt(pb)}")
        if item.prompt.text_diff:
            out.block(item.prompt.text_diff, indent + "  ")
    if item.messages:
        out.line(f"{indent}messages ({item.shared_messages} shared):")
        out.block(item.messages, indent + "  ")
    if item.response:
        out.line(f"{indent}response:")
        out.block(item.response, indent + "  ")
    for name, change in (("arguments", item.arguments), ("result", item.result)):
        if change is not None:
            out.line(f"{indent}{name}:")
            _json_change(out, change, indent + "  ")
    if item.value is not None:
        _json_change(out, item.value, indent, patch=False)


def _prompt(prompt: dict[str, str]) -> str:
    if not prompt:
        return "(none)"
    digest = prompt.get("hash", "").removeprefix("sha256:")[:12]
    return f"{prompt.get('name')} {prompt.get('version')} ({digest})"


def _compact(value: Any, width: int) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _json_change(out: TextWriter, change: JsonChange, indent: str, *, patch: bool = True) -> None:
    if patch:
        text = _compact(change.patch, _PATCH_WIDTH) if change.representable else "(none)"
        out.line(f"{indent}patch: {text}")
    for path in change.paths[:_PATHS_SHOWN]:
        out.line(indent + _path_line(out, path))
    more = len(change.paths) - _PATHS_SHOWN
    if more > 0 or change.truncated:
        out.line(f"{indent}... more paths changed", "dim")


def _path_line(out: TextWriter, change: PathChange) -> str:
    path = change.path or "(whole value)"
    if change.op == "added":
        return out.paint(f"+ {path}: {_compact(change.b, _VALUE_WIDTH)}", "green")
    if change.op == "removed":
        return out.paint(f"- {path}: {_compact(change.a, _VALUE_WIDTH)}", "red")
    old = out.paint(_compact(change.a, _VALUE_WIDTH), "red")
    new = out.paint(_compact(change.b, _VALUE_WIDTH), "green")
    return f"~ {path}: {old} -> {new}"


def _number(value: float, name: str, *, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if name == "cost_usd":
        return f"{value:{sign}.6f}"
    if name == "latency_ms":
        return f"{value:{sign}.1f}"
    return f"{int(value):{sign},}"


def render_totals(
    a: Totals, b: Totals, *, color: bool = False, only_changes: bool = False
) -> list[str]:
    """The totals table (a, b, delta), one row per figure; unmoved rows left out if asked."""
    out = TextWriter(color)
    delta = b.minus(a)
    rows = [
        (label, name)
        for label, name in _TOTAL_ROWS
        if not only_changes or getattr(delta, name) != 0
    ]
    if not rows:
        return out.lines
    out.line(f"{'totals':18}{'a':>14}{'b':>14}{'delta':>14}", "bold")
    for label, name in rows:
        moved = getattr(delta, name)
        change = _number(moved, name, signed=True).rjust(14)
        if moved:
            change = out.paint(change, "yellow")
        out.line(
            f"{label:18}{_number(getattr(a, name), name):>14}"
            f"{_number(getattr(b, name), name):>14}{change}"
        )
    return out.lines
