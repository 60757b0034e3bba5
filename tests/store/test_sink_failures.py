"""A write of the in-memory span sink that fails (the store locked past its timeout, a full
disk) loses nothing: its traces are written by the next flush, a bounded number of times."""

import pytest

from agent_replay import CheckpointStore
from agent_replay.errors import StoreError
from agent_replay.store.sink import SpanSink
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
