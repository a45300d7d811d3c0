"""Shared CLI plumbing: opening the ledger from --db, resolving run-id prefixes, errors."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path
from typing import Literal, NoReturn

from agentledger.ledger import Clock, Ledger, LedgerError, Limits, ReadOnlyDatabaseError

__all__ = [
    "CliError",
    "database_error",
    "open_ledger",
    "parse_time",
    "plural",
    "resolve_run",
    "whole_number",
    "write_output",
]

TIME_FORMS = (
    "an ISO 8601 time (2026-01-31T09:30:00+01:00, taken as UTC without an offset), "
    "a date (2026-01-31) or an age (30m, 2h, 3d, 1w)"
)
_AGE = re.compile(r"(\d+)([mhdw])")
_AGE_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


WHOLE_NUMBER_MAX = 2**53 - 1
"""The largest integer an option takes (and the smallest, negated): JSON's safe integers, which
every payload records exactly and SQL holds in 64 bits. No count, limit or position comes near."""


def whole_number(text: str) -> int:
    """The ``type=`` of every integer option: a whole number within +/-`WHOLE_NUMBER_MAX`.

    A larger one would reach SQL as a number the database cannot hold (SQLite: "datatype
    mismatch", PostgreSQL: "bigint out of range") or a payload as one JSON cannot carry; argparse
    then names the option and exits 2. Lower bounds are the commands' own (``runs -n`` refuses
    0, a position is checked against its run).
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value > WHOLE_NUMBER_MAX:
        raise argparse.ArgumentTypeError(f"{text} is too large: at most {WHOLE_NUMBER_MAX}")
    if value < -WHOLE_NUMBER_MAX:
        raise argparse.ArgumentTypeError(f"{text} is too small: at least {-WHOLE_NUMBER_MAX}")
    return value


class CliError(Exception):
    """A user-facing error: printed as ``agentledger: <message>``, exit status 2."""


def open_ledger(
    args: argparse.Namespace, *, create: bool = True, read_only: bool | Literal["auto"] = False
) -> Ledger:
    """Open the ledger named by --db / $AGENTLEDGER_DB (default ./agentledger.db).

    Commands that record new runs keep the default, ``create=True``: a missing SQLite file is
    created. Commands that work on recorded runs pass ``create=False`` (a missing SQLite file is
    an error, never created) or ``read_only=True`` (also opened read-only, so a file the user
    cannot write still reads). Commands that only read events but keep derived data (snapshots,
    read models) pass ``read_only="auto"``: a writable file keeps its derived data, a file
    marked read-only is opened read-only and its derived data is computed in memory. A command
    with ``--max-payload-bytes`` / ``--max-depth`` options opens it with those `Limits` (the
    defaults otherwise).

    Unless it creates, a SQLite file is first opened read-only and refused if it holds no
    ledger (an empty file, another program's database), so nothing is written to it. The URL
    opened is kept as ``args.ledger_url`` for the messages of errors met later
    (`database_error`).
    """
    if create and read_only is False:
        return _open(args, create=True, read_only=False)
    if not _names_sqlite(args.db):  # PostgreSQL and memory: opening creates no file
        return _open(args, create=False, read_only=read_only is True)
    reader = _holding_a_ledger(_open(args, create=False, read_only=True))
    if read_only is True:
        return reader
    try:
        writer = _open(args, create=False, read_only=False)
    except ReadOnlyDatabaseError:
        if read_only == "auto":
            return reader
        reader.close()
        raise
    except BaseException:
        reader.close()
        raise
    reader.close()
    return writer


def _open(args: argparse.Namespace, *, create: bool, read_only: bool) -> Ledger:
    log = None
    if args.verbose:  # structlog is imported only when asked for
        from agentledger.ledger import EventLogger

        log = EventLogger(json=args.log_json)
    caps = {
        name: value
        for name in ("max_payload_bytes", "max_depth")
        if (value := getattr(args, name, None)) is not None
    }
    ledger = Ledger.open(
        args.db, log=log, limits=Limits(**caps), create=create, read_only=read_only
    )
    args.ledger_url = ledger.url
    return ledger


def _names_sqlite(url: str | None) -> bool:
    """Whether --db names a SQLite file (None: the default, ./agentledger.db)."""
    return url is None or url.split("://", 1)[0].lower() == "sqlite"


def _holding_a_ledger(ledger: Ledger) -> Ledger:
    """`ledger`, once its events table is found; closed and refused when the file has none."""
    from eventsourcing.persistence import OperationalError

    try:
        ledger.max_notification_id()
    except BaseException as e:
        ledger.close()
        if isinstance(e, OperationalError) and "no such table" in str(e):
            raise CliError(
                f"{ledger.url}: the database file is not an agentledger ledger "
                "(no agentledger tables)"
            ) from None
        raise
    return ledger


def database_error(error: BaseException, url: str) -> str | None:
    """The message for a database error the ledger passed on untranslated, else None.

    A SQLite file whose pages no longer read (overwritten, truncated, a disk fault) is named
    damaged, with SQLite's own words; `url` names the ledger.
    """
    import sqlite3

    from eventsourcing.persistence import PersistenceError

    if not isinstance(error, PersistenceError | sqlite3.Error):
        return None
    detail = str(error)
    if "malformed" in detail:  # SQLITE_CORRUPT: "database disk image is malformed"
        return f"{url}: the database file is damaged ({detail})"
    return None


def parse_time(option: str, text: str | None, clock: Clock) -> str | None:
    """`text` given to `option` (``--since``) as the ledger's UTC timestamp form, or None.

    Accepts `TIME_FORMS`; an age counts back from `clock`. Timestamps are stored as
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, so the result compares correctly as text.
    """
    if text is None:
        return None
    age = _AGE.fullmatch(text.strip())
    try:
        if age:
            now = dt.datetime.fromisoformat(clock.now())
            when = now - dt.timedelta(**{_AGE_UNITS[age.group(2)]: int(age.group(1))})
        elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
            when = dt.datetime.combine(dt.date.fromisoformat(text.strip()), dt.time(), dt.UTC)
        elif re.fullmatch(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}.*", text.strip()):
            when = dt.datetime.fromisoformat(text.strip())
        else:
            raise ValueError(text)
    except (ValueError, OverflowError) as e:
        raise CliError(f"{option} {text!r} is not a time: give {TIME_FORMS}") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    utc = when.astimezone(dt.UTC)
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S.%f}Z"


def plural(count: int, noun: str) -> str:
    """``1 run``, ``2 runs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def resolve_run(ledger: Ledger, text: str) -> str:
    """Accept a full run id, a unique prefix of one, or ``last`` (the newest run)."""
    ids = ledger.run_ids()
    if text in ids:
        return text
    if text == "last":  # no run id or prefix spells it: ids are hexadecimal
        newest = ledger.runs(limit=1)
        if not newest:
            raise CliError(f"no runs in {ledger.url}")
        return newest[0].run_id
    matches = [rid for rid in ids if rid.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CliError(f"no run matches {text!r} in {ledger.url}")
    raise CliError(f"{text!r} matches {len(matches)} runs; give more of the id")


def fail(message: str) -> NoReturn:
    """Print an error and exit 2."""
    print(f"agentledger: {message}", file=sys.stderr)
    raise SystemExit(2)


def describe(error: LedgerError) -> str:
    """A one-line description of a ledger error."""
    return f"{type(error).__name__}: {error}"


def write_output(output: str | None, text: str) -> None:
    """Write `text` to the file `output` (saying so on stderr), or to stdout when none is given."""
    if not output:
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot write {output!r}: {e}") from None
    print(f"wrote {output} ({len(text.encode()):,} bytes)", file=sys.stderr)
