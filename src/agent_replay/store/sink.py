"""From a stream of finished spans to stored trajectories.

:class:`SpanSink` buffers normalised spans per trace and, when a trace is complete (its local
root span ended), idle for a while, or a flush is forced, assembles its trajectories and writes
them in one transaction. Spans that arrive for a trace already written (late children,
distributed traces) re-assemble that trace from every span seen; a conversation spread over
several traces is merged with what the store already holds. Used by the span processor's
worker thread and by the OTLP receiver; not thread-safe itself.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable

from ..errors import AgentReplayError
from ..mapping.assemble import assemble, merge
from ..mapping.spans import NormalizedSpan
from ..model import Trajectory
from .sqlite import CheckpointStore

__all__ = ["SpanSink"]

_log = logging.getLogger(__name__)


class SpanSink:
    """Buffers spans by trace and writes assembled trajectories to ``store``."""

    def __init__(
        self,
        store: CheckpointStore,
        *,
        source: str = "otel",
        idle_seconds: float = 30.0,
        remember_traces: int = 4096,
    ) -> None:
        self.store = store
        self.source = source
        self.idle_seconds = idle_seconds
        self.remember_traces = remember_traces
        self._pending: dict[str, dict[str, NormalizedSpan]] = {}
        self._complete: set[str] = set()
        self._touched: dict[str, float] = {}
        self._done: OrderedDict[str, dict[str, NormalizedSpan]] = OrderedDict()
        self.sessions_written = 0
        self.spans_seen = 0

    @property
    def pending_spans(self) -> int:
        return sum(len(v) for v in self._pending.values())

    def add(self, spans: Iterable[NormalizedSpan]) -> None:
        """Buffer finished spans (any traces, any order)."""
        now = time.monotonic()
        for span in spans:
            self.spans_seen += 1
            trace = self._pending.get(span.trace_id)
            if trace is None:
                trace = self._pending[span.trace_id] = dict(self._done.pop(span.trace_id, {}))
                if trace:  # a late span of a trace already written: its root has ended
                    self._complete.add(span.trace_id)
            trace[span.span_id] = span
            self._touched[span.trace_id] = now
            if span.parent_span_id is None or span.parent_is_remote:
                self._complete.add(span.trace_id)

    def flush(self, *, force: bool = False) -> int:
        """Write every ready trace (every trace when ``force``); returns sessions written."""
        now = time.monotonic()
        ready = [
            trace_id
            for trace_id in self._pending
            if force
            or trace_id in self._complete
            or now - self._touched.get(trace_id, now) >= self.idle_seconds
        ]
        if not ready:
            return 0
        spans = []
        for trace_id in ready:
            trace = self._pending.pop(trace_id)
            self._complete.discard(trace_id)
            self._touched.pop(trace_id, None)
            spans.extend(trace.values())
            self._done[trace_id] = trace
            while len(self._done) > self.remember_traces:
                self._done.popitem(last=False)
        trajectories = [self._merged(t) for t in assemble(spans, source=self.source)]
        if trajectories:
            self.store.save_many(trajectories)
        self.sessions_written += len(trajectories)
        return len(trajectories)

    def _merged(self, trajectory: Trajectory) -> Trajectory:
        if trajectory.session_id not in self.store:
            return trajectory
        try:
            old = self.store.load(trajectory.session_id)
        except AgentReplayError as exc:
            _log.warning(
                "agent-replay: replacing unreadable session %s (%s)", trajectory.session_id, exc
            )
            return trajectory
        return merge(old, trajectory)
