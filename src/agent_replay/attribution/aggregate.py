"""Across runs: which step is *systematically* to blame, not just in one failure."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..capture.run import Verifier
from ..capture.seeds import derive_seed
from ..errors import SuccessfulRunError, UnfaithfulReplayError
from ..model import Trajectory
from ..replay.replayer import stream_key
from ..report._data import visible
from .api import attribute
from .result import AttributionResult
from .stats import Interval, clopper_pearson, mcnemar_p, student_t_quantile

__all__ = ["AggregateResult", "StepAggregate", "aggregate_runs"]


@dataclass(frozen=True)
class StepAggregate:
    """One step name (``kind:name``, the stable identity of an operation) across runs.

    ``mean_effect`` and ``effect_interval`` are over the ``measured_runs`` only: the runs whose
    search measured this step on its own (the adaptive search isolates the steps that matter
    there, mostly where it is the culprit, so this is not its mean effect over all the runs;
    in the others it sat in a segment measured as a whole). A run where the name was measured
    at several steps gives one value, the mean of their effects."""

    label: str
    runs: int
    culprit_count: int
    culprit_share: Interval
    mean_effect: float | None
    effect_interval: Interval | None
    poc_count: int
    measured_runs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "runs": self.runs,
            "culprit_count": self.culprit_count,
            "culprit_share": self.culprit_share.to_dict(),
            "mean_effect": self.mean_effect,
            "measured_runs": self.measured_runs,
            "effect_interval": None
            if self.effect_interval is None
            else self.effect_interval.to_dict(),
            "poc_count": self.poc_count,
        }


@dataclass(frozen=True)
class AggregateResult:
    """``systematic_culprit`` is the step name most often the culprit, when it is so
    significantly more often than the runner-up (exact sign test over the runs whose culprit
    is one of the two, two-sided since the name is chosen for having the larger count, at
    ``1 - confidence``); ``steps`` is sorted by culprit
    count. A step's ``culprit_share`` is of the failing runs attributed (the runs it appears
    in are its ``runs``)."""

    runs: int
    failing_runs: int
    systematic_culprit: str | None
    steps: tuple[StepAggregate, ...]
    results: tuple[AttributionResult, ...]
    skipped: tuple[str, ...]
    #: session id → why it could not be attributed (its replays left the recording: a run
    #: of another version of the agent); left out, as passing runs are
    unreplayable: dict[str, str] = field(default_factory=dict)

    @property
    def stopped_rollouts(self) -> int:
        """Rollouts of all the runs stopped by their limits (counted as failures)."""
        return sum(int(r.cost.get("stopped", 0)) for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "failing_runs": self.failing_runs,
            "systematic_culprit": self.systematic_culprit,
            "steps": [s.to_dict() for s in self.steps],
            "skipped": list(self.skipped),
            "unreplayable": dict(self.unreplayable),
            "stopped_rollouts": self.stopped_rollouts,
        }

    def to_text(self) -> str:
        lines = [
            f"Aggregate attribution: {self.failing_runs} failing runs"
            + (
                f" ({len(self.skipped)} of the {self.runs} given passed and were skipped)"
                if self.skipped
                else ""
            ),
            f"  Systematic weak step: {self.systematic_culprit or 'none stands out'}",
            f"  {'step':<32} {'culprit':>9} {'share of failing runs [CI]':>26} "
            f"{'in runs':>8} {'mean effect where measured':>27} {'poc':>5}",
        ]
        failing = max(1, len(self.results))
        for s in self.steps:
            effect = (
                "-"
                if s.mean_effect is None
                else f"{s.mean_effect:+.2f} (in {s.measured_runs} run"
                + ("s)" if s.measured_runs != 1 else ")")
            )
            lines.append(
                f"  {s.label:<32} {s.culprit_count:>4}/{failing:<4} "
                f"{s.culprit_count / failing:>11.0%} [{s.culprit_share.low:.2f},"
                f" {s.culprit_share.high:.2f}] {s.runs:>8} {effect:>27} {s.poc_count:>5}"
            )
        lines.append(
            "  (a step's effect is measured alone only in the runs where the search isolated "
            "it, mostly where it mattered: the mean is over those runs, not all)"
        )
        for session, why in self.unreplayable.items():
            lines.append(f"  left out {session}: {why}")
        if self.stopped_rollouts:
            lines.append(
                f"  ({self.stopped_rollouts} rollouts ran into their limits and were stopped; "
                "they count as failures: see each run's warnings)"
            )
        return visible("\n".join(lines))  # step names are recorded text


def mean_interval(values: Sequence[float], confidence: float) -> Interval:
    """Student-t interval for the mean of ``values`` (two or more runs; the normal quantile
    covered 179 of 200 times at 95% over 10 runs, ``benchmarks/aggregate_coverage.py``)."""
    mean = statistics.fmean(values)
    t = student_t_quantile(confidence, len(values) - 1)
    half = t * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean - half, mean + half, confidence, "student t over runs")


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
    otherwise ``agent`` is used for all. Passing runs are skipped (listed in ``skipped``), and
    runs the agent does not replay (every factual replay leaves the recording: a run of
    another version of the agent) are left out with the reason (``unreplayable``).

    Runs are pooled as independent: a run whose recorded steps are the same as an earlier
    run's (a deterministic agent failing the same way twice) would draw the same random
    streams as that run (see :func:`attribute`'s ``seed``), so each such repeat is attributed
    under a ``seed`` of its own.
    """
    if agent is None and agent_for is None:
        raise TypeError("aggregate_runs needs an agent, or agent_for(trajectory) giving one")
    base_seed = attribute_options.pop("seed", 0)
    repeats: Counter[str] = Counter()
    results, skipped = [], []
    unreplayable: dict[str, str] = {}
    for trajectory in trajectories:
        run_agent = agent_for(trajectory) if agent_for is not None else agent
        key = stream_key(trajectory)
        seed = base_seed if not repeats[key] else derive_seed(base_seed, "repeat", repeats[key])
        repeats[key] += 1
        try:
            results.append(
                attribute(
                    trajectory,
                    run_agent,
                    verifier,
                    confidence=confidence,
                    seed=seed,
                    **attribute_options,
                )
            )
        except SuccessfulRunError:
            skipped.append(trajectory.session_id)
        except UnfaithfulReplayError as exc:  # another agent's run: the rest still count
            unreplayable[trajectory.session_id] = str(exc)
    seen: Counter[str] = Counter()
    culprits: Counter[str] = Counter()
    pocs: Counter[str] = Counter()
    effects: dict[str, list[float]] = defaultdict(list)
    bounds: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for result in results:
        labels = {step.label for step in result.steps}
        seen.update(labels)
        if result.culprit is not None:
            culprits[result.culprit.label] += 1
        if result.poc_index is not None:
            pocs[result.steps[result.poc_index].label] += 1
        # one value per run: a name measured at several steps of a run counts once, with the
        # mean of its steps' effects (the interval below is over runs, which are independent;
        # the steps of one run are not)
        measured: dict[str, list[float]] = defaultdict(list)
        measured_bounds: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for step in result.steps:
            if step.effect is not None:
                measured[step.label].append(step.effect)
                if step.interval is not None:
                    measured_bounds[step.label].append((step.interval.low, step.interval.high))
        for label, values in measured.items():
            effects[label].append(statistics.fmean(values))
        for label, pairs in measured_bounds.items():
            lows, highs = zip(*pairs, strict=True)
            bounds[label].append((statistics.fmean(lows), statistics.fmean(highs)))
    rows = []
    for label, runs in seen.items():
        values = effects.get(label, [])
        mean = statistics.fmean(values) if values else None
        interval = mean_interval(values, confidence) if len(values) >= 2 else None
        if interval is not None and interval.high - interval.low < 1e-12 and bounds.get(label):
            # no spread between the runs' estimates (exact zeros of a step the agent ignores)
            # says little about their mean: keep the runs' own uncertainty instead
            lows, highs = zip(*bounds[label], strict=True)
            interval = Interval(
                statistics.fmean(lows),
                statistics.fmean(highs),
                confidence,
                "mean of the runs' intervals (no spread between runs)",
            )
        rows.append(
            StepAggregate(
                label,
                runs,
                culprits[label],
                clopper_pearson(culprits[label], len(results), confidence),
                mean,
                interval,
                pocs[label],
                len(values),
            )
        )
    rows.sort(key=lambda r: (-r.culprit_count, -(r.mean_effect or 0.0), r.label))
    systematic = None
    if rows and rows[0].culprit_count:
        runner_up = rows[1].culprit_count if len(rows) > 1 else 0
        # two-sided: the name tested is the one that came out ahead
        if 2 * mcnemar_p(rows[0].culprit_count, runner_up) < 1.0 - confidence:
            systematic = rows[0].label
    return AggregateResult(
        len(trajectories),
        len(results),
        systematic,
        tuple(rows),
        tuple(results),
        tuple(skipped),
        unreplayable,
    )
