"""Redaction at the recorder: nothing personal or secret reaches the stored bytes by default.

Every value a run records through the library API (its input, model calls, tools, deltas, the
answer, errors) is redacted by the run's policy before it is persisted; ``keep`` keeps a kind,
``hash`` gives one placeholder per value and ledger salt, each redaction is a PolicyDecided
fact, and a run recorded with redaction replays identically.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from user_code import agents

from agentledger.agents import run_agent
from agentledger.agents.testing import memory_ledger, router_script
from agentledger.ledger import Ledger
from agentledger.ledger.events import Attempt, ErrorInfo
from agentledger.ledger.redaction import RedactionPolicy
from agentledger.replay import replay_run

SECRETS = (
    "jane.doe@example.com",
    "jörg@exämple.de",
    "+44 20 7946 0958",
    "+1 415 555 2671",
    "4111 1111 1111 1111",
    "6011.1111.1111.1117",
    "DE89 3704 0044 0532 0130 00",
    "sk-proj-Abc123def456ghi789jkl012mno345",
)
"""Values the default policy must never let through (each found by a detector)."""

FILLER = st.text(alphabet="abcdefghij klmnop", max_size=40)


def embedded(draw: st.DrawFn) -> tuple[str, str]:
    """A text with one secret at a random position, and the secret."""
    secret = draw(st.sampled_from(SECRETS))
    return f"{draw(FILLER)} {secret} {draw(FILLER)}", secret


@st.composite
def texts(draw: st.DrawFn) -> tuple[str, str]:
    """A text with one secret embedded at a random position, and the secret."""
    return embedded(draw)


def record_everywhere(ledger: Ledger, text: str, *, large: bool = False) -> str:
    """Record ``text`` at every boundary of the library API; returns the run id."""
    pad = "x " * 3000 if large else ""  # over the inline limit: the values go to blobs
    with ledger.record_run("privacy", input={"question": text + pad}) as run:
        run.model_call(
            provider="openai",
            model="gpt-test",
            messages=[{"role": "user", "content": text + pad}],
            response={"role": "assistant", "content": f"Noted: {text}"},
            params={"user": text},
        )
        run.tool("lookup", {"query": text + pad}, result={"found": text + pad})
        run.delta({"note": text})
        run.answer(text + pad)
        run.policy("allow")
        return run.run_id


def stored_text(path: Path) -> str:
    """Everything a SQLite ledger holds, decoded: file bytes, WAL bytes, payloads and blobs."""
    parts = [
        p.read_bytes().decode("utf-8", "replace") for p in (path, Path(f"{path}-wal")) if p.exists()
    ]
    with Ledger.open(f"sqlite:///{path}") as reopened:
        for run_id in reopened.run_ids():
            for event in reopened.events(run_id):
                parts.append(json.dumps(event.payload, ensure_ascii=False))
        refs = [
            row[0] for row in sqlite3.connect(path).execute("SELECT ref FROM agentledger_blobs")
        ]
        for value in reopened.blobs(refs).values():
            parts.append(json.dumps(value, ensure_ascii=False))
    return "\n".join(parts)


@settings(max_examples=20, deadline=None)
@given(sample=texts(), large=st.booleans())
def test_no_embedded_secret_reaches_the_stored_bytes(sample: tuple[str, str], large: bool) -> None:
    """Under the default policy, a secret anywhere in any recorded value is nowhere on disk."""
    text, secret = sample
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "ledger.db"
        with Ledger.open(f"sqlite:///{path}") as ledger:
            record_everywhere(ledger, text, large=large)
        assert secret not in stored_text(path)


def test_a_memory_ledger_stores_every_boundary_redacted() -> None:
    """The same on a memory ledger: events and blobs hold placeholders, not values."""
    ledger = Ledger.open("memory://")
    run_id = record_everywhere(ledger, "mail jane.doe@example.com now", large=True)
    events = ledger.events(run_id)
    dumped = json.dumps([e.payload for e in events])
    refs = [
        ref
        for e in events
        for key, ref in e.payload.items()
        if key.endswith("_ref") and isinstance(ref, str)
    ]
    dumped += json.dumps(list(ledger.blobs(refs).values()))
    assert "jane.doe@example.com" not in dumped
    assert "[redacted:email]" in dumped
    small = record_everywhere(ledger, "mail jane.doe@example.com now")
    assert "[redacted:email]" in ledger.run(small).input_preview


def test_keep_keeps_a_kind_and_redacts_the_others(ledger: Ledger) -> None:
    """A per-run policy that keeps emails stores them and still redacts phone numbers."""
    keep = RedactionPolicy(actions={"email": "keep"})
    with ledger.record_run("privacy", input="x", redaction=keep) as run:
        run.answer("jane.doe@example.com, +44 20 7946 0958")
    (answered,) = [e for e in ledger.events(run.run_id) if e.kind == "SynthesisProduced"]
    assert answered.payload["answer"] == "jane.doe@example.com, [redacted:phone]"
    started = ledger.events(run.run_id)[0].payload
    assert started["config"]["redaction"]["actions"] == {"email": "keep"}


def test_no_policy_records_values_as_they_are() -> None:
    """``redaction=None`` on the ledger stores values as given and records no policy."""
    plain = Ledger.open("memory://", redaction=None)
    with plain.record_run("privacy", input="jane.doe@example.com") as run:
        run.answer("jane.doe@example.com")
    events = plain.events(run.run_id)
    assert [e.kind for e in events] == ["RunStarted", "SynthesisProduced", "RunCompleted"]
    assert "redaction" not in events[0].payload.get("config", {})
    assert events[1].payload["answer"] == "jane.doe@example.com"


def hashed_answer(ledger: Ledger, text: str) -> str:
    """The stored answer of a run that hashes emails."""
    policy = RedactionPolicy(actions={"email": "hash"})
    with ledger.record_run("privacy", redaction=policy) as run:
        run.answer(text)
    (answered,) = [e for e in ledger.events(run.run_id) if e.kind == "SynthesisProduced"]
    return str(answered.payload["answer"])


def test_hash_is_stable_per_ledger_salt_and_kept_in_the_database(ledger_url: str) -> None:
    """One value hashes to one placeholder across runs and reopenings; the salt is no event."""
    with Ledger.open(ledger_url) as ledger:
        first = hashed_answer(ledger, "Jane.Doe@Example.com")
        second = hashed_answer(ledger, "jane.doe@example.com")
        salt = ledger.redaction_salt()
        stored = json.dumps([e.payload for r in ledger.run_ids() for e in ledger.events(r)])
    assert first == second
    assert first.startswith("[email:")
    assert "example.com" not in first
    assert salt.hex() not in stored
    other = Ledger.open("memory://", redaction_salt=b"another ledger's salt")
    assert hashed_answer(other, "jane.doe@example.com") != first
    if not ledger_url.startswith("memory"):
        with Ledger.open(ledger_url) as again:
            assert again.redaction_salt() == salt
            assert hashed_answer(again, "jane.doe@example.com") == first


def test_each_redaction_is_a_policy_decided_fact_naming_kind_and_place(ledger: Ledger) -> None:
    """A PolicyDecided right before the redacted event: kinds, counts, paths; never the value."""
    with ledger.record_run("privacy", input="write jane.doe@example.com") as run:
        run.tool("lookup", {"q": "x"}, result={"phone": "+44 20 7946 0958"})
    events = ledger.events(run.run_id)
    kinds = [e.kind for e in events]
    assert kinds == [
        "RunStarted",
        "PolicyDecided",
        "ToolCalled",
        "PolicyDecided",
        "ToolReturned",
        "RunCompleted",
    ]
    assert events[1].payload == {
        "decision": "redact",
        "reasons": ["redacted:email at RunStarted.input"],
        "redactions": [{"kind": "email", "count": 1}],
    }
    assert events[3].payload["reasons"] == ["redacted:phone at ToolReturned.data.phone"]
    assert "7946" not in json.dumps([e.payload for e in events])


def test_an_error_echoing_a_key_is_never_stored(ledger: Ledger) -> None:
    """A provider's 401 echoing the API key, in an attempt and in the error: both redacted."""
    key = "sk-proj-Abc123def456ghi789jkl012mno345"
    with ledger.record_run("privacy") as run:
        run.model_call(
            provider="openai",
            model="gpt-test",
            messages=[{"role": "user", "content": "hi"}],
            attempts=[
                Attempt(number=1, status_code=401, error_message=f"Incorrect API key: {key}")
            ],
            error=ErrorInfo(type="AuthenticationError", message=f"bad key {key}"),
        )
    with pytest.raises(RuntimeError), ledger.record_run("privacy") as failing:
        raise RuntimeError(f"the key {key} was refused")
    stored = json.dumps([e.payload for r in (run.run_id, failing.run_id) for e in ledger.events(r)])
    assert key not in stored
    assert "[redacted:api_key]" in stored


def test_live_code_goes_on_with_what_was_recorded_and_replay_is_identical(
    ledger: Ledger,
) -> None:
    """A function whose model answers with an email: it sees the placeholder; replay agrees."""
    answer, run_id = ledger.record_function(agents.contact, "I am jane.doe@example.com")
    assert "jörg" not in answer
    assert "[redacted:email]" in answer
    assert "[redacted:phone]" in answer
    result = replay_run(ledger, run_id)
    assert result.identical


def test_a_bundled_agent_answering_with_an_email_replays_identically() -> None:
    """A router whose chat model answers with an email records it redacted and replays."""
    book = memory_ledger()
    step = {"agent": "geo", "args": {"place": "Old Town"}}
    said = "At [place:old-town]. Ask desk@old-town.example."
    models = router_script(plan={"router_plan": [step]}, answer=said)
    run = run_agent(book, "router", "Where is Old Town?", models=models)
    stored = json.dumps([e.payload for e in book.events(run.run_id)])
    assert "desk@old-town.example" not in stored
    facts = [e for e in book.events(run.run_id) if e.kind == "PolicyDecided"]
    assert facts[1].payload["reasons"] == ["redacted:email at ModelCalled.response.content"]
    assert run.answer == "At [place:old-town]. Ask [redacted:email]."  # not a citation
    assert replay_run(book, run.run_id).identical


def record_conversation(ledger: Ledger, redaction: Any, calls: int) -> None:
    """A conversation of ``calls`` model calls, each message once more in every request."""
    messages: list[dict[str, Any]] = []
    with ledger.record_run("bench", redaction=redaction) as run:
        for index in range(calls):
            messages.append({"role": "user", "content": f"question {index} from a@b.example"})
            run.model_call(
                provider="openai",
                model="gpt-test",
                messages=messages,
                response={"role": "assistant", "content": f"answer {index}"},
            )
            messages.append({"role": "assistant", "content": f"answer {index}"})


def test_each_conversation_message_is_redacted_once() -> None:
    """The recorder redacts only the messages a request adds (the chain knows the rest)."""
    ledger = Ledger.open("memory://")
    record_conversation(ledger, RedactionPolicy(), 5)
    (run_id,) = ledger.run_ids()
    facts = [e for e in ledger.events(run_id) if e.kind == "PolicyDecided"]
    assert len(facts) == 5
    assert all(
        f.payload["reasons"] == [f"redacted:email at ModelCalled.messages[{2 * i}].content"]
        for i, f in enumerate(facts)
    )


def test_a_recorded_tool_hands_back_its_result_as_recorded(ledger: Ledger) -> None:
    """The code goes on with the redacted result a replay would serve."""
    with ledger.record_run("privacy") as run:

        @run.recorded_tool
        def card_on_file(user: str) -> dict[str, str]:
            return {"user": user, "card": "6011.1111.1111.1117"}

        assert card_on_file("u-1") == {"user": "u-1", "card": "[redacted:card]"}


def test_an_annotation_is_redacted_and_labelled_with_what_was(ledger: Ledger) -> None:
    """A note on a closed run is redacted by the ledger's policy; labels name the kinds."""
    with ledger.record_run("privacy") as run:
        pass
    note = ledger.annotate(
        run.run_id, author="ops", note="customer jane.doe@example.com called", labels=["ok"]
    )
    assert note.payload["note"] == "customer [redacted:email] called"
    assert note.payload["labels"] == ["ok", "redacted:email"]


def test_a_run_that_hashes_replays_identically_with_the_ledgers_salt(ledger: Ledger) -> None:
    """Replay re-applies the recorded policy with the ledger's salt: the same placeholders."""
    policy = RedactionPolicy(actions={"email": "hash"})
    answer, run_id = ledger.record_function(
        agents.contact, "I am jane.doe@example.com", redaction=policy
    )
    assert "[email:" in answer
    assert replay_run(ledger, run_id).identical


def test_async_runs_record_the_same_redactions() -> None:
    """``arecord_run`` and the awaitable methods redact, and record the facts, alike."""

    async def main(ledger: Ledger) -> str:
        async with ledger.arecord_run("privacy", input="jane.doe@example.com") as run:
            await run.aanswer("call +44 20 7946 0958")
            return run.run_id

    ledger = Ledger.open("memory://")
    run_id = asyncio.run(main(ledger))
    events = ledger.events(run_id)
    assert [e.kind for e in events] == [
        "RunStarted",
        "PolicyDecided",
        "PolicyDecided",
        "SynthesisProduced",
        "RunCompleted",
    ]
    assert events[0].payload["input"] == "[redacted:email]"
    assert events[3].payload["answer"] == "call [redacted:phone]"
