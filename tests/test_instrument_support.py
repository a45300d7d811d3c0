"""The SDK-free parts of the instrumentations: JSON arguments, secret scrubbing, chunk sizes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from agentledger.agents.models._instrument_support import (
    _SECRET_TEXT,
    REDACTED,
    Scrubber,
    _may_hold_key,
    distribute,
    first_token_ms,
    never,
    scrubbed_json,
    to_json,
)

SECRET = "sk-proj-abcdefghijklmnopqrstuvwx"  # noqa: S105 - a fake key to scrub


class _Message(BaseModel):
    role: str
    content: str | None = None
    name: str | None = None


def _omitted(value: object) -> bool:
    return value is Ellipsis


def test_arguments_become_json_with_omitted_ones_left_out() -> None:
    """Models, tuples, bytes, classes and odd objects become JSON; omitted keys disappear."""
    value = {
        "message": _Message(role="assistant", content="hi"),
        "stop": ("a", "b"),
        "data": b"\x00\x01",
        "format": _Message,
        "skip": ...,
        "nan": float("nan"),
        "thing": object(),
    }
    out = to_json(value, Scrubber(), _omitted)
    assert out["message"] == {"role": "assistant", "content": "hi"}
    assert out["stop"] == ["a", "b"]
    assert out["data"] == "AAE="
    assert out["format"].endswith("_Message")
    assert "skip" not in out
    assert out["nan"] == "nan"
    assert "0x" not in out["thing"]


def test_secrets_are_scrubbed_wherever_they_are() -> None:
    """The client's key, credential-named keys and key-shaped text all become [redacted]."""
    scrub = Scrubber([SECRET, None, "short"])
    value = {
        "extra_headers": {"Authorization": "Bearer abc", "X-Api-Key": "k", "X-Trace": "t"},
        "note": f"key={SECRET}; Bearer abcdefghijk1234; other sk-live-0123456789abcdefgh",
        "max_tokens": 12,
    }
    out = to_json(value, scrub, _omitted)
    assert out["extra_headers"] == {
        "Authorization": REDACTED,
        "X-Api-Key": REDACTED,
        "X-Trace": "t",
    }
    assert out["note"] == f"key={REDACTED}; Bearer {REDACTED}; other {REDACTED}"
    assert out["max_tokens"] == 12


_KEY_TEXT = st.lists(
    st.sampled_from(
        ["Bearer ", "BEARER\t", "sk-", "SK-", "\u017fk-", "x", "0123456789", " ", "\u212a"]
    ),
    max_size=8,
).map("".join)


@given(_KEY_TEXT)
def test_the_quick_key_test_never_skips_text_the_pattern_matches(text: str) -> None:
    """Text the quick test passes over holds nothing the key-shaped pattern would scrub."""
    if not _may_hold_key(text):
        assert _SECRET_TEXT.search(text) is None


@given(st.lists(_KEY_TEXT, min_size=1, max_size=6))
def test_a_scrubber_that_remembers_plain_text_scrubs_as_a_new_one(texts: list[str]) -> None:
    """Strings remembered as free of secrets are still scrubbed under a credential's name."""
    scrub = Scrubber([SECRET])
    for text in texts * 2:
        assert scrub.text(text) == Scrubber([SECRET]).text(text)
        assert to_json({"api_key": text, "note": text}, scrub, _omitted) == {
            "api_key": REDACTED,
            "note": Scrubber([SECRET]).text(text),
        }


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included: to_json writes their repr
    _KEY_TEXT,
    st.sampled_from([SECRET, f"key {SECRET}", "plain text", "msg_01XFDUDYJgAACzvnptvVoYEL"]),
)
_KEYS = st.sampled_from(["id", "content", "text", "api_key", "Authorization", "usage", "x-token"])
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=20,
)


@given(_JSON)
def test_a_response_is_scrubbed_as_to_json_scrubs_it(value: object) -> None:
    """The quick pass gives what `to_json` builds (secrets, tuples, NaN: the long way)."""
    for scrub in (Scrubber([SECRET]), Scrubber()):
        assert repr(scrubbed_json(value, scrub)) == repr(to_json(value, scrub, never))


def test_a_plain_response_comes_back_itself_and_deep_nesting_the_long_way() -> None:
    """Nothing to scrub: the same object, no copy; past to_json's depth: what to_json builds."""
    response = {"id": "msg_1", "content": [{"type": "text", "text": "hi"}], "usage": {"n": 1}}
    assert scrubbed_json(response, Scrubber([SECRET])) is response
    deep: object = "end"
    for _ in range(70):
        deep = {"next": deep}
    assert scrubbed_json(deep, Scrubber()) == to_json(deep, Scrubber(), never)
    assert scrubbed_json({"api_key": "x"}, Scrubber()) == {"api_key": REDACTED}


def test_distribute_cuts_text_to_the_recorded_sizes_across_segments() -> None:
    """Sizes span segments, zero sizes make no chunk, leftover text makes a last chunk."""
    chunks = distribute(["abcde", "", "xyz"], [0, 2, 4, 0])
    assert chunks == [[(0, "ab")], [(0, "cde"), (2, "x")], [(2, "yz")]]
    assert distribute(["abc"], [5, 5]) == [[(0, "abc")]]
    assert distribute([], [3]) == []


def test_time_to_first_token_is_the_first_chunk_with_text() -> None:
    """A role-only first chunk does not count; with no text at all, the first chunk does."""
    assert first_token_ms([[1.0, 0], [2.5, 4], [3.0, 2]]) == 2.5
    assert first_token_ms([[1.0, 0], [2.0, 0]]) == 1.0
    assert first_token_ms([]) is None
