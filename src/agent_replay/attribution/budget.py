"""One budget of live step executions for the whole analysis.

``budget`` caps what an attribution spends on live steps (each an LLM or tool call in real
life), extras included. When Shapley values or a repair are asked for, the culprit search
leaves them a share (:data:`SHAPLEY_SHARE`, :data:`REPAIR_SHARE`); each extra then runs on
what is left, scaled down to fit its estimated cost (fewer rollouts or permutations), or is
left out with a warning when not even a small version fits. Estimates assume the live steps
a plan re-draws: a rollout that leaves the recording can run a few more, so the cap is kept
to within a rollout batch, not to the step.
"""

from __future__ import annotations

import math

from .shapley import EXACT_MAX_PLAYERS

__all__ = [
    "REPAIR_SHARE",
    "SHAPLEY_SHARE",
    "fit_repair",
    "fit_shapley",
    "search_budget",
    "worth_reserving",
]

#: the share of the budget the search leaves for Shapley values (step and agent together)
SHAPLEY_SHARE = 0.4
#: the share it leaves for the repair search
REPAIR_SHARE = 0.25
#: the smallest versions worth running: fewer rollouts per coalition or permutations than
#: these give intervals too wide to say anything, fewer validation rollouts cannot validate
MIN_SHAPLEY_ROLLOUTS = 4
MIN_PERMUTATIONS = 8
MIN_REPAIR_ROLLOUTS = 16


def search_budget(budget: float | None, *, shapley: bool, repair: bool) -> float | None:
    """What the culprit search may spend of ``budget``."""
    if budget is None:
        return None
    return budget * (1 - (SHAPLEY_SHARE if shapley else 0.0) - (REPAIR_SHARE if repair else 0.0))


def worth_reserving(
    budget: float | None,
    *,
    shapley_players: tuple[int, ...],
    repair: bool,
    live: float,
    rollouts: int,
    permutations: int,
    repair_rollouts: int,
    candidates: int,
) -> tuple[bool, bool]:
    """Whether to keep a share of ``budget`` for Shapley values (of each of
    ``shapley_players``' player counts, sharing their share) and for the repair: only when
    even a small version could fit in that share with rollouts re-drawing about ``live``
    steps. An extra that cannot fit would be left out after the search; its share then goes
    to the search instead of going unspent."""
    if budget is None:
        return bool(shapley_players), repair
    each = budget * SHAPLEY_SHARE / max(1, len(shapley_players))
    shapley = bool(shapley_players) and all(
        fit_shapley(each, players, live, rollouts=rollouts, permutations=permutations) is not None
        for players in shapley_players
    )
    repair = repair and (
        fit_repair(budget * REPAIR_SHARE, live, rollouts=repair_rollouts, candidates=candidates)
        is not None
    )
    return shapley, repair


def fit_shapley(
    left: float | None, players: int, live: float, *, rollouts: int, permutations: int
) -> tuple[int, int] | None:
    """``(rollouts, permutations)`` for Shapley values of ``players`` that fit in ``left``
    live steps, each rollout re-drawing about ``live`` steps; ``None`` when none fits."""
    if left is None or players == 0:
        return rollouts, permutations
    live = max(live, 1.0)
    if players <= EXACT_MAX_PLAYERS:  # every coalition, ``rollouts`` times each
        fits = math.floor(left / (2**players * live))
        return (min(rollouts, fits), permutations) if fits >= MIN_SHAPLEY_ROLLOUTS else None
    # antithetic pairs of orders, one rollout per coalition along each (players + 1 of them)
    fits = 2 * math.floor(left / (2 * (players + 1) * live))
    return (rollouts, min(permutations, fits)) if fits >= MIN_PERMUTATIONS else None


def fit_repair(left: float | None, live: float, *, rollouts: int, candidates: int) -> int | None:
    """Rollouts per candidate for a repair search that fits in ``left`` live steps: a harvest,
    the recorded action and up to ``candidates`` candidates, each ``rollouts`` rollouts
    re-drawing about ``live`` steps; ``None`` when too few fit."""
    if left is None:
        return rollouts
    fits = math.floor(left / ((2 + candidates) * max(live, 1.0)))
    return min(rollouts, fits) if fits >= MIN_REPAIR_ROLLOUTS else None
