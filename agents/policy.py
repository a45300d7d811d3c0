"""The policy gate: redact personal data, block disallowed requests, tag risky intents.

Owns ``PolicyConfig`` (recorded in ``RunStarted.config.settings["policy"]``), ``PolicyDecision``
and ``PolicyGate.check``. The runner applies the gate to the raw question BEFORE the run is
recorded, so RunStarted only ever holds the redacted text; the gate is idempotent (checking the
redacted text gives the same decision, because redaction counts are read from the placeholders
in the result), so a replay that re-checks the recorded input records the same PolicyDecided.
Blocking is decided on the redacted text for the same reason. Must not record events, call
models or keep state between checks.

Redaction is ``agentledger.ledger.redaction``'s: emails (internationalised ones too), phone
numbers, Luhn-checked card numbers, IBANs, API keys, bearer tokens and Authorization headers,
private key blocks and assigned secrets (``password=...``). ``redact_emails``, ``redact_phones`` and
``redact_cards`` switched off keep those kinds; ``redaction`` (a ``RedactionPolicy``) sets the
action of every kind, and is left out of the recorded settings while unset, so runs recorded
before it existed replay with the same settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from agentledger.agents.errors import AgentUsageError
from agentledger.ledger.redaction import (
    KINDS,
    Kind,
    RedactionPolicy,
    luhn_ok,
    placeholder,
    redact_text,
)

__all__ = [
    "DEFAULT_BLOCKED",
    "DEFAULT_RISK_TAGS",
    "PolicyConfig",
    "PolicyDecision",
    "PolicyGate",
    "luhn_ok",
    "placeholder",
]

DEFAULT_BLOCKED: Mapping[str, str] = MappingProxyType(
    {
        "weapons": r"\b(build|make|assemble)\b.{0,40}\b(bomb|explosive|pipe ?bomb|nerve agent)s?\b",
        "credential_theft": r"\b(steal|phish|crack)\w*\b.{0,40}\b(password|credential|login)s?\b",
        "malware": r"\b(write|build|create)\b.{0,40}\b(ransomware|keylogger|malware)\b",
    }
)
"""Reason name -> regular expression (case-insensitive) of requests the gate refuses."""

DEFAULT_RISK_TAGS: Mapping[str, str] = MappingProxyType(
    {
        "messaging": r"\b(send|email|e-mail|text|message)\b",
        "scheduling": r"\b(remind|reminder|schedule|appointment|tomorrow)\b",
        "payment": r"\b(pay|payment|card|refund|invoice)\b",
    }
)
"""Risk tag -> regular expression (case-insensitive) of intents worth tagging, not blocking."""


class PolicyConfig(BaseModel):
    """What the gate redacts, blocks and tags."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    redact_emails: bool = True
    redact_phones: bool = True
    redact_cards: bool = True
    redaction: RedactionPolicy | None = None
    blocked: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_BLOCKED))
    risk_tags: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_RISK_TAGS))
    refusal: str = (
        "I can't help with that request. If you think this is a mistake, please rephrase it."
    )

    @model_serializer(mode="wrap")
    def _leave_out_unset_redaction(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("redaction") is None:
            data.pop("redaction", None)
        return data

    def redaction_policy(self) -> RedactionPolicy:
        """The ``RedactionPolicy`` the gate applies: ``redaction``, minus the kinds switched off."""
        policy = self.redaction or RedactionPolicy()
        switches: tuple[tuple[Kind, bool], ...] = (
            ("email", self.redact_emails),
            ("phone", self.redact_phones),
            ("card", self.redact_cards),
        )
        off: dict[Kind, Literal["keep"]] = {kind: "keep" for kind, on in switches if not on}
        if not off:
            return policy
        return policy.model_copy(update={"actions": {**policy.actions, **off}})


@dataclass(frozen=True)
class PolicyDecision:
    """The gate's verdict on one question: the text that may be used, and why."""

    decision: Literal["allow", "redact", "block"]
    text: str
    reasons: tuple[str, ...]
    redactions: tuple[tuple[str, int], ...]
    risk_tags: tuple[str, ...]

    @property
    def blocked(self) -> bool:
        """Whether the request must not be served."""
        return self.decision == "block"


class PolicyGate:
    """Applies a ``PolicyConfig`` to questions; holds no state beyond its patterns and salt.

    ``salt`` keys the ``hash`` action (one per ledger); a policy that hashes a kind raises
    ``AgentUsageError`` here when it is missing.
    """

    def __init__(self, config: PolicyConfig | None = None, *, salt: bytes | None = None) -> None:
        self.config = config or PolicyConfig()
        self.salt = salt
        self._redaction = self.config.redaction_policy()
        if self._redaction.hashes and not salt:
            msg = "the policy hashes some kinds of personal data, so the gate needs a salt"
            raise AgentUsageError(msg)
        flags = re.IGNORECASE | re.DOTALL
        # Sorted, so reasons and tags do not depend on the order a mapping was written in
        # (recorded settings come back from the ledger with their keys sorted).
        self._blocked = {k: re.compile(v, flags) for k, v in sorted(self.config.blocked.items())}
        self._tags = {k: re.compile(v, flags) for k, v in sorted(self.config.risk_tags.items())}

    def redact(self, text: str) -> str:
        """Return ``text`` with personal data and secrets replaced by placeholders."""
        return redact_text(text, self._redaction, salt=self.salt)[0]

    def check(self, question: str) -> PolicyDecision:
        """Redact, then decide: block (a blocked pattern matches), redact, or allow."""
        text, findings = redact_text(question, self._redaction, salt=self.salt)
        counts: dict[str, int] = {}
        for finding in findings:
            counts[finding.kind] = counts.get(finding.kind, 0) + finding.count
        redactions = tuple((kind, counts[kind]) for kind in KINDS if kind in counts)
        blocked = tuple(f"blocked:{name}" for name, rx in self._blocked.items() if rx.search(text))
        tags = [name for name, rx in self._tags.items() if rx.search(text)]
        if redactions:
            tags.append("personal_data")
        if blocked:
            return PolicyDecision("block", text, blocked, redactions, tuple(tags))
        if redactions:
            reasons = tuple(f"redacted:{kind}" for kind, _ in redactions)
            return PolicyDecision("redact", text, reasons, redactions, tuple(tags))
        return PolicyDecision("allow", text, (), (), tuple(tags))
