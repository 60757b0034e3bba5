"""The data model: steps chained by hashes into trajectories.

A :class:`Step` is one GenAI operation (an LLM call, a tool call, a memory operation, ...).
Its ``step_hash`` is ``H(prev_hash, canonical header)`` where the header holds every stored
field and the content hashes of its inputs and outputs, so the last step's hash (the
trajectory's ``head_hash``) is the Merkle root of the whole chain: change any stored byte and
either a content hash, a step hash or the head changes.

Everything here is immutable after construction and safe to share between threads. Values
inside steps (``inputs``, ``action``, ...) are plain data; do not mutate them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from . import canonical
from .canonical import GENESIS_HASH
from .errors import CanonicalEncodingError, ChainIntegrityError

__all__ = [
    "FAILURE_THRESHOLD",
    "GENESIS_HASH",
    "NOT_LOADED",
    "Continuation",
    "Lineage",
    "Outcome",
    "SessionEnd",
    "Step",
    "StepDraft",
    "StepKind",
    "Trajectory",
    "chain_steps",
    "session_header_bytes",
]

#: A run failed when its verifier score is below this.
FAILURE_THRESHOLD = 0.5

_SCHEMA = 1  # version of the hashed header layout; part of every hash


class StepKind(str, enum.Enum):
    """What kind of operation a step is. ``SPAN`` is anything not recognised."""

    LLM = "llm"
    TOOL = "tool"
    MEMORY = "memory"
    AGENT = "agent"
    RETRIEVAL = "retrieval"
    EMBEDDING = "embedding"
    SPAN = "span"

    @classmethod
    def parse(cls, value: Any) -> StepKind:
        """The kind named ``value`` (case-insensitive); ``SPAN`` for anything else."""
        if isinstance(value, StepKind):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            return cls.SPAN


class _NotLoaded:
    """The ``inputs`` of a step loaded without them (``CheckpointStore.load(...,
    inputs=False)``): stored, but neither read nor decoded. Such a step can be placed
    elsewhere in a chain and saved again; anything that needs the value (sealing, replay,
    :meth:`Step.check`) fails on it, since it cannot be encoded."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<inputs not loaded>"


NOT_LOADED: Any = _NotLoaded()
"""See :class:`_NotLoaded`."""


class _Keep(enum.Enum):
    KEEP = "keep"


_KEEP = _Keep.KEEP  # Step.placed: the step's own agent


@dataclass
class StepDraft:
    """A step before it is placed in a chain: what capture, import and replay produce."""

    kind: StepKind
    name: str
    inputs: Any = None
    action: Any = None
    observation: Any = None
    observed: bool = False
    agent: str | None = None
    resamplable: bool = True
    side_effects: bool = False
    error: Mapping[str, Any] | None = None
    started_ns: int | None = None
    ended_ns: int | None = None
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One operation of a trajectory, sealed into the hash chain.

    ``action`` is what the step's policy produced; ``observation`` is what the environment
    returned for it when the two differ (``observed`` says whether there is one). What the
    agent received is :attr:`output`. ``error`` is ``{"type", "message"}`` when the operation
    raised. ``attributes`` holds small non-content facts (model, token usage, tool call id,
    source dialect). Build steps with :func:`chain_steps` or :meth:`Step.seal`.
    """

    index: int
    kind: StepKind
    name: str
    inputs: Any
    action: Any
    observation: Any
    observed: bool
    agent: str | None
    resamplable: bool
    side_effects: bool
    error: Mapping[str, Any] | None
    started_ns: int | None
    ended_ns: int | None
    trace_id: str | None
    span_id: str | None
    parent_span_id: str | None
    attributes: Mapping[str, Any]
    prev_hash: str
    input_hash: str
    output_hash: str
    step_hash: str
    # where the stored bytes of inputs / output payload are kept, when that is not their
    # content hash (a dict in them has its keys out of sorted order: see canonical); sealed
    input_blob: str = field(repr=False, default="")
    output_blob: str = field(repr=False, default="")
    # stored bytes of inputs / output payload, kept so that storing never re-encodes
    input_bytes: bytes = field(repr=False, compare=False, default=b"")
    output_bytes: bytes = field(repr=False, compare=False, default=b"")
    header_bytes: bytes = field(repr=False, compare=False, default=b"")

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def seal(
        cls,
        draft: StepDraft,
        index: int,
        prev_hash: str = GENESIS_HASH,
        *,
        memo: canonical.Memo | None = None,
    ) -> Step:
        """Place ``draft`` at ``index`` after ``prev_hash``; computes every hash. ``memo``
        lets the steps of one chain share the encoding of repeated content (see
        :class:`canonical.Memo`); the bytes and hashes are the same without it.

        Raises :class:`CanonicalEncodingError` naming the step when a value cannot be
        encoded deterministically.
        """
        kind = StepKind.parse(draft.kind)
        try:
            inputs = canonical.encode_stored(draft.inputs, memo)
        except CanonicalEncodingError as exc:
            raise exc.located(f"{_where(index, kind, draft)} inputs") from None
        payload = _output_payload(draft.action, draft.observation, draft.observed, draft.error)
        try:
            output = canonical.encode_stored(payload, memo)
        except CanonicalEncodingError as exc:
            raise exc.located(f"{_where(index, kind, draft)} output") from None
        # A frozen dataclass's __init__ sets each field through object.__setattr__; filling
        # __dict__ directly makes the same object several times faster (this runs per step).
        step = object.__new__(cls)
        fields = step.__dict__
        fields.update(
            index=index,
            kind=kind,
            name=str(draft.name),
            inputs=draft.inputs,
            action=draft.action,
            observation=draft.observation if draft.observed else None,
            observed=bool(draft.observed),
            agent=draft.agent,
            resamplable=bool(draft.resamplable),
            side_effects=bool(draft.side_effects),
            error=dict(draft.error) if draft.error else None,
            started_ns=draft.started_ns,
            ended_ns=draft.ended_ns,
            trace_id=draft.trace_id,
            span_id=draft.span_id,
            parent_span_id=draft.parent_span_id,
            attributes=dict(draft.attributes or {}),
            prev_hash=prev_hash,
            input_hash=inputs.hash,
            output_hash=output.hash,
            step_hash="",
            input_blob="" if inputs.blob == inputs.hash else inputs.blob,
            output_blob="" if output.blob == output.hash else output.blob,
            input_bytes=inputs.data,
            output_bytes=output.data,
            header_bytes=b"",
        )
        try:
            header_bytes = canonical.encode(step.header())
        except CanonicalEncodingError as exc:
            raise exc.located(f"{_where(index, kind, draft)} attributes") from None
        fields["step_hash"] = canonical.digest(header_bytes)
        fields["header_bytes"] = header_bytes
        return step

    def placed(
        self,
        index: int,
        prev_hash: str,
        attributes: Mapping[str, Any] | None = None,
        agent: str | _Keep | None = _KEEP,
    ) -> Step:
        """The same step at ``index`` after ``prev_hash`` (with other ``attributes`` and
        ``agent`` if given): its content hashes and bytes are kept, only its header and
        ``step_hash`` are new (the same step :meth:`seal` makes of its draft so changed, without
        encoding its content again)."""
        same_agent = agent is _KEEP or (agent == self.agent and type(agent) is type(self.agent))
        if (
            index == self.index
            and prev_hash == self.prev_hash
            and (attributes is None or attributes is self.attributes)
            and same_agent
        ):
            return self
        step = object.__new__(Step)
        fields = step.__dict__
        fields.update(self.__dict__)
        fields.update(index=index, prev_hash=prev_hash)
        if attributes is not None:
            fields["attributes"] = dict(attributes)
        if not same_agent:
            fields["agent"] = agent
        header_bytes = canonical.encode(step.header())
        fields.update(step_hash=canonical.digest(header_bytes), header_bytes=header_bytes)
        return step

    # -- views ----------------------------------------------------------------------------

    @property
    def output(self) -> Any:
        """What the agent received from this step: the observation if any, else the action."""
        return self.observation if self.observed else self.action

    @property
    def label(self) -> str:
        """``kind:name``, the way steps are named in reports."""
        return f"{self.kind.value}:{self.name}"

    @property
    def input_address(self) -> str:
        """Where :attr:`inputs`' stored bytes are kept: :attr:`input_blob`, else
        :attr:`input_hash` (the two encodings are the same bytes)."""
        return self.input_blob or self.input_hash

    @property
    def output_address(self) -> str:
        """Where the output payload's stored bytes are kept (as :attr:`input_address`)."""
        return self.output_blob or self.output_hash

    @property
    def within(self) -> int | None:
        """Index of the step whose ``produce`` or ``observe`` started this one (``None``: the
        agent called it itself). A replay that serves that step serves this one with it."""
        within = self.attributes.get("within_step")
        return within if type(within) is int and 0 <= within < self.index else None

    @property
    def within_observe(self) -> bool:
        """Whether :attr:`within` names a step whose ``observe`` (not its ``produce``)
        started this one."""
        return self.within is not None and self.attributes.get("within_phase") == "observe"

    @property
    def identity(self) -> tuple[str, str, str]:
        """``(kind, name, input_hash)``: how a live call is matched to this recorded step."""
        return (self.kind.value, self.name, self.input_hash)

    def header(self) -> dict[str, Any]:
        """The hashed description of this step: every stored field, content by hash (and by
        where its stored bytes are, when that differs)."""
        header = {
            "v": _SCHEMA,
            "prev": self.prev_hash,
            "index": self.index,
            "kind": self.kind.value,
            "name": self.name,
            "agent": self.agent,
            "resamplable": self.resamplable,
            "side_effects": self.side_effects,
            "timing": [self.started_ns, self.ended_ns],
            "ids": [self.trace_id, self.span_id, self.parent_span_id],
            "attributes": self.attributes,
            "input_hash": self.input_hash,
            "output_hash": self.output_hash,
        }
        if self.input_blob:
            header["input_blob"] = self.input_blob
        if self.output_blob:
            header["output_blob"] = self.output_blob
        return header

    def draft(self) -> StepDraft:
        """An unsealed copy, e.g. to re-chain it at another position."""
        return StepDraft(
            kind=self.kind,
            name=self.name,
            inputs=self.inputs,
            action=self.action,
            observation=self.observation,
            observed=self.observed,
            agent=self.agent,
            resamplable=self.resamplable,
            side_effects=self.side_effects,
            error=self.error,
            started_ns=self.started_ns,
            ended_ns=self.ended_ns,
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_span_id=self.parent_span_id,
            attributes=self.attributes,
        )

    def output_payload(self) -> dict[str, Any]:
        """What :attr:`output_hash` covers: action, observation (if any) and error (if any)."""
        return _output_payload(self.action, self.observation, self.observed, self.error)

    def check(self, memo: canonical.Memo | None = None) -> str | None:
        """Recompute every hash; ``None`` when consistent, else what is wrong. ``memo`` as for
        :meth:`seal` (the steps of one chain share content)."""
        inputs = canonical.encode_stored(self.inputs, memo)
        output = canonical.encode_stored(self.output_payload(), memo)
        if inputs.hash != self.input_hash:
            return "inputs do not match input_hash"
        if output.hash != self.output_hash:
            return "outputs do not match output_hash"
        if inputs.blob != self.input_address:
            return "inputs do not match input_blob"
        if output.blob != self.output_address:
            return "outputs do not match output_blob"
        if canonical.hash_value(self.header()) != self.step_hash:
            return "header does not match step_hash"
        return None


def _where(index: int, kind: StepKind, draft: StepDraft) -> str:
    return f"step {index} ({kind.value}:{draft.name})"


def _output_payload(action: Any, observation: Any, observed: bool, error: Any) -> dict:
    payload: dict[str, Any] = {"action": action}
    if observed:
        payload["observation"] = observation
    if error:
        payload["error"] = dict(error)
    return payload


def session_header_bytes(header: Mapping[str, Any]) -> bytes:
    """The stored bytes of a session header (:meth:`Trajectory.header`): its own fields, and
    those of its outcome and lineage, in sorted order; the task's, result's, metadata's and
    intervention's dicts in theirs. (So a header whose dicts are all in sorted order has its
    canonical bytes, which is what store schema 3 and older wrote and hashed: a session
    they stored has the same digest when loaded.)"""
    fields = dict(sorted(header.items()))
    for name in ("outcome", "lineage"):  # rebuilt by to_dict() in their code order
        if isinstance(fields.get(name), dict):
            fields[name] = dict(sorted(fields[name].items()))
    return canonical.stored_bytes(fields)


def chain_steps(
    drafts: Iterable[StepDraft], prev_hash: str = GENESIS_HASH, start_index: int = 0
) -> tuple[Step, ...]:
    """Seal ``drafts`` in order into a hash chain starting after ``prev_hash``."""
    steps = []
    memo = canonical.Memo()  # the steps of a conversation repeat its earlier messages
    for offset, draft in enumerate(drafts):
        step = Step.seal(draft, start_index + offset, prev_hash, memo=memo)
        steps.append(step)
        prev_hash = step.step_hash
    return tuple(steps)


@dataclass(frozen=True)
class SessionEnd:
    """A stored session seen from its end: its header fields (``session``, whose ``steps`` is
    empty), how many steps its chain has and the last of them. Enough to seal new steps after
    the chain (a :class:`Continuation`) without loading the steps before."""

    session: Trajectory
    n_steps: int
    last: Step | None

    @classmethod
    def of(cls, trajectory: Trajectory) -> SessionEnd:
        """The end of an in-memory trajectory."""
        last = trajectory.steps[-1] if trajectory.steps else None
        return cls(replace(trajectory, steps=()), len(trajectory.steps), last)

    @property
    def head_hash(self) -> str:
        return self.last.step_hash if self.last is not None else GENESIS_HASH


@dataclass(frozen=True)
class Continuation:
    """New steps sealed after a stored chain's :class:`SessionEnd`, and the session they make.

    ``session`` holds the session's new header fields and only the new steps, indexed from
    ``end.n_steps`` and linked to ``end.head_hash``; it is not a whole trajectory, so it is
    never verified or replayed on its own. :meth:`header` is the whole session's header, the
    same dict the whole trajectory's :meth:`Trajectory.header` gives.
    """

    end: SessionEnd
    session: Trajectory

    @classmethod
    def after(
        cls,
        end: SessionEnd,
        session: Trajectory,
        attributes: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> Continuation:
        """``session``'s steps (a chain sealed from genesis) moved after ``end``; the steps at
        the positions ``attributes`` names take those attributes (links that name other steps
        by index move with the steps)."""
        changed = attributes or {}
        prev, index, steps = end.head_hash, end.n_steps, []
        for position, step in enumerate(session.steps):
            step = step.placed(index, prev, changed.get(position))
            steps.append(step)
            prev, index = step.step_hash, index + 1
        return cls(end, replace(session, steps=tuple(steps)))

    @property
    def n_steps(self) -> int:
        return self.end.n_steps + len(self.session.steps)

    def header(self) -> dict[str, Any]:
        header = self.session.header()
        header["n_steps"] = self.n_steps
        if not self.session.steps:
            header["head"] = self.end.head_hash
        return header

    def whole(self, stored: Sequence[Step]) -> Trajectory:
        """The whole trajectory, given the ``end.n_steps`` stored steps before."""
        if len(stored) != self.end.n_steps:
            raise ValueError(f"{len(stored)} stored steps given, the chain has {self.end.n_steps}")
        return replace(self.session, steps=(*stored, *self.session.steps))


@dataclass(frozen=True)
class Outcome:
    """How a run ended.

    ``score`` is the verifier's value in [0, 1] (``None`` when no verifier ran); ``failed`` is
    ``score < 0.5``, or ``True`` when the agent raised (``error`` then holds ``type``,
    ``message`` and ``traceback``). ``result`` is what the agent returned.
    """

    score: float | None = None
    failed: bool | None = None
    result: Any = None
    error: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "failed": self.failed,
            "result": self.result,
            "error": None if self.error is None else dict(self.error),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Outcome | None:
        if data is None:
            return None
        return cls(
            score=data.get("score"),
            failed=data.get("failed"),
            result=data.get("result"),
            error=data.get("error"),
        )

    @classmethod
    def from_score(
        cls, score: float | None, result: Any = None, error: Mapping[str, Any] | None = None
    ) -> Outcome:
        failed = True if error else (None if score is None else score < FAILURE_THRESHOLD)
        return cls(score=score, failed=failed, result=result, error=error)


@dataclass(frozen=True)
class Lineage:
    """Where a branch came from: ``parent_session`` forked at ``fork_step`` by ``intervention``."""

    parent_session: str
    fork_step: int
    intervention: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "parent_session": self.parent_session,
            "fork_step": self.fork_step,
            "intervention": dict(self.intervention),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Lineage | None:
        if data is None:
            return None
        return cls(
            parent_session=data["parent_session"],
            fork_step=int(data["fork_step"]),
            intervention=data.get("intervention") or {},
        )


@dataclass(frozen=True)
class Trajectory:
    """A recorded run: its steps in order plus what is needed to replay and judge it.

    ``effects`` are the values the agent body read from ``ctx.now()`` / ``ctx.uuid()``, as
    ``(segment, kind, value)`` where ``segment`` is the number of steps completed before the
    read; replay serves them back so a held prefix is reproduced exactly. ``metadata`` holds
    ``source`` (``native``, ``otel``, ``import:<format>``), the capture report and anything
    else worth keeping; it is part of the session digest.
    """

    session_id: str
    steps: tuple[Step, ...] = ()
    task: Any = None
    seed: int | None = None
    outcome: Outcome | None = None
    lineage: Lineage | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    effects: tuple[tuple[int, str, Any], ...] = ()

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __getitem__(self, index: int) -> Step:
        return self.steps[index]

    @property
    def head_hash(self) -> str:
        """The last step's hash: the Merkle root of the chain (genesis hash when empty)."""
        return self.steps[-1].step_hash if self.steps else GENESIS_HASH

    # seed-compatible alias
    root_hash = head_hash

    @property
    def failed(self) -> bool | None:
        return None if self.outcome is None else self.outcome.failed

    @property
    def source(self) -> str:
        source = self.metadata.get("source", "native")
        if isinstance(source, str):
            return source
        # any other value as its canonical text: the same after a round trip through the store
        return canonical.encode(source).decode("utf-8", "surrogatepass")

    @property
    def agents(self) -> list[str]:
        """Distinct acting agents, in order of first appearance."""
        seen: dict[str, None] = {}
        for step in self.steps:
            if step.agent is not None:
                seen.setdefault(step.agent, None)
        return list(seen)

    def header(self) -> dict[str, Any]:
        """Everything about the session except its steps, as hashed into :attr:`digest`."""
        return {
            "v": _SCHEMA,
            "session_id": self.session_id,
            "head": self.head_hash,
            "n_steps": len(self.steps),
            "task": self.task,
            "seed": self.seed,
            "outcome": None if self.outcome is None else self.outcome.to_dict(),
            "lineage": None if self.lineage is None else self.lineage.to_dict(),
            "metadata": self.metadata,
            "effects": [list(e) for e in self.effects],
        }

    def enclosing(self, index: int) -> list[int]:
        """The steps the step at ``index`` was started inside (:attr:`Step.within`), the
        innermost first: empty for a step the agent called itself."""
        out = []
        outer = self.steps[index].within
        while outer is not None:
            out.append(outer)
            outer = self.steps[outer].within
        return out

    @property
    def digest(self) -> str:
        """Hash of :meth:`header` as stored (:func:`session_header_bytes`): covers the chain
        (through its head) and the session data, down to the order of the task's keys."""
        try:
            return canonical.digest(session_header_bytes(self.header()))
        except CanonicalEncodingError as exc:
            raise exc.located(f"session {self.session_id}") from None

    def verify(self) -> None:
        """Recompute every hash of the chain; raise :class:`ChainIntegrityError` at the first
        bad step."""
        prev = GENESIS_HASH
        memo = canonical.Memo()  # the steps of a conversation repeat its earlier messages
        for position, step in enumerate(self.steps):
            problem = None
            if step.index != position:
                problem = f"index {step.index} at position {position}"
            elif step.prev_hash != prev:
                problem = "prev_hash does not link to the previous step"
            else:
                problem = step.check(memo)
            if problem:
                raise ChainIntegrityError(
                    f"session {self.session_id!r}: step {position} ({step.label}): {problem}",
                    session_id=self.session_id,
                    step_index=position,
                )
            prev = step.step_hash

    def with_steps(self, drafts: Sequence[StepDraft]) -> Trajectory:
        """A copy whose chain is ``drafts`` sealed from genesis."""
        return replace(self, steps=chain_steps(drafts))
