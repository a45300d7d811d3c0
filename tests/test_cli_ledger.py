"""The ``agentledger`` command over the ledger: demo, runs, show, verify, export, import, annotate.

Runs the CLI in-process through `agentledger.cli.main` (and once as the installed executable),
checking exit statuses, what goes to stdout and what to stderr. Expectations about the demo run
(its length, agent, conversations) are read from the ledger it wrote, so the tests hold whatever
scenario the demo records.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentledger.cli import main
from agentledger.ledger import Ledger, RecordedEvent

AGENTLEDGER = Path(sys.executable).with_name("agentledger")


@dataclass
class Output:
    """What one CLI invocation returned and printed."""

    status: int
    out: str
    err: str


class Cli:
    """Calls the CLI in-process and captures what it printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    def __call__(self, *argv: str) -> Output:
        """Run ``agentledger ARGV``."""
        self._capsys.readouterr()
        status = main(list(argv))
        captured = self._capsys.readouterr()
        return Output(status, captured.out, captured.err)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """The CLI, in-process."""
    return Cli(capsys)


def recorded_run_id(demo_output: str) -> str:
    """The run id from the demo's first line, ``Recorded run <id> ...``."""
    first = demo_output.splitlines()[0]
    assert first.startswith("Recorded run "), first
    return first.split()[2]


@dataclass
class Demo:
    """A ledger holding the demo run, and what the ledger says about it."""

    url: str
    run_id: str
    records: list[RecordedEvent]

    @property
    def count(self) -> int:
        """How many events the demo run has."""
        return len(self.records)


@pytest.fixture(scope="module")
def demo_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``agentledger demo`` recorded once per module; tests get their own copy of the file."""
    path = tmp_path_factory.mktemp("demo") / "template.db"
    status = main(["--db", f"sqlite:///{path}", "demo"])
    assert status == 0
    with Ledger.open(f"sqlite:///{path}") as ledger:
        (run_id,) = ledger.run_ids()
    return path, run_id


@pytest.fixture
def demo(demo_template: tuple[Path, str], tmp_path: Path) -> Demo:
    """A fresh SQLite ledger file holding the demo run."""
    template, run_id = demo_template
    path = tmp_path / "demo.db"
    shutil.copyfile(template, path)
    url = f"sqlite:///{path}"
    with Ledger.open(url) as ledger:
        return Demo(url, run_id, ledger.events(run_id))


def blob_rows(url: str) -> int:
    """How many blobs a SQLite ledger file holds."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return int(conn.execute("SELECT count(*) FROM agentledger_blobs").fetchone()[0])


def test_demo_records_shows_and_verifies_a_run(sqlite_url: str, cli: Cli) -> None:
    """The demo records a completed run, prints its timeline and answer, and says it is intact."""
    done = cli("--db", sqlite_url, "demo")
    assert done.status == 0, done.err
    run_id = recorded_run_id(done.out)
    with Ledger.open(sqlite_url) as ledger:
        records = ledger.events(run_id)
        assert ledger.run(run_id).status == "completed"
    assert records[0].kind == "RunStarted"
    assert records[-1].kind == "RunCompleted"
    assert run_id in done.out.splitlines()[0]
    timeline = [line.split() for line in done.out.splitlines() if line[:4].strip().isdigit()]
    assert [(int(t[0]), t[2]) for t in timeline] == [(r.position, r.kind) for r in records]
    assert "Answer" in done.out
    assert f"Verify: intact ({len(records)} events" in done.out
    assert done.err == ""


def test_runs_lists_the_demo_run(demo: Demo, cli: Cli) -> None:
    """`runs` prints a table row with the id, status, event count and agent; --json parses."""
    done = cli("--db", demo.url, "runs")
    assert done.status == 0
    header, row = done.out.splitlines()
    assert header.split()[:4] == ["RUN", "STATUS", "STARTED", "EVENTS"]
    assert row.split()[:2] == [demo.run_id, "completed"]
    assert str(demo.count) in row.split()
    agent = demo.records[0].payload["agent"]
    assert agent[:11] in row  # the table clips agent names to 12 characters
    listed = json.loads(cli("--db", demo.url, "runs", "--json").out)
    assert [(r["run_id"], r["status"], r["event_count"], r["agent"]) for r in listed] == [
        (demo.run_id, "completed", demo.count, agent)
    ]
    assert listed[0]["tags"] == ["demo"]
    filtered = cli("--db", demo.url, "runs", "--status", "failed")
    assert filtered.out.splitlines()[1:] == ["(no runs)"]
    tagged = cli("--db", demo.url, "runs", "--tag", "demo", "--json")
    assert [r["run_id"] for r in json.loads(tagged.out)] == [demo.run_id]


def test_show_accepts_a_prefix_and_prints_the_timeline(demo: Demo, cli: Cli) -> None:
    """`show PREFIX` resolves the run and prints one timeline line per event."""
    done = cli("--db", demo.url, "show", demo.run_id[:8])
    assert done.status == 0
    lines = done.out.splitlines()
    assert lines[0].startswith(f"run {demo.run_id}  agent=")
    assert f"status=completed  events={demo.count}" in lines[0]
    timeline = lines[1:]
    assert len(timeline) == demo.count
    assert [int(line.split()[0]) for line in timeline] == list(range(1, demo.count + 1))
    assert [line.split()[2] for line in timeline] == [r.kind for r in demo.records]


def test_show_json_resolves_blobs(demo: Demo, cli: Cli) -> None:
    """`show --json` gives full envelopes, with each model call's conversation resolved."""
    done = cli("--db", demo.url, "show", "--json", demo.run_id)
    assert done.status == 0
    shown = json.loads(done.out)
    assert shown["run"]["run_id"] == demo.run_id
    events = shown["events"]
    assert [{k: e[k] for k in e if k != "resolved"} for e in events] == [
        r.envelope() for r in demo.records
    ]
    model_calls = [e for e in events if e["kind"] == "ModelCalled"]
    assert model_calls, "the demo makes at least one model call"
    with Ledger.open(demo.url) as ledger:
        for call in model_calls:
            messages = call["resolved"]["messages"]
            assert messages == ledger.conversation(call["payload"]["messages_ref"])
            assert len(messages) == call["payload"]["message_count"]
            assert all(isinstance(m, dict) and "role" in m for m in messages)
            if call["payload"].get("response_ref"):
                response = ledger.blob(call["payload"]["response_ref"])["message"]
                assert call["resolved"]["response"] == response


def test_verify_exits_0_on_an_intact_ledger(demo: Demo, cli: Cli) -> None:
    """`verify` (all runs, or one by prefix) says intact and exits 0."""
    everything = cli("--db", demo.url, "verify")
    assert everything.status == 0
    assert everything.out.startswith(f"intact: 1 run, {demo.count} events")
    one = cli("--db", demo.url, "verify", demo.run_id[:6])
    assert one.status == 0
    assert one.out.startswith("intact: 1 run")


def test_export_then_import_into_another_database(demo: Demo, cli: Cli, tmp_path: Path) -> None:
    """`export -o` writes the file; `import` into another ledger prints the run id; it verifies."""
    exported = tmp_path / "demo.jsonl"
    done = cli("--db", demo.url, "export", demo.run_id[:8], "-o", str(exported))
    assert done.status == 0
    assert f"wrote {exported}" in done.err
    header = json.loads(exported.read_text(encoding="utf-8").split("\n", 1)[0])
    assert (header["run_id"], header["events"]) == (demo.run_id, demo.count)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    imported = cli("--db", other, "import", str(exported))
    assert imported.status == 0
    assert imported.out.strip() == demo.run_id
    assert cli("--db", other, "verify").status == 0
    with Ledger.open(other) as target:
        assert [r.envelope() for r in target.events(demo.run_id)] == [
            r.envelope() for r in demo.records
        ]


def test_import_of_a_tampered_file_exits_2_and_writes_nothing(
    demo: Demo, cli: Cli, tmp_path: Path
) -> None:
    """A file whose payload was edited after export is refused, and the target stays empty."""
    exported = tmp_path / "demo.jsonl"
    assert cli("--db", demo.url, "export", demo.run_id, "-o", str(exported)).status == 0
    lines = exported.read_text(encoding="utf-8").split("\n")
    middle = 1 + demo.count // 2
    event = json.loads(lines[middle])
    assert event["position"] == middle
    event["payload"]["actor"] = "someone else"
    lines[middle] = json.dumps(event, ensure_ascii=False)
    exported.write_text("\n".join(lines), encoding="utf-8")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    done = cli("--db", other, "import", str(exported))
    assert done.status == 2
    assert done.err.startswith("agentledger: ImportRefusedError")
    assert f"position {middle}: payload altered" in done.err
    assert done.out == ""
    with Ledger.open(other) as target:
        assert target.run_ids() == []
        assert target.runs() == []
    assert blob_rows(other) == 0


def test_annotate_appends_a_note_that_keeps_the_run_intact(demo: Demo, cli: Cli) -> None:
    """`annotate` appends RunAnnotated after RunCompleted; verify still passes."""
    done = cli(
        "--db",
        demo.url,
        "annotate",
        demo.run_id[:8],
        "--author",
        "auditor@example.org",
        "--note",
        "forecast checked",
        "--reason",
        "spot check",
        "--position",
        "2",
    )
    assert done.status == 0
    assert done.out.strip() == f"annotated run {demo.run_id} at position {demo.count + 1}"
    assert cli("--db", demo.url, "verify").status == 0
    with Ledger.open(demo.url) as ledger:
        last = ledger.events(demo.run_id)[-1]
    assert last.kind == "RunAnnotated"
    assert last.payload == {
        "about_position": 2,
        "author": "auditor@example.org",
        "note": "forecast checked",
        "reason": "spot check",
    }


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--author", "", "--note", ""], "--author is empty"),
        (["--author", "auditor", "--note", "  "], "--note is empty"),
        (["--author", "auditor", "--note", "n", "--position", "9999"], "--position 9999"),
        (["--author", "auditor", "--note", "n", "--position", "-1"], "--position -1"),
        (["--author", "auditor", "--note", "n", "--position", "0"], "--position 0"),
    ],
)
def test_annotate_refuses_an_empty_note_or_a_position_the_run_lacks(
    demo: Demo, cli: Cli, options: list[str], named: str
) -> None:
    """Nothing is appended: a note is permanent, so an empty one or one about no event is refused.

    These once exited 0 and stored the nonsense in the append-only ledger.
    """
    done = cli("--db", demo.url, "annotate", demo.run_id, *options)
    assert done.status == 2
    assert done.err.startswith("agentledger: ")
    assert named in done.err
    if "--position" in options:
        assert f"give 1 to {demo.count}" in done.err
    with Ledger.open(demo.url, read_only=True) as ledger:
        assert len(ledger.events(demo.run_id)) == demo.count


def test_annotate_takes_any_position_of_the_run(demo: Demo, cli: Cli) -> None:
    """The first and last events may be annotated, and so may an earlier note."""
    for position in (1, demo.count, demo.count + 1):
        done = cli(
            "--db",
            demo.url,
            "annotate",
            demo.run_id,
            "--author",
            "a",
            "--note",
            "n",
            "--position",
            str(position),
        )
        assert done.status == 0, done.err
    with Ledger.open(demo.url, read_only=True) as ledger:
        notes = ledger.events(demo.run_id)[demo.count :]
    assert [n.payload["about_position"] for n in notes] == [1, demo.count, demo.count + 1]


def test_the_database_comes_from_db_or_agentledger_db(
    demo: Demo, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--db wins; without it $AGENTLEDGER_DB is used; without both, ./agentledger.db."""
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    monkeypatch.setenv("AGENTLEDGER_DB", demo.url)
    from_env = cli("runs", "--json")
    assert [r["run_id"] for r in json.loads(from_env.out)] == [demo.run_id]
    Ledger.open(empty).close()  # read commands never create a database
    monkeypatch.setenv("AGENTLEDGER_DB", empty)
    assert json.loads(cli("runs", "--json").out) == []
    from_flag = cli("--db", demo.url, "runs", "--json")
    assert [r["run_id"] for r in json.loads(from_flag.out)] == [demo.run_id]

    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.delenv("AGENTLEDGER_DB")
    annotated = cli("annotate", "x", "--author", "a", "--note", "n")
    assert annotated.status == 2
    assert annotated.err.startswith("agentledger: ")
    assert "agentledger.db" in annotated.err
    assert "does not exist" in annotated.err
    assert not (workdir / "agentledger.db").exists()  # annotate works on runs already recorded


def test_verbose_logs_one_structured_line_per_appended_event(sqlite_url: str, cli: Cli) -> None:
    """``-v --log-json`` writes one JSON line per appended event to stderr, in order."""
    done = cli("--db", sqlite_url, "-v", "--log-json", "demo")
    assert done.status == 0
    run_id = recorded_run_id(done.out)
    with Ledger.open(sqlite_url) as ledger:
        records = ledger.events(run_id)
    logged = [json.loads(line) for line in done.err.splitlines()]
    appended = [line for line in logged if line["event"] == "event.appended"]
    assert len(appended) == len(records)
    assert [(a["run_id"], a["position"], a["kind"]) for a in appended] == [
        (r.run_id, r.position, r.kind) for r in records
    ]
    assert [a["hash"] for a in appended] == [r.hash[:16] for r in records]
    assert all(a["level"] == "info" for a in appended)
    assert "event.appended" not in done.out

    console = cli("--db", sqlite_url, "-v", "annotate", run_id, "--author", "a", "--note", "n")
    assert console.status == 0
    lines = console.err.splitlines()
    assert len(lines) == 1
    assert "event.appended" in lines[0]
    assert "RunAnnotated" in lines[0]
    assert run_id in lines[0]
    assert cli("--db", sqlite_url, "runs").err == ""


@pytest.mark.slow
def test_the_installed_command_runs_the_same_cli(demo: Demo, tmp_path: Path) -> None:
    """The ``agentledger`` executable honours AGENTLEDGER_DB and exits 0 on verify."""
    done = subprocess.run(
        [str(AGENTLEDGER), "verify"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"AGENTLEDGER_DB": demo.url, "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"intact: 1 run, {demo.count} events")
