"""The product's promise on a production trace, end to end with real parts: a LangGraph agent
traced by OpenInference into SQLite, then attributed offline through the replay agent, its llm
steps re-drawn by the real ``openai`` client against an OpenAI-compatible surrogate endpoint.

The agent (``langchain.agents.create_agent`` on ``langchain_openai.ChatOpenAI``) is asked for
the weather in Paris; the recorded model call asks ``get_weather`` for London (the planted
mistake), the tool answers for London and the agent reports sunshine, which the verifier
rejects (it rains in Paris). Offline, nothing of the agent's code runs: the replay agent
re-issues the recorded steps; the llm policy is :class:`OpenAIChatPolicy` talking to a local
HTTP server that plays the model (asked with a seed, it picks Paris seven times in ten; its
answer follows the tool result it is shown), and the tool policy re-runs the tool on the
arguments it is given. Re-drawing the first llm step changes the tool call, the change
propagates to the tool's arguments and to the final call's history, and attribution must name
that step.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import httpx2
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor

from agent_replay import StepKind, attribute, replayable_agent
from agent_replay.otel import attach
from agent_replay.replay.policies import OpenAIChatPolicy, ScriptedPolicy
from fake_openai import chat_completion, send_json, serving
from stored import stored_trajectory

QUESTION = "What is the weather in Paris?"


def weather(city: str) -> str:
    return "rainy" if city == "Paris" else "sunny"


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{weather(city)} in {city}"


class SurrogateModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint playing the agent's model. Without a seed (the
    recorded run, through ChatOpenAI) it makes the mistake; with one (the replay policy) it
    picks Paris for seeds 0-6 of every ten."""

    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        last = body["messages"][-1]
        if last["role"] == "tool":
            content = last["content"]
            text = content if isinstance(content, str) else json.dumps(content)
            message: dict[str, Any] = {
                "role": "assistant",
                "content": f"It is {'rainy' if 'rainy' in text else 'sunny'} there.",
            }
            payload = chat_completion(2, body["model"], message, "stop", (30, 8))
        else:
            seed = body.get("seed")
            city = "London" if seed is None or seed % 10 >= 7 else "Paris"
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            payload = chat_completion(1, body["model"], message, "tool_calls", (20, 5))
        send_json(self, payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    SurrogateModel.requests = []
    with serving(SurrogateModel) as base_url:
        yield base_url


@pytest.fixture
def recorded(endpoint, provider, db_path):
    """The failing production run, captured by OpenInference into SQLite."""
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider[0])
    processor = attach(db_path, tracer_provider=provider[0])
    try:
        model = ChatOpenAI(
            model="gpt-4o",
            api_key="sk-test",
            base_url=endpoint,
            http_client=httpx2.Client(),
            max_retries=0,
        )
        agent = create_agent(model, [get_weather], name="weather_agent")
        state = agent.invoke({"messages": [HumanMessage(QUESTION)]})
        assert "sunny" in state["messages"][-1].content  # the production failure
        return stored_trajectory(processor, db_path)
    finally:
        instrumentor.uninstrument()


def verifier(result: dict[str, Any]) -> bool:
    final = result["final"]
    text = "".join(p.get("content", "") for m in final for p in m["parts"] if "content" in p)
    return "rainy" in text


def run_tool(request: Any) -> str:
    """The tool re-run on the arguments it is given now (rewritten when the call changed)."""
    return (
        f"{weather(request.inputs['arguments']['city'])} in {request.inputs['arguments']['city']}"
    )


def test_an_imported_langgraph_trace_names_the_planning_call(recorded, endpoint):
    traj = recorded
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, "ChatOpenAI"),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, "ChatOpenAI"),
    ]
    assert traj.steps[1].inputs == {"arguments": {"city": "London"}}
    assert traj.metadata["capture"]["replayable"] is True

    policies = {
        "llm": OpenAIChatPolicy(base_url=endpoint, api_key="sk-test", max_retries=0),
        "get_weather": ScriptedPolicy(run_tool),
    }
    agent = replayable_agent(traj, policies)
    assert agent.observation_only == ()
    recording_requests = len(SurrogateModel.requests)

    result = attribute(traj, agent, verifier, budget=300)
    assert result.culprit_index == 0, result.summary()
    assert result.culprit_agent == "weather_agent"
    assert result.verdict in ("separated", "likely"), result.summary()
    assert result.steps[0].interval.low > 0
    assert result.cost["live_steps"] <= 300

    # the surrogate was really asked, through the real client, with seeds and the tools
    asked = SurrogateModel.requests[recording_requests:]
    planning = [r for r in asked if r["messages"][-1]["role"] != "tool"]
    assert planning and all("seed" in r and r["tools"] for r in planning)
    answering = [r for r in asked if r["messages"][-1]["role"] == "tool"]
    # the final call saw the re-run tool's result for Paris in its history
    assert any("rainy in Paris" in json.dumps(r["messages"][-1]) for r in answering)
