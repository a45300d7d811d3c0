"""What the SDK instrumentations share: requests as JSON, secrets scrubbed, the vendor port.

`openai_instrument` and `anthropic_instrument` wrap vendor clients for `RunRecorder.instrument`
(see `agentledger.ledger.CallRecord` for what a recorded call holds; `_instrument_calls` sends,
records and serves the calls). This module owns the values: `Passthrough` (an object with the
wrapped one's interface, refusing what it cannot record), `Scrubber` and `to_json` (request
arguments as JSON with every API key and bearer token replaced by ``[redacted]``),
`distribute` (a recorded answer's text cut back into chunks of the recorded sizes),
`first_token_ms`, and the `Vendor` strategy a vendor module supplies: its error classes, how a
chunk is assembled, how a recorded answer becomes real SDK objects again.

Must not import a vendor SDK, and must never let a secret into a record.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from pydantic import BaseModel

from agentledger.agents.models.errors import UnrecordedCallError
from agentledger.ledger.events import ErrorInfo

if TYPE_CHECKING:
    from agentledger.ledger import ModelCallPort

__all__ = [
    "REDACTED",
    "Assembler",
    "Passthrough",
    "Scrubber",
    "Vendor",
    "distribute",
    "first_token_ms",
    "scrubbed_json",
    "to_json",
]

REDACTED = "[redacted]"
"""What a secret is replaced by in a record."""

_SECRET_NAME = re.compile(
    r"(?i)authorization|api[-_]?key|secret|password|passwd|cookie|(?:^|[-_])token$|"
    r"auth[-_]?token|access[-_]?token|bearer"
)
"""Mapping keys whose string values are secrets whatever they hold (headers, extra_body...)."""

_SECRET_TEXT = re.compile(
    r"(?i)(?P<bearer>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}|\bsk-[A-Za-z0-9_-]{16,}"
)
"""Key-shaped text inside any string: a bearer credential, an ``sk-...`` key."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_DEPTH = 64
_MAX_REPR = 1000
_PLAIN_KEPT = 4096
"""How many strings found free of secrets a `Scrubber` remembers."""


def _redact_match(match: re.Match[str]) -> str:
    bearer = match.group("bearer")
    return f"{bearer}{REDACTED}" if bearer else REDACTED


class Scrubber:
    """Removes secrets from text: the client's own keys, and anything shaped like a key.

    Remembers the last strings it found nothing in (a conversation re-sends its history with
    every call), so a string seen again costs one set lookup.
    """

    def __init__(self, secrets: Iterable[object] = ()) -> None:
        found = {s for s in secrets if isinstance(s, str) and len(s) >= 6}
        self._secrets = tuple(sorted(found, key=len, reverse=True))
        self._plain: set[str] = set()

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by ``[redacted]``."""
        plain = self._plain
        if text in plain:
            return text
        original = text
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if len(text) >= 11 and _may_hold_key(text):
            text = _SECRET_TEXT.sub(_redact_match, text)
        if text == original:
            if len(plain) >= _PLAIN_KEPT:
                plain.clear()  # simple and thread-safe: the next calls refill it
            plain.add(text)
        return text


def _may_hold_key(text: str) -> bool:
    """False only when `_SECRET_TEXT` cannot match ``text`` (a quick test before the regex).

    Its literals are ``bearer`` and ``sk-`` in any case; outside ASCII, case-insensitive
    matching also takes characters whose lower case is not ASCII (the long s, the Kelvin
    sign), so such text always takes the regex.
    """
    if not text.isascii():
        return True
    lower = text.lower()
    return "sk-" in lower or "bearer" in lower


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    """Whether mapping key ``name`` names a credential (`_SECRET_NAME`), remembered per key."""
    return _SECRET_NAME.search(name) is not None


def to_json(  # noqa: PLR0911, PLR0912 - one case per kind of value reads best as one flat dispatch
    value: Any, scrub: Scrubber, omitted: Callable[[object], bool], depth: int = 0
) -> Any:
    """``value`` as a JSON-native value, secrets scrubbed and omitted arguments left out.

    Pydantic models become their JSON dump (``None`` fields left out, so an SDK object passed
    back in a conversation records the same live and in replay), bytes become base64 text, a
    class its qualified name, anything else its ``repr`` without memory addresses. A string
    under a key that names a credential (``Authorization``, ``api_key``, ``x-api-key``...) is
    replaced whole.
    """
    kind = type(value)
    if kind is str:
        return scrub.text(value)
    if value is None or kind is bool or kind is int:
        return value
    if isinstance(value, str):
        return scrub.text(str(value))
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > _MAX_DEPTH:
        return _describe(value, scrub)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if omitted(item):
                continue
            name = str(key)
            if isinstance(item, str) and _secret_name(name):
                out[name] = REDACTED
            else:
                out[name] = to_json(item, scrub, omitted, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [to_json(item, scrub, omitted, depth + 1) for item in value]
    if isinstance(value, BaseModel):
        dumped = value.model_dump(mode="json", exclude_none=True)
        return to_json(dumped, scrub, omitted, depth + 1)
    if isinstance(value, set | frozenset):
        items = [to_json(item, scrub, omitted, depth + 1) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return _describe(value, scrub)


def scrubbed_json(value: Any, scrub: Scrubber) -> Any:
    """``to_json(value, scrub, never)`` for a JSON value (an SDK response's JSON dump).

    A response rarely holds a secret, so it is first checked in one flat pass that builds
    nothing: when no string would be scrubbed and no string sits under a key that names a
    credential, the value itself is returned (equal to what `to_json` builds, without the
    copy). Anything else (a secret, a value that is not plain JSON, nesting past `to_json`'s
    depth) goes through `to_json`.
    """
    return value if _scrubs_nothing(value, scrub) else to_json(value, scrub, never)


def _scrubs_nothing(value: Any, scrub: Scrubber) -> bool:  # noqa: PLR0911, PLR0912 - one flat walk
    """Whether `to_json` would give ``value`` back unchanged (True only for plain JSON)."""
    text = scrub.text
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if text(item) != item:
                return False
            continue
        if kind is not dict and kind is not list:
            if not _plain_scalar(item, kind):
                return False
            continue
        if depth >= _MAX_DEPTH:
            return False
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str or (type(child) is str and _secret_name(key)):
                    return False
            item = item.values()
        for child in item:
            inner = type(child)
            if inner is str:
                if text(child) != child:
                    return False
            elif inner is dict or inner is list:
                stack.append((child, depth + 1))
            elif not _plain_scalar(child, inner):
                return False
    return True


def _plain_scalar(value: Any, kind: type) -> bool:
    """None, a bool, an int or a finite float: what `to_json` returns as it is."""
    return value is None or kind is bool or kind is int or (kind is float and math.isfinite(value))


def _describe(value: object, scrub: Scrubber) -> str:
    return scrub.text(_ADDRESS.sub("", repr(value))[:_MAX_REPR])


def never(value: object) -> bool:
    """No value is omitted (for JSON that is already a response)."""
    del value
    return False


def distribute(segments: Sequence[str], sizes: Iterable[float]) -> list[list[tuple[int, str]]]:
    """Cut the texts of ``segments`` (in order) into chunks of ``sizes`` characters.

    Each chunk is a list of ``(segment index, text)`` pieces (a chunk may end one segment and
    start the next). Sizes of zero make no chunk; text left after the last size makes one more
    chunk, so the chunks always join to the segments' whole text.
    """
    chunks: list[list[tuple[int, str]]] = []
    segment, offset = 0, 0
    for size in sizes:
        need = int(size)
        if need <= 0:
            continue
        pieces: list[tuple[int, str]] = []
        while need > 0 and segment < len(segments):
            piece = segments[segment][offset : offset + need]
            if piece:
                pieces.append((segment, piece))
                need -= len(piece)
                offset += len(piece)
            if offset >= len(segments[segment]):
                segment, offset = segment + 1, 0
        if pieces:
            chunks.append(pieces)
    rest: list[tuple[int, str]] = []
    while segment < len(segments):
        if segments[segment][offset:]:
            rest.append((segment, segments[segment][offset:]))
        segment, offset = segment + 1, 0
    if rest:
        chunks.append(rest)
    return chunks


def first_token_ms(chunks: Sequence[Sequence[float]] | None) -> float | None:
    """Time to first token: the first chunk carrying text, else the first chunk at all."""
    if not chunks:
        return None
    for at, chars in chunks:
        if chars > 0:
            return float(at)
    return float(chunks[0][0])


class Assembler(Protocol):
    """Folds a stream's chunks into the response a non-streamed call would have returned."""

    def add(self, chunk: Any) -> int:
        """Take one chunk; returns how many characters of text it carried."""
        ...

    def result(self) -> dict[str, Any]:
        """The assembled response as JSON (what was received, if the stream ended early)."""
        ...


class Vendor(Protocol):
    """What an SDK instrumentation tells `CallSite` about its vendor."""

    provider: str
    errors: tuple[type[Exception], ...]
    """The SDK's errors that make a call fail (recorded as failed calls, then re-raised)."""

    def omitted(self, value: object) -> bool:
        """Whether an argument's value is the SDK's "not given" marker."""
        ...

    def outcome(self, response: Mapping[str, Any]) -> tuple[dict[str, int], str | None]:
        """Usage (input, output and total tokens) and finish reason of a response's JSON."""
        ...

    def status(self, error: BaseException) -> int | None:
        """The HTTP status of an SDK error, if it has one."""
        ...

    def assembler(self) -> Assembler:
        """A fresh assembler for one stream."""
        ...

    def response(self, response: Mapping[str, Any]) -> Any:
        """A recorded response as the SDK's own response object."""
        ...

    def chunks(self, response: Mapping[str, Any], sizes: Sequence[float]) -> list[Any]:
        """A recorded (assembled) response as the SDK's stream chunks, cut to ``sizes``."""
        ...

    def exception(self, error: ErrorInfo, status: int | None, url: str) -> Exception:
        """A recorded error as the SDK exception that raised it (see the vendor module)."""
        ...


class Passthrough:
    """An object with the wrapped one's interface: what it does not define is the wrapped one's.

    Names in `refused` raise `UnrecordedCallError` (they would call the model unrecorded).
    """

    refused: ClassVar[Mapping[str, str]] = {}

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        wrapped = self.__dict__.get("_wrapped")
        if wrapped is None:
            raise AttributeError(name)
        instead = type(self).refused.get(name)
        if instead is not None:
            kind = type(wrapped)
            raise UnrecordedCallError(
                client=f"{kind.__module__}.{kind.__qualname__}", attribute=name, instead=instead
            )
        return getattr(wrapped, name)

    def __dir__(self) -> list[str]:
        return sorted((set(dir(type(self))) | set(dir(self._wrapped))) - set(type(self).refused))

    def __repr__(self) -> str:
        return f"<instrumented {self._wrapped!r}>"


class InstrumentedClient(Passthrough):
    """A vendor client wrapped into a run: copies and context managers stay instrumented.

    Subclasses take ``(client, port)``: ``with_options``/``copy`` wrap the client the SDK
    returns into the same run, and ``with``/``async with`` enter and leave the wrapped client.
    """

    agentledger_instrumented: ClassVar[bool] = True
    """The ledger's ``INSTRUMENTED_MARK``: instrumenting this object again is refused by name."""

    def __init__(self, client: Any, port: ModelCallPort) -> None:
        super().__init__(client)
        self._port = port

    def with_options(self, **options: Any) -> Self:
        """``client.with_options(...)``, instrumented into the same run."""
        return type(self)(self._wrapped.with_options(**options), self._port)

    def copy(self, **options: Any) -> Self:
        """``client.copy(...)``, instrumented into the same run."""
        return type(self)(self._wrapped.copy(**options), self._port)

    def __enter__(self) -> Self:
        self._wrapped.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._wrapped.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Self:
        await self._wrapped.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._wrapped.__aexit__(exc_type, exc, tb)
