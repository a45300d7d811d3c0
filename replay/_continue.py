"""``resume_run`` and ``fork_run``: continue a recorded run, in place or as a new linked run.

Owns both ways of carrying on from a recorded prefix. The agent is re-executed with models and
tools answering from the record and a ``CheckingRecorder`` comparing every re-produced event
with the recorded one; past the prefix the run goes live and its events are written.

- **Resume** continues a run whose process died: the prefix is the whole record, nothing of it
  is written again, and the new events are appended to the same run, which then completes,
  verifies and replays like any other. A tool the dead process called without recording its
  result is called again, except an effectful one unless ``allow_effects`` (it may have run).
- **Fork** starts a new run (``relation="fork"``, parent id and position) that copies its
  parent's events 1..N by re-executing them, applies an optional merge patch to the world state
  right after position N (a DeltaApplied with ``source="fork"``), and continues live with the
  given models. Re-executing a call the parent recorded after N with an effectful tool is
  refused unless ``allow_effects``. The fork carries the tags it is given, not its parent's.

Annotations are notes on a run, not events it made: a run annotated after its end is finished
(it cannot be resumed, nor forked past its end), and one annotated mid-way is re-executed around
its notes (a fork copies those in its prefix, so every position stays the parent's).

Must not modify a parent run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentledger.agents.models import ChatModel
from agentledger.agents.prompts import PromptLibrary
from agentledger.ledger import Ledger, RunRecorder
from agentledger.replay._functions import fork_function, is_function_run, resume_function
from agentledger.replay._outcome import run_problem
from agentledger.replay._ports import RecordedTools
from agentledger.replay._recorder import ANNOTATION, CheckingRecorder, refuse_erased
from agentledger.replay._replay import Recorded
from agentledger.replay._rerun import LIVE_PROVIDERS, live_model
from agentledger.replay.errors import (
    NotResumableError,
    ReplayDivergenceError,
    ReplayUsageError,
)
from agentledger.tools import ToolRegistry, builtin_registry

__all__ = ["ContinueResult", "fork_run", "resume_run"]


@dataclass(frozen=True)
class ContinueResult:
    """A resumed or forked run: its id, status, and how many events came from the record."""

    run_id: str
    parent_run_id: str | None
    status: str
    replayed_events: int
    new_events: int
    answer: str | None
    error: str | None = None
    """Why the run is not a good answer: its recorded failure, or every live model call failed."""

    def to_json(self) -> dict[str, Any]:
        """The result as JSON."""
        return dict(self.__dict__)


def _live(
    recorded: Recorded, given: Mapping[str, ChatModel] | None, model: str | None
) -> dict[str, ChatModel]:
    """Every role's live model, or a usage error naming the roles that have none."""
    live: dict[str, ChatModel] = {}
    missing: list[str] = []
    for role, config in recorded.started.config.models.items():
        chosen = (given or {}).get(role, (given or {}).get("default"))
        if chosen is not None:
            live[role] = chosen
        elif model:
            live[role] = live_model(model)
        elif config.provider in LIVE_PROVIDERS:
            live[role] = live_model(f"{config.provider}:{config.model}")
        else:
            missing.append(f"{role} (recorded {config.provider}:{config.model})")
    if missing:
        msg = (
            f"no live model for {', '.join(missing)}: pass models=... "
            "(CLI: --model PROVIDER:NAME) to answer what the record does not hold"
        )
        raise ReplayUsageError(msg)
    return live


def resume_run(
    ledger: Ledger,
    run_id: str,
    *,
    models: Mapping[str, ChatModel] | None = None,
    model: str | None = None,
    tools: ToolRegistry | None = None,
    prompts: PromptLibrary | None = None,
    allow_effects: bool = False,
    entry: str | None = None,
) -> ContinueResult:
    """Continue a run that stopped mid-way (its process died) from its last recorded event.

    Models and tools already answered are served from the record; the rest is live (``models``
    by role or ``"default"``, else ``model`` as a ``provider:model`` spec, else the recorded
    vendor model). Raises ``NotResumableError`` for a finished run, or when an effectful tool
    call has no recorded result and ``allow_effects`` is off; ``ReplayDivergenceError`` when
    re-executing the prefix records something else (the code or prompts changed). A run
    recorded from a user's function is continued by running that function again (``entry`` as
    for ``replay_run``), its clients and recorded tools served from the record, then live.
    """
    refuse_erased(ledger, run_id)
    if entry is not None or is_function_run(ledger, run_id):
        _no_models(models, model)
        resumed = resume_function(ledger, run_id, entry=entry, allow_effects=allow_effects)
        return _result(ledger, run_id, None, resumed.compared)
    recorded = Recorded(ledger, run_id, prompts)
    if recorded.end is not None:
        raise NotResumableError(run_id, f"it already ended ({recorded.end.kind})")
    unanswered = [r for r in recorded.record.results if r.result is None and r.effectful]
    if unanswered and not allow_effects:
        names = ", ".join(f"{r.tool} at position {r.position}" for r in unanswered)
        raise NotResumableError(
            run_id,
            f"effectful tool call {names} has no recorded result and may have run; "
            "pass allow_effects=True (CLI: --allow-effects) to call it again",
        )
    live = _live(recorded, models, model)
    role_models = recorded.recorded_models(live)
    tool_port = RecordedTools(
        tools if tools is not None else builtin_registry(),
        recorded.record,
        allow_effects=True,
        mark=False,
    )
    identity = recorded.identity(role_models, tool_port)
    recorded.check_started(recorded.started.model_copy(update={"config": identity}))
    recorder = CheckingRecorder(
        ledger,
        ledger.load(run_id),
        recorded_run_id=run_id,
        expected=recorded.events,
        prefix_end=len(recorded.events),
        write_prefix=False,
        beyond="write",
    )
    recorder.seal_like(ledger, recorded.events[0].payload)
    fork = recorded.fork_patch
    pending = fork if fork is not None and fork[0] >= len(recorded.events) else None
    ended = recorded.run_in(recorder, role_models, tool_port, patch_after=pending)
    if isinstance(ended, ReplayDivergenceError):
        raise ended
    return _result(ledger, run_id, None, len(recorded.events))


def fork_run(
    ledger: Ledger,
    run_id: str,
    at: int,
    *,
    patch: object = None,
    models: Mapping[str, ChatModel] | None = None,
    model: str | None = None,
    tools: ToolRegistry | None = None,
    prompts: PromptLibrary | None = None,
    allow_effects: bool = False,
    tags: Sequence[str] = (),
    entry: str | None = None,
) -> ContinueResult:
    """Start a new run that repeats ``run_id`` up to position ``at``, then goes live.

    ``patch`` (a JSON Merge Patch object) is applied to the world state right after ``at``.
    Past ``at`` the models answer live (as for ``resume_run``). ``tags`` are the new run's
    (none are inherited, as for a rerun). A run recorded from a user's function is forked by
    running that function (``entry`` as for ``replay_run``); it keeps its own state, so it
    takes no patch.
    """
    refuse_erased(ledger, run_id)
    if entry is not None or is_function_run(ledger, run_id):
        last = ledger.run(run_id).event_count
        if not 1 <= at < last:
            msg = f"--at {at}: run {run_id} has positions 1..{last}; fork at 1..{last - 1}"
            raise ReplayUsageError(msg)
        if patch is not None:
            msg = (
                f"run {run_id} was recorded from a function, which keeps its own state: a fork "
                "of it takes no --patch"
            )
            raise ReplayUsageError(msg)
        _no_models(models, model)
        new_id = fork_function(
            ledger, run_id, at, entry=entry, allow_effects=allow_effects, tags=tags
        )
        return _result(ledger, new_id, run_id, at)
    recorded = Recorded(ledger, run_id, prompts)
    last = max(e.position for e in recorded.events if e.kind != ANNOTATION)  # notes aside
    if not 1 <= at < last:
        msg = f"--at {at}: run {run_id} has positions 1..{last}; fork at 1..{last - 1}"
        raise ReplayUsageError(msg)
    if patch is not None and not isinstance(patch, dict):
        msg = f"a fork's patch must be a JSON object, not {type(patch).__name__}"
        raise ReplayUsageError(msg)
    live = _live(recorded, models, model)
    role_models = recorded.recorded_models(live, upto=at)
    tool_port = RecordedTools(
        tools if tools is not None else builtin_registry(),
        recorded.record,
        allow_effects=allow_effects,
        mark=False,
        upto=at,
    )
    identity = recorded.identity(role_models, tool_port)
    recorded.check_started(recorded.started.model_copy(update={"config": identity}))
    overrides: dict[str, Any] = {"at": at}
    if patch:
        overrides["patch"] = dict(patch)
    if model:
        overrides["model"] = model
    plain = ledger.record_run(
        recorded.started.agent,
        input=recorded.input.recorded(),
        config=identity,
        tags=list(tags),
        parent_run_id=run_id,
        parent_position=at,
        relation="fork",
        overrides=overrides,
        subject=ledger.subject_of(run_id),
    )
    recorder = CheckingRecorder(
        ledger,
        ledger.load(plain.run_id),
        recorded_run_id=run_id,
        expected=recorded.events[:at],
        prefix_end=at,
        write_prefix=True,
        beyond="write",
    )
    recorder.seal_like(ledger, ledger.events(plain.run_id, upto=1)[0].payload)
    ended = recorded.run_in(
        recorder, role_models, tool_port, patch_after=(at, patch) if patch else None
    )
    if isinstance(ended, ReplayDivergenceError):
        closer = RunRecorder(ledger, ledger.load(plain.run_id))
        closer.fail(ended)
        raise ended
    return _result(ledger, plain.run_id, run_id, at)


def _no_models(models: Mapping[str, ChatModel] | None, model: str | None) -> None:
    if models or model:
        msg = (
            "a run recorded from a function calls its models through its own clients: "
            "--model does not apply (its calls past the record go to those clients)"
        )
        raise ReplayUsageError(msg)


def _result(ledger: Ledger, run_id: str, parent: str | None, replayed: int) -> ContinueResult:
    events = ledger.events(run_id)
    answer = next(
        (
            str(e.payload.get("answer") or e.payload.get("question") or "")
            for e in reversed(events)
            if e.kind in ("SynthesisProduced", "ClarificationRequested")
        ),
        None,
    )
    return ContinueResult(
        run_id=run_id,
        parent_run_id=parent,
        status=ledger.run(run_id).status,
        replayed_events=replayed,
        new_events=len(events) - replayed,
        answer=answer,
        error=run_problem(ledger, run_id, after=replayed),
    )
