"""examples/openai_sdk_agent.py runs end to end and finds the planted culprit."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_sdk_agent.py"


def test_the_openai_sdk_example_attributes_the_planted_step(capsys):
    module = runpy.run_path(str(EXAMPLE), run_name="agent_replay_example")
    summary = module["main"](rollouts=20)
    assert summary["steps"] == 3 and summary["failed"]
    assert summary["factual_same"] and summary["factual_requests"] == 0
    # re-drawing from step i makes one request per re-drawn call: 3, 2, 1
    assert summary["requests_per_rollout"] == [3.0, 2.0, 1.0]
    assert summary["culprit"] == 1
    assert summary["rates"][2] == 1.0 and summary["rates"][1] < 0.5
    assert "culprit: step 1" in capsys.readouterr().out
