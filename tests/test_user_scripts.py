"""Plain user scripts with the real SDKs, recorded against a loopback server, replayed offline.

Each script is what a user would write: it creates its own `openai` (sync and async, with
``asyncio.gather``, a tool call and a stream) or `anthropic` client, passes it through
``run.instrument``, and records itself with ``Ledger.record_function`` when run as
``python my_agent.py``. The server is then stopped, so replay can only answer from the record:
``agentledger replay RUN`` must say identical; after one prompt string in the script changes,
it must report the divergence at the position of the first call that sends it. On SQLite and
PostgreSQL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentledger.agents.loopback import LoopbackServer, Reply, ToolCallReply
from agentledger.ledger import Ledger

pytestmark = pytest.mark.slow

OPENAI_SCRIPT = '''"""Trip planner: the OpenAI SDK, sync and async, a tool and a stream."""
import asyncio
import json
import os
import sys

from openai import AsyncOpenAI, OpenAI

from agentledger.ledger import Ledger

SYSTEM = "You plan short trips."
URL, KEY = os.environ["TRIP_BASE_URL"], "sk-test-not-a-real-key-0000000000000000"
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def weather(city):
    return {"city": city, "sky": "clear"}


async def per_city(run, client, city):
    tool = run.recorded_tool(weather)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": city}]
    first = await client.chat.completions.create(
        model="gpt-4o-mini", messages=messages, tools=[WEATHER])
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id,
                 "content": json.dumps(tool(**json.loads(call.function.arguments)))}]
    stream = await client.chat.completions.create(
        model="gpt-4o-mini", messages=messages, stream=True)
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


def plan(run, cities):
    with OpenAI(base_url=URL, api_key=KEY) as sdk:
        intro = run.instrument(sdk).chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": SYSTEM},
                      {"role": "user", "content": "Which cities? " + ", ".join(cities)}])

    async def all_cities():
        async with AsyncOpenAI(base_url=URL, api_key=KEY) as sdk:
            client = run.instrument(sdk)
            return await asyncio.gather(*(per_city(run, client, c) for c in cities))

    return [intro.choices[0].message.content, *asyncio.run(all_cities())]


if __name__ == "__main__":
    with Ledger.open(sys.argv[1]) as ledger:
        answers, run_id = ledger.record_function(plan, ["Oslo", "Lima"])
    print(json.dumps({"run_id": run_id, "answers": answers}))
'''

ANTHROPIC_SCRIPT = '''"""Trip planner: the Anthropic SDK, messages.create and messages.stream."""
import asyncio
import json
import os
import sys

from anthropic import Anthropic, AsyncAnthropic

from agentledger.ledger import Ledger

SYSTEM = "You plan short trips."
URL, KEY = os.environ["TRIP_BASE_URL"], "sk-ant-test-not-a-real-key-00000000000000"


def plan(run, city):
    with Anthropic(base_url=URL, api_key=KEY) as sdk:
        first = run.instrument(sdk).messages.create(
            model="claude-haiku-4-5", max_tokens=100, system=SYSTEM,
            messages=[{"role": "user", "content": city}])

    async def streamed():
        async with AsyncAnthropic(base_url=URL, api_key=KEY) as sdk:
            async with run.instrument(sdk).messages.stream(
                model="claude-haiku-4-5", max_tokens=100, system=SYSTEM,
                messages=[{"role": "user", "content": city + " again"}],
            ) as stream:
                return "".join([piece async for piece in stream.text_stream])

    return [first.content[0].text, asyncio.run(streamed())]


if __name__ == "__main__":
    with Ledger.open(sys.argv[1]) as ledger:
        answers, run_id = ledger.record_function(plan, "Oslo")
    print(json.dumps({"run_id": run_id, "answers": answers}))
'''


def responder(vendor: str, body: Mapping[str, Any]) -> Reply:
    """The tool for a city question, then a streamed answer; Anthropic answers in text."""
    last = body["messages"][-1]
    if vendor == "openai" and last["role"] == "user" and "Which" not in str(last["content"]):
        return Reply(tool_calls=[ToolCallReply("weather", {"city": last["content"]})])
    return Reply(text=f"Go: clear skies ({vendor}).", chunk_chars=4)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """An OpenAI- and Anthropic-compatible server on 127.0.0.1 (stopped by the tests)."""
    with LoopbackServer(responder=responder) as running:
        yield running


def python(script: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run ``python SCRIPT ARGS`` in its directory; its stdout."""
    done = subprocess.run(
        [sys.executable, script.name, *args],
        cwd=script.parent,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def agentledger(cwd: Path, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI from ``cwd`` (where the script's module is found), nothing reachable."""
    env = {**os.environ, "TRIP_BASE_URL": "http://127.0.0.1:9/v1"}  # replay must not call out
    return subprocess.run(
        [sys.executable, "-m", "agentledger.cli", "--db", db, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def first_call_with(db: str, run_id: str, text: str) -> int:
    """The position of the run's first ModelCalled whose request holds ``text``."""
    with Ledger.open(db) as ledger:
        for event in ledger.events(run_id):
            if event.kind != "ModelCalled":
                continue
            request = json.dumps(
                [
                    ledger.conversation(event.payload["messages_ref"]),
                    event.payload.get("params", {}),
                ]
            )
            if text in request:
                return event.position
    raise AssertionError(f"no call of run {run_id} sends {text!r}")


@pytest.mark.parametrize(
    ("script", "calls"), [(OPENAI_SCRIPT, 5), (ANTHROPIC_SCRIPT, 2)], ids=["openai", "anthropic"]
)
def test_a_user_script_replays_offline_and_names_the_changed_prompt(
    tmp_path: Path, db: str, server: LoopbackServer, script: str, calls: int
) -> None:
    """Recorded live, replayed identical with the server stopped; an edited prompt diverges."""
    path = tmp_path / "my_agent.py"
    path.write_text(script, encoding="utf-8")
    base = server.openai_url if "openai" in script else server.anthropic_url
    recorded = json.loads(python(path, db, env={"TRIP_BASE_URL": base}))
    run_id = recorded["run_id"]
    assert all(answer.startswith("Go: clear skies") for answer in recorded["answers"])
    with Ledger.open(db) as ledger:
        assert ledger.verify(run_id).ok
        events = ledger.events(run_id)
        assert events[0].payload["entry"]["path"] == "my_agent:plan"
        assert sum(e.kind == "ModelCalled" for e in events) == calls
        assert any(e.payload.get("chunk_count") for e in events if e.kind == "ModelCalled")
        assert "not-a-real-key" not in json.dumps([e.payload for e in events])
    server.stop()

    same = agentledger(tmp_path, db, "replay", run_id)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "identical" in same.stdout

    position = first_call_with(db, run_id, "You plan short trips.")
    path.write_text(script.replace("You plan short trips.", "You plan long trips."), "utf-8")
    changed = agentledger(tmp_path, db, "replay", run_id)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert f"DIVERGED at position {position}" in changed.stdout
    assert "short trips." in changed.stdout  # the recorded text and the new one, named
    assert "long trips." in changed.stdout
