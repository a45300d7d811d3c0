"""The redaction engine: each detector's hits and misses, the policy's actions, the JSON walk."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from agentledger.ledger import UsageError
from agentledger.ledger.errors import InvalidPayloadError
from agentledger.ledger.redaction import (
    Finding,
    RedactionPolicy,
    Redactor,
    detect,
    hashed_placeholder,
    redact_json,
    redact_text,
    shared_redactor,
)

SALT = b"ledger-salt-1"
EVENT_HASH = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def kinds(text: str) -> list[str]:
    """The kinds ``detect`` finds in ``text`` under the default regions, in order."""
    return [span.kind for span in detect(text, RedactionPolicy().phone_regions)]


def redacted(text: str) -> str:
    """``text`` under the default policy."""
    return redact_text(text)[0]


@pytest.mark.parametrize(
    "value",
    [
        "jane.doe+trips@example.org",
        "jörg@exämple.de",
        "用户@例子.广告",
        "o'brien@mail.example.co.uk",
        "ops@xn--bcher-kva.example",
    ],
)
def test_emails_are_found_including_internationalised_ones(value: str) -> None:
    """An address in a sentence becomes one email placeholder, ASCII or not."""
    assert redacted(f"write to {value}, thanks") == "write to [redacted:email], thanks"


@pytest.mark.parametrize(
    "value",
    [
        "+44 20 7946 0958",
        "+44 7700 900123",
        "+1-202-555-0173",
        "+49 30 901820",
        "+91 98765 43210",
        "+33 1 23 45 67 89",
        "+44 (0)20 7946 0958",
        "(415) 555-0132",
        "415-555-0132",
        "030 901820",
        "98765 43210",
    ],
)
def test_phone_numbers_are_found_in_international_and_national_forms(value: str) -> None:
    """International forms are found in any region; national ones in the default regions."""
    assert redacted(f"call {value} today") == "call [redacted:phone] today"


def test_national_phone_forms_depend_on_the_regions() -> None:
    """Without regions only international forms are phone numbers (absent a word like "call")."""
    policy = RedactionPolicy(phone_regions=())
    assert redact_text("desk (415) 555-0132", policy)[0] == "desk (415) 555-0132"
    assert redact_text("desk (415) 555-0132")[0] == "desk [redacted:phone]"
    assert redact_text("desk +1 415 555 0132", policy)[0] == "desk [redacted:phone]"


@pytest.mark.parametrize(
    "value",
    [
        "4539 1488 0343 6467",
        "4539148803436467",
        "6011.1111.1111.1117",
        "5555  5555  5555  4444",
        "3782-822463-10005",
        "4111-1111-1111-1111",
        "4222222222222",
    ],
)
def test_luhn_valid_card_numbers_are_found_with_any_separator(value: str) -> None:
    """Spaces, double spaces, dashes and dots between the digit groups are all read."""
    assert redacted(f"card {value}.") == "card [redacted:card]."


def test_a_card_next_to_other_numbers_is_still_found() -> None:
    """A stray digit group before or after the card does not hide it."""
    assert redacted("7 4539 1488 0343 6467 12") == "7 [redacted:card] 12"


def test_a_number_failing_the_luhn_check_is_not_a_card() -> None:
    """Sixteen digits with a wrong check digit stay (and are not a phone number either)."""
    assert redacted("order 4539 1488 0343 6468") == "order 4539 1488 0343 6468"


@pytest.mark.parametrize(
    "value",
    ["DE89 3704 0044 0532 0130 00", "DE89370400440532013000", "GB82 WEST 1234 5698 7654 32"],
)
def test_ibans_are_found_spaced_and_unspaced(value: str) -> None:
    """An IBAN with a valid checksum becomes one placeholder; the words after it stay."""
    assert redacted(f"pay to {value} ASAP") == "pay to [redacted:iban] ASAP"


def test_an_iban_with_a_wrong_checksum_is_not_an_iban() -> None:
    """DE88 instead of DE89 fails the mod-97 check."""
    assert kinds("pay DE88 3704 0044 0532 0130 00") != ["iban"]


@pytest.mark.parametrize(
    "value",
    [
        "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
        "sk-proj-abcDEF1234567890abcdefGHIJklmnop_-XY",
        "sk-ant-api03-abcdefghij1234567890XYZabcdefghij-AA",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "xoxb-1234567890-0987654321-abcdefghij",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "rk_test_4eC39HqLyjWDarjtT1zdp7dc",
        "hf_abcdefghijklmnopqrstuvwxyz0123456789",
        "glpat-abcdefghij0123456789",
    ],
)
def test_api_keys_of_the_common_providers_are_found(value: str) -> None:
    """Each provider's key shape becomes an api_key placeholder."""
    assert redacted(f"key={value} end") == "key=[redacted:api_key] end"
    assert redacted(f"the key {value}") == "the key [redacted:api_key]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def-123456", "Authorization: Bearer [redacted:auth_token]"),
        ("authorization: basic dXNlcjpwYXNzd29yZA==", "authorization: basic [redacted:auth_token]"),
        (
            '{"Authorization": "Token 9f8e7d6c5b4a"}',
            '{"Authorization": "Token [redacted:auth_token]"}',
        ),
        ("curl -H 'Bearer eyJhbGciOi.x1'", "curl -H 'Bearer [redacted:auth_token]'"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1",
            "jwt [redacted:auth_token]",
        ),
    ],
)
def test_bearer_tokens_authorization_headers_and_jwts_are_found(text: str, expected: str) -> None:
    """The credential is replaced; the header name and scheme stay readable."""
    assert redacted(text) == expected


def test_a_private_key_block_is_found_whole_even_when_cut_short() -> None:
    """A PEM block is one private_key span; so is a BEGIN line whose END was cut off."""
    block = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nq9Zx==\n-----END RSA PRIVATE KEY-----"
    )
    assert redacted(f"key:\n{block}\nthanks") == "key:\n[redacted:private_key]\nthanks"
    escaped = "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\nabc"
    assert redacted(f'"{escaped}"') == '"[redacted:private_key]"'


@pytest.mark.parametrize(
    "text",
    ["password=hunter2!x", "client_secret: 8f7e6d5c4b3a", 'API_KEY="Zx9-tests-only"'],
)
def test_assigned_secrets_are_found(text: str) -> None:
    """A value assigned to a secret's name is a secret, whatever its shape."""
    assert redacted(text).endswith("[redacted:secret]") or "[redacted:secret]" in redacted(text)


@pytest.mark.parametrize(
    "text",
    [
        "Weather on 2026-06-13 at 14:00?",
        "at 2026-01-01T00:00:00.001000Z",
        "13/06/2026 14:00",
        "order 123456789",
        "order #A-12345678",
        "ORD-2026-000123",
        "invoice 2026-0042-7781",
        "Compute 12345678 * 3",
        "total $1,234,567.89",
        "pi 3.14159265358979",
        "Python 3.11.4, calver 2026.10.1, build 1.2.3.4567",
        "ip 192.168.100.200",
        "uuid 550e8400-e29b-41d4-a716-446655440000",
        f"sha256:{EVENT_HASH}",
        f"prev {EVENT_HASH}",
        "blob sha256-3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c",
        "epoch 1767225600000",
        "git 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        "the bearer of bad news",
        "password: required",
        "Is bus 42 on time?",
    ],
)
def test_dates_ids_amounts_versions_and_hashes_are_left_alone(text: str) -> None:
    """None of the ledger's own identifiers or everyday numbers is taken for personal data."""
    assert redacted(text) == text


def test_the_longest_and_most_specific_span_wins_an_overlap() -> None:
    """A key assigned to api_key is an api_key, not a secret; an IBAN beats the phone in it."""
    assert redacted("api_key=sk-proj-abcDEF1234567890abcdefGHIJ") == "api_key=[redacted:api_key]"
    assert kinds("DE89 3704 0044 0532 0130 00") == ["iban"]


def test_redaction_is_idempotent_and_counts_are_read_from_placeholders() -> None:
    """Redacting redacted text changes nothing and reports the same findings."""
    text = "mail jörg@exämple.de, card 6011.1111.1111.1117, call +44 20 7946 0958"
    once, first = redact_text(text)
    twice, second = redact_text(once)
    assert twice == once
    assert second == first
    assert [(f.kind, f.count) for f in first] == [("email", 1), ("phone", 1), ("card", 1)]


def test_keep_keeps_a_kind_and_the_others_are_still_redacted() -> None:
    """``keep`` leaves emails as written while phones are redacted."""
    policy = RedactionPolicy(actions={"email": "keep"})
    text, findings = redact_text("a@example.com or +44 20 7946 0958", policy)
    assert text == "a@example.com or [redacted:phone]"
    assert [f.kind for f in findings] == ["phone"]


def test_hash_gives_a_stable_keyed_placeholder_per_salt() -> None:
    """One value, however written, hashes alike under one salt and differently under another."""
    policy = RedactionPolicy(actions={"email": "hash", "phone": "hash"})
    first, findings = redact_text("Jane@Example.com, +44 20 7946 0958", policy, salt=SALT)
    again = redact_text("jane@example.com, +44 2079460958", policy, salt=SALT)[0]
    other = redact_text("jane@example.com, +44 2079460958", policy, salt=b"other")[0]
    assert first == again
    assert first != other
    assert first.startswith(hashed_placeholder("email", "jane@example.com", SALT))
    assert [(f.kind, f.action) for f in findings] == [("email", "hash"), ("phone", "hash")]
    assert redact_text(first, policy, salt=SALT) == (first, findings)


def test_hash_without_a_salt_is_refused() -> None:
    """A policy that hashes needs the caller's salt."""
    with pytest.raises(UsageError):
        redact_text("a@example.com", RedactionPolicy(actions={"email": "hash"}))


def test_the_policy_is_json_without_the_salt() -> None:
    """The policy round-trips through JSON and never holds a salt."""
    policy = RedactionPolicy(actions={"email": "hash", "iban": "keep"}, phone_regions=("GB",))
    data = json.loads(policy.model_dump_json())
    assert data == {"actions": {"email": "hash", "iban": "keep"}, "phone_regions": ["GB"]}
    assert RedactionPolicy.model_validate(data) == policy
    assert RedactionPolicy().action("secret") == "redact"


def test_redact_json_walks_nested_values_and_names_paths() -> None:
    """Strings in nested lists and objects are redacted; findings name where, never what."""
    messages = {
        "messages": [
            {"role": "user", "content": "I am jane@example.com"},
            {"role": "assistant", "content": ["call +44 20 7946 0958", 42, None, True]},
        ],
        "seed": 4539148803436467,
    }
    value, findings = redact_json(messages)
    assert value["messages"][0]["content"] == "I am [redacted:email]"
    assert value["messages"][1]["content"][0] == "call [redacted:phone]"
    assert value["seed"] == 4539148803436467
    assert findings == [
        Finding("email", "messages[0].content", 1, "redact"),
        Finding("phone", "messages[1].content[0]", 1, "redact"),
    ]
    assert messages["messages"][0]["content"] == "I am jane@example.com"


def test_redact_json_redacts_keys_and_keeps_colliding_ones_apart() -> None:
    """Object keys are redacted too; two keys that redact alike get numbered."""
    value, findings = redact_json({"who": {"a@example.com": 1, "b@example.com": 2}})
    assert value == {"who": {"[redacted:email]": 1, "[redacted:email] #2": 2}}
    assert findings[0] == Finding("email", 'who["[redacted:email]"]', 1, "redact", in_key=True)
    assert redact_json(value) == (value, findings)


def test_values_under_secret_keys_are_secrets_whole() -> None:
    """``password`` and ``authorization`` fields are redacted whatever they hold."""
    value, findings = redact_json(
        {"password": "correct horse", "headers": {"Authorization": "Basic Zm9v"}, "name": "Ann"}
    )
    assert value == {
        "password": "[redacted:secret]",
        "headers": {"Authorization": "[redacted:auth_token]"},
        "name": "Ann",
    }
    assert [f.path for f in findings] == ["password", "headers.Authorization"]


def test_redact_json_refuses_values_that_are_not_json() -> None:
    """Bytes are not JSON: the error names the path."""
    with pytest.raises(InvalidPayloadError) as caught:
        redact_json({"blob": [b"raw"]})
    assert caught.value.path == "blob[0]"


def test_findings_never_hold_the_values() -> None:
    """Not one finding field contains the redacted value."""
    secret = "jane.doe@example.org"  # noqa: S105 - an email address, not a password
    _, findings = redact_json({"q": f"mail {secret}", secret: "x"})
    assert findings
    assert secret not in json.dumps([f.as_json() for f in findings])


def test_importing_the_ledger_loads_neither_phonenumbers_nor_schwifty() -> None:
    """The number libraries load on the first candidate number, not with the ledger."""
    script = (
        "import sys\nimport agentledger.ledger, agentledger.ledger.redaction as r\n"
        "r.redact_text('mail a@example.com')\n"
        "print(sorted(m for m in ('phonenumbers', 'schwifty') if m in sys.modules))\n"
        "r.redact_text('call +44 20 7946 0958, DE89 3704 0044 0532 0130 00')\n"
        "print(sorted(m for m in ('phonenumbers', 'schwifty') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split("\n")[:2] == ["[]", "['phonenumbers', 'schwifty']"]


def test_a_provider_error_that_echoes_the_key_loses_it() -> None:
    """A 401 message quoting the key, as providers' errors do, keeps its words but not the key."""
    key = "sk-proj-" + "Ab3" * 15
    message = f"Error code: 401 - {{'error': {{'message': 'Incorrect API key provided: {key}.'}}}}"
    assert key not in redacted(message)
    assert "Incorrect API key provided: [redacted:api_key]." in redacted(message)


@pytest.mark.parametrize(
    "text",
    [
        "a." * 20_000 + "@" + "b" * 1_000,
        "1 " * 20_000,
        "12-" * 20_000,
        "DE89 " * 10_000,
        "a@b.co " * 5_000,
        "+44 20 7946 0958 " * 500,
    ],
    ids=[
        "dotted-local-part",
        "spaced-digits",
        "dashed-digits",
        "iban-prefixes",
        "emails",
        "phones",
    ],
)
def test_adversarial_inputs_are_redacted_in_bounded_time(text: str) -> None:
    """Tens of kilobytes built to make patterns backtrack take well under a few seconds."""
    start = time.perf_counter()
    once = redacted(text)
    assert time.perf_counter() - start < 5.0
    assert redacted(once) == once


def test_a_redactor_remembers_strings_and_gives_the_same_results() -> None:
    """One redactor over a growing history redacts like the functions do, within its cache."""
    redactor = Redactor(cache_size=2)
    history: list[dict[str, str]] = []
    for turn in ["mail a@example.com", "call +44 20 7946 0958", "ok", "card 4539148803436467"]:
        history.append({"role": "user", "content": turn})
        assert redactor.json(history) == redact_json(history)
    assert redactor.text("mail a@example.com", path="q") == redact_text(
        "mail a@example.com", path="q"
    )
    with pytest.raises(UsageError):
        Redactor(RedactionPolicy(actions={"card": "hash"}))


@pytest.mark.parametrize(
    "text", ["call 555-123-4567", "Call me at 555 123 4567", "phone: (555) 123-4567"]
)
def test_digits_after_a_phone_word_are_a_phone_number_even_if_no_region_knows_them(
    text: str,
) -> None:
    """Fictional or unassigned numbers are still redacted when the text says they are phones."""
    assert redacted(text).endswith("[redacted:phone]")
    assert redacted(text.replace("all", "ount").replace("phone", "order")) != redacted(text)


def test_one_redactor_shared_by_threads_gives_each_the_right_result() -> None:
    """Threads of a ledger share a redactor; a small cache evicting under them loses nothing."""
    from concurrent.futures import ThreadPoolExecutor

    shared = Redactor(cache_size=8)

    def work(thread: int) -> list[str]:
        return [shared.redact(f"mail user{thread}x{n}@example.com now") for n in range(400)]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    assert results == [["mail [redacted:email] now"] * 400] * 8
    # each thread may add one past the bound at once
    assert len(shared._cache) + len(shared._older) <= 8 + 8


def test_the_runs_of_every_ledger_share_one_redactor_per_policy_and_salt() -> None:
    """A string checked in one run is not checked again in the next, nor in a replay's ledger."""
    from agentledger.ledger import Ledger

    with Ledger.open("memory://") as ledger, Ledger.open("memory://") as scratch:
        first = ledger.run_privacy(ledger.redaction)
        second = scratch.run_privacy(scratch.redaction)
        other = ledger.run_privacy(RedactionPolicy(actions={"email": "keep"}))
        assert first is not None
        assert second is not None
        assert other is not None
        assert first.redactor is second.redactor
        assert other.redactor is not first.redactor
        assert first._notes is not second._notes  # findings stay each run's own
    salted = RedactionPolicy(actions={"email": "hash"})
    assert shared_redactor(salted, b"one") is shared_redactor(salted, b"one")
    assert shared_redactor(salted, b"one") is not shared_redactor(salted, b"two")
    assert (
        shared_redactor(salted, b"one").text("a@example.com")[0]
        != shared_redactor(salted, b"two").text("a@example.com")[0]
    )


def test_a_redactor_keeps_the_strings_it_used_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """A string used again within the last half of the cache is never redacted a second time."""
    redactor = Redactor(cache_size=8)
    redacted_now: list[str] = []
    original = redactor._redact

    def counting(text: str, whole: Any) -> str:
        redacted_now.append(text)
        return original(text, whole)

    monkeypatch.setattr(redactor, "_redact", counting)
    for n in range(200):
        assert redactor.redact("the system prompt") == "the system prompt"
        assert redactor.redact(f"mail u{n}@example.com") == "mail [redacted:email]"
    assert redacted_now.count("the system prompt") == 1
    assert len(redacted_now) == 201
