"""How a SQLite ledger's commits reach the disk: the durability modes, and checkpoints.

``normal`` (the default) commits into the write-ahead log without waiting for the disk; ``full``
waits at every commit. Whatever the mode, a signed checkpoint never covers an event that is not
on disk yet. (That a commit survives the process being killed is tested with real processes in
tests/test_ledger_processes.py.)
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from agentledger.ledger import Ledger, UsageError
from agentledger.ledger.signed_note import generate_key

SYNCHRONOUS = {"normal": 1, "full": 2}
"""SQLite's ``PRAGMA synchronous`` values of the two modes."""


def writer_synchronous(ledger: Ledger) -> int:
    """``PRAGMA synchronous`` of the connection the ledger commits on."""
    with ledger.recorder.datastore.get_connection(commit=True) as connection:
        return int(connection.raw.execute("PRAGMA synchronous").fetchone()[0])


def record_runs(ledger: Ledger, count: int) -> list[str]:
    """``count`` completed runs of a plan and a delta each; their ids."""
    ids = []
    for n in range(count):
        with ledger.record_run("durable", input=f"job {n}") as run:
            run.plan({"step": n})
            run.delta({"done": {str(n): True}})
        ids.append(run.run_id)
    return ids


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_each_durability_mode_sets_how_commits_wait_for_the_disk(
    sqlite_url: str, durability: str
) -> None:
    """The mode asked for is the one the writer connection commits with, and it says so."""
    with Ledger.open(sqlite_url, durability=durability) as ledger:
        record_runs(ledger, 1)
        assert ledger.durability == durability
        assert writer_synchronous(ledger) == SYNCHRONOUS[durability]


def test_a_sqlite_ledger_commits_in_normal_mode_by_default(sqlite_url: str) -> None:
    """Without a choice the ledger takes ``normal``: no disk wait per commit."""
    with Ledger.open(sqlite_url) as ledger:
        assert ledger.durability == "normal"
        assert writer_synchronous(ledger) == SYNCHRONOUS["normal"]


def test_an_unknown_durability_is_refused_by_name(sqlite_url: str) -> None:
    """A mistyped mode is a usage error that names it and the modes there are."""
    with pytest.raises(UsageError) as caught:
        Ledger.open(sqlite_url, durability="fsync")
    assert "'fsync'" in str(caught.value)
    assert "'normal' or 'full'" in str(caught.value)


def test_a_signed_checkpoint_covers_only_events_already_in_the_database_file(
    tmp_path: Path,
) -> None:
    """Signing moves the write-ahead log into the (synced) database file first.

    A copy of the database file alone, without its ``-wal`` file (what a power loss could
    leave of commits made in ``normal`` mode), holds every event the checkpoint covers and
    verifies against it.
    """
    source = tmp_path / "live"
    source.mkdir()
    url = f"sqlite:///{source / 'ledger.db'}"
    signer, verifier = generate_key("durable.example/log")
    with Ledger.open(url) as ledger:
        ids = record_runs(ledger, 3)
        assert (source / "ledger.db-wal").stat().st_size > 0, "commits wait in the log"
        note = ledger.checkpoint(signer)
        copy = tmp_path / "copy"
        copy.mkdir()
        shutil.copyfile(source / "ledger.db", copy / "ledger.db")
    with Ledger.open(f"sqlite:///{copy / 'ledger.db'}", read_only=True) as copied:
        assert copied.run_ids() == sorted(ids)
        report = copied.verify(checkpoint=note, verifier_keys=[verifier])
        assert report.ok, [str(p) for p in report.log_problems]
        covered = report.checkpoints[0].checkpoint.size
        assert covered == sum(len(copied.events(run_id)) for run_id in ids) == 3 * 4


def test_a_full_ledger_signs_checkpoints_too(sqlite_url: str) -> None:
    """In ``full`` mode every commit is already on disk: signing needs no extra step."""
    signer, verifier = generate_key("full.example/log")
    with Ledger.open(sqlite_url, durability="full") as ledger:
        record_runs(ledger, 2)
        note = ledger.checkpoint(signer)
        assert ledger.verify(checkpoint=note, verifier_keys=[verifier]).ok


def test_signing_while_a_reader_holds_an_old_snapshot_syncs_the_log_instead(
    sqlite_url: str,
) -> None:
    """A reader in the middle of a transaction keeps the log from moving into the file.

    Signing does not wait for it: it syncs the log file itself, and the checkpoint covers
    every event, those committed after the reader's snapshot too.
    """
    signer, verifier = generate_key("reader.example/log")
    with Ledger.open(sqlite_url) as ledger:
        record_runs(ledger, 1)
        path = sqlite_url.removeprefix("sqlite:///")
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            assert reader.execute("SELECT count(*) FROM agentledger_events").fetchone() == (4,)
            ids = record_runs(ledger, 2)
            note = ledger.checkpoint(signer)
            assert reader.execute("SELECT count(*) FROM agentledger_events").fetchone() == (4,)
        finally:
            reader.close()
        report = ledger.verify(checkpoint=note, verifier_keys=[verifier])
        assert report.ok, [str(p) for p in report.log_problems]
        assert report.checkpoints[0].checkpoint.size == 4 + sum(
            len(ledger.events(run_id)) for run_id in ids
        )
