"""Replay: plans, the replay driver, the multiverse operations and the replay agent."""

from .agent import ReplayAgent, replayable_agent
from .limits import RolloutLimits
from .multiverse import TrajectoryDiff, afork, aresume, diff, fork, resume
from .plan import ReplayPlan
from .policies import (
    HoldPolicy,
    OpenAIChatPolicy,
    PolicyError,
    ResamplePolicy,
    ResampleRequest,
    ScriptedPolicy,
)
from .replayer import Divergence, ReplayResult, areplay, replay

__all__ = [
    "Divergence",
    "HoldPolicy",
    "OpenAIChatPolicy",
    "PolicyError",
    "ReplayAgent",
    "ReplayPlan",
    "ReplayResult",
    "ResamplePolicy",
    "ResampleRequest",
    "RolloutLimits",
    "ScriptedPolicy",
    "TrajectoryDiff",
    "afork",
    "areplay",
    "aresume",
    "diff",
    "fork",
    "replay",
    "replayable_agent",
    "resume",
]
