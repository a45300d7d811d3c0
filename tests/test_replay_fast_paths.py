"""Replay's fast paths agree with the reference paths they stand in for (Hypothesis).

1. A replay's checker (``write_prefix=False``: nothing it compares is written) compares an
   event's dumped payload without preparing it for the ledger (canonical bytes, limits); a
   checker that writes its prefix (a fork) compares the prepared payload. For generated
   recorded and replayed values both find the same thing: no divergence, or the same one.
2. ``recorded_library`` reads from the ledger only the prompt texts the library does not hold
   under the recorded hash; the library it builds is the one reading every recorded text gives.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.agents.prompts import PromptLibrary, prompt_hash
from agentledger.ledger import Ledger, RecordedEvent
from agentledger.ledger.events import (
    ConfigIdentity,
    DeltaApplied,
    LedgerEvent,
    PlanProposed,
    PromptRef,
)
from agentledger.replay._compare import Divergence
from agentledger.replay._recorder import CheckingRecorder
from agentledger.replay._replay import _detached_run, recorded_library
from agentledger.replay.errors import ReplayDivergenceError

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MAX_SAFE = 2**53 - 1
texts = st.text(max_size=8)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE, max_value=MAX_SAFE),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(texts, values, max_size=4)


def _recorded(ledger: Ledger, event: LedgerEvent) -> tuple[str, list[RecordedEvent], int]:
    """A run holding ``event`` (after RunStarted and any redaction fact): id, events, position."""
    with ledger.record_run("fast-paths", input="q") as run:
        run.record(event)
        run_id = run.run_id
    events = ledger.events(run_id)
    position = next(e.position for e in events if e.kind == event.kind)
    return run_id, events, position


def _checker(
    scratch: Ledger, run_id: str, events: list[RecordedEvent], *, write_prefix: bool
) -> CheckingRecorder:
    """A checker of ``events`` writing into ``scratch``: a replay's (False) or a fork's (True)."""
    return CheckingRecorder(
        scratch,
        _detached_run(run_id),
        recorded_run_id=run_id,
        expected=events,
        prefix_end=len(events),
        write_prefix=write_prefix,
        beyond="diverge",
    )


def _outcome(
    run_id: str, events: list[RecordedEvent], position: int, event: LedgerEvent
) -> Divergence | None:
    """What a checker finds comparing ``event`` at ``position``, by how it writes its prefix."""
    found: list[Divergence | None] = []
    for write_prefix in (False, True):
        scratch = Ledger.open("memory://")
        checker = _checker(scratch, run_id, events, write_prefix=write_prefix)
        try:
            checker._check(position, event)
        except ReplayDivergenceError as error:
            found.append(error.divergence)
        else:
            found.append(None)
        finally:
            scratch.close()
    replaying, forking = found
    assert replaying == forking
    return replaying


def _event(kind: str, value: Any) -> LedgerEvent:
    if kind == "PlanProposed":
        return PlanProposed(plan=value)
    return DeltaApplied(patch=value if isinstance(value, dict) else {"value": value})


@FAST
@given(
    kind=st.sampled_from(["PlanProposed", "DeltaApplied"]),
    recorded=objects,
    replayed=st.one_of(st.none(), objects),
)
def test_a_replay_compares_an_event_as_a_writing_checker_does(
    kind: str, recorded: dict[str, Any], replayed: dict[str, Any] | None
) -> None:
    """Replaying (dumped payload) and forking (prepared payload) find the same divergence."""
    ledger = Ledger.open("memory://")
    try:
        run_id, events, position = _recorded(ledger, _event(kind, recorded))
        again = _event(kind, recorded if replayed is None else replayed)
        found = _outcome(run_id, events, position, again)
        if replayed is None:  # the same value again: identical
            assert found is None
        if found is not None:
            assert found.position == position
            assert found.changes
    finally:
        ledger.close()


def test_a_payload_too_deep_for_json_dumping_is_compared_as_a_writing_checker_does() -> None:
    """The fast path steps aside where JSON dumping fails: both checkers fail alike."""
    ledger = Ledger.open("memory://")
    try:
        run_id, events, position = _recorded(ledger, PlanProposed(plan={"a": 1}))
        deep: Any = 1
        for _ in range(300):
            deep = [deep]
        outcomes = []
        for write_prefix in (False, True):
            scratch = Ledger.open("memory://")
            checker = _checker(scratch, run_id, events, write_prefix=write_prefix)
            with pytest.raises(Exception) as raised:  # noqa: PT011 - whatever the reference raises
                checker._check(position, PlanProposed(plan=deep))
            outcomes.append(type(raised.value))
            scratch.close()
        assert outcomes[0] is outcomes[1]
    finally:
        ledger.close()


# recorded_library ------------------------------------------------------------------------------


def _reference_library(
    ledger: Ledger, config: ConfigIdentity, library: PromptLibrary
) -> PromptLibrary:
    """Every recorded text read and added in turn (what recorded_library stands in for)."""
    refs = [p.text_ref for p in config.prompts.values() if p.text_ref]
    found = ledger.blobs(refs) if refs else {}
    for ref in config.prompts.values():
        text = found.get(ref.text_ref) if ref.text_ref else None
        if isinstance(text, str):
            library = library.with_prompt(ref.name, ref.version, text)
    return library


def _contents(library: PromptLibrary) -> dict[tuple[str, str], str]:
    return {
        (name, version): library.text(name, version)
        for name in library
        for version in library.versions(name)
    }


names = st.sampled_from(["planner", "writer", "judge"])
versions = st.sampled_from(["v1", "v2"])
prompt_texts = st.sampled_from(["Plan.", "Plan carefully.", "Write.", ""])


@FAST
@given(
    held=st.dictionaries(st.tuples(names, versions), prompt_texts, max_size=4),
    used=st.lists(st.tuples(names, versions, prompt_texts, st.booleans()), min_size=0, max_size=5),
)
def test_recorded_library_is_the_library_every_recorded_text_gives(
    held: dict[tuple[str, str], str], used: list[tuple[str, str, str, bool]]
) -> None:
    """Held texts (same hash) are not read, missing blobs add nothing, recorded texts win."""
    by_name: dict[str, dict[str, str]] = {}
    for (name, version), text in held.items():
        by_name.setdefault(name, {})[version] = text
    library = PromptLibrary(by_name)
    ledger = Ledger.open("memory://")
    try:
        prompts: dict[str, PromptRef] = {}
        for index, (name, version, text, stored) in enumerate(used):
            if stored:  # else the text's blob is missing from the ledger
                ledger.put_blobs([text])
            digest = prompt_hash(text)
            prompts[f"role{index}"] = PromptRef(
                name=name, version=version, hash=digest, text_ref=digest
            )
        config = ConfigIdentity(prompts=prompts)
        fast = recorded_library(ledger, config, library)
        assert _contents(fast) == _contents(_reference_library(ledger, config, library))
    finally:
        ledger.close()
