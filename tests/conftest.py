"""Shared fixtures. Real trace samples live in ../shared/fixtures (CI has them there too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis runs the same examples on every run (the suite must be deterministic); set
# HYPOTHESIS_PROFILE=explore to search new examples locally.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


def _find_shared() -> Path:
    # ../shared from a checkout at /work/main, ../../shared from a worktree at /work/wt/NAME
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "fixtures").is_dir():
            return parent / "shared"
    return Path(__file__).resolve().parents[2] / "shared"


SHARED = _find_shared()
FIXTURES = SHARED / "fixtures"
WHO_AND_WHEN = SHARED / "datasets" / "who_and_when"


@pytest.fixture
def fixtures_dir() -> Path:
    """The shared real trace samples (skips the test when they are not present)."""
    if not FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"
