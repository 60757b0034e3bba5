"""``import_into`` stages OTLP spans and log records in the store and assembles them as the
receiver does: whole traces whatever file they came from, in the order they began, nothing
kept in memory beyond one file, nothing staged left behind; trajectories a file holds whole
(Langfuse, LangSmith) replace their stored copy instead of piling up."""

import json
from pathlib import Path

import pytest

from agent_replay import CheckpointStore
from agent_replay.ingest import import_into, load
from agent_replay.mapping.assemble import assemble
from conversation_turns import CONV, facts, otlp_document, turn

SHARED = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
GENERATED_NAMES = ("otel_event_only.jsonl", "otel_event_only.logs.jsonl")


@pytest.fixture
def generated():
    return SHARED / "fixtures" / "generated"


def test_a_logs_file_given_before_its_spans_file_is_joined(generated, db_path):
    spans, logs = (generated / name for name in GENERATED_NAMES)
    expected = load([spans, logs])
    with CheckpointStore(db_path) as store:
        result = import_into(store, [logs, spans])
        assert not result.errors and not result.warnings and result.trajectories == []
        (session,) = result.sessions
        stored = store.load(session.session_id)
        assert store.pending_counts() == dict.fromkeys(
            ("spans_waiting", "spans_assembled", "logs_waiting", "logs_assembled"), 0
        )
    (whole,) = expected
    assert session.steps == len(stored.steps) == len(whole.steps)
    assert session.capture == stored.metadata["capture"] == whole.metadata["capture"]
    assert session.capture["log_records"] == 2 and session.capture["steps_without_content"] == []
    assert [s.step_hash for s in stored.steps] == [s.step_hash for s in whole.steps]
    assert stored.metadata["import"]["files"] == [str(spans)]


def test_a_logs_file_alone_is_reported_and_leaves_nothing_staged(generated, db_path):
    with CheckpointStore(db_path) as store:
        result = import_into(store, [generated / GENERATED_NAMES[1]])
        assert result.sessions == [] and "name no span" in result.warnings[0]
        assert sum(store.pending_counts().values()) == 0


def test_a_file_holding_many_traces_of_one_conversation_is_stored_in_time_order(tmp_path, db_path):
    """More traces than one assembly batch (200), written in reverse order: assembled in
    the order they began, the turns are stored as one conversation, as ``load`` gives it."""
    turns = [turn(n, answers=f"c{n}") for n in range(230)]
    spans = [s for spans in reversed(turns) for s in spans]
    path = tmp_path / "turns.json"
    path.write_text(json.dumps(otlp_document(spans)))
    (expected,) = assemble(spans)
    progress = []
    with CheckpointStore(db_path) as store:
        result = import_into(store, [path], on_assembled=lambda *p: progress.append(p))
        assert [s.session_id for s in result.sessions] == [CONV, CONV]  # two batches
        assert progress == [(200, 230), (230, 230)]
        stored = store.load(CONV)
    assert [facts(s) for s in stored.steps] == [facts(s) for s in expected.steps]


@pytest.mark.parametrize("folder", ["langfuse", "langsmith"])
def test_importing_a_backend_export_twice_keeps_one_copy(db_path, folder):
    paths = sorted((SHARED / "fixtures" / folder).glob("*.json"))
    with CheckpointStore(db_path) as store:
        import_into(store, paths)
        once = {sid: store.load(sid).steps for sid in store.session_ids()}
        import_into(store, paths)
        twice = {sid: store.load(sid).steps for sid in store.session_ids()}
    assert once and twice == once
