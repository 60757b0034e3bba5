"""OTLP files: JSON and protobuf, traces and logs, made by the real SDK encoders."""

import gzip
import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_replay.errors import ImportFormatError
from agent_replay.ingest import load, load_many
from agent_replay.ingest.otlp import read_otlp_json, read_otlp_proto, to_otlp_json
from otlp_protobuf import protobuf_request

# ../shared beside the repository (found upwards, so a git worktree deeper down works too)
SHARED = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
FIXTURES = SHARED / "fixtures"

GENERATED = FIXTURES / "generated"
USER = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
CALL = [
    {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}
        ],
    }
]


def sdk_spans():
    """A small agent run recorded by the real SDK."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test-agent")
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}
    with tracer.start_as_current_span("invoke_agent weather", attributes=agent):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(USER),
                "gen_ai.output.messages": json.dumps(CALL),
                "gen_ai.usage.input_tokens": 12,
                "gen_ai.request.temperature": 0.5,
                "gen_ai.response.finish_reasons": ("tool_calls",),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool get_weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.result": '"rainy"',
            },
        ):
            pass
    provider.shutdown()
    return exporter.get_finished_spans()


def test_json_and_protobuf_of_the_same_spans_give_identical_trajectories(tmp_path):
    request = encode_spans(sdk_spans())
    proto = tmp_path / "spans.binpb"
    proto.write_bytes(request.SerializeToString())
    as_json = tmp_path / "spans.json"
    as_json.write_text(json.dumps(to_otlp_json(request)))
    (from_proto,) = load(proto)
    (from_json,) = load(as_json)
    assert from_proto.head_hash == from_json.head_hash
    assert from_proto.digest != from_json.digest  # the header's metadata names the file
    assert [s.label for s in from_proto.steps] == ["llm:chat gpt-4o", "tool:get_weather"]
    assert from_proto.steps[0].inputs == {"messages": USER, "model": "gpt-4o"}
    assert from_proto.steps[0].action == CALL
    assert from_proto.steps[0].attributes["input_tokens"] == 12
    assert from_proto.steps[1].action == "rainy"
    assert from_proto.steps[1].attributes["requested_by"] == 0
    assert from_proto.metadata["source"] == "import:otlp"


def test_collector_file_exporter_streams(tmp_path):
    """JSON Lines (format: json) and 4-byte big-endian length-prefixed protobuf (format: proto)."""
    spans = sdk_spans()
    half = len(spans) // 2
    requests = [encode_spans(spans[:half]), encode_spans(spans[half:])]
    lines = tmp_path / "traces.jsonl"
    lines.write_text("".join(json.dumps(to_otlp_json(r)) + "\n" for r in requests))
    stream = tmp_path / "traces.binpb"
    payloads = [r.SerializeToString() for r in requests]
    stream.write_bytes(b"".join(len(p).to_bytes(4, "big") + p for p in payloads))
    (a,) = load(lines)
    (b,) = load(stream)
    (c,) = load(gzip.compress(stream.read_bytes()))
    assert a.head_hash == b.head_hash == c.head_hash
    assert len(a.steps) == 2


def test_lenient_json_numbers_enum_names_snake_case_and_empty_status():
    doc = to_otlp_json(encode_spans(sdk_spans()))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                s["startTimeUnixNano"] = int(s["startTimeUnixNano"])  # number, not string
                s["kind"] = "SPAN_KIND_INTERNAL"
                s["status"] = {}
                s["trace_id"] = s.pop("traceId").upper()
                for attr in s.get("attributes", []):
                    if "intValue" in attr["value"]:
                        attr["value"]["intValue"] = int(attr["value"]["intValue"])
    strict = to_otlp_json(encode_spans(sdk_spans()))
    (lenient,) = load(doc)
    (reference,) = load(strict)
    assert [s.label for s in lenient.steps] == [s.label for s in reference.steps]
    assert lenient.steps[0].attributes["input_tokens"] == 12


def test_bad_spans_are_rejected_one_by_one_and_the_rest_kept():
    doc = to_otlp_json(encode_spans(sdk_spans()))
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({"traceId": "xyz", "spanId": "00f067aa0ba902b7", "name": "bad"})
    spans.append({"traceId": "0" * 32, "spanId": "00f067aa0ba902b7", "name": "zero"})
    spans.append({"traceId": "1" * 32, "spanId": "1" * 16, "attributes": "not a list"})
    decoded = read_otlp_json(json.dumps(doc).encode(), "mem")
    assert len(decoded.spans) == 3
    assert len(decoded.rejected) == 3
    assert "traceId must be 32 hex digits" in decoded.rejected[0]
    assert "resourceSpans[0].scopeSpans[0].spans[3]" in decoded.rejected[0]
    result = load_many([json.dumps(doc).encode()])
    assert not result.failed and len(result.warnings) == 3
    assert len(result.trajectories) == 1


def test_structural_errors_name_the_file_and_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"resourceSpans": [{"scopeSpans": "oops"}]}')
    with pytest.raises(ImportFormatError) as info:
        load(path, format="otlp-json")
    assert info.value.source == str(path)
    assert info.value.position == "resourceSpans[0]"
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"resourceSpans": [{"scopeSpans": [')
    with pytest.raises(ImportFormatError) as info:
        load(truncated, format="otlp-json")
    assert "line 1 column" in info.value.position
    with pytest.raises(ImportFormatError, match="not an OTLP protobuf"):
        read_otlp_proto(b"\x0a\x05hello-not-protobuf", "mem")


def test_jsonl_bad_line_is_skipped_with_its_line_number(tmp_path):
    request = to_otlp_json(encode_spans(sdk_spans()))
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(request) + "\n{broken\n")
    result = load_many([path])
    assert not result.failed
    assert len(result.trajectories) == 1
    assert any("line 2" in w for w in result.warnings)


def test_event_only_logs_join_their_spans_from_another_file():
    spans_only = load_many([GENERATED / "otel_event_only.jsonl"])
    assert spans_only.trajectories[0].metadata["capture"]["steps_without_content"] == [0, 2]
    joined = load([GENERATED / "otel_event_only.jsonl", GENERATED / "otel_event_only.logs.jsonl"])
    (traj,) = joined
    assert traj.metadata["capture"]["steps_without_content"] == []
    assert traj.metadata["capture"]["log_records"] == 2
    assert traj.steps[0].inputs["messages"][1] == {
        "role": "user",
        "parts": [{"type": "text", "content": "Weather in Paris?"}],
    }
    assert sorted(traj.metadata["import"]["files"]) == [str(GENERATED / "otel_event_only.jsonl")]


def test_logs_protobuf_is_recognised_and_joined(tmp_path):
    """The log records as protobuf, event names in ``LogRecord.event_name``: read with any
    opentelemetry-proto, also one from before that field (it is then an unknown field)."""
    logs_doc = json.loads((GENERATED / "otel_v2_legacy.logs.jsonl").read_text())
    path = tmp_path / "logs.binpb"
    path.write_bytes(protobuf_request(logs_doc, "otel_v2_legacy.logs.binpb"))
    decoded = read_otlp_proto(path.read_bytes(), "logs.binpb")
    assert len(decoded.logs) == 8 and not decoded.spans
    assert decoded.logs[0].name == "gen_ai.system.message"
    (traj,) = load([GENERATED / "otel_v2_legacy.jsonl", path])
    assert traj.steps[2].inputs["messages"][3]["parts"][0]["response"] == "rainy, 57F"
    orphan = load_many([path])
    assert orphan.trajectories == [] and "name no span" in orphan.warnings[0]


def test_every_generated_fixture_imports_with_its_agent(tmp_path):
    paths = [p for p in sorted(GENERATED.glob("*.jsonl")) if not p.name.endswith(".logs.jsonl")]
    assert len(paths) >= 3, GENERATED
    for path in paths:
        (traj,) = load(path)
        assert traj.session_id == "conv_1"
        assert {s.agent for s in traj.steps} == {"weather_agent"}
        assert traj.steps[1].label == "tool:get_weather"
        traj.verify()


def test_canonical_otlp_example_has_no_genai_span_and_gives_nothing():
    result = load_many([FIXTURES / "otlp" / "opentelemetry-proto_examples_trace.json"])
    assert not result.failed
    assert result.sources[0].format == "otlp-json" and result.sources[0].spans == 1
    assert result.trajectories == []


def test_attributes_dropped_at_the_sdk_limit_are_reported():
    doc = to_otlp_json(encode_spans(sdk_spans()))
    chat = next(
        s for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"] if s["name"] == "chat gpt-4o"
    )
    chat["droppedAttributesCount"] = 7
    (traj,) = load(doc)
    report = traj.metadata["capture"]
    assert report["truncated_steps"] == [0] and report["replayable"] is False
    assert traj.steps[0].attributes["dropped_attributes"] == 7
    assert any("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT" in note for note in report["notes"])


def test_a_line_cut_short_does_not_swallow_the_next_line(tmp_path):
    """A Collector killed mid-write leaves a line cut short; the next line is a request of its
    own, not the continuation of the cut one (JSON allows newlines inside a document)."""
    request = json.dumps(to_otlp_json(encode_spans(sdk_spans())))
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([request, request[:40], request]) + "\n")
    result = load_many([path])
    assert result.warnings == [
        f"{path}: skipped line 2 column 34: not valid JSON (Unterminated string starting at)"
    ]
    assert len(result.spans) == len(sdk_spans())  # both whole lines read (the same spans)
    assert result.sources[0].spans == 2 * len(sdk_spans())


def test_a_pretty_printed_document_in_json_lines_is_one_skipped_line_per_line(tmp_path):
    """JSON Lines hold one document per line: a line such as `  "resourceSpans": [` is one
    bad line, not a string document and then an error."""
    lines = [
        line
        for line in (FIXTURES / "generated" / "otel_span_only.jsonl").read_text().splitlines()
        if line.strip()
    ]
    pretty = json.dumps(json.loads(lines[0]), indent=2)
    path = tmp_path / "mixed.jsonl"
    path.write_text(lines[0] + "\n" + pretty + "\n")
    result = load_many([path])
    assert result.trajectories and not result.errors
    assert len(result.warnings) == len(pretty.splitlines())
    assert [w.split("skipped line ")[1].split(" ")[0].rstrip(":") for w in result.warnings] == [
        str(n) for n in range(2, len(pretty.splitlines()) + 2)
    ]
