"""Where trajectories live: a SQLite content-addressed store."""

from .sqlite import CheckpointStore, SessionSummary, VerifyResult, open_store

__all__ = ["CheckpointStore", "SessionSummary", "VerifyResult", "open_store"]
