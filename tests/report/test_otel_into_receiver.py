"""The verdict travels back into OpenTelemetry and lands in agent-replay's own receiver: the real
OTLP/HTTP exporter, the real `collect` receiver, the store's durable pending spans."""

from __future__ import annotations

import json

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from agent_replay import CheckpointStore, record
from agent_replay.attribution import attribute
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent
from agent_replay.ingest.receiver import Collector
from agent_replay.mapping.spans import span_from_dict
from agent_replay.report.otel import ROOT_SPAN


def test_verdict_spans_reach_our_receiver_with_links(tmp_path):
    traced = TracerProvider()
    traj = record(
        support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved, tracer_provider=traced
    )
    traced.shutdown()
    result = attribute(traj, support_agent, refund_approved, repair=True)
    culprit = traj.steps[result.culprit_index]

    with (
        CheckpointStore(tmp_path / "collected.sqlite") as store,
        Collector(store, http="127.0.0.1:0", grpc=None).start() as collector,
    ):
        provider = TracerProvider()
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")
        provider.add_span_processor(BatchSpanProcessor(exporter))
        context = result.to_otel(provider, traj)
        assert provider.force_flush(10_000)
        provider.shutdown()
        verdict_trace = format(context.trace_id, "032x")
        rows, _ = store.pending_rows([verdict_trace])

    spans = {s.name: s for s in (span_from_dict(json.loads(data)) for _, _, data in rows)}
    root = spans[ROOT_SPAN]
    assert root.attributes["agent_replay.culprit.index"] == result.culprit_index
    assert root.attributes["agent_replay.culprit.agent"] == "policy"
    assert root.attributes["agent_replay.verdict"] == result.verdict
    assert root.attributes["agent_replay.repair.replacement"] == "refund_policy_2026"
    assert [(link.trace_id, link.span_id) for link in root.links] == [
        (culprit.trace_id, culprit.span_id)
    ]
