"""Every write path is a trust boundary: limits, all-or-nothing steps, schema names, exports.

The recording API applies the ledger's `Limits` on every write path, and a recorder method that
records several events or blobs records all of them or none. A PostgreSQL ``?schema=`` is an
identifier, never SQL. An export never writes over the ledger's own database. After every
refusal the ledger holds exactly the runs it held, and they verify. (Import files are covered
by tests/test_ledger_boundaries.py, whose helpers these tests share.)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_ledger_boundaries import (
    BIG_TEXT,
    SMALL,
    holdings,
    nest,
    record_honest_run,
)

from agentledger.cli import main
from agentledger.ledger import (
    ExportRefusedError,
    ImportRefusedError,
    InvalidEventError,
    InvalidPayloadError,
    Ledger,
    LedgerError,
    LimitExceededError,
    Limits,
    SequentialIds,
    StepClock,
    StorageError,
    UsageError,
    blob_ref,
    canonical_json,
)
from agentledger.ledger.events import PlanProposed, RunCompleted, RunStarted


@pytest.fixture
def held(ledger: Ledger) -> Ledger:
    """A ledger on each backend already holding one honest run (what a refusal must not touch)."""
    record_honest_run(ledger)
    return ledger


# 3. Limits on every write path ---------------------------------------------------------------

Write = Callable[[Ledger, Any], object]
WRITES: list[Any] = [
    pytest.param(lambda ledger, _run: ledger.record_run("big", input=BIG_TEXT), id="record-run"),
    pytest.param(
        lambda ledger, _run: ledger.record_run("big", input=["y" * 1000] * 5), id="run-input-blob"
    ),
    pytest.param(lambda _ledger, run: run.plan({"text": BIG_TEXT}), id="plan"),
    pytest.param(lambda _ledger, run: run.plan(nest(8)), id="plan-depth"),
    pytest.param(lambda _ledger, run: run.delta({"a": nest(7)}), id="delta-depth"),
    pytest.param(lambda _ledger, run: run.tool("t", {"q": 1}, result="z" * 5000), id="tool"),
    pytest.param(
        lambda _ledger, run: run.model_call(
            provider="scripted", model="m", messages=[{"role": "user", "content": BIG_TEXT}]
        ),
        id="model-call",
    ),
    pytest.param(lambda _ledger, run: run.answer("w" * 5000), id="answer-blob"),
    pytest.param(lambda _ledger, run: run.put_blob({"a": nest(8)}), id="put-blob-depth"),
    pytest.param(
        lambda ledger, run: ledger.append(run.run_id, PlanProposed(plan=BIG_TEXT)), id="append"
    ),
    pytest.param(
        lambda ledger, run: ledger.annotate(run.run_id, author="a", note=BIG_TEXT), id="annotate"
    ),
    pytest.param(lambda ledger, _run: ledger.put_blobs([BIG_TEXT]), id="put-blobs"),
]


@pytest.mark.parametrize("write", WRITES)
def test_every_write_path_applies_the_ledgers_limits(ledger_url: str, write: Write) -> None:
    """Each way in refuses a value over `Limits` with the limit, the value and how to raise it."""
    with Ledger.open(ledger_url, limits=SMALL, clock=StepClock(), ids=SequentialIds()) as ledger:
        run = ledger.record_run("careful", input="small")
        run.plan({"steps": 1})
        before = holdings(ledger)
        with pytest.raises(LimitExceededError) as caught:
            write(ledger, run)
        error = caught.value
        assert isinstance(error, InvalidPayloadError)
        assert error.actual > error.allowed
        assert f"over {error.limit}={error.allowed:,}" in str(error)
        assert f"limits=Limits({error.limit}=...)" in str(error)
        run.flush()
        assert holdings(ledger) == before
        run.answer("still recording")
        run.complete()
        assert ledger.verify().ok


def test_a_value_at_max_depth_is_taken_and_one_level_more_is_not(ledger: Ledger) -> None:
    """At the default 256 levels a payload is stored and serialises; at 257 it is refused."""
    run = ledger.record_run("deep", input="go")
    run.plan(nest(254))  # {"plan": [[...1...]]}: the payload, 254 lists and the leaf
    record = ledger.events(run.run_id)[-1]
    assert record.event.model_dump(mode="json")["plan"] == nest(254)
    before = holdings(ledger)
    with pytest.raises(LimitExceededError, match=r"nested 257 levels deep, over max_depth=256"):
        run.plan(nest(255))
    with pytest.raises(LimitExceededError, match=r"256 is the deepest the ledger takes"):
        run.put_blob(nest(256))
    assert holdings(ledger) == before


@pytest.mark.parametrize("levels", [10_000, 100_000])
def test_nesting_far_past_the_recursion_limit_is_a_clean_error(ledger: Ledger, levels: int) -> None:
    """The depth checks are iterative: 100,000 levels is a `LimitExceededError`, not a crash."""
    run = ledger.record_run("deep", input="go")
    before = holdings(ledger)
    for write in (
        lambda: run.plan(nest(levels)),
        lambda: run.tool("t", nest(levels), result=1),
        lambda: run.put_blob(nest(levels)),
        lambda: ledger.put_blobs([nest(levels)]),
        lambda: ledger.record_run("deep", input=nest(levels)),
    ):
        with pytest.raises(LimitExceededError, match=f"nested {levels + 1:,} levels deep"):
            write()
    assert holdings(ledger) == before


@pytest.mark.parametrize(
    "fields",
    [
        {"max_depth": 0},
        {"max_depth": 257},
        {"max_payload_bytes": -1},
        {"max_payload_bytes": 1.5},
        {"max_depth": True},
    ],
)
def test_limits_that_cannot_work_are_a_usage_error(fields: dict[str, Any]) -> None:
    """`Limits` refuses non-positive, non-integer and too deep settings when made."""
    with pytest.raises(UsageError, match="Limits"):
        Limits(**fields)


def test_limits_are_per_ledger(tmp_path: Path) -> None:
    """Two ledgers opened with different limits each apply their own."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url, limits=SMALL) as small, Ledger.open(url) as roomy:
        assert small.limits == SMALL
        assert roomy.limits == Limits()
        roomy.put_blobs([BIG_TEXT])
        with pytest.raises(LimitExceededError):
            small.put_blobs([BIG_TEXT])
    with pytest.raises(UsageError, match="takes a Limits"):
        Ledger.open("memory://", limits={"max_depth": 3})  # type: ignore[arg-type]


# 4. A recorder method records all of its events or none --------------------------------------


class Opaque:
    """Not JSON."""


BAD_RESULTS = [
    pytest.param(float("nan"), id="nan"),
    pytest.param(Opaque(), id="object"),
    pytest.param(b"raw", id="bytes"),
    pytest.param({"text": "\ud800"}, id="surrogate"),
    pytest.param(nest(300), id="too-deep"),
    pytest.param("v" * 20_000_000, id="too-large"),
]


@pytest.mark.parametrize("result", BAD_RESULTS)
def test_a_refused_tool_result_records_neither_the_call_nor_the_result(
    ledger: Ledger, result: Any
) -> None:
    """`run.tool(..., result=bad)` raises and leaves no ToolCalled without its ToolReturned."""
    run = ledger.record_run("careful", input="go")
    before = holdings(ledger)
    with pytest.raises(InvalidPayloadError):
        run.tool("search", {"q": "x" * 5000}, result=result)
    run.flush()
    assert holdings(ledger) == before
    call_id = run.tool("search", {"q": "again"}, result={"hits": 1})
    assert call_id == "tool-1"
    run.complete()
    kinds = [r.kind for r in ledger.events(run.run_id)]
    assert kinds == ["RunStarted", "ToolCalled", "ToolReturned", "RunCompleted"]
    assert ledger.verify().ok


def test_a_refused_tool_inside_a_batch_keeps_the_batchs_earlier_events_only(
    ledger: Ledger,
) -> None:
    """In a batch the events before a refused `tool` are written, the refused pair is not."""
    run = ledger.record_run("careful", input="go")
    with pytest.raises(InvalidPayloadError), run.batch():  # noqa: PT012 - the batch is the unit
        run.plan({"step": "search"})
        run.tool("search", {"q": "x"}, result=float("inf"))
    run.complete()
    kinds = [r.kind for r in ledger.events(run.run_id)]
    assert kinds == ["RunStarted", "PlanProposed", "RunCompleted"]
    assert ledger.verify().ok


def test_a_refused_model_call_stores_none_of_its_blobs_and_keeps_the_conversation(
    ledger: Ledger,
) -> None:
    """A model call whose usage is refused leaves no blob for a later flush; the chain goes on.

    Before, its new message nodes stayed staged and were written with whatever came next.
    """
    run = ledger.record_run("chat", input="go")
    first = [{"role": "user", "content": "hello"}]
    run.model_call(provider="scripted", model="m", messages=first, response={"content": "hi"})
    second = [*first, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]
    nodes, parent = [], None
    for message in second:
        parent = blob_ref(canonical_json({"message": message, "parent_ref": parent}))
        nodes.append(parent)
    with pytest.raises(InvalidEventError, match="input_tokens"):
        run.model_call(
            provider="scripted", model="m", messages=second, usage={"input_tokens": -(2**60)}
        )
    run.plan({"next": "try again"})  # flushes whatever is staged
    assert ledger.blobs(nodes[1:]) == {}
    record = run.model_call(provider="scripted", model="m", messages=second)
    run.complete()
    assert record.messages_ref == nodes[-1]
    assert ledger.conversation(record.messages_ref) == second
    assert ledger.verify().ok


def test_a_failed_step_is_recorded_whatever_its_exception_holds(ledger: Ledger) -> None:
    """An exception text JSON cannot carry (a lone surrogate) still closes the step and run.

    Before, recording the failure raised at the flush, which dropped the step's events and
    replaced the caller's exception.
    """
    with (  # noqa: PT012 - the run is the unit
        pytest.raises(ValueError, match="bad byte"),
        ledger.record_run("fragile", input="go") as run,
        run.step("parse"),
    ):
        run.plan({"parse": True})
        raise ValueError("bad byte \udcff")
    records = ledger.events(run.run_id)
    kinds = [r.kind for r in records]
    assert kinds == ["RunStarted", "StepStarted", "PlanProposed", "StepCompleted", "RunFailed"]
    assert records[3].payload["error"]["message"] == "bad byte \\udcff"
    assert ledger.verify().ok


def test_append_refuses_events_that_would_break_the_chain(ledger: Ledger) -> None:
    """`append` refuses a second RunStarted, and an end whose count or head is not the chain's."""
    run_id = record_honest_run(ledger)
    live = ledger.record_run("open", input="go")
    before = holdings(ledger)
    with pytest.raises(InvalidEventError, match="RunStarted cannot be at"):
        ledger.append(live.run_id, RunStarted(agent="again"))
    with pytest.raises(InvalidEventError, match="a run starts once"):
        live.record(RunStarted(agent="again"))
    with pytest.raises(InvalidEventError, match="event_count=99"):
        ledger.append(live.run_id, RunCompleted(event_count=99, head_hash="0" * 64))
    with pytest.raises(InvalidEventError, match="the ledger takes catalogue events"):
        ledger.append(run_id, "a note")  # type: ignore[arg-type]
    assert holdings(ledger) == before


# 5. The PostgreSQL schema is an identifier ---------------------------------------------------

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/test"
"""Nothing listens on port 1: a URL refused here was refused before connecting."""


@pytest.mark.parametrize(
    "schema",
    [
        'x";CREATE TABLE public.pwned(a int);--',
        "a b",
        "1abc",
        "Mixed",
        "s" * 64,
        "caf\u00e9",
        "x%22%3BDROP",
    ],
)
def test_a_schema_that_is_not_a_plain_identifier_is_refused_before_connecting(
    schema: str,
) -> None:
    """Only ``[a-z_][a-z0-9_]{0,62}`` is taken; anything else is a `StorageError` naming it."""
    with pytest.raises(StorageError, match="is not a plain identifier"):
        Ledger.open(f"{UNREACHABLE}?schema={schema}")


@pytest.mark.parametrize("query", ["sslmode=require", "schema=a&schema=b", "options=-csearch_path"])
def test_url_options_the_ledger_would_ignore_are_refused(query: str) -> None:
    """An option the ledger does not use (sslmode...) is refused, not silently dropped."""
    with pytest.raises(StorageError, match=r"unsupported URL option|more than once"):
        Ledger.open(f"{UNREACHABLE}?{query}")


@pytest.mark.postgres
def test_the_schema_injection_creates_nothing_on_postgresql(pg_url: str) -> None:
    """The ``?schema=`` that used to create ``public.pwned_...`` is refused; nothing is created."""
    base = pg_url.split("?", 1)[0]
    table = f"pwned_{os.urandom(4).hex()}"
    with pytest.raises(StorageError, match="is not a plain identifier"):
        Ledger.open(f'{base}?schema=x";CREATE TABLE public.{table}(a int);--')
    with psycopg.connect(base) as conn:
        assert conn.execute("SELECT to_regclass(%s)", [f"public.{table}"]).fetchone() == (None,)
        found = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'x%%;%%'")
        assert found.fetchone() == (0,)
    with Ledger.open(pg_url) as ledger:  # a plain identifier still opens, quoted
        record_honest_run(ledger)
        assert ledger.verify().ok
        assert ledger.sqlalchemy_url()[1] == pg_url.split("schema=", 1)[1]


# 6. An export never writes over the ledger ---------------------------------------------------


def _file_digests(database: Path) -> dict[str, str]:
    """SHA-256 of the database file and its WAL, as they are now.

    (Not the ``-shm`` file: it is the WAL's shared-memory index, which every read updates.)
    """
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(database.parent.glob(database.name + "*"))
        if not path.name.endswith("-shm")
    }


Target = Callable[[Path, Path], Path]
TARGETS: list[Any] = [
    pytest.param(lambda db, _tmp: db, id="the-database"),
    pytest.param(lambda db, _tmp: Path(f"{db}-wal"), id="its-wal"),
    pytest.param(lambda db, _tmp: Path(f"{db}-shm"), id="its-shm"),
    pytest.param(lambda db, _tmp: Path(f"{db}-journal"), id="its-journal"),
    pytest.param(lambda db, _tmp: db.parent / "sub" / ".." / db.name, id="dotdot-spelling"),
    pytest.param(lambda db, _tmp: Path(os.path.relpath(db)), id="relative-spelling"),
    pytest.param(lambda db, tmp: _link(tmp / "link.jsonl", db, hard=False), id="symlink"),
    pytest.param(
        lambda db, tmp: _link(tmp / "wal.jsonl", Path(f"{db}-wal"), hard=False), id="symlink-to-wal"
    ),
    pytest.param(lambda db, tmp: _link(tmp / "hard.jsonl", db, hard=True), id="hard-link"),
]


def _link(link: Path, target: Path, *, hard: bool) -> Path:
    if hard:
        link.hardlink_to(target)
    else:
        link.symlink_to(target)
    return link


@pytest.mark.parametrize("target", TARGETS)
def test_an_export_onto_the_ledgers_own_files_is_refused_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: Target
) -> None:
    """However the path is spelled, exporting over the database or its WAL files is refused."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    database = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{database}") as ledger:
        run_id = record_honest_run(ledger)
        before = holdings(ledger)
        digests = _file_digests(database)
        path = target(database, tmp_path / "out")
        with pytest.raises(ExportRefusedError, match="this ledger's own database file"):
            ledger.export_run(run_id, path)
        assert _file_digests(database) == digests
        assert holdings(ledger) == before
    with Ledger.open(f"sqlite:///{database}") as reopened:
        assert holdings(reopened) == before


def test_a_ledger_opened_by_a_relative_path_still_knows_its_file_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database path is made absolute when the ledger opens, so a later chdir hides nothing."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    with Ledger.open("sqlite:///ledger.db") as ledger:
        run_id = record_honest_run(ledger)
        digests = _file_digests(tmp_path / "ledger.db")
        monkeypatch.chdir(tmp_path / "elsewhere")
        with pytest.raises(ExportRefusedError, match="this ledger's own database file"):
            ledger.export_run(run_id, tmp_path / "ledger.db")
        assert _file_digests(tmp_path / "ledger.db") == digests
        assert ledger.verify().ok


def test_the_export_command_refuses_the_database_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agentledger export RUN -o <the ledger's file>` exits 2 and the file is unchanged."""
    database = tmp_path / "ledger.db"
    url = f"sqlite:///{database}"
    with Ledger.open(url) as ledger:
        run_id = record_honest_run(ledger)
    digest = _file_digests(database)["ledger.db"]
    assert main(["--db", url, "export", run_id, "-o", str(database)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentledger: ExportRefusedError: refused to export to")
    assert _file_digests(database)["ledger.db"] == digest
    with Ledger.open(url) as ledger:
        assert ledger.run_ids() == [run_id]
        assert ledger.verify().ok


def test_an_export_that_cannot_be_written_is_a_ledger_error(held: Ledger, tmp_path: Path) -> None:
    """A directory as the target is an `ExportRefusedError`, not an OSError traceback."""
    (run_id,) = held.run_ids()
    with pytest.raises(ExportRefusedError, match="cannot write the file"):
        held.export_run(run_id, tmp_path)
    assert held.verify().ok


def test_the_new_errors_sit_in_the_ledger_error_tree() -> None:
    """One ``except LedgerError`` still catches every refusal."""
    assert issubclass(LimitExceededError, InvalidPayloadError)
    assert issubclass(ExportRefusedError, LedgerError)
    assert issubclass(ImportRefusedError, LedgerError)
