"""The benchmark scripts still run (quick variants) and print the lines docs/benchmarks.md quotes.

Only that they run and what they print is checked here: the figures themselves are machine-
dependent and are measured by running the scripts in full (see docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from fake_openai import chat_completion, send_json, serving
from real_otelcol import otelcol_binary

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(
    "script,expected",
    [
        ("capture.py", ["hooks on_start+on_end", "span lifecycle, wall", "worker thread"]),
        ("store.py", ["one transaction", "one per session", "load, every hash verified"]),
        ("prune.py", ["survey, no lock", "deletion, write lock"]),
        (
            "conversation.py",
            ["continue", "merge whole", "merge whole / continue", "does not follow"],
        ),
        ("recording.py", ["bare agent", "record(), no SDK", "SDK + BatchSpanProcessor"]),
        ("replay_overhead.py --quick --no-seed", ["bare agent", "all served", "all re-drawn"]),
        (
            "attribution_overhead.py",
            ["outside rollouts", "concurrency: 64 rollouts", "search wall time", "culprit 6"],
        ),
        ("interception.py", ["patched, no run", "recording", "replay, re-drawn", "replay, held"]),
        ("shapley_coverage.py --recordings 5", ["step pooled coverage", "agent pooled coverage"]),
        ("aggregate_coverage.py", ["own seeds (aggregate_runs)", "shared streams"]),
        ("masked_culprit.py --runs 3 --budget 2000", ["default", "budget=2000", "names step 5"]),
        (
            "import_memory.py --files 2 --traces 5",
            ["import_into (staged)", "load_many + save_many"],
        ),
        (
            "import_memory.py --files 2 --traces 5 --single --compress collector-zstd",
            ["collector-zstd", "import_into (staged)", "load_many + save_many"],
        ),
        (
            "ingest.py --traces 10 --repeats 1 --receiver-traces 20",
            ["OTLP/JSON import", "protobuf decode", "receiver http", "receiver grpc"],
        ),
    ],
)
def test_benchmark_runs(script, expected):
    name, *options = script.split()
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *(options or ["--quick"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for text in expected:
        assert text in result.stdout
    assert "Traceback" not in result.stderr


def run_script(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


@pytest.mark.skipif(
    otelcol_binary() is None, reason="no OpenTelemetry Collector binary (see real_otelcol.py)"
)
def test_collector_relay_runs_both_ways():
    out = run_script(str(BENCHMARKS / "collector_relay.py"), "--apps", "2", "--traces", "20").stdout
    for way in ("direct to agent-replay", "through relay.yaml"):
        line = next(line for line in out.splitlines() if line.startswith(way))
        assert "360 spans" in line and "every span stored once" in line
    assert "through the Collector / direct" in out


def test_compare_runs_both_trees_side_by_side():
    root = str(BENCHMARKS.parent)
    out = run_script(str(BENCHMARKS / "compare.py"), "--quick", f"a={root}", f"b={root}").stdout
    row = next(line for line in out.splitlines() if line.startswith("OTLP/JSON import"))
    assert row.count("x") == 2  # one figure per tree
    assert "worker thread, assemble" in out


def test_whowhen_harness_imports_all_runs_and_scores_the_floors():
    out = run_script(str(BENCHMARKS / "whowhen.py"), "--limit", "3").stdout
    assert "imported 184 runs" in out
    # the dataset README's reference floors: always step 1 on AG 27.0% (official rule),
    # the most frequent speaker 54.0% at agent level
    ag = out.split("Algorithm-Generated (126 runs)")[1].split("Hand-Crafted")[0]
    assert "27.0%" in ag.split("always step 1")[1].splitlines()[0]
    assert "54.0%" in ag.split("most frequent speaker")[1].splitlines()[0]
    assert "smoke test (scripted surrogate, not a model): 3 runs" in out


def test_attribution_suite_runs_for_agent_replay():
    out = run_script(
        str(BENCHMARKS / "attribution_suite.py"),
        "--no-seed",
        "--families",
        "AC",
        "--instances",
        "2",
    ).stdout
    assert "mean accuracy: budget" in out
    assert out.count("%") >= 8


@pytest.fixture(scope="module")
def published_venv(tmp_path_factory):
    """A virtual environment with the published package, installed from the package index
    the way the benchmarks create theirs (``benchmarks/published.py``)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from published import seed_python
    finally:
        sys.path.remove(str(BENCHMARKS))
    where = tmp_path_factory.mktemp("published") / "venv"
    seed_python(where)
    return where


def test_side_by_side_rows_of_the_published_package(published_venv):
    """The comparisons really run the published package: its replay rows and its suite rows
    come from its own interpreter."""
    out = run_script(
        str(BENCHMARKS / "replay_overhead.py"), "--quick", "--seed-venv", str(published_venv)
    ).stdout
    ours, theirs = out.split("the published package, same agent and variants")
    assert "replay, all re-drawn" in ours and "replay, all re-drawn" in theirs
    out = run_script(
        str(BENCHMARKS / "attribution_suite.py"),
        "--families",
        "A",
        "--instances",
        "1",
        "--seed-venv",
        str(published_venv),
    ).stdout
    row = next(line for line in out.splitlines() if line.startswith("A "))
    assert "nan" not in row  # the published package's accuracy and cost were measured
    assert ", published " in out


def test_write_amplification_accounts_for_the_bytes_of_a_tree():
    root = str(BENCHMARKS.parent)
    script = str(BENCHMARKS / "write_amp.py")
    out = run_script(script, f"here={root}", "--runs", "20", "--mode", "single").stdout
    for row in ("commit spans (add_pending)", "mark assembled", "checkpoints (WAL to file)"):
        assert row in out


class _Unhelpful(BaseHTTPRequestHandler):
    """An endpoint whose every reply is the same: no rollout of a run changes its outcome."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        message = {"role": "assistant", "content": "I cannot tell."}
        send_json(self, chat_completion(1, "m", message, "stop", (3, 3)))

    def log_message(self, *args):
        pass


def test_whowhen_with_a_model_prints_the_table_when_every_run_is_undecided():
    """Runs that were attributed without a culprit ended the script with "no run could be
    attributed (see the errors above): no table" and status 1, no error printed."""
    with serving(_Unhelpful) as base_url:
        out = run_script(
            str(BENCHMARKS / "whowhen.py"),
            *("--limit", "1", "--budget", "20", "--base-url", base_url, "--model", "m"),
        ).stdout
    assert "counterfactual attribution, m as surrogate: 1 runs" in out
    assert "counterfactual " in out.split("as surrogate")[1]  # the table's row
    assert "decided 0% (1 undecided, 0 failed, counted as misses)" in out


def test_whowhen_checks_the_model_before_importing_the_dataset():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "whowhen.py"), "--base-url", "http://127.0.0.1:9/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--model is required with --base-url" in result.stderr
    assert "imported" not in result.stdout  # not after the import and the floors
