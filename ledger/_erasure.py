"""Erasure of a data subject (crypto-shredding): destroy the key, record the fact, scrub files.

`erase_subject` finds the subject's key and the runs that sealed content under it, counts the
blobs that become unreadable, records an ErasureRecorded fact in the ledger's erasure stream,
deletes the key (and its run links), and scrubs the database files. Events and blobs are never
touched, so every hash still verifies. `erased_positions` names the positions of a run whose
content is erased (what replay cannot compare). Must not know agents, projections or the CLI.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError

from agentledger.ledger._canonical import loads
from agentledger.ledger._hashing import GENESIS
from agentledger.ledger._records import RecordedEvent
from agentledger.ledger._subjects import ERASURE_STREAM, check_subject, is_sealed
from agentledger.ledger._verify import blob_refs_in
from agentledger.ledger.errors import (
    ConcurrencyError,
    CorruptBlobError,
    ReadOnlyDatabaseError,
    StorageError,
    UnknownSubjectError,
    UsageError,
)
from agentledger.ledger.events import ErasureRecorded

if TYPE_CHECKING:
    from agentledger.ledger._ledger import Ledger

__all__ = ["ErasureResult", "erase_subject", "erased_positions", "subject_digest"]


@dataclass(frozen=True)
class ErasureResult:
    """What `Ledger.erase_subject` did: the fact it recorded, the runs and blobs erased."""

    subject_digest: str
    key_id: str
    runs: tuple[str, ...]
    blobs: int
    position: int
    """The ErasureRecorded's position in the erasure stream."""
    recorded_at: str
    requested_by: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (what ``agentledger erase --json`` prints)."""
        return {
            "subject_digest": self.subject_digest,
            "key_id": self.key_id,
            "runs": list(self.runs),
            "blobs": self.blobs,
            "stream": ERASURE_STREAM,
            "position": self.position,
            "recorded_at": self.recorded_at,
            "requested_by": self.requested_by,
            "reason": self.reason,
        }


def subject_digest(ledger: Ledger, subject: str) -> str:
    """How an ErasureRecorded names a subject: HMAC-SHA256 under the ledger's salt."""
    mac = hmac.new(ledger.redaction_salt(), subject.encode("utf-8"), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        msg = f"erase: {name} must be non-empty text (it is recorded with the erasure)"
        raise UsageError(msg)
    return value


def erase_subject(
    ledger: Ledger, subject: str, *, reason: str, requested_by: str, vacuum: bool
) -> ErasureResult:
    """See `Ledger.erase_subject`."""
    check_subject(subject)
    _text("reason", reason)
    _text("requested_by", requested_by)
    if ledger.read_only:
        raise ReadOnlyDatabaseError(ledger.url, "opened read-only: erasure destroys a key")
    keys = ledger._keys
    key = keys.key_for(subject, "", create=False)
    if key is None:
        facts = ledger.erasures()  # the salt exists once there is one: nothing is written
        digest = subject_digest(ledger, subject) if facts else None
        earlier = [e for e in facts if e.payload.get("subject_digest") == digest]
        raise UnknownSubjectError(subject, earlier[-1].timestamp if earlier else None)
    runs = keys.runs_of(key.key_id)
    sealed: set[str] = set()
    for run_id in runs:
        sealed |= _sealed_refs(ledger, run_id, {key.key_id})[0]
    blobs = len(sealed)
    fact = ErasureRecorded(
        subject_digest=subject_digest(ledger, subject),
        key_id=key.key_id,
        requested_by=requested_by,
        reason=reason,
        runs=runs,
        blobs=blobs,
    )
    prepared = ledger._prepare(fact)  # checked before anything is destroyed
    # The fact first, then the key: an erasure cut short between the two leaves a recorded fact
    # and a key still in place, which verify names ("erasure unfinished") and which the same
    # erasure asked again completes (the fact is found, not recorded twice). The other order
    # would leave a key gone with nothing saying who destroyed it, and no way to say it later.
    recorded = next(
        (e for e in ledger.erasures() if e.payload.get("key_id") == key.key_id), None
    ) or _append(ledger, prepared)
    try:
        keys.destroy(subject)
    except (PersistenceError, OSError, Exception) as e:
        detail = (
            f"the erasure is recorded (position {recorded.position} of the erasure stream), but "
            f"the subject's key could not be deleted: {e}; ask for the same erasure again to "
            "finish it"
        )
        raise StorageError(ledger.url, detail) from e
    ledger.__dict__.pop("_key_table", None)
    try:
        keys.scrub(vacuum=vacuum)
    except Exception as e:
        detail = f"the key is destroyed and the erasure recorded, but scrubbing failed: {e}"
        raise StorageError(ledger.url, detail) from e
    return ErasureResult(
        subject_digest=fact.subject_digest,
        key_id=key.key_id,
        runs=tuple(runs),
        blobs=blobs,
        position=recorded.position,
        recorded_at=recorded.timestamp,
        requested_by=requested_by,
        reason=reason,
    )


def _append(ledger: Ledger, prepared: Any) -> RecordedEvent:
    """Append one fact to the erasure stream (a chain like a run's, with no runs index row)."""
    from agentledger.ledger._ledger import Head

    recorder = ledger._store.recorder
    uuid = UUID(ERASURE_STREAM)
    for _ in range(5):  # another erasure may take the position first: re-read the head
        last = recorder.select_events(uuid, desc=True, limit=1)
        head = Head(ERASURE_STREAM, "running", GENESIS, 0)
        if last:
            s = last[0]
            record = RecordedEvent.from_state(
                ERASURE_STREAM, s.originator_version, s.topic, s.state
            )
            head = Head(ERASURE_STREAM, "running", record.hash, record.position)
        sealed = ledger._seal(head, [prepared])
        try:
            recorder.insert_events(sealed.stored, blobs=[], runs=[])
        except IntegrityError:
            continue
        except PersistenceError as e:
            raise StorageError(ledger.url, f"cannot record the erasure: {e}") from e
        ledger._logged(sealed.recorded)
        return sealed.recorded[0]
    raise ConcurrencyError(ERASURE_STREAM, head.position + 1)


def _sealed_refs(
    ledger: Ledger, run_id: str, key_ids: set[str] | None
) -> tuple[set[str], dict[str, int]]:
    """The run's reachable sealed blobs (under ``key_ids``, or any key when None).

    Returns the refs and, per ref, the first position that reaches it.
    """
    records = ledger.events(run_id)
    first: dict[str, int] = {}
    for record in records:
        for ref in blob_refs_in(record.payload):
            first.setdefault(ref, record.position)
    found: set[str] = set()
    seen: set[str] = set()
    frontier = list(first)
    while frontier:
        wanted = [r for r in dict.fromkeys(frontier) if r not in seen]
        frontier = []
        for ref, data in ledger._blobs_for_verify(wanted).items():
            seen.add(ref)
            if isinstance(data, CorruptBlobError):
                continue
            try:
                value = loads(data)
            except ValueError:
                continue
            if is_sealed(value) and (key_ids is None or value["key_id"] in key_ids):
                found.add(ref)
            for inner in blob_refs_in(value):
                first.setdefault(inner, first[ref])
                frontier.append(inner)
    return found, first


def erased_positions(ledger: Ledger, run_id: str) -> list[int]:
    """Positions of the run that refer to content whose subject's key is gone."""
    sealed, first = _sealed_refs(ledger, run_id, None)
    if not sealed:
        return []
    values = ledger.blob_bytes(sorted(sealed))
    ids = {ref: loads(data)["key_id"] for ref, data in values.items()}
    live = set(ledger._keys.keys(ids.values()))
    return sorted({first[ref] for ref, key_id in ids.items() if key_id not in live})
