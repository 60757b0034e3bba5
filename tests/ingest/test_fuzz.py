"""Every parser on hostile input: arbitrary bytes, truncated and deeply nested documents,
wrong types anywhere, huge attributes. Each call either returns or raises ImportFormatError
naming the source, never anything else, and never the catch-all "internal error" (which would
mean a reader bug slipped through)."""

import copy
import gzip
import json
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agent_replay import CheckpointStore, Trajectory
from agent_replay.errors import ImportFormatError
from agent_replay.ingest import FORMATS, import_into, load_many, read_source
from agent_replay.model import StepDraft, StepKind, chain_steps
from blocks import whole_and_in_blocks
from zstd_codec import zstd

SHARED = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
FIXTURES = SHARED / "fixtures"
SAMPLES = {
    "otlp-json": FIXTURES / "generated" / "otel_span_only.jsonl",
    "langfuse": FIXTURES / "langfuse" / "microsoft-agent-2025-10-14.json",
    "langsmith": FIXTURES / "langsmith" / "langsmith_py_wrap_openai_.json",
    "atif": FIXTURES / "atif" / "multi_tool_trajectory.json",
    "whowhen": SHARED / "datasets" / "who_and_when" / "Algorithm-Generated" / "1.json",
    "jsonl": None,  # built below
}
JSONL = (
    b'{"session": {"session_id": "s", "task": "t"}}\n'
    b'{"session_id": "s", "kind": "llm", "name": "a", "inputs": {"x": [1, 2]}, "output": "y"}\n'
    b'{"session_id": "s", "kind": "tool", "name": "b", "action": 1, "observation": 2}\n'
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def sample_bytes(fmt: str) -> bytes:
    path = SAMPLES[fmt]
    return JSONL if path is None else path.read_bytes()


def sample_doc(fmt: str):
    data = sample_bytes(fmt)
    if fmt in ("otlp-json", "jsonl"):
        return [json.loads(line) for line in data.splitlines() if line.strip()]
    return json.loads(data)


def one_span_request(**span) -> bytes:
    """An OTLP/JSON traces request holding one span (with valid ids) made of ``span``."""
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", **span}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def check(data, fmt: str) -> None:
    try:
        read_source(data, fmt)
    except ImportFormatError as exc:
        assert exc.source == "<data>"
        assert "internal error" not in str(exc), str(exc)


json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=10), c, max_size=5),
    max_leaves=40,
)


def mutate(doc, draw):
    """Replace one node somewhere in ``doc`` by an arbitrary JSON value."""
    doc = copy.deepcopy(doc)
    parent, key = None, None
    node = doc
    for _ in range(draw(st.integers(0, 12))):
        if isinstance(node, dict) and node:
            k = draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            k = draw(st.integers(0, len(node) - 1))
        else:
            break
        parent, key, node = node, k, node[k]
    replacement = draw(json_values)
    if parent is None:
        return replacement
    parent[key] = replacement
    return doc


@pytest.mark.parametrize("fmt", ["auto", *FORMATS])
@FUZZ
@given(data=st.binary(max_size=512))
def test_arbitrary_bytes(fmt, data):
    check(data, fmt)


COMPRESSED_HEADS = [
    b"\x1f\x8b",  # gzip
    b"\x28\xb5\x2f\xfd",  # zstd
    b"\x00\x00\x00\x10\x28\xb5\x2f\xfd",  # a length prefix, then a zstd frame
]


@pytest.mark.parametrize("fmt", ["auto", "otlp-json", "otlp-proto"])
@FUZZ
@given(head=st.sampled_from(COMPRESSED_HEADS), data=st.binary(max_size=512))
def test_arbitrary_bytes_after_a_compression_header(fmt, head, data):
    check(head + data, fmt)


DOCUMENTS = [f for f in FORMATS if f not in ("otlp-proto", "store")]  # JSON formats


@pytest.mark.parametrize("fmt", DOCUMENTS)
@FUZZ
@given(data=st.data())
def test_truncated_documents_name_a_position(fmt, data):
    raw = sample_bytes(fmt)
    cut = data.draw(st.integers(1, len(raw) - 1))
    truncated = raw[:cut]
    try:
        read_source(truncated, fmt)
    except ImportFormatError as exc:
        assert "internal error" not in str(exc)
        if fmt not in ("otlp-json", "jsonl") and truncated.strip():
            assert exc.position.startswith("line"), str(exc)


@pytest.mark.parametrize("fmt", DOCUMENTS)
@FUZZ
@given(data=st.data())
def test_wrong_types_anywhere(fmt, data):
    mutated = sample_doc(fmt)
    for _ in range(data.draw(st.integers(1, 3))):  # one to three nodes replaced
        mutated = mutate(mutated, data.draw)
    if fmt in ("otlp-json", "jsonl") and isinstance(mutated, list):
        encoded = b"\n".join(json.dumps(line).encode() for line in mutated)
    else:
        encoded = json.dumps(mutated).encode()
    check(encoded, fmt)
    check(encoded, "auto")


@pytest.mark.parametrize("fmt", ["auto", *DOCUMENTS])
@pytest.mark.parametrize("depth", [50, 3000, 100_000])
def test_deeply_nested_documents(fmt, depth):
    check(b"[" * depth + b"]" * depth, fmt)
    check(b'{"a":' * depth + b"1" + b"}" * depth, fmt)
    nested = "[" * depth + "]" * depth
    request = one_span_request(
        name="deep",
        attributes=[
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": nested}},
        ],
    )
    check(request, fmt)


def test_deeply_nested_anyvalue_is_rejected_not_crashing():
    value = {"stringValue": "leaf"}
    for _ in range(200):
        value = {"arrayValue": {"values": [value]}}
    with pytest.raises(ImportFormatError, match="no readable span"):
        read_source(one_span_request(attributes=[{"key": "deep", "value": value}]))


def test_huge_attributes_import():
    huge = "x" * (8 << 20)
    parsed = read_source(
        one_span_request(
            name="execute_tool big",
            attributes=[
                {"key": "gen_ai.tool.name", "value": {"stringValue": "big"}},
                {"key": "gen_ai.tool.call.result", "value": {"stringValue": huge}},
            ]
            + [{"key": f"k{i}", "value": {"intValue": str(i)}} for i in range(20_000)],
        )
    )
    assert len(parsed.spans[0].attributes["gen_ai.tool.call.result"]) == 8 << 20


@FUZZ
@given(data=st.data())
def test_corrupted_protobuf(data):
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = bytes(range(1, 17))
    span.span_id = bytes(range(1, 9))
    span.name = "chat"
    attr = span.attributes.add()
    attr.key = "gen_ai.operation.name"
    attr.value.string_value = "chat"
    raw = bytearray(request.SerializeToString())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(1, len(raw)))]
    check(bytes(raw), "otlp-proto")
    prefixed = len(raw).to_bytes(4, "big") + bytes(raw)
    check(prefixed + prefixed[: data.draw(st.integers(0, len(prefixed)))], "otlp-proto")


@FUZZ
@given(garbage=st.binary(min_size=1, max_size=256))
def test_other_files_of_the_same_import_still_land(garbage):
    good = FIXTURES / "atif" / "simple_trajectory.json"
    result = load_many([garbage, good])
    assert result.sources[1].ok
    assert any(t.session_id == "sess-abc123-simple" for t in result.trajectories)
    assert all("internal error" not in str(e) for e in result.errors)


def _store_bytes() -> bytes:
    """A small agent-replay store file, made once: two sessions of two steps."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.sqlite"
        with CheckpointStore(path, durable=False) as store:
            for n in range(2):
                drafts = [
                    StepDraft(kind=StepKind.LLM, name="a", inputs=f"q{n}", action=f"a{n}"),
                    StepDraft(kind=StepKind.TOOL, name="t", inputs={"x": n}, action=n),
                ]
                store.save(Trajectory(f"s{n}", chain_steps(drafts)))
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return path.read_bytes()


STORE = _store_bytes()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_store_file_is_reported_and_the_other_files_land(data):
    """Bytes of a store overwritten at random places, or cut short: the import never fails
    with an internal error, whatever landed from the damaged store verifies, and the other
    file still lands."""
    raw = bytearray(STORE)
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(16, len(raw) - 1))  # keep the SQLite header
        raw[position] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(16, len(raw)))]
    with tempfile.TemporaryDirectory() as tmp:
        damaged = Path(tmp) / "damaged.sqlite"
        damaged.write_bytes(bytes(raw))
        good = FIXTURES / "atif" / "simple_trajectory.json"
        with CheckpointStore(Path(tmp) / "target.sqlite", durable=False) as target:
            result = import_into(target, [damaged, good])
            assert "sess-abc123-simple" in target.session_ids()
            for session_id in target.session_ids():
                target.load(session_id)  # whatever landed verifies
    assert result.sources[1].ok
    assert all("internal error" not in str(e) for e in result.errors)


def _whole_and_in_blocks(data: bytes, block: int, codec: str | None = None):
    """``load_many`` of a file holding ``data`` (compressed whole by ``codec``), read whole and
    read in blocks of ``block``."""
    compress = {None: bytes, "gzip": gzip.compress, "zstd": zstd.compress}[codec]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data"
        path.write_bytes(compress(data))
        return whole_and_in_blocks(path, block)


LINES = [
    json.dumps(json.loads(line))
    for line in (FIXTURES / "generated" / "otel_span_only.jsonl").read_text().splitlines()
    if line.strip()
]


@FUZZ
@given(
    lines=st.lists(
        st.sampled_from(LINES)
        | st.sampled_from(
            [
                '{"resourceSpans": [',
                "not json",
                "",
                "   ",
                '{"a": 1}',
                "[1,",
                '{"resourceLogs": []}',
                '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "x"}]}]}]}',
            ]
        ),
        min_size=1,
        max_size=12,
    ),
    block=st.integers(1, 4000),
    codec=st.sampled_from([None, "gzip", "zstd"]),
)
def test_a_file_read_in_blocks_reads_as_read_whole(lines, block, codec):
    """Any JSON Lines file whose first line is an OTLP request, plain or compressed: read block
    by block (any block size) it gives the same spans, skipped lines (with their line numbers)
    and errors."""
    lines = [LINES[0], *lines]
    whole, blocks = _whole_and_in_blocks(("\n".join(lines) + "\n").encode(), block, codec)
    assert [str(e) for e in blocks.errors] == [str(e) for e in whole.errors]
    assert blocks.warnings == whole.warnings
    assert blocks.spans == whole.spans
    assert [t.digest for t in blocks.trajectories] == [t.digest for t in whole.trajectories]


def _request(n: int) -> bytes:
    """An OTLP traces request of one GenAI span (its ids from ``n``)."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = bytes([n + 1] * 16)
    span.span_id = bytes([n + 1] * 8)
    span.name = "chat"
    span.start_time_unix_nano, span.end_time_unix_nano = n, n + 1
    attr = span.attributes.add()
    attr.key, attr.value.string_value = "gen_ai.operation.name", "chat"
    return request.SerializeToString()


@FUZZ
@given(
    messages=st.lists(
        st.integers(0, 5).map(_request) | st.binary(min_size=1, max_size=40), max_size=10
    ),
    cut=st.integers(0, 60),
    block=st.integers(1, 400),
    codec=st.sampled_from([None, "gzip", "zstd"]),
)
def test_a_protobuf_stream_read_in_blocks_reads_as_read_whole(messages, cut, block, codec):
    """A length-prefixed protobuf stream (the Collector's file exporter, ``format: proto``),
    plain or compressed, that starts with a good message, then any messages, and maybe a last
    one cut short: read block by block (any block size) it gives the same spans, rejections
    and errors as read whole; a cut last message is rejected and the rest read."""
    data = b"".join(len(m).to_bytes(4, "big") + m for m in [_request(9), *messages])
    if cut:
        last = _request(8)
        data += (len(last).to_bytes(4, "big") + last)[:cut]
    whole, blocks = _whole_and_in_blocks(data, block, codec)
    assert [str(e) for e in blocks.errors] == [str(e) for e in whole.errors] == []
    assert blocks.warnings == whole.warnings
    assert blocks.spans == whole.spans
    assert (bytes([10] * 16).hex(), bytes([10] * 8).hex()) in whole.spans  # the first message
    if cut:
        assert "cut short" in whole.warnings[-1]
