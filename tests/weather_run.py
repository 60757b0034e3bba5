"""The small weather agent the tracing-SDK tests record through each SDK's own spans (Langfuse,
LangSmith, their OpenAI and LangChain integrations): a planning llm call asking for
``get_weather``, the tool, an llm answer; and what the trajectory made from those spans must
hold whatever the SDK."""

from __future__ import annotations

from typing import Any

from agent_replay import StepKind
from agent_replay.model import Trajectory

SYSTEM = "Be brief."
QUESTION = "Weather in Paris?"
ANSWER = "It is rainy in Paris."
#: what the weather tool says when its service is down
TIMED_OUT = "weather service timed out"
CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
CALL_PART = {"type": "tool_call", "name": "get_weather", "id": "c1", "arguments": {"city": "Paris"}}
#: get_weather as offered to an OpenAI-style API (what LangChain's ``@tool`` converts to)
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
#: the same definition in an llm step's inputs (the flat OTel form)
TOOL_DEFINITION = {"type": "function", **TOOL["function"]}


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def assert_weather_trajectory(
    traj: Trajectory,
    *,
    llm_names: tuple[str, str] = ("plan", "answer"),
    model: str = "gpt-4o",
    tools: list[dict[str, Any]] | None = None,
    system_apart: bool = False,
    usage: bool = True,
) -> None:
    """plan (llm) -> get_weather (tool, linked to its call) -> answer (llm), in time order, with
    the normalised messages, the model, the tools offered (``tools``: both llm steps were
    offered these definitions), the tool-call output, token counts and a clean capture
    report. ``system_apart``: the instrumentation records the system prompt as system
    instructions (``inputs["system"]``), not as the first message. Without ``usage`` (a stream
    that did not ask for it) no step may have token counts."""
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, llm_names[0]),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, llm_names[1]),
    ]
    first, tool, final = traj.steps
    assert first.started_ns <= tool.started_ns <= final.started_ns

    offered = {"tools": tools} if tools is not None else {}
    system = [text("system", SYSTEM)]
    if system_apart:
        offered["system"], system = system[0]["parts"], []
    assert first.inputs == {
        "messages": [*system, text("user", QUESTION)],
        "model": model,
        **offered,
    }
    assert first.action == [{"role": "assistant", "parts": [CALL_PART]}]
    if usage:
        assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (12, 5)
    else:
        assert not any({"input_tokens", "output_tokens"} & set(s.attributes) for s in traj.steps)

    assert tool.inputs == {"arguments": {"city": "Paris"}}
    assert tool.action == "rainy in Paris"
    assert tool.attributes["requested_by"] == 0 and tool.attributes["tool_call_id"] == "c1"

    roles = [m["role"] for m in final.inputs["messages"]]
    assert roles == [*(m["role"] for m in system), "user", "assistant", "tool"]
    assert final.inputs.get("system") == offered.get("system")
    assert final.inputs["messages"][-1]["parts"] == [
        {"type": "tool_call_response", "response": "rainy in Paris", "id": "c1"}
    ]
    assert (final.inputs["model"], final.inputs.get("tools")) == (model, tools)
    assert final.action == [text("assistant", ANSWER)]

    capture = traj.metadata["capture"]
    assert capture["replayable"] and capture["opaque_steps"] == [] and capture["notes"] == []
    traj.verify()
