"""`agentledger diff`: exit statuses like diff(1), text and JSON output, colour, cohorts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentledger.agents import AgentConfig, run_agent
from agentledger.agents.testing import pipeline_script
from agentledger.cli import main
from agentledger.ledger import Ledger

WEATHER = {"place": "Harbour Front", "date": "2026-06-13"}
PLAN = {"steps": [{"goal": "weather", "tool": "weather", "args": WEATHER}]}
QUESTIONS = ("Weather at the harbour?", "Sunny at the harbour?", "Harbour forecast?")


@dataclass
class Output:
    """What one CLI invocation returned and printed."""

    status: int
    out: str
    err: str


@dataclass
class Book:
    """A SQLite ledger file with recorded runs, and the CLI pointed at it."""

    url: str
    capsys: pytest.CaptureFixture[str]

    def run(self, question: str = QUESTIONS[0], *, answer: str = "Sunny.", **kw: str) -> str:
        """Record one pipeline run (tag and planner version from keywords); return its id."""
        models = pipeline_script(plan=PLAN, calls=[("weather", WEATHER)], answer=answer)
        config = AgentConfig(prompt_versions={"planner": kw.get("planner", "v1")})
        tags = [kw["tag"]] if "tag" in kw else []
        with Ledger.open(self.url) as ledger:
            return run_agent(
                ledger, "pipeline", question, models=models, config=config, tags=tags
            ).run_id

    def cli(self, *argv: str) -> Output:
        """Run ``agentledger --db URL ARGV`` in-process."""
        self.capsys.readouterr()
        status = main(["--db", self.url, *argv])
        captured = self.capsys.readouterr()
        return Output(status, captured.out, captured.err)


@pytest.fixture
def book(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Book:
    """An empty SQLite ledger file and the CLI over it."""
    return Book(f"sqlite:///{tmp_path / 'runs.db'}", capsys)


def test_identical_runs_exit_0_and_say_so(book: Book) -> None:
    """Two runs of one script: exit 0, 'no differences'."""
    a, b = book.run(), book.run()
    done = book.cli("diff", a, b)
    assert done.status == 0, done.err
    assert "no differences" in done.out
    assert done.err == ""


def test_different_runs_exit_1_with_the_first_divergence(book: Book) -> None:
    """A different answer: exit 1, the report names the synthesize step first."""
    a, b = book.run(), book.run(answer="Rainy.")
    done = book.cli("diff", a, b)
    assert done.status == 1
    assert "first divergence: step synthesize #1 > model synthesizer #1" in done.out
    assert "-Sunny." in done.out
    assert "+Rainy." in done.out


def test_run_ids_may_be_unique_prefixes(book: Book) -> None:
    """Prefixes resolve like in `show`; an unknown one is exit 2 with a message."""
    a, b = book.run(), book.run()
    assert book.cli("diff", a[:13], b[:13]).status == 0
    missing = book.cli("diff", a, "ffffffff-nope")
    assert missing.status == 2
    assert "no run matches 'ffffffff-nope'" in missing.err


def test_json_output_parses(book: Book) -> None:
    """--json prints the RunDiff as JSON; the exit status still says whether they differ."""
    a, b = book.run(), book.run(answer="Rainy.")
    done = book.cli("diff", a, b, "--json")
    assert done.status == 1
    body = json.loads(done.out)
    assert body["identical"] is False
    assert body["answer"]["b"] == "Rainy."
    assert body["a"]["run_id"] == a


def test_only_changes_leaves_out_unchanged_steps(book: Book) -> None:
    """Without the switch '=' lines appear; with it they do not."""
    a, b = book.run(), book.run(answer="Rainy.")
    full = book.cli("diff", a, b).out
    short = book.cli("diff", a, b, "--only-changes").out
    assert "  = step plan #1" in full
    assert "  = step plan #1" not in short
    assert "  ~ step synthesize #1" in short


def test_colour_follows_the_flag_and_the_stream(book: Book) -> None:
    """Captured output is not a TTY: auto and never print no ANSI codes, always does."""
    a, b = book.run(), book.run(answer="Rainy.")
    assert "\x1b[" not in book.cli("diff", a, b).out
    assert "\x1b[" not in book.cli("diff", a, b, "--color", "never").out
    assert "\x1b[32m" in book.cli("diff", a, b, "--color", "always").out


def test_missing_second_run_is_exit_2(book: Book) -> None:
    """`diff A` alone is a usage error."""
    a = book.run()
    done = book.cli("diff", a)
    assert done.status == 2
    assert "diff needs two runs" in done.err


def test_cohort_by_tag(book: Book) -> None:
    """Three inputs under two tags: one answer changed, exit 1, JSON aggregates."""
    for question in QUESTIONS:
        book.run(question, tag="v1")
    book.run(QUESTIONS[0], tag="v2")
    book.run(QUESTIONS[1], tag="v2", answer="Cloudy.")
    book.run(QUESTIONS[2], tag="v2")
    done = book.cli("diff", "--cohort", "--a-tag", "v1", "--b-tag", "v2")
    assert done.status == 1, done.err
    assert "3 input(s) paired, 0 run(s) unpaired" in done.out
    assert "answers changed: 1 of 3" in done.out
    body = json.loads(book.cli("diff", "--cohort", "--a-tag", "v1", "--b-tag", "v2", "--json").out)
    assert body["aggregate"]["answers_changed"] == 1
    assert len(body["pairs"]) == 3


def test_cohort_by_prompt_version_identical_exits_0(book: Book) -> None:
    """Same scripts under planner v1 and v2 (answers scripted alike): only prompts differ."""
    book.run(QUESTIONS[0])
    book.run(QUESTIONS[0], planner="v2")
    done = book.cli("diff", "--cohort", "--a-prompt", "planner=v1", "--b-prompt", "planner=v2")
    assert done.status == 1
    assert "1 input(s) paired" in done.out
    same = book.cli("diff", "--cohort", "--a-prompt", "planner=v1", "--b-prompt", "planner=v1")
    assert same.status == 0


def test_cohort_usage_errors_are_exit_2(book: Book) -> None:
    """A malformed --a-prompt, a missing side, or run arguments with --cohort: exit 2."""
    book.run(tag="v1")
    bad = book.cli("diff", "--cohort", "--a-prompt", "planner", "--b-tag", "v1")
    assert bad.status == 2
    assert "expected NAME=VERSION" in bad.err
    missing = book.cli("diff", "--cohort", "--a-tag", "v1")
    assert missing.status == 2
    assert "--b-tag" in missing.err
    nothing = book.cli("diff", "--cohort", "--a-tag", "v1", "--b-tag", "none")
    assert nothing.status == 2
    assert "matches no run" in nothing.err


def test_report_diff_renders_the_causal_diff_side_by_side(book: Book, tmp_path: Path) -> None:
    """``report A --diff B`` writes one offline page of both runs and what differs.

    It shows the first divergence, the changed response as a unified diff (escaped) and a row
    per aligned step.
    """
    import html
    import re

    from agentledger.cli._report_assets import CSP

    a, b = book.run(), book.run(answer="Rainy <b>later</b>.")
    out = tmp_path / "diff.html"
    done = book.cli("report", a, "--diff", b[:10], "-o", str(out))
    assert done.status == 0, done.err
    page = out.read_text(encoding="utf-8")
    assert f'content="{html.escape(CSP)}"' in page
    assert "<script" not in page
    assert "http" not in page.replace("http-equiv", "")
    assert '<span id="diff-verdict">different</span>' in page
    assert a in page
    assert b in page
    first = re.search(r'<p id="first-divergence"><a href="#unit-(\d+)">([^<]*)</a>', page)
    assert first is not None
    assert html.unescape(first.group(2)).startswith("step synthesize #1 > model synthesizer #1")
    assert f'id="unit-{first.group(1)}" class="changed first"' in page
    assert '<span class="ins">+Rainy &lt;b&gt;later&lt;/b&gt;.</span>' in page  # escaped
    assert page.count('class="verdict ok"') == 2
    same = book.cli("report", a, "--diff", a)
    assert same.status == 0
    assert '<span id="diff-verdict">identical</span>' in same.out


def test_report_diff_refuses_a_checkpoint(book: Book) -> None:
    """--diff with --checkpoint is a usage error, not a silent ignore."""
    a = book.run()
    done = book.cli("report", a, "--diff", a, "--checkpoint", "x", "--vkey", "k")
    assert done.status == 2
    assert "report --diff takes no --checkpoint" in done.err
