"""Import and ``verify --file`` read an export in passes, never holding it: what that must keep.

The first pass checks every line and keeps a small index on disk; the second reads the lines
again to write them. These tests hold what the passes must not change (the same file imports to
the same run, every refusal still writes nothing) and what they add: progress, and a file that
changes between the passes (or during the second) is refused. Peak memory is measured by
``python -m bench --only memory``, not here.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
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
    verify_export,
)
from agentledger.ledger._canonical import canonical_json
from agentledger.ledger._hashing import blob_ref, envelope_hash
from agentledger.ledger.signed_note import generate_key

TURNS_PER_TASK = 6


def long_run(run: Any, turns: int) -> int:
    """`turns` turns of a model call (its conversation growing), a tool call and a delta."""
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        task, step = divmod(turn, TURNS_PER_TASK)
        if step == 0:
            history = [{"role": "user", "content": f"task {task}"}]
        answer = {"role": "assistant", "content": f"step {step} of task {task}"}
        run.model_call(
            provider="scripted",
            model="m",
            messages=history,
            response=answer,
            usage={"input_tokens": 10 + step, "output_tokens": 2},
        )
        run.tool("lookup", {"turn": turn}, result={"turn": turn, "rows": ["row"] * 20})
        run.delta({"turns": {str(turn): step}})
        history = [*history, answer, {"role": "user", "content": f"go on {turn}"}]
    return turns


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A run of 3,002 events exported once per module, and its envelopes as recorded."""
    path = tmp_path_factory.mktemp("stream") / "long.jsonl"
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("long")) as source:
        _, run_id = source.record_function(long_run, 750, agent="long")
        source.export_run(run_id, path)
        envelopes = [r.envelope() for r in source.events(run_id)]
    return path, envelopes


def holdings(ledger: Ledger) -> tuple[Any, ...]:
    """Everything an auditor sees of a ledger: each run's envelopes, the index, and verify."""
    report = ledger.verify()
    runs = {run_id: [r.envelope() for r in ledger.events(run_id)] for run_id in ledger.run_ids()}
    return runs, ledger.runs(), report.ok, [str(p) for p in report.problems]


def lines_of(path: Path) -> list[dict[str, Any]]:
    """The file's lines, parsed."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    """Write `lines` as an export file (as export writes them)."""
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def same_size_edit(path: Path, line_number: int) -> None:
    """Change one character of line `line_number` in place: same size, other content."""
    lines = path.read_bytes().split(b"\n")
    line = lines[line_number - 1]
    at = line.index(b'"event_id": "') + len(b'"event_id": "')
    swapped = b"1" if line[at : at + 1] != b"1" else b"2"
    lines[line_number - 1] = line[:at] + swapped + line[at + 1 :]
    path.write_bytes(b"\n".join(lines))


def test_a_long_run_imports_to_the_same_events_and_says_how_far_it_got(
    ledger: Ledger, exported: tuple[Path, list[dict[str, Any]]]
) -> None:
    """Every envelope, blob and index field as exported; progress per thousand lines, per batch."""
    path, envelopes = exported
    seen: list[tuple[str, int, int]] = []
    run_id = ledger.import_file(path, progress=lambda *told: seen.append(told))
    assert [r.envelope() for r in ledger.events(run_id)] == envelopes
    refs = [line["ref"] for line in lines_of(path) if line.get("type") == "blob"]
    stored = ledger.blob_bytes(refs)
    assert [blob_ref(stored[ref]) for ref in refs] == refs
    report = ledger.verify(run_id)
    assert report.ok, [str(p) for p in report.problems]
    info = ledger.run(run_id)
    assert (info.event_count, info.status, info.head_hash) == (
        3002,
        "completed",
        envelopes[-1]["hash"],
    )
    lines = len(path.read_text(encoding="utf-8").splitlines())
    checked = [(done, total) for stage, done, total in seen if stage == "checked"]
    assert checked == [(n, lines) for n in range(1000, lines, 1000)] + [(lines, lines)]
    written = [(done, total) for stage, done, total in seen if stage == "written"]
    assert written == [(n, 3002) for n in range(500, 3002, 500)] + [(3002, 3002)]
    assert [stage for stage, _, _ in seen] == sorted(stage for stage, _, _ in seen)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda path: same_size_edit(path, 1500), id="one character of an event"),
        pytest.param(
            lambda path: path.write_bytes(path.read_bytes()[:-200]), id="its last line cut"
        ),
        pytest.param(
            lambda path: path.write_bytes(path.read_bytes() + b"\n\n"), id="blank lines added"
        ),
    ],
)
def test_a_file_changed_after_it_was_checked_is_refused_and_nothing_is_written(
    ledger: Ledger,
    exported: tuple[Path, list[dict[str, Any]]],
    tmp_path: Path,
    change: Callable[[Path], None],
) -> None:
    """A file rewritten between the check and the write: the bytes written would be unchecked."""
    path = tmp_path / "changing.jsonl"
    path.write_bytes(exported[0].read_bytes())
    before = holdings(ledger)

    def rewrite_once_checked(stage: str, done: int, total: int) -> None:
        if stage == "checked" and done == total:
            change(path)

    with pytest.raises(ImportRefusedError, match="the file changed after it was checked"):
        ledger.import_file(path, progress=rewrite_once_checked)
    assert holdings(ledger) == before


def test_a_file_changed_while_written_leaves_a_start_that_verifies_and_completes_on_reimport(
    ledger: Ledger, exported: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """A line changed under the second pass is refused before it is used.

    What was committed is a start of the run (as an import cut short), and the intact file
    completes it.
    """
    path, envelopes = exported
    changing = tmp_path / "changing.jsonl"
    changing.write_bytes(path.read_bytes())

    def rewrite_a_later_event(stage: str, done: int, _total: int) -> None:
        if stage == "written" and done == 500:
            same_size_edit(changing, 800)

    with pytest.raises(ImportRefusedError) as refused:
        ledger.import_file(changing, progress=rewrite_a_later_event)
    assert "line 800 changed while the file was read again" in str(refused.value)
    assert "500 of its 3002 events are written" in str(refused.value)
    run_id = envelopes[0]["run_id"]
    assert [r.envelope() for r in ledger.events(run_id)] == envelopes[:500]
    assert ledger.verify(run_id).ok
    assert ledger.import_file(path) == run_id
    assert [r.envelope() for r in ledger.events(run_id)] == envelopes


def rechain(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Recompute every event's prev and hash in order (a forger's chain that verifies)."""
    prev = "0" * 64
    for line in lines:
        if line.get("type") != "event":
            continue
        line["prev"] = prev
        if line["kind"] in {"RunCompleted", "RunFailed"}:
            line["payload"].update(event_count=line["position"], head_hash=prev)
        body = {k: v for k, v in line.items() if k not in {"type", "hash"}}
        line["hash"] = prev = envelope_hash(body)
    return lines


def without_blob(lines: list[dict[str, Any]], ref: str) -> list[dict[str, Any]]:
    """The file without the line of blob `ref` (the header's count kept right)."""
    kept = [line for line in lines if line.get("ref") != ref]
    kept[0]["blobs"] -= 1
    return kept


def first_call(lines: list[dict[str, Any]], number: int = 1) -> dict[str, Any]:
    """The `number`-th ModelCalled event line."""
    return [line for line in lines if line.get("kind") == "ModelCalled"][number - 1]


def forge_root_node_missing(lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The first node of the first conversation removed.

    No event names it: it is reached through the chain of the first call, whose position
    import must name.
    """
    call = first_call(lines)
    head = next(line for line in lines if line.get("ref") == call["payload"]["messages_ref"])
    root = head["content"]["parent_ref"] or call["payload"]["messages_ref"]
    return without_blob(lines, root), f"position {call['position']}: blob missing ({root})"


def forge_response_off_the_chain(lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """A call's response node made to hang off another parent (refs kept right by rehashing)."""
    call = first_call(lines, 2)
    old = call["payload"]["response_ref"]
    line = next(line for line in lines if line.get("ref") == old)
    line["content"] = {"message": line["content"]["message"], "parent_ref": None}
    new = blob_ref(canonical_json(line["content"]))
    line["ref"] = call["payload"]["response_ref"] = new
    rechain(lines)
    number = 1 + lines.index(line)
    return lines, f"line {number}: blob {new} is not the response node of the call at position"


def forge_message_count(lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """A call claiming one message more than its chain holds, the chain rehashed to verify."""
    call = first_call(lines, 3)
    count = call["payload"]["message_count"]
    call["payload"]["message_count"] = count + 1
    rechain(lines)
    number = 1 + lines.index(call)
    detail = f"'message_count' is {count + 1}, its chain holds {count}"
    return lines, f"line {number}: ModelCalled at position {call['position']}: {detail}"


def forge_link_to_an_earlier_event(lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """An event chained to the event two before it (its own hash recomputed).

    The refusal names where its predecessor is, which takes a second read of the file's events.
    """
    events = [line for line in lines if line.get("type") == "event"]
    target, earlier = events[1200], events[1198]
    target["prev"] = earlier["hash"]
    body = {k: v for k, v in target.items() if k not in {"type", "hash"}}
    target["hash"] = envelope_hash(body)
    number = 1 + lines.index(target)
    detail = f"events reordered (its predecessor is stored at position {earlier['position']})"
    return lines, f"line {number}: run {target['run_id']} position {target['position']}: {detail}"


def forge_second_proof(lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Two proof lines for one position (and the header counting both)."""
    proof = {"type": "proof", "position": 1, "leaf_index": 0, "tree_size": 1, "proof": []}
    lines[0]["proofs"] = 1
    return [*lines, proof, dict(proof)], f"line {len(lines) + 2}: a second proof of position 1"


@pytest.mark.parametrize(
    "forge",
    [
        forge_root_node_missing,
        forge_response_off_the_chain,
        forge_message_count,
        forge_link_to_an_earlier_event,
        forge_second_proof,
    ],
)
def test_what_only_the_whole_file_shows_is_still_refused_by_line_with_nothing_written(
    ledger: Ledger,
    exported: tuple[Path, list[dict[str, Any]]],
    tmp_path: Path,
    forge: Callable[[list[dict[str, Any]]], tuple[list[dict[str, Any]], str]],
) -> None:
    """Checks across lines read from the index now: same message, nothing written.

    Blobs reached through others, conversation chains, links to earlier events, repeated
    proofs.
    """
    lines, expected = forge(lines_of(exported[0]))
    path = write_lines(tmp_path / "forged.jsonl", lines)
    before = holdings(ledger)
    with pytest.raises(ImportRefusedError) as refused:
        ledger.import_file(path)
    assert any(expected in problem for problem in refused.value.problems), refused.value.problems
    assert holdings(ledger) == before


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            b'{"format": "agentledger-export/v1"}\n{"a": "\xe2\x82"}\n',
            "cannot read the file: 'utf-8' codec can't decode bytes in position 43-44: "
            "invalid continuation byte",
            id="not UTF-8, named by its byte in the file",
        ),
        pytest.param(
            b'{"format": "agentledger-export/v1", "run_id": "x"}\r{"type": 1}\r\n',
            "line 2: neither an event",
            id="a lone carriage return ends a line",
        ),
        pytest.param(b" \r\n\n\t\n", "the file is empty", id="blank lines only"),
        pytest.param(
            b'{"format": "other"}\n\xff\n', "cannot read the file", id="not UTF-8 after the header"
        ),
    ],
)
def test_the_file_is_split_and_decoded_as_text_mode_reads_it(
    ledger: Ledger, tmp_path: Path, data: bytes, expected: str
) -> None:
    """Line breaks are Python's universal newlines; a decoding error wins over every other."""
    path = tmp_path / "odd.jsonl"
    path.write_bytes(data)
    before = holdings(ledger)
    with pytest.raises(ImportRefusedError, match="refused to import") as refused:
        ledger.import_file(path)
    assert expected in str(refused.value)
    assert holdings(ledger) == before


@pytest.mark.parametrize("kind", [{}, [], ["proof"]])
def test_a_line_whose_type_is_not_text_is_refused_by_line(
    ledger: Ledger, exported: tuple[Path, list[dict[str, Any]]], tmp_path: Path, kind: Any
) -> None:
    """A ``type`` that is an object or a list names its line (it raised TypeError before)."""
    lines = lines_of(exported[0])
    lines.insert(3, {"type": kind})
    before = holdings(ledger)
    with pytest.raises(ImportRefusedError) as refused:
        ledger.import_file(write_lines(tmp_path / "typed.jsonl", lines))
    expected = "line 4: neither an event, a blob, a checkpoint nor a proof (field 'type')"
    assert refused.value.problems == [expected]
    assert holdings(ledger) == before


def test_a_line_too_long_for_the_limits_is_counted_not_held(tmp_path: Path) -> None:
    """A line longer than any payload allows is refused with its length in characters."""
    path = tmp_path / "long-line.jsonl"
    head = json.dumps({"format": "agentledger-export/v1", "run_id": "x", "events": 0})
    path.write_text(head + "\n" + "é" * 3_000_000 + "\n", encoding="utf-8")
    limits = Limits(max_payload_bytes=1000)
    with (
        Ledger.open("memory://", limits=limits) as ledger,
        pytest.raises(ImportRefusedError) as refused,
    ):
        ledger.import_file(path)
    assert refused.value.limit == "max_payload_bytes"
    assert "line 2: 3,000,000 characters" in str(refused.value)


def test_an_export_read_from_a_pipe_imports(
    ledger: Ledger, exported: tuple[Path, list[dict[str, Any]]]
) -> None:
    """A file that cannot be read twice (a pipe) is copied aside, then read as any other."""
    path, envelopes = exported
    read, write = os.pipe()

    def feed() -> None:
        with os.fdopen(write, "wb") as out:
            out.write(path.read_bytes())

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        assert ledger.import_file(f"/dev/fd/{read}") == envelopes[0]["run_id"]
    finally:
        feeder.join()
        os.close(read)
    assert len(ledger.events(envelopes[0]["run_id"])) == len(envelopes)


def test_verify_file_checks_a_long_signed_export_reading_each_proof_from_the_file(
    tmp_path: Path,
) -> None:
    """Every event proven in the checkpoint; a wrong proof line is named by its position.

    verify --file reads each proof line again when its event is checked, rather than holding
    them all.
    """
    signer, verifier = generate_key("stream.example/log")
    path = tmp_path / "signed.jsonl"
    with Ledger.open("memory://", clock=StepClock(), ids=SequentialIds("signed")) as source:
        _, run_id = source.record_function(long_run, 300, agent="long")
        source.export_run(run_id, path, checkpoint=source.checkpoint(signer))
        count = len(source.events(run_id))
    checked = verify_export(path, [verifier])
    assert checked.ok, checked.refused + [str(p) for p in checked.report.log_problems]
    assert (checked.covered, checked.report.events_checked, checked.ended) == (count, count, True)
    lines = lines_of(path)
    proof = next(line for line in lines if line.get("type") == "proof" and line["position"] == 7)
    proof["leaf_index"] += 1
    broken = verify_export(write_lines(tmp_path / "broken.jsonl", lines), [verifier])
    assert [(p.reason, p.position) for p in broken.report.log_problems] == [("re-chained", 7)]


def test_import_shows_its_progress_on_a_terminal_only(
    exported: tuple[Path, list[dict[str, Any]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``import: checked N/M lines`` then ``import: wrote N/M events`` on a TTY, then cleared."""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(["--db", f"sqlite:///{tmp_path / 'tty.db'}", "import", str(exported[0])]) == 0
    shown = tty.getvalue()
    lines = len(exported[0].read_text(encoding="utf-8").splitlines())
    assert f"\r\x1b[Kimport: checked 1,000/{lines:,} lines" in shown
    assert "\r\x1b[Kimport: wrote 3,002/3,002 events" in shown
    assert shown.endswith("\r\x1b[K")
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    assert main(["--db", f"sqlite:///{tmp_path / 'pipe.db'}", "import", str(exported[0])]) == 0
    assert "import:" not in pipe.getvalue()
