"""Intervals and tests whose coverage is checked by simulation (tests/attribution/test_coverage.py).

* Failure rates: Clopper-Pearson exact intervals (never below nominal coverage).
* Paired differences of failure indicators (a step effect from common-random-number pairs):
  with ``b`` pairs failing only in the first arm and ``c`` only in the second out of ``n``,
  ``p10`` and ``p01`` each get a Clopper-Pearson interval at half the error rate, and the
  difference ``p10 - p01`` their Bonferroni combination. Conservative, valid at every ``n``.
* One-sided p-values for "the effect is positive": the exact conditional McNemar test.
* Many steps at once: Benjamini-Yekutieli step-up (valid under arbitrary dependence, which
  shared rollouts create) or Benjamini-Hochberg.
* Adaptive stopping: callers divide the error rate by the number of looks they may take
  (a Bonferroni alpha-spending over a fixed look schedule), which keeps the final interval
  valid at whatever look the procedure stops.

Everything is pure Python; results are cached because the same counts recur constantly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "E_ALTERNATIVES",
    "Interval",
    "binomial_cdf",
    "binomial_sf",
    "bonferroni",
    "clopper_pearson",
    "cp_lower",
    "cp_upper",
    "e_bh",
    "e_value_positive",
    "effect_bounds",
    "fdr_reject",
    "mcnemar_p",
    "paired_difference",
    "student_t_quantile",
]


@dataclass(frozen=True)
class Interval:
    """``[low, high]`` at ``confidence`` (the level actually used, after any adjustment)."""

    low: float
    high: float
    confidence: float
    method: str

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def width(self) -> float:
        return self.high - self.low

    def to_dict(self) -> dict:
        return {
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "method": self.method,
        }


def bonferroni(confidence: float, parts: int) -> float:
    """The level of each of ``parts`` statements that hold jointly at ``confidence``."""
    return 1.0 - (1.0 - confidence) / parts


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (exact enough for n <= 1e5)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    # terms from the mode outward would be faster; n is small here
    total = 0.0
    log_term = n * log_q  # k = 0
    for i in range(k + 1):
        if i:
            log_term += math.log(n - i + 1) - math.log(i) + log_p - log_q
        total += math.exp(log_term)
    return min(1.0, total)


def _solve(f, target: float, lo: float = 0.0, hi: float = 1.0) -> float:
    """The p in [lo, hi] where the decreasing function f crosses target (bisection)."""
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _t_central(theta: float, df: int) -> float:
    """P(|T| <= sqrt(df) tan(theta)) for Student's t with ``df`` degrees of freedom: the
    closed-form finite series for whole ``df`` (Abramowitz and Stegun 26.7.3-4)."""
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term = total = 1.0
        for j in range(1, df // 2):
            term *= cos2 * (2 * j - 1) / (2 * j)
            total += term
        return sin * total
    if df == 1:
        return 2 * theta / math.pi
    term = total = 1.0
    for j in range(1, (df - 1) // 2):
        term *= cos2 * (2 * j) / (2 * j + 1)
        total += term
    return 2 / math.pi * (theta + sin * math.cos(theta) * total)


@lru_cache(maxsize=1024)
def student_t_quantile(confidence: float, df: int) -> float:
    """The ``t`` with P(|T| <= t) = ``confidence`` for Student's t with ``df`` (whole, >= 1)
    degrees of freedom: the half-width factor of a two-sided interval for a mean."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, not {df}")
    # P(|T| <= t) increases with theta: bisect its negation
    theta = _solve(lambda x: -_t_central(x, df), -confidence, 0.0, math.pi / 2)
    return math.sqrt(df) * math.tan(theta)


@lru_cache(maxsize=65536)
def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> Interval:
    """Exact two-sided interval for a binomial proportion."""
    if trials <= 0:
        return Interval(0.0, 1.0, confidence, "clopper-pearson")
    tail = (1.0 - confidence) / 2
    return Interval(
        cp_lower(successes, trials, tail),
        cp_upper(successes, trials, tail),
        confidence,
        "clopper-pearson",
    )


@lru_cache(maxsize=65536)
def cp_lower(successes: int, trials: int, tail: float) -> float:
    """One-sided Clopper-Pearson lower bound: P(true p < bound) <= ``tail``."""
    if trials <= 0 or successes <= 0:
        return 0.0
    return _lower(successes, trials, tail)


@lru_cache(maxsize=65536)
def cp_upper(successes: int, trials: int, tail: float) -> float:
    """One-sided Clopper-Pearson upper bound: P(true p > bound) <= ``tail``."""
    if trials <= 0 or successes >= trials:
        return 1.0
    return _upper(successes, trials, tail)


def effect_bounds(
    first_only: int, second_only: int, pairs: int, tail: float
) -> tuple[float, float]:
    """One-sided bounds ``(lower, upper)`` for ``p10 - p01``, each failing with probability
    at most ``tail`` (the two proportions share it, Bonferroni)."""
    half = tail / 2
    lower = cp_lower(first_only, pairs, half) - cp_upper(second_only, pairs, half)
    upper = cp_upper(first_only, pairs, half) - cp_lower(second_only, pairs, half)
    return max(-1.0, lower), min(1.0, upper)


def _upper(x: int, n: int, tail: float) -> float:
    # largest p with P(X <= x; p) >= tail; P(X <= x; p) decreases in p
    return _solve(lambda p: binomial_cdf(x, n, p), tail)


def _lower(x: int, n: int, tail: float) -> float:
    # smallest p with P(X >= x; p) = 1 - P(X <= x - 1; p) >= tail; it increases in p, so
    # bisect its negation
    return _solve(lambda p: -(1.0 - binomial_cdf(x - 1, n, p)), -tail)


@lru_cache(maxsize=65536)
def paired_difference(
    first_only: int, second_only: int, pairs: int, confidence: float = 0.95
) -> Interval:
    """Interval for ``p10 - p01``: ``first_only`` pairs had the event only in arm one,
    ``second_only`` only in arm two, out of ``pairs`` (see the module docstring)."""
    half = bonferroni(confidence, 2)
    a = clopper_pearson(first_only, pairs, half)
    b = clopper_pearson(second_only, pairs, half)
    return Interval(
        max(-1.0, a.low - b.high),
        min(1.0, a.high - b.low),
        confidence,
        "paired clopper-pearson (bonferroni)",
    )


@lru_cache(maxsize=65536)
def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), the upper tail summed itself (``1 - binomial_cdf``
    loses every digit below about 1e-16: a p-value of 6e-61 came out as 1.8e-14, or 0)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    logs = [
        math.lgamma(n + 1)
        - math.lgamma(i + 1)
        - math.lgamma(n - i + 1)
        + i * log_p
        + (n - i) * log_q
        for i in range(k, n + 1)
    ]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(x - top) for x in logs))


def mcnemar_p(first_only: int, second_only: int) -> float:
    """One-sided exact McNemar p-value for "arm one has the event more often"."""
    d = first_only + second_only
    if d == 0:
        return 1.0
    return binomial_sf(first_only, d, 0.5)


def fdr_reject(p_values: Sequence[float], q: float = 0.05, *, method: str = "by") -> list[bool]:
    """Which hypotheses a step-up procedure rejects at false discovery rate ``q``.

    ``method="by"`` (Benjamini-Yekutieli) is valid under any dependence; ``"bh"``
    (Benjamini-Hochberg) assumes independence or positive dependence.
    """
    m = len(p_values)
    if m == 0:
        return []
    scale = sum(1.0 / k for k in range(1, m + 1)) if method == "by" else 1.0
    order = sorted(range(m), key=lambda i: p_values[i])
    cutoff = -1
    for rank, i in enumerate(order, start=1):
        if p_values[i] <= rank * q / (m * scale):
            cutoff = rank
    rejected = [False] * m
    for rank, i in enumerate(order, start=1):
        if rank <= cutoff:
            rejected[i] = True
    return rejected


#: Alternatives mixed in :func:`e_value_positive`: P(a discordant pair points the way of a
#: positive effect). Common random numbers make discordance mostly one-directional (often
#: entirely: a rare rescue shows as a few pairs, all one way, hence 0.995), noisy judges make
#: it mixed; the mixture adapts to both.
E_ALTERNATIVES = (0.6, 0.75, 0.9, 0.97, 0.995)


def e_value_positive(first_only: int, second_only: int) -> float:
    """An e-value against "the effect is not positive" from the discordant pairs.

    Under that hypothesis a discordant pair points the positive way with probability at most
    1/2, so each alternative's likelihood ratio ``prod (2 pi)^first (2 (1-pi))^second`` is a
    test supermartingale in the pairs; their average is too. It is valid at any stopping time
    (no correction for looks) and e-values combine by averaging or e-BH under any dependence.
    """
    total = 0.0
    for pi in E_ALTERNATIVES:
        exponent = first_only * math.log(2 * pi) + second_only * math.log(2 * (1 - pi))
        total += math.exp(min(exponent, 690.0))  # capped: finite, and far beyond any threshold
    return total / len(E_ALTERNATIVES)


def e_bh(e_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """e-BH (Wang & Ramdas): reject the ``k`` largest e-values, ``k`` the largest with
    ``e_(k) >= m / (alpha k)``. Controls the false discovery rate at ``alpha`` under any
    dependence between the e-values."""
    m = len(e_values)
    order = sorted(range(m), key=lambda i: -e_values[i])
    cutoff = 0
    for rank, i in enumerate(order, start=1):
        if e_values[i] >= m / (alpha * rank):
            cutoff = rank
    rejected = [False] * m
    for rank, i in enumerate(order, start=1):
        rejected[i] = rank <= cutoff
    return rejected
