"""The README's and the docs' Python code blocks run: the documentation cannot drift.

The README's ```python blocks run in order as one script. Each page under docs/ is a script of
its own: its blocks run in order in one namespace, in a fresh temporary directory. A page in
`SUBPROCESS` runs as one script file in a subprocess (``python -P``, in that directory), as a
user's script would: the OpenAI Agents SDK's package is named ``agents``, which this repository's
root folder of that name shadows wherever the root is on ``sys.path``, as it is under pytest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DOC_PAGES = sorted(DOCS.glob("*.md"))
NEEDS = {"recording-your-own-agent.md": "arecord_function"}
"""Pages whose examples use a `Ledger` method by name: they run where it exists."""
SUBPROCESS = frozenset({"openai-agents.md"})
"""Pages whose blocks import the top-level package ``agents`` (the OpenAI Agents SDK)."""


def python_blocks(page: Path = README) -> list[str]:
    """The ```python blocks of a Markdown page, in order."""
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


def run_blocks(page: Path) -> None:
    """Run a page's Python blocks in order, sharing one namespace.

    The namespace is a module registered under the page's name while it runs, as a user's
    module would be, so a function it defines can be recorded by its import path.
    """
    name = "docs_" + page.stem.replace("-", "_")  # never the name of a real package
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        for number, block in enumerate(python_blocks(page), start=1):
            # dont_inherit: a block runs as a pasted script would, without this module's
            # `from __future__ import annotations` (which would turn annotations into strings)
            where = f"{page.relative_to(ROOT)} python block {number}"
            code = compile(block, where, "exec", dont_inherit=True)
            exec(code, module.__dict__)  # noqa: S102 - running our own documentation is the point
    finally:
        del sys.modules[name]


def run_blocks_in_subprocess(page: Path, where: Path) -> None:
    """Run a page's Python blocks as one script in a subprocess, outside the checkout."""
    script = where / f"docs_{page.stem.replace('-', '_')}.py"
    script.write_text("\n".join(python_blocks(page)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-P", script.name],
        cwd=where,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{page.name}: {done.stderr}"


def test_readme_has_python_examples() -> None:
    """The README shows the library API in code, not only prose."""
    assert len(python_blocks()) >= 1


def test_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block in the README runs without error, sharing one namespace."""
    monkeypatch.chdir(tmp_path)
    run_blocks(README)


def test_docs_pages_hold_the_moved_examples() -> None:
    """The detailed guides under docs/ keep their code examples, not only prose."""
    with_code = {page.name for page in DOC_PAGES if python_blocks(page)}
    expected = {
        "library.md",
        "trust.md",
        "world-state.md",
        "read-models.md",
        "agents.md",
        "replay-and-diff.md",
    }
    assert expected <= with_code


@pytest.mark.parametrize("page", DOC_PAGES, ids=[page.name for page in DOC_PAGES])
def test_docs_page_python_blocks_run(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Python block of a docs page runs without error, in order, in its own namespace."""
    from agentledger.ledger import Ledger

    needed = NEEDS.get(page.name)
    if needed is not None and not hasattr(Ledger, needed):
        pytest.skip(f"{page.name} records with Ledger.{needed}, which this build lacks")
    monkeypatch.chdir(tmp_path)
    if page.name in SUBPROCESS:
        run_blocks_in_subprocess(page, tmp_path)
    else:
        run_blocks(page)


@pytest.mark.parametrize("page", DOC_PAGES, ids=[page.name for page in DOC_PAGES])
def test_docs_page_python_blocks_compile(page: Path) -> None:
    """Every Python block of a docs page is valid Python (even where it cannot run here)."""
    for number, block in enumerate(python_blocks(page), start=1):
        compile(block, f"{page.relative_to(ROOT)} python block {number}", "exec")


def test_readme_links_every_docs_page() -> None:
    """The README's "More" list links each page under docs/, and every link it makes resolves."""
    text = README.read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[^)#]+)\)", text))
    assert {f"docs/{page.name}" for page in DOC_PAGES} <= linked
    assert all((ROOT / link).is_file() for link in linked)


def test_docs_links_resolve() -> None:
    """Every relative link in a docs page points to a file that exists."""
    for page in DOC_PAGES:
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).exists(), f"{page.name} links to missing {link}"
