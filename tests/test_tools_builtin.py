"""The built-in offline tools: happy paths, not-found paths, evidence ids, and the calculator."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from agentledger.tools import (
    BUILTIN_TOOLS,
    RiskLevel,
    ToolFailure,
    ToolRegistry,
    builtin_registry,
    calculator,
    geocode,
    weather,
)


@pytest.fixture
def registry() -> ToolRegistry:
    """Return a fresh registry of the built-in tools."""
    return builtin_registry()


def ok_data(registry: ToolRegistry, name: str, arguments: dict[str, Any]) -> Any:
    """Call a tool, assert it succeeded, and return its data."""
    result = registry.call(name, arguments)
    assert result.ok, result.error
    return result.data


def error_code(registry: ToolRegistry, name: str, arguments: dict[str, Any]) -> str:
    """Call a tool, assert it failed, and return the error code."""
    result = registry.call(name, arguments)
    assert not result.ok
    assert result.error is not None
    return result.error.code


def test_the_builtin_tools_declare_their_metadata(registry: ToolRegistry) -> None:
    """Names, result types, risk and effect are as documented; only send_message is effectful."""
    table = {spec.name: (spec.result_type, spec.risk, spec.effectful) for spec in registry.specs()}
    assert table == {
        "geocode": ("location", RiskLevel.LOW, False),
        "weather": ("weather", RiskLevel.LOW, False),
        "transit": ("route", RiskLevel.LOW, False),
        "find_pois": ("poi_list", RiskLevel.LOW, False),
        "calculator": ("calculation", RiskLevel.LOW, False),
        "create_reminder": ("reminder", RiskLevel.MEDIUM, False),
        "add_note": ("note", RiskLevel.LOW, False),
        "send_message": ("message", RiskLevel.HIGH, True),
    }
    assert registry.names() == tuple(item.name for item in BUILTIN_TOOLS)


def test_geocode_resolves_names_aliases_and_ids(registry: ToolRegistry) -> None:
    """An alias ("harbor"), a name with the city suffix, and a POI id all resolve."""
    harbour = ok_data(registry, "geocode", {"place": "harbor"})
    assert harbour["id"] == "place:harbour"
    assert harbour["evidence_id"] == "place:harbour"
    assert (harbour["lat"], harbour["lng"]) == (41.196, -35.383)
    assert ok_data(registry, "geocode", {"place": "Old Town, Vellmar"})["id"] == "place:old-town"
    clocktower = ok_data(registry, "geocode", {"place": "poi:clocktower"})
    assert clocktower["kind"] == "poi"
    assert clocktower["name"] == "Clocktower Lookout"


def test_geocode_of_an_unknown_place_is_not_found(registry: ToolRegistry) -> None:
    """An unknown place is ``not_found``, listing the known places, never a guess."""
    result = registry.call("geocode", {"place": "Atlantis"})
    assert result.error is not None
    assert result.error.code == "not_found"
    assert "Central Station" in result.error.message


def test_builtin_tools_are_callable_directly() -> None:
    """Unit tests may call built-ins as functions; failures raise ToolFailure there."""
    assert geocode("Museum Quarter")["id"] == "place:museum-quarter"
    assert weather("Old Town", dt.date(2025, 6, 14))["date"] == "2025-06-14"
    with pytest.raises(ToolFailure) as caught:
        geocode("Atlantis")
    assert caught.value.code == "not_found"


def test_weather_is_deterministic_per_place_and_date(registry: ToolRegistry) -> None:
    """The same place and date always give the same report, with an evidence id and source."""
    arguments = {"place": "Harbour Front", "date": "2025-01-12"}
    first = ok_data(registry, "weather", arguments)
    assert first == ok_data(builtin_registry(), "weather", arguments)
    assert first["evidence_id"] == "weather:place:harbour:2025-01-12"
    assert first["condition"] == "heavy rain"
    assert first["temp_low_c"] < first["temp_high_c"]
    assert "not a live forecast" in first["source"]
    other_day = ok_data(registry, "weather", {"place": "Harbour Front", "date": "2025-01-10"})
    assert other_day["condition"] != first["condition"]


def test_weather_at_a_poi_uses_the_nearest_place(registry: ToolRegistry) -> None:
    """Weather for a point of interest is the surrounding place's, and says what was asked."""
    report = ok_data(registry, "weather", {"place": "Tide Kitchen", "date": "2025-06-14"})
    assert report["place"]["id"] == "place:harbour"
    assert report["requested"]["id"] == "poi:tide-kitchen"


def test_weather_refuses_unknown_places_and_bad_dates(registry: ToolRegistry) -> None:
    """An unknown place is ``not_found``; a date that is not YYYY-MM-DD is invalid."""
    assert error_code(registry, "weather", {"place": "Atlantis", "date": "2025-06-14"}) == (
        "not_found"
    )
    assert error_code(registry, "weather", {"place": "Old Town", "date": "June"}) == (
        "invalid_arguments"
    )


def test_transit_connects_with_one_transfer_and_walks_the_last_stretch(
    registry: ToolRegistry,
) -> None:
    """Airport to a harbour restaurant: rail, a tram transfer, then a short walk."""
    route = ok_data(
        registry, "transit", {"origin": "Vellmar Airport", "destination": "poi:tide-kitchen"}
    )
    assert [leg.get("line", leg["mode"]) for leg in route["legs"]] == ["AX", "T1", "walk"]
    assert route["evidence_id"] == "route:place:airport->poi:tide-kitchen:transit"
    assert route["duration_min"] == 36
    assert all(leg["distance_km"] > 0 for leg in route["legs"])
    assert route["distance_km"] == pytest.approx(sum(leg["distance_km"] for leg in route["legs"]))


def test_transit_modes_rank_by_speed(registry: ToolRegistry) -> None:
    """Walking is slowest, then cycling, then driving; the airport rail beats the car."""
    minutes = {
        mode: ok_data(
            registry, "transit", {"origin": "airport", "destination": "old town", "mode": mode}
        )["duration_min"]
        for mode in ("walk", "bike", "transit", "drive")
    }
    assert minutes["walk"] > minutes["bike"] > minutes["drive"] > minutes["transit"]


def test_transit_refuses_unknown_places_modes_and_round_trips(registry: ToolRegistry) -> None:
    """Unknown places are ``not_found``, unknown modes invalid, same-place trips refused."""
    assert error_code(registry, "transit", {"origin": "Atlantis", "destination": "harbour"}) == (
        "not_found"
    )
    arguments = {"origin": "harbour", "destination": "old town", "mode": "teleport"}
    assert error_code(registry, "transit", arguments) == "invalid_arguments"
    same = {"origin": "harbour", "destination": "Harbour Front"}
    assert error_code(registry, "transit", same) == "invalid_route"


def test_find_pois_carry_evidence_ids_nearest_first(registry: ToolRegistry) -> None:
    """Every item has a stable ``poi:`` evidence id; items are sorted by distance."""
    found = ok_data(registry, "find_pois", {"near": "Harbour Front", "limit": 3})
    items = found["items"]
    assert [item["evidence_id"] for item in items] == [
        "poi:tide-kitchen",
        "poi:fish-market",
        "poi:cafe-brasa",
    ]
    assert found["evidence_ids"] == [item["evidence_id"] for item in items]
    assert found["total_matches"] == 10
    distances = [item["distance_km"] for item in items]
    assert distances == sorted(distances)


def test_find_pois_filters_by_category(registry: ToolRegistry) -> None:
    """A category keeps only that kind of place."""
    found = ok_data(registry, "find_pois", {"near": "harbour", "category": "restaurant"})
    assert found["evidence_ids"] == ["poi:tide-kitchen", "poi:lamplight-noodles"]
    assert {item["category"] for item in found["items"]} == {"restaurant"}


def test_find_pois_open_at_honours_days_and_overnight_hours(registry: ToolRegistry) -> None:
    """Monday 11:00 excludes the museum (closed Mondays); Tuesday 01:00 finds the late bar."""
    monday = ok_data(
        registry, "find_pois", {"near": "Museum Quarter", "open_at": "2025-06-16T11:00"}
    )
    assert "poi:map-museum" not in monday["evidence_ids"]
    assert "poi:clocktower" in monday["evidence_ids"]
    late = {"near": "Museum Quarter", "open_at": "2025-06-17T00:00:00Z"}
    night = ok_data(registry, "find_pois", late)
    assert night["open_at"] == "2025-06-17T01:00:00+01:00"
    assert night["evidence_ids"] == ["poi:lamplight-noodles", "poi:riverside-trail"]


def test_find_pois_refuses_unknown_places_and_categories(registry: ToolRegistry) -> None:
    """An unknown place is ``not_found``; a category outside the enum is invalid."""
    assert error_code(registry, "find_pois", {"near": "Atlantis"}) == "not_found"
    assert error_code(registry, "find_pois", {"near": "harbour", "category": "zoo"}) == (
        "invalid_arguments"
    )
    assert error_code(registry, "find_pois", {"near": "harbour", "limit": 0}) == (
        "invalid_arguments"
    )


def test_the_category_enum_matches_the_bundled_data(registry: ToolRegistry) -> None:
    """The categories the schema offers are exactly those present in city.json."""
    schema: Any = registry.get("find_pois").spec.parameters
    offered = set(schema["properties"]["category"]["anyOf"][0]["enum"])
    found = ok_data(registry, "find_pois", {"near": "Central Station", "limit": 10})
    assert offered == {item["category"] for item in found["items"]}


@pytest.mark.parametrize(
    ("expression", "result"),
    [("(12.5 + 7) * 3", 58.5), ("2 ** 10", 1024), ("-7 // 2", -4), ("17 % 5", 2), ("1/4", 0.25)],
)
def test_calculator_evaluates_arithmetic(
    registry: ToolRegistry, expression: str, result: float
) -> None:
    """Numbers, parentheses and arithmetic operators evaluate exactly."""
    assert ok_data(registry, "calculator", {"expression": expression}) == {
        "expression": expression,
        "result": result,
    }


@pytest.mark.parametrize(
    ("expression", "code", "detail"),
    [
        ("__import__('os')", "unsupported_expression", "function calls are not allowed"),
        ("x + 1", "unsupported_expression", "names are not allowed: 'x'"),
        ("(1).real", "unsupported_expression", "attributes are not allowed: 'real'"),
        ("().__class__", "unsupported_expression", "attributes are not allowed"),
        ("'a' * 3", "unsupported_expression", "only numbers"),
        ("[1, 2]", "unsupported_expression", "List is not allowed"),
        ("1 / 0", "division_by_zero", "division by zero"),
        ("9 ** 9 ** 9", "out_of_range", "too large"),
        ("2 ** 60", "out_of_range", "outside"),
        ("(-8) ** 0.5", "out_of_range", "not real"),
        ("1 +", "invalid_expression", "not an arithmetic expression"),
    ],
)
def test_calculator_refuses_anything_but_arithmetic(
    expression: str, code: str, detail: str
) -> None:
    """Calls, names, attributes, strings and containers are refused before anything runs."""
    with pytest.raises(ToolFailure) as caught:
        calculator(expression)
    assert caught.value.code == code
    assert detail in caught.value.message


def test_calculator_refusal_comes_back_as_an_envelope(registry: ToolRegistry) -> None:
    """Through the registry, the refusal of ``__import__('os')`` is an ``ok=false`` envelope."""
    result = registry.call("calculator", {"expression": "__import__('os').system('ls')"})
    assert result.error is not None
    assert result.error.code == "unsupported_expression"


def test_create_reminder_records_a_local_time_with_a_stable_id(registry: ToolRegistry) -> None:
    """A reminder gets a content-derived id and a time with the city's UTC offset."""
    arguments = {"text": "Buy tram tickets", "when": "2025-06-14T09:00"}
    reminder = ok_data(registry, "create_reminder", arguments)
    assert reminder["when"] == "2025-06-14T09:00:00+01:00"
    assert reminder["id"].startswith("reminder:")
    assert ok_data(registry, "create_reminder", arguments)["id"] == reminder["id"]
    assert error_code(registry, "create_reminder", {"text": "", "when": "2025-06-14T09:00"}) == (
        "invalid_arguments"
    )


def test_add_note_records_the_text(registry: ToolRegistry) -> None:
    """A note comes back with its text and a content-derived id."""
    note = ok_data(registry, "add_note", {"text": "Museum closed Mondays"})
    assert note["text"] == "Museum closed Mondays"
    assert note["id"].startswith("note:")


def test_send_message_only_returns_a_record_and_is_marked_effectful(
    registry: ToolRegistry,
) -> None:
    """send_message returns the message the run would send; its spec is high-risk, effectful."""
    arguments = {"to": "ana@example.org", "subject": "Plan", "body": "Meet at the harbour."}
    message = ok_data(registry, "send_message", arguments)
    assert message == {"id": message["id"], **arguments, "status": "recorded"}
    spec = registry.get("send_message").spec
    assert spec.effectful
    assert spec.risk > RiskLevel.MEDIUM
    assert error_code(registry, "send_message", {"to": "", "subject": "s", "body": "b"}) == (
        "invalid_arguments"
    )
