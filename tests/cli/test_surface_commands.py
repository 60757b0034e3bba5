"""attribute, report, serve and the extended demo, through click's CliRunner on real stores."""

from __future__ import annotations

import io
import json
import socket
import textwrap

from click.testing import CliRunner

from agent_replay import CheckpointStore, record
from agent_replay.cli import main
from agent_replay.cli.attribute import report_file_name
from agent_replay.cli.progress import RolloutProgress
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent
from surface_helpers import Receiver, assert_valid_report

AGENT = "agent_replay.demo.agent:support_agent"
VERIFIER = "agent_replay.demo.agent:refund_approved"


def run(*args):
    return CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)


def attribute(db, session, *args):
    """``attribute`` of ``session`` in ``db`` with the demo agent and verifier."""
    return run(
        "attribute",
        "--db",
        db,
        "--session",
        session,
        "--agent",
        AGENT,
        "--verifier",
        VERIFIER,
        *args,
    )


def test_attribute_writes_reports_and_explains(demo_db, tmp_path):
    prefix = tmp_path / "out" / "report"
    result = attribute(demo_db, "s1", "--repair", "--out", prefix)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.index("CULPRIT  step 2") < out.index("Explanation") < out.index("wrote")
    data = assert_valid_report(json.loads((tmp_path / "out" / "report.json").read_text()))
    assert data["culprit_index"] == 2 and data["repair"]["valid"]
    assert data["explanation"]["trace"][2]["role"] == "decisive"
    assert "Culprit: step 2" in (tmp_path / "out" / "report.html").read_text()
    (kept,) = demo_db.with_name("runs.sqlite.reports").glob("s1-*.json")
    assert json.loads(kept.read_text())["session_id"] == "s1"
    assert f"wrote {kept}" in out


def test_a_second_attribution_keeps_the_first_report(demo_db):
    # the reports folder kept one file per session: a second attribution (other settings, a
    # fixed agent) replaced the first one's report
    assert attribute(demo_db, "s1").exit_code == 0
    assert attribute(demo_db, "s1", "--repair").exit_code == 0
    folder = demo_db.with_name("runs.sqlite.reports")
    kept = sorted(folder.glob("s1-*.json"))
    assert len(kept) == 2
    reports = [json.loads(path.read_text()) for path in kept]
    assert [report["repair"] is not None for report in reports] == [False, True]
    from agent_replay.console.app import Console

    with Console(demo_db) as console:
        listed = console.reports()
    assert sorted(r["file"] for r in listed) == [path.name for path in kept]


def test_report_file_names_are_safe_and_distinct():
    from datetime import datetime, timezone

    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    name = report_file_name("../../etc/passwd <x>", when)
    assert "/" not in name and name.endswith("-20260102T030405678901Z.json")
    assert report_file_name("a/b", when) != report_file_name("a_b", when)


def test_attribute_json_and_no_explain(demo_db):
    result = attribute(demo_db, "s1", "--json", "--no-save")
    assert result.exit_code == 0
    assert_valid_report(json.loads(result.output))
    quiet = attribute(demo_db, "s1", "--no-explain", "--no-save")
    assert "CULPRIT" in quiet.output and "Explanation" not in quiet.output


def test_exit_codes(demo_db, tmp_path, monkeypatch):
    (tmp_path / "doomed.py").write_text(
        textwrap.dedent("""
        def agent(ctx, ticket):
            ctx.llm("think", produce=lambda: ctx.rng.choice(["a", "b"]), ticket=ticket)
            return {}
        def never(result):
            return 0.0
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    db = tmp_path / "doomed.sqlite"
    import doomed

    with CheckpointStore(db) as store:
        store.save(record(doomed.agent, {"ticket": "t"}, verifier=doomed.never, session_id="d"))
    undecided = run(
        "attribute",
        "--db",
        db,
        "--session",
        "d",
        "--agent",
        "doomed:agent",
        "--verifier",
        "doomed:never",
        "--rollouts",
        "16",
    )
    assert undecided.exit_code == 3, undecided.output
    assert "UNDECIDED" in undecided.output and "F(0)" in undecided.output
    passed = attribute(demo_db, "ok")
    assert passed.exit_code == 1 and "credit" in passed.output
    credit = attribute(demo_db, "ok", "--mode", "credit", "--no-save")
    assert credit.exit_code in (0, 3) and "succeeded" in credit.output
    no_verifier = run("attribute", "--db", demo_db, "--session", "s1", "--agent", AGENT)
    assert no_verifier.exit_code == 2 and "--verifier" in no_verifier.output
    missing = run(
        "attribute", "--db", tmp_path / "none.sqlite", "--session", "s1", "--verifier", VERIFIER
    )
    assert missing.exit_code == 1 and "record or import" in missing.output
    unknown = attribute(demo_db, "nope")
    assert unknown.exit_code == 1


def test_export_otlp(demo_db):
    with Receiver() as receiver:
        result = attribute(demo_db, "s1", "--no-save", "--export-otlp", receiver.url)
        assert result.exit_code == 0, result.output
        names = [s.name for s in receiver.spans()]
    assert names.count("agent_replay.attribution") == 1
    assert "exported the verdict" in result.output
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    refused = attribute(demo_db, "s1", "--no-save", "--export-otlp", f"http://127.0.0.1:{closed}")
    assert refused.exit_code == 1 and "receiver" in refused.output


def test_report_regenerates_html(demo_db, tmp_path):
    prefix = tmp_path / "r"
    assert attribute(demo_db, "s1", "--out", prefix, "--no-save").exit_code == 0
    again = tmp_path / "again.html"
    result = run("report", "--json", tmp_path / "r.json", "--out", again, "--text")
    assert result.exit_code == 0 and "CULPRIT" in result.output
    assert again.read_text() == (tmp_path / "r.html").read_text()
    piped = run("report", "--json", tmp_path / "r.json", "--out", "-")  # the page on stdout
    assert piped.exit_code == 0 and piped.stdout == again.read_text()
    # a bare to_json() report (no content) takes the content from the store
    data = json.loads((tmp_path / "r.json").read_text())
    bare = {k: v for k, v in data.items() if k not in ("trajectory", "explanation")}
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    assert run("report", "--json", tmp_path / "bare.json", "--db", demo_db).exit_code == 0
    assert "refund_policy_2019" in (tmp_path / "bare.html").read_text()
    bad = dict(data, verdict="guilty")
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    invalid = run("report", "--json", tmp_path / "bad.json")
    assert invalid.exit_code == 1 and "verdict" in invalid.output
    (tmp_path / "junk.json").write_text("{")
    assert run("report", "--json", tmp_path / "junk.json").exit_code == 1


def test_demo_tells_the_whole_story(tmp_path):
    result = run("demo", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.index("1. Recording") < out.index("4. Attributing") < out.index("Explanation")
    assert "CULPRIT  step 2 · llm:choose_policy" in out
    data = assert_valid_report(json.loads((tmp_path / "report.json").read_text()))
    assert data["trace_id"] and data["culprit_span_id"]  # recorded through OTel
    assert (tmp_path / "report.html").exists()
    # and the console it points to lists it
    from agent_replay.console.app import Console

    with Console(tmp_path / "demo.sqlite") as console:
        assert "demo-refund" in console.handle("GET", "/reports").body.decode()


def test_serve_errors(demo_db, tmp_path):
    assert run("serve", "--db", tmp_path / "none.sqlite").exit_code == 1
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--db", demo_db, "--port", port)
    assert result.exit_code == 1 and "--port" in result.output


def test_progress_counts_what_ran():
    from agent_replay.attribution import attribute

    traj = record(support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved)
    stream = io.StringIO()
    progress = RolloutProgress(support_agent, budget=10_000, stream=stream, enabled=True)
    with progress:
        result = attribute(traj, support_agent, refund_approved, executor=progress)
    assert progress.rollouts == result.cost["rollouts"]
    assert progress.live_steps == result.cost["live_steps"]
    assert f"{result.cost['rollouts']} rollouts" in stream.getvalue().splitlines()[-1]
    assert "of a 10000 budget" in stream.getvalue()


def test_confidence_outside_the_open_interval_is_a_usage_error(demo_db):
    for bad in ("1", "0.5", "1.2"):
        result = attribute(demo_db, "s1", "--confidence", bad, "--no-save")
        assert result.exit_code == 2 and "--confidence" in result.output, result.output


def test_sessions_search_without_a_match_says_what_was_searched(demo_db):
    result = run("sessions", "--db", demo_db, "--search", "nope")
    assert result.output.strip() == f"no sessions whose id contains 'nope' in {demo_db}"
