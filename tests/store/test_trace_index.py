"""The store's trace index (schema 3): spans of a trace stored earlier join the session the
trace went to, whoever writes them (a restarted receiver, another process writing the same
store, a later import), and an import of a conversation file by file continues the stored
session instead of loading and sealing it again."""

import json
from dataclasses import replace

import pytest

from agent_replay import CheckpointStore, Trajectory
from agent_replay.errors import SessionChangedError
from agent_replay.ingest import import_into
from agent_replay.mapping.assemble import assemble, continue_session
from agent_replay.model import StepDraft, StepKind, chain_steps
from agent_replay.store.sink import DurableSpanSink, SpanSink, rehome
from conversation_turns import CONV, TURNS, facts, otlp_document, turn, whole

T, U = "a" * 32, "b" * 32
LATE = turn(0, answers="c0")[-1]  # a tool span of turn 0's trace, under its agent span


def session(session_id, *traces):
    steps = chain_steps([StepDraft(kind=StepKind.LLM, name="x", inputs=session_id, action=1)])
    return Trajectory(session_id, steps, metadata={"trace_ids": list(traces)})


def test_the_first_session_written_owns_a_trace_and_the_index_follows_every_write(db_path):
    def owner(trace_id):  # where a fragment of the trace, keyed by its id, goes
        (moved,) = rehome(store, [session(trace_id, trace_id)])
        return moved.session_id

    with CheckpointStore(db_path) as store:
        store.save(session(T, T))  # a fragment stored under its trace id before the rest
        store.save(session("conv", T, U))
        store.save(session("copy", T))  # a copy saved later under another id
        assert store.trace_sessions([T, U, "c" * 32]) == {T: [T, "conv", "copy"], U: ["conv"]}
        assert (owner(T), owner(U)) == ("conv", "conv")
        store.delete("conv")
        assert store.trace_sessions([T, U]) == {T: [T, "copy"]}
        assert owner(T) == "copy"
        store.save(session("copy", U))  # rewritten whole without T
        assert store.trace_sessions([T, U]) == {T: [T], U: ["copy"]}
        assert (owner(T), owner(U)) == (T, "copy")
        # a continuation adds its traces
        (first,) = assemble(TURNS[0])
        (second,) = assemble(TURNS[1])
        store.save(first)
        store.save_many([continue_session(store.load_end(CONV), second)])
        traces = [spans[0].trace_id for spans in TURNS[:2]]
        assert store.trace_sessions(traces) == {t: [CONV] for t in traces}


def test_a_late_span_received_after_a_restart_joins_its_conversation(db_path):
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, retain_seconds=0)
        sink.add(TURNS[0])
        assert sink.assemble_ready() == 1
        sink.purge()  # the trace's spans are forgotten
        assert store.pending_counts()["spans_assembled"] == 0
    with CheckpointStore(db_path) as store:  # the receiver restarted
        sink = DurableSpanSink(store)
        sink.add([LATE])  # no conversation id: it was on the agent span only
        assert sink.assemble_ready(force=True) == 1
        assert store.session_ids() == [CONV]
        assert [s.name for s in store.load(CONV).steps] == ["chat m", "lookup"]


def test_two_processes_writing_one_store_make_one_session_of_a_distributed_trace(db_path):
    remote = replace(LATE, parent_is_remote=True)  # another service's part of the trace
    with CheckpointStore(db_path) as front, CheckpointStore(db_path) as tools:
        first = SpanSink(front)
        first.add(TURNS[0])
        first.flush()
        second = SpanSink(tools)
        second.add([remote])
        assert second.flush() == 1
        assert tools.session_ids() == [CONV]
        steps = tools.load(CONV).steps
    assert [(s.name, s.span_id) for s in steps] == [
        ("chat m", TURNS[0][1].span_id),
        ("lookup", LATE.span_id),
    ]


def test_a_trace_whose_conversation_id_was_in_an_earlier_import_joins_it(tmp_path, db_path):
    first = tmp_path / "first.json"
    first.write_text(json.dumps(otlp_document(TURNS[0])))
    late = tmp_path / "late.json"  # the next file the Collector wrote
    late.write_text(json.dumps(otlp_document([LATE])))
    with CheckpointStore(db_path) as store:
        for path in (first, late, late):  # the late file twice: still one copy of its step
            result = import_into(store, [path])
            assert not result.errors and not result.warnings
        assert store.session_ids() == [CONV]
        assert [s.name for s in store.load(CONV).steps] == ["chat m", "lookup"]


def test_a_conversation_imported_file_by_file_is_continued_not_reloaded(
    tmp_path, db_path, monkeypatch
):
    paths = []
    for n, spans in enumerate(TURNS):
        paths.append(tmp_path / f"turn{n}.json")
        paths[-1].write_text(json.dumps(otlp_document(spans)))
    with CheckpointStore(db_path) as store:
        import_into(store, paths[:1])

        def whole_load(session_id):
            raise AssertionError(f"{session_id} was loaded whole")

        monkeypatch.setattr(store, "load", whole_load)
        for path in paths[1:]:
            import_into(store, [path])
        monkeypatch.undo()
        loaded = store.load(CONV)
    expected = whole()
    assert [facts(s) for s in loaded.steps] == [facts(s) for s in expected.steps]
    assert loaded.metadata["trace_ids"] == expected.metadata["trace_ids"]


@pytest.mark.parametrize("sink_kind", ["memory", "durable"])
def test_a_trace_written_before_its_agent_span_ended_joins_the_conversation(db_path, sink_kind):
    """The idle timeout wrote the chat step alone (the agent span, the only one with the
    conversation id, was still open), under the trace id; when the agent span ends, the
    conversation's session takes the step over and the trace-keyed session is deleted."""
    agent, chat = TURNS[0][:2]
    with CheckpointStore(db_path) as store:
        if sink_kind == "memory":
            sink = SpanSink(store, idle_seconds=0)
            write = sink.flush
        else:
            sink = DurableSpanSink(store, idle_seconds=0)
            write = sink.assemble_ready
        sink.add([chat])
        assert write() == 1
        assert store.session_ids() == [chat.trace_id]
        sink.add([agent])
        assert write() == 1
        assert store.session_ids() == [CONV]
        (step,) = store.load(CONV).steps
        assert (step.span_id, step.agent) == (chat.span_id, "a")
        assert store.trace_sessions([chat.trace_id]) == {chat.trace_id: [CONV]}


def test_a_trace_whose_agent_span_is_in_a_later_import_joins_the_conversation(tmp_path, db_path):
    agent, chat = TURNS[0][:2]
    children = tmp_path / "children.json"  # the agent span ends last: the next file
    children.write_text(json.dumps(otlp_document([chat, LATE])))
    root = tmp_path / "root.json"
    root.write_text(json.dumps(otlp_document([agent])))
    with CheckpointStore(db_path) as store:
        import_into(store, [children])
        import_into(store, [root])
        assert store.session_ids() == [CONV]
        steps = store.load(CONV).steps
    # the agent span alone would be a step: it is not, since the stored steps are inside it
    assert [(s.name, s.agent) for s in steps] == [("chat m", "a"), ("lookup", "a")]


def test_a_session_to_delete_that_changed_since_it_was_read_stops_the_write(db_path):
    with CheckpointStore(db_path) as store:
        fragment = session(T, T)
        store.save(fragment)
        with pytest.raises(SessionChangedError):
            store.save_many([session("conv", T)], delete={T: "0" * 64})
        assert store.session_ids() == [T]  # nothing written, nothing deleted
        store.save_many([session("conv", T)], delete={T: fragment.digest})
        assert store.session_ids() == ["conv"]


def test_a_receivers_backlog_is_assembled_in_arrival_order(db_path, monkeypatch):
    """Turns received in order under trace ids that sort the other way, assembled one trace
    per batch: each continues the stored conversation (no stored session is read whole)."""
    turns = [
        [replace(s, trace_id=f"{100 - n:032x}") for s in spans] for n, spans in enumerate(TURNS)
    ]
    with CheckpointStore(db_path) as store:
        sink = DurableSpanSink(store, batch_traces=1)
        for spans in turns:
            sink.add(spans)

        def whole_load(session_id):
            raise AssertionError(f"{session_id} was loaded whole")

        monkeypatch.setattr(store, "load", whole_load)
        assert sink.assemble_ready() == len(turns)
        monkeypatch.undo()
        stored = store.load(CONV)
    assert [s.trace_id for s in stored.steps] == [
        spans[0].trace_id for spans in turns for s in spans[1:]
    ]
