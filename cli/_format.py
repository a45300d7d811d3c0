"""Terminal rendering for the CLI: run tables and readable timelines. Prints nothing itself."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentledger.ledger import RecordedEvent, RunInfo

__all__ = ["runs_table", "summarize", "timeline"]


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def runs_table(runs: Sequence[RunInfo]) -> str:
    """A fixed-width table of runs: id, status, started, events, agent, input."""
    header = f"{'RUN':36}  {'STATUS':9}  {'STARTED':20}  {'EVENTS':>6}  {'AGENT':12}  INPUT"
    lines = [header]
    for info in runs:
        lines.append(
            f"{info.run_id:36}  {info.status:9}  {info.started_at[:19]:20}  "
            f"{info.event_count:>6}  {_clip(info.agent, 12):12}  {_clip(info.input_preview, 60)}"
        )
    if not runs:
        lines.append("(no runs)")
    return "\n".join(lines)


def summarize(record: RecordedEvent) -> str:  # noqa: PLR0911, PLR0912 - one flat dispatch over kinds
    """One line saying what an event recorded."""
    p: dict[str, Any] = record.payload
    kind = record.kind
    if kind == "RunStarted":
        return f"agent={p.get('agent')} input={_clip(json.dumps(p.get('input')), 70)}"
    if kind == "ModelCalled":
        usage = p.get("usage", {})
        served = f" served_from={p['served_from']}" if p.get("served_from") else ""
        err = f" error={p['error']['type']}" if p.get("error") else ""
        return (
            f"{p.get('call_id')} {p.get('provider')}:{p.get('model')} "
            f"msgs={p.get('message_count')} tokens={usage.get('input_tokens', 0)}+"
            f"{usage.get('output_tokens', 0)} {p.get('latency_ms', 0.0):.0f}ms{served}{err}"
        )
    if kind == "ToolCalled":
        args = p.get("arguments", "<blob>") if "arguments_ref" not in p else "<blob>"
        return f"{p.get('call_id')} {p.get('tool')}({_clip(json.dumps(args), 60)})"
    if kind == "ToolReturned":
        if p.get("ok"):
            return f"{p.get('call_id')} ok {_clip(json.dumps(p.get('data')), 70)}"
        error = p.get("error") or {}
        return (
            f"{p.get('call_id')} FAILED {error.get('code')}: {_clip(error.get('message', ''), 60)}"
        )
    if kind == "DeltaApplied":
        return _clip(json.dumps(p.get("patch")), 90)
    if kind in {"StepStarted", "StepCompleted"}:
        return f"{p.get('step_id')} {p.get('name', p.get('status', ''))}"
    if kind == "PlanProposed":
        return _clip(json.dumps(p.get("plan")), 90)
    if kind == "SynthesisProduced":
        return f"{_clip(p.get('answer') or '<blob>', 70)} evidence={p.get('evidence_ids', [])}"
    if kind == "GuardrailTripped":
        return f"{p.get('guardrail')} -> {p.get('action')}: {_clip(p.get('message', ''), 60)}"
    if kind == "PolicyDecided":
        return f"{p.get('decision')} {p.get('reasons', [])}"
    if kind in {"RunCompleted", "RunFailed"}:
        extra = p.get("outcome") or (p.get("error") or {}).get("message", "")
        return f"events={p.get('event_count')} head={str(p.get('head_hash'))[:12]} {extra}"
    if kind == "RunAnnotated":
        return f"{p.get('author')}: {_clip(p.get('note', ''), 70)}"
    return _clip(json.dumps(p), 90)


def timeline(records: Sequence[RecordedEvent]) -> str:
    """A readable timeline: position, time, kind and a summary per event."""
    return "\n".join(
        f"{r.position:>4}  {r.timestamp[11:23]}  {r.kind:18}  {summarize(r)}" for r in records
    )
