"""What the command line does with bad paths, bad values, interruptions and closed pipes:
one line and the documented exit code, never a traceback, and no work spent before a bad
output path is found (found by trying every command as a new user would)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_replay import CheckpointStore, aggregate_runs, attribute, record
from agent_replay.cli import main
from agent_replay.demo.agent import refund_approved, support_agent
from agent_replay.errors import StoreError

AGENT = "agent_replay.demo.agent:support_agent"
VERIFIER = "agent_replay.demo.agent:refund_approved"
FIXTURES = next(p / "shared" for p in Path(__file__).resolve().parents if (p / "shared").is_dir())
FIXTURES = FIXTURES / "fixtures"


@pytest.fixture
def not_a_directory(tmp_path):
    """A path whose parent is a file: no output can be written under it."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    return blocker / "sub"


def run(*args, env=None):
    return CliRunner(env=env).invoke(main, list(map(str, args)), catch_exceptions=False)


def test_an_output_path_that_cannot_be_written_is_refused_before_any_rollout(
    demo_db, not_a_directory, tmp_path, monkeypatch
):
    (tmp_path / "counted.py").write_text(
        textwrap.dedent("""
        from agent_replay.demo.agent import support_agent
        CALLS = []
        def agent(ctx, **task):
            CALLS.append(1)
            return support_agent(ctx, **task)
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import counted

    for option, path in (("--out", not_a_directory / "report"), ("--reports-dir", not_a_directory)):
        result = run(
            "attribute", "--db", demo_db, "--session", "s1", "--agent", "counted:agent",
            "--verifier", VERIFIER, option, path,
        )  # fmt: skip
        assert result.exit_code == 2 and option in result.output and "cannot write" in result.output
    assert counted.CALLS == []  # refused before the first rollout
    for args in (
        ["demo", "--out", not_a_directory],
        ["drift", "--db", demo_db, "--session", "s1", "--agent", AGENT, "--verifier", VERIFIER,
         "--out", not_a_directory / "d.html"],
    ):  # fmt: skip
        result = run(*args)
        assert result.exit_code == 2 and "cannot write" in result.output, result.output


def test_out_dash_prints_a_single_page_and_is_refused_for_a_prefix(demo_db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused = run(
        "attribute", "--db", demo_db, "--session", "s1", "--agent", AGENT,
        "--verifier", VERIFIER, "--out", "-", "--no-save",
    )  # fmt: skip
    assert refused.exit_code == 2 and "--json" in refused.output, refused.output
    assert not list(tmp_path.glob("-*"))  # no "-.json" / "-.html" files
    drift = ["drift", "--db", demo_db, "--session", "s1", "--agent", AGENT, "--verifier", VERIFIER]
    page = run(*drift, "--rollouts", "2", "--out", "-")
    assert page.exit_code == 0, page.output
    assert page.output.startswith("<!doctype html>") and page.output.endswith("</body>")
    assert not list(tmp_path.glob("-*"))
    both = run(*drift, "--rollouts", "2", "--out", "-", "--json")
    assert both.exit_code == 2 and "standard output" in both.output


def test_report_to_an_unwritable_path_and_contradictory_options(demo_db, tmp_path, not_a_directory):
    prefix = tmp_path / "r"
    made = run(
        "attribute", "--db", demo_db, "--session", "s1", "--agent", AGENT,
        "--verifier", VERIFIER, "--out", prefix, "--no-save",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    result = run("report", "--json", f"{prefix}.json", "--out", not_a_directory / "r.html")
    assert result.exit_code == 2 and "cannot write" in result.output
    both = run(
        "attribute", "--db", demo_db, "--session", "s1", "--agent", AGENT,
        "--verifier", VERIFIER, "--no-save", "--reports-dir", tmp_path,
    )  # fmt: skip
    assert both.exit_code == 2 and "--no-save" in both.output


def test_bad_values_are_usage_errors(demo_db, tmp_path):
    missing = run("record", "--db", demo_db, "--agent", AGENT, "--task", "@nowhere.json")
    assert missing.exit_code == 2 and "cannot read 'nowhere.json'" in missing.output
    for args in (
        ["drift", "--db", demo_db, "--session", "s1", "--agent", AGENT, "--verifier", VERIFIER,
         "--rollouts", "0"],
        ["aggregate", "--db", demo_db, "--agent", AGENT, "--verifier", VERIFIER, "--budget", "0"],
        ["attribute", "--db", demo_db, "--session", "s1", "--verifier", VERIFIER,
         "--policy", "no-such-policy"],
    ):  # fmt: skip
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
    # a natively recorded run needs its code: the replay agent would feed the verifier
    # the wrong result shape and the error would blame the verifier
    native = run("attribute", "--db", demo_db, "--session", "s1", "--verifier", VERIFIER)
    assert native.exit_code == 2 and "--agent MODULE:FUNCTION" in native.output


def test_a_state_scorer_that_raises_is_one_line(demo_db, tmp_path, monkeypatch):
    (tmp_path / "scorers.py").write_text("def broken(step):\n    raise KeyError('health')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run(
        "drift", "--db", demo_db, "--session", "s1", "--agent", AGENT, "--verifier", VERIFIER,
        "--rollouts", "2", "--state-scorer", "scorers:broken",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "the state scorer failed on step 0" in result.output and "Traceback" not in result.output


def test_credit_mode_on_a_failed_run_is_refused(demo_db):
    result = run(
        "attribute", "--db", demo_db, "--session", "s1", "--agent", AGENT,
        "--verifier", VERIFIER, "--mode", "credit", "--no-save",
    )  # fmt: skip
    assert (
        result.exit_code == 1 and "credit mode asks which step secured a success" in result.output
    )


def test_fork_and_resume_say_how_the_branch_ended_and_where_it_left_the_recording(
    demo_db, tmp_path, monkeypatch
):
    (tmp_path / "other.py").write_text(
        textwrap.dedent("""
        def agent(ctx, **task):  # calls a tool where the recording has an llm step
            ctx.tool("lookup", produce=lambda: "x")
            return {"approved": False}
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    forked = run(
        "fork", "--db", demo_db, "--session", "s1", "--agent", AGENT, "--verifier", VERIFIER,
        "--at-step", "2", "--do", '"refund_policy_2026"',
    )  # fmt: skip
    assert forked.exit_code == 0 and "-> s1-fork-2, " in forked.output
    resumed = run("resume", "--db", demo_db, "--session", "s1", "--agent", "other:agent", "--json")
    assert resumed.exit_code == 0, resumed.output
    data = json.loads(resumed.output)
    assert data["fast_forwarded"] == 0 and data["new_steps"] == 1
    assert data["divergence"]["position"] == 0
    text = run("resume", "--db", demo_db, "--session", "s1", "--agent", "other:agent")
    assert "0 steps fast-forwarded, 1 new" in text.output
    assert "left the recording at step 0" in text.output
    shown = run("show", "--db", demo_db, "--session", data["child"])
    assert "forked from s1 at step 0" in shown.output


def test_strict_import_fails_when_nothing_usable_was_in_the_file(tmp_path):
    example = FIXTURES / "otlp" / "opentelemetry-proto_examples_trace.json"  # no agent span
    db = tmp_path / "i.sqlite"
    assert run("import", example, "--db", db).exit_code == 0
    strict = run("import", example, "--db", db, "--strict")
    assert strict.exit_code == 1 and "warning" in strict.output


def test_native_sessions_copied_from_another_store_count_as_replayable(demo_db, tmp_path):
    result = run("import", demo_db, "--db", tmp_path / "copy.sqlite")
    assert result.exit_code == 0 and "2 of 2 fully replayable" in result.output


def test_show_fits_the_terminal(demo_db):
    result = run("show", "--db", demo_db, "--session", "s1", env={"COLUMNS": "80"})
    assert max(len(line) for line in result.output.splitlines()[4:]) <= 80


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    code = "from agent_replay.cli import main; main()"
    return subprocess.Popen([sys.executable, "-c", code, *args], **kwargs)


def test_a_closed_pipe_exits_141_not_1(demo_db):
    """``agent-replay verify ... | head -1``: exit 1 means a bad store for verify, so a reader
    that went away must not look like one."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    process = _cli("verify", "--db", str(demo_db), stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 141, err
    assert b"Traceback" not in err


def test_ctrl_c_exits_130(tmp_path):
    (tmp_path / "slow.py").write_text(
        textwrap.dedent("""
        import pathlib, time
        STARTED = pathlib.Path(__file__).with_name("started")
        def agent(ctx):
            STARTED.touch()
            time.sleep(0.2)
            return ctx.llm("pick", produce=lambda: ctx.rng.random())
        def verifier(result):
            return 0.0
        """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    db = str(tmp_path / "slow.sqlite")
    subprocess.run(
        [sys.executable, "-c", "from agent_replay.cli import main; main()", "record", "--db", db,
         "--agent", "slow:agent", "--verifier", "slow:verifier", "--session", "s"],
        check=True, cwd=tmp_path, env=env, capture_output=True,
    )  # fmt: skip
    started = tmp_path / "started"
    started.unlink()
    # the process a terminal starts: a background job's child (CI's, run as `cmd &`) starts
    # with SIGINT ignored, and Python then installs no KeyboardInterrupt handler at all
    terminal = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    process = subprocess.Popen(
        [sys.executable, "-c", terminal + "from agent_replay.cli import main; main()",
         "attribute", "--db", db, "--session", "s", "--agent", "slow:agent",
         "--verifier", "slow:verifier", "--no-save"],
        cwd=tmp_path, env={**env, "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not started.exists():  # the rollouts have begun (a loaded machine imports slowly)
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)  # faulthandler prints where every thread is
        _, err = process.communicate()
        pytest.fail(f"still running 60 s after SIGINT:\n{err.decode()}")
    assert process.returncode == 130, err
    assert b"interrupted" in err and b"Traceback" not in err


def test_a_replay_that_leaves_the_recording_does_not_reproduce_it(demo_db, tmp_path, monkeypatch):
    """An agent that cannot run the recording (called without ``ctx``) raises before its first
    step, so its outcome is a failure, as the recording's: that read as "reproduces"."""
    (tmp_path / "wrong.py").write_text("def agent(task):\n    return task\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    same = run(
        "replay",
        "--db",
        demo_db,
        "--session",
        "s1",
        "--agent",
        AGENT,
        "--verifier",
        VERIFIER,
        "--json",
    )
    assert same.exit_code == 0 and json.loads(same.output)["reproduced"] is True
    for extra in ((), ("--json",)):
        left = run("replay", "--db", demo_db, "--session", "s1", "--agent", "wrong:agent", *extra)
        assert left.exit_code == 0, left.output
        if extra:
            assert json.loads(left.output)["reproduced"] is False
        else:
            assert "DIVERGED at step 0" in left.output
            assert "does NOT reproduce the recording: the replay left it" in left.output


def test_options_that_would_be_ignored_are_refused(demo_db, tmp_path):
    both = run(
        "replay", "--db", demo_db, "--session", "s1", "--agent", AGENT, "--policy", "hold",
    )  # fmt: skip
    assert both.exit_code == 2 and "one or the other" in both.output
    nowhere = run("serve", "--db", demo_db, "--reports", tmp_path / "missing")
    assert nowhere.exit_code == 2 and "does not exist" in nowhere.output


def test_a_report_without_the_runs_steps_says_where_to_get_them(demo_db, tmp_path):
    from agent_replay import attribute as attribute_run

    with CheckpointStore(demo_db) as store:
        traj = store.load("s1")
    bare = tmp_path / "bare.json"
    attribute_run(traj, support_agent, refund_approved, rollouts=16).to_json(bare)
    result = CliRunner().invoke(main, ["report", "--json", str(bare)])
    assert result.exit_code == 0 and "pass --db" in result.output
    with_db = CliRunner().invoke(main, ["report", "--json", str(bare), "--db", str(demo_db)])
    assert with_db.exit_code == 0 and "pass --db" not in with_db.output


def test_drift_writes_its_html(demo_db, tmp_path):
    out = tmp_path / "drift.html"
    result = run(
        "drift", "--db", demo_db, "--session", "s1", "--agent", AGENT, "--verifier", VERIFIER,
        "--rollouts", "4", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output and "<svg" in out.read_text()


def test_an_export_url_without_its_scheme_is_refused_before_the_work(demo_db):
    result = run(
        "attribute", "--db", demo_db, "--session", "s1", "--agent", AGENT,
        "--verifier", VERIFIER, "--no-save", "--export-otlp", "127.0.0.1:4318",
    )  # fmt: skip
    assert result.exit_code == 2 and "http://127.0.0.1:4318" in result.output
    assert "CULPRIT" not in result.output


@pytest.mark.parametrize("command", ["attribute", "aggregate", "drift"])
def test_a_missing_verifier_is_a_usage_error(demo_db, command):
    """Since click 8.3 an explicit ``default=None`` counts as given: the required --verifier
    of aggregate and drift was never reported missing, and the command crashed on None."""
    args = [command, "--db", demo_db, "--agent", AGENT]
    if command != "aggregate":
        args += ["--session", "s1"]
    result = run(*args)
    assert result.exit_code == 2 and "Missing option '--verifier'" in result.output


def test_reading_an_empty_file_does_not_make_it_a_store(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for command in (["sessions"], ["verify"], ["show", "--session", "s"]):
        result = run(command[0], "--db", empty, *command[1:])
        assert result.exit_code == 1 and "is empty, not a store yet" in result.output
    assert empty.stat().st_size == 0


def test_aggregate_says_how_many_sessions_passed_and_were_not_attributed(demo_db):
    result = run("aggregate", "--db", demo_db, "--agent", AGENT, "--verifier", VERIFIER)
    assert result.exit_code == 0, result.output
    assert "(1 session that passed when recorded not attributed)" in result.output
    data = json.loads(
        run("aggregate", "--db", demo_db, "--agent", AGENT, "--verifier", VERIFIER, "--json").stdout
    )
    assert data["passed_sessions"] == 1 and data["failing_runs"] == 1


def test_attribute_seed_picks_the_rollout_streams(demo_db):
    common = ("attribute", "--db", demo_db, "--session", "s1", "--agent", AGENT)
    common += ("--verifier", VERIFIER, "--rollouts", "16", "--no-save", "--json")
    first, again = (json.loads(run(*common, "--seed", "5").stdout) for _ in range(2))
    assert first["cost"]["seed"] == 5 and first["curve"] == again["curve"]
    assert json.loads(run(*common).stdout)["cost"]["seed"] == 0
    refused = run(*common, "--seed", "-1")
    assert refused.exit_code == 2 and "--seed" in refused.output
    aggregate = ("aggregate", "--db", demo_db, "--agent", AGENT, "--verifier", VERIFIER)
    assert run(*aggregate, "--seed", "3", "--rollouts", "8").exit_code == 0


def test_aggregate_leaves_out_forks_and_resumed_runs_unless_asked(demo_db):
    """Resumed copies of one failure were counted as independent failing runs: five of them
    made one failure 'systematic'."""
    for _ in range(3):
        resumed = run("resume", "--db", demo_db, "--session", "s1", "--agent", AGENT)
        assert resumed.exit_code == 0, resumed.output
    common = ("aggregate", "--db", demo_db, "--agent", AGENT, "--verifier", VERIFIER)
    result = run(*common)
    assert result.exit_code == 0, result.output
    assert "Aggregate attribution: 1 failing runs" in result.stdout
    assert "(3 fork or resumed runs left out:" in result.output
    data = json.loads(run(*common, "--json").stdout)
    assert (data["failing_runs"], data["branches_left_out"]) == (1, 3)
    data = json.loads(run(*common, "--include-branches", "--json").stdout)
    assert (data["failing_runs"], data["branches_left_out"]) == (4, 0)


def test_a_recorded_run_that_raised_shows_what_went_wrong(tmp_path, monkeypatch):
    """``record`` of an agent that cannot take the task printed only ``error TypeError`` and a
    table header with no rows: the message (which argument is missing) was in --json only."""
    (tmp_path / "short.py").write_text("def agent(ctx, question, extra):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    db = tmp_path / "r.sqlite"
    task = '{"question": "q"}'
    recorded = run("record", "--db", db, "--agent", "short:agent", "--task", task)
    assert recorded.exit_code == 0, recorded.output  # a failed run is a run: it is stored
    assert "outcome FAILED" in recorded.output and "error TypeError" in recorded.output
    assert "missing 1 required positional argument: 'extra'" in recorded.output
    assert recorded.output.rstrip().endswith("(no steps)")


def test_json_output_is_strict_json_whatever_the_values(tmp_path):
    """``show --json`` wrote a recorded NaN or infinity bare (``NaN``, ``Infinity``): text
    that strict JSON parsers (and most languages' standard ones) refuse."""
    from agent_replay import record

    def agent(ctx):
        return ctx.llm("plan", produce=lambda: {"score": float("nan"), "hi": float("inf")})

    db = tmp_path / "n.sqlite"
    with CheckpointStore(db) as store:
        store.save(record(agent, session_id="n"))
    shown = run("show", "--db", db, "--session", "n", "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert data["steps"][0]["action"] == {"score": "NaN", "hi": "Infinity"}


def test_actions_whose_keys_are_not_strings_are_shown_and_repaired(tmp_path):
    """QA: an action with int and str keys, or tuple keys (legal data: stored as ``$map``)
    crashed ``show`` (and ``record``, after storing the run) with a TypeError from the
    preview, and ``attribute --repair`` when comparing the candidates."""

    def agent(ctx):
        ctx.tool("grid", produce=lambda: {(1, 2): "x", 3: float("nan")})
        choice = ctx.llm("dec", produce=lambda: {1: "bug" if ctx.rng.random() < 0.7 else "ok"})
        return {"answer": choice[1]}

    def verifier(result):
        return result["answer"] == "ok"

    run_ = next(t for s in range(50) if (t := record(agent, seed=s, verifier=verifier)).failed)
    db = tmp_path / "k.sqlite"
    with CheckpointStore(db) as store:
        store.save(run_)
    shown = run("show", "--db", db, "--session", run_.session_id)
    assert shown.exit_code == 0, shown.output
    assert "(1, 2)" in shown.output
    result = attribute(run_, agent, verifier, repair=True)
    assert result.culprit_index == 1 and result.repair.valid
    assert result.repair.replacement == {1: "ok"}


def test_recorded_text_cannot_drive_the_terminal_or_reverse_the_output(tmp_path):
    """Recorded content reached the terminal as it was: an OSC sequence set the window title
    (and, cut by a preview, made terminals swallow the rest), an unclosed right-to-left
    override reversed the tool's own text after it. Both are shown as escapes now."""
    from agent_replay import record

    hostile = "ok\x1b]0;pwned\x07 \x1b[41mred \u202eevil"

    def agent(ctx):
        ctx.llm("plan" + "\x1b[2J", produce=lambda: hostile, q=hostile)
        return hostile

    db = tmp_path / "h.sqlite"
    with CheckpointStore(db) as store:
        store.save(record(agent, session_id="h", verifier=lambda r: 0.0))
    for args in (("show", "--session", "h"), ("sessions",), ("verify",)):
        shown = run(*args, "--db", db)
        assert shown.exit_code == 0, shown.output
        assert (
            "\x1b" not in shown.output
            and "\u202e" not in shown.output
            and "\x07" not in shown.output
        )
    shown = run("show", "--db", db, "--session", "h")
    assert "\\u001b]0;pwned\\u0007" in shown.output and "\\u202eevil" in shown.output


def test_the_python_text_reports_escape_recorded_control_characters_too():
    """QA: the CLI escaped them, ``result.to_text()`` and ``AggregateResult.to_text()``
    returned them raw to a program that prints them."""

    def agent(ctx):
        name = "pick\x1b]0;pwned\x07\u202e"
        return ctx.llm(name, produce=lambda: "bug" if ctx.rng.random() < 0.7 else "ok")

    def verifier(result):
        return result == "ok"

    runs = [t for s in range(30) if (t := record(agent, seed=s, verifier=verifier)).failed][:2]
    texts = [
        attribute(runs[0], agent, verifier).to_text(runs[0]),
        aggregate_runs(runs, agent, verifier, rollouts=8).to_text(),
    ]
    for text in texts:
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
        assert "pick\\u001b]0;pwned" in text


def test_an_agent_that_calls_sys_exit_ends_its_run_not_the_command(tmp_path, monkeypatch):
    """QA: a rollout whose agent called ``sys.exit(3)`` ended the whole attribution: the
    command exited 3 (read as "undecided"), printed nothing and wrote no report; ``record``
    of such a run stored nothing. The exit is the run's error, as an exception is."""
    (tmp_path / "quitter.py").write_text(
        textwrap.dedent("""
        import sys

        def agent(ctx, x=0):
            a = ctx.llm("a", produce=lambda: ctx.rng.random())
            if a < 0.3:
                sys.exit(3)
            return {"answer": "bug" if a < 0.9 else "ok"}

        def verifier(result):
            return result["answer"] == "ok"
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from quitter import agent, verifier

    def seed_where(wanted):
        return next(s for s in range(100) if wanted(record(agent, seed=s, verifier=verifier)))

    db = tmp_path / "q.sqlite"
    args = ["--db", db, "--agent", "quitter:agent", "--task", "{}"]
    exiting = seed_where(lambda t: t.outcome.error is not None)
    recorded = run("record", *args, "--seed", exiting, "--session", "exits")
    assert recorded.exit_code == 0 and "error SystemExit" in recorded.output
    failing = seed_where(lambda t: t.failed and t.outcome.error is None)
    run("record", *args, "--seed", failing, "--verifier", "quitter:verifier", "--session", "s")
    out = tmp_path / "rep"
    result = run(
        "attribute", "--db", db, "--session", "s", "--agent", "quitter:agent",
        "--verifier", "quitter:verifier", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output  # the culprit is named
    assert (tmp_path / "rep.json").exists()
    data = json.loads((tmp_path / "rep.json").read_text())
    assert data["culprit_index"] == 0 and data["exceptions"]["SystemExit"] > 0


def test_record_refuses_a_taken_session_id_before_running_the_agent(tmp_path, monkeypatch):
    """QA: the agent ran in full (model calls, side effects), then the run was refused and
    lost because the session id was taken."""
    (tmp_path / "counting.py").write_text(
        "RUNS = []\n\n\ndef agent(ctx):\n"
        "    RUNS.append(1)\n    return ctx.llm('a', produce=lambda: 1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import counting

    db = tmp_path / "t.sqlite"
    assert run("record", "--db", db, "--agent", "counting:agent", "--session", "s").exit_code == 0
    again = run("record", "--db", db, "--agent", "counting:agent", "--session", "s")
    assert again.exit_code == 1 and "already exists" in again.output
    assert "nothing was run" in again.output and counting.RUNS == [1]


def test_listing_and_verifying_damaged_or_odd_rows_never_crash_or_forge_lines(tmp_path):
    """QA: a session row edited by hand (a text score, a blob source) crashed ``sessions``
    with a traceback; a session id holding a newline printed a forged line; a file whose
    pages SQLite finds damaged verified as fine (the hashes it holds were all intact)."""
    import sqlite3

    db = tmp_path / "d.sqlite"
    with CheckpointStore(db) as store:
        for sid in ("s0", "s1", "s\nok    forged"):
            store.save(record(lambda ctx: ctx.llm("a", produce=lambda: "x" * 3000), session_id=sid))
        for i in range(20):
            store.save(
                record(lambda ctx: ctx.llm("b", produce=lambda: "y" * 3000), session_id=f"p{i}")
            )
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET score='abc' WHERE session_id='s1'")
        conn.execute("UPDATE sessions SET source=x'00ff' WHERE session_id='s0'")
    listed = run("sessions", "--db", db)
    assert listed.exit_code == 0, listed.output
    assert "s\\u000aok    forged" in listed.output and "\nok    forged" not in listed.output
    verified = run("verify", "--db", db)
    assert verified.exit_code == 1 and "BAD   s1" in verified.output
    assert "ok    s\\u000aok    forged" in verified.output
    with open(db, "r+b") as handle:  # a page of the file overwritten
        handle.seek(8192 * 7)
        handle.write(bytes(range(256)) * 32)
    damaged = run("verify", "--db", db)
    assert damaged.exit_code == 1
    assert "BAD   file  SQLite's integrity check:" in damaged.output
    with CheckpointStore(db, read_only=True) as store:
        with pytest.raises(StoreError, match="opened read-only; nothing can be written"):
            store.vacuum()
