"""Blob reading for a run diff: a batched cache and the differing tails of conversations.

Owns how a diff reads content-addressed blobs: only the blobs of items that differ, fetched in
batches (one query per batch, not one per blob), and for two conversation chains only the
messages after the last node they share (content addressing makes a shared prefix the same
node refs, so walking back from both heads stops at the first node both chains hold). Must not
write and must not compare events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentledger.ledger import Ledger

__all__ = ["MISSING", "BlobCache", "ConversationTails", "conversation_tails"]


class _Missing:
    """The value of a blob the ledger does not hold."""

    def __repr__(self) -> str:
        return "<missing blob>"


MISSING: Any = _Missing()


class BlobCache:
    """Blobs of one ledger, fetched in batches and kept for the life of one diff."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._values: dict[str, Any] = {}

    def fetch(self, refs: Iterable[str | None]) -> None:
        """Load every ref not loaded yet, in one query."""
        missing = {ref for ref in refs if ref and ref not in self._values}
        if not missing:
            return
        found = self._ledger.blobs(sorted(missing))
        for ref in missing:
            self._values[ref] = found.get(ref, MISSING)

    def get(self, ref: str) -> Any:
        """The value under `ref` (`MISSING` when the ledger has no such blob)."""
        if ref not in self._values:
            self.fetch([ref])
        return self._values[ref]


@dataclass
class ConversationTails:
    """Two conversations cut after the messages they share: `shared` count, then each tail."""

    shared: int = 0
    a: list[Any] = field(default_factory=list)
    b: list[Any] = field(default_factory=list)


@dataclass
class _Walk:
    """Walking one pair of chains back from their heads, one node per side per round."""

    current: list[str | None]
    seen: list[dict[str, int]]
    tails: list[list[Any]]
    common: str | None = None
    done: bool = False


def conversation_tails(
    cache: BlobCache, pairs: Sequence[tuple[str, str]], counts: Sequence[tuple[int, int]]
) -> list[ConversationTails]:
    """For each (head a, head b), the messages after the last node both chains share.

    All pairs walk together, one batched fetch per round, so n differing calls cost as many
    queries as their longest differing tail, not n times that. `counts` are the recorded
    message counts, which give the number of shared messages.
    """
    walks = [
        _Walk([ref_a, ref_b], [{}, {}], [[], []], common=ref_a if ref_a == ref_b else None)
        for ref_a, ref_b in pairs
    ]
    for walk in walks:
        walk.done = walk.common is not None
    while True:
        active = [w for w in walks if not w.done]
        if not active:
            break
        cache.fetch(ref for w in active for ref in w.current)
        for walk in active:
            _step(cache, walk)
    results: list[ConversationTails] = []
    for walk, (count_a, _count_b) in zip(walks, counts, strict=True):
        tail_a = [m for m in reversed(walk.tails[0]) if m is not None]
        tail_b = [m for m in reversed(walk.tails[1]) if m is not None]
        results.append(ConversationTails(max(count_a - len(tail_a), 0), tail_a, tail_b))
    return results


def _step(cache: BlobCache, walk: _Walk) -> None:
    """Advance both sides one node; stop at the first node the other side has already seen."""
    for side in (0, 1):
        ref = walk.current[side]
        if ref is None:
            continue
        other = 1 - side
        if ref in walk.seen[other]:
            walk.tails[other] = walk.tails[other][: walk.seen[other][ref]]
            walk.common, walk.done = ref, True
            return
        node = cache.get(ref)
        walk.seen[side][ref] = len(walk.tails[side])
        if node is MISSING or not isinstance(node, dict):
            walk.tails[side].append({"role": "?", "content": f"<missing message node {ref}>"})
            walk.current[side] = None
        else:
            walk.tails[side].append(node.get("message"))
            parent = node.get("parent_ref")
            walk.current[side] = parent if isinstance(parent, str) else None
    if walk.current[0] is None and walk.current[1] is None:
        walk.done = True
