"""JSON Merge Patch (RFC 7386): apply, fold, diff and compose world-state deltas.

Owns the merge semantics of DESIGN.md ("World state: merge semantics"): objects merge
recursively, ``null`` deletes a key, anything else replaces; a patch that is not an object
replaces the whole document. Keeping to the RFC exactly lets an auditor recompute a world state
with any RFC 7386 implementation, so this module must not add extensions (list merging, null
values, move operations) and must not know about events or storage.

Purity: no function here mutates its arguments. `apply_patch` returns fresh dicts along the
path it changes and shares the untouched subtrees of `doc` with its result; values taken from a
patch are always copied, so a result never aliases a patch. `fold_patches` copies its start once
and then merges in place into that private copy, which is what makes it fast.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentledger.projections._json import JSONValue, json_copy, json_equal
from agentledger.projections.errors import PatchCompositionError, UnrepresentableDiffError

__all__ = ["apply_patch", "compose_patches", "diff_patch", "fold_patches"]


def apply_patch(doc: JSONValue, patch: JSONValue) -> JSONValue:
    """Return `doc` with the merge patch `patch` applied (RFC 7386, section 2).

    An object patch merges: each ``null`` member deletes that key, each object member merges
    recursively (into ``{}`` when `doc` has no object there), and any other member replaces.
    A patch that is not an object (a list, a scalar, or ``null``) replaces the whole document,
    and an object patch turns a non-object `doc` into an object first, so ``apply_patch(5, {})``
    is ``{}``.

    Neither argument is mutated. The result may share subtrees of `doc` that the patch leaves
    untouched, so treat it as a value (deep-copy before mutating it in place); it never shares
    anything with `patch`.
    """
    if isinstance(patch, dict):
        return _applied(doc, patch)
    return json_copy(patch)


def _applied(doc: JSONValue, patch: dict[str, JSONValue]) -> dict[str, JSONValue]:
    result = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = _applied(result.get(key), value)
        elif isinstance(value, list):
            result[key] = json_copy(value)
        else:
            result[key] = value
    return result


def fold_patches(patches: Iterable[JSONValue], start: JSONValue | None = None) -> JSONValue:
    """Apply `patches` in order to `start` (``{}`` when omitted) and return the final document.

    Equal to ``functools.reduce(apply_patch, patches, start)``, but it copies `start` once and
    then merges each patch in place into that copy, so folding a long run of small deltas costs
    about what a hand-written in-place merge loop costs. Neither `start` nor any patch is
    mutated, and the result shares no dict or list with them.

    ``start=None`` means the empty object, so a fold of no patches returns ``{}``. For a
    non-empty fold that is the same as starting from a JSON ``null``, since every patch treats
    a non-object document alike; the one difference is that a ``null`` snapshot (left by a
    ``null`` delta) with no tail folds to ``{}``, not ``null``.
    """
    doc: JSONValue = {} if start is None else json_copy(start)
    merge_into = _merge_into
    for patch in patches:
        if isinstance(patch, dict):
            if not isinstance(doc, dict):
                doc = {}
            merge_into(doc, patch)
        else:
            doc = json_copy(patch)
    return doc


def _merge_into(target: dict[str, JSONValue], patch: dict[str, JSONValue]) -> None:
    """Merge `patch` into `target` in place; values taken from `patch` are copied, never shared."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            current = target.get(key)
            if not isinstance(current, dict):
                current = target[key] = {}
            _merge_into(current, value)
        elif isinstance(value, list):
            target[key] = json_copy(value)
        else:
            target[key] = value


def diff_patch(a: JSONValue, b: JSONValue) -> JSONValue:
    """Return the smallest merge patch that takes `a` to `b`.

    When both are objects the patch recurses into keys whose values are both objects, holds
    ``null`` for each key `b` removed, holds `b`'s value for each other key that changed, and
    omits every key whose value is unchanged: two equal objects give ``{}``. Otherwise the patch
    is `b` itself (a copy), the only patch that yields `b` from a non-object or yields a
    non-object. Values compare as JSON (``true`` differs from ``1``; ``1`` equals ``1.0``).

    ``apply_patch(a, diff_patch(a, b)) == b`` always holds when this returns. It raises
    `UnrepresentableDiffError`, naming the path, exactly when no merge patch takes `a` to `b`:
    `b` holds a ``null`` member inside an object that the patch would have to write (a merge
    patch reads ``null`` as "delete").
    """
    if isinstance(a, dict) and isinstance(b, dict):
        return _diff_objects(a, b, ())
    return _as_written(b, ())


def _diff_objects(
    a: dict[str, JSONValue], b: dict[str, JSONValue], path: tuple[str, ...]
) -> dict[str, JSONValue]:
    patch: dict[str, JSONValue] = {}
    for key, new in b.items():
        if key in a:
            old = a[key]
            if isinstance(old, dict) and isinstance(new, dict):
                inner = _diff_objects(old, new, (*path, key))
                if inner:
                    patch[key] = inner
                continue
            if json_equal(old, new):
                continue
        if new is None:
            raise UnrepresentableDiffError((*path, key))
        patch[key] = _as_written(new, (*path, key))
    for key in a:
        if key not in b:
            patch[key] = None
    return patch


def _as_written(value: JSONValue, path: tuple[str, ...]) -> JSONValue:
    """Copy `value` for use as a patch member that must write it whole (nulls in objects raise)."""
    if isinstance(value, dict):
        written: dict[str, JSONValue] = {}
        for key, item in value.items():
            if item is None:
                raise UnrepresentableDiffError((*path, key))
            written[key] = _as_written(item, (*path, key))
        return written
    return json_copy(value)


def compose_patches(a: JSONValue, b: JSONValue) -> JSONValue:
    """Return one merge patch with the effect of `a` then `b` on every document.

    ``apply_patch(apply_patch(s, a), b) == apply_patch(s, compose_patches(a, b))`` for every
    `s`. Where `b` is not an object the result is `b`. Where both are objects, keys only one of
    them names keep that patch's value; for a key both name, `b`'s value wins unless it is an
    object and `a`'s value is an object too, in which case the two compose recursively.

    Merge patches are not closed under composition. When `a` deletes or replaces a value with
    a non-object (including the whole document) and `b` then writes an object there, only that
    object survives, but a single patch with an object there would merge with the document's
    old value and keep keys it does not name. No single patch exists, and this raises
    `PatchCompositionError` naming the path. It raises in no other case. Neither argument is
    mutated, and the result shares nothing with them.
    """
    return _compose(a, b, ())


def _compose(a: JSONValue, b: JSONValue, path: tuple[str, ...]) -> JSONValue:
    if not isinstance(b, dict):
        return json_copy(b)
    if not isinstance(a, dict):
        raise PatchCompositionError(path)
    composed: dict[str, JSONValue] = {}
    for key, first in a.items():
        if key not in b:
            composed[key] = json_copy(first)
    for key, second in b.items():
        if isinstance(second, dict) and key in a:
            composed[key] = _compose(a[key], second, (*path, key))
        else:
            composed[key] = json_copy(second)
    return composed
