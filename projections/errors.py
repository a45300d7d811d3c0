"""Errors raised by the projections layer.

The tree::

    ProjectionError
    ├── PatchCompositionError       no single merge patch has the effect of a then b (path)
    └── UnrepresentableDiffError    the target holds a null inside an object, which no merge
                                    patch can write (path); also a ValueError

Paths are tuples of object keys from the document root; messages render them as RFC 6901 JSON
Pointers (``("steps", "s1")`` → ``/steps/s1``). This module must not import anything of the
project but `_json`.
"""

from __future__ import annotations

from agentledger.projections._json import json_pointer

__all__ = ["PatchCompositionError", "ProjectionError", "UnrepresentableDiffError"]


def _where(path: tuple[str, ...]) -> str:
    return json_pointer(path) if path else "'' (the document root)"


class ProjectionError(Exception):
    """Base of every error the projections layer raises."""


class PatchCompositionError(ProjectionError):
    """Merge patch `a` then `b` has no single-patch equivalent, because of the value at `path`.

    `a` deletes or replaces the value at `path` with a non-object, and `b` then writes an object
    there. Applied one after the other, the object `b` writes is all that remains at `path`; a
    single patch holding an object at `path` would instead merge into whatever the document
    held there, keeping keys the patch does not name. No finite patch can name them all.
    """

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        super().__init__(
            f"cannot compose merge patches at {_where(path)}: the first patch deletes or "
            "replaces this value with a non-object and the second writes an object here; "
            "no single merge patch does both for every document, so apply them in turn"
        )

    def __reduce__(self) -> tuple[type[PatchCompositionError], tuple[tuple[str, ...]]]:
        return (type(self), (self.path,))


class UnrepresentableDiffError(ProjectionError, ValueError):
    """No merge patch takes the source to the target: the target has a null at `path`.

    A merge patch reads ``null`` as "delete this key", so it cannot write a null member into an
    object. (A null inside a list, or a null document, is fine: those are written whole.)
    """

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        super().__init__(
            f"no merge patch can produce the target: it holds null at {_where(path)}, and a "
            "merge patch reads null as 'delete this key'"
        )

    def __reduce__(self) -> tuple[type[UnrepresentableDiffError], tuple[tuple[str, ...]]]:
        return (type(self), (self.path,))
