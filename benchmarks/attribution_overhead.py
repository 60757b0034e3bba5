"""Where an attribution's time goes, and how rollouts scale with concurrency.

1. Analysis overhead: on a trivial 10-step agent, the share of ``attribute``'s wall time spent
   outside rollouts (the estimator: search, intervals, bookkeeping). Target: <= 10%.
2. Concurrency: 1,000 rollouts of an async 10-step agent whose every live step waits 20 ms,
   at concurrency 64, against the ideal (1000 x 10 x 20 ms / 64). Target: <= 1.25x.
3. Search wall time: one attribution of such an agent (with a culprit), against its critical
   path - every batch of rollouts the search asks for, as long as its longest rollout. Probes
   run in batches as wide as the executor, so the search's own sequence is what remains.

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


async def faulty_slow_agent(ctx, n=STEPS, culprit=6):
    out = []
    for i in range(n):

        async def step(i=i):
            await asyncio.sleep(0.02)  # a live LLM or tool call
            if i == culprit:
                return "bad" if ctx.rng.random() < 0.5 else "ok"
            return f"v{ctx.rng.randint(0, 9)}"

        out.append(await ctx.llm(f"s{i}", produce=step))
    return out


class BatchLog(AsyncExecutor):
    """Records, per batch of rollouts, the live steps of its longest rollout."""

    def __init__(self, concurrency: int) -> None:
        super().__init__(concurrency)
        self.longest: list[int] = []

    def map(self, fn, items):
        results = super().map(fn, items)
        self.longest.append(max((r.live_steps for r in results), default=0))
        return results


def search_wall(limit: int = 64) -> None:
    """One attribution of an async agent whose live steps wait 20 ms: its wall time against
    its critical path (each batch of rollouts as long as its longest rollout)."""
    traj = next(
        t for s in range(50) if (t := record(faulty_slow_agent, seed=s, verifier=ok)).outcome.failed
    )
    executor = BatchLog(limit)
    started = time.perf_counter()
    result = attribute(traj, faulty_slow_agent, ok, executor=executor)
    wall = time.perf_counter() - started
    path = sum(executor.longest) * 0.02
    print(
        f"search wall time, async {STEPS}-step agent, 20 ms per live step, {limit} concurrent: "
        f"{wall:.2f} s for {result.cost['rollouts']} rollouts in {len(executor.longest)} "
        f"batches; critical path {path:.2f} s -> {wall / path:.2f}x "
        f"(culprit {result.culprit_index})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few runs: checks it runs")
    args = parser.parse_args()
    overhead(repeats=1 if args.quick else 7)
    concurrency(count=64 if args.quick else 1000)
    search_wall()
