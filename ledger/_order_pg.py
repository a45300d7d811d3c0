"""The ledger-wide order on PostgreSQL: which event is the n-th, for every follower.

Writers insert events without any table lock, so the ``notification_id`` (a ``bigserial``) an
insert draws is not in commit order: a transaction that drew id 7 may commit after one that drew
id 8, and a follower that had read past 8 would skip 7 forever. So the ledger-wide sequence is
not drawn by writers but assigned after commit, by `assign_order`, into
``agentledger_event_order (seq, notification_id)``:

- every event row stores ``xact_id``, the id of the transaction that inserted it
  (``pg_current_xact_id()``, a 64-bit ``xid8`` that never wraps);
- one assigner at a time (a transaction-level advisory lock, held until it commits) numbers
  every committed row that has no number yet, in ``(xact_id, notification_id)`` order, on from
  the largest ``seq``, and then records the horizon ``H``: the ``xmin`` of the snapshot it used
  (``pg_snapshot_xmin(pg_current_snapshot())``), the oldest transaction still in progress.
  The next assigner looks only at rows with ``xact_id >= H`` (an index range).

Why no event is skipped or reordered for a follower:

1. ``seq`` is append-only and dense: assigners run one at a time, each continues from the
   largest ``seq`` it sees (its snapshot is taken after the lock, so it sees every earlier
   assigner's rows), and commits before the next can start. A follower reading ``seq > last``
   can never later find a number below ``last`` appear.
2. Every committed event gets a number, exactly once. Invariant: every committed row with
   ``xact_id < H`` is numbered. A transaction below the snapshot's ``xmin`` has ended, so its
   rows are visible to the assigner (or were rolled back and never will be), and a
   transaction that writes later gets an id at or above that ``xmin``. So after numbering every
   visible unnumbered row with ``xact_id >= H``, the invariant holds for ``H := xmin``; rows of
   transactions still in progress have ``xact_id >= xmin`` and are numbered by a later
   assigner. ``notification_id`` is unique in the order table, so nothing is numbered twice.
3. Two writers of one run still conflict on the events' primary key, and an event's number is
   given after the commit that made it visible, so a run's events are numbered in position
   order.

A long transaction elsewhere on the server only widens the range the assigner scans (it holds
``H`` back); events committed meanwhile are still numbered at once. Rows of a rolled-back
transaction are never visible and use up no number.

Followers (`Ledger.notifications`, the read models, the transparency log) read
``agentledger_event_order`` by ``seq`` and run the assigner when they reach its end. Rows
written before this order existed (schema version 5 and older) were written under eventsourcing's
table lock, so their ``notification_id`` is already in commit order: they keep ``xact_id`` 0 and
get ``seq = notification_id`` (gaps included; `migrate_to_commit_order`), so read models'
positions and the transparency log's batches stay valid. Must not know events' meaning.
"""

from __future__ import annotations

from typing import Any

from psycopg.sql import SQL, Composed, Identifier

__all__ = [
    "HORIZON_TABLE",
    "ORDER_TABLE",
    "assign_order",
    "migrate_to_commit_order",
    "order_statements",
]

ORDER_TABLE = "agentledger_event_order"
HORIZON_TABLE = "agentledger_event_order_horizon"
ASSIGN_BATCH = 50_000
"""Rows numbered per transaction of `assign_order`."""


def order_statements(schema: Identifier, events: Composed) -> list[Composed]:
    """The order's tables, the events' ``xact_id`` column and the index the assigner reads."""
    return [
        # Rows that predate the column get 0 (their notification ids are in commit order);
        # a new row gets the id of the transaction that inserts it.
        SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS xact_id xid8 NOT NULL DEFAULT '0'").format(
            events
        ),
        SQL("ALTER TABLE {} ALTER COLUMN xact_id SET DEFAULT pg_current_xact_id()").format(events),
        SQL(
            "CREATE INDEX IF NOT EXISTS agentledger_events_commit_order ON {} "
            "(xact_id, notification_id)"
        ).format(events),
        SQL(
            "CREATE TABLE IF NOT EXISTS {}.{} (seq BIGINT PRIMARY KEY, "
            "notification_id BIGINT NOT NULL UNIQUE)"
        ).format(schema, Identifier(ORDER_TABLE)),
        SQL(
            "CREATE TABLE IF NOT EXISTS {}.{} (one BOOLEAN PRIMARY KEY DEFAULT TRUE "
            "CHECK (one), horizon xid8 NOT NULL)"
        ).format(schema, Identifier(HORIZON_TABLE)),
        SQL("INSERT INTO {}.{} (horizon) VALUES ('0') ON CONFLICT DO NOTHING").format(
            schema, Identifier(HORIZON_TABLE)
        ),
    ]


def migrate_to_commit_order(curs: Any, schema: Identifier, events: Composed) -> None:
    """Number the rows written before the order existed: ``seq = notification_id``.

    Runs in the migration's transaction, after `order_statements` (whose ``ALTER TABLE`` holds
    the events table until commit, so no row is written meanwhile). Idempotent.
    """
    curs.execute(
        SQL(
            "INSERT INTO {}.{} (seq, notification_id) "
            "SELECT notification_id, notification_id FROM {} WHERE xact_id = '0' "
            "ON CONFLICT DO NOTHING"
        ).format(schema, Identifier(ORDER_TABLE), events)
    )
    # The assigner reads an index range of `xact_id`; without statistics for the new column
    # the planner would scan the whole table until autovacuum's next ANALYZE.
    curs.execute(SQL("ANALYZE {}").format(events))
    curs.execute(SQL("ANALYZE {}.{}").format(schema, Identifier(ORDER_TABLE)))


def assign_order(datastore: Any, schema: Identifier, events: Composed) -> int:
    """Number every committed event not numbered yet; return how many were numbered."""
    order = SQL("{}.{}").format(schema, Identifier(ORDER_TABLE))
    horizon = SQL("{}.{}").format(schema, Identifier(HORIZON_TABLE))
    numbered: int = 0
    while True:
        with datastore.transaction(commit=True) as curs:
            # The horizon only moves under this lock, and never back: one read in the same
            # statement as the lock is at most older (a longer scan, never a missed row).
            # The rows and the new horizon then share one snapshot (one statement) taken
            # after the lock, which sees every number given before.
            row = curs.execute(
                SQL(
                    "SELECT pg_advisory_xact_lock(hashtext(%s)) AS locked, "
                    "(SELECT horizon FROM {}) AS horizon"
                ).format(horizon),
                (f"agentledger:order:{datastore.schema}",),
            ).fetchone()
            since = str(row["horizon"]) if row is not None and row["horizon"] else "0"
            curs.execute(
                SQL(
                    "WITH due AS (SELECT e.xact_id, e.notification_id FROM {events} e "
                    "WHERE e.xact_id >= %(since)s::xid8 AND NOT EXISTS (SELECT 1 FROM {order} o "
                    "WHERE o.notification_id = e.notification_id) "
                    "ORDER BY e.xact_id, e.notification_id LIMIT %(limit)s), "
                    "last AS (SELECT COALESCE(max(seq), 0) AS seq FROM {order}), "
                    "added AS (INSERT INTO {order} (seq, notification_id) "
                    "SELECT last.seq + row_number() OVER (ORDER BY due.xact_id, "
                    "due.notification_id), due.notification_id FROM due, last RETURNING 1), "
                    "moved AS (UPDATE {horizon} SET horizon = "
                    "GREATEST(horizon, pg_snapshot_xmin(pg_current_snapshot())) "
                    "WHERE (SELECT count(*) FROM due) < %(limit)s RETURNING 1) "
                    "SELECT (SELECT count(*) FROM added) AS n"
                ).format(horizon=horizon, events=events, order=order),
                {"limit": ASSIGN_BATCH, "since": since},
            )
            row = curs.fetchone()
            done = int(row["n"]) if row is not None else 0
        numbered += done
        if done < ASSIGN_BATCH:
            return numbered
