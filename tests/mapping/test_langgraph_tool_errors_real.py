"""A tool that raises inside a prebuilt LangGraph agent, through the real LangChain
instrumentations of OpenInference and Traceloop, offline.

Real agents (langchain 1.5.2's ``create_agent``, langgraph 1.2.24 / langgraph-prebuilt 1.1.3's
``create_react_agent`` on a ``ToolNode``, langchain-core 1.8.3) on the scripted fake chat model
of ``langchain_weather``, whose ``get_weather`` raises ``TimeoutError`` (``broken_graph``),
traced by ``openinference-instrumentation-langchain`` 0.1.80 or Traceloop's
``opentelemetry-instrumentation-langchain`` 0.62.4 on a real SDK provider; the spans are read
both ways (``attach`` into SQLite, ``from_otel_spans``), and the imported trajectory is
replayed by the replay agent.

What LangGraph does with the error: since langgraph-prebuilt 1.0 a ``ToolNode`` handles by
default only the ``ToolInvocationError`` of arguments that do not fit the tool, and re-raises
every error the tool itself raises, so ``create_agent`` as it comes ends the run in the tool's
``TimeoutError``. The error goes to the model as a ``ToolMessage(status="error")`` only when
asked: ``ToolNode(tools, handle_tool_errors=True)`` (its text ``"Error: TimeoutError('...')\\n
Please fix your mistakes."``), or ``create_agent``'s ``ToolErrorMiddleware(on_error)`` (the
text ``on_error`` returns); the model then answers.

What the instrumentations write: LangGraph handles the error *outside* the tool's run, so in
every case the tool's span ends in ERROR with an ``exception`` event (``TimeoutError``, the
message) and no output (OpenInference: the ``TOOL`` span ``get_weather``, the repr and
traceback as description; Traceloop: ``execute_tool get_weather``, ``error.type``, the message,
``gen_ai.task.status=failure``). Handled, the ``tools`` node's span is not failed and its
output is the ``ToolMessage`` of status ``error``, and the graph's spans end well; raised, the
node's and the graph's spans end in ERROR with the same event. Traceloop's instrumentation
wraps ``AgentMiddleware``'s hooks, so with it every middleware of ``create_agent`` gets all
four hook nodes (``before_agent``, ``before_model``, ``after_model``, ``after_agent``) in the
graph: each runs as an ``execute_task`` task span around a hook span with
``gen_ai.operation.name=execute_task`` and ``gen_ai.task.kind`` (the middleware's class) but
no ``traceloop.span.kind``.

Mapping fixed on these spans: a failed tool step linked to its call by name (OpenInference
records no call id on a LangChain tool span) takes what the model was shown from the model's
next input, as one with an id already did; Traceloop's middleware hook spans are workflow
around steps, not opaque steps.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from opentelemetry.trace import StatusCode

from agent_replay import ReplayPlan, StepKind, replay, replayable_agent
from agent_replay.replay.policies import ScriptedPolicy
from instrumenting import instrumented
from langchain_weather import GRAPHS, MODEL_RUN, assert_broken_weather, broken_graph
from stored import captured
from weather_run import ANSWER, QUESTION, TIMED_OUT

VENDORS = {"openinference": LangChainInstrumentor, "traceloop": LangchainInstrumentor}
#: each instrumentation's names for the chat model's, the tool's, the tools node's and the
#: graph's spans
NAMES = {
    "openinference": (MODEL_RUN, "get_weather", "tools", "weather_agent"),
    "traceloop": (
        f"{MODEL_RUN}.chat",
        "execute_tool get_weather",
        "execute_task tools",
        "invoke_agent weather_agent",
    ),
}
HOOKS = ("before_agent", "before_model", "after_model", "after_agent")


def run(factory: str) -> str:
    """``broken_graph(factory)`` asked the weather question on thread ``t1``; its answer."""
    state = broken_graph(factory).invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"configurable": {"thread_id": "t1"}}
    )
    return state["messages"][-1].content


def untraced_run() -> None:
    """After uninstrumenting: the middleware's hook nodes Traceloop added are gone too."""
    nodes = set(broken_graph("create_agent_middleware").get_graph().nodes)
    assert nodes == {"__start__", "model", "tools", "__end__"}
    assert run("create_agent_middleware") == ANSWER


def the_span(spans: Any, name: str) -> Any:
    (span,) = [s for s in spans if s.name == name]
    return span


def tool_message(span: Any, vendor: str) -> dict[str, Any]:
    """The ``ToolMessage`` the tools node's span recorded as its output."""
    if vendor == "openinference":
        (message,) = json.loads(span.attributes["output.value"])["messages"]
        return message["data"]
    (message,) = json.loads(span.attributes["traceloop.entity.output"])["outputs"]["messages"]
    return message["kwargs"]


@pytest.mark.parametrize("how", ["processor", "spans"])
@pytest.mark.parametrize("factory", list(GRAPHS))
@pytest.mark.parametrize("vendor", list(VENDORS))
def test_a_tool_error_in_a_prebuilt_graph_is_a_failed_tool_step(
    db_path, provider, vendor, factory, how
):
    handled, shown = GRAPHS[factory]
    with instrumented(VENDORS[vendor](), provider, untraced_run):
        traj = captured(
            how, db_path, provider, lambda: run(factory), expect=ANSWER if handled else TimeoutError
        )
        spans = provider[1].get_finished_spans()
    llm_name, tool_name, node_name, graph_name = NAMES[vendor]

    # what the instrumentations write: the tool's run raised, whoever handled its error
    tool_span = the_span(spans, tool_name)
    assert tool_span.status.status_code is StatusCode.ERROR
    (event,) = tool_span.events
    assert (event.attributes["exception.type"], event.attributes["exception.message"]) == (
        "TimeoutError",
        TIMED_OUT,
    )
    assert not {"output.value", "traceloop.entity.output"} & set(tool_span.attributes)
    node, graph = the_span(spans, node_name), the_span(spans, graph_name)
    assert graph.parent is None
    if handled:
        for span in (node, graph):
            assert span.status.status_code is not StatusCode.ERROR and not span.events
        message = tool_message(node, vendor)
        assert (message["content"], message["status"]) == (shown, "error")
    else:
        for span in (node, graph):
            assert span.status.status_code is StatusCode.ERROR
            assert span.events[-1].attributes["exception.type"] == "TimeoutError"
    hooks = sorted(s.name for s in spans if "ToolErrorMiddleware" in s.name)
    if vendor == "traceloop" and factory == "create_agent_middleware":
        # a task span and a hook span per hook node, both before_model and after_model twice
        assert hooks == sorted(
            f"execute_task ToolErrorMiddleware.{hook}" for hook in HOOKS * 2 + HOOKS[1:3] * 2
        )
    else:
        assert hooks == []

    # regressions: the failed step linked by name takes what the model was shown; the
    # middleware's hook spans are no opaque steps (the report counts none)
    assert_broken_weather(traj, handled=handled, llm_name=llm_name, shown=shown)
    assert traj.session_id == "t1"
    if handled:
        assert traj.steps[1].attributes["result_from"] == "later llm input"

    # the replay agent serves the failure as recorded: the run that went on goes on
    agent = replayable_agent(traj, {"llm": ScriptedPolicy(["again"])})
    factual = replay(agent, traj)
    if handled:
        assert factual.exception is None and not factual.failed
        assert factual.result["outputs"][1] == shown
        assert factual.trajectory().head_hash == traj.head_hash
        redrawn = replay(agent, traj, ReplayPlan.ablate_from(0), seed=3)
        assert redrawn.exception is None and redrawn.result["outputs"] == ["again", shown, "again"]
    else:  # the tool's failure ended the run: it ends the replay too
        assert factual.failed and TIMED_OUT in factual.exception["message"]
        assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL]
