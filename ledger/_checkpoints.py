"""Signed checkpoints of the transparency log: issuing, publishing, opening, proving.

A checkpoint is the C2SP ``tlog-checkpoint`` body (origin, tree size, root) signed as a C2SP
``signed-note`` with the operator's Ed25519 key. The origin is the signing key's name, so it
lives with the key (and the verifier key an auditor holds), never only in the database.
Publishing appends the checkpoint, numbered, to a directory outside the database (the simplest
witness) only when the log proves it consistent with the last one published there. Must not
know events' meaning.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentledger.ledger import merkle
from agentledger.ledger._checkpoint import Checkpoint, CheckpointFormatError
from agentledger.ledger._tlog import (
    LogProblem,
    TransparencyLog,
    TransparencyLogError,
    check_checkpoints,
)
from agentledger.ledger.errors import CheckpointError
from agentledger.ledger.signed_note import (
    NoteError,
    open_note,
    read_verifier_key,
    sign_note,
    verifier_key_of,
)

if TYPE_CHECKING:
    from agentledger.ledger._verify import VerifyReport

__all__ = [
    "CheckpointError",
    "ExportCheck",
    "OpenedCheckpoint",
    "check_export_proofs",
    "check_inclusion",
    "check_reproduces",
    "check_split_view",
    "checkpoint_sources",
    "inclusion",
    "issue_checkpoint",
    "open_checkpoint",
    "proof_items",
    "publish_checkpoint",
    "published_checkpoints",
    "read_checkpoints",
    "split_note",
    "verify_checkpoints",
]

_PUBLISHED = re.compile(r"^(\d{8})\.checkpoint$")


@dataclass(frozen=True)
class OpenedCheckpoint:
    """A checkpoint whose signature was verified: its body, note text and signer names."""

    checkpoint: Checkpoint
    note: str
    signers: tuple[str, ...]
    source: str = ""


def open_checkpoint(
    note: str, verifier_keys: Sequence[str], *, source: str = ""
) -> OpenedCheckpoint:
    """Verify a signed checkpoint against `verifier_keys` and parse its body.

    The origin must be the name of a key that signed it: a checkpoint signed by the right key
    for another log, or with an origin line no key vouches for, is refused.
    """
    keys = [read_verifier_key(k) for k in verifier_keys]
    if not keys:
        raise CheckpointError("bad signature", "no verifier key given", source)
    try:
        opened = open_note(note, keys)
    except NoteError as e:
        raise CheckpointError("bad signature", str(e), source) from None
    try:
        checkpoint = Checkpoint.parse(opened.text)
    except CheckpointFormatError as e:
        raise CheckpointError("malformed", str(e), source) from None
    signers = tuple(s.name for s in opened.signatures)
    if checkpoint.origin not in signers:
        detail = (
            f"the checkpoint's origin is {checkpoint.origin!r} but it is signed by "
            f"{', '.join(repr(s) for s in signers)}"
        )
        raise CheckpointError("wrong origin", detail, source)
    return OpenedCheckpoint(checkpoint, note, signers, source)


def issue_checkpoint(
    log: TransparencyLog, signer_key: str, *, durable: Callable[[], None] = lambda: None
) -> tuple[str, Checkpoint]:
    """Integrate pending events and sign a checkpoint of the whole log; return (note, body).

    ``durable`` forces what was integrated to disk before it is signed (`Store.make_durable`),
    so no checkpoint signs over events a power loss could still take back.
    """
    origin = _origin(signer_key)
    head = log.integrate()
    durable()
    checkpoint = Checkpoint(origin=origin, size=head.size, root=head.root)
    note = sign_note(checkpoint.body(), signer_key)
    log.tables.add_checkpoint(head.size, head.root, note)
    return note, checkpoint


def _origin(signer_key: str) -> str:
    verifier = verifier_key_of(signer_key)
    return verifier.split("+", 1)[0]


def published_checkpoints(directory: Path) -> list[Path]:
    """The checkpoint files in a publication directory, in publication order."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _PUBLISHED.match(p.name))


def read_checkpoints(paths: Iterable[Path], verifier_keys: Sequence[str]) -> list[OpenedCheckpoint]:
    """Open every checkpoint file (a file, or each file of a publication directory)."""
    opened: list[OpenedCheckpoint] = []
    for path in paths:
        files = published_checkpoints(path) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise CheckpointError("unreadable", "no NNNNNNNN.checkpoint files", str(path))
        for file in files:
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise CheckpointError("unreadable", str(e), str(file)) from None
            opened.append(open_checkpoint(text, verifier_keys, source=str(file)))
    return opened


def check_split_view(checkpoints: Sequence[OpenedCheckpoint]) -> list[str]:
    """Pairs of checkpoints of one origin that cannot both be true (same size, other roots)."""
    seen: dict[tuple[str, int], OpenedCheckpoint] = {}
    problems: list[str] = []
    for opened in checkpoints:
        body = opened.checkpoint
        key = (body.origin, body.size)
        other = seen.setdefault(key, opened)
        if other.checkpoint.root != body.root:
            problems.append(
                f"two checkpoints of {body.origin!r} at size {body.size} have different roots "
                f"({other.source or 'one'} and {opened.source or 'another'}): split view"
            )
    return problems


def publish_checkpoint(log: TransparencyLog, note: str, signer_key: str, directory: Path) -> Path:
    """Append a checkpoint to `directory` if the log proves it extends the last one there.

    Files are ``00000001.checkpoint``, ``00000002.checkpoint``, ...; each is created exclusively,
    never overwritten. Refuses a checkpoint smaller than the last published (rolled back), or one
    the log cannot prove consistent with it (forked).
    """
    vkey = verifier_key_of(signer_key)
    new = open_checkpoint(note, [vkey]).checkpoint
    directory.mkdir(parents=True, exist_ok=True)
    existing = published_checkpoints(directory)
    if existing:
        last_path = existing[-1]
        last = read_checkpoints([last_path], [vkey])[0].checkpoint
        _check_extends(log, last, new, str(last_path))
        number = int(_PUBLISHED.match(last_path.name).group(1)) + 1  # type: ignore[union-attr]
    else:
        number = 1
    path = directory / f"{number:08d}.checkpoint"
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        detail = f"{path.name} appeared while this one was checked: publish again"
        raise CheckpointError("published concurrently", detail, str(directory)) from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(note)
    return path


def _check_extends(log: TransparencyLog, old: Checkpoint, new: Checkpoint, source: str) -> None:
    if new.size < old.size:
        detail = f"the log has {new.size} leaves, fewer than the {old.size} already published"
        raise CheckpointError("rolled back", detail, source)
    if new.size == old.size:
        if new.root != old.root:
            detail = f"size {new.size} was published with another root"
            raise CheckpointError("forked", detail, source)
        return
    if old.size == 0:
        return
    try:
        proof = log.consistency_proof(old.size, new.size)
        merkle.verify_consistency(old.size, new.size, old.root, new.root, proof)
    except (merkle.ProofError, TransparencyLogError) as e:
        detail = f"the log cannot prove it extends the published checkpoint: {e}"
        raise CheckpointError("forked", detail, source) from None


def split_note(note: str) -> str:
    """The text of a signed note (what its signatures cover), without checking them."""
    end = note.rfind("\n\n")
    if end < 0:
        detail = "not a signed note: no blank line before its signatures"
        raise CheckpointError("malformed", detail)
    return note[: end + 1]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def check_reproduces(log: TransparencyLog, checkpoint: Checkpoint) -> None:
    """Refuse a checkpoint whose tree this ledger's log does not hold (another ledger's)."""
    if log.size() < checkpoint.size or log.root(checkpoint.size) != checkpoint.root:
        detail = (
            f"this ledger's log does not have the checkpoint's root at its size "
            f"({checkpoint.size}; the log holds {log.size()})"
        )
        raise CheckpointError("not of this ledger", detail)


def inclusion(
    log: TransparencyLog, checkpoint: Checkpoint, run_id: str, position: int, event_hash: str
) -> dict[str, Any]:
    """An inclusion proof of one event in a checkpoint's tree, as JSON-ready values."""
    check_reproduces(log, checkpoint)
    index = log.leaf_index(run_id, position)
    if index is None or index >= checkpoint.size:
        detail = (
            f"run {run_id} position {position} is not in the checkpoint's tree of "
            f"{checkpoint.size} events: it was recorded after it, so issue a newer checkpoint"
        )
        raise CheckpointError("not covered", detail)
    proof = log.inclusion_proof(index, checkpoint.size)
    leaf = merkle.leaf_hash(bytes.fromhex(event_hash))
    try:
        merkle.verify_inclusion(index, checkpoint.size, leaf, proof, checkpoint.root)
    except merkle.ProofError as e:
        detail = f"the stored log cannot prove run {run_id} position {position}: {e}"
        raise CheckpointError("not of this ledger", detail) from None
    return {
        "run_id": run_id,
        "position": position,
        "event_hash": event_hash,
        "leaf_index": index,
        "tree_size": checkpoint.size,
        "root": _b64(checkpoint.root),
        "proof": [_b64(p) for p in proof],
    }


def check_inclusion(item: dict[str, Any], checkpoint: Checkpoint, event_hash: str) -> str | None:
    """Check one exported inclusion proof against a checkpoint; None, or what is wrong."""
    try:
        proof = [base64.b64decode(p, validate=True) for p in item["proof"]]
        index = item["leaf_index"]
        if not isinstance(index, int) or isinstance(index, bool):
            return "leaf_index is not an integer"
        if item.get("tree_size") != checkpoint.size:
            return f"the proof is for a tree of {item.get('tree_size')}, not {checkpoint.size}"
        leaf = merkle.leaf_hash(bytes.fromhex(event_hash))
        merkle.verify_inclusion(index, checkpoint.size, leaf, proof, checkpoint.root)
    except (KeyError, TypeError, ValueError) as e:
        return f"the inclusion proof does not verify: {e}"
    return None


def checkpoint_sources(
    checkpoint: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> list[tuple[str, str]]:
    """(source, signed note text) for each checkpoint given as text, file or directory."""
    items: Sequence[str | os.PathLike[str]]
    items = [checkpoint] if isinstance(checkpoint, str | os.PathLike) else checkpoint
    out: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, str) and "\n" in item:
            out.append(("(text)", item))
            continue
        path = Path(item)
        if path.is_dir():
            files = published_checkpoints(path)
            if not files:
                raise CheckpointError("unreadable", "no NNNNNNNN.checkpoint files", str(path))
        elif path.exists():
            files = [path]
        else:
            raise CheckpointError("unreadable", "no such file or directory", str(path))
        for file in files:
            try:
                out.append((str(file), file.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as e:
                raise CheckpointError("unreadable", str(e), str(file)) from None
    return out


def verify_checkpoints(
    log: TransparencyLog,
    checkpoint: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    verifier_keys: Sequence[str],
    report: VerifyReport,
    *,
    recomputed: Mapping[str, Mapping[int, bytes]] | None = None,
    complete: bool = True,
    allow_uncovered: bool = False,
) -> None:
    """Check the ledger against signed checkpoints; add what is found to `report`.

    A checkpoint whose signature does not verify is a "bad signature" problem (it is not used
    further); two of one origin and size with different roots are "forked" (split view). The
    same finding (reason, run, position) from several checkpoints is reported once, for the
    first checkpoint that shows it. `recomputed` holds, for the runs whose content was checked,
    each event's hash recomputed from that content; unless `complete` (every run was checked),
    the other runs' rows are read whole and their hashes recomputed from each row alone (see
    `check_checkpoints`). When not `complete` (one run was checked), that run's events must
    be covered by the largest checkpoint that holds: events recorded after it are a "not
    covered" problem, unless `allow_uncovered`, which leaves them listed in its
    ``run_not_covered``. (When every run is checked, events after the checkpoint are runs
    recorded since: the checks count them, as ``not_covered``.)
    """
    opened: list[OpenedCheckpoint] = []
    for source, text in checkpoint_sources(checkpoint):
        try:
            opened.append(open_checkpoint(text, verifier_keys, source=source))
        except CheckpointError as e:
            detail = f"{e.reason}: {e.detail}" if e.reason != "bad signature" else e.detail
            report.log_problems.append(LogProblem("bad signature", detail, checkpoint=source))
    for detail in check_split_view(opened):
        report.log_problems.append(LogProblem("forked", detail))
    checks = check_checkpoints(
        log, [o.checkpoint for o in opened], recomputed=recomputed, complete=complete
    )
    seen: set[tuple[str, str | None, int | None]] = set()
    for signed, check in zip(opened, checks, strict=True):
        report.checkpoints.append(check)
        for problem in check.problems:
            key = (problem.reason, problem.run_id, problem.position)
            if key not in seen:
                seen.add(key)
                report.log_problems.append(replace(problem, checkpoint=signed.source))
    held = [(signed, check) for signed, check in zip(opened, checks, strict=True) if check.ok]
    if complete or allow_uncovered or not held:
        return
    signed, top = max(held, key=lambda pair: pair[1].checkpoint.size)
    for run_id, late in top.run_not_covered.items():
        span = f"{late[0]}" if len(late) == 1 else f"{late[0]}..{late[-1]}"
        detail = (
            f"{len(late)} of the run's events (positions {span}) were recorded after the "
            f"largest checkpoint that holds ({top.checkpoint.size} events), so no signature "
            "vouches for them: check against a newer checkpoint (or allow uncovered events, "
            "which are then listed)"
        )
        report.log_problems.append(
            LogProblem("not covered", detail, run_id, late[0], checkpoint=signed.source)
        )


def proof_items(
    log: TransparencyLog, note: str, events: Sequence[tuple[str, int, str]]
) -> list[dict[str, Any]]:
    """The export lines that prove a run: its checkpoint, then one inclusion proof per event.

    `events` are (run id, position, hash). Events the checkpoint does not cover (recorded after
    it) get no proof. Refuses a checkpoint this ledger's log does not reproduce.
    """
    try:
        body = Checkpoint.parse(split_note(note))
    except CheckpointFormatError as e:
        raise CheckpointError("malformed", str(e)) from None
    check_reproduces(log, body)
    items: list[dict[str, Any]] = [{"type": "checkpoint", "note": note}]
    runs = {run_id for run_id, _, _ in events}
    leaves = {
        (run_id, position): leaf
        for run_id in runs
        for position, leaf in log.leaf_indexes(
            run_id, [p for r, p, _ in events if r == run_id]
        ).items()
    }
    for run_id, position, event_hash in events:
        index = leaves.get((run_id, position))
        if index is None or index >= body.size:
            continue
        proof = [_b64(p) for p in log.inclusion_proof(index, body.size)]
        item = {"position": position, "leaf_index": index, "tree_size": body.size, "proof": proof}
        if check_inclusion(item, body, event_hash) is not None:
            detail = f"the stored log cannot prove run {run_id} position {position}"
            raise CheckpointError("not of this ledger", detail)
        items.append({"type": "proof", **item})
    if len(items) == 1:
        detail = (
            f"the checkpoint of {body.size} events covers none of this run's events: issue a "
            "newer checkpoint first"
        )
        raise CheckpointError("not covered", detail)
    return items


@dataclass
class ExportCheck:
    """What checking an export file's checkpoint and inclusion proofs found."""

    checkpoint: Checkpoint | None = None
    covered: int = 0
    not_covered: list[int] = field(default_factory=list)
    problems: list[LogProblem] = field(default_factory=list)


def check_export_proofs(
    run_id: str,
    events: Iterable[tuple[int, str]],
    note: str | None,
    proofs: Mapping[int, dict[str, Any]],
    verifier_keys: Sequence[str],
    *,
    source: str = "",
) -> ExportCheck:
    """Check an exported run's checkpoint signature and each event's inclusion proof.

    `events` are (position, hash as recomputed from the file's content), in position order,
    read once. Every proof must verify against the signed root; events without a proof are
    listed as not covered.
    """
    result = ExportCheck()
    if note is None:
        detail = (
            "the file carries no checkpoint, so nothing here is signed: export it with "
            "--checkpoint, or import it to check its hash chain"
        )
        result.problems.append(LogProblem("no checkpoint", detail, checkpoint=source))
        return result
    try:
        body = open_checkpoint(note, verifier_keys, source=source).checkpoint
    except CheckpointError as e:
        detail = f"{e.reason}: {e.detail}" if e.reason != "bad signature" else e.detail
        result.problems.append(LogProblem("bad signature", detail, checkpoint=source))
        return result
    result.checkpoint = body
    last_index = -1
    for position, event_hash in events:
        item = proofs.get(position)
        if item is None:
            result.not_covered.append(position)
            continue
        wrong = check_inclusion(item, body, event_hash)
        index = item.get("leaf_index")
        if wrong is None and isinstance(index, int) and index <= last_index:
            wrong = f"leaf {index} does not follow the previous event's leaf {last_index}"
        if wrong is not None:
            result.problems.append(
                LogProblem("re-chained", wrong, run_id, position, checkpoint=source)
            )
            continue
        last_index = int(index) if isinstance(index, int) else last_index
        result.covered += 1
    if result.covered and result.not_covered and result.not_covered[0] < max(proofs, default=0):
        first = result.not_covered[0]
        detail = f"position {first} has no inclusion proof though later events have one"
        result.problems.append(LogProblem("truncated", detail, run_id, first, checkpoint=source))
    return result


def dumps(value: Any) -> str:
    """Compact JSON for proofs."""
    return json.dumps(value, ensure_ascii=False)
