"""Conversation chains are read in one recursive query along the blobs' parent column.

Each node's parent ref is kept in a column of the blobs table (see `agentledger.ledger._chain`),
written with the blob; `Ledger.message_nodes` reads every chain at once with ``WITH RECURSIVE``
and follows the content, so the column decides what is read ahead, never what a chain holds.
Checked here on a SQLite file and the real PostgreSQL (and memory): the result equals the
node-by-node content walk the ledger used before; a ledger written before the column existed
still reads and verifies (read-only, and migrated on open); a tampered column is named by
``verify`` and never followed; a 1,000-node chain reads whole in one query.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ledger_tamper import Database

from agentledger.ledger import ERASED, Ledger, SequentialIds, StepClock
from agentledger.ledger._chain import node_parent

ROOT = b""


def content_walk(ledger: Ledger, heads: list[str]) -> dict[str, list[Any]]:
    """Each chain's messages read node by node from the content (the reader before the column)."""
    out: dict[str, list[Any]] = {}
    for head in heads:
        messages: list[Any] = []
        current: str | None = head
        while current is not None:
            node = ledger.blobs([current])[current]
            if node == ERASED:
                node = {"message": ERASED, "parent_ref": None}
            if node["message"] is not None:
                messages.append(node["message"])
            current = node["parent_ref"]
        out[head] = messages[::-1]
    return out


def message(role: str, index: int) -> dict[str, str]:
    """A message whose text names its place."""
    return {"role": role, "content": f"{role} message {index}: " + "words " * 8}


def record_conversations(ledger: Ledger) -> list[str]:
    """Two runs: one conversation with a fork, one sealed for a subject. Every head's ref."""
    heads: list[str] = []
    with ledger.record_run("talker", input="talk") as run:
        history: list[dict[str, str]] = [{"role": "system", "content": "Be brief."}]
        for turn in range(6):
            history.append(message("user", turn))
            reply = message("assistant", turn)
            call = run.model_call(provider="p", model="m", messages=history, response=reply)
            history.append(reply)
            heads += [call.messages_ref, call.response_ref]
        fork = [*history[:3], message("user", 99)]
        call = run.model_call(provider="p", model="m", messages=fork, response=message("a", 99))
        heads += [call.messages_ref, call.response_ref]
        call = run.model_call(provider="p", model="m", messages=[], response={})
        heads += [call.messages_ref, call.response_ref]
    with ledger.record_run("private", input="hush", subject="alice") as run:
        history = []
        for turn in range(3):
            history.append(message("user", turn))
            call = run.model_call(
                provider="p", model="m", messages=history, response=message("assistant", turn)
            )
            heads += [call.messages_ref, call.response_ref]
            history.append(message("assistant", turn))
    return heads


class Counted:
    """Counts the recorder's chain queries and blob reads while in a ``with`` block."""

    def __init__(self, ledger: Ledger) -> None:
        self.store = ledger.recorder
        self.chains: list[int] = []
        self.blobs: list[int] = []

    def __enter__(self) -> Counted:
        chains, blobs = self.store.get_chains, self.store.get_blobs

        def counted_chains(refs: Any) -> Any:
            found = chains(refs)
            self.chains.append(len(found))
            return found

        def counted_blobs(refs: Any) -> Any:
            self.blobs.append(len(refs))
            return blobs(refs)

        self.store.get_chains, self.store.get_blobs = counted_chains, counted_blobs
        return self

    def __exit__(self, *exc: object) -> None:
        del self.store.get_chains, self.store.get_blobs


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A ledger URL on a database: a SQLite file or PostgreSQL."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def attacker(db_url: str) -> Iterator[Database]:
    """Raw SQL access to the ledger's tables (the tamper tests' attacker)."""
    db = Database(db_url, "sqlite" if db_url.startswith("sqlite") else "postgresql")
    yield db
    db.close()


def parent_columns(db: Database) -> dict[str, bytes | None]:
    """Every blob's parent column, by ref."""
    rows = db.execute("SELECT ref, parent FROM agentledger_blobs")
    return {ref: None if parent is None else bytes(parent) for ref, parent in rows}


def test_chains_read_in_one_query_equal_the_content_walk(ledger: Ledger) -> None:
    """Every head of two runs (a fork, an empty request, a sealed chain) in one query, as before.

    Also once the subject is erased: its chain reads as one erased node, as it did.
    """
    heads = record_conversations(ledger)
    expected = content_walk(ledger, heads)
    with Counted(ledger) as counted:
        found = ledger.conversations(heads)
    assert found == expected
    assert counted.blobs == []
    assert len(counted.chains) == 1
    assert ledger.conversation(heads[-1]) == expected[heads[-1]]
    nodes = ledger.message_nodes(heads)
    assert all(ledger.blobs([ref])[ref] == node for ref, node in nodes.items())

    ledger.erase_subject("alice", reason="request", requested_by="dpo")
    erased = content_walk(ledger, heads)
    assert erased[heads[-1]] == [ERASED]
    assert ledger.conversations(heads) == erased
    assert ledger.verify().ok


def test_the_parent_column_names_each_nodes_parent_and_nothing_else(
    db_url: str, attacker: Database
) -> None:
    """A plain node: its parent's digest, a root empty; a sealed node its inner ref; else NULL."""
    with Ledger.open(db_url) as ledger:
        heads = record_conversations(ledger)
        nodes = ledger.message_nodes(heads)
        sealed = set(ledger.message_nodes(heads[-6:]))
    columns = parent_columns(attacker)
    for ref, node in nodes.items():
        parent = node["parent_ref"]
        if parent is not None:
            assert columns[ref] == bytes.fromhex(parent.removeprefix("sha256:"))
        else:
            assert columns[ref] == (None if ref in sealed else ROOT)
    assert {columns[ref] for ref in set(columns) - set(nodes)} == {None}


def test_the_column_is_read_from_the_content_alone() -> None:
    """`node_parent` reads the ends of canonical bytes; a lookalike inside a string is no node."""
    ref = "sha256:" + "ab" * 32
    assert node_parent(b'{"message":{"a":1},"parent_ref":"' + ref.encode() + b'"}') == b"\xab" * 32
    assert node_parent(b'{"message":null,"parent_ref":null}') == ROOT
    assert node_parent(b'{"message":"x","parent_ref":7}') is None
    assert node_parent(b'{"message":"x","parent_ref":"sha256:00"}') is None
    assert node_parent(b'{"message":"\\",\\"parent_ref\\":null}"}') is None
    assert node_parent(b'["message","parent_ref"]') is None
    assert node_parent(b'{"parent_ref":null}') is None


def older_file(path: Path) -> tuple[str, list[str], dict[str, list[Any]]]:
    """A SQLite ledger as written before the parent column: its URL, heads and chains."""
    url = f"sqlite:///{path}"
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds(url)) as ledger:
        heads = record_conversations(ledger)
        chains = ledger.conversations(heads)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("ALTER TABLE agentledger_blobs DROP COLUMN parent")
    finally:
        conn.close()
    return url, heads, chains


def blob_columns(path: Path) -> list[str]:
    """The blobs table's column names in a SQLite file."""
    conn = sqlite3.connect(path)
    try:
        return [row[1] for row in conn.execute("PRAGMA table_info(agentledger_blobs)")]
    finally:
        conn.close()


def test_an_older_sqlite_file_reads_and_verifies_read_only_unchanged(tmp_path: Path) -> None:
    """Read-only, nothing is migrated: chains read node by node as before, verify passes."""
    url, heads, chains = older_file(tmp_path / "older.db")
    with Ledger.open(url, read_only=True) as ledger:
        assert ledger.conversations(heads) == chains
        assert ledger.verify().ok
    assert "parent" not in blob_columns(tmp_path / "older.db")


def test_an_older_sqlite_file_is_migrated_and_its_old_rows_read_by_content(
    tmp_path: Path,
) -> None:
    """Opening it adds the column (NULL in old rows); an old chain grown by new nodes reads whole.

    The new nodes come in the first query; each old node (NULL column) is read from its content.
    """
    path = tmp_path / "older.db"
    url, heads, chains = older_file(path)
    with Ledger.open(url) as ledger:
        assert blob_columns(path)[-1] == "parent"
        assert set(parent_columns(Database(url, "sqlite")).values()) == {None}
        assert ledger.conversations(heads) == chains
        assert ledger.verify().ok
        with ledger.record_run("talker", input="more") as run:
            history = [{"role": "system", "content": "Be brief."}]
            for turn in range(6):
                history += [message("user", turn), message("assistant", turn)]
            history.append(message("user", 6))
            call = run.model_call(
                provider="p", model="m", messages=history, response=message("assistant", 6)
            )
        with Counted(ledger) as counted:
            grown = ledger.conversation(call.response_ref)
        assert grown == [*history, message("assistant", 6)]
        assert counted.chains[0] == 3  # the two new nodes, and the old node the second names
        assert counted.chains[1:] == [1] * 12  # then one query an old node (12 more), as before
        assert grown == content_walk(ledger, [call.response_ref])[call.response_ref]
        assert ledger.verify().ok
    with Ledger.open(url) as ledger:  # the column is there: no DDL
        assert ledger.conversation(call.response_ref) == grown


@pytest.mark.postgres
def test_an_older_postgresql_schema_is_migrated_and_reads_and_verifies(pg_url: str) -> None:
    """A schema at version 7 (no parent column) gets the column on open; old chains read."""
    with Ledger.open(pg_url) as ledger:
        heads = record_conversations(ledger)
        chains = ledger.conversations(heads)
    db = Database(pg_url, "postgresql")
    try:
        db.execute("ALTER TABLE agentledger_blobs DROP COLUMN parent")
        db.execute("UPDATE agentledger_schema SET version = 7")
        with Ledger.open(pg_url) as ledger:
            assert db.execute("SELECT max(version) FROM agentledger_schema") == [(8,)]
            assert set(parent_columns(db).values()) == {None}
            assert ledger.conversations(heads) == chains
            assert ledger.verify().ok
            with ledger.record_run("talker", input="more") as run:
                call = run.model_call(
                    provider="p",
                    model="m",
                    messages=[{"role": "system", "content": "Be brief."}, message("user", 0)],
                    response=message("assistant", 7),
                )
            assert ledger.conversation(call.response_ref)[-1] == message("assistant", 7)
            assert ledger.verify().ok
    finally:
        db.close()


def tampered(db_url: str, attacker: Database, column: bytes | None, where: str) -> str:
    """Record a conversation, then set one node's parent column; the ref of the node changed.

    ``where`` picks the node: ``middle`` (the fourth of seven nodes) or ``tools`` (a tools list,
    no node at all).
    """
    with Ledger.open(db_url) as ledger, ledger.record_run("talker", input="talk") as run:
        history = [message("user", turn) for turn in range(6)]
        call = run.model_call(
            provider="p",
            model="m",
            messages=history,
            response=message("assistant", 6),
            tools=[{"name": "lookup"}],
        )
        nodes = list(ledger.message_nodes([call.response_ref]))
    ref = nodes[3] if where == "middle" else call.request["tools_ref"]
    assert ref is not None
    attacker.drop_triggers()
    attacker.execute("UPDATE agentledger_blobs SET parent = ? WHERE ref = ?", [column, ref])
    return call.response_ref


@pytest.mark.parametrize(
    ("column", "where", "says"),
    [
        (bytes(32), "middle", "sha256:" + "00" * 32),  # a parent that is not stored
        (ROOT, "middle", "a chain root"),  # cut the chain short
        (None, "tools", None),  # NULL agrees with anything: nothing to report
        (ROOT, "tools", "a chain root"),  # a column on what is no node
    ],
    ids=["absent-parent", "cut-short", "null-on-tools", "root-on-tools"],
)
def test_a_tampered_parent_column_is_named_by_verify_and_never_followed(
    db_url: str, attacker: Database, column: bytes | None, where: str, says: str | None
) -> None:
    """The read still follows the content; verify names the blob as altered, with both sides."""
    head = tampered(db_url, attacker, column, where)
    with Ledger.open(db_url) as ledger:
        expected = content_walk(ledger, [head])[head]
        assert len(expected) == 7
        assert ledger.conversation(head) == expected
        problems = ledger.verify().problems
    if says is None:
        assert problems == []
        return
    [problem] = problems
    assert problem.reason == "blob altered"
    assert f"the parent column says {says}, the content says" in problem.detail


def test_a_parent_column_that_loops_ends_the_query_and_is_named(
    db_url: str, attacker: Database
) -> None:
    """A node whose column names the head (a cycle in the column) reads its chain once."""
    with Ledger.open(db_url) as ledger, ledger.record_run("talker", input="talk") as run:
        history = [message("user", turn) for turn in range(4)]
        call = run.model_call(provider="p", model="m", messages=history, response={})
        nodes = list(ledger.message_nodes([call.response_ref]))
    attacker.drop_triggers()
    attacker.execute(
        "UPDATE agentledger_blobs SET parent = ? WHERE ref = ?",
        [bytes.fromhex(call.response_ref.removeprefix("sha256:")), nodes[-1]],
    )
    with Ledger.open(db_url) as ledger:
        assert ledger.conversation(call.response_ref) == [*history, {}]
        assert [p.reason for p in ledger.verify().problems] == ["blob altered"]


def test_a_thousand_node_chain_reads_whole_in_one_query(ledger: Ledger) -> None:
    """999 messages and the answer: one query, every message in order."""
    history = [message("user" if i % 2 else "assistant", i) for i in range(999)]
    with ledger.record_run("long", input="long") as run:
        call = run.model_call(provider="p", model="m", messages=history, response={"a": 1})
    with Counted(ledger) as counted:
        chain = ledger.conversation(call.response_ref)
    assert chain == [*history, {"a": 1}]
    assert counted.chains == [1000]
    assert counted.blobs == []
    assert ledger.verify().ok
