"""Ingest benchmarks, side by side in one run (medians of repeats).

1. OTLP/JSON import (``agent_replay.ingest.load`` of the bytes, all the way to hashed
   trajectories) vs ``json.loads`` of the same bytes. Target: ≤ 3×.
2. OTLP protobuf import vs ``ExportTraceServiceRequest.ParseFromString`` of the same bytes.
   Target: ≤ 3×.
3. Receiver throughput: spans/s acknowledged by ``agent-replay collect``'s receiver with 4
   concurrent real OpenTelemetry exporters (OTLP/HTTP protobuf+gzip, and OTLP/gRPC), plus the
   time to assemble everything afterwards.

The data is generated with the real OpenTelemetry SDK: agent runs of an ``invoke_agent`` root,
``--turns`` chat spans whose ``gen_ai.input.messages`` grow turn by turn (JSON strings, as
instrumentations write them) and one ``execute_tool`` span per turn. Run:

    python benchmarks/ingest.py [--traces 200] [--turns 4] [--repeats 7]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from genai_turns import TEXT, chat_then_tool, question, recording_tracer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agent_replay import CheckpointStore
from agent_replay.ingest import load
from agent_replay.ingest.otlp import read_otlp_json, read_otlp_proto, to_otlp_json
from agent_replay.model import chain_steps


def record_runs(traces: int, turns: int):
    """Finished SDK spans of ``traces`` agent runs."""
    tracer, memory = recording_tracer("bench-agent")
    for t in range(traces):
        messages = question(str(t))
        root = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "analyst",
            "gen_ai.conversation.id": f"conv-{t}",
        }
        with tracer.start_as_current_span("invoke_agent analyst", attributes=root):
            for turn in range(turns):
                messages = chat_then_tool(
                    tracer,
                    f"call_{t}_{turn}",
                    messages,
                    answer=TEXT[: 40 + turn],
                    result=TEXT * 2,
                    input_tokens=100 + turn,
                    turn=turn,
                )
    return memory.get_finished_spans()


def to_json_line(request: ExportTraceServiceRequest) -> str:
    return json.dumps(to_otlp_json(request), separators=(",", ":"))


def _timed(fn) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(baseline, candidates: dict, repeats: int) -> dict:
    """Median seconds of ``baseline`` and of each candidate, and the median of the per-repeat
    ratios candidate / baseline. Each repeat runs the baseline right before the candidates,
    so a machine that speeds up or slows down during the run (shared CPUs) shifts both."""
    times: dict[str, list[float]] = {"baseline": [], **{name: [] for name in candidates}}
    ratios: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        base = _timed(baseline)
        times["baseline"].append(base)
        for name, fn in candidates.items():
            elapsed = _timed(fn)
            times[name].append(elapsed)
            ratios[name].append(elapsed / base)
    out = {name: statistics.median(values) for name, values in times.items()}
    out.update({f"{name}_ratio": statistics.median(values) for name, values in ratios.items()})
    return out


def batches(spans, size):
    return [spans[i : i + size] for i in range(0, len(spans), size)]


def bench_files(traces: int, turns: int, repeats: int) -> dict:
    spans = record_runs(traces, turns)
    requests = [encode_spans(batch) for batch in batches(spans, 512)]
    json_bytes = "".join(to_json_line(r) + "\n" for r in requests).encode()
    proto_payloads = [r.SerializeToString() for r in requests]
    proto_bytes = b"".join(len(p).to_bytes(4, "big") + p for p in proto_payloads)
    lines = json_bytes.splitlines()

    def json_baseline():
        for line in lines:
            json.loads(line)

    def proto_baseline():
        for payload in proto_payloads:
            ExportTraceServiceRequest().ParseFromString(payload)

    def proto_floor():
        # what any Python consumer pays at least: one Python object per field it reads
        for payload in proto_payloads:
            request = ExportTraceServiceRequest()
            request.ParseFromString(payload)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        span.trace_id, span.span_id, span.name  # noqa: B018
                        for kv in span.attributes:
                            kv.key, kv.value.string_value  # noqa: B018

    expected = len({f"conv-{t}" for t in range(traces)})
    imported = load(json_bytes)
    assert len(imported) == expected and len(load(proto_bytes)) == expected
    drafts = [[step.draft() for step in trajectory.steps] for trajectory in imported]
    embedded = [
        value
        for span in read_otlp_json(json_bytes, "bench").spans
        for value in span.attributes.values()
        if isinstance(value, str) and value[:1] in ("[", "{")
    ]

    def parse_embedded():
        # instrumentations write messages as JSON text inside the attributes: a second parse
        for text in embedded:
            json.loads(text)

    def seal_again():
        # the part of an import spent in model.Step.seal (canonical encoding + SHA-256)
        for steps in drafts:
            chain_steps(steps)

    as_json = compare(
        json_baseline,
        {
            "decode": lambda: read_otlp_json(json_bytes, "bench"),
            "import": lambda: load(json_bytes),
            "embedded": parse_embedded,
            "seal": seal_again,
        },
        repeats,
    )
    as_proto = compare(
        proto_baseline,
        {
            "floor": proto_floor,
            "decode": lambda: read_otlp_proto(proto_bytes, "bench"),
            "import": lambda: load(proto_bytes),
        },
        repeats,
    )
    return {
        "spans": len(spans),
        "json_mb": len(json_bytes) / 1e6,
        "proto_mb": len(proto_bytes) / 1e6,
        "json": as_json,
        "proto": as_proto,
    }


def bench_receiver(transport: str, traces: int, turns: int, exporters: int = 4) -> dict:
    from agent_replay.ingest.receiver import Collector, ReceiverConfig

    spans = record_runs(traces, turns)
    per_exporter = batches(spans, -(-len(spans) // exporters))
    with tempfile.TemporaryDirectory() as tmp:
        store = CheckpointStore(Path(tmp) / "bench.sqlite")
        collector = Collector(
            store,
            http="127.0.0.1:0" if transport == "http" else None,
            grpc="127.0.0.1:0" if transport == "grpc" else None,
            config=ReceiverConfig(assemble_interval=0.2),
        ).start()
        if transport == "http":
            from opentelemetry.exporter.otlp.proto.http import Compression
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            def make():
                return OTLPSpanExporter(
                    endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces",
                    compression=Compression.Gzip,
                )
        else:
            import grpc
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )

            def make():
                return GrpcExporter(
                    endpoint=f"127.0.0.1:{collector.grpc_port}",
                    insecure=True,
                    compression=grpc.Compression.Gzip,
                )

        results = []

        def worker(mine):
            exporter = make()
            for batch in batches(mine, 512):  # the BatchSpanProcessor's default batch size
                results.append(exporter.export(batch))
            exporter.shutdown()

        threads = [threading.Thread(target=worker, args=(mine,)) for mine in per_exporter]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        acked = time.perf_counter() - start
        collector.stop(grace=5)  # drains: assembles everything still waiting
        assembled = time.perf_counter() - start
        sessions = len(store.session_ids())
        stored = collector.receiver.snapshot()["spans_stored"]
        store.close()
    assert all(r.name == "SUCCESS" for r in results), results
    assert stored == len(spans) and sessions == traces
    return {
        "transport": transport,
        "spans": len(spans),
        "acked_s": acked,
        "assembled_s": assembled,
        "acked_per_s": len(spans) / acked,
        "end_to_end_per_s": len(spans) / assembled,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--receiver-traces", type=int, default=500)
    args = parser.parse_args()

    files = bench_files(args.traces, args.turns, args.repeats)
    print(
        f"data: {args.traces} agent runs x {args.turns} turns = {files['spans']} spans; "
        f"OTLP/JSON {files['json_mb']:.2f} MB, protobuf {files['proto_mb']:.2f} MB; "
        f"median of {args.repeats}"
    )
    print(f"{'':44}{'median s':>10}{'x baseline':>12}")
    j, p = files["json"], files["proto"]
    rows = [
        ("json.loads of the bytes (baseline)", j["baseline"], 1.0),
        ("OTLP/JSON decode to normalised spans", j["decode"], j["decode_ratio"]),
        ("OTLP/JSON import to stored-ready trajectories", j["import"], j["import_ratio"]),
        ("  of which parsing JSON text in attributes", j["embedded"], j["embedded_ratio"]),
        ("  of which sealing steps (canonical + hash)", j["seal"], j["seal_ratio"]),
        ("ParseFromString of the bytes (baseline)", p["baseline"], 1.0),
        ("protobuf: read every span field (floor)", p["floor"], p["floor_ratio"]),
        ("protobuf decode to normalised spans", p["decode"], p["decode_ratio"]),
        ("protobuf import to stored-ready trajectories", p["import"], p["import_ratio"]),
    ]
    for label, seconds, ratio in rows:
        print(f"{label:44}{seconds:10.4f}{ratio:11.2f}x")
    for name, ratio in (
        ("OTLP/JSON decode <= 3x json.loads", j["decode_ratio"]),
        ("OTLP/JSON full import <= 3x json.loads", j["import_ratio"]),
        ("protobuf decode <= 3x ParseFromString", p["decode_ratio"]),
        ("protobuf full import <= 3x ParseFromString", p["import_ratio"]),
    ):
        print(f"target {name}: {'met' if ratio <= 3 else 'MISSED'} ({ratio:.2f}x)")
    for transport in ("http", "grpc"):
        r = bench_receiver(transport, args.receiver_traces, args.turns)
        print(
            f"receiver {transport:4}: 4 concurrent exporters, {r['spans']} spans acked in "
            f"{r['acked_s']:.2f}s = {r['acked_per_s']:,.0f} spans/s; all assembled after "
            f"{r['assembled_s']:.2f}s = {r['end_to_end_per_s']:,.0f} spans/s end to end"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
