"""What an audit of replay and rerun found, each reproduced by a test first, then fixed.

- an annotation appended after RunCompleted made replay call the run unfinished and hid a
  divergence (and annotations broke resume and fork);
- ``rerun --model scripted:NEW.json`` served nothing from the record: the scripted file's name
  was taken as part of every request;
- reruns inherited the parent's tags (cohort diffs by tag mixed v1 and v2) and could not be
  tagged; selections could not filter by status;
- one failing rerun in a batch aborted the rest with a traceback;
- ``runs --prompt planner=v2`` found nothing while ``rerun``/``diff`` accepted the role name;
- a run whose model calls all failed exited 0 with a sorry-answer, and fork/resume failures
  said only "failed".

Storage matters for annotations, tags, statuses and the read model: those tests run on SQLite
and PostgreSQL (marked ``postgres``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli_edges import Cli
from test_replay_core import _copy_prefix
from test_replay_resume import remaining_models

from agentledger.agents import AgentRunError, run_agent
from agentledger.agents.models import ModelCallError, ModelRequest, ModelResponse, ScriptedModel
from agentledger.agents.models import _registry as model_registry
from agentledger.agents.models.openai import OpenAIChatModel
from agentledger.agents.testing import load_scenario
from agentledger.cli import _replay_commands as replay_commands
from agentledger.cli import _run_command as run_command
from agentledger.cli import main
from agentledger.ledger import Ledger, RunRecorder, StepClock
from agentledger.projections import ReadModelProjector
from agentledger.replay import (
    NotResumableError,
    Overrides,
    ReplayUsageError,
    fork_run,
    replay_run,
    rerun,
    rerun_many,
    resume_run,
    run_problem,
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    """A fresh ledger URL on SQLite and on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def book(url: str) -> Iterator[Ledger]:
    """An open ledger on each storage backend."""
    with Ledger.open(url) as opened:
        yield opened


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """The CLI, in-process, never printing a traceback."""
    return Cli(capsys)


def record_demo(
    ledger: Ledger,
    tags: tuple[str, ...] = (),
    *,
    planner: str = "v1",
    drop_synthesis: bool = False,
) -> str:
    """One run of the bundled demo scenario (its synthesizer scripted with nothing: it fails)."""
    scenario = load_scenario()
    models = dict(scenario.models)
    if drop_synthesis:
        models["synthesizer"] = ScriptedModel([], name="scripted:demo_pipeline:synthesizer")
    config = scenario.config.model_copy(update={"prompt_versions": {"planner": planner}})
    try:
        result = run_agent(
            ledger, scenario.agent, scenario.question, models=models, config=config, tags=tags
        )
    except AgentRunError as error:
        return error.run_id
    return result.run_id


def positions(ledger: Ledger, run_id: str, kind: str, **match: Any) -> list[int]:
    """Positions of the run's events of ``kind`` whose payload has ``match``."""
    return [
        e.position
        for e in ledger.events(run_id)
        if e.kind == kind and all(e.payload.get(k) == v for k, v in match.items())
    ]


def without_synthesis(ledger: Ledger) -> str:
    """A finished run whose record stops before the synthesizer's call (its code made one fewer).

    Replaying it calls the synthesizer once more than recorded: a divergence.
    """
    run_id = record_demo(ledger)
    cut = positions(ledger, run_id, "ModelCalled", actor="synthesizer")[0] - 1
    copy_id = _copy_prefix(ledger, run_id, ledger, cut)
    RunRecorder(ledger, ledger.load(copy_id)).complete()
    return copy_id


def planner_answer(ledger: Ledger, run_id: str) -> str:
    """The text the planner answered in a run (a script answering it again)."""
    (call,) = [
        e.payload
        for e in ledger.events(run_id)
        if e.kind == "ModelCalled" and e.payload["actor"] == "planner"
    ]
    return str(ledger.blob(call["response_ref"])["message"]["content"])


def script(path: Path, answers: list[Any]) -> str:
    """A ``scripted:FILE`` spec for a JSON file holding ``answers``."""
    path.write_text(json.dumps(answers), encoding="utf-8")
    return f"scripted:{path}"


# 1. Annotations do not change the verdict --------------------------------------------------------


def test_an_annotated_finished_run_replays_as_finished_and_identical(book: Ledger) -> None:
    """A note after RunCompleted is not an event the run made: replay compares the run's own."""
    run_id = record_demo(book)
    recorded = len(book.events(run_id))
    book.annotate(run_id, author="alice", note="checked the answer")
    result = replay_run(book, run_id)
    assert (result.identical, result.finished, result.events) == (True, True, recorded)


def test_an_annotation_after_the_end_does_not_hide_a_divergence(book: Ledger) -> None:
    """A replay calling a model more often than recorded diverges, annotated or not."""
    run_id = without_synthesis(book)
    before = replay_run(book, run_id, raise_on_divergence=False)
    assert before.divergence is not None
    assert "more times than recorded" in before.divergence.summary()
    book.annotate(run_id, author="alice", note="looks fine")
    book.annotate(run_id, author="bob", note="agreed")
    after = replay_run(book, run_id, raise_on_divergence=False)
    assert (after.identical, after.finished) == (False, True)
    assert after.divergence == before.divergence


def test_a_crashed_run_annotated_mid_way_resumes_forks_and_replays(book: Ledger) -> None:
    """A note after the last event of a crashed run: resume skips it, positions stay aligned."""
    original = record_demo(book)
    cut = positions(book, original, "StepCompleted")[1]
    run_id = _copy_prefix(book, original, book, cut)
    note = book.annotate(run_id, author="ops", note="the process died here").position
    resumed = resume_run(book, run_id, models=remaining_models(book, run_id))
    assert resumed.status == "completed", resumed
    events = book.events(run_id)
    assert events[note - 1].kind == "RunAnnotated"
    assert [e.kind for e in events if e.kind != "RunAnnotated"] == [
        e.kind for e in book.events(original)
    ]
    assert book.verify(run_id).problems == []
    assert replay_run(book, run_id).identical
    at = positions(book, run_id, "SynthesisProduced")[0]
    fork = fork_run(book, run_id, at, models={"default": ScriptedModel([])})
    assert fork.status == "completed"
    copied = book.events(fork.run_id)
    assert [e.payload for e in copied[1:at]] == [e.payload for e in events[1:at]]
    assert replay_run(book, fork.run_id).identical
    assert book.verify().problems == []


def test_resume_and_fork_read_the_end_of_an_annotated_run(book: Ledger) -> None:
    """A finished run stays finished after a note; a fork cannot start at its last event."""
    run_id = record_demo(book)
    last = len(book.events(run_id))
    book.annotate(run_id, author="alice", note="fine")
    with pytest.raises(NotResumableError, match=r"already ended \(RunCompleted\)"):
        resume_run(book, run_id)
    with pytest.raises(ReplayUsageError, match=f"fork at 1..{last - 1}"):
        fork_run(book, run_id, last, models={"default": ScriptedModel([])})


def test_cli_replay_of_an_annotated_run_says_identical(url: str, cli: Cli) -> None:
    """``annotate`` then ``replay``: identical, not "identical so far (run unfinished)"."""
    with Ledger.open(url) as ledger:
        run_id = record_demo(ledger)
    assert cli("--db", url, "annotate", run_id, "--author", "a", "--note", "ok").status == 0
    out = cli("--db", url, "replay", run_id)
    assert out.status == 0, out
    assert out.out.strip() == f"{run_id}  identical: 30 events"


def test_a_report_duration_ignores_a_later_annotation(url: str, cli: Cli, tmp_path: Path) -> None:
    """The report's duration is the run's, not the time until a note added a year later."""
    with Ledger.open(url, clock=StepClock()) as ledger:
        run_id = record_demo(ledger)
    with Ledger.open(url, clock=StepClock("2027-01-01T00:00:00.000000Z")) as ledger:
        ledger.annotate(run_id, author="a", note="ok")
    page = tmp_path / "run.html"
    assert cli("--db", url, "report", run_id, "-o", str(page)).status == 0
    assert "0.029 s (first to last event)" in page.read_text("utf-8")


# 2. Serving depends on the request, not on a scripted file's name -----------------------------


def test_rerun_with_a_new_script_serves_every_unchanged_request(
    url: str, cli: Cli, tmp_path: Path
) -> None:
    """Only the planner's request changed (v2): it alone goes to NEW.json; four are served."""
    with Ledger.open(url) as ledger:
        run_id = record_demo(ledger)
        answer = planner_answer(ledger, run_id)
    spec = script(tmp_path / "NEW.json", [answer])
    out = cli("--db", url, "rerun", run_id, "--prompt", "planner=v2", "--model", spec)
    assert out.status == 0, out
    assert "4 model calls served from the record, 1 live" in out.err
    new_id = out.out.strip()
    assert cli("--db", url, "replay", new_id).status == 0
    with Ledger.open(url) as ledger:
        live = [
            e.payload
            for e in ledger.events(new_id)
            if e.kind == "ModelCalled" and not e.payload.get("served_from")
        ]
    assert [(c["actor"], c["provider"]) for c in live] == [("planner", "scripted")]


class Renamed:
    """A model answering like ``inner`` under another provider and name (a real model change)."""

    def __init__(self, inner: ScriptedModel, name: str) -> None:
        self._inner = inner
        self.name = name
        self.provider = name.partition(":")[0]

    def complete(self, request: ModelRequest) -> ModelResponse:
        """``inner``'s answer."""
        return self._inner.complete(request)


def test_a_rerun_with_another_real_model_sends_every_request_live() -> None:
    """A real model's name is part of what it is asked: another model answers everything."""
    ledger = Ledger.open("memory://")
    run_id = record_demo(ledger)
    scenario = load_scenario()
    models = {role: Renamed(m, "openai:gpt-4o") for role, m in scenario.models.items()}
    result = rerun(ledger, run_id, Overrides(model="openai:gpt-4o"), models=models)
    assert (result.status, result.served_model_calls, result.live_model_calls) == (
        "completed",
        0,
        5,
    )
    stand_ins = {role: ScriptedModel([], name="scripted:elsewhere.json") for role in models}
    same = rerun(ledger, run_id, Overrides(model="scripted:elsewhere.json"), models=stand_ins)
    assert (same.status, same.served_model_calls, same.live_model_calls) == ("completed", 5, 0)


# 3. Reruns get their own tags; selections filter by status -------------------------------------


def test_reruns_and_forks_carry_new_tags_not_the_parents(
    url: str, cli: Cli, tmp_path: Path
) -> None:
    """``--tag`` selects, ``--new-tag`` tags the new runs; the lineage is the parent link."""
    with Ledger.open(url) as ledger:
        run_id = record_demo(ledger, ("nightly", "v1"))
    out = cli("--db", url, "rerun", "--tag", "nightly", "--new-tag", "v2", "--new-tag", "exp-7")
    assert out.status == 0, out
    new_id = out.out.strip()
    with Ledger.open(url) as ledger:
        info = ledger.run(new_id)
        assert (info.tags, info.parent_run_id) == (("exp-7", "v2"), run_id)
        plain = rerun(ledger, run_id)
        assert ledger.run(plain.run_id).tags == ()
        tagged = rerun(ledger, run_id, tags=["v3"])
        assert ledger.run(tagged.run_id).tags == ("v3",)
    listed = json.loads(cli("--db", url, "runs", "--tag", "v1", "--json").out)
    assert [r["run_id"] for r in listed] == [run_id]
    diff = cli("--db", url, "diff", "--cohort", "--a-tag", "v1", "--b-tag", "v2")
    assert diff.status == 0, diff
    assert "1 input(s) paired, 0 run(s) unpaired" in diff.out
    shown = cli("--db", url, "show", new_id)
    assert f"rerun-of={run_id}" in shown.out.splitlines()[0]
    with Ledger.open(url) as ledger:
        at = positions(ledger, run_id, "StepStarted", name="synthesize")[0] - 1
    answers = script(tmp_path / "fork.json", ["A forked answer."])
    argv = ["--db", url, "fork", run_id, "--at", str(at), "--model", answers]
    forked = cli(*argv, "--new-tag", "what-if")
    assert forked.status == 0, forked
    fork_id = forked.out.strip()
    untagged = cli(*argv).out.strip()
    with Ledger.open(url) as ledger:
        assert ledger.run(fork_id).tags == ("what-if",)
        assert ledger.run(untagged).tags == ()
    assert f"fork-of={run_id}@{at}" in cli("--db", url, "show", fork_id).out.splitlines()[0]


def test_rerun_and_cohort_selections_filter_by_status(url: str, cli: Cli, tmp_path: Path) -> None:
    """``--status failed`` picks the failed runs; completed stays the rerun default."""
    with Ledger.open(url) as ledger:
        done = record_demo(ledger, ("batch",))
        failed = record_demo(ledger, ("batch",), drop_synthesis=True)
        assert (ledger.run(done).status, ledger.run(failed).status) == ("completed", "failed")
        synthesis = ledger.events(done)[positions(ledger, done, "ModelCalled")[-1] - 1]
        answer = ledger.blob(synthesis.payload["response_ref"])["message"]["content"]
    default = cli("--db", url, "rerun", "--tag", "batch", "--json")
    assert [r["parent_run_id"] for r in json.loads(default.out)] == [done]
    spec = script(tmp_path / "synthesis.json", [answer])
    again = cli("--db", url, "rerun", "--tag", "batch", "--status", "failed", "--model", spec)
    assert again.status == 0, again
    assert "4 model calls served from the record, 1 live" in again.err
    retried = again.out.strip()
    both = cli("--db", url, "diff", "--cohort", "--a-run", done, "--b-tag", "batch", "--json")
    assert len(json.loads(both.out)["unpaired"]) == 1
    completed = cli(
        "--db",
        url,
        "diff",
        "--cohort",
        "--a-run",
        done,
        "--b-tag",
        "batch",
        "--b-status",
        "failed",
        "--json",
    )
    pairs = json.loads(completed.out)["pairs"]
    assert [(p["a_run"], p["b_run"]) for p in pairs] == [(done, failed)]
    everywhere = cli(
        "--db", url, "diff", "--cohort", "--a-run", retried, "--b-run", done, "--status", "failed"
    )
    assert everywhere.status == 2
    assert "--status applies to tag, agent and prompt selections" in everywhere.err


def test_rerun_help_describes_new_tag_and_status(capsys: pytest.CaptureFixture[str]) -> None:
    """``rerun --help`` names both options and what they do."""
    with pytest.raises(SystemExit):
        main(["rerun", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--new-tag TAG" in text
    assert "tag the new runs" in text
    assert "--status {completed,failed,running}" in text


# 4. One failing rerun in a batch does not stop the others --------------------------------------


def test_a_failing_rerun_is_reported_and_the_batch_goes_on(
    url: str, cli: Cli, tmp_path: Path
) -> None:
    """Three runs, the script answers one: the second fails, the third cannot start: exit 1."""
    with Ledger.open(url) as ledger:
        first = record_demo(ledger, ("nightly",))
        second = record_demo(ledger, ("nightly",))
        third = run_agent(
            ledger,
            "router",
            "What is 2+3?",
            models={"default": ScriptedModel(['{"route": "direct"}', "5"])},
            tags=["nightly"],
        ).run_id
        answer = planner_answer(ledger, first)
    spec = script(tmp_path / "NEW.json", [answer])
    argv = ["--db", url, "rerun", "--tag", "nightly", "--prompt", "planner=v2", "--model", spec]
    out = cli(*argv)
    assert out.status == 1, out
    assert len(out.out.split()) == 2  # the two new runs, the completed and the failed one
    assert f"rerun of {first}: completed" in out.err
    assert f"rerun of {second}: failed" in out.err
    assert "failed: ScriptExhaustedError: " in out.err
    assert f"rerun of {third}: not rerun: ReplayUsageError: " in out.err
    assert "no such role or prompt" in out.err
    assert out.err.endswith("agentledger: 2 of 3 reruns did not complete\n")
    again = cli(*argv, "--json")
    assert again.status == 1
    results = json.loads(again.out)
    assert [r["status"] for r in results] == ["completed", "failed", "error"]
    assert [r["parent_run_id"] for r in results] == [first, second, third]
    assert results[2]["run_id"] is None
    assert "no such role" in results[2]["error"]


def test_rerun_many_reports_each_failure_and_goes_on(book: Ledger) -> None:
    """The library: a failed rerun has its run and reason; one that cannot start, its reason."""
    ok = record_demo(book)
    seen: list[str] = []
    results = rerun_many(
        book,
        [ok, "no-such-run", ok],
        Overrides(prompt_versions={"planner": "v2"}),
        models={"default": ScriptedModel([planner_answer(book, ok)])},
        progress=lambda _i, _n, r: seen.append(r.status),
    )
    assert [r.status for r in results] == seen == ["completed", "error", "failed"]
    assert results[1].run_id is None
    assert results[1].error is not None
    assert "no-such-run" in results[1].error
    assert results[2].run_id is not None
    assert book.run(results[2].run_id).status == "failed"
    assert results[2].error is not None
    assert results[2].error.startswith("ScriptExhaustedError: ")


# 5. One prompt naming: a role or a prompt name, everywhere --------------------------------------


def test_runs_prompt_accepts_the_role_and_the_prompt_name(url: str, cli: Cli) -> None:
    """``runs --prompt planner=v2`` and ``pipeline.planner=v2`` find the same run."""
    with Ledger.open(url) as ledger:
        record_demo(ledger, planner="v1")
        v2 = record_demo(ledger, planner="v2")
        with ReadModelProjector(ledger) as projector:
            assert [r.run_id for r in projector.runs(prompt=("planner", "v2"))] == [v2]
    for name in ("planner", "pipeline.planner"):
        out = cli("--db", url, "runs", "--prompt", f"{name}=v2", "--json")
        assert [r["run_id"] for r in json.loads(out.out)] == [v2], name
        every = cli("--db", url, "runs", "--prompt", name, "--json")
        assert len(json.loads(every.out)) == 2, name
    for name in ("planner", "pipeline.planner"):
        assert cli("--db", url, "rerun", "--of-prompt", f"{name}=v2", "--json").status == 0
        cohort = cli(
            "--db", url, "diff", "--cohort", "--a-prompt", f"{name}=v1", "--b-prompt", f"{name}=v2"
        )
        assert "1 input(s) paired" in cohort.out, name


def test_run_prompt_accepts_the_prompt_name(url: str, cli: Cli, tmp_path: Path) -> None:
    """``run --prompt pipeline.planner=v2`` runs the planner with v2, as ``planner=v2`` does."""
    with Ledger.open(url) as ledger:
        run_id = record_demo(ledger)
        answers = [
            answer_item(ledger, e.payload) for e in ledger.events(run_id) if e.kind == "ModelCalled"
        ]
    spec = script(tmp_path / "all.json", answers)
    question = "Weather at the harbour?"
    for name in ("pipeline.planner", "planner"):
        out = cli("--db", url, "run", question, "--prompt", f"{name}=v2", "--model", spec)
        assert out.status == 0, out
    ran = cli("--db", url, "runs", "--prompt", "planner=v2", "--json")
    assert len(json.loads(ran.out)) == 2
    wrong = cli("--db", url, "run", question, "--prompt", "nobody=v2", "--model", spec)
    assert wrong.status == 2
    assert "planner (pipeline.planner)" in wrong.err


def answer_item(ledger: Ledger, call: dict[str, Any]) -> Any:
    """A recorded model answer as a script file item."""
    message = ledger.blob(call["response_ref"])["message"]
    calls = [
        {"name": c["name"], "arguments": c["arguments"]} for c in message.get("tool_calls", [])
    ]
    return {"content": message.get("content", ""), "tool_calls": calls}


# 6. A run that could not reach its model says so ------------------------------------------------


def offline_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """``openai:*`` specs build a real OpenAI adapter pointed at a closed port, retrying at once."""

    def build(spec: str, *, base_url: str | None = None) -> Any:
        del base_url
        provider, _, name = spec.partition(":")
        if provider != "openai":
            return original(spec)
        return OpenAIChatModel(
            name, api_key="sk-test", base_url="http://127.0.0.1:9/v1", sleep=lambda _s: None
        )

    original = model_registry.model_from_spec
    monkeypatch.setattr(run_command, "model_from_spec", build)
    monkeypatch.setattr(replay_commands, "model_from_spec", build)


def test_a_run_whose_model_calls_all_failed_exits_1_naming_the_cause(
    sqlite_url: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No network: the run is recorded, its sorry-answer printed, and the exit says why."""
    offline_models(monkeypatch)
    out = cli("--db", sqlite_url, "run", "Weather at the harbour?", "--model", "openai:gpt-4o-mini")
    assert out.status == 1, out
    assert "every model call failed (1 of 1): APIConnectionError" in out.err
    as_json = cli("--db", sqlite_url, "run", "Weather?", "--model", "openai:gpt-4o-mini", "--json")
    assert as_json.status == 1
    result = json.loads(as_json.out)
    assert result["error"].startswith("every model call failed (1 of 1): APIConnectionError")


class Unreachable:
    """A vendor model behind a network that is down: every call fails for good."""

    name = "openai:gpt-4o-mini"
    provider = "openai"

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Fail as an adapter does once its retries ran out."""
        del request
        raise ModelCallError(
            provider="openai",
            model="gpt-4o-mini",
            status_code=None,
            attempts=[],
            retryable=True,
            error_type="APIConnectionError",
            message="Connection error.",
        )


def test_a_rerun_whose_live_calls_all_failed_is_not_ok(
    book: Ledger, url: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rerun completed with an apology: its result and the CLI say every live call failed."""
    run_id = record_demo(book)
    result = rerun(
        book,
        run_id,
        Overrides(prompt_versions={"planner": "v2"}),
        models={"planner": Unreachable()},
    )
    assert (result.status, result.ok, result.live_model_calls) == ("completed", False, 1)
    assert result.error is not None
    assert result.error.startswith("every model call failed (1 of 1): APIConnectionError: ")
    assert run_problem(book, run_id) is None
    assert run_problem(book, result.run_id) == result.error
    offline_models(monkeypatch)
    argv = ["--db", url, "rerun", run_id, "--prompt", "planner=v2"]
    out = cli(*argv, "--model", "planner=openai:gpt-4o-mini")
    assert out.status == 1, out
    assert "  every model call failed (1 of 1): APIConnectionError: " in out.err


def test_fork_and_resume_failures_print_their_reason(url: str, cli: Cli, tmp_path: Path) -> None:
    """A fork or resume whose live model runs out says what stopped it, not just "failed"."""
    with Ledger.open(url) as ledger:
        run_id = record_demo(ledger)
        at = positions(ledger, run_id, "StepStarted", name="synthesize")[0] - 1
        cut = positions(ledger, run_id, "StepCompleted")[1]
        crashed = _copy_prefix(ledger, run_id, ledger, cut)
    empty = script(tmp_path / "empty.json", [])
    fork = cli("--db", url, "fork", run_id, "--at", str(at), "--model", empty)
    assert fork.status == 1
    assert "failed: ScriptExhaustedError: " in fork.err
    resumed = cli("--db", url, "resume", crashed, "--model", empty)
    assert resumed.status == 1
    assert "failed: ScriptExhaustedError: " in resumed.err
