"""Properties of the transparency log against an attacker who rewrites the SQLite file.

For random ledgers and a checkpoint published over them: any single change to a logged event,
with its run's hash chain recomputed so that the plain verify still passes, and any truncation
of a run (with its runs index rewritten to match), fail verification against that checkpoint.
An untouched ledger, and one that only grew, pass it.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.ledger import Ledger, canonical_json, envelope_hash
from agentledger.ledger._mapper import state_bytes
from agentledger.ledger.signed_note import generate_key

SIGNER, VERIFIER = generate_key("props.example/log")

runs_strategy = st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=4)


def record(url: str, deltas_per_run: list[int]) -> list[str]:
    """One run per entry, with that many deltas."""
    ids = []
    with Ledger.open(url) as ledger:
        for i, count in enumerate(deltas_per_run):
            with ledger.record_run("prop", input=f"q{i}") as run:
                for j in range(count):
                    run.delta({"run": i, "step": j})
            ids.append(run.run_id)
    return ids


def rewrite_from(url: str, run_id: str, position: int, value: int) -> None:
    """Change one event's payload and recompute the run's chain from there (the re-chain)."""
    with Ledger.open(url) as ledger:
        records = ledger.events(run_id)
    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    conn.execute("DROP TRIGGER agentledger_events_no_update")
    prev = records[position - 2].hash if position > 1 else "0" * 64
    head = prev
    for record in records[position - 1 :]:
        payload = dict(record.payload)
        if record.position == position:
            payload["tampered"] = value
        if record.kind in {"RunCompleted", "RunFailed"}:
            payload["head_hash"] = prev
        envelope = record.envelope() | {"payload": payload, "prev": prev}
        digest = envelope_hash(envelope)
        state = state_bytes(
            hash_=digest,
            event_id=record.event_id,
            payload_jcs=canonical_json(payload),
            prev=prev,
            ts=record.timestamp,
            version=record.version,
        )
        conn.execute(
            "UPDATE agentledger_events SET state = ? WHERE originator_id = ? "
            "AND originator_version = ?",
            (state, run_id.replace("-", ""), record.position),
        )
        head, prev = digest, digest
    conn.execute("UPDATE agentledger_runs SET head_hash = ? WHERE run_id = ?", (head, run_id))
    conn.commit()
    conn.close()


def truncate(url: str, run_id: str, keep: int) -> None:
    """Delete a run's events after `keep`, rewriting its index row to match."""
    with Ledger.open(url) as ledger:
        records = ledger.events(run_id)
    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    conn.execute("DROP TRIGGER agentledger_events_no_delete")
    conn.execute(
        "DELETE FROM agentledger_events WHERE originator_id = ? AND originator_version > ?",
        (run_id.replace("-", ""), keep),
    )
    last = records[keep - 1]
    conn.execute(
        "UPDATE agentledger_runs SET last_position = ?, head_hash = ?, status = 'running', "
        "ended_at = NULL WHERE run_id = ?",
        (keep, last.hash, run_id),
    )
    conn.commit()
    conn.close()


def checkpointed(tmp: Path, deltas: list[int]) -> tuple[str, str, dict[str, int]]:
    """A SQLite ledger of the runs, checkpointed: its URL, the checkpoint, each run's length.

    The lengths are in recording order (run ids are random: sorting them would not be).
    """
    url = f"sqlite:///{tmp / 'ledger.db'}"
    ids = record(url, deltas)
    with Ledger.open(url) as ledger:
        note = ledger.checkpoint(SIGNER)
        lengths = {run_id: len(ledger.events(run_id)) for run_id in ids}
    return url, note, lengths


def checked(url: str, note: str) -> tuple[bool, bool]:
    """(plain verify ok, verify against the checkpoint ok)."""
    with Ledger.open(url) as ledger:
        plain = ledger.verify().ok
        against = ledger.verify(checkpoint=note, verifier_keys=[VERIFIER]).ok
    return plain, against


@settings(max_examples=25)
@given(runs_strategy, st.data())
def test_any_single_rechained_change_fails_against_an_earlier_checkpoint(
    deltas: list[int], data: st.DataObject
) -> None:
    """Change any logged event and re-chain its run: plain verify passes, the checkpoint fails."""
    with tempfile.TemporaryDirectory() as tmp:
        url, note, lengths = checkpointed(Path(tmp), deltas)
        assert checked(url, note) == (True, True)
        run_id = data.draw(st.sampled_from(list(lengths)), label="run")
        position = data.draw(st.integers(1, lengths[run_id]), label="position")
        rewrite_from(
            url, run_id, position, data.draw(st.integers(-(2**53) + 1, 2**53 - 1), label="value")
        )
        assert checked(url, note) == (True, False)


@settings(max_examples=25)
@given(runs_strategy, st.data())
def test_any_truncation_fails_against_an_earlier_checkpoint(
    deltas: list[int], data: st.DataObject
) -> None:
    """Cut any run's tail (index rewritten to match): the checkpoint says events are gone."""
    with tempfile.TemporaryDirectory() as tmp:
        url, note, lengths = checkpointed(Path(tmp), deltas)
        run_id = data.draw(st.sampled_from(list(lengths)), label="run")
        keep = data.draw(st.integers(1, lengths[run_id] - 1), label="keep")
        truncate(url, run_id, keep)
        assert not checked(url, note)[1]


@settings(max_examples=20)
@given(runs_strategy, runs_strategy)
def test_a_ledger_that_only_grew_still_matches_every_earlier_checkpoint(
    before: list[int], after: list[int]
) -> None:
    """New runs after a checkpoint never break it; the next checkpoint holds too."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        record(url, before)
        with Ledger.open(url) as ledger:
            first = ledger.checkpoint(SIGNER)
        record(url, after)
        with Ledger.open(url) as ledger:
            second = ledger.checkpoint(SIGNER)
            report = ledger.verify(checkpoint=[first, second], verifier_keys=[VERIFIER])
        assert report.ok, [str(p) for p in report.log_problems]
        assert len(report.checkpoints) == 2
