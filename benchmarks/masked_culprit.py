"""A culprit hidden behind a protective step: how often attribution names it.

The agent has ten steps; the run fails when step 4 or step 5 goes bad, or steps 2 and 8 both
do (chances 0.8, 0.1, 0.1, 0.5 of going bad). Runs are kept where steps 2, 5 and 8 went bad
and step 4 did not: step 5 decides the failure (true effect about 0.45), step 4 protected the
run (about -0.36) and step 2 matters little (about 0.08). Steps 4 and 5 sit in one segment
whose total is small, which is where a bisecting search can lose the culprit. Printed: for
each setting, how many runs name step 5, name another step, or name none, and the verdicts.

    python benchmarks/masked_culprit.py [--runs 100] [--budget 8000]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from agent_replay import attribute, record

CHANCES = {2: 0.1, 4: 0.8, 5: 0.1, 8: 0.5}
PATTERN = {2: "bad", 4: "ok", 5: "bad", 8: "bad"}


def agent(ctx):
    outs = []
    for i in range(10):
        q = CHANCES.get(i)
        if q is None:
            outs.append(ctx.llm(f"s{i}", produce=lambda: f"note-{ctx.rng.randint(0, 9)}"))
        else:
            outs.append(
                ctx.llm(f"s{i}", produce=lambda q=q: "bad" if ctx.rng.random() < q else "ok")
            )
    return outs


def verifier(o):
    return 0.0 if o[4] == "bad" or o[5] == "bad" or (o[2] == "bad" and o[8] == "bad") else 1.0


def masked_runs(n: int):
    """The first ``n`` recordings (seeds 0, 1, ...) with the masking pattern."""
    seed = 0
    while n:
        traj = record(agent, seed=seed, verifier=verifier)
        seed += 1
        if all(traj.steps[i].output == v for i, v in PATTERN.items()):
            n -= 1
            yield traj


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--budget", type=int, default=8000)
    args = parser.parse_args()
    runs = list(masked_runs(args.runs))
    for label, options in (("default", {}), (f"budget={args.budget}", {"budget": args.budget})):
        started = time.perf_counter()
        named, verdicts, live = Counter(), Counter(), 0
        for traj in runs:
            result = attribute(traj, agent, verifier, **options)
            culprit = result.culprit_index
            named["step 5" if culprit == 5 else "none" if culprit is None else "another step"] += 1
            verdicts[result.verdict] += 1
            live += result.cost["live_steps"]
        print(
            f"{label:<14} {len(runs)} runs: names step 5 in {named['step 5']}, another step in "
            f"{named['another step']}, none in {named['none']}; verdicts {dict(verdicts)}; "
            f"{live / len(runs):.0f} live steps per run; {time.perf_counter() - started:.1f}s"
        )


if __name__ == "__main__":
    main()
