"""``attribute``: which step made the run fail (or, in credit mode, secured its success)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..capture.run import Verifier
from ..errors import FailedRunError, SuccessfulRunError, UnfaithfulReplayError
from ..model import Trajectory
from ..replay.agent import following_counts, unfollowed_warnings
from ..replay.limits import RolloutLimits
from ..replay.plan import ReplayPlan
from ..report._data import REPAIR_SEARCH
from ..rollouts.engine import Cost, Executor, RolloutCache, RolloutEngine
from .budget import fit_repair, fit_shapley, search_budget, worth_reserving
from .effects import PrefixProfile, SearchResult, search_effects, significant
from .result import (
    LIKELY,
    NOTHING,
    SEPARATED,
    UNDECIDED,
    AttributionResult,
    CurvePoint,
    Fidelity,
    ShapleyResult,
    StepEffect,
)
from .stats import Interval, bonferroni, paired_difference

__all__ = ["METHODS", "attribute"]

METHODS = ("contrastive", "effects", "shapley", "both")
DEFAULT_ROLLOUTS = 200
"""Cap on rollouts per evaluated position without a budget."""
BUDGET_ROLLOUTS = 1600
"""The cap when a budget is given: high enough that the budget is what stops the search."""


def attribute(
    trajectory: Trajectory,
    agent: Callable[..., Any],
    verifier: Verifier,
    rollouts: int | None = None,
    method: str = "contrastive",
    adaptive: bool = True,
    repair: bool = False,
    confidence: float = 0.95,
    budget: float | None = None,
    *,
    mode: str = "failure",
    initial_rollouts: int = 8,
    fidelity_replays: int | None = None,
    min_effect: float = 0.0,
    culprit_rule: str = "effect",
    agents: bool | None = None,
    shapley_permutations: int = 64,
    shapley_rollouts: int = 16,
    repair_candidates: Sequence[Any] | None = None,
    repair_propose_fn: Callable[..., Sequence[Any]] | None = None,
    repair_threshold: float = 0.5,
    executor: Executor | None = None,
    cache: RolloutCache | None = None,
    pass_context: bool = True,
    fdr_method: str = "e-bh",
    keep_rollouts: bool = False,
    limits: RolloutLimits | None = None,
    seed: int = 0,
) -> AttributionResult:
    """Estimate each step's causal effect on the failure and name the culprit.

    The default estimator is the step effect ``e_i = F(i+1) - F(i)`` of the prefix failure
    curve, with common random numbers, found by an adaptive search (see
    :mod:`agent_replay.attribution.effects`). ``rollouts`` caps the rollouts per evaluated
    position; ``budget`` caps live step executions (each re-drawn step is one LLM or tool call
    in real life) of the whole analysis, Shapley values and the repair included (see
    :mod:`agent_replay.attribution.budget`); the cap defaults to 200 rollouts, or 1600 when a
    ``budget`` is given (the budget is then what binds: a rare rescue needs many cheap paired
    rollouts at one step to show). ``method="shapley"`` / ``"both"`` add step-level Shapley values;
    ``agents=True`` adds agent-level Shapley values (default: when the run has 2-8 agents and
    a Shapley method is chosen). ``repair=True`` searches a minimal repair of the culprit.

    ``limits`` (:class:`~agent_replay.replay.RolloutLimits`) bounds each rollout: by default
    ten times the run's steps (at least 100), no time limit; a rollout stopped by them counts
    as a failure, and the result warns how many were.

    The result is determined by the run, the agent, the verifier and ``seed``: rollout ``r``
    draws from streams keyed by the recording and ``r``, so the same recorded content gives
    the same answer. Another ``seed`` draws other streams: an independent repetition. With a
    ``budget``, how many rollouts the executor runs at once is an input too: the search's
    batches are sized on it, so where the budget stops it can differ (without a budget only
    the cost does).

    ``culprit_rule="poc"`` names the Point-of-Commitment step instead (the published
    package's rule, kept for comparison; it is always reported as ``poc_index``, from the
    positions the adaptive search evaluated, tested over its looks). The rule needs every
    position: with it, the complete profile is measured (``adaptive=False``).

    Raises :class:`SuccessfulRunError` for a run that passed (use ``mode="credit"`` to ask
    which step secured the success), :class:`FailedRunError` for a run that failed in credit
    mode, and :class:`VerifierError` naming the rollout when the
    verifier misbehaves. A run with no step that can be re-drawn yields a result whose verdict
    says there is nothing to attribute.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if mode not in ("failure", "credit"):
        raise ValueError(f"mode must be 'failure' or 'credit'; got {mode!r}")
    if culprit_rule not in ("effect", "poc"):
        raise ValueError(f"culprit_rule must be 'effect' or 'poc'; got {culprit_rule!r}")
    if culprit_rule == "poc":
        adaptive = False  # the rule compares every position with the end
    if not 0.5 < confidence < 1:
        raise ValueError("confidence must be in (0.5, 1)")
    if agents is not None and not isinstance(agents, bool):
        raise ValueError(f"agents must be True, False or None (automatic); got {agents!r}")
    counts = {
        "rollouts": rollouts,
        "initial_rollouts": initial_rollouts,
        "fidelity_replays": fidelity_replays,
        "shapley_permutations": shapley_permutations,
        "shapley_rollouts": shapley_rollouts,
    }
    for name, count in counts.items():
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 1
        ):
            raise ValueError(f"{name} must be a whole number of at least 1; got {count!r}")
    if budget is not None and math.isinf(budget) and budget > 0:
        budget = None  # no cap
    if budget is not None and not budget > 0:
        raise ValueError(
            f"budget must be a positive number of live step executions; got {budget!r}"
        )
    full_rollouts = DEFAULT_ROLLOUTS if rollouts is None else rollouts  # for the cost report
    if rollouts is None:
        rollouts = DEFAULT_ROLLOUTS if budget is None else BUDGET_ROLLOUTS
    started = time.perf_counter()
    followed_before = following_counts(agent)
    n = len(trajectory.steps)
    engine = RolloutEngine(
        trajectory,
        agent,
        verifier,
        executor=executor,
        pass_context=pass_context,
        cache=cache,
        keep_records=keep_rollouts,  # a record per rollout costs time; only when asked
        limits=limits,
        seed=seed,
    )
    credit = mode == "credit"
    profile = PrefixProfile(n)

    def event(result: Any) -> bool:
        return (not result.failed) if credit else result.failed

    def probe(position: int, seeds: list[int]) -> list[bool]:
        return [event(result) for result in engine.run(ReplayPlan.ablate_from(position), seeds)]

    def run_position(position: int, seeds: list[int], probe_same: bool = False) -> list[Any]:
        results = engine.run(ReplayPlan.ablate_from(position), seeds, stop_if_same=probe_same)
        for seed, result in zip(seeds, results, strict=True):
            if result.same_at is not None:
                profile.same.setdefault(position, set()).add(seed)
                continue
            outcome = event(result)
            # a rollout that stayed on the recorded path up to `path_end` is, exactly, the
            # rollout of every prefix plan up to there with the same seed (Coupling)
            end = position if result.path_end is None else max(position, result.path_end)
            for covered in range(position, end + 1):
                profile.outcomes.setdefault(covered, {}).setdefault(seed, outcome)
            for covered in range(position, end):
                profile.same.setdefault(covered, set()).add(seed)
        return results

    # fidelity: factual replays (everything held) - cheap, and they settle F(n)
    replays = fidelity_replays or max(initial_rollouts, 8)
    factual = run_position(n, list(range(replays)))
    if all(result.diverged for result in factual):
        raise _unfaithful(trajectory, factual)
    fidelity = _fidelity(profile, n, engine, confidence, credit)
    recorded_failed = trajectory.outcome.failed if trajectory.outcome is not None else None
    observed_failed = fidelity.failure_rate >= 0.5
    if mode == "failure" and (
        recorded_failed is False or (recorded_failed is None and not observed_failed)
    ):
        raise SuccessfulRunError(
            f"session {trajectory.session_id!r} passed"
            + (
                ""
                if recorded_failed is False
                else f" (factual replays fail {fidelity.failure_rate:.0%} of the time)"
            )
            + "; attribute a failing run, or ask which step secured the success (mode="
            "'credit'; --mode credit on the command line)"
        )
    if mode == "credit" and (
        recorded_failed is True or (recorded_failed is None and observed_failed)
    ):
        raise FailedRunError(
            f"session {trajectory.session_id!r} failed"
            + (
                ""
                if recorded_failed is True
                else f" (factual replays fail {fidelity.failure_rate:.0%} of the time)"
            )
            + "; credit mode asks which step secured a success: attribute the failure instead "
            "(mode='failure', the default; --mode failure on the command line)"
        )

    # held in every rollout: what the recording marks (side effects, opaque spans) and, for
    # the replay agent of an imported trace, the steps it has no policy for or a hold policy
    # (re-drawn as recorded: nothing a rollout could learn)
    by_policy = frozenset(getattr(agent, "held_by_policy", ()))
    held = frozenset(getattr(agent, "observation_only", ())) | by_policy
    resamplable = [
        s.resamplable and not s.side_effects and s.index not in held for s in trajectory.steps
    ]
    observation_only = frozenset(i for i, ok in enumerate(resamplable) if not ok)
    warnings = []
    if fidelity.warning:
        warnings.append(fidelity.warning)
    if observation_only - by_policy:
        fixed = sorted(observation_only - by_policy)
        warnings.append(
            f"{len(fixed)} step(s) cannot be re-drawn (side effects, recorded as "
            "not re-drawable, no resample policy or no entry in its ScriptedPolicy table, "
            "or no recorded content) "
            f"and are held in every rollout: {fixed}; they are not scored"
        )
    if by_policy:
        warnings.append(
            f"{len(by_policy)} step(s) have a hold policy (re-drawn as recorded) and are held "
            f"in every rollout: {sorted(by_policy)}; they are not scored"
        )

    step_shapley = method in ("shapley", "both")
    agent_players = 2 <= len(trajectory.agents) <= 8
    wants_agents = bool(agents) or (agents is None and step_shapley and agent_players)
    from .repair import MAX_CANDIDATES

    redrawn = sum(resamplable) / 2  # what a rollout of a coalition re-draws, on average
    agent_count = len({s.agent for s in trajectory.steps if resamplable[s.index] and s.agent})
    reserve_shapley, reserve_repair = worth_reserving(
        budget,
        shapley_players=(
            *((sum(resamplable),) if step_shapley else ()),
            *((agent_count,) if wants_agents else ()),
        ),
        repair=repair,
        live=redrawn,
        rollouts=shapley_rollouts,
        permutations=shapley_permutations,
        repair_rollouts=min(rollouts, 64),
        candidates=MAX_CANDIDATES,
    )
    search_share = search_budget(budget, shapley=reserve_shapley, repair=reserve_repair)
    if not any(resamplable):
        search = None
        stop_reason = "nothing to attribute"
        warnings.append(
            "no step of this run can be re-drawn, so nothing can be attributed: "
            + (
                "the run made no step"
                if not trajectory.steps
                else "every step that could be re-drawn has a hold policy; give the steps "
                "to attribute a policy that re-draws them (--policy llm=openai, say)"
                if by_policy
                else "imported steps need resample policies (replayable_agent; --policy) and "
                "recorded content (capture with message content on)"
                if trajectory.source.startswith(("import", "otel"))
                else "every step is declared side_effects=True or resamplable=False (mock "
                "their observations to test them: fork --observe)"
            )
        )
    else:
        search = search_effects(
            run_position,
            profile,
            n=n,
            confidence=confidence,
            max_rollouts=rollouts,
            initial_rollouts=min(initial_rollouts, rollouts),
            adaptive=adaptive,
            budget=search_share,
            spent=lambda: engine.cost.live_steps,
            observation_only=observation_only,
            probe=probe,
            # probes hunting a rare rescue run as many at once as the executor runs (one at
            # a time with the serial executor: no rollout past the first hit)
            probe_width=min(engine.concurrency, initial_rollouts),
            min_effect=min_effect,
            fdr_method=fdr_method,
            longest=lambda: engine.longest,
        )
        stop_reason = search.stop_reason

    effects = _step_effects(trajectory, search, observation_only)
    curve = _curve(profile, confidence, search.looks if search else 1)
    poc_index = _point_of_commitment(profile, n, confidence, search.looks if search else 1)
    decisive = tuple(sorted(s.start for s in search.decisive if s.width == 1)) if search else ()

    culprit, verdict = _verdict(search, decisive)
    if culprit_rule == "poc":
        culprit = poc_index
        verdict = LIKELY if poc_index is not None else UNDECIDED
        if poc_index is None and search is not None:
            warnings.append(
                "culprit_rule='poc': the Point-of-Commitment rule names no step (no step's "
                "re-decision significantly rescues the run); the step effects are reported "
                "as measured"
            )
    if search is None:
        verdict = NOTHING
    if verdict == LIKELY and search is not None and search.candidate is not None:
        # a segment never split that could still hold a larger effect than the culprit's
        # (behind a protective step: their total stays small)
        low = search.candidate.interval.low
        for segment in search.segments:
            if segment.width > 1 and segment.estimate > 0 and segment.interval.high >= low:
                warnings.append(
                    f"steps {segment.start}-{segment.end - 1} were not split (together "
                    f"{segment.estimate:+.2f} [{segment.interval.low:+.2f}, "
                    f"{segment.interval.high:+.2f}]); a larger effect than the culprit's can "
                    "hide there behind a protective step (a larger budget would split them)"
                )

    if search is not None and stop_reason == "budget" and verdict != SEPARATED and budget:
        kept_for = " and ".join(
            what
            for what, kept in (("Shapley values", reserve_shapley), ("the repair", reserve_repair))
            if kept
        )
        warnings.append(_budget_ran_out(search, budget, kept_for, observation_only, n))

    shapley = agent_shapley = None
    diverged_before, rollouts_before = engine.cost.diverged, engine.cost.rollouts
    parts = {"search": engine.cost.live_steps}

    def left(share: float = 1.0) -> float | None:
        return None if budget is None else (budget - engine.cost.live_steps) * share

    if step_shapley and search is not None:
        from .shapley import step_shapley_values

        fitted = fit_shapley(
            left(0.5 if wants_agents else 1.0),
            sum(resamplable),
            redrawn,
            rollouts=shapley_rollouts,
            permutations=shapley_permutations,
        )
        if fitted is None:
            warnings.append(_left_out("step Shapley values", left()))
        else:
            shapley = step_shapley_values(
                engine,
                trajectory,
                observation_only,
                permutations=fitted[1],
                rollouts=fitted[0],
                confidence=confidence,
                credit=credit,
            )
            if method == "shapley" and culprit_rule == "effect" and shapley.values:
                culprit = _shapley_culprit(shapley)
                verdict = LIKELY if culprit is not None else UNDECIDED
    if search is not None and wants_agents:
        from .shapley import agent_shapley_values

        fitted = fit_shapley(
            left(),
            agent_count,
            redrawn,
            rollouts=shapley_rollouts,
            permutations=shapley_permutations,
        )
        if fitted is None:
            warnings.append(_left_out("agent Shapley values", left()))
        else:
            agent_shapley = agent_shapley_values(
                engine,
                trajectory,
                rollouts=fitted[0],
                permutations=fitted[1],
                confidence=confidence,
                credit=credit,
                observation_only=observation_only,
            )
        if not trajectory.agents:
            warnings.append(
                "agent-level values asked for, but no step names an agent (ctx.agent blocks, "
                "or gen_ai.agent.name on imported spans): there are none"
            )

    spent = engine.cost.rollouts - rollouts_before
    diverged = engine.cost.diverged - diverged_before
    if (shapley or agent_shapley) and spent and diverged / spent > 0.1:
        warnings.append(
            f"{diverged / spent:.0%} of the Shapley rollouts left the recording (a re-drawn "
            "step changed which steps ran), so steps meant to be held ran live there: Shapley "
            "values of a branching run can credit a step for changing the path alone; the "
            "step effects (method='contrastive') do not assume held steps stay held"
        )

    parts["shapley"] = engine.cost.live_steps - parts["search"]
    found_repair = None
    if repair and culprit is not None:
        from .repair import find_minimal_repair

        per_candidate = fit_repair(
            left(), n - culprit, rollouts=min(rollouts, 64), candidates=MAX_CANDIDATES
        )
        if per_candidate is None:
            warnings.append(_left_out(REPAIR_SEARCH, left()))
        else:
            found_repair = find_minimal_repair(
                engine,
                culprit,
                candidates=repair_candidates,
                propose_fn=repair_propose_fn,
                rollouts=per_candidate,
                threshold=repair_threshold,
                confidence=confidence,
            )
    parts["repair"] = engine.cost.live_steps - parts["search"] - parts["shapley"]

    warnings += unfollowed_warnings(agent, followed_before)
    in_force = engine.limits
    if engine.cost.stopped:
        waited = in_force.seconds is not None and engine.concurrency > 1
        warnings.append(
            f"{engine.cost.stopped} of {engine.cost.rollouts} rollouts ran into their limits "
            f"({in_force.describe()}) and were stopped; they count as failures: the agent "
            "looped or stalled under an intervention"
            + (
                f", or waited for the other rollouts running with it ({engine.concurrency} "
                "at a time: the time limit counts waiting)"
                if waited
                else ""
            )
            + "; raise the limits if such rollouts are legitimate (RolloutLimits, "
            "--max-rollout-steps, --rollout-timeout)"
        )
    warnings += side_effect_warnings(engine.cost)
    cost = engine.cost.to_dict()
    cost["limits"] = {"steps": in_force.steps, "seconds": in_force.seconds}
    cost["seconds"] = round(time.perf_counter() - started, 6)
    cost["full_profile_live_steps"] = (full_rollouts * n * (n + 1)) // 2
    cost["budget"] = budget
    cost["seed"] = seed
    cost["live_steps_by_part"] = parts
    culprit_step = trajectory.steps[culprit] if culprit is not None else None
    return AttributionResult(
        session_id=trajectory.session_id,
        n_steps=n,
        mode=mode,
        method=method,
        confidence=confidence,
        culprit_index=culprit,
        culprit_agent=culprit_step.agent if culprit_step is not None else None,
        verdict=verdict,
        stop_reason=stop_reason,
        steps=effects,
        curve=curve,
        decisive=decisive,
        fdr={
            "method": {"e-bh": "e-BH", "by": "Benjamini-Yekutieli", "bh": "Benjamini-Hochberg"}[
                fdr_method
            ],
            "q": round(1 - confidence, 6),
            "looks": search.looks if search else 1,
            "separation_confidence": search.separation_confidence if search else confidence,
            **_separation_bound(search),
            "e_values": "mixture likelihood ratio of discordant CRN pairs (anytime-valid)",
            "p_values": "one-sided exact McNemar on CRN pairs, Bonferroni over looks",
        },
        poc_index=poc_index,
        fidelity=fidelity,
        divergence_rate=engine.cost.diverged / max(1, engine.cost.rollouts),
        exceptions=dict(engine.cost.exceptions),
        cost=cost,
        shapley=shapley,
        agent_shapley=agent_shapley,
        repair=found_repair,
        warnings=tuple(warnings),
        trace_id=culprit_step.trace_id if culprit_step is not None else _trace_id(trajectory),
        culprit_span_id=culprit_step.span_id if culprit_step is not None else None,
        rollout_records=tuple(engine.records) if keep_rollouts else (),
    )


def side_effect_warnings(cost: Cost) -> list[str]:
    """What the rollouts did at side-effecting tools they could not hold (a rollout that left
    the recording reached one live): stopped there, counted as failures, which hides the
    rescue a re-draw upstream brings; or ran the tool's declared ``mock`` instead."""
    said = []
    if cost.blocked:
        tools = ", ".join(f"{name!r} ({n})" for name, n in sorted(cost.blocked.items()))
        said.append(
            f"{cost.blocked_rollouts} of {cost.rollouts} rollouts left the recording and "
            f"reached a side-effecting tool live (rollouts per tool: {tools}). It was not run: "
            "it raised SideEffectBlockedError, which fails the run unless the agent catches "
            "it, so the effects of the steps before it lean toward 0 (a re-draw there that "
            "changes the path is never seen to rescue the run); declare what a replay runs in "
            "its place, mock=..., to let such rollouts finish"
        )
    if cost.mocked:
        tools = ", ".join(f"{name!r} ({n})" for name, n in sorted(cost.mocked.items()))
        said.append(
            f"side-effecting tools reached live after leaving the recording ran their declared "
            f"mock instead, in {cost.mocked_rollouts} of {cost.rollouts} rollouts (rollouts per "
            f"tool: {tools}); those outcomes are as good as the mocks"
        )
    return said


def _budget_ran_out(
    search: SearchResult,
    budget: float,
    kept_for: str,
    observation_only: frozenset[int],
    n: int,
) -> str:
    """Why the intervals are wide: the search stopped on its share of the budget before it
    separated a step, and where the largest effect it saw is."""
    scored = [s for s in search.segments if not (s.width == 1 and s.start in observation_only)]
    alone = sum(1 for s in scored if s.width == 1)
    which = f"the budget ({budget:g} live step executions)"
    if kept_for:
        which = (
            f"the search's share of the budget ({budget:g} live step executions; the rest is "
            f"kept for {kept_for})"
        )
    text = (
        f"{which} ran out before the search separated "
        f"a step: {alone} of {n - len(observation_only)} scorable steps measured alone"
    )
    candidate = search.candidate or max(scored, key=lambda s: s.estimate, default=None)
    if candidate is not None:
        where = (
            f"step {candidate.start}"
            if candidate.width == 1
            else f"steps {candidate.start}-{candidate.end - 1} together"
        )
        text += (
            f"; the largest effect seen is {where}, {candidate.estimate:+.2f} "
            f"[{candidate.interval.low:+.2f}, {candidate.interval.high:+.2f}]"
        )
    return text + "; a larger budget (or none) narrows the intervals and splits the segments"


def _left_out(what: str, left: float | None) -> str:
    return (
        f"{what} left out: the budget leaves {max(0, round(left or 0))} live step executions "
        "after the culprit search, too few for even a small version (raise the budget)"
    )


def _trace_id(trajectory: Trajectory) -> str | None:
    return next((s.trace_id for s in trajectory.steps if s.trace_id), None)


def _unfaithful(trajectory: Trajectory, replays: Sequence[Any]) -> UnfaithfulReplayError:
    """The error for an agent none of whose factual replays stayed on the recording."""
    first = replays[0]
    where = first.divergence
    raised = first.exception
    said = f" (the live call: {where.live}; recorded: {where.recorded})" if where.recorded else ""
    said += f"; the agent raised {raised['type']}: {raised['message']}" if raised else ""
    return UnfaithfulReplayError(
        f"session {trajectory.session_id!r}: every factual replay ({len(replays)} of "
        f"{len(replays)}, every step held) left the recording, the first at step "
        f"{where.position}: {where.reason}{said}. The agent given does not replay this run: is "
        "it the agent that recorded it, with the same code? Does it compute step inputs from "
        "something the replay does not serve (random or time outside ctx.rng / ctx.now)? "
        "`agent-replay replay --strict` shows where it leaves. Stopped before the search",
        divergence=where,
    )


def _fidelity(
    profile: PrefixProfile,
    n: int,
    engine: RolloutEngine,
    confidence: float,
    credit: bool,
) -> Fidelity:
    rate, interval, trials = profile.rate(n, confidence)
    failure = (1 - rate) if credit else rate
    if credit:
        interval = Interval(
            1 - interval.high, 1 - interval.low, interval.confidence, interval.method
        )
    diverged = engine.cost.diverged
    warning = None
    target = "success" if credit else "failure"
    reproduced = (1 - failure) if credit else failure
    if reproduced < 0.5:
        warning = (
            f"factual replays reproduce the recorded {target} only "
            f"{reproduced:.0%} of the time ({trials} replays): the replay does not "
            "reproduce the run (non-deterministic judge, tools or agent code?)"
        )
    elif reproduced < 1.0:
        warning = (
            f"factual replays reproduce the recorded {target} {reproduced:.0%} of the "
            f"time: the judge or a tool is not deterministic; effects are measured "
            "against that noise"
        )
    if diverged:
        warning = (warning + "; " if warning else "") + (
            f"{diverged} of {trials} factual replays diverged from the recording"
        )
    return Fidelity(
        replays=trials,
        failure_rate=failure,
        interval=interval,
        diverged=diverged,
        reproduces=reproduced >= 0.5,
        warning=warning,
    )


def _step_effects(
    trajectory: Trajectory, search: SearchResult | None, observation_only: frozenset[int]
) -> tuple[StepEffect, ...]:
    segments = search.segments if search else []
    decisive = {(s.start, s.end) for s in search.decisive} if search else set()
    out = []
    for step in trajectory.steps:
        i = step.index
        segment = next((s for s in segments if s.start <= i < s.end), None)
        unscored = i in observation_only
        scored = segment is not None and segment.width == 1 and not unscored
        out.append(
            StepEffect(
                index=i,
                kind=step.kind.value,
                name=step.name,
                agent=step.agent,
                effect=segment.estimate if scored else None,
                interval=segment.interval if scored else None,
                p_value=segment.p_value if scored else None,
                decisive=scored and (segment.start, segment.end) in decisive,
                segment=(segment.start, segment.end) if segment else (i, i + 1),
                segment_effect=None if segment is None else segment.estimate,
                segment_interval=None if segment is None else segment.interval,
                observation_only=unscored,
                side_effects=step.side_effects,
                action=step.output,
                e_value=segment.e_value if scored else None,
            )
        )
    return tuple(out)


def _curve(profile: PrefixProfile, confidence: float, looks: int) -> tuple[CurvePoint, ...]:
    level = bonferroni(confidence, looks)
    points = []
    for position in profile.positions():
        rate, interval, trials = profile.rate(position, level)
        if trials:  # a position the budget stopped before any rollout ran is not measured
            points.append(CurvePoint(position, rate, interval, trials))
    return tuple(points)


def _point_of_commitment(
    profile: PrefixProfile, n: int, confidence: float, looks: int
) -> int | None:
    """The published package's rule, for comparison: the latest step ``i`` whose re-decision
    still rescues the run, i.e. whose ``F(n) - F(i)`` interval excludes zero."""
    level = bonferroni(confidence, looks)
    latest = None
    for position in profile.positions():
        if position >= n:
            continue
        b_only, a_only, pairs = profile.paired(position, n)
        if pairs and paired_difference(b_only, a_only, pairs, level).low > 0:
            latest = position
    return latest


def _verdict(search: SearchResult | None, decisive: tuple[int, ...]) -> tuple[int | None, str]:
    if search is None or search.candidate is None:
        return None, UNDECIDED
    candidate = search.candidate
    if candidate.width != 1 or candidate.estimate <= 0:
        return None, UNDECIDED
    if search.separated:
        return candidate.start, SEPARATED
    # "likely": the largest estimated effect, significantly positive, and every segment
    # actually compared (one with too few pairs could hide a larger effect). Not certified:
    # a competitor may still be as large; "separated" is the certified verdict.
    if search.adequate and (
        candidate.start in decisive
        or significant(candidate, len(search.segments), 1.0 - search.confidence)
    ):
        return candidate.start, LIKELY
    return None, UNDECIDED


def _shapley_culprit(shapley: ShapleyResult) -> int | None:
    best = max(range(len(shapley.values)), key=lambda i: shapley.values[i])
    if shapley.intervals[best].low <= 0:
        return None
    return int(shapley.players[best].split(":", 1)[0])


def _separation_bound(search: Any) -> dict[str, Any]:
    """The candidate's one-sided lower bound from the separation check (what a ``separated``
    verdict rests on) and how many other parts of the run it was compared with."""
    if search is None or not search.separation or search.candidate is None:
        return {}
    where = (search.candidate.start, search.candidate.end)
    low = next((lo for seg, lo, _ in search.separation if (seg.start, seg.end) == where), None)
    if low is None:
        return {}
    return {"separation_lower": low, "compared_parts": len(search.separation) - 1}
