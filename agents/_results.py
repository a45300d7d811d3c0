"""Turning a recorded tool call into a world-state delta and a one-line snippet, deterministically.

Owns the Kura executor's output contract ``{"deltaState": {...}, "snippet": "..."}`` as a pure
function of the tool's envelope (no second model call): results and snippets keyed by step id,
evidence keyed by call id, errors keyed by step id (objects, never lists, so later deltas add to
them instead of replacing them). Large, noisy fields (opening hours, method notes) are left out
of the world state; the full envelope is in ToolReturned. Must not record or call anything.
"""

from __future__ import annotations

from typing import Any

from agentledger.agents._context import RunContext
from agentledger.agents._types import Outcome, Status, ToolCall
from agentledger.agents.evidence import cited_ids, strip_citations

__all__ = ["compact", "fallback_outcome", "result_patch", "snippet"]

_NOISE = frozenset({"opening_hours", "source", "method", "requested", "tags", "lat", "lng"})


def compact(data: Any) -> Any:
    """``data`` without the fields the world state does not need."""
    if isinstance(data, dict):
        return {k: compact(v) for k, v in data.items() if k not in _NOISE}
    if isinstance(data, list):
        return [compact(item) for item in data]
    return data


def _cite(data: dict[str, Any]) -> str:
    ident = data.get("evidence_id")
    return f" [{ident}]" if isinstance(ident, str) else ""


def _name(value: Any) -> str:
    return str(value.get("name")) if isinstance(value, dict) else str(value)


def snippet(tool: str, call: ToolCall) -> str:  # noqa: PLR0911 - one flat dispatch on type
    """One line saying what a tool call found (or why it failed), citing its evidence."""
    result = call.result
    if not result.ok:
        error = result.error
        code, message = (error.code, error.message) if error is not None else ("error", "")
        return f"{tool} failed ({code}): {message}"
    data = result.data if isinstance(result.data, dict) else {}
    kind = result.type
    if kind == "weather":
        return (
            f"Weather at {_name(data.get('place'))} on {data.get('date')}: "
            f"{data.get('condition')}, {data.get('temp_low_c')}-{data.get('temp_high_c')} C, "
            f"{data.get('precipitation_mm')} mm rain{_cite(data)}"
        )
    if kind == "route":
        return (
            f"{data.get('mode')} from {_name(data.get('origin'))} to "
            f"{_name(data.get('destination'))}: about {data.get('duration_min')} min, "
            f"{data.get('distance_km')} km{_cite(data)}"
        )
    if kind == "poi_list":
        items = data.get("items")
        found = "; ".join(
            f"{item.get('name')} ({item.get('category')}, {item.get('distance_km')} km)"
            f" [{item.get('evidence_id')}]"
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, dict)
        )
        return f"Near {_name(data.get('near'))}: {found or 'nothing found'}"
    if kind == "location":
        return f"{data.get('name')} is at {data.get('lat')}, {data.get('lng')}{_cite(data)}"
    if kind == "calculation":
        return f"{data.get('expression')} = {data.get('result')}"
    if kind in {"reminder", "note", "message"}:
        return f"{kind} {data.get('id')} recorded: {data.get('text') or data.get('subject')}"
    return f"{tool} returned {kind}"


def result_patch(key: str, tool: str, arguments: object, call: ToolCall) -> dict[str, Any]:
    """The world-state delta for one tool call made under ``key`` (a step or action id)."""
    line = snippet(tool, call)
    if not call.result.ok:
        error = call.result.error
        return {
            "errors": {
                key: {
                    "tool": tool,
                    "code": error.code if error is not None else "error",
                    "message": error.message if error is not None else "",
                }
            },
            "snippets": {key: line},
        }
    patch: dict[str, Any] = {
        "results": {
            key: {"tool": tool, "args": arguments, "data": compact(call.result.data)},
        },
        "snippets": {key: line},
    }
    if call.evidence and call.call_id is not None:
        patch["evidence"] = {call.call_id: list(call.evidence)}
    return patch


def fallback_outcome(ctx: RunContext, reason: str, status: Status = "fallback") -> Outcome:
    """A deterministic answer from what the world state holds so far.

    Used when a run cannot finish normally; it makes no model call, since the run may have
    halted on its token budget.
    """
    world = ctx.world
    snippets = world.get("snippets") if isinstance(world.get("snippets"), dict) else {}
    lines = [str(line) for line in (snippets or {}).values()]
    found = " ".join(lines) if lines else "I have no results to share yet."
    answer = f"I could not finish this request ({reason}). What I found so far: {found}"
    unsupported = [i for i in cited_ids(answer) if i not in ctx.evidence]
    answer = strip_citations(answer, unsupported)
    return Outcome(status, answer, tuple(cited_ids(answer)))
