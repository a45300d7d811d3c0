"""Errors of the agents layer (the model ports have their own tree in ``agents.models.errors``).

The tree::

    AgentError
    ├── AgentUsageError           the caller's code is wrong
    │   ├── UnknownAgentError     no orchestration registered under that name (name, known)
    │   ├── MissingModelError     no model given for a role the orchestration needs (agent, role)
    │   └── ForkRefusedError      the run cannot be forked (run_id, reason)
    ├── RebuildError              a recorded RunStarted cannot be turned back into an
    │   │                         orchestration: unknown agent or invalid settings (agent, reason)
    │   └── PromptMismatchError   a recorded prompt version is missing from the library or its text
    │                             hashes differently (role, name, version, recorded, found)
    ├── RunHalted                 a guardrail stopped a live run (guardrail, position); raised
    │                             inside the run and turned into a graceful, recorded fallback
    │                             answer by the runner, so it never escapes ``run_agent``
    └── AgentRunError             a run ended with RunFailed (run_id, status); the cause, such as
                                  a ``ScriptExhaustedError``, is chained as ``__cause__``

Failures the system expects (a tool error, bad JSON from a model, a model call that failed for
good, a tripped guardrail) are recorded events, not exceptions. This module owns the exception
classes and nothing else; it must not import the rest of the package.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AgentError",
    "AgentRunError",
    "AgentUsageError",
    "ForkRefusedError",
    "MissingModelError",
    "PromptMismatchError",
    "RebuildError",
    "RunHalted",
    "UnknownAgentError",
]


class AgentError(Exception):
    """Base of every error the agents layer raises."""


class AgentUsageError(AgentError):
    """The caller's code is wrong: fix the call, not the run."""


class UnknownAgentError(AgentUsageError, LookupError):
    """No orchestration is registered under ``name``."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(known)
        super().__init__(f"unknown agent {name!r}; known agents: {', '.join(self.known)}")


class MissingModelError(AgentUsageError):
    """``models`` has no entry for a role the orchestration calls (and no ``"default"``)."""

    def __init__(self, agent: str, role: str, given: Iterable[str]) -> None:
        self.agent = agent
        self.role = role
        self.given = tuple(given)
        listing = ", ".join(self.given) or "none"
        super().__init__(
            f"agent {agent!r} needs a model for role {role!r}; given roles: {listing} "
            "(pass models={'default': model} to use one model for every role)"
        )


class ForkRefusedError(AgentUsageError):
    """The run cannot be forked (its agent keeps no conversation, or none is finished)."""

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"cannot fork run {run_id}: {reason}")


class RebuildError(AgentError):
    """A recorded RunStarted cannot be turned back into a runnable orchestration."""

    def __init__(self, agent: str, reason: str) -> None:
        self.agent = agent
        self.reason = reason
        super().__init__(f"cannot rebuild agent {agent!r} from its RunStarted: {reason}")


class PromptMismatchError(RebuildError):
    """A recorded prompt is not in the library, or the library's text hashes differently."""

    def __init__(
        self, *, agent: str, role: str, name: str, version: str, recorded: str, found: str | None
    ) -> None:
        self.role = role
        self.name = name
        self.version = version
        self.recorded = recorded
        self.found = found
        why = (
            f"the library has no version {version!r} of prompt {name!r}"
            if found is None
            else f"prompt {name!r} {version} hashes to {found}, the run recorded {recorded}"
        )
        super().__init__(agent, f"role {role!r}: {why}")


# RunHalted is a signal a guardrail raises inside a run, not a failure of the caller or of the
# run: the runner catches it and records a graceful answer. The name says what happened.
class RunHalted(AgentError):  # noqa: N818
    """A guardrail stopped the run; the runner records a fallback answer and completes it."""

    def __init__(self, guardrail: str, message: str, *, position: int) -> None:
        self.guardrail = guardrail
        self.message = message
        self.position = position
        super().__init__(f"halted by {guardrail} at position {position}: {message}")


class AgentRunError(AgentError):
    """A run ended with RunFailed; ``__cause__`` is the exception that ended it."""

    def __init__(self, run_id: str, cause: BaseException) -> None:
        self.run_id = run_id
        self.status = "failed"
        super().__init__(f"run {run_id} failed: {type(cause).__name__}: {cause}")
