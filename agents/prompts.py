"""Named, versioned prompts: the ``PromptLibrary`` and the built-in prompt texts.

Owns prompt identity: a prompt is ``name`` + ``version`` + exact text, and its hash (the ledger's
blob ref of the text) is what RunStarted and every ModelCalled record. Orchestrations ask for a
role's prompt by name; the version comes from ``AgentConfig.prompt_versions`` (default ``v1``),
so a re-evaluation can run ``planner=v2`` and a diff shows exactly which text changed. A library
is immutable: ``with_prompt`` returns a new one. Templates use ``string.Template`` placeholders
(``$tools``, ``$catalog``, ``$instructions``) filled by the orchestration; the template, not the
rendered text, is the versioned prompt (the rendered text is in the recorded conversation).
Must not record events or read files at import time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from string import Template
from types import MappingProxyType
from typing import Any

from agentledger.ledger import blob_ref, canonical_json
from agentledger.ledger.events import PromptRef

__all__ = [
    "DEFAULT_VERSION",
    "PromptLibrary",
    "default_library",
    "describe_tools",
    "prompt_hash",
    "render",
]

DEFAULT_VERSION = "v1"


def prompt_hash(text: str) -> str:
    """The hash the ledger records for a prompt's text (the ref of its blob)."""
    return blob_ref(canonical_json(text))


def render(template: str, **values: str) -> str:
    """Fill a prompt template's ``$name`` placeholders (unknown placeholders stay as they are)."""
    return Template(template).safe_substitute(values)


def describe_tools(schemas: Iterable[Mapping[str, Any]]) -> str:
    """One line per tool for a prompt: ``- name(arg, arg?): description``."""
    lines = []
    for schema in schemas:
        parameters = schema.get("parameters")
        props = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
        required = parameters.get("required", []) if isinstance(parameters, dict) else []
        args = ", ".join(name if name in required else f"{name}?" for name in props)
        lines.append(f"- {schema.get('name')}({args}): {schema.get('description')}")
    return "\n".join(lines) or "- (none)"


class PromptLibrary:
    """Prompt texts by name and version; immutable once built."""

    def __init__(self, prompts: Mapping[str, Mapping[str, str]]) -> None:
        self._prompts: Mapping[str, Mapping[str, str]] = MappingProxyType(
            {name: MappingProxyType(dict(versions)) for name, versions in prompts.items()}
        )

    def text(self, name: str, version: str = DEFAULT_VERSION) -> str:
        """The text of ``name`` at ``version``; ``KeyError`` names what is missing."""
        try:
            return self._prompts[name][version]
        except KeyError:
            known = ", ".join(sorted(self._prompts.get(name, {}))) or "none"
            msg = f"no prompt {name!r} version {version!r} (versions: {known})"
            raise KeyError(msg) from None

    def has(self, name: str, version: str) -> bool:
        """Whether the library holds ``name`` at ``version``."""
        return version in self._prompts.get(name, {})

    def versions(self, name: str) -> tuple[str, ...]:
        """The versions of ``name``, sorted."""
        return tuple(sorted(self._prompts.get(name, {})))

    def ref(self, name: str, version: str = DEFAULT_VERSION) -> PromptRef:
        """The PromptRef a run records for this prompt (hash and text blob ref)."""
        digest = prompt_hash(self.text(name, version))
        return PromptRef(name=name, version=version, hash=digest, text_ref=digest)

    def with_prompt(self, name: str, version: str, text: str) -> PromptLibrary:
        """A new library with ``name`` at ``version`` added (or replaced)."""
        merged = {n: dict(v) for n, v in self._prompts.items()}
        merged.setdefault(name, {})[version] = text
        return PromptLibrary(merged)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._prompts))


_JSON_ONLY = "Reply with ONLY one minified JSON object: no prose, no Markdown, no code fence."
_CITE = (
    "Cite evidence by writing its id in square brackets, e.g. [poi:clocktower]; cite only ids "
    "from the evidence list you are given, and never invent one."
)

_BUILTIN: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "pipeline.planner": {
            "v1": (
                "You are the Planner of a planner -> executor -> synthesizer pipeline. Read the "
                "user's question and the world state and plan the steps that answer it.\n"
                f"{_JSON_ONLY} The shape is\n"
                '{"steps":[{"goal":"...","tool":"<tool name>","args":{...},'
                '"forEach":{"arg":"<argument>","values":[...]}}],"needs_clarification":null}\n'
                "Each step does one thing with one tool and the minimal arguments; use forEach to "
                "repeat a step over several values of one argument; omit forEach otherwise. If the "
                "question cannot be answered without more information, leave steps empty and put "
                "one short question in needs_clarification.\nTools:\n$tools"
            ),
            "v2": (
                "Plan tool steps for the question. "
                f"{_JSON_ONLY} "
                '{"steps":[{"goal":"...","tool":"...","args":{...}}],"needs_clarification":null}\n'
                "Prefer the fewest steps. Tools:\n$tools"
            ),
        },
        "pipeline.executor": {
            "v1": (
                "You are the Executor. You receive ONE plan step and the current world state. Call "
                "exactly ONE tool, with the minimal arguments that achieve the step's goal. Do not "
                "answer in prose."
            ),
        },
        "pipeline.synthesizer": {
            "v1": (
                "You are the Synthesizer. Write a concise, friendly answer to the user's question "
                "using only the world state and snippets you are given. "
                f"{_CITE} If world_state.errors says something could not be found, say so plainly."
            ),
        },
        "reasoning.reasoner": {
            "v1": (
                "You are REASON, the control plane of a REASON -> THINK -> TOOL agent. "
                f"{_JSON_ONLY}\nWhen asked for a plan, reply "
                '{"plan":["TOOL","ANSWER"],"needs_clarification":null}. When asked for the next '
                'tool, reply {"tool":"<name>","args":{...}}, or {"tool":"","args":{}} when you can '
                "answer. Tools:\n$tools"
            ),
        },
        "reasoning.thinker": {
            "v1": (
                "You are THINK. A tool call failed; read the error and propose ONE repaired tool "
                f'request as {{"tool":"<name>","args":{{...}}}}, or {{"tool":"","args":{{}}}} to '
                f"give up on it. {_JSON_ONLY}\nTools:\n$tools"
            ),
        },
        "reasoning.synthesizer": {
            "v1": (
                "Answer the user's question from the tool results you are given, briefly. "
                f"{_CITE} Say plainly what could not be computed or found."
            ),
        },
        "coordinator.coordinator": {
            "v1": (
                "You are the Coordinator. You never call tools yourself: you delegate one task at "
                "a time to one worker from the catalog, read its result, and decide what to do "
                "next.\n"
                f"{_JSON_ONLY} The shape is\n"
                '{"Action":"DELEGATE|DONE","Agent":"<worker or empty>","Task":"<task>",'
                '"Summary":"<final summary when DONE>"}\n'
                "Do not repeat a retrieval whose result you already have. When the request "
                "contains no schedule, send, create or update intent, delegate a fallback note "
                f"that keeps its information before DONE. {_CITE}\nWorkers:\n$catalog"
            ),
        },
        "coordinator.worker": {
            "v1": (
                "You are the $worker worker. Call exactly ONE of your tools per response, with the "
                "arguments the task needs. Do not summarize or plan.\nYour tools:\n$tools"
            ),
        },
        "tools.agent": {
            "v1": (
                "You are a helpful assistant with tools. Call tools when they help; when you have "
                f"what you need, answer briefly. {_CITE}"
            ),
        },
        "tools.subagent": {
            "v1": (
                "You are $name, a specialist agent called by another agent. $instructions Use your "
                "tools when they help and reply with a short, factual answer, citing evidence ids "
                "in square brackets."
            ),
        },
        "router.router": {
            "v1": (
                "You are the Router. Read the request and plan which specialist agents run, in "
                f"order. {_JSON_ONLY} The shape is\n"
                '{"router_plan":[{"agent":"<specialist>","args":{...}}],"needs_clarification":null,'
                '"risk_tags":[]}\n'
                "If the request is ambiguous, leave router_plan empty and ask one question in "
                "needs_clarification.\nSpecialists:\n$catalog"
            ),
        },
        "router.chat": {
            "v1": (
                "You are the Chat agent. Turn the structured results into a short Markdown reply. "
                f"Mention only places whose evidence ids you were given. {_CITE} Surface every "
                "caveat in the results (errors, weather warnings) plainly."
            ),
        },
    }
)


def default_library() -> PromptLibrary:
    """The built-in prompts (a new immutable library on every call)."""
    return PromptLibrary(_BUILTIN)
