"""Tamper evidence on a real database: an attacker with SQL access edits the stored ledger.

The attacker first drops the append-only triggers (the tests also show that, while in place,
they refuse UPDATE and DELETE), then alters a payload byte, deletes, swaps or truncates events,
or alters or deletes a blob. Stored state and blobs are packed (Zstandard with the published
dictionary, `DICTIONARY_V1`); the attacker unpacks, edits and repacks them with any Zstandard
library, or garbles the packed bytes themselves. Each must be caught by ``agentledger verify``
(exit status 1), which names the run, the position and the reason. Runs on a SQLite file and on
PostgreSQL.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
import zstandard
from psycopg import sql

from agentledger.cli import main
from agentledger.ledger import (
    CorruptBlobError,
    CorruptEventError,
    ExportRefusedError,
    Ledger,
    SequentialIds,
    StepClock,
)
from agentledger.ledger._codec import DICTIONARY_V1

AGENTLEDGER = Path(sys.executable).with_name("agentledger")
SQLITE_TRIGGERS = (
    "agentledger_events_no_update",
    "agentledger_events_no_delete",
    "agentledger_blobs_no_update",
    "agentledger_blobs_no_delete",
)
PG_TRIGGERS = (
    ("agentledger_events_append_only", "agentledger_events"),
    ("agentledger_events_no_truncate", "agentledger_events"),
    ("agentledger_blobs_append_only", "agentledger_blobs"),
    ("agentledger_blobs_no_truncate", "agentledger_blobs"),
)


# The attacker's view of the database ----------------------------------------------------------


ZSTD_DICTIONARY = zstandard.ZstdCompressionDict(
    DICTIONARY_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT
)


def inflate(packed: bytes) -> bytes:
    """Unpack a Zstandard frame made with the published dictionary."""
    return zstandard.ZstdDecompressor(dict_data=ZSTD_DICTIONARY).decompress(packed)


def deflate(data: bytes) -> bytes:
    """Pack as the ledger does (any Zstandard encoder with the dictionary will do)."""
    return zstandard.ZstdCompressor(level=19, dict_data=ZSTD_DICTIONARY).compress(data)


@dataclass
class Database:
    """Raw SQL access to a ledger's tables, as an attacker (or a DBA) has it."""

    url: str
    kind: str
    schema: str = ""
    _conn: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind == "sqlite":
            self._conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), isolation_level=None)
        else:
            parts = urlsplit(self.url)
            self.schema = parse_qs(parts.query)["schema"][0]
            self._conn = psycopg.connect(parts._replace(query="").geturl(), autocommit=True)
            self._conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement (``?`` placeholders) and return its rows."""
        if self.kind == "postgresql":
            statement = statement.replace("?", "%s")
        cursor = self._conn.execute(statement, tuple(params))
        return list(cursor.fetchall()) if cursor.description else []

    def originator(self, run_id: str) -> str:
        """How the events table spells a run id."""
        return run_id.replace("-", "") if self.kind == "sqlite" else run_id

    def drop_triggers(self) -> None:
        """Remove the append-only triggers, as a determined attacker would first."""
        if self.kind == "sqlite":
            for name in SQLITE_TRIGGERS:
                self.execute(f"DROP TRIGGER {name}")
            return
        for name, table in PG_TRIGGERS:
            self._conn.execute(
                sql.SQL("DROP TRIGGER {} ON {}.{}").format(
                    sql.Identifier(name), sql.Identifier(self.schema), sql.Identifier(table)
                )
            )

    def packed_state(self, run_id: str, position: int) -> bytes:
        """The stored state bytes of one event, as they are on disk."""
        rows = self.execute(
            "SELECT state FROM agentledger_events "
            "WHERE originator_id = ? AND originator_version = ?",
            [self.originator(run_id), position],
        )
        return bytes(rows[0][0])

    def state(self, run_id: str, position: int) -> bytes:
        """The stored state of one event, unpacked: its envelope's JSON."""
        packed = self.packed_state(run_id, position)
        if packed[:1] == b"\x02":  # the hash raw, then the rest of the JSON packed
            rest = inflate(packed[33:])
            return b'{"hash":"' + packed[1:33].hex().encode() + b'",' + rest[1:]
        assert packed[:1] == b"\x01", "new rows are packed"
        return inflate(packed[1:])

    def set_state(self, run_id: str, position: int, state: bytes) -> None:
        """Overwrite the stored state of one event with `state` (JSON), packed again."""
        self.set_packed_state(run_id, position, b"\x01" + deflate(state))

    def set_packed_state(self, run_id: str, position: int, state: bytes) -> None:
        """Overwrite the stored state bytes of one event as they are."""
        self.execute(
            "UPDATE agentledger_events SET state = ? WHERE originator_id = ? "
            "AND originator_version = ?",
            [state, self.originator(run_id), position],
        )

    def move(self, run_id: str, old: int, new: int) -> None:
        """Give the event at position `old` the position `new`."""
        self.execute(
            "UPDATE agentledger_events SET originator_version = ? WHERE originator_id = ? "
            "AND originator_version = ?",
            [new, self.originator(run_id), old],
        )

    def delete_events(self, run_id: str, positions: Sequence[int]) -> None:
        """Delete events by position."""
        for position in positions:
            self.execute(
                "DELETE FROM agentledger_events WHERE originator_id = ? AND originator_version = ?",
                [self.originator(run_id), position],
            )

    def blob(self, ref: str) -> tuple[str, bytes]:
        """A stored blob's encoding and data."""
        encoding, data = self.execute(
            "SELECT encoding, data FROM agentledger_blobs WHERE ref = ?", [ref]
        )[0]
        return encoding, bytes(data)


# The recorded ledger ---------------------------------------------------------------------------


@dataclass
class Recorded:
    """A ledger with one audited run (and a bystander run) and the attacker's connection."""

    url: str
    db: Database
    run_id: str
    bystander: str
    positions: dict[str, int]
    refs: dict[str, str]
    count: int


def record_audited_run(url: str) -> tuple[str, dict[str, int], dict[str, str], int]:
    """Record a run with raw and packed blobs; return its id, positions, blob refs and length."""
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds(url)) as ledger:
        with ledger.record_run("auditee", input="Is the harbour walk on?", tags=["audit"]) as run:
            with run.step("plan") as step:
                call = run.model_call(
                    provider="scripted",
                    model="planner",
                    messages=[
                        {"role": "system", "content": "Plan as JSON."},
                        {"role": "user", "content": "Is the harbour walk on?"},
                    ],
                    response={"role": "assistant", "content": '{"tool": "weather"}'},
                    prompt=run.prompt("planner", "1", "Plan as JSON."),
                    step_id=step,
                )
                run.plan({"tool": "weather"}, step_id=step, caused_by=call.position)
            with run.step("weather") as step:
                hours = [{"hour": h, "forecast": "sunny", "temp_c": 19} for h in range(120)]
                run.tool("weather", {"place": "Harbour"}, result={"hours": hours}, step_id=step)
                run.delta({"weather": {"forecast": "sunny", "temp_c": 19}}, step_id=step)
            run.answer("Yes: sunny and 19 C.", evidence_ids=["wx"])
        records = ledger.events(run.run_id)
    positions: dict[str, int] = {}
    for record in records:
        positions.setdefault(record.kind, record.position)
    model_call = next(r for r in records if r.kind == "ModelCalled").payload
    returned = next(r for r in records if r.kind == "ToolReturned").payload
    refs = {"prompt": model_call["prompt"]["text_ref"], "tool_data": returned["data_ref"]}
    return run.run_id, positions, refs, len(records)


def record_bystander(url: str) -> str:
    """An untouched run next to the audited one."""
    with Ledger.open(url) as ledger, ledger.record_run("bystander", input="hello") as run:
        run.answer("hi")
    return run.run_id


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def recorded(request: pytest.FixtureRequest) -> Iterator[Recorded]:
    """A recorded ledger on SQLite or PostgreSQL, with the triggers still in place."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    run_id, positions, refs, count = record_audited_run(url)
    bystander = record_bystander(url)
    db = Database(url, request.param)
    yield Recorded(url, db, run_id, bystander, positions, refs, count)
    db.close()


@pytest.fixture
def attacked(recorded: Recorded) -> Recorded:
    """The same ledger after the attacker dropped the append-only triggers."""
    recorded.db.drop_triggers()
    return recorded


def verify_cli(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Run ``agentledger --db URL verify`` in-process; return the status and the BROKEN lines."""
    capsys.readouterr()
    status = main(["--db", url, "verify"])
    out = capsys.readouterr().out
    return status, [line for line in out.splitlines() if line.startswith("BROKEN run ")]


def problem(run_id: str, position: int, reason: str) -> str:
    """The start of the line verify prints for a problem."""
    return f"BROKEN run {run_id} position {position}: {reason}"


def named(lines: list[str]) -> set[tuple[int, str]]:
    """(position, reason) of each BROKEN line."""
    found = set()
    for line in lines:
        head = line.split(" (", 1)[0]
        where, reason = head.split(": ", 1)
        found.add((int(where.rsplit(" ", 1)[1]), reason))
    return found


# Triggers -------------------------------------------------------------------------------------


def test_triggers_refuse_update_and_delete_while_in_place(recorded: Recorded) -> None:
    """With the triggers in place, UPDATE and DELETE on events and blobs fail and change nothing."""
    db, origin = recorded.db, recorded.db.originator(recorded.run_id)
    error = sqlite3.DatabaseError if db.kind == "sqlite" else psycopg.Error
    statements = [
        ("UPDATE agentledger_events SET topic = 'Forged' WHERE originator_id = ?", [origin]),
        ("DELETE FROM agentledger_events WHERE originator_id = ?", [origin]),
        ("UPDATE agentledger_blobs SET data = data", []),
        ("DELETE FROM agentledger_blobs", []),
    ]
    if db.kind == "postgresql":
        statements += [("TRUNCATE agentledger_events", []), ("TRUNCATE agentledger_blobs", [])]
    for statement, params in statements:
        with pytest.raises(error, match="append-only"):
            db.execute(statement, params)
    with Ledger.open(recorded.url) as ledger:
        assert len(ledger.events(recorded.run_id)) == recorded.count
        assert ledger.verify().ok


def test_an_untouched_ledger_verifies(
    recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any tampering, verify exits 0 and says the ledger is intact."""
    status, broken = verify_cli(recorded.url, capsys)
    assert (status, broken) == (0, [])


# Events ---------------------------------------------------------------------------------------


def test_one_altered_payload_byte_is_named(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Changing one character of a stored payload is reported at that position only."""
    position = attacked.positions["DeltaApplied"]
    state = attacked.db.state(attacked.run_id, position)
    assert state.count(b'"temp_c":19') == 1
    attacked.db.set_state(attacked.run_id, position, state.replace(b'"temp_c":19', b'"temp_c":18'))
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    assert broken[0].startswith(problem(attacked.run_id, position, "payload altered"))
    assert named(broken) == {(position, "payload altered")}
    assert attacked.bystander not in "\n".join(broken)


@pytest.mark.slow
def test_one_altered_payload_byte_is_named_by_the_installed_command(attacked: Recorded) -> None:
    """The real ``agentledger`` executable exits 1 and names the altered event."""
    position = attacked.positions["PlanProposed"]
    state = attacked.db.state(attacked.run_id, position)
    attacked.db.set_state(attacked.run_id, position, state.replace(b"weather", b"weathes", 1))
    done = subprocess.run(
        [str(AGENTLEDGER), "--db", attacked.url, "verify"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert problem(attacked.run_id, position, "payload altered") in done.stdout
    assert "BROKEN (1 run)" in done.stdout


@pytest.mark.parametrize(
    ("garble", "packed"),
    [
        pytest.param(lambda state: state[: len(state) // 2], False, id="json-cut-in-half"),
        pytest.param(lambda state: state.replace(b'"', b"'", 1), False, id="json-quote-changed"),
        pytest.param(lambda state: b"\xff" + state[1:], False, id="json-not-utf8"),
        pytest.param(lambda _state: b"[]", False, id="json-not-an-envelope"),
        pytest.param(lambda state: state[: len(state) // 2], True, id="packed-cut-in-half"),
        pytest.param(lambda state: state + b"\x00", True, id="packed-trailing-byte"),
        pytest.param(lambda state: b"\x01\xff" + state[2:], True, id="packed-garbled"),
        pytest.param(lambda state: b"\x09" + state[1:], True, id="unknown-form"),
    ],
)
def test_an_unreadable_stored_event_is_named_not_a_crash(
    attacked: Recorded, capsys: pytest.CaptureFixture[str], garble: Any, packed: bool
) -> None:
    """Stored bytes that no longer decode are named at their position; reading says so too."""
    position = attacked.positions["PlanProposed"]
    if packed:
        state = attacked.db.packed_state(attacked.run_id, position)
        attacked.db.set_packed_state(attacked.run_id, position, garble(state))
    else:
        state = attacked.db.state(attacked.run_id, position)
        attacked.db.set_state(attacked.run_id, position, garble(state))
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    assert broken[0].startswith(problem(attacked.run_id, position, "payload altered"))
    assert named(broken) == {(position, "payload altered")}
    with Ledger.open(attacked.url) as ledger, pytest.raises(CorruptEventError) as caught:
        ledger.events(attacked.run_id)
    assert (caught.value.run_id, caught.value.position) == (attacked.run_id, position)


def test_rows_stored_as_plain_json_still_read_and_verify(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database written before packing (state as canonical JSON) reads and verifies as is."""
    for position in range(1, attacked.count + 1):
        state = attacked.db.state(attacked.run_id, position)
        attacked.db.set_packed_state(attacked.run_id, position, state)
    status, broken = verify_cli(attacked.url, capsys)
    assert (status, broken) == (0, [])
    with Ledger.open(attacked.url) as ledger:
        assert len(ledger.events(attacked.run_id)) == attacked.count


def test_a_deleted_event_is_named_at_its_position(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting one event in the middle is reported once, as missing at its position."""
    position = attacked.positions["ToolCalled"]
    attacked.db.delete_events(attacked.run_id, [position])
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    assert broken[0].startswith(problem(attacked.run_id, position, "event missing"))
    found = named(broken)
    assert {reason for _, reason in found} == {"event missing"}
    assert {p for p, _ in found} <= {position, position + 1}, "later events are present"


def test_a_deletion_does_not_hide_a_later_alteration(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a gap, verify still checks the events that follow it and names an altered one."""
    gone = attacked.positions["PlanProposed"]
    altered = attacked.positions["DeltaApplied"]
    state = attacked.db.state(attacked.run_id, altered)
    attacked.db.set_state(attacked.run_id, altered, state.replace(b'"temp_c":19', b'"temp_c":25'))
    attacked.db.delete_events(attacked.run_id, [gone])
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    assert (gone, "event missing") in named(broken)
    assert (altered, "payload altered") in named(broken)


def test_two_swapped_events_are_named(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Swapping the positions of two events is reported as reordering at both positions."""
    first, second = attacked.positions["PlanProposed"], attacked.positions["DeltaApplied"]
    attacked.db.move(attacked.run_id, first, -1)
    attacked.db.move(attacked.run_id, second, first)
    attacked.db.move(attacked.run_id, -1, second)
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    assert broken[0].startswith(problem(attacked.run_id, first, "events reordered"))
    found = named(broken)
    assert {(first, "events reordered"), (second, "events reordered")} <= found
    assert {reason for _, reason in found} == {"events reordered"}
    assert all(first <= position <= second + 1 for position, _ in found)


@pytest.mark.parametrize("cut", [1, 3])
def test_a_truncated_tail_is_named(
    attacked: Recorded, capsys: pytest.CaptureFixture[str], cut: int
) -> None:
    """Deleting the last events is reported at the first missing position."""
    kept = attacked.count - cut
    attacked.db.delete_events(attacked.run_id, range(kept + 1, attacked.count + 1))
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    assert broken[0].startswith(problem(attacked.run_id, kept + 1, "tail truncated"))
    assert named(broken) == {(kept + 1, "tail truncated")}


def test_an_export_of_a_cut_or_altered_run_is_refused(attacked: Recorded, tmp_path: Path) -> None:
    """Its file would import and verify as whole: export refuses it and writes nothing."""
    out = tmp_path / "exports"
    out.mkdir()
    target = out / "run.jsonl"
    attacked.db.delete_events(attacked.run_id, [attacked.count])
    with Ledger.open(attacked.url) as ledger:
        with pytest.raises(ExportRefusedError, match="the last were deleted"):
            ledger.export_run(attacked.run_id, target)
        assert list(out.iterdir()) == []  # not even a partial file
        ledger.export_run(attacked.bystander, target)  # the others export as before
    kept = attacked.count - 1
    attacked.db.execute(
        "UPDATE agentledger_runs SET last_position = ?, head_hash = ? WHERE run_id = ?",
        [kept, "0" * 64, attacked.run_id],
    )
    with Ledger.open(attacked.url) as ledger, pytest.raises(ExportRefusedError, match="altered"):
        ledger.export_run(attacked.run_id, out / "again.jsonl")


def test_export_all_reports_a_cut_run_and_exports_the_others(
    attacked: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export --all -o DIR``: the cut run is named and not written, the rest are; exit 1."""
    from agentledger.cli import main

    attacked.db.delete_events(attacked.run_id, [attacked.count])
    out = tmp_path / "all"
    assert main(["--db", attacked.url, "export", "--all", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"not exported {attacked.run_id}: run {attacked.run_id} fails its own checks" in err
    assert sorted(p.name for p in out.iterdir()) == [f"{attacked.bystander}.jsonl"]


def test_a_truncated_tail_with_a_forged_index_is_still_named(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Truncating and rewriting the runs index to match still shows: a completed run has no end."""
    kept = attacked.count - 2
    attacked.db.delete_events(attacked.run_id, range(kept + 1, attacked.count + 1))
    with Ledger.open(attacked.url) as ledger:
        head = ledger.events(attacked.run_id)[-1].hash
    attacked.db.execute(
        "UPDATE agentledger_runs SET last_position = ?, head_hash = ? WHERE run_id = ?",
        [kept, head, attacked.run_id],
    )
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    assert broken[0].startswith(problem(attacked.run_id, kept + 1, "tail truncated"))


# Blobs ----------------------------------------------------------------------------------------


def test_an_altered_raw_blob_is_named_where_it_is_first_used(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Changing a stored (raw) prompt text is reported at the model call that refers to it."""
    ref = attacked.refs["prompt"]
    encoding, data = attacked.db.blob(ref)
    assert encoding == "raw"
    assert data == b'"Plan as JSON."'
    attacked.db.execute(
        "UPDATE agentledger_blobs SET data = ? WHERE ref = ?", [b'"Plan as JSON!"', ref]
    )
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    position = attacked.positions["ModelCalled"]
    assert broken[0].startswith(problem(attacked.run_id, position, "blob altered"))
    assert ref in broken[0]
    assert named(broken) == {(position, "blob altered")}


def test_an_altered_compressed_blob_is_named_where_it_is_first_used(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unpacking, editing and repacking a blob is reported at its tool result."""
    ref = attacked.refs["tool_data"]
    encoding, data = attacked.db.blob(ref)
    assert encoding == "zstd-d1"
    content = inflate(data)
    forged = content.replace(b'"forecast":"sunny"', b'"forecast":"storm"', 1)
    assert forged != content
    attacked.db.execute(
        "UPDATE agentledger_blobs SET data = ? WHERE ref = ?", [deflate(forged), ref]
    )
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    position = attacked.positions["ToolReturned"]
    assert broken[0].startswith(problem(attacked.run_id, position, "blob altered"))
    assert named(broken) == {(position, "blob altered")}


def test_a_blob_that_no_longer_unpacks_is_named_not_a_crash(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Garbled packed bytes are a "blob altered" at first use; reading the blob says why."""
    ref = attacked.refs["tool_data"]
    _, data = attacked.db.blob(ref)
    attacked.db.execute(
        "UPDATE agentledger_blobs SET data = ? WHERE ref = ?", [data[: len(data) // 2], ref]
    )
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    position = attacked.positions["ToolReturned"]
    assert broken[0].startswith(problem(attacked.run_id, position, "blob altered"))
    assert named(broken) == {(position, "blob altered")}
    with Ledger.open(attacked.url) as ledger, pytest.raises(CorruptBlobError, match="zstd-d1"):
        ledger.blob(ref)


def test_blobs_stored_in_the_older_zlib_form_still_read_and_verify(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """A blob written before packing (``zlib``) reads and verifies as is."""
    ref = attacked.refs["tool_data"]
    _, data = attacked.db.blob(ref)
    attacked.db.execute(
        "UPDATE agentledger_blobs SET encoding = 'zlib', data = ? WHERE ref = ?",
        [zlib.compress(inflate(data)), ref],
    )
    status, broken = verify_cli(attacked.url, capsys)
    assert (status, broken) == (0, [])
    with Ledger.open(attacked.url) as ledger:
        assert ledger.blob(ref)["hours"][0]["forecast"] == "sunny"


def test_a_deleted_blob_is_named_where_it_is_first_used(
    attacked: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting a blob is reported as missing at the event that refers to it."""
    ref = attacked.refs["tool_data"]
    attacked.db.execute("DELETE FROM agentledger_blobs WHERE ref = ?", [ref])
    status, broken = verify_cli(attacked.url, capsys)
    assert status == 1
    position = attacked.positions["ToolReturned"]
    assert broken[0].startswith(problem(attacked.run_id, position, "blob missing"))
    assert named(broken) == {(position, "blob missing")}


@pytest.mark.parametrize("where", ["DeltaApplied", "ToolReturned"])
def test_a_broken_run_still_counts_the_blobs_it_checked(recorded: Recorded, where: str) -> None:
    """Verify reads a broken run again to name where hashes are stored; its blobs stay counted."""
    with Ledger.open(recorded.url) as ledger:
        intact = ledger.verify(recorded.run_id)
        everything = ledger.verify()
    assert intact.ok
    assert intact.blobs_checked > 0
    recorded.db.drop_triggers()
    position = recorded.positions[where]
    state = recorded.db.state(recorded.run_id, position)
    forged = state.replace(b'"ts":"2026-', b'"ts":"2025-', 1)
    assert forged != state
    recorded.db.set_state(recorded.run_id, position, forged)
    with Ledger.open(recorded.url) as ledger:
        one = ledger.verify(recorded.run_id)
        every = ledger.verify()
    assert not one.ok
    assert not every.ok
    assert one.blobs_checked == intact.blobs_checked
    assert every.blobs_checked == everything.blobs_checked
