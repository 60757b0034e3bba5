"""Where trajectories live: a SQLite content-addressed store."""

from .sqlite import CheckpointStore, PruneResult, SessionSummary, VerifyResult, open_store

__all__ = ["CheckpointStore", "PruneResult", "SessionSummary", "VerifyResult", "open_store"]
