"""Verification of blobs: finding the refs an event or blob names, and re-hashing each blob.

A ref is the value of a key ending ``_ref`` or an item of a list under a key ending ``_refs``,
spelled ``sha256:`` and 64 hex digits (`blob_refs_in`). In canonical JSON a quote inside a
string is always escaped, so ``_ref":"sha256:<hex>"`` can only be a key ending ``_ref`` and its
whole string value: `refs_in_canonical` finds the refs of canonical bytes with one regex pass
instead of walking the parsed value, and walks only when a ``_refs`` list holds anything but
refs. `BlobCheck` re-hashes each blob from its content (ref = SHA-256 of its RFC 8785 bytes),
follows the refs inside it, and remembers the blobs found intact in a bounded cache shared by
every run it checks. Must not know events or storage (it knows a sealed blob's shape).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentledger.ledger._canonical import canonical_json_of_parsed, loads_noting_floats
from agentledger.ledger._hashing import blob_ref
from agentledger.ledger._subjects import is_sealed
from agentledger.ledger.errors import CorruptBlobError, InvalidPayloadError

__all__ = [
    "BlobCheck",
    "BlobLookup",
    "RunBlobs",
    "SealedCheck",
    "blob_refs_in",
    "refs_in_canonical",
]

BlobLookup = Callable[[Sequence[str]], Mapping[str, bytes | CorruptBlobError]]
"""Canonical bytes by ref for the refs that exist; a blob that does not unpack as its error."""

BlobReason = Literal["blob altered", "blob missing", "key destroyed", "erasure unfinished"]
Report = Callable[[int, BlobReason, str], None]
"""Where a broken blob is reported: the position of its first use in the run, why, and detail."""
SealedCheck = Callable[[Mapping[str, Any]], tuple[BlobReason, str] | None]
"""What is wrong with a sealed blob (its parsed envelope, intact by its ref), or None: that its
data subject's key no longer opens it, or is gone without a recorded erasure."""

_BLOB_REF = re.compile(r"sha256:[0-9a-f]{64}")
_REF_OR_LIST = re.compile(rb'_ref":"(sha256:[0-9a-f]{64})"|_refs":\[')
_REF_LIST = re.compile(rb'(?:"sha256:[0-9a-f]{64}"(?:,"sha256:[0-9a-f]{64}")*)?\]')
_REF_IN_LIST = re.compile(rb"sha256:[0-9a-f]{64}")
CACHE_SIZE = 50_000
"""Intact blobs remembered per generation (two generations are kept): enough that a long run's
conversation chain, whose nodes each name the one before, is re-checked only back to a node
checked lately, while memory stays bounded however long the run."""


def blob_refs_in(value: Any) -> list[str]:
    """Blob refs in a payload or blob: values of keys ending ``_ref`` and items of ``_refs``.

    Only values spelled as refs (``sha256:`` and 64 hex digits) are refs: a user's own
    ``{"doc_ref": "x"}`` in a delta or tool result names no blob. (A catalogue field holding
    something else fails its schema when written, and its event's hash when altered later.)
    """
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if key.endswith("_ref") and isinstance(inner, str) and _BLOB_REF.fullmatch(inner):
                    found.append(inner)
                elif key.endswith("_refs") and isinstance(inner, list):
                    found.extend(r for r in inner if isinstance(r, str) and _BLOB_REF.fullmatch(r))
                else:
                    stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def refs_in_canonical(data: bytes, value: Any) -> list[str]:
    """`blob_refs_in(value)` (as a set of refs), where `data` are `value`'s canonical bytes.

    One regex pass over the bytes. A ``_refs`` list that holds anything but refs (which
    `blob_refs_in` reads without descending into it) makes it walk `value` instead.
    """
    if b"_ref" not in data:
        return []
    found: list[str] = []
    for match in _REF_OR_LIST.finditer(data):
        ref = match.group(1)
        if ref is not None:
            found.append(ref.decode("ascii"))
            continue
        items = _REF_LIST.match(data, match.end())
        if items is None:
            return blob_refs_in(value)
        found.extend(r.decode("ascii") for r in _REF_IN_LIST.findall(items.group()))
    return found


class _Remembered:
    """Refs found intact, in two generations of at most `size` each (the older is dropped)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._recent: set[str] = set()
        self._older: set[str] = set()

    def hit(self, ref: str) -> bool:
        if ref in self._recent:
            return True
        if ref in self._older:
            self.add(ref)
            return True
        return False

    def add(self, ref: str) -> None:
        if len(self._recent) >= self._size:
            self._older, self._recent = self._recent, set()
        self._recent.add(ref)


@dataclass
class RunBlobs:
    """One run's side of the blob check: the refs named since the last check, and reports.

    `pending` maps each ref to the position of its first use on the page; `report` receives
    each broken blob the run reaches, once per run.
    """

    report: Report
    pending: dict[str, int] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)
    own: _Remembered | None = None
    """This run's own cache, used once some blob was found broken (see `BlobCheck`)."""


class BlobCheck:
    """Re-hashes blobs by ref and follows the refs inside them, for many runs at once.

    `check` takes the refs several runs named (a page's worth) and reads them level by level,
    one lookup per level for all the runs. A blob found intact is remembered (two bounded
    generations of `CACHE_SIZE`), so a blob that many events or runs name is re-hashed once
    while it stays remembered. A broken blob is remembered too and reported in every run that
    reaches it, once per run. Once any blob was found broken, an intact blob may name a broken
    one, so the shared cache is no longer trusted: each run then follows its blobs again with
    a cache of its own, and each run that reaches the broken blob reports it.
    """

    def __init__(
        self,
        lookup: BlobLookup,
        *,
        cache_size: int = CACHE_SIZE,
        sealed: dict[str, str] | None = None,
        check_sealed: SealedCheck | None = None,
    ) -> None:
        self._lookup = lookup
        self._check_sealed = check_sealed
        """When given, asked about every sealed blob whose ref holds (see `SealedCheck`)."""
        self._cache_size = cache_size
        self.sealed = sealed
        """When given, receives the ref and key id of every intact blob sealed for a data
        subject (what `Ledger.verify` counts as erased once the key is gone)."""
        self._intact = _Remembered(cache_size)
        self._broken: dict[str, tuple[BlobReason, str]] = {}

    def check(self, runs: Sequence[RunBlobs]) -> int:
        """Check the blobs each run named (its `pending`, emptied) and every blob they name.

        A broken one is reported to each run reaching it, at the position of its first use
        there. Returns how many blobs were re-hashed (those remembered intact are not).
        """
        checked = 0
        if not self._broken:
            named: dict[str, int] = {}
            for run in runs:
                named.update(run.pending)
            checked += self._walk(named, self._intact, None)
        for run in runs:
            if run.pending:
                cache = self._intact
                if self._broken:
                    run.own = run.own or _Remembered(self._cache_size)
                    cache = run.own
                checked += self._walk(run.pending, cache, run)
                run.pending = {}
        return checked

    def _walk(self, first_use: dict[str, int], cache: _Remembered, run: RunBlobs | None) -> int:
        """Follow `first_use`'s refs level by level; report broken ones to `run` (if any)."""
        checked = 0
        frontier = list(first_use)
        while frontier:
            wanted: list[str] = []
            for ref in dict.fromkeys(frontier):
                if ref in self._broken:
                    self._reach(run, ref, first_use[ref])
                elif not cache.hit(ref):
                    wanted.append(ref)
            frontier = []
            if not wanted:
                break
            found = self._lookup(wanted)
            for ref in wanted:
                checked += 1
                inner = self._verdict(ref, found.get(ref))
                if ref in self._broken:
                    self._reach(run, ref, first_use[ref])
                    continue
                cache.add(ref)
                for child in inner:
                    if child not in first_use:
                        first_use[child] = first_use[ref]
                    frontier.append(child)
        return checked

    def _reach(self, run: RunBlobs | None, ref: str, position: int) -> None:
        if run is not None and ref not in run.reported:
            run.reported.add(ref)
            reason, detail = self._broken[ref]
            run.report(position, reason, detail)

    def _verdict(self, ref: str, data: bytes | CorruptBlobError | None) -> list[str]:
        """The refs inside an intact blob; a broken one goes to ``_broken`` instead."""
        if data is None:
            self._broken[ref] = ("blob missing", ref)
            return []
        if isinstance(data, CorruptBlobError):
            self._broken[ref] = ("blob altered", f"{ref}: {data.detail}")
            return []
        try:
            content, plain_floats = loads_noting_floats(data)
            # The ref is the hash of the content's canonical bytes, however they are stored:
            # bytes that are not canonical, or not the single value a reader parses (a
            # repeated key, say), fail here even when they hash to the ref as stored.
            canonical = canonical_json_of_parsed(content, plain_floats=plain_floats)
        except (ValueError, InvalidPayloadError) as e:
            self._broken[ref] = ("blob altered", f"{ref}: {e}")
            return []
        if blob_ref(canonical) != ref:
            self._broken[ref] = ("blob altered", ref)
            return []
        if (self.sealed is not None or self._check_sealed is not None) and is_sealed(content):
            wrong = self._check_sealed(content) if self._check_sealed is not None else None
            if wrong is not None:
                self._broken[ref] = (wrong[0], f"{ref}: {wrong[1]}")
                return []
            if self.sealed is not None:
                self.sealed[ref] = content["key_id"]
        return refs_in_canonical(canonical, content)
