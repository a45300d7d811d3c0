"""Long runs: the recorder's conversation chain stays exact while it works per new message only.

A read-only message (what agents hand the recorder) is compared by identity; a plain dict is
copied, so a caller changing its dicts later is recorded as it sent them; a refused call leaves
the stored chain as it was. Runs on memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from agentledger.ledger import InvalidEventError, Ledger


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
