"""``agentledger report``: the HTML page of a run, checked as text (no browser).

The golden runs are imported into memory ledgers and rendered; the page is parsed with the
standard library's HTML parser to check that every event is there, that every in-page link
lands on an element that exists (each cited evidence id on the tool result that returned it),
that nothing points outside the page, and that untrusted content stays text.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from agentledger.cli._main import main
from agentledger.cli._report import build_report
from agentledger.cli._report_html import (
    CHUNK_EVENTS,
    LATER_CLOSE,
    LATER_OPEN,
    VISIBLE_CHARS,
    ReportData,
    evidence_ids_in,
    render_report,
    unfold,
)
from agentledger.ledger import Ledger, Problem, VerifyReport
from agentledger.ledger.events import ToolErrorInfo
from agentledger.ledger.signed_note import generate_key
from agentledger.projections import world_state

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_RUNS = sorted(p.name for p in GOLDEN.glob("*.jsonl"))
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;</pre></script>'


@dataclass
class Page(HTMLParser):
    """A parsed report: elements by id (tag, attributes, and their ancestors' ids), links, text."""

    ids: dict[str, tuple[str, dict[str, str], list[str]]] = field(default_factory=dict)
    hrefs: list[str] = field(default_factory=list)
    srcs: list[str] = field(default_factory=list)
    scripts: list[dict[str, str]] = field(default_factory=list)
    stack: list[tuple[str, str | None]] = field(default_factory=list)
    texts: dict[str, list[str]] = field(default_factory=dict)
    csp: str = ""

    def __post_init__(self) -> None:
        """Initialise the parser."""
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Record ids, links, scripts and the CSP meta tag."""
        attributes = {k: v or "" for k, v in attrs}
        if "id" in attributes:
            assert attributes["id"] not in self.ids, f"duplicate id {attributes['id']}"
            parents = [i for _, i in self.stack if i]
            self.ids[attributes["id"]] = (tag, attributes, parents)
        if "href" in attributes:
            self.hrefs.append(attributes["href"])
        if "src" in attributes:
            self.srcs.append(attributes["src"])
        if tag == "script":
            self.scripts.append(attributes)
        if tag == "meta" and attributes.get("http-equiv") == "Content-Security-Policy":
            self.csp = attributes["content"]
        if tag not in {"meta", "input", "br", "img", "link"}:
            self.stack.append((tag, attributes.get("id")))

    def handle_endtag(self, tag: str) -> None:
        """Close the innermost open element of this tag."""
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        """Keep the text of each element with an id (its own text only)."""
        if self.stack and self.stack[-1][1]:
            self.texts.setdefault(str(self.stack[-1][1]), []).append(data)

    def text(self, element_id: str) -> str:
        """The text directly inside the element with this id."""
        return "".join(self.texts.get(element_id, []))


def parse(page: str) -> Page:
    """Parse a page."""
    parsed = Page()
    parsed.feed(page)
    parsed.close()
    return parsed


def golden(name: str) -> tuple[Ledger, str]:
    """A memory ledger holding one golden run, and its id."""
    ledger = Ledger.open("memory://")
    return ledger, ledger.import_file(GOLDEN / name)


@pytest.fixture(params=GOLDEN_RUNS)
def golden_page(request: pytest.FixtureRequest) -> tuple[Ledger, str, str, Page]:
    """Each golden run rendered: its ledger, id, page text and parsed page."""
    ledger, run_id = golden(request.param)
    text = render_report(build_report(ledger, run_id))
    return ledger, run_id, text, parse(text)


def test_every_event_of_a_golden_run_is_on_the_page(
    golden_page: tuple[Ledger, str, str, Page],
) -> None:
    """Each position has an element ``ev-N`` carrying its kind, in position order."""
    ledger, run_id, text, page = golden_page
    events = ledger.events(run_id)
    for record in events:
        _, attributes, _ = page.ids[f"ev-{record.position}"]
        assert attributes["data-kind"] == record.kind
    offsets = [text.index(f'id="ev-{r.position}"') for r in events]
    assert offsets == sorted(offsets)


def test_every_in_page_link_lands_on_an_element(golden_page: tuple[Ledger, str, str, Page]) -> None:
    """Every href is a fragment naming an id on the page; nothing is fetched from anywhere."""
    _, _, text, page = golden_page
    assert page.hrefs
    for href in page.hrefs:
        assert href.startswith("#"), href
        assert href[1:] in page.ids, href
    assert page.srcs == []
    assert not re.search(r"(?:src|href|action)\s*=\s*[\"']?\s*(?:https?:|//)", text, re.I)
    assert "@import" not in text
    assert "url(" not in text


def test_the_page_forbids_every_network_request(golden_page: tuple[Ledger, str, str, Page]) -> None:
    """The CSP meta tag allows nothing from anywhere; only inline style and script."""
    page = golden_page[3]
    assert "default-src 'none'" in page.csp
    assert "connect-src 'none'" in page.csp
    assert "http" not in page.csp


def test_each_cited_evidence_id_links_to_the_tool_result_that_returned_it(
    golden_page: tuple[Ledger, str, str, Page],
) -> None:
    """A citation's anchor sits inside the ToolReturned event whose data holds that id."""
    ledger, run_id, _, page = golden_page
    events = {e.position: e for e in ledger.events(run_id)}
    cited = [
        evidence
        for e in events.values()
        if e.kind == "SynthesisProduced"
        for evidence in e.payload.get("evidence_ids", [])
    ]
    returned = {
        evidence
        for e in events.values()
        if e.kind == "ToolReturned"
        for evidence in evidence_ids_in(e.payload.get("data"))
    }
    linked = [h[1:] for h in page.hrefs if h.startswith("#evidence-")]
    assert len(linked) >= 2 * len([c for c in cited if c in returned]) > 0 or not cited
    for anchor in linked:
        _, _, parents = page.ids[anchor]
        holder = next(p for p in reversed(parents) if p.startswith("ev-"))
        record = events[int(holder[3:])]
        assert record.kind == "ToolReturned"
        assert page.text(anchor) in evidence_ids_in(record.payload.get("data"))


def test_the_pipeline_answer_links_its_three_citations() -> None:
    """The pipeline golden run cites weather, route and café: each is a working link."""
    ledger, run_id = golden("pipeline.jsonl")
    page = parse(render_report(build_report(ledger, run_id)))
    texts = {page.text(h[1:]) for h in page.hrefs if h.startswith("#evidence-")}
    assert texts == {
        "weather:place:harbour:2026-06-13",
        "route:place:central-station->place:harbour:transit",
        "poi:cafe-brasa",
    }


def test_model_calls_show_their_full_messages_and_response() -> None:
    """Every message text and the response of each model call are in the page, escaped."""
    ledger, run_id = golden("reasoning.jsonl")
    text = render_report(build_report(ledger, run_id))
    for record in ledger.events(run_id):
        if record.kind != "ModelCalled":
            continue
        for message in ledger.conversation(record.payload["messages_ref"]):
            content = message.get("content")
            if isinstance(content, str) and content:
                assert _escaped(content) in text
        response = ledger.blob(record.payload["response_ref"])["message"]
        assert _escaped(response["content"]) in text


def test_guardrails_and_policy_decisions_are_highlighted() -> None:
    """GuardrailTripped and PolicyDecided events carry their highlight class."""
    ledger, run_id = golden("reasoning.jsonl")
    page = parse(render_report(build_report(ledger, run_id)))
    kinds = {
        attributes["data-kind"]: attributes["class"]
        for tag, attributes, _ in page.ids.values()
        if "data-kind" in attributes
    }
    assert "k-GuardrailTripped" in kinds["GuardrailTripped"]
    assert "k-PolicyDecided" in kinds["PolicyDecided"]


def test_steps_form_a_collapsible_tree_holding_their_events() -> None:
    """Each step is a <details> element, and its events sit inside it."""
    ledger, run_id = golden("pipeline.jsonl")
    page = parse(render_report(build_report(ledger, run_id)))
    for record in ledger.events(run_id):
        step = record.payload.get("step_id")
        if record.kind in {"StepStarted", "StepCompleted"}:
            tag, _, _ = page.ids[f"step-{step}"]
            assert tag == "details"
            assert f"step-{step}" in page.ids[f"ev-{record.position}"][2]


def test_the_static_world_state_is_the_final_state(
    golden_page: tuple[Ledger, str, str, Page],
) -> None:
    """Without JavaScript the viewer shows the state after the last position."""
    ledger, run_id, _, page = golden_page
    assert json.loads(page.text("world-state")) == world_state(ledger, run_id)


def test_the_header_names_agent_models_prompts_and_verdict() -> None:
    """Agent, model, prompt versions, code version, head hash and the verdict are shown."""
    ledger, run_id = golden("pipeline.jsonl")
    text = render_report(build_report(ledger, run_id))
    page = parse(text)
    assert "demo_pipeline:planner" in text
    assert "pipeline.planner@v1" in text
    assert "Chain intact" in page.text("verdict")
    assert page.text("head-hash") == ledger.events(run_id)[-1].hash
    assert "No signed checkpoint" in page.text("checkpoint-verdict")


def evil_run() -> tuple[Ledger, str]:
    """A run whose every field an attacker could fill holds markup."""
    ledger = Ledger.open("memory://")
    with ledger.record_run(EVIL, input={"question": EVIL}, tags=[EVIL]) as run:
        with run.step(EVIL) as step:
            run.model_call(
                provider="scripted",
                model=EVIL,
                messages=[{"role": "user", "content": EVIL}],
                response={"role": "assistant", "content": EVIL},
                step_id=step,
            )
            call_id, _ = run.tool_call(EVIL, {"q": EVIL}, step_id=step)
            run.tool_result(call_id, ok=True, type="x", data={"evidence_id": EVIL, "v": EVIL})
            run.tool_result(
                call_id, ok=False, type="x", error=ToolErrorInfo(code=EVIL, message=EVIL)
            )
            run.delta({EVIL: EVIL, "s": "</script><script>alert(2)</script>"})
            run.guardrail(EVIL, action=EVIL, message=EVIL)
        run.answer(EVIL, evidence_ids=[EVIL, "missing"])
    return ledger, run.run_id


def test_markup_in_run_content_is_rendered_as_text() -> None:
    """Script tags, attributes and entities from payloads never become markup."""
    ledger, run_id = evil_run()
    text = render_report(build_report(ledger, run_id))
    page = parse(text)
    assert len(page.scripts) == 2  # the embedded patches and the viewer's script
    assert page.srcs == []
    assert "<script>alert" not in text
    assert "<img" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "&amp;amp;" in text
    data = re.search(r'<script type="application/json" id="al-deltas">(.*?)</script>', text, re.S)
    assert data is not None
    assert json.loads(data.group(1))["deltas"][0][1]["s"] == "</script><script>alert(2)</script>"


def test_markup_in_an_evidence_id_still_links_safely() -> None:
    """An evidence id full of markup gets a plain anchor id and a working link."""
    ledger, run_id = evil_run()
    page = parse(render_report(build_report(ledger, run_id)))
    links = [h[1:] for h in page.hrefs if h.startswith("#evidence-")]
    assert links
    assert all(page.text(anchor) == EVIL for anchor in links)
    assert all(re.fullmatch(r"evidence-\d+", anchor) for anchor in links)


def test_a_broken_chain_is_named_on_the_page() -> None:
    """Each verify problem is listed under a BROKEN verdict."""
    ledger, run_id = golden("tools.jsonl")
    data = build_report(ledger, run_id)
    problem = Problem(run_id, 7, "hash mismatch", f"payload changed {EVIL}")
    broken = ReportData(**{**vars(data), "verify": VerifyReport(problems=[problem])})
    text = render_report(broken)
    page = parse(text)
    assert "BROKEN" in page.text("verdict")
    assert f"run {run_id} position 7: hash mismatch" in text
    assert EVIL not in text


def test_the_page_grows_linearly_with_the_run() -> None:
    """Doubling the number of deltas (each touching the state) about doubles the page."""

    def size(deltas: int) -> int:
        ledger = Ledger.open("memory://")
        with ledger.record_run("grow") as run:
            for index in range(deltas):
                run.delta({f"key{index}": {"value": index, "text": "x" * 40}})
        return len(render_report(build_report(ledger, run.run_id)))

    small, large = size(200), size(400)
    assert large < 2.2 * small


def test_report_command_writes_the_file_and_checks_a_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report -o`` writes the page; a checkpoint that holds and one with a wrong key."""
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger.open(url) as ledger:
        run_id = ledger.import_file(GOLDEN / "tools.jsonl")
        signer, verifier = generate_key("example.com/log")
        (tmp_path / "c.checkpoint").write_text(ledger.checkpoint(signer), encoding="utf-8")
    _, stranger = generate_key("example.com/log")
    out = tmp_path / "r.html"
    assert main(["--db", url, "report", run_id[:8], "-o", str(out)]) == 0
    assert 'id="ev-22"' in out.read_text(encoding="utf-8")
    checkpoint = ["--checkpoint", str(tmp_path / "c.checkpoint")]
    assert (
        main(["--db", url, "report", run_id, "-o", str(out), *checkpoint, "--vkey", verifier]) == 0
    )
    assert "Checkpoint holds" in parse(out.read_text("utf-8")).text("checkpoint-verdict")
    assert (
        main(["--db", url, "report", run_id, "-o", str(out), *checkpoint, "--vkey", stranger]) == 1
    )
    assert "FAILED" in parse(out.read_text("utf-8")).text("checkpoint-verdict")
    capsys.readouterr()
    assert main(["--db", url, "report", run_id]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")
    assert main(["--db", url, "report", run_id, *checkpoint]) == 2


def _escaped(text: str) -> str:
    """Run content as the page escapes it in element content (quotes left as they are)."""
    import html

    return html.escape(text, quote=False)


def conversation_run(calls: int, *, text: str = "") -> tuple[Ledger, str]:
    """One conversation growing by a response and a tool message a call, for `calls` calls."""
    ledger = Ledger.open("memory://")
    with ledger.record_run("chat") as run:
        messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}]
        for index in range(calls):
            response = {"role": "assistant", "content": f"answer number {index}"}
            run.model_call(provider="scripted", model="m", messages=messages, response=response)
            messages = [*messages, response, {"role": "tool", "content": f"result {index}{text}"}]
    return ledger, run.run_id


def test_each_model_call_shows_only_the_messages_no_earlier_call_showed() -> None:
    """A growing conversation shows each message once; later calls point at the earlier call."""
    ledger, run_id = conversation_run(4)
    text = render_report(build_report(ledger, run_id))
    page = parse(text)
    calls = [e.position for e in ledger.events(run_id) if e.kind == "ModelCalled"]
    assert text.count("be brief") == 1
    assert text.count("result 1<") == 1
    assert text.count("answer number 1<") == 1
    for earlier, later in itertools.pairwise(calls):
        assert f'as in <a href="#ev-{earlier}">position {earlier}</a>' in text
        assert f"ev-{earlier}" in page.ids
        assert later > earlier
    note = f"Messages (8): 7 earlier messages as in position {calls[2]} (its messages and response)"
    assert note in re.sub(r"<[^>]+>", "", text)


def test_a_growing_conversation_keeps_the_page_linear() -> None:
    """Doubling the calls of one growing conversation about doubles the page, not quadruples."""

    def size(calls: int) -> int:
        ledger, run_id = conversation_run(calls, text=" with some words" * 20)
        return len(render_report(build_report(ledger, run_id)))

    assert size(80) < 2.2 * size(40)


def test_a_long_conversation_is_read_in_a_few_queries_not_node_by_node() -> None:
    """A page of 60 calls over one growing history reads its blobs in batches, not one by one."""
    ledger, run_id = conversation_run(60)
    whole = render_report(build_report(ledger, run_id))
    batches: list[int] = []
    store = ledger.recorder
    get_blobs = store.get_blobs

    def batch(refs: Any) -> dict[str, Any]:  # every blob read goes through the store's lookup
        batches.append(len(refs))
        return dict(get_blobs(refs))

    store.get_blobs = batch
    try:
        assert render_report(build_report(ledger, run_id)) == whole
    finally:
        del store.get_blobs
    assert len(batches) <= 6  # breadth-first chains (two per call) and the other blobs
    assert sum(batches) >= 120


def test_a_long_message_is_cut_with_the_whole_text_in_a_closed_details() -> None:
    """Past the visible limit a message shows its start; the whole text sits in closed details."""
    long = "word " * 1_000 + "THE END"
    ledger = Ledger.open("memory://")
    with ledger.record_run("long") as run:
        run.model_call(
            provider="scripted",
            model="m",
            messages=[{"role": "user", "content": long}],
            response={"role": "assistant", "content": "ok"},
        )
    text = render_report(build_report(ledger, run.run_id))
    assert f"<pre>{'word ' * 400}" in text
    assert f"[... {len(long) - VISIBLE_CHARS:,} more characters]" in text
    whole = f"<summary>the whole text ({len(long):,} characters)</summary><pre>{long}</pre>"
    assert f"<details>{whole}" in text
    assert text.count("THE END") == 1


def test_report_pdf_without_a_browser_says_how_to_get_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Chromium: exit 2 naming the package (or the bad $AGENTLEDGER_CHROMIUM), no PDF."""
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger.open(url) as ledger:
        run_id = ledger.import_file(GOLDEN / "tools.jsonl")
    out = tmp_path / "r.pdf"
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("AGENTLEDGER_CHROMIUM", raising=False)
    assert main(["--db", url, "report", run_id, "--pdf", str(out)]) == 2
    assert "apt-get install chromium" in capsys.readouterr().err
    monkeypatch.setenv("AGENTLEDGER_CHROMIUM", str(tmp_path / "no-such-browser"))
    assert main(["--db", url, "report", run_id, "--pdf", str(out)]) == 2
    assert "no-such-browser" in capsys.readouterr().err
    assert not out.exists()


def test_a_printed_page_opens_every_folded_section() -> None:
    """The page printed to PDF has every ``<details>`` open, whatever its attributes."""
    from agentledger.cli._report_pdf import expanded

    page = '<details><summary>a</summary></details><details class="step" open id="s">'
    assert expanded(page).count("<details open") == 2
    assert "<details>" not in expanded(page)


def stepped_run(steps: int, *, text: str = "") -> tuple[Ledger, str]:
    """A run of `steps` steps, each a tool call, its result (evidence ``doc:N``) and a delta."""
    ledger = Ledger.open("memory://")
    with ledger.record_run("stepped") as run:
        for index in range(steps):
            with run.step("act", {"index": index}) as step:
                call_id, position = run.tool_call("search", {"q": index}, step_id=step)
                data = {"evidence_id": f"doc:{index}", "text": f"result {index} {text}"}
                run.tool_result(call_id, ok=True, type="search", data=data, caused_by=position)
                run.delta({"last": index}, step_id=step)
        run.answer("done", evidence_ids=[f"doc:{steps - 1}"])
    return ledger, run.run_id


def chunks_of(page: str) -> list[str]:
    """The timeline's chunks: the markup of each ``al-chunk`` box (later ones still wrapped)."""
    timeline = page[page.index('<div class="al-chunk"') : page.index('<script type="application')]
    return timeline.split('<div class="al-chunk"')[1:]


def test_a_long_timeline_is_cut_into_chunks_between_top_level_steps() -> None:
    """The first chunk is markup; each later one is wrapped for the script; steps stay whole."""
    ledger, run_id = stepped_run(100)
    page = render_report(build_report(ledger, run_id))
    chunks = chunks_of(page)
    assert len(chunks) > 3
    assert LATER_OPEN not in chunks[0]
    assert all(c.count(LATER_OPEN) == c.count(LATER_CLOSE) == 1 for c in chunks[1:])
    for chunk in chunks:
        assert chunk.count("<details") == chunk.count("</details>")
        events = chunk.count('<div class="ev ')
        assert events >= CHUNK_EVENTS or chunk is chunks[-1]
    positions = [int(p) for p in re.findall(r'<div class="ev [^"]*" id="ev-(\d+)"', page)]
    assert positions == [e.position for e in ledger.events(run_id)]


def test_markup_in_a_later_chunk_cannot_close_it() -> None:
    """Run content in a wrapped chunk holding ``</noscript>`` and a script stays text."""
    ledger, run_id = stepped_run(60, text=f"</noscript>{EVIL}")
    text = render_report(build_report(ledger, run_id))
    page = parse(text)
    assert len(page.scripts) == 2
    assert text.count("</noscript>") == text.count(LATER_CLOSE) + 2  # the head's and the viewer's
    assert text.count("&lt;/noscript&gt;") >= 60  # each tool result shows it, escaped
    assert all("&lt;/noscript&gt;" in chunk for chunk in chunks_of(text)[1:-1])


def test_the_printed_page_holds_every_chunk_unwrapped() -> None:
    """``report --pdf`` prints markup for every event: no chunk is left for a script to build."""
    from agentledger.cli._report_pdf import expanded

    ledger, run_id = stepped_run(100)
    page = render_report(build_report(ledger, run_id))
    printed = expanded(page)
    assert LATER_OPEN not in printed
    assert LATER_CLOSE not in printed
    assert unfold(page).count('<div class="ev ') == len(ledger.events(run_id))
    assert parse(printed).ids.keys() == parse(page).ids.keys()
