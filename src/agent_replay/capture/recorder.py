"""Recording a native agent: every ``ctx`` step runs live, becomes a span and a sealed step."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from opentelemetry import trace

from ..canonical import encode, snapshot
from ..errors import CanonicalEncodingError
from ..model import GENESIS_HASH, Step, StepDraft, StepKind, Trajectory
from .context import (
    AgentContext,
    AsyncAgentContext,
    Decision,
    StepCall,
    StepResult,
    effect_key,
    make_tracer,
    operation_name,
)
from .run import Verifier, arun_agent, is_async_agent, judge, run_agent, run_coroutine
from .seeds import derive_seed, stream_seed

__all__ = ["Recorder", "arecord", "record", "step_draft"]


def step_draft(
    call: StepCall, inputs: Any, result: StepResult, *, attributes: Mapping[str, Any] | None = None
) -> StepDraft:
    """The step a finished call becomes (shared by the recorder and the replayer)."""
    attrs: dict[str, Any] = {}
    if call.kind is StepKind.MEMORY:
        attrs["operation"] = operation_name(call)
    model = call.inputs.get("model")
    if isinstance(model, str):
        attrs["model"] = model
    if call.attributes:
        attrs.update(call.attributes)
    if result.within is not None:  # how a replay that serves the enclosing step skips it
        attrs["within_step"] = result.within
        if result.within_observe:
            attrs["within_phase"] = "observe"
    if attributes:
        attrs.update(attributes)
    return StepDraft(
        kind=call.kind,
        name=call.name,
        inputs=inputs,
        action=result.action,
        observation=result.observation,
        observed=result.observed,
        agent=call.agent,
        resamplable=call.resamplable,
        side_effects=call.side_effects,
        error=result.error,
        started_ns=result.started_ns,
        ended_ns=result.ended_ns,
        trace_id=result.trace_id,
        span_id=result.span_id,
        parent_span_id=result.parent_span_id,
        attributes=attrs,
    )


class Recorder:
    """The recording driver: runs every policy live and seals steps in call order.

    Steps are sealed as soon as every earlier step has finished (nested or concurrent steps
    finish out of order), so a value that cannot be encoded is reported at the step that
    produced it. The first such error is kept and re-raised by :func:`record` even if the
    agent swallowed it.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._step_base = derive_seed(seed, "step")
        self._body_base = derive_seed(seed, "body")
        self.steps: list[Step] = []
        self.effects: list[tuple[int, str, Any]] = []
        self.encoding_error: CanonicalEncodingError | None = None
        self._pending: dict[int, StepDraft] = {}
        self._seal_lock = threading.Lock()  # steps may finish on several threads at once
        self.finished = False  # the agent returned: the recording is closed

    def begin(self, ctx: AgentContext, call: StepCall, position: int) -> Decision:
        if self.finished:  # (a thread the agent left running): refused before it runs
            raise RuntimeError(
                f"step {call.kind.value}:{call.name} started after the agent returned; it was "
                "not run (a recording ends when the agent returns: join the threads and await "
                "the tasks that make steps before returning)"
            )
        return Decision(
            position=position,
            inputs=call.inputs,
            seed=stream_seed(self._step_base, position),
            run_produce=True,
            run_observe=call.observe is not None,
        )

    def commit(
        self, ctx: AgentContext, call: StepCall, decision: Decision, result: StepResult
    ) -> None:
        # the output as it is now: the agent may change the objects it got back (a value that
        # cannot be stored is named, with its step, by sealing)
        with contextlib.suppress(CanonicalEncodingError):
            result.detach()
        draft = step_draft(call, result.inputs, result)  # the inputs as they were called
        with self._seal_lock:
            if self.finished:
                raise RuntimeError(
                    f"step {call.kind.value}:{call.name} finished after the agent returned and "
                    "is not in the recording (join the threads and await the tasks that make "
                    "steps before returning)"
                )
            self._pending[decision.position] = draft
            while len(self.steps) in self._pending:
                draft = self._pending.pop(len(self.steps))
                prev = self.steps[-1].step_hash if self.steps else GENESIS_HASH
                try:
                    self.steps.append(Step.seal(draft, len(self.steps), prev))
                except CanonicalEncodingError as exc:
                    if self.encoding_error is None:
                        self.encoding_error = exc
                    raise

    def body_seed(self, segment: int) -> int:
        return stream_seed(self._body_base, segment)

    def effect(self, ctx: AgentContext, kind: str, live: Callable[[], Any]) -> Any:
        value = live()
        self.effects.append((*effect_key(ctx, kind), value))
        return value


def _as_called(task: Any, metadata: Mapping[str, Any] | None, session_id: str) -> Any:
    """The task as the agent was called with it: an agent that appends to a list it was given
    must not change the recording (a held replay calls it with the recorded task). A task or
    metadata that cannot be stored raises here, naming where, before the agent runs: its side
    effects must not happen for a run that could not be kept."""
    try:
        encode({"task": task, "metadata": dict(metadata or {})})
    except CanonicalEncodingError as exc:
        raise exc.located(f"session {session_id}") from None
    return snapshot(task)


def _prepare(
    task: Any,
    session_id: str | None,
    seed: int,
    tracer_provider: trace.TracerProvider | None,
    capture_content: bool | None,
    context_cls: type[AgentContext],
) -> tuple[Recorder, AgentContext]:
    recorder = Recorder(seed)
    ctx = context_cls(
        recorder,
        session_id=session_id or uuid.uuid4().hex,
        seed=seed,
        task=task,
        tracer=make_tracer(tracer_provider),
        capture_content=capture_content,
    )
    return recorder, ctx


def _finish(
    recorder: Recorder,
    ctx: AgentContext,
    task: Any,
    seed: int,
    verifier: Verifier | None,
    result: Any,
    error: BaseException | None,
    metadata: Mapping[str, Any] | None,
) -> Trajectory:
    with recorder._seal_lock:
        recorder.finished = True
    if recorder.encoding_error is not None:
        raise recorder.encoding_error
    if recorder._pending:  # a step never finished before the agent returned
        raise RuntimeError("steps were still running when the agent returned; await them")
    outcome = judge(verifier, result, error, where=f"session {ctx.session_id}")
    meta = {"source": "native"}
    meta.update(metadata or {})
    trajectory = Trajectory(
        session_id=ctx.session_id,
        steps=tuple(recorder.steps),
        task=task,
        seed=seed,
        outcome=outcome,
        metadata=meta,
        effects=tuple(recorder.effects),
    )
    try:
        trajectory.digest  # noqa: B018 - fail now, naming the session, if it cannot be stored
    except CanonicalEncodingError:
        outcome = type(outcome)(
            score=outcome.score, failed=outcome.failed, result=repr(result), error=outcome.error
        )
        meta["result_repr"] = True
        trajectory = replace(trajectory, outcome=outcome, metadata=meta)
        trajectory.digest  # noqa: B018 - anything else that cannot be stored: raise here
    return trajectory


def record(
    agent_fn: Callable[..., Any],
    task: Any = None,
    *,
    session_id: str | None = None,
    seed: int = 0,
    verifier: Verifier | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    metadata: Mapping[str, Any] | None = None,
    capture_content: bool | None = None,
    pass_context: bool = True,
) -> Trajectory:
    """Run ``agent_fn(ctx, **task)`` once, live, and return its trajectory.

    Every step is emitted as a GenAI span on ``tracer_provider`` (the global one by default).
    An exception from the agent becomes a failed outcome with its traceback; an
    ``async def`` agent is run to completion (use :func:`arecord` inside an event loop).
    Raises :class:`CanonicalEncodingError` naming the step when a step's value cannot be stored,
    and :class:`VerifierError` when the verifier misbehaves.
    """
    if is_async_agent(agent_fn):
        return run_coroutine(
            arecord(
                agent_fn,
                task,
                session_id=session_id,
                seed=seed,
                verifier=verifier,
                tracer_provider=tracer_provider,
                metadata=metadata,
                capture_content=capture_content,
                pass_context=pass_context,
            )
        )
    recorder, ctx = _prepare(task, session_id, seed, tracer_provider, capture_content, AgentContext)
    recorded_task = _as_called(task, metadata, ctx.session_id)
    result, error = run_agent(
        agent_fn, ctx, task, pass_context=pass_context, reraise=(CanonicalEncodingError,)
    )
    return _finish(recorder, ctx, recorded_task, seed, verifier, result, error, metadata)


async def arecord(
    agent_fn: Callable[..., Any],
    task: Any = None,
    *,
    session_id: str | None = None,
    seed: int = 0,
    verifier: Verifier | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    metadata: Mapping[str, Any] | None = None,
    capture_content: bool | None = None,
    pass_context: bool = True,
) -> Trajectory:
    """:func:`record` for ``async def`` agents, from inside an event loop. A plain ``def``
    agent is run as :func:`record` runs it (its context's calls are not awaitable)."""
    plain = not is_async_agent(agent_fn)
    recorder, ctx = _prepare(
        task,
        session_id,
        seed,
        tracer_provider,
        capture_content,
        AgentContext if plain else AsyncAgentContext,
    )
    recorded_task = _as_called(task, metadata, ctx.session_id)
    run = (run_agent if plain else arun_agent)(
        agent_fn, ctx, task, pass_context=pass_context, reraise=(CanonicalEncodingError,)
    )
    result, error = run if plain else await run
    return _finish(recorder, ctx, recorded_task, seed, verifier, result, error, metadata)
