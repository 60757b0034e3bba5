"""OTLP traces and logs, JSON and protobuf, decoded into :class:`NormalizedSpan` / ``LogEvent``.

OTLP/JSON: hex trace and span ids (any case), 64-bit integers as decimal strings or numbers,
enums as integers or as their names (``SPAN_KIND_CLIENT``, which the spec forbids but
hand-written payloads use), lowerCamelCase keys (snake_case accepted too), unknown fields
ignored. A file is one ``ExportTraceServiceRequest`` / ``TracesData`` document (or a JSON
array of them), or JSON Lines with one per line as the Collector's file exporter writes; the
logs signal (``resourceLogs``) is read the same way.

OTLP protobuf: one ``ExportTraceServiceRequest`` / ``TracesData`` message (the two are
wire-identical), or a stream of them each prefixed by its length as a 4-byte big-endian
unsigned integer, which is what the Collector's file exporter writes with ``format: proto``
(``exportMessageAsBuffer`` in opentelemetry-collector-contrib ``exporter/fileexporter``). With
``compression: zstd`` that exporter writes every message so, whatever its ``format``, each one
a zstd frame of a protobuf message or an OTLP/JSON document; those are read too.
Logs requests are recognised because their records do not parse as spans.

Attribute values become plain data: ``kvlistValue`` → dict, ``arrayValue`` → list,
``bytesValue`` → its base64 text (so a span stays JSON-representable), an empty value → None.

Errors: a document that is not OTLP at all raises :class:`ImportFormatError` naming the source
and position; a single malformed span or log record (bad id, wrong type inside it) is
*rejected*: it is skipped and described in :attr:`Decoded.rejected`, as OTLP's partial success
does, and the rest of the document is kept. Nothing here touches shared state, so every
function is safe to call from any thread.
"""

from __future__ import annotations

import base64
import codecs
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from ..errors import ImportFormatError
from ..mapping.spans import LogEvent, NormalizedSpan, SpanEvent, SpanLink
from . import compression
from ._common import Reject

__all__ = [
    "Decoded",
    "Malformed",
    "decode_json_document",
    "decode_json_logs",
    "decode_json_traces",
    "decode_messages",
    "decode_proto_logs",
    "decode_proto_traces",
    "length_prefixed",
    "parse_json_bytes",
    "read_otlp_json",
    "read_otlp_proto",
    "span_from_json",
    "to_otlp_json",
]

MAX_DEPTH = 64  # AnyValue nesting accepted; deeper is malformed (and would exhaust the stack)
_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
    "UNSPECIFIED": 0,
    "INTERNAL": 1,
    "SERVER": 2,
    "CLIENT": 3,
    "PRODUCER": 4,
    "CONSUMER": 5,
}
_STATUS = {
    "STATUS_CODE_UNSET": 0,
    "STATUS_CODE_OK": 1,
    "STATUS_CODE_ERROR": 2,
    "UNSET": 0,
    "OK": 1,
    "ERROR": 2,
}
_REMOTE_PARENT = 0x300  # SpanFlags: CONTEXT_HAS_IS_REMOTE | CONTEXT_IS_REMOTE


@dataclass
class Decoded:
    """What one document (or request) held: spans, log records, and the rejected records
    (each ``"<position>: <reason>"``)."""

    spans: list[NormalizedSpan] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    error: ImportFormatError | None = None  # the first document that could not be read

    def unreadable(self, source: str) -> ImportFormatError | None:
        """Why nothing could be read, when nothing was: the first document's error, or the
        first rejected record."""
        if self.spans or self.logs:
            return None
        if self.error is not None:
            return self.error
        if self.rejected:
            return ImportFormatError(
                f"no readable span or log record ({self.rejected[0]})", source=source
            )
        return None

    def extend(self, other: Decoded, position: str = "") -> None:
        """Add ``other``'s records; its rejections are prefixed with ``position``."""
        self.spans.extend(other.spans)
        self.logs.extend(other.logs)
        self.rejected.extend(f"{position}: {r}" if position else r for r in other.rejected)


class _BadRecord(Exception):
    """One span or record is malformed; the decoder skips it and says why."""


class Malformed(Reject):
    """The document itself is not OTLP; ``position`` says where (without the source, which
    only the caller knows: :meth:`located` makes it an :class:`ImportFormatError`)."""

    def __str__(self) -> str:
        return f"{self.message} (at {self.position})" if self.position else self.message


# -- shared scalar checks ---------------------------------------------------------------------


_ZERO_HEX = {32: "0" * 32, 16: "0" * 16}
_ZERO_BYTES = {16: bytes(16), 8: bytes(8)}


def _hex_id(value: Any, length: int, what: str) -> str:
    if type(value) is not str or len(value) != length:
        raise _BadRecord(f"{what} must be {length} hex digits, got {_short(value)}")
    lowered = value.lower()
    try:
        bytes.fromhex(lowered)  # C-speed validation; the hex text is what we keep
    except ValueError:
        raise _BadRecord(f"{what} must be {length} hex digits, got {_short(value)}") from None
    if lowered == _ZERO_HEX[length]:
        raise _BadRecord(f"{what} must not be all zeros")
    return lowered


def _bytes_id(value: bytes, length: int, what: str) -> str:
    if len(value) != length:
        raise _BadRecord(f"{what} must be {length} bytes, got {len(value)}")
    if value == _ZERO_BYTES[length]:
        raise _BadRecord(f"{what} must not be all zeros")
    return value.hex()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _uint(value: Any, what: str) -> int:
    if value is None:
        return 0
    if type(value) is int:
        number = value
    elif type(value) is str:
        try:
            number = int(value)
        except ValueError:
            raise _BadRecord(f"{what} must be an integer, got {_short(value)}") from None
    else:
        raise _BadRecord(f"{what} must be an integer, got {_short(value)}")
    if number < 0 or number >= 1 << 64:
        raise _BadRecord(f"{what} out of range: {number}")
    return number


def _enum(value: Any, names: dict[str, int], what: str) -> int:
    if value is None:
        return 0
    if type(value) is int:
        return value
    if type(value) is str:
        if value in names:
            return names[value]
        if value.isdigit():
            return int(value)
    raise _BadRecord(f"{what} must be an enum number or name, got {_short(value)}")


# -- OTLP/JSON ------------------------------------------------------------------------------


def _int_value(x: Any, depth: int) -> int:
    if type(x) is int:
        return x
    if type(x) is str:
        try:
            return int(x)
        except ValueError:
            pass
    raise _BadRecord(f"intValue must be an integer, got {_short(x)}")


_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _double_value(x: Any, depth: int) -> float:
    if type(x) is float or type(x) is int:
        return float(x)
    if type(x) is str and x in _SPECIAL_DOUBLES:
        return _SPECIAL_DOUBLES[x]
    raise _BadRecord(f"doubleValue must be a number, got {_short(x)}")


def _bool_value(x: Any, depth: int) -> bool:
    if type(x) is bool:
        return x
    raise _BadRecord(f"boolValue must be true or false, got {_short(x)}")


def _string_value(x: Any, depth: int) -> str:
    if type(x) is str:
        return x
    raise _BadRecord(f"stringValue must be a string, got {_short(x)}")


def _bytes_value(x: Any, depth: int) -> str:
    if type(x) is str:
        return x
    raise _BadRecord(f"bytesValue must be base64 text, got {_short(x)}")


def _array_value(x: Any, depth: int) -> list[Any]:
    if type(x) is not dict:
        raise _BadRecord("arrayValue must be an object")
    values = x.get("values") or []
    if type(values) is not list:
        raise _BadRecord("arrayValue.values must be a list")
    return [_any(v, depth + 1) for v in values]


def _kvlist_value(x: Any, depth: int) -> dict[str, Any]:
    if type(x) is not dict:
        raise _BadRecord("kvlistValue must be an object")
    return _attributes(x.get("values"), depth + 1)


_ANY = {
    "stringValue": _string_value,
    "intValue": _int_value,
    "doubleValue": _double_value,
    "boolValue": _bool_value,
    "arrayValue": _array_value,
    "kvlistValue": _kvlist_value,
    "bytesValue": _bytes_value,
    "string_value": _string_value,
    "int_value": _int_value,
    "double_value": _double_value,
    "bool_value": _bool_value,
    "array_value": _array_value,
    "kvlist_value": _kvlist_value,
    "bytes_value": _bytes_value,
}


def _any(value: Any, depth: int = 0) -> Any:
    """A JSON ``AnyValue`` as plain data (``{}`` / null → None; unknown keys ignored)."""
    if depth > MAX_DEPTH:
        raise _BadRecord(f"attribute value nested deeper than {MAX_DEPTH} levels")
    if type(value) is not dict:
        if value is None:
            return None
        raise _BadRecord(f"AnyValue must be an object, got {_short(value)}")
    for key, inner in value.items():
        decode = _ANY.get(key)
        if decode is not None:
            return decode(inner, depth)
    return None


def _attributes(kvs: Any, depth: int = 0) -> dict[str, Any]:
    """A JSON ``KeyValue`` list as a dict. The common case (a plain string value) is inlined:
    this loop is the hot path of every import."""
    if not kvs:
        return {}
    if type(kvs) is not list:
        raise _BadRecord(f"attributes must be a list, got {_short(kvs)}")
    out: dict[str, Any] = {}
    for kv in kvs:
        try:
            key = kv["key"]
            value = kv["value"]
            text = value.get("stringValue")
        except (KeyError, TypeError, AttributeError):
            key, value, text = _slow_key_value(kv)
        if type(key) is not str:
            raise _BadRecord(f"attribute key must be a string, got {_short(key)}")
        if type(text) is str and len(value) == 1:
            out[key] = text
        else:
            out[key] = _any(value, depth)
    return out


def _slow_key_value(kv: Any) -> tuple[Any, Any, None]:
    """``(key, value, None)`` of a KeyValue the fast path could not read (missing value,
    not an object): the value then goes through :func:`_any`, which says what is wrong."""
    if type(kv) is not dict:
        raise _BadRecord(f"attribute must be an object, got {_short(kv)}")
    return kv.get("key"), kv.get("value"), None


def _join(prefix: str, path: str) -> str:
    """A path inside a document: ``[2].resourceSpans[0]``."""
    return f"{prefix}.{path}" if prefix and not path.startswith("[") else prefix + path


def _get(obj: dict, camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _list(obj: Any, camel: str, snake: str, where: str) -> list:
    if type(obj) is not dict:
        raise Malformed("must be an object", where)
    value = _get(obj, camel, snake)
    if value is None:
        return []
    if type(value) is not list:
        raise Malformed(f"{camel} must be a list", where)
    return value


_SNAKE = {
    "traceId": "trace_id",
    "spanId": "span_id",
    "parentSpanId": "parent_span_id",
    "startTimeUnixNano": "start_time_unix_nano",
    "endTimeUnixNano": "end_time_unix_nano",
    "droppedAttributesCount": "dropped_attributes_count",
    "droppedEventsCount": "dropped_events_count",
}


def _camel(s: dict) -> dict:
    """A span written with proto field names (snake_case) under the JSON names."""
    return {**s, **{camel: s[snake] for camel, snake in _SNAKE.items() if snake in s}}


def _json_items(value: Any, what: str, read: Callable[[Any], Any]) -> tuple:
    """A span's ``events`` / ``links``: each item read, or none when absent."""
    if not value:
        return ()
    if type(value) is not list:
        raise _BadRecord(f"{what} must be a list")
    return tuple(read(item) for item in value)


def _json_span(s: Any, resource: dict, scope_name: str, scope_version: str) -> NormalizedSpan:
    # the hot path of every OTLP/JSON import: plain dict lookups, checks only where a wrong
    # type would otherwise slip through into the span
    if type(s) is not dict:
        raise _BadRecord(f"span must be an object, got {_short(s)}")
    if "traceId" not in s and "trace_id" in s:
        s = _camel(s)
    get = s.get
    parent = get("parentSpanId")
    flags = get("flags") or 0
    status = get("status")
    if status:
        if type(status) is not dict:
            raise _BadRecord("status must be an object")
        message = status.get("message") or ""
        if type(message) is not str:
            raise _BadRecord("status.message must be a string")
        code = _enum(status.get("code"), _STATUS, "status.code")
    else:
        message, code = "", 0
    name = get("name") or ""
    if type(name) is not str:
        raise _BadRecord("name must be a string")
    events = _json_items(get("events"), "events", _json_event)
    kind = get("kind")
    dropped = get("droppedAttributesCount")
    dropped_events = get("droppedEventsCount")
    links = _json_items(get("links"), "links", _json_link)
    return NormalizedSpan.fast(
        _hex_id(get("traceId"), 32, "traceId"),
        _hex_id(get("spanId"), 16, "spanId"),
        name,
        _hex_id(parent, 16, "parentSpanId") if parent else None,
        type(flags) is int and flags & _REMOTE_PARENT == _REMOTE_PARENT,
        kind if type(kind) is int else _enum(kind, _KINDS, "kind"),
        _uint(get("startTimeUnixNano"), "startTimeUnixNano"),
        _uint(get("endTimeUnixNano"), "endTimeUnixNano"),
        code,
        message,
        _attributes(get("attributes")),
        events,
        resource,
        scope_name,
        scope_version,
        _uint(dropped, "droppedAttributesCount") if dropped else 0,
        _uint(dropped_events, "droppedEventsCount") if dropped_events else 0,
        links,
    )


def _json_link(link: Any) -> SpanLink:
    if type(link) is not dict:
        raise _BadRecord(f"link must be an object, got {_short(link)}")
    if "traceId" not in link and "trace_id" in link:
        link = _camel(link)
    return SpanLink(
        _hex_id(link.get("traceId"), 32, "links.traceId"),
        _hex_id(link.get("spanId"), 16, "links.spanId"),
        _attributes(link.get("attributes")),
    )


def span_from_json(
    span: Any, resource: dict | None = None, scope_name: str = "", scope_version: str = ""
) -> NormalizedSpan:
    """One OTLP/JSON span object (``{"traceId", "spanId", ...}``) as a NormalizedSpan;
    raises :class:`Malformed` naming what is wrong."""
    try:
        return _json_span(span, resource or {}, scope_name, scope_version)
    except _BadRecord as exc:
        raise Malformed(str(exc)) from None


def _json_event(e: Any) -> SpanEvent:
    if type(e) is not dict:
        raise _BadRecord("event must be an object")
    name = e.get("name") or ""
    if type(name) is not str:
        raise _BadRecord("event name must be a string")
    return SpanEvent(
        name,
        _uint(_get(e, "timeUnixNano", "time_unix_nano"), "timeUnixNano"),
        _attributes(e.get("attributes")),
    )


def _scope(obj: dict, where: str) -> tuple[str, str]:
    scope = obj.get("scope") or {}
    if type(scope) is not dict:
        raise Malformed("scope must be an object", where)
    name, version = scope.get("name") or "", scope.get("version") or ""
    if type(name) is not str or type(version) is not str:
        raise Malformed("scope name and version must be strings", where)
    return name, version


def _resource(obj: dict, where: str) -> dict[str, Any]:
    resource = obj.get("resource") or {}
    if type(resource) is not dict:
        raise Malformed("resource must be an object", where)
    try:
        return _attributes(resource.get("attributes"))
    except _BadRecord as exc:
        raise Malformed(f"resource: {exc}", where) from None


_TRACES = ("resourceSpans", "resource_spans", "scopeSpans", "scope_spans", "spans", "spans")
_LOGS = ("resourceLogs", "resource_logs", "scopeLogs", "scope_logs", "logRecords", "log_records")


def _decode_json(
    doc: Any, prefix: str, keys: tuple[str, ...], decode: Callable[..., Any], out: list
) -> list[str]:
    """Walk resource → scope → record (``keys``: the camel and snake names of each level),
    appending ``decode(record, resource, scope_name, scope_version)`` to ``out``; returns the
    records rejected (``"<position>: <reason>"``)."""
    resources, resources_snake, scopes, scopes_snake, records, records_snake = keys
    rejected: list[str] = []
    for i, rs in enumerate(_list(doc, resources, resources_snake, prefix)):
        where = _join(prefix, f"{resources}[{i}]")
        resource = _resource(rs, where) if type(rs) is dict else {}
        for j, ss in enumerate(_list(rs, scopes, scopes_snake, where)):
            swhere = f"{where}.{scopes}[{j}]"
            scope_name, scope_version = _scope(ss, swhere) if type(ss) is dict else ("", "")
            for k, record in enumerate(_list(ss, records, records_snake, swhere)):
                try:
                    out.append(decode(record, resource, scope_name, scope_version))
                except _BadRecord as exc:
                    rejected.append(f"{swhere}.{records}[{k}]: {exc}")
                except RecursionError:
                    rejected.append(f"{swhere}.{records}[{k}]: nested too deeply")
    return rejected


def decode_json_traces(doc: Any, prefix: str = "") -> Decoded:
    """Spans of one OTLP/JSON traces document (``{"resourceSpans": [...]}``)."""
    out = Decoded()
    out.rejected = _decode_json(doc, prefix, _TRACES, _json_span, out.spans)
    return out


def _json_log(r: Any, *_scope: Any) -> LogEvent:
    # the resource and scope arguments of _decode_json: a LogEvent keeps neither
    if type(r) is not dict:
        raise _BadRecord("logRecord must be an object")
    trace_id = _get(r, "traceId", "trace_id")
    span_id = _get(r, "spanId", "span_id")
    attributes = _attributes(r.get("attributes"))
    name = _get(r, "eventName", "event_name") or attributes.get("event.name") or ""
    if type(name) is not str:
        raise _BadRecord("eventName must be a string")
    time_ns = _uint(_get(r, "timeUnixNano", "time_unix_nano"), "timeUnixNano") or _uint(
        _get(r, "observedTimeUnixNano", "observed_time_unix_nano"), "observedTimeUnixNano"
    )
    return LogEvent(
        name=name,
        time_ns=time_ns,
        attributes=attributes,
        body=_any(r.get("body")),
        trace_id=_hex_id(trace_id, 32, "traceId") if trace_id else "",
        span_id=_hex_id(span_id, 16, "spanId") if span_id else "",
    )


def decode_json_logs(doc: Any, prefix: str = "") -> Decoded:
    """Log records of one OTLP/JSON logs document (``{"resourceLogs": [...]}``)."""
    out = Decoded()
    out.rejected = _decode_json(doc, prefix, _LOGS, _json_log, out.logs)
    return out


def decode_json_document(doc: Any, prefix: str = "") -> Decoded:
    """Spans or log records of one OTLP/JSON document of either signal (or a list of them)."""
    if type(doc) is list:
        out = Decoded()
        for i, item in enumerate(doc):
            out.extend(decode_json_document(item, f"{prefix}[{i}]"))
        return out
    if type(doc) is not dict:
        raise Malformed("not an OTLP object (expected resourceSpans or resourceLogs)", prefix)
    has_spans = "resourceSpans" in doc or "resource_spans" in doc
    has_logs = "resourceLogs" in doc or "resource_logs" in doc
    if not has_spans and not has_logs:
        if doc:  # `{}` is an empty request, which OTLP allows
            raise Malformed("has neither resourceSpans nor resourceLogs", prefix)
        return Decoded()
    out = decode_json_traces(doc, prefix) if has_spans else Decoded()
    if has_logs:
        out.extend(decode_json_logs(doc, prefix))
    return out


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def parse_json_bytes(
    data: bytes | str, source: str, *, first_line: int = 1, json_lines: bool = False
) -> list[tuple[str, Any]]:
    """``[(position, document)]``: one whole JSON document (position ``""``), or one per line
    (JSON Lines, position ``"line N"``), decoded in a single pass.

    Raises :class:`ImportFormatError` when the data is not JSON at all. JSON Lines (the first
    document ends on its line, or ``json_lines`` says so: a block of such a file, starting at
    line ``first_line`` of it) hold one document per line: a line that is not one (cut short,
    or continued on the next line) is returned as ``(position, ImportFormatError)`` so the
    caller can keep the others, and reading goes on at the next line. Documents spread over
    several lines (pretty-printed) are read one after the other.

    Bytes that are not UTF-8 make their line such an error in JSON Lines (so a file read in
    blocks reads as read whole); any other file that is not UTF-8 raises.
    """
    # the first byte that is not UTF-8, when there is one: `text` then keeps such bytes (as
    # lone surrogates) for the lines around them to be read
    undecodable: UnicodeDecodeError | None = None
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            text, undecodable = _text_with_undecoded_bytes(data, exc, source, json_lines), exc
    else:
        text = data
    docs: list[tuple[str, Any]] = []
    lines = json_lines
    size = len(text)
    index = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    line = first_line + text.count("\n", 0, index)
    while index < size:
        eol = text.find("\n", index)  # the end of the line this document starts on
        error: ImportFormatError | None = None
        try:
            # raw_decode stops after one document: no second pass for JSON Lines
            document, end = _DECODER.raw_decode(text, index)
        except json.JSONDecodeError as exc:
            on_its_line = eol == -1 or exc.pos < eol
            error = ImportFormatError(
                f"not valid JSON ({exc.msg})",
                source=source,
                position=f"line {exc.lineno + first_line - 1} column {exc.colno}",
            )
            if not docs and not lines and (not on_its_line or not text[eol:].strip()):
                # the first document is broken and is the whole file, or spans several
                # lines (pretty-printed): the file is not JSON Lines, so it fails as a whole
                raise (
                    error if undecodable is None else _not_utf8(data, source, undecodable)
                ) from None
            lines = lines or not docs
            if lines and not on_its_line:
                error = _line_error(text, index, eol, line, source)
            end = eol if lines else text.find("\n", exc.pos)
        except RecursionError:
            error = ImportFormatError(
                "JSON nested too deeply", source=source, position=f"line {line}"
            )
            if not docs and not lines and (eol == -1 or not text[eol:].strip()):
                raise (
                    error if undecodable is None else _not_utf8(data, source, undecodable)
                ) from None
            end = eol
        else:
            if not docs and not lines:
                lines = eol == -1 or end <= eol
            elif lines and eol != -1 and end > eol:  # a line that the next one completes
                error = _line_error(text, index, eol, line, source)
                end = eol
            if lines and error is None:
                stop = size if eol == -1 else eol
                if _SPACE.match(text, end).end() < stop:  # type: ignore[union-attr]
                    # one document per line: a line with more after it (a pretty-printed
                    # document's `"key": [`) is one bad line, not a value and an error
                    error = ImportFormatError(
                        "not valid JSON (more follows the document on its line)",
                        source=source,
                        position=f"line {line}",
                    )
                    end = eol
        if undecodable is not None and lines:
            found = _UNDECODED.search(text, index, size if eol == -1 else eol)
            if found:  # the line holds bytes that are not UTF-8: it is skipped as a whole
                error = _line_not_utf8(text, index, found.start(), line, source)
                end = eol
        docs.append((f"line {line}", document if error is None else error))
        if end == -1:
            break
        next_index = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        line += text.count("\n", index, next_index)
        index = next_index
    if undecodable is not None and not lines:  # one document (or several pretty-printed)
        raise _not_utf8(data, source, undecodable)
    if len(docs) == 1 and not isinstance(docs[0][1], ImportFormatError) and not json_lines:
        return [("", docs[0][1])]
    return docs


#: a byte that is not UTF-8, as ``decode("utf-8", "surrogateescape")`` keeps it (valid UTF-8
#: never decodes to a lone surrogate)
_UNDECODED = re.compile("[\udc80-\udcff]")


def _text_with_undecoded_bytes(
    data: bytes, exc: UnicodeDecodeError, source: str, json_lines: bool
) -> str:
    """``data``, which is not UTF-8, as text keeping its undecodable bytes (as lone
    surrogates), for JSON (Lines) to be read around them; raises when the data is not JSON
    text at all (protobuf, UTF-16, Latin-1 prose)."""
    bom = _unicode_bom(data)
    if bom is not None:
        raise ImportFormatError(bom, source=source)
    text = data.decode("utf-8-sig", "surrogateescape")
    start = _SPACE.match(text).end()  # type: ignore[union-attr]
    if not json_lines and text[start : start + 1] not in ("{", "["):
        raise _not_utf8(data, source, exc)
    return text


def _unicode_bom(data: bytes) -> str | None:
    """Why ``data`` is not UTF-8 when it starts with a UTF-16 or UTF-32 byte-order mark;
    None otherwise."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            powershell = bom == codecs.BOM_UTF16_LE  # what Windows PowerShell's `>` writes
            return (
                f"{encoding} text, not UTF-8 (it starts with the byte-order mark "
                f"{bom.hex(' ').upper()}): save it as UTF-8"
                + (" (in PowerShell: `| Out-File -Encoding utf8`, not `>`)" if powershell else "")
            )
    return None


_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def _not_utf8(data: bytes, source: str, exc: UnicodeDecodeError) -> ImportFormatError:
    """The error of a whole file that is not UTF-8 (and not JSON Lines), at its first byte
    that is not (``exc``'s); a hint at ``--format otlp-proto`` when the data reads as OTLP
    protobuf."""
    offset = exc.start + (3 if data.startswith(codecs.BOM_UTF8) else 0)
    hint = "; is it a protobuf file? use --format otlp-proto" if _protobuf_like(data) else ""
    return ImportFormatError(
        f"not UTF-8 text (byte 0x{data[offset]:02X}{hint})",
        source=source,
        position=f"byte {offset}",
    )


def _protobuf_like(data: bytes) -> bool:
    """Whether ``data`` parses as an OTLP protobuf message (or a stream of them, whose first
    one does)."""
    if data[:1] == b"\x00":  # a length prefix
        data = data[4 : 4 + int.from_bytes(data[:4], "big")]
    for message in (ExportTraceServiceRequest, ExportLogsServiceRequest):
        try:
            message.FromString(data)
        except DecodeError:
            continue
        return bool(data)
    return False


def _line_not_utf8(text: str, index: int, bad: int, line: int, source: str) -> ImportFormatError:
    """Line ``line`` of JSON Lines (starting at ``text[index]``), whose byte at ``text[bad]``
    is not UTF-8. Where it is is told within the line: a file read in blocks does not know
    where the block starts in the file, and says the same as when it is read whole."""
    offset = len(text[index:bad].encode("utf-8", "surrogateescape"))
    return ImportFormatError(
        f"not UTF-8 text (byte 0x{ord(text[bad]) - 0xDC00:02X} at byte {offset} of the line)",
        source=source,
        position=f"line {line}",
    )


def _line_error(text: str, index: int, eol: int, line: int, source: str) -> ImportFormatError:
    """What is wrong with line ``line`` of JSON Lines, ``text[index:eol]``, which holds no whole
    document (it is cut short: the document it starts goes on past its end)."""
    try:
        _DECODER.raw_decode(text[index:eol])
        message, column = "the document goes on past the end of its line", ""
    except json.JSONDecodeError as exc:
        message, column = exc.msg, f" column {exc.colno}"
    except RecursionError:
        message, column = "nested too deeply", ""
    return ImportFormatError(
        f"not valid JSON ({message})", source=source, position=f"line {line}{column}"
    )


def read_otlp_json(
    data: Any,
    source: str,
    docs: list[tuple[str, Any]] | None = None,
    *,
    first_line: int = 1,
    json_lines: bool = False,
) -> Decoded:
    """Every span and log record of an OTLP/JSON file's bytes (or its parsed document, or the
    ``docs`` :func:`parse_json_bytes` already returned; ``first_line`` and ``json_lines`` as
    there).

    Raises :class:`ImportFormatError` when the file is not OTLP/JSON, or when no line of a
    JSON Lines file could be read; bad lines and records otherwise become ``rejected``.
    """
    if docs is None:
        docs = (
            parse_json_bytes(data, source, first_line=first_line, json_lines=json_lines)
            if isinstance(data, (bytes, str))
            else [("", data)]
        )
    out = Decoded()
    first_error: ImportFormatError | None = None
    for position, doc in docs:
        if isinstance(doc, ImportFormatError):
            first_error = first_error or doc
            out.rejected.append(f"{doc.position}: {doc.detail}")
            continue
        try:
            decoded = decode_json_document(doc)
        except Malformed as exc:
            located = exc.located(source, position)
            if len(docs) == 1 and not json_lines:
                raise located from None
            first_error = first_error or located
            out.rejected.append(f"{located.position}: {exc.message}")
            continue
        except RecursionError:
            error = ImportFormatError("nested too deeply", source=source, position=position)
            if len(docs) == 1 and not json_lines:
                raise error from None
            first_error = first_error or error
            out.rejected.append(f"{position}: nested too deeply")
            continue
        out.extend(decoded, position)
    out.error = first_error
    # a block of JSON Lines may hold no readable line: its caller judges the whole file
    error = None if json_lines else out.unreadable(source)
    if error is not None:
        raise error
    return out


# -- OTLP protobuf ----------------------------------------------------------------------------


def _pb_any(value: Any, depth: int = 0) -> Any:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which is None:
        return None
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bool_value":
        return value.bool_value
    if depth > MAX_DEPTH:
        raise _BadRecord(f"attribute value nested deeper than {MAX_DEPTH} levels")
    if which == "array_value":
        return [_pb_any(v, depth + 1) for v in value.array_value.values]
    if which == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values, depth + 1)
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None  # string_value_strindex: profiles only


def _pb_attributes(kvs: Any, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        value = kv.value
        # a non-empty string_value can only mean the string member of the oneof is set, so
        # the common case costs one field read; anything else asks WhichOneof
        text = value.string_value
        out[kv.key] = text if text else _pb_any(value, depth)
    return out


def _pb_span(s: Any, resource: dict, scope_name: str, scope_version: str) -> NormalizedSpan:
    parent = s.parent_span_id
    events = s.events
    if s.HasField("status"):
        status = s.status
        code, message = status.code, status.message
    else:
        code, message = 0, ""
    return NormalizedSpan.fast(
        _bytes_id(s.trace_id, 16, "trace_id"),
        _bytes_id(s.span_id, 8, "span_id"),
        s.name,
        _bytes_id(parent, 8, "parent_span_id") if parent else None,
        s.flags & _REMOTE_PARENT == _REMOTE_PARENT,
        s.kind,
        s.start_time_unix_nano,
        s.end_time_unix_nano,
        code,
        message,
        _pb_attributes(s.attributes),
        tuple(SpanEvent(e.name, e.time_unix_nano, _pb_attributes(e.attributes)) for e in events)
        if events
        else (),
        resource,
        scope_name,
        scope_version,
        s.dropped_attributes_count,
        s.dropped_events_count,
        tuple(
            SpanLink(
                _bytes_id(link.trace_id, 16, "links.trace_id"),
                _bytes_id(link.span_id, 8, "links.span_id"),
                _pb_attributes(link.attributes),
            )
            for link in s.links
        )
        if s.links
        else (),
    )


def decode_proto_traces(message: Any, prefix: str = "") -> Decoded:
    """Spans of a parsed ``ExportTraceServiceRequest`` / ``TracesData``."""
    out = Decoded()
    for i, rs in enumerate(message.resource_spans):
        try:
            resource = _pb_attributes(rs.resource.attributes)
        except _BadRecord as exc:
            raise Malformed(f"resource: {exc}", _join(prefix, f"resource_spans[{i}]")) from None
        for j, ss in enumerate(rs.scope_spans):
            scope = ss.scope
            for k, s in enumerate(ss.spans):
                try:
                    out.spans.append(_pb_span(s, resource, scope.name, scope.version))
                except _BadRecord as exc:
                    where = f"resource_spans[{i}].scope_spans[{j}].spans[{k}]"
                    out.rejected.append(f"{_join(prefix, where)}: {exc}")
    return out


# LogRecord.event_name (field 12) came in opentelemetry-proto 1.35; an older one's parser
# keeps that field among the record's unknown fields
_HAS_EVENT_NAME = "event_name" in LogRecord.DESCRIPTOR.fields_by_name


def _pb_event_name(r: Any) -> str:
    if _HAS_EVENT_NAME:
        return r.event_name
    from google.protobuf.unknown_fields import UnknownFieldSet

    for unknown in UnknownFieldSet(r):
        if unknown.field_number == 12 and unknown.wire_type == 2:
            return unknown.data.decode("utf-8", "replace")
    return ""


def _pb_log(r: Any) -> LogEvent:
    attributes = _pb_attributes(r.attributes)
    name = _pb_event_name(r) or attributes.get("event.name") or ""
    return LogEvent(
        name=str(name),
        time_ns=r.time_unix_nano or r.observed_time_unix_nano,
        attributes=attributes,
        body=_pb_any(r.body) if r.HasField("body") else None,
        trace_id=_bytes_id(r.trace_id, 16, "trace_id") if r.trace_id else "",
        span_id=_bytes_id(r.span_id, 8, "span_id") if r.span_id else "",
    )


def decode_proto_logs(message: Any, prefix: str = "") -> Decoded:
    """Log records of a parsed ``ExportLogsServiceRequest`` / ``LogsData``."""
    out = Decoded()
    for i, rl in enumerate(message.resource_logs):
        for j, sl in enumerate(rl.scope_logs):
            for k, r in enumerate(sl.log_records):
                try:
                    out.logs.append(_pb_log(r))
                except _BadRecord as exc:
                    where = f"resource_logs[{i}].scope_logs[{j}].log_records[{k}]"
                    out.rejected.append(f"{_join(prefix, where)}: {exc}")
    return out


def length_prefixed(
    read: Callable[[int], bytes], size: int | None = None
) -> Iterator[tuple[int, int, bytes | None]]:
    """``(number, offset, message)`` of each message of a stream of 4-byte big-endian
    length-prefixed messages, read with ``read``: ``size`` bytes, or to the end of the stream
    when ``size`` is None (a decompressing stream). A message the stream ends inside (a file
    cut short) comes last, as ``None``."""
    number = offset = 0
    while size is None or offset < size:
        prefix = read(4)
        if not prefix and size is None:
            return
        length = int.from_bytes(prefix, "big")
        if len(prefix) < 4 or (size is not None and offset + 4 + length > size):
            yield number, offset, None
            return
        payload = read(length) if size is not None else _read_up_to(read, length)
        if len(payload) < length:
            yield number, offset, None
            return
        yield number, offset, payload
        number += 1
        offset += 4 + length


def _read_up_to(read: Callable[[int], bytes], length: int) -> bytes:
    """``length`` bytes of a stream, fewer at its end; read in pieces, so that a length
    garbled into gigabytes costs no more memory than the stream holds."""
    piece = 8 << 20
    if length <= piece:
        return read(length)
    parts = []
    while length > 0 and (part := read(min(length, piece))):
        parts.append(part)
        length -= len(part)
    return b"".join(parts)


def decode_messages(
    messages: Iterable[tuple[int, int, bytes | None]], source: str, *, located: bool = True
) -> Decoded:
    """The spans and log records of OTLP protobuf ``messages`` (:func:`length_prefixed`); one
    that is not OTLP, or is cut short, is rejected (``located``: with its number and offset)."""
    out = Decoded()
    for number, offset, payload in messages:
        position = f"message {number} at byte {offset}" if located else ""
        if payload is None:
            error = ImportFormatError(
                "cut short (the file ends inside it)", source=source, position=position
            )
        else:
            try:
                out.extend(_decode_record(payload, ""), position)
                continue
            except Malformed as exc:
                error = exc.located(source, position)
        out.error = out.error or error
        out.rejected.append(f"{error.position}: {error.detail}")
    return out


#: how far one zstd'd message of a Collector file may inflate (one export batch: megabytes)
MAX_RECORD_INFLATED = 256 << 20


def _decode_record(payload: bytes, prefix: str) -> Decoded:
    """One message of a length-prefixed stream: an OTLP protobuf message, or a zstd frame
    holding one or an OTLP/JSON document (the Collector's file exporter with
    ``compression: zstd`` writes every message so, whatever its ``format``)."""
    if compression.kind(payload) != compression.ZSTD:
        return _decode_one_proto(payload, prefix)
    try:
        payload = compression.decompress(payload, compression.ZSTD, MAX_RECORD_INFLATED)
    except compression.Undecodable as exc:
        raise Malformed(str(exc), prefix) from None
    if payload.lstrip()[:1] != b"{":
        return _decode_one_proto(payload, prefix)
    try:
        document = json.loads(payload)
    except ValueError as exc:
        raise Malformed(f"not valid JSON ({exc})", prefix) from None
    except RecursionError:
        raise Malformed("nested too deeply", prefix) from None
    try:
        return decode_json_document(document, prefix)
    except RecursionError:
        raise Malformed("nested too deeply", prefix) from None


def _decode_one_proto(payload: bytes, prefix: str) -> Decoded:
    """One message of either signal: traces first, logs when the records are not spans."""
    traces_error = None
    try:
        traces = ExportTraceServiceRequest.FromString(payload)
    except DecodeError as exc:
        traces, traces_error = None, exc
    if traces is not None:
        decoded = decode_proto_traces(traces, prefix)
        # A logs request can parse as traces when its records carry no time field; then
        # every "span" lacks ids, which real spans never do.
        if decoded.spans or not decoded.rejected:
            return decoded
    try:
        logs = ExportLogsServiceRequest.FromString(payload)
    except DecodeError:
        raise Malformed(
            f"not an OTLP protobuf message ({traces_error or 'no valid span'})", prefix
        ) from None
    return decode_proto_logs(logs, prefix)


def read_otlp_proto(data: bytes, source: str) -> Decoded:
    """Every span and log record of an OTLP protobuf file: one message, or a stream of
    length-prefixed messages (see the module docs; a message cut short by the end of the file
    is rejected, the others are read). Raises :class:`ImportFormatError` when nothing could
    be read."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImportFormatError("OTLP protobuf data must be bytes", source=source)
    data = bytes(data)
    if not data:
        return Decoded()
    # a length prefix starts with 0; a message never does (it starts with a field's tag)
    stream = data[0] == 0
    messages = list(length_prefixed(io.BytesIO(data).read, len(data))) if stream else [(0, 0, data)]
    out = decode_messages(messages, source, located=stream)
    error = out.unreadable(source)
    if error is not None:
        bom = _unicode_bom(data)  # text, not protobuf: say so rather than how it misparses
        raise error if bom is None else ImportFormatError(bom, source=source)
    return out


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def to_otlp_json(request: ExportTraceServiceRequest | ExportLogsServiceRequest) -> dict[str, Any]:
    """An OTLP protobuf request as OTLP/JSON, the form the Collector's file exporter writes and
    :func:`read_otlp_json` reads: ids in hex (``json_format`` alone writes them in base64),
    enums as integers, 64-bit integers as strings. For writing spans to a file, e.g.
    ``to_otlp_json(encode_spans(spans))`` with the SDK's OTLP encoder."""
    return _hex_ids(json_format.MessageToDict(request, use_integers_for_enums=True))


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: base64.b64decode(value).hex()
            if key in _ID_KEYS and isinstance(value, str)
            else _hex_ids(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(item) for item in node]
    return node
