"""The LangSmith SDK's own OTel spans, recorded offline and read by the ``langsmith`` dialect.

``LANGSMITH_OTEL_ENABLED`` + ``LANGSMITH_OTEL_ONLY`` put the real ``langsmith`` client (0.15.1)
in its OTel-only tracing mode, in which it never calls the LangSmith API; it is handed a private
``TracerProvider`` (``otel_tracer_provider=``) with an in-memory exporter. Two agents:

* ``@traceable``: a chain calling a ``@traceable(run_type="llm")`` function that asks for a
  tool, a ``@traceable(run_type="tool")`` function, and a second llm function that answers;
* LangChain (langchain-core 1.8.3, the loop of ``langchain_weather``) traced the way LangSmith
  users trace it: ``LANGSMITH_TRACING`` on, and ``tracing_context(client=...)``, so
  langchain-core adds LangSmith's ``LangChainTracer`` itself. In OTel-only mode the tracer's
  runs are exported as OTel spans too, one per run: ``langsmith.span.kind`` is the run type
  (``chain`` for the agent lambda and the sequences, ``prompt`` for prompt templates, ``parser``
  for output parsers, ``llm``, ``tool``) and ``gen_ai.operation.name`` LangSmith's mapping of it
  (``chat`` for ``llm`` *and* ``prompt``, ``execute_tool``, else the run type); an llm run's
  ``gen_ai.prompt`` holds ``{"messages": [[lc-serialised messages]]}``, its
  ``gen_ai.completion`` the ``LLMResult`` (``generations``), its bound tools are only in
  ``gen_ai.tool.definitions``, and usage is in ``gen_ai.usage.*``; a tool run has
  ``gen_ai.tool.call.id`` and, as ``gen_ai.completion``, ``{"output": <the ToolMessage's
  fields>}``.

A run that raised is exported as a span of status ERROR without a description, its
``gen_ai.completion`` ``{}`` and one ``exception`` event of type ``Exception`` whose message is
the run's error text: the ``repr`` of the exception followed by its traceback. A
``ToolException`` LangChain handled is a tool run of status OK whose output is the
``ToolMessage`` of status ``error``.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import langsmith
import pytest
from langsmith import env as ls_env
from langsmith import utils as ls_utils
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_replay import StepKind
from agent_replay.interop import from_otel_spans
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
)

USAGE = {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
LLM_METADATA = {"ls_provider": "openai", "ls_model_name": "gpt-4o"}


def clear_env_caches() -> None:
    """The SDK caches what it read from the environment; tests must not leak theirs."""
    ls_utils.get_env_var.cache_clear()
    ls_utils.get_tracer_project.cache_clear()
    ls_env.get_langchain_env_var_metadata.cache_clear()


@pytest.fixture
def recorded(monkeypatch) -> Iterator[tuple[Any, TracerProvider, InMemorySpanExporter]]:
    """A LangSmith client in OTel-only mode that records into a private provider:
    ``(client, provider, exporter)``."""
    for name in ("TRACING_MODE", "RUNS_ENDPOINTS", "WORKSPACE_ID", "PROFILE"):
        monkeypatch.delenv("LANGSMITH_" + name, raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_OTEL_ENABLED", "true")
    monkeypatch.setenv("LANGSMITH_OTEL_ONLY", "true")
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2-agent-replay-test")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("LANGSMITH_PROJECT", "agent-replay-test")
    clear_env_caches()
    threads_before = set(threading.enumerate())
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = langsmith.Client(otel_tracer_provider=provider)
    try:
        assert client.tracing_mode == "otel"  # OTel export only: no LangSmith API calls
        yield client, provider, exporter
    finally:
        client.close(timeout=5)  # drains the tracing queue, stops its thread
        provider.shutdown()
        clear_env_caches()
        for thread in set(threading.enumerate()) - threads_before:
            thread.join(timeout=5)
        assert set(threading.enumerate()) <= threads_before


def run_agent(client: Any, *, tool_fails: bool = False) -> str:
    @langsmith.traceable(run_type="llm", name="plan", metadata=LLM_METADATA)
    def plan(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_calls": [CALL], "usage_metadata": USAGE}

    @langsmith.traceable(run_type="tool")
    def get_weather(city: str) -> str:
        if tool_fails:
            raise TimeoutError("weather service timed out")
        return f"rainy in {city}"

    @langsmith.traceable(run_type="llm", name="answer", metadata=LLM_METADATA)
    def answer(messages: list[dict[str, Any]]) -> str:
        return ANSWER  # recorded as {"output": ANSWER}

    @langsmith.traceable(name="weather_agent")
    def weather_agent(question: str) -> str:
        messages = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": question},
        ]
        request = plan(messages)
        try:
            result = get_weather(**json.loads(CALL["function"]["arguments"]))
        except TimeoutError as exc:
            result = f"error: {exc}"
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": CALL["id"], "content": result},
        ]
        assert request["tool_calls"] == [CALL]
        return answer(messages)

    with langsmith.tracing_context(client=client, metadata={"thread_id": "t1"}):
        result = weather_agent(QUESTION)
    client.flush()
    return result


def test_real_langsmith_otel_spans_make_a_trajectory(recorded):
    client, _, exporter = recorded
    assert run_agent(client) == ANSWER
    spans = {s.name: s for s in exporter.get_finished_spans()}

    # what the SDK really writes (the dialect's input)
    assert set(spans) == {"weather_agent", "plan", "get_weather", "answer"}
    chain = spans["weather_agent"].attributes
    assert chain["langsmith.span.kind"] == "chain" and chain["gen_ai.operation.name"] == "chain"
    assert json.loads(chain["gen_ai.prompt"]) == {"question": QUESTION}
    plan = spans["plan"].attributes
    assert plan["langsmith.span.kind"] == "llm" and plan["gen_ai.operation.name"] == "chat"
    assert plan["gen_ai.request.model"] == "gpt-4o" and plan["gen_ai.usage.input_tokens"] == 12
    assert plan["langsmith.metadata.thread_id"] == "t1"
    tool = spans["get_weather"].attributes
    assert tool["gen_ai.operation.name"] == "execute_tool"
    assert json.loads(tool["gen_ai.prompt"]) == {"city": "Paris"}
    assert json.loads(tool["gen_ai.completion"]) == {"output": "rainy in Paris"}
    assert json.loads(spans["answer"].attributes["gen_ai.completion"]) == {"output": ANSWER}

    traj = from_otel_spans(list(spans.values()))
    assert traj.session_id == "t1"
    assert traj.metadata["root_span"] == "weather_agent"
    assert traj.task == {"question": QUESTION}  # the chain is the workflow, not an opaque step
    assert_weather_trajectory(traj)
    assert traj.steps[0].attributes["model"] == "gpt-4o"


def test_real_langsmith_otel_spans_with_a_failing_tool(recorded):
    client, _, exporter = recorded
    assert run_agent(client, tool_fails=True) == ANSWER
    traj = from_otel_spans(exporter.get_finished_spans())
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    tool = traj.steps[1]
    assert tool.inputs == {"arguments": {"city": "Paris"}}
    # the run's error is only in an exception event of type Exception, whose message is the
    # repr of what was raised and the traceback; regression: read as that repr says
    (failed,) = [s for s in exporter.get_finished_spans() if s.name == "get_weather"]
    (event,) = failed.events
    assert (failed.status.description, event.attributes["exception.type"]) == (None, "Exception")
    assert event.attributes["exception.message"].startswith(
        "TimeoutError('weather service timed out')\n\nTraceback (most recent call last):"
    )
    assert tool.error == {"type": "TimeoutError", "message": "weather service timed out"}
    assert traj.outcome is None  # the agent went on
    shown = "error: weather service timed out"
    assert traj.steps[2].inputs["messages"][-1]["parts"][0]["response"] == shown
    # its outputs were {"output": null}; regression: the failed step, linked to its call by
    # name, takes what the model was given, as one linked by id does
    assert (tool.action, tool.attributes["result_from"]) == (shown, "later llm input")


def test_langchain_through_langsmiths_tracer_in_otel_only_mode(recorded):
    client, _, exporter = recorded
    with langsmith.tracing_context(client=client, metadata={"thread_id": "t1"}):
        assert weather_agent.invoke(QUESTION) == ANSWER
    client.flush()
    spans = exporter.get_finished_spans()

    # what LangSmith's LangChain tracer really exports (the dialect's input)
    kinds = Counter(
        (s.name, s.attributes["langsmith.span.kind"], s.attributes["gen_ai.operation.name"])
        for s in spans
    )
    assert kinds == {
        ("weather_agent", "chain", "chain"): 1,
        ("RunnableSequence", "chain", "chain"): 2,
        ("ChatPromptTemplate", "prompt", "chat"): 2,  # a template, exported as a chat
        (MODEL_RUN, "llm", "chat"): 2,
        ("get_weather", "tool", "execute_tool"): 1,
        ("StrOutputParser", "parser", "parser"): 1,
    }
    llm = next(s for s in spans if s.name == MODEL_RUN).attributes
    assert json.loads(llm["gen_ai.tool.definitions"]) == [TOOL]
    assert [m["id"][-1] for m in json.loads(llm["gen_ai.prompt"])["messages"][0]] == [
        "SystemMessage",
        "HumanMessage",
    ]
    assert llm["gen_ai.request.model"] == "gpt-4o" and llm["gen_ai.usage.input_tokens"] == 12
    tool = next(s for s in spans if s.name == "get_weather").attributes
    assert tool["gen_ai.tool.call.id"] == "c1"
    output = json.loads(tool["gen_ai.completion"])["output"]
    assert (output["type"], output["content"]) == ("tool", "rainy in Paris")  # the ToolMessage

    traj = from_otel_spans(spans)
    assert traj.session_id == "t1"
    assert traj.metadata["root_span"] == "weather_agent"
    assert traj.task == {"input": QUESTION}  # the lambda's run inputs
    # prompt templates, sequences and the parser are not steps; the tools come from
    # gen_ai.tool.definitions and the tool's result out of its ToolMessage
    assert_weather_trajectory(traj, llm_names=(MODEL_RUN, MODEL_RUN), tools=[TOOL_DEFINITION])
    assert {s.agent for s in traj.steps} == {None}  # chains are workflows, not agents


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("handled", [True, False], ids=["handled", "raised"])
def test_langchain_tool_that_fails_through_langsmiths_tracer(recorded, db_path, handled, how):
    """Raised, the tool's and the agent's runs are exported as spans of status ERROR, no
    description, outputs ``{}`` and one exception event of type ``Exception`` holding the run's
    error text (the repr of the ``TimeoutError`` and the traceback); handled, the tool run is
    OK and its output the ``ToolMessage`` of status ``error``."""
    client, provider, exporter = recorded
    agent = broken_agent(handled=handled)

    def run() -> str:
        try:
            with langsmith.tracing_context(client=client, metadata={"thread_id": "t1"}):
                return agent.invoke(QUESTION)
        finally:
            client.flush()

    expect = ANSWER if handled else TimeoutError
    traj = captured(how, db_path, (provider, exporter), run, expect=expect)

    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool_run = spans["get_weather"]
    if handled:
        assert tool_run.status.status_code is StatusCode.OK and not tool_run.events
        message = json.loads(tool_run.attributes["gen_ai.completion"])["output"]
        assert (message["content"], message["status"]) == (TIMED_OUT, "error")
    else:
        for span in (tool_run, spans["weather_agent"]):
            assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, None)
            assert span.attributes["gen_ai.completion"] == "{}"
            (event,) = span.events
            assert event.attributes["exception.type"] == "Exception"
            assert event.attributes["exception.message"].startswith(
                f"TimeoutError('{TIMED_OUT}')Traceback (most recent call last):"
            )

    # regressions: the error read out of the run's error text; outputs {} are no result
    assert traj.session_id == "t1"
    # (LangSmith's chain runs are workflows: no run names the agent)
    assert_broken_weather(traj, handled=handled, llm_name=MODEL_RUN, agent=None)
