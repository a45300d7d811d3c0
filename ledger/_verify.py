"""Verification: recompute every run's hash chain and every blob from content.

Never trusts a stored hash: each event's hash is recomputed from its envelope and compared with
the hash stored beside it and with the `prev` of the next event; every blob an event (or another
blob) refers to is re-hashed. The runs index (a row and tags per run, derived data) is checked
against the events too: agent, status, start and end times, event count, head hash, parent run,
input preview, tags and the usage totals (tokens, cost, model and tool latency). Problems are
named by run, position and reason. A run is fed in pages (`RunVerifier`), keeping only the
chain's head and a few facts between them, so memory does not grow with the run. Must not write.

What this can and cannot see without a signed checkpoint (the events alone, plus derived data
that an attacker may not have thought to edit):

- Caught: any edit of a stored event or blob that leaves the stored hashes as they were; a
  deleted, moved or inserted event inside a run; a cut tail of a finished run while its end
  event survives; a cut tail that the runs index still remembers (its count, head or ended
  status); any runs-index row or tag that disagrees with the events; an index row without
  events, and events without an index row; a run forked or re-run from a position past the end
  of its parent (`forks_past_end`).
- Not caught: a cut tail that took the end event with it, with the index row rewritten to match
  (last position, head hash, status 'running', no end time). Every prefix of a valid chain is a
  valid chain, so such a run reads exactly like one still recording or one whose process died.
  Nor is a run rewritten from some position on with every later hash recomputed (and its
  RunCompleted head hash and index row to match), nor a whole run deleted with its index row.
  Outside evidence can still show these: snapshots past the new end (``verify --deep``), read
  model rows (``agentledger projections verify``), an export or a head hash kept elsewhere. The
  signed checkpoint of the Merkle log covers exactly this: it commits to every event appended
  before it, so a cut or a rewrite below a checkpointed size shows.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentledger.ledger._backends import _PREVIEW, _preview
from agentledger.ledger._hashing import GENESIS, parsed_event_hash
from agentledger.ledger._records import IMPORT_BATCH, RecordedEvent, RunInfo, RunTotals
from agentledger.ledger._verify_blobs import (
    BlobCheck,
    BlobLookup,
    RunBlobs,
    blob_refs_in,
    refs_in_canonical,
)

if TYPE_CHECKING:
    from agentledger.ledger._backends import ScannedEvent
    from agentledger.ledger._tlog import CheckpointCheck, LogProblem
from agentledger.ledger.errors import CorruptEventError, InvalidPayloadError

__all__ = [
    "BlobCheck",
    "Problem",
    "Reason",
    "RunVerifier",
    "VerifyReport",
    "blob_refs_in",
    "forks_past_end",
    "starts_from_parent",
    "verify_run",
]

Reason = Literal[
    "payload altered",
    "hash altered",
    "event missing",
    "events reordered",
    "tail truncated",
    "events after end",
    "blob altered",
    "blob missing",
    "not decodable",
    "index mismatch",
    "index row missing",
    "run missing",
    "position repeated",
    "key destroyed",
    "erasure unfinished",
]
"""Why a run is broken. "index mismatch", "index row missing" and "run missing" concern the runs
index: a field (or the tags) of a run's row disagrees with its events; a run has events but no
row; a row lists a run with no events. "position repeated": two stored rows claim one position.
"key destroyed": a blob sealed for a data subject whose key is gone, though no ErasureRecorded
fact names the key and the key table still links runs to it (deleted outside
`Ledger.erase_subject`). "erasure unfinished": an ErasureRecorded fact names the key of a blob
whose key is still in the key table (an erasure cut short before it deleted the key; asking for
it again finishes it)."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run: where, and why.

    `field` names the runs-index field of an "index mismatch" (``status``, ``tags``, ...).
    """

    run_id: str
    position: int
    reason: Reason
    detail: str
    field: str | None = None

    def __str__(self) -> str:
        return f"run {self.run_id} position {self.position}: {self.reason} ({self.detail})"


@dataclass
class VerifyReport:
    """What `verify` checked and what it found."""

    runs_checked: int = 0
    events_checked: int = 0
    blobs_checked: int = 0
    """Blobs re-hashed: each once while verify remembers it intact, however many runs name it."""
    blobs_erased: int = 0
    """Of the blobs checked, those sealed for a data subject whose key was destroyed (their
    stored bytes still hash to their refs; their content reads as ``[erased]``)."""
    blobs_erased_unrecorded: int = 0
    """Of the erased blobs, those whose key no ErasureRecorded fact names: sealed under a key
    this ledger never held (a subject's run imported from another ledger), or a key deleted
    outside `Ledger.erase_subject` together with its run links. (A key deleted while runs are
    still linked to it is a "key destroyed" problem.)"""
    problems: list[Problem] = field(default_factory=list)
    checkpoints: list[CheckpointCheck] = field(default_factory=list)
    """The signed checkpoints checked (``verify(checkpoint=...)``), each with its findings."""
    log_problems: list[LogProblem] = field(default_factory=list)
    """What the checkpoints found: re-chained, truncated, rolled back, forked, bad signature."""

    @property
    def ok(self) -> bool:
        """True when nothing is broken (the runs, and the ledger against every checkpoint)."""
        return not self.problems and not self.log_problems

    @property
    def broken_runs(self) -> list[str]:
        """Ids of the runs with problems, in order of first mention."""
        return list(dict.fromkeys(p.run_id for p in self.problems))

    def merge(self, other: VerifyReport) -> None:
        """Add another report's counts and problems to this one."""
        self.runs_checked += other.runs_checked
        self.events_checked += other.events_checked
        self.blobs_checked += other.blobs_checked
        self.blobs_erased += other.blobs_erased
        self.blobs_erased_unrecorded += other.blobs_erased_unrecorded
        self.problems += other.problems
        self.checkpoints += other.checkpoints
        self.log_problems += other.log_problems


def verify_run(
    run_id: str,
    records: Sequence[RecordedEvent],
    blobs: BlobLookup,
    info: RunInfo | None = None,
    *,
    unreadable: Mapping[int, str] | None = None,
    indexed: bool = False,
    recomputed: dict[int, bytes] | None = None,
    sealed: dict[str, str] | None = None,
) -> VerifyReport:
    """Verify one run's events (ordered by stored position) and the blobs they refer to.

    `records` are the events as read back (payloads parsed from JSON). `unreadable` maps the
    positions whose stored bytes did not decode (their records are stand-ins) to the reason:
    each is reported as an altered payload, and the chain check resumes at the next event.
    `info` is the run's row in the runs index, checked against the events; with `indexed` (the
    ledger keeps an index) a missing row is a problem too. Into `recomputed`, when given, go
    the hashes recomputed from each event's content, by position (what the transparency log's
    leaves must be; an unreadable event gets 32 zero bytes). Into `sealed`, when given, go the
    refs of sealed blobs (data subjects') and their key ids. A run too long to hold in memory
    is verified page by page with `RunVerifier`, as `Ledger.verify` does.
    """
    unreadable = unreadable or {}
    origins = {r.hash: r.position for r in records if r.position not in unreadable}
    verifier = RunVerifier(
        run_id,
        BlobCheck(blobs, sealed=sealed),
        info,
        indexed=indexed,
        recomputed=recomputed,
        origins=origins,
    )
    verifier.feed(records, unreadable)
    return verifier.finish()


class RunVerifier:
    """Verifies one run from its events fed in pages, in stored order.

    Keeps only what later pages need, so memory does not grow with the run: the chain's head,
    the run's first, last and end events, the usage sums, and the problems found. Blobs are
    checked page by page (`check_blobs`, for several runs at once); their problems follow the
    runs index's, as in `verify_run`. Where an event's stored link points elsewhere, the report
    names the position its predecessor is stored at; that takes a map of where each stored hash
    is (`origins`). Without one (a first pass), the hashes such a report needs are collected in
    `needs_origins`: when it is not empty, feed the run again to a verifier given where those
    hashes are stored (a broken run costs up to three passes, an intact one one). Without a
    `BlobCheck` (`blobs` None) the caller checks the blobs itself: it takes the refs each page
    named from ``named_blobs.pending`` after feeding it (an export file's reader does).
    """

    def __init__(
        self,
        run_id: str,
        blobs: BlobCheck | None,
        info: RunInfo | None = None,
        *,
        indexed: bool = False,
        recomputed: dict[int, bytes] | None = None,
        origins: Mapping[str, int] | None = None,
    ) -> None:
        self.report = VerifyReport(runs_checked=1)
        self._blobs = blobs
        self.named_blobs = RunBlobs(self._blob_problem)
        """The refs this run's events named since its blobs were last checked (`check_blobs`)."""
        self._info = info
        self._indexed = indexed
        self._chain = _Chain(run_id, origins, recomputed=recomputed)
        self._run = _Run(run_id, import_batch=IMPORT_BATCH)
        self._blob_problems: list[Problem] = []
        self._sum_totals = info is not None and info.totals is not None
        self._usage: list[tuple[str, Mapping[str, Any]]] = []

    @property
    def needs_origins(self) -> set[str]:
        """The stored hashes whose positions this (first) pass could not name; see the class."""
        return self._chain.needed

    def _blob_problem(self, position: int, reason: Reason, detail: str) -> None:
        self._blob_problems.append(Problem(self._chain.run_id, position, reason, detail))

    @property
    def first(self) -> RecordedEvent | None:
        """The first event fed (a stand-in when it did not decode); None before any."""
        return self._run.first

    @property
    def last(self) -> int:
        """The position of the last event fed (0 before any)."""
        return self._run.last

    def feed(self, records: Sequence[RecordedEvent], unreadable: Mapping[int, str]) -> None:
        """Check the next page of the run's events (`unreadable` as in `verify_run`)."""
        take = self._take
        for record in records:
            take(record, unreadable.get(record.position), plain_floats=False)
        self.report.events_checked += len(records)
        self._sum_usage()

    def feed_stored(self, rows: Iterable[ScannedEvent]) -> None:
        """Check the next page of the run's events as stored, decoding each just before its check.

        The rows are ``(run id as stored, position, kind, state bytes)`` in stored order. Each
        event is decoded, checked and let go before the next is decoded: a page decoded whole
        first costs more, its objects outgrowing the processor's caches before they are
        checked. An event that does not decode is checked as `feed` checks an unreadable one.
        """
        run_id = self._chain.run_id
        take, decode = self._take, RecordedEvent.from_state_noting_floats
        count = 0
        for _, position, kind, state in rows:
            count += 1
            try:
                record, plain_floats = decode(run_id, position, kind, state)
            except CorruptEventError as e:
                take(RecordedEvent.unreadable(run_id, position, kind), e.detail, plain_floats=False)
                continue
            take(record, None, plain_floats=plain_floats)
        self.report.events_checked += count
        self._sum_usage()

    def _take(self, record: RecordedEvent, unreadable: str | None, *, plain_floats: bool) -> None:
        """Check one event, in stored order (`unreadable`: why its bytes did not decode).

        `plain_floats`: the parser found every float of the event plain (`loads_noting_floats`).
        """
        problems, chain, run = self.report.problems, self._chain, self._run
        position, kind = record.position, record.kind
        if unreadable is None:
            canonical = chain.check(record, problems, plain_floats=plain_floats)
            payload = record.payload
            refs = (
                blob_refs_in(payload)
                if canonical is None
                else refs_in_canonical(canonical, payload)
            )
            if refs:
                first_use = self.named_blobs.pending
                for ref in refs:
                    first_use.setdefault(ref, position)
            if self._sum_totals and kind in _USAGE_KINDS:
                usage = self._usage
                usage.append((kind, payload))
                if len(usage) >= _USAGE_BATCH:
                    self._sum_usage()
        else:
            chain.skip(position, unreadable, problems)
        if run.ended_at is not None and kind != "RunAnnotated":
            detail = f"{kind} after the run ended at {run.ended_at}"
            problems.append(Problem(chain.run_id, position, "events after end", detail))
        if kind in _ENDS:
            run.ended_at = position
            run.end = run.end or record
            if unreadable is None:
                _check_terminal(chain.run_id, record, chain.checked_prev, problems)
        run.note(record, unreadable is None, self._info)

    def _sum_usage(self) -> None:
        """Add the usage events taken since the last call to the run's totals."""
        if self._usage:
            self._run.totals = self._run.totals.plus(RunTotals.of(self._usage))
            self._usage = []

    def check_blobs(self, others: Sequence[RunVerifier] = ()) -> None:
        """Check the blobs this run (and `others`, in one go) named since the last check.

        Call it after each page, so that what waits for checking stays bounded; `finish` checks
        what is left.
        """
        runs = [self, *others]
        assert self._blobs is not None, "without a BlobCheck the caller checks the blobs"
        self.report.blobs_checked += self._blobs.check([r.named_blobs for r in runs])

    def recorded_meanwhile(self, read_again: Callable[[], RunInfo | None]) -> None:
        """Note whether the run was being recorded while it was read (see `_check_index`).

        A running run's index row that counts fewer events than were read is read again: when
        it changed, a writer was appending (its row and events commit together); when it did
        not, the row was rewritten to an earlier state, which the index check reports.
        """
        info = self._info
        if info is None or info.status != "running" or info.event_count >= self._run.last:
            return
        self._run.grown = read_again() != info

    def finish(self) -> VerifyReport:
        """Check the runs index against what was fed, and return the report."""
        if self._blobs is None:
            assert not self.named_blobs.pending, "the caller takes the refs each page named"
        elif self.named_blobs.pending:
            self.check_blobs()
        if self._info is not None or self._indexed:
            _check_index(self._run, self._info, self.report.problems)
        self.report.problems += self._blob_problems
        return self.report


def forks_past_end(starts: Iterable[RecordedEvent], ends: Mapping[str, int]) -> list[Problem]:
    """Runs started from a position of a parent run past that parent's last stored event.

    `starts` are the RunStarted records of (possibly) derived runs; `ends` maps run ids to
    their last stored position. A fork or re-run names the position of its parent it continued
    from, so a parent whose events now stop before that position lost its tail, even when its
    end event and its index row were rewritten to hide it.
    """
    problems: list[Problem] = []
    for start in starts:
        if not starts_from_parent(start):
            continue
        parent = start.payload["parent_run_id"]
        position = start.payload["parent_position"]
        if parent not in ends:
            continue
        end = ends[parent]
        if position > end:
            detail = (
                f"run {start.run_id} was started from position {position} of this run, "
                f"whose events now end at {end}"
            )
            problems.append(Problem(parent, end + 1, "tail truncated", detail))
    return problems


def starts_from_parent(record: RecordedEvent) -> bool:
    """Whether `record` starts a run from a position of a parent run (what `forks_past_end` reads).

    A RunStarted naming a parent run id and a position in it: a fork or re-run.
    """
    if record.kind != "RunStarted":
        return False
    payload = record.payload
    return isinstance(payload.get("parent_position"), int) and isinstance(
        payload.get("parent_run_id"), str
    )


@dataclass
class _Chain:
    """Walks a run's events in stored order, recomputing each hash and checking each link."""

    run_id: str
    origins: Mapping[str, int] | None
    """Where each stored hash is, by hash (only those a report needs); None on a first pass."""
    expected: int = 1
    prev: str = GENESIS
    checked_prev: str = GENESIS
    resync: bool = False
    recomputed: dict[int, bytes] | None = None
    last: int = 0
    needed: set[str] = field(default_factory=set)

    def _origin(self, prev: str) -> int | None:
        """The position whose stored hash is `prev` (None if none, or not known yet)."""
        if self.origins is None:
            self.needed.add(prev)
            return None
        return self.origins.get(prev)

    def _repeated(self, position: int, problems: list[Problem]) -> None:
        """A position not above the previous row's: the run holds two rows for one event."""
        if position <= self.last:
            detail = f"a row at position {position} follows one at position {self.last}"
            problems.append(Problem(self.run_id, position, "position repeated", detail))
            return
        self.last = position

    def _gap(self, position: int, problems: list[Problem]) -> bool:
        if position <= self.expected:
            return False
        problems.append(_missing(self.run_id, self.expected, position))
        self.expected = position
        return True

    def skip(self, position: int, reason: str, problems: list[Problem]) -> None:
        """An event whose stored bytes do not decode: reported; the next link is not checked."""
        self._repeated(position, problems)
        self._gap(position, problems)
        detail = f"the stored event cannot be read: {reason}"
        problems.append(Problem(self.run_id, position, "payload altered", detail))
        if self.recomputed is not None:
            self.recomputed[position] = bytes(32)
        self.expected = position + 1
        self.resync = True

    def check(
        self, record: RecordedEvent, problems: list[Problem], *, plain_floats: bool = False
    ) -> bytes | None:
        """Recompute `record`'s hash and check it against its stored hash and its link.

        Returns the payload's canonical bytes (None when the payload is not JSON-native).
        `plain_floats`: the parser found every float of the payload plain (`parsed_event_hash`).
        """
        run_id, position = self.run_id, record.position
        if position <= self.last:
            self._repeated(position, problems)
        else:
            self.last = position
        canonical: bytes | None = None
        try:
            recomputed, canonical = parsed_event_hash(
                record.run_id,
                position,
                record.kind,
                record.version,
                record.timestamp,
                record.event_id,
                record.prev,
                record.payload,
                plain_floats=plain_floats,
            )
        except InvalidPayloadError as e:
            problems.append(Problem(run_id, position, "not decodable", str(e)))
            recomputed = ""
        if self.recomputed is not None:
            self.recomputed[position] = bytes.fromhex(recomputed) if recomputed else bytes(32)
        after_gap = (position > self.expected and self._gap(position, problems)) or self.resync
        self.resync = False
        if recomputed != record.hash:
            origin = None if after_gap else self._origin(record.prev)
            if origin is not None and origin != record.position - 1:
                detail = f"its predecessor is stored at position {origin}"
                problems.append(Problem(run_id, record.position, "events reordered", detail))
            elif recomputed:
                detail = f"content hashes to {recomputed[:12]}, recorded {record.hash[:12]}"
                problems.append(Problem(run_id, record.position, "payload altered", detail))
        elif record.prev != self.prev and not after_gap:
            origin = self._origin(record.prev)
            if origin is not None and origin != record.position - 1:
                detail = f"its predecessor is stored at position {origin}"
                problems.append(Problem(run_id, record.position, "events reordered", detail))
            elif origin is None and record.position > 1:
                detail = "the event it was chained to is not in the run"
                problems.append(Problem(run_id, record.position, "event missing", detail))
        self.expected += 1
        self.checked_prev = self.prev
        self.prev = recomputed or record.hash
        return canonical


def _missing(run_id: str, expected: int, found: int) -> Problem:
    """Positions `expected`..`found` - 1 are absent."""
    missing = f"{expected}" if found == expected + 1 else f"{expected}..{found - 1}"
    detail = f"position {missing} is absent; the next stored is {found}"
    return Problem(run_id, expected, "event missing", detail)


def _check_terminal(run_id: str, record: RecordedEvent, prev: str, problems: list[Problem]) -> None:
    count = record.payload.get("event_count")
    if count != record.position:
        problems.append(
            Problem(
                run_id,
                record.position,
                "tail truncated"
                if isinstance(count, int) and count > record.position
                else "event missing",
                f"{record.kind} counts {count} events but stands at position {record.position}",
            )
        )
    if record.payload.get("head_hash") != prev:
        problems.append(
            Problem(run_id, record.position, "payload altered", "head hash does not match chain")
        )


_ENDS = frozenset({"RunCompleted", "RunFailed"})
_USAGE_BATCH = 256
"""Usage events whose payloads wait to be summed, at most (see `RunVerifier._take`)."""
_USAGE_KINDS = frozenset({"ModelCalled", "ToolReturned"})
"""The kinds whose payloads the usage totals sum (`RunTotals.of` reads no others)."""


@dataclass
class _Run:
    """What the runs index should say of a run, gathered from its events as they stream by."""

    run_id: str
    import_batch: int
    count: int = 0
    first: RecordedEvent | None = None
    first_readable: bool = False
    head: RecordedEvent | None = None
    head_readable: bool = False
    end: RecordedEvent | None = None
    ended_at: int | None = None
    start_time_seen: bool = False
    """The index's start time is the time of an event a writer could have stamped it with."""
    end_time_at: int | None = None
    """The highest position whose event has the index's end time."""
    totals: RunTotals = field(default_factory=RunTotals)
    """The usage sums over the readable events (summed only when the index keeps totals)."""
    at_index: RecordedEvent | None = None
    """The event at the position a running run's index row counts up to (see `_check_index`)."""
    grown: bool = False
    """The run was being recorded while verify read it (`RunVerifier.recorded_meanwhile`)."""

    def note(self, record: RecordedEvent, readable: bool, info: RunInfo | None) -> None:
        """Take one more event (in stored order) into account."""
        self.count += 1
        if self.first is None:
            self.first, self.first_readable = record, readable
        self.head, self.head_readable = record, readable
        if info is None:
            return
        if record.position == info.event_count and readable:
            self.at_index = record
        if not record.timestamp:
            return
        if record.timestamp == info.started_at and record.position <= self.import_batch:
            self.start_time_seen = True
        if record.timestamp == info.ended_at:
            self.end_time_at = max(self.end_time_at or 0, record.position)

    @property
    def last(self) -> int:
        return self.head.position if self.head is not None else 0

    @property
    def status(self) -> str:
        if self.end is None:
            return "running"
        return "completed" if self.end.kind == "RunCompleted" else "failed"

    def started(self) -> RecordedEvent | None:
        """The RunStarted event at position 1, when it is stored and readable."""
        first = self.first
        if first is None or first.position != 1 or first.kind != "RunStarted":
            return None
        return first if self.first_readable else None


def _check_index(run: _Run, info: RunInfo | None, problems: list[Problem]) -> None:
    """Compare the run's row in the runs index (derived data) with its events.

    A row that counts more events than are stored, or says the run ended when no end event is
    stored, is reported as a truncated tail, since that is what it would take to cause it
    without an edit of the index; either way one of the two was tampered with. Fields that such
    a cut explains (count, head, status, end time) are then not reported again. A running run's
    row that counts fewer events than are stored was read while the run was being recorded
    (verify reads the index, then the events): its head must be the event at its count; the
    fields of later events (count, status, end time, totals) describe a later state and are not
    compared. A row that did not change meanwhile was rewritten to an earlier state: its fields
    are compared as always.
    """
    run_id, last = run.run_id, run.last
    if info is None:
        if run.first is not None:
            detail = f"the run has {run.count} stored events but no runs index row"
            problems.append(Problem(run_id, run.first.position, "index row missing", detail))
        return
    if run.first is None:
        detail = (
            f"the runs index lists the run ({info.status}, {info.event_count} events) "
            "but none of its events is stored"
        )
        problems.append(Problem(run_id, 1, "run missing", detail))
        return
    if info.event_count > last:
        detail = (
            f"the runs index recorded {info.event_count} events; {last} remain "
            "(the last events were deleted, or the index was edited)"
        )
        problems.append(Problem(run_id, last + 1, "tail truncated", detail))
    elif run.grown:
        # Recorded on while verify read: the row was read before the run's later events. It
        # must still be the run as it was then: its head the event at its count.
        grown = run.at_index
        if grown is not None and info.head_hash != grown.hash:
            problems.append(
                _mismatch(run_id, grown.position, "head hash", info.head_hash[:12], grown.hash[:12])
            )
    elif info.status != "running" and run.end is None:
        detail = (
            f"run is {info.status} but has no end: the runs index says so, and no RunCompleted "
            "or RunFailed is stored (the end was deleted, or the index was edited)"
        )
        problems.append(Problem(run_id, last + 1, "tail truncated", detail))
    else:
        _check_tail_fields(run, info, problems)
        _check_totals(run, info, problems)
    _check_start_fields(run, info, problems)


def _check_totals(run: _Run, info: RunInfo, problems: list[Problem]) -> None:
    """The index's usage totals against the sums over the run's readable events.

    An index that predates the totals, read without migrating it, has none to check.
    """
    kept = info.totals
    if kept is None:
        return
    for name, index, events in kept.mismatches(run.totals):
        problems.append(_mismatch(run.run_id, run.last, name.replace("_", " "), index, events))


def _mismatch(run_id: str, position: int, name: str, index: Any, events: Any) -> Problem:
    detail = f"{name}: the runs index says {index!r}, the events say {events!r}"
    return Problem(run_id, position, "index mismatch", detail, field=name)


def _check_tail_fields(run: _Run, info: RunInfo, problems: list[Problem]) -> None:
    run_id, last, head = run.run_id, run.last, run.head
    if info.event_count != last:
        problems.append(_mismatch(run_id, last, "event count", info.event_count, last))
    if head is not None and run.head_readable and info.head_hash != head.hash:
        problems.append(_mismatch(run_id, last, "head hash", info.head_hash[:12], head.hash[:12]))
    if info.status != run.status:
        problems.append(_mismatch(run_id, last, "status", info.status, run.status))
    if run.end is None:
        if info.ended_at is not None:
            problems.append(_mismatch(run_id, last, "ended at", info.ended_at, None))
        return
    # The index takes the time of the last event committed with the end (annotations may follow
    # it in one import batch), so any time from the end event on is what a writer could store.
    if run.end_time_at is None or run.end_time_at < run.end.position:
        position = run.end.position
        problems.append(_mismatch(run_id, position, "ended at", info.ended_at, run.end.timestamp))


def _check_start_fields(run: _Run, info: RunInfo, problems: list[Problem]) -> None:
    started = run.started()
    if started is None:
        return  # the chain check has reported the missing or unreadable RunStarted
    run_id, payload = run.run_id, started.payload
    if info.agent != payload.get("agent", ""):
        problems.append(_mismatch(run_id, 1, "agent", info.agent, payload.get("agent", "")))
    # The recording API stores the RunStarted event's time. An import commits its first batch
    # of events at once and stamps the new row with the batch's last event, so any event of a
    # first batch is possible too (a known quirk of the import path, tolerated here).
    if not run.start_time_seen:
        problems.append(_mismatch(run_id, 1, "started at", info.started_at, started.timestamp))
    parent = payload.get("parent_run_id")
    if info.parent_run_id != parent:
        problems.append(_mismatch(run_id, 1, "parent run id", info.parent_run_id, parent))
    if not _preview_matches(info.input_preview, payload):
        problems.append(
            _mismatch(run_id, 1, "input preview", info.input_preview, _preview(payload))
        )
    tags = sorted(set(payload.get("tags", [])))
    if list(info.tags) != tags:
        added = sorted(set(info.tags) - set(tags))
        removed = sorted(set(tags) - set(info.tags))
        problem = _mismatch(run_id, 1, "tags", list(info.tags), tags)
        changes = [f"added {added}" if added else "", f"removed {removed}" if removed else ""]
        detail = f"{problem.detail} ({', '.join(c for c in changes if c)})"
        problems.append(Problem(run_id, 1, "index mismatch", detail, field="tags"))


def _preview_matches(shown: str, started: Mapping[str, Any]) -> bool:
    """Whether `shown` is the index's preview of the run's input.

    The preview of a live run renders a JSON object input in the caller's key order and an
    integral float as ``1.0``, neither of which the stored (canonical) payload keeps; so such an
    input matches when it parses to the same value, or, clipped, when it uses no character
    the input's rendering lacks beyond those of ``.0``.
    """
    if shown == _preview(dict(started)):
        return True
    value = started.get("input")
    if value is None or isinstance(value, str):
        return False
    if len(shown) < _PREVIEW or not shown.endswith("\u2026"):
        try:
            return bool(json.loads(shown) == value)
        except ValueError:
            return False
    extra = Counter(shown[:-1]) - Counter(json.dumps(value, ensure_ascii=False))
    return len(shown) == _PREVIEW and set(extra) <= {".", "0"}
