"""Across runs: which step is *systematically* to blame, not just in one failure."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..capture.run import Verifier
from ..errors import SuccessfulRunError
from ..model import Trajectory
from .api import attribute
from .result import AttributionResult
from .stats import Interval, clopper_pearson

__all__ = ["AggregateResult", "StepAggregate", "aggregate_runs"]


@dataclass(frozen=True)
class StepAggregate:
    """One step name (``kind:name``, the stable identity of an operation) across runs."""

    label: str
    runs: int
    culprit_count: int
    culprit_share: Interval
    mean_effect: float | None
    effect_interval: Interval | None
    poc_count: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "runs": self.runs,
            "culprit_count": self.culprit_count,
            "culprit_share": self.culprit_share.to_dict(),
            "mean_effect": self.mean_effect,
            "effect_interval": None
            if self.effect_interval is None
            else self.effect_interval.to_dict(),
            "poc_count": self.poc_count,
        }


@dataclass(frozen=True)
class AggregateResult:
    """``systematic_culprit`` is the step name most often the culprit, when that share's
    interval lies above every other name's; ``steps`` is sorted by culprit count."""

    runs: int
    failing_runs: int
    systematic_culprit: str | None
    steps: tuple[StepAggregate, ...]
    results: tuple[AttributionResult, ...]
    skipped: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "failing_runs": self.failing_runs,
            "systematic_culprit": self.systematic_culprit,
            "steps": [s.to_dict() for s in self.steps],
            "skipped": list(self.skipped),
        }

    def to_text(self) -> str:
        lines = [
            f"Aggregate attribution: {self.failing_runs} failing runs of {self.runs}",
            f"  Systematic weak step: {self.systematic_culprit or 'none stands out'}",
            f"  {'step':<32} {'culprit':>9} {'share [95% CI]':>20} {'mean effect':>12} {'poc':>5}",
        ]
        for s in self.steps:
            effect = "-" if s.mean_effect is None else f"{s.mean_effect:+.2f}"
            lines.append(
                f"  {s.label:<32} {s.culprit_count:>4}/{s.runs:<4} "
                f"{s.culprit_count / max(1, s.runs):>5.0%} [{s.culprit_share.low:.2f},"
                f" {s.culprit_share.high:.2f}] {effect:>12} {s.poc_count:>5}"
            )
        return "\n".join(lines)


def mean_interval(values: Sequence[float], confidence: float) -> Interval:
    """Normal-approximation interval for the mean of ``values`` (two or more)."""
    mean = statistics.fmean(values)
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean - half, mean + half, confidence, "normal over runs")


def aggregate_runs(
    trajectories: Sequence[Trajectory],
    agent: Callable[..., Any] | None,
    verifier: Verifier,
    *,
    confidence: float = 0.95,
    agent_for: Callable[[Trajectory], Callable[..., Any]] | None = None,
    **attribute_options: Any,
) -> AggregateResult:
    """Attribute every failing run and pool the verdicts by step name.

    ``agent_for(trajectory)`` supplies a per-run agent (imported traces: a replay agent each);
    otherwise ``agent`` is used for all. Passing runs are skipped (listed in ``skipped``).
    """
    results, skipped = [], []
    for trajectory in trajectories:
        run_agent = agent_for(trajectory) if agent_for is not None else agent
        try:
            results.append(
                attribute(
                    trajectory, run_agent, verifier, confidence=confidence, **attribute_options
                )
            )
        except SuccessfulRunError:
            skipped.append(trajectory.session_id)
    seen: Counter[str] = Counter()
    culprits: Counter[str] = Counter()
    pocs: Counter[str] = Counter()
    effects: dict[str, list[float]] = defaultdict(list)
    for result in results:
        labels = {step.label for step in result.steps}
        seen.update(labels)
        if result.culprit is not None:
            culprits[result.culprit.label] += 1
        if result.poc_index is not None:
            pocs[result.steps[result.poc_index].label] += 1
        for step in result.steps:
            if step.effect is not None:
                effects[step.label].append(step.effect)
    rows = []
    for label, runs in seen.items():
        values = effects.get(label, [])
        mean = statistics.fmean(values) if values else None
        interval = mean_interval(values, confidence) if len(values) >= 2 else None
        rows.append(
            StepAggregate(
                label,
                runs,
                culprits[label],
                clopper_pearson(culprits[label], len(results), confidence),
                mean,
                interval,
                pocs[label],
            )
        )
    rows.sort(key=lambda r: (-r.culprit_count, -(r.mean_effect or 0.0), r.label))
    systematic = None
    if rows and rows[0].culprit_count:
        top = rows[0]
        if all(top.culprit_share.low > other.culprit_share.high for other in rows[1:]) or (
            len([r for r in rows if r.culprit_count]) == 1 and top.culprit_count >= 2
        ):
            systematic = top.label
    return AggregateResult(
        len(trajectories), len(results), systematic, tuple(rows), tuple(results), tuple(skipped)
    )
