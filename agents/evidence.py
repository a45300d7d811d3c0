"""Evidence discipline: which ids tools returned, which ids an answer cites, and the check.

Owns the evidence conventions: a tool result carries evidence as ``evidence_id`` values and
``evidence_ids`` lists anywhere in its data; an answer cites an id by writing it in square
brackets (``[poi:clocktower]``). ``answer_with_evidence`` enforces the MumbAI rule that an answer
may cite only ids tools returned in this run: on a violation it records GuardrailTripped
(``evidence``, action ``reask``) and asks once more; if the second answer still cites unsupported
ids, it records a second trip (action ``remove``) and strips them. Pure helpers here must not
record; ``answer_with_evidence`` records only through the ``RunContext``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from agentledger.ledger.redaction import count_placeholders

if TYPE_CHECKING:
    from agentledger.agents._context import RunContext

__all__ = [
    "answer_with_evidence",
    "cited_ids",
    "evidence_in",
    "strip_citations",
]

_CITATION = re.compile(r"\[(?P<id>[A-Za-z][\w.-]*:[^\]\s]+)\]")


def evidence_in(data: Any) -> list[str]:
    """Evidence ids in a tool result, in first-seen order, without duplicates.

    Object keys are visited in sorted order, so the result does not depend on how the data's
    keys were ordered (a result served from the ledger comes back with sorted keys).
    """
    found: dict[str, None] = {}
    stack: list[Any] = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            value = item.get("evidence_id")
            if isinstance(value, str):
                found.setdefault(value)
            values = item.get("evidence_ids")
            if isinstance(values, list):
                for entry in values:
                    if isinstance(entry, str):
                        found.setdefault(entry)
            nested = [item[k] for k in sorted(item) if isinstance(item[k], dict | list)]
            stack.extend(reversed(nested))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return list(found)


def cited_ids(text: str) -> list[str]:
    """The ids an answer cites in square brackets, in order, without duplicates.

    A redaction's placeholder (``[redacted:email]``, ``[email:<12 hex>]``) is not a citation.
    """
    found = (m.group("id") for m in _CITATION.finditer(text))
    return list(dict.fromkeys(i for i in found if not count_placeholders(f"[{i}]")))


def strip_citations(text: str, ids: Iterable[str]) -> str:
    """Remove the bracketed citations of ``ids`` from ``text`` (and the space before them)."""
    drop = set(ids)

    def replace(match: re.Match[str]) -> str:
        return "" if match.group("id") in drop else match.group(0)

    stripped = _CITATION.sub(replace, text)
    return re.sub(r"[ \t]+([.,;:!?)])", r"\1", re.sub(r"[ \t]{2,}", " ", stripped)).strip()


def answer_with_evidence(
    ctx: RunContext,
    first: str,
    reask: Callable[[str], str | None],
    *,
    step_id: str | None,
) -> tuple[str, tuple[str, ...]]:
    """Check ``first`` against the run's evidence; re-ask once, then strip what is unsupported.

    ``reask`` receives the correction message and returns the model's new answer (or ``None``
    when that call failed, in which case the first answer is kept, then stripped). Returns the
    answer and the ids it cites, all of them returned by tools in this run.
    """
    answer = first
    for attempt in ("reask", "remove"):
        unsupported = [i for i in cited_ids(answer) if i not in ctx.evidence]
        if not unsupported:
            break
        allowed = list(ctx.evidence)
        ctx.trip(
            "evidence",
            action=attempt,
            message=f"the answer cites ids no tool returned in this run: {', '.join(unsupported)}",
            limit=allowed,
            observed=unsupported,
            step_id=step_id,
        )
        if attempt == "remove":
            answer = strip_citations(answer, unsupported)
            break
        correction = (
            f"Your answer cites evidence ids that no tool returned: {', '.join(unsupported)}. "
            f"Rewrite it citing only these ids: {', '.join(allowed) or '(none)'}."
        )
        again = reask(correction)
        if again is not None:
            answer = again
    return answer, tuple(i for i in cited_ids(answer) if i in ctx.evidence)
