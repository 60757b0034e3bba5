"""Fixtures of the command-line tests."""

import pytest

from agent_replay import CheckpointStore, record
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent


@pytest.fixture
def demo_db(tmp_path):
    """A store with the demo agent's failing run ``s1`` and a passing run ``ok``."""
    db = tmp_path / "runs.sqlite"
    with CheckpointStore(db) as store:
        store.save(
            record(
                support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved, session_id="s1"
            )
        )
        store.save(
            record(support_agent, DEMO_TASK, seed=0, verifier=refund_approved, session_id="ok")
        )
    return db
