"""Checking an exported run offline: its chain, its blobs, its checkpoint and inclusion proofs.

An auditor holds one export file and the operator's published verifier key, and no database.
`verify_export` reads the file with import's own checks (nothing in it is trusted; one pass in
bounded memory, `_export_read`), verifies the run's hash chain and blobs as `verify` does, opens
the checkpoint the file carries with the verifier key, and checks every event's inclusion proof
against the signed root, using each event's hash recomputed from its content (each proof line is
read again from the file when its event is checked). Must not write anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentledger.ledger._checkpoint import Checkpoint
from agentledger.ledger._checkpoints import check_export_proofs
from agentledger.ledger._export_read import ExportFile
from agentledger.ledger._limits import Limits
from agentledger.ledger._tlog import LogProblem
from agentledger.ledger._verify import VerifyReport

__all__ = ["ExportVerification", "verify_export"]


@dataclass
class ExportVerification:
    """What checking an export file offline found."""

    source: str
    report: VerifyReport
    """The run's chain and blobs (``problems``); the checkpoint and proofs (``log_problems``)."""
    checkpoint: Checkpoint | None = None
    covered: int = 0
    """Events whose inclusion proof verifies against the signed checkpoint."""
    not_covered: list[int] = field(default_factory=list)
    """Positions with no proof: recorded after the checkpoint, which cannot vouch for them."""
    refused: list[str] = field(default_factory=list)
    """What is wrong with the file itself (line and field), as import would refuse it."""
    ended: bool = False
    """Whether the file's run ends (RunCompleted or RunFailed). Proofs show that each event
    in the file is in the signed log, not that the file holds all of the run: a file whose
    run does not end may have been cut short."""

    @property
    def ok(self) -> bool:
        """True when the file is well formed, its run intact and every proof verifies."""
        return not self.refused and self.report.ok


def verify_export(
    path: str | os.PathLike[str],
    verifier_keys: Sequence[str],
    *,
    limits: Limits | None = None,
    allow_uncovered: bool = False,
) -> ExportVerification:
    """Check an export file offline against the verifier keys of its checkpoint's signer.

    Every event must carry an inclusion proof that verifies against the signed checkpoint:
    an event without one could have been forged (with its proof line removed). With
    `allow_uncovered`, events after the last proven one (a run that went on after the
    checkpoint) are listed in ``not_covered`` instead; at least one event must still be proven.
    """
    with ExportFile.open(Path(path), limits or Limits()) as file:
        return _verify(file, verifier_keys, allow_uncovered=allow_uncovered)


def _verify(
    file: ExportFile, verifier_keys: Sequence[str], *, allow_uncovered: bool
) -> ExportVerification:
    """`verify_export` of a file read (see there)."""
    run_id = file.run_id
    result = ExportVerification(file.source, VerifyReport(), refused=list(file.findings.problems))
    if file.findings.problems:
        return result
    result.report = file.verify()
    check = check_export_proofs(
        run_id, file.recomputed(), file.checkpoint, file.proofs, verifier_keys, source=file.source
    )
    result.report.log_problems += check.problems
    result.checkpoint = check.checkpoint
    result.covered = check.covered
    result.not_covered = check.not_covered
    result.ended = file.last_kind() in {"RunCompleted", "RunFailed"}
    if check.checkpoint is not None and not check.problems:
        late = check.not_covered
        if late and (not allow_uncovered or not check.covered):
            span = f"{late[0]}" if len(late) == 1 else f"{late[0]}..{late[-1]}"
            detail = (
                f"{len(late)} of its {file.event_count} events (positions {span}) carry no "
                f"inclusion proof in the checkpoint of {check.checkpoint.size} events, so nothing "
                "vouches for them: export the run again with a newer checkpoint"
            )
            result.report.log_problems.append(
                LogProblem("not covered", detail, run_id, late[0], checkpoint=file.source)
            )
    return result
