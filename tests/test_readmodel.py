"""SQL read models: rows that match the events, filters, stats by hand, lag, exactly-once batches.

Runs come from the real agents (the bundled pipeline scenario and the tool agent, scripted) and
from the recording API (for numbers chosen by hand). Expected rows are re-derived in the tests
from `Ledger.events`, independently of the projector. Every backend: memory, SQLite, PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from agentledger.agents import run_agent
from agentledger.agents.testing import load_scenario, tool_agent_script
from agentledger.ledger import (
    Ledger,
    RunRecorder,
    SequentialIds,
    StepClock,
    UsageError,
    blob_ref,
    canonical_json,
)
from agentledger.ledger.events import (
    ConfigIdentity,
    ErrorInfo,
    ModelConfig,
    PromptRef,
    ToolErrorInfo,
)
from agentledger.projections import (
    ReadModelOptionError,
    ReadModelProjector,
    verify_read_models,
)

# Recording helpers ---------------------------------------------------------------------------


def prompt_ref(name: str, version: str) -> PromptRef:
    """A prompt reference whose hash is that of its (made-up) text."""
    ref = blob_ref(canonical_json(f"{name} {version}"))
    return PromptRef(name=name, version=version, hash=ref)


def start(
    ledger: Ledger,
    agent: str = "hand",
    *,
    model: str = "m-small",
    prompt: tuple[str, str] = ("plan", "v1"),
    tags: tuple[str, ...] = (),
    question: Any = "q",
) -> RunRecorder:
    """Start a run configured with one planner model and prompt."""
    config = ConfigIdentity(
        models={"planner": ModelConfig(provider="fake", model=model)},
        prompts={"planner": prompt_ref(*prompt)},
    )
    return ledger.record_run(agent, question, config=config, tags=list(tags))


def call(
    run: RunRecorder,
    *,
    model: str = "m-small",
    prompt: tuple[str, str] | None = ("plan", "v1"),
    tokens: tuple[int, int] = (10, 5),
    cost: float | None = 0.01,
    latency: float = 100.0,
) -> int:
    """Record one model call with chosen usage, cost and latency; returns its position."""
    recorded = run.model_call(
        provider="fake",
        model=model,
        messages=[{"role": "user", "content": f"call {run.position}"}],
        response={"role": "assistant", "content": "ok"},
        usage={"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)},
        cost_usd=cost,
        latency_ms=latency,
        prompt=prompt_ref(*prompt) if prompt else None,
        actor="planner",
    )
    return recorded.position


def tool(run: RunRecorder, *, ok: bool = True, caused_by: int | None = None) -> None:
    """Record a tool call and its result (failed when not `ok`)."""
    with run.batch():
        call_id, position = run.tool_call("lookup", {"q": 1}, caused_by=caused_by)
        run.tool_result(
            call_id,
            ok=ok,
            type="lookup",
            data={"found": ok},
            error=None if ok else _tool_error(),
            latency_ms=2.5,
            caused_by=position,
        )


def _tool_error() -> ToolErrorInfo:
    return ToolErrorInfo(code="not_found", message="nothing there")


def record_agent_runs(ledger: Ledger) -> list[str]:
    """The bundled pipeline scenario, a tool-agent run with a failing tool, a failed run."""
    scenario = load_scenario()
    pipeline = run_agent(
        ledger,
        scenario.agent,
        scenario.question,
        models=scenario.models,
        config=scenario.config,
        tags=["demo", "pipeline"],
    )
    turns = [("calculator", {"expression": "6*7"}), ("calculator", {"expression": "1/0"}), "42."]
    tools = run_agent(ledger, "tools", "What is 6 times 7?", models=tool_agent_script(turns=turns))
    failing = start(ledger, "hand", tags=("broken",))
    call(failing, latency=7.0)
    failing.guardrail("token_budget", action="stop", message="over budget", observed=12)
    failing.fail(ErrorInfo(type="Boom", message="it broke"))
    return [pipeline.run_id, tools.run_id, failing.run_id]


# Expected rows, from the events --------------------------------------------------------------


def expected_run(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """The run row the events imply, computed here without the projector."""
    records = ledger.events(run_id)
    first = records[0].payload
    calls = [r.payload for r in records if r.kind == "ModelCalled"]
    results = [r.payload for r in records if r.kind == "ToolReturned"]
    last = records[-1]
    config = first.get("config", {})
    models = {f"{m['provider']}:{m['model']}" for m in config.get("models", {}).values()}
    models |= {f"{c['provider']}:{c['model']}" for c in calls}
    costs = [c["cost_usd"] for c in calls if "cost_usd" in c]
    status = {"RunCompleted": "completed", "RunFailed": "failed"}.get(
        next((r.kind for r in records if r.kind in {"RunCompleted", "RunFailed"}), ""), "running"
    )
    return {
        "agent": first["agent"],
        "status": status,
        "event_count": len(records),
        "head_hash": last.hash,
        "started_at": records[0].timestamp,
        "models": sorted(models),
        "prompts": {
            role: f"{p['name']}={p['version']}" for role, p in config.get("prompts", {}).items()
        },
        "tags": sorted(first.get("tags", [])),
        "model_calls": len(calls),
        "input_tokens": sum(c.get("usage", {}).get("input_tokens", 0) for c in calls),
        "output_tokens": sum(c.get("usage", {}).get("output_tokens", 0) for c in calls),
        "cost_usd": sum(costs) if costs else None,
        "tool_calls": sum(r.kind == "ToolCalled" for r in records),
        "tool_errors": sum(not p["ok"] for p in results),
        "guardrail_trips": sum(r.kind == "GuardrailTripped" for r in records),
    }


@pytest.fixture
def projector(ledger: Ledger) -> Iterator[ReadModelProjector]:
    """A read-model projector on the backend's ledger (its connections closed after)."""
    with ReadModelProjector(ledger) as opened:
        yield opened


# Tests ---------------------------------------------------------------------------------------


def test_notifications_list_every_event_once_in_commit_order(ledger: Ledger) -> None:
    """`Ledger.notifications` pages through all runs' events; ids ascend; `stop` bounds them."""
    ids = record_agent_runs(ledger)
    last = ledger.max_notification_id()
    seen: list[tuple[int, Any]] = []
    after = 0
    while page := ledger.notifications(after, 7):
        seen.extend(page)
        after = page[-1][0]
    assert [n for n, _ in seen] == sorted({n for n, _ in seen})
    assert seen[-1][0] == last
    by_run = {rid: [(r.position, r.hash) for _, r in seen if r.run_id == rid] for rid in ids}
    for rid in ids:
        assert by_run[rid] == [(r.position, r.hash) for r in ledger.events(rid)]
    middle = seen[len(seen) // 2][0]
    assert [n for n, _ in ledger.notifications(0, 1000, stop=middle)] == [
        n for n, _ in seen if n <= middle
    ]
    with pytest.raises(UsageError, match="limit must be at least 1"):
        ledger.notifications(0, 0)


def test_an_empty_ledger_has_nothing_to_project(projector: ReadModelProjector) -> None:
    """No events: position 0, no lag, no rows, and queries answer empty."""
    assert projector.ledger.max_notification_id() == 0
    assert projector.catch_up() == 0
    status = projector.status()
    assert (status.position, status.lag) == (0, 0)
    assert set(status.rows.values()) == {0}
    assert projector.runs() == []
    assert projector.stats() == []


def test_rows_match_the_events_of_agent_runs(ledger: Ledger, projector: ReadModelProjector) -> None:
    """Pipeline, tool-agent and failed runs: each run row and call row is what the events say."""
    ids = record_agent_runs(ledger)
    projector.catch_up(batch_size=9)
    rows = {row.run_id: row for row in projector.runs()}
    assert set(rows) == set(ids)
    for rid in ids:
        got = rows[rid].as_dict()
        assert {key: got[key] for key in expected_run(ledger, rid)} == expected_run(ledger, rid)
    failed = rows[ids[2]]
    assert (failed.error_type, failed.error_message, failed.outcome) == ("Boom", "it broke", None)
    assert rows[ids[0]].outcome == "answered"
    assert rows[ids[0]].ended_at == ledger.run(ids[0]).ended_at
    tables = projector.table_rows()
    events = {rid: ledger.events(rid) for rid in ids}
    model_calls = [
        (rid, r.position, r.payload["model"], r.payload.get("actor"))
        for rid in ids
        for r in events[rid]
        if r.kind == "ModelCalled"
    ]
    assert sorted(model_calls) == [
        (c["run_id"], c["position"], c["model"], c["role"]) for c in tables["al_rm_model_calls"]
    ]
    tool_calls = []
    for rid in ids:
        returned = {r.payload["call_id"]: r for r in events[rid] if r.kind == "ToolReturned"}
        for r in events[rid]:
            if r.kind == "ToolCalled":
                result = returned[r.payload["call_id"]]
                cause = r.payload.get("caused_by")
                tool = r.payload["tool"]
                tool_calls.append(
                    (rid, r.position, tool, cause, result.position, result.payload["ok"])
                )
    assert sorted(tool_calls) == [
        tuple(t[k] for k in ("run_id", "position", "tool", "model_position"))
        + tuple(t[k] for k in ("result_position", "ok"))
        for t in tables["al_rm_tool_calls"]
    ]
    trips = tables["al_rm_guardrail_trips"]
    assert [(t["run_id"], t["guardrail"], t["action"]) for t in trips] == [
        (ids[2], "token_budget", "stop")
    ]


def test_stats_are_the_numbers_computed_by_hand(
    ledger: Ledger, projector: ReadModelProjector
) -> None:
    """Tokens, cost, mean and nearest-rank p95 latency, tool error rate per model and prompt."""
    a = start(ledger)
    first = call(a, tokens=(100, 10), cost=0.5, latency=10.0)
    tool(a, ok=True, caused_by=first)
    tool(a, ok=False, caused_by=first)
    call(a, tokens=(200, 20), cost=0.25, latency=30.0)
    tool(a, ok=False)  # no cause given: charged to the last model call before it
    a.complete()
    b = start(ledger, prompt=("plan", "v2"))
    call(b, prompt=("plan", "v2"), tokens=(1, 2), cost=None, latency=5.0)
    for latency in (50.0, 60.0, 70.0):
        call(b, model="m-large", prompt=("plan", "v2"), tokens=(7, 3), cost=0.1, latency=latency)
    b.complete()

    both = {(s.model, s.prompt): s for s in projector.stats()}
    assert set(both) == {("m-small", "plan=v1"), ("m-small", "plan=v2"), ("m-large", "plan=v2")}
    small_v1 = both["m-small", "plan=v1"]
    assert (small_v1.model_calls, small_v1.runs) == (2, 1)
    assert (small_v1.input_tokens, small_v1.output_tokens) == (300, 30)
    assert small_v1.cost_usd == 0.75
    assert (small_v1.mean_latency_ms, small_v1.p95_latency_ms) == (20.0, 30.0)
    assert (small_v1.tool_calls, small_v1.tool_errors) == (3, 2)
    assert small_v1.tool_error_rate == pytest.approx(2 / 3)
    small_v2 = both["m-small", "plan=v2"]
    assert (small_v2.cost_usd, small_v2.tool_calls, small_v2.tool_error_rate) == (None, 0, None)
    large = both["m-large", "plan=v2"]
    assert (large.model_calls, large.input_tokens, large.output_tokens) == (3, 21, 9)
    assert large.cost_usd == pytest.approx(0.3)
    assert (large.mean_latency_ms, large.p95_latency_ms) == (60.0, 70.0)

    by_model = {s.model: s for s in projector.stats(["model"])}
    assert by_model["m-small"].model_calls == 3
    assert by_model["m-small"].runs == 2
    assert by_model["m-small"].prompt is None
    assert by_model["m-small"].p95_latency_ms == 30.0
    assert by_model["m-small"].mean_latency_ms == 15.0
    by_prompt = {s.prompt: s for s in projector.stats(["prompt"])}
    assert by_prompt["plan=v2"].model_calls == 4
    assert by_prompt["plan=v2"].model is None
    assert by_prompt["plan=v2"].p95_latency_ms == 70.0
    assert by_prompt["plan=v1"].tool_error_rate == pytest.approx(2 / 3)
    run_a = projector.runs(prompt=("plan", "v1"))[0]
    assert (run_a.cost_usd, run_a.tool_calls, run_a.tool_errors) == (0.75, 3, 2)


def test_runs_filter_by_status_model_prompt_tag_since_and_agent(
    ledger: Ledger, projector: ReadModelProjector
) -> None:
    """Every `runs` filter selects exactly the runs it names, newest first."""
    old = start(ledger, "alpha", model="m-small", prompt=("plan", "v1"), tags=("nightly",))
    call(old)
    old.complete()
    new = start(ledger, "beta", model="m-large", prompt=("plan", "v2"), tags=("adhoc",))
    call(new, model="m-tiny", prompt=("plan", "v2"))
    new.fail(ErrorInfo(type="Boom", message="x"))
    running = start(ledger, "alpha", model="m-small", prompt=("plan", "v2"))

    def ids(**filters: Any) -> list[str]:
        return [row.run_id for row in projector.runs(**filters)]

    assert ids() == [running.run_id, new.run_id, old.run_id]
    assert ids(status="completed") == [old.run_id]
    assert ids(status="running") == [running.run_id]
    assert ids(model="m-small") == [running.run_id, old.run_id]
    assert ids(model="fake:m-large") == [new.run_id]
    assert ids(model="m-tiny") == [new.run_id], "a model the run called, not configured"
    assert ids(model="nope") == []
    assert ids(prompt=("plan", "v2")) == [running.run_id, new.run_id]
    assert ids(prompt=("plan", None)) == [running.run_id, new.run_id, old.run_id]
    assert ids(prompt=("other", "v1")) == []
    assert ids(tag="nightly") == [old.run_id]
    assert ids(agent="alpha", status="running") == [running.run_id]
    assert ids(since=new.recent_events()[0].timestamp) == [running.run_id, new.run_id]
    assert ids(limit=1) == [running.run_id]


def test_lag_counts_what_is_not_applied_yet(ledger: Ledger, projector: ReadModelProjector) -> None:
    """Lag grows with each event recorded and returns to 0 after catch-up; queries catch up."""
    run = start(ledger)
    assert projector.lag() == 1
    call(run)
    tool(run)
    assert projector.lag() == 4
    assert projector.catch_up(batch_size=3) == 4
    assert (projector.lag(), projector.position()) == (0, ledger.max_notification_id())
    run.complete()
    assert projector.status().lag == 1
    assert projector.runs()[0].status == "completed", "runs() catches up first"
    assert projector.lag() == 0
    run2 = start(ledger)
    assert projector.runs(fresh=False)[0].run_id == run.run_id
    assert projector.lag() == 1
    assert run2.run_id in {row.run_id for row in projector.runs()}


def test_a_batch_that_fails_before_commit_leaves_nothing(
    ledger: Ledger, projector: ReadModelProjector
) -> None:
    """Rows and tracked id change together: a batch that raises writes no row, then resumes."""
    record_agent_runs(ledger)
    seen: list[int] = []
    projector.catch_up(batch_size=10, before_commit=seen.append)
    assert seen == sorted(seen)
    assert seen[-1] == ledger.max_notification_id()
    before = projector.table_rows()
    position = projector.position()
    more = start(ledger)
    call(more)
    tool(more, ok=False)
    more.complete()

    def crash(position: int) -> None:
        raise RuntimeError(f"crash before committing {position}")

    with pytest.raises(RuntimeError, match="crash before committing"):
        projector.catch_up(batch_size=2, before_commit=crash)
    assert projector.position() == position
    assert projector.table_rows() == before
    assert projector.catch_up(batch_size=2) == 5
    caught_up = projector.table_rows()
    projector.rebuild()
    assert projector.table_rows() == caught_up


def test_rebuild_gives_identical_rows_on_every_backend(
    ledger: Ledger, projector: ReadModelProjector
) -> None:
    """Incremental catch-ups between interleaved runs give exactly the rows of a rebuild."""
    a = start(ledger, tags=("x",))
    projector.catch_up()
    b = start(ledger, model="m-large")
    call(a, latency=1.5, cost=0.1)
    projector.catch_up(batch_size=1)
    call(b, model="m-large", cost=0.2)
    tool(b, ok=False)
    record_agent_runs(ledger)
    projector.catch_up(batch_size=4)
    a.complete()
    b.fail(ErrorInfo(type="E", message="m"))
    ledger.annotate(a.run_id, author="auditor", note="looked")
    assert projector.lag() > 0
    projector.catch_up(batch_size=3)
    incremental = projector.table_rows()
    applied = projector.rebuild(batch_size=5)
    assert applied == ledger.max_notification_id()
    assert projector.table_rows() == incremental
    assert projector.runs(tag="x")[0].event_count == 4, "the annotation moved the count"


@pytest.mark.postgres
def test_ids_a_rolled_back_write_drew_leave_no_gap_on_postgresql(pg_url: str) -> None:
    """Insert ids drawn and never used do not show: the ledger-wide order is dense."""
    with Ledger.open(pg_url) as ledger, ReadModelProjector(ledger) as projector:
        first = start(ledger)
        with projector.engine.begin() as conn:
            for _ in range(5):
                conn.execute(text("SELECT nextval('agentledger_events_notification_id_seq')"))
        call(first)
        first.complete()
        ids = [n for n, _ in ledger.notifications(0, 100)]
        assert ids == list(range(1, len(ids) + 1))
        assert projector.lag() == ids[-1]
        assert projector.catch_up(batch_size=1) == len(ids)
        assert (projector.lag(), projector.position()) == (0, ids[-1])
        assert projector.runs()[0].status == "completed"


def test_schema_change_rebuilds_the_tables(ledger: Ledger, projector: ReadModelProjector) -> None:
    """Tables of another schema version are dropped and rebuilt on first use."""
    run = start(ledger)
    call(run)
    projector.catch_up()
    rows = projector.table_rows()
    with projector.engine.begin() as conn:
        conn.execute(text("UPDATE al_rm_tracking SET schema_version = 0"))
        conn.execute(text("DELETE FROM al_rm_model_calls"))
    with ReadModelProjector(ledger) as fresh:
        assert fresh.position() == 0
        fresh.catch_up()
        assert fresh.table_rows() == rows


def test_bad_options_are_named(projector: ReadModelProjector) -> None:
    """Wrong arguments raise ReadModelOptionError naming the option."""
    cases: list[tuple[str, Any]] = [
        ("batch_size", lambda: projector.catch_up(batch_size=0)),
        ("batch_size", lambda: projector.rebuild(batch_size=-1)),
        ("status", lambda: projector.runs(status="done")),
        ("prompt", lambda: projector.runs(prompt=("", "v1"))),
        ("prompt", lambda: projector.runs(prompt=("plan", ""))),
        ("limit", lambda: projector.runs(limit=0)),
        ("group_by", lambda: projector.stats(["cost"])),
        ("group_by", lambda: projector.stats([])),
        ("group_by", lambda: projector.stats("model")),
    ]
    for option, call_it in cases:
        with pytest.raises(ReadModelOptionError) as caught:
            call_it()
        assert caught.value.option == option
        assert option in str(caught.value)


def test_two_projectors_on_one_database_take_turns(sqlite_url: str) -> None:
    """Two ledgers on one SQLite file, each with a projector, catch up at once: rows once."""
    writer = Ledger.open(sqlite_url, clock=StepClock(), ids=SequentialIds("two"))
    record_agent_runs(writer)
    for _ in range(5):
        run = start(writer)
        call(run)
        tool(run)
        run.complete()
    readers = [Ledger.open(sqlite_url) for _ in range(2)]
    errors: list[BaseException] = []

    def follow(ledger: Ledger) -> None:
        try:
            with ReadModelProjector(ledger) as following:
                following.catch_up(batch_size=3)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=follow, args=(r,)) for r in readers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with ReadModelProjector(writer) as projector:
        assert projector.lag() == 0
        together = projector.table_rows()
        projector.rebuild()
        assert projector.table_rows() == together
    for opened in [writer, *readers]:
        opened.close()


# Property: incremental == rebuilt ------------------------------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.sampled_from(["m-small", "m-large"])),
        st.tuples(
            st.just("call"),
            st.integers(0, 5),
            st.floats(0, 1000, allow_nan=False),
            st.one_of(st.none(), st.floats(0, 2, allow_nan=False)),
        ),
        st.tuples(st.just("tool"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("trip"), st.integers(0, 5)),
        st.tuples(st.just("end"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("catch_up"), st.integers(1, 6)),
    ),
    max_size=40,
)


@settings(max_examples=60)
@given(ops=_OPS)
def test_incremental_read_model_equals_a_rebuild(ops: list[tuple[Any, ...]]) -> None:
    """Runs recorded in any interleaving, with catch-ups anywhere: the rows equal a rebuild."""
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("prop")) as ledger:
        projector = ReadModelProjector(ledger)
        open_runs: list[RunRecorder] = []
        for op in ops:
            if op[0] == "start":
                open_runs.append(start(ledger, model=op[1], prompt=("plan", op[1])))
            elif op[0] == "catch_up":
                projector.catch_up(batch_size=op[1])
            elif open_runs:
                run = open_runs[op[1] % len(open_runs)]
                _apply_op(run, op)
                if op[0] == "end":
                    open_runs.remove(run)
        projector.catch_up(batch_size=4)
        incremental = projector.table_rows()
        projector.rebuild()
        assert projector.table_rows() == incremental
        assert projector.lag() == 0
        counts = projector.status().rows
        assert counts["al_rm_runs"] == len(ledger.run_ids())


def _apply_op(run: RunRecorder, op: tuple[Any, ...]) -> None:
    if op[0] == "call":
        call(run, latency=op[2], cost=op[3])
    elif op[0] == "tool":
        tool(run, ok=op[2])
    elif op[0] == "trip":
        run.guardrail("tool_cap", action="stop", message="too many tools")
    elif op[2]:
        run.complete()
    else:
        run.fail(ErrorInfo(type="E", message="failed"))


def test_verify_read_models_names_an_edited_row_and_changes_nothing(
    ledger: Ledger, projector: ReadModelProjector
) -> None:
    """On every backend: a caught-up model matches a rebuild; an edited cost is named, not fixed."""
    a = start(ledger, tags=("x",))
    call(a, latency=2.0, cost=0.5)
    tool(a, ok=False)
    a.complete()
    projector.catch_up()
    assert verify_read_models(ledger).ok
    with projector.engine.begin() as conn:
        conn.execute(text("UPDATE al_rm_model_calls SET cost_usd = 0.01, input_tokens = 1"))
    edited = projector.table_rows()
    [difference] = verify_read_models(ledger).differences
    assert (difference.table, difference.kind) == ("al_rm_model_calls", "differs")
    assert dict(difference.key)["run_id"] == a.run_id
    assert {name for name, _, _ in difference.columns} == {"cost_usd", "input_tokens"}
    assert projector.table_rows() == edited


def test_catch_up_can_stop_at_a_given_notification(
    ledger: Ledger, projector: ReadModelProjector
) -> None:
    """``catch_up(upto=N)`` applies notifications up to N only (a rebuild for comparison)."""
    start(ledger).complete()
    start(ledger).complete()
    middle = ledger.max_notification_id() // 2
    projector.catch_up(upto=middle)
    assert projector.position() == middle
    assert projector.lag() == ledger.max_notification_id() - middle
