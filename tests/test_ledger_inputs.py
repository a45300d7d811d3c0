"""Bad input gets a clear error, and alters nothing already recorded.

Values that are not JSON-native under the hashing rules (NaN, infinities, bytes, sets, objects,
tuples, integers beyond 2^53, lone surrogates), deltas that are not objects, events their schema
refuses, unknown runs, URLs the ledger cannot open and read-only databases. Each raises a named
`LedgerError` carrying the offending path or URL, and the run's events and verify result are
exactly what they were before the call; the CLI prints ``agentledger: ...`` and exits 2.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentledger.cli import main
from agentledger.ledger import (
    InvalidEventError,
    InvalidPayloadError,
    Ledger,
    LedgerError,
    RunRecorder,
    SequentialIds,
    StepClock,
    StorageError,
    UnknownRunError,
    UnknownSchemeError,
    UsageError,
)

# Helpers --------------------------------------------------------------------------------------


def snapshot(ledger: Ledger, run_id: str) -> tuple[Any, ...]:
    """Everything an auditor sees of a run: envelopes, index row, and the verify result."""
    report = ledger.verify(run_id)
    return (
        [r.envelope() for r in ledger.events(run_id)],
        ledger.run(run_id),
        report.ok,
        [str(p) for p in report.problems],
    )


def started_run(ledger: Ledger) -> RunRecorder:
    """A running run with a few events already recorded."""
    run = ledger.record_run("careful", input={"question": "what is safe to record?"})
    run.plan({"steps": ["search"]})
    run.tool("search", {"q": "json"}, result={"hits": 3})
    run.delta({"hits": {"search": 3}})
    return run


@pytest.fixture
def memory() -> Iterator[Ledger]:
    """A memory ledger: payload checks happen before storage, so one backend shows them."""
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("inputs")) as ledger:
        yield ledger


class Opaque:
    """An arbitrary object, which is not JSON."""


BAD_VALUES = [
    pytest.param(float("nan"), "not a finite number", id="nan"),
    pytest.param(float("inf"), "not a finite number", id="infinity"),
    pytest.param(float("-inf"), "not a finite number", id="minus-infinity"),
    pytest.param(b"\x00\xffraw", "bytes", id="bytes"),
    pytest.param(bytearray(b"raw"), "bytes", id="bytearray"),
    pytest.param({1, 2}, "set", id="set"),
    pytest.param(Opaque(), "Opaque", id="object"),
    pytest.param((1, 2), "tuple", id="tuple"),
    pytest.param(2**53, "2^53", id="two-to-the-53"),
    pytest.param(-(2**53), "2^53", id="minus-two-to-the-53"),
    pytest.param(10**30, "2^53", id="ten-to-the-30"),
    pytest.param("\ud800", "surrogate", id="lone-surrogate"),
    pytest.param("ok \udfff then", "surrogate", id="lone-low-surrogate"),
    pytest.param({1: "int key"}, "key", id="int-key"),
    pytest.param({"\udc00": 1}, "surrogate", id="surrogate-key"),
]

Entry = Callable[[Ledger, RunRecorder, Any], object]
ENTRY_POINTS: list[Any] = [
    pytest.param(
        lambda _ledger, run, slot: run.tool_result("tool-1", ok=True, type="search", data=slot),
        "",
        id="tool-result",
    ),
    pytest.param(lambda _ledger, run, slot: run.tool_call("search", slot), "", id="tool-arguments"),
    pytest.param(lambda _ledger, run, slot: run.delta(slot), "", id="delta"),
    pytest.param(lambda _ledger, run, slot: run.plan(slot), "", id="plan"),
    pytest.param(
        lambda _ledger, run, slot: run.model_call(
            provider="scripted", model="m", messages=[{"role": "user", **slot}]
        ),
        "/message",
        id="model-message",
    ),
    pytest.param(
        lambda ledger, _run, slot: ledger.record_run("careful", input=slot), "", id="run-input"
    ),
]


# Payload values -------------------------------------------------------------------------------


@pytest.mark.parametrize(("enter", "prefix"), ENTRY_POINTS)
@pytest.mark.parametrize(("value", "reason"), BAD_VALUES)
def test_a_value_that_is_not_json_native_is_refused_by_path(
    memory: Ledger, enter: Entry, prefix: str, value: Any, reason: str
) -> None:
    """Every way in refuses a non-JSON value with an error naming where it sits and why."""
    run = started_run(memory)
    before = snapshot(memory, run.run_id)
    runs_before = memory.run_ids()
    with pytest.raises((InvalidPayloadError, InvalidEventError)) as caught:
        enter(memory, run, {"slot": [value]})
    message = str(caught.value)
    assert f"{prefix}/slot/0" in message
    assert reason.lower() in message.lower()
    if isinstance(caught.value, InvalidPayloadError):
        assert caught.value.path.endswith(f"{prefix}/slot/0")
    assert snapshot(memory, run.run_id) == before
    assert memory.run_ids() == runs_before
    position = run.answer("still recording")
    assert position == len(before[0]) + 1
    assert memory.verify().ok


def test_the_largest_safe_integers_are_accepted(memory: Ledger) -> None:
    """±(2^53 - 1) are inside the rule and round-trip exactly."""
    run = started_run(memory)
    run.plan({"max": 2**53 - 1, "min": -(2**53 - 1)})
    assert memory.events(run.run_id)[-1].payload["plan"] == {"max": 2**53 - 1, "min": -(2**53 - 1)}
    assert memory.verify().ok


@pytest.mark.parametrize("number", [1e16, 123456789012345680.0])
def test_a_large_integral_float_is_refused_or_round_trips(ledger: Ledger, number: float) -> None:
    """A float beyond 2^53 is either refused up front or stored so that it reads and verifies."""
    run = started_run(ledger)
    before = snapshot(ledger, run.run_id)
    refusal: InvalidPayloadError | None = None
    try:
        run.plan({"budget": number})
    except InvalidPayloadError as refused:
        refusal = refused
    if refusal is not None:
        assert refusal.path.endswith("/budget")
        assert snapshot(ledger, run.run_id) == before
        return
    record = ledger.events(run.run_id)[-1]
    assert record.event.model_dump()["plan"] == {"budget": number}
    report = ledger.verify()
    assert report.ok, [str(p) for p in report.problems]


TYPED_FIELD_VALUES = [
    pytest.param({"usage": {"input_tokens": 2**53}}, "Usage event: input_tokens", id="usage-2^53"),
    pytest.param(
        {"usage": {"output_tokens": -(2**60)}}, "Usage event: output_tokens", id="usage-neg"
    ),
    pytest.param({"latency_ms": float("nan")}, "/latency_ms", id="latency-nan"),
    pytest.param({"cost_usd": float("inf")}, "/cost_usd", id="cost-infinite"),
    pytest.param({"finish_reason": "stop\ud800"}, "/finish_reason", id="finish-surrogate"),
]


@pytest.mark.parametrize(("fields", "where"), TYPED_FIELD_VALUES)
def test_a_typed_field_outside_the_hashing_rules_is_refused(
    memory: Ledger, fields: dict[str, Any], where: str
) -> None:
    """Typed fields follow the JSON rules too: the error names the field; nothing is written."""
    run = started_run(memory)
    before = snapshot(memory, run.run_id)
    call: dict[str, Any] = {"provider": "scripted", "model": "m", "messages": [], **fields}
    with pytest.raises((InvalidPayloadError, InvalidEventError)) as caught:
        run.model_call(**call)
    assert where in str(caught.value)
    assert snapshot(memory, run.run_id) == before
    run.answer("still recording")
    assert memory.verify().ok


def test_a_bad_payload_on_every_backend_alters_nothing(ledger: Ledger) -> None:
    """On memory, SQLite and PostgreSQL a refused value leaves the run exactly as it was."""
    run = started_run(ledger)
    before = snapshot(ledger, run.run_id)
    with pytest.raises(InvalidPayloadError):
        run.delta({"temperature": float("nan")})
    with pytest.raises(InvalidPayloadError):
        run.tool_result("tool-9", ok=True, type="search", data={"text": "\ud800"})
    with pytest.raises(InvalidPayloadError):
        run.plan({"tokens": 2**64})
    assert snapshot(ledger, run.run_id) == before
    run.complete()
    assert [r.position for r in ledger.events(run.run_id)] == list(range(1, len(before[0]) + 2))
    assert ledger.verify().ok


def test_a_refused_value_inside_a_batch_is_never_written(ledger: Ledger) -> None:
    """A refused event in a batch is dropped; the batch's good events are written once, in order.

    A batch groups a step's events into one transaction and, like `step`, still records what
    happened before the block raised. The refused event itself never reaches the store, and
    nothing of the batch turns up again at a later flush.
    """
    run = started_run(ledger)
    count = len(ledger.events(run.run_id))
    with pytest.raises(InvalidPayloadError), run.batch():  # noqa: PT012 - the batch is the unit
        run.plan({"before the refusal": True})
        run.delta({"text": "\ud800"})
        run.plan({"after the refusal": True})
    run.answer("after the batch")
    run.complete()
    records = ledger.events(run.run_id)
    plans = [r.payload["plan"] for r in records if r.kind == "PlanProposed"]
    assert plans.count({"before the refusal": True}) <= 1
    assert {"after the refusal": True} not in plans
    assert not any(r.kind == "DeltaApplied" and "text" in r.payload["patch"] for r in records)
    tail = [r.kind for r in records[count:] if r.kind != "PlanProposed"]
    assert tail == ["SynthesisProduced", "RunCompleted"]
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    assert ledger.verify().ok


@pytest.mark.parametrize("patch", [[1, 2], "set x", None, 3, True], ids=repr)
def test_a_delta_that_is_not_an_object_is_refused(memory: Ledger, patch: Any) -> None:
    """A merge patch recorded as a delta must be a JSON object at the top level."""
    run = started_run(memory)
    before = snapshot(memory, run.run_id)
    with pytest.raises(InvalidPayloadError, match="JSON object"):
        run.delta(patch)
    assert snapshot(memory, run.run_id) == before


# Schemas --------------------------------------------------------------------------------------

SCHEMA_VIOLATIONS: list[Any] = [
    pytest.param(lambda run: run.policy("maybe"), "PolicyDecided", "decision", id="policy"),
    pytest.param(
        lambda run: run.guardrail("budget", action="stop", message="m", bogus=1),
        "GuardrailTripped",
        "bogus",
        id="guardrail-extra-field",
    ),
    pytest.param(
        lambda run: run.tool_result("tool-1", ok="yes", type="search"),
        "ToolReturned",
        "ok",
        id="tool-result-ok",
    ),
    pytest.param(
        lambda run: run.model_call(
            provider="p", model="m", messages=[{"role": "user"}], usage={"input_tokens": "many"}
        ),
        "ModelCalled",
        "input_tokens",
        id="model-usage",
    ),
]


@pytest.mark.parametrize(("call", "kind", "field"), SCHEMA_VIOLATIONS)
def test_a_helper_given_a_value_its_schema_refuses_raises_invalid_event_error(
    memory: Ledger, call: Callable[[RunRecorder], object], kind: str, field: str
) -> None:
    """The recorder's helpers report schema violations as InvalidEventError, not pydantic's."""
    run = started_run(memory)
    before = snapshot(memory, run.run_id)
    with pytest.raises(InvalidEventError) as caught:
        call(run)
    assert field in caught.value.details
    assert caught.value.kind in {kind, "Usage"}
    assert snapshot(memory, run.run_id) == before


def test_run_tags_given_as_one_string_are_refused(memory: Ledger) -> None:
    """``tags="nightly"`` is a mistake for ``tags=["nightly"]``, not seven one-letter tags."""
    with pytest.raises(UsageError):
        memory.record_run("careful", input="x", tags="nightly")
    assert memory.run_ids() == []


def test_recording_something_that_is_not_an_event_is_a_usage_error(memory: Ledger) -> None:
    """`record` takes catalogue events; anything else is the caller's mistake, said plainly."""
    run = started_run(memory)
    before = snapshot(memory, run.run_id)
    with pytest.raises(UsageError):
        run.record({"kind": "PlanProposed", "plan": {}})  # type: ignore[arg-type]
    assert snapshot(memory, run.run_id) == before


# Unknown runs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["not-a-run", "0d7c6f8e-2f1b-4c1e-8a57-0c3f7d9e1a22"])
def test_an_unknown_run_id_raises_and_alters_nothing(ledger: Ledger, run_id: str) -> None:
    """events, run and annotate on an unknown id raise UnknownRunError naming it."""
    run = started_run(ledger)
    before = snapshot(ledger, run.run_id)
    calls: list[Callable[[], object]] = [
        lambda: ledger.events(run_id),
        lambda: ledger.run(run_id),
        lambda: ledger.annotate(run_id, author="a", note="n"),
        lambda: ledger.export_run(run_id, os.devnull),
    ]
    for call in calls:
        with pytest.raises(UnknownRunError) as caught:
            call()
        assert caught.value.run_id == run_id
        assert run_id in str(caught.value)
    assert snapshot(ledger, run.run_id) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "not-a-run"],
        ["show", "0d7c6f8e-2f1b-4c1e-8a57-0c3f7d9e1a22"],
        ["verify", "0d7c6f8e"],
        ["annotate", "0d7c6f8e-2f1b-4c1e-8a57-0c3f7d9e1a22", "--author", "a", "--note", "n"],
        ["export", "nope", "-o", os.devnull],
    ],
    ids=["show-name", "show-uuid", "verify-prefix", "annotate", "export"],
)
def test_the_cli_names_an_unknown_run_and_exits_2(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """The CLI prints ``agentledger: ...`` naming the run it could not find, and exits 2."""
    with Ledger.open(sqlite_url) as ledger:
        run = started_run(ledger)
        before = snapshot(ledger, run.run_id)
    capsys.readouterr()
    assert main(["--db", sqlite_url, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentledger: ")
    assert argv[1] in err
    with Ledger.open(sqlite_url) as ledger:
        assert snapshot(ledger, run.run_id) == before


# URLs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["foo://x", "mysql://root@db/ledger", "ledger.db"])
def test_an_unknown_scheme_is_refused(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A URL the ledger cannot open raises UnknownSchemeError naming it; the CLI exits 2."""
    with pytest.raises(UnknownSchemeError) as caught:
        Ledger.open(url)
    assert caught.value.url == url
    assert url in str(caught.value)
    if "://" not in url:
        return  # the CLI takes a bare path as a SQLite file (tests/test_cli_edges.py)
    assert main(["--db", url, "runs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentledger: UnknownSchemeError")
    assert url in err


def test_a_sqlite_url_in_a_missing_directory_names_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SQLite file in a directory that does not exist is a StorageError naming the directory."""
    missing = tmp_path / "no" / "such" / "dir"
    url = f"sqlite:///{missing / 'ledger.db'}"
    with pytest.raises(StorageError) as caught:
        Ledger.open(url)
    assert str(missing) in caught.value.reason
    assert caught.value.url == url
    assert main(["--db", url, "runs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentledger: StorageError")
    assert str(missing) in err
    assert not (tmp_path / "no").exists()


def test_a_malformed_sqlite_url_is_a_storage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """``sqlite://file.db`` (two slashes) says how to spell a SQLite URL."""
    with pytest.raises(StorageError, match="sqlite:///"):
        Ledger.open("sqlite://ledger.db")
    assert main(["--db", "sqlite://ledger.db", "runs"]) == 2
    assert capsys.readouterr().err.startswith("agentledger: StorageError")


# Read-only databases --------------------------------------------------------------------------

# Root ignores file modes (CAP_DAC_OVERRIDE), and os.access answers yes for root too. So when the
# tests run as root, the child process that opens the ledger first drops CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH from its bounding set, then execs Python: the exec'd process keeps uid 0
# but the kernel enforces file modes on it, exactly as for an ordinary user.
_DROP_AND_EXEC = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        sys.exit(77)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""

_OPEN = """
import sys
from agentledger.ledger import Ledger, LedgerError, StorageError
try:
    with Ledger.open(sys.argv[1]) as ledger, ledger.record_run("writer", input="x") as run:
        run.plan({"written": True})
except LedgerError as e:
    print(type(e).__name__, isinstance(e, StorageError), e)
    sys.exit(3)
print("written")
"""


def unprivileged(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` so that file permissions apply, even when the tests run as root."""
    command = [sys.executable, *args]
    if os.geteuid() == 0:
        command = [sys.executable, "-c", _DROP_AND_EXEC, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode == 77:
        pytest.skip("running as root without CAP_SETPCAP: cannot make file modes apply to root")
    return done


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory outside pytest's private tmp tree (0700), restored to writable afterwards."""
    path = Path(tempfile.mkdtemp(prefix="agentledger-ro-"))
    yield path
    for item in [path, *path.iterdir()]:
        item.chmod(stat.S_IRWXU)
    for item in path.iterdir():
        item.unlink()
    path.rmdir()


def existing_ledger(directory: Path) -> tuple[str, Path, tuple[Any, ...]]:
    """A SQLite ledger with one completed run; returns its URL, file and the run's snapshot."""
    path = directory / "ledger.db"
    url = f"sqlite:///{path}"
    with Ledger.open(url) as ledger:
        run = started_run(ledger)
        run.complete()
        return url, path, snapshot(ledger, run.run_id)


@pytest.mark.slow
def test_a_read_only_database_file_is_a_storage_error(shared_dir: Path) -> None:
    """A ledger file without write permission is refused with StorageError naming the file.

    Opening for writing, that is: the CLI's read commands open it read-only and work.
    """
    url, path, before = existing_ledger(shared_dir)
    path.chmod(0o444)
    done = unprivileged(["-c", _OPEN, url])
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("ReadOnlyDatabaseError True")  # a StorageError
    assert str(path) in done.stdout
    assert "read-only" in done.stdout
    read = unprivileged(["-m", "agentledger.cli", "--db", url, "runs"])
    assert read.returncode == 0, read.stderr  # read commands open the file read-only
    assert before[1].run_id in read.stdout
    cli = unprivileged(
        ["-m", "agentledger.cli", "--db", url, "annotate", "x", "--author", "a", "--note", "n"]
    )
    assert cli.returncode == 2
    assert cli.stderr.startswith("agentledger: ReadOnlyDatabaseError")
    assert "read-only" in cli.stderr
    path.chmod(0o644)
    with Ledger.open(url) as ledger:
        assert snapshot(ledger, before[1].run_id) == before


@pytest.mark.slow
def test_a_read_only_directory_is_a_storage_error(shared_dir: Path) -> None:
    """A new ledger in a directory without write permission is refused, naming the directory."""
    shared_dir.chmod(0o555)
    url = f"sqlite:///{shared_dir / 'ledger.db'}"
    done = unprivileged(["-c", _OPEN, url])
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("StorageError")
    assert str(shared_dir) in done.stdout
    cli = unprivileged(["-m", "agentledger.cli", "--db", url, "runs"])
    assert cli.returncode == 2
    assert cli.stderr.startswith("agentledger: StorageError")
    assert str(shared_dir) in cli.stderr
    assert list(shared_dir.iterdir()) == []


@pytest.mark.slow
def test_an_existing_ledger_in_a_read_only_directory_is_a_storage_error(shared_dir: Path) -> None:
    """SQLite cannot write its journal next to the file: a StorageError, not a raw sqlite3 error.

    Read commands still read it (opened immutable: nothing can change a file there).
    """
    url, _, before = existing_ledger(shared_dir)
    shared_dir.chmod(0o555)
    done = unprivileged(["-c", _OPEN, url])
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("StorageError")
    read = unprivileged(["-m", "agentledger.cli", "--db", url, "verify"])
    assert read.returncode == 0, read.stderr  # read commands read it as an immutable copy
    assert read.stdout.startswith("intact: 1 run,")
    cli = unprivileged(
        ["-m", "agentledger.cli", "--db", url, "annotate", "x", "--author", "a", "--note", "n"]
    )
    assert cli.returncode == 2
    assert cli.stderr.startswith("agentledger: StorageError")
    shared_dir.chmod(0o755)
    with Ledger.open(url) as ledger:
        assert snapshot(ledger, before[1].run_id) == before


def test_errors_form_one_tree_under_ledger_error() -> None:
    """Every error the tests above expect is a LedgerError, so one except clause catches all."""
    for error in (
        InvalidEventError,
        InvalidPayloadError,
        StorageError,
        UnknownRunError,
        UnknownSchemeError,
        UsageError,
    ):
        assert issubclass(error, LedgerError)
