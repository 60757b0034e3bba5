"""Coverage of the exact Shapley intervals, checked by simulation (ATTRIBUTION.md: "use
intervals whose coverage you have checked by simulation").

A three-agent run with known Shapley values: the planner's ``decide`` step picks the bad
answer with probability 0.5, the reviewer's ``review`` step catches it with probability 0.2,
the other two steps (``plan``, the worker's ``lookup``) do not matter. For the failure
probability, the step values are 0, 0.45, 0, 0.15 and the agent values 0.45 (planner), 0
(worker), 0.15 (reviewer). Every recording is a different failing run (``lookup`` returns a
fresh float, so the rollouts' random streams differ); the script counts how often each
nominal-95% interval misses the true value.

    python benchmarks/shapley_coverage.py [--recordings 1000] [--start 0]
"""

from __future__ import annotations

import argparse
from collections import Counter

from agent_replay import RolloutEngine, record
from agent_replay.attribution.shapley import agent_shapley_values, step_shapley_values

STEP_VALUES = {0: 0.0, 1: 0.45, 2: 0.0, 3: 0.15}
AGENT_VALUES = {"planner": 0.45, "worker": 0.0, "reviewer": 0.15}


def agent(ctx, task):
    with ctx.agent("planner"):
        ctx.llm("plan", produce=lambda: "p", task=task)
        decision = ctx.llm("decide", produce=lambda: "bad" if ctx.rng.random() < 0.5 else "good")
    with ctx.agent("worker"):
        ctx.tool("lookup", produce=lambda: ctx.rng.random(), decision=decision)
    with ctx.agent("reviewer"):
        caught = ctx.llm("review", produce=lambda: ctx.rng.random() < 0.2, decision=decision)
    return "good" if decision == "good" or caught else "bad"


def verifier(answer):
    return 0.0 if answer == "bad" else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0, help="first recording seed")
    args = parser.parse_args()
    step_miss: Counter[int] = Counter()
    agent_miss: Counter[str] = Counter()
    seed, done = args.start, 0
    while done < args.recordings:
        run = record(agent, {"task": "x"}, seed=seed, verifier=verifier)
        seed += 1
        if not run.outcome.failed:
            continue
        done += 1
        engine = RolloutEngine(run, agent, verifier)
        steps = step_shapley_values(
            engine, run, frozenset(), permutations=64, rollouts=16, confidence=0.95, credit=False
        )
        agents = agent_shapley_values(engine, run, rollouts=16, confidence=0.95, credit=False)
        for i, interval in enumerate(steps.intervals):
            step_miss[i] += not interval.low <= STEP_VALUES[i] <= interval.high
        for name, interval in zip(agents.players, agents.intervals, strict=True):
            agent_miss[name] += not interval.low <= AGENT_VALUES[name] <= interval.high
    print(f"{done} failing recordings, 16 rollouts per coalition, nominal 95% intervals")
    for label, misses in (("step", step_miss), ("agent", agent_miss)):
        for key in sorted(misses, key=str):
            coverage = 1 - misses[key] / done
            print(f"  {label} {key!s:<10} missed {misses[key]:>4}  coverage {coverage:.1%}")
        pooled = 1 - sum(misses.values()) / (done * len(misses))
        print(f"  {label} pooled coverage {pooled:.1%}")


if __name__ == "__main__":
    main()
