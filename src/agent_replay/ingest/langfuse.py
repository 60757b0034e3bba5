"""Langfuse trace exports: ``{"trace": {...}, "observations": [...]}`` (the UI export) or the
API's ``TraceWithFullDetails`` (a trace object with ``observations`` inside), or a list of them.

Each observation becomes a :class:`NormalizedSpan` whose attributes are the original OTel span
attributes Langfuse keeps in ``metadata.attributes`` (with ``metadata.resourceAttributes`` and
``metadata.scope``), so the ordinary dialects read it exactly as they would read the span.
Langfuse lifts some attributes out into the observation's ``input`` / ``output`` (and drops
them from ``metadata.attributes``), so whatever the dialects could not fill is then taken from
the observation's ``type``, ``input``, ``output`` and ``model``. The trace's session id groups
traces of one conversation; its scores are kept in the trajectory's metadata.

A list may hold one trace in several entries (an export taken page by page): the entries of
one trace id are read as one trace, their observations (and scores) each kept once.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ..mapping import MappedSpan, map_span
from ..mapping.assemble import assemble_mapped
from ..mapping.dialects.langfuse import decode_json_text, read_observation
from ..mapping.spans import NormalizedSpan
from ..model import Trajectory
from ._common import Reject, timestamp_ns

__all__ = ["is_langfuse", "read_langfuse"]

SOURCE = "import:langfuse"


def is_langfuse(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("observations"), list)
        and (isinstance(doc.get("trace"), dict) or "id" in doc)
    )


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _observation(obs: Any, trace_id: str, position: str) -> MappedSpan:
    if not isinstance(obs, dict):
        raise Reject("observation must be an object", position)
    ident = obs.get("id")
    if not isinstance(ident, str) or not ident:
        raise Reject("observation has no id", position)
    metadata = obs.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    attributes = metadata.get("attributes")
    resource = metadata.get("resourceAttributes")
    scope = metadata.get("scope")
    scope = scope if isinstance(scope, dict) else {}
    parent = obs.get("parentObservationId")
    if parent is not None and not isinstance(parent, str):
        raise Reject("parentObservationId must be a string", position)
    level = obs.get("level")
    # an unnamed observation is named for its type ("generation"), not the generic "span"
    name = _text(obs.get("name")) or _text(obs.get("type")).lower()
    start = timestamp_ns(obs.get("startTime")) or 0
    span = NormalizedSpan(
        trace_id=_text(obs.get("traceId") or trace_id),
        span_id=ident,
        name=name,
        parent_span_id=parent or None,
        start_ns=start,
        end_ns=timestamp_ns(obs.get("endTime")) or start,
        status_code=2 if level == "ERROR" else 0,
        status_message=_text(obs.get("statusMessage")),
        attributes=attributes if isinstance(attributes, dict) else {},
        resource=resource if isinstance(resource, dict) else {},
        scope_name=_text(scope.get("name")),
        scope_version=_text(scope.get("version")),
    )
    mapped = map_span(span)
    if read_observation(
        mapped,
        obs_type=obs.get("type"),
        name=name,
        inputs=obs.get("input"),
        output=obs.get("output"),
        model=obs.get("model"),
    ):
        mapped.dialects.append("langfuse_export")
    usage = obs.get("usageDetails") or obs.get("usage")
    if not isinstance(usage, dict) and not isinstance(obs.get("usageDetails"), dict):
        # no usage object: the export's flattened counts (0 and 0 is "none recorded")
        counts = (obs.get("inputUsage"), obs.get("outputUsage"))
        usage = {"input": counts[0], "output": counts[1]} if any(counts) else None
    if isinstance(usage, dict):
        mapped.set_attr("input_tokens", usage.get("input"))
        mapped.set_attr("output_tokens", usage.get("output"))
    return mapped


def _trace_of(doc: dict) -> dict:
    return doc["trace"] if isinstance(doc.get("trace"), dict) else doc


def _one(parts: list[tuple[dict, str]]) -> list[Trajectory]:
    """The trajectories of one trace, given in one or more entries ``(document, position
    prefix)`` (the pages of an export): the trace's fields are the first entry's, each filled
    in from later entries where it is missing; each observation and score is kept once (an
    observation id that comes again with other content keeps its first copy, and the
    trajectory's capture report notes it)."""
    trace: dict = {}
    raw_scores: list = []
    seen: dict[str, Any] = {}
    mapped: list[MappedSpan] = []
    conflicting = 0
    for doc, position in parts:
        for key, value in _trace_of(doc).items():
            if trace.get(key) is None:
                trace[key] = value
        scores = _trace_of(doc).get("scores")
        known = {_score_key(s) for s in raw_scores}  # an entry's own scores are all kept
        raw_scores.extend(
            s
            for s in (scores if isinstance(scores, list) else ())
            if isinstance(s, dict) and _score_key(s) not in known
        )
        observations = doc.get("observations")
        if not isinstance(observations, list):
            raise Reject("observations must be a list", position)
        for i, obs in enumerate(observations):
            ident = obs.get("id") if isinstance(obs, dict) else None
            if isinstance(ident, str) and ident in seen:
                conflicting += seen[ident] != obs
                continue
            mapped.append(_observation(obs, _text(trace.get("id")), f"{position}observations[{i}]"))
            seen[ident] = obs
    trace_id = _text(trace.get("id"))
    session = trace.get("sessionId")
    if isinstance(session, str) and session:
        for m in mapped:
            m.set_conversation(session)
    scores = [  # each naming its trace: a session of several traces keeps every trace's
        {
            **{
                k: s.get(k)
                for k in ("name", "value", "stringValue", "source", "dataType")
                if k in s
            },
            "trace_id": trace_id or None,
        }
        for s in raw_scores
    ]
    info = {
        k: v
        for k, v in {
            "trace_id": trace_id or None,
            "name": trace.get("name"),
            "session_id": session,
            "user_id": trace.get("userId"),
            "tags": trace.get("tags") or None,
            "scores": scores or None,
        }.items()
        if v is not None
    }
    trajectories = assemble_mapped(mapped, source=SOURCE, metadata={"langfuse": info})
    task = decode_json_text(trace.get("input"))
    if task is not None:
        trajectories = [replace(t, task=task) for t in trajectories]
    if conflicting:
        note = (
            f"{conflicting} observation(s) of trace {trace_id} came again with other content "
            "under the same id; the first copy of each is kept"
        )
        trajectories = [_noted(t, note) for t in trajectories]
    return trajectories


def _score_key(score: dict) -> str:
    """A score's id, or its content when it has none."""
    ident = score.get("id")
    if isinstance(ident, str) and ident:
        return ident
    return json.dumps(score, sort_keys=True, default=str)


def _noted(trajectory: Trajectory, note: str) -> Trajectory:
    capture = dict(trajectory.metadata.get("capture") or {})
    capture["notes"] = [*capture.get("notes", ()), note]
    return replace(trajectory, metadata={**trajectory.metadata, "capture": capture})


def read_langfuse(doc: Any) -> list[Trajectory]:
    """Trajectories of a parsed Langfuse export, one trace or a list of them (the entries of
    one trace id read together). Raises :class:`Reject` on a wrong shape."""
    if not isinstance(doc, list):
        if not is_langfuse(doc):
            raise Reject("not a Langfuse trace export (expected {trace, observations})")
        return _one([(doc, "")])
    traces: dict[Any, list[tuple[dict, str]]] = {}
    for i, item in enumerate(doc):
        if not is_langfuse(item):
            raise Reject("not a Langfuse trace export", f"[{i}]")
        # an entry without a trace id is a trace of its own
        key = _text(_trace_of(item).get("id")) or i
        traces.setdefault(key, []).append((item, f"[{i}]."))
    return [t for parts in traces.values() for t in _one(parts)]
