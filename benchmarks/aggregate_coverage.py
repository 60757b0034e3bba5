"""Coverage of aggregate_runs' effect interval when runs repeat one another.

An agent reads a number (a tool step whose value does not matter), then picks, and fails when
the pick is "bad" (probability P): in every failing run the pick's step effect is exactly
1 - P. Each trial pools ``--distinct`` failing runs, each recorded ``--copies`` times (a
deterministic agent failing the same way again), with ``aggregate_runs`` under the trial's
seed, and checks whether the effect interval over runs covers 1 - P. Side by side, the same
runs attributed on shared streams (every run under the trial's seed, as aggregate_runs did
before repeats got seeds of their own: copies drew the same values and counted as
independent runs) and pooled the same way.

    python benchmarks/aggregate_coverage.py [--trials 40] [--distinct 5] [--copies 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from agent_replay import aggregate_runs, attribute, record
from agent_replay.attribution.aggregate import mean_interval

P = 0.3


def agent(ctx):
    ctx.tool("read", produce=lambda: ctx.rng.randrange(10**6))
    return ctx.llm("pick", produce=lambda: "bad" if ctx.rng.random() < P else "good")


def verifier(result):
    return 0.0 if result == "bad" else 1.0


def shared_interval(runs, seed, rollouts):
    """The runs attributed on one set of streams, pooled as aggregate_runs pools them."""
    steps = [
        attribute(r, agent, verifier, rollouts=rollouts, adaptive=False, seed=seed).steps[1]
        for r in runs
    ]
    interval = mean_interval([s.effect for s in steps], 0.95)
    if interval.high - interval.low < 1e-12:  # no spread: the mean of the runs' intervals
        return (
            statistics.fmean(s.interval.low for s in steps),
            statistics.fmean(s.interval.high for s in steps),
        )
    return interval.low, interval.high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--distinct", type=int, default=5)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="3 trials of 2 runs x 2 copies")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.distinct = 3, 2
    failing = (t for s in range(10**4) if (t := record(agent, seed=s, verifier=verifier)).failed)
    originals = [next(failing) for _ in range(args.distinct)]
    runs = [
        dataclasses.replace(run, session_id=f"{run.session_id}-copy-{i}")
        for run in originals
        for i in range(args.copies)
    ]
    truth = 1 - P
    tally: dict[str, list[tuple[float, float]]] = {
        "own seeds (aggregate_runs)": [],
        "shared streams": [],
    }
    for trial in range(args.trials):
        pooled = aggregate_runs(
            runs, agent, verifier, rollouts=args.rollouts, adaptive=False, seed=trial + 1
        )
        interval = next(s for s in pooled.steps if s.label == "llm:pick").effect_interval
        tally["own seeds (aggregate_runs)"].append((interval.low, interval.high))
        tally["shared streams"].append(shared_interval(runs, trial + 1, args.rollouts))
    print(
        f"{args.distinct} failing runs x {args.copies} copies, true effect {truth:.2f}, "
        f"{args.rollouts} rollouts per position, {args.trials} trials, 95% intervals"
    )
    for name, intervals in tally.items():
        covered = sum(low <= truth <= high for low, high in intervals)
        width = statistics.fmean(high - low for low, high in intervals)
        print(f"  {name:<28} covered {covered}/{len(intervals)}  mean width {width:.3f}")


if __name__ == "__main__":
    main()
