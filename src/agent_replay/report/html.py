"""One standalone HTML file per attribution: verdict first, then the evidence.

No network assets, no JavaScript: inline CSS and SVG, ``<details>`` for step content, and a
Content-Security-Policy that forbids scripts, so the file is safe to open and to mail around.
Every recorded value (step content, names, ids, warnings, capture notes) goes through
:func:`html.escape` - never straight into markup or attributes - and the report JSON embedded
for machines sits in ``<script type="application/json">`` with ``<``, ``>``, ``&`` and the
JavaScript line separators escaped, so no recorded ``</script>`` can end it.

Pure functions; :func:`write_html` writes one file. Safe from any thread.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from string import Template
from typing import Any

from ..attribution.drift import entropy_bits
from ..canonical import plain_json
from ..model import Trajectory
from ._data import (
    as_report,
    finite,
    fmt_effect,
    fmt_interval,
    fmt_rate,
    fmt_spend,
    preview,
    step_content,
    visible,
)
from .explain import Explanation, explain, unmeasured

__all__ = ["CSP", "embed_json", "render_html", "write_html"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'"


def h(value: Any) -> str:
    """Escape anything for HTML text and attribute values."""
    return html.escape(visible(value if isinstance(value, str) else str(value)), quote=True)


def embed_json(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>`` can appear)."""
    text = json.dumps(plain_json(data), ensure_ascii=False, sort_keys=False)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def pretty(value: Any) -> str:
    """Recorded content for a ``<pre>``: strings as they are, everything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


_PAGE = Template(
    """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="$csp">
<meta name="generator" content="agent-replay">
<link rel="icon" href="data:,">
<title>$title</title>
<style>$css</style>
</head>
<body>
<main>
$body
</main>
<script type="application/json" id="agent-replay-report">$data</script>
</body>
</html>
"""
)

CSS = """
:root { --fg:#1d2330; --muted:#5d6677; --line:#d9dee7; --bad:#c0392b; --good:#1e8449;
  --warn:#b9770e; --accent:#2c5aa0; --bg:#fbfcfe; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
  color:var(--fg); background:var(--bg); }
main { max-width:1120px; margin:0 auto; padding:24px 20px 60px; }
h1 { font-size:22px; margin:0 0 4px; } h2 { font-size:17px; margin:28px 0 8px;
  border-bottom:1px solid var(--line); padding-bottom:4px; }
.sub { color:var(--muted); font-size:13px; word-break:break-all; }
.verdict { border:2px solid var(--bad); border-radius:10px; padding:14px 18px; background:#fff;
  margin-top:14px; }
.verdict.undecided { border-color:var(--warn); }
.verdict .big { font-size:20px; font-weight:600; }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px;
  font-weight:600; color:#fff; background:var(--muted); vertical-align:middle; }
.badge.separated { background:var(--bad); } .badge.likely { background:var(--warn); }
.badge.valid { background:var(--good); }
.repair { margin-top:10px; padding:8px 12px; background:#eef7f0; border-radius:8px; }
.repair.invalid { background:#fdf2e9; }
.grid { display:grid; grid-template-columns:90px 1fr; gap:4px 14px; }
.grid dt { font-weight:600; color:var(--muted); } .grid dd { margin:0; }
table { border-collapse:collapse; width:100%; font-size:14px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line);
  vertical-align:top; }
th { font-size:12px; color:var(--muted); text-transform:uppercase; letter-spacing:.03em; }
tr.culprit td { background:#fdecea; } tr.seg td.eff { color:var(--muted); }
td.num { font-variant-numeric:tabular-nums; white-space:nowrap; }
details summary { cursor:pointer; color:var(--accent); }
pre { background:#f3f5f9; padding:8px; border-radius:6px; overflow:auto; max-height:320px;
  white-space:pre-wrap; word-break:break-word; font-size:12.5px; margin:4px 0; }
.role { font-size:12px; padding:0 6px; border-radius:8px; background:#eceff4; }
.role.decisive { background:var(--bad); color:#fff; } .role.contributing { background:#f6d7a7; }
.role.locked-in { background:#d6dbe4; } .role.unresolved { background:#f9e79f; }
.role.protective { background:#c8e6c9; }
.warn { color:var(--warn); } .muted { color:var(--muted); }
svg text { font:11px system-ui,sans-serif; fill:var(--muted); }
.scroll { overflow-x:auto; }
.charts { display:grid; grid-template-columns:1fr 1fr; gap:18px; }
@media (max-width:900px) { .charts { grid-template-columns:1fr; } }
"""


def render_html(
    result: Any,
    trajectory: Trajectory | Mapping[str, Any] | None = None,
    explanation: Explanation | Mapping[str, Any] | None = None,
) -> str:
    """The report page for an ``AttributionResult`` or report dict (see module docstring)."""
    data = as_report(result, trajectory)
    if explanation is None and isinstance(data.get("explanation"), Mapping):
        explanation = Explanation.from_dict(data["explanation"])
    elif isinstance(explanation, Mapping):
        explanation = Explanation.from_dict(explanation)
    if explanation is None:
        explanation = explain(data)
    data["explanation"] = explanation.to_dict()
    body = "\n".join(
        [
            _header(data),
            _verdict(data),
            _explanation(explanation),
            _timeline(data, explanation),
            _curves(data),
            _shapley(data),
            _cost_fidelity(data),
            _warnings(data),
        ]
    )
    return _PAGE.substitute(
        csp=h(CSP),
        title=h(f"agent-replay · {data['session_id']}"),
        css=CSS,
        body=body,
        data=embed_json(data),
    )


def write_html(
    path: str | os.PathLike[str],
    result: Any,
    trajectory: Trajectory | Mapping[str, Any] | None = None,
    explanation: Explanation | Mapping[str, Any] | None = None,
) -> str:
    """Write the report page to ``path``; returns the path as a string."""
    text = render_html(result, trajectory, explanation)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return os.fspath(path)


# -- sections -------------------------------------------------------------------------------


def _header(data: Mapping[str, Any]) -> str:
    question = (
        "Which step secured the success?"
        if data.get("mode") == "credit"
        else "Which step made the run fail?"
    )
    traj = data.get("trajectory") or {}
    extra = f" · source {h(traj['source'])}" if traj.get("source") else ""
    return (
        f"<h1>{h(question)}</h1>"
        f'<div class="sub">session <b>{h(data["session_id"])}</b> · {h(data["n_steps"])} steps'
        f"{extra} · method {h(data.get('method'))} · report schema "
        f"{h(data.get('schema_version'))}</div>"
    )


def _verdict(data: Mapping[str, Any]) -> str:
    steps = data.get("steps") or []
    culprit = data.get("culprit_index")
    verdict = str(data["verdict"])
    badge = f'<span class="badge {h(verdict.split()[0])}">{h(verdict)}</span>'
    parts = []
    if culprit is not None:
        c = steps[culprit]
        agent = f" · agent <b>{h(c['agent'])}</b>" if c.get("agent") else ""
        interval = c.get("interval")
        level = f" at {interval['confidence']:.1%}" if interval else ""
        credit = data.get("mode") == "credit"  # which step secured a success
        title, event = ("Credited step", "success") if credit else ("Culprit", "failure")
        parts.append(
            f'<div class="big">{title}: step {h(culprit)} · {h(c["kind"])}:{h(c["name"])}'
            f"{agent} {badge}</div>"
            f"<div>effect on the {event} probability <b>{h(fmt_effect(c.get('effect')))}</b> "
            f"{h(fmt_interval(interval))}{h(level)} · search stopped: "
            f"{h(data.get('stop_reason'))}</div>"
        )
    else:
        parts.append(
            f'<div class="big">No culprit named {badge}</div>'
            f"<div>search stopped: {h(data.get('stop_reason'))}</div>"
        )
    repair = data.get("repair")
    if repair:
        valid = bool(repair.get("valid"))
        parts.append(
            f'<div class="repair{"" if valid else " invalid"}"><b>Repair</b> '
            f'<span class="badge{" valid" if valid else ""}">'
            f"{'validated' if valid else 'not validated'}</span> step {h(repair['step'])}: "
            f"<code>{h(preview(repair['original'], 80))}</code> → "
            f"<code>{h(preview(repair['replacement'], 80))}</code> · with it the run fails "
            f"{h(fmt_rate(repair['failure_rate']))} "
            f"{h(fmt_interval(repair.get('interval'), signed=False))} of "
            f"{h(repair['rollouts'])} rollouts (threshold {h(fmt_rate(repair['threshold']))})"
            f"</div>"
        )
    klass = "verdict" if culprit is not None else "verdict undecided"
    return f'<section class="{klass}" id="verdict">{"".join(parts)}</section>'


def _explanation(ex: Explanation) -> str:
    rows = "".join(
        f"<dt>{h(k)}</dt><dd>{h(v)}</dd>"
        for k, v in (("What", ex.what), ("Where", ex.where), ("Why", ex.why), ("Fix", ex.fix))
    )
    caveats = "".join(f'<li class="warn">{h(c)}</li>' for c in ex.caveats)
    return (
        f'<section id="explanation"><h2>Explanation</h2><dl class="grid">{rows}</dl>'
        + (f"<ul>{caveats}</ul>" if caveats else "")
        + "</section>"
    )


def _effect_svg(step: Mapping[str, Any], isolated: bool) -> str:
    width, height, pad = 220, 18, 6

    def x(value: float) -> float:
        return round(pad + (max(-1.0, min(1.0, value)) + 1) / 2 * (width - 2 * pad), 2)

    value = step.get("effect") if isolated else step.get("segment_effect")
    interval = step.get("interval") if isolated else step.get("segment_interval")
    parts = [
        f'<line x1="{x(0)}" y1="1" x2="{x(0)}" y2="{height - 1}" stroke="#9aa3b2"/>',
    ]
    if finite(value):
        left, right = sorted((x(0), x(value)))
        color = "#c0392b" if value > 0 else "#1e8449"
        style = (
            f'fill="{color}"'
            if isolated
            else f'fill="none" stroke="{color}" stroke-dasharray="3 2"'
        )
        parts.append(
            f'<rect x="{left}" y="4" width="{max(0.5, round(right - left, 2))}" '
            f'height="{height - 8}" {style}/>'
        )
    if interval:
        lo, hi = x(interval["low"]), x(interval["high"])
        mid = height / 2
        parts.append(
            f'<path d="M{lo} {mid}H{hi}M{lo} {mid - 4}V{mid + 4}M{hi} {mid - 4}V{mid + 4}" '
            'stroke="#1d2330" stroke-width="1.2" fill="none"/>'
        )
    title = (
        f"effect {fmt_effect(value)} {fmt_interval(interval)}"
        if isolated
        else f"segment {step['segment'][0]}-{step['segment'][1] - 1} together "
        f"{fmt_effect(value)} {fmt_interval(interval)}"
    )
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
        f"<title>{h(title)}</title>{''.join(parts)}</svg>"
    )


def _content_details(content: Mapping[str, Any] | None, step: Mapping[str, Any]) -> str:
    if content is None:
        if step.get("action") is None:
            return '<span class="muted">content not in this report</span>'
        return f"<details><summary>action</summary><pre>{h(pretty(step['action']))}</pre></details>"
    blocks = [
        ("inputs", content.get("inputs")),
        ("action", content.get("action")),
    ]
    if content.get("observed"):
        blocks.append(("observation", content.get("observation")))
    if content.get("error"):
        blocks.append(("error", content.get("error")))
    inner = "".join(f"<b>{h(name)}</b><pre>{h(pretty(value))}</pre>" for name, value in blocks)
    hashes = f'<div class="sub">step hash {h(content.get("step_hash", ""))}'
    if content.get("span_id"):
        hashes += f" · span {h(content['span_id'])} · trace {h(content.get('trace_id') or '')}"
    hashes += "</div>"
    return (
        f"<details><summary>{h(preview(content.get('action'), 48))}</summary>{inner}{hashes}"
        "</details>"
    )


def _timeline(data: Mapping[str, Any], ex: Explanation) -> str:
    roles = {t.index: t for t in ex.trace}
    culprit = data.get("culprit_index")
    rows = []
    for s in data.get("steps") or []:
        i = s["index"]
        lo, hi = s["segment"]
        isolated = hi - lo == 1
        if s.get("observation_only"):
            effect_cell = '<span class="muted">held · not scored</span>'
            numbers = "—"
        elif unmeasured(s.get("interval") if isolated else s.get("segment_interval")):
            effect_cell = '<span class="muted">not measured</span>'
            numbers = "unknown (no rollout pair compared it)"
        elif isolated:
            effect_cell = _effect_svg(s, True)
            numbers = f"{fmt_effect(s.get('effect'))} {fmt_interval(s.get('interval'))}"
        else:
            effect_cell = _effect_svg(s, False)
            numbers = (
                f"steps {lo}-{hi - 1}: {fmt_effect(s.get('segment_effect'))} "
                f"{fmt_interval(s.get('segment_interval'))}"
            )
        trace = roles.get(i)
        role = (
            f'<span class="role {h(trace.role)}" title="{h(trace.note)}">{h(trace.role)}</span>'
            if trace
            else ""
        )
        flags = []
        if s.get("side_effects"):
            flags.append("side effects")
        if s.get("decisive"):
            flags.append("decisive (FDR)")
        klass = "culprit" if i == culprit else ("" if isolated else "seg")
        rows.append(
            f'<tr class="{klass}" id="step-{h(i)}"><td class="num">{h(i)}</td>'
            f'<td><b>{h(s["kind"])}:{h(s["name"])}</b><div class="sub">{h(", ".join(flags))}'
            f"</div></td><td>{h(s.get('agent') or '-')}</td><td>{role}</td>"
            f'<td class="eff">{effect_cell}</td><td class="num">{h(numbers)}</td>'
            f"<td>{_content_details(step_content(data, i), s)}</td></tr>"
        )
    return (
        '<section id="timeline"><h2>Step timeline</h2>'
        f'<p class="sub">Bars: effect on the {_event(data)} probability (red raises it), '
        "whiskers: "
        "interval. Dashed: steps the search did not split - the bar is their segment's total "
        'effect.</p><div class="scroll"><table><thead><tr><th>#</th><th>step</th><th>agent</th>'
        "<th>role</th><th>effect</th><th>estimate</th><th>inputs / action / observation</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _chart(
    points: Sequence[tuple[int, float, float | None, float | None]],
    n: int,
    *,
    title: str,
    y_label: str,
    mark: int | None = None,
) -> str:
    width, height = 520, 232
    left, right, top, bottom = 44, 14, 14, 42  # room for the tick labels and the axis title
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(position: float) -> float:
        return round(left + (position / max(1, n)) * plot_w, 2)

    def y(value: float) -> float:
        return round(top + (1 - max(0.0, min(1.0, value))) * plot_h, 2)

    parts = [
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" '
        'stroke="#d9dee7"/>'
    ]
    for tick in (0, 0.5, 1):
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(tick)}" y2="{y(tick)}" '
            'stroke="#eef1f6"/>'
            f'<text x="{left - 6}" y="{y(tick) + 4}" text-anchor="end">{tick:g}</text>'
        )
    step_every = max(1, n // 12)
    for position in range(0, n + 1, step_every):
        parts.append(
            f'<text x="{x(position)}" y="{top + plot_h + 14}" text-anchor="middle">'
            f"{position}</text>"
        )
    if mark is not None:
        parts.append(
            f'<rect x="{x(mark)}" y="{top}" width="{round(x(mark + 1) - x(mark), 2)}" '
            f'height="{plot_h}" fill="#fdecea"><title>culprit step {mark}</title></rect>'
        )
    if points:
        path = " ".join(f"{x(p)},{y(v)}" for p, v, _, _ in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#2c5aa0" stroke-width="2"/>')
    for position, value, low, high in points:
        if low is not None and high is not None:
            parts.append(
                f'<line x1="{x(position)}" x2="{x(position)}" y1="{y(low)}" y2="{y(high)}" '
                'stroke="#2c5aa0" stroke-opacity=".45" stroke-width="6"/>'
            )
        label = f"position {position}: {value:.2f}" + (
            f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
        )
        parts.append(
            f'<circle cx="{x(position)}" cy="{y(value)}" r="3.5" fill="#2c5aa0">'
            f"<title>{h(label)}</title></circle>"
        )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">'
        "prefix position i (steps before i held)</text>"
        f'<text x="12" y="{top + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + plot_h / 2})">{h(y_label)}</text>'
    )
    return (
        f'<figure><svg width="100%" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{h(title)}"><title>{h(title)}</title>{"".join(parts)}</svg>'
        f'<figcaption class="sub">{h(title)}</figcaption></figure>'
    )


def _curves(data: Mapping[str, Any]) -> str:
    n = int(data["n_steps"])
    event = "success" if data.get("mode") == "credit" else "failure"
    curve = [
        p
        for p in sorted(data.get("curve") or [], key=lambda p: p["position"])
        if finite(p.get("failure_rate"))
    ]
    failure = [
        (p["position"], p["failure_rate"], p["interval"]["low"], p["interval"]["high"])
        for p in curve
    ]
    entropy = [(p["position"], entropy_bits(p["failure_rate"]), None, None) for p in curve]
    culprit = data.get("culprit_index")
    return (
        '<section id="curves"><h2>Prefix failure curve and drift</h2>'
        f'<p class="sub">F(i): {h(event)} rate when steps before i are held and the rest '
        "re-drawn (dots: evaluated positions, bars: intervals). The step effect e_i = F(i+1) - "
        "F(i), estimated on paired rollouts (the same seeds at both positions), so it can differ "
        "from the difference of the two values plotted, which use every rollout at each "
        "position. Entropy H(F(i)) in bits: how open the outcome still is at each prefix (1 = a "
        'coin flip, 0 = settled).</p><div class="charts">'
        + _chart(failure, n, title=f"F(i), the prefix {event} curve", y_label="F(i)", mark=culprit)
        + _chart(entropy, n, title="H(F(i)), outcome entropy (drift)", y_label="bits", mark=culprit)
        + "</div></section>"
    )


def _shapley(data: Mapping[str, Any]) -> str:
    blocks = []
    for key, title in (
        ("shapley", "Step Shapley values"),
        ("agent_shapley", "Agent Shapley values"),
    ):
        sh = data.get(key)
        if not sh:
            continue
        rows = "".join(
            f'<tr><td>{h(player)}</td><td class="num">{h(fmt_effect(value))} '
            f"{h(fmt_interval(interval))}</td></tr>"
            for player, value, interval in zip(
                sh["players"], sh["values"], sh["intervals"], strict=False
            )
        )
        blocks.append(
            f'<h3>{h(title)}</h3><p class="sub">{h(sh["method"])}, {h(sh["evaluations"])} '
            f"coalition evaluations, v(all) - v(none) = {sh['v_all'] - sh['v_none']:+.2f}, "
            f"efficiency gap {sh['efficiency_gap']:+.3f}</p>"
            f'<div class="scroll"><table>{rows}</table></div>'
        )
    if not blocks:
        return ""
    return '<section id="shapley"><h2>Shapley values</h2>' + "".join(blocks) + "</section>"


def _cost_fidelity(data: Mapping[str, Any]) -> str:
    cost = data.get("cost") or {}
    fid = data.get("fidelity") or {}
    fdr = data.get("fdr") or {}
    full = cost.get("full_profile_live_steps")
    rows = [
        ("rollouts", cost.get("rollouts")),
        ("live step executions", cost.get("live_steps")),
        *([("of them", spend)] if (spend := fmt_spend(cost)) else []),
        ("a full profile would need", full),
        (
            "tokens",
            f"{cost.get('tokens', 0)}{' (estimated)' if cost.get('tokens_estimated') else ''}",
        ),
        ("wall time", f"{cost.get('seconds', 0):.2f} s"),
        (
            "factual replays",
            f"fail {fmt_rate(fid.get('failure_rate'))} "
            f"{fmt_interval(fid.get('interval'), signed=False)} of {fid.get('replays')}; "
            f"{fid.get('diverged', 0)} diverged; "
            f"{'reproduces' if fid.get('reproduces') else 'does NOT reproduce'} the recording",
        ),
        ("rollouts diverged", fmt_rate(data.get("divergence_rate"))),
        (
            "exceptions",
            ", ".join(f"{k} x{v}" for k, v in sorted((data.get("exceptions") or {}).items()))
            or "none",
        ),
        (
            "false discoveries",
            f"decisive steps by {fdr.get('method')} at q = {fdr.get('q')} on "
            f"{fdr.get('e_values') if fdr.get('method') == 'e-BH' else fdr.get('p_values')}; "
            "the effect intervals are a separate statement (each corrected for the search's "
            "looks, not across steps), so a decisive step's interval can still include 0",
        ),
        ("point of commitment", data.get("poc_index")),
        ("confidence", data.get("confidence")),
    ]
    body = "".join(
        f"<tr><th>{h(k)}</th><td>{h('-' if v is None else v)}</td></tr>" for k, v in rows
    )
    return (
        '<section id="cost"><h2>Cost of the analysis and replay fidelity</h2>'
        f"<table>{body}</table></section>"
    )


def _warnings(data: Mapping[str, Any]) -> str:
    items = [f'<li class="warn">{h(w)}</li>' for w in data.get("warnings") or ()]
    fid = data.get("fidelity") or {}
    if fid.get("warning") and fid["warning"] not in (data.get("warnings") or ()):
        items.append(f'<li class="warn">{h(fid["warning"])}</li>')
    traj = data.get("trajectory") or {}
    capture = traj.get("capture")
    cap = ""
    if capture:
        notes = "".join(f"<li>{h(n)}</li>" for n in capture.get("notes") or ())
        cap = (
            "<h3>What was not captured</h3>"
            + (f"<ul>{notes}</ul>" if notes else "<p>nothing reported missing</p>")
            + f"<details><summary>capture report</summary><pre>{h(pretty(capture))}</pre></details>"
        )
    elif traj:
        cap = (
            '<h3>What was not captured</h3><p class="sub">no capture report (a native '
            "recording holds full content)</p>"
        )
    if not items and not cap:
        return ""
    return (
        '<section id="warnings"><h2>Warnings and capture</h2>'
        + (f"<ul>{''.join(items)}</ul>" if items else "<p>no warnings</p>")
        + cap
        + "</section>"
    )


def _event(data: Mapping[str, Any]) -> str:
    """What the effects are on: ``success`` in credit mode, else ``failure``."""
    return "success" if data.get("mode") == "credit" else "failure"
