"""A LangChain agent traced twice over, as users often run it: the LangChain instrumentation and
an OpenAI instrumentation on the same provider. Real packages, offline.

``langchain_openai.ChatOpenAI`` talks to a fake server (``httpx2.MockTransport``: a tool call,
then the answer); the agent is LangChain's ``create_agent`` with the ``get_weather`` tool of
``langchain_weather``. Traced by ``openinference-instrumentation-langchain`` 0.1.80 and either
``openinference-instrumentation-openai`` 0.1.66 or ``opentelemetry-instrumentation-genai-openai``
1.3b0.

What really happens: the LangChain instrumentation never makes its spans current (by design:
callbacks cannot guarantee a detach), so the OpenAI instrumentation's span of each model call
starts a trace of its own instead of nesting in LangChain's LLM span. The agent's trajectory is
therefore whole from LangChain's spans alone, and each provider call is a one-step trajectory
beside it, holding the same call.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from agent_replay import CheckpointStore, StepKind, Trajectory
from agent_replay.ingest import load
from agent_replay.otel import attach
from instrumenting import openai_instrumentor
from langchain_weather import chat_openai, get_weather
from weather_run import ANSWER, CALL_PART, QUESTION, text

TOOL_DEFINITION = {"type": "function", **convert_to_openai_tool(get_weather)["function"]}


def run_agent() -> str:
    agent = create_agent(
        chat_openai(), [get_weather], system_prompt="Be brief.", name="weather_agent"
    )
    state = agent.invoke({"messages": [HumanMessage(QUESTION)]})
    return state["messages"][-1].content


@pytest.fixture(params=["openinference", "gen_ai"])
def instrumented(request, provider, monkeypatch) -> Iterator[str]:
    """LangChain and one OpenAI instrumentation, for this test only; yields the latter's name."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    instrumentors = [LangChainInstrumentor(), openai_instrumentor(request.param)]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider[0])
    yield request.param
    for instrumentor in instrumentors:
        instrumentor.uninstrument()
    provider[1].clear()
    assert run_agent() == ANSWER
    assert provider[1].get_finished_spans() == ()  # nothing leaks into later tests


def trajectories(how: str, db_path, provider) -> list[Trajectory]:
    tracer_provider, exporter = provider
    processor = attach(db_path, tracer_provider=tracer_provider) if how == "processor" else None
    assert run_agent() == ANSWER
    if processor is None:  # exported as OTLP protobuf and imported, trace by trace
        return load(encode_spans(exporter.get_finished_spans()).SerializeToString())
    assert processor.force_flush() and processor.stats()["errors"] == 0
    with CheckpointStore(db_path) as store:
        return [store.load(session_id) for session_id in store.session_ids()]


@pytest.mark.parametrize("how", ["processor", "spans"])
def test_the_agent_is_whole_and_each_provider_call_is_a_trace_beside_it(
    db_path, provider, instrumented, how
):
    trajs = trajectories(how, db_path, provider)
    spans = provider[1].get_finished_spans()

    # what the instrumentations really write: the provider's span of each call has no parent
    if instrumented == "openinference":
        calls = [s for s in spans if s.name == "ChatCompletion"]
    else:
        calls = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(calls) == 2 and all(s.parent is None for s in calls)
    assert len({s.context.trace_id for s in spans}) == 3

    (traj,) = [t for t in trajs if len(t.steps) == 3]
    assert [(s.kind, s.name) for s in traj.steps] == [
        (StepKind.LLM, "ChatOpenAI"),
        (StepKind.TOOL, "get_weather"),
        (StepKind.LLM, "ChatOpenAI"),
    ]
    first, tool_step, final = traj.steps
    assert first.inputs["messages"] == [text("system", "Be brief."), text("user", QUESTION)]
    assert first.inputs["tools"] == [TOOL_DEFINITION]
    assert first.action == [{"role": "assistant", "parts": [CALL_PART]}]
    assert (first.attributes["input_tokens"], first.attributes["output_tokens"]) == (12, 5)
    assert (final.attributes["input_tokens"], final.attributes["output_tokens"]) == (20, 6)
    assert tool_step.inputs == {"arguments": {"city": "Paris"}}
    assert tool_step.action == "rainy in Paris"
    assert (tool_step.attributes["requested_by"], tool_step.attributes["tool_call_id"]) == (0, "c1")
    assert [m["role"] for m in final.inputs["messages"]] == ["system", "user", "assistant", "tool"]
    assert final.action == [text("assistant", ANSWER)]
    assert {s.agent for s in traj.steps} == {"weather_agent"}
    report = traj.metadata["capture"]
    assert report["replayable"] is True and report["notes"] == []
    traj.verify()

    # each provider call on its own: the same call as the agent's llm step
    alone = sorted((t for t in trajs if t is not traj), key=lambda t: t.steps[0].started_ns)
    assert [[s.kind for s in t.steps] for t in alone] == [[StepKind.LLM], [StepKind.LLM]]
    for single, step in zip(alone, (first, final), strict=True):
        (call,) = single.steps
        # the same messages (LangChain also names the tool message, the API request does not)
        assert [(m["role"], m["parts"]) for m in call.inputs["messages"]] == [
            (m["role"], m["parts"]) for m in step.inputs["messages"]
        ]
        assert call.action == step.action
        assert step.started_ns <= call.started_ns <= call.ended_ns <= step.ended_ns
