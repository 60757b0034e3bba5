"""End to end with the attribution estimator: an unmodified OpenAI-SDK agent, attributed.

Runs where ``agent_replay.attribution`` exists (it is built on ``replay`` and accepts
``pass_context=False`` for agents that take no ``ctx``); skipped on a tree without it.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from agent_replay import instrument

attribution = pytest.importorskip("agent_replay.attribution")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_sdk_agent.py"


def test_attribute_names_the_planted_llm_call_of_an_sdk_agent():
    example = runpy.run_path(str(EXAMPLE), run_name="agent_replay_example")
    api = example["FakeOpenAI"]()
    agent = example["make_agent"](api.client())
    verifier = example["verifier"]
    with instrument.installed("openai"):
        trajectory = instrument.record_agent(
            agent, {"question": "What's the weather in Paris?"}, verifier=verifier
        )
        assert trajectory.outcome.failed and api.requests == 3
        result = attribution.attribute(trajectory, agent, verifier, rollouts=40, pass_context=False)
    assert result.culprit_index == 1  # the call that picked the wrong city
    assert result.steps[1].label == "llm:openai.chat.completions.create"
    # rollouts went through the real client: held calls cost nothing, re-drawn ones a request
    assert api.requests > 3
