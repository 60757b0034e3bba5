"""``CheckpointStore.prune``: deleting sessions and the rows no remaining session uses."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_replay import CheckpointStore, Trajectory
from agent_replay.errors import StoreError
from agent_replay.model import Lineage, StepDraft, StepKind, chain_steps
from agent_replay.store.sink import SpanSink
from conversation_turns import CONV, TURNS


def run(session_id: str, values: list[int], parent: tuple[str, int] | None = None) -> Trajectory:
    """A session whose step ``i`` reads ``values[i]`` (equal values: shared blobs)."""
    drafts = [
        StepDraft(kind=StepKind.TOOL, name=f"t{i}", inputs={"v": v}, action=v % 3)
        for i, v in enumerate(values)
    ]
    lineage = None if parent is None else Lineage(parent[0], parent[1])
    return Trajectory(session_id, chain_steps(drafts), lineage=lineage)


def reachable(store: CheckpointStore) -> tuple[set[str], set[str]]:
    """The step hashes and blob addresses the stored sessions use, from loading them."""
    steps, blobs = set(), set()
    for trajectory in store.load_all():
        for step in trajectory.steps:
            steps.add(step.step_hash)
            blobs.update((step.input_address, step.output_address))
    return steps, blobs


sessions_strategy = st.lists(
    st.tuples(
        st.lists(st.integers(0, 6), min_size=1, max_size=6),  # the values its steps read
        st.integers(0, 5),  # fork of an earlier session at this step (when there is one)
        st.booleans(),  # whether it is a fork at all
        st.booleans(),  # whether the prune deletes it
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions_strategy)
def test_prune_keeps_exactly_what_the_remaining_sessions_use(sessions):
    with tempfile.TemporaryDirectory() as tmp, CheckpointStore(Path(tmp) / "s.sqlite") as store:
        saved: dict[str, Trajectory] = {}
        doomed = []
        for n, (values, at, forked, delete) in enumerate(sessions):
            session_id = f"s{n}"
            if forked and saved:
                parent = saved[f"s{n - 1}"]
                at = min(at, len(parent.steps))
                prefix = [int(s.inputs["v"]) for s in parent.steps[:at]]
                trajectory = run(session_id, prefix + values, (parent.session_id, at))
            else:
                trajectory = run(session_id, values)
            store.save(trajectory)
            saved[session_id] = trajectory
            if delete:
                doomed.append(session_id)
        kept = {sid: t for sid, t in saved.items() if sid not in doomed}
        result = store.prune(doomed)
        assert sorted(result.sessions) == sorted(doomed)
        assert sorted(store.session_ids()) == sorted(kept)
        for session_id, trajectory in kept.items():  # every hash checked on load
            assert store.load(session_id) == trajectory
        steps, blobs = reachable(store)
        stats = store.stats()
        assert (stats["steps"], stats["blobs"]) == (len(steps), len(blobs))  # nothing unused
        assert store.prune() == replace(result, sessions=[], steps=0, blobs=0, blob_bytes=0)


def test_a_dry_run_changes_nothing(db_path):
    with CheckpointStore(db_path) as store:
        store.save(run("a", [1, 2, 3]))
        store.save(run("b", [1, 2, 4]))
        before = store.stats()
        dry = store.prune(["a"], dry_run=True)
        # the first two steps are b's too (same content after the same steps): one row goes
        assert (dry.sessions, dry.steps, dry.dry_run) == (["a"], 1, True)
        assert store.stats() == before and "a" in store
        real = store.prune(["a"])
        assert replace(real, dry_run=True) == dry
        assert store.stats()["steps"] == before["steps"] - 1 and store.load("b")


def test_sessions_not_saved_since_a_time_are_deleted(db_path):
    with CheckpointStore(db_path) as store:
        store.save(run("old", [1]))
        time.sleep(0.01)
        cutoff = time.time_ns()
        store.save(run("new", [2]))
        assert store.prune(saved_before_ns=cutoff).sessions == ["old"]
        assert store.session_ids() == ["new"]


def test_steps_a_merge_left_behind_are_removed(db_path):
    """The first turn arrives last: merging it moves every stored step, whose old rows no
    session uses; the prune removes those and no content the session still reads."""
    with CheckpointStore(db_path) as store:
        sink = SpanSink(store)
        for spans in [*TURNS[1:], TURNS[0]]:
            sink.add(spans)
            sink.flush()
        whole = store.load(CONV)
        steps_before = store.stats()["steps"]
        result = store.prune()
        assert result.sessions == [] and result.steps == steps_before - len(whole.steps) > 0
        assert store.load(CONV) == whole
        assert store.stats()["steps"] == len(whole.steps)


def test_a_damaged_step_header_stops_the_prune_before_anything_is_deleted(db_path):
    with CheckpointStore(db_path) as store:
        store.save(run("a", [1, 2]))
        store.save(run("b", [3, 4]))
        store.delete("b")
        conn = store._conn()
        conn.execute(
            "UPDATE steps SET header=? WHERE hash=?",
            (b"not json", store.load("a").steps[0].step_hash),
        )
        conn.commit()
        before = store.stats()
        with pytest.raises(StoreError, match="nothing was pruned"):
            store.prune()
        assert store.stats() == before


def test_writers_during_a_prune_lose_nothing(db_path):
    """Sessions saved by another thread while prunes run (each one transaction) are whole."""
    with CheckpointStore(db_path) as store:
        done = threading.Event()
        saved = []

        def writer():
            for n in range(60):
                trajectory = run(f"w{n}", [n % 4, n % 5, n])  # shares blobs with the others
                store.save(trajectory)
                saved.append(trajectory)
                if n % 3 == 0:
                    store.delete(trajectory.session_id)
                    saved.pop()
            done.set()

        thread = threading.Thread(target=writer)
        thread.start()
        while not done.is_set():
            store.prune()
        thread.join()
        store.prune()
        for trajectory in saved:
            assert store.load(trajectory.session_id) == trajectory
        steps, blobs = reachable(store)
        assert (store.stats()["steps"], store.stats()["blobs"]) == (len(steps), len(blobs))


def test_vacuum_gives_the_free_pages_back(db_path):
    with CheckpointStore(db_path) as store:
        store.save(run("big", list(range(400))))
        store.save(run("small", [1]))
        store.prune(["big"])
        before, after = store.vacuum()
        assert after < before
        assert store.load("small") == run("small", [1])
    assert sqlite3.connect(db_path).execute("PRAGMA integrity_check").fetchone() == ("ok",)
