"""Agents written as a user would: plain functions, an instrumented client, recorded tools.

Replay imports them back as ``user_code.agents:NAME`` (``tests/`` is on the import path under
pytest; subprocess tests set ``PYTHONPATH``). Module constants stand in for the prompt strings a
user edits between recording and replaying.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import anthropic  # noqa: TID251 - a user's agent calls the real SDK
import openai  # noqa: TID251 - a user's agent calls the real SDK

from agentledger.agents.testing import AsyncScriptedClient, ScriptedClient
from agentledger.ledger import RunRecorder, recorded_function

SYSTEM = "You are a terse travel assistant."
"""The system prompt the sync agents send (tests change it to make replay diverge)."""

CITIES = {"Oslo": 3, "Lima": 19, "Pune": 31, "Nuuk": -8}


def echo(messages: list[dict[str, Any]]) -> str:
    """A scripted answer: names what was asked last."""
    return f"answer to: {messages[-1]['content']}"


def by_city(messages: list[dict[str, Any]]) -> float:
    """Slower answers for earlier cities, so concurrent calls complete in reverse order."""
    text = str(messages[-1]["content"])
    order = list(CITIES)
    for index, city in enumerate(order):
        if city in text:
            return 0.002 * (len(order) - index)
    return 0.0


def triage(run: RunRecorder, question: str) -> str:
    """Two sequential model calls, a recorded tool and an answer (sync)."""
    client = run.instrument(ScriptedClient(echo))

    @run.recorded_tool
    def weather(city: str) -> dict[str, Any]:
        return {"city": city, "temp_c": CITIES[city]}

    first = client.chat.completions.create(
        model="scripted-1",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        temperature=0.0,
    )
    found = weather("Oslo")
    run.delta({"weather": {found["city"]: found["temp_c"]}})
    second = client.chat.completions.create(
        model="scripted-1",
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": f"It is {found['temp_c']} C. Summarise."},
        ],
    )
    answer = second.choices[0].message.content
    run.answer(answer)
    return str(answer)


def prompted(run: RunRecorder, question: str) -> str:
    """One call whose system prompt is the run's prompt ``system`` (rerun can change it)."""
    client = run.instrument(ScriptedClient(echo))
    reply = client.chat.completions.create(
        model="scripted-1",
        messages=[
            {"role": "system", "content": run.prompt_text("system")},
            {"role": "user", "content": question},
        ],
    )
    run.answer(reply.choices[0].message.content)
    return str(reply.choices[0].message.content)


async def gathered(run: RunRecorder, question: str) -> list[str]:  # noqa: ARG001
    """Concurrent calls in one run (asyncio.gather), completing out of start order."""
    client = run.instrument(AsyncScriptedClient(echo, latency_s=by_city))

    @run.recorded_tool(name="lookup")
    async def lookup(city: str) -> int:
        await asyncio.sleep(0)
        return CITIES[city]

    async def ask(city: str) -> str:
        reply = await client.chat.completions.create(
            model="scripted-1",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": city}],
        )
        temp = await lookup(city)
        return f"{reply.choices[0].message.content} ({temp} C)"

    answers = await asyncio.gather(*(ask(city) for city in CITIES))
    await run.aanswer(" | ".join(answers))
    return list(answers)


ASK = "{question} {city} #{turn}"
"""What `threaded` asks of each city (tests change it to make every call diverge)."""
SHOUT = ""
"""A city whose questions `threaded` asks in upper case (tests set it to change one thread's)."""


def threaded(run: RunRecorder, question: str) -> int:
    """Four threads writing one run: model calls, recorded tools and deltas."""
    client = run.instrument(ScriptedClient(echo, latency_s=by_city))

    @run.recorded_tool
    def temperature(city: str) -> int:
        return CITIES[city]

    def work(city: str) -> None:
        for turn in range(3):
            content = ASK.format(question=question, city=city, turn=turn)
            client.chat.completions.create(
                model="scripted-1",
                messages=[
                    {"role": "user", "content": content.upper() if city == SHOUT else content}
                ],
            )
            temperature(city)

    threads = [threading.Thread(target=work, args=(city,)) for city in CITIES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.delta({"cities": len(CITIES)})
    return len(CITIES)


def streamed(run: RunRecorder, question: str) -> str:
    """A streamed call: the chunks pass through, the assembled answer is recorded."""
    client = run.instrument(ScriptedClient(echo, chunk_size=4))
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(
            model="scripted-1", messages=[{"role": "user", "content": question}], stream=True
        )
    ]
    text = "".join(pieces)
    run.answer(text)
    return text


def failing(run: RunRecorder, question: str) -> None:
    """A tool that raises: the failure is recorded and the run fails."""

    @run.recorded_tool(effectful=True)
    def send(to: str) -> None:
        raise ConnectionError(f"cannot reach {to}")

    send(question)


@recorded_function(agent="marked", tags=["decorated"], prompts={"system": ("v1", SYSTEM)})
def marked(run: RunRecorder, question: str) -> str:
    """The decorator form: defaults for agent, tags and prompts."""
    return prompted(run, question)


DESK = "Write to jörg@exämple.de or call +44 20 7946 0958."


def desk(messages: list[dict[str, Any]]) -> str:
    """A scripted answer carrying personal data (the recorded run holds it redacted)."""
    del messages
    return DESK


def contact(run: RunRecorder, question: str) -> str:
    """A model answer and a tool result with personal data: the code goes on with them redacted."""
    client = run.instrument(ScriptedClient(desk))

    @run.recorded_tool
    def card_on_file(user: str) -> dict[str, Any]:
        return {"user": user, "card": "6011.1111.1111.1117"}

    system = "Support desk. Escalations: ops@desk.example"
    first = client.chat.completions.create(
        model="scripted-1",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
    )
    said = str(first.choices[0].message.content)
    found = card_on_file("u-1")
    run.delta({"card": found["card"]})
    second = client.chat.completions.create(
        model="scripted-1",
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": question},
            {"role": "assistant", "content": said},
            {"role": "user", "content": f"The card is {found['card']}. Summarise."},
        ],
    )
    answer = f"{said} | {second.choices[0].message.content}"
    run.answer(answer)
    return answer


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Today's temperature in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def tooled(run: RunRecorder, question: str) -> str:
    """Two calls offering the model a tool (the tools are part of each request)."""
    client = run.instrument(ScriptedClient(echo))
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    first = client.chat.completions.create(
        model="scripted-1", messages=messages, tools=[WEATHER_TOOL]
    )
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And tomorrow?"},
    ]
    second = client.chat.completions.create(
        model="scripted-1", messages=messages, tools=[WEATHER_TOOL]
    )
    answer = str(second.choices[0].message.content)
    run.answer(answer)
    return answer


async def gathered_failing(run: RunRecorder, question: str) -> None:  # noqa: ARG001
    """One of three gathered tools raises: the run fails while the other two still finish."""

    @run.recorded_tool(name="probe")
    async def probe(city: str) -> int:
        await asyncio.sleep(0.01)
        if CITIES[city] < 0:
            raise ValueError(f"no reading below zero in {city}")
        return CITIES[city]

    await asyncio.gather(probe("Oslo"), probe("Nuuk"), probe("Lima"))


OPENAI_URL = "http://127.0.0.1:9/v1"
"""Where `impatient` sends its calls (a test points it at a loopback server)."""


async def impatient(run: RunRecorder, question: str) -> list[str]:
    """A call given up after 0.2 s (`asyncio.wait_for`), then one that answers."""
    async with openai.AsyncOpenAI(api_key="sk-test", base_url=OPENAI_URL, max_retries=0) as sdk:
        client = run.instrument(sdk)
        slow = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"slow {question}"}]
        )
        try:
            await asyncio.wait_for(slow, timeout=0.2)
            first = "answered"
        except TimeoutError:
            first = "gave up"
        reply = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "quick"}]
        )
        return [first, str(reply.choices[0].message.content)]


POOL_WAIT = "map"
"""How `pooled` waits for its workers: ``map``, ``result``, ``wait``, ``as_completed`` (a
`ThreadPoolExecutor`), or ``threads`` (plain threads, joined)."""
POOL_SKIP = ""
"""A city whose first question `pooled` leaves out (tests set it: its events never come)."""
POOL_PAUSE: dict[str, float] = {}
"""Seconds a city's worker works, unrecorded, before each of its questions (a slow tool)."""


def pooled(run: RunRecorder, question: str) -> int:
    """A worker per city, each asking twice and calling a recorded tool; the main thread waits."""
    client = run.instrument(ScriptedClient(echo))

    @run.recorded_tool
    def temperature(city: str) -> int:
        return CITIES[city]

    def work(city: str) -> str:
        for turn in range(2):
            time.sleep(POOL_PAUSE.get(city, 0.0))
            if not (city == POOL_SKIP and turn == 0):
                client.chat.completions.create(
                    model="scripted-1",
                    messages=[{"role": "user", "content": f"{question} {city} #{turn}"}],
                )
            temperature(city)
        return city

    if POOL_WAIT == "threads":
        threads = [threading.Thread(target=work, args=(city,)) for city in CITIES]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done = len(threads)
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(CITIES)) as pool:
            if POOL_WAIT == "map":
                done = len(list(pool.map(work, CITIES)))
            else:
                futures = [pool.submit(work, city) for city in CITIES]
                if POOL_WAIT == "wait":
                    concurrent.futures.wait(futures)
                elif POOL_WAIT == "as_completed":
                    futures = list(concurrent.futures.as_completed(futures))
                done = len([future.result() for future in futures])
    run.delta({"cities": done})
    return done


ANTHROPIC_URL = "http://127.0.0.1:9"
"""Where the Anthropic agents send their calls (a test points it at a loopback server)."""


async def impatient_stream(run: RunRecorder, question: str) -> list[Any]:
    """A stream read until a 0.5 s timeout cancels its reader, then a call that answers.

    What the code saw (the pieces before the cancellation) is recorded as a delta, so replay
    compares it.
    """
    async with openai.AsyncOpenAI(api_key="sk-test", base_url=OPENAI_URL, max_retries=0) as sdk:
        client = run.instrument(sdk)
        seen: list[str] = []

        async def read() -> None:
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": question}], stream=True
            )
            async for chunk in stream:
                seen.append(chunk.choices[0].delta.content or "" if chunk.choices else "")

        try:
            await asyncio.wait_for(read(), timeout=0.5)
            ended = "read to the end"
        except TimeoutError:
            ended = "gave up"
        reply = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "quick"}]
        )
        await run.adelta({"ended": ended, "seen": seen})
        return [ended, seen, reply.choices[0].message.content]


CLAUDE_READ = "helper"
"""How `impatient_claude` reads its stream: ``helper`` (``messages.stream``'s ``text_stream``),
``events`` (``messages.create(stream=True)``), each cancelled after 0.5 s, or ``busy`` (the
helper, its reader cancelled once busy after two pieces rather than while waiting for one)."""


async def impatient_claude(run: RunRecorder, question: str) -> list[Any]:
    """An Anthropic stream whose reading task another task cancels (see `CLAUDE_READ`)."""
    async with anthropic.AsyncAnthropic(
        api_key="sk-ant-test-0123456789", base_url=ANTHROPIC_URL, max_retries=0
    ) as sdk:
        client = run.instrument(sdk)
        seen: list[str] = []
        busy = asyncio.Event()
        request: dict[str, Any] = {
            "model": "c",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": question}],
        }

        async def read() -> None:
            if CLAUDE_READ == "events":
                events = await client.messages.create(**request, stream=True)
                async for event in events:
                    seen.append(event.type)
                return
            async with client.messages.stream(**request) as stream:
                async for text in stream.text_stream:
                    seen.append(text)
                    if CLAUDE_READ == "busy" and len(seen) == 2:
                        busy.set()
                        await asyncio.Event().wait()  # busy until cancelled

        reader = asyncio.create_task(read())
        if CLAUDE_READ == "busy":
            await busy.wait()
        else:
            await asyncio.sleep(0.5)
        reader.cancel()
        try:
            await reader
            ended = "read to the end"
        except asyncio.CancelledError:
            ended = "cancelled"
        await run.adelta({"ended": ended, "seen": seen})
        return [ended, seen]


def beta_claude(run: RunRecorder, question: str) -> str:
    """Anthropic's ``beta.messages``: a create with ``betas``, then the stream helper."""
    with anthropic.Anthropic(
        api_key="sk-ant-test-0123456789", base_url=ANTHROPIC_URL, max_retries=0
    ) as sdk:
        client = run.instrument(sdk)
        first = client.beta.messages.create(
            model="c",
            max_tokens=64,
            messages=[{"role": "user", "content": question}],
            betas=["context-management-2025-06-27"],
        )
        said = first.content[0].text
        with client.beta.messages.stream(
            model="c",
            max_tokens=64,
            messages=[
                {"role": "user", "content": question},
                {"role": "assistant", "content": said},
                {"role": "user", "content": "Again, shorter."},
            ],
        ) as stream:
            again = "".join(stream.text_stream)
            final = stream.get_final_message()
        answer = f"{type(first).__name__}: {said} | {type(final).__name__}: {again}"
        run.answer(answer)
        return answer
