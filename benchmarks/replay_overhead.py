"""Framework overhead of one rollout on a trivial 10-step agent, side by side with the bare agent,
for this package and for the published one (trajectory-causal-attribution 1.0.0).

The same agent function runs (a) bare, with a pass-through context whose steps just call their
policy and whose rng is one ``random.Random``, and (b) under ``replay`` with every step served
from the recording (factual), (c) with a prefix plan (steps >= 5 re-drawn, the rest served)
and (d) with everything re-drawn. A reference row times the floor of any re-drawing replay in
Python (:class:`FloorContext`: position, keyed stream, timing, a record). Each variant is timed
over many rollouts, interleaved and repeated; medians are printed with the ratio to the bare
agent measured in the same process.
The published package's rows come from this same script run under its interpreter
(``--as-published``, in the virtual environment ``attribution_suite.py`` also uses).

    python benchmarks/replay_overhead.py    [--quick] [--no-seed] [--seed-venv DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import time
from contextvars import ContextVar
from pathlib import Path

from agent_replay import ReplayPlan, record, replay

with contextlib.suppress(ImportError):  # the floor row's streams (not in the published package)
    from agent_replay.capture.seeds import KeyedRandom, derive_seed, stream_seed

HERE = Path(__file__).resolve().parent
STEPS = 10


def agent(ctx, n=STEPS):
    total = 0.0
    for i in range(n):
        total = ctx.llm(f"step{i}", produce=lambda t=total: t + ctx.rng.random(), prev=i)
    return total


class BareContext:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def llm(self, name, produce=None, **inputs):
        return produce()


_STREAM: ContextVar = ContextVar("floor_stream")


class FloorContext:
    """The least any re-drawing replay must do per step, and nothing else: take a position,
    open the step's keyed stream (this package's own stream class) in a context variable so
    ``ctx.rng`` draws from it, time the call and keep a record of it. No binding, no plan, no
    checks: a floor for the "all re-drawn" row, not an alternative implementation."""

    def __init__(self, seed: int) -> None:
        self.base = derive_seed(seed, "step")
        self.position = 0
        self.records: list = []
        self.rng = self

    def random(self) -> float:
        return _STREAM.get().random()

    def llm(self, name, produce=None, **inputs):
        position = self.position
        self.position = position + 1
        token = _STREAM.set(KeyedRandom(stream_seed(self.base, position)))
        started = time.time_ns()
        try:
            output = produce()
        finally:
            _STREAM.reset(token)
        self.records.append((name, inputs, output, started, time.time_ns()))
        return output


def variants(published: bool) -> dict:
    """The four variants, through whichever ``agent_replay`` is importable here."""
    if published:  # its API: session_id required, plans sized, plan positional
        traj = record(agent, {"n": STEPS}, seed=1, session_id="bench")
        plans = [ReplayPlan.factual(STEPS), *(ReplayPlan.ablate_from(i, STEPS) for i in (5, 0))]
        options: dict = {}
    else:
        traj = record(agent, {"n": STEPS}, seed=1)
        traj.verify()
        plans = [ReplayPlan.factual(), ReplayPlan.ablate_from(5), ReplayPlan.ablate_from(0)]
        options = {"verify": False}  # the chain is verified once above, as attribution does
    factual, half, everything = plans
    floor = {} if published else {"floor of any keyed re-draw": lambda r: agent(FloorContext(r))}
    return {
        "bare agent": lambda r: agent(BareContext(r), STEPS),
        **floor,
        "replay, factual (all served)": lambda r: replay(agent, traj, factual, seed=r, **options),
        "replay, half re-drawn": lambda r: replay(agent, traj, half, seed=r, **options),
        "replay, all re-drawn": lambda r: replay(agent, traj, everything, seed=r, **options),
    }


def timed(fn, rounds: int) -> float:
    start = time.perf_counter()
    for r in range(rounds):
        fn(r)
    return (time.perf_counter() - start) / rounds


def measure(published: bool, rounds: int, repeats: int) -> dict[str, float]:
    """Median seconds per rollout of each variant."""
    runs = variants(published)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():  # interleaved: noise hits every variant alike
            samples[name].append(timed(fn, rounds))
    return {name: statistics.median(values) for name, values in samples.items()}


def show(title: str, medians: dict[str, float]) -> None:
    bare = medians["bare agent"]
    print(title)
    for name, per_rollout in medians.items():
        print(
            f"  {name:<32} {per_rollout * 1e6:9.1f} us/rollout  "
            f"{per_rollout / STEPS * 1e6:7.2f} us/step  ratio {per_rollout / bare:5.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds: checks it runs")
    parser.add_argument("--no-seed", action="store_true", help="skip the published package")
    parser.add_argument("--seed-venv", type=Path, default=None)
    parser.add_argument("--as-published", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rounds, repeats = (100, 2) if args.quick else (2000, 7)
    if args.as_published:  # running under the published package: medians as JSON
        print(json.dumps(measure(True, rounds, repeats)))
        return
    mine = measure(False, rounds, repeats)
    show(f"trivial {STEPS}-step agent, {rounds} rollouts x {repeats} repeats (medians)", mine)
    if not args.no_seed:
        sys.path.insert(0, str(HERE))
        from published import DEFAULT_VENV, run_published

        where = args.seed_venv or DEFAULT_VENV
        extra = ["--quick"] if args.quick else []
        out = run_published(where, Path(__file__), "--as-published", *extra)
        show("the published package, same agent and variants", json.loads(out))


if __name__ == "__main__":
    main()
