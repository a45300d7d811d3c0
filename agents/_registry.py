"""The agent registry: names -> orchestrations, and rebuilding one from a recorded RunStarted.

Owns ``AgentSpec`` (name, description, config class, factory, the role whose text is the
answer when the answer can stream), the read-only ``AGENTS`` mapping,
``build_agent`` (settings -> orchestration), ``resolve_prompts`` (which library text each role
uses) and ``rebuild_agent``, the inverse of what ``run_agent`` records: from a RunStarted payload
alone it recovers the orchestration, its full ``AgentConfig`` and checks that the prompt
library still holds every recorded prompt version with the same hash, so replay can re-run it.
Must not record events or touch a ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ValidationError

from agentledger.agents._config import AgentConfig
from agentledger.agents._types import Orchestration, RolePrompt
from agentledger.agents.coordinator import Coordinator, CoordinatorConfig
from agentledger.agents.errors import (
    AgentUsageError,
    PromptMismatchError,
    RebuildError,
    UnknownAgentError,
)
from agentledger.agents.pipeline import Pipeline, PipelineConfig
from agentledger.agents.prompts import DEFAULT_VERSION, PromptLibrary, default_library, prompt_hash
from agentledger.agents.reasoning import Reasoning, ReasoningConfig
from agentledger.agents.router import Router, RouterConfig
from agentledger.agents.tool_agent import ToolAgent, ToolAgentConfig
from agentledger.ledger.events import RunStarted

__all__ = [
    "AGENTS",
    "AgentSpec",
    "agent_spec",
    "build_agent",
    "normalize_config",
    "rebuild_agent",
    "resolve_prompts",
]


@dataclass(frozen=True)
class AgentSpec:
    """A registered orchestration: its name, what it is, its options class and its factory.

    ``answer_role`` is the role whose (streamed) text is the run's answer when the options'
    ``stream`` is on; None when the answer cannot stream (it is not a model's free text).
    """

    name: str
    description: str
    config_type: type[BaseModel]
    factory: Callable[[Any], Orchestration]
    answer_role: str | None = None

    @property
    def streams(self) -> bool:
        """Whether the orchestration can stream its answer (its options have ``stream``)."""
        return self.answer_role is not None and "stream" in self.config_type.model_fields

    def build(self, options: Mapping[str, Any]) -> Orchestration:
        """The orchestration configured by ``options`` (its config class, as JSON)."""
        return self.factory(self.config_type.model_validate(dict(options)))


def _spec(
    name: str,
    description: str,
    config_type: type[BaseModel],
    factory: Callable[[Any], Any],
    answer_role: str | None = None,
) -> AgentSpec:
    return AgentSpec(name, description, config_type, factory, answer_role)


AGENTS: Mapping[str, AgentSpec] = MappingProxyType(
    {
        "pipeline": _spec(
            "pipeline",
            "planner -> executor -> synthesizer",
            PipelineConfig,
            Pipeline,
            "synthesizer",
        ),
        "reasoning": _spec(
            "reasoning",
            "REASON / THINK / TOOL loop",
            ReasoningConfig,
            Reasoning,
            "synthesizer",
        ),
        "router": _spec(
            "router",
            "policy gate, budgeted router plan, grounded chat",
            RouterConfig,
            Router,
            "chat",
        ),
        "tools": _spec(
            "tools",
            "native tool calling, agent-as-tool, fork",
            ToolAgentConfig,
            ToolAgent,
            "agent",
        ),
        "coordinator": _spec(
            "coordinator",
            "DELEGATE / DONE coordinator over workers",
            CoordinatorConfig,
            Coordinator,
        ),
    }
)
"""Every orchestration ``run_agent`` knows, by name (read-only)."""


def agent_spec(name: str) -> AgentSpec:
    """The spec registered as ``name``; ``UnknownAgentError`` lists the known names."""
    try:
        return AGENTS[name]
    except KeyError:
        raise UnknownAgentError(name, AGENTS) from None


def normalize_config(agent: str, config: AgentConfig) -> AgentConfig:
    """``config`` with the orchestration's options validated and every default filled in."""
    spec = agent_spec(agent)
    try:
        options = spec.config_type.model_validate(dict(config.options))
    except ValidationError as error:
        raise AgentUsageError(f"invalid options for agent {agent!r}: {error}") from None
    return config.model_copy(update={"options": options.model_dump(mode="json")})


def build_agent(agent: str, config: AgentConfig) -> Orchestration:
    """The orchestration ``agent`` configured by ``config.options``."""
    return agent_spec(agent).build(config.options)


def resolve_prompts(
    orchestration: Orchestration, config: AgentConfig, library: PromptLibrary
) -> dict[str, RolePrompt]:
    """Role -> the prompt (name, version, text) it uses under ``config.prompt_versions``."""
    unknown = sorted(set(config.prompt_versions) - set(orchestration.roles()))
    if unknown:
        msg = f"prompt_versions names roles {orchestration.name!r} does not have: {unknown}"
        raise AgentUsageError(msg)
    prompts: dict[str, RolePrompt] = {}
    for role, name in orchestration.prompt_names().items():
        version = config.prompt_versions.get(role, DEFAULT_VERSION)
        try:
            prompts[role] = RolePrompt(name, version, library.text(name, version))
        except KeyError as error:
            raise AgentUsageError(f"role {role!r}: {error.args[0]}") from None
    return prompts


def rebuild_agent(
    started: RunStarted | Mapping[str, Any], *, prompts: PromptLibrary | None = None
) -> tuple[Orchestration, AgentConfig]:
    """Reconstruct a run's orchestration and full config from its RunStarted payload alone.

    Raises ``RebuildError`` for an unknown agent or unreadable settings, and
    ``PromptMismatchError`` when a recorded prompt version is missing from ``prompts`` (default:
    the built-in library) or its text no longer hashes to the recorded hash.
    """
    event = started if isinstance(started, RunStarted) else _started(started)
    if event.agent not in AGENTS:
        raise RebuildError(event.agent, f"no such agent; known: {', '.join(AGENTS)}")
    try:
        config = AgentConfig.from_settings(dict(event.config.settings))
        orchestration = build_agent(event.agent, config)
    except ValidationError as error:
        raise RebuildError(event.agent, f"invalid settings: {error}") from None
    library = prompts or default_library()
    for role, ref in event.config.prompts.items():
        found = (
            prompt_hash(library.text(ref.name, ref.version))
            if library.has(ref.name, ref.version)
            else None
        )
        if found != ref.hash:
            raise PromptMismatchError(
                agent=event.agent,
                role=role,
                name=ref.name,
                version=ref.version,
                recorded=ref.hash,
                found=found,
            )
    return orchestration, config


def _started(payload: Mapping[str, Any]) -> RunStarted:
    try:
        return RunStarted.model_validate(dict(payload))
    except ValidationError as error:
        raise RebuildError(
            str(payload.get("agent")), f"not a RunStarted payload: {error}"
        ) from None
