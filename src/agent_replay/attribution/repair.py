"""Minimal repair: a replacement action for the culprit step, validated by rollouts.

Candidates come from the caller, from a ``propose_fn(step, trajectory)`` (an LLM asked for a
fix, say), and from the re-drawn actions at that step that led to success in rollouts. Each
candidate is swapped in with ``do()`` (the prefix held, the rest re-drawn) and its failure rate
measured on rollout seeds the harvest did not use. A repair is *valid* when the upper bound of
that failure rate, at a confidence corrected for the number of candidates tried (Bonferroni:
the best of several is kept), is below ``threshold``; among valid repairs the one closest to
the original action wins (minimality: the similarity of their canonical JSON, 1 = identical).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .. import canonical
from ..errors import CanonicalEncodingError
from ..replay.plan import ReplayPlan
from ..rollouts.engine import RolloutEngine
from .result import Repair
from .stats import binomial_sf, bonferroni, clopper_pearson

__all__ = ["MAX_CANDIDATES", "export_contrastive_pairs", "find_minimal_repair", "minimality"]

#: the most candidate actions a repair search validates
MAX_CANDIDATES = 8


def minimality(original: Any, replacement: Any) -> float:
    """Similarity in [0, 1] of two actions (1 = the same)."""
    a, b = _text(original), _text(replacement)
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _text(value: Any) -> str:
    """``value`` as text to compare: itself for a string, else its canonical encoding (keys
    of any type, in a stable order)."""
    return value if isinstance(value, str) else value_key(value).decode("utf-8", "replace")


def value_key(value: Any) -> bytes:
    """A key equal for equal values: the canonical encoding (``repr`` when it has none)."""
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
    max_candidates: int = MAX_CANDIDATES,
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
        key = value_key(action)
        values[key] = action
        harvested[key] += 1
    pool += [(values[key], "rollouts") for key, _ in harvested.most_common()]
    original_key = value_key(recorded.action)
    seen, unique = set(), []
    for value, source in pool:
        key = value_key(value)
        if key in seen or key == original_key:
            continue
        seen.add(key)
        unique.append((value, source))
    unique = unique[:max_candidates]
    if not unique:
        return None
    tried = []
    # validated on seeds the harvest did not use (a harvested action's own successes would
    # count again), at a level corrected for keeping the best of the candidates tried, and
    # against the recorded action on the same seeds: a repair must fail rarely *and* fail
    # less than the action it replaces (where failure did not depend on the step at all, a
    # low absolute rate alone "validated" a swap of one harmless output for another)
    fresh = range(rollouts, 2 * rollouts)
    level = bonferroni(confidence, len(unique))
    recorded_failed = [r.failed for r in engine.run(ReplayPlan.ablate_from(step + 1), fresh)]
    for value, source in unique:
        plan = ReplayPlan(hold_before=step).force(step, value)
        results = engine.run(plan, fresh)
        failures = sum(r.failed for r in results)
        interval = clopper_pearson(failures, len(results), level)
        better = sum(b and not r.failed for b, r in zip(recorded_failed, results, strict=True))
        worse = sum(r.failed and not b for b, r in zip(recorded_failed, results, strict=True))
        # one-sided sign test on the pairs that differ
        improves = binomial_sf(better, better + worse, 0.5) <= 1.0 - level
        tried.append(
            Repair(
                step=step,
                label=recorded.label,
                original=recorded.action,
                replacement=value,
                failure_rate=failures / len(results),
                interval=interval,
                valid=interval.high < threshold and improves,
                minimality=round(minimality(recorded.action, value), 4),
                threshold=threshold,
                rollouts=len(results),
                candidates_tried=len(unique),
                source=source,
            )
        )
    valid = [r for r in tried if r.valid]
    if valid:
        chosen = max(valid, key=lambda r: (r.minimality, -r.failure_rate))
    else:
        chosen = min(tried, key=lambda r: (r.failure_rate, -r.minimality))
    # the rate reported is measured again on seeds no choice was made on: the one the choice
    # was made on is the best of several on the same seeds, and so biased low (0.13 where the
    # truth was 0.2)
    again = engine.run(
        ReplayPlan(hold_before=step).force(step, chosen.replacement),
        range(2 * rollouts, 3 * rollouts),
    )
    failures = sum(r.failed for r in again)
    return dataclasses.replace(
        chosen,
        failure_rate=failures / len(again),
        interval=clopper_pearson(failures, len(again), confidence),
    )


def export_contrastive_pairs(
    results: Sequence[Any],
    path: str | os.PathLike[str],
    trajectories: Sequence[Any] | None = None,
) -> int:
    """Write one JSON line per validated repair: the failing action (``rejected``) and the
    fix (``chosen``) with the step's context, for preference training. Returns the count.

    ``trajectories`` (matched by session id) supply the culprit step's inputs as context.
    """
    by_session = {t.session_id: t for t in trajectories or ()}
    written = 0
    with open(path, "w", encoding="utf-8") as handle:
        for result in results:
            repair = getattr(result, "repair", None)
            if repair is None or not repair.valid:
                continue
            trajectory = by_session.get(result.session_id)
            context = trajectory.steps[repair.step].inputs if trajectory is not None else None
            row = {
                "session_id": result.session_id,
                "step": repair.step,
                "label": repair.label,
                "context": context,
                "rejected": repair.original,
                "chosen": repair.replacement,
                "failure_rate_before": result.fidelity.failure_rate,
                "failure_rate_after": repair.failure_rate,
            }
            handle.write(json.dumps(row, ensure_ascii=False, default=repr) + "\n")
            written += 1
    return written
