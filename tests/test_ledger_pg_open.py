"""Opening a PostgreSQL ledger: no DDL once the schema is current, so concurrent opens succeed.

Eight processes open the same ledger at once, first on a fresh schema (one creates it, the
others wait on the advisory lock) and then again on the existing one (no DDL at all). Before,
every open re-ran ``CREATE OR REPLACE FUNCTION/TRIGGER`` and most concurrent opens died with
"deadlock detected".
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from agentledger.ledger import Ledger

OPENERS = 8
OPEN_AND_WAIT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    go = Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.005)
    from agentledger.ledger import Ledger
    Ledger.open(sys.argv[1]).close()
    """
)


def open_all_at_once(
    url: str, tmp_path: Path, round_name: str
) -> list[subprocess.CompletedProcess[str]]:
    """Start OPENERS processes that open `url` together; return how each ended."""
    go = tmp_path / f"go-{round_name}"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AND_WAIT, url, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(OPENERS)
    ]
    time.sleep(1.0)  # every interpreter has started and waits on the flag
    go.touch()
    done = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(worker.args, worker.returncode, out, err))
    return done


@pytest.mark.postgres
@pytest.mark.slow
def test_eight_processes_open_one_postgres_ledger_at_once(pg_url: str, tmp_path: Path) -> None:
    """Every open succeeds, on a fresh schema and on the existing one; the ledger works."""
    for round_name in ("fresh", "existing"):
        results = open_all_at_once(pg_url, tmp_path, round_name)
        failed = [r.stderr for r in results if r.returncode != 0]
        assert failed == [], failed
    with Ledger.open(pg_url) as ledger, ledger.record_run("after", input="x") as run:
        run.delta({"ok": True})
    with Ledger.open(pg_url) as ledger:
        assert ledger.verify().ok


@pytest.mark.postgres
def test_an_open_of_a_current_schema_runs_no_ddl(pg_url: str) -> None:
    """The second open leaves the triggers as they are: it does not re-create anything."""
    Ledger.open(pg_url).close()
    base, schema = pg_url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(
            f'DROP TRIGGER agentledger_events_no_truncate ON "{schema}".agentledger_events'
        )
    Ledger.open(pg_url).close()
    with psycopg.connect(base, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON t.tgrelid = c.oid "
            "JOIN pg_namespace n ON c.relnamespace = n.oid "
            "WHERE t.tgname = 'agentledger_events_no_truncate' AND n.nspname = %s",
            (schema,),
        ).fetchone()
    assert found == (0,), "an open re-ran the DDL"
