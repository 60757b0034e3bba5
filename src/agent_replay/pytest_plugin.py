"""The pytest gate: fail a test when an agent fails too often, and say which step to fix.

Registered through the ``pytest11`` entry point, so with agent-replay installed every test
session has :func:`assert_agent_passes` importable and the ``agent_replay_gate`` fixture (the
same function, writing its HTML report under the test's ``tmp_path`` unless told otherwise).
Disable with ``pytest -p no:agent_replay``.

The gate runs the agent ``rollouts`` times live (``record`` with seeds ``seed .. seed +
rollouts - 1``), takes the one-sided Clopper-Pearson upper bound of the failure rate at
``confidence``, and fails when it exceeds ``p_fail_max``. On failure it attributes the first
failing run (culprit, why, fix in the message) and writes the HTML report to ``report_path``.
Runs on the calling thread; raises :class:`AgentGateFailure` (an ``AssertionError``).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

__all__ = ["AgentGateFailure", "GateResult", "assert_agent_passes", "minimum_rollouts"]


class AgentGateFailure(AssertionError):
    """The agent's failure rate may exceed the budget; ``result`` holds the evidence."""

    def __init__(self, message: str, result: GateResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class GateResult:
    """What the gate measured (returned when it passes, attached to the failure otherwise)."""

    rollouts: int
    failures: int
    failure_rate: float
    upper_bound: float
    p_fail_max: float
    confidence: float
    failing_seeds: tuple[int, ...] = ()
    attribution: Any = field(default=None, repr=False)
    explanation: Any = field(default=None, repr=False)
    report_path: str | None = None

    @property
    def passed(self) -> bool:
        return self.upper_bound <= self.p_fail_max


def minimum_rollouts(p_fail_max: float, confidence: float = 0.95) -> int:
    """The fewest runs that can pass: with zero failures the upper bound is
    ``1 - (1 - confidence) ** (1 / n)``, which must not exceed ``p_fail_max``."""
    if not 0 < p_fail_max < 1:
        raise ValueError("p_fail_max must be in (0, 1)")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    return math.ceil(math.log(1 - confidence) / math.log(1 - p_fail_max) - 1e-9)


def assert_agent_passes(
    agent: Callable[..., Any],
    task: Any,
    verifier: Callable[[Any], float],
    rollouts: int | None = None,
    p_fail_max: float = 0.05,
    report_path: str | os.PathLike[str] | None = None,
    seed: int = 0,
    confidence: float = 0.95,
    *,
    attribute_rollouts: int = 200,
    repair: bool = True,
    pass_context: bool = True,
) -> GateResult:
    """Run ``agent`` ``rollouts`` times and fail unless its failure rate is provably at most
    ``p_fail_max`` (one-sided upper bound at ``confidence``).

    ``pass_context=False`` for an agent written without ``ctx`` (an SDK agent recorded by
    interception, as :func:`~agent_replay.instrument.record_agent` records it).

    ``rollouts=None`` uses :func:`minimum_rollouts` (59 for the defaults); fewer runs than that
    could never pass, so asking for fewer raises ``ValueError``.
    """
    __tracebackhide__ = True
    from .attribution import attribute
    from .attribution.stats import cp_upper
    from .capture.recorder import record

    needed = minimum_rollouts(p_fail_max, confidence)
    if rollouts is None:
        rollouts = needed
    if rollouts < needed:
        raise ValueError(
            f"with {rollouts} rollouts even zero failures leave a {confidence:.0%} upper bound of "
            f"{cp_upper(0, rollouts, 1 - confidence):.1%} > p_fail_max {p_fail_max:.1%}: this "
            f"gate could never pass; use rollouts >= {needed} (or raise p_fail_max)"
        )
    failing: list[int] = []
    first_failure = None
    for run_seed in range(seed, seed + rollouts):
        trajectory = record(
            agent, task, seed=run_seed, verifier=verifier, pass_context=pass_context
        )
        if trajectory.failed:
            failing.append(run_seed)
            if first_failure is None:
                first_failure = trajectory
    failures = len(failing)
    upper = cp_upper(failures, rollouts, 1 - confidence)
    result = GateResult(
        rollouts=rollouts,
        failures=failures,
        failure_rate=failures / rollouts,
        upper_bound=upper,
        p_fail_max=p_fail_max,
        confidence=confidence,
        failing_seeds=tuple(failing),
    )
    if result.passed:
        return result
    shown = ", ".join(map(str, failing[:10])) + (", ..." if len(failing) > 10 else "")
    lines = [
        f"agent-replay gate: {failures} of {rollouts} runs failed ({result.failure_rate:.1%}; "
        f"seeds {shown}); the failure rate's {confidence:.0%} upper bound {upper:.1%} exceeds "
        f"the budget {p_fail_max:.1%}"
    ]
    if result.failure_rate < p_fail_max:
        lines.append(
            f"the observed rate is within the budget but {rollouts} runs cannot show it (with "
            f"the fewest runs that can pass, {needed}, one failure fails the gate): pass "
            "rollouts= to run more (an agent failing 1% of the time against a 5% budget "
            "passes 300 runs 99.6% of the time, 59 runs 55%)"
        )
    attribution = explanation = None
    written = None
    if first_failure is not None:
        try:
            attribution = attribute(
                first_failure,
                agent,
                verifier,
                rollouts=attribute_rollouts,
                repair=repair,
                pass_context=pass_context,
            )
            explanation = attribution.explain(first_failure)
            lines.append(f"attribution of the failing run with seed {failing[0]}:")
            lines.append(explanation.to_text())
            if report_path is not None:
                Path(report_path).parent.mkdir(parents=True, exist_ok=True)
                attribution.to_html(report_path, first_failure, explanation)
                written = os.fspath(report_path)
                lines.append(f"HTML report: {written}")
        except Exception as exc:  # the gate's verdict stands even if attribution cannot run
            lines.append(f"(attribution of seed {failing[0]} failed: {type(exc).__name__}: {exc})")
    else:
        lines.append(f"no run failed, but {rollouts} runs are too few to certify the budget")
    result = replace(result, attribution=attribution, explanation=explanation, report_path=written)
    raise AgentGateFailure("\n".join(lines), result)


@pytest.fixture
def agent_replay_gate(tmp_path: Path) -> Callable[..., GateResult]:
    """:func:`assert_agent_passes` with ``report_path`` defaulting to the test's tmp dir."""
    return functools.partial(assert_agent_passes, report_path=tmp_path / "agent-replay-report.html")
