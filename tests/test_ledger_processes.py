"""Real processes writing one SQLite ledger: concurrent writers, and a writer killed mid-run.

The writers are this file run as a script (``python tests/test_ledger_processes.py MODE ...``),
so each test drives separate interpreters with their own connections, exactly as two agents on
one machine would. Marked slow: each test spawns processes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).resolve()
BATCHES = 20
PER_BATCH = 10
TIMEOUT_S = 60


# The worker (runs in the child process) ------------------------------------------------------


def wait_for(path: Path, timeout_s: float) -> None:
    """Poll until `path` exists."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            msg = f"{path} did not appear within {timeout_s} s"
            raise TimeoutError(msg)
        time.sleep(0.002)


def record_in_batches(url: str, barrier: Path, name: str) -> None:
    """Open the ledger, say ready, wait for the go flag, then record BATCHES batches."""
    from agentledger.ledger import Ledger

    with Ledger.open(url) as ledger:
        (barrier / f"{name}.ready").touch()
        wait_for(barrier / "go", TIMEOUT_S)
        with ledger.record_run(f"worker-{name}", input={"worker": name}, tags=[name]) as run:
            for batch in range(BATCHES):
                with run.batch():
                    for item in range(PER_BATCH // 2):
                        key = f"{name}-{batch}-{item}"
                        run.tool("lookup", {"key": key}, result={"key": key, "value": batch})
                if batch == 0:  # both runs are open before either goes on: they overlap
                    (barrier / f"{name}.started").touch()
                    for other in barrier.glob("*.ready"):
                        wait_for(barrier / f"{other.stem}.started", TIMEOUT_S)
        print(json.dumps({"run_id": run.run_id, "position": run.position}), flush=True)


def open_new_at_once(url: str, barrier: Path, name: str) -> None:
    """Wait for the go flag, then open a ledger file that may not exist yet and record a run."""
    from agentledger.ledger import Ledger

    (barrier / f"{name}.ready").touch()
    wait_for(barrier / "go", TIMEOUT_S)
    with Ledger.open(url) as ledger, ledger.record_run(f"opener-{name}", tags=[name]) as run:
        run.delta({"opened_by": name})
    print(json.dumps({"run_id": run.run_id}), flush=True)


def record_forever(url: str) -> None:
    """Record two-event batches until killed, printing each committed position."""
    from agentledger.ledger import Ledger

    ledger = Ledger.open(url)
    run = ledger.record_run("doomed", input="record until killed")
    print(json.dumps({"run_id": run.run_id, "position": run.position}), flush=True)
    count = 0
    while True:
        count += 1
        with run.batch():
            run.plan({"count": count, "padding": "x" * 200})
            run.delta({"progress": {"count": count}})
        print(json.dumps({"run_id": run.run_id, "position": run.position}), flush=True)


def record_forever_async(url: str) -> None:
    """Record write-behind until killed, printing each position after `aflush` returns."""
    import asyncio

    from agentledger.ledger import Ledger

    async def forever() -> None:
        ledger = Ledger.open(url)
        run = await ledger.arecord_run("doomed-async", input="record until killed")
        count = 0
        while True:
            for _ in range(5):  # write-behind: not waited for
                count += 1
                await run.aplan({"count": count, "padding": "x" * 200})
                await run.adelta({"progress": {"count": count}})
            await run.aflush()  # a durability point
            print(json.dumps({"run_id": run.run_id, "position": run.position}), flush=True)

    asyncio.run(forever())


def record_forever_instrumented(url: str) -> None:
    """Make sync instrumented calls (write-behind) until killed; print positions after flush."""
    from agentledger.agents.testing import ScriptedClient
    from agentledger.ledger import Ledger

    ledger = Ledger.open(url)
    run = ledger.record_run("doomed-calls", input="call until killed")
    client = run.instrument(ScriptedClient(lambda messages: f"echo {len(messages)}"))
    count = 0
    while True:
        for _ in range(5):  # write-behind: not waited for
            count += 1
            client.chat.completions.create(
                model="scripted-1", messages=[{"role": "user", "content": f"call {count}"}]
            )
        run.flush()  # a durability point
        print(json.dumps({"run_id": run.run_id, "position": run.position}), flush=True)


# The tests (run in pytest) -------------------------------------------------------------------


def spawn(*args: str) -> subprocess.Popen[str]:
    """Start this file as a worker process."""
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_together(mode: str, url: str, barrier: Path, names: Sequence[str]) -> list[str]:
    """Start one worker per name, let them all go at once; their outputs (each must succeed)."""
    barrier.mkdir()
    workers = [spawn(mode, url, str(barrier), name) for name in names]
    try:
        for name in names:
            try:
                wait_for(barrier / f"{name}.ready", TIMEOUT_S)
            except TimeoutError:
                for worker in workers:
                    worker.kill()
                said = [worker.communicate()[1] for worker in workers]
                raise AssertionError(f"a worker never got ready; they said: {said}") from None
        (barrier / "go").touch()
        outputs = [worker.communicate(timeout=TIMEOUT_S) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
    return [out for out, _ in outputs]


def kill_at(mode: str, url: str, position: int) -> dict[str, object]:
    """Start a worker, SIGKILL it once it reports ``position``; its last report."""
    worker = spawn(mode, url)
    try:
        assert worker.stdout is not None
        last: dict[str, object] = {}
        for line in worker.stdout:
            last = json.loads(line)
            if int(str(last["position"])) >= position:
                break
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=TIMEOUT_S)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
        if worker.stderr is not None:
            worker.stderr.close()
    assert worker.returncode == -signal.SIGKILL
    return last


@contextmanager
def kill_after_flushes(mode: str, url: str) -> Iterator[tuple[Any, list[Any]]]:
    """SIGKILL a worker once it has flushed past position 101; yield (ledger, run's events).

    Checks first that every position the worker reported as flushed is there, in order.
    """
    from agentledger.ledger import Ledger

    last = kill_at(mode, url, 101)
    with Ledger.open(url) as ledger:
        records = ledger.events(str(last["run_id"]))
        assert len(records) >= int(str(last["position"]))
        assert [r.position for r in records] == list(range(1, len(records) + 1))
        yield ledger, records


@pytest.mark.slow
def test_two_processes_record_into_one_sqlite_file_at_once(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two writers started together both complete ~200-event runs, and both verify."""
    from agentledger.cli import main
    from agentledger.ledger import Ledger

    names = ("alpha", "beta")
    outputs = start_together("record", sqlite_url, tmp_path / "barrier", names)
    results = [json.loads(out) for out in outputs]
    expected = 1 + BATCHES * PER_BATCH + 1
    assert [r["position"] for r in results] == [expected, expected]

    with Ledger.open(sqlite_url) as ledger:
        infos = [ledger.run(r["run_id"]) for r in results]
        for info, name in zip(infos, names, strict=True):
            assert (info.status, info.event_count, info.tags) == ("completed", expected, (name,))
            records = ledger.events(info.run_id)
            assert [r.position for r in records] == list(range(1, expected + 1))
        first, second = infos
        assert first.ended_at is not None
        assert second.ended_at is not None
        assert first.started_at < second.ended_at
        assert second.started_at < first.ended_at, "the two writers did not overlap"
        report = ledger.verify()
        assert report.ok
        assert report.runs_checked == 2
    capsys.readouterr()
    assert main(["--db", sqlite_url, "verify"]) == 0
    assert capsys.readouterr().out.startswith("intact: 2 runs")


@pytest.mark.slow
def test_a_writer_killed_mid_run_leaves_a_ledger_that_verifies(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL in the middle of recording leaves a running run with an unbroken chain.

    Every commit the writer reported before it was killed is there (the default durability,
    ``normal``, keeps each commit through the process's death).
    """
    from agentledger.cli import main
    from agentledger.ledger import Ledger, RunRecorder

    last = kill_at("forever", sqlite_url, 61)
    run_id = str(last["run_id"])

    with Ledger.open(sqlite_url) as ledger:
        records = ledger.events(run_id)
        count = len(records)
        assert count >= int(str(last["position"])), "a commit reported before the kill is lost"
        assert count % 2 == 1, "a two-event batch was split by the kill"
        assert [r.position for r in records] == list(range(1, count + 1))
        info = ledger.run(run_id)
        assert (info.status, info.event_count, info.head_hash) == (
            "running",
            count,
            records[-1].hash,
        )
        assert ledger.verify().ok
    capsys.readouterr()
    assert main(["--db", sqlite_url, "verify"]) == 0
    assert capsys.readouterr().out.startswith("intact: 1 run")

    with Ledger.open(sqlite_url) as ledger:
        resumed = RunRecorder(ledger, ledger.load(run_id))
        resumed.fail(RuntimeError("the writer was killed"))
        assert ledger.run(run_id).status == "failed"
        assert ledger.verify().ok


@pytest.mark.slow
def test_processes_opening_a_new_sqlite_file_together_all_succeed(tmp_path: Path) -> None:
    """Six processes opening one not-yet-created ledger at once: none is refused as locked.

    Switching a new file to WAL mode takes an exclusive lock for a moment, which SQLite refuses
    at once (no busy wait) while another opener holds one; each open waits its turn instead.
    """
    from agentledger.ledger import Ledger

    for attempt in range(3):
        url = f"sqlite:///{tmp_path / f'new-{attempt}.db'}"
        barrier = tmp_path / f"barrier-{attempt}"
        names = [f"p{n}" for n in range(6)]
        start_together("open-new", url, barrier, names)
        with Ledger.open(url) as ledger:
            assert sorted(tag for info in ledger.runs() for tag in info.tags) == names
            assert ledger.verify().ok


@pytest.mark.slow
def test_an_async_writer_killed_mid_run_keeps_every_flushed_event(sqlite_url: str) -> None:
    """SIGKILL during write-behind recording: what `aflush` confirmed is there, and it verifies.

    Events recorded after the last confirmed flush may or may not have been committed; the
    chain is whole either way.
    """
    with kill_after_flushes("forever-async", sqlite_url) as (ledger, _records):
        assert ledger.verify().ok


@pytest.mark.slow
def test_a_writer_of_instrumented_calls_killed_mid_run_keeps_every_flushed_call(
    sqlite_url: str,
) -> None:
    """SIGKILL between write-behind sync calls: every call `run.flush()` confirmed is there."""
    with kill_after_flushes("forever-instrumented", sqlite_url) as (ledger, records):
        assert all(r.kind == "ModelCalled" for r in records[1:])
        assert ledger.verify().ok


if __name__ == "__main__":
    mode, *arguments = sys.argv[1:]
    if mode == "record":
        record_in_batches(arguments[0], Path(arguments[1]), arguments[2])
    elif mode == "open-new":
        open_new_at_once(arguments[0], Path(arguments[1]), arguments[2])
    elif mode == "forever":
        record_forever(arguments[0])
    elif mode == "forever-async":
        record_forever_async(arguments[0])
    elif mode == "forever-instrumented":
        record_forever_instrumented(arguments[0])
    else:
        sys.exit(f"unknown mode {mode!r}")
