"""Reading back what the span processor stored, as the real-package tests do."""

from __future__ import annotations

from pathlib import Path

from agent_replay import CheckpointStore, Trajectory
from agent_replay.capture.processor import TrajectorySpanProcessor


def stored_trajectory(processor: TrajectorySpanProcessor, db_path: Path) -> Trajectory:
    """The one trajectory ``processor`` stored in ``db_path``, after a flush that hit no error
    and with its hash chain verified."""
    assert processor.force_flush()
    assert processor.stats()["errors"] == 0
    with CheckpointStore(db_path) as store:
        (session_id,) = store.session_ids()
        (verdict,) = store.verify(session_id)
        assert verdict.ok
        return store.load(session_id)
