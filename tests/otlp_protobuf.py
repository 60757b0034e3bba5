"""OTLP/JSON requests as the protobuf bytes the exporters send, for the tests.

``json_format`` wants base64 ids where OTLP/JSON has hex, and cannot write a field that the
installed opentelemetry-proto lacks: a logs request is read from the bytes kept in
``tests/ingest/data`` (its README says how they were made), and checked against a fresh
conversion wherever the installed opentelemetry-proto can make one (``LogRecord.event_name``
came in 1.35)."""

import base64
from pathlib import Path

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

DATA = Path(__file__).resolve().parent / "ingest" / "data"
_IDS = ("traceId", "spanId", "parentSpanId")


def hex_to_b64(node):
    """A copy of OTLP/JSON ``node`` with its trace and span ids in base64 (json_format's)."""
    if isinstance(node, dict):
        return {
            key: base64.b64encode(bytes.fromhex(value)).decode()
            if key in _IDS and isinstance(value, str)
            else hex_to_b64(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [hex_to_b64(item) for item in node]
    return node


def protobuf_request(doc: dict, stored_logs: str | None = None) -> bytes:
    """OTLP/JSON request ``doc`` as protobuf; a logs request is the file ``stored_logs`` of
    ``tests/ingest/data``, which ``doc`` must give where the installed proto can write it."""
    if "resourceLogs" not in doc:
        return json_format.ParseDict(
            hex_to_b64(doc), ExportTraceServiceRequest()
        ).SerializeToString()
    data = (DATA / stored_logs).read_bytes()
    if "event_name" in LogRecord.DESCRIPTOR.fields_by_name:
        message = json_format.ParseDict(hex_to_b64(doc), ExportLogsServiceRequest())
        assert message.SerializeToString() == data
    return data
