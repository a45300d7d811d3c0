"""Instrumented SDK clients: the contract between the recorder and the model adapters.

`RunRecorder.instrument(client)` looks the client's type up in a registry of `Instrumentation`s
and returns what the matching one's `wrap` builds: an object with the client's interface whose
calls are recorded as ModelCalled events through a `ModelCallPort`. The instrumentations live
with the vendor adapters (agents/models) and reach this registry through the Python entry-point
group `agentledger.instrumentations` declared in pyproject.toml: the ledger layer never imports
an SDK or an adapter, it only loads what the group names (a plugin inversion). Tests and users
may also `register_instrumentation` one by hand.

The port is live while recording (each finished call is recorded; the SDK is called for real)
and serving in replay (`serve_call` hands back the recorded answer of a matching request, and
the wrapper builds real SDK response objects from it, making no network call). What a wrapper
does for each call::

    served = port.serve_call(request) if port.replaying else None
    if served is None:     # recording, or a rerun/resume/fork past what the record answers
        ...call the SDK (pass a stream through chunk by chunk)...
    else:                  # replay: build the SDK's response (or raise its error) from served
        ...
    port.record_call(finished)          # async clients: await port.arecord_call(finished)

``finished`` is the request with its response (or error), usage, latency and, for streams,
chunk timings. In replay ``record_call`` is what the replay compares, and it may wait (a thread
blocks, a task awaits in ``arecord_call``) until every event recorded before that call in the
original run has been recorded again: that is how concurrent calls replay in their recorded
order. Must not import vendor SDKs or agents.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentledger.ledger.errors import UsageError
from agentledger.ledger.events import Attempt, ErrorInfo

__all__ = [
    "ENTRY_POINT_GROUP",
    "INSTRUMENTED_MARK",
    "CallRecord",
    "Instrumentation",
    "ModelCallPort",
    "ServedCall",
    "UninstrumentableClientError",
    "instrumentation_for",
    "instrumentations",
    "register_instrumentation",
]

ENTRY_POINT_GROUP = "agentledger.instrumentations"
"""The entry-point group through which adapters provide instrumentations (each entry point
names a zero-argument callable returning an `Instrumentation`)."""


INSTRUMENTED_MARK = "agentledger_instrumented"
"""A class attribute set (True) on the types of instrumented clients: instrumenting one again
is refused by name, not as an unknown type."""


class UninstrumentableClientError(UsageError):
    """No installed instrumentation handles this client's type."""

    def __init__(self, client: object, known: list[str]) -> None:
        self.client_type = f"{type(client).__module__}.{type(client).__qualname__}"
        if getattr(type(client), INSTRUMENTED_MARK, False):
            super().__init__(
                f"cannot instrument {client!r}: it is already instrumented (what "
                "run.instrument returned); instrument the SDK client itself, once per run"
            )
            return
        names = ", ".join(known) or "none"
        super().__init__(
            f"cannot instrument a {self.client_type}: no instrumentation handles it "
            f"(installed: {names}; the entry-point group {ENTRY_POINT_GROUP!r} provides them)"
        )


@dataclass(frozen=True)
class CallRecord:
    """One finished model call as an instrumentation reports it (all JSON-native).

    ``messages`` is the conversation as sent; ``params`` every other request argument (the
    model excepted; ``stream`` included; an Anthropic ``system`` prompt is a param); ``tools``
    the tool definitions offered. ``response`` is the SDK's response object as JSON
    (``model_dump(mode="json")`` of the assembled response for a stream), ``None`` when the call
    failed. ``ttft_ms`` and ``chunks`` (per chunk: [ms since the request was sent, characters of
    text it carried]) are set for streams only.
    """

    provider: str
    model: str
    messages: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    response: dict[str, Any] | None = None
    finish_reason: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    chunks: list[list[float]] | None = None
    attempts: list[Attempt] = field(default_factory=list)
    error: ErrorInfo | None = None


@dataclass(frozen=True)
class ServedCall:
    """What replay serves for one call: the recorded response (or error) and stream timings.

    ``attempts`` are the recorded attempts: a replayed error takes its HTTP status from them.
    """

    response: dict[str, Any] | None
    error: ErrorInfo | None = None
    chunks: list[list[float]] | None = None
    position: int | None = None
    attempts: list[Attempt] = field(default_factory=list)


@runtime_checkable
class ModelCallPort(Protocol):
    """How an instrumented client records calls (live) or is answered from the record (replay).

    Thread- and task-safe: concurrent calls may report in any order; each call's ModelCalled is
    appended when it completes, in completion order.
    """

    @property
    def replaying(self) -> bool:
        """True when each call must be offered to `serve_call` before calling the model."""
        ...

    def record_call(self, call: CallRecord) -> int:
        """Record one finished call as ModelCalled; returns its position."""
        ...

    async def arecord_call(self, call: CallRecord) -> int:
        """`record_call` for async clients: never blocks the event loop on database I/O."""
        ...

    def serve_call(self, call: CallRecord) -> ServedCall | None:
        """In replay: the recorded answer to the request in ``call`` (its response unset).

        Hands each call the first unserved recorded call whose request matches it (provider,
        model, params, messages and tools: `call_fingerprint`). When none does, a replay raises
        its divergence error (at the position of the recorded call the request most resembles,
        naming what changed); a rerun, resume or fork answers ``None``: call the model live,
        then record the call as usual.
        """
        ...


class Instrumentation(Protocol):
    """Wraps one family of SDK clients (an adapter provides it through the entry-point group)."""

    name: str

    def handles(self, client: object) -> bool:
        """Whether ``client`` is of a type this instrumentation wraps."""
        ...

    def wrap(self, client: object, port: ModelCallPort) -> Any:
        """An object with ``client``'s interface whose model calls go through ``port``."""
        ...


_lock = threading.Lock()
_registered: list[Instrumentation] = []
_loaded: list[Instrumentation] | None = None


def register_instrumentation(instrumentation: Instrumentation) -> None:
    """Add an instrumentation by hand (tried before the installed ones)."""
    with _lock:
        _registered.insert(0, instrumentation)


def instrumentations() -> list[Instrumentation]:
    """Every available instrumentation: those registered by hand, then the installed ones."""
    global _loaded  # noqa: PLW0603 - entry points are loaded once per process
    with _lock:
        if _loaded is None:
            from importlib.metadata import entry_points

            loaded: list[Instrumentation] = []
            for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
                factory: Callable[[], Instrumentation] = point.load()
                loaded.append(factory())
            _loaded = loaded
        return [*_registered, *_loaded]


def instrumentation_for(client: object) -> Instrumentation:
    """The instrumentation that handles ``client``; `UninstrumentableClientError` if none."""
    found = instrumentations()
    for instrumentation in found:
        if instrumentation.handles(client):
            return instrumentation
    raise UninstrumentableClientError(client, [i.name for i in found])
