"""``report --pdf FILE``: print a report page to PDF through a headless Chromium.

The page is written to a private temporary directory with every ``<details>`` opened and every
chunk of the timeline unwrapped (a printed page cannot be clicked or scrolled), and Chromium
prints it with networking, extensions and its first-run chores off, into a throw-away profile.
The browser is ``$AGENTLEDGER_CHROMIUM`` or the first of ``chromium``, ``chromium-browser``,
``google-chrome`` on the PATH; none gives a clear error naming how to install one.
Must not read the ledger.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from agentledger.cli._common import CliError
from agentledger.cli._report_html import unfold

__all__ = ["BROWSERS", "ENV_BROWSER", "find_browser", "print_pdf"]

ENV_BROWSER = "AGENTLEDGER_CHROMIUM"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT_S = 180
_FLAGS = (
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--no-pdf-header-footer",
)


def find_browser() -> str | None:
    """The Chromium to print with: ``$AGENTLEDGER_CHROMIUM``, else the first on the PATH."""
    chosen = os.environ.get(ENV_BROWSER)
    if chosen:
        return shutil.which(chosen) or (chosen if Path(chosen).is_file() else None)
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def expanded(page: str) -> str:
    """The page with every ``<details>`` open, so that printing shows what it folds away.

    The timeline's later chunks are unwrapped too (`unfold`), so the printed page holds every
    event whether or not the page's script has built them by the time Chromium prints.
    """
    page = unfold(page)
    return page.replace("<details>", "<details open>").replace("<details ", "<details open ")


def print_pdf(page: str, output: str) -> None:
    """Print ``page`` (a report's HTML) to the PDF file ``output``; `CliError` on failure."""
    browser = find_browser()
    if browser is None:
        where = os.environ.get(ENV_BROWSER)
        if where:
            raise CliError(f"report --pdf: ${ENV_BROWSER} names {where!r}, which is not a program")
        raise CliError(
            "report --pdf needs a Chromium browser: install one (Debian: apt-get install "
            f"chromium) or point ${ENV_BROWSER} at it; the HTML report itself needs none"
        )
    target = Path(output).resolve()
    if not target.parent.is_dir():
        raise CliError(f"cannot write {output!r}: {target.parent} is not a directory")
    with tempfile.TemporaryDirectory(prefix="agentledger-pdf-") as tmp:
        html = Path(tmp) / "report.html"
        html.write_text(expanded(page), encoding="utf-8")
        printed = Path(tmp) / "report.pdf"
        command = [browser, *_FLAGS, f"--user-data-dir={Path(tmp) / 'profile'}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--no-sandbox")  # Chromium refuses to start its sandbox as root
        command += [f"--print-to-pdf={printed}", html.as_uri()]
        try:
            done = subprocess.run(  # noqa: S603 - our own arguments, no shell
                command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise CliError(f"report --pdf: {browser} did not finish in {TIMEOUT_S} s") from None
        except OSError as e:
            raise CliError(f"report --pdf: cannot run {browser}: {e}") from None
        if done.returncode != 0 or not printed.is_file() or printed.read_bytes()[:5] != b"%PDF-":
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise CliError(
                f"report --pdf: {browser} printed no PDF (exit {done.returncode}): {last}"
            )
        try:
            shutil.copyfile(printed, target)
        except OSError as e:
            raise CliError(f"cannot write {output!r}: {e}") from None
    print(f"wrote {output} ({target.stat().st_size:,} bytes)", file=sys.stderr)
