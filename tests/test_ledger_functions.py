"""Recording a user's function as a run: entry points, prompts, recorded tools, refusals."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from user_code import agents

from agentledger.agents.testing import ScriptedClient
from agentledger.ledger import (
    EntryError,
    Ledger,
    RecordedToolError,
    RunRecorder,
    UsageError,
    entry_point,
    load_entry,
)

REPO = Path(__file__).resolve().parents[1]


def kinds(ledger: Ledger, run_id: str) -> list[str]:
    """The run's event kinds in order."""
    return [e.kind for e in ledger.events(run_id)]


def plain(run: RunRecorder, value: Any) -> Any:
    """A module-level function: records one delta and returns its input."""
    run.delta({"seen": value})
    return value


class Holder:
    """A class whose methods are or are not importable back."""

    def method(self, run: RunRecorder, value: Any) -> Any:  # noqa: ARG002 - the signature
        """A bound method: its instance cannot be rebuilt."""
        return value

    @classmethod
    def make(cls, run: RunRecorder, value: Any) -> Any:  # noqa: ARG003 - the signature
        """A classmethod: importable as Holder.make."""
        return value


def test_record_function_returns_the_result_and_records_the_entry(ledger: Ledger) -> None:
    """RunStarted names module:qualname, the file and the source hash; the agent is the qualname."""
    result, run_id = ledger.record_function(plain, {"x": 1.0})
    assert result == {"x": 1}  # the function gets its input as the ledger records it
    started = ledger.events(run_id)[0].payload
    assert started["agent"] == "plain"
    assert started["entry"]["path"] == "test_ledger_functions:plain"
    assert started["entry"]["file"].endswith("tests/test_ledger_functions.py")
    assert started["entry"]["source_hash"].startswith("sha256:")
    assert kinds(ledger, run_id) == ["RunStarted", "DeltaApplied", "RunCompleted"]
    assert ledger.recorded_entry(run_id)
    assert ledger.verify(run_id).ok


def test_prompts_are_recorded_in_the_configuration_and_read_back(ledger: Ledger) -> None:
    """Text alone gets a hash version; (version, text) keeps its version; texts are blobs."""
    _, run_id = ledger.record_function(
        agents.prompted, "hi", prompts={"system": ("v3", "Be brief.")}, agent="docs"
    )
    prompts = ledger.events(run_id)[0].payload["config"]["prompts"]
    assert prompts["system"]["version"] == "v3"
    assert ledger.blob(prompts["system"]["text_ref"]) == "Be brief."
    assert ledger.events(run_id)[0].payload["agent"] == "docs"
    with ledger.record_run("x", prompts={"a": "Say hi."}) as run:
        assert run.prompt_text("a") == "Say hi."
        assert run.prompts == {"a": "Say hi."}
        with pytest.raises(UsageError, match="no prompt 'b'"):
            run.prompt_text("b")
    version = ledger.events(run.run_id)[0].payload["config"]["prompts"]["a"]["version"]
    assert version.startswith("h:")
    assert len(version) == 14


def test_the_decorator_form_gives_defaults(ledger: Ledger) -> None:
    """@recorded_function sets agent, tags and prompts; the function stays callable as is."""
    result, run_id = agents.marked.record(ledger, "hello")
    info = ledger.run(run_id)
    assert (info.agent, info.tags) == ("marked", ("decorated",))
    assert result == "answer to: hello"
    assert ledger.events(run_id)[0].payload["entry"]["path"] == "user_code.agents:marked"
    assert load_entry("user_code.agents:marked") is agents.marked.function


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (lambda run, value: (run, value), "cannot record a lambda"),
        (functools.partial(plain), "functools.partial"),
        (Holder().method, "bound method"),
        (print, "not a builtin_function_or_method"),
    ],
)
def test_what_replay_could_not_import_back_is_refused(fn: Any, reason: str) -> None:
    """Lambdas, partials, bound methods and builtins are refused before anything is recorded."""
    with Ledger.open("memory://") as ledger:
        with pytest.raises(EntryError, match=reason):
            ledger.record_function(fn, 1)
        assert ledger.runs() == []


def test_a_nested_function_is_refused_with_the_reason() -> None:
    """A closure cannot be imported back: the error says to define it at module level."""

    def inner(run: RunRecorder, value: Any) -> Any:
        return run, value

    with pytest.raises(EntryError, match="defined inside another function"):
        entry_point(inner)
    assert entry_point(Holder.make).path == "test_ledger_functions:Holder.make"


def test_load_entry_names_what_is_wrong() -> None:
    """Malformed paths, missing modules and missing names each get their own message."""
    with pytest.raises(EntryError, match="not module:qualname"):
        load_entry("no_colon")
    with pytest.raises(EntryError, match="cannot import module 'no_such_module_x'"):
        load_entry("no_such_module_x:f")
    with pytest.raises(EntryError, match="has no 'missing'"):
        load_entry("user_code.agents:missing")
    with pytest.raises(EntryError, match="names a str"):
        load_entry("user_code.agents:SYSTEM")


def test_a_failing_function_records_run_failed_and_names_the_run(ledger: Ledger) -> None:
    """The exception propagates with a note; its recorded tool failed with the exception type."""
    with pytest.raises(ConnectionError) as caught:
        ledger.record_function(agents.failing, "ops@example.com")
    (run_id,) = [r.run_id for r in ledger.runs()]
    assert f"run {run_id} recorded it as RunFailed" in "".join(caught.value.__notes__)
    events = [e for e in ledger.events(run_id) if e.kind != "PolicyDecided"]  # redactions
    assert [e.kind for e in events] == ["RunStarted", "ToolCalled", "ToolReturned", "RunFailed"]
    assert events[1].payload["effectful"] is True
    assert events[2].payload["error"] == {
        "code": "ConnectionError",
        "message": "cannot reach [redacted:email]",
    }


def test_recorded_tools_record_bound_arguments_and_json_results(ledger: Ledger) -> None:
    """Arguments are bound by name with defaults; a non-JSON result is refused clearly."""
    with ledger.record_run("tools") as run:

        @run.recorded_tool(name="scale", version="2")
        def scale(value: float, factor: float = 2.0) -> float:
            return value * factor

        @run.recorded_tool
        def opaque() -> object:
            return object()

        assert scale(1.5) == 3
        with pytest.raises(UsageError, match="must return JSON"):
            opaque()
    called = ledger.events(run.run_id)[1].payload
    assert (called["tool"], called["tool_version"], called["arguments"]) == (
        "scale",
        "2",
        {"factor": 2, "value": 1.5},
    )
    assert ledger.events(run.run_id)[4].payload["error"]["code"].endswith("UsageError")


def test_async_functions_record_through_asyncio_run_or_arecord_function(ledger: Ledger) -> None:
    """record_function runs an async function to completion; inside a loop it says what to use."""
    result, run_id = ledger.record_function(agents.gathered, "q")
    assert len(result) == 4
    assert kinds(ledger, run_id).count("ModelCalled") == 4

    async def inside() -> tuple[Any, str]:
        with pytest.raises(UsageError, match=r"await ledger\.arecord_function"):
            ledger.record_function(agents.gathered, "q")
        return await ledger.arecord_function(plain, 7)  # a sync function runs in a thread

    value, other = asyncio.run(inside())
    assert value == 7
    assert kinds(ledger, other) == ["RunStarted", "DeltaApplied", "RunCompleted"]


def test_an_imported_run_is_not_marked_as_recorded_here(tmp_path: Path) -> None:
    """Import keeps the events but not the mark: its entry is not trusted."""
    with Ledger.open(f"sqlite:///{tmp_path / 'a.db'}") as source:
        _, run_id = source.record_function(plain, 1)
        source.export_run(run_id, tmp_path / "run.jsonl")
    with Ledger.open(f"sqlite:///{tmp_path / 'b.db'}") as target:
        assert target.import_file(tmp_path / "run.jsonl") == run_id
        assert target.events(run_id)[0].payload["entry"]["path"] == "test_ledger_functions:plain"
        assert not target.recorded_entry(run_id)


def test_the_scripted_client_is_instrumented_through_the_entry_point_group(
    ledger: Ledger,
) -> None:
    """run.instrument finds the installed 'scripted' instrumentation; calls and streams record."""
    with ledger.record_run("client") as run:
        client = run.instrument(ScriptedClient(["hi there", RuntimeError("boom")], chunk_size=2))
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a"}], stream=True
        )
        assert "".join(c.choices[0].delta.content for c in reply) == "hi there"
        with pytest.raises(RuntimeError, match="boom"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    streamed, failed = (e.payload for e in ledger.events(run.run_id)[1:3])
    assert (streamed["chunk_count"], streamed["params"]) == (4, {"stream": True})
    assert streamed["ttft_ms"] >= 0
    assert failed["error"] == {"type": "RuntimeError", "message": "boom"}


def test_a_recorded_failure_is_raised_again_as_its_type_or_a_recorded_tool_error() -> None:
    """Built-in types come back as themselves; types of modules not imported do not."""
    from agentledger.ledger import raise_recorded

    assert isinstance(raise_recorded("t", "ValueError", "bad"), ValueError)
    error = raise_recorded("t", "not_imported_pkg.Boom", "bad")
    assert isinstance(error, RecordedToolError)
    assert (error.code, error.message) == ("not_imported_pkg.Boom", "bad")


@pytest.mark.slow
def test_a_script_run_as_main_is_recorded_under_its_module_name(tmp_path: Path) -> None:
    """``python my_agent.py`` records my_agent:agent and the file, never __main__."""
    script = tmp_path / "my_agent.py"
    script.write_text(
        "from agentledger.ledger import Ledger\n"
        "def agent(run, question):\n"
        "    run.answer(question.upper())\n"
        "    return question\n"
        "if __name__ == '__main__':\n"
        "    with Ledger.open('sqlite:///runs.db') as ledger:\n"
        "        print(ledger.record_function(agent, 'hi')[1])\n",
        "utf-8",
    )
    done = subprocess.run(
        [sys.executable, "my_agent.py"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    with Ledger.open(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        entry = ledger.events(done.stdout.strip())[0].payload["entry"]
    assert (entry["path"], entry["file"]) == ("my_agent:agent", "my_agent.py")


def test_a_cancelled_run_says_why_it_failed() -> None:
    """A run whose task is cancelled records RunFailed naming the cancellation, not ""."""

    async def agent(ledger: Ledger) -> None:
        async with ledger.arecord_run("cancelled", input="q") as run:
            await run.aanswer("started")
            await asyncio.sleep(60)

    async def main(ledger: Ledger) -> None:
        task = asyncio.ensure_future(agent(ledger))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with Ledger.open("memory://") as ledger:
        asyncio.run(main(ledger))
        (run,) = ledger.runs()
        failed = ledger.events(run.run_id)[-1]
    assert failed.kind == "RunFailed"
    assert failed.payload["error"]["type"] == "CancelledError"
    assert failed.payload["error"]["message"] == "the task was cancelled"
