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
* A tool that raises ``ModelRetry``: its span ends in ERROR without a description, with an
  ``exception`` event of ``pydantic_ai.exceptions.ToolRetryError`` (the retry message) and
  the retry prompt as the tool's result; the model's next request has it as the call's
  response and asks again under a new call id. A tool that raises anything else: its span
  and the run's end in ERROR with the exception event, the run's description
  ``"TimeoutError: message"``, the tool's none.
* ``include_content=False``: same spans and message shapes, but text parts have no ``content``,
  tool calls no ``arguments``, tool returns no ``result``; no system instructions, no tool
  arguments or result, no ``final_result``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic_ai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from agent_replay import StepKind, Trajectory
from stored import captured as read_back
from weather_run import TIMED_OUT

QUESTION = "Weather in Paris?"
INSTRUCTIONS = "Answer in one sentence."
CALL_ID = "call-1"
ANSWER = "It is rainy in Paris."
USER = {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
SYSTEM = [{"type": "text", "content": INSTRUCTIONS}]
CALL = {"type": "tool_call", "id": CALL_ID, "name": "get_weather", "arguments": {"city": "Paris"}}


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask for the weather first; answer once the tool has returned it; ask again (``call-2``
    after ``call-1``) when the tool asked for a retry instead."""
    returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if any(p.outcome == "success" for p in returned):
        return ModelResponse(parts=[TextPart(ANSWER)])
    asked = sum(isinstance(p, ToolCallPart) for m in messages for p in m.parts)
    return ModelResponse(
        parts=[ToolCallPart("get_weather", {"city": "Paris"}, f"call-{asked + 1}")]
    )


def rainy(city: str) -> str:
    return f"rainy in {city}"


def run_agent(
    provider: TracerProvider,
    *,
    version: int,
    include_content: bool = True,
    weather: Callable[[str], str] = rainy,
) -> str:
    """The weather agent with ``weather`` as its ``get_weather`` tool; returns its output."""
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

    agent.tool_plain(name="get_weather")(weather)
    return agent.run_sync(QUESTION).output


def captured(
    how: str,
    db_path: Path,
    provider: tuple[TracerProvider, InMemorySpanExporter],
    expect: str | type[BaseException] = ANSWER,
    **run: Any,
) -> Trajectory:
    """Run the agent once (``run_agent``'s options) and read its trajectory ``how``:
    ``processor`` or ``spans`` (``stored.captured``)."""
    return read_back(how, db_path, provider, lambda: run_agent(provider[0], **run), expect)


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("version", [2, 5, 6])
def test_a_real_agent_run_becomes_llm_tool_llm_with_content(db_path, provider, how, version):
    traj = captured(how, db_path, provider, version=version)
    spans = provider[1].get_finished_spans()
    assert len(spans) == 4
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


RETRY = "No such city, try again."


def tool_spans(provider: tuple[TracerProvider, InMemorySpanExporter]) -> list[Any]:
    spans = provider[1].get_finished_spans()
    return [s for s in spans if s.attributes["gen_ai.operation.name"] == "execute_tool"]


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("version", [2, 5, 6])
def test_a_tool_that_asks_for_a_retry_is_a_failed_step_the_run_goes_on(
    db_path, provider, how, version
):
    """The tool raises ``ModelRetry`` once: pydantic-ai ends its span in ERROR (no description)
    with the ``ToolRetryError`` it raised as the exception event, and records the retry
    prompt the model gets as the tool's result; the model asks again (a new call id), the
    tool answers, the run ends well."""
    attempts: list[str] = []

    def weather(city: str) -> str:
        attempts.append(city)
        if len(attempts) == 1:
            raise ModelRetry(RETRY)
        return rainy(city)

    traj = captured(how, db_path, provider, weather=weather, version=version)
    retried, answered = tool_spans(provider)
    assert (retried.status.status_code, retried.status.description) == (StatusCode.ERROR, None)
    (event,) = retried.events
    assert event.attributes["exception.type"] == "pydantic_ai.exceptions.ToolRetryError"
    assert event.attributes["exception.message"] == RETRY
    result_key = "tool_response" if version == 2 else "gen_ai.tool.call.result"
    # the retry prompt the model gets: the tool's message (pydantic-ai before 2.6x, the release
    # Python 3.10 gets, appends an instruction to it)
    told = retried.attributes[result_key]
    assert told in (RETRY, f"{RETRY}\n\nFix the errors and try again.")
    assert answered.status.status_code is StatusCode.UNSET and answered.events == ()

    kinds = [StepKind.LLM, StepKind.TOOL] * 2 + [StepKind.LLM]
    assert [s.kind for s in traj.steps] == kinds
    first_try, second_try = traj.steps[1], traj.steps[3]
    assert first_try.error == {"type": "pydantic_ai.exceptions.ToolRetryError", "message": RETRY}
    assert first_try.action == told  # what the model was given
    assert (first_try.attributes["tool_call_id"], first_try.attributes["requested_by"]) == (
        "call-1",
        0,
    )
    assert (second_try.error, second_try.action) == (None, "rainy in Paris")
    assert (second_try.attributes["tool_call_id"], second_try.attributes["requested_by"]) == (
        "call-2",
        2,
    )
    (response,) = traj.steps[2].inputs["messages"][-1]["parts"]
    assert (response["id"], response["response"]) == ("call-1", told)
    assert [s.error for s in traj.steps[::2]] == [None] * 3
    assert traj.outcome is None  # the run answered
    report = traj.metadata["capture"]
    assert report["tool_steps_without_result"] == [] and report["unanswered_tool_calls"] == []
    assert report["notes"] == [] and report["replayable"] is True


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("version", [2, 5, 6])
def test_a_tool_that_raises_fails_its_step_and_the_run(db_path, provider, how, version):
    """A plain exception out of the tool ends the run: the tool's span and the run's end in
    ERROR with the exception event; the run's description is ``"Type: message"``, the tool's
    none."""

    def weather(city: str) -> str:
        raise TimeoutError(TIMED_OUT)

    traj = captured(how, db_path, provider, TimeoutError, weather=weather, version=version)
    (tool_span,) = tool_spans(provider)
    root = next(s for s in provider[1].get_finished_spans() if s.parent is None)
    assert tool_span.status.description is None
    assert root.status.description == f"TimeoutError: {TIMED_OUT}"
    for span in (tool_span, root):
        assert span.status.status_code is StatusCode.ERROR
        (event,) = span.events
        assert (event.attributes["exception.type"], event.attributes["exception.message"]) == (
            "TimeoutError",
            TIMED_OUT,
        )

    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL]
    llm, tool = traj.steps
    error = {"type": "TimeoutError", "message": TIMED_OUT}
    assert (llm.error, tool.error, tool.action) == (None, error, None)
    assert tool.inputs == {"arguments": {"city": "Paris"}}
    assert (tool.attributes["tool_call_id"], tool.attributes["requested_by"]) == (CALL_ID, 0)
    # regression: the run's error is the exception event's, not the "Type: message" description
    assert traj.outcome.failed is True and traj.outcome.error == error
    report = traj.metadata["capture"]
    # regression: a tool that raised is not a tool whose result went unrecorded
    assert report["tool_steps_without_result"] == [] and report["notes"] == []
