"""agent-replay's receiver fed directly, and through collector-config/relay.yaml under a real
OpenTelemetry Collector, side by side in one run.

The same load both ways: ``--apps`` applications, each with the OpenTelemetry SDK's
BatchSpanProcessor and OTLP/HTTP exporter, emit ``--traces`` agent runs of an invoke_agent
root and 8 execute_tool spans, as fast as they can, to ``agent-replay collect`` running in a
process of its own. Printed for each way: spans per second from the first span made until
every one is committed to agent-replay's store (what an exporter's acknowledgement means),
how many requests the receiver answered 503 / 429 (its back-pressure), and how many spans it
received (more than were sent: some requests were sent again). Every span must be stored
exactly once, or the script fails.

Needs a Collector binary (tests/real_otelcol.py: ``$AGENT_REPLAY_OTELCOL``, else otelcol or
otelcol-contrib on the PATH; ``bash .ci/install-otelcol`` builds one). Run:

    python benchmarks/collector_relay.py [--apps 4] [--traces 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from collect_process import start_collect_process
from real_otelcol import otelcol, otelcol_binary, shipped

TOOLS = 8


def emit(port: int, apps: int, traces: int) -> list[tuple[str, str]]:
    """``apps`` SDK pipelines exporting to OTLP/HTTP on ``port`` at once; every span's ids."""
    sent: list[tuple[str, str]] = []
    lock = threading.Lock()

    def app() -> None:
        provider = TracerProvider()
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{port}/v1/traces", compression=Compression.Gzip
        )
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 20))
        tracer = provider.get_tracer("collector-relay-benchmark")
        mine = []
        for _ in range(traces):
            root = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
            with tracer.start_as_current_span("invoke_agent planner", attributes=root) as run:
                for tool in range(TOOLS):
                    attributes = {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": f"t{tool}",
                        "gen_ai.tool.call.result": '"' + "result " * 20 + '"',
                    }
                    with tracer.start_as_current_span(
                        f"execute_tool t{tool}", attributes=attributes
                    ) as span:
                        mine.append(span.get_span_context())
                mine.append(run.get_span_context())
        # every span exported before the application ends: shutdown alone gives the queue
        # 30 s and drops the rest silently (an application emitting flat out, as these do,
        # has a backlog that takes longer than that to send)
        if not provider.force_flush(timeout_millis=600_000):
            sys.exit("the SDK could not export every span within 10 minutes")
        provider.shutdown()
        with lock:
            sent.extend((format(c.trace_id, "032x"), format(c.span_id, "016x")) for c in mine)

    threads = [threading.Thread(target=app) for _ in range(apps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sent


def committed(db: Path) -> int:
    """Spans agent-replay has committed (acknowledged) so far."""
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT count(*) FROM pending_spans").fetchone()[0]


def measure(via_collector: bool, apps: int, traces: int) -> dict:
    """One way: ``agent-replay collect`` in a process of its own (as users run it), fed
    directly or through the Collector; its counters come from the summary it prints."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.sqlite"
        collect, collect_port = start_collect_process(db)
        try:
            if via_collector:
                endpoint = {"endpoint": f"http://127.0.0.1:{collect_port}", "headers": {}}
                config, _grpc, port = shipped("relay.yaml", **{"otlphttp/agent_replay": endpoint})
                running = otelcol(config, port, Path(tmp), show_log=False)
            else:
                port, running = collect_port, contextlib.nullcontext()
            with running:
                start = time.perf_counter()
                sent = emit(port, apps, traces)
                deadline = time.monotonic() + 600
                while committed(db) < len(sent):
                    if time.monotonic() > deadline:
                        sys.exit("not every span arrived within 10 minutes")
                    time.sleep(0.05)
                seconds = time.perf_counter() - start
        finally:
            collect.terminate()  # drains, then prints its counters
            out, err = collect.communicate(timeout=120)
    counts = json.loads(out.strip().splitlines()[-1])
    if counts["spans_stored"] != len(sent):
        sys.exit(f"stored {counts['spans_stored']} spans of {len(sent)} sent\n{err}")
    return {
        "spans": len(sent),
        "seconds": seconds,
        "received": counts["spans_received"],
        "refused": sum(counts["errors"].values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", type=int, default=4)
    parser.add_argument("--traces", type=int, default=2000, help="agent runs per application")
    args = parser.parse_args()
    if otelcol_binary() is None:
        sys.exit("no Collector binary: set AGENT_REPLAY_OTELCOL (bash .ci/install-otelcol)")
    print(
        f"{args.apps} SDK applications x {args.traces} agent runs x {TOOLS + 1} spans, "
        "OTLP/HTTP protobuf + gzip; spans/s until every span is committed"
    )
    rows = {}
    for label, via in (("direct to agent-replay", False), ("through relay.yaml", True)):
        r = rows[label] = measure(via, args.apps, args.traces)
        print(
            f"{label:24} {r['spans']:>8,} spans in {r['seconds']:6.1f} s = "
            f"{r['spans'] / r['seconds']:>7,.0f} spans/s; {r['refused']} requests answered "
            f"503/429, {r['received']:,} spans received, every span stored once"
        )
    direct, relayed = rows.values()
    ratio = (relayed["spans"] / relayed["seconds"]) / (direct["spans"] / direct["seconds"])
    print(f"through the Collector / direct: {ratio:.2f}x the throughput")
    return 0


if __name__ == "__main__":
    sys.exit(main())
