"""``export --format otlp|otlp-json``: runs as OpenTelemetry traces, checked span by span.

Each golden run (tests/golden/) is sent to an OTLP/HTTP receiver on loopback (stdlib
http.server on 127.0.0.1, an ephemeral port) that decodes every request with the official
protobuf definitions (opentelemetry-proto's ExportTraceServiceRequest). The expected trace is
derived here from the golden file's own events, independently of the exporter: one span per run,
step, model call and tool call, with their parents, kinds, GenAI attributes, ledger links and
the timings the record gives, every child inside its parent, and no content unless asked for.
Nothing but 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from agentledger.agents.integrations import otel
from agentledger.cli import _otel_command, main
from agentledger.ledger import Ledger, format_timestamp

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
GOLDEN_RUNS = [
    "pipeline.jsonl",
    "reasoning.jsonl",
    "coordinator.jsonl",
    "tools.jsonl",
    "router.jsonl",
    "old_schema_tools.jsonl",
    "divergent_pipeline.jsonl",
]
CONTENT_ATTRIBUTES = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "agentledger.step.args",
        "agentledger.step.output",
        "agentledger.plan",
        "agentledger.patch",
        "agentledger.answer",
        "agentledger.question",
        "agentledger.note",
    }
)


# The receiver ----------------------------------------------------------------------------------


@dataclass
class Receiver:
    """An OTLP/HTTP traces receiver on 127.0.0.1: decodes and keeps what it is sent."""

    url: str = ""
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    status: int = 200
    answer: bytes = b""

    def spans(self) -> list[Span]:
        """Every span received, in order."""
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        receiver = self.server.receiver
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        receiver.paths.append(self.path)
        receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
        if receiver.status != 200:
            self.send_response(receiver.status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(receiver.answer)))
            self.end_headers()
            self.wfile.write(receiver.answer)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        receiver.raw.append(body)
        receiver.requests.append(request)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Keep the test output quiet."""


class _Server(ThreadingHTTPServer):
    receiver: Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A loopback OTLP/HTTP receiver, on an ephemeral port, for one test."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.receiver = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/v1/traces")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def _no_ambient_otel_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's OTEL_* and proxy variables must not steer the exports under test."""
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_SERVICE_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


# The CLI and the ledger ------------------------------------------------------------------------


@dataclass
class Output:
    """What one CLI invocation returned and printed."""

    status: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """``agentledger ARGV`` in-process, returning its status and output."""

    def run(*argv: str) -> Output:
        capsys.readouterr()
        status = main(list(argv))
        captured = capsys.readouterr()
        return Output(status, captured.out, captured.err)

    return run


@pytest.fixture
def export(cli: Any, golden_db: str) -> Any:
    """``agentledger --db GOLDEN_DB export ARGV`` in-process."""

    def run(*argv: str) -> Output:
        return cli("--db", golden_db, "export", *argv)

    return run


@dataclass
class Golden:
    """A golden run as its file records it: id, events (envelopes) and blobs."""

    name: str
    run_id: str
    events: list[dict[str, Any]]
    blobs: dict[str, Any]

    def conversation(self, ref: str) -> list[Any]:
        """The messages of a conversation chain, oldest first."""
        out = []
        current: str | None = ref
        while current is not None:
            node = self.blobs[current]
            if node.get("message") is not None:
                out.append(node["message"])
            current = node.get("parent_ref")
        return out[::-1]


def read_golden(name: str) -> Golden:
    """Parse a golden export file (header, event lines, blob lines)."""
    lines = [json.loads(line) for line in (GOLDEN / name).read_text("utf-8").splitlines() if line]
    events = [line for line in lines if line.get("type") == "event"]
    blobs = {line["ref"]: line["content"] for line in lines if line.get("type") == "blob"}
    return Golden(name, events[0]["run_id"], events, blobs)


@pytest.fixture(scope="module")
def golden_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite ledger holding every golden run."""
    path = tmp_path_factory.mktemp("otel") / "golden.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        for name in GOLDEN_RUNS:
            ledger.import_file(GOLDEN / name)
    return str(path)


# What a golden run's trace must be, derived from its events alone ------------------------------


def nanos(timestamp: str) -> int:
    """A ledger timestamp as nanoseconds since the epoch."""
    moment = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    whole = moment.replace(microsecond=0) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return int(whole.total_seconds()) * 10**9 + moment.microsecond * 1000


def expected_span_id(run_id: str, position: int) -> bytes:
    """The documented derivation: the first 8 bytes of SHA-256 of "<run id>/<position>"."""
    return hashlib.sha256(f"{run_id}/{position}".encode()).digest()[:8]


@dataclass
class Expected:
    """One span a golden run must produce."""

    position: int
    name: str
    kind: int
    parent: int | None
    start: int
    end: int | None
    attributes: dict[str, Any]
    error: bool = False


def milliseconds(value: float) -> int:
    """Milliseconds as nanoseconds."""
    return round(value * 1_000_000)


def expected_times(golden: Golden) -> tuple[dict[int, int], dict[int, int]]:
    """The documented timing rule: when each event happened, and when each model call began.

    Walking back from the end, an event happened at its timestamp or when the next thing began,
    whichever is earlier (never before RunStarted); a model call began its latency before it
    ended; a tool call began its latency before it returned, or at ToolCalled if earlier.
    """
    floor = nanos(golden.events[0]["timestamp"])
    at: dict[int, int] = {}
    began: dict[int, int] = {}
    returned: dict[str, tuple[int, int]] = {}
    cursor: int | None = None
    for event in reversed(golden.events):
        p, position, ts = event["payload"], event["position"], nanos(event["timestamp"])
        moment = max(ts if cursor is None else min(ts, cursor), floor)
        if event["kind"] == "ModelCalled":
            began[position] = cursor = max(moment - milliseconds(p.get("latency_ms", 0)), floor)
        elif event["kind"] == "ToolReturned":
            latency = p.get("latency_ms", p.get("latency_s", 0) * 1000)  # version 1: seconds
            returned[p["call_id"]] = (moment, milliseconds(latency))
            cursor = moment
        elif event["kind"] == "ToolCalled":
            end, latency = returned[p["call_id"]]
            moment = cursor = max(min(moment, end - latency), floor)
        else:
            cursor = moment
        at[position] = moment
    return at, began


def expected_spans(golden: Golden) -> dict[int, Expected]:
    """The spans of a golden run, by the position of the event that opens each."""
    at, began = expected_times(golden)
    out: dict[int, Expected] = {}
    steps: dict[str, int] = {}
    tools: dict[str, int] = {}
    running: dict[int, int | None] = {}  # open tool calls: position -> their parent's position
    first = golden.events[0]
    root = Expected(
        1,
        f"invoke_agent {first['payload']['agent']}",
        Span.SPAN_KIND_INTERNAL,
        None,
        at[1],
        None,
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": first["payload"]["agent"]},
    )
    out[1] = root
    for event in golden.events[1:]:
        p, position, ts = event["payload"], event["position"], at[event["position"]]
        kind = event["kind"]
        if kind == "StepStarted":
            parent = steps.get(p.get("parent_step_id"), 1)
            calling = [tool for tool, step in running.items() if step == parent]
            if p.get("parent_step_id") and calling:  # a sub-agent inside its caller's tool call
                parent = calling[-1]
            out[position] = Expected(
                position, f"step {p['name']}", Span.SPAN_KIND_INTERNAL, parent, ts, None, {}
            )
            steps[p["step_id"]] = position
        elif kind == "StepCompleted":
            step = out[steps[p["step_id"]]]
            step.end = ts
            step.error = p["status"] == "failed"
        elif kind == "ModelCalled":
            out[position] = Expected(
                position,
                f"chat {p['model']}",
                Span.SPAN_KIND_CLIENT,
                steps.get(p.get("step_id"), 1),
                began[position],
                ts,
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": p["provider"],
                    "gen_ai.request.model": p["model"],
                    "gen_ai.response.model": p["model"],
                    "gen_ai.usage.input_tokens": p["usage"]["input_tokens"],
                    "gen_ai.usage.output_tokens": p["usage"]["output_tokens"],
                    "gen_ai.response.finish_reasons": [p["finish_reason"]],
                },
            )
        elif kind == "ToolCalled":
            out[position] = Expected(
                position,
                f"execute_tool {p['tool']}",
                Span.SPAN_KIND_INTERNAL,
                steps.get(p.get("step_id"), 1),
                ts,
                None,
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": p["tool"]},
            )
            tools[p["call_id"]] = position
            running[position] = out[position].parent
        elif kind == "ToolReturned":
            tool = out[tools[p["call_id"]]]
            running.pop(tools[p["call_id"]], None)
            tool.end = ts
            tool.error = not p["ok"]
        elif kind in ("RunCompleted", "RunFailed"):
            root.end = ts
            root.error = kind == "RunFailed"
    return out


def value(any_value: Any) -> Any:
    """An OTLP AnyValue as a Python value."""
    which = any_value.WhichOneof("value")
    if which == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, which) if which else None


def attributes(span_or_event: Any) -> dict[str, Any]:
    """A span's (or span event's) attributes as a dict."""
    return {kv.key: value(kv.value) for kv in span_or_event.attributes}


def traces_by_run(receiver: Receiver) -> dict[str, list[Span]]:
    """Received spans grouped by trace id (as the run id they must equal)."""
    out: dict[str, list[Span]] = {}
    for span in receiver.spans():
        out.setdefault(str(UUID(bytes=span.trace_id)), []).append(span)
    return out


def check_trace(golden: Golden, spans: list[Span], *, content: bool) -> None:
    """The received trace of a golden run is the expected one, span by span."""
    expected = expected_spans(golden)
    hashes = {e["position"]: e["hash"] for e in golden.events}
    by_position = {attributes(s)["agentledger.position"]: s for s in spans}
    assert len(by_position) == len(spans), "one span per opening event"
    assert sorted(by_position) == sorted(expected), golden.name
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans), "span ids are unique"
    for position, want in expected.items():
        span = by_position[position]
        attrs = attributes(span)
        where = f"{golden.name} position {position}"
        assert span.name == want.name, where
        assert span.kind == want.kind, where
        assert span.trace_id == UUID(golden.run_id).bytes, where
        assert span.span_id == expected_span_id(golden.run_id, position), where
        if want.parent is None:
            assert span.parent_span_id == b"", where
        else:
            assert span.parent_span_id == expected_span_id(golden.run_id, want.parent), where
        assert attrs["agentledger.run_id"] == golden.run_id, where
        assert attrs["agentledger.event_hash"] == hashes[position], where
        for key, wanted in want.attributes.items():
            assert attrs.get(key) == wanted, f"{where}: {key}"
        assert span.start_time_unix_nano == want.start, where
        if want.end is not None:
            assert span.end_time_unix_nano == want.end, where
        failed = span.status.code == Status.STATUS_CODE_ERROR
        assert failed == want.error, where
        if not content:
            assert not CONTENT_ATTRIBUTES & set(attrs), where
            for event in span.events:
                assert not CONTENT_ATTRIBUTES & set(attributes(event)), where
        for event in span.events:
            event_attrs = attributes(event)
            assert (
                event_attrs["agentledger.event_hash"] == hashes[event_attrs["agentledger.position"]]
            )
            assert span.start_time_unix_nano <= event.time_unix_nano <= span.end_time_unix_nano
    # Nesting: every child lies within its parent.
    for span in spans:
        if span.parent_span_id:
            parent = by_id[span.parent_span_id]
            assert parent.start_time_unix_nano <= span.start_time_unix_nano, span.name
            assert span.start_time_unix_nano <= span.end_time_unix_nano, span.name
            assert span.end_time_unix_nano <= parent.end_time_unix_nano, span.name
    # Every event other than a span's opening or closing one is a span event somewhere.
    opened_or_closed = set(by_position) | {
        attributes(s).get("agentledger.end_position") for s in spans
    }
    as_events = {attributes(e)["agentledger.position"] for s in spans for e in s.events}
    closers = {"RunCompleted", "RunFailed"}
    rest = {
        e["position"]
        for e in golden.events
        if e["position"] not in opened_or_closed and e["kind"] not in closers
    }
    assert rest == as_events, golden.name


def message_texts(golden: Golden) -> set[str]:
    """The longer message contents a golden run holds (what must never leak by default)."""
    texts = set()
    for node in golden.blobs.values():
        if isinstance(node, dict) and isinstance(node.get("message"), dict):
            content = node["message"].get("content")
            if isinstance(content, str) and len(content) >= 12:
                texts.add(content)
    return texts


# Golden runs, span by span ---------------------------------------------------------------------


@pytest.mark.parametrize("name", GOLDEN_RUNS)
def test_each_golden_run_is_received_and_checked_span_by_span(
    name: str, receiver: Receiver, export: Any
) -> None:
    """RUN --format otlp: one protobuf request to /v1/traces holding exactly the run's trace."""
    golden = read_golden(name)
    done = export(golden.run_id[:8], "--format", "otlp", "--endpoint", receiver.url)
    assert done.status == 0, done.err
    assert f"sent 1 run ({len(receiver.spans())} spans) to {receiver.url}" in done.err
    assert receiver.paths == ["/v1/traces"]
    assert receiver.headers[0]["content-type"] == "application/x-protobuf"
    assert len(receiver.requests) == 1
    resource = receiver.requests[0].resource_spans[0]
    resource_attrs = attributes(resource.resource)
    assert resource_attrs["service.name"] == "agentledger"
    assert resource.scope_spans[0].scope.name == "agentledger"
    traces = traces_by_run(receiver)
    assert list(traces) == [golden.run_id]
    check_trace(golden, traces[golden.run_id], content=False)
    for text in message_texts(golden):
        assert text.encode() not in receiver.raw[0], f"{name} leaked message content"


@pytest.mark.parametrize("name", ["tools.jsonl", "pipeline.jsonl", "old_schema_tools.jsonl"])
def test_include_content_adds_the_conversations_and_tool_io(
    name: str, receiver: Receiver, export: Any
) -> None:
    """--include-content: chat spans carry input/output messages, tool spans arguments/results."""
    golden = read_golden(name)
    done = export(
        golden.run_id, "--format", "otlp", "--endpoint", receiver.url, "--include-content"
    )
    assert done.status == 0, done.err
    spans = traces_by_run(receiver)[golden.run_id]
    check_trace(golden, spans, content=True)
    events = {e["position"]: e for e in golden.events}
    for span in spans:
        attrs = attributes(span)
        event = events[attrs["agentledger.position"]]
        if span.name.startswith("chat "):
            sent = json.loads(attrs["gen_ai.input.messages"])
            recorded = golden.conversation(event["payload"]["messages_ref"])
            assert len(sent) == len(recorded)
            for message, original in zip(sent, recorded, strict=True):
                assert message["role"] == original["role"]
                if original["role"] != "tool" and original["content"]:
                    assert message["parts"][0] == {"type": "text", "content": original["content"]}
            output = json.loads(attrs["gen_ai.output.messages"])
            assert output[0]["role"] == "assistant"
            assert output[0]["finish_reason"] == event["payload"]["finish_reason"]
        if span.name.startswith("execute_tool "):
            arguments = json.loads(attrs["gen_ai.tool.call.arguments"])
            assert arguments == event["payload"]["arguments"]
            assert json.loads(attrs["gen_ai.tool.call.result"])["ok"] is True
        if span.parent_span_id == b"":
            assert "gen_ai.input.messages" in attrs
            assert "gen_ai.output.messages" in attrs
    texts = message_texts(golden)
    assert texts
    assert any(text.encode() in receiver.raw[0] for text in texts)


def test_a_tool_span_carries_the_models_tool_call_id(receiver: Receiver, export: Any) -> None:
    """gen_ai.tool.call.id is the id the model gave the call; ours is kept beside it."""
    golden = read_golden("tools.jsonl")
    assert export(golden.run_id, "--format", "otlp", "--endpoint", receiver.url).status == 0
    tool_spans = [attributes(s) for s in receiver.spans() if s.name.startswith("execute_tool")]
    assert tool_spans
    for attrs in tool_spans:
        assert attrs["gen_ai.tool.call.id"] == "call_1"  # what the scripted model asked for
        assert attrs["agentledger.tool_call_id"].startswith("tool-")


def test_re_export_sends_the_same_bytes(receiver: Receiver, export: Any) -> None:
    """Ids and the resource are derived, so exporting a run twice is idempotent."""
    golden = read_golden("reasoning.jsonl")
    for _ in range(2):
        assert export(golden.run_id, "--format", "otlp", "--endpoint", receiver.url).status == 0
    assert receiver.raw[0] == receiver.raw[1]


def test_all_sends_every_run_oldest_first_one_request_each(receiver: Receiver, export: Any) -> None:
    """--all: one request per run; --json reports the endpoint, runs and span count."""
    done = export(
        "--all", "--format", "otlp", "--endpoint", receiver.url.removesuffix("/v1/traces"), "--json"
    )
    assert done.status == 0, done.err
    report = json.loads(done.out)
    assert report["endpoint"] == receiver.url  # a URL without a path gets /v1/traces
    assert sorted(report["run_ids"]) == sorted(read_golden(n).run_id for n in GOLDEN_RUNS)
    assert len(receiver.requests) == len(GOLDEN_RUNS)
    assert report["spans"] == len(receiver.spans())
    for name in GOLDEN_RUNS:
        golden = read_golden(name)
        check_trace(golden, traces_by_run(receiver)[golden.run_id], content=False)


def test_since_selects_by_start_time(receiver: Receiver, export: Any) -> None:
    """--since takes the times `runs --since` takes; nothing selected is no error."""
    done = export("--since", "2026-01-01", "--format", "otlp", "--endpoint", receiver.url)
    assert done.status == 0, done.err
    assert len(receiver.requests) == len(GOLDEN_RUNS)
    later = export("--since", "2100-01-01", "--format", "otlp", "--endpoint", receiver.url)
    assert later.status == 0
    assert "nothing to export: no runs started since 2100-01-01" in later.err
    assert len(receiver.requests) == len(GOLDEN_RUNS)
    bad = export("--since", "soon", "--format", "otlp")
    assert bad.status == 2
    assert "--since 'soon' is not a time" in bad.err


def test_headers_come_from_the_standard_variable_and_are_never_printed(
    receiver: Receiver, export: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_HEADERS reaches the receiver; the secret appears in no output."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cr3t-t0ken")
    golden = read_golden("router.jsonl")
    done = export(golden.run_id, "--format", "otlp", "--endpoint", receiver.url, "--json")
    assert done.status == 0, done.err
    assert receiver.headers[0]["authorization"] == "Bearer s3cr3t-t0ken"
    assert "s3cr3t" not in done.out + done.err


def test_the_standard_endpoint_variables_are_used_without_endpoint(
    receiver: Receiver, export: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT is a base URL that /v1/traces is appended to."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.removesuffix("/v1/traces"))
    golden = read_golden("router.jsonl")
    done = export(golden.run_id, "--format", "otlp")
    assert done.status == 0, done.err
    assert receiver.paths == ["/v1/traces"]


# OTLP JSON -------------------------------------------------------------------------------------


def test_otlp_json_round_trips_into_export_trace_service_requests(
    receiver: Receiver, export: Any, tmp_path: Path
) -> None:
    """--format otlp-json -o FILE: one OTLP JSON line per run, equal to what otlp sends."""
    out = tmp_path / "traces.jsonl"
    done = export("--all", "--format", "otlp-json", "-o", str(out))
    assert done.status == 0, done.err
    assert f"wrote {out}: OTLP JSON, {len(GOLDEN_RUNS)} runs" in done.err
    assert export("--all", "--format", "otlp", "--endpoint", receiver.url).status == 0
    lines = out.read_text("utf-8").splitlines()
    assert len(lines) == len(GOLDEN_RUNS)
    for line, sent in zip(lines, receiver.requests, strict=True):
        tree = json.loads(line)
        span = tree["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        # The OTLP JSON encoding: hex ids (not base64), integer enums, lowerCamelCase names.
        run_id = str(UUID(hex=span["traceId"]))
        assert span["traceId"] == UUID(run_id).hex
        assert len(span["spanId"]) == 16
        assert span["kind"] == Span.SPAN_KIND_INTERNAL
        # Through protobuf's own json_format (its bytes fields are base64) ...
        for item in tree["resourceSpans"][0]["scopeSpans"][0]["spans"]:
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in item:
                    item[key] = base64_of_hex(item[key])
        parsed = json_format.ParseDict(tree, ExportTraceServiceRequest())
        assert parsed == sent
        # ... and through the bridge's reader.
        assert otel.parse_otlp_json(line) == sent


def base64_of_hex(text: str) -> str:
    """A hex id as protobuf's JSON mapping writes bytes."""
    import base64

    return base64.b64encode(bytes.fromhex(text)).decode()


def test_otlp_json_to_stdout_and_content_flag(export: Any) -> None:
    """-o - writes the line to stdout; without --include-content no message text is in it."""
    golden = read_golden("pipeline.jsonl")
    plain = export(golden.run_id, "--format", "otlp-json", "-o", "-")
    assert plain.status == 0, plain.err
    assert len(plain.out.splitlines()) == 1
    texts = message_texts(golden)
    assert not any(json.dumps(t)[1:-1] in plain.out for t in texts)
    full = export(golden.run_id, "--format", "otlp-json", "-o", "-", "--include-content")
    assert full.status == 0
    request = otel.parse_otlp_json(full.out)
    names = {
        kv.key
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
        for kv in s.attributes
    }
    assert "gen_ai.input.messages" in names


# Failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        ("ftp://127.0.0.1/v1/traces", "must be an http:// or https:// URL (scheme was 'ftp')"),
        ("127.0.0.1:4318", "must be an http:// or https:// URL"),
        ("http://", "has no host"),
        ("http://127.0.0.1:99999/v1/traces", "not a valid URL"),
        ("", "is empty"),
        ("http://collector:p4ss@127.0.0.1:4318/v1/traces", "must not carry credentials"),
    ],
)
def test_a_bad_endpoint_is_refused_before_anything_is_sent(
    endpoint: str, said: str, export: Any
) -> None:
    """Exit 2 naming what is wrong; a credential in the URL is never echoed."""
    golden = read_golden("router.jsonl")
    done = export(golden.run_id, "--format", "otlp", "--endpoint", endpoint)
    assert done.status == 2
    assert said in done.err
    assert len(done.err.strip().splitlines()) == 1
    assert "p4ss" not in done.err


@pytest.mark.parametrize(
    ("status", "reason"), [(400, "Bad Request"), (500, "Internal Server Error")]
)
def test_a_refusing_receiver_exits_1_with_its_status(
    status: int, reason: str, receiver: Receiver, export: Any
) -> None:
    """The receiver's status, reason and the start of its answer are reported; exit 1."""
    receiver.status = status
    receiver.answer = b"spans rejected: bad things\nsecond line"
    golden = read_golden("router.jsonl")
    done = export(golden.run_id, "--format", "otlp", "--endpoint", receiver.url + "?token=abc")
    assert done.status == 1
    assert f"HTTP {status} {reason}" in done.err
    assert "spans rejected: bad things second line" in done.err
    assert golden.run_id in done.err
    assert "token=abc" not in done.err
    assert done.err.startswith("agentledger: export failed: ")


def test_a_failure_midway_through_all_says_how_many_were_sent(
    receiver: Receiver, export: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--all stops at the first refused run and says how many went before it."""
    real = otel.run_spans
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            receiver.status, receiver.answer = 400, b"no more"
        return real(*args, **kwargs)

    monkeypatch.setattr(otel, "run_spans", flaky)
    done = export("--all", "--format", "otlp", "--endpoint", receiver.url)
    assert done.status == 1
    assert "HTTP 400" in done.err
    assert f"2 runs of {len(GOLDEN_RUNS)} had been sent before it" in done.err
    assert len(receiver.requests) == 2


def test_nothing_listening_exits_1_saying_it_could_not_connect(export: Any) -> None:
    """A closed loopback port: the SDK retries until --timeout, then we say so."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    golden = read_golden("router.jsonl")
    done = export(
        golden.run_id,
        "--format",
        "otlp",
        "--endpoint",
        f"http://127.0.0.1:{port}/v1/traces",
        "--timeout",
        "0.5",
    )
    assert done.status == 1
    assert "could not connect" in done.err
    assert f"http://127.0.0.1:{port}/v1/traces" in done.err


def test_a_missing_run_is_an_error(receiver: Receiver, export: Any) -> None:
    """An unknown run id: exit 2, nothing sent."""
    done = export("ffffffff", "--format", "otlp", "--endpoint", receiver.url)
    assert done.status == 2
    assert "no run matches 'ffffffff'" in done.err
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["RUN", "--all", "--format", "otlp"], "give one of RUN, --all or --since"),
        (["--format", "otlp"], "needs RUN, --all, --since TIME or --tag T"),
        (["RUN", "--format", "otlp", "-o", "x.json"], "to write a file use --format otlp-json"),
        (["RUN", "--format", "otlp-json"], "--format otlp-json needs -o FILE"),
        (
            ["RUN", "--format", "otlp-json", "-o", "x", "--endpoint", "http://127.0.0.1:1"],
            "--endpoint is for --format otlp",
        ),
        (["RUN", "--format", "otlp", "--checkpoint", "c"], "--checkpoint is for --format jsonl"),
        (["RUN", "-o", "x.jsonl", "--all"], "give one of RUN, --all or --since/--tag"),
        (["RUN", "-o", "x.jsonl", "--include-content"], "--include-content is for --format"),
        (["--all", "-o", "x.jsonl"], "give -o DIR (a name without .jsonl)"),
        (["-o", "x.jsonl"], "export needs RUN"),
        (["RUN"], "export needs -o FILE"),
        (["RUN", "--format", "otlp", "--timeout", "0"], "--timeout must be more than 0"),
    ],
)
def test_option_combinations_are_checked(
    argv: list[str], said: str, export: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each wrong combination exits 2 with one line saying what to do instead (writing nothing)."""
    monkeypatch.chdir(tmp_path)
    run_id = read_golden("router.jsonl").run_id
    done = export(*[run_id if a == "RUN" else a for a in argv])
    assert done.status == 2
    assert said in done.err
    assert list(tmp_path.iterdir()) == []


def test_a_missing_extra_gives_a_one_line_install_hint(
    export: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the [otel] packages, the otlp formats say how to install them, in one line."""
    for name in list(sys.modules):
        if name.startswith("agentledger.agents.integrations"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    golden = read_golden("router.jsonl")
    done = export(golden.run_id, "--format", "otlp")
    assert done.status == 2
    assert done.err == f"agentledger: {_otel_command.INSTALL_HINT}\n"
    assert "pip install 'agentledger[otel]'" in done.err
    with pytest.raises(ImportError, match=r"agentledger\[otel\]"):
        import agentledger.agents.integrations.otel  # noqa: F401


def test_the_cli_hint_is_the_bridges_own() -> None:
    """The CLI says the same words the bridge raises with."""
    assert _otel_command.INSTALL_HINT == otel.INSTALL_HINT


# A run that failed midway ----------------------------------------------------------------------


class ManualClock:
    """A clock that stands still until the test moves it, as a batch's commit stamps look."""

    def __init__(self) -> None:
        self.moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def now(self) -> str:
        """The current (fake) time."""
        return format_timestamp(self.moment)

    def advance(self, seconds: float) -> None:
        """Move time on."""
        self.moment += dt.timedelta(seconds=seconds)


def record_a_crash(ledger: Ledger, clock: ManualClock) -> None:
    """A run whose tool call never returns: the step and the run fail."""
    with ledger.record_run("crashy", input="q") as run, run.step("work") as step:
        clock.advance(5)
        run.model_call(
            provider="openai",
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "q"}],
            response={"role": "assistant", "content": "", "tool_calls": []},
            usage={"input_tokens": 3, "output_tokens": 1},
            latency_ms=250.0,
            step_id=step,
            finish_reason="tool_calls",
            params={"temperature": 0.2, "max_tokens": 64},
        )
        run.tool_call("lookup", {"q": 1}, step_id=step)
        raise RuntimeError("tool crashed")


def test_a_failed_run_marks_its_spans_and_closes_what_never_closed(receiver: Receiver) -> None:
    """RunFailed: the root is an error; a tool call that never returned ends with its step."""
    clock = ManualClock()
    ledger = Ledger.open("memory://", clock=clock)
    with pytest.raises(RuntimeError, match="tool crashed"):
        record_a_crash(ledger, clock)
    [info] = ledger.runs()
    run_id = info.run_id
    summary = otel.export_runs(ledger, [run_id], endpoint=receiver.url)
    assert summary.spans == 4
    spans = {s.name: s for s in receiver.spans()}
    root, step_span = spans["invoke_agent crashy"], spans["step work"]
    chat, tool = spans["chat gpt-4o-mini"], spans["execute_tool lookup"]
    assert root.status.code == Status.STATUS_CODE_ERROR
    assert attributes(root)["error.type"] == "RuntimeError"
    assert root.status.message == "tool crashed"
    assert step_span.status.code == Status.STATUS_CODE_ERROR
    assert attributes(tool)["agentledger.unfinished"] is True
    assert tool.end_time_unix_nano == step_span.end_time_unix_nano
    chat_attrs = attributes(chat)
    assert chat_attrs["gen_ai.request.temperature"] == 0.2
    assert chat_attrs["gen_ai.request.max_tokens"] == 64
    # The step's events were stamped together when it failed; the call's latency places it.
    assert chat.start_time_unix_nano == step_span.start_time_unix_nano
    assert chat.end_time_unix_nano - chat.start_time_unix_nano == 250_000_000
    ledger.close()


def test_progress_shows_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``exporting runs: i/N`` on one line for several runs on a TTY; nothing otherwise."""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    for done in (1, 2, 3):
        _otel_command.show_progress(done, 3)
    assert tty.getvalue() == ("\rexporting runs: 1/3\rexporting runs: 2/3\rexporting runs: 3/3\n")
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    _otel_command.show_progress(1, 3)
    assert pipe.getvalue() == ""


# Packaging and docs ----------------------------------------------------------------------------


def test_the_core_install_does_not_need_the_extra() -> None:
    """OpenTelemetry is an optional extra (and in dev); the CLI imports it only when exporting."""
    import subprocess
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert not [d for d in project["dependencies"] if d.startswith("opentelemetry")]
    extras = project["optional-dependencies"]
    for package in ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"):
        assert any(d.startswith(package) for d in extras["otel"])
        assert any(d.startswith(package) for d in extras["dev"])
    probe = (
        "import sys, agentledger.cli; agentledger.cli.build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT.parent
    )
    assert done.stdout.strip() == "[]"


def test_the_docs_page_has_runnable_examples_and_the_readme_links_it() -> None:
    """docs/opentelemetry.md shows the export in Python (tests/test_readme.py runs the blocks)."""
    page = (ROOT / "docs" / "opentelemetry.md").read_text("utf-8")
    assert page.count("```python") >= 3
    assert "--format otlp" in page
    assert "](docs/opentelemetry.md)" in (ROOT / "README.md").read_text("utf-8")


def test_a_long_run_goes_in_several_requests(
    receiver: Receiver, export: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More spans than BATCH_SPANS: several requests that together hold the whole trace."""
    monkeypatch.setattr(otel, "BATCH_SPANS", 5)
    golden = read_golden("pipeline.jsonl")
    done = export(golden.run_id, "--format", "otlp", "--endpoint", receiver.url)
    assert done.status == 0, done.err
    spans = receiver.spans()
    assert len(receiver.requests) == -(-len(spans) // 5) > 1
    assert all(len(r.resource_spans[0].scope_spans[0].spans) <= 5 for r in receiver.requests)
    check_trace(golden, spans, content=False)


def test_latencies_place_the_calls_of_a_step_committed_at_once() -> None:
    """A step's events share its commit time; model and tool latencies lay the calls end to end."""
    clock = ManualClock()
    ledger = Ledger.open("memory://", clock=clock)
    with ledger.record_run("timed", input="q") as run, run.step("work") as step:
        clock.advance(10)  # every event of the step is stamped at its commit, 10 s in
        run.model_call(
            provider="anthropic",
            model="claude-x",
            messages=[{"role": "user", "content": "q"}],
            response={"role": "assistant", "content": "ok"},
            latency_ms=420.0,
            step_id=step,
        )
        run.tool("lookup", {"q": 1}, result={"hit": True}, latency_ms=100.0, step_id=step)
    spans = {s.name: s for s in otel.run_spans(ledger, run.run_id)}
    step_span, chat, tool = spans["step work"], spans["chat claude-x"], spans["execute_tool lookup"]
    assert chat.end_time - chat.start_time == milliseconds(420)
    assert tool.end_time - tool.start_time == milliseconds(100)
    assert chat.end_time == tool.start_time
    assert step_span.start_time == chat.start_time
    assert step_span.end_time == tool.end_time == nanos("2026-01-01T00:00:10.000000Z")
    root = spans["invoke_agent timed"]
    assert root.start_time <= step_span.start_time
    assert step_span.end_time <= root.end_time
    ledger.close()


def test_a_sub_agents_steps_run_inside_the_tool_call_that_started_them(
    receiver: Receiver, export: Any
) -> None:
    """The tools agent's ask_scout call holds the scout's steps; their calls nest below them."""
    golden = read_golden("tools.jsonl")
    assert export(golden.run_id, "--format", "otlp", "--endpoint", receiver.url).status == 0
    spans = receiver.spans()
    [ask] = [s for s in spans if s.name == "execute_tool ask_scout"]
    scout_steps = [s for s in spans if s.name == "step agent:scout:turn"]
    assert len(scout_steps) == 2
    assert all(s.parent_span_id == ask.span_id for s in scout_steps)
    [find] = [s for s in spans if s.name == "execute_tool find_pois"]
    assert find.parent_span_id == scout_steps[0].span_id
