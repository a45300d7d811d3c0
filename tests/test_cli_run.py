"""`agentledger run` and `agentledger demo`, including a real OpenAI SDK call over real HTTP."""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentledger.agents.testing import database_bytes
from agentledger.cli import main
from agentledger.ledger import Ledger

SENTINEL_KEY = "sk-sentinel-7f3a9c1e5b2d4680-never-store-me"


@pytest.fixture(autouse=True)
def no_vendor_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the developer's keys, base URLs and proxies out of these tests."""
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def db_url(tmp_path: Path) -> str:
    """A SQLite ledger URL in the test's directory."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_a_missing_openai_key_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without OPENAI_API_KEY the command exits 2 and names the variable."""
    status = main(["--db", db_url(tmp_path), "run", "hi", "--model", "openai:gpt-4o-mini"])
    assert status == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


def test_a_missing_anthropic_key_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ANTHROPIC_API_KEY the command exits 2 and names the variable."""
    status = main(
        ["--db", db_url(tmp_path), "run", "hi", "--agent", "tools", "--model", "anthropic:claude"]
    )
    assert status == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


def test_one_scripted_file_answers_every_role_in_call_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--model scripted:FILE shares one model across roles.

    The answer goes to stdout and the run id to stderr.
    """
    script = tmp_path / "answers.json"
    plan = {"steps": [{"goal": "add", "tool": "calculator", "args": {"expression": "2+3"}}]}
    script.write_text(
        json.dumps(
            [
                json.dumps(plan),
                {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]},
                "2 + 3 = 5.",
            ]
        ),
        encoding="utf-8",
    )
    status = main(
        ["--db", db_url(tmp_path), "run", "What is 2+3?", "--model", f"scripted:{script}"]
    )
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert captured.out == "2 + 3 = 5.\n"
    run_id = captured.err.split()[1]
    with Ledger.open(db_url(tmp_path)) as ledger:
        assert ledger.verify(run_id).ok
        started = ledger.events(run_id)[0].payload
        assert started["agent"] == "pipeline"
        assert {m["provider"] for m in started["config"]["models"].values()} == {"scripted"}


def test_role_specific_models_prompt_versions_and_max_steps_are_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ROLE=SPEC sets one role, --prompt ROLE=VERSION and --max-steps land in the settings."""
    clarify = tmp_path / "planner.json"
    clarify.write_text(json.dumps(['{"steps":[],"needs_clarification":"Which day?"}']))
    unused = tmp_path / "unused.json"
    unused.write_text("[]")
    status = main(
        [
            "--db",
            db_url(tmp_path),
            "run",
            "Is it nice out?",
            "--model",
            f"scripted:{unused}",
            "--model",
            f"planner=scripted:{clarify}",
            "--prompt",
            "planner=v2",
            "--max-steps",
            "3",
            "--seed",
            "9",
        ]
    )
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert captured.out == "Which day?\n"
    run_id = captured.err.split()[1]
    with Ledger.open(db_url(tmp_path)) as ledger:
        config = ledger.events(run_id)[0].payload["config"]
    assert config["models"]["planner"]["model"] == str(clarify)
    assert config["models"]["executor"]["model"] == str(unused)
    assert config["prompts"]["planner"]["version"] == "v2"
    assert config["settings"]["limits"]["max_steps"] == 3
    assert config["settings"]["seed"] == 9


def test_an_unknown_role_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--model chef=... names the agent's roles."""
    status = main(["--db", db_url(tmp_path), "run", "hi", "--model", "chef=scripted:x.json"])
    assert status == 2
    assert "roles: planner, executor, synthesizer" in capsys.readouterr().err


def test_a_run_that_fails_exits_1_and_names_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script that runs out records RunFailed; the command says which run failed."""
    script = tmp_path / "short.json"
    script.write_text(json.dumps(['{"steps":[{"goal":"x","tool":"calculator","args":{}}]}']))
    status = main(["--db", db_url(tmp_path), "run", "q", "--model", f"scripted:{script}"])
    err = capsys.readouterr().err
    assert status == 1
    assert "failed: " in err
    assert "ran out of answers" in err


def test_demo_runs_the_pipeline_and_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agentledger demo` records the bundled pipeline scenario and reports it intact."""
    status = main(["--db", db_url(tmp_path), "demo"])
    out = capsys.readouterr().out
    assert status == 0
    assert "Answer (answered): Yes: Saturday 13 June looks sunny" in out
    assert "Verify: intact" in out
    assert '"evidence": {' in out
    with Ledger.open(db_url(tmp_path)) as ledger:
        (run,) = ledger.runs()
        assert (run.agent, run.status) == ("pipeline", "completed")


@dataclass
class FakeOpenAI:
    """A local OpenAI-compatible server's script and log: queued answers, requests seen."""

    answers: list[dict[str, Any]]
    seen: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


def handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    """A request handler answering POST /v1/chat/completions from ``fake``'s queue."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.seen.append(
                {"path": self.path, "auth": self.headers["Authorization"], "body": body}
            )
            if self.path != "/v1/chat/completions" or not fake.answers:
                self.send_response(404)
                self.end_headers()
                return
            payload = json.dumps(fake.answers.pop(0)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            """Keep the test output quiet."""

    return Handler


def completion(
    number: int, message: dict[str, Any], finish: str, tokens: tuple[int, int]
) -> dict[str, Any]:
    """One chat.completion object as the OpenAI API returns it."""
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "total_tokens": sum(tokens),
        },
    }


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    """A server on 127.0.0.1 answering first with a tool call, then with text."""
    fake = FakeOpenAI(
        answers=[
            completion(
                1,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_q7",
                            "type": "function",
                            "function": {
                                "name": "calculator",
                                "arguments": '{"expression":"6*7"}',
                            },
                        }
                    ],
                },
                "tool_calls",
                (120, 18),
            ),
            completion(2, {"role": "assistant", "content": "6 x 7 = 42."}, "stop", (160, 9)),
        ]
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(fake))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_a_tool_agent_run_through_the_real_openai_sdk_over_http_is_recorded(
    tmp_path: Path,
    openai_server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Acceptance: a tools run through the real OpenAI SDK over HTTP records a verifying run.

    `run --agent tools --model openai:gpt-4o-mini --base-url http://127.0.0.1:PORT/v1` against
    a local server; the API key is nowhere in the database.
    """
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)
    db = tmp_path / "ledger.db"
    argv = [
        "--db",
        f"sqlite:///{db}",
        "run",
        "What is 6 times 7?",
        "--agent",
        "tools",
        "--model",
        "openai:gpt-4o-mini",
        "--base-url",
        openai_server.url,
    ]
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert captured.out == "6 x 7 = 42.\n"
    run_id = captured.err.split()[1]

    seen = openai_server.seen
    assert [s["path"] for s in seen] == ["/v1/chat/completions"] * 2
    assert seen[0]["auth"] == f"Bearer {SENTINEL_KEY}"
    assert seen[0]["body"]["model"] == "gpt-4o-mini"
    assert "calculator" in {t["function"]["name"] for t in seen[0]["body"]["tools"]}
    assert seen[1]["body"]["messages"][-1] == {
        "role": "tool",
        "content": '{"data": {"expression": "6*7", "result": 42}, "ok": true}',
        "tool_call_id": "call_q7",
    }

    with Ledger.open(f"sqlite:///{db}") as ledger:
        assert ledger.verify(run_id).ok
        events = ledger.events(run_id)
        assert [e.kind for e in events] == [
            "RunStarted",
            "PolicyDecided",
            "StepStarted",
            "ModelCalled",
            "ToolCalled",
            "ToolReturned",
            "DeltaApplied",
            "StepCompleted",
            "StepStarted",
            "ModelCalled",
            "StepCompleted",
            "SynthesisProduced",
            "RunCompleted",
        ]
        models = events[0].payload["config"]["models"]
        assert models["agent"]["provider"] == "openai"
        assert models["agent"]["model"] == "gpt-4o-mini"
        calls = [e.payload for e in events if e.kind == "ModelCalled"]
        assert [c["usage"]["total_tokens"] for c in calls] == [138, 169]
        assert all(c["cost_usd"] > 0 for c in calls)
        assert calls[0]["attempts"][0]["number"] == 1
        assert events[5].payload["data"] == {"expression": "6*7", "result": 42}
        assert ledger.run(run_id).status == "completed"
    stored = database_bytes(db)
    assert b"6 x 7 = 42." in stored
    assert SENTINEL_KEY.encode() not in stored
    assert b"sk-sentinel" not in stored


# Streaming -------------------------------------------------------------------------------------


def tools_script(tmp_path: Path, *answers: Any) -> str:
    """A scripted model file for the tools agent: a calculator call, then ``answers``."""
    script = tmp_path / "answers.json"
    turns = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}]
    script.write_text(json.dumps([*turns, *answers]), encoding="utf-8")
    return f"scripted:{script}"


def test_run_stream_prints_the_answer_then_the_summary_and_records_chunk_timings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run --agent tools --stream`: the answer on stdout, the summary on stderr, timings recorded.

    The run records ``stream: true`` in its settings and replays identical.
    """
    spec = tools_script(tmp_path, "Six times seven is 42.")
    argv = ["--db", db_url(tmp_path), "run", "6*7?", "--agent", "tools", "--stream"]
    assert main([*argv, "--model", spec]) == 0
    captured = capsys.readouterr()
    assert captured.out == "Six times seven is 42.\n"
    assert "answered: 2 model calls, 1 tool calls" in captured.err
    run_id = captured.err.split()[1]
    with Ledger.open(db_url(tmp_path)) as ledger:
        events = ledger.events(run_id)
        assert events[0].payload["config"]["settings"]["options"]["stream"] is True
        calls = [e.payload for e in events if e.kind == "ModelCalled"]
        assert [c["chunk_count"] for c in calls] == [1, 5]
        assert all(c["ttft_ms"] == 0.0 for c in calls)
        assert ledger.blob(calls[1]["chunks_ref"]) == {
            "chunks": [[0.0, 4], [0.0, 6], [0.0, 6], [0.0, 3], [0.0, 3]]
        }
    assert main(["--db", db_url(tmp_path), "show", run_id]) == 0
    assert "ttft=0ms chunks=5" in capsys.readouterr().out
    assert main(["--db", db_url(tmp_path), "replay", run_id]) == 0
    assert "identical" in capsys.readouterr().out


def test_run_stream_json_prints_json_lines_chunks_then_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --json, one object per chunk, then the result object."""
    spec = tools_script(tmp_path, "It is 42.")
    argv = ["--db", db_url(tmp_path), "run", "6*7?", "--agent", "tools", "--stream", "--json"]
    assert main([*argv, "--model", spec]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["type"], line.get("text")) for line in lines[:-1]] == [
        ("chunk", "It "),
        ("chunk", "is "),
        ("chunk", "42."),
    ]
    assert {line["role"] for line in lines[:-1]} == {"agent"}
    result = lines[-1]
    assert result["type"] == "result"
    assert (result["status"], result["answer"], result["answer_streamed"]) == (
        "answered",
        "It is 42.",
        True,
    )
    assert result["model_calls"] == 2


def test_run_stream_follows_a_revised_answer_in_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The evidence check strips an unsupported citation: stdout ends with the recorded answer."""
    spec = tools_script(tmp_path, "It is 42 [poi:nowhere].", "Still 42 [poi:nowhere].")
    argv = ["--db", db_url(tmp_path), "run", "6*7?", "--agent", "tools", "--stream"]
    assert main([*argv, "--model", spec]) == 0
    captured = capsys.readouterr()
    assert captured.out == "It is 42 [poi:nowhere].\nStill 42 [poi:nowhere].\nStill 42.\n"
    assert "differs from the streamed text" in captured.err


def test_run_stream_streams_the_pipelines_synthesizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """For the pipeline, the synthesizer's answer streams; the planner's JSON does not print."""
    script = tmp_path / "answers.json"
    plan = {"steps": [{"goal": "add", "tool": "calculator", "args": {"expression": "2+3"}}]}
    script.write_text(
        json.dumps(
            [
                json.dumps(plan),
                {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]},
                "2 + 3 = 5.",
            ]
        ),
        encoding="utf-8",
    )
    argv = ["--db", db_url(tmp_path), "run", "2+3?", "--stream", "--model", f"scripted:{script}"]
    assert main(argv) == 0
    assert capsys.readouterr().out == "2 + 3 = 5.\n"


def test_run_stream_refuses_an_agent_whose_answer_cannot_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The coordinator's answer is a JSON decision: --stream is a usage error naming who streams."""
    argv = ["--db", db_url(tmp_path), "run", "hi", "--agent", "coordinator", "--stream"]
    assert main([*argv, "--model", "scripted:nothing.json"]) == 2
    err = capsys.readouterr().err
    assert "coordinator agent cannot stream" in err
    assert "pipeline, reasoning, router, tools" in err


class WatchedStdout(io.StringIO):
    """A stdout that remembers what was flushed and lets another thread wait for it."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed = ""
        self.changed = threading.Condition()

    def flush(self) -> None:
        """Flush, and wake whoever waits for the text."""
        super().flush()
        with self.changed:
            self.flushed = self.getvalue()
            self.changed.notify_all()

    def wait_for(self, text: str, timeout: float = 5.0) -> bool:
        """Wait until ``text`` has been flushed; False after ``timeout`` seconds."""
        with self.changed:
            return self.changed.wait_for(lambda: text in self.flushed, timeout)


@dataclass
class StreamingOpenAI:
    """A local server streaming Chat Completions as SSE, paced by what stdout shows.

    Each text chunk is sent only after the previous one was flushed to ``stdout``, so a CLI that
    buffered would stall it (the chunks it waited for in vain land in ``late``).
    """

    streams: list[list[dict[str, Any]]]
    stdout: WatchedStdout
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    late: list[str] = field(default_factory=list)


def sse_chunk(number: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One chat.completion.chunk as the OpenAI API streams it."""
    return {
        "id": f"chatcmpl-s{number}",
        "object": "chat.completion.chunk",
        "created": 1_760_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse_usage(number: int, tokens: tuple[int, int]) -> dict[str, Any]:
    """The final usage chunk sent with ``stream_options.include_usage``."""
    return {
        **sse_chunk(number, {}),
        "choices": [],
        "usage": {
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "total_tokens": sum(tokens),
        },
    }


def streaming_handler(fake: StreamingOpenAI) -> type[BaseHTTPRequestHandler]:
    """Answers each POST with the next queued stream, pacing text chunks on stdout's flushes."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            """Stream the next queued answer."""
            fake.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            events = fake.streams.pop(0)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            printed = fake.stdout.flushed
            for event in events:
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                choices = event.get("choices", [])
                text = next((c["delta"].get("content") for c in choices), None)
                if text:
                    printed += text
                    if not fake.stdout.wait_for(printed):
                        fake.late.append(text)
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            """Keep the test output quiet."""

    return Handler


TOOL_CALL_STREAM = [
    sse_chunk(1, {"role": "assistant", "content": None}),
    sse_chunk(
        1,
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_q7",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": ""},
                }
            ]
        },
    ),
    sse_chunk(1, {"tool_calls": [{"index": 0, "function": {"arguments": '{"expr'}}]}),
    sse_chunk(1, {"tool_calls": [{"index": 0, "function": {"arguments": 'ession":"6*7"}'}}]}),
    sse_chunk(1, {}, "tool_calls"),
    sse_usage(1, (120, 18)),
]


def run_streaming(
    monkeypatch: pytest.MonkeyPatch, db: str, streams: list[list[dict[str, Any]]]
) -> tuple[int, StreamingOpenAI]:
    """`run --agent tools --stream` through the real OpenAI SDK against a streaming server."""
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)
    fake = StreamingOpenAI(streams=streams, stdout=WatchedStdout())
    server = ThreadingHTTPServer(("127.0.0.1", 0), streaming_handler(fake))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        with monkeypatch.context() as patched:
            patched.setattr(sys, "stdout", fake.stdout)
            status = main(
                [
                    *("--db", db, "run", "What is 6 times 7?", "--agent", "tools", "--stream"),
                    *("--model", "openai:gpt-4o-mini", "--base-url", fake.url),
                ]
            )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return status, fake


def test_run_stream_through_the_real_openai_sdk_prints_each_chunk_as_it_arrives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptance: `run --agent tools --stream` against a local streaming server.

    The server sends each text chunk only once the previous one is on stdout, so the output
    arrives in order, chunk by chunk; the recorded calls carry their time to first token and
    chunk timings, and the run replays identical offline.
    """
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    answer = [
        sse_chunk(2, {"role": "assistant", "content": ""}),
        sse_chunk(2, {"content": "6 x 7"}),
        sse_chunk(2, {"content": " = "}),
        sse_chunk(2, {"content": "42."}),
        sse_chunk(2, {}, "stop"),
        sse_usage(2, (160, 9)),
    ]
    status, fake = run_streaming(monkeypatch, db, [TOOL_CALL_STREAM, answer])
    assert status == 0
    assert fake.late == []
    assert fake.stdout.getvalue() == "6 x 7 = 42.\n"
    assert [b["stream"] for b in fake.bodies] == [True, True]
    assert all(b["stream_options"] == {"include_usage": True} for b in fake.bodies)

    with Ledger.open(db) as ledger:
        (run,) = ledger.runs()
        assert ledger.verify(run.run_id).ok
        calls = [e.payload for e in ledger.events(run.run_id) if e.kind == "ModelCalled"]
        assert [c["chunk_count"] for c in calls] == [3, 3]
        assert [c["usage"]["total_tokens"] for c in calls] == [138, 169]
        for call in calls:
            timings = ledger.blob(call["chunks_ref"])["chunks"]
            assert call["ttft_ms"] == timings[0][0] > 0
            assert [at for at, _ in timings] == sorted(at for at, _ in timings)
            assert call["ttft_ms"] <= call["latency_ms"]
        assert [chars for _, chars in ledger.blob(calls[1]["chunks_ref"])["chunks"]] == [5, 3, 3]
    assert main(["--db", db, "replay", run.run_id]) == 0


def test_run_stream_broken_mid_answer_is_not_retried_and_ends_with_the_recorded_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server error after the first chunk: no retry, a failed call, the fallback in full."""
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    broken = [
        sse_chunk(2, {"content": "6 x 7"}),
        {"error": {"message": "The server had an error", "type": "server_error"}},
    ]
    retry = [sse_chunk(3, {"content": "never sent"}, "stop")]
    _, fake = run_streaming(monkeypatch, db, [TOOL_CALL_STREAM, broken, retry])
    assert len(fake.bodies) == 2
    out = fake.stdout.getvalue()
    assert out.startswith("6 x 7\nI could not finish this request")
    assert "differs from the streamed text" in capsys.readouterr().err
    with Ledger.open(db) as ledger:
        (run,) = ledger.runs()
        failed = [e.payload for e in ledger.events(run.run_id) if e.kind == "ModelCalled"][-1]
        assert failed["error"]["type"] == "APIError"
        assert "not retried" in failed["error"]["message"]
        assert len(failed["attempts"]) == 1
        assert out.endswith(ledger.events(run.run_id)[-2].payload["answer"] + "\n")
    assert main(["--db", db, "replay", run.run_id]) == 0
