"""The ledger package's public names: each one importable as before, each loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentledger.ledger as package
from agentledger.ledger import Ledger, UsageError
from agentledger.ledger.redaction import RedactionPolicy


def _fresh(script: str) -> str:
    """What ``script`` prints in a new interpreter (nothing of this process's imports)."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_every_name_in_all_is_importable_from_the_package() -> None:
    """``from agentledger.ledger import X`` works for each X in ``__all__``, and ``import *``."""
    for name in package.__all__:
        value = getattr(package, name)
        if isinstance(value, type) or callable(value):
            assert value.__module__.startswith("agentledger.ledger"), name
    assert set(package.__all__) <= set(dir(package))
    star = _fresh(
        "from agentledger.ledger import *\nimport agentledger.ledger as p\n"
        "print(sorted(n for n in p.__all__ if n not in globals()))"
    )
    assert star == "[]"


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A name the package does not export fails as before (no lazy import swallows it)."""
    with pytest.raises(AttributeError, match="no attribute 'Ledgr'"):
        _ = package.Ledgr
    with pytest.raises(ImportError):
        exec("from agentledger.ledger import Ledgr")  # noqa: S102 - the statement under test


def test_the_public_submodules_are_attributes_of_the_package() -> None:
    """``agentledger.ledger.events`` (and redaction, merkle, signed_note) after a bare import."""
    found = _fresh(
        "import agentledger.ledger as p\n"
        "print([p.events.__name__, p.redaction.__name__, p.merkle.__name__, "
        "p.signed_note.__name__])"
    )
    assert found == str(
        [f"agentledger.ledger.{m}" for m in ("events", "redaction", "merkle", "signed_note")]
    )


def test_importing_a_name_loads_only_what_it_needs() -> None:
    """The package alone loads no submodule but its errors; `Ledger` no event catalogue."""
    script = (
        "import sys\nimport agentledger.ledger\n"
        "print(sorted(m for m in sys.modules if m.startswith('agentledger.ledger.')))\n"
        "from agentledger.ledger import Ledger, RunQuery\n"
        "Ledger.open('memory://').runs(RunQuery(limit=1))\n"
        "heavy = ('pydantic', 'agentledger.ledger.events', 'agentledger.ledger.redaction')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    assert _fresh(script).splitlines() == ["['agentledger.ledger.errors']", "[]"]


def test_the_default_redaction_policy_is_made_on_first_use() -> None:
    """``ledger.redaction`` is ``RedactionPolicy()`` by default, built only when asked for."""
    script = (
        "import sys\nfrom agentledger.ledger import Ledger\n"
        "ledger = Ledger.open('memory://')\n"
        "print('agentledger.ledger.redaction' in sys.modules)\n"
        "print(repr(ledger.redaction))\n"
    )
    assert _fresh(script).splitlines() == ["False", repr(RedactionPolicy())]
    assert Ledger.open("memory://").redaction == RedactionPolicy()
    assert Ledger.open("memory://", redaction=None).redaction is None
    policy = RedactionPolicy(actions={"email": "keep"})
    ledger = Ledger.open("memory://", redaction=policy)
    assert ledger.redaction is policy
    ledger.redaction = None
    assert ledger.redaction is None


def test_a_redaction_that_is_not_a_policy_is_refused_at_open() -> None:
    """A wrong ``redaction=`` is refused when the ledger opens, not when a run starts."""
    with pytest.raises(UsageError, match="redaction= takes a RedactionPolicy or None, not str"):
        Ledger.open("memory://", redaction="keep")  # type: ignore[arg-type]
    ledger = Ledger.open("memory://")
    with pytest.raises(UsageError, match="not dict"):
        ledger.redaction = {"email": "keep"}  # type: ignore[assignment]
