"""Whether a replayed function can still record anything: the evidence of the stall shortcut.

A served call of a replayed function waits for its turn (`ServingRecorder`); when the events
recorded before it can never come (the code changed), the replay reports a stall. It need not
wait out the stall timeout when nothing that could record them is still at work. `Participants`
keeps who takes part in a replayed run and judges that:

- **who**: the threads and tasks that recorded or were served something (the parties), every
  thread started since the function began, and every `ThreadPoolExecutor` worker;
- a party waiting for its turn is stuck, and a finished thread or task is out;
- a thread is stuck when its stack shows it idle in a thread pool with nothing queued, joining
  another participating thread, or waiting with no timeout on futures that participating threads
  run: ``Future.result``/``exception`` (and so ``Executor.map``), ``concurrent.futures.wait``
  (one such future suffices for ``ALL_COMPLETED``, else each must be one) and ``as_completed``;
- anything else may still record, so there is no shortcut: a thread sleeping, computing, reading
  a socket or a queue, waiting on a lock or on a future no participating thread runs (one still
  queued, one another process sets), and a task that is not waiting for its turn.

A verdict drawn from threads' stacks stands only when a second look, `CONFIRM_S` later, finds
every one of those stacks where it was and nothing recorded in between (a thread seen between two
steps of a pool's loop has moved by then). The stacks are read with `sys._current_frames`, and
``concurrent.futures``' own frames by their code: a layout this module does not recognise counts
as at work, so another Python version can delay a stall report, never make a false one. Not
seen: a thread that existed before the function began, is no pool worker and has recorded
nothing (the function handing work to a long-lived thread of its own). Records nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from types import FrameType
from typing import Any

__all__ = ["CONFIRM_S", "Participants"]

CONFIRM_S = 0.1
"""How long a deadlock read from threads' stacks must hold before it is reported."""

_THREADING = threading.Thread.join.__code__.co_filename
_FUTURES = Future.result.__code__.co_filename
_POOL = concurrent.futures.ThreadPoolExecutor.submit.__code__.co_filename
_BLOCKING = frozenset({"wait", "_wait_for_tstate_lock"})
"""The `threading` functions a thread blocks in (Condition.wait, Event.wait, a join's lock)."""

Mark = tuple[int, int, int]
"""Where a thread judged from its stack stood: its ident, its innermost frame and instruction."""


@dataclass(frozen=True)
class _Idle:
    """A pool worker between work items, waiting on its pool's queue."""

    queue: Any


@dataclass(frozen=True)
class _Joins:
    """A thread joining another, with no timeout."""

    thread: threading.Thread


@dataclass(frozen=True)
class _Waits:
    """A thread waiting, with no timeout, for futures: for all of them (``every``) or for one."""

    futures: tuple[Future[Any], ...]
    every: bool


class Participants:
    """The threads and tasks of one replayed function, and whether any can still record."""

    def __init__(self) -> None:
        self.parties: weakref.WeakSet[Any] = weakref.WeakSet()
        """The threads and tasks that recorded or were served something."""
        self._adding = threading.Lock()
        """Held to add a party and to copy the parties (a set cannot be copied as it grows)."""
        self._waiting: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        """Parties waiting for their turn, and the position each waits to follow."""
        self._before: weakref.WeakSet[threading.Thread] | None = None
        self._seen: tuple[tuple[int, frozenset[Mark]], float] | None = None

    def begin(self) -> None:
        """Note the threads alive as the function begins (the first call counts)."""
        if self._before is None:
            self._before = weakref.WeakSet(threading.enumerate())

    def join(self, party: Any) -> None:
        """Count ``party`` (a thread or a task) as one running the function."""
        if party not in self.parties:  # a lookup costs less than adding it again
            with self._adding:
                self.parties.add(party)

    def wait(self, party: Any, after: int) -> None:
        """``party`` waits for its turn: until position ``after`` is recorded."""
        self._waiting[party] = after

    def waited(self, party: Any) -> None:
        """``party`` no longer waits for its turn."""
        self._waiting.pop(party, None)

    def nobody_else(self, me: Any, position: int) -> bool:
        """Whether nothing but ``me`` could record the run's next events (a deadlock).

        ``position`` is the run's last recorded position: a party whose turn it is will move on
        (it may not have woken yet). Call with the turn lock held, so that the parties waiting
        for their turn stay so while they are looked at.
        """
        waiting = dict(self._waiting)
        if any(after <= position for party, after in waiting.items() if party is not me):
            return False
        with self._adding:
            parties = list(self.parties)
        for party in parties:
            if party is me or party in waiting:
                continue
            if isinstance(party, asyncio.Task) and not party.done():
                return False
        marks = self._stuck_threads(me, waiting)
        if marks is None:
            self._seen = None
            return False
        if not marks:
            return True  # every thread waits for its turn or has ended: nothing to confirm
        seen, now = (position, marks), time.monotonic()
        if self._seen is None or self._seen[0] != seen:
            self._seen = (seen, now)
            return False
        return now - self._seen[1] >= CONFIRM_S

    def _stuck_threads(self, me: Any, waiting: dict[Any, int]) -> frozenset[Mark] | None:
        """The marks of the threads judged stuck from their stacks; None if one may still work."""
        threads, running = self._participating(me)
        joinable = set(threads)
        if me is threading.current_thread():
            joinable.add(threading.get_ident())  # the waiter: it waits for its turn
        marks: set[Mark] = set()
        for ident, (thread, frame) in threads.items():
            if thread in waiting:
                continue
            state = _state(frame)
            if isinstance(state, _Idle):
                stuck = state.queue.empty()
            elif isinstance(state, _Joins):
                stuck = state.thread.is_alive() and (state.thread.ident or 0) in joinable
            elif isinstance(state, _Waits):
                stuck = _cannot_finish(state, running)
            else:
                stuck = False
            if not stuck:
                return None
            marks.add((ident, id(frame), frame.f_lasti))
        return frozenset(marks)

    def _participating(
        self, me: Any
    ) -> tuple[dict[int, tuple[threading.Thread, FrameType]], set[Future[Any]]]:
        """The participating threads, and the futures whose work they run.

        The threads are by ident, with their innermost frames, the current one left out (it is
        the waiter, or a task's loop); the futures include those of the current thread.
        """
        frames = sys._current_frames()
        current = threading.current_thread()
        before = self._before if self._before is not None else weakref.WeakSet()
        threads: dict[int, tuple[threading.Thread, FrameType]] = {}
        running: set[Future[Any]] = set()
        for thread in threading.enumerate():
            frame = frames.get(thread.ident) if thread.ident is not None else None
            if frame is None or not thread.is_alive() or (thread is current and me is not current):
                continue  # ended, or the loop of a task (its tasks are judged as tasks)
            stack = list(_stack(frame))
            if thread not in self.parties and thread in before and not _pool_worker(stack):
                continue  # not the function's (see the module doc)
            running.update(_running(stack))
            if thread is not current:
                threads[thread.ident or 0] = (thread, frame)
        return threads, running


def _stack(frame: FrameType | None) -> Iterator[FrameType]:
    """A thread's frames, innermost first."""
    while frame is not None:
        yield frame
        frame = frame.f_back


def _pool_worker(stack: list[FrameType]) -> bool:
    """Whether the thread is a `ThreadPoolExecutor`'s worker (its outermost frames say so)."""
    return any(f.f_code.co_filename == _POOL and f.f_code.co_name == "_worker" for f in stack)


def _running(stack: list[FrameType]) -> Iterator[Future[Any]]:
    """The futures whose work items the thread is running (a pool worker's ``_WorkItem.run``)."""
    for frame in stack:
        if frame.f_code.co_filename == _POOL and frame.f_code.co_name == "run":
            future = getattr(frame.f_locals.get("self"), "future", None)
            if isinstance(future, Future):
                yield future


def _state(innermost: FrameType) -> _Idle | _Joins | _Waits | None:
    """What a thread waits for, read from its stack; None: it may be at work."""
    frame = innermost
    while (
        frame.f_code.co_filename == _THREADING
        and frame.f_code.co_name in _BLOCKING
        and frame.f_back is not None
    ):
        frame = frame.f_back
    code, local = frame.f_code, frame.f_locals
    if code.co_filename == _THREADING and code.co_name == "join":
        target = local.get("self")
        if isinstance(target, threading.Thread) and local.get("timeout") is None:
            return _Joins(target)
    elif code.co_filename == _FUTURES and local.get("timeout") is None:
        if code.co_name in ("result", "exception") and isinstance(local.get("self"), Future):
            return _Waits((local["self"],), every=False)
        if code.co_name == "wait":
            every = local.get("return_when") == concurrent.futures.ALL_COMPLETED
            return _Waits(_futures(local.get("fs")), every=every)
        if code.co_name == "as_completed":
            return _Waits(_futures(local.get("pending")), every=False)
    elif (
        frame is innermost
        and code.co_filename == _POOL
        and code.co_name == "_worker"
        and "work_item" not in local
        and hasattr(local.get("work_queue"), "empty")
    ):
        return _Idle(local["work_queue"])
    return None


def _futures(value: object) -> tuple[Future[Any], ...]:
    """The futures in a waiting frame's collection (none when it is not one of futures)."""
    if not isinstance(value, set | frozenset | list | tuple):
        return ()
    found = tuple(f for f in value if isinstance(f, Future))
    return found if len(found) == len(value) else ()


def _cannot_finish(wait: _Waits, running: set[Future[Any]]) -> bool:
    """Whether a wait on futures can only end when participating threads move on.

    A future run by a participating thread finishes only when that thread moves on (it is judged
    on its own); a finished future ends the wait (or will), one nobody known runs may finish.
    """
    if not wait.futures:
        return False
    open_ = [f for f in wait.futures if not f.done()]
    held = [f for f in open_ if f in running]
    if wait.every:
        return bool(held)
    return len(held) == len(wait.futures)
