import sqlite3
from dataclasses import replace

import pytest

from agent_replay import CheckpointStore, Outcome, Trajectory
from agent_replay.errors import (
    CanonicalEncodingError,
    ChainIntegrityError,
    SessionNotFoundError,
    StoreError,
)
from agent_replay.model import NOT_LOADED, Lineage, StepDraft, StepKind, chain_steps


def make(session="s1", n=5, payload="x"):
    steps = chain_steps(
        StepDraft(
            kind=StepKind.TOOL,
            name=f"t{i}",
            inputs={"q": i, "blob": payload},
            action=(i, payload),
            agent="bot",
        )
        for i in range(n)
    )
    return Trajectory(
        session,
        steps,
        task={"q": "t"},
        seed=3,
        outcome=Outcome.from_score(0.0, {"r": 1}),
        metadata={"source": "native"},
        effects=((1, "now", 1.5),),
    )


def test_round_trip_is_identical(db_path):
    traj = make()
    with CheckpointStore(db_path) as store:
        store.save(traj)
        loaded = store.load("s1")
    assert loaded == traj and loaded.digest == traj.digest
    assert isinstance(loaded.steps[0].action, tuple)
    loaded.verify()


def test_fork_prefix_and_blobs_are_shared(db_path):
    parent = make("parent", 6, payload="p" * 1000)
    child_drafts = [s.draft() for s in parent.steps[:4]] + [
        StepDraft(kind=StepKind.TOOL, name="alt", inputs={"q": 9}, action="new")
    ]
    child = Trajectory(
        "child", chain_steps(child_drafts), lineage=Lineage("parent", 4, {"do": "new"})
    )
    with CheckpointStore(db_path) as store:
        store.save(parent)
        store.save(child)
        stats = store.stats()
        assert stats["steps"] == 6 + 1  # 4 shared prefix steps stored once
        assert store.children("parent") == ["child"]
        assert store.load("child").lineage.fork_step == 4


@pytest.mark.parametrize(
    "table,column,key",
    [("blobs", "data", "hash"), ("steps", "header", "hash"), ("sessions", "header", "session_id")],
)
def test_flipping_one_stored_bit_is_detected(db_path, table, column, key):
    with CheckpointStore(db_path) as store:
        store.save(make())
    conn = sqlite3.connect(db_path)
    ident, data = conn.execute(
        f"SELECT {key}, {column} FROM {table} ORDER BY {key} LIMIT 1"
    ).fetchone()
    data = bytearray(data)
    data[len(data) // 2] ^= 0x01
    conn.execute(f"UPDATE {table} SET {column}=? WHERE {key}=?", (bytes(data), ident))
    conn.commit()
    conn.close()
    with CheckpointStore(db_path) as store:
        with pytest.raises(ChainIntegrityError):
            store.load("s1")
        (result,) = store.verify("s1")
        assert not result.ok and result.problem


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda header: header.replace(
            b'"task":{"question":"q","context":"c"}', b'"task":{"context":"c","question":"q"}'
        ),
        lambda header: header.replace(b'"task":', b'"task": '),
    ],
    ids=["task keys swapped", "whitespace"],
)
def test_a_session_header_rewritten_to_the_same_value_is_detected(db_path, rewrite):
    """The header is stored with the task's keys in their order, which a loaded replay hands
    the agent: a header re-encoded to another order (or other bytes of the same value) was
    accepted when its canonical re-encoding matched the digest."""
    traj = replace(make(), task={"question": "q", "context": "c"})
    with CheckpointStore(db_path) as store:
        store.save(traj)
    conn = sqlite3.connect(db_path)
    (header,) = conn.execute("SELECT header FROM sessions WHERE session_id='s1'").fetchone()
    assert rewrite(header) != header
    conn.execute("UPDATE sessions SET header=? WHERE session_id='s1'", (rewrite(header),))
    conn.commit()
    conn.close()
    with CheckpointStore(db_path) as store:
        with pytest.raises(ChainIntegrityError, match="does not match its digest"):
            store.load("s1")


def test_missing_session(db_path):
    with CheckpointStore(db_path) as store, pytest.raises(SessionNotFoundError):
        store.load("nope")


def test_foreign_files_are_refused(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a database at all")
    with pytest.raises(StoreError, match="not a SQLite database"):
        CheckpointStore(text)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users(id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not an agent-replay store"):
        CheckpointStore(other)


def test_replace_false_refuses_other_content(db_path):
    with CheckpointStore(db_path) as store:
        store.save(make(payload="a"))
        store.save(make(payload="a"), replace=False)  # identical: fine
        with pytest.raises(StoreError, match="already exists"):
            store.save(make(payload="b"), replace=False)


def test_delete_forgets_only_that_session(db_path):
    parent = make("parent", 3)
    other = make("other", 3)
    with CheckpointStore(db_path) as store:
        store.save(parent)
        store.save(other)
        store.delete("parent")
        assert "parent" not in store and store.session_ids() == ["other"]
        with pytest.raises(SessionNotFoundError):
            store.load("parent")
        assert store.load("other") == other


def test_a_source_that_is_not_text_round_trips(db_path):
    """The summary column holds the source as text; a dict's text must not depend on the
    order of its keys, which loading (canonical, sorted) does not keep. Found by Hypothesis."""
    trajectory = Trajectory("s", (), metadata={"source": {"0": None, "": None}})
    with CheckpointStore(db_path) as store:
        store.save(trajectory)
        assert store.load("s") == trajectory
        assert store.list_sessions()[0].source == '{"":null,"0":null}'


def test_a_step_built_without_its_bytes_is_stored_with_its_own_content(db_path):
    """save() encodes the content of a Step made by hand (no bytes kept): its fallback took
    the output payload for inputs that were None, so the step could not be loaded."""
    sealed = chain_steps([StepDraft(kind=StepKind.TOOL, name="t", inputs=None, action={"b": 1})])
    bare = replace(sealed[0], input_bytes=b"", output_bytes=b"", header_bytes=b"")
    with CheckpointStore(db_path) as store:
        store.save(Trajectory("hand", (bare,)))
        loaded = store.load("hand")
    assert loaded.steps[0].inputs is None and loaded.steps[0].action == {"b": 1}


def test_a_session_loaded_without_inputs_has_everything_else(db_path):
    traj = make()
    traj = replace(
        traj,
        steps=chain_steps(
            [
                *(s.draft() for s in traj.steps),
                StepDraft(kind=StepKind.LLM, name="no inputs", action="a"),
            ]
        ),
    )
    with CheckpointStore(db_path) as store:
        store.save(traj)
        light = store.load("s1", inputs=False)
    assert light.digest == traj.digest
    assert [s.inputs for s in light.steps] == [NOT_LOADED] * 5 + [None]
    for loaded, step in zip(light.steps, traj.steps, strict=True):
        assert (loaded.step_hash, loaded.output_payload()) == (
            step.step_hash,
            step.output_payload(),
        )
    with pytest.raises(CanonicalEncodingError):  # never sealed or checked as if it were a value
        light.verify()


def append_space(conn, address):
    (data,) = conn.execute("SELECT data FROM blobs WHERE hash=?", (address,)).fetchone()
    conn.execute("UPDATE blobs SET data=? WHERE hash=?", (data + b" ", address))


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_a_session_loaded_without_inputs_still_checks_them(db_path, damage):
    traj = make()
    with CheckpointStore(db_path) as store:
        store.save(traj)
        conn = store._conn()
        address = traj.steps[3].input_address
        if damage == "changed":
            append_space(conn, address)
        else:
            conn.execute("DELETE FROM blobs WHERE hash=?", (address,))
        conn.commit()
        # a damaged output before it is named first, as a whole load names it
        for inputs in (True, False):
            with pytest.raises(ChainIntegrityError, match="step 3") as err:
                store.load("s1", inputs=inputs)
            assert err.value.step_index == 3
        append_space(conn, traj.steps[1].output_address)
        conn.commit()
        for inputs in (True, False):
            with pytest.raises(ChainIntegrityError, match="step 1: outputs do not match"):
                store.load("s1", inputs=inputs)
