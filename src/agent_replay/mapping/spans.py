"""The normalised span: one shape for spans from the SDK, OTLP files, the receiver and exports.

Every source converts to :class:`NormalizedSpan` first (ids as lowercase hex, times in ns,
attribute values as plain Python data with OTLP ``kvlistValue`` as dicts and arrays as lists);
the dialect mapping and the trajectory assembly only ever see this shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "LogEvent",
    "NormalizedSpan",
    "SpanEvent",
    "SpanLink",
    "attach_logs",
    "from_readable_span",
    "log_from_dict",
    "log_to_dict",
    "plain_value",
    "span_from_dict",
    "span_to_dict",
    "storable",
]


@dataclass(frozen=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanLink:
    """A link from a span to another span (possibly in another trace)."""

    trace_id: str
    span_id: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LogEvent:
    """A log record joined to a span (GenAI content in event-only capture modes).

    ``name`` is the record's ``event_name`` (older SDKs: its ``event.name`` attribute);
    ``trace_id`` / ``span_id`` say which span it belongs to (empty when it names none).
    """

    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None
    trace_id: str = ""
    span_id: str = ""


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
    links: Sequence[SpanLink] = ()

    @classmethod
    def fast(
        cls,
        trace_id: str,
        span_id: str,
        name: str,
        parent_span_id: str | None,
        parent_is_remote: bool,
        kind: int,
        start_ns: int,
        end_ns: int,
        status_code: int,
        status_message: str,
        attributes: Mapping[str, Any],
        events: Sequence[SpanEvent],
        resource: Mapping[str, Any],
        scope_name: str,
        scope_version: str,
        dropped_attributes: int,
        dropped_events: int,
        links: Sequence[SpanLink] = (),
    ) -> NormalizedSpan:
        """The same span as the constructor, for the decoders' hot loops: a frozen
        dataclass's ``__init__`` sets each field through ``object.__setattr__``, several
        times slower than filling ``__dict__`` directly. Arguments are not checked."""
        span = object.__new__(cls)
        span.__dict__.update(
            trace_id=trace_id,
            span_id=span_id,
            name=name,
            parent_span_id=parent_span_id,
            parent_is_remote=parent_is_remote,
            kind=kind,
            start_ns=start_ns,
            end_ns=end_ns,
            status_code=status_code,
            status_message=status_message,
            attributes=attributes,
            events=events,
            logs=(),
            resource=resource,
            scope_name=scope_name,
            scope_version=scope_version,
            dropped_attributes=dropped_attributes,
            dropped_events=dropped_events,
            links=links,
        )
        return span


def plain_value(value: Any) -> Any:
    """An SDK attribute value as plain data (tuples become lists)."""
    if isinstance(value, (str, int, float)):  # most values: no Mapping check (an ABC, slow)
        return value
    if isinstance(value, (tuple, list)):
        return [plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain_value(v) for k, v in value.items()}
    return value


_KIND = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}
# the last SDK Resource converted and its attributes: the spans of one TracerProvider share one
# Resource, so consecutive spans share one converted dict (as spans decoded from one OTLP
# ResourceSpans do) instead of converting it again for each
_last_resource: tuple[Any, dict[str, Any]] = (None, {})


def _resource_attributes(resource: Any) -> dict[str, Any]:
    global _last_resource
    converted, attributes = _last_resource
    if resource is not converted:
        items = resource.attributes.items() if resource is not None else ()
        attributes = {k: plain_value(v) for k, v in items}
        _last_resource = (resource, attributes)
    return attributes


def from_readable_span(span: Any) -> NormalizedSpan:
    """Convert an SDK ``ReadableSpan`` (what a SpanProcessor receives)."""
    ctx = span.context
    parent = span.parent
    scope = span.instrumentation_scope
    status = span.status
    return NormalizedSpan.fast(
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
        resource=_resource_attributes(span.resource),
        scope_name=scope.name if scope is not None else "",
        scope_version=(scope.version or "") if scope is not None else "",
        dropped_attributes=getattr(span, "dropped_attributes", 0) or 0,
        dropped_events=getattr(span, "dropped_events", 0) or 0,
        links=tuple(
            SpanLink(
                format(link.context.trace_id, "032x"),
                format(link.context.span_id, "016x"),
                {k: plain_value(v) for k, v in (link.attributes or {}).items()},
            )
            for link in span.links or ()
        ),
    )


def attach_logs(
    spans: Iterable[NormalizedSpan], logs: Iterable[LogEvent]
) -> tuple[list[NormalizedSpan], list[LogEvent]]:
    """Join log records to their spans by trace id and span id.

    Returns the spans (those with records get them appended to ``logs``, in time order) and
    the records whose span is not among ``spans`` (orphans: the caller decides whether to
    wait for the span, as the receiver does, or to report them, as file imports do).
    """
    by_span: dict[tuple[str, str], list[LogEvent]] = {}
    for log in logs:
        by_span.setdefault((log.trace_id, log.span_id), []).append(log)
    if not by_span:
        return list(spans), []
    out = []
    for span in spans:
        joined = by_span.pop((span.trace_id, span.span_id), None)
        if joined:
            merged = sorted((*span.logs, *joined), key=lambda e: e.time_ns)
            span = replace(span, logs=tuple(merged))
        out.append(span)
    orphans = [log for group in by_span.values() for log in group]
    return out, orphans


# -- a compact plain-data form, for the receiver's durable pending table -----------------------


def span_to_dict(span: NormalizedSpan) -> dict[str, Any]:
    """``span`` as JSON-ready plain data (attribute values are already plain)."""
    data: dict[str, Any] = {
        "t": span.trace_id,
        "s": span.span_id,
        "n": span.name,
        "k": span.kind,
        "b": span.start_ns,
        "e": span.end_ns,
        "a": dict(span.attributes),
    }
    if span.parent_span_id:
        data["p"] = span.parent_span_id
    if span.parent_is_remote:
        data["pr"] = True
    if span.status_code or span.status_message:
        data["st"] = [span.status_code, span.status_message]
    if span.events:
        data["ev"] = [[e.name, e.time_ns, dict(e.attributes)] for e in span.events]
    if span.logs:
        data["lg"] = [log_to_dict(log) for log in span.logs]
    if span.resource:
        data["r"] = dict(span.resource)
    if span.scope_name or span.scope_version:
        data["sc"] = [span.scope_name, span.scope_version]
    if span.dropped_attributes or span.dropped_events:
        data["d"] = [span.dropped_attributes, span.dropped_events]
    if span.links:
        data["ln"] = [[link.trace_id, link.span_id, dict(link.attributes)] for link in span.links]
    return data


def span_from_dict(data: Mapping[str, Any]) -> NormalizedSpan:
    """Inverse of :func:`span_to_dict`."""
    status = data.get("st") or (0, "")
    scope = data.get("sc") or ("", "")
    dropped = data.get("d") or (0, 0)
    return NormalizedSpan(
        trace_id=data["t"],
        span_id=data["s"],
        name=data["n"],
        parent_span_id=data.get("p"),
        parent_is_remote=bool(data.get("pr")),
        kind=data.get("k", 1),
        start_ns=data.get("b", 0),
        end_ns=data.get("e", 0),
        status_code=status[0],
        status_message=status[1],
        attributes=data.get("a") or {},
        events=tuple(SpanEvent(e[0], e[1], e[2]) for e in data.get("ev") or ()),
        logs=tuple(log_from_dict(log) for log in data.get("lg") or ()),
        resource=data.get("r") or {},
        scope_name=scope[0],
        scope_version=scope[1],
        dropped_attributes=dropped[0],
        dropped_events=dropped[1],
        links=tuple(SpanLink(t, s, a) for t, s, a in data.get("ln") or ()),
    )


def log_to_dict(log: LogEvent) -> dict[str, Any]:
    return {
        "n": log.name,
        "ts": log.time_ns,
        "a": dict(log.attributes),
        "b": log.body,
        "t": log.trace_id,
        "s": log.span_id,
    }


def log_from_dict(data: Mapping[str, Any]) -> LogEvent:
    return LogEvent(
        name=data.get("n", ""),
        time_ns=data.get("ts", 0),
        attributes=data.get("a") or {},
        body=data.get("b"),
        trace_id=data.get("t", ""),
        span_id=data.get("s", ""),
    )


def storable(span: NormalizedSpan) -> NormalizedSpan:
    """``span`` with text that cannot be stored as UTF-8 (lone surrogates: any SDK user can put
    one in an attribute or a span name, and OTLP/JSON can carry one as ``\\ud800``) escaped,
    so one such span cannot fail a whole trace or batch. Every span is mapped through this."""
    if not (
        _has_bad_text(span.attributes)
        or _has_bad_text(span.name)
        or _has_bad_text(span.status_message)
        or _has_bad_text(span.resource)
        or any(_has_bad_text(e.name) or _has_bad_text(e.attributes) for e in span.events)
    ):
        return span  # the usual case: nothing is copied
    return replace(
        span,
        name=_clean(span.name),
        status_message=_clean(span.status_message),
        attributes=_clean(span.attributes),
        events=tuple(
            SpanEvent(_clean(e.name), e.time_ns, _clean(e.attributes)) for e in span.events
        ),
        resource=_clean(span.resource),
    )


def _has_bad_text(value: Any) -> bool:
    if isinstance(value, str):
        if value.isascii():
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_bad_text(k) or _has_bad_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_bad_text(v) for v in value)
    return False


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
