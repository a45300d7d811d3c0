"""The policy gate: redact personal data, block disallowed requests, tag risky intents.

Owns ``PolicyConfig`` (recorded in ``RunStarted.config.settings["policy"]``), ``PolicyDecision``
and ``PolicyGate.check``. The runner applies the gate to the raw question BEFORE the run is
recorded, so RunStarted only ever holds the redacted text; the gate is idempotent (checking the
redacted text gives the same decision, because redaction counts are read from the placeholders
in the result), so a replay that re-checks the recorded input records the same PolicyDecided.
Blocking is decided on the redacted text for the same reason. Must not record events, call
models or keep state between checks.

Redacted: email addresses, payment card numbers (13-19 digits that pass the Luhn check) and
phone numbers (9-15 digits, optional leading +, spaces, dots, dashes and parentheses).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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

Kind = Literal["email", "card", "phone"]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_CARD = re.compile(r"(?<![\d])\d(?:[ -]?\d){12,18}(?![\d])")
_PHONE = re.compile(r"(?<![\w+])\+?\(?\d[\d ().-]{7,}\d(?![\d])")


def placeholder(kind: Kind) -> str:
    """The text a redacted value is replaced with, e.g. ``[redacted:email]``."""
    return f"[redacted:{kind}]"


def luhn_ok(digits: str) -> bool:
    """Whether a string of digits passes the Luhn checksum of payment card numbers."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


class PolicyConfig(BaseModel):
    """What the gate redacts, blocks and tags."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    redact_emails: bool = True
    redact_phones: bool = True
    redact_cards: bool = True
    blocked: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_BLOCKED))
    risk_tags: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_RISK_TAGS))
    refusal: str = (
        "I can't help with that request. If you think this is a mistake, please rephrase it."
    )


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
    """Applies a ``PolicyConfig`` to questions; holds no state beyond its compiled patterns."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        flags = re.IGNORECASE | re.DOTALL
        # Sorted, so reasons and tags do not depend on the order a mapping was written in
        # (recorded settings come back from the ledger with their keys sorted).
        self._blocked = {k: re.compile(v, flags) for k, v in sorted(self.config.blocked.items())}
        self._tags = {k: re.compile(v, flags) for k, v in sorted(self.config.risk_tags.items())}

    def redact(self, text: str) -> str:
        """Return ``text`` with emails, card numbers and phone numbers replaced."""
        if self.config.redact_emails:
            text = _EMAIL.sub(placeholder("email"), text)
        if self.config.redact_cards:
            text = _CARD.sub(_card_or_keep, text)
        if self.config.redact_phones:
            text = _PHONE.sub(_phone_or_keep, text)
        return text

    def check(self, question: str) -> PolicyDecision:
        """Redact, then decide: block (a blocked pattern matches), redact, or allow."""
        text = self.redact(question)
        redactions = tuple(
            (kind, text.count(placeholder(kind)))
            for kind in ("email", "phone", "card")
            if placeholder(kind) in text
        )
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


def _card_or_keep(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    return placeholder("card") if luhn_ok(digits) else match.group(0)


def _phone_or_keep(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    if not 9 <= len(digits) <= 15:
        return match.group(0)
    return placeholder("phone")
