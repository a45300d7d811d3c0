"""Attacks a signed checkpoint must catch, by an attacker with full database access.

The operator publishes checkpoints to a witness directory outside the database
(``agentledger checkpoint --key K --publish DIR``). The attacker may drop the append-only
triggers and rewrite any table, the log's own included. Each attack below passes a plain
``agentledger verify`` or would be invisible without the checkpoint (the tests show that where
it holds), and ``agentledger verify --checkpoint DIR --vkey K`` exits 1 naming what happened:
re-chained, truncated, rolled back, forked, bad signature. On a SQLite file and PostgreSQL.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_ledger_tamper import Database, record_audited_run, record_bystander

from agentledger.agents.testing import database_bytes
from agentledger.cli import main
from agentledger.ledger import GENESIS, Ledger, blob_ref, canonical_json, envelope_hash
from agentledger.ledger._codec import _pack
from agentledger.ledger.events import EVENT_TYPES

KEY_NAME = "audit.example/ledger"
LOG_TABLES = (
    "agentledger_log_batches",
    "agentledger_log_events",
    "agentledger_log_tiles",
    "agentledger_log_checkpoints",
)


@dataclass
class Operated:
    """A ledger whose operator published a checkpoint, and the attacker's connection."""

    url: str
    kind: str
    db: Database
    run_id: str
    bystander: str
    key: Path
    vkey: Path
    witness: Path
    tmp: Path
    capsys: pytest.CaptureFixture[str]

    def cli(self, *args: str, url: str | None = None) -> tuple[int, str, str]:
        """Run the CLI in-process; return status, stdout and stderr."""
        self.capsys.readouterr()
        status = main(["--db", url or self.url, *args])
        captured = self.capsys.readouterr()
        return status, captured.out, captured.err

    def verify(self, *extra: str, url: str | None = None) -> tuple[int, str]:
        """``verify --checkpoint WITNESS --vkey VKEY``: the auditor's command."""
        status, out, err = self.cli(
            "verify", "--checkpoint", str(self.witness), "--vkey", str(self.vkey), *extra, url=url
        )
        return status, out + err

    def checkpoint(self) -> None:
        """The operator's routine: integrate and publish."""
        status, _, err = self.cli(
            "checkpoint", "--key", str(self.key), "--publish", str(self.witness)
        )
        assert status == 0, err


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def operated(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[Operated]:
    """Two recorded runs, a key pair, and one published checkpoint covering both."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    run_id, _, _, _ = record_audited_run(url)
    bystander = record_bystander(url)
    db = Database(url, request.param)
    assert main(["keys", "generate", KEY_NAME, "--out", str(tmp_path)]) == 0
    stem = KEY_NAME.replace("/", "_")
    state = Operated(
        url,
        request.param,
        db,
        run_id,
        bystander,
        tmp_path / f"{stem}.key",
        tmp_path / f"{stem}.vkey",
        tmp_path / "witness",
        tmp_path,
        capsys,
    )
    state.checkpoint()
    yield state
    db.close()


def test_an_untouched_ledger_verifies_against_its_checkpoint(operated: Operated) -> None:
    """Exit 0 and a verdict that says what the checkpoint covers."""
    status, out = operated.verify()
    assert status == 0, out
    assert "checkpoints intact" in out


def test_events_recorded_after_the_checkpoint_are_said_to_be_uncovered(operated: Operated) -> None:
    """A newer run is fine, but the verdict says the checkpoint cannot vouch for it."""
    record_bystander(operated.url)
    status, out = operated.verify()
    assert status == 0, out
    assert "not covered" in out


def forge_the_forecast(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Turn the tool's first forecast to "storm" under a new blob ref and re-chain the run.

    Returns the forged ToolReturned line.
    """
    returned = next(x for x in lines if x.get("kind") == "ToolReturned")
    blob = next(x for x in lines if x.get("ref") == returned["payload"]["data_ref"])
    blob["content"]["hours"][0]["forecast"] = "storm"
    blob["ref"] = returned["payload"]["data_ref"] = blob_ref(canonical_json(blob["content"]))
    rechain(lines)
    return returned


def rechain(lines: list[dict[str, Any]]) -> None:
    """Recompute every event hash, link and end-event head hash with the documented formula."""
    prev = GENESIS
    for line in lines:
        if line.get("type") != "event":
            continue
        line["prev"] = prev
        if line["kind"] in {"RunCompleted", "RunFailed"}:
            line["payload"]["head_hash"] = prev
        line["hash"] = envelope_hash({k: v for k, v in line.items() if k != "type"})
        prev = line["hash"]


def forge_tool_result(operated: Operated) -> Path:
    """Export the audited run, change its tool result and re-chain the file."""
    exported = operated.tmp / "run.jsonl"
    assert operated.cli("export", operated.run_id, "-o", str(exported))[0] == 0
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    forge_the_forecast(lines)
    forged = operated.tmp / "forged.jsonl"
    forged.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return forged


def delete_run(db: Database, run_id: str) -> None:
    """Remove every trace of a run from the events and the runs index."""
    db.execute("DELETE FROM agentledger_events WHERE originator_id = ?", [db.originator(run_id)])
    db.execute("DELETE FROM agentledger_run_tags WHERE run_id = ?", [run_id])
    db.execute("DELETE FROM agentledger_runs WHERE run_id = ?", [run_id])


@pytest.mark.parametrize("rebuild_log", [False, True], ids=["log-kept", "log-rebuilt"])
def test_the_rechain_attack_is_caught(operated: Operated, rebuild_log: bool) -> None:
    """Forge a tool result, recompute the chain, delete the run, import: only a checkpoint sees it.

    Also when the attacker rebuilds the transparency log from the forged events: the signed root
    outside the database no longer matches, so the database is another history (forked).
    """
    forged = forge_tool_result(operated)
    operated.db.drop_triggers()
    delete_run(operated.db, operated.run_id)
    status, _, err = operated.cli("import", str(forged))
    assert status == 0, err
    status, out, _ = operated.cli("verify")
    assert status == 0, "without a checkpoint the re-chained run looks intact: the attack is real"
    if rebuild_log:
        for table in LOG_TABLES:
            operated.db.execute(f"DELETE FROM {table}")
        with Ledger.open(operated.url) as ledger:
            ledger.integrate()
    status, out = operated.verify()
    assert status == 1, out
    if rebuild_log:
        assert "forked" in out
    else:
        assert f"run {operated.run_id} position 1: re-chained" in out


def test_deleting_a_whole_run_is_caught_and_named(operated: Operated) -> None:
    """The bystander run disappears from events and index alike: truncated, naming it."""
    operated.db.drop_triggers()
    delete_run(operated.db, operated.bystander)
    assert operated.cli("verify")[0] == 0, "the rest of the ledger is self-consistent"
    status, out = operated.verify()
    assert status == 1, out
    assert f"run {operated.bystander} position 1: truncated" in out


def test_deleting_a_runs_last_events_is_caught_and_named(operated: Operated) -> None:
    """The audited run loses its last three events and the index is rewritten to match."""
    with Ledger.open(operated.url) as ledger:
        records = ledger.events(operated.run_id)
    keep = records[-4]
    operated.db.drop_triggers()
    operated.db.delete_events(operated.run_id, [r.position for r in records[-3:]])
    operated.db.execute(
        "UPDATE agentledger_runs SET last_position = ?, head_hash = ?, status = 'running', "
        "ended_at = NULL WHERE run_id = ?",
        [keep.position, keep.hash, operated.run_id],
    )
    status, out = operated.verify()
    assert status == 1, out
    assert f"run {operated.run_id} position {records[-3].position}: truncated" in out


def test_rolling_the_database_back_to_an_older_backup_is_caught(operated: Operated) -> None:
    """A backup from before the latest published checkpoint is restored: rolled back."""
    backup = operated.tmp / "backup"
    save_backup(operated, backup)
    record_bystander(operated.url)
    operated.checkpoint()
    restore_backup(operated, backup)
    status, out = operated.verify()
    assert status == 1, out
    assert "rolled back" in out


def save_backup(operated: Operated, path: Path) -> None:
    """A backup as an operator takes one: a file copy, or pg_dump of the schema."""
    if operated.kind == "sqlite":
        database = Path(operated.url.removeprefix("sqlite:///"))
        with Ledger.open(operated.url):
            pass
        shutil.copyfile(database, path)
        return
    dump = subprocess.run(
        ["pg_dump", "--no-owner", "--schema", operated.db.schema, pg_base(operated)],
        capture_output=True,
        check=True,
        timeout=60,
    )
    path.write_bytes(dump.stdout)


def restore_backup(operated: Operated, path: Path) -> None:
    """Put the backup back in place of the live database."""
    if operated.kind == "sqlite":
        database = Path(operated.url.removeprefix("sqlite:///"))
        for suffix in ("-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(path, database)
        return
    operated.db.execute(f'DROP SCHEMA "{operated.db.schema}" CASCADE')
    subprocess.run(
        ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(path), pg_base(operated)],
        capture_output=True,
        check=True,
        timeout=60,
    )


def pg_base(operated: Operated) -> str:
    """The PostgreSQL URL without the schema option, for pg_dump and psql."""
    return operated.url.split("?", 1)[0]


def test_another_database_under_the_same_origin_is_a_fork(
    operated: Operated, request: pytest.FixtureRequest
) -> None:
    """Split view: a second database signed with the same key cannot publish or verify."""
    other = str(request.getfixturevalue("sqlite_url" if operated.kind == "sqlite" else "pg_url"))
    if other == operated.url:
        other = f"sqlite:///{operated.tmp / 'other.db'}"
    for _ in range(8):  # more events than the published checkpoint covers
        record_bystander(other)
    status, _, err = operated.cli(
        "checkpoint", "--key", str(operated.key), "--publish", str(operated.witness), url=other
    )
    assert status == 2
    assert "forked" in err
    status, out = operated.verify(url=other)
    assert status == 1, out
    assert "forked" in out


def test_two_checkpoints_of_one_size_with_other_roots_are_a_split_view(
    operated: Operated, tmp_path: Path
) -> None:
    """Shown both, verify says the log presented two histories of the same size."""
    ours = operated.tmp / "ours.checkpoint"
    assert operated.cli("checkpoint", "--key", str(operated.key), "-o", str(ours))[0] == 0
    size = int(ours.read_text().splitlines()[1])
    other = f"sqlite:///{tmp_path / 'split.db'}"
    with Ledger.open(other) as ledger:
        while ledger.max_notification_id() < size:
            with ledger.record_run("other", input="x") as run:
                run.delta({"x": 1})
    theirs = operated.tmp / "theirs.checkpoint"
    with Ledger.open(other) as ledger:
        if ledger.max_notification_id() != size:
            pytest.skip("could not build a ledger of the same size")
    assert (
        operated.cli("checkpoint", "--key", str(operated.key), "-o", str(theirs), url=other)[0] == 0
    )
    status, out, err = operated.cli(
        "verify",
        "--checkpoint",
        str(ours),
        "--checkpoint",
        str(theirs),
        "--vkey",
        str(operated.vkey),
    )
    assert status == 1, out + err
    assert "split view" in out + err


def test_an_altered_checkpoint_is_a_bad_signature(operated: Operated) -> None:
    """One changed byte of a published checkpoint: verify refuses it as a bad signature."""
    published = sorted(operated.witness.iterdir())[-1]
    text = published.read_text()
    lines = text.split("\n")
    lines[1] = str(int(lines[1]) + 1)
    published.write_text("\n".join(lines))
    status, out = operated.verify()
    assert status == 1, out
    assert "bad signature" in out


def test_the_signing_key_is_nowhere_in_the_database(operated: Operated) -> None:
    """The private key never reaches the database file; the public checkpoint does."""
    if operated.kind != "sqlite":
        pytest.skip("the whole-file scan reads a SQLite file")
    secret = operated.key.read_text().strip().split("+", 4)[4]  # PRIVATE+KEY+name+hash+data
    stored = database_bytes(operated.url.removeprefix("sqlite:///"))
    assert secret.encode() not in stored
    assert base64.b64decode(secret)[1:] not in stored  # nor the raw seed
    public = operated.vkey.read_text().strip().split("+", 2)[2]
    assert KEY_NAME.encode() in stored  # positive control: the checkpoint is there
    assert public.encode() not in stored  # the key stays outside; only signatures are inside
    assert (operated.key.stat().st_mode & 0o777) == 0o600


# The auditor's offline check of one exported run ------------------------------------------------


def export_with_checkpoint(operated: Operated) -> Path:
    """The operator exports the audited run with the latest published checkpoint."""
    latest = sorted(operated.witness.iterdir())[-1]
    exported = operated.tmp / "audited.jsonl"
    status, _, err = operated.cli(
        "export", operated.run_id, "-o", str(exported), "--checkpoint", str(latest)
    )
    assert status == 0, err
    return exported


def verify_file(operated: Operated, path: Path, vkey: Path | None = None) -> tuple[int, str]:
    """``verify --file PATH --vkey VKEY``, with no database in reach."""
    operated.capsys.readouterr()
    status = main(["verify", "--file", str(path), "--vkey", str(vkey or operated.vkey)])
    captured = operated.capsys.readouterr()
    return status, captured.out + captured.err


def test_an_exported_run_verifies_offline_with_only_the_verifier_key(operated: Operated) -> None:
    """Every event of the exported run is proven in the signed checkpoint."""
    exported = export_with_checkpoint(operated)
    status, out = verify_file(operated, exported)
    assert status == 0, out
    assert "every event is covered" in out
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert (
        sum(1 for x in lines if x.get("type") == "proof")
        == json.loads(exported.read_text().splitlines()[0])["proofs"]
    )
    with Ledger.open("memory://") as elsewhere:  # the file still imports as a plain export
        assert elsewhere.import_file(exported) == operated.run_id


def test_importing_a_checkpointed_export_says_its_signature_is_not_checked(
    operated: Operated,
) -> None:
    """Import checks hashes, not signatures: a file with a checkpoint says how to check it."""
    exported = export_with_checkpoint(operated)
    plain = operated.tmp / "plain.jsonl"
    assert operated.cli("export", operated.run_id, "-o", str(plain))[0] == 0
    notes = []
    for path, db in ((exported, "signed.db"), (plain, "plain.db")):
        operated.capsys.readouterr()
        assert main(["--db", f"sqlite:///{operated.tmp / db}", "import", str(path)]) == 0
        captured = operated.capsys.readouterr()
        assert captured.out.strip() == operated.run_id
        notes.append(captured.err)
    assert "carries a signed checkpoint and inclusion proofs, which import does not" in notes[0]
    assert f"verify --file {exported} --vkey KEY" in notes[0]
    assert notes[1] == ""


def test_a_rechained_export_file_fails_its_inclusion_proofs(operated: Operated) -> None:
    """Forge the tool result in the file and recompute the chain: the proofs no longer hold."""
    exported = export_with_checkpoint(operated)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    returned = forge_the_forecast(lines)
    exported.write_text("".join(json.dumps(x) + "\n" for x in lines))
    status, out = verify_file(operated, exported)
    assert status == 1, out
    assert f"run {operated.run_id} position {returned['position']}: re-chained" in out


def test_an_export_file_without_its_checkpoint_or_signed_by_another_key_is_refused(
    operated: Operated,
) -> None:
    """No checkpoint, or one the auditor's key did not sign: a bad signature, exit 1."""
    exported = export_with_checkpoint(operated)
    assert main(["keys", "generate", KEY_NAME, "--out", str(operated.tmp / "other")]) != 0
    (operated.tmp / "other").mkdir()
    assert main(["keys", "generate", KEY_NAME, "--out", str(operated.tmp / "other")]) == 0
    status, out = verify_file(
        operated, exported, operated.tmp / "other" / f"{KEY_NAME.replace('/', '_')}.vkey"
    )
    assert status == 1, out
    assert "bad signature" in out
    lines = exported.read_text().splitlines()
    header = json.loads(lines[0])
    del header["proofs"]
    kept = [json.dumps(header)] + [
        x for x in lines[1:] if json.loads(x)["type"] in {"event", "blob"}
    ]
    exported.write_text("\n".join(kept) + "\n")
    status, out = verify_file(operated, exported)
    assert status == 1, out
    assert "no checkpoint (the file carries no checkpoint" in out
    assert "bad signature" not in out  # nothing was signed: no signature to call bad


def test_exporting_with_another_ledgers_checkpoint_is_refused(
    operated: Operated, tmp_path: Path
) -> None:
    """A checkpoint this ledger's log does not reproduce cannot back an export."""
    other = f"sqlite:///{tmp_path / 'other.db'}"
    for _ in range(3):
        record_bystander(other)
    foreign = tmp_path / "foreign.checkpoint"
    assert (
        operated.cli("checkpoint", "--key", str(operated.key), "-o", str(foreign), url=other)[0]
        == 0
    )
    target = tmp_path / "out.jsonl"
    status, _, err = operated.cli(
        "export", operated.run_id, "-o", str(target), "--checkpoint", str(foreign)
    )
    assert status == 2
    assert "not of this ledger" in err
    assert not target.exists()


# Rows that read one way for the chain check and another for the log ------------------------------


@pytest.mark.parametrize("form", ["0x02-prefix", "repeated-key"])
def test_a_stored_event_that_shows_the_log_its_old_hash_is_caught(
    operated: Operated, form: str
) -> None:
    """Re-chain the forged run but keep each event's logged hash where the log reads it.

    Either in the 0x02 prefix (with the new hash inside the packed JSON) or as a first "hash"
    key repeated later with the new one: the chain check refuses the state as unreadable, and
    the checkpoint check recomputes every leaf from content.
    """
    with Ledger.open(operated.url) as ledger:
        records = ledger.events(operated.run_id)
        returned = next(r for r in records if r.kind == "ToolReturned")
        content = ledger.blob(returned.payload["data_ref"])
        content["hours"][0]["forecast"] = "storm"
        forged_ref = ledger.put_blobs([content])[0]
    operated.db.drop_triggers()
    prev = GENESIS
    for record in records:
        envelope = record.envelope()
        if record.position == returned.position:
            envelope["payload"]["data_ref"] = forged_ref
        if record.kind in {"RunCompleted", "RunFailed"}:
            envelope["payload"]["head_hash"] = prev
        envelope["prev"] = prev
        digest = envelope_hash({k: v for k, v in envelope.items() if k != "hash"})
        if digest != record.hash:
            body = json.loads(operated.db.state(operated.run_id, record.position))
            body.update(hash=digest, prev=prev, payload=envelope["payload"])
            text = canonical_json(body)
            if form == "0x02-prefix":
                state = b"\x02" + bytes.fromhex(record.hash) + _pack(text)
            else:
                state = b"\x01" + _pack(b'{"hash":"' + record.hash.encode() + b'",' + text[1:])
            operated.db.set_packed_state(operated.run_id, record.position, state)
        prev = digest
    status, out, _ = operated.cli("verify")
    assert status == 1, out
    assert "the stored event cannot be read" in out
    status, out = operated.verify()
    assert status == 1, out
    assert "re-chained" in out


def test_rows_respelled_out_of_sight_of_the_chain_check_are_caught(operated: Operated) -> None:
    """Hide the covered answer under an upper-case run id and write a forged one in its place."""
    if operated.kind != "sqlite":
        pytest.skip("PostgreSQL stores run ids as uuid: there is no other spelling")
    with Ledger.open(operated.url) as ledger:
        records = ledger.events(operated.run_id)
    answer = next(r for r in records if r.kind == "SynthesisProduced")
    end = records[-1]
    operated.db.drop_triggers()
    operated.db.execute(
        "UPDATE agentledger_events SET originator_id = upper(originator_id) "
        "WHERE originator_id = ? AND originator_version >= ?",
        [operated.db.originator(operated.run_id), answer.position],
    )
    with Ledger.open(operated.url) as ledger:
        payload = dict(answer.payload) | {"answer": "No: storm warning, walk cancelled."}
        ledger.append(operated.run_id, EVENT_TYPES["SynthesisProduced"](**payload))
        head = ledger.events(operated.run_id)[-1]
        closing = dict(end.payload) | {"event_count": head.position + 1, "head_hash": head.hash}
        ledger.append(operated.run_id, EVENT_TYPES["RunCompleted"](**closing))
    status, out = operated.verify()
    assert status == 1, out
    assert "which the ledger never writes" in out


def test_damaged_log_tables_are_reported_not_a_crash(operated: Operated) -> None:
    """Garbage in the log's own tables: verify names the damage (exit 1), no traceback."""
    operated.db.execute("UPDATE agentledger_log_batches SET gaps = 'not json'")
    status, out = operated.verify()
    assert status == 1, out
    assert "log damaged" in out


def test_an_export_file_whose_last_proofs_were_stripped_is_not_intact(operated: Operated) -> None:
    """Without a proof an event could be forged: verify --file fails unless told to allow it."""
    exported = export_with_checkpoint(operated)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    proofs = [x for x in lines if x.get("type") == "proof"]
    stripped = {p["position"] for p in proofs[-2:]}
    kept = [x for x in lines if not (x.get("type") == "proof" and x["position"] in stripped)]
    kept[0]["proofs"] = len(proofs) - 2
    exported.write_text("".join(json.dumps(x) + "\n" for x in kept))
    status, out = verify_file(operated, exported)
    assert status == 1, out
    assert f"position {min(stripped)}: not covered" in out
    operated.capsys.readouterr()
    status = main(
        ["verify", "--file", str(exported), "--vkey", str(operated.vkey), "--allow-uncovered"]
    )
    out = operated.capsys.readouterr().out
    assert status == 0, out
    assert f"positions {min(stripped)}..{max(stripped)}) are not covered" in out


def test_a_second_row_at_a_covered_position_outside_the_order_is_caught(
    operated: Operated,
) -> None:
    """Drop the key, add a forged row at position 11 with an id the ledger never assigns."""
    with Ledger.open(operated.url) as ledger:
        records = ledger.events(operated.run_id)
    answer = next(r for r in records if r.kind == "SynthesisProduced")
    db = operated.db
    db.drop_triggers()
    if operated.kind == "sqlite":
        db.execute("ALTER TABLE agentledger_events RENAME TO old_events")
        db.execute(
            "CREATE TABLE agentledger_events (originator_id TEXT, originator_version INTEGER, "
            "topic TEXT, state BLOB)"
        )
        db.execute(
            "INSERT INTO agentledger_events (rowid, originator_id, originator_version, "
            "topic, state) SELECT rowid, * FROM old_events"
        )
        db.execute("DROP TABLE old_events")
    else:
        db.execute("ALTER TABLE agentledger_events DROP CONSTRAINT agentledger_events_pkey")
    envelope = answer.envelope()
    envelope["payload"] = dict(envelope["payload"]) | {"answer": "No: storm warning."}
    digest = envelope_hash({k: v for k, v in envelope.items() if k != "hash"})
    state = b"\x01" + _pack(
        canonical_json(
            {
                "hash": digest,
                "id": answer.event_id,
                "payload": envelope["payload"],
                "prev": answer.prev,
                "ts": answer.timestamp,
                "v": answer.version,
            }
        )
    )
    id_column = "rowid" if operated.kind == "sqlite" else "notification_id"
    db.execute(
        f"INSERT INTO agentledger_events ({id_column}, originator_id, originator_version, "
        "topic, state) VALUES (-1, ?, ?, ?, ?)",
        [db.originator(operated.run_id), answer.position, answer.kind, state],
    )
    status, out = operated.verify()
    assert status == 1, out
    assert f"run {operated.run_id} position {answer.position}: position repeated" in out


def test_one_run_checked_against_a_checkpoint_recomputes_every_other_row(
    operated: Operated,
) -> None:
    """Move the run's tail under another run id: checking that one run still sees it."""
    with Ledger.open(operated.url) as ledger:
        records = ledger.events(operated.run_id)
    answer = next(r for r in records if r.kind == "SynthesisProduced")
    keep = records[answer.position - 2]
    elsewhere = "0123456789abcdef0123456789abcdef"
    operated.db.drop_triggers()
    operated.db.execute(
        "UPDATE agentledger_events SET originator_id = ? WHERE originator_id = ? "
        "AND originator_version >= ?",
        [
            elsewhere if operated.kind == "sqlite" else str(uuid.UUID(elsewhere)),
            operated.db.originator(operated.run_id),
            answer.position,
        ],
    )
    operated.db.execute(
        "UPDATE agentledger_runs SET last_position = ?, head_hash = ?, status = 'running', "
        "ended_at = NULL WHERE run_id = ?",
        [keep.position, keep.hash, operated.run_id],
    )
    status, out = operated.verify(operated.run_id)
    assert status == 1, out
    assert "re-chained" in out


def test_a_plain_verify_says_what_it_cannot_see(operated: Operated) -> None:
    """Re-chained and imported again, the forged run passes a plain verify: which says why."""
    forged = forge_tool_result(operated)
    operated.db.drop_triggers()
    delete_run(operated.db, operated.run_id)
    assert operated.cli("import", str(forged))[0] == 0
    status, out, _ = operated.cli("verify")
    assert status == 0, out
    assert out.startswith("intact: 2 runs")
    assert "not checked against a signed checkpoint" in out
    assert "a history rewritten with every hash recomputed" in out
    status, out = operated.verify()
    assert status == 1, out
    assert "not checked against a signed checkpoint" not in out


def forge_backdated_run(operated: Operated) -> str:
    """A run made up by the attacker: the audited run's export under a new id, re-chained.

    Its times are those of the audited run, from before the published checkpoint.
    """
    exported = operated.tmp / "copy.jsonl"
    assert operated.cli("export", operated.run_id, "-o", str(exported))[0] == 0
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    forged_id = str(uuid.UUID(int=uuid.UUID(operated.run_id).int ^ 1))
    for line in lines:
        if "run_id" in line:
            line["run_id"] = forged_id
    forge_the_forecast(lines)
    forged = operated.tmp / "backdated.jsonl"
    forged.write_text("".join(json.dumps(x) + "\n" for x in lines))
    status, out, err = operated.cli("import", str(forged))
    assert status == 0, err
    assert out.strip() == forged_id
    return forged_id


def test_a_run_inserted_after_the_checkpoint_is_not_covered_when_checked_alone(
    operated: Operated,
) -> None:
    """``verify RUN --checkpoint`` on a backdated run no checkpoint signed: "not covered".

    The checkpoint itself holds (the events it signed are untouched), so a verdict that only
    said so would read as if it vouched for the run.
    """
    forged = forge_backdated_run(operated)
    status, out = operated.verify(forged)
    assert status == 1, out
    assert f"run {forged} position 1: not covered" in out
    assert "positions 1.." in out
    status, out = operated.verify(forged, "--allow-uncovered")
    assert status == 0, out
    assert f"positions 1..{len(operated_events(operated, forged))} of run {forged}" in out
    status, out = operated.verify(operated.run_id)
    assert status == 0, out
    assert f"every event of run {operated.run_id} is covered" in out
    status, out = operated.verify()
    assert status == 0, "the whole ledger holds; the new run's events are counted as later"
    assert "not covered by any checkpoint yet" in out
    page = operated.tmp / "forged.html"
    status, _, _ = operated.cli(
        "report",
        forged,
        "-o",
        str(page),
        "--checkpoint",
        str(operated.witness),
        "--vkey",
        str(operated.vkey),
    )
    assert status == 1
    text = page.read_text(encoding="utf-8")
    assert "Checkpoint check FAILED" in text
    assert "not covered" in text


def operated_events(operated: Operated, run_id: str) -> list[Any]:
    """A run's events as stored."""
    with Ledger.open(operated.url) as ledger:
        return ledger.events(run_id)


def test_proving_an_event_whose_content_changed_is_refused(operated: Operated) -> None:
    """``prove`` of an edited event (its stored hash kept) refuses instead of proving that hash.

    The stored hash is still the logged leaf, so its proof verifies; it would vouch for
    content the event no longer holds.
    """
    returned = next(r for r in operated_events(operated, operated.run_id) if r.kind == "ToolCalled")
    operated.db.drop_triggers()
    state = json.loads(operated.db.state(operated.run_id, returned.position))
    state["payload"]["arguments"] = {"place": "Elsewhere"}
    operated.db.set_state(operated.run_id, returned.position, canonical_json(state))
    note = sorted(operated.witness.iterdir())[-1]
    status, out, err = operated.cli(
        "prove",
        operated.run_id,
        "--position",
        str(returned.position),
        "--checkpoint",
        str(note),
        "--vkey",
        str(operated.vkey),
    )
    assert status == 2, out
    assert f"re-chained: run {operated.run_id} position {returned.position}" in err
    assert "its content hashes to" in err
    untouched = operated.cli("prove", operated.bystander, "--checkpoint", str(note))
    assert untouched[0] == 0, untouched[2]
