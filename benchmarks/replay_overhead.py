"""Framework overhead of one rollout on a trivial 10-step agent, side by side with the bare agent.

The same agent function runs (a) bare, with a pass-through context whose steps just call their
policy and whose rng is one ``random.Random``, and (b) under ``replay`` with a prefix plan
(steps >= 5 re-drawn, the rest served from the recording) and (c) with everything re-drawn.
Each variant is timed over many rollouts, interleaved and repeated; medians are printed with
the ratio to the bare agent.

    python benchmarks/replay_overhead.py    [--quick]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from agent_replay import ReplayPlan, record, replay

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


def timed(fn, rounds: int) -> float:
    start = time.perf_counter()
    for r in range(rounds):
        fn(r)
    return (time.perf_counter() - start) / rounds


def main(rounds: int = 2000, repeats: int = 7) -> None:
    traj = record(agent, {"n": STEPS}, seed=1)
    traj.verify()
    prefix = ReplayPlan.ablate_from(STEPS // 2)
    everything = ReplayPlan.ablate_from(0)
    variants = {
        "bare agent": lambda r: agent(BareContext(r), STEPS),
        "replay, factual (all served)": lambda r: replay(agent, traj, seed=r, verify=False),
        "replay, half re-drawn": lambda r: replay(agent, traj, prefix, seed=r, verify=False),
        "replay, all re-drawn": lambda r: replay(agent, traj, everything, seed=r, verify=False),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():  # interleaved: noise hits every variant alike
            samples[name].append(timed(fn, rounds))
    bare = statistics.median(samples["bare agent"])
    print(f"trivial {STEPS}-step agent, {rounds} rollouts x {repeats} repeats (medians)")
    for name, values in samples.items():
        per_rollout = statistics.median(values)
        print(
            f"  {name:<30} {per_rollout * 1e6:9.1f} us/rollout  "
            f"{per_rollout / STEPS * 1e6:7.2f} us/step  ratio {per_rollout / bare:5.2f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds: checks it runs")
    args = parser.parse_args()
    main(*((100, 2) if args.quick else ()))
