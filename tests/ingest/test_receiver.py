"""The OTLP receiver, driven by the real OpenTelemetry exporters (HTTP and gRPC) on free ports."""

import contextlib
import gzip
import json
import select
import socket
import sqlite3
import threading
import time
import zlib
from pathlib import Path

import grpc
import pytest
import requests
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from agent_replay import CheckpointStore
from agent_replay.errors import SessionNotFoundError
from agent_replay.ingest import compression as ingest_compression
from agent_replay.ingest.receiver import Collector, ReceiverConfig, TLSConfig
from collect_process import start_collect_process
from self_signed import self_signed
from slow_client import trickle
from zstd_codec import zstd

SHARED = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
FIXTURES = SHARED / "fixtures"
TOOLS_PER_TRACE = 3


def fast_config(**overrides):
    values = {"assemble_interval": 0.05, "idle_seconds": 30.0, "retry_after": 1.0}
    values.update(overrides)
    return ReceiverConfig(**values)


@pytest.fixture
def served(db_path):
    """A running collector (HTTP and gRPC on free ports) and its store."""
    started = []

    def start(**options):
        store = CheckpointStore(db_path)
        config = options.pop("config", None) or fast_config()
        collector = Collector(
            store, http="127.0.0.1:0", grpc="127.0.0.1:0", config=config, **options
        )
        collector.start()
        started.append((collector, store))
        return collector, store

    yield start
    for collector, store in started:
        collector.stop(grace=1)
        store.close()


def emit_traces(provider, traces, tag):
    """Agent runs: an invoke_agent root with TOOLS_PER_TRACE execute_tool children.
    Returns the (trace_id, span_id) of every span sent."""
    tracer = provider.get_tracer("load-test")
    sent = []
    for i in range(traces):
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": tag}
        with tracer.start_as_current_span("invoke_agent", attributes=agent) as root:
            for j in range(TOOLS_PER_TRACE):
                attributes = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": f"t{j}",
                    "gen_ai.tool.call.result": json.dumps(f"{tag}-{i}-{j}"),
                }
                with tracer.start_as_current_span(f"execute_tool t{j}", attributes=attributes) as s:
                    sent.append(s.get_span_context())
            sent.append(root.get_span_context())
    return [(format(c.trace_id, "032x"), format(c.span_id, "016x")) for c in sent]


def run_exporters(make_exporter, threads=4, traces=25):
    """``threads`` processes' worth of SDK pipelines exporting concurrently."""
    sent: list = []
    lock = threading.Lock()
    errors = []

    def worker(n):
        try:
            provider = TracerProvider(resource=Resource.create({"service.name": f"agent-{n}"}))
            provider.add_span_processor(
                BatchSpanProcessor(
                    make_exporter(), schedule_delay_millis=20, max_export_batch_size=16
                )
            )
            ids = emit_traces(provider, traces, f"agent-{n}")
            provider.shutdown()  # flushes: every span has been acknowledged (or failed) after this
            with lock:
                sent.extend(ids)
        except Exception as exc:
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(60)
    assert not errors
    return sent


def recorded_spans(traces, tag):
    """Finished SDK spans of ``traces`` agent runs (for calling an exporter directly)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sent = emit_traces(provider, traces, tag)
    provider.shutdown()
    return memory.get_finished_spans(), sent


def stored_tool_spans(store):
    spans = []
    for trajectory in store.load_all():
        assert len(trajectory.steps) == TOOLS_PER_TRACE
        spans.extend((s.trace_id, s.span_id) for s in trajectory.steps)
    return spans


def pending_ids(db_path):
    with sqlite3.connect(db_path) as conn:
        return conn.execute("SELECT trace_id, span_id FROM pending_spans").fetchall()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_concurrent_real_exporters_every_span_stored_exactly_once(served, db_path, transport):
    collector, store = served()

    def make_exporter():
        if transport == "http":
            return OTLPSpanExporter(
                endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces",
                compression=Compression.Gzip,
            )
        return GrpcSpanExporter(
            endpoint=f"127.0.0.1:{collector.grpc_port}",
            insecure=True,
            compression=grpc.Compression.Gzip,
        )

    sent = run_exporters(make_exporter)
    assert len(sent) == 4 * 25 * (TOOLS_PER_TRACE + 1) == len(set(sent))
    # acknowledged means committed: every span is in the durable table before any assembly
    assert sorted(pending_ids(db_path)) == sorted(sent)
    collector.stop(grace=2)
    tools = stored_tool_spans(store)
    assert len(tools) == len(set(tools)) == 4 * 25 * TOOLS_PER_TRACE
    assert set(tools) <= set(sent)
    assert len(store.session_ids()) == 100
    assert collector.receiver.snapshot()["spans_stored"] == len(sent)


def post(collector, body, content_type="application/x-protobuf", path="/v1/traces", **headers):
    return requests.post(
        f"http://127.0.0.1:{collector.http_port}{path}",
        data=body,
        headers={"Content-Type": content_type, **headers},
        timeout=10,
    )


def otlp_json_request():
    return (FIXTURES / "generated" / "otel_span_only.jsonl").read_bytes()


def test_bad_requests_get_the_right_status_and_the_server_keeps_serving(served, db_path):
    collector, _store = served(config=fast_config(max_body_bytes=1 << 20))
    bad_proto = post(collector, b"\xff\xfe not protobuf")
    assert bad_proto.status_code == 400
    status = Status.FromString(bad_proto.content)
    assert status.code == 3 and "not a protobuf" in status.message
    bad_json = post(collector, b"{nope", "application/json")
    assert bad_json.status_code == 400 and bad_json.json()["code"] == 3
    wrong_shape = post(collector, b'{"resourceSpans": "x"}', "application/json")
    assert wrong_shape.status_code == 400
    assert post(collector, b"x" * (2 << 20)).status_code == 413
    bomb = gzip.compress(b"\0" * (8 << 20))  # 8 KiB on the wire, 8 MiB inflated
    assert post(collector, bomb, **{"Content-Encoding": "gzip"}).status_code == 413
    assert post(collector, b"\x1f\x8b\x08\x00", **{"Content-Encoding": "gzip"}).status_code == 400
    assert post(collector, b"{}", "text/plain").status_code == 415
    assert (
        post(collector, b"{}", "application/json", **{"Content-Encoding": "br"}).status_code == 415
    )
    assert post(collector, b"{}", "application/json", path="/v1/metrics").status_code == 404
    assert (
        requests.get(f"http://127.0.0.1:{collector.http_port}/v1/traces", timeout=5).status_code
        == 405
    )
    # partial success: one malformed span among good ones
    doc = json.loads(otlp_json_request())
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append({"traceId": "zz", "spanId": "00"})
    partial = post(collector, json.dumps(doc).encode(), "application/json")
    assert partial.status_code == 200
    assert partial.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert "traceId" in partial.json()["partialSuccess"]["errorMessage"]
    only_bad = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "00"}]}]}]}
    assert post(collector, json.dumps(only_bad).encode(), "application/json").status_code == 400
    assert post(collector, b"{}", "application/json").json() == {}  # an empty request is fine
    # after all that, a real exporter still gets through
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=20))
    sent = emit_traces(provider, 2, "after")
    provider.shutdown()
    assert set(sent) <= set(pending_ids(db_path))
    assert collector.receiver.snapshot()["errors"]["BadRequest"] >= 5


def test_every_content_encoding_a_collector_or_sdk_sends_is_taken(served, monkeypatch):
    """The SDK's exporters with each of their compressions (HTTP: gzip, deflate, none; gRPC:
    deflate), and bodies as the Collector's otlphttp exporter sends with `compression: zstd`,
    `deflate` or `zlib` (the same zlib stream, named zlib): all stored. A zstd or deflate bomb
    gets 413, a damaged body 400, and zstd without a codec 415."""
    collector, store = served(config=fast_config(max_body_bytes=1 << 20))
    expected = []
    for compression in (Compression.Gzip, Compression.Deflate, Compression.NoCompression):
        spans, sent = recorded_spans(2, f"sdk-{compression.value}")
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces", compression=compression
        )
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        exporter.shutdown()
        expected += sent
    spans, sent = recorded_spans(2, "grpc-deflate")  # gRPC negotiates gzip and deflate itself
    exporter = GrpcSpanExporter(
        endpoint=f"127.0.0.1:{collector.grpc_port}",
        insecure=True,
        compression=grpc.Compression.Deflate,
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()
    expected += sent
    compress = {"zstd": zstd.compress, "deflate": zlib.compress, "zlib": zlib.compress}
    for codec in ("zstd", "deflate", "zlib"):
        spans, sent = recorded_spans(1, f"collector-{codec}")
        body = compress[codec](encode_spans(spans).SerializeToString())
        assert post(collector, body, **{"Content-Encoding": codec}).status_code == 200
        expected += sent
        bomb = compress[codec](bytes(8 << 20))
        assert post(collector, bomb, **{"Content-Encoding": codec}).status_code == 413
        damaged = post(collector, body[: len(body) // 2], **{"Content-Encoding": codec})
        message = Status.FromString(damaged.content).message
        assert damaged.status_code == 400 and codec.replace("zlib", "deflate") in message
    monkeypatch.setattr(ingest_compression, "_zstd_module", lambda: None)
    refused = post(collector, zstd.compress(b""), **{"Content-Encoding": "zstd"})
    assert refused.status_code == 415
    message = Status.FromString(refused.content).message
    assert "use gzip, deflate or none" in message and "[zstd]" in message
    collector.stop(grace=1)
    tools = stored_tool_spans(store)
    assert set(tools) <= set(expected) and len(tools) == (4 * 2 + 3) * TOOLS_PER_TRACE
    agents = {t.steps[0].agent for t in store.load_all()}
    assert {"collector-zstd", "collector-deflate", "collector-zlib"} <= agents


def test_grpc_bad_and_oversized_requests(served):
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    collector, _ = served(config=fast_config(max_body_bytes=64 << 10))
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}")
    stub = trace_service_pb2_grpc.TraceServiceStub(channel)
    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x00" * 8, "bad id"
    with pytest.raises(grpc.RpcError) as info:
        stub.Export(request, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    span.span_id = b"\x02" * 8
    span.attributes.add(key="big").value.string_value = "x" * (128 << 10)
    with pytest.raises(grpc.RpcError) as info:
        stub.Export(request, timeout=5)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    del span.attributes[:]
    good = request.resource_spans[0].scope_spans[0].spans.add()
    good.trace_id, good.span_id, good.name = b"\x03" * 16, b"\x04" * 8, "ok"
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.trace_id, bad.span_id = b"\x05" * 3, b"\x06" * 8
    response = stub.Export(request, timeout=5)
    assert response.partial_success.rejected_spans == 1
    channel.close()


def test_grpc_requests_that_are_not_the_services_message_are_invalid_argument(served):
    """grpcio's own deserializer would answer INTERNAL, before the token is looked at."""
    collector, _ = served(config=fast_config(token="s3cret"))
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}")
    for service in ("trace.v1.TraceService", "logs.v1.LogsService"):
        export = channel.unary_unary(f"/opentelemetry.proto.collector.{service}/Export")
        with pytest.raises(grpc.RpcError) as info:
            export(b"\xff\xff\xff", timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED  # the token comes first
        with pytest.raises(grpc.RpcError) as info:
            export(b"\xff\xff\xff", timeout=5, metadata=(("authorization", "Bearer s3cret"),))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a protobuf" in info.value.details()
    channel.close()


def read_response(reader) -> bytes:
    """The status line and headers of the next HTTP response on ``reader`` (a socket's
    ``makefile("rb")``); its body is read to the end, so the next response starts clean."""
    head = [reader.readline()]
    while head[-1] not in (b"\r\n", b""):
        head.append(reader.readline())
    length = next(
        (int(h.split(b":")[1]) for h in head if h.lower().startswith(b"content-length")), 0
    )
    reader.read(length)
    return b"".join(head)


def test_a_refused_request_does_not_spoil_its_kept_alive_connection(served, db_path):
    """A 401 is answered before the body is read. Either the connection is closed (what the
    receiver does) or the next request on it must be read as a request, not as that body."""
    collector, _store = served(config=fast_config(token="s3cret"))
    body = otlp_json_request()

    def request(token):
        return (
            f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    conn = socket.create_connection(("127.0.0.1", collector.http_port), timeout=10)
    reader = conn.makefile("rb")
    conn.sendall(request("wrong"))
    reply = read_response(reader)
    assert b" 401 " in reply.split(b"\r\n", 1)[0]
    if b"Connection: close" not in reply:
        conn.sendall(request("s3cret"))
        assert b" 200 " in read_response(reader).split(b"\r\n", 1)[0]
    else:
        assert reader.read(1) == b""  # closed, as it said
    reader.close()
    conn.close()
    session = requests.Session()  # and a client that reuses connections gets through
    url = f"http://127.0.0.1:{collector.http_port}/v1/traces"
    headers = {"Content-Type": "application/json"}
    assert (
        session.post(url, data=body, headers={**headers, "Authorization": "Bearer no"}).status_code
        == 401
    )
    ok = session.post(url, data=body, headers={**headers, "Authorization": "Bearer s3cret"})
    assert ok.status_code == 200, ok.text
    session.close()


@pytest.mark.parametrize(
    "framing",
    [
        ["Content-Length: 2", "Content-Length: {n}"],  # two lengths that disagree
        ["Transfer-Encoding: chunked", "Content-Length: {n}"],  # both framings at once
    ],
    ids=["two-lengths", "chunked-and-length"],
)
def test_ambiguous_body_framing_is_refused_and_the_connection_closed(served, framing):
    """RFC 9112 6.3: where such a body ends is ambiguous (a request-smuggling pattern behind
    a proxy that reads it the other way): 400 and the connection closed, nothing stored."""
    collector, _store = served()
    body = otlp_json_request()
    head = "\r\n".join(line.format(n=len(body)) for line in framing)
    request = (
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"{head}\r\n\r\n"
    ).encode() + body
    conn = socket.create_connection(("127.0.0.1", collector.http_port), timeout=10)
    reader = conn.makefile("rb")
    conn.sendall(request)
    reply = read_response(reader)
    assert b" 400 " in reply.split(b"\r\n", 1)[0] and b"Connection: close" in reply
    assert reader.read(1) == b""
    reader.close()
    conn.close()
    assert collector.receiver.snapshot()["spans_received"] == 0
    assert post(collector, body, "application/json").status_code == 200  # still serving


def chunked(body: bytes, size_line: str | None = None, after: bytes = b"\r\n") -> bytes:
    """``body`` as one chunk then the last chunk, with the size line written as given."""
    size = size_line if size_line is not None else f"{len(body):x}"
    return size.encode() + b"\r\n" + body + after + b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("headers", "framing", "status"),
    [
        # a size line longer than is read: refused, never read in part (1,100 leading zeros
        # were, 1,026 of them, as the last chunk, and the real chunk as trailers: answered 200
        # for a body with half its spans; 1,100 are read whole now, 5,000 refused)
        ("Transfer-Encoding: chunked", lambda b: chunked(b, "0" * 5000 + f"{len(b):x}"), 400),
        *[
            ("Transfer-Encoding: chunked", lambda b, s=sign: chunked(b, s + f"{len(b):x}"), 400)
            for sign in ("+", "-", "0x")
        ],
        ("Transfer-Encoding: chunked", lambda b: chunked(b, after=b"X\r\n"), 400),
        ("Transfer-Encoding: xchunked", chunked, 501),
        ("Transfer-Encoding: chunked, identity", chunked, 501),
        ("Transfer-Encoding: gzip, chunked", chunked, 501),
        ("Content-Length: +{n}", lambda b: b, 400),
        ("Content-Length: {n}_0", lambda b: b, 400),
    ],
    ids=[
        "long-size-line",
        "plus",
        "minus",
        "0x",
        "no-line-end",
        "xchunked",
        "chunked-not-last",
        "gzip-chunked",
        "plus-length",
        "underscore-length",
    ],
)
def test_loose_body_framing_is_refused(served, headers, framing, status):
    """RFC 9112 7.1 (chunk-size = 1*HEXDIG, CRLF after the data), 6.1 (chunked, and last;
    another transfer coding: 501) and RFC 9110 8.6 (Content-Length = 1*DIGIT): each of these
    was taken, two of them read as something else than the sender meant."""
    collector, _store = served()
    body = otlp_json_request()

    def status_of(head: str, payload: bytes) -> bytes:
        request = (
            "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\n{head}\r\n\r\n"
        ).encode() + payload
        with socket.create_connection(("127.0.0.1", collector.http_port), timeout=10) as conn:
            reader = conn.makefile("rb")
            conn.sendall(request)
            reply = read_response(reader)
            reader.close()
        return reply.split(b"\r\n", 1)[0]

    assert f" {status} ".encode() in status_of(headers.format(n=len(body)), framing(body))
    assert collector.receiver.snapshot()["spans_received"] == 0
    assert b" 200 " in status_of("Transfer-Encoding: chunked", chunked(body))  # still serving
    spans = collector.receiver.snapshot()["spans_received"]
    zeros = chunked(body, "0" * 1100 + f"{len(body):x}")  # 1*HEXDIG: leading zeros are fine
    assert b" 200 " in status_of("Transfer-Encoding: chunked", zeros)
    assert collector.receiver.snapshot()["spans_received"] == 2 * spans


def test_otlp_json_posted_to_the_other_signals_path_is_refused(served):
    collector, _ = served()
    traces = post(collector, otlp_json_request(), "application/json", path="/v1/logs")
    assert traces.status_code == 400 and "post it to /v1/traces" in traces.json()["message"]
    logs = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{}]}]}]}).encode()
    refused = post(collector, logs, "application/json", path="/v1/traces")
    assert refused.status_code == 400 and "post it to /v1/logs" in refused.json()["message"]


def test_stop_waits_for_a_request_whose_body_is_still_arriving(served, db_path):
    """SIGTERM while a client is sending: its request finishes (200) within the grace
    period, and a new request on a kept-alive connection meanwhile gets 503."""
    collector, store = served()
    body = otlp_json_request()
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    idle = socket.create_connection(("127.0.0.1", collector.http_port), timeout=10)
    idle_reader = idle.makefile("rb")
    idle.sendall(head + body)
    assert b" 200 " in read_response(idle_reader).split(b"\r\n", 1)[0]  # and kept alive
    sending = socket.create_connection(("127.0.0.1", collector.http_port), timeout=10)
    sending.sendall(head + body[:-10])
    time.sleep(0.2)
    stopper = threading.Thread(target=collector.stop, kwargs={"grace": 5})
    stopper.start()
    deadline = time.monotonic() + 5
    while not collector.receiver.draining and time.monotonic() < deadline:
        time.sleep(0.01)
    assert collector.receiver.draining  # and still waiting for the request being sent
    idle.sendall(head + body)
    assert b" 503 " in read_response(idle_reader).split(b"\r\n", 1)[0]
    sending.sendall(body[-10:])
    assert b" 200 " in read_response(sending.makefile("rb")).split(b"\r\n", 1)[0]
    stopper.join(10)
    assert not stopper.is_alive()
    idle.close()
    sending.close()
    assert store.session_ids()


def test_logs_signal_joins_event_only_content_whatever_arrives_first(served, db_path):
    collector, store = served()
    logs = (FIXTURES / "generated" / "otel_event_only.logs.jsonl").read_bytes()
    spans = (FIXTURES / "generated" / "otel_event_only.jsonl").read_bytes()
    assert post(collector, logs, "application/json", path="/v1/logs").status_code == 200
    assert post(collector, spans, "application/json").status_code == 200
    collector.stop(grace=1)
    trajectory = store.load("conv_1")
    assert trajectory.metadata["capture"]["steps_without_content"] == []
    assert trajectory.steps[0].inputs["messages"][1]["parts"][0]["content"] == "Weather in Paris?"


def test_log_records_outside_any_span_are_refused_as_partial_success(served, db_path):
    """Records without a trace and span id (an event emitted outside any span) were answered
    as full success and dropped. A request of nothing else is refused (400), as one whose
    every span is rejected: it was a 200 that kept nothing."""
    collector, _ = served()
    doc = json.loads((FIXTURES / "generated" / "otel_event_only.logs.jsonl").read_text())
    records = doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    outside = [{k: v for k, v in r.items() if k not in ("traceId", "spanId")} for r in records[:2]]
    doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"] = [*outside, *records]
    answer = post(collector, json.dumps(doc).encode(), "application/json", path="/v1/logs")
    assert answer.status_code == 200
    partial = answer.json()["partialSuccess"]
    assert (
        partial["rejectedLogRecords"] == "2"
        and "without a trace and span id" in partial["errorMessage"]
    )
    only_outside = {"resourceLogs": [{"scopeLogs": [{"logRecords": outside}]}]}
    answer = post(collector, json.dumps(only_outside).encode(), "application/json", path="/v1/logs")
    assert answer.status_code == 400 and answer.json()["code"] == 3
    assert answer.json()["message"].startswith("no valid record: 2 log record(s) without a trace")
    collector.stop(grace=1)
    assert collector.receiver.stats.logs_stored == len(records)
    assert collector.receiver.snapshot()["errors"] == {"BadRequest": 1}


def test_a_logs_request_whose_every_record_is_rejected_is_invalid_over_grpc_and_protobuf(served):
    """The same rule over gRPC (it was OK with rejected_log_records) and OTLP/HTTP protobuf:
    INVALID_ARGUMENT / 400 when no record is kept, partial success when some are."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

    collector, _ = served()
    request = logs_service_pb2.ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    # (the event name as an attribute: the oldest opentelemetry-proto has no event_name field)
    outside = records.add()
    outside.attributes.add(key="event.name").value.string_value = "gen_ai.user.message"
    outside.body.string_value = "outside any span"
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}")
    stub = logs_service_pb2_grpc.LogsServiceStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        stub.Export(request, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("no valid record: 1 log record(s) without a trace")
    refused = post(collector, request.SerializeToString(), path="/v1/logs")
    assert refused.status_code == 400
    assert Status.FromString(refused.content).message.startswith("no valid record: 1 log")
    inside = records.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    inside.attributes.add(key="event.name").value.string_value = "gen_ai.user.message"
    assert stub.Export(request, timeout=5).partial_success.rejected_log_records == 1
    channel.close()
    assert collector.receiver.snapshot()["errors"] == {"BadRequest": 2}


def test_real_log_exporter(served, db_path):
    collector, store = served()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces"),
            schedule_delay_millis=20,
        )
    )
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(
            OTLPLogExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/logs"),
            schedule_delay_millis=20,
        )
    )
    tracer = tracer_provider.get_tracer("t")
    logger = logger_provider.get_logger("opentelemetry.instrumentation.genai.test")
    messages = [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    with tracer.start_as_current_span(
        "invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        with tracer.start_as_current_span(
            "chat m", attributes={"gen_ai.operation.name": "chat"}
        ) as chat:
            logger.emit(
                event_name="gen_ai.client.inference.operation.details",
                attributes={"gen_ai.input.messages": messages, "gen_ai.operation.name": "chat"},
                context=set_span_in_context(chat),
            )
    logger_provider.shutdown()
    tracer_provider.shutdown()
    collector.stop(grace=1)
    (trajectory,) = store.load_all()
    assert trajectory.steps[0].inputs == {"messages": messages}


def _lock_store(db_path):
    conn = sqlite3.connect(db_path, isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")  # holds the write lock: the receiver's commits must wait
    return conn


def test_overload_answers_503_and_429_with_retry_after(served, db_path):
    collector, _store = served(config=fast_config(ack_timeout=0.3, max_queued=4))
    lock = _lock_store(db_path)
    try:
        slow = post(collector, otlp_json_request(), "application/json")
        assert slow.status_code == 503 and slow.headers["Retry-After"] == "1"
        busy = post(collector, otlp_json_request(), "application/json")
        assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"
        assert "waiting for the disk" in busy.json()["message"]
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    deadline = time.monotonic() + 10
    while collector.receiver.snapshot()["uncommitted"] and time.monotonic() < deadline:
        time.sleep(0.02)
    # the unacknowledged request was committed after all; its retry stores nothing twice
    assert post(collector, otlp_json_request(), "application/json").status_code == 200
    assert len(pending_ids(db_path)) == 4


def test_a_store_that_keeps_failing_asks_clients_to_wait_longer_and_logs_once(
    served, monkeypatch, caplog
):
    """A full disk for minutes: the Retry-After doubles from 1 s (a fixed second let the
    OTel exporters spend their six retries in five seconds and drop the batch), and the log
    holds one traceback, not one per request."""
    from agent_replay.errors import StoreError

    collector, _store = served()
    sink = collector.receiver.sink
    real, failures = sink.add, []

    def add(spans, logs):
        if len(failures) < 6:
            failures.append(1)
            raise StoreError("database or disk is full")
        return real(spans, logs)

    monkeypatch.setattr(sink, "add", add)
    waits = []
    for _ in range(6):
        answer = post(collector, otlp_json_request(), "application/json")
        assert answer.status_code == 503 and "disk is full" in answer.json()["message"]
        waits.append(answer.headers["Retry-After"])
    assert waits == ["1", "2", "4", "8", "16", "30"]
    assert post(collector, otlp_json_request(), "application/json").status_code == 200
    failed = [r for r in caplog.records if "failed to commit received spans" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info


def test_memory_held_by_requests_is_bounded_and_one_request_always_passes(served):
    """Bodies were read and inflated before any admission: a hundred small gzip bombs held
    4.8 GB, six 440 KB requests 7.6 GB. Now what requests hold together is bounded
    (max_inflight_bytes): past it they wait with 429, and one request alone always passes."""
    import gzip
    import socket

    collector, _store = served(
        config=fast_config(max_body_bytes=4 << 20, max_inflight_bytes=1 << 20)
    )
    body = otlp_json_request()
    # a request whose body is still arriving holds what it sent (not what it declared: a
    # client trickling a large body must not hold the whole budget)
    slow = socket.create_connection(("127.0.0.1", collector.http_port))
    slow.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 4000000\r\n\r\n" + b" " * 1000
    )
    time.sleep(0.3)
    assert collector.receiver._held_bytes < 64 << 10  # declared 4 MB, sent 1 KB
    slow.sendall(b" " * 900_000)
    deadline = time.monotonic() + 5
    while collector.receiver._held_bytes < 800_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        bigger = post(collector, body + b" " * 300_000, "application/json")
        assert bigger.status_code == 429 and "being read and decoded" in bigger.json()["message"]
        bomb = gzip.compress(b" " * (3 << 20))
        inflating = post(collector, bomb, "application/json", **{"Content-Encoding": "gzip"})
        assert inflating.status_code == 429  # room to inflate it is taken first
        assert post(collector, body, "application/json").status_code == 200  # it fits
    finally:
        slow.close()
    deadline = time.monotonic() + 5
    while collector.receiver._held_bytes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert collector.receiver._held_bytes == 0
    alone = post(collector, body + b" " * (2 << 20), "application/json")  # over the budget
    assert alone.status_code == 200
    bomb = gzip.compress(b" " * (5 << 20))
    assert (
        post(collector, bomb, "application/json", **{"Content-Encoding": "gzip"}).status_code == 413
    )


def test_real_exporter_retries_through_a_slow_disk_and_stores_once(served, db_path):
    collector, _store = served(config=fast_config(ack_timeout=0.3))
    lock = _lock_store(db_path)
    release = threading.Timer(1.2, lambda: (lock.execute("ROLLBACK"), lock.close()))
    release.start()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")
    spans, sent = recorded_spans(3, "retry")
    started = time.monotonic()
    assert exporter.export(spans) is SpanExportResult.SUCCESS  # 503 + Retry-After, then 200
    assert time.monotonic() - started >= 0.9
    release.join()
    assert sorted(pending_ids(db_path)) == sorted(sent)
    assert collector.receiver.snapshot()["errors"].get("Unavailable", 0) >= 1


def test_bearer_token_http_and_grpc(served, db_path):
    collector, _store = served(config=fast_config(token="s3cret"))
    unauthorized = post(collector, otlp_json_request(), "application/json")
    assert unauthorized.status_code == 401 and "Bearer" in unauthorized.headers["WWW-Authenticate"]
    assert (
        post(
            collector, otlp_json_request(), "application/json", Authorization="Bearer wrong"
        ).status_code
        == 401
    )
    assert (
        post(
            collector, otlp_json_request(), "application/json", Authorization="Bearer s3cret"
        ).status_code
        == 200
    )
    for headers, expected in (
        ({}, SpanExportResult.FAILURE),
        ({"authorization": "Bearer s3cret"}, SpanExportResult.SUCCESS),
    ):
        exporter = GrpcSpanExporter(
            endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True, headers=headers, timeout=5
        )
        spans, _ = recorded_spans(1, "auth")
        assert exporter.export(spans) is expected
        exporter.shutdown()


def test_tls_for_both_transports(served, db_path, tmp_path, monkeypatch):
    # requests lets these override the exporter's certificate_file: keep them out of the way
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    cert, key = self_signed(tmp_path)
    collector, _store = served(tls=TLSConfig(cert, key))
    http_exporter = OTLPSpanExporter(
        endpoint=f"https://localhost:{collector.http_port}/v1/traces", certificate_file=str(cert)
    )
    grpc_exporter = GrpcSpanExporter(
        endpoint=f"localhost:{collector.grpc_port}",
        credentials=grpc.ssl_channel_credentials(root_certificates=cert.read_bytes()),
    )
    spans, sent = recorded_spans(1, "tls")
    for exporter in (http_exporter, grpc_exporter):
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert sorted(pending_ids(db_path)) == sorted(sent)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(f"http://localhost:{collector.http_port}/v1/traces", data=b"", timeout=5)


def test_a_tls_client_gone_before_its_answer_is_no_error(served, tmp_path, caplog):
    """An exporter whose timeout ran out leaves before reading its answer: over TLS the write
    raised SSLEOFError, logged at ERROR with a traceback as "request failed" (6 to 9 of 20)."""
    import ssl

    cert, key = self_signed(tmp_path)
    collector, _store = served(tls=TLSConfig(cert, key))
    context = ssl.create_default_context(cafile=str(cert))
    body = otlp_json_request()
    request = (
        f"POST /v1/traces HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", collector.http_port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as conn:
                conn.sendall(request)  # and gone, unread
    collector.stop(grace=2)
    assert collector.receiver.snapshot()["requests"] == 20
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def test_connections_stuck_in_their_tls_handshake_cannot_keep_a_client_out(
    served, tmp_path, monkeypatch
):
    """A connection in its handshake was not one a new connection could shut to make room:
    silent connections at the cap kept every HTTPS client out for the handshake's 30 s."""
    from agent_replay.ingest.receiver.http import OTLPHTTPServer

    monkeypatch.setattr(OTLPHTTPServer, "max_connections", 4)
    cert, key = self_signed(tmp_path)
    collector, _store = served(tls=TLSConfig(cert, key))
    silent = [socket.create_connection(("127.0.0.1", collector.http_port)) for _ in range(4)]
    try:
        time.sleep(0.2)  # all four are in their handshakes
        answer = requests.post(
            f"https://localhost:{collector.http_port}/v1/traces",
            data=otlp_json_request(),
            headers={"Content-Type": "application/json"},
            verify=str(cert),
            timeout=10,
        )
        assert answer.status_code == 200
    finally:
        for connection in silent:
            connection.close()


def test_idle_grpc_connections_are_capped(served, monkeypatch):
    """HTTP/2 connections that send their preface and then nothing were neither capped nor
    closed: a thousand used up the process's descriptors, shared with the HTTP listener."""
    import os

    from agent_replay.ingest.receiver import grpc as grpc_listener

    monkeypatch.setattr(grpc_listener, "MAX_CONNECTIONS", 4)
    collector, _ = served()
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    idle = []
    try:
        for _ in range(20):
            connection = socket.create_connection(("127.0.0.1", collector.grpc_port))
            connection.sendall(preface)
            idle.append(connection)
        time.sleep(0.5)
        # ours are 20 of the new descriptors; the receiver took 4 (and a few of its own)
        assert descriptors() - before - len(idle) <= 4 + 4
        assert post(collector, otlp_json_request(), "application/json").status_code == 200
    finally:
        for connection in idle:
            connection.close()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ("Authorization: Bearer s3cret\r\nContent-Type: application/json", 100),
        ("Authorization: Bearer wrong\r\nContent-Type: application/json", 401),
        ("Authorization: Bearer s3cret\r\nContent-Type: text/plain", 415),
    ],
)
def test_expect_100_continue_gets_the_final_status_when_the_body_would_be_refused(
    served, headers, status
):
    """A refused request was told "100 Continue" first, then refused while its client
    uploaded into a connection being closed."""
    collector, _ = served(config=fast_config(token="s3cret"))
    body = otlp_json_request()
    with socket.create_connection(("127.0.0.1", collector.http_port), timeout=10) as conn:
        reader = conn.makefile("rb")
        conn.sendall(
            f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        first = read_response(reader).split(b"\r\n", 1)[0]
        assert f" {status} ".encode() in first, first
        if status == 100:
            conn.sendall(body)
            assert b" 200 " in read_response(reader).split(b"\r\n", 1)[0]
        reader.close()


def test_other_methods_get_405_and_two_hosts_400(served):
    collector, _ = served()
    url = f"http://127.0.0.1:{collector.http_port}/v1/traces"
    for method in ("GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"):
        answer = requests.request(method, url, timeout=10)
        assert answer.status_code == 405 and answer.headers["Allow"] == "POST", method
    assert requests.head(url, timeout=10).content == b""  # a HEAD answer has no body
    with socket.create_connection(("127.0.0.1", collector.http_port), timeout=10) as conn:
        reader = conn.makefile("rb")
        conn.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        )
        assert b" 400 " in read_response(reader).split(b"\r\n", 1)[0]
        reader.close()


def export_children_only(port):
    """Spans of traces whose root never arrives: they wait (idle) in the pending table."""
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
    spans, _ = recorded_spans(2, "orphan")
    children = [s for s in spans if s.parent is not None]
    assert exporter.export(children) is SpanExportResult.SUCCESS
    return len(children)


def test_sigterm_drains_and_assembles_what_is_waiting(db_path):
    process, port = start_collect_process(db_path, "--idle-seconds", "3600")
    try:
        sent = export_children_only(port)
        process.terminate()  # SIGTERM
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["spans_stored"] == sent and summary["pending"]["spans_waiting"] == 0
    with CheckpointStore(db_path) as store:
        assert len(store.session_ids()) == 2


def test_a_second_signal_stops_at_once(db_path):
    """With the store locked the drain waits out SQLite's busy timeout, twice (about a
    minute whatever --grace-seconds said), and a second Ctrl-C or SIGTERM did nothing."""
    process, port = start_collect_process(db_path, "--grace-seconds", "1")
    lock = sqlite3.connect(db_path, isolation_level=None, timeout=30)
    try:
        lock.execute("BEGIN IMMEDIATE")  # the receiver's commit waits behind it
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=5)
        spans, _ = recorded_spans(1, "late")
        # (its export never succeeds: the process is stopped under it)
        sending = threading.Thread(target=exporter.export, args=(spans,), daemon=True)
        sending.start()
        time.sleep(1)
        process.terminate()
        time.sleep(1)
        started = time.monotonic()
        process.terminate()
        _, err = process.communicate(timeout=20)
        assert time.monotonic() - started < 10
    finally:
        if process.poll() is None:
            process.kill()
        lock.execute("ROLLBACK")
        lock.close()
    assert process.returncode == 130 and "stopping now" in err, err


def test_acknowledged_spans_survive_a_crash(db_path):
    process, port = start_collect_process(db_path, "--idle-seconds", "3600")
    try:
        sent = export_children_only(port)
    finally:
        process.kill()  # SIGKILL: no drain
        process.communicate(timeout=20)
    with CheckpointStore(db_path) as store:
        assert store.pending_counts()["spans_waiting"] == sent
        assert store.session_ids() == []
        collector = Collector(store, http=None, grpc=None, config=fast_config(idle_seconds=0))
        collector.start()
        collector.stop(grace=1)  # the restarted receiver assembles what was left waiting
        assert len(store.session_ids()) == 2


def test_collect_refuses_bad_and_taken_addresses_with_a_message(db_path):
    from click.testing import CliRunner

    from agent_replay.cli import main

    runner = CliRunner()
    for option in ("--http", "--grpc"):
        result = runner.invoke(main, ["collect", "--db", str(db_path), option, "127.0.0.1:99999"])
        assert result.exit_code == 2 and "port 0-65535" in result.output, result.output
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        for option, other in (("--grpc", "--http"), ("--http", "--grpc")):
            args = ["collect", "--db", str(db_path), option, f"127.0.0.1:{port}", other, "off"]
            result = runner.invoke(main, args)
            assert result.exit_code == 1 and "cannot listen" in result.output, result.output
            assert f"127.0.0.1:{port}" in result.output  # which address could not be used
            assert result.exception is None or isinstance(result.exception, SystemExit)
    finally:
        taken.close()
    bad = db_path.with_name("not.pem")
    bad.write_text("not a certificate")
    args = ["collect", "--db", str(db_path), "--grpc", "off", "--http", "127.0.0.1:0"]
    result = runner.invoke(main, [*args, "--tls-cert", str(bad), "--tls-key", str(bad)])
    assert result.exit_code == 1 and "cannot use the TLS certificate" in result.output


def test_oversize_headers_get_a_json_status_not_an_html_page(served):
    """The standard library answers oversize headers (431) itself; the body is a JSON Status
    like every other error of the receiver, and the receiver keeps serving."""
    collector, _store = served()
    reply = post(collector, b"{}", "application/json", **{"X-Big": "x" * 70_000})
    assert reply.status_code == 431
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json()["code"] == 3 and "431" in reply.json()["message"]
    assert post(collector, b"{}", "application/json").status_code == 200


def exchange(port: int, data: bytes, *, end_write: bool = False) -> bytes:
    """Send ``data`` on a new connection (then close our side, with ``end_write``) and read
    everything the server answers until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        if end_write:
            conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    ("line", "status", "kind"),
    [
        (b"GARBAGE", 400, "BadRequest"),
        (b"POST /v1/traces HTTP/1.1 x", 400, "BadRequest"),
        (b"POST /v1/traces HTTP/3.0", 505, "HTTPVersionNotSupported"),
        (b"PRI * HTTP/2.0", 505, "HTTPVersionNotSupported"),  # an HTTP/2 (gRPC) client
    ],
    ids=["garbage", "four-words", "http3", "h2-preface"],
)
def test_a_malformed_request_line_gets_an_http_response_and_is_counted(served, line, status, kind):
    """The standard library answered these before it knew the request's HTTP version, the
    HTTP/0.9 way: a bare JSON body, no status line, no headers; and nothing was counted."""
    collector, _store = served()
    answer = exchange(
        collector.http_port, line + b"\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), answer
    assert b"\r\nContent-Type: application/json" in head and b"\r\nConnection: close" in head
    assert json.loads(body)["code"] == 3
    if line.startswith(b"PRI"):
        assert "gRPC port" in json.loads(body)["message"]
    assert collector.receiver.snapshot()["errors"] == {kind: 1}
    assert post(collector, otlp_json_request(), "application/json").status_code == 200


def test_a_grpc_client_sent_to_the_http_port_is_told_it_reached_http1(served, caplog):
    """A gRPC exporter pointed at the HTTP port read the bare body as a bad HTTP/2 frame; with
    a real HTTP/1.1 answer grpc says what it met, and the receiver logs where to go."""
    collector, _store = served()
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.http_port}")
    export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
    with caplog.at_level("WARNING", logger="agent_replay.ingest.receiver.http"):
        with pytest.raises(grpc.RpcError) as info:
            export(b"", timeout=5)
    channel.close()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "http1.x server (HTTP status 505)" in info.value.details()
    assert "HTTP/2 client (a gRPC exporter?)" in caplog.text
    assert collector.receiver.snapshot()["errors"]["HTTPVersionNotSupported"] >= 1


HEAD = (
    b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
    b"Content-Length: 0\r\n"
)


@pytest.mark.parametrize(
    "head",
    [HEAD, HEAD[:70], HEAD[:26], HEAD[:12]],
    ids=["before-blank-line", "mid-header", "after-request-line", "mid-request-line"],
)
def test_a_request_head_cut_off_is_a_bad_request_not_a_request(served, head):
    """A client that closed its side before the blank line ending the head had what arrived
    answered as a whole request: 200 for an export never finished, or 415 for the
    Content-Type it never finished sending."""
    collector, _store = served()
    answer = exchange(collector.http_port, head, end_write=True)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"cut off" in answer.partition(b"\r\n\r\n")[2]
    snapshot = collector.receiver.snapshot()
    assert snapshot["errors"] == {"BadRequest": 1} and snapshot["requests"] == 0
    whole = exchange(collector.http_port, HEAD + b"\r\n", end_write=True)
    assert whole.startswith(b"HTTP/1.1 200 ")


def test_connections_the_server_shuts_are_counted_as_what_they_are(served):
    """Connections shut to make room past the connection cap, or for a head or body that did
    not arrive in time, were read as requests without their headers: counted 415."""
    collector, _store = served()
    server = collector.http_server
    server.max_connections = 2
    waiting = []
    try:
        for _ in range(2):
            waiting.append(socket.create_connection(("127.0.0.1", collector.http_port)))
            waiting[-1].sendall(HEAD[:26])  # a request line, then nothing yet
        deadline = time.monotonic() + 5
        while len(server._waiting) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert post(collector, otlp_json_request(), "application/json").status_code == 200
        # the connection that waited longest for its head was shut for it, unanswered
        readable, _, _ = select.select(waiting, [], [], 5)
        assert len(readable) == 1 and readable[0].recv(100) == b""
        assert collector.receiver.snapshot()["errors"] == {"Evicted": 1}
    finally:
        for connection in waiting:
            connection.close()
    # the other one, closed by its client mid-head, is a bad request
    wait_for_errors(collector, {"Evicted": 1, "BadRequest": 1})
    server.max_connections = 256
    server.head_seconds, server.min_body_rate = 0.5, 1024
    assert trickle(collector.http_port, b"", HEAD, every=0.2) is not None  # a slow head
    slow_body = HEAD.replace(b"Length: 0", b"Length: 100000") + b"\r\n" + b" " * 2000
    assert trickle(collector.http_port, slow_body, b" " * 75, every=0.2) is not None
    wait_for_errors(collector, {"Evicted": 1, "BadRequest": 1, "TooSlow": 2})


def wait_for_errors(collector, expected: dict) -> None:
    """Until the receiver's error counts are ``expected`` (a connection's thread counts
    after the client saw it closed); fails after 5 s."""
    deadline = time.monotonic() + 5
    while collector.receiver.snapshot()["errors"] != expected:
        assert time.monotonic() < deadline, collector.receiver.snapshot()["errors"]
        time.sleep(0.01)


def test_on_loopback_an_export_naming_another_host_is_refused(served, db_path):
    """DNS rebinding let a web page plant sessions in the tokenless loopback receiver."""
    collector, _store = served()
    planted = post(collector, otlp_json_request(), "application/json", Host="attacker.example")
    assert planted.status_code == 421
    assert post(collector, otlp_json_request(), "application/json").status_code == 200
    assert len(pending_ids(db_path)) == 4


def test_a_trickled_body_is_cut_off_and_gives_back_its_memory(served):
    """A body sent a byte at a time within the read timeout kept its thread, connection and
    held bytes as long as the client liked; now it must keep a pace once its grace is over."""
    collector, _store = served()
    collector.http_server.head_seconds = 0.5
    collector.http_server.min_body_rate = 1024
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n" + b" " * 2000
    )
    took = trickle(collector.http_port, head, b" " * 75, every=0.2)  # 15 s if let through
    assert took is not None and took < 10
    deadline = time.monotonic() + 5
    while collector.receiver._held_bytes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert collector.receiver._held_bytes == 0
    assert post(collector, otlp_json_request(), "application/json").status_code == 200


def test_a_receiver_that_keeps_sessions_for_a_while_prunes_the_older_ones(served):
    """`collect --keep-sessions`: the receiver deletes, every prune interval, the sessions
    not saved for that long, with what only they used (CheckpointStore.prune)."""
    config = fast_config(idle_seconds=0, keep_seconds=2.0, prune_interval=0.2)
    collector, store = served(config=config)
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=20))

    def agents():
        found = set()
        for session_id in store.session_ids():
            with contextlib.suppress(SessionNotFoundError):  # (pruned meanwhile)
                found.add(store.load(session_id).steps[0].agent)
        return found

    def wait_for(condition):
        deadline = time.monotonic() + 15
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.05)
        return condition()

    emit_traces(provider, 2, "old")
    provider.force_flush()
    assert wait_for(lambda: len(store.session_ids()) == 2)
    time.sleep(1.5)
    emit_traces(provider, 1, "new")  # saved 1.5 s later: kept while the first two go
    provider.shutdown()
    assert wait_for(lambda: agents() == {"new"})
    (kept,) = store.session_ids()
    assert store.stats()["steps"] == len(store.load(kept).steps)  # the others' rows are gone
    assert wait_for(lambda: not store.session_ids())  # and it goes too, 2 s after it was saved
