"""The CLI's default summary: the verdict first, then the step table, cost, fidelity, warnings.

Plain text (no colour codes), at most ~100 columns; recorded content is previewed on one line.
Pure function: safe from any thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import Trajectory
from ._data import (
    as_report,
    fmt_effect,
    fmt_interval,
    fmt_rate,
    fmt_spend,
    preview,
    repair_left_out,
    step_content,
    visible,
)
from .explain import QUIET_RUN, unmeasured

__all__ = ["effect_bar", "render_text"]

BAR_HALF = 10  # characters on each side of zero


def effect_bar(value: float | None, half: int = BAR_HALF) -> str:
    """``-----|####      `` : an effect in [-1, 1] drawn around a centre mark."""
    if value is None:
        return " " * half + "·" + " " * half
    cells = min(half, round(abs(value) * half))
    if value >= 0:
        return " " * half + "|" + "#" * cells + " " * (half - cells)
    return " " * (half - cells) + "=" * cells + "|" + " " * half


def render_text(
    result: Any, trajectory: Trajectory | Mapping[str, Any] | None = None, *, width: int = 40
) -> str:
    """The summary of an attribution (``AttributionResult`` or report dict), recorded text
    in it with control and bidirectional characters escaped (safe to print)."""
    data = as_report(result, trajectory)
    steps = data.get("steps") or []
    culprit = data.get("culprit_index")
    lines: list[str] = []
    n = data["n_steps"]
    head = f"agent-replay attribution · session {data['session_id']} · {n} step{'s' * (n != 1)}"
    lines += [head, "=" * min(len(head), 100)]
    if culprit is not None:
        c = steps[culprit]
        title = "CREDITED" if data.get("mode") == "credit" else "CULPRIT "
        lines.append(
            f"{title} step {culprit} · {c['kind']}:{c['name']}"
            + (f" · agent {c['agent']}" if c.get("agent") else "")
        )
        if c.get("interval"):
            lines.append(
                f"         effect {fmt_effect(c.get('effect'))} {fmt_interval(c['interval'])}"
                f" at {c['interval']['confidence']:.1%} confidence"
                + _adjusted(data, c["interval"]["confidence"])
            )
    elif data["verdict"] == "nothing to attribute":
        lines.append("NOTHING TO ATTRIBUTE  no step of this run can be re-drawn")
    else:
        lines.append("UNDECIDED  no step's effect is significantly positive")
    lines.append(f"VERDICT  {data['verdict']} (search stopped: {data['stop_reason']})")
    if data.get("poc_index") is not None and data.get("poc_index") != culprit:
        lines.append(
            f"         point-of-commitment rule (for comparison): step {data['poc_index']}"
        )
    if data.get("agent_shapley"):
        top = _top(data["agent_shapley"])
        if top:
            lines.append(f"         agent-level Shapley: {top}")
    repair = data.get("repair")
    if repair:
        state = "valid" if repair["valid"] else "NOT valid"
        lines.append(
            f"REPAIR   step {repair['step']}: {preview(repair['original'], 30)} -> "
            f"{preview(repair['replacement'], 30)}  ({state}: fails "
            f"{fmt_rate(repair['failure_rate'])} {fmt_interval(repair['interval'], signed=False)}"
            f" of {repair['rollouts']})"
        )
    elif culprit is not None and repair_left_out(data):
        lines.append("REPAIR   left out: the budget left too little for it (see the warning)")
    elif culprit is not None:
        lines.append("REPAIR   none (run with --repair to search one)")
    lines.append("")
    digits = max(2, len(str(len(steps) - 1)))
    lines.append(
        f"{'#':>{digits + 1}}  {'step':<26} {'agent':<12} {'effect':>6}  "
        f"{'-':<{BAR_HALF}}0{'+':>{BAR_HALF}}  detail"
    )
    # a segment's total goes on its first scored row (an observation-only row shows "held")
    first_scored: dict[tuple[int, int], int] = {}
    for s in steps:
        if not s.get("observation_only"):
            first_scored.setdefault(tuple(s["segment"]), s["index"])
    for s in steps:
        lo, hi = s["segment"]
        first = first_scored.get((lo, hi))
        # the middle of a long segment the search did not split: one line says how many
        # steps it holds (a 300-step run printed a line for each)
        if hi - lo > QUIET_RUN and lo + 2 <= s["index"] < hi - 1 and s["index"] != culprit:
            if s["index"] == lo + 2:
                lines.append(
                    f"{'':>{digits + 3}}… {hi - lo - 3} more steps ({lo + 2}-{hi - 2}) of the "
                    f"segment {lo}-{hi - 1} …"
                )
            continue
        mark = ">" if s["index"] == culprit else ("*" if s.get("decisive") else " ")
        measured = s.get("interval") if hi - lo == 1 else s.get("segment_interval")
        if s.get("observation_only"):
            eff, bar, detail = "  held", effect_bar(None), "observation-only (not scored)"
        elif unmeasured(measured):  # no pair of rollouts compared it: unknown, not zero
            eff, bar = "     ?", effect_bar(None)
            detail = "not measured" if hi - lo == 1 else f"steps {lo}-{hi - 1} not measured"
        elif hi - lo == 1:
            eff = fmt_effect(s.get("effect"))
            bar = effect_bar(s.get("effect"))
            detail = fmt_interval(s.get("interval"))
        else:
            eff = "   seg"
            bar = effect_bar(s.get("segment_effect") if s["index"] == first else None)
            detail = (
                f"steps {lo}-{hi - 1} together {fmt_effect(s.get('segment_effect'))} "
                f"{fmt_interval(s.get('segment_interval'))}"
                if s["index"] == first
                else f"(in steps {lo}-{hi - 1})"
            )
        content = step_content(data, s["index"])
        action = content.get("action") if content else s.get("action")
        label = f"{s['kind']}:{s['name']}"[:26]
        agent = (s.get("agent") or "-")[:12]
        lines.append(
            f"{mark}{s['index']:>{digits}}  {label:<26} {agent:<12} {eff:>6}  "
            f"{bar}  {detail}  {preview(action, width) if s['index'] == culprit else ''}".rstrip()
        )
    lines.append("")
    cost = data.get("cost") or {}
    full = cost.get("full_profile_live_steps")
    saving = f" ({cost.get('live_steps', 0) / full:.0%} of a full profile's {full})" if full else ""
    estimated = " (estimated)" if cost.get("tokens_estimated") else ""
    spend = fmt_spend(cost)
    lines.append(
        f"COST     {cost.get('rollouts', 0)} rollouts, {cost.get('live_steps', 0)} live step "
        f"executions{saving}{f' ({spend})' if spend else ''}, {cost.get('tokens', 0)} "
        f"tokens{estimated}, {cost.get('seconds', 0):.2f}s"
    )
    fid = data.get("fidelity") or {}
    lines.append(
        f"FIDELITY factual replays fail {fmt_rate(fid.get('failure_rate'))} "
        f"{fmt_interval(fid.get('interval'), signed=False)} of {fid.get('replays', 0)}; "
        f"diverged {fid.get('diverged', 0)}; "
        f"{'reproduces' if fid.get('reproduces') else 'DOES NOT reproduce'} the recording"
    )
    if data.get("divergence_rate"):
        lines.append(f"         {data['divergence_rate']:.0%} of all rollouts diverged")
    for warning in data.get("warnings") or ():
        lines.append(f"WARNING  {warning}")
    capture = (data.get("trajectory") or {}).get("capture") or {}
    for note in capture.get("notes") or ():
        lines.append(f"CAPTURE  {note}")
    return visible("\n".join(lines))


def _top(shapley: Mapping[str, Any]) -> str | None:
    values = shapley.get("values") or []
    if not values:
        return None
    best = max(range(len(values)), key=lambda i: values[i])
    interval = shapley["intervals"][best]
    return f"{shapley['players'][best]} {values[best]:+.2f} {fmt_interval(interval)}"


def _adjusted(data: Mapping[str, Any], level: float) -> str:
    """Why an interval's level is above the nominal one: the search looked several times."""
    nominal, looks = data.get("confidence"), (data.get("fdr") or {}).get("looks")
    if not isinstance(nominal, (int, float)) or not isinstance(looks, int) or looks < 2:
        return ""
    if level <= nominal:
        return ""
    return f" ({nominal:.0%} over the search's {looks} looks)"
