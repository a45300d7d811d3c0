"""Resume after kill -9: a real recording process is killed at many points; every run resumes.

The recorder is this file run as a script (``python tests/test_replay_resume.py record URL``):
it records the bundled pipeline scenario again and again, slowed a little at each model and
tool call, until the test kills it with SIGKILL. Whatever the kill interrupted, the run left
behind must resume from its last recorded event without re-asking answered models or tools,
then complete, verify and replay identically.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).resolve()
TRIALS = 20
TIMEOUT_S = 60
CALL_DELAY_S = 0.004


def record_until_killed(url: str, at_call: int = 0) -> None:
    """Record the demo scenario in a loop; say READY once the ledger is open.

    ``at_call`` > 0: the process SIGKILLs itself just before its ``at_call``-th model or tool
    call (counted over all runs), instead of waiting for the test's kill.
    """
    from agentledger.agents import RunHooks, run_agent
    from agentledger.agents.testing import load_scenario
    from agentledger.ledger import Ledger

    calls = [0]

    def pause(_info: Any) -> None:
        calls[0] += 1
        if calls[0] == at_call:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(CALL_DELAY_S)

    hooks = RunHooks(on_model_call=pause, on_tool_call=pause)
    ledger = Ledger.open(url)
    print("READY", flush=True)
    while True:
        scenario = load_scenario()
        run_agent(
            ledger,
            scenario.agent,
            scenario.question,
            models=scenario.models,
            config=scenario.config,
            hooks=hooks,
        )


def remaining_models(ledger: Any, run_id: str) -> dict[str, Any]:
    """Each role's scripted model holding only the answers the run has not recorded yet."""
    from agentledger.agents.testing import answers_from_json, scripted_roles

    data = json.loads(
        resources.files("agentledger.agents").joinpath("demo_pipeline.json").read_text("utf-8")
    )
    answered: dict[str, int] = {}
    for event in ledger.events(run_id):
        if event.kind == "ModelCalled":
            role = event.payload["actor"]
            answered[role] = answered.get(role, 0) + 1
    left = {
        role: answers_from_json(items)[answered.get(role, 0) :]
        for role, items in data["script"].items()
    }
    return dict(scripted_roles(left, prefix="scripted:demo_pipeline"))


def _any_request() -> Any:
    from agentledger.agents.models import Message, ModelRequest

    return ModelRequest(model="", messages=[Message.user("?")])


def kill_after(url: str, delay_s: float, at_call: int = 0) -> None:
    """Start a recorder, let it run ``delay_s`` seconds, then SIGKILL it.

    With ``at_call`` the recorder kills itself before that model or tool call instead.
    """
    with subprocess.Popen(
        [sys.executable, str(WORKER), "record", url, str(at_call)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as worker:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        if line.strip() == "READY" and not at_call:
            time.sleep(delay_s)
            os.kill(worker.pid, signal.SIGKILL)
        _, errors = worker.communicate(timeout=TIMEOUT_S)
    assert line.strip() == "READY", errors
    assert worker.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_runs_killed_at_many_points_resume_complete_verify_and_replay(tmp_path: Path) -> None:
    """20 kills at spread-out moments; each interrupted run resumes to the scripted answer."""
    from agentledger.agents.testing import load_scenario
    from agentledger.ledger import Ledger
    from agentledger.replay import replay_run, resume_run

    url = f"sqlite:///{tmp_path / 'killed.db'}"
    expected_answer = load_scenario().models["synthesizer"].complete(_any_request()).message.content
    resumed: list[tuple[float, int]] = []
    for trial in range(TRIALS):
        # Even trials: a kill at a moment (it may land inside a commit); odd ones: the recorder
        # kills itself before its n-th call, n = 1..10, which spans every step of a run.
        delay = 0.02 + 0.4 * ((trial * 7) % TRIALS) / TRIALS
        kill_after(url, delay, at_call=0 if trial % 2 == 0 else 1 + trial // 2)
        with Ledger.open(url) as ledger:
            for info in ledger.runs(status="running"):
                cut = len(ledger.events(info.run_id))
                models = remaining_models(ledger, info.run_id)
                result = resume_run(ledger, info.run_id, models=models)
                assert result.status == "completed", (trial, cut)
                assert result.answer == expected_answer, (trial, cut)
                assert all(m.remaining == 0 for m in models.values()), (trial, cut)
                assert ledger.verify(info.run_id).problems == [], (trial, cut)
                assert replay_run(ledger, info.run_id).identical, (trial, cut)
                resumed.append((delay, cut))
    with Ledger.open(url) as ledger:
        assert ledger.runs(status="running") == []
        assert ledger.verify().problems == []
    cuts = {cut for _, cut in resumed}
    assert len(resumed) >= TRIALS // 2, f"too few kills landed mid-run: {resumed}"
    # A run can only be cut where a transaction ends: the demo run commits after positions 1, 2,
    # 3, 7, 13, 19, 25, 28 and 29. The self-kills before calls 1..10 (eight calls a run) land
    # before each of its steps, so they alone give four distinct cuts or more.
    assert len(cuts) >= 4, f"kills landed at too few distinct positions: {sorted(cuts)}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["record"]:
        record_until_killed(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
