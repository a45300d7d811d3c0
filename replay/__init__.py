"""agentledger.replay: audit replay, re-evaluation, run diffs, resume and fork.

``replay_run(ledger, run_id)`` re-executes a recorded run with every model answer and tool
result served from its record and checks that it records the same events (timing aside),
raising ``ReplayDivergenceError`` at the first that differs. ``rerun`` starts a linked run with
overrides (prompt versions, model, parameters), serving identical requests from the record.
``resume_run`` continues a run whose process died; ``fork_run`` starts a new run from position
N of a recorded one.
"""

from agentledger.replay._compare import Change, Divergence
from agentledger.replay._continue import ContinueResult, fork_run, resume_run
from agentledger.replay._replay import ReplayResult, replay_all, replay_run
from agentledger.replay._rerun import Overrides, RerunResult, rerun, rerun_many
from agentledger.replay.errors import (
    EffectRefusedError,
    NoLiveModelError,
    NotResumableError,
    ReplayDivergenceError,
    ReplayError,
    ReplayUsageError,
)

__all__ = [
    "Change",
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
    "fork_run",
    "replay_all",
    "replay_run",
    "rerun",
    "rerun_many",
    "resume_run",
]
