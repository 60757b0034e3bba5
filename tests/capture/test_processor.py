import json
import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from agent_replay import CheckpointStore, record
from agent_replay.otel import attach


def emit_agent_trace(tracer):
    messages = [{"role": "user", "parts": [{"type": "text", "content": "weather?"}]}]
    out = [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "c1",
                    "name": "get_weather",
                    "arguments": {"city": "Paris"},
                }
            ],
        }
    ]
    with tracer.start_as_current_span(
        "invoke_agent weather",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"},
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(messages),
                "gen_ai.output.messages": json.dumps(out),
            },
        ):
            with tracer.start_as_current_span("POST /v1/chat/completions"):
                pass
        with tracer.start_as_current_span(
            "execute_tool get_weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.result": '"rainy"',
            },
        ):
            pass


def test_processor_stores_a_trajectory(db_path):
    provider = TracerProvider()
    processor = attach(db_path, tracer_provider=provider)
    emit_agent_trace(provider.get_tracer("test"))
    with provider.get_tracer("test").start_as_current_span("not an agent"):
        pass
    assert processor.force_flush()
    with CheckpointStore(db_path) as store:
        (summary,) = store.list_sessions()
        traj = store.load(summary.session_id)
    assert [s.label for s in traj.steps] == ["llm:chat gpt-4o", "tool:get_weather"]
    assert traj.steps[0].inputs["messages"][0]["role"] == "user"
    assert traj.steps[1].action == "rainy"
    assert traj.steps[1].attributes["requested_by"] == 0
    assert {s.agent for s in traj.steps} == {"weather"}
    assert processor.stats()["dropped"] == 0
    provider.shutdown()


def test_native_spans_are_not_stored_twice(db_path):
    provider = TracerProvider()
    processor = attach(db_path, tracer_provider=provider)
    record(lambda ctx: ctx.llm("x", produce=lambda: 1), tracer_provider=provider)
    assert processor.force_flush()
    assert processor.stats()["sessions_written"] == 0
    provider.shutdown()


def test_full_queue_drops_and_counts(db_path):
    provider = TracerProvider()
    processor = attach(
        db_path,
        tracer_provider=provider,
        max_queue_size=1,
        schedule_delay_millis=60_000,
        max_export_batch_size=10_000,
    )
    tracer = provider.get_tracer("test")
    for _ in range(5):
        with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
            pass
    assert processor.stats()["dropped"] >= 3
    provider.shutdown()


def test_attach_to_a_provider_that_takes_no_processors_is_a_clear_error_before_opening(
    tmp_path,
):
    """QA: with a NoOpTracerProvider set globally (OTel lets nobody replace it) attach raised
    AttributeError after opening the store and starting its worker thread, which stayed."""
    script = f"""
import threading
from opentelemetry import trace
trace.set_tracer_provider(trace.NoOpTracerProvider())
from agent_replay.otel import attach
try:
    attach({str(tmp_path / "runs.sqlite")!r})
except TypeError as exc:
    print("TypeError:", exc)
print(sorted(t.name for t in threading.enumerate()))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "TypeError: cannot attach to the global tracer provider: NoOpTracerProvider" in out
    assert out.splitlines()[-1] == "['MainThread']"
    assert not (tmp_path / "runs.sqlite").exists()
    with pytest.raises(TypeError, match="the given tracer provider"):
        attach(tmp_path / "runs.sqlite", tracer_provider=trace.NoOpTracerProvider())
    assert not (tmp_path / "runs.sqlite").exists()
