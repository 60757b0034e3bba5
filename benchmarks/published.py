"""The published package (trajectory-causal-attribution 1.0.0) in its own virtual environment.

Benchmarks that compare against it run a script under this interpreter, where that package,
and not this repository, provides ``agent_replay``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

SEED_PACKAGE = "trajectory-causal-attribution==1.0.0"
DEFAULT_VENV = Path(__file__).resolve().parent.parent / ".bench" / "seed-venv"


def seed_python(where: Path = DEFAULT_VENV) -> Path:
    """The interpreter of the venv at ``where``, created with the package (from PyPI) if new."""
    python = where / ("Scripts" if os.name == "nt" else "bin") / "python"
    if not python.exists():
        print(f"creating {where} with {SEED_PACKAGE} (from PyPI) ...", file=sys.stderr)
        venv.create(where, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", SEED_PACKAGE], check=True)
    return python


def run_published(where: Path, script: Path, *args: str) -> str:
    """Run ``script`` under the published package's interpreter; its stdout."""
    return subprocess.run(
        [str(seed_python(where)), str(script), *args],
        check=True,
        capture_output=True,
        text=True,
        cwd=str(script.parent),
        env={**os.environ, "PYTHONPATH": ""},
    ).stdout
