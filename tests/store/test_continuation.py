"""A conversation spread over many traces is stored by continuing the stored session: only
its end is read, new steps are sealed after it, and the result is the session that assembling
every span at once gives."""

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_replay import CheckpointStore, Trajectory
from agent_replay.errors import ChainIntegrityError, SessionChangedError
from agent_replay.mapping.assemble import assemble, capture_report, continue_session, merge
from agent_replay.mapping.spans import NormalizedSpan
from agent_replay.model import Continuation, SessionEnd, Step
from agent_replay.store.sink import DurableSpanSink, SpanSink, save_merged
from conversation_turns import CONV, TURNS, facts, turn, whole


def without_counts(report):
    return {k: v for k, v in report.items() if k not in ("spans", "log_records")}


def stored_turn_by_turn(db_path, sink_kind):
    with CheckpointStore(db_path) as store:
        if sink_kind == "memory":
            sink = SpanSink(store)
            for spans in TURNS:
                sink.add(spans)
                sink.flush()
        else:
            sink = DurableSpanSink(store)
            for spans in TURNS:
                sink.add(spans)
                sink.assemble_ready()
        return store.load(CONV)


@pytest.mark.parametrize("sink_kind", ["memory", "durable"])
def test_turn_by_turn_is_the_session_assembled_at_once(db_path, sink_kind):
    loaded = stored_turn_by_turn(db_path, sink_kind)  # load() checks every hash and link
    expected = whole()
    # the same steps in the same order, with the same links between them: a tool step to
    # the llm step that asked for it in an earlier trace, and in its own trace (an index
    # into the session, not into the trace)
    assert [facts(s) for s in loaded.steps] == [facts(s) for s in expected.steps]
    assert [(s.name, s.attributes.get("requested_by")) for s in loaded.steps][3:] == [
        ("chat m", None),
        ("lookup", 2),
        ("chat m", None),
        ("chat m", None),
        ("chat m", None),
        ("lookup", 7),
    ]
    assert [s.step_hash for s in loaded.steps] == [s.step_hash for s in expected.steps]
    assert loaded.metadata["trace_ids"] == expected.metadata["trace_ids"]
    report = loaded.metadata["capture"]
    assert without_counts(report) == without_counts(expected.metadata["capture"])
    # what the report says, checked by hand rather than only against the other path
    assert report["steps_without_content"] == [1]
    assert report["unanswered_tool_calls"] == ["c2"]
    assert report["notes"][0].startswith("no message content was captured")
    assert report["spans"] == sum(map(len, TURNS))  # every turn's spans, counted once


def test_a_continuation_reads_only_the_end_of_the_stored_chain(db_path):
    with CheckpointStore(db_path) as store:
        sink = SpanSink(store)
        for spans in TURNS[:3]:
            sink.add(spans)
            sink.flush()
        stored = store.load(CONV)
        end = store.load_end(CONV)
        assert end.n_steps == len(stored.steps) and end.last == stored.steps[-1]
        assert end.session.header() == {
            **stored.header(),
            "head": end.session.head_hash,
            "n_steps": 0,
        }
        # damage a step before the end: the end still reads, a whole load does not
        conn = store._conn()
        conn.execute("UPDATE steps SET header=? WHERE hash=?", (b"{}", stored.steps[0].step_hash))
        conn.commit()
        assert store.load_end(CONV).last == stored.steps[-1]
        with pytest.raises(ChainIntegrityError):
            store.load(CONV)
        # damage the last step: reading the end fails, naming it
        conn.execute("UPDATE steps SET header=? WHERE hash=?", (b"{}", stored.steps[-1].step_hash))
        conn.commit()
        with pytest.raises(ChainIntegrityError) as err:
            store.load_end(CONV)
        assert err.value.step_index == len(stored.steps) - 1


def test_a_trace_that_does_not_follow_is_merged_whole(db_path):
    with CheckpointStore(db_path) as store:
        sink = SpanSink(store)
        for spans in (TURNS[2], TURNS[0]):  # the earlier turn arrives last
            sink.add(spans)
            sink.flush()
        (later,) = assemble(TURNS[0])
        assert continue_session(SessionEnd.of(store.load(CONV)), later) is None
        loaded = store.load(CONV)
    assert [s.trace_id for s in loaded.steps] == [TURNS[0][0].trace_id, TURNS[2][0].trace_id]


def test_a_merge_reads_no_stored_prompt_and_seals_no_stored_content(db_path, monkeypatch):
    """A late trace merged into a stored chat: the stored prompts (each repeating the chat so
    far) are only checked against their addresses, and the stored steps are placed in the
    new chain, not sealed again; the session is the one assembling every span at once gives."""
    order = [TURNS[n] for n in (1, 2, 3, 4, 5, 6, 0)]  # the first turn arrives last
    with CheckpointStore(db_path) as store:
        sink = SpanSink(store)
        for spans in order[:-1]:
            sink.add(spans)
            sink.flush()
        stored_inputs = {s.input_address for s in store.load(CONV).steps if s.inputs is not None}
        read, sealed = [], []
        original_blobs, original_seal = CheckpointStore._blobs, Step.seal
        monkeypatch.setattr(
            CheckpointStore,
            "_blobs",
            lambda self, hashes: read.extend(hashes) or original_blobs(self, hashes),
        )
        monkeypatch.setattr(
            Step,
            "seal",
            classmethod(
                lambda cls, draft, *a, **k: sealed.append(draft) or original_seal(draft, *a, **k)
            ),
        )
        sink.add(order[-1])
        sink.flush()
        monkeypatch.undo()
        loaded = store.load(CONV)
    assert read and stored_inputs and not stored_inputs & set(read)
    assert {d.trace_id for d in sealed} == {TURNS[0][0].trace_id}  # only the new trace's
    expected = whole()
    assert [s.step_hash for s in loaded.steps] == [s.step_hash for s in expected.steps]


def stored_one_by_one(db_path, traces):
    """The conversation as the span sink stores ``traces`` arriving (and flushed) in turn."""
    with CheckpointStore(db_path) as store:
        sink = SpanSink(store)
        for spans in traces:
            sink.add(spans)
            sink.flush()
        return store.load(CONV)


@pytest.mark.parametrize("order", [(6, 0), (3, 2), (6, 3, 2, 0)])
def test_links_between_steps_survive_a_merge_that_reorders_them(db_path, order):
    """Turns stored out of order are merged whole and re-sorted; each tool step still names
    the llm step that asked for its call, in its own trace (6) or an earlier one (2 → 3)."""
    loaded = stored_one_by_one(db_path, [TURNS[n] for n in order])
    (expected,) = assemble([s for n in sorted(order) for s in TURNS[n]])
    assert [facts(s) for s in loaded.steps] == [facts(s) for s in expected.steps]
    for step in loaded.steps:
        if step.name == "lookup":
            requester = loaded.steps[step.attributes["requested_by"]]
            assert step.attributes["tool_call_id"] in requester.attributes["tool_calls"]


def test_a_late_span_of_a_stored_trace_is_not_a_continuation():
    (first,) = assemble(TURNS[0])
    late = turn(0, answers="c0")[-1]  # a tool span of the same trace, ending after the rest
    spans = [*TURNS[0], late]
    (again,) = assemble(spans)  # the trace assembled again, late span included
    assert continue_session(SessionEnd.of(first), again) is None
    covered = {(s.trace_id, s.span_id) for s in spans}
    merged = merge(first, again, covered=covered)
    assert [s.name for s in merged.steps] == ["chat m", "lookup"]
    assert merged.steps == again.steps  # the whole trace again: it replaces the stored one


def test_a_session_changed_by_another_writer_is_merged_again(db_path):
    with CheckpointStore(db_path) as store:
        (first,) = assemble(TURNS[0])
        (second,) = assemble(TURNS[1])
        (third,) = assemble(TURNS[2])
        store.save(first)
        stale = continue_session(store.load_end(CONV), third)  # read before the next write
        store.save_many([continue_session(store.load_end(CONV), second)])
        with pytest.raises(SessionChangedError):
            store.save_many([stale])
        assert len(store.load(CONV).steps) == 2  # the refused write changed nothing

        attempts = []

        def write(items, delete, expect):  # the first attempt loses a race, as ``stale`` did
            attempts.append(items)
            if len(attempts) == 1:
                store.save_many([stale])
            store.save_many(items, delete=delete, expect=expect)

        save_merged(store, [third], write)
        assert isinstance(attempts[0][0], Continuation) and len(attempts) == 2
        assert isinstance(attempts[1][0], Trajectory)  # the retry merged the whole session
        loaded = store.load(CONV)
    assert [s.trace_id for s in loaded.steps] == [spans[0].trace_id for spans in TURNS[:3]]


def test_a_whole_merge_is_not_written_over_what_another_writer_added(db_path):
    """The retry merges the whole stored session; when another process adds a turn between
    that read and the write, the write is refused and everything is merged again (two
    processes appending to one conversation lost turns this way: 110 of 120 stored)."""
    with CheckpointStore(db_path) as store, CheckpointStore(db_path) as other:
        first, second, third, fourth = (assemble(TURNS[n])[0] for n in range(4))
        store.save(first)
        attempts = []

        def write(items, delete, expect):
            attempts.append(items)
            if len(attempts) < 3:  # the other writer adds a turn after each read
                added = second if len(attempts) == 1 else fourth
                other.save_many([continue_session(other.load_end(CONV), added)])
            store.save_many(items, delete=delete, expect=expect)

        save_merged(store, [third], write)
        assert len(attempts) == 3
        loaded = store.load(CONV)
    (expected,) = assemble([s for spans in TURNS[:4] for s in spans])
    assert [facts(s) for s in loaded.steps] == [facts(s) for s in expected.steps]


def test_capture_report_before_is_the_whole_chains_report():
    trajectory = whole()
    steps = trajectory.steps
    for cut in range(len(steps) + 1):
        before = capture_report(steps[:cut])
        assert capture_report(steps[cut:], before=before) == capture_report(steps), cut


def test_continuation_checks_the_stored_step_count():
    (first,) = assemble(TURNS[0])
    (second,) = assemble(TURNS[1])
    continuation = continue_session(SessionEnd.of(first), second)
    with pytest.raises(ValueError, match="stored steps"):
        continuation.whole(())
    whole_ = continuation.whole(first.steps)
    whole_.verify()
    assert continuation.header() == whole_.header()


# -- any arrival order: every step once, in time order -------------------------------------------


@st.composite
def arrivals(draw):
    """Spans of several traces of one conversation (tool calls under an agent span that
    carries the conversation id, at random times, traces may overlap), cut into deliveries
    in a random order: a trace's tool spans may arrive before its agent span, with it or
    after it (late), and the sink flushes after some deliveries, writing traces whose agent
    span has not arrived when ``idle`` (their idle timeout passed)."""
    n_traces = draw(st.integers(1, 5))
    spans, next_id = [], 1
    for t in range(n_traces):
        trace = f"{t + 1:032x}"
        start = draw(st.integers(0, 1000))
        root = NormalizedSpan(
            trace_id=trace,
            span_id=f"{next_id:016x}",
            name="invoke_agent a",
            start_ns=start,
            end_ns=start + 10_000,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "a",
                "gen_ai.conversation.id": CONV,
            },
        )
        next_id += 1
        parts: list[list[NormalizedSpan]] = [[], [root], []]  # before, with, after the root
        for _ in range(draw(st.integers(1, 3))):
            at = start + draw(st.integers(1, 5000))
            child = NormalizedSpan(
                trace_id=trace,
                span_id=f"{next_id:016x}",
                name="execute_tool t",
                parent_span_id=root.span_id,
                start_ns=at,
                end_ns=at + 1,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "t",
                    "gen_ai.tool.call.result": f"r{next_id}",
                },
            )
            next_id += 1
            parts[draw(st.integers(0, 2))].append(child)
        spans.append((root, [part for part in parts if part]))
    deliveries = [part for _, parts in spans for part in parts]
    order = draw(st.permutations(range(len(deliveries))))
    out = [deliveries[i] for i in order]
    flushes = draw(st.lists(st.booleans(), min_size=len(out), max_size=len(out)))
    remember = draw(st.integers(0, 3))
    idle = draw(st.booleans())
    every = [s for part in deliveries for s in part]
    return out, flushes, remember, idle, every


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=arrivals())
def test_any_arrival_order_stores_every_step_once_in_time_order(case):
    """Whatever the arrival order, flushes, forgetting and idle timeouts, the stored session
    is the one assembling every span at once gives: the same steps, each once, in the same
    order (traces overlapping in time included), named with their agent, no agent span left
    as a step of its own."""
    deliveries, flushes, remember, idle, every = case
    with tempfile.TemporaryDirectory() as tmp:
        with CheckpointStore(Path(tmp) / "s.sqlite", durable=False) as store:
            sink = SpanSink(store, remember_traces=remember, idle_seconds=0 if idle else 3600)
            for part, flush in zip(deliveries, flushes, strict=True):
                sink.add(part)
                if flush:
                    sink.flush()
            sink.flush(force=True)
            assert store.session_ids() == [CONV]
            steps = store.load(CONV).steps  # every hash and link checked
    (expected,) = assemble(every)
    assert [facts(s) for s in steps] == [facts(s) for s in expected.steps]
    assert {s.agent for s in steps} == {"a"}


def _nested_traces():
    """Trace 1: an agent span with a container (not a step) holding a tool that starts late,
    and a tool straight under the agent that starts early; trace 2: a tool starting between
    them. Depth-first, trace 1's last step is not its latest."""

    def span(trace, n, parent, start, **attributes):
        return NormalizedSpan(
            trace_id=f"{trace:032x}",
            span_id=f"{n:016x}",
            name=attributes.pop("name", f"s{n}"),
            parent_span_id=None if parent is None else f"{parent:016x}",
            start_ns=start,
            end_ns=start + (100 if parent is None else 1),
            attributes=attributes,
        )

    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
    agent["gen_ai.conversation.id"] = CONV

    def tool(result):
        return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": result}

    first = [
        span(1, 1, None, 0, **agent),
        span(1, 2, 1, 1, name="container"),
        span(1, 3, 2, 10, **tool("x")),
        span(1, 4, 1, 2, **tool("y")),
    ]
    second = [span(2, 5, None, 4, **agent), span(2, 6, 5, 5, **tool("z"))]
    return first, second


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_traces_arriving_one_by_one_are_ordered_as_assembled_together(db_path, order):
    traces = _nested_traces()
    (expected,) = assemble([s for spans in traces for s in spans])
    assert [s.name for s in expected.steps] == ["z", "x", "y"]
    loaded = stored_one_by_one(db_path, [traces[n] for n in order])
    assert [facts(s) for s in loaded.steps] == [facts(s) for s in expected.steps]


def _agent(trace, n):
    return NormalizedSpan(
        trace_id=f"{trace:032x}",
        span_id=f"{n:016x}",
        name="invoke_agent a",
        start_ns=0,
        end_ns=10_000,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "a",
            "gen_ai.conversation.id": CONV,
        },
    )


def _tool(trace, n, parent):
    return NormalizedSpan(
        trace_id=f"{trace:032x}",
        span_id=f"{n:016x}",
        name="execute_tool t",
        parent_span_id=f"{parent:016x}",
        start_ns=1,
        end_ns=2,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"},
    )


@pytest.mark.parametrize(
    "deliveries,flushes,remember,idle",
    [
        # a trace re-assembled without its agent span, all its stored steps captured again:
        # the steps keep the agent they were stored with (found by the property below)
        (
            [[_agent(1, 1)], [_tool(2, 5, 4)], [_tool(1, 2, 1)], [_tool(1, 3, 1)], [_agent(2, 4)]],
            [False, True, True, False, False],
            1,
            0,
        ),
        # two traces whose steps start at the same time: ordered by span id, as assembled
        # together, not the later-arriving one after the stored one (found by the property)
        (
            [[_tool(1, 2, 1)], [_tool(2, 4, 3)], [_agent(2, 3)], [_agent(1, 1)]],
            [False, False, True, False],
            0,
            3600,
        ),
    ],
)
def test_arrivals_the_property_found(db_path, deliveries, flushes, remember, idle):
    with CheckpointStore(db_path, durable=False) as store:
        sink = SpanSink(store, remember_traces=remember, idle_seconds=idle)
        for part, flush in zip(deliveries, flushes, strict=True):
            sink.add(part)
            if flush:
                sink.flush()
        sink.flush(force=True)
        steps = store.load(CONV).steps
    (expected,) = assemble([s for part in deliveries for s in part])
    assert [facts(s) for s in steps] == [facts(s) for s in expected.steps]
    assert {s.agent for s in steps} == {"a"}
