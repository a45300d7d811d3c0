"""The export file format's constants, and the checks of each of its lines on its own.

An export file is untrusted input. Here one line at a time is parsed and checked: an event's
envelope and payload (its catalogue class, older versions through their upcasters, within the
ledger's `Limits`), a blob's ref and content (it must hash to its ref), a checkpoint or proof
line's shape. Each problem names the line and the field, noted on `Findings`. What the lines
say together (counts, conversation chains, the hash chain) is checked by `_export_read`. Must
not read files, write anything or know storage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from pydantic import ValidationError

from agentledger.ledger._canonical import check_json_native, loads_untrusted
from agentledger.ledger._hashing import blob_ref
from agentledger.ledger._limits import Limits
from agentledger.ledger._ports import parse_timestamp
from agentledger.ledger._records import RecordedEvent
from agentledger.ledger.errors import (
    ImportRefusedError,
    InvalidPayloadError,
    LimitExceededError,
)
from agentledger.ledger.events import EVENT_TYPES, event_type, upcast

__all__ = [
    "FORMAT",
    "Findings",
    "check_blob",
    "check_event",
    "check_proof_line",
    "is_uuid",
    "line_limit",
    "node_of",
    "parse_line",
    "too_long",
]

FORMAT = "agentledger-export/v1"
_ENVELOPE = ("run_id", "position", "kind", "version", "timestamp", "event_id", "prev", "payload")
_EVENT_FIELDS = frozenset({"type", *_ENVELOPE, "hash"})
_BLOB_FIELDS = frozenset({"type", "ref", "content"})
_PROOF_FIELDS = frozenset({"type", "position", "leaf_index", "tree_size", "proof"})
_HASH = re.compile(r"[0-9a-f]{64}")
_EVENT_ID = re.compile(r"[0-9a-f]{32}")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_REF = re.compile(r"sha256:[0-9a-f]{64}")
_LINE_SLACK = 64 * 1024
"""Characters a line may hold beyond twice `max_payload_bytes`: the envelope around a payload.
(An export writes JSON with a space after each separator, so its payload text is at most about
twice the payload's canonical bytes.)"""


@dataclass
class Findings:
    """What is wrong with an export file so far, line by line (and the first limit broken)."""

    source: str
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


def line_limit(limits: Limits) -> int:
    """The most characters a line holding a payload or blob within `limits` can take."""
    return 2 * limits.max_payload_bytes + _LINE_SLACK


def too_long(findings: Findings, limits: Limits, number: int, length: int) -> None:
    """Note a line of `length` characters, longer than any within `limits` (see `line_limit`)."""
    detail = (
        f"{length:,} characters, more than any line holding a payload or blob within "
        f"max_payload_bytes={limits.max_payload_bytes:,} (raise it with "
        "Ledger.open(url, limits=Limits(max_payload_bytes=...)))"
    )
    findings.problem(number, detail, "max_payload_bytes")


def parse_line(findings: Findings, limits: Limits, number: int, line: str) -> Any:
    """One line's JSON, or None (with the problem noted)."""
    if len(line) > line_limit(limits):
        too_long(findings, limits, number, len(line))
        return None
    try:
        return loads_untrusted(line)
    except RecursionError:
        detail = (
            f"nested too deep to read: over max_depth={limits.max_depth} (and beyond what "
            "the JSON parser can follow)"
        )
        findings.problem(number, detail, "max_depth")
    except ValueError as e:
        findings.problem(number, f"not JSON ({e})")
    return None


def check_event(
    findings: Findings,
    limits: Limits,
    number: int,
    item: dict[str, Any],
    *,
    run_id: Any,
    expected: int,
) -> tuple[RecordedEvent, bytes] | None:
    """Check the `expected`-th event line of a file whose header names `run_id`.

    Returns the event and its payload's canonical bytes if it is sound; else None, with each
    problem noted.
    """
    before = len(findings.problems)
    keys = set(item)
    for name in sorted(_EVENT_FIELDS - keys):
        findings.problem(number, f"field '{name}' is missing")
    if keys - _EVENT_FIELDS:
        findings.problem(
            number, f"unknown field(s) {', '.join(map(repr, sorted(keys - _EVENT_FIELDS)))}"
        )
    if len(findings.problems) > before:
        return None
    checks: list[tuple[str, bool, str]] = [
        ("run_id", item["run_id"] == run_id, "the header's run id"),
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
            findings.problem(number, f"field '{name}' must be {wanted}, got {_show(item[name])}")
    kind, version = item["kind"], item["version"]
    if kind in EVENT_TYPES:
        current = EVENT_TYPES[kind].class_version
        if type(version) is not int or not 1 <= version <= current:
            wanted = "1" if current == 1 else f"1 to {current}"
            findings.problem(
                number, f"field 'version' must be {wanted} for {kind}, got {_show(version)}"
            )
    if len(findings.problems) > before:
        return None
    payload: dict[str, Any] = item["payload"]
    payload_jcs = _checked_payload(findings, limits, number, item, expected)
    if payload_jcs is None:
        return None
    record = RecordedEvent(
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
    return record, payload_jcs


def _checked_payload(
    findings: Findings, limits: Limits, number: int, item: dict[str, Any], expected: int
) -> bytes | None:
    """The canonical bytes of an event line's payload if its catalogue class takes it.

    The payload must be within `limits`, valid for its kind (upcast from its version), and
    RunStarted must come first and only first. Else None, with the problem noted.
    """
    kind, version, payload = item["kind"], item["version"], item["payload"]
    try:
        payload_jcs = limits.canonical(payload, f"the {kind} payload")
    except LimitExceededError as e:
        findings.problem(number, f"field 'payload': {e}", e.limit)
        return None
    except InvalidPayloadError as e:
        findings.problem(number, f"field 'payload{e.path}': {e.reason}")
        return None
    problem = _schema_problem(kind, version, payload)
    if problem is not None:
        findings.problem(number, f"{kind} at position {expected}: {problem}")
        return None
    if (kind == "RunStarted") != (expected == 1):
        findings.problem(number, f"a run starts with RunStarted, once; got {kind} at {expected}")
        return None
    return payload_jcs


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


def check_blob(
    findings: Findings, limits: Limits, number: int, item: dict[str, Any]
) -> tuple[str, bytes] | None:
    """Check one blob line: its content must be within the limits and hash to its ref.

    Returns the ref and the content's canonical bytes if it is sound; else None, with the
    problem noted.
    """
    keys = set(item)
    if keys != _BLOB_FIELDS:
        missing, extra = sorted(_BLOB_FIELDS - keys), sorted(keys - _BLOB_FIELDS)
        detail = ", ".join(
            [
                *(f"field '{k}' is missing" for k in missing),
                *(f"unknown field {k!r}" for k in extra),
            ]
        )
        findings.problem(number, detail)
        return None
    ref = item["ref"]
    if not _matches(_REF, ref):
        findings.problem(
            number, f"field 'ref' must be sha256: and 64 lowercase hex digits, got {_show(ref)}"
        )
        return None
    try:
        canonical = limits.canonical(item["content"], f"the content of blob {ref}")
    except LimitExceededError as e:
        findings.problem(number, f"field 'content': {e}", e.limit)
        return None
    except InvalidPayloadError as e:
        findings.problem(number, f"field 'content{e.path}': {e.reason}")
        return None
    actual = blob_ref(canonical)
    if actual != ref:
        findings.problem(number, f"blob content hashes to {actual}, not to its ref {ref}")
        return None
    return ref, canonical


def check_proof_line(findings: Findings, number: int, item: dict[str, Any]) -> bool:
    """Whether a checkpoint or proof line has its shape (else the problem is noted).

    A checkpoint line holds exactly a ``note`` string; a proof line an event's position, its
    leaf index, the tree size and the inclusion proof (at most 64 base64 SHA-256 hashes).
    Import does not use them (the importing ledger has its own log); `verify_export` does.
    """
    if item["type"] == "checkpoint":
        if set(item) != {"type", "note"} or not isinstance(item["note"], str):
            findings.problem(number, "a checkpoint line holds exactly a 'note' string")
            return False
        return True
    numbers = [item.get(name) for name in ("position", "leaf_index", "tree_size")]
    proof = item.get("proof")
    if (
        set(item) != _PROOF_FIELDS
        or any(type(n) is not int or n < 0 for n in numbers)
        or not isinstance(proof, list)
        or not all(isinstance(p, str) and len(p) == 44 for p in proof)
        or len(proof) > 64
    ):
        findings.problem(
            number,
            "a proof line holds integer 'position', 'leaf_index' and 'tree_size' and a "
            "'proof' list of base64 SHA-256 hashes",
        )
        return False
    return True


def node_of(value: Any) -> tuple[dict[str, Any] | None, str | None] | None:
    """A conversation node's message and parent ref, or None if the blob's value is not one."""
    if not isinstance(value, dict) or set(value) != {"message", "parent_ref"}:
        return None
    message, parent = value["message"], value["parent_ref"]
    if message is not None and not isinstance(message, dict):
        return None
    if parent is not None and not _matches(_REF, parent):
        return None
    return message, parent


def is_uuid(text: str) -> bool:
    """Whether `text` is a UUID in its canonical lowercase form."""
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
