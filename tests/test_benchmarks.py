"""The benchmark scripts still run (``--quick``) and print the figures docs/benchmarks.md cites."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(
    "script,expected",
    [
        ("capture.py", ["hooks on_start+on_end", "span lifecycle, wall", "worker thread"]),
        ("store.py", ["one transaction", "one per session", "load, every hash verified"]),
        ("recording.py", ["bare agent", "record(), no SDK", "SDK + BatchSpanProcessor"]),
    ],
)
def test_benchmark_runs(script, expected):
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for text in expected:
        assert text in result.stdout
    assert "Traceback" not in result.stderr
