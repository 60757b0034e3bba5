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
from agent_replay.errors import SessionNotFoundError, StoreError
from agent_replay.model import Lineage, StepDraft, StepKind, chain_steps
from agent_replay.store.sink import DurableSpanSink, SpanSink
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


def test_a_load_that_overlaps_a_merge_and_a_prune_reads_the_session_again(db_path, monkeypatch):
    """Another process merges a late turn (its steps move) and prunes while a load is between
    reading the session row and reading its chain: the load reported the sound session as
    damaged (the receiver then set the next capture aside as `.unmerged`). Seeing that the
    session's head moved, it now reads the session again, as it now is."""
    with CheckpointStore(db_path) as setup:
        sink = SpanSink(setup)
        for n in (1, 2):
            sink.add(TURNS[n])
            sink.flush()
        before = setup.load(CONV)
    reader, other = CheckpointStore(db_path), CheckpointStore(db_path)
    original = CheckpointStore._session

    def session_then_other_work(self, conn, session_id):
        out = original(self, conn, session_id)
        if self is reader:
            monkeypatch.setattr(CheckpointStore, "_session", original)
            late = SpanSink(other)
            late.add(TURNS[0])
            late.flush()
            assert other.prune().steps > 0  # the rows the reader is about to read
        return out

    monkeypatch.setattr(CheckpointStore, "_session", session_then_other_work)
    try:
        loaded = reader.load(CONV)
        assert loaded == other.load(CONV) and len(loaded.steps) == len(before.steps) + 1
        assert [r.ok for r in reader.verify()] == [True]
    finally:
        reader.close()
        other.close()


def test_a_session_deleted_while_it_is_read_is_not_found_not_damaged(db_path, monkeypatch):
    with CheckpointStore(db_path) as store, CheckpointStore(db_path) as other:
        store.save(run("a", [1, 2, 3]))
        original = CheckpointStore._session

        def session_then_prune(self, conn, session_id):
            out = original(self, conn, session_id)
            if self is store:
                monkeypatch.setattr(CheckpointStore, "_session", original)
                assert other.prune(["a"]).steps == 3
            return out

        monkeypatch.setattr(CheckpointStore, "_session", session_then_prune)
        with pytest.raises(SessionNotFoundError):
            store.load("a")


def test_the_spans_a_receiver_kept_of_a_pruned_session_go_with_it(db_path):
    """The receiver keeps assembled spans (for late spans) for --retain-seconds: a pruned
    session's prompts stayed in the file, and a late span brought its steps back."""
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=0)
        for n in (0, 1):
            sink.add(TURNS[n])
        sink.assemble_ready(force=True)
        kept = store.pending_counts()["spans_assembled"]
        assert kept == len(TURNS[0]) + len(TURNS[1])
        assert store.prune([CONV], dry_run=True).pending == kept
        assert store.prune([CONV]).pending == kept
        assert store.pending_counts()["spans_assembled"] == 0
        store.vacuum()
    assert b"question 0" not in Path(db_path).read_bytes()


@pytest.mark.parametrize("damage", ["header unreadable", "row missing", "prev changed"])
def test_a_damaged_chain_stops_the_prune_before_anything_is_deleted(db_path, damage):
    """An unreadable header hides which content the step uses; at a missing row or a broken
    link the walk stopped, and the steps before it (still the session's, and readable) were
    deleted as unused."""
    with CheckpointStore(db_path) as store:
        store.save(run("a", [1, 2, 3, 4, 5]))
        store.save(run("b", [9]))
        store.delete("b")
        step = store.load("a").steps[3]
        conn = store._conn()
        if damage == "header unreadable":
            conn.execute("UPDATE steps SET header=? WHERE hash=?", (b"not json", step.step_hash))
        elif damage == "row missing":
            conn.execute("DELETE FROM steps WHERE hash=?", (step.step_hash,))
        else:
            conn.execute("UPDATE steps SET prev=? WHERE hash=?", ("0" * 64, step.step_hash))
        conn.commit()
        before = store.stats()
        with pytest.raises(StoreError, match="nothing was pruned"):
            store.prune()
        assert store.stats() == before


def test_a_dry_run_only_reads(tmp_path):
    """It opened the store for writing (a schema-3 store was migrated by it) and took the
    write lock."""
    import hashlib
    import shutil

    from click.testing import CliRunner

    from agent_replay.cli import main

    db = tmp_path / "schema3.sqlite"
    shutil.copy(Path(__file__).parent / "data" / "schema3.sqlite", db)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    result = CliRunner().invoke(main, ["prune", "--db", str(db), "--older-than", "0", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("would delete ")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    with CheckpointStore(db, read_only=True) as store:
        assert store.prune(saved_before_ns=time.time_ns(), dry_run=True).sessions
        assert store.session_ids()


def test_a_merge_two_asides_deep_is_checked_against_what_it_read(db_path, monkeypatch):
    """The write of a merge is checked against the digest of the session it read: it was
    for `<id>`, `<id>.otel` and `<id>.unmerged` only, so a prune of `<id>.otel.unmerged`
    between the read and the write let it write steps whose inputs the prune had deleted."""
    from agent_replay.model import StepDraft, StepKind, chain_steps

    store, other = CheckpointStore(db_path), CheckpointStore(db_path)
    native = [StepDraft(StepKind.TOOL, "native", inputs={"n": 1}, action=1)]
    store.save(Trajectory(CONV, chain_steps(native)))  # a native run: captures go aside
    sink = SpanSink(store)
    sink.add(TURNS[5])
    sink.flush()  # -> conv-1.otel
    aside = store.load(f"{CONV}.otel")
    (data,) = (
        store._conn()
        .execute("SELECT data FROM blobs WHERE hash=?", (aside.steps[0].output_address,))
        .fetchone()
    )
    store._conn().execute(
        "UPDATE blobs SET data=? WHERE hash=?", (data + b" ", aside.steps[0].output_address)
    )
    sink.add(TURNS[6])
    sink.flush()  # conv-1.otel is damaged: -> conv-1.otel.unmerged
    target = f"{CONV}.otel.unmerged"
    original = CheckpointStore.load

    def load_then_prune(self, session_id, *, inputs=True):
        out = original(self, session_id, inputs=inputs)
        if self is store and session_id == target and not inputs:
            monkeypatch.setattr(CheckpointStore, "load", original)
            assert other.prune([target]).sessions == [target]
        return out

    monkeypatch.setattr(CheckpointStore, "load", load_then_prune)
    try:
        sink.add(TURNS[0])
        sink.flush()  # a late turn: merged whole into the target, which a prune deletes
        assert store.verify(target)[0].ok  # merged again on the next attempt: it loads
    finally:
        store.close()
        other.close()


def test_what_a_prune_deletes_is_zeroed_in_the_file(db_path):
    """Whatever the SQLite build zeroes by default (upstream's nothing, Debian's everything),
    a prune zeroes what it deletes, freed pages included, once the log is checkpointed into
    the file, and leaves the connection's setting as it was."""
    import sqlite3

    secret = "s3cret-prompt-" * 400  # over a page: its overflow pages are freed whole
    with CheckpointStore(db_path) as store:
        conn = store._conn()
        conn.execute("PRAGMA secure_delete=0")  # as upstream SQLite builds have it
        store.save(run("keep", [1]))
        drafts = [StepDraft(kind=StepKind.LLM, name="ask", inputs={"p": secret}, action="a")]
        store.save(Trajectory("gone", chain_steps(drafts)))
        store.prune(["gone"])
        assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 0  # as it was
    checkpoint = sqlite3.connect(db_path)
    checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    checkpoint.close()
    assert b"s3cret-prompt-" not in Path(db_path).read_bytes()


def test_a_session_saved_between_the_survey_and_the_deletion_keeps_what_it_uses(
    db_path, monkeypatch
):
    """The survey reads a snapshot under no lock; a session saved meanwhile that uses rows
    unused when surveyed (the same run saved again: its rows are there already, so nothing
    is written for them) is walked again in the deletion, and keeps them."""
    from agent_replay.store import prune as pruning

    trajectory = run("a", [1, 2, 3])
    with CheckpointStore(db_path) as store, CheckpointStore(db_path) as other:
        store.save(trajectory)
        store.delete("a")
        survey = pruning.survey

        def survey_then_save(conn, *args):
            found = survey(conn, *args)
            other.save(trajectory)
            return found

        monkeypatch.setattr(pruning, "survey", survey_then_save)
        result = store.prune()
        assert (result.steps, result.blobs) == (0, 0)
        assert store.load("a") == trajectory
        monkeypatch.undo()
        store.delete("a")
        assert store.prune().steps == 3  # unused now: gone
