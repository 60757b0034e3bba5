"""Side by side: the import and capture-worker figures of two source trees, in one run.

For a change meant to make importing or capturing cheaper. Each tree runs in its own process
(``PYTHONPATH=TREE/src``, with that tree's own ``benchmarks/``): the OTLP/JSON rows of
``benchmarks/ingest.py`` (``json.loads`` baseline, decode, full import and the parts timed on
their own) and the worker-thread stages of ``benchmarks/capture.py``. The trees alternate
round by round, so a machine that speeds up or slows down during the run shifts both; each
figure is the median over the rounds of each round's median. Run:

    python benchmarks/compare.py [NAME=]BEFORE_TREE [NAME=]AFTER_TREE [--rounds 8]

e.g. a checkout of main and a worktree with the change (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROWS = [
    ("json.loads of the bytes (baseline)", "baseline", None),
    ("OTLP/JSON decode to normalised spans", "decode", "decode_ratio"),
    ("OTLP/JSON import to stored-ready trajectories", "import", "import_ratio"),
    ("  of which parsing JSON text in attributes", "embedded", "embedded_ratio"),
    ("  of which sealing steps (canonical + hash)", "seal", "seal_ratio"),
]
STAGES = ("normalise", "assemble", "store")


def measure(tree: Path, traces: int, turns: int, repeats: int, samples: int) -> dict:
    """This process's figures; ``tree`` must be the one on ``PYTHONPATH``."""
    sys.path.insert(0, str(tree / "benchmarks"))
    import agent_replay
    import capture
    import ingest

    where = Path(agent_replay.__file__).resolve()
    if tree.resolve() not in where.parents:
        raise SystemExit(f"agent_replay imported from {where}, not from {tree}")
    out = ingest.bench_files(traces, turns, repeats)["json"]
    spans = capture.finished_spans(2000 if traces >= 100 else 100)
    with tempfile.TemporaryDirectory() as tmp:
        stages = [capture.time_worker(spans, Path(tmp)) for _ in range(samples)]
    for i, name in enumerate(STAGES):
        out[f"worker {name}"] = statistics.median(s[i] for s in stages) * 1e6
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs=2, metavar="[NAME=]TREE")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples", type=int, default=3, help="capture worker samples")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.traces, args.repeats, args.samples = 1, 10, 1, 1
    sizes = [str(args.traces), str(args.turns), str(args.repeats), str(args.samples)]
    if args.child:
        figures = measure(Path(args.child), *map(int, sizes))
        print(json.dumps(figures))
        return 0

    trees = {}
    for spec in args.trees:
        name, _, path = spec.rpartition("=")
        trees[name or Path(path).resolve().name] = Path(path).resolve()
    if len(trees) != 2:
        parser.error("give the two trees different names (NAME=TREE)")
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees.items())
        for name, tree in order if round_ % 2 == 0 else reversed(order):
            env = {**os.environ, "PYTHONPATH": str(tree / "src")}
            command = [sys.executable, __file__, *args.trees, "--child", str(tree)]
            command += ["--traces", sizes[0], "--turns", sizes[1]]
            command += ["--repeats", sizes[2], "--samples", sizes[3]]
            result = subprocess.run(command, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                sys.stderr.write(result.stderr)
                return 1
            runs[name].append(json.loads(result.stdout))
    med = {
        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for name, rs in runs.items()
    }
    print(
        f"{args.rounds} rounds, trees alternating; medians over rounds of: ingest.py "
        f"({args.traces} runs x {args.turns} turns, median of {args.repeats}) and capture.py "
        f"worker ({args.samples} samples)"
    )
    print(f"{'':46}" + "".join(f"{name:>22}" for name in trees))
    for label, key, ratio in ROWS:
        cells = [
            f"{m[key]:10.4f} s" + (f"{m[ratio]:9.2f}x" if ratio else " " * 10) for m in med.values()
        ]
        print((f"{label:46}" + "".join(cells)).rstrip())
    for stage in STAGES:
        cells = [f"{m[f'worker {stage}']:14.1f} us/span" for m in med.values()]
        print(f"{'worker thread, ' + stage:46}" + "".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
