"""The ``agentledger`` command at its edges: bad input, missing and read-only files, --json.

Each test reproduces a defect the CLI once had (a traceback, a silently wrong answer, a file
created by a command that only reads) and checks the clear error or the right answer instead.
Errors are ``agentledger: <what was wrong>`` on stderr with exit status 2, never a traceback.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shutil
import socket
import sqlite3
import stat
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from test_cli_ledger import Cli as LedgerCli
from test_cli_ledger import Output

from agentledger.cli import main
from agentledger.cli._format import runs_table, timeline
from agentledger.ledger import Ledger, StorageError
from agentledger.ledger.signed_note import write_key_pair
from agentledger.replay import _replay as replay_module


class Cli(LedgerCli):
    """The CLI in-process (tests/test_cli_ledger.py), also checking that nothing is a traceback."""

    def __call__(self, *argv: str) -> Output:
        """Run ``agentledger ARGV``."""
        result = super().__call__(*argv)
        assert "Traceback" not in result.err
        return result


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """The CLI, in-process."""
    return Cli(capsys)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger file holding two demo runs, recorded once per module."""
    path = tmp_path_factory.mktemp("edges") / "template.db"
    for _ in range(2):
        assert main(["--db", f"sqlite:///{path}", "demo"]) == 0
    return path


@dataclass
class Demo:
    """A copy of the template ledger: its file, URL and run ids (newest first)."""

    path: Path
    url: str
    run_ids: list[str]


@pytest.fixture
def demo(template: Path, tmp_path: Path) -> Demo:
    """This test's own copy of the two-run ledger."""
    path = tmp_path / "ledger.db"
    shutil.copyfile(template, path)
    url = f"sqlite:///{path}"
    with Ledger.open(url) as ledger:
        ids = [r.run_id for r in ledger.runs()]
    return Demo(path, url, ids)


def refused(result: Output, *words: str) -> None:
    """The command failed cleanly with exit 2, naming each of `words`."""
    assert result.status == 2, result
    assert result.err.startswith("agentledger: "), result.err
    for word in words:
        assert word in result.err, (word, result.err)


# 1. tracebacks -----------------------------------------------------------------------------


def test_an_unknown_demo_scenario_is_named_with_the_bundled_ones(cli: Cli, tmp_path: Path) -> None:
    """``demo --scenario nope`` names the scenario and the ones there are; records nothing."""
    result = cli("--db", f"sqlite:///{tmp_path / 'x.db'}", "demo", "--scenario", "nope")
    refused(result, "'nope'", "demo_pipeline")
    assert not (tmp_path / "x.db").exists()


def test_export_into_a_missing_directory_is_an_error(cli: Cli, demo: Demo) -> None:
    """``export RUN -o /nonexistent/x.jsonl`` names the directory instead of a traceback."""
    refused(
        cli("--db", demo.url, "export", demo.run_ids[0], "-o", "/nonexistent/x.jsonl"),
        "/nonexistent",
    )


# 2. --since ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["garbage", "2026-13-45", "1", "2h30"])
def test_since_refuses_what_is_not_a_time(cli: Cli, demo: Demo, value: str) -> None:
    """A --since that is not a time is an error naming the value and the accepted forms."""
    refused(cli("--db", demo.url, "runs", "--since", value), repr(value), "ISO 8601", "2h")


@pytest.mark.parametrize("command", [["stats"], ["rerun"]])
def test_every_since_option_parses_its_time(cli: Cli, demo: Demo, command: list[str]) -> None:
    """`stats` and `rerun` refuse a bad --since the same way."""
    refused(cli("--db", demo.url, *command, "--since", "2026-13-45"), "'2026-13-45'")


def _started(demo: Demo) -> dt.datetime:
    with Ledger.open(demo.url) as ledger:
        return dt.datetime.fromisoformat(ledger.runs()[-1].started_at)


def test_since_converts_an_offset_to_utc(cli: Cli, demo: Demo) -> None:
    """A +01:00 time is compared as the UTC instant it names, not as text."""
    first = _started(demo)
    plus_one = dt.timezone(dt.timedelta(hours=1))
    before = (first - dt.timedelta(minutes=30)).astimezone(plus_one).isoformat()
    after = (first + dt.timedelta(hours=2)).astimezone(plus_one).isoformat()
    assert len(json.loads(cli("--db", demo.url, "runs", "--json", "--since", before).out)) == 2
    assert json.loads(cli("--db", demo.url, "runs", "--json", "--since", after).out) == []


def test_since_takes_dates_and_ages(cli: Cli, demo: Demo) -> None:
    """A plain date and an age (counted back from the ledger's clock) select the runs."""
    day = _started(demo).date()
    for value in [day.isoformat(), "1h", "3d", "30m"]:
        listed = json.loads(cli("--db", demo.url, "runs", "--json", "--since", value).out)
        assert len(listed) == 2, value
    tomorrow = (day + dt.timedelta(days=1)).isoformat()
    assert json.loads(cli("--db", demo.url, "runs", "--json", "--since", tomorrow).out) == []


# 3. read commands never create a database ----------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["show", "x"],
        ["verify"],
        ["export", "x", "-o", "out.jsonl"],
        ["state", "x"],
        ["stats"],
        ["diff", "x", "y"],
        ["replay", "x"],
        ["report", "x"],
    ],
)
def test_a_read_command_refuses_a_missing_file_and_creates_nothing(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """A mistyped --db (or no ledger in the directory) is an error naming the path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTLEDGER_DB", raising=False)
    refused(cli("--db", "sqlite:///ledgr-typo.db", *command), "ledgr-typo.db", "does not exist")
    refused(cli(*command), "agentledger.db")
    assert list(tmp_path.iterdir()) == []


def test_a_write_command_still_creates_the_file(cli: Cli, tmp_path: Path) -> None:
    """``demo`` records into a file that did not exist."""
    assert cli("--db", f"sqlite:///{tmp_path / 'new.db'}", "demo").status == 0
    assert (tmp_path / "new.db").is_file()


@pytest.mark.parametrize(
    "command",
    [
        ["annotate", "x", "--author", "a", "--note", "n"],
        ["rerun", "x"],
        ["resume", "x"],
        ["fork", "x", "--at", "1"],
        ["checkpoint", "--key", "KEY"],
        ["projections", "catch-up"],
        ["projections", "rebuild"],
    ],
)
def test_a_command_on_recorded_runs_refuses_a_missing_file_and_creates_nothing(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """A mistyped --db is named, not made an empty ledger (checkpoint once signed its empty tree).

    These commands write, but only about runs already recorded: a file without them is a typo.
    """
    key, _ = write_key_pair("example.org/log", tmp_path)
    argv = [str(key) if word == "KEY" else word for word in command]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("AGENTLEDGER_DB", raising=False)
    refused(cli("--db", "sqlite:///ledgr-typo.db", *argv), "ledgr-typo.db", "does not exist")
    refused(cli(*argv), "agentledger.db", "does not exist")
    assert list(work.iterdir()) == []


def test_import_still_creates_the_file(cli: Cli, demo: Demo, tmp_path: Path) -> None:
    """``import`` records into a file that did not exist, as ``demo`` does."""
    exported = tmp_path / "run.jsonl"
    assert cli("--db", demo.url, "export", demo.run_ids[0], "-o", str(exported)).status == 0
    imported = cli("--db", f"sqlite:///{tmp_path / 'new.db'}", "import", str(exported))
    assert imported.status == 0, imported.err
    with Ledger.open(f"sqlite:///{tmp_path / 'new.db'}", read_only=True) as ledger:
        assert ledger.run_ids() == [demo.run_ids[0]]


# 4. read-only files --------------------------------------------------------------------------


def test_read_commands_work_on_a_read_only_file(cli: Cli, demo: Demo, tmp_path: Path) -> None:
    """runs, show, verify and export read a 0444 file; a write command says it is read-only."""
    demo.path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    run_id = demo.run_ids[0]
    assert run_id in cli("--db", demo.url, "runs").out
    assert cli("--db", demo.url, "show", run_id).status == 0
    assert cli("--db", demo.url, "verify").out.startswith("intact: 2 runs")
    exported = cli("--db", demo.url, "export", run_id, "-o", str(tmp_path / "r.jsonl"))
    assert exported.status == 0, exported.err
    refused(cli("--db", demo.url, "annotate", run_id, "--author", "a", "--note", "n"), "read-only")


def test_derived_data_of_a_read_only_file_is_computed_in_memory(
    cli: Cli, demo: Demo, tmp_path: Path
) -> None:
    """state, stats, runs --model, report, diff and replay read a 0444 file and write nothing.

    Their snapshots and read models are computed from the events in memory; the file keeps its
    bytes and nothing is written ahead of it.
    """
    demo.path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    before = demo.path.read_bytes()
    a, b = demo.run_ids[:2]
    writable = cli("--db", demo.url, "state", a).out
    for command in (
        ["state", a],
        ["stats"],
        ["runs", "--model", "scripted"],
        ["report", a, "-o", str(tmp_path / "r.html")],
        ["diff", a, b],
        ["replay", a],
    ):
        result = cli("--db", demo.url, *command)
        assert result.status in (0, 1), (command, result.err)
        assert "Traceback" not in result.err
        assert "read-only" not in result.err, (command, result.err)
    assert cli("--db", demo.url, "state", a).out == writable
    assert demo.path.read_bytes() == before
    wal = demo.path.with_name("ledger.db-wal")  # SQLite's reader may add an empty one
    assert not wal.exists() or wal.stat().st_size == 0
    assert cli("--db", demo.url, "stats").out.count("scripted") >= 1


def test_a_read_only_ledger_writes_nothing(demo: Demo) -> None:
    """`Ledger.open(read_only=True)` opens the file mode=ro: an append fails, nothing changes."""
    before = demo.path.read_bytes()
    with Ledger.open(demo.url, read_only=True) as ledger:
        assert len(ledger.runs()) == 2
        with pytest.raises(StorageError, match="readonly database"):
            ledger.annotate(demo.run_ids[0], author="a", note="n")
    assert demo.path.read_bytes() == before


# 5. runs --limit -----------------------------------------------------------------------------


def test_runs_says_when_it_stops_at_the_limit(cli: Cli, demo: Demo) -> None:
    """A truncated listing says so on stderr (table and --json); --all lists everything."""
    table = cli("--db", demo.url, "runs", "--limit", "1")
    assert demo.run_ids[0] in table.out
    assert demo.run_ids[1] not in table.out
    assert "showing 1 of 2 runs (use --limit N or --all)" in table.err
    as_json = cli("--db", demo.url, "runs", "--json", "--limit", "1")
    assert len(json.loads(as_json.out)) == 1
    assert "showing 1 of 2 runs" in as_json.err
    every = cli("--db", demo.url, "runs", "--json", "--all")
    assert [r["run_id"] for r in json.loads(every.out)] == demo.run_ids
    assert every.err == ""


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_runs_refuses_a_limit_below_one(cli: Cli, demo: Demo, limit: str) -> None:
    """--limit 0 or -1 is an error pointing at --all (-1 once silently dropped the oldest)."""
    refused(cli("--db", demo.url, "runs", "--limit", limit), f"got {limit}", "--all")


WHOLE_NUMBER_MAX = 2**53 - 1


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "-n", "N"],
        ["state", "RUN", "--at", "N"],
        ["state", "RUN", "--diff-from", "N"],
        ["fork", "RUN", "--at", "N"],
        ["annotate", "RUN", "--author", "a", "--note", "n", "--position", "N"],
        ["prove", "RUN", "--checkpoint", "c", "--position", "N"],
        ["projections", "catch-up", "--batch-size", "N"],
        ["projections", "rebuild", "--batch-size", "N"],
        ["rerun", "RUN", "--max-tokens", "N"],
        ["run", "question", "--seed", "N"],
        ["run", "question", "--max-steps", "N"],
        ["import", "x.jsonl", "--max-payload-bytes", "N"],
        ["import", "x.jsonl", "--max-depth", "N"],
    ],
)
@pytest.mark.parametrize(
    ("number", "words"),
    [
        ("99999999999999999999", "too large"),  # SQLite: "datatype mismatch"
        ("9223372036854775808", "too large"),  # PostgreSQL: "bigint out of range"
        (str(WHOLE_NUMBER_MAX + 1), "too large"),
        ("-99999999999999999999", "too small"),
    ],
)
def test_integer_options_refuse_numbers_the_database_cannot_hold(
    demo: Demo, capsys: pytest.CaptureFixture[str], command: list[str], number: str, words: str
) -> None:
    """Every integer option is bounded as it is parsed: exit 2 naming the option, nothing written.

    ``runs -n 99999999999999999999`` once ended in a traceback from the database.
    """
    argv = [{"N": number, "RUN": demo.run_ids[0]}.get(word, word) for word in command]
    option = command[command.index("N") - 1]
    before = demo.path.read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["--db", demo.url, *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"argument {option}" in err, err
    assert f": {number} is {words}: at " in err, err
    assert str(WHOLE_NUMBER_MAX) in err
    assert demo.path.read_bytes() == before


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_the_largest_number_an_option_takes_reaches_the_database(
    cli: Cli, request: pytest.FixtureRequest, backend: str
) -> None:
    """``runs -n`` at the bound lists the runs on SQLite and PostgreSQL alike."""
    url = str(request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url"))
    assert cli("--db", url, "demo").status == 0
    listed = cli("--db", url, "runs", "--json", "-n", str(WHOLE_NUMBER_MAX))
    assert listed.status == 0, listed.err
    assert len(json.loads(listed.out)) == 1


# 7. export to stdout, import from stdin ------------------------------------------------------


def test_export_to_dash_writes_stdout_and_import_dash_reads_stdin(
    cli: Cli, demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export -o -`` prints the file (no file named ``-``); ``import -`` reads it back."""
    monkeypatch.chdir(tmp_path)
    exported = cli("--db", demo.url, "export", demo.run_ids[0], "-o", "-")
    assert exported.status == 0, exported.err
    assert json.loads(exported.out.splitlines()[0])["run_id"] == demo.run_ids[0]
    assert not (tmp_path / "-").exists()
    stdin = io.TextIOWrapper(io.BytesIO(exported.out.encode("utf-8")), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    imported = cli("--db", f"sqlite:///{tmp_path / 'copy.db'}", "import", "-")
    assert imported.status == 0, imported.err
    assert imported.out.strip() == demo.run_ids[0]


# 9. --version and --db -----------------------------------------------------------------------


def test_version_prints_the_package_version(cli: Cli) -> None:
    """``--version`` prints the installed distribution's version."""
    with pytest.raises(SystemExit) as exited:
        cli("--version")
    assert exited.value.code == 0


def test_version_text(capsys: pytest.CaptureFixture[str]) -> None:
    """The version line reads ``agentledger X.Y.Z``."""
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"agentledger {version('agentledger')}"


def test_an_empty_db_is_refused(cli: Cli) -> None:
    """``--db ""`` is an error, not a silent fall-back to the default file."""
    refused(cli("--db", "", "runs"), "--db is empty")


@pytest.mark.parametrize("spelling", ["ledger.db", "./ledger.db"])
def test_a_bare_path_is_a_sqlite_file(
    cli: Cli, demo: Demo, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """``--db ledger.db`` means that SQLite file, relative to the working directory."""
    monkeypatch.chdir(demo.path.parent)
    listed = cli("--db", spelling, "runs", "--json")
    assert listed.status == 0, listed.err
    assert [r["run_id"] for r in json.loads(listed.out)] == demo.run_ids


def test_a_bare_path_in_the_environment_is_a_sqlite_file(
    cli: Cli, demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AGENTLEDGER_DB=ledger.db`` is read like ``--db ledger.db``."""
    monkeypatch.chdir(demo.path.parent)
    monkeypatch.setenv("AGENTLEDGER_DB", "ledger.db")
    assert cli("verify").out.startswith("intact: 2 runs")


def test_an_absolute_bare_path_is_a_sqlite_file(cli: Cli, demo: Demo) -> None:
    """``--db /abs/ledger.db`` works too."""
    assert cli("--db", str(demo.path), "verify").out.startswith("intact: 2 runs")


# 10. plurals ---------------------------------------------------------------------------------


def test_messages_say_one_run_not_one_runs(cli: Cli, demo: Demo) -> None:
    """`verify` of one run says ``1 run``; two say ``2 runs``."""
    one = cli("--db", demo.url, "verify", demo.run_ids[0])
    assert one.out.startswith("intact: 1 run, ")
    assert cli("--db", demo.url, "verify").out.startswith("intact: 2 runs, ")


# 11. --json ----------------------------------------------------------------------------------


def test_verify_json_has_counts_problems_and_checkpoints(cli: Cli, demo: Demo) -> None:
    """``verify --json`` prints the verdict, the counts and the (empty) findings."""
    result = cli("--db", demo.url, "verify", "--json")
    assert result.status == 0
    report = json.loads(result.out)
    assert report["ok"] is True
    assert report["runs_checked"] == 2
    assert report["problems"] == report["log_problems"] == report["checkpoints"] == []


def test_export_and_import_json(cli: Cli, demo: Demo, tmp_path: Path) -> None:
    """``export --json`` gives path, run id and lines; ``import --json`` gives the run id."""
    target = tmp_path / "r.jsonl"
    run_id = demo.run_ids[0]
    exported = json.loads(cli("--db", demo.url, "export", run_id, "-o", str(target), "--json").out)
    assert exported["path"] == str(target)
    assert exported["run_id"] == run_id
    assert exported["lines"] == len(target.read_text("utf-8").splitlines())
    imported = cli("--db", f"sqlite:///{tmp_path / 'b.db'}", "import", str(target), "--json")
    assert json.loads(imported.out) == {"run_id": run_id}


def test_run_and_rerun_json(cli: Cli, demo: Demo, tmp_path: Path) -> None:
    """``run --json`` and ``rerun --json`` print run ids and answers."""
    script = tmp_path / "answers.json"
    plan = {"steps": [{"goal": "add", "tool": "calculator", "args": {"expression": "2+3"}}]}
    calls = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]}
    script.write_text(json.dumps([json.dumps(plan), calls, "5."]), encoding="utf-8")
    ran = cli("--db", demo.url, "run", "2+3?", "--model", f"scripted:{script}", "--json")
    assert ran.status == 0, ran.err
    result = json.loads(ran.out)
    assert result["answer"] == "5."
    assert result["status"] == "answered"
    rerun = cli("--db", demo.url, "rerun", result["run_id"], "--json")
    assert rerun.status == 0, rerun.err
    [again] = json.loads(rerun.out)
    assert again["parent_run_id"] == result["run_id"]
    assert again["answer"] == "5."


# 6. PostgreSQL connection errors say what failed, quickly --------------------------------------


def _pg_base() -> str:
    """The test server's URL without a database name."""
    url = os.environ.get("AGENTLEDGER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
    return url.rsplit("/", 1)[0]


def _timed(cli: Cli, url: str) -> tuple[Output, float]:
    start = time.perf_counter()
    out = cli("--db", url, "runs")
    return out, time.perf_counter() - start


@pytest.mark.postgres
def test_a_missing_postgres_database_is_named_at_once(cli: Cli, pg_url: str) -> None:
    """No 10-second wait and no "pool initialization incomplete": the server's own reason."""
    del pg_url  # the fixture says the server is there
    out, seconds = _timed(cli, f"{_pg_base()}/no_such_db_here")
    assert out.status == 2
    assert 'database "no_such_db_here" does not exist' in out.err
    assert seconds < 3


def test_a_refused_postgres_connection_is_named(cli: Cli) -> None:
    """Nothing listens on the port: "Connection refused", not a pool timeout."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    out, _ = _timed(cli, f"postgresql://postgres@127.0.0.1:{port}/test")
    assert out.status == 2
    assert "Connection refused" in out.err


def test_a_server_that_never_answers_times_out_in_seconds(cli: Cli) -> None:
    """A listener that accepts and says nothing: the open gives up after a few seconds."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        out, seconds = _timed(cli, f"postgresql://postgres@127.0.0.1:{port}/test")
    assert out.status == 2
    assert "cannot connect to PostgreSQL" in out.err
    assert seconds < 3 + 2  # the connect timeout, plus start-up


# 8. replay --all: no progress bar into a file; an interruption keeps what was done ----------------


def test_replay_all_draws_no_progress_bar_into_a_file(cli: Cli, demo: Demo) -> None:
    """Stderr that is not a terminal (here, captured) gets no carriage-return progress bar."""
    result = cli("--db", demo.url, "replay", "--all")
    assert result.status == 0, result
    assert "\r" not in result.err
    assert result.out.count("identical") == 2


def test_an_interrupted_replay_all_prints_the_runs_it_replayed(
    cli: Cli, demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during the second run: the first run's result is printed, exit 130."""
    real = replay_module.replay_run
    calls: list[str] = []

    def interrupted_on_the_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(replay_module, "replay_run", interrupted_on_the_second)
    result = cli("--db", demo.url, "replay", "--all")
    assert result.status == 130
    assert f"{calls[0]}  identical" in result.out
    assert calls[1] not in result.out
    assert "interrupted after 1 of 2 runs" in result.err


# 11. output fits the terminal ----------------------------------------------------------------


def test_runs_and_show_fit_an_80_column_terminal(demo: Demo) -> None:
    """Given a terminal's width, every line of the table and the timeline fits it."""
    with Ledger.open(demo.url) as ledger:
        table = runs_table(ledger.runs(), width=80)
        lines = timeline(ledger.events(demo.run_ids[0]), width=80).splitlines()
    assert all(len(line) <= 80 for line in table.splitlines())
    assert demo.run_ids[0][:8] in table
    assert all(len(line) <= 80 for line in lines)
    assert any(line.endswith("\u2026") for line in lines), "something was long enough to clip"


def test_output_to_a_file_keeps_the_full_table(cli: Cli, demo: Demo) -> None:
    """Not a terminal: the full-width table with whole run ids, as scripts expect."""
    result = cli("--db", demo.url, "runs")
    assert demo.run_ids[0] in result.out


# 12. show last, show --conversation ----------------------------------------------------------


def test_show_last_shows_the_newest_run(cli: Cli, demo: Demo, tmp_path: Path) -> None:
    """``show last`` is the newest run; in an empty ledger it says there are no runs."""
    newest = cli("--db", demo.url, "show", "last")
    assert newest.status == 0, newest.err
    assert newest.out.startswith(f"run {demo.run_ids[0]} ")
    assert (
        json.loads(cli("--db", demo.url, "show", "last", "--json").out)["run"]["run_id"]
        == (demo.run_ids[0])
    )
    empty = tmp_path / "empty.db"
    Ledger.open(f"sqlite:///{empty}").close()
    refused(cli("--db", f"sqlite:///{empty}", "show", "last"), "no runs")


def test_show_conversation_prints_each_message_once_wrapped(cli: Cli, tmp_path: Path) -> None:
    """``show --conversation``: role: content lines, wrapped; later calls name the earlier one."""
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    with Ledger.open(url) as ledger, ledger.record_run("chat") as run:
        messages = [
            {"role": "system", "content": "be brief " * 30},
            {"role": "user", "content": "go"},
        ]
        for index in range(3):
            response = {"role": "assistant", "content": f"answer {index}"}
            run.model_call(provider="scripted", model="m", messages=messages, response=response)
            messages = [*messages, response, {"role": "tool", "content": f"result {index}"}]
    shown = cli("--db", url, "show", "last", "--conversation")
    assert shown.status == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0] == f"run {run.run_id}"
    assert shown.out.count("be brief be brief") >= 2  # wrapped onto several lines ...
    assert sum(line.startswith("  system: ") for line in lines) == 1  # ... and shown once
    assert all(len(line) <= 100 for line in lines)
    assert "  => assistant: answer 2" in lines
    assert "  tool: result 1" in lines
    assert "  (5 earlier as in #3: its messages and response)" in lines


def test_show_conversation_prints_what_an_sdk_response_answered(cli: Cli, tmp_path: Path) -> None:
    """Instrumented calls record the SDK's whole response: the answer is what is shown."""
    url = f"sqlite:///{tmp_path / 'sdk.db'}"
    user = [{"role": "user", "content": "weather?"}]
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Sunny."},
            }
        ],
    }
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Rain "},
            {"type": "text", "text": "later."},
            {"type": "tool_use", "id": "tu_1", "name": "radar", "input": {"city": "Oslo"}},
        ],
    }
    with Ledger.open(url) as ledger, ledger.record_run("sdk") as run:
        run.model_call(provider="openai", model="m", messages=user, response=completion)
        run.model_call(provider="anthropic", model="m", messages=user, response=message)
    shown = cli("--db", url, "show", "last", "--conversation")
    assert shown.status == 0, shown.err
    assert "  => assistant: Sunny." in shown.out.splitlines()
    assert "  => assistant: Rain later. " in shown.out
    assert '"name": "radar"' in shown.out
    assert "chatcmpl-1" not in shown.out


def test_the_command_table_names_what_each_module_registers() -> None:
    """`agentledger CMD` imports only CMD's module: the table must match what modules register."""
    import argparse
    import importlib

    from agentledger.cli._main import COMMANDS

    for module, names in COMMANDS.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"agentledger.cli.{module}").register(sub)
        assert tuple(sub.choices) == names, module


def test_reading_commands_start_without_the_heavy_modules(tmp_path: Path) -> None:
    """`runs`, `show` and `verify` on SQLite load no agents, SDKs, psycopg, SQLAlchemy or crypto.

    Nor the event catalogue's pydantic models, the redaction detectors, the recorder, the `Run`
    aggregate or the transparency log's tables: they read stored payloads as JSON. `verify`
    alone loads the verifier.
    """
    import subprocess
    import sys

    db = f"sqlite:///{tmp_path / 'l.db'}"
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    with Ledger.open(db) as ledger, ledger.record_run("a", input="q", tags=["t"]) as run:
        run.answer("x")
    Ledger.open(empty).close()
    heavy = ["agentledger.agents", "openai", "anthropic", "psycopg", "sqlalchemy", "cryptography"]
    heavy += ["structlog", "agentledger.projections", "eventsourcing.postgres", "asyncio"]
    heavy += ["pydantic", "agentledger.ledger.events", "agentledger.ledger.redaction"]
    heavy += ["agentledger.ledger._recording", "agentledger.ledger._entry", "concurrent.futures"]
    heavy += ["agentledger.ledger._run", "agentledger.ledger._tlog_tables"]
    verifier = ["agentledger.ledger._verify"]
    for url, command in (
        (db, ["runs"]),
        (db, ["runs", "--json", "--tag", "t", "--since", "1d"]),
        (empty, ["runs"]),
        (db, ["show", "last"]),
        (db, ["show", "--help"]),
        (db, ["verify"]),
        (empty, ["verify"]),
    ):
        script = (
            "import sys\nfrom agentledger.cli import main\n"
            f"try:\n    status = main(['--db', {url!r}, *{command!r}])\n"
            f"finally:\n    print(sorted(m for m in {heavy + verifier!r} if m in sys.modules))\n"
            "raise SystemExit(status)"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
        expected = verifier if command[0] == "verify" else []
        assert done.stdout.strip().splitlines()[-1] == str(expected), (command, done.stdout)


def test_show_follow_prints_new_events_until_the_run_ends(tmp_path: Path) -> None:
    """``show --follow`` tails a live run from another process and stops when it completes."""
    import subprocess
    import sys

    db = f"sqlite:///{tmp_path / 'l.db'}"
    ledger = Ledger.open(db)
    run = ledger.record_run("live", input="q")
    run.plan({"steps": 1})
    command = [sys.executable, "-m", "agentledger.cli", "--db", db, "show", run.run_id, "--follow"]
    follower = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follower.stdout is not None
        assert "following" in follower.stdout.readline()
        assert "RunStarted" in follower.stdout.readline()
        assert "PlanProposed" in follower.stdout.readline()  # already recorded: shown at once
        run.delta({"seen": True})
        assert "DeltaApplied" in follower.stdout.readline()  # recorded later: shown as it comes
        run.answer("done")
        run.complete()
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
        follower.communicate()
        ledger.close()
    assert follower.returncode == 0, err
    assert "SynthesisProduced" in out
    assert "RunCompleted" in out
    assert out.rstrip().endswith("run completed at position 5")


def test_show_follow_of_a_finished_run_prints_it_and_stops(cli: Cli, tmp_path: Path) -> None:
    """A run that already ended is printed whole; --follow does not wait."""
    db = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger.open(db) as ledger, ledger.record_run("done", input="q") as run:
        run.answer("a")
    result = cli("--db", db, "show", "last", "--follow")
    assert result.status == 0
    assert result.out.rstrip().endswith("run completed at position 3")


def complete(script: str, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` with the generated completion loaded."""
    import subprocess

    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        '_agentledger_complete; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_completion_offers_commands_options_and_choices(cli: Cli) -> None:
    """``completion bash`` completes commands, each command's options and option choices."""
    result = cli("completion", "bash")
    assert result.status == 0
    script = result.out
    assert complete(script, "agentledger", "re") == ["replay", "rerun", "resume", "report"]
    assert "--follow" in complete(script, "agentledger", "show", "--")
    assert complete(script, "agentledger", "--db", "x.db", "runs", "--status", "c") == ["completed"]
    assert complete(script, "agentledger", "keys", "g") == ["generate"]
    zsh = cli("completion", "zsh").out
    assert zsh.startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert zsh.endswith("complete -o default -F _agentledger_complete agentledger\n")


def test_export_all_or_by_tag_writes_one_file_per_run_and_import_takes_them_back(
    cli: Cli, tmp_path: Path
) -> None:
    """``export --all|--tag T -o DIR`` writes DIR/RUN.jsonl; ``import DIR`` (or files) reads all."""
    db = f"sqlite:///{tmp_path / 'a.db'}"
    with Ledger.open(db) as ledger:
        ids = []
        for n, tags in enumerate((["nightly"], [], ["nightly"])):
            with ledger.record_run("a", input=f"q{n}", tags=tags) as run:
                run.answer(f"answer {n}")
            ids.append(run.run_id)
    out = tmp_path / "runs"
    tagged = cli("--db", db, "export", "--tag", "nightly", "-o", str(out), "--json")
    assert tagged.status == 0, tagged.err
    assert sorted(p.stem for p in out.iterdir()) == sorted([ids[0], ids[2]])
    assert [row["run_id"] for row in json.loads(tagged.out)] == [ids[0], ids[2]]  # oldest first
    again = cli("--db", db, "export", "--tag", "nightly", "-o", str(out))
    assert again.status == 2
    assert "never overwritten" in again.err
    everything = tmp_path / "all"
    assert cli("--db", db, "export", "--all", "-o", str(everything)).status == 0
    assert len(list(everything.iterdir())) == 3

    other = f"sqlite:///{tmp_path / 'b.db'}"
    imported = cli("--db", other, "import", str(out), "--json")
    assert imported.status == 0, imported.err
    assert sorted(json.loads(imported.out)["imported"]) == sorted([ids[0], ids[2]])
    (tmp_path / "bad.jsonl").write_text("not json\n", encoding="utf-8")
    mixed = cli(
        "--db", other, "import", str(everything / f"{ids[1]}.jsonl"), str(tmp_path / "bad.jsonl")
    )
    assert mixed.status == 1
    assert mixed.out.split() == [ids[1]]
    assert f"not imported {tmp_path / 'bad.jsonl'}" in mixed.err
    with Ledger.open(other) as ledger:
        assert sorted(ledger.run_ids()) == sorted(ids)
        assert ledger.verify().ok
    refused(cli("--db", other, "import", "-", str(out)), "give it alone")
    refused(cli("--db", db, "export", "--all", "-o", "-"), "give -o DIR")


def test_runs_n_1_lists_the_newest_run(cli: Cli, demo: Demo) -> None:
    """``runs -n 1`` is ``--limit 1``: the newest run alone, and a note that there are more."""
    result = cli("--db", demo.url, "runs", "-n", "1", "--json")
    assert result.status == 0
    assert [row["run_id"] for row in json.loads(result.out)] == [demo.run_ids[0]]
    assert "showing 1 of 2 runs" in result.err


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "postgresql://postgres@127.0.0.1/x?password=s3cretQ",
            "unsupported URL option(s) password",
        ),
        ("postgresql://postgres:s3cretPW@127.0.0.1:notaport/x", "the URL is malformed"),
        ("postgresql://postgres:s3cretPW@127.0.0.1:99999/x", "Port out of range"),
        ("postgresql://u:s3cretPW@[::1/x", "Invalid IPv6 URL"),
    ],
)
def test_a_bad_database_url_is_named_without_its_secrets(cli: Cli, url: str, said: str) -> None:
    """A password in the query or a malformed URL: a clean error, the secret never shown."""
    out = cli("--db", url, "runs")
    assert out.status == 2
    assert said in out.err
    assert "s3cret" not in out.err + out.out
    assert "Traceback" not in out.err


# 13. damaged files, and files that hold no ledger --------------------------------------------


def _damage(path: Path) -> None:
    """Overwrite every page of a SQLite file but the first (its schema), as a disk fault might."""
    data = path.read_bytes()
    page_size = int.from_bytes(data[16:18], "big")
    path.write_bytes(data[:page_size] + b"A" * (len(data) - page_size))


@pytest.mark.parametrize(
    "command",
    [
        ["verify"],
        ["runs"],
        ["stats"],
        ["show", "RUN"],
        ["annotate", "RUN", "--author", "a", "--note", "n"],
        ["checkpoint", "--key", "KEY"],
    ],
)
def test_a_damaged_file_is_named_damaged(
    cli: Cli, demo: Demo, tmp_path: Path, command: list[str]
) -> None:
    """A file whose pages no longer read is an error naming it damaged, not a traceback."""
    key, _ = write_key_pair("example.org/log", tmp_path)
    argv = [{"RUN": demo.run_ids[0], "KEY": str(key)}.get(word, word) for word in command]
    _damage(demo.path)
    before = demo.path.read_bytes()
    refused(
        cli("--db", demo.url, *argv),
        f"{demo.url}: the database file is damaged (database disk image is malformed)",
    )
    assert demo.path.read_bytes() == before


def _not_a_ledger(path: Path, kind: str) -> None:
    """An empty file, or another program's SQLite database."""
    if kind == "empty":
        path.touch()
        return
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["empty", "foreign"])
@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["verify"],
        ["show", "x"],
        ["stats"],
        ["state", "x"],
        ["erase", "--subject", "s", "--reason", "r", "--requested-by", "q", "-y"],
        ["annotate", "x", "--author", "a", "--note", "n"],
        ["fork", "x", "--at", "1"],
        ["projections", "catch-up"],
    ],
)
def test_a_file_holding_no_ledger_is_named_and_left_alone(
    cli: Cli, tmp_path: Path, kind: str, command: list[str]
) -> None:
    """Commands on recorded runs neither read nor add tables to a file that holds no ledger."""
    path = tmp_path / "other.db"
    _not_a_ledger(path, kind)
    before = path.read_bytes()
    refused(
        cli("--db", f"sqlite:///{path}", *command),
        f"sqlite:///{path}: the database file is not an agentledger ledger (no agentledger tables)",
    )
    assert path.read_bytes() == before


def test_an_empty_file_still_takes_a_new_ledger(cli: Cli, tmp_path: Path) -> None:
    """``demo`` records into an empty file (one made by ``touch`` or ``mktemp``)."""
    path = tmp_path / "made.db"
    path.touch()
    assert cli("--db", f"sqlite:///{path}", "demo").status == 0
    assert len(json.loads(cli("--db", f"sqlite:///{path}", "runs", "--json").out)) == 1


def _damage_table(path: Path, table: str) -> None:
    """Overwrite the root page of one table of a SQLite file: the rest still reads."""
    conn = sqlite3.connect(path)
    try:
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", [table]
        ).fetchone()
    finally:
        conn.close()
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    data[(root - 1) * page_size : root * page_size] = b"A" * page_size
    path.write_bytes(bytes(data))


def test_a_run_recorded_into_a_damaged_file_fails_cleanly(cli: Cli, demo: Demo) -> None:
    """``demo`` into a file whose blobs no longer read names the failed run, not a traceback."""
    _damage_table(demo.path, "agentledger_blobs")
    refused(cli("--db", demo.url, "demo"), "failed", "database disk image is malformed")
    refused(cli("--db", demo.url, "verify"), "the database file is damaged")


def test_last_names_the_newest_run_for_every_command(cli: Cli, demo: Demo) -> None:
    """``last`` works where a run is named (state, export, report...), not only in show."""
    for args in (
        ("state", "last"),
        ("verify", "last"),
        ("replay", "last"),
        ("annotate", "last", "--author", "a", "--note", "seen"),
    ):
        done = cli("--db", demo.url, *args)
        assert done.status == 0, (args, done.err)
    shown = cli("--db", demo.url, "show", "last", "--json")
    assert json.loads(shown.out)["run"]["run_id"] == demo.run_ids[0]


def test_docs_cli_names_every_option_of_every_command() -> None:
    """docs/cli.md lists every command's options: an option added to a parser must be there too."""
    import argparse
    import importlib
    import re

    from agentledger.cli._main import COMMANDS

    doc = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text("utf-8").splitlines()
    missing: list[tuple[str, list[str]]] = []

    def check(command: list[str], parser: argparse.ArgumentParser) -> None:
        lines = [
            line
            for line in doc
            if f"agentledger {command[0]}" in line and all(word in line for word in command[1:])
        ]
        for action in parser._actions:  # argparse keeps them nowhere public
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    check([*command, name], sub)
                continue
            options = [o for o in action.option_strings if o not in {"-h", "--help"}]
            found = any(
                re.search(re.escape(o) + r"(?![\w-])", line) for o in options for line in lines
            )
            if options and not found:
                missing.append((" ".join(command), options))

    for module in COMMANDS:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"agentledger.cli.{module}").register(sub)
        for name, command in sub.choices.items():
            check([name], command)
    assert missing == []
