"""Group commit: the recorders' writes to one ledger, several runs per transaction.

Every `RunRecorder` flush becomes a `CommitRequest` queued here. One thread at a time drains
the queue: it seals each request onto its run's chain (requests of one run in the order they
were queued) and writes all of them in ONE transaction, so many runs recording at once (100
async runs in one event loop) share each commit's ``fsync`` instead of paying one each. A sync
caller that finds the committer idle drains in its own thread (no hand-off: one commit per
flush costs what it cost before); an async caller hands the drain to a worker thread and awaits
the result, so the event loop never waits on database I/O.

Write-behind requests (the awaitable recording methods, which do not wait for their commit) are
not drained at once: the worker commits them within `BEHIND_WINDOW_S` (sooner when
`BEHIND_BATCH` are queued, or when anyone waits for a commit: `kick`), so a stream of calls
shares each transaction and wakes the worker thread once, not once a call. A run recording
faster than the window adds each call's events to its request still queued (`extend`), so the
window's calls are sealed, written and resolved as one request, not one each.

A request that cannot be sealed (an end event in the wrong place, an earlier request of the
same run that failed) fails alone; when the shared transaction fails, each request is written
on its own, in order, so one bad run does not fail the others. Must not know recorders' events
beyond the envelope.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentledger.ledger._records import BlobRow, RecordedEvent, encode_blob
from agentledger.ledger.errors import ConcurrencyError, LedgerError

if TYPE_CHECKING:
    from agentledger.ledger._ledger import Head, Ledger, Prepared, Sealed
    from agentledger.ledger.events import RunStarted

__all__ = ["BEHIND_BATCH", "BEHIND_WINDOW_S", "CommitRequest", "GroupCommitter"]

BEHIND_WINDOW_S = 0.005
"""How long a write-behind request may wait for others to share its transaction."""
BEHIND_BATCH = 64
"""This many queued requests are drained at once, without waiting for the window."""


@dataclass(eq=False)
class CommitRequest:
    """One flush of one run: its events (positions ``first``...), their blobs, and callbacks.

    ``head`` gives the run's committed head when the drain reaches the request (the recorder's
    aggregate); ``committed`` is called with the sealed batch after the transaction commits and
    ``failed`` with the error when it does not (both in the draining thread, before the future
    is resolved).
    """

    run_id: str
    first: int
    events: list[Prepared]
    blobs: dict[str, bytes]
    head: Callable[[], Head]
    committed: Callable[[Sealed], None]
    failed: Callable[[BaseException], None]
    started: tuple[str, RunStarted] | None = None
    leader: bool = False
    """Set by the recorder: `enqueue` told it to drain (the committer was idle)."""
    future: Future[list[RecordedEvent]] = field(default_factory=Future)
    taken: bool = False
    """Set (under the committer's lock) once a drain has taken the request: `extend` refuses."""

    def fail(self, error: BaseException) -> None:
        """Resolve the request with ``error``."""
        self.failed(error)
        self.future.set_exception(error)


class GroupCommitter:
    """Writes queued commit requests, several runs per transaction (see the module doc)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._lock = threading.Lock()
        self._queue: list[CommitRequest] = []
        self._busy = False
        self._executor: ThreadPoolExecutor | None = None
        self._armed = False
        self._wake = threading.Event()

    def enqueue(self, request: CommitRequest, *, behind: bool = False) -> bool:
        """Queue ``request``; True when the caller must drain (`drain` or `drain_elsewhere`).

        Callers queue under their own lock, so one run's requests keep their order. A
        ``behind`` request (write-behind: nobody waits for it yet) is left to the worker, which
        drains within `BEHIND_WINDOW_S`; it returns False unless `BEHIND_BATCH` are queued.
        """
        with self._lock:
            self._queue.append(request)
            if self._busy:
                return False
            if behind and len(self._queue) < BEHIND_BATCH:
                if not self._armed:
                    self._armed = True
                    self._wake.clear()
                    self._worker_unlocked().submit(self._drain_later)
                return False
            self._busy = True
            return True

    def extend(
        self, request: CommitRequest, events: list[Prepared], blobs: dict[str, bytes]
    ) -> bool:
        """Add a run's next events to its write-behind ``request`` still queued; False if taken.

        A run recording calls faster than the write-behind window queues one request per
        window instead of one per call: its events continue the request's (the caller holds the
        run's lock, so nothing of the run was queued after it) and it resolves when all of them
        are committed. Refused once a drain has taken the request, or when it holds
        `BEHIND_BATCH` events already (the caller then queues a new one).
        """
        with self._lock:
            if request.taken or len(request.events) >= BEHIND_BATCH:
                return False
            request.events.extend(events)
            request.blobs.update(blobs)
            return True

    def kick(self) -> None:
        """Someone waits for a commit: drain what write-behind left queued now."""
        self._wake.set()

    def drain(self, until: CommitRequest) -> None:
        """Drain in this thread until ``until`` is resolved; hand what is left to a worker."""
        while True:
            with self._lock:
                batch = self._take()
                if not batch:
                    self._busy = False
                    return
            self._commit(batch)
            if until.future.done():
                with self._lock:
                    if not self._queue:
                        self._busy = False
                        return
                self.drain_elsewhere()
                return

    def drain_elsewhere(self) -> None:
        """Drain in a worker thread (an async caller: the event loop must not wait on I/O)."""
        self._wake.set()  # a write-behind wait ahead of it in the worker ends now
        self._worker().submit(self._drain_all)

    async def acommit(self, request: CommitRequest) -> list[RecordedEvent]:
        """Queue ``request`` and await it; the writing happens in a worker thread."""
        if self.enqueue(request):
            self.drain_elsewhere()
        import asyncio  # only async callers pay for it

        return await asyncio.wrap_future(request.future)

    def close(self) -> None:
        """Stop the worker thread once what is queued is written."""
        self._wake.set()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def _worker(self) -> ThreadPoolExecutor:
        with self._lock:
            return self._worker_unlocked()

    def _worker_unlocked(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="agentledger-commit")
        return self._executor

    def _drain_later(self) -> None:
        """Wait out the write-behind window (or a `kick`), then drain unless someone is."""
        self._wake.wait(BEHIND_WINDOW_S)
        with self._lock:
            self._armed = False
            if self._busy or not self._queue:
                return
            self._busy = True
        self._drain_all()

    def _take(self) -> list[CommitRequest]:
        """What is queued, marked taken (under the lock): `extend` no longer adds to it."""
        batch, self._queue = self._queue, []
        for request in batch:
            request.taken = True
        return batch

    def _drain_all(self) -> None:
        while True:
            with self._lock:
                batch = self._take()
                if not batch:
                    self._busy = False
                    return
            self._commit(batch)

    def _commit(self, batch: Sequence[CommitRequest]) -> None:
        """Seal and write one batch; resolve every request in it."""
        try:
            sealed = self._seal(batch)
            if sealed:
                self._write(sealed)
        except BaseException as error:  # noqa: BLE001 - nothing may be left unresolved
            for request in batch:
                if not request.future.done():
                    request.fail(error)

    def _seal(self, batch: Sequence[CommitRequest]) -> list[tuple[CommitRequest, Sealed]]:
        heads: dict[str, Head] = {}
        broken: dict[str, int] = {}
        sealed: list[tuple[CommitRequest, Sealed]] = []
        for request in batch:
            try:
                if request.run_id in broken:
                    raise ConcurrencyError(request.run_id, request.first)
                head = heads.get(request.run_id) or request.head()
                if request.first != head.position + 1:
                    # an earlier commit of this run failed: these events were numbered after it
                    raise ConcurrencyError(request.run_id, request.first)
                batch_sealed = self._ledger._seal(head, request.events, started=request.started)
            except LedgerError as error:
                broken[request.run_id] = request.first
                request.fail(error)
                continue
            heads[request.run_id] = batch_sealed.end
            sealed.append((request, batch_sealed))
        return sealed

    def _write(self, sealed: list[tuple[CommitRequest, Sealed]]) -> None:
        try:
            self._ledger._write([s for _, s in sealed], _rows(r for r, _ in sealed))
        except LedgerError as error:
            if len(sealed) == 1:
                sealed[0][0].fail(error)
                return
            self._write_each(sealed)
            return
        for request, batch_sealed in sealed:
            self._resolve(request, batch_sealed)

    def _write_each(self, sealed: list[tuple[CommitRequest, Sealed]]) -> None:
        """The shared transaction failed: write each request alone, so only the bad one fails."""
        failed: set[str] = set()
        for request, batch_sealed in sealed:
            if request.run_id in failed:
                request.fail(ConcurrencyError(request.run_id, request.first))
                continue
            try:
                self._ledger._write([batch_sealed], _rows([request]))
            except LedgerError as error:
                failed.add(request.run_id)
                request.fail(error)
                continue
            self._resolve(request, batch_sealed)

    def _resolve(self, request: CommitRequest, batch_sealed: Sealed) -> None:
        """The request's events are committed: its callback, its future, then the log.

        Resolved before anything else can fail, so a committed request is never failed too.
        """
        request.committed(batch_sealed)
        request.future.set_result(batch_sealed.recorded)
        self._ledger._logged(batch_sealed.recorded)


def _rows(requests: Iterable[CommitRequest]) -> list[BlobRow]:
    seen: dict[str, bytes] = {}
    for request in requests:
        seen.update(request.blobs)
    return [encode_blob(ref, data) for ref, data in seen.items()]
