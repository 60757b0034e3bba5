"""Capture from any OpenTelemetry instrumentation: a SpanProcessor that stores trajectories.

``on_end`` only appends the finished span to a bounded queue (and wakes the worker when a
batch is ready); a daemon worker thread normalises, maps, assembles, hashes and writes in
batches, as the SDK's ``BatchSpanProcessor`` does for exporters. A full queue drops the span
and counts it (``stats()["dropped"]``); nothing blocks the application and nothing raises into
it: worker errors are logged and counted.

Spans the ctx API emits (scope ``agent_replay``), every span started while a native step's
policy is running, and a span another instrumentation wrapped around an intercepted call
(marked ``agent_replay.intercepted``, see :mod:`agent_replay.instrument`) are skipped: native
and intercepted runs are stored by :class:`~agent_replay.Session` directly, with full content,
and must not be stored twice.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ..mapping.spans import from_readable_span
from ..store import CheckpointStore
from ..store.sink import SpanSink
from .context import INTERCEPTED_ATTRIBUTE, SCOPE_NAME, inside_step

__all__ = ["TrajectorySpanExporter", "TrajectorySpanProcessor", "attach"]

_log = logging.getLogger(__name__)


def _open_store(store: CheckpointStore | str | os.PathLike[str]) -> CheckpointStore:
    return store if isinstance(store, CheckpointStore) else CheckpointStore(store)


class TrajectorySpanProcessor(SpanProcessor):
    """Turns finished GenAI spans into stored trajectories, off the application's threads.

    ``store`` is a :class:`CheckpointStore` or a path. ``trace_idle_seconds`` bounds how long
    a trace whose root never ends locally (a remote parent that never arrives) is buffered.
    """

    def __init__(
        self,
        store: CheckpointStore | str | os.PathLike[str],
        *,
        max_queue_size: int = 8192,
        schedule_delay_millis: float = 500,
        max_export_batch_size: int = 512,
        trace_idle_seconds: float = 30.0,
    ) -> None:
        self.store = _open_store(store)
        self._sink = SpanSink(self.store, source="otel", idle_seconds=trace_idle_seconds)
        self._queue: deque[ReadableSpan] = deque()
        self._max_queue = max_queue_size
        self._batch = max_export_batch_size
        self._delay = schedule_delay_millis / 1000.0
        self._skip: set[int] = set()
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()
        self._flush_requests: list[threading.Event] = []
        self._stopped = False
        self.dropped = 0
        self.errors = 0
        self._worker = threading.Thread(target=self._run, name="agent-replay-capture", daemon=True)
        self._worker.start()
        _LIVE.add(self)

    # -- application thread: tiny and never raising ---------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            if inside_step():
                self._skip.add(span.context.span_id)
        except Exception:
            pass

    def on_end(self, span: ReadableSpan) -> None:
        try:
            ctx = span.context
            if not ctx.trace_flags.sampled or self._stopped:
                return
            if self._skip and ctx.span_id in self._skip:
                self._skip.discard(ctx.span_id)
                return
            if _intercepted(span):
                return
            if len(self._queue) >= self._max_queue:
                self.dropped += 1
                return
            self._queue.append(span)
            if len(self._queue) >= self._batch:
                self._wake.set()
        except Exception:
            pass

    # -- worker thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            with self._flush_lock:
                waiting, self._flush_requests = self._flush_requests, []
            self._drain(force=bool(waiting))
            for event in waiting:
                event.set()
            if self._stopped and not self._queue:
                return

    def _drain(self, *, force: bool) -> None:
        try:
            batch = []
            while self._queue:
                span = self._queue.popleft()
                scope = span.instrumentation_scope
                if scope is not None and scope.name == SCOPE_NAME:
                    continue
                batch.append(from_readable_span(span))
            if batch:
                self._sink.add(batch)
            self._sink.flush(force=force)
        except Exception:
            self.errors += 1
            _log.exception("agent-replay: failed to store captured spans")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Store everything received so far, complete traces or not. False on timeout."""
        if not self._worker.is_alive():
            return False
        done = threading.Event()
        with self._flush_lock:
            self._flush_requests.append(done)
        self._wake.set()
        return done.wait(timeout_millis / 1000.0)

    def shutdown(self) -> None:
        """Flush, stop the worker and wait for it."""
        if self._stopped:
            return
        self.force_flush()
        self._stopped = True
        self._wake.set()
        self._worker.join(timeout=30)

    def stats(self) -> dict[str, int]:
        """Counters: spans seen, sessions written, spans dropped (queue full), worker errors."""
        return {
            "queued": len(self._queue),
            "spans_seen": self._sink.spans_seen,
            "pending_spans": self._sink.pending_spans,
            "sessions_written": self._sink.sessions_written,
            "dropped": self.dropped,
            "errors": self.errors,
        }


def _intercepted(span: ReadableSpan) -> bool:
    attributes = span.attributes
    return bool(attributes) and attributes.get(INTERCEPTED_ATTRIBUTE) is True


_LIVE: weakref.WeakSet[TrajectorySpanProcessor] = weakref.WeakSet()


def attach(
    store: CheckpointStore | str | os.PathLike[str],
    tracer_provider: trace.TracerProvider | None = None,
    **options: Any,
) -> TrajectorySpanProcessor:
    """Add a :class:`TrajectorySpanProcessor` to ``tracer_provider`` (the global provider by
    default; an SDK ``TracerProvider`` is installed globally if none is configured yet)."""
    provider = tracer_provider or trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    processor = TrajectorySpanProcessor(store, **options)
    provider.add_span_processor(processor)  # type: ignore[attr-defined]
    return processor


class TrajectorySpanExporter(SpanExporter):
    """The same capture as an exporter, for configuration without code.

    ``OTEL_TRACES_EXPORTER=otlp,agent_replay`` under ``opentelemetry-instrument`` loads it
    through the ``opentelemetry_traces_exporter`` entry point; the store path comes from
    ``AGENT_REPLAY_DB`` (default ``agent-replay.sqlite``). The SDK's batch processor calls
    :meth:`export` on its own thread, so the application never waits for it.
    """

    def __init__(
        self,
        store: CheckpointStore | str | os.PathLike[str] | None = None,
        *,
        trace_idle_seconds: float = 30.0,
    ) -> None:
        path = (
            store if store is not None else os.environ.get("AGENT_REPLAY_DB", "agent-replay.sqlite")
        )
        self.store = _open_store(path)
        self._sink = SpanSink(self.store, source="otel", idle_seconds=trace_idle_seconds)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            batch = [
                from_readable_span(s)
                for s in spans
                if (s.instrumentation_scope is None or s.instrumentation_scope.name != SCOPE_NAME)
                and not _intercepted(s)
            ]
            with self._lock:
                self._sink.add(batch)
                self._sink.flush()
            return SpanExportResult.SUCCESS
        except Exception:
            _log.exception("agent-replay: failed to store exported spans")
            return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            with self._lock:
                self._sink.flush(force=True)
            return True
        except Exception:
            _log.exception("agent-replay: failed to flush captured spans")
            return False

    def shutdown(self) -> None:
        self.force_flush()
