"""Rollout limits: a rollout that an intervention sends into a loop, or that stalls, is
stopped and counts as a failure; attribution finishes and says how many were stopped."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from click.testing import CliRunner

from agent_replay import (
    CheckpointStore,
    ReplayPlan,
    RolloutEngine,
    RolloutLimitExceeded,
    RolloutLimits,
    arecord,
    areplay,
    attribute,
    record,
    replay,
)
from agent_replay.cli import main


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


def test_an_async_agent_stalled_in_an_await_is_cancelled_at_the_time_limit():
    async def agent(ctx, goal, hang=True):
        mode = await ctx.llm("decide", produce=lambda: ctx.rng.choice(["answer", "wait"]))
        if mode == "wait" and hang:
            await asyncio.sleep(3600)  # a hung connection: no step will ever start again
        return await ctx.llm("answer", produce=lambda: "wrong", goal=goal)

    for seed in range(100):  # (a twin that does not hang draws the same)
        twin = asyncio.run(arecord(agent, {"goal": "g", "hang": False}, seed=seed))
        if twin.steps[0].action == "answer":
            run = asyncio.run(arecord(agent, {"goal": "g"}, seed=seed, verifier=is_right))
            break
    plan = ReplayPlan().force(0, "wait")
    started = time.monotonic()
    result = asyncio.run(
        areplay(agent, run, plan, verifier=is_right, limits=RolloutLimits(seconds=0.2))
    )
    assert time.monotonic() - started < 5
    assert result.stopped == "seconds" and result.failed
    assert result.exception["type"] == "RolloutLimitExceeded"
    # the sync entry point runs it the same way
    assert replay(agent, run, plan, limits=RolloutLimits(seconds=0.2)).stopped == "seconds"


def test_limits_are_checked():
    for bad in (dict(steps=0), dict(steps=True), dict(seconds=0), dict(seconds=-1.0)):
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
