"""The attribution benchmark: accuracy and cost per failure family, side by side with the
published package (trajectory-causal-attribution 1.0.0) in one command.

    python benchmarks/attribution_suite.py                 # everything (needs PyPI once)
    python benchmarks/attribution_suite.py --no-seed       # agent-replay only
    python benchmarks/attribution_suite.py --families AFG --instances 5

Rows per family (20 seeded instances each by default; ground truth = the step whose action
introduced the error, known by construction in ``families.py``):

* ``agent-replay, budget``: this package with ``budget`` set to a fraction of the live step
  executions the published package spent at R = 50 on the same instance (measured; without
  the published package, its nominal R * n(n+1)/2): 1/3 on every family, 0.1 on the
  long-run family G. This is the cost-matched comparison.
* ``agent-replay, default``: this package with default settings (stops when the culprit is
  separated at 95% confidence, or at 200 rollouts per position).
* ``published, R=50``: the published package, ``attribute(..., rollouts=50)``.

Accuracy counts a culprit equal to the ground truth (an undecided verdict is wrong). Cost
is live step executions per case, counted by the families' own policy wrappers, so both
packages are measured the same way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import families  # noqa: E402
from published import DEFAULT_VENV, run_published  # noqa: E402

BUDGET_FRACTION = {"G": 0.1}
DEFAULT_FRACTION = 1 / 3


def seed_cost(n: int, rollouts: int = 50) -> int:
    return rollouts * n * (n + 1) // 2


def run_ours(names: str, instances: int, budgets: dict | None) -> list[dict]:
    """Rows of this package; ``budgets`` maps (family, index) to the published package's
    spend on that instance (missing: its nominal cost), ``None`` runs with default settings."""
    from agent_replay import record
    from agent_replay.attribution import attribute

    rows = []
    for name in names:
        for index in range(instances):
            instance = families.FAMILIES[name](index)
            found = families.find_failing_recording(instance, record)
            if found is None:
                continue
            trajectory, truth = found
            n = len(trajectory.steps)
            budget = None
            if budgets is not None:
                spent = budgets.get((name, index), seed_cost(n))
                budget = spent * BUDGET_FRACTION.get(name, DEFAULT_FRACTION)
            families.LIVE[0] = 0
            started = time.perf_counter()
            result = attribute(trajectory, instance.agent, instance.verifier, budget=budget)
            rows.append(
                {
                    "family": name,
                    "index": index,
                    "truth": truth,
                    "culprit": result.culprit_index,
                    "verdict": result.verdict,
                    "live_steps": families.LIVE[0],
                    "n_steps": n,
                    "seconds": time.perf_counter() - started,
                }
            )
    return rows


def run_seed(names: str, instances: int, where: Path) -> list[dict]:
    out = run_published(where, HERE / "seed_runner.py", names, str(instances), "50")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def summarise(rows: list[dict], name: str) -> tuple[float, float, int]:
    mine = [r for r in rows if r["family"] == name and not r.get("skipped")]
    if not mine:
        return float("nan"), float("nan"), 0
    accuracy = sum(r["culprit"] == r["truth"] for r in mine) / len(mine)
    return accuracy, statistics.mean(r["live_steps"] for r in mine), len(mine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="".join(families.FAMILIES))
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--no-seed", action="store_true", help="skip the published package")
    parser.add_argument("--seed-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--json", type=Path, default=None, help="also write all rows here")
    args = parser.parse_args()

    started = time.perf_counter()
    seed = [] if args.no_seed else run_seed(args.families, args.instances, args.seed_venv)
    spent = {(r["family"], r["index"]): r["live_steps"] for r in seed if not r.get("skipped")}
    budgeted = run_ours(args.families, args.instances, budgets=spent)
    default = run_ours(args.families, args.instances, budgets=None)

    header = (
        f"{'family':<7}{'n':>4}  {'budget acc':>10} {'live/case':>9} {'ratio':>6}   "
        f"{'default acc':>11} {'live/case':>9}   {'published acc':>13} {'live/case':>9}"
    )
    print(header)
    print("-" * len(header))
    accuracies = []
    for name in args.families:
        b_acc, b_cost, count = summarise(budgeted, name)
        d_acc, d_cost, _ = summarise(default, name)
        s_acc, s_cost, _ = summarise(seed, name) if seed else (float("nan"),) * 2 + (0,)
        accuracies.append(b_acc)
        ratio = b_cost / s_cost if seed else float("nan")
        print(
            f"{name:<7}{count:>4}  {b_acc:>10.0%} {b_cost:>9.0f} {ratio:>6.3f}   "
            f"{d_acc:>11.0%} {d_cost:>9.0f}   {s_acc:>13.0%} {s_cost:>9.0f}"
        )
    print("-" * len(header))
    d_mean = statistics.mean(summarise(default, n)[0] for n in args.families)
    line = f"mean accuracy: budget {statistics.mean(accuracies):.1%}, default {d_mean:.1%}"
    if seed:
        s_mean = statistics.mean(summarise(seed, n)[0] for n in args.families)
        line += f", published {s_mean:.1%}"
    print(line)
    spend = "the published package's measured spend" if seed else "50 n(n+1)/2 live steps"
    print(
        f"budget = {DEFAULT_FRACTION:.3f} x {spend} per case "
        f"({BUDGET_FRACTION['G']} for G); {time.perf_counter() - started:.0f}s"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"budget": budgeted, "default": default, "published": seed}, indent=1)
        )


if __name__ == "__main__":
    main()
