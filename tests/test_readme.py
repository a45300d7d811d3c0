"""The README's Python code blocks run, in order, as one script: the docs cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    """The ```python blocks of the README, in order."""
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_has_python_examples() -> None:
    """The README shows the library API in code, not only prose."""
    assert len(python_blocks()) >= 2


def test_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block in the README runs without error, sharing one namespace."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    for number, block in enumerate(python_blocks(), start=1):
        code = compile(block, f"README.md python block {number}", "exec")
        exec(code, namespace)  # noqa: S102 - running our own documentation is the point
