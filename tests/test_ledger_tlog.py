"""The ledger-wide transparency log: integration into tiles, proofs, checkpoints, publishing.

The tile math is checked against the reference functions of `agentledger.ledger.merkle` over a
plain list (any batching, trees crossing two tile levels, notification ids with gaps as
PostgreSQL leaves them); integration, proofs and checkpoints run on every backend.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.ledger import Ledger, SequentialIds, StepClock, merkle, verify_export
from agentledger.ledger._checkpoint import Checkpoint
from agentledger.ledger._checkpoints import CheckpointError, open_checkpoint
from agentledger.ledger._codec import PACKED_STATE_V1, _pack
from agentledger.ledger._tlog import TransparencyLog, TransparencyLogError
from agentledger.ledger._tlog_tables import (
    Hashed,
    Head,
    LogBatch,
    LogConflictError,
    LogEntry,
    hashed_heads,
)
from agentledger.ledger.signed_note import generate_key, open_note, verifier_key_of

RUN = "00000000-0000-0000-0000-000000000000"


class ListTables:
    """The log's tables over a plain list of event hashes (notification ids may have gaps)."""

    def __init__(self, hashes: Sequence[bytes], nids: Sequence[int] | None = None) -> None:
        self.hashes = list(hashes)
        self.nids = list(nids) if nids is not None else list(range(1, len(hashes) + 1))
        self._batches: list[LogBatch] = []
        self._tiles: dict[tuple[int, int], bytes] = {}
        self.tile_reads = 0

    def entries(self, after_nid: int, limit: int) -> list[LogEntry]:
        """Entries after `after_nid`."""
        out = []
        for nid, digest in zip(self.nids, self.hashes, strict=True):
            if nid > after_nid:
                out.append(
                    LogEntry(nid, "00000000-0000-0000-0000-000000000000", nid, b"\x02" + digest)
                )
                if len(out) == limit:
                    break
        return out

    def heads(self, after_nid: int, limit: int) -> list[Head]:
        """(nid, state head, run, position) tuples."""
        return [(e.nid, e.state, e.run_id, e.position) for e in self.entries(after_nid, limit)]

    def hashed(self, after_nid: int, limit: int) -> list[Hashed]:
        """(nid, raw hash, run, position) tuples."""
        return hashed_heads(self.heads(after_nid, limit))

    def batch_events(self, first_leaf: int) -> list[tuple[str, int]]:
        """Leaves name no run here."""
        batch = next(b for b in self._batches if b.first_leaf == first_leaf)
        return [(RUN, nid) for nid in self.nids if batch.first_nid <= nid <= batch.last_nid]

    def batches(self) -> list[LogBatch]:
        """Batches."""
        return list(self._batches)

    def last_batch(self) -> LogBatch | None:
        """The last batch."""
        return self._batches[-1] if self._batches else None

    def tiles(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """Stored tiles."""
        self.tile_reads += len(keys)
        return {k: self._tiles[k] for k in keys if k in self._tiles}

    def append(
        self,
        batch: LogBatch,
        tiles: dict[tuple[int, int], bytes],
        events: bytes,  # noqa: ARG002 - batch_events derives them
    ) -> None:
        """Store a batch."""
        end = self._batches[-1].end if self._batches else 0
        if batch.first_leaf != end:
            raise LogConflictError("taken")
        self._batches.append(batch)
        self._tiles.update(tiles)

    def nid_of(self, run_id: str, position: int) -> int | None:  # noqa: ARG002 - protocol
        """Positions are notification ids here."""
        return position if position in self.nids else None

    def add_checkpoint(self, size: int, root: bytes, note: str) -> None:
        """Not kept."""

    def checkpoints(self) -> list[tuple[int, bytes, str]]:
        """None kept."""
        return []


def event_hashes(n: int, seed: int = 0) -> list[bytes]:
    """`n` distinct 32-byte event hashes."""
    return [hashlib.sha256(f"{seed}/{i}".encode()).digest() for i in range(n)]


@given(
    st.integers(min_value=1, max_value=700),
    st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=6),
    st.data(),
)
def test_tiles_give_the_reference_roots_and_proofs_however_events_are_batched(
    n: int, batch_sizes: list[int], data: st.DataObject
) -> None:
    """Integrating in any batches gives the RFC 9162 root and proofs of the plain list."""
    hashes = event_hashes(n)
    tables = ListTables(hashes)
    log = TransparencyLog(tables)
    for size in batch_sizes:
        log.integrate(batch=size)
    leaves = [merkle.leaf_hash(h) for h in hashes]
    assert log.size() == n
    assert log.root(n) == merkle.root(leaves)
    size = data.draw(st.integers(min_value=1, max_value=n), label="size")
    index = data.draw(st.integers(min_value=0, max_value=size - 1), label="index")
    older = data.draw(st.integers(min_value=1, max_value=size), label="older")
    assert log.root(size) == merkle.root(leaves[:size])
    assert log.inclusion_proof(index, size) == merkle.inclusion_proof(leaves[:size], index)
    assert log.consistency_proof(older, size) == merkle.consistency_proof(leaves, older, size)


def test_a_log_crossing_two_tile_levels_proves_with_few_reads() -> None:
    """70,000 leaves (past 256**2): roots and proofs match, each proof reads O(log n) tiles."""
    n = 70_000
    hashes = event_hashes(n, seed=1)
    tables = ListTables(hashes)
    log = TransparencyLog(tables)
    log.integrate(batch=30_000)
    leaves = [merkle.leaf_hash(h) for h in hashes]
    expected = merkle.root(leaves)
    assert log.root(n) == expected
    for index in (0, 255, 256, 65_535, 65_536, 69_999):
        tables.tile_reads = 0
        proof = log.inclusion_proof(index, n)
        merkle.verify_inclusion(index, n, leaves[index], proof, expected)
        assert tables.tile_reads <= 3 * 3
    tables.tile_reads = 0
    proof = log.consistency_proof(65_537, n)
    merkle.verify_consistency(65_537, n, merkle.root(leaves[:65_537]), expected, proof)
    assert tables.tile_reads <= 3 * 3


def test_notification_ids_with_gaps_map_to_consecutive_leaves() -> None:
    """Ids a rolled-back PostgreSQL write never used are skipped: leaves stay consecutive."""
    nids = [1, 2, 5, 6, 7, 10, 11]
    tables = ListTables(event_hashes(len(nids)), nids)
    log = TransparencyLog(tables)
    log.integrate(batch=4)
    log.integrate()
    assert [log.leaf_index("r", nid) for nid in nids] == list(range(len(nids)))
    assert log.leaf_index("r", 3) is None
    assert [b.gaps for b in tables.batches()] == [(3, 4), (8, 9)]


def test_an_event_whose_hash_cannot_be_read_stops_integration_by_name() -> None:
    """A garbled stored event is never signed into the log: integration names it and stops."""
    tables = ListTables(event_hashes(3))
    broken = tables.entries

    def entries(after_nid: int, limit: int) -> list[LogEntry]:
        found = broken(after_nid, limit)
        return [e if e.nid != 2 else LogEntry(2, e.run_id, 2, b"\x07garbled") for e in found]

    tables.entries = entries  # type: ignore[method-assign]
    with pytest.raises(TransparencyLogError, match="position 2: the stored event cannot be read"):
        TransparencyLog(tables).integrate()
    assert tables.batches() == []


def test_events_stored_in_older_forms_are_integrated_from_their_whole_state() -> None:
    """Rows without the raw hash up front (plain JSON, ``0x01``) give the leaves 0x02 rows do."""
    hashes = event_hashes(600)
    tables = ListTables(hashes)
    plain = tables.entries

    def older(entry: LogEntry) -> LogEntry:
        text = b'{"hash":"' + entry.state[1:].hex().encode() + b'","v":1}'
        state = text if entry.nid % 2 else PACKED_STATE_V1 + _pack(text)
        return LogEntry(entry.nid, entry.run_id, entry.position, state)

    def entries(after_nid: int, limit: int) -> list[LogEntry]:
        return [older(e) if e.nid % 7 == 0 else e for e in plain(after_nid, limit)]

    tables.entries = entries  # type: ignore[method-assign]
    head = TransparencyLog(tables).integrate(batch=100)
    assert head.root == merkle.root([merkle.leaf_hash(h) for h in hashes])
    assert [b.size for b in tables.batches()] == [100] * 6


# On every backend --------------------------------------------------------------------------


def record_runs(ledger: Ledger, count: int, steps: int = 2) -> list[str]:
    """Record `count` small runs."""
    ids = []
    for i in range(count):
        with ledger.record_run("logged", input=f"question {i}") as run:
            for j in range(steps):
                run.delta({"step": j, "question": i})
        ids.append(run.run_id)
    return ids


def notification_leaves(ledger: Ledger) -> list[bytes]:
    """The reference leaves: every event's hash in notification order."""
    leaves: list[bytes] = []
    after = 0
    while batch := ledger.notifications(after, 100):
        leaves += [merkle.leaf_hash(bytes.fromhex(r.hash)) for _, r in batch]
        after = batch[-1][0]
    return leaves


def test_integration_covers_every_event_in_notification_order(ledger: Ledger) -> None:
    """The log's root is the RFC 9162 root of every event hash, in commit order."""
    record_runs(ledger, 5)
    first = ledger.integrate()
    record_runs(ledger, 4)
    head = ledger.integrate()
    leaves = notification_leaves(ledger)
    assert first.size < head.size == len(leaves)
    assert head.root == merkle.root(leaves)
    assert ledger.transparency_log.root(first.size) == merkle.root(leaves[: first.size])
    assert ledger.integrate() == head  # nothing new: nothing changes


def test_every_event_has_its_leaf_and_a_proof_that_verifies(ledger: Ledger) -> None:
    """`prove` gives, for any event, a proof the checkpoint's root accepts."""
    ids = record_runs(ledger, 3)
    signer, verifier = generate_key("tests.example/log")
    note = ledger.checkpoint(signer)
    body = open_checkpoint(note, [verifier]).checkpoint
    for run_id in ids:
        for record in ledger.events(run_id):
            proof = ledger.prove(run_id, record.position, checkpoint=note, verifier_keys=[verifier])
            leaf = merkle.leaf_hash(bytes.fromhex(record.hash))
            hashes = [base64.b64decode(p) for p in proof["proof"]]
            merkle.verify_inclusion(proof["leaf_index"], body.size, leaf, hashes, body.root)
            assert proof["event_hash"] == record.hash
    default = ledger.prove(ids[-1], checkpoint=note)
    assert default["position"] == ledger.events(ids[-1])[-1].position


def test_a_checkpoint_is_a_signed_note_whose_origin_is_the_key_name(ledger: Ledger) -> None:
    """The note opens with the verifier key (and only it); the body is a C2SP checkpoint."""
    record_runs(ledger, 2)
    signer, verifier = generate_key("audit.example/agents")
    note = ledger.checkpoint(signer)
    opened = open_note(note, [verifier])
    body = Checkpoint.parse(opened.text)
    assert body.origin == "audit.example/agents"
    assert body.size == len(notification_leaves(ledger))
    other_signer, other_verifier = generate_key("audit.example/agents")
    with pytest.raises(CheckpointError, match="bad signature"):
        open_checkpoint(note, [other_verifier])
    assert verifier_key_of(other_signer) == other_verifier


def test_proving_against_another_ledgers_checkpoint_is_refused(ledger: Ledger) -> None:
    """A checkpoint this ledger's log does not reproduce cannot back a proof."""
    ids = record_runs(ledger, 2)
    signer, _ = generate_key("a.example/log")
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("other")) as other:
        record_runs(other, 3)
        foreign = other.checkpoint(signer)
    with pytest.raises(CheckpointError, match="not of this ledger"):
        ledger.prove(ids[0], 1, checkpoint=foreign)


def test_publishing_appends_numbered_files_and_refuses_a_fork(tmp_path: Path) -> None:
    """The witness directory takes checkpoints that extend the last; another history is refused."""
    signer, verifier = generate_key("pub.example/log")
    witness = tmp_path / "published"
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("a")) as ledger:
        record_runs(ledger, 2)
        ledger.checkpoint(signer, publish=witness)
        record_runs(ledger, 1)
        ledger.checkpoint(signer, publish=witness)
        ledger.checkpoint(signer, publish=witness)  # same size, same root: fine
    files = sorted(p.name for p in witness.iterdir())
    assert files == ["00000001.checkpoint", "00000002.checkpoint", "00000003.checkpoint"]
    for path in witness.iterdir():
        open_checkpoint(path.read_text(), [verifier])
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("b")) as forked:
        record_runs(forked, 5)
        with pytest.raises(CheckpointError, match="forked"):
            forked.checkpoint(signer, publish=witness)
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("c")) as behind:
        record_runs(behind, 1)
        with pytest.raises(CheckpointError, match="rolled back"):
            behind.checkpoint(signer, publish=witness)
    assert len(list(witness.iterdir())) == 3


def test_racing_integrators_make_every_event_exactly_one_leaf(ledger_url: str) -> None:
    """Two integrators and a writer at once: no event is skipped or logged twice."""
    if ledger_url == "memory://":
        pytest.skip("two opens of memory:// are two ledgers")
    # Opened up front, so that only integration races (tests/test_ledger_pg_open.py races opens).
    integrators = [Ledger.open(ledger_url) for _ in range(2)]
    with Ledger.open(ledger_url) as writer:
        record_runs(writer, 3)
        errors: list[BaseException] = []

        def integrate(mine: Ledger) -> None:
            try:
                for _ in range(15):
                    mine.transparency_log.integrate(batch=3)
            except BaseException as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(e)

        threads = [threading.Thread(target=integrate, args=(i,)) for i in integrators]
        for thread in threads:
            thread.start()
        record_runs(writer, 6)
        for thread in threads:
            thread.join()
        for opened in integrators:
            opened.close()
        assert errors == []
        head = writer.integrate()
        leaves = notification_leaves(writer)
        assert head.size == len(leaves)
        assert head.root == merkle.root(leaves)
        batches = writer.transparency_log.tables.batches()
        assert [b.first_leaf for b in batches] == [0, *[b.end for b in batches[:-1]]]


def test_verify_and_export_against_a_checkpoint_on_every_backend(
    ledger: Ledger, tmp_path: Path
) -> None:
    """The auditor's two checks hold on an honest ledger, and after it grew."""
    ids = record_runs(ledger, 2)
    signer, verifier = generate_key("contract.example/log")
    note = ledger.checkpoint(signer)
    report = ledger.verify(checkpoint=note, verifier_keys=[verifier])
    assert report.ok, [str(p) for p in report.log_problems]
    assert [c.checkpoint.size for c in report.checkpoints] == [len(notification_leaves(ledger))]
    record_runs(ledger, 1)
    assert ledger.verify(ids[0], checkpoint=note, verifier_keys=[verifier]).ok
    ledger.export_run(ids[0], tmp_path / "run.jsonl", checkpoint=note)
    checked = verify_export(tmp_path / "run.jsonl", [verifier])
    assert checked.ok
    assert checked.covered == len(ledger.events(ids[0]))
    assert checked.not_covered == []
    _, stranger = generate_key("contract.example/log")
    refused = ledger.verify(checkpoint=note, verifier_keys=[stranger])
    assert [p.reason for p in refused.log_problems] == ["bad signature"]
