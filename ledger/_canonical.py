"""JSON-native checking and RFC 8785 canonical JSON (JCS).

Owns the rules that keep hashing exact: integers within +/-(2^53-1), no NaN or Infinity, str keys,
no bytes, sets or arbitrary objects, no lone surrogates. `canonical_json` is RFC 8785: the
`rfc8785` package is the reference; a payload without floats and without keys outside the Basic
Multilingual Plane takes a fast path through `json.dumps`, which produces the same bytes for such
values (property-tested against `rfc8785` in tests/test_canonical.py). Every check is iterative and
refuses values nested deeper than `MAX_NESTING` levels (a ledger's `Limits` refuse less), so the
recursive encoders behind it never meet a value deep enough to exhaust Python's stack. Must not
know events.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Callable
from typing import Any

import orjson
import rfc8785

from agentledger.ledger.errors import InvalidPayloadError, LimitExceededError

__all__ = [
    "MAX_NESTING",
    "MAX_SAFE_INTEGER",
    "canonical_json",
    "canonical_json_of_parsed",
    "canonical_json_trusted",
    "check_json_native",
    "json_depth",
    "loads",
    "loads_noting_floats",
    "loads_untrusted",
    "sha256_hex",
]

MAX_SAFE_INTEGER = 2**53 - 1
MAX_NESTING = 512
"""The deepest value any check here accepts (levels: a scalar or empty container is 1, ``[1]``
is 2). The JSON encoders and decoders recurse once per level, so this stays well inside Python's
default recursion limit of 1000; a ledger's `Limits.max_depth` is lower still."""
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NON_BMP = re.compile("[\U00010000-\U0010ffff]")
_FAST_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)
_SORTED = orjson.OPT_SORT_KEYS
_orjson_dumps = orjson.dumps
_OrjsonError = orjson.JSONEncodeError
"""`orjson` writes the same bytes as `_FAST_ENCODER` (UTF-8) for checked values that hold no
float it formats differently (integral, below 1e-4: the `_FLOAT` flag) and no key outside the
BMP, about eight times faster; it refuses what `_FAST_ENCODER` refuses too (lone surrogates,
non-str keys) and nesting beyond 254 levels, which then take `_FAST_ENCODER`. It writes NaN and
Infinity as ``null`` where `_FAST_ENCODER` refuses them, so only checked values, or output
holding no ``null``, are taken from it (property-tested in tests/test_ledger_properties.py and
tests/test_ledger_verify_pages.py)."""


_FLOAT = 1
_NON_BMP_KEY = 2
_INF = float("inf")


class _NotNativeError(Exception):
    """Internal: the fast scan met something that is not JSON-native."""


class _TooDeepError(Exception):
    """Internal: the fast scan went deeper than it was allowed to."""


def check_json_native(value: Any, path: str = "", *, max_depth: int = MAX_NESTING) -> int:
    """Raise `InvalidPayloadError` (naming the path) unless `value` is JSON-native.

    A value nested more than `max_depth` levels (see `json_depth`) raises `LimitExceededError`.
    Strings are checked for lone surrogates (only non-ASCII ones need the regex). Returns flags
    for `canonical_json_unchecked`: whether the value holds a float that `json.dumps` formats
    unlike RFC 8785 (integral, or below 1e-4), or a key outside the BMP (sorted differently).
    """
    try:
        return _scan(value, max_depth)
    except _TooDeepError:
        raise LimitExceededError(
            "max_depth",
            json_depth(value),
            max_depth,
            subject=f"the value at {path or '/'}",
            hint="no event or blob takes JSON this deep: flatten it, or record it as text",
            path=path,
        ) from None
    except _NotNativeError:
        _locate(value, path, max_depth)
        raise AssertionError("unreachable: _locate raises") from None


def json_depth(value: Any, *, stop: int | None = None) -> int:
    """How many levels `value` nests: a scalar or an empty container is 1, ``[1]`` is 2.

    Counts the values on the longest path from `value` down to a leaf, both ends included.
    Iterative (one pass per level), so any depth is measured without recursion. With `stop`,
    returns ``stop + 1`` as soon as the value is known to be deeper than `stop`.
    """
    depth = 0
    level = [value]
    while True:
        depth += 1
        if stop is not None and depth > stop:
            return depth
        deeper = False
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is dict:
                children: Any = item.values()
            elif kind is list:
                children = item
            else:
                continue
            if children:
                deeper = True
                below.extend(c for c in children if type(c) is dict or type(c) is list)
        if not deeper:
            return depth
        level = below


def _scan(value: Any, max_depth: int) -> int:  # noqa: PLR0912 - one flat loop is the fast path
    """Iterative fast check, one level of nesting at a time; raises without saying where."""
    flags = 0
    level = [value]
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            raise _TooDeepError
        below: list[Any] = []
        extend = below.extend
        for item in level:
            kind = type(item)
            if kind is str:
                if not item.isascii() and _LONE_SURROGATE.search(item):
                    raise _NotNativeError
                continue
            if kind is bool or item is None:
                continue
            if kind is dict:
                for key in item:
                    if type(key) is not str:
                        raise _NotNativeError
                    if not key.isascii():
                        if _LONE_SURROGATE.search(key):
                            raise _NotNativeError
                        if _NON_BMP.search(key):
                            flags |= _NON_BMP_KEY
                extend(item.values())
            elif kind is list:
                extend(item)
            elif kind is int:
                if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                    raise _NotNativeError
            elif kind is float:
                if not math.isfinite(item):
                    raise _NotNativeError
                if item.is_integer() or -1e-4 < item < 1e-4:
                    flags |= _FLOAT
            else:
                raise _NotNativeError
        level = below
    return flags


class _KeyCheck:
    """A `_locate` stack entry: check this object key before the value under it."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


def _locate(value: Any, path: str, max_depth: int) -> None:  # noqa: PLR0912 - one case per JSON type
    """Walk with paths, in document order, and raise `InvalidPayloadError` at the first offender.

    Iterative, and it does not descend past `max_depth` levels (the scan that called it found
    the offender within them), so neither the depth nor the paths it builds are unbounded.
    """
    stack: list[tuple[Any, str, int]] = [(value, path, 1)]
    while stack:
        item, where, depth = stack.pop()
        kind = type(item)
        if kind is _KeyCheck:
            key = item.key
            if type(key) is not str:
                raise InvalidPayloadError(where, f"object key {key!r} is not a string")
            if _LONE_SURROGATE.search(key):
                raise InvalidPayloadError(where, "an object key holds a lone surrogate")
        elif kind is str:
            if _LONE_SURROGATE.search(item):
                raise InvalidPayloadError(
                    where, "a string holds a lone surrogate (not valid Unicode)"
                )
        elif kind is bool or item is None:
            pass
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                raise InvalidPayloadError(
                    where, f"integer {item} is beyond +/-(2^53-1); record it as a string"
                )
        elif kind is float:
            if not math.isfinite(item):
                raise InvalidPayloadError(where, f"{item!r} is not a finite number")
        elif kind is dict:
            for key, inner in reversed(item.items()):
                if depth < max_depth:
                    child = f"{where}/{_escape(key)}" if type(key) is str else where
                    stack.append((inner, child, depth + 1))
                stack.append((_KeyCheck(key), where, depth))
        elif kind is list:
            if depth < max_depth:
                stack.extend(
                    (inner, f"{where}/{index}", depth + 1)
                    for index, inner in reversed(list(enumerate(item)))
                )
        elif isinstance(item, bytes | bytearray | memoryview):
            raise InvalidPayloadError(where, "bytes are not JSON: encode them as base64url text")
        else:
            raise InvalidPayloadError(where, f"{kind.__name__} is not a JSON type")


def canonical_json(value: Any, *, max_depth: int = MAX_NESTING) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON-native value (checked first).

    A value nested more than `max_depth` levels raises `LimitExceededError`.
    """
    return canonical_json_unchecked(value, check_json_native(value, max_depth=max_depth))


def canonical_json_unchecked(value: Any, flags: int) -> bytes:
    """Canonical bytes of a value already checked by `check_json_native` (which gave `flags`).

    Floats that RFC 8785 prints like Python's `repr` stay; integral floats up to 2^53 become
    ints (same digits); any other float goes through a placeholder that cannot occur in checked
    input (it holds a lone surrogate) and is replaced by `rfc8785`'s own formatting.
    """
    if flags & _NON_BMP_KEY:
        try:
            return bytes(rfc8785.dumps(value))
        except rfc8785.CanonicalizationError:
            _raise_for_surrogate(value, "")
            raise
    if not flags:
        try:
            return _orjson_dumps(value, option=_SORTED)
        except _OrjsonError:
            pass  # nested beyond orjson's limit, or a lone surrogate: named below
        text = _FAST_ENCODER.encode(value)
    else:
        special: list[float] = []
        text = _FAST_ENCODER.encode(_prepare_floats(value, special))
        for index, number in enumerate(special):
            marker = f'"\ud800{index}\ud800"'
            text = text.replace(marker, rfc8785.dumps(number).decode("ascii"), 1)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        _raise_for_surrogate(value, "")
        raise


_INTEGRAL_FLOAT = re.compile(r"\.0(?=[,\]}]|$)")
_EXPONENT = re.compile(r"e[-+]\d")
"""Where `json.dumps` output may hold a float RFC 8785 writes differently: a token ending in
``.0``, or one with an exponent. Both start with a literal, so the search is fast; a string may
match too, which only costs `_fix_floats`."""
_INTEGRAL_FLOAT_BYTES = re.compile(rb"\.0(?=[,\]}]|$)")
_EXPONENT_BYTES = re.compile(rb"e[-+]\d")
_NON_BMP_BYTES = re.compile(rb"[\xf0-\xf4]")
"""The same searches on UTF-8 output (a character outside the BMP takes four bytes, led by
0xF0-0xF4)."""
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?')


def _fix_float_token(match: re.Match[str]) -> str:
    text = match.group()
    if text[0] == '"':
        return text
    if "e" in text or text == "-0.0":
        return rfc8785.dumps(float(text)).decode("ascii")
    if text.endswith(".0"):
        return text[:-2]
    return text


def _fix_floats(text: str) -> str:
    """Rewrite the float tokens of compact `json.dumps` output that RFC 8785 writes differently.

    Goes token by token (strings are matched whole and kept), so it is only for the rare float
    beyond 2^53 or below 1e-4; every float token is an exact `repr`, so ``float(token)`` is the
    original and `rfc8785` formats it.
    """
    return _TOKEN.sub(_fix_float_token, text)


def _integral_floats_to_ints(value: Any) -> bool:
    """Replace, in place, floats with integral values up to 2^53 by ints; True if any changed."""
    changed = False
    stack = [value]
    while stack:
        item = stack.pop()
        pairs = item.items() if type(item) is dict else enumerate(item)
        for key, child in pairs:
            kind = type(child)
            if kind is float:
                if child.is_integer() and -MAX_SAFE_INTEGER <= child <= MAX_SAFE_INTEGER:
                    item[key] = int(child)
                    changed = True
            elif kind is dict or kind is list:
                stack.append(child)
    return changed


def canonical_json_trusted(payload: dict[str, Any]) -> bytes:
    """Canonical bytes of a payload freshly dumped from a validated catalogue event.

    Its containers are already JSON (pydantic dumped them, and free-form values were checked by
    `check_json_native` when the event was built) and its typed integers are bounded by the
    schema, so the full scan is skipped. Integral floats in `payload` become ints in place, as a
    read back gives them. What typed fields can still hold is caught: NaN, Infinity or an
    unencodable object make `json.dumps` fail and a lone surrogate makes UTF-8 encoding fail;
    each takes `canonical_json`, which names the offending path.
    """
    try:
        data = _orjson_dumps(payload, option=_SORTED)
    except _OrjsonError:
        data = None  # an object, a lone surrogate or deep nesting: the checks below name it
    if data is not None and b"null" not in data:  # orjson writes NaN and Infinity as null
        if (
            b".0" in data
            and _INTEGRAL_FLOAT_BYTES.search(data) is not None
            and _integral_floats_to_ints(payload)
        ):
            data = _orjson_dumps(payload, option=_SORTED)
        if (
            (b".0" not in data or _INTEGRAL_FLOAT_BYTES.search(data) is None)
            and (b"e" not in data or _EXPONENT_BYTES.search(data) is None)
            and (data.isascii() or _NON_BMP_BYTES.search(data) is None)
        ):
            return data
    try:
        text = _FAST_ENCODER.encode(payload)
    except (TypeError, ValueError, RecursionError):
        return canonical_json(payload)
    if _INTEGRAL_FLOAT.search(text) is not None and _integral_floats_to_ints(payload):
        text = _FAST_ENCODER.encode(payload)
    if _INTEGRAL_FLOAT.search(text) is not None or _EXPONENT.search(text) is not None:
        text = _fix_floats(text)  # a float beyond 2^53 or below 1e-4 (or a string that looks so)
    if not text.isascii() and _NON_BMP.search(text) is not None:
        return canonical_json(payload)  # a key outside the BMP sorts differently
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return canonical_json(payload)


def _refuse_object(value: Any) -> Any:
    msg = f"{type(value).__name__} is not JSON"
    raise TypeError(msg)


def _parsed_encoder() -> Callable[[Any], str]:
    """`_FAST_ENCODER.encode` for parsed values, made once.

    A parsed value has no cycles, so the cycle check is off, and the C encoder is called
    without being rebuilt for each value.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python without the json C accelerator
        return json.JSONEncoder(
            ensure_ascii=False,
            separators=(",", ":"),
            sort_keys=True,
            allow_nan=False,
            check_circular=False,
        ).encode
    encode = make(
        None, _refuse_object, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
    return lambda value: "".join(encode(value, 0))


_encode_parsed = _parsed_encoder()


def canonical_json_of_parsed(value: Any, *, plain_floats: bool = False) -> bytes:
    """Canonical bytes of a value that `loads` parsed: the JSON-native checks were done by parsing.

    A parsed value holds only str keys, strings, ints within +/-(2^53-1) (`loads` reads larger
    ones as floats), floats, bools, None, lists and dicts, so the full scan of `canonical_json`
    is needed only for what parsing lets through, and each of those is seen in (or while making)
    `json.dumps`' output: NaN or Infinity (the encoder refuses them), a lone surrogate (UTF-8
    refuses it), a float RFC 8785 writes unlike Python (integral, or with an exponent), a key
    outside the BMP (sorted differently), or nesting that may pass `MAX_NESTING` (at least that
    many opening brackets, so at least twice that many characters). Any of these goes to
    `canonical_json`, which decides exactly as it always does, so the bytes (or the error) are
    the same either way. With `plain_floats` (what `loads_noting_floats` found while parsing
    `value`), the output is not searched for floats: the parser saw none that needs it.
    """
    if plain_floats:  # no float, NaN or Infinity that orjson would write unlike json
        try:
            data = _orjson_dumps(value, option=_SORTED)
        except _OrjsonError:
            pass  # a lone surrogate or deep nesting: decided below
        else:
            if data.isascii() or _NON_BMP_BYTES.search(data) is None:
                return data
    try:
        text = _encode_parsed(value)
    except (TypeError, ValueError, RecursionError):
        return canonical_json(value)
    if (
        (len(text) >= 2 * MAX_NESTING and text.count("[") + text.count("{") >= MAX_NESTING)
        or (
            not plain_floats
            and (
                (".0" in text and _INTEGRAL_FLOAT.search(text) is not None)
                or (("e-" in text or "e+" in text) and _EXPONENT.search(text) is not None)
            )
        )
        or (not text.isascii() and _NON_BMP.search(text) is not None)
    ):
        return canonical_json(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return canonical_json(value)


def _raise_for_surrogate(value: Any, path: str) -> None:
    """Find the string holding a lone surrogate and raise `InvalidPayloadError` naming it."""
    if type(value) is str:
        if _LONE_SURROGATE.search(value):
            raise InvalidPayloadError(path, "a string holds a lone surrogate (not valid Unicode)")
    elif type(value) is dict:
        for key, item in value.items():
            if _LONE_SURROGATE.search(key):
                raise InvalidPayloadError(path, "an object key holds a lone surrogate")
            _raise_for_surrogate(item, f"{path}/{_escape(key)}")
    elif type(value) is list:
        for index, item in enumerate(value):
            _raise_for_surrogate(item, f"{path}/{index}")


def _prepare_floats(value: Any, special: list[float]) -> Any:
    kind = type(value)
    if kind is float:
        magnitude = abs(value)
        if value.is_integer() and magnitude <= MAX_SAFE_INTEGER:
            return int(value)
        if magnitude >= 1e-4 and not value.is_integer():
            return value
        special.append(value)
        return f"\ud800{len(special) - 1}\ud800"
    if kind is dict:
        return {key: _prepare_floats(item, special) for key, item in value.items()}
    if kind is list:
        return [_prepare_floats(item, special) for item in value]
    return value


def _parse_int(text: str) -> int | float:
    number = int(text)
    return number if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER else float(text)


def loads(data: str | bytes) -> Any:
    """Parse stored canonical JSON.

    An integer beyond +/-(2^53-1) can only have been written from an integral float (larger
    ints are refused on the way in; RFC 8785 prints 1e16 as 10000000000000000), so it is read
    back as that float.

    Bytes are parsed by ``orjson`` (about 3x faster) unless they may hold an integer of 16
    digits or more (`_long_integer`) or ``orjson`` refuses them (NaN, a lone surrogate, a number
    out of range, nesting past its limit): the standard decoder then reads them, and every
    input gives what it gave before, values and errors alike.
    """
    if type(data) is bytes and not _long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # read below, as it always was, to its value or its error
    return _DECODER.decode(data.decode() if isinstance(data, bytes) else data)


_DECODER = json.JSONDecoder(parse_int=_parse_int)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 16
_DIGIT_BYTE = ord("0")
_FRACTION_OR_EXPONENT = frozenset(b".eE")
_EXPONENT_MARK = frozenset(b"eE")
_SIGN_MARK = frozenset(b"+-")


def _long_integer(data: bytes) -> bool:
    """Whether JSON ``data`` may hold an integer token of 16 digits or more (2^53 has 16).

    Each run of 16 digits or more is looked at: it is part of a float when a ``.`` or an
    exponent comes right before it or a ``.`` or an ``e`` right after it (in JSON that ``orjson``
    accepts, no integer token touches either); any other, a run inside a string included,
    counts. Floats written with 16 or 17 digits are common (``0.4677408879386158``).
    """
    mapped = data.translate(_DIGITS_AS_ZERO)
    found = mapped.find(_LONG_NUMBER)
    size = len(mapped)
    while found != -1:
        start, end = found, found + len(_LONG_NUMBER)
        while start > 0 and mapped[start - 1] == _DIGIT_BYTE:
            start -= 1
        while end < size and mapped[end] == _DIGIT_BYTE:
            end += 1
        before = data[start - 1] if start > 0 else 0
        exponent = before in _EXPONENT_MARK or (
            before in _SIGN_MARK and start > 1 and data[start - 2] in _EXPONENT_MARK
        )
        after = data[end] if end < size else 0
        if not (before == ord(".") or exponent or after in _FRACTION_OR_EXPONENT):
            return True
        found = mapped.find(_LONG_NUMBER, end)
    return False


class _FloatsSeen(threading.local):
    """Per thread: whether the parse under way met a float that is not plain (see below)."""

    special = False


_FLOATS_SEEN = _FloatsSeen()


def _parse_float_noting(text: str) -> float:
    """A float as `loads` reads it, noting one that `json.dumps` may write unlike RFC 8785.

    Python writes a float like RFC 8785 when it is finite, not integral, and at least 1e-4 and
    below 1e16 in magnitude (`repr` then has neither a trailing ``.0`` nor an exponent); any
    other is special.
    """
    value = float(text)
    if value.is_integer() or not 1e-4 <= abs(value) < 1e16:
        _FLOATS_SEEN.special = True
    return value


def _parse_int_noting(text: str) -> int | float:
    """`_parse_int`, noting an integer read as a float (beyond +/-(2^53-1): integral)."""
    number = int(text)
    if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
        return number
    _FLOATS_SEEN.special = True
    return float(text)


def _parse_constant_noting(name: str) -> float:
    """NaN or Infinity as `loads` reads them (floats), noted: no encoder here may write them."""
    _FLOATS_SEEN.special = True
    return float(name)


_NOTING_DECODER = json.JSONDecoder(
    parse_int=_parse_int_noting,
    parse_float=_parse_float_noting,
    parse_constant=_parse_constant_noting,
)
_noting_scan = _NOTING_DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__, untyped in typeshed


def loads_noting_floats(data: bytes) -> tuple[Any, bool]:
    """`loads`, and whether every float it parsed is plain (written by `json.dumps` as by JCS).

    When they all are, `canonical_json_of_parsed(value, plain_floats=True)` need not search its
    output for others. The floats are judged as the parser meets them, which costs a call per
    float instead of two searches of the encoded text per value. NaN and Infinity
    count as not plain (`orjson` would write them as ``null``).
    """
    seen = _FLOATS_SEEN
    seen.special = False
    text = data.decode()
    try:
        # What `decode` does when no whitespace surrounds the value (never in stored bytes),
        # without its two whitespace searches (and without `raw_decode`'s frame around it).
        value, end = _noting_scan(text, 0)
    except (StopIteration, ValueError):
        end = -1
    if end != len(text):  # whitespace around the value, or not one JSON value: as `loads` does
        seen.special = False
        value = _NOTING_DECODER.decode(text)
    return value, not seen.special


def _refuse_constant(name: str) -> Any:
    msg = f"{name} is not JSON"
    raise ValueError(msg)


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object, unless a key repeats: parsers differ on which copy wins, so it is refused."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            msg = f"the key {key!r} appears twice in one object"
            raise ValueError(msg)
        out[key] = value
    return out


_UNTRUSTED_DECODER = json.JSONDecoder(
    parse_int=_parse_int,
    parse_constant=_refuse_constant,
    object_pairs_hook=_refuse_repeated_keys,
)


def loads_untrusted(text: str) -> Any:
    """Parse JSON from outside the ledger (an import file), as `loads` reads it back.

    ``NaN`` and ``Infinity`` (which Python's parser takes by default) and a key repeated in one
    object (parsers differ on which copy wins) raise `ValueError`; JSON nested deeper than the
    parser can follow raises `RecursionError`, which callers report.
    """
    return _UNTRUSTED_DECODER.decode(text)


def as_recorded(value: Any) -> Any:
    """``value`` as the ledger gives it back: a canonical JSON round trip.

    RFC 8785 writes ``0.0`` as ``0``, so an integral float reads back as an int. Code that
    formats what a tool or model returned must see this form live too, or a replay (which is
    served from the record) would format ``0`` where the live run formatted ``0.0``.
    """
    return loads(canonical_json(value))


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def _escape(key: str) -> str:
    """Escape a key for a JSON Pointer (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
