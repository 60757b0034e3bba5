"""Shared fixtures. Real trace samples live in ../shared/fixtures (CI has them there too)."""

from __future__ import annotations

from pathlib import Path

import pytest


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
