"""Reading a ledger for `Ledger.verify` in pages, so memory stays bounded however long a run is.

One run is read by position range (eventsourcing's ``select_events(gt=, limit=)``); every run
at once is read in the events' key order (`LedgerRecorder.scan_events`), one query a page
however many runs a page spans, and each run's slice of a page goes to its `RunVerifier`. Blobs
are re-hashed through one `BlobCheck` for the whole ledger. Must not know events' meaning.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any
from uuid import UUID

from agentledger.ledger._backends import LedgerRecorder, ScannedEvent
from agentledger.ledger._records import VERIFY_PAGE, RecordedEvent, RunInfo
from agentledger.ledger._verify import BlobCheck, RunVerifier, VerifyReport, starts_from_parent
from agentledger.ledger._verify_blobs import BlobLookup, SealedCheck
from agentledger.ledger.errors import CorruptEventError

__all__ = ["VERIFY_PAGE", "PagedVerify"]

_HEX32 = re.compile(r"[0-9a-f]{32}")

Page = tuple[list[RecordedEvent], dict[int, str]]
"""A page of one run's events, decoded, and the reasons of those that would not decode."""


def decode_page(run_id: str, rows: Sequence[ScannedEvent]) -> Page:
    """Decode stored events; one that does not decode becomes a stand-in and its reason."""
    records: list[RecordedEvent] = []
    unreadable: dict[int, str] = {}
    for _, position, kind, state in rows:
        try:
            records.append(RecordedEvent.from_state(run_id, position, kind, state))
        except CorruptEventError as e:
            unreadable[position] = e.detail
            records.append(RecordedEvent.unreadable(run_id, position, kind))
    return records, unreadable


def _run_key(originator_id: Any) -> str | None:
    """The run id of a stored row, as the ledger spells it; None for a row it did not write.

    (Such a row is not a run's: verification against a checkpoint reports it.)
    """
    if isinstance(originator_id, UUID):
        return str(originator_id)
    if isinstance(originator_id, str) and _HEX32.fullmatch(originator_id):
        return str(UUID(originator_id))
    return None


class PagedVerify:
    """Verifies runs read page by page; the findings gather in `report`.

    `starts` holds the first stored event of each run started from a parent run's position and
    `ends` each run's last position, what `forks_past_end` compares (only those first events are
    kept, so memory grows with the forks, not with every run); `hashes`, when given, receives
    every recomputed hash by run and position (what a checkpoint check needs).
    """

    def __init__(
        self,
        recorder: LedgerRecorder,
        blobs: BlobLookup,
        page_size: int = VERIFY_PAGE,
        hashes: dict[str, dict[int, bytes]] | None = None,
        *,
        streams: frozenset[str] = frozenset(),
        progress: Callable[[int, int], None] | None = None,
        check_sealed: SealedCheck | None = None,
    ) -> None:
        self.report = VerifyReport()
        self._progress = progress
        """Told (events read so far, the events the runs index counts) after each page."""
        self._read = 0
        self._total = 0
        self.sealed: dict[str, str] = {}
        """Refs of the sealed blobs checked (data subjects'), with their key ids."""
        self._streams = streams
        self.starts: list[RecordedEvent] = []
        self.ends: dict[str, int] = {}
        self._recorder = recorder
        self._blobs = BlobCheck(blobs, sealed=self.sealed, check_sealed=check_sealed)
        self._page_size = page_size
        self._hashes = hashes
        self._seen: set[str] = set()

    def run_rows(self, run_id: str) -> Iterator[list[ScannedEvent]]:
        """One run's stored events, a page at a time, by position range."""
        uuid, after = UUID(run_id), 0
        while True:
            stored = self._recorder.select_events(uuid, gt=after or None, limit=self._page_size)
            if stored:
                yield [(None, s.originator_version, s.topic, s.state) for s in stored]
            if len(stored) < self._page_size:
                return
            after = stored[-1].originator_version

    def run_pages(self, run_id: str) -> Iterator[Page]:
        """One run's events, a page at a time, decoded."""
        for rows in self.run_rows(run_id):
            yield decode_page(run_id, rows)

    def scan_rows(self) -> Iterator[list[tuple[str, list[ScannedEvent]]]]:
        """Every run's stored events in run id then position order, a page at a time.

        Each page is split by run, as ``(run id, its rows)``; rows not of a run are left out.
        """
        after: tuple[Any, int] | None = None
        while True:
            stored = self._recorder.scan_events(after, self._page_size)
            slices: list[tuple[str, list[ScannedEvent]]] = []
            for key, rows in groupby(stored, key=itemgetter(0)):
                run_id = _run_key(key)
                if run_id is not None:
                    slices.append((run_id, list(rows)))
            if slices:
                yield slices
            if len(stored) < self._page_size:
                return
            after = stored[-1][:2]

    def _advanced(self, rows: int) -> None:
        self._read += rows
        if self._progress is not None:
            self._progress(self._read, max(self._total, self._read))

    def one_run(self, run_id: str, info: RunInfo | None) -> None:
        """Verify one run (its runs-index row `info`)."""
        verifier = self._verifier(run_id, info)
        self.ends[run_id] = 0
        self._total = info.event_count if info is not None else 0
        for rows in self.run_rows(run_id):
            verifier.feed_stored(rows)
            self._note(run_id, verifier)
            verifier.check_blobs()
            self._advanced(len(rows))
        self._finish(verifier, run_id, info)

    def every_run(self, infos: Mapping[str, RunInfo]) -> None:
        """Verify every run with events, then every runs-index row (`infos`) without any.

        One query reads a page of events however many runs it spans; each run's rows go to its
        verifier, which decodes and checks them one at a time. The blobs a page's runs name are
        checked together after the page (one lookup per level of references for all of them);
        a run is finished once a page shows its end.
        """
        current: tuple[str, RunVerifier] | None = None
        self._total = sum(info.event_count for info in infos.values())
        for slices in self.scan_rows():
            self._advanced(sum(len(rows) for _, rows in slices))
            touched: list[RunVerifier] = []
            done: list[tuple[str, RunVerifier]] = []
            for run_id, rows in slices:
                if current is None or current[0] != run_id:
                    if current is not None:
                        done.append(current)
                    current = (run_id, self._verifier(run_id, infos.get(run_id)))
                current[1].feed_stored(rows)
                self._note(run_id, current[1])
                touched.append(current[1])
            touched[0].check_blobs(touched[1:])
            for run_id, verifier in done:
                self._finish(verifier, run_id, infos.get(run_id))
        if current is not None:
            self._finish(current[1], current[0], infos.get(current[0]))
        for run_id in sorted(set(infos) - self._seen):  # no events: no hashes to record
            verifier = RunVerifier(run_id, self._blobs, infos[run_id], indexed=True)
            self._finish(verifier, run_id, infos[run_id])

    def _verifier(
        self, run_id: str, info: RunInfo | None, origins: Mapping[str, int] | None = None
    ) -> RunVerifier:
        if run_id in self._streams:
            return self._stream_verifier(run_id, origins)
        recomputed = self._hashes.setdefault(run_id, {}) if self._hashes is not None else None
        return RunVerifier(
            run_id, self._blobs, info, indexed=True, recomputed=recomputed, origins=origins
        )

    def _stream_verifier(
        self, stream: str, origins: Mapping[str, int] | None = None
    ) -> RunVerifier:
        """A chain of the ledger's own (the erasure stream), checked like a run.

        It is not counted as a run and has no runs-index row to compare.
        """
        recomputed = self._hashes.setdefault(stream, {}) if self._hashes is not None else None
        verifier = RunVerifier(stream, self._blobs, None, recomputed=recomputed, origins=origins)
        verifier.report.runs_checked = 0
        return verifier

    def has_events(self, run_id: str) -> bool:
        """Whether any stored event of the run was verified."""
        return run_id in self._seen

    def _note(self, run_id: str, verifier: RunVerifier) -> None:
        """Keep the run's last position, and its first event if it is a fork's (`starts`)."""
        first = verifier.first
        if first is None:
            return
        if run_id not in self._seen:
            self._seen.add(run_id)
            if starts_from_parent(first):
                self.starts.append(first)
        self.ends[run_id] = verifier.last

    def _finish(self, verifier: RunVerifier, run_id: str, info: RunInfo | None) -> None:
        """Add the run's report.

        A run whose report must name where hashes are stored is read twice more: once for
        those positions, once to verify it knowing them.
        """
        verifier.recorded_meanwhile(lambda: self._recorder.get_run(run_id))
        needed = verifier.needs_origins
        if needed:
            # the first pass's blobs stay counted: the second finds them remembered intact
            checked = verifier.report.blobs_checked
            origins: dict[str, int] = {}
            for records, unreadable in self.run_pages(run_id):
                for r in records:
                    if r.hash in needed and r.position not in unreadable:
                        origins[r.hash] = r.position
            verifier = self._verifier(run_id, info, origins)
            for rows in self.run_rows(run_id):
                verifier.feed_stored(rows)
                verifier.check_blobs()
            verifier.report.blobs_checked = max(verifier.report.blobs_checked, checked)
        self.report.merge(verifier.finish())
