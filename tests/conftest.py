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


@pytest.fixture(scope="session", autouse=True)
def pinned_uuids():
    """``ctx.uuid()`` returns one fixed uuid while recording in the suite. Rollout streams are
    keyed by the recorded content, so a run holding a fresh uuid (the demo's receipt) would
    draw different rollouts in every session; pinned, every session draws the same ones."""
    import uuid

    from agent_replay.capture import context

    real = context._REAL_UUID4
    fixed = uuid.UUID("00000000-0000-4000-8000-000000000001")
    context._REAL_UUID4 = lambda: fixed
    yield
    context._REAL_UUID4 = real


@pytest.fixture
def fixtures_dir() -> Path:
    """The shared real trace samples (skips the test when they are not present)."""
    if not FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture
def provider():
    """``(TracerProvider, InMemorySpanExporter)``: a private SDK provider whose finished spans
    the test reads (files may define their own ``provider``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider, exporter
    tracer_provider.shutdown()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


@pytest.fixture(scope="session")
def demo_attribution():
    """(trajectory, result) of the demo agent's failing run: deterministic (seeded, and its
    receipt uuid pinned by :func:`pinned_uuids`)."""
    from agent_replay import record
    from agent_replay.attribution import attribute
    from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent

    traj = record(support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved)
    result = attribute(traj, support_agent, refund_approved, repair=True)
    return traj, result


@pytest.fixture(scope="session")
def evil_attribution():
    """(trajectory, result) of a failing run of :func:`evil_agent`."""
    from agent_replay import record
    from agent_replay.attribution import attribute
    from surface_helpers import XSS_IMG, XSS_SCRIPT, evil_agent, evil_verifier

    for seed in range(64):
        traj = record(
            evil_agent,
            {"question": XSS_IMG},
            seed=seed,
            verifier=evil_verifier,
            session_id=f"{XSS_SCRIPT}-{seed}",
        )
        if traj.failed:
            break
    result = attribute(traj, evil_agent, evil_verifier, repair=True)
    return traj, result
