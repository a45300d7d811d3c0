"""Errors of replay, re-evaluation, resume and fork.

Owns the exception tree callers catch: ``ReplayError`` is the base; ``ReplayDivergenceError``
carries the ``Divergence`` (position, expected and actual event, structured diff);
``EffectRefusedError`` is why a rerun, resume or fork stopped before re-executing an effectful
tool; ``NoLiveModelError`` is why one stopped at a changed request with no model to ask. Must
not import agents or the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentledger.replay._compare import Divergence

__all__ = [
    "ContentErasedError",
    "EffectRefusedError",
    "NoLiveModelError",
    "NotResumableError",
    "ReplayDivergenceError",
    "ReplayError",
    "ReplayUsageError",
]


class ReplayError(Exception):
    """Base of every replay error."""


class ReplayUsageError(ReplayError, ValueError):
    """A caller mistake: a bad override, a position outside the run, an unknown role."""


class ContentErasedError(ReplayError):
    """A run whose data subject was erased cannot be replayed: its content is gone.

    `positions` are the events that refer to erased content (what replay cannot compare).
    """

    def __init__(self, run_id: str, positions: list[int]) -> None:
        self.run_id = run_id
        self.positions = positions
        shown = ", ".join(str(p) for p in positions[:20]) + (" ..." if len(positions) > 20 else "")
        super().__init__(
            f"run {run_id}: cannot compare positions {shown} (content erased); "
            "the rest of the run still verifies (agentledger verify)"
        )


class ReplayDivergenceError(ReplayError):
    """Re-executing a run produced an event that differs from the recorded one."""

    def __init__(self, run_id: str, divergence: Divergence) -> None:
        self.run_id = run_id
        self.divergence = divergence
        super().__init__(
            f"run {run_id} diverged at position {divergence.position}: {divergence.summary()}"
        )


class EffectRefusedError(ReplayError):
    """An effectful tool would have run again; the caller did not allow effects."""

    def __init__(self, tool: str, arguments: object, reason: str) -> None:
        self.tool = tool
        self.arguments = arguments
        super().__init__(
            f"effectful tool {tool!r} would be executed again ({reason}); nothing was sent. "
            "Pass allow_effects=True (CLI: --allow-effects) to run it."
        )


class NoLiveModelError(ReplayError):
    """A model request differs from every recorded one and no live model was configured."""

    def __init__(self, role: str, recorded: str) -> None:
        self.role = role
        super().__init__(
            f"role {role!r} made a request the record does not hold and no live model is "
            f"configured for it (recorded model: {recorded}); pass models=... "
            "(CLI: --model PROVIDER:NAME)"
        )


class NotResumableError(ReplayError):
    """The run cannot be resumed (it already ended, or it was not recorded by an agent)."""

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} cannot be resumed: {reason}")
