"""Replay plans: what happens to each recorded step in one replay.

Per step, one of:

* **hold** - serve the recorded action (the intervention do(a_k := recorded a_k));
* **resample** - re-draw the action from the step's policy;
* **force** - do(a_k := value): serve ``value`` as the action (the observation, if the step
  has an environment, is computed live on it);
* **remove** - skip the step; the agent receives the step's declared ``default``;
* **mock-observe** - keep the recorded action, serve ``value`` as the observation;
* **edit-context** - replace part of the step's recorded inputs, then re-draw it;
* **swap-model** - a model hint the policy reads as ``ctx.model_hint`` when it re-draws (a
  step named in :meth:`ReplayPlan.swap_model` is re-drawn, like an edited one).

Steps a plan does not mention are held when they fall in its held set or prefix, and re-drawn
otherwise. Plans are immutable values; :meth:`ReplayPlan.validate` checks one against a
trajectory before anything runs.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import PlanError
from ..model import Step, Trajectory

__all__ = ["FORCE", "HOLD", "MOCK_OBSERVE", "REMOVE", "RESAMPLE", "ReplayPlan"]

HOLD = "hold"
RESAMPLE = "resample"
FORCE = "force"
REMOVE = "remove"
MOCK_OBSERVE = "mock_observe"

_EVERYTHING = sys.maxsize


@dataclass(frozen=True)
class ReplayPlan:
    """Per-step decisions for one replay (see the module docstring).

    ``held`` and ``hold_before`` say which steps are held (``hold_before=i``: every step
    before ``i``); everything else is re-drawn unless ``forced``, ``removed``, ``observed``
    (mock observation) or ``edited`` says otherwise. ``models`` / ``model_override`` are
    swap-model hints. ``strict`` makes a divergence from the recording an error instead of a
    live continuation. ``live_side_effects`` allows side-effecting tools to run live past the
    end of the recording (only :func:`~agent_replay.resume` sets it).
    """

    held: frozenset[int] = frozenset()
    hold_before: int = 0
    forced: Mapping[int, Any] = field(default_factory=dict)
    removed: frozenset[int] = frozenset()
    observed: Mapping[int, Any] = field(default_factory=dict)
    edited: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    models: Mapping[int, str] = field(default_factory=dict)
    model_override: str | None = None
    strict: bool = False
    resume: bool = False

    def __post_init__(self) -> None:
        # per trajectory length, the decision of every step (see :meth:`modes`); not a field
        object.__setattr__(self, "_modes", {})

    # -- constructors (the seed's names) ---------------------------------------------------

    @classmethod
    def factual(cls, n: int | None = None) -> ReplayPlan:
        """Hold every recorded step: a deterministic replay of the run."""
        return cls(hold_before=_EVERYTHING)

    @classmethod
    def ablate_from(cls, i: int, n: int | None = None) -> ReplayPlan:
        """Hold steps before ``i``; re-draw ``i`` and everything after (the prefix plan)."""
        if i < 0:
            raise PlanError(f"ablate_from({i}): step indices start at 0")
        return cls(hold_before=i)

    @classmethod
    def coalition(cls, members: Iterable[int]) -> ReplayPlan:
        """Hold exactly ``members``; re-draw every other step (a Shapley value function)."""
        return cls(held=frozenset(members))

    @classmethod
    def mock_observe(
        cls, index: int, observation: Any, *, held: Iterable[int] | None = None
    ) -> ReplayPlan:
        """Hold the prefix before ``index`` (or ``held``) and mock ``index``'s observation."""
        if held is None:
            return cls(hold_before=index, observed={index: observation})
        return cls(held=frozenset(held), observed={index: observation})

    # -- derived plans ----------------------------------------------------------------------

    def force(self, index: int, action: Any) -> ReplayPlan:
        return replace(self, forced={**self.forced, index: action})

    def remove(self, index: int) -> ReplayPlan:
        return replace(self, removed=self.removed | {index})

    def observe(self, index: int, observation: Any) -> ReplayPlan:
        return replace(self, observed={**self.observed, index: observation})

    def edit(self, index: int, inputs: Mapping[str, Any]) -> ReplayPlan:
        if not isinstance(inputs, Mapping):
            raise PlanError(
                f"edit of step {index} needs a mapping of input names to new values, "
                f"not {type(inputs).__name__}"
            )
        return replace(self, edited={**self.edited, index: dict(inputs)})

    def swap_model(self, model: str, index: int | None = None) -> ReplayPlan:
        if index is None:
            return replace(self, model_override=model)
        return replace(self, models={**self.models, index: model})

    # -- reading ----------------------------------------------------------------------------

    def decision(self, index: int) -> str:
        """``hold``, ``resample``, ``force``, ``remove`` or ``mock_observe`` for step ``index``."""
        if index in self.forced:
            return FORCE
        if index in self.removed:
            return REMOVE
        if index in self.observed:
            return MOCK_OBSERVE
        if index in self.edited or index in self.models:
            return RESAMPLE
        if index < self.hold_before or index in self.held:
            return HOLD
        return RESAMPLE

    def modes(self, n: int) -> tuple[str, ...]:
        """:meth:`decision` of steps ``0..n-1``, computed once per plan and length (every
        rollout of a plan reads it)."""
        table = self._modes.get(n)
        if table is None:
            table = self._modes[n] = tuple(self.decision(i) for i in range(n))
        return table

    def model_for(self, index: int) -> str | None:
        return self.models.get(index, self.model_override)

    def validate(self, trajectory: Trajectory, observation_only: Collection[int] = ()) -> None:
        """Raise :class:`PlanError` when the plan cannot apply to ``trajectory``.
        ``observation_only``: steps the agent cannot act on beyond those the recording marks
        (an imported trace's steps without a resample policy)."""
        if not (
            self.held or self.forced or self.removed or self.observed or self.edited or self.models
        ):
            return  # names no step (factual and prefix plans): it fits every trajectory
        n = len(trajectory.steps)
        named = {
            "held": self.held,
            "forced": self.forced,
            "removed": self.removed,
            "observed": self.observed,
            "edited": self.edited,
            "models": self.models,
        }
        for what, indices in named.items():
            for index in indices:
                if not isinstance(index, int) or not 0 <= index < n:
                    raise PlanError(
                        f"plan {what} step {index!r}, but session {trajectory.session_id!r} "
                        f"has steps 0..{n - 1}"
                    )
        fixed = set(observation_only)
        for index in self.forced:
            step = trajectory.steps[index]
            if not step.side_effects and (not step.resamplable or index in fixed):
                raise PlanError(
                    f"cannot force step {index} ({step.label}): it is observation-only "
                    + _why_fixed(step, "act there")
                )
            if step.side_effects and step.observed and index not in self.observed:
                raise PlanError(
                    f"step {index} ({step.label}) has side effects: forcing its action needs a "
                    "mock observation too, it is never executed live (replay with "
                    f"ReplayPlan.factual().force({index}, action).observe({index}, observation); "
                    "fork takes one intervention, and fork(..., observe=...) keeps the recorded "
                    "action)"
                )
        for index in sorted({*self.edited, *self.models}):
            step = trajectory.steps[index]
            how = "edit" if index in self.edited else "swap the model of"
            if step.side_effects:
                raise PlanError(
                    f"cannot {how} step {index} ({step.label}): it has side effects, so it is "
                    "never re-drawn during a replay; force its action instead (with a mock "
                    "observation too when it has observe=)"
                )
            if not step.resamplable or index in fixed:
                raise PlanError(
                    f"cannot {how} step {index} ({step.label}): it is observation-only "
                    + _why_fixed(step, "re-draw it")
                )
        steps = trajectory.steps
        named_steps = {*self.forced, *self.removed, *self.observed, *self.edited, *self.models}
        for index in sorted(named_steps):
            # a step another one started is only made when that one runs
            enclosing = trajectory.enclosing(index)
            held = [
                outer
                for outer in enclosing
                if self.decision(outer) != RESAMPLE
                or not steps[outer].resamplable
                or steps[outer].side_effects
                or outer in fixed
            ]
            if held:
                top = enclosing[-1]
                raise PlanError(
                    f"step {index} ({steps[index].label}) was started inside step "
                    f"{held[0]} ({steps[held[0]].label}), which this plan does not re-draw: "
                    "a replay that serves a step serves what it started with it, so the "
                    f"intervention would never apply; intervene on step {top} (the "
                    f"outermost step it was started in), or re-draw steps "
                    f"{', '.join(map(str, sorted(enclosing)))} too"
                )
        for index in self.edited:
            step = trajectory.steps[index]
            if not isinstance(step.inputs, Mapping):
                raise PlanError(
                    f"cannot edit the inputs of step {index} ({step.label}): they are not a mapping"
                )

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (for rollout records and reports)."""
        out: dict[str, Any] = {}
        if self.hold_before == _EVERYTHING:
            out["hold"] = "all"
        elif self.hold_before:
            out["hold_before"] = self.hold_before
        if self.held:
            out["held"] = sorted(self.held)
        for name in ("forced", "observed", "edited", "models"):
            value = getattr(self, name)
            if value:
                out[name] = {str(k): v for k, v in sorted(value.items())}
        if self.removed:
            out["removed"] = sorted(self.removed)
        if self.model_override:
            out["model"] = self.model_override
        return out


def _why_fixed(step: Step, act: str) -> str:
    """Why an observation-only step is, and what to do about it."""
    if step.inputs is None and step.action is None:
        # a policy given for it would be sent nulls: naming a policy does not help
        return (
            "(it was recorded without content, neither inputs nor output: the capture "
            f"report's steps_without_content; no policy can {act}); capture with message "
            "content on, or intervene elsewhere"
        )
    if not step.resamplable:
        return f"(the recording marks it not re-drawable; no policy can {act}); intervene elsewhere"
    return (
        f"(no policy can {act}); give it a resample policy (or an entry in its "
        "ScriptedPolicy table) or intervene elsewhere"
    )
