"""Shared fixtures. Real trace samples live in ../shared/fixtures (CI has them there too)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures"
WHO_AND_WHEN = SHARED / "datasets" / "who_and_when"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"
