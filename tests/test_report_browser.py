"""``agentledger report`` pages opened in a real browser: Debian's headless Chromium.

The page is written to a file and opened with ``file://``, with the network-related background
services off. ``--dump-dom`` prints the DOM after the page's script ran, so the world-state
viewer can be checked against `world_state`, and the timeline's later chunks (built by the script
when needed) against what a reader does to reach them: an address naming an event, a citation,
the find shortcut, or time after load; ``--screenshot`` shows the page is drawn at all.
Skipped, with the reason, where no ``chromium`` is installed (``.ci/run`` installs it as root).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from agentledger.cli._report import build_report
from agentledger.cli._report_html import render_report
from agentledger.ledger import Ledger
from agentledger.projections import world_state
from bench.bench_report import CHROMIUM_FLAGS, record_run

GOLDEN = Path(__file__).parent / "golden"
CHROMIUM = shutil.which("chromium")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed (apt-get install -y chromium; .ci/run does this as root)",
    ),
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run headless Chromium with a throwaway profile and no background network services."""
    assert CHROMIUM is not None
    command = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(command, capture_output=True, timeout=120, check=True)


def written_report(tmp_path: Path, name: str) -> tuple[Ledger, str, Path]:
    """A golden run imported into a memory ledger, and its page written to a file."""
    ledger = Ledger.open("memory://")
    run_id = ledger.import_file(GOLDEN / name)
    path = tmp_path / "report.html"
    path.write_text(render_report(build_report(ledger, run_id)), encoding="utf-8")
    return ledger, run_id, path


def shown_state(dom: str) -> tuple[int, object]:
    """The position and state the viewer shows in a dumped DOM."""
    found = re.search(r'<pre id="world-state" data-position="(\d+)">(.*?)</pre>', dom, re.S)
    assert found is not None, dom[:2000]
    return int(found.group(1)), json.loads(html.unescape(found.group(2)))


def test_the_viewer_folds_the_patches_to_the_state_at_a_position(tmp_path: Path) -> None:
    """Opened at ``#state-N``, the script shows the state after N, equal to `world_state`."""
    ledger, run_id, path = written_report(tmp_path, "pipeline.jsonl")
    deltas = [e.position for e in ledger.events(run_id) if e.kind == "DeltaApplied"]
    middle = deltas[len(deltas) // 2]
    dom = chromium(tmp_path, "--dump-dom", f"{path.as_uri()}#state-{middle}").stdout.decode()
    assert shown_state(dom) == (middle, world_state(ledger, run_id, middle))
    assert f"after position {middle} (" in dom
    last = ledger.run(run_id).event_count
    dom = chromium(tmp_path, "--dump-dom", path.as_uri()).stdout.decode()
    assert shown_state(dom) == (last, world_state(ledger, run_id))


def test_the_viewer_handles_deltas_that_delete_keys(tmp_path: Path) -> None:
    """Merge-patch nulls delete keys in the browser's fold too (across snapshot boundaries)."""
    ledger = Ledger.open("memory://")
    with ledger.record_run("grow") as run:
        for index in range(150):
            run.delta({f"k{index}": index, f"k{index - 1}": None, "nested": {"n": index}})
    path = tmp_path / "report.html"
    path.write_text(render_report(build_report(ledger, run.run_id)), encoding="utf-8")
    for at in (1, 70, 140):
        dom = chromium(tmp_path, "--dump-dom", f"{path.as_uri()}#state-{at}").stdout.decode()
        assert shown_state(dom) == (at, world_state(ledger, run.run_id, at))


LATER = '<noscript class="al-later">'


def long_run() -> tuple[Ledger, str]:
    """The benchmark's workload at 1,000 events in a memory ledger: ten chunks of timeline."""
    ledger = Ledger.open("memory://")
    return ledger, record_run(ledger, 1_000)


def long_report(
    tmp_path: Path, run: tuple[Ledger, str] | None = None, page_end: str = ""
) -> tuple[Ledger, str, Path]:
    """A long run (`long_run` unless given) and its page, written to a file.

    `page_end` is markup put just before ``</body>``, after the page's own script.
    """
    ledger, run_id = run or long_run()
    page = render_report(build_report(ledger, run_id))
    assert page.count(LATER) > 5
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", f"{page_end}</body>"), encoding="utf-8")
    return ledger, run_id, path


def built(dom: str) -> str:
    """A dumped DOM without the chunks the script has not built (text there, not elements)."""
    return re.sub(r'<noscript class="al-later">.*?</noscript>', "", dom, flags=re.S)


def test_the_address_of_the_last_event_builds_it_and_marks_it(tmp_path: Path) -> None:
    """Opened at ``#ev-N`` of the run's last event, the page builds it and outlines it."""
    ledger, run_id, path = long_report(tmp_path)
    last = ledger.events(run_id)[-1]
    dom = chromium(tmp_path, "--dump-dom", f"{path.as_uri()}#ev-{last.position}").stdout.decode()
    element = f'<div class="ev k-{last.kind} al-target" id="ev-{last.position}"'
    assert element in built(dom)
    assert last.hash in built(dom).split(element)[1]


def test_a_link_to_the_last_evidence_lands_on_its_tool_result(tmp_path: Path) -> None:
    """The anchor of the last evidence id (in the run's last chunk) is built where it belongs."""
    ledger, run_id, path = long_report(tmp_path)
    results = [e for e in ledger.events(run_id) if e.kind == "ToolReturned"]
    anchor = f"evidence-{len(results)}"
    dom = built(chromium(tmp_path, "--dump-dom", f"{path.as_uri()}#{anchor}").stdout.decode())
    holder = f'<div class="ev k-ToolReturned" id="ev-{results[-1].position}"'
    assert holder in dom
    assert f'<span class="evid al-target" id="{anchor}">' in dom.split(holder)[1]


def test_each_built_event_gets_a_state_button_that_shows_the_state_there(tmp_path: Path) -> None:
    """The script adds "state here" to every event it builds; far down the run, it works too."""
    ledger, run_id = long_run()
    late = [e.position for e in ledger.events(run_id) if e.kind == "DeltaApplied"][-2]
    probe = f'<script>document.querySelector("#ev-{late} .stbtn").click();</script>'
    _, _, path = long_report(tmp_path, (ledger, run_id), probe)
    dom = chromium(tmp_path, "--dump-dom", f"{path.as_uri()}#ev-{late}").stdout.decode()
    assert shown_state(dom) == (late, world_state(ledger, run_id, late))
    events = built(dom).count('<div class="ev ')
    assert built(dom).count('<button class="stbtn" type="button" data-pos="') == events


def test_after_load_the_script_builds_the_whole_timeline(tmp_path: Path) -> None:
    """Given time after load, every chunk is built: each event is an element, in order."""
    ledger, run_id, path = long_report(tmp_path)
    dom = chromium(
        tmp_path, "--virtual-time-budget=20000", "--dump-dom", path.as_uri()
    ).stdout.decode()
    assert LATER not in dom
    positions = [int(p) for p in re.findall(r'<div class="ev [^"]*" id="ev-(\d+)"', dom)]
    assert positions == [e.position for e in ledger.events(run_id)]


def test_the_find_shortcut_builds_the_timeline_so_find_sees_the_last_step(
    tmp_path: Path,
) -> None:
    """Ctrl+F builds every chunk at once: the browser's find then finds the last tool's text.

    ``window.find`` searches the page as the find bar does. Just after load the last step's
    text is still in an unbuilt chunk, so it is not found until the shortcut is pressed.
    """
    ledger, run_id = long_run()
    last = [e for e in ledger.events(run_id) if e.kind == "ToolReturned"][-1]
    needle = json.dumps(str(last.payload["data"]["text"])[:60])
    probe = (
        f"<script>var before=window.find({needle});getSelection().removeAllRanges();"
        'document.dispatchEvent(new KeyboardEvent("keydown",{key:"f",ctrlKey:true}));'
        f'document.body.setAttribute("data-found",before+" "+window.find({needle}));</script>'
    )
    _, _, path = long_report(tmp_path, (ledger, run_id), probe)
    dom = chromium(tmp_path, "--dump-dom", path.as_uri()).stdout.decode()
    assert 'data-found="false true"' in dom
    assert LATER not in dom  # every chunk was built


def test_collapse_all_also_folds_the_steps_built_after_it(tmp_path: Path) -> None:
    """After "collapse all", the steps of chunks built later come folded too."""
    probe = (
        '<script>document.getElementById("al-collapse").click();'
        'document.dispatchEvent(new KeyboardEvent("keydown",{key:"f",ctrlKey:true}));</script>'
    )
    _, _, path = long_report(tmp_path, page_end=probe)
    dom = chromium(tmp_path, "--dump-dom", path.as_uri()).stdout.decode()
    assert LATER not in dom
    assert dom.count('<details class="step st-ok"') > 150
    assert '<details class="step st-ok" open' not in dom


def test_a_screenshot_of_the_page_is_not_blank(tmp_path: Path) -> None:
    """The drawn page has content: its PNG rows differ from one another and from white."""
    _, _, path = written_report(tmp_path, "reasoning.jsonl")
    png = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={png}", "--window-size=1280,2000", path.as_uri())
    width, height, changing = png_row_changes(png.read_bytes())
    assert (width, height) == (1280, 2000)
    assert changing > 0.01


def png_row_changes(data: bytes) -> tuple[int, int, float]:
    """Width, height and the share of non-zero bytes of a PNG's filtered scanlines.

    Chromium filters rows (Sub, Up, ...), so a blank page's rows are almost all zero bytes; a
    page with text and colour has many more that are not.
    """
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, chunks, width, height = 8, [], 0, 0
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            chunks.append(body)
        offset += 12 + length
    raw = zlib.decompress(b"".join(chunks))
    nonzero = len(raw) - raw.count(0)
    return width, height, nonzero / len(raw)


def test_report_pdf_prints_every_folded_section(tmp_path: Path) -> None:
    """``report --pdf`` writes a real PDF of the page, with what ``<details>`` fold opened."""
    from agentledger.cli import main

    db = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger.open(db) as ledger:
        run_id = ledger.import_file(GOLDEN / "pipeline.jsonl")
    out = tmp_path / "report.pdf"
    assert main(["--db", db, "report", run_id, "--pdf", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(b"%PDF-")
    assert data.count(b"/Type /Page") >= 2  # more than one page: the folded calls are printed
    assert not (tmp_path / "report.html").exists()


def test_the_diff_page_opens_in_chromium(tmp_path: Path) -> None:
    """``report A --diff B`` of two golden runs is laid out by the browser, steps and all."""
    from agentledger.cli._report_diff import render_diff_page
    from agentledger.replay import diff_runs

    ledger = Ledger.open("memory://")
    a = ledger.import_file(GOLDEN / "pipeline.jsonl")
    b = ledger.import_file(GOLDEN / "tools.jsonl")
    page = render_diff_page(diff_runs(ledger, a, b), ledger.verify(a), ledger.verify(b))
    path = tmp_path / "diff.html"
    path.write_text(page, encoding="utf-8")
    dom = chromium(tmp_path, "--dump-dom", path.as_uri()).stdout.decode()
    assert '<span id="diff-verdict">different</span>' in dom
    assert dom.count('id="unit-') >= 3


def test_the_cohort_page_opens_in_chromium(tmp_path: Path) -> None:
    """``report --cohort`` of golden runs (each paired with itself) is laid out by the browser."""
    from agentledger.cli._report_cohort import render_cohort_page
    from agentledger.replay import cohort_diff

    ledger = Ledger.open("memory://")
    a = [ledger.import_file(GOLDEN / name) for name in ("pipeline.jsonl", "tools.jsonl")]
    diff = cohort_diff(ledger, a, a)
    page = render_cohort_page(diff, {run_id: ledger.verify(run_id) for run_id in a})
    path = tmp_path / "cohort.html"
    path.write_text(page, encoding="utf-8")
    dom = chromium(tmp_path, "--dump-dom", path.as_uri()).stdout.decode()
    assert '<span id="cohort-verdict">identical</span>' in dom
    assert 'id="pair-2"' in dom
    assert "Every chain intact: 2 runs" in dom
