"""Branches of a recorded run: fork at a step, resume past the end, diff two runs."""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .. import canonical
from ..capture.run import Verifier
from ..errors import PlanError, StoreError
from ..model import Lineage, Step, Trajectory
from ..store import CheckpointStore
from .limits import RolloutLimits
from .plan import ReplayPlan
from .replayer import areplay, replay

__all__ = ["StepDiff", "TrajectoryDiff", "afork", "aresume", "diff", "fork", "resume"]

_MISSING: Any = object()


def _store_of(store: Any) -> CheckpointStore | None:
    if store is None or isinstance(store, CheckpointStore):
        return store
    inner = getattr(store, "store", None)  # a Session
    if isinstance(inner, CheckpointStore):
        return inner
    raise TypeError("store must be a CheckpointStore or a Session")


def fork(
    agent_fn: Callable[..., Any],
    trajectory: Trajectory,
    at_step: int,
    *,
    do: Any = _MISSING,
    remove: bool = False,
    observe: Any = _MISSING,
    model: str | None = None,
    edit: Mapping[str, Any] | None = None,
    session_id: str | None = None,
    seed: int = 0,
    verifier: Verifier | None = None,
    store: Any = None,
    pass_context: bool = True,
    limits: RolloutLimits | None = None,
) -> Trajectory:
    """Record a child branch: the recorded prefix before ``at_step``, one intervention at
    ``at_step``, and a live continuation after it.

    Exactly one of ``do=`` (force the action), ``remove=True``, ``observe=`` (mock the
    observation), ``model=`` (re-draw with a model hint) or ``edit=`` (re-draw with edited
    inputs) is required. The child's lineage names the parent and the fork step; its prefix
    steps are the parent's own (same hashes), so a store keeps them once. With ``store``
    (a CheckpointStore or Session) the child is saved. ``limits``
    (:class:`~agent_replay.replay.RolloutLimits`, none by default) bounds the live part: a
    branch that reaches them is stopped and recorded so (failed, its error naming the
    limit). :func:`afork` is the same inside an event loop.
    """
    branch = _fork(trajectory, at_step, do, remove, observe, model, edit, session_id, store)
    return branch.record(
        agent_fn, seed=seed, verifier=verifier, pass_context=pass_context, limits=limits
    )


async def afork(
    agent_fn: Callable[..., Any],
    trajectory: Trajectory,
    at_step: int,
    *,
    do: Any = _MISSING,
    remove: bool = False,
    observe: Any = _MISSING,
    model: str | None = None,
    edit: Mapping[str, Any] | None = None,
    session_id: str | None = None,
    seed: int = 0,
    verifier: Verifier | None = None,
    store: Any = None,
    pass_context: bool = True,
    limits: RolloutLimits | None = None,
) -> Trajectory:
    """:func:`fork` for ``async def`` agents, from inside an event loop (a plain ``def`` agent
    is run as :func:`fork` runs it)."""
    branch = _fork(trajectory, at_step, do, remove, observe, model, edit, session_id, store)
    return await branch.arecord(
        agent_fn, seed=seed, verifier=verifier, pass_context=pass_context, limits=limits
    )


def resume(
    agent_fn: Callable[..., Any],
    trajectory: Trajectory,
    *,
    session_id: str | None = None,
    seed: int = 0,
    verifier: Verifier | None = None,
    store: Any = None,
    pass_context: bool = True,
    limits: RolloutLimits | None = None,
) -> Trajectory:
    """Fast-forward through the recording and continue live past its end.

    Every recorded step is served as recorded; calls beyond the recording run live (side
    effects included: this continues the real run). A run that crashed while recording picks
    up where it stopped: when the crash came from its last step's failure (a tool that could
    not reach its service), that step runs again live. With ``store`` the resumed run is saved.
    ``limits`` as for :func:`fork`. :func:`aresume` is the same inside an event loop.
    """
    branch = _resume(trajectory, session_id, store)
    return branch.record(
        agent_fn, seed=seed, verifier=verifier, pass_context=pass_context, limits=limits
    )


async def aresume(
    agent_fn: Callable[..., Any],
    trajectory: Trajectory,
    *,
    session_id: str | None = None,
    seed: int = 0,
    verifier: Verifier | None = None,
    store: Any = None,
    pass_context: bool = True,
    limits: RolloutLimits | None = None,
) -> Trajectory:
    """:func:`resume` for ``async def`` agents, from inside an event loop (a plain ``def``
    agent is run as :func:`resume` runs it)."""
    branch = _resume(trajectory, session_id, store)
    return await branch.arecord(
        agent_fn, seed=seed, verifier=verifier, pass_context=pass_context, limits=limits
    )


def _fork(
    trajectory: Trajectory,
    at_step: int,
    do: Any,
    remove: bool,
    observe: Any,
    model: str | None,
    edit: Mapping[str, Any] | None,
    session_id: str | None,
    store: Any,
) -> _Branch:
    chosen = [
        name
        for name, given in (
            ("do", do is not _MISSING),
            ("remove", remove),
            ("observe", observe is not _MISSING),
            ("model", model is not None),
            ("edit", edit is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        raise PlanError(
            f"fork needs exactly one intervention (do=, remove=True, observe=, "
            f"model= or edit=); got {chosen or 'none'}"
        )
    try:
        if isinstance(at_step, bool):
            raise TypeError
        at_step = operator.index(at_step)  # (a NumPy integer will do)
    except TypeError:
        raise PlanError(f"at_step must be a step index (an int); got {at_step!r}") from None
    if not 0 <= at_step < len(trajectory.steps):
        raise PlanError(
            f"fork at step {at_step}, but {trajectory.session_id!r} has steps "
            f"0..{len(trajectory.steps) - 1}"
        )
    enclosing = trajectory.enclosing(at_step)
    if enclosing:
        outer = enclosing[-1]
        raise PlanError(
            f"step {at_step} ({trajectory.steps[at_step].label}) was started inside step "
            f"{outer} ({trajectory.steps[outer].label}): a fork holds every step before it, "
            f"step {outer} included, which serves step {at_step} as recorded, so the "
            f"intervention would never apply; fork at step {outer}"
        )
    plan = ReplayPlan(hold_before=at_step)  # the recorded prefix; the rest runs live
    intervention: dict[str, Any]
    if do is not _MISSING:
        plan, intervention = plan.force(at_step, do), {"do": do}
    elif remove:
        plan, intervention = plan.remove(at_step), {"remove": True}
    elif observe is not _MISSING:
        plan, intervention = plan.observe(at_step, observe), {"observe": observe}
    elif model is not None:
        # the fork step by name (so a step no policy can re-draw is refused, as do= is), and
        # the steps after it, which run live, with it
        plan, intervention = plan.swap_model(model).swap_model(model, at_step), {"model": model}
    else:
        plan = plan.edit(at_step, edit)  # type: ignore[arg-type]
        intervention = {"edit": dict(edit)}  # type: ignore[arg-type]
    return _Branch(
        trajectory,
        plan,
        session_id or _free_id(store, f"{trajectory.session_id}-fork-{at_step}"),
        Lineage(trajectory.session_id, at_step, intervention),
        "fork",
        _claimed(store, session_id),
    )


def _resume(trajectory: Trajectory, session_id: str | None, store: Any) -> _Branch:
    steps = trajectory.steps
    crashed = bool(steps) and steps[-1].error is not None
    if crashed and trajectory.outcome is not None and trajectory.outcome.error is not None:
        # the failed step runs again: with the steps it was started inside, which failed
        # with it (a served one would raise its recorded failure again)
        last = len(steps) - 1
        cut = (trajectory.enclosing(last) or [last])[-1]
        trajectory = replace(trajectory, steps=steps[:cut])  # a prefix of a chain is a chain
    return _Branch(
        trajectory,
        replace(ReplayPlan.factual(), resume=True),
        session_id or _free_id(store, f"{trajectory.session_id}-resumed"),
        Lineage(trajectory.session_id, len(trajectory.steps), {"resume": True}),
        "resume",
        _claimed(store, session_id),
    )


@dataclass(frozen=True)
class _Branch:
    """A child run to record: ``trajectory`` replayed under ``plan``, saved as
    ``session_id`` with ``lineage`` (to ``store`` when there is one)."""

    trajectory: Trajectory
    plan: ReplayPlan
    session_id: str
    lineage: Lineage
    source: str
    store: CheckpointStore | None

    def record(self, agent_fn: Callable[..., Any], **options: Any) -> Trajectory:
        """Run the branch (``options`` as :func:`replay` takes them) and save it."""
        self._check(options.get("limits"))
        return self._saved(replay(agent_fn, self.trajectory, self.plan, **options))

    async def arecord(self, agent_fn: Callable[..., Any], **options: Any) -> Trajectory:
        self._check(options.get("limits"))
        return self._saved(await areplay(agent_fn, self.trajectory, self.plan, **options))

    def _check(self, limits: RolloutLimits | None) -> None:
        """A step limit counts the steps served before the branch point too: one that
        does not reach past them would stop the branch before anything ran live."""
        held = self.lineage.fork_step
        if limits is not None and limits.steps is not None and limits.steps <= held:
            raise PlanError(
                f"the {self.source} serves the first {held} steps of "
                f"{self.trajectory.session_id!r} as recorded and a step limit counts them: "
                f"{limits.steps} steps would stop it before anything ran live; give more "
                f"than {held}"
            )

    def _saved(self, result: Any) -> Trajectory:
        lineage = self.lineage
        if result.divergence is not None and result.divergence.position < lineage.fork_step:
            # the agent left the recording before the intended fork: the branch shares only
            # the steps before that (the divergence is in the child's metadata)
            lineage = replace(lineage, fork_step=result.divergence.position)
        child = result.trajectory(
            self.session_id,
            lineage=lineage,
            task=self.trajectory.task,
            seed=self.trajectory.seed,
            metadata={"source": self.source},
        )
        if self.store is not None:
            self.store.save(child, replace=False)
        return child


def _claimed(store: Any, session_id: str | None) -> CheckpointStore | None:
    """The store to save a branch to, refusing a ``session_id`` it already holds before
    anything runs."""
    target = _store_of(store)
    if target is not None and session_id is not None and session_id in target:
        raise StoreError(
            f"session {session_id!r} already exists in the store; give the new branch another id"
        )
    return target


def _free_id(store: Any, wanted: str) -> str:
    """``wanted``, or ``wanted-2``, ``wanted-3``, ... when the store already holds it: a
    second fork at the same step gets its own default id."""
    target = _store_of(store)
    if target is None or wanted not in target:
        return wanted
    n = 2
    while f"{wanted}-{n}" in target:
        n += 1
    return f"{wanted}-{n}"


@dataclass(frozen=True)
class StepDiff:
    """One step of each run side by side (or of one, when the other has no counterpart);
    ``changes`` names what differs. ``index`` is the step's position in ``a`` (in ``b`` for
    a step only ``b`` has), ``index_b`` its position in ``b``."""

    index: int
    a: str | None
    b: str | None
    changes: tuple[str, ...]
    a_output: Any = None
    b_output: Any = None
    index_b: int | None = None

    @property
    def same(self) -> bool:
        """Whether the two steps did the same thing: differences only in ``metadata`` (when
        they ran, their span ids) are listed but are no divergence."""
        return all(change == "metadata" for change in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "index_b": self.index_b,
            "a": self.a,
            "b": self.b,
            "same": self.same,
            "changes": list(self.changes),
            "a_output": self.a_output,
            "b_output": self.b_output,
        }


@dataclass(frozen=True)
class TrajectoryDiff:
    """Where two runs part ways (``first_divergence``, ``None`` if they never do) and a
    per-step comparison."""

    a: str
    b: str
    first_divergence: int | None
    steps: tuple[StepDiff, ...]
    outcome_a: dict[str, Any] | None
    outcome_b: dict[str, Any] | None

    def __getitem__(self, key: str) -> Any:  # the seed returned a dict
        return self.to_dict()[key]

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "first_divergence": self.first_divergence,
            "steps": [s.to_dict() for s in self.steps],
            "outcome_a": self.outcome_a,
            "outcome_b": self.outcome_b,
        }

    def to_text(self) -> str:
        lines = [
            f"diff {self.a} .. {self.b}: "
            + (
                "the same steps"
                if self.first_divergence is None
                else f"first divergence at step {self.first_divergence}"
            )
        ]
        for s in self.steps:
            mark = " " if s.same else "*"
            where = str(s.index) if s.index_b in (s.index, None) else f"{s.index}/{s.index_b}"
            lines.append(
                f"{mark} {where:>5}  {s.a or '-':<32} {s.b or '-':<32} {', '.join(s.changes)}"
            )
        return "\n".join(lines)


def diff(a: Trajectory, b: Trajectory) -> TrajectoryDiff:
    """Compare two runs step by step (operation, inputs, output, agent). Steps are paired by
    operation in order (:class:`difflib.SequenceMatcher` over kind and name), so a step one
    run has and the other lacks (a removed step, an extra tool call) shows as missing once
    instead of shifting every later step against the wrong one."""
    rows = []
    first = None
    for ia, ib in _aligned(a.steps, b.steps):
        sa = a.steps[ia] if ia is not None else None
        sb = b.steps[ib] if ib is not None else None
        changes = _changes(sa, sb)
        index = ia if ia is not None else ib
        if first is None and any(change != "metadata" for change in changes):
            first = index  # timing alone (a second run of the same steps) is no divergence
        rows.append(
            StepDiff(
                index,
                sa.label if sa else None,
                sb.label if sb else None,
                tuple(changes),
                canonical.plain_json(sa.output) if sa else None,
                canonical.plain_json(sb.output) if sb else None,
                ib,
            )
        )
    return TrajectoryDiff(
        a.session_id,
        b.session_id,
        first,
        tuple(rows),
        None if a.outcome is None else a.outcome.to_dict(),
        None if b.outcome is None else b.outcome.to_dict(),
    )


def _aligned(a: tuple[Step, ...], b: tuple[Step, ...]) -> list[tuple[int | None, int | None]]:
    """Pairs of positions ``(in a, in b)``, ``None`` for a step without counterpart. The
    prefix the two chains share (equal step hashes: the same steps up to there) pairs first;
    the rest by operation (after a removed step, matching operations alone paired the
    parent's second ``plan`` with the child's first, and named a shared step as the first
    divergence)."""
    shared = 0
    while shared < min(len(a), len(b)) and a[shared].step_hash == b[shared].step_hash:
        shared += 1
    pairs: list[tuple[int | None, int | None]] = [(k, k) for k in range(shared)]
    keys_a = [(s.kind.value, s.name) for s in a[shared:]]
    keys_b = [(s.kind.value, s.name) for s in b[shared:]]
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for _tag, a1, a2, b1, b2 in matcher.get_opcodes():
        a1, a2, b1, b2 = a1 + shared, a2 + shared, b1 + shared, b2 + shared
        common = min(a2 - a1, b2 - b1)  # equal or replaced blocks pair up in order
        pairs += [(a1 + k, b1 + k) for k in range(common)]
        pairs += [(i, None) for i in range(a1 + common, a2)]
        pairs += [(None, j) for j in range(b1 + common, b2)]
    return pairs


def _changes(a: Step | None, b: Step | None) -> list[str]:
    if a is None or b is None:
        return ["missing in " + ("a" if a is None else "b")]
    if a.step_hash == b.step_hash:
        return []
    changes = []
    if (a.kind, a.name) != (b.kind, b.name):
        changes.append("operation")
    # equal content whose dicts differ only in key order has equal hashes and other blobs:
    # the agent saw another order (a store before schema 4 kept none: its dicts are sorted)
    for what, ours, theirs in (
        ("inputs", (a.input_hash, a.input_address), (b.input_hash, b.input_address)),
        ("output", (a.output_hash, a.output_address), (b.output_hash, b.output_address)),
    ):
        if ours[0] != theirs[0]:
            changes.append(what)
        elif ours[1] != theirs[1]:
            changes.append(f"{what} key order")
    if a.agent != b.agent:
        changes.append("agent")
    return changes or ["metadata"]
