"""Where an attribution's time goes, and how rollouts scale with concurrency.

1. Analysis overhead: on a trivial 10-step agent, the share of ``attribute``'s wall time spent
   outside rollouts (the estimator: search, intervals, bookkeeping). Target: <= 10%.
2. Concurrency: 1,000 rollouts of an async 10-step agent whose every live step waits 20 ms,
   at concurrency 64, against the ideal (1000 x 10 x 20 ms / 64). Target: <= 1.25x.

    python benchmarks/attribution_overhead.py    [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from agent_replay import ReplayPlan, RolloutEngine, attribute, record
from agent_replay.rollouts import AsyncExecutor

STEPS = 10


def trivial_agent(ctx, n=STEPS, culprit=6):
    out = []
    for i in range(n):
        if i == culprit:
            out.append(ctx.llm(f"s{i}", produce=lambda: "bad" if ctx.rng.random() < 0.5 else "ok"))
        else:
            out.append(ctx.llm(f"s{i}", produce=lambda: f"note{ctx.rng.randint(0, 9)}"))
    return out


def ok(result):
    return 0.0 if "bad" in result else 1.0


async def slow_agent(ctx, n=STEPS):
    out = []
    for i in range(n):

        async def step(i=i):
            await asyncio.sleep(0.02)  # a live LLM or tool call
            return f"v{ctx.rng.randint(0, 9)}"

        out.append(await ctx.llm(f"s{i}", produce=step))
    return out


def overhead(repeats: int = 7) -> None:
    traj = next(
        t for s in range(50) if (t := record(trivial_agent, seed=s, verifier=ok)).outcome.failed
    )
    shares, totals, rollouts = [], [], []
    for _ in range(repeats):
        started = time.perf_counter()
        result = attribute(traj, trivial_agent, ok)
        total = time.perf_counter() - started
        inside = result.cost["rollout_seconds"]
        shares.append((total - inside) / total)
        totals.append(total)
        rollouts.append(result.cost["rollouts"])
    print(
        f"analysis overhead, trivial {STEPS}-step agent ({repeats} runs, medians): "
        f"{statistics.median(totals) * 1e3:.1f} ms per attribution, "
        f"{statistics.median(rollouts):.0f} rollouts, outside rollouts "
        f"{statistics.median(shares):.1%} of the time (target <= 10%)"
    )


def concurrency(count: int = 1000, limit: int = 64) -> None:
    traj = record(slow_agent, seed=1, verifier=lambda r: 1.0)
    engine = RolloutEngine(
        traj,
        slow_agent,
        lambda r: 1.0,
        executor=AsyncExecutor(limit),
        coupling=False,
        keep_records=False,
    )
    started = time.perf_counter()
    results = engine.run(ReplayPlan.ablate_from(0), range(count))
    wall = time.perf_counter() - started
    live = sum(r.live_steps for r in results)
    ideal = live * 0.02 / limit
    print(
        f"concurrency: {count} rollouts x {STEPS} live steps x 20 ms at {limit} concurrent: "
        f"{wall:.2f} s wall vs {ideal:.2f} s ideal -> {wall / ideal:.2f}x (target <= 1.25x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few runs: checks it runs")
    args = parser.parse_args()
    overhead(repeats=1 if args.quick else 7)
    concurrency(count=64 if args.quick else 1000)
