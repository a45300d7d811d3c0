"""The built-in tools: offline geocoding, weather, transit, POIs, arithmetic and run-local writers.

The writers are reminders, notes and outgoing messages. Owns the tool functions and
``builtin_registry()``, which returns a NEW ``ToolRegistry`` on every call. The tools answer from
the bundled ``city.json`` only (the Kura and MumbAI patterns without their network): they never
fabricate (an unknown place is ``ToolFailure("not_found")``), every point of interest carries its
stable ``evidence_id``, and nothing here touches anything outside the run. ``send_message`` only
returns the record of a message the run would send; the orchestration puts it in world state, and
it is marked ``effectful`` so replay never re-sends. This module must not keep mutable state, read
clocks or randomness, or do network I/O.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Annotated, Literal

from pydantic import Field

from agentledger.tools._calculator import MAX_EXPRESSION_LENGTH, evaluate
from agentledger.tools._city import Location, haversine_km, is_open, load_city, resolve
from agentledger.tools._estimates import Mode, estimate_route, forecast, nearest_place
from agentledger.tools._json import JSONValue
from agentledger.tools._registry import ToolRegistry
from agentledger.tools._tool import Tool, tool

__all__ = [
    "BUILTIN_TOOLS",
    "Category",
    "add_note",
    "builtin_registry",
    "calculator",
    "create_reminder",
    "find_pois",
    "geocode",
    "send_message",
    "transit",
    "weather",
]

Category = Literal[
    "bookshop", "cafe", "gallery", "market", "museum", "park", "restaurant", "viewpoint"
]
"""The point-of-interest categories in ``city.json`` (a test keeps the two in step)."""

PlaceName = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(min_length=1, max_length=2000)]
_TIMEOUT_S = 5.0


def _where(location: Location) -> dict[str, JSONValue]:
    return {"id": location.id, "name": location.name, "kind": location.kind}


def _record_id(kind: str, fields: dict[str, JSONValue]) -> str:
    """Derive an id from content, so the same record made twice (or in a replay) has the same id."""
    canonical = json.dumps(
        [kind, fields], sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return f"{kind}:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def _local(when: dt.datetime) -> dt.datetime:
    """Convert ``when`` to the city's time zone; a naive time is the city's local time."""
    tz = load_city().tz
    return when.replace(tzinfo=tz) if when.tzinfo is None else when.astimezone(tz)


@tool(result_type="location", timeout_s=_TIMEOUT_S)
def geocode(place: PlaceName) -> dict[str, JSONValue]:
    """Find a place or point of interest in the offline city and return its coordinates.

    Args:
        place: A place name, alias or id, e.g. "Old Town", "harbour" or "poi:clocktower".
    """
    location = resolve(place)
    city = load_city()
    return {
        "evidence_id": location.id,
        **_where(location),
        "lat": location.lat,
        "lng": location.lng,
        "city": city.name,
    }


@tool(result_type="weather", timeout_s=_TIMEOUT_S)
def weather(place: PlaceName, date: dt.date) -> dict[str, JSONValue]:
    """Get the modelled weather for a place in the offline city on a date.

    Args:
        place: A place or point of interest, e.g. "Harbour Front".
        date: The local date, as YYYY-MM-DD.
    """
    city = load_city()
    location = resolve(place)
    area = nearest_place(city, location.lat, location.lng)
    report = forecast(city, area, date)
    report["requested"] = _where(location)
    return report


@tool(result_type="route", timeout_s=_TIMEOUT_S)
def transit(
    origin: PlaceName, destination: PlaceName, mode: Mode = "transit"
) -> dict[str, JSONValue]:
    """Estimate travel distance and time between two places in the offline city.

    Args:
        origin: Where the trip starts, e.g. "Central Station".
        destination: Where the trip ends, e.g. "poi:tide-kitchen".
        mode: How to travel: walk, bike, transit (trams, bus, airport rail) or drive.
    """
    city = load_city()
    return estimate_route(city, resolve(origin), resolve(destination), mode)


@tool(result_type="poi_list", timeout_s=_TIMEOUT_S)
def find_pois(
    near: PlaceName,
    category: Category | None = None,
    open_at: dt.datetime | None = None,
    limit: Annotated[int, Field(ge=1, le=10)] = 5,
) -> dict[str, JSONValue]:
    """Find points of interest near a place, nearest first, each with its evidence id.

    Args:
        near: The place to search around, e.g. "Old Town".
        category: Only this kind of place; omit for all kinds.
        open_at: Only places open at this local date and time (YYYY-MM-DDTHH:MM).
        limit: The most results to return.
    """
    city = load_city()
    center = resolve(near)
    moment = _local(open_at) if open_at is not None else None
    matches = [
        poi
        for poi in city.pois
        if (category is None or poi.category == category)
        and (moment is None or is_open(poi, moment))
        and poi.id != center.id
    ]
    ranked = sorted(
        matches, key=lambda poi: (haversine_km(center.lat, center.lng, poi.lat, poi.lng), poi.id)
    )[:limit]
    items: list[JSONValue] = [
        {
            "evidence_id": poi.id,
            "name": poi.name,
            "category": poi.category,
            "tags": list(poi.tags),
            "price_level": poi.price_level,
            "lat": poi.lat,
            "lng": poi.lng,
            "distance_km": round(haversine_km(center.lat, center.lng, poi.lat, poi.lng), 2),
            "opening_hours": {
                day: [list(span) for span in spans] for day, spans in poi.opening_hours.items()
            },
        }
        for poi in ranked
    ]
    return {
        "near": _where(center),
        "category": category,
        "open_at": moment.isoformat() if moment is not None else None,
        "total_matches": len(matches),
        "items": items,
        "evidence_ids": [poi.id for poi in ranked],
    }


@tool(result_type="calculation", timeout_s=_TIMEOUT_S)
def calculator(
    expression: Annotated[str, Field(min_length=1, max_length=MAX_EXPRESSION_LENGTH)],
) -> dict[str, JSONValue]:
    """Evaluate an arithmetic expression exactly as written (numbers and + - * / // % ** only).

    Args:
        expression: The expression, e.g. "(12.5 + 7) * 3".
    """
    return {"expression": expression, "result": evaluate(expression)}


@tool(result_type="reminder", risk="medium", timeout_s=_TIMEOUT_S)
def create_reminder(text: Text, when: dt.datetime) -> dict[str, JSONValue]:
    """Create a reminder in the run's world state (nothing is scheduled outside the run).

    Args:
        text: What to be reminded of.
        when: When, as local date and time (YYYY-MM-DDTHH:MM) or with a UTC offset.
    """
    fields: dict[str, JSONValue] = {"text": text, "when": _local(when).isoformat()}
    return {"id": _record_id("reminder", fields), **fields}


@tool(result_type="note", timeout_s=_TIMEOUT_S)
def add_note(text: Text) -> dict[str, JSONValue]:
    """Add a note to the run's world state.

    Args:
        text: The note.
    """
    fields: dict[str, JSONValue] = {"text": text}
    return {"id": _record_id("note", fields), **fields}


@tool(result_type="message", risk="high", effectful=True, timeout_s=_TIMEOUT_S)
def send_message(
    to: Annotated[str, Field(min_length=1, max_length=320)],
    subject: Annotated[str, Field(max_length=200)],
    body: Text,
) -> dict[str, JSONValue]:
    """Send a message to a person (recorded in the run; the host application delivers it).

    Args:
        to: The recipient, e.g. an email address or a contact name.
        subject: The subject line.
        body: The message text.
    """
    fields: dict[str, JSONValue] = {"to": to, "subject": subject, "body": body}
    return {"id": _record_id("message", fields), **fields, "status": "recorded"}


BUILTIN_TOOLS: tuple[Tool[..., dict[str, JSONValue]], ...] = (
    geocode,
    weather,
    transit,
    find_pois,
    calculator,
    create_reminder,
    add_note,
    send_message,
)
"""Every built-in tool, in the order ``builtin_registry`` registers them."""


def builtin_registry() -> ToolRegistry:
    """Return a new registry holding every built-in tool (a fresh object on every call)."""
    return ToolRegistry(BUILTIN_TOOLS)
