"""The receiver's transport-independent core: decode, admit, commit durably, then answer.

Both transports (OTLP/HTTP and OTLP/gRPC) hand each export request to :class:`Receiver`,
which decodes it into spans and log records, queues them for the *writer thread*, and returns
only when they are committed to the store's pending tables (SQLite WAL, ``synchronous=FULL``).
The writer commits everything queued in one transaction (group commit), so concurrent exporters
share each disk sync. An *assembler thread* turns complete (or idle) traces into trajectories
in the background; acknowledgement never waits for it.

Back-pressure: at most ``max_inflight`` requests are processed at once and at most
``max_queued`` spans and records may wait for the writer; beyond either, :class:`Overloaded`
(HTTP 429, gRPC RESOURCE_EXHAUSTED, both with a retry delay). A commit that does not finish
within ``ack_timeout`` is answered with :class:`Unavailable` (503 / UNAVAILABLE); the data is
still committed later, and because the pending tables are keyed by trace and span id the
client's retry does not store anything twice. All methods are thread-safe.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ...mapping.spans import LogEvent, NormalizedSpan
from ...store import CheckpointStore
from ...store.sink import DurableSpanSink, ErrorLog
from .. import compression
from ..otlp import (
    Decoded,
    Malformed,
    decode_json_logs,
    decode_json_traces,
    decode_proto_logs,
    decode_proto_traces,
)

__all__ = [
    "BadRequest",
    "Overloaded",
    "Receiver",
    "ReceiverConfig",
    "ReceiverError",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
]

# the longest Retry-After asked while the store keeps failing (it doubles from retry_after)
MAX_STORE_RETRY_AFTER = 30.0
_log = logging.getLogger(__name__)
TRACES, LOGS = "traces", "logs"
MAX_REASONS = 3  # rejected-record reasons quoted in a partial-success message


class ReceiverError(Exception):
    """A request that is answered with an error: ``http_status``, ``grpc_code`` (a
    ``grpc.StatusCode`` name) and, for retryable ones, ``retry_after`` seconds."""

    http_status = 500
    grpc_code = "INTERNAL"
    retry_after: float | None = None

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retry_after is not None:
            self.retry_after = retry_after


class BadRequest(ReceiverError):
    """The body cannot be decoded as OTLP: never retried by clients."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class Unauthorized(ReceiverError):
    http_status = 401
    grpc_code = "UNAUTHENTICATED"


class TooLarge(ReceiverError):
    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class UnsupportedMediaType(ReceiverError):
    http_status = 415
    grpc_code = "INVALID_ARGUMENT"


class NotImplementedCoding(ReceiverError):
    """A transfer coding the receiver does not implement (RFC 9112 6.1: 501)."""

    http_status = 501
    grpc_code = "UNIMPLEMENTED"


class Overloaded(ReceiverError):
    """Too many requests at once or too much waiting for the disk: retry after a delay."""

    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"


class Unavailable(ReceiverError):
    """Draining, or the store is slow or failing: retry after a delay."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


@dataclass
class ReceiverConfig:
    """Receiver limits and behaviour (defaults suit a loopback sidecar)."""

    max_body_bytes: int = 64 << 20  # after decompression, as OTLP recommends
    # request bodies held at once (read, inflated and being decoded, which takes up to about
    # twenty times their size): past it a request waits its turn with 429. One request is
    # always taken, so the largest body allowed still passes alone
    max_inflight_bytes: int = 64 << 20
    max_inflight: int = 64
    max_queued: int = 200_000  # spans and log records received but not yet committed
    ack_timeout: float = 30.0
    retry_after: float = 1.0
    idle_seconds: float = 30.0  # assemble a trace whose root never arrives after this
    retain_seconds: float = 3600.0  # keep assembled spans this long for late arrivals
    # delete stored sessions not saved for this long (CheckpointStore.prune), every
    # prune_interval seconds; None keeps every session
    keep_seconds: float | None = None
    prune_interval: float = 3600.0
    assemble_interval: float = 0.5
    token: str | None = None  # bearer token required when set
    source: str = "otel"


class Hold:
    """The memory one request holds, in bytes: :meth:`grow` it before taking more (reading
    the body, inflating it); raises :class:`Overloaded` (429) when the requests being read
    and decoded would hold more than ``max_inflight_bytes`` together, unless no other
    request holds any (a body up to ``max_body_bytes`` always passes alone)."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.size = 0

    def grow(self, size: int) -> None:
        self.receiver._hold(self, size)


@dataclass
class _Item:
    spans: list[NormalizedSpan]
    logs: list[LogEvent]
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    @property
    def size(self) -> int:
        return len(self.spans) + len(self.logs)


@dataclass
class Stats:
    requests: int = 0
    spans_received: int = 0
    logs_received: int = 0
    spans_stored: int = 0
    logs_stored: int = 0
    rejected: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "errors": dict(self.errors)}


# the Collector's otlphttp exporter with `compression: zlib` sends the zlib stream it sends
# for `deflate`, named zlib (as the Collector's own receiver, this takes both names)
_ENCODING_NAMES = {"zlib": compression.DEFLATE}


class Receiver:
    """Decodes, admits and durably commits OTLP exports; assembles trajectories behind them."""

    def __init__(self, store: CheckpointStore, config: ReceiverConfig | None = None) -> None:
        self.store = store
        self.config = config or ReceiverConfig()
        self.sink = DurableSpanSink(
            store,
            source=self.config.source,
            idle_seconds=self.config.idle_seconds,
            retain_seconds=self.config.retain_seconds,
        )
        self.stats = Stats()
        # one traceback, then at most a line a minute, while the store fails every round
        self._commit_errors = ErrorLog("commit received spans (answered 503)", _log)
        self._assemble_errors = ErrorLog("assemble received traces (they wait; will retry)", _log)
        self._purge_errors = ErrorLog("purge assembled spans (will retry)", _log)
        self._prune_errors = ErrorLog("prune old sessions (will retry)", _log)
        self._store_failures = 0  # commits failed in a row: the Retry-After grows with them
        self._held_bytes = 0  # request bodies held in memory (Hold)
        self._lock = threading.Condition()
        self._queue: list[_Item] = []
        self._uncommitted = 0
        self._inflight = 0
        self._receiving = 0  # HTTP requests whose body is being read or handled
        self._accepting = False
        self._stop_writer = False
        self._stop_assembler = threading.Event()
        self._writer: threading.Thread | None = None
        self._assembler: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Receiver:
        """Start the writer and assembler threads and accept requests."""
        self._accepting = True
        self._writer = threading.Thread(
            target=self._write_loop, name="agent-replay-writer", daemon=True
        )
        self._assembler = threading.Thread(
            target=self._assemble_loop, name="agent-replay-assembler", daemon=True
        )
        self._writer.start()
        self._assembler.start()
        return self

    def drain(self, timeout: float = 30.0) -> None:
        """Stop accepting (new requests get 503), give in-flight requests ``timeout`` seconds
        to finish, commit everything queued, then assemble every waiting trace. Call after
        the transports stopped accepting. When it returns no receiver thread uses the store
        any more (the writer's last commit is bounded by the store's busy timeout)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._accepting = False
            while (self._inflight or self._receiving) and time.monotonic() < deadline:
                self._lock.wait(0.05)
            self._stop_writer = True
            self._lock.notify_all()
        # no timeouts on these joins: closing the store under a running thread would crash
        if self._writer is not None:
            self._writer.join()
        self._stop_assembler.set()
        if self._assembler is not None:
            self._assembler.join()
        try:
            self.sink.assemble_ready(force=True)
        except Exception:
            _log.exception("agent-replay: assembling on shutdown failed; spans stay pending")

    # -- admission --------------------------------------------------------------------------

    def check_token(self, authorization: str | None) -> None:
        """Raise :class:`Unauthorized` unless ``authorization`` is ``Bearer <token>`` (when a
        token is configured). Constant-time comparison."""
        token = self.config.token
        if not token:
            return
        presented = (authorization or "").strip()
        scheme, _, value = presented.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), token.encode()
        ):
            raise Unauthorized("missing or wrong bearer token")

    @contextlib.contextmanager
    def receiving(self) -> Iterator[bool]:
        """One HTTP request being read and handled: :meth:`drain` waits for it as for an
        admitted one (a body still arriving when the stop came is a request in progress).
        Yields whether it began before the drain, which :meth:`admit` then lets through."""
        with self._lock:
            self._receiving += 1
            began = self._accepting
        try:
            yield began
        finally:
            with self._lock:
                self._receiving -= 1
                self._lock.notify_all()

    @contextlib.contextmanager
    def admit(self, in_progress: bool = False) -> Iterator[None]:
        """Hold one of ``max_inflight`` request slots; raises :class:`Overloaded` when none
        is free and :class:`Unavailable` while draining (unless the request was
        ``in_progress`` when the drain began)."""
        with self._lock:
            if not self._accepting and not in_progress:
                raise Unavailable("shutting down", retry_after=self.config.retry_after)
            if self._inflight >= self.config.max_inflight:
                raise Overloaded(
                    f"more than {self.config.max_inflight} requests at once",
                    retry_after=self.config.retry_after,
                )
            self._inflight += 1
        try:
            yield
        finally:
            with self._lock:
                self._inflight -= 1
                self._lock.notify_all()

    # -- requests ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def holding(self) -> Iterator[Hold]:
        """The bytes one request holds in memory, counted against ``max_inflight_bytes``
        (see :class:`Hold`) until it is answered."""
        hold = Hold(self)
        try:
            yield hold
        finally:
            hold.grow(0)

    def _hold(self, hold: Hold, size: int) -> None:
        with self._lock:
            others = self._held_bytes - hold.size
            if size > hold.size and others and others + size > self.config.max_inflight_bytes:
                raise Overloaded(
                    f"{others} bytes of other requests are being read and decoded",
                    retry_after=self.config.retry_after,
                )
            self._held_bytes = others + size
            hold.size = size

    def room(self, hold: Hold) -> int:
        """How many more bytes ``hold``'s request may take now (to inflate its body into)."""
        config = self.config
        with self._lock:
            others = self._held_bytes - hold.size
        if not others:
            return config.max_body_bytes
        return max(0, min(config.max_body_bytes, config.max_inflight_bytes - others - hold.size))

    def decompress(self, body: bytes, encoding: str | None, hold: Hold | None = None) -> bytes:
        """The body after ``Content-Encoding`` (identity, gzip, deflate or its other name
        zlib, or zstd when a zstd codec is installed), within ``max_body_bytes``, and within
        what ``hold`` may grow to: a body that would inflate beyond that while other requests
        hold memory waits its turn (:class:`Overloaded`), as does one that is large already."""
        encoding = (encoding or "identity").strip().lower()
        encoding = _ENCODING_NAMES.get(encoding, encoding)
        if encoding in ("", "identity"):
            return body
        codecs = compression.available()
        if encoding not in codecs:
            hint = f"; for zstd, {compression.INSTALL_ZSTD}" if encoding == compression.ZSTD else ""
            raise UnsupportedMediaType(
                f"unsupported Content-Encoding {encoding!r} (use {', '.join(codecs)} or none{hint})"
            )
        cap = self.config.max_body_bytes
        if hold is None:
            return self._inflate(body, encoding, cap, cap)
        # room for what the body usually inflates to is taken before inflating it (a hundred
        # small bombs inflated at once held 3.4 GB when only the inflated size was counted);
        # a body that inflates further takes what the other requests leave, then tries again
        usual = min(cap, max(1 << 20, 16 * len(body)))
        hold.grow(len(body) + usual)
        try:
            inflated = self._inflate(body, encoding, usual, cap)
        except Overloaded:
            limit = min(cap, usual + self.room(hold))
            hold.grow(len(body) + limit)
            inflated = self._inflate(body, encoding, limit, cap)
        hold.grow(len(body) + len(inflated))
        return inflated

    def _inflate(self, body: bytes, encoding: str, limit: int, cap: int) -> bytes:
        """``body`` inflated within ``limit``: beyond it :class:`Overloaded` (another try may
        have more room) below ``cap``, :class:`TooLarge` at it."""
        try:
            return compression.decompress(body, encoding, limit)
        except compression.Inflated:
            if limit < cap:
                raise Overloaded(
                    "the body inflates beyond the memory other requests leave free",
                    retry_after=self.config.retry_after,
                ) from None
            raise TooLarge(f"body inflates beyond the {cap}-byte limit") from None
        except compression.Undecodable as exc:
            raise BadRequest(f"request body: {exc}") from None

    def export_proto(self, signal: str, body: bytes) -> bytes:
        """Handle a protobuf-encoded export; returns the serialized response."""
        cls = ExportTraceServiceRequest if signal == TRACES else ExportLogsServiceRequest
        try:
            message = cls.FromString(body)
        except DecodeError as exc:
            raise BadRequest(f"body is not a protobuf {cls.__name__} ({exc})") from None
        return self.export_message(signal, message).SerializeToString()

    def export_message(self, signal: str, message: Any) -> Any:
        """Handle a parsed ``Export*ServiceRequest`` (what gRPC delivers)."""
        try:
            decoded = (
                decode_proto_traces(message) if signal == TRACES else decode_proto_logs(message)
            )
        except Malformed as exc:
            raise BadRequest(str(exc)) from None
        rejected, reason = self._commit(decoded)
        if signal == TRACES:
            partial = ExportTracePartialSuccess(rejected_spans=rejected, error_message=reason)
            return ExportTraceServiceResponse(partial_success=partial if rejected else None)
        partial_logs = ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=reason)
        return ExportLogsServiceResponse(partial_success=partial_logs if rejected else None)

    def export_json(self, signal: str, body: bytes) -> bytes:
        """Handle an OTLP/JSON export; returns the JSON response body."""
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise BadRequest(f"body is not JSON ({exc})") from None
        spans, logs = ("resourceSpans", "resource_spans"), ("resourceLogs", "resource_logs")
        wanted, other = (spans, logs) if signal == TRACES else (logs, spans)
        if (
            isinstance(doc, dict)
            and any(key in doc for key in other)
            and not any(key in doc for key in wanted)
        ):
            path, sent = ("/v1/logs", "logs") if signal == TRACES else ("/v1/traces", "traces")
            raise BadRequest(f"this is a {sent} request: post it to {path}")
        try:
            decoded = decode_json_traces(doc) if signal == TRACES else decode_json_logs(doc)
        except Malformed as exc:
            raise BadRequest(str(exc)) from None
        except RecursionError:
            raise BadRequest("body is nested too deeply") from None
        rejected, reason = self._commit(decoded)
        if not rejected:
            return b"{}"
        key = "rejectedSpans" if signal == TRACES else "rejectedLogRecords"
        # int64 fields are strings in proto3 JSON
        partial = {key: str(rejected), "errorMessage": reason}
        return json.dumps({"partialSuccess": partial}).encode()

    def _commit(self, decoded: Decoded) -> tuple[int, str]:
        """Store what decoded; ``(rejected records, reason)`` for a partial success."""
        rejected = len(decoded.rejected)
        reason = "; ".join(decoded.rejected[:MAX_REASONS])
        if rejected > MAX_REASONS:
            reason += f"; and {rejected - MAX_REASONS} more"
        with self._lock:
            self.stats.requests += 1
            self.stats.rejected += rejected
            self.stats.spans_received += len(decoded.spans)
            self.stats.logs_received += len(decoded.logs)
        # a log record outside any span (no trace and span id) has no step to join: it is
        # rejected like a malformed one, so that the sender knows it is not kept
        logs = [log for log in decoded.logs if log.trace_id and log.span_id]
        if len(logs) < len(decoded.logs):
            unjoinable = len(decoded.logs) - len(logs)
            rejected += unjoinable
            said = (
                f"{unjoinable} log record(s) without a trace and span id: agent-replay keeps "
                "log records for the GenAI span they belong to, and these name none"
            )
            reason = f"{reason}; {said}" if reason else said
            with self._lock:
                self.stats.rejected += unjoinable
        if rejected and not decoded.spans and not logs:
            # every record rejected, whatever the reason: 400 / INVALID_ARGUMENT, not a
            # success that keeps nothing (logs of events outside any span got 200)
            raise BadRequest(f"no valid record: {reason}")
        if decoded.spans or logs:
            self._submit(_Item(decoded.spans, logs))
        return rejected, reason

    def _submit(self, item: _Item) -> None:
        config = self.config
        with self._lock:
            # one request larger than the queue is still accepted when nothing waits
            if self._uncommitted and self._uncommitted + item.size > config.max_queued:
                raise Overloaded(
                    f"{self._uncommitted} records are waiting for the disk",
                    retry_after=config.retry_after,
                )
            self._queue.append(item)
            self._uncommitted += item.size
            self._lock.notify_all()
        if not item.done.wait(config.ack_timeout):
            raise Unavailable(
                "the store did not commit in time; not acknowledged (a retry is safe)",
                retry_after=config.retry_after,
            )
        if item.error is not None:
            # a store that keeps failing (a full disk) asks clients to wait longer each time:
            # a fixed second let an exporter spend its six retries in five
            backoff = config.retry_after * 2 ** max(0, self._store_failures - 1)
            raise Unavailable(
                f"the store failed ({type(item.error).__name__}: {item.error})",
                retry_after=min(MAX_STORE_RETRY_AFTER, backoff),
            )

    # -- threads ----------------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stop_writer:
                    self._lock.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            spans = [s for item in batch for s in item.spans]
            logs = [log for item in batch for log in item.logs]
            error: BaseException | None = None
            try:
                new_spans, new_logs = self.sink.add(spans, logs)
            except Exception as exc:  # answered as 503: the client retries
                self._commit_errors.record()
                error = exc
            with self._lock:
                self._uncommitted -= sum(item.size for item in batch)
                self._store_failures = 0 if error is None else self._store_failures + 1
                if error is None:
                    self.stats.spans_stored += new_spans
                    self.stats.logs_stored += new_logs
                else:
                    self.count_error(error)  # the lock is reentrant
            for item in batch:
                item.error = error
                item.done.set()

    def _assemble_loop(self) -> None:
        last_purge = last_prune = time.monotonic()
        keep = self.config.keep_seconds
        while not self._stop_assembler.wait(self.config.assemble_interval):
            try:
                self.sink.assemble_ready()
            except Exception:
                self._assemble_errors.record()
            if time.monotonic() - last_purge > 60:
                try:
                    self.sink.purge()
                except Exception:
                    self._purge_errors.record()
                last_purge = time.monotonic()
            if keep is not None and time.monotonic() - last_prune > self.config.prune_interval:
                self._prune(keep)
                last_prune = time.monotonic()

    def _prune(self, keep_seconds: float) -> None:
        """Delete the sessions not saved for ``keep_seconds`` and what only they used."""
        try:
            result = self.store.prune(saved_before_ns=time.time_ns() - int(keep_seconds * 1e9))
        except Exception:
            self._prune_errors.record()
            return
        if result.sessions:
            _log.info(
                "agent-replay: pruned %d session(s) not saved for %.0f s (%d step rows, %d blobs)",
                len(result.sessions),
                keep_seconds,
                result.steps,
                result.blobs,
            )

    def count_error(self, error: BaseException) -> None:
        """Count a failed request or commit by its exception type (for the collect summary)."""
        self.count(type(error).__name__)

    def count(self, kind: str) -> None:
        """Count a failed request of ``kind`` (for the collect summary): what a transport
        refuses or cuts off before the receiver sees the request (a malformed request line,
        a connection shut to make room) is counted under a name of its own."""
        with self._lock:
            self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1

    @property
    def draining(self) -> bool:
        """Whether :meth:`drain` has begun (new requests get 503)."""
        with self._lock:
            return not self._accepting

    def snapshot(self) -> dict[str, Any]:
        """Counters for logs and the ``collect`` summary."""
        with self._lock:
            out = self.stats.to_dict()
            out["inflight"] = self._inflight
            out["uncommitted"] = self._uncommitted
        out["sessions_written"] = self.sink.sessions_written
        return out
