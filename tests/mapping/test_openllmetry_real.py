"""The ``openllmetry`` dialect (with the GenAI dialect it leans on) on the spans Traceloop's real
OpenLLMetry instrumentations emit, offline.

Traceloop's ``opentelemetry-instrumentation-openai``, ``-anthropic`` and ``-langchain`` 0.62.4
(``opentelemetry-semantic-conventions-ai`` 0.5.1) instrument the real ``openai`` 3.57 and
``anthropic`` 2.14 clients, whose HTTP transport is an ``httpx2.MockTransport`` (both use httpx2),
and real LangChain runs (langchain-core 1.8.3, langgraph 1.2.24, langchain 1.5.2,
langchain-openai 1.7.4) driven by the scripted model and tool of ``langchain_weather``. The
spans are read the two ways users read them: ``attach`` into a SQLite store, and
``from_otel_spans`` (or the OTLP import, when log records come with them). The legacy
flattened form is read from spans recorded from the real OpenAI instrumentation 0.54.0 in a
scratch environment (``data/openllmetry/record.py``: 0.54 and 0.62 cannot be installed
together), imported into a SQLite store and through ``from_otel_spans``. The traceloop-sdk
decorators are not installed (the dialect's SDK entity spans are tested on hand-made spans).

What 0.62.4 emits:

* OpenAI (scope ``opentelemetry.instrumentation.openai.v1``): one ``openai.chat`` span (CLIENT)
  per call with ``gen_ai.operation.name=chat``, ``gen_ai.provider.name=openai``, the request
  model and parameters, ``gen_ai.is_streaming``, ``gen_ai.openai.api_base``, the response
  model and id, ``gen_ai.response.finish_reasons`` normalised (``tool_call``, ``stop``) and
  ``gen_ai.usage.{input,output,total}_tokens``. Content is on by default
  (``TRACELOOP_TRACE_CONTENT`` unset means ``true``): ``gen_ai.input.messages`` /
  ``gen_ai.output.messages`` / ``gen_ai.tool.definitions`` as OTel parts JSON, the system
  message kept as a message. There are no flattened ``gen_ai.prompt.N.*`` keys and no
  ``llm.request.type`` any more (that form ended with 0.54). ``use_attributes=False`` moves the
  messages to 1.28-style log records (``gen_ai.{system,user,assistant,tool}.message``,
  ``gen_ai.choice``), losing the tool message's call id and the tool definitions, and writing a
  choice's ``tool_calls`` beside its ``message``. ``TRACELOOP_TRACE_CONTENT=false``: the same
  spans without any content key.
* OpenAI 0.54.0, the last legacy release (same scope, version 0.54.0): ``llm.request.type``,
  ``gen_ai.system``, ``gen_ai.prompt.N.{role,content,tool_call_id,tool_calls.K.*}``,
  ``gen_ai.completion.N.{role,content,finish_reason,tool_calls.K.*}`` (the raw finish reason,
  ``tool_calls``), ``llm.request.functions.N.{name,description,parameters}`` (the schema as
  JSON text), ``llm.usage.total_tokens``, ``llm.is_streaming``, ``llm.headers``; no
  ``gen_ai.operation.name``. ``TRACELOOP_TRACE_CONTENT=false`` drops the prompt, completion
  and function keys.
* Anthropic (scope ``opentelemetry.instrumentation.anthropic``): one ``anthropic.chat`` span
  per call; the ``system`` parameter as ``gen_ai.system_instructions``; content blocks as parts
  (``tool_use`` → ``tool_call``, ``tool_result`` → ``tool_call_response`` inside a ``user``
  message, ids kept); ``gen_ai.tool.definitions`` in Anthropic's shape (``input_schema``).
  Through ``messages.stream`` the same, but ``gen_ai.usage.output_tokens`` adds
  ``message_delta``'s count to ``message_start``'s, though the former is already the total:
  one token too many with the API's ``message_start`` (``output_tokens: 1``).
* LangChain (scope ``opentelemetry.instrumentation.langchain``): one span per run. The run
  without a parent is ``{name}.workflow`` (``traceloop.span.kind=workflow`` and
  ``gen_ai.operation.name=invoke_agent`` with ``gen_ai.agent.name``); nested chains are
  ``execute_task {name}`` (``task``: sequences, prompt templates, parsers, graph nodes); a chat
  model is ``{class}.chat`` (CLIENT) with its content in ``gen_ai.*`` (the system message as
  ``gen_ai.system_instructions``), LangChain's ``ls_*`` metadata as
  ``traceloop.association.properties.*`` and ``gen_ai.request.model = "unknown"`` when the
  model's parameters name none; a tool is ``execute_tool {name}`` whose
  ``traceloop.entity.input`` (also ``gen_ai.tool.call.arguments``) is the callback's arguments
  ``{"input_str", "tags", "metadata", "inputs", "kwargs": {..., "tool_call_id"}}`` and whose
  output is ``{"output": <ToolMessage>, "kwargs"}``, with no ``gen_ai.tool.call.id``; a
  retriever is ``vector_db_retrieve {name}``. LangGraph adds an outer ``invoke_agent {name}``
  span carrying the ``thread_id`` as ``gen_ai.conversation.id``. A chat model's span is not
  made current: the instrumentation sets LangChain's suppression key instead, so Traceloop's
  OpenAI instrumentor writes no span for a ``ChatOpenAI`` call.

Failures, here for the three OpenAI instrumentations (Traceloop's, OpenInference's
``openinference-instrumentation-openai`` 0.1.66 and OTel's ``opentelemetry-instrumentation-genai-
openai`` 1.3b0) and Traceloop's LangChain instrumentation:

* A refused call (the API answers 500 or 429, ``max_retries=0``): the call's span has status
  ERROR. Traceloop: ``error.type`` the bare class name (``InternalServerError``), the
  exception's message as description, an ``exception`` event with the qualified type
  (``openai.InternalServerError``). OpenInference: no ``error.type``, ``"Type: message"`` as
  description, the event. OTel: ``error.type`` qualified, the message as description, no
  event. A call the client retried (429, then 200, ``max_retries=2``) is one span that did not
  fail: the instrumentations wrap the client's method, not its HTTP attempts.
* A LangChain tool that raises: its ``execute_tool`` span and the workflow's end in ERROR
  with ``error.type``, the message as description, the event, ``gen_ai.task.status=failure``
  and no output. A ``ToolException`` LangChain handles (``handle_tool_error``) is a tool run
  that returned: status UNSET, ``gen_ai.task.status=success``, the ``ToolMessage`` of status
  ``error`` as its output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import HumanMessage
from langchain_core.retrievers import BaseRetriever
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_replay import StepKind, Trajectory
from agent_replay.ingest import load_many
from agent_replay.mapping.dialects.openllmetry import LANGCHAIN_SCOPE, NO_CONTENT
from agent_replay.otel import attach
from fake_anthropic import answer, message
from fake_openai import API_ERRORS, refusing, weather_api
from instrumenting import openai_instrumentor, uninstrument
from langchain_weather import (
    SERVED_MODEL,
    assert_broken_weather,
    broken_agent,
    chat_openai,
    get_weather,
    scripted_model,
    weather_agent,
)
from stored import captured, recorded, stored_trajectory
from weather_run import (
    ANSWER,
    CALL_PART,
    QUESTION,
    SYSTEM,
    TIMED_OUT,
    TOOL,
    TOOL_DEFINITION,
    assert_weather_trajectory,
    text,
)

CLAUDE = "claude-sonnet-4-6"
TOOL_USE_ID = "toolu_01"
RESULT = "rainy in Paris"
GAVE_UP = "The weather service is down."
USER = text("user", QUESTION)
SYSTEM_PARTS = [{"type": "text", "content": SYSTEM}]
Provider = tuple[TracerProvider, InMemorySpanExporter]


# -- the apps ----------------------------------------------------------------------------------


def openai_client(
    api: httpx2.MockTransport | None = None, *, max_retries: int = 0
) -> openai.OpenAI:
    """The OpenAI client on ``api`` (the weather run's API by default)."""
    return openai.OpenAI(
        api_key="sk-test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=api or weather_api(SERVED_MODEL)),
        max_retries=max_retries,
    )


def anthropic_api(request: httpx2.Request) -> httpx2.Response:
    """The Messages API of the weather run: a ``tool_use`` block first, then the answer; as
    events when the request streams."""
    sent = json.loads(request.content)
    content = sent["messages"][-1]["content"]
    if isinstance(content, list) and content[-1]["type"] == "tool_result":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": ANSWER}]
        stop, usage = "end_turn", (20, 6)
    else:
        blocks = [
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": TOOL_USE_ID,
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ]
        stop, usage = "tool_use", (12, 5)
    body = message(len(sent["messages"]), f"{CLAUDE}-20260101", blocks, stop, usage)
    return answer(sent, body)


def anthropic_client() -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-ant-test",
        base_url="http://127.0.0.1:9",
        http_client=httpx2.Client(transport=httpx2.MockTransport(anthropic_api)),
        max_retries=0,
    )


def agent_span(tracer: trace.Tracer) -> Any:
    """The app's own agent span (OpenLLMetry's SDK would make one; it is not installed)."""
    return tracer.start_as_current_span(
        "invoke_agent weather_agent",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"},
    )


def tool_span(tracer: trace.Tracer, call_id: str, arguments: dict[str, Any]) -> Any:
    return tracer.start_as_current_span(
        "execute_tool get_weather",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps(arguments),
            "gen_ai.tool.call.result": RESULT,
        },
    )


def run_openai(
    tracer_provider: TracerProvider, client: openai.OpenAI | None = None, *, give_up: bool = False
) -> str:
    """The weather agent on the OpenAI client: a tool call, the tool, the answer. An API error
    ends the run, or (``give_up``) the agent catches it and answers ``GAVE_UP``."""
    client, tracer = client or openai_client(), tracer_provider.get_tracer("weather.app")
    with agent_span(tracer):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ]
        try:
            first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=[TOOL])
        except openai.APIStatusError:
            if give_up:
                return GAVE_UP
            raise
        (call,) = first.choices[0].message.tool_calls
        with tool_span(tracer, call.id, json.loads(call.function.arguments)):
            pass
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": RESULT},
        ]
        final = client.chat.completions.create(model="gpt-4o", messages=messages, tools=[TOOL])
    return final.choices[0].message.content


def run_anthropic(tracer_provider: TracerProvider, stream: bool = False) -> str:
    """The weather agent on the Anthropic client: ``tool_use``, the tool, ``tool_result``;
    through ``messages.stream`` when ``stream``."""
    client, tracer = anthropic_client(), tracer_provider.get_tracer("weather.app")
    function = TOOL["function"]
    tools = [
        {
            "name": function["name"],
            "description": function["description"],
            "input_schema": function["parameters"],
        }
    ]

    def ask(messages: list[dict[str, Any]]) -> anthropic.types.Message:
        request = {"model": CLAUDE, "max_tokens": 256, "system": SYSTEM, "tools": tools}
        if not stream:
            return client.messages.create(messages=messages, **request)
        with client.messages.stream(messages=messages, **request) as streamed:
            return streamed.get_final_message()

    with agent_span(tracer):
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        first = ask(messages)
        (call,) = [block for block in first.content if block.type == "tool_use"]
        with tool_span(tracer, call.id, call.input):
            pass
        messages += [
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": RESULT}],
            },
        ]
        final = ask(messages)
    return final.content[0].text


def run_graph(model: Any) -> str:
    """LangChain's ``create_agent`` (a LangGraph graph) on thread ``t1``."""
    agent = create_agent(model, [get_weather], system_prompt=SYSTEM, name="weather_agent")
    state = agent.invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"configurable": {"thread_id": "t1"}}
    )
    return state["messages"][-1].content


class ForecastRetriever(BaseRetriever):
    """A real LangChain retriever over one document."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [Document("Paris is rainy.", metadata={"source": "forecast"})]


# -- instrumenting and reading -----------------------------------------------------------------


@pytest.fixture
def traceloop(provider: Provider) -> Iterator[Callable[..., None]]:
    """``traceloop(*instrumentors, **options)`` instruments for this test only; afterwards no
    client or LangChain run may still emit a span."""
    started: list[Any] = []

    def start(*instrumentors: Any, **options: Any) -> None:
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=provider[0], **options)
            started.append(instrumentor)

    yield start
    for instrumentor in started:
        uninstrument(instrumentor)  # with Traceloop's unwrap made to work
    provider[1].clear()
    assert run_openai(provider[0]) == ANSWER
    assert run_anthropic(provider[0]) == ANSWER
    assert weather_agent.invoke(QUESTION) == ANSWER
    leaked = [s.name for s in provider[1].get_finished_spans() if not s.name.startswith("exec")]
    assert leaked == ["invoke_agent weather_agent"] * 2, f"still instrumented: {leaked}"


def spans_named(provider: Provider, name: str) -> list[Any]:
    return [s for s in provider[1].get_finished_spans() if s.name == name]


HOW = pytest.mark.parametrize("how", ["processor", "spans"])


# -- OpenAI ------------------------------------------------------------------------------------


@HOW
def test_openai_chat_spans_make_the_weather_trajectory(db_path, provider, traceloop, how):
    traceloop(OpenAIInstrumentor())
    traj = captured(how, db_path, provider, lambda: run_openai(provider[0]))

    # what 0.62.4 writes: the GenAI conventions' content keys, no flattened legacy keys
    chats = spans_named(provider, "openai.chat")
    assert len(chats) == 2
    for span in chats:
        assert span.instrumentation_scope.name == "opentelemetry.instrumentation.openai.v1"
        assert {"gen_ai.input.messages", "gen_ai.output.messages"} <= set(span.attributes)
        assert "llm.request.type" not in span.attributes
        assert not any(
            key.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for key in span.attributes
        )
    assert chats[0].attributes["gen_ai.response.finish_reasons"] == ("tool_call",)

    assert_weather_trajectory(
        traj, llm_names=("openai.chat", "openai.chat"), tools=[TOOL_DEFINITION]
    )
    first, _, final = traj.steps
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    assert (first.attributes["model"], first.attributes["provider"]) == (SERVED_MODEL, "openai")
    assert first.attributes["finish_reasons"] == ["tool_call"]
    assert final.attributes["finish_reasons"] == ["stop"]
    assert {"openllmetry", "gen_ai"} <= set(first.attributes["dialect"].split(","))
    assert traj.task == {"messages": [text("system", SYSTEM), USER]}


@HOW
def test_openai_with_trace_content_false_is_reported(
    db_path, provider, traceloop, monkeypatch, how
):
    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "false")
    traceloop(OpenAIInstrumentor())
    traj = captured(how, db_path, provider, lambda: run_openai(provider[0]))
    for span in spans_named(provider, "openai.chat"):
        assert not any(key.startswith("gen_ai.input") for key in span.attributes)
        assert "gen_ai.output.messages" not in span.attributes
        assert "gen_ai.tool.definitions" not in span.attributes

    first, tool, _ = without_content(traj)
    # what is not content survives: model, usage, finish reasons; the app's tool span is whole
    assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (12, 5)
    assert first.attributes["finish_reasons"] == ["tool_call"]
    assert tool.inputs == {"arguments": {"city": "Paris"}} and tool.action == RESULT
    assert tool.attributes["tool_call_id"] == "c1"
    assert traj.task == {"root_span": "invoke_agent weather_agent"}

    report = traj.metadata["capture"]
    assert report["replayable"] is False and report["steps_without_content"] == [0, 2]
    assert f"step 0: {NO_CONTENT}" in report["notes"]
    assert f"step 2: {NO_CONTENT}" in report["notes"]
    assert "TRACELOOP_TRACE_CONTENT=false" in NO_CONTENT


def test_openai_use_attributes_false_writes_log_records(db_path, provider, traceloop):
    """The messages go to the logs signal: the span processor sees none of them (and says
    so); the OTLP import of the spans with their log records reads them."""
    logger_provider = LoggerProvider()
    logs = InMemoryLogRecordExporter()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    traceloop(OpenAIInstrumentor(use_attributes=False), logger_provider=logger_provider)
    processor = attach(db_path, tracer_provider=provider[0])
    assert run_openai(provider[0]) == ANSWER

    records = logs.get_finished_logs()
    assert [r.log_record.event_name for r in records] == [
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.choice",
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
    ]
    choice = records[2].log_record.body
    assert choice["message"] == {"content": None} and choice["tool_calls"][0]["id"] == "c1"
    assert records[6].log_record.body == {"content": RESULT}  # no call id

    stored = stored_trajectory(processor, db_path)
    assert [s.inputs for s in stored.steps] == [None, {"arguments": {"city": "Paris"}}, None]
    assert stored.metadata["capture"]["steps_without_content"] == [0, 2]
    assert f"step 0: {NO_CONTENT}" in stored.metadata["capture"]["notes"]

    spans = encode_spans(provider[1].get_finished_spans()).SerializeToString()
    result = load_many([spans, encode_logs(records).SerializeToString()])
    assert result.warnings == []
    (traj,) = result.trajectories
    first, tool, final = traj.steps
    assert first.inputs == {"messages": [text("system", SYSTEM), USER], "model": "gpt-4o"}
    # regression: the choice's tool_calls sit beside its message
    assert first.action == [{"role": "assistant", "parts": [CALL_PART]}]
    assert (tool.attributes["requested_by"], tool.attributes["tool_call_id"]) == (0, "c1")
    assert final.inputs["messages"] == [
        text("system", SYSTEM),
        USER,
        {"role": "assistant", "parts": [CALL_PART]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "response": RESULT}]},
    ]
    assert final.action == [text("assistant", ANSWER)]
    report = traj.metadata["capture"]
    assert report["replayable"] is True and report["notes"] == []
    assert report["log_records"] == 8


# OpenLLMetry's legacy flattened form, recorded from the real 0.54.0 (data/openllmetry/record.py)
RECORDED = Path(__file__).parent / "data" / "openllmetry"


def read_recording(mode: str, how: str, db_path: Path) -> Trajectory:
    return recorded(RECORDED / f"{mode}.jsonl", how, db_path)


@pytest.mark.parametrize("how", ["import", "spans"])
def test_openai_0_54_legacy_flattened_spans_read_as_0_62_ones(
    db_path, tmp_path, provider, traceloop, how
):
    request = json.loads((RECORDED / "legacy_0_54.jsonl").read_text())
    (scope,) = [
        s["scope"]
        for r in request["resourceSpans"]
        for s in r["scopeSpans"]
        if "version" in s["scope"]
    ]
    assert scope == {"name": "opentelemetry.instrumentation.openai.v1", "version": "0.54.0"}
    keys = {
        a["key"]
        for r in request["resourceSpans"]
        for s in r["scopeSpans"]
        for span in s["spans"]
        for a in span["attributes"]
    }
    assert {
        "llm.request.type",
        "gen_ai.prompt.3.tool_call_id",
        "llm.request.functions.0.parameters",
    } <= keys
    assert "gen_ai.input.messages" not in keys and "gen_ai.operation.name" in keys  # the app's

    legacy = read_recording("legacy_0_54", how, db_path)
    # regression: the offered tool's parameters arrive as JSON text
    assert_weather_trajectory(
        legacy, llm_names=("openai.chat", "openai.chat"), tools=[TOOL_DEFINITION]
    )
    first = legacy.steps[0]
    assert {s.agent for s in legacy.steps} == {"weather_agent"}
    assert first.attributes["dialect"] == "openllmetry"
    assert (first.attributes["model"], first.attributes["provider"]) == (SERVED_MODEL, "openai")
    assert first.attributes["finish_reasons"] == ["tool_calls"]  # 0.62 writes "tool_call"

    # the same weather run through 0.62.4 reads the same, call for call
    traceloop(OpenAIInstrumentor())
    current = captured(
        "spans", tmp_path / "current.sqlite", provider, lambda: run_openai(provider[0])
    )
    for index in (0, 2):
        assert legacy.steps[index].inputs == current.steps[index].inputs
        assert legacy.steps[index].action == current.steps[index].action


@pytest.mark.parametrize("how", ["import", "spans"])
def test_openai_0_54_without_content_is_reported(db_path, how):
    traj = read_recording("legacy_0_54_no_content", how, db_path)
    _, _, final = without_content(traj)
    assert (final.attributes["input_tokens"], final.attributes["output_tokens"]) == (20, 6)
    report = traj.metadata["capture"]
    assert report["replayable"] is False and report["steps_without_content"] == [0, 2]
    assert [n for n in report["notes"] if n.endswith(NO_CONTENT)] == [
        f"step 0: {NO_CONTENT}",
        f"step 2: {NO_CONTENT}",
    ]


# -- Anthropic ---------------------------------------------------------------------------------


@HOW
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_anthropic_content_blocks_become_parts(db_path, provider, traceloop, stream, how):
    traceloop(AnthropicInstrumentor())
    traj = captured(how, db_path, provider, lambda: run_anthropic(provider[0], stream))
    chats = spans_named(provider, "anthropic.chat")
    # streamed, 0.62.4 adds ``message_delta``'s output tokens to ``message_start``'s (1), but
    # the API's ``message_delta`` count is already the total: one token too many, on the span
    extra = 1 if stream else 0
    assert [s.attributes["gen_ai.usage.output_tokens"] for s in chats] == [5 + extra, 6 + extra]
    assert [s.instrumentation_scope.name for s in chats] == [
        "opentelemetry.instrumentation.anthropic"
    ] * 2
    (definition,) = json.loads(chats[0].attributes["gen_ai.tool.definitions"])
    assert "input_schema" in definition  # Anthropic's shape, read as "parameters"

    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, "anthropic.chat"),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, "anthropic.chat"),
    ]
    first, tool, final = traj.steps
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    call = {**CALL_PART, "id": TOOL_USE_ID}  # the same tool_call part as OpenAI's
    assert first.inputs == {
        "messages": [USER],
        "system": SYSTEM_PARTS,
        "tools": [TOOL_DEFINITION],
        "model": CLAUDE,
    }
    assert first.action == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Let me check."}, call]}
    ]
    assert first.attributes["tool_calls"] == [TOOL_USE_ID]
    assert (first.attributes["model"], first.attributes["provider"]) == (
        f"{CLAUDE}-20260101",
        "anthropic",
    )
    assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (12, 5 + extra)
    assert first.attributes["finish_reasons"] == ["tool_call"]

    assert tool.inputs == {"arguments": {"city": "Paris"}} and tool.action == RESULT
    assert (tool.attributes["requested_by"], tool.attributes["tool_call_id"]) == (0, TOOL_USE_ID)

    # the tool_result block is a tool_call_response part in the user's message
    assert final.inputs["messages"] == [
        USER,
        first.action[0],
        {
            "role": "user",
            "parts": [{"type": "tool_call_response", "id": TOOL_USE_ID, "response": RESULT}],
        },
    ]
    assert final.inputs["system"] == SYSTEM_PARTS
    assert final.action == [text("assistant", ANSWER)]
    assert (final.attributes["input_tokens"], final.attributes["output_tokens"]) == (20, 6 + extra)

    assert traj.task == {"messages": [USER], "system": SYSTEM_PARTS}
    report = traj.metadata["capture"]
    assert report["replayable"] is True and report["notes"] == []
    assert report["unanswered_tool_calls"] == [] and report["opaque_steps"] == []
    traj.verify()


# -- LangChain ---------------------------------------------------------------------------------


@HOW
def test_langchain_tool_loop_becomes_the_weather_trajectory(db_path, provider, traceloop, how):
    traceloop(LangchainInstrumentor())
    traj = captured(how, db_path, provider, lambda: weather_agent.invoke(QUESTION))

    # what the instrumentation really writes (the dialect's input)
    spans = provider[1].get_finished_spans()
    assert sorted(s.name for s in spans) == [
        "ScriptedChatModel.chat",
        "ScriptedChatModel.chat",
        "execute_task ChatPromptTemplate",
        "execute_task ChatPromptTemplate",
        "execute_task RunnableSequence",
        "execute_task RunnableSequence",
        "execute_task StrOutputParser",
        "execute_tool get_weather",
        "weather_agent.workflow",
    ]
    (root,) = spans_named(provider, "weather_agent.workflow")
    assert root.attributes["traceloop.span.kind"] == "workflow"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    chat = spans_named(provider, "ScriptedChatModel.chat")[0]
    assert chat.attributes["gen_ai.request.model"] == "unknown"
    assert chat.attributes["traceloop.association.properties.ls_model_name"] == "gpt-4o"
    (tool_run,) = spans_named(provider, "execute_tool get_weather")
    assert "gen_ai.tool.call.id" not in tool_run.attributes
    recorded = json.loads(tool_run.attributes["gen_ai.tool.call.arguments"])
    assert recorded["inputs"] == {"city": "Paris"} and recorded["kwargs"]["tool_call_id"] == "c1"

    # regressions: the tool's arguments and result out of the callback's record, its call id
    # from the callback kwargs; the model from ls_model_name; chain runs are no steps
    assert_weather_trajectory(
        traj,
        llm_names=("ScriptedChatModel.chat", "ScriptedChatModel.chat"),
        tools=[TOOL_DEFINITION],
        system_apart=True,
    )
    # regressions: the root run names the agent, and its recorded input is the task
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    assert traj.task == QUESTION
    assert traj.metadata["root_span"] == "weather_agent.workflow"
    assert traj.metadata["capture"]["spans"] == 9
    assert traj.steps[1].attributes["tool_description"] == "The weather in a city."


@HOW
def test_langchain_create_agent_becomes_the_weather_trajectory(db_path, provider, traceloop, how):
    traceloop(LangchainInstrumentor())
    traj = captured(how, db_path, provider, lambda: run_graph(scripted_model()))
    spans = provider[1].get_finished_spans()
    (outer,) = spans_named(provider, "invoke_agent weather_agent")
    assert outer.parent is None and outer.attributes["gen_ai.conversation.id"] == "t1"
    nodes = [s.name for s in spans if s.attributes.get("traceloop.span.kind") == "task"]
    assert sorted(nodes) == ["execute_task model", "execute_task model", "execute_task tools"]

    assert_weather_trajectory(
        traj,
        llm_names=("ScriptedChatModel.chat", "ScriptedChatModel.chat"),
        tools=[TOOL_DEFINITION],
        system_apart=True,
    )
    assert traj.session_id == "t1"
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    assert traj.metadata["root_span"] == "invoke_agent weather_agent"
    assert traj.task == {"messages": [USER], "system": SYSTEM_PARTS}
    assert traj.metadata["capture"]["spans"] == len(spans) == 8


@HOW
def test_langchain_with_trace_content_false_is_reported(
    db_path, provider, traceloop, monkeypatch, how
):
    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "false")
    traceloop(LangchainInstrumentor())
    traj = captured(how, db_path, provider, lambda: weather_agent.invoke(QUESTION))
    (tool_run,) = spans_named(provider, "execute_tool get_weather")
    assert "traceloop.entity.input" not in tool_run.attributes

    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, "ScriptedChatModel.chat"),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, "ScriptedChatModel.chat"),
    ]
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    for step in traj.steps:
        assert step.inputs is None and step.action is None
    assert traj.steps[0].attributes["model"] == "gpt-4o"
    assert traj.steps[0].attributes["input_tokens"] == 12
    assert traj.task == {"root_span": "weather_agent.workflow"}
    report = traj.metadata["capture"]
    assert report["replayable"] is False and report["steps_without_content"] == [0, 1, 2]
    assert report["tool_steps_without_result"] == [1]
    assert [n for n in report["notes"] if n.endswith(NO_CONTENT)] == [
        f"step {i}: {NO_CONTENT}" for i in range(3)
    ]


@HOW
def test_langchain_retriever_run_is_a_retrieval_step(db_path, provider, traceloop, how):
    traceloop(LangchainInstrumentor())
    documents = [{"page_content": "Paris is rainy.", "metadata": {"source": "forecast"}}]

    def run() -> str:
        (document,) = ForecastRetriever().invoke("weather in Paris")
        assert document.page_content == "Paris is rainy."
        return ANSWER

    traj = captured(how, db_path, provider, run)
    (span,) = provider[1].get_finished_spans()
    assert span.name == "vector_db_retrieve ForecastRetriever"
    assert span.attributes["traceloop.span.kind"] == "task"  # not a chain around steps

    (step,) = traj.steps
    assert (step.kind, step.name) == (StepKind.RETRIEVAL, "ForecastRetriever")
    assert step.inputs == {"query": "weather in Paris"}
    assert step.action == documents
    assert traj.metadata["capture"]["opaque_steps"] == []


@HOW
@pytest.mark.parametrize("vendor", ["traceloop", "openinference", "gen_ai"])
def test_langchain_and_an_openai_instrumentor_make_one_llm_step_per_call(
    db_path, provider, traceloop, vendor, how
):
    """Traceloop's LangChain instrumentation with an OpenAI instrumentation on ``ChatOpenAI``.
    Traceloop's own OpenAI instrumentor honours the suppression key LangChain's chat model span
    sets and writes nothing; the others write their span of the call beside the chat model's
    span (it is not current), which is the same call: one llm step each time (regression)."""
    traceloop(LangchainInstrumentor(), openai_instrumentor(vendor))
    traj = captured(how, db_path, provider, lambda: run_graph(chat_openai()))
    spans = provider[1].get_finished_spans()
    chats = spans_named(provider, "ChatOpenAI.chat")
    assert len(chats) == 2
    others = [s for s in spans if s.instrumentation_scope.name != LANGCHAIN_SCOPE]
    if vendor == "traceloop":
        assert others == []
    else:
        assert [s.name for s in others] == (
            ["ChatCompletion"] * 2 if vendor == "openinference" else ["chat gpt-4o"] * 2
        )
        for chat, call in zip(chats, others, strict=True):
            assert call.parent.span_id == chat.parent.span_id  # beside it, not inside
            assert chat.start_time <= call.start_time <= call.end_time <= chat.end_time

    assert_weather_trajectory(
        traj,
        llm_names=("ChatOpenAI.chat", "ChatOpenAI.chat"),
        tools=[TOOL_DEFINITION],
        system_apart=True,
    )
    first = traj.steps[0]
    assert (first.attributes["model"], first.attributes["provider"]) == (SERVED_MODEL, "openai")
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    if vendor == "openinference":  # no response id there: matched by the same output
        assert "openinference" in first.attributes["dialect"].split(",")


# -- failures ----------------------------------------------------------------------------------

#: the llm step of one ``chat.completions.create`` as each OpenAI instrumentation names it
CHAT_SPAN = {"traceloop": "openai.chat", "openinference": "ChatCompletion", "gen_ai": "chat gpt-4o"}
OPENAI_VENDORS = pytest.mark.parametrize("vendor", list(CHAT_SPAN))


def openai_call_spans(provider: Provider) -> list[Any]:
    """The spans an OpenAI instrumentation wrote (not the app's agent and tool spans)."""
    return [
        s for s in provider[1].get_finished_spans() if s.instrumentation_scope.name != "weather.app"
    ]


@HOW
@OPENAI_VENDORS
@pytest.mark.parametrize(("status", "give_up"), [(500, False), (429, True)])
def test_a_refused_openai_call_is_a_failed_llm_step(
    db_path, provider, traceloop, monkeypatch, vendor, status, give_up, how
):
    """The API answers ``status`` with its error body, the client does not retry; the agent lets
    the ``openai.APIStatusError`` end the run, or catches it and gives up. Each instrumentation
    ends its span with status ERROR and says what failed its own way; the step reads the same."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    traceloop(openai_instrumentor(vendor))
    api, requests = refusing(status, weather_api(SERVED_MODEL))
    raised = openai.InternalServerError if status == 500 else openai.RateLimitError
    traj = captured(
        how,
        db_path,
        provider,
        lambda: run_openai(provider[0], openai_client(api), give_up=give_up),
        expect=GAVE_UP if give_up else raised,
    )
    assert len(requests) == 1  # max_retries=0
    described = f"Error code: {status} - {API_ERRORS[status]['message']}"
    error = {"type": f"openai.{raised.__name__}", "message": described}

    # what each instrumentation writes on the call's span
    (span,) = openai_call_spans(provider)
    assert span.name == CHAT_SPAN[vendor] and span.status.status_code is StatusCode.ERROR
    events = [e.attributes for e in span.events if e.name == "exception"]
    if vendor == "gen_ai":  # the type qualified, no exception event
        assert (span.attributes["error.type"], span.status.description) == (
            error["type"],
            described,
        )
        assert events == []
    elif vendor == "openinference":  # no error.type, "Type: message" as the description
        assert "error.type" not in span.attributes
        assert span.status.description == f"{raised.__name__}: {described}"
    else:  # the bare class name as error.type
        assert (span.attributes["error.type"], span.status.description) == (
            raised.__name__,
            described,
        )
    if vendor != "gen_ai":
        (event,) = events
        assert (event["exception.type"], event["exception.message"]) == (error["type"], described)

    # regression: one error whatever wrote it (the exception event's over the others)
    (step,) = traj.steps
    assert (step.kind, step.name, step.agent) == (StepKind.LLM, CHAT_SPAN[vendor], "weather_agent")
    assert step.error == error
    assert step.inputs["messages"] == [text("system", SYSTEM), USER] and step.action is None
    if give_up:
        assert traj.outcome is None  # the agent answered: nothing says the run failed
    else:
        assert traj.outcome.failed is True and traj.outcome.error == error
    report = traj.metadata["capture"]
    assert report["steps_without_content"] == [] and report["notes"] == []
    assert report["unanswered_tool_calls"] == [] and report["replayable"] is True


@HOW
@OPENAI_VENDORS
def test_a_call_the_client_retried_is_one_llm_step_that_did_not_fail(
    db_path, provider, traceloop, monkeypatch, vendor, how
):
    """``max_retries=2``: the first request is refused with a 429, the client retries it and
    gets the answer. The instrumentations wrap the client's method, not its HTTP attempts: one
    span per call, which says nothing of the refused attempt."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    traceloop(openai_instrumentor(vendor))
    api, requests = refusing(429, weather_api(SERVED_MODEL), times=1)
    client = openai_client(api, max_retries=2)
    traj = captured(how, db_path, provider, lambda: run_openai(provider[0], client))
    assert len(requests) == 3  # the first call twice, the second once

    calls = openai_call_spans(provider)
    assert [s.name for s in calls] == [CHAT_SPAN[vendor]] * 2
    for span in calls:
        assert span.status.status_code is not StatusCode.ERROR
        assert span.events == () and "error.type" not in span.attributes

    assert_weather_trajectory(traj, llm_names=(CHAT_SPAN[vendor],) * 2, tools=[TOOL_DEFINITION])
    assert [s.error for s in traj.steps] == [None, None, None]
    assert traj.outcome is None


def without_content(traj: Trajectory) -> tuple[Any, ...]:
    """The weather run's steps from Traceloop's OpenAI spans without content: llm, tool, llm,
    the llm steps without inputs or output but with their model. Returns the three steps."""
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, "openai.chat"),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, "openai.chat"),
    ]
    first, tool, final = traj.steps
    assert first.inputs is first.action is final.inputs is final.action is None
    assert first.attributes["model"] == SERVED_MODEL
    return first, tool, final


@HOW
@pytest.mark.parametrize("handled", [True, False], ids=["handled", "raised"])
def test_langchain_tool_that_fails_is_a_failed_tool_step(
    db_path, provider, traceloop, handled, how
):
    """The tool's error ends the run, or LangChain hands it to the model as a
    ``ToolMessage(status="error")``; then the instrumentation records a tool run that
    succeeded, whose output is that message."""
    traceloop(LangchainInstrumentor())
    agent = broken_agent(handled=handled)
    expect = ANSWER if handled else TimeoutError
    traj = captured(how, db_path, provider, lambda: agent.invoke(QUESTION), expect=expect)

    (tool_run,) = spans_named(provider, "execute_tool get_weather")
    (root,) = spans_named(provider, "weather_agent.workflow")
    if handled:
        assert tool_run.status.status_code is StatusCode.UNSET
        assert tool_run.attributes["gen_ai.task.status"] == "success" and not tool_run.events
        output = json.loads(tool_run.attributes["traceloop.entity.output"])["output"]["kwargs"]
        assert (output["content"], output["status"]) == (TIMED_OUT, "error")
    else:
        for span in (tool_run, root):
            assert (span.status.status_code, span.status.description) == (
                StatusCode.ERROR,
                TIMED_OUT,
            )
            assert span.attributes["error.type"] == "TimeoutError"
            assert span.attributes["gen_ai.task.status"] == "failure"
            assert "traceloop.entity.output" not in span.attributes
            (event,) = span.events
            assert event.attributes["exception.type"] == "TimeoutError"

    # regression (handled): the ToolMessage's status makes the step failed
    assert_broken_weather(traj, handled=handled, llm_name="ScriptedChatModel.chat")
