"""Golden recorded runs (tests/golden/) import, verify and replay; one diverges where it should.

The files are made by ``tests/golden/make_golden.py``; the last test regenerates them into a
temporary directory and fails, naming the file and position, when the committed ones are stale.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentledger.ledger import Ledger
from agentledger.replay import ReplayDivergenceError, replay_run

GOLDEN = Path(__file__).resolve().parent / "golden"
GENERATOR = GOLDEN / "make_golden.py"
REGENERATE = f".venv/bin/python {GENERATOR.relative_to(GOLDEN.parent.parent)}"
IDENTICAL = [
    "pipeline.jsonl",
    "reasoning.jsonl",
    "coordinator.jsonl",
    "tools.jsonl",
    "router.jsonl",
    "old_schema_tools.jsonl",
]
DIVERGENT = GOLDEN / "divergent_pipeline.jsonl"
OLD_SCHEMA = GOLDEN / "old_schema_tools.jsonl"
UNSTABLE_FIELDS = frozenset({"code_version", "head_hash", "latency_ms", "latency_s"})
"""Fields a regeneration may legitimately change: the installed version, the head hash that
covers it, and tool latencies (pinned by the generator, ignored by replay anyway)."""


def imported(path: Path) -> tuple[Ledger, str]:
    """A fresh memory ledger holding the run of ``path``, and its id."""
    ledger = Ledger.open("memory://")
    return ledger, ledger.import_file(path)


def event_lines(path: Path) -> list[dict[str, Any]]:
    """The event lines of an export file, parsed."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [line for line in lines if line.get("type") == "event"]


def stable(value: Any) -> Any:
    """``value`` without the fields a regeneration may change."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in UNSTABLE_FIELDS}
    if isinstance(value, list):
        return [stable(item) for item in value]
    return value


def recorded_content(path: Path) -> list[tuple[str, int, Any]]:
    """What a golden file records, event by event: kind, schema version, stable payload."""
    return [(e["kind"], e["version"], stable(e["payload"])) for e in event_lines(path)]


def load_generator() -> ModuleType:
    """``tests/golden/make_golden.py`` as a module (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_golden", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected_divergence() -> dict[str, Any]:
    """The sidecar of the divergent golden: the position and kind replay must name."""
    path = GOLDEN / "divergent_pipeline.expected.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", IDENTICAL)
def test_a_golden_run_imports_verifies_and_replays_identically(name: str) -> None:
    """Every committed golden run is intact and replays event for event, to its end."""
    ledger, run_id = imported(GOLDEN / name)
    assert ledger.verify(run_id).ok
    result = replay_run(ledger, run_id)
    assert result.identical
    assert result.finished
    assert result.divergence is None
    assert result.events == len(ledger.events(run_id))


def test_there_is_one_golden_run_per_orchestration() -> None:
    """The goldens cover every orchestration the agents package registers."""
    from agentledger.agents import AGENTS

    agents = {event_lines(GOLDEN / name)[0]["payload"]["agent"] for name in IDENTICAL}
    assert agents == set(AGENTS)


def test_the_divergent_golden_is_intact_but_replay_diverges_at_the_recorded_position() -> None:
    """It verifies (its chain is honest), yet replay raises at the altered DeltaApplied."""
    expected = expected_divergence()
    ledger, run_id = imported(DIVERGENT)
    assert ledger.verify(run_id).ok
    with pytest.raises(ReplayDivergenceError) as caught:
        replay_run(ledger, run_id)
    found = caught.value.divergence
    assert found.position == expected["position"]
    assert found.expected_kind == found.actual_kind == expected["kind"]
    assert found.changes, "the divergence names the changed paths"
    assert all(c.path.startswith("/patch/") for c in found.changes)
    assert f"position {expected['position']}" in str(caught.value)
    assert caught.value.run_id == run_id


def test_replaying_the_divergent_golden_without_raising_reports_the_same_position() -> None:
    """With raise_on_divergence=False the result says where, and that all before it matched."""
    expected = expected_divergence()
    ledger, run_id = imported(DIVERGENT)
    result = replay_run(ledger, run_id, raise_on_divergence=False)
    assert not result.identical
    assert result.divergence is not None
    assert result.divergence.position == expected["position"]
    assert result.events == expected["position"] - 1


def test_the_divergent_golden_differs_from_the_honest_one_in_exactly_one_event() -> None:
    """Only the altered DeltaApplied differs from the honest pipeline golden (same script)."""
    position = expected_divergence()["position"]
    honest = recorded_content(GOLDEN / "pipeline.jsonl")
    altered = recorded_content(DIVERGENT)
    assert len(honest) == len(altered)
    differing = [n for n, (a, b) in enumerate(zip(honest, altered, strict=True), 1) if a != b]
    assert differing == [position]


def test_the_old_schema_golden_is_version_1_on_disk() -> None:
    """Its ToolReturned lines are class_version 1 with latency_s, and are imported as such."""
    returned = [e for e in event_lines(OLD_SCHEMA) if e["kind"] == "ToolReturned"]
    assert returned
    for event in returned:
        assert event["version"] == 1
        assert "latency_s" in event["payload"]
        assert "latency_ms" not in event["payload"]
    ledger, run_id = imported(OLD_SCHEMA)
    stored = [e for e in ledger.events(run_id) if e.kind == "ToolReturned"]
    assert [e.version for e in stored] == [1] * len(returned)


def test_the_old_schema_golden_replays_identically_through_the_upcaster() -> None:
    """Replay upcasts each v1 ToolReturned and finds the run identical to the current code's."""
    ledger, run_id = imported(OLD_SCHEMA)
    assert ledger.verify(run_id).ok
    result = replay_run(ledger, run_id)
    assert result.identical
    assert result.events == len(ledger.events(run_id))


def test_the_golden_files_are_up_to_date(tmp_path: Path) -> None:
    """Regenerating records the same events; if not, the message says how to refresh them."""
    written = load_generator().generate(tmp_path)
    fresh = {path.name for path in written}
    committed = {path.name for path in GOLDEN.iterdir() if path.suffix in (".jsonl", ".json")}
    assert fresh == committed, f"golden file set changed; rerun {REGENERATE}"
    stale: list[str] = []
    for name in sorted(fresh):
        if name.endswith(".json"):
            if json.loads((tmp_path / name).read_text()) != json.loads((GOLDEN / name).read_text()):
                stale.append(f"{name}: content differs")
            continue
        now, then = recorded_content(tmp_path / name), recorded_content(GOLDEN / name)
        if now == then:
            continue
        first = next(
            (n for n, (a, b) in enumerate(zip(now, then, strict=False), 1) if a != b),
            min(len(now), len(then)) + 1,
        )
        kind = now[first - 1][0] if first <= len(now) else "(end of run)"
        stale.append(f"{name}: first difference at position {first} ({kind})")
    if stale:
        pytest.fail(
            "the committed golden runs no longer match what the code records:\n  "
            + "\n  ".join(stale)
            + f"\nIf the change is intended, rerun `{REGENERATE}`, review `git diff tests/golden`"
            " and commit the new files.",
            pytrace=False,
        )
