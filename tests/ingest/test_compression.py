"""Compressed input: the codecs on their own, and `agent-replay import` of the files the
Collector's file exporter writes with ``compression: zstd`` (both of its layouts) and of
gzip'd or zstd'd files, read whole and in blocks."""

import contextlib
import gzip
import io
import json
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_replay.ingest as ingest
from agent_replay import CheckpointStore
from agent_replay.ingest import compression, detect_format, import_into, load_many
from agent_replay.ingest.compression import Inflated, Undecodable, open_stream
from otlp_protobuf import protobuf_request
from zstd_codec import zstd

SHARED = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
SPANS = SHARED / "fixtures" / "generated" / "otel_event_only.jsonl"
LOGS = SHARED / "fixtures" / "generated" / "otel_event_only.logs.jsonl"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def zstd_compress(data: bytes) -> bytes:
    """One zstd frame with its checksum, as the Collector's encoder writes it."""
    return zstd.compress(data, options={zstd.CompressionParameter.checksum_flag: 1})


COMPRESS = {"gzip": gzip.compress, "deflate": zlib.compress, "zstd": zstd_compress}


# -- the codecs ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_each_codec_inflates_what_it_compressed(codec):
    data = b'{"resourceSpans": []}\n' * 1000
    assert compression.decompress(COMPRESS[codec](data), codec) == data
    assert compression.decompress(COMPRESS[codec](b""), codec) == b""


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_concatenated_members_and_frames_are_read_in_order(codec):
    """`cat a.gz b.gz`, and the zstd frames a Collector writes one flush at a time."""
    parts = [b"first line\n", b"", b"second line\n"]
    packed = b"".join(COMPRESS[codec](p) for p in parts)
    assert compression.decompress(packed, codec) == b"".join(parts)
    with compression.open_stream(io.BytesIO(packed), codec) as stream:
        assert stream.read() == b"".join(parts)


def test_gzip_padding_reads_as_gzip_open_reads_it():
    padded = gzip.compress(b"spans\n") + bytes(10) + gzip.compress(b"more\n") + bytes(3)
    assert compression.decompress(padded, "gzip") == b"spans\nmore\n"
    with compression.open_stream(io.BytesIO(padded), "gzip") as stream:
        assert stream.read() == b"spans\nmore\n"


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_bomb_stops_at_the_limit(codec):
    bomb = COMPRESS[codec](b"\0" * (8 << 20))
    assert len(bomb) < 64 << 10  # small on the wire
    with pytest.raises(Inflated, match=f"{codec} data inflates beyond 1 MiB"):
        compression.decompress(bomb, codec, 1 << 20)
    assert len(compression.decompress(bomb, codec, 8 << 20)) == 8 << 20  # the limit itself


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_more_members_than_an_exporter_writes_are_refused(codec):
    """Each member copied the rest of the body: 8 MiB of empty gzip members took 34 s (and
    zstd frames 7 minutes) to refuse. An exporter writes one member."""
    member = COMPRESS[codec](b"")
    allowed = member * compression.MAX_MEMBERS
    assert compression.decompress(allowed, codec) == b""
    with pytest.raises(Undecodable, match="more than 1024 members or frames"):
        compression.decompress(allowed + member * 400_000, codec)


def test_a_small_compressed_file_that_inflates_far_is_read_in_blocks(tmp_path, monkeypatch):
    """Compressed files under 512 KiB were inflated whole into memory (64 KiB of zstd held
    2 GiB); every compressed OTLP file is now read block by block, and a compressed file of
    another format, read whole, stops at MAX_WHOLE_INFLATED."""
    line = json.dumps({"resourceSpans": []}).encode() + b"\n"
    path = tmp_path / "spans.jsonl.zst"
    path.write_bytes(zstd_compress(line * 200_000))
    assert path.stat().st_size < 64 << 10
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 1 << 20)
    blocks = []
    real = ingest._blocks
    monkeypatch.setattr(ingest, "_blocks", lambda *a: (blocks.append(b) or b for b in real(*a)))
    result = load_many([path])
    assert not result.errors and len(blocks) > 1  # read in blocks, not whole
    monkeypatch.setattr(ingest, "MAX_WHOLE_INFLATED", 1 << 20)
    document = tmp_path / "langfuse.json.gz"
    document.write_bytes(
        gzip.compress(b'{"trace": {}, "observations": [' + b" " * (2 << 20) + b"]}")
    )
    (error,) = load_many([document]).errors
    assert "inflates beyond 1 MiB" in str(error)


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_cut_and_corrupt_data_are_undecodable(codec):
    packed = COMPRESS[codec](b"x" * 5000 + bytes(range(256)))
    with pytest.raises(Undecodable, match=r"cut short|corrupt"):
        compression.decompress(packed[: len(packed) // 2], codec)
    with pytest.raises(Undecodable, match="corrupt"):
        compression.decompress(packed[:2] + b"\xff" * 20, codec)


@FUZZ
@given(codec=st.sampled_from(sorted(COMPRESS)), data=st.binary(max_size=300))
def test_any_bytes_inflate_or_raise_undecodable(codec, data):
    try:
        out = compression.decompress(data, codec, 1 << 16)
    except Undecodable:
        return
    assert len(out) <= 1 << 16


@FUZZ
@given(
    codec=st.sampled_from(sorted(COMPRESS)),
    data=st.binary(max_size=2000),
    cut=st.integers(0, 100),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
)
def test_damaged_compressed_data_inflates_or_raises_undecodable(codec, data, cut, flips):
    """Real compressed data cut short or with bytes changed: never another exception, and
    inflated whole or read as a stream (a large file), the same bytes or an error both ways."""
    packed = bytearray(COMPRESS[codec](data))
    for position, value in flips:
        packed[position % len(packed)] = value
    damaged = bytes(packed[: len(packed) - cut])
    try:
        whole = compression.decompress(damaged, codec)
    except Undecodable:
        whole = None
    if codec == "deflate" or compression.kind(damaged) != codec:
        return  # deflate is only ever a request body; a file without its magic is not read so
    try:
        with compression.open_stream(io.BytesIO(damaged), codec) as stream:
            streamed = stream.read()
    except compression.stream_errors():
        streamed = None
    assert streamed == whole


def test_without_a_zstd_codec_the_error_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(compression, "_zstd_module", lambda: None)
    assert compression.available() == ("gzip", "deflate")
    path = tmp_path / "traces.jsonl.zst"
    path.write_bytes(zstd_compress(SPANS.read_bytes()))
    result = load_many([path])
    (error,) = result.errors
    assert 'pip install "trajectory-causal-attribution[zstd]"' in str(error)
    assert str(path) in str(error)


# -- files ------------------------------------------------------------------------------------


def otlp_lines() -> list[bytes]:
    """OTLP/JSON Lines requests (spans, then their event-only logs)."""
    return [
        line.encode()
        for path in (SPANS, LOGS)
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def proto_messages() -> list[bytes]:
    """The same requests as OTLP protobuf messages."""
    return [protobuf_request(json.loads(line), f"{LOGS.stem}.binpb") for line in otlp_lines()]


def prefixed(messages: list[bytes]) -> bytes:
    """Each message after its length (4 bytes, big-endian): `exportMessageAsBuffer`."""
    return b"".join(len(m).to_bytes(4, "big") + m for m in messages)


def collector_file(layout: str) -> bytes:
    """What the Collector's file exporter writes, by its code (exporter/fileexporter):
    ``json``/``proto`` uncompressed; with ``compression: zstd`` each message compressed on its
    own (``EncodeAll``) and length-prefixed whatever the format (the default), or, with the
    native-compression feature gate, the file one zstd stream of frames (one per flush) over
    JSON Lines or length-prefixed protobuf."""
    lines, messages = otlp_lines(), proto_messages()
    if layout == "json":
        return b"".join(line + b"\n" for line in lines)
    if layout == "proto":
        return prefixed(messages)
    if layout == "json+zstd":
        return prefixed([zstd_compress(line) for line in lines])
    if layout == "proto+zstd":
        return prefixed([zstd_compress(m) for m in messages])
    if layout == "json+zstd-native":
        return b"".join(zstd_compress(line + b"\n") for line in lines)
    if layout == "proto+zstd-native":
        return b"".join(zstd_compress(prefixed([m])) for m in messages)
    raise AssertionError(layout)


LAYOUTS = ["json", "proto", "json+zstd", "proto+zstd", "json+zstd-native", "proto+zstd-native"]


def content(trajectories) -> list:
    """What was imported, without where from (file names are in the metadata)."""
    return [
        (
            t.session_id,
            t.metadata["capture"],
            [(s.span_id, s.agent, s.input_hash, s.output_hash) for s in t.steps],
        )
        for t in trajectories
    ]


@pytest.fixture(scope="module")
def expected():
    plain = load_many([SPANS, LOGS])
    assert plain.trajectories and not plain.warnings
    return plain


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_collector_file_layout_imports_as_the_plain_files(layout, tmp_path, expected):
    path = tmp_path / "traces"
    path.write_bytes(collector_file(layout))
    result = load_many([path])
    assert not result.errors and not result.warnings
    assert result.spans == expected.spans
    assert content(result.trajectories) == content(expected.trajectories)
    assert result.sources[0].format == ("otlp-json" if layout.startswith("json") else "otlp-proto")
    assert detect_format(path.read_bytes()) == result.sources[0].format


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_stores_the_same_in_blocks(layout, tmp_path, monkeypatch, expected):
    """Read a message or line at a time (a Collector file without rotation can be larger than
    memory), each layout stores what the plain files store."""
    path = tmp_path / "traces"
    path.write_bytes(collector_file(layout))
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 64)
    with CheckpointStore(tmp_path / "blocks.sqlite") as store:
        result = import_into(store, [path])
        stored = content(store.load(s) for s in store.session_ids())
    assert not result.errors and not result.warnings
    assert stored == content(expected.trajectories)


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("layout", ["json", "proto"])
def test_a_compressed_file_is_read_as_a_stream(codec, layout, tmp_path, monkeypatch, expected):
    """`gzip traces.jsonl` / `zstd traces.jsonl`: large ones decompressed as they are read."""
    path = tmp_path / f"traces.{codec}"
    path.write_bytes(COMPRESS[codec](collector_file(layout)))
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 64)
    assert ingest._parse_source(path, "auto").__next__().format in ("otlp-json", "otlp-proto")
    blocks = list(ingest._parse_source(path, "auto"))
    assert len(blocks) > 1  # read in blocks, not whole
    result = load_many([path])
    assert not result.errors and result.spans == expected.spans


@pytest.mark.parametrize("layout", ["json+zstd", "proto+zstd", "json+zstd-native"])
def test_a_damaged_message_is_rejected_and_the_rest_lands(layout, tmp_path):
    data = bytearray(collector_file(layout))
    if layout.endswith("native"):
        data = data[: len(data) - 5]  # the last frame cut short: the stream fails there
    else:
        offsets, offset = [], 0
        while offset < len(data):
            offsets.append(offset)
            offset += 4 + int.from_bytes(data[offset : offset + 4], "big")
        last = offsets[-1]  # the last message (a logs request): its frame damaged
        data[last + 4 + int.from_bytes(data[last : last + 4], "big") // 2] ^= 0xFF
    path = tmp_path / "traces"
    path.write_bytes(bytes(data))
    for block_bytes in (1 << 30, 64):
        ingest.BLOCK_BYTES, saved = block_bytes, ingest.BLOCK_BYTES
        try:
            result = load_many([path])
        finally:
            ingest.BLOCK_BYTES = saved
        if layout.endswith("native"):  # what precedes the cut is read, the rest is lost
            assert not result.errors and result.trajectories
            assert "the rest of the file: zstd data cut short after" in result.warnings[-1]
        else:
            assert not result.errors and result.trajectories
            assert f"message {len(offsets) - 1} at byte {last}: corrupt zstd" in result.warnings[0]


@FUZZ
@given(
    messages=st.lists(
        st.sampled_from(range(4)) | st.binary(min_size=1, max_size=40),
        min_size=1,
        max_size=6,
    ),
    block=st.integers(1, 400),
)
def test_zstd_message_streams_read_in_blocks_read_as_read_whole(messages, block):
    """Length-prefixed zstd frames of good requests, bad frames and raw junk: the same spans,
    warnings and errors read whole and in blocks of any size, and never an internal error."""
    lines = otlp_lines()
    records = [
        zstd_compress(lines[m % len(lines)]) if isinstance(m, int) else zstd_compress(m)
        for m in messages
    ]
    data = prefixed([zstd_compress(lines[0]), *records])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "traces"
        path.write_bytes(data)
        results = []
        for size in (1 << 30, block):
            ingest.BLOCK_BYTES, saved = size, ingest.BLOCK_BYTES
            try:
                results.append(load_many([path]))
            finally:
                ingest.BLOCK_BYTES = saved
    whole, blocks = results
    assert [str(e) for e in blocks.errors] == [str(e) for e in whole.errors] == []
    assert blocks.warnings == whole.warnings
    assert blocks.spans == whole.spans
    assert all("internal error" not in w for w in whole.warnings)


def whole_and_in_blocks(data: bytes, block: int, piece: int):
    """``load_many`` of a file holding ``data``, read whole and in blocks of ``block``, with
    damaged compressed data read ``piece`` bytes at a time."""
    results = []
    saved = ingest.BLOCK_BYTES, compression.PIECE
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "traces"
        path.write_bytes(data)
        try:
            compression.PIECE = piece
            for size in (1 << 30, block):
                ingest.BLOCK_BYTES = size
                results.append(load_many([path]))
        finally:
            ingest.BLOCK_BYTES, compression.PIECE = saved
    return results


@FUZZ
@given(
    codec=st.sampled_from(["gzip", "zstd"]),
    proto=st.booleans(),
    picks=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    cut=st.integers(0, 400),
    flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=2),
    block=st.integers(64, 4000),
    piece=st.integers(16, 2000),
)
def test_a_damaged_compressed_file_reads_the_same_whole_and_in_blocks(
    codec, proto, picks, cut, flips, block, piece
):
    """gzip'd or zstd'd JSON Lines or protobuf streams, cut short or with bytes changed: read
    whole or in blocks, the same spans, warnings and errors; what precedes the damage is kept
    (a warning says what was lost) and nothing but an ImportFormatError comes out."""
    lines, messages = otlp_lines(), proto_messages()
    if proto:
        plain = prefixed([messages[p % len(messages)] for p in picks])
    else:
        plain = b"".join(lines[p % len(lines)] + b"\n" for p in picks)
    packed = bytearray(COMPRESS[codec](plain))
    for position, value in flips:
        packed[position % len(packed)] = value
    damaged = bytes(packed[: max(8, len(packed) - cut)])
    whole, blocks = whole_and_in_blocks(damaged, block, piece)
    assert [str(e) for e in blocks.errors] == [str(e) for e in whole.errors]
    assert blocks.warnings == whole.warnings
    assert blocks.spans == whole.spans
    for result in (whole, blocks):
        assert all("internal error" not in str(e) for e in result.errors)
        if result.spans:  # what precedes the damage was read: the file is not failed
            assert not result.errors


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_cut_compressed_file_keeps_every_line_before_the_cut(codec, tmp_path):
    """A Collector killed mid-write leaves its last file cut. Read a megabyte at a time, a
    small cut file gave nothing and a large one lost up to the last megabyte before the cut."""
    lines = otlp_lines()
    plain = b"".join(lines[i % len(lines)] + b"\n" for i in range(400))  # zstd: 17 blocks
    packed = COMPRESS[codec](plain)
    cut = packed[: len(packed) * 9 // 10]
    path = tmp_path / f"traces.jsonl.{codec}"
    path.write_bytes(cut)
    inflated = b""
    with open_stream(io.BytesIO(cut), codec) as stream:
        with contextlib.suppress(EOFError):
            while chunk := stream.read1(1 << 10):  # what an inflater gets out, cut included
                inflated += chunk
    complete = inflated.count(b"\n")
    assert 0 < complete < 400
    result = load_many([path])
    assert not result.errors
    before = tmp_path / "before-the-cut.jsonl"
    before.write_bytes(b"".join(lines[i % len(lines)] + b"\n" for i in range(complete)))
    assert result.spans == load_many([before]).spans
    assert any(f"the rest of the file: {codec} data cut short after" in w for w in result.warnings)
