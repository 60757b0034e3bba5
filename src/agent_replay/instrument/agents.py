"""Recording and replaying agents that take no ``ctx``: their steps come from the ambient run."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace

from ..capture.recorder import arecord, record
from ..capture.run import Verifier
from ..model import Trajectory
from ..replay import ReplayPlan, ReplayResult, areplay, replay
from ..store import CheckpointStore

__all__ = ["arecord_agent", "areplay_agent", "record_agent", "replay_agent"]


def record_agent(
    agent: Callable[..., Any],
    task: Any = None,
    *,
    session_id: str | None = None,
    seed: int = 0,
    verifier: Verifier | None = None,
    store: CheckpointStore | str | os.PathLike[str] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    metadata: Mapping[str, Any] | None = None,
    capture_content: bool | None = None,
) -> Trajectory:
    """Record one run of ``agent(**task)`` / ``agent(task)`` (no ``ctx`` argument).

    Its decorated functions and patched SDK calls become the steps. The trajectory is saved to
    ``store`` (a :class:`CheckpointStore` or a path) when given. Errors are those of
    :func:`agent_replay.record`.
    """
    trajectory = record(
        agent,
        task,
        session_id=session_id,
        seed=seed,
        verifier=verifier,
        tracer_provider=tracer_provider,
        metadata=metadata,
        capture_content=capture_content,
        pass_context=False,
    )
    _save(trajectory, store)
    return trajectory


async def arecord_agent(
    agent: Callable[..., Any],
    task: Any = None,
    *,
    session_id: str | None = None,
    seed: int = 0,
    verifier: Verifier | None = None,
    store: CheckpointStore | str | os.PathLike[str] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    metadata: Mapping[str, Any] | None = None,
    capture_content: bool | None = None,
) -> Trajectory:
    """:func:`record_agent` for ``async def`` agents, from inside an event loop."""
    trajectory = await arecord(
        agent,
        task,
        session_id=session_id,
        seed=seed,
        verifier=verifier,
        tracer_provider=tracer_provider,
        metadata=metadata,
        capture_content=capture_content,
        pass_context=False,
    )
    _save(trajectory, store)
    return trajectory


def replay_agent(
    agent: Callable[..., Any],
    trajectory: Trajectory,
    plan: ReplayPlan | None = None,
    **options: Any,
) -> ReplayResult:
    """``replay(agent, trajectory, plan, pass_context=False, **options)``."""
    return replay(agent, trajectory, plan, pass_context=False, **options)


async def areplay_agent(
    agent: Callable[..., Any],
    trajectory: Trajectory,
    plan: ReplayPlan | None = None,
    **options: Any,
) -> ReplayResult:
    """``areplay(agent, trajectory, plan, pass_context=False, **options)``."""
    return await areplay(agent, trajectory, plan, pass_context=False, **options)


def _save(trajectory: Trajectory, store: CheckpointStore | str | os.PathLike[str] | None) -> None:
    if store is None:
        return
    if isinstance(store, CheckpointStore):
        store.save(trajectory, replace=False)
        return
    with CheckpointStore(store) as opened:
        opened.save(trajectory, replace=False)
