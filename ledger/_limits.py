"""`Limits`: how large and how deep a payload or blob may be, per ledger.

Owns the two caps that every write path (`Ledger.record_run`, the `RunRecorder` methods,
`Ledger.append`, `Ledger.annotate`, `Ledger.put_blobs`) and the import path apply to each event
payload and each blob: its size in canonical (RFC 8785) bytes and its nesting depth. A refusal is
a `LimitExceededError` naming the limit, the value measured and how to raise the limit. Depth is
measured iteratively, so a value nested far past Python's recursion limit is refused cleanly.
Must not know storage or events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentledger.ledger._canonical import canonical_json, json_depth
from agentledger.ledger.errors import LimitExceededError, UsageError

__all__ = ["DEFAULT_MAX_DEPTH", "DEFAULT_MAX_PAYLOAD_BYTES", "MAX_DEPTH", "Limits"]

DEFAULT_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_DEPTH = 256
MAX_DEPTH = 256
"""The deepest `max_depth` a ledger takes. The event models' JSON serialiser (pydantic) refuses
free-form values nested deeper than this inside a payload, and later layers dump events with it,
so a deeper payload would be stored but could not be projected, replayed or diffed."""


@dataclass(frozen=True)
class Limits:
    """The caps on each payload and blob a ledger accepts (`Ledger.open(url, limits=...)`).

    `max_payload_bytes` bounds the canonical JSON of one event payload or one blob (16 MiB by
    default). `max_depth` bounds how many levels one nests, counting the values on the longest
    path from the top down to a leaf: ``"text"`` and ``[]`` are 1 level, ``{"a": [1]}`` is 3
    (256 by default, and at most `MAX_DEPTH`). Large values recorded through a `RunRecorder`
    become blobs, so the payload cap mostly bounds the fields that stay inline.
    """

    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH

    def __post_init__(self) -> None:
        for name in ("max_payload_bytes", "max_depth"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise UsageError(f"Limits({name}=...) must be a positive integer, got {value!r}")
        if self.max_depth > MAX_DEPTH:
            raise UsageError(
                f"Limits(max_depth={self.max_depth}) is beyond {MAX_DEPTH}, the deepest the "
                "event models can serialise"
            )

    def canonical(self, value: Any, subject: str) -> bytes:
        """The canonical bytes of a value stored on its own (a blob), checked against both caps.

        Raises `InvalidPayloadError` if the value is not JSON-native and `LimitExceededError`
        (naming `subject`) if it is too deep or too large.
        """
        try:
            data = canonical_json(value, max_depth=self.max_depth)
        except LimitExceededError as e:
            if e.limit != "max_depth":
                raise
            raise self.too_deep(subject, e.actual) from None
        self.check_size(len(data), subject)
        return data

    def check_payload(self, payload: Any, payload_jcs: bytes, subject: str) -> None:
        """Check an event payload, already in canonical bytes, against both caps."""
        self.check_size(len(payload_jcs), subject)
        # A value nests at most one level deeper than it holds containers: count the brackets
        # (strings may hold some too, which only makes this shortcut more cautious).
        if payload_jcs.count(b"[") + payload_jcs.count(b"{") < self.max_depth:
            return
        depth = json_depth(payload, stop=self.max_depth)
        if depth > self.max_depth:
            raise self.too_deep(subject, json_depth(payload))

    def check_size(self, size: int, subject: str) -> None:
        """Refuse `size` canonical bytes if over `max_payload_bytes`."""
        if size > self.max_payload_bytes:
            raise LimitExceededError(
                "max_payload_bytes",
                size,
                self.max_payload_bytes,
                subject=subject,
                hint="raise it with Ledger.open(url, limits=Limits(max_payload_bytes=...))",
            )

    def too_deep(self, subject: str, depth: int) -> LimitExceededError:
        """The error for a value of `subject` nested `depth` levels."""
        if self.max_depth < MAX_DEPTH:
            hint = (
                f"raise it (up to {MAX_DEPTH}) with Ledger.open(url, limits=Limits(max_depth=...))"
            )
        else:
            hint = (
                f"{MAX_DEPTH} is the deepest the ledger takes: flatten the value, or record "
                "its deep part as text"
            )
        return LimitExceededError("max_depth", depth, self.max_depth, subject=subject, hint=hint)
