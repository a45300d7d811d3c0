"""Derived data after a data subject's erasure: drop their runs' snapshots, rebuild read models.

Snapshots hold a run's world state as folded (plain text): a subject run's are deleted and not
taken again (a fold now reads ``[erased]``). The read models and the search index
(``al_rm_search``) hold text resolved from blobs: when this ledger keeps them, they are rebuilt
from the events, so the subject's content is ``[erased]`` there too. Nothing is created for a
ledger that keeps no derived data. Must not write events or touch keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import inspect

from agentledger.ledger import Ledger
from agentledger.projections._readmodel import ReadModelProjector
from agentledger.projections._rm_schema import TRACKING
from agentledger.projections._snapshots import SNAPSHOTS_TABLE, SnapshotStore
from agentledger.projections._sql import engine_for

__all__ = ["DerivedRebuild", "forget_erased"]


@dataclass(frozen=True)
class DerivedRebuild:
    """What `forget_erased` changed: snapshots deleted, and events replayed into read models."""

    snapshots_deleted: int
    read_model_events: int | None
    """Events the read models were rebuilt from (None: this ledger keeps no read models)."""
    tables: tuple[str, ...] = ()
    """The derived tables rewritten (what a scrub of the database files should cover)."""


def forget_erased(ledger: Ledger, run_ids: Sequence[str]) -> DerivedRebuild:
    """Drop the snapshots of ``run_ids`` and rebuild the read models, where they exist."""
    engine = engine_for(ledger)
    present = set(inspect(engine).get_table_names())
    deleted = 0
    tables: list[str] = []
    if SNAPSHOTS_TABLE in present and run_ids:
        store = SnapshotStore(ledger)
        deleted = sum(store.delete_run(run_id) for run_id in run_ids)
        tables.append(SNAPSHOTS_TABLE)
    replayed: int | None = None
    if TRACKING.name in present:
        projector = ReadModelProjector(ledger, engine=engine)
        replayed = projector.rebuild()
        tables += sorted(name for name in present if name.startswith("al_rm_"))
    return DerivedRebuild(deleted, replayed, tuple(tables))
