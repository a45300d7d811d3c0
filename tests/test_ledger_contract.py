"""The ledger's backend contract: every test runs on memory, SQLite and the real PostgreSQL.

Round trips of every event kind, optimistic concurrency, listing and filtering runs,
content-addressed conversations, export/import (also across backends) and the run lifecycle:
how a run ends, what it carries when it ends, and what a closed run still accepts.
"""

from __future__ import annotations

import json
import sqlite3
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from agentledger.ledger import (
    GENESIS,
    ConcurrencyError,
    CorruptBlobError,
    ImportRefusedError,
    Ledger,
    RecordedEvent,
    RunClosedError,
    RunQuery,
    RunRecorder,
    SequentialIds,
    StepClock,
    UnknownBlobError,
    UnknownRunError,
    UsageError,
    canonical_json,
)
from agentledger.ledger.events import (
    EVENT_TYPES,
    Attempt,
    ClarificationRequested,
    ConfigIdentity,
    DeltaApplied,
    ErrorInfo,
    GuardrailTripped,
    LedgerEvent,
    ModelCalled,
    ModelConfig,
    PlanProposed,
    PolicyDecided,
    PromptRef,
    Redaction,
    RunAnnotated,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepCompleted,
    StepStarted,
    SynthesisProduced,
    ToolCalled,
    ToolErrorInfo,
    ToolReturned,
    Usage,
)

# Helpers --------------------------------------------------------------------------------------


def kinds(records: list[RecordedEvent]) -> list[str]:
    """The kinds of `records`, in order."""
    return [r.kind for r in records]


def stored_blob_sizes(url: str) -> dict[str, int] | None:
    """Every blob row the database at `url` holds (ref -> logical size); None for memory."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return dict(conn.execute("SELECT ref, size FROM agentledger_blobs").fetchall())
    if url.startswith("postgresql://"):
        parts = urlsplit(url)
        schema = parse_qs(parts.query)["schema"][0]
        with psycopg.connect(parts._replace(query="").geturl()) as conn:
            rows = conn.execute(f'SELECT ref, size FROM "{schema}".agentledger_blobs').fetchall()
            return dict(rows)
    return None


def planner_config() -> ConfigIdentity:
    """A configuration identity as a two-role agent would record it."""
    return ConfigIdentity(
        models={
            "planner": ModelConfig(
                provider="openai", model="gpt-4.1-mini", params={"temperature": 0.2, "seed": 7}
            ),
            "synthesizer": ModelConfig(provider="anthropic", model="claude-sonnet-4", params={}),
        },
        prompts={
            "planner": PromptRef(name="planner", version="3", hash="sha256:" + "ab" * 32),
        },
        tools={"search": "2.1.0", "calculator": "1"},
        code_version="8a724fe",
        settings={"max_steps": 12, "budget_usd": 0.5},
    )


def record_rich_run(ledger: Ledger) -> str:
    """A run with a conversation, a large tool result (a blob), deltas, an answer and a note."""
    with ledger.record_run(
        "researcher", input={"question": "Compare Lisbon and Porto rents"}, tags=["eval"]
    ) as run:
        with run.step("plan") as step:
            messages = [
                {"role": "system", "content": "Plan as JSON."},
                {"role": "user", "content": "Compare Lisbon and Porto rents"},
            ]
            call = run.model_call(
                provider="scripted",
                model="planner-1",
                messages=messages,
                response={"role": "assistant", "content": '{"steps": ["search"]}'},
                usage={"input_tokens": 20, "output_tokens": 9, "total_tokens": 29},
                prompt=run.prompt("planner", "1", "Plan as JSON."),
                step_id=step,
            )
            run.plan({"steps": ["search"]}, step_id=step, caused_by=call.position)
        with run.step("search") as step:
            rows = [
                {"city": "Lisbon", "rent_eur": 1400 + i, "source": f"ad-{i}"} for i in range(200)
            ]
            call_id = run.tool(
                "search", {"q": "rent Lisbon Porto"}, result={"rows": rows}, step_id=step
            )
            run.delta({"rents": {"Lisbon": 1450, "Porto": 1050}, "evidence": {call_id: "ads"}})
        run.answer("Lisbon is about 38% dearer.", evidence_ids=["ads"])
    ledger.annotate(run.run_id, author="auditor@example.org", note="checked", about_position=3)
    return run.run_id


# Round trips ----------------------------------------------------------------------------------


def test_every_event_kind_round_trips_with_positions_one_to_n(ledger: Ledger) -> None:
    """One event of every catalogue kind, recorded and read back, equals what was recorded."""
    started = RunStarted(
        agent="planner-executor",
        input={"goal": "tidy the garage", "budget": 2.5},
        config=planner_config(),
        tags=["nightly", "eval"],
    )
    run = ledger.record_run(
        started.agent,
        input=started.input,
        config=started.config,
        tags=started.tags,
        redaction=None,
    )
    messages_ref = run.messages_ref([{"role": "user", "content": "tidy the garage"}])
    middle: list[LedgerEvent] = [
        PolicyDecided(
            decision="redact",
            reasons=["email address in input"],
            redactions=[Redaction(kind="email", count=1)],
            risk_tags=["pii"],
            actor="policy-gate",
        ),
        StepStarted(step_id="step-1", name="plan", args={"depth": 2}, actor="planner"),
        ModelCalled(
            call_id="call-1",
            step_id="step-1",
            provider="openai",
            model="gpt-4.1-mini",
            params={"temperature": 0.2},
            prompt=PromptRef(name="planner", version="3", hash="sha256:" + "ab" * 32),
            messages_ref=messages_ref,
            message_count=1,
            finish_reason="stop",
            usage=Usage(input_tokens=120, output_tokens=48, total_tokens=168),
            cost_usd=0.00042,
            latency_ms=812.5,
            attempts=[
                Attempt(number=1, status_code=429, error_type="RateLimit", backoff_s=0.5),
                Attempt(number=2, status_code=200, latency_ms=812.5),
            ],
            actor="openai:gpt-4.1-mini",
        ),
        PlanProposed(plan={"steps": [{"tool": "inventory"}, {"tool": "bins"}]}, step_id="step-1"),
        StepCompleted(step_id="step-1", status="ok", output={"steps": 2}),
        ToolCalled(
            call_id="tool-1",
            tool="inventory",
            tool_version="1.4",
            arguments={"room": "garage", "deep": True},
            risk="medium",
            caused_by=3,
        ),
        ToolReturned(
            call_id="tool-1",
            ok=False,
            type="inventory",
            error=ToolErrorInfo(code="timeout", message="no answer in 5 s", retryable=True),
            latency_ms=5000.0,
            caused_by=7,
        ),
        DeltaApplied(
            patch={"inventory": {"bikes": 2, "boxes": None}, "errors": {"tool-1": "timeout"}},
            step_id="step-1",
            source="tool-1",
        ),
        GuardrailTripped(
            guardrail="max_tool_errors",
            limit=1,
            observed=1,
            action="stop",
            message="one tool error is the limit",
        ),
        ClarificationRequested(question="Which shelf holds the paint?"),
        SynthesisProduced(answer="Two bikes; boxes cleared.", evidence_ids=["tool-1"]),
    ]
    for event in middle:
        run.record(event)
    completed = RunCompleted(
        event_count=run.position + 1, head_hash=run.recent_events()[-1].hash, outcome="answered"
    )
    run.record(completed)
    annotated = RunAnnotated(
        author="auditor@example.org",
        note="the tool timeout was an outage",
        reason="incident 42",
        about_position=7,
        labels=["outage"],
    )
    ledger.append(run.run_id, annotated)

    failing = ledger.record_run("planner-executor", input="second run")
    failed = RunFailed(
        event_count=2,
        head_hash=failing.recent_events()[-1].hash,
        error=ErrorInfo(type="TimeoutError", message="model timed out", traceback="..."),
    )
    failing.record(failed)

    expected = [started, *middle, completed, annotated]
    records = ledger.events(run.run_id)
    assert [r.event for r in records] == expected
    assert [r.position for r in records] == list(range(1, len(expected) + 1))
    assert kinds(records) == [e.kind for e in expected]
    assert records[0].prev == GENESIS
    assert all(later.prev == earlier.hash for earlier, later in pairwise(records))
    failed_records = ledger.events(failing.run_id)
    assert [r.event for r in failed_records][1] == failed
    assert [r.position for r in failed_records] == [1, 2]
    with ledger.record_run("planner-executor", input="third run", subject="user-1"):
        pass
    erased = ledger.erase_subject("user-1", reason="request 7", requested_by="dpo@example.org")
    erasures = ledger.erasures()
    assert [(e.kind, e.position) for e in erasures] == [("ErasureRecorded", erased.position)]
    assert erasures[0].event.model_dump()["requested_by"] == "dpo@example.org"
    covered = set(kinds(records)) | set(kinds(failed_records)) | set(kinds(erasures))
    assert covered == set(EVENT_TYPES)
    assert ledger.verify().ok


def test_read_back_events_can_be_sliced_by_position(ledger: Ledger) -> None:
    """`events(after=, upto=)` returns exactly the positions in that window."""
    with ledger.record_run("slicer", input="x") as run:
        for index in range(6):
            run.plan({"index": index})
    records = ledger.events(run.run_id, after=2, upto=5)
    assert [r.position for r in records] == [3, 4, 5]
    assert [r.payload["plan"]["index"] for r in records] == [1, 2, 3]


# Optimistic concurrency -----------------------------------------------------------------------


def test_two_writers_at_one_position_one_wins_and_nothing_is_lost(ledger: Ledger) -> None:
    """Two recorders append at the same position: the second gets ConcurrencyError, not a fork."""
    first = ledger.record_run("writer", input="race")
    second = RunRecorder(ledger, ledger.load(first.run_id))
    winner = first.plan({"by": "first"})
    assert winner == 2
    with pytest.raises(ConcurrencyError) as caught:
        second.plan({"by": "second"})
    assert caught.value.run_id == first.run_id
    assert caught.value.position == 2

    retry = RunRecorder(ledger, ledger.load(first.run_id))
    assert retry.plan({"by": "retry after reload"}) == 3
    first_again = RunRecorder(ledger, ledger.load(first.run_id))
    first_again.complete()

    records = ledger.events(first.run_id)
    assert kinds(records) == ["RunStarted", "PlanProposed", "PlanProposed", "RunCompleted"]
    assert [r.payload.get("plan") for r in records[1:3]] == [
        {"by": "first"},
        {"by": "retry after reload"},
    ]
    assert records[:2] == first.recent_events()
    info = ledger.run(first.run_id)
    assert (info.status, info.event_count, info.head_hash) == ("completed", 4, records[-1].hash)
    assert ledger.verify().ok


def test_a_batch_that_loses_the_race_writes_none_of_its_events(ledger: Ledger) -> None:
    """A batch whose commit conflicts is written not at all, neither now nor at a later flush."""
    first = ledger.record_run("writer", input="race")
    second = RunRecorder(ledger, ledger.load(first.run_id))
    first.plan({"by": "first"})
    with pytest.raises(ConcurrencyError) as caught, second.batch():  # noqa: PT012 - one batch
        second.plan({"by": "second"})
        second.delta({"second": {"was": "here"}})
        second.answer("the second writer's answer")
    assert caught.value.position == 2
    first.complete()
    after = ledger.events(first.run_id)
    with pytest.raises((ConcurrencyError, RunClosedError)):
        second.answer("a stale writer tries again")
    assert ledger.events(first.run_id) == after
    assert kinds(after) == ["RunStarted", "PlanProposed", "RunCompleted"]
    assert "second" not in json.dumps([r.payload for r in after])
    assert ledger.verify().ok


def test_starting_a_run_under_an_existing_id_is_a_conflict(ledger: Ledger) -> None:
    """A second RunStarted for a recorded run id is refused; the first run is untouched."""
    with ledger.record_run("original", input="first") as run:
        run.plan({"keep": True})
    before = ledger.events(run.run_id)
    with pytest.raises(ConcurrencyError) as caught:
        ledger.record_run("impostor", input="second", run_id=run.run_id)
    assert (caught.value.run_id, caught.value.position) == (run.run_id, 1)
    assert ledger.events(run.run_id) == before
    assert ledger.run(run.run_id).agent == "original"
    assert ledger.verify().ok


# Listing and filtering ------------------------------------------------------------------------


def test_runs_are_listed_newest_first_and_filtered(ledger: Ledger) -> None:
    """`runs()` filters by status, tag, agent, start time and limit, newest first."""
    with ledger.record_run("planner", input="one", tags=["nightly", "eval"]) as r1:
        r1.plan({"n": 1})
    with pytest.raises(RuntimeError), ledger.record_run("planner", input="two", tags=["nightly"]):
        raise RuntimeError("model down")
    r2_id = ledger.runs(status="failed")[0].run_id
    r3 = ledger.record_run("router", input="three", tags=["eval"])
    with ledger.record_run("router", input="four") as r4:
        pass

    def ids(**filters: Any) -> list[str]:
        return [info.run_id for info in ledger.runs(**filters)]

    assert ids() == [r4.run_id, r3.run_id, r2_id, r1.run_id]
    assert ids(status="completed") == [r4.run_id, r1.run_id]
    assert ids(status="failed") == [r2_id]
    assert ids(status="running") == [r3.run_id]
    assert ids(tag="nightly") == [r2_id, r1.run_id]
    assert ids(tag="eval") == [r3.run_id, r1.run_id]
    assert ids(tag="absent") == []
    assert ids(agent="router") == [r4.run_id, r3.run_id]
    assert ids(agent="planner", tag="eval") == [r1.run_id]
    third_start = ledger.run(r3.run_id).started_at
    assert ids(since=third_start) == [r4.run_id, r3.run_id]
    assert ids(until=third_start) == [r2_id, r1.run_id]
    assert ids(limit=2) == [r4.run_id, r3.run_id]
    assert ids(status="completed", limit=1) == [r4.run_id]
    assert [i.run_id for i in ledger.runs(RunQuery(agent="planner", limit=1))] == [r2_id]
    tags = [(), ("eval",), ("nightly",), ("eval", "nightly")]
    assert [i.tags for i in ledger.runs(limit=4)] == tags
    assert ledger.count_runs() == 4
    assert ledger.count_runs(tag="eval", limit=1) == 2
    assert ledger.count_runs(status="running", agent="router") == 1
    with pytest.raises(UsageError, match="limit must be a whole number"):
        ledger.runs(limit=-1)

    first = ledger.run(r1.run_id)
    assert first.agent == "planner"
    assert first.status == "completed"
    assert first.tags == ("eval", "nightly")
    assert first.event_count == 3
    assert first.input_preview == "one"
    assert first.ended_at is not None
    assert ledger.run(r3.run_id).ended_at is None


# Content-addressed conversations --------------------------------------------------------------


def test_a_growing_conversation_stores_each_message_once(ledger: Ledger, ledger_url: str) -> None:
    """200 model calls over a growing history store 401 message nodes, not 200 histories."""
    calls = 200
    system = {"role": "system", "content": "You are a careful research assistant. " * 3}
    history: list[dict[str, Any]] = [system]
    snapshots: list[list[dict[str, Any]]] = []
    run = ledger.record_run("chatty", input="a long conversation")
    for start in range(0, calls, 25):
        with run.batch():
            for turn in range(start, start + 25):
                history.append({"role": "user", "content": f"question {turn}: " + "why? " * 12})
                snapshots.append(list(history))
                reply = {"role": "assistant", "content": f"answer {turn}: " + "because. " * 10}
                run.model_call(provider="scripted", model="m", messages=history, response=reply)
                history.append(reply)
    run.complete()

    records = [r for r in ledger.events(run.run_id) if r.kind == "ModelCalled"]
    assert len(records) == calls
    assert [r.payload["message_count"] for r in records] == [len(s) for s in snapshots]
    for index in (0, 1, 99, calls - 1):
        assert ledger.conversation(records[index].payload["messages_ref"]) == snapshots[index]
    assert ledger.conversation(records[-1].payload["response_ref"]) == history

    chain: dict[str, bytes] = {}
    current: str | None = records[-1].payload["response_ref"]
    while current is not None:
        data = ledger.blob_bytes([current])[current]
        chain[current] = data
        current = ledger.blob(current)["parent_ref"]
    assert len(chain) == len(history) == 1 + 2 * calls
    for record in records:
        assert record.payload["messages_ref"] in chain
        assert record.payload["response_ref"] in chain
    stored = sum(len(data) for data in chain.values())
    expected = 0
    parent = None
    for message in history:
        node = canonical_json({"message": message, "parent_ref": parent})
        expected += len(node)
        parent = "sha256:" + "0" * 64
    assert stored == expected
    quadratic = sum(len(canonical_json(s)) for s in snapshots)
    assert stored * 50 < quadratic

    heads = [r.payload[k] for r in records for k in ("messages_ref", "response_ref")]
    reads: list[int] = []
    store = ledger.recorder
    chains_of = store.get_chains

    def counting(refs: Any) -> dict[str, Any]:
        found = dict(chains_of(refs))
        reads.append(len(found))
        return found

    def refused(refs: Any) -> dict[str, Any]:
        raise AssertionError(f"a chain read its nodes by ref: {list(refs)[:2]}")

    store.get_chains, store.get_blobs = counting, refused
    try:
        chains = ledger.conversations(heads)
    finally:
        del store.get_chains, store.get_blobs
    assert [chains[r.payload["messages_ref"]] for r in records] == snapshots
    assert chains[records[-1].payload["response_ref"]] == history
    assert reads == [len(chain)]  # one recursive query reads every call's chain, not 401

    rows = stored_blob_sizes(ledger_url)
    if rows is not None:
        assert set(rows) == set(chain)
        assert sum(rows.values()) == stored
    assert ledger.verify().ok


def test_a_forged_conversation_chain_is_reported_not_followed(ledger: Ledger) -> None:
    """A node missing, a node that is not a node, or a chain that loops raises a clear error."""
    with ledger.record_run("a") as run:
        missing = run.put_blob({"message": {"role": "user"}, "parent_ref": "sha256:" + "1" * 64})
        not_a_node = run.put_blob(["a", "list"])
        bad_parent = run.put_blob({"message": "x", "parent_ref": 7})
    with pytest.raises(UnknownBlobError):
        ledger.conversation(missing)
    with pytest.raises(CorruptBlobError, match="not a conversation node"):
        ledger.conversation(not_a_node)
    with pytest.raises(CorruptBlobError, match="parent_ref is not a ref"):
        ledger.conversation(bad_parent)


# Export and import ----------------------------------------------------------------------------


def test_export_then_import_into_a_fresh_ledger_keeps_every_hash(
    ledger: Ledger, tmp_path: Path
) -> None:
    """An exported run imports into an empty ledger with the same envelopes, hashes and blobs."""
    run_id = record_rich_run(ledger)
    exported = tmp_path / "run.jsonl"
    ledger.export_run(run_id, exported)
    with Ledger.open("memory://") as fresh:
        assert fresh.import_file(exported) == run_id
        original = ledger.events(run_id)
        imported = fresh.events(run_id)
        assert [r.envelope() for r in imported] == [r.envelope() for r in original]
        assert fresh.verify().ok
        info = fresh.run(run_id)
        assert (info.status, info.event_count) == ("completed", len(original))
        assert info.tags == ("eval",)
        model_call = next(r for r in imported if r.kind == "ModelCalled")
        assert len(fresh.conversation(model_call.payload["messages_ref"])) == 2
        again = tmp_path / "again.jsonl"
        fresh.export_run(run_id, again)
        assert again.read_bytes() == exported.read_bytes()
        assert fresh.import_file(exported) == run_id
        assert len(fresh.events(run_id)) == len(original)


def _export_prefix(full: Path, out: Path, events: int) -> Path:
    """The file an export of the run's first `events` events would be (with all its blobs)."""
    header, *lines = full.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if json.loads(line)["type"] == "event"][:events]
    blobs = [line for line in lines if json.loads(line)["type"] == "blob"]
    out.write_text(
        "\n".join([json.dumps({**json.loads(header), "events": events}), *kept, *blobs]) + "\n",
        encoding="utf-8",
    )
    return out


def test_an_import_cut_short_is_completed_by_importing_the_file_again(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Import commits in batches; a ledger left holding the run's first events takes the rest.

    The state an interrupted import leaves is the same as importing the first events only.
    """
    with Ledger.open("memory://") as source:
        run_id = record_rich_run(source)
        full = tmp_path / "run.jsonl"
        source.export_run(run_id, full)
        original = [r.envelope() for r in source.events(run_id)]
    assert ledger.import_file(_export_prefix(full, tmp_path / "part.jsonl", 4)) == run_id
    assert (ledger.run(run_id).status, ledger.run(run_id).event_count) == ("running", 4)
    assert ledger.import_file(full) == run_id
    assert [r.envelope() for r in ledger.events(run_id)] == original
    info = ledger.run(run_id)
    assert (info.status, info.event_count, info.tags) == ("completed", len(original), ("eval",))
    assert ledger.verify().ok


def test_an_earlier_export_of_a_run_imports_as_nothing_new(ledger: Ledger, tmp_path: Path) -> None:
    """A file holding the first events of a run the ledger has in full changes nothing."""
    run_id = record_rich_run(ledger)
    full = tmp_path / "run.jsonl"
    ledger.export_run(run_id, full)
    before = [r.envelope() for r in ledger.events(run_id)]
    assert ledger.import_file(_export_prefix(full, tmp_path / "part.jsonl", 5)) == run_id
    assert [r.envelope() for r in ledger.events(run_id)] == before
    assert ledger.run(run_id).status == "completed"


def test_a_run_that_exists_with_other_events_is_refused_and_left_as_it_was(
    ledger: Ledger, ledger_url: str, tmp_path: Path
) -> None:
    """Same run id, another chain: the import is refused and the ledger's run is unchanged."""
    run_id = record_rich_run(ledger)
    before = [r.envelope() for r in ledger.events(run_id)]
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds(ledger_url)) as other:
        with other.record_run("another", input="something else") as run:
            run.answer("a different run under the same id")
        assert run.run_id == run_id
        other.export_run(run_id, tmp_path / "other.jsonl")
    with pytest.raises(ImportRefusedError, match="already exists with other events"):
        ledger.import_file(tmp_path / "other.jsonl")
    assert [r.envelope() for r in ledger.events(run_id)] == before
    assert ledger.verify().ok


@pytest.mark.parametrize("text", ["line\u2028separator", "para\u2029graph", "next\x85line"])
def test_text_with_unicode_line_breaks_survives_export_and_import(
    ledger: Ledger, tmp_path: Path, text: str
) -> None:
    """U+2028, U+2029 and U+0085 are ordinary characters in JSON, not line ends of the file."""
    with ledger.record_run("writer", input=text) as run:
        run.plan({"note": text})
        run.tool("echo", {text: text}, result=[text] * 600)
    exported = tmp_path / "run.jsonl"
    ledger.export_run(run.run_id, exported)
    with Ledger.open("memory://") as fresh:
        assert fresh.import_file(exported) == run.run_id
        assert [r.hash for r in fresh.events(run.run_id)] == [
            r.hash for r in ledger.events(run.run_id)
        ]
        assert fresh.events(run.run_id)[1].payload["plan"] == {"note": text}
        assert fresh.verify().ok


@pytest.mark.postgres
def test_export_import_across_memory_sqlite_and_postgresql(
    sqlite_url: str, pg_url: str, tmp_path: Path
) -> None:
    """Memory -> SQLite -> PostgreSQL: identical export bytes and hashes at every hop."""
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("hops")) as memory:
        run_id = record_rich_run(memory)
        hashes = [r.hash for r in memory.events(run_id)]
        memory.export_run(run_id, tmp_path / "memory.jsonl")
    with Ledger.open(sqlite_url) as sqlite_ledger:
        assert sqlite_ledger.import_file(tmp_path / "memory.jsonl") == run_id
        assert [r.hash for r in sqlite_ledger.events(run_id)] == hashes
        assert sqlite_ledger.verify().ok
        sqlite_ledger.export_run(run_id, tmp_path / "sqlite.jsonl")
    with Ledger.open(pg_url) as pg_ledger:
        assert pg_ledger.import_file(tmp_path / "sqlite.jsonl") == run_id
        assert [r.hash for r in pg_ledger.events(run_id)] == hashes
        assert pg_ledger.verify().ok
        pg_ledger.export_run(run_id, tmp_path / "postgresql.jsonl")
    exported = (tmp_path / "memory.jsonl").read_bytes()
    assert (tmp_path / "sqlite.jsonl").read_bytes() == exported
    assert (tmp_path / "postgresql.jsonl").read_bytes() == exported


# Lifecycle ------------------------------------------------------------------------------------


def test_a_raising_block_records_run_failed_and_reraises(ledger: Ledger) -> None:
    """The recorder as a context manager records RunFailed with the error, then re-raises."""
    with (  # noqa: PT012 - the block is the run under test
        pytest.raises(ValueError, match="the tool exploded"),
        ledger.record_run("fragile", input="go") as run,
    ):
        run.plan({"steps": 1})
        raise ValueError("the tool exploded")
    records = ledger.events(run.run_id)
    assert kinds(records) == ["RunStarted", "PlanProposed", "RunFailed"]
    failed = records[-1].event
    assert isinstance(failed, RunFailed)
    assert failed.error.type == "ValueError"
    assert failed.error.message == "the tool exploded"
    assert failed.event_count == 3
    assert failed.head_hash == records[-2].hash
    assert run.status == "failed"
    assert ledger.run(run.run_id).status == "failed"
    assert ledger.verify().ok


def test_an_error_inside_a_step_fails_the_step_and_the_run(ledger: Ledger) -> None:
    """A step that raises records StepCompleted(failed) before the run's RunFailed."""
    with (
        pytest.raises(KeyError),
        ledger.record_run("fragile", input="go") as run,
        run.step("lookup"),
    ):
        raise KeyError("missing")
    records = ledger.events(run.run_id)
    assert kinds(records) == ["RunStarted", "StepStarted", "StepCompleted", "RunFailed"]
    step_end = records[2].event
    assert isinstance(step_end, StepCompleted)
    assert step_end.status == "failed"
    assert step_end.error is not None
    assert step_end.error.type == "KeyError"
    assert ledger.verify().ok


def test_run_completed_carries_the_event_count_and_head_hash(ledger: Ledger) -> None:
    """RunCompleted counts itself and names the hash it is chained to."""
    with ledger.record_run("counter", input="x") as run:
        run.plan({"a": 1})
        run.delta({"seen": {"a": True}})
        run.answer("done")
    records = ledger.events(run.run_id)
    end = records[-1].event
    assert isinstance(end, RunCompleted)
    assert end.event_count == len(records) == records[-1].position == 5
    assert end.head_hash == records[-2].hash == records[-1].prev
    info = ledger.run(run.run_id)
    assert (info.status, info.event_count, info.head_hash) == ("completed", 5, records[-1].hash)


def test_a_completed_run_takes_annotations(ledger: Ledger) -> None:
    """RunAnnotated appends to a completed run; it stays completed and still verifies."""
    with ledger.record_run("reviewed", input="x") as run:
        run.answer("42")
    ended = ledger.run(run.run_id)
    record = ledger.annotate(
        run.run_id,
        author="auditor@example.org",
        note="answer checked against the source",
        reason="quarterly audit",
        about_position=2,
        labels=["ok"],
    )
    assert record.position == 4
    assert record.kind == "RunAnnotated"
    assert record.event == RunAnnotated(
        author="auditor@example.org",
        note="answer checked against the source",
        reason="quarterly audit",
        about_position=2,
        labels=["ok"],
    )
    assert ledger.events(run.run_id)[-1] == record
    info = ledger.run(run.run_id)
    assert info.status == "completed"
    assert info.event_count == 4
    assert info.ended_at == ended.ended_at, "an annotation must not move the run's end time"
    assert ledger.verify().ok


def test_a_closed_run_refuses_every_other_event(ledger: Ledger) -> None:
    """After RunCompleted or RunFailed, only RunAnnotated is accepted; nothing else is written."""
    with ledger.record_run("closed", input="x") as done:
        done.answer("ok")
    with (
        pytest.raises(OSError, match="disk full"),
        ledger.record_run("closed", input="y") as broken,
    ):
        raise OSError("disk full")
    for recorder, status in ((done, "completed"), (broken, "failed")):
        before = ledger.events(recorder.run_id)
        with pytest.raises(RunClosedError) as caught:
            recorder.plan({"too": "late"})
        assert (caught.value.run_id, caught.value.status) == (recorder.run_id, status)
        with pytest.raises(RunClosedError):
            recorder.record(SynthesisProduced(answer="late"))
        with pytest.raises(RunClosedError):
            recorder.complete()
        with pytest.raises(RunClosedError):
            ledger.append(recorder.run_id, PlanProposed(plan={"too": "late"}))
        with pytest.raises(RunClosedError):
            ledger.append(
                recorder.run_id,
                RunAnnotated(author="a", note="allowed alone"),
                PlanProposed(plan="but not with this"),
            )
        assert ledger.events(recorder.run_id) == before
        assert ledger.run(recorder.run_id).status == status
    assert ledger.verify().ok


def test_unknown_runs_raise_unknown_run_error(ledger: Ledger) -> None:
    """A malformed id and a well-formed id that was never recorded both raise UnknownRunError."""
    never = "7d4f0c8e-3b7a-4b8e-9c55-0d2f3a1b9e01"
    for run_id in ("not-a-run", never):
        with pytest.raises(UnknownRunError) as caught:
            ledger.events(run_id)
        assert caught.value.run_id == run_id
        with pytest.raises(UnknownRunError):
            ledger.run(run_id)
        with pytest.raises(UnknownRunError):
            ledger.load(run_id)
        with pytest.raises(UnknownRunError):
            ledger.annotate(run_id, author="a", note="b")
        with pytest.raises(UnknownRunError):
            ledger.verify(run_id)
    assert ledger.run_ids() == []


def test_a_users_own_ref_keys_name_no_blob(ledger: Ledger, tmp_path: Path) -> None:
    """``{"doc_ref": "x"}`` in a delta or plan is data: it verifies, exports and imports."""
    with ledger.record_run("a") as run:
        run.delta({"doc_ref": "x", "page_refs": ["a", "b"], "note": {"_ref": ""}})
        run.plan({"_ref": "sha256:not-hex"})
    assert ledger.verify(run.run_id).ok
    path = tmp_path / "run.jsonl"
    ledger.export_run(run.run_id, path)
    copy = Ledger.open("memory://")
    assert copy.import_file(path) == run.run_id
    assert copy.verify().ok
