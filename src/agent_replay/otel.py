"""OpenTelemetry integration entry points: ``agent_replay.otel.attach(store)``."""

from .capture.processor import TrajectorySpanExporter, TrajectorySpanProcessor, attach

__all__ = ["TrajectorySpanExporter", "TrajectorySpanProcessor", "attach"]
