"""Deterministic offline estimators: weather per place and date, and travel time per mode.

Owns the weather model (monthly climate normals from ``city.json`` varied by a SHA-256 of place
and date, so the same question always gets the same answer in a live run and in a replay) and
the routing estimator (haversine distance with a detour factor and speed per mode, as MumbAI's
``routing_estimator``; transit adds walking to the nearest stop, waits of half a headway and at
most one transfer). It must not read clocks, randomness or the network, and its outputs say they
are estimates.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import math
from dataclasses import dataclass
from typing import Literal

from agentledger.tools._city import City, Line, Location, Place, haversine_km
from agentledger.tools._json import JSONValue
from agentledger.tools.errors import ToolFailure

__all__ = ["Mode", "estimate_route", "forecast", "nearest_place"]

Mode = Literal["walk", "bike", "transit", "drive"]

_WEATHER_SOURCE = "offline climate model v1 (deterministic estimate, not a live forecast)"
_ROUTE_METHOD = "haversine distance x detour factor at a typical speed per mode (estimate)"
# speed km/h, detour factor over the straight line, fixed overhead minutes (parking, unlocking)
_DIRECT: dict[str, tuple[float, float, float]] = {
    "walk": (4.8, 1.3, 0.0),
    "bike": (15.0, 1.25, 2.0),
    "drive": (28.0, 1.4, 5.0),
}
_DWELL_MIN = 0.5
_TRANSFER_MIN = 3.0


def nearest_place(city: City, lat: float, lng: float) -> Place:
    """Return the place closest to a point (ties broken by id, for determinism)."""
    return min(city.places, key=lambda p: (haversine_km(lat, lng, p.lat, p.lng), p.id))


def forecast(city: City, place: Place, day: dt.date) -> dict[str, JSONValue]:
    """Model the weather at ``place`` on ``day``; the same inputs always give the same output.

    Args:
        city: The offline city (for its climate normals).
        place: Where.
        day: Which local date.

    Returns:
        Condition, temperatures, precipitation and wind, with an evidence id and its source.
    """
    seed = f"agentledger/weather/v1|{place.id}|{day.isoformat()}".encode()
    digest = hashlib.sha256(seed).digest()
    draws = [byte / 255 for byte in digest[:5]]
    month = day.month - 1
    climate = city.climate
    wet = draws[0] < climate.wet_day_chance[month]
    swing = (draws[1] - 0.5) * 6.0
    high = climate.high_c[month] + place.temp_offset_c + swing - (1.5 if wet else 0.0)
    low = min(climate.low_c[month] + place.temp_offset_c + swing * 0.5, high - 2.0)
    precipitation = 0.5 + draws[2] * 14.0 if wet else 0.0
    if wet:
        condition = (
            "light rain" if precipitation < 4 else "rain" if precipitation < 10 else "heavy rain"
        )
    else:
        condition = "sunny" if draws[3] < 0.45 else "partly cloudy" if draws[3] < 0.8 else "cloudy"
    return {
        "evidence_id": f"weather:{place.id}:{day.isoformat()}",
        "place": {"id": place.id, "name": place.name},
        "date": day.isoformat(),
        "condition": condition,
        "temp_high_c": round(high, 1),
        "temp_low_c": round(low, 1),
        "precipitation_mm": round(precipitation, 1),
        "wind_kph": round(6.0 + draws[4] * 18.0 + place.wind_offset_kph),
        "source": _WEATHER_SOURCE,
    }


def estimate_route(
    city: City, origin: Location, destination: Location, mode: Mode
) -> dict[str, JSONValue]:
    """Estimate a trip between two locations.

    Args:
        city: The offline city (places and transit lines).
        origin: Where the trip starts.
        destination: Where it ends.
        mode: ``walk``, ``bike``, ``drive`` or ``transit``.

    Returns:
        Distance, whole-minute duration (rounded up) and legs, with an evidence id.

    Raises:
        ToolFailure: ``invalid_route`` when origin and destination are the same;
            ``no_route`` when transit needs more than one transfer.
    """
    if origin.id == destination.id:
        raise ToolFailure("invalid_route", f"origin and destination are both {origin.name!r}")
    if mode == "transit":
        legs = _transit_legs(city, origin, destination)
    else:
        legs = [_direct_leg(mode, origin.name, destination.name, _km(origin, destination))]
    minutes = sum(_leg_minutes(leg) for leg in legs)
    distance = sum(_leg_km(leg) for leg in legs)
    return {
        "evidence_id": f"route:{origin.id}->{destination.id}:{mode}",
        "origin": {"id": origin.id, "name": origin.name},
        "destination": {"id": destination.id, "name": destination.name},
        "mode": mode,
        "distance_km": round(distance, 2),
        "duration_min": math.ceil(minutes),
        "legs": list(legs),
        "method": _ROUTE_METHOD,
    }


def _km(a: Location | Place, b: Location | Place) -> float:
    return haversine_km(a.lat, a.lng, b.lat, b.lng)


def _leg_minutes(leg: dict[str, JSONValue]) -> float:
    value = leg["minutes"]
    assert isinstance(value, float | int)
    return float(value)


def _leg_km(leg: dict[str, JSONValue]) -> float:
    value = leg["distance_km"]
    assert isinstance(value, float | int)
    return float(value)


def _direct_leg(mode: str, start: str, end: str, straight_km: float) -> dict[str, JSONValue]:
    speed, detour, overhead = _DIRECT[mode]
    km = straight_km * detour
    return {
        "mode": mode,
        "from": start,
        "to": end,
        "distance_km": round(km, 2),
        "minutes": round(overhead + km / speed * 60.0, 1),
    }


@dataclass(frozen=True)
class _Ride:
    line: Line
    board: str
    alight: str
    km: float
    stops: int

    @property
    def minutes(self) -> float:
        in_vehicle = self.km / self.line.speed_kph * 60.0
        return self.line.headway_min / 2 + in_vehicle + _DWELL_MIN * max(self.stops - 1, 0)


def _ride(city: City, line: Line, board: str, alight: str) -> _Ride:
    i, j = line.stops.index(board), line.stops.index(alight)
    step = 1 if j > i else -1
    path = [city.place(line.stops[k]) for k in range(i, j + step, step)]
    km = sum(_km(a, b) for a, b in itertools.pairwise(path))
    return _Ride(line=line, board=board, alight=alight, km=km, stops=abs(j - i))


def _rides(city: City, board: str, alight: str) -> list[_Ride]:
    direct = [
        [_ride(city, line, board, alight)]
        for line in city.lines
        if board in line.stops and alight in line.stops
    ]
    transfers = [
        [_ride(city, first, board, stop), _ride(city, second, stop, alight)]
        for first in city.lines
        if board in first.stops
        for second in city.lines
        if alight in second.stops and second.id != first.id
        for stop in first.stops
        if stop in second.stops and stop not in (board, alight)
    ]
    options = direct + transfers
    if not options:
        return []

    def cost(rides: list[_Ride]) -> tuple[float, str]:
        total = sum(ride.minutes for ride in rides) + _TRANSFER_MIN * (len(rides) - 1)
        return total, "/".join(f"{ride.line.id}@{ride.alight}" for ride in rides)

    return min(options, key=cost)


def _transit_legs(
    city: City, origin: Location, destination: Location
) -> list[dict[str, JSONValue]]:
    board = nearest_place(city, origin.lat, origin.lng)
    alight = nearest_place(city, destination.lat, destination.lng)
    if board.id == alight.id:
        return [_direct_leg("walk", origin.name, destination.name, _km(origin, destination))]
    rides = _rides(city, board.id, alight.id)
    if not rides:
        message = (
            f"no transit connection with at most one transfer from {origin.name} "
            f"to {destination.name}"
        )
        raise ToolFailure("no_route", message)
    legs: list[dict[str, JSONValue]] = []
    if origin.id != board.id:
        legs.append(_direct_leg("walk", origin.name, board.name, _km(origin, board)))
    for index, ride in enumerate(rides):
        transfer = _TRANSFER_MIN if index > 0 else 0.0
        legs.append(
            {
                "mode": ride.line.vehicle,
                "line": ride.line.id,
                "line_name": ride.line.name,
                "from": city.place(ride.board).name,
                "to": city.place(ride.alight).name,
                "stops": ride.stops,
                "wait_min": ride.line.headway_min / 2,
                "distance_km": round(ride.km, 2),
                "minutes": round(ride.minutes + transfer, 1),
            }
        )
    if destination.id != alight.id:
        legs.append(_direct_leg("walk", alight.name, destination.name, _km(alight, destination)))
    return legs
