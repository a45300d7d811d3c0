"""OpenTelemetry export of recorded runs, following the GenAI semantic conventions.

`export_runs` sends runs as traces over OTLP/HTTP (protobuf) through the OpenTelemetry SDK's
OTLP exporter, one request per run; `trace_request` builds the ``ExportTraceServiceRequest`` of
some runs and `otlp_json` writes it in the OTLP JSON encoding for offline hand-over
(`parse_otlp_json` reads it back). How a run maps to spans is described in `run_spans` (module
``_otel_trace``): one trace per run, whose trace id is the run id, with ``invoke_agent``,
step, ``chat`` and ``execute_tool`` spans.

Needs the optional extra: ``pip install 'agentledger[otel]'``. Importing this module without it
raises `ImportError` whose message is `INSTALL_HINT`. Reads the ledger only; never writes to it.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agentledger.agents.integrations._otel_trace import (
    INSTALL_HINT,
    default_resource,
    run_spans,
    span_id,
    trace_id,
    trace_request,
)
from agentledger.ledger import Ledger

try:
    import requests
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.sdk.trace.export import SpanExportResult
except ImportError as missing:  # pragma: no cover - exercised by hiding the packages
    raise ImportError(INSTALL_HINT, name=missing.name) from missing

__all__ = [
    "DEFAULT_ENDPOINT",
    "INSTALL_HINT",
    "ExportSummary",
    "OtlpEndpointError",
    "OtlpExportError",
    "default_resource",
    "export_runs",
    "otlp_json",
    "parse_otlp_json",
    "resolve_endpoint",
    "run_spans",
    "shown_endpoint",
    "span_id",
    "trace_id",
    "trace_request",
]

DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
"""Where OTLP/HTTP traces go when neither an endpoint nor the standard variables say."""
TRACES_PATH = "/v1/traces"
BATCH_SPANS = 512
"""The most spans one request carries (a long run, with contents, stays a modest request)."""
_ERROR_BODY_CHARS = 200


class OtlpEndpointError(ValueError):
    """An OTLP endpoint that is not an http(s) URL we may send to."""


class OtlpExportError(RuntimeError):
    """The receiver refused a run's trace, or could not be reached.

    `status` is the receiver's HTTP status (None when there was no answer), `reason` its reason
    phrase or what went wrong, `body` the start of its answer, `run_id` the run being sent and
    `sent` how many runs had been accepted before it.
    """

    def __init__(
        self,
        endpoint: str,
        run_id: str,
        *,
        status: int | None,
        reason: str,
        body: str = "",
        sent: int = 0,
    ) -> None:
        self.endpoint = endpoint
        self.run_id = run_id
        self.status = status
        self.reason = reason
        self.body = body
        self.sent = sent
        answer = f"HTTP {status} {reason}".rstrip() if status is not None else reason
        detail = f": {body}" if body else ""
        super().__init__(f"{endpoint} refused run {run_id} ({answer}){detail}")


# Endpoints -------------------------------------------------------------------------------------


def resolve_endpoint(endpoint: str | None, env: Mapping[str, str] | None = None) -> str:
    """The OTLP/HTTP traces URL to send to: `endpoint`, else the standard variables, else local.

    A URL with no path (``http://collector:4318``) gets ``/v1/traces``; any other path is used as
    given. Without `endpoint`, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is the full URL and
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` a base URL that ``/v1/traces`` is appended to. Raises
    `OtlpEndpointError` for anything but an http(s) URL with a host, or one carrying credentials
    (headers go in ``OTEL_EXPORTER_OTLP_HEADERS``); the message never repeats the URL.
    """
    env = os.environ if env is None else env
    if endpoint is not None:
        return _checked(endpoint, "--endpoint", append=True)
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return _checked(
            env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        )
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        base = _checked(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "OTEL_EXPORTER_OTLP_ENDPOINT")
        parts = urlsplit(base)
        return urlunsplit(parts._replace(path=parts.path.rstrip("/") + TRACES_PATH))
    return DEFAULT_ENDPOINT


def _checked(url: str, source: str, *, append: bool = False) -> str:
    text = url.strip()
    if not text:
        raise OtlpEndpointError(
            f"{source} is empty: give an http(s) URL such as {DEFAULT_ENDPOINT}"
        )
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise OtlpEndpointError(f"{source} is not a valid URL (bad host or port)") from None
    if parts.scheme not in ("http", "https"):
        shown = f"{parts.scheme!r}" if parts.scheme else "none"
        raise OtlpEndpointError(
            f"{source} must be an http:// or https:// URL (scheme was {shown}); "
            f"OTLP/HTTP collectors listen on e.g. {DEFAULT_ENDPOINT}"
        )
    if not parts.hostname:
        raise OtlpEndpointError(f"{source} has no host: give e.g. {DEFAULT_ENDPOINT}")
    if parts.username is not None or parts.password is not None:
        raise OtlpEndpointError(
            f"{source} must not carry credentials (user:password@host): pass them as headers "
            "in OTEL_EXPORTER_OTLP_HEADERS, e.g. Authorization=Basic%20..."
        )
    if port == 0:
        raise OtlpEndpointError(f"{source} has port 0")
    if append and parts.path in ("", "/"):
        parts = parts._replace(path=TRACES_PATH)
    return urlunsplit(parts)


def shown_endpoint(url: str) -> str:
    """`url` as it is safe to print: scheme, host, port and path (no query, no fragment)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="", fragment=""))


# OTLP JSON -------------------------------------------------------------------------------------

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def otlp_json(request: ExportTraceServiceRequest) -> str:
    """`request` in the OTLP JSON encoding, on one line.

    That is protobuf's JSON mapping (lowerCamelCase names, 64-bit integers as strings) with the
    OTLP exceptions: trace and span ids as hex, not base64, and enums as integers. One such line
    per request is what the OpenTelemetry Collector's ``otlpjsonfile`` receiver reads.
    """
    tree = json_format.MessageToDict(request, use_integers_for_enums=True)
    _recode_ids(tree, lambda raw: raw.hex(), _b64decode)
    return json.dumps(tree, ensure_ascii=False, separators=(",", ":"))


def parse_otlp_json(text: str) -> ExportTraceServiceRequest:
    """One OTLP JSON line (as `otlp_json` writes) back into an ``ExportTraceServiceRequest``."""
    tree = json.loads(text)
    _recode_ids(tree, _b64encode, bytes.fromhex)
    request = ExportTraceServiceRequest()
    json_format.ParseDict(tree, request)
    return request


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text)


def _b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _recode_ids(node: Any, encode: Callable[[bytes], str], decode: Callable[[str], bytes]) -> None:
    """Rewrite every id field of a JSON tree in place: ``decode`` the text, ``encode`` the bytes."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = encode(decode(value))
            else:
                _recode_ids(value, encode, decode)
    elif isinstance(node, list):
        for item in node:
            _recode_ids(item, encode, decode)


# Sending ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportSummary:
    """What `export_runs` sent: to which endpoint, which runs and how many spans."""

    endpoint: str
    run_ids: tuple[str, ...]
    spans: int


class _WatchedSession(requests.Session):
    """A requests session that remembers the receiver's last answer (for error messages)."""

    def __init__(self) -> None:
        super().__init__()
        self.status: int | None = None
        self.reason = ""
        self.body = ""
        self.failure: Exception | None = None

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        self.status, self.reason, self.body, self.failure = None, "", "", None
        try:
            response = super().request(*args, **kwargs)
        except requests.RequestException as e:
            self.failure = e
            raise
        self.status = response.status_code
        self.reason = response.reason or ""
        if not response.ok:
            text = response.text.strip().replace("\n", " ")
            self.body = text[:_ERROR_BODY_CHARS] + ("..." if len(text) > _ERROR_BODY_CHARS else "")
        return response


def export_runs(
    ledger: Ledger,
    run_ids: Sequence[str],
    *,
    endpoint: str | None = None,
    include_content: bool = False,
    timeout: float = 10.0,
    progress: Callable[[int, int, str], None] | None = None,
) -> ExportSummary:
    """Send each run's trace over OTLP/HTTP (protobuf), one request per run, in order.

    A run of more than `BATCH_SPANS` spans goes in several requests of at most that many.

    `endpoint` goes through `resolve_endpoint`; headers come from the standard
    ``OTEL_EXPORTER_OTLP_HEADERS`` (or ``..._TRACES_HEADERS``) variable, read by the exporter.
    `progress` is called with (runs done, runs in all, run id) after each accepted run. Raises
    `OtlpEndpointError` for a bad endpoint and `OtlpExportError` (with the receiver's status)
    at the first run the receiver does not accept; the SDK retries 429/502/503/504 and refused
    connections until `timeout` seconds have passed.
    """
    url = resolve_endpoint(endpoint)
    session = _WatchedSession()
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout, session=session)
    total = 0
    try:
        for done, run_id in enumerate(run_ids, start=1):
            spans = run_spans(ledger, run_id, include_content=include_content)
            for start in range(0, len(spans), BATCH_SPANS):
                batch = spans[start : start + BATCH_SPANS]
                if exporter.export(batch) is not SpanExportResult.SUCCESS:
                    raise _refused(session, url, run_id, done - 1)
            total += len(spans)
            if progress is not None:
                progress(done, len(run_ids), run_id)
    finally:
        session.close()
    return ExportSummary(shown_endpoint(url), tuple(run_ids), total)


def _refused(session: _WatchedSession, url: str, run_id: str, sent: int) -> OtlpExportError:
    shown = shown_endpoint(url)
    if session.status is not None:
        return OtlpExportError(
            shown,
            run_id,
            status=session.status,
            reason=session.reason,
            body=session.body,
            sent=sent,
        )
    failure = session.failure
    if isinstance(failure, requests.Timeout):
        reason = "no answer in time (timed out)"
    elif isinstance(failure, requests.ConnectionError):
        reason = "could not connect (is a collector listening there?)"
    elif failure is not None:
        reason = f"request failed ({type(failure).__name__})"
    else:
        reason = "the exporter gave up (see the OpenTelemetry log above)"
    return OtlpExportError(shown, run_id, status=None, reason=reason, sent=sent)
