"""agent-replay: which step made your agent fail, why, and what fix would have saved it."""

from . import instrument
from ._version import __version__
from .attribution import (
    AttributionResult,
    aggregate_runs,
    analyze,
    attribute,
    drift,
    export_contrastive_pairs,
    faithfulness,
    find_minimal_repair,
)
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
    ReplayAgent,
    ReplayPlan,
    ReplayResult,
    TrajectoryDiff,
    afork,
    areplay,
    aresume,
    diff,
    fork,
    replay,
    replayable_agent,
    resume,
)
from .rollouts import AblationEngine, RolloutCache, RolloutEngine
from .session import Session
from .store import CheckpointStore

__all__ = [
    "AblationEngine",
    "AgentContext",
    "AgentReplayError",
    "AsyncAgentContext",
    "AttributionResult",
    "CanonicalEncodingError",
    "ChainIntegrityError",
    "CheckpointStore",
    "ImportFormatError",
    "Lineage",
    "Outcome",
    "PlanError",
    "ReplayAgent",
    "ReplayDivergenceError",
    "ReplayPlan",
    "ReplayResult",
    "RolloutCache",
    "RolloutEngine",
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
    "afork",
    "aggregate_runs",
    "analyze",
    "arecord",
    "areplay",
    "aresume",
    "attribute",
    "diff",
    "drift",
    "export_contrastive_pairs",
    "faithfulness",
    "find_minimal_repair",
    "fork",
    "instrument",
    "record",
    "replay",
    "replayable_agent",
    "resume",
]
