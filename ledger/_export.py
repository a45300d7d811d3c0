"""Export a run to one self-contained JSONL file, and import such a file after verifying it.

Line 1 is a header; then one line per event (the full envelope with its hash); then one line per
blob the run refers to (directly or through other blobs), with its content. A data subject's
blob is exported as stored: sealed (its ref checks anywhere), never with the key, so an export
reads that content nowhere but in its own ledger, and nowhere once the subject is erased.

The file is untrusted input. Import checks every line before it writes anything (`_export_read`,
one pass in bounded memory): each event is a well-formed envelope at the next position whose
payload the event catalogue accepts (older class versions through their upcasters), each blob
hashes to its ref, both are within the ledger's `Limits`; then it verifies the hash chain with
the same code as `Ledger.verify`. A refusal (`ImportRefusedError`) names the line and the field,
and nothing is written. A second pass reads the lines again to write them, blobs first, then
events in batches of `_IMPORT_BATCH` (one very large save stalls the PostgreSQL module); the
file must still hold the bytes that were checked (re-hashed before anything is written, each
line again as it is read). A run the ledger already holds the start of takes the events that
follow, so an interrupted import is completed by importing the same file again. Must not know
agents.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentledger.ledger._canonical import canonical_json, loads
from agentledger.ledger._export_lines import FORMAT
from agentledger.ledger._export_read import PROGRESS_EVERY, ExportFile
from agentledger.ledger._ports import parse_timestamp
from agentledger.ledger._records import (
    IMPORT_BATCH,
    BlobRow,
    RecordedEvent,
    RunIndexUpdate,
    RunTotals,
    encode_blob,
)
from agentledger.ledger._run import Run
from agentledger.ledger._verify import blob_refs_in
from agentledger.ledger.errors import ExportRefusedError, ImportRefusedError, StorageError

if TYPE_CHECKING:
    from agentledger.ledger._ledger import Ledger

__all__ = ["FORMAT", "export_run", "import_run"]

_IMPORT_BATCH = IMPORT_BATCH


BLOB_PAGE_SIZE = 500
"""How many blobs an export reads per query (it holds their refs, never all their contents)."""


def _reachable_refs(ledger: Ledger, direct: set[str], page_size: int) -> set[str]:
    """The stored blobs reachable from ``direct`` (through refs inside blobs), by ref.

    Reads the blobs a page at a time and keeps only refs: a long run's contents are never
    held at once.
    """
    found: set[str] = set()
    frontier = sorted(direct)
    while frontier:
        wanted = [ref for ref in dict.fromkeys(frontier) if ref not in found]
        frontier = []
        for start in range(0, len(wanted), page_size):
            for ref, data in ledger.blob_bytes(wanted[start : start + page_size]).items():
                found.add(ref)
                frontier.extend(r for r in blob_refs_in(loads(data)) if r not in found)
    return found


def export_lines(
    ledger: Ledger,
    run_id: str,
    checkpoint: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[str]:
    """The export file's lines, in order, read from the ledger a page at a time.

    A first pass over the events counts them and finds the blobs they reach (the header names
    both); the lines then stream: events (read again, up to the last one counted, so an event
    appended meanwhile is not half exported), blobs by ref, proofs. What is held at once is a
    page of events or blobs and the set of blob refs. With a signed `checkpoint`, the file ends
    with it (a ``checkpoint`` line) and one ``proof`` line per event it covers: that event's
    inclusion proof in the checkpoint's tree. Pages are the ledger's `page_size`. ``progress``
    is told (lines so far, lines in all) every `PROGRESS_EVERY` lines and at the end.
    """
    blob_page = min(ledger.page_size, BLOB_PAGE_SIZE)
    count, last, first_id = 0, 0, run_id
    direct: set[str] = set()
    covered: list[tuple[str, int, str]] = []
    indexed = ledger.run(run_id)  # read first: the run may only grow while it is exported
    head = ""
    for record in ledger.iter_events(run_id):
        if not count:
            first_id = record.run_id
        count, last = count + 1, record.position
        if last == indexed.event_count:
            head = record.hash
        direct.update(blob_refs_in(record.payload))
        if checkpoint is not None:
            covered.append((record.run_id, record.position, record.hash))
    _check_against_index(run_id, indexed.event_count, indexed.head_hash, last, head)
    refs = sorted(_reachable_refs(ledger, direct, blob_page))
    del direct
    proofs: list[dict[str, Any]] = []
    if checkpoint is not None:
        from agentledger.ledger._checkpoints import proof_items

        proofs = proof_items(ledger.transparency_log, checkpoint, covered)
        del covered
    header: dict[str, Any] = {"format": FORMAT, "run_id": first_id, "events": count}
    header["blobs"] = len(refs)
    if proofs:
        header["proofs"] = len(proofs) - 1
    total, done = 1 + count + len(refs) + len(proofs), 0

    def told(line: str) -> str:
        nonlocal done
        done += 1
        if progress is not None and (done % PROGRESS_EVERY == 0 or done == total):
            progress(done, total)
        return line

    yield told(json.dumps(header, ensure_ascii=False))
    if count:
        for record in ledger.iter_events(run_id, upto=last):
            yield told(json.dumps({"type": "event", **record.envelope()}, ensure_ascii=False))
    for start in range(0, len(refs), blob_page):
        page = refs[start : start + blob_page]
        found = ledger.blob_bytes(page)
        for ref in page:
            content = loads(found[ref])
            blob = {"type": "blob", "ref": ref, "content": content}
            yield told(json.dumps(blob, ensure_ascii=False))
    for item in proofs:
        yield told(json.dumps(item, ensure_ascii=False))


class BrokenRunError(Exception):
    """The run fails its own checks: an export would pass a cut or edited run on as whole."""


def _check_against_index(run_id: str, indexed: int, head_hash: str, last: int, head: str) -> None:
    """Refuse a run whose stored events end before, or differ from, what its index row says.

    Its file would import and verify as intact (a cut chain is still a chain), so the export
    would launder the cut. A run recorded on meanwhile (more events than its row) is fine.
    """
    if indexed > last:
        raise BrokenRunError(
            f"run {run_id} fails its own checks: its runs index recorded {indexed} events and "
            f"{last} are stored (the last were deleted); `agentledger verify {run_id}` says more"
        )
    if head and head != head_hash:
        raise BrokenRunError(
            f"run {run_id} fails its own checks: event {indexed} is not the head its runs index "
            f"recorded (an event was altered); `agentledger verify {run_id}` says more"
        )


def export_run(
    ledger: Ledger,
    run_id: str,
    path: str | os.PathLike[str],
    checkpoint: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Write one run to `path` as JSONL, line by line; returns the number of lines written.

    The lines go to a new file beside `path` that replaces it once complete, so an error
    leaves `path` as it was (nothing half written). A `path` that is not a regular file (a
    pipe, ``/dev/stdout``) is written directly.
    """
    target = Path(path)
    if target.is_symlink():  # replace the file it points to, not the link
        target = target.resolve()
    lines = export_lines(ledger, run_id, checkpoint, progress)
    if target.exists() and not target.is_file():
        written = 0
        try:
            with target.open("w", encoding="utf-8") as out:
                for line in lines:
                    out.write(line + "\n")
                    written += 1
        except BrokenRunError as e:
            raise ExportRefusedError(os.fspath(path), str(e)) from None
        return written
    partial = _partial_file(target)
    try:
        written = 0
        with partial.open("w", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
                written += 1
        partial.replace(target)
    except BrokenRunError as e:
        partial.unlink(missing_ok=True)
        raise ExportRefusedError(os.fspath(path), str(e)) from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return written


def _partial_file(target: Path) -> Path:
    """A new, empty file beside ``target`` (created with the mode a plain ``open`` would give)."""
    attempt = 0
    while True:
        partial = target.with_name(f".{target.name}.{os.getpid()}.{attempt}.partial")
        try:
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            attempt += 1
            continue
        return partial


def import_run(
    ledger: Ledger,
    path: str | os.PathLike[str],
    progress: Callable[[str, int, int], None] | None = None,
) -> str:
    """Verify an export file and, if intact, write its run; returns the run id.

    ``progress`` is told ("checked", lines read, lines announced) as the file is checked and
    ("written", events written, events in the file) after each batch the import commits.
    """
    path = Path(path)
    checked = None if progress is None else partial(progress, "checked")
    with ExportFile.open(path, ledger.limits, checked) as file:
        file.refuse()
        run_id = file.run_id
        if not file.event_count:
            file.findings.problem(1, "the file holds no events: a run begins with RunStarted")
            file.refuse()
        report = file.verify()
        for problem in report.problems:
            file.findings.problem(file.line_of(problem.position), str(problem))
        file.refuse()
        done, run = 0, None
        if run_id in ledger.run_ids():
            held = _held(ledger, run_id, file)
            if held is None:
                raise ImportRefusedError(
                    str(path), [f"run {run_id} already exists with other events"]
                )
            done, run = held
            if done >= file.event_count:
                return run_id  # all of it is here (a run that went on here has more): nothing new
        file.check_unchanged()
        _write(ledger, file, run, done, progress)
    return run_id


def _held(ledger: Ledger, run_id: str, file: ExportFile) -> tuple[int, Run] | None:
    """How many of the file's events the ledger holds, and the run as it stands; or None.

    None when the ledger's events are not a start of the file's, nor the file's a start of the
    ledger's. The ledger holding the start of this very chain is an import cut short (it
    commits in batches) or an earlier export of the run: the file is verified whole, so what
    follows links to the existing head, and importing again completes the run. A ledger holding
    more than the file (the run went on here) has nothing new to take. Both are read a page at
    a time, and the run is rebuilt from its first and last events, not by loading it.
    """
    incoming = file.hashes()
    held = 0
    compared = True
    first: RecordedEvent | None = None
    last: RecordedEvent | None = None
    status = "running"
    for record in ledger.iter_events(run_id):
        if first is None:
            first = record
        last = record
        status = _ENDS.get(record.kind, status)
        held += 1
        if compared:
            stated = next(incoming, None)
            if stated is None:
                compared = False  # the ledger holds more than the file
            elif stated != record.hash:
                return None
    if first is None or last is None:
        return 0, ledger.load(run_id)
    run = Run.started_by(first, canonical_json(first.payload))
    run.collect_events()
    run.advance(last.position, last.hash, status)
    return held, run


_ENDS = {"RunCompleted": "completed", "RunFailed": "failed"}
_BLOB_BATCH_BYTES = 1 << 20
"""Blob bytes an import commits per transaction at most (but at least one blob)."""


def _write(
    ledger: Ledger,
    file: ExportFile,
    run: Run | None,
    done: int,
    progress: Callable[[str, int, int], None] | None,
) -> None:
    """Write the file's blobs, then its events after the first `done` (onto `run`), in batches.

    Each line is read again from the file and must be the line that was checked: one that is
    not stops the import (`ImportRefusedError`) with the batches before it committed, a start
    of the run that verifies (importing the file again completes it).
    """
    try:
        _write_blobs(ledger, file)
        _write_events(ledger, file, run, done, progress)
    except ImportRefusedError as e:
        held = ledger.run(file.run_id).event_count if file.run_id in ledger.run_ids() else 0
        detail = (
            f"{'; '.join(e.problems)}: {held} of its {file.event_count} events are written (a "
            "start of the run that verifies); import the file again once it stops changing"
        )
        raise ImportRefusedError(file.source, [detail]) from e


def _write_blobs(ledger: Ledger, file: ExportFile) -> None:
    """Write every blob of the file, a batch of up to `_IMPORT_BATCH` or ~1 MB at a time."""
    rows: list[BlobRow] = []
    size = 0
    for ref, canonical in file.blob_rows():
        rows.append(encode_blob(ref, canonical))
        size += len(canonical)
        if len(rows) >= _IMPORT_BATCH or size >= _BLOB_BATCH_BYTES:
            _put(ledger, [], rows, [])
            rows, size = [], 0
    if rows:
        _put(ledger, [], rows, [])


def _write_events(
    ledger: Ledger,
    file: ExportFile,
    run: Run | None,
    done: int,
    progress: Callable[[str, int, int], None] | None,
) -> None:
    """Write the file's events after the first `done`, `_IMPORT_BATCH` per transaction."""
    new = run is None
    for chunk in file.records(done, _IMPORT_BATCH):
        for record, payload_jcs in chunk:
            fields = {
                "kind": record.kind,
                "schema_version": record.version,
                "event_id": record.event_id,
                "recorded_at": record.timestamp,
                "prev": record.prev,
                "hash": record.hash,
                "payload": record.payload,
                "payload_jcs": payload_jcs,
                "timestamp": parse_timestamp(record.timestamp),
            }
            if run is None:
                run = Run.start(record.run_id, **fields)
            else:
                run.record(**fields)
        assert run is not None
        first, last = chunk[0][0], chunk[-1][0]
        started = new and first.position == 1
        update = RunIndexUpdate(
            run_id=first.run_id,
            last_position=last.position,
            head_hash=last.hash,
            status=run.status,
            updated_at=last.timestamp,
            started=first.payload if started else None,
            tags=tuple(first.payload.get("tags", ())) if started else (),
            totals=RunTotals.of((r.kind, r.payload) for r, _ in chunk),
        )
        _put(ledger, run.collect_events(), [], [update])
        if progress is not None:
            progress("written", last.position, file.event_count)


def _put(
    ledger: Ledger, events: Sequence[Any], blobs: list[BlobRow], runs: list[RunIndexUpdate]
) -> None:
    """Commit events, blobs and runs-index updates in one transaction."""
    try:
        ledger._store.events.put(events, blobs=blobs, runs=runs)
    except Exception as e:
        raise StorageError(ledger.url, f"import failed: {e}") from e
