"""Entry points: naming a user's function so that replay can import it back, and importing it.

Owns the rules of `Ledger.record_function`'s ``RunStarted.entry``: a function is recorded by its
import path ``module:qualname`` (a function of a script run as ``python my_agent.py`` by the
module name its path gives, never ``__main__``), its file and the hash of its source; lambdas,
nested functions, bound methods and other callables that cannot be imported back are refused
with the reason. ``load_entry`` imports a function by its path (the working directory on the
import path) for replay. Also the ``recorded_function`` decorator and the prompts a function is
recorded with. Must not record events or know agents.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from agentledger.ledger._canonical import canonical_json
from agentledger.ledger._hashing import blob_ref
from agentledger.ledger.errors import UsageError
from agentledger.ledger.events import EntryPoint, PromptRef

if TYPE_CHECKING:
    from agentledger.ledger._ledger import Ledger

__all__ = [
    "EntryError",
    "PromptSpec",
    "RecordedFunction",
    "entry_point",
    "load_entry",
    "prompt_refs",
    "recorded_function",
    "script_module",
]

PromptSpec = str | tuple[str, str]
"""A prompt given to `Ledger.record_function`: its text, or (version, text)."""


class EntryError(UsageError):
    """A function cannot be recorded as an entry point, or an entry path cannot be imported."""


class RecordedFunction:
    """A function marked with `recorded_function`: still callable as ``fn(run, input)``.

    `Ledger.record_function` takes it like the bare function and uses its defaults (agent name,
    tags, prompts); ``record(ledger, input)`` and ``await arecord(ledger, input)`` are
    shorthands. Replay finds the function behind it by its import path.
    """

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        agent: str | None = None,
        tags: Sequence[str] = (),
        prompts: Mapping[str, PromptSpec] | None = None,
    ) -> None:
        functools.update_wrapper(self, function)
        self.function = function
        self.agent = agent
        self.tags = tuple(tags)
        self.prompts = dict(prompts or {})

    def __call__(self, run: Any, input: Any) -> Any:  # noqa: A002 - the run's input
        return self.function(run, input)

    def record(self, ledger: Ledger, input: Any = None, **options: Any) -> tuple[Any, str]:  # noqa: A002
        """``ledger.record_function(self, input, ...)``: (result, run id)."""
        return ledger.record_function(self, input, **options)

    async def arecord(self, ledger: Ledger, input: Any = None, **options: Any) -> tuple[Any, str]:  # noqa: A002
        """``await ledger.arecord_function(self, input, ...)``: (result, run id)."""
        return await ledger.arecord_function(self, input, **options)


def recorded_function(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    agent: str | None = None,
    tags: Sequence[str] = (),
    prompts: Mapping[str, PromptSpec] | None = None,
) -> Any:
    """Mark a module-level ``fn(run, input)`` as a recorded agent, with its defaults.

    ``@recorded_function`` or ``@recorded_function(agent="triage", prompts={...})``; then
    ``ledger.record_function(fn, input)`` or ``fn.record(ledger, input)``.
    """
    if fn is not None:
        _importable_shape(fn)  # refuse what replay could not import back, at definition time
        return RecordedFunction(fn, agent=agent, tags=tags, prompts=prompts)

    def decorate(function: Callable[..., Any]) -> RecordedFunction:
        return recorded_function(function, agent=agent, tags=tags, prompts=prompts)  # type: ignore[no-any-return]

    return decorate


_KNOWN: weakref.WeakKeyDictionary[Any, EntryPoint] = weakref.WeakKeyDictionary()
"""Entry points already worked out, by function (reading a function's source is slow)."""


def entry_point(fn: Callable[..., Any]) -> EntryPoint:
    """Where ``fn`` lives, as RunStarted records it; `EntryError` if replay could not import it."""
    target = _importable_shape(fn)
    try:
        known = _KNOWN.get(target)
    except TypeError:  # not weakly referenceable (a bound classmethod): not cached
        known = None
    if known is not None and _names(
        sys.modules[target.__module__], target.__qualname__, fn, target
    ):
        return known
    found = _entry_point(fn, target)
    with suppress(TypeError):
        _KNOWN[target] = found
    return found


def _entry_point(fn: Callable[..., Any], target: Any) -> EntryPoint:
    qualname = target.__qualname__
    module = sys.modules.get(target.__module__)
    if module is None or not _names(module, qualname, fn, target):
        raise EntryError(
            f"cannot record {target.__module__}:{qualname}: that name does not lead back to "
            "this function (was it replaced or decorated under another name?)"
        )
    module_name = target.__module__
    if module_name == "__main__":
        module_name = script_module(module, qualname)
    return EntryPoint(
        path=f"{module_name}:{qualname}",
        file=_shown(getattr(module, "__file__", None)),
        source_hash=_source_hash(target),
    )


def _importable_shape(fn: Callable[..., Any]) -> Any:
    """The function behind ``fn``, refused (`EntryError`) when no import could reach it."""
    target = fn.function if isinstance(fn, RecordedFunction) else fn
    what = getattr(target, "__qualname__", None) or repr(target)
    if isinstance(target, functools.partial):
        raise EntryError(
            f"cannot record {what}: a functools.partial cannot be imported back by replay; "
            "record a module-level function that reads its settings from its input"
        )
    if inspect.ismethod(target) and not isinstance(target.__self__, type):
        raise EntryError(
            f"cannot record the bound method {what}: replay cannot rebuild its instance; "
            "record a module-level function (or a classmethod or staticmethod)"
        )
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        raise EntryError(
            f"cannot record {what}: record_function takes a function defined with def at "
            f"module level, not a {type(target).__name__}"
        )
    qualname = target.__qualname__
    if target.__name__ == "<lambda>":
        raise EntryError(
            f"cannot record a lambda ({target.__module__}:{qualname}): replay imports the "
            "function by name; define it with def at module level"
        )
    if "<locals>" in qualname:
        raise EntryError(
            f"cannot record {target.__module__}:{qualname}: it is defined inside another "
            "function, so replay could not import it back; define it at module level"
        )
    return target


def load_entry(path: str) -> Callable[..., Any]:
    """Import the function an entry path names (the working directory is on the import path).

    Raises `EntryError` saying what is wrong: a malformed path, a module that cannot be
    imported (and why), a name the module does not have, something that is not a function.
    """
    module_name, sep, qualname = path.partition(":")
    if not sep or not _dotted(module_name) or not _dotted(qualname):
        raise EntryError(f"entry {path!r} is not module:qualname (e.g. my_agents.triage:run)")
    module = sys.modules.get(module_name)  # imported before: what import_module returns
    if module is None:
        with _cwd_importable():
            try:
                module = importlib.import_module(module_name)
            except ImportError as error:
                raise EntryError(
                    f"cannot import module {module_name!r} of entry {path!r}: {error} (run "
                    "from the directory the run was recorded in, set PYTHONPATH, or pass --entry)"
                ) from None
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise EntryError(f"module {module_name!r} has no {qualname!r} (entry {path!r})")
    if isinstance(found, RecordedFunction):
        found = found.function
    if not callable(found):
        raise EntryError(f"entry {path!r} names a {type(found).__name__}, not a function")
    return found  # type: ignore[no-any-return]


def source_hash(fn: Callable[..., Any]) -> str | None:
    """The hash of a function's source as `EntryPoint.source_hash` records it (None: no source)."""
    target = fn.function if isinstance(fn, RecordedFunction) else fn
    return _source_hash(target)


def prompt_refs(
    prompts: Mapping[str, PromptSpec],
) -> tuple[dict[str, PromptRef], dict[str, str], dict[str, bytes]]:
    """Prompts as ConfigIdentity records them: refs by role, texts by role, and their blobs.

    A prompt given as text alone gets the version ``h:`` + the first 12 hex digits of its hash,
    so an edited text is a new version.
    """
    refs: dict[str, PromptRef] = {}
    texts: dict[str, str] = {}
    blobs: dict[str, bytes] = {}
    for role, given in prompts.items():
        spec: object = given  # checked: callers pass anything
        if isinstance(spec, str):
            version, text = None, spec
        elif (
            isinstance(spec, tuple)
            and len(spec) == 2
            and isinstance(spec[0], str)
            and isinstance(spec[1], str)
        ):
            version, text = spec
        else:
            msg = f"prompts[{role!r}]: give the prompt's text, or (version, text)"
            raise UsageError(msg)
        canonical = canonical_json(text)
        ref = blob_ref(canonical)
        blobs[ref] = canonical
        texts[role] = text
        version = version or "h:" + ref.removeprefix("sha256:")[:12]
        refs[role] = PromptRef(name=role, version=version, hash=ref, text_ref=ref)
    return refs, texts, blobs


def _names(module: ModuleType, qualname: str, given: Any, target: Any) -> bool:
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return False
    if isinstance(found, RecordedFunction):
        found = found.function
    return found is target or found is given or (inspect.ismethod(target) and found == target)


def script_module(module: ModuleType, qualname: str) -> str:
    """The module name of the script run as ``__main__`` (``python my_agent.py``)."""
    spec = getattr(module, "__spec__", None)
    if spec is not None and spec.name and not spec.name.endswith("__main__"):
        return str(spec.name)  # python -m package.module
    file = getattr(module, "__file__", None)
    if not file:
        raise EntryError(
            f"cannot record __main__:{qualname}: it was defined in an interactive session or "
            "notebook, so replay could not import it; put it in a module"
        )
    path = Path(file).resolve()
    bases = [Path.cwd().resolve(), path.parent]
    for base in bases:
        try:
            parts = path.with_suffix("").relative_to(base).parts
        except ValueError:
            continue
        if parts and all(p.isidentifier() for p in parts):
            return ".".join(parts)
    raise EntryError(
        f"cannot record __main__:{qualname}: the script {file} has no importable module name "
        "(rename it to a valid Python identifier)"
    )


def _source_hash(target: Any) -> str | None:
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        return None
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _shown(file: str | None) -> str | None:
    """A module's file as recorded: relative to the working directory when inside it."""
    if not file:
        return None
    path = Path(file).resolve()
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _dotted(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


@contextmanager
def _cwd_importable() -> Iterator[None]:
    """The working directory on ``sys.path`` for the block (a console script lacks it)."""
    cwd = str(Path.cwd())
    # string work only (no filesystem access): this runs on every replay
    present = any(os.path.abspath(p or os.curdir) == cwd for p in sys.path)  # noqa: PTH100
    if present:
        yield
        return
    sys.path.insert(0, cwd)
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.path.remove(cwd)
