"""LangSmith runs: ``{"post": [RunCreate], "patch": [RunUpdate]}`` batch payloads (what the
SDK sends to ``/runs/batch``), ``{"runs": [...]}`` query results, a list of runs, one run, or
run trees with nested ``child_runs``.

A patch completes the post with the same id (end time, outputs, error). The parent of a run is
``parent_run_id``, or the previous element of its ``dotted_order`` (``<time>Z<uuid>`` per
ancestor, joined by ``.``), whose order is also the execution order. Run and trace UUIDs become
32-hex span and trace ids, so runs assemble like spans; :func:`read_run` maps each run type.

The runs of a trace may come in several documents (JSON Lines: a run or a batch per line) and
several files (the SDK sends a run's post and its patch in separate batches): a
:class:`LangSmithRuns` takes every document of an import and assembles the runs together, so
that the result does not depend on how they were split.
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

__all__ = ["LangSmithRuns", "is_langsmith", "read_langsmith"]

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


def _flatten(runs: list, out: dict[str, dict], position: str) -> list[str]:
    """Merge ``runs`` (and their ``child_runs``) into ``out`` by id; the ids read."""
    keys = []
    for i, run in enumerate(runs):
        key = _run_id(run) if isinstance(run, dict) else None
        if key is None:
            raise Reject("run must be an object with an id or dotted_order", f"{position}[{i}]")
        run = {**run, "id": key}
        _merge(out, _hex(key), run)  # a patch may write the id otherwise than its post
        keys.append(_hex(key))
        children = run.get("child_runs")
        if isinstance(children, list):
            children = [
                {**c, "parent_run_id": c.get("parent_run_id") or key} if isinstance(c, dict) else c
                for c in children
            ]
            keys.extend(_flatten(children, out, f"{position}[{i}].child_runs"))
    return keys


def _merge(out: dict[str, dict], key: str, run: dict) -> None:
    """``run``'s fields that are set over what ``out`` holds of run ``key``."""
    merged = out.setdefault(key, {})
    merged.update({k: v for k, v in run.items() if v is not None and k != "child_runs"})


class LangSmithRuns:
    """The LangSmith runs of one import, merged by run id whatever document, line or file each
    came in: :meth:`add` each document (:meth:`update` with another file's), then
    :meth:`trajectories`. A run is what its posts (and whole runs, run trees, query results)
    say, completed by its patches, whichever came first. A patch whose run is posted nowhere
    in the import is not applied: :meth:`warnings` names the files such patches came from."""

    def __init__(self) -> None:
        self.posts: dict[str, dict] = {}
        self.patches: dict[str, dict] = {}
        self.patched_in: dict[str, dict[str, None]] = {}  # run id -> its patches' sources

    def __len__(self) -> int:
        """How many runs (posted or patched) were read."""
        return len(self.posts.keys() | self.patches.keys())

    def add(self, doc: Any, source: str = "") -> None:
        """The runs of one parsed document of ``source``. Raises :class:`Reject`."""
        if isinstance(doc, dict) and ("post" in doc or "patch" in doc):
            posts, patches = doc.get("post") or [], doc.get("patch") or []
            for part, items in (("post", posts), ("patch", patches)):
                if not isinstance(items, list):
                    raise Reject(f"{part} must be a list", part)
            _flatten(posts, self.posts, "post")
            for key in _flatten(patches, self.patches, "patch"):
                self.patched_in.setdefault(key, {})[source] = None
        elif isinstance(doc, dict) and isinstance(doc.get("runs"), list):
            _flatten(doc["runs"], self.posts, "runs")
        elif isinstance(doc, list):
            _flatten(doc, self.posts, "")
        elif _is_run(doc):
            _flatten([doc], self.posts, "")
        else:
            raise Reject("not LangSmith runs (expected {post, patch} or run objects)")

    def update(self, other: LangSmithRuns) -> None:
        """Add the runs ``other`` read (another file's), after those read so far."""
        for key, run in other.posts.items():
            _merge(self.posts, key, run)
        for key, run in other.patches.items():
            _merge(self.patches, key, run)
        for key, sources in other.patched_in.items():
            self.patched_in.setdefault(key, {}).update(sources)

    def trajectories(self) -> list[Trajectory]:
        """Trajectories (one per trace or thread) of the posted runs, each with its patches."""
        mapped = [_mapped({**run, **self.patches.get(key, {})}) for key, run in self.posts.items()]
        return assemble_mapped(mapped, source=SOURCE) if mapped else []

    def warnings(self) -> list[str]:
        """One per source of patches whose run was posted in no document read."""
        unapplied: dict[str, int] = {}
        for key in self.patches:
            if key not in self.posts:
                for source in self.patched_in.get(key, {"": None}):
                    unapplied[source] = unapplied.get(source, 0) + 1
        return [
            f"{source + ': ' if source else ''}{n} LangSmith run patch(es) had no run to apply "
            "to (no file of this import posts their runs; import the file of their posts "
            "with it): not imported"
            for source, n in unapplied.items()
        ]


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
    """Trajectories (one per trace) of one parsed LangSmith document (the runs of several are
    assembled together by :class:`LangSmithRuns`). Raises :class:`Reject`."""
    runs = LangSmithRuns()
    runs.add(doc)
    return runs.trajectories()
