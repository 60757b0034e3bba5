"""Trajectories from plain step records: ``from_steps`` and the JSONL layout.

**Step record** (a mapping; every key but ``kind`` and ``name`` is optional)::

    {"kind": "llm" | "tool" | "memory" | "agent" | "retrieval" | "embedding" | "span",
     "name": str, "inputs": any, "action": any, "observation": any, "output": any,
     "agent": str, "error": {"type": str, "message": str}, "side_effects": bool,
     "resamplable": bool, "attributes": {...}, "started_ns": int, "ended_ns": int,
     "trace_id": str, "span_id": str, "parent_span_id": str, "session_id": str}

``action`` is what the step's policy produced and ``observation`` what the environment returned
for it (when both are given the step is *observed*); ``output`` alone means the action (the seed
wrote ``output``). ``StepDraft`` and ``Step`` objects are accepted wherever a record is.

**JSONL layout** (``.jsonl``): one JSON object per line, of three kinds:

* a step record; its ``session_id`` (default: the file's stem) says which trajectory it
  belongs to, and steps keep their line order;
* a session record ``{"session": {"session_id", "task", "seed", "outcome": {"score",
  "failed", "result", "error"}, "metadata": {...}}}`` giving a trajectory's other fields;
* a whole trajectory ``{"session_id": ..., "steps": [step records], "task": ...,
  "outcome": ..., "metadata": ...}``.

Blank lines are skipped. A line that is not JSON, or a record that is not one of these, raises
:class:`~agent_replay.errors.ImportFormatError` naming the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..model import Outcome, Step, StepDraft, StepKind, Trajectory
from ._common import Reject, trajectory_from_drafts

__all__ = ["draft_from_record", "is_step_record", "read_jsonl_records", "trajectory_from_steps"]

SOURCE = "import:jsonl"
_KINDS = frozenset(k.value for k in StepKind)


def is_step_record(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("kind"), str) and "name" in value


def draft_from_record(record: Any, position: str = "") -> StepDraft:
    """A :class:`StepDraft` from a step record, ``StepDraft`` or ``Step``."""
    if isinstance(record, StepDraft):
        return record
    if isinstance(record, Step):
        return record.draft()
    if not isinstance(record, Mapping):
        raise Reject(f"a step must be an object, got {type(record).__name__}", position)
    kind = record.get("kind")
    if not isinstance(kind, str) or kind.lower() not in _KINDS:
        raise Reject(f"step kind must be one of {sorted(_KINDS)}, got {kind!r}", position)
    name = record.get("name")
    if not isinstance(name, str) or not name:
        raise Reject("step name must be a non-empty string", position)
    action = record.get("action", record.get("output"))
    observed = "observation" in record and "action" in record
    error = record.get("error")
    if error is not None and not isinstance(error, Mapping):
        error = {"type": "error", "message": str(error)}
    attributes = record.get("attributes") or {}
    if not isinstance(attributes, Mapping):
        raise Reject("step attributes must be an object", position)
    for key in ("started_ns", "ended_ns"):
        value = record.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise Reject(f"{key} must be an integer", position)
    for key in ("agent", "trace_id", "span_id", "parent_span_id"):
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            raise Reject(f"{key} must be a string", position)
    return StepDraft(
        kind=StepKind.parse(kind),
        name=name,
        inputs=record.get("inputs"),
        action=action,
        observation=record.get("observation") if observed else None,
        observed=observed,
        agent=record.get("agent"),
        resamplable=bool(record.get("resamplable", kind.lower() != "span")),
        side_effects=bool(record.get("side_effects", False)),
        error=dict(error) if error else None,
        started_ns=record.get("started_ns"),
        ended_ns=record.get("ended_ns"),
        trace_id=record.get("trace_id"),
        span_id=record.get("span_id"),
        parent_span_id=record.get("parent_span_id"),
        attributes=dict(attributes),
    )


def _outcome(value: Any, position: str) -> Outcome | None:
    if value is None or isinstance(value, Outcome):
        return value
    if not isinstance(value, Mapping):
        raise Reject("outcome must be an object", position)
    score = value.get("score")
    if score is not None and (not isinstance(score, (int, float)) or isinstance(score, bool)):
        raise Reject("outcome score must be a number", position)
    failed = value.get("failed")
    if failed is None and score is not None:
        return Outcome.from_score(float(score), value.get("result"), value.get("error"))
    return Outcome(score=score, failed=failed, result=value.get("result"), error=value.get("error"))


def trajectory_from_steps(
    steps: Iterable[Any],
    *,
    session_id: str,
    task: Any = None,
    outcome: Outcome | Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    source: str = "import:steps",
    seed: int | None = None,
) -> Trajectory:
    """A trajectory whose steps are ``steps`` (records, drafts or steps) in order, with the
    capture report in its metadata. Raises :class:`Reject` on a malformed record."""
    drafts = [draft_from_record(s, f"steps[{i}]") for i, s in enumerate(steps)]
    trajectory = trajectory_from_drafts(
        session_id,
        drafts,
        source=source,
        task=task,
        outcome=_outcome(outcome, "outcome"),
        metadata=metadata,
    )
    if seed is not None:
        trajectory = replace(trajectory, seed=seed)
    return trajectory


def read_jsonl_records(
    records: Iterable[tuple[str, Any]], default_session: str
) -> list[Trajectory]:
    """Trajectories of the JSONL layout from ``(position, parsed line)`` pairs."""
    steps: dict[str, list[tuple[str, Any]]] = {}
    sessions: dict[str, dict[str, Any]] = {}
    whole: list[Trajectory] = []
    for position, record in records:
        if not isinstance(record, Mapping):
            raise Reject("each line must be a JSON object", position)
        if isinstance(record.get("session"), Mapping):
            info = dict(record["session"])
            sid = str(info.get("session_id") or default_session)
            sessions.setdefault(sid, {}).update(info)
            steps.setdefault(sid, [])
        elif isinstance(record.get("steps"), list):
            sid = str(record.get("session_id") or default_session)
            whole.append(
                trajectory_from_steps(
                    [
                        draft_from_record(s, f"{position} steps[{i}]")
                        for i, s in enumerate(record["steps"])
                    ],
                    session_id=sid,
                    task=record.get("task"),
                    outcome=_outcome(record.get("outcome"), position),
                    metadata=_metadata(record.get("metadata"), position),
                    source=SOURCE,
                )
            )
        elif is_step_record(record):
            sid = str(record.get("session_id") or default_session)
            steps.setdefault(sid, []).append((position, record))
        else:
            raise Reject(
                "not a step record (needs kind and name), a session record or a trajectory",
                position,
            )
    out = list(whole)
    for sid, items in steps.items():
        info = sessions.get(sid, {})
        out.append(
            trajectory_from_steps(
                [draft_from_record(record, position) for position, record in items],
                session_id=sid,
                task=info.get("task"),
                outcome=_outcome(info.get("outcome"), f"session {sid}"),
                metadata=_metadata(info.get("metadata"), f"session {sid}"),
                source=SOURCE,
                seed=info.get("seed") if isinstance(info.get("seed"), int) else None,
            )
        )
    return out


def _metadata(value: Any, position: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Reject("metadata must be an object", position)
    return dict(value)


def dumps_step(step: Step | StepDraft, session_id: str | None = None) -> str:
    """One JSONL line for ``step`` (the inverse of :func:`draft_from_record`)."""
    draft = step.draft() if isinstance(step, Step) else step
    record: dict[str, Any] = {"kind": StepKind.parse(draft.kind).value, "name": draft.name}
    if session_id is not None:
        record["session_id"] = session_id
    for key in (
        "inputs",
        "action",
        "agent",
        "error",
        "started_ns",
        "ended_ns",
        "trace_id",
        "span_id",
        "parent_span_id",
    ):
        value = getattr(draft, key)
        if value is not None:
            record[key] = dict(value) if key == "error" else value
    if draft.observed:
        record["observation"] = draft.observation
    if draft.side_effects:
        record["side_effects"] = True
    if not draft.resamplable:
        record["resamplable"] = False
    if draft.attributes:
        record["attributes"] = dict(draft.attributes)
    return json.dumps(record, ensure_ascii=False, sort_keys=True)
