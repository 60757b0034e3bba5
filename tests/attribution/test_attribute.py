import asyncio
import dataclasses
import datetime
import json
import sys
from pathlib import Path

import pytest

from agent_replay import (
    ReplayPlan,
    RolloutCache,
    RolloutEngine,
    aggregate_runs,
    attribute,
    record,
)
from agent_replay.attribution.aggregate import mean_interval
from agent_replay.attribution.result import REPORT_SCHEMA_VERSION
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent
from agent_replay.errors import SuccessfulRunError, UnfaithfulReplayError, VerifierError
from agent_replay.rollouts import AsyncExecutor, SerialExecutor, ThreadExecutor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import families


@pytest.fixture(scope="module")
def demo_run():
    return record(support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved)


def test_demo_culprit_agent_and_repair(demo_run):
    result = attribute(demo_run, support_agent, refund_approved, repair=True)
    assert result.culprit_index == 2 and result.culprit.name == "choose_policy"
    assert result.culprit_agent == "policy"
    assert result.verdict == "separated" and result.stop_reason == "separated"
    assert result.culprit.interval.low > 0
    assert result.repair.valid and result.repair.replacement == "refund_policy_2026"
    # the deploy-time guard is runnable Python that swaps exactly the failing action
    namespace: dict = {}
    exec(result.repair.to_guard(), namespace)
    (guard,) = (f for name, f in namespace.items() if name.startswith("guard_"))
    assert guard(result.repair.original) == "refund_policy_2026"
    assert guard("something else") == "something else"
    assert result.fidelity.reproduces and result.fidelity.failure_rate == 1.0
    assert result.steps[6].observation_only  # send_reply has side effects: never scored
    assert result.steps[6].effect is None
    assert result.cost["live_steps"] > 0 and result.cost["rollouts"] > 0
    assert result.poc_index is not None


@pytest.mark.parametrize("family", ["A", "B", "C", "D", "E", "H", "I", "J"])
def test_culprits_on_the_suite(family):
    for index in range(3):
        instance = families.FAMILIES[family](index)
        trajectory, truth = families.find_failing_recording(instance, record)
        result = attribute(trajectory, instance.agent, instance.verifier)
        assert result.culprit_index == truth, (family, index, result.summary())


def test_coupling_changes_cost_not_outcomes():
    instance = families.FAMILIES["F"](1)
    trajectory, _ = families.find_failing_recording(instance, record)
    shared = RolloutEngine(trajectory, instance.agent, instance.verifier)
    alone = RolloutEngine(trajectory, instance.agent, instance.verifier, coupling=False)
    for position in range(len(trajectory.steps) + 1):
        plan = ReplayPlan.ablate_from(position)
        a = [r.failed for r in shared.run(plan, range(30))]
        b = [r.failed for r in alone.run(plan, range(30))]
        assert a == b, position
    assert shared.cost.live_steps < alone.cost.live_steps


def test_cache_gives_identical_results(demo_run):
    a = attribute(demo_run, support_agent, refund_approved)
    b = attribute(demo_run, support_agent, refund_approved, cache=RolloutCache())
    assert a.to_dict()["steps"] == b.to_dict()["steps"]
    assert a.to_dict()["curve"] == b.to_dict()["curve"]


def test_thread_executor_matches_serial(demo_run):
    serial = attribute(demo_run, support_agent, refund_approved)
    pool = ThreadExecutor(4)
    threaded = attribute(demo_run, support_agent, refund_approved, executor=pool)
    pool.close()
    assert serial.culprit_index == threaded.culprit_index
    assert serial.to_dict()["curve"] == threaded.to_dict()["curve"]


def test_async_agents_are_attributed_concurrently():
    async def agent(ctx, n):
        total = []
        for i in range(n):
            value = await ctx.llm(
                f"s{i}",
                produce=lambda i=i: (
                    "bad" if i == 2 and ctx.rng.random() < 0.6 else f"ok{ctx.rng.randint(0, 3)}"
                ),
            )
            total.append(value)
            await asyncio.sleep(0)
        return total

    def verifier(result):
        return 0.0 if "bad" in result else 1.0

    traj = next(
        t
        for s in range(50)
        if (t := record(agent, {"n": 5}, seed=s, verifier=verifier)).outcome.failed
    )
    assert attribute(traj, agent, verifier).culprit_index == 2


def test_any_executor_runs_any_agent():
    """A sync executor given an async agent, and the async executor given a plain one, run
    the same rollouts as the default (they crashed: a coroutine where a result was due)."""

    async def async_agent(ctx, n):
        return [await ctx.llm(f"s{i}", produce=lambda i=i: _draw(ctx, i)) for i in range(n)]

    def sync_agent(ctx, n):
        return [ctx.llm(f"s{i}", produce=lambda i=i: _draw(ctx, i)) for i in range(n)]

    def verifier(result):
        return 0.0 if "bad" in result else 1.0

    pool = ThreadExecutor(2)
    try:
        for agent, executors in (
            (async_agent, (SerialExecutor(), pool)),
            (sync_agent, (AsyncExecutor(4),)),
        ):
            traj = next(
                t
                for s in range(50)
                if (t := record(agent, {"n": 4}, seed=s, verifier=verifier)).outcome.failed
            )
            expected = attribute(traj, agent, verifier, rollouts=12).to_dict()
            for executor in executors:
                got = attribute(traj, agent, verifier, rollouts=12, executor=executor)
                assert got.to_dict()["curve"] == expected["curve"], (agent, executor)
                assert got.culprit_index == 2
    finally:
        pool.close()


def _draw(ctx, i):
    return "bad" if i == 2 and ctx.rng.random() < 0.6 else f"ok{ctx.rng.randint(0, 3)}"


def test_passing_run_raises_or_runs_credit(demo_run):
    passing = next(
        t
        for s in range(40)
        if not (
            t := record(support_agent, DEMO_TASK, seed=s, verifier=refund_approved)
        ).outcome.failed
    )
    with pytest.raises(SuccessfulRunError, match="credit"):
        attribute(passing, support_agent, refund_approved)
    credit = attribute(passing, support_agent, refund_approved, mode="credit")
    assert credit.mode == "credit" and credit.culprit_index == 2  # the right policy choice
    text, page = credit.to_text(passing), credit.to_html(trajectory=passing)
    assert "CREDITED step 2" in text and "CULPRIT" not in text
    assert "Credited step: step 2" in page and "effect on the success probability" in page
    assert "effect on the failure probability" not in page


def test_nothing_to_attribute_is_a_result_not_a_crash():
    def agent(ctx):
        return ctx.llm("fixed", produce=lambda: "x", resamplable=False)

    traj = record(agent, verifier=lambda r: 0.0)
    result = attribute(traj, agent, lambda r: 0.0)
    assert result.culprit_index is None and result.verdict == "nothing to attribute"
    assert any("nothing can be attributed" in w for w in result.warnings)
    # said as what it is: the advice to raise --rollouts or --budget cannot apply, nor the
    # one about imported traces' policies and content capture (this run is native)
    explanation = result.explain(traj)
    assert "No step of this run can be re-drawn" in explanation.why
    assert "--rollouts" not in explanation.why + explanation.fix
    assert not any("imported steps" in w for w in result.warnings)


def test_a_failure_every_redraw_keeps_is_not_blamed_on_too_few_rollouts():
    def agent(ctx):
        first = ctx.llm("a", produce=lambda: "bug")
        return ctx.tool("b", produce=lambda: first, x=first)

    traj = record(agent, verifier=lambda r: r == "ok")
    explanation = attribute(traj, agent, lambda r: r == "ok", rollouts=32).explain(traj)
    assert "every step re-drawn" in explanation.fix and "--rollouts" not in explanation.fix


def test_tiny_budget_is_undecided_with_intervals(demo_run):
    result = attribute(demo_run, support_agent, refund_approved, budget=5)
    assert result.culprit_index is None and result.verdict == "undecided"
    assert result.stop_reason == "budget"
    assert result.curve  # the intervals measured so far are reported


@pytest.mark.parametrize("family", ["J", "B"])
def test_the_budget_is_a_hard_cap(family):
    """Rollouts stop early at different lengths, so sizing chunks by the average cost alone
    overshot budgets by a few percent (family J); the cap now holds for every instance."""
    for index in range(20):
        instance = families.FAMILIES[family](index)
        trajectory, _ = families.find_failing_recording(instance, record)
        n = len(trajectory.steps)
        budget = 50 * n * (n + 1) // 2 / 3
        families.LIVE[0] = 0
        result = attribute(trajectory, instance.agent, instance.verifier, budget=budget)
        assert families.LIVE[0] == result.cost["live_steps"] <= budget, (family, index)


def test_with_a_budget_the_budget_binds_not_the_rollout_cap():
    """A rare rescue (family F) needs more than 200 cheap paired rollouts at its step: with a
    budget and no explicit cap the search may take them, with ``rollouts=200`` it may not."""
    instance = families.FAMILIES["F"](4)
    trajectory, truth = families.find_failing_recording(instance, record)
    n = len(trajectory.steps)
    budget = 50 * n * (n + 1) // 2 / 3
    capped = attribute(trajectory, instance.agent, instance.verifier, budget=budget, rollouts=200)
    assert capped.stop_reason == "max_rollouts" and capped.culprit_index is None
    result = attribute(trajectory, instance.agent, instance.verifier, budget=budget)
    assert result.culprit_index == truth and result.cost["live_steps"] <= budget


def test_a_blocker_known_through_coupled_rollouts_still_gets_more(monkeypatch):
    """The recording with this receipt uuid (its rollout streams follow from its content) left
    the reviewer's segment at 18 pairs, known only through rollouts from other positions: the
    search raised nothing there and stopped at the rollout cap with a "likely" verdict."""
    import uuid

    from agent_replay.capture import context

    receipt = uuid.UUID("2a30fca1-bd8b-4664-9d11-75f7d076a799")
    monkeypatch.setattr(context, "_REAL_UUID4", lambda: receipt)
    trajectory = record(support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved)
    result = attribute(trajectory, support_agent, refund_approved)
    assert (result.culprit_index, result.verdict) == (2, "separated"), result.summary()


def test_verifier_errors_name_the_rollout(demo_run):
    calls = {"n": 0}

    def flaky(result):
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyError("decision")
        return refund_approved(result)

    with pytest.raises(VerifierError, match="rollout"):
        attribute(demo_run, support_agent, flaky)
    with pytest.raises(VerifierError, match="number in"):
        attribute(demo_run, support_agent, lambda r: "no")


@pytest.mark.parametrize(
    "settings",
    [
        {"initial_rollouts": 0},  # spun forever: the rollout levels 0, 0 * 2, ... never grew
        {"rollouts": 0},
        {"fidelity_replays": -1},
        {"shapley_rollouts": 2.5},
        {"budget": 0},
        {"budget": -5},
        {"budget": float("nan")},
    ],
)
def test_settings_that_cannot_run_are_refused_before_any_rollout(demo_run, settings):
    ran = []

    def agent(*args, **kwargs):
        ran.append(1)
        return support_agent(*args, **kwargs)

    name = next(iter(settings))
    with pytest.raises(ValueError, match=name):
        attribute(demo_run, agent, refund_approved, **settings)
    assert not ran


def test_an_infinite_budget_is_no_cap(demo_run):
    """It crashed: "cannot convert float NaN to integer"."""
    capped = attribute(demo_run, support_agent, refund_approved, budget=float("inf"))
    assert capped.summary() == attribute(demo_run, support_agent, refund_approved).summary()


def planted(ctx, question, lookup="search"):
    plan = ctx.llm("plan", produce=lambda: {"q": question}, prompt=question)
    hits = ctx.tool(lookup, produce=lambda: "bug" if ctx.rng.random() < 0.7 else "ok", q=plan["q"])
    return {"answer": ctx.llm("write", produce=lambda: hits, context=hits)}


def answered_ok(result):
    return result["answer"] == "ok"


def test_an_agent_that_does_not_replay_the_run_is_refused_before_the_search():
    """Every factual replay left the recording: the search still spent its whole cap (9,600
    rollouts for an agent called with the wrong signature) and called the failure
    "reproduced"."""
    traj = record(planted, {"question": "q"}, seed=1, verifier=answered_ok)
    assert traj.outcome.failed
    calls = []

    def wrong_signature(task):
        calls.append(task)
        return {"answer": "bug"}

    with pytest.raises(UnfaithfulReplayError, match="raised TypeError") as raised:
        attribute(traj, wrong_signature, answered_ok, budget=100)
    assert raised.value.divergence.position == 0 and not calls

    def renamed(ctx, question):
        return planted(ctx, question, lookup="lookup")

    with pytest.raises(UnfaithfulReplayError, match=r"at step 1: .*tool:lookup.*tool:search"):
        attribute(traj, renamed, answered_ok, budget=100)


def test_an_agent_that_leaves_the_recording_in_some_replays_is_attributed_with_a_warning():
    traj = record(planted, {"question": "q"}, seed=1, verifier=answered_ok)
    replays = []

    def sometimes_renamed(ctx, question):
        replays.append(1)
        return planted(ctx, question, lookup="lookup" if len(replays) % 4 == 0 else "search")

    result = attribute(traj, sometimes_renamed, answered_ok, budget=200)
    assert result.fidelity.diverged and "factual replays diverged" in result.fidelity.warning


def long_run(ctx, n, culprit):
    """``n`` steps; step ``culprit`` goes wrong three times in ten, and the run with it."""
    answer = "ok"
    for i in range(n):
        p = 0.3 if i == culprit else 0.0
        if (
            ctx.tool(f"s{i}", produce=lambda p=p: "bug" if ctx.rng.random() < p else "ok", i=i)
            == "bug"
        ):
            answer = "bug"
    return {"answer": answer}


@pytest.fixture(scope="module")
def twelve_steps():
    return next(
        t
        for seed in range(50)
        if (
            t := record(long_run, {"n": 12, "culprit": 8}, seed=seed, verifier=answered_ok)
        ).outcome.failed
    )


def test_the_budget_covers_shapley_values_and_the_repair(twelve_steps):
    """They ran after the search without looking at the budget: 1,547 live step executions
    for ``budget=300`` with Shapley values, 7,585 for 3,000 with a repair."""
    result = attribute(
        twelve_steps, long_run, answered_ok, budget=3000, method="both", repair=True,
        shapley_permutations=16,
    )  # fmt: skip
    parts = result.cost["live_steps_by_part"]
    assert result.cost["budget"] == 3000 and result.cost["live_steps"] <= 3000
    assert sum(parts.values()) == result.cost["live_steps"]
    assert parts["search"] <= 3000 * (1 - 0.4 - 0.25) and parts["shapley"] and parts["repair"]
    assert result.culprit_index == 8 and result.shapley and result.repair.valid
    assert "budget 3000: search" in result.to_text(twelve_steps)


def test_extras_the_budget_cannot_pay_for_are_left_out_with_a_warning(twelve_steps):
    result = attribute(twelve_steps, long_run, answered_ok, budget=200, method="both")
    assert result.cost["live_steps"] <= 200 and result.shapley is None
    assert any(w.startswith("step Shapley values left out") for w in result.warnings)
    unbudgeted = attribute(twelve_steps, long_run, answered_ok, repair=True, rollouts=32)
    assert unbudgeted.repair is not None and unbudgeted.cost["budget"] is None


def test_full_profile_and_shapley(demo_run):
    result = attribute(
        demo_run,
        support_agent,
        refund_approved,
        adaptive=False,
        rollouts=40,
        method="both",
        agents=True,
    )
    assert [p.position for p in result.curve] == list(range(len(demo_run.steps) + 1))
    assert result.culprit_index == 2
    shapley = result.shapley
    assert shapley.method == "exact" and abs(shapley.efficiency_gap) < 1e-9
    assert result.agent_shapley.players == ("triage", "policy", "writer")


def test_permutation_shapley_is_efficient_by_construction():
    instance = families.FAMILIES["A"](0)
    trajectory, _ = families.find_failing_recording(instance, record)
    assert len(trajectory.steps) > 8
    result = attribute(
        trajectory, instance.agent, instance.verifier, method="shapley", shapley_permutations=16
    )
    assert result.shapley.method == "antithetic permutations"
    assert abs(result.shapley.efficiency_gap) < 1e-9


def test_observation_only_steps_are_flagged_never_scored():
    def agent(ctx):
        a = ctx.llm("think", produce=lambda: "bad" if ctx.rng.random() < 0.5 else "good")
        b = ctx.tool("log", produce=lambda: "logged", resamplable=False)
        return [a, b]

    traj = next(
        t
        for s in range(20)
        if (t := record(agent, seed=s, verifier=lambda r: r[0] == "good")).outcome.failed
    )
    result = attribute(traj, agent, lambda r: r[0] == "good")
    assert result.steps[1].observation_only and result.steps[1].effect is None
    assert result.culprit_index == 0


def test_aggregate_finds_the_systematic_step():
    runs = [
        t
        for s in range(200)
        if (t := record(support_agent, DEMO_TASK, seed=s, verifier=refund_approved)).outcome.failed
    ][:6]
    aggregate = aggregate_runs(runs, support_agent, refund_approved)
    assert aggregate.systematic_culprit == "llm:choose_policy"
    assert aggregate.steps[0].culprit_count == len(runs) == 6
    assert "Systematic weak step: llm:choose_policy" in aggregate.to_text()
    # the name tested is the one that came out ahead, so the sign test is two-sided: 5 to 0
    # (p = 2/32) is not enough at 95%, 6 to 0 (p = 2/64) is
    assert aggregate_runs(runs[:5], support_agent, refund_approved).systematic_culprit is None
    with pytest.raises(TypeError, match="needs an agent"):  # it answered 'undecided' for all
        aggregate_runs(runs, None, refund_approved)
    culprit = aggregate.steps[0]
    assert 1 <= culprit.measured_runs <= len(runs) and "where measured" in aggregate.to_text()
    for step in aggregate.steps:  # shares are of the failing runs, inside their intervals
        share = step.culprit_count / len(runs)
        assert step.culprit_share.low <= share <= step.culprit_share.high
        if step.effect_interval is not None:
            assert step.effect_interval.low <= (step.mean_effect or 0) <= step.effect_interval.high


def test_aggregate_draws_repeated_runs_independently(demo_run):
    """Two runs that recorded the same steps (a deterministic agent failing the same way
    twice) drew the same random streams, so their estimates were one estimate counted as
    several, and the interval over runs was as narrow as if they were independent (the QA
    simulation: 29 of 40 intervals covered at 95%)."""
    copies = [dataclasses.replace(demo_run, session_id=f"copy-{i}") for i in range(4)]
    aggregate = aggregate_runs(copies, support_agent, refund_approved, rollouts=24)
    seeds = [r.cost["seed"] for r in aggregate.results]
    assert seeds[0] == 0 and len(set(seeds)) == 4
    curves = {tuple(p.failure_rate for p in r.curve) for r in aggregate.results}
    assert len(curves) > 1  # independent draws, not one estimate four times
    # the first is attributed as alone; a seed of one's own repeats exactly
    alone = attribute(demo_run, support_agent, refund_approved, rollouts=24)
    assert aggregate.results[0].to_dict()["curve"] == alone.to_dict()["curve"]
    again = attribute(demo_run, support_agent, refund_approved, rollouts=24, seed=seeds[2])
    assert again.to_dict()["curve"] == aggregate.results[2].to_dict()["curve"]
    with pytest.raises(ValueError, match="seed must be"):
        attribute(demo_run, support_agent, refund_approved, seed=-1)


def test_a_budget_that_runs_out_before_a_step_separates_says_so(demo_run):
    """A small budget left every interval near [-1, 1] and the report said only 'search
    stopped: budget'; it now says how far the search got and what a larger budget buys."""
    small = attribute(demo_run, support_agent, refund_approved, budget=20)
    assert small.stop_reason == "budget" and small.verdict == "undecided"
    (warning,) = [w for w in small.warnings if "budget (20 live step" in w]
    assert "ran out before the search separated a step: 0 of 6 scorable steps" in warning
    assert "the largest effect seen is steps 0-" in warning and "a larger budget" in warning
    enough = attribute(demo_run, support_agent, refund_approved)
    assert enough.verdict == "separated"
    assert not any("ran out" in w for w in enough.warnings)


def test_the_stop_reason_agrees_with_the_verdict(demo_run):
    """QA: a budget that ran out once the rollouts it paid for separated the culprit said
    ``separated`` beside ``stop_reason='budget'``; a complete profile (``culprit_rule='poc'``)
    said ``separated`` beside a ``likely`` verdict on one agent and ``complete`` on another."""
    full = attribute(demo_run, support_agent, refund_approved, seed=0)
    assert full.stop_reason == "separated"
    spent = full.cost["live_steps"]
    results = [
        attribute(demo_run, support_agent, refund_approved, seed=0, budget=b)
        for b in range(max(20, spent - 160), spent, 8)
    ]
    assert any(r.verdict == "separated" for r in results)  # some budgets separate it
    for r in results:
        assert (r.verdict == "separated") == (r.stop_reason == "separated"), r.stop_reason
        assert r.stop_reason in ("separated", "budget")
    for options in ({"adaptive": False}, {"culprit_rule": "poc"}):
        assert attribute(demo_run, support_agent, refund_approved, **options).stop_reason == (
            "complete"
        )


def routed_agent(record_bad, mock):
    def agent(ctx):
        route = ctx.llm(
            "route", produce=lambda: "A" if record_bad[0] or ctx.rng.random() < 0.5 else "B"
        )
        out = ctx.tool(f"{route.lower()}_fetch", produce=lambda: "bad" if route == "A" else "ok")
        extra = {"mock": lambda: "mock sent"} if mock else {}
        ctx.tool("send", produce=lambda: "sent", side_effects=True, msg=out, **extra)
        return out

    return agent


def test_rollouts_that_reach_a_side_effect_off_the_recording_are_said_or_run_its_mock():
    """QA: a router picks lane A (recorded, fails) or B (passes) half the time, and a
    side-effecting tool follows either lane. Every re-draw taking lane B left the recording,
    reached the tool live, stopped there and counted as a failure: the router came out with
    no effect, a tight interval around 0 and no word of why."""
    flag = [True]
    plain = routed_agent(flag, mock=False)
    traj = record(plain, verifier=is_ok)
    flag[0] = False
    blind = attribute(traj, plain, is_ok, seed=1)
    assert blind.cost["side_effects"]["blocked"]["send"] > 0
    assert (
        blind.cost["side_effects"]["blocked_rollouts"]
        == blind.cost["side_effects"]["blocked"]["send"]
    )
    (said,) = [w for w in blind.warnings if "reached a side-effecting tool live" in w]
    assert "'send'" in said and "mock=" in said

    flag[0] = True
    mocked = routed_agent(flag, mock=True)
    traj = record(mocked, verifier=is_ok)
    flag[0] = False
    seen = attribute(traj, mocked, is_ok, seed=1)
    assert seen.culprit_index == 0 and seen.steps[0].interval.low > 0.2  # truth: 0.5
    assert seen.cost["side_effects"]["blocked"] == {}
    assert seen.cost["side_effects"]["mocked"]["send"] > 0
    assert any("ran their declared mock instead" in w for w in seen.warnings)


def long_run_agent(ctx, n=40, culprit=25):
    out = None
    for i in range(n):
        if i == culprit:
            out = ctx.llm(f"step{i}", produce=lambda: "bug" if ctx.rng.random() < 0.5 else "ok")
        else:
            ctx.tool(f"step{i}", produce=lambda: ctx.rng.random(), i=i)
    return out


def test_a_share_kept_for_extras_that_cannot_fit_goes_to_the_search():
    """QA: with Shapley values and a repair asked for, the search kept 65% of a 2000-step
    budget for them, they did not fit in it anyway, and the search, on a third of the
    budget, came back undecided with 1311 live steps unspent."""
    run = next(
        t for s in range(100) if (t := record(long_run_agent, seed=s, verifier=is_ok)).failed
    )
    alone = attribute(run, long_run_agent, is_ok, budget=2000)
    extras = attribute(run, long_run_agent, is_ok, budget=2000, method="both", repair=True)
    assert alone.culprit_index == extras.culprit_index == 25
    assert extras.cost["live_steps_by_part"]["search"] == alone.cost["live_steps"] > 1900
    assert any("step Shapley values left out" in w for w in extras.warnings)
    assert any("the repair search left out" in w for w in extras.warnings)


def is_ok(result):
    return result == "ok"


def search_agent(ctx, question):
    plan = ctx.llm("plan", produce=lambda: {"q": question}, prompt=question)
    hits = ctx.tool("search", produce=lambda: "bug" if ctx.rng.random() < 0.7 else "ok", q=plan)
    return ctx.llm("write", produce=lambda: hits, context=hits)


def test_the_point_of_commitment_rule_measures_every_position():
    """QA: ``culprit_rule="poc"`` gave 'undecided' beside a step effect of +0.28 [+0.16,
    +0.38]: the adaptive search left the rule too few positions and too many looks. It now
    measures the complete profile, as the rule needs."""
    run = next(
        t
        for s in range(100)
        if (t := record(search_agent, {"question": "q"}, seed=s, verifier=is_ok)).failed
    )
    poc = attribute(run, search_agent, is_ok, culprit_rule="poc")
    assert (poc.verdict, poc.culprit_index, poc.poc_index) == ("likely", 1, 1)
    assert poc.cost["rollouts"] == 200 * 4  # every position, the default rollouts each
    assert attribute(run, search_agent, is_ok).culprit_index == 1


def test_a_point_of_commitment_rule_that_names_nothing_says_so():
    def coin(ctx):
        return ctx.llm("flip", produce=lambda: "bug" if ctx.rng.random() < 0.5 else "ok")

    def never(result):
        return False

    run = record(coin, seed=0, verifier=never)
    result = attribute(run, coin, never, culprit_rule="poc", rollouts=20)
    assert result.verdict == "undecided" and result.poc_index is None
    assert any("Point-of-Commitment rule names no step" in w for w in result.warnings)


def test_aggregate_leaves_out_a_run_the_agent_does_not_replay():
    """QA: one run of another version of the agent among the runs stopped the whole
    aggregate with UnfaithfulReplayError; it is left out with the reason now."""

    def other_version(ctx, question):
        return ctx.tool("lookup", produce=lambda: "bug", q=question)

    runs = [
        t
        for s in range(40)
        if (t := record(search_agent, {"question": "q"}, seed=s, verifier=is_ok)).failed
    ][:4]
    stray = record(other_version, {"question": "q"}, verifier=is_ok)
    result = aggregate_runs([*runs, stray], search_agent, is_ok, rollouts=16)
    assert result.failing_runs == 4 and list(result.unreplayable) == [stray.session_id]
    assert "left the recording" in result.unreplayable[stray.session_id]
    assert f"left out {stray.session_id}: " in result.to_text()
    assert result.to_dict()["unreplayable"] == result.unreplayable


def test_a_repair_the_budget_left_out_is_not_reported_as_not_asked_for(demo_run):
    """QA: with --repair and a budget too small for it, the summary said 'none (run with
    --repair to search one)' and the explanation 'rerun with repair=True'."""
    result = attribute(demo_run, support_agent, refund_approved, budget=300, repair=True)
    assert result.culprit_index == 2 and result.repair is None
    assert any(w.startswith("the repair search left out") for w in result.warnings)
    text = result.to_text(demo_run)
    assert "REPAIR   left out: the budget left too little for it" in text
    assert "run with --repair" not in text
    assert "was left out: the budget left too little" in result.explain(demo_run).fix


@pytest.mark.parametrize("bad", ["yes", 1, "false"])
def test_agents_must_be_a_boolean_or_none(demo_run, bad):
    """``agents="yes"`` was taken silently (truthy), ``agents="false"`` as True."""
    with pytest.raises(ValueError, match="agents must be True, False or None"):
        attribute(demo_run, support_agent, refund_approved, agents=bad)


def test_effect_interval_over_runs_follows_the_confidence():
    values = [0.2, 0.5, 0.4, 0.7]  # mean 0.45, sample sd 0.2082, 3 degrees of freedom
    at95, at99 = mean_interval(values, 0.95), mean_interval(values, 0.99)
    # Student t quantiles (tables: 3.18245, 5.84091); the normal's 1.96 and 2.58 were too
    # narrow over few runs
    assert at95.high - 0.45 == pytest.approx(3.18245 * 0.208167 / 2, rel=1e-4)
    assert at99.high - 0.45 == pytest.approx(5.84091 * 0.208167 / 2, rel=1e-4)
    assert at99.confidence == 0.99 and at99.low == pytest.approx(0.9 - at99.high)


def test_summary_of_a_culprit_without_an_isolated_effect(demo_run):
    result = attribute(demo_run, support_agent, refund_approved)
    assert "effect +" in result.summary()
    step = result.culprit
    lumped = dataclasses.replace(
        step, effect=None, interval=None, segment=(1, 3), segment_effect=0.5
    )
    steps = tuple(lumped if s is step else s for s in result.steps)
    summary = dataclasses.replace(result, steps=steps).summary()
    assert "step 2 (llm:choose_policy, agent policy) steps 1-2 together +0.50" in summary


def test_json_report_round_trip(demo_run, tmp_path):
    result = attribute(demo_run, support_agent, refund_approved, repair=True)
    path = tmp_path / "report.json"
    result.to_json(path)
    data = json.loads(path.read_text())
    assert data == result.to_dict()
    assert data["culprit_index"] == 2 and data["repair"]["valid"]
    assert data["schema_version"] == REPORT_SCHEMA_VERSION


def test_a_repair_guard_keeps_step_names_and_values_out_of_its_code(capsys):
    """An imported span's name is data: nothing in it may become guard code."""
    from agent_replay.attribution.result import Repair
    from agent_replay.attribution.stats import Interval

    def guard(original, replacement, label):
        interval = Interval(0.0, 0.1, 0.95, "clopper-pearson")
        repair = Repair(
            0, label, original, replacement, 0.0, interval, True, 1.0, 0.5, 64, 1, "given"
        )
        namespace: dict = {}
        exec(repair.to_guard(), namespace)
        return next(v for k, v in namespace.items() if k.startswith("guard_"))

    fix = guard("bad", "good", "write)\nprint('INJECTED')\n#\u2028x")
    assert capsys.readouterr().out == ""  # the name's "code" did not run
    assert fix("bad") == "good" and fix("other") == "other"
    tuple_fix = guard(("a", 1), ["b", 2], "llm:t")  # not plain JSON: compared as stored
    assert tuple_fix(("a", 1)) == ["b", 2] and tuple_fix(["a", 1]) == ["a", 1]


@pytest.mark.parametrize(
    ("original", "replacement"),
    [
        (datetime.date(2024, 1, 1), datetime.date(2025, 1, 1)),
        (b"\x00", b"\x01"),
        ({"k": {1, 2}}, {"k": {3}}),
        ((1, 2), (3, 4)),
        ({1: "a"}, {2: "b"}),
    ],
)
def test_a_repair_guard_serves_the_replacement_with_its_own_types(original, replacement):
    """It served the JSON of the replacement: a date as the text 'datetime.date(2025, 1, 1)',
    a tuple as a list, a dict's int keys as strings."""
    from agent_replay.attribution.result import Repair
    from agent_replay.attribution.stats import Interval

    interval = Interval(0.0, 0.1, 0.95, "clopper-pearson")
    repair = Repair(0, "llm:t", original, replacement, 0.0, interval, True, 1.0, 0.5, 64, 1, "x")
    namespace: dict = {}
    exec(repair.to_guard(), namespace)
    fix = namespace["guard_llm_t"]
    served = fix(original)
    assert served == replacement and type(served) is type(replacement)
    assert fix("other") == "other" and fix(object()) is not replacement


def test_a_budget_too_small_to_measure_gives_valid_json_and_says_so(demo_run):
    """Positions the budget stopped before any rollout are not in the curve (their failure
    rate would be NaN, which is not JSON), and unmeasured steps are "not measured", never
    "no measurable effect"."""
    from agent_replay.report.schema import ReportSchemaError, validate_report

    seen = 0
    for budget in (1, 3, 5):
        result = attribute(demo_run, support_agent, refund_approved, budget=budget)
        data = json.loads(result.to_json())  # strict JSON: would fail on NaN
        json.dumps(data, allow_nan=False)
        assert all(point["rollouts"] > 0 for point in data["curve"])
        validate_report(data)
        trace = result.explain(demo_run).trace
        for entry, step in zip(trace, result.steps, strict=True):
            interval = step.interval or step.segment_interval
            unmeasured = interval is not None and interval.low <= -1 and interval.high >= 1
            if unmeasured and entry.role not in ("observation-only", "locked-in", "decisive"):
                assert entry.role == "unresolved" and "not measured" in entry.note
                seen += 1
    assert seen  # some step was left unmeasured by these budgets
    with pytest.raises(ReportSchemaError, match="NaN"):
        validate_report({**data, "curve": [{**data["curve"][0], "failure_rate": float("nan")}]})


def test_a_failure_from_a_held_step_says_so_instead_of_asking_for_rollouts():
    def agent(ctx):
        ctx.llm("plan", produce=lambda: ctx.rng.choice(["card", "invoice"]))
        return ctx.tool("charge", produce=lambda: "declined", side_effects=True)

    def verifier(result):
        return 0.0 if result == "declined" else 1.0

    traj = record(agent, seed=1, verifier=verifier)
    result = attribute(traj, agent, verifier, budget=200)
    assert result.culprit_index is None
    explanation = result.explain(traj)
    assert "a held step (step 1 (tool:charge)" in explanation.why
    assert "More rollouts will not change that" in explanation.why
    assert "fork --observe" in explanation.fix


MASKED_CHANCES = {2: 0.1, 4: 0.8, 5: 0.1, 8: 0.5}


def masked_agent(ctx):
    """Ten steps; steps 2, 4, 5, 8 go bad with the chances above (the masked-culprit case)."""
    outs = []
    for i in range(10):
        q = MASKED_CHANCES.get(i)
        produce = (
            (lambda q=q: "bad" if ctx.rng.random() < q else "ok")
            if q is not None
            else (lambda: f"note-{ctx.rng.randint(0, 9)}")
        )
        outs.append(ctx.llm(f"s{i}", produce=produce, prev=outs[-1] if outs else None))
    return outs


def masked_verifier(o):
    return 0.0 if o[4] == "bad" or o[5] == "bad" or (o[2] == "bad" and o[8] == "bad") else 1.0


def test_a_culprit_hidden_behind_a_protective_step_is_found():
    """Fails when step 4 or step 5 goes bad, or steps 2 and 8 both do. In a run where 2, 5
    and 8 went bad and 4 did not, step 5 decides the failure (e = 0.45) and step 4 protected
    it (e = -0.36): the segment holding both has a small total, so the search used to leave
    it unsplit and name step 2 (e = 0.08) 'likely'. A segment that keeps blocking a
    significant candidate with a positive total is now bisected (found by an audit: 31 of
    300 such runs named step 2; on 100 runs after the change, every one names step 5)."""
    agent, verifier = masked_agent, masked_verifier
    # one of the recordings with that pattern on which the search used to name step 2 (most
    # such runs were attributed right before too)
    traj = record(agent, seed=1289, verifier=verifier)
    assert {i: traj.steps[i].output for i in (2, 4, 5, 8)} == {
        2: "bad",
        4: "ok",
        5: "bad",
        8: "bad",
    }
    result = attribute(traj, agent, verifier)
    assert result.culprit_index == 5, (result.verdict, result.culprit_index)


def test_no_repair_is_called_valid_when_none_repairs():
    """Step 3 draws x in 0..9 (x = 0 fails), step 6 draws y; the run fails when x = 0 or
    (x + y) % 10 >= 5, so forcing any x != 0 leaves a failure rate of exactly 0.5, the
    threshold: no candidate repairs. The best of up to 8 candidates, validated on the seeds
    it was harvested from, used to pass in 14% of such runs (audit: 43 of 300)."""

    def agent(ctx):
        outs = []
        for i in range(8):
            if i in (3, 6):
                outs.append(ctx.llm(f"s{i}", produce=lambda: ctx.rng.randint(0, 9)))
            else:
                outs.append(ctx.llm(f"s{i}", produce=lambda: f"note-{ctx.rng.randint(0, 9)}"))
        return {"x": outs[3], "y": outs[6]}

    def verifier(r):
        return 0.0 if r["x"] == 0 or (r["x"] + r["y"]) % 10 >= 5 else 1.0

    runs = [
        t
        for seed in range(400)
        if (t := record(agent, seed=seed, verifier=verifier)).steps[3].output == 0
    ][:30]
    valid = 0
    for traj in runs:
        result = attribute(traj, agent, verifier, repair=True)
        assert result.culprit_index == 3
        valid += result.repair is not None and result.repair.valid
    assert len(runs) == 30 and valid <= 1  # ~0.2% expected per run at 95% (exact)


def test_a_likely_culprit_beside_an_unsplit_positive_segment_comes_with_a_warning():
    """Under a tight budget the masked run above still ends 'likely' on the small step; the
    segment that may hide the larger effect is named in the warnings."""
    agent, verifier = masked_agent, masked_verifier
    traj = record(agent, seed=1289, verifier=verifier)
    result = attribute(traj, agent, verifier, budget=4000)
    assert (result.verdict, result.culprit_index) == ("likely", 2)  # the budget's limit
    assert any("steps 3-9 were not split" in w for w in result.warnings)


def test_shapley_on_a_branching_run_warns_that_held_steps_ran_live():
    """Re-drawing the router picks the other lane, so the held worker step does not run and
    its re-draw does: v(S) no longer holds S, and the router (no effect on the failure) gets
    Shapley credit. The result now says so."""

    def agent(ctx):
        with ctx.agent("router"):
            lane = ctx.tool("lane", produce=lambda: ctx.rng.choice(["fast", "slow"]))
        with ctx.agent("worker"):
            return ctx.llm(
                f"answer_{lane}", produce=lambda: "bad" if ctx.rng.random() < 0.5 else "good"
            )

    def ok(result):
        return result == "good"

    traj = next(t for s in range(50) if (t := record(agent, seed=s, verifier=ok)).failed)
    result = attribute(traj, agent, ok, method="both", agents=True)
    assert any("of the Shapley rollouts left the recording" in w for w in result.warnings)
    plain = attribute(traj, agent, ok)  # the step effects alone: no Shapley, no such warning
    assert not any("Shapley rollouts" in w for w in plain.warnings)


def _body_coin_agent(ctx, n, p):
    """Noise steps, then a coin flipped in the agent body (outside every step) decides the
    outcome: no step has any effect on it (the null-calibration audit's agent)."""
    previous = "start"
    for i in range(n):
        previous = ctx.llm(
            f"step{i}", produce=lambda: f"note-{ctx.rng.randint(0, 10)}", prev=previous
        )
    return {"fail": ctx.rng.random() < p}


def test_randomness_outside_every_step_is_blamed_on_no_step():
    """Body draws were re-keyed once a rollout left the recorded path, so re-drawing the last
    step flipped the coin too: that step was 'separated' as the culprit in 68% of such runs,
    with a 'validated repair' in 75%. Body randomness is exogenous now, held as recorded."""

    def verifier(result):
        return 0.0 if result["fail"] else 1.0

    runs = [
        t
        for s in range(40)
        if (
            t := record(_body_coin_agent, {"n": 4, "p": 0.5}, seed=s, verifier=verifier)
        ).outcome.failed
    ][:5]
    assert len(runs) == 5
    for run in runs:
        result = attribute(run, _body_coin_agent, verifier, repair=True)
        assert result.culprit_index is None and result.verdict == "undecided", result.summary()
        assert result.repair is None, result.repair


def _plan_agent(ctx, k):
    """Step 1 plans risky (p=.3), step 2 reviews and catches it (p=.1), step 4 botches the
    execution (p=.5); the run fails iff risky and (not caught or botched). Recorded risky,
    caught, botched: e = [0, .665, -.45, 0, .5, 0], the largest effect beside a protective
    step (the null-calibration audit's `plan_masked`)."""
    chance = {1: ("risky", 0.3), 2: ("catch", 0.1), 4: ("botch", 0.5)}
    previous, outs = "start", []
    for i in range(6):
        if i in chance:
            word, p = chance[i]

            def produce(word=word, p=p):
                return word if ctx.rng.random() < p else f"ok-{ctx.rng.randint(0, k)}"
        else:

            def produce():
                return f"note-{ctx.rng.randint(0, k)}"

        previous = ctx.llm(f"step{i}", produce=produce, prev=previous)
        outs.append(previous)
    return {"outs": outs}


def _plan_verifier(result):
    o = result["outs"]
    return 0.0 if o[1] == "risky" and (o[2] != "catch" or o[4] == "botch") else 1.0


@pytest.mark.parametrize("start", [2000, 3000, 29000])
def test_a_competitor_behind_a_protective_step_is_not_passed_over_as_separated(start):
    """Steps 1-3 were compared as one part whose total (.665 - .45) hid step 1's larger effect,
    and step 4 came out 'separated' with no warning (10% of such runs; these three were
    among them). Parts with protective pairs are split before anything is separated."""
    run = next(
        t
        for s in range(start, start + 100_000)
        if (t := record(_plan_agent, {"k": 9}, seed=s, verifier=_plan_verifier)).outcome.failed
        and [t.outcome.result["outs"][i] for i in (1, 2, 4)] == ["risky", "catch", "botch"]
    )
    result = attribute(run, _plan_agent, _plan_verifier)
    assert not (result.verdict == "separated" and result.culprit_index != 1), result.summary()


def test_a_repair_must_beat_the_recorded_action_not_only_a_fixed_bar():
    """A judge that fails a fifth of all runs whatever they hold: no action of any step is a
    repair. The validator only asked for a failure rate clearly under 0.5, and called a swap
    of one noise output for another a validated repair in 200 of 200 such runs."""
    import random

    from agent_replay import RolloutEngine, find_minimal_repair

    judge_rng = random.Random(5)

    def judge(result):
        return 0.0 if judge_rng.random() < 0.2 else 1.0

    def noise_agent(ctx):
        return [
            ctx.llm(f"step{i}", produce=lambda: f"ok-{ctx.rng.randint(0, 9)}") for i in range(4)
        ]

    runs = [
        t for s in range(200) if (t := record(noise_agent, seed=s, verifier=judge)).outcome.failed
    ]
    rates = []
    for run in runs[:3]:
        engine = RolloutEngine(run, noise_agent, judge)
        for step in range(4):
            repair = find_minimal_repair(engine, step, rollouts=64)
            assert repair is not None and not repair.valid, (step, repair)
            rates.append(repair.failure_rate)
    # the rate is measured again on new seeds: the best of eight candidates on the seeds it
    # was chosen on said 0.13 on average where every action fails 0.2 of the time
    assert 0.15 < sum(rates) / len(rates) < 0.25, rates


def test_a_failure_made_inside_a_nested_step_is_blamed_on_the_step_that_started_it():
    """Steps started inside another step's produce replay with it (a plan holding the outer
    step serves them). The rollouts of prefix plans were shared as if every step ran in
    position order: a re-draw that branched inside the planner counted as a sample of the
    plans that hold the planner, and the verdict was "undecided" with the planner's effect
    read as +0.00 [-0.54, +0.54]; the true effect is 0.6 (the summary fails 4 draws in 10)."""

    def agent(ctx):
        def summarise():
            return ctx.llm("summarise", produce=lambda: ctx.rng.randint(0, 9), q="refund")

        def plan():
            return {"hits": ctx.tool("search", produce=lambda: [summarise()], q="refund")}

        p = ctx.llm("planner", produce=plan)
        return [p, ctx.llm("write", produce=lambda: ctx.rng.randint(0, 9), plan=p)]

    def verifier(result):
        return 0.0 if 3 <= result[0]["hits"][0] <= 6 else 1.0

    run = next(
        r for seed in range(50) if (r := record(agent, seed=seed, verifier=verifier)).outcome.failed
    )
    result = attribute(run, agent, verifier)
    assert result.verdict == "separated" and result.culprit_index == 0
    assert result.culprit.interval.low <= 0.6 <= result.culprit.interval.high


def test_aggregate_counts_a_name_measured_at_several_steps_of_a_run_once(monkeypatch):
    """The steps of one run are not independent runs: a name measured at two steps of each of
    three runs is measured in 3 runs (it said 6), with each run's mean effect."""
    from types import SimpleNamespace

    from agent_replay.attribution import aggregate as module
    from agent_replay.attribution.stats import Interval

    def step(label, effect):
        interval = None if effect is None else Interval(effect - 0.1, effect + 0.1, 0.95, "t")
        return SimpleNamespace(label=label, effect=effect, interval=interval)

    def fake_attribute(trajectory, *args, **kwargs):
        first, second = trajectory
        steps = (step("llm:x", first), step("tool:t", None), step("llm:x", second))
        return SimpleNamespace(steps=steps, culprit=steps[0], poc_index=0, cost={})

    monkeypatch.setattr(module, "attribute", fake_attribute)
    monkeypatch.setattr(module, "stream_key", repr)
    result = module.aggregate_runs([(0.2, 0.4), (0.3, 0.3), (0.1, 0.5)], lambda: None, None)
    x = next(s for s in result.steps if s.label == "llm:x")
    assert (x.runs, x.measured_runs, x.culprit_count) == (3, 3, 3)
    assert x.mean_effect == pytest.approx(0.3)
    # the three runs agree exactly: the interval is the mean of their own intervals
    assert (x.effect_interval.low, x.effect_interval.high) == pytest.approx((0.2, 0.4))
    assert "(in 3 runs)" in result.to_text()


def test_an_agent_no_step_of_which_can_be_redrawn_is_no_shapley_player():
    """An agent whose steps are all observation-only (a code terminal with no policy) is
    worth exactly 0, but was made a player and shown "+0.09 [-0.02, +0.20]"."""

    def agent(ctx):
        with ctx.agent("planner"):
            plan = ctx.llm("plan", produce=lambda: ctx.rng.choice(["good", "bad"]))
        with ctx.agent("terminal"):
            out = ctx.tool(
                "run", produce=lambda: f"ran {plan} {ctx.rng.random()}", resamplable=False
            )
        with ctx.agent("writer"):
            return ctx.llm("write", produce=lambda: plan, seen=out)

    def ok(result):
        return result == "good"

    traj = next(t for s in range(50) if (t := record(agent, seed=s, verifier=ok)).failed)
    result = attribute(traj, agent, ok, method="both", agents=True, shapley_rollouts=8)
    assert result.agent_shapley.players == ("planner", "writer")
    assert result.steps[1].observation_only


def test_a_separated_verdict_quotes_the_bound_it_rests_on():
    """A one-step run was called ``separated`` ("larger than that of every other part of the
    run it was compared with") beside a two-sided interval reaching below 0, with no other
    part compared. The explanation now quotes the one-sided bound the verdict rests on and
    says when nothing else was compared."""

    def agent(ctx):
        return ctx.llm("choose", produce=lambda: "bad" if ctx.rng.random() < 0.8 else "good")

    def verifier(result):
        return 1.0 if result == "good" else 0.0

    traj = record(agent, seed=1, verifier=verifier)
    result = attribute(traj, agent, verifier)
    assert result.verdict == "separated"
    fdr = result.fdr
    assert fdr["compared_parts"] == 0 and fdr["separation_lower"] > 0
    where = " ".join(result.explain(traj).where.split())
    assert f"at least {fdr['separation_lower']:+.2f} (one-sided" in where
    assert "no other part of the run was left to compare it with" in where
