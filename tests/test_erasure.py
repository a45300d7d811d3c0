"""Erasure by crypto-shredding: a data subject's content is sealed under their key; erase it.

A run tied to a subject stores every content value out of line, sealed (AES-GCM) under the
subject's key, with refs that hash the sealed bytes. Erasing the subject destroys the key and
records an ErasureRecorded fact: the content then reads ``[erased]`` everywhere, ``verify``
still passes (and counts the erased blobs), replay names the positions it cannot compare, and
nothing of the subject's content is left in the database files (SQLite file and WAL, or a
``pg_dump`` of the schema) once derived data is rebuilt and the files are vacuumed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from test_ledger_tamper import Database
from user_code import agents

from agentledger.cli import main
from agentledger.ledger import (
    ERASED,
    ERASURE_STREAM,
    Ledger,
    ReadOnlyDatabaseError,
    SequentialIds,
    StepClock,
    StorageError,
    UnknownSubjectError,
    UsageError,
)
from agentledger.ledger.signed_note import generate_key
from agentledger.projections import (
    ReadModelProjector,
    forget_erased,
    take_snapshots,
    world_state,
)
from agentledger.replay import ContentErasedError, fork_run, replay_run, rerun

PG_DUMP = "/usr/bin/pg_dump"


def tokens(tag: str) -> dict[str, str]:
    """Distinctive strings for one subject, one per place a run records content."""
    return {
        place: f"Zq{tag}{place.capitalize()}Xv"
        for place in ("input", "message", "response", "args", "result", "delta", "answer")
    }


def record_subject_run(ledger: Ledger, subject: str, tag: str) -> str:
    """A run tied to ``subject`` holding its tokens in every content field; its id."""
    words = tokens(tag)
    with ledger.record_run("erasure", input={"question": words["input"]}, subject=subject) as run:
        run.model_call(
            provider="scripted",
            model="m-1",
            messages=[{"role": "user", "content": words["message"]}],
            response={"role": "assistant", "content": words["response"]},
        )
        run.tool("lookup", {"q": words["args"]}, result={"found": words["result"]})
        run.delta({"notes": {"n1": words["delta"]}})
        run.answer(words["answer"])
    return run.run_id


def stored_text(ledger: Ledger, run_id: str) -> str:
    """Every event payload of a run as JSON (what is stored, blobs unresolved)."""
    return json.dumps([e.payload for e in ledger.events(run_id)], ensure_ascii=False)


@pytest.fixture
def opened(ledger_url: str) -> Iterator[Ledger]:
    """A ledger on each backend (memory, SQLite, PostgreSQL)."""
    ledger = Ledger.open(ledger_url, clock=StepClock(), ids=SequentialIds(ledger_url))
    yield ledger
    ledger.close()


def test_subject_content_is_sealed_out_of_line_and_reads_back(opened: Ledger) -> None:
    """No content of a subject's run is inline in an event; every value reads back as given."""
    run_id = record_subject_run(opened, "alice", "A")
    stored = stored_text(opened, run_id)
    assert not any(word in stored for word in tokens("A").values())
    events = opened.events(run_id)
    started = events[0].payload
    assert "input" not in started
    assert opened.blob(started["input_ref"]) == {"question": tokens("A")["input"]}
    call = next(e.payload for e in events if e.kind == "ModelCalled")
    assert opened.conversation(call["response_ref"]) == [
        {"role": "user", "content": tokens("A")["message"]},
        {"role": "assistant", "content": tokens("A")["response"]},
    ]
    delta = next(e.payload for e in events if e.kind == "DeltaApplied")
    assert delta["patch"] == {}
    assert world_state(opened, run_id) == {"notes": {"n1": tokens("A")["delta"]}}
    answer = next(e.payload for e in events if e.kind == "SynthesisProduced")
    assert opened.blob(answer["answer_ref"]) == tokens("A")["answer"]
    assert opened.verify().ok
    assert opened.subject_of(run_id) == "alice"
    assert opened.subject_runs("alice") == [run_id]


def test_two_subjects_equal_content_is_stored_twice(opened: Ledger) -> None:
    """The same input under two subjects gets two refs; under one subject, the same ref."""
    refs = []
    for subject in ("alice", "bob", "alice"):
        with opened.record_run("erasure", input="same words", subject=subject) as run:
            pass
        refs.append(opened.events(run.run_id)[0].payload["input_ref"])
    assert refs[0] != refs[1]
    assert refs[0] == refs[2]


def test_erasing_a_subject_leaves_the_others_untouched(opened: Ledger) -> None:
    """After erase: alice's content reads [erased], bob's reads back, verify counts the blobs."""
    alice = record_subject_run(opened, "alice", "A")
    bob = record_subject_run(opened, "bob", "B")
    plain_run = opened.record_run("erasure", input="no subject here")
    plain_run.complete()
    before = opened.verify()
    result = opened.erase_subject("alice", reason="art. 17 request", requested_by="dpo")
    assert result.runs == (alice,)
    assert result.blobs == 7  # input, two message nodes, arguments, result, patch, answer
    report = opened.verify()
    assert report.ok, report.problems
    assert report.blobs_erased == result.blobs
    assert report.blobs_erased_unrecorded == 0  # the fact names the key
    assert report.blobs_checked == before.blobs_checked
    assert report.runs_checked == before.runs_checked == 3
    events = opened.events(alice)
    assert opened.blob(events[0].payload["input_ref"]) is ERASED
    assert world_state(opened, alice) == "[erased]"
    assert opened.conversation(events[1].payload["response_ref"]) == ["[erased]"]
    bob_events = opened.events(bob)
    assert opened.blob(bob_events[0].payload["input_ref"]) == {"question": tokens("B")["input"]}
    assert world_state(opened, bob) == {"notes": {"n1": tokens("B")["delta"]}}
    assert opened.events(plain_run.run_id)[0].payload["input"] == "no subject here"
    assert opened.erased_positions(alice) == [1, 2, 3, 4, 5, 6]
    assert opened.erased_positions(bob) == []
    assert {r.run_id for r in opened.runs()} == {alice, bob, plain_run.run_id}
    assert ERASURE_STREAM not in {r.run_id for r in opened.runs()}
    assert ERASURE_STREAM not in opened.run_ids()
    fact = opened.erasures()[0]
    assert fact.kind == "ErasureRecorded"
    assert fact.payload["requested_by"] == "dpo"
    assert fact.payload["reason"] == "art. 17 request"
    assert fact.payload["runs"] == [alice]
    assert "alice" not in json.dumps(fact.payload)


def test_a_per_call_subject_seals_only_that_call(opened: Ledger) -> None:
    """In a run with no subject, ``subject=`` on a tool call seals just that call's values."""
    with opened.record_run("erasure", input="a shared question") as run:
        run.tool(
            "crm",
            {"customer": "ZqCarolArgsXv"},
            result={"card": "ZqCarolResultXv"},
            subject="carol",
        )
        run.tool("clock", {"tz": "UTC"}, result={"now": "noon"})
    assert opened.subject_runs("carol") == [run.run_id]
    opened.erase_subject("carol", reason="request", requested_by="dpo")
    events = {e.position: e.payload for e in opened.events(run.run_id)}
    assert opened.blob(events[2]["arguments_ref"]) is ERASED
    assert events[4]["arguments"] == {"tz": "UTC"}
    assert events[1]["input"] == "a shared question"
    assert opened.erased_positions(run.run_id) == [2, 3]
    assert opened.verify().ok


def test_a_subject_run_replays_identically_and_an_erased_one_names_its_positions(
    opened: Ledger,
) -> None:
    """A function run tied to a subject replays (same sealed refs); after erase it is refused.

    Replay, rerun and fork all name the positions they cannot compare, before anything runs.
    """
    _, run_id = opened.record_function(agents.triage, "ZqDaveInputXv to Oslo?", subject="dave")
    assert "ZqDaveInputXv" not in stored_text(opened, run_id)
    assert replay_run(opened, run_id).identical
    opened.erase_subject("dave", reason="request", requested_by="dpo")
    with pytest.raises(ContentErasedError) as caught:
        replay_run(opened, run_id)
    assert caught.value.positions[0] == 1
    assert "cannot compare positions 1, " in str(caught.value)
    assert "(content erased)" in str(caught.value)
    with pytest.raises(ContentErasedError):
        rerun(opened, run_id)
    with pytest.raises(ContentErasedError):
        fork_run(opened, run_id, 3)


def test_a_rerun_of_a_subject_run_is_tied_to_the_same_subject(opened: Ledger) -> None:
    """A rerun shares the subject: its content is sealed alike, and erasure covers it."""
    _, run_id = opened.record_function(agents.triage, "ZqEveInputXv to Oslo?", subject="eve")
    outcome = rerun(opened, run_id)
    assert outcome.run_id is not None
    assert opened.subject_of(outcome.run_id) == "eve"
    assert sorted(opened.subject_runs("eve")) == sorted([run_id, outcome.run_id])
    assert "ZqEveInputXv" not in stored_text(opened, outcome.run_id)


def test_bad_erasures_are_refused_and_write_nothing(opened: Ledger) -> None:
    """Unknown, empty or repeated subjects and empty reasons name the problem; nothing changes."""
    record_subject_run(opened, "alice", "A")
    with pytest.raises(UnknownSubjectError, match=r"'mallory'.*check the spelling"):
        opened.erase_subject("mallory", reason="r", requested_by="dpo")
    with pytest.raises(UsageError, match="subject must not be empty"):
        opened.erase_subject("  ", reason="r", requested_by="dpo")
    with pytest.raises(UsageError, match="reason must be non-empty"):
        opened.erase_subject("alice", reason="", requested_by="dpo")
    with pytest.raises(UsageError, match="requested_by must be non-empty"):
        opened.erase_subject("alice", reason="r", requested_by=" ")
    with pytest.raises(UsageError, match="subject must not be empty"):
        opened.record_run("erasure", input="x", subject="")
    assert opened.erasures() == []
    assert opened.subject_runs("alice")
    opened.erase_subject("alice", reason="r", requested_by="dpo")
    with pytest.raises(UnknownSubjectError, match="it was erased at 20"):
        opened.erase_subject("alice", reason="r", requested_by="dpo")
    assert len(opened.erasures()) == 1


def test_a_read_only_ledger_refuses_to_erase(sqlite_url: str) -> None:
    """Erasure destroys a key: a ledger opened read-only refuses it and keeps the key."""
    with Ledger.open(sqlite_url) as ledger:
        run_id = record_subject_run(ledger, "alice", "A")
    with (
        Ledger.open(sqlite_url, read_only=True) as reader,
        pytest.raises(ReadOnlyDatabaseError, match="read-only"),
    ):
        reader.erase_subject("alice", reason="r", requested_by="dpo")
    with Ledger.open(sqlite_url) as ledger:
        assert ledger.subject_runs("alice") == [run_id]


def test_verify_covers_the_erasure_stream_and_the_transparency_log(sqlite_url: str) -> None:
    """The ErasureRecorded facts are hashed, chained and logged: a checkpoint verifies them."""
    signer, verifier = generate_key("erasure.example/log")
    with Ledger.open(sqlite_url) as ledger:
        record_subject_run(ledger, "alice", "A")
        ledger.erase_subject("alice", reason="r", requested_by="dpo")
        note = ledger.checkpoint(signer)
        report = ledger.verify(checkpoint=note, verifier_keys=[verifier])
        assert report.ok, (report.problems, report.log_problems)
        assert report.events_checked == 8  # the run's seven and the erasure fact
        assert ledger.transparency_log.integrate().size == 8


def _with_derived_data(ledger: Ledger, run_ids: list[str]) -> None:
    """Read models, the search index and snapshots, all holding the runs' plain content."""
    with ReadModelProjector(ledger) as projector:
        projector.catch_up()
        assert projector.search(tokens("A")["answer"])
    for run_id in run_ids:
        assert take_snapshots(ledger, run_id, every=1) == 1


def _erase(ledger: Ledger, subject: str) -> int:
    """Erase as the CLI does: the key, then derived data, then scrub the files."""
    result = ledger.erase_subject(subject, reason="request", requested_by="dpo", vacuum=False)
    rebuilt = forget_erased(ledger, result.runs)
    assert rebuilt.snapshots_deleted == 1
    assert rebuilt.read_model_events is not None
    ledger.scrub_files(tables=rebuilt.tables)
    return result.blobs


def test_nothing_of_an_erased_subject_remains_in_the_sqlite_files(tmp_path: Path) -> None:
    """The file and its WAL hold bob's content (derived data) but nothing of alice's."""
    path = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        alice = record_subject_run(ledger, "alice-subject-7", "A")
        bob = record_subject_run(ledger, "bob-subject-8", "B")
        _with_derived_data(ledger, [alice, bob])
        files = b"".join(p.read_bytes() for p in tmp_path.iterdir())
        assert tokens("A")["answer"].encode() in files  # the search index holds it, until erase
        assert _erase(ledger, "alice-subject-7") == 7
        assert ledger.verify().ok
        with ReadModelProjector(ledger) as projector:
            assert not projector.search(tokens("A")["answer"])
            assert projector.search(tokens("B")["answer"])
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert "ledger.db" in files
    for name, data in files.items():
        for word in [*tokens("A").values(), "alice-subject-7"]:
            assert word.encode() not in data, (name, word)
    assert tokens("B")["answer"].encode() in files["ledger.db"]  # derived data of bob, kept


@pytest.mark.postgres
def test_nothing_of_an_erased_subject_remains_in_a_postgres_dump(pg_url: str) -> None:
    """A pg_dump of the ledger's schema holds bob's content but nothing of alice's."""
    with Ledger.open(pg_url) as ledger:
        alice = record_subject_run(ledger, "alice-subject-7", "A")
        bob = record_subject_run(ledger, "bob-subject-8", "B")
        _with_derived_data(ledger, [alice, bob])
        assert tokens("A")["answer"] in _pg_dump(pg_url)
        assert "alice-subject-7" in _pg_dump(pg_url)  # the key table, until erase
        assert _erase(ledger, "alice-subject-7") == 7
        report = ledger.verify()
        assert report.ok, report.problems
        assert report.blobs_erased == 7
        bob_input = ledger.blob(ledger.events(bob)[0].payload["input_ref"])
        assert bob_input == {"question": tokens("B")["input"]}
    dump = _pg_dump(pg_url)
    for word in [*tokens("A").values(), "alice-subject-7"]:
        assert word not in dump, word
    assert tokens("B")["answer"] in dump


def _pg_dump(url: str) -> str:
    parts = urlsplit(url)
    schema = parse_qs(parts.query)["schema"][0]
    command = [
        PG_DUMP,
        "-h",
        parts.hostname or "127.0.0.1",
        "-p",
        str(parts.port or 5432),
        "-U",
        parts.username or "postgres",
        "-n",
        schema,
        (parts.path or "/test").lstrip("/"),
    ]
    done = subprocess.run(command, capture_output=True, check=True, env={**os.environ})
    return done.stdout.decode("utf-8", "replace")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_erase_end_to_end(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`erase` asks for -y off a terminal, erases, and show/state/export/verify say so."""
    with Ledger.open(sqlite_url) as ledger:
        alice = record_subject_run(ledger, "alice", "A")
    db = ["--db", sqlite_url]
    base = [*db, "erase", "--subject", "alice", "--reason", "art. 17", "--requested-by", "dpo"]
    status, out, err = _cli(capsys, *base, "--dry-run")
    assert (status, out.split()[-1]) == (0, alice)
    status, out, err = _cli(capsys, *base)
    assert status == 2
    assert "pass -y" in err
    status, out, err = _cli(
        capsys, *db, "erase", "--subject", "nobody", "--reason", "r", "--requested-by", "dpo", "-y"
    )
    assert status != 0
    assert "no key for data subject 'nobody'" in err
    assert "Traceback" not in err
    status, out, err = _cli(capsys, *base, "-y", "--json")
    assert status == 0, err
    result: dict[str, Any] = json.loads(out)
    assert result["runs"] == [alice]
    assert result["blobs"] == 7
    assert result["requested_by"] == "dpo"
    status, out, _ = _cli(capsys, *db, "show", alice, "--json")
    assert status == 0
    assert "[erased]" in out
    assert not any(word in out for word in tokens("A").values())
    status, out, _ = _cli(capsys, *db, "state", alice)
    assert (status, out.strip()) == (0, '"[erased]"')
    status, out, _ = _cli(capsys, *db, "verify")
    assert status == 0
    assert "(7 erased)" in out
    status, out, err = _cli(capsys, *db, "replay", alice)
    assert status == 2
    assert "cannot compare positions 1, 2, 3, 4, 5, 6 (content erased)" in err
    assert "Traceback" not in err
    status, out, err = _cli(capsys, *base, "-y")
    assert status != 0
    assert "it was erased at" in err


def test_an_export_carries_sealed_content_and_never_the_key(tmp_path: Path) -> None:
    """An exported subject run verifies and imports elsewhere; there its content is [erased]."""
    source = tmp_path / "source.db"
    target = tmp_path / "target.db"
    with Ledger.open(f"sqlite:///{source}") as ledger:
        run_id = record_subject_run(ledger, "alice", "A")
        ledger.export_run(run_id, tmp_path / "run.jsonl")
    text = (tmp_path / "run.jsonl").read_text(encoding="utf-8")
    assert not any(word in text for word in tokens("A").values())
    assert "secret" not in text
    with Ledger.open(f"sqlite:///{target}") as other:
        imported = other.import_file(tmp_path / "run.jsonl")
        report = other.verify()
        assert report.ok
        assert report.blobs_erased == report.blobs_erased_unrecorded == 7  # no key here, ever
        assert other.blob(other.events(imported)[0].payload["input_ref"]) is ERASED


def test_async_runs_and_functions_take_a_subject(opened: Ledger) -> None:
    """``arecord_run`` and ``arecord_function`` seal alike; erasure covers both."""
    import asyncio

    async def record() -> tuple[str, str]:
        async with opened.arecord_run("erasure", input="ZqFayInputXv", subject="fay") as run:
            await run.atool("lookup", {"q": "ZqFayArgsXv"}, result={"r": 1})
            await run.aanswer("ZqFayAnswerXv")
        _, function_run = await opened.arecord_function(agents.triage, "Oslo?", subject="fay")
        return run.run_id, function_run

    first, second = asyncio.run(record())
    assert "ZqFay" not in stored_text(opened, first)
    assert sorted(opened.subject_runs("fay")) == sorted([first, second])
    assert opened.erase_subject("fay", reason="r", requested_by="dpo").runs == tuple(
        sorted([first, second])
    )
    assert opened.erased_positions(first) == [1, 2, 3, 4]
    assert opened.verify().ok


def test_show_names_sealed_values_without_their_content(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The timeline shows ``<blob>`` where a subject's values are, before and after erasure."""
    with Ledger.open(sqlite_url) as ledger:
        run_id = record_subject_run(ledger, "alice", "A")
    status, out, _ = _cli(capsys, "--db", sqlite_url, "show", run_id)
    assert status == 0
    assert "input=<blob> subject=<sealed>" in out
    assert "DeltaApplied        <blob>" in out
    assert not any(word in out for word in tokens("A").values())


def test_a_bundled_agent_run_for_a_subject_is_erased(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agentledger run --subject` seals the run; after `erase` it shows [erased] and verifies."""
    script = tmp_path / "answers.json"
    plan = {"steps": [{"goal": "add", "tool": "calculator", "args": {"expression": "2+3"}}]}
    answer = "Zebedee Quarrington: 2 + 3 = 5."
    script.write_text(json.dumps([json.dumps(plan), "", answer]), encoding="utf-8")
    db = ["--db", sqlite_url]
    question = "Zebedee Quarrington asks: what is 2+3?"
    model = f"scripted:{script}"
    status, out, err = _cli(
        capsys, *db, "run", question, "--model", model, "--subject", "zq-1", "--json"
    )
    assert status == 0, err
    run_id = json.loads(out)["run_id"]
    status, out, _ = _cli(capsys, *db, "show", run_id, "--json")
    assert (status, "Zebedee" in out) == (0, True)
    status, out, err = _cli(capsys, *db, "replay", run_id)
    assert status == 0, out + err
    status, out, err = _cli(
        capsys, *db, "erase", "--subject", "zq-1", "--reason", "r", "--requested-by", "dpo", "-y"
    )
    assert status == 0, err
    status, out, _ = _cli(capsys, *db, "show", run_id, "--json")
    assert status == 0
    assert "[erased]" in out
    assert "Zebedee" not in out
    status, out, _ = _cli(capsys, *db, "verify")
    assert status == 0
    assert "erased)" in out


def test_a_subject_run_offering_tools_replays_identically(opened: Ledger) -> None:
    """The tools a subject's run offers are sealed with its content: replay matches them alike."""
    _, run_id = opened.record_function(agents.tooled, "ZqFayInputXv in Oslo?", subject="fay")
    result = replay_run(opened, run_id, raise_on_divergence=False)
    assert result.divergence is None
    assert result.identical


def test_a_sealed_blob_opens_only_with_its_key_and_intact() -> None:
    """Tampered ciphertext, text that is not base64 and another subject's key are refused."""
    from agentledger.ledger._canonical import canonical_json, loads
    from agentledger.ledger._subjects import new_subject_key

    key, other = new_subject_key(), new_subject_key()
    envelope = loads(key.seal(canonical_json({"note": "jane's address"})))
    assert key.open_value(envelope) == {"note": "jane's address"}
    data = envelope["data"]
    flipped = data[:20] + ("A" if data[20] != "A" else "B") + data[21:]
    for text, reason in ((flipped, "InvalidTag"), ("not base64!", "Error"), ("é", "ValueError")):
        with pytest.raises(ValueError, match=rf"does not open with its key \({reason}\)"):
            key.open_data(text)
    with pytest.raises(ValueError, match="does not open"):
        other.open_data(data)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def shredded(request: pytest.FixtureRequest) -> Iterator[tuple[str, Database, str]]:
    """A subject's run next to a bystander on SQLite or PostgreSQL, and raw SQL access to it."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    with Ledger.open(url, redaction=None) as ledger:
        run_id = record_subject_run(ledger, "alice", "A")
        with ledger.record_run("bystander", input="hello") as other:
            other.answer("hi")
        assert ledger.verify().ok
    db = Database(url, request.param)
    yield url, db, run_id
    db.close()


def test_a_key_deleted_outside_erase_subject_is_named_by_verify(
    shredded: tuple[str, Database, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A subject's key deleted by SQL, with no ErasureRecorded fact, is not an erasure."""
    url, db, run_id = shredded
    db.execute("DELETE FROM agentledger_subject_keys")
    with Ledger.open(url) as ledger:
        report = ledger.verify()
    assert not report.ok
    assert {p.reason for p in report.problems} == {"key destroyed"}
    assert report.broken_runs == [run_id]
    assert min(p.position for p in report.problems) == 1  # the input, sealed in RunStarted
    assert "no ErasureRecorded fact names it" in report.problems[0].detail
    assert main(["--db", url, "verify"]) == 1
    assert f"BROKEN run {run_id} position 1: key destroyed" in capsys.readouterr().out


def test_a_key_overwritten_in_the_key_table_is_named_by_verify(
    shredded: tuple[str, Database, str],
) -> None:
    """A key row given other bytes leaves every ref intact but no blob that opens: named."""
    url, db, run_id = shredded
    db.execute("UPDATE agentledger_subject_keys SET secret = ?", [bytes(32)])
    with Ledger.open(url) as ledger:
        report = ledger.verify()
    assert not report.ok
    assert {p.reason for p in report.problems} == {"blob altered"}
    assert report.broken_runs == [run_id]
    assert all("does not open with its key" in p.detail for p in report.problems)


def test_a_key_deleted_with_its_links_is_counted_apart_from_recorded_erasures(
    shredded: tuple[str, Database, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Gone with its run links and no fact, a key reads as one never held here: said so."""
    url, db, _ = shredded
    db.execute("DELETE FROM agentledger_subject_keys")
    db.execute("DELETE FROM agentledger_subject_runs")
    with Ledger.open(url) as ledger:
        report = ledger.verify()
    assert report.ok
    assert report.blobs_erased == report.blobs_erased_unrecorded == 7
    assert main(["--db", url, "verify"]) == 0
    assert "7 of them under keys no recorded erasure names" in capsys.readouterr().out


def test_an_erasure_cut_short_before_the_key_is_deleted_is_named_and_finished(
    shredded: tuple[str, Database, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fact comes first: a failure after it is named by verify; asking again finishes it."""
    url, _db, run_id = shredded
    with Ledger.open(url) as ledger:
        keys_class = type(ledger._keys)

        def crash(*_: Any) -> None:
            raise OSError("the machine lost power")

        with monkeypatch.context() as patched:
            patched.setattr(keys_class, "destroy", crash)
            with pytest.raises(StorageError, match=r"the erasure is recorded .*ask for the same"):
                ledger.erase_subject("alice", reason="art. 17", requested_by="dpo")
        assert len(ledger.erasures()) == 1
        cut = ledger.verify()
        assert not cut.ok
        assert {p.reason for p in cut.problems} == {"erasure unfinished"}
        assert cut.broken_runs == [run_id]
        assert "still readable" in cut.problems[0].detail

        result = ledger.erase_subject("alice", reason="art. 17", requested_by="dpo")
        facts = ledger.erasures()
        assert len(facts) == 1  # the fact of the first attempt, not a second one
        assert result.position == facts[0].position
        assert result.runs == (run_id,)
        finished = ledger.verify()
        assert finished.ok, finished.problems
        assert finished.blobs_erased > 0
        assert finished.blobs_erased_unrecorded == 0
