"""``CheckingRecorder``: a run recorder that compares what a run records with a recorded run.

Owns the comparing half of replay, resume and fork. The recorded events up to ``prefix_end``
are the expected prefix: each event the re-executed run records at a position inside it is
compared (``comparable``) with the recorded one; the first mismatch is kept as the
``Divergence`` and raised as ``ReplayDivergenceError`` (later events are ignored, so the first
one wins even when an orchestration swallows the error). Inside the prefix an event is written
only when ``write_prefix`` is on (a fork copies its parent's prefix; replay and resume do not
write what is already recorded). Past the prefix ``beyond`` decides: ``"write"`` (resume and
fork continue the run), ``"diverge"`` (replay of a finished run: any extra event is a
divergence) or ``"stop"`` (replay of a run that never finished: the prefix is all there is).
``run_after(N, hook)`` runs a hook once, just before the event after position N is recorded (a
fork applies its state patch there, so it lands right after position N, and replaying the fork
applies it at the same place). A recorded RunAnnotated is a reader's note, not an event the
run made: the re-executed run passes over it (keeping every later position where it was), a
fork copies it with the rest of the prefix, and ``run_end`` finds a run's end before any notes
appended after it. Must not call models or tools.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from agentledger.ledger import RecordedEvent, RunRecorder, policy_of
from agentledger.ledger.errors import LedgerError
from agentledger.ledger.events import ErrorInfo, LedgerEvent, event_type, upcast
from agentledger.replay._compare import (
    Divergence,
    comparable,
    comparable_event,
    comparable_payload,
    divergence,
)
from agentledger.replay.errors import ContentErasedError, ReplayDivergenceError

if TYPE_CHECKING:
    from types import TracebackType

    from agentledger.ledger import Ledger, Run
    from agentledger.ledger.events import RunStarted

__all__ = [
    "ANNOTATION",
    "END_KINDS",
    "Beyond",
    "CheckingRecorder",
    "ReplayStopped",
    "redaction_fact",
    "refuse_erased",
    "run_end",
    "salt_for",
]

Beyond = Literal["write", "diverge", "stop"]

ANNOTATION = "RunAnnotated"
"""A human note appended to a run (also after its end): never re-executed, never compared."""

END_KINDS = frozenset({"RunCompleted", "RunFailed"})


def own_events(events: Sequence[RecordedEvent]) -> list[RecordedEvent]:
    """The events the run itself recorded: every event but the annotations."""
    return [e for e in events if e.kind != ANNOTATION]


def salt_for(ledger: Ledger, started: RunStarted) -> bytes | None:
    """The salt a re-execution of ``started``'s run needs: the ledger's, if its policy hashes."""
    policy = policy_of(started.config.redaction)[1]
    return ledger.redaction_salt() if policy is not None and policy.hashes else None


def _passed_over(event: RecordedEvent) -> bool:
    """A note, or what redaction took from the run's input (recorded with RunStarted)."""
    if event.kind == ANNOTATION:
        return True
    return event.position == 2 and event.kind == "PolicyDecided" and _input_redaction(event)


def redaction_fact(event: RecordedEvent) -> bool:
    """Whether ``event`` is a PolicyDecided the recorder wrote for what it redacted.

    Its reasons read ``redacted:KIND at EVENT.PATH`` (the policy gate's read ``redacted:KIND``).
    """
    if event.kind != "PolicyDecided":
        return False
    reasons = event.payload.get("reasons") or []
    return bool(reasons) and all(" at " in reason for reason in reasons)


def _input_redaction(event: RecordedEvent) -> bool:
    reasons = event.payload.get("reasons") or []
    return bool(reasons) and all(" at RunStarted." in reason for reason in reasons)


def refuse_erased(ledger: Ledger, run_id: str) -> None:
    """Raise `ContentErasedError` for a run whose data subject was erased (nothing runs)."""
    erased = ledger.erased_positions(run_id)
    if erased:
        raise ContentErasedError(str(ledger.run(run_id).run_id), erased)


def run_end(events: Sequence[RecordedEvent]) -> RecordedEvent | None:
    """The run's RunCompleted or RunFailed, or None while it never ended (notes aside)."""
    own = own_events(events)
    return own[-1] if own and own[-1].kind in END_KINDS else None


def _payload(event: LedgerEvent) -> dict[str, Any] | None:
    """``event``'s payload as `comparable_event` dumps it (None where that dump fails)."""
    try:
        return event.model_dump(mode="json", exclude_defaults=True)
    except ValueError:  # too deep for JSON mode: the ledger's own preparation decides
        return None


class ReplayStopped(Exception):  # noqa: N818 - a signal, not an error
    """The re-executed run reached the end of a record that never finished."""


class CheckingRecorder(RunRecorder):
    """Records a re-execution, comparing each event with the recorded one at its position."""

    def __init__(
        self,
        ledger: Ledger,
        run: Run,
        *,
        recorded_run_id: str,
        expected: Sequence[RecordedEvent],
        prefix_end: int,
        write_prefix: bool,
        beyond: Beyond,
    ) -> None:
        super().__init__(ledger, run)
        if expected and expected[0].kind == "RunStarted":  # the recorded run's own policy
            recorded = expected[0].payload.get("config", {}).get("redaction")
            self._privacy = ledger.run_privacy(policy_of(recorded)[1])
        self._recorded_run_id = recorded_run_id
        self._expected = expected
        self._prefix_end = prefix_end
        self._write_prefix = write_prefix
        self._beyond = beyond
        self._hook: tuple[int, Callable[[], None]] | None = None
        self._cursor = 1
        if not write_prefix and len(expected) > 1 and _passed_over(expected[1]):
            self._cursor = 2  # what redaction took from the input: recorded with RunStarted
        self.divergence: Divergence | None = None
        self.compared = 1
        self.closed = False

    @property
    def position(self) -> int:
        """Position of the last event recorded, replayed or pending."""
        if self._write_prefix:
            return super().position
        if self._cursor < self._prefix_end or self._beyond != "write":
            return self._cursor
        return super().position

    def run_after(self, position: int, hook: Callable[[], None]) -> None:
        """Run ``hook`` once, just before the event after ``position`` is recorded."""
        self._hook = (position, hook)

    @property
    def in_prefix(self) -> bool:
        """Whether the next event still falls inside the recorded prefix."""
        return self.position < self._prefix_end

    def record(self, event: LedgerEvent) -> int:
        """Compare ``event`` with the recorded one at its position; write it when due."""
        with self._op():
            event, decided = self._private(event)
            if decided is not None:
                self._record_checked(decided)
            return self._record_checked(event)

    def _record_checked(self, event: LedgerEvent) -> int:
        if self.divergence is not None:
            return self.position + 1
        self._pass_annotations()
        if self._hook is not None and self.position >= self._hook[0]:
            hook, self._hook = self._hook[1], None
            hook()
        position = self.position + 1
        if event.kind in ("RunCompleted", "RunFailed"):
            self.closed = True
        if position <= self._prefix_end:
            self._check(position, event)
            self.compared = position
            if self._write_prefix:
                written = super()._write(event)
            else:
                self._cursor = position
                written = position
                if not self._pending:  # its blobs are the record's: nothing here writes them
                    self._blobs = {}
            return written
        if self._beyond == "stop":
            raise ReplayStopped
        if self._beyond == "diverge":
            actual = (event.kind, comparable_event(event))
            self._diverge(divergence(position, None, actual, "replay recorded more events"))
        return super()._write(event)

    def finish(self) -> None:
        """After the run: a replay that recorded fewer events than the record diverged."""
        if self.divergence is None and self._beyond == "diverge":
            missing = own_events(self._expected[self.compared :])
            if missing:
                nxt = missing[0]
                expected = (nxt.kind, comparable(nxt.kind, nxt.version, nxt.payload))
                self._diverge(divergence(nxt.position, expected, None, "replay ended early"))
        if self.divergence is not None:
            raise ReplayDivergenceError(self._recorded_run_id, self.divergence)

    def fail(self, error: BaseException | ErrorInfo) -> RecordedEvent:
        """Record RunFailed (nothing after a divergence, or when the record simply ended)."""
        if self.divergence is not None or isinstance(error, ReplayStopped):
            return self.recent_events()[-1]
        return super().fail(error)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.closed or self.divergence is not None:
            self.flush()
            return
        super().__exit__(exc_type, exc, tb)

    def _pass_annotations(self) -> None:
        """Step over the recorded notes next in the prefix (a fork copies them)."""
        position = self.position + 1
        while position <= self._prefix_end and _passed_over(self._expected[position - 1]):
            note = self._expected[position - 1]
            if self._write_prefix:
                payload = upcast(note.kind, note.version, note.payload)
                super()._write(event_type(note.kind).model_validate(payload))
            else:
                self._cursor = position
            position = self.position + 1

    def _check(self, position: int, event: LedgerEvent) -> None:
        recorded = self._expected[position - 1]
        ready = self._ready
        if ready is not None and ready[0] is event:
            actual = comparable_payload(event.kind, ready[1].payload)
        elif not self._write_prefix and (dumped := _payload(event)) is not None:
            # Never written here: its payload is all the comparison needs (no canonical bytes,
            # no limits: an event over them is compared as it is either way).
            actual = comparable_payload(event.kind, dumped)
        else:
            try:  # dumped once: what is compared is what `_write` then records
                prepared = self._ledger._prepare(event)
            except LedgerError:  # over a limit: the divergence, if any, is reported first
                actual = comparable_event(event)
            else:
                self._ready = (event, prepared)
                actual = comparable_payload(event.kind, prepared.payload)
        expected = comparable(recorded.kind, recorded.version, recorded.payload)
        if recorded.kind != event.kind or expected != actual:
            self._diverge(divergence(position, (recorded.kind, expected), (event.kind, actual)))

    def _diverge(self, found: Divergence) -> None:
        self.divergence = found
        self._pending.clear()
        raise ReplayDivergenceError(self._recorded_run_id, found)
