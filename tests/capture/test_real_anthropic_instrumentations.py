"""Capture from the real Anthropic instrumentations wrapping the real ``anthropic`` client, offline.

The client (anthropic 2.14, which talks through httpx2: ``Anthropic``, and ``AsyncAnthropic``
driven by ``asyncio.run``) gets an ``httpx2.MockTransport`` that plays the Messages API: a
``tool_use`` block first, then the final text, with usage, as a JSON body or as server-sent
events when the request streams. Both instrumentations record ``AsyncAnthropic`` calls as they
record ``Anthropic`` ones. Everything else is real: the
instrumentors, the OTel SDK, the span processor and the SQLite store. The agent loop sends
the tool result back as a ``tool_result`` block of a user turn; the tool span is made the way
each ecosystem makes one (neither instrumentation makes it): an ``execute_tool`` span with
the OTel API, an OpenInference ``TOOL`` span (once left out: the tool step is then rebuilt
from the ``tool_result``). Spans are read both ways: ``attach`` into a
SQLite store, and ``from_otel_spans`` on what an ``InMemorySpanExporter`` kept.

What ``opentelemetry-instrumentation-genai-anthropic`` 1.3b0 emits (scope
``opentelemetry.instrumentation.genai.anthropic``): one CLIENT span ``chat {model}`` per
``messages.create`` / ``messages.stream`` with ``gen_ai.operation.name=chat``,
``gen_ai.provider.name=anthropic``, request and response model, ``gen_ai.request.max_tokens``
/ ``stop_sequences`` (``gen_ai.request.stream`` when streaming), ``gen_ai.response.id``,
usage, and ``gen_ai.response.finish_reasons`` normalised (``tool_use`` → ``tool_call``,
``end_turn`` → ``stop``). With ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only``
also ``gen_ai.input.messages`` (the request's messages as parts: ``tool_use`` →
``tool_call`` with parsed arguments, ``tool_result`` → ``tool_call_response`` in the *user*
message that carried it), ``gen_ai.output.messages``, ``gen_ai.system_instructions`` (the
``system`` parameter) and ``gen_ai.tool.definitions`` (``input_schema`` as ``parameters``);
without it none of those four.

What ``openinference-instrumentation-anthropic`` 3.1.0 emits (scope
``openinference.instrumentation.anthropic``): one INTERNAL ``LLM`` span ``messages.create``
(``messages.stream`` when streaming) with ``llm.provider`` / ``llm.system`` = ``anthropic``,
``llm.request.model_name`` and the response's ``llm.model_name``, ``llm.invocation_parameters``
(``max_tokens``, ``stop_sequences``, ``stream``), ``llm.token_count.*``, ``llm.finish_reason``
as the API says it (``tool_use``, ``end_turn``), ``llm.tools.N.tool.json_schema`` (the
Anthropic tool, ``input_schema`` and all), ``input.value`` / ``output.value`` (request and
response as JSON), and flattened messages: the ``system`` parameter as a first message of
role ``system``, each ``tool_result`` block as a message of its own with role ``tool`` and
``tool_call_id``, and a ``tool_use`` block twice: under ``message.tool_calls.K`` and as
``message.contents.J`` (``message_content.type=tool_use`` beside ``tool_call.*``). Hidden
inputs and outputs (``OPENINFERENCE_HIDE_INPUTS`` / ``..._OUTPUTS``) leave ``input.value`` /
``output.value`` as ``__REDACTED__`` and no messages, tools or tool calls; hidden text
(``..._INPUT_TEXT`` / ``..._OUTPUT_TEXT``) keeps the messages with ``__REDACTED__`` text and
keeps the tool calls.

A call that fails (``max_retries=0``): the API answers 500 ``api_error`` or 529
``overloaded_error`` with its error body (the client raises ``anthropic.InternalServerError``,
``anthropic.OverloadedError``, the message ``"Error code: 529 - {body}"``), or streams with HTTP
200 and breaks off with an ``error`` event of type ``overloaded_error`` (the client raises a
plain ``anthropic.APIStatusError`` whose message is the event). The OTel GenAI instrumentation
ends the span in ERROR with the qualified ``error.type`` and the message, no exception event,
and, broken off, the text received as output with the finish reason ``null``. OpenInference:
ERROR, the exception event, the message as description (``"Type: message"`` when the stream
broke off), no ``error.type``, the text received. Traceloop's ``opentelemetry-instrumentation-
anthropic`` 0.62.4 records a refused ``messages.create`` (``anthropic.chat``, ERROR, the bare
class name as ``error.type``, the event) but no span at all of a ``messages.stream`` that fails,
refused or broken off: it starts the span, and its stream wrappers end it only when the stream
ends well. A
stream the application drops unread and unclosed: the OTel GenAI instrumentation ends its span
as OpenAI's does, ERROR ``"abandoned stream"`` (see ``test_real_openai_streaming``).

Mapping fixed on these spans: the ``tool_use`` content entry was read as a bare
``{"type": "tool_use"}`` part beside the call; the Anthropic tools kept ``input_schema`` (now
``parameters``, as every other tool definition); the OpenInference system message and ``tool``
messages are read back into the API's shape (``system`` beside the messages, the results in
the user turn), so an llm step reads the same whichever instrumentation recorded it;
``stop_sequences`` is the ``stop`` parameter.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from openinference.instrumentation.anthropic import AnthropicInstrumentor as OpenInference
from opentelemetry import trace
from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor as Traceloop
from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor as OtelGenAI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_replay import StepKind, Trajectory
from agent_replay.interop import from_otel_spans
from agent_replay.otel import attach
from agent_spans import (
    genai_agent_span,
    genai_tool_span,
    openinference_agent_span,
    openinference_tool_span,
)
from fake_anthropic import (
    API_ERRORS,
    answer,
    error_body,
    failing_mid_stream,
    message,
    refusing,
)
from instrumenting import instrumented
from stored import captured as captured_run
from stored import stored_trajectory

MODEL = "claude-haiku-4-5"
RESPONSE_MODEL = "claude-haiku-4-5-20251001"
SYSTEM = "You are a weather bot."
QUESTION = "Weather in Paris?"
PREAMBLE = "Let me check."
TOOL_RESULT = {"temp_f": 57, "conditions": "rainy"}
OBSERVATION = "rainy, 57F"
ANSWER = "It is rainy and 57F in Paris."
CALL_ID = "toolu_01A09q90qw90lq917835lq9"
SCHEMA = {
    "type": "object",
    "properties": {"location": {"type": "string"}},
    "required": ["location"],
}
TOOLS = [{"name": "get_weather", "description": "Get weather", "input_schema": SCHEMA}]
#: the same tool in an llm step's inputs (the flat OTel form)
TOOL_DEFINITION = {
    "type": "function",
    "name": "get_weather",
    "description": "Get weather",
    "parameters": SCHEMA,
}
CALL = {
    "type": "tool_call",
    "id": CALL_ID,
    "name": "get_weather",
    "arguments": {"location": "Paris"},
}
USER = {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
ASKED = {"role": "assistant", "parts": [{"type": "text", "content": PREAMBLE}, CALL]}
RESULT = {
    "role": "user",
    "parts": [{"type": "tool_call_response", "id": CALL_ID, "response": OBSERVATION}],
}


def fake_anthropic(asynchronous: bool = False) -> Any:
    """An Anthropic client (``AsyncAnthropic`` when ``asynchronous``) whose server asks for
    ``get_weather`` first and answers once the tool result is back; a request with ``stream``
    gets the same message as events."""
    calls = {"n": 0}

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls["n"] += 1
        sent = json.loads(request.content)
        last = sent["messages"][-1]["content"]
        if isinstance(last, list) and any(block["type"] == "tool_result" for block in last):
            content = [{"type": "text", "text": ANSWER}]
            body = message(calls["n"], RESPONSE_MODEL, content, "end_turn", (90, 12))
        else:
            content = [
                {"type": "text", "text": PREAMBLE},
                {
                    "type": "tool_use",
                    "id": CALL_ID,
                    "name": "get_weather",
                    "input": {"location": "Paris"},
                },
            ]
            body = message(calls["n"], RESPONSE_MODEL, content, "tool_use", (57, 15))
        return answer(sent, body)

    transport = httpx2.MockTransport(handler)
    if asynchronous:
        return anthropic.AsyncAnthropic(
            http_client=httpx2.AsyncClient(transport=transport), **CLIENT_OPTIONS
        )
    return client_on(transport)


CLIENT_OPTIONS: dict[str, Any] = {
    "api_key": "sk-ant-test",
    "base_url": "http://127.0.0.1:9",
    "max_retries": 0,
}


def client_on(transport: httpx2.MockTransport) -> anthropic.Anthropic:
    """An ``Anthropic`` client whose API is ``transport``, without retries."""
    return anthropic.Anthropic(http_client=httpx2.Client(transport=transport), **CLIENT_OPTIONS)


def bare_calls() -> None:
    """One call with ``Anthropic`` and one with ``AsyncAnthropic``, outside any agent."""
    hello = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    fake_anthropic().messages.create(**hello)
    asyncio.run(fake_anthropic(asynchronous=True).messages.create(**hello))


# -- the spans each ecosystem makes around the provider calls -----------------------------------


SpanFactory = Callable[..., Any]
#: ``Anthropic``, or ``AsyncAnthropic`` driven by ``asyncio.run``
ASYNCHRONOUS = pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
SPANS = {
    "gen_ai": (functools.partial(genai_agent_span, provider="anthropic"), genai_tool_span),
    "openinference": (openinference_agent_span, openinference_tool_span),
}


def no_span(tracer: trace.Tracer, *call: Any) -> Any:
    return contextlib.nullcontext()


REQUEST = {
    "model": MODEL,
    "max_tokens": 256,
    "system": SYSTEM,
    "tools": TOOLS,
    "stop_sequences": ["END"],
}


def run_weather_agent(
    provider: TracerProvider,
    dialect: str,
    *,
    stream: bool = False,
    tool_span: bool = True,
    asynchronous: bool = False,
) -> str:
    """Ask, run the tool the model asked for (in a tool span unless not ``tool_span``), send
    its result back, return the answer; with ``AsyncAnthropic``, driven by ``asyncio.run``,
    when ``asynchronous``."""
    agent_span, tool_span_factory = SPANS[dialect]
    if not tool_span:
        tool_span_factory = no_span
    tracer = provider.get_tracer("demo.agent")
    if asynchronous:
        return asyncio.run(run_async(tracer, agent_span, tool_span_factory, stream=stream))
    client = fake_anthropic()

    def ask(messages: list[dict[str, Any]]) -> anthropic.types.Message:
        if not stream:
            return client.messages.create(messages=messages, **REQUEST)
        with client.messages.stream(messages=messages, **REQUEST) as s:
            for _ in s:
                pass
            return s.get_final_message()

    with agent_span(tracer):
        messages = answered(tracer, tool_span_factory, ask(opening()))
        return ask(messages).content[0].text


async def run_async(
    tracer: trace.Tracer, agent_span: SpanFactory, tool_span_factory: SpanFactory, *, stream: bool
) -> str:
    client = fake_anthropic(asynchronous=True)

    async def ask(messages: list[dict[str, Any]]) -> anthropic.types.Message:
        if not stream:
            return await client.messages.create(messages=messages, **REQUEST)
        async with client.messages.stream(messages=messages, **REQUEST) as s:
            async for _ in s:
                pass
            return await s.get_final_message()

    with agent_span(tracer):
        messages = answered(tracer, tool_span_factory, await ask(opening()))
        return (await ask(messages)).content[0].text


def opening() -> list[dict[str, Any]]:
    return [{"role": "user", "content": QUESTION}]


def answered(
    tracer: trace.Tracer, tool_span_factory: SpanFactory, first: anthropic.types.Message
) -> list[dict[str, Any]]:
    """Run the tool ``first`` asked for in a tool span; the messages to send next."""
    assert first.stop_reason == "tool_use"
    (call,) = [block for block in first.content if block.type == "tool_use"]
    arguments = json.dumps(call.input)
    with tool_span_factory(tracer, call.name, call.id, arguments, json.dumps(TOOL_RESULT)):
        observation = f"{TOOL_RESULT['conditions']}, {TOOL_RESULT['temp_f']}F"
    return [
        *opening(),
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": observation}],
        },
    ]


@pytest.fixture
def otel_genai(monkeypatch, provider) -> Iterator[Any]:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    with instrumented(OtelGenAI(), provider, bare_calls) as instrumentor:
        yield instrumentor


@pytest.fixture
def otel_genai_no_content(monkeypatch, provider) -> Iterator[Any]:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    with instrumented(OtelGenAI(), provider, bare_calls) as instrumentor:
        yield instrumentor


@pytest.fixture
def openinference(provider) -> Iterator[Any]:
    with instrumented(OpenInference(), provider, bare_calls) as instrumentor:
        yield instrumentor


def captured(
    how: str,
    db_path: Path,
    provider: tuple[TracerProvider, InMemorySpanExporter],
    dialect: str,
    *,
    stream: bool = False,
    asynchronous: bool = False,
    spans: int = 4,  # agent, llm, tool, llm
) -> Trajectory:
    """Run the agent once and read its trajectory ``how``: ``processor`` or ``spans``."""
    tracer_provider, exporter = provider
    processor = attach(db_path, tracer_provider=tracer_provider) if how == "processor" else None
    run = run_weather_agent(tracer_provider, dialect, stream=stream, asynchronous=asynchronous)
    assert run == ANSWER
    assert len(exporter.get_finished_spans()) == spans
    if processor is None:
        return from_otel_spans(exporter.get_finished_spans())
    return stored_trajectory(processor, db_path)


def assert_weather_trajectory(traj: Trajectory, *, llm_name: str) -> None:
    """What both instrumentations must yield: llm → tool → llm, with content and links."""
    assert traj.session_id == "conv_1"
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, llm_name),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, llm_name),
    ]
    first, tool, final = traj.steps
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    assert first.started_ns <= tool.started_ns <= final.started_ns

    # the first request: the system parameter beside the question, the tool offered
    assert first.inputs == {
        "messages": [USER],
        "system": [{"type": "text", "content": SYSTEM}],
        "tools": [TOOL_DEFINITION],
        "model": MODEL,
    }
    # the answer: its text, then the tool_use block as a call with its id and parsed input
    assert first.action == [ASKED]
    assert first.attributes["tool_calls"] == [CALL_ID]
    assert first.attributes["model"] == RESPONSE_MODEL
    assert first.attributes["provider"] == "anthropic"
    assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (57, 15)
    assert first.attributes["parameters"] == {"max_tokens": 256, "stop": ["END"]}

    # the tool step: arguments in, result out, linked to the call that asked for it
    assert tool.inputs == {"arguments": {"location": "Paris"}}
    assert tool.action == TOOL_RESULT
    assert tool.attributes["tool_call_id"] == CALL_ID
    assert tool.attributes["requested_by"] == 0

    # the final request: the conversation so far, the tool_result in the user turn
    assert final.inputs["messages"] == [USER, ASKED, RESULT]
    assert final.inputs["system"] == first.inputs["system"]
    assert final.inputs["tools"] == [TOOL_DEFINITION]
    assert final.action == [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
    assert (final.attributes["input_tokens"], final.attributes["output_tokens"]) == (90, 12)
    assert "tool_calls" not in final.attributes

    report = traj.metadata["capture"]
    assert report["replayable"] is True and report["notes"] == []
    assert report["steps_without_content"] == [] and report["opaque_steps"] == []
    assert report["tool_steps_without_result"] == [] and report["unanswered_tool_calls"] == []
    assert report["synthesized_tool_steps"] == []


@ASYNCHRONOUS
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("how", ["processor", "spans"])
def test_opentelemetry_genai_anthropic_span_only(
    db_path, provider, otel_genai, how, stream, asynchronous
):
    traj = captured(how, db_path, provider, "gen_ai", stream=stream, asynchronous=asynchronous)
    assert_weather_trajectory(traj, llm_name=f"chat {MODEL}")
    first, _, final = traj.steps
    # the instrumentation normalises the stop reasons to the conventions' finish reasons
    assert first.attributes["finish_reasons"] == ["tool_call"]
    assert final.attributes["finish_reasons"] == ["stop"]
    assert {s.attributes["dialect"] for s in traj.steps} == {"gen_ai"}
    assert first.attributes["response_id"] == "msg_01"
    llm_spans = [s for s in provider[1].get_finished_spans() if s.name == f"chat {MODEL}"]
    assert [s.attributes.get("gen_ai.request.stream", False) for s in llm_spans] == [stream] * 2
    assert traj.task == {"messages": [USER], "system": first.inputs["system"]}


def structure_without_content(traj: Trajectory) -> tuple[Any, ...]:
    """llm, tool, llm with no content on the llm steps; what is not content survives (model,
    usage; the tool span is the app's, whole). Returns the three steps."""
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    first, tool, final = traj.steps
    for step in (first, final):
        assert step.inputs is None and step.action is None
    assert first.attributes["model"] == RESPONSE_MODEL
    assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (57, 15)
    assert tool.action == TOOL_RESULT and tool.attributes["tool_call_id"] == CALL_ID
    return first, tool, final


@pytest.mark.parametrize("how", ["processor", "spans"])
def test_opentelemetry_genai_anthropic_without_content_says_so(
    db_path, provider, otel_genai_no_content, how
):
    traj = captured(how, db_path, provider, "gen_ai")
    first, tool, _ = structure_without_content(traj)
    assert first.attributes["finish_reasons"] == ["tool_call"]
    # no output messages, so no call to link the tool step to
    assert "tool_calls" not in first.attributes and "requested_by" not in tool.attributes
    report = traj.metadata["capture"]
    assert report["steps_without_content"] == [0, 2]
    assert report["replayable"] is False
    assert any("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in n for n in report["notes"])


@ASYNCHRONOUS
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("how", ["processor", "spans"])
def test_openinference_anthropic(db_path, provider, openinference, how, stream, asynchronous):
    traj = captured(
        how, db_path, provider, "openinference", stream=stream, asynchronous=asynchronous
    )
    assert_weather_trajectory(traj, llm_name="messages.stream" if stream else "messages.create")
    first, _, final = traj.steps
    # finish reasons as the API says them
    assert first.attributes["finish_reasons"] == ["tool_use"]
    assert final.attributes["finish_reasons"] == ["end_turn"]
    assert (first.attributes["total_tokens"], final.attributes["total_tokens"]) == (72, 102)
    assert {s.attributes["dialect"] for s in traj.steps} == {"openinference"}
    assert traj.task == QUESTION  # the AGENT span's input.value

    # regression: the spans really are in OpenInference's flattened shape
    (llm_span, *_) = [
        s for s in provider[1].get_finished_spans() if s.attributes.get("llm.provider")
    ]
    attrs = llm_span.attributes
    assert attrs["llm.input_messages.0.message.role"] == "system"
    contents = "llm.output_messages.0.message.contents.1"
    assert attrs[f"{contents}.message_content.type"] == "tool_use"
    assert attrs[f"{contents}.tool_call.id"] == CALL_ID
    assert attrs["llm.output_messages.0.message.tool_calls.0.tool_call.id"] == CALL_ID
    assert json.loads(attrs["llm.tools.0.tool.json_schema"])["input_schema"] == SCHEMA
    (last_llm_span,) = [
        s
        for s in provider[1].get_finished_spans()
        if s.attributes.get("llm.input_messages.3.message.role") == "tool"
    ]
    assert last_llm_span.attributes["llm.input_messages.3.message.tool_call_id"] == CALL_ID


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("hide", ["inputs_outputs", "text"])
def test_openinference_anthropic_hidden_content_is_reported(
    db_path, provider, monkeypatch, how, hide
):
    if hide == "text":
        monkeypatch.setenv("OPENINFERENCE_HIDE_INPUT_TEXT", "true")
        monkeypatch.setenv("OPENINFERENCE_HIDE_OUTPUT_TEXT", "true")
    else:
        monkeypatch.setenv("OPENINFERENCE_HIDE_INPUTS", "true")
        monkeypatch.setenv("OPENINFERENCE_HIDE_OUTPUTS", "true")
    with instrumented(
        OpenInference(), provider, bare_calls
    ):  # reads the settings when instrumenting
        traj = captured(how, db_path, provider, "openinference")
    first, tool, _ = structure_without_content(traj)  # the placeholder is not content
    if hide == "text":
        # hidden text keeps the tool calls: the tool step is still linked to its call
        assert first.attributes["tool_calls"] == [CALL_ID]
        assert tool.attributes["requested_by"] == 0
    else:
        assert "tool_calls" not in first.attributes and "requested_by" not in tool.attributes
    report = traj.metadata["capture"]
    assert report["steps_without_content"] == [0, 2]
    assert report["replayable"] is False
    assert sum("OPENINFERENCE_HIDE_INPUTS" in note for note in report["notes"]) == 2
    assert any("no message content was captured" in note for note in report["notes"])


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_both_instrumentations_yield_the_same_llm_steps(tmp_path, monkeypatch, stream):
    """Replay matches steps by content, so an llm call must read the same whichever
    instrumentation recorded it: inputs, outputs and usage alike (finish reasons are kept
    as each wrote them, and only OpenInference counts total tokens)."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    results = []
    for number, (instrumentor, dialect) in enumerate(
        ((OtelGenAI(), "gen_ai"), (OpenInference(), "openinference"))
    ):
        tracer_provider = TracerProvider()
        exporter = InMemorySpanExporter()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        with instrumented(instrumentor, (tracer_provider, exporter), bare_calls):
            results.append(
                captured(
                    "processor",
                    tmp_path / f"{number}.sqlite",
                    (tracer_provider, exporter),
                    dialect,
                    stream=stream,
                )
            )
        tracer_provider.shutdown()
    otel, oi = results
    for index in (0, 2):
        assert otel.steps[index].inputs == oi.steps[index].inputs
        assert otel.steps[index].input_hash == oi.steps[index].input_hash
        assert otel.steps[index].action == oi.steps[index].action
        for key in ("model", "provider", "input_tokens", "output_tokens", "parameters"):
            assert otel.steps[index].attributes[key] == oi.steps[index].attributes[key], key
    assert otel.steps[1].inputs == oi.steps[1].inputs and otel.steps[1].action == oi.steps[1].action


def test_a_user_turn_of_several_tool_results_reads_the_same_both_ways(monkeypatch):
    """Two parallel calls answered in one user turn (one result a string, one a list of
    blocks) followed by text: the OTel instrumentation records the turn as it was sent,
    OpenInference as two ``tool`` messages and a user message; both read as the turn."""
    paris = {
        "type": "tool_use",
        "id": "toolu_paris",
        "name": "get_weather",
        "input": {"location": "Paris"},
    }
    rome = {
        "type": "tool_use",
        "id": "toolu_rome",
        "name": "get_weather",
        "input": {"location": "Rome"},
    }
    rome_blocks = [{"type": "text", "text": "sunny, 75F"}]
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": [paris, rome]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_paris", "content": OBSERVATION},
                {"type": "tool_result", "tool_use_id": "toolu_rome", "content": rome_blocks},
                {"type": "text", "text": "Answer in one line."},
            ],
        },
    ]
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    steps = []
    for instrumentor in (OtelGenAI(), OpenInference()):
        tracer_provider = TracerProvider()
        exporter = InMemorySpanExporter()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        with instrumented(instrumentor, (tracer_provider, exporter), bare_calls):
            fake_anthropic().messages.create(
                model=MODEL, max_tokens=256, system=SYSTEM, tools=TOOLS, messages=messages
            )
            (step,) = from_otel_spans(exporter.get_finished_spans()).steps
            steps.append(step)
        tracer_provider.shutdown()
    otel, oi = steps
    calls = [
        {
            "type": "tool_call",
            "id": f"toolu_{city}",
            "name": "get_weather",
            "arguments": {"location": city.title()},
        }
        for city in ("paris", "rome")
    ]
    assert otel.inputs["messages"] == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris and Rome?"}]},
        {"role": "assistant", "parts": calls},
        {
            "role": "user",
            "parts": [
                {"type": "tool_call_response", "id": "toolu_paris", "response": OBSERVATION},
                {"type": "tool_call_response", "id": "toolu_rome", "response": rome_blocks},
                {"type": "text", "content": "Answer in one line."},
            ],
        },
    ]
    assert oi.inputs == otel.inputs
    assert (
        oi.action
        == otel.action
        == [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
    )


@pytest.mark.parametrize("dialect", ["gen_ai", "openinference"])
def test_without_a_tool_span_the_tool_step_is_rebuilt_from_the_tool_result(
    provider, monkeypatch, dialect
):
    """Neither instrumentation makes a tool span: an agent that records none still gets its
    tool step, from the ``tool_result`` block the next request sent back."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    instrumentor = OtelGenAI() if dialect == "gen_ai" else OpenInference()
    with instrumented(instrumentor, provider, bare_calls):
        assert run_weather_agent(provider[0], dialect, tool_span=False) == ANSWER
        traj = from_otel_spans(provider[1].get_finished_spans())
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    tool = traj.steps[1]
    assert tool.name == "get_weather" and tool.agent == "weather_agent"
    assert tool.inputs == {"arguments": {"location": "Paris"}}
    assert tool.action == OBSERVATION
    assert tool.attributes["requested_by"] == 0 and tool.attributes["tool_call_id"] == CALL_ID
    report = traj.metadata["capture"]
    assert report["synthesized_tool_steps"] == [1] and report["unanswered_tool_calls"] == []
    assert report["replayable"] is True


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("outer", ["gen_ai", "openinference"])
def test_both_instrumentations_at_once_make_one_step_per_call(
    db_path, provider, monkeypatch, how, outer
):
    """``opentelemetry-instrument`` loads every installed instrumentor, both of these
    included: each call is then recorded twice, one span inside the other (the one
    instrumented last is outside), and the two spans are one llm step."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    instrumentors = [OtelGenAI(), OpenInference()]
    if outer == "gen_ai":
        instrumentors.reverse()
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider[0])
    try:
        traj = captured(how, db_path, provider, "gen_ai", spans=6)
    finally:
        for instrumentor in reversed(instrumentors):
            instrumentor.uninstrument()
    name = f"chat {MODEL}" if outer == "gen_ai" else "messages.create"
    assert_weather_trajectory(traj, llm_name=name)
    dialects = {"gen_ai", "openinference"}
    assert [set(s.attributes["dialect"].split(",")) for s in traj.steps] == [
        dialects,
        {"gen_ai"},
        dialects,
    ]


# -- failed calls ---------------------------------------------------------------------------------

GAVE_UP = "The weather service is busy."
PARTIAL = ANSWER[:16]  # the text of the two deltas before the error event
#: how the call fails: the API, whether the app streams (``messages.stream``) and gives up when
#: the client raises, and what the client raises (with its message)
FAILURES: dict[str, tuple[httpx2.MockTransport, bool, bool, type[Exception], str]] = {
    # messages.create answered 500: the error ends the run
    "refused_500": (
        refusing(500),
        False,
        False,
        anthropic.InternalServerError,
        f"Error code: 500 - {error_body(500)}",
    ),
    # messages.stream answered 529 before any event: the agent gives up
    "refused_529": (
        refusing(529),
        True,
        True,
        anthropic.OverloadedError,
        f"Error code: 529 - {error_body(529)}",
    ),
    # messages.stream breaks off with an overloaded_error event (HTTP 200): the run ends
    "overloaded_mid_stream": (
        failing_mid_stream(
            message(1, RESPONSE_MODEL, [{"type": "text", "text": ANSWER}], "end_turn", (90, 12)),
            keep=4,
            status=529,
        ),
        True,
        False,
        anthropic.APIStatusError,
        str({"type": "error", "error": API_ERRORS[529]}),
    ),
}
INSTRUMENTORS = {"gen_ai": OtelGenAI, "openinference": OpenInference, "traceloop": Traceloop}
#: each instrumentation's span of a call, made with ``messages.create`` or ``messages.stream``
CALL_SPANS = {
    "gen_ai": (f"chat {MODEL}", f"chat {MODEL}"),
    "openinference": ("messages.create", "messages.stream"),
    "traceloop": ("anthropic.chat", "anthropic.chat"),
}


def ask_once(
    tracer_provider: TracerProvider, vendor: str, api: httpx2.MockTransport, *, stream: bool
) -> str:
    """The weather question, asked once inside the agent's span (OpenInference's agent span
    for OpenInference, the GenAI conventions' otherwise); the answer, or ``GAVE_UP`` when the
    API refuses the call as overloaded (``anthropic.OverloadedError``, which the overload
    event of a stream that broke off is not: that is a plain ``APIStatusError``)."""
    agent_span = SPANS["openinference" if vendor == "openinference" else "gen_ai"][0]
    client = client_on(api)
    with agent_span(tracer_provider.get_tracer("demo.agent")):
        try:
            if stream:
                with client.messages.stream(messages=opening(), **REQUEST) as streamed:
                    return streamed.get_final_message().content[0].text
            return client.messages.create(messages=opening(), **REQUEST).content[0].text
        except anthropic.OverloadedError:
            return GAVE_UP


def assert_failed_call(
    traj: Trajectory, calls: list[Any], vendor: str, failure: str, error: dict[str, str]
) -> None:
    """The call's span as ``vendor`` writes it when the call fails ``failure`` 's way, and the
    failed llm step read from it."""
    _, stream, _, raised, described = FAILURES[failure]
    # what each instrumentation writes on the call's span
    (span,) = calls
    assert span.name == CALL_SPANS[vendor][stream]
    # OpenInference describes an error in the stream as "Type: message", a refusal as its message
    assert (span.status.status_code, span.status.description) == (
        StatusCode.ERROR,
        f"{raised.__name__}: {described}"
        if vendor == "openinference" and failure == "overloaded_mid_stream"
        else described,
    )
    events = [e.attributes for e in span.events if e.name == "exception"]
    if vendor == "gen_ai":  # the type qualified, no exception event
        assert span.attributes["error.type"] == error["type"] and events == []
    else:
        (event,) = events
        assert (event["exception.type"], event["exception.message"]) == (
            error["type"],
            described,
        )
        if vendor == "traceloop":  # the bare class name as error.type
            assert span.attributes["error.type"] == raised.__name__
        else:
            assert "error.type" not in span.attributes

    # one error whatever wrote it; the text received before a stream broke off is the output
    (step,) = traj.steps
    assert (step.kind, step.name, step.agent) == (
        StepKind.LLM,
        CALL_SPANS[vendor][stream],
        "weather_agent",
    )
    assert step.error == error
    assert step.inputs == {
        "messages": [USER],
        "system": [{"type": "text", "content": SYSTEM}],
        "tools": [TOOL_DEFINITION],
        "model": MODEL,
    }
    if failure == "overloaded_mid_stream":
        assert step.action == [
            {"role": "assistant", "parts": [{"type": "text", "content": PARTIAL}]}
        ]
        assert step.attributes["model"] == RESPONSE_MODEL
    else:
        assert step.action is None


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("vendor", list(INSTRUMENTORS))
def test_a_failed_anthropic_call_is_a_failed_llm_step(
    db_path, provider, monkeypatch, vendor, failure, how
):
    """The Messages API refuses the call with Anthropic's error body (500 ``api_error``, 529
    ``overloaded_error``), or breaks the stream off with an ``overloaded_error`` event, and the
    client does not retry. The instrumentation that records the call ends its span in ERROR
    with what the client raised; Traceloop's records no span of a streamed call that failed."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    api, stream, gives_up, raised, described = FAILURES[failure]
    with instrumented(INSTRUMENTORS[vendor](), provider, bare_calls):
        traj = captured_run(
            how,
            db_path,
            provider,
            lambda: ask_once(provider[0], vendor, api, stream=stream),
            expect=GAVE_UP if gives_up else raised,
        )
        spans = provider[1].get_finished_spans()
    error = {"type": f"anthropic.{raised.__name__}", "message": described}
    calls = [s for s in spans if s.instrumentation_scope.name != "demo.agent"]

    if vendor == "traceloop" and stream:
        # its stream manager wrapper starts the span and never ends it when the call fails:
        # the agent, which holds no step, is the one step
        assert calls == []
        (step,) = traj.steps
        assert (step.kind, step.name) == (StepKind.AGENT, "weather_agent")
        assert step.error == (None if gives_up else error)
        # the agent's span holds no content: the report says nothing was captured
        assert traj.metadata["capture"]["steps_without_content"] == [0]
    else:
        assert_failed_call(traj, calls, vendor, failure, error)
        # the partial output's finish reason is null (gen_ai) or absent: nothing says more
        report = traj.metadata["capture"]
        assert report["notes"] == [] and report["steps_without_content"] == []
    if gives_up:
        assert traj.outcome is None  # the agent answered: nothing says the run failed
    else:
        assert traj.outcome.failed is True and traj.outcome.error == error
    traj.verify()
