"""The bundled offline city (``city.json``): its schema, loading, name lookup and geometry.

Owns reading ``city.json`` through ``importlib.resources`` into frozen models, resolving a
free-text place to a known place or point of interest (exact names, aliases and ids only: no
fuzzy guesses), great-circle distance, and opening-hours checks. It must not do network or disk
I/O beyond reading its own data file, and must not invent places: an unknown name is a
``ToolFailure("not_found")`` that lists what is known.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.resources
import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentledger.tools.errors import ToolFailure

__all__ = [
    "City",
    "Climate",
    "Line",
    "Location",
    "Place",
    "Poi",
    "haversine_km",
    "is_open",
    "load_city",
    "resolve",
]

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_EARTH_RADIUS_KM = 6371.0088
HHMM = Annotated[str, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$|^24:00$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Climate(_Frozen):
    """Monthly normals the weather model varies around (index 0 is January)."""

    note: str = ""
    high_c: tuple[float, ...] = Field(min_length=12, max_length=12)
    low_c: tuple[float, ...] = Field(min_length=12, max_length=12)
    wet_day_chance: tuple[float, ...] = Field(min_length=12, max_length=12)


class Place(_Frozen):
    """A named area of the city; transit lines stop at places."""

    id: str = Field(pattern=r"^place:[a-z0-9-]+$")
    name: str
    aliases: tuple[str, ...] = ()
    lat: float
    lng: float
    wind_offset_kph: float = 0.0
    temp_offset_c: float = 0.0


class Poi(_Frozen):
    """A point of interest; its ``id`` is the stable evidence id answers must cite."""

    id: str = Field(pattern=r"^poi:[a-z0-9-]+$")
    name: str
    category: str
    tags: tuple[str, ...]
    price_level: int = Field(ge=0, le=4)
    lat: float
    lng: float
    opening_hours: dict[Weekday, tuple[tuple[HHMM, HHMM], ...]]


class Line(_Frozen):
    """A transit line: the places it stops at, in order, its headway and average speed."""

    id: str
    name: str
    vehicle: Literal["tram", "bus", "rail"]
    headway_min: float = Field(gt=0)
    speed_kph: float = Field(gt=0)
    stops: tuple[str, ...] = Field(min_length=2)


class City(_Frozen):
    """The whole offline data set."""

    format: Literal["agentledger/offline-city/v1"]
    name: str
    note: str
    utc_offset: str = Field(pattern=r"^[+-]\d\d:\d\d$")
    climate: Climate
    places: tuple[Place, ...]
    pois: tuple[Poi, ...]
    lines: tuple[Line, ...]

    @property
    def tz(self) -> dt.timezone:
        """The city's fixed UTC offset (the fictional city keeps no daylight saving time)."""
        sign = -1 if self.utc_offset.startswith("-") else 1
        hours, minutes = self.utc_offset[1:].split(":")
        return dt.timezone(sign * dt.timedelta(hours=int(hours), minutes=int(minutes)))

    def place(self, place_id: str) -> Place:
        """Return the place with that id (ids come from the data file itself)."""
        return next(place for place in self.places if place.id == place_id)


class Location(_Frozen):
    """A resolved place or point of interest."""

    id: str
    name: str
    kind: Literal["place", "poi"]
    lat: float
    lng: float


@functools.cache
def load_city() -> City:
    """Read and validate the bundled ``city.json`` (once; the result is immutable)."""
    text = importlib.resources.files("agentledger.tools").joinpath("city.json").read_text("utf-8")
    return City.model_validate_json(text)


def _normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9:]+", " ", text.casefold()).strip()


def resolve(query: str) -> Location:
    """Find the place or point of interest ``query`` names (its id, name or an alias).

    Args:
        query: Free text such as ``"Old Town"``, ``"harbor"`` or ``"poi:clocktower"``;
            case, punctuation and a trailing ", Vellmar" are ignored.

    Returns:
        The location.

    Raises:
        ToolFailure: ``not_found`` when nothing matches exactly; the message lists the known
            place names so a model can correct itself.
    """
    city = load_city()
    wanted = _normalise(query)
    suffix = " " + _normalise(city.name)
    if wanted.endswith(suffix):
        wanted = wanted.removesuffix(suffix)
    for place in city.places:
        names = (place.id, place.name, *place.aliases)
        if wanted in {_normalise(name) for name in names}:
            return Location(
                id=place.id, name=place.name, kind="place", lat=place.lat, lng=place.lng
            )
    for poi in city.pois:
        if wanted in {_normalise(poi.id), _normalise(poi.name)}:
            return Location(id=poi.id, name=poi.name, kind="poi", lat=poi.lat, lng=poi.lng)
    known = ", ".join(place.name for place in city.places)
    message = (
        f"no place or point of interest called {query!r} in {city.name}; known places: {known}"
    )
    raise ToolFailure("not_found", message)


def haversine_km(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    """Great-circle distance in kilometres between two points given in degrees."""
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi = phi2 - phi1
    dlmb = math.radians(lng2 - lng1)
    a = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlmb / 2) ** 2
    return 2 * _EARTH_RADIUS_KM * math.asin(math.sqrt(a))


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def is_open(poi: Poi, when: dt.datetime) -> bool:
    """Whether ``poi`` is open at local wall-clock time ``when``.

    An interval whose end is not after its start (``["17:00", "02:00"]``) runs past midnight
    into the next day.
    """
    today = WEEKDAYS[when.weekday()]
    yesterday = WEEKDAYS[(when.weekday() - 1) % 7]
    now = when.hour * 60 + when.minute
    for start, end in poi.opening_hours.get(today, ()):
        opens, closes = _minutes(start), _minutes(end)
        if (opens <= now < closes) or (closes <= opens and now >= opens):
            return True
    for start, end in poi.opening_hours.get(yesterday, ()):
        opens, closes = _minutes(start), _minutes(end)
        if closes <= opens and now < closes:
            return True
    return False
