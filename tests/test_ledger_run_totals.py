"""The runs index keeps each run's usage totals: tokens, cost, model and tool latency.

They are summed in the transaction that writes the events (recording, group commit, import),
migrated into an older SQLite file or PostgreSQL schema from its events, checked by ``verify``
(a forged total is named), and shown by ``agentledger runs`` (table and ``--json``), also when
the read model serves it (``--model``). Runs on memory, a SQLite file and PostgreSQL.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import psycopg
import pytest
from test_ledger_derived import Database

from agentledger.cli import main
from agentledger.cli._format import cost_text, duration_text, runs_table, tokens_text
from agentledger.ledger import Ledger, RunTotals, SequentialIds, StepClock

EXPECTED = RunTotals(
    input_tokens=1200 + 30, output_tokens=300 + 7, cost_usd=0.0125 + 0.0003, model_latency_ms=850.5
)
TOTAL_COLUMNS = ("input_tokens", "output_tokens", "cost_usd", "model_latency_ms", "tool_latency_ms")


def record_costly_run(ledger: Ledger) -> str:
    """A run with two priced model calls, one unpriced, and two tool calls."""
    with ledger.record_run("pricer", input="What does it cost?", tags=["usage"]) as run:
        for usage, cost, latency in (
            ({"input_tokens": 1200, "output_tokens": 300}, 0.0125, 800.25),
            ({"input_tokens": 30, "output_tokens": 7}, 0.0003, 50.25),
            ({}, None, 0.0),
        ):
            run.model_call(
                provider="scripted",
                model="m",
                messages=[{"role": "user", "content": "How much?"}],
                response={"role": "assistant", "content": "Some."},
                usage=usage,
                cost_usd=cost,
                latency_ms=latency,
            )
        run.tool("lookup", {"q": 1}, result={"price": 3}, latency_ms=12.5)
        run.tool("lookup", {"q": 2}, result={"price": 4}, latency_ms=7.5)
        run.answer("It costs 7.")
    return run.run_id


def with_tools(totals: RunTotals) -> RunTotals:
    """`totals` plus the two tool calls' latency."""
    return RunTotals(
        totals.input_tokens,
        totals.output_tokens,
        totals.cost_usd,
        totals.model_latency_ms,
        tool_latency_ms=20.0,
    )


def assert_totals(found: RunTotals | None, expected: RunTotals) -> None:
    """Equal but for float rounding."""
    assert found is not None
    assert found.mismatches(expected) == []


def test_recording_keeps_the_run_totals_in_the_index(ledger: Ledger) -> None:
    """The index row sums every model call's usage and cost, and every tool's latency."""
    run_id = record_costly_run(ledger)
    info = ledger.run(run_id)
    assert (info.input_tokens, info.output_tokens) == (1230, 307)
    assert math.isclose(info.cost_usd or 0, 0.0128)
    assert_totals(info.totals, with_tools(EXPECTED))
    assert_totals(ledger.runs()[0].totals, with_tools(EXPECTED))
    assert ledger.verify().ok


def test_a_run_without_priced_calls_has_no_cost(ledger: Ledger) -> None:
    """No call reported a cost: the cost is None (unknown), not zero; tokens are 0."""
    with ledger.record_run("plain", input="hi") as run:
        run.answer("hello")
    info = ledger.run(run.run_id)
    assert (info.input_tokens, info.output_tokens, info.cost_usd) == (0, 0, None)
    assert (info.model_latency_ms, info.tool_latency_ms) == (0.0, 0.0)


def test_group_committed_and_imported_runs_keep_the_same_totals(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Totals added save by save (a recorder's group commit) equal those of an import."""
    run_id = record_costly_run(ledger)
    exported = tmp_path / "run.jsonl"
    ledger.export_run(run_id, exported)
    with Ledger.open("memory://") as other:
        imported = other.import_file(exported)
        assert_totals(other.run(imported).totals, ledger.run(run_id).totals or RunTotals())


@pytest.mark.parametrize(
    ("column", "value", "name"),
    [
        ("input_tokens", 99, "input tokens"),
        ("output_tokens", 0, "output tokens"),
        ("cost_usd", 0.0001, "cost usd"),
        ("cost_usd", None, "cost usd"),
        ("model_latency_ms", 1.0, "model latency ms"),
        ("tool_latency_ms", 0.0, "tool latency ms"),
    ],
)
def test_a_forged_total_is_named_by_verify(
    db_url: str,
    column: str,
    value: float | None,
    name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An edited total in the runs index is one "index mismatch" naming the field."""
    url = db_url
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds(url)) as ledger:
        run_id = record_costly_run(ledger)
    db = Database(url, "sqlite" if url.startswith("sqlite") else "postgresql")
    try:
        db.set_index(run_id, **{column: value})
    finally:
        db.close()
    with Ledger.open(url) as ledger:
        problems = ledger.verify().problems
    assert [(p.run_id, p.reason, p.field) for p in problems] == [(run_id, "index mismatch", name)]
    assert f"{name}: the runs index says {value!r}" in problems[0].detail
    capsys.readouterr()
    assert main(["--db", url, "verify"]) == 1
    assert f"index mismatch ({name}: the runs index says" in capsys.readouterr().out


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A ledger URL on a database: a SQLite file or PostgreSQL."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def make_older_sqlite(path: Path) -> str:
    """A SQLite ledger file with a run, whose runs index is as it was before the totals."""
    url = f"sqlite:///{path}"
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds(url)) as ledger:
        run_id = record_costly_run(ledger)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for column in TOTAL_COLUMNS:
            conn.execute(f"ALTER TABLE agentledger_runs DROP COLUMN {column}")
    finally:
        conn.close()
    return run_id


def test_an_older_sqlite_file_is_migrated_and_backfilled_on_open(tmp_path: Path) -> None:
    """Opening it for writing adds the columns and sums each run's events into them."""
    path = tmp_path / "older.db"
    run_id = make_older_sqlite(path)
    with Ledger.open(f"sqlite:///{path}") as ledger:
        assert_totals(ledger.run(run_id).totals, with_tools(EXPECTED))
        assert ledger.verify().ok
        with ledger.record_run("later", input="more") as run:
            run.model_call(
                provider="scripted",
                model="m",
                messages=[{"role": "user", "content": "again"}],
                response={"role": "assistant", "content": "ok"},
                usage={"input_tokens": 5, "output_tokens": 1},
                cost_usd=0.5,
            )
            run.answer("ok")
        assert (ledger.run(run.run_id).input_tokens, ledger.run(run.run_id).cost_usd) == (5, 0.5)


def test_an_older_sqlite_file_read_only_lists_runs_without_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read-only, nothing is migrated: totals are unknown ("-", null) and verify passes."""
    path = tmp_path / "older.db"
    run_id = make_older_sqlite(path)
    with Ledger.open(f"sqlite:///{path}", read_only=True) as ledger:
        info = ledger.run(run_id)
        assert (info.totals, info.input_tokens, info.cost_usd) == (None, None, None)
        assert ledger.verify().ok
    capsys.readouterr()
    assert main(["--db", f"sqlite:///{path}", "runs", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["input_tokens"], row["cost_usd"], row["model_latency_ms"]) == (None, None, None)
    conn = sqlite3.connect(path)
    try:
        names = {r[1] for r in conn.execute("PRAGMA table_info(agentledger_runs)")}
    finally:
        conn.close()
    assert "input_tokens" not in names, "a read-only open wrote nothing"


@pytest.mark.postgres
def test_an_older_postgresql_schema_is_migrated_and_backfilled_on_open(pg_url: str) -> None:
    """A schema at version 3 (no totals) gets the columns and each run's sums on open."""
    with Ledger.open(pg_url) as ledger:
        run_id = record_costly_run(ledger)
    db = Database(pg_url, "postgresql")
    try:
        for column in TOTAL_COLUMNS:
            db.execute(f"ALTER TABLE agentledger_runs DROP COLUMN {column}")
        db.execute("UPDATE agentledger_schema SET version = 3")
    finally:
        db.close()
    with Ledger.open(pg_url) as ledger:
        assert_totals(ledger.run(run_id).totals, with_tools(EXPECTED))
        assert ledger.verify().ok
    with psycopg.connect(pg_url.split("?", 1)[0]) as conn:
        schema = pg_url.rsplit("=", 1)[1]
        row = conn.execute(f'SELECT version FROM "{schema}".agentledger_schema').fetchone()
    assert row is not None
    assert row[0] >= 4


def test_runs_shows_tokens_cost_and_latency(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table has TOKENS, COST and LATENCY columns; ``--json`` has every total."""
    ledger_url = db_url
    with Ledger.open(ledger_url) as ledger:
        run_id = record_costly_run(ledger)
    capsys.readouterr()
    assert main(["--db", ledger_url, "runs"]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split()[:7] == ["RUN", "STATUS", "STARTED", "EVENTS", "TOKENS", "COST", "LATENCY"]
    assert line.startswith(run_id)
    assert "1537" in line.split()
    assert "$0.0128" in line.split()
    assert "850ms" in line.split()
    assert main(["--db", ledger_url, "runs", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["input_tokens"], row["output_tokens"]) == (1230, 307)
    assert math.isclose(row["cost_usd"], 0.0128)
    assert math.isclose(row["model_latency_ms"], 850.5)
    assert math.isclose(row["tool_latency_ms"], 20.0)


def test_runs_by_model_shows_the_same_columns(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The read model's listing (``runs --model``) has the same totals as the index's."""
    ledger_url = db_url
    with Ledger.open(ledger_url) as ledger:
        run_id = record_costly_run(ledger)
    capsys.readouterr()
    assert main(["--db", ledger_url, "runs", "--model", "m"]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split()[4:7] == ["TOKENS", "COST", "LATENCY"]
    assert line.startswith(run_id)
    assert line.split()[4:7] == ["1537", "$0.0128", "850ms"]
    assert main(["--db", ledger_url, "runs", "--model", "m", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["input_tokens"], row["output_tokens"]) == (1230, 307)
    assert math.isclose(row["model_latency_ms"], 850.5)


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_the_runs_table_fits_the_terminal(ledger: Ledger, width: int) -> None:
    """Every line fits; narrow terminals drop LATENCY, then EVENTS, but keep TOKENS and COST."""
    record_costly_run(ledger)
    table = runs_table(ledger.runs(), width=width)
    assert all(len(line) <= width for line in table.splitlines())
    header = table.splitlines()[0].split()
    assert {"TOKENS", "COST"} <= set(header)
    assert ("LATENCY" in header) == (width >= 120)


def test_totals_are_abbreviated_to_their_columns() -> None:
    """Large numbers keep to the column widths; unknown values are "-"."""
    assert [tokens_text(n) for n in (None, 950, 12_345, 345_678, 4_560_000, 987_000_000)] == [
        "-",
        "950",
        "12.3k",
        "345k",
        "4.56M",
        "987M",
    ]
    assert [cost_text(c) for c in (None, 0.0042, 12.5, 123456.0)] == [
        "-",
        "$0.0042",
        "$12.50",
        "$123456",
    ]
    assert [duration_text(ms) for ms in (None, 850.4, 12_345, 252_000)] == [
        "-",
        "850ms",
        "12.3s",
        "4.2m",
    ]
