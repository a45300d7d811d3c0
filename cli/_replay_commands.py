"""CLI commands over recorded runs: replay, rerun, resume, fork.

``replay RUN|--all`` exits 0 when every run replays identically and 1 at a divergence (naming
position, kinds and changed paths); ``rerun`` prints the new run id (and why it stopped, if it
did); ``resume`` and ``fork`` print the run id they completed. Models for what the record does
not hold come from ``--model [ROLE=]SPEC`` (as for ``run``); prompt versions beyond the
built-in library from ``--prompts FILE`` (JSON ``{"name": {"version": "text"}}``). Must not
bypass the replay package.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentledger.agents import AgentError, default_library
from agentledger.agents.models import ChatModel, ModelError, model_from_spec
from agentledger.agents.prompts import PromptLibrary
from agentledger.cli._common import CliError, open_ledger, parse_time, plural, resolve_run
from agentledger.cli._run_command import parse_model_specs, parse_prompt_versions
from agentledger.ledger import Ledger, RunQuery
from agentledger.replay import (
    STALL_TIMEOUT_S,
    ContinueResult,
    Overrides,
    ReplayDivergenceError,
    ReplayError,
    ReplayResult,
    fork_run,
    replay_all,
    rerun_many,
    resume_run,
)

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add replay, rerun, resume and fork."""
    p = sub.add_parser("replay", help="re-execute recorded runs offline; exit 1 if one diverges")
    p.add_argument("run", nargs="?", help="run id or unique prefix")
    p.add_argument("--all", action="store_true", help="replay every run in the ledger")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    _entry_option(p)
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=STALL_TIMEOUT_S,
        metavar="S",
        help="seconds a concurrent call may wait for the events recorded before it "
        f"before replay reports a divergence (default {STALL_TIMEOUT_S:g})",
    )
    _library_option(p)
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("rerun", help="re-evaluate runs with changed prompts, model or params")
    p.add_argument("run", nargs="?", help="run id or unique prefix")
    p.add_argument("--tag", help="select the completed runs with this tag")
    p.add_argument(
        "--since",
        help="select the completed runs started at or after: 2026-01-31, "
        "2026-01-31T09:00+01:00, 2h, 3d",
    )
    p.add_argument(
        "--of-prompt",
        metavar="NAME=VERSION",
        help="select the completed runs recorded with this prompt version",
    )
    p.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="NAME=VERSION",
        help="prompt version by role or prompt name, e.g. planner=v2 (repeatable)",
    )
    _model_option(p)
    p.add_argument("--temperature", type=float)
    p.add_argument("--max-tokens", type=int)
    p.add_argument(
        "--allow-effects",
        action="store_true",
        help="let effectful tools (send_message...) run again",
    )
    _library_option(p)
    _entry_option(p)
    p.add_argument("--json", action="store_true", help="print the new runs and answers as JSON")
    p.set_defaults(func=cmd_rerun)

    p = sub.add_parser("resume", help="continue a run whose process died mid-way")
    p.add_argument("run", help="run id or unique prefix")
    _model_option(p)
    p.add_argument(
        "--allow-effects",
        action="store_true",
        help="call again an effectful tool whose result was never recorded",
    )
    _library_option(p)
    _entry_option(p)
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("fork", help="start a new run from position N of a recorded run")
    p.add_argument("run", help="run id or unique prefix")
    p.add_argument("--at", type=int, required=True, help="last position to copy")
    p.add_argument("--patch", help="JSON Merge Patch object applied to the world state at N")
    _model_option(p)
    p.add_argument("--allow-effects", action="store_true")
    _library_option(p)
    _entry_option(p)
    p.set_defaults(func=cmd_fork)


def _entry_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--entry",
        metavar="MODULE:QUALNAME",
        help="for a run recorded from a function (record_function): the function to run, "
        "imported from the working directory or PYTHONPATH (default: the one the run names; "
        "required for an imported run)",
    )


def _model_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="[ROLE=]SPEC",
        help="openai:NAME, anthropic:NAME or scripted:FILE for calls the record "
        "does not answer; ROLE=SPEC for one role",
    )
    p.add_argument("--base-url", help="API base URL for the vendor models")


def _library_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prompts",
        metavar="FILE",
        help='extra prompt versions: JSON {"name": {"version": "text"}}',
    )


def _library(args: argparse.Namespace) -> PromptLibrary:
    library = default_library()
    if not getattr(args, "prompts", None):
        return library
    path = Path(args.prompts)
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as error:
        raise CliError(f"--prompts {path}: {error}") from None
    if not isinstance(data, dict):
        raise CliError(f'--prompts {path}: expected {{"name": {{"version": "text"}}}}')
    for name, versions in data.items():
        if not isinstance(versions, dict) or not all(isinstance(t, str) for t in versions.values()):
            raise CliError(f"--prompts {path}: {name!r} must map versions to prompt texts")
        for version, text in versions.items():
            library = library.with_prompt(name, version, text)
    return library


def _models(args: argparse.Namespace) -> tuple[Overrides, dict[str, ChatModel]]:
    default, per_role = parse_model_specs(args.model)
    built: dict[str, ChatModel] = {}
    models: dict[str, ChatModel] = {}
    for role, spec in [("default", default), *per_role.items()]:
        if spec is None:
            continue
        if spec not in built:
            try:
                built[spec] = model_from_spec(spec, base_url=args.base_url)
            except (ModelError, ValueError) as error:
                raise CliError(str(error)) from None
        models[role] = built[spec]
    return Overrides(model=default, models=per_role, base_url=args.base_url), models


def _print_divergence(result: ReplayResult) -> None:
    found = result.divergence
    assert found is not None
    print(f"{result.run_id}  DIVERGED at position {found.position}: {found.summary()}")
    for change in found.changes[:10]:
        expected = json.dumps(change.expected, ensure_ascii=False)[:120]
        actual = json.dumps(change.actual, ensure_ascii=False)[:120]
        print(f"    {change.path}\n      recorded: {expected}\n      replayed: {actual}")


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay one run or every run; exit 1 if any diverges."""
    _check_replay_args(args)
    library = _library(args)
    results: list[ReplayResult] = []
    interrupted = False
    with open_ledger(args, create=False) as ledger:
        ids = ledger.run_ids() if args.all else [resolve_run(ledger, args.run)]
        bar = _progress("replay") if args.all and not args.json else None

        def keep(index: int, total: int, result: ReplayResult) -> None:
            results.append(result)
            if bar is not None:
                bar(index, total, result)

        try:
            replay_all(
                ledger,
                ids,
                prompts=library,
                progress=keep,
                entry=args.entry,
                stall_timeout=args.stall_timeout,
            )
        except (ReplayError, AgentError) as error:
            raise CliError(f"{type(error).__name__}: {error}") from None
        except KeyboardInterrupt:
            interrupted = True
            if bar is not None:
                print(file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_json() for r in results], ensure_ascii=False, indent=2))
    else:
        for result in results:
            if result.identical:
                state = "identical" if result.finished else "identical so far (run unfinished)"
                print(f"{result.run_id}  {state}: {plural(result.events, 'event')}")
            else:
                _print_divergence(result)
    if interrupted:
        print(
            f"agentledger: interrupted after {len(results)} of {plural(len(ids), 'run')}; "
            "the results above are those replayed",
            file=sys.stderr,
        )
        return 130
    return 0 if all(r.identical for r in results) else 1


def _check_replay_args(args: argparse.Namespace) -> None:
    if bool(args.run) == bool(args.all):
        raise CliError("give a RUN or --all")
    if args.all and args.entry:
        raise CliError("--entry names the function of one run: give a RUN, not --all")
    if args.stall_timeout <= 0:
        raise CliError(f"--stall-timeout must be positive, got {args.stall_timeout:g}")


def _progress(verb: str) -> Any:
    """A progress bar on stderr, or None when stderr is not a terminal (a log file, a pipe)."""
    if not sys.stderr.isatty():
        return None

    def report(index: int, total: int, result: Any) -> None:
        width = 30
        done = width * index // total
        bar = "#" * done + "-" * (width - done)
        print(f"\r{verb} [{bar}] {index}/{total} {result.run_id[:8]}", end="", file=sys.stderr)
        if index == total:
            print(file=sys.stderr)

    return report


def _selection(ledger: Ledger, args: argparse.Namespace) -> list[str]:
    """One run, or the completed original runs matching --tag / --since / --of-prompt."""
    chosen = [args.tag, args.since, args.of_prompt]
    if args.run and any(chosen):
        raise CliError("give a RUN or a selection (--tag, --since, --of-prompt), not both")
    if args.run:
        return [resolve_run(ledger, args.run)]
    if not any(chosen):
        raise CliError("give a RUN or a selection: --tag TAG, --since TIME, --of-prompt NAME=V")
    since = parse_time("--since", args.since, ledger.clock)
    runs = ledger.runs(RunQuery(tag=args.tag, since=since, status="completed"))
    ids = [r.run_id for r in reversed(runs) if r.parent_run_id is None]
    if args.of_prompt:
        name, sep, version = args.of_prompt.partition("=")
        if not sep:
            raise CliError(f"--of-prompt {args.of_prompt!r}: expected NAME=VERSION")
        ids = [i for i in ids if _uses_prompt(ledger, i, name, version)]
    if not ids:
        raise CliError("no completed original runs match the selection")
    return ids


def _uses_prompt(ledger: Ledger, run_id: str, name: str, version: str) -> bool:
    prompts = ledger.events(run_id, upto=1)[0].payload.get("config", {}).get("prompts", {})
    return any(
        (p.get("name") == name or role == name) and p.get("version") == version
        for role, p in prompts.items()
    )


def cmd_rerun(args: argparse.Namespace) -> int:
    """Rerun one run or a tagged selection; print each new run id."""
    versions = parse_prompt_versions(args.prompt)
    base, models = _models(args)
    overrides = Overrides(
        prompt_versions=versions,
        model=base.model,
        models=base.models,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        base_url=args.base_url,
    )
    library = _library(args)
    with open_ledger(args) as ledger:
        ids = _selection(ledger, args)
        progress = _progress("rerun") if len(ids) > 1 else None
        try:
            results = rerun_many(
                ledger,
                ids,
                overrides,
                models=models or None,
                prompts=library,
                allow_effects=args.allow_effects,
                progress=progress,
                entry=args.entry,
            )
        except (ReplayError, AgentError) as error:
            raise CliError(f"{type(error).__name__}: {error}") from None
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2, ensure_ascii=False))
    stopped = 0
    for result in results:
        if not args.json:
            print(result.run_id)
        detail = (
            f"{result.served_model_calls} model calls served from the record, "
            f"{result.live_model_calls} live; {result.served_tool_calls} tool calls served, "
            f"{result.live_tool_calls} run"
        )
        print(f"  rerun of {result.parent_run_id}: {result.status}; {detail}", file=sys.stderr)
        if result.stopped:
            stopped += 1
            print(f"  stopped: {result.stopped}", file=sys.stderr)
    return 1 if stopped else 0


def _carry_on(
    args: argparse.Namespace,
    action: Callable[[Ledger, str, dict[str, ChatModel] | None, PromptLibrary], ContinueResult],
    describe: Callable[[str, ContinueResult], str],
) -> int:
    """Run a resume or fork, print the run id it completed and a summary; exit 1 if it failed."""
    _, models = _models(args)
    library = _library(args)
    with open_ledger(args) as ledger:
        run_id = resolve_run(ledger, args.run)
        try:
            result = action(ledger, run_id, models or None, library)
        except ReplayDivergenceError as error:
            print(f"agentledger: {error}", file=sys.stderr)
            return 1
        except (ReplayError, AgentError) as error:
            raise CliError(f"{type(error).__name__}: {error}") from None
    print(result.run_id)
    print(f"  {describe(run_id, result)}", file=sys.stderr)
    return 0 if result.status == "completed" else 1


def cmd_resume(args: argparse.Namespace) -> int:
    """Resume a run; print its id and status."""
    return _carry_on(
        args,
        lambda ledger, run_id, models, library: resume_run(
            ledger,
            run_id,
            models=models,
            prompts=library,
            allow_effects=args.allow_effects,
            entry=args.entry,
        ),
        lambda _run_id, result: (
            f"resumed after {result.replayed_events} recorded events: {result.status}, "
            f"{result.new_events} new events"
        ),
    )


def cmd_fork(args: argparse.Namespace) -> int:
    """Fork a run at a position; print the new run id."""
    patch = None
    if args.patch is not None:
        try:
            patch = json.loads(args.patch)
        except ValueError as error:
            raise CliError(f"--patch: not JSON: {error}") from None
        if not isinstance(patch, dict):
            raise CliError("--patch: a JSON Merge Patch object, e.g. '{\"budget\": 20}'")
    return _carry_on(
        args,
        lambda ledger, run_id, models, library: fork_run(
            ledger,
            run_id,
            args.at,
            patch=patch,
            models=models,
            prompts=library,
            allow_effects=args.allow_effects,
            entry=args.entry,
        ),
        lambda run_id, result: (
            f"fork of {run_id} at {args.at}: {result.status}, {result.new_events} new events"
        ),
    )
