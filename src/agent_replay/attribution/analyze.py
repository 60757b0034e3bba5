"""``analyze``: attribution, drift and faithfulness of one run, paying for shared rollouts once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..capture.run import Verifier
from ..model import Step, Trajectory
from ..replay.limits import RolloutLimits
from ..rollouts.engine import RolloutCache
from .api import attribute
from .drift import drift
from .faithfulness import faithfulness

__all__ = ["analyze"]


def analyze(
    trajectory: Trajectory,
    agent: Callable[..., Any],
    verifier: Verifier,
    rollouts: int = 50,
    *,
    state_scorer: Callable[[Step], float] | None = None,
    cache: RolloutCache | None = None,
    limits: RolloutLimits | None = None,
    **attribute_options: Any,
) -> dict[str, Any]:
    """Run the three analyses with one :class:`RolloutCache`.

    Prefix-plan rollouts (the same plan and seed) are computed once and reused; Shapley
    coalitions are never cached. Each result is identical to running that analysis alone,
    because a cached rollout is exactly what a fresh one with that plan and seed returns.
    Returns ``{"attribution", "drift", "faithfulness", "cache"}``.
    """
    cache = cache or RolloutCache()
    return {
        "attribution": attribute(
            trajectory, agent, verifier, cache=cache, limits=limits, **attribute_options
        ),
        "drift": drift(
            trajectory,
            agent,
            verifier,
            rollouts,
            state_scorer=state_scorer,
            cache=cache,
            limits=limits,
        ),
        "faithfulness": faithfulness(
            trajectory, agent, verifier, min(rollouts, 30), cache=cache, limits=limits
        ),
        "cache": cache,
    }
