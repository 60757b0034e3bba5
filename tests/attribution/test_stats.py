"""Interval coverage checked by seeded simulation (ATTRIBUTION.md: honest intervals)."""

import random

import pytest

from agent_replay.attribution.stats import (
    clopper_pearson,
    e_bh,
    e_value_positive,
    fdr_reject,
    mcnemar_p,
    paired_difference,
    student_t_quantile,
)

GRID_R = (16, 50, 200)
GRID_P = (0.02, 0.1, 0.5)
REPS = 1500


def binomial(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


def test_known_clopper_pearson_values():
    assert clopper_pearson(0, 16).high == pytest.approx(1 - 0.025 ** (1 / 16), rel=1e-6)
    interval = clopper_pearson(5, 10)
    assert interval.low == pytest.approx(0.187086, abs=1e-5)
    assert interval.high == pytest.approx(0.812914, abs=1e-5)


@pytest.mark.parametrize(
    "confidence,df,table",  # two-sided quantiles from printed t tables
    [
        (0.95, 1, 12.7062),
        (0.95, 2, 4.30265),
        (0.99, 3, 5.84091),
        (0.95, 9, 2.26216),
        (0.90, 5, 2.01505),
        (0.95, 30, 2.04227),
        (0.95, 1000, 1.96234),
    ],
)
def test_student_t_quantiles_match_the_tables(confidence, df, table):
    assert student_t_quantile(confidence, df) == pytest.approx(table, abs=6e-5)


def test_mean_interval_covers_over_few_runs():
    """The interval aggregate_runs gives a step's mean effect over runs, by simulation:
    normal data, 4 runs; the normal quantile's interval covered 86% at 95%."""
    from agent_replay.attribution.aggregate import mean_interval

    rng = random.Random(7)
    covered = sum(
        mean_interval([rng.gauss(0.3, 0.2) for _ in range(4)], 0.95).contains(0.3)
        for _ in range(4000)
    )
    assert 0.94 <= covered / 4000 <= 0.96


@pytest.mark.parametrize("rollouts", GRID_R)
@pytest.mark.parametrize("p", GRID_P)
def test_failure_rate_interval_coverage(rollouts, p):
    rng = random.Random(f"F-{rollouts}-{p}")
    covered = sum(
        clopper_pearson(binomial(rng, rollouts, p), rollouts, 0.95).contains(p) for _ in range(REPS)
    )
    assert covered / REPS >= 0.93


def paired(rng: random.Random, n: int, p10: float, p01: float) -> tuple[int, int]:
    b = c = 0
    for _ in range(n):
        u = rng.random()
        if u < p10:
            b += 1
        elif u < p10 + p01:
            c += 1
    return b, c


@pytest.mark.parametrize("rollouts", GRID_R)
@pytest.mark.parametrize("p", GRID_P)
def test_step_effect_interval_coverage(rollouts, p):
    # an effect of size p with some reverse discordance, as common random numbers give
    p10, p01 = p, p / 4
    rng = random.Random(f"e-{rollouts}-{p}")
    covered = 0
    for _ in range(REPS):
        b, c = paired(rng, rollouts, p10, p01)
        covered += paired_difference(b, c, rollouts, 0.95).contains(p10 - p01)
    assert covered / REPS >= 0.93


@pytest.mark.parametrize("p", GRID_P)
def test_coverage_under_adaptive_stopping(p):
    """Stop at the first look whose interval excludes zero (or at the last look); the interval
    reported at stopping still covers, because each look spends alpha / looks."""
    looks = [16, 32, 64, 128, 200]
    level = 1 - 0.05 / len(looks)
    p10, p01 = p, p / 4
    rng = random.Random(f"adaptive-{p}")
    covered = 0
    for _ in range(REPS):
        draws = [paired(rng, 1, p10, p01) for _ in range(looks[-1])]
        for r in looks:
            b = sum(d[0] for d in draws[:r])
            c = sum(d[1] for d in draws[:r])
            interval = paired_difference(b, c, r, level)
            if interval.excludes_zero() or r == looks[-1]:
                covered += interval.contains(p10 - p01)
                break
    assert covered / REPS >= 0.93


def test_e_value_is_valid_under_the_null():
    rng = random.Random("null")
    rejections = 0
    for _ in range(4000):  # no effect: discordant pairs split evenly
        b, c = paired(rng, 60, 0.1, 0.1)
        rejections += e_value_positive(b, c) >= 20  # level 0.05
    assert rejections / 4000 <= 0.05


def test_e_value_grows_with_one_sided_discordance():
    assert e_value_positive(10, 0) > 100 > e_value_positive(5, 5)


def test_mcnemar_and_step_up_procedures():
    assert mcnemar_p(5, 0) == pytest.approx(1 / 32)
    assert fdr_reject([0.001, 0.2, 0.03, 0.5]) == [True, False, False, False]
    assert e_bh([1000, 1, 50, 2], 0.05) == [True, False, True, False]


def test_exact_mcnemar_p_values_keep_their_digits_in_the_far_tail():
    """QA: ``1 - cdf`` lost every digit below 1e-16: 200 discordant pairs all one way gave
    1.75e-14 (exactly 0.5**200 = 6.2e-61) and reports showed ``"p_value": 0.0``."""
    from fractions import Fraction
    from math import comb

    assert mcnemar_p(200, 0) == pytest.approx(0.5**200, rel=1e-12)
    rng = random.Random(7)
    for _ in range(500):
        d = rng.randint(1, 400)
        k = rng.randint(0, d)
        exact = Fraction(sum(comb(d, i) for i in range(max(k, 0), d + 1)), 2**d)
        assert mcnemar_p(k, d - k) == pytest.approx(float(exact), rel=1e-11)
