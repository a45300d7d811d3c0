"""Replay, rerun, resume and fork of runs recorded from a user's function (``record_function``).

Owns the user-code half of the replay package. The function is imported by the path its
RunStarted names (``entry``), or by the caller's ``entry`` (required for a run this ledger did
not record itself: replay never runs code named only by a record it did not make), and run with
a ``ServingRecorder`` that answers its instrumented clients and recorded tools from the record:

- **replay** compares every event on a scratch ledger (nothing is written): identical, or the
  first divergence with position, kinds and changed paths, as for the bundled agents;
- **rerun** records a new linked run: requests identical to recorded ones are served (marked,
  zero tokens), others go live through the function's own clients; new prompt versions reach
  the function through ``run.prompt_text(role)``;
- **resume** continues a run whose process died, from its last event; **fork** starts a new run
  repeating the first N events, then live.

An ``async def`` function runs on its own event loop (in a helper thread when the caller is in
one). Must not modify the audited run (replay) or a parent run (rerun, fork).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentledger.ledger import (
    EntryError,
    Ledger,
    RecordedEvent,
    RunRecorder,
    SequentialIds,
    StepClock,
    entry_point,
    load_entry,
)
from agentledger.ledger.events import EntryPoint, RunStarted, upcast
from agentledger.replay._outcome import run_problem
from agentledger.replay._paged import PagedEvents
from agentledger.replay._recorder import ReplayStopped, salt_for
from agentledger.replay._serving import STALL_TIMEOUT_S, CallBook, ServingRecorder
from agentledger.replay.errors import (
    EffectRefusedError,
    NotResumableError,
    ReplayDivergenceError,
    ReplayUsageError,
)

__all__ = [
    "fork_function",
    "is_function_run",
    "replay_function",
    "rerun_function",
    "resume_function",
]


def started_of(events: Sequence[RecordedEvent]) -> RunStarted:
    """A run's RunStarted, as the current schema reads it."""
    first = events[0]
    return RunStarted.model_validate(upcast(first.kind, first.version, first.payload))


def is_function_run(ledger: Ledger, run_id: str) -> bool:
    """Whether the run was recorded from a user function (its RunStarted names an entry)."""
    first = ledger.events(run_id, upto=1)
    return bool(first) and first[0].payload.get("entry") is not None


def resolve_function(
    ledger: Ledger, run_id: str, started: RunStarted, entry: str | None
) -> Callable[..., Any]:
    """The function to run: ``entry`` if given, else the recorded one if this ledger made it."""
    if entry is None:
        if started.entry is None:
            msg = (
                f"run {run_id} (agent {started.agent!r}) names no function to replay: it was "
                "not recorded with record_function; pass entry='module:qualname' "
                "(CLI: --entry) to run a function against it"
            )
            raise ReplayUsageError(msg)
        if not ledger.recorded_entry(run_id):
            msg = (
                f"run {run_id} names the function {started.entry.path!r}, but this ledger did not "
                "record it (it was imported from a file): replay runs the code a record names "
                f"only when this ledger made the record; pass --entry {started.entry.path} "
                "(or entry=...) to run it"
            )
            raise ReplayUsageError(msg)
        entry = started.entry.path
    try:
        return load_entry(entry)
    except EntryError as error:
        raise ReplayUsageError(str(error)) from None


def recorded_prompts(ledger: Ledger, started: RunStarted) -> dict[str, str]:
    """The prompt texts the run recorded, by role."""
    refs = {role: p.text_ref for role, p in started.config.prompts.items() if p.text_ref}
    texts = ledger.blobs(list(refs.values())) if refs else {}
    return {role: texts[ref] for role, ref in refs.items() if isinstance(texts.get(ref), str)}


def recorded_input(ledger: Ledger, started: RunStarted) -> Any:
    """The run's input as recorded (read from its blob when it was large)."""
    if started.input_ref is not None:
        return ledger.blob(started.input_ref)
    return started.input


def run_function(
    fn: Callable[..., Any], recorder: ServingRecorder, value: Any
) -> BaseException | None:
    """Run ``fn(recorder, value)`` in the recorder's run; return what it ended with."""
    if inspect.iscoroutinefunction(fn):
        return _run_async(fn, recorder, value)
    recorder.join()
    try:
        with recorder:
            fn(recorder, value)
    except Exception as error:  # noqa: BLE001 - recorded as RunFailed; the caller decides
        return error
    return None


def _run_async(
    fn: Callable[..., Any], recorder: ServingRecorder, value: Any
) -> BaseException | None:
    async def main() -> None:
        recorder.join()
        async with recorder:
            await fn(recorder, value)

    outcome: list[BaseException | None] = [None]

    def run() -> None:
        try:
            asyncio.run(main())
        except Exception as error:  # noqa: BLE001 - recorded as RunFailed; the caller decides
            outcome[0] = error

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        run()
    else:  # the caller is inside an event loop: the function gets a loop of its own
        helper = threading.Thread(target=run, name="agentledger-replay")
        helper.start()
        helper.join()
    return outcome[0]


def replay_function(
    ledger: Ledger,
    run_id: str,
    *,
    entry: str | None = None,
    raise_on_divergence: bool = True,
    stall_timeout: float = STALL_TIMEOUT_S,
    events: PagedEvents | None = None,
) -> Any:
    """Replay a function run offline; see `agentledger.replay.replay_run`.

    ``events``: the run's record as the caller opened it (else it is opened here).
    """
    from agentledger.replay._replay import ReplayResult, _detached_run

    if events is None:
        events = PagedEvents(ledger, run_id)  # a long record is read a page at a time
    # A short record (most runs) is one page: its list, indexed without the paging.
    record: Sequence[RecordedEvent] = events.whole() or events
    started = started_of(record)
    fn = resolve_function(ledger, run_id, started, entry)
    book = CallBook(ledger, run_id, record, upto=None, lock=events.lock)
    scratch = Ledger.open(
        "memory://",
        clock=StepClock(),
        ids=SequentialIds(),
        limits=ledger.limits,
        redaction_salt=salt_for(ledger, started),
    )
    recorder = ServingRecorder(
        scratch,  # never written: a replay's recorder commits nothing
        _detached_run(run_id),
        recorded_run_id=run_id,
        expected=record,
        prefix_end=len(record),
        write_prefix=False,
        beyond="diverge" if book.finished else "stop",
        book=book,
        live=False,
        gate=True,
        stall_timeout=stall_timeout,
    )
    recorder._prompt_texts = recorded_prompts(ledger, started)
    recorder.seal_like(ledger, record[0].payload)
    try:
        ended = run_function(fn, recorder, recorded_input(ledger, started))
        if isinstance(ended, ReplayDivergenceError):
            raise ended
        recorder.finish()
    except ReplayDivergenceError as error:
        if raise_on_divergence:
            raise
        found = error.divergence
        return ReplayResult(run_id, False, found.position - 1, book.finished, found)
    return ReplayResult(run_id, True, recorder.compared, book.finished)


def rerun_function(
    ledger: Ledger,
    run_id: str,
    *,
    prompts: Mapping[str, tuple[str, str]] | None = None,
    overrides: Mapping[str, Any] | None = None,
    entry: str | None = None,
    allow_effects: bool = False,
    tags: Sequence[str] | None = None,
) -> tuple[str, str | None, ServingRecorder]:
    """Rerun a function run as a new linked run; (new run id, why it stopped, its recorder).

    ``prompts`` maps roles to new (version, text); requests the record answers are served.
    """
    events = ledger.events(run_id)
    started = started_of(events)
    fn = resolve_function(ledger, run_id, started, entry)
    texts = recorded_prompts(ledger, started)
    unknown = sorted(set(prompts or {}) - set(started.config.prompts))
    if unknown:
        known = ", ".join(sorted(started.config.prompts)) or "none"
        msg = f"run {run_id} has no prompt role {unknown[0]!r} (its roles: {known})"
        raise ReplayUsageError(msg)
    new_prompts: dict[str, tuple[str, str]] = {
        role: (started.config.prompts[role].version, text) for role, text in texts.items()
    }
    new_prompts.update(prompts or {})
    config = started.config.model_copy(
        update={"prompts": {k: v for k, v in started.config.prompts.items() if k not in texts}}
    )
    plain = ledger.record_run(
        started.agent,
        input=recorded_input(ledger, started),
        config=config,
        tags=list(tags or ()),  # a rerun inherits no tags: it names its parent instead
        parent_run_id=run_id,
        relation="rerun",
        overrides=dict(overrides or {}),
        prompts=new_prompts,
        entry=_entry_of(fn, started),
        subject=ledger.subject_of(run_id),
    )
    recorder = ServingRecorder(
        ledger,
        ledger.load(plain.run_id),
        recorded_run_id=run_id,
        expected=ledger.events(plain.run_id),
        prefix_end=1,
        write_prefix=True,
        beyond="write",
        book=CallBook(ledger, run_id, events, upto=None),
        live=True,
        gate=False,
        mark=run_id,
        allow_effects=allow_effects,
    )
    recorder._prompt_texts = {role: text for role, (_, text) in new_prompts.items()}
    recorder.seal_like(ledger, ledger.events(plain.run_id, upto=1)[0].payload)
    ended = run_function(fn, recorder, recorded_input(ledger, started))
    stopped = str(ended) if isinstance(ended, EffectRefusedError) else None
    return plain.run_id, stopped, recorder


def resume_function(
    ledger: Ledger, run_id: str, *, entry: str | None = None, allow_effects: bool = False
) -> ServingRecorder:
    """Continue a function run whose process died; see `agentledger.replay.resume_run`."""
    events = ledger.events(run_id)
    started = started_of(events)
    book = CallBook(ledger, run_id, events, upto=None)
    if book.finished:
        raise NotResumableError(run_id, f"it already ended ({events[-1].kind})")
    unanswered = [
        t for t in book.unserved_tools() if t.result is None and t.payload.get("effectful")
    ]
    if unanswered and not allow_effects:
        names = ", ".join(f"{t.tool} at position {t.called}" for t in unanswered)
        raise NotResumableError(
            run_id,
            f"effectful tool call {names} has no recorded result and may have run; "
            "pass allow_effects=True (CLI: --allow-effects) to call it again",
        )
    fn = resolve_function(ledger, run_id, started, entry)
    recorder = ServingRecorder(
        ledger,
        ledger.load(run_id),
        recorded_run_id=run_id,
        expected=events,
        prefix_end=len(events),
        write_prefix=False,
        beyond="write",
        book=book,
        live=True,
        gate=True,
        allow_effects=True,
    )
    recorder._prompt_texts = recorded_prompts(ledger, started)
    recorder.seal_like(ledger, events[0].payload)
    ended = run_function(fn, recorder, recorded_input(ledger, started))
    if isinstance(ended, ReplayDivergenceError):
        raise ended
    return recorder


def fork_function(
    ledger: Ledger,
    run_id: str,
    at: int,
    *,
    entry: str | None = None,
    allow_effects: bool = False,
    tags: Sequence[str] = (),
) -> str:
    """Start a new run repeating a function run up to ``at``, then live; its id."""
    events = ledger.events(run_id)
    started = started_of(events)
    fn = resolve_function(ledger, run_id, started, entry)
    texts = recorded_prompts(ledger, started)
    plain = ledger.record_run(
        started.agent,
        input=recorded_input(ledger, started),
        config=started.config,
        tags=list(tags),  # a fork inherits no tags: it names its parent instead
        parent_run_id=run_id,
        parent_position=at,
        relation="fork",
        overrides={"at": at},
        entry=_entry_of(fn, started),
        subject=ledger.subject_of(run_id),
    )
    recorder = ServingRecorder(
        ledger,
        ledger.load(plain.run_id),
        recorded_run_id=run_id,
        expected=events[:at],
        prefix_end=at,
        write_prefix=True,
        beyond="write",
        book=CallBook(ledger, run_id, events, upto=at),
        live=True,
        gate=True,
        allow_effects=allow_effects,
    )
    recorder._prompt_texts = texts
    recorder.seal_like(ledger, ledger.events(plain.run_id, upto=1)[0].payload)
    ended = run_function(fn, recorder, recorded_input(ledger, started))
    if isinstance(ended, ReplayDivergenceError | ReplayStopped):
        closer = RunRecorder(ledger, ledger.load(plain.run_id))
        closer.fail(ended)
        raise ended
    return plain.run_id


def _entry_of(fn: Callable[..., Any], started: RunStarted) -> EntryPoint | None:
    """The entry a new run records: where the function that ran lives (as recorded now)."""
    try:
        return entry_point(fn)
    except EntryError:
        return started.entry


def rerun_function_run(
    ledger: Ledger,
    run_id: str,
    overrides: Any,
    *,
    library: Any,
    allow_effects: bool,
    tags: Sequence[str] | None,
    entry: str | None,
) -> Any:
    """`rerun` of a function run: the `Overrides` it can apply (prompt versions) and its result.

    A function picks its own clients, model and parameters: a model or parameter override is
    refused. A new prompt version's text comes from ``library`` (CLI: ``--prompts FILE``).
    """
    from agentledger.replay._rerun import RerunResult, _answer

    changed = [
        name
        for name, value in (
            ("model", overrides.model),
            ("models", overrides.models),
            ("temperature", overrides.temperature),
            ("max_tokens", overrides.max_tokens),
            ("seed", overrides.seed),
            ("options", overrides.options),
        )
        if value
    ]
    if changed:
        msg = (
            f"run {run_id} was recorded from a function, which picks its own model and "
            f"parameters: a rerun cannot override {', '.join(changed)}; change the code and "
            "rerun (unchanged calls are served from the record), or give new prompt versions"
        )
        raise ReplayUsageError(msg)
    started = started_of(ledger.events(run_id, upto=1))
    by_name = {ref.name: role for role, ref in started.config.prompts.items()}
    prompts: dict[str, tuple[str, str]] = {}
    for key, version in overrides.prompt_versions.items():
        role = key if key in started.config.prompts else by_name.get(key)
        if role is None:
            known = ", ".join(sorted(started.config.prompts)) or "none"
            msg = f"run {run_id} has no prompt {key!r} (its prompts: {known})"
            raise ReplayUsageError(msg)
        name = started.config.prompts[role].name
        if library is None or not library.has(name, version):
            have = ", ".join(library.versions(name)) if library is not None else ""
            msg = (
                f"prompt {name!r} has no version {version!r} (known: {have or 'none'}); give "
                'its text with --prompts FILE ({"name": {"version": "text"}})'
            )
            raise ReplayUsageError(msg)
        prompts[role] = (version, library.text(name, version))
    new_id, stopped, recorder = rerun_function(
        ledger,
        run_id,
        prompts=prompts,
        overrides=overrides.to_json(),
        entry=entry,
        allow_effects=allow_effects,
        tags=tags,
    )
    info = ledger.run(new_id)
    return RerunResult(
        run_id=new_id,
        parent_run_id=run_id,
        status="stopped" if stopped else info.status,
        answer=_answer(ledger, new_id),
        stopped=stopped,
        served_model_calls=recorder.served_calls,
        live_model_calls=recorder.live_calls,
        served_tool_calls=recorder.served_tools,
        live_tool_calls=recorder.live_tools,
        error=None if stopped else run_problem(ledger, new_id),
    )
