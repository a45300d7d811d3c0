"""The ledger benchmark's idealised ledger measures the same bytes the ledger writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bench_ledger
from bench._ideal import ideal_pass, logical_sets
from bench._workload import make_run_plans


def _recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, ...]:
    monkeypatch.setattr(bench_ledger, "TMP_ROOT", tmp_path)
    plans = make_run_plans(2, steps=4)
    return bench_ledger.capture_pass(lambda ledger: bench_ledger.record_batched(ledger, plans))


def _ideal_rows(tmp_path: Path, schema: list[str], pragmas: dict[str, object], sets: list) -> list:
    conn = bench_ledger.raw_connect(tmp_path / "ideal.db", pragmas)
    for statement in schema:
        conn.execute(statement)
    _, written = ideal_pass(conn, bench_ledger.INSERT, sets)
    conn.close()
    return written


def test_the_idealised_ledger_writes_the_ledgers_exact_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fed the logical content of a recording, it rebuilds every stored event byte for byte.

    That is what lets its ceiling share the ledger's baseline: if the ledger's stored format
    changes, this fails before the benchmark compares unlike rows.
    """
    _, schema, rows, sets, result = _recorded(tmp_path, monkeypatch)
    written = _ideal_rows(tmp_path, schema, result.pragmas, logical_sets(sets))
    assert len(rows) > 10
    assert written == rows


def test_a_changed_payload_changes_the_idealised_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison can fail: one changed payload value changes that row and the chain after."""
    _, schema, rows, sets, result = _recorded(tmp_path, monkeypatch)
    logical = logical_sets(sets)
    run_hex, run_id, position, kind, payload, ts, event_id, version = logical[1].events[0]
    changed = {**payload, "x": 1}
    logical[1].events[0] = (run_hex, run_id, position, kind, changed, ts, event_id, version)
    written = _ideal_rows(tmp_path, schema, result.pragmas, logical)
    differing = [i for i, (a, b) in enumerate(zip(written, rows, strict=True)) if a != b]
    assert differing[0] == position - 1
    assert len(differing) > 1
