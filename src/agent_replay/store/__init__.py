"""Where trajectories live: a SQLite content-addressed store."""

from .sqlite import CheckpointStore, SessionSummary, VerifyResult

__all__ = ["CheckpointStore", "SessionSummary", "VerifyResult"]
