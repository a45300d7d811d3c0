"""The ledger-wide transparency log: integrating events, proofs, and checks against checkpoints.

Every event's 32-byte hash is a leaf of one append-only Merkle tree (RFC 9162, see
`agentledger.ledger.merkle`), in the ledger-wide notification order. Recording never touches
the log: `TransparencyLog.integrate` appends what was committed since the last integration, in
batches, and stores the tree as tiles (`_tlog_tables`), so proofs need O(log n) reads.

`check_checkpoint` is what an auditor's verification does with a checkpoint published earlier:
it re-derives the root at the checkpoint's size from the events' own hashes (never from stored
tree nodes alone), checks that today's tree is consistent with it, and names what happened
otherwise: re-chained, truncated, rolled back or forked. Must not know events' meaning.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from agentledger.ledger import merkle
from agentledger.ledger._checkpoint import Checkpoint
from agentledger.ledger._codec import stored_hash
from agentledger.ledger._hashing import envelope_hash
from agentledger.ledger._records import RecordedEvent
from agentledger.ledger._tlog_tables import (
    FIRST_ID,
    Hashed,
    Head,
    LogBatch,
    LogConflictError,
    LogEntry,
    LogTables,
    Row,
    pack_events,
)
from agentledger.ledger.errors import CorruptEventError, InvalidPayloadError, TransparencyLogError

__all__ = [
    "TILE_WIDTH",
    "CheckpointCheck",
    "LogHead",
    "LogProblem",
    "LogReason",
    "TransparencyLog",
    "TransparencyLogError",
    "check_checkpoint",
    "check_checkpoints",
]

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
_HASH = 32
_TILE_BYTES = TILE_WIDTH * _HASH
_READ_BATCH = 20_000
_EMPTY_ROOT = hashlib.sha256(b"").digest()

LogReason = Literal[
    "re-chained",
    "truncated",
    "rolled back",
    "forked",
    "bad signature",
    "no checkpoint",
    "log damaged",
    "not covered",
]


@dataclass(frozen=True)
class LogHead:
    """The log's integrated size and root, and how many recorded events await integration."""

    size: int
    root: bytes


@dataclass(frozen=True)
class LogProblem:
    """Why the ledger does not match a checkpoint; the run and position where they are known."""

    reason: LogReason
    detail: str
    run_id: str | None = None
    position: int | None = None
    checkpoint: str = ""

    def __str__(self) -> str:
        source = f"checkpoint {self.checkpoint}: " if self.checkpoint else ""
        where = f"run {self.run_id}: " if self.run_id else ""
        if self.run_id and self.position is not None:
            where = f"run {self.run_id} position {self.position}: "
        return f"{source}{where}{self.reason} ({self.detail})"


def _perfect_root(hashes: bytes) -> bytes:
    """The root of a complete subtree given its 2**k node hashes, concatenated."""
    level = [hashes[i : i + _HASH] for i in range(0, len(hashes), _HASH)]
    sha = hashlib.sha256
    while len(level) > 1:
        level = [sha(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level), 2)]
    return level[0]


def _event_hash(entry: LogEntry) -> bytes:
    try:
        return stored_hash(entry.state)
    except ValueError as e:
        raise TransparencyLogError(
            f"the stored event cannot be read ({e}); run `agentledger verify`",
            entry.run_id,
            entry.position,
        ) from None


class _Tiles:
    """Tile reads for one operation, each tile read at most once."""

    def __init__(self, tables: LogTables) -> None:
        self._tables = tables
        self._cache: dict[tuple[int, int], bytes] = {}
        self.reads = 0

    def get(self, level: int, index: int) -> bytes:
        key = (level, index)
        if key not in self._cache:
            self.reads += 1
            self._cache[key] = self._tables.tiles([key]).get(key, b"")
        return self._cache[key]

    def subtree(self, start: int, end: int) -> bytes:
        """The hash of the complete aligned subtree over leaves [start, end)."""
        height = (end - start).bit_length() - 1
        level, sub = divmod(height, TILE_HEIGHT)
        base = start >> (TILE_HEIGHT * level)
        index, offset = divmod(base, TILE_WIDTH)
        data = self.get(level, index)[offset * _HASH : (offset + (1 << sub)) * _HASH]
        if len(data) != (1 << sub) * _HASH:
            msg = f"the stored tree has no node for leaves {start}..{end - 1}"
            raise TransparencyLogError(msg)
        return _perfect_root(data)


class TransparencyLog:
    """The ledger-wide Merkle log over one backend's tables."""

    def __init__(self, tables: LogTables) -> None:
        self.tables = tables

    def size(self) -> int:
        """The number of integrated leaves."""
        last = self.tables.last_batch()
        return last.end if last else 0

    def head(self) -> LogHead:
        """The integrated size and its root."""
        size = self.size()
        return LogHead(size, self.root(size))

    def root(self, size: int) -> bytes:
        """The root of the first `size` integrated leaves, from the stored tiles."""
        if size == 0:
            return _EMPTY_ROOT
        self._check_size(size)
        return merkle.range_root(0, size, _Tiles(self.tables).subtree)

    def _check_size(self, size: int) -> None:
        integrated = self.size()
        if not 0 <= size <= integrated:
            msg = f"the log has {integrated} leaves; asked for a tree of {size}"
            raise TransparencyLogError(msg)

    def integrate(
        self, *, batch: int = _READ_BATCH, progress: Callable[[int], None] | None = None
    ) -> LogHead:
        """Append every event committed since the last integration; return the new head.

        Works in batches of `batch` events, each stored in one transaction; two integrators
        that race conflict on the batch's first leaf and the loser starts again from the new
        state, so every event is a leaf exactly once, in notification order.
        """
        while True:
            last = self.tables.last_batch()
            size, after = (last.end, last.last_nid) if last else (0, 0)
            rows: Sequence[Hashed | Head] = self.tables.hashed(after, batch)
            if not rows:
                return LogHead(size, self.root(size))
            sha = hashlib.sha256
            try:
                # a None hash (a row in an older form) raises TypeError, handled below
                leaves = [sha(b"\x00" + h).digest() for _, h, _, _ in rows]  # type: ignore[operator]
            except TypeError:  # a row in an older form (no hash): read the batch's heads whole
                rows = self.tables.heads(after, len(rows))
                leaves = self._leaves(rows)
            tiles = self._extend(size, leaves)
            first, last_nid = rows[0][0], rows[-1][0]
            gaps: tuple[int, ...] = ()
            if last_nid - first + 1 != len(rows):
                nids = [row[0] for row in rows]
                gaps = tuple(m for a, b in itertools.pairwise(nids) for m in range(a + 1, b))
            record = LogBatch(size, len(rows), first, last_nid, gaps)
            try:
                self.tables.append(record, tiles, pack_events(rows))
            except LogConflictError:
                continue
            if progress is not None:
                progress(record.end)

    def _leaves(self, heads: Sequence[Head]) -> list[bytes]:
        """Leaf hashes of stored event heads; names an event whose hash cannot be read."""
        sha = hashlib.sha256
        out: list[bytes] = []
        append = out.append
        for item in heads:
            head = item[1]
            if len(head) == 33 and head[:1] == b"\x02":
                append(sha(b"\x00" + head[1:]).digest())
                continue
            try:
                append(sha(b"\x00" + stored_hash(head)).digest())
            except ValueError:
                entry = self.tables.entries(item[0] - 1, 1)[0]
                _event_hash(entry)  # raises, naming the run and position
                raise
        return out

    def _extend(self, size: int, leaves: list[bytes]) -> dict[tuple[int, int], bytes]:
        """The tiles that change when `leaves` follow the first `size` leaves.

        Level by level: the new nodes, after the stored ones of their first tile, are written
        as tiles, and the roots of the tiles they complete are the next level's new nodes,
        hashed pair by pair over the whole batch (8 rounds of pairs make a tile's root).
        """
        out: dict[tuple[int, int], bytes] = {}
        reader = _Tiles(self.tables)
        sha = hashlib.sha256
        level, start, new = 0, size, leaves
        while new:
            first_tile, offset = divmod(start, TILE_WIDTH)
            prefix = reader.get(level, first_tile)[: offset * _HASH] if offset else b""
            if len(prefix) != offset * _HASH:
                msg = f"tile {level}/{first_tile} is shorter than the integrated tree"
                raise TransparencyLogError(msg)
            data = prefix + b"".join(new)
            for t in range(0, len(data), _TILE_BYTES):
                out[(level, first_tile + t // _TILE_BYTES)] = data[t : t + _TILE_BYTES]
            nodes = [prefix[i : i + _HASH] for i in range(0, len(prefix), _HASH)] + new
            del nodes[len(nodes) - len(nodes) % TILE_WIDTH :]  # only complete tiles have roots
            for _ in range(TILE_HEIGHT):
                nodes = [
                    sha(b"\x01" + left + right).digest()
                    for left, right in zip(nodes[::2], nodes[1::2], strict=True)
                ]
            level, start, new = level + 1, start // TILE_WIDTH, nodes
        return out

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """The inclusion proof of leaf `index` in the tree of `size` leaves."""
        self._check_size(size)
        tiles = _Tiles(self.tables)
        return [
            merkle.range_root(a, b, tiles.subtree) for a, b in merkle.inclusion_ranges(index, size)
        ]

    def consistency_proof(self, size1: int, size2: int) -> list[bytes]:
        """The consistency proof of the tree of `size1` leaves with the tree of `size2`."""
        self._check_size(size2)
        tiles = _Tiles(self.tables)
        return [
            merkle.range_root(a, b, tiles.subtree)
            for a, b in merkle.consistency_ranges(size1, size2)
        ]

    def leaf_index(self, run_id: str, position: int) -> int | None:
        """The leaf of a run's event, or None when it is not integrated (yet)."""
        nid = self.tables.nid_of(run_id, position)
        return None if nid is None else _LeafFinder(self.tables.batches()).leaf(nid)

    def leaf_indexes(self, run_id: str, positions: Sequence[int]) -> dict[int, int]:
        """The leaves of several events of one run (those integrated), batches read once."""
        finder = _LeafFinder(self.tables.batches())
        out: dict[int, int] = {}
        for position in positions:
            nid = self.tables.nid_of(run_id, position)
            leaf = None if nid is None else finder.leaf(nid)
            if leaf is not None:
                out[position] = leaf
        return out

    def entries(self) -> Iterator[LogEntry]:
        """Every event in log order (integrated or not), read in batches."""
        after = 0
        while True:
            found = self.tables.entries(after, _READ_BATCH)
            if not found:
                return
            yield from found
            after = found[-1].nid

    def heads(self, after: int = 0) -> Iterator[Head]:
        """Every event's (notification id, stored state head) in log order, in batches.

        From `after` (``FIRST_ID`` reads rows at ids the ledger never assigns, too).
        """
        while True:
            found = self.tables.heads(after, _READ_BATCH)
            if not found:
                return
            yield from found
            after = found[-1][0]

    def rows(self, after: int = FIRST_ID) -> Iterator[Row]:
        """Every stored row, whole, in log order, in batches."""
        while True:
            found = self.tables.rows(after, _READ_BATCH)
            if not found:
                return
            yield from found
            after = found[-1][0]

    def stored_leaves(self, start: int, end: int) -> list[bytes]:
        """The stored leaf hashes [start, end) (level-0 tiles), for locating a difference."""
        tiles = _Tiles(self.tables)
        out: list[bytes] = []
        for index in range(start // TILE_WIDTH, (end + TILE_WIDTH - 1) // TILE_WIDTH):
            data = tiles.get(0, index)
            out += [data[i : i + _HASH] for i in range(0, len(data), _HASH)]
        first = start - (start // TILE_WIDTH) * TILE_WIDTH
        return out[first : first + end - start]


class _LeafFinder:
    """Notification id to leaf index, by bisecting the integration batches."""

    def __init__(self, batches: Sequence[LogBatch]) -> None:
        self._batches = batches
        self._starts = [b.first_nid for b in batches]

    def leaf(self, nid: int) -> int | None:
        """The leaf of the event with notification id `nid`, or None (not integrated)."""
        at = bisect.bisect_right(self._starts, nid) - 1
        if at < 0:
            return None
        record = self._batches[at]
        if nid > record.last_nid or nid in record.gaps:
            return None
        before = bisect.bisect_left(record.gaps, nid)  # gaps are in increasing order
        return record.first_leaf + (nid - record.first_nid) - before


class _CompactRange:
    """The roots of a growing list of leaves, keeping only O(log n) perfect subtrees."""

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[tuple[int, bytes]] = []

    def append(self, leaf: bytes) -> None:
        height, node = 0, leaf
        sha = hashlib.sha256
        while self._stack and self._stack[-1][0] == height:
            node = sha(b"\x01" + self._stack.pop()[1] + node).digest()
            height += 1
        self._stack.append((height, node))
        self.size += 1

    def root(self) -> bytes:
        if not self._stack:
            return _EMPTY_ROOT
        node = self._stack[-1][1]
        for _, left in reversed(self._stack[:-1]):
            node = hashlib.sha256(b"\x01" + left + node).digest()
        return node


@dataclass
class CheckpointCheck:
    """What comparing the ledger with one checkpoint found."""

    checkpoint: Checkpoint
    events: int = 0
    integrated: int = 0
    problems: list[LogProblem] = field(default_factory=list)
    run_not_covered: dict[str, list[int]] = field(default_factory=dict)
    """When one run was checked (not every run): its positions that this checkpoint does not
    cover, being recorded after it (empty lists left out)."""

    @property
    def ok(self) -> bool:
        """True when the ledger holds exactly the history the checkpoint signed, and more."""
        return not self.problems

    @property
    def not_covered(self) -> int:
        """Events recorded after the checkpoint: it cannot vouch for them."""
        return max(0, self.events - self.checkpoint.size)


def check_checkpoint(log: TransparencyLog, checkpoint: Checkpoint) -> CheckpointCheck:
    """Compare the ledger's events (and its stored log) with one checkpoint's signed tree."""
    return check_checkpoints(log, [checkpoint])[0]


def check_checkpoints(
    log: TransparencyLog,
    checkpoints: Sequence[Checkpoint],
    *,
    recomputed: Mapping[str, Mapping[int, bytes]] | None = None,
    complete: bool = True,
) -> list[CheckpointCheck]:
    """Compare the ledger's events (and its stored log) with checkpoints' signed trees.

    Signatures are the caller's to check first. One pass over every stored event, in the
    ledger-wide order, re-derives the root at every checkpoint's size and compares it with the
    signed root; then each checkpoint is checked to be extended by the stored log (what proofs
    are served from). Each leaf is the event's hash as `recomputed` from its content by the
    per-run checks (``verify_run(..., recomputed=...)``) for the runs it holds; for the other
    runs, unless `complete` says there are none, each row is read whole and its hash
    recomputed from that row alone. No stored hash is trusted then. (Without `recomputed`, the
    stored hashes are used: what the log integrated, for a quick look only.) The pass also
    refuses what the per-run checks cannot see: a row whose run id is not spelled as the ledger
    writes it, a stored event of a checked run that those checks did not read, and a run with
    more (or fewer) rows than they read. Memory stays bounded apart from `recomputed`: the
    events are streamed, and only O(log n) subtree roots are kept.
    """
    damaged: list[LogProblem] = []
    try:
        integrated = log.size()
    except TransparencyLogError as e:
        integrated = 0
        damaged.append(LogProblem("log damaged", e.detail))
    results = [CheckpointCheck(c, integrated=integrated) for c in checkpoints]
    sizes = sorted({c.size for c in checkpoints})
    roots: dict[int, bytes] = {}
    compact = _CompactRange()
    events = 0
    whole = recomputed is not None and not complete
    leaves = _Leaves(log, recomputed, whole=whole)
    unreadable: LogProblem | None = None
    pending = iter(sizes)
    wanted = next(pending, None)
    while wanted == 0:
        roots[0] = compact.root()
        wanted = next(pending, None)
    stream: Iterator[Head | Row] = log.rows() if whole else log.heads(after=FIRST_ID)
    for head in stream:
        events += 1
        leaf = leaves.recomputed(head)
        if wanted is None or unreadable is not None:
            continue
        try:
            if leaf is None:  # the hash as stored: a run whose content was not checked
                leaf = log._leaves([(head[0], head[1], head[2], head[3])])[0]
            compact.append(leaf)
        except TransparencyLogError as e:
            unreadable = LogProblem("re-chained", e.detail, e.run_id, e.position)
            continue
        while wanted is not None and compact.size == wanted:
            roots[wanted] = compact.root()
            wanted = next(pending, None)
    found = damaged + leaves.finish()
    stored_rows = log.tables.count_rows()
    if stored_rows != events:
        detail = (
            f"the events table holds {stored_rows} rows but {events} stand in the ledger-wide "
            "order: rows at ids the ledger never assigns are hidden from the log"
        )
        found.append(LogProblem("re-chained", detail))
    for result in results:
        result.events = events
        result.problems += found
        try:
            _judge(log, result, roots, unreadable, leaves)
        except TransparencyLogError as e:  # the roots were re-derived; naming needs the log
            result.problems.append(LogProblem("log damaged", e.detail))
            size = result.checkpoint.size
            if events < size or roots.get(size) != result.checkpoint.root:
                detail = "the events do not reproduce the checkpoint's root"
                result.problems.append(LogProblem("re-chained", detail))
    return results


def _judge(
    log: TransparencyLog,
    result: CheckpointCheck,
    roots: Mapping[int, bytes],
    unreadable: LogProblem | None,
    leaves: _Leaves,
) -> None:
    """Compare one checkpoint with the roots the events re-derived; name what differs."""
    size = result.checkpoint.size
    result.run_not_covered = leaves.after(size)
    if size not in roots and unreadable is not None and result.events >= size:
        result.problems.append(unreadable)
    elif result.events < size:
        _missing(log, result, leaves)
    elif roots[size] != result.checkpoint.root:
        _differs(log, result, leaves)
    elif 0 < size < result.integrated:
        _check_extended(log, result)


class _Leaves:
    """The leaf of each stored event in one pass: from its recomputed hash where there is one.

    Collects what the per-run checks cannot see: rows whose run id is not spelled as the ledger
    writes it, rows of a checked run that its chain check did not read, row counts that differ.
    """

    def __init__(
        self,
        log: TransparencyLog,
        recomputed: Mapping[str, Mapping[int, bytes]] | None,
        *,
        whole: bool = False,
    ) -> None:
        self._log = log
        self._recomputed = recomputed or {}
        self._whole = whole  # rows come whole: recompute the unchecked runs' from content
        # and keep where the checked run's rows stand in the order (`placed`)
        self._names = _RunNames()
        self._rows: dict[str, int] = {}
        self.problems: list[LogProblem] = []
        self.placed: dict[str, list[tuple[int, int]]] = {}
        """Per checked run, with `whole`, (index in the ledger-wide order, position) of each of
        its rows."""
        self._index = -1

    def recomputed(self, head: Head | Row) -> bytes | None:
        """The leaf from the event's recomputed hash; None where only the stored one is known.

        Called once per stored row, in the ledger-wide order.
        """
        self._index += 1
        run_id = self._names.canonical(head[2])
        if run_id is None:
            detail = (
                f"a stored event's run id is spelled {head[2]!r}, which the ledger never "
                "writes: a row hidden from the per-run checks"
            )
            self.problems.append(LogProblem("re-chained", detail))
            return None
        positions = self._recomputed.get(run_id)
        if positions is None:
            return self._from_content(run_id, head) if self._whole else None
        self._rows[run_id] = self._rows.get(run_id, 0) + 1
        if self._whole:
            self.placed.setdefault(run_id, []).append((self._index, head[3]))
        digest = positions.get(head[3])
        if digest is None:
            detail = "a stored event of this run that its chain check did not read"
            self.problems.append(LogProblem("re-chained", detail, run_id, head[3]))
            return None
        return hashlib.sha256(b"\x00" + digest).digest()

    def _from_content(self, run_id: str, row: Head | Row) -> bytes | None:
        """A whole row's leaf from its own content (its run's chain was not checked)."""
        if len(row) < 5:
            return None
        try:
            record = RecordedEvent.from_state(run_id, row[3], str(row[4]), row[1])
            digest = bytes.fromhex(envelope_hash(record.envelope()))
        except (CorruptEventError, InvalidPayloadError) as e:
            self.problems.append(LogProblem("re-chained", str(e), run_id, row[3]))
            return None
        return hashlib.sha256(b"\x00" + digest).digest()

    def after(self, size: int) -> dict[str, list[int]]:
        """Per checked run (with `whole`), its positions at or past `size` in the order."""
        late = {
            run_id: [position for index, position in placed if index >= size]
            for run_id, placed in self.placed.items()
        }
        return {run_id: positions for run_id, positions in late.items() if positions}

    def name(self, key: str) -> str:
        """A run id as the table spells it, canonical where it can be."""
        return self._names.canonical(key) or key

    def leaf(self, head: Head) -> bytes | None:
        """The event's leaf from its recomputed hash, else its stored one (None: unreadable)."""
        run_id = self._names.canonical(head[2])
        digest = self._recomputed.get(run_id or "", {}).get(head[3])
        if digest is not None:
            return hashlib.sha256(b"\x00" + digest).digest()
        try:
            return self._log._leaves([head])[0]
        except TransparencyLogError:
            return None

    def finish(self) -> list[LogProblem]:
        """The findings, with runs whose row count differs from what their check read."""
        for run_id, positions in self._recomputed.items():
            rows = self._rows.get(run_id, 0)
            if rows != len(positions):
                detail = (
                    f"the run has {rows} stored rows in the ledger-wide order but its chain "
                    f"check read {len(positions)}: rows were duplicated or hidden"
                )
                self.problems.append(LogProblem("re-chained", detail, run_id))
        return self.problems


class _RunNames:
    """Run ids as the events table spells them, turned canonical (cached per spelling)."""

    _HEX32 = re.compile(r"[0-9a-f]{32}")
    _CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

    def __init__(self) -> None:
        self._seen: dict[str, str | None] = {}

    def canonical(self, key: str) -> str | None:
        """The canonical run id, or None for a spelling the ledger never writes."""
        if key in self._seen:
            return self._seen[key]
        name: str | None = None
        if self._HEX32.fullmatch(key):
            name = f"{key[:8]}-{key[8:12]}-{key[12:16]}-{key[16:20]}-{key[20:]}"
        elif self._CANONICAL.fullmatch(key):
            name = key
        self._seen[key] = name
        return name


def _check_extended(log: TransparencyLog, result: CheckpointCheck) -> None:
    size, integrated = result.checkpoint.size, result.integrated
    try:
        proof = log.consistency_proof(size, integrated)
        today = log.root(integrated)
        merkle.verify_consistency(size, integrated, result.checkpoint.root, today, proof)
    except (merkle.ProofError, TransparencyLogError) as e:
        detail = f"the stored tree cannot prove that it extends the checkpoint: {e}"
        result.problems.append(LogProblem("log damaged", detail))


@dataclass(frozen=True)
class _Found:
    """The first logged leaf whose event is not what was logged."""

    what: Literal["gone", "changed", "inserted", "rewritten"]
    leaf: int
    run_id: str | None
    position: int | None

    def describe(self) -> str:
        """What happened to the event logged as this leaf (its run and position go beside)."""
        if self.what == "gone":
            return f"the event logged as leaf {self.leaf} is no longer where it was logged"
        if self.what == "changed":
            return f"the event logged as leaf {self.leaf} was changed after it was logged"
        if self.what == "rewritten":
            return (
                f"the event logged as leaf {self.leaf} was deleted and written again (with its "
                "hash chain recomputed)"
            )
        return f"this event was inserted among those logged, before leaf {self.leaf}"


def _locate(log: TransparencyLog, limit: int, leaves: _Leaves) -> _Found | None:
    """The first of the first `limit` logged leaves whose event is not what was logged.

    An event is gone, changed, or preceded by one that was not logged; it is named by the run
    and position integration recorded for its leaf. Each batch's events and logged leaves are
    walked side by side, once.
    """
    for record in log.tables.batches():
        if record.first_leaf >= limit:
            return None
        found = _locate_in_batch(log, record, limit, leaves)
        if found is not None:
            return found
    return None


def _locate_in_batch(
    log: TransparencyLog, record: LogBatch, limit: int, leaves: _Leaves
) -> _Found | None:
    named = log.tables.batch_events(record.first_leaf)
    gaps = set(record.gaps)
    nids = [n for n in range(record.first_nid, record.last_nid + 1) if n not in gaps]
    span = record.last_nid - record.first_nid + 1
    actual = [h for h in log.tables.heads(record.first_nid - 1, span) if h[0] <= record.last_nid]
    stored = log.stored_leaves(record.first_leaf, min(record.end, log.size()))
    for k, nid in enumerate(nids):  # the k-th logged event should be the k-th row now
        leaf = record.first_leaf + k
        if leaf >= limit or k >= len(stored):
            return None
        run_id, position = named[k] if k < len(named) else (None, None)
        if k < len(actual) and actual[k][0] < nid:
            extra = actual[k]
            return _Found("inserted", leaf, leaves.name(extra[2]), extra[3])
        if k >= len(actual) or actual[k][0] != nid:
            return _Found("gone", leaf, run_id, position)
        if leaves.leaf(actual[k]) != stored[k]:
            return _Found("changed", leaf, run_id, position)
    return None


def _missing(log: TransparencyLog, result: CheckpointCheck, leaves: _Leaves) -> None:
    """Fewer events than the checkpoint covers."""
    size = result.checkpoint.size
    if result.integrated < size:
        detail = (
            f"the checkpoint covers {size} events but this database holds {result.events} and "
            f"its log ends at {result.integrated}: it was restored from before the checkpoint "
            "was published, or cut back"
        )
        result.problems.append(LogProblem("rolled back", detail))
        return
    detail = f"the checkpoint covers {size} events; {size - result.events} of them are gone"
    _name_first_difference(log, result, "truncated", detail, leaves)


def _differs(log: TransparencyLog, result: CheckpointCheck, leaves: _Leaves) -> None:
    """As many events as the checkpoint covers (or more), but not the ones it signed."""
    size = result.checkpoint.size
    logged_root: bytes | None = None
    if result.integrated >= size:
        try:
            logged_root = log.root(size)
        except TransparencyLogError:
            logged_root = None
    if logged_root != result.checkpoint.root:
        detail = (
            f"this database's first {size} events hash to another root than the checkpoint's: "
            f"a different history is presented under origin {result.checkpoint.origin!r} "
            "(another database, or this one rewritten together with its log)"
        )
        result.problems.append(LogProblem("forked", detail))
        return
    detail = (
        "events the checkpoint covers no longer hash to its root: changed, deleted or written "
        "again after they were logged"
    )
    _name_first_difference(log, result, "re-chained", detail, leaves)


def _name_first_difference(
    log: TransparencyLog,
    result: CheckpointCheck,
    reason: LogReason,
    detail: str,
    leaves: _Leaves,
) -> None:
    """Report the first logged event that is not what was logged, named where possible.

    An event deleted and nothing written in its place is a truncation; one changed, deleted and
    written again under the same run and position, or preceded by one never logged, is a
    re-chained history.
    """
    found = _locate(log, result.checkpoint.size, leaves)
    if found is None:
        result.problems.append(LogProblem(reason, detail))
        return
    if found.what != "gone":
        reason = "re-chained"
    elif found.run_id is not None and found.position is not None:
        if log.tables.nid_of(found.run_id, found.position) is not None:
            reason = "re-chained"
            found = replace(found, what="rewritten")
        else:
            reason = "truncated"
    result.problems.append(
        LogProblem(reason, f"{detail}; {found.describe()}", found.run_id, found.position)
    )
