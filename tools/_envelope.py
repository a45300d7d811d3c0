"""The records the ledger keeps about tools: ``ToolSpec``, ``ToolResult``, ``ToolErrorInfo``.

Owns the metadata a tool declares (``ToolSpec``, ``RiskLevel``) and the envelope every call
returns (``ToolResult``), plus the three wire shapes of a tool's schema (neutral, OpenAI Chat
Completions, Anthropic Messages) as plain dicts. It must not run tools, import vendor SDKs or
import any other layer of the project: the ledger stores these values, it does not define them.
"""

from __future__ import annotations

import enum
import json
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentledger.tools._json import JSONValue

__all__ = ["RiskLevel", "ToolErrorInfo", "ToolResult", "ToolSpec"]


class RiskLevel(enum.StrEnum):
    """How much harm a tool call can do; ordered ``LOW < MEDIUM < HIGH``.

    Guardrails compare levels (``spec.risk <= RiskLevel.MEDIUM``); plain strings compare too
    (``RiskLevel.HIGH > "low"``). Ordering is by rank, not alphabetically.
    """

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """The level's position: 0 for low, 1 for medium, 2 for high."""
        return _RANKS[self.value]

    def __lt__(self, other: str) -> bool:
        return self.rank < RiskLevel(other).rank

    def __le__(self, other: str) -> bool:
        return self.rank <= RiskLevel(other).rank

    def __gt__(self, other: str) -> bool:
        return self.rank > RiskLevel(other).rank

    def __ge__(self, other: str) -> bool:
        return self.rank >= RiskLevel(other).rank


_RANKS = {"low": 0, "medium": 1, "high": 2}
_PARAMETERS_JSON = "_parameters_json"
"""Where a `ToolSpec` keeps its parameters' JSON text (see `ToolSpec.parameters_json`)."""


class ToolErrorInfo(BaseModel):
    """Why a tool call failed: a stable code, a human-readable message, and whether to retry.

    Codes the registry itself produces: ``unknown_tool``, ``invalid_arguments``, ``timeout``,
    ``invalid_result``. A tool's own ``ToolFailure`` supplies its code (``not_found``…); any
    other exception is recorded under its class name (``ValueError``…).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str = Field(min_length=1)
    message: str
    retryable: bool = False


class ToolResult(BaseModel):
    """The envelope every tool call returns, successful or not; the ledger records it as is.

    Exactly one of ``data`` (when ``ok``) and ``error`` (when not ``ok``) carries the outcome;
    ``data`` may also be ``None`` on success when the tool returned ``None``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ok: bool
    type: str
    data: JSONValue | None = None
    error: ToolErrorInfo | None = None
    latency_ms: float = Field(ge=0.0)
    served_from: str | None = None
    """Set when the tool did not run: ``RUN@POSITION`` of the recorded result this repeats."""

    @model_validator(mode="after")
    def _outcome_matches_ok(self) -> Self:
        if self.ok and self.error is not None:
            msg = "an ok result carries no error"
            raise ValueError(msg)
        if not self.ok and (self.error is None or self.data is not None):
            msg = "a failed result carries an error and no data"
            raise ValueError(msg)
        return self


class ToolSpec(BaseModel):
    """What a tool is: the metadata the ledger records next to every call (tool identity).

    ``parameters`` is the JSON Schema (draft 2020-12, as pydantic emits it) of the arguments
    object. ``effectful`` marks tools that act outside the run (send, write): replay must never
    re-execute them silently. ``result_type`` names what ``ToolResult.data`` holds.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    version: str
    risk: RiskLevel
    effectful: bool
    timeout_s: float = Field(gt=0.0)
    result_type: str
    parameters: dict[str, JSONValue]

    @property
    def parameters_json(self) -> str:
        """``parameters`` as JSON text (made once: every model call offers the schema again).

        Kept next to the fields under a private name, with the parameters object it was made
        from: no field of its own (iteration, ``model_dump`` and equality see the fields only),
        and a copy given other parameters (``model_copy(update=...)``) makes its own.
        """
        parameters = self.parameters
        kept: tuple[object, str] | None = self.__dict__.get(_PARAMETERS_JSON)
        if kept is None or kept[0] is not parameters:
            kept = (parameters, json.dumps(parameters))
            self.__dict__[_PARAMETERS_JSON] = kept  # frozen: the text is no field
        return kept[1]

    def neutral_schema(self) -> dict[str, JSONValue]:
        """Return the vendor-neutral shape ``{"name", "description", "parameters"}`` (a copy)."""
        parameters: dict[str, JSONValue] = json.loads(self.parameters_json)
        return {"name": self.name, "description": self.description, "parameters": parameters}

    def openai_schema(self) -> dict[str, JSONValue]:
        """Return the OpenAI Chat Completions shape ``{"type": "function", "function": {...}}``."""
        return {"type": "function", "function": self.neutral_schema()}

    def anthropic_schema(self) -> dict[str, JSONValue]:
        """Return the Anthropic Messages shape ``{"name", "description", "input_schema"}``."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": json.loads(self.parameters_json),
        }
