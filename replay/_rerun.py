"""``rerun``: re-evaluate a recorded run under changed prompts, model or parameters.

Owns re-evaluation: a NEW run linked to the original (``relation="rerun"``, its parent id and the
overrides recorded in RunStarted) that re-executes the original's agent with ``Overrides``
applied. A model request identical to one the original recorded (same role, model, parameters,
messages and tools: the ledger's request fingerprint) is served from the record - marked
``served_from`` and costing zero tokens - and any other request goes to the live model (given,
or rebuilt from the override/recorded ``provider:model`` spec). A tool call identical to a
recorded one is served from the record; any other call runs the tool, except an effectful one
unless ``allow_effects``: then the rerun stops there, and the run records RunFailed with the
reason. A rerun carries the tags it is given, never its parent's (a cohort selected by tag must
not gain the re-evaluations of its runs); its link to the parent is the lineage. ``rerun_many``
reruns a selection with progress; a rerun that fails or cannot start is reported in its result
and the others go on. Must not modify the original run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentledger.agents import AgentConfig, build_agent, normalize_config
from agentledger.agents.models import ChatModel, ModelRequest, ModelResponse, model_from_spec
from agentledger.agents.prompts import PromptLibrary
from agentledger.ledger import Ledger, LedgerError, RunRecorder, UnknownRunError
from agentledger.replay._functions import is_function_run, rerun_function_run
from agentledger.replay._outcome import describe_error, run_problem
from agentledger.replay._ports import CachedModel, RecordedTools
from agentledger.replay._recorder import refuse_erased
from agentledger.replay._replay import Recorded
from agentledger.replay.errors import (
    EffectRefusedError,
    NoLiveModelError,
    ReplayUsageError,
)
from agentledger.tools import ToolRegistry, builtin_registry

__all__ = ["LIVE_PROVIDERS", "Overrides", "RerunResult", "live_model", "rerun", "rerun_many"]

LIVE_PROVIDERS = frozenset({"openai", "anthropic"})
"""Providers whose recorded ``provider:model`` can be called again without being told how."""


@dataclass(frozen=True)
class Overrides:
    """What a rerun changes. Empty overrides re-execute the run as it was recorded.

    ``prompt_versions`` maps a role (``planner``) or a prompt name (``pipeline.planner``) to a
    version; ``model`` is a ``provider:model`` spec for every role, ``models`` one per role.
    """

    prompt_versions: Mapping[str, str] = field(default_factory=dict)
    model: str | None = None
    models: Mapping[str, str] = field(default_factory=dict)
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    base_url: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The overrides as RunStarted records them (only what was set)."""
        out: dict[str, Any] = {
            "prompt_versions": dict(self.prompt_versions),
            "model": self.model,
            "models": dict(self.models),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "options": dict(self.options),
            "base_url": self.base_url,
        }
        return {k: v for k, v in out.items() if v not in (None, {}, "")}

    def apply(self, recorded: Recorded) -> AgentConfig:
        """The original run's settings with these overrides applied."""
        config = recorded.config
        roles = dict(recorded.orchestration.prompt_names())
        by_name = {name: role for role, name in roles.items()}
        versions = dict(config.prompt_versions)
        for key, version in self.prompt_versions.items():
            role = key if key in roles else by_name.get(key)
            if role is None:
                known = ", ".join(f"{r} ({n})" for r, n in roles.items())
                agent = recorded.started.agent
                msg = f"prompt {key!r}: agent {agent!r} has no such role or prompt; known: {known}"
                raise ReplayUsageError(msg)
            if not recorded.library.has(roles[role], version):
                have = ", ".join(recorded.library.versions(roles[role])) or "none"
                msg = f"prompt {roles[role]!r} has no version {version!r}; known versions: {have}"
                raise ReplayUsageError(msg)
            versions[role] = version
        update: dict[str, Any] = {"prompt_versions": versions}
        if self.temperature is not None:
            update["temperature"] = self.temperature
        if self.max_tokens is not None:
            update["max_tokens"] = self.max_tokens
        if self.seed is not None:
            update["seed"] = self.seed
        if self.options:
            update["options"] = {**config.options, **dict(self.options)}
        return normalize_config(recorded.started.agent, config.model_copy(update=update))


@dataclass(frozen=True)
class RerunResult:
    """A rerun: the new run, whether it completed, stopped or failed (and why), what was served.

    ``status`` is the new run's (``completed``, ``failed``), ``stopped`` when it stopped at a
    request or effect the record does not hold (``stopped`` says which), or ``error`` when no
    new run could start (``run_id`` is then None). ``error`` says what went wrong: the failure
    the run recorded, why it could not start, or that every live model call failed.
    """

    run_id: str | None
    parent_run_id: str
    status: str
    answer: str | None
    stopped: str | None
    served_model_calls: int
    live_model_calls: int
    served_tool_calls: int
    live_tool_calls: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the rerun completed with nothing wrong."""
        return self.status == "completed" and self.error is None

    def to_json(self) -> dict[str, Any]:
        """The result as JSON."""
        return dict(self.__dict__)


class _LazyModel:
    """A vendor model built on its first call, so a fully served rerun needs no API key."""

    def __init__(self, spec: str, base_url: str | None) -> None:
        self._spec = spec
        self._base_url = base_url
        self._model: ChatModel | None = None
        self.provider = spec.partition(":")[0]

    @property
    def name(self) -> str:
        """The spec's ``provider:model``."""
        return self._spec

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Build the model (reading its API key) on first use, then call it."""
        if self._model is None:
            self._model = model_from_spec(self._spec, base_url=self._base_url)
        return self._model.complete(request)


def live_model(spec: str, base_url: str | None = None) -> ChatModel:
    """A model from a ``provider:model`` spec; vendor models connect on their first call."""
    if spec.partition(":")[0] in LIVE_PROVIDERS:
        return _LazyModel(spec, base_url)
    return model_from_spec(spec, base_url=base_url)


def _live_models(
    recorded: Recorded, overrides: Overrides, given: Mapping[str, ChatModel] | None
) -> dict[str, ChatModel | None]:
    """The live model of each recorded role: given, overridden, or the recorded vendor model."""
    live: dict[str, ChatModel | None] = {}
    for role, config in recorded.started.config.models.items():
        spec = overrides.models.get(role) or overrides.model
        if given and (role in given or "default" in given):
            live[role] = given.get(role, given.get("default"))
        elif spec:
            live[role] = live_model(spec, overrides.base_url)
        elif config.provider in LIVE_PROVIDERS:
            live[role] = live_model(f"{config.provider}:{config.model}", overrides.base_url)
        else:
            live[role] = None
    return live


def rerun(
    ledger: Ledger,
    run_id: str,
    overrides: Overrides | None = None,
    *,
    models: Mapping[str, ChatModel] | None = None,
    tools: ToolRegistry | None = None,
    prompts: PromptLibrary | None = None,
    allow_effects: bool = False,
    tags: Sequence[str] = (),
    entry: str | None = None,
) -> RerunResult:
    """Re-execute ``run_id`` as a new linked run with ``overrides``; see the module doc.

    ``models`` are the live models by role (``"default"`` for all); without them a changed
    request goes to the overridden or recorded vendor model, and stops the rerun (recorded as
    RunFailed, ``NoLiveModelError``) when the original used a scripted model. ``tags`` are the
    new run's (none are inherited). A run that fails (a script runs out, a tool raises) is
    returned with status ``failed`` and the reason in ``error``; an error before the new run
    starts (an unknown prompt version, a run that cannot be rebuilt) is raised. A run recorded
    from a user's function reruns that function (``entry`` as for ``replay_run``): requests
    the record answers are served, the others go to the function's own clients.
    """
    overrides = overrides or Overrides()
    refuse_erased(ledger, run_id)
    if entry is not None or is_function_run(ledger, run_id):
        result: RerunResult = rerun_function_run(
            ledger,
            run_id,
            overrides,
            library=prompts,
            allow_effects=allow_effects,
            tags=tags,
            entry=entry,
        )
        return result
    recorded = Recorded(ledger, run_id, prompts)
    config = overrides.apply(recorded)
    orchestration = build_agent(recorded.started.agent, config)
    cached = {
        role: CachedModel(recorded.record, role, m.provider, m.model, live=live)
        for (role, m), live in zip(
            recorded.started.config.models.items(),
            _live_models(recorded, overrides, models).values(),
            strict=True,
        )
    }
    served_tools = RecordedTools(
        tools if tools is not None else builtin_registry(),
        recorded.record,
        allow_effects=allow_effects,
        mark=True,
        strict_order=False,
    )
    holder: list[RunRecorder] = []

    subject = ledger.subject_of(run_id)  # a rerun is tied to its parent's data subject

    def factory(agent: str, input: Any = None, **kwargs: Any) -> RunRecorder:  # noqa: A002
        recorder = ledger.record_run(
            agent, input=input, overrides=overrides.to_json(), subject=subject, **kwargs
        )
        holder.append(recorder)
        return recorder

    ended = recorded.execute(
        factory,
        cached,
        served_tools,
        orchestration=orchestration,
        config=config,
        tags=list(tags),
        parent_run_id=run_id,
        relation="rerun",
    )
    stopped: str | None = None
    if isinstance(ended, EffectRefusedError | NoLiveModelError):
        stopped = str(ended)
    elif ended is not None and (not holder or ledger.run(holder[0].run_id).status != "failed"):
        raise ended  # no run was started, or it could not record its failure
    new_id = holder[0].run_id
    info = ledger.run(new_id)
    return RerunResult(
        run_id=new_id,
        parent_run_id=run_id,
        status="stopped" if stopped else info.status,
        answer=_answer(ledger, new_id),
        stopped=stopped,
        served_model_calls=sum(m.served for m in cached.values()),
        live_model_calls=sum(m.live_calls for m in cached.values()),
        served_tool_calls=served_tools.served,
        live_tool_calls=served_tools.live_calls,
        error=None if stopped else run_problem(ledger, new_id),
    )


def _answer(ledger: Ledger, run_id: str) -> str | None:
    for event in reversed(ledger.events(run_id)):
        if event.kind == "SynthesisProduced":
            return str(event.payload.get("answer", ""))
        if event.kind == "ClarificationRequested":
            return str(event.payload.get("question", ""))
    return None


def _not_started(run_id: str, error: Exception) -> RerunResult:
    return RerunResult(
        run_id=None,
        parent_run_id=run_id,
        status="error",
        answer=None,
        stopped=None,
        served_model_calls=0,
        live_model_calls=0,
        served_tool_calls=0,
        live_tool_calls=0,
        error=describe_error(error),
    )


def rerun_many(
    ledger: Ledger,
    run_ids: Iterable[str],
    overrides: Overrides | None = None,
    *,
    models: Mapping[str, ChatModel] | None = None,
    tools: ToolRegistry | None = None,
    prompts: PromptLibrary | None = None,
    allow_effects: bool = False,
    tags: Sequence[str] = (),
    progress: Callable[[int, int, RerunResult], None] | None = None,
    entry: str | None = None,
) -> list[RerunResult]:
    """Rerun each run of a selection with the same overrides and tags, reporting progress.

    One rerun's failure does not stop the others: a run that failed is returned with status
    ``failed``, and one that could not start (an override its agent does not have, a run that
    cannot be rebuilt, any error before its run started) with status ``error`` and no run id;
    ``error`` says why. Storage errors and interrupts are raised.
    """
    ids = list(run_ids)
    results: list[RerunResult] = []
    for index, run_id in enumerate(ids, 1):
        try:
            result = rerun(
                ledger,
                run_id,
                overrides,
                models=models,
                tools=tools,
                prompts=prompts,
                allow_effects=allow_effects,
                tags=tags,
                entry=entry,
            )
        except LedgerError as error:
            if not isinstance(error, UnknownRunError):
                raise  # storage trouble is every run's: stop the batch
            result = _not_started(run_id, error)
        except Exception as error:  # noqa: BLE001 - reported in its result; the batch goes on
            result = _not_started(run_id, error)
        results.append(result)
        if progress is not None:
            progress(index, len(ids), result)
    return results
