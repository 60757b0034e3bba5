"""``import_into`` stages OTLP spans and log records in the store and assembles them as the
receiver does: whole traces whatever file they came from, in the order they began, nothing
kept in memory beyond one file, nothing staged left behind; trajectories a file holds whole
(Langfuse, LangSmith) replace their stored copy instead of piling up."""

import json
import sqlite3
from pathlib import Path

import pytest

from agent_replay import CheckpointStore, Trajectory
from agent_replay.ingest import import_into, load, load_many
from agent_replay.mapping.assemble import assemble
from agent_replay.model import StepDraft, StepKind, chain_steps
from agent_replay.store.sink import SpanSink
from conversation_turns import CONV, TURNS, facts, otlp_document, turn, whole

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
        # two batches, one session, described as stored
        assert [(s.session_id, s.steps) for s in result.sessions] == [(CONV, len(expected))]
        assert progress == [(200, 230), (230, 230)]
        stored = store.load(CONV)
    assert [facts(s) for s in stored.steps] == [facts(s) for s in expected.steps]


@pytest.mark.parametrize("folder", ["langfuse", "langsmith", "atif", "generated"])
def test_importing_the_same_files_twice_changes_nothing(db_path, folder):
    """Whole sessions, capture reports included (a LangSmith run imported again lost its
    report's span count, so its session changed)."""
    paths = sorted(p for p in (SHARED / "fixtures" / folder).iterdir() if p.suffix != ".py")
    paths = [p for p in paths if not p.name.endswith(".txt")]
    with CheckpointStore(db_path) as store:
        import_into(store, paths)
        once = store.digests(store.session_ids())
        import_into(store, paths)
        assert store.digests(store.session_ids()) == once and once
        spans = [store.load(sid).metadata["capture"].get("spans") for sid in once]
    if folder != "atif":  # ATIF files hold steps, not spans
        assert all(isinstance(n, int) and n > 0 for n in spans), spans


def test_stores_of_load_balanced_receivers_are_joined(tmp_path, db_path, monkeypatch):
    """Receivers behind a trace-id load balancer each hold some turns of a conversation:
    importing their stores gives the conversation whole (and again changes nothing). The
    stores are larger than a block: not mistaken for OTLP files to read in blocks."""
    import agent_replay.ingest as ingest

    monkeypatch.setattr(ingest, "BLOCK_BYTES", 64)
    parts = {"a": TURNS[:3], "b": TURNS[3:]}
    for name, turns in parts.items():
        with CheckpointStore(tmp_path / f"{name}.sqlite") as receiver:
            sink = SpanSink(receiver)
            for spans in turns:
                sink.add(spans)
                sink.flush()
    sources = [tmp_path / "b.sqlite", tmp_path / "a.sqlite"]  # the later turns first
    with CheckpointStore(db_path) as store:
        result = import_into(store, sources)
        assert not result.errors and not result.warnings
        assert [r.format for r in result.sources] == ["store", "store"]
        assert [r.trajectories for r in result.sources] == [1, 1]
        once = store.load(CONV)
        import_into(store, sources[1:])
        assert store.load(CONV) == once
    assert once.metadata["capture"]["spans"] == sum(len(spans) for spans in TURNS)
    assert [facts(s) for s in once.steps] == [facts(s) for s in whole().steps]


def test_a_damaged_session_of_an_imported_store_is_reported_and_the_rest_imported(
    tmp_path, db_path
):
    source = tmp_path / "source.sqlite"
    with CheckpointStore(source) as other:
        for n in (0, 1):
            other.save(Trajectory(f"s{n}", chain_steps([_draft(n)])))
        conn = sqlite3.connect(source)
        conn.execute("UPDATE blobs SET data=? WHERE data=?", (b'"x"', b'"in0"'))
        conn.commit()
        conn.close()
    with CheckpointStore(db_path) as store:
        result = import_into(store, [source])
        assert store.session_ids() == ["s1"]
    assert "session 's0'" in result.warnings[0] and "skipped" in result.warnings[0]
    assert result.sources[0].trajectories == 1 and not result.errors


def _draft(n):
    return StepDraft(kind=StepKind.LLM, name="x", inputs=f"in{n}", action=n)


def test_a_store_is_read_without_changing_it_and_never_into_itself(tmp_path, db_path):
    source = tmp_path / "old.sqlite"
    with CheckpointStore(source) as other:
        other.save(Trajectory("s", chain_steps([_draft(0)])))
    conn = sqlite3.connect(source)  # make it a schema-2 file, as an older version wrote it
    conn.execute("DROP TABLE session_traces")
    conn.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = source.read_bytes()
    with CheckpointStore(db_path) as store:
        assert not import_into(store, [source]).errors
        assert store.session_ids() == ["s"]
        itself = import_into(store, [db_path])
        assert "being imported into" in str(itself.errors[0])
    assert source.read_bytes() == before  # not migrated, not touched


def _sql(path, statement):
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()


def test_a_sqlite_file_that_is_not_a_store_is_refused(tmp_path, db_path):
    other = tmp_path / "other.sqlite"
    _sql(other, "CREATE TABLE t (x)")
    with CheckpointStore(db_path) as store:
        result = import_into(store, [other])
    assert "not an agent-replay store" in str(result.errors[0])


def test_a_store_whose_sessions_cannot_be_listed_is_reported(tmp_path, db_path):
    source = tmp_path / "broken.sqlite"
    with CheckpointStore(source) as other:
        other.save(Trajectory("s", chain_steps([_draft(0)])))
    _sql(source, "ALTER TABLE sessions RENAME COLUMN session_id TO gone")
    with CheckpointStore(db_path) as store:
        result = import_into(store, [source])
        assert store.session_ids() == []
    assert "cannot list its sessions" in str(result.errors[0])


@pytest.mark.parametrize("compressed", [False, True])
def test_a_large_json_lines_file_is_read_in_blocks_with_the_same_result(
    tmp_path, db_path, monkeypatch, compressed
):
    """A file larger than a block is read block by block (memory is then bounded by a block,
    not the file); what is stored, and the line numbers of skipped lines, are the same as
    reading it whole."""
    import gzip

    import agent_replay.ingest as ingest

    lines = [json.dumps(otlp_document(spans)) for spans in TURNS] * 3
    lines[8] = '{"resourceSpans": [broken'
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / ("turns.jsonl.gz" if compressed else "turns.jsonl")
    path.write_bytes(gzip.compress(data) if compressed else data)

    def imported(block_bytes):
        monkeypatch.setattr(ingest, "BLOCK_BYTES", block_bytes)
        target = db_path.with_name(f"{block_bytes}.sqlite")
        with CheckpointStore(target) as store:
            result = import_into(store, [path])
            return result, {sid: store.load(sid).steps for sid in store.session_ids()}

    whole, stored_whole = imported(1 << 30)
    blocks, stored_blocks = imported(600)  # a block holds one or two lines
    assert len(list(ingest._parse_source(path, "auto"))) > len(TURNS)  # read in blocks
    assert stored_blocks == stored_whole and list(stored_whole) == [CONV]
    assert blocks.warnings == whole.warnings and "line 9" in whole.warnings[0]
    assert blocks.sources[0].spans == whole.sources[0].spans == sum(map(len, TURNS)) * 3 - 2


def test_a_clean_up_that_fails_after_everything_is_stored_is_a_warning(
    generated, db_path, monkeypatch
):
    """On a full disk the import stored everything and then failed to delete its staged rows:
    it said 'Error' and exited 1 with no summary."""
    from agent_replay.errors import StoreError

    paths = [generated / name for name in GENERATED_NAMES]
    with CheckpointStore(db_path) as store:
        real = store.forget_pending
        monkeypatch.setattr(
            store,
            "forget_pending",
            lambda ids: (_ for _ in ()).throw(StoreError("database or disk is full")),
        )
        result = import_into(store, paths)
        assert not result.errors and [s.session_id for s in result.sessions] == ["conv_1"]
        assert "could not be cleared" in result.warnings[0]
        assert store.pending_counts()["spans_assembled"] > 0
        monkeypatch.setattr(store, "forget_pending", real)
        again = import_into(store, paths)  # what the warning says to do
        assert not again.warnings and store.pending_counts()["spans_assembled"] == 0


def test_a_span_id_reused_with_other_content_keeps_the_first_copy_both_ways(tmp_path):
    """Two spans under one id: ``load`` kept the last copy (the tool step was lost and rebuilt
    from the later prompt), ``import_into`` the first (the final answer was lost), neither
    said so. Both keep the first now and warn; a repeated copy (a retried export) is silent."""
    source = SHARED / "fixtures" / "generated" / "otel_span_only.jsonl"
    document = json.loads(source.read_text().splitlines()[0])
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    retried, reused = tmp_path / "retried.jsonl", tmp_path / "reused.jsonl"
    retried.write_text(source.read_text() + json.dumps(document) + "\n")
    spans.append({**spans[-1], "spanId": spans[0]["spanId"], "name": "execute_tool other"})
    reused.write_text(source.read_text() + json.dumps(document) + "\n")
    expected = [s.label for s in load(source)[0].steps]
    for path, warned in ((retried, False), (reused, True)):
        loaded = load_many([path])
        with CheckpointStore(tmp_path / f"{path.stem}.sqlite") as store:
            imported = import_into(store, [path])
            (session,) = imported.sessions
            stored = store.load(session.session_id)
        assert [s.label for s in loaded.trajectories[0].steps] == expected
        assert [s.label for s in stored.steps] == expected
        for result in (loaded, imported):
            assert any("came again with other content" in w for w in result.warnings) is warned
