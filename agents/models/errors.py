"""Errors raised by model ports and their adapters.

This module owns the exception tree of `agentledger.agents.models`. Vendor SDK errors are
translated into these at the adapter (`raise ModelCallError(...) from e`), so callers never catch
an `openai` or `anthropic` class. It must not import any vendor SDK.

    ModelError                      base of everything raised here
    ├── ModelCallError              the vendor call failed: retries exhausted, or not retryable
    ├── MissingAPIKeyError          no api_key argument and the environment variable is unset
    ├── ScriptExhaustedError        a ScriptedModel was asked more often than it has answers
    ├── ScriptFormatError           a script file is not a list of answers  (also ValueError)
    ├── UnknownModelSpecError       model_from_spec could not parse its spec  (also ValueError)
    └── UnrecordedCallError         an instrumented SDK client was asked for a call it cannot
                                    record (``with_raw_response``, ``parse``, ...)

Expected model failures that a run should record (a tool call with bad JSON arguments, a
`length` finish) are not errors: they come back inside the `ModelResponse`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentledger.agents.models._types import Attempt


class ModelError(Exception):
    """Base of every error raised by the model ports."""


class ModelCallError(ModelError):
    """A model call failed for good: the retries ran out, or the error is not worth retrying.

    `attempts` holds every attempt, the last one included; `status_code` and `retryable` describe
    the last failure.
    """

    def __init__(
        self,
        *,
        provider: str,
        model: str,
        status_code: int | None,
        attempts: Sequence[Attempt],
        retryable: bool,
        error_type: str | None = None,
        message: str | None = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.status_code = status_code
        self.attempts = list(attempts)
        self.retryable = retryable
        self.error_type = error_type
        status = f"HTTP {status_code}" if status_code is not None else "no HTTP status"
        why = "retries exhausted" if retryable else "not retryable"
        count = len(self.attempts)
        detail = f" - {error_type}: {message}" if error_type or message else ""
        super().__init__(
            f"{provider}:{model} failed after {count} attempt{'s' * (count != 1)} "
            f"({status}, {why}){detail}"
        )


class MissingAPIKeyError(ModelError):
    """No API key was passed and the environment variable that supplies one is unset."""

    def __init__(self, *, provider: str, env_var: str) -> None:
        self.provider = provider
        self.env_var = env_var
        super().__init__(f"{provider} needs an API key: pass api_key=... or set {env_var}")


class ScriptExhaustedError(ModelError):
    """A ScriptedModel received a request after its last answer; it never answers with nothing."""

    def __init__(self, *, name: str, requests_seen: int, script_length: int) -> None:
        self.name = name
        self.requests_seen = requests_seen
        self.script_length = script_length
        super().__init__(
            f"{name} ran out of answers: its script has {script_length} and this was "
            f"request {requests_seen}"
        )


class ScriptFormatError(ModelError, ValueError):
    """A script file could not be read as a list of scripted answers."""

    def __init__(self, *, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"bad model script {path}: {reason}")


class UnknownModelSpecError(ModelError, ValueError):
    """A model spec string is not one of the accepted forms."""

    ACCEPTED = ("openai:MODEL", "anthropic:MODEL", "scripted:FILE")

    def __init__(self, spec: str) -> None:
        self.spec = spec
        super().__init__(
            f"unknown model spec {spec!r}; use one of: {', '.join(self.ACCEPTED)} "
            "(for example 'openai:gpt-4o-mini' or 'scripted:answers.jsonl')"
        )


class UnrecordedCallError(ModelError):
    """An instrumented SDK client (`RunRecorder.instrument`) refuses a call it cannot record.

    Raised when the attribute is looked up (``client.with_raw_response``, ``client.chat.
    completions.parse``...), so a call that would bypass the ledger, and make a network call in
    replay, never runs silently. `client` names the SDK type, `attribute` what was asked for.
    """

    def __init__(self, *, client: str, attribute: str, instead: str) -> None:
        self.client = client
        self.attribute = attribute
        super().__init__(
            f"an instrumented {client} does not record {attribute!r}, so it refuses it "
            f"rather than call the model unrecorded; {instead}"
        )
