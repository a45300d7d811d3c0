"""``report A --diff B``: the causal diff of two runs as one self-contained HTML page.

Renders a `RunDiff` (what ``agentledger diff`` prints) side by side: the two runs' headers and
verification verdicts, the first divergence, the totals of each run and their delta, then every
aligned unit (a step, or an event outside any step) as a row with run A's positions on the left
and run B's on the right; a changed unit lists what differs in each of its calls and events,
JSON changes as path | A | B tables and text changes as unified diffs with removed and added
lines marked. The page has the run report's security policy: no script, nothing fetched. Must
not read the ledger.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from agentledger.cli._report_assets import CSP
from agentledger.cli._report_html import esc
from agentledger.ledger import VerifyReport
from agentledger.replay import RunDiff
from agentledger.replay._diff_model import ItemDiff, JsonChange, RunSide, Totals, UnitDiff

__all__ = ["render_diff_page"]

DIFF_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:1em 2em;
color:#1b1b1b;background:#fff}
h1{font-size:1.4em}h2{font-size:1.15em;margin:1.2em 0 .4em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:.25em .5em;
vertical-align:top;text-align:left}
.sides td{width:50%}
pre{background:#f5f5f5;padding:.4em .6em;margin:.2em 0;white-space:pre-wrap;
word-break:break-word;max-height:40em;overflow:auto}
.verdict{padding:.5em 1em;border-radius:4px;font-weight:600}
.ok{background:#e3f6e3;border:1px solid #2e7d32}
.broken{background:#fde4e4;border:1px solid #c62828}
.same{color:#555}.changed{background:#fff8e1}.added{background:#e8f5e9}
.removed{background:#ffebee}
.del{background:#ffebee;color:#b71c1c}.ins{background:#e8f5e9;color:#1b5e20}
.hunk{color:#1565c0}
.first{outline:3px solid #c62828}
code{word-break:break-all}
"""


def render_diff_page(diff: RunDiff, verify_a: VerifyReport, verify_b: VerifyReport) -> str:
    """The whole page for ``diff`` (run B against run A) with each run's verification."""
    verdict = "identical" if diff.identical else "different"
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>agentledger diff {esc(diff.a.run_id)} .. {esc(diff.b.run_id)}</title>",
        f"<style>{DIFF_STYLE}</style></head><body>",
        f'<h1>Run B against run A: <span id="diff-verdict">{verdict}</span></h1>',
        _sides(diff.a, diff.b, verify_a, verify_b),
        _first(diff),
        _totals(diff.totals_a, diff.totals_b, diff.delta),
        _run_level(diff),
        '<h2 id="units">Steps, aligned causally</h2>',
        _units(diff),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def _side(side: RunSide, report: VerifyReport, name: str) -> str:
    rows = [
        ("run", f"<code>{esc(side.run_id)}</code>"),
        ("agent", esc(side.agent)),
        ("status", esc(side.status) + (f" ({esc(side.outcome)})" if side.outcome else "")),
        ("tags", esc(", ".join(side.tags)) or "-"),
    ]
    if side.parent_run_id:
        rows.append(("lineage", f"{esc(side.relation or 'child')} of {esc(side.parent_run_id)}"))
    if side.code_version:
        rows.append(("code version", esc(side.code_version)))
    table = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    if report.ok:
        verdict = (
            f'<p class="verdict ok" id="verdict-{name}">Chain intact: '
            f"{report.events_checked} events, {report.blobs_checked} blobs recomputed.</p>"
        )
    else:
        problems = "".join(f"<li>{esc(p)}</li>" for p in report.problems)
        verdict = (
            f'<p class="verdict broken" id="verdict-{name}">BROKEN: '
            f"{len(report.problems)} problems</p><ul>{problems}</ul>"
        )
    return f"<h3>Run {name.upper()}</h3><table>{table}</table>{verdict}"


def _sides(a: RunSide, b: RunSide, verify_a: VerifyReport, verify_b: VerifyReport) -> str:
    return (
        '<table class="sides"><tr>'
        f"<td>{_side(a, verify_a, 'a')}</td><td>{_side(b, verify_b, 'b')}</td></tr></table>"
    )


def _first(diff: RunDiff) -> str:
    first = diff.first_divergence
    if first is None:
        text = "No step differs." if diff.identical else "The steps agree; see below."
        return f'<h2>First divergence</h2><p id="first-divergence">{text}</p>'
    return (
        '<h2>First divergence</h2><p id="first-divergence">'
        f'<a href="#unit-{first.index}">{esc(first.describe())}</a></p>'
    )


def _totals(a: Totals, b: Totals, delta: Totals) -> str:
    rows = []
    for name in (f.name for f in fields(Totals)):
        values = (getattr(a, name), getattr(b, name), getattr(delta, name))
        cells = "".join(f"<td>{esc(_number(v))}</td>" for v in values)
        rows.append(f"<tr><th>{esc(name.replace('_', ' '))}</th>{cells}</tr>")
    return (
        '<h2>Totals</h2><table id="totals"><tr><th></th><th>A</th><th>B</th><th>B - A</th></tr>'
        + "".join(rows)
        + "</table>"
    )


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.6g}"


def _run_level(diff: RunDiff) -> str:
    out = []
    for title, change in (
        ("Input", diff.input),
        ("Configuration", diff.config),
        ("Final world state", diff.world),
    ):
        if change is not None:
            out.append(f"<h2>{title}</h2>{_json_change(change)}")
    if diff.status is not None:
        out.append(f"<h2>Status</h2><p>A: {esc(diff.status[0])}; B: {esc(diff.status[1])}</p>")
    if diff.answer is not None:
        out.append(
            '<h2>Answer</h2><table class="sides"><tr><th>A</th><th>B</th></tr><tr>'
            f"<td><pre>{esc(diff.answer.a or '')}</pre></td>"
            f"<td><pre>{esc(diff.answer.b or '')}</pre></td></tr></table>"
            f"{_unified(diff.answer.diff)}"
        )
    return "\n".join(out)


def _span(positions: tuple[int, int] | None) -> str:
    if positions is None:
        return "-"
    first, last = positions
    return str(first) if first == last else f"{first}..{last}"


def _units(diff: RunDiff) -> str:
    first = diff.first_divergence.index if diff.first_divergence is not None else None
    rows = ["<table><tr><th>step</th><th>A</th><th>B</th><th>what differs</th></tr>"]
    for index, unit in enumerate(diff.units):
        marked = " first" if index == first else ""
        rows.append(
            f'<tr id="unit-{index}" class="{esc(unit.status)}{marked}">'
            f"<td>{esc(unit.label)}<br><small>{esc(unit.status)}</small></td>"
            f"<td>{_span(unit.a_positions)}</td><td>{_span(unit.b_positions)}</td>"
            f"<td>{_unit_detail(unit)}</td></tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)


def _unit_detail(unit: UnitDiff) -> str:
    out = []
    if unit.step_status is not None:
        out.append(
            f"<p>step status: {esc(unit.step_status[0])} &rarr; {esc(unit.step_status[1])}</p>"
        )
    if unit.tools is not None:
        out.append(
            f"<p>tools: {esc(', '.join(unit.tools[0]) or '-')} &rarr; "
            f"{esc(', '.join(unit.tools[1]) or '-')}</p>"
        )
    out.extend(_item(item) for item in unit.items)
    if unit.world is not None:
        out.append(f"<p>world state after the step:</p>{_json_change(unit.world)}")
    return "".join(out)


def _item(item: ItemDiff) -> str:
    where = f"A:{item.a_position or '-'} B:{item.b_position or '-'}"
    head = (
        f'<p class="{esc(item.status)}"><b>{esc(item.label)}</b> ({esc(item.kind)}, {where}): '
        f"{esc(', '.join(item.fields) or item.status)}"
        + (f" - {esc(item.summary)}" if item.summary else "")
        + "</p>"
    )
    out = [head]
    if item.prompt is not None:
        a = json.dumps(item.prompt.a, sort_keys=True) if item.prompt.a else "-"
        b = json.dumps(item.prompt.b, sort_keys=True) if item.prompt.b else "-"
        out.append(f"<p>prompt: <code>{esc(a)}</code> &rarr; <code>{esc(b)}</code></p>")
        if item.prompt.text_diff:
            out.append(_unified(item.prompt.text_diff))
    if item.messages:
        shared = item.shared_messages
        note = f" (after {shared} shared messages)" if shared else ""
        out.append(f"<p>request messages{note}:</p>{_unified(item.messages)}")
    if item.response:
        out.append(f"<p>response:</p>{_unified(item.response)}")
    for title, change in (
        ("arguments", item.arguments),
        ("result", item.result),
        ("payload", item.value),
    ):
        if change is not None:
            out.append(f"<p>{title}:</p>{_json_change(change)}")
    return "".join(out)


def _json_change(change: JsonChange) -> str:
    rows = "".join(
        f"<tr><td><code>{esc(p.path or '/')}</code></td><td>{esc(p.op)}</td>"
        f"<td><pre>{esc(_json(p.a))}</pre></td><td><pre>{esc(_json(p.b))}</pre></td></tr>"
        for p in change.paths
    )
    more = "<p>(more paths differ)</p>" if change.truncated else ""
    return f"<table><tr><th>path</th><th></th><th>A</th><th>B</th></tr>{rows}</table>{more}"


def _json(value: Any) -> str:
    return "-" if value is None else json.dumps(value, ensure_ascii=False, indent=1)


def _unified(text: str) -> str:
    lines = []
    for line in text.splitlines():
        style = ""
        if line.startswith(("+++", "---")):
            style = "hunk"
        elif line.startswith("+"):
            style = "ins"
        elif line.startswith("-"):
            style = "del"
        elif line.startswith("@@"):
            style = "hunk"
        lines.append(f'<span class="{style}">{esc(line)}</span>' if style else esc(line))
    return "<pre>" + "\n".join(lines) + "</pre>"
