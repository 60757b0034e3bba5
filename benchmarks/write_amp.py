"""The receiver's disk writes per span received, side by side for source trees, in one run.

One fixed workload, made once with the real OpenTelemetry SDK (agent runs shaped as the soak's:
``single``, 3-turn runs of 7 spans each its own conversation; ``long``, turns of 3 long
conversations, one trace of 3 spans per turn, the last 20 messages of history sent each turn),
cut into OTLP protobuf exports of 64 spans in the order the spans ended. Each tree, in its own
process (``PYTHONPATH=TREE/src``), feeds it into a new store as the receiver does, without
threads so that every run commits the same transactions: ``DurableSpanSink.add`` per export,
``assemble_ready`` every 10 exports (the assembler's half second at 20 exports a second), a
purge every 20 exports of the rows received 60 exports before, and at the end every trace
assembled, every row purged and the store closed.

Every byte the process writes is accounted for: per transaction (the store method that ran
it), the WAL frames it appended, by the b-tree each page belongs to right after its commit
(``dbstat``: table or index, overflow pages apart; ``freelist`` for pages freed and zeroed,
``page1`` for the file header), and what it wrote beyond them, the checkpoint copying pages
into the file. The totals are ``write_bytes`` and ``wchar`` of ``/proc/self/io`` (Linux),
divided by the OTLP protobuf bytes received and by the span JSON bytes stored. Run:

    python benchmarks/write_amp.py [NAME=]TREE... [--runs 3000] [--mode single|long|both]
        [--rounds 1] [--detail]

e.g. ``main=<checkout of main> new=.``; ``--detail`` prints every b-tree's share.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pickle
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from genai_turns import TEXT, chat_then_tool, question, recording_tracer

SPANS_PER_EXPORT = 64
ASSEMBLE_EVERY = 10
PURGE_EVERY = 20
PURGE_LAG = 60
OPS = {
    "add_pending",
    "commit_assembled",
    "purge_pending",
    "forget_pending",
    "save_many",
    "index_pending",
    "check_writable",
    "delete",
}


# -- the workload (parent process) ------------------------------------------------------------


def _turn(tracer, tag: str, turn: int, messages: list) -> list:
    return chat_then_tool(
        tracer,
        f"call_{tag}_{turn}",
        messages,
        answer=TEXT[: 40 + turn % 50],
        result=f"{tag} {turn} " + TEXT * 2,
        turn=turn,
    )


def make_workload(runs: int, mode: str) -> list[bytes]:
    """OTLP protobuf export bodies of ``runs`` agent runs (see the module docstring)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    tracer, memory = recording_tracer("write-amp")
    history: dict[int, list] = {}
    for n in range(runs):
        conv = f"s-{n}" if mode == "single" else f"conv-{n % 3}"
        base = question(conv)
        root = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "analyst",
            "gen_ai.conversation.id": conv,
        }
        with tracer.start_as_current_span("invoke_agent analyst", attributes=root):
            if mode == "single":
                messages = base
                for turn in range(3):
                    messages = _turn(tracer, conv, turn, messages)
            else:
                messages = _turn(tracer, conv, n // 3, history.setdefault(n % 3, base))
                history[n % 3] = messages[:2] + messages[2:][-20:]
    spans = memory.get_finished_spans()
    return [
        encode_spans(spans[i : i + SPANS_PER_EXPORT]).SerializeToString()
        for i in range(0, len(spans), SPANS_PER_EXPORT)
    ]


# -- one tree (child process) ---------------------------------------------------------------


def _io(which: str = "self") -> dict[str, int]:
    with open(f"/proc/{which}/io") as f:
        return {key: int(value) for key, value in (line.split(":") for line in f)}


def _wal_index(path: str) -> tuple[int, bytes, int]:
    """(last valid frame, salts, page size) from the -shm file's header."""
    try:
        with open(path + "-shm", "rb") as f:
            header = f.read(48)
    except FileNotFoundError:
        return 0, b"", 0
    if len(header) < 48:
        return 0, b"", 0
    return struct.unpack_from("<I", header, 16)[0], header[32:40], header[14] | header[15] << 8


def measure(tree: Path, workload: Path) -> dict:
    """This process's figures; ``tree`` must be the one on ``PYTHONPATH``."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    import agent_replay
    from agent_replay.ingest.otlp import decode_proto_traces
    from agent_replay.store import sqlite as sq
    from agent_replay.store.sink import DurableSpanSink

    where = Path(agent_replay.__file__).resolve()
    if tree.resolve() not in where.parents:
        raise SystemExit(f"agent_replay imported from {where}, not from {tree}")
    bodies = pickle.loads(workload.read_bytes())
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "store.sqlite")
    written: collections.Counter[tuple[str, str]] = collections.Counter()
    lock = threading.RLock()
    reader: list[sqlite3.Connection] = []
    transaction = sq.CheckpointStore._transaction

    @contextlib.contextmanager
    def accounted(self):
        frame, op = sys._getframe(1), "?"
        while frame is not None and op == "?":
            op = frame.f_code.co_name if frame.f_code.co_name in OPS else "?"
            frame = frame.f_back
        with lock:
            before, (last, salt, _) = _io("thread-self")["wchar"], _wal_index(path)
            with transaction(self) as conn:
                yield conn
            after, (end, new_salt, size) = _io("thread-self")["wchar"], _wal_index(path)
            if not reader:
                reader.append(sqlite3.connect(path))
            owners = {
                page: (name, kind)
                for page, name, kind in reader[0].execute(
                    "SELECT pageno, name, pagetype FROM dbstat"
                )
            }
            first = 1 if new_salt != salt else last + 1
            with open(path + "-wal", "rb") as wal:
                for n in range(first, end + 1):
                    wal.seek(32 + (n - 1) * (size + 24))
                    (page,) = struct.unpack(">I", wal.read(4))
                    if page == 1:
                        what = "page1"
                    elif page in owners:
                        name, kind = owners[page]
                        what = f"{name}{' (overflow)' if kind == 'overflow' else ''}"
                    else:
                        what = "freelist"
                    written[(op, what)] += size + 24
            frames = (end - first + 1) * (size + 24) + (32 if first == 1 else 0)
            written[("checkpoint", "file")] += after - before - frames

    sq.CheckpointStore._transaction = accounted
    span_bytes = [0]
    add_pending = sq.CheckpointStore.add_pending

    def counted(self, spans, logs):
        span_bytes[0] += sum(len(row[2]) for row in spans)
        return add_pending(self, spans, logs)

    sq.CheckpointStore.add_pending = counted
    start_io, start = _io(), time.perf_counter()
    store = sq.CheckpointStore(path)
    sink = DurableSpanSink(store, idle_seconds=3600, retain_seconds=3600)
    stamps, spans, proto = [], 0, 0
    for n, body in enumerate(bodies):
        proto += len(body)
        decoded = decode_proto_traces(ExportTraceServiceRequest.FromString(body))
        spans += len(decoded.spans)
        stamps.append(time.time_ns())
        sink.add(decoded.spans, decoded.logs)
        if (n + 1) % ASSEMBLE_EVERY == 0:
            sink.assemble_ready()
        if (n + 1) % PURGE_EVERY == 0 and n >= PURGE_LAG:
            store.purge_pending(older_than_ns=time.time_ns() - stamps[n - PURGE_LAG])
    sink.assemble_ready(force=True)
    store.purge_pending(older_than_ns=-(10**12))
    left = store.pending_counts()
    for conn in reader:
        conn.close()
    before_close = _io()["wchar"]
    store.close()
    written[("checkpoint", "file")] += _io()["wchar"] - before_close
    end_io, seconds = _io(), time.perf_counter() - start
    size = os.path.getsize(path)
    shutil.rmtree(tmp)
    return {
        "spans": spans,
        "proto_bytes": proto,
        "span_json_bytes": span_bytes[0],
        "write_bytes": end_io["write_bytes"] - start_io["write_bytes"],
        "wchar": end_io["wchar"] - start_io["wchar"],
        "file_bytes": size,
        "seconds": seconds,
        "left_pending": sum(left.values()),
        "written": {f"{op}|{what}": n for (op, what), n in written.items()},
    }


# -- the table (parent process) ---------------------------------------------------------------

PARTS = [
    ("commit spans (add_pending)", lambda op, what: op == "add_pending"),
    ("  of which the span rows", lambda op, what: op == "add_pending" and _pending(what)),
    ("  of which their indexes", lambda op, what: op == "add_pending" and _index(what)),
    (
        "mark assembled (state UPDATE)",
        lambda op, what: op == "commit_assembled" and (_pending(what) or _index(what)),
    ),
    (
        "trajectories (blobs, steps, ...)",
        lambda op, what: op == "commit_assembled" and not (_pending(what) or _index(what)),
    ),
    ("purge (DELETE)", lambda op, what: op == "purge_pending"),
    (
        "  of which freed pages zeroed",
        lambda op, what: op == "purge_pending" and what == "freelist",
    ),
    ("checkpoints (WAL to file)", lambda op, what: op == "checkpoint"),
]


def _pending(what: str) -> bool:
    return what.split(" ")[0] in ("pending_spans", "pending_logs")


def _index(what: str) -> bool:
    name = what.split(" ")[0]
    return name.startswith(("pending_", "sqlite_autoindex_pending_")) and not _pending(what)


def table(results: dict[str, list[dict]], detail: bool) -> str:
    mib = 1 << 20
    names = list(results)
    first = results[names[0]][0]
    lines = [
        f"{first['spans']} spans, {first['proto_bytes'] / mib:.1f} MiB of OTLP protobuf, "
        f"{first['span_json_bytes'] / mib:.1f} MiB of span JSON stored; MiB written to disk "
        "(median of the rounds)",
        f"{'':44s}" + "".join(f"{name:>16s}" for name in names),
    ]

    def row(label: str, values: list[float], fmt: str) -> None:
        lines.append(f"{label:44s}" + "".join(f"{v:>16{fmt}}" for v in values))

    def median(name: str, key) -> float:
        values = sorted(key(r) for r in results[name])
        return values[len(values) // 2]

    row(
        "write_bytes (/proc/self/io)",
        [median(n, lambda r: r["write_bytes"] / mib) for n in names],
        ".1f",
    )
    row(
        "  per byte of OTLP protobuf",
        [median(n, lambda r: r["write_bytes"] / r["proto_bytes"]) for n in names],
        ".1f",
    )
    row(
        "  per byte of span JSON",
        [median(n, lambda r: r["write_bytes"] / r["span_json_bytes"]) for n in names],
        ".1f",
    )
    row(
        "wchar (bytes passed to write)",
        [median(n, lambda r: r["wchar"] / mib) for n in names],
        ".1f",
    )
    for label, test in PARTS:
        row(
            label,
            [
                median(
                    n,
                    lambda r, test=test: (
                        sum(v for k, v in r["written"].items() if test(*k.split("|"))) / mib
                    ),
                )
                for n in names
            ],
            ".1f",
        )
    row("store file at the end", [median(n, lambda r: r["file_bytes"] / mib) for n in names], ".1f")
    row("seconds (accounting included)", [median(n, lambda r: r["seconds"]) for n in names], ".1f")
    if detail:
        keys = sorted({k for rs in results.values() for r in rs for k in r["written"]})
        for key in keys:
            row(
                f"  {key}"[:44],
                [median(n, lambda r, key=key: r["written"].get(key, 0) / mib) for n in names],
                ".1f",
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="*", metavar="[NAME=]TREE")
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--mode", choices=["single", "long", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--detail", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("TREE", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(Path(args.child[0]), Path(args.child[1]))))
        return 0
    trees = {}
    for item in args.trees or ["."]:
        name, _, tree = item.rpartition("=")
        trees[name or tree] = Path(tree)
    modes = ["single", "long"] if args.mode == "both" else [args.mode]
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            # the long conversations' runs are turns: as many spans as in single runs
            runs = args.runs if mode == "single" else args.runs * 7 // 3
            workload = Path(tmp) / f"{mode}.pkl"
            workload.write_bytes(pickle.dumps(make_workload(runs, mode)))
            results: dict[str, list[dict]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", str(tree), str(workload)],
                        env=env,
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout
                    results[name].append(json.loads(out))
            print(f"== {mode}: {runs} runs")
            print(table(results, args.detail))
    return 0


if __name__ == "__main__":
    sys.exit(main())
