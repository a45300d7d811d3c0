"""``agentledger report --cohort``: the cohort diff as one offline HTML page, checked as text.

Cohorts of pipeline runs (tagged v1 and v2, one answer changed, one input only in v2) are
recorded on a SQLite file and on PostgreSQL; the page is parsed with the standard library's
HTML parser: the security policy, no script, one row per input with its changed status or
answer and the command for that pair's side-by-side page, the unpaired run, the aggregates,
recorded markup kept as text, and a run whose index row was edited named as broken (exit 1).
The selections are those of ``diff --cohort``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_diff import QUESTIONS, Book
from test_ledger_derived import Database
from test_report import EVIL, parse


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def cohorts(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Book:
    """A ledger (SQLite file or PostgreSQL) and the CLI over it."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    return Book(url, capsys)


def record_cohorts(book: Book) -> dict[str, list[str]]:
    """v1: three inputs; v2: the same three (the second answered differently) and one more."""
    v1 = [book.run(q, tag="v1") for q in QUESTIONS]
    v2 = [
        book.run(q, tag="v2", answer="Rainy." if q == QUESTIONS[1] else "Sunny.") for q in QUESTIONS
    ]
    v2.append(book.run(EVIL, tag="v2"))
    return {"v1": v1, "v2": v2}


def test_the_cohort_page_shows_each_pair_the_aggregates_and_the_unpaired_run(
    cohorts: Book, tmp_path: Path
) -> None:
    """Written to a file, exit 0 (every run intact); a changed pair names its runs' command."""
    runs = record_cohorts(cohorts)
    out = tmp_path / "cohort.html"
    done = cohorts.cli("report", "--cohort", "--a-tag", "v1", "--b-tag", "v2", "-o", str(out))
    assert done.status == 0, done.err
    html = out.read_text(encoding="utf-8")
    page = parse(html)
    assert "default-src 'none'" in page.csp
    assert page.scripts == []
    assert page.srcs == []
    assert [h for h in page.hrefs if not h.startswith("#")] == []
    assert page.text("cohort-verdict") == "different"
    assert page.text("cohort-a") == "tag=v1"
    assert page.text("cohort-b") == "tag=v2"
    assert "Every chain intact: 7 runs" in page.text("verdict")
    assert [i for i in page.ids if i.startswith("pair-")] == [
        "pair-table",
        "pair-1",
        "pair-2",
        "pair-3",
    ]
    assert page.ids["pair-1"][1]["class"] == "same"
    assert page.ids["pair-2"][1]["class"] == "changed"
    assert f"agentledger report {runs['v1'][1]} --diff {runs['v2'][1]}" in html
    assert f"agentledger report {runs['v1'][0]} --diff" not in html
    assert runs["v2"][3] in html
    assert "answers changed" in html
    assert "1 of 3" in html


def test_recorded_markup_in_an_input_stays_text(cohorts: Book, tmp_path: Path) -> None:
    """An input holding a script tag and entities is escaped, never markup."""
    record_cohorts(cohorts)
    out = tmp_path / "cohort.html"
    done = cohorts.cli("report", "--cohort", "--a-tag", "v2", "--b-tag", "v1", "-o", str(out))
    assert done.status == 0, done.err
    html = out.read_text(encoding="utf-8")
    assert "<script" not in html
    assert "<img" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert parse(html).scripts == []


def test_a_run_with_an_edited_index_row_is_named_broken(cohorts: Book, tmp_path: Path) -> None:
    """Verification finds the edit: the page says BROKEN and names the run; exit 1 like `verify`."""
    runs = record_cohorts(cohorts)
    db = Database(cohorts.url, "sqlite" if cohorts.url.startswith("sqlite") else "postgresql")
    try:
        db.set_index(runs["v2"][0], agent="someone-else")
    finally:
        db.close()
    out = tmp_path / "cohort.html"
    done = cohorts.cli("report", "--cohort", "--a-tag", "v1", "--b-tag", "v2", "-o", str(out))
    assert done.status == 1
    page = parse(out.read_text(encoding="utf-8"))
    assert page.text("verdict").startswith("BROKEN: 1 of 7 runs")
    assert runs["v2"][0] in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cohort", "--a-tag", "v1"], "--cohort needs a selection for B"),
        (["--cohort", "--a-tag", "v1", "--b-tag", "none"], "matches no run"),
        (["--cohort", "--a-prompt", "planner", "--b-tag", "v1"], "expected NAME=VERSION"),
        (["RUN", "--cohort", "--a-tag", "v1", "--b-tag", "v2"], "not RUN, --diff or --checkpoint"),
        ([], "report needs a run"),
    ],
)
def test_cohort_usage_errors_are_exit_2(cohorts: Book, argv: list[str], message: str) -> None:
    """The selections are checked as `diff --cohort` checks them; RUN with --cohort is refused."""
    record_cohorts(cohorts)
    done = cohorts.cli("report", *argv)
    assert done.status == 2
    assert message in done.err
