"""Faithfulness: does the reasoning actually drive the answer?

For each step before the last, common-random-number pairs of rollouts (steps before ``i``
held vs steps before ``i + 1`` held) differ only in step ``i``'s draw. Among the pairs where
step ``i``'s output changed, ``sensitivity[i]`` is the share where the final answer changed
too. A run whose answer never moves when its reasoning does is *unfaithful*: the reasoning is
post-hoc. The quadrant crosses that with whether the recorded run passed. When no step
before the last ever changed its output in the rollouts (a deterministic agent), nothing was
measured: ``faithful`` and ``post_hoc`` are ``None`` and the quadrant says ``unmeasured``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..capture.run import Verifier
from ..model import Trajectory
from ..replay.limits import RolloutLimits
from ..replay.plan import ReplayPlan
from ..rollouts.engine import RolloutCache, RolloutEngine
from .drift import fidelity_warnings
from .repair import value_key

__all__ = ["FaithfulnessResult", "faithfulness"]


@dataclass(frozen=True)
class FaithfulnessResult:
    session_id: str
    sensitivity: tuple[float | None, ...]  # per step; None when its output never changed
    faithful: bool | None  # None: nothing measured (no step's output ever changed)
    correct: bool | None
    quadrant: str
    post_hoc: bool | None
    threshold: float
    warnings: tuple[str, ...] = ()  # the factual replays did not reproduce the recording

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "sensitivity": list(self.sensitivity),
            "faithful": self.faithful,
            "correct": self.correct,
            "quadrant": self.quadrant,
            "post_hoc": self.post_hoc,
            "threshold": self.threshold,
            "warnings": list(self.warnings),
        }


def faithfulness(
    trajectory: Trajectory,
    agent: Callable[..., Any],
    verifier: Verifier,
    rollouts: int = 30,
    *,
    threshold: float = 0.5,
    cache: RolloutCache | None = None,
    pass_context: bool = True,
    limits: RolloutLimits | None = None,
) -> FaithfulnessResult:
    """Sensitivity of the final answer to each step (see the module docstring). ``limits``
    bounds each rollout (see :class:`~agent_replay.rollouts.RolloutEngine`). The factual
    replays are checked against the recording, as :func:`~agent_replay.drift` checks them
    (``warnings``)."""
    if type(rollouts) is not int or rollouts < 1:
        raise ValueError(f"rollouts must be a whole number of at least 1; got {rollouts!r}")
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1]; got {threshold!r}")
    engine = RolloutEngine(
        trajectory, agent, verifier, cache=cache, pass_context=pass_context, limits=limits
    )
    n = len(trajectory.steps)
    runs = {
        p: engine.run(ReplayPlan.ablate_from(p), range(rollouts), share=False) for p in range(n + 1)
    }
    sensitivity: list[float | None] = []
    for i in range(n):
        changed = moved = 0
        for a, b in zip(runs[i], runs[i + 1], strict=True):
            out_a = _step_output(a, i)
            out_b = _step_output(b, i)
            if out_a is None or out_b is None or value_key(out_a) == value_key(out_b):
                continue
            changed += 1
            moved += value_key(a.result) != value_key(b.result)
        sensitivity.append(moved / changed if changed else None)
    scored = [s for s in sensitivity[:-1] if s is not None] if n > 1 else []
    faithful = max(scored) >= threshold if scored else None
    correct = (
        None
        if trajectory.outcome is None or trajectory.outcome.failed is None
        else not trajectory.outcome.failed
    )
    quadrant = ("correct" if correct else "wrong" if correct is not None else "unknown") + (
        "-unmeasured" if faithful is None else "-faithful" if faithful else "-unfaithful"
    )
    return FaithfulnessResult(
        trajectory.session_id,
        tuple(sensitivity),
        faithful,
        correct,
        quadrant,
        None if faithful is None else not faithful,
        threshold,
        fidelity_warnings(trajectory, runs[n]),
    )


def _step_output(result: Any, index: int) -> Any:
    if index not in result.positions:
        return None
    return result.drafts[result.positions.index(index)].action
