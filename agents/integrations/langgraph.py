"""A LangGraph checkpointer on the ledger: `LedgerCheckpointSaver`.

``LedgerCheckpointSaver(ledger)`` is a ``langgraph.checkpoint.base.BaseCheckpointSaver``: compile
a graph with it and every thread becomes a ledger run (agent ``langgraph``, tag
``langgraph-thread``), recorded with catalogue events through the public `RunRecorder`:

- ``put`` records the checkpoint as a step: StepStarted (``step_id`` = checkpoint id,
  ``parent_step_id`` = the parent checkpoint, ``args`` = the checkpoint without its values:
  namespace, versions, versions seen, metadata, and a ``value_ref`` for each channel the
  checkpoint wrote; LangGraph's string versions ``f"{n:032}.{h:016}"`` as the numbers
  ``[n, h]``), a DeltaApplied of the graph state's change (root namespace only), and
  StepCompleted. Channel values are content-addressed blobs, one per channel version (unchanged
  channels are never copied); a list that grows is a chain of nodes (``prefix_ref`` and the new
  items), so a message list that gains two messages per step stores each message once.
  JSON values are stored as JSON, redacted by the run's policy as inline values are; any other
  value goes through LangGraph's serializer (``serde.dumps_typed``) and is stored base64-encoded
  (not redacted), hashed like everything else.
- ``put_writes`` records one task's writes as a step named after its node (StepStarted,
  StepCompleted with the writes as output; small JSON values inline, others as blobs).
- ``delete_thread`` appends a tombstone: a RunAnnotated labelled ``langgraph:delete-thread``,
  then RunCompleted with outcome ``thread-deleted``. LangGraph no longer sees the thread (a later
  ``put`` starts a new run for the same thread id); its history stays in the ledger, verifiable.
  ``prune`` and ``delete_for_runs`` hide single checkpoints the same way, with a RunAnnotated
  labelled ``langgraph:hidden`` about the checkpoint's position. Nothing is ever deleted.
- ``copy_thread`` starts the target's run from the source's (``relation="fork"``) and records
  its visible checkpoints and writes again, referring to the same blobs.

World state (``agentledger state``) is the graph state of the root namespace as JSON: each
channel's value, where a list channel is an object keyed by zero-padded index (RFC 7386 replaces
lists whole, so appending stays a small patch), ``None`` and null members are left out (RFC 7386
reads ``null`` as delete), objects of other types show as ``{"$type": ...}`` plus their pydantic
or dataclass fields, and a key ending in ``_ref``/``_refs`` gets a trailing ``#`` (the ledger
reads such keys as blob references). It is a readable view; the blobs hold the exact values.

Each thread's run id is derived from its thread id (UUID 5), so any process finds it; a saver
keeps what it read of a run in memory and reads only the events appended since (by any process)
on each call. Async methods run the blocking work in a worker thread (``asyncio.to_thread``).
Needs the ``langgraph`` extra: ``pip install 'agentledger[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import builtins
import dataclasses
import functools
import json
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.types import ERROR
except ImportError:  # pragma: no cover - exercised in a subprocess without the extra
    msg = "LedgerCheckpointSaver needs LangGraph: pip install 'agentledger[langgraph]'"
    raise ImportError(msg) from None

from pydantic import BaseModel

from agentledger.ledger import (
    INLINE_LIMIT,
    ConcurrencyError,
    Ledger,
    RecordedEvent,
    RunClosedError,
    RunRecorder,
    UnknownRunError,
)
from agentledger.ledger.events import (
    ConfigIdentity,
    ErrorInfo,
    RunAnnotated,
    StepCompleted,
    StepStarted,
)
from agentledger.projections import UnrepresentableDiffError, diff_patch

__all__ = ["AGENT", "TAG", "LedgerCheckpointSaver", "thread_run_id"]

AGENT = "langgraph"
"""The agent name of every thread's run."""
TAG = "langgraph-thread"
"""The tag every thread's run carries (``agentledger runs --tag langgraph-thread``)."""
SOURCE = "langgraph"
"""The ``source`` of the DeltaApplied events the saver records."""
AUTHOR = "langgraph"
DELETED_LABEL = "langgraph:delete-thread"
HIDDEN_LABEL = "langgraph:hidden"
DELETED_OUTCOME = "thread-deleted"
_THREADS = uuid.UUID("5b1d3c43-7f0e-5b7a-9c55-6c616e676772")
_MAX_SAFE = 2**53 - 1
_MAX_PLAIN_DEPTH = 128
_ATTEMPTS = 40
"""How often a write that lost a race to another writer of the same run is made again."""
_CACHED_THREADS = 256
_CACHED_LISTS = 512
_CACHED_NODES = 8192
_SCALARS = (str, int, float, bool, type(None))
_FOLDED = frozenset({"StepStarted", "StepCompleted", "RunAnnotated", "RunCompleted", "RunFailed"})
"""The kinds a thread first read from the ledger folds (its DeltaApplied: when needed)."""
_WORLD = ("DeltaApplied",)
_IN_CHECKPOINT = "StepStarted.args.channels"
_IN_WRITES = "StepCompleted.output.writes"
"""Where a blob's redactions are noted: the event that refers to it."""
_INLINE_VALUE = 64
"""Channel values whose JSON is at most this long are kept in the checkpoint's record: a blob
reference alone is 71 characters."""

Key = tuple[str, str]
"""A checkpoint's (namespace, checkpoint id)."""


def thread_run_id(thread_id: str, generation: int = 0) -> str:
    """The run id of a thread's run (generation n: after n deletions of the thread)."""
    return str(uuid.uuid5(_THREADS, f"{thread_id}\x00{generation}"))


# JSON values -----------------------------------------------------------------------------------


def _plain(value: Any) -> bool:  # noqa: PLR0911, PLR0912 - one flat dispatch over JSON types
    """Whether `value` round-trips through the ledger's JSON exactly and holds no ref-like key.

    Exact types only (a str subclass, a tuple or an integral float would come back changed), and
    no object key ending in ``_ref``/``_refs`` (the ledger follows those as blob references).
    """
    level = [value]
    depth = 0
    while level:
        depth += 1
        if depth > _MAX_PLAIN_DEPTH:
            return False
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if item is None or kind is bool or kind is str:
                if kind is str and not _text_ok(item):
                    return False
                continue
            if kind is int:
                if -_MAX_SAFE <= item <= _MAX_SAFE:
                    continue
                return False
            if kind is float:
                if math.isfinite(item) and not item.is_integer():
                    continue
                return False
            if kind is dict:
                for key, inner in item.items():
                    if type(key) is not str or _ref_like(key) or not _text_ok(key):
                        return False
                    below.append(inner)
                continue
            if kind is list:
                below.extend(item)
                continue
            return False
        level = below
    return True


def _text_ok(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _ref_like(key: str) -> bool:
    return key.endswith(("_ref", "_refs"))


def _tiny(value: Any) -> bool:
    """Whether `value` is JSON of at most `_INLINE_VALUE` bytes (stops counting past it)."""
    budget = _INLINE_VALUE
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            budget -= len(item) + 2
        elif kind is dict:
            budget -= 2 + 2 * len(item)
            for key, inner in item.items():
                budget -= len(key) + 2 if type(key) is str else _INLINE_VALUE
                stack.append(inner)
        elif kind is list:
            budget -= 1 + len(item)
            stack.extend(item)
        elif item is None or kind is bool or kind is int or kind is float:
            budget -= 4
        else:
            return False
        if budget < 0:
            return False
    try:
        return len(_dumps(value)) <= _INLINE_VALUE
    except (TypeError, ValueError, RecursionError):
        return False


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# World-state views -----------------------------------------------------------------------------

_ABSENT: Any = object()


def _index(i: int) -> str:
    return f"{i:06d}"


def _user_channel(name: str) -> bool:
    """Channels of the graph's state (not LangGraph's triggers and task queues)."""
    return not name.startswith("branch:") and (name == "__root__" or not name.startswith("__"))


def _view(value: Any, depth: int = 0) -> Any:  # noqa: PLR0911 - one flat dispatch over types
    """A JSON view of `value` with no null member (`_ABSENT` for None)."""
    if value is None:
        return _ABSENT
    kind = type(value)
    if kind is bool or kind is str:
        return value if kind is bool or _text_ok(value) else repr(value)
    if kind is int:
        return value if -_MAX_SAFE <= value <= _MAX_SAFE else str(value)
    if kind is float:
        return value if math.isfinite(value) else str(value)
    if depth > 64:
        return {"$type": kind.__name__}
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            shown = _view(inner, depth + 1)
            if shown is not _ABSENT:
                name = key if isinstance(key, str) else str(key)
                out[name + "#" if _ref_like(name) else name] = shown
        return out
    if isinstance(value, (list, tuple)):
        return [None if (v := _view(item, depth + 1)) is _ABSENT else v for item in value]
    fields: Any = None
    try:
        if isinstance(value, BaseModel):
            fields = value.model_dump(mode="json")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = dataclasses.asdict(value)
    except Exception:  # noqa: BLE001 - a view is best effort; the blob holds the value
        fields = None
    shown = _view(fields, depth + 1) if isinstance(fields, dict) else {}
    return {"$type": kind.__name__, **shown}


def _channel_view(value: Any) -> Any:
    """A channel's view: a list becomes an object keyed by zero-padded index."""
    if type(value) is list:
        return {_index(i): _item_view(item) for i, item in enumerate(value)}
    return _view(value)


def _item_view(item: Any) -> Any:
    shown = _view(item, 1)
    return {"$type": "NoneType"} if shown is _ABSENT else shown


# Stored records ---------------------------------------------------------------------------------

Slot = tuple[str, Any]
"""Where a value is: ("ref", blob ref), ("value", inline JSON), ("empty", None), or for a write
that appends to a list, ("items_of", list node ref): the items that node adds."""
_EMPTY: Slot = ("empty", None)


def _slot(entry: Mapping[str, Any]) -> Slot:
    if "value_ref" in entry:
        return ("ref", entry["value_ref"])
    if "items_of_ref" in entry:
        return ("items_of", entry["items_of_ref"])
    if "value" in entry:
        return ("value", entry["value"])
    return _EMPTY


@dataclass
class _Checkpoint:
    """One stored checkpoint, as the saver folds it from its StepStarted."""

    ns: str
    id: str
    parent: str | None
    position: int
    args: dict[str, Any]
    resolved: dict[str, tuple[Any, Slot]] = field(default_factory=dict)
    """Channel -> (version, slot), for every channel of the checkpoint."""

    @property
    def stored(self) -> dict[str, Any]:
        """The channels this checkpoint wrote: channel -> its entry."""
        return cast("dict[str, Any]", self.args.get("channels") or {})


@dataclass
class _Write:
    task_id: str
    channel: str
    idx: int
    task_path: str
    slot: Slot


@dataclass
class _ListState:
    """A list value the saver stored as a blob: its ref and private copies of its items."""

    ref: str
    items: list[Any]


@dataclass
class _Thread:
    """What a saver knows of one thread's run, folded from its events."""

    thread_id: str
    generation: int
    run_id: str
    recorder: RunRecorder | None = None
    position: int = 0
    closed: bool = False
    checkpoints: dict[Key, _Checkpoint] = field(default_factory=dict)
    order: dict[str, list[str]] = field(default_factory=dict)
    by_position: dict[int, Key] = field(default_factory=dict)
    hidden: set[Key] = field(default_factory=set)
    writes: dict[Key, dict[tuple[str, int], _Write]] = field(default_factory=dict)
    versions: dict[tuple[str, str, Any], Slot] = field(default_factory=dict)
    world_base: Any = field(default_factory=dict)
    world_patches: list[Any] = field(default_factory=list)
    world_read: bool = True
    """Whether the DeltaApplied patches were folded; a thread first read from the ledger leaves
    them out (reading its checkpoints needs none) until a write needs its world state."""
    world_checkpoint: _Checkpoint | None = None
    """The root checkpoint resolved last: its state channels' slots are the world state's."""
    lists: dict[tuple[str, str], _ListState] = field(default_factory=dict)
    written: dict[tuple[str, str], tuple[str, int, list[Any], str]] = field(default_factory=dict)
    """A task's write stored as a list node (`_put_writes`): (ns, channel) -> (the list it
    extends, the count, copies of its items, its ref): the next checkpoint's node if appended."""
    extended: set[str] = field(default_factory=set)
    """Root channels whose value the `put` under way found to extend the list the saver holds."""
    open_step: Key | None = None
    """The checkpoint whose step is open: its first task's writes (or the next put) close it."""

    def visible(self, ns: str | None) -> list[Key]:
        """Visible checkpoints (of one namespace, or all), newest id first."""
        spaces = [ns] if ns is not None else list(self.order)
        keys = [(s, c) for s in spaces for c in self.order.get(s, ()) if (s, c) not in self.hidden]
        keys.sort(key=lambda k: k[1], reverse=True)
        return keys

    def latest(self, ns: str) -> _Checkpoint | None:
        """The namespace's visible checkpoint with the greatest id."""
        for cid in reversed(self.order.get(ns, ())):
            if (ns, cid) not in self.hidden:
                return self.checkpoints[ns, cid]
        return None

    @property
    def world_slots(self) -> dict[str, Slot]:
        """Where the world state's channels' values are (the last resolved root checkpoint's)."""
        cp = self.world_checkpoint
        if cp is None:
            return {}
        return {ch: slot for ch, (_, slot) in cp.resolved.items() if _user_channel(ch)}

    @property
    def world(self) -> dict[str, Any]:
        """The run's world state: its DeltaApplied patches folded (when first needed).

        Merged in place (RFC 7386, as `fold_patches` does): the saver's copy is never handed out.
        """
        for patch in self.world_patches:
            if isinstance(patch, dict):
                _merge_into(self.world_base, patch)
            else:  # a patch that is not an object replaces the document (never written here)
                self.world_base = {}
        self.world_patches = []
        return cast("dict[str, Any]", self.world_base)

    def parent_of(self, cp: _Checkpoint) -> _Checkpoint | None:
        """The checkpoint's parent, if this run holds it."""
        return self.checkpoints.get((cp.ns, cp.parent)) if cp.parent else None

    # Folding events ------------------------------------------------------------------------------

    def fold(self, record: RecordedEvent) -> None:
        """Take one event of the run into account (in position order)."""
        self.position = record.position
        kind, payload = record.kind, record.payload
        if kind == "StepStarted":
            args = payload.get("args")
            if isinstance(args, dict) and args.get("langgraph") == "checkpoint":
                self._add_checkpoint(payload, args, record.position)
                self.open_step = (str(args.get("ns", "")), str(payload["step_id"]))
        elif kind == "StepCompleted":
            if self.open_step is not None and payload.get("step_id") == self.open_step[1]:
                self.open_step = None
            output = payload.get("output")
            if isinstance(output, dict) and output.get("langgraph") == "writes":
                step_id = str(payload.get("step_id"))
                self._add_writes(str(output.get("task_id", step_id)), step_id, output)
        elif kind == "DeltaApplied" and payload.get("source") == SOURCE:
            if self.world_read:
                self.world_patches.append(payload.get("patch", {}))
        elif kind == "RunAnnotated" and HIDDEN_LABEL in payload.get("labels", ()):
            key = self.by_position.get(payload.get("about_position", -1))
            if key is not None:
                self.hidden.add(key)
        elif kind in {"RunCompleted", "RunFailed"}:
            self.closed = True

    def _add_checkpoint(self, payload: dict[str, Any], args: dict[str, Any], position: int) -> None:
        args = _unpacked_args(args)
        ns = str(args.get("ns", ""))
        cid = str(payload["step_id"])
        parent = payload.get("parent_step_id")
        cp = _Checkpoint(ns, cid, parent if isinstance(parent, str) else None, position, args)
        key = (ns, cid)
        if key not in self.checkpoints:
            bisect.insort(self.order.setdefault(ns, []), cid)
        self.checkpoints[key] = cp
        self.by_position[position] = key
        self.hidden.discard(key)
        body = args.get("checkpoint")
        if isinstance(body, dict):
            self.resolve(cp, body.get("channel_versions") or {})

    def resolve(self, cp: _Checkpoint, versions: Mapping[str, Any]) -> None:
        """Find where each channel's value at its version is.

        In this record, else where the parent had it at that version, else in the latest record
        of that (namespace, channel, version).
        """
        parent = self.parent_of(cp)
        inherited = parent.resolved if parent is not None else {}
        ns, stored, table, resolved = cp.ns, cp.stored, self.versions, cp.resolved
        own_slots: dict[str, tuple[Any, Slot]] = {}
        for channel, entry in stored.items():
            vkey = _version_key(entry.get("version", versions.get(channel)))
            slot_of = table[ns, channel, vkey] = _slot(entry)
            own_slots[channel] = (vkey, slot_of)
        for channel, version in versions.items():
            vkey = _version_key(version)
            slot: Slot | None = None
            own = own_slots.get(channel)
            if own is not None and own[0] == vkey:
                slot = own[1]
            else:
                found = inherited.get(channel)
                if found is not None and _version_key(found[0]) == vkey:
                    slot = found[1]
            if slot is None:
                slot = table.get((ns, channel, vkey))
            if slot is not None:
                resolved[channel] = (version, slot)
        if ns == "":
            self.world_checkpoint = cp

    def _add_writes(self, task_id: str, step_id: str, output: dict[str, Any]) -> None:
        """A task's writes; the checkpoint is the step's when the output does not name it."""
        key = (str(output.get("ns", "")), str(output.get("checkpoint_id", step_id)))
        task_path = str(output.get("task_path", ""))
        stored = self.writes.setdefault(key, {})
        for index, item in enumerate(output.get("writes", ())):
            idx = int(item.get("idx", index))
            if idx >= 0 and (task_id, idx) in stored:
                continue
            stored[task_id, idx] = _Write(
                task_id, str(item["channel"]), idx, task_path, _slot(item)
            )


def _packed_version(version: Any) -> Any:
    """A version as stored: LangGraph's string form as numbers, anything else as it is.

    ``f"{n:032}.{h:016}"`` (InMemorySaver's and SqliteSaver's versions) is stored as ``[n, h]``.
    Numbers are never redacted, and the form is shorter: the string's digits can read as a card
    number to the ledger's redaction, which would otherwise change the version as stored. Only
    a string the numbers give back exactly is packed.
    """
    if type(version) is not str or len(version) < 34 or version[32] != ".":
        return version
    try:
        count, mark = int(version[:32]), float(version[33:])
    except ValueError:
        return version
    if (
        0 <= count <= _MAX_SAFE
        and math.isfinite(mark)
        and not mark.is_integer()
        and f"{count:032}.{mark:016}" == version
    ):
        return [count, mark]
    return version


def _unpacked_version(version: Any) -> Any:
    """A version as LangGraph wrote it (see `_packed_version`)."""
    if type(version) is list and len(version) == 2:
        return _version_text(*version)
    return version


@functools.lru_cache(maxsize=4096)
def _version_text(count: Any, mark: Any) -> str:
    """LangGraph's string version (each is read several times: by later checkpoints too)."""
    return f"{count:032}.{mark:016}"


def _packed_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint (without its values) with its versions packed (`_packed_version`)."""
    out = dict(body)
    versions = body.get("channel_versions")
    if type(versions) is dict:
        out["channel_versions"] = {k: _packed_version(v) for k, v in versions.items()}
    seen = body.get("versions_seen")
    if type(seen) is dict:
        out["versions_seen"] = {
            node: {k: _packed_version(v) for k, v in by.items()} if type(by) is dict else by
            for node, by in seen.items()
        }
    return out


def _unpacked_args(args: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's record with its versions as LangGraph wrote them (a copy when packed)."""
    body = args.get("checkpoint")
    channels = args.get("channels")
    out = args
    if type(body) is dict:
        versions = body.get("channel_versions")
        seen = body.get("versions_seen")
        unpacked = dict(body)
        if type(versions) is dict:
            unpacked["channel_versions"] = {k: _unpacked_version(v) for k, v in versions.items()}
        if type(seen) is dict:
            unpacked["versions_seen"] = {
                node: {k: _unpacked_version(v) for k, v in by.items()} if type(by) is dict else by
                for node, by in seen.items()
            }
        out = {**args, "checkpoint": unpacked}
    if type(channels) is dict and any(
        type(e) is dict and type(e.get("version")) is list for e in channels.values()
    ):
        out = {
            **out,
            "channels": {
                ch: {**e, "version": _unpacked_version(e["version"])}
                if type(e) is dict and "version" in e
                else e
                for ch, e in channels.items()
            },
        }
    return out


def _redacted(recorder: RunRecorder, value: Any, where: str) -> Any:
    """A JSON value as the run stores it: redacted by its policy (the findings noted)."""
    privacy = recorder.redaction
    if privacy is None:
        return value
    event, path = where.split(".", 1)
    return privacy.value(value, event, path)


def _version_key(version: Any) -> Any:
    """Versions compare as JSON does: 2 and 2.0 are one version, "2" another."""
    return ("s", version) if isinstance(version, str) else ("n", version)


def _ns_label(ns: str) -> str:
    """A namespace without its task ids: ``child:1f0...|grand:2a1...`` -> ``child/grand``."""
    return "/".join(part.split(":", 1)[0] for part in ns.split("|")) if ns else ""


def _msgpack_array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 2**16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


# The saver ------------------------------------------------------------------------------------


class LedgerCheckpointSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer that records each thread as a ledger run.

    ``graph = builder.compile(checkpointer=LedgerCheckpointSaver(ledger))``. The ledger is
    borrowed: close it yourself. `agent` and `tags` name the runs it starts (the tag
    ``langgraph-thread`` is always added). Safe to share between threads of one process; several
    processes may write one ledger (each call first reads what others appended, and a write that
    lost a race is made again on the new head).
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        serde: SerializerProtocol | None = None,
        agent: str = AGENT,
        tags: Sequence[str] = (),
    ) -> None:
        super().__init__(serde=serde)
        self.ledger = ledger
        self.agent = agent
        self.tags = [TAG, *(t for t in tags if t != TAG)]
        self._lock = threading.RLock()
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._nodes: OrderedDict[str, Any] = OrderedDict()
        self._chains: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._shapes: dict[str, str] = {}
        self._flats: OrderedDict[str, tuple[tuple[Any, ...], str]] = OrderedDict()

    # Reading --------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names (its ``checkpoint_id``, else the thread's latest)."""
        conf = config["configurable"]
        ns = str(conf.get("checkpoint_ns", ""))
        with self._lock:
            thread = self._find(str(conf["thread_id"]))
            if thread is None:
                return None
            checkpoint_id = get_checkpoint_id(config)
            if checkpoint_id:
                key = (ns, str(checkpoint_id))
                if key not in thread.checkpoints or key in thread.hidden:
                    return None
                cp: _Checkpoint | None = thread.checkpoints[key]
            else:
                cp = thread.latest(ns)
            return self._tuple(thread, cp) if cp is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's parameter name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, by thread, namespace, metadata `filter` and `before`."""
        with self._lock:
            if config is not None:
                conf = config["configurable"]
                found = self._find(str(conf["thread_id"]))
                threads = [found] if found is not None else []
                ns = conf.get("checkpoint_ns")
                only = get_checkpoint_id(config)
            else:
                threads, ns, only = self._all_threads(), None, None
            before_id = get_checkpoint_id(before) if before else None
            keys = [
                (thread, key)
                for thread in threads
                for key in thread.visible(None if ns is None else str(ns))
                if (not only or key[1] == only) and (not before_id or key[1] < before_id)
            ]
            keys.sort(key=lambda item: item[1][1], reverse=True)
            if limit is None or limit > 1:
                self._prefetch(
                    [
                        slot[1]
                        for thread, key in keys[:limit]
                        for _, slot in thread.checkpoints[key].resolved.values()
                        if slot[0] == "ref"
                    ]
                )
        remaining = limit
        for thread, key in keys:
            if remaining is not None and remaining <= 0:
                return
            with self._lock:
                cp = thread.checkpoints[key]
                if filter and not all(self._metadata(cp).get(k) == v for k, v in filter.items()):
                    continue
                found_tuple = self._tuple(thread, cp)
            if remaining is not None:
                remaining -= 1
            yield found_tuple

    def _metadata(self, cp: _Checkpoint) -> dict[str, Any]:
        if "metadata_ref" in cp.args:
            return cast("dict[str, Any]", self._decode(cp.args["metadata_ref"]))
        return cast("dict[str, Any]", _fresh(cp.args.get("metadata", {})))

    def _body(self, cp: _Checkpoint) -> dict[str, Any]:
        if "checkpoint_ref" in cp.args:
            return dict(self._decode(cp.args["checkpoint_ref"]))
        return cast("dict[str, Any]", _fresh(cp.args.get("checkpoint", {})))

    def _tuple(self, thread: _Thread, cp: _Checkpoint) -> CheckpointTuple:
        body = self._body(cp)
        slots = [slot for _, slot in cp.resolved.values()]
        self._prefetch([ref for form, ref in slots if form == "ref"])
        versions = body.get("channel_versions", {})
        values = {
            channel: self._value(slot)
            for channel, (_, slot) in cp.resolved.items()
            if slot[0] != "empty" and channel in versions
        }
        checkpoint = cast("Checkpoint", {**body, "id": cp.id, "channel_values": values})
        writes = thread.writes.get((cp.ns, cp.id), {})
        ordered = sorted(
            writes.values(), key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx)
        )
        return CheckpointTuple(
            config=_config(thread.thread_id, cp.ns, cp.id),
            checkpoint=checkpoint,
            metadata=cast("CheckpointMetadata", self._metadata(cp)),
            parent_config=_config(thread.thread_id, cp.ns, cp.parent) if cp.parent else None,
            pending_writes=[(w.task_id, w.channel, self._value(w.slot)) for w in ordered],
        )

    def _value(self, slot: Slot) -> Any:
        form, value = slot
        if form == "ref":
            return self._decode(value)
        if form == "items_of":
            return _extend_values(self, [], self._node(value))
        return _fresh(value)

    # Writing ---------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Record a checkpoint: its changed channels as blobs, its state change as a delta."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        parent = conf.get("checkpoint_id")
        full_metadata = get_checkpoint_metadata(config, metadata)
        with self._lock:
            self._retrying(
                thread_id,
                lambda t: self._put(
                    t,
                    ns=ns,
                    parent=parent,
                    checkpoint=checkpoint,
                    metadata=full_metadata,
                    new_versions=new_versions,
                ),
            )
        return _config(thread_id, ns, checkpoint["id"])

    def _put(
        self,
        thread: _Thread,
        *,
        ns: str,
        parent: str | None,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        new_versions: Mapping[str, Any],
    ) -> None:
        recorder = self._recorder(thread)
        parent_cp = thread.checkpoints.get((ns, parent)) if parent else None
        values = checkpoint["channel_values"]
        versions = checkpoint.get("channel_versions", {})
        channels: dict[str, Any] = {}
        new_lists: dict[str, _ListState] = {}
        thread.extended.clear()
        for channel, version in new_versions.items():
            entry: dict[str, Any] = {}
            if _version_key(version) != _version_key(versions.get(channel)):
                entry["version"] = _packed_version(version)
            if channel in values:
                entry.update(
                    self._store_channel(
                        recorder,
                        thread=thread,
                        ns=ns,
                        channel=channel,
                        value=values[channel],
                        parent=parent_cp,
                        new_lists=new_lists,
                    )
                )
            channels[channel] = entry
        args: dict[str, Any] = {"langgraph": "checkpoint", "ns": ns}
        body = {k: v for k, v in checkpoint.items() if k not in {"channel_values", "id"}}
        packed = _packed_body(body)
        if _plain(packed):
            args["checkpoint"] = packed
        else:
            args["checkpoint_ref"] = self._put_value(recorder, body)
        if _plain(dict(metadata)):
            args["metadata"] = dict(metadata)
        else:
            args["metadata_ref"] = self._put_value(recorder, dict(metadata))
        args["channels"] = channels
        label = _ns_label(ns)
        started = StepStarted(
            step_id=checkpoint["id"],
            name=f"checkpoint {metadata.get('source', '')}".rstrip()
            + (f" [{label}]" if label else ""),
            args=args,
            parent_step_id=parent,
            caused_by=parent_cp.position if parent_cp is not None else None,
        )
        patch: dict[str, Any] = {}
        if ns == "":
            patch = self._world_patch(thread, checkpoint, channels, parent_cp)
        with recorder.batch():
            self._close_step(recorder, thread)
            position = recorder.record(started)
            if patch:
                recorder.delta(patch, step_id=checkpoint["id"], source=SOURCE, caused_by=position)
        self._absorb(thread)
        for channel, listed in new_lists.items():
            thread.lists[ns, channel] = listed
        cp = thread.checkpoints.get((ns, checkpoint["id"]))
        if cp is not None and "checkpoint_ref" in args:
            thread.resolve(cp, self._body(cp).get("channel_versions") or {})

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record one task's writes against the checkpoint `config` names."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = str(conf["checkpoint_id"])
        entries = [(c, v, WRITES_IDX_MAP.get(c, i)) for i, (c, v) in enumerate(writes)]
        with self._lock:
            self._retrying(
                thread_id,
                lambda t: self._put_writes(
                    t,
                    ns=ns,
                    checkpoint_id=checkpoint_id,
                    entries=entries,
                    task_id=task_id,
                    task_path=task_path,
                ),
            )

    def _put_writes(
        self,
        thread: _Thread,
        *,
        ns: str,
        checkpoint_id: str,
        entries: Sequence[tuple[str, Any, int]],
        task_id: str,
        task_path: str,
    ) -> None:
        """Record (channel, value, idx) writes as one StepCompleted; stored indexes are skipped.

        A write of a regular channel is kept once per (task, index), as LangGraph's own savers
        keep the first; a special channel's (error, interrupt, ...) is recorded again and the
        latest counts.
        """
        known = thread.writes.get((ns, checkpoint_id), {})
        recorder = self._recorder(thread)
        items: builtins.list[dict[str, Any]] = []
        nodes: dict[str, tuple[str, int, builtins.list[Any], str]] = {}
        error: ErrorInfo | None = None
        for channel, value, idx in entries:
            if idx >= 0 and (task_id, idx) in known:
                continue
            item: dict[str, Any] = {"channel": channel}
            if idx != len(items):
                item["idx"] = idx
            base = self._list_base(thread, ns, checkpoint_id, channel)
            if base is not None and type(value) is list and value:
                # stored as the node the next checkpoint stores if the channel appends it
                nodes[channel] = self._write_node(recorder, base, value)
                item["items_of_ref"] = nodes[channel][3]
            elif _plain(value) and len(_dumps(value)) <= INLINE_LIMIT:
                item["value"] = value
            else:
                item["value_ref"] = self._put_value(recorder, value, _IN_WRITES)
            items.append(item)
            if channel == ERROR and error is None:
                error = ErrorInfo(type=type(value).__name__, message=str(value)[:4000])
        if not items:
            return
        output: dict[str, Any] = {"langgraph": "writes"}
        if ns:
            output["ns"] = ns
        if task_path:
            output["task_path"] = task_path
        output["writes"] = items
        parent = thread.checkpoints.get((ns, checkpoint_id))
        step_id = task_id
        if thread.open_step == (ns, checkpoint_id):  # the superstep's first task closes it
            step_id, output["task_id"] = checkpoint_id, task_id  # the step names the checkpoint
        else:
            output["checkpoint_id"] = checkpoint_id
        recorder.record(
            StepCompleted(
                step_id=step_id,
                status="failed" if error is not None else "ok",
                output=output,
                error=error,
                caused_by=parent.position if parent is not None else None,
            )
        )
        self._absorb(thread)
        thread.written.update({(ns, channel): written for channel, written in nodes.items()})

    def _write_node(
        self, recorder: RunRecorder, base: _ListState, value: builtins.list[Any]
    ) -> tuple[str, int, builtins.list[Any], str]:
        """A write that appends to `base` stored as a list node: (base ref, count, copies, ref)."""
        count = len(base.items) + len(value)
        node, copies = self._list_node(recorder, value, base.ref, count, _IN_WRITES)
        return (base.ref, count, copies, node)

    @staticmethod
    def _close_step(recorder: RunRecorder, thread: _Thread) -> None:
        """Close the open checkpoint step (no task wrote against it)."""
        if thread.open_step is not None:
            recorder.record(StepCompleted(step_id=thread.open_step[1], status="ok"))

    # Deleting (hiding) -------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Hide a thread from LangGraph: a tombstone closes its run; nothing is deleted."""
        with self._lock:
            for attempt in range(_ATTEMPTS):
                thread = self._find(str(thread_id))
                if thread is None:
                    return
                try:
                    recorder = self._recorder(thread)
                    with recorder.batch():
                        self._close_step(recorder, thread)
                    recorder.record(
                        RunAnnotated(
                            author=AUTHOR,
                            note=f"LangGraph deleted thread {thread_id!r}: hidden from LangGraph "
                            "from here on; its history is kept",
                            reason="delete_thread",
                            labels=[DELETED_LABEL],
                        )
                    )
                    recorder.complete(outcome=DELETED_OUTCOME)
                    self._absorb(thread)
                    return
                except (ConcurrencyError, RunClosedError):
                    self._reset(thread)
                    if attempt == _ATTEMPTS - 1:
                        raise

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide every checkpoint (with its writes) that these LangGraph runs created."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        with self._lock:
            for thread in self._all_threads():
                self._hide(
                    thread,
                    lambda _, cp: self._metadata(cp).get("run_id") in wanted,
                    "delete_for_runs",
                )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: hide all but each namespace's latest checkpoint; ``delete``: delete."""
        if strategy not in {"keep_latest", "delete"}:
            msg = f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'"
            raise ValueError(msg)
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            with self._lock:
                thread = self._find(str(thread_id))
                if thread is not None:
                    self._hide(thread, _older, "prune keep_latest")

    def _hide(self, thread: _Thread, which: Any, reason: str) -> None:
        """Append a hiding note about each visible checkpoint `which(thread, cp)` selects."""
        for attempt in range(_ATTEMPTS):
            targets = [
                thread.checkpoints[key]
                for key in thread.visible(None)
                if which(thread, thread.checkpoints[key])
            ]
            if not targets:
                return
            try:
                recorder = self._recorder(thread)
                with recorder.batch():
                    for cp in sorted(targets, key=lambda c: c.position):
                        recorder.record(
                            RunAnnotated(
                                author=AUTHOR,
                                note=f"checkpoint {cp.id} hidden from LangGraph ({reason})",
                                reason=reason,
                                about_position=cp.position,
                                labels=[HIDDEN_LABEL],
                            )
                        )
                self._absorb(thread)
                return
            except (ConcurrencyError, RunClosedError):
                self._reset(thread)
                refreshed = self._find(thread.thread_id)
                if refreshed is None:
                    return
                if attempt == _ATTEMPTS - 1:
                    raise
                thread = refreshed

    # Copying -------------------------------------------------------------------------------

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Record the source's visible checkpoints and writes into the target thread's run.

        A target without a run gets one started from the source's run (``relation="fork"``).
        Values are content-addressed, so the copies share the source's blobs.
        """
        with self._lock:
            source = self._find(str(source_thread_id))
            if source is None:
                return
            keys = sorted(source.visible(None), key=lambda k: source.checkpoints[k].position)
            target_id = str(target_thread_id)
            self._open(target_id, parent=source)
            for key in keys:
                self._copy(source, target_id, source.checkpoints[key])

    def _copy(self, source: _Thread, target_id: str, cp: _Checkpoint) -> None:
        found = self._tuple(source, cp)
        versions = found.checkpoint.get("channel_versions", {})
        new_versions = {
            channel: entry.get("version", versions.get(channel))
            for channel, entry in cp.stored.items()
        }
        self._retrying(
            target_id,
            lambda t: self._put(
                t,
                ns=cp.ns,
                parent=cp.parent,
                checkpoint=found.checkpoint,
                metadata=found.metadata,
                new_versions=new_versions,
            ),
        )
        by_task: dict[tuple[str, str], builtins.list[tuple[str, Any, int]]] = {}
        for write in source.writes.get((cp.ns, cp.id), {}).values():
            by_task.setdefault((write.task_id, write.task_path), []).append(
                (write.channel, self._value(write.slot), write.idx)
            )
        for (task_id, task_path), entries in by_task.items():
            self._retrying(
                target_id,
                lambda t, e=entries, i=task_id, p=task_path: self._put_writes(
                    t, ns=cp.ns, checkpoint_id=cp.id, entries=e, task_id=i, task_path=p
                ),
            )

    def _retrying(self, thread_id: str, write: Any) -> None:
        """Run `write(thread)` on the thread's live run, again after a lost race.

        The first attempt appends to the run as this saver last saw it, without reading it again:
        had another writer appended since, the ledger refuses the position. Each retry reads what
        the winner appended first, then waits a little longer (1 ms, doubling up to 50 ms) so
        that racing writers spread out.
        """
        for attempt in range(_ATTEMPTS):
            cached = self._threads.get(thread_id) if attempt == 0 else None
            if cached is not None and cached.recorder is not None and not cached.closed:
                thread = cached  # optimistic: had anyone appended since, the append conflicts
            else:
                thread = self._open(thread_id)
            try:
                write(thread)
                return
            except (ConcurrencyError, RunClosedError):
                self._reset(thread)
                if attempt == _ATTEMPTS - 1:
                    raise
                time.sleep(min(0.05, 0.001 * 2**attempt))

    # Async ------------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`get_tuple` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's parameter name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """`list` in a worker thread."""

        def collect() -> builtins.list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await asyncio.to_thread(collect):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`put` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """`put_writes` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """`delete_thread` in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`delete_for_runs` in a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`copy_thread` in a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`prune` in a worker thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    # Threads and runs -----------------------------------------------------------------------

    def run_id(self, thread_id: str) -> str | None:
        """The run that records `thread_id` now (None if it has none: never saved, or deleted)."""
        with self._lock:
            thread = self._find(str(thread_id))
            return thread.run_id if thread is not None else None

    def _find(self, thread_id: str) -> _Thread | None:
        """The thread's live run, brought up to date; None if it has none."""
        thread = self._threads.get(thread_id)
        generation = 0
        if thread is not None:
            self._threads.move_to_end(thread_id)
            self._refresh(thread)
            if not thread.closed:
                return thread
            generation = thread.generation + 1
        while True:
            run_id = thread_run_id(thread_id, generation)
            try:
                info = self.ledger.run(run_id)
            except UnknownRunError:
                self._threads.pop(thread_id, None)
                return None
            if info.status == "running":
                thread = _Thread(thread_id, generation, run_id, world_read=False)
                for record in self.ledger.events(run_id, upto=info.event_count, kinds=_FOLDED):
                    thread.fold(record)
                thread.position = max(thread.position, info.event_count)
                if not thread.closed:
                    self._remember(thread)
                    return thread
            generation += 1

    def _open(self, thread_id: str, *, parent: _Thread | None = None) -> _Thread:
        """The thread's live run, started if it has none (from `parent`'s, for a copy)."""
        found = self._find(thread_id)
        if found is not None:
            return found
        generation = 0
        while True:
            run_id = thread_run_id(thread_id, generation)
            try:
                self.ledger.run(run_id)
            except UnknownRunError:
                break
            generation += 1
        settings: dict[str, Any] = {"checkpointer": "agentledger.langgraph"}
        settings["generation"] = generation
        lineage: dict[str, Any] = {}
        if parent is not None:
            settings["copied_from"] = parent.thread_id
            lineage = {
                "parent_run_id": parent.run_id,
                "parent_position": parent.position,
                "relation": "fork",
            }
        try:
            recorder = self.ledger.record_run(
                self.agent,
                input=thread_id,
                config=ConfigIdentity(settings=settings),
                tags=self.tags,
                run_id=run_id,
                **lineage,
            )
        except ConcurrencyError:  # another process started it first
            found = self._find(thread_id)
            if found is None:
                raise
            return found
        thread = _Thread(thread_id, generation, run_id, recorder)
        self._absorb(thread)
        self._remember(thread)
        return thread

    def _remember(self, thread: _Thread) -> None:
        self._threads[thread.thread_id] = thread
        self._threads.move_to_end(thread.thread_id)
        while len(self._threads) > _CACHED_THREADS:
            self._threads.popitem(last=False)

    def _all_threads(self) -> builtins.list[_Thread]:
        """Every thread with a live run in the ledger."""
        found: builtins.list[_Thread] = []
        seen: set[str] = set()
        for info in self.ledger.runs(tag=TAG, status="running"):
            first = self.ledger.events(info.run_id, upto=1)
            if not first:
                continue
            started = first[0].payload
            thread_id = started.get("input")
            if "input_ref" in started:  # a thread id longer than the inline limit
                thread_id = self.ledger.blob(started["input_ref"])
            if not isinstance(thread_id, str) or thread_id in seen:
                continue
            seen.add(thread_id)
            thread = self._find(thread_id)
            if thread is not None:
                found.append(thread)
        return found

    def _refresh(self, thread: _Thread) -> None:
        """Fold the events appended to the thread's run since the saver last read it."""
        for record in self.ledger.events(thread.run_id, after=thread.position):
            thread.fold(record)
        if thread.recorder is not None and thread.recorder.position != thread.position:
            thread.recorder = None  # another writer moved the head: reload before appending
        if thread.closed:
            thread.recorder = None

    def _reset(self, thread: _Thread) -> None:
        """After a lost race: read what the winner appended; reload the recorder."""
        thread.recorder = None
        self._refresh(thread)

    def _recorder(self, thread: _Thread) -> RunRecorder:
        """The thread's recorder.

        Appending to a run that another saver (or process) started goes through
        ``RunRecorder(ledger, ledger.load(run_id))``, as the ledger's own resume does.
        """
        if thread.closed:
            raise RunClosedError(thread.run_id, "completed")
        if thread.recorder is None:
            recorder = RunRecorder(self.ledger, self.ledger.load(thread.run_id))
            if recorder.position != thread.position:
                self._refresh(thread)
                recorder = RunRecorder(self.ledger, self.ledger.load(thread.run_id))
            thread.recorder = recorder
        return thread.recorder

    def _absorb(self, thread: _Thread) -> None:
        """Fold what the thread's recorder just committed."""
        recorder = thread.recorder
        if recorder is None:
            return
        newer = recorder.recent_events(after=thread.position)
        if newer and newer[0].position > thread.position + 1:  # more than the recorder keeps
            upto = newer[0].position - 1
            for record in self.ledger.iter_events(thread.run_id, after=thread.position, upto=upto):
                thread.fold(record)
        for record in newer:
            thread.fold(record)
        if thread.closed:
            thread.recorder = None

    # Values ------------------------------------------------------------------------------------

    def _put_value(self, recorder: RunRecorder, value: Any, where: str = _IN_CHECKPOINT) -> str:
        """Store one value as a blob: JSON as itself, anything else through the serializer.

        JSON is redacted by the run's policy first, as the event that refers to it would be
        (what was redacted is noted at `where` for the PolicyDecided before that event).
        """
        if _plain(value):
            return recorder.put_blob({"json": _redacted(recorder, value, where)})
        kind, data = self.serde.dumps_typed(value)
        return recorder.put_blob({"serde": kind, "data": base64.b64encode(data).decode("ascii")})

    def _store_channel(
        self,
        recorder: RunRecorder,
        *,
        thread: _Thread,
        ns: str,
        channel: str,
        value: Any,
        parent: _Checkpoint | None,
        new_lists: dict[str, _ListState],
    ) -> dict[str, Any]:
        """A channel entry for a value: inline when tiny, else a blob (a list: a list node)."""
        if _tiny(value) and _plain(value):
            return {"value": value}
        if type(value) is not list:
            return {"value_ref": self._put_value(recorder, value)}
        listed = self._store_list(
            recorder, thread=thread, ns=ns, channel=channel, value=value, parent=parent
        )
        new_lists[channel] = listed
        return {"value_ref": listed.ref}

    def _store_list(
        self,
        recorder: RunRecorder,
        *,
        thread: _Thread,
        ns: str,
        channel: str,
        value: builtins.list[Any],
        parent: _Checkpoint | None,
    ) -> _ListState:
        """Store a list as a node: the items past the last stored list it extends, if any.

        The last stored list is what this saver stored for the channel, else the parent's value;
        its items are compared with private copies, so a value mutated in place since cannot
        pass as unchanged.
        """
        previous = held = thread.lists.get((ns, channel))
        if previous is None and parent is not None and channel in parent.resolved:
            form, ref = parent.resolved[channel][1]
            if form == "ref" and "count" in self._node(ref):
                previous = _ListState(ref, self._decode_list(ref))
        start, prefix = 0, None
        if previous is not None:
            known = len(previous.items)
            if len(value) >= known and value[:known] == previous.items:
                if held is not None and ns == "":
                    thread.extended.add(channel)  # what the world patch would compare again
                if len(value) == known:
                    return previous
                start, prefix = known, previous.ref
        tail = value[start:]
        written = thread.written.pop((ns, channel), None)
        if (
            written is not None
            and prefix is not None
            and written[0] == prefix
            and written[1] == len(value)
            and tail == written[2]
        ):  # the node a task's write stored: the same blob, not encoded again
            ref, copies = written[3], written[2]
        else:
            ref, copies = self._list_node(recorder, tail, prefix, len(value))
        items = (previous.items if prefix is not None and previous is not None else []) + copies
        return _ListState(ref, items)

    def _list_node(
        self,
        recorder: RunRecorder,
        tail: builtins.list[Any],
        prefix: str | None,
        count: int,
        where: str = _IN_CHECKPOINT,
    ) -> tuple[str, builtins.list[Any]]:
        """Store a list node (`tail` after the list `prefix`); its ref and copies of `tail`.

        JSON items are stored redacted (as `_put_value`); the copies are of the items as given,
        which later values of the list are compared with.
        """
        node: dict[str, Any] = {"count": count}
        if all(_plain(item) for item in tail):
            node["items"] = _redacted(recorder, tail, where)
            copies = _fresh(tail)
        else:
            encoded = [self.serde.dumps_typed(item) for item in tail]
            node["typed_items"] = [
                [kind, base64.b64encode(data).decode("ascii")] for kind, data in encoded
            ]
            copies = [self.serde.loads_typed(pair) for pair in encoded]
        if prefix is not None:
            node["prefix_ref"] = prefix
        return recorder.put_blob(node), copies

    def _list_base(
        self, thread: _Thread, ns: str, checkpoint_id: str, channel: str
    ) -> _ListState | None:
        """The list a task's write to `channel` would extend: the one its checkpoint holds."""
        listed = thread.lists.get((ns, channel))
        cp = thread.checkpoints.get((ns, checkpoint_id))
        if listed is None or cp is None or channel not in cp.resolved:
            return None
        return listed if cp.resolved[channel][1] == ("ref", listed.ref) else None

    def _prefetch(self, refs: Sequence[str]) -> None:
        """Read the blobs of these refs (and the list nodes they extend) in few queries."""
        missing = [r for r in dict.fromkeys(refs) if r not in self._nodes]
        while missing:
            nexts: list[str] = []
            for start in range(0, len(missing), 500):
                for ref, node in self.ledger.blobs(missing[start : start + 500]).items():
                    self._keep_node(ref, node)
                    prefix = node.get("prefix_ref") if isinstance(node, dict) else None
                    if isinstance(prefix, str) and prefix not in self._nodes:
                        nexts.append(prefix)
            missing = [r for r in dict.fromkeys(nexts) if r not in self._nodes]  # read since

    def _keep_node(self, ref: str, node: Any) -> None:
        self._nodes[ref] = node
        self._nodes.move_to_end(ref)
        while len(self._nodes) > _CACHED_NODES:
            self._nodes.popitem(last=False)

    def _node(self, ref: str) -> Any:
        node = self._nodes.get(ref)
        if node is None:
            node = self.ledger.blob(ref)
            self._keep_node(ref, node)
        return node

    def _decode(self, ref: str) -> Any:
        """A fresh copy of the value stored under `ref`."""
        node = self._node(ref)
        if "json" in node:
            return _fresh(node["json"])
        if "serde" in node:
            return self.serde.loads_typed((node["serde"], base64.b64decode(node["data"])))
        return self._decode_list(ref)

    def _decode_list(self, ref: str) -> builtins.list[Any]:
        """A fresh list from a chain of list nodes: JSON items copied, typed ones decoded."""
        flat = self._flat(ref)
        if flat is not None:
            every, how = flat
            if how == "scalars":
                return list(every)
            if how == "dicts":
                return list(map(dict.copy, every))
            return _copies(every)
        out: list[Any] = []
        typed: list[tuple[str, bytes]] = []
        for node_ref in self._chain(ref):
            node = self._node(node_ref)
            if "items" in node:
                if typed:
                    out.extend(self._typed(typed))
                    typed = []
                items = node["items"]
                shape = self._shapes.get(node_ref)
                if shape is None:
                    shape = self._shapes[node_ref] = _shape(items)
                if shape == "dicts":
                    out.extend(map(dict.copy, items))
                elif shape == "scalars":
                    out.extend(items)
                else:
                    out.extend(_copies(items))
            else:
                typed.extend((kind, base64.b64decode(data)) for kind, data in node["typed_items"])
        if typed:
            out.extend(self._typed(typed))
        return out

    def _flat(self, ref: str) -> tuple[tuple[Any, ...], str] | None:
        """Every item of a list of JSON items (first to last) and how to copy them.

        None when a node of the list holds typed (serialized) items. A list extends the one
        before it, so each list's items are kept (as a tuple sharing the items) for the lists
        that extend it, and a thread's history, read newest first, walks its chain once.
        """
        hit = self._flats.get(ref)
        if hit is not None:
            self._flats.move_to_end(ref)
            return hit
        chain = self._chain(ref)
        start = 0
        items: tuple[Any, ...] = ()
        shape = "scalars"
        for index in range(len(chain) - 1, -1, -1):
            known = self._flats.get(chain[index])
            if known is not None:
                start, (items, shape) = index + 1, known
                break
        for node_ref in chain[start:]:
            node = self._node(node_ref)
            if "items" not in node:
                return None
            added = node["items"]
            node_shape = self._shapes.get(node_ref)
            if node_shape is None:
                node_shape = self._shapes[node_ref] = _shape(added)
            if added:
                if not items:
                    shape = node_shape
                elif node_shape != shape:  # copied item by item (`_copies`)
                    shape = "deep" if "deep" in (shape, node_shape) else "mixed"
                items += tuple(added)
            self._flats[node_ref] = (items, shape)
        while len(self._flats) > _CACHED_LISTS:
            self._flats.popitem(last=False)
        return items, shape

    def _typed(self, pairs: builtins.list[tuple[str, bytes]]) -> builtins.list[Any]:
        """Serialized items, decoded in one call when all are msgpack (one msgpack array)."""
        if pairs and all(kind == "msgpack" for kind, _ in pairs):
            array = _msgpack_array_header(len(pairs)) + b"".join(data for _, data in pairs)
            return cast("builtins.list[Any]", self.serde.loads_typed(("msgpack", array)))
        return [self.serde.loads_typed(pair) for pair in pairs]

    def _chain(self, ref: str) -> tuple[str, ...]:
        """The refs of a list's nodes, first to last."""
        cached = self._chains.get(ref)
        if cached is not None:
            self._chains.move_to_end(ref)
            return cached
        walked: list[str] = []
        base: tuple[str, ...] = ()
        current: str | None = ref
        while current is not None:
            hit = self._chains.get(current)
            if hit is not None:
                base = hit
                break
            walked.append(current)
            prefix = self._node(current).get("prefix_ref")
            current = prefix if isinstance(prefix, str) else None
        chain = base + tuple(reversed(walked))
        self._chains[ref] = chain
        while len(self._chains) > _CACHED_LISTS:
            self._chains.popitem(last=False)
        return chain

    # World state ----------------------------------------------------------------------------

    def _world_patch(
        self,
        thread: _Thread,
        checkpoint: Mapping[str, Any],
        channels: Mapping[str, Any],
        parent: _Checkpoint | None,
    ) -> dict[str, Any]:
        """The merge patch taking the thread's world state to this root checkpoint's view."""
        values = checkpoint["channel_values"]
        if not thread.world_read:  # the patches folded so far, read once
            patches = self.ledger.events(thread.run_id, upto=thread.position, kinds=_WORLD)
            thread.world_patches = [
                r.payload.get("patch", {}) for r in patches if r.payload.get("source") == SOURCE
            ]
            thread.world_read = True
        world = thread.world
        patch: dict[str, Any] = {}
        shown: set[str] = set()
        for channel, version in checkpoint.get("channel_versions", {}).items():
            if not _user_channel(channel) or values.get(channel) is None:
                continue
            entry = channels.get(channel)
            slot: Slot | None
            if entry is not None:
                slot = _slot(entry)
            elif parent is not None and channel in parent.resolved:
                slot = parent.resolved[channel][1]
            else:
                slot = thread.versions.get(("", channel, _version_key(version)))
            if slot is None or slot[0] == "empty":
                continue
            shown.add(channel)
            if channel in world and thread.world_slots.get(channel) == slot:
                continue
            change = self._channel_patch(thread, channel, values[channel], world.get(channel))
            if change is not _ABSENT:
                patch[channel] = change
        for channel in world:
            if channel not in shown:
                patch[channel] = None
        return patch

    def _channel_patch(self, thread: _Thread, channel: str, value: Any, old: Any) -> Any:
        """The patch of one channel's view (only the appended items when a list grew)."""
        listed = thread.lists.get(("", channel))
        if (
            type(value) is list
            and isinstance(old, dict)
            and listed is not None
            and thread.world_slots.get(channel) == ("ref", listed.ref)
            and len(old) == len(listed.items) <= len(value)
            and (channel in thread.extended or value[: len(listed.items)] == listed.items)
        ):
            start = len(listed.items)
            return {_index(i): _item_view(value[i]) for i in range(start, len(value))} or _ABSENT
        new = _channel_view(value)
        if old is None:
            return _ABSENT if new is _ABSENT else new
        if new is _ABSENT:
            return None
        try:
            change = diff_patch(old, new)
        except UnrepresentableDiffError:  # pragma: no cover - views hold no null member
            return new
        return _ABSENT if change == {} and isinstance(new, dict) else change


def _older(thread: _Thread, cp: _Checkpoint) -> bool:
    """Whether a newer checkpoint of the namespace is visible (what keep_latest hides)."""
    latest = thread.latest(cp.ns)
    return latest is not None and latest.id != cp.id


def _fresh(value: Any) -> Any:
    """A deep copy of a JSON value (the saver never hands out what it keeps).

    Recursive: stored values are at most `_MAX_PLAIN_DEPTH` deep (`_plain`).
    """
    kind = type(value)
    if kind is dict:
        out = value.copy()
        for key, inner in value.items():
            if type(inner) not in _SCALARS:
                out[key] = _fresh(inner)
        return out
    if kind is list:
        copied = value.copy()
        for index, inner in enumerate(value):
            if type(inner) not in _SCALARS:
                copied[index] = _fresh(inner)
        return copied
    return value


def _shape(items: list[Any]) -> str:
    """How a list node's items can be copied: ``dicts`` (flat objects), ``scalars``, ``deep``."""
    if all(type(item) in _SCALARS for item in items):
        return "scalars"
    flat = all(
        type(item) is dict and all(type(v) in _SCALARS for v in item.values()) for item in items
    )
    return "dicts" if flat else "deep"


def _merge_into(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Apply an RFC 7386 merge patch to `target` in place (values from `patch` are copied)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            inner = target.get(key)
            if not isinstance(inner, dict):
                inner = target[key] = {}
            _merge_into(inner, value)
        else:
            target[key] = _fresh(value)


def _copies(items: Sequence[Any]) -> list[Any]:
    """Fresh copies of JSON items (a flat object is copied shallowly, anything else deeply)."""
    out: list[Any] = []
    for item in items:
        if type(item) is dict and all(type(v) in _SCALARS for v in item.values()):
            out.append(item.copy())
        else:
            out.append(_fresh(item))
    return out


def _extend_values(saver: LedgerCheckpointSaver, out: list[Any], node: Any) -> list[Any]:
    """`out` with fresh copies of the items a list node adds."""
    if "items" in node:
        out.extend(_fresh(node["items"]))
    else:
        out.extend(
            saver.serde.loads_typed((kind, base64.b64decode(data)))
            for kind, data in node["typed_items"]
        )
    return out
