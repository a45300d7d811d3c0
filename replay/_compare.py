"""Comparing a replayed event with the recorded one: what counts, and how a mismatch reads.

Owns ``comparable(kind, version, payload)`` - a payload upcast to the current schema with the
fields that depend on timing removed (model and tool latencies, stream timings, retry timings,
the head hash that depends on timestamps, a failure's traceback, the code version, where a
recorded function's code lives) - and ``Divergence``, the
structured report of the first mismatch: position, expected and actual kind and payload, and
the changed paths. Envelope fields (timestamp, event id, prev, hash) are never compared: they
are not part of a payload. Must not import agents.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agentledger.ledger.events import LedgerEvent, event_type, upcast

__all__ = [
    "LINEAGE_FIELDS",
    "Change",
    "Divergence",
    "comparable",
    "comparable_event",
    "comparable_payload",
]

LINEAGE_FIELDS = frozenset({"parent_run_id", "parent_position", "relation", "overrides", "tags"})
"""RunStarted fields that say where a run came from, not what it did (a fork's prefix and its
parent differ only there)."""


_MODEL_TIMING = frozenset({"latency_ms", "ttft_ms", "chunk_count", "chunks_ref"})
"""ModelCalled fields that depend on timing or on how a provider cut its stream into chunks."""


def comparable(kind: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A recorded payload as the current code would write it, timing fields removed."""
    cls = event_type(kind)
    if version != cls.class_version:
        current = cls.model_validate(upcast(kind, version, payload))
        payload = current.model_dump(mode="json", exclude_defaults=True)
    return _strip(kind, payload)


def comparable_event(event: LedgerEvent) -> dict[str, Any]:
    """An event about to be recorded, in the form ``comparable`` gives recorded ones."""
    return _strip(event.kind, event.model_dump(mode="json", exclude_defaults=True))


def comparable_payload(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """`comparable_event` of an event already dumped for recording (its prepared payload)."""
    return _strip(kind, payload)


def _strip(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    if kind == "ModelCalled":
        out = {k: v for k, v in payload.items() if k not in _MODEL_TIMING}
        if "attempts" in out:
            out["attempts"] = [
                {k: v for k, v in a.items() if k not in ("latency_ms", "backoff_s")}
                for a in out["attempts"]
            ]
        return out
    if kind == "ToolReturned":
        return {k: v for k, v in payload.items() if k != "latency_ms"}
    if kind == "RunCompleted":
        return {k: v for k, v in payload.items() if k != "head_hash"}
    if kind == "RunFailed":
        out = {k: v for k, v in payload.items() if k != "head_hash"}
        out["error"] = {k: v for k, v in out["error"].items() if k != "traceback"}
        return out
    if kind == "RunStarted":
        out = {k: v for k, v in payload.items() if k not in LINEAGE_FIELDS}
        config = out.get("config")
        if isinstance(config, dict):
            out["config"] = {k: v for k, v in config.items() if k != "code_version"}
        entry = out.get("entry")
        if isinstance(entry, dict):  # where the code lives and its text may change; not its name
            out["entry"] = {k: v for k, v in entry.items() if k == "path"}
        return out
    return payload


@dataclass(frozen=True)
class Change:
    """One path where the actual payload differs from the expected one."""

    path: str
    expected: Any
    actual: Any


@dataclass(frozen=True)
class Divergence:
    """The first event where a replay differs from the record.

    ``expected_kind``/``expected`` is the recorded event (``None`` when the replay recorded an
    event past the record's end); ``actual_kind``/``actual`` what the replay would record
    (``None`` when the replay ended before the record did).
    """

    position: int
    expected_kind: str | None
    expected: dict[str, Any] | None
    actual_kind: str | None
    actual: dict[str, Any] | None
    changes: tuple[Change, ...] = field(default=())
    reason: str = ""

    def summary(self) -> str:
        """One line: what differs."""
        if self.reason:
            return self.reason
        if self.expected_kind != self.actual_kind:
            failed = _failure(self.actual_kind, self.actual)
            return f"expected {self.expected_kind}, replay recorded {self.actual_kind}{failed}"
        paths = ", ".join(c.path for c in self.changes[:5])
        more = f" (+{len(self.changes) - 5} more)" if len(self.changes) > 5 else ""
        return f"{self.actual_kind} differs at {paths}{more}"

    def to_json(self) -> dict[str, Any]:
        """The divergence as JSON."""
        return {
            "position": self.position,
            "reason": self.summary(),
            "expected": {"kind": self.expected_kind, "payload": self.expected},
            "actual": {"kind": self.actual_kind, "payload": self.actual},
            "changes": [
                {"path": c.path, "expected": c.expected, "actual": c.actual} for c in self.changes
            ],
        }


def _failure(kind: str | None, payload: dict[str, Any] | None) -> str:
    """`` (Type: message)`` for a RunFailed the replay recorded: why the code failed this time."""
    if kind != "RunFailed" or not payload:
        return ""
    error = payload.get("error") or {}
    name, message = error.get("type") or "error", str(error.get("message") or "")
    shown = message if len(message) <= 200 else message[:199] + "…"
    return f" ({name}: {shown})" if shown else f" ({name})"


def divergence(
    position: int,
    expected: tuple[str, dict[str, Any]] | None,
    actual: tuple[str, dict[str, Any]] | None,
    reason: str = "",
) -> Divergence:
    """Build the report of a mismatch, with the changed paths when both events exist."""
    changes: tuple[Change, ...] = ()
    if expected is not None and actual is not None and expected[0] == actual[0]:
        changes = tuple(_changes("", expected[1], actual[1]))
    return Divergence(
        position=position,
        expected_kind=expected[0] if expected else None,
        expected=expected[1] if expected else None,
        actual_kind=actual[0] if actual else None,
        actual=actual[1] if actual else None,
        changes=changes,
        reason=reason,
    )


_MISSING = object()


def _changes(path: str, a: Any, b: Any) -> Iterator[Change]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            yield from _changes(f"{path}/{key}", a.get(key, _MISSING), b.get(key, _MISSING))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _changes(f"{path}/{index}", x, y)
    elif a != b:
        yield Change(
            path or "/",
            None if a is _MISSING else a,
            None if b is _MISSING else b,
        )
