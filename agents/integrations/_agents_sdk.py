"""Loading the OpenAI Agents SDK's top-level ``agents`` package past a folder that shadows it.

The ``openai-agents`` distribution installs a package named plainly ``agents``. Any folder named
``agents`` on ``sys.path`` before site-packages (our repository root holds one; ``python -m`` and
running a script from that root put it first) would be imported in its place. `load_agents_sdk`
finds the installed distribution's own folder and imports ``agents`` from there, so the SDK's
``from agents.tracing import ...`` resolves to the real package whatever ``sys.path`` says. Must
not import anything else of the SDK, and never replaces an ``agents`` module already imported.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from types import ModuleType

__all__ = ["DISTRIBUTION", "INSTALL_HINT", "load_agents_sdk"]

DISTRIBUTION = "openai-agents"
INSTALL_HINT = (
    "LedgerTracingProcessor needs the OpenAI Agents SDK: pip install 'agentledger[openai-agents]'"
)
"""The one-line message of the `ImportError` raised when the SDK is not installed."""


def load_agents_sdk() -> ModuleType:
    """The SDK's ``agents`` package, imported from the installed distribution's own folder.

    Raises `ImportError` with `INSTALL_HINT` when the distribution is not installed (or the
    import of ``agents`` is blocked), and with a message naming the module when another module
    was already imported under the name ``agents``.
    """
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(INSTALL_HINT, name="agents") from None
    root = Path(str(dist.locate_file("")))
    if "agents" in sys.modules:
        loaded = sys.modules["agents"]
        if loaded is None:  # an import of `agents` is blocked, as for a missing package
            raise ImportError(INSTALL_HINT, name="agents")
        if _is_sdk(loaded, root):
            return loaded
        msg = (
            f"the module named 'agents' already imported is {loaded.__file__ or loaded!r}, not "
            f"the OpenAI Agents SDK: import agentledger.agents.integrations.openai_agents before "
            f"anything imports 'agents', or run from outside a folder that holds an agents/ folder"
        )
        raise ImportError(msg, name="agents")
    spec = PathFinder.find_spec("agents", [str(root)])
    if spec is None or spec.loader is None:  # not a plain folder there: an editable install
        return _imported_plainly(root)
    module = importlib.util.module_from_spec(spec)
    sys.modules["agents"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if sys.modules.get("agents") is module:
            del sys.modules["agents"]
        raise
    return module


def _imported_plainly(root: Path) -> ModuleType:
    """``import agents`` as Python finds it, refused (and forgotten) unless it is the SDK."""
    module = importlib.import_module("agents")
    if _is_sdk(module, root):
        return module
    del sys.modules["agents"]
    msg = f"'agents' imports {module.__file__ or module!r}, not the OpenAI Agents SDK"
    raise ImportError(msg, name="agents")


def _is_sdk(module: ModuleType, root: Path) -> bool:
    """Whether ``module`` is the SDK: in the distribution's folder, or with its entry points."""
    where = getattr(module, "__file__", None)
    if where and Path(where).resolve().parent == (root / "agents").resolve():
        return True
    return all(hasattr(module, name) for name in ("Runner", "set_trace_processors", "Agent"))
