"""agentledger.replay: audit replay, re-evaluation, run diffs, resume and fork.

``replay_run(ledger, run_id)`` re-executes a recorded run with every model answer and tool
result served from its record and checks that it records the same events (timing aside),
raising ``ReplayDivergenceError`` at the first that differs. ``rerun`` starts a linked run with
overrides (prompt versions, model, parameters), serving identical requests from the record.
``resume_run`` continues a run whose process died; ``fork_run`` starts a new run from position
N of a recorded one. ``diff_runs`` aligns two runs causally and reports what changed. All of
them also work on runs recorded from a user's function (``Ledger.record_function``): the
function is imported again and run with its instrumented clients and recorded tools answering
from the record. ``run_problem`` says in one line why a recorded run is not a good answer (its
recorded failure, or every model call failed).
"""

from agentledger.replay._cohort import (
    CohortDiff,
    RunSelection,
    cohort_diff,
    render_cohort,
    select_runs,
)
from agentledger.replay._compare import Change, Divergence
from agentledger.replay._continue import ContinueResult, fork_run, resume_run
from agentledger.replay._diff import diff_runs
from agentledger.replay._diff_model import RunDiff
from agentledger.replay._diff_render import render_diff
from agentledger.replay._outcome import run_problem
from agentledger.replay._replay import ReplayResult, replay_all, replay_run
from agentledger.replay._rerun import Overrides, RerunResult, rerun, rerun_many
from agentledger.replay._serving import STALL_TIMEOUT_S
from agentledger.replay.errors import (
    ContentErasedError,
    EffectRefusedError,
    NoLiveModelError,
    NotResumableError,
    ReplayDivergenceError,
    ReplayError,
    ReplayUsageError,
)

__all__ = [
    "STALL_TIMEOUT_S",
    "Change",
    "CohortDiff",
    "ContentErasedError",
    "ContinueResult",
    "Divergence",
    "EffectRefusedError",
    "NoLiveModelError",
    "NotResumableError",
    "Overrides",
    "ReplayDivergenceError",
    "ReplayError",
    "ReplayResult",
    "ReplayUsageError",
    "RerunResult",
    "RunDiff",
    "RunSelection",
    "cohort_diff",
    "diff_runs",
    "fork_run",
    "render_cohort",
    "render_diff",
    "replay_all",
    "replay_run",
    "rerun",
    "rerun_many",
    "resume_run",
    "run_problem",
    "select_runs",
]
