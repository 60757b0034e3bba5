"""The pytest gate, through pytester: the plugin is loaded by its pytest11 entry point."""

from __future__ import annotations

import math

import pytest

from agent_replay.attribution.stats import cp_upper
from agent_replay.pytest_plugin import AgentGateFailure, assert_agent_passes, minimum_rollouts

pytest_plugins = ["pytester"]

TOY = """
def steady_agent(ctx, question):
    # harmless randomness only: always right
    style = ctx.llm("style", produce=lambda: ctx.rng.choice(["short", "long"]), q=question)
    return {"answer": "42", "style": style}


def flaky_agent(ctx, question):
    # step 1 picks a wrong source 30% of the time, and the answer follows it
    ctx.llm("plan", produce=lambda: ctx.rng.choice(["a", "b"]), q=question)
    source = ctx.tool(
        "pick_source",
        produce=lambda: "almanac" if ctx.rng.random() < 0.7 else "rumour",
        q=question,
    )
    answer = ctx.llm("answer", produce=lambda: "42" if source == "almanac" else "41", src=source)
    return {"answer": answer}


def correct(result):
    return 1.0 if result["answer"] == "42" else 0.0
"""


def test_minimum_rollouts_is_the_smallest_that_can_pass():
    n = minimum_rollouts(0.05, 0.95)
    assert n == 59
    assert cp_upper(0, n, 0.05) <= 0.05 < cp_upper(0, n - 1, 0.05)
    assert minimum_rollouts(0.1, 0.9) == math.ceil(math.log(0.1) / math.log(0.9))


def test_too_few_rollouts_is_refused():
    with pytest.raises(ValueError, match="could never pass"):
        assert_agent_passes(lambda ctx: None, None, lambda r: 1.0, rollouts=40)


def test_gate_passes_and_fails_in_a_real_pytest_run(pytester, tmp_path):
    pytester.makepyfile(toy_agents=TOY)
    report = tmp_path / "gate.html"
    pytester.makepyfile(
        test_gate=f"""
from agent_replay.pytest_plugin import assert_agent_passes
from toy_agents import correct, flaky_agent, steady_agent


def test_steady():
    result = assert_agent_passes(steady_agent, {{"question": "q"}}, correct)
    assert result.passed and result.failures == 0 and result.rollouts == 59


def test_flaky():
    assert_agent_passes(flaky_agent, {{"question": "q"}}, correct, report_path={str(report)!r})


def test_fixture(agent_replay_gate):
    agent_replay_gate(flaky_agent, {{"question": "q"}}, correct, rollouts=60)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert "agent-replay gate:" in out and "exceeds the budget 5.0%" in out
    assert "Step 1 · tool:pick_source" in out  # the culprit, in the failure message
    assert "Why" in out and "Fix" in out and "rumour" in out
    assert f"HTML report: {report}" in out
    assert "Culprit: step 1" in report.read_text()
    assert "agent-replay-report.html" in out  # the fixture's report in tmp_path


def test_gate_failure_carries_the_evidence():
    def agent(ctx, n):
        return {"ok": ctx.llm("coin", produce=lambda: ctx.rng.random() < 0.5, n=n)}

    with pytest.raises(AgentGateFailure) as info:
        assert_agent_passes(agent, {"n": 1}, lambda r: float(r["ok"]), p_fail_max=0.2)
    gate = info.value.result
    assert not gate.passed and gate.failures == len(gate.failing_seeds) > 0
    assert gate.upper_bound == pytest.approx(cp_upper(gate.failures, gate.rollouts, 0.05))
    assert gate.attribution is not None and gate.attribution.culprit_index == 0
    assert isinstance(info.value, AssertionError)


def test_a_rate_within_budget_without_the_runs_to_show_it_says_to_run_more():
    """An agent failing rarely fails the default gate on its first failure; the message says
    the rate is within the budget, names the failing seeds and how to get the evidence."""

    def agent(ctx):
        return ctx.llm("coin", produce=lambda: ctx.rng.random() < 0.99)

    with pytest.raises(AgentGateFailure) as info:
        for seed in range(0, 2000, 59):  # some window of 59 runs holds a failure
            assert_agent_passes(agent, None, float, seed=seed, repair=False)
    gate, message = info.value.result, str(info.value)
    assert gate.failures >= 1 and gate.failure_rate < gate.p_fail_max
    assert f"seeds {gate.failing_seeds[0]}" in message
    assert "within the budget" in message and "rollouts=" in message


@pytest.mark.parametrize("confidence", [0.0, 1.0])
def test_a_confidence_outside_the_open_interval_is_a_value_error(confidence):
    with pytest.raises(ValueError, match="confidence must be in"):
        assert_agent_passes(lambda ctx: None, None, lambda r: 1.0, confidence=confidence)


def test_the_gate_takes_an_agent_written_without_ctx():
    """An SDK agent recorded by interception has no ``ctx``; the gate could only run it
    through a ``lambda ctx, **task: agent(**task)`` wrapper."""
    import random

    from agent_replay import instrument

    @instrument.tool
    def pick_source(q):
        return "almanac" if random.random() < 0.7 else "rumour"

    def agent(question):
        return {"answer": "42" if pick_source(question) == "almanac" else "41"}

    def correct(result):
        return 1.0 if result["answer"] == "42" else 0.0

    with pytest.raises(AgentGateFailure) as failed:
        assert_agent_passes(agent, {"question": "q"}, correct, pass_context=False)
    result = failed.value.result
    assert result.failures > 0 and result.attribution is not None
    assert result.attribution.to_dict()["culprit_label"].endswith("pick_source")
