"""The parent column of a conversation node: what it holds, derived from the blob's bytes.

A conversation node is a blob ``{"message": ..., "parent_ref": ...}``; its parent ref is inside
the (packed, possibly sealed) content, so a reader that follows a chain by content reads one
node per query. The blobs table therefore keeps each node's parent in a column of its own
(``parent``), written with the blob, so that a chain is read by one recursive query. The column
is metadata outside the hash: readers only use it to fetch ahead and always follow the content
(`Ledger.message_nodes`), and `verify` reports a column that disagrees with the content
(`parent_mismatch`).

The column holds (`node_parent`, from the canonical bytes alone):

- the parent's SHA-256 digest, 32 raw bytes (the ref is ``sha256:`` and its hex), for a node
  that has a parent: a plain node's ``parent_ref``, or a sealed node's single ``inner_refs``
  item (a sealed node names its parent there in the clear, see `_subjects`);
- empty bytes for a plain node with no parent: a known root;
- NULL for every other blob, for a sealed node with no parent (without the key it cannot be
  told from a sealed tools list or input), and for every row written before the column existed.

NULL never means "root": a reader decodes each node it reaches and, when the content names a
parent the query did not return, reads on from it. Must not know databases or events.
"""

from __future__ import annotations

import re

from agentledger.ledger._subjects import sealed_parts

__all__ = ["node_parent", "parent_mismatch", "ref_of_column"]

_PLAIN_HEAD = b'{"message":'
_NULL_TAIL = b',"parent_ref":null}'
_REF_TAIL = re.compile(rb',"parent_ref":"sha256:([0-9a-f]{64})"\}')
_REF_TAIL_LEN = len(b',"parent_ref":"sha256:') + 64 + 2
_SEALED_HEAD = b'{"data":"'
_ONE_INNER_REF = re.compile(rb'","inner_refs":\["sha256:([0-9a-f]{64})"\],"key_id":"')
_PREFIX = "sha256:"


def node_parent(canonical: bytes) -> bytes | None:
    """The parent column for a blob's canonical bytes (see the module doc); None for NULL.

    In canonical JSON a quote inside a string is always escaped and members are sorted, so a
    blob that starts ``{"message":`` and ends ``,"parent_ref":...}`` is an object whose first
    member is ``message`` and last is ``parent_ref``: read the tail, no JSON parse.
    """
    if canonical.startswith(_PLAIN_HEAD):
        if canonical.endswith(_NULL_TAIL):
            return b""
        found = _REF_TAIL.fullmatch(canonical, len(canonical) - _REF_TAIL_LEN)
        return None if found is None else bytes.fromhex(found.group(1).decode("ascii"))
    if canonical.startswith(_SEALED_HEAD) and sealed_parts(canonical) is not None:
        end = canonical.find(b'"', len(_SEALED_HEAD))
        found = _ONE_INNER_REF.match(canonical, end)
        return None if found is None else bytes.fromhex(found.group(1).decode("ascii"))
    return None


def ref_of_column(column: bytes | None) -> str | None:
    """The parent ref a column value names: ``""`` for a root, None for NULL."""
    if column is None:
        return None
    return _PREFIX + column.hex() if column else ""


def parent_mismatch(column: bytes | None, canonical: bytes) -> str | None:
    """Why a stored parent column disagrees with its blob's content, or None when it agrees.

    NULL agrees with anything (a row from before the column, or one that names no parent).
    """
    if column is None:
        return None
    derived = node_parent(canonical)
    if derived == column:
        return None

    content = "no parent it can name" if derived is None else _said(derived)
    return f"the parent column says {_said(column)}, the content says {content}"


def _said(column: bytes) -> str:
    return _PREFIX + column.hex() if column else "a chain root"
