"""Shared test configuration: Hypothesis profiles and the network guard."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, settings

from agentledger.ledger import Ledger, SequentialIds, StepClock

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# Backends ------------------------------------------------------------------------------------

PG_URL_ENV = "AGENTLEDGER_TEST_PG_URL"
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


def _pg_base_url() -> str | None:
    """The PostgreSQL URL tests may use, or None when no server answers."""
    url = os.environ.get(PG_URL_ENV, PG_DEFAULT)
    try:
        with psycopg.connect(url, connect_timeout=2):
            return url
    except psycopg.Error:
        return None


_PG = _pg_base_url()
PG_SKIP = (
    "PostgreSQL is not reachable: start it (pg_ctlcluster --skip-systemctl-redirect "
    f"$(ls /etc/postgresql) main start) or set {PG_URL_ENV}"
)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL ledger URL in a fresh schema, dropped after the test."""
    if _PG is None:
        if os.environ.get("CI"):
            pytest.fail(PG_SKIP)
        pytest.skip(PG_SKIP)
    schema = f"t_{os.urandom(6).hex()}"
    yield f"{_PG}?schema={schema}"
    with psycopg.connect(_PG, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite ledger URL in a temporary directory."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_url(request: pytest.FixtureRequest) -> str:
    """A ledger URL for each backend: memory, SQLite and the real PostgreSQL."""
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    """An open ledger on each backend, with a deterministic clock and ids."""
    opened = Ledger.open(ledger_url, clock=StepClock(), ids=SequentialIds(ledger_url))
    yield opened
    opened.close()
