"""Rollout limits: a rollout that an intervention sends into a loop, or that stalls, is
stopped and counts as a failure; attribution finishes and says how many were stopped."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from agent_replay import (
    CheckpointStore,
    ReplayPlan,
    RolloutCache,
    RolloutEngine,
    RolloutLimitExceeded,
    RolloutLimits,
    arecord,
    areplay,
    attribute,
    fork,
    record,
    replay,
    resume,
)
from agent_replay.cli import main
from agent_replay.errors import PlanError


def polling_agent(ctx, goal, *, loop=True):
    """Answers, or polls a job that never finishes: nothing but a limit ends that loop. Its
    tool wrapper turns every ``Exception`` into a status, as agent frameworks do."""
    mode = ctx.llm("decide", produce=lambda: ctx.rng.choice(["answer", "poll"]), goal=goal)
    polls, status = 0, None
    while mode == "poll" and loop and status != "done":
        try:
            status = ctx.tool("status", produce=lambda: "pending", attempt=polls)
        except Exception as exc:  # handed to the model as text
            status = f"error: {exc}"
        polls += 1
    return ctx.llm("answer", produce=lambda: ctx.rng.choice(["right", "wrong"]), goal=goal)


def is_right(answer):
    return answer == "right"


def recorded(decision: str, answer: str):
    """A recorded run whose ``decide`` step drew ``decision`` and whose answer was ``answer``
    (seeds tried on a twin that does not loop: it draws the same, step for step)."""
    for seed in range(200):
        twin = record(polling_agent, {"goal": "g", "loop": False}, seed=seed)
        if twin.steps[0].action == decision and twin.outcome.result == answer:
            return record(polling_agent, {"goal": "g"}, seed=seed, verifier=is_right)
    raise AssertionError("no seed gives that run")


@pytest.fixture(scope="module")
def failed_run():
    return recorded("answer", "wrong")


def test_a_forced_loop_is_stopped_at_the_step_limit_and_fails(failed_run):
    plan = ReplayPlan().force(0, "poll")
    result = replay(polling_agent, failed_run, plan, verifier=is_right, limits=RolloutLimits(25))
    assert result.stopped == "steps" and result.failed
    assert result.exception["type"] == "RolloutLimitExceeded"
    assert "25 steps" in result.exception["message"]
    # steps 1..24 ran (step 0 forced); the 25th was refused before running
    assert result.live_steps == 24 and len(result.drafts) == 25
    assert result.to_record()["stopped"] == "steps"


def test_without_limits_nothing_changes(failed_run):
    factual = replay(polling_agent, failed_run, verifier=is_right, limits=RolloutLimits(2))
    assert factual.stopped is None and not factual.diverged  # served steps are not limited
    assert factual.outcome.result == "wrong"
    plan = ReplayPlan().force(0, "answer")
    assert replay(polling_agent, failed_run, plan, limits=RolloutLimits()).stopped is None


def test_a_slow_loop_is_stopped_at_the_time_limit(failed_run):
    def slow_agent(ctx, goal):
        mode = ctx.llm("decide", produce=lambda: ctx.rng.choice(["answer", "poll"]), goal=goal)
        while mode == "poll":
            ctx.tool("status", produce=lambda: time.sleep(0.01) or "pending")
        return ctx.llm("answer", produce=lambda: ctx.rng.choice(["right", "wrong"]), goal=goal)

    started = time.monotonic()
    result = replay(
        slow_agent,
        failed_run,
        ReplayPlan().force(0, "poll"),
        verifier=is_right,
        limits=RolloutLimits(seconds=0.3),
    )
    elapsed = time.monotonic() - started
    assert result.stopped == "seconds" and result.failed
    assert "0.3 s" in result.exception["message"]
    assert 0.3 <= elapsed < 5 and 5 < result.live_steps < 60


async def hanging_agent(ctx, goal, hang=True, on_cancel=None):
    mode = await ctx.llm("decide", produce=lambda: ctx.rng.choice(["answer", "wait"]))
    if mode == "wait" and hang:
        try:
            await asyncio.sleep(3600)  # a hung connection: no step will ever start again
        except asyncio.CancelledError:
            if on_cancel == "answer":  # a fallback, as a timeout wrapper would give
                return "right"
            if on_cancel == "convert":  # as some client libraries do
                raise RuntimeError("upstream timed out") from None
            raise
    return await ctx.llm("answer", produce=lambda: "wrong", goal=goal)


@pytest.fixture(scope="module")
def hanging_run():
    for seed in range(100):  # (a twin that does not hang draws the same)
        twin = asyncio.run(arecord(hanging_agent, {"goal": "g", "hang": False}, seed=seed))
        if twin.steps[0].action == "answer":
            return asyncio.run(arecord(hanging_agent, {"goal": "g"}, seed=seed, verifier=is_right))
    raise AssertionError("no seed gives that run")


@pytest.mark.parametrize("on_cancel", [None, "answer", "convert"])
def test_an_async_agent_stalled_in_an_await_is_cancelled_at_the_time_limit(hanging_run, on_cancel):
    """Stopped whatever the agent makes of the cancellation: a fallback answer after the
    deadline is not a run that finished in time."""
    plan = ReplayPlan().force(0, "wait")
    limits = RolloutLimits(seconds=0.2)

    started = time.monotonic()
    result = asyncio.run(areplay(hanging_agent_with(on_cancel), hanging_run, plan,
                                 verifier=is_right, limits=limits))  # fmt: skip
    assert time.monotonic() - started < 5
    assert result.stopped == "seconds" and result.failed and result.result is None
    assert result.exception["type"] == "RolloutLimitExceeded"
    # the sync entry point runs it the same way
    again = replay(hanging_agent_with(on_cancel), hanging_run, plan, limits=limits)
    assert again.stopped == "seconds"


def hanging_agent_with(on_cancel):
    async def agent(ctx, goal):
        return await hanging_agent(ctx, goal, on_cancel=on_cancel)

    return agent


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is Python 3.11+")
def test_a_stop_raised_inside_a_task_group_stops_the_rollout():
    """A TaskGroup wraps what its tasks raise in an exception group: the rollout is still
    stopped (and the engine's own early stop of coupled rollouts still works)."""

    async def agent(ctx, goal, loop=True):
        mode = await ctx.llm("decide", produce=lambda: ctx.rng.choice(["answer", "poll"]))
        status = None
        while mode == "poll" and loop and status != "done":
            async with asyncio.TaskGroup() as group:
                a = group.create_task(ctx.tool("status_a", produce=lambda: "pending"))
                group.create_task(ctx.tool("status_b", produce=lambda: "pending"))
            status = a.result()
        return await ctx.llm("answer", produce=lambda: ctx.rng.choice(["right", "wrong"]))

    for seed in range(200):
        twin = asyncio.run(arecord(agent, {"goal": "g", "loop": False}, seed=seed))
        if twin.steps[0].action == "answer" and twin.outcome.result == "wrong":
            run = asyncio.run(arecord(agent, {"goal": "g"}, seed=seed, verifier=is_right))
            break
    plan = ReplayPlan().force(0, "poll")
    result = asyncio.run(areplay(agent, run, plan, verifier=is_right, limits=RolloutLimits(25)))
    assert result.stopped == "steps" and result.failed
    attributed = attribute(run, agent, is_right, rollouts=8, adaptive=False,
                           limits=RolloutLimits(30))  # fmt: skip
    assert attributed.cost["stopped"] > 0
    # no limits: rollouts the coupling ends early (an internal stop) end cleanly too
    unlimited = attribute(run, agent, is_right, rollouts=8, adaptive=False,
                          limits=RolloutLimits(400))  # fmt: skip
    assert unlimited.cost["rejoined_rollouts"] > 0


def test_an_agent_that_catches_the_stop_and_retries_gets_a_new_one_each_time(failed_run):
    """Every live step after the stop raises again, a new exception each time: an agent
    catching ``BaseException`` in a bounded retry loop does not grow one traceback."""

    def agent(ctx, goal):
        mode = ctx.llm("decide", produce=lambda: ctx.rng.choice(["answer", "poll"]), goal=goal)
        status = None
        for attempt in range(2000 if mode == "poll" else 0):
            try:
                status = ctx.tool("status", produce=lambda: "pending", attempt=attempt)
            except BaseException as exc:  # the point of the test
                status = exc
        return ctx.llm("answer", produce=lambda: str(status), goal=goal)

    result = replay(agent, failed_run, ReplayPlan().force(0, "poll"), verifier=is_right,
                    limits=RolloutLimits(25))  # fmt: skip
    assert result.stopped == "steps" and result.failed
    assert len(result.exception["traceback"]) < 20_000


def test_limits_are_checked():
    for bad in (
        dict(steps=0),
        dict(steps=True),
        dict(steps=2.5),
        dict(steps="100"),
        dict(seconds=0),
        dict(seconds=-1.0),
        dict(seconds=float("nan")),
        dict(seconds="1"),
    ):
        with pytest.raises(ValueError, match="RolloutLimits"):
            RolloutLimits(**bad)
    assert RolloutLimits().describe() == "none"
    assert RolloutLimits(7, 1.5).describe() == "7 steps, 1.5 s"
    assert issubclass(RolloutLimitExceeded, BaseException)
    assert not issubclass(RolloutLimitExceeded, Exception)  # an agent's except Exception


def test_attribution_finishes_when_rollouts_loop_and_says_so(failed_run):
    engine = RolloutEngine(failed_run, polling_agent, is_right)
    assert engine.limits == RolloutLimits(steps=100)  # the default: 10 x 2 steps, at least 100
    result = attribute(
        failed_run, polling_agent, is_right, rollouts=16, adaptive=False, limits=RolloutLimits(30)
    )
    stopped = result.cost["stopped"]
    assert 0 < stopped < result.cost["rollouts"]
    assert result.exceptions["RolloutLimitExceeded"] == stopped
    warning = next(w for w in result.warnings if "ran into their limits" in w)
    assert f"{stopped} of {result.cost['rollouts']} rollouts" in warning and "30 steps" in warning
    # a re-drawn decision that polls fails like a wrong answer, so the answer step is not the
    # only cause: both steps carry an effect, and the report still comes out
    assert result.to_dict()["cost"]["stopped"] == stopped


def test_the_command_line_sets_the_limits(tmp_path, failed_run):
    db = tmp_path / "runs.sqlite"
    with CheckpointStore(db) as store:
        store.save(failed_run)
    args = [
        "attribute", "--db", db, "--session", failed_run.session_id,
        "--agent", f"{__name__}:polling_agent", "--verifier", f"{__name__}:is_right",
        "--rollouts", "8", "--no-save", "--json",
    ]  # fmt: skip
    runner = CliRunner()
    for bad in (["--max-rollout-steps", "0"], ["--rollout-timeout", "0"]):
        refused = runner.invoke(main, list(map(str, args + bad)))
        assert refused.exit_code == 2, refused.output
    done = runner.invoke(main, list(map(str, [*args, "--max-rollout-steps", "12"])))
    assert done.exit_code in (0, 3), done.output
    report = json.loads(done.stdout)
    assert report["cost"]["stopped"] > 0
    assert any("12 steps" in w for w in report["warnings"])


def test_an_async_agent_attributed_from_the_command_line(tmp_path, hanging_run):
    """``agent-replay attribute`` runs an ``async def`` agent's rollouts on its event loop
    (it used to call the agent from inside that loop and fail), so the time limit reaches a
    hung await."""
    db = tmp_path / "runs.sqlite"
    with CheckpointStore(db) as store:
        store.save(hanging_run)
    done = CliRunner().invoke(main, list(map(str, [
        "attribute", "--db", db, "--session", hanging_run.session_id,
        "--agent", f"{__name__}:hanging_agent", "--verifier", f"{__name__}:is_right",
        "--rollouts", "8", "--no-save", "--json", "--rollout-timeout", "0.3",
    ])))  # fmt: skip
    assert done.exit_code in (0, 3), done.output
    report = json.loads(done.stdout)
    assert report["cost"]["stopped"] > 0
    assert report["cost"]["limits"] == {"steps": 100, "seconds": 0.3}
    warning = next(w for w in report["warnings"] if "ran into their limits" in w)
    assert "the time limit counts waiting" in warning  # 64 rollouts run at once


def test_one_cache_serves_one_set_of_limits(failed_run):
    cache = RolloutCache()
    RolloutEngine(failed_run, polling_agent, is_right, cache=cache, limits=RolloutLimits(30))
    RolloutEngine(failed_run, polling_agent, is_right, cache=cache, limits=RolloutLimits(30))
    with pytest.raises(ValueError, match="one cache per set of limits"):
        RolloutEngine(failed_run, polling_agent, is_right, cache=cache)


def test_a_budget_sizes_later_batches_on_the_longest_rollout_seen(failed_run):
    """The first batch can overrun (its looping rollouts were not foreseen); after it the
    search knows rollouts can run to the limit and stops instead of running more."""
    result = attribute(failed_run, polling_agent, is_right, budget=500)
    assert result.stop_reason == "budget" and result.cost["stopped"] > 0
    assert result.cost["live_steps"] <= 500  # 642 when batches were sized on the recording


def test_the_explanation_does_not_list_stopped_rollouts_as_agent_exceptions(failed_run):
    result = attribute(failed_run, polling_agent, is_right, rollouts=16, adaptive=False,
                       limits=RolloutLimits(30))  # fmt: skip
    text = result.explain(failed_run).to_text()
    assert "ran into their limits" in text and "RolloutLimitExceeded x" not in text


def test_drift_counts_stopped_rollouts(failed_run):
    from agent_replay import drift

    result = drift(failed_run, polling_agent, is_right, 16, limits=RolloutLimits(30))
    assert result.stopped > 0 and result.to_dict()["stopped"] == result.stopped
    assert result.failure_rates[0] > 0  # a rollout that polls forever failed


def test_aggregate_counts_stopped_rollouts(failed_run):
    from agent_replay import aggregate_runs

    result = aggregate_runs([failed_run], polling_agent, is_right, rollouts=16, adaptive=False,
                            limits=RolloutLimits(30))  # fmt: skip
    assert result.stopped_rollouts == result.results[0].cost["stopped"] > 0
    assert result.to_dict()["stopped_rollouts"] == result.stopped_rollouts
    assert "ran into their limits" in result.to_text()


def test_drift_and_aggregate_take_the_limits_on_the_command_line(tmp_path, failed_run):
    db = tmp_path / "runs.sqlite"
    with CheckpointStore(db) as store:
        store.save(failed_run)
    common = ["--db", db, "--agent", f"{__name__}:polling_agent",
              "--verifier", f"{__name__}:is_right", "--json"]  # fmt: skip
    runner = CliRunner()
    drifted = runner.invoke(main, list(map(str, [
        "drift", "--session", failed_run.session_id, "--rollouts", "8", *common,
        "--max-rollout-steps", "12",
    ])))  # fmt: skip
    assert drifted.exit_code == 0, drifted.output
    assert json.loads(drifted.stdout)["stopped"] > 0
    pooled = runner.invoke(main, list(map(str, [
        "aggregate", "--rollouts", "8", *common, "--max-rollout-steps", "12",
    ])))  # fmt: skip
    assert pooled.exit_code == 0, pooled.output
    assert json.loads(pooled.stdout)["stopped_rollouts"] > 0
    refused = runner.invoke(main, list(map(str, ["drift", "--session", "x", *common,
                                                 "--rollout-timeout", "-1"])))  # fmt: skip
    assert refused.exit_code == 2


def test_a_timeout_alone_keeps_the_default_step_limit(failed_run):
    from agent_replay.cli.common import rollout_limits

    assert rollout_limits([failed_run], None, None) is None
    assert rollout_limits([failed_run], None, 2.5) == RolloutLimits(100, 2.5)
    assert rollout_limits([failed_run], 7, None) == RolloutLimits(7)


def test_a_fork_into_a_loop_is_stopped_and_recorded_so(tmp_path, failed_run):
    """fork and resume ran their live part without any bound: a fork into the loop hung."""
    child = fork(
        polling_agent, failed_run, at_step=0, do="poll", verifier=is_right, limits=RolloutLimits(9)
    )
    assert child.outcome.failed and child.outcome.error["type"] == "RolloutLimitExceeded"
    assert len(child.steps) == 9 and child.lineage.fork_step == 0
    db = tmp_path / "runs.sqlite"
    with CheckpointStore(db) as store:
        store.save(failed_run)
    common = [
        "--db", db, "--session", failed_run.session_id,
        "--agent", f"{__name__}:polling_agent", "--verifier", f"{__name__}:is_right",
    ]  # fmt: skip

    def cli(*args):
        return CliRunner().invoke(main, list(map(str, args)))

    fork_args = ("fork", *common, "--at-step", "0", "--do", "poll")
    forked = cli(*fork_args, "--max-rollout-steps", "7", "--json")
    assert forked.exit_code == 0, forked.output
    assert json.loads(forked.stdout)["stopped"] == "it reached 7 steps (RolloutLimits.steps)"
    text = cli(*fork_args, "--rollout-timeout", "0.2")
    assert "failed (stopped: it ran" in text.stdout, text.output
    resumed = cli("resume", *common, "--json")
    assert json.loads(resumed.stdout)["stopped"] is None  # the recording answered: no loop


def test_a_step_limit_that_does_not_reach_past_the_branch_point_is_refused(failed_run):
    """``fork --at-step 5 --max-rollout-steps 3`` stored a 6-step child "stopped: it reached 3
    steps": the limit counts the served steps too."""
    with pytest.raises(PlanError, match=r"serves the first 1 steps .* give more than 1"):
        fork(polling_agent, failed_run, at_step=1, do="right", limits=RolloutLimits(1))
    with pytest.raises(PlanError, match="give more than 2"):
        resume(polling_agent, failed_run, limits=RolloutLimits(2))
    child = fork(polling_agent, failed_run, at_step=1, do="right", limits=RolloutLimits(2))
    assert child.outcome.error is None and len(child.steps) == 2


def threaded_agent(ctx):
    """Each tool step runs in a thread of the agent's own; a thread that fails leaves no
    value, and the agent carries on (as one whose workers report into a list does)."""
    values: list[int] = []

    def work(i):
        values.append(ctx.tool("read", produce=lambda: ctx.rng.randrange(2), i=i))

    for i in range(4):
        thread = threading.Thread(target=work, args=(i,))
        thread.start()
        thread.join()
    return ctx.llm("pick", produce=lambda: "bad" if ctx.rng.random() < 0.5 else "good")


def test_rollouts_stopped_in_the_agents_own_threads_are_not_reported_as_crashes(monkeypatch):
    """A rollout stopped (at a limit, or because its course is known) where a step runs in
    a thread the agent started ended that thread with an internal exception, which Python's
    threading.excepthook printed to stderr as "Exception in thread ..."; it still reaches
    the hook for the agent's own errors."""
    reported: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(args.exc_value))
    run = next(
        t for s in range(100) if (t := record(threaded_agent, seed=s, verifier=is_bad_free)).failed
    )
    engine = RolloutEngine(run, threaded_agent, is_bad_free)
    rejoined = 0
    for position in (4, 3, 2, 1, 0):  # later prefix plans first: earlier ones rejoin them
        rejoined += sum(r.rejoined for r in engine.run(ReplayPlan.ablate_from(position), range(16)))
    assert rejoined > 0  # rollouts were stopped, some inside the agent's threads
    plan = ReplayPlan.ablate_from(0)
    stopped = replay(threaded_agent, run, plan, verifier=is_bad_free, limits=RolloutLimits(2))
    assert stopped.stopped == "steps" and stopped.failed
    assert reported == []

    def crashing(ctx):
        thread = threading.Thread(target=lambda: 1 / 0)
        thread.start()
        thread.join()
        return threaded_agent(ctx)

    replay(crashing, record(crashing, seed=0))
    assert [type(e) for e in reported] == [ZeroDivisionError] * 2  # recorded, replayed


def is_bad_free(result):
    return result != "bad"
