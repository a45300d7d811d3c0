"""Fakes for testing agents offline: scripted models per role, script builders, scenarios.

Owns what users need to test their own runs without keys or network: ``ScriptedModel`` (re-
exported; it records every request and raises ``ScriptExhaustedError`` when its script runs
out, never answering with nothing), ``scripted_roles`` (one scripted model per role), one script
builder per orchestration (``pipeline_script``, ``reasoning_script``, ``coordinator_script``,
``tool_agent_script``, ``router_script``), ``ScriptedClient``/``AsyncScriptedClient`` (an
offline chat client with OpenAI's shape, instrumented by ``run.instrument``, for recording your
own agent code) and ``load_scenario`` for the bundled offline
scenarios (JSON files shipped beside this module, e.g. ``demo_pipeline.json``). Must not record
anything or touch the network.

Script items: a ``str`` is a text answer; a ``Mapping`` is answered as its minified JSON text;
a ``Message`` (see ``tool_call``) is answered as it is.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agentledger.agents._config import AgentConfig
from agentledger.agents._scripted_client import (
    AsyncScriptedClient,
    ScriptedCallError,
    ScriptedClient,
    ScriptedCompletion,
    ScriptedInstrumentation,
    scripted_instrumentation,
)
from agentledger.agents.models import (
    Message,
    ScriptedModel,
    ScriptExhaustedError,
    ToolCallRequest,
    scripted_tool_call,
)
from agentledger.ledger import Ledger, SequentialIds, StepClock, unpack_blob, unpack_state

__all__ = [
    "TIMING_FIELDS",
    "AsyncScriptedClient",
    "Scenario",
    "ScriptExhaustedError",
    "ScriptItem",
    "ScriptedCallError",
    "ScriptedClient",
    "ScriptedCompletion",
    "ScriptedInstrumentation",
    "ScriptedModel",
    "answers_from_json",
    "comparable_events",
    "coordinator_script",
    "database_bytes",
    "event_kinds",
    "json_answer",
    "load_scenario",
    "memory_ledger",
    "pipeline_script",
    "reasoning_script",
    "router_script",
    "scripted_instrumentation",
    "scripted_roles",
    "tool_agent_script",
    "tool_call",
]

ScriptItem = str | Mapping[str, Any] | Message
"""One scripted answer: text, a JSON object (sent as minified JSON text) or a message."""


def json_answer(value: Any) -> str:
    """``value`` as the minified JSON text a well-behaved model answers with."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tool_call(name: str, arguments: Mapping[str, JsonValue] | None = None) -> Message:
    """An assistant answer calling ``name`` with ``arguments`` (ids numbered ``call_1``...)."""
    return scripted_tool_call(name, dict(arguments or {}))


def _answer(item: ScriptItem) -> str | Message:
    if isinstance(item, str | Message):
        return item
    return json_answer(dict(item))


def scripted_roles(
    scripts: Mapping[str, Sequence[ScriptItem]],
    *,
    prefix: str = "scripted",
    keep_requests: int | None = None,
) -> dict[str, ScriptedModel]:
    """One ``ScriptedModel`` per role, named ``scripted:<role>``, answering its items in order.

    ``keep_requests`` bounds what each keeps in ``.requests`` (see `ScriptedModel`).
    """
    return {
        role: ScriptedModel(
            [_answer(item) for item in items], name=f"{prefix}:{role}", keep_requests=keep_requests
        )
        for role, items in scripts.items()
    }


def _items(value: ScriptItem | Sequence[ScriptItem]) -> list[ScriptItem]:
    if isinstance(value, str | Message | Mapping):
        return [value]
    return list(value)


def _calls(calls: Sequence[tuple[str, Mapping[str, JsonValue]] | ScriptItem]) -> list[ScriptItem]:
    return [tool_call(c[0], c[1]) if isinstance(c, tuple) else c for c in calls]


def pipeline_script(
    *,
    plan: ScriptItem | Sequence[ScriptItem],
    calls: Sequence[tuple[str, Mapping[str, JsonValue]] | ScriptItem] = (),
    answer: ScriptItem | Sequence[ScriptItem] = "Done.",
) -> dict[str, ScriptedModel]:
    """Scripted models for the pipeline, by role.

    The planner answers ``plan`` (a list: a retry's answers too), the executor one item per
    step (a ``(tool, args)`` pair becomes a tool call), the synthesizer ``answer``.
    """
    return scripted_roles(
        {"planner": _items(plan), "executor": _calls(calls), "synthesizer": _items(answer)}
    )


def reasoning_script(
    *,
    plan: ScriptItem | Sequence[ScriptItem],
    choices: Sequence[ScriptItem] = (),
    repairs: Sequence[ScriptItem] = (),
    answer: ScriptItem | Sequence[ScriptItem] = "Done.",
) -> dict[str, ScriptedModel]:
    """Scripted models for the REASON/THINK/TOOL loop, by role.

    REASON answers the plan then its tool choices, THINK its repairs, the synthesizer the
    final answer(s).
    """
    return scripted_roles(
        {
            "reasoner": [*_items(plan), *choices],
            "thinker": list(repairs),
            "synthesizer": _items(answer),
        }
    )


def coordinator_script(
    *,
    decisions: Sequence[ScriptItem],
    workers: Mapping[str, Sequence[tuple[str, Mapping[str, JsonValue]] | ScriptItem]],
    catalog: Sequence[str] = ("utility", "office"),
) -> dict[str, ScriptedModel]:
    """Scripted models for the coordinator, by role.

    The coordinator answers its DELEGATE/DONE ``decisions``; each worker its tool calls. A
    worker of ``catalog`` (default: the built-in catalog) not in ``workers`` gets an empty
    script, so calling it fails loudly.
    """
    scripts: dict[str, Sequence[ScriptItem]] = {"coordinator": list(decisions)}
    for worker in [*catalog, *workers]:
        scripts[f"worker:{worker}"] = _calls(workers.get(worker, ()))
    return scripted_roles(scripts)


def tool_agent_script(
    *,
    turns: Sequence[tuple[str, Mapping[str, JsonValue]] | ScriptItem],
    sub_agents: Mapping[str, Sequence[tuple[str, Mapping[str, JsonValue]] | ScriptItem]] = {},
    keep_requests: int | None = None,
) -> dict[str, ScriptedModel]:
    """Scripted models for the tool agent, by role.

    ``turns`` are the agent's answers (tool calls or the final text); each sub-agent's turns
    go to role ``agent:<name>``. ``keep_requests`` bounds each model's ``.requests`` (a long
    run's would otherwise hold its history once per call).
    """
    scripts: dict[str, Sequence[ScriptItem]] = {"agent": _calls(turns)}
    for name, calls in sub_agents.items():
        scripts[f"agent:{name}"] = _calls(calls)
    return scripted_roles(scripts, keep_requests=keep_requests)


def router_script(
    *,
    plan: ScriptItem | Sequence[ScriptItem],
    answer: ScriptItem | Sequence[ScriptItem] = "Done.",
) -> dict[str, ScriptedModel]:
    """Models for the router: its router plan(s) and the chat agent's answer(s)."""
    return scripted_roles({"router": _items(plan), "chat": _items(answer)})


def answers_from_json(items: Sequence[Any]) -> list[ScriptItem]:
    """Script items from their JSON form.

    Each item is a string, ``{"json": value}``, ``{"tool": name, "args": {...}}`` or
    ``{"content": text, "tool_calls": [{"name": ..., "arguments": {...}}]}``.
    """
    answers: list[ScriptItem] = []
    for item in items:
        if isinstance(item, str):
            answers.append(item)
        elif "json" in item:
            answers.append(json_answer(item["json"]))
        elif "tool" in item:
            answers.append(tool_call(item["tool"], item.get("args", {})))
        else:
            calls = [
                ToolCallRequest(id="", name=c["name"], arguments=c.get("arguments", {}))
                for c in item.get("tool_calls", [])
            ]
            answers.append(Message.assistant(item.get("content", ""), calls))
    return answers


@dataclass(frozen=True)
class Scenario:
    """A bundled offline run: agent, question, config and a scripted model per role."""

    name: str
    agent: str
    question: str
    config: AgentConfig
    models: dict[str, ScriptedModel]


def memory_ledger(seed: str = "agents") -> Ledger:
    """An in-memory ledger with a step clock and sequential ids (deterministic envelopes)."""
    return Ledger.open("memory://", clock=StepClock(), ids=SequentialIds(seed))


def event_kinds(ledger: Ledger, run_id: str, *, steps: bool = True) -> list[str]:
    """The kinds of a run's events in order (without StepStarted/StepCompleted if not steps)."""
    skip = set() if steps else {"StepStarted", "StepCompleted"}
    return [e.kind for e in ledger.events(run_id) if e.kind not in skip]


TIMING_FIELDS = frozenset({"latency_ms", "backoff_s", "head_hash"})
"""Payload fields that depend on timing (or, for ``head_hash``, on timestamps), which a
comparison of two runs' events ignores."""


def comparable_events(ledger: Ledger, run_id: str) -> list[tuple[str, Any]]:
    """A run's events as (kind, payload without timing fields), for comparing two runs."""
    return [(e.kind, _without_timing(e.payload)) for e in ledger.events(run_id)]


def _without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in TIMING_FIELDS}
    if isinstance(value, list):
        return [_without_timing(item) for item in value]
    return value


def database_bytes(path: str | Path) -> bytes:
    """Everything a SQLite ledger file holds, as one searchable byte string.

    That is the raw bytes of the file (and its ``-wal``) plus every cell of every table, with
    packed cells (event state, blobs; see `unpack_state`) and zlib cells (older blobs) also
    unpacked. Use it to prove a secret is nowhere in a database:
    ``assert b"sk-..." not in database_bytes(path)``.
    """
    file = Path(path)
    parts = [p.read_bytes() for p in (file, Path(f"{file}-wal")) if p.exists()]
    with sqlite3.connect(file) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    if isinstance(cell, str):
                        parts.append(cell.encode())
                    elif isinstance(cell, bytes):
                        parts.append(cell)
                        parts.extend(_unpacked(cell))
    return b"\n".join(parts)


def _unpacked(cell: bytes) -> list[bytes]:
    """The cell unpacked in every stored form it is valid in (state, packed or zlib blob)."""
    found = []
    unpackers: list[Callable[[bytes], bytes]] = [unpack_state]
    unpackers += [partial(unpack_blob, encoding) for encoding in ("zstd-d1", "zlib")]
    for unpack in unpackers:
        with contextlib.suppress(ValueError):
            found.append(unpack(cell))
    return found


def load_scenario(name: str = "demo_pipeline") -> Scenario:
    """Load ``<name>.json`` shipped with ``agentledger.agents`` (fresh models every call)."""
    text = resources.files("agentledger.agents").joinpath(f"{name}.json").read_text("utf-8")
    data = json.loads(text)
    scripts = {role: answers_from_json(items) for role, items in data["script"].items()}
    return Scenario(
        name=name,
        agent=data["agent"],
        question=data["question"],
        config=AgentConfig.model_validate(data.get("config", {})),
        models=scripted_roles(scripts, prefix=f"scripted:{name}"),
    )
