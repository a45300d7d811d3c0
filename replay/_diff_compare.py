"""Comparing two aligned items: what counts as a difference, and how each difference reads.

Owns the equivalence a run diff uses. Payloads are normalised before comparison by dropping
what varies between two faithful runs of the same thing: timing (latencies, attempt timings),
positions (``caused_by``), run-local ids (``step_id``, ``call_id``: run b's ids are renamed to
run a's through the alignment, so a delta keyed by ``step-4`` in b matches ``step-3`` in a when
those steps are aligned), hash-chain fields (``head_hash``, ``event_count``), tracebacks, and the
served-from-record marker (with the usage and cost of a call served from the record). Also owns
the readable forms: JSON changes (merge patch + changed paths), unified text diffs, rendered
messages and one-line summaries. Must not read the ledger (blobs come in through `BlobCache`).
"""

from __future__ import annotations

import contextlib
import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentledger.projections import UnrepresentableDiffError, diff_patch
from agentledger.replay._diff_blobs import MISSING, BlobCache, ConversationTails
from agentledger.replay._diff_model import ItemDiff, JsonChange, PathChange, PromptChange
from agentledger.replay._diff_units import Item, payload_of

__all__ = [
    "IdMap",
    "comparable",
    "describe_pair",
    "describe_single",
    "json_change",
    "normalize",
    "resolve",
    "text_diff",
    "text_lines",
]

IGNORED = frozenset(
    {"caused_by", "step_id", "call_id", "latency_ms", "served_from", "head_hash", "event_count"}
)
"""Top-level payload fields a diff ignores: timing, positions, run-local ids, hash chain."""
SERVED_IGNORED = ("usage", "cost_usd", "attempts")
"""Also ignored on a model call either side served from the record (no tokens, no attempts)."""
PATH_LIMIT = 200
TAIL_LIMIT = 12
CLIP = 160
CONTEXT = 2


def normalize(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A payload without the fields a diff ignores (attempt timings and tracebacks too)."""
    out = {key: value for key, value in payload.items() if key not in IGNORED}
    attempts = out.get("attempts")
    if attempts:
        out["attempts"] = [
            {k: v for k, v in a.items() if k not in {"latency_ms", "backoff_s"}} for a in attempts
        ]
    error = out.get("error")
    if isinstance(error, dict) and "traceback" in error:
        out["error"] = {k: v for k, v in error.items() if k != "traceback"}
    return out


def comparable(item: Item) -> Any:
    """The normalised form of an item (a tool call is its call and its result together)."""
    if item.kind == "tool":
        returned = normalize(payload_of(item.records[1])) if len(item.records) > 1 else None
        return {"called": normalize(payload_of(item.records[0])), "returned": returned}
    return normalize(payload_of(item.records[0]))


def served(item: Item) -> bool:
    """Whether any event of the item was served from the record."""
    return any(payload_of(r).get("served_from") for r in item.records)


def drop_served(value: dict[str, Any]) -> dict[str, Any]:
    """A model call's normal form without usage and cost (one side was served from record)."""
    return {k: v for k, v in value.items() if k not in SERVED_IGNORED}


class IdMap:
    """Renames run b's step and call ids to the ids of the aligned steps and calls in run a."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def add(self, b_id: str | None, a_id: str | None) -> None:
        """Map `b_id` to `a_id` (nothing when either is missing or they are equal)."""
        if b_id and a_id and b_id != a_id:
            self.names[b_id] = a_id

    def apply(self, value: Any) -> Any:
        """`value` with every object key and string equal to a mapped id renamed."""
        if not self.names:
            return value
        return self._rename(value)

    def _rename(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.names.get(value, value)
        if isinstance(value, dict):
            return {self.names.get(k, k): self._rename(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._rename(v) for v in value]
        return value


# JSON changes ----------------------------------------------------------------------------------


def _pointer(path: Sequence[str]) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in path)


_ABSENT: Any = object()


def _same(a: Any, b: Any) -> bool:
    """JSON equality at this level: ``true`` is not ``1``, but ``1`` is ``1.0``."""
    return isinstance(a, bool) is isinstance(b, bool) and a == b


def _paths(a: Any, b: Any, path: list[str], out: list[PathChange]) -> bool:
    """Append the changed paths of a -> b to `out`; False once the limit is reached."""
    if a is not _ABSENT and b is not _ABSENT and _same(a, b):
        return True
    if len(out) >= PATH_LIMIT:
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return _dict_paths(a, b, path, out)
    if isinstance(a, list) and isinstance(b, list):
        return _list_paths(a, b, path, out)
    if a is _ABSENT:
        out.append(PathChange(_pointer(path), "added", None, b))
    elif b is _ABSENT:
        out.append(PathChange(_pointer(path), "removed", a, None))
    else:
        out.append(PathChange(_pointer(path), "changed", a, b))
    return True


def _dict_paths(
    a: dict[str, Any], b: dict[str, Any], path: list[str], out: list[PathChange]
) -> bool:
    for key, value in a.items():
        if not _paths(value, b.get(key, _ABSENT), [*path, key], out):
            return False
    return all(
        _paths(_ABSENT, value, [*path, key], out) for key, value in b.items() if key not in a
    )


def _list_paths(a: list[Any], b: list[Any], path: list[str], out: list[PathChange]) -> bool:
    """The changed paths of two lists: element by element, or aligned when lengths differ.

    Lists of different lengths are aligned (LCS), so an insertion is one added path; removed
    elements are named by their index in a, the others by their index in b.
    """
    if len(a) == len(b):
        return all(
            _paths(x, y, [*path, str(i)], out) for i, (x, y) in enumerate(zip(a, b, strict=True))
        )
    keys_a = [_compact(x) for x in a]
    keys_b = [_compact(y) for y in b]
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                if not _paths(a[i], b[j], [*path, str(j)], out):
                    return False
            continue
        for i in range(i1, i2):
            if not _paths(a[i], _ABSENT, [*path, str(i)], out):
                return False
        for j in range(j1, j2):
            if not _paths(_ABSENT, b[j], [*path, str(j)], out):
                return False
    return True


def json_change(a: Any, b: Any) -> JsonChange:
    """The merge patch from `a` to `b` (when one exists) and the paths that changed."""
    paths: list[PathChange] = []
    complete = _paths(a, b, [], paths)
    try:
        return JsonChange(diff_patch(a, b), tuple(paths), truncated=not complete)
    except UnrepresentableDiffError:
        return JsonChange(None, tuple(paths), representable=False, truncated=not complete)


# Text ------------------------------------------------------------------------------------------


def text_lines(value: Any) -> list[str]:
    """A value as lines: text split on newlines, JSON text or structures pretty-printed."""
    if value is MISSING:
        return ["<blob missing from the ledger>"]
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in {"{", "["}:
            try:
                return _pretty(json.loads(stripped))
            except ValueError:
                pass
        return value.splitlines() or [""]
    return _pretty(value)


def _pretty(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def text_diff(a: list[str], b: list[str], a_name: str, b_name: str) -> str | None:
    """A unified diff of two line lists, or None when they are equal."""
    lines = list(difflib.unified_diff(a, b, a_name, b_name, lineterm="", n=CONTEXT))
    return "\n".join(lines) if lines else None


def message_lines(messages: Sequence[Any], first: int) -> list[str]:
    """Messages rendered one block each: ``[3] assistant:``, content lines, tool calls."""
    lines: list[str] = []
    for offset, message in enumerate(messages):
        m = message if isinstance(message, dict) else {"content": message}
        extra = "".join(
            f" {key}={m[key]}" for key in ("name", "tool_call_id") if m.get(key) is not None
        )
        lines.append(f"[{first + offset}] {m.get('role', '?')}{extra}:")
        if m.get("content") not in (None, ""):
            lines += ["  " + line for line in text_lines(m["content"])]
        for call in m.get("tool_calls") or []:
            name, arguments = _tool_call(call)
            shown = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
            lines.append(f"  -> {name}({shown})")
    return lines


def _tool_call(call: Any) -> tuple[Any, Any]:
    """A tool call's name and arguments: ours, or the OpenAI SDK's (``function``, JSON text)."""
    if not isinstance(call, dict):
        return None, call
    function = call.get("function")
    if isinstance(function, dict):
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # else shown as the text it is
                arguments = json.loads(arguments)
        return function.get("name"), arguments
    return call.get("name"), call.get("arguments")


def clip(text: str, width: int = CLIP) -> str:
    """One line of at most `width` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# Items -----------------------------------------------------------------------------------------


def resolve(cache: BlobCache, payload: Mapping[str, Any], name: str) -> Any:
    """A payload field that may be inline (`name`) or a blob (`name_ref`)."""
    ref = payload.get(f"{name}_ref")
    return cache.get(ref) if isinstance(ref, str) else payload.get(name)


def refs_wanted(item: Item) -> list[str]:
    """The blob refs describing this item will read (prompt texts, responses, args, results)."""
    found: list[str] = []
    for record in item.records:
        payload = payload_of(record)
        for key in ("response_ref", "arguments_ref", "data_ref", "answer_ref"):
            if isinstance(payload.get(key), str):
                found.append(payload[key])
        prompt = payload.get("prompt")
        if isinstance(prompt, dict) and isinstance(prompt.get("text_ref"), str):
            found.append(prompt["text_ref"])
    return found


def _response(cache: BlobCache, payload: Mapping[str, Any]) -> Any:
    ref = payload.get("response_ref")
    if not isinstance(ref, str):
        return None
    node = cache.get(ref)
    return node.get("message") if isinstance(node, dict) else node


def _prompt_id(prompt: Any) -> dict[str, str] | None:
    if not isinstance(prompt, dict):
        return None
    return {k: str(prompt[k]) for k in ("name", "version", "hash") if k in prompt}


def _prompt_change(cache: BlobCache, pa: Any, pb: Any) -> PromptChange:
    text: str | None = None
    if isinstance(pa, dict) and isinstance(pb, dict) and pa.get("hash") != pb.get("hash"):
        ra, rb = pa.get("text_ref"), pb.get("text_ref")
        if isinstance(ra, str) and isinstance(rb, str):
            text = text_diff(
                text_lines(cache.get(ra)),
                text_lines(cache.get(rb)),
                f"a prompt {pa.get('name')} {pa.get('version')}",
                f"b prompt {pb.get('name')} {pb.get('version')}",
            )
    return PromptChange(_prompt_id(pa), _prompt_id(pb), text)


def _differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return [k for k in dict.fromkeys([*a, *b]) if a.get(k, _ABSENT) != b.get(k, _ABSENT)]


_MODEL_SPECIAL = ("messages_ref", "message_count", "response_ref", "prompt")


def _model_pair(
    cache: BlobCache,
    ca: dict[str, Any],
    cb: dict[str, Any],
    tails: ConversationTails | None,
    base: dict[str, Any],
) -> dict[str, Any]:
    changed = _differing(ca, cb)
    names: list[str] = []
    if "prompt" in changed:
        names.append("prompt")
        base["prompt"] = _prompt_change(cache, ca.get("prompt"), cb.get("prompt"))
    if tails is not None:
        names.append("messages")
        base["messages"], base["shared_messages"] = _messages_diff(tails)
    if "response_ref" in changed:
        ra, rb = _response(cache, ca), _response(cache, cb)
        if ra != rb:
            names.append("response")
            base["response"] = text_diff(
                message_lines([ra] if ra else [], 1),
                message_lines([rb] if rb else [], 1),
                "a response",
                "b response",
            )
    rest = [k for k in changed if k not in _MODEL_SPECIAL]
    if rest:
        names += rest
        base["value"] = json_change(
            {k: ca[k] for k in rest if k in ca}, {k: cb[k] for k in rest if k in cb}
        )
    base["fields"] = tuple(names)
    return base


def _messages_diff(tails: ConversationTails) -> tuple[str | None, int]:
    """The unified diff of two request tails, after dropping leading messages equal by content."""
    shared, a, b = tails.shared, list(tails.a), list(tails.b)
    while a and b and a[0] == b[0]:
        shared, a, b = shared + 1, a[1:], b[1:]
    more_a, more_b = max(len(a) - TAIL_LIMIT, 0), max(len(b) - TAIL_LIMIT, 0)
    lines_a = message_lines(a[:TAIL_LIMIT], shared + 1)
    lines_b = message_lines(b[:TAIL_LIMIT], shared + 1)
    if more_a or more_b:
        lines_a.append(f"... {more_a} more message(s)")
        lines_b.append(f"... {more_b} more message(s)")
    header = f"messages after the {shared} shared"
    return text_diff(lines_a, lines_b, f"a {header}", f"b {header}"), shared


def _tool_pair(cache: BlobCache, ca: dict[str, Any], cb: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {}
    names: list[str] = []
    called_a, called_b = ca["called"], cb["called"]
    args_a = resolve(cache, called_a, "arguments")
    args_b = resolve(cache, called_b, "arguments")
    if args_a != args_b:
        names.append("arguments")
        base["arguments"] = json_change(args_a, args_b)
    result_a = _envelope(cache, ca["returned"])
    result_b = _envelope(cache, cb["returned"])
    if result_a != result_b:
        names.append("result")
        base["result"] = json_change(result_a, result_b)
    rest = [k for k in _differing(called_a, called_b) if k not in {"arguments", "arguments_ref"}]
    if rest:
        names += rest
        base["value"] = json_change(
            {k: called_a.get(k) for k in rest}, {k: called_b.get(k) for k in rest}
        )
    base["fields"] = tuple(names)
    return base


def _envelope(cache: BlobCache, returned: dict[str, Any] | None) -> Any:
    if returned is None:
        return None
    envelope = {k: v for k, v in returned.items() if k not in {"data", "data_ref"}}
    data = resolve(cache, returned, "data")
    if data is not None:
        envelope["data"] = data
    return envelope


def describe_pair(
    cache: BlobCache,
    item_a: Item,
    item_b: Item,
    ca: Any,
    cb: Any,
    *,
    tails: ConversationTails | None = None,
) -> ItemDiff:
    """The `ItemDiff` of two aligned items whose normal forms `ca` and `cb` differ."""
    base: dict[str, Any] = {}
    if item_a.kind == "model":
        base = _model_pair(cache, ca, cb, tails, base)
    elif item_a.kind == "tool":
        base = _tool_pair(cache, ca, cb)
    else:
        names = _differing(ca, cb)
        base["fields"] = tuple(names)
        base["value"] = json_change(ca, cb)
    return ItemDiff(
        label=item_a.label,
        kind=item_a.kind,
        status="changed",
        a_position=item_a.position,
        b_position=item_b.position,
        **base,
    )


def describe_single(cache: BlobCache, item: Item, side: str) -> ItemDiff:
    """The `ItemDiff` of an item only one run has (`side` is "a": removed, "b": added)."""
    return ItemDiff(
        label=item.label,
        kind=item.kind,
        status="removed" if side == "a" else "added",
        a_position=item.position if side == "a" else None,
        b_position=item.position if side == "b" else None,
        summary=summarize(cache, item),
    )


def summarize(cache: BlobCache, item: Item) -> str:
    """One line saying what an item did."""
    payload = payload_of(item.records[0])
    if item.kind == "model":
        response = _response(cache, payload)
        said = ""
        if isinstance(response, dict):
            calls = [c.get("name") for c in response.get("tool_calls") or []]
            said = str(response.get("content") or "") + (f" calls {calls}" if calls else "")
        return clip(f"{payload.get('provider')}:{payload.get('model')} -> {said}")
    if item.kind == "tool":
        arguments = _compact(resolve(cache, payload, "arguments"))
        outcome = ""
        if len(item.records) > 1:
            returned = payload_of(item.records[1])
            error = returned.get("error") or {}
            outcome = " -> ok" if returned.get("ok") else f" -> FAILED {error.get('code')}"
        return clip(f"{payload.get('tool')}({arguments}){outcome}")
    return clip(_compact(normalize(payload)))
