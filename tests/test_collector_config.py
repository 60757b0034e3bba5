"""collector-config/*.yaml parse, and every exporter aimed at agent-replay uses only settings
its receiver accepts: each is replayed against a live receiver the way that exporter would
call it (same path, encoding, compression and headers)."""

import gzip
import json
import re
import zlib
from pathlib import Path

import grpc
import pytest
import requests
import yaml
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_replay import CheckpointStore
from agent_replay.ingest import load
from agent_replay.ingest.receiver import Collector, ReceiverConfig
from zstd_codec import zstd

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "collector-config").glob("*.yaml"))
TOKEN = "config-test-token"
# what otlphttp sends for each `compression` agent-replay takes (snappy and lz4 it does not)
COMPRESS = {"gzip": gzip.compress, "deflate": zlib.compress, "zstd": zstd.compress}
# settings of each exporter type that make sense towards agent-replay
ALLOWED = {
    "otlphttp": {
        "endpoint",
        "traces_endpoint",
        "logs_endpoint",
        "encoding",
        "compression",
        "headers",
        "timeout",
        "retry_on_failure",
        "sending_queue",
        "tls",
    },
    "otlp": {
        "endpoint",
        "compression",
        "headers",
        "timeout",
        "retry_on_failure",
        "sending_queue",
        "tls",
        "balancer_name",
    },
    "loadbalancing": {"routing_key", "protocol", "resolver", "timeout"},
    "file": {"path", "format", "rotation", "append", "flush_interval", "group_by"},
}


def components(config, kind):
    return config.get(kind) or {}


def agent_replay_exporters(config):
    return {
        name: settings or {}
        for name, settings in components(config, "exporters").items()
        if "agent_replay" in name
    }


def substitute(value):
    return (
        re.sub(r"\$\{env:AGENT_REPLAY_TOKEN\}", TOKEN, value) if isinstance(value, str) else value
    )


def spans_request():
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}
    with provider.get_tracer("config-test").start_as_current_span(
        "execute_tool t", attributes=attributes
    ):
        pass
    provider.shutdown()
    return encode_spans(memory.get_finished_spans())


def as_otlp_json(message):
    import base64

    from google.protobuf import json_format

    doc = json_format.MessageToDict(message, use_integers_for_enums=True)
    for rs in doc.get("resourceSpans", []):
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return doc


@pytest.fixture(scope="module")
def receiver(tmp_path_factory):
    db = tmp_path_factory.mktemp("collector-config") / "store.sqlite"
    store = CheckpointStore(db)
    collector = Collector(
        store, http="127.0.0.1:0", grpc="127.0.0.1:0", config=ReceiverConfig(token=TOKEN)
    ).start()
    yield collector
    collector.stop(grace=1)
    store.close()


def test_there_is_one_config_per_use_case():
    assert {p.name for p in CONFIGS} == {
        "relay.yaml",
        "fanout.yaml",
        "loadbalancing.yaml",
        "file-export.yaml",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_parses_and_is_wired(path):
    config = yaml.safe_load(path.read_text())
    pipelines = config["service"]["pipelines"]
    for pipeline in pipelines.values():
        for kind in ("receivers", "processors", "exporters"):
            for name in pipeline.get(kind, []):
                assert name in components(config, kind), f"{path.name}: {name} is not defined"
    ours = agent_replay_exporters(config)
    assert ours, f"{path.name} sends nothing to agent-replay"
    # traces and logs both reach agent-replay (event-only GenAI content is in the logs)
    for signal in ("traces", "logs"):
        assert set(pipelines[signal]["exporters"]) & set(ours), f"{path.name}: no {signal}"
    for name, settings in ours.items():
        kind = name.split("/")[0]
        assert kind in ALLOWED, f"{name}: agent-replay cannot receive from a {kind} exporter"
        assert set(settings) <= ALLOWED[kind], (
            f"{name}: unknown settings {set(settings) - ALLOWED[kind]}"
        )


def check_http_exporter(settings, collector):
    endpoint = substitute(settings["endpoint"])
    assert re.fullmatch(r"https?://[^/]+/?", endpoint), (
        "give the base URL; /v1/<signal> is appended"
    )
    for key, path in (("traces_endpoint", "/v1/traces"), ("logs_endpoint", "/v1/logs")):
        if key in settings:
            assert settings[key].endswith(path)
    encoding = settings.get("encoding", "proto")
    compression = settings.get("compression", "gzip")  # the exporter's default
    headers = {k: substitute(v) for k, v in (settings.get("headers") or {}).items()}
    request = spans_request()
    if encoding == "json":
        body, content_type = json.dumps(as_otlp_json(request)).encode(), "application/json"
    else:
        body, content_type = request.SerializeToString(), "application/x-protobuf"
    headers["Content-Type"] = content_type
    if compression not in ("none", "", None):
        headers["Content-Encoding"] = compression
        body = COMPRESS[compression](body)
    base = f"http://127.0.0.1:{collector.http_port}"
    for path in ("/v1/traces", "/v1/logs"):
        payload = body if path == "/v1/traces" else (b"{}" if encoding == "json" else b"")
        if path == "/v1/logs" and "Content-Encoding" in headers:
            payload = COMPRESS[compression](payload)
        response = requests.post(base + path, data=payload, headers=headers, timeout=10)
        assert response.status_code == 200, (path, response.status_code, response.text)


def file_export(settings) -> bytes:
    """What the file exporter writes of one request (exporter/fileexporter, by its code): JSON
    Lines, or each message after its 4-byte big-endian length, which is also how it writes
    every message with `compression: zstd` (each one a zstd frame, whatever the format)."""
    request = spans_request()
    if settings.get("format", "json") == "json":
        payload = json.dumps(as_otlp_json(request)).encode()
        if not settings.get("compression"):
            return payload + b"\n"
    else:
        payload = request.SerializeToString()
    if settings.get("compression"):
        payload = zstd.compress(payload)
    return len(payload).to_bytes(4, "big") + payload


def check_grpc_exporter(settings, collector):
    compression = settings.get("compression", "gzip")
    assert compression in ("gzip", "none", ""), f"agent-replay's gRPC cannot take {compression}"
    tls = settings.get("tls") or {}
    assert tls.get("insecure") is True or "ca_file" in tls
    metadata = tuple((k.lower(), substitute(v)) for k, v in (settings.get("headers") or {}).items())
    channel = grpc.insecure_channel(
        f"127.0.0.1:{collector.grpc_port}",
        compression=grpc.Compression.Gzip
        if compression == "gzip"
        else grpc.Compression.NoCompression,
    )
    traces = trace_service_pb2_grpc.TraceServiceStub(channel)
    traces.Export(spans_request(), metadata=metadata, timeout=10)
    logs = logs_service_pb2_grpc.LogsServiceStub(channel)
    logs.Export(logs_service_pb2.ExportLogsServiceRequest(), metadata=metadata, timeout=10)
    channel.close()


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_exporters_use_only_what_the_receiver_accepts(path, receiver, tmp_path):
    config = yaml.safe_load(path.read_text())
    exporters = agent_replay_exporters(config)
    assert exporters, f"{path.name} has no agent_replay exporter"
    for name, settings in exporters.items():
        kind = name.split("/")[0]
        if kind == "otlphttp":
            check_http_exporter(settings, receiver)
        elif kind == "otlp":
            assert re.fullmatch(r"[^/:]+:\d+", settings["endpoint"]), "gRPC endpoint is host:port"
            check_grpc_exporter(settings, receiver)
        elif kind == "loadbalancing":
            assert settings["routing_key"] == "traceID"
            otlp = settings["protocol"]["otlp"]
            assert "endpoint" not in otlp  # the resolver provides it
            assert set(otlp) <= ALLOWED["otlp"]
            for hostname in settings["resolver"]["static"]["hostnames"]:
                assert re.fullmatch(r"[^/:]+:\d+", hostname)
            check_grpc_exporter(otlp, receiver)
        elif kind == "file":
            assert settings.get("format", "json") in ("json", "proto")
            assert settings.get("compression", "zstd") == "zstd"
            # what such an exporter writes is what `agent-replay import` reads, compressed too
            for variant in ({**settings, "compression": None}, {**settings, "compression": "zstd"}):
                written = tmp_path / Path(settings["path"]).name
                written.write_bytes(file_export(variant))
                (trajectory,) = load(written)
                assert trajectory.steps[0].label == "tool:t"
        else:
            pytest.fail(f"{path.name}: exporter kind {kind!r} is not checked by this test")
