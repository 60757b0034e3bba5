"""Reading back a run's trajectory the ways users do, as the real-package tests do: what the
span processor stored in SQLite, the finished spans themselves, or a recording imported."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_replay import CheckpointStore, Trajectory
from agent_replay.capture.processor import TrajectorySpanProcessor
from agent_replay.ingest import import_into
from agent_replay.interop import from_otel_spans
from agent_replay.otel import attach
from weather_run import ANSWER


def stored_trajectory(processor: TrajectorySpanProcessor, db_path: Path) -> Trajectory:
    """The one trajectory ``processor`` stored in ``db_path``, after a flush that hit no error
    and with its hash chain verified."""
    assert processor.force_flush()
    assert processor.stats()["errors"] == 0
    with CheckpointStore(db_path) as store:
        return _the_one(store)


def captured(
    how: str,
    db_path: Path,
    provider: tuple[Any, Any],
    run: Callable[[], str],
    expect: str | type[BaseException] = ANSWER,
) -> Trajectory:
    """Run ``run`` once and read its trajectory ``how``: ``processor`` (attached to
    ``provider``'s SDK provider, into SQLite) or ``spans`` (``from_otel_spans`` on what
    ``provider``'s in-memory exporter kept). ``expect``: what the run must return (the weather
    run's answer), or the exception it must end in."""
    tracer_provider, exporter = provider
    processor = attach(db_path, tracer_provider=tracer_provider) if how == "processor" else None
    if isinstance(expect, str):
        assert run() == expect
    else:
        with pytest.raises(expect):
            run()
    if processor is None:
        return from_otel_spans(exporter.get_finished_spans())
    return stored_trajectory(processor, db_path)


def recorded(path: Path, how: str, db_path: Path) -> Trajectory:
    """The one trajectory of an OTLP/JSON recording, read ``how``: ``import`` (into SQLite,
    without error or warning, chain verified) or ``spans`` (``from_otel_spans``)."""
    if how == "spans":
        return from_otel_spans([json.loads(path.read_text())])
    with CheckpointStore(db_path) as store:
        result = import_into(store, [path])
        assert not result.errors and not result.warnings
        return _the_one(store)


def _the_one(store: CheckpointStore) -> Trajectory:
    (session_id,) = store.session_ids()
    (verdict,) = store.verify(session_id)
    assert verdict.ok
    return store.load(session_id)
