import base64
import json

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_replay.errors import ImportFormatError
from agent_replay.ingest.steps import dumps_step
from agent_replay.interop import from_jsonl, from_otel_spans, from_steps
from agent_replay.mapping.spans import from_readable_span
from agent_replay.model import StepDraft, StepKind


def record_spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span(
        "invoke_agent a",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
    ):
        with tracer.start_as_current_span(
            "execute_tool t",
            attributes={
                "gen_ai.tool.name": "t",
                "gen_ai.tool.call.arguments": '{"x": 1}',
                "gen_ai.tool.call.result": "2",
            },
        ):
            pass
    provider.shutdown()
    return exporter.get_finished_spans()


def otlp_json(spans):
    doc = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return doc


def test_from_otel_spans_accepts_readable_otlp_json_and_normalized_spans():
    spans = record_spans()
    a = from_otel_spans(spans)
    doc = otlp_json(spans)
    b = from_otel_spans([doc])
    c = from_otel_spans(
        [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    )
    d = from_otel_spans([from_readable_span(s) for s in spans], session_id="mine")
    assert a.head_hash == b.head_hash == d.head_hash
    assert [s.label for s in c.steps] == ["tool:t"] and c.steps[0].inputs == {"arguments": {"x": 1}}
    assert d.session_id == "mine" and a.steps[0].agent == "a"


def test_from_otel_spans_merges_several_traces_and_rejects_non_spans():
    merged = from_otel_spans([*record_spans(), *record_spans()], session_id="both")
    assert len(merged.steps) == 2 and len(merged.metadata["trace_ids"]) == 2
    merged.verify()
    with pytest.raises(ImportFormatError, match="not a span"):
        from_otel_spans([42])
    with pytest.raises(ImportFormatError, match="no GenAI span"):
        from_otel_spans([])


def test_from_steps_and_from_jsonl_round_trip(tmp_path):
    steps = [
        {"kind": "llm", "name": "plan", "inputs": {"q": "x"}, "output": "p", "agent": "a"},
        StepDraft(kind=StepKind.TOOL, name="search", inputs={"q": "p"}, action="r"),
    ]
    traj = from_steps(steps, "s1", task="x", outcome={"score": 1.0})
    assert traj.outcome.failed is False
    assert traj.metadata["capture"]["steps"] == 2
    path = tmp_path / "s1.jsonl"
    path.write_text("\n".join(dumps_step(s, "s1") for s in traj.steps) + "\n")
    again = from_jsonl(path)
    assert again.head_hash == traj.head_hash
    with pytest.raises(ImportFormatError, match="step kind"):
        from_steps([{"kind": "bogus", "name": "x"}], "s2")
    two = tmp_path / "two.jsonl"
    two.write_text(
        json.dumps({"session_id": "a", "kind": "llm", "name": "x"})
        + "\n"
        + json.dumps({"session_id": "b", "kind": "llm", "name": "y"})
        + "\n"
    )
    with pytest.raises(ImportFormatError, match="2 sessions"):
        from_jsonl(two)
    assert from_jsonl(two, session_id="b").steps[0].name == "y"
