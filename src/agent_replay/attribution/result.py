"""What an attribution returns: frozen, documented, JSON-able.

The profile is the prefix failure curve ``F`` (at the positions that were evaluated) and the
step effects ``e_i = F(i+1) - F(i)``; steps the adaptive search did not isolate carry the
effect of the segment they sit in. ``culprit_index`` is the step with the largest effect when
the evidence supports one (``verdict`` says how strongly), else ``None``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import canonical
from .stats import Interval

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext, TracerProvider

    from ..model import Trajectory
    from ..report.explain import Explanation

__all__ = [
    "LIKELY",
    "NOTHING",
    "REPORT_SCHEMA_VERSION",
    "SEPARATED",
    "UNDECIDED",
    "AgentShapley",
    "AttributionResult",
    "CurvePoint",
    "Fidelity",
    "Repair",
    "ShapleyResult",
    "StepEffect",
]

REPORT_SCHEMA_VERSION = "1.0"

# verdicts
SEPARATED = "separated"  # culprit's effect exceeds every other step's, simultaneously
LIKELY = "likely"  # culprit's effect is significantly positive, not yet separated
UNDECIDED = "undecided"  # no step's effect is significantly positive
NOTHING = "nothing to attribute"  # no step can be re-drawn


def _interval(value: Interval | None) -> dict[str, Any] | None:
    return None if value is None else value.to_dict()


@dataclass(frozen=True)
class CurvePoint:
    """``F(position)``: failure rate when steps before ``position`` are held."""

    position: int
    failure_rate: float
    interval: Interval
    rollouts: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "failure_rate": self.failure_rate,
            "interval": _interval(self.interval),
            "rollouts": self.rollouts,
        }


@dataclass(frozen=True)
class StepEffect:
    """One step's place in the verdict.

    ``effect`` is ``e_i`` when the step was isolated (``segment == (i, i + 1)``); otherwise it
    is ``None`` and ``segment_effect`` is the estimated total effect of the steps in
    ``segment``. ``p_value`` is the one-sided exact McNemar p-value for ``e_i > 0``
    (adjusted for the adaptive looks) and ``e_value`` the anytime-valid e-value for it;
    ``decisive`` says whether it survives the false discovery control (e-BH).
    ``observation_only`` steps have no policy that can act there; they are
    never scored (their effect is ``None``, not zero).
    """

    index: int
    kind: str
    name: str
    agent: str | None
    effect: float | None
    interval: Interval | None
    p_value: float | None
    decisive: bool
    segment: tuple[int, int]
    segment_effect: float | None
    segment_interval: Interval | None
    observation_only: bool
    side_effects: bool
    action: Any = None
    e_value: float | None = None

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def isolated(self) -> bool:
        return self.segment == (self.index, self.index + 1)

    # seed-compatible names
    @property
    def score(self) -> float | None:
        return self.effect

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "name": self.name,
            "agent": self.agent,
            "effect": self.effect,
            "interval": _interval(self.interval),
            "p_value": self.p_value,
            "decisive": self.decisive,
            "segment": list(self.segment),
            "segment_effect": self.segment_effect,
            "segment_interval": _interval(self.segment_interval),
            "observation_only": self.observation_only,
            "side_effects": self.side_effects,
            "action": canonical.plain_json(self.action),
            "e_value": self.e_value,
        }


@dataclass(frozen=True)
class Fidelity:
    """How well factual replays (everything held) reproduce the recorded failure."""

    replays: int
    failure_rate: float
    interval: Interval
    diverged: int
    reproduces: bool
    warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "replays": self.replays,
            "failure_rate": self.failure_rate,
            "interval": _interval(self.interval),
            "diverged": self.diverged,
            "reproduces": self.reproduces,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class ShapleyResult:
    """Shapley values of players (steps or agents) for the failure probability.

    ``v_all - v_none`` is what the values must sum to (efficiency); ``efficiency_gap`` is
    the observed difference, which is zero by construction for permutation estimates with
    paired chains and within sampling error for exact enumeration.
    """

    players: tuple[str, ...]
    values: tuple[float, ...]
    intervals: tuple[Interval, ...]
    method: str
    evaluations: int
    v_all: float
    v_none: float
    efficiency_gap: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "players": list(self.players),
            "values": list(self.values),
            "intervals": [i.to_dict() for i in self.intervals],
            "method": self.method,
            "evaluations": self.evaluations,
            "v_all": self.v_all,
            "v_none": self.v_none,
            "efficiency_gap": self.efficiency_gap,
        }

    def top(self) -> str | None:
        if not self.values:
            return None
        return self.players[max(range(len(self.values)), key=lambda i: self.values[i])]


AgentShapley = ShapleyResult


@dataclass(frozen=True)
class Repair:
    """A replacement action for ``step`` validated by rollouts.

    ``failure_rate`` is measured with the replacement forced, on rollout seeds neither the
    harvest nor the choice among candidates used (``interval`` at the result's confidence);
    ``valid`` when, on the choice's seeds, its upper bound was below ``threshold`` and it
    failed less than the recorded action; ``minimality`` in
    [0, 1] is how close the replacement is to the original (1 = tiny edit).
    """

    step: int
    label: str
    original: Any
    replacement: Any
    failure_rate: float
    interval: Interval
    valid: bool
    minimality: float
    threshold: float
    rollouts: int
    candidates_tried: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "label": self.label,
            "original": canonical.plain_json(self.original),
            "replacement": canonical.plain_json(self.replacement),
            "failure_rate": self.failure_rate,
            "interval": _interval(self.interval),
            "valid": self.valid,
            "minimality": self.minimality,
            "threshold": self.threshold,
            "rollouts": self.rollouts,
            "candidates_tried": self.candidates_tried,
            "source": self.source,
        }

    def to_guard(self) -> str:
        """A deploy-time guard: Python that replaces the failing action by the repair.

        Nothing of the step's name or values reaches the code but as escaped literals (an
        imported span's name is data, not code). Actions that are plain JSON are compared
        and served as JSON values; any other action (a tuple, a set, a date, a dict with
        int keys) by its canonical encoding, as stored, so the guard serves the replacement
        with its own types (it then imports ``agent_replay.canonical``)."""
        plain = _is_plain_json(self.original), _is_plain_json(self.replacement)
        lines = [
            f"# agent-replay repair for step {self.step} {json.dumps(self.label)}: validated "
            f"failure rate {self.failure_rate:.2f} over {self.rollouts} rollouts",
            "import json" if all(plain) else "import json\n\nfrom agent_replay import canonical",
            "",
        ]
        if plain[0]:
            lines.append(f"_ORIGINAL = json.loads({json.dumps(self.original)!r})")
            compared = "action == _ORIGINAL"
        else:
            lines += [
                f"_ORIGINAL = {canonical.encode(self.original)!r}",
                "",
                "",
                "def _encoded(value):",
                "    try:",
                "        return canonical.encode(value)",
                "    except Exception:  # not a value a step can hold: not the failing action",
                "        return None",
                "",
                "",
            ]
            compared = "_encoded(action) == _ORIGINAL"
        if plain[1]:
            lines.append(f"_REPLACEMENT = json.loads({json.dumps(self.replacement)!r})")
        else:
            lines.append(f"_REPLACEMENT = canonical.decode({canonical.encode(self.replacement)!r})")
        return "\n".join(
            [
                *lines,
                "",
                "",
                f"def guard_{_identifier(self.label)}(action):",
                '    """Return the validated repair when the step produces the failing action."""',
                f"    return _REPLACEMENT if {compared} else action",
                "",
            ]
        )


@dataclass(frozen=True)
class AttributionResult:
    """The verdict of one attribution, with everything needed to trust or question it.

    ``mode`` is ``"failure"`` (which step made the run fail) or ``"credit"`` (which step
    secured success; effects then measure success probability). ``stop_reason`` says why the
    adaptive search stopped: ``separated``, ``budget``, ``max_rollouts``, ``no effect`` (the
    candidate's upper bound is at most ``min_effect``), ``complete`` (the non-adaptive full
    profile) or ``nothing to attribute``.
    """

    session_id: str
    n_steps: int
    mode: str
    method: str
    confidence: float
    culprit_index: int | None
    culprit_agent: str | None
    verdict: str
    stop_reason: str
    steps: tuple[StepEffect, ...]
    curve: tuple[CurvePoint, ...]
    decisive: tuple[int, ...]
    fdr: Mapping[str, Any]
    poc_index: int | None
    fidelity: Fidelity
    divergence_rate: float
    exceptions: Mapping[str, int]
    cost: Mapping[str, Any]
    shapley: ShapleyResult | None = None
    agent_shapley: ShapleyResult | None = None
    repair: Repair | None = None
    warnings: tuple[str, ...] = ()
    trace_id: str | None = None
    culprit_span_id: str | None = None
    rollout_records: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)

    @property
    def culprit(self) -> StepEffect | None:
        return None if self.culprit_index is None else self.steps[self.culprit_index]

    @property
    def decided(self) -> bool:
        return self.culprit_index is not None

    def to_dict(self, *, include_rollouts: bool = False) -> dict[str, Any]:
        data = {
            "schema_version": REPORT_SCHEMA_VERSION,
            "session_id": self.session_id,
            "n_steps": self.n_steps,
            "mode": self.mode,
            "method": self.method,
            "confidence": self.confidence,
            "culprit_index": self.culprit_index,
            "culprit_agent": self.culprit_agent,
            "culprit_label": None if self.culprit is None else self.culprit.label,
            "verdict": self.verdict,
            "stop_reason": self.stop_reason,
            "steps": [s.to_dict() for s in self.steps],
            "curve": [p.to_dict() for p in self.curve],
            "decisive": list(self.decisive),
            "fdr": dict(self.fdr),
            "poc_index": self.poc_index,
            "fidelity": self.fidelity.to_dict(),
            "divergence_rate": self.divergence_rate,
            "exceptions": dict(self.exceptions),
            "cost": dict(self.cost),
            "shapley": None if self.shapley is None else self.shapley.to_dict(),
            "agent_shapley": None if self.agent_shapley is None else self.agent_shapley.to_dict(),
            "repair": None if self.repair is None else self.repair.to_dict(),
            "warnings": list(self.warnings),
            "trace_id": self.trace_id,
            "culprit_span_id": self.culprit_span_id,
        }
        if include_rollouts:
            data["rollouts"] = [dict(r) for r in self.rollout_records]
        return data

    def to_json(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        include_rollouts: bool = False,
        **extra: Any,
    ) -> str:
        """The report as JSON; written to ``path`` when given. Returns the text."""
        data = self.to_dict(include_rollouts=include_rollouts)
        for key, value in extra.items():
            if value is not None:
                data[key] = value.to_dict() if hasattr(value, "to_dict") else value
        text = json.dumps(canonical.plain_json(data), indent=2, ensure_ascii=False)
        if path is not None:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        return text

    def explain(self, trajectory: Trajectory | Mapping[str, Any] | None = None) -> Explanation:
        """What / where / why / fix and the causal trace (:func:`agent_replay.report.explain`)."""
        from ..report.explain import explain

        return explain(self, trajectory)

    def to_text(self, trajectory: Trajectory | Mapping[str, Any] | None = None) -> str:
        """The CLI's text summary (:func:`agent_replay.report.render_text`)."""
        from ..report.text import render_text

        return render_text(self, trajectory)

    def to_html(
        self,
        path: str | os.PathLike[str] | None = None,
        trajectory: Trajectory | Mapping[str, Any] | None = None,
        explanation: Explanation | None = None,
    ) -> str:
        """The standalone HTML report, written to ``path`` when given. Returns the HTML."""
        from ..report.html import render_html, write_html

        if path is None:
            return render_html(self, trajectory, explanation)
        write_html(path, self, trajectory, explanation)
        return Path(path).read_text(encoding="utf-8")

    def to_otel(
        self,
        tracer_provider: TracerProvider | None = None,
        trajectory: Trajectory | Mapping[str, Any] | None = None,
        explanation: Explanation | None = None,
    ) -> SpanContext:
        """Emit the verdict as OTel spans linked to the original trace (:mod:`..report.otel`);
        with ``explanation`` (:meth:`explain`) its where / why / fix go on the root span."""
        from ..report.otel import to_otel

        return to_otel(self, tracer_provider, trajectory, explanation)

    def summary(self) -> str:
        """A few lines for logs (the full text report lives in agent_replay.report)."""
        if self.culprit is None:
            head = f"undecided ({self.stop_reason})"
        else:
            c = self.culprit
            if c.effect is not None and c.interval is not None:
                effect = f"effect {c.effect:+.2f} [{c.interval.low:+.2f}, {c.interval.high:+.2f}]"
            elif c.segment_effect is not None:  # named by another rule, not isolated
                first, end = c.segment
                effect = f"steps {first}-{end - 1} together {c.segment_effect:+.2f}"
            else:
                effect = "effect not estimated"
            head = (
                f"step {c.index} ({c.label}"
                + (f", agent {c.agent}" if c.agent else "")
                + f") {effect} - {self.verdict}"
            )
        return (
            f"{self.session_id}: {head}; {self.cost.get('rollouts', 0)} rollouts, "
            f"{self.cost.get('live_steps', 0)} live step executions"
        )


def _is_plain_json(value: Any) -> bool:
    """Whether ``value`` comes back equal from JSON (no tuples, sets, non-string keys...)."""
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


def _identifier(text: str) -> str:
    return "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in text).strip("_") or "step"
