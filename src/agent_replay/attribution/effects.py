"""Step effects: the prefix failure curve, estimated with common random numbers.

``F(i)`` is the failure rate when steps before ``i`` are held and the rest re-drawn; ``e_i =
F(i+1) - F(i)``. Rollout ``r`` uses seed ``r`` at every position, so the rollouts of two
positions are paired and the effect of the steps between them is estimated from the pairs that
disagree (``b``: fails only with the steps held; ``c``: fails only with them re-drawn).

Adaptive search (the default). ``F`` is usually close to monotone with a few jumps, so:

1. evaluate ``F`` on a coarse grid of positions (always ``0`` and ``n``) at ``r0`` rollouts;
   for seeds whose outcome differs between ``0`` and ``n`` (when none does, probe seeds are
   tried one at a time until one does), bisect over positions to find where it flips, and
   compare that step's pair of positions on enough seeds for a discordant pair to show;
2. while the segment with the largest estimated increase spans several steps, evaluate its
   midpoint (bisection);
3. once it is a single step - the candidate - check that its effect's lower bound exceeds the
   upper bound of every other segment; if not, double the rollouts at the positions bounding
   the candidate and, once its effect is significantly positive, bisect the segments of
   several steps that block it (a large effect can hide in one behind a protective step: their
   total stays small) and double the rollouts at the single steps that block it, and repeat;
4. stop when the candidate is separated, when the budget (live step executions) or the
   rollout cap cannot pay for the next round, and say which.

Intervals are simultaneous where the verdict needs them: the error rate is divided by the
number of looks the rollout schedule allows (Bonferroni alpha-spending, valid whenever the
search stops) and, for separation, by the number of segments compared. The non-adaptive mode
evaluates every position at the full rollout count (the complete profile).

The assumption behind bisection: a segment whose endpoints show no increase holds no large
step effect. Effects that cancel inside a segment would hide; the report lists the segments
that were not resolved to single steps and their total effect.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .stats import (
    Interval,
    bonferroni,
    clopper_pearson,
    e_bh,
    e_value_positive,
    effect_bounds,
    fdr_reject,
    mcnemar_p,
    paired_difference,
)

__all__ = ["PrefixProfile", "SearchResult", "Segment", "search_effects", "significant"]

GROWTH = 2
_NOTHING: dict = {}  # read-only stand-in for a position with nothing known (never written)


@dataclass
class PrefixProfile:
    """Rollout outcomes by position and seed (``True`` = the event: failure, or success in
    credit mode).

    ``same[p]`` holds the seeds whose re-draw of step ``p`` reproduced the recording: for them
    the rollout from ``p`` *is* the rollout from ``p + 1`` (common random numbers), so the two
    outcomes are equal even when neither was run to the end.
    """

    n: int
    outcomes: dict[int, dict[int, bool]] = field(default_factory=dict)
    same: dict[int, set[int]] = field(default_factory=dict)
    evaluated: set[int] = field(default_factory=set)  # positions the search asked for

    def value(self, position: int, seed: int) -> bool | None:
        outcomes, same = self.outcomes, self.same
        while position <= self.n:
            known = outcomes.get(position, _NOTHING).get(seed)
            if known is not None:
                return known
            if seed not in same.get(position, _NOTHING):
                return None
            position += 1
        return None

    def covered(self, position: int, seed: int) -> bool:
        return seed in self.outcomes.get(position, _NOTHING) or seed in self.same.get(
            position, _NOTHING
        )

    def rollouts(self, position: int) -> int:
        """How many seeds, from 0 up, have a known outcome at ``position``."""
        count = 0
        while self.value(position, count) is not None:
            count += 1
        return count

    def positions(self) -> list[int]:
        """The positions the search evaluated (outcomes known elsewhere by coupling only
        serve as values, they do not split segments)."""
        return sorted(self.evaluated)

    def rate(self, position: int, confidence: float) -> tuple[float, Interval, int]:
        """``F(position)`` over seeds ``0 .. k-1``, the longest run of known outcomes (a seed
        set chosen independently of the outcomes)."""
        trials = self.rollouts(position)
        events = sum(bool(self.value(position, seed)) for seed in range(trials))
        return (
            events / trials if trials else math.nan,
            clopper_pearson(events, trials, confidence),
            trials,
        )

    def paired(self, a: int, b: int) -> tuple[int, int, int]:
        """``(b_only, a_only, pairs)``: pairs with the event only at ``b`` / only at ``a``.

        Only seeds ``0 .. k-1`` count, ``k`` the first seed whose pair is not known: which
        seeds have both outcomes can depend on their draws (a budget stop after the cheap
        "reproduced" probes, before the continuations), so counting whatever happens to be
        known would favour concordant pairs.
        """
        b_only = a_only = pairs = 0
        same_a = self.same.get(a, _NOTHING)
        between = [self.same.get(j, _NOTHING) for j in range(a + 1, b)]
        seed = 0
        while True:
            if seed in same_a and (not between or all(seed in same for same in between)):
                pairs += 1  # every step between reproduced: the two rollouts are one
                seed += 1
                continue
            at_a, at_b = self.value(a, seed), self.value(b, seed)
            if at_a is None or at_b is None:
                return b_only, a_only, pairs
            pairs += 1
            if at_b and not at_a:
                b_only += 1
            elif at_a and not at_b:
                a_only += 1
            seed += 1


@dataclass(frozen=True)
class Segment:
    """Steps ``start .. end - 1`` between two evaluated positions, and their total effect.

    ``interval`` is two-sided at the look-adjusted level (for reports); ``p_value`` is the
    one-sided, look-adjusted McNemar p-value for a positive effect; ``e_value`` the
    anytime-valid e-value for it (see :func:`~agent_replay.attribution.stats.e_value_positive`).
    """

    start: int
    end: int
    estimate: float
    interval: Interval
    p_value: float
    b_only: int
    a_only: int
    pairs: int
    e_value: float = 1.0

    @property
    def width(self) -> int:
        return self.end - self.start


@dataclass
class SearchResult:
    """What the search found. ``separation`` holds the segments of the coarsest partition
    the verdict was checked on, with their simultaneous one-sided bounds."""

    profile: PrefixProfile
    segments: list[Segment]
    candidate: Segment | None
    separated: bool
    stop_reason: str
    looks: int
    separation_confidence: float
    decisive: list[Segment]
    separation: list[tuple[Segment, float, float]] = field(default_factory=list)
    confidence: float = 0.95
    min_pairs: int = 0  # every segment was compared on at least this many pairs

    @property
    def adequate(self) -> bool:
        """Whether every segment has been compared on the first look's worth of pairs."""
        return all(s.pairs >= self.min_pairs for s in self.segments)


def _segment(
    profile: PrefixProfile,
    a: int,
    b: int,
    level: float,
    looks: int,
    observation_only: frozenset[int],
) -> Segment:
    b_only, a_only, pairs = profile.paired(a, b)
    estimate = (b_only - a_only) / pairs if pairs else 0.0
    if b - a == 1 and a in observation_only:
        estimate = 0.0  # held in both arms: structurally no effect, and never the culprit
    return Segment(
        start=a,
        end=b,
        estimate=estimate,
        interval=paired_difference(b_only, a_only, pairs, level),
        p_value=min(1.0, mcnemar_p(b_only, a_only) * looks),
        b_only=b_only,
        a_only=a_only,
        pairs=pairs,
        e_value=e_value_positive(b_only, a_only),
    )


def _segments(
    profile: PrefixProfile, confidence: float, looks: int, observation_only: frozenset[int]
) -> list[Segment]:
    positions = profile.positions()
    level = bonferroni(confidence, looks)
    return [
        _segment(profile, a, b, level, looks, observation_only)
        for a, b in itertools.pairwise(positions)
    ]


def _candidate(segments: list[Segment], observation_only: frozenset[int]) -> Segment | None:
    eligible = [s for s in segments if not (s.width == 1 and s.start in observation_only)]
    if not eligible:
        return None
    # the largest estimated effect; among equals, an unexplored (wider) segment first
    return max(eligible, key=lambda s: (s.estimate, s.width > 1, s.interval.high, -s.start))


def _partition(
    profile: PrefixProfile,
    segments: list[Segment],
    candidate: Segment,
    confidence: float,
    looks: int,
    observation_only: frozenset[int],
) -> list[Segment]:
    """The coarsest partition to check the candidate against.

    On each side of the candidate, adjacent segments are merged into runs as long as a run's
    total effect stays clearly smaller than the candidate's (at most half of it); a segment
    that could compete stays on its own. Fewer segments compared means a smaller multiplicity
    correction, and a merged run uses the pairs between its far endpoints directly.
    """
    level = bonferroni(confidence, looks)
    threshold = candidate.estimate / 2

    def merge(side: list[Segment]) -> list[Segment]:
        runs: list[Segment] = []
        for segment in side:
            if runs:
                merged = _segment(
                    profile, runs[-1].start, segment.end, level, looks, observation_only
                )
                # a total bounds each of its steps only when none of them is protective: only
                # parts with no rollout pair pointing the protective way are merged
                if (
                    merged.estimate <= threshold
                    and segment.estimate <= threshold
                    and segment.a_only == 0
                    and runs[-1].a_only == 0
                ):
                    runs[-1] = merged
                    continue
            runs.append(segment)
        return runs

    left = merge([s for s in segments if s.end <= candidate.start])
    right = merge([s for s in segments if s.start >= candidate.end])
    return [*left, candidate, *right]


def _separation(
    profile: PrefixProfile,
    segments: list[Segment],
    candidate: Segment,
    confidence: float,
    looks: int,
    observation_only: frozenset[int],
) -> tuple[list[tuple[Segment, float, float]], float, list[Segment]]:
    """The candidate checked against the coarsest partition (:func:`_partition`):
    simultaneous one-sided bounds ``(segment, low, high)`` for every segment of it, each
    failing with probability alpha / (looks * segments); the candidate's lower bound; and the
    other segments whose upper bound reaches it (the candidate is separated when that lower
    bound is positive and none do)."""
    partition = _partition(profile, segments, candidate, confidence, looks, observation_only)
    tail = (1.0 - confidence) / (looks * max(1, len(partition)))
    bounds = [
        (segment, *effect_bounds(segment.b_only, segment.a_only, segment.pairs, tail))
        for segment in partition
    ]
    low = next(lo for seg, lo, _ in bounds if seg is candidate)
    blockers = [seg for seg, _, high in bounds if seg is not candidate and high >= low]
    return bounds, low, blockers


def _widest_inside(segments: list[Segment], part: Segment) -> Segment | None:
    """The widest segment of several steps within ``part`` (a segment, or a run of merged
    ones), or ``None`` when every step in it is its own segment already."""
    inside = [s for s in segments if part.start <= s.start and s.end <= part.end and s.width > 1]
    return max(inside, key=lambda s: (s.width, -s.start), default=None)


def _hiding(segments: list[Segment], separation: list, candidate: Segment) -> list[Segment]:
    """The widest segment of several steps inside each compared part (other than the
    candidate) that has rollout pairs pointing the protective way: its total need not bound
    its steps' effects, so a competitor can hide behind a protective step in it (measured: a
    wrong step 'separated' in 10% to 72% of runs of such agents before these were split)."""
    out = []
    for seg, _, _ in separation:
        if seg is candidate or seg.a_only == 0:
            continue
        wide = _widest_inside(segments, seg)
        if wide is not None:
            out.append(wide)
    return out


def significant(segment: Segment, compared: int, alpha: float) -> bool:
    """Whether ``segment`` - chosen as the largest of ``compared`` segments - has a positive
    effect: its e-value (valid whenever the search stops) reaches ``compared / alpha``."""
    return segment.estimate > 0 and segment.e_value >= compared / alpha


PROBE_SEEDS = 1 << 40
"""Rollout seeds from here on are probes: their outcomes guide the search, never an estimate
(estimates use seeds ``0, 1, ...`` in order, a set chosen independently of the outcomes)."""


def _discordant(profile: PrefixProfile, n: int) -> dict[int, bool]:
    """Seeds whose outcome differs between positions 0 and n, with their outcome at 0."""
    first, last = profile.outcomes.get(0, {}), profile.outcomes.get(n, {})
    return {seed: event for seed, event in sorted(first.items()) if last.get(seed, event) != event}


Probe = Callable[[int, list[int]], list[bool]]
"""``probe(position, seeds)``: the outcome of one rollout per seed from ``position``, run as a
batch (concurrently when the executor can), for guiding the search only."""


def _hunt(
    probe: Probe, n: int, tries: int, width: int, can_afford: Callable[[int, int], bool]
) -> tuple[dict[int, bool], int]:
    """Probe seeds whose outcome differs between positions 0 and n, tried ``width`` at a time
    until a batch has one, and how many seeds were tried.

    Used when none of the estimation seeds so far differs (a rare rescue): stopping at the
    first batch with a hit costs about ``n / rate`` live steps (plus up to a batch), where
    raising every position-0 estimate by a whole level would cost up to twice that; and the
    estimates stay free of this data-dependent stopping rule. ``width`` is how many rollouts
    the executor runs at once (1 with the serial executor: no overshoot)."""
    tried = 0
    while tried < tries:
        seeds = list(range(PROBE_SEEDS + tried, PROBE_SEEDS + min(tries, tried + width)))
        if not can_afford(0, len(seeds)):
            break
        tried += len(seeds)
        firsts, lasts = probe(0, seeds), probe(n, seeds)
        found = {s: a for s, a, b in zip(seeds, firsts, lasts, strict=True) if a != b}
        if found:
            return found, tried
    return {}, tried


def _locate(
    profile: PrefixProfile,
    probe: Probe,
    n: int,
    discordant: dict[int, bool],
    can_afford: Callable[[int, int], bool],
) -> list[int]:
    """Candidate steps from seeds whose outcome differs between positions 0 and n
    (``discordant``: seed -> outcome at 0), most voted first.

    For such a seed the outcome flips somewhere between the two positions; bisecting over
    positions *for that seed alone* finds a flip in log2(n) single rollouts. The seeds are
    bisected in lockstep, so each round's rollouts run as one batch per position. Only used to
    decide where to look: these probe outcomes come from selected seeds and never enter an
    estimate.
    """
    flips: Counter[int] = Counter()
    bounds = {seed: (0, n, at_first) for seed, at_first in discordant.items()}  # lo, hi, at lo

    def narrow(seed: int, middle: int, known: bool) -> None:
        lo, hi, at_lo = bounds[seed]
        bounds[seed] = (lo, middle, at_lo) if known != at_lo else (middle, hi, known)

    while bounds:
        asked: dict[int, list[int]] = {}
        for seed, (lo, hi, _) in list(bounds.items()):
            if hi - lo <= 1:
                flips[lo] += 1
                del bounds[seed]
                continue
            middle = (lo + hi) // 2
            known = profile.outcomes.get(middle, _NOTHING).get(seed)
            if known is None:
                asked.setdefault(middle, []).append(seed)
            else:
                narrow(seed, middle, known)
        for middle, seeds in asked.items():
            if not can_afford(middle, len(seeds)):
                return [step for step, _ in flips.most_common()]
            for seed, known in zip(seeds, probe(middle, seeds), strict=True):
                narrow(seed, middle, known)
    return [step for step, _ in flips.most_common()]


def search_effects(
    run_position: Callable[[int, list[int], bool], None],
    profile: PrefixProfile,
    *,
    n: int,
    confidence: float,
    max_rollouts: int,
    initial_rollouts: int,
    adaptive: bool,
    budget: float | None,
    spent: Callable[[], float],
    observation_only: frozenset[int],
    probe: Probe | None = None,
    longest: Callable[[], int] | None = None,
    probe_seeds: int = 6,
    probe_width: int = 1,
    min_effect: float = 0.0,
    fdr_method: str = "e-bh",
) -> SearchResult:
    """Run the search. ``run_position(position, seeds)`` adds the outcomes of ``seeds`` at
    ``position`` (and wherever they are known to equal it) to ``profile``; ``probe(position,
    seeds)`` runs one rollout per seed whose outcome only guides the search, ``probe_width``
    of them at a time when hunting; ``spent()`` reports live step executions so far (for the
    budget); ``longest()`` the most steps a rollout has taken so far (to size batches once
    re-draws are seen to lengthen the run)."""
    if adaptive:
        levels = [initial_rollouts]
        while levels[-1] < max_rollouts:
            levels.append(min(max_rollouts, levels[-1] * GROWTH))
    else:
        levels = [max_rollouts]
    looks = len(levels)
    alpha = 1.0 - confidence

    def worst(position: int) -> int:
        # a rollout from `position` re-draws the steps from there to its end: the
        # recording's, or the longest run seen, when re-draws lengthen it (a batch is sized
        # before any of its rollouts ran, so one that first runs longer can overrun the
        # budget by what it ran beyond that; the rollout limits bound it)
        end = n if longest is None else max(n, longest())
        return max(1, end - position)

    def affordable(position: int, rollouts: int) -> bool:
        return budget is None or spent() + rollouts * worst(position) <= budget

    observed_cost: dict[tuple[int, bool], float] = {}

    def run_within_budget(position: int, missing: list[int], probe_same: bool) -> bool:
        """Run ``missing`` seeds in chunks while the budget allows; True when all ran.

        A chunk is sized by what this kind of rollout cost so far, but never beyond what the
        budget covers if every rollout in it re-drew all its steps (``worst``): the budget
        is a cap, not a target."""
        if budget is None or position >= n:  # factual replays re-draw nothing
            run_position(position, missing, probe_same)
            return True
        key = (position, probe_same)
        most = worst(position)
        done = 0
        while done < len(missing):
            remaining = budget - spent()
            per_rollout = observed_cost.get(key, most)
            fits = min(int(remaining // max(per_rollout, 1e-9)), int(remaining // most))
            take = min(len(missing) - done, fits, 32)
            if take <= 0:
                return False
            before = spent()
            run_position(position, missing[done : done + take], probe_same)
            observed_cost[key] = max(0.5, (spent() - before) / take)
            done += take
        return True

    def ensure(position: int, rollouts: int, probe_same: bool = False) -> bool:
        if probe_same:
            missing = [seed for seed in range(rollouts) if not profile.covered(position, seed)]
        else:
            missing = [seed for seed in range(rollouts) if profile.value(position, seed) is None]
        profile.evaluated.add(position)
        if not missing:
            return True
        return run_within_budget(position, missing, probe_same)

    def ensure_pair(step: int, rollouts: int) -> bool:
        """Enough to compare positions ``step`` and ``step + 1`` on seeds ``0..rollouts-1``:
        rollouts from ``step`` stop as soon as its re-draw reproduces the recording (then the
        pair is concordant), and ``step + 1`` runs only for the seeds where it did not. Seeds
        go in chunks, each completed on both sides, so a budget stop never leaves half pairs
        (without a budget, in one batch: fewer rounds for a concurrent executor)."""
        profile.evaluated.update((step, step + 1))
        todo = [seed for seed in range(rollouts) if not profile.covered(step, seed)]
        size = 16 if budget is not None else max(1, len(todo))
        for start in range(0, len(todo), size):
            chunk = todo[start : start + size]
            if not run_within_budget(step, chunk, True):
                return False
            rest = [
                seed
                for seed in range(rollouts)
                if seed not in profile.same.get(step, ())
                and profile.value(step, seed) is not None
                and profile.value(step + 1, seed) is None
            ]
            if rest and not run_within_budget(step + 1, rest, False):
                return False
        rest = [
            seed
            for seed in range(rollouts)
            if seed not in profile.same.get(step, ()) and profile.value(step + 1, seed) is None
        ]
        return not rest or run_within_budget(step + 1, rest, False)

    level_of: dict[int, int] = {}

    def raise_to(position: int, level: int) -> bool:
        if not ensure(position, levels[level]):
            return False
        level_of[position] = max(level, level_of.get(position, 0))
        return True

    def raise_pair(step: int, level: int) -> bool:
        if not ensure_pair(step, levels[level]):
            return False
        # outcomes (not only "reproduced or not") at the first level, so the segments on
        # either side of the pair can be compared too
        for position in (step + 1, step):
            if not ensure(position, levels[0]):
                return False
        for position in (step, step + 1):
            level_of[position] = max(level, level_of.get(position, 0))
        return True

    stop_reason = "complete"
    grid = [n, 0] if adaptive else list(range(n, -1, -1))  # cheapest (latest) first
    for position in grid:
        if not raise_to(position, 0):
            stop_reason = "budget"
            break
    if adaptive and probe is not None and stop_reason != "budget":
        # look where the outcome flips, per discordant seed; when no estimation seed has
        # one, hunt for one among probe seeds
        discordant = dict(itertools.islice(_discordant(profile, n).items(), probe_seeds))
        level = level_of.get(0, 0)
        if not discordant:
            discordant, tried = _hunt(probe, n, max_rollouts, probe_width, affordable)
            seen = levels[level] + tried  # seeds it took to see one flip
            level = next((i for i, size in enumerate(levels) if size >= seen), len(levels) - 1)
        # compare the pair on as many seeds as it took to find the flip, and more (a level
        # at a time: the looks are accounted for) until a discordant pair shows there
        for step in _locate(profile, probe, n, discordant, affordable)[:2]:
            for at in range(level, len(levels)):
                if not raise_pair(step, at):
                    stop_reason = "budget"
                    break
                if sum(profile.paired(step, step + 1)[:2]):
                    break
            if stop_reason == "budget":
                break

    separation: list[tuple[Segment, float, float]] = []
    while stop_reason != "budget":
        segments = _segments(profile, confidence, looks, observation_only)
        candidate = _candidate(segments, observation_only)
        if candidate is None:
            stop_reason = "nothing to attribute"
            break
        if candidate.width > 1:
            if not adaptive:
                break
            middle = (candidate.start + candidate.end) // 2
            level = min(level_of.get(candidate.start, 0), level_of.get(candidate.end, 0))
            if not raise_to(middle, level):
                stop_reason = "budget"
                break
            continue
        separation, low, blockers = _separation(
            profile, segments, candidate, confidence, looks, observation_only
        )
        hidden = _hiding(segments, separation, candidate)
        if low > 0 and not blockers and not hidden:
            if adaptive:  # (a complete profile is measured whole whatever it shows: complete)
                stop_reason = "separated"
            break
        if low > 0 and not blockers and adaptive:
            # separated only by parts of several steps that show protective pairs: a
            # competitor can hide behind the protective step there; split them first
            for wide in hidden:
                middle = (wide.start + wide.end) // 2
                level = min(level_of.get(wide.start, 0), level_of.get(wide.end, 0))
                if not raise_to(middle, level):
                    stop_reason = "budget"
                    break
            if stop_reason == "budget":
                break
            continue
        if not adaptive:
            break
        if next(hi for seg, _, hi in separation if seg is candidate) <= min_effect:
            stop_reason = "no effect"
            break
        # more rollouts where they decide the verdict: first the candidate alone, until its
        # effect is clearly positive; then also whatever blocks its separation
        raised = False
        level = min(level_of.get(candidate.start, 0), level_of.get(candidate.end, 0))
        if level + 1 < len(levels):
            if not raise_pair(candidate.start, level + 1):
                stop_reason = "budget"
            raised = True
        targets: dict[int, int] = {}
        splits: dict[int, int] = {}
        if stop_reason != "budget" and significant(candidate, len(segments), alpha):
            endpoints = {candidate.start, candidate.end}
            lows = {(seg.start, seg.end): lo for seg, lo, _ in separation}
            at_cap = level + 1 >= len(levels)  # the candidate has all the rollouts it can get
            for segment in blockers:
                wide = _widest_inside(segments, segment)
                positive = lows.get((segment.start, segment.end), 0) > 0 or (
                    at_cap and segment.estimate > 0
                )
                if wide is not None and positive:
                    # a part of several steps that could match the candidate, never split,
                    # and holding a positive effect (for sure, or by its estimate once nothing
                    # else is left to do): a large effect can hide in it behind a protective
                    # step (their total stays small, so more rollouts at its ends would never
                    # make it the candidate): split it
                    middle = (wide.start + wide.end) // 2
                    level = min(level_of.get(wide.start, 0), level_of.get(wide.end, 0))
                    splits[middle] = max(level, splits.get(middle, 0))
                    continue
                for position, other in ((segment.start, segment.end), (segment.end, segment.start)):
                    if position in endpoints:
                        # the pair comparison gave this endpoint only "reproduced or not";
                        # the blocker needs its outcomes on as many seeds as the other end
                        target = min(level_of.get(position, 0), level_of.get(other, 0) + 1)
                    else:
                        target = level_of.get(position, 0) + 1
                    targets[position] = max(target, targets.get(position, 0))
        for middle in sorted(splits, reverse=True):
            if not raise_to(middle, splits[middle]):
                stop_reason = "budget"
                break
            raised = True
        if stop_reason == "budget":
            break
        for position in sorted(targets, reverse=True):
            target = min(targets[position], len(levels) - 1)
            if all(profile.value(position, s) is not None for s in range(levels[target])):
                # known already (coupled rollouts from other positions cover it): the level
                # is reached for free, and the next round asks for more
                if target > level_of.get(position, 0):
                    level_of[position] = target
                    raised = True
                continue
            if not raise_to(position, target):
                stop_reason = "budget"
                break
            raised = True
        if stop_reason == "budget":
            break
        if not raised:
            stop_reason = "max_rollouts"
            break

    segments = _segments(profile, confidence, looks, observation_only)
    candidate = _candidate(segments, observation_only)
    separated = stop_reason == "separated"
    if not separated and candidate is not None and candidate.width == 1:
        separation, low, blockers = _separation(
            profile, segments, candidate, confidence, looks, observation_only
        )
        separated = low > 0 and not blockers and not _hiding(segments, separation, candidate)
        if separated and adaptive and stop_reason == "budget":
            # the rollouts the budget paid for before it ran out separate it: the search
            # would have stopped there
            stop_reason = "separated"
    if fdr_method == "e-bh":
        rejected = e_bh([s.e_value for s in segments], alpha)
    else:
        rejected = fdr_reject([s.p_value for s in segments], alpha, method=fdr_method)
    decisive = [s for s, yes in zip(segments, rejected, strict=True) if yes and s.estimate > 0]
    m = max(1, len(separation))
    return SearchResult(
        profile=profile,
        segments=segments,
        candidate=candidate,
        separated=separated,
        stop_reason=stop_reason,
        looks=looks,
        separation_confidence=1.0 - alpha / (looks * m),
        decisive=decisive,
        separation=separation,
        confidence=confidence,
        min_pairs=levels[0],
    )
