"""Applying a batch of recorded events to the read-model tables, inside the caller's transaction.

Owns the mapping from events to rows: RunStarted makes a run row (with its prompts, models and
tags), ModelCalled / ToolCalled / GuardrailTripped make one row each keyed by (run, position),
ToolReturned completes its tool call's row, RunCompleted / RunFailed close the run, and every
event moves its run's event count and head hash. Every write is idempotent (inserts ignore rows
already present; updates set values derived from the events), so applying a batch twice gives
the same rows as once; a run's totals are recomputed from its call rows, never incremented.
Must not commit, read the ledger, or track positions (the projector does that).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, select
from sqlalchemy.dialects import postgresql, sqlite

from agentledger.ledger import RecordedEvent
from agentledger.ledger.events import (
    GuardrailTripped,
    ModelCalled,
    PromptRef,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolCalled,
    ToolReturned,
)
from agentledger.projections._rm_schema import (
    GUARDRAIL_TRIPS,
    MODEL_CALLS,
    RUN_MODELS,
    RUN_PROMPTS,
    RUN_TAGS,
    RUNS,
    TOOL_CALLS,
)

__all__ = ["apply_batch", "input_text"]

_CHUNK = 500
"""Run ids per ``IN (...)`` list when recomputing totals."""


def input_text(value: Any) -> str | None:
    """A run's input as text: strings as they are, other JSON as `json.dumps` writes it."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass
class _Rows:
    """What one batch writes, collected in event order before any SQL runs."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    prompts: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    models: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    tags: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    model_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    trips: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    endings: dict[str, dict[str, Any]] = field(default_factory=dict)
    heads: dict[str, tuple[int, str]] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)


def apply_batch(conn: Connection, records: Sequence[RecordedEvent]) -> None:
    """Write the rows that `records` (in notification order) imply, in `conn`'s transaction."""
    rows = _Rows()
    for record in records:
        _collect(rows, record)
    _write(conn, rows)


# Collecting ----------------------------------------------------------------------------------


def _collect(rows: _Rows, record: RecordedEvent) -> None:
    rid = record.run_id
    rows.heads[rid] = (record.position, record.hash)
    kind = record.kind
    if kind not in _HANDLERS:
        return
    rows.touched.add(rid)
    _HANDLERS[kind](rows, record)


def _run_started(rows: _Rows, record: RecordedEvent) -> None:
    event = record.event
    assert isinstance(event, RunStarted)
    rid = record.run_id
    config = event.config
    rows.runs[rid] = {
        "run_id": rid,
        "agent": event.agent,
        "status": "running",
        "started_at": record.timestamp,
        "ended_at": None,
        "event_count": record.position,
        "head_hash": record.hash,
        "input": input_text(event.input),
        "input_ref": event.input_ref,
        "models": [],
        "prompts": {role: f"{p.name}={p.version}" for role, p in sorted(config.prompts.items())},
        "tags": sorted(set(event.tags)),
        "code_version": config.code_version,
        "model_calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": None,
        "tool_calls": 0,
        "tool_errors": 0,
        "guardrail_trips": 0,
        "outcome": None,
        "error_type": None,
        "error_message": None,
        "parent_run_id": event.parent_run_id,
        "parent_position": event.parent_position,
        "relation": event.relation,
    }
    for role, prompt in config.prompts.items():
        _add_prompt(rows, rid, role, prompt)
    for role, model in config.models.items():
        _add_model(rows, rid, role, model.provider, model.model)
    for tag in event.tags:
        rows.tags.setdefault((rid, tag), {"run_id": rid, "tag": tag})


def _add_prompt(rows: _Rows, rid: str, role: str, prompt: PromptRef) -> None:
    name, version = prompt.name, prompt.version
    row = {"run_id": rid, "role": role, "name": name, "version": version, "hash": prompt.hash}
    rows.prompts.setdefault((rid, role, name, version), row)


def _add_model(rows: _Rows, rid: str, role: str, provider: str, model: str) -> None:
    row = {"run_id": rid, "role": role, "provider": provider, "model": model}
    rows.models.setdefault((rid, role, provider, model), row)


def _model_called(rows: _Rows, record: RecordedEvent) -> None:
    event = record.event
    assert isinstance(event, ModelCalled)
    rid = record.run_id
    prompt = event.prompt
    role = event.actor or ""
    rows.model_calls.append(
        {
            "run_id": rid,
            "position": record.position,
            "timestamp": record.timestamp,
            "call_id": event.call_id,
            "step_id": event.step_id,
            "role": event.actor,
            "provider": event.provider,
            "model": event.model,
            "prompt_name": prompt.name if prompt else None,
            "prompt_version": prompt.version if prompt else None,
            "prompt_hash": prompt.hash if prompt else None,
            "input_tokens": event.usage.input_tokens,
            "output_tokens": event.usage.output_tokens,
            "total_tokens": event.usage.total_tokens,
            "cost_usd": event.cost_usd,
            "latency_ms": event.latency_ms,
            "attempts": len(event.attempts),
            "finish_reason": event.finish_reason,
            "error_type": event.error.type if event.error else None,
            "served_from": event.served_from,
        }
    )
    _add_model(rows, rid, role, event.provider, event.model)
    if prompt is not None:
        _add_prompt(rows, rid, role, prompt)


def _tool_called(rows: _Rows, record: RecordedEvent) -> None:
    event = record.event
    assert isinstance(event, ToolCalled)
    rows.tool_calls.append(
        {
            "run_id": record.run_id,
            "position": record.position,
            "timestamp": record.timestamp,
            "call_id": event.call_id,
            "tool": event.tool,
            "tool_version": event.tool_version,
            "step_id": event.step_id,
            "effectful": event.effectful,
            "caused_by": event.caused_by,
            "model_position": None,
            "result_position": None,
            "ok": None,
            "result_type": None,
            "error_code": None,
            "latency_ms": None,
            "served_from": None,
        }
    )


def _tool_returned(rows: _Rows, record: RecordedEvent) -> None:
    event = record.event
    assert isinstance(event, ToolReturned)
    rows.results.append(
        {
            "b_run": record.run_id,
            "b_call": event.call_id,
            "b_pos": record.position,
            "b_ok": event.ok,
            "b_type": event.type,
            "b_code": event.error.code if event.error else None,
            "b_latency": event.latency_ms,
            "b_served": event.served_from,
        }
    )


def _guardrail_tripped(rows: _Rows, record: RecordedEvent) -> None:
    event = record.event
    assert isinstance(event, GuardrailTripped)
    rows.trips.append(
        {
            "run_id": record.run_id,
            "position": record.position,
            "timestamp": record.timestamp,
            "guardrail": event.guardrail,
            "action": event.action,
            "message": event.message,
            "step_id": event.step_id,
        }
    )


def _run_ended(rows: _Rows, record: RecordedEvent) -> None:
    event = record.event
    ending: dict[str, Any] = {"b_run": record.run_id, "b_ended": record.timestamp}
    if isinstance(event, RunCompleted):
        ending |= {"b_status": "completed", "b_outcome": event.outcome, "b_etype": None}
        ending["b_emsg"] = None
    else:
        assert isinstance(event, RunFailed)
        ending |= {"b_status": "failed", "b_outcome": None, "b_etype": event.error.type}
        ending["b_emsg"] = event.error.message
    rows.endings.setdefault(record.run_id, ending)


_HANDLERS = {
    "RunStarted": _run_started,
    "ModelCalled": _model_called,
    "ToolCalled": _tool_called,
    "ToolReturned": _tool_returned,
    "GuardrailTripped": _guardrail_tripped,
    "RunCompleted": _run_ended,
    "RunFailed": _run_ended,
}


# Writing -------------------------------------------------------------------------------------


def _write(conn: Connection, rows: _Rows) -> None:
    _insert_new(conn, RUNS, list(rows.runs.values()))
    _insert_new(conn, RUN_PROMPTS, list(rows.prompts.values()))
    _insert_new(conn, RUN_MODELS, list(rows.models.values()))
    _insert_new(conn, RUN_TAGS, list(rows.tags.values()))
    _insert_new(conn, MODEL_CALLS, rows.model_calls)
    _insert_new(conn, TOOL_CALLS, rows.tool_calls)
    _insert_new(conn, GUARDRAIL_TRIPS, rows.trips)
    if rows.results:
        conn.execute(_RESULT_UPDATE, rows.results)
    runs = sorted(rows.touched)
    for start in range(0, len(runs), _CHUNK):
        chunk = runs[start : start + _CHUNK]
        conn.execute(_ATTRIBUTE.where(TOOL_CALLS.c.run_id.in_(chunk)))
    if rows.endings:
        conn.execute(_END_UPDATE, list(rows.endings.values()))
    if rows.heads:
        heads = [{"b_run": r, "b_pos": p, "b_hash": h} for r, (p, h) in rows.heads.items()]
        conn.execute(_HEAD_UPDATE, heads)
    for start in range(0, len(runs), _CHUNK):
        _recompute_totals(conn, runs[start : start + _CHUNK])


def _insert_new(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert rows, leaving any already present (same key) as they are."""
    if not rows:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(dialect.insert(table).on_conflict_do_nothing(), rows)


def _result_update() -> Any:
    earlier = TOOL_CALLS.alias("earlier")
    target = (
        select(func.max(earlier.c.position))
        .where(
            earlier.c.run_id == bindparam("b_run"),
            earlier.c.call_id == bindparam("b_call"),
            earlier.c.position < bindparam("b_pos"),
        )
        .scalar_subquery()
    )
    return (
        TOOL_CALLS.update()
        .where(TOOL_CALLS.c.run_id == bindparam("b_run"), TOOL_CALLS.c.position == target)
        .values(
            result_position=bindparam("b_pos"),
            ok=bindparam("b_ok"),
            result_type=bindparam("b_type"),
            error_code=bindparam("b_code"),
            latency_ms=bindparam("b_latency"),
            served_from=bindparam("b_served"),
        )
    )


def _attribute() -> Any:
    """Charge each tool call to a model call: its cause if that is one, else the last before."""
    calls = MODEL_CALLS
    cause = (
        select(calls.c.position)
        .where(calls.c.run_id == TOOL_CALLS.c.run_id, calls.c.position == TOOL_CALLS.c.caused_by)
        .scalar_subquery()
    )
    before = (
        select(func.max(calls.c.position))
        .where(calls.c.run_id == TOOL_CALLS.c.run_id, calls.c.position < TOOL_CALLS.c.position)
        .scalar_subquery()
    )
    return (
        TOOL_CALLS.update()
        .where(TOOL_CALLS.c.model_position.is_(None))
        .values(model_position=func.coalesce(cause, before))
    )


_RESULT_UPDATE = _result_update()
_ATTRIBUTE = _attribute()
_END_UPDATE = (
    RUNS.update()
    .where(RUNS.c.run_id == bindparam("b_run"))
    .values(
        status=bindparam("b_status"),
        ended_at=bindparam("b_ended"),
        outcome=bindparam("b_outcome"),
        error_type=bindparam("b_etype"),
        error_message=bindparam("b_emsg"),
    )
)
_HEAD_UPDATE = (
    RUNS.update()
    .where(RUNS.c.run_id == bindparam("b_run"), RUNS.c.event_count < bindparam("b_pos"))
    .values(event_count=bindparam("b_pos"), head_hash=bindparam("b_hash"))
)
_TOTALS_UPDATE = (
    RUNS.update()
    .where(RUNS.c.run_id == bindparam("b_run"))
    .values(
        models=bindparam("b_models", type_=RUNS.c.models.type),
        model_calls=bindparam("b_calls"),
        input_tokens=bindparam("b_in"),
        output_tokens=bindparam("b_out"),
        cost_usd=bindparam("b_cost"),
        tool_calls=bindparam("b_tools"),
        tool_errors=bindparam("b_errors"),
        guardrail_trips=bindparam("b_trips"),
    )
)


def _recompute_totals(conn: Connection, runs: Sequence[str]) -> None:
    """Set the runs' totals from their call rows (exact float sums, so order never matters)."""
    totals: dict[str, dict[str, Any]] = {
        rid: {
            "b_run": rid,
            "b_models": set(),
            "b_calls": 0,
            "b_in": 0,
            "b_out": 0,
            "b_cost": [],
            "b_tools": 0,
            "b_errors": 0,
            "b_trips": 0,
        }
        for rid in runs
    }
    m = MODEL_CALLS.c
    for row in conn.execute(
        select(m.run_id, m.input_tokens, m.output_tokens, m.cost_usd).where(m.run_id.in_(runs))
    ):
        t = totals[row.run_id]
        t["b_calls"] += 1
        t["b_in"] += row.input_tokens
        t["b_out"] += row.output_tokens
        if row.cost_usd is not None:
            t["b_cost"].append(row.cost_usd)
    tc = TOOL_CALLS.c
    for rid, ok in conn.execute(select(tc.run_id, tc.ok).where(tc.run_id.in_(runs))):
        totals[rid]["b_tools"] += 1
        totals[rid]["b_errors"] += ok is False
    g = GUARDRAIL_TRIPS.c
    trips = select(g.run_id, func.count()).where(g.run_id.in_(runs)).group_by(g.run_id)
    for rid, count in conn.execute(trips):
        totals[rid]["b_trips"] = count
    rm = RUN_MODELS.c
    used = select(rm.run_id, rm.provider, rm.model).where(rm.run_id.in_(runs))
    for rid, provider, model in conn.execute(used):
        totals[rid]["b_models"].add(f"{provider}:{model}")
    conn.execute(_TOTALS_UPDATE, [_finish(t) for t in totals.values()])


def _finish(total: Mapping[str, Any]) -> dict[str, Any]:
    costs: list[float] = total["b_cost"]
    return dict(total) | {
        "b_models": sorted(total["b_models"]),
        "b_cost": math.fsum(costs) if costs else None,
    }
