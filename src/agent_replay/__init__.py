"""agent-replay: which step made your agent fail, why, and what fix would have saved it.

The submodules users call directly (``agent_replay.otel``, ``ingest``, ``interop``,
``report``) are imported on first use, so ``import agent_replay`` stays light.
"""

import importlib
from typing import TYPE_CHECKING, Any

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
    FailedRunError,
    ImportFormatError,
    PatchTargetError,
    PlanError,
    RecordedStepError,
    ReplayDivergenceError,
    RolloutLimitExceeded,
    SessionChangedError,
    SessionNotFoundError,
    SideEffectBlockedError,
    StoreError,
    SuccessfulRunError,
    UnfaithfulReplayError,
    VerifierError,
)
from .model import Lineage, Outcome, Step, StepKind, Trajectory
from .replay import (
    Divergence,
    HoldPolicy,
    OpenAIChatPolicy,
    PolicyError,
    ReplayAgent,
    ReplayPlan,
    ReplayResult,
    ResamplePolicy,
    ResampleRequest,
    RolloutLimits,
    ScriptedPolicy,
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

if TYPE_CHECKING:
    from . import ingest, interop, otel, report

_SUBMODULES = ("ingest", "interop", "otel", "report")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AblationEngine",
    "AgentContext",
    "AgentReplayError",
    "AsyncAgentContext",
    "AttributionResult",
    "CanonicalEncodingError",
    "ChainIntegrityError",
    "CheckpointStore",
    "Divergence",
    "FailedRunError",
    "HoldPolicy",
    "ImportFormatError",
    "Lineage",
    "OpenAIChatPolicy",
    "Outcome",
    "PatchTargetError",
    "PlanError",
    "PolicyError",
    "RecordedStepError",
    "ReplayAgent",
    "ReplayDivergenceError",
    "ReplayPlan",
    "ReplayResult",
    "ResamplePolicy",
    "ResampleRequest",
    "RolloutCache",
    "RolloutEngine",
    "RolloutLimitExceeded",
    "RolloutLimits",
    "ScriptedPolicy",
    "Session",
    "SessionChangedError",
    "SessionNotFoundError",
    "SideEffectBlockedError",
    "Step",
    "StepKind",
    "StoreError",
    "SuccessfulRunError",
    "Trajectory",
    "TrajectoryDiff",
    "UnfaithfulReplayError",
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
    "ingest",
    "instrument",
    "interop",
    "otel",
    "record",
    "replay",
    "replayable_agent",
    "report",
    "resume",
]
