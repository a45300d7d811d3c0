"""A loopback model server speaking the OpenAI and Anthropic wire formats, for tests and benches.

`LoopbackServer` listens on ``127.0.0.1`` (an ephemeral port), in a thread of the current
process, and answers ``POST /v1/chat/completions`` as OpenAI's Chat Completions API and
``POST /v1/messages`` as Anthropic's Messages API, in JSON or, when the request asks for a
stream, as Server-Sent Events in each vendor's real wire format (OpenAI: ``data:`` chunks, a
usage chunk when ``stream_options.include_usage``, ``data: [DONE]``; Anthropic: ``event:``
``message_start``, ``content_block_start``/``_delta``/``_stop``, ``message_delta``,
``message_stop``). So the real ``openai`` and ``anthropic`` SDKs can be pointed at it
(``base_url=server.openai_url`` / ``server.anthropic_url``) by tests, benchmarks and offline
examples.

Answers are scripted: queue `Reply` objects (text, tool calls, an error status, delays, a stream
cut short); with the queue empty, the server asks its ``responder`` (default: echo the last user
message). Every request is kept in `requests`. It makes no outbound connection and records
nothing; it is a fake for this process, not a server to expose.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["LoopbackServer", "ReceivedRequest", "Reply", "ToolCallReply", "echo"]

CREATED = 1_763_000_000
"""The ``created`` timestamp of every answer (fixed: answers are deterministic)."""
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class ToolCallReply:
    """A tool call the scripted answer makes (``id`` defaults to one numbered per answer)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    ``text`` and ``tool_calls`` make the answer; a ``status`` of 400 or more answers an error
    with message ``error`` instead (``{api_key}`` in it is replaced by the key the request
    carried, as some servers echo it). ``delay_s`` waits before answering; a stream sends its
    text ``chunk_chars`` characters per event, ``chunk_delay_s`` apart, and with
    ``fail_after_chunks`` drops the connection after that many events.
    """

    text: str = ""
    tool_calls: Sequence[ToolCallReply] = ()
    status: int = 200
    error: str = "scripted error"
    delay_s: float = 0.0
    chunk_chars: int = 8
    chunk_delay_s: float = 0.0
    fail_after_chunks: int | None = None
    model: str | None = None


@dataclass(frozen=True)
class ReceivedRequest:
    """A request the server received: path, headers (lower-case names) and JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def echo(vendor: str, body: Mapping[str, Any]) -> Reply:
    """The default responder: ``echo: <the last user message's text>``."""
    del vendor
    text = ""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            text = content if isinstance(content, str) else _text_of(content)
            break
    return Reply(text=f"echo: {text}")


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


Responder = Callable[[str, Mapping[str, Any]], Reply]
"""Answers a request when no reply is queued: (``"openai"`` or ``"anthropic"``, body)."""


class LoopbackServer:
    """An OpenAI- and Anthropic-compatible HTTP server on loopback (see the module docstring).

    Use as a context manager (``with LoopbackServer() as server:``) or `start`/`stop`.
    ``delay_s`` is added before every answer (a model's think time).
    """

    def __init__(
        self,
        replies: Sequence[Reply] = (),
        *,
        responder: Responder = echo,
        delay_s: float = 0.0,
    ) -> None:
        self._queue: list[Reply] = list(replies)
        self._responder = responder
        self.delay_s = delay_s
        self.requests: list[ReceivedRequest] = []
        self._lock = threading.Lock()
        self._answered = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # Life ----------------------------------------------------------------------------------

    def start(self) -> LoopbackServer:
        """Listen on an ephemeral loopback port and serve in a daemon thread."""
        if self._server is not None:
            return self
        handler = type("_Handler", (_Handler,), {"loopback": self})
        server = _Server(("127.0.0.1", 0), handler)
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket (a refused connection from then on)."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the server must be started)."""
        if self._server is None:
            msg = "the loopback server is not started: use start() or a with block"
            raise RuntimeError(msg)
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def openai_url(self) -> str:
        """The ``base_url`` for ``openai.OpenAI``: ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    @property
    def anthropic_url(self) -> str:
        """The ``base_url`` for ``anthropic.Anthropic``: ``http://127.0.0.1:PORT``."""
        return self.url

    # Script --------------------------------------------------------------------------------

    def reply(self, *replies: Reply) -> LoopbackServer:
        """Queue answers for the next requests, in order."""
        with self._lock:
            self._queue.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """How many queued replies have not been sent yet."""
        with self._lock:
            return len(self._queue)

    def _next(
        self, vendor: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, Reply]:
        with self._lock:
            self.requests.append(ReceivedRequest(path, headers, body))
            self._answered += 1
            number = self._answered
            queued = self._queue.pop(0) if self._queue else None
        return number, queued if queued is not None else self._responder(vendor, body)


class _Server(ThreadingHTTPServer):
    """The listening server: a thread per connection, quiet when a client drops one."""

    daemon_threads = True
    request_queue_size = 256  # many clients connecting at once (100 concurrent async runs)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore a connection the client closed or reset (SDKs close streams they finished)."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One connection's requests (HTTP/1.1 keep-alive; streams use chunked encoding)."""

    protocol_version = "HTTP/1.1"
    loopback: LoopbackServer

    def setup(self) -> None:
        """Send each write at once (no Nagle delay between an answer's small writes)."""
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        """Quiet: tests and benches read `LoopbackServer.requests` instead."""

    def do_POST(self) -> None:
        """Answer a Chat Completions or Messages request."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        vendor = (
            "openai"
            if path.endswith("/chat/completions")
            else "anthropic"
            if path.endswith("/messages")
            else None
        )
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if vendor is None or not isinstance(body, dict):
            self._json(404 if vendor is None else 400, {"error": {"message": "not found"}})
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        number, reply = self.loopback._next(vendor, path, headers, body)
        delay = reply.delay_s + self.loopback.delay_s
        if delay > 0:
            time.sleep(delay)
        if reply.status >= 400:
            self._error(vendor, reply, headers)
            return
        model = reply.model or str(body.get("model") or "loopback")
        answer: _OpenAIAnswer | _AnthropicAnswer
        if vendor == "openai":
            answer = _OpenAIAnswer(reply, body, model, number)
        else:
            answer = _AnthropicAnswer(reply, body, model, number)
        if body.get("stream") is True:
            self._stream(answer.events(), reply)
        else:
            self._json(200, answer.json())

    def _error(self, vendor: str, reply: Reply, headers: Mapping[str, str]) -> None:
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        message = reply.error.replace("{api_key}", key)
        if vendor == "openai":
            body: dict[str, Any] = {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key" if reply.status == 401 else None,
                }
            }
        else:
            kind = _ANTHROPIC_ERRORS.get(reply.status, "api_error")
            body = {"type": "error", "error": {"type": kind, "message": message}}
        self._json(reply.status, body, {"x-should-retry": "false"})

    def _json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_loopback")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: list[bytes], reply: Reply) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", "req_loopback")
        self.end_headers()
        for number, event in enumerate(events):
            if reply.fail_after_chunks is not None and number >= reply.fail_after_chunks:
                self.wfile.flush()
                self.close_connection = True
                self.connection.close()
                return
            if number and reply.chunk_delay_s > 0:
                time.sleep(reply.chunk_delay_s)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _tokens(value: Any) -> int:
    """A rough token count (four characters a token), at least one."""
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


class _OpenAIAnswer:
    """A reply in the Chat Completions wire format."""

    def __init__(self, reply: Reply, body: Mapping[str, Any], model: str, number: int) -> None:
        self.reply = reply
        self.body = body
        self.model = model
        self.id = f"chatcmpl-loopback-{number}"
        self.calls: list[dict[str, Any]] = [
            {
                "id": call.id or f"call_{number}_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
            }
            for index, call in enumerate(reply.tool_calls)
        ]
        prompt = _tokens(body.get("messages"))
        completion = max(1, (len(reply.text) + sum(len(str(c)) for c in self.calls)) // 4)
        self.usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        self.finish = "tool_calls" if self.calls else "stop"

    def _head(self, kind: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": "fp_loopback",
        }

    def json(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.reply.text or (None if self.calls else ""),
            "refusal": None,
        }
        if self.calls:
            message["tool_calls"] = self.calls
        return {
            **self._head("chat.completion"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": self.finish, "logprobs": None}
            ],
            "usage": self.usage,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            **self._head("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    def events(self) -> list[bytes]:
        size = self.reply.chunk_chars
        out = [self._chunk({"role": "assistant", "content": "", "refusal": None})]
        out += [self._chunk({"content": piece}) for piece in _pieces(self.reply.text, size)]
        for index, call in enumerate(self.calls):
            function = call["function"]
            opening = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            out.append(self._chunk({"tool_calls": [opening]}))
            for piece in _pieces(function["arguments"], size):
                fragment = {"index": index, "function": {"arguments": piece}}
                out.append(self._chunk({"tool_calls": [fragment]}))
        out.append(self._chunk({}, self.finish))
        options = self.body.get("stream_options")
        if isinstance(options, Mapping) and options.get("include_usage"):
            usage = {**self._head("chat.completion.chunk"), "choices": [], "usage": self.usage}
            out.append(b"data: " + json.dumps(usage).encode() + b"\n\n")
        out.append(b"data: [DONE]\n\n")
        return out


class _AnthropicAnswer:
    """A reply in the Messages wire format."""

    def __init__(self, reply: Reply, body: Mapping[str, Any], model: str, number: int) -> None:
        self.reply = reply
        self.model = model
        self.id = f"msg_loopback_{number}"
        self.blocks: list[dict[str, Any]] = []
        if reply.text or not reply.tool_calls:
            self.blocks.append({"type": "text", "text": reply.text})
        for index, call in enumerate(reply.tool_calls):
            self.blocks.append(
                {
                    "type": "tool_use",
                    "id": call.id or f"toolu_{number}_{index}",
                    "name": call.name,
                    "input": dict(call.arguments),
                }
            )
        self.input_tokens = _tokens([body.get("system"), body.get("messages")])
        self.output_tokens = max(1, len(json.dumps(self.blocks)) // 4)
        self.stop = "tool_use" if reply.tool_calls else "end_turn"

    def _message(self, content: list[Any], stop: str | None, output: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": output,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    def json(self) -> dict[str, Any]:
        return self._message(self.blocks, self.stop, self.output_tokens)

    def events(self) -> list[bytes]:
        def event(kind: str, data: dict[str, Any]) -> bytes:
            payload = json.dumps({"type": kind, **data}).encode()
            return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"

        size = self.reply.chunk_chars
        out = [event("message_start", {"message": self._message([], None, 1)})]
        for index, block in enumerate(self.blocks):
            if block["type"] == "text":
                opening: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], size)]
            else:
                opening = {**block, "input": {}}
                arguments = json.dumps(block["input"])
                deltas = [
                    {"type": "input_json_delta", "partial_json": p}
                    for p in _pieces(arguments, size)
                ]
            out.append(event("content_block_start", {"index": index, "content_block": opening}))
            if index == 0:
                out.append(event("ping", {}))
            out += [event("content_block_delta", {"index": index, "delta": d}) for d in deltas]
            out.append(event("content_block_stop", {"index": index}))
        out.append(
            event(
                "message_delta",
                {
                    "delta": {"stop_reason": self.stop, "stop_sequence": None},
                    "usage": {"output_tokens": self.output_tokens},
                },
            )
        )
        out.append(event("message_stop", {}))
        return out
