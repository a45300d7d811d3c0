"""The Merkle tree math of RFC 9162 (Certificate Transparency v2, section 2.1), bytes in, bytes out.

Owns the tree hash (MTH) over already-hashed leaves, the leaf and node hash formulas, the leaf
ranges that make up inclusion and consistency proofs, reference proof builders over a list of
leaf hashes, the assembly of a range's hash from stored complete subtrees, and the two proof
verifiers. Hashes are 32 raw bytes of SHA-256; leaves are domain-separated from interior nodes
(``0x00`` and ``0x01`` prefixes) as the RFC requires.

Must not store anything, know what a leaf means, or encode hashes (hex, base64): the ledger's
store keeps subtree hashes and calls `range_root` with them; notes and checkpoints live elsewhere.

Edge cases follow the widely used Go verifier (transparency-dev/merkle, package ``proof``):
an index at or past the tree size, a negative number, a second tree smaller than the first, a
proof of the wrong length and any hash that is not 32 bytes all fail; two trees of the same size
are consistent when the proof is empty and the roots are equal (so two empty trees with the empty
root are). A consistency proof from the empty tree to a larger one fails, as RFC 9162 defines
them only for 0 < size1 and the Go package's RootFromConsistencyProof refuses them (some of its
versions accept one with an empty proof instead).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

__all__ = [
    "ProofError",
    "consistency_proof",
    "consistency_ranges",
    "inclusion_proof",
    "inclusion_ranges",
    "leaf_hash",
    "node_hash",
    "range_root",
    "root",
    "verify_consistency",
    "verify_inclusion",
]

_HASH_SIZE = 32
_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"
_EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(ValueError):
    """An inclusion or consistency proof failed to verify; the message names what failed."""


# Hashes --------------------------------------------------------------------------------------


def leaf_hash(entry: bytes) -> bytes:
    """The hash of a leaf: SHA-256(0x00 || entry)."""
    return hashlib.sha256(_LEAF_PREFIX + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """The Merkle tree hash (MTH) of already-hashed leaves; SHA-256(b"") for no leaves.

    Pairs neighbours level by level and promotes a lone right node unchanged, which gives the
    RFC's result (split at the largest power of two smaller than n) without recursion, so a
    million leaves cost a million hashes and no deep stack. Raises ValueError when a leaf hash is
    not 32 bytes.
    """
    level = list(leaf_hashes)
    for position, item in enumerate(level):
        if len(item) != _HASH_SIZE:
            raise ValueError(f"leaf hash {position} is {len(item)} bytes, expected {_HASH_SIZE}")
    if not level:
        return _EMPTY_ROOT
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


# Proof shapes --------------------------------------------------------------------------------


def _split(n: int) -> int:
    """The RFC's split point k for n >= 2 leaves: the largest power of two smaller than n."""
    return 1 << ((n - 1).bit_length() - 1)


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges [start, end) whose tree hashes form the inclusion proof, in proof order.

    This is RFC 9162 section 2.1.3.1 PATH(index, D[0:size]) unrolled: the ranges run from the
    leaf's sibling up to the root's other child. Every range is a node of the tree of `size`
    leaves, so `range_root` accepts it. Raises ValueError unless 0 <= index < size.
    """
    if index < 0 or size < 0:
        raise ValueError(f"index ({index}) and size ({size}) must not be negative")
    if index >= size:
        raise ValueError(f"index {index} is not in a tree of size {size}")
    ranges: list[tuple[int, int]] = []
    lo, hi = 0, size
    while hi - lo > 1:
        mid = lo + _split(hi - lo)
        if index < mid:
            ranges.append((mid, hi))
            hi = mid
        else:
            ranges.append((lo, mid))
            lo = mid
    ranges.reverse()
    return ranges


def consistency_ranges(size1: int, size2: int) -> list[tuple[int, int]]:
    """The leaf ranges whose tree hashes prove the first size1 leaves are a prefix of size2.

    This is RFC 9162 section 2.1.4.1 SUBPROOF(size1, D[0:size2], true) unrolled, in proof order;
    equal sizes need no ranges. Every range is a node of the tree of `size2` leaves, so
    `range_root` accepts it. Raises ValueError unless 0 < size1 <= size2.
    """
    if size1 < 0 or size2 < 0:
        raise ValueError(f"size1 ({size1}) and size2 ({size2}) must not be negative")
    if size1 == 0:
        raise ValueError("a consistency proof from the empty tree is meaningless")
    if size1 > size2:
        raise ValueError(f"size1 ({size1}) is larger than size2 ({size2})")
    ranges: list[tuple[int, int]] = []
    lo, hi, m, whole_first_tree = 0, size2, size1, True
    while m != hi - lo:
        mid = lo + _split(hi - lo)
        if lo + m <= mid:
            ranges.append((mid, hi))
            hi = mid
        else:
            ranges.append((lo, mid))
            m -= mid - lo
            lo = mid
            whole_first_tree = False
    if not whole_first_tree:
        ranges.append((lo, hi))
    ranges.reverse()
    return ranges


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """The inclusion proof of leaf `index` in the tree of `leaf_hashes` (reference version).

    Hashes each of `inclusion_ranges` from the list, so it costs O(n); a store builds the same
    proof from stored subtrees with `range_root`. Raises ValueError unless 0 <= index < n.
    """
    return [root(leaf_hashes[a:b]) for a, b in inclusion_ranges(index, len(leaf_hashes))]


def consistency_proof(leaf_hashes: Sequence[bytes], size1: int, size2: int) -> list[bytes]:
    """The consistency proof of the first size1 leaves against the first size2 (reference version).

    Hashes each of `consistency_ranges` from the list. Raises ValueError unless
    0 < size1 <= size2 <= len(leaf_hashes).
    """
    if size2 > len(leaf_hashes):
        raise ValueError(f"size2 ({size2}) is larger than the {len(leaf_hashes)} leaves given")
    return [root(leaf_hashes[a:b]) for a, b in consistency_ranges(size1, size2)]


def range_root(start: int, end: int, subtree: Callable[[int, int], bytes]) -> bytes:
    """The tree hash of leaves [start, end), assembled from complete aligned subtree hashes.

    `subtree(a, b)` must return the hash of a complete aligned subtree: b - a is a power of two
    2**j and a is a multiple of it. The range is cut by the RFC's split rule, so with n = end -
    start and k the largest power of two smaller than n, it is valid exactly when n == 1, or
    start is a multiple of k (the left child [start, start + k) is then complete and aligned, and
    so is every piece of the rest). That covers every range [0, n) and every node of any tree,
    hence every range `inclusion_ranges` and `consistency_ranges` produce. At most
    popcount(n) + 1 subtrees are asked for. An empty range (start == end) is the empty tree.
    Raises ValueError for a negative start, end < start, a range outside that rule, or a
    callback hash that is not 32 bytes.
    """
    if start < 0 or end < start:
        raise ValueError(f"[{start}, {end}) is not a range of leaves")
    n = end - start
    if n == 0:
        return _EMPTY_ROOT
    if n > 1 and start % _split(n) != 0:
        raise ValueError(
            f"[{start}, {end}) cannot be built from complete aligned subtrees: start must be a "
            f"multiple of {_split(n)}, the largest power of two smaller than its {n} leaves"
        )
    pieces: list[tuple[int, int]] = []
    if n & (n - 1) == 0 and start % n != 0:
        half = n // 2
        pieces = [(start, start + half), (start + half, end)]
    else:
        lo = start
        while lo < end:
            rest = end - lo
            width = rest if rest & (rest - 1) == 0 else _split(rest)
            pieces.append((lo, lo + width))
            lo += width
    hashes: list[bytes] = []
    for a, b in pieces:
        got = subtree(a, b)
        if len(got) != _HASH_SIZE:
            raise ValueError(f"subtree [{a}, {b}) hash is {len(got)} bytes, expected {_HASH_SIZE}")
        hashes.append(got)
    result = hashes[-1]
    for left in reversed(hashes[:-1]):
        result = node_hash(left, result)
    return result


# Verification --------------------------------------------------------------------------------


def _check_hash(what: str, value: bytes) -> None:
    """Raise ProofError unless `value` is a 32-byte hash; `what` names it in the message."""
    if len(value) != _HASH_SIZE:
        raise ProofError(f"{what} is {len(value)} bytes, expected {_HASH_SIZE}")


def _check_proof_hashes(proof: Sequence[bytes]) -> None:
    """Raise ProofError unless every proof element is a 32-byte hash."""
    for position, item in enumerate(proof):
        _check_hash(f"proof element {position}", item)


def _inclusion_length(index: int, size: int) -> int:
    """The number of hashes in the inclusion proof of leaf `index` in a tree of `size` leaves."""
    inner = (index ^ (size - 1)).bit_length()
    return inner + (index >> inner).bit_count()


def _inclusion_root(index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that an inclusion proof of the right length gives (RFC 9162 2.1.3.2 steps 3-6)."""
    fn, sn, r = index, size - 1, leaf_hash
    for p in proof:
        if sn == 0:  # the RFC's own guard; the length check rules it out
            raise ProofError(f"inclusion proof is too long for a tree of size {size}")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:  # the RFC's own guard; the length check rules it out
        raise ProofError(f"inclusion proof is too short for a tree of size {size}")
    return r


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that `leaf_hash` is leaf `index` of the tree of `size` leaves with hash `root`.

    RFC 9162 section 2.1.3.2. Returns None on success; raises ProofError naming the failure: a
    negative number, index >= size, a hash that is not 32 bytes, a proof of the wrong length or
    a computed root that differs from `root`.
    """
    if index < 0 or size < 0:
        raise ProofError(f"index ({index}) and size ({size}) must not be negative")
    if index >= size:
        raise ProofError(f"index {index} is not in a tree of size {size}")
    _check_hash("leaf hash", leaf_hash)
    _check_hash("root", root)
    _check_proof_hashes(proof)
    expected = _inclusion_length(index, size)
    if len(proof) != expected:
        raise ProofError(
            f"inclusion proof has {len(proof)} hashes, expected {expected} "
            f"for leaf {index} in a tree of size {size}"
        )
    computed = _inclusion_root(index, size, leaf_hash, proof)
    if computed != root:
        raise ProofError(
            f"inclusion proof for leaf {index} in a tree of size {size} gives root "
            f"{computed.hex()}, not the expected {root.hex()}"
        )


def _consistency_length(size1: int, size2: int) -> int:
    """The number of hashes in the consistency proof for 0 < size1 < size2."""
    shift = (size1 & -size1).bit_length() - 1
    inner = (((size1 - 1) ^ (size2 - 1)).bit_length()) - shift
    border = ((size1 - 1) >> (inner + shift)).bit_count()
    seed = 0 if size1 == 1 << shift else 1
    return seed + inner + border


def _consistency_roots(
    size1: int, size2: int, root1: bytes, proof: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """Both roots a consistency proof of the right length gives (RFC 9162 2.1.4.2 steps 2-7)."""
    path = list(proof)
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:  # the RFC's own guard; the length check rules it out
            raise ProofError(f"consistency proof is too long for size {size2}")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:  # the RFC's own guard; the length check rules it out
        raise ProofError(f"consistency proof is too short for size {size2}")
    return fr, sr


def verify_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of size1 leaves with hash root1 is a prefix of size2's with root2.

    RFC 9162 section 2.1.4.2. Returns None on success; raises ProofError naming the failure: a
    negative size, size2 < size1, size1 == 0 < size2, a hash that is not 32 bytes, a proof of the
    wrong length (equal sizes need an empty one) or a root that the proof does not reproduce.
    """
    if size1 < 0 or size2 < 0:
        raise ProofError(f"size1 ({size1}) and size2 ({size2}) must not be negative")
    _check_hash("root1", root1)
    _check_hash("root2", root2)
    _check_proof_hashes(proof)
    if size2 < size1:
        raise ProofError(f"size2 ({size2}) is smaller than size1 ({size1})")
    if size1 == size2:
        if proof:
            raise ProofError(f"equal sizes ({size1}) need an empty proof, got {len(proof)} hashes")
        if root1 != root2:
            raise ProofError(f"trees of equal size {size1} have different roots")
        return
    if size1 == 0:
        raise ProofError("a consistency proof from the empty tree is meaningless")
    expected = _consistency_length(size1, size2)
    if len(proof) != expected:
        raise ProofError(
            f"consistency proof has {len(proof)} hashes, expected {expected} "
            f"from size {size1} to size {size2}"
        )
    computed1, computed2 = _consistency_roots(size1, size2, root1, proof)
    for which, computed, claimed in (("root1", computed1, root1), ("root2", computed2, root2)):
        if computed != claimed:
            raise ProofError(
                f"consistency proof from size {size1} to {size2} does not reproduce {which} "
                f"(got {computed.hex()}, expected {claimed.hex()})"
            )
