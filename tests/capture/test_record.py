import asyncio
import time
from decimal import Decimal
from fractions import Fraction

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_replay import ReplayPlan, Session, instrument, record, replay
from agent_replay.errors import CanonicalEncodingError, StoreError, VerifierError
from agent_replay.instrument import record_agent, replay_agent


def agent(ctx, question):
    plan = ctx.llm("plan", produce=lambda: {"q": question}, prompt=question)
    noise = ctx.rng.random()
    hits = ctx.tool(
        "search", produce=lambda: "bug" if ctx.rng.random() < 0.7 else "ok", q=plan["q"]
    )
    stamp = ctx.now()
    draft = ctx.llm("write", produce=lambda inputs: inputs["context"].upper(), context=hits)
    return {"answer": draft, "noise": noise, "stamp": stamp}


def ok(result):
    return result["answer"] == "OK"


def test_record_steps_outcome_and_effects():
    traj = record(agent, {"question": "why"}, seed=3, verifier=ok, session_id="r1")
    assert [s.label for s in traj.steps] == ["llm:plan", "tool:search", "llm:write"]
    assert traj.steps[2].inputs == {"context": traj.steps[1].output}
    assert traj.outcome.failed is (traj.steps[2].output != "OK")
    assert traj.effects[0][:2] == (2, "now")
    traj.verify()


def test_same_seed_same_run():
    a = record(agent, {"question": "why"}, seed=11)
    b = record(agent, {"question": "why"}, seed=11)
    assert [s.output for s in a.steps] == [s.output for s in b.steps]
    assert a.outcome.result["noise"] == b.outcome.result["noise"]


def test_agent_exception_is_the_outcome():
    def broken(ctx):
        ctx.llm("first", produce=lambda: 1)
        raise ValueError("boom")

    traj = record(broken, seed=0)
    assert traj.outcome.failed and traj.outcome.error["type"] == "ValueError"
    assert "boom" in traj.outcome.error["traceback"]
    assert len(traj.steps) == 1


def test_step_exception_is_recorded_and_reraised():
    def agent_catching(ctx):
        try:
            ctx.tool("flaky", produce=lambda: 1 / 0)
        except ZeroDivisionError:
            return "recovered"

    traj = record(agent_catching)
    assert traj.steps[0].error["type"] == "ZeroDivisionError"
    assert traj.outcome.result == "recovered"


def test_exceptions_holding_text_that_utf8_cannot_store_are_recorded_escaped():
    """A step's exception, or the one that ended the run, whose message holds a lone
    surrogate (a decoding error's message does) failed the whole recording with a
    CanonicalEncodingError; it is escaped, as text in captured calls is."""

    def bad_bytes():
        raise ValueError("cannot parse \udc80 in reply")

    def agent(ctx):
        try:
            ctx.tool("parse", produce=bad_bytes)
        except ValueError as exc:
            caught = str(exc)
        raise RuntimeError(f"gave up: {caught}")

    traj = record(agent)
    traj.verify()
    assert traj.steps[0].error["message"] == "cannot parse \\udc80 in reply"
    assert traj.steps[0].error["args"] == ["cannot parse \\udc80 in reply"]
    assert traj.outcome.error["message"] == "gave up: cannot parse \\udc80 in reply"
    assert "\\udc80" in traj.outcome.error["traceback"]
    held = replay(agent, traj)  # served as recorded: the escaped text, the same outcome
    assert held.outcome.error["message"] == "gave up: cannot parse \\udc80 in reply"

    @instrument.tool
    def lookup(key):
        raise KeyError(f"no {key}\ud800")

    def instrumented():
        try:
            lookup("k")
        except KeyError as exc:
            return exc.args[0]

    run = record_agent(instrumented)
    assert run.steps[0].error["args"] == ["no k\\ud800"]
    assert replay_agent(instrumented, run).result == "no k\\ud800"


def test_unencodable_output_names_the_step_even_if_swallowed():
    def sloppy(ctx):
        try:
            ctx.llm("plan", produce=lambda: 1)
            ctx.tool("opaque", produce=lambda: object())
        except Exception:
            pass
        return "done"

    with pytest.raises(CanonicalEncodingError, match=r"step 1 \(tool:opaque\)"):
        record(sloppy)


@pytest.mark.parametrize(
    ("task", "metadata", "where"),
    [
        ({"q": "caf\udce9"}, None, r"at \$\.task\.q$"),
        ({"q": "ok"}, {"user": object()}, r"at \$\.metadata\.user$"),
    ],
)
def test_a_task_or_metadata_that_cannot_be_stored_is_refused_before_the_agent_runs(
    tmp_path, task, metadata, where
):
    """QA: a task holding a lone surrogate (a dict of strings skipped the check) or metadata
    holding an object was refused only after the agent had run - its side-effecting tool
    had sent the e-mail - and the run was lost."""
    sent = []

    def agent(ctx, q):
        ctx.tool("send_email", produce=lambda: sent.append(q) or "sent", side_effects=True)
        return "done"

    with Session(tmp_path / "runs.sqlite") as session:
        with pytest.raises(CanonicalEncodingError, match=where):
            session.record(agent, task, metadata=metadata)
        assert session.store.list_sessions() == []
    with pytest.raises(CanonicalEncodingError, match=where):
        record(agent, task, metadata=metadata)
    assert sent == []


def test_async_agent_records_the_same_way():
    async def aagent(ctx, n):
        async def slow():
            await asyncio.sleep(0)
            return ctx.rng.random()

        values = await asyncio.gather(*(ctx.llm(f"p{i}", produce=slow) for i in range(n)))
        return sum(values)

    traj = record(aagent, {"n": 3}, seed=5)
    again = record(aagent, {"n": 3}, seed=5)
    assert [s.name for s in traj.steps] == ["p0", "p1", "p2"]
    assert traj.outcome.result == again.outcome.result


def test_spans_follow_genai_conventions(monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traj = record(agent, {"question": "why"}, seed=3, tracer_provider=provider)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"chat plan", "execute_tool search", "chat write"}
    tool = spans["execute_tool search"]
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "search"
    assert "gen_ai.tool.call.result" in tool.attributes
    assert traj.steps[1].span_id == format(tool.context.span_id, "016x")


def test_content_stays_off_spans_by_default(monkeypatch):
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traj = record(agent, {"question": "secret"}, tracer_provider=provider)
    for span in exporter.get_finished_spans():
        assert not any("secret" in str(v) for v in span.attributes.values())
    assert traj.steps[0].inputs == {"prompt": "secret"}  # the store keeps full content


def test_verifier_errors_are_clear():
    with pytest.raises(VerifierError, match="number in"):
        record(agent, {"question": "x"}, verifier=lambda r: "yes")
    with pytest.raises(VerifierError, match="raised KeyError"):
        record(agent, {"question": "x"}, verifier=lambda r: r["missing"])


def test_a_verifier_whose_exception_or_value_cannot_be_printed_is_still_a_verifier_error():
    """QA: an exception whose __str__ fails (or a returned value whose __repr__ does) made
    record raise that failure (RuntimeError) instead of VerifierError."""

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("__str__ failed")

    class Opaque:
        def __repr__(self):
            raise RuntimeError("__repr__ failed")

    def raises(result):
        raise Unprintable()

    with pytest.raises(VerifierError, match=r"raised Unprintable: <exception str\(\) failed"):
        record(agent, {"question": "x"}, verifier=raises)
    with pytest.raises(VerifierError, match=r"returned .*Opaque <Opaque \(repr\(\) failed\)>"):
        record(agent, {"question": "x"}, verifier=lambda r: Opaque())


class Scalar:
    """What NumPy (and torch, jax) hand back for ``np.mean(x) > 0.5``: a 0-d value."""

    shape = ()

    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


@pytest.mark.parametrize(
    ("score", "expected"),
    [(Scalar(True), 1.0), (Scalar(0.25), 0.25), (Fraction(1, 2), 0.5), (Decimal("0.4"), 0.4)],
)
def test_a_verifier_may_return_any_real_number(score, expected):
    """NumPy's bool and float scalars, fractions and decimals were refused ("returned bool
    np.True_; it must return a number ... or a bool")."""
    traj = record(agent, {"question": "x"}, verifier=lambda r: score)
    assert traj.outcome.score == expected


def test_a_verifier_that_changes_the_result_does_not_change_what_is_stored(db_path):
    """The stored result was the object the verifier had been handed, so a verifier that
    popped a key (or normalised a list in place) changed the recording, and a replay of the
    run then compared against a result the agent never returned."""

    def popping(result):
        result.pop("answer")
        result["noise"] = None
        return 0.0

    with Session(db_path) as session:
        traj = session.record(agent, {"question": "x"}, verifier=popping, session_id="m")
        stored = session.load("m")
    assert traj.outcome.result["answer"] == stored.outcome.result["answer"]
    assert isinstance(stored.outcome.result["noise"], float)
    assert stored.outcome.failed


def test_a_result_that_cannot_be_stored_still_reaches_the_verifier():
    seen = []
    traj = record(lambda ctx: Verdict(), verifier=lambda r: seen.append(r) or 1.0)
    assert isinstance(seen[0], Verdict) and traj.outcome.score == 1.0
    assert traj.outcome.result.startswith("<") and traj.metadata["result_repr"]


class Verdict:
    pass


def test_a_refused_score_names_its_type_with_its_module():
    with pytest.raises(VerifierError, match=r"returned [\w.]*test_record\.Verdict <"):
        record(agent, {"question": "x"}, verifier=lambda r: Verdict())
    with pytest.raises(VerifierError, match=r"returned str 'yes'; it must"):
        record(agent, {"question": "x"}, verifier=lambda r: Scalar("yes"))


def test_session_stores_and_refuses_duplicates(db_path):
    with Session(db_path) as session:
        traj = session.record(agent, {"question": "q"}, session_id="dup", seed=1)
        assert session.load("dup") == traj
        with pytest.raises(StoreError, match="already exists"):
            session.record(agent, {"question": "other"}, session_id="dup", seed=2)


def _hold_write_lock(db_path, seconds):
    """Another process's writer holding the store's write lock for ``seconds``."""
    import sqlite3
    import threading

    held = threading.Event()

    def writer():
        conn = sqlite3.connect(db_path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(10)
    return thread


def test_a_run_the_store_cannot_take_is_not_lost(db_path):
    """A lock held past the busy timeout (or a read-only file, a full disk): the error
    carries the recorded run, which can be saved once the store takes writes again."""
    from agent_replay import CheckpointStore

    with Session(CheckpointStore(db_path, busy_timeout=0.05)) as session:
        session.record(agent, {"question": "first"}, session_id="first")  # the store exists
        writer = _hold_write_lock(db_path, 0.5)
        with pytest.raises(StoreError, match="locked") as caught:
            session.record(agent, {"question": "q"}, session_id="kept", seed=1)
        writer.join()
        kept = caught.value.trajectory
        assert kept.session_id == "kept" and kept.outcome.result is not None
        session.store.save(kept)
        assert session.load("kept") == kept


def test_arecord_does_not_stall_the_event_loop_while_the_store_is_busy(db_path):
    from agent_replay import CheckpointStore

    async def agent_async(ctx, question):
        return await ctx.llm("answer", produce=lambda: question.upper(), question=question)

    async def main(session):
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.ensure_future(ticker())
        writer = _hold_write_lock(db_path, 0.6)
        started = time.monotonic()
        traj = await session.arecord(agent_async, {"question": "q"}, session_id="a")
        waited = time.monotonic() - started
        beat.cancel()
        writer.join()
        return traj, ticks, waited

    with Session(CheckpointStore(db_path, busy_timeout=10)) as session:
        session.record(agent, {"question": "first"}, session_id="first")
        traj, ticks, waited = asyncio.run(main(session))
        assert session.load("a") == traj
    assert waited >= 0.4  # it did wait for the lock ...
    assert ticks >= 15  # ... and the loop ran meanwhile (0 when the write blocked it)


def test_steps_from_concurrent_threads_get_distinct_positions():
    """Positions come from an atomic counter: 8 threads x 50 steps, none lost or shared."""
    import threading

    def agent(ctx):
        barrier = threading.Barrier(8)

        def worker(w):
            barrier.wait()
            for i in range(50):
                ctx.tool("work", produce=lambda w=w, i=i: (w, i), w=w, i=i)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return ctx.position

    traj = record(agent, seed=3)
    assert traj.outcome.result == 400
    assert [s.index for s in traj.steps] == list(range(400))
    assert sorted(tuple(s.action) for s in traj.steps) == [
        (w, i) for w in range(8) for i in range(50)
    ]
    traj.verify()


def test_unencodable_result_is_kept_as_its_repr():
    class Opaque:
        def __repr__(self):
            return "<Opaque>"

    traj = record(lambda ctx: Opaque(), seed=1, verifier=lambda result: 1.0)
    assert traj.outcome.result == "<Opaque>" and traj.outcome.score == 1.0
    assert traj.metadata["result_repr"] is True
    traj.verify()
    assert traj.digest  # storable now


def test_arecord_cancelled_while_the_store_is_busy_still_stores_the_run(db_path):
    """A caller's timeout around arecord used to abandon the save in its thread; leaving the
    Session then closed the store under it (a crash, or the run silently lost)."""
    from agent_replay import CheckpointStore

    async def agent_async(ctx, question):
        return await ctx.llm("answer", produce=lambda: question.upper(), question=question)

    async def main(session):
        writer = _hold_write_lock(db_path, 0.6)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                session.arecord(agent_async, {"question": "q"}, session_id="late"), 0.2
            )
        writer.join()

    with Session(CheckpointStore(db_path, busy_timeout=10)) as session:
        session.record(agent, {"question": "first"}, session_id="first")
        asyncio.run(main(session))
    with CheckpointStore(db_path, read_only=True) as store:
        assert store.load("late").outcome.result == "Q"


def test_a_step_after_the_agent_returned_is_refused_at_the_call():
    """A thread the agent left running made a step after it returned: the step's produce ran
    (an email went out) and nothing said it was not recorded."""
    import threading

    ran, raised = [], []
    started = threading.Event()

    def agent(ctx):
        def late():
            started.wait(5)
            try:
                ctx.tool("send_email", produce=lambda: ran.append("sent"), to="x@y")
            except RuntimeError as exc:
                raised.append(str(exc))

        thread = threading.Thread(target=late)
        thread.start()
        ctx.tool("early", produce=lambda: 0)
        agent.thread = thread
        return "done"

    traj = record(agent)
    started.set()
    agent.thread.join(5)
    assert [s.name for s in traj.steps] == ["early"]
    assert ran == [] and "started after the agent returned" in raised[0]


def test_a_task_key_the_agent_does_not_take_is_warned_about():
    """``{"question": ..., "language": ...}`` for ``agent(ctx, question, lang="en")`` passes
    the whole task as ``question``, as documented; a misspelt key did it silently."""

    def agent(ctx, question, lang="en"):
        return ctx.llm("answer", produce=lambda: f"{lang}: {question}")

    with pytest.warns(UserWarning, match=r"\['question'\] are parameters of .*\['language'\]"):
        traj = record(agent, {"question": "why?", "language": "fr"})
    assert traj.outcome.result == "en: {'question': 'why?', 'language': 'fr'}"


def test_a_steps_inputs_are_recorded_as_they_were_called():
    """QA: inputs were copied when the step ended, so a produce appending its answer to the
    message list it was passed (or an async body changing it while the step ran) recorded the
    changed list, and a factual replay of the same agent diverged at that step."""

    def agent(ctx):
        history = [{"role": "user", "content": "hi"}]

        def chat():
            history.append({"role": "assistant", "content": "hello"})
            return "hello"

        return ctx.llm("chat", produce=chat, messages=history)

    traj = record(agent)
    assert traj.steps[0].inputs == {"messages": [{"role": "user", "content": "hi"}]}
    assert not replay(agent, traj).diverged

    async def aagent(ctx):
        history = ["q"]

        async def slow():
            await asyncio.sleep(0.01)
            return "answer"

        task = asyncio.ensure_future(ctx.llm("a", produce=slow, history=history))
        await asyncio.sleep(0)
        history.append("note added while the call runs")
        return await task

    traj = record(aagent)
    assert traj.steps[0].inputs == {"history": ["q"]}
    assert not replay(aagent, traj).diverged
    # a re-drawn step of a rollout keeps its inputs as called too
    again = replay(agent, record(agent), ReplayPlan.ablate_from(0))
    assert again.drafts[0].inputs == {"messages": [{"role": "user", "content": "hi"}]}
