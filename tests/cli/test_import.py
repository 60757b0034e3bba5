import json
from pathlib import Path

from click.testing import CliRunner

from agent_replay import CheckpointStore
from agent_replay.cli import main
from zstd_codec import zstd

SHARED = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
FIXTURES = SHARED / "fixtures"


def test_import_reports_the_bad_file_and_imports_the_rest(tmp_path, db_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [')
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "import",
            str(bad),
            str(FIXTURES / "generated" / "otel_event_only.jsonl"),
            str(FIXTURES / "generated" / "otel_event_only.logs.jsonl"),
            str(FIXTURES / "atif"),
            "--db",
            str(db_path),
        ],
    )
    assert result.exit_code == 1
    assert f"FAILED {bad}: not valid JSON" in result.output
    assert "Imported 3 trajectories" in result.output and "\n  3 new\n" in result.output
    assert "from 4 of 5 files" in result.output
    with CheckpointStore(db_path) as store:
        ids = set(store.session_ids())
        assert ids == {"conv_1", "sess-abc123-simple", "sess-def456-multi"}
        conv = store.load("conv_1")
        assert conv.metadata["capture"]["steps_without_content"] == []  # logs were joined
        assert conv.metadata["capture"]["log_records"] == 2


def test_import_twice_keeps_one_copy_and_json_summary(db_path):
    runner = CliRunner()
    args = ["import", str(FIXTURES / "langfuse" / "koog-2025-08-26.json"), "--db", str(db_path)]
    assert runner.invoke(main, args).exit_code == 0
    result = runner.invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["failed"] == [] and summary["formats"] == {"langfuse": 1}
    (trajectory,) = summary["trajectories"]
    assert trajectory["steps"] == 6 and trajectory["capture"]["opaque_steps"]
    assert trajectory["status"] == "unchanged"
    again = runner.invoke(main, args)
    assert "1 unchanged (the store already held these runs as imported)" in again.output
    with CheckpointStore(db_path) as store:
        assert len(store.session_ids()) == 1
        store.load(store.session_ids()[0]).verify()


def test_a_trace_imported_again_without_its_log_records_keeps_their_content(db_path):
    """Event-only capture puts the messages in log records. Importing the span file again
    alone (its log file rotated away) replaced the stored steps with steps without content,
    the tool step's link to the call that asked for it and the task with them."""
    spans = FIXTURES / "generated" / "otel_event_only.jsonl"
    logs = FIXTURES / "generated" / "otel_event_only.logs.jsonl"
    runner = CliRunner()
    assert (
        runner.invoke(main, ["import", str(spans), str(logs), "--db", str(db_path)]).exit_code == 0
    )
    with CheckpointStore(db_path) as store:
        before = store.load("conv_1")
    again = runner.invoke(main, ["import", str(spans), "--db", str(db_path), "--json"])
    assert again.exit_code == 0, again.output
    summary = json.loads(again.output[again.output.index("{") :])
    assert [t["status"] for t in summary["trajectories"]] == ["unchanged"]
    with CheckpointStore(db_path) as store:
        after = store.load("conv_1")
    assert after == before and after.digest == before.digest
    assert after.steps[1].attributes["requested_by"] == 0
    assert after.metadata["capture"]["steps_without_content"] == []
    # the other way round, the content the second import brings is taken
    runner.invoke(main, ["import", str(spans), "--db", str(db_path.with_name("b.sqlite"))])
    runner.invoke(
        main, ["import", str(spans), str(logs), "--db", str(db_path.with_name("b.sqlite"))]
    )
    with CheckpointStore(db_path.with_name("b.sqlite")) as store:
        assert store.load("conv_1").digest == before.digest


def test_import_with_explicit_format_and_strict(tmp_path, db_path):
    path = tmp_path / "mixed.jsonl"
    good = (FIXTURES / "generated" / "otel_span_only.jsonl").read_text().strip()
    path.write_text(good + "\nnot json\n")
    runner = CliRunner()
    ok = runner.invoke(main, ["import", str(path), "--db", str(db_path), "--format", "otlp-json"])
    assert ok.exit_code == 0 and "warning" in ok.output and "line 2" in ok.output
    strict = runner.invoke(main, ["import", str(path), "--db", str(db_path), "--strict"])
    assert strict.exit_code == 1


def otlp_file(path: Path, *spans: dict) -> Path:
    """An OTLP/JSON file (one ExportTraceServiceRequest) holding ``spans``."""
    request = {"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}
    path.write_text(json.dumps(request) + "\n")
    return path


def otlp_span(n: int, name: str, parent: int | None = None, **attributes: str) -> dict:
    span = {
        "traceId": "ab" * 16,
        "spanId": f"{n:016x}",
        "name": name,
        "startTimeUnixNano": str(1000 * n),
        "endTimeUnixNano": str(1000 * n + 500),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }
    if parent is not None:
        span["parentSpanId"] = f"{parent:016x}"
    return span


def test_a_trace_split_over_imports_keeps_every_step_once(tmp_path, db_path):
    def tool(n, result):
        return otlp_span(
            n,
            "execute_tool t",
            1,
            **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"},
            **{"gen_ai.tool.call.result": result},
        )

    agent = otlp_span(1, "invoke_agent a", **{"gen_ai.operation.name": "invoke_agent"})
    first = otlp_file(tmp_path / "first.json", agent, tool(2, "early"))
    late = otlp_file(tmp_path / "late.json", tool(3, "late"))  # e.g. the next rotated file
    runner = CliRunner()
    for path in (first, late, first):  # the first file again: still one copy of each step
        result = runner.invoke(main, ["import", str(path), "--db", str(db_path)])
        assert result.exit_code == 0, result.output
    with CheckpointStore(db_path) as store:
        (session,) = store.session_ids()
        steps = store.load(session).steps
    assert [s.action for s in steps] == ["early", "late"]


def test_import_a_directory_of_collector_zstd_files(tmp_path, db_path):
    """A Collector file exporter's directory with `compression: zstd`: the rotated files (each
    message a length-prefixed zstd frame) are picked up by suffix and joined with their logs."""
    exports = tmp_path / "otel"
    exports.mkdir()
    for name, fixture in (
        ("traces", "otel_event_only.jsonl"),
        ("logs", "otel_event_only.logs.jsonl"),
    ):
        lines = (FIXTURES / "generated" / fixture).read_bytes().splitlines()
        frames = [zstd.compress(line) for line in lines if line.strip()]
        data = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
        (exports / f"{name}-2026-11-30T09-00-00.000.zst").write_bytes(data)
    result = CliRunner().invoke(main, ["import", str(exports), "--db", str(db_path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["formats"] == {"otlp-json": 2}
    with CheckpointStore(db_path) as store:
        conv = store.load("conv_1")
        assert conv.metadata["capture"]["steps_without_content"] == []  # logs were joined


def test_a_trace_with_no_agent_span_is_reported_not_silently_dropped(db_path):
    example = FIXTURES / "otlp" / "opentelemetry-proto_examples_trace.json"  # one HTTP span
    result = CliRunner().invoke(main, ["import", str(example), "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    assert "Imported 0 trajectories" in result.output
    assert "1 trace(s) hold no GenAI operation, agent or tool span" in result.output


def test_a_file_that_failed_is_not_counted_under_its_format(tmp_path, db_path):
    """A store that opens but whose sessions cannot be listed: FAILED, and not "[1 store]"."""
    import sqlite3

    from agent_replay import record

    damaged = tmp_path / "other.sqlite"
    with CheckpointStore(damaged) as store:
        store.save(record(lambda ctx: ctx.llm("a", produce=lambda: 1), session_id="x"))
    with sqlite3.connect(damaged) as conn:
        conn.execute("DROP TABLE sessions")
        conn.execute("CREATE TABLE sessions (x)")
    result = CliRunner().invoke(main, ["import", str(damaged), "--db", str(db_path)])
    assert result.exit_code == 1
    assert "from 0 of 1 files" in result.output and "[1 store]" not in result.output


def test_a_lone_surrogate_in_a_span_name_is_escaped_not_fatal(tmp_path, db_path):
    """OTLP/JSON can carry a lone surrogate (``\\ud800``) anywhere; in a span *name* it failed
    the whole trace at assembly (the receiver acknowledged it and kept it waiting forever,
    import printed a traceback). Every span is now made storable before it is mapped."""
    trace = "5" * 32

    def span(span_id, name, operation, parent=None):
        attributes = [{"key": "gen_ai.operation.name", "value": {"stringValue": operation}}]
        return {
            "traceId": trace, "spanId": span_id, "name": name, "parentSpanId": parent or "",
            "startTimeUnixNano": str(int(span_id[0])), "endTimeUnixNano": "10",
            "attributes": attributes,
        }  # fmt: skip

    spans = [
        span("1111111111111111", "invoke_agent a", "invoke_agent"),
        span("2222222222222222", "chat \ud800", "chat", "1111111111111111"),
        span("3333333333333333", "execute_tool t", "execute_tool", "1111111111111111"),
    ]
    document = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "s"}, "spans": spans}]}]}
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(document))  # ensure_ascii: the surrogate travels as \ud800
    result = CliRunner().invoke(main, ["import", str(path), "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    with CheckpointStore(db_path) as store:
        (session,) = store.session_ids()
        names = [s.name for s in store.load(session).steps]
    assert len(names) == 2 and any("\\ud800" in name for name in names)


def test_json_with_a_byte_order_mark_is_read_as_json(tmp_path, db_path):
    """Files saved by Windows tools start with a UTF-8 BOM; it was taken for protobuf."""
    path = tmp_path / "bom.json"
    path.write_bytes(
        b"\xef\xbb\xbf" + (FIXTURES / "generated" / "otel_span_only.jsonl").read_bytes()
    )
    result = CliRunner().invoke(main, ["import", str(path), "--db", str(db_path)])
    assert result.exit_code == 0 and "[1 otlp-json]" in result.output, result.output


def test_importing_only_paths_that_do_not_exist_makes_no_store(tmp_path):
    db = tmp_path / "new.sqlite"
    result = CliRunner().invoke(main, ["import", str(tmp_path / "nope.json"), "--db", str(db)])
    assert result.exit_code == 2 and "no such file" in result.output
    assert not db.exists()


def test_a_file_that_held_nothing_is_named_in_a_warning(tmp_path, db_path):
    """1,000 NUL bytes read as a stream of empty protobuf messages: 0 trajectories and exit 0
    with no word; now a warning names the file (and --strict exits 1)."""
    path = tmp_path / "zeros.bin"
    path.write_bytes(bytes(1000))
    result = CliRunner().invoke(main, ["import", str(path), "--db", str(db_path)])
    assert result.exit_code == 0 and "zeros.bin: nothing to import in it" in result.output
    strict = CliRunner().invoke(main, ["import", str(path), "--db", str(db_path), "--strict"])
    assert strict.exit_code == 1


def test_ctrl_c_during_an_import_says_how_far_it_got(tmp_path, db_path, monkeypatch):
    from agent_replay.cli import import_ as command

    def interrupted(store, files, fmt, on_source, on_assembled):
        on_source(None)  # one file read, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "import_into", interrupted)
    paths = [str(FIXTURES / "atif"), str(FIXTURES / "langfuse")]
    result = CliRunner().invoke(main, ["import", *paths, "--db", str(db_path)])
    assert result.exit_code == 130
    assert "interrupted after reading 1 of" in result.output and "kept" in result.output


def test_a_link_that_leads_nowhere_in_a_directory_is_reported_not_skipped(tmp_path, db_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "good.jsonl").write_bytes(
        (FIXTURES / "generated" / "otel_span_only.jsonl").read_bytes()
    )
    (folder / "gone.jsonl").symlink_to(tmp_path / "deleted.jsonl")
    result = CliRunner().invoke(main, ["import", str(folder), "--db", str(db_path)])
    assert result.exit_code == 1 and "gone.jsonl" in result.output and "FAILED" in result.output
    assert "from 1 of 2 files" in result.output


def test_the_summary_describes_the_stored_session_a_file_joined(db_path):
    """A second file continuing a stored conversation: the summary described the part
    imported (3 steps, fully replayable) instead of the session it made (6 steps, two of
    them without content)."""
    runner = CliRunner()
    generated = FIXTURES / "generated"
    first = ["import", str(generated / "otel_default.jsonl"), "--db", str(db_path)]
    assert runner.invoke(main, first).exit_code == 0
    second = ["import", str(generated / "otel_span_only.jsonl"), "--db", str(db_path), "--json"]
    result = runner.invoke(main, second)
    assert result.exit_code == 0, result.output
    (trajectory,) = json.loads(result.output[result.output.index("{") :])["trajectories"]
    with CheckpointStore(db_path) as store:
        stored = store.load(trajectory["session_id"])
    assert trajectory["status"] == "updated"
    assert trajectory["steps"] == len(stored.steps) == 6
    assert trajectory["capture"] == stored.metadata["capture"]
    assert not trajectory["capture"]["replayable"]
    text = runner.invoke(main, second[:-1]).output
    assert "0 of 1 fully replayable" in text


def _split_fixture(tmp_path, parts):
    """``otel_span_only.jsonl`` (chat, chat, execute_tool, invoke_agent: one trace, in two
    scopes) cut into files of the given span positions (a Collector rotating mid-trace)."""
    (line,) = (FIXTURES / "generated" / "otel_span_only.jsonl").read_text().splitlines()
    scopes = json.loads(line)["resourceSpans"][0]["scopeSpans"]
    spans = [(k, span) for k, scope in enumerate(scopes) for span in scope["spans"]]
    paths = []
    for n, positions in enumerate(parts):
        part = json.loads(line)
        chosen = [spans[i] for i in positions]
        part["resourceSpans"][0]["scopeSpans"] = [
            {**scope, "spans": [span for j, span in chosen if j == k]}
            for k, scope in enumerate(scopes)
            if any(j == k for j, _ in chosen)
        ]
        path = tmp_path / f"part{n}-{'-'.join(map(str, positions))}.json"
        path.write_text(json.dumps(part))
        paths.append(path)
    return paths


def _imported(db_path, *batches):
    runner = CliRunner()
    for batch in batches:
        result = runner.invoke(main, ["import", *map(str, batch), "--db", str(db_path)])
        assert result.exit_code == 0, result.output
    with CheckpointStore(db_path) as store:
        (session,) = store.session_ids()
        return store.load(session)


def test_a_trace_split_over_imports_is_stored_as_imported_whole(tmp_path):
    """QA: with the tool span in the later file, the first import rebuilt the tool step from
    the second chat's prompt and the later import added the tool span's own step beside it
    (4 steps, one call twice); with the agent span alone in the later file, the task became
    ``{"root_span": ...}``. Each order of the parts now stores what one import of both does."""
    for n, parts in enumerate((([0, 1], [2, 3]), ([0, 1, 2], [3]), ([2, 3], [0, 1]))):
        paths = _split_fixture(tmp_path, parts)
        whole = _imported(tmp_path / f"whole{n}.sqlite", paths)
        apart = _imported(tmp_path / f"apart{n}.sqlite", *([p] for p in paths))
        assert len(apart.steps) == 3 and not apart.metadata["capture"]["synthesized_tool_steps"]
        assert apart.head_hash == whole.head_hash
        assert apart.task == whole.task and "messages" in apart.task


def test_a_failed_child_span_does_not_fail_a_split_trace_whose_root_comes_later(
    tmp_path, monkeypatch
):
    """QA: the tool span failed (an error the agent handled) and the agent span, which did
    not, came in a later file (a Collector rotating its file: the root ends last). Imported
    apart, the first part's topmost spans stood in for the root: the tool's error became the
    session's outcome and the root arriving later did not clear it (importing both files
    together: no failure). The root's name and every file imported stay noted too; and the
    same file named another way is the same file."""
    # (the last order: a second part without the root and without a failure comes between
    # the failed part and the root, and must not make the stand-in failure final)
    for n, parts in enumerate((([0, 1, 2], [3]), ([3], [0, 1, 2]), ([2], [0, 1], [3]))):
        (tmp_path / str(n)).mkdir()
        paths = _split_fixture(tmp_path / str(n), parts)
        for path in paths:  # the tool span (position 2) failed with an exception
            document = json.loads(path.read_text())
            for scope in document["resourceSpans"][0]["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"].startswith("execute_tool"):
                        span["status"] = {"code": 2, "message": "bad city"}
                        span["events"] = [
                            {
                                "name": "exception",
                                "timeUnixNano": span["endTimeUnixNano"],
                                "attributes": [
                                    {"key": "exception.type", "value": {"stringValue": "E"}},
                                    {"key": "exception.message", "value": {"stringValue": "x"}},
                                ],
                            }
                        ]
            path.write_text(json.dumps(document))
        whole = _imported(tmp_path / f"whole{n}.sqlite", paths)
        apart = _imported(tmp_path / f"apart{n}.sqlite", *([p] for p in paths))
        assert whole.outcome is None and any(s.error for s in whole.steps)
        assert apart.digest == whole.digest  # steps, outcome, task and metadata alike
        assert apart.metadata["root_span"] == "invoke_agent weather_agent"
        assert apart.metadata["import"]["files"] == sorted(str(p) for p in paths)
    failed_part = paths[0]  # the failed tool span alone
    first_only = _imported(tmp_path / "first.sqlite", [failed_part])
    assert first_only.outcome.failed  # alone, the part is all there is to judge by
    monkeypatch.chdir(failed_part.parent)
    again = _imported(tmp_path / "first.sqlite", [failed_part.name])
    assert again.digest == first_only.digest


def test_the_task_of_a_conversation_is_its_first_turns_whatever_the_import_order(tmp_path):
    def turn_file(n):
        span = otlp_span(
            n,
            "chat m",
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": "conv",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": f"q{n}"}]}]
                ),
            },
        )
        span["traceId"] = f"{n:032x}"
        return otlp_file(tmp_path / f"turn{n}.json", span)

    turns = {n: turn_file(n) for n in (1, 2, 3)}
    stored = _imported(tmp_path / "db.sqlite", [turns[3]], [turns[1]], [turns[2]])
    assert stored.task["messages"][0]["parts"][0]["content"] == "q1"
    assert [s.inputs["messages"][0]["parts"][0]["content"] for s in stored.steps] == [
        "q1",
        "q2",
        "q3",
    ]


def test_a_langfuse_session_of_several_traces_keeps_every_traces_scores(tmp_path, db_path):
    """QA: two traces of one sessionId kept only the second trace's scores."""
    names = ("openai-agents-2025-09-30.json", "microsoft-agent-2025-10-14.json")
    docs = [json.loads((FIXTURES / "langfuse" / name).read_text()) for name in names]
    for doc in docs:
        doc["trace"]["sessionId"] = "sess-X"
    path = tmp_path / "both.json"
    path.write_text(json.dumps(docs))
    stored = _imported(db_path, [path])
    scores = stored.metadata["langfuse"]["scores"]
    assert len({s["trace_id"] for s in scores}) == 2 == len(stored.metadata["trace_ids"])
    expected = sum(len(doc["trace"].get("scores") or ()) for doc in docs)
    assert len(scores) == expected > 2


def test_token_counts_written_as_text_are_stored_as_numbers(db_path):
    """Langfuse copies span attributes as text (``"631"``): the counts were stored as
    strings beside other steps' ints, and a sum over the session broke."""
    stored = _imported(db_path, [FIXTURES / "langfuse" / "microsoft-agent-2025-10-14.json"])
    counts = [
        s.attributes[key]
        for s in stored.steps
        for key in ("input_tokens", "output_tokens")
        if key in s.attributes
    ]
    assert counts and all(type(c) is int for c in counts)


def test_a_span_that_comes_again_with_other_content_is_warned_of_once(tmp_path, db_path, caplog):
    """It was said twice: logged on stderr (as the receiver does) and in the summary."""
    (first,) = _split_fixture(tmp_path, [[0, 1, 2, 3]])
    document = json.loads(first.read_text())
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]  # the first chat
    span["attributes"].append({"key": "extra", "value": {"stringValue": "other content"}})
    again = tmp_path / "again.json"
    again.write_text(json.dumps(document))
    result = CliRunner().invoke(main, ["import", str(first), str(again), "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("with other content") == 1
    assert not [r for r in caplog.records if "with other content" in r.getMessage()]
