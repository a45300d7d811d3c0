"""RFC 7386 JSON Merge Patch: the RFC's examples and the laws DESIGN.md asks world state to keep."""

from __future__ import annotations

import copy
import functools
import json
import pickle
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger import projections
from agentledger.projections import (
    JSONValue,
    PatchCompositionError,
    ProjectionError,
    UnrepresentableDiffError,
    apply_patch,
    compose_patches,
    diff_patch,
    fold_patches,
)

# --- RFC 7386 -------------------------------------------------------------------------------

# Appendix A, transcribed row by row: (original, patch, result) as JSON text.
APPENDIX_A = [
    ('{"a":"b"}', '{"a":"c"}', '{"a":"c"}'),
    ('{"a":"b"}', '{"b":"c"}', '{"a":"b","b":"c"}'),
    ('{"a":"b"}', '{"a":null}', "{}"),
    ('{"a":"b","b":"c"}', '{"a":null}', '{"b":"c"}'),
    ('{"a":["b"]}', '{"a":"c"}', '{"a":"c"}'),
    ('{"a":"c"}', '{"a":["b"]}', '{"a":["b"]}'),
    ('{"a": {"b": "c"}}', '{"a": {"b": "d", "c": null}}', '{"a": {"b": "d"}}'),
    ('{"a": [{"b":"c"}]}', '{"a": [1]}', '{"a": [1]}'),
    ('["a","b"]', '["c","d"]', '["c","d"]'),
    ('{"a":"b"}', '["c"]', '["c"]'),
    ('{"a":"foo"}', "null", "null"),
    ('{"a":"foo"}', '"bar"', '"bar"'),
    ('{"e":null}', '{"a":1}', '{"e":null,"a":1}'),
    ("[1,2]", '{"a":"b","c":null}', '{"a":"b"}'),
    ("{}", '{"a":{"bb":{"ccc":null}}}', '{"a":{"bb":{}}}'),
]

SECTION_3_TARGET = """{
  "title": "Goodbye!",
  "author" : {"givenName" : "John", "familyName" : "Doe"},
  "tags":[ "example", "sample" ],
  "content": "This will be unchanged"
}"""
SECTION_3_PATCH = """{
  "title": "Hello!",
  "phoneNumber": "+01-123-456-7890",
  "author": {"familyName": null},
  "tags": [ "example" ]
}"""
SECTION_3_RESULT = """{
  "title": "Hello!",
  "author" : {"givenName" : "John"},
  "tags": [ "example" ],
  "content": "This will be unchanged",
  "phoneNumber": "+01-123-456-7890"
}"""


@pytest.mark.parametrize(
    ("original", "patch", "result"),
    APPENDIX_A,
    ids=[f"A.{row}" for row in range(1, len(APPENDIX_A) + 1)],
)
def test_every_appendix_a_example_gives_the_rfc_result(
    original: str, patch: str, result: str
) -> None:
    """Each row of RFC 7386 Appendix A, applied, gives exactly the RFC's result."""
    assert apply_patch(json.loads(original), json.loads(patch)) == json.loads(result)


@pytest.mark.parametrize(
    ("original", "patch", "result"),
    APPENDIX_A,
    ids=[f"A.{row}" for row in range(1, len(APPENDIX_A) + 1)],
)
def test_every_appendix_a_example_folds_to_the_rfc_result(
    original: str, patch: str, result: str
) -> None:
    """The in-place fold agrees with the RFC on every Appendix A row too."""
    assert fold_patches([json.loads(patch)], json.loads(original)) == json.loads(result)


def test_the_section_3_example_document_is_patched_as_the_rfc_shows() -> None:
    """RFC 7386 section 3's worked example (title, author, tags) gives the RFC's result."""
    target = json.loads(SECTION_3_TARGET)
    assert apply_patch(target, json.loads(SECTION_3_PATCH)) == json.loads(SECTION_3_RESULT)


# --- strategies -----------------------------------------------------------------------------

# Few, short keys so that patches collide with documents and with each other; "s/1" makes the
# JSON Pointers in error messages need escaping.
KEYS = st.sampled_from(["a", "b", "c", "s/1"])
FRESH_KEY = "\x00not-in-any-generated-value"

NON_NULL_SCALARS = st.one_of(
    st.booleans(),
    st.integers(-2, 2),
    st.floats(-2, 2, allow_nan=False, allow_infinity=False),
    st.text("xy", max_size=2),
)
SCALARS = st.one_of(st.none(), NON_NULL_SCALARS)

JSON_VALUES: st.SearchStrategy[JSONValue] = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
JSON_OBJECTS: st.SearchStrategy[dict[str, JSONValue]] = st.dictionaries(
    KEYS, JSON_VALUES, max_size=4
)
PATCHES: st.SearchStrategy[JSONValue] = st.one_of(JSON_OBJECTS, JSON_VALUES)

# JSON with no null member in any object (nulls inside lists, or as the whole value, are fine):
# exactly the values a merge patch can write into a document.
_NULL_FREE_TREES: st.SearchStrategy[JSONValue] = st.recursive(
    NON_NULL_SCALARS,
    lambda inner: (
        st.lists(inner | st.none(), max_size=3) | st.dictionaries(KEYS, inner, max_size=4)
    ),
    max_leaves=12,
)
NULL_FREE_VALUES = st.none() | _NULL_FREE_TREES


@st.composite
def _conflicting_pairs(draw: st.DrawFn) -> tuple[JSONValue, JSONValue]:
    """Two object patches: at some path `a` leaves a non-object (or null), `b` writes an object."""
    path = tuple(draw(st.lists(KEYS, max_size=3)))
    left = draw(st.one_of(SCALARS, st.lists(JSON_VALUES, max_size=2)))
    a = _put(draw(JSON_OBJECTS), path, left)
    b = _put(draw(JSON_OBJECTS), path, draw(JSON_OBJECTS))
    return a, b


CONFLICTING_PAIRS = _conflicting_pairs()


# --- helpers --------------------------------------------------------------------------------


def _in_turn(doc: JSONValue, *patches: JSONValue) -> JSONValue:
    """Apply `patches` one after the other with `apply_patch`."""
    return functools.reduce(apply_patch, patches, doc)


def _tagged(value: JSONValue) -> object:
    """Tag each scalar with its JSON type, so `true` and `1` compare different (as in JSON)."""
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tagged(item) for item in value]
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    return (type(value).__name__, value)


def _same_json(x: JSONValue, y: JSONValue) -> bool:
    """Tell whether `x` and `y` are the same JSON value (`1` and `1.0` are; `1` and `true` not)."""
    return _tagged(x) == _tagged(y)


def _put(doc: JSONValue, path: tuple[str, ...], value: JSONValue) -> JSONValue:
    """Return a copy of `doc` with `value` at `path`, making objects along the way as needed."""
    if not path:
        return value
    node = dict(doc) if isinstance(doc, dict) else {}
    node[path[0]] = _put(node.get(path[0]), path[1:], value)
    return node


def _at(doc: JSONValue, path: tuple[str, ...]) -> JSONValue:
    """Return the value at `path`, asserting every step on the way is an object holding it."""
    for key in path:
        assert isinstance(doc, dict)
        assert key in doc
        doc = doc[key]
    return doc


def _key_not_named_in(patch: JSONValue) -> str:
    """Return a key that no object inside `patch` names."""
    named: set[str] = set()
    pending = [patch]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            named.update(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return next(key for n in range(len(named) + 1) if (key := f"{FRESH_KEY}{n}") not in named)


def _scribble(value: JSONValue) -> None:
    """Mutate every dict and list inside `value`, so any input it aliases would show it."""
    if isinstance(value, dict):
        for item in value.values():
            _scribble(item)
        value[FRESH_KEY] = "scribbled"
    elif isinstance(value, list):
        for item in value:
            _scribble(item)
        value.append("scribbled")


def _forced_compose(
    a: JSONValue, b: JSONValue, at_conflict: Callable[[JSONValue, JSONValue], JSONValue]
) -> JSONValue:
    """Compose like `compose_patches`, but where it would raise put `at_conflict(a_here, b_here)`.

    These are the natural single-patch candidates that a composition could have returned.
    """
    if not isinstance(b, dict):
        return b
    if not isinstance(a, dict):
        return at_conflict(a, b)
    composed = {key: value for key, value in a.items() if key not in b}
    for key, value in b.items():
        if isinstance(value, dict) and key in a:
            composed[key] = _forced_compose(a[key], value, at_conflict)
        else:
            composed[key] = value
    return composed


def _also_deleting_a_fresh_key(_first: JSONValue, second: JSONValue) -> JSONValue:
    """Write `b`'s object and also delete a key nothing else names: a plausible candidate."""
    assert isinstance(second, dict)
    return {FRESH_KEY: None, **second}


def _assert_no_single_patch_exists(
    a: JSONValue, b: JSONValue, error: PatchCompositionError, doc: JSONValue, other: JSONValue
) -> None:
    """Exhibit two documents that no candidate single patch can take where `a` then `b` do.

    `a` has objects on the way to `error.path` and a non-object (or null) there; `b` has objects
    all the way down. So `s1` (an object at the path holding a key the candidate does not name;
    a finite patch always leaves one) and `s2` (an empty object there) end the same after `a`
    then `b`. A single patch either puts a non-object on the path (then it cannot yield the
    object that `b` writes), leaves the path alone (then `s1` and `s2` end different), or merges
    an object into the value at the path (then the unnamed key survives in `s1`). Every
    candidate therefore fails on `s1` or on `s2`.
    """
    path = error.path
    for depth in range(len(path)):
        assert isinstance(_at(a, path[:depth]), dict)
    assert not isinstance(_at(a, path), dict)
    assert isinstance(_at(b, path), dict)

    s2 = _put(doc, path, {})
    expected = _in_turn(s2, a, b)
    assert isinstance(_at(expected, path), dict)

    candidates = [
        _forced_compose(a, b, lambda _first, second: second),
        _forced_compose(a, b, apply_patch),
        _forced_compose(a, b, lambda first, _second: first),
        _forced_compose(a, b, _also_deleting_a_fresh_key),
        a,
        b,
        apply_patch(a, b),
        other,
    ]
    for candidate in candidates:
        s1 = _put(doc, path, {_key_not_named_in(candidate): 1})
        assert _in_turn(s1, a, b) == expected
        assert apply_patch(s1, candidate) != expected or apply_patch(s2, candidate) != expected


# --- apply ----------------------------------------------------------------------------------


@given(JSON_OBJECTS)
def test_the_empty_patch_leaves_any_object_unchanged(doc: dict[str, JSONValue]) -> None:
    """`{}` is the identity on every object document."""
    assert apply_patch(doc, {}) == doc


@pytest.mark.parametrize("doc", [None, 0, "text", True, [1, {"a": 2}]])
def test_the_empty_patch_turns_a_non_object_into_an_empty_object(doc: JSONValue) -> None:
    """RFC 7386 sets a non-object target to `{}` before merging, so `{}` is no identity there."""
    assert apply_patch(doc, {}) == {}


@given(JSON_VALUES, PATCHES)
def test_applying_a_patch_twice_equals_applying_it_once(doc: JSONValue, patch: JSONValue) -> None:
    """Merge patches are idempotent: the second application changes nothing."""
    once = apply_patch(doc, patch)
    assert apply_patch(once, patch) == once


@given(JSON_VALUES, PATCHES)
def test_apply_never_mutates_its_inputs(doc: JSONValue, patch: JSONValue) -> None:
    """`apply_patch` leaves both the document and the patch as they were."""
    doc_before, patch_before = copy.deepcopy(doc), copy.deepcopy(patch)
    apply_patch(doc, patch)
    assert doc == doc_before
    assert patch == patch_before


@given(JSON_VALUES, PATCHES)
def test_apply_results_never_alias_the_patch(doc: JSONValue, patch: JSONValue) -> None:
    """Mutating what `apply_patch` returned never reaches into the patch (an event payload)."""
    patch_before = copy.deepcopy(patch)
    _scribble(apply_patch(doc, patch))
    assert patch == patch_before


def test_apply_shares_untouched_subtrees_and_copies_the_changed_path() -> None:
    """Untouched subtrees are shared with the document; objects on the changed path are new."""
    doc: JSONValue = {"big": {"x": [1, 2]}, "steps": {"s1": {"status": "running"}}}
    result = apply_patch(doc, {"steps": {"s1": {"status": "done"}}})
    assert isinstance(doc, dict)
    assert isinstance(result, dict)
    assert result["big"] is doc["big"]
    assert result["steps"] is not doc["steps"]
    assert doc["steps"] == {"s1": {"status": "running"}}


# --- fold -----------------------------------------------------------------------------------


@given(st.lists(PATCHES, max_size=6), st.none() | JSON_VALUES)
def test_fold_equals_applying_each_patch_in_turn(
    patches: list[JSONValue], start: JSONValue
) -> None:
    """`fold_patches` is the left fold of `apply_patch`, from `{}` when no start is given."""
    assert fold_patches(patches, start) == _in_turn({} if start is None else start, *patches)


@given(st.lists(PATCHES, max_size=6), st.integers(0, 6))
def test_folding_a_snapshot_plus_the_tail_equals_the_full_fold(
    patches: list[JSONValue], cut: int
) -> None:
    """A snapshot folded from the head, then the tail folded onto it, is the full fold.

    The one exception, a null snapshot with no tail, is pinned by the next test.
    """
    snapshot = fold_patches(patches[:cut])
    if snapshot is None and not patches[cut:]:
        return
    assert fold_patches(patches[cut:], snapshot) == fold_patches(patches)


def test_a_null_start_means_the_empty_object() -> None:
    """`start=None` is "from `{}`": it only shows when nothing is folded onto it."""
    assert fold_patches([], None) == {}
    assert fold_patches([{"a": 1}], None) == apply_patch(None, {"a": 1}) == {"a": 1}
    assert fold_patches(["text"], None) == "text"


@given(st.lists(PATCHES, max_size=6), JSON_VALUES)
def test_fold_never_mutates_its_start_or_its_patches(
    patches: list[JSONValue], start: JSONValue
) -> None:
    """Folding in place happens in a private copy: the start and every patch are untouched."""
    start_before, patches_before = copy.deepcopy(start), copy.deepcopy(patches)
    fold_patches(patches, start)
    assert start == start_before
    assert patches == patches_before


@given(st.lists(PATCHES, max_size=6), JSON_VALUES)
def test_fold_results_share_nothing_with_their_inputs(
    patches: list[JSONValue], start: JSONValue
) -> None:
    """Mutating a folded world state never reaches into the start or any patch."""
    start_before, patches_before = copy.deepcopy(start), copy.deepcopy(patches)
    _scribble(fold_patches(patches, start))
    assert start == start_before
    assert patches == patches_before


def test_a_fold_of_no_patches_is_the_empty_object() -> None:
    """World state before any delta is `{}`."""
    assert fold_patches([]) == {}


def test_fold_accepts_any_iterable_of_patches() -> None:
    """A generator of deltas folds like a list (the store streams them)."""
    deltas: Iterator[JSONValue] = ({"steps": {f"s{i}": {"done": i % 2 == 0}}} for i in range(3))
    assert fold_patches(deltas) == {
        "steps": {"s0": {"done": True}, "s1": {"done": False}, "s2": {"done": True}}
    }


# --- compose --------------------------------------------------------------------------------


@given(JSON_VALUES, PATCHES, PATCHES, PATCHES)
def test_compose_has_the_effect_of_both_patches_or_names_why_none_exists(
    doc: JSONValue, a: JSONValue, b: JSONValue, other: JSONValue
) -> None:
    """Where compose returns, one patch does `a` then `b`; where it raises, none can."""
    try:
        composed = compose_patches(a, b)
    except PatchCompositionError as error:
        _assert_no_single_patch_exists(a, b, error, doc, other)
    else:
        assert apply_patch(doc, composed) == _in_turn(doc, a, b)
        assert apply_patch({FRESH_KEY: 1}, composed) == _in_turn({FRESH_KEY: 1}, a, b)


@given(CONFLICTING_PAIRS, JSON_VALUES, PATCHES)
def test_compose_raises_wherever_a_leaves_a_non_object_and_b_writes_an_object(
    pair: tuple[JSONValue, JSONValue], doc: JSONValue, other: JSONValue
) -> None:
    """Every planted delete-or-replace-then-object conflict raises, and no single patch exists."""
    a, b = pair
    with pytest.raises(PatchCompositionError) as caught:
        compose_patches(a, b)
    _assert_no_single_patch_exists(a, b, caught.value, doc, other)


@given(PATCHES, PATCHES, PATCHES, JSON_VALUES)
def test_compose_is_associative_where_defined(
    a: JSONValue, b: JSONValue, c: JSONValue, doc: JSONValue
) -> None:
    """(a·b)·c and a·(b·c) are the same patch whenever both are defined."""
    try:
        left = compose_patches(compose_patches(a, b), c)
        right = compose_patches(a, compose_patches(b, c))
    except PatchCompositionError:
        return
    assert left == right
    assert apply_patch(doc, left) == _in_turn(doc, a, b, c)


@given(PATCHES, PATCHES)
def test_compose_never_mutates_its_inputs_and_shares_nothing_with_them(
    a: JSONValue, b: JSONValue
) -> None:
    """`compose_patches` leaves both patches as they were, and its result aliases neither."""
    a_before, b_before = copy.deepcopy(a), copy.deepcopy(b)
    try:
        composed = compose_patches(a, b)
    except PatchCompositionError:
        composed = None
    assert (a, b) == (a_before, b_before)
    _scribble(composed)
    assert (a, b) == (a_before, b_before)


@pytest.mark.parametrize(
    ("a", "b", "path", "pointer"),
    [
        (
            {"steps": {"s1": None}},
            {"steps": {"s1": {"status": "done"}}},
            ("steps", "s1"),
            "/steps/s1",
        ),
        ({"steps": {"s1": "skipped"}}, {"steps": {"s1": {}}}, ("steps", "s1"), "/steps/s1"),
        ({"a/b": {"~": [1]}}, {"a/b": {"~": {"x": 1}}}, ("a/b", "~"), "/a~1b/~0"),
        ([1, 2], {"a": 1}, (), "(the document root)"),
    ],
    ids=["delete-then-object", "replace-then-object", "escaped-pointer", "root"],
)
def test_a_composition_error_names_the_conflicting_path(
    a: JSONValue, b: JSONValue, path: tuple[str, ...], pointer: str
) -> None:
    """The error carries the path as a tuple and names it as a JSON Pointer in its message."""
    with pytest.raises(PatchCompositionError) as caught:
        compose_patches(a, b)
    assert caught.value.path == path
    assert pointer in str(caught.value)


def test_compose_merges_nested_objects_and_lets_the_second_patch_win() -> None:
    """Keys only one patch names keep its value; shared objects merge; otherwise b wins."""
    a: JSONValue = {"steps": {"s1": {"status": "running", "try": 1}}, "goal": "tidy", "x": 1}
    b: JSONValue = {"steps": {"s1": {"status": "done"}, "s2": {"status": "running"}}, "x": None}
    assert compose_patches(a, b) == {
        "steps": {"s1": {"status": "done", "try": 1}, "s2": {"status": "running"}},
        "goal": "tidy",
        "x": None,
    }


# --- diff -----------------------------------------------------------------------------------


@given(JSON_VALUES, NULL_FREE_VALUES)
def test_applying_the_diff_takes_the_source_to_a_null_free_target(
    a: JSONValue, b: JSONValue
) -> None:
    """`apply(a, diff(a, b)) == b` for every target with no null member in an object."""
    assert _same_json(apply_patch(a, diff_patch(a, b)), b)


@given(JSON_VALUES, JSON_VALUES)
def test_diff_returns_a_working_patch_or_names_the_null_it_cannot_write(
    a: JSONValue, b: JSONValue
) -> None:
    """Any target: the diff works whenever it returns; otherwise the named path holds a null."""
    try:
        patch = diff_patch(a, b)
    except UnrepresentableDiffError as caught:
        refused = caught
    else:
        assert _same_json(apply_patch(a, patch), b)
        return
    assert refused.path
    assert _at(b, refused.path) is None


@given(JSON_OBJECTS)
def test_the_diff_of_an_object_with_an_equal_object_is_the_empty_patch(
    a: dict[str, JSONValue],
) -> None:
    """Equal objects (nulls included) differ by nothing."""
    assert diff_patch(a, copy.deepcopy(a)) == {}


def _members(patch: JSONValue, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every member path of `patch`, descending through objects."""
    if not isinstance(patch, dict):
        return []
    found = []
    for key, value in patch.items():
        found.append((*path, key))
        found.extend(_members(value, (*path, key)))
    return found


def _without(patch: JSONValue, path: tuple[str, ...]) -> JSONValue:
    """Return a copy of `patch` with the member at `path` left out."""
    assert isinstance(patch, dict)
    head, rest = path[0], path[1:]
    trimmed = dict(patch)
    if rest:
        trimmed[head] = _without(trimmed[head], rest)
    else:
        del trimmed[head]
    return trimmed


@given(JSON_VALUES, NULL_FREE_VALUES)
def test_the_diff_is_minimal(a: JSONValue, b: JSONValue) -> None:
    """Leaving out any member of the diff, at any depth, stops it reaching the target."""
    patch = diff_patch(a, b)
    for member in _members(patch):
        assert not _same_json(apply_patch(a, _without(patch, member)), b)


@given(JSON_VALUES, JSON_VALUES)
def test_diff_never_mutates_its_inputs_and_shares_nothing_with_them(
    a: JSONValue, b: JSONValue
) -> None:
    """`diff_patch` leaves both documents as they were, and its result aliases neither."""
    a_before, b_before = copy.deepcopy(a), copy.deepcopy(b)
    try:
        patch = diff_patch(a, b)
    except UnrepresentableDiffError:
        patch = None
    assert (a, b) == (a_before, b_before)
    _scribble(patch)
    assert (a, b) == (a_before, b_before)


def test_a_diff_lists_removed_keys_as_null_and_omits_unchanged_ones() -> None:
    """A run diff names what changed, what was removed, and nothing else."""
    a: JSONValue = {"steps": {"s1": {"status": "running", "try": 1}}, "goal": "tidy", "old": 1}
    b: JSONValue = {"steps": {"s1": {"status": "done", "try": 1}}, "goal": "tidy"}
    assert diff_patch(a, b) == {"steps": {"s1": {"status": "done"}}, "old": None}


def test_a_diff_tells_true_from_one() -> None:
    """JSON `true` and `1` are different values even though Python says `True == 1`."""
    assert diff_patch({"flag": 1}, {"flag": True}) == {"flag": True}
    assert diff_patch({"n": 1}, {"n": 1.0}) == {}


@pytest.mark.parametrize(
    ("a", "b", "path", "pointer"),
    [
        ({}, {"a": None}, ("a",), "/a"),
        ({"x": 1}, {"x": {"y": {"z": None}}}, ("x", "y", "z"), "/x/y/z"),
        ([1], {"s/1": None}, ("s/1",), "/s~11"),
    ],
    ids=["new-null-member", "null-inside-a-written-object", "non-object-source"],
)
def test_a_diff_that_must_write_a_null_member_is_refused_by_path(
    a: JSONValue, b: JSONValue, path: tuple[str, ...], pointer: str
) -> None:
    """No merge patch writes a null member, so the diff says where the target holds one."""
    with pytest.raises(UnrepresentableDiffError) as caught:
        diff_patch(a, b)
    assert isinstance(caught.value, ValueError)
    assert caught.value.path == path
    assert pointer in str(caught.value)


def test_a_diff_keeps_nulls_that_need_no_writing() -> None:
    """A null member already in the source, a null in a list, and a null target all work."""
    assert diff_patch({"e": None}, {"e": None, "a": 1}) == {"a": 1}
    assert diff_patch({}, {"a": [None]}) == {"a": [None]}
    assert diff_patch({"a": 1}, None) is None


# --- errors and exports ---------------------------------------------------------------------


def test_projection_errors_form_one_tree() -> None:
    """Both errors derive from ProjectionError; the diff error is also a ValueError."""
    assert issubclass(PatchCompositionError, ProjectionError)
    assert issubclass(UnrepresentableDiffError, ProjectionError)
    assert issubclass(UnrepresentableDiffError, ValueError)


@pytest.mark.parametrize("error_type", [PatchCompositionError, UnrepresentableDiffError])
def test_errors_keep_their_path_through_pickling(
    error_type: type[PatchCompositionError] | type[UnrepresentableDiffError],
) -> None:
    """Errors cross process boundaries (workers, test runners) with their fields intact."""
    error = error_type(("steps", "s1"))
    restored = pickle.loads(pickle.dumps(error))  # noqa: S301 -- our own bytes, made just above
    assert type(restored) is error_type
    assert restored.path == ("steps", "s1")
    assert str(restored) == str(error)


def test_the_package_exports_the_merge_api_in_a_sorted_all() -> None:
    """`agentledger.projections.__all__` is sorted and names the merge API."""
    exported = projections.__all__
    assert exported == sorted(exported)
    assert {
        "JSONValue",
        "PatchCompositionError",
        "ProjectionError",
        "UnrepresentableDiffError",
        "apply_patch",
        "compose_patches",
        "diff_patch",
        "fold_patches",
    } <= set(exported)
