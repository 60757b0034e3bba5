"""From a stream of finished spans to stored trajectories.

:class:`SpanSink` buffers normalised spans per trace *in memory* and, when a trace is complete
(its local root span ended), idle for a while, or a flush is forced, assembles its
trajectories and writes them in one transaction. Spans that arrive for a trace already written
(late children, distributed traces) re-assemble that trace from every span seen, as long as
the trace is remembered (the most recent ``remember_traces`` traces, within about
``remember_bytes`` of memory); a conversation spread over several traces is merged with what
the store already holds, and spans of a trace the store holds go where the store's trace index
says that trace went (:func:`rehome`, :func:`adopt`). Used by the span processor's worker
thread; not thread-safe itself.

:class:`DurableSpanSink` does the same for the OTLP receiver, but buffers in the store's
pending tables: :meth:`~DurableSpanSink.add` returns only once the spans are committed to disk,
so the receiver can acknowledge an export knowing a crash will not lose it, and a restarted
receiver assembles whatever was left waiting. ``agent-replay import`` stages the files it
reads through it too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..capture.context import native_run_in_progress
from ..errors import (
    AgentReplayError,
    ChainIntegrityError,
    SessionChangedError,
    SessionNotFoundError,
    StoreError,
)
from ..mapping.assemble import (
    assemble,
    continue_session,
    is_placeholder_task,
    merge,
    merged_outcome,
)
from ..mapping.spans import (
    LogEvent,
    NormalizedSpan,
    attach_logs,
    log_from_dict,
    log_to_dict,
    span_from_dict,
    span_to_dict,
)
from ..model import Continuation, Trajectory
from .sqlite import CheckpointStore

__all__ = ["DurableSpanSink", "LogThrottle", "SpanSink", "adopt", "rehome", "save_merged"]

_log = logging.getLogger(__name__)


class LogThrottle:
    """At most one log line per ``interval`` seconds, for errors that repeat (a store that is
    gone fails every write after it): :meth:`due` says whether to log now, and how many lines
    were held back since the last one."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._logged_at = -interval
        self._held = 0

    def due(self) -> int | None:
        """``None`` when this line is held back, else the number held back before it."""
        now = time.monotonic()
        if now - self._logged_at < self.interval:
            self._held += 1
            return None
        held, self._logged_at, self._held = self._held, now, 0
        return held

    @property
    def held(self) -> int:
        """Lines held back since the last one logged."""
        return self._held


class ErrorLog:
    """Counts a worker's errors and logs them without flooding the application's log: one
    that fails on every round (a deleted or full store) logs the first error with its
    traceback and then at most one line a minute, saying how many it held back (with a
    traceback again only when the error is another one)."""

    def __init__(self, what: str, logger: logging.Logger | None = None) -> None:
        self.what = what
        self.count = 0
        self._log = logger or _log
        self._throttle = LogThrottle()
        self._last = ""  # the error last logged with its traceback

    def record(self) -> None:
        """Call from an ``except`` block."""
        self.count += 1
        held = self._throttle.due()
        if held is not None:
            suffix = f" ({held} similar errors not logged)" if held else ""
            error = sys.exc_info()[1]
            text = f"{type(error).__name__}: {error}"
            if text == self._last:
                self._log.error("agent-replay: failed to %s%s: %s", self.what, suffix, text)
            else:
                self._last = text
                self._log.exception("agent-replay: failed to %s%s", self.what, suffix)


class SpanSink:
    """Buffers spans by trace and writes assembled trajectories to ``store``.

    A write that fails raises, and its traces wait for a later flush. When the store is the
    cause (:class:`StoreError`: locked past its timeout, a full disk, a file gone) no trace is
    at fault: they are all held, within about ``hold_bytes`` of memory (past it the oldest
    are dropped, counted in ``dropped_traces``), and written again once the store takes
    writes; flushes that are not forced wait ``retry_seconds`` after a failure, doubling up to
    ``MAX_RETRY_SECONDS``, so a store that is down costs no assembly twice a second. When a
    trace is the cause (it cannot be assembled), the others of its flush are written one by
    one and it is tried ``MAX_ATTEMPTS`` times, then dropped. Drops and the store's return are
    logged, at most one drop line a minute."""

    MAX_ATTEMPTS = 3
    MAX_RETRY_SECONDS = 30.0

    def __init__(
        self,
        store: CheckpointStore,
        *,
        source: str = "otel",
        idle_seconds: float = 30.0,
        remember_traces: int = 4096,
        remember_bytes: int = 64 << 20,
        hold_bytes: int = 256 << 20,
        retry_seconds: float = 0.5,
    ) -> None:
        self.store = store
        self.source = source
        self.idle_seconds = idle_seconds
        self.remember_traces = remember_traces
        self.remember_bytes = remember_bytes
        self.remembered_bytes = 0  # estimated memory of the remembered written traces
        self.hold_bytes = hold_bytes
        self.retry_seconds = retry_seconds
        self._pending: dict[str, dict[str, NormalizedSpan]] = {}
        self._complete: set[str] = set()
        self._touched: dict[str, float] = {}
        # written traces kept for late spans, with their estimated memory (_memory_size)
        self._done: OrderedDict[str, tuple[dict[str, NormalizedSpan], int]] = OrderedDict()
        self.sessions_written = 0
        self.spans_seen = 0
        self.dropped_traces = 0  # traces given up (failed writes, or held past hold_bytes)
        self._drop_log = LogThrottle()  # a store gone for good drops every trace after it
        self._attempts: dict[str, int] = {}
        # traces held while the store refuses writes, oldest first, with their memory
        self._held: dict[str, int] = {}
        self._retry_delay = 0.0
        self._retry_at = 0.0
        # trace id -> spans of it lost before they reached the sink (a full capture queue):
        # the trace's capture report says so when it is written
        self.incomplete: dict[str, int] = {}

    @property
    def pending_spans(self) -> int:
        return sum(len(v) for v in self._pending.values())

    @property
    def store_failing(self) -> bool:
        """Whether the last write failed for want of the store (traces are held)."""
        return self._retry_delay > 0

    def add(self, spans: Iterable[NormalizedSpan]) -> None:
        """Buffer finished spans (any traces, any order)."""
        now = time.monotonic()
        for span in spans:
            self.spans_seen += 1
            trace = self._pending.get(span.trace_id)
            if trace is None:
                done = self._done.pop(span.trace_id, None)
                trace = self._pending[span.trace_id] = {}
                if done is not None:  # a late span of a trace already written: its root ended
                    trace.update(done[0])
                    self.remembered_bytes -= done[1]
                    self._complete.add(span.trace_id)
            trace[span.span_id] = span
            self._touched[span.trace_id] = now
            if span.parent_span_id is None or span.parent_is_remote:
                self._complete.add(span.trace_id)

    def flush(self, *, force: bool = False) -> int:
        """Write every ready trace (every trace when ``force``); returns sessions written.
        After a failed write, a flush that is not forced waits for the retry time."""
        now = time.monotonic()
        if not force and now < self._retry_at:
            return 0
        ready = [
            trace_id
            for trace_id in self._pending
            if force
            or trace_id in self._complete
            or now - self._touched.get(trace_id, now) >= self.idle_seconds
        ]
        if not ready:
            return 0
        if self.store_failing:
            # ask the store before assembling everything it refused (a long outage holds
            # tens of thousands of spans, and assembling them for every retry kept the worker
            # busy for seconds at a time)
            try:
                self.store.check_writable()
            except StoreError:  # held, as a refused write holds them (within hold_bytes)
                self._hold({t: self._take(t) for t in ready if t not in self._held})
                raise
        taken = {trace_id: self._take(trace_id) for trace_id in ready}
        try:
            written = self._write(taken)
        except StoreError:
            self._hold(taken)
            raise
        except Exception:
            if len(taken) == 1:
                self._put_back(taken)
                raise
            written = self._write_each(taken)  # one bad trace holds up no other
        self._stored()
        return written

    def _take(self, trace_id: str) -> dict[str, NormalizedSpan]:
        """Trace ``trace_id`` out of the buffer, remembered for late spans."""
        trace = self._pending.pop(trace_id)
        self._complete.discard(trace_id)
        self._touched.pop(trace_id, None)
        size = sum(map(_memory_size, trace.values()))
        self._done[trace_id] = (trace, size)
        self.remembered_bytes += size
        while self._done and (
            len(self._done) > self.remember_traces or self.remembered_bytes > self.remember_bytes
        ):
            self.remembered_bytes -= self._done.popitem(last=False)[1][1]
        return trace

    def _write(self, taken: Mapping[str, dict[str, NormalizedSpan]]) -> int:
        """Assemble and save ``taken`` in one transaction; the number of sessions written."""
        spans = [span for trace in taken.values() for span in trace.values()]
        assembled = assemble(spans, source=self.source)
        if self.incomplete:
            assembled = [_incomplete(t, self.incomplete) for t in assembled]
        trajectories = rehome(self.store, assembled)
        if trajectories:
            covered = {(s.trace_id, s.span_id) for s in spans}
            save_merged(self.store, trajectories, self.store.save_many, covered)
        for trace_id in taken:
            self._attempts.pop(trace_id, None)
            self.incomplete.pop(trace_id, None)
            self._held.pop(trace_id, None)
        self.sessions_written += len(trajectories)
        return len(trajectories)

    def _write_each(self, taken: Mapping[str, dict[str, NormalizedSpan]]) -> int:
        """``taken`` trace by trace, after a failure of them all together that was not the
        store's: raises the first trace's error once all are tried (a store failure at once)."""
        written, failure = 0, None
        items = list(taken.items())
        for n, (trace_id, trace) in enumerate(items):
            try:
                written += self._write({trace_id: trace})
            except StoreError:
                self._hold(dict(items[n:]))
                raise
            except Exception as exc:
                self._put_back({trace_id: trace})
                failure = failure or exc
        if failure is not None:
            raise failure
        return written

    def _unwritten(self, trace_id: str, trace: dict[str, NormalizedSpan]) -> None:
        """Trace ``trace_id`` back in the buffer (with any spans that came meanwhile)."""
        done = self._done.pop(trace_id, None)
        if done is not None:
            self.remembered_bytes -= done[1]
        trace.update(self._pending.get(trace_id, {}))
        self._pending[trace_id] = trace
        self._complete.add(trace_id)

    def _hold(self, traces: Mapping[str, dict[str, NormalizedSpan]]) -> None:
        """Traces the store did not take: back in the buffer, not counted against them; the
        next flushes wait (doubling); the oldest held are dropped past ``hold_bytes``."""
        self._back_off()
        for trace_id, trace in traces.items():
            self._unwritten(trace_id, trace)
            self._held[trace_id] = sum(map(_memory_size, self._pending[trace_id].values()))
        total = sum(self._held.values())
        while total > self.hold_bytes and len(self._held) > 1:
            trace_id = next(iter(self._held))
            total -= self._held.pop(trace_id)
            self._drop(trace_id, self._pending.pop(trace_id, {}), "held past the memory bound")
            self._complete.discard(trace_id)
            self._touched.pop(trace_id, None)

    def _back_off(self) -> None:
        """The store refused a write: the next flushes wait, doubling the wait each time."""
        if not self._retry_delay:
            _log.warning(
                "agent-replay: the store %s does not take writes; holding traces until it does",
                self.store.path,
            )
        self._retry_delay = min(
            self.MAX_RETRY_SECONDS, max(self.retry_seconds, 2 * self._retry_delay)
        )
        self._retry_at = time.monotonic() + self._retry_delay

    def _stored(self) -> None:
        """A write went through: the store is back, if it was away."""
        if self._retry_delay:
            _log.warning(
                "agent-replay: the store %s takes writes again%s",
                self.store.path,
                f" ({self.dropped_traces} traces dropped so far)" if self.dropped_traces else "",
            )
        self._retry_delay = self._retry_at = 0.0

    def _put_back(self, traces: dict[str, dict[str, NormalizedSpan]]) -> None:
        """Traces that could not be assembled or written wait for the next flush, up to
        ``MAX_ATTEMPTS`` writes each; then they are dropped, and logged."""
        for trace_id, trace in traces.items():
            failures = self._attempts[trace_id] = self._attempts.get(trace_id, 0) + 1
            if failures >= self.MAX_ATTEMPTS:
                del self._attempts[trace_id]
                done = self._done.pop(trace_id, None)
                if done is not None:
                    self.remembered_bytes -= done[1]
                self._drop(trace_id, trace, f"after {failures} failed writes")
                continue
            self._unwritten(trace_id, trace)

    def _drop(self, trace_id: str, trace: Mapping[str, NormalizedSpan], why: str) -> None:
        self.dropped_traces += 1
        self._held.pop(trace_id, None)
        held = self._drop_log.due()
        if held is not None:
            _log.error(
                "agent-replay: dropping trace %s (%d spans) %s%s",
                trace_id,
                len(trace),
                why,
                f"; {held} more dropped since the last message" if held else "",
            )

    def close_report(self) -> None:
        """Log what is lost for good when capture stops: spans still buffered (the store
        never took them back) and drops whose line was held back."""
        held = self._drop_log.held
        if self._pending:
            _log.error(
                "agent-replay: %d spans of %d traces were never stored (%s)",
                self.pending_spans,
                len(self._pending),
                "the store did not take writes" if self.store_failing else "stopped while buffered",
            )
        if held:
            _log.error(
                "agent-replay: %d traces dropped in all (%d not logged one by one)",
                self.dropped_traces,
                held,
            )


def _incomplete(trajectory: Trajectory, lost: Mapping[str, int]) -> Trajectory:
    """``trajectory`` with its capture report saying how many spans of its traces were lost
    before capture (and so not replayable as a whole)."""
    dropped = sum(lost.get(t, 0) for t in trajectory.metadata.get("trace_ids", ()))
    report = trajectory.metadata.get("capture")
    if not dropped or not isinstance(report, Mapping):
        return trajectory
    note = (
        f"{dropped} span(s) of this trace were dropped before capture (the processor's queue "
        "was full): steps, or the agent span naming them, may be missing"
    )
    report = {
        **report,
        "dropped_spans": report.get("dropped_spans", 0) + dropped,
        "notes": [*report.get("notes", ()), note],
        "replayable": False,
    }
    return replace(trajectory, metadata={**trajectory.metadata, "capture": report})


def rehome(store: CheckpointStore, trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """``trajectories`` ready to be saved in ``store``: one assembled from spans of a trace
    alone (keyed by its trace id, because the conversation id was on spans stored earlier:
    instrumentations often put it on the agent span only) moves to the session the store says
    the trace went to, where it is merged with the trace's stored steps; trajectories of one
    session are merged (when both were captured from traces; otherwise the later one
    replaces the earlier, as a file imported twice does)."""
    items = list(trajectories)
    keyed = [t.session_id for t in items if t.session_id in t.metadata.get("trace_ids", ())]
    holders = store.trace_sessions(keyed) if keyed else {}
    out: dict[str, Trajectory] = {}
    for trajectory in items:
        # the first session written that holds the trace, other than its own trace-keyed one
        owners = [s for s in holders.get(trajectory.session_id, ()) if s != trajectory.session_id]
        if owners:
            trajectory = replace(trajectory, session_id=owners[0])
        previous = out.get(trajectory.session_id)
        if (
            previous is not None
            and previous.metadata.get("trace_ids")
            and trajectory.metadata.get("trace_ids")
        ):
            trajectory = merge(previous, trajectory)
        out[trajectory.session_id] = trajectory
    return list(out.values())


# What a normalised span holds in memory, measured with tracemalloc on spans of several
# shapes (tests/store/test_memory_estimate.py checks the estimate against it): about 640 bytes
# of its own, 128 per attribute value (the key and value objects and the dict slot), 200 per
# event or log record, plus the memory of its text (a str holds 1, 2 or 4 bytes a character:
# CJK text takes twice the memory of as many ASCII characters, emoji four times).
_SPAN_BYTES, _VALUE_BYTES, _EVENT_BYTES = 640, 128, 200
_EMPTY_STR = sys.getsizeof("")


def _memory_size(span: NormalizedSpan) -> int:
    """About how many bytes of memory ``span`` takes (see the constants above)."""
    size = _SPAN_BYTES + _size(span.attributes)
    for event in span.events:
        size += _EVENT_BYTES + _size(event.attributes)
    for log in span.logs:
        size += _EVENT_BYTES + _size(log.attributes) + _size(log.body)
    return size


def _size(value: object) -> int:
    if type(value) is str:
        return sys.getsizeof(value) - _EMPTY_STR
    if isinstance(value, Mapping):
        return sum(_VALUE_BYTES + _size(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_VALUE_BYTES + _size(v) for v in value)
    return 0


def merged_with_stored(
    store: CheckpointStore,
    trajectory: Trajectory,
    *,
    follow: bool = True,
    covered: Collection[tuple[str, str]] | None = None,
    replace_untraced: bool = False,
    warnings: list[str] | None = None,
    read: dict[str, str | None] | None = None,
) -> Trajectory | Continuation:
    """``trajectory`` as it is to be saved beside the stored session of the same id (other
    traces of the same conversation, or earlier spans of its own traces): when it follows
    that session, a continuation of it that reads only the stored session's end (so a
    conversation of n traces costs O(n), not O(n²) loads and seals); otherwise merged with the
    whole stored session (also when ``follow`` is false; ``covered`` as in :func:`merge`);
    itself when there is none, or when ``replace_untraced`` and neither it nor the stored one
    was captured from traces.

    A trajectory captured from traces never merges into a session that was not (a native
    run whose id a conversation id happens to equal), nor takes the id of a native run still
    in progress in this process: without ``replace_untraced`` it goes to ``<id>.otel``. Nor
    does it replace a stored session whose content is damaged (:class:`ChainIntegrityError`):
    that one is kept for inspection and it goes to ``<id>.unmerged`` (said in ``warnings`` if
    given, else logged). A session that cannot be read for now (:class:`StoreError`: a full
    disk, a lock) raises: the caller keeps the spans and tries again later.

    ``read`` (when given) gets the digest of each stored session this read whole (``None``
    for one there was not): a whole trajectory returned is to be written only if its session
    still has that digest (``expect`` of :meth:`CheckpointStore.save_many`)."""
    read = {} if read is None else read
    traced = bool(trajectory.metadata.get("trace_ids"))
    if traced and not replace_untraced and native_run_in_progress(trajectory.session_id):
        return _aside(store, trajectory, follow, covered, warnings, read)
    if trajectory.session_id not in store:
        read[trajectory.session_id] = None
        return trajectory
    try:
        if follow:
            continuation = continue_session(store.load_end(trajectory.session_id), trajectory)
            if continuation is not None:
                return continuation
        old = store.load(trajectory.session_id, inputs=False)  # merged, not replayed
    except SessionNotFoundError:  # deleted since (a prune): the trajectory is all there is
        read[trajectory.session_id] = None
        return trajectory
    except ChainIntegrityError as exc:
        if replace_untraced and not traced:
            read.update(store.digests([trajectory.session_id]))
            return trajectory  # the whole session, given again
        message = (
            f"session {trajectory.session_id} is damaged ({exc}): kept as it is for "
            f"inspection; the new capture goes to {trajectory.session_id}.unmerged"
        )
        if warnings is None:
            _log.warning("agent-replay: %s", message)
        else:
            warnings.append(message)
        return _aside(store, trajectory, follow, covered, warnings, read, suffix=".unmerged")
    read[old.session_id] = old.digest
    if not old.metadata.get("trace_ids"):
        if replace_untraced:
            return trajectory
        if traced:
            return _aside(store, trajectory, follow, covered, warnings, read)
    return merge(old, trajectory, covered=covered)


def _aside(
    store: CheckpointStore,
    trajectory: Trajectory,
    follow: bool,
    covered: Collection[tuple[str, str]] | None,
    warnings: list[str] | None,
    read: dict[str, str | None],
    suffix: str = ".otel",
) -> Trajectory | Continuation:
    """``trajectory`` under ``<id><suffix>``, merged with what is stored there: its id belongs
    to a session that was not captured from traces, or whose content is damaged (see
    :func:`merged_with_stored`)."""
    moved = replace(trajectory, session_id=f"{trajectory.session_id}{suffix}")
    if suffix == ".otel":
        _log.info(
            "agent-replay: session %r is a native run; spans captured with that conversation "
            "id go to %r",
            trajectory.session_id,
            moved.session_id,
        )
    return merged_with_stored(
        store,
        moved,
        follow=follow,
        covered=covered,
        replace_untraced=False,
        warnings=warnings,
        read=read,
    )


def adopt(
    store: CheckpointStore,
    trajectories: Sequence[Trajectory],
    covered: Collection[tuple[str, str]] | None,
) -> tuple[list[Trajectory], dict[str, str]]:
    """``trajectories`` with each stored session that is named by one of their traces, and
    holds it, merged in (``covered`` as in :func:`merge`): spans of that trace stored on their
    own before the conversation id naming the trajectory was seen (assembled at the idle
    timeout while the agent span was still open, or imported from an earlier file). Returns
    them and the sessions they took over, id → digest read, to delete in the same write."""
    wanted = {
        trace_id
        for t in trajectories
        for trace_id in t.metadata.get("trace_ids", ())
        if trace_id != t.session_id
    }
    holders = store.trace_sessions(wanted) if wanted else {}
    fragments = {trace_id for trace_id, sessions in holders.items() if trace_id in sessions}
    if not fragments:
        return list(trajectories), {}
    out, gone = [], {}
    for trajectory in trajectories:
        for trace_id in trajectory.metadata.get("trace_ids", ()):
            if trace_id not in fragments or trace_id == trajectory.session_id:
                continue
            try:
                fragment = store.load(trace_id, inputs=False)
            except AgentReplayError as exc:  # left as it is: nothing is lost
                _log.warning("agent-replay: cannot merge session %s (%s)", trace_id, exc)
                continue
            merged = merge(fragment, trajectory, covered=covered)
            # the conversation's own task and outcome, not those of a fragment without a root;
            # unless the conversation's spans here only name their root (its agent span came
            # in a later file than the prompts)
            task = merged.task if is_placeholder_task(trajectory) else trajectory.task
            metadata = dict(merged.metadata)
            outcome = merged_outcome(
                fragment.outcome,
                fragment.metadata,
                trajectory.outcome,
                trajectory.metadata,
                metadata,
            )
            trajectory = replace(merged, task=task, outcome=outcome, metadata=metadata)
            gone[trace_id] = fragment.digest
        out.append(trajectory)
    return out, gone


MERGE_ATTEMPTS = 8
"""How often :func:`save_merged` reads and merges again when other writers keep changing the
sessions it merges with (each attempt is one transaction; the last failure is raised)."""


def save_merged(
    store: CheckpointStore,
    trajectories: Sequence[Trajectory],
    write: Callable[..., None],
    covered: Collection[tuple[str, str]] | None = None,
    **options: Any,
) -> None:
    """``write(items, delete=..., expect=...)`` (one transaction, as
    :meth:`CheckpointStore.save_many`) ``trajectories``, assembled from the spans ``covered``:
    each takes over the sessions stored under the id of one of its traces (:func:`adopt`;
    ``write`` deletes them) and is merged with the stored session of its id (``options`` as in
    :func:`merged_with_stored`). A session written whole is written only if it is still the
    one that was read (``expect``), a continuation only if the stored end is (its own check):
    when another writer (another process on the same store) changed one meanwhile, everything
    is read and merged again, up to ``MERGE_ATTEMPTS`` times."""

    def attempt(follow: bool) -> None:
        taken, gone = adopt(store, trajectories, covered)
        # the digest of every session as it was read whole (or found absent): a write after
        # that read is caught, and the merge done again on the next attempt
        read: dict[str, str | None] = {}
        items = [
            merged_with_stored(store, t, follow=follow, covered=covered, read=read, **options)
            for t in taken
        ]
        expect = {
            item.session_id: read[item.session_id]
            for item in items
            if isinstance(item, Trajectory) and item.session_id in read
        }
        write(items, delete=gone, expect=expect)

    for n in range(MERGE_ATTEMPTS):
        try:
            attempt(follow=n == 0)
            return
        except SessionChangedError:
            if n == MERGE_ATTEMPTS - 1:
                raise


def _dumps(data: dict) -> bytes:
    # separators keep rows small; default=str keeps an odd attribute value from failing a commit
    return json.dumps(data, separators=(",", ":"), default=str).encode("utf-8", "surrogatepass")


class DurableSpanSink:
    """Buffers received spans in the store's pending tables and assembles them from there.

    ``MAX_ATTEMPTS``: how often a trace that cannot be assembled is tried by
    :meth:`assemble_ready` in this process (its rows stay waiting; a restart tries again).

    :meth:`add` (called by the receiver's writer thread) and :meth:`assemble_ready` /
    :meth:`purge` (called by its assembler thread) may run at the same time: each thread uses
    its own SQLite connection and every write is one transaction. Errors from the store
    propagate (the receiver answers 503 and the client retries).
    """

    MAX_ATTEMPTS = 3

    def __init__(
        self,
        store: CheckpointStore,
        *,
        source: str = "otel",
        idle_seconds: float = 30.0,
        retain_seconds: float = 3600.0,
        batch_traces: int = 200,
        log_conflicts: bool = True,
    ) -> None:
        self.store = store
        self.source = source
        self.log_conflicts = log_conflicts  # an import says it in its result instead
        self.idle_seconds = idle_seconds
        self.retain_seconds = retain_seconds
        self.batch_traces = batch_traces
        self.sessions_written = 0
        self.unjoinable_logs = 0
        self.conflicting_spans = 0  # spans received again with other content (first kept)
        self.orphan_logs = 0  # log records assembled without their span
        self.failed_traces: dict[str, str] = {}  # trace id → why it could not be assembled
        self._attempts: dict[str, int] = {}
        if not store.read_only:
            try:
                store.index_pending()
            except StoreError:  # (slower without them; the next start tries again)
                _log.warning("agent-replay: could not index %s's pending spans", store.path)

    def add(
        self, spans: Sequence[NormalizedSpan], logs: Sequence[LogEvent] = ()
    ) -> tuple[int, int]:
        """Commit ``spans`` and ``logs`` durably; returns how many of each were new. Log records
        that name no span cannot be joined to one and are counted, not stored."""
        span_rows = [
            (
                s.trace_id,
                s.span_id,
                _dumps(span_to_dict(s)),
                s.parent_span_id is None or s.parent_is_remote,
            )
            for s in spans
        ]
        log_rows = []
        for log in logs:
            if not log.trace_id or not log.span_id:
                self.unjoinable_logs += 1
                continue
            data = _dumps(log_to_dict(log))
            log_rows.append((hashlib.sha256(data).hexdigest(), log.trace_id, log.span_id, data))
        if not span_rows and not log_rows:
            return 0, 0
        new_spans, new_logs, conflicting = self.store.add_pending(span_rows, log_rows)
        if conflicting:
            self.conflicting_spans += conflicting
        if conflicting and self.log_conflicts:
            _log.warning(
                "agent-replay: %d span(s) arrived again with other content under the same trace "
                "and span id (a producer that reuses span ids?); the first copy is kept",
                conflicting,
            )
        return new_spans, new_logs

    def assemble_ready(self, *, force: bool = False) -> int:
        """Assemble and store every trace that is complete or idle (every waiting one when
        ``force``); returns the number of sessions written."""
        traces = self.store.ready_traces(idle_ns=int(self.idle_seconds * 1e9), force=force)
        traces = [t for t in traces if self._attempts.get(t, 0) < self.MAX_ATTEMPTS]
        return self.assemble_traces(traces)

    def assemble_traces(
        self,
        trace_ids: Sequence[str],
        *,
        annotate: Callable[[Trajectory], Trajectory] | None = None,
        on_saved: Callable[[Trajectory], None] | None = None,
    ) -> int:
        """Assemble and store every stored span and log record of ``trace_ids``, assembled
        before or not, ``batch_traces`` traces per transaction; returns the number of sessions
        written. ``annotate`` may change each assembled trajectory before it is saved;
        ``on_saved`` sees each one once its batch is committed. Log records whose span is not
        among the spans are counted in ``orphan_logs``.

        A batch that fails for want of the store (:class:`StoreError`: locked, full, gone)
        raises, and everything waits for the next call. One that fails otherwise (a stored row
        that cannot be read) is retried trace by trace, so that one bad trace holds up no
        other: a trace that still fails is left waiting, its error in ``failed_traces``, and
        after ``MAX_ATTEMPTS`` it is no longer tried by :meth:`assemble_ready`."""
        written = 0
        for start in range(0, len(trace_ids), self.batch_traces):
            batch = list(trace_ids[start : start + self.batch_traces])
            try:
                saved = self._assemble(batch, annotate)
            except StoreError:
                raise
            except Exception:
                saved = []
                for trace_id in batch:
                    try:
                        saved += self._assemble([trace_id], annotate)
                    except StoreError:
                        raise
                    except Exception as exc:
                        self._failed(trace_id, exc)
            for trajectory in saved:
                if on_saved is not None:
                    on_saved(trajectory)
            written += len(saved)
        self.sessions_written += written
        return written

    def _assemble(
        self, batch: list[str], annotate: Callable[[Trajectory], Trajectory] | None
    ) -> list[Trajectory]:
        """One transaction: the trajectories of the traces ``batch``, saved."""
        span_rows, log_rows = self.store.pending_rows(batch)
        spans = [span_from_dict(json.loads(data)) for _, _, data in span_rows]
        logs = [log_from_dict(json.loads(data)) for _, data in log_rows]
        orphans: list[LogEvent] = []
        if logs:
            spans, orphans = attach_logs(spans, logs)
        assembled = assemble(spans, source=self.source)
        if annotate is not None:
            assembled = [annotate(t) for t in assembled]
        trajectories = rehome(self.store, assembled)
        commit = functools.partial(
            self.store.commit_assembled,
            spans=[(t, s) for t, s, _ in span_rows],
            logs=[d for d, _ in log_rows],
        )
        covered = {(t, s) for t, s, _ in span_rows}
        save_merged(self.store, trajectories, commit, covered)
        self.orphan_logs += len(orphans)
        for trace_id in batch:
            self.failed_traces.pop(trace_id, None)
            self._attempts.pop(trace_id, None)
        return trajectories

    def _failed(self, trace_id: str, exc: Exception) -> None:
        attempts = self._attempts[trace_id] = self._attempts.get(trace_id, 0) + 1
        self.failed_traces[trace_id] = f"{type(exc).__name__}: {exc}"
        _log.error(
            "agent-replay: cannot assemble trace %s (attempt %d of %d; its spans stay waiting): %s",
            trace_id,
            attempts,
            self.MAX_ATTEMPTS,
            self.failed_traces[trace_id],
            exc_info=attempts == 1,
        )

    def purge(self) -> int:
        """Forget assembled rows older than ``retain_seconds``; returns rows deleted."""
        return self.store.purge_pending(older_than_ns=int(self.retain_seconds * 1e9))
