"""`RequestKeys`: call fingerprints worked out incrementally, equal to the full ones."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.ledger import CallRecord, RequestKeys, call_fingerprint
from agentledger.ledger.redaction import Redactor

TEXTS = st.sampled_from(
    ["hello", "mail bob@example.com", "call +44 20 7946 0958", "ok [done]", "", "tool said 42"]
)
MESSAGES = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": TEXTS}
)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), MESSAGES),
        st.tuples(st.just("drop"), st.integers(min_value=1, max_value=3)),
        st.tuples(st.just("edit"), TEXTS),
        st.tuples(st.just("fresh"), st.lists(MESSAGES, max_size=4)),
    ),
    min_size=1,
    max_size=25,
)


def _redactor(policy: bool) -> Any:
    if not policy:
        return lambda value: value
    redactor = Redactor()
    return lambda value: value if redactor.clean(value) else redactor.json(value)[0]


@settings(max_examples=150, deadline=None)
@given(steps=STEPS, policy=st.booleans())
def test_incremental_fingerprints_equal_the_full_ones(
    steps: list[tuple[str, Any]], policy: bool
) -> None:
    """Growing, shrinking, mutated-in-place and fresh histories: always the full fingerprint."""
    redact = _redactor(policy)
    keys = RequestKeys(redact)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are careful."}]
    for action, value in steps:
        if action == "append":
            messages.append(dict(value))
        elif action == "drop":
            del messages[-value:]
        elif action == "edit" and messages:
            messages[0]["content"] = value  # the caller mutates a dict it sent before
        elif action == "fresh":
            messages = [dict(m) for m in value]
        call = CallRecord(
            provider="openai",
            model="gpt-4o-mini",
            messages=messages,
            params={"temperature": 0.0, "user": "bob@example.com"},
        )
        redacted = CallRecord(
            provider="openai",
            model="gpt-4o-mini",
            messages=redact([dict(m) for m in messages]),
            params=redact(dict(call.params)),
        )
        assert keys.fingerprint(call) == call_fingerprint(redacted)


def test_a_changed_message_changes_the_fingerprint() -> None:
    """Editing an earlier message in place is seen, not served from the chain."""
    keys = RequestKeys(lambda value: value)
    messages = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    before = keys.fingerprint(CallRecord(provider="p", model="m", messages=messages))
    messages[0]["content"] = "changed"
    after = keys.fingerprint(CallRecord(provider="p", model="m", messages=messages))
    assert before != after
    assert after == call_fingerprint(CallRecord(provider="p", model="m", messages=messages))


TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]


def test_the_fingerprints_equal_what_a_subjects_run_records_with_tools() -> None:
    """In a run tied to a subject the message nodes and the tools are sealed: so are the refs."""
    from agentledger.ledger import Ledger
    from agentledger.ledger.events import request_fingerprint

    with Ledger.open("memory://") as ledger, ledger.record_run("keys", subject="gus") as run:
        key = ledger.run_subject_key(ledger.events(run.run_id)[0].payload)
        assert key is not None
        keys = RequestKeys(run.redacted)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "mail bob@example.com"}]
        for tools in (TOOLS, None, TOOLS):
            call = CallRecord(
                provider="openai", model="m", messages=messages, params={"n": 1}, tools=tools
            )
            position = run.record_call(call)
            run.flush()
            payload = ledger.events(run.run_id)[position - 1].payload
            recorded = f"openai:{request_fingerprint(payload)}"
            assert keys.fingerprint(call, key) == recorded
            redacted = CallRecord(
                provider="openai",
                model="m",
                messages=run.redacted([dict(m) for m in messages]),
                params=run.redacted(dict(call.params)),
                tools=tools,
            )
            assert call_fingerprint(redacted, key) == recorded
            messages = [*messages, {"role": "assistant", "content": "noted"}]


def test_threads_with_their_own_read_only_histories_get_the_full_fingerprints() -> None:
    """Four threads share one RequestKeys; each sends its own history of read-only messages."""
    import threading
    from types import MappingProxyType

    redact = _redactor(True)
    keys = RequestKeys(redact)
    wrong: list[tuple[int, int]] = []

    def converse(thread: int) -> None:
        messages: list[Any] = []
        for turn in range(60):
            text = ["hello", "mail bob@example.com", "ok [done]"][turn % 3]
            message = {"role": "user", "content": f"{text} {thread}"}
            messages.append(MappingProxyType(message) if turn % 2 else message)
            if turn % 7 == 6:
                del messages[0]
            tools = TOOLS if turn % 2 else None
            call = CallRecord(provider="p", model="m", messages=list(messages), tools=tools)
            full = call_fingerprint(
                CallRecord(
                    provider="p",
                    model="m",
                    messages=redact([dict(m) for m in messages]),
                    tools=tools,
                )
            )
            if keys.fingerprint(call) != full:
                wrong.append((thread, turn))

    threads = [threading.Thread(target=converse, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
