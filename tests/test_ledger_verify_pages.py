"""Verify in pages: runs longer than a page, every run at once, and stored bytes not canonical.

`Ledger.verify` reads a run `page_size` events at a time (every run at once in key order) and
keeps only each run's chain head between pages; what it reports must not depend on the page
size, nor on whether runs are verified together or one by one. It hashes each event from the
parsed payload without the JSON-native scan, which is sound only if the bytes it hashes are the
canonical bytes of the value readers parse: a writer that hashed other bytes (a repeated key,
whitespace, an escape, another number form or key order) must still be caught.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_ledger_properties import json_values, keys
from test_ledger_tamper import Database, record_audited_run

from agentledger.ledger import (
    Ledger,
    LimitExceededError,
    SequentialIds,
    StepClock,
    UsageError,
    blob_refs_in,
    canonical_json,
    verify_run,
)
from agentledger.ledger._canonical import canonical_json_of_parsed, loads, loads_noting_floats
from agentledger.ledger._hashing import EVENT_DOMAIN, blob_ref, envelope_bytes, envelope_hash
from agentledger.ledger._records import RecordedEvent
from agentledger.ledger._verify_blobs import refs_in_canonical
from agentledger.ledger.errors import InvalidPayloadError

# Canonical bytes of parsed values ------------------------------------------------------------


def outcome(fn: Any, value: Any) -> bytes | type[Exception]:
    """What `fn(value)` gives: its bytes, or the type of error it raises."""
    try:
        return bytes(fn(value))
    except InvalidPayloadError as e:
        return type(e)


@given(json_values, st.booleans(), st.booleans(), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_parsed_values_get_the_bytes_of_the_full_check(
    value: Any, ascii_only: bool, sort: bool, separators: tuple[str, str]
) -> None:
    """Whatever JSON text a value was parsed from, the fast path gives `canonical_json`'s bytes."""
    text = json.dumps(value, ensure_ascii=ascii_only, sort_keys=sort, separators=separators)
    parsed = loads(text)
    assert outcome(canonical_json_of_parsed, parsed) == outcome(canonical_json, parsed)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":NaN}',
        "[Infinity]",
        '{"s":"\\ud800"}',
        '{"\\udc00":1}',
        '{"n":1e400}',
        '{"n":123456789012345678901234567890}',
        '{"n":-0.0}',
        '{"n":1.0,"m":1e-7,"k":1e21,"j":12345678.5}',
        '{"\U0001f600":1,"\uffff":2}',
        '{"a":"x","a":"y"}',
        "[" * 600 + "]" * 600,
        "[" * 511 + "]" * 511,
        "[" * 512 + "]" * 512,
    ],
)
def test_what_parsing_lets_through_takes_the_full_check(text: str) -> None:
    """NaN, lone surrogates, huge numbers, odd floats, non-BMP keys and deep nesting agree."""
    parsed = loads(text)
    expected = outcome(canonical_json, parsed)
    assert outcome(canonical_json_of_parsed, parsed) == expected
    if "[" * 600 in text:
        assert expected is LimitExceededError
    noted, plain = loads_noting_floats(text.encode())
    assert outcome(lambda v: canonical_json_of_parsed(v, plain_floats=plain), noted) == expected


@given(
    json_values,
    st.booleans(),
    st.booleans(),
    st.sampled_from([(",", ":"), (", ", ": ")]),
    st.sampled_from(["", " ", "\n\t"]),
)
def test_floats_judged_while_parsing_give_the_bytes_of_the_full_check(
    value: Any, ascii_only: bool, sort: bool, separators: tuple[str, str], around: str
) -> None:
    """Parsed noting its floats, a value is as `loads` reads it and has `canonical_json`'s bytes.

    Its output is not searched for floats when the parse found them plain; the text it came
    from may be in any key order, spacing or escaping, with whitespace around it.
    """

    def text(ascii_only: bool) -> str:
        dumped = json.dumps(value, ensure_ascii=ascii_only, sort_keys=sort, separators=separators)
        return around + dumped + around

    try:
        data = text(ascii_only).encode()
    except UnicodeEncodeError:  # a lone surrogate: bytes can hold it only as an escape
        data = text(True).encode()
    parsed, plain = loads_noting_floats(data)
    expected = outcome(canonical_json, loads(data))
    assert outcome(canonical_json, parsed) == expected
    assert outcome(lambda v: canonical_json_of_parsed(v, plain_floats=plain), parsed) == expected


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ('{"a":[1,"x",true,null]}', True),
        ('{"cost":0.0123,"ms":12345678.5,"t":-0.5}', True),
        ('{"n":0.0001}', True),
        ('{"n":19.0}', False),
        ('{"n":-0.0}', False),
        ('{"n":0.00009}', False),
        ('{"n":1.9e1}', False),
        ('{"n":1e-7}', False),
        ('{"n":1e400}', False),
        ('{"n":10000000000000000}', False),
        ('{"n":9007199254740991}', True),
    ],
)
def test_the_floats_a_parse_finds_plain(text: str, plain: bool) -> None:
    """Plain: finite, not integral, from 1e-4 up to 1e16 (ints beyond 2^53 are read as floats)."""
    assert loads_noting_floats(text.encode()) == (loads(text), plain)


REF = "sha256:" + "ab" * 32
ref_keys = st.sampled_from(["input_ref", "x_ref", "refs", "a_refs", "ref", "_ref", 'q"_ref'])
ref_values = st.one_of(
    st.just(REF),
    st.just("sha256:" + "cd" * 32),
    st.just("sha256:" + "AB" * 32),
    st.just(REF + "0"),
    st.lists(st.sampled_from([REF, "sha256:" + "ef" * 32]), max_size=3),
    json_values,
)
ref_trees = st.recursive(
    st.dictionaries(st.one_of(ref_keys, keys), ref_values, max_size=4),
    lambda inner: (
        st.dictionaries(st.one_of(ref_keys, keys), inner | ref_values, max_size=4)
        | st.lists(inner, max_size=3)
    ),
    max_leaves=12,
)


@given(ref_trees)
def test_refs_found_in_canonical_bytes_are_those_of_the_walk(value: Any) -> None:
    """The regex over canonical bytes finds exactly the refs `blob_refs_in` finds."""
    try:
        data = canonical_json(value)
    except InvalidPayloadError:
        return
    assert sorted(refs_in_canonical(data, value)) == sorted(blob_refs_in(value))


def test_a_ref_spelled_inside_a_string_is_not_a_ref() -> None:
    """Text that reads like a ref field inside a string value names no blob."""
    value = {"note": f'"x_ref":"{REF}"', "list_refs": [REF, {"inner_ref": REF}]}
    assert refs_in_canonical(canonical_json(value), value) == blob_refs_in(value) == [REF]


# Blobs whose stored bytes are not canonical ---------------------------------------------------


def one_event_run(payload: dict[str, Any]) -> list[RecordedEvent]:
    """A run of one event whose hash is right for `payload`."""
    fields: dict[str, Any] = {
        "run_id": "00000000-0000-0000-0000-000000000001",
        "position": 1,
        "kind": "RunAnnotated",
        "version": 1,
        "timestamp": "2026-01-01T00:00:00.000000Z",
        "event_id": "e1",
        "prev": "0" * 64,
        "payload": payload,
    }
    return [RecordedEvent(**fields, hash=envelope_hash(fields))]


@pytest.mark.parametrize(
    "stored",
    [b'{"a": 1}', b'{"a":1,"a":2}', b'{"b":1,"a":2}', b'{"a":1.0}', b'{"a":"\\u0078"}'],
)
def test_a_blob_whose_stored_bytes_hash_to_its_ref_but_are_not_canonical_is_altered(
    stored: bytes,
) -> None:
    """The ref is the hash of the content's canonical bytes, not of whatever bytes are stored."""
    ref = blob_ref(stored)
    report = verify_run(
        "run", one_event_run({"doc_ref": ref}), lambda refs: dict.fromkeys(refs, stored)
    )
    assert [(p.position, p.reason) for p in report.problems] == [(1, "blob altered")]
    canonical = canonical_json(loads(stored))
    intact = verify_run(
        "run",
        one_event_run({"doc_ref": blob_ref(canonical)}),
        lambda refs: dict.fromkeys(refs, canonical),
    )
    assert intact.ok


# Ledgers ---------------------------------------------------------------------------------------


def record_runs(url: str, count: int, steps: int) -> list[str]:
    """Record `count` runs of `steps` steps; runs of the same parity share their conversation."""
    ids: list[str] = []
    with Ledger.open(url, clock=StepClock(), ids=SequentialIds(url)) as ledger:
        for n in range(count):
            with ledger.record_run("pager", input=f"question {n}", tags=["paged"]) as run:
                prompt = run.prompt("system", "1", "Answer briefly.")
                messages: list[Any] = [{"role": "system", "content": "Answer briefly."}]
                for s in range(steps):
                    with run.step(f"step-{s}") as step:
                        messages.append({"role": "user", "content": f"step {s} of {n % 2}"})
                        response = {"role": "assistant", "content": f"done {s}"}
                        run.model_call(
                            provider="scripted",
                            model="m",
                            messages=messages,
                            response=response,
                            prompt=prompt,
                            step_id=step,
                        )
                        messages.append(response)
                        run.tool("lookup", {"q": s}, result={"found": s}, step_id=step)
                run.answer("done")
            ids.append(run.run_id)
    return ids


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def stored(request: pytest.FixtureRequest) -> Iterator[tuple[str, Database]]:
    """An empty ledger's URL on SQLite or PostgreSQL, and raw SQL access to it.

    The tests drop the append-only triggers (`Database.drop_triggers`) once they have recorded.
    """
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    Ledger.open(url).close()
    db = Database(url, request.param)
    yield url, db
    db.close()


def later(state: bytes) -> bytes:
    """An event's stored JSON with its time moved a year on (its hash left as it was)."""
    edited = state.replace(b'"ts":"2026-', b'"ts":"2027-', 1)
    assert edited != state
    return edited


def found(report: Any) -> list[tuple[str, int, str]]:
    """(run, position, reason) of each problem, in order."""
    return [(p.run_id, p.position, p.reason) for p in report.problems]


def test_a_tampered_event_in_a_later_page_is_named_at_its_position(
    stored: tuple[str, Database],
) -> None:
    """A run of many pages verifies; an edited payload on page 7 is named there and only there."""
    url, db = stored
    (run_id,) = record_runs(url, 1, 8)
    with Ledger.open(url) as ledger:
        count = len(ledger.events(run_id))
        assert count > 30
        assert ledger.verify(page_size=5).ok
        assert ledger.verify(run_id, page_size=5).ok
    position = 33
    db.drop_triggers()
    db.set_state(run_id, position, later(db.state(run_id, position)))
    with Ledger.open(url) as ledger:
        for page_size in (1, 5, 32, 1_000):
            assert found(ledger.verify(page_size=page_size)) == [
                (run_id, position, "payload altered")
            ]
            assert found(ledger.verify(run_id, page_size=page_size)) == [
                (run_id, position, "payload altered")
            ]


def test_events_swapped_across_a_page_boundary_are_named_as_in_one_read(
    stored: tuple[str, Database],
) -> None:
    """Two events swapped across pages are reported as `verify_run` reports the whole run."""
    url, db = stored
    (run_id,) = record_runs(url, 1, 4)
    db.drop_triggers()
    db.move(run_id, 10, 999)
    db.move(run_id, 11, 10)
    db.move(run_id, 999, 11)
    with Ledger.open(url) as ledger:
        whole = verify_run(
            run_id, ledger.events(run_id), ledger.blob_bytes, ledger.run(run_id), indexed=True
        )
        assert "events reordered" in {p.reason for p in whole.problems}
        for page_size in (1, 3, 10, 1_000):
            assert ledger.verify(page_size=page_size).problems == whole.problems
            assert ledger.verify(run_id, page_size=page_size).problems == whole.problems


def test_every_run_at_once_gives_the_verdicts_of_each_run_alone(
    stored: tuple[str, Database],
) -> None:
    """Runs verified together (sharing blob checks) report what each reports on its own."""
    url, db = stored
    runs = record_runs(url, 6, 3)
    with Ledger.open(url) as ledger:
        records = {run_id: ledger.events(run_id) for run_id in runs}
    calls = [r for r in records[runs[0]] if r.kind == "ModelCalled"]
    root = calls[0].payload["messages_ref"]
    db.drop_triggers()
    db.execute("DELETE FROM agentledger_blobs WHERE ref = ?", [root])  # shared by runs 0, 2, 4
    db.set_state(runs[1], 5, later(db.state(runs[1], 5)))
    db.delete_events(runs[3], [4])
    db.execute("UPDATE agentledger_runs SET agent = 'forged' WHERE run_id = ?", [runs[5]])
    with Ledger.open(url) as ledger:
        for page_size in (2, 7, 1_000):
            together = ledger.verify(page_size=page_size)
            alone = {run_id: ledger.verify(run_id, page_size=page_size) for run_id in runs}
            assert set(together.broken_runs) == set(runs)
            for run_id in runs:
                mine = [p for p in together.problems if p.run_id == run_id]
                assert mine == alone[run_id].problems, run_id
            assert {p.reason for p in together.problems} >= {
                "blob missing",
                "payload altered",
                "event missing",
                "index mismatch",
            }


def test_page_size_must_be_a_whole_number_of_at_least_one(ledger: Ledger) -> None:
    """A page of no events, or not a number of events, is refused with the value named."""
    for bad in (0, -3, 2.5, True):
        with pytest.raises(UsageError, match="page_size"):
            ledger.verify(page_size=bad)  # type: ignore[arg-type]


# Stored bytes that are not canonical ------------------------------------------------------------

VARIANTS = {
    "whitespace": (b'"temp_c":19', b'"temp_c": 19'),
    "escaped letter": (b'"sunny"', b'"\\u0073unny"'),
    "escaped key": (b'"temp_c"', b'"temp\\u005fc"'),
    "integral float": (b'"temp_c":19', b'"temp_c":19.0'),
    "exponent": (b'"temp_c":19', b'"temp_c":1.9e1'),
    "key order": (b'{"forecast":"sunny","temp_c":19}', b'{"temp_c":19,"forecast":"sunny"}'),
    "repeated key, first copy forged": (
        b'{"forecast":"sunny",',
        b'{"forecast":"rainy","forecast":"sunny",',
    ),
    "repeated key, last copy forged": (b'"temp_c":19}', b'"temp_c":19,"temp_c":25}'),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_writer_hashing_bytes_that_are_not_canonical_is_caught(
    stored: tuple[str, Database], variant: str
) -> None:
    """The stored hash covers the stored (non-canonical) bytes, and verify still says altered.

    A writer that hashed these bytes made the hash cover one text while readers parse a value
    whose canonical bytes differ (or, with a repeated key, may parse another value): verify
    hashes the canonical bytes of what it parsed, so the event is named.
    """
    url, db = stored
    run_id, positions, _, _ = record_audited_run(url)
    position = positions["DeltaApplied"]
    old, new = VARIANTS[variant]
    db.drop_triggers()
    state = db.state(run_id, position)
    body = json.loads(state)
    assert state.count(old) == 1
    canonical = envelope_bytes(
        run_id=run_id,
        position=position,
        kind="DeltaApplied",
        version=body["v"],
        timestamp=body["ts"],
        event_id=body["id"],
        prev=body["prev"],
        payload_jcs=canonical_json(body["payload"]),
    )
    assert hashlib.sha256(EVENT_DOMAIN + canonical).hexdigest() == body["hash"]
    forged_hash = hashlib.sha256(EVENT_DOMAIN + canonical.replace(old, new, 1)).hexdigest()
    forged = state.replace(old, new, 1).replace(body["hash"].encode(), forged_hash.encode(), 1)
    db.set_state(run_id, position, forged)
    with Ledger.open(url) as ledger:
        assert ledger.events(run_id)[position - 1].hash == forged_hash
        for page_size in (3, 1_000):
            report = ledger.verify(page_size=page_size)
            assert (run_id, position, "payload altered") in found(report)


def test_a_run_recorded_on_while_verify_reads_is_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index row read first, the run's later events after: no false alarm, no missed edit.

    The row is read again after the events: it changed (a writer appended), so the run grew;
    a row rewritten to an earlier state does not change, and is compared as always.
    """
    db = f"sqlite:///{tmp_path / 'live.db'}"
    with Ledger.open(db) as ledger, ledger.record_run("growing", input="q") as run:
        for i in range(5):
            run.delta({"i": i})
        read = Ledger.runs

        def then_record_more(self: Ledger, *args: Any, **kwargs: Any) -> Any:
            rows = read(self, *args, **kwargs)
            for i in range(5, 9):
                run.delta({"i": i})  # after the index was read, before its events are
            return rows

        monkeypatch.setattr(Ledger, "runs", then_record_more)
        report = ledger.verify()
        assert report.ok, report.problems
        assert report.events_checked == 10
        monkeypatch.setattr(Ledger, "runs", read)
        assert ledger.verify().ok
    with sqlite3.connect(tmp_path / "live.db") as conn:  # a row rewritten to an earlier state
        conn.execute(
            "UPDATE agentledger_runs SET status = 'running', ended_at = NULL, "
            "last_position = 3, head_hash = ?",
            ("0" * 64,),
        )
    with Ledger.open(db) as ledger:
        problems = ledger.verify().problems
    assert {"event count", "head hash", "status"} <= {p.field for p in problems}


def test_verify_reports_its_progress_page_by_page(tmp_path: Path) -> None:
    """Events read so far against what the runs index counts, after each page, to the end."""
    with Ledger.open(f"sqlite:///{tmp_path / 'p.db'}") as ledger:
        for _ in range(3):
            with ledger.record_run("paged", input="q") as run:
                for i in range(10):
                    run.delta({"i": i})
        seen: list[tuple[int, int]] = []
        assert ledger.verify(page_size=7, progress=lambda read, total: seen.append((read, total)))
        assert len(seen) == 6  # 36 events, 7 a page
        assert seen[-1] == (36, 36)
        assert [read for read, _ in seen] == sorted({read for read, _ in seen})
        one: list[tuple[int, int]] = []
        ledger.verify(
            run.run_id, page_size=5, progress=lambda read, total: one.append((read, total))
        )
        assert one[-1] == (12, 12)


def test_export_reports_its_progress_to_the_last_line(tmp_path: Path) -> None:
    """Lines written against lines in all, every thousand lines and at the end."""
    with Ledger.open(f"sqlite:///{tmp_path / 'e.db'}") as ledger:
        with ledger.record_run("long", input="q") as run:
            for i in range(1500):
                run.delta({"i": i})
        seen: list[tuple[int, int]] = []
        lines = ledger.export_run(
            run.run_id, tmp_path / "run.jsonl", progress=lambda n, total: seen.append((n, total))
        )
    assert seen == [(1000, lines), (lines, lines)]
    assert lines == len((tmp_path / "run.jsonl").read_text().splitlines())
