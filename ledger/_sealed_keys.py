"""What verification asks of each sealed blob: that its key opens it, or that it was erased.

A blob sealed for a data subject (`_subjects`) hashes to its ref whatever the key table holds,
so the hash checks cannot see the key table changed. `SealedKeys` checks it against the blobs
and against the erasure stream, whose ErasureRecorded facts are hashed, chained and logged like
a run's events. Must not write, and must not load the event catalogue (verify starts without it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentledger.ledger._subjects import ERASURE_STREAM, SubjectKey
from agentledger.ledger._verify_blobs import BlobReason

if TYPE_CHECKING:
    from agentledger.ledger._ledger import Ledger

__all__ = ["SealedKeys"]


class SealedKeys:
    """What `Ledger.verify` asks of each sealed blob whose ref holds (`check`, a `SealedCheck`).

    A blob whose key is in the key table must open with it: a key row overwritten leaves
    content no reader can open, while its ref still holds. A blob whose key is gone was erased
    when an ErasureRecorded fact names the key (`recorded`). A key gone with no fact, while the
    key table still links runs to it, was deleted by hand: that destroys a subject's content as
    surely as an erasure, but records nobody who asked or why. A key gone with neither is one
    this ledger never held (a subject's run imported from another ledger), or one deleted with
    its links: verify counts those blobs apart (`VerifyReport.blobs_erased_unrecorded`). A key
    still in the table that a fact names belongs to an erasure cut short before it deleted the
    key: the ledger says erased what anyone can still read. Each key is read once.
    """

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        facts = ledger._read_events(ERASURE_STREAM, tolerant=True, known=False)[0]
        self.recorded = {fact.payload.get("key_id") for fact in facts}
        """The key ids that ErasureRecorded facts name."""
        self._keys: dict[str, SubjectKey | None] = {}

    def check(self, envelope: Mapping[str, Any]) -> tuple[BlobReason, str] | None:
        """What is wrong with one sealed blob (its envelope), or None."""
        key_id = envelope["key_id"]
        if key_id not in self._keys:
            key = self._ledger._keys.keys([key_id]).get(key_id)
            if key is None and key_id not in self.recorded:
                linked = self._ledger._keys.runs_of(key_id)
                self._keys[key_id] = None
                if linked:
                    self._keys[key_id] = _UNRECORDED
            else:
                self._keys[key_id] = key
        key = self._keys[key_id]
        if key is None:
            return None
        if key is not _UNRECORDED and key_id in self.recorded:
            detail = (
                f"an ErasureRecorded fact names its data subject's key {key_id}, but the key is "
                "still in the key table, so the content it seals is still readable: an erasure "
                "was cut short before it deleted the key (ask for the same erasure again to "
                "finish it)"
            )
            return "erasure unfinished", detail
        if key is _UNRECORDED:
            detail = (
                f"its data subject's key {key_id} is gone, but no ErasureRecorded fact names "
                "it while the key table still links runs to it: the key was deleted outside "
                "erase_subject, so nothing says who destroyed this content or why"
            )
            return "key destroyed", detail
        try:
            key.open_data(envelope["data"])
        except ValueError as e:
            return "blob altered", f"{e}: the key table holds another key under its id"
        return None


_UNRECORDED = SubjectKey("", b"")
"""`SealedKeys`' mark for a key deleted by hand (gone, unrecorded, still linked to runs)."""
