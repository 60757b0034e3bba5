"""Hypothesis invariants of the store: tampering is always caught, everything round-trips.

Both run against real SQLite files on disk.
"""

from __future__ import annotations

import shutil
import sqlite3
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent_replay import CheckpointStore, canonical
from agent_replay.errors import ChainIntegrityError, SessionNotFoundError
from agent_replay.model import (
    Lineage,
    Outcome,
    SessionEnd,
    Step,
    StepDraft,
    StepKind,
    Trajectory,
    chain_steps,
)

# keys that look like the canonical encoding's own tags must still round-trip
TAG_LIKE = st.sampled_from(["$tuple", "$map", "$bytes", "$float", "$set", "$uuid", "$x", ""])
TEXT = st.text(max_size=12)
KEY_TEXT = TEXT | TAG_LIKE

hashable_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    TEXT,
    st.binary(max_size=8),
)
hashables = st.recursive(
    hashable_scalars,
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=4,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(),  # NaN, ±inf and -0.0 included
    TEXT,
    st.binary(max_size=16),
    st.binary(max_size=8).map(bytearray),
    st.datetimes(),
    st.dates(),
    st.times(),
    st.decimals(allow_nan=False),
    st.uuids(),
)

values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(KEY_TEXT, inner, max_size=4),
        st.dictionaries(hashables, inner, max_size=3),  # non-str keys
        st.sets(hashable_scalars, max_size=3),
        st.frozensets(hashable_scalars, max_size=3),
    ),
    max_leaves=12,
)

optional_text = st.none() | TEXT
timestamps = st.none() | st.integers(min_value=0, max_value=2**64)


@st.composite
def drafts(draw: Any) -> StepDraft:
    observed = draw(st.booleans())
    return StepDraft(
        kind=draw(st.sampled_from(list(StepKind))),
        name=draw(TEXT),
        inputs=draw(values),
        action=draw(values),
        observation=draw(values) if observed else None,
        observed=observed,
        agent=draw(optional_text),
        resamplable=draw(st.booleans()),
        side_effects=draw(st.booleans()),
        error=draw(st.none() | st.fixed_dictionaries({"type": TEXT, "message": TEXT})),
        started_ns=draw(timestamps),
        ended_ns=draw(timestamps),
        trace_id=draw(optional_text),
        span_id=draw(optional_text),
        parent_span_id=draw(optional_text),
        attributes=draw(st.dictionaries(KEY_TEXT, values, max_size=3)),
    )


outcomes = st.none() | st.builds(
    Outcome,
    score=st.none() | st.floats(min_value=0.0, max_value=1.0),
    failed=st.none() | st.booleans(),
    result=values,
    error=st.none() | st.dictionaries(TEXT, values, min_size=1, max_size=3),
)
lineages = st.none() | st.builds(
    Lineage,
    parent_session=TEXT,
    fork_step=st.integers(min_value=0, max_value=1000),
    intervention=st.dictionaries(TEXT, values, max_size=2),
)


@st.composite
def trajectories(draw: Any, session_id: str | None = None) -> Trajectory:
    steps = chain_steps(draw(st.lists(drafts(), max_size=5)))
    metadata = draw(st.dictionaries(KEY_TEXT, values, max_size=3))
    if draw(st.booleans()):
        metadata["source"] = draw(st.sampled_from(["native", "otel", "import:x"]))
    return Trajectory(
        session_id=session_id if session_id is not None else draw(TEXT),
        steps=steps,
        task=draw(values),
        seed=draw(st.none() | st.integers()),
        outcome=draw(outcomes),
        lineage=draw(lineages),
        metadata=metadata,
        effects=tuple(
            draw(st.lists(st.tuples(st.integers(0, 10), st.sampled_from(["now", "uuid"]), values)))
        ),
    )


# -- save → load → verify round trip ------------------------------------------------------------

NAN = b'{"$float":"nan"}'


def stored_bytes(traj: Trajectory) -> list[bytes]:
    """Every byte string the store writes for ``traj`` (what is hashed)."""
    out = [canonical.encode(traj.header())]
    for step in traj.steps:
        out += [step.header_bytes, step.input_bytes, step.output_bytes]
    return out


def assert_round_trip(store: CheckpointStore, traj: Trajectory) -> None:
    loaded = store.load(traj.session_id)
    assert loaded.head_hash == traj.head_hash
    assert loaded.digest == traj.digest
    # exactly the same bytes come back, and re-encoding what was loaded reproduces them: the
    # tags keep tuples, bytes, sets, non-str keys, NaN, ... as what they were, and every
    # dict its key order
    assert stored_bytes(loaded) == stored_bytes(traj)
    for old, new in zip(traj.steps, loaded.steps, strict=True):
        assert canonical.encode_stored(new.inputs).data == old.input_bytes
        assert canonical.encode_stored(new.output_payload()).data == old.output_bytes
        assert canonical.encode(new.header()) == old.header_bytes
    if not any(NAN in data for data in stored_bytes(traj)):  # NaN != NaN defeats ==
        assert loaded == traj
    loaded.verify()
    (result,) = store.verify(traj.session_id)
    assert result.ok, result.problem


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(trajectories(), min_size=1, max_size=3, unique_by=lambda t: t.session_id))
def test_save_load_verify_round_trips(batch):
    with tempfile.TemporaryDirectory() as tmp:
        with CheckpointStore(Path(tmp) / "store.sqlite", durable=False) as store:
            store.save_many(batch)
            for traj in batch:
                assert_round_trip(store, traj)
            assert set(store.session_ids()) == {t.session_id for t in batch}
        # and again from a fresh connection, as another process would read it
        with CheckpointStore(Path(tmp) / "store.sqlite", durable=False) as store:
            for traj in batch:
                assert_round_trip(store, traj)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trajectories(session_id="parent"), st.data())
def test_forks_share_their_prefix_and_round_trip(parent, data):
    assume(parent.steps)
    cut = data.draw(st.integers(0, len(parent.steps)))
    extra = data.draw(st.lists(drafts(), max_size=2))
    child = Trajectory(
        "child",
        chain_steps([s.draft() for s in parent.steps[:cut]] + extra),
        lineage=Lineage("parent", cut, {"kind": "test"}),
    )
    with tempfile.TemporaryDirectory() as tmp:
        with CheckpointStore(Path(tmp) / "store.sqlite", durable=False) as store:
            store.save(parent)
            before = store.stats()["steps"]
            store.save(child)
            assert store.stats()["steps"] - before <= len(extra)  # the prefix is stored once
            assert_round_trip(store, parent)
            assert_round_trip(store, child)


# -- any changed stored byte is caught -----------------------------------------------------------

# Every column whose bytes are covered by a hash or checked against the session header.
# sessions.saved_ns (when the row was written) is the only column outside both, by design.
KEYS = {"blobs": "hash", "steps": "hash", "sessions": "session_id"}
COLUMNS = {
    "blobs": ("hash", "data"),
    "steps": ("hash", "prev", "idx", "header"),
    "sessions": (
        "session_id",
        "head",
        "n_steps",
        "header",
        "digest",
        "source",
        "failed",
        "score",
        "parent_session",
        "fork_step",
    ),
}


def _tamper_fixture_trajectories() -> list[Trajectory]:
    shared = "shared blob " * 20
    drafts_ = [
        StepDraft(StepKind.LLM, "plan", inputs={"q": "why?", "ctx": shared}, action=("a", 1.5)),
        StepDraft(StepKind.TOOL, "search", inputs={"q": shared}, action=b"\x00\x01", agent="bot"),
        StepDraft(
            StepKind.TOOL,
            "act",
            inputs={1: "int key", (2, 3): None},
            action={"x"},
            observation=float("nan"),
            observed=True,
            side_effects=True,
            error={"type": "E", "message": "m"},
        ),
        StepDraft(StepKind.LLM, "answer", inputs={"q": shared}, action="done"),
    ]
    parent = Trajectory(
        "parent",
        chain_steps(drafts_),
        task={"q": "why?"},
        seed=7,
        outcome=Outcome.from_score(0.25, {"r": 1}),
        metadata={"source": "native"},
        effects=((1, "now", 1.5),),
    )
    child = Trajectory(
        "child",
        chain_steps([*drafts_[:2], StepDraft(StepKind.LLM, "answer", inputs={}, action="ok")]),
        outcome=Outcome.from_score(1.0),
        lineage=Lineage("parent", 2, {"force": "ok"}),
        metadata={"source": "otel"},
    )
    lone = Trajectory("empty", (), outcome=Outcome(failed=None))
    return [parent, child, lone]


ENDS = [SessionEnd.of(t) for t in _tamper_fixture_trajectories()]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, list[tuple[str, str, Any, Any]]]:
    """A store on disk and every (table, column, key, value) cell worth tampering with."""
    path = tmp_path_factory.mktemp("tamper") / "pristine.sqlite"
    with CheckpointStore(path) as store:
        store.save_many(_tamper_fixture_trajectories())
    conn = sqlite3.connect(path)
    cells = []
    for table, columns in COLUMNS.items():
        for column in columns:
            for key, value in conn.execute(f"SELECT {KEYS[table]}, {column} FROM {table}"):
                if value is not None:
                    cells.append((table, column, key, value))
    conn.close()
    assert {c[0] for c in cells} == set(COLUMNS)
    return path, cells


@st.composite
def tampered(draw: Any, value: Any) -> Any:
    """``value`` with exactly one stored byte (or bit, for numbers) changed."""
    if isinstance(value, bytes):
        i = draw(st.integers(0, len(value) - 1))
        return value[:i] + bytes([value[i] ^ draw(st.integers(1, 255))]) + value[i + 1 :]
    if isinstance(value, str):
        if draw(st.booleans()):  # the same text stored as a BLOB: a type confusion
            return draw(tampered(value.encode("utf-8")))
        i = draw(st.integers(0, len(value) - 1)) if value else 0
        char = draw(st.characters(codec="utf-8").filter(lambda c: value[i : i + 1] != c))
        return value[:i] + char + value[i + 1 :]
    if isinstance(value, int):
        return value ^ (1 << draw(st.integers(0, 62)))
    if isinstance(value, float):
        (bits,) = struct.unpack("<Q", struct.pack("<d", value))
        return struct.unpack("<d", struct.pack("<Q", bits ^ (1 << draw(st.integers(0, 63)))))[0]
    raise AssertionError(f"unexpected stored type {type(value)}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_changing_any_stored_byte_is_caught(pristine, data):
    path, cells = pristine
    table, column, key, value = data.draw(st.sampled_from(cells), label="cell")
    new = data.draw(tampered(value), label="tampered value")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.sqlite"
        shutil.copyfile(path, copy)
        conn = sqlite3.connect(copy)
        try:
            changed = conn.execute(
                f"UPDATE {table} SET {column}=? WHERE {KEYS[table]}=?", (new, key)
            ).rowcount
            assert changed == 1
            conn.commit()
        except sqlite3.IntegrityError:  # the change collides with another row's key
            assume(False)
        finally:
            conn.close()
        with CheckpointStore(copy) as store:
            results = store.verify()
            assert not all(r.ok for r in results), (table, column, value, new)
            for result in results:
                if result.ok:
                    store.load(result.session_id)
                else:
                    assert result.problem
                    with pytest.raises(ChainIntegrityError):
                        store.load(result.session_id)
            # reading only a session's end never returns damaged data: either the end as it
            # was saved, or the error (damage before the end is for load() to find)
            for original in ENDS:
                try:
                    end = store.load_end(original.session.session_id)
                except (ChainIntegrityError, SessionNotFoundError):  # not found: id changed
                    continue
                assert end == original, (table, column, value, new)


# -- regressions found by the invariants --------------------------------------------------------


def test_empty_outcome_error_round_trips(db_path):
    traj = Trajectory("s", (), outcome=Outcome(error={}))
    with CheckpointStore(db_path) as store:
        store.save(traj)
        assert store.load("s") == traj


def test_huge_int_is_a_canonical_encoding_error():
    from agent_replay.errors import CanonicalEncodingError

    with pytest.raises(CanonicalEncodingError):
        Step.seal(StepDraft(StepKind.LLM, "big", inputs=10**5000), 0)
