"""``report --cohort ...``: a cohort diff (two selections of runs, paired by input) as one page.

Renders a `CohortDiff` (what ``agentledger diff --cohort`` prints): the two selections and a
verification verdict over every run in them, the aggregates of each side and their delta, then
one row per input with both runs, their statuses, whether the status or the answer changed, the
tool errors, the token and cost deltas and the first divergence (its positions in each run),
each changed row with the command that renders that pair side by side; then the runs whose
input has no partner. Same security policy as the run report: no script, nothing fetched, every
recorded text escaped. Must not read the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentledger.cli._report_assets import CSP
from agentledger.cli._report_diff import DIFF_STYLE
from agentledger.cli._report_html import esc
from agentledger.ledger import VerifyReport
from agentledger.replay import CohortDiff
from agentledger.replay._cohort import PairOutcome

__all__ = ["render_cohort_page"]

_COHORT_STYLE = """
.pairs td:nth-child(n+5){white-space:nowrap}
.mark{font-weight:700}
"""


def render_cohort_page(diff: CohortDiff, reports: Mapping[str, VerifyReport]) -> str:
    """The whole page for a cohort diff, with each run's verification in `reports`."""
    verdict = "identical" if diff.identical else "different"
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>agentledger cohort diff {esc(diff.a)} .. {esc(diff.b)}</title>",
        f"<style>{DIFF_STYLE}{_COHORT_STYLE}</style></head><body>",
        f'<h1>Cohort B against cohort A: <span id="cohort-verdict">{verdict}</span></h1>',
        _selections(diff),
        _verification(reports),
        _aggregates(diff),
        '<h2 id="pairs">Inputs, paired</h2>',
        _pairs(diff),
        _unpaired(diff),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def _selections(diff: CohortDiff) -> str:
    identical = sum(1 for p in diff.pairs if p.identical)
    return (
        "<table>"
        f'<tr><th>cohort A</th><td id="cohort-a">{esc(diff.a)}</td></tr>'
        f'<tr><th>cohort B</th><td id="cohort-b">{esc(diff.b)}</td></tr>'
        f"<tr><th>inputs paired</th><td>{len(diff.pairs)} ({identical} identical, "
        f"{len(diff.pairs) - identical} changed)</td></tr>"
        f"<tr><th>runs unpaired</th><td>{len(diff.unpaired)}</td></tr>"
        "</table>"
    )


def _verification(reports: Mapping[str, VerifyReport]) -> str:
    broken = {run_id: r for run_id, r in reports.items() if not r.ok}
    if not broken:
        events = sum(r.events_checked for r in reports.values())
        blobs = sum(r.blobs_checked for r in reports.values())
        return (
            f'<p class="verdict ok" id="verdict">Every chain intact: {len(reports)} runs, '
            f"{events} events, {blobs} blobs recomputed.</p>"
        )
    items = "".join(
        f"<li><code>{esc(run_id)}</code>: {esc(problem)}</li>"
        for run_id, report in broken.items()
        for problem in report.problems
    )
    return (
        f'<p class="verdict broken" id="verdict">BROKEN: {len(broken)} of {len(reports)} runs'
        f"</p><ul>{items}</ul>"
    )


def _aggregates(diff: CohortDiff) -> str:
    a, b, delta = diff.side_a, diff.side_b, diff.delta()
    rows = (
        ("paired runs", str(a.runs), str(b.runs), ""),
        *(
            (
                label,
                fmt.format(getattr(a, name)),
                fmt.format(getattr(b, name)),
                _signed(fmt, delta[name]),
            )
            for label, name, fmt in (
                ("mean tokens", "mean_tokens", "{:,.1f}"),
                ("mean cost (USD)", "mean_cost_usd", "{:.6f}"),
                ("mean latency (ms)", "mean_latency_ms", "{:,.1f}"),
                ("tool error rate", "tool_error_rate", "{:.3f}"),
                ("failed runs", "failed_runs", "{:,}"),
            )
        ),
        ("outcomes", _outcomes(a.outcomes), _outcomes(b.outcomes), ""),
        ("answers changed", "", "", f"{diff.answers_changed} of {len(diff.pairs)}"),
    )
    body = "".join(
        f"<tr><th>{esc(label)}</th><td>{esc(va)}</td><td>{esc(vb)}</td><td>{esc(d)}</td></tr>"
        for label, va, vb, d in rows
    )
    return (
        '<h2 id="aggregates">Aggregates (paired runs)</h2><table id="aggregate-table">'
        f"<tr><th></th><th>A</th><th>B</th><th>B &minus; A</th></tr>{body}</table>"
    )


def _signed(fmt: str, value: float) -> str:
    return ("+" if value >= 0 else "") + fmt.format(value)


def _outcomes(outcomes: Mapping[str, int]) -> str:
    return ", ".join(f"{name}: {count}" for name, count in outcomes.items()) or "-"


def _pairs(diff: CohortDiff) -> str:
    if not diff.pairs:
        return "<p>No input is in both cohorts.</p>"
    head = (
        "<tr><th></th><th>input</th><th>run A</th><th>run B</th><th>status</th>"
        "<th>answer</th><th>tool errors</th><th>tokens</th><th>cost (USD)</th>"
        "<th>first divergence</th></tr>"
    )
    rows = "".join(_pair(index, pair) for index, pair in enumerate(diff.pairs, 1))
    return f'<table class="pairs" id="pair-table">{head}{rows}</table>'


def _pair(index: int, pair: PairOutcome) -> str:
    delta = pair.totals_b.minus(pair.totals_a)
    status = (
        f"{esc(pair.status_a)} &rarr; {esc(pair.status_b)}"
        if pair.status_changed
        else esc(pair.status_a)
    )
    if pair.identical:
        divergence = "identical"
    else:
        command = f"agentledger report {pair.a_run} --diff {pair.b_run}"
        divergence = (
            f"{esc(pair.first_divergence or 'the steps agree; the totals or answer differ')}"
            f"<br><code>{esc(command)}</code>"
        )
    css = "same" if pair.identical else "changed"
    mark = "=" if pair.identical else "~"
    return (
        f'<tr class="{css}" id="pair-{index}"><td class="mark">{mark}</td>'
        f"<td>{esc(pair.input)}</td><td><code>{esc(pair.a_run)}</code></td>"
        f"<td><code>{esc(pair.b_run)}</code></td>"
        f'<td class="{"changed" if pair.status_changed else "same"}">{status}</td>'
        f"<td>{'changed' if pair.answer_changed else 'same'}</td>"
        f"<td>{pair.tool_errors_a} &rarr; {pair.tool_errors_b}</td>"
        f"<td>{delta.tokens:+,}</td><td>{delta.cost_usd:+.6f}</td><td>{divergence}</td></tr>"
    )


def _unpaired(diff: CohortDiff) -> str:
    if not diff.unpaired:
        return '<h2 id="unpaired">Unpaired runs</h2><p>Every run has a partner.</p>'
    rows = "".join(
        f'<tr class="{"removed" if run.side == "a" else "added"}"><td>{run.side.upper()}</td>'
        f"<td>{esc(run.input)}</td><td><code>{esc(run.run_id)}</code></td></tr>"
        for run in diff.unpaired
    )
    return (
        '<h2 id="unpaired">Unpaired runs</h2><table id="unpaired-table">'
        f"<tr><th>cohort</th><th>input</th><th>run</th></tr>{rows}</table>"
    )
