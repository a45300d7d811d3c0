"""The id port: random event ids stay unique across threads and forked processes."""

from __future__ import annotations

import datetime as dt
import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.ledger._ports import RandomIds, SystemClock, format_timestamp, parse_timestamp


def test_random_ids_are_unique_within_and_across_threads() -> None:
    """Ids come from a per-thread buffer of OS randomness: none repeats, in any thread."""
    ids = RandomIds()
    seen: list[list[str]] = [[] for _ in range(4)]

    def draw(into: list[str]) -> None:
        into.extend(ids.new_id() for _ in range(1000))  # several refills of the buffer

    threads = [threading.Thread(target=draw, args=(out,)) for out in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [one for out in seen for one in out]
    assert len(set(every)) == len(every) == 4000
    assert all(len(one) == 32 and int(one, 16) >= 0 for one in every)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    """A child forked mid-buffer does not repeat the ids its parent goes on drawing."""
    ids = RandomIds()
    ids.new_id()  # the buffer is filled and partly used before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next ids and leave at once
        os.close(read)
        os.write(write, "".join(ids.new_id() for _ in range(8)).encode())
        os._exit(0)
    os.close(write)
    parent = "".join(ids.new_id() for _ in range(8))
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    assert len(child) == len(parent) == 8 * 32
    assert child != parent


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@given(st.lists(st.integers(0, 253_402_300_799_999_999_999), min_size=1, max_size=8))
def test_the_system_clock_writes_a_moment_as_format_timestamp_does(moments: list[int]) -> None:
    """Nanoseconds since the epoch (to the year 9999) become the same text.

    One clock is reused across seconds: what it keeps of the last second never leaks into
    another.
    """
    clock = SystemClock()
    for ns in sorted(moments) + moments:
        expected = format_timestamp(EPOCH + dt.timedelta(microseconds=ns // 1000))
        assert clock.format_ns(ns) == expected


def test_the_system_clock_tells_the_current_time() -> None:
    """``now`` is RFC 3339 UTC with microseconds, and it is now."""
    before = dt.datetime.now(dt.UTC)  # noqa: TID251 - the reference the clock is checked against
    told = parse_timestamp(SystemClock().now())
    after = dt.datetime.now(dt.UTC)  # noqa: TID251
    assert before - dt.timedelta(milliseconds=1) <= told <= after + dt.timedelta(milliseconds=1)
