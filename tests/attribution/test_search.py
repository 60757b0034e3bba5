"""The adaptive search on a synthetic world where every rollout's outcome is known in closed
form: a rare rescue at one step (re-drawing it avoids the failure for a few seeds only)."""

from __future__ import annotations

import random

from agent_replay.attribution.effects import PROBE_SEEDS, PrefixProfile, search_effects


class RareRescue:
    """n steps; the run fails unless step ``culprit`` is re-drawn and its draw for the seed
    lands under ``rate``. Noise steps never reproduce their recording; cost = steps re-drawn."""

    def __init__(self, n: int, culprit: int, rate: float) -> None:
        self.n, self.culprit, self.rate = n, culprit, rate
        self.spent = 0
        self.probed: list[int] = []

    def rescued(self, seed: int) -> bool:
        return random.Random(f"{seed}-{self.culprit}").random() < self.rate

    def fails(self, position: int, seed: int) -> bool:
        self.spent += self.n - position
        return not (position <= self.culprit and self.rescued(seed))

    def run_position(self, position: int, seeds: list[int], probe_same: bool = False) -> None:
        for seed in seeds:
            self.profile.outcomes.setdefault(position, {})[seed] = self.fails(position, seed)

    def probe(self, position: int, seeds: list[int]) -> list[bool]:
        self.batches.append((position, len(seeds)))
        self.probed.extend(seeds)
        return [self.fails(position, seed) for seed in seeds]

    def search(self, budget: float | None, max_rollouts: int = 1600, width: int = 1):
        self.profile = PrefixProfile(self.n)
        self.batches: list[tuple[int, int]] = []
        return search_effects(
            self.run_position,
            self.profile,
            n=self.n,
            confidence=0.95,
            max_rollouts=max_rollouts,
            initial_rollouts=8,
            adaptive=True,
            budget=budget,
            spent=lambda: self.spent,
            observation_only=frozenset(),
            probe=self.probe,
            probe_width=width,
        )


def test_a_rare_rescue_is_hunted_with_probe_seeds_that_never_enter_an_estimate():
    world = RareRescue(n=8, culprit=1, rate=0.06)
    assert not any(world.rescued(seed) for seed in range(8))  # the grid sees no flip
    result = world.search(budget=None)
    assert result.candidate is not None and (result.candidate.start, result.candidate.end) == (1, 2)
    assert result.candidate.b_only > 0 and result.candidate.a_only == 0
    assert any(seed >= PROBE_SEEDS for seed in world.probed)  # the hunt ran
    known = {seed for outcomes in world.profile.outcomes.values() for seed in outcomes}
    assert known and max(known) < PROBE_SEEDS  # estimates use seeds 0, 1, ... only
    for position in world.profile.evaluated:  # and contiguous ones
        assert world.profile.rollouts(position) == len(world.profile.outcomes.get(position, {}))


def test_the_budget_binds_before_the_rollout_cap():
    """At the rollout cap of 200 the pair at a 3% rescue shows too few discordant pairs to
    name it; with the cap lifted, the same budget pays for enough cheap pairs."""
    world = RareRescue(n=8, culprit=6, rate=0.03)
    capped = world.search(budget=4000, max_rollouts=200)
    assert capped.stop_reason == "max_rollouts"
    world.spent = 0
    lifted = world.search(budget=4000)
    assert world.spent <= 4000
    assert lifted.candidate.pairs > 200 and lifted.candidate.e_value > capped.candidate.e_value


def test_probes_run_in_batches_as_wide_as_the_executor():
    """With a concurrent executor the hunt tries a batch of probe seeds at once, and the
    bisection advances every discordant seed in lockstep (one batch per position and round),
    so the search's wall time does not grow with one rollout after another."""
    hunted = RareRescue(n=8, culprit=1, rate=0.06)
    result = hunted.search(budget=None, width=8)
    assert (result.candidate.start, result.candidate.end) == (1, 2)
    hunt = [size for position, size in hunted.batches if position == 0]
    assert hunt and all(size == 8 for size in hunt)
    common = RareRescue(n=8, culprit=5, rate=0.5)  # several seeds of the grid flip
    result = common.search(budget=None, width=8)
    assert (result.candidate.start, result.candidate.end) == (5, 6)
    assert not any(position == 0 for position, _ in common.batches)  # no hunt needed
    assert len(common.batches) <= 3  # log2(8) rounds of bisection, each one batch
    assert max(size for _, size in common.batches) > 1
