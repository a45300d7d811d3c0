"""In-test model-call ports for the SDK instrumentations: one that keeps, one that serves.

`KeptCalls` is a live port that keeps every `CallRecord` in memory (no ledger); `ServedCalls`
is a replaying port that serves recorded calls from a list, each to the first unserved one
whose request matches, and keeps what the replayed calls record, so a test can compare them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from agentledger.ledger import CallRecord, ServedCall

TIMING = ("latency_ms", "ttft_ms", "chunks")


class NoMatchingCallError(AssertionError):
    """A replayed request matches no unserved recorded call."""


class KeptCalls:
    """A live port: every finished call is kept, in completion order."""

    def __init__(self) -> None:
        self.calls: list[CallRecord] = []

    @property
    def replaying(self) -> bool:
        """Never: calls go to the model."""
        return False

    def record_call(self, call: CallRecord) -> int:
        """Keep the call; its position is its number."""
        self.calls.append(call)
        return len(self.calls)

    async def arecord_call(self, call: CallRecord) -> int:
        """Keep the call (async clients)."""
        return self.record_call(call)

    def serve_call(self, call: CallRecord) -> ServedCall:
        """A live port serves nothing."""
        raise AssertionError(f"a live port was asked to serve {call.model}")


def request_of(call: CallRecord) -> tuple[Any, ...]:
    """What identifies a call's request."""
    return (call.provider, call.model, call.messages, call.params, call.tools)


class ServedCalls(KeptCalls):
    """A replaying port serving ``recorded`` calls, and keeping what replay records."""

    def __init__(self, recorded: Sequence[CallRecord]) -> None:
        super().__init__()
        self._unserved = list(enumerate(recorded))

    @property
    def replaying(self) -> bool:
        """Always: calls are served from the record."""
        return True

    def serve_call(self, call: CallRecord) -> ServedCall:
        """The first unserved recorded call with the same request."""
        for index, (position, recorded) in enumerate(self._unserved):
            if request_of(recorded) == request_of(call):
                del self._unserved[index]
                return ServedCall(
                    response=recorded.response,
                    error=recorded.error,
                    chunks=recorded.chunks,
                    position=position,
                    attempts=list(recorded.attempts),
                )
        raise NoMatchingCallError(f"no recorded call matches the request to {call.model}")


def without_timing(call: CallRecord) -> dict[str, Any]:
    """A call record as replay compares it: timings and attempt latencies left out."""
    fields = dataclasses.asdict(call)
    for name in TIMING:
        fields.pop(name)
    fields["attempts"] = [
        {k: v for k, v in attempt.model_dump().items() if k not in ("latency_ms", "backoff_s")}
        for attempt in call.attempts
    ]
    fields["error"] = call.error.model_dump() if call.error else None
    return fields
