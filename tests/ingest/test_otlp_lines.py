"""OTLP/JSON Lines with bytes that are not UTF-8 (a Latin-1 character written by a tool that
does not encode its text): the line holding them is skipped and reported like any malformed
line, the other lines are imported, read whole or in blocks alike; a file that is not UTF-8
and not JSON Lines fails, saying why (UTF-16, protobuf) only when that is what it is."""

import codecs
import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_replay.ingest as ingest
from agent_replay import CheckpointStore
from agent_replay.errors import ImportFormatError
from agent_replay.ingest import import_into, load_many, read_source
from agent_replay.ingest.otlp import read_otlp_json
from blocks import whole_and_in_blocks
from otlp_protobuf import protobuf_request


def request(i: int, text: str = "café") -> dict:
    """An OTLP/JSON traces request of one chat span (trace ``i``) whose prompt holds ``text``."""
    messages = [{"role": "user", "parts": [{"type": "text", "content": f"{text} {i}"}]}]
    span = {
        "traceId": f"{i + 1:032x}",
        "spanId": f"{i + 1:016x}",
        "name": "chat m",
        "kind": 3,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000000000010",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
            {
                "key": "gen_ai.input.messages",
                "value": {"stringValue": json.dumps(messages, ensure_ascii=False)},
            },
        ],
    }
    return {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "t"}, "spans": [span]}]}]}


def line(i: int) -> bytes:
    return json.dumps(request(i), ensure_ascii=False).encode()


def latin1_line(i: int) -> bytes:
    """Line ``i`` with its é written in Latin-1 (0xE9), inside a string."""
    return line(i).replace("café".encode(), b"caf\xe9")


def test_a_line_that_is_not_utf8_is_skipped_and_the_others_are_imported(tmp_path):
    path = tmp_path / "latin_mid.jsonl"
    path.write_bytes(line(0) + b"\n" + latin1_line(1) + b"\n" + line(2) + b"\n")
    result = load_many([path])
    assert result.errors == []
    assert sorted(t.session_id for t in result.trajectories) == [f"{1:032x}", f"{3:032x}"]
    offset = latin1_line(1).index(b"\xe9")
    assert result.warnings == [
        f"{path}: skipped line 2: not UTF-8 text (byte 0xE9 at byte {offset} of the line)"
    ]


def test_a_byte_that_is_not_utf8_outside_a_string_is_named_too():
    data = line(0) + b"\n" + line(1).replace(b'"kind"', b'\xff "kind"') + b"\n" + line(2)
    decoded = read_otlp_json(data, "mem")
    assert len(decoded.spans) == 2
    offset = line(1).index(b'"kind"')
    assert decoded.rejected == [f"line 2: not UTF-8 text (byte 0xFF at byte {offset} of the line)"]


def test_the_first_line_may_be_the_bad_one_and_a_utf8_bom_is_not_counted():
    bom = codecs.BOM_UTF8
    decoded = read_otlp_json(bom + latin1_line(0) + b"\n" + line(1) + b"\n", "mem")
    assert [s.trace_id for s in decoded.spans] == [f"{2:032x}"]
    offset = latin1_line(0).index(b"\xe9")
    assert decoded.rejected == [f"line 1: not UTF-8 text (byte 0xE9 at byte {offset} of the line)"]


@pytest.mark.parametrize("compressed", [False, True])
def test_a_file_read_in_blocks_stores_the_good_lines_and_is_not_failed(
    tmp_path, db_path, monkeypatch, compressed
):
    """QA's big file: a bad byte in its last line failed the file, lost the other lines of
    that block and gave the byte's offset in the block as if it were the file's."""
    lines = [line(i) for i in range(40)]
    lines[37] = latin1_line(37)
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / ("big.jsonl.gz" if compressed else "big.jsonl")
    path.write_bytes(gzip.compress(data) if compressed else data)

    def imported(block_bytes):
        monkeypatch.setattr(ingest, "BLOCK_BYTES", block_bytes)
        with CheckpointStore(db_path.with_name(f"{block_bytes}.sqlite")) as store:
            result = import_into(store, [path])
            return result, sorted(store.session_ids())

    whole, stored_whole = imported(1 << 30)
    blocks, stored_blocks = imported(2000)
    assert len(list(ingest._parse_source(path, "auto"))) > 5  # read in blocks
    assert blocks.errors == whole.errors == []
    assert stored_blocks == stored_whole and len(stored_whole) == 39
    assert f"{38:032x}" not in stored_whole
    offset = latin1_line(37).index(b"\xe9")
    warning = f"{path}: skipped line 38: not UTF-8 text (byte 0xE9 at byte {offset} of the line)"
    assert blocks.warnings == whole.warnings == [warning]


BAD_BYTES = [b"\xe9", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"]  # never UTF-8


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from([b"", *BAD_BYTES]), st.integers(0, 400))
        | st.sampled_from([b"", b"not json", b'{"resourceSpans": [', b"\xe9\xe9"]),
        min_size=1,
        max_size=10,
    ),
    block=st.integers(1, 3000),
    codec=st.sampled_from([None, "gzip"]),
    bom=st.booleans(),
)
def test_bad_bytes_anywhere_read_the_same_whole_and_in_blocks(
    tmp_path_factory, lines, block, codec, bom
):
    """Any JSON Lines file whose first line is an OTLP request, with bytes that are not UTF-8
    anywhere in its other lines: read in blocks of any size it gives the same spans, skipped
    lines and errors as read whole, and every line holding such bytes is skipped."""
    data, bad = [line(100)], []
    for number, item in enumerate(lines, start=2):
        if isinstance(item, tuple):  # a good line, with bad bytes spliced in somewhere
            i, junk, where = item
            text = line(i)
            data.append(text[:where] + junk + text[where:])
        else:
            junk = item if b"\xe9" in item else b""
            data.append(item)
        if junk:
            bad.append(number)
    raw = (codecs.BOM_UTF8 if bom else b"") + b"\n".join(data) + b"\n"
    path = tmp_path_factory.mktemp("lines") / "f.jsonl"
    path.write_bytes(gzip.compress(raw) if codec else raw)
    whole, blocks = whole_and_in_blocks(path, block)
    assert [str(e) for e in blocks.errors] == [str(e) for e in whole.errors] == []
    assert blocks.warnings == whole.warnings
    assert blocks.spans == whole.spans
    assert [t.digest for t in blocks.trajectories] == [t.digest for t in whole.trajectories]
    not_utf8 = [w for w in whole.warnings if "not UTF-8" in w]
    assert [int(w.split("skipped line ")[1].split(":")[0]) for w in not_utf8] == bad


def test_a_document_that_is_not_json_lines_and_not_utf8_fails_at_its_file_offset():
    pretty = json.dumps(request(0), indent=2, ensure_ascii=False).encode()
    data = pretty.replace("café".encode(), b"caf\xe9")
    with pytest.raises(ImportFormatError) as caught:
        read_source(data, "auto")
    assert caught.value.detail == "not UTF-8 text (byte 0xE9)"  # not a protobuf file
    offset = data.index(b"\xe9")
    assert caught.value.position == f"byte {offset}"


@pytest.mark.parametrize("fmt", ["otlp-json", "jsonl", "langfuse"])
def test_text_that_is_not_utf8_is_not_called_protobuf(fmt):
    with pytest.raises(ImportFormatError) as caught:
        read_source(b"caf\xe9 au lait\n", fmt)
    assert caught.value.detail == "not UTF-8 text (byte 0xE9)"
    assert caught.value.position == "byte 3"


@pytest.mark.parametrize("stream", [False, True])
def test_protobuf_read_as_json_is_told_to_use_the_protobuf_format(stream):
    message = protobuf_request(request(0))
    data = len(message).to_bytes(4, "big") + message if stream else message
    assert len(read_source(data, "auto").spans) > 0
    with pytest.raises(ImportFormatError, match=r"use --format otlp-proto"):
        read_source(data, "otlp-json")


@pytest.mark.parametrize("fmt", ["auto", "otlp-json", "otlp-proto", "langfuse"])
@pytest.mark.parametrize("bom", [codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE])
def test_a_utf16_json_file_is_named_so(fmt, bom):
    """What PowerShell's `>` writes: UTF-16 with a byte-order mark. It was read as protobuf
    ("Wire format was corrupt")."""
    encoding = "utf-16-le" if bom == codecs.BOM_UTF16_LE else "utf-16-be"
    data = bom + json.dumps(request(0)).encode(encoding)
    with pytest.raises(ImportFormatError) as caught:
        read_source(data, fmt)
    assert caught.value.detail.startswith("UTF-16 text, not UTF-8")
    assert bom.hex(" ").upper() in caught.value.detail
    assert "save it as UTF-8" in caught.value.detail
