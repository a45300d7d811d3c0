"""CLI commands over recorded runs: replay, rerun, resume, fork.

``replay RUN|--all`` exits 0 when every run replays identically and 1 at a divergence (naming
position, kinds and changed paths); ``rerun`` prints each new run id (and why a rerun stopped,
failed or could not start: the batch goes on, and exits 1 at the end); ``resume`` and ``fork``
print the run id they completed (and why it failed). Models for what the record does
not hold come from ``--model [ROLE=]SPEC`` (as for ``run``); prompt versions beyond the
built-in library from ``--prompts FILE`` (JSON ``{"name": {"version": "text"}}``). Must not
bypass the replay package.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from agentledger.agents import AgentError, default_library
from agentledger.agents.models import ChatModel, ModelError, model_from_spec
from agentledger.agents.prompts import PromptLibrary
from agentledger.cli._common import (
    CliError,
    open_ledger,
    parse_time,
    plural,
    resolve_run,
    whole_number,
)
from agentledger.cli._run_command import parse_model_specs, parse_prompt_versions
from agentledger.ledger import Ledger
from agentledger.replay import (
    STALL_TIMEOUT_S,
    ContinueResult,
    Overrides,
    ReplayDivergenceError,
    ReplayError,
    ReplayResult,
    RerunResult,
    RunSelection,
    fork_run,
    replay_all,
    rerun_many,
    resume_run,
    select_runs,
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

    p = sub.add_parser(
        "rerun",
        help="re-evaluate runs with changed prompts, model or params",
        description="Re-evaluate one run, or a selection of original runs (not reruns or "
        "forks; completed ones unless --status says otherwise), as new linked runs: every "
        "request identical to a recorded one is served from the record. A new run carries "
        "the --new-tag tags, never its parent's; `show` names its parent (rerun-of=RUN). One "
        "rerun failing does not stop the others; the exit status is 1 if any failed.",
    )
    p.add_argument("run", nargs="?", help="run id or unique prefix")
    p.add_argument("--tag", help="select the original runs with this tag")
    p.add_argument(
        "--status",
        choices=["completed", "failed", "running"],
        help="select the original runs with this status (default for a selection: completed)",
    )
    p.add_argument(
        "--since",
        help="select the original runs started at or after: 2026-01-31, "
        "2026-01-31T09:00+01:00, 2h, 3d",
    )
    p.add_argument(
        "--of-prompt",
        metavar="NAME=VERSION",
        help="select the original runs recorded with this prompt version "
        "(NAME: a role such as planner, or a prompt name such as pipeline.planner)",
    )
    p.add_argument(
        "--new-tag",
        action="append",
        default=[],
        metavar="TAG",
        help="tag the new runs (repeatable); they inherit no tag of their parent",
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
    p.add_argument("--max-tokens", type=whole_number)
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
    p.add_argument("--json", action="store_true", help="print the new run as JSON")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("fork", help="start a new run from position N of a recorded run")
    p.add_argument("run", help="run id or unique prefix")
    p.add_argument("--at", type=whole_number, required=True, help="last position to copy")
    p.add_argument("--patch", help="JSON Merge Patch object applied to the world state at N")
    p.add_argument(
        "--new-tag",
        action="append",
        default=[],
        metavar="TAG",
        help="tag the new run (repeatable); it inherits no tag of its parent",
    )
    _model_option(p)
    p.add_argument("--allow-effects", action="store_true")
    _library_option(p)
    _entry_option(p)
    p.add_argument("--json", action="store_true", help="print the new run as JSON")
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
    """Replay one run or every run; exit 1 if any diverges (or, with --all, cannot be replayed).

    With --all a run that cannot be replayed (an imported function run without --entry, a
    LangGraph thread) is listed as not replayed and the others go on.
    """
    _check_replay_args(args)
    library = _library(args)
    results: list[ReplayResult] = []
    skipped: list[tuple[str, str]] = []  # --all: runs that cannot be replayed, and why
    interrupted = False
    with open_ledger(args, read_only="auto") as ledger:
        ids = ledger.run_ids() if args.all else [resolve_run(ledger, args.run)]
        bar = _progress("replay") if args.all and not args.json else None

        def keep(index: int, total: int, result: ReplayResult) -> None:
            results.append(result)
            if bar is not None:
                bar(index, total, result)

        try:
            for index, run_id in enumerate(ids, 1):
                try:
                    replay_all(
                        ledger,
                        [run_id],
                        prompts=library,
                        progress=partial(_one_of, keep, index, len(ids)),
                        entry=args.entry,
                        stall_timeout=args.stall_timeout,
                    )
                except (ReplayError, AgentError) as error:
                    if not args.all:
                        raise CliError(f"{type(error).__name__}: {error}") from None
                    skipped.append((run_id, f"{type(error).__name__}: {error}"))
        except KeyboardInterrupt:
            interrupted = True
            if bar is not None:
                print(file=sys.stderr)
    _print_replays(results, skipped, as_json=args.json)
    if interrupted:
        print(
            f"agentledger: interrupted after {len(results)} of {plural(len(ids), 'run')}; "
            "the results above are those replayed",
            file=sys.stderr,
        )
        return 130
    if skipped:
        print(
            f"agentledger: {plural(len(skipped), 'run')} could not be replayed (see above)",
            file=sys.stderr,
        )
    return 0 if all(r.identical for r in results) and not skipped else 1


def _one_of(
    keep: Callable[[int, int, ReplayResult], None],
    index: int,
    total: int,
    _one: int,
    _of: int,
    result: ReplayResult,
) -> None:
    """A one-run replay's progress reported as run ``index`` of ``total``."""
    keep(index, total, result)


def _print_replays(
    results: list[ReplayResult], skipped: list[tuple[str, str]], *, as_json: bool
) -> None:
    if as_json:
        found = [r.to_json() for r in results]
        found += [{"run_id": run_id, "replayed": False, "reason": why} for run_id, why in skipped]
        print(json.dumps(found, ensure_ascii=False, indent=2))
        return
    for result in results:
        if result.identical:
            state = "identical" if result.finished else "identical so far (run unfinished)"
            print(f"{result.run_id}  {state}: {plural(result.events, 'event')}")
        else:
            _print_divergence(result)
    for run_id, why in skipped:
        print(f"{run_id}  not replayed: {why}")


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
    """One run, or the original runs matching --tag / --status / --since / --of-prompt."""
    chosen = [args.tag, args.status, args.since, args.of_prompt]
    if args.run and any(chosen):
        raise CliError(
            "give a RUN or a selection (--tag, --status, --since, --of-prompt), not both"
        )
    if args.run:
        return [resolve_run(ledger, args.run)]
    if not any(chosen):
        raise CliError(
            "give a RUN or a selection: --tag TAG, --status S, --since TIME, --of-prompt NAME=V"
        )
    prompt: tuple[str, str] | None = None
    if args.of_prompt:
        name, sep, version = args.of_prompt.partition("=")
        if not sep or not name or not version:
            raise CliError(f"--of-prompt {args.of_prompt!r}: expected NAME=VERSION")
        prompt = (name, version)
    status = args.status or "completed"
    selection = RunSelection(
        tag=args.tag,
        status=status,
        since=parse_time("--since", args.since, ledger.clock),
        prompt=prompt,
    )
    ids = [i for i in select_runs(ledger, selection) if ledger.run(i).parent_run_id is None]
    if not ids:
        raise CliError(f"no {status} original runs match the selection")
    return ids


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
    results: list[RerunResult] = []
    with open_ledger(args, create=False) as ledger:
        ids = _selection(ledger, args)
        bar = _progress("rerun") if len(ids) > 1 else None

        def keep(index: int, total: int, result: RerunResult) -> None:
            results.append(result)
            if bar is not None:
                bar(index, total, result)

        try:
            rerun_many(
                ledger,
                ids,
                overrides,
                models=models or None,
                prompts=library,
                allow_effects=args.allow_effects,
                tags=args.new_tag,
                progress=keep,
                entry=args.entry,
            )
        except BaseException:
            _print_reruns(results, as_json=args.json)  # what was done before it broke
            raise
    if all(r.run_id is None for r in results):  # nothing could start: the request was wrong
        raise CliError(results[0].error if len(results) == 1 else _nothing_started(results))
    _print_reruns(results, as_json=args.json)
    bad = sum(1 for r in results if not r.ok)
    if bad and len(results) > 1:
        print(
            f"agentledger: {bad} of {plural(len(results), 'rerun')} did not complete",
            file=sys.stderr,
        )
    return 1 if bad else 0


def _nothing_started(results: list[RerunResult]) -> str:
    reasons = sorted({str(r.error) for r in results})
    return f"none of {plural(len(results), 'run')} could be rerun: " + "; ".join(reasons)


def _print_reruns(results: list[RerunResult], *, as_json: bool) -> None:
    """Each rerun: its new run id on stdout (or all as JSON), what happened on stderr."""
    if as_json:
        print(json.dumps([r.to_json() for r in results], indent=2, ensure_ascii=False))
    for result in results:
        if result.run_id is None:
            print(f"  rerun of {result.parent_run_id}: not rerun: {result.error}", file=sys.stderr)
            continue
        if not as_json:
            print(result.run_id)
        detail = (
            f"{result.served_model_calls} model calls served from the record, "
            f"{result.live_model_calls} live; {result.served_tool_calls} tool calls served, "
            f"{result.live_tool_calls} run"
        )
        print(f"  rerun of {result.parent_run_id}: {result.status}; {detail}", file=sys.stderr)
        if result.stopped:
            print(f"  stopped: {result.stopped}", file=sys.stderr)
        elif result.error:
            print(f"  {_problem(result.status, result.error)}", file=sys.stderr)


def _problem(status: str, error: str) -> str:
    """``failed: REASON`` for a failed run; the reason alone for a run that completed."""
    return f"failed: {error}" if status == "failed" else error


def _carry_on(
    args: argparse.Namespace,
    action: Callable[[Ledger, str, dict[str, ChatModel] | None, PromptLibrary], ContinueResult],
    describe: Callable[[str, ContinueResult], str],
) -> int:
    """Run a resume or fork, print the run id it completed and a summary; exit 1 if it failed."""
    _, models = _models(args)
    library = _library(args)
    with open_ledger(args, create=False) as ledger:
        run_id = resolve_run(ledger, args.run)
        try:
            result = action(ledger, run_id, models or None, library)
        except ReplayDivergenceError as error:
            print(f"agentledger: {error}", file=sys.stderr)
            return 1
        except (ReplayError, AgentError) as error:
            raise CliError(f"{type(error).__name__}: {error}") from None
    ok = result.status == "completed" and result.error is None
    if args.json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        return 0 if ok else 1
    print(result.run_id)
    print(f"  {describe(run_id, result)}", file=sys.stderr)
    if result.error:
        print(f"  {_problem(result.status, result.error)}", file=sys.stderr)
    return 0 if ok else 1


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
            tags=args.new_tag,
            entry=args.entry,
        ),
        lambda run_id, result: (
            f"fork of {run_id} at {args.at}: {result.status}, {result.new_events} new events"
        ),
    )
