"""Capture from any OpenTelemetry instrumentation: a SpanProcessor that stores trajectories.

``on_end`` only appends the finished span to a bounded queue (and wakes the worker when a
batch is ready); a daemon worker thread normalises, maps, assembles, hashes and writes in
batches, as the SDK's ``BatchSpanProcessor`` does for exporters. A full queue drops the span
and counts it (``stats()["dropped"]``); nothing blocks the application and nothing raises into
it: worker errors (a broken store, a span that cannot be read) are logged and counted.

Spans the ctx API emits (scope ``agent_replay``), every span started while a native step's
policy is running (even on another thread, through the step span's descendants), and a span
another instrumentation wrapped around an intercepted call (marked
``agent_replay.intercepted``, see :mod:`agent_replay.instrument`) are skipped: native and
intercepted runs are stored by :class:`~agent_replay.Session` directly, with full content,
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

from ..mapping.spans import NormalizedSpan, from_readable_span
from ..store import CheckpointStore, open_store
from ..store.sink import ErrorLog, SpanSink
from .context import (
    CLAIMED_SPANS,
    INTERCEPTED_ATTRIBUTE,
    SCOPE_NAME,
    current_context,
    inside_step,
)

__all__ = ["TrajectorySpanExporter", "TrajectorySpanProcessor", "attach"]

_log = logging.getLogger(__name__)

_STEP_KIND_ATTRIBUTE = "agent_replay.step.kind"
# on_start remembers skipped span ids until they end; spans that never end must not make that
# memory grow without bound (forgetting them only risks storing a span twice)
_MAX_SKIPPED = 65_536


def _normalize(spans: Sequence[ReadableSpan], errors: ErrorLog) -> list[NormalizedSpan]:
    """Normalised, storable copies of ``spans``; one unreadable span costs only itself."""
    out = []
    for span in spans:
        scope = span.instrumentation_scope
        if (scope is not None and scope.name == SCOPE_NAME) or _intercepted(span):
            continue  # native and intercepted runs are stored by Session / the interception
        try:
            out.append(from_readable_span(span))
        except Exception:
            errors.record()
    return out


class TrajectorySpanProcessor(SpanProcessor):
    """Turns finished GenAI spans into stored trajectories, off the application's threads.

    ``store`` is a :class:`CheckpointStore` or a path (opened here and closed on
    :meth:`shutdown`). ``trace_idle_seconds`` bounds how long a trace whose root never ends
    locally (a remote parent that never arrives) is buffered. Written traces are remembered so
    that a late span re-assembles its whole trace, within about ``remember_bytes`` of memory
    (estimated from the spans' text and number of values; the oldest are forgotten first, and
    a late span of a forgotten trace is stored on its own and merged with the stored session).
    The hooks are called on the application's threads and never raise; everything else
    happens on one worker thread, which a process forked after construction gets a fresh copy
    of.
    """

    def __init__(
        self,
        store: CheckpointStore | str | os.PathLike[str],
        *,
        max_queue_size: int = 8192,
        schedule_delay_millis: float = 500,
        max_export_batch_size: int = 512,
        trace_idle_seconds: float = 30.0,
        remember_bytes: int = 64 << 20,
    ) -> None:
        self.store, self._owns_store = open_store(store)
        self._trace_idle_seconds = trace_idle_seconds
        self._remember_bytes = remember_bytes
        self._max_queue = max_queue_size
        self._batch = max_export_batch_size
        self._delay = schedule_delay_millis / 1000.0
        self._stopped = False
        self.dropped = 0
        self._dropped_traces: dict[int, int] = {}  # trace id -> spans dropped (queue full)
        self._start_worker()
        _LIVE.add(self)

    def _start_worker(self) -> None:
        # everything the worker shares with the hooks; rebuilt in a forked child, where the
        # parent's worker thread does not exist and its queue is the parent's to store
        self._sink = SpanSink(
            self.store,
            source="otel",
            idle_seconds=self._trace_idle_seconds,
            remember_bytes=self._remember_bytes,
        )
        self._errors = ErrorLog("store captured spans", _log)
        self._queue: deque[ReadableSpan] = deque()
        # span id -> whether spans started under it are skipped too (native step spans)
        self._skip: dict[int, bool] = {}
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()
        self._flush_requests: list[threading.Event] = []
        self._worker = threading.Thread(target=self._run, name="agent-replay-capture", daemon=True)
        self._worker.start()

    def _after_fork_in_child(self) -> None:
        if not self._stopped:
            self._start_worker()

    @property
    def errors(self) -> int:
        """Worker errors so far (each one logged, or summarised in a later log line)."""
        return self._errors.count

    # -- application thread: tiny and never raising ---------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            skip = self._skip
            if current_context() is not None:  # inside a native run, on a thread it reached
                if inside_step():  # e.g. an instrumented HTTP or LLM call inside produce
                    self._remember(span, True)
                    return
                scope = span.instrumentation_scope
                if scope is not None and scope.name == SCOPE_NAME:
                    # native spans are dropped at on_end; below a step span, everything is
                    # part of that step, even on threads the step's context did not reach
                    self._remember(span, _STEP_KIND_ATTRIBUTE in span.attributes)
                    return
            if skip:  # outside native runs this is usually empty: one context lookup in all
                parent = span.parent
                if parent is not None and skip.get(parent.span_id):
                    self._remember(span, True)
        except Exception:
            pass

    def _remember(self, span: Span, descendants_too: bool) -> None:
        skip = self._skip
        if len(skip) >= _MAX_SKIPPED:
            skip.clear()
        skip[span.context.span_id] = descendants_too

    def on_end(self, span: ReadableSpan) -> None:
        try:
            ctx = span.context
            if not ctx.trace_flags.sampled or self._stopped:
                return
            if self._skip and self._skip.pop(ctx.span_id, None) is not None:
                return
            if CLAIMED_SPANS and ctx.span_id in CLAIMED_SPANS:
                CLAIMED_SPANS.pop(ctx.span_id, None)
                return
            queue = self._queue
            if len(queue) >= self._max_queue:
                self.dropped += 1
                lost = self._dropped_traces
                if len(lost) < _MAX_SKIPPED:  # for the capture reports of those traces
                    lost[ctx.trace_id] = lost.get(ctx.trace_id, 0) + 1
                return
            queue.append(span)
            if len(queue) >= self._batch:
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
        queue = self._queue
        batch = []
        while queue:
            batch.append(queue.popleft())
        if self._dropped_traces:
            lost, self._dropped_traces = self._dropped_traces, {}
            incomplete = self._sink.incomplete
            for trace_id, count in lost.items():
                key = format(trace_id, "032x")
                incomplete[key] = incomplete.get(key, 0) + count
        try:
            spans = _normalize(batch, self._errors)
            if spans:
                self._sink.add(spans)
            self._sink.flush(force=force)
        except Exception:
            self._errors.record()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Store everything received so far, complete traces or not. False on timeout, when
        the worker is gone, or when a write failed meanwhile (its spans are kept for the next
        flush); never raises."""
        if not self._worker.is_alive():
            return False
        errors = self.errors
        done = threading.Event()
        with self._flush_lock:
            self._flush_requests.append(done)
        self._wake.set()
        return done.wait(timeout_millis / 1000.0) and self.errors == errors

    def shutdown(self) -> None:
        """Flush, stop the worker, wait for it, and close the store if this processor opened
        it. Spans ending afterwards are ignored."""
        if self._stopped:
            return
        self.force_flush()
        self._stopped = True
        self._wake.set()
        self._worker.join(timeout=30)
        if not self._worker.is_alive():
            self._sink.close_report()  # what is lost for good, said once
            if self._owns_store:
                self.store.close()

    def stats(self) -> dict[str, int]:
        """Counters: spans seen, sessions written, spans dropped (queue full), traces given
        up (``dropped_traces``: see :class:`~agent_replay.store.sink.SpanSink`), worker errors."""
        return {
            "queued": len(self._queue),
            "spans_seen": self._sink.spans_seen,
            "pending_spans": self._sink.pending_spans,
            "sessions_written": self._sink.sessions_written,
            "dropped": self.dropped,
            "dropped_traces": self._sink.dropped_traces,
            "errors": self.errors,
        }


def _intercepted(span: ReadableSpan) -> bool:
    attributes = span.attributes
    return bool(attributes) and attributes.get(INTERCEPTED_ATTRIBUTE) is True


_LIVE: weakref.WeakSet[TrajectorySpanProcessor] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for processor in list(_LIVE):
        processor._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def attach(
    store: CheckpointStore | str | os.PathLike[str],
    tracer_provider: trace.TracerProvider | None = None,
    **options: Any,
) -> TrajectorySpanProcessor:
    """Add a :class:`TrajectorySpanProcessor` to ``tracer_provider`` (the global provider by
    default; an SDK ``TracerProvider`` is installed globally if none is configured yet).

    Raises ``TypeError``, before opening anything, when the provider cannot take span
    processors (a ``NoOpTracerProvider`` set globally earlier, which OTel does not let
    anyone replace)."""
    provider = tracer_provider or trace.get_tracer_provider()
    if tracer_provider is None and not hasattr(provider, "add_span_processor"):
        from opentelemetry.sdk.trace import TracerProvider

        trace.set_tracer_provider(TracerProvider())  # a no-op (with a warning) when one is set
        provider = trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        where = "the given" if tracer_provider is not None else "the global"
        raise TypeError(
            f"cannot attach to {where} tracer provider: {type(provider).__name__} takes no span "
            "processors (the global one can be set only once per process); pass "
            "tracer_provider= an opentelemetry.sdk.trace.TracerProvider"
        )
    processor = TrajectorySpanProcessor(store, **options)
    provider.add_span_processor(processor)  # type: ignore[attr-defined]
    return processor


class TrajectorySpanExporter(SpanExporter):
    """The same capture as an exporter, for configuration without code.

    ``OTEL_TRACES_EXPORTER=agent_replay`` (alone or beside others: ``otlp,agent_replay``)
    under ``opentelemetry-instrument`` loads it through the ``opentelemetry_traces_exporter``
    entry point, which constructs it without arguments; the store path then comes from
    ``AGENT_REPLAY_DB`` (default ``agent-replay.sqlite`` in the working directory). The SDK's
    batch processor calls :meth:`export` on its own thread, so the application never waits
    for it. Unlike the processor, an exporter cannot see where a span started, so GenAI spans
    made *inside* a native ctx step's ``produce`` are stored as an ``otel`` session too.

    Configured from the environment, a store that cannot be opened turns capture off with one
    logged error instead of raising: the SDK would otherwise abandon its whole configuration,
    the application's other exporters and instrumentations included. A ``store`` passed in
    code is opened as given (an error then is the caller's to see).
    """

    def __init__(
        self,
        store: CheckpointStore | str | os.PathLike[str] | None = None,
        *,
        trace_idle_seconds: float = 30.0,
    ) -> None:
        self._errors = ErrorLog("store exported spans", _log)
        self._lock = threading.Lock()
        self.store: CheckpointStore | None = None
        self._owns_store = False
        self._sink: SpanSink | None = None
        if store is None:
            path = os.environ.get("AGENT_REPLAY_DB") or "agent-replay.sqlite"
            try:
                self.store, self._owns_store = open_store(path)
            except Exception as exc:
                _log.error(
                    "agent-replay: capture is off: cannot open the store %r (AGENT_REPLAY_DB): %s",
                    path,
                    exc,
                )
                return
        else:
            self.store, self._owns_store = open_store(store)
        self._sink = SpanSink(self.store, source="otel", idle_seconds=trace_idle_seconds)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._sink is None:  # capture is off (see the class docs)
            return SpanExportResult.FAILURE
        try:
            batch = _normalize(spans, self._errors)
            with self._lock:
                self._sink.add(batch)
                self._sink.flush()
            return SpanExportResult.SUCCESS
        except Exception:
            self._errors.record()
            return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if self._sink is None:
            return False
        try:
            with self._lock:
                self._sink.flush(force=True)
            return True
        except Exception:
            self._errors.record()
            return False

    def shutdown(self) -> None:
        self.force_flush()
        if self._owns_store and self.store is not None:
            self.store.close()
