"""Running an agent: ``run_agent`` (a new recorded run) and ``execute_run`` (the shared path).

Owns the life of a run. ``run_agent`` applies the policy gate to the raw question FIRST (so
RunStarted holds only redacted text), records RunStarted with the full configuration identity
(models by role, prompt refs, tool versions, code version, settings), builds the ``RunContext``
and calls ``execute_run``: PolicyDecided, then the orchestration (or the refusal), the outcome
and RunCompleted. Replay calls ``execute_run`` itself with a context whose ports answer from the
record, after ``rebuild_agent``. Orchestrations never see the Ledger; only this module (and
``_fork``) opens runs on it. Must not read clocks or randomness.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, Protocol, cast

from agentledger.agents._config import AgentConfig
from agentledger.agents._context import RunContext
from agentledger.agents._registry import (
    agent_spec,
    build_agent,
    normalize_config,
    resolve_prompts,
)
from agentledger.agents._types import (
    AgentInput,
    AgentResult,
    Orchestration,
    Outcome,
    RolePrompt,
    RunHooks,
    model_id,
)
from agentledger.agents.errors import AgentRunError, MissingModelError, RunHalted
from agentledger.agents.models import ChatModel
from agentledger.agents.policy import PolicyGate
from agentledger.agents.prompts import PromptLibrary, default_library, prompt_hash
from agentledger.ledger import Ledger, RunRecorder
from agentledger.ledger.events import ConfigIdentity, ModelConfig, PromptRef
from agentledger.tools import ToolRegistry, builtin_registry

__all__ = [
    "RecorderFactory",
    "code_version",
    "config_identity",
    "execute_run",
    "resolve_models",
    "run_agent",
    "start_run",
]


class RecorderFactory(Protocol):
    """Opens the recorder of a new run; ``Ledger.record_run`` is the default.

    Replay passes its own factory to compare what a run records with a recorded run.
    """

    def __call__(
        self,
        agent: str,
        input: Any = None,  # noqa: A002 - the name Ledger.record_run uses
        *,
        config: ConfigIdentity | None = None,
        tags: Sequence[str] = (),
        parent_run_id: str | None = None,
        parent_position: int | None = None,
        relation: str | None = None,
    ) -> RunRecorder:
        """Record RunStarted and return the run's recorder."""
        ...


@functools.cache
def code_version() -> str:
    """The installed agentledger version (recorded as the code version of every run)."""
    try:
        return metadata.version("agentledger")
    except metadata.PackageNotFoundError:
        return "unknown"


def resolve_models(
    agent: str, roles: Sequence[str], models: Mapping[str, ChatModel]
) -> dict[str, ChatModel]:
    """The model of each role: ``models[role]``, else ``models["default"]``."""
    resolved: dict[str, ChatModel] = {}
    for role in roles:
        model = models.get(role, models.get("default"))
        if model is None:
            raise MissingModelError(agent, role, models)
        resolved[role] = model
    return resolved


def config_identity(
    config: AgentConfig,
    models: Mapping[str, ChatModel],
    prompts: Mapping[str, RolePrompt],
    tools: ToolRegistry,
) -> ConfigIdentity:
    """Everything that identifies how a run is configured, as RunStarted records it."""
    params = config.model_params()
    return ConfigIdentity(
        models={
            role: ModelConfig(provider=m.provider, model=model_id(m), params=params)
            for role, m in models.items()
        },
        prompts={
            role: PromptRef(
                name=p.name,
                version=p.version,
                hash=prompt_hash(p.text),
                text_ref=prompt_hash(p.text),
            )
            for role, p in prompts.items()
        },
        tools={spec.name: spec.version for spec in tools.specs()},
        code_version=code_version(),
        settings=config.settings(),
    )


def execute_run(
    ctx: RunContext, orchestration: Orchestration, run_input: AgentInput
) -> AgentResult:
    """Run an orchestration in an open run: policy, orchestration, outcome, RunCompleted.

    This is the code path live runs and replays share. The policy gate is re-applied to the
    (already redacted) recorded question: it is idempotent, so PolicyDecided is reproduced.
    """
    decision = ctx.policy.check(run_input.question)
    ctx.record_policy(decision)
    run_input = run_input.model_copy(update={"question": decision.text})
    if decision.blocked:
        outcome = Outcome("blocked", ctx.config.policy.refusal, caused_by=ctx.position)
    else:
        try:
            outcome = orchestration.run(ctx, run_input)
        except RunHalted as halt:
            outcome = orchestration.fallback(ctx, halt)
    ctx.conclude(outcome)
    result = AgentResult(
        run_id=ctx.run_id,
        agent=ctx.agent,
        answer=outcome.answer,
        status=outcome.status,
        world_state=ctx.world,
        evidence_ids=outcome.evidence_ids,
        usage=ctx.usage,
    )
    if ctx.hooks.on_finish is not None:
        ctx.hooks.on_finish(result)
    return result


def start_run(
    factory: RecorderFactory,
    agent: str,
    orchestration: Orchestration,
    config: AgentConfig,
    run_input: AgentInput,
    *,
    models: Mapping[str, ChatModel],
    tools: ToolRegistry,
    library: PromptLibrary,
    tags: Sequence[str] = (),
    hooks: RunHooks | None = None,
    parent_run_id: str | None = None,
    parent_position: int | None = None,
    relation: str | None = None,
) -> AgentResult:
    """Record RunStarted for an already redacted input and execute the run."""
    role_models = resolve_models(agent, orchestration.roles(), models)
    prompts = resolve_prompts(orchestration, config, library)
    identity = config_identity(config, role_models, prompts, tools)
    recorder = factory(
        agent,
        input=run_input.recorded(),
        config=identity,
        tags=list(tags),
        parent_run_id=parent_run_id,
        parent_position=parent_position,
        relation=relation,
    )
    try:
        with recorder:
            ctx = RunContext(
                models=role_models,
                tools=tools,
                recorder=recorder,
                config=config,
                prompts=prompts,
                run_input=run_input,
                agent=agent,
                hooks=hooks,
            )
            return execute_run(ctx, orchestration, run_input)
    except Exception as error:
        raise AgentRunError(recorder.run_id, error) from error


def run_agent(
    ledger: Ledger,
    agent: str,
    question: str,
    *,
    models: Mapping[str, ChatModel],
    tools: ToolRegistry | None = None,
    config: AgentConfig | None = None,
    tags: Sequence[str] = (),
    recorder_factory: RecorderFactory | None = None,
    hooks: RunHooks | None = None,
    prompts: PromptLibrary | None = None,
    subject: str | None = None,
) -> AgentResult:
    """Run ``agent`` on ``question`` and record every step in ``ledger``.

    ``models`` maps roles to models (``"default"`` covers roles not named); ``tools`` defaults to
    the offline built-ins; ``config`` to ``AgentConfig()``. The question is redacted by the policy
    gate before anything is recorded. With ``subject``, the run's content is sealed under that
    data subject's key (``Ledger.record_run(..., subject=...)``), so ``agentledger erase`` can
    erase it. Expected failures (tool errors, bad JSON, failed model
    calls, guardrails) end in a recorded fallback answer; anything else records RunFailed and
    raises ``AgentRunError`` with the run id.
    """
    agent_spec(agent)
    settings = normalize_config(agent, config or AgentConfig())
    orchestration = build_agent(agent, settings)
    run_input = AgentInput(question=PolicyGate(settings.policy).check(question).text)
    factory: RecorderFactory = recorder_factory or ledger.record_run
    if subject is not None:  # every factory opens its run with Ledger.record_run's keywords
        factory = cast("RecorderFactory", functools.partial(cast("Any", factory), subject=subject))
    return start_run(
        factory,
        agent,
        orchestration,
        settings,
        run_input,
        models=models,
        tools=tools if tools is not None else builtin_registry(),
        library=prompts or default_library(),
        tags=tags,
        hooks=hooks,
    )
