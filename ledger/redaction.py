"""Redaction of personal data and secrets: the policy, and its application to text and JSON.

Owns ``RedactionPolicy`` (what to do with each kind of data: ``redact``, ``hash`` or ``keep``;
``redact`` for every kind unless told otherwise), the placeholders a redacted value becomes
(``[redacted:email]``, or ``[email:<12 hex>]`` for a keyed hash), ``redact_text``,
``redact_json``, the ``Redactor`` that applies one policy to many values (remembering the strings
it has redacted), and the ``Finding`` each reports (kind, JSON path, action, count; never the
value).

Redaction is idempotent: placeholders are found like any other value and never touched again,
and the counts are read from the placeholders in the result, so redacting redacted text changes
nothing and reports the same findings. The salt of the ``hash`` action is the caller's (one per
ledger); it is never part of the policy or its JSON. The detectors live in ``_detectors``. Must
not record events, keep state beyond a ``Redactor``'s cache, or import agents or vendor SDKs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agentledger.ledger._detectors import (
    KINDS,
    Kind,
    Span,
    detect,
    luhn_ok,
    placeholder_pattern,
)
from agentledger.ledger.errors import InvalidPayloadError, UsageError

__all__ = [
    "DEFAULT_PHONE_REGIONS",
    "KINDS",
    "SECRET_FIELDS",
    "Action",
    "Finding",
    "Kind",
    "RedactionPolicy",
    "Redactor",
    "Span",
    "count_placeholders",
    "detect",
    "hashed_placeholder",
    "luhn_ok",
    "placeholder",
    "redact_json",
    "redact_text",
    "shared_redactor",
]

Action = Literal["redact", "hash", "keep"]

DEFAULT_PHONE_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR", "IN")
"""Regions whose national phone forms are found by default (international forms always are)."""

SECRET_FIELDS: Mapping[str, Kind] = {
    "password": "secret",
    "passwd": "secret",
    "passphrase": "secret",
    "secret": "secret",
    "client_secret": "secret",
    "api_key": "secret",
    "apikey": "secret",
    "x_api_key": "secret",
    "secret_key": "secret",
    "secret_access_key": "secret",
    "aws_secret_access_key": "secret",
    "access_token": "secret",
    "refresh_token": "secret",
    "auth_token": "secret",
    "private_key": "secret",
    "authorization": "auth_token",
    "proxy_authorization": "auth_token",
}
"""Object keys (lower case, ``-`` read as ``_``) whose string values are secrets as a whole."""

_MAX_PASSES = 4
_FIELDS_KEPT = 4096
_UNKNOWN: Any = object()
"""`Redactor.clean`'s marker for a key it has not seen yet."""
"""How many object keys a `Redactor` remembers the secret-field kind of."""
_MARKER = "[redacted]"  # what the SDK instrumentations put in a secret header: already redacted
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Region = Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$")]


class RedactionPolicy(BaseModel):
    """What happens to each kind of data: ``redact`` (every kind's default), ``hash`` or ``keep``.

    ``actions`` lists only the kinds that differ from ``redact``. ``phone_regions`` are the ISO
    3166 regions whose national forms count as phone numbers (international forms with ``+``
    always do); fewer regions means fewer false positives among long ids, more means more
    national numbers found. The policy is plain JSON (record it with a run); the salt of the
    ``hash`` action is not part of it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    actions: dict[Kind, Action] = Field(default_factory=dict)
    phone_regions: tuple[Region, ...] = DEFAULT_PHONE_REGIONS

    def action(self, kind: str) -> Action:
        """The action for ``kind``."""
        return next((act for known, act in self.actions.items() if known == kind), "redact")

    @property
    def hashes(self) -> bool:
        """Whether some kind is hashed (so a salt is needed)."""
        return "hash" in self.actions.values()


@dataclass(frozen=True)
class Finding:
    """How many values of ``kind`` were redacted (or hashed) at ``path``; never the values.

    ``path`` reads like ``messages[3].content`` (``""`` for the root; keys that are not plain
    identifiers are quoted, ``args["[redacted:email]"]``). ``in_key`` says the values were in
    the object key at ``path`` rather than in its value.
    """

    kind: str
    path: str
    count: int
    action: Literal["redact", "hash"]
    in_key: bool = False

    def as_json(self) -> dict[str, Any]:
        """The finding as a JSON object."""
        return {
            "kind": self.kind,
            "path": self.path,
            "count": self.count,
            "action": self.action,
            "in_key": self.in_key,
        }


def placeholder(kind: str) -> str:
    """The text a redacted value is replaced with, e.g. ``[redacted:email]``."""
    return f"[redacted:{kind}]"


def hashed_placeholder(kind: str, value: str, salt: bytes) -> str:
    """The text a hashed value is replaced with: ``[email:`` + 12 hex of an HMAC-SHA256 + ``]``.

    The HMAC is keyed by ``salt`` over the kind and the value in a normal form (emails case
    folded; phone and card numbers as their digits, with a leading ``+`` kept; IBANs without
    spaces, upper case), so one value gives one placeholder per salt however it was written.
    """
    message = f"{kind}\x00{_normal_form(kind, value)}".encode()
    digest = hmac.new(salt, message, hashlib.sha256).hexdigest()
    return f"[{kind}:{digest[:12]}]"


def count_placeholders(text: str) -> dict[tuple[str, str], int]:
    """``(kind, action)`` -> how many placeholders of that kind ``text`` holds."""
    counts: dict[tuple[str, str], int] = {}
    for match in placeholder_pattern().finditer(text):
        key = (match["redacted"], "redact") if match["redacted"] else (match["hashed"], "hash")
        counts[key] = counts.get(key, 0) + 1
    return counts


def redact_text(
    text: str,
    policy: RedactionPolicy | None = None,
    *,
    salt: bytes | None = None,
    path: str = "",
) -> tuple[str, list[Finding]]:
    """``text`` with every detected value redacted, hashed or kept as ``policy`` says.

    Returns the new text and its findings at ``path`` (placeholders already in ``text`` count
    as findings too, which is what makes a second pass report the same). Raises ``UsageError``
    when the policy hashes a kind and no ``salt`` is given.
    """
    return Redactor(policy, salt=salt, cache_size=0).text(text, path=path)


def redact_json(
    value: Any,
    policy: RedactionPolicy | None = None,
    *,
    salt: bytes | None = None,
    path: str = "",
) -> tuple[Any, list[Finding]]:
    """A copy of the JSON ``value`` with every string redacted, and the findings by path.

    Every string is redacted wherever it is, nested lists and objects included, and so is every
    object key (a key that holds an email is as personal as a value that does); when two keys of
    one object redact to the same text, the later ones get `` #2``, `` #3``. A string under a key
    named in ``SECRET_FIELDS`` (``password``, ``api_key``, ``authorization``...) is a secret as a
    whole. Numbers, booleans and null are left as they are. Raises ``InvalidPayloadError`` for a
    value that is not JSON (tuples count as lists) and ``UsageError`` as ``redact_text`` does.
    """
    return Redactor(policy, salt=salt, cache_size=0).json(value, path=path)


class Redactor:
    """One policy and salt applied to many values, remembering the last strings it redacted.

    ``redact_text`` and ``redact_json`` make one per call. A recorder that sees the same
    messages again in every request of a conversation keeps one instead (a ledger shares one
    between the runs of each policy), so that each string is redacted once: up to
    ``cache_size`` distinct strings are remembered (those least recently used are forgotten
    first, in two generations of half the size each, so that forgetting costs O(1); ``0``
    remembers none). Safe to share between threads. Raises ``UsageError`` when the policy
    hashes a kind and no ``salt`` is given.
    """

    def __init__(
        self,
        policy: RedactionPolicy | None = None,
        *,
        salt: bytes | None = None,
        cache_size: int = 1024,
    ) -> None:
        self.policy = policy or RedactionPolicy()
        if self.policy.hashes and not salt:
            msg = "the redaction policy hashes some kinds of data, so it needs a salt"
            raise UsageError(msg)
        self.salt = salt
        self.cache_size = cache_size
        self._cache: dict[tuple[str, str | None], str] = {}  # the recent generation
        self._older: dict[tuple[str, str | None], str] = {}
        self._generation = max(1, cache_size // 2)
        self._fields: dict[str, Kind | None] = {}
        self._plain: set[str] = set()  # strings found clean outside secret fields
        self._keys: dict[str, Kind | None] = {}  # keys found clean, and the kind they make

    def text(self, text: str, *, path: str = "") -> tuple[str, list[Finding]]:
        """As ``redact_text`` with this redactor's policy and salt."""
        result = self.redact(text)
        return result, _findings(result, path, in_key=False)

    def json(self, value: Any, *, path: str = "") -> tuple[Any, list[Finding]]:
        """As ``redact_json`` with this redactor's policy and salt."""
        findings: list[Finding] = []
        return _walk(value, path, self, findings, None), findings

    def clean(self, value: Any) -> bool:  # noqa: PLR0911, PLR0912 - one flat walk, for speed
        """Whether ``json(value)`` would give ``value`` back unchanged and find nothing.

        A quick pass that builds no paths and no copy: True when no string or key of ``value``
        redacts to anything but itself and none holds a placeholder (a ``[`` alone, as in JSON
        or Markdown text, is no placeholder). False for anything else, a value that is not JSON
        included (`json` then names it). Keys and strings found plain are remembered (as many
        as the cache holds), so a value seen again costs a set lookup per string.
        """
        plain, keys, text_clean = self._plain, self._keys, self._text_clean
        stack: list[tuple[Any, Kind | None]] = [(value, None)]
        while stack:
            item, whole = stack.pop()
            kind = type(item)
            if kind is str:
                if not ((whole is None and item in plain) or text_clean(item, whole)):
                    return False
            elif kind is dict:
                for key, child in item.items():
                    if type(key) is not str:  # a str subclass may equal a remembered key
                        return False
                    field = keys.get(key, _UNKNOWN)
                    if field is _UNKNOWN:
                        if not self._key_clean(key):
                            return False
                        field = self._field(key)
                    inner = type(child)
                    if inner is str:  # checked here: most values are strings and numbers
                        if not ((field is None and child in plain) or text_clean(child, field)):
                            return False
                    elif not (child is None or inner is bool or inner is int or inner is float):
                        stack.append((child, field))
            elif kind is list or kind is tuple:
                for child in item:
                    inner = type(child)
                    if inner is str:
                        if not ((whole is None and child in plain) or text_clean(child, whole)):
                            return False
                    elif not (child is None or inner is bool or inner is int or inner is float):
                        stack.append((child, whole))
            elif not (item is None or kind is bool or kind is int or kind is float):
                return False
        return True

    def _text_clean(self, text: str, whole: Kind | None) -> bool:
        """Whether ``text`` holds no placeholder and redacts to itself (remembered if so)."""
        if "[" in text and placeholder_pattern().search(text):
            return False
        if self.redact(text, whole) != text:
            return False
        if whole is None and self.cache_size > 0:
            plain = self._plain
            if len(plain) >= self.cache_size:
                plain.clear()  # simple and thread-safe: the next values refill it
            plain.add(text)
        return True

    def _key_clean(self, key: str) -> bool:
        """Whether object key ``key`` holds no placeholder and redacts to itself (remembered)."""
        if "[" in key and placeholder_pattern().search(key):
            return False
        if self.redact(key) != key:
            return False
        keys = self._keys
        if len(keys) >= _FIELDS_KEPT:
            keys.clear()
        keys[key] = self._field(key)
        return True

    def _field(self, key: str) -> Kind | None:
        """The kind a whole value under ``key`` is (a secret field), remembered per key."""
        try:
            return self._fields[key]
        except KeyError:
            pass
        if len(self._fields) >= _FIELDS_KEPT:
            self._fields.clear()
        found = self._fields[key] = _secret_field(key)
        return found

    def redact(self, text: str, whole: Kind | None = None) -> str:
        """``text`` redacted; ``whole`` makes all of it one value of that kind (a secret field)."""
        key = (text, whole)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        result = self._older.get(key)
        if result is None:
            result = self._redact(text, whole)
        if self.cache_size > 0:
            cache = self._cache
            if len(cache) >= self._generation:
                # the recent generation becomes the older one, whose strings are forgotten:
                # O(1), and safe while other threads of the ledger read or add (each sees a
                # whole dict; a string added to the one being dropped is only redacted again)
                self._older, self._cache = cache, {}
                cache = self._cache
            cache[key] = result
        return result

    def _redact(self, text: str, whole: Kind | None) -> str:
        for _ in range(_MAX_PASSES):
            secret = whole is not None and bool(text.strip()) and text != _MARKER
            extra = [Span(0, len(text), whole)] if whole is not None and secret else []
            spans = detect(text, self.policy.phone_regions, extra=extra)
            changed = self._apply(text, spans)
            if changed == text:
                break
            text = changed
        return text

    def _apply(self, text: str, spans: Sequence[Span]) -> str:
        parts: list[str] = []
        cursor = 0
        for start, end, kind in spans:
            action = "keep" if kind == "placeholder" else self.policy.action(kind)
            if action == "keep":
                continue
            value = text[start:end]
            parts.append(text[cursor:start])
            if action == "hash" and self.salt:
                parts.append(hashed_placeholder(kind, value, self.salt))
            else:
                parts.append(placeholder(kind))
            cursor = end
        if not parts:
            return text
        parts.append(text[cursor:])
        return "".join(parts)


SHARED_CACHE = 8192
"""Strings a shared redactor remembers."""
_SHARED_MAX = 16
_shared: dict[tuple[str, bytes | None], Redactor] = {}
_shared_lock = threading.Lock()


def shared_redactor(policy: RedactionPolicy, salt: bytes | None = None) -> Redactor:
    """The process's redactor for ``policy`` and ``salt``, shared by every run that uses them.

    Redaction is a function of the text, the policy and the salt alone, so the runs of every
    ledger in the process (a replay's too) share one cache: a string (a key, a system prompt,
    an answer seen again) is checked once. Up to 16 policy and salt pairs are kept.
    """
    key = (policy.model_dump_json(), salt)
    with _shared_lock:
        found = _shared.get(key)
        if found is None:
            if len(_shared) >= _SHARED_MAX:
                del _shared[next(iter(_shared))]
            found = _shared[key] = Redactor(policy, salt=salt, cache_size=SHARED_CACHE)
        return found


def _walk(
    value: Any, path: str, redactor: Redactor, findings: list[Finding], field: Kind | None
) -> Any:
    if isinstance(value, str):
        result = redactor.redact(value, field)
        findings += _findings(result, path, in_key=False)
        return result
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [
            _walk(item, f"{path}[{index}]", redactor, findings, field)
            for index, item in enumerate(value)
        ]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidPayloadError(path, f"object key {type(key).__name__} is not a string")
            new_key = _unique(redactor.redact(key), out)
            child = _child(path, new_key)
            findings += _findings(new_key, child, in_key=True)
            out[new_key] = _walk(item, child, redactor, findings, _secret_field(key))
        return out
    raise InvalidPayloadError(path, f"{type(value).__name__} is not a JSON value")


def _unique(key: str, taken: Mapping[str, Any]) -> str:
    if key not in taken:
        return key
    number = 2
    while f"{key} #{number}" in taken:
        number += 1
    return f"{key} #{number}"


def _child(path: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _secret_field(key: str) -> Kind | None:
    return SECRET_FIELDS.get(key.lower().replace("-", "_"))


def _findings(text: str, path: str, *, in_key: bool) -> list[Finding]:
    if "[" not in text:
        return []
    counts = count_placeholders(text)
    return [
        Finding(kind, path, counts[kind, action], action, in_key)
        for kind in KINDS
        for action in ("redact", "hash")
        if (kind, action) in counts
    ]


def _normal_form(kind: str, value: str) -> str:
    if kind == "email":
        return value.casefold()
    if kind in ("phone", "card"):
        digits = "".join(char for char in value if char.isdigit())
        return f"+{digits}" if value.lstrip("(").startswith("+") else digits
    if kind == "iban":
        return value.replace(" ", "").upper()
    return value
