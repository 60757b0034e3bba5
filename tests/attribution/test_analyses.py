"""Drift, faithfulness and ``analyze`` (the three with one rollout cache)."""

from agent_replay import analyze, attribute, drift, faithfulness, record
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent


def reasoned(ctx):
    """The answer is what the reasoning step decided: a faithful run."""
    thought = ctx.llm("think", produce=lambda: ctx.rng.choice(["a", "b", "c"]))
    return ctx.llm("answer", produce=lambda: thought.upper(), thought=thought)


def post_hoc(ctx):
    """The answer ignores the reasoning step's draw: its reasoning is post-hoc."""
    ctx.llm("think", produce=lambda: ctx.rng.choice(["a", "b", "c"]))
    return ctx.llm("answer", produce=lambda: "A")


def fixed(ctx):
    """Nothing is ever re-drawn differently: nothing can be measured."""
    ctx.llm("think", produce=lambda: "a")
    return ctx.llm("answer", produce=lambda: "A")


def is_a(result):
    return result == "A"


def test_faithfulness_tells_reasoning_that_drives_the_answer_from_post_hoc():
    faithful = faithfulness(record(reasoned, seed=1, verifier=is_a), reasoned, is_a)
    assert faithful.faithful is True and faithful.post_hoc is False
    assert faithful.sensitivity[0] == 1.0  # every changed thought changed the answer
    unfaithful = faithfulness(record(post_hoc, seed=1, verifier=is_a), post_hoc, is_a)
    assert unfaithful.faithful is False and unfaithful.post_hoc is True
    assert unfaithful.sensitivity[0] == 0.0 and unfaithful.quadrant == "correct-unfaithful"


def test_faithfulness_with_nothing_measured_says_so_instead_of_post_hoc():
    """A deterministic agent: no step's output ever changed, so there is no evidence either
    way (it was reported post-hoc)."""
    result = faithfulness(record(fixed, verifier=is_a), fixed, is_a)
    assert result.sensitivity[0] is None
    assert result.faithful is None and result.post_hoc is None
    assert result.quadrant == "correct-unmeasured"


def test_analyze_gives_what_each_analysis_gives_alone_and_shares_rollouts():
    traj = record(support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved)
    together = analyze(traj, support_agent, refund_approved, rollouts=16)
    alone = {
        "attribution": attribute(traj, support_agent, refund_approved),
        "drift": drift(traj, support_agent, refund_approved, 16),
        "faithfulness": faithfulness(traj, support_agent, refund_approved, 16),
    }
    first = together["attribution"].to_dict()
    second = alone["attribution"].to_dict()
    for result in (first, second):
        result["cost"] = {}  # wall times differ, and the shared cache saves rollouts
    assert first == second
    drifts = [together["drift"].to_dict(), alone["drift"].to_dict()]
    assert drifts[0]["live_steps"] < drifts[1]["live_steps"]  # paid for once
    for result in drifts:
        del result["rollouts"], result["live_steps"]  # what ran, not what was found
    assert drifts[0] == drifts[1]
    assert together["faithfulness"].to_dict() == alone["faithfulness"].to_dict()
    assert together["cache"].hits > 0


def test_faithfulness_checks_its_input_and_its_replays():
    """QA: ``rollouts=0`` gave an 'unmeasured' result (drift and attribute refuse it), and an
    agent whose every replay left the recording got a quadrant with no warning."""
    import random

    import pytest

    run = record(reasoned, seed=1, verifier=is_a)
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="rollouts must be"):
            faithfulness(run, reasoned, is_a, rollouts=bad)
    with pytest.raises(ValueError, match="threshold"):
        faithfulness(run, reasoned, is_a, threshold=2)
    assert faithfulness(run, reasoned, is_a).warnings == ()

    def wandering(ctx):  # reads the process's random, not ctx.rng: replays do not follow
        name = "think" if random.random() < 0.5 else "ponder"
        thought = ctx.llm(name, produce=lambda: ctx.rng.choice(["a", "b"]))
        return ctx.llm("answer", produce=lambda: thought.upper(), thought=thought)

    random.seed(4)
    wild = record(wandering, seed=1, verifier=is_a)
    result = faithfulness(wild, wandering, is_a, rollouts=20)
    assert any("factual replays diverged from the recording" in w for w in result.warnings)
    assert result.to_dict()["warnings"] == list(result.warnings)
