"""Failures while storing spans lose nothing and hold up nothing else: a write of the
in-memory span sink that fails (the store locked past its timeout, a full disk) is written by
the next flush, a bounded number of times; a trace the durable sink cannot assemble is left
waiting without stopping the others."""

import json
import logging
from dataclasses import replace

import pytest

from agent_replay import CheckpointStore
from agent_replay.errors import StoreError
from agent_replay.store.sink import DurableSpanSink, SpanSink
from conversation_turns import CONV, TURNS


def failing(store, times):
    """``store.save_many`` that raises the first ``times`` calls."""
    real = store.save_many
    calls = []

    def save_many(items, **options):
        calls.append(items)
        if len(calls) <= times:
            raise StoreError("database is locked")
        return real(items, **options)

    return save_many


def test_a_failed_write_is_written_by_the_next_flush(db_path, monkeypatch):
    with CheckpointStore(db_path) as store:
        monkeypatch.setattr(store, "save_many", failing(store, 1))
        sink = SpanSink(store)
        sink.add(TURNS[0])
        with pytest.raises(StoreError):
            sink.flush()
        assert store.session_ids() == [] and sink.pending_spans == len(TURNS[0])
        sink.add(TURNS[1])
        assert sink.flush() == 0  # waits for the retry time
        sink._retry_at = 0.0  # ... which has come
        assert sink.flush() == 1  # both traces, one conversation
        assert [s.trace_id for s in store.load(CONV).steps] == [
            TURNS[0][0].trace_id,
            TURNS[1][0].trace_id,
        ]
        assert sink.dropped_traces == 0 and sink.pending_spans == 0


def test_a_store_that_refuses_writes_holds_every_trace_until_it_takes_them(
    db_path, monkeypatch, caplog
):
    """A full disk is not the traces' fault: none is dropped however long it lasts (they were
    dropped after three failed writes, 1.5 s), retries back off, and the return is logged."""
    with CheckpointStore(db_path) as store:
        monkeypatch.setattr(store, "save_many", failing(store, 2 * len(TURNS)))
        sink = SpanSink(store)
        delays = []
        for turn in TURNS:
            sink.add(turn)
            for _ in range(2):
                with pytest.raises(StoreError):
                    sink.flush(force=True)
                delays.append(sink._retry_delay)
        assert sink.dropped_traces == 0 and sink.pending_spans == sum(map(len, TURNS))
        assert delays[:4] == [0.5, 1.0, 2.0, 4.0] and max(delays) == SpanSink.MAX_RETRY_SECONDS
        assert sink.flush(force=True) == 1 and sink.pending_spans == 0
        assert len(store.load(CONV).steps) == 9 and not sink.store_failing
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("does not take writes" in m for m in warnings) == 1
    assert sum("takes writes again" in m for m in warnings) == 1


def test_traces_held_past_the_memory_bound_are_dropped_oldest_first_and_logged_once_a_minute(
    db_path, monkeypatch, caplog
):
    with CheckpointStore(db_path) as store:
        monkeypatch.setattr(store, "save_many", failing(store, 10_000))
        sink = SpanSink(store, hold_bytes=1)  # room for one trace
        for turn in TURNS:
            sink.add(turn)
            with pytest.raises(StoreError):
                sink.flush(force=True)
        assert sink.dropped_traces == len(TURNS) - 1
        assert list(sink._pending) == [TURNS[-1][0].trace_id]  # the newest kept
        drops = [r for r in caplog.records if "dropping trace" in r.getMessage()]
        assert len(drops) == 1 and "held past the memory bound" in drops[0].getMessage()
        sink.close_report()
    assert f"{len(TURNS) - 1} traces dropped in all" in caplog.text
    assert f"{len(TURNS[-1])} spans of 1 traces were never stored" in caplog.text


def test_a_trace_that_cannot_be_assembled_is_dropped_after_a_few_attempts_alone(
    db_path, monkeypatch
):
    import agent_replay.store.sink as sink_module

    real = sink_module.assemble
    bad = TURNS[0][0].trace_id

    def assemble(spans, **options):
        if any(s.trace_id == bad for s in spans):
            raise ValueError("cannot assemble")
        return real(spans, **options)

    monkeypatch.setattr(sink_module, "assemble", assemble)
    with CheckpointStore(db_path) as store:
        sink = SpanSink(store)
        sink.add(TURNS[0])
        sink.add(TURNS[1])
        with pytest.raises(ValueError):
            sink.flush(force=True)
        assert [s.trace_id for s in store.load(CONV).steps] == [TURNS[1][0].trace_id]
        for _ in range(SpanSink.MAX_ATTEMPTS - 1):
            with pytest.raises(ValueError):
                sink.flush(force=True)
        assert sink.dropped_traces == 1 and sink.pending_spans == 0
        assert sink.flush() == 0  # nothing left to try


def test_a_trace_that_cannot_be_assembled_holds_up_no_other(db_path, caplog):
    """A stored row that cannot be read (a damaged disk page, say) fails its trace alone: the
    other traces of the batch are assembled, the bad one waits and is tried a few times."""
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store)
        sink.add(TURNS[0])
        sink.add(TURNS[1])
        bad = TURNS[0][0]
        conn = store._conn()
        conn.execute(
            "UPDATE pending_spans SET data=? WHERE trace_id=? AND span_id=?",
            (b"{not json", bad.trace_id, bad.span_id),
        )
        for _ in range(DurableSpanSink.MAX_ATTEMPTS + 2):
            sink.assemble_ready()
        assert [s.trace_id for s in store.load(CONV).steps] == [TURNS[1][0].trace_id]
        assert list(sink.failed_traces) == [bad.trace_id]
        assert sink._attempts[bad.trace_id] == DurableSpanSink.MAX_ATTEMPTS  # then left alone
        assert store.pending_counts()["spans_waiting"] == len(TURNS[0])  # nothing lost
    assert "cannot assemble trace" in caplog.text


def test_a_store_that_fails_holds_everything_for_the_next_call(db_path, monkeypatch):
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store)
        sink.add(TURNS[0])
        monkeypatch.setattr(store, "commit_assembled", disk_full)
        with pytest.raises(StoreError):
            sink.assemble_ready()
        assert sink.failed_traces == {}  # not the trace's fault: nothing given up
        monkeypatch.undo()
        assert sink.assemble_ready() == 1


def late_span():
    """A chat span of the first turn's trace that arrives after the conversation is stored."""
    chat = TURNS[0][1]
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": "late"}]}]
    attributes = {**chat.attributes, "gen_ai.output.messages": json.dumps(answer)}
    return replace(
        chat, span_id="00000000000000ff", start_ns=chat.start_ns + 1, attributes=attributes
    )


def disk_full(*args, **kwargs):
    raise StoreError("disk full")


def test_a_stored_session_that_cannot_be_read_for_now_is_never_replaced(db_path, monkeypatch):
    """A merge must read the whole stored conversation; when that read fails for a passing
    reason (SQLite's temporary files on a full disk), the spans wait and the conversation
    stays whole (it was replaced by the one trace being merged: 9000 steps became 1)."""
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=0)
        for turn in TURNS:
            sink.add(turn)
        sink.assemble_ready(force=True)
        whole = store.load(CONV)
        sink.add([late_span()])  # merged with the stored conversation, read whole
        monkeypatch.setattr(store, "load", disk_full)
        with pytest.raises(StoreError):
            sink.assemble_ready(force=True)
        monkeypatch.undo()
        assert store.load(CONV) == whole and store.pending_counts()["spans_waiting"] == 1
        sink.assemble_ready(force=True)
        assert len(store.load(CONV).steps) == len(whole.steps) + 1


def test_a_damaged_stored_session_is_kept_and_the_new_capture_saved_beside_it(db_path, caplog):
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, idle_seconds=0)
        for turn in TURNS:
            sink.add(turn)
        sink.assemble_ready(force=True)
        steps = len(store.load(CONV).steps)
        conn = store._conn()
        conn.execute(
            "UPDATE blobs SET data = data || X'20' WHERE hash = (SELECT MIN(hash) FROM blobs)"
        )
        sink.add([late_span()])
        sink.assemble_ready(force=True)
        assert sorted(store.session_ids()) == [CONV, f"{CONV}.unmerged"]
        aside = store.load(f"{CONV}.unmerged").steps  # the trace, assembled again with it
        assert late_span().span_id in {s.span_id for s in aside}
        assert (
            conn.execute("SELECT n_steps FROM sessions WHERE session_id=?", (CONV,)).fetchone()[0]
            == steps
        )  # the damaged one kept as it was, for inspection
    assert f"session {CONV} is damaged" in caplog.text


def test_a_repeating_error_logs_its_traceback_once(caplog):
    """A store down for a day logged a full traceback every minute (1,400 a day); now the
    first, and again only when the error changes, with a one-line summary between."""
    from agent_replay.store.sink import ErrorLog

    errors = ErrorLog("store captured spans", logging.getLogger("test.errorlog"))
    errors._throttle.interval = 0.0  # every call is due, as a minute apart

    def fail(message):
        try:
            raise OSError(message)
        except OSError:
            errors.record()

    with caplog.at_level(logging.ERROR, logger="test.errorlog"):
        for message in ("disk full", "disk full", "disk full", "read-only", "read-only"):
            fail(message)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert [r.exc_info[1].args[0] for r in tracebacks] == ["disk full", "read-only"]
    summaries = [r.getMessage() for r in caplog.records if not r.exc_info]
    assert summaries == ["agent-replay: failed to store captured spans: OSError: disk full"] * 2 + [
        "agent-replay: failed to store captured spans: OSError: read-only"
    ]
    assert errors.count == 5


def test_while_the_store_refuses_writes_a_retry_does_not_assemble_the_backlog(db_path, monkeypatch):
    """A lock another writer holds (as a full disk or a read-only file would): a retry asks
    the store with one small write first, and assembles the held traces only once it takes
    them (every retry used to assemble the whole backlog, seconds of work in a long outage)."""
    import sqlite3

    import agent_replay.store.sink as sink_module

    assembled = []
    real_assemble = sink_module.assemble
    monkeypatch.setattr(
        sink_module,
        "assemble",
        lambda spans, **kw: assembled.append(len(spans)) or real_assemble(spans, **kw),
    )
    with CheckpointStore(db_path, busy_timeout=0.05) as store:
        sink = SpanSink(store)
        holder = sqlite3.connect(db_path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        for turn in TURNS:
            sink.add(turn)
        with pytest.raises(StoreError, match="locked"):
            sink.flush(force=True)  # the first failure: assembled, then refused
        assert len(assembled) == 1 and sink.store_failing
        for _ in range(3):
            sink._retry_at = 0.0
            with pytest.raises(StoreError, match="locked"):
                sink.flush()
        assert len(assembled) == 1  # the retries did not assemble anything
        holder.execute("ROLLBACK")
        holder.close()
        sink._retry_at = 0.0
        assert sink.flush() == 1 and not sink.store_failing
        assert len(store.load(CONV).steps) == 9 and sink.pending_spans == 0


def test_traces_arriving_while_the_store_is_down_stay_within_hold_bytes(db_path):
    """The retry's check of the store must hold what it did not write as a failed write
    does: within hold_bytes, the oldest dropped (they piled up without bound)."""
    import sqlite3

    from agent_replay.mapping.spans import NormalizedSpan
    from agent_replay.store.sink import _memory_size

    def trace(i):
        t = f"{i:032x}"
        root = NormalizedSpan(
            trace_id=t, span_id="1" * 16, name="agent", parent_span_id=None, start_ns=1,
            end_ns=3, attributes={"gen_ai.operation.name": "invoke_agent"},
        )  # fmt: skip
        tool = NormalizedSpan(
            trace_id=t, span_id="2" * 16, name="tool", parent_span_id="1" * 16, start_ns=2,
            end_ns=3, attributes={"gen_ai.tool.name": "t", "gen_ai.tool.call.result": "x" * 20000},
        )  # fmt: skip
        return [root, tool]

    with CheckpointStore(db_path, busy_timeout=0.01) as store:
        blocker = sqlite3.connect(db_path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # every write fails
        sink = SpanSink(store, hold_bytes=200_000, retry_seconds=0.001)
        for i in range(100):
            sink.add(trace(i))
            sink._retry_at = 0.0
            with pytest.raises(StoreError):
                sink.flush()
        held = sum(_memory_size(s) for t in sink._pending.values() for s in t.values())
        assert held <= 200_000 + 25_000 and sink.dropped_traces >= 85
        blocker.execute("ROLLBACK")
        blocker.close()
        sink._retry_at = 0.0
        kept = len(sink._pending)
        assert sink.flush() == kept and sink.pending_spans == 0 and not sink.store_failing
        assert len(store.session_ids()) == kept == 100 - sink.dropped_traces
