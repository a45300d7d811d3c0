"""Verification: recompute every run's hash chain and every blob from content.

Never trusts a stored hash: each event's hash is recomputed from its envelope and compared with
the hash stored beside it and with the `prev` of the next event; every blob an event (or another
blob) refers to is re-hashed. Problems are named by run, position and reason. Must not write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentledger.ledger._canonical import canonical_json, loads
from agentledger.ledger._hashing import GENESIS, blob_ref, envelope_hash
from agentledger.ledger._records import RecordedEvent, RunInfo
from agentledger.ledger.errors import CorruptBlobError, InvalidPayloadError

__all__ = ["Problem", "Reason", "VerifyReport", "blob_refs_in", "verify_run"]

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
]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run: where, and why."""

    run_id: str
    position: int
    reason: Reason
    detail: str

    def __str__(self) -> str:
        return f"run {self.run_id} position {self.position}: {self.reason} ({self.detail})"


@dataclass
class VerifyReport:
    """What `verify` checked and what it found."""

    runs_checked: int = 0
    events_checked: int = 0
    blobs_checked: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is broken."""
        return not self.problems

    @property
    def broken_runs(self) -> list[str]:
        """Ids of the runs with problems, in order of first mention."""
        return list(dict.fromkeys(p.run_id for p in self.problems))

    def merge(self, other: VerifyReport) -> None:
        """Add another report's counts and problems to this one."""
        self.runs_checked += other.runs_checked
        self.events_checked += other.events_checked
        self.blobs_checked += other.blobs_checked
        self.problems += other.problems


def blob_refs_in(value: Any) -> list[str]:
    """Blob refs in a payload or blob: values of keys ending ``_ref`` and items of ``_refs``."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if key.endswith("_ref") and isinstance(inner, str):
                    found.append(inner)
                elif key.endswith("_refs") and isinstance(inner, list):
                    found.extend(ref for ref in inner if isinstance(ref, str))
                else:
                    stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
    return found


BlobLookup = Callable[[Sequence[str]], Mapping[str, bytes | CorruptBlobError]]
"""Canonical bytes by ref for the refs that exist; a blob that does not unpack as its error."""


def verify_run(
    run_id: str,
    records: Sequence[RecordedEvent],
    blobs: BlobLookup,
    info: RunInfo | None = None,
    *,
    unreadable: Mapping[int, str] | None = None,
) -> VerifyReport:
    """Verify one run's events (ordered by stored position) and the blobs they refer to.

    `unreadable` maps the positions whose stored bytes did not decode (their records are
    stand-ins) to the reason: each is reported as an altered payload, and the chain check
    resumes at the next event.
    """
    report = VerifyReport(runs_checked=1, events_checked=len(records))
    problems = report.problems
    unreadable = unreadable or {}
    chain = _Chain(run_id, {r.hash: r.position for r in records if r.position not in unreadable})
    ended_at: int | None = None
    for record in records:
        if record.position in unreadable:
            chain.skip(record.position, unreadable[record.position], problems)
        else:
            chain.check(record, problems)
        if ended_at is not None and record.kind != "RunAnnotated":
            detail = f"{record.kind} after the run ended at {ended_at}"
            problems.append(Problem(run_id, record.position, "events after end", detail))
        if record.kind in {"RunCompleted", "RunFailed"}:
            ended_at = record.position
            if record.position not in unreadable:
                _check_terminal(run_id, record, chain.checked_prev, problems)
    _check_tail(run_id, records, ended_at, info, problems)
    report.blobs_checked = _check_blobs(run_id, records, blobs, problems)
    return report


@dataclass
class _Chain:
    """Walks a run's events in stored order, recomputing each hash and checking each link."""

    run_id: str
    by_stored_hash: dict[str, int]
    expected: int = 1
    prev: str = GENESIS
    checked_prev: str = GENESIS
    resync: bool = False

    def _gap(self, position: int, problems: list[Problem]) -> bool:
        if position <= self.expected:
            return False
        problems.append(_missing(self.run_id, self.expected, position))
        self.expected = position
        return True

    def skip(self, position: int, reason: str, problems: list[Problem]) -> None:
        """An event whose stored bytes do not decode: reported; the next link is not checked."""
        self._gap(position, problems)
        detail = f"the stored event cannot be read: {reason}"
        problems.append(Problem(self.run_id, position, "payload altered", detail))
        self.expected = position + 1
        self.resync = True

    def check(self, record: RecordedEvent, problems: list[Problem]) -> None:
        """Recompute `record`'s hash and check it against its stored hash and its link."""
        run_id = self.run_id
        try:
            recomputed = envelope_hash(record.envelope())
        except InvalidPayloadError as e:
            problems.append(Problem(run_id, record.position, "not decodable", str(e)))
            recomputed = ""
        origin = self.by_stored_hash.get(record.prev)
        moved = origin is not None and origin != record.position - 1
        after_gap = self._gap(record.position, problems) or self.resync
        self.resync = False
        if recomputed != record.hash:
            if moved and not after_gap:
                detail = f"its predecessor is stored at position {origin}"
                problems.append(Problem(run_id, record.position, "events reordered", detail))
            elif recomputed:
                detail = f"content hashes to {recomputed[:12]}, recorded {record.hash[:12]}"
                problems.append(Problem(run_id, record.position, "payload altered", detail))
        elif record.prev != self.prev and not after_gap:
            if moved:
                detail = f"its predecessor is stored at position {origin}"
                problems.append(Problem(run_id, record.position, "events reordered", detail))
            elif origin is None and record.position > 1:
                detail = "the event it was chained to is not in the run"
                problems.append(Problem(run_id, record.position, "event missing", detail))
        self.expected += 1
        self.checked_prev = self.prev
        self.prev = recomputed or record.hash


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


def _check_tail(
    run_id: str,
    records: Sequence[RecordedEvent],
    ended_at: int | None,
    info: RunInfo | None,
    problems: list[Problem],
) -> None:
    last = records[-1].position if records else 0
    if info is not None and info.event_count > last:
        problems.append(
            Problem(
                run_id,
                last + 1,
                "tail truncated",
                f"the runs index recorded {info.event_count} events; {last} remain",
            )
        )
    elif info is not None and info.status != "running" and ended_at is None:
        problems.append(
            Problem(run_id, last + 1, "tail truncated", f"run is {info.status} but has no end")
        )


def _check_blobs(
    run_id: str,
    records: Iterable[RecordedEvent],
    blobs: BlobLookup,
    problems: list[Problem],
) -> int:
    first_use: dict[str, int] = {}
    for record in records:
        for ref in blob_refs_in(record.payload):
            first_use.setdefault(ref, record.position)
    checked: set[str] = set()
    frontier = list(first_use)
    while frontier:
        wanted = [ref for ref in dict.fromkeys(frontier) if ref not in checked]
        frontier = []
        found = blobs(wanted)
        for ref in wanted:
            checked.add(ref)
            position = first_use[ref]
            data = found.get(ref)
            if data is None:
                problems.append(Problem(run_id, position, "blob missing", ref))
                continue
            if isinstance(data, CorruptBlobError):
                problems.append(Problem(run_id, position, "blob altered", f"{ref}: {data.detail}"))
                continue
            try:
                content = loads(data)
                actual = blob_ref(canonical_json(content))
            except (ValueError, InvalidPayloadError) as e:
                problems.append(Problem(run_id, position, "blob altered", f"{ref}: {e}"))
                continue
            if actual != ref:
                problems.append(Problem(run_id, position, "blob altered", ref))
                continue
            for inner in blob_refs_in(content):
                if inner not in checked:
                    first_use.setdefault(inner, position)
                    frontier.append(inner)
    return len(checked)
