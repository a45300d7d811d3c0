"""Full-text search over runs (``runs -q TEXT``), kept by the SQL read model.

Runs are recorded with the recording API; inputs, answers and model messages hold English,
German, French and Russian text and characters that are operators in FTS5 or tsquery syntax.
A query's words are matched literally: quotes, ``OR``, ``NEAR``, ``*``, ``-``, ``:`` and SQL
in a query never change its meaning and never raise a database error. The search table is
caught up, rebuilt and verified with the other read-model tables. Runs on a SQLite file
(FTS5) and on PostgreSQL (tsvector with a GIN index).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from agentledger.cli import main
from agentledger.ledger import Ledger, SequentialIds, StepClock
from agentledger.projections import ReadModelOptionError, ReadModelProjector, verify_read_models
from agentledger.projections._sql import engine_for

TEXTS = [
    ("Is the harbour walk on?", "Zebras graze by the harbour.", "Yes: sunny and 19 C."),
    (
        'Grüße aus Köln: "quoted" OR NEAR(x) -minus *star col:on',
        "Der Dom ist offen.",
        "Ja, the walk is on.",
    ),
    ("Привет мир", "Bonjour, les équidés rayés.", "Answer with a 'single' quote; DROP it"),
]


def record(url: str) -> list[str]:
    """Three runs (oldest first): each input, a model call's response, and an answer."""
    ids = []
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds(url)) as ledger:
        for number, (question, response, answer) in enumerate(TEXTS):
            with ledger.record_run("searcher", input=question, tags=[f"n{number}"]) as run:
                run.model_call(
                    provider="scripted",
                    model="m",
                    messages=[
                        {"role": "system", "content": "Be brief."},
                        {"role": "user", "content": [{"type": "text", "text": question}]},
                    ],
                    response={"role": "assistant", "content": response},
                )
                run.answer(answer)
            ids.append(run.run_id)
    return ids


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A ledger URL on a database: a SQLite file or PostgreSQL."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def found(url: str, query: str, **filters: str) -> list[str]:
    """Run ids a search finds, in its order."""
    with Ledger.open(url) as ledger, ReadModelProjector(ledger) as projector:
        return [hit.run.run_id for hit in projector.search(query, **filters)]


def test_inputs_answers_and_messages_are_found_newest_first(db_url: str) -> None:
    """A word of an input, a response or an answer finds its run; a common word, all runs."""
    ids = record(db_url)
    assert found(db_url, "harbour walk") == [ids[0]]
    assert found(db_url, "Dom offen") == [ids[1]]
    assert found(db_url, "sunny") == [ids[0]]
    assert found(db_url, "zebras HARBOUR") == [ids[0]]
    assert found(db_url, "harbour", tag="n1") == []
    assert found(db_url, "nothing-like-this") == []
    with Ledger.open(db_url) as ledger, ReadModelProjector(ledger) as projector:
        assert [h.run.run_id for h in projector.search("searcher")] == []
        [hit] = projector.search("zebras")
        assert "[Zebras]" in hit.snippet
        assert hit.as_dict()["snippet"] == hit.snippet


def test_non_ascii_words_are_found(db_url: str) -> None:
    """German, French and Russian words match as written, in and out of messages."""
    ids = record(db_url)
    assert found(db_url, "Grüße") == [ids[1]]
    assert found(db_url, "köln") == [ids[1]]
    assert found(db_url, "équidés") == [ids[2]]
    assert found(db_url, "Привет") == [ids[2]]
    assert found(db_url, "equides") == [], "accents are kept: no silent folding"


@pytest.mark.parametrize(
    ("query", "run"),
    [
        ('"quoted" OR NEAR(x)', 1),
        ("-minus", 1),
        ("*star", 1),
        ("col:on", 1),
        ("'single' quote; DROP", 2),
        ("harbour' OR '1'='1", None),
        ("x'); DROP TABLE al_rm_runs; --", None),
        ('harbour"', 0),
        ("NEAR(harbour walk)", None),
    ],
)
def test_operators_and_quotes_in_a_query_are_literal_words(
    db_url: str, query: str, run: int | None
) -> None:
    """Every word must be in one text as written; nothing is an operator or an injection."""
    ids = record(db_url)
    assert found(db_url, query) == ([] if run is None else [ids[run]])
    assert len(found(db_url, "harbour")) == 1, "the tables are intact"


@pytest.mark.parametrize("query", ["", "   ", '"*"', "-", "();:'"])
def test_a_query_without_words_is_refused_clearly(db_url: str, query: str) -> None:
    """Nothing to search for is a usage error naming the query, not a database error."""
    record(db_url)
    with pytest.raises(ReadModelOptionError, match="no words to search for"):
        found(db_url, query)


def test_the_search_table_is_verified_and_rebuilt_with_the_read_models(db_url: str) -> None:
    """``projections verify`` names an edited search row; a rebuild restores it."""
    ids = record(db_url)
    with Ledger.open(db_url) as ledger:
        with ReadModelProjector(ledger) as projector:
            projector.catch_up()
            assert projector.status().rows["al_rm_search"] == 3 * 4
        assert verify_read_models(ledger).ok
        engine = engine_for(ledger)
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE al_rm_search SET body = 'forged words' WHERE run_id = :r"),
                {"r": ids[0]},
            )
        engine.dispose()
        report = verify_read_models(ledger)
        assert not report.ok
        assert {d.table for d in report.differences} == {"al_rm_search"}
        with ReadModelProjector(ledger) as projector:
            assert [h.run.run_id for h in projector.search("forged")] == [ids[0]]
            projector.rebuild()
            assert [h.run.run_id for h in projector.search("forged")] == []
        assert verify_read_models(ledger).ok


def test_runs_q_prints_the_runs_with_snippets(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table of `runs` with a snippet under each run; ``--json`` adds ``snippet``."""
    ids = record(db_url)
    capsys.readouterr()
    assert main(["--db", db_url, "runs", "-q", "harbour"]) == 0
    out, err = capsys.readouterr()
    header, line, snippet = out.splitlines()
    assert header.split()[:3] == ["RUN", "STATUS", "STARTED"]
    assert line.startswith(ids[0])
    assert "[harbour]" in snippet
    assert "not re-verified" in err
    assert main(["--db", db_url, "runs", "--query", "Привет", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["run_id"], row["snippet"]) == (ids[2], "[Привет] мир")
    assert main(["--db", db_url, "runs", "-q", "walk", "--limit", "1"]) == 0
    out, err = capsys.readouterr()
    assert "showing 1 of 2 runs" in err
    assert main(["--db", db_url, "runs", "-q", "*"]) == 2
    assert "no words to search for" in capsys.readouterr().err


def test_runs_q_on_a_read_only_copy_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only file is searched through read models computed in memory; it is unchanged."""
    path = tmp_path / "copy.db"
    ids = record(f"sqlite:///{path}")
    before = path.read_bytes()
    path.chmod(stat.S_IRUSR)
    try:
        capsys.readouterr()
        assert main(["--db", f"sqlite:///{path}", "runs", "-q", "équidés", "--json"]) == 0
        assert [row["run_id"] for row in json.loads(capsys.readouterr().out)] == [ids[2]]
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert path.read_bytes() == before
