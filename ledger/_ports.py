"""The clock and id ports: the one place that reads the wall clock and the OS random source.

Everything non-deterministic enters a run through a port; these two are the ledger's. Replay and
tests swap in `StepClock` and `SequentialIds` (agentledger.ledger.testing re-exports them).
Timestamps are RFC 3339 UTC with microseconds, e.g. ``2026-01-02T03:04:05.000006Z``.
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
import time
import uuid
from typing import Protocol

__all__ = [
    "Clock",
    "IdSource",
    "RandomIds",
    "SequentialIds",
    "StepClock",
    "SystemClock",
    "format_timestamp",
    "parse_timestamp",
]


def format_timestamp(moment: _dt.datetime) -> str:
    """Format an aware datetime as RFC 3339 UTC with microseconds."""
    if moment.tzinfo is None:
        msg = "timestamps must be timezone-aware"
        raise ValueError(msg)
    return moment.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str) -> _dt.datetime:
    """Parse an RFC 3339 timestamp (as written by `format_timestamp`) to an aware datetime."""
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class Clock(Protocol):
    """Tells the time as an RFC 3339 UTC string."""

    def now(self) -> str:
        """Return the current time."""
        ...


class IdSource(Protocol):
    """Makes new unique ids."""

    def new_id(self) -> str:
        """Return a new 32-hex-digit id."""
        ...

    def new_run_id(self) -> str:
        """Return a new run id (a canonical UUID string)."""
        ...


class SystemClock:
    """The wall clock (the only reader of the system's time of day in the project)."""

    def __init__(self) -> None:
        self._second: tuple[int, str] = (-1, "")  # a second, and its text up to the fraction

    def now(self) -> str:
        """Return the current UTC time (every event of a commit reads it: a few µs each)."""
        return self.format_ns(time.time_ns())

    def format_ns(self, ns: int) -> str:
        """``ns`` nanoseconds after the epoch as `format_timestamp` writes it (microseconds).

        The text up to the second's fraction is kept for the next call in the same second.
        """
        seconds, micro = divmod(ns // 1000, 1_000_000)
        cached = self._second
        if cached[0] != seconds:
            text = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(seconds))
            cached = self._second = (seconds, text)
        return f"{cached[1]}{micro:06d}Z"


class _Entropy(threading.local):
    """Per thread: random bytes from the OS, fetched `_ENTROPY_BYTES` at a time."""

    def __init__(self) -> None:
        self.buffer = b""
        self.used = 0
        self.generation = -1


_ENTROPY_BYTES = 4096
"""256 ids per read of the OS's random source: a read releases the GIL, and a thread that
records events must not wait to get it back once an event."""
_FORKS = [0]
"""Bumped in a forked child, whose copy of a buffer its parent goes on using: refilled there."""
os.register_at_fork(after_in_child=lambda: _FORKS.__setitem__(0, _FORKS[0] + 1))


class RandomIds:
    """Random ids from the OS (the only caller of `uuid.uuid4` in the project)."""

    def __init__(self) -> None:
        self._entropy = _Entropy()

    def new_id(self) -> str:
        """Return a random 32-hex-digit id."""
        entropy = self._entropy
        if entropy.used + 16 > len(entropy.buffer) or entropy.generation != _FORKS[0]:
            entropy.buffer, entropy.used = os.urandom(_ENTROPY_BYTES), 0
            entropy.generation = _FORKS[0]
        start = entropy.used
        entropy.used = start + 16
        return entropy.buffer[start : start + 16].hex()

    def new_run_id(self) -> str:
        """Return a random run id."""
        return str(uuid.uuid4())  # noqa: TID251 - this is the id port


class StepClock:
    """A deterministic clock: starts at `start` and advances `step_us` microseconds per read."""

    def __init__(self, start: str = "2026-01-01T00:00:00.000000Z", step_us: int = 1000) -> None:
        self._moment = parse_timestamp(start)
        self._step = _dt.timedelta(microseconds=step_us)

    def now(self) -> str:
        """Return the current fake time, then advance it."""
        text = format_timestamp(self._moment)
        self._moment += self._step
        return text


class SequentialIds:
    """Deterministic ids derived from a seed string and a counter."""

    def __init__(self, seed: str = "agentledger") -> None:
        self._namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"agentledger:{seed}")
        self._count = 0

    def new_id(self) -> str:
        """Return the next id."""
        self._count += 1
        return uuid.uuid5(self._namespace, str(self._count)).hex

    def new_run_id(self) -> str:
        """Return the next run id."""
        self._count += 1
        return str(uuid.uuid5(self._namespace, f"run:{self._count}"))
