"""Laws of the redaction engine, checked with Hypothesis over texts with embedded secrets.

Each embedded value follows a ``;`` as a word would follow punctuation: a phone number written
straight after another number (``42 030 901820``) cannot be told apart from one longer number.

Personal data and secrets placed at random among random words, inside random JSON, never
survive ``redact_json`` under the default policy (the whole serialised output is searched);
redaction is idempotent; ``keep`` keeps; ``hash`` is stable per salt and differs across salts;
findings never hold a value; the ledger's own identifiers are never touched.
"""

from __future__ import annotations

import json
import string
from typing import Any

import phonenumbers
from hypothesis import assume, given
from hypothesis import strategies as st

from agentledger.ledger._detectors import (
    _PHONE_CANDIDATE,
    _detect,
    _phones_in,
    _phones_in_reference,
)
from agentledger.ledger.redaction import (
    DEFAULT_PHONE_REGIONS,
    RedactionPolicy,
    Redactor,
    detect,
    luhn_ok,
    redact_json,
    redact_text,
)

KNOWN = [
    ("email", "jörg@exämple.de"),
    ("email", "jane.doe+trips@example.org"),
    ("phone", "+44 20 7946 0958"),
    ("phone", "+1-202-555-0173"),
    ("phone", "(415) 555-0132"),
    ("phone", "+91 98765 43210"),
    ("phone", "030 901820"),
    ("card", "6011.1111.1111.1117"),
    ("card", "5555  5555  5555  4444"),
    ("card", "4539 1488 0343 6467"),
    ("iban", "DE89 3704 0044 0532 0130 00"),
    ("iban", "GB82WEST12345698765432"),
    ("api_key", "AKIAIOSFODNN7EXAMPLE"),
    ("private_key", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----"),
]
IBANS = [
    "FR14 2004 1010 0505 0001 3M02 606",
    "NL91 ABNA 0417 1643 00",
    "ES91 2100 0418 4502 0005 1332",
    "IT60 X054 2811 1010 0000 0123 456",
    "CH9300762011623852957",
    "BE68 5390 0754 7034",
]
REGIONS = ["US", "GB", "DE", "FR", "IN", "ES", "IT", "NL", "BR", "JP", "AU", "ZA", "NG", "SG", "AE"]
NATIONAL_REGIONS = {"US", "GB", "DE", "FR", "IN"}
ALNUM = string.ascii_letters + string.digits
SAFE_WORDS = [
    "2026-06-13",
    "14:00",
    "2026-01-01T00:00:00.001000Z",
    "550e8400-e29b-41d4-a716-446655440000",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "v1.2.3",
    "3.11.4",
    "#42",
    "$1,234.50",
]


@st.composite
def cards(draw: st.DrawFn) -> str:
    """A Luhn-valid number of 13-19 digits from a card network, with one kind of separator."""
    length = draw(st.integers(13, 19))
    body = draw(st.sampled_from("23456")) + draw(
        st.text(string.digits, min_size=length - 2, max_size=length - 2)
    )
    digits = next(body + d for d in string.digits if luhn_ok(body + d))
    sep = draw(st.sampled_from(["", " ", "  ", "-", "."]))
    return sep.join(digits[i : i + 4] for i in range(0, len(digits), 4))


@st.composite
def phones(draw: st.DrawFn) -> str:
    """A region's example number, international, or national in a default region."""
    region = draw(st.sampled_from(REGIONS))
    kind = draw(
        st.sampled_from(
            [phonenumbers.PhoneNumberType.MOBILE, phonenumbers.PhoneNumberType.FIXED_LINE]
        )
    )
    number = phonenumbers.example_number_for_type(region, kind)
    formats = [phonenumbers.PhoneNumberFormat.INTERNATIONAL, phonenumbers.PhoneNumberFormat.E164]
    if region in NATIONAL_REGIONS:
        formats.append(phonenumbers.PhoneNumberFormat.NATIONAL)
    return str(phonenumbers.format_number(number, draw(st.sampled_from(formats))))


@st.composite
def emails(draw: st.DrawFn) -> str:
    """An address whose local part and domain may hold non-ASCII letters."""
    letters = st.sampled_from(list(string.ascii_lowercase + "äöüéñøß"))
    local = "".join(draw(st.lists(letters, min_size=1, max_size=10)))
    domain = "".join(draw(st.lists(letters, min_size=1, max_size=10)))
    tld = draw(st.sampled_from(["de", "com", "org", "co.uk", "io"]))
    return f"{local}@{domain}.{tld}"


@st.composite
def api_keys(draw: st.DrawFn) -> str:
    """A key of a common provider's shape, with random characters (at least one digit)."""
    tail = draw(st.text(ALNUM, min_size=40, max_size=48)) + draw(st.sampled_from(string.digits))
    prefix = draw(
        st.sampled_from(["sk-", "sk-proj-", "sk-ant-api03-", "ghp_", "sk_live_", "hf_", "AIza"])
    )
    return prefix + (tail[:35] if prefix == "AIza" else tail)


@st.composite
def bearer_tokens(draw: st.DrawFn) -> str:
    """A token of 20-40 token characters, as it follows ``Bearer``."""
    return draw(st.text(ALNUM + "-._~", min_size=19, max_size=40)) + "9"


secrets = st.one_of(
    st.sampled_from([value for _, value in KNOWN] + IBANS), cards(), emails(), api_keys(), phones()
)
filler = st.text(
    st.sampled_from(list(string.ascii_letters + "äéß,.;!?()' ")), min_size=1, max_size=12
)
words = st.one_of(filler, st.sampled_from(SAFE_WORDS))


@st.composite
def texts_with_secrets(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Random words with one to three secrets at random positions, and those secrets."""
    placed = draw(st.lists(secrets, min_size=1, max_size=3))
    tokens = draw(st.lists(words, max_size=12))
    for value in placed:
        tokens.insert(draw(st.integers(0, len(tokens))), f"; {value}")
    if draw(st.booleans()):
        token = draw(bearer_tokens())
        tokens.insert(draw(st.integers(0, len(tokens))), f"Bearer {token}")
        placed.append(token)
    return " ".join(tokens), placed


@st.composite
def documents(draw: st.DrawFn) -> tuple[Any, list[str]]:
    """A conversation-shaped JSON value with the texts somewhere inside, and the secrets."""
    pieces = draw(st.lists(texts_with_secrets(), min_size=1, max_size=3))
    messages: list[Any] = [{"role": "user", "content": text} for text, _ in pieces]
    shape = draw(st.sampled_from(["flat", "nested", "list"]))
    if shape == "nested":
        messages = [{"tool": {"args": {"notes": [m["content"], 7, None]}}} for m in messages]
    elif shape == "list":
        messages = [[m["content"]] for m in messages]
    return {"messages": messages}, [value for _, found in pieces for value in found]


@given(documents())
def test_no_secret_survives_redact_json_under_the_default_policy(
    case: tuple[Any, list[str]],
) -> None:
    """The serialised output holds none of the embedded values, and names none in findings."""
    document, placed = case
    value, findings = redact_json(document)
    output = json.dumps(value, ensure_ascii=False)
    for secret in placed:
        assert secret not in output
        assert secret not in json.dumps([f.as_json() for f in findings], ensure_ascii=False)
    assert findings


@given(documents())
def test_redact_json_is_idempotent(case: tuple[Any, list[str]]) -> None:
    """A second pass changes nothing and reports the same findings."""
    once = redact_json(case[0])
    assert redact_json(once[0]) == once


@given(st.lists(words, max_size=20))
def test_identifiers_dates_and_plain_words_are_never_changed(tokens: list[str]) -> None:
    """Without personal data in it, a text comes back as it went in, with no findings."""
    text = " ".join(tokens)
    assume("@" not in text)
    assert redact_text(text) == (text, [])


_HEX_DIGITS = "0123456789abcdefABCDEF"


def _hex(size: int, alphabet: str = _HEX_DIGITS) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=size, max_size=size)


whole_identifiers = st.one_of(
    st.uuids().map(str),
    st.tuples(_hex(8), _hex(4), _hex(4), _hex(4), _hex(12)).map("-".join),
    st.tuples(_hex(8, "0123456789"), _hex(4, "0123456789"), _hex(24, "0123456789")).map(
        lambda p: f"{p[0]}-{p[1]}-{p[2][:4]}-{p[2][4:8]}-{p[2][8:20]}"
    ),
    _hex(64, "0123456789abcdef").map(lambda h: f"sha256:{h}"),
    _hex(64, "0123456789").map(lambda h: f"sha256:{h}"),
    st.datetimes().map(lambda d: d.isoformat()),
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.isoformat(timespec="seconds") + "Z"),
    st.integers(0, 999_999).map(str),
    st.integers(0, 999_999).map(lambda n: f"{n:06d}"),
)


@given(whole_identifiers)
def test_a_whole_identifier_is_passed_over_as_every_detector_would(text: str) -> None:
    """A UUID, blob ref, ISO timestamp or short number alone skips the detectors (no finds)."""
    assert _detect(text, DEFAULT_PHONE_REGIONS, ()) == []
    assert detect(text, DEFAULT_PHONE_REGIONS) == []
    assert redact_text(text) == (text, [])


NEAR_GATES = [
    "xoxb-123456789",  # an API key's alphabet 14 in a row: one short of the shortest key
    "xoxb-1234567890",  # 15: the shortest key
    "sk-" + "a1" * 10,
    "AKIAIOSFODNN7EXAMPL",
    "555 013",  # six digits, then seven
    "555 0132",
    "(415) 555-0132",
    "5 5 5 0 1 3 2",
    "call 555 013",
    "call 555 0132",
    "AB12",
    "ab12",
    "GB82WEST",
    "GB82 WEST 1234 5698 7654 32",
    "QA58DOHB00001234567890ABCDEFG",
    "password: hunter2hunter2",
    "secret=hunter2hunter2",
    "api_key=",
    "token",
    "Bearer ",
    "eyJ",
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----",
    "[redacted:email]",
    "call 555\u00a00132",  # spaced by a no-break space: the text is not ASCII
    "call \u0665\u0665\u0665\u0660\u0661\u0663\u0662",  # digits of another script
    "GB\u0668\u0662WEST12345698765432",
    "24 \u00b0C \u2014 it\u2019s",
    "-",
    "@",
    "\x1c",
]
gate_parts = st.one_of(
    secrets, words, st.sampled_from(NEAR_GATES), st.text(ALNUM + " -_.:=()+/", max_size=20)
)
gate_texts = st.lists(gate_parts, max_size=10).flatmap(
    lambda parts: st.sampled_from(["", " ", "\n", "=", ":", "-"]).map(lambda j: j.join(parts))
)


@given(gate_texts)
def test_the_gated_detectors_find_what_every_detector_finds(text: str) -> None:
    """The cheap tests that skip a detector never skip one that would find something.

    (Digits counted, runs of a key's alphabet, an IBAN's start: the spans are those of every
    detector.)
    """
    for regions in ((), DEFAULT_PHONE_REGIONS):
        assert _detect(text, regions, (), gated=True) == _detect(text, regions, (), gated=False)


def test_the_gates_let_the_shortest_matches_through() -> None:
    """At each gate's threshold, the value just long enough is found and one shorter is not."""
    for text in NEAR_GATES:
        assert _detect(text, ["US"], (), gated=True) == _detect(text, ["US"], (), gated=False)
    assert [s.kind for s in detect("token xoxb-1234567890 ok")] == ["api_key"]
    assert detect("token xoxb-123456789 ok") == []
    assert [s.kind for s in detect("call (415) 555-0132", ["US"])] == ["phone"]
    assert [s.kind for s in detect("call 555 0132")] == ["phone"]
    assert detect("call 555 013") == []
    assert [s.kind for s in detect("secret=hunter2hunter2")] == ["secret"]
    assert [s.kind for s in detect("iban GB82WEST12345698765432.")] == ["iban"]
    assert detect("a plain answer, with 12 numbers and 2026 in it") == []


PHONE_FORMS = [
    "+44 20 7946 0958",
    "+1 (415) 555-0132",
    "(+33) 6 12 34 56 78",
    "+49 30 901820",
    "+91 98765 43210",
    "(415) 555-0132",
    "415.555.0132",
    "020 7946 0958",
    "030 901820",
    "06 12 34 56 78",
    "098765 43210",
    "00 44 20 7946 0958",
    "011 44 20 7946 0958",
    "2026-11-25",
    "1234567",
    "555 0132 555 0133",
]
phone_texts = st.lists(
    st.one_of(st.sampled_from(PHONE_FORMS), st.text("0123456789 ().-+", max_size=24)), max_size=4
).map(" ".join)
REGION_SETS = ((), DEFAULT_PHONE_REGIONS, ("US",), ("IN", "DE"))


@given(phone_texts)
def test_phone_windows_are_matched_as_every_attempt_would(text: str) -> None:
    """A window's numbers are those every attempt finds, the first time and the next.

    (The attempt without a region is skipped where no ``+`` is written, and each window's
    matches are remembered.)
    """
    for match in _PHONE_CANDIDATE.finditer(text):
        window, offset = match.group(0), match.start()
        for regions in REGION_SETS:
            expected = list(_phones_in_reference(window, offset, regions))
            assert list(_phones_in(window, offset, regions)) == expected
            assert list(_phones_in(window, offset + 3, regions)) == [
                span._replace(start=span.start + 3, end=span.end + 3) for span in expected
            ]


def test_phone_forms_are_found_with_and_without_their_plus() -> None:
    """The examples the property test starts from: international forms need no region."""
    found = {form: list(_phones_in(form, 0, ())) for form in PHONE_FORMS}
    assert found["+44 20 7946 0958"]
    assert found["(+33) 6 12 34 56 78"]
    assert not found["(415) 555-0132"]
    assert not found["2026-11-25"]
    assert list(_phones_in("(415) 555-0132", 0, ("US",)))


@given(texts_with_secrets())
def test_keep_everything_keeps_the_text(case: tuple[str, list[str]]) -> None:
    """A policy that keeps every kind returns the text unchanged."""
    kinds = ["email", "phone", "card", "iban", "api_key", "auth_token", "private_key", "secret"]
    policy = RedactionPolicy(actions=dict.fromkeys(kinds, "keep"))
    assert redact_text(case[0], policy) == (case[0], [])


@given(texts_with_secrets(), st.binary(min_size=1, max_size=16), st.binary(min_size=1, max_size=16))
def test_hash_is_stable_per_salt_and_differs_across_salts(
    case: tuple[str, list[str]], salt: bytes, other: bytes
) -> None:
    """The same salt gives the same text; another salt gives other placeholders."""
    policy = RedactionPolicy(actions={"email": "hash", "card": "hash", "api_key": "hash"})
    text, placed = case
    first = redact_text(text, policy, salt=salt)
    assert redact_text(text, policy, salt=salt) == first
    assert redact_text(first[0], policy, salt=salt) == first
    for secret in placed:
        assert secret not in first[0]
    if salt != other and any(f.action == "hash" for f in first[1]):
        assert redact_text(text, policy, salt=other)[0] != first[0]


json_texts = st.one_of(words, secrets, st.sampled_from(["[redacted:email]", "see [1]", "a-b"]))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1), json_texts),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(words, st.sampled_from(["password", "API-Key", "content", "e@x.io"])),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@given(json_values)
def test_a_value_the_quick_check_passes_redacts_to_itself_with_no_findings(value: Any) -> None:
    """``clean`` (the recorder's shortcut) never says a value is clean when redaction is not.

    Run twice on one redactor, as a recorder does: its remembered strings must not change the
    answer either.
    """
    redactor = Redactor()
    for _ in range(2):
        assert redactor.clean(value) == (redactor.json(value) == (value, []))


@given(json_values, st.sampled_from(["[1, 2]", "see [the docs](x)", "[redacted:email]", "[x]"]))
def test_brackets_alone_leave_a_value_clean_and_a_placeholder_does_not(
    value: Any, text: str
) -> None:
    """JSON or Markdown text in a message is clean; a placeholder already there is a finding."""
    redactor = Redactor()
    wrapped = {"content": text, "rest": value}
    assert redactor.clean(wrapped) == (redactor.json(wrapped) == (wrapped, []))
    if redactor.clean(value):
        assert redactor.clean(wrapped) == (text != "[redacted:email]")


def test_plain_conversations_are_clean_and_secrets_are_not() -> None:
    """The usual message is clean; an email in it, or any text under a secret key, is not."""
    redactor = Redactor()
    plain = {"role": "user", "content": "What is the weather in Paris today?", "n": [1, 2.5]}
    assert redactor.clean(plain)
    assert not redactor.clean({**plain, "content": "mail jane.doe@example.org"})
    assert not redactor.clean({"headers": {"Api-Key": "short"}})
    assert not redactor.clean({"text": b"bytes"})


@given(st.lists(json_values, min_size=1, max_size=6), st.sampled_from(["api_key", "password"]))
def test_a_redactor_that_remembers_answers_as_one_that_does_not(
    values: list[Any], secret_key: str
) -> None:
    """Strings and keys remembered as plain never make a later value look clean wrongly.

    Each value is checked as it is and again under a secret key (where any non-empty string is a
    secret whole), by a redactor that remembers what it found plain and by one that remembers
    nothing; the answers agree, and agree with the full walk.
    """
    remembering, forgetful = Redactor(), Redactor(cache_size=0)
    for value in values:
        for checked in (value, {secret_key: value}, {"note": [value, secret_key]}):
            expected = forgetful.json(checked) == (checked, [])
            assert forgetful.clean(checked) == expected
            assert remembering.clean(checked) == expected
