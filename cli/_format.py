"""Terminal rendering for the CLI: run tables, readable timelines and conversations.

Prints nothing itself.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from agentledger.ledger import RecordedEvent, RunInfo

__all__ = [
    "conversations",
    "cost_text",
    "duration_text",
    "lineage",
    "runs_table",
    "summarize",
    "terminal_width",
    "timeline",
    "tokens_text",
]


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def runs_table(runs: Sequence[RunInfo], width: int | None = None) -> str:
    """A table of runs: id, status, started, events, tokens, cost, latency, agent, input.

    TOKENS is input plus output tokens (``12.3k``), COST the summed cost in USD, LATENCY the
    summed model latency; "-" where the index does not keep them (or no call reported a cost).
    With `width` (a terminal's), the table fits it: under the full width the run id shrinks to
    its first 8 characters (any unique prefix is accepted), the start time to the minute, and
    the input takes what is left; narrower still, LATENCY, then EVENTS are dropped and the
    start time loses its year and the agent narrows. Without it, the full fixed-width table
    (for scripts).
    """
    full = width is None or width >= _FULL_WIDTH
    columns = list(_COLUMNS)
    if not full:
        columns[0] = ("RUN", 8, "<", lambda r: r.run_id[:8])
        columns[2] = ("STARTED", 16, "<", lambda r: r.started_at[:16])
        assert width is not None
        for name in ("LATENCY", "EVENTS"):
            if _fixed(columns) + _MIN_INPUT <= width:
                break
            columns = [c for c in columns if c[0] != name]
        if _fixed(columns) + _MIN_INPUT > width:
            columns[2] = ("STARTED", 11, "<", lambda r: r.started_at[5:16].replace("T", " "))
            columns[-1] = ("AGENT", 10, "<", lambda r: r.agent)
    input_width = 60 if width is None else max(_MIN_INPUT, min(60, width - _fixed(columns)))
    lines = ["  ".join(f"{name:{align}{size}}" for name, size, align, _ in columns) + "  INPUT"]
    for info in runs:
        cells = [f"{_clip(cell(info), size):{align}{size}}" for _, size, align, cell in columns]
        lines.append("  ".join(cells) + f"  {_clip(info.input_preview, input_width)}")
    if not runs:
        lines.append("(no runs)")
    return "\n".join(lines)


def tokens_text(count: int | None) -> str:
    """A token count in at most 6 characters: ``950``, ``12.3k``, ``4.56M``; "-" for None."""
    if count is None:
        return "-"
    if count < 10_000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k" if count < 100_000 else f"{count // 1000}k"
    return f"{count / 1_000_000:.2f}M" if count < 100_000_000 else f"{count // 1_000_000}M"


def cost_text(cost: float | None) -> str:
    """A cost in USD in at most 7 characters: ``$0.0042``, ``$12.50``, ``$1234``; "-" for None."""
    if cost is None:
        return "-"
    if cost < 1:
        return f"${cost:.4f}"
    return f"${cost:.2f}" if cost < 1000 else f"${cost:.0f}"


def duration_text(ms: float | None) -> str:
    """A duration in at most 7 characters: ``850ms``, ``12.3s``, ``4.2m``; "-" for None."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m" if seconds < 3600 else f"{seconds / 3600:.1f}h"


def _tokens(info: RunInfo) -> str:
    if info.input_tokens is None:
        return "-"
    return tokens_text(info.input_tokens + (info.output_tokens or 0))


_Column = tuple[str, int, str, Callable[[RunInfo], str]]
_COLUMNS: tuple[_Column, ...] = (
    ("RUN", 36, "<", lambda r: r.run_id),
    ("STATUS", 9, "<", lambda r: r.status),
    ("STARTED", 20, "<", lambda r: r.started_at[:19]),
    ("EVENTS", 6, ">", lambda r: str(r.event_count)),
    ("TOKENS", 6, ">", _tokens),
    ("COST", 7, ">", lambda r: cost_text(r.cost_usd)),
    ("LATENCY", 7, ">", lambda r: duration_text(r.model_latency_ms)),
    ("AGENT", 12, "<", lambda r: r.agent),
)
_MIN_INPUT = 16


def _fixed(columns: Sequence[_Column]) -> int:
    """The width of `columns` with their separators, up to where the input starts."""
    return sum(size + 2 for _, size, _, _ in columns)


_FULL_WIDTH = _fixed(_COLUMNS) + 60


def lineage(started: dict[str, Any]) -> str:
    """Where a run came from, from its RunStarted: ``  rerun-of=ID``, ``  fork-of=ID@N``, or ""."""
    parent = started.get("parent_run_id")
    if not parent:
        return ""
    at = started.get("parent_position")
    return f"  {started.get('relation') or 'child'}-of={parent}" + (f"@{at}" if at else "")


def summarize(record: RecordedEvent) -> str:  # noqa: PLR0911, PLR0912 - one flat dispatch over kinds
    """One line saying what an event recorded."""
    p: dict[str, Any] = record.payload
    kind = record.kind
    if kind == "RunStarted":
        shown = "<blob>" if "input_ref" in p else _clip(json.dumps(p.get("input")), 70)
        subject = " subject=<sealed>" if p.get("subject_key") else ""
        return f"agent={p.get('agent')} input={shown}{subject}"
    if kind == "ModelCalled":
        usage = p.get("usage", {})
        served = f" served_from={p['served_from']}" if p.get("served_from") else ""
        err = f" error={p['error']['type']}" if p.get("error") else ""
        streamed = (
            f" ttft={p['ttft_ms']:.0f}ms chunks={p.get('chunk_count')}"
            if p.get("ttft_ms") is not None
            else ""
        )
        return (
            f"{p.get('call_id')} {p.get('provider')}:{p.get('model')} "
            f"msgs={p.get('message_count')} tokens={usage.get('input_tokens', 0)}+"
            f"{usage.get('output_tokens', 0)} {p.get('latency_ms', 0.0):.0f}ms"
            f"{streamed}{served}{err}"
        )
    if kind == "ToolCalled":
        args = p.get("arguments", "<blob>") if "arguments_ref" not in p else "<blob>"
        return f"{p.get('call_id')} {p.get('tool')}({_clip(json.dumps(args), 60)})"
    if kind == "ToolReturned":
        if p.get("ok"):
            data = "<blob>" if "data_ref" in p else _clip(json.dumps(p.get("data")), 70)
            return f"{p.get('call_id')} ok {data}"
        error = p.get("error") or {}
        return (
            f"{p.get('call_id')} FAILED {error.get('code')}: {_clip(error.get('message', ''), 60)}"
        )
    if kind == "DeltaApplied":
        return "<blob>" if "patch_ref" in p else _clip(json.dumps(p.get("patch")), 90)
    if kind in {"StepStarted", "StepCompleted"}:
        return f"{p.get('step_id')} {p.get('name', p.get('status', ''))}"
    if kind == "PlanProposed":
        return _clip(json.dumps(p.get("plan")), 90)
    if kind == "SynthesisProduced":
        return f"{_clip(p.get('answer') or '<blob>', 70)} evidence={p.get('evidence_ids', [])}"
    if kind == "GuardrailTripped":
        return f"{p.get('guardrail')} -> {p.get('action')}: {_clip(p.get('message', ''), 60)}"
    if kind == "PolicyDecided":
        return f"{p.get('decision')} {p.get('reasons', [])}"
    if kind in {"RunCompleted", "RunFailed"}:
        extra = p.get("outcome") or (p.get("error") or {}).get("message", "")
        return f"events={p.get('event_count')} head={str(p.get('head_hash'))[:12]} {extra}"
    if kind == "RunAnnotated":
        return f"{p.get('author')}: {_clip(p.get('note', ''), 70)}"
    return _clip(json.dumps(p), 90)


def timeline(records: Sequence[RecordedEvent], width: int | None = None) -> str:
    """A readable timeline: position, time, kind and a summary per event.

    With `width` (a terminal's), each line is clipped to it.
    """
    lines = (f"{r.position:>4}  {r.timestamp[11:23]}  {r.kind:18}  {summarize(r)}" for r in records)
    if width is None:
        return "\n".join(lines)
    return "\n".join(line if len(line) <= width else line[: width - 1] + "\u2026" for line in lines)


def terminal_width(stream: TextIO) -> int | None:
    """The width to fit output to: the terminal's when `stream` is one, else None (no limit)."""
    if not stream.isatty():
        return None
    return shutil.get_terminal_size().columns


def conversations(calls: Sequence[tuple[RecordedEvent, dict[str, Any]]], width: int = 100) -> str:
    """Each model call's conversation as ``role: content`` lines, wrapped to `width`.

    `calls` pairs each ModelCalled with its resolved ``messages`` (those no earlier call showed),
    ``earlier`` (where the ones before them are: a position and a count) and ``response``.
    """
    out: list[str] = []
    for record, found in calls:
        p = record.payload
        messages = found.get("messages") or []
        earlier = found.get("earlier")
        total = len(messages) + (earlier.count if earlier else 0)
        where = f" (step {p['step_id']})" if p.get("step_id") else ""
        out.append(
            f"#{record.position} {p.get('provider')}:{p.get('model')} by {p.get('actor')}{where}, "
            f"{total} message{'' if total == 1 else 's'}:"
        )
        if earlier:
            what = "its messages and response" if earlier.response else "its first messages"
            out.append(f"  ({earlier.count} earlier as in #{earlier.position}: {what})")
        out.extend(_said("", message, width) for message in messages)
        if "response" in found:
            out.append(_said("=> ", answer_message(found["response"]), width))
        elif p.get("error"):
            out.append(_said("=> ", {"role": "error", "content": p["error"]}, width))
        out.append("")
    return "\n".join(out).rstrip("\n") if out else "(no model calls)"


def answer_message(response: Any) -> Any:
    """The message a recorded response holds: itself, or what an SDK response carries.

    An instrumented OpenAI call records the whole ``ChatCompletion`` (its first choice's
    message is the answer) and an Anthropic one the whole ``Message`` (its text blocks are the
    text; tool uses and other blocks are kept beside it).
    """
    if not isinstance(response, dict):
        return response
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return message
    blocks = response.get("content")
    if response.get("type") == "message" and isinstance(blocks, list):
        text = [b for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
        answer: dict[str, Any] = {
            "role": response.get("role", "assistant"),
            "content": "".join(str(b.get("text", "")) for b in text),
        }
        others = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "text")]
        if others:
            answer["blocks"] = others
        return answer
    return response


def _said(mark: str, message: Any, width: int) -> str:
    """One message as ``  role: content`` wrapped, its other fields after the content."""
    if not isinstance(message, dict):
        message = {"role": "?", "content": message}
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    rest = {
        k: v for k, v in message.items() if k not in {"role", "content"} and v not in (None, [], {})
    }
    if content is None:
        text = ""
    if rest:
        text = f"{text} {json.dumps(rest, ensure_ascii=False, sort_keys=True)}".strip()
    head = f"  {mark}{message.get('role', '?')}: "
    lines = []
    for number, paragraph in enumerate(text.splitlines() or [""]):
        lines.append(
            textwrap.fill(
                paragraph,
                width=width,
                initial_indent=head if number == 0 else " " * len(head),
                subsequent_indent=" " * len(head),
                break_long_words=True,
                break_on_hyphens=False,
                replace_whitespace=False,
            )
            or (head.rstrip() if number == 0 else "")
        )
    return "\n".join(lines)
