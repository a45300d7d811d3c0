"""``export --format otlp|otlp-json``: runs as OpenTelemetry traces (GenAI semantic conventions).

``otlp`` sends each selected run over OTLP/HTTP (protobuf) to ``--endpoint`` (else the standard
``OTEL_EXPORTER_OTLP_*`` variables, else a local collector); ``otlp-json`` writes the same
requests in the OTLP JSON encoding, one line per run, for offline hand-over. The mapping lives in
`agentledger.agents.integrations.otel`, which needs the ``[otel]`` extra: without it this says
how to install it in one line. Headers (API keys) come only from ``OTEL_EXPORTER_OTLP_HEADERS``;
nothing here stores or prints them, and an endpoint is printed without its query.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType

from agentledger.cli._common import CliError, open_ledger, parse_time, plural, resolve_run
from agentledger.ledger import Ledger

__all__ = ["add_arguments", "cmd_export_otel", "refuse_otel_options"]

FORMATS = ("jsonl", "otlp", "otlp-json")
INSTALL_HINT = "OpenTelemetry export needs the otel extra: pip install 'agentledger[otel]'"
"""Said when the extra is missing (the same words as the bridge's own ``INSTALL_HINT``)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The export options of the OpenTelemetry formats."""
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="jsonl",
        help="jsonl: the self-contained export file (default); otlp: send the runs as "
        "OpenTelemetry traces over OTLP/HTTP; otlp-json: write those traces as OTLP JSON lines "
        "(-o FILE). Both otlp formats need: pip install 'agentledger[otel]'",
    )
    p.add_argument("--all", action="store_true", help="every run, oldest first (not RUN)")
    p.add_argument(
        "--since",
        metavar="TIME",
        help="the runs started at or after TIME: 2026-01-31, 2026-01-31T09:00+01:00, 2h, 3d "
        "(not RUN; with --tag, both)",
    )
    p.add_argument("--tag", metavar="TAG", help="the runs carrying TAG (not RUN)")
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="otlp: the collector's OTLP/HTTP traces URL (a URL without a path gets /v1/traces; "
        "default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, $OTEL_EXPORTER_OTLP_ENDPOINT, else "
        "http://localhost:4318/v1/traces); headers such as API keys only via "
        "$OTEL_EXPORTER_OTLP_HEADERS",
    )
    p.add_argument(
        "--include-content",
        action="store_true",
        help="otlp formats: also export message contents, tool arguments and results, plans, "
        "world-state patches and the answer (off by default: they may hold personal data)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="otlp: how long to keep trying one run (retries on 429/502/503/504; default 10)",
    )


def refuse_otel_options(args: argparse.Namespace) -> None:
    """``--format jsonl`` takes none of the OpenTelemetry-only options: say which was given."""
    given = [
        option
        for option, value in (
            ("--endpoint", args.endpoint),
            ("--include-content", args.include_content),
        )
        if value
    ]
    if given:
        raise CliError(f"{given[0]} is for --format otlp or otlp-json")


def load_otel() -> ModuleType:
    """The OpenTelemetry bridge, or a one-line install hint when the extra is missing."""
    try:
        from agentledger.agents.integrations import otel
    except ImportError as e:
        raise CliError(INSTALL_HINT) from e
    return otel


def cmd_export_otel(args: argparse.Namespace) -> int:
    """Send runs as OTLP/HTTP traces, or write them as OTLP JSON lines."""
    check_options(args)
    otel = load_otel()
    endpoint = None
    if args.format == "otlp":
        try:
            endpoint = otel.resolve_endpoint(args.endpoint)
        except otel.OtlpEndpointError as e:
            raise CliError(str(e)) from None
    with open_ledger(args, read_only=True) as ledger:
        run_ids = selected_runs(ledger, args)
        if not run_ids:
            what = describe_selection(args)
            print(f"nothing to export: {what} in {ledger.url}", file=sys.stderr)
            return 0
        if args.format == "otlp-json":
            return write_json_lines(otel, ledger, run_ids, args)
        return send(otel, ledger, run_ids, endpoint, args)


def describe_selection(args: argparse.Namespace) -> str:
    """What an empty selection was, in words: ``no runs tagged T started since S``."""
    what = "no runs"
    if args.tag:
        what += f" tagged {args.tag!r}"
    if args.since:
        what += f" started since {args.since}"
    return what


def check_options(args: argparse.Namespace) -> None:
    """The combinations the otlp formats refuse, each with what to do instead."""
    if args.checkpoint:
        raise CliError("--checkpoint is for --format jsonl: OTLP traces carry no proofs")
    check_selection(args)
    if args.timeout <= 0:
        raise CliError(f"--timeout must be more than 0 seconds, got {args.timeout}")
    if args.format == "otlp":
        if args.output:
            raise CliError(
                "--format otlp sends to --endpoint; to write a file use --format otlp-json -o FILE"
            )
        return
    if args.endpoint:
        raise CliError("--endpoint is for --format otlp; otlp-json writes -o FILE")
    if not args.output:
        raise CliError("--format otlp-json needs -o FILE (or -o - for stdout)")
    if args.output == "-" and args.json:
        raise CliError("export --json reports on stdout: give -o FILE, not -o -")


def check_selection(args: argparse.Namespace) -> None:
    """RUN, or --all, or --since/--tag (which may go together): exactly one way to choose."""
    chosen = [name for name, value in (("RUN", args.run), ("--all", args.all)) if value]
    if args.run:
        chosen += [name for name, value in (("--since", args.since), ("--tag", args.tag)) if value]
    if len(chosen) > 1:
        raise CliError(f"give one of RUN, --all or --since/--tag, not {' and '.join(chosen)}")
    if not (args.run or args.all or args.since or args.tag):
        raise CliError(f"export --format {args.format} needs RUN, --all, --since TIME or --tag T")


def selected_runs(ledger: Ledger, args: argparse.Namespace) -> list[str]:
    """RUN, or every run (started since --since, carrying --tag), oldest first."""
    if args.run:
        return [resolve_run(ledger, args.run)]
    since = parse_time("--since", args.since, ledger.clock)
    return [info.run_id for info in reversed(ledger.runs(since=since, tag=args.tag))]


def write_json_lines(
    otel: ModuleType, ledger: Ledger, run_ids: list[str], args: argparse.Namespace
) -> int:
    """``--format otlp-json``: one ExportTraceServiceRequest per run, one JSON line each."""
    lines = []
    spans = 0
    for done, run_id in enumerate(run_ids, start=1):
        request = otel.trace_request(ledger, [run_id], include_content=args.include_content)
        spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        lines.append(otel.otlp_json(request))
        show_progress(done, len(run_ids))
    text = "\n".join(lines) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot write {args.output!r}: {e.strerror or e}") from None
    where = "stdout" if args.output == "-" else args.output
    summary = f"{plural(len(run_ids), 'run')}, {plural(spans, 'span')}"
    if args.json:
        print(json.dumps({"path": args.output, "run_ids": run_ids, "spans": spans}))
    else:
        print(f"wrote {where}: OTLP JSON, {summary}", file=sys.stderr)
    return 0


def send(
    otel: ModuleType,
    ledger: Ledger,
    run_ids: list[str],
    endpoint: str | None,
    args: argparse.Namespace,
) -> int:
    """``--format otlp``: each run to the endpoint; exit 1 with the answer of a refusal."""
    quiet_sdk_logs(args.verbose)
    try:
        summary = otel.export_runs(
            ledger,
            run_ids,
            endpoint=endpoint,
            include_content=args.include_content,
            timeout=args.timeout,
            progress=lambda done, total, _run: show_progress(done, total),
        )
    except otel.OtlpExportError as e:
        end_progress(len(run_ids))
        print(f"agentledger: export failed: {e}", file=sys.stderr)
        if e.sent:
            print(
                f"agentledger: {plural(e.sent, 'run')} of {len(run_ids)} had been sent before it",
                file=sys.stderr,
            )
        return 1
    if args.json:
        print(
            json.dumps(
                {
                    "endpoint": summary.endpoint,
                    "run_ids": list(summary.run_ids),
                    "spans": summary.spans,
                }
            )
        )
    else:
        print(
            f"sent {plural(len(summary.run_ids), 'run')} ({plural(summary.spans, 'span')}) to "
            f"{summary.endpoint}; each trace id is its run id without dashes",
            file=sys.stderr,
        )
    return 0


def show_progress(done: int, total: int) -> None:
    """``exporting runs: 3/10`` on one terminal line, for several runs and only on a TTY."""
    if total < 2 or not sys.stderr.isatty():
        return
    print(f"\rexporting runs: {done}/{total}", end="", file=sys.stderr, flush=True)
    if done == total:
        print(file=sys.stderr)


def end_progress(total: int) -> None:
    """End an unfinished progress line before an error message."""
    if total >= 2 and sys.stderr.isatty():
        print(file=sys.stderr)


def quiet_sdk_logs(verbose: bool) -> None:
    """Keep the SDK's own export log lines off stderr (we report failures ourselves), unless -v."""
    if not verbose:
        import logging  # only an OTLP export pays for it

        logging.getLogger("opentelemetry").addHandler(logging.NullHandler())
