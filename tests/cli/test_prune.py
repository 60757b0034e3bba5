"""``agent-replay prune`` on a real store."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from agent_replay import CheckpointStore
from agent_replay.cli import main
from agent_replay.cli.common import Duration


def run(*args):
    return CliRunner().invoke(main, list(map(str, args)), catch_exceptions=False)


def test_a_dry_run_names_what_would_go_and_keeps_it(demo_db):
    result = run("prune", "--db", demo_db, "--session", "s1", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("would delete 1 session: s1\nwould remove ")
    with CheckpointStore(demo_db) as store:
        assert sorted(store.session_ids()) == ["ok", "s1"]


def test_prune_deletes_sessions_and_their_unused_rows(demo_db):
    with CheckpointStore(demo_db) as store:
        shared = store.stats()
    result = run("prune", "--db", demo_db, "--session", "s1", "--vacuum", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["sessions"] == ["s1"] and data["steps"] > 0 and not data["dry_run"]
    assert data["file_bytes"]["after"] <= data["file_bytes"]["before"]
    with CheckpointStore(demo_db) as store:
        assert store.session_ids() == ["ok"]
        assert store.stats()["steps"] == shared["steps"] - data["steps"]
        assert [r.ok for r in store.verify()] == [True]
    again = run("prune", "--db", demo_db)  # nothing left to remove
    assert again.output.splitlines() == [
        "deleted 0 sessions",
        "removed 0 step rows and 0 blobs (0 bytes of content) that no remaining session uses",
    ]


def test_older_than_counts_from_the_last_save(demo_db):
    assert "deleted 0 sessions" in run("prune", "--db", demo_db, "--older-than", "1d").output
    result = run("prune", "--db", demo_db, "--older-than", "0s")
    assert result.output.startswith("deleted 2 sessions: ")


def test_an_unknown_session_deletes_nothing(demo_db):
    result = run("prune", "--db", demo_db, "--session", "s1", "--session", "nope")
    assert result.exit_code == 1
    assert "no session 'nope'" in result.output and "nothing deleted" in result.output
    with CheckpointStore(demo_db) as store:
        assert "s1" in store


@pytest.mark.parametrize(
    "text,seconds", [("90", 90), ("90s", 90), ("45m", 2700), ("1.5h", 5400), ("30d", 2592000)]
)
def test_durations(text, seconds):
    assert Duration().convert(text, None, None) == seconds


def test_a_bad_duration_is_a_usage_error(demo_db):
    result = run("prune", "--db", demo_db, "--older-than", "3 weeks")
    assert result.exit_code == 2 and "not a duration" in result.output


def test_a_duration_longer_than_the_epoch_deletes_nothing(demo_db):
    """``--older-than 1000000d`` overflowed SQLite's integer (a traceback); a duration that is
    not a finite number of seconds is a usage error."""
    result = run("prune", "--db", demo_db, "--older-than", "1000000d")
    assert result.exit_code == 0 and result.output.startswith("deleted 0 sessions")
    huge = run("prune", "--db", demo_db, "--older-than", "9" * 400)
    assert huge.exit_code == 2 and "too long a duration" in huge.output


def test_the_reports_of_pruned_sessions_go_with_them(demo_db):
    """A report holds the run's content; pruning a session (even with --vacuum) left its
    reports in DB.reports/, and the console kept serving them."""
    agent = "agent_replay.demo.agent:support_agent"
    verifier = "agent_replay.demo.agent:refund_approved"
    for _ in range(2):
        run(
            "attribute",
            "--db",
            demo_db,
            "--session",
            "s1",
            "--agent",
            agent,
            "--verifier",
            verifier,
        )
    folder = demo_db.with_name(demo_db.name + ".reports")
    (folder / "other.json").write_text(json.dumps({"session_id": "ok", "verdict": "undecided"}))
    (folder / "notes.json").write_text("[1, 2]")
    assert len(list(folder.glob("s1-*.json"))) == 2
    dry = run("prune", "--db", demo_db, "--session", "s1", "--dry-run")
    assert "would remove 2 reports on them" in dry.output
    assert len(list(folder.glob("*.json"))) == 4
    done = run("prune", "--db", demo_db, "--session", "s1", "--json")
    assert len(json.loads(done.output)["reports"]) == 2
    assert sorted(p.name for p in folder.glob("*.json")) == ["notes.json", "other.json"]


def test_reports_of_sessions_deleted_before_go_with_the_next_prune(demo_db):
    """QA: a session deleted through the Python API (or with another --reports-dir) left its
    reports in DB.reports/ for good: prune looked only for the sessions it deleted itself."""
    agent = "agent_replay.demo.agent:support_agent"
    verifier = "agent_replay.demo.agent:refund_approved"
    run("attribute", "--db", demo_db, "--session", "s1", "--agent", agent, "--verifier", verifier)
    folder = demo_db.with_name(demo_db.name + ".reports")
    (folder / "kept.json").write_text(json.dumps({"session_id": "ok", "verdict": "undecided"}))
    with CheckpointStore(demo_db) as store:
        store.prune(["s1"])
    assert len(list(folder.glob("s1-*.json"))) == 1
    result = run("prune", "--db", demo_db)
    assert "removed 1 report on them" in result.output
    assert [p.name for p in folder.glob("*.json")] == ["kept.json"]
