"""``AgentConfig``: every setting of a run, recorded whole as ``RunStarted.config.settings``.

Owns the settings schema: seed, guardrail limits, policy, prompt versions per role, sampling
parameters and the orchestration's own options (validated by its config class). ``settings()``
is the JSON the runner records and ``from_settings`` its inverse, which is how
``rebuild_agent`` recovers a run's configuration from its RunStarted alone. Also owns
``StreamOption``, the base of the config classes of orchestrations whose answer can stream: its
``stream`` option is recorded only when it is on, so the settings of a run that does not stream
are what they were before the option existed. Must not build models, tools or orchestrations.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from agentledger.agents.guardrails import GuardrailLimits
from agentledger.agents.policy import PolicyConfig

__all__ = ["AgentConfig", "StreamOption"]


class AgentConfig(BaseModel):
    """How a run is configured; everything here is recorded in RunStarted.

    ``prompt_versions`` maps a role (``planner``) to the prompt version it uses (``v2``); roles
    not listed use ``v1``. ``options`` holds the orchestration's own settings (its config class,
    e.g. ``PipelineConfig``, as JSON); the runner records them with every default filled in.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    limits: GuardrailLimits = Field(default_factory=GuardrailLimits)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    temperature: float | None = 0.0
    max_tokens: int = Field(default=1024, ge=1)
    options: dict[str, JsonValue] = Field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        """The JSON recorded as ``RunStarted.config.settings`` (``seed`` at the top level)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> AgentConfig:
        """Rebuild the config a run recorded."""
        return cls.model_validate(settings)

    def model_params(self) -> dict[str, Any]:
        """The sampling parameters every model call is made (and recorded) with.

        ``temperature=None`` leaves it to the model (some reasoning models refuse one).
        """
        params = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        return {key: value for key, value in params.items() if value is not None}


class StreamOption(BaseModel):
    """The ``stream`` option of an orchestration whose answer can stream.

    On, the calls that write the run's answer are streamed (``ModelRequest.stream``): their
    chunks reach the ``on_chunk`` hook as they arrive and ModelCalled records their timings.
    It is part of the recorded settings (so replay rebuilds it) only when on.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stream: bool = False

    @model_serializer(mode="wrap")
    def _stream_only_when_on(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and not self.stream:
            data.pop("stream", None)
        return data
