"""Queries over the read-model tables: filtered run listings and usage statistics.

Owns `RunRow` (a row of `al_rm_runs`), `StatsRow` (tokens, cost, latency and tool error rate of
one model and/or prompt version) and the SQL behind them. Filters run in SQL; statistics sum
floats exactly (`math.fsum`) and take the 95th percentile by nearest rank, so the numbers do not
depend on row order or on the database. Must not write, and must not read the ledger.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, case, exists, func, or_, select

from agentledger.projections._rm_schema import (
    MODEL_CALLS,
    RUN_MODELS,
    RUN_PROMPTS,
    RUN_TAGS,
    RUNS,
    TOOL_CALLS,
)
from agentledger.projections.errors import ReadModelOptionError

__all__ = [
    "GROUPINGS",
    "STATUSES",
    "RunFilter",
    "RunRow",
    "StatsRow",
    "check_grouping",
    "compute_stats",
    "nearest_rank",
    "select_runs",
]

STATUSES = ("running", "completed", "failed")
GROUPINGS = ("model", "prompt")
_PREVIEW = 120


@dataclass(frozen=True)
class RunRow:
    """A run as the read model holds it: identity, lifecycle, configuration and totals."""

    run_id: str
    agent: str
    status: str
    started_at: str
    ended_at: str | None
    event_count: int
    head_hash: str
    input: str | None
    input_ref: str | None
    models: list[str]
    prompts: dict[str, str]
    tags: list[str]
    code_version: str | None
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    tool_calls: int
    tool_errors: int
    guardrail_trips: int
    outcome: str | None
    error_type: str | None
    error_message: str | None
    parent_run_id: str | None
    parent_position: int | None
    relation: str | None

    @property
    def input_preview(self) -> str:
        """The input clipped to 120 characters, as the ledger's runs index shows it."""
        text = self.input if self.input is not None else f"<blob {self.input_ref}>"
        return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "\u2026"

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data, with `input_preview` added."""
        return asdict(self) | {"input_preview": self.input_preview}


@dataclass(frozen=True)
class StatsRow:
    """Usage of one model and/or prompt version (None where the grouping leaves it out).

    `prompt` is ``NAME=VERSION`` (None: calls made without a named prompt). Latencies are over
    model calls; `p95_latency_ms` is the nearest-rank 95th percentile. Tool calls are charged
    to the model call that requested them; `tool_error_rate` is failed results over results
    (None when no tool call of the group has returned).
    """

    provider: str | None
    model: str | None
    prompt: str | None
    model_calls: int
    runs: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    mean_latency_ms: float
    p95_latency_ms: float
    tool_calls: int
    tool_errors: int
    tool_error_rate: float | None

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data."""
        return asdict(self)


@dataclass(frozen=True)
class RunFilter:
    """Which runs to list: every field left None matches all."""

    status: str | None = None
    agent: str | None = None
    model: str | None = None
    prompt: tuple[str, str | None] | None = None
    tag: str | None = None
    since: str | None = None
    limit: int | None = None

    def check(self) -> None:
        """Refuse values no run could match because the call is wrong."""
        if self.status is not None and self.status not in STATUSES:
            reason = f"{self.status!r} is not one of {', '.join(STATUSES)}"
            raise ReadModelOptionError("status", reason)
        if self.prompt is not None:
            name, version = self.prompt
            if not name or (version is not None and not version):
                reason = f"give a prompt name and optionally a version, got {self.prompt!r}"
                raise ReadModelOptionError("prompt", reason)
        if self.limit is not None and self.limit < 1:
            raise ReadModelOptionError("limit", f"must be at least 1, got {self.limit}")


def select_runs(conn: Connection, where: RunFilter) -> list[RunRow]:
    """Runs matching `where`, newest first (ties by run id)."""
    where.check()
    r = RUNS.c
    clauses: list[ColumnElement[bool]] = []
    for column, value in ((r.status, where.status), (r.agent, where.agent)):
        if value is not None:
            clauses.append(column == value)
    if where.since is not None:
        clauses.append(r.started_at >= where.since)
    if where.model is not None:
        m = RUN_MODELS.c
        named = or_(m.model == where.model, (m.provider + ":" + m.model) == where.model)
        clauses.append(exists().where(m.run_id == r.run_id, named))
    if where.prompt is not None:
        p = RUN_PROMPTS.c
        name, version = where.prompt
        named = or_(p.name == name, p.role == name)  # a prompt name or the role using it
        match = named if version is None else and_(named, p.version == version)
        clauses.append(exists().where(p.run_id == r.run_id, match))
    if where.tag is not None:
        t = RUN_TAGS.c
        clauses.append(exists().where(t.run_id == r.run_id, t.tag == where.tag))
    query = select(RUNS).where(*clauses).order_by(r.started_at.desc(), r.run_id)
    if where.limit is not None:
        query = query.limit(where.limit)
    return [RunRow(**row._asdict()) for row in conn.execute(query)]


def check_grouping(group_by: Sequence[str]) -> tuple[str, ...]:
    """The grouping as a tuple, refusing unknown or empty ones."""
    wanted = tuple(group_by)
    unknown = [g for g in wanted if g not in GROUPINGS]
    if unknown or not wanted or isinstance(group_by, str):
        reason = f"give a non-empty list of {' and '.join(GROUPINGS)}, got {group_by!r}"
        raise ReadModelOptionError("group_by", reason)
    return wanted


def compute_stats(
    conn: Connection, group_by: Sequence[str] = GROUPINGS, since: str | None = None
) -> list[StatsRow]:
    """Usage per model and/or prompt version over model calls (of runs started at `since`+)."""
    grouping = check_grouping(group_by)
    m = MODEL_CALLS.c
    t = TOOL_CALLS.c
    tools = (
        select(
            t.run_id,
            t.model_position,
            func.count().label("calls"),
            func.count(t.ok).label("results"),
            func.sum(case((t.ok.is_(False), 1), else_=0)).label("errors"),
        )
        .where(t.model_position.is_not(None))
        .group_by(t.run_id, t.model_position)
        .subquery()
    )
    query = (
        select(
            m.run_id,
            m.provider,
            m.model,
            m.prompt_name,
            m.prompt_version,
            m.input_tokens,
            m.output_tokens,
            m.cost_usd,
            m.latency_ms,
            func.coalesce(tools.c.calls, 0).label("tool_calls"),
            func.coalesce(tools.c.results, 0).label("tool_results"),
            func.coalesce(tools.c.errors, 0).label("tool_errors"),
        )
        .outerjoin(tools, and_(tools.c.run_id == m.run_id, tools.c.model_position == m.position))
        .order_by(m.run_id, m.position)
    )
    if since is not None:
        query = query.join(RUNS, RUNS.c.run_id == m.run_id).where(RUNS.c.started_at >= since)
    groups: dict[tuple[str | None, ...], list[Any]] = {}
    for row in conn.execute(query):
        prompt = f"{row.prompt_name}={row.prompt_version}" if row.prompt_name else None
        key = (
            row.provider if "model" in grouping else None,
            row.model if "model" in grouping else None,
            prompt if "prompt" in grouping else None,
        )
        groups.setdefault(key, []).append(row)
    return [_stats_row(key, rows) for key, rows in sorted(groups.items(), key=_sort_key)]


def _sort_key(item: tuple[tuple[str | None, ...], list[Any]]) -> tuple[str, ...]:
    return tuple(part or "" for part in item[0])


def _stats_row(key: tuple[str | None, ...], rows: list[Any]) -> StatsRow:
    latencies = sorted(float(r.latency_ms) for r in rows)
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    calls = sum(int(r.tool_calls) for r in rows)
    results = sum(int(r.tool_results) for r in rows)
    errors = sum(int(r.tool_errors) for r in rows)
    return StatsRow(
        provider=key[0],
        model=key[1],
        prompt=key[2],
        model_calls=len(rows),
        runs=len({r.run_id for r in rows}),
        input_tokens=sum(r.input_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cost_usd=math.fsum(costs) if costs else None,
        mean_latency_ms=math.fsum(latencies) / len(latencies),
        p95_latency_ms=nearest_rank(latencies, 95),
        tool_calls=calls,
        tool_errors=errors,
        tool_error_rate=errors / results if results else None,
    )


def nearest_rank(ordered: Sequence[float], percent: float) -> float:
    """The nearest-rank percentile of ascending, non-empty `ordered`."""
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]
