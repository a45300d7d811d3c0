"""The retry loop every vendor adapter runs its calls through.

This module owns retrying: exponential backoff with jitter on rate limits (429), server errors
(5xx, Anthropic's 529 "overloaded" included), request timeouts (408) and connection errors, with
every attempt captured as an `Attempt` so the ledger can record it. Adapters build their SDK
clients with `max_retries=0`, so every attempt is made here and none is hidden.

It knows no vendor: an adapter passes a `classify` function that turns its SDK's exceptions into a
neutral `Failure`. `sleep` and `jitter` are injectable so tests run instantly and deterministically.
It owns the one use of `random` in the package (the default jitter), which only spaces HTTP
attempts apart; the backoff it produces is recorded, and nothing a run decides depends on it.
"""

from __future__ import annotations

import math
import random  # noqa: TID251 (default retry jitter only; the backoff it gives is recorded)
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from agentledger.agents.models._types import Attempt
from agentledger.agents.models.errors import ModelCallError

T = TypeVar("T")

Sleep = Callable[[float], None]
Jitter = Callable[[], float]

_MAX_ERROR_MESSAGE = 500


def default_jitter() -> float:
    """Return a uniform float in [0, 1) that spreads the retries of many clients apart."""
    return random.random()  # noqa: S311 (spacing retries is not a security use)


def is_retryable_status(status_code: int) -> bool:
    """Whether an HTTP status is worth retrying: 408, 429 and every 5xx (529 included)."""
    return status_code in (408, 429) or status_code >= 500


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Return the delay a server asked for in `retry-after-ms` or `retry-after`, in seconds."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


@dataclass(frozen=True)
class Failure:
    """A vendor error in neutral terms, as an adapter's `classify` reports it."""

    error_type: str
    message: str
    retryable: bool
    status_code: int | None = None
    retry_after_s: float | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts to make and how long to wait between them.

    The wait after attempt n is `min(max_backoff_s, initial_backoff_s * multiplier**(n-1))`
    scaled by `0.5 + jitter` (so a jitter of 0.5 gives the plain exponential value). A server's
    `retry-after` wins when it asks for longer, up to `max_retry_after_s`.
    """

    max_attempts: int = 4
    initial_backoff_s: float = 0.5
    multiplier: float = 2.0
    max_backoff_s: float = 30.0
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            msg = f"max_attempts must be at least 1, got {self.max_attempts}"
            raise ValueError(msg)

    def backoff(self, attempt_number: int, jitter: float, retry_after_s: float | None) -> float:
        """Seconds to wait after failed attempt `attempt_number` (1-based)."""
        exponential = min(
            self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (attempt_number - 1)
        )
        wait = exponential * (0.5 + min(max(jitter, 0.0), 1.0))
        if retry_after_s is not None:
            wait = max(wait, min(retry_after_s, self.max_retry_after_s))
        return wait


def call_with_retries(
    call: Callable[[], T],
    *,
    classify: Callable[[Exception], Failure | None],
    provider: str,
    model: str,
    policy: RetryPolicy,
    sleep: Sleep = time.sleep,
    jitter: Jitter = default_jitter,
) -> tuple[T, list[Attempt]]:
    """Run `call` until it succeeds, a failure is not retryable, or the attempts run out.

    Returns the result and every attempt made. Exceptions `classify` does not recognise (it
    returns None) are bugs, not vendor failures, and propagate untouched. A recognised failure
    that ends the loop raises `ModelCallError` from the vendor exception.
    """
    attempts: list[Attempt] = []
    for number in range(1, policy.max_attempts + 1):
        started = time.perf_counter()
        try:
            result = call()
        except Exception as error:
            failure = classify(error)
            if failure is None:
                raise
            latency_ms = (time.perf_counter() - started) * 1000.0
            last = number == policy.max_attempts
            backoff = (
                0.0
                if last or not failure.retryable
                else policy.backoff(number, jitter(), failure.retry_after_s)
            )
            attempts.append(
                Attempt(
                    number=number,
                    status_code=failure.status_code,
                    error_type=failure.error_type,
                    error_message=failure.message[:_MAX_ERROR_MESSAGE],
                    latency_ms=latency_ms,
                    backoff_s=backoff,
                )
            )
            if last or not failure.retryable:
                raise ModelCallError(
                    provider=provider,
                    model=model,
                    status_code=failure.status_code,
                    attempts=attempts,
                    retryable=failure.retryable,
                    error_type=failure.error_type,
                    message=failure.message[:_MAX_ERROR_MESSAGE],
                ) from error
            sleep(backoff)
        else:
            latency_ms = (time.perf_counter() - started) * 1000.0
            attempts.append(Attempt(number=number, latency_ms=latency_ms))
            return result, attempts
    msg = "unreachable: the loop returns or raises on its last attempt"  # pragma: no cover
    raise AssertionError(msg)  # pragma: no cover
