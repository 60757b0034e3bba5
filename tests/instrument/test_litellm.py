"""LiteLLM through its recipe, against the fake API on a local HTTP server (no network)."""

from __future__ import annotations

import asyncio

import pytest

from agent_replay import ReplayPlan, instrument
from agent_replay.instrument import record_agent, replay_agent

litellm = pytest.importorskip("litellm")

# litellm builds pydantic schemas for its TypedDicts lazily; their warnings are not ours
pytestmark = pytest.mark.filterwarnings("ignore:Items? .* `ReadOnly` qualifier:UserWarning")


def test_completion_and_acompletion_held_and_redrawn(make_api, served):
    api = make_api(lambda body, n: f"litellm answer {n}")
    base = served(api)
    seen = []

    def agent():
        first = litellm.completion(
            model="openai/gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            api_base=base,
            api_key="sk-test",
        )
        stream = litellm.completion(
            model="openai/gpt-4o-mini",
            messages=[{"role": "user", "content": "stream"}],
            api_base=base,
            api_key="sk-test",
            stream=True,
        )
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream)

        async def later():
            return await litellm.acompletion(
                model="openai/gpt-4o-mini",
                messages=[{"role": "user", "content": "async"}],
                api_base=base,
                api_key="sk-test",
            )

        third = asyncio.run(later())
        seen.append((type(first), type(third)))
        return [first.choices[0].message.content, streamed, third.choices[0].message.content]

    with instrument.installed("litellm", "openai"):  # litellm's own openai call is inside
        traj = record_agent(agent)
        assert api.count == 3
        assert [s.name for s in traj.steps] == ["litellm.completion"] * 3
        assert traj.outcome.result == ["litellm answer 1", "litellm answer 2", "litellm answer 3"]
        held = replay_agent(agent, traj)
        assert api.count == 3
        assert held.result == traj.outcome.result
        assert seen[-1] == (litellm.ModelResponse, litellm.ModelResponse)
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(2))
    assert api.count == 4
    assert redrawn.result[2] == "litellm answer 4"
