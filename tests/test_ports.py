"""The id port: random event ids stay unique across threads and forked processes."""

from __future__ import annotations

import os
import threading

import pytest

from agentledger.ledger._ports import RandomIds


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
