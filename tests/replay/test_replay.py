import asyncio
import dataclasses
import functools

import pytest

from agent_replay import ReplayPlan, afork, arecord, areplay, record, replay
from agent_replay.errors import (
    ChainIntegrityError,
    PlanError,
    ReplayDivergenceError,
)
from agent_replay.model import Trajectory


def noisy_agent(ctx, topic):
    """Randomness everywhere: in steps, in the body, in now() and uuid()."""
    route = ctx.rng.random()
    a = ctx.llm("draft", produce=lambda: ctx.rng.random(), topic=topic)
    stamp = ctx.now()
    ident = ctx.uuid()
    body = [ctx.rng.randint(0, 1000) for _ in range(3)]
    b = ctx.tool("lookup", produce=lambda: {"x": ctx.rng.gauss(0, 1), "a": a}, a=a)
    c = ctx.llm("final", produce=lambda: [b["x"], ctx.rng.choice("abc")], b=b)
    return {"route": route, "stamp": stamp, "id": ident, "body": body, "c": c}


def test_held_prefix_reproduces_the_recording_exactly_20_times():
    traj = record(noisy_agent, {"topic": "t"}, seed=42)
    for seed in range(20):
        result = replay(noisy_agent, traj, seed=seed)
        assert not result.diverged
        assert result.live_steps == 0
        assert [d.action for d in result.drafts] == [s.action for s in traj.steps]
        assert result.result == traj.outcome.result
        assert result.trajectory().head_hash == traj.head_hash


def test_resampled_steps_use_common_random_numbers():
    traj = record(noisy_agent, {"topic": "t"}, seed=1)
    from_0 = replay(noisy_agent, traj, ReplayPlan.ablate_from(0), seed=7)
    from_1 = replay(noisy_agent, traj, ReplayPlan.ablate_from(1), seed=7)
    again = replay(noisy_agent, traj, ReplayPlan.ablate_from(0), seed=7)
    other = replay(noisy_agent, traj, ReplayPlan.ablate_from(0), seed=8)

    def without_clock(result):  # past a re-drawn step ctx.now() reads the real clock
        return {k: v for k, v in result.result.items() if k != "stamp"}

    assert without_clock(from_0) == without_clock(again)
    assert from_0.result["id"] == again.result["id"]  # uuids come from the rollout's streams
    assert from_0.drafts[0].action != traj.steps[0].action
    assert from_0.drafts[0].action != other.drafts[0].action
    # step 2's stream depends only on (rollout, step): same draw of the choice in both plans
    assert from_0.drafts[2].action[1] == from_1.drafts[2].action[1]


def draws_agent(ctx, label):
    return [ctx.llm(f"s{i}", produce=lambda: ctx.rng.random(), label=label) for i in range(3)]


def test_streams_are_keyed_by_the_recording_content():
    """Rollout r of two different runs draws independently; the same recorded content (here a
    copy under another session id) always replays the same way."""
    a = record(draws_agent, {"label": "a"}, seed=3)
    b = record(draws_agent, {"label": "b"}, seed=3)
    plan = ReplayPlan.ablate_from(0)
    draws = {
        name: replay(draws_agent, t, plan, seed=5).result for name, t in {"a": a, "b": b}.items()
    }
    assert draws["a"] != draws["b"]  # the same rollout seed, different recordings
    twin = dataclasses.replace(a, session_id="copy")
    assert replay(draws_agent, twin, plan, seed=5).result == draws["a"]
    # timing is not content: the same run recorded at another time replays the same way
    again = record(draws_agent, {"label": "a"}, seed=3)
    assert again.head_hash != a.head_hash
    assert replay(draws_agent, again, plan, seed=5).result == draws["a"]


def branching_agent(ctx):
    route = ctx.llm("route", produce=lambda: ctx.rng.choice(["A", "B"]))
    if route == "A":
        ctx.tool("prepare_a", produce=lambda: "prepared")
        value = ctx.tool("fetch", produce=lambda: f"A-data-{ctx.rng.random():.3f}", key=1)
    else:
        value = ctx.tool("fetch", produce=lambda: f"B-data-{ctx.rng.random():.3f}", key=1)
    return value


def recorded_on_branch_a():
    runs = (record(branching_agent, seed=s) for s in range(20))
    return next(t for t in runs if t.steps[0].output == "A")


def test_held_step_on_one_branch_is_never_served_another_branchs_output():
    traj = recorded_on_branch_a()
    assert [s.name for s in traj.steps] == ["route", "prepare_a", "fetch"]
    # re-draw the route, hold everything else: runs that take branch B call fetch(key=1) at
    # position 1, where the recording has prepare_a; binding by position must not serve the
    # recorded branch-A fetch output there (the published package did).
    outputs = []
    for seed in range(40):
        result = replay(branching_agent, traj, ReplayPlan.coalition({1, 2}), seed=seed)
        outputs.append(result.result)
        if result.drafts[0].action == "B":
            assert result.diverged and result.divergence.position == 1
            assert result.result.startswith("B-data-")
        else:
            assert not result.diverged and result.result == traj.outcome.result
    assert any(o.startswith("B-") for o in outputs) and any(o.startswith("A-") for o in outputs)


def test_strict_mode_lists_the_live_call_and_closest_recorded():
    traj = recorded_on_branch_a()
    plan = dataclasses.replace(ReplayPlan.coalition({1, 2}), strict=True)
    seen = 0
    for seed in range(40):
        try:
            replay(branching_agent, traj, plan, seed=seed)
        except ReplayDivergenceError as exc:
            seen += 1
            assert exc.position == 1 and exc.live.startswith("tool:fetch")
            assert any("tool:fetch" in c for c in exc.closest)
            assert "closest recorded calls" in str(exc)
    assert seen


def test_nondeterministic_agent_is_reported_as_diverged():
    calls = iter(range(100))

    def leaky(ctx):
        return ctx.llm("x", produce=lambda: 1, n=next(calls))  # input from outside ctx

    traj = record(leaky)
    result = replay(leaky, traj)
    assert result.diverged and "inputs differ" in result.divergence.reason


def test_force_runs_the_observation_on_the_forced_action():
    def agent(ctx):
        hit = ctx.tool("search", produce=lambda: "bad query", observe=lambda q: f"results({q})")
        return hit

    traj = record(agent)
    assert traj.steps[0].action == "bad query" and traj.steps[0].output == "results(bad query)"
    result = replay(agent, traj, ReplayPlan.factual().force(0, "good query"))
    assert result.result == "results(good query)"
    assert result.drafts[0].action == "good query"


def test_remove_hands_the_agent_the_declared_default():
    def agent(ctx):
        a = ctx.tool("optional", produce=lambda: "value", default="fallback")
        b = ctx.tool("plain", produce=lambda: "value")
        return [a, b]

    traj = record(agent)
    result = replay(agent, traj, ReplayPlan.factual().remove(0).remove(1))
    assert result.result == ["fallback", None]
    assert result.drafts == ()


def test_mock_observe_keeps_the_action():
    def agent(ctx):
        return ctx.tool("search", produce=lambda: "q", observe=lambda q: "real results")

    traj = record(agent)
    result = replay(agent, traj, ReplayPlan.factual().observe(0, "no results"))
    assert result.result == "no results" and result.drafts[0].action == "q"
    constructed = replay(agent, traj, ReplayPlan.mock_observe(0, "no results"))
    assert constructed.result == "no results" and constructed.drafts[0].action == "q"


def test_swap_model_and_edit_context_reach_the_policy():
    def agent(ctx, question):
        return ctx.llm(
            "answer",
            produce=lambda inputs: f"{ctx.model_hint}:{inputs['question']}",
            question=question,
        )

    traj = record(agent, {"question": "q1"})
    assert traj.outcome.result == "None:q1"
    swapped = replay(agent, traj, ReplayPlan.ablate_from(0).swap_model("gpt-5"))
    assert swapped.result == "gpt-5:q1"
    edited = replay(agent, traj, ReplayPlan.factual().edit(0, {"question": "q2"}))
    assert edited.result == "None:q2"


def test_side_effects_never_run_live():
    sent = []

    def agent(ctx):
        text = ctx.llm("write", produce=lambda: ctx.rng.choice(["a", "b", "c"]))
        if text == "c":
            ctx.tool("audit", produce=lambda: "audited")
        ctx.tool(
            "send_email", produce=lambda: sent.append(text) or "sent", body=text, side_effects=True
        )
        return text

    traj = next(t for s in range(20) if (t := record(agent, seed=s)).steps[0].output != "c")
    assert len(sent) >= 1
    sent.clear()
    blocked = 0
    for seed in range(30):
        result = replay(agent, traj, ReplayPlan.ablate_from(0), seed=seed)
        if result.blocked_side_effects:
            blocked += 1
            assert result.exception["type"] == "SideEffectBlockedError"
            assert result.failed
    assert sent == []  # never executed live, whatever the plan
    assert blocked  # the runs that took the audit branch reached send_email off the recording
    assert traj.steps[-1].resamplable is False


def test_a_side_effect_reached_off_the_recording_runs_its_declared_mock_instead():
    """QA: a rollout that left the recording and reached a side-effecting tool could only
    stop there (a failure): a router whose re-draw rescues the run half the time came out
    with no effect. ``mock=`` is what a replay runs in the tool's place."""
    sent = []

    def agent(ctx):
        text = ctx.llm("write", produce=lambda: ctx.rng.choice(["a", "b", "c"]))
        if text == "c":
            ctx.tool("audit", produce=lambda: "audited")
        return ctx.tool(
            "send_email",
            produce=lambda: sent.append(text) or "sent",
            mock=lambda inputs: f"mock sent {inputs['body']}",
            body=text,
            side_effects=True,
        )

    traj = next(t for s in range(20) if (t := record(agent, seed=s)).steps[0].output != "c")
    sent.clear()
    mocked = 0
    for seed in range(30):
        result = replay(agent, traj, ReplayPlan.ablate_from(0), seed=seed)
        assert not result.blocked_side_effects and result.exception is None
        if result.diverged:
            mocked += 1
            assert result.mocked_tools == ("send_email",) and result.result == "mock sent c"
            assert result.drafts[-1].action == "mock sent c"
        else:
            assert result.mocked_tools == () and result.result == "sent"  # held
    assert mocked and sent == []
    diverged = next(
        r
        for seed in range(30)
        if (r := replay(agent, traj, ReplayPlan.ablate_from(0), seed=seed)).diverged
    )
    assert diverged.drafts[-1].attributes["replay"] == "side_effect_mock"
    assert diverged.live_steps == len(diverged.drafts) - 1  # a mock is no call in real life
    assert diverged.trajectory().metadata["mocked_side_effects"] == ["send_email"]


def test_a_mock_is_only_for_side_effecting_tools_and_must_be_callable():
    """QA: ``mock=`` without ``side_effects=True`` was ignored and the real tool ran in every
    rollout; a mock that is not callable failed only inside rollouts."""

    def agent(ctx, options):
        return ctx.tool("send", produce=lambda: "sent", **options)

    for options, kind, says in (
        ({"mock": lambda: "mock"}, "ValueError", "without side_effects=True the tool itself"),
        ({"mock": "mock", "side_effects": True}, "TypeError", "mock= must be callable"),
    ):
        run = record(lambda ctx, o=options: agent(ctx, o))
        assert run.outcome.error["type"] == kind and says in run.outcome.error["message"]
        assert not run.steps  # refused before it ran


def test_a_side_effect_declared_resamplable_is_still_never_run_live():
    """`resamplable=True` does not lift the guard: neither the action nor the observation of
    a `side_effects=True` tool runs during a replay, under any plan that re-draws it."""
    ran = []

    def agent(ctx):
        draft = ctx.llm("draft", produce=lambda: ctx.rng.choice(["p", "q", "r"]))
        return ctx.tool(
            "send",
            produce=lambda: ran.append("produce") or draft,
            observe=lambda action: ran.append("observe") or "ok",
            side_effects=True,
            resamplable=True,
            body=draft,
        )

    traj = record(agent)
    ran.clear()
    for plan in (ReplayPlan.ablate_from(0), ReplayPlan.ablate_from(1)):
        for seed in range(10):
            result = replay(agent, traj, plan, seed=seed)
            assert 1 in result.held_unresamplable or result.blocked_side_effects
    for asked in (
        ReplayPlan.factual().edit(1, {"body": "x"}),
        ReplayPlan.factual().swap_model("m", 1),
    ):
        with pytest.raises(PlanError, match="has side effects"):
            replay(agent, traj, asked)
    assert ran == []


def test_strict_mode_raises_when_the_run_makes_fewer_calls():
    def agent(ctx, n):
        return [ctx.llm(f"s{i}", produce=lambda: 1) for i in range(n)]

    traj = record(agent, {"n": 3})
    with pytest.raises(ReplayDivergenceError, match="made 2 of 3 recorded calls") as caught:
        replay(lambda ctx, n: agent(ctx, 2), traj, strict=True)
    assert caught.value.position == 2 and caught.value.live == "(run ended)"
    relaxed = replay(lambda ctx, n: agent(ctx, 2), traj)
    assert relaxed.diverged and relaxed.divergence.live == "(run ended)"


def test_forced_and_mocked_values_are_handed_out_fresh_each_rollout():
    """An agent that changes what it is handed changes neither the plan nor other rollouts."""

    def mutator(ctx):
        a = ctx.llm("a", produce=lambda: ["x"])
        a.append("mut-a")
        b = ctx.tool("b", produce=lambda: "go", observe=lambda action: ["obs"])
        b.append("mut-b")
        return a, b

    traj = record(mutator)
    plan = ReplayPlan.factual().force(0, ["F"]).observe(1, ["O"])
    results = [replay(mutator, traj, plan).result for _ in range(3)]
    assert results == [(["F", "mut-a"], ["O", "mut-b"])] * 3
    assert plan.forced[0] == ["F"] and plan.observed[1] == ["O"]


def test_an_exception_that_cannot_be_printed_is_still_the_outcome():
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("str fails")

    def agent(ctx):
        if ctx.llm("x", produce=lambda: ctx.rng.random()) > 0.5:
            raise Unprintable()
        return "fine"

    traj = record(agent, seed=0)
    outcomes = [replay(agent, traj, ReplayPlan.ablate_from(0), seed=s) for s in range(20)]
    crashed = [o for o in outcomes if o.exception]
    assert crashed and all(o.failed for o in crashed)
    assert crashed[0].exception["type"].endswith("Unprintable")


def test_forcing_a_side_effect_needs_a_mock_observation():
    def agent(ctx):
        return ctx.tool(
            "refund",
            produce=lambda: 10,
            observe=lambda amount: f"refunded {amount}",
            side_effects=True,
        )

    traj = record(agent)
    with pytest.raises(PlanError, match="mock observation"):
        replay(agent, traj, ReplayPlan.factual().force(0, 20))
    result = replay(agent, traj, ReplayPlan.factual().force(0, 20).observe(0, "refunded 20"))
    assert result.result == "refunded 20"


def test_agent_exception_is_the_outcome_not_an_engine_error():
    def agent(ctx):
        value = ctx.llm("x", produce=lambda: ctx.rng.random())
        if value > 0.5:
            raise RuntimeError("agent bug")
        return value

    traj = record(agent, seed=0)
    outcomes = [replay(agent, traj, ReplayPlan.ablate_from(0), seed=s) for s in range(20)]
    crashed = [o for o in outcomes if o.exception]
    assert crashed and all(o.failed and "agent bug" in o.exception["traceback"] for o in crashed)


def test_recorded_step_errors_are_replayed():
    def agent(ctx):
        try:
            ctx.tool("flaky", produce=lambda: 1 / 0)
        except ZeroDivisionError:
            return "caught"
        return "no error"

    traj = record(agent)
    assert replay(agent, traj).result == "caught"


def test_bad_plans_and_broken_chains_fail_before_running():
    calls = []

    def agent(ctx):
        calls.append(1)
        return ctx.llm("x", produce=lambda: 1)

    traj = record(agent)
    calls.clear()
    with pytest.raises(PlanError, match=r"has steps 0\.\.0"):
        replay(agent, traj, ReplayPlan.factual().force(3, "x"))
    observation_only = record(lambda ctx: ctx.llm("x", produce=lambda: 1, resamplable=False))
    with pytest.raises(PlanError, match="observation-only"):
        replay(agent, observation_only, ReplayPlan.factual().force(0, 2))
    tampered = Trajectory(traj.session_id, (dataclasses.replace(traj.steps[0], action=2),))
    with pytest.raises(ChainIntegrityError):
        replay(agent, tampered)
    assert calls == []


def test_async_agents_replay_the_same_way():
    async def agent(ctx, n):
        values = await asyncio.gather(
            *(ctx.llm(f"p{i}", produce=lambda: ctx.rng.random()) for i in range(n))
        )
        return sum(values)

    traj = record(agent, {"n": 3}, seed=2)
    assert replay(agent, traj).result == traj.outcome.result
    assert replay(agent, traj, ReplayPlan.ablate_from(1), seed=3).result != traj.outcome.result


def test_now_off_the_recorded_path_is_the_recordings_clock():
    def agent(ctx):
        pick = ctx.llm("pick", produce=lambda: ctx.rng.random())
        first = ctx.now()
        ctx.tool("work", produce=lambda: pick * 2)
        return [first, ctx.now()]

    traj = record(agent, seed=3)
    runs = [replay(agent, traj, ReplayPlan.ablate_from(0), seed=s) for s in range(6)]
    changed = [r for r in runs if r.branch_at is not None]
    assert changed
    for run in changed:
        again = replay(agent, traj, ReplayPlan.ablate_from(0), seed=run.seed)
        assert again.result == run.result  # reproducible, not the wall clock
        first, second = run.result
        assert first == traj.steps[1].started_ns / 1e9 and second >= first


def test_the_async_variants_take_plain_agents_too():
    """Inside an event loop a user calls the a* variants whatever the agent is; a plain
    ``def`` agent got awaitable step calls there and returned an un-awaited coroutine, judged
    a failure. Now it is recorded, replayed and forked as the sync functions do."""

    def agent(ctx):
        return {"answer": ctx.llm("decide", produce=lambda: "ok")}

    def verifier(result):
        return result["answer"] == "ok"

    async def main():
        traj = await arecord(agent, verifier=verifier)
        replayed = await areplay(agent, traj, verifier=verifier)
        child = await afork(agent, traj, at_step=0, do="no", verifier=verifier)
        return traj, replayed, child

    traj, replayed, child = asyncio.run(main())
    assert traj.outcome.failed is False and traj.outcome.result == {"answer": "ok"}
    assert replayed.outcome.failed is False and replayed.result == {"answer": "ok"}
    assert child.outcome.failed is True and child.outcome.result == {"answer": "no"}


def test_the_task_is_recorded_as_the_agent_was_called_with_it():
    """An agent that appends to a list in its task changed the stored task, so a held
    replay (called with the stored task) diverged at step 0."""

    def agent(ctx, msgs):
        reply = ctx.llm("chat", produce=lambda: "hello", messages=list(msgs))
        msgs.append("mutated by the agent")
        return reply

    task = {"msgs": ["hi"]}
    traj = record(agent, task, verifier=lambda r: r == "hello")
    assert task == {"msgs": ["hi", "mutated by the agent"]}  # the caller's object is theirs
    assert traj.task == {"msgs": ["hi"]}
    again = replay(agent, traj, verifier=lambda r: r == "hello")
    assert not again.diverged and again.outcome.failed is False


def test_how_the_task_is_passed_is_decided_per_agent_under_a_shared_decorator():
    """Two agents wrapped by one ``functools.wraps`` decorator share the wrapper's code; how
    the task was passed was cached by that code, so whichever ran first decided for both."""

    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper

    @logged
    def by_keyword(ctx, question):
        return ctx.llm("a", produce=lambda: question)

    @logged
    def whole(ctx, task):
        return ctx.llm("b", produce=lambda: task["question"])

    for first, second in ((by_keyword, whole), (whole, by_keyword)):
        for agent in (first, second):
            traj = record(agent, {"question": "why?"})
            assert traj.outcome.error is None and traj.outcome.result == "why?"


class RateLimited(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after}s")
        self.retry_after = retry_after


def test_a_held_step_raises_what_the_agent_caught_when_recording():
    """A step whose produce raised the program's own exception is re-raised on replay as an
    instance of that class (and of RecordedStepError), so the agent's ``except`` catches it
    again; it arrived as a bare RecordedStepError and the held replay failed."""

    def search():
        raise RateLimited(2.0)

    def agent(ctx):
        try:
            ctx.tool("search", produce=search)
        except RateLimited as exc:  # the handler reads what the exception carries
            wait = exc.retry_after
            return ctx.llm("answer", produce=lambda: f"from memory ({wait}s)")
        return "searched"

    expected = "from memory (2.0s)"
    traj = record(agent, verifier=lambda r: r == expected)
    assert traj.outcome.failed is False and traj.steps[0].error["type"] == "RateLimited"
    assert traj.steps[0].error["attributes"] == {"retry_after": 2.0}
    again = replay(agent, traj, verifier=lambda r: r == expected)
    assert not again.diverged and again.outcome.failed is False


def test_a_cancelled_async_step_is_cancelled_again_on_replay():
    async def agent(ctx):
        async def slow():
            raise asyncio.CancelledError()

        try:
            await ctx.tool("c", produce=slow)
        except asyncio.CancelledError:
            note = "cancelled"
        return await ctx.llm("after", produce=lambda: "ok", note=note)

    traj = record(agent, verifier=lambda r: r == "ok")
    assert traj.outcome.failed is False
    again = replay(agent, traj, verifier=lambda r: r == "ok")
    assert not again.diverged and again.outcome.failed is False


def test_two_runs_that_differ_only_in_timing_do_not_diverge():
    """Recording the same deterministic agent twice gives steps that differ only in when they
    ran: diff listed that as a divergence at step 0."""
    from agent_replay import diff

    def agent(ctx):
        ctx.llm("plan", produce=lambda: "p")
        return ctx.tool("act", produce=lambda: "done")

    first, second = record(agent, session_id="a"), record(agent, session_id="b")
    comparison = diff(first, second)
    assert comparison.first_divergence is None
    assert all(step.same for step in comparison.steps)
    assert "the same steps" in comparison.to_text()


def test_a_fork_child_replays_like_a_recording_uuid_and_now_included():
    """Fork children (and replayed trajectories) kept no ctx.uuid()/ctx.now() values, so
    replaying a child of an agent that asks for them after a step diverged every time."""
    from agent_replay import fork

    def agent(ctx):
        pick = ctx.llm("pick", produce=lambda: ctx.rng.choice("xyz"))
        return ctx.tool("use", produce=lambda: pick, rid=ctx.uuid(), ts=ctx.now())

    parent = record(agent, seed=1)
    child = fork(agent, parent, at_step=0, do="x")
    assert {kind for _, kind, _ in child.effects} == {"uuid", "now"}
    for seed in range(3):
        again = replay(agent, child, seed=seed)
        assert not again.diverged and again.live_steps == 0
        assert again.result == child.steps[-1].output


def test_a_held_built_in_exception_carries_what_it_was_built_with():
    """A held KeyError was rebuilt from str() of it (quoted twice: "'user_id'") and an
    OSError lost its errno and file name, so a handler reading them took another path with no
    divergence reported."""
    import errno

    def lookup():
        return {}["user_id"]

    def read_file():
        with open("/nonexistent/agent-replay-probe.txt") as handle:
            return handle.read()

    def agent(ctx):
        out = []
        try:
            ctx.tool("lookup", produce=lookup)
        except KeyError as exc:
            out.append([str(exc), exc.args[0]])
        try:
            ctx.tool("read", produce=read_file)
        except OSError as exc:
            out.append([type(exc).__name__, exc.errno == errno.ENOENT, exc.filename])
        return out

    recorded = record(agent, seed=0)
    again = replay(agent, recorded)
    assert (
        again.result
        == recorded.outcome.result
        == [
            ["'user_id'", "user_id"],
            ["FileNotFoundError", True, "/nonexistent/agent-replay-probe.txt"],
        ]
    )


def test_a_served_dict_keeps_its_key_order_in_memory_and_through_the_store(tmp_path):
    """Recorded dicts were served with their keys sorted (the canonical encoding's order), so
    an agent that read one in order (its first key, ``", ".join(d)`` into a prompt) took
    another path on a factual replay, reported as a divergence."""
    from agent_replay import CheckpointStore

    def agent(ctx):
        scalars = ctx.tool("scalars", produce=lambda: {"z": 1, "a": 2})
        nested = ctx.tool("nested", produce=lambda: {"z": 1, "a": [{"y": 2, "b": 3}], 2: 0, 1: 0})
        text = ctx.llm("write", produce=lambda: "ok", prompt=", ".join(map(str, nested)))
        return [list(scalars), list(nested), list(nested["a"][0]), text]

    recorded = record(agent, seed=0, session_id="ordered")
    assert recorded.outcome.result == [["z", "a"], ["z", "a", 2, 1], ["y", "b"], "ok"]
    with CheckpointStore(tmp_path / "runs.sqlite") as store:
        store.save(recorded)
        loaded = store.load("ordered")
    assert list(loaded.steps[1].action) == ["z", "a", 2, 1]
    assert loaded.steps[2].inputs == {"prompt": "z, a, 2, 1"}
    for trajectory in (recorded, loaded):
        again = replay(agent, trajectory)
        assert not again.diverged and again.live_steps == 0
        assert again.result == recorded.outcome.result
        assert again.trajectory().head_hash == recorded.head_hash


def nested_agent(ctx):
    """A planner whose produce calls a tool, which itself calls an llm (two levels)."""

    def summarise():
        return ctx.llm("summarise", produce=lambda: f"sum{ctx.rng.randint(0, 9)}", q="refund")

    def plan():
        hits = ctx.tool("search", produce=lambda: [summarise(), "doc2"], q="refund")
        return {"plan": hits, "pick": ctx.rng.randint(0, 99)}

    p = ctx.llm("planner", produce=plan)
    answer = ctx.llm("write", produce=lambda: f"ok{ctx.rng.randint(0, 9)}", plan=p)
    return [p, answer]


def test_a_step_started_inside_another_replays_with_it():
    """A step started inside another's produce made every factual replay diverge: the outer
    step was served without running its produce, so the inner call never happened and every
    later call bound one position off."""
    recorded = record(nested_agent, seed=3)
    assert [s.label for s in recorded.steps] == [
        "llm:planner",
        "tool:search",
        "llm:summarise",
        "llm:write",
    ]
    assert [s.attributes.get("within_step") for s in recorded.steps] == [None, 0, 1, None]
    for seed in range(3):
        again = replay(nested_agent, recorded, seed=seed)
        assert not again.diverged and again.live_steps == 0 and again.served_steps == 4
        assert again.result == recorded.outcome.result
        assert again.trajectory().head_hash == recorded.head_hash


def test_a_nested_step_is_redrawn_with_the_step_that_started_it():
    recorded = record(nested_agent, seed=3)
    # re-drawing the planner runs its produce: the steps inside run live again, in place
    redrawn = replay(nested_agent, recorded, ReplayPlan.ablate_from(0), seed=1)
    assert not redrawn.diverged and redrawn.live_steps == 4
    assert [d.name for d in redrawn.drafts] == ["planner", "search", "summarise", "write"]
    # holding the planner holds everything it started: re-drawing from inside it changes
    # nothing before the next top-level step
    inner = replay(nested_agent, recorded, ReplayPlan.ablate_from(2), seed=1)
    assert not inner.diverged and inner.live_steps == 1 and inner.served_steps == 3
    # a forced planner never ran its produce: what it started is not part of the run
    forced = replay(nested_agent, recorded, ReplayPlan.factual().force(0, {"plan": []}))
    assert not forced.diverged
    assert [d.name for d in forced.drafts] == ["planner", "write"]
    assert forced.result[0] == {"plan": []}
    removed = replay(nested_agent, recorded, ReplayPlan.factual().remove(0))
    assert not removed.diverged and [d.name for d in removed.drafts] == ["write"]


def test_async_nested_steps_replay_with_the_step_that_started_them():
    async def agent(ctx):
        async def plan():
            hits = await ctx.tool("search", produce=lambda: ["doc1"], q="refund")
            return {"plan": hits}

        p = await ctx.llm("planner", produce=plan)
        return await ctx.llm("write", produce=lambda: "ok", plan=p)

    recorded = asyncio.run(arecord(agent, seed=0))
    again = asyncio.run(areplay(agent, recorded))
    assert not again.diverged and again.live_steps == 0
    assert again.trajectory().head_hash == recorded.head_hash


def test_an_intervention_inside_a_step_the_plan_serves_is_refused_before_running():
    from agent_replay import fork

    recorded = record(nested_agent, seed=3)
    for plan in (
        ReplayPlan.factual().force(1, ["x"]),
        ReplayPlan.factual().remove(2),
        ReplayPlan.factual().swap_model("m2", 2),
    ):
        with pytest.raises(PlanError, match="started inside step"):
            replay(nested_agent, recorded, plan)
    with pytest.raises(PlanError, match="started inside step 0"):
        fork(nested_agent, recorded, at_step=1, do=["x"])
    # with the steps around it re-drawn, the intervention applies
    plan = ReplayPlan.ablate_from(0).force(2, "forced summary")
    again = replay(nested_agent, recorded, plan, seed=1)
    assert again.result[0]["plan"][0] == "forced summary"


def planner_agent(ctx):
    """The planner draws a topic and searches it inside its produce."""

    def plan():
        topic = ctx.rng.choice(["refund", "shipping", "billing", "returns"])
        return {"topic": topic, "hits": ctx.tool("search", produce=lambda: f"doc:{topic}", q=topic)}

    p = ctx.llm("planner", produce=plan)
    return [p, ctx.llm("write", produce=lambda: ctx.rng.random() < 0.5, plan=p)]


def test_a_redrawn_step_that_passes_what_it_drew_to_a_step_inside_it_does_not_diverge():
    """A call inside a re-drawn step bound before that step finished, so its new inputs read
    as "inputs differ from the recording" with nothing upstream changed: a divergence, and a
    Shapley coalition's held steps ran live."""
    recorded = record(planner_agent, seed=0)
    rollouts = [
        replay(planner_agent, recorded, ReplayPlan.ablate_from(0), seed=s) for s in range(20)
    ]
    assert not any(r.diverged for r in rollouts)
    assert {r.result[0]["topic"] for r in rollouts} != {recorded.outcome.result[0]["topic"]}
    assert all(r.result[0]["hits"] == f"doc:{r.result[0]['topic']}" for r in rollouts)
    held_write = [
        replay(planner_agent, recorded, ReplayPlan.coalition([2]), seed=s) for s in range(20)
    ]
    assert all(r.result[1] == recorded.outcome.result[1] for r in held_write)
    strict = dataclasses.replace(ReplayPlan.ablate_from(0), strict=True)
    assert all(not replay(planner_agent, recorded, strict, seed=s).diverged for s in range(20))


def test_a_forced_step_drops_what_its_produce_started_and_runs_what_its_observe_starts():
    def agent(ctx):
        def produce():
            return {"query": ctx.llm("ask", produce=lambda: "PLAN", role="planner")}

        def observe(action):
            return ctx.llm("ask", produce=lambda: f"EXECUTED {action['query']}", role="executor")

        found = ctx.tool("search", produce=produce, observe=observe)
        return ctx.llm("write", produce=lambda: f"answer from {found}", obs=found)

    recorded = record(agent, seed=0)
    assert [(s.name, s.within, s.within_observe) for s in recorded.steps] == [
        ("search", None, False),
        ("ask", 0, False),
        ("ask", 0, True),
        ("write", None, False),
    ]
    plan = ReplayPlan.ablate_from(1).force(0, {"query": "forced"})
    forced = replay(agent, recorded, plan, seed=0)
    assert not forced.diverged
    assert forced.result == "answer from EXECUTED forced"  # the observe ran on the forced action
    assert [d.inputs.get("role") for d in forced.drafts] == [None, "executor", None]
    mocked = replay(agent, recorded, ReplayPlan.ablate_from(1).observe(0, "mocked"))
    assert not mocked.diverged and mocked.result == "answer from mocked"
    # a mocked step keeps its recorded action, and what its produce started to make it
    assert [d.name for d in mocked.drafts] == ["search", "ask", "write"]


def test_a_fork_child_with_nested_steps_after_dropped_ones_replays_exactly(tmp_path):
    from agent_replay import CheckpointStore, fork

    def agent(ctx):
        p = ctx.llm("plan", produce=lambda: ctx.llm("draft", produce=lambda: "d") + "!")
        found = ctx.tool("search", produce=lambda: [ctx.llm("summarise", produce=lambda: "s", q=p)])
        return ctx.llm("write", produce=lambda: "w", q=found)

    parent = record(agent, seed=0, session_id="parent")
    with CheckpointStore(tmp_path / "runs.sqlite") as store:
        store.save(parent)
        child = fork(agent, parent, at_step=0, do="forced!", store=store)
        assert [(s.name, s.within) for s in child.steps] == [
            ("plan", None),
            ("search", None),
            ("summarise", 1),  # re-indexed: "draft" (step 1 of the parent) was dropped
            ("write", None),
        ]
        stored = store.load(child.session_id)
    for trajectory in (child, stored):
        again = replay(agent, trajectory)
        assert not again.diverged and again.live_steps == 0
        assert again.trajectory().head_hash == child.head_hash


def test_fork_at_a_nested_step_is_refused_naming_the_step_to_fork_at():
    from agent_replay import fork

    with pytest.raises(PlanError, match="fork at step 0"):
        fork(nested_agent, record(nested_agent, seed=3), at_step=2, model="m2")


def test_the_replay_agent_replays_a_native_recording_with_nested_steps():
    from agent_replay.interop import replayable_agent

    recorded = record(nested_agent, seed=3)
    again = replay(replayable_agent(recorded, {}), recorded)
    assert not again.diverged and again.live_steps == 0 and again.served_steps == 4
    assert again.trajectory().head_hash == recorded.head_hash


def test_now_and_uuid_inside_a_step_are_not_handed_to_the_body_when_the_step_is_served():
    """They were recorded under the body segment after the step: a replay serving the step
    handed the body the value the step's produce had drawn, and the run diverged."""

    def agent(ctx):
        def outer():
            before = ctx.uuid()
            inner = ctx.llm("inner", produce=lambda: ctx.now())
            return [before, inner, ctx.uuid()]

        a = ctx.llm("outer", produce=outer)
        tag = ctx.uuid()
        return [a, tag, ctx.llm("b", produce=lambda: "x", tag=tag)]

    recorded = record(agent, seed=0)
    assert [(s, k) for s, k, _ in recorded.effects] == [
        (0, "uuid@step"),
        (1, "now@step"),
        (0, "uuid@step"),
        (2, "uuid"),
    ]
    again = replay(agent, recorded)
    assert not again.diverged and again.result == recorded.outcome.result
    redrawn = replay(agent, recorded, ReplayPlan.ablate_from(0), seed=1)
    assert not redrawn.diverged and redrawn.result[1] == recorded.outcome.result[1]


def test_the_task_result_and_metadata_keep_their_key_order_through_the_store(tmp_path):
    from agent_replay import CheckpointStore

    def agent(ctx, **task):
        prompt = "\n".join(f"{k}: {v}" for k, v in task.items())
        return {"question": task["question"], "answer": ctx.llm("a", produce=lambda: "x", p=prompt)}

    task = {"question": "q?", "context": "c"}
    recorded = record(agent, task, seed=0, session_id="s", metadata={"zeta": 1, "alpha": 2})
    with CheckpointStore(tmp_path / "runs.sqlite") as store:
        store.save(recorded)
        loaded = store.load("s")
    assert loaded.digest == recorded.digest
    assert list(loaded.task) == ["question", "context"]
    assert list(loaded.outcome.result) == ["question", "answer"]
    assert list(loaded.metadata)[-2:] == ["zeta", "alpha"]
    again = replay(agent, loaded)
    assert not again.diverged and again.trajectory().head_hash == recorded.head_hash


def test_a_redraw_that_returns_the_recorded_dict_in_another_key_order_has_branched():
    """It counted as reproducing the recording (== and the content hash ignore key order),
    so the run stayed on the recorded path while the agent went on with the other order,
    and the next step was reported as a divergence."""

    def agent(ctx):
        args = ctx.llm(
            "args",
            produce=lambda: dict(
                sorted({"units": "C", "city": "Oslo"}.items(), reverse=ctx.rng.random() < 0.5)
            ),
        )
        return ctx.llm("call", produce=lambda: "ok", order=list(args))

    recorded = record(agent, seed=0)
    rollouts = [replay(agent, recorded, ReplayPlan.ablate_from(0), seed=s) for s in range(20)]
    assert not any(r.diverged for r in rollouts)
    orders = {tuple(r.drafts[1].inputs["order"]) for r in rollouts}
    assert len(orders) == 2  # both orders were drawn, and each run went on with its own


def test_diff_names_a_step_whose_output_differs_only_in_key_order():
    from agent_replay import diff

    a2 = record(lambda ctx: ctx.tool("get", produce=lambda: {"z": 1, "a": 2}), seed=0)
    b2 = record(lambda ctx: ctx.tool("get", produce=lambda: {"a": 2, "z": 1}), seed=0)
    d = diff(a2, b2)
    assert d.first_divergence == 0 and d.steps[0].changes == ("output key order",)


def test_a_fork_child_that_dropped_nested_steps_replays_its_body_draws_exactly(tmp_path):
    """The rollout a child is recorded from keyed the body's ctx.rng / now() / uuid() by its
    own positions, which ran ahead of the child's indices by the steps the force dropped:
    the child's replay handed the body other values and diverged."""
    from agent_replay import CheckpointStore, fork

    def agent(ctx):
        p = ctx.llm("plan", produce=lambda: ctx.llm("draft", produce=lambda: "d") + "!")
        coin, tag = ctx.rng.randint(0, 10**6), ctx.uuid()
        return ctx.llm("write", produce=lambda: "w", p=p, coin=coin, tag=tag, at=ctx.now())

    parent = record(agent, seed=0, session_id="parent")
    with CheckpointStore(tmp_path / "runs.sqlite") as store:
        store.save(parent)
        child = fork(agent, parent, at_step=0, do="forced!", store=store)
        assert [s.name for s in child.steps] == ["plan", "write"]
        stored = store.load(child.session_id)
        grandchild = fork(agent, stored, at_step=1, do="w2", store=store)
    for trajectory in (child, stored):
        again = replay(agent, trajectory)
        assert not again.diverged and again.result == child.outcome.result
        assert again.trajectory().head_hash == child.head_hash
    again = replay(agent, grandchild)
    assert not again.diverged and again.result == grandchild.outcome.result


def test_a_served_steps_own_now_and_uuid_are_carried_into_a_run_recorded_from_it():
    """A fork child's served prefix had none of the values its steps took inside themselves:
    re-drawing such a step on the child drew a fresh uuid where the parent reproduced."""
    from agent_replay import fork

    def agent(ctx):
        plan = ctx.llm("plan", produce=lambda: f"plan-{ctx.uuid()[:8]}")
        return [plan, ctx.llm("write", produce=lambda: "w", plan=plan)]

    parent = record(agent, seed=0)
    child = fork(agent, parent, at_step=1, do="forced")
    assert [k for _, k, _ in child.effects] == ["uuid@step"]
    for trajectory in (parent, child):
        redrawn = replay(agent, trajectory, ReplayPlan.ablate_from(0), seed=1)
        assert redrawn.result[0] == parent.outcome.result[0]


def test_a_rollouts_trajectory_keeps_the_task_and_seed_so_it_replays():
    """QA: ``ReplayResult.trajectory()`` had no task and no seed: replaying it called the
    agent without its arguments."""

    def agent(ctx, question):
        noise = ctx.rng.random()
        answer = ctx.llm("answer", produce=lambda: ctx.rng.choice(["a", "b"]), q=question)
        return f"{answer}:{noise:.3f}"

    traj = record(agent, {"question": "why?"}, seed=4)
    rollout = replay(agent, traj, ReplayPlan.ablate_from(0), seed=7)
    child = rollout.trajectory()
    assert (child.task, child.seed) == (traj.task, traj.seed)
    again = replay(agent, child)
    assert again.result == rollout.result and not again.diverged
