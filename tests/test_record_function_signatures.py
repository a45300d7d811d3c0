"""A recorded tool's signature, kept by code object, is the one inspect builds (Hypothesis).

``@run.recorded_tool`` binds each call's arguments with the function's signature. A tool
defined inside a recorded function is a new function object every call with the same code, so
its signature is kept by code object and reused while the function has no defaults, no wrapper
and the same annotation objects. For generated definitions (annotations, defaults, keyword-only
parameters, wrappers, annotations that change between definitions) the signature used, and
the arguments it binds, are those ``inspect.signature`` gives.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.ledger import Ledger
from agentledger.ledger._tooling import ToolSpec, _signature


def _define(kind: str, note: Any) -> Any:
    """A fresh function object of one of a few shapes; ``note`` is a runtime annotation."""
    if kind == "plain":

        def plain(topic: str, count: int) -> dict[str, Any]:
            return {"topic": topic, "count": count}

        return plain
    if kind == "annotated":

        def annotated(topic, count):  # type: ignore[no-untyped-def]
            return {"topic": topic, "count": count}

        annotated.__annotations__ = {"topic": note, "count": int}
        return annotated
    if kind == "defaults":

        def defaults(topic: str, count: int = 2) -> dict[str, Any]:
            return {"topic": topic, "count": count}

        return defaults
    if kind == "keyword":

        def keyword(topic: str, *, count: int = 3) -> dict[str, Any]:
            return {"topic": topic, "count": count}

        return keyword

    def inner(topic: str, count: int, extra: int = 0) -> dict[str, Any]:
        return {"topic": topic, "count": count + extra}

    @functools.wraps(inner)
    def wrapped(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return inner(*args, **kwargs)

    return wrapped


kinds = st.sampled_from(["plain", "annotated", "defaults", "keyword", "wrapped"])
notes = st.sampled_from([str, int, "str", list[str], None])


@settings(max_examples=60, deadline=None)
@given(definitions=st.lists(st.tuples(kinds, notes), min_size=1, max_size=8))
def test_a_kept_signature_is_the_one_inspect_builds(definitions: list[tuple[str, Any]]) -> None:
    """Every definition gets inspect's signature, and binds a call as inspect's would."""
    for kind, note in definitions:
        fn = _define(kind, note)
        reference = inspect.signature(fn)
        kept = _signature(fn)
        assert kept == reference
        assert kept.return_annotation == reference.return_annotation
        spec = ToolSpec(name="lookup", signature=kept)
        expected = ToolSpec(name="lookup", signature=reference)
        call: tuple[tuple[Any, ...], dict[str, Any]] = (("t",), {"count": 4})
        assert spec.arguments(*call) == expected.arguments(*call)


def test_a_tool_defined_in_every_run_records_the_same_arguments() -> None:
    """A tool redefined per run (the cached case) records its bound arguments each time."""
    ledger = Ledger.open("memory://")
    try:
        for n in range(3):
            with ledger.record_run("signatures", input="q") as run:

                @run.recorded_tool
                def lookup(topic: str, count: int) -> dict[str, Any]:
                    return {"topic": topic, "count": count}

                assert lookup(f"t{n}", count=n) == {"topic": f"t{n}", "count": n}
                run_id = run.run_id
            called = [e for e in ledger.events(run_id) if e.kind == "ToolCalled"]
            assert called[0].payload["arguments"] == {"topic": f"t{n}", "count": n}
    finally:
        ledger.close()
