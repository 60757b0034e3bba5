"""The public attribution suite: failure families with a known culprit.

Each family builds seeded instances. An instance is an agent written against the ctx API that
both agent-replay and the published package (trajectory-causal-attribution 1.0.0) understand
(``ctx.llm(name, produce=..., **inputs)``, ``ctx.rng``), a task, a verifier, and
``ground_truth(result)``: the index of the step whose action introduced the error in that
recorded run, or ``None`` when the recorded run is not a valid instance (it passed, or the
error is not where the family puts it). Agents report which steps erred in their result, so
ground truth never depends on either package's internals.

Every policy call goes through ``_live`` which counts it in ``LIVE``: the number of live step
executions, measured the same way for both packages.

Families (ATTRIBUTION.md): A noise + one error; B error caught by a later reviewer with
probability q (or unrecoverable); C decision + executor that refuses 10%; D AND / OR
interactions; E branching with routes drawn in the agent body; F low-probability rescue;
G long runs (30-50 steps), some with a late reviewer; H noisy judge (10% of verdicts flipped).
Two more to check that the culprit rule generalises: I cascade (the error makes a later step
fail) and J several weak rescuers after the error.

This module imports nothing from agent-replay, so the published package can run it too.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LIVE = [0]


def _live(fn: Callable[[], Any]) -> Callable[[], Any]:
    def produce() -> Any:
        LIVE[0] += 1
        return fn()

    return produce


@dataclass
class Instance:
    family: str
    index: int
    agent: Callable[..., Any]
    task: dict[str, Any]
    verifier: Callable[[Any], float]
    ground_truth: Callable[[Any], int | None]
    n_steps: int


class _Run:
    """Numbers the agent's steps and collects which ones erred."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.position = 0
        self.errors: list[int] = []
        self.notes: dict[str, Any] = {}

    def step(self, name: str, fn: Callable[[], Any], kind: str = "llm", **inputs: Any) -> Any:
        position = self.position
        self.position += 1
        out = getattr(self.ctx, kind)(name, produce=_live(fn), **inputs)
        if isinstance(out, str) and out.startswith("ERROR"):
            self.errors.append(position)
        return out

    def noise(self, name: str, prev: Any) -> Any:
        rng = self.ctx.rng
        return self.step(name, lambda: f"note-{rng.randint(0, 9)}", prev=prev)

    def result(self, **extra: Any) -> dict[str, Any]:
        return {"errors": list(self.errors), **self.notes, **extra}


def _no_errors(result: Any) -> float:
    return 0.0 if result["errors"] else 1.0


def _only_error_at(expected: Callable[[dict], int]) -> Callable[[Any], int | None]:
    def ground_truth(result: Any) -> int | None:
        if not isinstance(result, dict):
            return None
        position = expected(result)
        return position if result.get("errors") == [position] else None

    return ground_truth


# -- A: noise everywhere, one step commits the error ---------------------------------------


def agent_a(ctx: Any, n: int, culprit: int, p_err: float) -> dict[str, Any]:
    rng = ctx.rng
    run, prev = _Run(ctx), "start"
    for i in range(n):
        if i == culprit:
            prev = run.step(
                f"step{i}",
                lambda: "ERROR" if rng.random() < p_err else f"ok-{rng.randint(0, 99)}",
                prev=prev,
            )
        else:
            prev = run.noise(f"step{i}", prev)
    return run.result()


def family_a(index: int) -> Instance:
    r = random.Random(f"A-{index}")
    n = r.randint(6, 12)
    culprit = r.randrange(n)
    task = {"n": n, "culprit": culprit, "p_err": r.uniform(0.2, 0.5)}
    return Instance("A", index, agent_a, task, _no_errors, _only_error_at(lambda _: culprit), n)


# -- B: an error a later reviewer catches with probability q, or an unrecoverable one --------


def agent_b(
    ctx: Any, n: int, culprit: int, reviewer: int, q: float, p_err: float, recoverable: bool
) -> dict[str, Any]:
    rng = ctx.rng
    run, prev, fixed = _Run(ctx), "start", False
    for i in range(n):
        if i == culprit:
            prev = run.step(
                f"step{i}", lambda: "ERROR" if rng.random() < p_err else "ok", prev=prev
            )
        elif i == reviewer:
            erred = bool(run.errors)
            verdict = run.step(
                "review",
                lambda erred=erred: (
                    "fixed"
                    if (erred and recoverable and rng.random() < q)
                    else f"pass-{rng.randint(0, 3)}"
                ),
                draft=prev,
            )
            fixed = verdict == "fixed"
        else:
            prev = run.noise(f"step{i}", prev)
    return run.result(fixed=fixed)


def family_b(index: int) -> Instance:
    r = random.Random(f"B-{index}")
    n = r.randint(6, 12)
    culprit = r.randint(1, n - 3)
    reviewer = r.randint(culprit + 1, n - 1)
    task = {
        "n": n,
        "culprit": culprit,
        "reviewer": reviewer,
        "q": r.uniform(0.05, 0.3),
        "p_err": r.uniform(0.2, 0.5),
        "recoverable": index % 2 == 0,
    }

    def verifier(result: Any) -> float:
        return 1.0 if (not result["errors"] or result["fixed"]) else 0.0

    def ground_truth(result: Any) -> int | None:
        ok = isinstance(result, dict) and result.get("errors") == [culprit]
        return culprit if ok and not result.get("fixed") else None

    return Instance("B", index, agent_b, task, verifier, ground_truth, n)


# -- C: a decision chooses the harm, an executor carries it out (refusing 10%) --------------


def agent_c(ctx: Any, n: int, decision: int, executor: int, p_harm: float) -> dict[str, Any]:
    rng = ctx.rng
    run, prev, choice, outcome = _Run(ctx), "start", "safe", "none"
    for i in range(n):
        if i == decision:
            choice = run.step(
                "decide", lambda: "harmful" if rng.random() < p_harm else "safe", prev=prev
            )
            if choice == "harmful":
                run.errors.append(i)
        elif i == executor:
            outcome = run.step(
                "execute",
                lambda choice=choice: (
                    ("refused" if rng.random() < 0.1 else "executed-harmful")
                    if choice == "harmful"
                    else "executed-safe"
                ),
                kind="tool",
                action=choice,
            )
        else:
            prev = run.noise(f"step{i}", prev)
    return run.result(outcome=outcome)


def family_c(index: int) -> Instance:
    r = random.Random(f"C-{index}")
    n = r.randint(6, 12)
    decision = r.randint(0, n - 3)
    executor = r.randint(decision + 1, n - 1)
    task = {"n": n, "decision": decision, "executor": executor, "p_harm": r.uniform(0.2, 0.5)}

    def verifier(result: Any) -> float:
        return 0.0 if result["outcome"] == "executed-harmful" else 1.0

    def ground_truth(result: Any) -> int | None:
        ok = isinstance(result, dict) and result.get("outcome") == "executed-harmful"
        return decision if ok else None

    return Instance("C", index, agent_c, task, verifier, ground_truth, n)


# -- D: AND (both needed) and OR (either suffices) -----------------------------------------


def agent_d(ctx: Any, n: int, a: int, b: int, p_a: float, p_b: float) -> dict[str, Any]:
    rng = ctx.rng
    run, prev = _Run(ctx), "start"
    for i in range(n):
        if i == a:
            prev = run.step(
                f"step{i}", lambda: "ERROR-a" if rng.random() < p_a else "ok-a", prev=prev
            )
        elif i == b:
            prev = run.step(
                f"step{i}", lambda: "ERROR-b" if rng.random() < p_b else "ok-b", prev=prev
            )
        else:
            prev = run.noise(f"step{i}", prev)
    return run.result()


def family_d(index: int) -> Instance:
    r = random.Random(f"D-{index}")
    n = r.randint(6, 12)
    a = r.randint(0, n - 2)
    b = r.randint(a + 1, n - 1)
    conjunctive = index % 2 == 0
    if conjunctive:  # a rare mistake at a, and a lax check at b that usually lets it through
        task = {"n": n, "a": a, "b": b, "p_a": r.uniform(0.1, 0.3), "p_b": r.uniform(0.6, 0.9)}
    else:
        task = {"n": n, "a": a, "b": b, "p_a": r.uniform(0.2, 0.4), "p_b": r.uniform(0.05, 0.15)}

    def verifier(result: Any) -> float:
        errors = set(result["errors"])
        failed = {a, b} <= errors if conjunctive else bool(errors)
        return 0.0 if failed else 1.0

    def ground_truth(result: Any) -> int | None:
        if not isinstance(result, dict):
            return None
        errors = result.get("errors")
        if conjunctive:
            return a if errors == [a, b] else None
        return errors[0] if errors in ([a], [b]) else None

    return Instance("D", index, agent_d, task, verifier, ground_truth, n)


# -- E: branching, routes drawn in the agent body -------------------------------------------


def agent_e(ctx: Any, pre: int, p_err: float) -> dict[str, Any]:
    rng = ctx.rng
    run, prev = _Run(ctx), "start"
    for i in range(pre):
        prev = run.noise(f"prepare{i}", prev)
    route = ctx.rng.choice(["A", "B"])  # drawn in the body, not in a step
    if route == "A":
        found = run.step("a_search", lambda: f"doc-{rng.randint(0, 5)}", kind="tool", q=prev)
        prev = run.step(
            "a_answer", lambda: "ERROR" if rng.random() < p_err else "answer-a", doc=found
        )
    else:
        looked = run.step(
            "b_lookup",
            lambda: "ERROR" if rng.random() < p_err else f"row-{rng.randint(0, 5)}",
            kind="tool",
            q=prev,
        )
        prev = run.step("b_format", lambda: f"table-{rng.randint(0, 3)}", row=looked)
    run.noise("respond", prev)
    run.notes["route"] = route
    return run.result()


def family_e(index: int) -> Instance:
    r = random.Random(f"E-{index}")
    pre = r.randint(1, 4)
    task = {"pre": pre, "p_err": r.uniform(0.2, 0.5)}

    def ground_truth(result: Any) -> int | None:
        if not isinstance(result, dict) or len(result.get("errors", ())) != 1:
            return None
        return result["errors"][0]

    return Instance("E", index, agent_e, task, _no_errors, ground_truth, pre + 3)


# -- F: low-probability rescue at the culprit ------------------------------------------------


def family_f(index: int) -> Instance:
    r = random.Random(f"F-{index}")
    n = r.randint(6, 12)
    culprit = r.randrange(n)
    task = {"n": n, "culprit": culprit, "p_err": r.uniform(0.90, 0.95)}
    return Instance("F", index, agent_a, task, _no_errors, _only_error_at(lambda _: culprit), n)


# -- G: long runs, some with a late reviewer -------------------------------------------------


def family_g(index: int) -> Instance:
    r = random.Random(f"G-{index}")
    n = r.randint(30, 50)
    culprit = r.randint(1, n - 5)
    if index % 2 == 0:
        reviewer = r.randint(max(culprit + 1, n - 5), n - 1)
        task = {
            "n": n,
            "culprit": culprit,
            "reviewer": reviewer,
            "q": r.uniform(0.1, 0.3),
            "p_err": r.uniform(0.2, 0.5),
            "recoverable": True,
        }

        def verifier(result: Any) -> float:
            return 1.0 if (not result["errors"] or result["fixed"]) else 0.0

        def ground_truth(result: Any) -> int | None:
            ok = isinstance(result, dict) and result.get("errors") == [culprit]
            return culprit if ok and not result.get("fixed") else None

        return Instance("G", index, agent_b, task, verifier, ground_truth, n)
    task = {"n": n, "culprit": culprit, "p_err": r.uniform(0.2, 0.5)}
    return Instance("G", index, agent_a, task, _no_errors, _only_error_at(lambda _: culprit), n)


# -- H: a noisy judge flips 10% of verdicts --------------------------------------------------


def family_h(index: int) -> Instance:
    r = random.Random(f"H-{index}")
    n = r.randint(6, 12)
    culprit = r.randrange(n)
    task = {"n": n, "culprit": culprit, "p_err": r.uniform(0.3, 0.5)}
    judge = random.Random(f"H-judge-{index}")

    def noisy_verifier(result: Any) -> float:
        verdict = _no_errors(result)
        return 1.0 - verdict if judge.random() < 0.1 else verdict

    return Instance("H", index, agent_a, task, noisy_verifier, _only_error_at(lambda _: culprit), n)


# -- I (ours): cascade - the error makes a later step fail -----------------------------------


def agent_i(ctx: Any, n: int, culprit: int, downstream: int, p_err: float) -> dict[str, Any]:
    rng = ctx.rng
    run, prev, upstream_error = _Run(ctx), "start", False
    for i in range(n):
        if i == culprit:
            prev = run.step(
                f"step{i}",
                lambda: "WRONG-premise" if rng.random() < p_err else "premise",
                prev=prev,
            )
            upstream_error = prev == "WRONG-premise"
        elif i == downstream:
            bad = upstream_error
            prev = run.step(
                "conclude",
                lambda bad=bad: "ERROR" if rng.random() < (0.9 if bad else 0.05) else "conclusion",
                premise=prev,
            )
        else:
            prev = run.noise(f"step{i}", prev)
    run.notes["premise_wrong"] = upstream_error
    return run.result()


def family_i(index: int) -> Instance:
    r = random.Random(f"I-{index}")
    n = r.randint(6, 12)
    culprit = r.randint(0, n - 2)
    downstream = r.randint(culprit + 1, n - 1)
    task = {"n": n, "culprit": culprit, "downstream": downstream, "p_err": r.uniform(0.2, 0.4)}

    def ground_truth(result: Any) -> int | None:
        ok = (
            isinstance(result, dict)
            and result.get("premise_wrong")
            and result.get("errors") == [downstream]
        )
        return culprit if ok else None

    return Instance("I", index, agent_i, task, _no_errors, ground_truth, n)


# -- J (ours): several weak rescuers after the error -----------------------------------------


def agent_j(
    ctx: Any, n: int, culprit: int, reviewers: list[int], q: float, p_err: float
) -> dict[str, Any]:
    rng = ctx.rng
    run, prev, fixed = _Run(ctx), "start", False
    for i in range(n):
        if i == culprit:
            prev = run.step(
                f"step{i}", lambda: "ERROR" if rng.random() < p_err else "ok", prev=prev
            )
        elif i in reviewers:
            erred = bool(run.errors) and not fixed
            verdict = run.step(
                f"review{i}",
                lambda erred=erred: "fixed" if (erred and rng.random() < q) else "pass",
                draft=prev,
            )
            fixed = fixed or verdict == "fixed"
        else:
            prev = run.noise(f"step{i}", prev)
    return run.result(fixed=fixed)


def family_j(index: int) -> Instance:
    r = random.Random(f"J-{index}")
    n = r.randint(8, 12)
    culprit = r.randint(0, n - 5)
    reviewers = sorted(r.sample(range(culprit + 1, n), r.randint(2, 4)))
    task = {
        "n": n,
        "culprit": culprit,
        "reviewers": reviewers,
        "q": r.uniform(0.05, 0.15),
        "p_err": r.uniform(0.2, 0.5),
    }

    def verifier(result: Any) -> float:
        return 1.0 if (not result["errors"] or result["fixed"]) else 0.0

    def ground_truth(result: Any) -> int | None:
        ok = isinstance(result, dict) and result.get("errors") == [culprit]
        return culprit if ok and not result.get("fixed") else None

    return Instance("J", index, agent_j, task, verifier, ground_truth, n)


FAMILIES: dict[str, Callable[[int], Instance]] = {
    "A": family_a,
    "B": family_b,
    "C": family_c,
    "D": family_d,
    "E": family_e,
    "F": family_f,
    "G": family_g,
    "H": family_h,
    "I": family_i,
    "J": family_j,
}
ATTRIBUTION_MD = "ABCDEFGH"  # the families ATTRIBUTION.md names; I and J are ours


def result_of(trajectory: Any) -> Any:
    """The recorded agent result, for either package's Trajectory."""
    outcome = getattr(trajectory, "outcome", None)
    if outcome is not None and hasattr(outcome, "result"):
        return outcome.result
    return getattr(trajectory, "result", None)


def failed_of(trajectory: Any) -> bool:
    """Whether the recorded verdict is a failure, for either package's Trajectory."""
    outcome = getattr(trajectory, "outcome", None)
    if outcome is not None and hasattr(outcome, "failed"):
        return bool(outcome.failed)
    score = getattr(trajectory, "outcome_score", None)
    return score is not None and score < 0.5


def find_failing_recording(
    instance: Instance, record: Callable[..., Any], max_seeds: int = 4000
) -> tuple[Any, int] | None:
    """Record with successive seeds until the run is a valid instance; ``(traj, truth)``."""
    for seed in range(max_seeds):
        traj = record(
            instance.agent,
            instance.task,
            session_id=f"{instance.family}{instance.index}-{seed}",
            seed=seed,
            verifier=instance.verifier,
        )
        truth = instance.ground_truth(result_of(traj))
        if truth is not None and failed_of(traj):
            return traj, truth
    return None
