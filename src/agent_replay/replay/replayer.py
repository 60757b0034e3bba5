"""Deterministic replay of a recorded run under a :class:`ReplayPlan`.

Binding. The k-th live call of the run binds to recorded step k when it has the same kind and
name. Its inputs must also match (same input hash) while everything before it was replayed
exactly; after an upstream step was re-drawn, forced, removed or mocked, a held step is served
its recorded action even though its inputs changed (that is what holding means:
do(a_k := recorded a_k)). A call that does not match - another operation at that position,
inputs that differ with nothing upstream changed, more calls than recorded - means the run
has *diverged*: from there on every call runs live and the result says so; with
``strict=True`` a :class:`ReplayDivergenceError` lists the live call and the closest recorded
ones instead. Binding never searches the rest of the recording for a look-alike step, so a
held step on one branch can never be served another branch's output.

Randomness. Re-drawn step k of rollout ``seed`` draws from the stream keyed by
``(seed, "step", recording, k)``, ``recording`` a digest of the recorded steps: common random
numbers across the plans of one recording, independent draws for different recordings (so
attributions of many runs do not share their luck). Draws in the agent body, and
``ctx.now()`` / ``ctx.uuid()``, come from the recording while the run is still on the recorded
path, and from streams keyed by ``(seed, "body", recording, segment)`` after it leaves it.

Side effects. A tool declared ``side_effects=True`` is never executed live: it is held, or
served a mock observation; a diverged run that reaches one gets a
:class:`SideEffectBlockedError` raised at the call (the rollout records it).

An exception from the agent is the replay's outcome (a failure with its traceback), never an
exception out of :func:`replay`.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid as _uuid
import weakref
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry import trace

from .. import canonical
from ..capture.context import (
    AgentContext,
    AsyncAgentContext,
    Decision,
    StepCall,
    StepResult,
    effect_key,
    make_tracer,
    running_step,
)
from ..capture.recorder import step_draft
from ..capture.run import (
    Verifier,
    arun_agent,
    describe_failure,
    is_async_agent,
    judge,
    run_agent,
    run_coroutine,
)
from ..capture.seeds import derive_seed, stream_seed
from ..errors import (
    CanonicalEncodingError,
    ReplayDivergenceError,
    RolloutLimitExceeded,
    SideEffectBlockedError,
)
from ..model import Lineage, Outcome, Step, StepDraft, Trajectory, chain_steps
from .limits import RolloutLimits
from .plan import FORCE, HOLD, MOCK_OBSERVE, REMOVE, ReplayPlan
from .policies import PolicyError

__all__ = ["Divergence", "ReplayResult", "Replayer", "areplay", "ensure_verified", "replay"]

SIDE_EFFECT_MOCK = "side_effect_mock"
"""The ``replay`` attribute of a step whose side-effecting tool ran its declared ``mock``."""

_IMMUTABLE = (str, int, float, bool, type(None), bytes)


@dataclass(frozen=True)
class Divergence:
    """Where a replay left the recording: ``position``, the live call, what was recorded."""

    position: int
    live: str
    recorded: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "live": self.live,
            "recorded": self.recorded,
            "reason": self.reason,
        }


@dataclass(slots=True)  # not frozen: a frozen init costs a rollout more than its steps do
class ReplayResult:
    """One replay (a rollout): its outcome and what it cost.

    ``live_steps`` counts steps executed live (each one an LLM or tool call in real life);
    ``served_steps`` those served from the recording. ``held_unresamplable`` lists steps the
    plan wanted re-drawn but that have no policy (observation-only) or have side effects, so
    were held. ``tokens`` sums the token usage of live steps (``tokens_estimated`` when some
    of it is taken from the recording because the policy did not report usage).
    ``blocked_tools`` names the side-effecting tools this rollout reached live and refused
    (it stopped there); ``mocked_tools`` those whose declared ``mock`` ran in their place.
    """

    result: Any
    outcome: Outcome
    plan: ReplayPlan
    seed: int
    session_id: str
    diverged: bool
    divergence: Divergence | None
    exception: dict[str, Any] | None
    live_steps: int
    served_steps: int
    held_unresamplable: tuple[int, ...]
    blocked_side_effects: tuple[int, ...]
    tokens: int
    tokens_estimated: bool
    rejoined: bool = False
    branch_at: int | None = None
    coupled_steps: int = 0
    path_end: int | None = None
    same_at: int | None = None
    stopped: str | None = None
    blocked_tools: tuple[str, ...] = ()
    mocked_tools: tuple[str, ...] = ()
    positions: tuple[int, ...] = field(repr=False, default=())
    segments: tuple[int, ...] | None = field(repr=False, default=None)
    _material: tuple = field(repr=False, default=(), compare=False)
    effects: tuple[tuple[int, str, Any], ...] = field(repr=False, default=())
    replayed: Trajectory | None = field(repr=False, default=None, compare=False)

    @property
    def drafts(self) -> tuple[StepDraft, ...]:
        """The steps of this run in call order (removed steps are absent)."""
        drafts = [_draft(m) for m in self._material]
        if any("within_step" in d.attributes for d in drafts):
            # ``within_step`` names a position of this run; where steps before it were
            # removed or dropped, the step it names sits at another index of the chain
            index_of = {position: i for i, position in enumerate(self.positions)}
            for d in drafts:
                within = d.attributes.get("within_step")
                if within is not None and index_of.get(within) != within:
                    attributes = dict(d.attributes)
                    if within in index_of:
                        attributes["within_step"] = index_of[within]
                    else:
                        attributes.pop("within_step")
                        attributes.pop("within_phase", None)
                    d.attributes = attributes
        return tuple(drafts)

    @property
    def failed(self) -> bool:
        return bool(self.outcome.failed)

    def trajectory(
        self,
        session_id: str | None = None,
        *,
        lineage: Lineage | None = None,
        task: Any = None,
        seed: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Trajectory:
        """The replayed run as a trajectory (held steps keep their recorded hashes); its task
        and seed are those of the replayed recording unless given (so that it replays too)."""
        if self.replayed is not None:
            task = self.replayed.task if task is None else task
            seed = self.replayed.seed if seed is None else seed
        meta = {"source": "replay", **(metadata or {})}
        if self.divergence is not None:
            meta["divergence"] = self.divergence.to_dict()
        if self.segments is not None:  # steps were dropped: how its streams were keyed
            meta["segments"] = list(self.segments)
        if self.mocked_tools:  # its outcome is as good as these tools' mocks
            meta["mocked_side_effects"] = list(self.mocked_tools)
        return Trajectory(
            session_id=session_id or f"{self.session_id}-replay-{self.seed}",
            steps=chain_steps(self.drafts),
            task=task,
            seed=seed,
            outcome=self.outcome,
            lineage=lineage,
            metadata=meta,
            effects=self.effects,  # the now() / uuid() values this run got: it replays too
        )

    def to_record(self) -> dict[str, Any]:
        """A JSON-able record of this rollout (plan, outcome, divergence, exception)."""
        return {
            "seed": self.seed,
            "plan": self.plan.describe(),
            "failed": self.outcome.failed,
            "score": self.outcome.score,
            "diverged": self.diverged,
            "divergence": None if self.divergence is None else self.divergence.to_dict(),
            "exception": None
            if self.exception is None
            else {k: self.exception[k] for k in ("type", "message", "traceback")},
            "live_steps": self.live_steps,
            "tokens": self.tokens,
            "stopped": self.stopped,
        }


class Replayer:
    """The replay driver (see the module docstring). One instance per rollout."""

    # rarely read state every rollout starts with: set on the instance once it changes
    # (creating a rollout should cost little; what every step reads is set in __init__)
    error: BaseException | None = None  # strict divergence / encoding error to re-raise
    tokens = 0
    tokens_estimated = False
    coupled_steps = 0
    branch_at: int | None = None
    rejoin_at: int | None = None
    same_at: int | None = None
    limits: RolloutLimits | None = None
    deadline: float | None = None  # time.monotonic() past which the rollout is stopped
    blocked_tools: tuple[str, ...] = ()  # side-effecting tools refused, by name
    mocked: tuple[str, ...] = ()  # side-effecting tools whose mock ran instead, by name
    stopped: RolloutLimitExceeded | None = None
    _effects: dict[tuple[int, str], deque] | None = None  # recorded now()/uuid(), on first use
    _uuid_count = 0
    _clock = 0.0  # the latest now() this rollout served off the recorded path

    def __init__(self, trajectory: Trajectory, plan: ReplayPlan, seed: int) -> None:
        self.trajectory = trajectory
        self.recorded = trajectory.steps
        self.plan = plan
        self.seed = seed
        self.base_seed = trajectory.seed if trajectory.seed is not None else 0
        self.changed = False  # something upstream was not replayed exactly
        self.effects_log: list[tuple[int, str, Any]] = []  # now() / uuid() as this run got them
        self.divergence: Divergence | None = None
        self.rejoined: Outcome | None = None
        self.coupling: Coupling | None = None
        self.stop_if_same_at: int | None = None  # stop once this step's re-draw reproduces
        self.calls = self.live_steps = self.served_steps = 0
        self.steps: dict[int, tuple] = {}  # position -> material for a StepDraft
        self.held_unresamplable: list[int] = []
        self.blocked: list[int] = []
        # streams are keyed by the recording too: rollout r of one run and rollout r of
        # another draw independently (common random numbers hold within one recording)
        self._served, self._recording, self._shape = _prepared(trajectory)
        if self._shape.special:  # (only then: begin runs for every step of every rollout)
            self.begin = self._begin_shaped  # type: ignore[method-assign]
        self._modes = plan.modes(len(self.recorded))
        # derived on first use: a rollout that serves every step never draws
        self._step_base: int | None = None

    def _step_seed(self, position: int) -> int:
        """The seed of re-drawn step ``position``'s stream in this rollout."""
        base = self._step_base
        if base is None:
            base = self._step_base = derive_seed(self.seed, "step", self._recording)
        return stream_seed(base, position)

    # -- binding --------------------------------------------------------------------------

    def begin(self, ctx: AgentContext, call: StepCall, position: int) -> Decision:
        if self.rejoined is not None:  # the agent swallowed the stop: keep stopping it
            raise _Rejoined()
        self.calls = position + 1
        if self.divergence is None:
            if position < len(self.recorded):
                recorded = self.recorded[position]
                if recorded.kind is call.kind and recorded.name == call.name:
                    return self._bound(ctx, call, position, recorded)
                self._diverge(call, position, "another operation was called here")
            elif not self.plan.resume:
                self._diverge(call, position, "more calls than the recording has")
        return self._live(call, position)

    def _begin_shaped(self, ctx: AgentContext, call: StepCall, position: int) -> Decision:
        """:meth:`begin` for a recording with steps started inside others, or ``now()`` /
        ``uuid()`` taken inside steps."""
        decision = Replayer.begin(self, ctx, call, position)
        if position in self._shape.special:
            self._around(ctx, decision)
        return decision

    def _around(self, ctx: AgentContext, decision: Decision) -> None:
        """What a step whose recording started other steps, or took ``now()`` / ``uuid()``
        inside itself, brings along when it is bound: see :meth:`_skip_inside`; and a step
        served as recorded carries those values (its own and those of the steps served with
        it) into this run's effects, so that a run recorded from this one (a fork child)
        re-draws it as the recording would."""
        served = self._skip_inside(ctx, decision) if decision.position in self._shape.nested else 0
        step_effects = self._shape.step_effects
        if decision.state[0] == "served" and step_effects:
            for position in range(decision.position, decision.position + 1 + served):
                self.effects_log.extend(step_effects.get(position, ()))

    def _skip_inside(self, ctx: AgentContext, decision: Decision) -> int:
        """The steps the recording started inside this one that this run will not call,
        because the part of the step that started them does not run: the next call takes
        the position after them (``begin`` runs under the context's position lock). A
        served step serves them as recorded; a mocked one those its ``produce`` started
        (they made the action it keeps); removed and forced steps drop them. Returns how
        many were served."""
        in_produce, in_observe = self._shape.nested[decision.position]
        label = decision.state[0]
        if decision.removed:
            skip, serve = in_produce + in_observe, 0
        elif label == "served":
            skip = serve = in_produce + in_observe
        elif label == "mocked":
            skip, serve = in_produce + in_observe, in_produce
        elif label == "forced":  # its produce never runs; its observe may
            skip, serve = in_produce + (0 if decision.run_observe else in_observe), 0
        else:
            return 0  # it runs: what it starts binds as usual
        ctx.position += skip
        self.calls += skip
        if serve:
            position = decision.position
            for nested in range(position + 1, position + 1 + serve):
                self.steps[nested] = (self.recorded[nested],)
            self.served_steps += serve
        return serve

    def _bound(self, ctx: AgentContext, call: StepCall, position: int, recorded: Step) -> Decision:
        plan = self.plan
        mode = self._modes[position]
        same_inputs = call.inputs == recorded.inputs or _same_inputs(call.inputs, recorded)
        if not same_inputs and not self.changed:
            outer = running_step(ctx)
            if outer is None:
                # nothing upstream changed, yet the agent asks something else: it is not
                # deterministic given its recorded steps, so the recording no longer applies
                self._diverge(call, position, "inputs differ from the recording")
                return self._live(call, position)
            # called from inside a step being re-drawn, which took another course than
            # when recording: that step branched (it has not finished to say so itself)
            self.changed = True
            self.branch_at = self._shape.outermost.get(outer, outer)
        if mode == HOLD:
            return self._serve(call, recorded, position, exact=same_inputs)
        if mode == REMOVE:
            self.changed = True
            return Decision(
                position=position,
                inputs=call.inputs,
                seed=0,
                removed=True,
                state=("removed", recorded),
            )
        if mode == MOCK_OBSERVE:
            self.changed = True
            return Decision(
                position=position,
                inputs=call.inputs,
                seed=0,
                run_produce=False,
                action=_fresh(recorded.action),
                observed=True,
                observation=_fresh(plan.observed[position]),
                state=("mocked", recorded),
            )
        if mode == FORCE:
            self.changed = True
            return self._forced(call, position, recorded)
        # re-draw (possibly with edited inputs or a model hint); a step with side effects is
        # held whatever it declares: nothing of it runs live during a replay
        if (
            call.produce is None
            or not (recorded.resamplable and call.resamplable)
            or call.side_effects
            or recorded.side_effects
        ):
            self.held_unresamplable.append(position)
            return self._serve(call, recorded, position, exact=same_inputs)
        inputs = call.inputs
        if position in plan.edited:
            self.changed = True
            inputs = {**call.inputs, **plan.edited[position]}
        on_path = not self.changed
        if on_path and self.coupling is not None:
            known = self.coupling.lookup(self.seed, position)
            if known is True:  # this seed's re-draw here is known to reproduce the recording
                self.coupled_steps += 1
                if position == self.stop_if_same_at:
                    self.same_at = position
                    raise _Rejoined()
                return self._serve(call, recorded, position, exact=True)
            if known is not None:  # known to branch: the rest of this rollout is known too
                self.rejoined = known
                self.rejoin_at = position
                raise _Rejoined()
        if self.limits is not None:
            self._within_limits(position)
        return Decision(
            position=position,
            inputs=inputs,
            seed=self._step_seed(position),
            run_produce=True,
            run_observe=call.observe is not None,
            model_hint=plan.model_for(position),
            state=("resampled", recorded, on_path),
        )

    def _forced(self, call: StepCall, position: int, recorded: Step) -> Decision:
        # a copy per rollout: the agent may change what it is handed, and the plan is shared
        action = _fresh(self.plan.forced[position])
        decision = Decision(
            position=position,
            inputs=call.inputs,
            seed=self._step_seed(position),
            run_produce=False,
            action=action,
            state=("forced", recorded),
        )
        if position in self.plan.observed:
            decision.observed = True
            decision.observation = _fresh(self.plan.observed[position])
        elif call.observe is not None:
            if call.side_effects or recorded.side_effects:
                decision.exception = self._blocked(call, position, "its action was forced")
            else:
                decision.run_observe = True  # the environment acts on the forced action
        return decision

    def _serve(self, call: StepCall, recorded: Step, position: int, *, exact: bool) -> Decision:
        if exact:
            known = self._served[position]
            if known is not None:
                return known
        if recorded.error is not None:
            return Decision(
                position=position,
                inputs=call.inputs,
                seed=0,
                run_produce=False,
                error=recorded.error,
                state=("served", recorded, exact),
            )
        action, observation = recorded.action, recorded.observation
        shareable = isinstance(action, _IMMUTABLE) and isinstance(observation, _IMMUTABLE)
        if not shareable:
            # the agent may mutate what it receives; the recording is shared by every rollout
            payload = (
                canonical.decode(recorded.output_bytes)
                if recorded.output_bytes
                else canonical.snapshot(recorded.output_payload())
            )
            action, observation = payload.get("action"), payload.get("observation")
        decision = Decision(
            position=position,
            inputs=recorded.inputs if exact else call.inputs,
            seed=0,
            run_produce=False,
            action=action,
            observed=recorded.observed,
            observation=observation,
            served=exact,
            state=("served", recorded, exact),
        )
        if exact and shareable:  # the same for every rollout of this recording: keep it
            self._served[position] = decision
        return decision

    def _live(self, call: StepCall, position: int) -> Decision:
        if self.limits is not None:
            self._within_limits(position)
        decision = Decision(
            position=position,
            inputs=call.inputs,
            seed=self._step_seed(position),
            run_produce=True,
            run_observe=call.observe is not None,
            model_hint=self.plan.model_override,
            state=("live", None),
        )
        if call.side_effects and not (self.plan.resume and position >= len(self.recorded)):
            decision.run_observe = False
            if call.mock is not None:  # its stand-in runs instead (the step records its value)
                call.produce = call.mock
                self.mocked += (call.name,)
                decision.state = (SIDE_EFFECT_MOCK, None)
            else:
                decision.run_produce = False
                decision.exception = self._blocked(call, position, "the run left the recording")
        return decision

    def _within_limits(self, position: int) -> None:
        """Stop the rollout (raise inside the agent) once it reaches its limits; every live
        step after that raises again (a new exception each time, so that an agent catching
        and retrying does not grow one traceback without end)."""
        limits = self.limits
        assert limits is not None
        if self.stopped is None:
            if limits.steps is not None and position >= limits.steps:
                self.stopped = limits.exceeded("steps")
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                self.stopped = limits.exceeded("seconds")
            else:
                return
            raise self.stopped
        raise limits.exceeded(self.stopped.reason)

    def _blocked(self, call: StepCall, position: int, why: str) -> SideEffectBlockedError:
        self.blocked.append(position)
        self.blocked_tools += (call.name,)
        return SideEffectBlockedError(
            f"tool {call.name!r} (step {position}) has side effects and {why}; agent-replay "
            "never executes it live during a replay. Hold it, give it a mock observation "
            "(plan observe=...), or declare what a replay runs in its place (mock=...)"
        )

    def _diverge(self, call: StepCall, position: int, reason: str) -> None:
        recorded = self.recorded[position] if position < len(self.recorded) else None
        live = _describe_call(call)
        if self.plan.strict:
            raise self._strict(position, live, reason, _closest(call, position, self.recorded))
        self.divergence = Divergence(
            position, live, None if recorded is None else _describe_step(recorded), reason
        )
        self.changed = True

    def _strict(
        self, position: int, live: str, reason: str, closest: list[str]
    ) -> ReplayDivergenceError:
        """Strict mode's error for a divergence, kept in ``error`` so that the replay raises
        it even when the agent caught it."""
        self.error = ReplayDivergenceError(
            f"replay of {self.trajectory.session_id!r} diverged at step {position}: "
            f"{reason}.\n  live call: {live}\n  closest recorded calls:\n    "
            + "\n    ".join(closest or ["(none)"]),
            position=position,
            live=live,
            closest=closest,
        )
        return self.error

    # -- collecting -----------------------------------------------------------------------

    def commit(
        self, ctx: AgentContext, call: StepCall, decision: Decision, result: StepResult
    ) -> None:
        # keep raw material only: most rollouts are never turned into trajectories
        label, recorded = decision.state[0], decision.state[1]
        if label == "served":
            self.served_steps += 1
            if decision.state[2]:  # exactly the recorded step: keep it, hashes and all
                self.steps[decision.position] = (recorded,)
                return
            label = "held"
        elif label == SIDE_EFFECT_MOCK:
            pass  # no call in real life: not a live step
        elif decision.run_produce or decision.run_observe:
            self.live_steps += 1
            if call.attributes or (recorded is not None and recorded.attributes):
                self._count_tokens(call, recorded)
            if label == "resampled" and decision.state[2]:
                if not self.changed and _reproduces(result, recorded):
                    # the re-draw gave the recorded output: the run is still on the recorded
                    # path, exactly as if this step had been held
                    if self.coupling is not None:
                        self.coupling.note_same(self.seed, decision.position)
                    self.steps[decision.position] = (recorded,)
                    if decision.position == self.stop_if_same_at:
                        self.same_at = decision.position
                        raise _Rejoined()
                    return
                if not self.changed:
                    # a plan holding the step this one was started inside serves this one
                    # with it: the first plan that is not this very rollout starts after it
                    self.branch_at = self._shape.outermost.get(decision.position, decision.position)
                self.changed = True
        inputs = decision.inputs
        try:  # the output as it is now: the agent may change it later
            if result is not None:
                inputs = result.inputs  # a copy, taken when the step was called
                result.detach()
        except CanonicalEncodingError:  # sealing reports such a value, with its step
            pass
        self.steps[decision.position] = (call, inputs, result, label)

    def _count_tokens(self, call: StepCall, recorded: Step | None) -> None:
        usage = call.attributes or {}
        reported = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        if reported:
            self.tokens += reported
        elif recorded is not None:
            attrs = recorded.attributes
            estimate = int(attrs.get("input_tokens") or 0) + int(attrs.get("output_tokens") or 0)
            if estimate:
                self.tokens += estimate
                self.tokens_estimated = True

    def body_seed(self, segment: int) -> int:
        # ctx.rng drawn in the agent body, outside any step, is exogenous: the recording's own
        # streams (by segment) in every rollout, as the clock is, so that only steps are
        # re-drawn. Re-keying them once the run left the recorded path credited randomness
        # outside every step to the step before it (a coin flipped after the last step was
        # "separated" onto that step in 68% of runs).
        return stream_seed(derive_seed(self.base_seed, "body"), self.stream_segment(segment))

    def stream_segment(self, position: int) -> int:
        """The segment the recording's streams key ``position`` of this run by: the same
        number, unless the recording itself dropped steps (:func:`_segments_of`)."""
        segments = self._shape.segments
        if segments is None:
            return position
        if position < len(segments):
            return segments[position]
        return segments[-1] + position - (len(segments) - 1)

    def effect(self, ctx: AgentContext, kind: str, live: Callable[[], Any]) -> Any:
        key = effect_key(ctx, kind)
        if self._shape.segments is not None:
            key = (self.stream_segment(key[0]), key[1])
        value = self._effect(ctx, key, kind, live)
        self.effects_log.append((*key, value))
        return value

    def _effect(
        self, ctx: AgentContext, key: tuple[int, str], kind: str, live: Callable[[], Any]
    ) -> Any:
        if not self.changed:
            if self._effects is None:  # the recorded now() / uuid() values, in order
                self._effects = defaultdict(deque)
                for segment, recorded_kind, value in self.trajectory.effects:
                    self._effects[(segment, recorded_kind)].append(value)
            queue = self._effects.get(key)
            if queue:
                return queue.popleft()
        if kind == "uuid":
            self._uuid_count += 1
            bits = derive_seed(self.seed, "uuid", self._recording, ctx.position, self._uuid_count)
            bits = (bits << 64) | derive_seed(
                self.seed, "uuid2", self._recording, ctx.position, self._uuid_count
            )
            return str(_uuid.UUID(int=bits, version=4))
        if kind == "now":
            return self._recorded_clock(ctx.position, live)
        return live()

    def _recorded_clock(self, segment: int, live: Callable[[], Any]) -> float:
        """``now()`` off the recorded path: the recording's own clock at this point (when
        the step at ``segment`` started, or the recording's end past it), never earlier than
        what this rollout was told before; so rollouts are reproducible, and an agent asking
        the time sees the world's time of the recorded run. The wall clock only when the
        recording holds no times at all."""
        steps = self.recorded
        if segment < len(steps) and steps[segment].started_ns is not None:
            ns = steps[segment].started_ns
        else:
            ns = max((s.ended_ns or s.started_ns or 0 for s in steps), default=0)
        value = ns / 1e9 if ns else live()
        value = max(value, self._clock)
        self._clock = value
        return value

    def finish(self) -> None:
        """Notice a run that ended before the recording did although nothing changed (in
        strict mode, a :class:`ReplayDivergenceError`)."""
        if (
            self.divergence is None
            and not self.changed
            and self.error is None
            and self.calls < len(self.recorded)
        ):
            recorded = _describe_step(self.recorded[self.calls])
            reason = f"the run made {self.calls} of {len(self.recorded)} recorded calls"
            if self.plan.strict:
                self._strict(self.calls, "(run ended)", reason, [recorded])
                return
            self.divergence = Divergence(self.calls, "(run ended)", recorded, reason)


class _Rejoined(BaseException):
    """Stops a rollout whose remaining course is already known (see :class:`Coupling`).

    A BaseException so that agents catching ``Exception`` do not swallow it.
    """


_STOP = (_Rejoined, RolloutLimitExceeded)  # end a run quietly: the driver says why


def _quiet_stops_in_threads() -> None:
    """A rollout stopped while one of its steps runs in a thread the agent started ends that
    thread with the stop, which ``threading.excepthook`` would print as a crash ("Exception
    in thread ..."). Wrap the hook in place (again if something replaced it since) so that
    it passes on everything but the stops."""
    hook = threading.excepthook
    if getattr(hook, "passes_on", None) is not None:
        return

    def quiet(args: Any) -> None:
        if not isinstance(args.exc_value, _STOP):
            hook(args)

    quiet.passes_on = hook  # type: ignore[attr-defined]
    threading.excepthook = quiet


class Coupling:
    """What common random numbers let rollouts of prefix plans share.

    Under a prefix plan, a rollout with seed ``r`` that re-draws step ``k`` while still on the
    recorded path either reproduces the recorded output (and stays on the path, exactly as if
    step ``k`` had been held) or branches; if it branches, everything after is the same as in
    the rollout of the plan that starts re-drawing at ``k`` with the same seed. So per
    ``(seed, position)`` it is enough to know "reproduces" or "branches, with this outcome":
    later rollouts serve the one and stop at the other, and their outcomes are exactly what a
    full execution would give. Only valid for pure prefix plans of one trajectory, agent and
    verifier; never used for Shapley coalitions. Thread-safe.
    """

    def __init__(self) -> None:
        self._same: set[tuple[int, int]] = set()
        self._branch: dict[tuple[int, int], Outcome] = {}
        self._lock = threading.Lock()

    def lookup(self, seed: int, position: int) -> bool | Outcome | None:
        key = (seed, position)
        if key in self._same:
            return True
        return self._branch.get(key)

    def note_same(self, seed: int, position: int) -> None:
        with self._lock:
            self._same.add((seed, position))

    def note_branch(self, seed: int, position: int, outcome: Outcome) -> None:
        with self._lock:
            self._branch.setdefault((seed, position), outcome)

    def __len__(self) -> int:
        return len(self._same) + len(self._branch)


def _path_end(driver: Replayer) -> int | None:
    """The last prefix position whose rollout, with this seed, is this very rollout: the
    position where it left the recorded path (or rejoined a known branch, or the end)."""
    if driver.divergence is not None or driver.coupling is None or driver.same_at is not None:
        return None
    if driver.rejoin_at is not None:
        return driver.rejoin_at
    if driver.changed:
        return driver.branch_at
    return len(driver.recorded)


def _reproduces(result: StepResult, recorded: Step) -> bool:
    if result.error is not None or recorded.error is not None:
        return False
    if result.observed != recorded.observed or result.action != recorded.action:
        return False
    if result.observed and result.observation != recorded.observation:
        return False
    payload = {"action": result.action}
    if result.observed:
        payload["observation"] = result.observation
    try:  # == treats 1 and 1.0 alike, and dicts in any key order; the addresses do not
        stored = canonical.encode_stored(payload)
    except CanonicalEncodingError:
        return False
    return stored.hash == recorded.output_hash and stored.blob == recorded.output_address


def _draft(material: tuple) -> StepDraft:
    if len(material) == 1:
        return material[0].draft()
    call, inputs, result, label = material
    return step_draft(call, inputs, result, attributes={"replay": label})


def _same_inputs(live: Any, recorded: Step) -> bool:
    """Whether the live inputs hash like the recorded ones (when ``==`` says no)."""
    try:
        return canonical.hash_value(live) == recorded.input_hash
    except CanonicalEncodingError:
        return False


def _fresh(value: Any) -> Any:
    if isinstance(value, _IMMUTABLE):
        return value
    return canonical.snapshot(value)


def _describe_call(call: StepCall) -> str:
    return f"{call.kind.value}:{call.name}({_preview(call.inputs)})"


def _describe_step(step: Step) -> str:
    return f"#{step.index} {step.label}({_preview(step.inputs)})"


def _preview(value: Any, width: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _closest(call: StepCall, position: int, recorded: tuple[Step, ...]) -> list[str]:
    """Recorded steps most like ``call``: same kind and name first, then nearest position."""

    def score(step: Step) -> tuple:
        return (step.kind is not call.kind, step.name != call.name, abs(step.index - position))

    return [_describe_step(s) for s in sorted(recorded, key=score)[:3]]


# -- running ------------------------------------------------------------------------------

_VERIFIED: dict[int, weakref.ref] = {}
_FACTUAL = ReplayPlan.factual()
_PREPARED: dict[int, tuple[weakref.ref, list[Decision | None], str, _Shape]] = {}


@dataclass(frozen=True)
class _Shape:
    """What a recording's steps did inside one another (see :func:`_nesting`) and the
    ``now()`` / ``uuid()`` values each step took inside itself (by position)."""

    nested: dict[int, tuple[int, int]]
    outermost: dict[int, int]
    step_effects: dict[int, list[tuple[int, str, Any]]]
    segments: tuple[int, ...] | None  # see _segments_of
    special: frozenset[int] = field(init=False)  # where Replayer.begin has more to do

    def __post_init__(self) -> None:
        object.__setattr__(self, "special", frozenset(self.nested) | frozenset(self.step_effects))


def stream_key(trajectory: Trajectory) -> str:
    """What a recording's random streams are keyed by: a digest of what each step did (kind,
    name, input and output hashes; not timings or the session id). Two runs with the same
    key draw the same values in rollout ``r``."""
    return canonical.hash_value(
        [[s.kind.value, s.name, s.input_hash, s.output_hash] for s in trajectory.steps]
    )


def _prepared(trajectory: Trajectory) -> tuple[list[Decision | None], str, _Shape]:
    """Per recording, built once and shared by its rollouts: the decisions that serve a step
    exactly as recorded (the same in every rollout, never changed once made), the key of
    its random streams - a digest of what each step did (kind, name, input and output
    hashes; not timings), so the same recorded content always replays the same way - and
    its :class:`_Shape`."""
    key = id(trajectory)
    entry = _PREPARED.get(key)
    if entry is not None and entry[0]() is trajectory:
        return entry[1], entry[2], entry[3]
    decisions: list[Decision | None] = [None] * len(trajectory.steps)
    content = stream_key(trajectory)
    segments = _segments_of(trajectory)
    # a step's own now() / uuid() values, by its position here (keyed by stream segment)
    local = {segment: i for i, segment in enumerate(segments or ())}
    step_effects: dict[int, list[tuple[int, str, Any]]] = {}
    for effect in trajectory.effects:
        if isinstance(effect[1], str) and effect[1].endswith("@step"):
            position = local.get(effect[0]) if segments else effect[0]
            if position is not None:
                step_effects.setdefault(position, []).append(tuple(effect))  # type: ignore[arg-type]
    shape = _Shape(*_nesting(trajectory), step_effects, segments)
    ref = weakref.ref(trajectory, lambda _r, key=key: _PREPARED.pop(key, None))
    _PREPARED[key] = (ref, decisions, content, shape)
    return decisions, content, shape


def _segments_of(trajectory: Trajectory) -> tuple[int, ...] | None:
    """The stream segment of each position of a run recorded from a rollout that dropped
    steps (a fork child whose intervention removed a step, or the steps a forced or removed
    step had started), from its metadata: ``segments[i]`` is the segment the rollout was at
    when the step at index ``i`` began, the last entry the one it ended at. Its body's
    ``ctx.rng``, ``now()`` and ``uuid()`` were keyed by those, so a replay of the run keys
    them the same way. ``None`` for every other run (segment = position)."""
    segments = trajectory.metadata.get("segments")
    if (
        isinstance(segments, (list, tuple))
        and len(segments) == len(trajectory.steps) + 1
        and all(type(x) is int for x in segments)
        and all(a < b for a, b in itertools.pairwise(segments))
    ):
        return tuple(segments)
    return None


def _nesting(trajectory: Trajectory) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """Where the recording started steps inside others (their produce or observe called
    ``ctx.llm`` / ``tool`` / ``memory``: :meth:`Trajectory.enclosing`):

    * position → how many steps were started inside its produce, and how many inside its
      observe, for steps whose descendants are exactly the positions right after them,
      the produce's first (descendants with another step between them, one started
      concurrently from another thread or task, are left out: a replay that skips such a
      step's descendants diverges after it, as it says);
    * position of a nested step → position of the outermost step it was started inside.
    """
    steps = trajectory.steps
    found: dict[int, tuple[list[int], list[int]]] = {}  # ancestor -> (produce, observe)
    outermost: dict[int, int] = {}
    for step in steps:
        if step.within is None:
            continue
        enclosing = trajectory.enclosing(step.index)
        # its phase under an ancestor is that of the ancestor's child it descends from
        for ancestor, child in zip(enclosing, [step.index, *enclosing], strict=False):
            found.setdefault(ancestor, ([], []))[steps[child].within_observe].append(step.index)
        outermost[step.index] = enclosing[-1]
    nested = {}
    for k, (in_produce, in_observe) in found.items():
        a, b = len(in_produce), len(in_observe)
        if (not a or max(in_produce) == k + a) and (
            not b or (min(in_observe) == k + a + 1 and max(in_observe) == k + a + b)
        ):
            nested[k] = (a, b)
    return nested, outermost


def ensure_verified(trajectory: Trajectory) -> None:
    """Check the chain once per trajectory object (:class:`ChainIntegrityError` if broken)."""
    ref = _VERIFIED.get(id(trajectory))
    if ref is not None and ref() is trajectory:
        return
    trajectory.verify()
    _VERIFIED[id(trajectory)] = weakref.ref(
        trajectory, lambda _r, key=id(trajectory): _VERIFIED.pop(key, None)
    )


def _setup(
    agent_fn: Callable[..., Any],
    trajectory: Trajectory,
    plan: ReplayPlan | None,
    seed: int,
    strict: bool | None,
    verify: bool,
    tracer_provider: trace.TracerProvider | None,
    coupling: Coupling | None,
    context_cls: type[AgentContext],
    stop_if_same_at: int | None = None,
    limits: RolloutLimits | None = None,
) -> tuple[Replayer, AgentContext]:
    plan = plan or _FACTUAL
    if strict is not None and strict != plan.strict:
        plan = replace(plan, strict=strict)
    if verify:
        ensure_verified(trajectory)
    plan.validate(trajectory, getattr(agent_fn, "observation_only", ()))
    driver = Replayer(trajectory, plan, seed)
    _quiet_stops_in_threads()
    driver.coupling = coupling
    driver.stop_if_same_at = stop_if_same_at if coupling is not None else None
    if limits is not None:
        driver.limits = limits
        if limits.seconds is not None:
            driver.deadline = time.monotonic() + limits.seconds
    ctx = context_cls(
        driver,
        session_id=trajectory.session_id,
        seed=trajectory.seed if trajectory.seed is not None else 0,
        task=trajectory.task,
        tracer=make_tracer(tracer_provider) if tracer_provider is not None else None,
        capture_content=False,
    )
    return driver, ctx


def _result(
    driver: Replayer, verifier: Verifier | None, result: Any, error: BaseException | None
) -> ReplayResult:
    if driver.stopped is not None:  # whatever the agent made of it: it did not finish
        result, error = None, driver.stopped
    cut = driver.same_at is not None or driver.rejoined is not None
    if not cut and driver.stopped is None:
        driver.finish()
    if driver.error is not None:
        raise driver.error
    if isinstance(error, PolicyError):  # a broken endpoint, not the agent: no outcome
        raise error
    coupling = driver.coupling
    if driver.same_at is not None:  # stopped on purpose: no outcome, only "reproduces"
        outcome, result, error = Outcome(), None, None
    elif driver.rejoined is not None:
        outcome, result, error = driver.rejoined, None, None
    else:
        known = None
        if (
            coupling is not None
            and not driver.changed
            and driver.divergence is None
            and driver.stopped is None
        ):
            known = coupling.lookup(driver.seed, len(driver.recorded))  # the factual verdict
        if isinstance(known, Outcome):
            outcome = known
        else:
            outcome = judge(
                verifier,
                result,
                error,
                where=(f"replay of {driver.trajectory.session_id!r} (rollout seed {driver.seed})"),
            )
        if coupling is not None and driver.divergence is None and driver.stopped is None:
            at = driver.branch_at if driver.changed else len(driver.recorded)
            if at is not None:
                coupling.note_branch(driver.seed, at, outcome)
    positions = tuple(sorted(driver.steps))
    segments = None
    # (sorted, distinct and from 0: they are 0..n-1 exactly when the last one is n-1)
    dropped = (positions and positions[-1] != len(positions) - 1) or driver.calls != len(positions)
    if driver._shape.segments is not None or dropped:
        ends = (*positions, driver.calls)
        segments = tuple(map(driver.stream_segment, ends))
    return ReplayResult(
        result=result,
        outcome=outcome,
        plan=driver.plan,
        seed=driver.seed,
        session_id=driver.trajectory.session_id,
        diverged=driver.divergence is not None,
        divergence=driver.divergence,
        exception=None if error is None else describe_failure(error),
        live_steps=driver.live_steps,
        served_steps=driver.served_steps,
        held_unresamplable=tuple(driver.held_unresamplable),
        blocked_side_effects=tuple(driver.blocked),
        tokens=driver.tokens,
        tokens_estimated=driver.tokens_estimated,
        rejoined=driver.rejoined is not None,
        branch_at=driver.branch_at,
        coupled_steps=driver.coupled_steps,
        path_end=_path_end(driver),
        same_at=driver.same_at,
        stopped=None if driver.stopped is None else driver.stopped.reason,
        blocked_tools=driver.blocked_tools,
        mocked_tools=driver.mocked,
        positions=positions,
        segments=segments,
        _material=tuple(map(driver.steps.__getitem__, positions)),
        effects=tuple(driver.effects_log),
        replayed=driver.trajectory,
    )


def replay(
    agent_fn: Callable[..., Any],
    trajectory: Trajectory,
    plan: ReplayPlan | None = None,
    *,
    seed: int = 0,
    verifier: Verifier | None = None,
    strict: bool | None = None,
    pass_context: bool = True,
    verify: bool = True,
    tracer_provider: trace.TracerProvider | None = None,
    coupling: Coupling | None = None,
    stop_if_same_at: int | None = None,
    limits: RolloutLimits | None = None,
) -> ReplayResult:
    """Run ``agent_fn`` once against ``trajectory`` under ``plan`` (factual by default).

    ``seed`` keys the random streams of re-drawn steps (rollout ``seed`` of a common-random-
    numbers design). Raises :class:`PlanError` / :class:`ChainIntegrityError` before running
    when the plan does not fit or the chain does not verify, :class:`ReplayDivergenceError`
    in strict mode, :class:`VerifierError` when the verifier misbehaves and
    :class:`~agent_replay.replay.PolicyError` when a resample policy fails (an endpoint down is
    not the agent failing, so it is no rollout outcome). No spans are emitted
    unless ``tracer_provider`` is given. ``coupling`` shares work between rollouts of prefix
    plans (see :class:`Coupling`; the rollout engine manages it). ``limits``
    (:class:`RolloutLimits`) stops a run that goes on too long; it then counts as a failure and
    ``stopped`` says which limit it reached. ``async def`` agents are run to completion (use
    :func:`areplay` inside an event loop).
    """
    if is_async_agent(agent_fn):
        return run_coroutine(
            areplay(
                agent_fn,
                trajectory,
                plan,
                seed=seed,
                verifier=verifier,
                strict=strict,
                pass_context=pass_context,
                verify=verify,
                tracer_provider=tracer_provider,
                coupling=coupling,
                stop_if_same_at=stop_if_same_at,
                limits=limits,
            )
        )
    driver, ctx = _setup(
        agent_fn,
        trajectory,
        plan,
        seed,
        strict,
        verify,
        tracer_provider,
        coupling,
        AgentContext,
        stop_if_same_at,
        limits,
    )
    result, error = run_agent(agent_fn, ctx, trajectory.task, pass_context=pass_context, stop=_STOP)
    return _result(driver, verifier, result, error)


async def areplay(
    agent_fn: Callable[..., Any],
    trajectory: Trajectory,
    plan: ReplayPlan | None = None,
    *,
    seed: int = 0,
    verifier: Verifier | None = None,
    strict: bool | None = None,
    pass_context: bool = True,
    verify: bool = True,
    tracer_provider: trace.TracerProvider | None = None,
    coupling: Coupling | None = None,
    stop_if_same_at: int | None = None,
    limits: RolloutLimits | None = None,
) -> ReplayResult:
    """:func:`replay` for ``async def`` agents, from inside an event loop. A plain ``def``
    agent is run as :func:`replay` runs it (its context's calls are not awaitable)."""
    plain = not is_async_agent(agent_fn)
    driver, ctx = _setup(
        agent_fn,
        trajectory,
        plan,
        seed,
        strict,
        verify,
        tracer_provider,
        coupling,
        AgentContext if plain else AsyncAgentContext,
        stop_if_same_at,
        limits,
    )
    run = (run_agent if plain else arun_agent)(
        agent_fn, ctx, trajectory.task, pass_context=pass_context, stop=_STOP
    )
    if plain:
        result, error = run
    elif driver.deadline is None:
        result, error = await run
    else:
        result, error = await _within_deadline(driver, run)
    return _result(driver, verifier, result, error)


async def _within_deadline(driver: Replayer, run: Any) -> tuple[Any, BaseException | None]:
    """Await an ``async def`` agent's run, cancelling it where it awaits once the rollout is
    out of time; it is then stopped whatever it makes of the cancellation (an agent that
    catches it and answers has still not finished in time)."""
    assert driver.deadline is not None and driver.limits is not None
    task = asyncio.ensure_future(run)
    try:
        done, _ = await asyncio.wait((task,), timeout=max(0.0, driver.deadline - time.monotonic()))
    except asyncio.CancelledError:  # the caller gave up on this rollout: so does the agent
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.wait((task,))  # (its own cleanup may still await)
    if not task.cancelled():
        task.exception()  # retrieved: whatever it ended with is not the outcome
    if driver.stopped is None:
        driver.stopped = driver.limits.exceeded("seconds")
    return None, None
