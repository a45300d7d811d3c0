"""Reading an export file in bounded memory: one pass checks it, later passes read it again.

`ExportFile.open` reads the file once, line by line (`_export_source`), checking each line
(`_export_lines`): the header, then events, blobs, a checkpoint and proofs in any order, events
at positions 1, 2, 3... The sound events are fed to a `RunVerifier` a page at a time as they
come (the hash chain is checked on the way), and what later checks need is kept in a scratch
SQLite database (`_export_index`): where each line is and its hash, each event's hashes, what
the conversation checks and the blob walk read. At the end of the pass come the counts the
header announced and the conversation chains. Nothing of the run is held in memory beyond a
page of events and one line. `ExportFile.verify` finishes the verification (the blobs the run
reaches and lacks; a broken chain is read again to name where each link points), `records`
and `blob_rows` read events and blobs again for a writer, and `check_unchanged` re-hashes the
file: a line read again that is not what was checked raises `ImportRefusedError`. Must not
write the ledger.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from agentledger.ledger._canonical import canonical_json_of_parsed, loads
from agentledger.ledger._export_index import EventRow, ExportIndex
from agentledger.ledger._export_lines import (
    FORMAT,
    Findings,
    check_blob,
    check_event,
    check_proof_line,
    is_uuid,
    line_limit,
    node_of,
    parse_line,
    too_long,
)
from agentledger.ledger._export_source import (
    ExportSource,
    FileChangedError,
    Line,
    UnreadableError,
)
from agentledger.ledger._hashing import blob_ref, hash_envelope_with_payload_bytes
from agentledger.ledger._limits import Limits
from agentledger.ledger._records import VERIFY_PAGE, RecordedEvent
from agentledger.ledger._subjects import is_sealed
from agentledger.ledger._verify import RunVerifier, VerifyReport
from agentledger.ledger._verify_blobs import refs_in_canonical
from agentledger.ledger.errors import ImportRefusedError

__all__ = ["PROGRESS_EVERY", "ExportFile"]

PROGRESS_EVERY = 1000
"""How many lines an export writes, or an import checks, between two calls of its ``progress``."""
_CALL_KINDS = frozenset({"ModelCalled", "SynthesisProduced"})


class ExportFile:
    """An export file read and checked line by line (see the module doc).

    `findings` holds what is wrong with it, line by line; `verify` and the readers below may
    only be used when nothing is.
    """

    def __init__(self, path: Path, limits: Limits, source: ExportSource, index: ExportIndex):
        self.source = str(path)
        self.limits = limits
        self.findings = Findings(self.source)
        self.header: dict[str, Any] = {}
        self.event_count = 0
        self.blob_count = 0
        self.proof_count = 0
        self.checkpoint: str | None = None
        self._source = source
        self._index = index
        self._verifier: RunVerifier | None = None
        self._recomputed: dict[int, bytes] = {}
        self._page: list[tuple[RecordedEvent, Line]] = []

    @classmethod
    @contextmanager
    def open(
        cls,
        path: Path,
        limits: Limits,
        progress: Callable[[int, int], None] | None = None,
    ) -> Iterator[ExportFile]:
        """Read and check the file at `path`; the file and its scratch index last the block.

        Raises `ImportRefusedError` at once for a file that cannot be read, is not UTF-8, is
        empty or does not begin with a header; anything else wrong is in ``findings``.
        ``progress`` is told (lines read, lines the header announces) every `PROGRESS_EVERY`
        lines and at the end.
        """
        with ExitStack() as stack:
            scratch = Path(
                stack.enter_context(
                    tempfile.TemporaryDirectory(
                        prefix="agentledger-import-", ignore_cleanup_errors=True
                    )
                )
            )
            try:
                source = stack.enter_context(ExportSource(path, scratch))
                index = ExportIndex(scratch)
                stack.callback(index.close)
                file = cls(path, limits, source, index)
                file._read(progress)
            except UnreadableError as e:
                raise ImportRefusedError(str(path), [f"cannot read the file: {e}"]) from e
            yield file

    @property
    def run_id(self) -> str:
        """The run id the header names."""
        return str(self.header.get("run_id", ""))

    def refuse(self) -> None:
        """Raise `ImportRefusedError` if anything is wrong."""
        self.findings.refuse()

    # The first pass --------------------------------------------------------------------------

    def _read(self, progress: Callable[[int, int], None] | None) -> None:
        """Check every line, keeping what later checks need in the index."""
        lines = (line for line in self._source.lines(line_limit(self.limits)) if not line.blank)
        first = next(lines, None)
        if first is None:
            raise ImportRefusedError(self.source, ["the file is empty"])
        header = self._parse(first)
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            for _ in lines:  # a file that is not UTF-8 is refused as unreadable first
                pass
            raise ImportRefusedError(
                self.source, [f"line {first.number} is not an {FORMAT} header"]
            )
        self.header = header
        run_id = header.get("run_id")
        if not isinstance(run_id, str) or not is_uuid(run_id):
            detail = f"field 'run_id' must be a run id (a lowercase UUID), got {run_id!r}"
            self.findings.problem(first.number, detail)
        self._verifier = RunVerifier(self.run_id, None, recomputed=self._recomputed)
        total, done = _announced(header), 1
        for line in lines:
            self._take(line)
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(done, max(done, total))
        self._flush()
        self._index.flush()
        if progress is not None:
            progress(done, done)
        counts: tuple[tuple[str, int], ...] = (
            ("events", self.event_count),
            ("blobs", self.blob_count),
        )
        if "proofs" in header or self.proof_count:
            counts += (("proofs", self.proof_count),)
        for name, found in counts:
            announced = header.get(name)
            if (name in header or name == "events") and (
                type(announced) is not int or announced != found
            ):
                detail = f"field '{name}': header announces {announced!r}, file has {found}"
                self.findings.problem(first.number, detail)
        self._index.check_conversations(self.findings)

    def _take(self, line: Line) -> None:
        """Check one line after the header."""
        item = self._parse(line)
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "event":
            self._event(line, item)
        elif kind == "blob":
            self._blob(line, item)
        elif kind in ("checkpoint", "proof"):  # compared, not hashed: `kind` may be any JSON
            self._proof_line(line, item)
        elif item is not None:
            what = "neither an event, a blob, a checkpoint nor a proof (field 'type')"
            self.findings.problem(line.number, what)

    def _parse(self, line: Line) -> Any:
        """One line's JSON, or None (with the problem noted)."""
        if line.text is None:
            too_long(self.findings, self.limits, line.number, line.length)
            return None
        return parse_line(self.findings, self.limits, line.number, line.text)

    def _event(self, line: Line, item: dict[str, Any]) -> None:
        """Check one event line (the n-th must be position n); index it if it is sound."""
        self.event_count += 1
        run_id = self.header.get("run_id")
        checked = check_event(
            self.findings,
            self.limits,
            line.number,
            item,
            run_id=run_id,
            expected=self.event_count,
        )
        if checked is None:
            return
        record = checked[0]
        if record.kind in _CALL_KINDS:
            self._index.add_call(record.position, line.number, record.kind, record.payload)
        self._page.append((record, line))
        if len(self._page) >= VERIFY_PAGE:
            self._flush()

    def _flush(self) -> None:
        """Verify the page of events read (while the file is sound so far) and index it."""
        page, verifier = self._page, self._verifier
        if not page:
            return
        assert verifier is not None
        if not self.findings.problems:  # else the file is refused: its chain does not matter
            verifier.feed([record for record, _ in page], {})
            named = verifier.named_blobs.pending
            self._index.add_named(named.items())
            named.clear()
        recomputed = self._recomputed
        self._index.add_events(
            (
                record.position,
                line.number,
                line.offset,
                line.size,
                line.digest,
                bytes.fromhex(record.hash),
                record.kind,
                _recomputed(recomputed.pop(record.position, None)),
            )
            for record, line in page
        )
        page.clear()

    def _blob(self, line: Line, item: dict[str, Any]) -> None:
        """Check one blob line; index it if it is sound (the index keeps a ref's first line)."""
        self.blob_count += 1
        checked = check_blob(self.findings, self.limits, line.number, item)
        if checked is None:
            return
        ref, canonical = checked
        content = item["content"]
        node = node_of(content)
        self._index.add_blob(
            ref,
            line,
            sealed=is_sealed(content),
            text=isinstance(content, str),
            node=None if node is None else (node[0] is not None, node[1]),
            refs=refs_in_canonical(canonical, content),
        )

    def _proof_line(self, line: Line, item: dict[str, Any]) -> None:
        """Keep the checkpoint (one at most) and index each event's inclusion proof (one each)."""
        if not check_proof_line(self.findings, line.number, item):
            return
        if item["type"] == "checkpoint":
            if self.checkpoint is not None:
                self.findings.problem(line.number, "a second checkpoint line")
            else:
                self.checkpoint = item["note"]
        elif self._index.add_proof(item["position"], line):
            self.proof_count += 1
        else:
            self.findings.problem(line.number, f"a second proof of position {item['position']}")

    # After the first pass (only for a sound file) --------------------------------------------

    def line_of(self, position: int) -> int:
        """The line of the event at `position` (line 1, the header, if there is none)."""
        return self._index.line_of(position) or 1

    def verify(self) -> VerifyReport:
        """Verify the run as `verify_run` does: its hash chain, and the blobs it reaches.

        The chain was checked as the events were read; where a link points elsewhere, the
        events are read again to name where its predecessor is.
        """
        verifier = self._verifier
        assert verifier is not None
        assert not self.findings.problems
        report = verifier.finish()
        if verifier.needs_origins:
            origins = self._index.origins(verifier.needs_origins)
            verifier = RunVerifier(self.run_id, None, origins=origins)
            for page in self.records(0, VERIFY_PAGE, verified=False):
                verifier.feed([record for record, _ in page], {})
                verifier.named_blobs.pending.clear()  # taken on the first pass
            report = verifier.finish()
        problems, checked = self._index.blob_problems(self.run_id)
        report.problems += problems
        report.blobs_checked += checked
        return report

    def hashes(self) -> Iterator[str]:
        """The events' hashes as the file states them, in position order."""
        return self._index.hashes()

    def recomputed(self) -> Iterator[tuple[int, str]]:
        """(position, hash recomputed from the event's content), in position order."""
        return self._index.recomputed()

    def last_kind(self) -> str | None:
        """The kind of the run's last event (None without events)."""
        return self._index.last_kind()

    def records(
        self, after: int, size: int, *, verified: bool = True
    ) -> Iterator[list[tuple[RecordedEvent, bytes]]]:
        """The events after position `after`, read again, in pages of `size`.

        Each with its payload's canonical bytes. Raises `ImportRefusedError` at a line that
        is not what was checked; with `verified` (the run verified), at an event whose hash,
        recomputed, is not its stated hash.
        """
        page: list[tuple[RecordedEvent, bytes]] = []
        for row in self._index.events(after):
            page.append(self._record(row, verified=verified))
            if len(page) >= size:
                yield page
                page = []
        if page:
            yield page

    def _record(self, row: EventRow, *, verified: bool) -> tuple[RecordedEvent, bytes]:
        """The event of an index row, read again: its line must be the one checked.

        The line's bytes are the ones checked, so it parses with the ledger's own reader
        (`loads`, as for stored bytes); with `verified`, its hash, recomputed, must still be
        the one verified.
        """
        position, number, offset, size, digest = row
        item = loads(self._line(number, offset, size, digest))
        payload: dict[str, Any] = item["payload"]
        record = RecordedEvent(
            run_id=item["run_id"],
            position=position,
            kind=item["kind"],
            version=item["version"],
            timestamp=item["timestamp"],
            event_id=item["event_id"],
            prev=item["prev"],
            hash=item["hash"],
            payload=payload,
        )
        payload_jcs = canonical_json_of_parsed(payload)
        if not verified:
            return record, payload_jcs
        again = hash_envelope_with_payload_bytes(
            run_id=record.run_id,
            position=position,
            kind=record.kind,
            version=record.version,
            timestamp=record.timestamp,
            event_id=record.event_id,
            prev=record.prev,
            payload_jcs=payload_jcs,
        )
        if again != record.hash:
            raise ImportRefusedError(self.source, [_changed(number)])
        return record, payload_jcs

    def blob_rows(self) -> Iterator[tuple[str, bytes]]:
        """Each blob once (ref, canonical bytes), read again in file order.

        Raises `ImportRefusedError` at a line that is not what was checked (its bytes, or its
        content's hash).
        """
        for ref, number, offset, size, digest in self._index.blobs():
            item = loads(self._line(number, offset, size, digest))
            canonical = canonical_json_of_parsed(item["content"])
            if blob_ref(canonical) != ref:
                raise ImportRefusedError(self.source, [_changed(number)])
            yield ref, canonical

    @property
    def proofs(self) -> Mapping[int, dict[str, Any]]:
        """The proof lines by event position, each read again when asked for."""
        return _Proofs(self)

    def _proof(self, position: int) -> dict[str, Any] | None:
        where = self._index.proof(position)
        if where is None:
            return None
        item: dict[str, Any] = loads(self._line(*where))
        return item

    def _line(self, number: int, offset: int, size: int, digest: bytes) -> bytes:
        try:
            return self._source.line(number, offset, size, digest)
        except FileChangedError as e:
            raise ImportRefusedError(self.source, [_changed(number)]) from e

    def check_unchanged(self) -> None:
        """Refuse (`ImportRefusedError`) a file whose bytes are not those the first pass read."""
        try:
            self._source.check_unchanged()
        except FileChangedError as e:
            detail = (
                "the file changed after it was checked (nothing was written): import it again "
                "once it stops changing"
            )
            raise ImportRefusedError(self.source, [detail]) from e


class _Proofs(Mapping[int, dict[str, Any]]):
    """An export file's proof lines by position, read from the file when looked up."""

    def __init__(self, file: ExportFile) -> None:
        self._file = file

    def __getitem__(self, position: int) -> dict[str, Any]:
        item = self._file._proof(position)
        if item is None:
            raise KeyError(position)
        return item

    def __iter__(self) -> Iterator[int]:
        for position, *_ in self._file._index.proofs():
            yield position

    def __len__(self) -> int:
        return self._file.proof_count


def _changed(number: int) -> str:
    return (
        f"line {number} changed while the file was read again (it is not the line that was checked)"
    )


def _announced(header: dict[str, Any]) -> int:
    """The lines the header announces: itself, events, blobs and proofs (with a checkpoint)."""
    counts = [header.get(name) for name in ("events", "blobs", "proofs")]
    lines = 1 + sum(n for n in counts if type(n) is int and n > 0)
    return lines + (1 if type(counts[2]) is int and counts[2] > 0 else 0)


def _recomputed(digest: bytes | None) -> bytes | None:
    """A recomputed hash; None where it could not be recomputed (32 zero bytes)."""
    return None if digest is None or not any(digest) else digest
