"""What went wrong in a recorded run, in one line: the failure it recorded, or no model at all.

Owns ``run_problem``: the reason a run (or the part of it past a position: what a resume or
fork ran live) is not a good answer - the error its RunFailed recorded, or, for a run that
completed, that every model call it made live failed (no network, a wrong key, a server down:
the agent then answers with an apology, which is not an answer). Served and replayed calls do
not count. ``describe_error`` is the same one-line form for an exception. Reads the ledger only.
"""

from __future__ import annotations

from agentledger.ledger import Ledger
from agentledger.replay._recorder import run_end

__all__ = ["describe_error", "run_problem"]


def describe_error(error: BaseException) -> str:
    """``Type: message`` of an exception."""
    return f"{type(error).__name__}: {error}"


def run_problem(ledger: Ledger, run_id: str, *, after: int = 0) -> str | None:
    """Why the run (its events after position ``after``) is not a good answer; None if it is."""
    events = ledger.events(run_id, after=after)
    end = run_end(events)
    if end is not None and end.kind == "RunFailed":
        error = end.payload.get("error") or {}
        return f"{error.get('type', 'error')}: {error.get('message', '')}".rstrip(": ")
    calls = [e.payload for e in events if e.kind == "ModelCalled"]
    live = [call for call in calls if not call.get("served_from")]
    failed = [call for call in live if call.get("error")]
    if not live or len(failed) < len(live):
        return None
    error = failed[-1]["error"]
    which = "model call" if len(live) == len(calls) else "live model call"
    return (
        f"every {which} failed ({len(failed)} of {len(live)}): "
        f"{error.get('type', 'error')}: {error.get('message', '')}"
    )
