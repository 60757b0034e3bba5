"""``Session``: record native runs straight into a store."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace

from .capture.recorder import arecord, record
from .capture.run import Verifier
from .errors import StoreError
from .model import Trajectory
from .store import CheckpointStore, SessionSummary, open_store

__all__ = ["Session"]

_log = logging.getLogger("agent_replay")


class Session:
    """A store plus the recording API: ``with Session("runs.sqlite") as s: s.record(...)``."""

    def __init__(
        self,
        db_path: str | os.PathLike[str] | CheckpointStore,
        *,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.store, self._owns_store = open_store(db_path)
        self.tracer_provider = tracer_provider

    def record(
        self,
        agent_fn: Callable[..., Any],
        task: Any = None,
        *,
        session_id: str | None = None,
        seed: int = 0,
        verifier: Verifier | None = None,
        metadata: Mapping[str, Any] | None = None,
        capture_content: bool | None = None,
        pass_context: bool = True,
    ) -> Trajectory:
        """Record one run (see :func:`agent_replay.record`) and store it.

        The trajectory is written in one transaction after the run ends, so a crash never
        leaves half a session behind. An existing session id with other content is refused.
        When the store cannot take the run (a read-only file, a full disk, a lock held past
        the busy timeout) the :class:`StoreError` raised carries the recorded run as its
        ``trajectory``: save it again later, or elsewhere; the run is not lost.
        """
        trajectory = record(
            agent_fn,
            task,
            session_id=session_id,
            seed=seed,
            verifier=verifier,
            tracer_provider=self.tracer_provider,
            metadata=metadata,
            capture_content=capture_content,
            pass_context=pass_context,
        )
        self._save(trajectory)
        return trajectory

    async def arecord(
        self,
        agent_fn: Callable[..., Any],
        task: Any = None,
        *,
        session_id: str | None = None,
        seed: int = 0,
        verifier: Verifier | None = None,
        metadata: Mapping[str, Any] | None = None,
        capture_content: bool | None = None,
        pass_context: bool = True,
    ) -> Trajectory:
        """:meth:`record` for ``async def`` agents inside an event loop (the store is written
        from a worker thread, so a busy store does not stall the loop)."""
        trajectory = await arecord(
            agent_fn,
            task,
            session_id=session_id,
            seed=seed,
            verifier=verifier,
            tracer_provider=self.tracer_provider,
            metadata=metadata,
            capture_content=capture_content,
            pass_context=pass_context,
        )
        # off the event loop: a store busy with another writer waits up to its busy timeout;
        # cancelled meanwhile, it still waits for the save to end (the run is stored, and the
        # store is not closed under a save still running)
        save = asyncio.ensure_future(asyncio.to_thread(self._save, trajectory))
        try:
            await asyncio.shield(save)
        except asyncio.CancelledError:
            await asyncio.wait((save,))
            if not save.cancelled() and save.exception() is not None:
                _log.warning(
                    "agent-replay: run %s was recorded but not stored: %s",
                    trajectory.session_id,
                    save.exception(),
                )
            raise
        return trajectory

    def _save(self, trajectory: Trajectory) -> None:
        try:
            self.store.save(trajectory, replace=False)
        except StoreError as exc:
            exc.trajectory = trajectory  # type: ignore[attr-defined]
            note = getattr(exc, "add_note", None)  # (Python 3.11+)
            if note is not None:
                note(
                    f"the run {trajectory.session_id!r} was recorded but not stored; it is on "
                    "this error's .trajectory (save it again later, or elsewhere)"
                )
            raise

    def load(self, session_id: str) -> Trajectory:
        return self.store.load(session_id)

    def sessions(self) -> list[SessionSummary]:
        return self.store.list_sessions()

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
