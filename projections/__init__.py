"""agentledger.projections: pure folds over ledger events.

World state is the left fold of a run's deltas, each an RFC 7386 JSON Merge Patch
(`apply_patch`, `fold_patches`); run diffs use `diff_patch`, and `compose_patches` squashes
consecutive deltas. `world_state` and `state_history` give a run's state after any position
(time travel), optionally from checksummed snapshots (`SnapshotStore`, `take_snapshots`) kept
as a cache in the ledger's database. `ReadModelProjector` keeps SQL read models (runs, model
and tool calls, guardrail trips) up to date from the ledger's notification log, exactly once.
Both are derived data: `verify_snapshots` and `verify_read_models` check them against the
events, and `fold_world_state` says when a state came from a snapshot.
Must not record events or import agents, tools, replay or the CLI.
"""

from agentledger.projections._audit import (
    ReadModelReport,
    RowDifference,
    SnapshotProblem,
    SnapshotReason,
    SnapshotReport,
    verify_read_models,
    verify_snapshots,
)
from agentledger.projections._erasure import DerivedRebuild, forget_erased
from agentledger.projections._json import JSONValue, json_copy
from agentledger.projections._merge import (
    apply_patch,
    compose_patches,
    diff_patch,
    fold_patches,
)
from agentledger.projections._readmodel import DEFAULT_BATCH, ProjectionStatus, ReadModelProjector
from agentledger.projections._rm_query import RunRow, StatsRow
from agentledger.projections._rm_search import SearchHit
from agentledger.projections._snapshots import (
    DEFAULT_EVERY,
    Snapshot,
    SnapshotStore,
    take_snapshots,
)
from agentledger.projections._world import (
    FoldedState,
    WorldState,
    fold_world_state,
    state_history,
    world_state,
)
from agentledger.projections.errors import (
    InvalidDeltaError,
    PatchCompositionError,
    PositionOutOfRangeError,
    ProjectionError,
    ReadModelOptionError,
    SnapshotIntervalError,
    SnapshotStoreError,
    UnrepresentableDiffError,
)

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_EVERY",
    "DerivedRebuild",
    "FoldedState",
    "InvalidDeltaError",
    "JSONValue",
    "PatchCompositionError",
    "PositionOutOfRangeError",
    "ProjectionError",
    "ProjectionStatus",
    "ReadModelOptionError",
    "ReadModelProjector",
    "ReadModelReport",
    "RowDifference",
    "RunRow",
    "SearchHit",
    "Snapshot",
    "SnapshotIntervalError",
    "SnapshotProblem",
    "SnapshotReason",
    "SnapshotReport",
    "SnapshotStore",
    "SnapshotStoreError",
    "StatsRow",
    "UnrepresentableDiffError",
    "WorldState",
    "apply_patch",
    "compose_patches",
    "diff_patch",
    "fold_patches",
    "fold_world_state",
    "forget_erased",
    "json_copy",
    "state_history",
    "take_snapshots",
    "verify_read_models",
    "verify_snapshots",
    "world_state",
]
