"""LangChain chat models and tools as steps: GenericFakeChatModel and a real @tool."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from agent_replay import ReplayPlan, instrument
from agent_replay.instrument import record_agent, replay_agent


def scripted_model() -> GenericFakeChatModel:
    def replies():
        for n in itertools.count(1):
            yield AIMessage(
                content="",
                tool_calls=[{"name": "lookup", "args": {"city": "Paris"}, "id": f"call_{n}"}],
            )
            yield AIMessage(content=f"It is rainy in Paris (draw {n})")

    return GenericFakeChatModel(messages=replies())


def make_agent(model, executions, seen):
    @tool
    def lookup(city: str) -> str:
        """Look up the weather of a city."""
        executions.append(city)
        return f"rainy in {city}"

    def agent(question):
        history = [HumanMessage(question)]
        ai = model.invoke(history)
        observation = lookup.invoke(ai.tool_calls[0])  # a ToolCall in, a ToolMessage out
        final = model.invoke([*history, ai, observation])
        seen.append((type(ai), type(observation), type(final)))
        return final.content

    return agent


def test_chat_model_and_tool_calls_are_steps_held_and_redrawn():
    executions, seen = [], []
    agent = make_agent(scripted_model(), executions, seen)
    with instrument.installed("langchain"):
        traj = record_agent(agent, {"question": "Weather?"})
        assert [s.label for s in traj.steps] == [
            "llm:langchain.GenericFakeChatModel",
            "tool:lookup",
            "llm:langchain.GenericFakeChatModel",
        ]
        assert traj.outcome.result == "It is rainy in Paris (draw 1)"
        assert executions == ["Paris"]
        assert "config" not in traj.steps[1].inputs  # passed through, never stored

        held = replay_agent(agent, traj)
        assert not held.diverged and held.live_steps == 0
        assert held.result == traj.outcome.result
        assert executions == ["Paris"]  # the tool did not run again
        assert seen[-1] == (AIMessage, ToolMessage, AIMessage)

        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(0))
    assert executions == ["Paris", "Paris"]  # re-drawn tool: executed live once
    assert redrawn.live_steps == 3
    # the model drew its next two scripted replies: nothing was consumed by the held replay
    assert redrawn.result == "It is rainy in Paris (draw 2)"


def test_streaming_and_async_langchain_calls():
    model = GenericFakeChatModel(messages=itertools.cycle([AIMessage(content="alpha beta gamma")]))
    seen = []

    @tool
    async def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    def agent():
        chunks = list(model.stream("hi"))

        async def async_part():
            reply = await model.ainvoke("hello")
            loud = await shout.ainvoke({"text": reply.content})
            streamed = [c.content async for c in model.astream("hey")]
            return reply.content, loud, streamed

        reply, loud, streamed = asyncio.run(async_part())
        seen.append({type(c) for c in chunks})
        return ["".join(c.content for c in chunks), reply, loud, "".join(streamed)]

    with instrument.installed("langchain"):
        traj = record_agent(agent)
        assert [s.label for s in traj.steps] == [
            "llm:langchain.GenericFakeChatModel",
            "llm:langchain.GenericFakeChatModel",
            "tool:shout",
            "llm:langchain.GenericFakeChatModel",
        ]
        assert traj.steps[0].action["__agent_replay__"] == "iterator"
        held = replay_agent(agent, traj)
    assert held.result == traj.outcome.result
    assert held.result == [
        "alpha beta gamma",
        "alpha beta gamma",
        "ALPHA BETA GAMMA",
        "alpha beta gamma",
    ]
    assert held.live_steps == 0
    assert seen[-1] == {AIMessageChunk}


class NamedModel(BaseChatModel):
    """A real LangChain chat model that answers with its own model name."""

    model_name: str = "small-model"
    calls: list[str]

    @property
    def _llm_type(self) -> str:
        return "named"

    def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kw: Any):
        self.calls.append(self.model_name)
        message = AIMessage(content=f"{self.model_name} answered")
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_swap_model_copies_the_langchain_model_with_the_hinted_name():
    model = NamedModel(calls=[])

    def agent():
        return [model.invoke("one").content, model.invoke("two").content]

    with instrument.installed("langchain"):
        traj = record_agent(agent)
        swapped = replay_agent(agent, traj, ReplayPlan.ablate_from(1).swap_model("big-model", 1))
    assert traj.outcome.result == ["small-model answered", "small-model answered"]
    assert swapped.result == ["small-model answered", "big-model answered"]
    assert model.calls == ["small-model", "small-model", "big-model"]
    assert model.model_name == "small-model"  # the agent's own model object is unchanged
