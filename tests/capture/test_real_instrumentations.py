"""Capture from real instrumentation packages wrapping the real ``openai`` client, offline.

The client's HTTP transport is ``httpx2.MockTransport`` (openai 3.x uses httpx2), so no network
is touched; everything else is real: the instrumentors, the OTel SDK, the span processor and
the SQLite store. The agent is the one of ``fixtures/generated/drive.py``: chat → tool call →
``execute_tool`` span made with the OTel API → chat with the tool result → final answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_replay import StepKind, Trajectory
from agent_replay.otel import attach
from agent_spans import (
    genai_agent_span,
    genai_tool_span,
    openinference_agent_span,
    openinference_tool_span,
)
from fake_openai import chat_completion
from instrumenting import instrumented, openai_instrumentor
from stored import stored_trajectory

SYSTEM = "You are a weather bot."
QUESTION = "Weather in Paris?"
ARGUMENTS = '{"location": "Paris"}'
TOOL_RESULT = {"temp_f": 57, "conditions": "rainy"}
ANSWER = "It is rainy and 57F in Paris."
CALL_ID = "call_abc123"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get weather",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}},
                "required": ["location"],
            },
        },
    }
]


def fake_openai() -> openai.OpenAI:
    """An OpenAI client whose server answers a tool call first, then the final answer."""
    calls = {"n": 0}

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls["n"] += 1
        sent = json.loads(request.content)
        if any(m.get("role") == "tool" for m in sent["messages"]):
            message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
            finish, usage = "stop", (90, 12)
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": CALL_ID,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ARGUMENTS},
                    }
                ],
            }
            finish, usage = "tool_calls", (57, 15)
        body = chat_completion(calls["n"], "gpt-4o-mini-2024-07-18", message, finish, usage)
        return httpx2.Response(200, json=body)

    return openai.OpenAI(
        api_key="sk-test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def langchain_style_tool_span(
    tracer: trace.Tracer, name: str, call_id: str, arguments: str, result: str
) -> Any:
    """A TOOL span like openinference-langchain's: no ``tool.id``, the call id only inside the
    serialised ToolMessage in ``output.value``."""
    message = {"type": "tool", "data": {"content": result, "tool_call_id": call_id}}
    return tracer.start_as_current_span(
        name,
        attributes={
            "openinference.span.kind": "TOOL",
            "tool.name": name,
            "input.value": "Paris",
            "input.mime_type": "text/plain",
            "output.value": json.dumps(message),
            "output.mime_type": "application/json",
        },
    )


SpanFactory = Callable[..., Any]


def run_weather_agent(
    provider: TracerProvider, agent_span: SpanFactory, tool_span: SpanFactory
) -> str:
    """The agent loop of drive.py; returns the final answer."""
    client = fake_openai()
    tracer = provider.get_tracer("demo.agent")
    with agent_span(tracer):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ]
        first = client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=TOOLS, temperature=0.2
        )
        call = first.choices[0].message.tool_calls[0]
        arguments = call.function.arguments
        with tool_span(tracer, call.function.name, call.id, arguments, json.dumps(TOOL_RESULT)):
            observation = f"{TOOL_RESULT['conditions']}, {TOOL_RESULT['temp_f']}F"
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": observation},
        ]
        final = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
    return final.choices[0].message.content


def bare_call() -> None:
    """One call outside any agent (to prove an instrumentation gone)."""
    fake_openai().chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )


@pytest.fixture
def otel_genai(monkeypatch, provider) -> Iterator[Any]:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    with instrumented(openai_instrumentor("gen_ai"), provider, bare_call) as instrumentor:
        yield instrumentor


@pytest.fixture
def otel_genai_no_content(monkeypatch, provider) -> Iterator[Any]:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    with instrumented(openai_instrumentor("gen_ai"), provider, bare_call) as instrumentor:
        yield instrumentor


@pytest.fixture
def openinference(provider) -> Iterator[Any]:
    with instrumented(openai_instrumentor("openinference"), provider, bare_call) as instrumentor:
        yield instrumentor


def capture(db_path: Path, provider: TracerProvider, agent_span, tool_span) -> Trajectory:
    processor = attach(db_path, tracer_provider=provider)
    assert run_weather_agent(provider, agent_span, tool_span) == ANSWER
    return stored_trajectory(processor, db_path)


def assert_weather_trajectory(traj: Trajectory, *, dialect: str) -> None:
    """What both instrumentations must yield: llm → tool → llm, with content and links."""
    assert traj.session_id == "conv_1"
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    first, tool, final = traj.steps
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    assert first.started_ns <= tool.started_ns <= final.started_ns

    # the first chat: system + user in, a tool call out
    assert [m["role"] for m in first.inputs["messages"]] == ["system", "user"]
    assert first.inputs["messages"][1]["parts"] == [{"type": "text", "content": QUESTION}]
    assert first.inputs["model"] == "gpt-4o-mini"
    assert first.attributes["parameters"] == {"temperature": 0.2}
    assert [t["name"] for t in first.inputs["tools"]] == ["get_weather"]
    (out,) = first.action
    (part,) = out["parts"]
    assert part == {
        "type": "tool_call",
        "id": CALL_ID,
        "name": "get_weather",
        "arguments": {"location": "Paris"},
    }
    assert first.attributes["tool_calls"] == [CALL_ID]
    assert first.attributes["model"] == "gpt-4o-mini-2024-07-18"
    assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (57, 15)
    assert dialect in first.attributes["dialect"].split(",")

    # the tool step answers the first chat's call
    assert tool.name == "get_weather"
    assert tool.attributes["tool_call_id"] == CALL_ID
    assert tool.attributes["requested_by"] == 0

    # the final chat saw the tool result and answered
    roles = [m["role"] for m in final.inputs["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    (response,) = final.inputs["messages"][3]["parts"]
    assert response["type"] == "tool_call_response" and response["id"] == CALL_ID
    assert response["response"] == "rainy, 57F"
    (answer,) = final.action
    assert answer["parts"] == [{"type": "text", "content": ANSWER}]
    assert final.attributes["finish_reasons"] == ["stop"]  # kept beside, not in the messages
    assert traj.metadata["capture"]["replayable"] is True
    assert traj.metadata["capture"]["steps_without_content"] == []


def test_opentelemetry_genai_openai_span_only(db_path, provider, otel_genai):
    traj = capture(db_path, provider[0], genai_agent_span, genai_tool_span)
    assert_weather_trajectory(traj, dialect="gen_ai")
    tool = traj.steps[1]
    assert tool.inputs == {"arguments": {"location": "Paris"}}
    assert tool.action == TOOL_RESULT


def test_opentelemetry_genai_openai_without_content_says_so(
    db_path, provider, otel_genai_no_content
):
    traj = capture(db_path, provider[0], genai_agent_span, genai_tool_span)
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    assert traj.steps[0].inputs is None and traj.steps[0].action is None
    report = traj.metadata["capture"]
    assert report["steps_without_content"] == [0, 2]
    assert report["replayable"] is False
    assert any("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in n for n in report["notes"])


@pytest.mark.parametrize(
    "tool_span", [openinference_tool_span, langchain_style_tool_span], ids=["tool.id", "no-id"]
)
def test_openinference_openai(db_path, provider, openinference, tool_span):
    traj = capture(db_path, provider[0], openinference_agent_span, tool_span)
    assert_weather_trajectory(traj, dialect="openinference")
    tool = traj.steps[1]
    assert tool.attributes["dialect"] == "openinference"
    if tool_span is openinference_tool_span:
        assert tool.inputs == {"arguments": {"location": "Paris"}}
        assert tool.action == TOOL_RESULT
    else:
        # the bare argument is named from the call; the result is the ToolMessage's content
        assert tool.inputs == {"arguments": {"location": "Paris"}}
        assert tool.attributes["arguments_from"] == "llm tool call"
        assert tool.action == json.dumps(TOOL_RESULT)
    assert traj.task == QUESTION  # the AGENT span's input.value


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_nulls(v) for v in value]
    return value


def test_both_dialects_yield_the_same_llm_content(tmp_path, monkeypatch):
    """Replay matches steps by content, so an LLM call must read the same whichever
    instrumentation recorded it (up to fields one side leaves null)."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    results = []
    vendors = ("gen_ai", "openinference")
    for number, instrumentor in enumerate(openai_instrumentor(v) for v in vendors):
        tracer_provider = TracerProvider()
        exporter = InMemorySpanExporter()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        with instrumented(instrumentor, (tracer_provider, exporter), bare_call):
            results.append(
                capture(
                    tmp_path / f"{number}.sqlite",
                    tracer_provider,
                    genai_agent_span,
                    genai_tool_span,
                )
            )
        tracer_provider.shutdown()
    otel, oi = results
    for index in (0, 2):
        assert _without_nulls(otel.steps[index].inputs) == _without_nulls(oi.steps[index].inputs)
        assert _without_nulls(otel.steps[index].action) == _without_nulls(oi.steps[index].action)
    assert otel.steps[1].identity == oi.steps[1].identity
