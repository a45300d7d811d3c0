"""What the first pass over an export file keeps, in a scratch SQLite database: bounded memory.

Per event: its line, where the line is and its hash, the event's stored and recomputed hashes
and kind; per ModelCalled and SynthesisProduced, the refs the conversation checks follow; per
blob (the first line with its ref): where it is, what its value is to those checks (sealed,
text, a conversation node and its parent) and the refs inside it, in order; the refs the events
name, in order of first use; per proof line, where it is. From these it checks what the lines
say together: conversation chains (`check_conversations`) and which blobs the run reaches and
lacks (`blob_problems`), with the messages and in the order that checking the whole file in
memory gave. The database lives in a scratch folder and its page cache is small, so memory does
not grow with the run. Must not read the file or write the ledger.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentledger.ledger._export_lines import Findings
from agentledger.ledger._export_source import Line
from agentledger.ledger._verify import Problem

__all__ = ["EventRow", "ExportIndex"]

EventRow = tuple[int, int, int, int, bytes]
"""An event line as indexed: (position, line number, offset, size, digest)."""

_SCHEMA = """
CREATE TABLE event (position INTEGER PRIMARY KEY, line INTEGER NOT NULL, offset INTEGER NOT NULL,
    size INTEGER NOT NULL, digest BLOB NOT NULL, hash BLOB NOT NULL, kind TEXT NOT NULL,
    recomputed BLOB);
CREATE TABLE call (position INTEGER PRIMARY KEY, line INTEGER NOT NULL, kind TEXT NOT NULL,
    head TEXT, count TEXT, response TEXT, answer TEXT);
CREATE TABLE blob (ref TEXT PRIMARY KEY, line INTEGER NOT NULL, offset INTEGER NOT NULL,
    size INTEGER NOT NULL, digest BLOB NOT NULL, sealed INTEGER NOT NULL, text INTEGER NOT NULL,
    node INTEGER NOT NULL, message INTEGER NOT NULL, parent TEXT);
CREATE TABLE edge (parent TEXT NOT NULL, seq INTEGER NOT NULL, child TEXT NOT NULL,
    PRIMARY KEY (parent, seq)) WITHOUT ROWID;
CREATE TABLE named (seq INTEGER PRIMARY KEY, ref TEXT NOT NULL UNIQUE, position INTEGER NOT NULL);
CREATE TABLE proof (position TEXT PRIMARY KEY, line INTEGER NOT NULL, offset INTEGER NOT NULL,
    size INTEGER NOT NULL, digest BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE chain (ref TEXT PRIMARY KEY, messages INTEGER) WITHOUT ROWID;
CREATE TABLE first_use (ref TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE visited (ref TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE front (seq INTEGER PRIMARY KEY, ref TEXT NOT NULL UNIQUE);
CREATE TABLE todo (seq INTEGER PRIMARY KEY, ref TEXT NOT NULL);
"""
_CACHE_KIB = 4096
"""SQLite's page cache for the scratch database, in KiB."""
_ANY_MISSING = (
    "SELECT EXISTS (SELECT 1 FROM named n "
    "WHERE NOT EXISTS (SELECT 1 FROM blob b WHERE b.ref = n.ref)) "
    "OR EXISTS (SELECT 1 FROM edge e WHERE NOT EXISTS (SELECT 1 FROM blob b WHERE b.ref = e.child))"
)
"""Whether any ref an event or a blob names is not in the file (reached by the run or not)."""
_REACHED = (
    "WITH RECURSIVE reached (ref) AS (SELECT ref FROM named "
    "UNION SELECT e.child FROM reached r JOIN edge e ON e.parent = r.ref) "
    "SELECT count(*) FROM reached"
)
"""How many blobs the run reaches (the refs its events name, and the refs inside those)."""
_BATCH = 1000
"""Rows `add_call` and `add_blob` hold before writing them."""
_MEMO = 4096
"""Chain lengths remembered in memory (a run's calls extend the chains counted lately)."""


class ExportIndex:
    """The scratch database of one export file's first pass (see the module doc)."""

    def __init__(self, folder: Path) -> None:
        self._db = sqlite3.connect(folder / "index.db", isolation_level=None)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", f"cache_size=-{_CACHE_KIB}"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN")  # one transaction throughout: nothing here need survive
        self._calls: list[tuple[Any, ...]] = []
        self._blobs: list[tuple[Any, ...]] = []
        self._edges: list[tuple[str, int, str]] = []
        self._memo: dict[str, int | None] = {}

    def close(self) -> None:
        """Release the database (its folder is the caller's to remove)."""
        self._db.close()

    # The first pass --------------------------------------------------------------------------

    def add_events(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Events: (position, line, offset, size, digest, hash, kind, recomputed hash or None).

        The hashes as their 32 bytes.
        """
        self._db.executemany("INSERT INTO event VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def add_call(self, position: int, line: int, kind: str, payload: Mapping[str, Any]) -> None:
        """What the conversation checks read of a ModelCalled or SynthesisProduced payload."""
        row: tuple[Any, ...]
        if kind == "ModelCalled":
            response = payload.get("response_ref")
            row = (
                payload["messages_ref"],
                json.dumps(payload["message_count"]),
                response if isinstance(response, str) else None,
                None,
            )
        else:
            answer = payload.get("answer_ref")
            row = (None, None, None, answer if isinstance(answer, str) else None)
        self._calls.append((position, line, kind, *row))
        if len(self._calls) >= _BATCH:
            self.flush()

    def add_named(self, refs: Iterable[tuple[str, int]]) -> None:
        """Refs the events name, with the position of each one's first use (later ones ignored)."""
        self._db.executemany("INSERT OR IGNORE INTO named (ref, position) VALUES (?, ?)", refs)

    def add_blob(
        self,
        ref: str,
        line: Line,
        *,
        sealed: bool,
        text: bool,
        node: tuple[bool, str | None] | None,
        refs: list[str],
    ) -> None:
        """A blob line (only the first with its ref is kept).

        `node` is (holds a message, parent ref) for a conversation node; `refs` are the refs
        inside the blob, in order.
        """
        message, parent = node if node is not None else (False, None)
        where = (line.number, line.offset, line.size, line.digest)
        self._blobs.append((ref, *where, sealed, text, node is not None, message, parent))
        self._edges.extend((ref, seq, child) for seq, child in enumerate(refs))
        if len(self._blobs) >= _BATCH:
            self.flush()

    def add_proof(self, position: int, line: Line) -> bool:
        """Index the proof line of `position`; False if one was indexed already."""
        done = self._db.execute(
            "INSERT OR IGNORE INTO proof VALUES (?, ?, ?, ?, ?)",
            (str(position), line.number, line.offset, line.size, line.digest),
        )
        return done.rowcount == 1

    def flush(self) -> None:
        """Write what `add_call` and `add_blob` hold (call it before reading)."""
        db = self._db
        db.executemany("INSERT INTO call VALUES (?, ?, ?, ?, ?, ?, ?)", self._calls)
        db.executemany(
            "INSERT OR IGNORE INTO blob VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", self._blobs
        )
        db.executemany("INSERT OR IGNORE INTO edge VALUES (?, ?, ?)", self._edges)
        self._calls, self._blobs, self._edges = [], [], []

    # What later passes read ------------------------------------------------------------------

    def line_of(self, position: int) -> int | None:
        """The line of the event at `position` (None if the file has no sound event there)."""
        row = self._db.execute("SELECT line FROM event WHERE position = ?", (position,)).fetchone()
        return None if row is None else int(row[0])

    def events(self, after: int = 0) -> Iterator[EventRow]:
        """The events after position `after`, in order: (position, line, offset, size, digest)."""
        yield from self._db.execute(
            "SELECT position, line, offset, size, digest FROM event WHERE position > ? "
            "ORDER BY position",
            (after,),
        )

    def hashes(self) -> Iterator[str]:
        """The events' hashes as the file states them, in position order."""
        for (value,) in self._db.execute("SELECT hash FROM event ORDER BY position"):
            yield bytes(value).hex()

    def recomputed(self) -> Iterator[tuple[int, str]]:
        """(position, hash recomputed from the event's content), in position order."""
        for position, value, stated in self._db.execute(
            "SELECT position, recomputed, hash FROM event ORDER BY position"
        ):
            yield int(position), bytes(value if value is not None else stated).hex()

    def last_kind(self) -> str | None:
        """The kind of the last event (None without events)."""
        row = self._db.execute("SELECT kind FROM event ORDER BY position DESC LIMIT 1").fetchone()
        return None if row is None else str(row[0])

    def origins(self, hashes: Iterable[str]) -> dict[str, int]:
        """Where each of `hashes` is stated (the last position stating it), for those stated."""
        found: dict[str, int] = {}
        for value in hashes:
            row = self._db.execute(
                "SELECT max(position) FROM event WHERE hash = ?", (bytes.fromhex(value),)
            ).fetchone()
            if row[0] is not None:
                found[value] = int(row[0])
        return found

    def blobs(self) -> Iterator[tuple[str, int, int, int, bytes]]:
        """Each blob once, in file order: (ref, line, offset, size, digest)."""
        yield from self._db.execute(
            "SELECT ref, line, offset, size, digest FROM blob ORDER BY rowid"  # as read
        )

    def proofs(self) -> Iterator[tuple[int, int, int, int, bytes]]:
        """Each proof line: (position, line, offset, size, digest)."""
        for key, *where in self._db.execute(
            "SELECT position, line, offset, size, digest FROM proof"
        ):
            yield (int(key), *where)

    def proof(self, position: int) -> tuple[int, int, int, bytes] | None:
        """The proof line of `position`: (line, offset, size, digest), or None."""
        row = self._db.execute(
            "SELECT line, offset, size, digest FROM proof WHERE position = ?", (str(position),)
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), int(row[2]), bytes(row[3]))

    # Checks over the whole file --------------------------------------------------------------

    def check_conversations(self, findings: Findings) -> None:
        """Conversation nodes must be what `Ledger.conversation` and replay read.

        A ModelCalled's ``messages_ref`` heads a chain of ``{"message", "parent_ref"}`` nodes
        holding ``message_count`` messages; its ``response_ref`` is one more node on that chain;
        a SynthesisProduced's ``answer_ref`` holds text. Refs the file lacks are left to verify.
        """
        calls = self._db.execute(
            "SELECT c.position, c.line, c.kind, c.head, c.count, c.response, c.answer "
            "FROM call c ORDER BY c.position"
        )
        for position, number, kind, head, count, response, answer in calls:
            if kind == "ModelCalled":
                self._check_call(
                    findings,
                    position,
                    number,
                    head=head,
                    count=json.loads(count),
                    response=response,
                )
                continue
            found = self._blob(answer) if answer is not None else None
            if found is not None and not found["text"] and not found["sealed"]:
                findings.problem(found["line"], f"blob {answer} holds an answer, so must be text")

    def _check_call(
        self,
        findings: Findings,
        position: int,
        number: int,
        *,
        head: str,
        count: Any,
        response: str | None,
    ) -> None:
        length = self._chain_length(findings, head)
        if length is not None and length != count:
            detail = f"'message_count' is {count}, its chain holds {length}"
            findings.problem(number, f"ModelCalled at position {position}: {detail}")
        found = self._blob(response) if response is not None else None
        if found is None or found["sealed"]:
            return
        if not found["node"] or not found["message"] or found["parent"] != head:
            findings.problem(
                found["line"],
                f"blob {response} is not the response node of the call at position "
                f"{position}: an object with a 'message' and 'parent_ref' {head}",
            )

    def _blob(self, ref: str) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT line, sealed, text, node, message, parent FROM blob WHERE ref = ?", (ref,)
        ).fetchone()
        if row is None:
            return None
        return dict(zip(("line", "sealed", "text", "node", "message", "parent"), row, strict=True))

    def _node(self, ref: str) -> tuple[bool, int | None, dict[str, Any] | None]:
        """(whether the chain from `ref` was counted, its messages, the blob if not counted)."""
        if ref in self._memo:
            return True, self._memo[ref], None
        row = self._db.execute(
            "SELECT c.ref IS NOT NULL, c.messages, b.line, b.sealed, b.text, b.node, b.message, "
            "b.parent, b.ref IS NOT NULL FROM (SELECT ? AS ref) q "
            "LEFT JOIN chain c ON c.ref = q.ref LEFT JOIN blob b ON b.ref = q.ref",
            (ref,),
        ).fetchone()
        if row[0]:
            return True, row[1], None
        if not row[8]:
            return False, None, None
        fields = ("line", "sealed", "text", "node", "message", "parent")
        return False, None, dict(zip(fields, row[2:8], strict=True))

    def _count(self, counts: list[tuple[str, int | None]]) -> None:
        """Remember the chain lengths walked: the latest in memory, all in the database.

        They are written in batches; the memory keeps every one not yet written.
        """
        if len(self._memo) + len(counts) > _MEMO:
            self._db.executemany("INSERT OR REPLACE INTO chain VALUES (?, ?)", self._memo.items())
            self._memo.clear()
        self._memo.update(counts)

    def _chain_length(self, findings: Findings, head: str) -> int | None:
        """How many messages the chain from `head` holds (None if a node is missing or wrong).

        Each chain is walked down to the first node counted before (kept in the database), so a
        run's conversation is walked once however many calls extend it.
        """
        path: list[tuple[str, bool]] = []
        counts: list[tuple[str, int | None]] = []
        ref: str | None = head
        known: int | None = 0
        while ref is not None:
            counted, messages, found = self._node(ref)
            if counted:
                known = messages
                break
            known = None
            counts.append((ref, None))
            if found is None or found["sealed"]:  # missing, or a subject's: opaque here
                break
            if not found["node"]:
                findings.problem(
                    found["line"],
                    f"blob {ref} is not a conversation node: an object with just 'message' (an "
                    "object or null) and 'parent_ref' (a ref or null)",
                )
                break
            counts.pop()
            path.append((ref, bool(found["message"])))
            ref = found["parent"]
        else:
            known = 0
        total = known
        for node_ref, has_message in reversed(path):
            total = None if total is None else total + has_message
            counts.append((node_ref, total))
        self._count(counts)
        return total if path else known

    def blob_problems(self, run_id: str) -> tuple[list[Problem], int]:
        """The blobs the run reaches and the file lacks, as problems; and the blobs checked.

        Walks the refs the events name (in order of first use), then the refs inside those
        blobs, level by level, as `BlobCheck` does over a run held in memory: a missing blob is
        reported once, at the position of its first use (a blob reached only through others
        takes the first use of the one that first reached it). Every blob in the index hashed
        to its ref when read. The count is what `BlobCheck` reports: each blob reached once,
        and those present once more when one is missing (it walks the run again then). A
        file that names no ref it lacks (any honest export) takes one query instead.
        """
        db = self._db
        if not db.execute(_ANY_MISSING).fetchone()[0]:  # nothing to name: count what is reached
            return [], int(db.execute(_REACHED).fetchone()[0])
        db.execute("INSERT INTO first_use SELECT ref, position FROM named ORDER BY seq")
        db.execute("INSERT INTO front (ref) SELECT ref FROM named ORDER BY seq")
        problems: list[Problem] = []
        reported: set[str] = set()
        while True:
            for ref, position in db.execute(
                "SELECT f.ref, u.position FROM front f JOIN first_use u ON u.ref = f.ref "
                "WHERE NOT EXISTS (SELECT 1 FROM blob b WHERE b.ref = f.ref) ORDER BY f.seq"
            ).fetchall():
                if ref not in reported:
                    reported.add(ref)
                    problems.append(Problem(run_id, int(position), "blob missing", ref))
            db.execute("DELETE FROM todo")
            db.execute(
                "INSERT INTO todo (ref) SELECT f.ref FROM front f "
                "WHERE EXISTS (SELECT 1 FROM blob b WHERE b.ref = f.ref) "
                "AND NOT EXISTS (SELECT 1 FROM visited v WHERE v.ref = f.ref) ORDER BY f.seq"
            )
            db.execute("DELETE FROM front")
            if db.execute("SELECT count(*) FROM todo").fetchone()[0] == 0:
                break
            db.execute("INSERT INTO visited SELECT ref FROM todo")
            children = (
                "FROM todo t JOIN edge e ON e.parent = t.ref JOIN first_use u ON u.ref = t.ref "
                "ORDER BY t.seq, e.seq"
            )
            db.execute(f"INSERT OR IGNORE INTO first_use SELECT e.child, u.position {children}")
            db.execute(f"INSERT OR IGNORE INTO front (ref) SELECT e.child {children}")
        present = int(db.execute("SELECT count(*) FROM visited").fetchone()[0])
        checked = present + len(reported) + (present if reported else 0)
        return problems, checked
