"""collector-config/ run under a real OpenTelemetry Collector: applications export through the
Collector with the real OpenTelemetry SDK, the Collector's own OTLP exporters deliver to
agent-replay's receiver, and every span arrives exactly once, with its log-borne content.

Needs a Collector binary with the core components (OTLP receiver and exporters, batch; see
real_otelcol.py); CI builds one with ``.ci/install-otelcol``. Without one these tests are
skipped. The two configs that need
contrib components (``loadbalancing``, ``file``) are not run here: no binary at hand has them."""

from __future__ import annotations

import functools
import socket
import sqlite3
import time

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import set_span_in_context

from agent_replay.ingest.receiver import TLSConfig
from real_otelcol import TOKEN, arrived, fanout, otelcol, otelcol_binary, receiver, shipped
from self_signed import self_signed

RUNS = 6
TOOLS = 2

pytestmark = pytest.mark.skipif(
    otelcol_binary() is None,
    reason="no OpenTelemetry Collector binary: set AGENT_REPLAY_OTELCOL (.ci/install-otelcol "
    "builds one) or put otelcol / otelcol-contrib on the PATH",
)


def send_agent_runs(
    http_port: int, grpc_port: int | None = None, runs: range = range(RUNS)
) -> list[tuple[str, str]]:
    """Agent runs exported by the real SDK to an OTLP receiver (spans over gRPC when
    ``grpc_port`` is given, else over HTTP; logs over HTTP): each an invoke_agent root, a chat
    span whose messages travel as an event-only log record, and TOOLS execute_tool spans.
    Returns the (trace id, span id) of every span sent."""
    if grpc_port is None:
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces")
    else:
        exporter = GrpcSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=20))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(
            OTLPLogExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/logs"),
            schedule_delay_millis=20,
        )
    )
    tracer = tracer_provider.get_tracer("real-collector-test")
    logger = logger_provider.get_logger("opentelemetry.instrumentation.genai.test")
    sent = []
    for run in runs:
        agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
        with tracer.start_as_current_span("invoke_agent planner", attributes=agent) as root:
            with tracer.start_as_current_span(
                "chat m", attributes={"gen_ai.operation.name": "chat"}
            ) as chat:
                logger.emit(
                    event_name="gen_ai.client.inference.operation.details",
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": prompt(run),
                    },
                    context=set_span_in_context(chat),
                )
                sent.append(chat.get_span_context())
            for tool in range(TOOLS):
                attributes = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": f"t{tool}",
                    "gen_ai.tool.call.result": f'"{run}-{tool}"',
                }
                with tracer.start_as_current_span(
                    f"execute_tool t{tool}", attributes=attributes
                ) as s:
                    sent.append(s.get_span_context())
            sent.append(root.get_span_context())
    logger_provider.shutdown()
    tracer_provider.shutdown()
    return [(format(c.trace_id, "032x"), format(c.span_id, "016x")) for c in sent]


def prompt(run: int) -> list[dict]:
    return [{"role": "user", "parts": [{"type": "text", "content": f"question {run}"}]}]


def wait_for(collector, db_path, sent, runs=range(RUNS), seconds: float = 30) -> None:
    """Until every span sent, and every run's log record, is committed by the receiver."""
    deadline = time.monotonic() + seconds
    while (got := arrived(collector, db_path)) != (set(sent), len(runs)):
        assert time.monotonic() < deadline, f"{len(got[0])} of {len(sent)} spans, {got[1]} logs"
        time.sleep(0.05)


def check_stored(collector, store, sent, runs=range(RUNS), *, resent: bool = False) -> None:
    """Every span and log record stored once, and received once (unless ``resent``: then
    some more than once); every run a trajectory whose chat step has that run's logged prompt
    and whose tools that run's results."""
    collector.stop(grace=2)  # assembles what is waiting
    counts = collector.receiver.snapshot()
    assert counts["spans_stored"] == len(sent) and counts["logs_stored"] == len(runs)
    if resent:  # some span or log record was sent again
        assert counts["spans_received"] + counts["logs_received"] > len(sent) + len(runs), counts
    else:
        assert counts["spans_received"] == len(sent), counts
        assert counts["logs_received"] == len(runs), counts
    trajectories = list(store.load_all())
    assert len(trajectories) == len(runs)
    seen = []
    for trajectory in trajectories:
        chat, *tools = trajectory.steps
        assert trajectory.metadata["capture"]["steps_without_content"] == []
        (run,) = [n for n in runs if chat.inputs["messages"] == prompt(n)]
        assert [tool.output for tool in tools] == [f"{run}-{t}" for t in range(TOOLS)]
        seen.append(run)
    assert sorted(seen) == list(runs)


@pytest.mark.parametrize(
    ("encoding", "compression"),
    [
        ("proto", "gzip"),
        ("json", "gzip"),
        ("proto", "zstd"),
        ("proto", "deflate"),
        ("proto", "zlib"),
        ("json", "none"),
    ],
)
def test_relay_delivers_every_span_once_with_its_logged_content(
    tmp_path, db_path, encoding, compression
):
    with receiver(db_path, token=TOKEN) as (collector, store):
        config, _grpc, http = shipped(
            "relay.yaml",
            **{
                "otlphttp/agent_replay": {
                    "endpoint": f"http://127.0.0.1:{collector.http_port}",
                    "encoding": encoding,
                    "compression": compression,
                }
            },
        )
        with otelcol(config, http, tmp_path):
            sent = send_agent_runs(http)
            wait_for(collector, db_path, sent)
        check_stored(collector, store, sent)


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_relay_and_fanout_over_tls_as_the_readme_says(tmp_path, db_path, transport):
    """`collect --tls-cert/--tls-key`, and the exporter given the CA: an https:// endpoint
    with `tls.ca_file` (relay.yaml, OTLP/HTTP) or `tls.ca_file` alone (fanout.yaml, gRPC),
    as collector-config/README.md says; the Collector's Go TLS client checks the name."""
    cert, key = self_signed(tmp_path)
    tls = {"ca_file": str(cert)}
    with (
        receiver(db_path, TLSConfig(cert, key), token=TOKEN) as (ours, store),
        receiver(tmp_path / "backend.sqlite") as (backend, _),  # fanout's other destination
    ):
        if transport == "http":
            endpoint = {"endpoint": f"https://localhost:{ours.http_port}", "tls": tls}
            config, _, http = shipped("relay.yaml", **{"otlphttp/agent_replay": endpoint})
        else:
            config, _, http = fanout(backend.grpc_port, ours.grpc_port)
            config["exporters"]["otlp/agent_replay"].update(
                endpoint=f"localhost:{ours.grpc_port}", tls=tls
            )
        with otelcol(config, http, tmp_path):
            sent = send_agent_runs(http)
            wait_for(ours, db_path, sent)
        check_stored(ours, store, sent)


def sent_while_locked(db_path, collector, error: str, send) -> list[tuple[str, str]]:
    """What ``send()`` sent with the store locked by another writer (the receiver's commits
    wait behind it), once the receiver has answered ``error`` (an error class name) at least
    once; the lock is released on the way out."""
    lock = sqlite3.connect(db_path, isolation_level=None, timeout=30)
    lock.execute("BEGIN IMMEDIATE")
    try:
        sent = send()
        deadline = time.monotonic() + 20
        while not collector.receiver.snapshot()["errors"].get(error):
            assert time.monotonic() < deadline, collector.receiver.snapshot()
            time.sleep(0.05)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    return sent


def test_relay_retries_while_the_receiver_asks_it_to_wait(tmp_path, db_path):
    """The receiver answers 503 with Retry-After while its disk is busy; the Collector's
    retry_on_failure (as relay.yaml sets it) sends those requests again (the receiver gets
    more records than were sent) and nothing is stored twice."""
    with receiver(db_path, token=TOKEN, ack_timeout=0.3) as (collector, store):
        config, _grpc, http = shipped(
            "relay.yaml",
            **{"otlphttp/agent_replay": {"endpoint": f"http://127.0.0.1:{collector.http_port}"}},
        )
        with otelcol(config, http, tmp_path):
            sent = sent_while_locked(
                db_path, collector, "Unavailable", functools.partial(send_agent_runs, http)
            )
            wait_for(collector, db_path, sent)
            deadline = time.monotonic() + 20  # the retry comes after Retry-After (1 s)
            while collector.receiver.snapshot()["spans_received"] <= len(sent):
                assert time.monotonic() < deadline, collector.receiver.snapshot()
                time.sleep(0.05)
        check_stored(collector, store, sent, resent=True)


def test_fanout_retries_while_the_receiver_is_overloaded_over_grpc(tmp_path, db_path):
    """The receiver refuses work beyond its queue with RESOURCE_EXHAUSTED; the Collector's
    gRPC exporter retries that only when the status's details carry a RetryInfo (the trailing
    metadata alone, which the receiver sent, is not read: "Exporting failed. Dropping
    data." and the spans were lost)."""
    backend_db = tmp_path / "backend.sqlite"
    with (
        receiver(db_path, token=TOKEN, max_queued=1, ack_timeout=20) as (ours, store),
        receiver(backend_db) as (backend, _),
    ):
        config, grpc_port, http = fanout(backend.grpc_port, ours.grpc_port)
        with otelcol(config, http, tmp_path):
            # the first request waits for the disk; the next are refused, the queue full
            send = functools.partial(send_agent_runs, http, grpc_port)
            sent = sent_while_locked(db_path, ours, "Overloaded", send)
            wait_for(ours, db_path, sent)
        check_stored(ours, store, sent, resent=True)


def test_fanout_feeds_the_backend_even_while_agent_replay_is_down(tmp_path, db_path):
    """fanout.yaml over gRPC: with both destinations up, each gets every span; with
    agent-replay unreachable, the existing backend (here a second receiver) still does, batch
    after batch (were agent-replay's sending_queue turned off, `enabled: false`, the second
    batch would wait behind the first one's retries: only half arrived, when tried)."""
    backend_db = tmp_path / "backend.sqlite"
    with (
        receiver(db_path, token=TOKEN) as (ours, store),
        receiver(backend_db) as (backend, backend_store),
    ):
        config, grpc_port, http = fanout(backend.grpc_port, ours.grpc_port)
        with otelcol(config, http, tmp_path):
            sent = send_agent_runs(http, grpc_port)
            wait_for(ours, db_path, sent)
            wait_for(backend, backend_db, sent)
        check_stored(ours, store, sent)
        check_stored(backend, backend_store, sent)

    down = tmp_path / "down"
    down.mkdir()
    backend_db = tmp_path / "backend2.sqlite"
    with (
        receiver(backend_db) as (backend, backend_store),
        socket.socket() as dead,  # bound, never listening: refuses, and no one else gets it
    ):
        dead.bind(("127.0.0.1", 0))
        config, grpc_port, http = fanout(backend.grpc_port, dead.getsockname()[1])
        with otelcol(config, http, down):
            sent = send_agent_runs(http, grpc_port)
            time.sleep(0.5)  # past the batch processor's timeout (200 ms): a second batch
            sent += send_agent_runs(http, grpc_port, runs=range(RUNS, 2 * RUNS))
            wait_for(backend, backend_db, sent, runs=range(2 * RUNS), seconds=10)
        check_stored(backend, backend_store, sent, runs=range(2 * RUNS))
