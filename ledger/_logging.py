"""Structured logging of appended events with structlog, without global configuration.

`EventLogger` writes one line per appended event (JSON or console) to a stream it owns. A ledger
without one is silent, so embedding the library prints nothing; the CLI turns it on with ``-v``.
Must not configure structlog globally.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

import structlog

if TYPE_CHECKING:
    from agentledger.ledger._records import RecordedEvent

__all__ = ["EventLogger"]


class EventLogger:
    """Logs each appended event as one structured line."""

    def __init__(self, *, json: bool = False, stream: TextIO | None = None) -> None:
        renderer: Any = (
            structlog.processors.JSONRenderer(sort_keys=True)
            if json
            else structlog.dev.ConsoleRenderer(colors=False)
        )
        self._log = structlog.wrap_logger(
            structlog.PrintLogger(file=stream or sys.stderr),
            processors=[structlog.processors.add_log_level, renderer],
        )

    def recorded(self, record: RecordedEvent) -> None:
        """Log one appended event."""
        self._log.info(
            "event.appended",
            run_id=record.run_id,
            position=record.position,
            kind=record.kind,
            at=record.timestamp,
            hash=record.hash[:16],
            actor=record.payload.get("actor"),
        )

    def info(self, message: str, **fields: Any) -> None:
        """Log a line about the ledger's own work (progress, fallbacks)."""
        self._log.info(message, **fields)

    def warning(self, message: str, **fields: Any) -> None:
        """Log a warning (a corrupt snapshot, a refused import)."""
        self._log.warning(message, **fields)
