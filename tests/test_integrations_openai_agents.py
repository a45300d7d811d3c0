"""`LedgerTracingProcessor`: OpenAI Agents SDK runs recorded, verified and diffed as ledger runs.

The real ``openai-agents`` package runs a triage agent that hands off to a forecaster, which
calls a function tool, against the loopback model server (Chat Completions; nothing leaves
127.0.0.1). The SDK's package is named ``agents``, which this repository's own ``agents/``
folder shadows whenever the repository root is on ``sys.path`` (``python -m pytest`` puts it
there), so each workflow runs as a user's script would: in a subprocess started in a temporary
directory with ``-P``, the bridge as installed. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentledger.agents.loopback import LoopbackServer, Reply, ToolCallReply
from agentledger.ledger import Ledger

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-test-not-a-real-key-0000000000000000"
ONE_SENTENCE = "Answer in one sentence."
FRENCH = "Answer in French."

WORKFLOW = '''"""Support desk: triage hands weather questions to a forecaster with a tool."""
import asyncio
import json
import sys

from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    Runner,
    function_tool,
    input_guardrail,
    set_default_openai_api,
    set_default_openai_client,
    set_trace_processors,
)
from openai import AsyncOpenAI

from agentledger.agents.integrations.openai_agents import LedgerTracingProcessor
from agentledger.ledger import Ledger

DB, URL, KEY, INSTRUCTIONS, QUESTION = sys.argv[1:6]


@function_tool
def weather(city: str) -> dict:
    """The sky over a city."""
    return {"city": city, "sky": "clear"}


@input_guardrail
def no_passwords(context, agent, given):
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered="password" in str(given))


forecaster = Agent(
    name="Forecaster", instructions=INSTRUCTIONS, tools=[weather], model="gpt-4o-mini"
)
triage = Agent(
    name="Triage",
    instructions="Hand weather questions to the forecaster.",
    handoffs=[forecaster],
    input_guardrails=[no_passwords],
    model="gpt-4o-mini",
)


async def main():
    set_default_openai_client(AsyncOpenAI(base_url=URL, api_key=KEY), use_for_tracing=False)
    set_default_openai_api("chat_completions")
    with Ledger.open(DB) as ledger:
        processor = LedgerTracingProcessor(ledger)
        set_trace_processors([processor])  # replaces the exporter to OpenAI
        try:
            result = await Runner.run(triage, QUESTION)
            output = result.final_output
        except InputGuardrailTripwireTriggered as tripped:
            output = type(tripped).__name__
        print(json.dumps({"run_id": processor.run_ids[0], "output": output}))


asyncio.run(main())
'''


SPANS = '''"""Spans made with the SDK's tracing API: a Responses call, a failing tool, threads."""
import json
import sys
import threading

from agents.tracing import (
    SpanError,
    agent_span,
    custom_span,
    function_span,
    response_span,
    set_trace_processors,
    trace,
)
from openai.types.responses import Response

from agentledger.agents.integrations.openai_agents import LedgerTracingProcessor
from agentledger.ledger import Ledger

ANSWER = Response.model_validate({
    "id": "resp_1", "created_at": 1763000000, "model": "gpt-4o-mini", "object": "response",
    "instructions": "You write haiku.", "parallel_tool_calls": False, "tool_choice": "auto",
    "tools": [], "output": [{"type": "message", "id": "msg_1", "role": "assistant",
    "status": "completed", "content": [{"type": "output_text", "text": "Snow on the cedar",
    "annotations": []}]}], "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 0}},
})


def poet(number):
    with trace(f"poem {number}", group_id="poems", metadata={"n": str(number)}):
        with agent_span(name="Poet") as agent:
            with response_span(response=ANSWER) as call:
                call.span_data.input = f"A haiku about snow, {number}"
            with custom_span("review", {"words": 4}):
                with function_span("count_syllables") as tool:
                    tool.span_data.input = '{"text": "Snow on the cedar", "api_key": "sk-live-1"}'
                    tool.set_error(SpanError(message="syllable table missing", data=None))
            agent.span_data.tools = ["count_syllables"]


with Ledger.open(sys.argv[1]) as ledger:
    processor = LedgerTracingProcessor(ledger)
    set_trace_processors([processor])
    threads = [threading.Thread(target=poet, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps(processor.run_ids))
'''


def answer(vendor: str, body: Mapping[str, Any]) -> Reply:
    """Triage hands off; the forecaster calls the tool once, then answers from its result."""
    del vendor
    tools = {tool["function"]["name"] for tool in body.get("tools") or []}
    if "transfer_to_forecaster" in tools:
        return Reply(tool_calls=[ToolCallReply("transfer_to_forecaster", {}, id="call-handoff")])
    said = json.dumps(body["messages"])
    if "weather" in tools and "clear" not in said:
        return Reply(tool_calls=[ToolCallReply("weather", {"city": "Oslo"}, id="call-weather")])
    return Reply(text="Clear skies over Oslo.")


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """The loopback model server, answering by `answer`."""
    with LoopbackServer(responder=answer) as running:
        yield running


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest) -> str:
    """A ledger URL on SQLite and on the real PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


def run_workflow(
    tmp_path: Path, db: str, server: LoopbackServer, instructions: str, question: str
) -> dict[str, Any]:
    """Run the workflow script as a user would, outside the checkout; its printed result."""
    args = (db, server.openai_url, KEY, instructions, question)
    result: dict[str, Any] = run_script(tmp_path, "support_desk.py", WORKFLOW, *args)
    return result


def run_script(where: Path, name: str, text: str, *args: str) -> Any:
    """Run ``text`` as script ``name`` with ``python -P`` in ``where``; its printed JSON.

    ``-P`` and no ``PYTHONPATH``: the checkout is not on ``sys.path``, as for an installed
    agentledger, so ``agents`` is the SDK's package.
    """
    script = where / name
    script.write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "OPENAI_API_KEY"}}
    done = subprocess.run(
        [sys.executable, "-P", script.name, *args],
        cwd=where,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def cli(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Our CLI on ``db``."""
    return subprocess.run(
        [sys.executable, "-m", "agentledger.cli", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_run_with_a_handoff_and_a_tool_call_is_recorded_verified_and_diffed(
    tmp_path: Path, db: str, server: LoopbackServer
) -> None:
    """Handoff, tool, guardrail and model calls are events; the diff names the instruction."""
    first = run_workflow(tmp_path, db, server, ONE_SENTENCE, "What is the weather in Oslo?")
    second = run_workflow(tmp_path, db, server, FRENCH, "What is the weather in Oslo?")
    assert first["output"] == second["output"] == "Clear skies over Oslo."
    with Ledger.open(db) as ledger:
        assert ledger.verify(first["run_id"]).ok
        assert ledger.verify(second["run_id"]).ok
        info = ledger.run(first["run_id"])
        assert (info.agent, info.status) == ("openai-agents", "completed")
        events = list(ledger.events(first["run_id"]))
        steps = [e.payload["name"] for e in events if e.kind == "StepStarted"]
        assert steps == ["agent Triage", "guardrail no_passwords", "agent Forecaster"]
        kinds = [e.kind for e in events]
        assert kinds.count("ModelCalled") == 3
        assert "GuardrailTripped" not in kinds
        guardrail_end = next(
            e
            for e in events
            if e.kind == "StepCompleted" and e.payload.get("output") == {"triggered": False}
        )
        assert guardrail_end.payload["status"] == "ok"
        handoff = next(e for e in events if e.kind == "PlanProposed")
        assert handoff.payload["plan"] == {"handoff": {"from": "Triage", "to": "Forecaster"}}
        called = next(e for e in events if e.kind == "ToolCalled")
        returned = next(e for e in events if e.kind == "ToolReturned")
        assert (called.payload["tool"], called.payload["arguments"]) == (
            "weather",
            {"city": "Oslo"},
        )
        assert returned.payload["ok"] is True
        assert "'sky': 'clear'" in str(returned.payload["data"])
        forecaster_step = next(
            e.payload["step_id"] for e in events if e.payload.get("name") == "agent Forecaster"
        )
        assert called.payload["step_id"] == forecaster_step
        model = next(e for e in events if e.kind == "ModelCalled")
        assert model.payload["model"] == "gpt-4o-mini"
        assert model.payload["usage"]["input_tokens"] > 0
        assert model.payload["prompt"]["name"] == "Triage"
        messages = ledger.conversation(model.payload["messages_ref"])
        assert messages[0]["content"] == "Hand weather questions to the forecaster."
        assert messages[-1]["content"] == "What is the weather in Oslo?"
        response = ledger.blob(model.payload["response_ref"])["message"]
        assert response["tool_calls"][0]["function"]["name"] == "transfer_to_forecaster"
        assert kinds[-1] == "RunCompleted"
    exported = tmp_path / "run.jsonl"
    assert cli(db, "export", first["run_id"], "-o", str(exported)).returncode == 0
    assert KEY not in exported.read_text(encoding="utf-8")
    traced = tmp_path / "run.otlp.json"
    assert (
        cli(db, "export", first["run_id"], "--format", "otlp-json", "-o", str(traced)).returncode
        == 0
    )
    spans = [
        span["name"]
        for resource in json.loads(traced.read_text(encoding="utf-8"))["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    assert {"step agent Forecaster", "chat gpt-4o-mini", "execute_tool weather"} <= set(spans)
    diff = cli(db, "diff", first["run_id"], second["run_id"])
    assert "prompt: Forecaster" in diff.stdout, diff.stdout + diff.stderr
    assert f"-{ONE_SENTENCE}" in diff.stdout
    assert f"+{FRENCH}" in diff.stdout
    assert "step agent Triage #1" in diff.stdout


def test_a_tripped_guardrail_is_recorded_and_fails_the_run(
    tmp_path: Path, sqlite_url: str, server: LoopbackServer
) -> None:
    """The tripwire that stops the SDK's run is a GuardrailTripped, and the run fails."""
    done = run_workflow(tmp_path, sqlite_url, server, ONE_SENTENCE, "my password is hunter2")
    assert done["output"] == "InputGuardrailTripwireTriggered"
    with Ledger.open(sqlite_url) as ledger:
        assert ledger.verify(done["run_id"]).ok
        assert ledger.run(done["run_id"]).status == "failed"
        events = list(ledger.events(done["run_id"]))
        tripped = next(e for e in events if e.kind == "GuardrailTripped")
        assert (tripped.payload["guardrail"], tripped.payload["action"]) == (
            "no_passwords",
            "tripwire",
        )
        assert events[-1].kind == "RunFailed"
        assert "Guardrail tripwire triggered" in events[-1].payload["error"]["message"]
        assert "ModelCalled" not in {e.kind for e in events}


def test_responses_custom_spans_and_tool_errors_from_threads_are_recorded(
    tmp_path: Path, sqlite_url: str
) -> None:
    """Four traces at once, from threads: a Responses call, a custom step, a failing tool each.

    Each trace is its own run, recorded in order, and the API key in the tool's arguments is
    redacted.
    """
    run_ids = run_script(tmp_path, "poems.py", SPANS, sqlite_url)
    assert len(set(run_ids)) == 4
    with Ledger.open(sqlite_url) as ledger:
        for run_id in run_ids:
            assert ledger.verify(run_id).ok
            everything = list(ledger.events(run_id))
            facts = [e.payload for e in everything if e.kind == "PolicyDecided"]
            assert any("api_key" in " ".join(f["reasons"]) for f in facts), facts
            events = [e for e in everything if e.kind != "PolicyDecided"]
            assert [e.kind for e in events] == [
                "RunStarted",
                "StepStarted",
                "ModelCalled",
                "StepStarted",
                "ToolCalled",
                "ToolReturned",
                "StepCompleted",
                "StepCompleted",
                "RunCompleted",
            ]
            started = events[0].payload["input"]
            assert started["group_id"] == "poems"
            assert started["workflow"] == f"poem {started['metadata']['n']}"
            model = events[2].payload
            assert (model["model"], model["usage"]["total_tokens"]) == ("gpt-4o-mini", 17)
            assert model["prompt"]["name"] == "Poet"
            assert ledger.blob(model["prompt"]["text_ref"]) == "You write haiku."
            asked = ledger.conversation(model["messages_ref"])
            assert asked == [
                {"role": "user", "content": f"A haiku about snow, {started['metadata']['n']}"}
            ]
            said = ledger.blob(model["response_ref"])["message"]
            assert said["type"] == "message"
            assert said["content"][0]["text"] == "Snow on the cedar"
            assert events[3].payload["name"] == "review"
            assert events[3].payload["parent_step_id"] == events[1].payload["step_id"]
            called, returned = events[4].payload, events[5].payload
            assert called["step_id"] == events[3].payload["step_id"]
            assert called["arguments"]["text"] == "Snow on the cedar"
            assert "sk-live-1" not in json.dumps(called)
            assert returned["ok"] is False
            assert returned["error"]["message"] == "syllable table missing"
            assert events[7].payload["output"]["tools"] == ["count_syllables"]


def test_the_bridge_imports_the_installed_sdk_past_a_shadowing_folder() -> None:
    """Under pytest the repository root is on sys.path, yet ``agents`` is the SDK's package."""
    assert str(ROOT) in [str(Path(p).resolve()) for p in sys.path if p]
    from agentledger.agents.integrations import openai_agents

    sdk = sys.modules["agents"]
    assert sdk.__file__ is not None
    assert Path(sdk.__file__).resolve().parent != ROOT / "agents"
    assert issubclass(openai_agents.LedgerTracingProcessor, sdk.TracingProcessor)


def _forget_the_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name.startswith("agentledger.agents.integrations"):
            monkeypatch.delitem(sys.modules, name)


def _not_installed(name: str) -> importlib.metadata.Distribution:
    raise importlib.metadata.PackageNotFoundError(name)


@pytest.mark.parametrize("how", ["not installed", "import blocked"])
def test_a_missing_extra_gives_a_one_line_install_hint(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the SDK, importing the bridge says how to install it, in one line."""
    _forget_the_bridge(monkeypatch)
    if how == "not installed":
        monkeypatch.setattr(importlib.metadata, "distribution", _not_installed)
    else:
        monkeypatch.setitem(sys.modules, "agents", None)
    with pytest.raises(ImportError, match=r"pip install 'agentledger\[openai-agents\]'$") as e:
        import agentledger.agents.integrations.openai_agents  # noqa: F401
    assert "\n" not in str(e.value)


def test_the_core_install_does_not_pull_the_agents_sdk() -> None:
    """The SDK is the [openai-agents] extra; the dev extra (CI) installs it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any("openai-agents" in dep for dep in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(dep.startswith("openai-agents>=") for dep in extras["openai-agents"])
    assert "agentledger[openai-agents]" in extras["dev"]


def test_another_module_named_agents_is_named_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder imported as ``agents`` before the bridge is refused by name, never patched."""
    _forget_the_bridge(monkeypatch)
    impostor = types.ModuleType("agents")
    impostor.__file__ = str(ROOT / "agents" / "__init__.py")
    monkeypatch.setitem(sys.modules, "agents", impostor)
    with pytest.raises(ImportError, match="not the OpenAI Agents SDK") as e:
        import agentledger.agents.integrations.openai_agents  # noqa: F401
    assert str(ROOT / "agents" / "__init__.py") in str(e.value)
    assert sys.modules["agents"] is impostor
