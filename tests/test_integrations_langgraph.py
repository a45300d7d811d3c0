"""The LangGraph checkpointer: conformance, graphs, and its runs as ledger runs.

`LedgerCheckpointSaver` must pass the base capabilities of ``langgraph-checkpoint-conformance``
and every extended one it claims, on memory, SQLite and the real PostgreSQL; a compiled graph
must interrupt, resume and time-travel; and each thread's run must verify, show, fold into a
world state, diff, export and import like any other run, deletions included (tombstones, never
a physical delete).
"""

from __future__ import annotations

import asyncio
import json
import operator
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import EXTENDED_CAPABILITIES
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from agentledger.agents.integrations.langgraph import (
    DELETED_LABEL,
    DELETED_OUTCOME,
    HIDDEN_LABEL,
    TAG,
    LedgerCheckpointSaver,
    thread_run_id,
)
from agentledger.cli import main as cli_main
from agentledger.ledger import Ledger
from agentledger.ledger import _recording as recording
from agentledger.projections import world_state
from agentledger.replay import diff_runs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def saver(ledger: Ledger) -> LedgerCheckpointSaver:
    """A saver on each backend's ledger."""
    return LedgerCheckpointSaver(ledger)


# Conformance ----------------------------------------------------------------------------------


def test_conformance_suite_passes(ledger_url: str) -> None:
    """Every base capability, and every extended one the saver claims, passes the suite."""

    @checkpointer_test(name=f"LedgerCheckpointSaver[{ledger_url.split(':', maxsplit=1)[0]}]")
    async def factory() -> AsyncIterator[LedgerCheckpointSaver]:
        ledger = Ledger.open(ledger_url)
        try:
            yield LedgerCheckpointSaver(ledger)
        finally:
            ledger.close()

    report = asyncio.run(validate(factory))
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    assert report.passed_all(), failures
    claimed = {name for name, r in report.results.items() if r.detected}
    assert {c.value for c in EXTENDED_CAPABILITIES} <= claimed  # all three are implemented
    with Ledger.open(ledger_url) as ledger:
        if ledger.backend != "memory":  # the suite's threads, tombstones and copies verify
            verified = ledger.verify()
            assert verified.ok, verified.problems[:5]
            assert verified.runs_checked > 10


# A graph ------------------------------------------------------------------------------------


class Chat(TypedDict):
    """A graph state: messages as JSON dicts, a counter and an approval."""

    messages: Annotated[list[dict[str, str]], operator.add]
    n: int
    approved: bool | None


def _model(state: Chat) -> dict[str, Any]:
    reply = {"role": "assistant", "content": f"answer {state['n']}"}
    return {"messages": [reply], "n": state["n"] + 1}


def _review(state: Chat) -> dict[str, Any]:
    answer = interrupt({"question": "approve?", "n": state["n"]})
    return {"approved": answer == "yes", "messages": [{"role": "user", "content": answer}]}


def chat_graph(saver: LedgerCheckpointSaver, *, steps: int = 3) -> Any:
    """The graph: ``model`` `steps` times, then ``review``, which interrupts."""
    builder: Any = StateGraph(Chat)
    builder.add_node("model", _model)
    builder.add_node("review", _review)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "review" if s["n"] >= steps else "model")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=saver)


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


FIRST = {"messages": [{"role": "user", "content": "hello"}], "n": 0}


def test_a_graph_interrupts_resumes_and_time_travels(saver: LedgerCheckpointSaver) -> None:
    """As with LangGraph's own savers: interrupt, resume, history, and a fork from the past."""
    graph = chat_graph(saver)
    config = _config("t1")
    paused = graph.invoke(FIRST, config, durability="sync")
    assert paused["__interrupt__"][0].value == {"question": "approve?", "n": 3}
    assert graph.get_state(config).next == ("review",)

    done = graph.invoke(Command(resume="yes"), config, durability="sync")
    assert done["approved"] is True
    assert [m["content"] for m in done["messages"]] == [
        "hello",
        "answer 0",
        "answer 1",
        "answer 2",
        "yes",
    ]
    history = list(graph.get_state_history(config))
    assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]

    past = next(h for h in history if h.metadata["step"] == 1)
    assert past.values["n"] == 1
    forked = graph.update_state(past.config, {"n": 10})
    again = graph.invoke(None, forked, durability="sync")
    assert again["n"] == 10
    assert [m["content"] for m in again["messages"]] == ["hello", "answer 0"]
    assert again["__interrupt__"][0].value["n"] == 10
    # the branch is on the record too: the latest state is the fork's, the old end is kept
    assert graph.get_state(config).values["n"] == 10
    assert any(h.values.get("approved") for h in graph.get_state_history(config))


def test_a_saver_whose_recorder_keeps_one_event_reads_the_rest_from_the_ledger(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorder keeps only its recent events: the saver folds the older ones from the ledger."""
    graph = chat_graph(LedgerCheckpointSaver(ledger))
    graph.invoke(FIRST, _config("kept"), durability="sync")
    whole = graph.invoke(Command(resume="yes"), _config("kept"), durability="sync")
    monkeypatch.setattr(recording, "RECENT_EVENTS", 1)
    graph = chat_graph(LedgerCheckpointSaver(ledger))
    graph.invoke(FIRST, _config("one"), durability="sync")
    done = graph.invoke(Command(resume="yes"), _config("one"), durability="sync")
    assert done == whole
    steps = [
        [h.metadata["step"] for h in graph.get_state_history(_config(t))] for t in ("kept", "one")
    ]
    assert steps[0] == steps[1] == [4, 3, 2, 1, 0, -1]


def test_the_threads_run_verifies_shows_states_diffs_and_exports(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A thread is a run like any other for verify, show, state, diff, export and import."""
    with Ledger.open(sqlite_url) as ledger:
        saver = LedgerCheckpointSaver(ledger)
        graph = chat_graph(saver)
        graph.invoke(FIRST, _config("a"), durability="sync")
        other = {"messages": [{"role": "user", "content": "bonjour"}], "n": 0}
        graph.invoke(other, _config("b"), durability="sync")
        run_a, run_b = saver.run_id("a"), saver.run_id("b")
        assert run_a == thread_run_id("a")
        assert run_b == thread_run_id("b")

        assert ledger.verify().ok
        info = ledger.run(run_a)
        assert (info.agent, info.status, info.tags, info.input_preview) == (
            "langgraph",
            "running",
            (TAG,),
            "a",
        )
        assert world_state(ledger, run_a) == {
            "messages": {
                "000000": {"content": "hello", "role": "user"},
                "000001": {"content": "answer 0", "role": "assistant"},
                "000002": {"content": "answer 1", "role": "assistant"},
                "000003": {"content": "answer 2", "role": "assistant"},
            },
            "n": 3,
        }
        diff = diff_runs(ledger, run_a, run_b)
        assert not diff.identical
        assert diff.world is not None
        assert diff.world.patch == {"messages": {"000000": {"content": "bonjour"}}}

        exported = tmp_path / "a.jsonl"
        ledger.export_run(run_a, exported)

    assert cli_main(["--db", sqlite_url, "show", run_a]) == 0
    shown = capsys.readouterr().out
    assert "checkpoint loop" in shown
    assert "DeltaApplied" in shown
    assert cli_main(["--db", sqlite_url, "state", run_a]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 3
    assert cli_main(["--db", sqlite_url, "verify", run_a]) == 0
    capsys.readouterr()

    with Ledger.open(f"sqlite:///{tmp_path / 'copy.db'}") as elsewhere:
        assert elsewhere.import_file(exported) == run_a
        assert elsewhere.verify().ok
        # the imported thread is readable by a saver on the other ledger
        state = chat_graph(LedgerCheckpointSaver(elsewhere)).get_state(_config("a"))
        assert state.values["n"] == 3
        assert state.next == ("review",)


# Values ---------------------------------------------------------------------------------------


class Odd(TypedDict):
    """Channels of values JSON cannot carry, or merge patches cannot."""

    messages: Annotated[list[Any], add_messages]
    blob: bytes
    pair: tuple[int, int]
    doc: dict[str, Any]
    big: int


def test_values_that_are_not_json_round_trip_and_show_as_views(
    saver: LedgerCheckpointSaver, ledger: Ledger
) -> None:
    """Values come back as from LangGraph's own saver; the world state shows a JSON view."""

    def node(state: Odd) -> dict[str, Any]:
        return {"messages": [AIMessage("hi there", id="a1")], "big": state["big"] + 1}

    builder: Any = StateGraph(Odd)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    given = {
        "messages": [HumanMessage("hello", id="h1")],
        "blob": b"\x00\xff raw",
        "pair": (1, 2),
        "doc": {"note_ref": "not a blob", "empty": None, "deep": {"x": [None, 1.5]}},
        "big": 2**60,
    }
    ours, theirs = builder.compile(checkpointer=saver), builder.compile(InMemorySaver())
    for graph in (ours, theirs):
        graph.invoke(given, _config("odd"), durability="sync")
    state = ours.get_state(_config("odd")).values
    assert state == theirs.get_state(_config("odd")).values
    assert state["blob"] == b"\x00\xff raw"
    assert state["doc"] == given["doc"]
    assert state["big"] == 2**60 + 1
    assert isinstance(state["messages"][1], AIMessage)
    ours_history = [h.values for h in ours.get_state_history(_config("odd"))]
    assert ours_history == [h.values for h in theirs.get_state_history(_config("odd"))]
    assert ledger.verify().ok  # "note_ref" was not taken for a blob reference

    world = world_state(ledger, saver.run_id("odd") or "")
    assert world["messages"]["000001"]["$type"] == "AIMessage"
    assert world["messages"]["000001"]["content"] == "hi there"
    assert world["doc"] == {"note_ref#": "not a blob", "deep": {"x": [None, 1.5]}}
    assert world["pair"] == [1, 2]
    assert world["big"] == str(2**60 + 1)


def test_a_growing_list_stores_each_item_once(saver: LedgerCheckpointSaver, ledger: Ledger) -> None:
    """Appending to a list channel adds its new items, not the whole list, per version."""
    graph = chat_graph(saver, steps=40)
    graph.invoke(FIRST, _config("long"), durability="sync")
    records = ledger.events(saver.run_id("long") or "")
    refs = {
        entry["value_ref"]
        for r in records
        if r.kind == "StepStarted" and isinstance(r.payload.get("args"), dict)
        for entry in r.payload["args"].get("channels", {}).values()
        if "value_ref" in entry
    }
    stored = [
        item["content"]
        for node in ledger.blobs(sorted(refs)).values()
        for item in node.get("items", ())
    ]
    messages = graph.get_state(_config("long")).values["messages"]
    assert sorted(stored) == sorted(m["content"] for m in messages)  # each once
    history = list(graph.get_state_history(_config("long")))
    assert len(history[0].values["messages"]) == 41
    assert [len(h.values.get("messages", [])) for h in history][:3] == [41, 40, 39]


def test_string_versions_come_back_exactly_under_the_default_redaction(ledger: Ledger) -> None:
    """LangGraph's string versions come back exactly: they are stored as numbers.

    ``f"{n:032}.{h:016}"``, as InMemorySaver and SqliteSaver make them: their digits can read as
    a card number, which redaction would replace.
    """
    card_like = "00000000000000000000000000000047.0.4677408879386158"  # Luhn-valid 16 digits
    other = f"{3:032}.{0.5:016}"  # ...03.00000000000000.5
    custom = "00000000000000000000000000000003.0.5"  # not that form: kept as a string
    checkpoint: Any = {
        "v": 4,
        "id": "1f0a0000-0000-6000-8000-000000000001",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"notes": ["x" * 80]},
        "channel_versions": {"notes": card_like, "__start__": other, "custom": custom},
        "versions_seen": {"model": {"notes": card_like}, "__input__": {}},
        "updated_channels": ["notes"],
    }
    config: Any = {"configurable": {"thread_id": "versions", "checkpoint_ns": ""}}
    saver = LedgerCheckpointSaver(ledger)
    saved = saver.put(config, checkpoint, {"source": "input", "step": -1}, {"notes": card_like})
    saver.put_writes(saved, [("notes", ["y"])], "task-1")
    for reader in (saver, LedgerCheckpointSaver(ledger)):
        found = reader.get_tuple(config)
        assert found is not None
        assert found.checkpoint["channel_versions"] == checkpoint["channel_versions"]
        assert found.checkpoint["versions_seen"] == checkpoint["versions_seen"]
        assert found.checkpoint["channel_values"] == {"notes": ["x" * 80]}
        assert found.pending_writes == [("task-1", "notes", ["y"])]
    started = next(
        r for r in ledger.events(saver.run_id("versions") or "") if r.kind == "StepStarted"
    )
    stored = started.payload["args"]["checkpoint"]["channel_versions"]
    assert stored == {"notes": [47, 0.4677408879386158], "__start__": [3, 0.5], "custom": custom}


def test_a_new_savers_history_reads_the_threads_blobs_once(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's history by a new saver reads its events in one query and each blob once."""
    graph = chat_graph(LedgerCheckpointSaver(ledger), steps=30)
    graph.invoke(FIRST, _config("once"), durability="sync")
    asked: list[list[str]] = []
    events: list[int] = []
    blobs, read = Ledger.blobs, Ledger.events

    def counting_blobs(self: Ledger, refs: Any) -> Any:
        asked.append(list(refs))
        return blobs(self, refs)

    def counting_events(self: Ledger, run_id: str, **kwargs: Any) -> Any:
        found = read(self, run_id, **kwargs)
        events.append(len(found))
        return found

    monkeypatch.setattr(Ledger, "blobs", counting_blobs)
    monkeypatch.setattr(Ledger, "events", counting_events)
    history = list(chat_graph(LedgerCheckpointSaver(ledger)).get_state_history(_config("once")))
    assert len(history[0].values["messages"]) == 31
    every = [ref for refs in asked for ref in refs]
    assert len(every) == len(set(every)) >= 30  # the prefixes a list chain adds: read once too
    assert len(asked) <= 2
    assert len(events) == 1


class Notes(TypedDict, total=False):
    """Long values: stored as blobs (a list as a chain of nodes), not in the checkpoint's event."""

    notes: Annotated[list[str], operator.add]
    profile: dict[str, str]


def test_personal_data_in_values_stored_as_blobs_is_redacted(sqlite_url: str) -> None:
    """Blobs hold values redacted as inline ones are, and the redactions are recorded."""
    pad = "x" * 80

    def reply(_state: Notes) -> Notes:
        return {
            "notes": [f"replied to jane.doe@example.com {pad}"],
            "profile": {"mail": "jane.doe@example.com", "pad": pad},
        }

    builder: Any = StateGraph(Notes)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    with Ledger.open(sqlite_url) as ledger:
        saver = LedgerCheckpointSaver(ledger)
        live = builder.compile(checkpointer=saver).invoke(
            {"notes": [f"from jane.doe@example.com {pad}"]}, _config("notes"), durability="sync"
        )
        assert live["notes"][0] == f"from jane.doe@example.com {pad}"  # the live graph keeps it
        again = builder.compile(checkpointer=LedgerCheckpointSaver(ledger))
        state = again.get_state(_config("notes")).values
        assert state["notes"] == [
            f"from [redacted:email] {pad}",
            f"replied to [redacted:email] {pad}",
        ]
        assert state["profile"] == {"mail": "[redacted:email]", "pad": pad}
        run_id = saver.run_id("notes") or ""
        stored = json.dumps([r.payload for r in ledger.events(run_id)])
        refs = {ref for ref in ledger.blobs(_refs_in(stored)) if ref}
        assert "jane.doe" not in json.dumps(list(ledger.blobs(sorted(refs)).values()))
        assert "jane.doe" not in stored
        decided = [r.payload for r in ledger.events(run_id) if r.kind == "PolicyDecided"]
        reasons = [reason for p in decided for reason in p["reasons"]]
        assert "redacted:email at StepStarted.args.channels[0]" in reasons  # a list node
        assert "redacted:email at StepStarted.args.channels.mail" in reasons  # an object
        assert "redacted:email at StepCompleted.output.writes[0]" in reasons  # a write's node
        assert ledger.verify().ok


def _refs_in(text: str) -> list[str]:
    return sorted(set(re.findall(r"sha256:[0-9a-f]{64}", text)))


class Mixed(TypedDict, total=False):
    """A list channel whose items change shape from step to step."""

    items: Annotated[list[Any], operator.add]


MIXED_STEPS: list[list[Any]] = [
    [{"role": "user", "content": "a"}],
    ["plain", 7, None],
    [{"role": "tool", "content": {"rows": [1, 2], "note": "nested"}}],
    [],
    [{"k": 1.5}, [1, [2, 3]]],
]


def test_history_of_a_list_whose_items_change_shape_matches_langgraphs_own_saver(
    saver: LedgerCheckpointSaver,
) -> None:
    """Flat objects, scalars and nested values in one list read back as InMemorySaver gives them.

    Each checkpoint's list is a fresh copy: changing one read (nested values included) changes
    no later read.
    """
    counter = iter(MIXED_STEPS)

    def node(state: Mixed) -> dict[str, Any]:
        del state
        return {"items": next(counter)}

    def builder() -> Any:
        graph: Any = StateGraph(Mixed)
        graph.add_node("node", node)
        graph.add_edge(START, "node")
        graph.add_conditional_edges(
            "node", lambda s: END if len(s["items"]) >= 7 else "node", ["node", END]
        )
        return graph

    ours = builder().compile(checkpointer=saver)
    ours.invoke({"items": []}, _config("mixed"), durability="sync")
    counter = iter(MIXED_STEPS)
    theirs = builder().compile(checkpointer=InMemorySaver())
    theirs.invoke({"items": []}, _config("mixed"), durability="sync")
    expected = [h.values for h in theirs.get_state_history(_config("mixed"))]
    read = [h.values for h in ours.get_state_history(_config("mixed"))]
    assert read == expected
    assert read[0]["items"][4]["content"]["rows"] == [1, 2]
    read[0]["items"][0]["content"] = "changed"
    read[0]["items"][4]["content"]["rows"].append(3)
    assert [h.values for h in ours.get_state_history(_config("mixed"))] == expected


def test_two_tasks_appending_to_one_list_read_back_as_langgraphs_own_saver(
    saver: LedgerCheckpointSaver, ledger: Ledger
) -> None:
    """Two tasks of a superstep append to one list: its next version is neither task's node.

    A task's write is stored as the node its checkpoint's list would gain (reused by the next
    checkpoint when the channel appends just that); with two writers it is a node of its own.
    """
    long = "x" * 80  # a list longer than 64 bytes is stored as a chain of nodes

    def builder() -> Any:
        graph: Any = StateGraph(Mixed)
        for name in ("left", "right"):
            graph.add_node(name, lambda s, n=name: {"items": [f"{n} {len(s['items'])} {long}"]})
            graph.add_edge(START, name)
        graph.add_node("join", lambda _state: {"items": ["joined"]})
        graph.add_edge(["left", "right"], "join")
        graph.add_edge("join", END)
        return graph

    ours = builder().compile(checkpointer=saver)
    ours.invoke({"items": [long]}, _config("fan"), durability="sync")
    theirs = builder().compile(checkpointer=InMemorySaver())
    theirs.invoke({"items": [long]}, _config("fan"), durability="sync")
    expected = [(h.values, h.next) for h in theirs.get_state_history(_config("fan"))]
    assert [(h.values, h.next) for h in ours.get_state_history(_config("fan"))] == expected
    assert expected[0][0]["items"] == [long, f"left 1 {long}", f"right 1 {long}", "joined"]
    fresh = builder().compile(checkpointer=LedgerCheckpointSaver(ledger))
    assert [(h.values, h.next) for h in fresh.get_state_history(_config("fan"))] == expected


class Shouted(TypedDict):
    """A list channel whose reducer changes what a task appends."""

    items: Annotated[list[str], lambda old, new: old + [item.upper() for item in new]]


def test_a_reducer_that_changes_the_appended_items_is_stored_as_its_result(
    saver: LedgerCheckpointSaver,
) -> None:
    """The task wrote ``a``, the list gained ``A``: the checkpoint's node is not the write's."""
    graph: Any = StateGraph(Shouted)
    long = "x" * 80  # a list longer than 64 bytes is stored as a chain of nodes
    graph.add_node("say", lambda state: {"items": [f"item {len(state['items'])} {long}"]})
    graph.add_edge(START, "say")
    graph.add_conditional_edges("say", lambda s: END if len(s["items"]) >= 4 else "say")
    ours = graph.compile(checkpointer=saver)
    done = ours.invoke({"items": [long]}, _config("shout"), durability="sync")
    assert done["items"] == [long.upper()] + [f"ITEM {n} {long.upper()}" for n in (1, 2, 3)]
    again = graph.compile(checkpointer=LedgerCheckpointSaver(saver.ledger))
    assert again.get_state(_config("shout")).values["items"] == done["items"]
    history = [h.values["items"] for h in again.get_state_history(_config("shout"))]
    assert history[:3] == [done["items"], done["items"][:3], done["items"][:2]]


# Deleting is hiding ----------------------------------------------------------------------------


def test_delete_thread_appends_a_tombstone_and_keeps_the_history(
    saver: LedgerCheckpointSaver, ledger: Ledger
) -> None:
    """The thread vanishes for LangGraph; its run is closed, verifiable, and a new one starts."""
    graph = chat_graph(saver)
    graph.invoke(FIRST, _config("gone"), durability="sync")
    run_id = saver.run_id("gone")
    assert run_id is not None
    before = ledger.events(run_id)

    saver.delete_thread("gone")
    assert saver.get_tuple(_config("gone")) is None
    assert list(saver.list(_config("gone"))) == []
    assert saver.run_id("gone") is None
    after = ledger.events(run_id)
    assert [r.hash for r in after[: len(before)]] == [r.hash for r in before]  # appended only
    note, end = after[-2], after[-1]
    assert note.kind == "RunAnnotated"
    assert DELETED_LABEL in note.payload["labels"]
    assert end.kind == "RunCompleted"
    assert end.payload["outcome"] == DELETED_OUTCOME
    assert ledger.verify(run_id).ok

    graph.invoke(FIRST, _config("gone"), durability="sync")  # the same thread id, anew
    assert saver.run_id("gone") == thread_run_id("gone", 1)
    assert len(list(saver.list(_config("gone")))) == 5
    assert ledger.verify().ok


def test_prune_and_delete_for_runs_hide_checkpoints_by_annotation(
    saver: LedgerCheckpointSaver, ledger: Ledger
) -> None:
    """Hidden checkpoints are gone for LangGraph and still in the record."""
    graph = chat_graph(saver)
    lg_run = "5f0c2f3e-0000-4000-8000-000000000001"  # LangGraph's run id, in each metadata
    config = {"configurable": {"thread_id": "p", "run_id": lg_run}}  # into the metadata
    graph.invoke(FIRST, config, durability="sync")
    run_id = saver.run_id("p") or ""
    count = len(ledger.events(run_id))
    saver.prune(["p"], strategy="keep_latest")
    assert len(list(saver.list(_config("p")))) == 1
    notes = [r for r in ledger.events(run_id) if r.kind == "RunAnnotated"]
    assert len(notes) == 4
    assert all(HIDDEN_LABEL in r.payload["labels"] for r in notes)
    assert len(ledger.events(run_id)) == count + 4
    assert ledger.verify(run_id).ok

    latest = saver.get_tuple(_config("p"))
    assert latest is not None
    assert latest.metadata["run_id"] == lg_run
    saver.delete_for_runs([lg_run])
    assert saver.get_tuple(_config("p")) is None
    assert ledger.verify(run_id).ok
    assert LedgerCheckpointSaver(ledger).get_tuple(_config("p")) is None  # read back cold


def test_copy_thread_starts_a_linked_run(saver: LedgerCheckpointSaver, ledger: Ledger) -> None:
    """The copy is a fork of the source's run, with the same checkpoints and state."""
    graph = chat_graph(saver)
    graph.invoke(FIRST, _config("src"), durability="sync")
    saver.copy_thread("src", "dst")
    source, copy = graph.get_state(_config("src")), graph.get_state(_config("dst"))
    assert copy.values == source.values
    assert copy.next == source.next
    info = ledger.run(saver.run_id("dst") or "")
    assert info.parent_run_id == saver.run_id("src")
    assert world_state(ledger, info.run_id) == world_state(ledger, info.parent_run_id or "")
    assert ledger.verify().ok
    done = graph.invoke(Command(resume="no"), _config("dst"), durability="sync")
    assert done["approved"] is False
    assert graph.get_state(_config("src")).next == ("review",)


# Several savers, threads and loops --------------------------------------------------------------


def test_two_savers_on_one_ledger_take_turns(sqlite_url: str) -> None:
    """Like two processes: each sees what the other appended, and a stale one catches up."""
    with Ledger.open(sqlite_url) as one_ledger, Ledger.open(sqlite_url) as other_ledger:
        one, other = LedgerCheckpointSaver(one_ledger), LedgerCheckpointSaver(other_ledger)
        chat_graph(one).invoke(FIRST, _config("shared"), durability="sync")
        graph = chat_graph(other)
        assert graph.get_state(_config("shared")).next == ("review",)
        run_id = other.run_id("shared") or ""
        before = one_ledger.run(run_id).event_count
        graph.invoke(Command(resume="yes"), _config("shared"), durability="sync")
        # `other` read the thread without its world state, then its deltas are patches of it
        patches = [
            r.payload["patch"]
            for r in other_ledger.events(run_id, after=before, kinds={"DeltaApplied"})
        ]
        assert patches
        assert all(set(p.get("messages", {})) <= {"000004"} for p in patches)
        assert world_state(other_ledger, run_id)["messages"]["000004"]["content"] == "yes"
        # `one` still holds its old view of the thread: its next write must land after other's
        stale = chat_graph(one)
        assert stale.get_state(_config("shared")).values["approved"] is True
        stale.update_state(_config("shared"), {"n": 99})
        assert graph.get_state(_config("shared")).values["n"] == 99
        assert one_ledger.verify().ok


def test_racing_writers_on_one_thread_both_land(sqlite_url: str) -> None:
    """Three savers (as three processes) updating one thread at once: lost races are retried."""
    with Ledger.open(sqlite_url) as ledger:
        chat_graph(LedgerCheckpointSaver(ledger)).invoke(FIRST, _config("race"), durability="sync")
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            with Ledger.open(sqlite_url) as own:
                graph = chat_graph(LedgerCheckpointSaver(own))
                for i in range(15):
                    graph.update_state(_config("race"), {"n": offset + i})
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    workers = [threading.Thread(target=writer, args=(k * 100,)) for k in (1, 2, 3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    with Ledger.open(sqlite_url) as ledger:
        saver = LedgerCheckpointSaver(ledger)
        updates = list(saver.list(_config("race"), filter={"source": "update"}))
        assert len(updates) == 45
        assert ledger.verify().ok


def test_async_methods_work_off_the_event_loop(saver: LedgerCheckpointSaver) -> None:
    """``ainvoke`` works, and the saver's ledger I/O runs in worker threads, not on the loop."""
    loop_threads: set[int] = set()
    io_threads: set[int] = set()
    events = saver.ledger.events

    def watched_events(*args: Any, **kwargs: Any) -> Any:
        io_threads.add(threading.get_ident())
        return events(*args, **kwargs)

    saver.ledger.events = watched_events  # type: ignore[method-assign]

    async def run() -> Any:
        loop_threads.add(threading.get_ident())
        graph = chat_graph(saver)
        await graph.ainvoke(FIRST, _config("async"), durability="sync")
        tup = await saver.aget_tuple(_config("async"))
        listed = [t async for t in saver.alist(_config("async"), limit=2)]
        return tup, listed

    tup, listed = asyncio.run(run())
    assert tup is not None
    assert tup.checkpoint["channel_values"]["n"] == 3
    assert len(listed) == 2
    assert io_threads
    assert not (io_threads & loop_threads)


# Packaging -------------------------------------------------------------------------------------


def test_the_core_install_does_not_pull_langgraph() -> None:
    """LangGraph is an extra; the dev extra (CI) installs it and the conformance suite."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any("langgraph" in dep for dep in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(dep.startswith("langgraph>=") for dep in extras["langgraph"])
    assert "agentledger[langgraph]" in extras["dev"]
    assert any(d.startswith("langgraph-checkpoint-conformance") for d in extras["dev"])


BLOCK_LANGGRAPH = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"langgraph", "langchain_core"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
import agentledger.agents
import agentledger.agents.integrations
assert "langgraph" not in sys.modules
import agentledger.agents.integrations.langgraph
"""


def test_without_langgraph_the_import_says_how_to_install_it() -> None:
    """One line naming the extra; the rest of the package imports without LangGraph."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_LANGGRAPH],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT.parent,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "ImportError: LedgerCheckpointSaver needs LangGraph: pip install 'agentledger[langgraph]'"
    )


def test_the_bench_runs_on_a_few_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """bench/bench_langgraph.py measures both savers on the same recorded calls."""
    sys.path.insert(0, str(ROOT))
    try:
        from bench import bench_langgraph
    finally:
        sys.path.remove(str(ROOT))
    monkeypatch.setattr(bench_langgraph, "TMP_ROOT", tmp_path)
    ours, theirs = bench_langgraph.compare(4, langchain=False, repeats=1)
    assert ours.checkpoints == theirs.checkpoints == 6
    assert 0 < ours.bytes_on_disk < theirs.bytes_on_disk * 2


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    before = threading.active_count()
    yield
    assert threading.active_count() <= before + 8
