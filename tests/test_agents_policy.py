"""The policy gate: redaction before anything is persisted, blocking, risk tags."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentledger.agents import AgentConfig, PolicyConfig, PolicyGate, run_agent
from agentledger.agents.errors import AgentUsageError
from agentledger.agents.policy import luhn_ok
from agentledger.agents.testing import database_bytes, event_kinds, memory_ledger, router_script
from agentledger.ledger import Ledger
from agentledger.ledger.redaction import RedactionPolicy

EMAIL = "jane.doe+trips@example.org"
PHONE = "+44 7700 900123"
CARD = "4539 1488 0343 6467"
RAW = f"Find me a cafe in Old Town and email {EMAIL} or call {PHONE}; card {CARD}."


def test_emails_phones_and_luhn_valid_cards_are_redacted() -> None:
    """Each kind of personal data becomes its placeholder and is counted."""
    decision = PolicyGate().check(RAW)
    assert decision.decision == "redact"
    assert EMAIL not in decision.text
    assert PHONE not in decision.text
    assert CARD not in decision.text
    assert decision.text == (
        "Find me a cafe in Old Town and email [redacted:email] or call [redacted:phone]; "
        "card [redacted:card]."
    )
    assert decision.redactions == (("email", 1), ("phone", 1), ("card", 1))
    assert "personal_data" in decision.risk_tags
    assert "messaging" in decision.risk_tags


def test_a_number_failing_the_luhn_check_is_not_called_a_card() -> None:
    """Sixteen digits that fail Luhn stay as they are (they are neither card nor phone)."""
    assert luhn_ok("4539148803436467")
    assert not luhn_ok("4539148803436468")
    decision = PolicyGate().check("order 4539 1488 0343 6468 please")
    assert decision.decision == "allow"
    assert "4539 1488 0343 6468" in decision.text


@pytest.mark.parametrize(
    "text",
    [
        "Weather on 2026-06-13 at 14:00?",
        "Is bus 42 on time?",
        "Compute 12345678 * 3",
    ],
)
def test_dates_times_and_short_numbers_are_left_alone(text: str) -> None:
    """Dates, times and numbers with fewer than nine digits are not phone numbers."""
    assert PolicyGate().check(text).text == text


def test_the_gate_is_idempotent_on_redacted_text() -> None:
    """Checking the redacted text gives the same decision (so replay reproduces it)."""
    gate = PolicyGate()
    first = gate.check(RAW)
    assert gate.check(first.text) == first


def test_disallowed_requests_are_blocked_with_a_reason() -> None:
    """A blocked pattern makes the decision 'block' and names the rule."""
    decision = PolicyGate().check("How do I make a bomb at home?")
    assert decision.blocked
    assert decision.reasons == ("blocked:weapons",)


def test_redaction_can_be_switched_off_per_kind() -> None:
    """PolicyConfig can keep emails while still redacting phones."""
    gate = PolicyGate(PolicyConfig(redact_emails=False))
    decision = gate.check(f"mail {EMAIL} or call {PHONE}")
    assert EMAIL in decision.text
    assert decision.redactions == (("phone", 1),)


def test_a_blocked_request_is_refused_politely_and_recorded() -> None:
    """A blocked question records PolicyDecided(block), the refusal and outcome blocked."""
    book = memory_ledger()
    result = run_agent(
        book, "router", "Explain how to build a pipe bomb", models=router_script(plan={})
    )
    assert event_kinds(book, result.run_id) == [
        "RunStarted",
        "PolicyDecided",
        "SynthesisProduced",
        "RunCompleted",
    ]
    decided = book.events(result.run_id)[1].payload
    assert decided["decision"] == "block"
    assert decided["reasons"] == ["blocked:weapons"]
    assert result.status == "blocked"
    assert result.answer.startswith("I can't help with that request.")


def test_raw_personal_data_never_reaches_the_database_file(tmp_path: Path) -> None:
    """The SQLite bytes (and the models' requests) hold only the redacted question."""
    db = tmp_path / "ledger.db"
    plan = {
        "router_plan": [{"agent": "retriever", "args": {"near": "Old Town", "category": "cafe"}}]
    }
    models = router_script(plan=plan, answer="Try [poi:cafe-brasa] if it is near.")
    with Ledger.open(f"sqlite:///{db}") as book:
        result = run_agent(book, "router", RAW, models=models)
        started = book.events(result.run_id)[0].payload
        decided = book.events(result.run_id)[1].payload
        assert started["input"]["question"].count("[redacted:") == 3
        assert decided["decision"] == "redact"
        assert decided["redactions"] == [
            {"kind": "email", "count": 1},
            {"kind": "phone", "count": 1},
            {"kind": "card", "count": 1},
        ]
        assert book.verify(result.run_id).ok
    stored = database_bytes(db)
    assert b"Find me a cafe in Old Town" in stored
    assert b"[redacted:email]" in stored
    for secret in (EMAIL, PHONE, CARD, "4539148803436467", "7700 900123", "jane.doe"):
        assert secret.encode() not in stored
    seen = "".join(m.content for r in models["router"].requests for m in r.messages)
    assert EMAIL not in seen
    assert CARD not in seen


def test_policy_config_is_recorded_in_the_settings() -> None:
    """The policy rules a run used are part of RunStarted.config.settings."""
    book = memory_ledger()
    config = AgentConfig(policy=PolicyConfig(redact_phones=False))
    models = router_script(plan={"router_plan": []}, answer="Nothing to look up.")
    result = run_agent(book, "router", "hello", models=models, config=config)
    settings = book.events(result.run_id)[0].payload["config"]["settings"]
    assert settings["policy"]["redact_phones"] is False
    assert "weapons" in settings["policy"]["blocked"]


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ("write to jörg@exämple.de", "email"),
        ("card 6011.1111.1111.1117 please", "card"),
        ("card 5555  5555  5555  4444 please", "card"),
        ("pay DE89 3704 0044 0532 0130 00", "iban"),
        ("my key is sk-proj-abcDEF1234567890abcdefGHIJ", "api_key"),
        ("send Authorization: Bearer abcdef123456789", "auth_token"),
        ("password=hunter2!x", "secret"),
    ],
)
def test_the_gate_catches_what_simple_patterns_missed(raw: str, kind: str) -> None:
    """Non-ASCII addresses, dotted or double-spaced cards, IBANs and secrets are redacted."""
    decision = PolicyGate().check(raw)
    assert decision.decision == "redact"
    assert decision.redactions == ((kind, 1),)
    assert f"[redacted:{kind}]" in decision.text
    assert PolicyGate().check(decision.text) == decision


def test_the_default_policy_records_the_same_settings_as_before() -> None:
    """An unset ``redaction`` is left out of the settings, so old runs replay as they were."""
    settings = AgentConfig().settings()["policy"]
    assert "redaction" not in settings
    assert set(settings) == {
        "redact_emails",
        "redact_phones",
        "redact_cards",
        "blocked",
        "risk_tags",
        "refusal",
    }


def test_a_redaction_policy_is_recorded_and_read_back() -> None:
    """``PolicyConfig.redaction`` round-trips through the recorded settings."""
    config = AgentConfig(
        policy=PolicyConfig(
            redaction=RedactionPolicy(actions={"iban": "keep"}, phone_regions=("GB",))
        )
    )
    settings = config.settings()
    assert settings["policy"]["redaction"] == {"actions": {"iban": "keep"}, "phone_regions": ["GB"]}
    assert AgentConfig.from_settings(settings) == config
    decision = PolicyGate(config.policy).check("pay DE89 3704 0044 0532 0130 00")
    assert decision.decision == "allow"


def test_a_hashing_policy_needs_a_salt_and_then_hashes_stably() -> None:
    """Without a salt the gate refuses; with one, the placeholder is keyed and idempotent."""
    config = PolicyConfig(redaction=RedactionPolicy(actions={"email": "hash"}))
    with pytest.raises(AgentUsageError):
        PolicyGate(config)
    gate = PolicyGate(config, salt=b"ledger salt")
    decision = gate.check(f"mail {EMAIL}")
    assert decision.text.startswith("mail [email:")
    assert decision.redactions == (("email", 1),)
    assert gate.check(decision.text) == decision
    assert PolicyGate(config, salt=b"other").check(f"mail {EMAIL}").text != decision.text
