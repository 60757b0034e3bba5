"""Import agent traces from files and payloads: ``load(path_or_data, format="auto")``.

Formats (``format=``): ``otlp-json`` (OTLP/JSON traces or logs: one document, or JSON Lines as
the Collector's file exporter writes), ``otlp-proto`` (one protobuf message or a length-prefixed
stream), ``langfuse`` (trace exports), ``langsmith`` (runs: ``{post, patch}`` payloads, run
trees), ``atif`` (Harbor's trajectory format), ``whowhen`` (the Who&When benchmark files),
``jsonl`` (agent-replay's step-record layout, see :mod:`.steps`) and ``store`` (another
agent-replay store's sessions). ``auto`` detects the format from the content. gzip- and
zstd-compressed input is decompressed first (zstd needs the ``zstd`` extra before Python 3.14),
and so are the zstd frames that the Collector's file exporter writes with ``compression: zstd``.

Spans and log records of every OTLP source in one call are assembled *together* (a trace can
be split across files, and event-only content capture puts the messages in a separate logs
file), so pass a span file and its logs file in the same call; so are the LangSmith runs of
every source (a run's post and its patch can be in two files). Every trajectory carries the
capture report in ``metadata["capture"]``.

Errors: :func:`load` raises :class:`~agent_replay.errors.ImportFormatError` (naming the source
and the position) for the first source it cannot read. :func:`load_many` never raises for one
bad source: it reads the others and returns the errors in :class:`ImportResult`; so does
:func:`import_into`, which stores what it reads without keeping it in memory (what
``agent-replay import`` runs). Records skipped inside an otherwise readable source (a span
with a malformed id, a bad line in a JSON Lines file, a session of a store that does not
verify) are listed in ``ImportResult.warnings``.
The functions here hold no shared state and may run in several threads at once.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import IO, Any

from ..errors import AgentReplayError, ImportFormatError, StoreError
from ..mapping.assemble import assemble, first_copies
from ..mapping.spans import attach_logs
from ..model import Trajectory
from ..store.sink import DurableSpanSink, rehome, save_merged
from ..store.sqlite import CheckpointStore
from . import compression
from ._common import Parsed, Reject
from .atif import is_atif, read_atif
from .langfuse import is_langfuse, read_langfuse
from .langsmith import LangSmithRuns, is_langsmith
from .otlp import (
    Decoded,
    decode_messages,
    length_prefixed,
    parse_json_bytes,
    read_otlp_json,
    read_otlp_proto,
)
from .steps import is_step_record, read_jsonl_records
from .whowhen import is_whowhen, read_whowhen

__all__ = [
    "FORMATS",
    "ImportResult",
    "ImportedSession",
    "SourceReport",
    "detect_format",
    "import_into",
    "load",
    "load_many",
    "read_source",
]

_log = logging.getLogger(__name__)

FORMATS = (
    "otlp-json",
    "otlp-proto",
    "langfuse",
    "langsmith",
    "atif",
    "whowhen",
    "jsonl",
    "store",
)
_SQLITE = b"SQLite format 3\x00"
Source = str | os.PathLike[str] | bytes | bytearray | dict[str, Any] | list[Any]
_OTLP_KEYS = (b'"resourceSpans"', b'"resourceLogs"', b'"resource_spans"', b'"resource_logs"')


@dataclass
class SourceReport:
    """How one source went: its format, what it held, and its error if it failed."""

    source: str
    format: str | None = None
    trajectories: int = 0
    spans: int = 0
    logs: int = 0
    runs: int = 0  # LangSmith runs and patches (assembled once every source is read)
    rejected: list[str] = field(default_factory=list)
    error: ImportFormatError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class ImportResult:
    """Everything one import produced: per-source reports and warnings, and the trajectories
    (:func:`load_many`) or what was stored of them (:func:`import_into`, ``sessions``).
    ``spans`` holds the ``(trace_id, span_id)`` of every OTLP span :func:`load_many` read."""

    trajectories: list[Trajectory] = field(default_factory=list)
    sources: list[SourceReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    spans: set[tuple[str, str]] = field(default_factory=set, repr=False)
    sessions: list[ImportedSession] = field(default_factory=list)

    @property
    def errors(self) -> list[ImportFormatError]:
        return [s.error for s in self.sources if s.error is not None]

    @property
    def failed(self) -> bool:
        return any(s.error is not None for s in self.sources)


# -- reading one source ---------------------------------------------------------------------


def _name(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return "<data>"


def _read(source: Any, name: str) -> Any:
    """Bytes of a path, or the data itself."""
    if isinstance(source, (str, os.PathLike)):
        try:
            return Path(source).read_bytes()
        except OSError as exc:
            raise ImportFormatError(f"cannot read: {exc.strerror or exc}", source=name) from None
    if isinstance(source, bytearray):
        return bytes(source)
    return source


#: how far a compressed file that is read whole (not an OTLP file, which is read in blocks)
#: may inflate: it is held in memory, and then parsed
MAX_WHOLE_INFLATED = 1 << 30


def _decompress(data: bytes, name: str) -> tuple[bytes, str | None]:
    """``data`` inflated when it is gzip or zstd, and what stopped it early: damaged
    compressed data is read up to the damage (:func:`compression.salvaging`, as a large file
    is), and its rejection says what was lost. Raises :class:`ImportFormatError` when nothing
    could be inflated, or beyond :data:`MAX_WHOLE_INFLATED`."""
    codec = compression.kind(data)
    if codec is None:
        return data, None
    try:
        with compression.salvaging(io.BytesIO(data), codec, MAX_WHOLE_INFLATED) as stream:
            out, error = stream.read(), stream.raw.error
    except compression.Undecodable as exc:  # no codec for it
        raise ImportFormatError(str(exc), source=name) from None
    if error is not None and (not out or isinstance(error, compression.Inflated)):
        raise ImportFormatError(str(error), source=name)
    return out, None if error is None else _lost(error)


def _lost(error: compression.Undecodable) -> str:
    """The rejection of a compressed file's unreadable rest ("skipped ...")."""
    return f"the rest of the file: {error}"


def _classify(doc: Any) -> str | None:
    if isinstance(doc, dict) and any(
        k in doc for k in ("resourceSpans", "resourceLogs", "resource_spans", "resource_logs")
    ):
        return "otlp-json"
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "resourceSpans" in doc[0]:
        return "otlp-json"
    for fmt, test in (
        ("langfuse", is_langfuse),
        ("whowhen", is_whowhen),
        ("atif", is_atif),
        ("langsmith", is_langsmith),
    ):
        if test(doc) or (isinstance(doc, list) and doc and all(test(d) for d in doc)):
            return fmt
    if is_step_record(doc) or (isinstance(doc, dict) and isinstance(doc.get("steps"), list)):
        return "jsonl"
    if isinstance(doc, dict) and isinstance(doc.get("session"), dict):
        return "jsonl"
    return None


def detect_format(data: bytes | dict | list, name: str = "<data>") -> str:
    """The format of ``data`` (see :data:`FORMATS`), gzip'd or zstd'd or not; raises
    :class:`ImportFormatError`."""
    if isinstance(data, (bytes, bytearray)):
        data, _ = _decompress(bytes(data), name)
    fmt, _ = _detect(data, name)
    return fmt


def _detect(data: Any, name: str) -> tuple[str, list[tuple[str, Any]] | None]:
    """``(format, parsed JSON documents if parsing was needed to tell)``."""
    if isinstance(data, (dict, list)):
        fmt = _classify(data)
        if fmt is None:
            raise ImportFormatError("unrecognised document (no known trace format)", source=name)
        return fmt, [("", data)]
    if _framed(data):
        return _framed_format(data[4 : 4 + int.from_bytes(data[:4], "big")]), None
    head = data[:4096].removeprefix(codecs.BOM_UTF8).lstrip()  # JSON saved by Windows tools
    if not head:
        raise ImportFormatError("empty input", source=name)
    if head[:1] not in (b"{", b"["):
        if _is_text(head):
            try:  # a JSON scalar (`null`, `"text"`, `3`): JSON, but no trace document
                value = json.loads(data)
            except (ValueError, RecursionError):
                raise ImportFormatError(
                    "text that is neither JSON nor OTLP protobuf (not a trace file?)", source=name
                ) from None
            raise ImportFormatError(
                f"JSON holding only {json.dumps(value)[:40]}: no OTLP or other trace data",
                source=name,
            )
        return "otlp-proto", None
    if any(key in head for key in _OTLP_KEYS):
        return "otlp-json", None
    docs = parse_json_bytes(data, name)
    for position, doc in docs:
        if isinstance(doc, ImportFormatError):
            continue
        fmt = _classify(doc)
        if fmt is None:
            raise ImportFormatError(
                "unrecognised JSON (not OTLP, Langfuse, LangSmith, ATIF, Who&When or step "
                "records); pass --format if you know the format",
                source=name,
                position=position,
            )
        return fmt, docs
    first = next((d for _, d in docs if isinstance(d, ImportFormatError)), None)
    raise first or ImportFormatError("no JSON document found", source=name)


def _framed(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a stream of length-prefixed zstd frames, as the
    Collector's file exporter writes with ``compression: zstd`` (``format: json`` or
    ``proto``), each frame one OTLP/JSON document or protobuf message."""
    return head[:1] == b"\x00" and compression.kind(head[4:8]) == compression.ZSTD


def _framed_format(frame: bytes) -> str:
    """``otlp-json`` or ``otlp-proto``: what the zstd ``frame`` (the first of such a file)
    holds."""
    try:
        with compression.open_stream(io.BytesIO(frame), compression.ZSTD) as stream:
            head = stream.read(64)
    except (compression.Undecodable, *compression.stream_errors()):
        return "otlp-proto"  # reading it reports what is wrong
    return "otlp-json" if head.lstrip()[:1] == b"{" else "otlp-proto"


def _is_text(head: bytes) -> bool:
    """Printable UTF-8: protobuf's random id bytes practically never are."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        # the 4 KiB cut may split a character; judge what came before it
        try:
            text = head[:-4].decode("utf-8")
        except UnicodeDecodeError:
            return False
    return all(c.isprintable() or c in "\t\n\r" for c in text)


def _documents(fmt: str, data: Any, docs: list | None, name: str) -> list[tuple[str, Any]]:
    """The parsed JSON documents of a source. A line that is not JSON fails the source,
    except in OTLP/JSON Lines (the Collector may have cut its last line): there it is
    skipped and reported, as long as some line is readable."""
    if docs is None:
        docs = [("", data)] if isinstance(data, (dict, list)) else parse_json_bytes(data, name)
    good = [(p, d) for p, d in docs if not isinstance(d, ImportFormatError)]
    bad = [d for _, d in docs if isinstance(d, ImportFormatError)]
    if bad and (fmt != "otlp-json" or not good):
        raise bad[0]
    return docs


def _parse(fmt: str, data: Any, docs: list | None, name: str) -> Parsed:
    parsed = Parsed(format=fmt, source=name)
    if fmt == "otlp-proto" or (fmt == "otlp-json" and isinstance(data, bytes) and _framed(data)):
        if not isinstance(data, bytes):
            raise ImportFormatError("otlp-proto input must be bytes", source=name)
        decoded = read_otlp_proto(data, name)
        parsed.spans, parsed.logs, parsed.rejected = decoded.spans, decoded.logs, decoded.rejected
        return parsed
    docs = _documents(fmt, data, docs, name)
    if fmt == "otlp-json":
        decoded = read_otlp_json(data, name, docs)
        parsed.spans, parsed.logs, parsed.rejected = decoded.spans, decoded.logs, decoded.rejected
        return parsed
    if fmt == "jsonl":
        try:
            parsed.trajectories = read_jsonl_records(docs, _stem(name))
        except Reject as exc:
            raise exc.located(name) from None
        return parsed
    if fmt == "langsmith":  # assembled with the other sources' runs (:func:`_langsmith`)
        parsed.runs = LangSmithRuns()
        for position, doc in docs:
            try:
                parsed.runs.add(doc, name)
            except Reject as exc:
                raise exc.located(name, position) from None
        return parsed
    readers: dict[str, Callable[[Any], list[Trajectory]]] = {
        "langfuse": read_langfuse,
        "atif": read_atif,
        "whowhen": lambda doc: read_whowhen(doc, name),
    }
    reader = readers.get(fmt)
    if reader is None:
        raise ImportFormatError(
            f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})", source=name
        )
    for position, doc in docs:
        try:
            parsed.trajectories.extend(reader(doc))
        except Reject as exc:
            raise exc.located(name, position) from None
    return parsed


def _stem(name: str) -> str:
    stem = PurePath(name).name
    for suffix in (".gz", ".zst", ".jsonl", ".json", ".ndjson"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return stem or "session"


def _is_store(source: Source) -> bool:
    """Whether ``source`` is a SQLite file (read without reading the whole file)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    try:
        with open(source, "rb") as handle:
            return handle.read(len(_SQLITE)) == _SQLITE
    except OSError:
        return False


def _open_store(source: str | os.PathLike, name: str) -> Parsed:
    """Another agent-replay store, opened read-only: its sessions are read one at a time."""
    try:
        return Parsed(format="store", source=name, store=CheckpointStore(source, read_only=True))
    except StoreError as exc:
        raise ImportFormatError(str(exc).removeprefix(f"{name}: "), source=name) from None


def _sessions(parsed: Parsed, report: SourceReport) -> Iterator[Trajectory]:
    """The sessions of a store source, each verified as it is loaded (one that is not is
    skipped and reported), counted in ``report``; the store is closed at the end."""
    store = parsed.store
    try:
        try:
            session_ids = store.session_ids()
        except AgentReplayError as exc:
            report.error = ImportFormatError(
                f"cannot list its sessions ({exc})", source=report.source
            )
            return
        for session_id in session_ids:
            try:
                trajectory = store.load(session_id)
            except AgentReplayError as exc:
                report.rejected.append(f"session {session_id!r}: {exc}")
                continue
            report.trajectories += 1
            yield trajectory
    finally:
        store.close()


def read_source(source: Source, format: str = "auto") -> Parsed:
    """Parse one source without assembling OTLP spans. Raises :class:`ImportFormatError`.
    Another agent-replay store comes back open (``parsed.store``), not read."""
    name = _name(source)
    if format in ("auto", "store") and _is_store(source):
        return _open_store(source, name)  # type: ignore[arg-type]
    if format == "store":
        raise ImportFormatError("not an agent-replay store (SQLite file expected)", source=name)
    with _reading(name):
        data, damage = _read(source, name), None
        if isinstance(data, bytes):
            data, damage = _decompress(data, name)
        try:
            if format == "auto":
                fmt, docs = _detect(data, name)
            else:
                if format not in FORMATS:
                    raise ImportFormatError(
                        f"unknown format {format!r} (choose from {', '.join(FORMATS)})",
                        source=name,
                    )
                fmt, docs = format, None
            parsed = _parse(fmt, data, docs, name)
        except ImportFormatError as exc:
            if damage is None:
                raise
            # what a damaged file failed on is its damage
            raise ImportFormatError(f"{damage} ({exc.detail})", source=name) from None
        if damage is not None:
            parsed.rejected.append(damage)
        return parsed


@contextlib.contextmanager
def _reading(name: str) -> Iterator[None]:
    """Any failure while reading source ``name`` as an :class:`ImportFormatError`."""
    try:
        yield
    except ImportFormatError:
        raise
    except RecursionError:
        raise ImportFormatError("nested too deeply to read", source=name) from None
    except MemoryError:
        raise ImportFormatError("too large to read into memory", source=name) from None
    except Exception as exc:  # a reader bug on odd input must not stop the other sources
        _log.debug("internal error reading %s", name, exc_info=True)
        raise ImportFormatError(
            f"internal error while reading ({type(exc).__name__}: {exc}); please report it",
            source=name,
        ) from exc


#: a larger OTLP file is read this many bytes (of whole lines or messages) at a time
BLOCK_BYTES = 8 << 20
_FIRST_LINE_BYTES = 256 << 20  # a first line longer than this: the file is read whole


def _parse_source(source: Source, format: str) -> Iterator[Parsed]:
    """What one source holds: one :class:`Parsed`, or one per block of an OTLP file larger
    than :data:`BLOCK_BYTES` (JSON Lines by whole lines, protobuf streams by whole messages;
    plain, or gzip'd or zstd'd as a whole, decompressed as they are read), so that a file
    larger than memory can be imported. Raises :class:`ImportFormatError` (after the blocks
    it could read, when nothing could be read)."""
    name = _name(source)
    large = _large(source, format)
    blocks: Iterator[Any] | None = None
    if large is not None:
        blocks = _json_lines_blocks(source, format, large[0])
    if blocks is not None:
        fmt = "otlp-json"

        def decode(block: tuple[int, bytes]) -> Decoded:
            return read_otlp_json(block[1], name, first_line=block[0], json_lines=True)

    else:
        fmt, blocks = _proto_blocks(source, format, *large) if large else (format, None)

        def decode(block: list[tuple[int, int, bytes | None]]) -> Decoded:
            return decode_messages(block, name)

    if blocks is None:
        yield read_source(source, format)
        return
    summary = Decoded()  # the whole file's first error and rejection, and whether it read any
    damage = None
    with _reading(name):
        try:
            for block in blocks:
                decoded = decode(block)
                summary.error = summary.error or decoded.error
                summary.rejected = summary.rejected or decoded.rejected[:1]
                summary.spans = summary.spans or decoded.spans[:1]
                summary.logs = summary.logs or decoded.logs[:1]
                yield Parsed(
                    format=fmt,
                    source=name,
                    spans=decoded.spans,
                    logs=decoded.logs,
                    rejected=decoded.rejected,
                )
        except compression.Undecodable as exc:  # damaged: what came before it was read
            damage = _lost(exc)
            summary.rejected = summary.rejected or [damage]
            yield Parsed(format=fmt, source=name, rejected=[damage])
        except OSError as exc:
            raise ImportFormatError(f"cannot read: {exc.strerror or exc}", source=name) from None
    error = summary.unreadable(name)
    if error is not None and damage is not None:  # as read_source says it
        error = ImportFormatError(f"{damage} ({error.detail})", source=name)
    if error is not None:
        raise error


@contextlib.contextmanager
def _opened(path: str | os.PathLike, codec: str | None) -> Iterator[IO[bytes]]:
    """``path`` open for reading, decompressed as it is read when ``codec`` says so, up to
    where it is damaged (:func:`compression.salvaging`); once everything before the damage
    was read, the damage is raised as :class:`compression.Undecodable`."""
    with open(path, "rb") as raw:
        if codec is None:
            yield raw
            return
        with compression.salvaging(raw, codec) as stream:
            yield stream
            error = stream.raw.error
        if error is not None:
            raise error


def _large(source: Source, format: str) -> tuple[str | None, int] | None:
    """``(compression, size)`` of an OTLP file large enough to read in blocks: more than
    :data:`BLOCK_BYTES`, or a sixteenth of it compressed (compressed OTLP shrinks tenfold or
    more); ``None`` otherwise."""
    if format not in ("auto", "otlp-json", "otlp-proto"):
        return None
    if not isinstance(source, (str, os.PathLike)):
        return None
    try:
        size = os.path.getsize(source)
        with open(source, "rb") as handle:
            head = handle.read(8)
    except OSError:
        return None  # read whole, which reports what is wrong
    codec = compression.kind(head)
    framed = compression.kind(head[4:]) == compression.ZSTD  # zstd'd length-prefixed messages
    # a compressed file of any size: how far it inflates is not known until it is read (64 KiB
    # of zstd inflated to 2 GiB, all held in memory when small files were read whole)
    if not codec and size <= (BLOCK_BYTES // 16 if framed else BLOCK_BYTES):
        return None
    return codec, size


def _json_lines_blocks(
    source: str | os.PathLike, format: str, codec: str | None
) -> Iterator[tuple[int, bytes]] | None:
    """``(first line number, bytes)`` of each block of whole lines of a large OTLP/JSON Lines
    file (:func:`_large`), read one at a time; ``None`` for any other file (it is read
    whole)."""
    if format == "otlp-proto":
        return None
    try:
        with _opened(source, codec) as handle:
            head = handle.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()
            if head[:1] != b"{" or not any(k in head.split(b"\n", 1)[0] for k in _OTLP_KEYS):
                return None  # not OTLP/JSON Lines (a binary file has no line to read)
            first = head + handle.readline(_FIRST_LINE_BYTES)  # one export request
    except (OSError, compression.Undecodable):
        return None  # read whole, which reports what is wrong
    # JSON Lines of OTLP requests: the first line is an object of its own naming its signal
    # (a document spread over lines is read whole)
    first = first.split(b"\n", 1)[0].strip()
    if first[-1:] != b"}":
        return None
    return _blocks(source, codec)


def _proto_blocks(
    source: str | os.PathLike, format: str, codec: str | None, size: int
) -> tuple[str, Iterator[list[tuple[int, int, bytes | None]]] | None]:
    """The format and messages of a large stream of length-prefixed messages (:func:`_large`;
    the Collector's file exporter with ``format: proto``, or with ``compression: zstd``: see
    :func:`_framed`), read a block of whole messages at a time; no messages for any other
    file (it is read whole)."""
    try:
        with _opened(source, codec) as handle:
            head = handle.read(8)
            if _framed(head):  # the rest of the first message, to tell what it holds
                head += handle.read(max(0, int.from_bytes(head[:4], "big") - 4))
    except (OSError, compression.Undecodable):
        return format, None
    if _framed(head):
        return _framed_format(head[4:]), _message_blocks(source, codec, None if codec else size)
    if head[:1] != b"\x00" or format == "otlp-json":  # a length prefix starts with a zero byte
        return format, None
    return "otlp-proto", _message_blocks(source, codec, None if codec else size)


def _message_blocks(
    source: str | os.PathLike, codec: str | None, size: int | None
) -> Iterator[list[tuple[int, int, bytes | None]]]:
    with _opened(source, codec) as handle:
        block: list[tuple[int, int, bytes | None]] = []
        held = 0
        for message in length_prefixed(handle.read, size):
            block.append(message)
            payload = message[2] or b""
            # a zstd'd message holds about ten times its size
            held += len(payload) * (16 if compression.kind(payload) == compression.ZSTD else 1)
            if held >= BLOCK_BYTES:
                yield block
                block, held = [], 0
        if block:
            yield block


def _blocks(source: str | os.PathLike, codec: str | None) -> Iterator[tuple[int, bytes]]:
    line = 1
    with _opened(source, codec) as handle:
        while block := handle.read(BLOCK_BYTES):
            block += handle.readline()  # to the end of its last line
            yield line, block
            line += block.count(b"\n")


# -- public API ------------------------------------------------------------------------------


def _sources(source: Source | Sequence[str | os.PathLike]) -> list[Source]:
    if (
        isinstance(source, (list, tuple))
        and source
        and all(isinstance(s, (str, os.PathLike)) for s in source)
    ):
        return list(source)
    return [source]  # type: ignore[list-item]


def _read_each(
    sources: Iterable[Source],
    format: str,
    result: ImportResult,
    on_source: Callable[[SourceReport], None] | None,
) -> Iterator[tuple[SourceReport, Parsed]]:
    """Each readable source's report and what it held, one source at a time. Every report
    goes to ``result.sources`` (a source that cannot be read carries its error) and then to
    ``on_source``, once the caller is done with the source. A large OTLP/JSON Lines file comes
    in several parts (:func:`_parse_source`), each with the same report. One path, bytes
    or document given where an iterable of them is expected is that one source (a path was
    read letter by letter)."""
    if isinstance(sources, (str, os.PathLike, bytes, bytearray, Mapping)):
        sources = [sources]
    for source in sources:
        report = SourceReport(source=_name(source))
        try:
            for parsed in _parse_source(source, format):  # blocks of a large file, one by one
                report.format = parsed.format
                report.spans += len(parsed.spans)
                report.logs += len(parsed.logs)
                report.trajectories += len(parsed.trajectories)
                report.runs += len(parsed.runs or ())
                report.rejected.extend(parsed.rejected)
                yield report, parsed
        except ImportFormatError as exc:
            report.error = exc
            if not (report.spans or report.logs or report.trajectories):
                report.rejected.clear()  # the error says why nothing could be read
        result.warnings.extend(f"{report.source}: skipped {r}" for r in report.rejected)
        result.sources.append(report)
        if on_source is not None:
            on_source(report)


def load_many(
    sources: Iterable[Source],
    format: str = "auto",
    *,
    on_source: Callable[[SourceReport], None] | None = None,
) -> ImportResult:
    """Read every source, assemble the OTLP ones together, and report per source.

    Never raises :class:`ImportFormatError`: a source that cannot be read is reported in
    ``result.sources`` (``error``) and the rest are imported. ``on_source`` is called after
    each source is read (for progress bars).
    """
    result = ImportResult()
    spans = []
    logs = []
    traces = _Traces()
    runs = LangSmithRuns()
    for report, parsed in _read_each(sources, format, result, on_source):
        result.trajectories.extend(parsed.trajectories)
        if parsed.store is not None:
            result.trajectories.extend(_sessions(parsed, report))
        if parsed.runs:
            runs.update(parsed.runs)
        spans.extend(parsed.spans)
        logs.extend(parsed.logs)
        for span in parsed.spans:
            traces.note(span.trace_id, span.start_ns, report.source)
            result.spans.add((span.trace_id, span.span_id))
    result.trajectories.extend(_langsmith(runs, result))
    spans, conflicting = first_copies(spans)
    _warn_conflicting(result, conflicting)
    if logs:
        joinable = [log for log in logs if log.span_id]
        spans, orphans = attach_logs(spans, joinable)
        _warn_unjoined(result, len(orphans) + len(logs) - len(joinable))
    for trajectory in assemble(spans, source="import:otlp") if spans else ():
        result.trajectories.append(traces.annotated(trajectory))
    return result


def load(
    path_or_data: Source | Sequence[str | os.PathLike], format: str = "auto"
) -> list[Trajectory]:
    """Trajectories from a path, several paths (assembled together), raw bytes, or a parsed
    JSON document. Raises :class:`ImportFormatError` naming the first source that cannot be
    read (use :func:`load_many` to import the readable ones anyway)."""
    result = load_many(_sources(path_or_data), format)
    if result.errors:
        raise result.errors[0]
    return result.trajectories


@dataclass(frozen=True)
class ImportedSession:
    """What :func:`import_into` stored of one trajectory it read (the trajectory itself is not
    kept in memory): its session, step count, source and capture report."""

    session_id: str
    steps: int
    source: str
    capture: dict[str, Any]

    @classmethod
    def of(cls, trajectory: Trajectory) -> ImportedSession:
        return cls(
            trajectory.session_id,
            len(trajectory.steps),
            trajectory.source,
            trajectory.metadata.get("capture") or {},
        )


def _as_stored(store: CheckpointStore, sessions: list[ImportedSession]) -> list[ImportedSession]:
    """``sessions`` as the store now holds them, each once: a trace joined to a stored
    conversation was described by the part imported, not by the session it made (6 steps
    stored, "3 steps, fully replayable" said). Reads each session's header and last step."""
    out: dict[str, ImportedSession] = {}
    for imported in sessions:
        try:
            end = store.load_end(imported.session_id)
        except AgentReplayError:  # (kept as imported: nothing better to say)
            out.setdefault(imported.session_id, imported)
            continue
        out[imported.session_id] = replace(ImportedSession.of(end.session), steps=end.n_steps)
    return list(out.values())


def import_into(
    store: CheckpointStore,
    sources: Iterable[Source],
    format: str = "auto",
    *,
    on_source: Callable[[SourceReport], None] | None = None,
    on_assembled: Callable[[int, int], None] | None = None,
) -> ImportResult:
    """Read every source and store what it holds; what was stored is in ``result.sessions``
    (``result.trajectories`` stays empty: nothing is kept in memory beyond one source).
    ``on_source`` sees each source's report once it is read, ``on_assembled`` how many of the
    staged traces are assembled so far, and of how many, after each batch (progress bars).

    OTLP spans and log records are staged in the store's pending tables as each source is
    read (one transaction per source) and then assembled trace by trace, exactly as the
    receiver assembles what it received (:class:`~agent_replay.store.sink.DurableSpanSink`):
    every trace of the import is assembled whole, whichever files its spans and log records
    came in, with memory bounded by the largest source; the staged rows are forgotten
    afterwards. Trajectories captured from OTel traces join what the store already holds of
    them: a conversation imported file by file is continued after its stored steps (only
    the stored session's end is read), spans of a stored trace join its stored steps, and a
    trace stored under its trace id joins its conversation. So do the trajectories of
    Langfuse and LangSmith exports (file by file) and the sessions of another store (one by
    one). Trajectories without traces (ATIF, step records) replace a stored session of the
    same id. Importing the same files twice leaves one copy.
    """
    result = ImportResult()
    sink = DurableSpanSink(store, source="import:otlp", log_conflicts=False)
    staged = _Traces()
    runs = LangSmithRuns()
    for report, parsed in _read_each(sources, format, result, on_source):
        if parsed.store is not None:
            _import_store(store, parsed, report, result)
            continue
        if parsed.spans or parsed.logs:
            sink.add(parsed.spans, parsed.logs)
            for span in parsed.spans:
                staged.note(span.trace_id, span.start_ns, report.source)
            for log in parsed.logs:  # files of spans only, as load_many notes them
                staged.note(log.trace_id, log.time_ns, None)
        if parsed.trajectories:
            _save_trajectories(store, parsed.trajectories, result)
        if parsed.runs:
            runs.update(parsed.runs)
    if runs:
        _save_trajectories(store, _langsmith(runs, result), result)
    for report in result.sources:  # a file read without error that held nothing is said so
        if (
            report.ok
            and report.format != "store"
            and not (
                report.spans or report.logs or report.trajectories or report.runs or report.rejected
            )
        ):
            result.warnings.append(
                f"{report.source}: nothing to import in it (no spans, log records or runs; "
                "empty, or not a trace file?)"
            )
    _warn_conflicting(result, sink.conflicting_spans)
    if staged.started:
        _assemble_staged(sink, staged, result, on_assembled)
    result.sessions = _as_stored(store, result.sessions)
    return result


def _langsmith(runs: LangSmithRuns, result: ImportResult) -> list[Trajectory]:
    """The trajectories of the LangSmith runs of every source of the import, assembled
    together (a trace's runs, and a run's post and patch, can be in different files); patches
    whose run no source posts are reported. A failure fails the LangSmith sources."""
    result.warnings.extend(runs.warnings())
    try:
        return runs.trajectories()
    except Exception as exc:  # a reader bug on odd input fails its sources, not the import
        _log.debug("internal error assembling LangSmith runs", exc_info=True)
        for report in result.sources:
            if report.ok and report.runs:
                report.error = ImportFormatError(
                    f"internal error while assembling its runs ({type(exc).__name__}: {exc}); "
                    "please report it",
                    source=report.source,
                )
        return []


def _warn_conflicting(result: ImportResult, conflicting: int) -> None:
    if conflicting:
        result.warnings.append(
            f"{conflicting} span(s) came again with other content under the same trace and "
            "span id (a producer that reuses span ids?); the first copy of each is kept"
        )


def _import_store(
    store: CheckpointStore, parsed: Parsed, report: SourceReport, result: ImportResult
) -> None:
    """Every session of another store, one at a time, saved as a backend export's are
    (stores of receivers behind a load balancer hold different traces of one conversation:
    they join here)."""
    if os.path.samefile(parsed.store.path, store.path):
        parsed.store.close()
        report.error = ImportFormatError("is the store being imported into", source=report.source)
        return
    for trajectory in _sessions(parsed, report):
        _save_trajectories(store, [trajectory], result)


def _save_trajectories(
    store: CheckpointStore, trajectories: list[Trajectory], result: ImportResult
) -> None:
    """Save the trajectories a source held whole (Langfuse, LangSmith, ATIF, ...): those of
    traces join what the store holds of them (their steps' spans are covered: a trace
    exported again replaces its stored steps), the others replace their stored session."""
    traced, untraced = [], []
    for trajectory in rehome(store, trajectories):
        (traced if trajectory.metadata.get("trace_ids") else untraced).append(trajectory)
    covered = {(s.trace_id, s.span_id) for t in traced for s in t.steps if s.span_id}
    save_merged(
        store,
        traced,
        lambda items, delete, expect: store.save_many(
            [*items, *untraced], delete=delete, expect=expect
        ),
        covered,
        replace_untraced=True,
        warnings=result.warnings,
    )
    result.sessions.extend(ImportedSession.of(t) for t in [*traced, *untraced])


@dataclass
class _Traces:
    """The traces an import read: when each began and the files of spans it came from."""

    started: dict[str, int] = field(default_factory=dict)
    files: dict[str, set[str]] = field(default_factory=dict)

    def note(self, trace_id: str, time_ns: int, source: str | None) -> None:
        if trace_id:
            self.started[trace_id] = min(time_ns, self.started.get(trace_id, time_ns))
            if source is not None:
                self.files.setdefault(trace_id, set()).add(source)

    def annotated(self, trajectory: Trajectory) -> Trajectory:
        """``trajectory`` noting (``metadata["import"]["files"]``) the files it came from, by
        absolute path: the same file named another way is the same file (imported again, it
        leaves the session unchanged)."""
        traces = trajectory.metadata.get("trace_ids", ())
        files = sorted({_absolute(f) for t in traces for f in self.files.get(t, ())})
        return replace(trajectory, metadata={**trajectory.metadata, "import": {"files": files}})


def _absolute(name: str) -> str:
    return name if name == _name(None) else os.path.abspath(name)


def _warn_unjoined(result: ImportResult, unjoined: int) -> None:
    if unjoined:
        result.warnings.append(
            f"{unjoined} log record(s) name no span of this import "
            "(import the span file and its logs file together)"
        )


def _assemble_staged(
    sink: DurableSpanSink,
    staged: _Traces,
    result: ImportResult,
    on_assembled: Callable[[int, int], None] | None,
) -> None:
    """Assemble the staged traces in the order they began (the turns of a conversation are
    then stored by continuing it), each trajectory noting the files it came from, and
    forget the staged rows."""

    stored: set[str] = set()

    def saved(trajectory: Trajectory) -> None:
        result.sessions.append(ImportedSession.of(trajectory))
        stored.update(trajectory.metadata.get("trace_ids", ()))

    traces = sorted(staged.started, key=lambda t: (staged.started[t], t))
    for start in range(0, len(traces), sink.batch_traces):
        batch = traces[start : start + sink.batch_traces]
        sink.assemble_traces(batch, annotate=staged.annotated, on_saved=saved)
        if on_assembled is not None:
            on_assembled(start + len(batch), len(traces))
    try:
        sink.store.forget_pending(traces)
    except StoreError as exc:  # everything is stored: only the clean-up is left undone
        result.warnings.append(
            f"the import is complete, but its staged spans could not be cleared from the store "
            f"({exc}); they take space until the same files are imported again"
        )
    for trace_id, why in sink.failed_traces.items():
        result.warnings.append(
            f"trace {trace_id} could not be assembled ({why}); its spans stay staged in the "
            "store: import the files again to retry"
        )
    _warn_unjoined(result, sink.orphan_logs + sink.unjoinable_logs)
    unused = [
        t for t in traces if t in staged.files and t not in stored and t not in sink.failed_traces
    ]
    if unused:
        result.warnings.append(
            f"{len(unused)} trace(s) hold no GenAI operation, agent or tool span, so no step "
            f"was stored from them (not an agent's trace?): {', '.join(unused[:3])}"
            + (", ..." if len(unused) > 3 else "")
        )
