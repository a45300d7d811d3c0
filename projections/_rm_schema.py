"""The SQL read model's tables (SQLAlchemy Core), in the same database as the ledger's events.

Owns the table definitions and `SCHEMA_VERSION`. Every table is prefixed ``al_rm_`` and holds
only facts derived from events, so it can be dropped and rebuilt at any time; `al_rm_tracking`
records, per projection name, the last notification id whose rows are written (it changes in
the same transaction as those rows). Floats are stored as read from the events; the one
aggregate over floats (a run's cost) is summed exactly (`math.fsum`), so a rebuild reproduces
it bit for bit. Must not read the ledger or write rows.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = [
    "DATA_TABLES",
    "GUARDRAIL_TRIPS",
    "METADATA",
    "MODEL_CALLS",
    "RUNS",
    "RUN_MODELS",
    "RUN_PROMPTS",
    "RUN_TAGS",
    "SCHEMA_VERSION",
    "SEARCH",
    "TOOL_CALLS",
    "TRACKING",
]

SCHEMA_VERSION = 2
"""Bumped whenever a table changes; a stored model of another version is rebuilt."""

METADATA = MetaData()

_ID = String(64)
_TIME = String(40)

TRACKING = Table(
    "al_rm_tracking",
    METADATA,
    Column("name", String(100), primary_key=True),
    Column("position", BigInteger, nullable=False),
    Column("schema_version", Integer, nullable=False),
)
"""Per projection: the last notification id applied (0: none), and the tables' version."""

RUNS = Table(
    "al_rm_runs",
    METADATA,
    Column("run_id", _ID, primary_key=True),
    Column("agent", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", _TIME, nullable=False),
    Column("ended_at", _TIME),
    Column("event_count", Integer, nullable=False),
    Column("head_hash", String(64), nullable=False),
    Column("input", Text),
    Column("input_ref", Text),
    Column("models", JSON(none_as_null=True), nullable=False),
    Column("prompts", JSON(none_as_null=True), nullable=False),
    Column("tags", JSON(none_as_null=True), nullable=False),
    Column("code_version", Text),
    Column("model_calls", Integer, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cost_usd", Float),
    Column("tool_calls", Integer, nullable=False),
    Column("tool_errors", Integer, nullable=False),
    Column("guardrail_trips", Integer, nullable=False),
    Column("outcome", Text),
    Column("error_type", Text),
    Column("error_message", Text),
    Column("parent_run_id", _ID),
    Column("parent_position", Integer),
    Column("relation", String(16)),
    Index("al_rm_runs_started", "started_at"),
    Index("al_rm_runs_status", "status", "started_at"),
)
"""One row per run: identity, lifecycle, configuration and totals over its calls."""

RUN_PROMPTS = Table(
    "al_rm_run_prompts",
    METADATA,
    Column("run_id", _ID, primary_key=True),
    Column("role", String(200), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("version", String(100), primary_key=True),
    Column("hash", Text, nullable=False),
    Index("al_rm_run_prompts_version", "name", "version"),
)
"""Prompts a run used, by role: its configuration's, and any a model call named besides."""

RUN_MODELS = Table(
    "al_rm_run_models",
    METADATA,
    Column("run_id", _ID, primary_key=True),
    Column("role", String(200), primary_key=True),
    Column("provider", String(100), primary_key=True),
    Column("model", String(200), primary_key=True),
    Index("al_rm_run_models_model", "model"),
)
"""Models a run used, by role: its configuration's, and every model it called."""

RUN_TAGS = Table(
    "al_rm_run_tags",
    METADATA,
    Column("run_id", _ID, primary_key=True),
    Column("tag", String(200), primary_key=True),
    Index("al_rm_run_tags_tag", "tag"),
)
"""A run's tags, one row each (for filtering)."""

MODEL_CALLS = Table(
    "al_rm_model_calls",
    METADATA,
    Column("run_id", _ID, primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("timestamp", _TIME, nullable=False),
    Column("call_id", Text, nullable=False),
    Column("step_id", Text),
    Column("role", Text),
    Column("provider", String(100), nullable=False),
    Column("model", String(200), nullable=False),
    Column("prompt_name", String(200)),
    Column("prompt_version", String(100)),
    Column("prompt_hash", Text),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("total_tokens", BigInteger, nullable=False),
    Column("cost_usd", Float),
    Column("latency_ms", Float, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("finish_reason", Text),
    Column("error_type", Text),
    Column("served_from", Text),
    Index("al_rm_model_calls_model", "provider", "model"),
    Index("al_rm_model_calls_prompt", "prompt_name", "prompt_version"),
)
"""One row per ModelCalled. `role` is the event's actor (the agent role that called)."""

TOOL_CALLS = Table(
    "al_rm_tool_calls",
    METADATA,
    Column("run_id", _ID, primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("timestamp", _TIME, nullable=False),
    Column("call_id", Text, nullable=False),
    Column("tool", String(200), nullable=False),
    Column("tool_version", Text, nullable=False),
    Column("step_id", Text),
    Column("effectful", Boolean, nullable=False),
    Column("caused_by", Integer),
    Column("model_position", Integer),
    Column("result_position", Integer),
    Column("ok", Boolean),
    Column("result_type", Text),
    Column("error_code", Text),
    Column("latency_ms", Float),
    Column("served_from", Text),
    Index("al_rm_tool_calls_tool", "tool"),
)
"""One row per ToolCalled, completed by its ToolReturned (`ok` is NULL until then).

`model_position` is the model call the tool call is charged to: its `caused_by` when that is a
model call of the run, else the run's last model call before it (NULL if none)."""

GUARDRAIL_TRIPS = Table(
    "al_rm_guardrail_trips",
    METADATA,
    Column("run_id", _ID, primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("timestamp", _TIME, nullable=False),
    Column("guardrail", String(200), nullable=False),
    Column("action", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("step_id", Text),
)
"""One row per GuardrailTripped."""

SEARCH = Table(
    "al_rm_search",
    METADATA,
    Column("run_id", _ID, primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("part", Integer, primary_key=True, autoincrement=False),
    Column("source", String(16), nullable=False),
    Column("body", Text, nullable=False),
)
"""The text full-text search finds runs by: a run's input (``input``), its answers
(``answer``), and per model call the request's last message and the response (``message``),
as plain text. Created by `_rm_search.create_search_table`: an FTS5 table on SQLite, a table
with a GIN index over ``to_tsvector('simple', body)`` on PostgreSQL."""

DATA_TABLES: tuple[Table, ...] = (
    RUNS,
    RUN_PROMPTS,
    RUN_MODELS,
    RUN_TAGS,
    MODEL_CALLS,
    TOOL_CALLS,
    GUARDRAIL_TRIPS,
    SEARCH,
)
"""Every table of rows (not the tracking table), in dependency order."""
