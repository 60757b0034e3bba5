"""TrajectorySpanProcessor behaviour: broken stores, flushing, late and split traces, sampling,
native runs, forks. Real SDK, real SQLite files."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from agent_replay import CheckpointStore, Session, StepKind
from agent_replay.otel import TrajectorySpanProcessor, attach

CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}


def tool(name: str, call_id: str = "c1") -> dict:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.result": json.dumps(name),
    }


def agent_span(tracer: trace.Tracer, name: str = "bot", **extra):
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name, **extra}
    return tracer.start_as_current_span(f"invoke_agent {name}", attributes=attributes)


def emit_run(tracer: trace.Tracer, name: str = "bot", **extra) -> None:
    with agent_span(tracer, name, **extra):
        with tracer.start_as_current_span("chat m", attributes=CHAT):
            pass
        with tracer.start_as_current_span("execute_tool t", attributes=tool("t")):
            pass


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    tracer_provider = TracerProvider()
    yield tracer_provider
    tracer_provider.shutdown()


def stored(db_path: Path) -> dict:
    with CheckpointStore(db_path) as store:
        assert all(r.ok for r in store.verify())
        return {sid: store.load(sid) for sid in store.session_ids()}


# -- a broken store never reaches the application ---------------------------------------------


def test_a_deleted_store_file_is_counted_and_logged_not_raised(db_path, provider, caplog):
    # no scheduled flushes: exactly the two forced ones below touch the store
    processor = attach(db_path, tracer_provider=provider, schedule_delay_millis=600_000)
    tracer = provider.get_tracer("app")
    emit_run(tracer)
    assert processor.force_flush()
    assert processor.stats()["sessions_written"] == 1
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    with caplog.at_level(logging.ERROR, logger="agent_replay"):
        emit_run(tracer)  # the application carries on
        emit_run(tracer)
        assert not processor.force_flush()  # the flush says its write failed
        emit_run(tracer)
        assert not processor.force_flush()
    assert processor.stats()["errors"] == 2
    logged = [r for r in caplog.records if "failed to store captured spans" in r.getMessage()]
    assert len(logged) == 1, "a failing store is logged once, then summarised"
    assert "deleted or replaced" in logged[0].exc_text


def test_a_store_locked_by_another_writer_is_counted_not_waited_for(db_path, provider):
    store = CheckpointStore(db_path, busy_timeout=0.05)
    processor = attach(store, tracer_provider=provider)
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        tracer = provider.get_tracer("app")
        emit_run(tracer)
        assert not processor.force_flush(timeout_millis=10_000)  # its write failed
        assert processor.stats()["errors"] == 1
        assert processor.stats()["sessions_written"] == 0
    finally:
        other.execute("ROLLBACK")
        other.close()
    emit_run(tracer)  # the store works again once the lock is released
    assert processor.force_flush()
    # both runs: the one whose write failed was kept for the next flush
    assert processor.stats()["sessions_written"] == 2
    assert len(store.session_ids()) == 2
    store.close()


def test_a_closed_store_is_counted(db_path, provider):
    processor = attach(db_path, tracer_provider=provider)
    processor.store.close()
    emit_run(provider.get_tracer("app"))
    assert not processor.force_flush()
    assert processor.stats()["errors"] == 1


def test_the_hooks_swallow_their_own_failures(db_path, provider):
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    processor = attach(db_path, tracer_provider=provider)
    exporter = InMemorySpanExporter()  # the application's own pipeline, after ours
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor._queue = None  # type: ignore[assignment]  # break the processor's own state
    processor._skip = None  # type: ignore[assignment]
    emit_run(provider.get_tracer("app"))  # must not raise (the SDK does not catch for us)
    assert len(exporter.get_finished_spans()) == 3  # and the spans still reach the exporter


def test_an_unstorable_attribute_costs_no_other_trace(db_path, provider):
    processor = attach(db_path, tracer_provider=provider, schedule_delay_millis=60_000)
    tracer = provider.get_tracer("app")
    emit_run(tracer, "good", **{"gen_ai.conversation.id": "good"})
    emit_run(tracer, "bad\udc80", **{"gen_ai.conversation.id": "bad"})  # lone surrogate
    assert processor.force_flush()  # both traces are assembled in one batch
    assert processor.stats()["errors"] == 0
    sessions = stored(db_path)
    assert set(sessions) == {"good", "bad"}
    assert sessions["bad"].steps[0].agent == "bad\\udc80"


# -- flushing and trace completeness -----------------------------------------------------------


def test_force_flush_and_shutdown_drain_everything(db_path, provider):
    processor = attach(db_path, tracer_provider=provider, schedule_delay_millis=60_000)
    tracer = provider.get_tracer("app")
    for _ in range(3):
        emit_run(tracer)
    assert processor.stats()["sessions_written"] == 0  # nothing written on the app's thread
    assert processor.force_flush()
    assert processor.stats()["sessions_written"] == 3
    with agent_span(tracer):
        with tracer.start_as_current_span("chat m", attributes=CHAT):
            pass
        provider.shutdown()  # the root is still open: shutdown stores what there is
    assert processor.stats()["queued"] == 0 and processor.stats()["pending_spans"] == 0
    assert len(stored(db_path)) == 4
    assert processor.store._closed  # the processor opened it, the processor closed it
    emit_run(tracer)  # after shutdown: ignored, no error
    assert processor.stats()["errors"] == 0


def test_a_trace_waits_for_its_root(db_path, provider):
    processor = attach(db_path, tracer_provider=provider, schedule_delay_millis=5)
    tracer = provider.get_tracer("app")
    with agent_span(tracer):
        with tracer.start_as_current_span("chat m", attributes=CHAT):
            pass
        with tracer.start_as_current_span("execute_tool t", attributes=tool("t")):
            pass
        # the worker has taken both children and flushed (not forced): nothing is written
        wait_for(lambda: processor.stats()["spans_seen"] == 2)
        processor._wake.set()
        time.sleep(0.05)
        assert processor.stats()["sessions_written"] == 0
        assert processor.stats()["pending_spans"] == 2
    wait_for(lambda: processor.stats()["sessions_written"] == 1)  # the root ended
    (traj,) = stored(db_path).values()
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL]
    assert traj.metadata["root_span"] == "invoke_agent bot"


def test_a_late_span_reassembles_a_written_trace(db_path, provider):
    processor = attach(db_path, tracer_provider=provider)
    tracer = provider.get_tracer("app")
    with agent_span(tracer) as root:
        with tracer.start_as_current_span("chat m", attributes=CHAT):
            pass
        late = tracer.start_span("execute_tool late", attributes=tool("late"))
    assert not root.is_recording()
    assert processor.force_flush()
    (first,) = stored(db_path).values()
    assert [s.name for s in first.steps] == ["chat m"]
    late.end()  # e.g. a background task that outlived its agent run
    assert processor.force_flush()
    (second,) = stored(db_path).values()
    assert second.session_id == first.session_id
    assert [s.name for s in second.steps] == ["chat m", "late"]


def test_written_traces_are_remembered_within_a_memory_bound(db_path, provider):
    prompt = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "x" * 5000}]}])
    # one trace is estimated at about 7 kB (tests/store/test_memory_estimate.py): two fit
    processor = attach(db_path, tracer_provider=provider, remember_bytes=16_000)
    tracer = provider.get_tracer("app")
    lates = []
    for turn in range(3):
        with agent_span(tracer):
            with tracer.start_as_current_span(
                "chat m", attributes={**CHAT, "gen_ai.input.messages": prompt}
            ):
                pass
            lates.append(tracer.start_span("execute_tool late", attributes=tool(f"t{turn}")))
        assert processor.force_flush()
        sink = processor._sink
        assert sink.remembered_bytes <= 16_000 and len(sink._done) == min(turn + 1, 2)
    lates[0].end()  # its trace was forgotten: stored on its own, merged with its session
    lates[2].end()  # its trace is remembered: re-assembled whole
    assert processor.force_flush()
    sessions = stored(db_path)
    assert len(sessions) == 3
    names = sorted(tuple(s.name for s in t.steps) for t in sessions.values())
    assert names == [("chat m",), ("chat m", "t0"), ("chat m", "t2")]


def test_one_conversation_over_two_traces_is_one_session(db_path, provider):
    processor = attach(db_path, tracer_provider=provider)
    tracer = provider.get_tracer("app")
    for turn in ("first", "second"):
        with agent_span(tracer, **{"gen_ai.conversation.id": "conv-9"}):
            with tracer.start_as_current_span(f"chat {turn}", attributes=CHAT):
                pass
        assert processor.force_flush()  # the second turn meets the stored first one
    sessions = stored(db_path)
    assert list(sessions) == ["conv-9"]
    traj = sessions["conv-9"]
    assert [s.name for s in traj.steps] == ["chat first", "chat second"]
    assert len(traj.metadata["trace_ids"]) == 2


@pytest.mark.parametrize("crashing", [1, 2])
def test_a_conversations_outcome_does_not_depend_on_flush_timing(db_path, provider, crashing):
    """QA: turn 2's agent crashed: with both turns in one flush the session was 'unknown'
    (the outcome came from the earliest trace's root alone), with a flush between them
    'failed'. A conversation failed when a turn did, whatever the flushes."""
    processor = attach(db_path, tracer_provider=provider)
    tracer = provider.get_tracer("app")
    for conv, flush in (("together", False), ("flushed", True)):
        for turn in (1, 2):
            try:
                with agent_span(tracer, **{"gen_ai.conversation.id": conv}):
                    with tracer.start_as_current_span(f"chat {turn}", attributes=CHAT):
                        pass
                    if turn == crashing:
                        raise ValueError(f"turn {turn} crashed")
            except ValueError:
                pass
            if flush:
                assert processor.force_flush()
    assert processor.force_flush()
    sessions = stored(db_path)
    for conv in ("together", "flushed"):
        outcome = sessions[conv].outcome
        assert outcome.failed and outcome.error["message"] == f"turn {crashing} crashed"


class RecordOnly(Sampler):
    """Spans are recorded (processors see them) but not sampled."""

    def should_sample(
        self, parent_context, trace_id, name, kind=None, attributes=None, links=None
    ) -> SamplingResult:
        decision = (
            Decision.RECORD_AND_SAMPLE if name.startswith("sampled") else Decision.RECORD_ONLY
        )
        return SamplingResult(decision, attributes)

    def get_description(self) -> str:
        return "record-only unless the name starts with 'sampled'"


def test_unsampled_spans_are_skipped(db_path):
    provider = TracerProvider(sampler=RecordOnly())
    processor = attach(db_path, tracer_provider=provider)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("unsampled chat", attributes=CHAT) as span:
        assert span.is_recording() and not span.get_span_context().trace_flags.sampled
    with tracer.start_as_current_span("sampled chat", attributes=CHAT):
        pass
    assert processor.force_flush()
    assert processor.stats()["spans_seen"] == 1
    (traj,) = stored(db_path).values()
    assert [s.name for s in traj.steps] == ["sampled chat"]
    provider.shutdown()


# -- native runs are stored once ----------------------------------------------------------------


def test_an_instrumented_llm_call_inside_a_native_step_is_not_stored_twice(
    db_path, provider, monkeypatch
):
    import httpx2
    import openai
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    def handler(request: httpx2.Request) -> httpx2.Response:
        message = {"role": "assistant", "content": "rainy"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m"}
        return httpx2.Response(200, json={**body, "choices": [choice]})

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    processor = attach(db_path, tracer_provider=provider)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(
            api_key="sk-test",
            base_url="http://127.0.0.1:9/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        )

        def ask(ctx, question):
            def call():
                reply = client.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=[{"role": "user", "content": question}],
                    tools=[],
                )
                return reply.choices[0].message.content

            return ctx.llm("answer", produce=call, question=question)

        with Session(db_path, tracer_provider=provider) as session:
            traj = session.record(ask, {"question": "Weather in Paris?"}, session_id="native")
    finally:
        instrumentor.uninstrument()
    assert processor.force_flush()
    assert processor.stats()["sessions_written"] == 0
    assert traj.steps[0].output == "rainy"
    assert list(stored(db_path)) == ["native"]


def test_spans_below_a_native_step_on_another_thread_are_skipped(db_path, provider):
    """A worker thread that the step's OTel context reached (as threading instrumentations
    propagate it) but the step's own context variables did not."""
    from agent_replay import record

    processor = attach(db_path, tracer_provider=provider)
    tracer = provider.get_tracer("app")

    def in_thread(parent_context) -> None:
        token = otel_context.attach(parent_context)
        try:
            with tracer.start_as_current_span("chat m", attributes=CHAT):
                with tracer.start_as_current_span("POST /v1/chat"):
                    pass
        finally:
            otel_context.detach(token)

    def produce():
        worker = threading.Thread(target=in_thread, args=(otel_context.get_current(),))
        worker.start()
        worker.join()
        return "done"

    record(lambda ctx: ctx.llm("threaded", produce=produce), tracer_provider=provider)
    assert processor.force_flush()
    assert processor.stats()["spans_seen"] == 0
    assert processor.stats()["sessions_written"] == 0


def test_genai_spans_outside_native_steps_are_still_captured(db_path, provider):
    """Only a step's policy is recorded natively; an LLM call the agent body makes without
    ctx is captured from its span, so it is not lost."""
    from agent_replay import record

    processor = attach(db_path, tracer_provider=provider)
    tracer = provider.get_tracer("app")

    def agent(ctx):
        ctx.llm("native", produce=lambda: 1)
        with tracer.start_as_current_span("chat direct", attributes=CHAT):
            pass

    record(agent, tracer_provider=provider)
    assert processor.force_flush()
    (traj,) = stored(db_path).values()
    assert [s.name for s in traj.steps] == ["chat direct"]


# -- fork ---------------------------------------------------------------------------------------


def _child(processor: TrajectorySpanProcessor, tracer_provider: TracerProvider) -> None:
    try:
        otel_context.attach(otel_context.Context())  # a trace of its own, not the parent's
        emit_run(tracer_provider.get_tracer("child"), "child")
        ok = processor.force_flush(timeout_millis=20_000)
        os._exit(0 if ok and processor.stats()["sessions_written"] == 1 else 3)
    except BaseException:
        os._exit(1)


def test_a_forked_child_captures_with_its_own_worker(db_path, provider):
    processor = attach(db_path, tracer_provider=provider)
    tracer = provider.get_tracer("parent")
    with agent_span(tracer, "parent"):
        with tracer.start_as_current_span("chat m", attributes=CHAT):
            pass
        assert processor.force_flush()  # the parent's chat span is pending in its sink
        child = multiprocessing.get_context("fork").Process(
            target=_child, args=(processor, provider)
        )
        child.start()
        child.join(60)
        assert child.exitcode == 0
    assert processor.force_flush()
    sessions = stored(db_path)
    assert sorted(t.steps[0].agent for t in sessions.values()) == ["child", "parent"]
    assert all(len(t.steps) in (1, 2) for t in sessions.values())


def test_a_conversation_id_equal_to_a_native_session_id_never_takes_or_merges_it(db_path, provider):
    """A native agent whose session id is also the conversation id of an instrumented call
    it makes outside its steps: the native run is stored as recorded, whichever is written
    first, and the captured spans go to ``<id>.otel``."""
    processor = attach(db_path, provider)
    tracer = provider.get_tracer("t")

    def agent(ctx):
        first = ctx.llm("plan", produce=lambda: "go")
        emit_run(tracer, **{"gen_ai.conversation.id": ctx.session_id})  # outside ctx steps
        processor.force_flush()  # the otel trace is written while the native run goes on
        return first

    with Session(db_path) as session:
        session.record(agent, session_id="chat-7")
        emit_run(tracer, **{"gen_ai.conversation.id": "chat-7"})  # a later turn, same id
        processor.force_flush()
    sessions = stored(db_path)
    assert set(sessions) == {"chat-7", "chat-7.otel"}
    native = sessions["chat-7"]
    assert native.metadata["source"] == "native" and [s.name for s in native.steps] == ["plan"]
    assert len(sessions["chat-7.otel"].metadata["trace_ids"]) == 2  # both turns, continued


def test_a_trace_the_locked_store_refuses_is_held_and_stored_once_the_lock_is_gone(
    db_path, provider
):
    """A store locked by another writer is no trace's fault: nothing is dropped however
    many writes fail (the trace was dropped after three)."""
    store = CheckpointStore(db_path, busy_timeout=0.05)
    processor = attach(store, tracer_provider=provider, schedule_delay_millis=600_000)
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        emit_run(provider.get_tracer("app"))
        for _ in range(5):
            assert not processor.force_flush(timeout_millis=10_000)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert processor.stats()["dropped_traces"] == 0 and processor.stats()["pending_spans"] > 0
    assert processor.force_flush() and len(store.session_ids()) == 1
    assert processor.stats()["pending_spans"] == 0
    store.close()


def test_spans_dropped_on_a_full_queue_are_in_the_capture_report(db_path, provider):
    """A full queue loses spans (counted in stats); the trace's stored session must say so
    instead of claiming to be replayable."""
    processor = attach(
        db_path, tracer_provider=provider, max_queue_size=5, schedule_delay_millis=600_000
    )
    tracer = provider.get_tracer("app")
    with agent_span(tracer):
        for n in range(20):
            with tracer.start_as_current_span(f"execute_tool t{n}", attributes=tool(f"t{n}")):
                pass
    assert processor.stats()["dropped"] == 16  # 5 queued, the other 15 tools and the agent
    assert processor.force_flush()
    (trajectory,) = stored(db_path).values()
    report = trajectory.metadata["capture"]
    assert report["dropped_spans"] == 16 and report["replayable"] is False
    assert any("dropped before capture" in note for note in report["notes"])
