"""Intercepted calls next to real OTel instrumentations of the same SDK, with the real processor.

Spans must still reach the user's exporter, and each call must be one step: recorded by the
interception with full content, never stored a second time by the TrajectorySpanProcessor from
the instrumentation's span, whichever was installed first.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_replay import CheckpointStore, ReplayPlan, instrument
from agent_replay.capture.context import INTERCEPTED_ATTRIBUTE
from agent_replay.instrument import record_agent, replay_agent
from agent_replay.otel import attach
from instrumenting import uninstrument


def genai_openai():
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    return OpenAIInstrumentor(), "opentelemetry.instrumentation.genai.openai"


def openinference_openai():
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor(), "openinference.instrumentation.openai"


def traceloop_openai():
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor(), "opentelemetry.instrumentation.openai.v1"


INSTRUMENTATIONS = [genai_openai, openinference_openai, traceloop_openai]


def two_call_agent(client):
    def agent(question):
        first = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
        )
        second = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "user", "content": question},
                first.choices[0].message,
                {"role": "user", "content": "thanks"},
            ],
        )
        return second.choices[0].message.content

    return agent


@pytest.fixture
def telemetry(db_path, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    provider = TracerProvider()
    exporter = InMemorySpanExporter()  # stands for the user's backend
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = attach(db_path, tracer_provider=provider)
    yield provider, exporter, processor
    provider.shutdown()


def _sdk_spans(exporter, scope):
    return [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == scope]


@pytest.mark.parametrize("make_instrumentor", INSTRUMENTATIONS, ids=lambda f: f.__name__)
def test_without_a_run_the_processor_stores_the_instrumentations_spans(
    make_instrumentor, telemetry, make_api, db_path
):
    """The control: the instrumentation's spans are real GenAI steps for the processor, so
    the tests below would fail if interception let them through."""
    provider, exporter, processor = telemetry
    api = make_api()
    instrumentor, scope = make_instrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with instrument.installed("openai"):
            two_call_agent(api.openai())("hi")
    finally:
        uninstrument(instrumentor)  # Traceloop's own leaves its wrappers in place
    assert processor.force_flush()
    assert len(_sdk_spans(exporter, scope)) == 2
    assert processor.stats()["spans_seen"] == 2  # both reached the processor's sink
    if scope.startswith("opentelemetry.instrumentation.genai"):  # a dialect the mapping reads
        with CheckpointStore(db_path) as store:
            sessions = store.list_sessions()
            steps = [step for s in sessions for step in store.load(s.session_id).steps]
        assert len(steps) == 2 and {s.kind.value for s in steps} == {"llm"}


@pytest.mark.parametrize("instrument_first", [True, False], ids=["otel-first", "patch-first"])
@pytest.mark.parametrize("make_instrumentor", INSTRUMENTATIONS, ids=lambda f: f.__name__)
def test_one_step_per_call_whichever_is_installed_first(
    make_instrumentor, instrument_first, telemetry, make_api
):
    provider, exporter, processor = telemetry
    api = make_api()
    agent = two_call_agent(api.openai())
    instrumentor, scope = make_instrumentor()
    if instrument_first:
        instrumentor.instrument(tracer_provider=provider)
    installation = instrument.install("openai")
    if not instrument_first:
        instrumentor.instrument(tracer_provider=provider)
    try:
        traj = record_agent(agent, {"question": "hi"}, tracer_provider=provider)
        held = replay_agent(agent, traj)
        redrawn = replay_agent(agent, traj, ReplayPlan.ablate_from(1))
    finally:  # undone in the reverse order of installing, or one unwraps the other
        if instrument_first:
            installation.undo()
        uninstrument(instrumentor)  # Traceloop's own leaves its wrappers in place
        if not instrument_first:
            installation.undo()
    assert processor.force_flush()

    # one step per call, with full content, in the recording
    assert [s.name for s in traj.steps] == ["openai.chat.completions.create"] * 2
    assert traj.steps[1].inputs["messages"][1]["__agent_replay__"] == "pydantic"
    assert held.live_steps == 0 and redrawn.live_steps == 1
    assert api.count == 3

    # the user's backend still got the instrumentation's spans for every live call
    sdk_spans = _sdk_spans(exporter, scope)
    assert len(sdk_spans) >= 3
    # ... and the processor took none of them: no second copy of the steps
    assert processor.stats()["spans_seen"] == 0
    assert processor.stats()["sessions_written"] == 0
    if not instrument_first and scope.startswith("opentelemetry.instrumentation.genai"):
        # wrapped from outside: the span that opened before the step is marked as ours
        assert all(s.attributes.get(INTERCEPTED_ATTRIBUTE) is True for s in sdk_spans)


def test_an_undone_patch_under_a_later_instrumentation_becomes_a_pass_through(telemetry, make_api):
    provider, exporter, _processor = telemetry
    api = make_api()
    instrumentor, scope = genai_openai()
    installation = instrument.install("openai")
    instrumentor.instrument(tracer_provider=provider)
    try:
        installation.undo()  # ours is under theirs: it must not take theirs away
        traj = record_agent(two_call_agent(api.openai()), {"question": "hi"})
        assert traj.steps == ()  # not intercepted any more
        assert len(_sdk_spans(exporter, scope)) == 2  # their wrapper still works
    finally:
        uninstrument(instrumentor)  # Traceloop's own leaves its wrappers in place


def test_the_exporter_form_skips_marked_spans_too(db_path):
    from agent_replay.capture.processor import TrajectorySpanExporter

    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("opentelemetry.instrumentation.genai.openai")
    with tracer.start_as_current_span("chat a", attributes={"gen_ai.operation.name": "chat"}):
        pass
    with tracer.start_as_current_span(
        "chat b", attributes={"gen_ai.operation.name": "chat", INTERCEPTED_ATTRIBUTE: True}
    ):
        pass
    exporter = TrajectorySpanExporter(db_path)
    exporter.export(memory.get_finished_spans())
    assert exporter._sink.spans_seen == 1
    exporter.shutdown()
    provider.shutdown()
