"""LangSmith runs: ``{"post": [RunCreate], "patch": [RunUpdate]}`` batch payloads (what the
SDK sends to ``/runs/batch``), ``{"runs": [...]}`` query results, a list of runs, one run, or
run trees with nested ``child_runs``.

A patch completes the post with the same id (end time, outputs, error). The parent of a run is
``parent_run_id``, or the previous element of its ``dotted_order`` (``<time>Z<uuid>`` per
ancestor, joined by ``.``), whose order is also the execution order. Run and trace UUIDs become
32-hex span and trace ids, so runs assemble like spans; :func:`read_run` maps each run type.
"""

from __future__ import annotations

import uuid as _uuid
from typing import Any

from ..mapping import MappedSpan, map_span
from ..mapping.assemble import assemble_mapped
from ..mapping.dialects.langsmith import THREAD_KEYS, read_run, run_error
from ..mapping.spans import NormalizedSpan
from ..model import Trajectory
from ._common import Reject, timestamp_ns

__all__ = ["is_langsmith", "read_langsmith"]

SOURCE = "import:langsmith"


def _is_run(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and "id" in value
        and ("run_type" in value or "dotted_order" in value)
    )


def is_langsmith(doc: Any) -> bool:
    if isinstance(doc, dict):
        if isinstance(doc.get("post"), list) or isinstance(doc.get("patch"), list):
            return True
        if isinstance(doc.get("runs"), list):
            return all(_is_run(r) for r in doc["runs"])
        return _is_run(doc)
    return isinstance(doc, list) and bool(doc) and all(_is_run(r) for r in doc)


def _hex(value: Any) -> str:
    text = str(value)
    try:
        return _uuid.UUID(text).hex
    except ValueError:
        return text


def _run_id(run: dict) -> str | None:
    """A run's id; the JS SDK's patches omit it, but their dotted_order ends with it."""
    if run.get("id"):
        return str(run["id"])
    dotted = run.get("dotted_order")
    if isinstance(dotted, str) and "Z" in dotted:
        return dotted.split(".")[-1].split("Z", 1)[1] or None
    return None


def _flatten(runs: list, out: dict[str, dict], position: str) -> None:
    for i, run in enumerate(runs):
        key = _run_id(run) if isinstance(run, dict) else None
        if key is None:
            raise Reject("run must be an object with an id or dotted_order", f"{position}[{i}]")
        run = {**run, "id": key}
        merged = out.setdefault(key, {})
        merged.update({k: v for k, v in run.items() if v is not None and k != "child_runs"})
        children = run.get("child_runs")
        if isinstance(children, list):
            children = [
                {**c, "parent_run_id": c.get("parent_run_id") or key} if isinstance(c, dict) else c
                for c in children
            ]
            _flatten(children, out, f"{position}[{i}].child_runs")


def _parent(run: dict) -> str | None:
    parent = run.get("parent_run_id")
    if parent:
        return _hex(parent)
    dotted = run.get("dotted_order")
    if isinstance(dotted, str) and "." in dotted:
        previous = dotted.split(".")[-2]
        if "Z" in previous:
            return _hex(previous.split("Z", 1)[1])
    return None


def _mapped(run: dict) -> MappedSpan:
    dotted = run.get("dotted_order")
    if not isinstance(dotted, str):
        dotted = None
    first = dotted.split(".")[-1].split("Z")[0] + "Z" if dotted else None
    start = timestamp_ns(run.get("start_time")) or timestamp_ns(first) or 0
    error = run.get("error")
    name = str(run.get("name") or run.get("run_type") or "run")
    trace = run.get("trace_id") or (dotted.split(".")[0].split("Z", 1)[-1] if dotted else None)
    span = NormalizedSpan(
        trace_id=_hex(trace or run["id"]),
        span_id=_hex(run["id"]),
        name=name,
        parent_span_id=_parent(run),
        start_ns=start,
        end_ns=timestamp_ns(run.get("end_time")) or start,
        status_code=2 if error else 0,
        status_message=str(error or ""),
    )
    mapped = map_span(span)
    extra = run.get("extra") if isinstance(run.get("extra"), dict) else {}
    metadata = extra.get("metadata") if isinstance(extra.get("metadata"), dict) else {}
    # a LangChain chat model's bound tools are in its invocation parameters, not its inputs
    invocation = extra.get("invocation_params")
    read_run(
        mapped,
        run_type=run.get("run_type"),
        name=name,
        inputs=run.get("inputs"),
        outputs=run.get("outputs") or None,
        model=metadata.get("ls_model_name"),
        tools=invocation.get("tools") if isinstance(invocation, dict) else None,
    )
    mapped.dialects.append("langsmith_run")
    for key in THREAD_KEYS:
        mapped.set_conversation(metadata.get(key))
    if error:
        mapped.error = run_error(error)
    for key, attr in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")):
        mapped.set_attr(attr, run.get(key))
    mapped.set_attr("provider", metadata.get("ls_provider"))
    return mapped


def read_langsmith(doc: Any) -> list[Trajectory]:
    """Trajectories (one per trace) of parsed LangSmith runs. Raises :class:`Reject`."""
    runs: dict[str, dict] = {}
    if isinstance(doc, dict) and ("post" in doc or "patch" in doc):
        for part in ("post", "patch"):
            items = doc.get(part) or []
            if not isinstance(items, list):
                raise Reject(f"{part} must be a list", part)
            _flatten(items, runs, part)
    elif isinstance(doc, dict) and isinstance(doc.get("runs"), list):
        _flatten(doc["runs"], runs, "runs")
    elif isinstance(doc, list):
        _flatten(doc, runs, "")
    elif _is_run(doc):
        _flatten([doc], runs, "")
    else:
        raise Reject("not LangSmith runs (expected {post, patch} or run objects)")
    mapped = [_mapped(run) for run in runs.values()]
    return assemble_mapped(mapped, source=SOURCE)
