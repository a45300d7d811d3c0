"""agentledger.agents: orchestrations that record every step of a run in the ledger.

``run_agent(ledger, "pipeline", question, models=...)`` runs one of the registered
orchestrations (``pipeline``, ``reasoning``, ``router``, ``tools``, ``coordinator``) through a
``RunContext``, the single door for models, tools, ids and randomness, so every model call, tool
call, delta, guardrail trip and answer is an event, and ``rebuild_agent`` recovers a run's
orchestration and settings from its RunStarted for replay. Fakes for tests live in
``agentledger.agents.testing``; model ports in ``agentledger.agents.models``. Nothing here
imports a vendor SDK (the adapters load on first use) or keeps registries that code can mutate.
"""

from agentledger.agents._config import AgentConfig, StreamOption
from agentledger.agents._context import RunContext
from agentledger.agents._fork import fork_agent
from agentledger.agents._registry import (
    AGENTS,
    AgentSpec,
    agent_spec,
    build_agent,
    normalize_config,
    rebuild_agent,
    resolve_prompts,
)
from agentledger.agents._runner import (
    RecorderFactory,
    code_version,
    config_identity,
    execute_run,
    resolve_models,
    run_agent,
    start_run,
)
from agentledger.agents._types import (
    AgentInput,
    AgentResult,
    AgentToolHandler,
    ChunkInfo,
    ModelCallInfo,
    Orchestration,
    Outcome,
    RolePrompt,
    RunHooks,
    Status,
    StepHandle,
    ToolCall,
    ToolCallInfo,
    UsageTotals,
    model_id,
)
from agentledger.agents.coordinator import Coordinator, CoordinatorConfig, WorkerSpec
from agentledger.agents.errors import (
    AgentError,
    AgentRunError,
    AgentUsageError,
    ForkRefusedError,
    MissingModelError,
    PromptMismatchError,
    RebuildError,
    RunHalted,
    UnknownAgentError,
)
from agentledger.agents.guardrails import GuardrailLimits
from agentledger.agents.pipeline import Pipeline, PipelineConfig
from agentledger.agents.policy import PolicyConfig, PolicyDecision, PolicyGate
from agentledger.agents.prompts import PromptLibrary, default_library
from agentledger.agents.reasoning import Reasoning, ReasoningConfig
from agentledger.agents.router import Router, RouterConfig
from agentledger.agents.tool_agent import SubAgentSpec, ToolAgent, ToolAgentConfig

__all__ = [
    "AGENTS",
    "AgentConfig",
    "AgentError",
    "AgentInput",
    "AgentResult",
    "AgentRunError",
    "AgentSpec",
    "AgentToolHandler",
    "AgentUsageError",
    "ChunkInfo",
    "Coordinator",
    "CoordinatorConfig",
    "ForkRefusedError",
    "GuardrailLimits",
    "MissingModelError",
    "ModelCallInfo",
    "Orchestration",
    "Outcome",
    "Pipeline",
    "PipelineConfig",
    "PolicyConfig",
    "PolicyDecision",
    "PolicyGate",
    "PromptLibrary",
    "PromptMismatchError",
    "Reasoning",
    "ReasoningConfig",
    "RebuildError",
    "RecorderFactory",
    "RolePrompt",
    "Router",
    "RouterConfig",
    "RunContext",
    "RunHalted",
    "RunHooks",
    "Status",
    "StepHandle",
    "StreamOption",
    "SubAgentSpec",
    "ToolAgent",
    "ToolAgentConfig",
    "ToolCall",
    "ToolCallInfo",
    "UnknownAgentError",
    "UsageTotals",
    "WorkerSpec",
    "agent_spec",
    "build_agent",
    "code_version",
    "config_identity",
    "default_library",
    "execute_run",
    "fork_agent",
    "model_id",
    "normalize_config",
    "rebuild_agent",
    "resolve_models",
    "resolve_prompts",
    "run_agent",
    "start_run",
]
