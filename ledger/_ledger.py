"""The `Ledger` facade: what an application embeds.

Opens a store by URL, starts and records runs (through `RunRecorder`), reads events, runs and
blobs, verifies, exports and imports. All writes go through `_commit`, which turns catalogue
events into hashed envelopes on the `Run` aggregate and saves one batch (events, the blobs they
first refer to, and the runs index) in one transaction. Must not know agents or vendor SDKs.
"""

from __future__ import annotations

import inspect
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, cast
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError, StoredEvent

from agentledger.ledger._canonical import as_recorded, canonical_json_trusted, loads
from agentledger.ledger._chain import parent_mismatch
from agentledger.ledger._codec import unpack_blob
from agentledger.ledger._hashing import GENESIS, blob_ref, envelope_hash
from agentledger.ledger._limits import Limits
from agentledger.ledger._mapper import seal
from agentledger.ledger._ports import Clock, IdSource, RandomIds, SystemClock
from agentledger.ledger._records import (
    EVENT_PAGE_SIZE,
    VERIFY_PAGE,
    BlobRow,
    RecordedEvent,
    RunIndexUpdate,
    RunInfo,
    RunQuery,
    RunTotals,
    encode_blob,
)
from agentledger.ledger._store import DEFAULT_DURABILITY, DEFAULT_URL, Store, open_store
from agentledger.ledger._subjects import (
    ERASED,
    ERASURE_STREAM,
    Erased,
    SubjectKey,
    check_subject,
    sealed_parts,
)
from agentledger.ledger.errors import (
    ConcurrencyError,
    CorruptBlobError,
    CorruptEventError,
    ExportRefusedError,
    InvalidEventError,
    InvalidPayloadError,
    ReadOnlyDatabaseError,
    RunClosedError,
    StorageError,
    UnknownBlobError,
    UnknownRunError,
    UsageError,
)

if TYPE_CHECKING:
    from pydantic import ValidationError

    from agentledger.ledger._committer import GroupCommitter
    from agentledger.ledger._entry import PromptSpec
    from agentledger.ledger._erasure import ErasureResult
    from agentledger.ledger._logging import EventLogger
    from agentledger.ledger._privacy import RunPrivacy
    from agentledger.ledger._recording import AsyncRunStart, RunRecorder
    from agentledger.ledger._run import Run
    from agentledger.ledger._subject_keys import KeyTable
    from agentledger.ledger._tlog import LogHead, TransparencyLog
    from agentledger.ledger._verify import VerifyReport
    from agentledger.ledger.events import ConfigIdentity, EntryPoint, LedgerEvent, RunStarted
    from agentledger.ledger.redaction import RedactionPolicy

# Reading runs and their events needs none of the event catalogue's pydantic models, the
# redaction policy or the verifier: those modules are imported where they are used, so that
# `agentledger runs` starts without them.

__all__ = ["Head", "Ledger", "Prepared", "RunQuery", "Sealed"]

ENV_URL = "AGENTLEDGER_DB"


class _Default:
    """The type of `DEFAULT_REDACTION`: "the ledger's policy" (or "the default policy")."""

    def __repr__(self) -> str:
        return "DEFAULT_REDACTION"


DEFAULT_REDACTION = _Default()
"""Redaction left to the ledger: ``RedactionPolicy()`` for a ledger, the ledger's for a run."""


def _policy(redaction: RedactionPolicy | _Default | None) -> RedactionPolicy | None:
    from agentledger.ledger.redaction import RedactionPolicy

    if isinstance(redaction, _Default):
        return RedactionPolicy()
    checked: object = redaction  # callers without type checking may pass anything
    if checked is not None and not isinstance(checked, RedactionPolicy):
        msg = f"redaction= takes a RedactionPolicy or None, not {type(checked).__name__}"
        raise UsageError(msg)
    return redaction


class Ledger:
    """An event-sourced ledger of agent runs, over SQLite, PostgreSQL or memory.

    Open one with `Ledger.open(url)`; close it (or use it as a context manager) when done.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        log: EventLogger | None = None,
        limits: Limits | None = None,
        redaction: RedactionPolicy | _Default | None = DEFAULT_REDACTION,
        redaction_salt: bytes | None = None,
    ) -> None:
        if limits is not None and not isinstance(limits, Limits):
            raise UsageError(f"limits= takes a Limits, not {type(limits).__name__}")
        if not isinstance(redaction, _Default):
            redaction = _policy(redaction)  # refuses a wrong value at once
        self._redaction: RedactionPolicy | _Default | None = redaction
        self._salt = redaction_salt
        self._store = store
        self.clock: Clock = clock or SystemClock()
        self.ids: IdSource = ids or RandomIds()
        self.log = log
        self.limits: Limits = limits or Limits()
        self.page_size: int = EVENT_PAGE_SIZE
        """Events per query when a reader pages through a run (`iter_events`, export, replay).

        Long runs are read a page at a time, never held whole; a smaller page holds less.
        """

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        log: EventLogger | None = None,
        limits: Limits | None = None,
        create: bool = True,
        read_only: bool = False,
        redaction: RedactionPolicy | _Default | None = DEFAULT_REDACTION,
        redaction_salt: bytes | None = None,
        durability: str = DEFAULT_DURABILITY,
    ) -> Ledger:
        """Open the ledger at `url` (default: $AGENTLEDGER_DB, else ``sqlite:///agentledger.db``).

        ``create=False`` refuses a SQLite file that does not exist (`StorageError`) instead of
        creating it; ``read_only=True`` also opens it read-only (a file the process cannot
        write, an auditor's copy): for commands that only read.

        `limits` caps the size and depth of every payload and blob written or imported (default
        `Limits()`: 16 MiB and 256 levels).

        ``redaction`` is the policy every run records with unless it names its own (default
        ``RedactionPolicy()``: every kind of personal data and secret is redacted; ``None``
        redacts nothing). ``redaction_salt`` keys the ``hash`` action; by default the ledger
        generates one when a policy first needs it and keeps it in its own database.

        ``durability`` is how a SQLite file's commits wait for the disk: ``"normal"`` (default)
        survives the process being killed at any point, and a power loss may lose the last
        commits but never corrupts the file; ``"full"`` waits for the disk at every commit.
        Signing a checkpoint forces everything it covers to disk in either mode (see
        docs/storage.md). PostgreSQL commits are as durable as the server is configured.
        """
        if limits is not None and not isinstance(limits, Limits):
            raise UsageError(f"limits= takes a Limits, not {type(limits).__name__}")
        store = open_store(
            url or os.environ.get(ENV_URL) or DEFAULT_URL,
            create=create,
            read_only=read_only,
            durability=durability,
        )
        return cls(
            store,
            clock=clock,
            ids=ids,
            log=log,
            limits=limits,
            redaction=redaction,
            redaction_salt=redaction_salt,
        )

    @property
    def redaction(self) -> RedactionPolicy | None:
        """The policy every run records with unless it names its own (None: redact nothing).

        ``RedactionPolicy()`` unless the ledger was opened with another; made on first use, so
        that a ledger that only reads never builds it.
        """
        if isinstance(self._redaction, _Default):
            self._redaction = _policy(self._redaction)
        return self._redaction

    @redaction.setter
    def redaction(self, policy: RedactionPolicy | None) -> None:
        self._redaction = _policy(policy)

    @property
    def url(self) -> str:
        """The store's URL (password removed)."""
        return self._store.url

    @property
    def backend(self) -> str:
        """'sqlite', 'postgresql' or 'memory'."""
        return self._store.kind

    @property
    def recorder(self) -> Any:
        """The eventsourcing application recorder (projections follow its notification log)."""
        return self._store.recorder

    @property
    def durability(self) -> str:
        """How a SQLite file's commits wait for the disk: 'normal' or 'full' (see `open`)."""
        return self._store.durability

    @property
    def read_only(self) -> bool:
        """Whether the ledger was opened read-only (nothing is written; see `Ledger.open`)."""
        return self._store.read_only

    def sqlalchemy_url(self) -> tuple[str, str | None]:
        """A SQLAlchemy URL for the ledger's database (with credentials) and its schema."""
        return self._store.sqlalchemy_url()

    def close(self) -> None:
        """Release the store's connections (after the commits in flight are written)."""
        committer = self.__dict__.get("_group_committer")
        if committer is not None:
            committer.close()
        self._store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Recording -------------------------------------------------------------------------------

    def record_run(
        self,
        agent: str,
        input: Any = None,  # noqa: A002 - the run's input, as users call it
        *,
        config: ConfigIdentity | None = None,
        tags: Sequence[str] = (),
        run_id: str | None = None,
        parent_run_id: str | None = None,
        parent_position: int | None = None,
        relation: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        prompts: Mapping[str, PromptSpec] | None = None,
        entry: EntryPoint | None = None,
        redaction: RedactionPolicy | _Default | None = DEFAULT_REDACTION,
        subject: str | None = None,
    ) -> RunRecorder:
        """Start a run and return its recorder (a context manager that completes the run).

        ``with ledger.record_run("my-agent", input=question) as run: ...`` records RunStarted at
        once, RunCompleted when the block ends, and RunFailed (then re-raises) if it raises.
        ``prompts`` (role -> text, or (version, text)) are recorded in the configuration
        identity and read back with ``run.prompt_text(role)``. ``redaction`` overrides the
        ledger's policy for this run (``None``: redact nothing); the policy used is recorded in
        the configuration identity (``config.redaction``), never the salt. ``subject`` ties
        the run's content to a data subject: every content value (input, messages, responses,
        tool arguments and results, deltas, the answer) is stored as a blob sealed under the
        subject's key, which `erase_subject` destroys.
        """
        from agentledger.ledger._recording import RunRecorder

        started, run_id, blobs, texts, privacy = self._starting(
            agent,
            input,
            config=config,
            tags=tags,
            run_id=run_id,
            parent_run_id=parent_run_id,
            parent_position=parent_position,
            relation=relation,
            overrides=overrides,
            prompts=prompts,
            entry=entry,
            redaction=redaction,
        )
        started, key = self._subject_start(started, run_id, subject)
        return RunRecorder._start(
            self, started, run_id, blobs=blobs, prompt_texts=texts, privacy=privacy, subject=key
        )

    def arecord_run(
        self,
        agent: str,
        input: Any = None,  # noqa: A002 - the run's input, as users call it
        *,
        config: ConfigIdentity | None = None,
        tags: Sequence[str] = (),
        run_id: str | None = None,
        parent_run_id: str | None = None,
        parent_position: int | None = None,
        relation: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        prompts: Mapping[str, PromptSpec] | None = None,
        entry: EntryPoint | None = None,
        redaction: RedactionPolicy | _Default | None = DEFAULT_REDACTION,
        subject: str | None = None,
    ) -> AsyncRunStart:
        """`record_run` for async code: ``async with ledger.arecord_run(...) as run:``.

        RunStarted is committed by a worker thread, and so is everything the run's awaitable
        methods (``await run.amodel_call(...)``, ``atool``, ``adelta``...) record: the event
        loop never waits on database I/O. The block's end awaits RunCompleted (or RunFailed).
        Arguments are checked at the call, before anything is written.
        """
        from agentledger.ledger._recording import AsyncRunStart

        started, run_id, blobs, texts, privacy = self._starting(
            agent,
            input,
            config=config,
            tags=tags,
            run_id=run_id,
            parent_run_id=parent_run_id,
            parent_position=parent_position,
            relation=relation,
            overrides=overrides,
            prompts=prompts,
            entry=entry,
            redaction=redaction,
        )
        started, key = self._subject_start(started, run_id, subject)
        return AsyncRunStart(self, started, run_id, blobs, texts, privacy=privacy, subject=key)

    def record_function(
        self,
        fn: Callable[..., Any],
        input: Any = None,  # noqa: A002 - the run's input, as users call it
        *,
        agent: str | None = None,
        tags: Sequence[str] | None = None,
        prompts: Mapping[str, PromptSpec] | None = None,
        config: ConfigIdentity | None = None,
        run_id: str | None = None,
        redaction: RedactionPolicy | _Default | None = DEFAULT_REDACTION,
        subject: str | None = None,
    ) -> tuple[Any, str]:
        """Record ``fn(run, input)`` as a run; returns (what it returned, the run id).

        ``fn`` is a module-level function (see `recorded_function` for a decorator form):
        RunStarted records its import path ``module:qualname``, file and source hash, so that
        ``agentledger replay RUN`` can import it and run it again against the record. The agent
        name defaults to its qualname. ``input`` must be JSON: the function receives it as the
        ledger records it (the form replay hands back). ``prompts`` maps roles to prompt texts
        (or (version, text)), recorded in the configuration identity; the function reads them
        with ``run.prompt_text(role)``, which is what lets a rerun try new versions. When ``fn``
        raises, the run records RunFailed and the exception propagates, with a note naming the
        run. The function receives the input as recorded: redacted by the run's policy
        (``redaction``, as for `record_run`). An ``async def`` function runs on its own event
        loop (``asyncio.run``); inside a running loop, use `arecord_function`. Lambdas, nested
        functions and bound methods are refused (`EntryError`): replay could not import them back.
        """
        from agentledger.ledger._entry import RecordedFunction

        function = fn.function if isinstance(fn, RecordedFunction) else fn
        if inspect.iscoroutinefunction(function):
            import asyncio  # only an async function's run pays for it

            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(
                    self.arecord_function(
                        fn,
                        input,
                        agent=agent,
                        tags=tags,
                        prompts=prompts,
                        config=config,
                        run_id=run_id,
                        redaction=redaction,
                        subject=subject,
                    )
                )
            msg = (
                f"{function.__qualname__} is async and an event loop is running: "
                "use await ledger.arecord_function(...)"
            )
            raise UsageError(msg)
        options = self._function_options(fn, input, agent, tags, prompts, config, run_id)
        options["redaction"] = redaction
        options["subject"] = subject
        recorder = self.record_run(**options)
        try:
            with recorder as run:
                result = function(run, run.input)
        except Exception as error:
            error.add_note(f"agentledger: run {recorder.run_id} recorded it as RunFailed")
            raise
        return result, recorder.run_id

    async def arecord_function(
        self,
        fn: Callable[..., Any],
        input: Any = None,  # noqa: A002 - the run's input, as users call it
        *,
        agent: str | None = None,
        tags: Sequence[str] | None = None,
        prompts: Mapping[str, PromptSpec] | None = None,
        config: ConfigIdentity | None = None,
        run_id: str | None = None,
        redaction: RedactionPolicy | _Default | None = DEFAULT_REDACTION,
        subject: str | None = None,
    ) -> tuple[Any, str]:
        """`record_function` for async code: awaits ``fn(run, input)`` in an async run.

        A plain (sync) function runs in a worker thread, so it may block without stalling the
        event loop.
        """
        from agentledger.ledger._entry import RecordedFunction

        function = fn.function if isinstance(fn, RecordedFunction) else fn
        options = self._function_options(fn, input, agent, tags, prompts, config, run_id)
        options["redaction"] = redaction
        options["subject"] = subject
        start = self.arecord_run(**options)
        recorder = await start
        try:
            async with recorder as run:
                if inspect.iscoroutinefunction(function):
                    result = await function(run, run.input)
                else:
                    import asyncio

                    result = await asyncio.to_thread(function, run, run.input)
        except Exception as error:
            error.add_note(f"agentledger: run {recorder.run_id} recorded it as RunFailed")
            raise
        return result, recorder.run_id

    def _function_options(  # noqa: PLR0917 - the private twin of two public signatures
        self,
        fn: Callable[..., Any],
        input: Any,  # noqa: A002 - the run's input
        agent: str | None,
        tags: Sequence[str] | None,
        prompts: Mapping[str, PromptSpec] | None,
        config: ConfigIdentity | None,
        run_id: str | None,
    ) -> dict[str, Any]:
        from agentledger.ledger._entry import RecordedFunction, entry_point

        entry = entry_point(fn)
        marked = fn if isinstance(fn, RecordedFunction) else None
        qualname = entry.path.partition(":")[2]
        return {
            "agent": agent or (marked.agent if marked else None) or qualname,
            "input": as_recorded(input),
            "config": config,
            "tags": tags if tags is not None else (marked.tags if marked else ()),
            "prompts": prompts if prompts is not None else (marked.prompts if marked else None),
            "run_id": run_id,
            "entry": entry,
        }

    def _starting(
        self,
        agent: str,
        input: Any,  # noqa: A002 - the run's input
        *,
        config: ConfigIdentity | None,
        tags: Sequence[str],
        run_id: str | None,
        parent_run_id: str | None,
        parent_position: int | None,
        relation: str | None,
        overrides: Mapping[str, Any] | None,
        prompts: Mapping[str, PromptSpec] | None,
        entry: EntryPoint | None,
        redaction: RedactionPolicy | _Default | None = DEFAULT_REDACTION,
    ) -> tuple[RunStarted, str, dict[str, bytes], dict[str, str], RunPrivacy | None]:
        """A run's RunStarted (checked, its input redacted), id, prompt blobs and texts, privacy.

        The policy is ``redaction``, else the one ``config`` records (a rerun keeps its
        parent's), else the ledger's; it is recorded in the configuration identity.
        """
        from agentledger.ledger._entry import prompt_refs
        from agentledger.ledger._privacy import policy_of, policy_setting
        from agentledger.ledger.events import ConfigIdentity, RunStarted

        if isinstance(tags, str):
            raise InvalidEventError("RunStarted", "tags: give a list of tags, not one string")
        identity = config or ConfigIdentity()
        blobs: dict[str, bytes] = {}
        texts: dict[str, str] = {}
        if prompts:
            refs, texts, blobs = prompt_refs(prompts)
            identity = identity.model_copy(update={"prompts": {**identity.prompts, **refs}})
        if isinstance(redaction, _Default):
            known, recorded = policy_of(identity.redaction)
            policy = recorded if known else self.redaction
        else:
            policy = _policy(redaction)
        identity = identity.model_copy(update={"redaction": policy_setting(policy)})
        privacy = self.run_privacy(policy)
        if privacy is not None:
            input = privacy.value(input, "RunStarted", "input", changed=True)  # noqa: A001
        started = self._event(
            RunStarted,
            agent=agent,
            input=input,
            config=identity,
            tags=list(tags),
            parent_run_id=parent_run_id,
            parent_position=parent_position,
            relation=relation,
            overrides=dict(overrides or {}),
            entry=entry,
        )
        assert isinstance(started, RunStarted)
        return started, run_id or self.ids.new_run_id(), blobs, texts, privacy

    # Data subjects ---------------------------------------------------------------------------

    @property
    def _keys(self) -> KeyTable:
        """The subject key table of this ledger's database."""
        table: KeyTable | None = self.__dict__.get("_key_table")
        if table is None:
            from agentledger.ledger._subject_keys import key_table

            table = self.__dict__["_key_table"] = key_table(self._store)
        return table

    def _subject_key(self, subject: str, run_id: str) -> SubjectKey:
        """``subject``'s key (made on first use), noting that ``run_id`` seals content under it."""
        check_subject(subject)
        if self.read_only:
            raise UsageError(f"cannot record content for subject {subject!r}: read-only ledger")
        try:
            key = self._keys.key_for(subject, self.clock.now(), create=True)
            assert key is not None
            self._keys.link(key.key_id, run_id)
        except (PersistenceError, sqlite3.Error) as e:
            raise StorageError(self.url, f"cannot store the subject's key: {e}") from e
        return key

    def _subject_start(
        self, started: RunStarted, run_id: str, subject: str | None
    ) -> tuple[RunStarted, SubjectKey | None]:
        """RunStarted naming the subject's key id, and the key (None: a run with no subject)."""
        if subject is None:
            return started, None
        key = self._subject_key(subject, run_id)
        return started.model_copy(update={"subject_key": key.key_id}), key

    def existing_subject_key(self, subject: str) -> SubjectKey | None:
        """``subject``'s key if it has one (nothing is created or written)."""
        check_subject(subject)
        return self._keys.key_for(subject, "", create=False)

    def run_subject_key(self, started: Mapping[str, Any]) -> SubjectKey | None:
        """The key of the subject a run is tied to (``started``: its RunStarted payload).

        None for a run with no subject, or one whose subject was erased. What a replay of the
        run seals with, so that it reproduces the run's refs.
        """
        key_id = started.get("subject_key")
        if not isinstance(key_id, str):
            return None
        return self._keys.keys([key_id]).get(key_id)

    def subject_of(self, run_id: str) -> str | None:
        """The data subject a run is tied to (None: none, or erased since)."""
        events = self.events(run_id, upto=1)
        key_id = events[0].payload.get("subject_key") if events else None
        return self._keys.subject_of(key_id) if isinstance(key_id, str) else None

    def erased_positions(self, run_id: str) -> list[int]:
        """The positions of a run whose content (or part of it) was erased (see `erase_subject`).

        Empty, after one read of the erasure stream, for a run no erasure named.
        """
        from agentledger.ledger._erasure import erased_positions

        rid = str(self._uuid(run_id))
        if not any(rid in (e.payload.get("runs") or []) for e in self.erasures()):
            return []
        return erased_positions(self, rid)

    def erase_subject(
        self, subject: str, *, reason: str, requested_by: str, vacuum: bool = True
    ) -> ErasureResult:
        """Destroy ``subject``'s key, so their sealed content reads as ``[erased]`` everywhere.

        Records an ErasureRecorded fact (who asked, why, which runs, how many blobs) in the
        ledger's erasure stream, deletes the key (an erasure cut short after its fact is
        finished by asking for it again: the fact is not recorded twice; until then `verify`
        names it "erasure unfinished"), then makes the deleted key unrecoverable from the database
        files (SQLite: secure delete, a VACUUM unless ``vacuum=False``, a WAL checkpoint;
        PostgreSQL: a VACUUM of the key tables). Events and blobs are untouched, so `verify`
        still passes. Raises, writing nothing: `UnknownSubjectError` for a subject with no key
        (naming when it was erased, if it was), `UsageError` for an empty subject, reason or
        requester, `ReadOnlyDatabaseError` for a ledger opened read-only.
        """
        from agentledger.ledger._erasure import erase_subject

        return erase_subject(self, subject, reason=reason, requested_by=requested_by, vacuum=vacuum)

    def subject_runs(self, subject: str) -> list[str]:
        """The runs that sealed content for ``subject`` (empty: no key, or erased)."""
        check_subject(subject)
        key = self._keys.key_for(subject, "", create=False)
        return [] if key is None else self._keys.runs_of(key.key_id)

    def scrub_files(self, *, vacuum: bool = True, tables: Sequence[str] = ()) -> None:
        """Make rows deleted from this database unrecoverable from its files.

        SQLite: a VACUUM (``vacuum``) rewrites the file without its free pages, then the WAL is
        checkpointed and truncated. PostgreSQL: a VACUUM (FULL, with ``vacuum``) of the subject
        key tables and of ``tables`` (derived tables of the ledger's schema that were cleared).
        `erase_subject` calls it; call it again after rebuilding derived data.
        """
        if self.read_only:
            raise ReadOnlyDatabaseError(self.url, "opened read-only: nothing to scrub")
        try:
            self._keys.scrub(vacuum=vacuum, tables=tables)
        except (PersistenceError, sqlite3.Error) as e:
            raise StorageError(self.url, f"cannot scrub the database files: {e}") from e

    def erasures(self) -> list[RecordedEvent]:
        """The ErasureRecorded facts, oldest first (the ledger's erasure stream)."""
        return self._read_events(ERASURE_STREAM, tolerant=False, known=False)[0]

    def run_privacy(self, policy: RedactionPolicy | None) -> RunPrivacy | None:
        """A run's redaction under ``policy`` (keyed by the ledger's salt); None for no policy."""
        if policy is None:
            return None
        from agentledger.ledger._privacy import RunPrivacy
        from agentledger.ledger.redaction import shared_redactor

        salt = self.redaction_salt() if policy.hashes else None
        return RunPrivacy(policy, salt, redactor=shared_redactor(policy, salt))

    def redaction_salt(self) -> bytes:
        """The ledger's salt for the ``hash`` action: given at open, else kept in its database.

        Generated on first need and stored in the ledger's settings table, so every run of the
        ledger hashes one value to one placeholder. It is never written into events or exports.
        """
        if self._salt is None:
            self._salt = self._store.salt()
        return self._salt

    def append(self, run_id: str, *events: LedgerEvent) -> list[RecordedEvent]:
        """Append events to an existing run in one transaction (low-level; prefer a recorder)."""
        prepared = [self._prepare(event) for event in events]
        run = self.load(run_id)
        if run.status != "running" and any(e.kind != "RunAnnotated" for e in prepared):
            raise RunClosedError(run_id, run.status)
        return self._commit(run, prepared, {})

    def annotate(
        self,
        run_id: str,
        *,
        author: str,
        note: str,
        reason: str | None = None,
        about_position: int | None = None,
        labels: Sequence[str] = (),
    ) -> RecordedEvent:
        """Append a human note to any run (also a finished one): appended, never an edit.

        The note and reason are redacted by the ledger's policy first; a run may be closed, so
        no PolicyDecided can follow it: each kind redacted is named in a ``redacted:KIND`` label.
        """
        from agentledger.ledger.events import RunAnnotated

        event: LedgerEvent = RunAnnotated(
            author=author,
            note=note,
            reason=reason,
            about_position=about_position,
            labels=list(labels),
        )
        privacy = self.run_privacy(self.redaction)
        if privacy is not None:
            event = privacy.event(event)
            decided = privacy.decided()
            if decided is not None:
                found = [f"redacted:{r.kind}" for r in decided.redactions]
                event = event.model_copy(
                    update={"labels": [*labels, *(f for f in found if f not in labels)]}
                )
        return self.append(run_id, event)[0]

    def load(self, run_id: str) -> Run:
        """Rebuild a run's aggregate from its events."""
        uuid = self._uuid(run_id)
        run: Run | None = None
        for domain_event in self._store.events.get(uuid):
            run = cast("Run", cast("Any", domain_event).mutate(run))
        if run is None:
            raise UnknownRunError(run_id)
        return run

    def put_blobs(self, values: Iterable[Any]) -> list[str]:
        """Store JSON values as blobs outside any run (tests and imports); return their refs."""
        rows = []
        for index, value in enumerate(values):
            canonical = self.limits.canonical(value, f"blob {index}")
            rows.append(encode_blob(blob_ref(canonical), canonical))
        if rows:
            self._store.recorder.insert_events([], blobs=rows)
        return [row.ref for row in rows]

    # Reading ---------------------------------------------------------------------------------

    def events(
        self,
        run_id: str,
        *,
        after: int = 0,
        upto: int | None = None,
        kinds: Collection[str] | None = None,
    ) -> list[RecordedEvent]:
        """A run's events in position order (positions after `after`, up to `upto`).

        With `kinds`, only events of those kinds: the others are not decoded.
        """
        return self._read_events(run_id, after=after, upto=upto, kinds=kinds)[0]

    def iter_events(
        self,
        run_id: str,
        *,
        after: int = 0,
        upto: int | None = None,
        page_size: int | None = None,
    ) -> Iterator[RecordedEvent]:
        """A run's events in position order, read ``page_size`` at a time (bounded memory).

        The same events as `events` (positions after ``after``, up to ``upto``), for reading a
        long run without holding it whole: each page is one query of the store's position
        range (default: the ledger's `page_size`). Raises `UnknownRunError` for a run the
        ledger does not hold, `UsageError` for a ``page_size`` below 1.
        """
        if page_size is None:
            page_size = self.page_size
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            msg = f"page_size must be a positive integer, got {page_size!r}"
            raise UsageError(msg)
        uuid = self._uuid(run_id)
        rid = str(uuid)
        select = self._store.recorder.select_events
        position = after
        while upto is None or position < upto:
            stored = select(uuid, gt=position or None, lte=upto, limit=page_size)
            if not stored:
                if position == after == 0 and self._store.recorder.get_run(rid) is None:
                    raise UnknownRunError(run_id)
                return
            for s in stored:
                yield RecordedEvent.from_state(rid, s.originator_version, s.topic, s.state)
            position = stored[-1].originator_version
            if len(stored) < page_size:
                return

    def last_event(self, run_id: str) -> RecordedEvent:
        """A run's last stored event, in one query (the runs index is not consulted).

        Raises `UnknownRunError` for a run the ledger does not hold.
        """
        uuid = self._uuid(run_id)
        stored = self._store.recorder.select_events(uuid, desc=True, limit=1)
        if not stored:
            raise UnknownRunError(run_id)
        s = stored[0]
        return RecordedEvent.from_state(str(uuid), s.originator_version, s.topic, s.state)

    def _read_events(
        self,
        run_id: str,
        *,
        after: int = 0,
        upto: int | None = None,
        tolerant: bool = False,
        known: bool = True,
        kinds: Collection[str] | None = None,
    ) -> tuple[list[RecordedEvent], dict[int, str]]:
        """A run's stored events, decoded, and the reasons of those that would not decode.

        An unreadable event raises `CorruptEventError`; with `tolerant` it becomes a stand-in
        record instead and its position maps to the reason (what `verify` reports). A stream
        with no events raises `UnknownRunError` unless ``known=False`` (the erasure stream).
        With `kinds`, events of other kinds are left out undecoded.
        """
        uuid = self._uuid(run_id)
        stored = self._store.recorder.select_events(uuid, gt=after or None, lte=upto)
        if known and not stored and after == 0 and self._store.recorder.get_run(str(uuid)) is None:
            raise UnknownRunError(run_id)
        rid = str(uuid)
        records: list[RecordedEvent] = []
        unreadable: dict[int, str] = {}
        for s in stored:
            if kinds is not None and s.topic not in kinds:
                continue
            try:
                records.append(
                    RecordedEvent.from_state(rid, s.originator_version, s.topic, s.state)
                )
            except CorruptEventError as e:
                if not tolerant:
                    raise
                unreadable[s.originator_version] = e.detail
                records.append(RecordedEvent.unreadable(rid, s.originator_version, s.topic))
        return records, unreadable

    def recorded_entry(self, run_id: str) -> bool:
        """Whether this ledger recorded the run from a user function (`record_function`).

        False for a run imported from a file, even when its RunStarted names an entry point:
        replay runs the code a record names only when this ledger made that record.
        """
        return self._store.recorder.recorded_entry(str(self._uuid(run_id)))

    def run(self, run_id: str) -> RunInfo:
        """A run's row in the runs index."""
        info = self._store.recorder.get_run(str(self._uuid(run_id)))
        if info is None:
            raise UnknownRunError(run_id)
        return info

    def runs(self, query: RunQuery | None = None, **filters: Any) -> list[RunInfo]:
        """Runs, newest first, filtered by status, agent, tag and start time.

        ``limit=N`` reads only the N newest matching runs (and only their tags).
        """
        query = query or RunQuery(**filters)
        if query.limit is not None and (isinstance(query.limit, bool) or query.limit < 0):
            raise UsageError(f"runs: limit must be a whole number >= 0, got {query.limit!r}")
        return self._store.recorder.list_runs(query)

    def count_runs(self, query: RunQuery | None = None, **filters: Any) -> int:
        """How many runs `runs` would list for the same filters, without a limit."""
        return self._store.recorder.count_runs(query or RunQuery(**filters))

    def run_ids(self) -> list[str]:
        """Every run id with events, read from the events themselves (not the erasure stream)."""
        return [r for r in self._store.recorder.all_run_ids() if r != ERASURE_STREAM]

    def notifications(
        self, after: int = 0, limit: int = 100, *, stop: int | None = None
    ) -> list[tuple[int, RecordedEvent]]:
        """Events of every run in commit order, after notification id `after` (projections).

        Returns up to `limit` pairs of (notification id, event), ids ascending and at most
        `stop` when given. Ids are the ledger-wide order and never appear below one already
        read. On PostgreSQL they are given after commit (docs/postgresql.md, "The ledger-wide
        order") and are dense, except among events recorded before schema version 6, which
        keep the ids they had (a rolled-back write could leave one unused).
        """
        if limit < 1:
            raise UsageError(f"notifications: limit must be at least 1, got {limit}")
        found = self._store.recorder.select_notifications(
            after, limit, stop=stop, inclusive_of_start=False
        )
        run_ids: dict[Any, str] = {}
        out = []
        for n in found:
            run_id = run_ids.get(n.originator_id)
            if run_id is None:
                run_id = run_ids[n.originator_id] = str(UUID(str(n.originator_id)))
            record = RecordedEvent.from_state(run_id, n.originator_version, n.topic, n.state)
            out.append((n.id, record))
        return out

    def max_notification_id(self) -> int:
        """The id of the last event committed to any run (0 when the ledger is empty)."""
        return int(self._store.recorder.max_notification_id() or 0)

    def blob(self, ref: str) -> Any:
        """The JSON value stored under `ref`."""
        found = self.blobs([ref])
        if ref not in found:
            raise UnknownBlobError(ref)
        return found[ref]

    def blobs(self, refs: Sequence[str]) -> dict[str, Any]:
        """The JSON values stored under the refs that exist.

        A blob sealed for a data subject is opened with the subject's key; once the subject is
        erased it reads as `ERASED` (the text ``[erased]``).
        """
        return self._blobs(refs, {})

    def _blobs(self, refs: Sequence[str], keys: dict[str, SubjectKey | None]) -> dict[str, Any]:
        """`blobs`, with the subject keys already looked up in ``keys`` (added to it)."""
        values: dict[str, Any] = {}
        sealed: dict[str, tuple[str, str]] = {}
        for ref, data in self.blob_bytes(refs).items():
            parts = sealed_parts(data)
            if parts is None:
                values[ref] = loads(data)
            else:
                sealed[ref] = parts
        if not sealed:
            return values
        wanted = {key_id for key_id, _ in sealed.values()} - set(keys)
        if wanted:
            found = self._keys.keys(wanted)
            keys.update({key_id: found.get(key_id) for key_id in wanted})
        for ref, (key_id, text) in sealed.items():
            values[ref] = _opened(ref, keys.get(key_id), text)
        return values

    def _node_value(self, row: BlobRow, keys: dict[str, SubjectKey | None]) -> Any:
        """One stored blob's JSON value (`_blobs` of one row already read)."""
        try:
            data = unpack_blob(row.encoding, row.data)
        except ValueError as e:
            raise CorruptBlobError(row.ref, f"{row.encoding}: {e}") from None
        parts = sealed_parts(data)
        if parts is None:
            return loads(data)
        key_id, text = parts
        if key_id not in keys:
            keys[key_id] = self._keys.keys([key_id]).get(key_id)
        return _opened(row.ref, keys[key_id], text)

    def blob_bytes(self, refs: Sequence[str]) -> dict[str, bytes]:
        """The canonical bytes stored under the refs that exist.

        Raises `CorruptBlobError` when a stored blob no longer unpacks.
        """
        found: dict[str, bytes] = {}
        for ref, data in self._blobs_for_verify(refs).items():
            if isinstance(data, CorruptBlobError):
                raise data
            found[ref] = data
        return found

    def _blobs_for_verify(
        self, refs: Sequence[str], *, parents: bool = False
    ) -> dict[str, bytes | CorruptBlobError]:
        """Like `blob_bytes`, with each blob that does not unpack given as its error.

        With ``parents``, also a blob whose parent column disagrees with its content (see
        `_chain`): what `verify` reports as altered. Reads never use the column for what a
        chain holds, so for them it is no error.
        """
        rows: Mapping[str, BlobRow] = self._store.recorder.get_blobs(list(refs))
        found: dict[str, bytes | CorruptBlobError] = {}
        for ref, row in rows.items():
            try:
                data = unpack_blob(row.encoding, row.data)
            except ValueError as e:
                found[ref] = CorruptBlobError(ref, f"{row.encoding}: {e}")
                continue
            mismatch = parent_mismatch(row.parent, data) if parents else None
            found[ref] = data if mismatch is None else CorruptBlobError(ref, mismatch)
        return found

    def _blobs_with_parents(self, refs: Sequence[str]) -> dict[str, bytes | CorruptBlobError]:
        """`_blobs_for_verify` checking the parent column too (what `verify` reads)."""
        return self._blobs_for_verify(refs, parents=True)

    def conversation(self, ref: str) -> list[Any]:
        """The messages of a conversation chain, oldest first, from its head node's ref."""
        return self.conversations([ref])[ref]

    def conversations(self, refs: Sequence[str]) -> dict[str, list[Any]]:
        """The messages of each conversation chain at ``refs`` (head nodes), oldest first.

        Reads the nodes with `message_nodes`, so the chains of a run's model calls, given
        together with their responses' refs, take one query however long the run; a chain that
        passes through another given head reuses its messages.
        """
        nodes = self.message_nodes(refs)
        out: dict[str, list[Any]] = {}
        for head in refs:
            if head in out:
                continue
            collected: list[Any] = []
            prefix: list[Any] = []
            current: str | None = head
            for _ in range(len(nodes) + 1):  # a chain visits each node once: more is a loop
                if current is None:
                    break
                if current != head and current in out:
                    prefix = out[current]
                    break
                node = nodes[current]
                if node.get("message") is not None:
                    collected.append(node["message"])
                current = node.get("parent_ref")
            else:
                raise CorruptBlobError(head, "the conversation chain loops")
            collected.reverse()
            out[head] = prefix + collected
        return out

    def message_nodes(self, refs: Sequence[str]) -> dict[str, Any]:
        """Every node of the conversation chains at ``refs``, in one query when it can.

        One recursive query reads the rows of every chain along the blobs' parent column (see
        `_chain`); the chains are then followed by content, each node decoded as it is
        reached, so the column only decides what is read ahead, never what a chain holds. A
        parent the query did not return (a row from before the column, or a column that
        disagrees with its content) starts one more such query. Raises `UnknownBlobError` for
        a node that is not stored and `CorruptBlobError` for one that is not a node.
        """
        nodes: dict[str, Any] = {}
        keys: dict[str, SubjectKey | None] = {}  # a chain's subject keys, looked up once
        rows: dict[str, BlobRow] = {}
        wanted = list(dict.fromkeys(refs))
        while wanted:
            rows.update(self._store.recorder.get_chains(wanted))
            missing: dict[str, None] = {}
            asked = set(wanted)
            reached = wanted[::-1]
            while reached:
                ref = reached.pop()
                if ref in nodes:
                    continue
                row = rows.get(ref)
                if row is None:
                    if ref in asked:
                        raise UnknownBlobError(ref)
                    missing[ref] = None  # read by the next query
                    continue
                node = self._node_value(row, keys)
                if isinstance(node, Erased):  # the rest of the chain is sealed with it
                    node = {"message": ERASED, "parent_ref": None}
                if not isinstance(node, dict):
                    raise CorruptBlobError(ref, "not a conversation node")
                nodes[ref] = node
                parent = node.get("parent_ref")
                if parent is not None and not isinstance(parent, str):
                    raise CorruptBlobError(ref, "the node's parent_ref is not a ref")
                if parent is not None and parent not in nodes:
                    reached.append(parent)
            wanted = list(missing)
        return nodes

    # Verification ----------------------------------------------------------------------------

    def verify(
        self,
        run_id: str | None = None,
        *,
        checkpoint: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        verifier_keys: Sequence[str] = (),
        page_size: int = VERIFY_PAGE,
        progress: Callable[[int, int], None] | None = None,
        allow_uncovered: bool = False,
    ) -> VerifyReport:
        """Recompute every hash (one run, or all) and report what is broken, by run and position.

        ``progress``, when given, is called after each page with the events read so far and
        the number the runs index counts (what a progress line shows on long verifies).

        Reads `page_size` events a query (every run at once in key order, or one run by
        position range) and keeps only each run's chain head and a few facts between pages, so
        memory does not grow with the length of a run.

        With `checkpoint` (a signed checkpoint's text, a checkpoint file, a directory of
        published checkpoints, or a list of them) and the `verifier_keys` that sign them, also
        check each signature, re-derive each checkpoint's root from the events' hashes, check
        that today's log extends it, and that no two checkpoints of one size disagree: the
        findings are in ``report.log_problems`` (re-chained, truncated, rolled back, forked,
        bad signature), with the run and position where they can be named. With a `run_id`, the
        run's events must be covered by the largest checkpoint that holds: those recorded after
        it are "not covered" (a run inserted since the last checkpoint, however old its times
        look, is not vouched for), unless `allow_uncovered`, which lists them instead in the
        checkpoint check's ``run_not_covered``.

        Also checks each run's runs-index row and tags against its events, and that no run was
        started from a position past its parent's last event. Without a signed checkpoint a cut
        tail that took the end event with it, under an index row rewritten to match, cannot be
        told from a run still recording (see `agentledger.ledger._verify`).
        """
        from agentledger.ledger._verify import forks_past_end
        from agentledger.ledger._verify_pages import PagedVerify

        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise UsageError(f"verify: page_size must be a whole number >= 1, got {page_size!r}")
        from agentledger.ledger._sealed_keys import SealedKeys

        hashes: dict[str, dict[int, bytes]] | None = {} if checkpoint is not None else None
        sealed_keys = SealedKeys(self)
        paged = PagedVerify(
            self._store.recorder,
            self._blobs_with_parents,
            page_size,
            hashes,
            streams=frozenset({ERASURE_STREAM}),
            progress=progress,
            check_sealed=sealed_keys.check,
        )
        if run_id:
            rid = str(self._uuid(run_id))
            info = self._store.recorder.get_run(rid)
            paged.one_run(rid, info)
            if info is None and not paged.has_events(rid):
                raise UnknownRunError(run_id)
            # the runs started from this one, as the index lists them
            children = self._store.recorder.child_run_ids(rid)
            paged.starts += [
                r for c in children for r in self._read_events(c, upto=1, tolerant=True)[0]
            ]
        else:
            paged.every_run({info.run_id: info for info in self.runs()})
        report = paged.report
        report.problems += forks_past_end(paged.starts, paged.ends)
        if paged.sealed:  # sealed for a data subject: erased once the subject's key is gone
            live = self._keys.keys(set(paged.sealed.values()))
            gone = [key_id for key_id in paged.sealed.values() if key_id not in live]
            report.blobs_erased = len(gone)
            report.blobs_erased_unrecorded = sum(k not in sealed_keys.recorded for k in gone)
        if checkpoint is not None:
            from agentledger.ledger._checkpoints import verify_checkpoints

            assert hashes is not None
            verify_checkpoints(
                self.transparency_log,
                checkpoint,
                verifier_keys,
                report,
                recomputed=hashes,
                complete=run_id is None,
                allow_uncovered=allow_uncovered,
            )
        return report

    def export_run(
        self,
        run_id: str,
        path: str | os.PathLike[str],
        *,
        checkpoint: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Write one run (events and every blob it refers to) to a JSONL file.

        With `checkpoint` (a signed checkpoint's text that this ledger's log reproduces), the
        file also carries it and an inclusion proof of each event it covers, so that
        `verify_export` can check the run offline with nothing but the verifier key.
        Refuses (`ExportRefusedError`, before opening anything) a `path` that is this ledger's
        own database file or one of its ``-wal``/``-shm``/``-journal`` files, however spelled.
        ``progress`` is told (lines written, lines in all) every thousand lines and at the end.
        """
        from agentledger.ledger._export import export_run

        self.run(run_id)
        own = self._store.own_file(path)
        if own is not None:
            reason = f"it is this ledger's own database file ({own}); writing it would destroy it"
            raise ExportRefusedError(os.fspath(path), reason)
        try:
            return export_run(self, run_id, path, checkpoint, progress)
        except OSError as e:
            raise ExportRefusedError(os.fspath(path), f"cannot write the file: {e}") from e

    def import_file(
        self,
        path: str | os.PathLike[str],
        *,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> str:
        """Verify an export file and write its run; refuses a broken file and writes nothing.

        Memory stays bounded however long the run: a first pass checks the file line by line
        (keeping a small index in a scratch database in the temporary folder), a second reads
        it again to write it, and refuses a file that changed in between. ``progress`` is told
        ``("checked", lines read, lines in all)`` every thousand lines of the first pass and
        ``("written", events written, events in all)`` after each batch the second commits.
        """
        from agentledger.ledger._export import import_run

        return import_run(self, path, progress)

    # Transparency log ------------------------------------------------------------------------

    @property
    def transparency_log(self) -> TransparencyLog:
        """The ledger-wide transparency log (a Merkle tree over every event's hash)."""
        from agentledger.ledger._tlog import TransparencyLog
        from agentledger.ledger._tlog_tables import log_tables

        return TransparencyLog(log_tables(self._store.kind, self._store.recorder))

    def integrate(self, progress: Callable[[int], None] | None = None) -> LogHead:
        """Add every event committed since the last integration to the log; return its head."""
        try:
            return self.transparency_log.integrate(progress=progress)
        except PersistenceError as e:
            raise StorageError(self.url, str(e)) from e

    def checkpoint(self, signer_key: str, *, publish: str | os.PathLike[str] | None = None) -> str:
        """Integrate pending events and return a signed checkpoint of the whole log.

        `signer_key` is the ``PRIVATE+KEY+...`` text (see `signed_note.read_signer_key`); it is
        used and forgotten, never stored. With `publish`, the checkpoint is also appended to
        that directory when the log proves it extends the last one published there.
        """
        from pathlib import Path

        from agentledger.ledger._checkpoints import issue_checkpoint, publish_checkpoint

        log = self.transparency_log
        note, _ = issue_checkpoint(log, signer_key, durable=self._store.make_durable)
        if publish is not None:
            publish_checkpoint(log, note, signer_key, Path(publish))
        return note

    def prove(
        self,
        run_id: str,
        position: int | None = None,
        *,
        checkpoint: str,
        verifier_keys: Sequence[str] = (),
    ) -> dict[str, Any]:
        """An inclusion proof of a run's event (default: its last one the checkpoint covers).

        `checkpoint` is a signed checkpoint's text; with `verifier_keys` its signature is
        checked first. Returns JSON-ready values: the event's hash, leaf index, tree size,
        root, the proof's hashes (base64) and the checkpoint itself. Refuses ("re-chained") an
        event whose content no longer hashes to the hash stored beside it: the proof would be
        of the stored hash, not of the event as it now reads.
        """
        from agentledger.ledger._checkpoint import Checkpoint
        from agentledger.ledger._checkpoints import (
            CheckpointError,
            check_reproduces,
            inclusion,
            open_checkpoint,
            split_note,
        )

        if verifier_keys:
            body = open_checkpoint(checkpoint, verifier_keys).checkpoint
        else:
            try:
                body = Checkpoint.parse(split_note(checkpoint))
            except ValueError as e:
                raise CheckpointError("malformed", str(e)) from None
        records = self.events(run_id)
        log = self.transparency_log
        check_reproduces(log, body)
        if position is None:
            leaves = log.leaf_indexes(run_id, [r.position for r in records])
            covered = [r for r in records if leaves.get(r.position, body.size) < body.size]
            if not covered:
                detail = (
                    f"no event of run {run_id} is in the checkpoint's tree of {body.size} "
                    "events yet: issue a newer checkpoint"
                )
                raise CheckpointError("not covered", detail)
            record = covered[-1]
        else:
            matching = [r for r in records if r.position == position]
            if not matching:
                raise UsageError(f"run {run_id} has no position {position}")
            record = matching[0]
        try:
            recomputed = envelope_hash(record.envelope())
        except InvalidPayloadError as e:
            recomputed = f"nothing: {e}"
        if recomputed != record.hash:
            detail = (
                f"run {run_id} position {record.position}: its content hashes to {recomputed}, "
                f"not {record.hash} as stored, so a proof of the stored hash would not prove "
                "this event (`agentledger verify` names what changed)"
            )
            raise CheckpointError("re-chained", detail)
        proof = inclusion(log, body, record.run_id, record.position, record.hash)
        proof["checkpoint"] = checkpoint
        return proof

    # Internals -------------------------------------------------------------------------------

    @staticmethod
    def _uuid(run_id: str) -> UUID:
        try:
            return UUID(str(run_id))
        except ValueError:
            raise UnknownRunError(run_id) from None

    @staticmethod
    def _event(event_class: type[LedgerEvent], **fields: Any) -> LedgerEvent:
        from pydantic import ValidationError

        try:
            return event_class(**fields)
        except ValidationError as e:
            raise InvalidEventError(event_class.kind, _describe(e)) from None

    def _prepare(self, event: LedgerEvent) -> Prepared:
        """An event's payload and canonical bytes, checked against the ledger's `Limits`."""
        from agentledger.ledger.events import LedgerEvent

        if not isinstance(event, LedgerEvent):
            raise InvalidEventError(type(event).__name__, "the ledger takes catalogue events")
        payload = _dump(event, exclude_defaults=True)
        payload_jcs = canonical_json_trusted(payload)
        self.limits.check_payload(payload, payload_jcs, f"the {event.kind} payload")
        return Prepared(event.kind, event.class_version, payload, payload_jcs)

    def _commit(
        self,
        run: Run | None,
        events: Sequence[LedgerEvent | Prepared],
        blobs: Mapping[str, bytes],
        *,
        started: tuple[str, RunStarted] | None = None,
    ) -> list[RecordedEvent]:
        """Hash `events` onto the run's chain and save them with `blobs` in one transaction.

        Builds the stored events directly in the mapper's format (one canonical serialisation
        per payload serves both its hash and its storage) and advances the `Run` aggregate only
        after the transaction commits; `load` rebuilds the same aggregate through eventsourcing.
        Every event is checked before anything is written: against the `Limits`, RunStarted only
        first, and an end event's count and head hash against the chain it closes.
        """
        sealed = self._seal(Head.of(run, started), events, started=started)
        self._write([sealed], [encode_blob(ref, data) for ref, data in blobs.items()])
        if run is not None:
            run.advance(sealed.end.position, sealed.end.hash, sealed.end.status)
        self._logged(sealed.recorded)
        return sealed.recorded

    @property
    def _committer(self) -> GroupCommitter:
        """The group committer recorders flush through (created on first use)."""
        committer: GroupCommitter | None = self.__dict__.get("_group_committer")
        if committer is None:
            from agentledger.ledger._committer import GroupCommitter

            with _COMMITTER_LOCK:
                committer = self.__dict__.get("_group_committer")
                if committer is None:
                    committer = self.__dict__["_group_committer"] = GroupCommitter(self)
        return committer

    def _seal(
        self,
        head: Head,
        events: Sequence[LedgerEvent | Prepared],
        *,
        started: tuple[str, RunStarted] | None = None,
    ) -> Sealed:
        """Hash `events` onto the chain that ends at `head`: the rows to write, nothing written.

        Refuses (before anything is written) an event that cannot stand at its position.
        """
        run_id, status, prev, position = head
        uuid = UUID(run_id)
        recorded: list[RecordedEvent] = []
        stored: list[StoredEvent] = []
        used: list[tuple[str, dict[str, Any]]] = []
        for event in events:
            item = event if isinstance(event, Prepared) else self._prepare(event)
            kind, version, payload, payload_jcs = item
            if kind in _USAGE_KINDS:
                used.append((kind, payload))
            position += 1
            _check_place(kind, payload, position, prev)
            timestamp = self.clock.now()
            event_id = self.ids.new_id()
            digest, state = seal(
                run_id=run_id,
                position=position,
                kind=kind,
                version=version,
                timestamp=timestamp,
                event_id=event_id,
                prev=prev,
                payload_jcs=payload_jcs,
            )
            stored.append(StoredEvent(uuid, position, kind, state))
            recorded.append(
                RecordedEvent(
                    run_id, position, kind, version, timestamp, event_id, prev, digest, payload
                )
            )
            prev = digest
            if kind == "RunCompleted":
                status = "completed"
            elif kind == "RunFailed":
                status = "failed"
        update = RunIndexUpdate(
            run_id=run_id,
            last_position=position,
            head_hash=prev,
            status=status,
            updated_at=recorded[-1].timestamp if recorded else self.clock.now(),
            started=_dump(started[1], exclude_defaults=False) if started else None,
            tags=tuple(started[1].tags) if started else (),
            entry=bool(started and started[1].entry is not None),
            totals=RunTotals.of(used),
        )
        return Sealed(run_id, stored, recorded, update, Head(run_id, status, prev, position))

    def _write(self, sealed: Sequence[Sealed], rows: Sequence[BlobRow]) -> None:
        """Save sealed batches (of one run or several) and `rows` in one transaction."""
        stored = [s for batch in sealed for s in batch.stored]
        try:
            self._store.recorder.insert_events(
                stored, blobs=list(rows), runs=[batch.update for batch in sealed]
            )
        except IntegrityError as e:
            first = sealed[0]
            raise ConcurrencyError(
                first.run_id, first.recorded[0].position if first.recorded else 0
            ) from e
        except PersistenceError as e:
            raise StorageError(self.url, str(e)) from e

    def _logged(self, recorded: Sequence[RecordedEvent]) -> None:
        """Log committed events; a log that fails (its pipe closed) is dropped, not retried.

        The events are committed whatever the log does: its failure must not fail the commit,
        which the recorder would then retry, nor leave the run open.
        """
        log = self.log
        if log is None:
            return
        try:
            for record in recorded:
                log.recorded(record)
        except Exception:  # noqa: BLE001 - any failure of the log's stream
            self.log = None


_COMMITTER_LOCK = threading.Lock()
_USAGE_KINDS = frozenset({"ModelCalled", "ToolReturned"})
"""The events whose usage the runs index sums (`RunTotals`)."""


def _opened(ref: str, key: SubjectKey | None, text: str) -> Any:
    """A sealed blob's value, opened with its subject's key; `ERASED` once the key is gone."""
    if key is None:
        return ERASED
    try:
        return loads(key.open_data(text))
    except ValueError as e:
        raise CorruptBlobError(ref, str(e)) from None


class Head(NamedTuple):
    """Where a run's chain ends: what the next event is sealed onto."""

    run_id: str
    status: str
    hash: str
    position: int

    @classmethod
    def of(cls, run: Run | None, started: tuple[str, RunStarted] | None) -> Head:
        """The head of ``run`` (or the empty chain a RunStarted begins)."""
        if run is None:
            assert started is not None
            return cls(started[0], "running", GENESIS, 0)
        return cls(run.run_id, run.status, run.head_hash, run.position)


class Sealed(NamedTuple):
    """Events hashed onto a chain, ready to write in a transaction (see `Ledger._seal`)."""

    run_id: str
    stored: list[StoredEvent]
    recorded: list[RecordedEvent]
    update: RunIndexUpdate
    end: Head


class Prepared(NamedTuple):
    """An event ready to be sealed: kind, schema version, payload and its canonical bytes."""

    kind: str
    version: int
    payload: dict[str, Any]
    payload_jcs: bytes


def _dump(event: LedgerEvent, *, exclude_defaults: bool) -> dict[str, Any]:
    """An event's payload as JSON values (fresh containers: callers may edit them).

    pydantic's JSON-mode serialiser refuses free-form values nested more than about 254 levels;
    Python mode has no such limit and gives the same values for every catalogue field type, so
    it serves those payloads and `Limits.check_payload` then refuses them by their depth.
    """
    try:
        return event.model_dump(mode="json", exclude_defaults=exclude_defaults)
    except ValueError:
        return event.model_dump(mode="python", exclude_defaults=exclude_defaults)


def _check_place(kind: str, payload: Mapping[str, Any], position: int, prev: str) -> None:
    """Refuse an event that cannot stand at `position` after `prev` (nothing is written)."""
    if kind == "RunStarted" and position != 1:
        raise InvalidEventError(kind, f"a run starts once: RunStarted cannot be at {position}")
    if kind in {"RunCompleted", "RunFailed"}:
        count, head = payload.get("event_count"), payload.get("head_hash")
        if count != position or head != prev:
            raise InvalidEventError(
                kind,
                f"event_count={count} and head_hash={str(head)[:12]}... must be the end's "
                f"position {position} and the hash before it, {prev[:12]}...: use the "
                "recorder's complete() or fail()",
            )


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(event)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
