"""Streaming plumbing the adapters share: chunk timestamps, the handler, no retry mid-stream.

This module owns `ChunkRelay`, which stamps each piece of a streamed answer with its arrival time
(milliseconds since the call started), hands it to the caller's `ChunkHandler` and keeps the
`[at_ms, characters]` timings a `ModelResponse` reports, and `classify_streaming`, which makes a
failure final once a chunk has reached the caller: a retry would hand the caller the answer's
beginning twice, so streams are retried only before their first chunk.

It knows no vendor and must not record anything.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from agentledger.agents.models._retry import Failure
from agentledger.agents.models._types import ChunkHandler, ModelResponse, StreamChunk

__all__ = ["ChunkRelay", "classify_streaming"]

Clock = Callable[[], float]
"""A monotonic clock in seconds (`time.perf_counter`)."""


class ChunkRelay:
    """Stamps, forwards and times the chunks of one streamed call.

    `started` is the clock reading when the call (not the attempt) started, so a retry before
    the first chunk counts in the time to first token, as it does in the call's latency.
    """

    def __init__(
        self, on_chunk: ChunkHandler | None, started: float, *, clock: Clock = time.perf_counter
    ) -> None:
        self._on_chunk = on_chunk
        self._started = started
        self._clock = clock
        self.timings: list[tuple[float, int]] = []

    @property
    def delivered(self) -> bool:
        """Whether a chunk has reached the caller (from then on, a failure is not retried)."""
        return self._on_chunk is not None and bool(self.timings)

    def restart(self) -> None:
        """Forget the chunks of a failed attempt that no caller saw (a retry starts afresh)."""
        if not self.delivered:
            self.timings.clear()

    def emit(
        self,
        *,
        text: str = "",
        tool_index: int | None = None,
        tool_name: str = "",
        tool_arguments: str = "",
    ) -> None:
        """Hand one piece of the answer to the caller; a piece with no characters is skipped."""
        if not (text or tool_name or tool_arguments):
            return
        at_ms = max((self._clock() - self._started) * 1000.0, 0.0)
        chunk = StreamChunk(
            at_ms=at_ms,
            text=text,
            tool_index=tool_index,
            tool_name=tool_name,
            tool_arguments=tool_arguments,
        )
        self.timings.append((at_ms, chunk.chars))
        if self._on_chunk is not None:
            self._on_chunk(chunk)

    def stamp(self, response: ModelResponse) -> ModelResponse:
        """`response` with the stream's time to first token and chunk timings."""
        return response.model_copy(
            update={
                "ttft_ms": self.timings[0][0] if self.timings else None,
                "chunks": list(self.timings),
            }
        )


def classify_streaming(
    classify: Callable[[Exception], Failure | None], relay: ChunkRelay
) -> Callable[[Exception], Failure | None]:
    """`classify`, except that a failure after the first delivered chunk is never retried."""

    def classified(error: Exception) -> Failure | None:
        failure = classify(error)
        if failure is None or not relay.delivered:
            return failure
        count = len(relay.timings)
        return dataclasses.replace(
            failure,
            retryable=False,
            message=f"{failure.message} (the stream broke after {count} "
            f"chunk{'s' * (count != 1)} had reached the caller; not retried)",
        )

    return classified
