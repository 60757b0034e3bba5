"""The Pydantic AI dialect on the spans the real ``pydantic_ai`` package emits, offline.

A real ``Agent`` on a ``FunctionModel`` (no network) asks for one tool call, gets its result and
answers; the real ``Instrumentation`` capability writes spans through the real OTel SDK. They
are read the two ways users read them: the ``TrajectorySpanProcessor`` into a SQLite store, and
``from_otel_spans`` on the spans an ``InMemorySpanExporter`` kept.

What pydantic-ai 2.68 emits (one trace, the run span is the parent of the three others):

* ``invoke_agent weather`` (``version=2``: ``agent run``): ``gen_ai.operation.name=invoke_agent``,
  ``gen_ai.agent.name``, ``agent_name``, ``logfire.msg="weather run"``,
  ``gen_ai.conversation.id``, ``gen_ai.system_instructions``, ``pydantic_ai.all_messages``,
  ``final_result``; no ``gen_ai.input.messages``.
* ``chat fake-model``: ``gen_ai.operation.name=chat``, ``gen_ai.provider.name`` and
  ``gen_ai.system`` (``function``), ``gen_ai.input.messages`` / ``gen_ai.output.messages`` /
  ``gen_ai.system_instructions`` / ``gen_ai.tool.definitions``, usage, ``gen_ai.agent.name``.
* ``execute_tool get_weather`` with ``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``
  (``version=2``: ``running tool`` with ``tool_arguments`` / ``tool_response``), always
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.operation.name=execute_tool``.
* ``include_content=False``: same spans and message shapes, but text parts have no ``content``,
  tool calls no ``arguments``, tool returns no ``result``; no system instructions, no tool
  arguments or result, no ``final_result``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_replay import StepKind, Trajectory
from agent_replay.interop import from_otel_spans
from agent_replay.otel import attach
from stored import stored_trajectory

pydantic_ai = pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.capabilities import Instrumentation  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.instrumented import InstrumentationSettings  # noqa: E402

QUESTION = "Weather in Paris?"
INSTRUCTIONS = "Answer in one sentence."
CALL_ID = "call-1"
ANSWER = "It is rainy in Paris."
USER = {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
SYSTEM = [{"type": "text", "content": INSTRUCTIONS}]
CALL = {"type": "tool_call", "id": CALL_ID, "name": "get_weather", "arguments": {"city": "Paris"}}


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask for the weather first; answer once the tool has returned."""
    if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
        return ModelResponse(parts=[TextPart(ANSWER)])
    return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Paris"}, CALL_ID)])


def run_agent(provider: TracerProvider, *, version: int, include_content: bool = True) -> None:
    with warnings.catch_warnings():  # versions 2 to 4 are deprecated, still emitted
        warnings.simplefilter("ignore", pydantic_ai.PydanticAIDeprecationWarning)
        settings = InstrumentationSettings(
            tracer_provider=provider,
            version=version,  # type: ignore[arg-type]
            include_content=include_content,
        )
    agent = Agent(
        FunctionModel(model, model_name="fake-model"),
        name="weather",
        instructions=INSTRUCTIONS,
        capabilities=[Instrumentation(settings=settings)],
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"rainy in {city}"

    assert agent.run_sync(QUESTION).output == ANSWER


def captured(
    how: str, db_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter], **run
) -> Trajectory:
    """Run the agent once and read its trajectory ``how``: ``processor`` or ``spans``."""
    tracer_provider, exporter = provider
    processor = attach(db_path, tracer_provider=tracer_provider) if how == "processor" else None
    run_agent(tracer_provider, **run)
    spans = exporter.get_finished_spans()
    assert len(spans) == 4
    if processor is None:
        return from_otel_spans(spans)
    return stored_trajectory(processor, db_path)


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("version", [2, 5, 6])
def test_a_real_agent_run_becomes_llm_tool_llm_with_content(db_path, provider, how, version):
    traj = captured(how, db_path, provider, version=version)
    spans = provider[1].get_finished_spans()
    # pydantic-ai names the conversation on every span; it names the session
    assert {s.attributes["gen_ai.conversation.id"] for s in spans} == {traj.session_id}
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    first, tool, final = traj.steps
    assert [s.name for s in traj.steps] == ["chat fake-model", "get_weather", "chat fake-model"]
    assert {s.agent for s in traj.steps} == {"weather"}
    assert first.started_ns <= tool.started_ns <= final.started_ns
    assert traj.metadata["root_span"] == ("agent run" if version == 2 else "invoke_agent weather")

    # the run span's task: the user's question and the instructions
    assert traj.task == {"messages": [USER], "system": SYSTEM}

    # the first request: question in, tool call out
    assert first.inputs["messages"] == [USER]
    assert first.inputs["system"] == SYSTEM
    assert first.inputs["model"] == "fake-model"
    assert [t["name"] for t in first.inputs["tools"]] == ["get_weather"]
    assert first.action == [{"role": "assistant", "parts": [CALL]}]
    assert first.attributes["tool_calls"] == [CALL_ID]
    assert first.attributes["provider"] == "function"
    assert first.attributes["input_tokens"] > 0 and first.attributes["output_tokens"] > 0
    assert set(first.attributes["dialect"].split(",")) == {"gen_ai", "pydantic_ai"}

    # the tool step: arguments in, result out, linked to the call that asked for it
    assert tool.inputs == {"arguments": {"city": "Paris"}}
    assert tool.action == "rainy in Paris"
    assert tool.attributes["tool_call_id"] == CALL_ID
    assert tool.attributes["requested_by"] == 0
    assert "result_from" not in tool.attributes  # its own span had the result

    # the final request saw the whole conversation, tool result included, and answered
    messages = final.inputs["messages"]
    assert messages[:2] == [USER, {"role": "assistant", "parts": [CALL]}]
    (response,) = messages[2]["parts"]
    assert messages[2]["role"] == ("tool" if version == 6 else "user")
    assert response["type"] == "tool_call_response" and response["id"] == CALL_ID
    assert response["response"] == "rainy in Paris"
    assert final.action == [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]

    report = traj.metadata["capture"]
    assert report["replayable"] is True
    assert report["steps_without_content"] == [] and report["notes"] == []
    assert report["tool_steps_without_result"] == [] and report["unanswered_tool_calls"] == []


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("version", [2, 5])
def test_include_content_off_is_reported_not_read_as_empty_messages(
    db_path, provider, how, version
):
    traj = captured(how, db_path, provider, version=version, include_content=False)
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    assert {s.agent for s in traj.steps} == {"weather"}
    first, tool, _ = traj.steps
    # pydantic-ai keeps the message shapes with no text in them: not prompts of ""
    for step in traj.steps:
        assert step.inputs is None and step.action is None
    assert traj.task == {"root_span": traj.metadata["root_span"]}
    # what is not content survives: model, usage, tool name and call ids
    assert first.attributes["model"] == "fake-model" and first.attributes["input_tokens"] > 0
    assert first.attributes["tool_calls"] == [CALL_ID]
    assert tool.name == "get_weather" and tool.attributes["tool_call_id"] == CALL_ID
    assert tool.attributes["requested_by"] == 0  # linked by the kept call id
    assert "result_from" not in tool.attributes  # no result made up from a contentless prompt

    report = traj.metadata["capture"]
    assert report["replayable"] is False
    assert report["steps_without_content"] == [0, 1, 2]
    assert report["tool_steps_without_result"] == [1]
    assert any("include_content=True" in note for note in report["notes"])
    assert any("no message content was captured" in note for note in report["notes"])
