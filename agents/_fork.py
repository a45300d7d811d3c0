"""Forking a tool agent's conversation into a NEW linked run (the Tantra ``fork()``).

Owns ``fork_agent``: it reads a recorded ``tools`` run, takes the conversation of the main
agent's last finished turn (its last ModelCalled without tool calls, at or before
``at_position``), and starts a new run with ``relation="fork"``, ``parent_run_id`` and
``parent_position`` (that ModelCalled), the same configuration (rebuilt from the parent's
RunStarted) and the copied conversation as ``AgentInput.history``, followed by the new question.
The parent run is never touched. Must not record anything except through ``start_run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentledger.agents._registry import rebuild_agent
from agentledger.agents._runner import RecorderFactory, start_run
from agentledger.agents._types import AgentInput, AgentResult, RunHooks
from agentledger.agents.errors import ForkRefusedError
from agentledger.agents.models import ChatModel
from agentledger.agents.policy import PolicyGate
from agentledger.agents.prompts import PromptLibrary, default_library
from agentledger.ledger import Ledger
from agentledger.ledger.events import RunStarted
from agentledger.tools import ToolRegistry, builtin_registry

__all__ = ["fork_agent"]

FORKABLE = frozenset({"tools"})
"""Agents whose runs keep one conversation that a fork can continue."""


def fork_agent(
    ledger: Ledger,
    run_id: str,
    question: str,
    *,
    models: Mapping[str, ChatModel],
    tools: ToolRegistry | None = None,
    at_position: int | None = None,
    tags: Sequence[str] = (),
    recorder_factory: RecorderFactory | None = None,
    hooks: RunHooks | None = None,
    prompts: PromptLibrary | None = None,
) -> AgentResult:
    """Continue a copy of run ``run_id``'s conversation with ``question`` as a new fork run.

    Raises ``ForkRefusedError`` when the run's agent keeps no conversation, or no finished turn
    exists at or before ``at_position``.
    """
    events = ledger.events(run_id)
    started = RunStarted.model_validate(events[0].payload)
    if started.agent not in FORKABLE:
        raise ForkRefusedError(run_id, f"agent {started.agent!r} keeps no single conversation")
    library = prompts or default_library()
    orchestration, config = rebuild_agent(started, prompts=library)
    candidates = [
        record
        for record in events
        if record.kind == "ModelCalled"
        and (at_position is None or record.position <= at_position)
        and record.payload.get("actor") == "agent"
        and record.payload.get("response_ref")
    ]
    turn = next(
        (
            record
            for record in reversed(candidates)
            if not ledger.blob(record.payload["response_ref"])["message"].get("tool_calls")
        ),
        None,
    )
    if turn is None:
        raise ForkRefusedError(run_id, "no finished turn of the agent to continue from")
    history = ledger.conversation(turn.payload["response_ref"])
    run_input = AgentInput(question=PolicyGate(config.policy).check(question).text, history=history)
    return start_run(
        recorder_factory or ledger.record_run,
        started.agent,
        orchestration,
        config,
        run_input,
        models=models,
        tools=tools if tools is not None else builtin_registry(),
        library=library,
        tags=tags,
        hooks=hooks,
        parent_run_id=run_id,
        parent_position=turn.position,
        relation="fork",
    )
