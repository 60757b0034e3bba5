"""The Langfuse SDK's own OTel spans, recorded offline and read by the ``langfuse`` dialect.

The real ``langfuse`` client (v3+ is built on OpenTelemetry) is given its own
``TracerProvider`` and an in-memory ``span_exporter``, so its Langfuse span processor exports
nowhere; its base URL is an unused local port and nothing here calls the API. A second
in-memory exporter (or agent-replay's span processor) on the same provider sees the spans.
The agent: an ``agent`` observation (``@observe``) around a generation opened with
``start_as_current_observation``, a ``@observe`` tool, and a ``@observe`` generation that sets
its model and usage with ``update_current_generation``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_replay import CheckpointStore, StepKind
from agent_replay.interop import from_otel_spans
from agent_replay.otel import attach
from weather_run import ANSWER, CALL, QUESTION, assert_weather_trajectory

langfuse = pytest.importorskip("langfuse")
from langfuse._client.resource_manager import LangfuseResourceManager  # noqa: E402

PUBLIC_KEY = "pk-lf-agent-replay-test"
SESSION = "sess-1"
TOOL_CALL_MESSAGE = {"role": "assistant", "content": None, "tool_calls": [CALL]}


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


def run_agent(client: Any, *, tool_fails: bool = False) -> str:
    @langfuse.observe(as_type="tool")
    def get_weather(city: str) -> str:
        if tool_fails:
            raise TimeoutError("weather service timed out")
        return f"rainy in {city}"

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
