"""The detectors of personal data and secrets in text, and how their overlapping spans resolve.

Owns ``detect``: every detector's spans ``(start, end, kind)`` over one string, resolved into a
sorted list that never overlaps. Kinds, most specific first (the order ties are broken in):
``private_key``, ``api_key``, ``auth_token``, ``secret``, ``iban``, ``card``, ``email``,
``phone``. The longest span wins an overlap; a tie goes to the more specific kind, then to the
earlier start. Placeholders a previous redaction left (``[redacted:email]``, ``[email:<12 hex>]``)
are found too, as spans that nothing may overlap. Hashes, UUIDs, ``sha256:`` references, dates,
times, version strings and IP addresses are shielded from the number detectors (phone, card,
IBAN), so the ledger's own identifiers are never taken for personal data.

``phonenumbers`` and ``schwifty`` are imported on first need (a string with a candidate number
or IBAN), so importing the ledger stays fast. Must not replace text, hash values or know about
policies: that is ``agentledger.ledger.redaction``'s job.
"""

from __future__ import annotations

import bisect
import re
import string
from collections.abc import Callable, Iterator, Sequence
from functools import cache, lru_cache
from typing import Any, Literal, NamedTuple

__all__ = ["KINDS", "Kind", "Span", "detect", "luhn_ok", "placeholder_pattern"]

Kind = Literal["email", "phone", "card", "iban", "api_key", "auth_token", "private_key", "secret"]
KINDS: tuple[Kind, ...] = (
    "email",
    "phone",
    "card",
    "iban",
    "api_key",
    "auth_token",
    "private_key",
    "secret",
)
"""Every kind of data the detectors find, in the order findings and counts are reported."""

_SPECIFICITY: dict[str, int] = {
    kind: rank
    for rank, kind in enumerate(
        ("private_key", "api_key", "auth_token", "secret", "iban", "card", "email", "phone")
    )
}
_PLACEHOLDER = "placeholder"
_NUMBER_KINDS = frozenset({"phone", "card", "iban"})


class Span(NamedTuple):
    """Where one detector found one value: ``text[start:end]`` is of ``kind``."""

    start: int
    end: int
    kind: str


_KIND_ALTERNATION = "|".join(KINDS)


def placeholder_pattern() -> re.Pattern[str]:
    """The pattern of a placeholder: group ``redacted`` (a kind) or ``hashed`` (a kind)."""
    return _PLACEHOLDERS


_PLACEHOLDERS = re.compile(
    rf"\[(?:redacted:(?P<redacted>{_KIND_ALTERNATION})|(?P<hashed>{_KIND_ALTERNATION}):[0-9a-f]{{12}})\]"
)

# Shields: identifiers and numbers that are not personal data ---------------------------------

# Each pattern starts with a character class, the look-behind after it: the regular expression
# engine then skips ahead to candidate characters instead of testing every position.
_HEX = re.compile(r"[0-9a-fA-F](?<![0-9A-Za-z][0-9a-fA-F])[0-9a-fA-F]{15,}(?![0-9A-Za-z])")
_DIGEST_REF = re.compile(
    r"\b(?:sha256|sha384|sha512|sha1|md5|blake2b|blake3)[:\-][0-9a-zA-Z+/=_-]+", re.IGNORECASE
)
_UUID = re.compile(
    r"[0-9a-fA-F](?<![0-9A-Za-z][0-9a-fA-F])[0-9a-fA-F]{7}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
    r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_DATE_TIME = re.compile(
    r"\d(?<!\d\d)(?:\d{3}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d?[./-]\d{1,2}[./-]\d{2,4}(?:[T ,]+\d{1,2}:\d{2}(?::\d{2})?)?"
    r"|\d?:\d{2}(?::\d{2}(?:[.,]\d+)?)?)(?!\d)"
)
_DOTTED = re.compile(r"(?:[vV](?<![\w.][vV])\d+|\d(?<![\w.]\d)\d*)(?:\.\d+){2,}(?![\w.]*\d)")

_WHOLE_IDENTIFIER = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|sha256:[0-9a-f]{64}"
    r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})?"
    r"|\d{1,6}"
)
"""A string that is one UUID, one blob ref, one ISO 8601 timestamp or at most six digits, and
nothing else: the detectors find nothing in it (the first three are shielded from the number
detectors and match no other; no phone or card has fewer than seven digits), so `detect`
returns at once."""
_DIGIT = re.compile(r"\d")
_NOTHING_TO_FIND = re.compile(r"[^@:=\-]*", re.DOTALL)
"""Text without a digit that also lacks these characters holds nothing any detector finds,
unless it names a bearer token or holds a JWT (``_maybe_token``)."""


def _maybe_token(text: str) -> bool:
    return "eyJ" in text or "earer" in text or "EARER" in text


# Detectors -------------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![\w.%+'-])[\w%+'-]+(?:\.[\w%+'-]+)*@(?:[^\W_](?:[\w-]*[^\W_])?\.)+"
    r"(?:[^\W\d_]{2,}|xn--[a-z0-9-]{2,})(?![\w-])"
)
_CARD = re.compile(r"\d(?<![\w.+-]\d)(?:(?: {1,2}|[-.])?\d){12,}(?!\w)")
_SEVEN_DIGITS = re.compile(r"\d(?:[ \u00a0().\-]{0,3}\d){6}")
"""No phone or card number has fewer than seven digits."""
_PHONE_CUE = re.compile(
    r"\b(?:call|phone|tel|telephone|mobile|cell|fax|ring|text|sms|whatsapp|signal)"
    r"\.?(?:\s*(?:me|us|him|her|them|at|on|is|:|-|#))*\s*\(?$",
    re.IGNORECASE,
)
"""Words that make the digits after them a phone number even when no region knows it."""
_MAX_PHONE_DIGITS = 20
"""A longer run of digits is a list of numbers or an id, not one phone number."""
PHONE_WINDOWS_KEPT = 4096
"""Phone candidate windows whose matches are remembered (`_phone_matches`)."""
_IBAN_START = re.compile(r"[A-Z]{2}\d{2}")
_CARD_GROUP = re.compile(r"\d+")
_PHONE_CANDIDATE = re.compile(r"(?<![\w+\-/.])(?:\+|\(\+?)?\d[\d \u00a0().\-]*\d(?!\w|[-/]\w)")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")
_API_KEY = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,}"
    r"|(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}"
    r"|github_pat_[A-Za-z0-9_]{22,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_-]{35}"
    r"|(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}"
    r"|whsec_[A-Za-z0-9+/=]{24,}"
    r"|hf_[A-Za-z0-9]{30,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|npm_[A-Za-z0-9]{36,}"
    r")(?![A-Za-z0-9_-])"
)
_BEARER = re.compile(r"\bbearer\s+(?P<value>[A-Za-z0-9\-._~+/]+=*)", re.IGNORECASE)
_AUTHORIZATION = re.compile(
    r"\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?"
    r"(?:(?:basic|bearer|token|digest|negotiate|bot|aws4-hmac-sha256)\s+)?"
    r"(?!(?:basic|bearer|token|digest|negotiate|bot|aws4-hmac-sha256)\b)(?P<value>[^\s\"',;\[\]{}]{6,})",
    re.IGNORECASE,
)
_JWT = re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
    r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|(?:[A-Za-z0-9+/=:,\s-]|\\[nr])*)",
    re.DOTALL,
)
_SECRET_WORDS = ("pass", "pwd", "secret", "key", "token")
_SECRET_ASSIGNMENT = re.compile(
    r"\b(?:password|passwd|pwd|passphrase|secret|client[_-]?secret|api[_-]?key|apikey"
    r"|access[_-]?key(?:[_-]?id)?|secret[_-]?(?:access[_-]?)?key|(?:access|auth|refresh)[_-]?token"
    r"|private[_-]?key)[\"']?\s*[:=]\s*[\"']?(?P<value>[^\s\"',;<>{}\[\]]{8,})",
    re.IGNORECASE,
)


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


def detect(text: str, phone_regions: Sequence[str] = (), extra: Sequence[Span] = ()) -> list[Span]:
    """The spans of ``text`` that hold personal data, secrets or placeholders, resolved.

    ``phone_regions`` are the ISO 3166 regions whose national forms (``(415) 555-0132``,
    ``030 901820``) count as phone numbers; international forms (``+44 20 7946 0958``) are
    found whatever they are. The result is sorted by start and never overlaps; placeholder
    spans have the kind ``"placeholder"``. ``extra`` spans (found by the caller, e.g. a whole
    value under a ``password`` key) compete with the detectors' own.
    """
    if not extra and _WHOLE_IDENTIFIER.fullmatch(text):
        return []
    return _detect(text, phone_regions, extra)


def _detect(
    text: str, phone_regions: Sequence[str], extra: Sequence[Span], *, gated: bool = True
) -> list[Span]:
    """`detect` running every detector that could find something in ``text``.

    ``gated`` skips the detectors whose pattern needs what the text lacks (unless it holds a
    digit outside ASCII): a scan by a regular expression costs 10-30 ns a character, and an
    answer of a few kilobytes would otherwise pay every scan (`_Gates`). ``gated=False`` runs
    them as their own cheap tests allow (what the property tests compare against): the spans
    are the same either way.
    """
    placeholders = (
        [Span(m.start(), m.end(), _PLACEHOLDER) for m in _PLACEHOLDERS.finditer(text)]
        if "[" in text
        else []
    )
    found: list[Span] = list(extra)
    gates = _Gates.of(text) if gated else None
    if gates is not None:
        digits = gates.digits > 0
        if not digits and not found and gates.nothing_to_find and not _maybe_token(text):
            return placeholders
    else:
        digits = _DIGIT.search(text) is not None
        if not digits and not found and _NOTHING_TO_FIND.fullmatch(text) and not _maybe_token(text):
            return placeholders
    if "@" in text:
        found += _spans(_EMAIL, text, "email")
    if "-----BEGIN" in text:
        found += _spans(_PEM, text, "private_key")
    if digits and (gates is None or gates.may_hold_key()):
        found += _spans(_API_KEY, text, "api_key", accept=_has_digit)
    lowered = text.lower()
    if "bearer" in lowered or "authorization" in lowered:
        found += _spans(_BEARER, text, "auth_token", group="value", accept=_token_like)
        found += _spans(_AUTHORIZATION, text, "auth_token", group="value")
    if "eyJ" in text:
        found += _spans(_JWT, text, "auth_token")
    if (gates is None or gates.assigns) and any(word in lowered for word in _SECRET_WORDS):
        found += _spans(_SECRET_ASSIGNMENT, text, "secret", group="value", accept=_not_a_word)
    if digits:
        found += _number_spans(text, phone_regions, gates)
    return resolve(placeholders, found) if found else placeholders


_CLASSES = bytes.maketrans(b"0123456789" + string.ascii_uppercase.encode(), b"0" * 10 + b"A" * 26)
"""Maps each ASCII digit to ``0`` and each upper-case letter to ``A`` (the rest unchanged)."""
_SEVEN_ZEROS = re.compile(rb"0(?:[ ().\-]{0,3}0){6}")
"""`_SEVEN_DIGITS` over ASCII text mapped by `_CLASSES` (its no-break space is not ASCII)."""
_ASCII_BYTES = bytes(range(128))
_SHORTEST_KEY = 15
"""No `_API_KEY` branch matches fewer characters (``xoxb-`` and ten more is the shortest)."""
_KEY_CHARS = (string.ascii_letters + string.digits + "_-+/=").encode()
_KEY_ALPHABET = bytes(ord("k") if byte in _KEY_CHARS else ord(" ") for byte in range(256))
_KEY_RUN = b"k" * _SHORTEST_KEY


class _Gates:
    """What a detector's pattern needs, read off a text in a few passes of C code.

    One `bytes.translate` of the text's UTF-8 maps digits to ``0`` and upper-case letters to
    ``A``, so that "has seven digits" or "holds two capitals before two digits" (an IBAN's
    start) become counts and substring tests instead of scans by a regular expression. Every
    such pattern's characters are ASCII, but a digit pattern also matches the digits of other
    scripts: a text that holds any gets no gates (`of`).
    """

    __slots__ = ("_ascii", "_raw", "_text", "assigns", "classes", "digits", "nothing_to_find")

    def __init__(self, text: str, raw: bytes, *, ascii_only: bool) -> None:
        self._text = text
        self._raw = raw
        self._ascii = ascii_only
        self.classes = classes = raw.translate(_CLASSES)
        self.digits = classes.count(b"0")
        has_colon, has_equals = ":" in text, "=" in text
        self.assigns = has_colon or has_equals  # `_SECRET_ASSIGNMENT` needs a ":" or "="
        # as `_NOTHING_TO_FIND.fullmatch`: none of "@", ":", "=", "-"
        self.nothing_to_find = not (has_colon or has_equals or "@" in text or "-" in text)

    @classmethod
    def of(cls, text: str) -> _Gates | None:
        """The gates of ``text``; None when it holds a digit outside ASCII."""
        if text.isascii():
            return cls(text, text.encode("ascii"), ascii_only=True)
        raw = text.encode("utf-8", "surrogatepass")
        # every byte of a character outside ASCII is >= 0x80: what is left is those characters
        others = raw.translate(None, _ASCII_BYTES).decode("utf-8", "surrogatepass")
        if _DIGIT.search(others) is not None:
            return None
        return cls(text, raw, ascii_only=False)

    def may_hold_key(self) -> bool:
        """Whether `_SHORTEST_KEY` characters of an API key's alphabet occur in a row.

        Every character of every `_API_KEY` branch is a letter, a digit or one of ``_-+/=``,
        so any match is such a run: the text is mapped to ``k`` (those) and a space (the rest)
        and searched for the run as a substring.
        """
        return _KEY_RUN in self._raw.translate(_KEY_ALPHABET)

    def may_hold_phone_or_card(self) -> bool:
        """Whether `_SEVEN_DIGITS` matches.

        Searched for in the mapped bytes of ASCII text, where each digit is the literal ``0``
        that the pattern's engine finds by a fast substring search.
        """
        if self.digits < 7:
            return False
        if self._ascii:
            return _SEVEN_ZEROS.search(self.classes) is not None
        return _SEVEN_DIGITS.search(self._text) is not None  # it may be spaced by U+00A0

    def may_hold_iban(self) -> bool:
        """`_IBAN_START`: two upper-case letters, then two digits."""
        return b"AA00" in self.classes


def resolve(fixed: Sequence[Span], found: Sequence[Span]) -> list[Span]:
    """``fixed`` spans plus those of ``found`` that survive: longest, then most specific, first."""
    chosen = sorted(fixed)
    starts = [span.start for span in chosen]
    ranked = sorted(set(found), key=lambda s: (s.start - s.end, _SPECIFICITY[s.kind], s.start))
    for span in ranked:
        index = bisect.bisect_left(starts, span.start)
        if index < len(chosen) and chosen[index].start < span.end:
            continue
        if index > 0 and chosen[index - 1].end > span.start:
            continue
        chosen.insert(index, span)
        starts.insert(index, span.start)
    return chosen


def _spans(
    pattern: re.Pattern[str],
    text: str,
    kind: str,
    *,
    group: str | int = 0,
    accept: Callable[[str], bool] | None = None,
) -> Iterator[Span]:
    for match in pattern.finditer(text):
        value = match.group(group)
        if accept is None or accept(value):
            yield Span(match.start(group), match.end(group), kind)


def _has_digit(value: str) -> bool:
    return any(char.isdigit() for char in value)


def _token_like(value: str) -> bool:
    return len(value) >= 20 or (len(value) >= 8 and _has_digit(value))


def _not_a_word(value: str) -> bool:
    return not value.isalpha()


# Numbers: cards, IBANs, phones ------------------------------------------------------------------


def _shields(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Spans IBANs may not touch, and spans cards and phones may not.

    IBANs keep clear of digest references and UUIDs; cards and phones of hex strings, dates,
    times, versions and IP addresses too (an upper-case IBAN is a hex string, a card is not).
    """
    lowered = text.lower()
    refs = [m.span() for m in _UUID.finditer(text)] if "-" in text else []
    if "sha" in lowered or "md5" in lowered or "blake" in lowered:
        refs += [m.span() for m in _DIGEST_REF.finditer(text)]
    ids = refs + [m.span() for m in _HEX.finditer(text) if not m.group(0).isdigit()]
    dates = [m.span() for m in _DATE_TIME.finditer(text)]
    if text.count(".") >= 2:
        dates += [m.span() for m in _DOTTED.finditer(text) if _version_like(m.group(0))]
    return refs, ids + dates


def _version_like(value: str) -> bool:
    if value[0] in "vV":
        return True
    parts = value.split(".")
    first = parts[0]
    return (
        len(parts) <= 4
        and _digit_count(value) < 12
        and (first == "0" or not first.startswith("0"))
        and any(len(part) <= 2 for part in parts[1:])
    )


def _masked(text: str, shields: Sequence[tuple[int, int]]) -> str:
    """``text`` with the shielded spans overwritten by ``#`` (offsets stay the same)."""
    if not shields:
        return text
    chars = list(text)
    for start, end in shields:
        chars[start:end] = "#" * (end - start)
    return "".join(chars)


def _number_spans(
    text: str, phone_regions: Sequence[str], gates: _Gates | None = None
) -> list[Span]:
    phones_or_cards = (
        gates.may_hold_phone_or_card()
        if gates is not None
        else _SEVEN_DIGITS.search(text) is not None
    )
    ibans = gates.may_hold_iban() if gates is not None else _IBAN_START.search(text) is not None
    if not phones_or_cards and not ibans:
        return []
    refs, wide = _shields(text)
    spans: list[Span] = []
    if phones_or_cards:
        masked = _masked(text, wide)
        spans += _card_spans(masked)
        spans += _phone_spans(masked, phone_regions)
    if ibans:
        spans += _iban_spans(_masked(text, refs))
    return spans


def _card_spans(text: str) -> Iterator[Span]:
    for match in _CARD.finditer(text):
        groups = [
            (g.start() + match.start(), g.end() + match.start(), g.group(0))
            for g in _CARD_GROUP.finditer(match.group(0))
        ]
        yield from _card_windows(groups)


def _card_windows(groups: list[tuple[int, int, str]]) -> Iterator[Span]:
    """The longest runs of consecutive digit groups that read as a card number, left to right."""
    index = 0
    while index < len(groups):
        best: int | None = None
        digits = ""
        if groups[index][2][0] in "23456":
            for stop in range(index, len(groups)):
                digits += groups[stop][2]
                if len(digits) > 19:
                    break
                if len(digits) >= 13 and luhn_ok(digits):
                    best = stop
        if best is None:
            index += 1
            continue
        yield Span(groups[index][0], groups[best][1], "card")
        index = best + 1


def _iban_spans(text: str) -> Iterator[Span]:
    for match in _IBAN.finditer(text):
        chunks = match.group(0).split(" ")
        while chunks:
            candidate = "".join(chunks)
            if len(candidate) < 15:
                break
            if _iban_valid(candidate):
                yield Span(match.start(), match.start() + len(" ".join(chunks)), "iban")
                break
            chunks.pop()


@cache
def _iban_class() -> Any:
    from schwifty import IBAN

    return IBAN


def _iban_valid(compact: str) -> bool:
    try:
        _iban_class()(compact)
    except ValueError:
        return False
    return True


@cache
def _phonenumbers() -> Any:
    import phonenumbers

    return phonenumbers


def _phone_spans(text: str, regions: Sequence[str]) -> Iterator[Span]:
    """Numbers ``phonenumbers`` accepts, and any 7-15 digits right after a word like "call"."""
    for match in _PHONE_CANDIDATE.finditer(text):
        digits = _digit_count(match.group(0))
        if not 7 <= digits <= _MAX_PHONE_DIGITS:
            continue
        found = list(_phones_in(match.group(0), match.start(), tuple(regions)))
        if not found and digits <= 15 and _PHONE_CUE.search(text, 0, match.start()):
            found = [Span(match.start(), match.end(), "phone")]
        yield from found


def _digit_count(value: str) -> int:
    return sum(char.isdigit() for char in value)


def _phones_in(window: str, offset: int, regions: tuple[str, ...]) -> Iterator[Span]:
    """The phone numbers ``phonenumbers`` finds in one candidate ``window`` of a text."""
    for start, end in _phone_matches(window, regions):
        yield Span(offset + start, offset + end, "phone")


@lru_cache(maxsize=PHONE_WINDOWS_KEPT)
def _phone_matches(window: str, regions: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """The (start, end) of each number found in ``window`` (remembered: a pure function).

    Each attempt is a ``PhoneNumberMatcher`` pass, about 80 us here, and a window with seven
    digits or more is tried in every region: a number a conversation repeats (an order or
    account number, a date) is matched once per process, not once per message that holds it.
    International forms are tried without a region, which can only parse a number written
    with its ``+`` (``phonenumbers`` refuses any other without a region): a window without one
    skips that attempt (`_phones_in_reference` tries it; the property tests compare both).
    """
    phonenumbers = _phonenumbers()
    leniency = phonenumbers.Leniency
    attempts: list[tuple[str | None, Any]] = []
    if "+" in window:
        attempts.append((None, leniency.POSSIBLE))
    if not window.lstrip("(").startswith("+"):
        attempts += [(region, leniency.VALID) for region in regions]
    found: list[tuple[int, int]] = []
    for region, level in attempts:
        matches = list(phonenumbers.PhoneNumberMatcher(window, region, leniency=level))
        found += ((m.start, m.end) for m in matches)
        if any(m.end - m.start == len(window) for m in matches):
            break
    return tuple(found)


def _phones_in_reference(window: str, offset: int, regions: tuple[str, ...]) -> Iterator[Span]:
    """`_phones_in` as first written: every attempt, nothing remembered (the tests' reference)."""
    phonenumbers = _phonenumbers()
    leniency = phonenumbers.Leniency
    attempts: list[tuple[str | None, Any]] = [(None, leniency.POSSIBLE)]
    if not window.lstrip("(").startswith("+"):
        attempts += [(region, leniency.VALID) for region in regions]
    for region, level in attempts:
        matches = list(phonenumbers.PhoneNumberMatcher(window, region, leniency=level))
        yield from (Span(offset + m.start, offset + m.end, "phone") for m in matches)
        if any(m.end - m.start == len(window) for m in matches):
            return
