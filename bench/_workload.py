"""The ledger benchmarks' workload: seeded English-like text, realistic runs and a conversation.

Built before any timing starts and reproducible from a seed: `make_run_plans` gives runs of
agent steps (a plan, tool-using steps, a final answer; events of about 1 KB) and
`make_conversation` a conversation whose context grows by 500 bytes a call.
"""

from __future__ import annotations

# Seeded randomness builds reproducible synthetic text; a benchmark has no run context.
import random  # noqa: TID251
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ASSISTANT_BYTES",
    "CONVERSATION_CALLS",
    "SEED",
    "STEPS_PER_RUN",
    "USER_BYTES",
    "Conversation",
    "RunPlan",
    "StepPlan",
    "TextMaker",
    "make_conversation",
    "make_run_plans",
    "unique_content_bytes",
]

SEED = 2402
STEPS_PER_RUN = 25
CONVERSATION_CALLS = 200
USER_BYTES, ASSISTANT_BYTES = 400, 100

Conversation = Sequence[tuple[dict[str, str], dict[str, str]]]

# Synthetic text --------------------------------------------------------------------------------

_WORD_TEXT = (
    "the of and to in is that for it as with was on be by at this from or have an are not "
    "which but all were when we there can been has more if will one would so what their about "
    "out up into than them some could time these two may then first any like other its now "
    "over such only new most also after used made many before must through back years where "
    "much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never "
    "day same another know while last might us great old year off come since against go came "
    "right take three himself few house use during without again place around however home "
    "small found thought went say part once general high upon school every does got united "
    "left number course war until always away something fact though water less public put "
    "think almost hand enough far took head yet government system better set told nothing "
    "night end why called didn't eyes find going look asked later knew point next program "
    "city business give group toward young days let room president side social given present "
    "several order national possible rather second face per among form important often things "
    "looked early white case john become large big need four within felt along children saw "
    "best church ever least power development light report revenue invoice quarter figure "
    "growth margin customer supplier contract review"
)
_WORDS = tuple(_WORD_TEXT.split())


class TextMaker:
    """English-like text of exact byte sizes, from a word list and a seed."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def text(self, size: int) -> str:
        """ASCII sentences of exactly `size` bytes."""
        rng, words, length, capital = self._rng, [], 0, True
        while length < size:
            word = rng.choice(_WORDS)
            if capital:
                word, capital = word.capitalize(), False
            if rng.random() < 0.08:
                word, capital = word + ".", True
            words.append(word)
            length += len(word) + 1
        return " ".join(words)[: size - 1].rstrip(" .").ljust(size - 1, "s") + "."

    def ident(self, prefix: str) -> str:
        """A short id such as ``doc-4821``."""
        return f"{prefix}-{self._rng.randrange(10_000)}"

    def chance(self, p: float) -> bool:
        """True with probability `p`."""
        return self._rng.random() < p


# Realistic runs --------------------------------------------------------------------------------


@dataclass
class StepPlan:
    """What one agent step records: a model call, then a plan, tools, a delta, an answer."""

    name: str
    args: dict[str, Any]
    observation: dict[str, Any]
    response: dict[str, Any]
    usage: dict[str, int]
    patch: dict[str, Any]
    plan: dict[str, Any] | None = None
    tools: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    answer: str | None = None
    evidence: list[str] = field(default_factory=list)


@dataclass
class RunPlan:
    """One run: its question, system prompt and steps (plan, act..., final)."""

    question: str
    system: str
    steps: list[StepPlan]


def _tool(tm: TextMaker) -> tuple[str, dict[str, Any], dict[str, Any]]:
    arguments = {"query": tm.text(620), "top_k": 3, "filters": {"source": "kb", "lang": "en"}}
    hits = [
        {"id": tm.ident("doc"), "title": tm.text(40), "snippet": tm.text(130), "score": 0.71}
        for _ in range(3)
    ]
    return "search", arguments, {"hits": hits, "total": 3}


def _step(tm: TextMaker, index: int, kind: str) -> StepPlan:
    role = "user" if index == 0 else "tool"
    step = StepPlan(
        name=kind,
        args={"goal": tm.text(650), "inputs": [tm.ident("fact") for _ in range(4)]},
        observation={"role": role, "content": tm.text(350)},
        response={"role": "assistant", "content": tm.text(150)},
        usage={"input_tokens": 900 + 120 * index, "output_tokens": 40, "total_tokens": 0},
        patch={
            "facts": {tm.ident("fact"): tm.text(300), tm.ident("fact"): tm.text(200)},
            "progress": {"step": index, "status": "ok", "summary": tm.text(120)},
        },
    )
    if kind == "plan":
        step.plan = {
            "steps": [{"id": f"s{i}", "goal": tm.text(110), "tool": "search"} for i in range(5)]
        }
    elif kind == "act":
        step.tools = [_tool(tm) for _ in range(2 if tm.chance(0.35) else 1)]
    else:
        step.answer = tm.text(700)
        step.evidence = [tm.ident("doc") for _ in range(5)]
    return step


def make_run_plans(runs: int, steps: int = STEPS_PER_RUN, seed: int = SEED) -> list[RunPlan]:
    """`runs` runs of `steps` steps (5 to 8 events each), built before any timing starts."""
    tm = TextMaker(seed)
    kinds = ["plan"] + ["act"] * (steps - 2) + ["final"]
    return [
        RunPlan(tm.text(200), tm.text(600), [_step(tm, i, k) for i, k in enumerate(kinds)])
        for _ in range(runs)
    ]


def make_conversation(
    calls: int = CONVERSATION_CALLS, seed: int = SEED + 2
) -> list[tuple[dict[str, str], dict[str, str]]]:
    """Per call: the ~400-byte user/tool message it appends, and its ~100-byte answer."""
    tm = TextMaker(seed)
    return [
        (
            {"role": "user" if i % 2 == 0 else "tool", "content": tm.text(USER_BYTES)},
            {"role": "assistant", "content": tm.text(ASSISTANT_BYTES)},
        )
        for i in range(calls)
    ]


def unique_content_bytes(conversation: Conversation) -> int:
    """Sum of the distinct message contents' UTF-8 bytes."""
    distinct = {m["content"] for pair in conversation for m in pair}
    return sum(len(text.encode()) for text in distinct)
