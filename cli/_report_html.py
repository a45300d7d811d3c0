r"""Rendering one run as a self-contained HTML page for auditors (`agentledger report`).

Owns the page: header, verification verdict, the answer with its evidence links, the step tree
of every event with its full content, and the world-state viewer. Takes a `ReportData` the
command gathered and returns text; must not read the ledger, fetch anything, or emit any URL
outside the page. Run content is untrusted: every piece of it goes through `html.escape`, and
the JSON the script reads is embedded with ``<``, ``>`` and ``&`` as ``\u`` escapes, so no
payload can close a tag. The page is linear in the run's length: each DeltaApplied's patch is
embedded once and the script folds them on demand (the final state is written once, for readers
without JavaScript and for the first view), and each conversation message is shown once (a model
call names the earlier call that shows the rest). A text past `VISIBLE_CHARS` shows its start,
with the whole in a closed ``<details>``, which the browser parses but does not lay out. Past
its first `CHUNK_EVENTS` events the step tree comes in chunks of the same markup wrapped in
``<noscript>``, which the script builds as the reader needs them (`_timeline`), so opening a
long run's page does not build every event first.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentledger.cli._format import summarize
from agentledger.cli._report_assets import CSP, NOSCRIPT_STYLE, SCRIPT, SNAPSHOT_EVERY, STYLE
from agentledger.ledger import RecordedEvent, RunInfo, VerifyReport

__all__ = [
    "LATER_CLOSE",
    "LATER_OPEN",
    "ReportData",
    "Seen",
    "evidence_ids_in",
    "render_report",
    "unfold",
]

HIGHLIGHT = {"PolicyDecided", "GuardrailTripped", "RunFailed", "SynthesisProduced"}
CHUNK_EVENTS = 100
"""The timeline is cut into chunks of at least this many events (at top-level step bounds); all
but the first are parsed by the script only when needed (see `_timeline`)."""
LATER_OPEN = '<noscript class="al-later">'
LATER_CLOSE = "</noscript><!--/al-later-->"
"""What wraps each later chunk; run content cannot hold either (its ``<`` are escaped)."""
VISIBLE_CHARS = 2_000
"""Longer texts show their first this many characters; the whole text is in a closed
``<details>`` under them."""


@dataclass(frozen=True)
class Seen:
    """Where the page already shows a conversation's first `count` messages.

    They are those of the model call at `position`: its messages and then, when `response`, its
    response.
    """

    position: int
    count: int
    response: bool = False


@dataclass(frozen=True)
class ReportData:
    """Everything the page shows, read from the ledger by the command."""

    run: RunInfo
    events: list[RecordedEvent]
    resolved: dict[int, dict[str, Any]]
    """Per position: blobs the event refers to, resolved (``messages``/``response``/``tools``
    for a model call, else each ref to its content). A model call's ``messages`` are those no
    earlier call showed; ``earlier``, a `Seen`, says where the ones before them are shown."""
    verify: VerifyReport
    final_state: Any
    checkpoint: VerifyReport | None = None
    checkpoint_files: list[str] = field(default_factory=list)


def esc(value: object) -> str:
    """Text escaped for HTML content and attribute values."""
    return html.escape(str(value), quote=True)


def esc_text(value: object) -> str:
    """Text escaped for HTML content (not attribute values): quotes stay as they are.

    JSON is full of quotes, and a long run's page holds a lot of it: ``&quot;`` made the
    benchmark's page 13% larger for nothing, since a quote cannot end element content.
    """
    return html.escape(str(value), quote=False)


def pretty(value: Any) -> str:
    """A JSON value as escaped, indented, key-sorted text (strings as themselves)."""
    if isinstance(value, str):
        return esc_text(value)
    return esc_text(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str))


def script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survive."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def evidence_ids_in(value: Any) -> list[str]:
    """Evidence ids in a tool result, in order of first appearance.

    They are the values of ``evidence_id`` keys and the items of ``evidence_ids`` lists,
    anywhere in it.
    """
    found: dict[str, None] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if key == "evidence_id" and isinstance(inner, str):
                    found.setdefault(inner)
                elif key == "evidence_ids" and isinstance(inner, list):
                    found.update((i, None) for i in inner if isinstance(i, str))
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return list(found)


def render_report(data: ReportData) -> str:
    """The whole page."""
    producers = _producers(data)
    anchors = {evidence: f"evidence-{n}" for n, evidence in enumerate(producers, 1)}
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>agentledger run {esc(data.run.run_id)}</title>",
        f"<style>{STYLE}</style><noscript><style>{NOSCRIPT_STYLE}</style></noscript>",
        "</head><body>",
        f"<h1>Run {esc(data.run.run_id)}</h1>",
        _header(data),
        _verdict(data),
        _answer(data, anchors),
        _world(data),
        '<h2 id="timeline">Timeline</h2>',
        (
            '<p class="al-js"><button id="al-expand" type="button">expand all</button> '
            '<button id="al-collapse" type="button">collapse all</button></p>'
        ),
        *_timeline(data, anchors, producers),
        _deltas_json(data),
        f"<script>{SCRIPT}</script>",
        "</body></html>\n",
    ]
    return "\n".join(parts)


def unfold(page: str) -> str:
    """The page with every later chunk as plain markup, as a browser without scripting shows it.

    For printing (``report --pdf``), where no script gets to parse the chunks.
    """
    return page.replace(LATER_OPEN, "").replace(LATER_CLOSE, "")


def _kv(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _header(data: ReportData) -> str:
    first = data.events[0].payload if data.events else {}
    config = first.get("config") or {}
    models = "; ".join(
        f"{role}: {m.get('provider')}:{m.get('model')} {json.dumps(m.get('params', {}))}"
        for role, m in sorted((config.get("models") or {}).items())
    )
    prompts = "; ".join(
        f"{role}: {p.get('name')}@{p.get('version')}"
        for role, p in sorted((config.get("prompts") or {}).items())
    )
    calls = [e.payload for e in data.events if e.kind == "ModelCalled"]
    cost = sum(float(c.get("cost_usd") or 0) for c in calls)
    usage = [c.get("usage") or {} for c in calls]
    tokens = (
        f"{sum(u.get('input_tokens', 0) for u in usage)} in + "
        f"{sum(u.get('output_tokens', 0) for u in usage)} out = "
        f"{sum(u.get('total_tokens', 0) for u in usage)} total over {len(calls)} model calls"
    )
    rows = [
        ("agent", esc(data.run.agent)),
        ("status", esc(data.run.status)),
        ("input", f"<pre>{pretty(first.get('input', first.get('input_ref')))}</pre>"),
        ("models", esc(models or "(none)")),
        ("prompt versions", esc(prompts or "(none)")),
        ("tags", esc(", ".join(data.run.tags) or "(none)")),
        ("cost (USD)", esc(f"{cost:.6f}")),
        ("tokens", esc(tokens)),
        ("started", esc(data.run.started_at)),
        ("ended", esc(data.run.ended_at or "(not ended)")),
        ("duration", esc(_duration(data.events))),
        ("events", esc(data.run.event_count)),
        ("code version", esc(config.get("code_version", "unknown"))),
    ]
    if first.get("parent_run_id"):
        link = f"{first.get('relation') or 'child'} of run {first['parent_run_id']}"
        if first.get("parent_position") is not None:
            link += f" at position {first['parent_position']}"
        rows.append(("parent", esc(link)))
        if first.get("overrides"):
            rows.append(("overrides", f"<pre>{pretty(first['overrides'])}</pre>"))
    return '<h2 id="header">Run</h2>' + _kv(rows)


def _duration(events: list[RecordedEvent]) -> str:
    own = [e for e in events if e.kind != "RunAnnotated"]  # a note months later is not the run
    if len(own) < 2:
        return "0 s"
    try:
        start = datetime.fromisoformat(own[0].timestamp.replace("Z", "+00:00"))
        end = datetime.fromisoformat(own[-1].timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "(unknown)"
    return f"{(end - start).total_seconds():.3f} s (first to last event)"


def _verdict(data: ReportData) -> str:
    report = data.verify
    head = data.events[-1].hash if data.events else ""
    if report.ok:
        text = (
            f"Chain intact: {report.events_checked} events and {report.blobs_checked} blobs "
            "recomputed from their content."
        )
        out = [f'<p class="verdict ok" id="verdict">{esc(text)}</p>']
    else:
        count = len(report.problems)
        out = [f'<p class="verdict broken" id="verdict">BROKEN: {count} problems</p>']
        out.append("<ul>" + "".join(f"<li>{esc(p)}</li>" for p in report.problems) + "</ul>")
    out.append(f'<p>Head hash: <code id="head-hash">{esc(head)}</code></p>')
    out.append(_checkpoint_verdict(data))
    return '<h2 id="verification">Verification</h2>' + "\n".join(out)


def _checkpoint_verdict(data: ReportData) -> str:
    report = data.checkpoint
    if report is None:
        return (
            '<p class="verdict neutral" id="checkpoint-verdict">No signed checkpoint checked: '
            "the chain alone cannot show the history was not rewritten as a whole (pass "
            "--checkpoint FILE --vkey KEY).</p>"
        )
    files = esc(", ".join(data.checkpoint_files))
    if report.ok and report.checkpoints:
        top = max(report.checkpoints, key=lambda c: c.checkpoint.size)
        body = top.checkpoint
        tail = (
            f"; {top.not_covered} later events are not covered"
            if top.not_covered
            else "; every event is covered"
        )
        text = (
            f"Checkpoint holds ({files}): {body.origin} at {body.size} events, re-derived from "
            f"the ledger's events{tail}."
        )
        return f'<p class="verdict ok" id="checkpoint-verdict">{esc(text)}</p>'
    problems = [*report.log_problems, *report.problems]
    items = "".join(f"<li>{esc(p)}</li>" for p in problems)
    return (
        f'<p class="verdict broken" id="checkpoint-verdict">Checkpoint check FAILED '
        f"({files})</p><ul>{items}</ul>"
    )


def _tool_data(record: RecordedEvent, data: ReportData) -> Any:
    """A ToolReturned's data, from its blob when it was stored as one."""
    ref = record.payload.get("data_ref")
    if ref is not None:
        return data.resolved.get(record.position, {}).get(ref)
    return record.payload.get("data")


def _producers(data: ReportData) -> dict[str, int]:
    """Each evidence id a tool returned, to the position of the first result returning it."""
    producers: dict[str, int] = {}
    for record in data.events:
        if record.kind == "ToolReturned":
            for evidence in evidence_ids_in(_tool_data(record, data)):
                producers.setdefault(evidence, record.position)
    return producers


def _answer(data: ReportData, anchors: dict[str, str]) -> str:
    out = []
    for record in data.events:
        if record.kind != "SynthesisProduced":
            continue
        p = record.payload
        answer = p.get("answer")
        if answer is None and p.get("answer_ref"):
            answer = data.resolved.get(record.position, {}).get(p["answer_ref"])
        out.append(
            f'<p>At <a href="#ev-{record.position}">position {record.position}</a>:</p>'
            f"<pre>{pretty(answer)}</pre>{_evidence_list(p.get('evidence_ids') or [], anchors)}"
        )
    if not out:
        return ""
    return '<h2 id="answer">Answer</h2>' + "\n".join(out)


def _evidence_list(ids: list[Any], anchors: dict[str, str]) -> str:
    items = []
    for evidence in ids:
        target = anchors.get(str(evidence))
        if target:
            items.append(f'<li><a class="cite" href="#{target}">{esc(evidence)}</a></li>')
        else:
            items.append(
                f'<li><span class="cite missing">{esc(evidence)}</span> '
                "(no tool result in this run returned it)</li>"
            )
    return "<p>Cited evidence:</p><ul>" + "".join(items) + "</ul>" if items else ""


def _world(data: ReportData) -> str:
    last = data.events[-1].position if data.events else 0
    deltas = sum(1 for e in data.events if e.kind == "DeltaApplied")
    here = "(no DeltaApplied at this position)"
    if data.events and data.events[-1].kind == "DeltaApplied":
        here = _state_text(data.events[-1].payload.get("patch"))
    return (
        '<h2 id="world">World state</h2><div id="al-world">'
        '<div class="al-js"><button id="al-prev" type="button">&larr;</button> '
        f'<input id="al-slider" type="range" min="0" max="{last}" value="{last}" '
        'aria-label="position"> <button id="al-next" type="button">&rarr;</button> '
        f'<span id="al-pos">after position {last} ({deltas} of {deltas} deltas applied)</span>'
        f'<p>Patch applied at this position:</p><pre id="al-patch">{here}</pre></div>'
        f"<noscript><p>State after the last position ({last}); each DeltaApplied in the "
        "timeline shows its patch.</p></noscript>"
        f'<pre id="world-state" data-position="{last}">{_state_text(data.final_state)}</pre>'
        "</div>"
    )


def _state_text(state: Any) -> str:
    return esc_text(json.dumps(state, indent=2, sort_keys=True, ensure_ascii=False))


def _deltas_json(data: ReportData) -> str:
    deltas = [[e.position, e.payload.get("patch")] for e in data.events if e.kind == "DeltaApplied"]
    last = data.events[-1].position if data.events else 0
    value = {"deltas": deltas, "every": SNAPSHOT_EVERY, "last": last}
    return f'<script type="application/json" id="al-deltas">{script_json(value)}</script>'


def _timeline(
    data: ReportData, anchors: dict[str, str], producers: dict[str, int]
) -> Iterator[str]:
    """The step tree in chunks of about `CHUNK_EVENTS` events, each cut between top-level steps.

    The first chunk is plain markup; each later one is the same markup inside a
    ``<noscript class="al-later">``, which a browser with scripting keeps as one text node (no
    elements to build, style or lay out) and the script parses when the reader gets near it
    (`SCRIPT`); without scripting the browser shows it as it is.
    """
    piece: list[str] = []
    count, later = 0, False
    for markup, position, top in _tree(data, anchors, producers):
        piece.append(markup)
        count += position is not None
        if top and count >= CHUNK_EVENTS:
            yield _chunk(piece, count, later=later)
            piece, count, later = [], 0, True
    if piece:
        yield _chunk(piece, count, later=later)


def _chunk(piece: list[str], count: int, *, later: bool) -> str:
    """One chunk of the step tree, holding `count` events; see `_timeline`."""
    body = "\n".join(piece)
    if not later:
        return f'<div class="al-chunk">{body}</div>'
    return f'<div class="al-chunk" data-events="{count}">{LATER_OPEN}{body}{LATER_CLOSE}</div>'


def _tree(
    data: ReportData, anchors: dict[str, str], producers: dict[str, int]
) -> Iterator[tuple[str, int | None, bool]]:
    """The step tree's markup in pieces.

    Each piece comes with its event's position (None for closing tags alone) and whether no
    step is open after it.
    """
    statuses = {
        e.payload.get("step_id"): e.payload.get("status")
        for e in data.events
        if e.kind == "StepCompleted"
    }
    open_steps: list[str] = []
    for record in data.events:
        p = record.payload
        if record.kind == "StepStarted":
            step = str(p.get("step_id"))
            status = statuses.get(step, "not completed")
            opener = (
                f'<details class="step st-{esc(status)}" open id="step-{esc(step)}">'
                f"<summary>{esc(step)} {esc(p.get('name'))} ({esc(status)})</summary>"
            )
            open_steps.append(step)
            yield opener + _event(record, data, anchors, producers), record.position, False
        elif record.kind == "StepCompleted" and p.get("step_id") in open_steps:
            closing = ""
            while open_steps:
                closing += "</details>"
                if open_steps.pop() == p.get("step_id"):
                    break
            event = _event(record, data, anchors, producers)
            yield event + closing, record.position, not open_steps
        else:
            yield _event(record, data, anchors, producers), record.position, not open_steps
    if open_steps:
        yield "</details>" * len(open_steps), None, True


def _event(
    record: RecordedEvent, data: ReportData, anchors: dict[str, str], producers: dict[str, int]
) -> str:
    kind = record.kind
    actor = record.payload.get("actor")
    head = (
        f'<div class="head"><a href="#ev-{record.position}">#{record.position}</a> '
        f'<span class="kind">{esc(kind)}</span>'
        + (f" by {esc(actor)}" if actor else "")
        + f" <small>{esc(record.timestamp)}</small>"
        f"<br>{esc_text(summarize(record))}</div>"
    )
    body = _body(record, data, anchors, producers)
    return (
        f'<div class="ev k-{esc(kind)}" id="ev-{record.position}" data-kind="{esc(kind)}">'
        f'{head}{body}<div class="env">hash {esc(record.hash)} prev {esc(record.prev)} '
        f"event_id {esc(record.event_id)} version {esc(record.version)}</div></div>"
    )


def _body(
    record: RecordedEvent, data: ReportData, anchors: dict[str, str], producers: dict[str, int]
) -> str:
    p = record.payload
    resolved = data.resolved.get(record.position, {})
    if record.kind == "ModelCalled":
        return _model_call(p, resolved)
    out = [_pre(p)]
    if record.kind == "ToolReturned":
        ids = evidence_ids_in(_tool_data(record, data))
        spans = []
        for evidence in ids:
            target = anchors.get(evidence)
            first = target is not None and producers.get(evidence) == record.position
            id_attr = f' id="{target}"' if first else ""
            spans.append(f'<span class="evid"{id_attr}>{esc(evidence)}</span>')
        if spans:
            out.append("<p>Evidence returned: " + " ".join(spans) + "</p>")
    if record.kind == "SynthesisProduced":
        out.append(_evidence_list(p.get("evidence_ids") or [], anchors))
    for ref, value in resolved.items():
        out.append(f"<p>blob <code>{esc(ref)}</code>:</p>{_pre(value)}")
    return "".join(out)


def _model_call(p: dict[str, Any], resolved: dict[str, Any]) -> str:
    meta = {k: v for k, v in p.items() if k not in {"messages_ref", "response_ref", "tools_ref"}}
    out = [f"<details><summary>call details</summary><pre>{pretty(meta)}</pre></details>"]
    messages = resolved.get("messages") or []
    earlier: Seen | None = resolved.get("earlier")
    if earlier is None:
        out.append(f"<p>Messages ({len(messages)}):</p>")
    else:
        what = "messages and response" if earlier.response else "first messages"
        out.append(
            f"<p>Messages ({earlier.count + len(messages)}): {earlier.count} earlier messages as "
            f'in <a href="#ev-{earlier.position}">position {earlier.position}</a> (its {what}), '
            f"then {len(messages)} new:</p>"
        )
    out.extend(_message(message) for message in messages)
    if "response" in resolved:
        out.append("<p>Response:</p>" + _message(resolved["response"]))
    elif p.get("error"):
        out.append(f"<p>Error:</p>{_pre(p['error'])}")
    if "tools" in resolved:
        out.append(
            f"<details><summary>tools offered</summary><pre>{pretty(resolved['tools'])}</pre>"
            "</details>"
        )
    return "".join(out)


def _message(message: Any) -> str:
    if not isinstance(message, dict):
        return f'<div class="msg">{_pre(message)}</div>'
    role = message.get("role", "?")
    rest = {k: v for k, v in message.items() if k not in {"role", "content"}}
    extra = _pre(rest) if rest else ""
    return (
        f'<div class="msg"><span class="role">{esc(role)}</span>'
        f"{_pre(message.get('content'))}{extra}</div>"
    )


def _pre(value: Any) -> str:
    """A value in a ``<pre>``; past `VISIBLE_CHARS`, cut, with the whole in a closed details.

    A closed ``<details>`` is parsed but not laid out, so a long text costs the browser little
    until the reader opens it.
    """
    whole = value if isinstance(value, str) else _json_text(value)
    if len(whole) <= VISIBLE_CHARS:
        return f"<pre>{esc_text(whole)}</pre>"
    more = len(whole) - VISIBLE_CHARS
    return (
        f'<pre>{esc_text(whole[:VISIBLE_CHARS])}<span class="cut"> [... {more:,} more '
        f"characters]</span></pre><details><summary>the whole text ({len(whole):,} characters)"
        f"</summary><pre>{esc_text(whole)}</pre></details>"
    )


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
