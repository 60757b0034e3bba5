"""Trajectory reconstruction: mapped spans → ordered, agent-named, tool-linked trajectories.

Spans are grouped by ``gen_ai.conversation.id`` when a trace carries one (several traces of one
conversation make one trajectory), else by trace id. Within a group the span tree is walked
depth-first, children in start-time order, so a parent precedes what it contains and siblings
keep the order they started in. Groups without any GenAI span are not agent runs and are
skipped.

Which spans become steps: every span a dialect claimed as a step; an agent invocation that
contains no steps (a remote agent) as an ``agent`` step; and unrecognised leaf spans that are
not inside a step as opaque ``span`` steps. Unrecognised spans *inside* a step (HTTP calls
under a chat span) are details of that step, and unrecognised spans *around* steps are
containers; neither becomes a step. Every trajectory carries a capture report saying what is
missing for replay.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..model import Outcome, Step, StepDraft, StepKind, Trajectory
from . import MappedSpan, NormalizedSpan, Role, map_span

__all__ = ["assemble", "assemble_mapped", "capture_report", "merge"]

CONTENT_HINT = (
    "no message content was captured; set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="
    "span_only (or the equivalent of your instrumentation) to make these steps replayable"
)


def assemble(spans: Iterable[NormalizedSpan], *, source: str = "otel") -> list[Trajectory]:
    """Trajectories from finished spans (any order, any mix of traces). Never raises on span
    content; the same span id seen twice keeps the last copy."""
    unique: dict[tuple[str, str], NormalizedSpan] = {}
    for span in spans:
        unique[(span.trace_id, span.span_id)] = span
    return assemble_mapped([map_span(s) for s in unique.values()], source=source)


def assemble_mapped(mapped: list[MappedSpan], *, source: str = "otel") -> list[Trajectory]:
    """:func:`assemble` for spans already mapped (importers that add their own fields)."""
    conversation_of_trace: dict[str, str] = {}
    for m in mapped:
        if m.conversation_id and m.span.trace_id not in conversation_of_trace:
            conversation_of_trace[m.span.trace_id] = m.conversation_id
    groups: dict[str, list[MappedSpan]] = defaultdict(list)
    for m in mapped:
        groups[conversation_of_trace.get(m.span.trace_id, m.span.trace_id)].append(m)
    trajectories = []
    for key, members in groups.items():
        trajectory = _build(key, members, source)
        if trajectory is not None:
            trajectories.append(trajectory)
    trajectories.sort(key=lambda t: (t.steps[0].started_ns or 0) if t.steps else 0)
    return trajectories


def _sort_key(m: MappedSpan) -> tuple:
    return (m.span.start_ns, m.span.end_ns, m.span.span_id)


def _build(key: str, members: list[MappedSpan], source: str) -> Trajectory | None:
    if not any(m.role != Role.OTHER for m in members):
        return None
    by_id = {(m.span.trace_id, m.span.span_id): m for m in members}
    children: dict[tuple[str, str] | None, list[MappedSpan]] = defaultdict(list)
    for m in members:
        parent = (m.span.trace_id, m.span.parent_span_id) if m.span.parent_span_id else None
        children[parent if parent in by_id else None].append(m)
    for siblings in children.values():
        siblings.sort(key=_sort_key)

    has_genai_below: dict[tuple[str, str], bool] = {}

    def genai_below(m: MappedSpan) -> bool:
        ident = (m.span.trace_id, m.span.span_id)
        if ident not in has_genai_below:
            has_genai_below[ident] = False  # cycle guard for malformed parent links
            has_genai_below[ident] = any(
                c.role != Role.OTHER or genai_below(c) for c in children.get(ident, ())
            )
        return has_genai_below[ident]

    ordered: list[tuple[MappedSpan, str | None]] = []  # (span, acting agent)
    visited: set[tuple[str, str]] = set()
    stack: list[tuple[MappedSpan, str | None, bool]] = [
        (m, None, False) for m in reversed(children.get(None, []))
    ]
    while stack:
        m, agent, inside_step = stack.pop()
        ident = (m.span.trace_id, m.span.span_id)
        if ident in visited:
            continue
        visited.add(ident)
        if m.role == Role.AGENT:
            agent = m.agent or m.name or agent
        take = False
        if (
            m.role == Role.STEP
            or (m.role == Role.AGENT and not genai_below(m))
            or (m.role == Role.OTHER and not inside_step and not children.get(ident))
        ):
            take = True
        if take:
            ordered.append((m, m.agent or agent))
        below_step = inside_step or m.role == Role.STEP
        for child in reversed(children.get(ident, [])):
            stack.append((child, agent, below_step))
    if not ordered:
        return None

    drafts: list[StepDraft] = []
    requested: dict[str, int] = {}
    for index, (m, agent) in enumerate(ordered):
        kind = (
            m.kind
            if m.role == Role.STEP
            else (StepKind.AGENT if m.role == Role.AGENT else StepKind.SPAN)
        )
        attributes: dict[str, Any] = dict(m.attributes)
        attributes["span_name"] = m.span.name
        if m.dialects:
            attributes["dialect"] = ",".join(m.dialects)
        if m.span.dropped_attributes:
            attributes["dropped_attributes"] = m.span.dropped_attributes
        if m.notes:
            attributes["capture_notes"] = list(m.notes)
        side_effects = bool(attributes.pop("side_effects", False))
        if kind is StepKind.TOOL and m.tool_call_ids:
            for call_id in m.tool_call_ids:
                if call_id in requested:
                    attributes["tool_call_id"] = call_id
                    attributes["requested_by"] = requested[call_id]
                    break
            else:
                attributes["tool_call_id"] = m.tool_call_ids[-1]
        for call_id in m.requested_tool_calls:
            requested[call_id] = index
        if m.requested_tool_calls:
            attributes["tool_calls"] = list(m.requested_tool_calls)
        drafts.append(
            StepDraft(
                kind=kind,
                name=m.name or m.span.name,
                inputs=m.inputs,
                action=m.action,
                agent=agent,
                resamplable=kind is not StepKind.SPAN,
                side_effects=side_effects,
                error=m.error,
                started_ns=m.span.start_ns,
                ended_ns=m.span.end_ns,
                trace_id=m.span.trace_id,
                span_id=m.span.span_id,
                parent_span_id=m.span.parent_span_id,
                attributes=attributes,
            )
        )

    roots = children.get(None, [])
    root = roots[0] if roots else ordered[0][0]
    failed = True if root.span.status_code == 2 else None
    service = root.span.resource.get("service.name")
    metadata: dict[str, Any] = {
        "source": source,
        "trace_ids": sorted({m.span.trace_id for m in members}),
        "root_span": root.span.name,
        "capture": capture_report(drafts, spans=len(members)),
    }
    if service is not None:
        metadata["service"] = service
    outcome = Outcome(failed=failed, error=root.error) if failed else None
    task = (
        root.inputs if root.role != Role.STEP and root.has_inputs else {"root_span": root.span.name}
    )
    return Trajectory(
        session_id=key,
        steps=(),
        task=task,
        outcome=outcome,
        metadata=metadata,
    ).with_steps(drafts)


def capture_report(
    steps: Sequence[StepDraft | Step], *, spans: int | None = None
) -> dict[str, Any]:
    """What an imported or captured trajectory lacks for replay, computed from its steps."""
    no_content = [
        i
        for i, s in enumerate(steps)
        if s.kind is not StepKind.SPAN and s.inputs is None and s.action is None
    ]
    no_result = [i for i, s in enumerate(steps) if s.kind is StepKind.TOOL and s.action is None]
    opaque = [s.name for s in steps if s.kind is StepKind.SPAN]
    truncated = [i for i, s in enumerate(steps) if s.attributes.get("dropped_attributes")]
    notes = [
        f"step {i}: {note}"
        for i, s in enumerate(steps)
        for note in s.attributes.get("capture_notes", ())
    ]
    if no_content:
        notes.append(CONTENT_HINT)
    if truncated:
        notes.append(
            f"{len(truncated)} step(s) lost attributes at the SDK limit (raise "
            "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT); their content may be incomplete"
        )
    if no_result:
        notes.append(f"{len(no_result)} tool step(s) have no recorded result")
    if opaque:
        notes.append(f"{len(opaque)} unrecognised span(s) kept as opaque steps")
    dialects = sorted(
        {d for s in steps for d in str(s.attributes.get("dialect", "")).split(",") if d}
    )
    report: dict[str, Any] = {
        "steps": len(steps),
        "dialects": dialects,
        "steps_without_content": no_content,
        "tool_steps_without_result": no_result,
        "opaque_steps": opaque,
        "truncated_steps": truncated,
        "notes": notes,
        "replayable": not no_content and not truncated,
    }
    if spans is not None:
        report["spans"] = spans
    return report


def merge(old: Trajectory, new: Trajectory) -> Trajectory:
    """One trajectory from two captures of the same session (a conversation spread over traces):
    steps of traces only ``old`` has are kept, the rest come from ``new``, in start-time order."""
    new_traces = set(new.metadata.get("trace_ids", ()))
    kept = [s.draft() for s in old.steps if s.trace_id not in new_traces]
    if not kept:
        return new
    drafts = sorted(
        kept + [s.draft() for s in new.steps],
        key=lambda d: (d.started_ns or 0, d.ended_ns or 0, d.span_id or ""),
    )
    metadata = dict(new.metadata)
    metadata["trace_ids"] = sorted(set(old.metadata.get("trace_ids", ())) | new_traces)
    metadata["capture"] = capture_report(drafts)
    merged = Trajectory(
        session_id=new.session_id,
        task=old.task,
        seed=new.seed,
        outcome=new.outcome or old.outcome,
        metadata=metadata,
    )
    return merged.with_steps(drafts)
