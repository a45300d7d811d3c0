"""The RFC 9162 Merkle tree: published vectors, the verifiers' edge cases and their laws.

Published values come from transparency-dev/merkle (Go), whose test data is the common reference
of Certificate Transparency implementations; each block names the file it was copied from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TypeAlias

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.ledger import merkle
from agentledger.ledger.merkle import (
    ProofError,
    consistency_proof,
    consistency_ranges,
    inclusion_proof,
    inclusion_ranges,
    leaf_hash,
    node_hash,
    range_root,
    root,
    verify_consistency,
    verify_inclusion,
)

h = bytes.fromhex


def hexes(text: str) -> list[bytes]:
    """The hashes written in `text` as whitespace-separated hex."""
    return [h(word) for word in text.split()]


def vectors(text: str) -> list[tuple[int, int, list[bytes]]]:
    """Proof vectors written as "a b: hash", further hashes of the proof on the lines below."""
    found: list[tuple[int, int, list[bytes]]] = []
    for line in text.strip().splitlines():
        head, colon, rest = line.partition(":")
        if colon:
            a, b = head.split()
            found.append((int(a), int(b), []))
        found[-1][2].extend(hexes(rest if colon else head))
    return found


# transparency-dev/merkle testonly/constants.go: LeafInputs, NodeHashes (level by level) and
# RootHashes (index = tree size; size 0 is SHA-256 of nothing).
LEAF_INPUTS = [h(x) for x in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657")]
LEAF_INPUTS.append(h("606162636465666768696a6b6c6d6e6f"))
NODE_HASHES = [
    hexes("""
        6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d
        96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7
        0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7
        07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7
        bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b
        4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658
        b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f
        46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1
    """),
    hexes("""
        fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125
        5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e
        0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a
        ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0
    """),
    hexes("""
        d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7
        6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4
    """),
    hexes("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
]
ROOTS = hexes("""
    e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
    6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d
    fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125
    aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77
    d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7
    4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4
    76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef
    ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c
    5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328
""")
LEAVES = [leaf_hash(entry) for entry in LEAF_INPUTS]

# Inclusion proofs, "index size: proof": transparency-dev/merkle proof/verify_test.go
# (inclusionProofs, which numbers leaves from 1; shifted here to 0-based indexes) and
# testonly/reference_test.go (TestRefInclusionProof, 0-based).
INCLUSION_VECTORS = vectors("""
    0 1:
    0 2: 96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7
    1 2: 6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d
    2 3: fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125
    1 5: 6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d
         5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e
         bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b
    0 8: 96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7
         5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e
         6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4
    5 8: bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b
         ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0
         d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7
""")
# Consistency proofs, "size1 size2: proof": proof/verify_test.go (consistencyProofs) and
# testonly/reference_test.go (TestRefConsistencyProof).
CONSISTENCY_VECTORS = vectors("""
    1 1:
    1 8: 96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7
         5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e
         6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4
    6 8: 0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a
         ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0
         d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7
    2 5: 5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e
         bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b
    6 7: 0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a
         b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f
         d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7
""")
# Names for published node hashes, used by the edge-case tests below.
L0, L4, L5 = LEAVES[0], LEAVES[4], LEAVES[5]
N45, N67 = NODE_HASHES[1][2:]
N0123 = ROOT4 = ROOTS[4]
# Go's "sha256SomeHash" (proof/verify_test.go), a well-formed hash of nothing in these trees.
SOME_HASH = h("abacaba000000000000000000000000000000000000000000060061e00123456")
EMPTY_ROOT = ROOTS[0]

Term: TypeAlias = str | tuple["Term", "Term"]
Subtrees = dict[tuple[int, int], bytes]


def ids(vectors: Sequence[tuple[int, int, list[bytes]]]) -> list[str]:
    """Readable ids for (a, b, proof) vectors: "a-of-b"."""
    return [f"{a}-of-{b}" for a, b, _ in vectors]


def naive_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 9162 section 2.1.1 MTH, written as the recursive definition."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return node_hash(naive_root(leaves[:k]), naive_root(leaves[k:]))


def subtree_table(leaves: Sequence[bytes]) -> Subtrees:
    """Every complete aligned subtree hash of the tree, keyed [start, end), as a store keeps."""
    table = {(i, i + 1): item for i, item in enumerate(leaves)}
    width = 1
    while width * 2 <= len(leaves):
        for a in range(0, len(leaves) - 2 * width + 1, 2 * width):
            left, right = table[(a, a + width)], table[(a + width, a + 2 * width)]
            table[(a, a + 2 * width)] = node_hash(left, right)
        width *= 2
    return table


def from_table(table: Subtrees, asked: list[tuple[int, int]] | None = None) -> Callable[..., bytes]:
    """A `range_root` callback over the table; a KeyError means it asked for a non-subtree."""

    def subtree(a: int, b: int) -> bytes:
        """The stored hash of [a, b), noting the request."""
        if asked is not None:
            asked.append((a, b))
        return table[(a, b)]

    return subtree


def symbolic(lo: int, hi: int, names: dict[tuple[int, int], str]) -> Term:
    """The MTH of [lo, hi) as a term over named ranges, unfolded by the RFC's split rule."""
    if (lo, hi) in names:
        return names[(lo, hi)]
    if hi - lo == 1:
        return f"leaf {lo}"
    k = 1 << ((hi - lo - 1).bit_length() - 1)
    return (symbolic(lo, lo + k, names), symbolic(lo + k, hi, names))


def inclusion_term(index: int, size: int) -> Term | None:
    """The root a verifier computes for (index, size), over proof slots; None when invalid."""
    if not 0 <= index < size:
        return None
    names = {r: f"p{j}" for j, r in enumerate(inclusion_ranges(index, size))}
    names[(index, index + 1)] = "leaf"
    return symbolic(0, size, names)


def consistency_terms(size1: int, size2: int) -> tuple[Term, Term] | None:
    """Both roots a verifier computes for size1 < size2, over proof slots; None otherwise."""
    if not 0 < size1 < size2:
        return None
    names = {r: f"p{j}" for j, r in enumerate(consistency_ranges(size1, size2))}
    if size1 & (size1 - 1) == 0:
        names[(0, size1)] = "root1"
    return symbolic(0, size1, names), symbolic(0, size2, names)


def flip(value: bytes, position: int, mask: int) -> bytes:
    """`value` with the byte at `position` (modulo its length) xored with a nonzero mask."""
    position %= len(value)
    return value[:position] + bytes([value[position] ^ mask]) + value[position + 1 :]


def flip_at(proof: Sequence[bytes], i: int, mask: int) -> list[bytes]:
    """A copy of `proof` whose element i has its first byte xored with `mask`."""
    return [flip(item, 0, mask) if j == i else item for j, item in enumerate(proof)]


def accepts(verifier: Callable[..., None], *args: object) -> bool:
    """Whether the verifier accepts the arguments (True) or raises ProofError (False)."""
    try:
        verifier(*args)
    except ProofError:
        return False
    return True


def draft_vector_leaves() -> list[bytes]:
    """The tree of draft-ietf-plants-merkle-tree-certs' subtree vectors: d[i] = bytes([i])."""
    return [leaf_hash(bytes([i])) for i in range(130)]


def go_valid_subtrees() -> list[tuple[int, int]]:
    """Go's isSubtreeValid ranges up to 130, in its order: start 0 or a multiple of bitCeil."""
    return [
        (start, end)
        for end in range(1, 131)
        for start in range(end)
        if start == 0 or start % (1 << (end - start - 1).bit_length()) == 0
    ]


def nearby(value: int) -> st.SearchStrategy[int]:
    """Numbers a careless caller might pass instead of `value` (Go's probes and neighbours)."""
    return st.one_of(
        st.integers(-2, 2).map(lambda d: value + d),
        st.sampled_from([value * 2, value // 2, value ^ 2, value ^ 1]),
    )


@st.composite
def trees(draw: st.DrawFn, min_size: int = 1, max_size: int = 300) -> list[bytes]:
    """Leaf hashes of a tree with distinct entries."""
    size = draw(st.integers(min_size, max_size))
    salt = draw(st.binary(max_size=4))
    return [leaf_hash(salt + i.to_bytes(4, "big")) for i in range(size)]


# Published vectors ---------------------------------------------------------------------------


def test_leaf_inputs_hash_to_the_published_leaf_nodes() -> None:
    """The leaf hashes of the eight standard inputs are the published level-0 node hashes."""
    assert NODE_HASHES[0] == LEAVES


@pytest.mark.parametrize("size", range(9), ids=lambda s: f"size-{s}")
def test_root_of_each_prefix_is_the_published_root(size: int) -> None:
    """The root of the first `size` leaves is the published root for that size."""
    assert root(LEAVES[:size]) == ROOTS[size]


def test_every_complete_subtree_is_the_published_node_hash() -> None:
    """The root of each complete aligned range is the published node hash of its level."""
    for level, row in enumerate(NODE_HASHES):
        width = 1 << level
        for i, expected in enumerate(row):
            assert root(LEAVES[i * width : (i + 1) * width]) == expected


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION_VECTORS, ids=ids(INCLUSION_VECTORS))
def test_published_inclusion_proofs_are_reproduced_and_verify(
    index: int, size: int, proof: list[bytes]
) -> None:
    """inclusion_proof gives the published proof, and verify_inclusion accepts it."""
    assert inclusion_proof(LEAVES[:size], index) == proof
    verify_inclusion(index, size, LEAVES[index], proof, ROOTS[size])


@pytest.mark.parametrize(
    ("size1", "size2", "proof"), CONSISTENCY_VECTORS, ids=ids(CONSISTENCY_VECTORS)
)
def test_published_consistency_proofs_are_reproduced_and_verify(
    size1: int, size2: int, proof: list[bytes]
) -> None:
    """consistency_proof gives the published proof, and verify_consistency accepts it."""
    assert consistency_proof(LEAVES, size1, size2) == proof
    verify_consistency(size1, size2, ROOTS[size1], ROOTS[size2], proof)


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION_VECTORS, ids=ids(INCLUSION_VECTORS))
def test_go_corruptions_of_published_inclusion_proofs_fail(
    index: int, size: int, proof: list[bytes]
) -> None:
    """Every probe of Go's corruptInclusionProof (proof/verify_test.go) is refused."""
    leaf, good = LEAVES[index], ROOTS[size]
    probes: dict[str, tuple[int, int, bytes, list[bytes], bytes]] = {
        "index - 1": (index - 1, size, leaf, proof, good),
        "index + 1": (index + 1, size, leaf, proof, good),
        "index ^ 2": (index ^ 2, size, leaf, proof, good),
        "size * 2": (index, size * 2, leaf, proof, good),
        "size // 2": (index, size // 2, leaf, proof, good),
        "wrong leaf": (index, size, b"WrongLeaf", proof, good),
        "empty root": (index, size, leaf, proof, EMPTY_ROOT),
        "random root": (index, size, leaf, proof, SOME_HASH),
        "trailing garbage": (index, size, leaf, [*proof, b""], good),
        "trailing root": (index, size, leaf, [*proof, good], good),
        "preceding garbage": (index, size, leaf, [b"", *proof], good),
        "preceding root": (index, size, leaf, [good, *proof], good),
    }
    for i in range(len(proof)):
        probes[f"proof[{i}] bit 3"] = (index, size, leaf, flip_at(proof, i, 8), good)
    if proof:
        probes["removed component"] = (index, size, leaf, proof[:-1], good)
    if len(proof) > 1:
        probes["inserted component"] = (index, size, leaf, [proof[0], SOME_HASH, *proof[1:]], good)
    accepted = [desc for desc, args in probes.items() if accepts(verify_inclusion, *args)]
    assert accepted == []


@pytest.mark.parametrize(
    ("size1", "size2", "proof"), CONSISTENCY_VECTORS[1:], ids=ids(CONSISTENCY_VECTORS[1:])
)
def test_go_corruptions_of_published_consistency_proofs_fail(
    size1: int, size2: int, proof: list[bytes]
) -> None:
    """Every probe of Go's corruptConsistencyProof (proof/verify_test.go) is refused."""
    r1, r2 = ROOTS[size1], ROOTS[size2]
    wrong = b"WrongRoot"
    probes: dict[str, tuple[int, int, bytes, bytes, list[bytes]]] = {
        "size1 - 1": (size1 - 1, size2, r1, r2, proof),
        "size1 + 1": (size1 + 1, size2, r1, r2, proof),
        "size1 ^ 2": (size1 ^ 2, size2, r1, r2, proof),
        "size2 * 2": (size1, size2 * 2, r1, r2, proof),
        "size2 // 2": (size1, size2 // 2, r1, r2, proof),
        "wrong root1": (size1, size2, wrong, r2, proof),
        "wrong root2": (size1, size2, r1, wrong, proof),
        "swapped roots": (size1, size2, r2, r1, proof),
        "empty proof": (size1, size2, r1, r2, []),
        "trailing garbage": (size1, size2, r1, r2, [*proof, b""]),
        "trailing root1": (size1, size2, r1, r2, [*proof, r1]),
        "trailing root2": (size1, size2, r1, r2, [*proof, r2]),
        "preceding garbage": (size1, size2, r1, r2, [b"", *proof]),
        "preceding root1": (size1, size2, r1, r2, [r1, *proof]),
        "preceding root2": (size1, size2, r1, r2, [r2, *proof]),
        "preceding proof[0]": (size1, size2, r1, r2, [proof[0], *proof]),
        "truncated proof": (size1, size2, r1, r2, proof[:-1]),
    }
    for i in range(len(proof)):
        probes[f"proof[{i}] bit 4"] = (size1, size2, r1, r2, flip_at(proof, i, 16))
    accepted = [desc for desc, args in probes.items() if accepts(verify_consistency, *args)]
    assert accepted == []


def test_draft_subtree_hash_vector_is_reproduced() -> None:
    """The rolling hash of every subtree's root matches testonly/vectors_test.go's value.

    transparency-dev/merkle TestSubtreeHashVectors, from the "Subtree Test Vectors" appendix
    of draft-ietf-plants-merkle-tree-certs; each root is also assembled with `range_root`.
    """
    leaves = draft_vector_leaves()
    subtree = from_table(subtree_table(leaves))
    rolling = hashlib.sha256()
    for start, end in go_valid_subtrees():
        hashed = root(leaves[start:end])
        assert range_root(start, end, subtree) == hashed
        rolling.update(f"[{start}, {end}) {hashed.hex()}\n".encode())
    expected = "94a95384a8c69acea9b50d035a58285b3a777cb7a724005faa5e1f1e1190007f"
    assert rolling.hexdigest() == expected


def test_draft_subtree_inclusion_vector_is_reproduced() -> None:
    """Every inclusion proof inside every subtree matches TestSubtreeInclusionProofVectors.

    A subtree [start, end) is its own tree, so its proof is `inclusion_ranges` shifted by
    start, each range assembled from stored subtrees with `range_root`; each proof verifies.
    """
    leaves = draft_vector_leaves()
    subtree = from_table(subtree_table(leaves))
    roots = {(start, end): root(leaves[start:end]) for start, end in go_valid_subtrees()}
    rolling = hashlib.sha256()
    for start, end in go_valid_subtrees():
        for index in range(start, end):
            ranges = inclusion_ranges(index - start, end - start)
            proof = [range_root(start + a, start + b, subtree) for a, b in ranges]
            verify_inclusion(index - start, end - start, leaves[index], proof, roots[start, end])
            line = f"{index} [{start}, {end})" + "".join(f" {p.hex()}" for p in proof)
            rolling.update(f"{line}\n".encode())
    expected = "ac2a8f989e44d99e399db448050ff5f19757df53cfb716aa81015d3955d8163f"
    assert rolling.hexdigest() == expected


# Inclusion edge cases ------------------------------------------------------------------------


@pytest.mark.parametrize(("index", "size"), [(0, 0), (1, 0), (2, 1), (8, 8)], ids=str)
def test_inclusion_fails_for_an_index_outside_the_tree(index: int, size: int) -> None:
    """An index at or past the size is refused, whatever the proof."""
    with pytest.raises(ProofError, match="not in a tree"):
        verify_inclusion(index, size, SOME_HASH, [], SOME_HASH)


@pytest.mark.parametrize(("index", "size"), [(-1, 8), (0, -1), (-1, -1)], ids=str)
def test_inclusion_fails_for_negative_numbers(index: int, size: int) -> None:
    """A negative index or size is refused."""
    with pytest.raises(ProofError, match="negative"):
        verify_inclusion(index, size, LEAVES[0], [], ROOTS[1])


@pytest.mark.parametrize("length", [0, 31, 33])
@pytest.mark.parametrize("which", ["leaf hash", "root", "proof element 1"])
def test_inclusion_fails_for_a_hash_of_the_wrong_length(which: str, length: int) -> None:
    """The leaf hash, the root and every proof element must be 32 bytes; the message says which."""
    leaf, proof, good = LEAVES[5], [L4, N67, N0123], ROOTS[8]
    bad = b"\x07" * length
    if which == "leaf hash":
        leaf = bad
    elif which == "root":
        good = bad
    else:
        proof[1] = bad
    with pytest.raises(ProofError, match=f"{which} is {length} bytes"):
        verify_inclusion(5, 8, leaf, proof, good)


@pytest.mark.parametrize(
    "proof",
    [[L4, N67], [L4, N67, N0123, SOME_HASH], []],
    ids=["too-short", "too-long", "empty"],
)
def test_inclusion_fails_for_a_proof_of_the_wrong_length(proof: list[bytes]) -> None:
    """A proof with a hash missing or one too many is refused by its length alone."""
    with pytest.raises(ProofError, match=f"has {len(proof)} hashes, expected 3"):
        verify_inclusion(5, 8, L5, proof, ROOTS[8])


def test_single_leaf_tree_proves_its_leaf_with_an_empty_proof() -> None:
    """In a one-leaf tree the root is the leaf hash and the proof is empty (Go's single entry).

    A wrong root is reported with the root the proof gave, in hex.
    """
    data = leaf_hash(b"data")
    verify_inclusion(0, 1, data, [], data)
    with pytest.raises(ProofError, match=f"gives root {data.hex()}, not the expected"):
        verify_inclusion(0, 1, data, [], SOME_HASH)


# Consistency edge cases ----------------------------------------------------------------------


@pytest.mark.parametrize("proof", [[], [EMPTY_ROOT]], ids=["empty-proof", "one-hash"])
def test_consistency_from_the_empty_tree_to_a_larger_one_fails(proof: list[bytes]) -> None:
    """size1 = 0 < size2 is refused: a proof from the empty tree is meaningless."""
    with pytest.raises(ProofError, match="empty tree is meaningless"):
        verify_consistency(0, 1, EMPTY_ROOT, ROOTS[1], proof)


def test_two_empty_trees_are_consistent() -> None:
    """size1 = size2 = 0 is the equal-sizes case: empty proof and equal roots (as in Go)."""
    verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])


@pytest.mark.parametrize(
    ("roots", "proof", "message"),
    [
        ((ROOT4, ROOT4), [EMPTY_ROOT], "need an empty proof"),
        ((ROOT4, ROOTS[5]), [], "different roots"),
        ((EMPTY_ROOT, EMPTY_ROOT), [EMPTY_ROOT], "need an empty proof"),
    ],
    ids=["non-empty-proof", "different-roots", "roots-match-but-proof-not-empty"],
)
def test_equal_sizes_need_an_empty_proof_and_equal_roots(
    roots: tuple[bytes, bytes], proof: list[bytes], message: str
) -> None:
    """Two trees of one size are consistent only with an empty proof and the same root."""
    verify_consistency(4, 4, ROOT4, ROOT4, [])
    with pytest.raises(ProofError, match=message):
        verify_consistency(4, 4, *roots, proof)


@pytest.mark.parametrize(("size1", "size2"), [(1, 0), (2, 1), (8, 6)], ids=str)
def test_consistency_fails_when_size2_is_smaller(size1: int, size2: int) -> None:
    """Time travel to the past is refused."""
    with pytest.raises(ProofError, match="smaller than size1"):
        verify_consistency(size1, size2, ROOTS[size1], ROOTS[size2], [])


@pytest.mark.parametrize(("size1", "size2"), [(-1, 8), (1, -1), (-2, -1)], ids=str)
def test_consistency_fails_for_negative_sizes(size1: int, size2: int) -> None:
    """A negative size is refused."""
    with pytest.raises(ProofError, match="negative"):
        verify_consistency(size1, size2, ROOTS[1], ROOTS[8], [])


@pytest.mark.parametrize(
    "proof",
    [[], [N45, N67], [N45, N67, N0123, SOME_HASH]],
    ids=["empty", "too-short", "too-long"],
)
def test_consistency_fails_for_a_proof_of_the_wrong_length(proof: list[bytes]) -> None:
    """A proof with hashes missing or extra is refused by its length alone."""
    with pytest.raises(ProofError, match=f"has {len(proof)} hashes, expected 3"):
        verify_consistency(6, 8, ROOTS[6], ROOTS[8], proof)


@pytest.mark.parametrize("length", [0, 31, 33])
@pytest.mark.parametrize("which", ["root1", "root2", "proof element 2"])
@pytest.mark.parametrize("sizes", [(6, 8), (4, 4)], ids=["6-of-8", "4-of-4"])
def test_consistency_fails_for_a_hash_of_the_wrong_length(
    sizes: tuple[int, int], which: str, length: int
) -> None:
    """Both roots and every proof element must be 32 bytes, even when the sizes are equal."""
    size1, size2 = sizes
    r1, r2, proof = ROOTS[size1], ROOTS[size2], consistency_proof(LEAVES, size1, size2)
    bad = b"\x07" * length
    if which == "root1":
        r1 = bad
    elif which == "root2":
        r2 = bad
    else:
        proof = [N45, N67, bad]
    with pytest.raises(ProofError, match=f"{which} is {length} bytes"):
        verify_consistency(size1, size2, r1, r2, proof)


@pytest.mark.parametrize(
    ("roots", "which"),
    [((ROOTS[5], ROOTS[8]), "root1"), ((ROOTS[6], ROOTS[7]), "root2")],
    ids=["root1", "root2"],
)
def test_consistency_failure_names_the_root_that_did_not_match(
    roots: tuple[bytes, bytes], which: str
) -> None:
    """A wrong first root is named root1; a wrong second root, root2."""
    with pytest.raises(ProofError, match=f"does not reproduce {which}"):
        verify_consistency(6, 8, *roots, [N45, N67, N0123])


# Building proofs and roots -------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: inclusion_ranges(-1, 1), id="negative-index"),
        pytest.param(lambda: inclusion_ranges(1, 1), id="index-past-size"),
        pytest.param(lambda: inclusion_proof(LEAVES, 8), id="index-past-leaves"),
        pytest.param(lambda: consistency_ranges(0, 1), id="from-empty-tree"),
        pytest.param(lambda: consistency_ranges(2, 1), id="size1-above-size2"),
        pytest.param(lambda: consistency_ranges(-1, 2), id="negative-size"),
        pytest.param(lambda: consistency_proof(LEAVES, 1, 9), id="size2-past-leaves"),
    ],
)
def test_proof_builders_refuse_impossible_requests(build: Callable[[], object]) -> None:
    """Asking for a proof that cannot exist is the caller's mistake: ValueError."""
    with pytest.raises(ValueError):  # noqa: PT011 - the cases differ only in their message
        build()


def test_root_refuses_a_leaf_hash_of_the_wrong_length() -> None:
    """A leaf hash that is not 32 bytes is named by its position."""
    with pytest.raises(ValueError, match="leaf hash 1 is 3 bytes"):
        root([L0, b"abc"])


def test_proof_error_is_a_value_error() -> None:
    """ProofError subclasses ValueError, so callers may catch either."""
    assert issubclass(ProofError, ValueError)


def test_public_names_are_sorted_and_complete() -> None:
    """__all__ is sorted and lists the module's whole public API."""
    assert merkle.__all__ == sorted(merkle.__all__)
    public = {name for name in vars(merkle) if not name.startswith("_")}
    imported = {"annotations", "hashlib", "Callable", "Sequence"}
    assert set(merkle.__all__) == public - imported


def test_root_of_a_million_leaves_needs_no_recursion() -> None:
    """The root of 1,000,000 leaves is computed, and agrees with the RFC's top split at 2**19."""
    leaves = [i.to_bytes(32, "big") for i in range(1_000_000)]
    split = 1 << 19
    assert root(leaves) == node_hash(root(leaves[:split]), root(leaves[split:]))


# range_root ----------------------------------------------------------------------------------


def test_range_root_is_valid_exactly_for_the_documented_ranges() -> None:
    """For every range up to 48 leaves: valid iff n == 1 or start is a multiple of the split k.

    A valid range equals the root of its slice, asks only for stored (complete aligned)
    subtrees and at most popcount(n) + 1 of them; any other range raises ValueError.
    """
    leaves = LEAVES * 6
    table = subtree_table(leaves)
    for end in range(1, len(leaves) + 1):
        for start in range(end):
            n = end - start
            k = 1 << ((n - 1).bit_length() - 1) if n > 1 else 1
            if n == 1 or start % k == 0:
                asked: list[tuple[int, int]] = []
                assert range_root(start, end, from_table(table, asked)) == root(leaves[start:end])
                assert len(asked) <= n.bit_count() + 1
            else:
                with pytest.raises(ValueError, match="complete aligned"):
                    range_root(start, end, from_table(table))


def test_range_root_asks_once_for_a_complete_aligned_range() -> None:
    """[8, 16) is one stored subtree; [2, 6) is two (it is not aligned to 4)."""
    table = subtree_table(LEAVES * 2)
    asked: list[tuple[int, int]] = []
    range_root(8, 16, from_table(table, asked))
    assert asked == [(8, 16)]
    asked.clear()
    range_root(2, 6, from_table(table, asked))
    assert asked == [(2, 4), (4, 6)]


def test_range_root_of_an_empty_range_is_the_empty_tree() -> None:
    """[n, n) is the empty tree, SHA-256 of nothing, and asks for nothing."""
    asked: list[tuple[int, int]] = []
    assert range_root(3, 3, from_table({}, asked)) == EMPTY_ROOT
    assert asked == []


@pytest.mark.parametrize(("start", "end"), [(-1, 2), (5, 4)], ids=["negative", "reversed"])
def test_range_root_refuses_a_negative_or_reversed_range(start: int, end: int) -> None:
    """A range must satisfy 0 <= start <= end."""
    with pytest.raises(ValueError, match="not a range of leaves"):
        range_root(start, end, from_table({}))


def test_range_root_refuses_a_subtree_hash_of_the_wrong_length() -> None:
    """A callback returning a hash that is not 32 bytes is named with its range."""
    with pytest.raises(ValueError, match=r"subtree \[0, 4\) hash is 2 bytes"):
        range_root(0, 5, lambda a, b: b"no" if (a, b) == (0, 4) else L4)


# Laws ----------------------------------------------------------------------------------------


def test_every_consistency_proof_between_prefixes_of_64_leaves_verifies() -> None:
    """Exhaustively for 1 <= size1 <= size2 <= 64 (the draft vector covers inclusion proofs)."""
    leaves = draft_vector_leaves()[:64]
    roots = [root(leaves[:n]) for n in range(65)]
    for size2 in range(1, 65):
        for size1 in range(1, size2 + 1):
            proof = consistency_proof(leaves, size1, size2)
            verify_consistency(size1, size2, roots[size1], roots[size2], proof)


@given(trees(), st.data())
def test_every_inclusion_proof_in_a_random_tree_verifies(
    leaves: list[bytes], data: st.DataObject
) -> None:
    """Proofs built from stored subtrees verify for every leaf and match the reference proof."""
    subtree = from_table(subtree_table(leaves))
    size, tree_root = len(leaves), root(leaves)
    proofs = [
        [range_root(a, b, subtree) for a, b in inclusion_ranges(i, size)] for i in range(size)
    ]
    for index, proof in enumerate(proofs):
        verify_inclusion(index, size, leaves[index], proof, tree_root)
    index = data.draw(st.integers(0, size - 1), label="index")
    assert inclusion_proof(leaves, index) == proofs[index]


@given(trees(), st.data())
def test_every_consistency_proof_to_a_random_tree_verifies(
    leaves: list[bytes], data: st.DataObject
) -> None:
    """From every size1 <= n to n, and for a drawn pair, the proof verifies and matches."""
    subtree = from_table(subtree_table(leaves))
    n = len(leaves)
    roots = [range_root(0, size, subtree) for size in range(n + 1)]
    for size1 in range(1, n + 1):
        proof = [range_root(a, b, subtree) for a, b in consistency_ranges(size1, n)]
        verify_consistency(size1, n, roots[size1], roots[n], proof)
    size2 = data.draw(st.integers(1, n), label="size2")
    size1 = data.draw(st.integers(1, size2), label="size1")
    proof = consistency_proof(leaves, size1, size2)
    assert proof == [range_root(a, b, subtree) for a, b in consistency_ranges(size1, size2)]
    verify_consistency(size1, size2, roots[size1], roots[size2], proof)


@given(trees(), st.data(), st.integers(0, 31), st.integers(1, 255))
def test_flipping_any_byte_breaks_an_inclusion_proof(
    leaves: list[bytes], data: st.DataObject, position: int, mask: int
) -> None:
    """Changing one byte of any proof element, of the leaf hash or of the root is refused."""
    size = len(leaves)
    index = data.draw(st.integers(0, size - 1), label="index")
    proof, good, leaf = inclusion_proof(leaves, index), root(leaves), leaves[index]
    target = data.draw(st.integers(-2, len(proof) - 1), label="target")
    if target == -2:
        leaf = flip(leaf, position, mask)
    elif target == -1:
        good = flip(good, position, mask)
    else:
        proof[target] = flip(proof[target], position, mask)
    with pytest.raises(ProofError):
        verify_inclusion(index, size, leaf, proof, good)


@given(trees(min_size=2), st.data(), st.integers(0, 31), st.integers(1, 255))
def test_flipping_any_byte_breaks_a_consistency_proof(
    leaves: list[bytes], data: st.DataObject, position: int, mask: int
) -> None:
    """Changing one byte of any proof element or of either root is refused."""
    size2 = len(leaves)
    size1 = data.draw(st.integers(1, size2 - 1), label="size1")
    proof = consistency_proof(leaves, size1, size2)
    r1, r2 = root(leaves[:size1]), root(leaves)
    target = data.draw(st.integers(-2, len(proof) - 1), label="target")
    if target == -2:
        r1 = flip(r1, position, mask)
    elif target == -1:
        r2 = flip(r2, position, mask)
    else:
        proof[target] = flip(proof[target], position, mask)
    with pytest.raises(ProofError):
        verify_consistency(size1, size2, r1, r2, proof)


def test_a_proof_for_three_leaves_also_verifies_as_four() -> None:
    """The size is bound by the root, not the proof: leaf 0's paths in 3 and 4 leaves agree.

    So "another size fails" holds only when the path shape changes; see the law below.
    """
    proof = inclusion_proof(LEAVES[:3], 0)
    verify_inclusion(0, 4, LEAVES[0], proof, ROOTS[3])
    consistency = consistency_proof(LEAVES, 1, 3)
    verify_consistency(1, 4, ROOTS[1], ROOTS[3], consistency)


@given(trees(), st.data())
def test_another_index_or_size_verifies_only_with_the_same_hash_computation(
    leaves: list[bytes], data: st.DataObject
) -> None:
    """Changing index or size fails unless the RFC tree gives the leaf the same path shape.

    Within one size every leaf has its own path, so another index there always fails.
    """
    size = len(leaves)
    index = data.draw(st.integers(0, size - 1), label="index")
    proof, good = inclusion_proof(leaves, index), root(leaves)
    other_index = data.draw(nearby(index), label="other index")
    other_size = data.draw(nearby(size), label="other size")
    same = inclusion_term(other_index, other_size) == inclusion_term(index, size)
    assert accepts(verify_inclusion, other_index, other_size, leaves[index], proof, good) == same
    if other_size == size and other_index != index:
        assert not same


@given(trees(min_size=2), st.data())
def test_other_sizes_verify_a_consistency_proof_only_with_the_same_hash_computation(
    leaves: list[bytes], data: st.DataObject
) -> None:
    """Changing size1 or size2 fails unless both roots unfold to the same terms over the proof."""
    size2 = len(leaves)
    size1 = data.draw(st.integers(1, size2 - 1), label="size1")
    proof = consistency_proof(leaves, size1, size2)
    r1, r2 = root(leaves[:size1]), root(leaves)
    other1 = data.draw(nearby(size1), label="other size1")
    other2 = data.draw(nearby(size2), label="other size2")
    terms = consistency_terms(other1, other2)
    same = terms is not None and terms == consistency_terms(size1, size2)
    assert accepts(verify_consistency, other1, other2, r1, r2, proof) == same


@given(trees(), st.data())
def test_range_root_from_stored_subtrees_equals_the_root_of_each_proof_range(
    leaves: list[bytes], data: st.DataObject
) -> None:
    """For every range the proofs produce, range_root over stored subtrees is root of the slice."""
    size = len(leaves)
    subtree = from_table(subtree_table(leaves))
    index = data.draw(st.integers(0, size - 1), label="index")
    size1 = data.draw(st.integers(1, size), label="size1")
    for a, b in [*inclusion_ranges(index, size), *consistency_ranges(size1, size)]:
        assert range_root(a, b, subtree) == root(leaves[a:b])


@given(trees(min_size=0))
def test_root_agrees_with_the_recursive_rfc_definition(leaves: list[bytes]) -> None:
    """The iterative root equals MTH written as the RFC's recursion, for 0 to 300 leaves."""
    assert root(leaves) == naive_root(leaves)
