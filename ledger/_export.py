"""Export a run to one self-contained JSONL file, and import such a file after verifying it.

Line 1 is a header; then one line per event (the full envelope with its hash); then one line per
blob the run refers to (directly or through other blobs), with its content. A data subject's
blob is exported as stored: sealed (its ref checks anywhere), never with the key, so an export
reads that content nowhere but in its own ledger, and nowhere once the subject is erased.

The file is untrusted input. Import checks every line before it writes anything: each event is a
well-formed envelope at the next position whose payload the event catalogue accepts (older class
versions through their upcasters), each blob hashes to its ref, both are within the ledger's
`Limits`; then it verifies the hash chain with the same code as `Ledger.verify`. A refusal
(`ImportRefusedError`) names the line and the field, and nothing is written. It commits in
batches of `_IMPORT_BATCH` events (one very large save stalls the PostgreSQL module); a run the
ledger already holds the start of takes the events that follow, so an interrupted import is
completed by importing the same file again. Must not know agents.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import ValidationError

from agentledger.ledger._canonical import (
    canonical_json,
    check_json_native,
    loads,
    loads_untrusted,
)
from agentledger.ledger._hashing import blob_ref
from agentledger.ledger._limits import Limits
from agentledger.ledger._ports import parse_timestamp
from agentledger.ledger._records import (
    IMPORT_BATCH,
    RecordedEvent,
    RunIndexUpdate,
    RunTotals,
    encode_blob,
)
from agentledger.ledger._run import Run
from agentledger.ledger._subjects import is_sealed
from agentledger.ledger._verify import blob_refs_in, verify_run
from agentledger.ledger.errors import (
    ExportRefusedError,
    ImportRefusedError,
    InvalidPayloadError,
    LimitExceededError,
    StorageError,
)
from agentledger.ledger.events import EVENT_TYPES, event_type, upcast

if TYPE_CHECKING:
    from agentledger.ledger._ledger import Ledger

__all__ = ["FORMAT", "export_run", "import_run"]

FORMAT = "agentledger-export/v1"
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


_ENVELOPE = ("run_id", "position", "kind", "version", "timestamp", "event_id", "prev", "payload")
_EVENT_FIELDS = frozenset({"type", *_ENVELOPE, "hash"})
_BLOB_FIELDS = frozenset({"type", "ref", "content"})
_HASH = re.compile(r"[0-9a-f]{64}")
_EVENT_ID = re.compile(r"[0-9a-f]{32}")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_REF = re.compile(r"sha256:[0-9a-f]{64}")
PROGRESS_EVERY = 1000
"""How many lines an export writes between two calls of its ``progress``."""
_LINE_SLACK = 64 * 1024
"""Characters a line may hold beyond twice `max_payload_bytes`: the envelope around a payload.
(An export writes JSON with a space after each separator, so its payload text is at most about
twice the payload's canonical bytes.)"""


@dataclass
class _File:
    """An export file as read and checked line by line: what import writes if nothing is wrong."""

    source: str
    limits: Limits
    header: dict[str, Any] = field(default_factory=dict)
    records: list[RecordedEvent] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)  # canonical bytes, as records
    lines: dict[int, int] = field(default_factory=dict)  # position -> line number
    blobs: dict[str, bytes] = field(default_factory=dict)
    blob_lines: dict[str, int] = field(default_factory=dict)
    event_count: int = 0
    blob_count: int = 0
    checkpoint: str | None = None
    proofs: dict[int, dict[str, Any]] = field(default_factory=dict)  # position -> proof line
    problems: list[str] = field(default_factory=list)
    limit: str | None = None

    def problem(self, number: int, text: str, limit: str | None = None) -> None:
        """Note what is wrong with line `number` (and which limit it broke, if one)."""
        self.problems.append(f"line {number}: {text}")
        if limit is not None and self.limit is None:
            self.limit = limit

    def refuse(self) -> None:
        """Raise `ImportRefusedError` if anything is wrong."""
        if self.problems:
            raise ImportRefusedError(self.source, self.problems, limit=self.limit)


def _read(path: Path, limits: Limits) -> _File:
    """Read an export file, checking every line; nothing is trusted, nothing is written.

    Each event must be a well-formed envelope whose payload its catalogue class (upcast from an
    older version) accepts, at positions 1, 2, 3... in order; each blob's content must hash to
    its ref; every payload and blob must be within `limits`. Problems name the line and field.
    """
    file = _File(str(path), limits)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ImportRefusedError(file.source, [f"cannot read the file: {e}"]) from e
    # Only "\n" ends a line: str.splitlines() would also split inside JSON strings holding
    # U+2028, U+2029 or other Unicode line breaks.
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if not lines:
        raise ImportRefusedError(file.source, ["the file is empty"])
    (first, head), *rest = lines
    header = _parse(file, first, head)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ImportRefusedError(file.source, [f"line {first} is not an {FORMAT} header"])
    file.header = header
    run_id = header.get("run_id")
    if not isinstance(run_id, str) or not _is_uuid(run_id):
        file.problem(first, f"field 'run_id' must be a run id (a lowercase UUID), got {run_id!r}")
    for number, line in rest:
        item = _parse(file, number, line)
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "event":
            _read_event(file, number, item)
        elif kind == "blob":
            _read_blob(file, number, item)
        elif kind in {"checkpoint", "proof"}:
            _read_proof_line(file, number, item)
        elif item is not None:
            what = "neither an event, a blob, a checkpoint nor a proof (field 'type')"
            file.problem(number, what)
    counts: tuple[tuple[str, int], ...] = (
        ("events", file.event_count),
        ("blobs", file.blob_count),
    )
    if "proofs" in header or file.proofs:
        counts += (("proofs", len(file.proofs)),)
    for name, found in counts:
        announced = header.get(name)
        if (name in header or name == "events") and (
            type(announced) is not int or announced != found
        ):
            file.problem(first, f"field '{name}': header announces {announced!r}, file has {found}")
    _check_conversations(file)
    return file


def _read_proof_line(file: _File, number: int, item: dict[str, Any]) -> None:
    """Keep the checkpoint line (one at most) or one event's inclusion proof, checked in shape.

    Import does not use them (the importing ledger has its own log); `verify_export` does.
    """
    if item["type"] == "checkpoint":
        if set(item) != {"type", "note"} or not isinstance(item["note"], str):
            file.problem(number, "a checkpoint line holds exactly a 'note' string")
        elif file.checkpoint is not None:
            file.problem(number, "a second checkpoint line")
        else:
            file.checkpoint = item["note"]
        return
    fields = {"type", "position", "leaf_index", "tree_size", "proof"}
    numbers = [item.get(name) for name in ("position", "leaf_index", "tree_size")]
    proof = item.get("proof")
    if (
        set(item) != fields
        or any(type(n) is not int or n < 0 for n in numbers)
        or not isinstance(proof, list)
        or not all(isinstance(p, str) and len(p) == 44 for p in proof)
        or len(proof) > 64
    ):
        file.problem(
            number,
            "a proof line holds integer 'position', 'leaf_index' and 'tree_size' and a "
            "'proof' list of base64 SHA-256 hashes",
        )
    elif item["position"] in file.proofs:
        file.problem(number, f"a second proof of position {item['position']}")
    else:
        file.proofs[item["position"]] = item


def _parse(file: _File, number: int, line: str) -> Any:
    """One line's JSON, or None (with the problem noted)."""
    limit = 2 * file.limits.max_payload_bytes + _LINE_SLACK
    if len(line) > limit:
        detail = (
            f"{len(line):,} characters, more than any line holding a payload or blob within "
            f"max_payload_bytes={file.limits.max_payload_bytes:,} (raise it with "
            "Ledger.open(url, limits=Limits(max_payload_bytes=...)))"
        )
        file.problem(number, detail, "max_payload_bytes")
        return None
    try:
        return loads_untrusted(line)
    except RecursionError:
        detail = (
            f"nested too deep to read: over max_depth={file.limits.max_depth} (and beyond what "
            "the JSON parser can follow)"
        )
        file.problem(number, detail, "max_depth")
    except ValueError as e:
        file.problem(number, f"not JSON ({e})")
    return None


def _read_event(file: _File, number: int, item: dict[str, Any]) -> None:
    """Check one event line (the n-th must be position n); keep it as a record if it is sound."""
    file.event_count += 1
    expected = file.event_count
    before = len(file.problems)
    keys = set(item)
    for name in sorted(_EVENT_FIELDS - keys):
        file.problem(number, f"field '{name}' is missing")
    if keys - _EVENT_FIELDS:
        file.problem(
            number, f"unknown field(s) {', '.join(map(repr, sorted(keys - _EVENT_FIELDS)))}"
        )
    if len(file.problems) > before:
        return
    checks: list[tuple[str, bool, str]] = [
        ("run_id", item["run_id"] == file.header.get("run_id"), "the header's run id"),
        (
            "position",
            type(item["position"]) is int and item["position"] == expected,
            f"{expected}: events must be in order, each position once",
        ),
        (
            "kind",
            isinstance(item["kind"], str) and item["kind"] in EVENT_TYPES,
            f"an event kind ({', '.join(sorted(EVENT_TYPES))})",
        ),
        (
            "timestamp",
            _is_timestamp(item["timestamp"]),
            "an RFC 3339 UTC time with microseconds, e.g. 2026-01-02T03:04:05.000006Z",
        ),
        ("event_id", _matches(_EVENT_ID, item["event_id"]), "32 lowercase hex digits"),
        ("prev", _matches(_HASH, item["prev"]), "64 lowercase hex digits"),
        ("hash", _matches(_HASH, item["hash"]), "64 lowercase hex digits"),
        ("payload", isinstance(item["payload"], dict), "an object"),
    ]
    for name, ok, wanted in checks:
        if not ok:
            file.problem(number, f"field '{name}' must be {wanted}, got {_show(item[name])}")
    kind, version = item["kind"], item["version"]
    if kind in EVENT_TYPES:
        current = EVENT_TYPES[kind].class_version
        if type(version) is not int or not 1 <= version <= current:
            wanted = "1" if current == 1 else f"1 to {current}"
            file.problem(
                number, f"field 'version' must be {wanted} for {kind}, got {_show(version)}"
            )
    if len(file.problems) > before:
        return
    payload: dict[str, Any] = item["payload"]
    try:
        payload_jcs = file.limits.canonical(payload, f"the {kind} payload")
    except LimitExceededError as e:
        file.problem(number, f"field 'payload': {e}", e.limit)
        return
    except InvalidPayloadError as e:
        file.problem(number, f"field 'payload{e.path}': {e.reason}")
        return
    problem = _schema_problem(kind, version, payload)
    if problem is not None:
        file.problem(number, f"{kind} at position {expected}: {problem}")
        return
    if (kind == "RunStarted") != (expected == 1):
        file.problem(number, f"a run starts with RunStarted, once; got {kind} at {expected}")
        return
    file.records.append(
        RecordedEvent(
            run_id=item["run_id"],
            position=expected,
            kind=kind,
            version=version,
            timestamp=item["timestamp"],
            event_id=item["event_id"],
            prev=item["prev"],
            hash=item["hash"],
            payload=payload,
        )
    )
    file.payloads.append(payload_jcs)
    file.lines[expected] = number


def _schema_problem(kind: str, version: int, payload: dict[str, Any]) -> str | None:
    """Why the payload is not a valid `kind` event (upcast from `version`), or None."""
    try:
        current = upcast(kind, version, payload)
        if current is not payload:
            check_json_native(current)
        event_type(kind).model_validate(current)
    except ValidationError as e:
        return "; ".join(
            f"field 'payload.{'.'.join(str(p) for p in err['loc'])}': {err['msg']}"
            for err in e.errors()
        )
    except InvalidPayloadError as e:
        return f"field 'payload{e.path}': {e.reason}"
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError) as e:
        return f"field 'payload': cannot be read as version {version}: {type(e).__name__}: {e}"
    return None


def _read_blob(file: _File, number: int, item: dict[str, Any]) -> None:
    """Check one blob line: its content must be within the limits and hash to its ref."""
    file.blob_count += 1
    keys = set(item)
    if keys != _BLOB_FIELDS:
        missing, extra = sorted(_BLOB_FIELDS - keys), sorted(keys - _BLOB_FIELDS)
        detail = ", ".join(
            [
                *(f"field '{k}' is missing" for k in missing),
                *(f"unknown field {k!r}" for k in extra),
            ]
        )
        file.problem(number, detail)
        return
    ref = item["ref"]
    if not _matches(_REF, ref):
        file.problem(
            number, f"field 'ref' must be sha256: and 64 lowercase hex digits, got {_show(ref)}"
        )
        return
    try:
        canonical = file.limits.canonical(item["content"], f"the content of blob {ref}")
    except LimitExceededError as e:
        file.problem(number, f"field 'content': {e}", e.limit)
        return
    except InvalidPayloadError as e:
        file.problem(number, f"field 'content{e.path}': {e.reason}")
        return
    actual = blob_ref(canonical)
    if actual != ref:
        file.problem(number, f"blob content hashes to {actual}, not to its ref {ref}")
        return
    file.blobs[ref] = canonical
    file.blob_lines.setdefault(ref, number)


def _check_conversations(file: _File) -> None:
    """Conversation nodes must be what `Ledger.conversation` and replay read.

    A ModelCalled's ``messages_ref`` heads a chain of ``{"message", "parent_ref"}`` nodes
    holding ``message_count`` messages; its ``response_ref`` is one more node on that chain; a
    SynthesisProduced's ``answer_ref`` holds text. Refs the file lacks are left to verify.
    """
    counts: dict[str, int | None] = {}  # messages on the chain from a node (None: unknown)
    for record in file.records:
        payload, number = record.payload, file.lines[record.position]
        if record.kind == "ModelCalled":
            head = payload["messages_ref"]
            length = _chain_length(file, head, counts)
            if length is not None and length != payload["message_count"]:
                detail = f"'message_count' is {payload['message_count']}, its chain holds {length}"
                file.problem(number, f"ModelCalled at position {record.position}: {detail}")
            response = payload.get("response_ref")
            if response in file.blobs and not _sealed(file.blobs[response]):
                node = _node(file.blobs[response])
                if node is None or node[0] is None or node[1] != head:
                    file.problem(
                        file.blob_lines[response],
                        f"blob {response} is not the response node of the call at position "
                        f"{record.position}: an object with a 'message' and 'parent_ref' {head}",
                    )
        elif record.kind == "SynthesisProduced":
            ref = payload.get("answer_ref")
            if not isinstance(ref, str) or ref not in file.blobs:
                continue
            answer = loads(file.blobs[ref])
            if not isinstance(answer, str) and not is_sealed(answer):
                file.problem(file.blob_lines[ref], f"blob {ref} holds an answer, so must be text")


def _chain_length(file: _File, head: str, counts: dict[str, int | None]) -> int | None:
    """How many messages the chain from `head` holds (None if a node is missing or wrong)."""
    path: list[tuple[str, bool]] = []
    ref: str | None = head
    while ref is not None and ref not in counts:
        if ref not in file.blobs or _sealed(file.blobs[ref]):  # a subject's: opaque here
            counts[ref] = None
            break
        node = _node(file.blobs[ref])
        if node is None:
            counts[ref] = None
            file.problem(
                file.blob_lines[ref],
                f"blob {ref} is not a conversation node: an object with just 'message' (an "
                "object or null) and 'parent_ref' (a ref or null)",
            )
            break
        path.append((ref, node[0] is not None))
        ref = node[1]
    total = 0 if ref is None else counts[ref]
    for node_ref, has_message in reversed(path):
        total = None if total is None else total + has_message
        counts[node_ref] = total
    return counts[head]


def _sealed(data: bytes) -> bool:
    """Whether a blob is sealed for a data subject (its content cannot be checked here)."""
    return is_sealed(loads(data))


def _node(data: bytes) -> tuple[dict[str, Any] | None, str | None] | None:
    """A conversation node's message and parent ref, or None if the blob is not one."""
    node = loads(data)
    if not isinstance(node, dict) or set(node) != {"message", "parent_ref"}:
        return None
    message, parent = node["message"], node["parent_ref"]
    if message is not None and not isinstance(message, dict):
        return None
    if parent is not None and not _matches(_REF, parent):
        return None
    return message, parent


def _is_uuid(text: str) -> bool:
    try:
        return str(UUID(text)) == text
    except ValueError:
        return False


def _is_timestamp(value: Any) -> bool:
    if not _matches(_TIMESTAMP, value):
        return False
    try:
        parse_timestamp(value)
    except ValueError:
        return False
    return True


def _matches(pattern: re.Pattern[str], value: Any) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def _show(value: Any) -> str:
    """A short description of a wrong value, for a message."""
    text = repr(value) if isinstance(value, str | int | float | bool) or value is None else ""
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}".rstrip()


def import_run(ledger: Ledger, path: str | os.PathLike[str]) -> str:
    """Verify an export file and, if intact, write its run; returns the run id."""
    path = Path(path)
    file = _read(path, ledger.limits)
    file.refuse()
    records = file.records
    run_id = str(file.header["run_id"])
    if not records:
        file.problem(1, "the file holds no events: a run begins with RunStarted")
        file.refuse()
    blobs = file.blobs
    report = verify_run(run_id, records, lambda refs: {r: blobs[r] for r in refs if r in blobs})
    for problem in report.problems:
        file.problem(file.lines.get(problem.position, 1), str(problem))
    file.refuse()
    if run_id not in ledger.run_ids():
        _write(ledger, records, blobs, payloads=file.payloads)
        return run_id
    existing = [r.hash for r in ledger.events(run_id)]
    incoming = [r.hash for r in records]
    if incoming[: len(existing)] == existing:
        # The ledger holds the start of this very chain: an import cut short (it commits in
        # batches) or an earlier export of the run. The file is verified whole, so what follows
        # links to the existing head; importing again completes the run.
        if len(incoming) > len(existing):
            done = len(existing)
            run = ledger.load(run_id)
            _write(ledger, records[done:], blobs, run=run, payloads=file.payloads[done:])
        return run_id
    if existing[: len(incoming)] == incoming:
        return run_id  # an earlier export of a run that went on here: nothing new
    raise ImportRefusedError(str(path), [f"run {run_id} already exists with other events"])


def _write(
    ledger: Ledger,
    records: list[RecordedEvent],
    blobs: dict[str, bytes],
    run: Run | None = None,
    *,
    payloads: list[bytes] | None = None,
) -> None:
    """Write a run's `records`, or those that follow `run`'s last event, in batches.

    `payloads` are the records' canonical payload bytes when already computed.
    """
    new = run is None
    rows = [encode_blob(ref, data) for ref, data in blobs.items()]
    status = "running"
    for start in range(0, len(records), _IMPORT_BATCH):
        chunk = records[start : start + _IMPORT_BATCH]
        for offset, record in enumerate(chunk, start=start):
            fields = {
                "kind": record.kind,
                "schema_version": record.version,
                "event_id": record.event_id,
                "recorded_at": record.timestamp,
                "prev": record.prev,
                "hash": record.hash,
                "payload": record.payload,
                "payload_jcs": payloads[offset] if payloads else canonical_json(record.payload),
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
            totals=RunTotals.of((r.kind, r.payload) for r in chunk),
        )
        try:
            ledger._store.events.put(
                run.collect_events(), blobs=rows if start == 0 else [], runs=[update]
            )
        except Exception as e:
            raise StorageError(ledger.url, f"import failed: {e}") from e
