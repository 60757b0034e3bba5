"""Every example runs, as a user would run it: a subprocess in a fresh folder, with a timeout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from surface_helpers import assert_valid_report

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(args, cwd, timeout=120):
    result = subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_quickstart(tmp_path):
    out = run_example([EXAMPLES / "quickstart.py"], tmp_path)
    assert "CULPRIT  step 1 · llm:choose_tool" in out and "Explanation" in out
    assert_valid_report(json.loads((tmp_path / "quickstart-report.json").read_text()))
    assert "Culprit: step 1" in (tmp_path / "quickstart-report.html").read_text()


def test_otel_openai_agent(tmp_path):
    out = run_example([EXAMPLES / "otel_openai_agent.py"], tmp_path)
    assert "captured 3 steps from OTel spans" in out
    assert "CULPRIT  step 1 · llm:chat gpt-4o-mini" in out
    data = assert_valid_report(json.loads((tmp_path / "otel-openai-report.json").read_text()))
    assert data["trace_id"] and data["culprit_span_id"]  # ids kept from the real spans
    assert data["repair"]["valid"]


def test_langfuse_import_runs_from_a_checkout_alone(tmp_path):
    """The sample export ships with the example (a copy of the shared fixture, same bytes)."""
    shipped = EXAMPLES / "data" / "microsoft-agent-2025-10-14.json"
    for parent in EXAMPLES.resolve().parents:
        fixture = parent / "shared" / "fixtures" / "langfuse" / shipped.name
        if fixture.exists():
            assert fixture.read_bytes() == shipped.read_bytes()
    out = run_example([EXAMPLES / "langfuse_import.py"], tmp_path)
    assert "CULPRIT  step 1 · tool:get_weather" in out
    assert_valid_report(json.loads((tmp_path / "langfuse-report.json").read_text()))


def test_pytest_gate_example(tmp_path):
    out = run_example(
        [
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            tmp_path,
            EXAMPLES / "pytest_gate",
        ],
        tmp_path,
        timeout=180,
    )
    assert "1 passed" in out
