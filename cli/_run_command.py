"""`agentledger run QUESTION`: run a registered agent with real (or scripted) models, recorded.

Builds one model per role from ``--model`` specs (``openai:NAME``, ``anthropic:NAME``,
``scripted:FILE``; a bare spec covers every role, ``ROLE=SPEC`` one role; specs that are equal
share one model object, so one scripted file answers every role in call order), runs the agent
with the offline built-in tools and prints the answer on stdout and the run id on stderr. A
missing API key is reported naming its environment variable; a run whose model calls all
failed (no network, a server down) exits 1 naming the cause, whatever apology it answered.
``--prompt NAME=VERSION`` takes a role (``planner``) or a prompt name (``pipeline.planner``),
as ``rerun``, ``runs`` and ``diff`` do.

``--stream`` turns the agent's ``stream`` option on (recorded in the run's settings, so replay
rebuilds it) and prints the answer's text on stdout as it arrives, flushed chunk by chunk: the
text of the agent's answer role (``AgentSpec.answer_role``; a tools agent's turn that ends in tool
calls prints what it said first on its own line). When the recorded answer differs from the last
streamed text (the evidence check stripped a citation, a call failed and the run fell back) it
follows in full, after a note on stderr, so stdout always ends with the recorded answer; the run
summary goes to stderr as usual. With ``--json`` too, stdout is JSON Lines: one
``{"type": "chunk", ...}`` object per chunk, then one ``{"type": "result", ...}`` object. An agent
whose answer cannot stream (``coordinator``: its answer is a JSON decision) refuses ``--stream``.

Must not print or store keys, and must not bypass ``run_agent`` (the policy gate runs before
anything is recorded).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, TextIO

from agentledger.agents import (
    AGENTS,
    AgentConfig,
    AgentError,
    AgentResult,
    AgentRunError,
    ChunkInfo,
    GuardrailLimits,
    ModelCallInfo,
    RunHooks,
    agent_spec,
    build_agent,
    normalize_config,
    run_agent,
)
from agentledger.agents.models import ChatModel, ModelError, model_from_spec
from agentledger.cli._common import CliError, open_ledger, whole_number
from agentledger.replay import run_problem

__all__ = ["cmd_run", "parse_model_specs", "parse_prompt_versions", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the run command."""
    p = sub.add_parser("run", help="run an agent on a question and record every step")
    p.add_argument("question", help="the question or task")
    p.add_argument("--agent", choices=sorted(AGENTS), default="pipeline", help="orchestration")
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="[ROLE=]SPEC",
        help="openai:NAME, anthropic:NAME or scripted:FILE; ROLE=SPEC sets one role "
        "(repeatable); a bare SPEC is used for every other role",
    )
    p.add_argument("--base-url", help="API base URL for the vendor models (OpenAI-compatible)")
    p.add_argument("--seed", type=whole_number, default=0, help="seed of the run's random port")
    p.add_argument("--max-steps", type=whole_number, help="guardrail: steps / iterations per loop")
    p.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="NAME=VERSION",
        help="prompt version by role or prompt name, e.g. planner=v2 or pipeline.planner=v2 "
        "(repeatable)",
    )
    p.add_argument("--tag", action="append", default=[], help="tag the run (repeatable)")
    p.add_argument(
        "--subject",
        metavar="ID",
        help="the data subject the run's content belongs to: it is stored encrypted under the "
        "subject's key, and `agentledger erase --subject ID` erases it",
    )
    p.add_argument(
        "--stream",
        action="store_true",
        help="stream the answer's text to stdout as it arrives (the agent's 'stream' option; "
        "not the coordinator)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print run id, status and answer as JSON (with --stream: JSON Lines, one object "
        "per chunk, then the result)",
    )
    p.set_defaults(func=cmd_run)


def parse_model_specs(values: list[str]) -> tuple[str | None, dict[str, str]]:
    """Split ``--model`` values into the default spec and the per-role specs."""
    default: str | None = None
    roles: dict[str, str] = {}
    for value in values:
        head, sep, rest = value.partition("=")
        if sep and ":" not in head:
            roles[head] = rest
        elif default is None:
            default = value
        else:
            raise CliError(f"--model {value!r}: a default model was already given ({default!r})")
    return default, roles


def parse_prompt_versions(values: list[str]) -> dict[str, str]:
    """``--prompt NAME=VERSION`` values as a mapping (NAME: a role or a prompt name)."""
    versions: dict[str, str] = {}
    for value in values:
        name, sep, version = value.partition("=")
        if not sep or not name or not version:
            raise CliError(f"--prompt {value!r}: expected NAME=VERSION, e.g. planner=v2")
        versions[name] = version
    return versions


def _config(args: argparse.Namespace) -> AgentConfig:
    versions = parse_prompt_versions(args.prompt)
    limits = GuardrailLimits()
    if args.max_steps is not None:
        limits = limits.model_copy(update={"max_steps": args.max_steps})
    options: dict[str, Any] = {}
    if args.stream:
        spec = agent_spec(args.agent)
        if not spec.streams:
            streaming = ", ".join(name for name, s in sorted(AGENTS.items()) if s.streams)
            raise CliError(
                f"--stream: the {args.agent} agent cannot stream its answer (it is not a "
                f"model's free text); agents that stream: {streaming}"
            )
        options["stream"] = True
    return AgentConfig(seed=args.seed, limits=limits, prompt_versions=versions, options=options)


def by_role(agent: str, config: AgentConfig) -> AgentConfig:
    """``config`` with its prompt versions keyed by role, given by role or by prompt name."""
    names = dict(build_agent(agent, config).prompt_names())
    roles = {name: role for role, name in names.items()}
    versions: dict[str, str] = {}
    for key, version in config.prompt_versions.items():
        role = key if key in names else roles.get(key)
        if role is None:
            known = ", ".join(f"{r} ({n})" for r, n in names.items())
            raise CliError(
                f"--prompt {key}={version}: agent {agent!r} has no such role or "
                f"prompt; known: {known}"
            )
        versions[role] = version
    return config.model_copy(update={"prompt_versions": versions})


def _models(agent: str, config: AgentConfig, args: argparse.Namespace) -> dict[str, ChatModel]:
    default, per_role = parse_model_specs(args.model)
    roles = build_agent(agent, config).roles()
    unknown = sorted(set(per_role) - set(roles))
    if unknown:
        raise CliError(f"agent {agent!r} has no role {unknown[0]!r}; roles: {', '.join(roles)}")
    built: dict[str, ChatModel] = {}
    models: dict[str, ChatModel] = {}
    for role in roles:
        spec = per_role.get(role, default)
        if spec is None:
            raise CliError(f"no --model for role {role!r} (give a bare --model SPEC for all roles)")
        if spec not in built:
            try:
                built[spec] = model_from_spec(spec, base_url=args.base_url)
            except (ModelError, ValueError) as error:
                raise CliError(str(error)) from None
        models[role] = built[spec]
    return models


class _StreamPrinter:
    """Writes the answer role's streamed text to ``out`` as it arrives, one flush per chunk."""

    def __init__(self, role: str, out: TextIO, *, json_lines: bool) -> None:
        self._role = role
        self._out = out
        self._json_lines = json_lines
        self._segment: list[str] = []
        self.last: str | None = None
        """The text of the last streamed call of the answer role (None: nothing streamed)."""

    def hooks(self) -> RunHooks:
        """The run hooks that feed this printer."""
        return RunHooks(on_model_call=self.on_model_call, on_chunk=self.on_chunk)

    def on_chunk(self, info: ChunkInfo) -> None:
        """Print one chunk of the answer role's text."""
        text = info.chunk.text
        if info.role != self._role or not text:
            return
        self._segment.append(text)
        if self._json_lines:
            line = {"type": "chunk", "role": info.role, "text": text, "at_ms": info.chunk.at_ms}
            self._write(json.dumps(line, ensure_ascii=False) + "\n")
        else:
            self._write(text)

    def on_model_call(self, info: ModelCallInfo) -> None:
        """End the text of a finished call of the answer role on its own line."""
        if info.role == self._role:
            self.close_segment()

    def close_segment(self) -> None:
        """End the call being printed (if any), keeping its text as the last streamed one."""
        if not self._segment:
            return
        text = "".join(self._segment)
        self._segment.clear()
        self.last = text
        if not self._json_lines and not text.endswith("\n"):
            self._write("\n")

    def _write(self, text: str) -> None:
        with contextlib.suppress(BrokenPipeError):  # a reader that left stops the printing
            self._out.write(text)
            self._out.flush()


def cmd_run(args: argparse.Namespace) -> int:
    """Run the agent and print its answer."""
    try:
        config = by_role(args.agent, normalize_config(args.agent, _config(args)))
    except AgentError as error:
        raise CliError(str(error)) from None
    models = _models(args.agent, config, args)
    printer: _StreamPrinter | None = None
    role = agent_spec(args.agent).answer_role
    if args.stream and role is not None:
        printer = _StreamPrinter(role, sys.stdout, json_lines=args.json)
    with open_ledger(args) as ledger:
        try:
            result = run_agent(
                ledger,
                args.agent,
                args.question,
                models=models,
                config=config,
                tags=args.tag,
                hooks=printer.hooks() if printer is not None else None,
                subject=args.subject,
            )
        except AgentRunError as error:
            if printer is not None:
                printer.close_segment()
            print(f"agentledger: run {error.run_id} failed: {error.__cause__}", file=sys.stderr)
            return 1
        except AgentError as error:
            raise CliError(str(error)) from None
        problem = run_problem(ledger, result.run_id)  # every model call failed: no answer
    if printer is not None:
        status = _streamed_result(result, printer, json_lines=args.json, problem=problem)
    elif args.json:
        print(json.dumps(_summary(result, problem), indent=2, ensure_ascii=False))
        return 1 if problem else 0
    else:
        print(result.answer)
        _print_summary(result)
        status = 0
    if problem:
        print(f"agentledger: run {result.run_id}: {problem}", file=sys.stderr)
        return 1
    return status


def _summary(result: AgentResult, problem: str | None = None) -> dict[str, Any]:
    usage = result.usage
    return {
        "run_id": result.run_id,
        "status": result.status,
        "answer": result.answer,
        "model_calls": usage.model_calls,
        "tool_calls": usage.tool_calls,
        "total_tokens": usage.total_tokens,
        "error": problem,
    }


def _streamed_result(
    result: AgentResult, printer: _StreamPrinter, *, json_lines: bool, problem: str | None
) -> int:
    """After a streamed run: the answer when it is not what streamed last, then the summary."""
    printer.close_segment()
    streamed = printer.last == result.answer
    if json_lines:
        line = {"type": "result", **_summary(result, problem), "answer_streamed": streamed}
        print(json.dumps(line, ensure_ascii=False), flush=True)
        return 0
    if not streamed:
        if printer.last is not None:
            print(
                f"agentledger: the run's recorded answer ({result.status}) differs from the "
                "streamed text; it follows in full",
                file=sys.stderr,
                flush=True,
            )
        print(result.answer, flush=True)
    _print_summary(result)
    return 0


def _print_summary(result: AgentResult) -> None:
    usage = result.usage
    print(
        f"run {result.run_id} {result.status}: {usage.model_calls} model calls, "
        f"{usage.tool_calls} tool calls, {usage.total_tokens} tokens",
        file=sys.stderr,
    )
