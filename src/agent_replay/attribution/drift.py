"""Drift: how open a run's fate still is at each step (the entropy-of-autonomy curve).

``F(p)`` is measured at every prefix position; the entropy ``H(p)`` of a Bernoulli(``F(p)``)
outcome is how undecided the run still is after ``p`` held steps (1 bit: a coin flip, 0: the
outcome is sealed). The commitment index is the step after which the entropy stays below
``sealed_bits``: where the run's fate sealed; when it is below at every position, even with
no step held, the fate was sealed from the start (``sealed_from_start``: no re-draw changes
the outcome). The factual replays (every step held) are checked against the recording, as
attribution checks them: a replay that does not reproduce the recorded outcome is warned of,
since every F(p) is then measured on another run. An optional ``state_scorer(step) -> [0, 1]``
adds a health curve; *silent decay* is health falling (by ``decay`` or more from its best)
while the outcome is still open - trouble building before the outcome shows it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..capture.run import Verifier
from ..errors import VerifierError
from ..model import Step, Trajectory
from ..replay.limits import RolloutLimits
from ..replay.plan import ReplayPlan
from ..rollouts.engine import RolloutCache, RolloutEngine
from .stats import Interval, clopper_pearson

__all__ = ["DriftResult", "drift", "entropy_bits"]


def entropy_bits(p: float) -> float:
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


@dataclass(frozen=True)
class DriftResult:
    session_id: str
    failure_rates: tuple[float, ...]  # F(p) for p = 0..n
    intervals: tuple[Interval, ...]
    entropy: tuple[float, ...]
    commitment_index: int | None
    health: tuple[float, ...] | None
    silent_decay: bool
    decay_step: int | None
    rollouts: int
    live_steps: int
    stopped: int = 0  # rollouts stopped by their limits (counted as failures)
    sealed_from_start: bool = False  # settled at every position: no re-draw changes it
    warnings: tuple[str, ...] = ()  # the factual replays did not reproduce the recording

    @property
    def fate(self) -> str:
        """In words: where the run's fate sealed."""
        if self.sealed_from_start:
            failing = self.failure_rates[0] >= 0.5
            outcome, every = ("fail", "fails") if failing else ("pass", "passes")
            rates = [r if failing else 1 - r for r in self.failure_rates]
            if min(rates) == 1.0:
                return (
                    f"before the first step (every rollout {every}, whichever steps are "
                    "re-drawn: the outcome does not depend on any step's draw)"
                )
            return (
                f"before the first step (rollouts {outcome} at least {min(rates):.0%} of the "
                "time at every position: re-drawing steps seldom changes the outcome)"
            )
        if self.commitment_index is None:
            return "never (the outcome stays open)"
        return f"after step {self.commitment_index}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "failure_rates": list(self.failure_rates),
            "intervals": [i.to_dict() for i in self.intervals],
            "entropy": list(self.entropy),
            "commitment_index": self.commitment_index,
            "health": None if self.health is None else list(self.health),
            "silent_decay": self.silent_decay,
            "decay_step": self.decay_step,
            "rollouts": self.rollouts,
            "live_steps": self.live_steps,
            "stopped": self.stopped,
            "sealed_from_start": self.sealed_from_start,
            "fate": self.fate,
            "warnings": list(self.warnings),
        }

    def to_svg(self, width: int = 640, height: int = 220) -> str:
        """The entropy curve (and health, when scored) as a standalone inline SVG."""
        pad = 30
        n = max(1, len(self.entropy) - 1)

        def x(i: float) -> float:
            return pad + (width - 2 * pad) * i / n

        def y(v: float) -> float:
            return height - pad - (height - 2 * pad) * v

        def path(values: tuple[float, ...]) -> str:
            return " ".join(
                f"{'M' if i == 0 else 'L'}{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values)
            )

        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="entropy of the '
            f'outcome by prefix position">',
            f'<line x1="{pad}" y1="{y(0)}" x2="{width - pad}" y2="{y(0)}" stroke="#999"/>',
            f'<path d="{path(self.entropy)}" fill="none" stroke="#1f6feb" stroke-width="2"/>',
        ]
        if self.health is not None:
            parts.append(
                f'<path d="{path(self.health)}" fill="none" stroke="#2da44e" '
                f'stroke-dasharray="4 3" stroke-width="2"/>'
            )
        if self.commitment_index is not None:
            cx = x(self.commitment_index + 1)
            parts.append(
                f'<line x1="{cx:.1f}" y1="{pad}" x2="{cx:.1f}" y2="{y(0)}" '
                f'stroke="#cf222e" stroke-dasharray="3 3"/>'
            )
            parts.append(
                f'<text x="{cx + 4:.1f}" y="{pad + 12}" font-size="11" fill="#cf222e">'
                f"sealed after step {self.commitment_index}</text>"
            )
        parts.append(
            f'<text x="{pad}" y="{pad - 10}" font-size="11">entropy (bits) of the '
            f"outcome with steps before p held; {html.escape(self.session_id)}</text>"
        )
        parts.append("</svg>")
        return "".join(parts)

    def render_html(self) -> str:
        """The drift curve as a standalone HTML page."""
        return (
            f"<!doctype html><meta charset='utf-8'><title>drift "
            f"{html.escape(self.session_id)}</title><body style='font-family:sans-serif'>"
            f"<h1>Drift of {html.escape(self.session_id)}</h1>{self.to_svg()}"
            f"<p>Fate sealed: {html.escape(self.fate)}; silent decay: "
            f"{'yes, from step ' + str(self.decay_step) if self.silent_decay else 'no'}</p>"
            + "".join(f"<p><strong>Warning:</strong> {html.escape(w)}</p>" for w in self.warnings)
            + "</body>"
        )

    def to_html(self, path: str) -> str:
        """Write :meth:`render_html` to ``path``; returns the path."""
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(self.render_html())
        return path


def drift(
    trajectory: Trajectory,
    agent: Callable[..., Any],
    verifier: Verifier,
    rollouts: int = 50,
    *,
    state_scorer: Callable[[Step], float] | None = None,
    cache: RolloutCache | None = None,
    sealed_bits: float = 0.47,
    decay: float = 0.3,
    confidence: float = 0.95,
    pass_context: bool = True,
    limits: RolloutLimits | None = None,
) -> DriftResult:
    """Measure ``F(p)`` at every position (``rollouts`` each) and derive the entropy curve.
    ``limits`` bounds each rollout (see :class:`~agent_replay.rollouts.RolloutEngine`)."""
    if rollouts < 1:
        raise ValueError(f"rollouts must be at least 1; got {rollouts}")
    engine = RolloutEngine(
        trajectory, agent, verifier, cache=cache, pass_context=pass_context, limits=limits
    )
    n = len(trajectory.steps)
    rates, intervals = [], []
    for position in range(n, -1, -1):  # the factual replays first: they are checked
        results = engine.run(ReplayPlan.ablate_from(position), range(rollouts))
        failures = sum(r.failed for r in results)
        rates.append(failures / rollouts)
        intervals.append(clopper_pearson(failures, rollouts, confidence))
        if position == n:
            warnings = fidelity_warnings(trajectory, results)
    rates.reverse()
    intervals.reverse()
    entropy = tuple(entropy_bits(p) for p in rates)
    # the last position whose outcome is still open; the step there sealed it (none when the
    # outcome is open even with every step held, or sealed from the start)
    last_open = next((p for p in range(n, -1, -1) if entropy[p] > sealed_bits), None)
    commitment = last_open if last_open is not None and last_open < n else None
    health = None
    silent, decay_step = False, None
    if state_scorer is not None:
        scores = [_health(state_scorer, step) for step in trajectory.steps]
        health = tuple([scores[0] if scores else 1.0, *scores])
        best = -math.inf
        for index, score in enumerate(scores):
            best = max(best, score)
            open_fate = entropy[index + 1] > sealed_bits
            if best - score >= decay and open_fate:
                silent, decay_step = True, index
                break
    return DriftResult(
        trajectory.session_id,
        tuple(rates),
        tuple(intervals),
        entropy,
        commitment,
        health,
        silent,
        decay_step,
        engine.cost.rollouts,
        engine.cost.live_steps,
        engine.cost.stopped,
        sealed_from_start=last_open is None,
        warnings=warnings,
    )


def fidelity_warnings(trajectory: Trajectory, factual: list[Any]) -> tuple[str, ...]:
    """What is wrong with the factual replays (every step held), which should give the
    recorded outcome every time."""
    warnings = []
    recorded = trajectory.failed
    if recorded is not None:
        reproduced = sum(r.failed == recorded for r in factual) / len(factual)
        if reproduced < 1.0:
            outcome = "failure" if recorded else "success"
            warnings.append(
                f"factual replays reproduce the recorded {outcome} only {reproduced:.0%} of "
                f"the time ({len(factual)} replays): the replay does not reproduce the run "
                "(a non-deterministic verifier, tool or agent code?), so F(p) is measured "
                "on another run"
            )
    diverged = sum(r.diverged for r in factual)
    if diverged:
        warnings.append(f"{diverged} of {len(factual)} factual replays diverged from the recording")
    return tuple(warnings)


def _health(state_scorer: Callable[[Step], float], step: Step) -> float:
    """The state scorer's health of ``step``; a :class:`VerifierError` naming the step when
    it raises or gives something that is not a number in [0, 1]."""
    try:
        score = float(state_scorer(step))
    except Exception as exc:
        raise VerifierError(
            f"the state scorer failed on step {step.index} ({step.label}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not 0.0 <= score <= 1.0:
        raise VerifierError(
            f"the state scorer gave {score!r} for step {step.index} ({step.label}); "
            "expected a health in [0, 1]"
        )
    return score
