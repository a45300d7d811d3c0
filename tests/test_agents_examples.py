"""Every example script runs offline, prints its answer and verifies its run (exit status 0)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def test_there_is_one_example_per_seed_system() -> None:
    """Five examples: pipeline, reasoning, policy+router+evidence, tool agent, coordinator."""
    assert [p.stem for p in EXAMPLES] == [
        "coordinator_workers",
        "pipeline_trip",
        "policy_router_evidence",
        "reasoning_guardrails",
        "tool_agent_fork",
    ]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_verifies(
    example: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The example exits 0 into a fresh SQLite ledger, printing its answer and its checks."""
    monkeypatch.setattr(sys, "argv", [str(example), f"sqlite:///{tmp_path / 'example.db'}"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    assert "answer: " in out
    assert "[FAILED]" not in out
    assert "[ok] " in out
