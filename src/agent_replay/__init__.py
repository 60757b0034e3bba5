"""agent-replay: which step made your agent fail, why, and what fix would have saved it."""

from . import instrument
from ._version import __version__
from .capture.context import AgentContext, AsyncAgentContext
from .capture.recorder import arecord, record
from .errors import (
    AgentReplayError,
    CanonicalEncodingError,
    ChainIntegrityError,
    ImportFormatError,
    PlanError,
    ReplayDivergenceError,
    SessionNotFoundError,
    SideEffectBlockedError,
    StoreError,
    SuccessfulRunError,
    VerifierError,
)
from .model import Lineage, Outcome, Step, StepKind, Trajectory
from .replay import (
    ReplayPlan,
    ReplayResult,
    TrajectoryDiff,
    areplay,
    diff,
    fork,
    replay,
    replayable_agent,
    resume,
)
from .session import Session
from .store import CheckpointStore

__all__ = [
    "AgentContext",
    "AgentReplayError",
    "AsyncAgentContext",
    "CanonicalEncodingError",
    "ChainIntegrityError",
    "CheckpointStore",
    "ImportFormatError",
    "Lineage",
    "Outcome",
    "PlanError",
    "ReplayDivergenceError",
    "ReplayPlan",
    "ReplayResult",
    "Session",
    "SessionNotFoundError",
    "SideEffectBlockedError",
    "Step",
    "StepKind",
    "StoreError",
    "SuccessfulRunError",
    "Trajectory",
    "TrajectoryDiff",
    "VerifierError",
    "__version__",
    "arecord",
    "areplay",
    "diff",
    "fork",
    "instrument",
    "record",
    "replay",
    "replayable_agent",
    "resume",
]
