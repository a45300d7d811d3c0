"""run_agent, rebuild_agent, and the contract replay builds on.

A run's events are a deterministic function of its input, config, model answers and tool results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pytest

from agentledger import agents
from agentledger.agents import (
    AGENTS,
    AgentConfig,
    AgentInput,
    AgentUsageError,
    MissingModelError,
    Outcome,
    PromptMismatchError,
    RebuildError,
    RunContext,
    RunHalted,
    UnknownAgentError,
    default_library,
    execute_run,
    rebuild_agent,
    resolve_prompts,
    run_agent,
    start_run,
)
from agentledger.agents.models import (
    Attempt,
    ChatModel,
    Message,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    Usage,
)
from agentledger.agents.testing import (
    comparable_events,
    coordinator_script,
    load_scenario,
    memory_ledger,
    pipeline_script,
    reasoning_script,
    router_script,
    tool_agent_script,
)
from agentledger.ledger import Ledger, RunRecorder
from agentledger.ledger.events import ConfigIdentity, RunStarted
from agentledger.tools import builtin_registry

SCOUT: dict[str, Any] = {"name": "scout", "description": "finds places", "tools": ["find_pois"]}


def demo_run() -> tuple[str, str, dict[str, ScriptedModel], AgentConfig]:
    """The bundled demo scenario, as (agent, question, models, config)."""
    scenario = load_scenario()
    return scenario.agent, scenario.question, scenario.models, scenario.config


def reasoning_run() -> tuple[str, str, dict[str, ScriptedModel], AgentConfig]:
    """A REASON/THINK/TOOL run with a failure, a repair, bad JSON and an evidence reask."""
    models = reasoning_script(
        plan=["plan?", {"plan": ["TOOL", "ANSWER"]}],
        choices=[{"tool": "geocode", "args": {"place": "Olde"}}, {"tool": ""}],
        repairs=[{"tool": "geocode", "args": {"place": "Old Town"}}],
        answer=["Here [poi:nope].", "Here [place:old-town]."],
    )
    return "reasoning", "Where is Olde?", models, AgentConfig(seed=3)


def coordinator_run() -> tuple[str, str, dict[str, ScriptedModel], AgentConfig]:
    """A coordinator run with a delegation and the fallback note."""
    models = coordinator_script(
        decisions=[
            {"Action": "DELEGATE", "Agent": "utility", "Task": "6*7"},
            {"Action": "DONE", "Summary": "42"},
        ],
        workers={"utility": [("calculator", {"expression": "6*7"})]},
    )
    return "coordinator", "What is 6*7? My mail is a@b.org", models, AgentConfig()


def tools_run() -> tuple[str, str, dict[str, ScriptedModel], AgentConfig]:
    """A tool-agent run with a sub-agent."""
    models = tool_agent_script(
        turns=[("ask_scout", {"task": "cafe near Old Town"}), "See [poi:cafe-brasa]? maybe."],
        sub_agents={"scout": [("find_pois", {"near": "Old Town", "category": "cafe"}), "found"]},
    )
    return "tools", "Coffee?", models, AgentConfig(options={"sub_agents": [SCOUT]})


def router_run() -> tuple[str, str, dict[str, ScriptedModel], AgentConfig]:
    """A router run over budget."""
    step = {"agent": "geo", "args": {"place": "Old Town"}}
    models = router_script(plan={"router_plan": [step, step]}, answer="At [place:old-town].")
    return "router", "Where is Old Town?", models, AgentConfig(options={"budget": 1})


RUNS: dict[str, Callable[[], tuple[str, str, dict[str, ScriptedModel], AgentConfig]]] = {
    "pipeline": demo_run,
    "reasoning": reasoning_run,
    "coordinator": coordinator_run,
    "tools": tools_run,
    "router": router_run,
}


class RecordedModel:
    """A ChatModel answering each role's calls from a recorded run, in order.

    This is what replay's model port does: the recorded message, usage, cost and attempts.
    """

    def __init__(self, ledger: Ledger, run_id: str, role: str, provider: str, model: str) -> None:
        calls = [
            e.payload
            for e in ledger.events(run_id)
            if e.kind == "ModelCalled" and e.payload["actor"] == role
        ]
        self._provider = provider
        self._model = model
        self._answers = [
            ModelResponse(
                message=Message.model_validate(ledger.blob(c["response_ref"])["message"]),
                finish_reason=c["finish_reason"],
                usage=Usage(
                    input_tokens=c["usage"].get("input_tokens", 0),
                    output_tokens=c["usage"].get("output_tokens", 0),
                ),
                model=c["model"],
                provider=c["provider"],
                cost_usd=c.get("cost_usd"),
                attempts=[
                    Attempt.model_validate({"latency_ms": 0.0, **a}) for a in c.get("attempts", [])
                ],
            )
            for c in calls
        ]

    @property
    def name(self) -> str:
        """The recorded provider:model."""
        return f"{self._provider}:{self._model}"

    @property
    def provider(self) -> str:
        """The recorded provider."""
        return str(self._provider)

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The next recorded answer (the request is not checked here; replay compares events)."""
        del request
        return self._answers.pop(0)


def replay(source: Ledger, run_id: str, target: Ledger) -> str:
    """Re-execute a recorded run from its RunStarted alone, models answering from the record."""
    started = RunStarted.model_validate(source.events(run_id)[0].payload)
    orchestration, config = rebuild_agent(started)
    models: dict[str, ChatModel] = {
        role: RecordedModel(source, run_id, role, m.provider, m.model)
        for role, m in started.config.models.items()
    }
    run_input = AgentInput.model_validate(started.input)
    recorder = target.record_run(
        started.agent, input=started.input, config=started.config, tags=started.tags
    )
    with recorder:
        ctx = RunContext(
            models=models,
            tools=builtin_registry(),
            recorder=recorder,
            config=config,
            prompts=resolve_prompts(orchestration, config, default_library()),
            run_input=run_input,
            agent=started.agent,
        )
        execute_run(ctx, orchestration, run_input)
    return recorder.run_id


@pytest.mark.parametrize("agent", sorted(RUNS))
def test_re_executing_a_run_from_its_record_reproduces_every_event(agent: str) -> None:
    """rebuild_agent + execute_run with recorded answers records the same events.

    Timing fields aside; this is the contract replay is built on.
    """
    name, question, models, config = RUNS[agent]()
    live, again = memory_ledger("live"), memory_ledger("again")
    result = run_agent(live, name, question, models=models, config=config)
    copy_id = replay(live, result.run_id, again)
    assert comparable_events(again, copy_id) == comparable_events(live, result.run_id)


@pytest.mark.parametrize("agent", sorted(RUNS))
def test_the_same_run_twice_records_the_same_events(agent: str) -> None:
    """Same input, config, answers and tools: the same sequence and content of events."""
    first, second = memory_ledger("one"), memory_ledger("two")
    name, question, models, config = RUNS[agent]()
    a = run_agent(first, name, question, models=models, config=config)
    name, question, models, config = RUNS[agent]()
    b = run_agent(second, name, question, models=models, config=config)
    assert comparable_events(first, a.run_id) == comparable_events(second, b.run_id)


def test_rebuild_agent_recovers_the_orchestration_and_every_setting() -> None:
    """From the RunStarted payload alone: the same agent, options, limits, seed and prompts."""
    book = memory_ledger()
    config = AgentConfig(
        seed=42,
        prompt_versions={"agent": "v1"},
        options={"sub_agents": [SCOUT], "max_iterations": 3},
    )
    models = tool_agent_script(turns=["hi"], sub_agents={"scout": []})
    result = run_agent(book, "tools", "hello", models=models, config=config)
    payload = book.events(result.run_id)[0].payload
    orchestration, rebuilt = rebuild_agent(payload)
    assert orchestration.name == "tools"
    assert orchestration.roles() == ("agent", "agent:scout")
    assert rebuilt.seed == 42
    assert rebuilt.options["max_iterations"] == 3
    assert rebuilt == agents.normalize_config("tools", config)


def test_rebuild_agent_refuses_an_unknown_agent_or_bad_settings() -> None:
    """An agent name the registry lacks, or unreadable settings, is a RebuildError."""
    with pytest.raises(RebuildError, match="no such agent"):
        rebuild_agent(RunStarted(agent="mystery"))
    bad = RunStarted(agent="pipeline", config=ConfigIdentity(settings={"limits": {"x": 1}}))
    with pytest.raises(RebuildError, match="invalid settings"):
        rebuild_agent(bad)


def test_rebuild_agent_detects_a_prompt_whose_text_changed() -> None:
    """A library whose v1 planner text differs from the recorded hash is refused by name."""
    book = memory_ledger()
    models = pipeline_script(plan={"steps": [], "needs_clarification": "?"})
    result = run_agent(book, "pipeline", "q", models=models)
    payload = book.events(result.run_id)[0].payload
    edited = default_library().with_prompt("pipeline.planner", "v1", "Plan. Differently.")
    with pytest.raises(PromptMismatchError) as caught:
        rebuild_agent(payload, prompts=edited)
    assert (caught.value.role, caught.value.version) == ("planner", "v1")
    missing = default_library().with_prompt("other", "v1", "x")
    assert rebuild_agent(payload, prompts=missing)[0].name == "pipeline"


def test_unknown_agents_missing_models_and_bad_options_are_usage_errors() -> None:
    """Caller mistakes raise before anything is recorded."""
    book = memory_ledger()
    with pytest.raises(UnknownAgentError, match="known agents: pipeline"):
        run_agent(book, "nope", "q", models={})
    with pytest.raises(MissingModelError, match="role 'executor'"):
        run_agent(book, "pipeline", "q", models={"planner": ScriptedModel([])})
    with pytest.raises(AgentUsageError, match="invalid options"):
        run_agent(book, "pipeline", "q", models={}, config=AgentConfig(options={"x": 1}))
    with pytest.raises(AgentUsageError, match="roles 'pipeline' does not have"):
        run_agent(
            book,
            "pipeline",
            "q",
            models={"default": ScriptedModel([])},
            config=AgentConfig(prompt_versions={"chef": "v1"}),
        )
    assert book.runs() == []


def test_a_recorder_factory_opens_the_run() -> None:
    """recorder_factory is called with the agent, redacted input and config identity."""
    book = memory_ledger()
    seen: list[dict[str, Any]] = []

    def factory(agent: str, input: Any = None, **kwargs: Any) -> RunRecorder:  # noqa: A002
        seen.append({"agent": agent, "input": input, **kwargs})
        return book.record_run(agent, input=input, **kwargs)

    models = pipeline_script(plan={"steps": [], "needs_clarification": "?"})
    run_agent(book, "pipeline", "mail x@y.org", models=models, recorder_factory=factory)
    assert seen[0]["agent"] == "pipeline"
    assert seen[0]["input"] == {"question": "mail [redacted:email]"}
    assert isinstance(seen[0]["config"], ConfigIdentity)


class Lottery:
    """A tiny custom orchestration that draws from the run's seeded random port."""

    name: ClassVar[str] = "lottery"

    def roles(self) -> tuple[str, ...]:
        """No model roles."""
        return ()

    def prompt_names(self) -> Mapping[str, str]:
        """No prompts."""
        return {}

    def run(self, ctx: RunContext, run_input: AgentInput) -> Outcome:
        """Draw three numbers and record them as a delta."""
        del run_input
        draw = [ctx.random.randint(1, 49) for _ in range(3)]
        ctx.delta({"draw": draw})
        return Outcome("answered", " ".join(map(str, draw)))

    def fallback(self, ctx: RunContext, halt: RunHalted) -> Outcome:
        """Never halts."""
        del ctx
        return Outcome("stopped", halt.message)


def test_randomness_comes_from_the_seed_recorded_in_the_config() -> None:
    """The same seed draws the same numbers; another seed draws others."""
    book = memory_ledger()

    def draw(seed: int) -> str:
        config = AgentConfig(seed=seed)
        result = start_run(
            book.record_run,
            "lottery",
            Lottery(),
            config,
            AgentInput(question="draw"),
            models={},
            tools=builtin_registry(),
            library=default_library(),
        )
        settings = book.events(result.run_id)[0].payload["config"]["settings"]
        assert settings["seed"] == seed
        return result.answer

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


def test_every_public_name_resolves() -> None:
    """Everything in agentledger.agents.__all__ exists, and every agent is registered."""
    missing = [name for name in agents.__all__ if not hasattr(agents, name)]
    assert missing == []
    assert sorted(AGENTS) == ["coordinator", "pipeline", "reasoning", "router", "tools"]
