"""The Langfuse SDK's own OTel spans, recorded offline and read by the ``langfuse`` dialect.

The real ``langfuse`` client (v3+ is built on OpenTelemetry; these tests run 5.0.4) is given
its own ``TracerProvider`` and an in-memory ``span_exporter``, so its Langfuse span processor
exports nowhere; its base URL is an unused local port and nothing here calls the API. A second
in-memory exporter (or agent-replay's span processor) on the same provider sees the spans.
Three ways of tracing the weather run (``weather_run``), each a tree of ``langfuse-sdk`` spans
typed by ``langfuse.observation.type``:

* by hand: an ``agent`` observation (``@observe``) around a generation opened with
  ``start_as_current_observation``, a ``@observe`` tool, and a ``@observe`` generation that sets
  its model and usage with ``update_current_generation``;
* the OpenAI drop-in (``from langfuse.openai import OpenAI``; openai 3.x over an
  ``httpx2.MockTransport``) inside a ``@observe`` agent, with a ``@observe(as_type="tool")``
  tool. Each ``chat.completions.create`` is a ``generation`` named by its ``name=`` argument:
  input the messages, or ``{"tools": [...], "messages": [...]}`` when tools are offered; output
  the assistant message (``role``, ``content``, ``tool_calls`` with ids); ``model.name`` the
  model the API *answered* with (the request's model is not kept); ``usage_details`` the API's
  usage keys (``prompt_tokens``, ``completion_tokens``, ...); ``model.parameters`` with
  Langfuse's defaults for what was not sent. A failed call is a generation with
  ``level=ERROR`` and ``status_message``, no output;
* LangChain through ``langfuse.langchain.CallbackHandler`` (langchain-core 1.8.3, the loop of
  ``langchain_weather``): every run is an observation; a chain whose name contains "agent" is
  typed ``agent``, other chains (sequences, prompt templates, output parsers) ``chain``; a chat
  model run is a ``generation`` whose input is the messages as OpenAI-style dicts *followed by*
  one ``{"role": "tool", "content": <definition>}`` per bound tool, with ``model.name`` from
  ``ls_model_name`` and usage as ``{"input", "output", "total"}``; a tool run is a ``tool`` with
  the arguments as input, the returned ``ToolMessage``'s fields as output and the call id in
  ``metadata.tool_call_id``. The session comes from the ``langfuse_session_id`` metadata.
  A tool run that raised, and one LangChain handled into a ``ToolMessage`` of status
  ``error``, are observations of level ERROR (span status ERROR) with the error text as status
  message; so is the agent's when the error ended the run. No exception event and no
  ``error.type``: the exception's type is nowhere.
"""

from __future__ import annotations

import importlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import langfuse
import openai
import pytest
import wrapt
from langfuse._client.resource_manager import LangfuseResourceManager
from langfuse.langchain import CallbackHandler
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_replay import CheckpointStore, StepKind
from agent_replay.interop import from_otel_spans
from agent_replay.mapping import map_span
from agent_replay.mapping.spans import from_readable_span
from agent_replay.otel import attach
from fake_openai import refusing, weather_api
from langchain_weather import (
    MODEL_RUN,
    assert_broken_weather,
    broken_agent,
    weather_agent,
)
from stored import captured
from weather_run import (
    ANSWER,
    CALL,
    QUESTION,
    TIMED_OUT,
    TOOL,
    TOOL_DEFINITION,
    assert_weather_trajectory,
    text,
)

PUBLIC_KEY = "pk-lf-agent-replay-test"
SESSION = "sess-1"
TOOL_CALL_MESSAGE = {"role": "assistant", "content": None, "tool_calls": [CALL]}
SERVED_MODEL = "gpt-4o-2024-08-06"  # the model the fake API answers with


@pytest.fixture
def recorded(monkeypatch) -> Iterator[tuple[Any, TracerProvider, InMemorySpanExporter]]:
    """A Langfuse client that records into a private provider and can reach no server."""
    for name in ("PUBLIC_KEY", "SECRET_KEY", "HOST", "BASE_URL", "TRACING_ENABLED", "SAMPLE_RATE"):
        monkeypatch.delenv("LANGFUSE_" + name, raising=False)
    monkeypatch.setenv("LANGFUSE_MEDIA_UPLOAD_ENABLED", "false")  # no upload threads
    threads_before = set(threading.enumerate())
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = langfuse.Langfuse(
        public_key=PUBLIC_KEY,
        secret_key="sk-lf-agent-replay-test",
        base_url="http://127.0.0.1:9",
        timeout=1,
        tracer_provider=provider,
        span_exporter=InMemorySpanExporter(),  # the Langfuse processor exports here, not HTTP
    )
    try:
        yield client, provider, exporter
    finally:
        client.shutdown()
        # the client is a per-public-key singleton with a prompt-cache thread of its own
        resources = LangfuseResourceManager._instances.pop(PUBLIC_KEY, None)
        if resources is not None:
            resources.prompt_cache._task_manager.shutdown()
        provider.shutdown()
        assert set(threading.enumerate()) <= threads_before


def observed_tool(*, fails: bool = False) -> Callable[..., str]:
    @langfuse.observe(as_type="tool")
    def get_weather(city: str) -> str:
        if fails:
            raise TimeoutError("weather service timed out")
        return f"rainy in {city}"

    return get_weather


def run_agent(client: Any, *, tool_fails: bool = False) -> str:
    get_weather = observed_tool(fails=tool_fails)

    @langfuse.observe(name="answer", as_type="generation")
    def answer(messages: list[dict[str, Any]]) -> str:
        client.update_current_generation(model="gpt-4o", usage_details={"input": 20, "output": 6})
        return ANSWER

    @langfuse.observe(name="weather-agent", as_type="agent")
    def weather_agent(question: str) -> str:
        with langfuse.propagate_attributes(session_id=SESSION, user_id="u1"):
            messages = [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": question},
            ]
            with client.start_as_current_observation(
                name="plan",
                as_type="generation",
                model="gpt-4o",
                input=messages,
                model_parameters={"temperature": 0},
            ) as generation:
                # usage with the provider's keys, as Langfuse's OpenAI wrapper records it
                generation.update(
                    output=TOOL_CALL_MESSAGE,
                    usage_details={"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
                )
            try:
                result = get_weather(**json.loads(CALL["function"]["arguments"]))
            except TimeoutError as exc:
                result = f"error: {exc}"
            messages += [
                TOOL_CALL_MESSAGE,
                {"role": "tool", "tool_call_id": CALL["id"], "content": result},
            ]
            return answer(messages=messages)

    return weather_agent(QUESTION, langfuse_public_key=PUBLIC_KEY)


def test_real_langfuse_spans_make_an_agent_trajectory(recorded):
    client, _, exporter = recorded
    assert run_agent(client) == ANSWER
    client.flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}

    # what the SDK really writes (the dialect's input)
    assert set(spans) == {"weather-agent", "plan", "get_weather", "answer"}
    assert {s.instrumentation_scope.name for s in spans.values()} == {"langfuse-sdk"}
    plan = spans["plan"].attributes
    assert plan["langfuse.observation.type"] == "generation"
    assert plan["langfuse.observation.model.name"] == "gpt-4o"
    assert json.loads(plan["langfuse.observation.usage_details"])["prompt_tokens"] == 12
    assert plan["session.id"] == SESSION
    assert spans["get_weather"].attributes["langfuse.observation.type"] == "tool"
    assert json.loads(spans["get_weather"].attributes["langfuse.observation.input"]) == {
        "args": [],
        "kwargs": {"city": "Paris"},
    }
    assert spans["get_weather"].attributes["langfuse.observation.output"] == "rainy in Paris"
    assert spans["weather-agent"].attributes["langfuse.observation.type"] == "agent"

    traj = from_otel_spans(list(spans.values()))
    assert traj.session_id == SESSION
    assert traj.task == QUESTION  # @observe's {"args": [QUESTION], "kwargs": {}}
    assert traj.metadata["root_span"] == "weather-agent"
    assert_weather_trajectory(traj)
    assert {s.agent for s in traj.steps} == {"weather-agent"}
    final = traj.steps[2]
    assert final.inputs["model"] == "gpt-4o"
    assert (final.attributes["input_tokens"], final.attributes["output_tokens"]) == (20, 6)


def test_real_langfuse_spans_through_the_span_processor_with_a_failing_tool(recorded, tmp_path):
    client, provider, exporter = recorded
    processor = attach(tmp_path / "langfuse.sqlite", tracer_provider=provider)
    assert run_agent(client, tool_fails=True) == ANSWER
    assert processor.force_flush()
    assert processor.stats()["errors"] == 0

    tool_span = next(s for s in exporter.get_finished_spans() if s.name == "get_weather")
    assert tool_span.attributes["langfuse.observation.level"] == "ERROR"

    with CheckpointStore(tmp_path / "langfuse.sqlite") as store:
        assert store.session_ids() == [SESSION]
        traj = store.load(SESSION)
        (verdict,) = store.verify(SESSION)
    assert verdict.ok
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    tool = traj.steps[1]
    assert tool.inputs == {"arguments": {"city": "Paris"}}
    assert tool.error == {"type": "error", "message": "weather service timed out"}
    assert traj.steps[2].inputs["messages"][-1]["parts"][0]["response"] == (
        "error: weather service timed out"
    )
    # the processor and the importer read the same spans the same way
    assert [s.step_hash for s in traj.steps] == [
        s.step_hash for s in from_otel_spans(exporter.get_finished_spans()).steps
    ]


# -- the OpenAI drop-in ---------------------------------------------------------------------------


@pytest.fixture
def drop_in() -> Iterator[Any]:
    """``langfuse.openai``. Importing it wraps the ``openai`` resource methods process-wide; the
    wrappers are taken off afterwards, so the other tests see the plain client."""
    module = importlib.import_module("langfuse.openai")  # the first import wraps

    def wrapped() -> Iterator[tuple[type, str, Any]]:
        for definition in module.OPENAI_METHODS_V1:
            try:
                owner = getattr(importlib.import_module(definition.module), definition.object)
            except (ImportError, AttributeError):
                continue  # a resource this openai version does not have
            method = vars(owner).get(definition.method)
            if isinstance(method, wrapt.FunctionWrapper) and (
                method._self_wrapper.__module__ == module.__name__
            ):
                yield owner, definition.method, method

    if not any(wrapped()):
        module.register_tracing()
    try:
        yield module
    finally:
        for owner, name, method in list(wrapped()):
            setattr(owner, name, method.__wrapped__)
        assert not any(wrapped())


def run_openai_agent(drop_in: Any, *, rate_limited: bool = False) -> str:
    """The weather run on the drop-in client; after a rate-limited call the agent asks again."""
    api = weather_api(SERVED_MODEL)
    if rate_limited:
        api, _ = refusing(429, api, times=1)
    client = drop_in.OpenAI(
        api_key="sk-test",
        base_url="http://127.0.0.1:9/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=api),
    )
    get_weather = observed_tool()

    @langfuse.observe(name="weather-agent", as_type="agent")
    def weather_agent(question: str) -> str:
        with langfuse.propagate_attributes(session_id=SESSION):
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": question},
            ]

            def plan() -> Any:
                return client.chat.completions.create(
                    model="gpt-4o", messages=messages, tools=[TOOL], temperature=0, name="plan"
                )

            try:
                reply = plan()
            except openai.RateLimitError:
                reply = plan()
            request = reply.choices[0].message
            call = request.tool_calls[0]
            result = get_weather(**json.loads(call.function.arguments))
            messages += [
                request.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": result},
            ]
            answer = client.chat.completions.create(
                model="gpt-4o", messages=messages, tools=[TOOL], name="answer"
            )
            return answer.choices[0].message.content

    return weather_agent(QUESTION, langfuse_public_key=PUBLIC_KEY)


def test_langfuse_openai_drop_in_spans_make_an_agent_trajectory(recorded, drop_in):
    client, _, exporter = recorded
    assert run_openai_agent(drop_in) == ANSWER
    client.flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}

    # what the drop-in really writes (the dialect's input)
    assert set(spans) == {"weather-agent", "plan", "get_weather", "answer"}
    plan = spans["plan"].attributes
    assert plan["langfuse.observation.type"] == "generation"
    assert json.loads(plan["langfuse.observation.input"]) == {
        "tools": [TOOL],
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": QUESTION},
        ],
    }
    assert json.loads(plan["langfuse.observation.output"]) == TOOL_CALL_MESSAGE
    assert plan["langfuse.observation.model.name"] == SERVED_MODEL  # not the requested gpt-4o
    assert json.loads(plan["langfuse.observation.usage_details"])["prompt_tokens"] == 12
    assert json.loads(plan["langfuse.observation.model.parameters"])["temperature"] == 0
    assert plan["session.id"] == SESSION
    assert spans["get_weather"].attributes["langfuse.observation.type"] == "tool"

    traj = from_otel_spans(list(spans.values()))
    assert traj.session_id == SESSION
    assert traj.task == QUESTION
    assert traj.metadata["root_span"] == "weather-agent"
    # the tools offered ride along with the messages ({"tools", "messages"} input)
    assert_weather_trajectory(traj, model=SERVED_MODEL, tools=[TOOL_DEFINITION])
    assert {s.agent for s in traj.steps} == {"weather-agent"}
    assert traj.steps[0].attributes["model"] == SERVED_MODEL


def test_langfuse_openai_drop_in_with_a_failed_call_through_the_span_processor(
    recorded, drop_in, tmp_path
):
    client, provider, exporter = recorded
    processor = attach(tmp_path / "drop-in.sqlite", tracer_provider=provider)
    assert run_openai_agent(drop_in, rate_limited=True) == ANSWER
    client.flush()
    assert processor.force_flush()
    assert processor.stats()["errors"] == 0

    failed = exporter.get_finished_spans()[0]
    assert failed.name == "plan"
    assert failed.attributes["langfuse.observation.level"] == "ERROR"
    assert "langfuse.observation.output" not in failed.attributes

    with CheckpointStore(tmp_path / "drop-in.sqlite") as store:
        assert store.session_ids() == [SESSION]
        traj = store.load(SESSION)
        (verdict,) = store.verify(SESSION)
    assert verdict.ok
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, "plan"),
        (StepKind.LLM, "plan"),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, "answer"),
    ]
    refused, plan, tool, _ = traj.steps
    assert refused.error == {"type": "error", "message": "Error code: 429 - Rate limit reached"}
    assert refused.action is None
    # the same request, asked again; a failed call keeps the requested model, not the served one
    assert refused.inputs == {**plan.inputs, "model": "gpt-4o"}
    assert plan.inputs["messages"] == [text("system", "Be brief."), text("user", QUESTION)]
    assert plan.inputs["tools"] == [TOOL_DEFINITION]
    assert plan.error is None and plan.attributes["tool_calls"] == ["c1"]
    assert (tool.attributes["requested_by"], tool.action) == (1, "rainy in Paris")
    assert traj.metadata["capture"]["notes"] == []
    # the processor and the importer read the same spans the same way
    assert [s.step_hash for s in traj.steps] == [
        s.step_hash for s in from_otel_spans(exporter.get_finished_spans()).steps
    ]


# -- LangChain through the CallbackHandler --------------------------------------------------------


def test_langchain_through_the_langfuse_callback_handler(recorded, tmp_path):
    client, provider, exporter = recorded
    processor = attach(tmp_path / "langchain.sqlite", tracer_provider=provider)
    handler = CallbackHandler(public_key=PUBLIC_KEY)
    config = {"callbacks": [handler], "metadata": {"langfuse_session_id": SESSION}}
    assert weather_agent.invoke(QUESTION, config) == ANSWER
    client.flush()
    assert processor.force_flush()
    spans = exporter.get_finished_spans()

    # what the handler really writes (the dialect's input)
    assert Counter((s.name, s.attributes["langfuse.observation.type"]) for s in spans) == {
        ("weather_agent", "agent"): 1,  # "agent" in the chain's name
        ("RunnableSequence", "chain"): 2,
        ("ChatPromptTemplate", "chain"): 2,
        (MODEL_RUN, "generation"): 2,
        ("get_weather", "tool"): 1,
        ("StrOutputParser", "chain"): 1,
    }
    generation = next(s for s in spans if s.name == MODEL_RUN).attributes
    assert json.loads(generation["langfuse.observation.input"]) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": QUESTION},
        {"role": "tool", "content": TOOL},  # the bound tool, appended as a "message"
    ]
    assert generation["langfuse.observation.model.name"] == "gpt-4o"
    assert json.loads(generation["langfuse.observation.usage_details"])["input"] == 12
    tool_span = next(s for s in spans if s.name == "get_weather")
    output = json.loads(tool_span.attributes["langfuse.observation.output"])
    assert (output["type"], output["content"]) == ("tool", "rainy in Paris")  # the ToolMessage
    # JSON text since langfuse 5, the bare string before (4.x is the release Python 3.10 gets)
    assert tool_span.attributes["langfuse.observation.metadata.tool_call_id"] in ('"c1"', "c1")
    assert map_span(from_readable_span(tool_span)).tool_call_ids == ["c1"]  # linked by id

    traj = from_otel_spans(spans)
    assert traj.session_id == SESSION
    assert traj.task == QUESTION
    assert traj.metadata["root_span"] == "weather_agent"
    # chains are containers: prompt templates, sequences and the parser are no steps
    assert_weather_trajectory(traj, llm_names=(MODEL_RUN, MODEL_RUN), tools=[TOOL_DEFINITION])
    assert {s.agent for s in traj.steps} == {"weather_agent"}

    with CheckpointStore(tmp_path / "langchain.sqlite") as store:
        assert store.session_ids() == [SESSION]
        stored = store.load(SESSION)
    assert [s.step_hash for s in stored.steps] == [s.step_hash for s in traj.steps]


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("handled", [True, False], ids=["handled", "raised"])
def test_langchain_tool_that_fails_through_the_callback_handler(recorded, db_path, handled, how):
    """The handler ends a tool run that raised, and one whose ``ToolMessage`` has status
    ``error``, as an observation of level ERROR (span status ERROR) with the error text as
    status message; it records no exception event and no exception type."""
    _, provider, exporter = recorded
    agent = broken_agent(handled=handled)
    config = {
        "callbacks": [CallbackHandler(public_key=PUBLIC_KEY)],
        "metadata": {"langfuse_session_id": SESSION},
    }
    expect = ANSWER if handled else TimeoutError
    traj = captured(
        how, db_path, (provider, exporter), lambda: agent.invoke(QUESTION, config), expect=expect
    )

    spans = {s.name: s for s in exporter.get_finished_spans()}
    failed = [spans["get_weather"]] + (not handled) * [spans["weather_agent"]]
    for span in failed:
        assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, TIMED_OUT)
        assert span.attributes["langfuse.observation.level"] == "ERROR"
        assert span.attributes["langfuse.observation.status_message"] == TIMED_OUT
        assert span.events == () and "error.type" not in span.attributes
    output = spans["get_weather"].attributes.get("langfuse.observation.output")
    if handled:
        message = json.loads(output)
        assert (message["content"], message["status"]) == (TIMED_OUT, "error")
        assert spans["weather_agent"].status.status_code is StatusCode.UNSET
    else:
        assert output is None

    assert traj.session_id == SESSION
    assert_broken_weather(traj, handled=handled, llm_name=MODEL_RUN, error_type="error")
