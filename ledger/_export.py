"""Export a run to one self-contained JSONL file, and import such a file after verifying it.

Line 1 is a header; then one line per event (the full envelope with its hash); then one line per
blob the run refers to (directly or through other blobs), with its content. Import verifies the
file with the same code as `Ledger.verify` and writes nothing unless it is intact. It commits in
batches of `_IMPORT_BATCH` events (one very large save stalls the PostgreSQL module); a run the
ledger already holds the start of takes the events that follow, so an interrupted import is
completed by importing the same file again.
Must not know agents.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentledger.ledger._canonical import canonical_json, loads
from agentledger.ledger._ports import parse_timestamp
from agentledger.ledger._records import RecordedEvent, RunIndexUpdate, encode_blob
from agentledger.ledger._run import Run
from agentledger.ledger._verify import blob_refs_in, verify_run
from agentledger.ledger.errors import ImportRefusedError, InvalidPayloadError, StorageError

if TYPE_CHECKING:
    from agentledger.ledger._ledger import Ledger

__all__ = ["FORMAT", "export_run", "import_run"]

FORMAT = "agentledger-export/v1"
_IMPORT_BATCH = 500


def _reachable_blobs(ledger: Ledger, records: list[RecordedEvent]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    frontier = [ref for r in records for ref in blob_refs_in(r.payload)]
    while frontier:
        wanted = [ref for ref in dict.fromkeys(frontier) if ref not in found]
        frontier = []
        for ref, data in ledger.blob_bytes(wanted).items():
            found[ref] = data
            frontier.extend(blob_refs_in(loads(data)))
    return found


def export_lines(ledger: Ledger, run_id: str) -> Iterator[str]:
    """The export file's lines, in order."""
    records = ledger.events(run_id)
    blobs = _reachable_blobs(ledger, records)
    header = {
        "format": FORMAT,
        "run_id": records[0].run_id if records else run_id,
        "events": len(records),
        "blobs": len(blobs),
    }
    yield json.dumps(header, ensure_ascii=False)
    for record in records:
        yield json.dumps({"type": "event", **record.envelope()}, ensure_ascii=False)
    for ref in sorted(blobs):
        content = loads(blobs[ref])
        yield json.dumps({"type": "blob", "ref": ref, "content": content}, ensure_ascii=False)


def export_run(ledger: Ledger, run_id: str, path: str | os.PathLike[str]) -> int:
    """Write one run to `path` as JSONL; returns the number of lines written."""
    lines = 0
    with Path(path).open("w", encoding="utf-8") as out:
        for line in export_lines(ledger, run_id):
            out.write(line + "\n")
            lines += 1
    return lines


def _read(path: Path) -> tuple[dict[str, Any], list[RecordedEvent], dict[str, bytes]]:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ImportRefusedError(source, [f"cannot read the file: {e}"]) from e
    # Only "\n" ends a line: str.splitlines() would also split inside JSON strings holding
    # U+2028, U+2029 or other Unicode line breaks.
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        raise ImportRefusedError(source, ["the file is empty"])
    try:
        header = loads(lines[0])
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ImportRefusedError(source, [f"line 1 is not an {FORMAT} header"])
        records: list[RecordedEvent] = []
        blobs: dict[str, bytes] = {}
        for number, line in enumerate(lines[1:], start=2):
            item = loads(line)
            if item.get("type") == "event":
                records.append(
                    RecordedEvent(
                        run_id=item["run_id"],
                        position=item["position"],
                        kind=item["kind"],
                        version=item["version"],
                        timestamp=item["timestamp"],
                        event_id=item["event_id"],
                        prev=item["prev"],
                        hash=item["hash"],
                        payload=item["payload"],
                    )
                )
            elif item.get("type") == "blob":
                blobs[item["ref"]] = canonical_json(item["content"])
            else:
                raise ImportRefusedError(source, [f"line {number} is neither event nor blob"])
    except (ValueError, KeyError, TypeError, InvalidPayloadError) as e:
        raise ImportRefusedError(source, [f"malformed file: {e}"]) from e
    return header, records, blobs


def import_run(ledger: Ledger, path: str | os.PathLike[str]) -> str:
    """Verify an export file and, if intact, write its run; returns the run id."""
    path = Path(path)
    header, records, blobs = _read(path)
    run_id = str(header.get("run_id", ""))
    problems: list[str] = []
    if header.get("events") != len(records):
        problems.append(f"header announces {header.get('events')} events, file has {len(records)}")
    if any(r.run_id != run_id for r in records):
        problems.append("events belong to more than one run")
    if not records or records[0].kind != "RunStarted":
        problems.append("the run does not begin with RunStarted")
    report = verify_run(run_id, records, lambda refs: {r: blobs[r] for r in refs if r in blobs})
    problems += [str(p) for p in report.problems]
    if problems:
        raise ImportRefusedError(str(path), problems)
    if run_id not in ledger.run_ids():
        _write(ledger, records, blobs)
        return run_id
    existing = [r.hash for r in ledger.events(run_id)]
    incoming = [r.hash for r in records]
    if incoming[: len(existing)] == existing:
        # The ledger holds the start of this very chain: an import cut short (it commits in
        # batches) or an earlier export of the run. The file is verified whole, so what follows
        # links to the existing head; importing again completes the run.
        if len(incoming) > len(existing):
            _write(ledger, records[len(existing) :], blobs, run=ledger.load(run_id))
        return run_id
    if existing[: len(incoming)] == incoming:
        return run_id  # an earlier export of a run that went on here: nothing new
    raise ImportRefusedError(str(path), [f"run {run_id} already exists with other events"])


def _write(
    ledger: Ledger,
    records: list[RecordedEvent],
    blobs: dict[str, bytes],
    run: Run | None = None,
) -> None:
    """Write a run's `records`, or those that follow `run`'s last event, in batches."""
    new = run is None
    rows = [encode_blob(ref, data) for ref, data in blobs.items()]
    status = "running"
    for start in range(0, len(records), _IMPORT_BATCH):
        chunk = records[start : start + _IMPORT_BATCH]
        for record in chunk:
            fields = {
                "kind": record.kind,
                "schema_version": record.version,
                "event_id": record.event_id,
                "recorded_at": record.timestamp,
                "prev": record.prev,
                "hash": record.hash,
                "payload": record.payload,
                "payload_jcs": canonical_json(record.payload),
                "timestamp": parse_timestamp(record.timestamp),
            }
            if run is None:
                run = Run.start(record.run_id, **fields)
            else:
                run.record(**fields)
        assert run is not None
        status = run.status
        first = chunk[0]
        update = RunIndexUpdate(
            run_id=first.run_id,
            last_position=chunk[-1].position,
            head_hash=chunk[-1].hash,
            status=status,
            updated_at=chunk[-1].timestamp,
            started=records[0].payload if new and start == 0 else None,
            tags=tuple(records[0].payload.get("tags", ())) if new and start == 0 else (),
        )
        try:
            ledger._store.events.put(
                run.collect_events(), blobs=rows if start == 0 else [], runs=[update]
            )
        except Exception as e:
            raise StorageError(ledger.url, f"import failed: {e}") from e
