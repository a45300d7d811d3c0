"""agentledger replay / rerun / fork on runs recorded from a user's script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentledger.cli import main
from agentledger.ledger import Ledger

SCRIPT = '''"""A user's agent, run as a script: concurrent calls through an instrumented client."""
import asyncio
from agentledger.agents.testing import AsyncScriptedClient
from agentledger.ledger import Ledger

PROMPT = "Answer in one word."

async def agent(run, question):
    client = run.instrument(AsyncScriptedClient(lambda m: "re: " + m[-1]["content"]))

    async def ask(q):
        reply = await client.chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": PROMPT}, {"role": "user", "content": q}],
        )
        return reply.choices[0].message.content

    answers = await asyncio.gather(ask(question), ask(question + "?"))
    await run.aanswer(" / ".join(answers))
    return answers

if __name__ == "__main__":
    with Ledger.open("sqlite:///runs.db") as ledger:
        print(ledger.record_function(agent, "hello")[1])
'''


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """The script recorded once from its directory (the working directory of the test)."""
    (tmp_path / "my_agent.py").write_text(SCRIPT, "utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_agent", raising=False)
    done = subprocess.run(
        [sys.executable, "my_agent.py"], capture_output=True, text=True, check=True
    )
    return f"sqlite:///{tmp_path / 'runs.db'}", done.stdout.strip()


@pytest.mark.slow
def test_a_script_replays_identically_then_diverges_when_its_prompt_changes(
    recorded: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 0 identical; after editing the prompt string, exit 1 at the call, naming the text."""
    db, run_id = recorded
    assert main(["--db", db, "replay", run_id]) == 0
    assert "identical: 5 events" in capsys.readouterr().out
    script = tmp_path / "my_agent.py"
    script.write_text(SCRIPT.replace("one word", "two words"), "utf-8")
    sys.modules.pop("my_agent", None)
    assert main(["--db", db, "replay", run_id]) == 1
    out = capsys.readouterr().out
    assert "DIVERGED at position 2" in out
    assert "'Answer in one word.' -> 'Answer in two words.'" in out


@pytest.mark.slow
def test_an_imported_script_run_needs_entry(
    recorded: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The imported copy is refused without --entry and replays with it; rerun and fork work."""
    db, run_id = recorded
    assert main(["--db", db, "export", run_id, "-o", str(tmp_path / "run.jsonl")]) == 0
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["--db", other, "import", str(tmp_path / "run.jsonl")]) == 0
    capsys.readouterr()
    assert main(["--db", other, "replay", run_id]) == 2
    err = capsys.readouterr().err
    assert "did not record it" in err
    assert "--entry my_agent:agent" in err
    sys.modules.pop("my_agent", None)
    assert main(["--db", other, "replay", run_id, "--entry", "my_agent:agent"]) == 0
    assert main(["--db", other, "replay", "--all", "--entry", "my_agent:agent"]) == 2
    with Ledger.open(other) as ledger, ledger.record_run("plain", input="q") as plain:
        plain.answer("a")
    capsys.readouterr()
    assert main(["--db", other, "replay", "--all"]) == 1  # neither can be: both are listed
    done = capsys.readouterr()
    assert f"{run_id}  not replayed: " in done.out
    assert "--entry my_agent:agent" in done.out
    assert f"{plain.run_id}  not replayed: " in done.out  # the batch went on past the first
    assert "2 runs could not be replayed" in done.err
    assert main(["--db", db, "rerun", run_id]) == 0
    assert "2 model calls served from the record, 0 live" in capsys.readouterr().err
    assert main(["--db", db, "fork", run_id, "--at", "2"]) == 0
    with Ledger.open(db) as ledger:
        assert len(ledger.runs()) == 3


RAISING = '''"""A user's script whose recorded tool raises the script's own exception type."""
from agentledger.ledger import Ledger


class LookupFailed(Exception):
    pass


def agent(run, question):
    @run.recorded_tool
    def look_up(name):
        raise LookupFailed(f"no entry for {name}")

    try:
        look_up(question)
    except LookupFailed as error:
        run.answer(f"sorry: {error}")
        return "handled"
    return "not reached"


if __name__ == "__main__":
    with Ledger.open("sqlite:///runs.db") as ledger:
        print(ledger.record_function(agent, "paris")[1])
'''


@pytest.mark.slow
def test_an_exception_type_of_a_script_replays_as_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recorded under the script's module name, not __main__, the failure is caught in replay."""
    (tmp_path / "raising_agent.py").write_text(RAISING, "utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "raising_agent", raising=False)
    done = subprocess.run(
        [sys.executable, "raising_agent.py"], capture_output=True, text=True, check=True
    )
    db, run_id = f"sqlite:///{tmp_path / 'runs.db'}", done.stdout.strip()
    with Ledger.open(db) as ledger:
        returned = [e for e in ledger.events(run_id) if e.kind == "ToolReturned"]
    assert returned[0].payload["error"]["code"] == "raising_agent.LookupFailed"
    assert main(["--db", db, "replay", run_id]) == 0
    assert "identical" in capsys.readouterr().out


@pytest.mark.slow
def test_a_replay_that_fails_names_the_error(
    recorded: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the code now raises, replay's divergence and rerun's failure say what it raised."""
    db, run_id = recorded
    script = tmp_path / "my_agent.py"
    script.write_text(
        SCRIPT.replace(
            "    answers = await asyncio.gather(",
            '    raise KeyError("region")\n    answers = await asyncio.gather(',
        ),
        "utf-8",
    )
    sys.modules.pop("my_agent", None)
    assert main(["--db", db, "replay", run_id]) == 1
    out = capsys.readouterr().out
    assert "DIVERGED at position 2: expected ModelCalled, replay recorded RunFailed" in out
    assert "(KeyError: 'region')" in out
    assert main(["--db", db, "rerun", run_id]) == 1
    assert "failed: KeyError: 'region'" in capsys.readouterr().err


@pytest.mark.slow
def test_rerun_of_a_function_run_with_a_model_says_why_not(
    recorded: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A function run picks its own model: the refusal says so, with or without an API key."""
    db, run_id = recorded
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["--db", db, "rerun", run_id, "--model", "openai:gpt-4o"]) == 2
    assert "recorded from a function, which picks its own model" in capsys.readouterr().err
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    assert main(["--db", db, "rerun", run_id, "--model", "openai:gpt-4o"]) == 2
    assert "recorded from a function, which picks its own model" in capsys.readouterr().err
