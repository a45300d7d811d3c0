"""`agentledger run` and `agentledger demo`, including a real OpenAI SDK call over real HTTP."""

from __future__ import annotations

import json
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
