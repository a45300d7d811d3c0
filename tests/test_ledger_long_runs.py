"""Long runs: exact conversation chains at a cost per new message; bounded memory; paged reads.

A read-only message (what agents hand the recorder) is compared by identity; a plain dict is
copied, so a caller changing its dicts later is recorded as it sent them; a refused call leaves
the stored chain as it was. A recorder keeps only its recent events; `Ledger.iter_events` and
export read a run a page at a time with the same result. Runs on memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from agentledger.ledger import (
    InvalidEventError,
    Ledger,
    LedgerError,
    UnknownRunError,
    UsageError,
)
from agentledger.ledger._recording import RECENT_EVENTS


def _heads(ledger: Ledger, run_id: str) -> list[str]:
    return [r.payload["messages_ref"] for r in ledger.events(run_id) if r.kind == "ModelCalled"]


def test_read_only_messages_are_recorded_like_plain_dicts(ledger: Ledger) -> None:
    """The same conversation as MappingProxyType views and as dicts gives the same refs."""
    turns = [{"role": "user", "content": f"question {i}"} for i in range(6)]
    heads: list[list[str]] = []
    for wrap in (dict, MappingProxyType):
        history: list[Any] = []
        with ledger.record_run("chat") as run:
            for turn in turns:
                history.append(wrap(turn))
                run.model_call(provider="p", model="m", messages=list(history))
        heads.append(_heads(ledger, run.run_id))
    assert heads[0] == heads[1]
    assert ledger.conversation(heads[1][-1]) == turns


def test_a_dict_changed_after_a_call_is_recorded_as_sent(ledger: Ledger) -> None:
    """Changing a sent message in place shows in the next call's history, not in the last one's."""
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    with ledger.record_run("chat") as run:
        run.model_call(provider="p", model="m", messages=history)
        history[0]["content"] = "be thorough"
        history.append({"role": "user", "content": "again"})
        run.model_call(provider="p", model="m", messages=history)
    first, second = _heads(ledger, run.run_id)
    assert ledger.conversation(first)[0]["content"] == "be brief"
    assert ledger.conversation(second) == history


def test_a_refused_call_leaves_the_stored_chain_as_it_was(ledger: Ledger) -> None:
    """After a refused call that grew or forked the history, the same history is stored whole."""
    a, b, c = ({"role": "user", "content": text} for text in "abc")
    with ledger.record_run("chat") as run:
        run.model_call(provider="p", model="m", messages=[a, b])
        for refused in ([a, b, c], [a, c]):  # grows the chain in place; forks it into new lists
            with pytest.raises(InvalidEventError):
                run.model_call(provider="p", model="m", messages=refused, usage={"tokens": 1})
            run.model_call(provider="p", model="m", messages=refused)
    heads = _heads(ledger, run.run_id)
    assert [ledger.conversation(head) for head in heads] == [[a, b], [a, b, c], [a, c]]
    assert ledger.blob(heads[1])["parent_ref"] == heads[0]
    assert ledger.verify().ok


def test_a_recorder_keeps_only_its_recent_events(ledger: Ledger) -> None:
    """A long run's recorder holds its last RECENT_EVENTS events; the ledger holds them all."""
    with ledger.record_run("long") as run:
        for step in range(RECENT_EVENTS + 50):
            run.delta({"step": step})
        kept = run.recent_events()
        assert len(kept) == RECENT_EVENTS
        assert kept[-1] == run.last_recorded
        assert [r.position for r in run.recent_events(after=run.position - 3)] == [
            run.position - 2,
            run.position - 1,
            run.position,
        ]
    assert kept == ledger.events(run.run_id)[-RECENT_EVENTS - 1 : -1]


def test_recorded_is_deprecated_and_names_what_to_use(ledger: Ledger) -> None:
    """`RunRecorder.recorded` still answers (the recent events) with a DeprecationWarning."""
    with ledger.record_run("old-style") as run:
        run.delta({"a": 1})
        with pytest.warns(DeprecationWarning, match=r"recent_events\(\)"):
            events = run.recorded
    assert [r.kind for r in events] == ["RunStarted", "DeltaApplied"]


def test_iter_events_reads_a_run_page_by_page(ledger: Ledger) -> None:
    """Pages of 3 give the same events as one read, across ranges that split pages."""
    with ledger.record_run("paged") as run:
        for step in range(10):
            run.delta({"step": step})
    whole = ledger.events(run.run_id)
    assert len(whole) == 12
    assert list(ledger.iter_events(run.run_id, page_size=3)) == whole
    assert list(ledger.iter_events(run.run_id, after=4, upto=10, page_size=3)) == whole[4:10]
    assert list(ledger.iter_events(run.run_id, after=12, page_size=3)) == []
    ledger.page_size = 5
    assert list(ledger.iter_events(run.run_id)) == whole


def test_events_of_some_kinds_leave_the_others_out(ledger: Ledger) -> None:
    """`kinds` keeps the events of those kinds, in position order, within `after` and `upto`."""
    with ledger.record_run("kinds") as run:
        for step in range(3):
            with run.step(f"step {step}"):
                run.delta({"step": step})
    whole = ledger.events(run.run_id)
    deltas = [r for r in whole if r.kind == "DeltaApplied"]
    assert len(deltas) == 3
    assert ledger.events(run.run_id, kinds={"DeltaApplied"}) == deltas
    assert (
        ledger.events(run.run_id, after=deltas[0].position, kinds=("DeltaApplied",)) == (deltas[1:])
    )
    assert (
        ledger.events(run.run_id, upto=deltas[1].position, kinds=["DeltaApplied"]) == (deltas[:2])
    )
    assert ledger.events(run.run_id, kinds=()) == []
    assert ledger.events(run.run_id, kinds=None) == whole


def test_iter_events_refuses_a_bad_page_size_and_an_unknown_run(ledger: Ledger) -> None:
    """A page size below 1 is a usage error; an unknown run is named."""
    with ledger.record_run("paged") as run:
        pass
    with pytest.raises(UsageError, match="page_size must be a positive integer, got 0"):
        next(ledger.iter_events(run.run_id, page_size=0))
    with pytest.raises(UnknownRunError):
        next(ledger.iter_events("00000000-0000-4000-8000-000000000000"))


def test_an_export_larger_than_a_page_is_the_same_file(ledger: Ledger, tmp_path: Path) -> None:
    """Exported a few events and blobs per query, a run's file is byte for byte the same."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "route parcels"}]
    with ledger.record_run("export", input="many pages") as run:
        for turn in range(12):
            history.append({"role": "user", "content": f"stop {turn}"})
            answer = {"role": "assistant", "content": f"eta {turn} min " + "x" * 5000}
            run.model_call(provider="p", model="m", messages=history, response=answer)
            run.tool("lookup", {"stop": turn}, result={"eta": turn})
            history.append(answer)
    folder = tmp_path / "exports"
    folder.mkdir()
    whole, paged = folder / "whole.jsonl", folder / "paged.jsonl"
    lines = ledger.export_run(run.run_id, whole)
    ledger.page_size = 4
    assert ledger.export_run(run.run_id, paged) == lines
    assert paged.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["paged.jsonl", "whole.jsonl"]
    with Ledger.open("memory://") as fresh:
        assert fresh.import_file(paged) == run.run_id
        assert fresh.verify().ok


def test_an_export_that_fails_leaves_the_old_file(ledger: Ledger, tmp_path: Path) -> None:
    """An export refused part way (an unknown checkpoint) keeps the file it would replace."""
    with ledger.record_run("export") as run:
        run.delta({"a": 1})
    folder = tmp_path / "exports"
    folder.mkdir()
    target = folder / "run.jsonl"
    target.write_text("kept\n")
    with pytest.raises(LedgerError):
        ledger.export_run(run.run_id, target, checkpoint="not a checkpoint")
    assert target.read_text() == "kept\n"
    assert [p.name for p in folder.iterdir()] == ["run.jsonl"]


def test_an_export_through_a_symlink_writes_the_file_it_points_to(
    ledger: Ledger, tmp_path: Path
) -> None:
    """The link stays a link; the file behind it holds the export."""
    with ledger.record_run("export") as run:
        run.delta({"a": 1})
    folder = tmp_path / "exports"
    folder.mkdir()
    real, link = folder / "real.jsonl", folder / "link.jsonl"
    real.write_text("old\n")
    link.symlink_to(real)
    lines = ledger.export_run(run.run_id, link)
    assert link.is_symlink()
    assert len(real.read_text().splitlines()) == lines
