"""Full-text search over runs: the search table's DDL per database, its rows, and the query.

Owns how a run's text is indexed (its input, its answers, and per model call the request's last
message and the response, each as plain text; blobs resolved through the ledger) and how a
query is read: only its words count (letters and digits), all required in one text, matched as
literal words, so quotes, ``*``, ``-``, ``OR``, ``NEAR`` or ``:`` in a query are never operators and
never errors. SQLite uses an FTS5 table (``unicode61`` words, accents kept), PostgreSQL a GIN
index over ``to_tsvector('simple', body)`` queried with ``plainto_tsquery('simple', ...)``.
Must not write events; the table's columns live in `_rm_schema`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, text
from sqlalchemy.schema import CreateTable

from agentledger.ledger import LedgerError, RecordedEvent
from agentledger.projections._rm_query import RunRow
from agentledger.projections._rm_schema import RUNS, SEARCH
from agentledger.projections.errors import ReadModelOptionError

__all__ = ["SearchHit", "apply_search", "create_search_table", "search_runs", "search_words"]

_WORD = re.compile(r"[^\W_]+")
_SNIPPET_WORDS = 12

Blobs = Callable[[Sequence[str]], dict[str, Any]]
"""Resolves blob refs to their values (those it finds)."""


@dataclass(frozen=True)
class SearchHit:
    """A run a search found, with a snippet of matching text (matches in ``[...]``)."""

    run: RunRow
    snippet: str

    def as_dict(self) -> dict[str, Any]:
        """The run as JSON-ready data, with `snippet` added."""
        return self.run.as_dict() | {"snippet": self.snippet}


def create_search_table(conn: Connection) -> None:
    """Create the search table (and its index) if it does not exist."""
    if conn.dialect.name == "sqlite":
        conn.execute(
            text(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {SEARCH.name} USING fts5("
                "run_id UNINDEXED, position UNINDEXED, part UNINDEXED, source UNINDEXED, body, "
                "tokenize = 'unicode61 remove_diacritics 0')"
            )
        )
        return
    conn.execute(CreateTable(SEARCH, if_not_exists=True))
    conn.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS {SEARCH.name}_body ON {SEARCH.name} "
            "USING GIN (to_tsvector('simple', body))"
        )
    )


def apply_search(conn: Connection, records: Sequence[RecordedEvent], blobs: Blobs) -> None:
    """Write the search rows `records` imply, in `conn`'s transaction."""
    wanted: list[tuple[RecordedEvent, str, Any, str | None]] = []
    for record in records:
        p = record.payload
        if record.kind == "RunStarted":
            wanted.append((record, "input", p.get("input"), p.get("input_ref")))
        elif record.kind == "SynthesisProduced":
            wanted.append((record, "answer", p.get("answer"), p.get("answer_ref")))
        elif record.kind == "ModelCalled":
            wanted.append((record, "message", None, p.get("messages_ref")))
            wanted.append((record, "message", None, p.get("response_ref")))
    refs = [ref for _, _, _, ref in wanted if isinstance(ref, str)]
    found = _resolve(blobs, refs)
    rows: list[dict[str, Any]] = []
    parts: dict[tuple[str, int], int] = {}
    for record, source, value, ref in wanted:
        if source == "message":
            node = found.get(ref) if isinstance(ref, str) else None
            body = _message_text(node.get("message") if isinstance(node, dict) else None)
        else:
            body = _text(found.get(ref) if value is None and isinstance(ref, str) else value)
        if not body.strip():
            continue
        key = (record.run_id, record.position)
        parts[key] = parts.get(key, 0) + 1
        rows.append(
            {
                "run_id": record.run_id,
                "position": record.position,
                "part": parts[key],
                "source": source,
                "body": body,
            }
        )
    if rows:
        conn.execute(SEARCH.insert(), rows)


def _resolve(blobs: Blobs, refs: Sequence[str]) -> dict[str, Any]:
    """The blobs found among `refs` (an unreadable blob indexes nothing; verify names it)."""
    if not refs:
        return {}
    try:
        return blobs(refs)
    except LedgerError:
        found: dict[str, Any] = {}
        for ref in refs:
            try:
                found.update(blobs([ref]))
            except LedgerError:
                continue
        return found


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _message_text(message: Any) -> str:
    """A message's content as text (the text parts of a multi-part content)."""
    if not isinstance(message, dict):
        return _text(message)
    content = message.get("content")
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return _text(content)


def search_words(query: str) -> list[str]:
    """The words a search requires: runs of letters and digits (anything else separates).

    Raises `ReadModelOptionError` for a query without any.
    """
    words = _WORD.findall(query)
    if not words:
        raise ReadModelOptionError("query", f"no words to search for in {query!r}")
    return words


def search_runs(conn: Connection, query: str) -> list[SearchHit]:
    """Every run with a text (input, answer, message) holding all of the query's words.

    Newest first, each with a snippet of its first such text.
    """
    words = search_words(query)
    r = RUNS.c
    if conn.dialect.name == "sqlite":
        match = " ".join(f'"{word}"' for word in words)
        found = conn.execute(
            text(
                f"SELECT s.run_id, snippet({SEARCH.name}, 4, '[', ']', '\u2026', "
                f"{_SNIPPET_WORDS}) AS snippet FROM {SEARCH.name} s JOIN {RUNS.name} r "
                f"ON r.run_id = s.run_id WHERE {SEARCH.name} MATCH :match "
                "ORDER BY r.started_at DESC, r.run_id, s.position, s.part"
            ),
            {"match": match},
        ).all()
    else:
        found = conn.execute(
            text(
                "SELECT s.run_id, ts_headline('simple', s.body, q, "
                f"'StartSel=[, StopSel=], MaxWords={_SNIPPET_WORDS}, MinWords=4') AS snippet "
                f"FROM {SEARCH.name} s JOIN {RUNS.name} r ON r.run_id = s.run_id, "
                "plainto_tsquery('simple', :words) q WHERE to_tsvector('simple', s.body) @@ q "
                "ORDER BY r.started_at DESC, r.run_id, s.position, s.part"
            ),
            {"words": " ".join(words)},
        ).all()
    snippets: dict[str, str] = {}
    for run_id, snippet in found:
        snippets.setdefault(run_id, " ".join(str(snippet).split()))
    if not snippets:
        return []
    rows = {
        row.run_id: RunRow(**row._asdict())
        for row in conn.execute(select(RUNS).where(r.run_id.in_(list(snippets))))
    }
    return [SearchHit(rows[run_id], snippet) for run_id, snippet in snippets.items()]
