"""The OpenInference dialect on the spans the real LangChain instrumentation emits, offline.

Real ``langchain-core`` runs driven by the scripted fake chat model of ``langchain_weather`` (no
network) that first asks for ``get_weather`` (a real ``@tool``) and then answers, traced by the real
``openinference-instrumentation-langchain`` ``LangChainInstrumentor`` on an SDK provider. The
spans are read the two ways users read them: ``attach`` into a SQLite store, and
``from_otel_spans`` on the spans an ``InMemorySpanExporter`` kept. The agents: a hand-written
tool loop inside a ``@chain`` runnable, LangGraph's prebuilt ``create_react_agent`` and
LangChain's ``create_agent`` (its replacement since LangGraph 1.0).

What openinference-instrumentation-langchain 0.1.80 emits (langchain-core 1.8.3, langgraph
1.2.24, langchain 1.5.2), one span per LangChain run, OTel kind INTERNAL, scope
``openinference.instrumentation.langchain``:

* chat model run → ``LLM`` span named after the model class (or the ``run_name``):
  ``llm.input_messages.N.message.{role,content,name,tool_call_id}`` and
  ``...tool_calls.K.tool_call.{id,function.name,function.arguments}``, the same under
  ``llm.output_messages``, ``llm.tools.N.tool.json_schema`` and ``llm.invocation_parameters``
  (with ``"stop": null``) from ``bind_tools``, ``llm.model_name`` (``ls_model_name``),
  ``llm.provider`` (``ls_provider``), ``llm.token_count.*`` from ``usage_metadata``, and
  ``input.value`` / ``output.value`` holding the serialised run (LangChain ``lc`` dumps).
* tool run → ``TOOL`` span named after the tool: ``tool.name``, ``tool.description``, **no**
  ``tool.id``; ``input.value`` is the bare argument (``"Paris"``, no mime type) when the tool
  has one string argument; ``output.value`` is the serialised ``ToolMessage``
  (``{"type": "tool", "data": {"content", "tool_call_id", "status", ...}}``).
* every other run (``@chain`` functions, LangGraph graphs, nodes, prompts, routers) → ``CHAIN``,
  or ``AGENT`` when its *name contains "agent"*: the graph ``weather_agent``, but also the model
  node ``agent`` of ``create_react_agent``. Chains whose input has ``messages`` also get
  ``llm.input_messages`` of the first message only. ``metadata`` holds LangGraph's
  ``langgraph_node`` / ``langgraph_step`` ...; ``thread_id`` becomes ``session.id``. No
  ``agent.name`` attribute anywhere.
* a prompt template (``ChatPromptTemplate``) → ``PROMPT`` span, read as formatting inside the
  workflow, not a step.
* a run that raised: status ERROR with, as description, the error's repr and traceback
  (``TimeoutError('...')Traceback ...``), and an ``exception`` event (``TimeoutError``, the
  message); no ``output.value``. A ``ToolException`` LangChain handled
  (``handle_tool_error``) is a TOOL span of status OK whose output is the ``ToolMessage`` of
  status ``error``.
* ``TraceConfig(hide_inputs=True, hide_outputs=True)`` (or ``OPENINFERENCE_HIDE_INPUTS`` /
  ``OPENINFERENCE_HIDE_OUTPUTS``): the same spans, ``input.value`` / ``output.value`` are the
  text ``__REDACTED__``, no ``llm.input_messages`` / ``llm.output_messages`` / ``llm.tools``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import chain
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt import create_react_agent
from openinference.instrumentation import TraceConfig, using_session
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_replay import StepKind
from langchain_weather import (
    MODEL_RUN,
    assert_broken_weather,
    broken_agent,
    get_weather,
    scripted_model,
)
from stored import captured
from weather_run import ANSWER, CALL_PART, QUESTION, TIMED_OUT, assert_weather_trajectory, text

SYSTEM = "Be brief."
USER = text("user", QUESTION)
TOOL_DEFINITION = {"type": "function", **convert_to_openai_tool(get_weather)["function"]}


def run_loop() -> str:
    """A tool loop written by hand, inside a ``@chain`` runnable named ``weather_agent``."""
    llm = scripted_model().bind_tools([get_weather])

    @chain
    def weather_agent(question: str) -> str:
        messages = [SystemMessage(SYSTEM), HumanMessage(question)]
        request = llm.invoke(messages, {"run_name": "plan"})
        messages.append(request)
        messages += [get_weather.invoke(call) for call in request.tool_calls]
        return llm.invoke(messages, {"run_name": "answer"}).content

    return weather_agent.invoke(QUESTION)


def run_graph(factory: str) -> str:
    """LangGraph's prebuilt ReAct agent or LangChain's ``create_agent``, on thread ``t1``."""
    if factory == "create_react_agent":
        with warnings.catch_warnings():  # deprecated since LangGraph 1.0, still much used
            warnings.simplefilter("ignore")
            agent = create_react_agent(
                scripted_model(), [get_weather], prompt=SYSTEM, name="weather_agent"
            )
    else:
        agent = create_agent(
            scripted_model(), [get_weather], system_prompt=SYSTEM, name="weather_agent"
        )
    state = agent.invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"configurable": {"thread_id": "t1"}}
    )
    return state["messages"][-1].content


@pytest.fixture
def instrument(provider) -> Iterator[Any]:
    """``instrument(config=None)`` instruments LangChain for this test only."""
    instrumentor = LangChainInstrumentor()  # a singleton, as every BaseInstrumentor

    def start(config: TraceConfig | None = None) -> None:
        instrumentor.instrument(tracer_provider=provider[0], config=config)

    yield start
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
    provider[1].clear()
    assert run_loop() == ANSWER
    assert provider[1].get_finished_spans() == ()  # uninstrumented: no span leaks to others


def spans_named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


@pytest.mark.parametrize("how", ["processor", "spans"])
def test_a_tool_loop_in_a_chain_becomes_the_weather_trajectory(db_path, provider, instrument, how):
    instrument()
    traj = captured(how, db_path, provider, run_loop)

    # what the instrumentation really writes (the dialect's input)
    (root,) = spans_named(provider[1], "weather_agent")
    assert root.attributes["openinference.span.kind"] == "AGENT"  # "agent" in the run name
    (tool_span,) = spans_named(provider[1], "get_weather")
    assert "tool.id" not in tool_span.attributes
    assert tool_span.attributes["input.value"] == "Paris"
    result = json.loads(tool_span.attributes["output.value"])
    assert result["type"] == "tool" and result["data"]["tool_call_id"] == "c1"
    (plan,) = spans_named(provider[1], "plan")
    assert json.loads(plan.attributes["llm.invocation_parameters"])["stop"] is None

    assert_weather_trajectory(traj, tools=[TOOL_DEFINITION])
    first, tool_step, final = traj.steps
    assert {s.agent for s in traj.steps} == {"weather_agent"}  # the AGENT span names it
    assert traj.task == QUESTION  # the chain's input
    assert traj.metadata["root_span"] == "weather_agent"
    assert (
        first.attributes["model"] == "gpt-4o"
        and first.attributes["provider"] == "scriptedchatmodel"
    )
    assert "parameters" not in first.attributes  # "stop": null is no request parameter
    # the result is the ToolMessage's content, the arguments are named from the call
    assert tool_step.attributes["arguments_from"] == "llm tool call"
    assert tool_step.attributes["tool_description"] == "The weather in a city."
    assert final.attributes["input_tokens"] == 20


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("factory", ["create_react_agent", "create_agent"])
def test_a_prebuilt_langgraph_agent_becomes_llm_tool_llm(
    db_path, provider, instrument, factory, how
):
    instrument()
    traj = captured(how, db_path, provider, lambda: run_graph(factory))
    spans = provider[1].get_finished_spans()
    kinds = [s.attributes["openinference.span.kind"] for s in spans]
    assert kinds.count("LLM") == 2 and kinds.count("TOOL") == 1
    if factory == "create_react_agent":
        # the model node is called AGENT for its name ("agent"), like the graph itself
        assert [s.name for s in spans if s.attributes["openinference.span.kind"] == "AGENT"] == [
            "agent",
            "agent",
            "weather_agent",
        ]
    assert {s.attributes["session.id"] for s in spans} == {"t1"}

    # graph, nodes, prompts and routers are containers: three steps from 15 or 7 spans
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, MODEL_RUN),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, MODEL_RUN),
    ]
    assert traj.metadata["capture"]["spans"] == len(spans)
    assert traj.session_id == "t1"
    assert traj.metadata["root_span"] == "weather_agent"
    # the graph's state in the parts shape, not LangChain's dump with per-run message ids
    assert traj.task == {"messages": [USER]}
    # every step is the graph's, the model node "agent" included
    assert {s.agent for s in traj.steps} == {"weather_agent"}

    first, tool_step, final = traj.steps
    assert first.inputs == {
        "messages": [text("system", SYSTEM), USER],
        "tools": [TOOL_DEFINITION],
        "model": "gpt-4o",
    }
    assert first.action == [{"role": "assistant", "parts": [CALL_PART]}]
    assert first.attributes["tool_calls"] == ["c1"]
    assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (12, 5)

    assert tool_step.inputs == {"arguments": {"city": "Paris"}}
    assert tool_step.action == "rainy in Paris"
    assert tool_step.attributes["requested_by"] == 0
    assert tool_step.attributes["tool_call_id"] == "c1"

    # the agent names its own messages in the state it feeds back
    assert final.inputs["messages"] == [
        text("system", SYSTEM),
        USER,
        {"role": "assistant", "parts": [CALL_PART], "name": "weather_agent"},
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "response": "rainy in Paris", "id": "c1"}],
            "name": "get_weather",
        },
    ]
    assert final.action == [text("assistant", ANSWER)]

    report = traj.metadata["capture"]
    assert report["replayable"] is True and report["notes"] == []
    assert report["steps_without_content"] == [] and report["opaque_steps"] == []
    assert report["tool_steps_without_result"] == [] and report["unanswered_tool_calls"] == []


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("hide", ["config", "env"])
def test_hidden_content_is_reported_not_read_as_redacted_text(
    db_path, provider, instrument, monkeypatch, hide, how
):
    if hide == "env":
        monkeypatch.setenv("OPENINFERENCE_HIDE_INPUTS", "true")
        monkeypatch.setenv("OPENINFERENCE_HIDE_OUTPUTS", "true")
        instrument()
    else:
        instrument(TraceConfig(hide_inputs=True, hide_outputs=True))
    traj = captured(how, db_path, provider, lambda: run_graph("create_react_agent"))
    (tool_span,) = spans_named(provider[1], "get_weather")
    assert tool_span.attributes["input.value"] == "__REDACTED__"
    assert tool_span.attributes["output.value"] == "__REDACTED__"

    # the structure survives: kinds, names, the acting agent, the thread
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, MODEL_RUN),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, MODEL_RUN),
    ]
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    assert traj.session_id == "t1"
    # what is not content survives too: model, usage, tool description
    assert traj.steps[0].attributes["model"] == "gpt-4o"
    assert traj.steps[0].attributes["input_tokens"] == 12
    assert traj.steps[1].attributes["tool_description"] == "The weather in a city."
    # the placeholder is not content: no step, and not the task, holds "__REDACTED__"
    for step in traj.steps:
        assert step.inputs is None and step.action is None
    assert traj.task == {"root_span": "weather_agent"}

    report = traj.metadata["capture"]
    assert report["replayable"] is False
    assert report["steps_without_content"] == [0, 1, 2]
    assert report["tool_steps_without_result"] == [1]
    assert sum("OPENINFERENCE_HIDE_INPUTS" in note for note in report["notes"]) == 3
    assert any("no message content was captured" in note for note in report["notes"])


@pytest.mark.parametrize("how", ["processor", "spans"])
def test_calls_without_a_parent_run_are_one_trajectory_under_using_session(
    db_path, provider, instrument, how
):
    """With no enclosing run, every LangChain call is a trace of its own; OpenInference's
    ``using_session`` puts ``session.id`` on each, and the traces become one trajectory."""
    instrument()

    def loop() -> str:
        llm = scripted_model().bind_tools([get_weather])
        with using_session("s1"):
            messages = [SystemMessage(SYSTEM), HumanMessage(QUESTION)]
            request = llm.invoke(messages)
            messages += [request, *(get_weather.invoke(call) for call in request.tool_calls)]
            return llm.invoke(messages).content

    traj = captured(how, db_path, provider, loop)
    spans = provider[1].get_finished_spans()
    assert len(spans) == 3 and all(s.parent is None for s in spans)  # three traces
    assert len({s.context.trace_id for s in spans}) == 3
    assert traj.session_id == "s1"
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, MODEL_RUN),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, MODEL_RUN),
    ]
    tool_step = traj.steps[1]
    assert (tool_step.attributes["requested_by"], tool_step.attributes["tool_call_id"]) == (0, "c1")
    assert traj.metadata["capture"]["replayable"] is True


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("handled", [True, False], ids=["handled", "raised"])
def test_a_tool_that_fails_is_a_failed_tool_step(db_path, provider, instrument, handled, how):
    """``langchain_weather``'s agent with the weather service down (its prompt templates are
    ``PROMPT`` spans). Raised, the tool's and the agent's spans end in ERROR with the exception
    event and, as description, the repr and traceback of the error; handled, the TOOL span is
    OK and its output the ``ToolMessage`` of status ``error``."""
    instrument()
    agent = broken_agent(handled=handled)
    expect = ANSWER if handled else TimeoutError
    traj = captured(how, db_path, provider, lambda: agent.invoke(QUESTION), expect=expect)

    (tool_span,) = spans_named(provider[1], "get_weather")
    (root,) = spans_named(provider[1], "weather_agent")
    prompts = spans_named(provider[1], "ChatPromptTemplate")
    assert {p.attributes["openinference.span.kind"] for p in prompts} == {"PROMPT"}
    if handled:
        assert tool_span.status.status_code is StatusCode.OK and not tool_span.events
        message = json.loads(tool_span.attributes["output.value"])["data"]
        assert (message["content"], message["status"]) == (TIMED_OUT, "error")
    else:
        for span in (tool_span, root):
            assert span.status.status_code is StatusCode.ERROR
            assert span.status.description.startswith(f"TimeoutError('{TIMED_OUT}')Traceback")
            (event,) = span.events
            assert (event.attributes["exception.type"], event.attributes["exception.message"]) == (
                "TimeoutError",
                TIMED_OUT,
            )
            assert "output.value" not in span.attributes

    # regressions: the exception event's message, not the description; the ToolMessage's
    # status; prompt templates are no (opaque) steps
    assert_broken_weather(traj, handled=handled, llm_name=MODEL_RUN)
