"""Every way into the ledger is a trust boundary: what each refuses; a refusal alters nothing.

An export file is untrusted input: each blob must hash to its ref, each event must be a
well-formed envelope that the event catalogue accepts (older versions upcast), at positions
1, 2, 3... in order, within the ledger's `Limits`; a refusal names the line and the field. The
recording API applies the same `Limits` on every write path, and a recorder method that records
several events or blobs records all of them or none. A PostgreSQL ``?schema=`` is an identifier,
never SQL. An export never writes over the ledger's own database. After every refusal the ledger
holds exactly the runs it held, and they verify.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentledger.cli import main
from agentledger.ledger import (
    ImportRefusedError,
    Ledger,
    Limits,
    SequentialIds,
    StepClock,
    blob_ref,
    canonical_json,
    envelope_hash,
)

GOLDEN = Path(__file__).parent / "golden"
BIG_TEXT = "x" * 3000
"""Over the 2,000-byte cap of `SMALL` and under `INLINE_LIMIT`, so it stays inline."""
SMALL = Limits(max_payload_bytes=2000, max_depth=8)


# Helpers --------------------------------------------------------------------------------------


def nest(levels: int, leaf: Any = 1) -> Any:
    """`leaf` inside `levels` lists: ``nest(2)`` is ``[[1]]`` (3 levels deep, the leaf counted)."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def holdings(ledger: Ledger) -> tuple[Any, ...]:
    """Everything an auditor sees of a ledger: each run's envelopes, the index, and verify."""
    report = ledger.verify()
    runs = {run_id: [r.envelope() for r in ledger.events(run_id)] for run_id in ledger.run_ids()}
    return runs, ledger.runs(), report.ok, [str(p) for p in report.problems]


def record_honest_run(ledger: Ledger) -> str:
    """A completed run with a conversation, a tool result stored as a blob, a delta, an answer."""
    with ledger.record_run("careful", input={"question": "what is safe?"}, tags=["eval"]) as run:
        run.model_call(
            provider="scripted",
            model="m",
            messages=[{"role": "user", "content": "what is safe?"}],
            response={"role": "assistant", "content": "let me look"},
            usage={"input_tokens": 5, "output_tokens": 3, "total_tokens": 8},
        )
        run.tool("search", {"q": "safe"}, result={"hits": ["row"] * 1000})
        run.delta({"hits": {"search": 1000}})
        run.answer("Recording is safe.")
    return run.run_id


@pytest.fixture
def held(ledger: Ledger) -> Ledger:
    """A ledger on each backend already holding one honest run (what a refusal must not touch)."""
    record_honest_run(ledger)
    return ledger


class ExportFile:
    """An export file taken apart: header, event envelopes and blob lines, to forge from."""

    def __init__(self, path: Path) -> None:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        self.header: dict[str, Any] = lines[0]
        self.events: list[dict[str, Any]] = [x for x in lines[1:] if x["type"] == "event"]
        self.blobs: list[dict[str, Any]] = [x for x in lines[1:] if x["type"] == "blob"]

    def event(self, kind: str) -> dict[str, Any]:
        """The first event of `kind`."""
        return next(e for e in self.events if e["kind"] == kind)

    def line_of(self, event: dict[str, Any]) -> int:
        """The file line an event is written on (the header is line 1)."""
        return 2 + next(i for i, e in enumerate(self.events) if e is event)

    def rechain(self) -> None:
        """Re-hash every event, as a forger would, so that the hash chain itself verifies."""
        prev = "0" * 64
        for position, event in enumerate(self.events, start=1):
            event["prev"] = prev
            payload = event["payload"]
            if event["kind"] in {"RunCompleted", "RunFailed"} and isinstance(payload, dict):
                payload.update(event_count=position, head_hash=prev)
            body = {k: v for k, v in event.items() if k not in {"type", "hash"}}
            event["hash"] = prev = envelope_hash(body)

    def write(self, path: Path, *, replace: tuple[str, str] | None = None) -> Path:
        """Write the file; `replace` swaps a token in its text (for JSON `json` cannot dump)."""
        header = {**self.header, "events": len(self.events), "blobs": len(self.blobs)}
        lines = [json.dumps(x, ensure_ascii=False) for x in (header, *self.events, *self.blobs)]
        text = "\n".join(lines) + "\n"
        if replace is not None:
            text = text.replace(*replace)
        path.write_text(text, encoding="utf-8")
        return path


@pytest.fixture
def source(tmp_path: Path) -> ExportFile:
    """An honest export of one run recorded in a separate memory ledger."""
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("source")) as other:
        run_id = record_honest_run(other)
        other.export_run(run_id, tmp_path / "honest.jsonl")
    return ExportFile(tmp_path / "honest.jsonl")


def refused_import(ledger: Ledger, path: Path) -> ImportRefusedError:
    """Import `path`, expecting a refusal that leaves the ledger exactly as it was."""
    before = holdings(ledger)
    with pytest.raises(ImportRefusedError) as caught:
        ledger.import_file(path)
    assert holdings(ledger) == before
    assert before[2], "the ledger verified before the refused import"
    for run_id in ledger.run_ids():  # what stats, show, replay and projections read
        assert all(r.event.kind == r.kind for r in ledger.events(run_id))
    return caught.value


# 1. Blobs must hash to their refs ------------------------------------------------------------


def test_a_blob_line_that_does_not_hash_to_its_ref_is_refused_and_poisons_nothing(
    held: Ledger, source: ExportFile, tmp_path: Path
) -> None:
    """A blob line under another value's ref is refused by line; a later run stores the truth.

    Before the check the poisoned line was written (nothing in the run refers to it, so verify
    never looked), and a later honest run recording that value saw the poison and failed verify.
    """
    honest = {"prompt": "You are careful."}
    ref = blob_ref(canonical_json(honest))
    source.blobs.append({"type": "blob", "ref": ref, "content": {"prompt": "poison"}})
    path = source.write(tmp_path / "poisoned.jsonl")
    line = 1 + len(source.events) + len(source.blobs)
    error = refused_import(held, path)
    assert f"line {line}: blob content hashes to sha256:" in str(error)
    assert f"not to its ref {ref}" in str(error)
    with held.record_run("later", input="reuse the prompt") as run:
        stored = run.put_blob(honest)
        run.plan({"prompt_ref": stored})
    assert stored == ref
    assert held.blob(ref) == honest
    assert held.verify().ok


def test_a_blob_line_with_a_malformed_ref_is_refused(
    held: Ledger, source: ExportFile, tmp_path: Path
) -> None:
    """A ref that is not ``sha256:`` and 64 hex digits is named with its line and field."""
    source.blobs[0]["ref"] = "sha256:ABC"
    error = refused_import(held, source.write(tmp_path / "bad-ref.jsonl"))
    assert f"line {2 + len(source.events)}: field 'ref'" in str(error)


# 2. Events must be what the catalogue accepts ------------------------------------------------

Forgery = Callable[[ExportFile], tuple[dict[str, Any], str]]


def _list_payload(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("DeltaApplied")
    event["payload"] = [1, 2, 3]
    return event, "field 'payload' must be an object"


def _string_version(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("DeltaApplied")
    event["version"] = "1"
    return event, "field 'version' must be 1 for DeltaApplied, got str '1'"


def _future_version(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("ToolReturned")
    event["version"] = 3
    return event, "field 'version' must be 1 to 2 for ToolReturned, got int 3"


def _unknown_kind(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("DeltaApplied")
    event["kind"] = "RunExploded"
    return event, "field 'kind' must be an event kind"


def _model_called_bad_usage(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("ModelCalled")
    event["payload"]["usage"]["input_tokens"] = "many"
    return event, "field 'payload.usage.input_tokens'"


def _model_called_without_messages(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("ModelCalled")
    del event["payload"]["messages_ref"]
    return event, "field 'payload.messages_ref': Field required"


def _unknown_payload_field(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("SynthesisProduced")
    event["payload"]["confidence"] = 0.9
    return event, "field 'payload.confidence'"


def _unreadable_old_version(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("ToolReturned")
    event["version"] = 1
    event["payload"].pop("latency_ms", None)
    event["payload"]["latency_s"] = "slow"
    return event, "field 'payload': cannot be read as version 1"


def _duplicated_line(f: ExportFile) -> tuple[dict[str, Any], str]:
    original = f.event("DeltaApplied")
    index = f.events.index(original)
    duplicate = copy.deepcopy(original)
    f.events.insert(index + 1, duplicate)
    return duplicate, f"field 'position' must be {index + 2}: events must be in order"


def _second_run_started(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("DeltaApplied")
    event["kind"] = "RunStarted"
    event["payload"] = {"agent": "impostor"}
    return event, "a run starts with RunStarted, once"


def _chain_of_a_list(f: ExportFile) -> tuple[dict[str, Any], str]:
    content = [1, 2]
    ref = blob_ref(canonical_json(content))
    f.blobs.append({"type": "blob", "ref": ref, "content": content})
    event = f.event("ModelCalled")
    event["payload"]["messages_ref"] = ref
    event["payload"].pop("response_ref")
    return f.blobs[-1], f"blob {ref} is not a conversation node"


def _wrong_message_count(f: ExportFile) -> tuple[dict[str, Any], str]:
    event = f.event("ModelCalled")
    event["payload"]["message_count"] = 7
    return event, "'message_count' is 7, its chain holds 1"


FORGERIES = [
    pytest.param(_list_payload, id="list-payload"),
    pytest.param(_string_version, id="string-version"),
    pytest.param(_future_version, id="future-version"),
    pytest.param(_unknown_kind, id="unknown-kind"),
    pytest.param(_model_called_bad_usage, id="model-called-bad-usage"),
    pytest.param(_model_called_without_messages, id="model-called-without-messages"),
    pytest.param(_unknown_payload_field, id="unknown-payload-field"),
    pytest.param(_unreadable_old_version, id="unreadable-old-version"),
    pytest.param(_duplicated_line, id="duplicated-line"),
    pytest.param(_second_run_started, id="second-run-started"),
    pytest.param(_chain_of_a_list, id="conversation-node-not-a-node"),
    pytest.param(_wrong_message_count, id="wrong-message-count"),
]


@pytest.mark.parametrize("forge", FORGERIES)
def test_a_forged_event_that_verifies_is_still_refused_by_its_line_and_field(
    held: Ledger, source: ExportFile, tmp_path: Path, forge: Forgery
) -> None:
    """Each forgery is re-hashed so its chain verifies; the catalogue check still refuses it.

    Imported, each of these broke `stats`, `show --json`, `replay` or `projections catch-up`
    for the whole ledger; refused, the ledger holds and verifies what it held before.
    """
    where, expected = forge(source)
    source.rechain()
    path = source.write(tmp_path / "forged.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    line = 1 + lines.index(json.dumps(where, ensure_ascii=False))
    error = refused_import(held, path)
    message = str(error)
    assert f"line {line}" in message
    assert expected in message


def test_a_run_recorded_with_an_older_event_version_still_imports(ledger: Ledger) -> None:
    """ToolReturned v1 payloads (latency in seconds) pass the check through their upcaster."""
    run_id = ledger.import_file(GOLDEN / "old_schema_tools.jsonl")
    records = ledger.events(run_id)
    assert any(r.kind == "ToolReturned" and r.version == 1 for r in records)
    assert all(r.event.kind == r.kind for r in records)
    assert ledger.verify().ok


# 3. Malformed envelopes and limits on import -------------------------------------------------


def _deep_line(levels: int) -> Callable[[ExportFile], tuple[dict[str, Any], str, str]]:
    def forge(f: ExportFile) -> tuple[dict[str, Any], str, str]:
        event = f.event("DeltaApplied")
        event["payload"]["patch"] = {"deep": "DEEP"}
        return event, '"DEEP"', "[" * levels + "]" * levels

    return forge


ENVELOPE_FORGERIES = [
    pytest.param(("position", "5"), "field 'position' must be 5", id="position-as-string"),
    pytest.param(("hash", 12345), "field 'hash' must be 64 lowercase hex", id="hash-as-int"),
    pytest.param(("prev", None), "field 'prev' must be 64 lowercase hex", id="prev-null"),
    pytest.param(("timestamp", "yesterday"), "field 'timestamp' must be an RFC", id="garbage-time"),
    pytest.param(
        ("timestamp", "2026-13-45T99:00:00.000000Z"), "field 'timestamp'", id="impossible-time"
    ),
    pytest.param(("event_id", 'x", "kind": "y'), "field 'event_id'", id="event-id-with-quotes"),
    pytest.param(("run_id", "not-a-uuid"), "field 'run_id' must be the header's", id="run-id"),
]


@pytest.mark.parametrize(("change", "expected"), ENVELOPE_FORGERIES)
def test_a_malformed_envelope_field_is_a_clean_refusal_naming_line_and_field(
    held: Ledger, source: ExportFile, tmp_path: Path, change: tuple[str, Any], expected: str
) -> None:
    """A string position, an int hash, a garbage time...: `ImportRefusedError`, not a traceback."""
    event = source.event("DeltaApplied")
    name, value = change
    event[name] = value
    path = source.write(tmp_path / "malformed.jsonl")
    error = refused_import(held, path)
    assert f"line {source.line_of(event)}: {expected}" in str(error)


def test_a_header_run_id_that_is_not_a_uuid_is_refused(
    held: Ledger, source: ExportFile, tmp_path: Path
) -> None:
    """The run id in the header and events must be a canonical UUID (line 1 names it)."""
    source.header["run_id"] = "../../etc"
    for event in source.events:
        event["run_id"] = "../../etc"
    source.rechain()
    error = refused_import(held, source.write(tmp_path / "run-id.jsonl"))
    assert "line 1: field 'run_id' must be a run id" in str(error)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[1, 2]", "neither an event, a blob, a checkpoint nor a proof", id="a-list"),
        pytest.param('{"type": "event", "position": NaN}', "not JSON (NaN is not JSON", id="nan"),
        pytest.param("{not json", "not JSON", id="not-json"),
        pytest.param(
            '{"type": "blob", "type": "event"}',
            "not JSON (the key 'type' appears twice",
            id="repeated-key",
        ),
        pytest.param('{"type": "blob", "ref": 1}', "field 'content' is missing", id="blob-field"),
    ],
)
def test_a_line_that_is_not_an_event_or_blob_is_refused_by_line(
    held: Ledger, source: ExportFile, tmp_path: Path, text: str, expected: str
) -> None:
    """Lines that are not envelopes at all are named, not parsed into a crash."""
    path = source.write(tmp_path / "odd.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(3, text)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert f"line 4: {expected}" in str(refused_import(held, path))


@pytest.mark.parametrize("levels", [300, 10_000, 100_000])
def test_deep_nesting_in_an_import_file_is_refused_at_max_depth(
    held: Ledger, source: ExportFile, tmp_path: Path, levels: int
) -> None:
    """Nesting past `max_depth` is refused by line; past the JSON parser's reach, just as cleanly.

    ``json.loads`` of 10,000 nested lists raises RecursionError: the import reports it as the
    depth limit instead of ending in a traceback.
    """
    event, token, deep = _deep_line(levels)(source)
    path = source.write(tmp_path / "deep.jsonl", replace=(token, deep))
    error = refused_import(held, path)
    assert error.limit == "max_depth"
    assert f"line {source.line_of(event)}" in str(error)
    assert "max_depth=256" in str(error)


def test_a_payload_or_blob_over_the_size_cap_is_refused_and_accepted_when_raised(
    ledger_url: str, source: ExportFile, tmp_path: Path
) -> None:
    """Import applies `max_payload_bytes` to every blob; the message says how to raise it."""
    path = source.write(tmp_path / "run.jsonl")
    with Ledger.open(ledger_url, limits=Limits(max_payload_bytes=1000)) as small:
        error = refused_import(small, path)
        assert error.limit == "max_payload_bytes"
        assert "over max_payload_bytes=1,000" in str(error)
        assert "Limits(max_payload_bytes=...)" in str(error)
    with Ledger.open(ledger_url) as roomy:
        assert roomy.import_file(path) == source.header["run_id"]
        assert roomy.verify().ok


def test_the_import_command_refuses_a_deep_file_cleanly_and_names_its_option(
    sqlite_url: str, source: ExportFile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agentledger import` exits 2 with one line naming the limit and its option, no traceback."""
    roomy = source.write(tmp_path / "roomy.jsonl")
    event, token, deep = _deep_line(10_000)(source)
    path = source.write(tmp_path / "deep.jsonl", replace=(token, deep))
    assert main(["--db", sqlite_url, "import", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentledger: ImportRefusedError: refused to import")
    assert f"line {source.line_of(event)}" in err
    assert "--max-depth N" in err
    assert "Traceback" not in err
    assert main(["--db", sqlite_url, "import", "--max-payload-bytes", "100", str(roomy)]) == 2
    assert "--max-payload-bytes N" in capsys.readouterr().err
    assert main(["--db", sqlite_url, "import", "--max-payload-bytes", "100000", str(roomy)]) == 0
