"""How far a rollout may run before it is stopped (:class:`RolloutLimits`).

An intervention can send an agent into a loop the recorded run never entered (a removed step
the agent keeps asking for again, a forced action it keeps retrying). Without a limit such a
rollout never ends and takes the whole attribution with it. A rollout that reaches its limit
is stopped: :class:`~agent_replay.errors.RolloutLimitExceeded` is raised inside the agent at
its next live step, and the rollout's outcome is a failure (a run that does not finish has
failed), with ``ReplayResult.stopped`` saying which limit it reached.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RolloutLimitExceeded
from ..model import Trajectory

__all__ = ["RolloutLimits"]

STEPS_PER_RECORDED_STEP = 10
MIN_STEPS = 100


@dataclass(frozen=True)
class RolloutLimits:
    """Limits of one rollout; ``None`` is no limit.

    ``steps``: a rollout takes at most ``steps`` steps (served steps included); one that
    would run a further step live is stopped there. ``seconds``: wall-clock time from the
    rollout's start (waiting included: rollouts run concurrently that share a rate-limited
    client wait for each other); a plain ``def`` agent is stopped at its next live step
    after the deadline (code that never calls the context, or one call that hangs, cannot be
    interrupted in Python: give LLM and HTTP clients their own timeouts); an ``async def``
    agent is also cancelled where it awaits. An agent that catches ``BaseException`` and
    tries again cannot be stopped at all.
    """

    steps: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        steps, seconds = self.steps, self.seconds
        if steps is not None and (type(steps) is bool or not isinstance(steps, int) or steps < 1):
            raise ValueError(f"RolloutLimits.steps must be a positive integer, not {steps!r}")
        if seconds is not None and (
            type(seconds) is bool or not isinstance(seconds, (int, float)) or not seconds > 0
        ):
            raise ValueError(f"RolloutLimits.seconds must be a positive number, not {seconds!r}")

    @classmethod
    def default(cls, trajectory: Trajectory) -> RolloutLimits:
        """What attribution uses unless told otherwise: ten times the recorded run's steps
        (at least 100), no time limit."""
        return cls(steps=max(MIN_STEPS, STEPS_PER_RECORDED_STEP * len(trajectory.steps)))

    def exceeded(self, reason: str) -> RolloutLimitExceeded:
        """The error that stops a rollout which reached limit ``reason`` (``"steps"`` or
        ``"seconds"``)."""
        if reason == "steps":
            what = f"it reached {self.steps} steps (RolloutLimits.steps)"
        else:
            what = f"it ran longer than {self.seconds:g} s (RolloutLimits.seconds)"
        return RolloutLimitExceeded(reason, f"rollout stopped: {what}")

    def describe(self) -> str:
        parts = []
        if self.steps is not None:
            parts.append(f"{self.steps} steps")
        if self.seconds is not None:
            parts.append(f"{self.seconds:g} s")
        return ", ".join(parts) or "none"
