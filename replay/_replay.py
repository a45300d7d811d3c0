"""``replay_run``: re-execute a recorded run offline and check it records the same events.

Owns audit replay and the pieces resume, fork and rerun share: rebuilding a run's agent from
its RunStarted (``Recorded``: events, agent, settings, prompt texts recovered from the ledger's
own blobs so a run replays under the prompt versions it recorded, whatever the library now
holds), and the ``ReplayResult``. A replay drives the same ``start_run`` path a live run takes,
with models and tools answering from the record and a ``CheckingRecorder`` on a scratch
in-memory ledger comparing every event at its position, so nothing is written to the ledger
being audited. Must not write to the audited ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentledger.agents import (
    AgentConfig,
    AgentInput,
    AgentRunError,
    Orchestration,
    RunContext,
    config_identity,
    execute_run,
    rebuild_agent,
    resolve_models,
    resolve_prompts,
    start_run,
)
from agentledger.agents.models import ChatModel, ModelRequest, ModelResponse
from agentledger.agents.prompts import PromptLibrary, default_library, prompt_hash
from agentledger.ledger import (
    GENESIS,
    Ledger,
    RecordedEvent,
    Run,
    RunRecorder,
    SequentialIds,
    StepClock,
)
from agentledger.ledger.events import ConfigIdentity, PromptRef, RunStarted, upcast
from agentledger.replay._compare import Divergence, comparable, comparable_event, divergence
from agentledger.replay._functions import replay_function
from agentledger.replay._paged import PagedEvents
from agentledger.replay._ports import Record, RecordedModel, RecordedTools
from agentledger.replay._recorder import (
    END_KINDS,
    Beyond,
    CheckingRecorder,
    ReplayStopped,
    refuse_erased,
    run_end,
    salt_for,
)
from agentledger.replay._serving import STALL_TIMEOUT_S
from agentledger.replay.errors import ReplayDivergenceError, ReplayUsageError
from agentledger.tools import ToolRegistry, builtin_registry

__all__ = ["END_KINDS", "Recorded", "ReplayResult", "replay_all", "replay_run"]


@dataclass(frozen=True)
class ReplayResult:
    """What a replay found: identical or the first divergence, and how far it compared."""

    run_id: str
    identical: bool
    events: int
    finished: bool
    divergence: Divergence | None = None

    def to_json(self) -> dict[str, Any]:
        """The result as JSON."""
        return {
            "run_id": self.run_id,
            "identical": self.identical,
            "events": self.events,
            "finished": self.finished,
            "divergence": self.divergence.to_json() if self.divergence else None,
        }


class Recorded:
    """A recorded run, ready to re-execute: its events, agent, settings and prompts."""

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        prompts: PromptLibrary | None = None,
        *,
        events: list[RecordedEvent] | None = None,
    ) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.events: list[RecordedEvent] = events if events is not None else ledger.events(run_id)
        first = self.events[0]
        payload = upcast(first.kind, first.version, first.payload)
        self.started = RunStarted.model_validate(payload)
        self.library = recorded_library(ledger, self.started.config, prompts)
        self.orchestration, self.config = rebuild_agent(self.started, prompts=self.library)
        self.record = Record(ledger, run_id, self.events)
        self.end = run_end(self.events)  # annotations after it do not reopen the run
        self.finished = self.end is not None

    @property
    def fork_patch(self) -> tuple[int, dict[str, Any]] | None:
        """For a fork with a state patch: (the parent position it follows, the patch)."""
        patch = self.started.overrides.get("patch")
        at = self.started.parent_position
        if self.started.relation == "fork" and isinstance(patch, dict) and at is not None:
            return at, patch
        return None

    def identity(self, models: Mapping[str, ChatModel], tools: ToolRegistry) -> ConfigIdentity:
        """The configuration identity a re-execution with these ports records."""
        agent, orchestration, config = self.started.agent, self.orchestration, self.config
        return config_identity(
            config,
            resolve_models(agent, orchestration.roles(), models),
            resolve_prompts(orchestration, config, self.library),
            tools,
        )

    def run_in(
        self,
        recorder: CheckingRecorder,
        models: Mapping[str, ChatModel],
        tools: ToolRegistry,
        *,
        patch_after: tuple[int, Mapping[str, Any]] | None = None,
    ) -> BaseException | None:
        """Execute the agent in ``recorder``'s run; return the exception it ended with.

        ``patch_after`` = (N, patch) records ``patch`` as a fork's DeltaApplied (and applies it
        to the world state) right after position N.
        """
        agent, orchestration, config = self.started.agent, self.orchestration, self.config
        ctx = RunContext(
            models=resolve_models(agent, orchestration.roles(), models),
            tools=tools,
            recorder=recorder,
            config=config,
            prompts=resolve_prompts(orchestration, config, self.library),
            run_input=self.input,
            agent=agent,
        )
        if patch_after is not None:
            patch = dict(patch_after[1])

            def apply_fork_patch() -> None:
                ctx.delta(patch, source="fork")

            recorder.run_after(patch_after[0], apply_fork_patch)
        try:
            with recorder:
                execute_run(ctx, orchestration, self.input)
        except Exception as error:  # noqa: BLE001 - the run recorded it; the caller decides
            return error
        return None

    @property
    def input(self) -> AgentInput:
        """The run's (already redacted) input."""
        value = self.started.input
        if self.started.input_ref is not None:
            value = self.ledger.blob(self.started.input_ref)
        return AgentInput.model_validate(value)

    def check_started(self, started: RunStarted) -> None:
        """Raise ``ReplayDivergenceError`` when a re-execution starts differently."""
        first = self.events[0]
        expected = comparable(first.kind, first.version, first.payload)
        actual = comparable_event(started)
        if "input_ref" in expected and "input" in actual:
            actual = {**{k: v for k, v in actual.items() if k != "input"}}
            actual["input_ref"] = expected["input_ref"]
        # The redaction policy is the ledger's, not the agent's: a re-execution uses the record's.
        config = {k: v for k, v in actual.get("config", {}).items() if k != "redaction"}
        if "redaction" in expected.get("config", {}):
            config["redaction"] = expected["config"]["redaction"]
        actual = {**actual, "config": config}
        if "subject_key" in expected:  # the run seals under the record's data subject key
            actual["subject_key"] = expected["subject_key"]
        if expected != actual:
            found = divergence(1, ("RunStarted", expected), ("RunStarted", actual))
            raise ReplayDivergenceError(self.run_id, found)

    def recorded_models(
        self,
        live: Mapping[str, ChatModel] | None = None,
        *,
        upto: int | None = None,
        on_exhausted: Callable[[str, ModelRequest], ModelResponse] | None = None,
    ) -> dict[str, ChatModel]:
        """One model per recorded role, answering from the record (then ``live[role]``)."""
        live = live or {}
        return {
            role: RecordedModel(
                self.record,
                role,
                m.provider,
                m.model,
                live=live.get(role, live.get("default")),
                upto=upto,
                on_exhausted=on_exhausted,
            )
            for role, m in self.started.config.models.items()
        }

    def execute(
        self,
        factory: Callable[..., RunRecorder],
        models: Mapping[str, ChatModel],
        tools: ToolRegistry,
        *,
        orchestration: Orchestration | None = None,
        config: AgentConfig | None = None,
        library: PromptLibrary | None = None,
        tags: Sequence[str] | None = None,
        parent_run_id: str | None = None,
        parent_position: int | None = None,
        relation: str | None = None,
    ) -> BaseException | None:
        """Run the agent through ``start_run``; return the exception the run ended with."""
        try:
            start_run(
                factory,
                self.started.agent,
                orchestration or self.orchestration,
                config or self.config,
                self.input,
                models=models,
                tools=tools,
                library=library or self.library,
                tags=self.started.tags if tags is None else tags,
                parent_run_id=parent_run_id,
                parent_position=parent_position,
                relation=relation,
            )
        except AgentRunError as error:
            return error.__cause__ or error
        return None


def recorded_library(
    ledger: Ledger, config: ConfigIdentity, prompts: PromptLibrary | None
) -> PromptLibrary:
    """``prompts`` (default: the built-in library) with every prompt text the run recorded.

    The recorded text of a version wins, so a run replays with exactly the prompts it ran with.
    """
    given = library = prompts or default_library()
    # A ref is the hash of its text: a prompt whose version the library holds with that very
    # text adds nothing, so its text is not read again. Only the others' texts are read (all
    # of them when two roles name one version: then the order in which they are added counts).
    named = [p for p in config.prompts.values() if p.text_ref]
    versions = {(p.name, p.version) for p in named}
    unheld = [p for p in named if _held(given, p) is None] if len(versions) == len(named) else named
    refs = list(dict.fromkeys(p.text_ref for p in unheld if p.text_ref))
    texts = ledger.blobs(refs) if refs else {}
    for ref in unheld:
        text = texts.get(ref.text_ref) if ref.text_ref else None
        if isinstance(text, str) and not _has(library, ref, text):
            library = library.with_prompt(ref.name, ref.version, text)
    return library


def _held(library: PromptLibrary, ref: PromptRef) -> str | None:
    """The text of ``ref``'s prompt and version in ``library`` when it is the one ``ref`` names."""
    if not library.has(ref.name, ref.version):
        return None
    text = library.text(ref.name, ref.version)
    return text if prompt_hash(text) == ref.text_ref else None


def _has(library: PromptLibrary, ref: PromptRef, text: str) -> bool:
    """Whether ``library`` holds ``text`` as ``ref``'s prompt and version (nothing to add)."""
    return library.has(ref.name, ref.version) and library.text(ref.name, ref.version) == text


def replay_run(
    ledger: Ledger,
    run_id: str,
    *,
    tools: ToolRegistry | None = None,
    prompts: PromptLibrary | None = None,
    models: Mapping[str, ChatModel] | None = None,
    raise_on_divergence: bool = True,
    entry: str | None = None,
    stall_timeout: float = STALL_TIMEOUT_S,
) -> ReplayResult:
    """Re-execute ``run_id`` with every answer served from its record; compare every event.

    A run recorded from a user's function (``Ledger.record_function``) is replayed by importing
    that function (from the working directory or ``PYTHONPATH``) and running it with its
    instrumented clients and recorded tools answering from the record; ``entry``
    (``module:qualname``) names another function to run, and is required for a run this
    ledger did not record itself (an imported one). Concurrent calls are recorded at their
    recorded positions; a call that waits ``stall_timeout`` seconds for the events before it
    is a divergence, reported at once when nothing else of the function could record them
    (see ``agentledger.replay._serving`` and ``_stuck``).

    Writes nothing. ``tools`` must hold the tools the run used (default: the built-ins); their
    results come from the record, never from running them. ``models`` replaces the record for
    the roles it names (re-evaluate a recorded run against a model: the first call it answers
    differently is the divergence). Raises ``ReplayDivergenceError`` at the first event that
    differs (or returns it in the result with ``raise_on_divergence=False``). A run that never
    finished replays up to its last recorded event. A run whose data subject was erased is
    refused before anything runs (`ContentErasedError` names the positions it cannot compare).
    """
    refuse_erased(ledger, run_id)
    events = PagedEvents(ledger, run_id)  # read once: it says which kind of run this is
    if entry is not None or (len(events) > 0 and events[0].payload.get("entry") is not None):
        if models:
            msg = "models= replaces a bundled agent's roles; a function run uses its own clients"
            raise ReplayUsageError(msg)
        result: ReplayResult = replay_function(
            ledger,
            run_id,
            entry=entry,
            raise_on_divergence=raise_on_divergence,
            stall_timeout=stall_timeout,
            events=events,
        )
        return result
    recorded = Recorded(ledger, run_id, prompts, events=events.whole())
    holder: list[CheckingRecorder] = []
    beyond: Beyond = "diverge" if recorded.finished else "stop"

    def exhausted(role: str, request: ModelRequest) -> ModelResponse:
        del request
        if not recorded.finished:
            raise ReplayStopped
        position = holder[0].position + 1
        found = divergence(
            position, None, None, f"replay called the {role!r} model more times than recorded"
        )
        holder[0].divergence = found
        raise ReplayDivergenceError(run_id, found)

    role_models = recorded.recorded_models(on_exhausted=exhausted)
    role_models.update(_replacements(recorded, models or {}))
    live_tools = tools if tools is not None else builtin_registry()
    served = RecordedTools(live_tools, recorded.record, allow_effects=False, mark=False)
    started = recorded.started
    scratch = Ledger.open(
        "memory://",
        clock=StepClock(),
        ids=SequentialIds(),
        limits=ledger.limits,
        redaction_salt=salt_for(ledger, started),
    )
    try:
        recorded.check_started(
            RunStarted(
                agent=started.agent,
                input=recorded.input.recorded(),
                config=recorded.identity(role_models, served),
                tags=started.tags,
            )
        )
        checker = CheckingRecorder(
            scratch,  # never written: a replay's recorder commits nothing
            _detached_run(run_id),
            recorded_run_id=run_id,
            expected=recorded.events,
            prefix_end=len(recorded.events),
            write_prefix=False,
            beyond=beyond,
        )
        checker.seal_like(ledger, recorded.events[0].payload)
        holder.append(checker)
        ended = recorded.run_in(checker, role_models, served, patch_after=recorded.fork_patch)
        if isinstance(ended, ReplayDivergenceError):
            raise ended
        checker.finish()
    except ReplayDivergenceError as error:
        return _diverged(recorded, error, raise_on_divergence)
    return ReplayResult(run_id, True, checker.compared, recorded.finished)


def _detached_run(run_id: str) -> Run:
    """A run aggregate at position 1 that no store holds (the replay's own copy)."""
    return Run.start(
        run_id,
        kind="RunStarted",
        schema_version=RunStarted.class_version,
        event_id="replay",
        recorded_at="",
        prev=GENESIS,
        hash=GENESIS,
        payload={},
        payload_jcs=b"{}",
    )


def _replacements(recorded: Recorded, models: Mapping[str, ChatModel]) -> dict[str, ChatModel]:
    """``models`` by recorded role (``"default"`` for every role it does not name)."""
    roles = list(recorded.started.config.models)
    unknown = sorted(set(models) - {*roles, "default"})
    if unknown:
        msg = f"models names roles the run does not have: {unknown}; recorded roles: {roles}"
        raise ReplayUsageError(msg)
    default = models.get("default")
    chosen = {role: models.get(role, default) for role in roles}
    return {role: model for role, model in chosen.items() if model is not None}


def _diverged(recorded: Recorded, error: ReplayDivergenceError, raising: bool) -> ReplayResult:
    if raising:
        raise error
    found = error.divergence
    return ReplayResult(recorded.run_id, False, found.position - 1, recorded.finished, found)


def replay_all(
    ledger: Ledger,
    run_ids: Iterable[str] | None = None,
    *,
    tools: ToolRegistry | None = None,
    prompts: PromptLibrary | None = None,
    progress: Callable[[int, int, ReplayResult], None] | None = None,
    entry: str | None = None,
    stall_timeout: float = STALL_TIMEOUT_S,
) -> list[ReplayResult]:
    """Replay many runs (default: every run); never raises for a divergence.

    ``entry`` is the function to run for every selected run (see `replay_run`).
    """
    ids = list(run_ids) if run_ids is not None else ledger.run_ids()
    results: list[ReplayResult] = []
    for index, run_id in enumerate(ids, 1):
        result = replay_run(
            ledger,
            run_id,
            tools=tools,
            prompts=prompts,
            raise_on_divergence=False,
            entry=entry,
            stall_timeout=stall_timeout,
        )
        results.append(result)
        if progress is not None:
            progress(index, len(ids), result)
    return results
