"""Minimal repair: a replacement action for the culprit step, validated by rollouts.

Candidates come from the caller, from a ``propose_fn(step, trajectory)`` (an LLM asked for a
fix, say), and from the re-drawn actions at that step that led to success in rollouts. Each
candidate is swapped in with ``do()`` (the prefix held, the rest re-drawn) and its failure rate
measured with common random numbers. A repair is *valid* when the upper bound of that failure
rate is below ``threshold``; among valid repairs the one closest to the original action wins
(minimality: the similarity of their canonical JSON, 1 = identical).
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .. import canonical
from ..errors import CanonicalEncodingError
from ..replay.plan import ReplayPlan
from ..rollouts.engine import RolloutEngine
from .result import Repair
from .stats import clopper_pearson

__all__ = ["find_minimal_repair", "minimality"]


def minimality(original: Any, replacement: Any) -> float:
    """Similarity in [0, 1] of two actions (1 = the same)."""
    a, b = _text(original), _text(replacement)
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)


def _key(value: Any) -> bytes:
    try:
        return canonical.encode(value)
    except CanonicalEncodingError:
        return repr(value).encode()


def find_minimal_repair(
    engine: RolloutEngine,
    step: int,
    *,
    candidates: Sequence[Any] | None = None,
    propose_fn: Callable[..., Sequence[Any]] | None = None,
    rollouts: int = 32,
    threshold: float = 0.5,
    confidence: float = 0.95,
    max_candidates: int = 8,
) -> Repair | None:
    """The most minimal valid repair of ``step`` (or the best attempt, ``valid=False``)."""
    trajectory = engine.trajectory
    recorded = trajectory.steps[step]
    pool: list[tuple[Any, str]] = [(c, "given") for c in candidates or ()]
    if propose_fn is not None:
        pool += [(c, "proposed") for c in propose_fn(recorded, trajectory) or ()]
    harvested: Counter = Counter()
    values: dict[bytes, Any] = {}
    for result in engine.run(ReplayPlan.ablate_from(step), range(rollouts), share=False):
        if result.failed or step not in result.positions:
            continue
        action = result.drafts[result.positions.index(step)].action
        key = _key(action)
        values[key] = action
        harvested[key] += 1
    pool += [(values[key], "rollouts") for key, _ in harvested.most_common()]
    original_key = _key(recorded.action)
    seen, unique = set(), []
    for value, source in pool:
        key = _key(value)
        if key in seen or key == original_key:
            continue
        seen.add(key)
        unique.append((value, source))
    unique = unique[:max_candidates]
    if not unique:
        return None
    tried = []
    for value, source in unique:
        plan = ReplayPlan(hold_before=step).force(step, value)
        results = engine.run(plan, range(rollouts))
        failures = sum(r.failed for r in results)
        interval = clopper_pearson(failures, len(results), confidence)
        tried.append(
            Repair(
                step=step,
                label=recorded.label,
                original=recorded.action,
                replacement=value,
                failure_rate=failures / len(results),
                interval=interval,
                valid=interval.high < threshold,
                minimality=round(minimality(recorded.action, value), 4),
                threshold=threshold,
                rollouts=len(results),
                candidates_tried=len(unique),
                source=source,
            )
        )
    valid = [r for r in tried if r.valid]
    if valid:
        return max(valid, key=lambda r: (r.minimality, -r.failure_rate))
    return min(tried, key=lambda r: (r.failure_rate, -r.minimality))
