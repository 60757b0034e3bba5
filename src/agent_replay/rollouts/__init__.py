"""Rollouts: executors, the engine, cost accounting."""

from .engine import (
    AblationEngine,
    AsyncExecutor,
    Executor,
    RolloutCache,
    RolloutEngine,
    SerialExecutor,
    ThreadExecutor,
)

__all__ = [
    "AblationEngine",
    "AsyncExecutor",
    "Executor",
    "RolloutCache",
    "RolloutEngine",
    "SerialExecutor",
    "ThreadExecutor",
]
