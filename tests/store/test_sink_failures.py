"""Failures while storing spans lose nothing and hold up nothing else: a write of the
in-memory span sink that fails (the store locked past its timeout, a full disk) is written by
the next flush, a bounded number of times; a trace the durable sink cannot assemble is left
waiting without stopping the others."""

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
        assert sink.flush() == 1  # both traces, one conversation
        assert [s.trace_id for s in store.load(CONV).steps] == [
            TURNS[0][0].trace_id,
            TURNS[1][0].trace_id,
        ]
        assert sink.dropped_traces == 0 and sink.pending_spans == 0


def test_a_trace_that_never_writes_is_dropped_after_a_few_attempts(db_path, monkeypatch):
    with CheckpointStore(db_path) as store:
        monkeypatch.setattr(store, "save_many", failing(store, 99))
        sink = SpanSink(store)
        sink.add(TURNS[0])
        for _ in range(SpanSink.MAX_ATTEMPTS):
            with pytest.raises(StoreError):
                sink.flush()
        assert sink.dropped_traces == 1 and sink.pending_spans == 0
        assert sink.flush() == 0  # nothing left to try


def test_a_store_gone_for_good_logs_one_line_a_minute_not_one_per_trace(
    db_path, monkeypatch, caplog
):
    """A deleted or full store drops every trace after it; capture.md promises at most one
    summary line a minute (it was one error line per trace: 800 for 800 traces)."""
    with CheckpointStore(db_path) as store:
        monkeypatch.setattr(store, "save_many", failing(store, 10_000))
        sink = SpanSink(store)
        for turn in TURNS:
            sink.add(turn)
            for _ in range(SpanSink.MAX_ATTEMPTS):
                with pytest.raises(StoreError):
                    sink.flush()
        assert sink.dropped_traces == len(TURNS) > 2
        drops = [r for r in caplog.records if "dropping trace" in r.getMessage()]
        assert len(drops) == 1
        sink._drop_log._logged_at -= sink._drop_log.interval  # a minute later
        sink.add(TURNS[0])
        for _ in range(SpanSink.MAX_ATTEMPTS):
            with pytest.raises(StoreError):
                sink.flush()
    drops = [r for r in caplog.records if "dropping trace" in r.getMessage()]
    assert len(drops) == 2 and f"{len(TURNS) - 1} more dropped since" in drops[1].getMessage()


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


def disk_full(*args, **kwargs):
    raise StoreError("disk full")
