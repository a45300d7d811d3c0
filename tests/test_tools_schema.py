"""The ``@tool`` decorator: schemas from signatures and docstrings, metadata, refusals."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

from agentledger.tools import RiskLevel, Tool, ToolRegistrationError, tool


@tool
def plan_trip(
    city: str,
    days: int,
    *,
    budget: float = 250.0,
    pace: Literal["slow", "fast"] = "slow",
    with_kids: bool = False,
    interests: list[str] | None = None,
) -> dict[str, Any]:
    """Plan a short trip.

    The longer description is not part of the tool description.

    Args:
        city: The city to visit.
        days: How many days, counting
            the arrival day.
        budget (float): Total budget in euros.
        pace: How packed each day is.
        with_kids: Whether children come along.
        interests: Topics to favour.

    Returns:
        A plan.
    """
    topics = interests or []
    return {"city": city, "days": days, "budget": budget, "pace": pace, "kids": with_kids} | (
        {"interests": topics} if topics else {}
    )


def test_schema_maps_python_types_to_json_types() -> None:
    """Each hint becomes its JSON Schema type; Literal becomes an enum; Optional allows null."""
    props = plan_trip.spec.parameters["properties"]
    assert isinstance(props, dict)
    assert props["city"] == {"type": "string", "description": "The city to visit."}
    assert props["days"] == {
        "type": "integer",
        "description": "How many days, counting the arrival day.",
    }
    assert props["budget"] == {
        "type": "number",
        "default": 250.0,
        "description": "Total budget in euros.",
    }
    assert props["pace"] == {
        "type": "string",
        "enum": ["slow", "fast"],
        "default": "slow",
        "description": "How packed each day is.",
    }
    assert props["with_kids"]["type"] == "boolean"  # type: ignore[index,call-overload]
    assert props["interests"]["anyOf"] == [  # type: ignore[index,call-overload]
        {"type": "array", "items": {"type": "string"}},
        {"type": "null"},
    ]


def test_parameters_without_defaults_are_required_and_the_rest_optional() -> None:
    """Only parameters without a default are listed as required; extra keys are refused."""
    schema = plan_trip.spec.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["city", "days"]
    assert schema["additionalProperties"] is False


def test_description_is_the_docstrings_first_line() -> None:
    """The tool description is the summary line only, without the longer text or sections."""
    assert plan_trip.spec.description == "Plan a short trip."
    assert plan_trip.spec.name == "plan_trip"


def test_schema_carries_no_generated_titles() -> None:
    """Pydantic's generated titles are dropped; they are noise in a model's prompt."""
    schema = plan_trip.spec.parameters
    assert "title" not in schema
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert all("title" not in prop for prop in properties.values())  # type: ignore[operator]


def test_annotated_constraints_reach_the_schema() -> None:
    """Field constraints in ``Annotated`` hints (bounds, lengths) appear in the schema."""

    @tool
    def pick(
        count: Annotated[int, Field(ge=1, le=9)], word: Annotated[str, Field(min_length=2)]
    ) -> int:
        """Pick something.

        Args:
            count: How many.
            word: Which word.
        """
        return count * len(word)

    props = pick.spec.parameters["properties"]
    assert props["count"] == {  # type: ignore[index,call-overload]
        "type": "integer",
        "minimum": 1,
        "maximum": 9,
        "description": "How many.",
    }
    assert props["word"]["minLength"] == 2  # type: ignore[index,call-overload]


def test_a_tool_stays_callable_like_the_function() -> None:
    """Decorating keeps the function usable in unit tests: same arguments, same result."""
    assert plan_trip("Vellmar", 2) == {
        "city": "Vellmar",
        "days": 2,
        "budget": 250.0,
        "pace": "slow",
        "kids": False,
    }
    assert isinstance(plan_trip, Tool)
    assert plan_trip.__name__ == "plan_trip"
    assert plan_trip.__doc__ is not None


def test_an_async_tool_called_directly_returns_a_coroutine() -> None:
    """An async function stays async: calling the tool returns an awaitable."""

    @tool
    async def echo(text: str) -> str:
        """Echo the text.

        Args:
            text: What to echo.
        """
        await asyncio.sleep(0)
        return text

    assert echo.is_async
    assert asyncio.run(echo("hi")) == "hi"


def test_options_are_recorded_in_the_spec() -> None:
    """Name, version, risk, effect, timeout and result type land in the ToolSpec."""

    @tool(
        name="mail",
        risk="high",
        effectful=True,
        timeout_s=3,
        version="2",
        result_type="message",
        description="Send mail.",
    )
    def send(to: str) -> str:
        """Deliver something.

        Args:
            to: Recipient.
        """
        return to

    spec = send.spec
    assert (spec.name, spec.version, spec.effectful, spec.timeout_s) == ("mail", "2", True, 3.0)
    assert spec.risk is RiskLevel.HIGH
    assert spec.result_type == "message"
    assert spec.description == "Send mail."


def test_the_bare_decorator_uses_safe_defaults() -> None:
    """Without options a tool is low risk, not effectful, version 1, 10 s timeout."""
    spec = plan_trip.spec
    assert spec.risk is RiskLevel.LOW
    assert spec.effectful is False
    assert spec.version == "1"
    assert spec.timeout_s == 10.0
    assert spec.result_type == "plan_trip"


def test_a_parameter_may_share_a_name_with_pydantic_attributes() -> None:
    """Parameters such as ``schema`` or ``copy`` neither clash with pydantic nor warn."""

    @tool
    def store(schema: str, copy: int = 1) -> str:
        """Store a schema.

        Args:
            schema: The schema name.
            copy: How many copies.
        """
        return schema * copy

    assert set(store.spec.parameters["properties"]) == {"schema", "copy"}  # type: ignore[arg-type]
    assert store.validate({"schema": "ab", "copy": 2}) == {"schema": "ab", "copy": 2}


def test_validate_converts_json_strings_to_the_hinted_types() -> None:
    """A date sent as a JSON string reaches the function as a ``datetime.date``."""

    @tool
    def day_of(date: dt.date) -> int:
        """Return the day of the month.

        Args:
            date: The date.
        """
        return date.day

    assert day_of.spec.parameters["properties"] == {
        "date": {"type": "string", "format": "date", "description": "The date."}
    }
    assert day_of.validate({"date": "2025-06-14"}) == {"date": dt.date(2025, 6, 14)}


def _no_hint(value) -> int:  # type: ignore[no-untyped-def]
    """Miss a type hint.

    Args:
        value: Anything.
    """
    return len(value)


def _var_args(*values: int) -> int:
    """Take any number of values."""
    return sum(values)


def _positional_only(value: int, /) -> int:
    """Take a positional-only value."""
    return value


def _undocumented(value: int) -> int:
    return value


def _stray_doc(value: int) -> int:
    """Document a parameter that does not exist.

    Args:
        value: A value.
        other: Not a parameter.
    """
    return value


def _bad_default(value: object = object()) -> int:
    """Have a default that is not JSON.

    Args:
        value: Anything.
    """
    return id(value)


@pytest.mark.parametrize(
    ("func", "options", "reason"),
    [
        (_no_hint, {}, "has no type hint"),
        (_var_args, {}, "cannot be described as a JSON object"),
        (_positional_only, {}, "positional-only"),
        (_undocumented, {}, "needs a description"),
        (_stray_doc, {}, "documents parameters the function lacks: other"),
        (_bad_default, {}, "must be JSON-native"),
        (_var_args, {"name": "has space"}, "a name is 1-64 characters"),
        (_positional_only, {"name": "ok", "risk": "extreme"}, "risk must be"),
        (_positional_only, {"name": "ok", "timeout_s": 0}, "timeout_s must be positive"),
    ],
)
def test_bad_definitions_are_refused_with_a_reason(
    func: Any, options: dict[str, Any], reason: str
) -> None:
    """A function that cannot become a well-described tool is refused at definition time."""
    with pytest.raises(ToolRegistrationError) as caught:
        tool(**options)(func)
    assert reason in caught.value.reason
    assert caught.value.tool_name == options.get("name", func.__name__)


def test_a_tool_cannot_be_wrapped_twice() -> None:
    """Decorating a Tool again is a mistake the decorator names."""
    with pytest.raises(ToolRegistrationError, match="already a Tool"):
        tool(plan_trip)


def test_risk_levels_are_ordered_by_rank_not_alphabet() -> None:
    """Risk ranks low < medium < high, for enum members and plain strings alike."""
    assert RiskLevel.LOW < RiskLevel.MEDIUM < RiskLevel.HIGH
    assert RiskLevel.HIGH > "medium"
    assert RiskLevel.MEDIUM <= "medium"
    assert sorted([RiskLevel.HIGH, RiskLevel.LOW, RiskLevel.MEDIUM]) == [
        RiskLevel.LOW,
        RiskLevel.MEDIUM,
        RiskLevel.HIGH,
    ]


def _spec() -> Any:
    from agentledger.tools import ToolSpec

    return ToolSpec(
        name="weather",
        description="Today's temperature.",
        version="1",
        risk=RiskLevel.LOW,
        effectful=False,
        timeout_s=1.0,
        result_type="weather",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )


def test_a_spec_offered_once_copies_compares_and_rebuilds_like_a_fresh_one() -> None:
    """The schema text a spec keeps is no field: copies with new parameters offer those."""
    import pickle

    from agentledger.tools import ToolSpec

    spec = _spec()
    offered = spec.openai_schema()
    offered["function"]["parameters"]["type"] = "changed"  # a copy: the spec is untouched
    assert spec.neutral_schema()["parameters"]["type"] == "object"
    assert spec == _spec()
    assert pickle.loads(pickle.dumps(spec)) == spec  # noqa: S301 - our own bytes
    assert ToolSpec(**dict(spec)) == spec
    assert ToolSpec.model_validate(spec.model_dump()) == spec
    other = {"type": "object", "properties": {"day": {"type": "string"}}}
    for copied in (
        spec.model_copy(update={"parameters": other}),
        spec.model_copy(update={"parameters": other}, deep=True),
    ):
        assert copied.neutral_schema()["parameters"] == other
        assert copied.anthropic_schema()["input_schema"] == other
        assert copied != spec
    assert spec.neutral_schema()["parameters"]["properties"] == {"city": {"type": "string"}}
