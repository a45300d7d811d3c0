"""Redaction at the recorder: one run's policy applied to every value before it is persisted.

Owns ``RunPrivacy`` (a run's ``Redactor`` and the findings not yet recorded), how a run's policy
is written into and read back from its configuration identity (``config.redaction``: the policy
as JSON; nothing when the run redacts nothing), and which fields of an event are free text to
redact (all but the structural ones: ids, refs, names, numbers). Every placeholder in a value as
stored is noted (those already there too, so that a replay, fed what was recorded, notes the
same); the notes become one ``PolicyDecided`` (decision ``redact``, the counts by kind, reasons
``redacted:KIND at EVENT.PATH``) recorded right before the event that carries the values. Must
not record events itself, keep the salt anywhere but in memory, or know agents or vendor SDKs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentledger.ledger.errors import InvalidPayloadError
from agentledger.ledger.events import LedgerEvent, PolicyDecided, Redaction, RunStarted
from agentledger.ledger.redaction import KINDS, SHARED_CACHE, Finding, RedactionPolicy, Redactor

__all__ = [
    "RunPrivacy",
    "policy_of",
    "policy_setting",
    "started_policy",
]

_OFF = "off"
_UNREDACTED = frozenset({"RunStarted", "PolicyDecided", "RunCompleted", "RunFailed"})
"""Kinds the generic pass leaves alone: the input and a failure's error are redacted (and their
findings recorded) before the event is built, which the run's end needs."""
_STRUCTURAL = frozenset(
    {
        "call_id",
        "step_id",
        "provider",
        "model",
        "actor",
        "caused_by",
        "served_from",
        "tool",
        "tool_version",
        "risk",
        "effectful",
        "ok",
        "type",
        "latency_ms",
        "usage",
        "cost_usd",
        "ttft_ms",
        "chunk_count",
        "message_count",
        "finish_reason",
        "event_count",
        "head_hash",
        "outcome",
        "evidence_ids",
        "decision",
        "status",
        "source",
        "name",
        "prompt",
        "guardrail",
        "action",
        "about_position",
        "labels",
        "author",
    }
)


def policy_setting(policy: RedactionPolicy | None) -> Any:
    """How ``policy`` is recorded in a run's configuration: its JSON; nothing (None) for none.

    A run that redacts nothing records nothing, exactly as runs recorded before redaction was
    configurable do (``"off"`` is read as none too).
    """
    return policy.model_dump(mode="json") if policy is not None else None


def policy_of(value: Any) -> tuple[bool, RedactionPolicy | None]:
    """(whether ``value``, a ``ConfigIdentity.redaction``, names a policy; the policy or None).

    A run recorded before redaction was configurable records none: ``(False, None)``.
    """
    if value is None:
        return False, None
    if value == _OFF:
        return True, None
    return True, RedactionPolicy.model_validate(value)


def started_policy(started: RunStarted) -> RedactionPolicy | None:
    """The redaction policy a RunStarted records (None: off, or recorded before it existed)."""
    return policy_of(started.config.redaction)[1]


class RunPrivacy:
    """One run's redaction: its ``Redactor`` (strings cached) and the findings to record."""

    def __init__(
        self, policy: RedactionPolicy, salt: bytes | None, *, redactor: Redactor | None = None
    ) -> None:
        self.policy = policy
        self.redactor = redactor or Redactor(policy, salt=salt, cache_size=SHARED_CACHE)
        self._notes: list[tuple[str, Finding]] = []

    def value(self, value: Any, where: str, path: str = "", *, changed: bool = False) -> Any:
        """``value`` (JSON) redacted; its placeholders noted as found at ``where``.``path``.

        Every placeholder in the result is noted, those already in ``value`` too: a replay,
        which feeds the run what was recorded (already redacted), then notes what the recorded
        run noted. ``changed`` notes nothing unless redaction changed the value (the input,
        which a policy gate may have redacted before).
        """
        if self.redactor.clean(value):
            return value  # the usual case: nothing to redact, nothing to note
        try:
            redacted, findings = self.redactor.json(value, path=path)
        except (InvalidPayloadError, RecursionError):
            return value  # not JSON: left for the event's validation to name the problem
        if not findings:
            return value
        same = redacted == value
        if not (changed and same):
            self._notes.extend((where, finding) for finding in findings)
        return value if same else redacted

    def event(self, event: LedgerEvent) -> LedgerEvent:
        """``event`` with its free-text fields redacted (the same object when nothing changed)."""
        if event.kind in _UNREDACTED:
            return event
        changed: dict[str, Any] = {}
        for name in _free_text(type(event)):
            raw = getattr(event, name)
            if raw is None or isinstance(raw, bool | int | float):
                continue
            plain = _plain(raw)
            redacted = self.value(plain, event.kind, name)
            if redacted != plain:
                changed[name] = redacted
        if not changed:
            return event
        data = event.model_dump(mode="json")
        data.update(changed)
        return type(event).model_validate(data)

    def decided(self) -> PolicyDecided | None:
        """The PolicyDecided of the findings noted since the last one (None when there are none)."""
        if not self._notes:
            return None
        notes, self._notes = self._notes, []
        counts: dict[str, int] = {}
        reasons: list[str] = []
        for where, finding in notes:
            counts[finding.kind] = counts.get(finding.kind, 0) + finding.count
            place = f"{where}.{finding.path}" if finding.path else where
            key = " (key)" if finding.in_key else ""
            verb = "hashed" if finding.action == "hash" else "redacted"
            reason = f"{verb}:{finding.kind} at {place}{key}"
            if reason not in reasons:
                reasons.append(reason)
        return PolicyDecided(
            decision="redact",
            reasons=reasons,
            redactions=[Redaction(kind=k, count=counts[k]) for k in KINDS if k in counts],
        )

    def forget(self) -> None:
        """Drop the findings noted (the values they belong to were not recorded)."""
        self._notes.clear()


_FREE_TEXT: dict[type[LedgerEvent], tuple[str, ...]] = {}


def _free_text(kind: type[LedgerEvent]) -> tuple[str, ...]:
    """The fields of an event class that may hold free text (all but the structural ones)."""
    names = _FREE_TEXT.get(kind)
    if names is None:
        names = _FREE_TEXT[kind] = tuple(
            name
            for name in kind.model_fields
            if name not in _STRUCTURAL and not name.endswith("_ref")
        )
    return names


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
