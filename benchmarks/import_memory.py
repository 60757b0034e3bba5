"""Peak memory and time of importing many OTLP/JSON files, side by side in one run.

The same files (``--files`` Collector-style JSON Lines files of ``--traces`` agent runs each,
made with the real OpenTelemetry SDK as ``ingest.py`` makes them) are imported by:

* ``import_into`` (what ``agent-replay import`` does): each file's spans are staged in the
  store's pending tables as it is read (a large JSON Lines file block by block), then
  assembled trace by trace;
* ``load_many`` + ``save_many``: every file read and assembled in memory, then stored (how
  ``agent-replay import`` worked before staging).

``--compress gzip`` or ``zstd`` compresses each file whole; ``--compress collector-zstd``
writes what the Collector's file exporter writes with ``compression: zstd``: every message a
zstd frame after its 4-byte length.

Each runs in a fresh process, so its peak resident memory (``VmHWM`` of ``/proc/self/status``:
Linux's ``ru_maxrss`` of a child started from a large parent reports the parent's size) is its
own.

    python benchmarks/import_memory.py [--files 8] [--traces 500] [--single] [--proto]
        [--compress gzip|zstd|collector-zstd]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def write_files(
    directory: Path,
    files: int,
    traces: int,
    single: bool = False,
    proto: bool = False,
    compress: str | None = None,
) -> list[Path]:
    """Collector file-exporter files: JSON Lines, or length-prefixed protobuf (``proto``),
    compressed as ``compress`` says (see the module docs)."""
    sys.path.insert(0, str(HERE))
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from agent_replay.ingest.compression import zstd
    from ingest import batches, record_runs, to_json_line

    def encoded(batch) -> bytes:
        if proto:
            message = encode_spans(batch).SerializeToString()
        else:
            message = to_json_line(encode_spans(batch)).encode()
        if compress == "collector-zstd":
            message = zstd().compress(message)
        elif not proto:
            return message + b"\n"
        return len(message).to_bytes(4, "big") + message

    suffix = {None: ".binpb" if proto else ".jsonl", "gzip": ".gz"}.get(compress, ".zst")
    spans = record_runs(files * traces, 4)
    per_file = len(spans) // files
    paths = []
    for n in range(files):
        path = directory / f"traces-{n:03d}{suffix}"
        part = spans[n * per_file : (n + 1) * per_file if n < files - 1 else len(spans)]
        path.write_bytes(b"".join(encoded(b) for b in batches(part, 512)))
        paths.append(path)
    if single:  # one file holding them all, as a Collector without rotation writes it
        whole = directory / f"traces{suffix}"
        with whole.open("wb") as out:
            for path in paths:
                out.write(path.read_bytes())
                path.unlink()
        paths = [whole]
    if compress in ("gzip", "zstd"):
        import gzip

        squeeze = gzip.compress if compress == "gzip" else zstd().compress
        for path in paths:
            path.write_bytes(squeeze(path.read_bytes()))
    return paths


def peak_kib() -> int:
    """This process's peak resident memory so far, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def run(way: str, db: Path, paths: list[Path]) -> dict:
    """In this process: import ``paths`` into ``db`` one ``way``; time and peak memory."""
    from agent_replay import CheckpointStore
    from agent_replay.ingest import import_into, load_many

    start = time.perf_counter()
    with CheckpointStore(db) as store:
        if way == "staged":
            sessions = len(import_into(store, paths).sessions)
        else:
            trajectories = load_many(paths).trajectories
            store.save_many(trajectories)
            sessions = len(trajectories)
        stored = len(store.session_ids())
    return {
        "seconds": time.perf_counter() - start,
        "peak_mib": peak_kib() / 1024,
        "sessions": sessions,
        "stored": stored,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--traces", type=int, default=500, help="agent runs per file")
    parser.add_argument("--single", action="store_true", help="all the runs in one file")
    parser.add_argument("--proto", action="store_true", help="protobuf files, not OTLP/JSON")
    parser.add_argument("--compress", choices=["gzip", "zstd", "collector-zstd"])
    parser.add_argument("--run", nargs=2, help=argparse.SUPPRESS)  # way, db: the child
    parser.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        print(json.dumps(run(args.run[0], Path(args.run[1]), args.paths)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = write_files(
            directory, args.files, args.traces, args.single, args.proto, args.compress
        )
        size = sum(p.stat().st_size for p in paths) / 2**20
        print(
            f"{len(paths)} {'OTLP protobuf' if args.proto else 'OTLP/JSON'} file(s)"
            f"{', ' + args.compress if args.compress else ''}, "
            f"{args.files * args.traces // len(paths)} agent runs "
            f"each, {size:.1f} MiB in all; each way in a fresh process"
        )
        print(f"{'':28}{'seconds':>9}{'peak MiB':>10}{'stored':>8}")
        for way, label in (("staged", "import_into (staged)"), ("memory", "load_many + save_many")):
            out = subprocess.run(
                [sys.executable, __file__, "--run", way, str(directory / f"{way}.sqlite")]
                + [str(p) for p in paths],
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(out.stdout)
            print(
                f"{label:<28}{result['seconds']:9.2f}{result['peak_mib']:10.0f}"
                f"{result['stored']:8d}"
            )


if __name__ == "__main__":
    main()
