"""Verdicts back into OpenTelemetry: spans linked to the trace users already look at.

:func:`to_otel` emits, on the given (or the global) ``TracerProvider``:

* ``agent_replay.attribution`` - one root span per attribution, with a span link to the
  culprit step's span (``culprit_span_id``) in the original trace (``trace_id``), and
  ``agent_replay.*`` attributes: verdict, culprit index/label/agent, effect and interval,
  repair, cost, fidelity;
* ``agent_replay.step_effect`` - a child span per decisive step (the culprit first), linked
  to that step's own span when its id is known (from the result or the trajectory).

The attribution is a trace of its own (the original trace has ended); the links are what
Jaeger, Tempo, Phoenix or Langfuse follow from it to the culprit. Attribute names are listed
in docs/reports.md. Link attribute ``agent_replay.link.role`` says what a link points at
(``culprit``, ``step``, ``trace``). Thread-safe like any OTel API call; never raises for an
id it cannot parse (that link is skipped and ``agent_replay.link_errors`` counts it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags

from .._version import __version__
from ..model import Trajectory
from ._data import as_report, step_content

__all__ = ["ROOT_SPAN", "STEP_SPAN", "to_otel"]

ROOT_SPAN = "agent_replay.attribution"
STEP_SPAN = "agent_replay.step_effect"
_SCOPE = "agent_replay.report"
_MAX_VALUE = 4096  # keep attribute values small: backends truncate or drop large ones


def _context(trace_id: str | None, span_id: str | None) -> SpanContext | None:
    try:
        if not trace_id or not span_id:
            return None
        ctx = SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        return ctx if ctx.is_valid else None
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


def to_otel(
    result: Any,
    tracer_provider: trace.TracerProvider | None = None,
    trajectory: Trajectory | Mapping[str, Any] | None = None,
    explanation: Any = None,
) -> SpanContext:
    """Emit the verdict as spans (see the module docstring); returns the root span's context.

    The spans are ended before this returns; flushing them is the provider's business (call
    ``provider.force_flush()`` or ``shutdown()`` before a short-lived process exits).
    """
    data = as_report(result, trajectory)
    tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider=tracer_provider)
    steps = data.get("steps") or []
    culprit = data.get("culprit_index")
    trace_id = data.get("trace_id")
    link_errors = 0

    def step_span_id(index: int) -> tuple[str | None, str | None]:
        if index == culprit and data.get("culprit_span_id"):
            return trace_id, data["culprit_span_id"]
        content = step_content(data, index) or {}
        return content.get("trace_id") or trace_id, content.get("span_id")

    links = []
    if culprit is not None:
        ctx = _context(*step_span_id(culprit))
        if ctx is not None:
            links.append(
                Link(ctx, {"agent_replay.link.role": "culprit", "agent_replay.step.index": culprit})
            )
        elif data.get("culprit_span_id"):
            link_errors += 1
    if not links and trace_id:
        # no culprit span: point at the first step we know of in the original trace
        for step in steps:
            ctx = _context(*step_span_id(step["index"]))
            if ctx is not None:
                links.append(Link(ctx, {"agent_replay.link.role": "trace"}))
                break

    cost = data.get("cost") or {}
    fidelity = data.get("fidelity") or {}
    repair = data.get("repair") or {}
    c = steps[culprit] if culprit is not None else {}
    interval = c.get("interval") or {}
    attributes = _clean(
        {
            "agent_replay.schema_version": data.get("schema_version"),
            "agent_replay.session_id": data["session_id"],
            "agent_replay.mode": data.get("mode"),
            "agent_replay.method": data.get("method"),
            "agent_replay.verdict": data["verdict"],
            "agent_replay.stop_reason": data.get("stop_reason"),
            "agent_replay.confidence": data.get("confidence"),
            "agent_replay.n_steps": data["n_steps"],
            "agent_replay.decided": culprit is not None,
            "agent_replay.culprit.index": culprit,
            "agent_replay.culprit.label": data.get("culprit_label"),
            "agent_replay.culprit.agent": data.get("culprit_agent"),
            "agent_replay.culprit.span_id": data.get("culprit_span_id"),
            "agent_replay.original_trace_id": trace_id,
            "agent_replay.effect": c.get("effect"),
            "agent_replay.effect.low": interval.get("low"),
            "agent_replay.effect.high": interval.get("high"),
            "agent_replay.decisive": list(data.get("decisive") or []) or None,
            "agent_replay.poc_index": data.get("poc_index"),
            "agent_replay.repair.step": repair.get("step"),
            "agent_replay.repair.original": _text(repair["original"]) if repair else None,
            "agent_replay.repair.replacement": _text(repair["replacement"]) if repair else None,
            "agent_replay.repair.valid": repair.get("valid"),
            "agent_replay.repair.failure_rate": repair.get("failure_rate"),
            "agent_replay.cost.rollouts": cost.get("rollouts"),
            "agent_replay.cost.live_steps": cost.get("live_steps"),
            "agent_replay.cost.tokens": cost.get("tokens"),
            "agent_replay.cost.seconds": cost.get("seconds"),
            "agent_replay.fidelity.failure_rate": fidelity.get("failure_rate"),
            "agent_replay.fidelity.reproduces": fidelity.get("reproduces"),
            "agent_replay.warnings": list(data.get("warnings") or []) or None,
        }
    )
    if explanation is not None:
        ex = explanation.to_dict() if hasattr(explanation, "to_dict") else dict(explanation)
        attributes.update(
            {
                "agent_replay.explanation.where": _text(ex["where"]),
                "agent_replay.explanation.why": _text(ex["why"]),
                "agent_replay.explanation.fix": _text(ex["fix"]),
            }
        )
    seconds = float(cost.get("seconds") or 0.0)
    end = time.time_ns()
    start = end - int(seconds * 1e9)
    root = tracer.start_span(
        ROOT_SPAN, kind=SpanKind.INTERNAL, attributes=attributes, links=links, start_time=start
    )
    with trace.use_span(root, end_on_exit=False):
        order = [culprit] if culprit is not None else []
        order += [i for i in data.get("decisive") or () if i != culprit]
        for index in order:
            step = steps[index]
            step_links = []
            ctx = _context(*step_span_id(index))
            if ctx is not None:
                step_links.append(
                    Link(ctx, {"agent_replay.link.role": "step", "agent_replay.step.index": index})
                )
            step_interval = step.get("interval") or {}
            child = tracer.start_span(
                STEP_SPAN,
                kind=SpanKind.INTERNAL,
                links=step_links,
                start_time=start,
                attributes=_clean(
                    {
                        "agent_replay.step.index": index,
                        "agent_replay.step.label": f"{step['kind']}:{step['name']}",
                        "agent_replay.step.agent": step.get("agent"),
                        "agent_replay.step.culprit": index == culprit,
                        "agent_replay.effect": step.get("effect"),
                        "agent_replay.effect.low": step_interval.get("low"),
                        "agent_replay.effect.high": step_interval.get("high"),
                        "agent_replay.p_value": step.get("p_value"),
                    }
                ),
            )
            child.end(end_time=end)
    if link_errors:
        root.set_attribute("agent_replay.link_errors", link_errors)
    root.end(end_time=end)
    return root.get_span_context()
