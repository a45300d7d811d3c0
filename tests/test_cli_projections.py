"""The CLI over the read models: projections status|catch-up|rebuild, stats, runs --model/--prompt.

Runs the CLI in-process through `agentledger.cli.main` on a SQLite file (and PostgreSQL once)
holding runs recorded with the recording API, so every expected number is chosen here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from agentledger.cli import main
from agentledger.ledger import (
    Ledger,
    RunRecorder,
    SequentialIds,
    StepClock,
    blob_ref,
    canonical_json,
)
from agentledger.ledger.events import (
    ConfigIdentity,
    ErrorInfo,
    ModelConfig,
    PromptRef,
    ToolErrorInfo,
)


@dataclass
class Output:
    """What one CLI invocation returned and printed."""

    status: int
    out: str
    err: str


@dataclass
class Book:
    """A ledger URL holding three runs, and their ids."""

    url: str
    small: str
    large: str
    failed: str

    def cli(self, capsys: pytest.CaptureFixture[str], *argv: str) -> Output:
        """Run ``agentledger --db URL ARGV`` in-process."""
        capsys.readouterr()
        status = main(["--db", self.url, *argv])
        captured = capsys.readouterr()
        return Output(status, captured.out, captured.err)


def _prompt(name: str, version: str) -> PromptRef:
    return PromptRef(name=name, version=version, hash=blob_ref(canonical_json(name + version)))


def _run(ledger: Ledger, model: str, version: str) -> RunRecorder:
    config = ConfigIdentity(
        models={"planner": ModelConfig(provider="fake", model=model)},
        prompts={"planner": _prompt("plan", version)},
    )
    return ledger.record_run("cli", f"question for {model}", config=config, tags=[model])


def _call(run: RunRecorder, model: str, version: str, cost: float, latency: float) -> int:
    return run.model_call(
        provider="fake",
        model=model,
        messages=[{"role": "user", "content": f"{model} {run.position}"}],
        usage={"input_tokens": 100, "output_tokens": 10, "total_tokens": 110},
        cost_usd=cost,
        latency_ms=latency,
        prompt=_prompt("plan", version),
        actor="planner",
    ).position


def record(url: str) -> Book:
    """Three runs: m-small with plan=v1 (a failing tool), m-large with plan=v2, one failed."""
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds(url)) as ledger:
        small = _run(ledger, "m-small", "v1")
        position = _call(small, "m-small", "v1", 0.5, 10.0)
        call_id, called = small.tool_call("lookup", {"q": 1}, caused_by=position)
        error = ToolErrorInfo(code="not_found", message="no")
        small.tool_result(call_id, ok=False, type="lookup", error=error, caused_by=called)
        _call(small, "m-small", "v1", 0.25, 30.0)
        small.complete()
        large = _run(ledger, "m-large", "v2")
        _call(large, "m-large", "v2", 1.0, 50.0)
        large.complete()
        failed = _run(ledger, "m-large", "v2")
        failed.fail(ErrorInfo(type="Boom", message="x"))
        return Book(url, small.run_id, large.run_id, failed.run_id)


@pytest.fixture
def book(sqlite_url: str) -> Book:
    """Three recorded runs in a SQLite file."""
    return record(sqlite_url)


def test_status_reports_lag_without_catching_up(
    book: Book, capsys: pytest.CaptureFixture[str]
) -> None:
    """`projections status` prints position, lag and rows, and changes nothing."""
    first = book.cli(capsys, "projections", "status", "--json")
    assert first.status == 0
    data = json.loads(first.out)
    assert data["position"] == 0
    assert data["lag"] == data["max_notification_id"] > 0
    assert set(data["rows"].values()) == {0}
    text = book.cli(capsys, "projections", "status")
    assert f"position   0 of {data['max_notification_id']}" in text.out
    assert f"(lag {data['lag']})" in text.out
    assert "al_rm_runs" in text.out


def test_rebuild_and_catch_up_apply_everything(
    book: Book, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rebuild` replays every event and says how many; then status shows lag 0."""
    total = json.loads(book.cli(capsys, "projections", "status", "--json").out)[
        "max_notification_id"
    ]
    caught = book.cli(capsys, "projections", "catch-up", "--batch-size", "2")
    assert caught.out.strip() == f"applied {total} events; read models at notification {total}"
    rebuilt = book.cli(capsys, "projections", "rebuild", "--batch-size", "3")
    assert rebuilt.status == 0
    assert rebuilt.out.startswith(f"rebuilt read models: {total} events applied, ")
    assert rebuilt.out.strip().endswith(f"position {total}, lag 0")
    status = json.loads(book.cli(capsys, "projections", "status", "--json").out)
    assert (status["lag"], status["rows"]["al_rm_runs"]) == (0, 3)
    again = book.cli(capsys, "projections", "catch-up")
    assert again.out.startswith("applied 0 events")
    bad = book.cli(capsys, "projections", "rebuild", "--batch-size", "0")
    assert bad.status == 2
    assert "batch_size" in bad.err


def test_runs_filters_by_model_and_prompt_version(
    book: Book, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs --model` / `--prompt NAME=VERSION` come from the read model, caught up first."""
    by_model = book.cli(capsys, "runs", "--model", "m-large", "--json")
    assert by_model.status == 0
    rows = json.loads(by_model.out)
    assert [r["run_id"] for r in rows] == [book.failed, book.large]
    assert {"head_hash", "event_count", "input_preview", "models", "cost_usd"} <= set(rows[0])
    assert rows[1]["models"] == ["fake:m-large"]
    by_prompt = json.loads(book.cli(capsys, "runs", "--prompt", "plan=v1", "--json").out)
    assert [r["run_id"] for r in by_prompt] == [book.small]
    assert (by_prompt[0]["cost_usd"], by_prompt[0]["tool_errors"]) == (0.75, 1)
    any_version = json.loads(book.cli(capsys, "runs", "--prompt", "plan", "--json").out)
    assert len(any_version) == 3
    failed = book.cli(capsys, "runs", "--model", "fake:m-large", "--status", "failed")
    lines = failed.out.splitlines()
    assert lines[0].startswith("RUN")
    assert [line.split()[0] for line in lines[1:]] == [book.failed]
    tagged = json.loads(book.cli(capsys, "runs", "--model", "m-small", "--tag", "x", "--json").out)
    assert tagged == []
    none = book.cli(capsys, "runs", "--prompt", "plan=v9")
    assert "(no runs)" in none.out


def test_runs_refuses_a_malformed_prompt(book: Book, capsys: pytest.CaptureFixture[str]) -> None:
    """A --prompt without a name, or with an empty version, exits 2 and says why."""
    for text in ("=v1", "plan=", " = "):
        bad = book.cli(capsys, "runs", "--prompt", text)
        assert bad.status == 2
        assert "--prompt: expected NAME=VERSION" in bad.err


def test_stats_by_model_and_prompt(book: Book, capsys: pytest.CaptureFixture[str]) -> None:
    """`stats` prints tokens, cost, latency and tool error rate; --json gives the numbers."""
    table = book.cli(capsys, "stats")
    assert table.status == 0
    header, *lines = table.out.splitlines()
    assert header.split()[:2] == ["MODEL", "PROMPT"]
    assert lines[0].split()[:2] == ["fake:m-large", "plan=v2"]
    assert lines[1].split()[:2] == ["fake:m-small", "plan=v1"]
    assert lines[1].split()[-1] == "100.0%"
    by_model = json.loads(book.cli(capsys, "stats", "--by", "model", "--json").out)
    small = next(r for r in by_model if r["model"] == "m-small")
    assert small == {
        "provider": "fake",
        "model": "m-small",
        "prompt": None,
        "model_calls": 2,
        "runs": 1,
        "input_tokens": 200,
        "output_tokens": 20,
        "cost_usd": 0.75,
        "mean_latency_ms": 20.0,
        "p95_latency_ms": 30.0,
        "tool_calls": 1,
        "tool_errors": 1,
        "tool_error_rate": 1.0,
    }
    by_prompt = book.cli(capsys, "stats", "--by", "prompt")
    assert by_prompt.out.splitlines()[0].split()[0] == "PROMPT"
    assert "MODEL" not in by_prompt.out


@pytest.mark.postgres
def test_runs_and_stats_on_postgresql(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The same commands on PostgreSQL, where the read model lives in the ledger's schema."""
    book = record(pg_url)
    rows = json.loads(book.cli(capsys, "runs", "--prompt", "plan=v2", "--json").out)
    assert [r["run_id"] for r in rows] == [book.failed, book.large]
    stats = json.loads(book.cli(capsys, "stats", "--by", "prompt", "--json").out)
    assert [(s["prompt"], s["model_calls"]) for s in stats] == [("plan=v1", 2), ("plan=v2", 1)]
    status = json.loads(book.cli(capsys, "projections", "status", "--json").out)
    assert status["lag"] == 0
