"""Trajectory reconstruction: mapped spans → ordered, agent-named, tool-linked trajectories.

Spans are grouped by ``gen_ai.conversation.id`` (or another dialect's session id) when a trace
carries one (several traces of one conversation make one trajectory), else by trace id. Within
a group the span tree is walked depth-first, children in start-time order, so a parent
precedes what it contains and siblings keep the order they started in; the steps of several
traces are interleaved by start time, each trace keeping its own order (so traces that
overlap in time come out as :func:`merge` orders them when they arrive one by one). Groups
without any GenAI span are not agent runs and are skipped.

Which spans become steps: every span a dialect claimed as a step; an agent invocation (or a
plan) that contains no steps as a step of its own; and unrecognised leaf spans that are not
inside a step as opaque ``span`` steps. Unrecognised spans *inside* a step (HTTP calls under a
chat span) are details of that step, and unrecognised spans *around* steps are containers;
neither becomes a step. An llm span inside an llm step is the same model call recorded twice
(Google ADK's ``call_llm`` around its ``generate_content`` span): the outer step takes what only
the inner one recorded (content, usage) and the inner one is no step of its own. So is an llm
span *beside* an llm step, under the same parent and within its time, that recorded the same
call (another instrumentation's span with the same response id, or, when either has none, the
same output): Traceloop's LangChain instrumentation does not make a chat model's span current,
so an OpenAI instrumentation of another vendor writes its span of that call next to it. Two
spans of one instrumentation (one tracer scope) are two calls, such as concurrent calls of an
async agent that happen to give the same answer.

Tool results are linked to the llm step that requested them: by tool-call id when both sides
have one (ids may be arrays; any element matches), else by tool name to the oldest unanswered
request of that name. A tool call that no tool span answers but whose response appears in a
later llm step's input messages becomes a *synthesized* tool step just before that llm step
(``attributes["synthesized"]``), and a tool step without a recorded result, linked to its call
by id or by name, takes it from there (``attributes["result_from"]``): a failed one too, whose
result is then what the model was shown of its error (a LangGraph ``ToolNode`` that handled it).
A tool step recorded with only the bare value of its call's one argument (openinference-langchain
writes ``"Paris"`` for ``{"city": "Paris"}``) takes the call's arguments
(``attributes["arguments_from"]``).
The task is the root span's input; when the root has none (ADK, the GenAI conventions'
``invoke_agent``), it is what the first llm step with input messages was asked: its messages
before the first answer, with its system instructions. Every trajectory carries a capture
report saying what is missing for replay.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from .. import canonical
from ..errors import CanonicalEncodingError
from ..model import (
    GENESIS_HASH,
    Continuation,
    Outcome,
    SessionEnd,
    Step,
    StepDraft,
    StepKind,
    Trajectory,
    chain_steps,
)
from . import MappedSpan, NormalizedSpan, Role, map_span
from .messages import call_id, requested_tool_calls, tool_call_parts, tool_responses

__all__ = ["assemble", "assemble_mapped", "capture_report", "continue_session", "merge"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

CONTENT_HINT = (
    "no message content was captured for some steps, so they cannot be replayed or re-drawn: "
    "the OTel GenAI instrumentations write it with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_"
    "CONTENT=span_only; a step note above names the setting of any other instrumentation"
)


def assemble(spans: Iterable[NormalizedSpan], *, source: str = "otel") -> list[Trajectory]:
    """Trajectories from finished spans (any order, any mix of traces). Never raises on span
    content; the same span id seen twice keeps the first copy (as the store's staging does:
    see :func:`first_copies`)."""
    return assemble_mapped([map_span(s) for s in first_copies(spans)[0]], source=source)


def first_copies(spans: Iterable[NormalizedSpan]) -> tuple[list[NormalizedSpan], int]:
    """``spans`` with each (trace id, span id) once, its first copy, and how many later
    copies differed from it (a retried export repeats a span as it was; other content under
    the same ids is a producer reusing span ids)."""
    unique: dict[tuple[str, str], NormalizedSpan] = {}
    conflicting = 0
    for span in spans:
        first = unique.setdefault((span.trace_id, span.span_id), span)
        conflicting += first is not span and first != span
    return list(unique.values()), conflicting


def assemble_mapped(
    mapped: list[MappedSpan],
    *,
    source: str = "otel",
    metadata: Mapping[str, Any] | None = None,
) -> list[Trajectory]:
    """:func:`assemble` for spans already mapped (importers that add their own fields);
    ``metadata`` is added to every trajectory's metadata."""
    conversation_of_trace: dict[str, str] = {}
    for m in sorted(mapped, key=_sort_key):
        if m.conversation_id and m.span.trace_id not in conversation_of_trace:
            conversation_of_trace[m.span.trace_id] = m.conversation_id
    groups: dict[str, list[MappedSpan]] = defaultdict(list)
    for m in mapped:
        groups[conversation_of_trace.get(m.span.trace_id, m.span.trace_id)].append(m)
    trajectories = []
    for key, members in groups.items():
        trajectory = _build(key, members, source, metadata or {})
        if trajectory is not None:
            trajectories.append(trajectory)
    trajectories.sort(key=lambda t: ((t.steps[0].started_ns or 0) if t.steps else 0, t.session_id))
    return trajectories


def _sort_key(m: MappedSpan) -> tuple:
    return (m.span.start_ns, m.span.end_ns, m.span.span_id)


def _step_key(d: StepDraft) -> tuple:
    return (d.started_ns or 0, d.ended_ns or 0, d.span_id or "")


def _interleaved(
    items: list[_T],
    key: Callable[[_T], tuple],
    trace: Callable[[_T], str | None],
    resort: Collection[str | None] = (),
) -> list[_T]:
    """``items`` of several traces (one conversation) interleaved by ``key`` (start time),
    each trace's own items kept in their order (those of the traces in ``resort``, put
    together from two captures, sorted by ``key`` first): traces that overlap in time
    (concurrent turns) are ordered the same way whether they are assembled together or
    merged later."""
    by_trace: dict[str | None, list[_T]] = {}
    for item in items:
        by_trace.setdefault(trace(item), []).append(item)
    for trace_id in resort:
        by_trace.get(trace_id, []).sort(key=key)
    if len(by_trace) < 2:
        return by_trace.popitem()[1] if by_trace else items
    runs = sorted(by_trace.items(), key=lambda kv: (key(kv[1][0]), kv[0] or ""))
    return list(heapq.merge(*(run for _, run in runs), key=key))


@dataclass
class _Draft:
    """A step draft plus what linking needs to know about it: the calls a tool step answers
    and the calls an llm step's output requests (:func:`_requests`, read once: linking asks
    several times, and nothing changes an llm step's output before sealing)."""

    draft: StepDraft
    tool_call_ids: list[str] = field(default_factory=list)
    requests: list[tuple[str | None, str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.requests = _requests(self.draft)

    @property
    def kind(self) -> StepKind:
        return self.draft.kind


def _after_their_requests(items: list[_Draft]) -> list[_Draft]:
    """``items`` with each tool step that starts before the llm step asking for its call (by
    call id: a tool on a host whose clock is behind the model caller's) moved to just after
    that step, so that a replay issues the request first. It came first, unlinked, and a
    re-drawn request could not reach its arguments."""
    asked: dict[str, int] = {}
    for index, item in enumerate(items):
        for cid, _, _ in item.requests:
            if cid is not None:
                asked.setdefault(cid, index)
    if not asked:
        return items
    late: dict[int, list[_Draft]] = defaultdict(list)
    for index, item in enumerate(items):
        if item.kind is StepKind.TOOL:
            requester = next((asked[c] for c in item.tool_call_ids if c in asked), index)
            if requester > index:
                late[requester].append(item)
    if not late:
        return items
    moved = {id(item) for group in late.values() for item in group}
    out: list[_Draft] = []
    for index, item in enumerate(items):
        if id(item) not in moved:
            out.append(item)
        out.extend(late.get(index, ()))
    return out


def _walk(members: list[MappedSpan]) -> list[tuple[MappedSpan, str | None, str | None]]:
    """The spans that become steps, in order, with their acting agent and enclosing plan."""
    by_id = {(m.span.trace_id, m.span.span_id): m for m in members}
    children: dict[tuple[str, str] | None, list[MappedSpan]] = defaultdict(list)
    for m in members:
        parent = (m.span.trace_id, m.span.parent_span_id) if m.span.parent_span_id else None
        children[parent if parent in by_id else None].append(m)
    for siblings in children.values():
        siblings.sort(key=_sort_key)

    def genai_below(m: MappedSpan) -> bool:
        # searches only until the first GenAI span (usually the first child), so each span is
        # searched by the nearest GenAI span above it at most; iterative, as a malformed trace
        # can be deeper than Python's recursion limit, and each span once (parent links of
        # duplicated span ids may form a cycle)
        own = (m.span.trace_id, m.span.span_id)
        stack = list(children.get(own, ()))
        searched: set[tuple[str, str]] = {own}  # a cycle back to ``m`` finds nothing new
        while stack:
            node = stack.pop()
            ident = (node.span.trace_id, node.span.span_id)
            if ident in searched:
                continue
            if node.role != Role.OTHER:
                return True
            searched.add(ident)
            stack.extend(children.get(ident, ()))
        return False

    twins = _sibling_twins(children.values())
    ordered: list[tuple[MappedSpan, str | None, str | None]] = []
    visited: set[tuple[str, str]] = set()
    # each entry: span, acting agent, plan, and the innermost step span it is inside (if any)
    stack: list[tuple[MappedSpan, str | None, str | None, MappedSpan | None]] = [
        (m, None, None, None) for m in reversed(children.get(None, []))
    ]
    unvisited: list[MappedSpan] | None = None  # what the roots did not reach, latest first
    while True:
        if not stack:
            # spans whose parent links form a cycle are reachable from no root: start at the
            # earliest of them rather than drop them
            if unvisited is None:
                unvisited = sorted(
                    (m for m in members if (m.span.trace_id, m.span.span_id) not in visited),
                    key=_sort_key,
                    reverse=True,
                )
            if not unvisited:
                break
            candidate = unvisited.pop()
            if (candidate.span.trace_id, candidate.span.span_id) not in visited:
                stack.append((candidate, None, None, None))
            continue
        m, agent, plan, step = stack.pop()
        ident = (m.span.trace_id, m.span.span_id)
        if ident in visited:
            continue
        visited.add(ident)
        if m.role == Role.AGENT:
            agent = m.agent or m.name or agent
        if step is not None and _same_llm_call(step, m):
            _fold(step, m)
        elif ident in twins:
            _fold(twins[ident], m)
        elif (
            m.role == Role.STEP
            or (m.role in (Role.AGENT, Role.PLAN) and not genai_below(m))
            or (m.role == Role.OTHER and step is None and not children.get(ident))
        ):
            ordered.append((m, m.agent or agent, plan))
        if m.role == Role.PLAN:
            plan = m.name or m.span.name
        if step is None and m.role == Role.STEP:
            step = m
        for child in reversed(children.get(ident, [])):
            stack.append((child, agent, plan, step))
    return ordered


def _same_llm_call(step: MappedSpan, m: MappedSpan) -> bool:
    """Whether ``m`` is an llm span inside the llm step ``step``: the same model call recorded
    twice (Google ADK's ``call_llm`` around its ``generate_content`` span, a framework's llm
    span around the provider instrumentation's)."""
    return step.kind is StepKind.LLM and m.role == Role.STEP and m.kind is StepKind.LLM


def _sibling_twins(
    groups: Iterable[list[MappedSpan]],
) -> dict[tuple[str, str], MappedSpan]:
    """For each llm span that recorded the same call as an llm step beside it (same parent,
    within its time; see :func:`_same_call`), that step. Siblings come sorted by start, and
    only the llm steps still running are compared, so sequential calls cost nothing."""
    twins: dict[tuple[str, str], MappedSpan] = {}
    for siblings in groups:
        llm = [m for m in siblings if m.role == Role.STEP and m.kind is StepKind.LLM]
        if len(llm) < 2:
            continue
        running: list[MappedSpan] = []
        for m in sorted(llm, key=lambda m: (m.span.start_ns, -m.span.end_ns)):
            running = [s for s in running if s.span.end_ns >= m.span.start_ns]
            twin = next(
                (s for s in running if m.span.end_ns <= s.span.end_ns and _same_call(s, m)),
                None,
            )
            if twin is None:
                running.append(m)
            else:
                twins[(m.span.trace_id, m.span.span_id)] = twin
    return twins


def _same_call(a: MappedSpan, b: MappedSpan) -> bool:
    """Whether two llm spans recorded the same call: spans of two instrumentations (one records
    a call once, so two spans of one tracer scope are two calls; spans without a scope may be
    either) with the same response id when both have one, else the same (normalised) output.
    Concurrent calls made through OpenInference, which records no response id, often give
    the same answer."""
    if a.span.scope_name and a.span.scope_name == b.span.scope_name:
        return False
    first, second = a.attributes.get("response_id"), b.attributes.get("response_id")
    if first is not None and second is not None:
        return bool(first == second)
    return a.has_output and b.has_output and a.action == b.action


def _fold(step: MappedSpan, inner: MappedSpan) -> None:
    """Give the llm step what only the llm span inside it recorded (content, model, usage).
    Not an error: the outer span's status says how the call ended (an inner attempt that
    failed and was retried is no failure of the call)."""
    if inner.has_inputs:
        step.set_inputs(inner.inputs)
    if inner.has_output:
        step.set_output(inner.action)
    for key, value in inner.attributes.items():
        step.set_attr(key, value)
    step.dialects.extend(d for d in inner.dialects if d not in step.dialects)


def _kind(m: MappedSpan) -> StepKind:
    if m.role in (Role.STEP, Role.PLAN):
        return m.kind
    return StepKind.AGENT if m.role == Role.AGENT else StepKind.SPAN


def _draft(m: MappedSpan, agent: str | None, plan: str | None) -> _Draft:
    kind = _kind(m)
    attributes: dict[str, Any] = dict(m.attributes)
    attributes["span_name"] = m.span.name
    if m.dialects:
        attributes["dialect"] = ",".join(m.dialects)
    if m.span.dropped_attributes:
        attributes["dropped_attributes"] = m.span.dropped_attributes
    if m.notes:
        attributes["capture_notes"] = list(m.notes)
    if plan is not None:
        attributes["plan"] = plan
    side_effects = bool(attributes.pop("side_effects", False))
    return _Draft(
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
            attributes={k: v for k, v in attributes.items() if v is not None},
        ),
        tool_call_ids=list(m.tool_call_ids) if kind is StepKind.TOOL else [],
    )


def _input_messages(draft: StepDraft) -> Any:
    inputs = draft.inputs
    return inputs.get("messages") if isinstance(inputs, dict) else None


def _requests(draft: StepDraft) -> list[tuple[str | None, str, Any]]:
    """``(id, name, arguments)`` of the tool calls an llm step's output asks for."""
    if draft.kind is not StepKind.LLM:
        return []
    return [
        (call_id(p.get("id")), str(p.get("name") or ""), p.get("arguments"))
        for p in tool_call_parts(draft.action)
    ]


def _linked_call(draft: StepDraft) -> list[str]:
    """The id of the call a tool step was linked to (:func:`_link`), as a list."""
    linked = draft.attributes.get("tool_call_id")
    return [str(linked)] if linked else []


def _synthesize(items: list[_Draft]) -> list[_Draft]:
    """Fill tool results and add tool steps that only later prompts show (see module doc).
    Runs after a first :func:`_link`, so tool steps matched by name count as answers."""
    answered = {cid for item in items for cid in item.tool_call_ids}
    answered.update(
        cid for item in items if item.kind is StepKind.TOOL for cid in _linked_call(item.draft)
    )
    requested: dict[str, tuple[str, Any, StepDraft]] = {}
    unanswered: set[str] = set()  # requested so far and not answered
    out: list[_Draft] = []
    # a tool step's own ids, or the id of the call the first pass linked it to by name
    tools_without_result = {
        cid: item
        for item in items
        if item.kind is StepKind.TOOL and item.draft.action is None
        for cid in item.tool_call_ids or _linked_call(item.draft)
    }
    for item in items:
        draft = item.draft
        if draft.kind is not StepKind.LLM:
            out.append(item)
            continue
        # reading every response in the prompt (the whole conversation so far) is only
        # needed while something could take one: usually every call has its tool span
        if tools_without_result or unanswered:
            for cid, response in tool_responses(_input_messages(draft)).items():
                if cid in tools_without_result:
                    tool = tools_without_result.pop(cid).draft
                    tool.action = response
                    tool.attributes = {**tool.attributes, "result_from": "later llm input"}
                elif cid in unanswered:
                    name, arguments, requester = requested[cid]
                    answered.add(cid)
                    unanswered.discard(cid)
                    synthesized = StepDraft(
                        kind=StepKind.TOOL,
                        name=name or "tool",
                        inputs={"arguments": arguments},
                        action=response,
                        agent=requester.agent,
                        started_ns=draft.started_ns,
                        ended_ns=draft.started_ns,
                        trace_id=draft.trace_id,
                        attributes={"synthesized": "from a later llm input"},
                    )
                    out.append(_Draft(synthesized, tool_call_ids=[cid]))
        for cid, name, arguments in item.requests:
            if cid is not None and cid not in requested:
                requested[cid] = (name, arguments, draft)
                if cid not in answered:
                    unanswered.add(cid)
        out.append(item)
    return out


def _link(items: list[_Draft]) -> None:
    """Name, for each tool step, the llm step whose output requested it."""
    by_id: dict[str, int] = {}
    open_by_name: dict[str, list[tuple[int, str | None]]] = defaultdict(list)
    for index, item in enumerate(items):
        draft = item.draft
        if draft.kind is StepKind.TOOL:
            attributes = dict(draft.attributes)
            attributes.pop("requested_by", None)
            attributes.pop("tool_call_id", None)
            match: tuple[int, str | None] | None = None
            for cid in item.tool_call_ids:
                if cid in by_id:
                    match = (by_id[cid], cid)
                    break
            if match is None and not item.tool_call_ids and open_by_name.get(draft.name):
                match = open_by_name[draft.name][0]
            if match is not None:
                attributes["requested_by"] = match[0]
                if match[1] is not None:
                    attributes["tool_call_id"] = match[1]
                _name_arguments(draft, attributes, items[match[0]].requests, match[1])
                pending = open_by_name.get(draft.name, [])
                if match in pending:
                    pending.remove(match)
            elif item.tool_call_ids:
                attributes["tool_call_id"] = item.tool_call_ids[-1]
            draft.attributes = attributes
        requests = item.requests
        if requests:
            ids = [cid for cid, _, _ in requests if cid is not None]
            if ids:
                draft.attributes = {**draft.attributes, "tool_calls": ids}
            for cid, name, _ in requests:
                if cid is not None:
                    # the latest request of an id: servers that number calls per turn
                    # (call_0, call_1, ...) reuse them in every turn of a conversation
                    by_id[cid] = index
                open_by_name[name].append((index, cid))
        elif draft.kind is StepKind.LLM:
            # content capture off: no output to read the calls from, but a dialect may have
            # kept their ids (``tool_calls``), which still link the tool steps
            for cid in draft.attributes.get("tool_calls") or ():
                by_id[str(cid)] = index


def _name_arguments(
    tool: StepDraft,
    attributes: dict[str, Any],
    requests: list[tuple[str | None, str, Any]],
    cid: str | None,
) -> None:
    """A tool recorded with the bare value of its only argument (openinference-langchain writes
    ``input.value = "Paris"`` for ``get_weather(city="Paris")``) takes the arguments of the call
    that requested it, ``{"city": "Paris"}``, when that call has exactly this one value."""
    inputs = tool.inputs
    if not (
        isinstance(inputs, dict)
        and list(inputs) == ["arguments"]
        and isinstance(inputs["arguments"], str)
    ):
        return
    for request_id, name, arguments in requests:
        if (request_id == cid if cid is not None else name == tool.name) and isinstance(
            arguments, dict
        ):
            if list(arguments.values()) == [inputs["arguments"]]:
                tool.inputs = {"arguments": dict(arguments)}
                attributes["arguments_from"] = "llm tool call"
            return


def _encodable(value: Any, what: str, notes: list[str], *, mapping: bool = False) -> Any:
    """``value``, or its text when it cannot be hashed: JSON text, whole, where JSON can say it
    (a value nested deeper than the canonical encoding goes, such as a text attribute that
    Python 3.12's JSON decoder reads and 3.11's keeps as text), else its repr, cut; under an
    ``unencodable`` key where the field must be a mapping (or JSON could not say it)."""
    try:
        canonical.encode(value)
        return value
    except (CanonicalEncodingError, RecursionError, ValueError, TypeError) as exc:
        notes.append(f"{what} could not be stored as recorded ({type(exc).__name__}); kept as text")
    try:
        text = json.dumps(value)  # ASCII, so always storable
    except (TypeError, ValueError, RecursionError):
        return {"unencodable": repr(value)[:2000]}
    return {"unencodable": text} if mapping else text


def _seal(drafts: list[StepDraft]) -> tuple[tuple[Step, ...], bool]:
    """The chain of ``drafts``, and whether every value was sealed as recorded: a value that
    cannot be hashed is replaced by its text and noted, so one odd span never loses a whole
    trajectory."""
    try:
        return chain_steps(drafts), True
    except (CanonicalEncodingError, RecursionError, ValueError, TypeError):
        pass
    for draft in drafts:
        notes: list[str] = []
        draft.inputs = _encodable(draft.inputs, "inputs", notes)
        draft.action = _encodable(draft.action, "output", notes)
        draft.error = _encodable(draft.error, "error", notes, mapping=True)
        attributes = _encodable(dict(draft.attributes), "attributes", notes, mapping=True)
        if notes:
            if not isinstance(attributes, dict):
                attributes = {"span_name": draft.name}
            attributes["capture_notes"] = [*attributes.get("capture_notes", ()), *notes]
            draft.attributes = attributes
    return chain_steps(drafts), False


def _build(
    key: str, members: list[MappedSpan], source: str, extra: Mapping[str, Any]
) -> Trajectory | None:
    if not any(m.role != Role.OTHER for m in members):
        return None
    ordered = _interleaved(
        _walk(members), lambda entry: _sort_key(entry[0]), lambda entry: entry[0].span.trace_id
    )
    if not ordered:
        return None
    items = _after_their_requests([_draft(m, agent, plan) for m, agent, plan in ordered])
    _link(items)  # first pass: which requests have a tool step (by id or by name)
    linked = len(items)
    items = _synthesize(items)
    if len(items) != linked:
        # again: synthesized steps shift the indices (linking the same steps twice changes
        # nothing, so without synthesized steps the first pass stands)
        _link(items)
    drafts = [item.draft for item in items]

    span_ids = {(m.span.trace_id, m.span.span_id) for m in members}
    roots = sorted((m for m in members if not _has_parent(m, span_ids)), key=_sort_key)
    # traces whose root span is not here (spans of a trace split over files, its root in a
    # later one): their topmost spans stand in for the root until it comes
    rootless = {m.span.trace_id for m in members} - {
        r.span.trace_id for r in roots if not r.span.parent_span_id
    }
    root = roots[0] if roots else ordered[0][0]
    # an ERROR status without an error is no failure (a stream the application abandoned); a
    # conversation of several traces failed when a turn did, with the latest failed turn's
    # error: as merging its turns one flush at a time gives (a later one failing wins)
    crashed = [r for r in roots or [root] if r.span.status_code == 2 and r.error is not None]
    failed = True if crashed else None
    service = root.span.resource.get("service.name")
    logs = sum(len(m.span.logs) for m in members)
    steps, as_recorded = _seal(drafts)  # before the report: it reads the notes sealing adds
    metadata: dict[str, Any] = {
        "source": source,
        "trace_ids": sorted({m.span.trace_id for m in members}),
        "root_span": root.span.name,
        "capture": capture_report(drafts, spans=len(members), logs=logs),
    }
    if service is not None:
        metadata["service"] = service
    if rootless:  # (only then: the digests of whole traces stay as they were)
        metadata[ROOTLESS] = sorted(rootless)
        provisional = {r.span.trace_id for r in crashed}
        if provisional <= rootless:  # failed only by spans that stand in for a missing root
            metadata[PROVISIONAL] = sorted(provisional)
    metadata.update(extra)
    outcome = Outcome(failed=failed, error=crashed[-1].error) if failed else None
    if root.role != Role.STEP and root.has_inputs:
        task, prompt = root.inputs, None
    else:
        prompt = _first_prompt(drafts)
        task = prompt or {"root_span": root.span.name}
    if prompt is None or not as_recorded:
        # a prompt taken from a step's inputs was checked with them as the step was sealed
        notes: list[str] = []
        task = _encodable(task, "task", notes)
        if notes:
            metadata["capture"]["notes"].extend(notes)
    return Trajectory(session_id=key, steps=steps, task=task, outcome=outcome, metadata=metadata)


def _first_prompt(drafts: Sequence[StepDraft]) -> dict[str, Any] | None:
    """What the run was asked when no span around its steps says it: the messages the first
    llm step with input messages was given before any answer, with its system instructions."""
    for draft in drafts:
        messages = _input_messages(draft) if draft.kind is StepKind.LLM else None
        if not messages:
            continue
        asked = []
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "assistant":
                break
            asked.append(message)
        task: dict[str, Any] = {"messages": asked}
        if isinstance(draft.inputs, dict) and draft.inputs.get("system"):
            task["system"] = draft.inputs["system"]
        return task
    return None


def _has_parent(m: MappedSpan, span_ids: set[tuple[str, str]]) -> bool:
    parent = m.span.parent_span_id
    return bool(parent) and (m.span.trace_id, parent) in span_ids


def capture_report(
    steps: Sequence[StepDraft | Step],
    *,
    spans: int | None = None,
    logs: int | None = None,
    before: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What an imported or captured trajectory lacks for replay, computed from its steps.

    Keys: ``steps``, ``dialects``, ``steps_without_content`` (indices),
    ``tool_steps_without_result`` (not failed ones), ``opaque_steps`` (names), ``truncated_steps``,
    ``synthesized_tool_steps``, ``unanswered_tool_calls`` (ids requested by an llm step that
    nothing answered) and ``unanswered_requested_by`` (each one's first requesting step, so
    that a later trace answering it can be linked without reading the steps), ``notes``
    (sentences for people), ``replayable`` (content everywhere and nothing truncated) and
    ``latest_start_ns`` (the latest step start: a later trace continues the session only when
    it starts after it); ``spans`` / ``log_records`` when the caller knows them.

    ``before`` is the report of the steps that precede ``steps`` in the same chain: the result
    is then the report of the whole chain, computed from the new steps only (their indices
    continue after ``before["steps"]``; a call they request that an earlier step answered
    cannot be told apart from an unanswered one, which a chain in time order never has).
    """
    start = int(before.get("steps") or 0) if before else 0
    no_content = [
        start + i
        for i, s in enumerate(steps)
        if s.kind is not StepKind.SPAN and s.inputs is None and s.action is None
    ]
    # a tool that raised has no result to record: its error is what it gave
    no_result = [
        start + i
        for i, s in enumerate(steps)
        if s.kind is StepKind.TOOL and s.action is None and s.error is None
    ]
    opaque = [s.name for s in steps if s.kind is StepKind.SPAN]
    truncated = [start + i for i, s in enumerate(steps) if s.attributes.get("dropped_attributes")]
    synthesized = [start + i for i, s in enumerate(steps) if s.attributes.get("synthesized")]
    answered = {s.attributes.get("tool_call_id") for s in steps if s.kind is StepKind.TOOL}
    unanswered: list[str] = []
    requesters: dict[str, int] = {}  # the first step that asked for each unanswered call
    if before:
        earlier = before.get("unanswered_requested_by") or {}
        requesters.update((c, i) for c, i in earlier.items() if c not in answered)
    for i, s in enumerate(steps):
        if s.kind is StepKind.LLM:
            for cid, _ in requested_tool_calls(s.action):
                if cid is not None and cid not in answered:
                    unanswered.append(cid)
                    requesters.setdefault(cid, start + i)
    notes = [
        f"step {start + i}: {note}"
        for i, s in enumerate(steps)
        for note in s.attributes.get("capture_notes", ())
    ]
    dialects = {d for s in steps for d in str(s.attributes.get("dialect", "")).split(",") if d}
    if before:
        no_content[:0] = before.get("steps_without_content") or ()
        no_result[:0] = before.get("tool_steps_without_result") or ()
        opaque[:0] = before.get("opaque_steps") or ()
        truncated[:0] = before.get("truncated_steps") or ()
        synthesized[:0] = before.get("synthesized_tool_steps") or ()
        unanswered[:0] = [c for c in before.get("unanswered_tool_calls") or () if c not in answered]
        dialects.update(before.get("dialects") or ())
        # the earlier notes, less the summary sentences written from the earlier lists
        summary = set(_summary_notes(before))
        notes[:0] = [n for n in before.get("notes") or () if n not in summary]
    report: dict[str, Any] = {
        "steps": start + len(steps),
        "dialects": sorted(dialects),
        "steps_without_content": no_content,
        "tool_steps_without_result": no_result,
        "opaque_steps": opaque,
        "truncated_steps": truncated,
        "synthesized_tool_steps": synthesized,
        "unanswered_tool_calls": unanswered,
        "unanswered_requested_by": requesters,
        "notes": notes,
        "replayable": not no_content and not truncated,
    }
    notes.extend(_summary_notes(report))
    starts = [s.started_ns for s in steps if s.started_ns is not None]
    if before and before.get("latest_start_ns") is not None:
        starts.append(before["latest_start_ns"])
    if starts:
        report["latest_start_ns"] = max(starts)
    if spans is not None:
        report["spans"] = spans
    if logs:
        report["log_records"] = logs
    return report


# the sentence each non-empty list of a capture report adds to its notes (with its length)
_SUMMARY_NOTES = (
    (
        "truncated_steps",
        "{} step(s) lost attributes at the SDK limit (raise OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT); "
        "their content may be incomplete",
    ),
    ("tool_steps_without_result", "{} tool step(s) have no recorded result"),
    (
        "synthesized_tool_steps",
        "{} tool step(s) were rebuilt from later prompts (no tool span was recorded for them)",
    ),
    ("unanswered_tool_calls", "{} requested tool call(s) have no recorded result"),
    ("opaque_steps", "{} unrecognised span(s) kept as opaque steps"),
)


def _summary_notes(report: Mapping[str, Any]) -> list[str]:
    """The sentences a capture report's lists add to its notes."""
    notes = [CONTENT_HINT] if report.get("steps_without_content") else []
    notes.extend(text.format(len(report[key])) for key, text in _SUMMARY_NOTES if report.get(key))
    return notes


def continue_session(end: SessionEnd, new: Trajectory) -> Continuation | None:
    """``new``, a later capture of the session that ``end`` ends, sealed after the stored chain
    when it simply follows it: its traces are all new to the session and none of its steps
    starts before the latest stored one (a conversation whose turns are separate traces). The
    stored steps are neither loaded nor sealed again. ``None`` when it does not follow (a late
    span re-captured a stored trace, or traces overlap in time): :func:`merge` then interleaves
    the two whole trajectories."""
    old_meta = end.session.metadata
    old_traces, before = old_meta.get("trace_ids"), old_meta.get("capture")
    new_traces = new.metadata.get("trace_ids")
    if (
        end.last is None
        or not new.steps
        or not old_traces
        or not new_traces
        or not isinstance(before, Mapping)
        or before.get("steps") != end.n_steps
        or not set(new_traces).isdisjoint(old_traces)
    ):
        return None
    # after every stored step's start (in depth-first order the last step need not be the
    # latest); reports written before this key existed: the last step's start
    latest = before.get("latest_start_ns", end.last.started_ns or 0)
    if any((s.started_ns or 0) <= latest for s in new.steps):  # a tie: ordered by span id
        return None
    # links name steps by index: those within ``new`` move with it; a tool step answering a
    # call the stored steps asked for (in an earlier trace) is linked to the step that did
    stored_requests = before.get("unanswered_requested_by") or {}
    links: dict[int, dict[str, Any]] = {}
    for j, step in enumerate(new.steps):
        if step.kind is not StepKind.TOOL:
            continue
        link = step.attributes.get("requested_by")
        if isinstance(link, int):
            link += end.n_steps
        else:
            link = stored_requests.get(step.attributes.get("tool_call_id"))
        if link is not None:
            links[j] = {**step.attributes, "requested_by": link}
    metadata = _carried(old_meta, new.metadata)
    metadata["trace_ids"] = sorted({*old_traces, *new_traces})
    # links play no part in the report; the spans and log records add up (traces disjoint)
    report = capture_report(new.steps, before=before)
    counted = new.metadata.get("capture") or {}
    for key in ("spans", "log_records"):
        if key in before or key in counted:
            report[key] = (before.get(key) or 0) + (counted.get(key) or 0)
    metadata["capture"] = report
    session = Trajectory(
        session_id=new.session_id,
        steps=new.steps,
        task=end.session.task,
        seed=new.seed,
        outcome=merged_outcome(end.session.outcome, old_meta, new.outcome, new.metadata, metadata),
        metadata=metadata,
    )
    return Continuation.after(end, session, links)


def _relink(drafts: list[StepDraft], requesters: Mapping[int, tuple[str | None, str]]) -> None:
    """Point each tool step's ``requested_by`` (an index) at where its requester, the span in
    ``requesters`` (by ``id`` of the draft), now is; a tool step whose requester is not among
    the steps before it is linked by its call id to the first earlier llm step that asked
    for that call (one in another trace: a call answered in a later turn)."""
    position = {(d.trace_id, d.span_id): i for i, d in enumerate(drafts) if d.span_id}
    first_request: dict[str, int] = {}
    for i, draft in enumerate(drafts):
        if draft.kind is StepKind.LLM:
            for cid in draft.attributes.get("tool_calls") or ():
                first_request.setdefault(str(cid), i)
            continue
        if draft.kind is not StepKind.TOOL:
            continue
        requester = requesters.get(id(draft))
        link = None if requester is None else position.get(requester)
        if link is None or link >= i:
            link = first_request.get(str(draft.attributes.get("tool_call_id")))
        attributes = {k: v for k, v in draft.attributes.items() if k != "requested_by"}
        if link is not None:
            attributes["requested_by"] = link
        draft.attributes = attributes


def _reunited(drafts: list[StepDraft], earlier: Sequence[Step]) -> list[StepDraft]:
    """``drafts`` of traces captured in parts, as assembling each whole trace makes them: an
    agent span assembled alone became a step (it is one only when no step is inside it,
    :func:`_walk`) and is dropped when a step's span is its child; a step assembled without
    its agent span takes the agent it had in an ``earlier`` capture of the same span, else
    that of its container, else that of a sibling (a step under the same parent span, which
    acts for the same agent)."""
    parents = {(d.trace_id, d.parent_span_id) for d in drafts if d.parent_span_id}
    containers = {
        (d.trace_id, d.span_id): d
        for d in drafts
        if d.kind is StepKind.AGENT and (d.trace_id, d.span_id) in parents
    }
    out = [d for d in drafts if (d.trace_id, d.span_id) not in containers]
    if all(d.agent is not None for d in out):
        return out
    by_span = {(s.trace_id, s.span_id): s.agent for s in earlier if s.agent and s.span_id}
    by_parent = {(c.trace_id, c.span_id): c.agent or c.name for c in containers.values()}
    for step in (*earlier, *out):
        if step.agent is not None and step.parent_span_id:
            by_parent.setdefault((step.trace_id, step.parent_span_id), step.agent)
    for draft in out:
        if draft.agent is None:
            draft.agent = by_span.get((draft.trace_id, draft.span_id)) or by_parent.get(
                (draft.trace_id, draft.parent_span_id)
            )
    return out


def merge(
    old: Trajectory,
    new: Trajectory,
    *,
    covered: Collection[tuple[str, str]] | None = None,
) -> Trajectory:
    """One trajectory from two captures of the same session (a conversation spread over traces).

    When ``new`` follows ``old`` (:func:`continue_session`) its steps come after ``old``'s.
    Otherwise steps of traces only ``old`` has are kept, the rest come from ``new``, and all
    are put in start-time order. ``covered``, the ``(trace_id, span_id)`` of every span ``new``
    was assembled from, tells a trace assembled again whole (every span of its ``old`` steps
    covered: ``new``'s steps replace them) from one assembled from late spans alone (``old``'s
    steps of uncovered spans, and its steps without a span, are kept beside ``new``'s)."""
    continuation = continue_session(SessionEnd.of(old), new)
    if continuation is not None:
        return continuation.whole(old.steps)
    new = _with_stored_content(old, new)
    new_traces = set(new.metadata.get("trace_ids", ()))
    seen = covered if covered is not None else ()

    def uncovered(s: Step) -> bool:
        return s.span_id is None or (s.trace_id, s.span_id) not in seen

    partial = {
        s.trace_id
        for s in old.steps
        if covered is not None and s.trace_id in new_traces and s.span_id and uncovered(s)
    }
    kept = [
        s
        for s in old.steps
        if s.trace_id not in new_traces or (s.trace_id in partial and uncovered(s))
    ]
    if not kept and all(s.agent is not None for s in new.steps):
        return new  # the stored steps are all captured again, as well as before
    # a tool step rebuilt from a later prompt (the tool span was in the other part) gives way
    # to the tool span's own step: one call, one step
    spanned = {
        s.attributes.get("tool_call_id")
        for s in (*kept, *new.steps)
        if s.kind is StepKind.TOOL and not s.attributes.get("synthesized")
    }
    kept = [s for s in kept if not _rebuilt_call(s, spanned)]
    fresh = [s for s in new.steps if not _rebuilt_call(s, spanned)]
    requesters: dict[int, tuple[str | None, str]] = {}  # id(draft) → its requester's span
    sealed: dict[int, Step] = {}  # id(draft) → the step it is a draft of
    drafts = []
    for steps, chosen in ((old.steps, kept), (new.steps, fresh)):
        for step in chosen:
            draft = step.draft()
            sealed[id(draft)] = step
            link = step.attributes.get("requested_by")
            if isinstance(link, int) and 0 <= link < len(steps) and steps[link].span_id:
                requesters[id(draft)] = (steps[link].trace_id, steps[link].span_id)
            drafts.append(draft)
    # each trace in the order it was stored or assembled in, a trace put together from both
    # in start order, the traces interleaved as assembling them together does (_build)
    drafts = _reunited(_interleaved(drafts, _step_key, lambda d: d.trace_id, partial), old.steps)
    _relink(drafts, requesters)
    metadata = _carried(old.metadata, new.metadata)
    metadata["trace_ids"] = sorted(set(old.metadata.get("trace_ids", ())) | new_traces)
    metadata["capture"] = report = capture_report(drafts)
    # how many spans and log records it was assembled from (counts per trace are not kept)
    counts = ("spans", "log_records")
    old_report = old.metadata.get("capture") or {}
    new_report = new.metadata.get("capture") or {}
    if not kept:  # ``new`` holds everything
        earlier: Mapping[str, Any] = {}
    elif partial or new_traces.isdisjoint(old.metadata.get("trace_ids", ())):
        earlier = old_report  # ``new`` adds records ``old`` did not have
    else:  # ``new`` holds again whole traces ``old`` has: counted once, as ``new`` counts them
        earlier = {k: max(0, (old_report.get(k) or 0) - (new_report.get(k) or 0)) for k in counts}
    for key in counts:
        if key in old_report or key in new_report:
            report[key] = (earlier.get(key) or 0) + (new_report.get(key) or 0)
    # the conversation's task is its first turn's: the part whose step comes first, unless
    # that part only knows its root span's name
    first = sealed[id(drafts[0])] if drafts else None
    earlier, later = (new, old) if first is not None and first in fresh else (old, new)
    task = later.task if is_placeholder_task(earlier) else earlier.task
    return Trajectory(
        session_id=new.session_id,
        steps=_placed(drafts, sealed),
        task=task,
        seed=new.seed,
        outcome=merged_outcome(old.outcome, old.metadata, new.outcome, new.metadata, metadata),
        metadata=metadata,
    )


ROOTLESS = "rootless_traces"
"""Metadata key: the traces of a session whose root span was not among its spans yet."""
PROVISIONAL = "outcome_from_rootless"
"""Metadata key: the failed outcome came only from spans standing in for these traces' missing
roots (a child's error the agent may have handled): the root, when it comes, decides."""


def _rooted(metadata: Mapping[str, Any]) -> set[str]:
    return set(metadata.get("trace_ids") or ()) - set(metadata.get(ROOTLESS) or ())


def merged_outcome(
    old: Outcome | None,
    old_meta: Mapping[str, Any],
    new: Outcome | None,
    new_meta: Mapping[str, Any],
    metadata: dict[str, Any],
) -> Outcome | None:
    """The outcome of two captures of one session: ``new``'s, else ``old``'s; a failure that
    only stood in for a missing root counts no more once the other capture has that root.
    ``metadata`` (the merged session's) gets the traces the chosen one still stands in for."""
    for outcome, meta, other in ((new, new_meta, old_meta), (old, old_meta, new_meta)):
        stood_in = set(meta.get(PROVISIONAL) or ())
        left = stood_in - _rooted(other)
        if outcome is not None and (left or not stood_in):
            if left:  # (in its place in the keys if it was there: their order is in the digest)
                metadata[PROVISIONAL] = sorted(left)
            else:
                metadata.pop(PROVISIONAL, None)
            return outcome
    metadata.pop(PROVISIONAL, None)
    return None


def _carried(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``new``'s metadata for the session both describe, keeping what ``old``'s holds of its
    own traces: the Langfuse scores of every trace (each score names its trace), the files
    each was imported from, and its root span's name while ``new`` has none of its own."""
    metadata = dict(new)
    before, now = old.get("langfuse"), new.get("langfuse")
    if isinstance(before, Mapping) and isinstance(now, Mapping):
        scores = list(before.get("scores") or ())
        scores += [s for s in now.get("scores") or () if s not in scores]
        if scores:
            metadata["langfuse"] = {**now, "scores": scores}
    before, now = old.get("import"), new.get("import")
    if isinstance(before, Mapping) and isinstance(now, Mapping):
        files = sorted({*(before.get("files") or ()), *(now.get("files") or ())})
        metadata["import"] = {**now, "files": files}
    rooted = _rooted(old) | _rooted(new)
    rootless = (set(old.get(ROOTLESS) or ()) | set(new.get(ROOTLESS) or ())) - rooted
    if rootless:  # (in its place in ``new``'s keys: their order is in the digest)
        metadata[ROOTLESS] = sorted(rootless)
    else:
        metadata.pop(ROOTLESS, None)
    if not _rooted(new) and _rooted(old) and "root_span" in old:
        metadata["root_span"] = old["root_span"]
    return metadata


def _rebuilt_call(step: Step, spanned: Collection[Any]) -> bool:
    """Whether ``step`` is a tool step rebuilt from a prompt for a call that a tool span of
    its own also recorded."""
    return bool(step.attributes.get("synthesized")) and (
        step.attributes.get("tool_call_id") in spanned
    )


def is_placeholder_task(trajectory: Trajectory) -> bool:
    """Whether ``trajectory``'s task is only its root span's name (no input and no prompt
    was seen in its spans)."""
    return trajectory.task == {"root_span": trajectory.metadata.get("root_span")}


def _bare(step: Step) -> bool:
    """A step captured without content (the capture report's ``steps_without_content``)."""
    return step.kind is not StepKind.SPAN and step.inputs is None and step.action is None


def _with_stored_content(old: Trajectory, new: Trajectory) -> Trajectory:
    """``new`` with what ``old`` knows of spans ``new`` captured again with less.

    A span does not change, so a step of ``old`` and a step of ``new`` for the same span are
    the same operation seen twice. When ``new``'s is bare and ``old``'s has content, the
    content came from records ``new`` was not assembled with (a trace imported again without
    its log records, when event-only capture put the messages there): the stored step is
    kept, not replaced by nothing; and what was learnt from that content (the tool step a
    call was answered by, the task) is kept with it, on the steps whose content is the same."""
    stored = {(s.trace_id, s.span_id): s for s in old.steps if s.span_id}
    if not any(_bare(s) and not _bare(stored.get((s.trace_id, s.span_id), s)) for s in new.steps):
        return new
    where = {(s.trace_id, s.span_id): s.index for s in new.steps if s.span_id}
    steps: list[Step] = []
    prev = GENESIS_HASH
    for step in new.steps:
        before = stored.get((step.trace_id, step.span_id))
        if before is not None and (before.kind, before.name) == (step.kind, step.name):
            same = (before.input_hash, before.output_hash) == (step.input_hash, step.output_hash)
            if same or (_bare(step) and not _bare(before)):
                attributes = dict(before.attributes)
                link = attributes.pop("requested_by", None)
                if isinstance(link, int) and 0 <= link < len(old.steps):
                    asker = old.steps[link]
                    if (asker.trace_id, asker.span_id) in where:
                        attributes["requested_by"] = where[(asker.trace_id, asker.span_id)]
                step = before.placed(step.index, prev, attributes, step.agent)
        if step.prev_hash != prev or step.index != len(steps):
            step = step.placed(len(steps), prev)
        steps.append(step)
        prev = step.step_hash
    metadata = dict(new.metadata)
    was, now = old.metadata.get("capture") or {}, new.metadata.get("capture") or {}
    metadata["capture"] = report = capture_report(steps, spans=now.get("spans"))
    logs = max(int(was.get("log_records") or 0), int(now.get("log_records") or 0))
    if logs or "log_records" in now:
        report["log_records"] = logs
    return replace(new, steps=tuple(steps), task=old.task, metadata=metadata)


def _placed(drafts: Sequence[StepDraft], sealed: Mapping[int, Step]) -> tuple[Step, ...]:
    """``drafts`` of sealed steps (``sealed``, by ``id`` of the draft), reordered and with new
    agents or links, chained from genesis: each step is placed where its draft now is, its
    content neither encoded nor hashed again (sealing the drafts gives the same steps)."""
    prev, steps = GENESIS_HASH, []
    for index, draft in enumerate(drafts):
        step = sealed[id(draft)].placed(index, prev, draft.attributes, draft.agent)
        steps.append(step)
        prev = step.step_hash
    return tuple(steps)
