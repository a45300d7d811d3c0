"""agentledger replay / rerun / resume / fork: exit codes, output, and what gets recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentledger.agents import run_agent
from agentledger.agents.testing import load_scenario
from agentledger.cli import main
from agentledger.ledger import Ledger
from agentledger.ledger.events import RunStarted


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite ledger holding one demo run tagged ``nightly``."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    scenario = load_scenario()
    with Ledger.open(url) as ledger:
        run_agent(
            ledger,
            scenario.agent,
            scenario.question,
            models=scenario.models,
            config=scenario.config,
            tags=["nightly"],
        )
    return url


def only_run(url: str) -> str:
    """The id of the ledger's only original run."""
    with Ledger.open(url) as ledger:
        (info,) = [r for r in ledger.runs() if r.parent_run_id is None]
        return info.run_id


def test_replay_exits_0_for_an_identical_run_and_prints_json(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prefix is enough; --json gives the result."""
    run_id = only_run(db)
    assert main(["--db", db, "replay", run_id[:8]]) == 0
    assert "identical: 30 events" in capsys.readouterr().out
    assert main(["--db", db, "replay", "--all", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert (result["run_id"], result["identical"], result["divergence"]) == (run_id, True, None)


def test_replay_exits_1_and_names_the_position_when_a_run_diverges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run recorded with an altered delta replays differently at that delta."""
    url = f"sqlite:///{tmp_path / 'bad.db'}"
    scenario = load_scenario()
    with Ledger.open(url) as ledger:

        def factory(agent: str, input: object = None, **kwargs: object) -> object:  # noqa: A002
            recorder = ledger.record_run(agent, input=input, **kwargs)  # type: ignore[arg-type]
            original = recorder.delta

            def altered(patch: dict[str, object], **kw: object) -> int:
                if kw.get("source") == "input":
                    patch = {**patch, "tampered": True}
                return original(patch, **kw)  # type: ignore[arg-type]

            recorder.delta = altered  # type: ignore[method-assign,assignment]
            return recorder

        run_agent(
            ledger,
            scenario.agent,
            scenario.question,
            models=scenario.models,
            config=scenario.config,
            recorder_factory=factory,  # type: ignore[arg-type]
        )
        (info,) = ledger.runs()
        delta = next(e.position for e in ledger.events(info.run_id) if e.kind == "DeltaApplied")
    assert main(["--db", url, "replay", info.run_id]) == 1
    out = capsys.readouterr().out
    assert f"DIVERGED at position {delta}" in out
    assert "/patch/tampered" in out


def test_rerun_prints_the_new_run_id_and_records_the_link(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no overrides every call is served; the new run names its parent."""
    run_id = only_run(db)
    assert main(["--db", db, "rerun", run_id]) == 0
    captured = capsys.readouterr()
    new_id = captured.out.strip()
    assert "5 model calls served from the record, 0 live" in captured.err
    with Ledger.open(db) as ledger:
        started = RunStarted.model_validate(ledger.events(new_id)[0].payload)
    assert (started.parent_run_id, started.relation) == (run_id, "rerun")
    assert main(["--db", db, "diff", run_id, new_id]) == 0


def test_rerun_with_a_changed_prompt_and_no_model_stops_with_a_recorded_reason(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """planner=v2 changes the planner's request; a scripted run has no live model: exit 1."""
    assert main(["--db", db, "rerun", "--tag", "nightly", "--prompt", "planner=v2"]) == 1
    captured = capsys.readouterr()
    assert "stopped: role 'planner' made a request the record does not hold" in captured.err
    with Ledger.open(db) as ledger:
        new_id = captured.out.strip()
        last = ledger.events(new_id)[-1]
        assert (last.kind, last.payload["error"]["type"]) == ("RunFailed", "NoLiveModelError")
        assert ledger.verify().problems == []


def test_rerun_selection_and_bad_arguments_are_clear_errors(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No selection, an unknown prompt version, a selection matching nothing: exit 2."""
    assert main(["--db", db, "rerun"]) == 2
    assert "give a RUN or a selection" in capsys.readouterr().err
    assert main(["--db", db, "rerun", "--tag", "nightly", "--prompt", "planner=v9"]) == 2
    assert "no version 'v9'" in capsys.readouterr().err
    assert main(["--db", db, "rerun", "--of-prompt", "pipeline.planner=v2"]) == 2
    assert "no completed original runs match" in capsys.readouterr().err
    assert main(["--db", db, "rerun", "--of-prompt", "pipeline.planner=v1"]) == 0


def test_fork_and_resume_report_usage_errors(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Forking past the end, a non-object patch, resuming a finished run: exit 2, clear text."""
    run_id = only_run(db)
    assert main(["--db", db, "fork", run_id, "--at", "99"]) == 2
    assert "fork at 1..29" in capsys.readouterr().err
    assert main(["--db", db, "fork", run_id, "--at", "5", "--patch", "[1]"]) == 2
    assert "JSON Merge Patch object" in capsys.readouterr().err
    assert main(["--db", db, "resume", run_id]) == 2
    assert "already ended" in capsys.readouterr().err


def test_fork_with_a_scripted_model_file_continues_live(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fork with --patch and --model scripted:FILE completes holding the patch."""
    run_id = only_run(db)
    script = tmp_path / "answers.json"
    script.write_text(json.dumps(["A forked answer."]), encoding="utf-8")
    with Ledger.open(db) as ledger:
        synth = next(
            e.position
            for e in ledger.events(run_id)
            if e.kind == "StepStarted" and e.payload["name"] == "synthesize"
        )
    at = synth - 1
    args = ["--db", db, "fork", run_id, "--at", str(at), "--patch", '{"note": "forked"}']
    assert main([*args, "--model", f"scripted:{script}"]) == 0
    new_id = capsys.readouterr().out.strip()
    assert main(["--db", db, "state", new_id]) == 0
    assert json.loads(capsys.readouterr().out)["note"] == "forked"
    assert main(["--db", db, "replay", new_id]) == 0
    capsys.readouterr()
    assert main([*args, "--model", f"scripted:{script}", "--json"]) == 0
    forked = json.loads(capsys.readouterr().out)
    assert (forked["parent_run_id"], forked["status"]) == (run_id, "completed")
    assert forked["answer"] == "A forked answer."
    assert main(["--db", db, "annotate", new_id, "--author", "a", "--note", "n", "--json"]) == 0
    note = json.loads(capsys.readouterr().out)
    assert (note["kind"], note["payload"]["note"]) == ("RunAnnotated", "n")
