"""Bring traces from elsewhere in as trajectories (the seed's names, kept).

* :func:`from_otel_spans`: spans you already hold (SDK ``ReadableSpan`` objects, OTLP/JSON
  span objects or whole OTLP/JSON requests, or :class:`NormalizedSpan`) → one trajectory.
* :func:`from_jsonl`: a file in agent-replay's JSONL step-record layout → one trajectory.
* :func:`from_steps`: step records, ``StepDraft`` or ``Step`` objects → one trajectory.
* :func:`replayable_agent`: an agent that re-executes an imported trajectory through
  per-step resample policies, so it can be replayed and attributed (see
  :mod:`agent_replay.replay.agent`).

For files of any other format, several trajectories at once, or partial imports, use
:func:`agent_replay.ingest.load` / :func:`~agent_replay.ingest.load_many`. Everything here
raises :class:`~agent_replay.errors.ImportFormatError` on input it cannot read and is safe to
call from several threads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from .errors import ImportFormatError
from .ingest import load
from .ingest._common import Reject
from .ingest.otlp import Malformed, decode_json_document, span_from_json
from .ingest.steps import trajectory_from_steps
from .mapping.assemble import assemble, capture_report
from .mapping.spans import NormalizedSpan, attach_logs, from_readable_span
from .model import Outcome, Trajectory
from .replay.agent import replayable_agent

__all__ = ["from_jsonl", "from_otel_spans", "from_steps", "replayable_agent"]


def _normalized(spans: Iterable[Any]) -> tuple[list[NormalizedSpan], list]:
    out: list[NormalizedSpan] = []
    logs: list = []
    for i, span in enumerate(spans):
        if isinstance(span, NormalizedSpan):
            out.append(span)
        elif isinstance(span, Mapping) and (
            "resourceSpans" in span or "resourceLogs" in span or "resource_spans" in span
        ):
            try:
                decoded = decode_json_document(dict(span))
            except Malformed as exc:
                raise ImportFormatError(
                    exc.message, position=f"spans[{i}] {exc.position}"
                ) from None
            out.extend(decoded.spans)
            logs.extend(decoded.logs)
        elif isinstance(span, Mapping):
            try:
                out.append(span_from_json(dict(span)))
            except Malformed as exc:
                raise ImportFormatError(exc.message, position=f"spans[{i}]") from None
        elif hasattr(span, "context") and hasattr(span, "instrumentation_scope"):
            out.append(from_readable_span(span))
        else:
            raise ImportFormatError(
                f"not a span: {type(span).__name__} (expected a ReadableSpan, an OTLP/JSON "
                "span or request, or a NormalizedSpan)",
                position=f"spans[{i}]",
            )
    return out, logs


def from_otel_spans(spans: Iterable[Any], session_id: str | None = None) -> Trajectory:
    """One trajectory from the spans of one run, in any order.

    When the spans hold several traces or conversations their steps are merged in start-time
    order into one trajectory. ``session_id`` names it (default: the conversation id or the
    trace id). Raises :class:`ImportFormatError` when there is no GenAI span at all.
    """
    normalized, logs = _normalized(spans)
    if logs:
        normalized, _ = attach_logs(normalized, logs)
    trajectories = assemble(normalized, source="otel")
    if not trajectories:
        raise ImportFormatError("no GenAI span among the spans given", source="<spans>")
    if len(trajectories) == 1:
        trajectory = trajectories[0]
    else:
        drafts = sorted(
            (s.draft() for t in trajectories for s in t.steps),
            key=lambda d: (d.started_ns or 0, d.ended_ns or 0, d.span_id or ""),
        )
        metadata = dict(trajectories[0].metadata)
        metadata["trace_ids"] = sorted(
            {t_id for t in trajectories for t_id in t.metadata["trace_ids"]}
        )
        metadata["capture"] = capture_report(drafts, spans=len(normalized))
        trajectory = Trajectory(
            session_id=trajectories[0].session_id,
            task=trajectories[0].task,
            outcome=next((t.outcome for t in trajectories if t.outcome), None),
            metadata=metadata,
        ).with_steps(drafts)
    if session_id is not None:
        trajectory = replace(trajectory, session_id=session_id)
    return trajectory


def from_jsonl(path: str | os.PathLike[str], session_id: str | None = None) -> Trajectory:
    """The trajectory in a JSONL step-record file (see :mod:`agent_replay.ingest.steps`).

    A file holding several sessions needs ``session_id`` to pick one.
    """
    trajectories = load(path, format="jsonl")
    name = os.fspath(path)
    if session_id is not None:
        for trajectory in trajectories:
            if trajectory.session_id == session_id:
                return trajectory
        raise ImportFormatError(f"no session {session_id!r} in the file", source=name)
    if len(trajectories) != 1:
        ids = ", ".join(t.session_id for t in trajectories) or "none"
        raise ImportFormatError(
            f"the file holds {len(trajectories)} sessions ({ids}); pass session_id=",
            source=name,
        )
    return trajectories[0]


def from_steps(
    steps: Iterable[Any],
    session_id: str,
    *,
    task: Any = None,
    outcome: Outcome | Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Trajectory:
    """A trajectory of ``steps`` in order: step records (mappings with ``kind``, ``name``,
    ``inputs``, ``action`` / ``output``, ``observation``, ``agent``, ...), ``StepDraft`` or
    ``Step`` objects. Its metadata holds the capture report."""
    try:
        return trajectory_from_steps(
            steps, session_id=session_id, task=task, outcome=outcome, metadata=metadata
        )
    except Reject as exc:
        raise ImportFormatError(exc.message, source="<steps>", position=exc.position) from None
