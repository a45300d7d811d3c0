"""What a recorded call costs in instructions, counted by valgrind (unmoved by machine load).

``python -m bench.instructions [--calls N]`` runs the instrumented-call workload of
`bench_instrument` (the real ``openai`` SDK against the in-process loopback server, plain
``chat.completions.create``) under ``valgrind --tool=cachegrind --cache-sim=no`` three times: no
calls (start-up and warm-up only), N bare calls, and N calls instrumented into a run recorded in a
SQLite file. It prints the instructions per call of each and their ratio. The timed benchmark
(`python -m bench --only instrument`) is what the target is judged by; this count is how a change
to the recording path can be judged on a shared machine whose timings swing by a fifth from one
run to the next. Counts are of every thread (the loopback server's, the commit thread's); they
miss what instructions do not show (cache misses, the GIL handed between threads), so the timed
ratio is higher. Needs valgrind (``apt-get install valgrind``); takes about four minutes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_CALLS = 100
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def workload(calls: int, mode: str) -> None:
    """``calls`` openai creates, bare or instrumented into a SQLite ledger, after a warm-up."""
    from agentledger.agents.loopback import LoopbackServer
    from agentledger.ledger import Ledger
    from bench.bench_instrument import _answer, _clients, _sync_calls

    with (
        tempfile.TemporaryDirectory(prefix="agentledger-bench-instructions-") as directory,
        LoopbackServer(responder=_answer) as server,
    ):
        client = _clients(server.url)["openai"]()
        with Ledger.open(f"sqlite:///{Path(directory) / 'calls.db'}") as ledger:
            with ledger.record_run("warm-up") as run:
                _sync_calls(run.instrument(client), "openai", False, 10)
            _sync_calls(client, "openai", False, 10)
            if mode == "bare":
                _sync_calls(client, "openai", False, calls)
            elif mode == "instrumented":
                with ledger.record_run("bench-instructions") as run:
                    _sync_calls(run.instrument(client), "openai", False, calls)


def count(calls: int, mode: str) -> int:
    """Instructions valgrind counts for one run of the workload."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        msg = "valgrind is not installed (apt-get install valgrind)"
        raise RuntimeError(msg)
    found = subprocess.run(
        [
            valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "bench.instructions",
            "--workload",
            mode,
            "--calls",
            str(calls),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    match = _REFS.search(found.stderr)
    if match is None:
        msg = f"valgrind printed no instruction count:\n{found.stderr[-2000:]}"
        raise RuntimeError(msg)
    return int(match.group(1).replace(",", ""))


def main(argv: list[str]) -> int:
    """Print instructions per bare and per instrumented call, and their ratio."""
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS, help="calls per count")
    parser.add_argument("--workload", choices=["none", "bare", "instrumented"], help="internal")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    if args.workload is not None:
        workload(0 if args.workload == "none" else args.calls, args.workload)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing counted")
        return 1
    print(f"counting {args.calls} calls three times under valgrind (a few minutes)...")
    base = count(args.calls, "none")
    bare = (count(args.calls, "bare") - base) / args.calls
    instrumented = (count(args.calls, "instrumented") - base) / args.calls
    print(f"bare openai create:          {bare:,.0f} instructions per call")
    print(f"instrumented, SQLite ledger: {instrumented:,.0f} instructions per call")
    print(f"ratio: {instrumented / bare:.3f}x (recording: {instrumented - bare:,.0f} per call)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
