"""Bounded memory: record, verify, replay, export and import a 100k-event run in bounded RSS.

The run is recorded with the library API (``Ledger.record_function``: the function calls
``run.model_call``, ``run.tool`` and ``run.delta``), four events a turn, a conversation of eight
turns per task (each call re-sends its task's history, stored once as message nodes). Each phase
runs in a fresh process on the same SQLite file: the figure is the process's peak RSS above its
RSS right after its imports (``VmHWM`` and ``VmRSS`` of /proc/self/status), so what it holds of
the run is what shows. Target: <= 40 MB above post-import RSS for each phase, at any run length.
``--quick`` records 10k events. ``python -m bench --only memory``. Measured before the bounded
recorder, paged export and paged replay (same 100k run): record 130 MB, replay 234 MB, export
289 MB; verify (233 MB) still reads the whole run (its streaming belongs to ``ledger/_verify.py``).

The rows: record (``record_function``), verify (``Ledger.verify(run_id)``), replay
(``replay_run``: the function re-executed against the record), export (``export_run`` to a
JSONL file), import (``Ledger.import_file`` of that file into a new SQLite file) and verify
--file (``verify_export`` of the run exported with a signed checkpoint: what ``agentledger verify
--file`` runs). Measured before the bounded import reader (same 100k run: a 71 MB export, 161
MB with its proofs): import 960 MB, verify --file 1,554 MB. The reader keeps its index in a
scratch SQLite file in the temporary folder: disk, not RSS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

EVENTS, QUICK_EVENTS = 100_000, 10_000
TARGET_MB = 40.0
TURNS_PER_TASK = 8
PHASES = ("record", "verify", "replay", "export", "import", "verify --file")
ROOT = Path(__file__).resolve().parent.parent


def workload(run: Any, turns: int) -> int:
    """The recorded function: ``turns`` turns of a model call, a tool call and a state delta."""
    system = {"role": "system", "content": "You plan deliveries. Be brief. " * 4}
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        task, step = divmod(turn, TURNS_PER_TASK)
        if step == 0:
            history = [system, {"role": "user", "content": f"Task {task}: route the parcels."}]
        said = f"Step {step} of task {task}: look up stop {turn}."
        answer = {"role": "assistant", "content": said}
        run.model_call(
            provider="scripted",
            model="planner-1",
            messages=history,
            response=answer,
            usage={"input_tokens": 40 + 12 * step, "output_tokens": 12},
        )
        result = {"stop": turn, "eta_min": turn % 37, "note": "clear road " * 3}
        run.tool("lookup_stop", {"stop": turn}, result=result)
        run.delta({"stops": {str(turn): {"eta_min": turn % 37}}, "task": task})
        history = [*history, answer, {"role": "user", "content": json.dumps(result)}]
    return turns


def _rss_mb(field: str = "VmHWM") -> float:
    """This process's peak RSS (``VmHWM``) or current RSS (``VmRSS``), in MB.

    Read from /proc where there is one: ``ru_maxrss`` keeps the high-water mark of the process
    image before ``exec``, so a phase started from a large parent (the full ``python -m bench``
    run) reported its parent's peak as its own and measured 0 MB above it.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text(encoding="ascii").splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024.0
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def signed_export(db: str) -> str:
    """Export the run with a signed checkpoint (for verify --file); returns the verifier key."""
    from agentledger.ledger import Ledger
    from agentledger.ledger.signed_note import generate_key

    signer, verifier = generate_key("memory.bench/log")
    with Ledger.open(f"sqlite:///{db}") as ledger:
        note = ledger.checkpoint(signer)
        ledger.export_run(ledger.run_ids()[0], _signed_file(db), checkpoint=note)
    return verifier


def _signed_file(db: str) -> Path:
    return Path(db).with_suffix(".signed.jsonl")


def phase(name: str, db: str, turns: int, verifier: str = "") -> dict[str, Any]:
    """Run one phase in this process; its peak RSS above the RSS after imports, in MB."""
    from agentledger.ledger import Ledger, verify_export
    from agentledger.replay import replay_run

    base = _rss_mb("VmRSS")  # after the imports, before the ledger is opened
    if name == "verify --file":
        checked = verify_export(_signed_file(db), [verifier])
        return {"phase": name, "mb": round(_rss_mb() - base, 1), "detail": checked.ok}
    if name == "import":
        with Ledger.open(f"sqlite:///{Path(db).with_suffix('.imported.db')}") as ledger:
            run_id = ledger.import_file(Path(db).with_suffix(".jsonl"))
            detail = ledger.run(run_id).event_count
        return {"phase": name, "mb": round(_rss_mb() - base, 1), "detail": detail}
    with Ledger.open(f"sqlite:///{db}") as ledger:
        if name == "record":
            _, run_id = ledger.record_function(workload, turns, agent="memory-bench")
            detail: Any = ledger.run(run_id).event_count
        else:
            run_id = ledger.run_ids()[0]
            if name == "verify":
                detail = ledger.verify(run_id).ok
            elif name == "replay":
                detail = replay_run(ledger, run_id).identical
            else:
                detail = ledger.export_run(run_id, Path(db).with_suffix(".jsonl"))
        return {"phase": name, "mb": round(_rss_mb() - base, 1), "detail": detail}


def _measure(name: str, db: str, turns: int, verifier: str = "") -> dict[str, Any]:
    code = (
        "import json, sys; from bench.bench_memory import phase; "
        f"print(json.dumps(phase({name!r}, {db!r}, {turns}, {verifier!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        msg = f"the {name} phase failed:\n{done.stderr}"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Record, verify, replay, export, import and verify --file one run, each in a fresh process.

    Each row is MB above the process's RSS after its imports.
    """
    events = QUICK_EVENTS if quick else EVENTS
    turns = events // 4
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agentledger-memory-") as folder:
        db = str(Path(folder) / "run.db")
        verifier = ""
        for name in PHASES:
            if name == "verify --file":
                verifier = signed_export(db)
            found = _measure(name, db, turns, verifier)
            if name == "record":
                events = int(found["detail"])
            elif found["detail"] is False:
                msg = f"the {name} phase did not succeed: {found}"
                raise AssertionError(msg)
            rows.append(
                {
                    "name": f"{name} a library run of {events:,} events: peak RSS above imports",
                    "value": found["mb"],
                    "baseline": TARGET_MB,
                    "ratio": round(found["mb"] / TARGET_MB, 3),
                    "target": 1.0,
                    "unit": "MB",
                    "higher_is_better": False,
                    "note": "baseline = the 40 MB budget; SQLite file; a fresh process per phase",
                }
            )
    return rows
