"""agentledger.projections: pure folds over ledger events.

World state is the left fold of a run's deltas, each an RFC 7386 JSON Merge Patch
(`apply_patch`, `fold_patches`); run diffs use `diff_patch`, and `compose_patches` squashes
consecutive deltas. Must not record events or import agents, tools, replay or the CLI.
"""

from agentledger.projections._json import JSONValue
from agentledger.projections._merge import (
    apply_patch,
    compose_patches,
    diff_patch,
    fold_patches,
)
from agentledger.projections.errors import (
    PatchCompositionError,
    ProjectionError,
    UnrepresentableDiffError,
)

__all__ = [
    "JSONValue",
    "PatchCompositionError",
    "ProjectionError",
    "UnrepresentableDiffError",
    "apply_patch",
    "compose_patches",
    "diff_patch",
    "fold_patches",
]
