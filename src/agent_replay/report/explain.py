"""``explain``: what failed, where, why, and the fix - in words a person can act on.

Everything is derived from the report (the prefix failure curve and the step effects), so an
explanation of a report loaded from JSON is the same as one made right after the attribution.
The causal trace walks from the first step to the *point of no return*: the first evaluated
prefix position ``p`` from which the failure rate stays where the factual replays put it
(every later ``F(q)`` interval covers ``F(n)`` and reaches at most ``LOCK_MARGIN`` below it,
and ``F(p) >= 0.5``). Steps from ``p`` on are
*locked in*: re-drawing them no longer changes the outcome. Steps the search did not isolate
are reported with the effect of their segment, never with a made-up per-step number.

Pure functions on immutable data: safe to call from any thread. Raises ``TypeError`` for
something that is neither a result nor a report dict.
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import RolloutLimitExceeded
from ..model import Trajectory
from ._data import (
    as_report,
    curve_value,
    finite,
    fmt_effect,
    fmt_interval,
    fmt_rate,
    preview,
    repair_left_out,
    step_content,
)

__all__ = ["ROLES", "Explanation", "TraceEntry", "explain", "point_of_no_return"]

ROLES = (
    "decisive",  # the culprit: its recorded action raised the failure probability most
    "contributing",  # raised it too (significantly or not; the note says)
    "protective",  # its recorded action lowered the failure probability
    "neutral",  # no measurable effect
    "unresolved",  # inside a segment with an effect the search did not split, or unmeasured
    "locked-in",  # at or after the point of no return
    "observation-only",  # held in every rollout (side effects, no policy, no content): not scored
)

#: effects smaller than this (in probability) are "no measurable effect" in the wording
NEGLIGIBLE = 0.02
_TOL = 0.01  # slack when comparing F(q) to F(n)
LOCK_MARGIN = 0.1
"""How far below the factual F(n) an F(q) interval may reach for position q to count as
locked in: an interval from a few rollouts ([0.50, 1.00] from 8) covers F(n) without showing
that re-drawing changes nothing."""


@dataclass(frozen=True)
class TraceEntry:
    """One step of the causal trace and its role (one of :data:`ROLES`)."""

    index: int
    label: str
    agent: str | None
    role: str
    note: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Explanation:
    """what / where / why / fix, the causal trace and the caveats that bound the verdict."""

    verdict: str
    what: str
    where: str
    why: str
    fix: str
    trace: tuple[TraceEntry, ...]
    point_of_no_return: int | None
    caveats: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["trace"], data["caveats"] = list(data["trace"]), list(data["caveats"])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Explanation:
        return cls(
            verdict=data["verdict"],
            what=data["what"],
            where=data["where"],
            why=data["why"],
            fix=data["fix"],
            trace=tuple(TraceEntry(**t) for t in data.get("trace") or ()),
            point_of_no_return=data.get("point_of_no_return"),
            caveats=tuple(data.get("caveats") or ()),
        )

    def to_text(self, width: int = 96) -> str:
        def para(head: str, body: str) -> list[str]:
            return textwrap.wrap(
                body, width, initial_indent=f"{head:<7}", subsequent_indent=" " * 7
            ) or [head]

        lines = ["Explanation"]
        lines += para("What", self.what)
        lines += para("Where", self.where)
        lines += para("Why", self.why)
        lines += para("Fix", self.fix)
        if self.trace:
            lines.append("Causal trace (first action → point of no return):")
            for run in _runs(self.trace, self.point_of_no_return):
                if run[0].index == self.point_of_no_return:
                    lines.append(f"  ---- point of no return: from step {run[0].index} on ----")
                # a long run of steps of one quiet role is cut to its ends in text (a
                # 300-step run listed every step twice); the JSON and HTML keep them all
                shown = run if len(run) <= QUIET_RUN else [*run[:2], None, run[-1]]
                for t in shown:
                    if t is None:
                        hidden = run[2:-1]
                        lines.append(
                            f"      … {len(hidden)} more {run[0].role} steps "
                            f"({hidden[0].index}-{hidden[-1].index}) …"
                        )
                        continue
                    body = f"{t.label} ({t.agent or '-'}) · {t.role}: {t.note}"
                    text = textwrap.shorten(body, width, placeholder="…")
                    lines.append(f"  {t.index:>3} " + text)
        for caveat in self.caveats:
            lines += textwrap.wrap(caveat, width, initial_indent="  ! ", subsequent_indent="    ")
        return "\n".join(lines)


#: in text, a run of more than this many consecutive steps of one quiet role (neutral,
#: locked-in, observation-only) is shown by its first two steps and its last
QUIET_RUN = 6
_QUIET = frozenset({"neutral", "locked-in", "observation-only"})


def _runs(trace: Sequence[TraceEntry], pnr: int | None) -> list[list[TraceEntry]]:
    """``trace`` cut into runs of consecutive quiet steps of one role (each other step on its
    own), a new run starting at the point of no return."""
    runs: list[list[TraceEntry]] = []
    for t in trace:
        last = runs[-1][-1] if runs else None
        if (
            last is not None
            and t.role in _QUIET
            and t.role == last.role
            and t.index == last.index + 1
            and t.index != pnr
        ):
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs


def point_of_no_return(
    curve: Sequence[Mapping[str, Any]], n: int, held: Collection[int] = ()
) -> int | None:
    """The first evaluated position from which the failure stays locked in (see the module
    docstring); ``None`` when the factual replays do not reproduce the failure. ``held``:
    the steps no rollout re-draws (observation-only); a position after which only those
    follow is locked in by construction, whatever its interval."""
    points = sorted(
        (p for p in curve if finite(p.get("failure_rate"))), key=lambda p: p["position"]
    )
    final = next((p for p in points if p["position"] == n), None)
    if final is None or final["failure_rate"] < 0.5:
        return None
    target = final["failure_rate"]
    found = n
    for point in reversed(points):
        interval = point["interval"]
        settled = all(i in held for i in range(point["position"], n)) or (
            point["failure_rate"] >= 0.5
            and interval["low"] - _TOL <= target <= interval["high"] + _TOL
            and interval["low"] >= target - LOCK_MARGIN - _TOL
        )
        if not settled:
            break
        found = point["position"]
    return found


def explain(result: Any, trajectory: Trajectory | Mapping[str, Any] | None = None) -> Explanation:
    """The explanation of an attribution (``AttributionResult`` or report dict); pass the
    trajectory (or rely on the report's ``trajectory`` key) to quote recorded content."""
    data = as_report(result, trajectory)
    n = int(data["n_steps"])
    credit = data.get("mode") == "credit"
    event = "success" if credit else "failure"
    steps = data.get("steps") or []
    culprit = data.get("culprit_index")
    held = {s["index"] for s in steps if s.get("observation_only")}
    pnr = point_of_no_return(data.get("curve") or [], n, held)
    trace = tuple(_trace(data, steps, culprit, pnr, event))
    return Explanation(
        verdict=str(data["verdict"]),
        what=_what(data, event),
        where=_where(data, steps, culprit),
        why=_why(data, steps, culprit, pnr, event),
        fix=_fix(data, culprit),
        trace=trace,
        point_of_no_return=pnr,
        caveats=tuple(_caveats(data)),
    )


# -- the parts ------------------------------------------------------------------------------


def _label(step: Mapping[str, Any]) -> str:
    return f"{step['kind']}:{step['name']}"


def _what(data: Mapping[str, Any], event: str) -> str:
    traj = data.get("trajectory") or {}
    outcome = traj.get("outcome") or {}
    session = data["session_id"]
    fidelity = data.get("fidelity") or {}
    verb = "succeeded" if event == "success" else "failed"
    parts = [f"Session {session} {verb}"]
    if finite(outcome.get("score")):
        parts[0] += f" (verifier score {outcome['score']:.2f})"
    if outcome.get("error"):
        err = outcome["error"]
        parts.append(
            f"the agent raised {err.get('type', 'an error')}: {preview(err.get('message'), 80)}"
        )
    if traj.get("task") is not None:
        parts.append(f"task {preview(traj['task'], 90)}")
    if finite(fidelity.get("failure_rate")):
        rate = fidelity["failure_rate"] if event == "failure" else 1 - fidelity["failure_rate"]
        parts.append(
            f"factual replays reproduce the {event} {fmt_rate(rate)} of "
            f"{fidelity.get('replays', 0)} times"
        )
    return "; ".join(parts) + "."


def _strength(data: Mapping[str, Any]) -> str:
    verdict = data["verdict"]
    fdr = data.get("fdr") or {}
    if verdict == "separated":
        level, nominal = fdr.get("separation_confidence"), data.get("confidence")
        low, parts = fdr.get("separation_lower"), fdr.get("compared_parts")
        # the verdict rests on one-sided bounds, tighter than the two-sided interval shown
        least = (
            f"its effect is at least {fmt_effect(low)} (one-sided bound at {level:.1%})"
            if finite(low) and finite(level)
            else "its effect is positive"
        )
        if parts == 0:
            return f"separated: {least}, and no other part of the run was left to compare it with"
        at = (
            f", jointly at {nominal:.0%} confidence (each bound at {level:.1%})"
            if finite(level) and finite(nominal)
            else ""
        )
        return (
            f"separated: {least} and larger than that of every other part of the run it was "
            f"compared with{at} (neighbouring steps of small effect are compared by their "
            "total)"
        )
    if verdict == "likely":
        return (
            f"likely: its effect is significantly positive but not yet separated from every "
            f"other step (search stopped: {data.get('stop_reason')})"
        )
    return str(verdict)


def _where(data: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], culprit: int | None) -> str:
    if data["verdict"] == "nothing to attribute":
        return "Nothing to attribute: no step of this run can be re-drawn."
    if culprit is not None:
        step = steps[culprit]
        agent = f", agent {step['agent']}" if step.get("agent") else ""
        return (
            f"Step {culprit} · {_label(step)}{agent}: effect {fmt_effect(step.get('effect'))} "
            f"{fmt_interval(step.get('interval'))} - {_strength(data)}."
        )
    best = _leading_candidate(steps)
    text = (
        f"Undecided: no step's effect is significantly positive "
        f"(search stopped: {data.get('stop_reason')})."
    )
    if best is not None:
        lo, hi = best["segment"]
        if hi - lo == 1:
            text += (
                f" The largest estimated effect is step {lo} · {_label(best)} "
                f"({fmt_effect(best.get('segment_effect'))} "
                f"{fmt_interval(best.get('segment_interval'))})."
            )
        else:
            text += (
                f" The largest estimated effect sits in steps {lo}-{hi - 1}, which the search did "
                f"not split ({fmt_effect(best.get('segment_effect'))} "
                f"{fmt_interval(best.get('segment_interval'))})."
            )
    return text


def _leading_candidate(steps: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    scored = [s for s in steps if not s.get("observation_only") and finite(s.get("segment_effect"))]
    if not scored:
        return None
    best = max(scored, key=lambda s: s["segment_effect"])
    return best if best["segment_effect"] > NEGLIGIBLE else None


def _why(
    data: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    culprit: int | None,
    pnr: int | None,
    event: str,
) -> str:
    n = int(data["n_steps"])
    start, end = curve_value(data, 0), curve_value(data, n)
    if culprit is None and data.get("stop_reason") == "nothing to attribute" and n == 0:
        return "The run made no step: there is nothing to re-draw or attribute."
    if culprit is None and data.get("stop_reason") == "nothing to attribute":
        return (
            "No step of this run can be re-drawn, so no rollout could change anything and "
            "nothing was measured: every step is held (declared side_effects=True or "
            "resamplable=False, given no resample policy or a hold policy, or recorded without "
            "content)."
        )
    if culprit is None:
        parts = []
        if end is not None and finite(end["failure_rate"]) and end["failure_rate"] < 0.5:
            parts.append(
                f"Replaying the recorded run reproduces the {event} only "
                f"{fmt_rate(end['failure_rate'])} of the time, so there is little to attribute: "
                "check replay fidelity first (non-deterministic tools, judge or agent code)."
            )
        held = _held_cause(data, steps)
        if start is not None and finite(start["failure_rate"]) and start["failure_rate"] >= 0.5:
            source = "the task, the environment or the verifier"
            if held:
                source = f"a held step ({held}, never re-drawn), " + source
            parts.append(
                f"Even with every step re-drawn the {event} rate is F(0) = "
                f"{fmt_rate(start['failure_rate'])}: the outcome comes from {source} more than "
                "from any one re-drawn step's choice."
            )
            if held:
                parts.append(
                    "More rollouts will not change that: to test a held step, give it a "
                    "resample policy, or intervene on it with a mock observation (fork "
                    "--observe)."
                )
        if not parts:
            parts.append(
                "The evidence does not single out one step: effects may be small, spread over "
                "several steps, or need more rollouts (raise --rollouts or --budget)."
            )
        return " ".join(parts)
    step = steps[culprit]
    before, after = curve_value(data, culprit), curve_value(data, culprit + 1)
    content = step_content(data, culprit)
    action = content.get("action") if content else step.get("action")
    text = (
        f"With the steps before {culprit} held and the rest re-drawn, the run's {event} rate is "
        f"F({culprit}) = {fmt_rate(before and before['failure_rate'])}; holding the recorded "
        f"action of step {culprit} too ({preview(action, 70)}) makes it "
        f"F({culprit + 1}) = {fmt_rate(after and after['failure_rate'])}."
    )
    if content and content.get("inputs") is not None:
        text += f" The step saw {preview(content['inputs'], 90)}."
    rescuers = [
        s
        for s in steps[culprit + 1 : pnr if pnr is not None else n]
        if not s.get("observation_only")
        and s.get("effect") is not None
        and abs(s["effect"]) > NEGLIGIBLE
    ]
    if rescuers:
        text += (
            " Later, "
            + "; ".join(
                f"step {s['index']} ({_label(s)}) moved it by {fmt_effect(s['effect'])} "
                f"{fmt_interval(s.get('interval'))}"
                for s in rescuers[:3]
            )
            + "."
        )
    if pnr is not None and pnr <= n:
        where = "the end of the run" if pnr == n else f"step {pnr}"
        text += (
            f" From {where} on the {event} is locked in (F stays at the factual "
            f"{fmt_rate(end and end['failure_rate'])})."
        )
    poc = data.get("poc_index")
    if poc is not None and poc != culprit:
        text += (
            f" (The published package's Point-of-Commitment rule would have named step {poc}: "
            "the latest step whose re-decision can still rescue the run, not the one that "
            "introduced the error.)"
        )
    return text


def _fix(data: Mapping[str, Any], culprit: int | None) -> str:
    repair = data.get("repair")
    if repair:
        interval = repair.get("interval")
        measured = (
            f"the run fails {fmt_rate(repair['failure_rate'])} "
            f"{fmt_interval(interval, signed=False)} of {repair['rollouts']} rollouts"
        )
        if repair.get("valid"):
            return (
                f"Replace the action of step {repair['step']} ({repair['label']}) "
                f"{preview(repair['original'], 60)} with {preview(repair['replacement'], 60)}: "
                f"with it {measured}, below the {fmt_rate(repair['threshold'])} threshold "
                f"(candidate from {repair['source']}, minimality {repair['minimality']:.2f}). "
                "Turn it into a deploy-time guard with result.repair.to_guard(), or fix what "
                "produced the action (prompt, policy data, tool)."
            )
        return (
            f"No validated repair: the best candidate for step {repair['step']} "
            f"({preview(repair['replacement'], 60)}) still leaves {measured} (threshold "
            f"{fmt_rate(repair['threshold'])}). Offer candidates (repair_candidates=) or a "
            "propose_fn."
        )
    if culprit is not None and repair_left_out(data):
        return (
            f"The repair search for step {culprit} was left out: the budget left too little "
            "for it after the culprit search. Raise the budget (or run without one)."
        )
    if culprit is not None:
        return (
            f"No repair was searched or found for step {culprit}: rerun with repair=True "
            "(CLI: --repair), or give candidate actions (repair_candidates=)."
        )
    if data.get("stop_reason") == "nothing to attribute":
        return (
            "Nothing to fix from here: give the steps something to re-draw (a resample policy "
            "for an imported trace's steps, --policy; recorded content), or test a held step "
            "with a mock observation (fork --observe)."
        )
    held = _held_cause(data, data.get("steps") or ())
    if held:
        return (
            f"No fix to propose without a culprit. Held steps ({held}) are never re-drawn: "
            "give them a resample policy or test them with a mock observation (fork "
            "--observe); raise --rollouts or --budget only if the intervals are still wide."
        )
    start = curve_value(data, 0)
    if start is not None and finite(start["failure_rate"]) and start["failure_rate"] >= 0.5:
        return (
            "No fix to propose at any step: the run fails even with every step re-drawn "
            f"(F(0) = {fmt_rate(start['failure_rate'])}), so no step's choice decides it; look "
            "at the task, the environment and the verifier."
        )
    return (
        "No fix to propose without a culprit: raise --rollouts or --budget, or make the replay "
        "reproduce the failure first."
    )


def _trace(
    data: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    culprit: int | None,
    pnr: int | None,
    event: str,
) -> list[TraceEntry]:
    out = []
    for step in steps:
        i = step["index"]
        role, note = _role(step, culprit, pnr, event, data)
        out.append(TraceEntry(i, _label(step), step.get("agent"), role, note))
    return out


def _role(
    step: Mapping[str, Any],
    culprit: int | None,
    pnr: int | None,
    event: str,
    data: Mapping[str, Any],
) -> tuple[str, str]:
    i = step["index"]
    effect, interval = step.get("effect"), step.get("interval")
    lo, hi = step["segment"]
    if step.get("observation_only"):
        why = "side effects" if step.get("side_effects") else "no policy re-draws it"
        return "observation-only", f"held in every rollout ({why}); not scored"
    if pnr is not None and i >= pnr:
        return (
            "locked-in",
            f"after the point of no return: re-drawing it leaves the {event} in place",
        )
    if i == culprit:
        return (
            "decisive",
            f"effect {fmt_effect(effect)} {fmt_interval(interval)}; {data['verdict']}",
        )
    measured_interval = interval if hi - lo == 1 else step.get("segment_interval")
    if unmeasured(measured_interval):
        where = f"step {i}" if hi - lo == 1 else f"steps {lo}-{hi - 1}"
        return "unresolved", (
            f"{where}: not measured (no rollout pair compared it before the search stopped, "
            f"{data.get('stop_reason', '')}); its effect is unknown, not zero"
        )
    if hi - lo == 1 and effect is not None:
        shown = f"effect {fmt_effect(effect)} {fmt_interval(interval)}"
        significant = bool(interval) and interval["low"] > 0
        if effect > NEGLIGIBLE:
            return "contributing", shown + ("; significant" if significant else "; not significant")
        if effect < -NEGLIGIBLE:
            return "protective", shown + f"; its recorded action made the {event} less likely"
        return "neutral", shown + "; no measurable effect"
    total = step.get("segment_effect")
    where = f"in steps {lo}-{hi - 1} (not split by the search)"
    if finite(total) and abs(total) > NEGLIGIBLE:
        return "unresolved", (
            f"{where}: together {fmt_effect(total)} {fmt_interval(step.get('segment_interval'))}"
        )
    return "neutral", f"{where}: together {fmt_effect(total)}; no measurable effect"


def _held_cause(data: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> str:
    """The observation-only steps (``"step 3 (tool:refund)"``, comma-separated) when they may
    be where the failure comes from: it persists with every other step re-drawn (F(0) at
    least 0.5); ``""`` otherwise (an undecided verdict for want of rollouts, say)."""
    start = curve_value(data, 0)
    if start is None or not finite(start["failure_rate"]) or start["failure_rate"] < 0.5:
        return ""
    return ", ".join(f"step {s['index']} ({_label(s)})" for s in steps if s.get("observation_only"))


def unmeasured(interval: Mapping[str, Any] | None) -> bool:
    """An effect interval of the whole [-1, 1]: no pair of rollouts compared it."""
    return bool(interval) and interval["low"] <= -1.0 and interval["high"] >= 1.0


_STOPPED = RolloutLimitExceeded.__qualname__  # (as the cost counts exceptions)


def _caveats(data: Mapping[str, Any]) -> list[str]:
    out: list[str] = list(data.get("warnings") or ())
    fidelity = data.get("fidelity") or {}
    if fidelity.get("warning") and fidelity["warning"] not in out:
        out.append(fidelity["warning"])
    rate = data.get("divergence_rate") or 0
    if rate > 0:
        out.append(
            f"{rate:.0%} of rollouts diverged from the recorded control flow and ran live past "
            "the divergence"
        )
    # (rollouts stopped by their limits have a warning of their own)
    exceptions = {k: v for k, v in (data.get("exceptions") or {}).items() if k != _STOPPED}
    if exceptions:
        out.append(
            "the agent raised in some rollouts (counted as failures): "
            + ", ".join(f"{k} x{v}" for k, v in sorted(exceptions.items()))
        )
    return out
