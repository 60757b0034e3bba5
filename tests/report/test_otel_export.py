"""Verdicts back into OTel, end to end: the real OTLP/HTTP exporter into a local receiver that
decodes the protobuf body, checking links and attributes arrive."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from agent_replay import record
from agent_replay.attribution import attribute
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent
from agent_replay.report.otel import ROOT_SPAN, STEP_SPAN
from surface_helpers import Receiver


def attrs(span):
    out = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        out[kv.key] = (
            [getattr(v, v.WhichOneof("value")) for v in value.array_value.values]
            if kind == "array_value"
            else getattr(value, kind)
        )
    return out


@pytest.fixture(scope="module")
def traced_attribution():
    """A demo run recorded through an OTel provider, so its steps carry real span ids."""
    provider = TracerProvider()
    traj = record(
        support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved, tracer_provider=provider
    )
    provider.shutdown()
    assert all(s.span_id and s.trace_id for s in traj.steps)
    return traj, attribute(traj, support_agent, refund_approved, repair=True)


def test_verdict_arrives_with_links_and_attributes(traced_attribution):
    traj, result = traced_attribution
    culprit = traj.steps[result.culprit_index]
    assert result.trace_id == culprit.trace_id and result.culprit_span_id == culprit.span_id
    with Receiver() as receiver:
        provider = TracerProvider(resource=Resource.create({"service.name": "agent-replay"}))
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.url + "/v1/traces"))
        )
        context = result.to_otel(provider, traj, explanation=result.explain(traj))
        provider.shutdown()  # flushes through the real exporter
        spans = receiver.spans()
    by_name = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (root,) = by_name[ROOT_SPAN]
    assert root.trace_id.hex() == format(context.trace_id, "032x")
    assert root.trace_id.hex() != result.trace_id  # a trace of its own, linked to the original
    a = attrs(root)
    assert a["agent_replay.verdict"] == "separated"
    assert a["agent_replay.culprit.index"] == 2
    assert a["agent_replay.culprit.label"] == "llm:choose_policy"
    assert a["agent_replay.culprit.agent"] == "policy"
    c = result.culprit
    assert a["agent_replay.effect"] == pytest.approx(c.effect)
    assert a["agent_replay.effect.low"] == pytest.approx(c.interval.low)
    assert a["agent_replay.effect.high"] == pytest.approx(c.interval.high)
    assert a["agent_replay.repair.replacement"] == "refund_policy_2026"  # strings as they are
    assert a["agent_replay.repair.valid"] is True
    assert a["agent_replay.cost.rollouts"] == result.cost["rollouts"]
    assert a["agent_replay.cost.live_steps"] == result.cost["live_steps"]
    assert a["agent_replay.original_trace_id"] == result.trace_id
    assert "Step 2" in a["agent_replay.explanation.where"]  # where / why / fix from explain()
    assert a["agent_replay.explanation.why"] and a["agent_replay.explanation.fix"]
    (link,) = root.links
    assert link.trace_id.hex() == result.trace_id
    assert link.span_id.hex() == result.culprit_span_id
    assert attrs(link)["agent_replay.link.role"] == "culprit"
    # one span per step of the verdict: the culprit and every decisive step (the reviewer,
    # step 5, can be decisive too: re-drawing it rescues 15% of failing runs)
    by_index = {attrs(s)["agent_replay.step.index"]: s for s in by_name[STEP_SPAN]}
    assert set(by_index) == {2, *result.decisive}
    assert len(by_name[STEP_SPAN]) == len(by_index)
    step = by_index[2]
    assert step.parent_span_id == root.span_id
    assert attrs(step)["agent_replay.step.culprit"] is True
    assert step.links[0].span_id.hex() == culprit.span_id


def test_export_without_ids_still_reports(demo_attribution):
    """A run recorded without an OTel provider has no span ids: no link, same attributes."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    traj, result = demo_attribution
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    result.to_otel(provider, traj)
    root = next(s for s in memory.get_finished_spans() if s.name == ROOT_SPAN)
    assert root.attributes["agent_replay.culprit.index"] == 2
    assert result.culprit_span_id is None and len(root.links) == 0
