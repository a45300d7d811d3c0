"""The event log (``Ledger.open(log=EventLogger(...))``, the CLI's ``-v``)."""

from __future__ import annotations

import io

import pytest

from agentledger.ledger import Ledger
from agentledger.ledger._logging import EventLogger


class _ClosedAfter(io.TextIOBase):
    """A stream whose reader goes away after a few lines (``agentledger -v ... | head -3``)."""

    def __init__(self, lines: int) -> None:
        self.lines = lines
        self.written: list[str] = []

    def write(self, text: str) -> int:
        if len(self.written) >= self.lines:
            raise BrokenPipeError(32, "Broken pipe")
        self.written.append(text)
        return len(text)


def test_each_committed_event_is_logged_as_one_line() -> None:
    """One line per appended event, naming its kind and position."""
    stream = io.StringIO()
    with Ledger.open("memory://", log=EventLogger(stream=stream)) as ledger:
        with ledger.record_run("logged", input="q") as run:
            run.answer("a")
        lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert "kind=RunStarted" in lines[0]
    assert "position=3" in lines[2]


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_a_log_whose_reader_went_away_does_not_stop_the_run(url: str, tmp_path: object) -> None:
    """The log is dropped; the run completes, every event is committed and verifies."""
    db = "memory://" if url == "memory://" else f"sqlite:///{tmp_path}/l.db"
    stream = _ClosedAfter(lines=3)
    with Ledger.open(db, log=EventLogger(stream=stream)) as ledger:
        with ledger.record_run("logged", input="q") as run:
            for i in range(10):
                run.delta({"i": i})
            run.answer("ok")
        (info,) = ledger.runs()
        assert info.status == "completed"
        assert info.event_count == 13
        assert ledger.verify().ok
    assert len(stream.written) == 3
