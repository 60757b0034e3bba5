"""Schema 2: the receiver's pending tables, the migration from schema 1, and DurableSpanSink."""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from agent_replay import CheckpointStore, Trajectory
from agent_replay.errors import StoreError
from agent_replay.mapping.spans import LogEvent, NormalizedSpan
from agent_replay.model import StepDraft, StepKind, chain_steps
from agent_replay.store.sink import DurableSpanSink
from agent_replay.store.sqlite import PAGE_SIZE, SCHEMA_VERSION

TRACE = "5b8efff798038103d269b633813fc60c"
CALL = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "t"}]}]


def span(n, parent=None, trace=TRACE, **attributes):
    return NormalizedSpan(
        trace_id=trace,
        span_id=f"{n:016x}",
        name=f"s{n}",
        parent_span_id=None if parent is None else f"{parent:016x}",
        start_ns=n,
        end_ns=n + 1,
        attributes=attributes,
    )


def agent(n=1, trace=TRACE):
    return span(
        n, trace=trace, **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
    )


def tool(n, parent=1, trace=TRACE, result="r"):
    return span(n, parent, trace, **{"gen_ai.tool.name": "t", "gen_ai.tool.call.result": result})


def test_a_schema_1_store_is_migrated_in_place_and_stays_readable(db_path):
    trajectory = Trajectory(
        "old",
        chain_steps([StepDraft(kind=StepKind.LLM, name="x", inputs=1, action=2)]),
        metadata={"trace_ids": [TRACE]},
    )
    with CheckpointStore(db_path) as store:
        store.save(trajectory)
    # make it exactly what schema 1 wrote: no pending tables, no trace index, version 1
    conn = sqlite3.connect(db_path)
    for table in ("pending_spans", "pending_logs", "session_traces"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with CheckpointStore(db_path) as store:
        assert store.load("old") == trajectory
        assert store.pending_counts()["spans_waiting"] == 0
        assert store.trace_sessions([TRACE]) == {TRACE: ["old"]}  # the index was filled
    conn = sqlite3.connect(db_path)
    version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    conn.close()
    assert int(version) == SCHEMA_VERSION == 4


def test_a_newer_schema_is_refused(db_path):
    CheckpointStore(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute(f"UPDATE meta SET value='{SCHEMA_VERSION + 1}' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer agent-replay"):
        CheckpointStore(db_path)


def test_durable_sink_waits_for_the_root_then_assembles_and_dedups(db_path):
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=3600)
        assert sink.add([tool(2), tool(3)]) == (2, 0)
        assert sink.add([tool(2)]) == (0, 0)  # a retried export is stored once
        assert sink.assemble_ready() == 0  # no root yet, not idle
        assert sink.add([agent()]) == (1, 0)
        assert sink.assemble_ready() == 1
        (traj,) = store.load_all()
        assert [s.span_id for s in traj.steps] == [f"{2:016x}", f"{3:016x}"]
        assert store.pending_counts() == {
            "spans_waiting": 0,
            "spans_assembled": 3,
            "logs_waiting": 0,
            "logs_assembled": 0,
        }
        # a late span of the assembled trace re-assembles the whole trace
        sink.add([tool(4)])
        assert sink.assemble_ready() == 1
        assert len(store.load(TRACE).steps) == 3


def chat_and_its_details() -> tuple[NormalizedSpan, LogEvent]:
    """A chat span (span 2 under the agent span 1) and the log record holding its output."""
    chat = span(2, 1, **{"gen_ai.operation.name": "chat"})
    details = LogEvent(
        "gen_ai.client.inference.operation.details",
        5,
        {"gen_ai.output.messages": CALL},
        trace_id=TRACE,
        span_id=f"{2:016x}",
    )
    return chat, details


def test_late_logs_join_their_span_and_unjoinable_logs_are_counted(db_path):
    chat, details = chat_and_its_details()
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=3600)
        sink.add([agent(), chat])
        sink.assemble_ready()
        assert store.load(TRACE).steps[0].action is None
        assert sink.add([], [details, details]) == (0, 1)
        assert sink.add([], [LogEvent("x", 1)]) == (0, 0) and sink.unjoinable_logs == 1
        assert sink.assemble_ready() == 1
        assert store.load(TRACE).steps[0].action == CALL


def test_idle_traces_and_force(db_path):
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=0)
        sink.add([tool(2)])  # root never arrives: assembled once idle
        assert sink.assemble_ready() == 1
        sink = DurableSpanSink(store, idle_seconds=3600)
        sink.add([tool(3, trace="6" * 32)])
        assert sink.assemble_ready() == 0
        assert sink.assemble_ready(force=True) == 1


def test_conversations_spread_over_traces_merge(db_path):
    def conv(n, trace):
        return span(
            n,
            trace=trace,
            **{"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "conv"},
        )

    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=3600)
        sink.add([conv(1, "a" * 32), tool(2, 1, "a" * 32)])
        sink.assemble_ready()
        sink.add([conv(3, "b" * 32), tool(4, 3, "b" * 32)])
        sink.assemble_ready()
        merged = store.load("conv")
        assert len(merged.steps) == 2 and merged.metadata["trace_ids"] == ["a" * 32, "b" * 32]


def test_purge_forgets_only_assembled_traces(db_path):
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=3600, retain_seconds=0)
        sink.add([agent(), tool(2), tool(3, trace="7" * 32)])
        sink.assemble_ready()
        assert sink.purge() == 2
        counts = store.pending_counts()
        assert counts["spans_assembled"] == 0 and counts["spans_waiting"] == 1
        assert json.loads(store.pending_rows(["7" * 32])[0][0][2])["s"] == f"{3:016x}"


def test_a_late_span_of_a_purged_trace_joins_its_stored_steps(db_path):
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=3600, retain_seconds=0)
        sink.add([agent(), tool(2, result="first")])
        sink.assemble_ready()
        assert sink.purge() == 2  # the trace's spans are gone; its steps are stored
        sink.add([tool(3, result="late")])  # a late child: its trace is assembled from it alone
        sink.assemble_ready(force=True)
        steps = store.load(TRACE).steps
    assert [s.action for s in steps] == ["first", "late"]


def test_a_late_span_of_a_purged_trace_finds_its_conversation(db_path):
    """The conversation id is on the agent span only; the late span still joins the
    conversation's session, not a session of its own trace."""
    root = span(
        1,
        trace=TRACE,
        **{"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "conv"},
    )
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=3600, retain_seconds=0)
        sink.add([root, tool(2, result="first")])
        sink.assemble_ready()
        sink.purge()
        sink.add([tool(3, result="late")])
        sink.assemble_ready(force=True)
        assert store.session_ids() == ["conv"]
        assert [s.action for s in store.load("conv").steps] == ["first", "late"]


def test_a_schema_3_store_written_by_the_release_before_loads_and_takes_new_sessions(tmp_path):
    """``data/schema3.sqlite`` was written by agent-replay at commit 9549486 (store schema 3,
    every blob in canonical order: see data/README.md). Schema 4 changed no table, only what a
    step header may name, so the old file loads as it is and takes new sessions."""
    from agent_replay import record

    db = tmp_path / "old.sqlite"
    shutil.copyfile(Path(__file__).parent / "data" / "schema3.sqlite", db)
    head = "396b626367894f04caea89ee299d8e1aca0d367603d6e7ff730f20baefb9c061"
    with CheckpointStore(db, read_only=True) as store:
        old = store.load("schema3")
        (stored_digest,) = store._conn().execute("SELECT digest FROM sessions").fetchone()
    assert old.head_hash == head and old.verify() is None
    # its digest, as this version computes it, is the one stored: taking the session over
    # (a merge, an import) and saving it unchanged work (they refused or looped before)
    assert old.digest == stored_digest
    # the one order a schema 3 store kept: keys sorted, non-str keys after str ones
    assert list(old.steps[0].action) == ["a", "z", 1, 2]
    assert old.steps[1].inputs == {"prompt": "z, a, 2, 1"}  # as the agent saw it
    with CheckpointStore(db) as store:  # opened for writing: migrated
        assert store.load("schema3") == old
        store.save(old, replace=False)  # the same content: nothing to refuse
        new = record(lambda ctx: ctx.tool("t", produce=lambda: {"z": 1, "a": 2}), seed=0)
        store.save(new)
        assert list(store.load(new.session_id).steps[0].action) == ["z", "a"]
        assert all(result.ok for result in store.verify())
    conn = sqlite3.connect(db)
    version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    assert int(version) == SCHEMA_VERSION == 4
    assert page_size == 4096  # an existing file keeps its pages; a new one gets PAGE_SIZE


def test_a_new_store_has_pages_that_hold_a_step_header_whole(db_path):
    CheckpointStore(db_path).close()
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA page_size").fetchone() == (PAGE_SIZE,) == (8192,)
    conn.close()


def test_commands_that_only_read_leave_an_older_store_as_it_was(tmp_path):
    """sessions, show, verify, diff and the console opened the store for writing, so the
    first look with a newer agent-replay migrated it for good, and the version the user came
    from refused it from then on."""
    from click.testing import CliRunner

    from agent_replay.cli import main
    from agent_replay.console.app import Console

    db = tmp_path / "old.sqlite"
    shutil.copyfile(Path(__file__).parent / "data" / "schema3.sqlite", db)
    runner = CliRunner()
    for args in (
        ["sessions", "--db", str(db)],
        ["show", "--db", str(db), "--session", "schema3"],
        ["verify", "--db", str(db)],
        ["diff", "--db", str(db), "schema3", "schema3"],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    with Console(db) as console:
        assert console.store.session_ids() == ["schema3"]
    conn = sqlite3.connect(db)
    version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    conn.close()
    assert version == "3"


def _indexes(path) -> set[str]:
    conn = sqlite3.connect(path)
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    conn.close()
    return names


PENDING_INDEXES = {"pending_spans_received", "pending_logs_received", "pending_logs_waiting"}


def test_a_receiver_indexes_the_pending_tables_of_a_store_made_without_them(db_path):
    """The purge (every minute, under the write lock) read the whole pending_spans table,
    span data included: 1.2 s at 150k rows of 4 kB; with the index it reads the old rows."""
    CheckpointStore(db_path).close()
    assert _indexes(db_path) >= PENDING_INDEXES  # a new store has them
    conn = sqlite3.connect(db_path)
    for name in PENDING_INDEXES:
        conn.execute(f"DROP INDEX {name}")  # as a store made by the release before
    conn.commit()
    conn.close()
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=3600, retain_seconds=0)
        assert _indexes(db_path) >= PENDING_INDEXES
        sink.add([agent(), tool(2), tool(3, trace="7" * 32)])
        sink.assemble_ready()
        assert sink.purge() == 2 and store.pending_counts()["spans_waiting"] == 1
        plan = " ".join(
            row[3]
            for row in store._conn().execute(
                "EXPLAIN QUERY PLAN SELECT trace_id FROM pending_spans WHERE received_ns < 1"
            )
        )
        assert "pending_spans_received" in plan


def test_log_records_wait_apart_until_their_trace_has_a_span(db_path):
    """Records whose span never reaches this receiver (head-sampled traces, a logs pipeline
    not split like the traces one) are not read by every look for ready traces; the first
    span of their trace brings them back, and they join it."""
    chat, details = chat_and_its_details()
    orphan = LogEvent("x", 1, {"a": 1}, trace_id="8" * 32, span_id="1" * 16)
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=0)
        assert sink.add([], [details, orphan]) == (0, 2)
        states = dict(store._conn().execute("SELECT trace_id, state FROM pending_logs"))
        assert states == {TRACE: 2, "8" * 32: 2}
        assert store.ready_traces(idle_ns=0, force=True) == []
        assert store.pending_counts()["logs_waiting"] == 2  # they wait all the same
        sink.add([agent(), chat])
        assert store.ready_traces(idle_ns=0) == [TRACE]
        assert sink.assemble_ready() == 1
        assert store.load(TRACE).steps[0].action == CALL  # the record joined its span
        states = dict(store._conn().execute("SELECT trace_id, state FROM pending_logs"))
        assert states == {TRACE: 1, "8" * 32: 2}


def _pending_rows(path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    rows = {
        "spans": conn.execute(
            "SELECT trace_id, span_id, data, is_root, received_ns, state FROM pending_spans "
            "ORDER BY trace_id, span_id"
        ).fetchall(),
        "logs": conn.execute(
            "SELECT digest, trace_id, span_id, data, received_ns, state FROM pending_logs "
            "ORDER BY digest"
        ).fetchall(),
    }
    conn.close()
    return rows


def _rowid_tables(path) -> set[str]:
    conn = sqlite3.connect(path)
    tables = {
        name
        for name in ("pending_spans", "pending_logs")
        if "WITHOUT ROWID"
        not in conn.execute("SELECT sql FROM sqlite_master WHERE name=?", (name,)).fetchone()[0]
    }
    conn.close()
    return tables


def test_pending_rows_are_stored_in_the_order_they_arrive(db_path):
    """Rowid tables: a commit's spans go to the table's last pages, not to random pages of
    a table ordered by trace id (more bytes written per span received: receiver.md);
    the trace and span id still key them, so a retried export is stored once."""
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=3600)
        assert sink.add([tool(3, trace="f" * 32), tool(2, trace="0" * 32)]) == (2, 0)
        assert sink.add([tool(3, trace="f" * 32), agent(trace="8" * 32)]) == (1, 0)
        order = store._conn().execute("SELECT trace_id FROM pending_spans ORDER BY rowid")
        assert [row[0][0] for row in order] == ["f", "0", "8"]
    assert _rowid_tables(db_path) == {"pending_spans", "pending_logs"}


def test_a_receiver_moves_the_pending_rows_of_a_store_written_by_the_release_before(tmp_path):
    """``data/schema4-pending.sqlite`` was written by agent-replay at commit 658d471 (pending
    tables WITHOUT ROWID, see data/README.md): an assembled trace (a1...) with a log record,
    a span waiting for its root (b2...) and a log record waiting for its trace's first span
    (c3...). Opening it changes nothing; a receiver (a DurableSpanSink) moves its pending
    tables to rowid tables with every row as it was, and goes on from there."""
    db = tmp_path / "old.sqlite"
    shutil.copyfile(Path(__file__).parent / "data" / "schema4-pending.sqlite", db)
    a, b, c = "a1" * 16, "b2" * 16, "c3" * 16
    before = _pending_rows(db)
    counts = {"spans_waiting": 1, "spans_assembled": 3, "logs_waiting": 1, "logs_assembled": 1}
    with CheckpointStore(db, read_only=True) as store:
        assert store.pending_counts() == counts
    with CheckpointStore(db) as store:  # the older layout reads and writes as it is
        assert store.pending_counts() == counts
        assert _rowid_tables(db) == set()
        sink = DurableSpanSink(store, idle_seconds=3600)
        assert _rowid_tables(db) == {"pending_spans", "pending_logs"}
        assert _pending_rows(db) == before
        assert _indexes(db) >= PENDING_INDEXES | {"pending_spans_state", "pending_logs_trace"}
        store.index_pending()  # nothing left to do
        assert store.pending_counts() == counts
        stored = store.load(a)
        assert [s.span_id[-1] for s in stored.steps] == ["2", "3"]
        # a retried export stores nothing twice; a late span re-assembles its trace whole
        assert sink.add([tool(3, trace=a, result="x" * 5000)]) == (0, 0)
        assert sink.add([tool(4, trace=a, result="late")]) == (1, 0)
        # b's root arrives, and c's first span brings its log record back
        chat = span(2, 1, trace=c, **{"gen_ai.operation.name": "chat"})
        assert sink.add([agent(trace=b), agent(trace=c), chat]) == (3, 0)
        assert sink.assemble_ready() == 3
        assert [s.span_id[-1] for s in store.load(a).steps] == ["2", "3", "4"]
        assert store.load(a).steps[1].action == "x" * 5000  # (the row on an overflow page)
        assert [s.span_id[-1] for s in store.load(b).steps] == ["3"]
        (step,) = store.load(c).steps
        assert step.action == [
            {"role": "assistant", "parts": [{"type": "text", "content": "apart"}]}
        ]
        assert store.pending_counts() == {
            "spans_waiting": 0,
            "spans_assembled": 8,
            "logs_waiting": 0,
            "logs_assembled": 2,
        }
        assert all(result.ok for result in store.verify())
        sink.retain_seconds = 0
        assert sink.purge() == 10
    conn = sqlite3.connect(db)
    version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    conn.close()
    assert int(version) == SCHEMA_VERSION == 4  # the same schema: only the layout moved


def test_moving_the_pending_tables_is_all_or_nothing(tmp_path, monkeypatch, caplog):
    """A receiver that cannot move them (the store locked by another writer, a failure half
    way: here while making the second table) goes on with the older layout, every row as it
    was; the next start moves them."""
    from agent_replay.store import sqlite as store_sqlite

    db = tmp_path / "old.sqlite"
    shutil.copyfile(Path(__file__).parent / "data" / "schema4-pending.sqlite", db)
    before = _pending_rows(db)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with CheckpointStore(db, busy_timeout=0.1) as store:
        DurableSpanSink(store)
    other.execute("ROLLBACK")
    other.close()
    assert _rowid_tables(db) == set() and _pending_rows(db) == before

    statements = store_sqlite._pending_statements

    def failing(table=None):
        if table == "pending_logs":
            raise sqlite3.OperationalError("disk I/O error")
        return statements(table)

    monkeypatch.setattr(store_sqlite, "_pending_statements", failing)
    with CheckpointStore(db) as store:
        DurableSpanSink(store)
        assert store.pending_counts()["spans_waiting"] == 1
    assert _rowid_tables(db) == set() and _pending_rows(db) == before
    assert "could not index" in caplog.text
    monkeypatch.setattr(store_sqlite, "_pending_statements", statements)
    with CheckpointStore(db) as store:
        DurableSpanSink(store)
    assert _rowid_tables(db) == {"pending_spans", "pending_logs"}
    assert _pending_rows(db) == before
