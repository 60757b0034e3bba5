"""The normalised span: one shape for spans from the SDK, OTLP files, the receiver and exports.

Every source converts to :class:`NormalizedSpan` first (ids as lowercase hex, times in ns,
attribute values as plain Python data with OTLP ``kvlistValue`` as dicts and arrays as lists);
the dialect mapping and the trajectory assembly only ever see this shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LogEvent", "NormalizedSpan", "SpanEvent", "from_readable_span", "plain_value"]


@dataclass(frozen=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LogEvent:
    """A log record joined to a span (GenAI content in event-only capture modes)."""

    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None


@dataclass(frozen=True)
class NormalizedSpan:
    """A finished span, source-independent. ``kind`` uses OTLP numbering (1 internal ... 5
    consumer, 0 unspecified); ``status_code`` 0 unset, 1 ok, 2 error."""

    trace_id: str
    span_id: str
    name: str
    parent_span_id: str | None = None
    parent_is_remote: bool = False
    kind: int = 1
    start_ns: int = 0
    end_ns: int = 0
    status_code: int = 0
    status_message: str = ""
    attributes: Mapping[str, Any] = field(default_factory=dict)
    events: Sequence[SpanEvent] = ()
    logs: Sequence[LogEvent] = ()
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope_name: str = ""
    scope_version: str = ""
    dropped_attributes: int = 0
    dropped_events: int = 0


def plain_value(value: Any) -> Any:
    """An SDK attribute value as plain data (tuples become lists)."""
    if isinstance(value, (tuple, list)):
        return [plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain_value(v) for k, v in value.items()}
    return value


_KIND = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}


def from_readable_span(span: Any) -> NormalizedSpan:
    """Convert an SDK ``ReadableSpan`` (what a SpanProcessor receives)."""
    ctx = span.context
    parent = span.parent
    scope = span.instrumentation_scope
    status = span.status
    resource = span.resource
    return NormalizedSpan(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        name=span.name,
        parent_span_id=format(parent.span_id, "016x") if parent is not None else None,
        parent_is_remote=bool(parent is not None and parent.is_remote),
        kind=_KIND.get(span.kind.name, 0),
        start_ns=span.start_time or 0,
        end_ns=span.end_time or 0,
        status_code=_STATUS.get(status.status_code.name, 0),
        status_message=status.description or "",
        attributes={k: plain_value(v) for k, v in (span.attributes or {}).items()},
        events=tuple(
            SpanEvent(
                e.name,
                e.timestamp or 0,
                {k: plain_value(v) for k, v in (e.attributes or {}).items()},
            )
            for e in span.events
        ),
        resource={k: plain_value(v) for k, v in (resource.attributes if resource else {}).items()},
        scope_name=scope.name if scope is not None else "",
        scope_version=(scope.version or "") if scope is not None else "",
        dropped_attributes=getattr(span, "dropped_attributes", 0) or 0,
        dropped_events=getattr(span, "dropped_events", 0) or 0,
    )
