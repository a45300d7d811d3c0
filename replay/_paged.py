"""``PagedEvents``: a recorded run's events as a sequence read from the ledger a page at a time.

Owns how replay reads a long record without holding it: the sequence has the length the run had
when it was opened (an event appended later is not part of it), indexing reads the page holding
that position and keeps the few pages used last (safe from several threads), and iterating
streams the pages. Positions are
append-only, so a page read again is the same page. Must not write.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import overload

from agentledger.ledger import Ledger, RecordedEvent

__all__ = ["PagedEvents"]

KEPT_PAGES = 4
"""How many pages a `PagedEvents` keeps for indexing (replay reads mostly forward)."""


class PagedEvents(Sequence[RecordedEvent]):
    """The events of ``run_id`` (positions 1..``count``), read ``ledger.page_size`` at a time."""

    def __init__(self, ledger: Ledger, run_id: str, *, upto: int | None = None) -> None:
        self._ledger = ledger
        self._run_id = run_id
        self._size = max(ledger.page_size, 1)
        self._pages: OrderedDict[int, list[RecordedEvent]] = OrderedDict()
        self.lock = threading.RLock()
        """Held while reading: a replay's readers of the record share it (one read at a time)."""
        first = ledger.events(run_id, upto=self._size)  # most runs: the whole record, one query
        if first:
            self._pages[0] = first
        self.last = first[-1] if 0 < len(first) < self._size else ledger.last_event(run_id)
        """The run's last event when it was opened."""
        count = self.last.position
        self._count = count if upto is None else min(count, max(upto, 0))

    def __len__(self) -> int:
        return self._count

    def whole(self) -> list[RecordedEvent] | None:
        """Every event, when the first page read holds the whole record (else None)."""
        first = self._pages.get(0)
        if first is None or self._count > len(first) or len(first) >= self._size:
            return None
        return first[: self._count]

    @overload
    def __getitem__(self, index: int) -> RecordedEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordedEvent]: ...

    def __getitem__(self, index: int | slice) -> RecordedEvent | list[RecordedEvent]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if start >= stop:
                return []
            return list(self._ledger.iter_events(self._run_id, after=start, upto=stop))
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        number = index // self._size
        return self._page(number)[index - number * self._size]

    def _page(self, number: int) -> list[RecordedEvent]:
        """Page ``number`` (positions ``number * size + 1``...), read once while it is kept."""
        with self.lock:  # a replay's threads read it at once
            page = self._pages.get(number)
            if page is None:
                first = number * self._size
                upto = min(first + self._size, self._count)
                page = self._ledger.events(self._run_id, after=first, upto=upto)
                self._pages[number] = page
                while len(self._pages) > KEPT_PAGES:
                    self._pages.popitem(last=False)
            else:
                self._pages.move_to_end(number)
        # Within the record's length (the first page may hold events appended after it).
        return page[: max(self._count - number * self._size, 0)]

    def __iter__(self) -> Iterator[RecordedEvent]:
        for number in range((self._count + self._size - 1) // self._size):
            yield from self._page(number)
