"""The ``ctx`` an agent routes its non-deterministic work through.

``ctx.llm`` / ``ctx.tool`` / ``ctx.memory`` each make one *step*: a named operation with
inputs, whose ``produce`` callable is the step's policy (it returns the action) and whose
optional ``observe`` callable is the environment (it turns the action into an observation).
``ctx.rng``, ``ctx.now()`` and ``ctx.uuid()`` are the only sources of randomness, time and
identifiers an agent should use; they are keyed so that a replay reproduces them.

The same context class serves recording and replay: a *driver* decides, for each call, whether
to run the policy live or serve a recorded value (and what to do with the observation), and
collects the resulting step. The recorder is one driver, the replayer another. Sync agents get
:class:`AgentContext`, ``async def`` agents :class:`AsyncAgentContext` (awaitable steps, and
``produce`` / ``observe`` may be coroutines).

``produce`` takes no argument, or one required positional argument: the step's inputs as the
driver presents them (edited when a replay plan edits the context). Keyword names
``produce``, ``observe``, ``side_effects``, ``resamplable``, ``default``, ``agent``,
``operation`` and ``mock`` are reserved; every other keyword is an input of the step.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import inspect
import json
import os
import random
import sys
import threading
import time
import uuid as _uuid
from collections.abc import Callable, Coroutine, Generator, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import trace

from .._version import __version__
from ..canonical import escape_text, escape_texts, plain_json, snapshot, stored_bytes
from ..errors import CanonicalEncodingError, RecordedStepError
from ..model import StepKind
from .seeds import ContextRandom, KeyedRandom

__all__ = [
    "AgentContext",
    "AsyncAgentContext",
    "Decision",
    "Driver",
    "StepCall",
    "current_context",
]

SCOPE_NAME = "agent_replay"
"""Instrumentation scope of the spans the ctx API emits (the span processor skips them)."""

INTERCEPTED_ATTRIBUTE = "agent_replay.intercepted"
"""Set on another instrumentation's span that wraps an intercepted call from outside (see
:mod:`agent_replay.instrument`): the call is stored as a step, so the span processor skips it."""

# ids of such spans, so the span processor's on_end can skip them with one dict lookup instead
# of reading attributes of every span; bounded, oldest forgotten first
CLAIMED_SPANS: dict[int, None] = {}
_MAX_CLAIMED = 4096


def claim_span(span_id: int) -> None:
    """Record that the span ``span_id`` belongs to an intercepted step (see above)."""
    if len(CLAIMED_SPANS) >= _MAX_CLAIMED:
        CLAIMED_SPANS.pop(next(iter(CLAIMED_SPANS)), None)
    CLAIMED_SPANS[span_id] = None


class _ActiveStep(KeyedRandom):
    """The step whose produce/observe is running: its context and model hint, and its own
    random stream (the step *is* its stream: one object per live step)."""

    def __init__(self, ctx: AgentContext, seed: int, model_hint: str | None, position: int) -> None:
        self._state = seed
        self.gauss_next = None
        self.ctx = ctx
        self.model_hint = model_hint
        self.position = position
        self.observing = False  # its observe (the environment), not its produce, is running


# The step whose produce/observe is running, and the run the calling code is inside.
_ACTIVE_STEP: ContextVar[_ActiveStep | None] = ContextVar("agent_replay_active_step", default=None)
_CURRENT: ContextVar[AgentContext | None] = ContextVar("agent_replay_context", default=None)
_AGENT: ContextVar[tuple[AgentContext, str] | None] = ContextVar("agent_replay_agent", default=None)

# Captured before anything can patch them, so ctx.now()/uuid() always read the real sources.
_REAL_TIME = time.time
_REAL_UUID4 = _uuid.uuid4


def current_context() -> AgentContext | None:
    """The recording or replay context the calling code runs inside, if any."""
    return _CURRENT.get()


def effect_key(ctx: AgentContext, kind: str) -> tuple[int, str]:
    """Where a ``now()`` / ``uuid()`` value is recorded and looked up: ``(segment, kind)`` in
    the agent body; ``(step position, kind + "@step")`` inside a running step's produce or
    observe, so that a replay serving the step does not hand its values to the body."""
    step = running_step(ctx)
    return (ctx.position, kind) if step is None else (step, kind + "@step")


def running_step(ctx: AgentContext) -> int | None:
    """Position of the step of ``ctx`` whose produce or observe the calling code runs inside
    (``None`` in the agent's own body)."""
    active = _running(ctx)
    return None if active is None else active.position


def _running(ctx: AgentContext) -> _ActiveStep | None:
    active = _ACTIVE_STEP.get()
    return active if active is not None and active.ctx is ctx else None


@dataclass(slots=True)
class StepCall:
    """A live call of ``ctx.llm`` / ``ctx.tool`` / ``ctx.memory`` as the agent made it."""

    kind: StepKind
    name: str
    inputs: dict[str, Any]
    produce: Callable[..., Any] | None
    observe: Callable[[Any], Any] | None = None
    side_effects: bool = False
    resamplable: bool = True
    default: Any = None
    agent: str | None = None
    operation: str | None = None
    attributes: dict[str, Any] | None = None  # extra facts a policy reports (token usage)
    mock: Callable[..., Any] | None = None  # run in place of a side effect a replay cannot hold


@dataclass(slots=True)
class Decision:
    """What a driver wants done for one call.

    ``run_produce`` runs the policy live (else ``action`` is served); ``run_observe`` runs the
    environment on the action (else ``observation`` is served when ``observed``). ``removed``
    skips the step and hands the agent ``StepCall.default``. ``error`` re-raises a recorded
    failure instead of serving a value; ``exception`` is raised as is (a refused side
    effect). ``seed`` keys the step's random stream; ``inputs`` is what ``produce`` sees.
    ``served`` marks a step served exactly as recorded (the context then skips timing and
    tracing and commits with no result). ``state`` is the driver's own bookkeeping for
    :meth:`Driver.commit`.
    """

    position: int
    inputs: Any
    seed: int
    run_produce: bool = True
    action: Any = None
    run_observe: bool = False
    observation: Any = None
    observed: bool = False
    removed: bool = False
    error: Mapping[str, Any] | None = None
    exception: BaseException | None = None
    served: bool = False
    model_hint: str | None = None
    state: Any = None


@dataclass(slots=True)
class StepResult:
    """What happened when a decision was carried out."""

    action: Any
    observation: Any
    observed: bool
    error: dict[str, Any] | None
    started_ns: int
    ended_ns: int
    trace_id: str | None
    span_id: str | None
    parent_span_id: str | None
    within: int | None = None  # position of the step whose produce/observe made this call
    within_observe: bool = False  # ... and it was that step's observe
    inputs: Any = None  # the step's inputs as they were when it was called (a copy)

    def detach(self) -> None:
        """Hold copies of the action and observation (:func:`canonical.snapshot`), so that
        what the agent later does to the objects it got back cannot change the record.
        Raises :class:`~agent_replay.errors.CanonicalEncodingError` for a value that has no
        canonical form."""
        self.action = snapshot(self.action)
        if self.observed:
            self.observation = snapshot(self.observation)


class Driver(Protocol):
    """Decides each step of a run and collects the outcome (recorder, replayer, ...).

    ``begin`` runs under the context's position lock, so it may move ``ctx.position`` past
    positions the run will not call (steps the recording started inside a step that is not
    run live)."""

    def begin(self, ctx: AgentContext, call: StepCall, position: int) -> Decision: ...

    def commit(
        self, ctx: AgentContext, call: StepCall, decision: Decision, result: StepResult | None
    ) -> None: ...

    def body_seed(self, segment: int) -> int: ...

    def effect(self, ctx: AgentContext, kind: str, live: Callable[[], Any]) -> Any: ...


def _step_method(kind: StepKind, doc: str) -> Callable[..., Any]:
    """``ctx.llm`` / ``ctx.tool`` / ``ctx.memory``: one signature, one body; only the step kind
    (and the docstring) differ."""

    def step(
        self: AgentContext,
        name: str,
        produce: Callable[..., Any] | None = None,
        *,
        observe: Callable[[Any], Any] | None = None,
        side_effects: bool = False,
        resamplable: bool | None = None,
        default: Any = None,
        agent: str | None = None,
        operation: str | None = None,
        mock: Callable[..., Any] | None = None,
        **inputs: Any,
    ) -> Any:
        if mock is not None:
            check_mock(mock, side_effects, f"{kind.value} {name!r}")
        call = StepCall(
            kind,
            name,
            inputs,
            produce,
            observe,
            side_effects,
            (not side_effects) if resamplable is None else resamplable,
            default,
            agent if agent is not None else self._acting_agent(),
            operation,
            None,
            mock,
        )
        return self._run(call)

    step.__name__ = kind.value
    step.__qualname__ = f"AgentContext.{kind.value}"
    step.__doc__ = doc
    return step


def check_mock(mock: Any, side_effects: bool, what: str) -> None:
    """Refuse a ``mock`` that is not callable, or one on a step without side effects (a
    replay runs such a step itself: the mock would never run, and the real call would)."""
    if not callable(mock):
        raise TypeError(f"{what}: mock= must be callable (like produce), not {type(mock).__name__}")
    if not side_effects:
        raise ValueError(
            f"{what}: mock= is what a replay runs in place of a side-effecting tool; without "
            "side_effects=True the tool itself runs in every rollout (declare side_effects=True)"
        )


class AgentContext:
    """The handle a synchronous agent receives as its first argument.

    Steps may begin from several threads (positions are taken under a lock), but concurrent
    steps are numbered in the order they start, so a replay binds them deterministically only
    when they start in a deterministic order. Use one context per run.
    """

    def __init__(
        self,
        driver: Driver,
        *,
        session_id: str,
        seed: int,
        task: Any = None,
        tracer: trace.Tracer | None = None,
        capture_content: bool | None = None,
    ) -> None:
        self._driver = driver
        self.session_id = session_id
        self.seed = seed
        self.task = task
        self._tracer = tracer
        self._capture_content = (
            content_capture_enabled() if capture_content is None else capture_content
        )
        self.position = 0  # steps begun so far: the current body segment
        # agents that start steps from worker threads must never get two steps one position
        self._position_lock = threading.Lock()
        self._body: dict[int, random.Random] = {}
        self.rng: random.Random = ContextRandom(self._current_rng)

    # -- randomness, time, ids ------------------------------------------------------------

    def _current_rng(self) -> random.Random:
        active = _ACTIVE_STEP.get()
        if active is not None and active.ctx is self:
            return active
        segment = self.position
        stream = self._body.get(segment)
        if stream is None:
            stream = self._body[segment] = KeyedRandom(self._driver.body_seed(segment))
        return stream

    @property
    def model_hint(self) -> str | None:
        """The model a replay plan asks the running step to use (``None``: its own choice)."""
        active = _ACTIVE_STEP.get()
        return active.model_hint if active is not None and active.ctx is self else None

    def now(self) -> float:
        """Wall-clock seconds; recorded, and served back when a replay holds this point."""
        return self._driver.effect(self, "now", _REAL_TIME)

    def uuid(self) -> str:
        """A uuid4 string; recorded, and served back when a replay holds this point."""
        return self._driver.effect(self, "uuid", lambda: str(_REAL_UUID4()))

    # -- agents ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def agent(self, name: str) -> Iterator[None]:
        """Attribute the steps inside the block to agent ``name`` (emits ``invoke_agent``)."""
        token = _AGENT.set((self, name))
        span_cm = (
            self._tracer.start_as_current_span(
                f"invoke_agent {name}",
                kind=trace.SpanKind.INTERNAL,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": name,
                    "agent_replay.session.id": self.session_id,
                },
            )
            if self._tracer is not None
            else contextlib.nullcontext()
        )
        try:
            with span_cm:
                yield
        finally:
            _AGENT.reset(token)

    def _acting_agent(self) -> str | None:
        scope = _AGENT.get()
        return scope[1] if scope is not None and scope[0] is self else None

    # -- steps ----------------------------------------------------------------------------

    if TYPE_CHECKING:  # what a type checker sees of the three step methods built below

        def llm(
            self,
            name: str,
            produce: Callable[..., Any] | None = None,
            *,
            observe: Callable[[Any], Any] | None = None,
            side_effects: bool = False,
            resamplable: bool | None = None,
            default: Any = None,
            agent: str | None = None,
            operation: str | None = None,
            mock: Callable[..., Any] | None = None,
            **inputs: Any,
        ) -> Any:
            """A step: ``produce`` returns its action, ``observe(action)`` its observation."""

        tool = memory = llm

    else:
        llm = _step_method(
            StepKind.LLM, """An LLM call named ``name``: ``produce`` returns the model's output."""
        )
        tool = _step_method(
            StepKind.TOOL,
            """A tool call. ``produce`` is the action; ``observe(action)``, if given, executes it.

            ``side_effects=True`` marks a tool that must never run again during replays (it is
            held or served a mock observation). ``mock``, called like ``produce``, is what a
            replay runs in its place when it cannot hold it (the rollout left the recording):
            without one that rollout stops there, a failure.
            """,
        )
        memory = _step_method(
            StepKind.MEMORY,
            """A memory operation (``operation=`` one of the GenAI memory operations, default
            ``search_memory``).""",
        )

    def _begin(self, call: StepCall) -> Decision:
        lock = self._position_lock
        lock.acquire()  # not ``with``: this runs once per step, and ``with`` costs twice as much
        try:  # (the decision too: a driver may move ``position`` past steps it skips)
            position = self.position
            self.position = position + 1
            decision = self._driver.begin(self, call, position)
        finally:
            lock.release()
        return decision

    def _step(self, call: StepCall) -> Any:
        """Run one step through the driver (also the entry point of intercepted calls)."""
        decision = self._begin(call)
        if decision.removed or (decision.served and self._tracer is None):
            return self._shortcut(call, decision)
        steps = self._step_plan(call, decision)
        try:
            request = next(steps)
            while True:
                try:
                    value = _run_request(request)
                except BaseException as exc:
                    request = steps.throw(exc)
                else:
                    request = steps.send(value)
        except StopIteration as stop:
            return stop.value

    _run = _step  # how ctx.llm / tool / memory run a step (the async context awaits)

    def _shortcut(self, call: StepCall, decision: Decision) -> Any:
        """A removed step (its declared default) or one served exactly as recorded: nothing
        runs, nothing new to time or trace."""
        if decision.removed:
            return call.default
        self._driver.commit(self, call, decision, None)
        return decision.observation if decision.observed else decision.action

    def _step_plan(self, call: StepCall, decision: Decision) -> Generator[tuple, Any, Any]:
        """One step, shared by sync and async agents: a generator that yields each policy call
        the driver asks for (``produce``, then ``observe``) for the caller to run - directly,
        or awaiting it - receives its result, and returns the step's value."""
        span = span_token = None
        if self._tracer is not None:
            span, span_token = self._start_span(call, decision)
        live = decision.run_produce or decision.run_observe
        running = (
            _ActiveStep(self, decision.seed, decision.model_hint, decision.position)
            if live
            else None
        )
        active = _ACTIVE_STEP.set(running) if running is not None else None
        try:  # the inputs as called: produce may change the objects it is given (a messages
            # list it appends its answer to), and the step records what was asked
            called = snapshot(decision.inputs)
        except CanonicalEncodingError:  # sealing reports such a value, naming its step
            called = decision.inputs
        started = time.time_ns()
        action = observation = error = None
        observed = False
        try:
            if decision.exception is not None:
                raise decision.exception
            if decision.error is not None:
                raise rebuild_exception(decision.error)
            if decision.run_produce:
                action = yield (_PRODUCE, call.produce, decision)
            else:
                action = decision.action
            if decision.run_observe:
                if running is not None:
                    running.observing = True
                observation, observed = (yield (_OBSERVE, call.observe, action)), True
            elif decision.observed:
                observation, observed = decision.observation, True
        except BaseException as exc:
            error = describe_exception(exc)
            raise
        finally:
            if active is not None:
                _ACTIVE_STEP.reset(active)
            self._finish(
                call,
                decision,
                span,
                span_token,
                started,
                action,
                observation,
                observed,
                error,
                called,
            )
        return observation if observed else action

    def _finish(
        self,
        call: StepCall,
        decision: Decision,
        span: Any,
        span_token: Any,
        started: int,
        action: Any,
        observation: Any,
        observed: bool,
        error: dict[str, Any] | None,
        called: Any,
    ) -> None:
        ended = time.time_ns()
        enclosing = _running(self)  # (this step's own was reset): the step it ran inside
        ids = (None, None, None)
        if span is not None:
            ids = _span_ids(span)
            self._end_span(span, span_token, call, decision, action, observation, observed, error)
        self._driver.commit(
            self,
            call,
            decision,
            StepResult(
                action=action,
                observation=observation,
                observed=observed,
                error=error,
                started_ns=started,
                ended_ns=ended,
                trace_id=ids[0],
                span_id=ids[1],
                parent_span_id=ids[2],
                within=None if enclosing is None else enclosing.position,
                within_observe=enclosing is not None and enclosing.observing,
                inputs=called,
            ),
        )

    # -- spans ----------------------------------------------------------------------------

    def _start_span(self, call: StepCall, decision: Decision) -> tuple[Any, Any]:
        if self._tracer is None:
            return None, None
        span = self._tracer.start_span(
            span_name(call),
            kind=_SPAN_KIND[call.kind],
            attributes=span_attributes(
                call, decision.position, self.session_id, decision.model_hint
            ),
        )
        token = trace.context_api.attach(trace.set_span_in_context(span))
        return span, token

    def _end_span(
        self,
        span: Any,
        token: Any,
        call: StepCall,
        decision: Decision,
        action: Any,
        observation: Any,
        observed: bool,
        error: dict[str, Any] | None,
    ) -> None:
        try:
            if self._capture_content:
                for key, value in content_attributes(
                    call, decision.inputs, observation if observed else action
                ).items():
                    span.set_attribute(key, value)
            if error is not None:
                span.set_attribute("error.type", error["type"])
                span.set_status(trace.Status(trace.StatusCode.ERROR, error["message"][:512]))
        finally:
            trace.context_api.detach(token)
            span.end()


class AsyncAgentContext(AgentContext):
    """The handle an ``async def`` agent receives: steps are awaitable.

    ``produce`` and ``observe`` may be plain callables or return awaitables. Concurrent steps
    (``asyncio.gather``) are numbered in the order they are called.
    """

    if TYPE_CHECKING:  # the inherited step methods return an awaitable: a missed ``await``
        # is a type error, not a run recorded without its steps

        def llm(  # type: ignore[override]
            self,
            name: str,
            produce: Callable[..., Any] | None = None,
            *,
            observe: Callable[[Any], Any] | None = None,
            side_effects: bool = False,
            resamplable: bool | None = None,
            default: Any = None,
            agent: str | None = None,
            operation: str | None = None,
            mock: Callable[..., Any] | None = None,
            **inputs: Any,
        ) -> Coroutine[Any, Any, Any]:
            """A step, awaited: ``produce`` returns its action (or an awaitable of it)."""

        tool = memory = llm  # type: ignore[assignment]

    async def _astep(self, call: StepCall) -> Any:
        decision = self._begin(call)
        if decision.removed or (decision.served and self._tracer is None):
            return self._shortcut(call, decision)
        steps = self._step_plan(call, decision)
        try:
            request = next(steps)
            while True:
                try:
                    value = _run_request(request)
                    if inspect.isawaitable(value):
                        value = await value
                except BaseException as exc:
                    request = steps.throw(exc)
                else:
                    request = steps.send(value)
        except StopIteration as stop:
            return stop.value

    _run = _astep  # ``await ctx.llm(...)``: the inherited step methods return this coroutine


# -- helpers shared with the replayer and the span processor -----------------------------------


_PRODUCE, _OBSERVE = 0, 1


def _run_request(request: tuple) -> Any:
    """Run one policy call a step asked for: ``produce`` (with the step's inputs when it takes
    an argument) or ``observe(action)``."""
    kind, fn, argument = request
    if kind != _PRODUCE:
        return fn(argument)
    if fn is None:
        return None
    return fn(argument.inputs) if _takes_argument(fn) else fn()


_ARITY: dict[Any, bool] = {}


def _takes_argument(fn: Callable[..., Any]) -> bool:
    code = getattr(fn, "__code__", None)
    key = code if code is not None else fn
    cached = _ARITY.get(key)
    if cached is None:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            cached = False
        else:
            # only a *required* positional parameter asks for the inputs: lambdas that bind
            # loop variables through defaults (``lambda t=total: ...``) take none
            cached = any(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
                for p in params
            )
        if len(_ARITY) < 10_000:
            _ARITY[key] = cached
    return cached


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """The stored form of an exception a step raised: its class, message and the plain data
    attributes it carries (``retry_after``, ``status_code``: what a handler reads), so that a
    held replay raises an exception its handler can use as it did."""
    cls = type(exc)
    described: dict[str, Any] = {
        "type": cls.__qualname__,
        "module": cls.__module__,
        "message": exception_text(exc),
    }
    attributes = _plain_attributes(exc)
    if attributes:
        described["attributes"] = attributes
    args = getattr(exc, "args", ())
    if isinstance(args, tuple) and args and all(_plain(a) for a in args):
        # what the exception was built with: ``KeyError('user_id')`` is not ``str()`` of it
        described["args"] = list(args)
    if isinstance(exc, OSError) and exc.errno is not None:
        for name in ("filename", "filename2"):  # not in args, and not in vars() either
            value = getattr(exc, name, None)
            if _plain(value) and value is not None:
                described.setdefault("attributes", {})[name] = value
    # text that cannot be stored as UTF-8 (a lone surrogate in the message) is escaped, as in
    # captured calls: the recording keeps the step instead of failing
    return escape_texts(described)


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN) and not (isinstance(value, str) and len(value) > 2000)


_PLAIN = (str, int, float, bool, type(None))


def _plain_attributes(exc: BaseException) -> dict[str, Any]:
    """The exception's own attributes that are plain data: values, and small JSON-like lists
    and dicts of them (an API error's parsed ``body``); a response object is not."""
    try:
        items = list(vars(exc).items())
    except TypeError:  # no __dict__
        return {}
    out: dict[str, Any] = {}
    for name, value in items:
        if name.startswith("_") or len(out) >= 20:
            continue
        if _plain(value) or _plain_data(value, [_DATA_BUDGET], 0):
            out[name] = copy.deepcopy(value)
    return out


_DATA_BUDGET = 500  # values inside one attribute's lists and dicts


def _plain_data(value: Any, budget: list[int], depth: int) -> bool:
    """Whether ``value`` is a list or ``str``-keyed dict of plain values (nested, small)."""
    budget[0] -= 1
    if budget[0] < 0 or depth > 20:
        return False
    if type(value) is dict:
        return all(
            isinstance(key, str) and _plain(key) and _plain_item(item, budget, depth)
            for key, item in value.items()
        )
    if type(value) is list:
        return all(_plain_item(item, budget, depth) for item in value)
    return False


def _plain_item(value: Any, budget: list[int], depth: int) -> bool:
    if _plain(value):
        budget[0] -= 1
        return budget[0] >= 0
    return _plain_data(value, budget, depth + 1)


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder when the exception's ``__str__`` itself fails (as the
    traceback module prints it): describing a failure must not fail."""
    try:
        return str(exc)
    except Exception:
        return f"<exception str() failed: {type(exc).__qualname__}>"


def rebuild_exception(error: Mapping[str, Any]) -> BaseException:
    """An exception like the recorded one, so that the agent's ``except`` clauses catch it as
    they did: built-ins as themselves; a class the running program has imported (a client's
    ``RateLimitError``, ``asyncio.CancelledError``) as a subclass of it and of
    :class:`RecordedStepError`, made without calling its ``__init__`` (``args`` as recorded
    when they were plain values, else the message, and the plain data attributes it carried
    set again); anything else as
    :class:`RecordedStepError`."""
    name, message = str(error.get("type")), str(error.get("message", ""))
    module = str(error.get("module"))
    recorded_args = error.get("args")
    args = tuple(recorded_args) if isinstance(recorded_args, list) else (message,)
    if module == "builtins":
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            attributes = error.get("attributes") or {}
            if issubclass(cls, OSError) and len(args) == 2 and "filename" in attributes:
                args += (attributes["filename"],)  # OSError(errno, strerror, filename)
            try:
                return cls(*args)
            except Exception:
                with contextlib.suppress(Exception):
                    return cls(message)
    replayed = _replayed_class(module, name)
    if replayed is not None:
        try:
            exc = replayed.__new__(replayed, *args)
            exc.args = args
            exc.type_name = name
            for attribute, value in (error.get("attributes") or {}).items():
                with contextlib.suppress(Exception):  # a read-only property, say
                    # a copy: the handler may change it, the recording must not change
                    setattr(exc, attribute, copy.deepcopy(value))
            return exc
        except Exception:
            pass
    return RecordedStepError(name, message)


_REPLAYED: dict[tuple[str, str], type[BaseException] | None] = {}


def _replayed_class(module: str, qualname: str) -> type[BaseException] | None:
    """``module.qualname`` if already imported (nothing is imported to find it) and an
    exception class, mixed with :class:`RecordedStepError`; ``None`` otherwise."""
    key = (module, qualname)
    if key in _REPLAYED:
        return _REPLAYED[key]
    target: Any = sys.modules.get(module)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if not (
        isinstance(target, type)
        and issubclass(target, BaseException)
        and target.__module__ != "builtins"
    ):
        return None  # not imported (yet: not remembered, the program may import it later)
    try:
        made: type[BaseException] | None = type(
            target.__name__, (target, RecordedStepError), {"__module__": module}
        )
        made.__qualname__ = qualname
    except TypeError:  # layouts that cannot be combined
        made = None
    if len(_REPLAYED) < 1_000:
        _REPLAYED[key] = made
    return made


def content_capture_enabled() -> bool:
    """Whether GenAI message content may go on spans (the OTel opt-in environment variable)."""
    value = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return value.strip().lower() in ("span_only", "span_and_event", "true", "1")


_SPAN_KIND = {
    StepKind.LLM: trace.SpanKind.CLIENT,
    StepKind.TOOL: trace.SpanKind.INTERNAL,
    StepKind.MEMORY: trace.SpanKind.CLIENT,
    StepKind.EMBEDDING: trace.SpanKind.CLIENT,
}
_OPERATION = {
    StepKind.LLM: "chat",
    StepKind.TOOL: "execute_tool",
    StepKind.AGENT: "invoke_agent",
    StepKind.RETRIEVAL: "retrieval",
    StepKind.EMBEDDING: "embeddings",
}


def operation_name(call: StepCall) -> str:
    if call.kind is StepKind.MEMORY:
        return call.operation or "search_memory"
    return _OPERATION.get(call.kind, "span")


def span_name(call: StepCall) -> str:
    return f"{operation_name(call)} {call.name}"


def span_attributes(
    call: StepCall, position: int, session_id: str, model_hint: str | None
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": operation_name(call),
        "agent_replay.session.id": session_id,
        "agent_replay.step.index": position,
        "agent_replay.step.name": call.name,
        "agent_replay.step.kind": call.kind.value,
    }
    if call.kind is StepKind.TOOL:
        attrs["gen_ai.tool.name"] = call.name
        attrs["gen_ai.tool.type"] = "function"
    model = model_hint or call.inputs.get("model")
    if call.kind in (StepKind.LLM, StepKind.EMBEDDING) and isinstance(model, str):
        attrs["gen_ai.request.model"] = model
    if call.agent is not None:
        attrs["gen_ai.agent.name"] = call.agent
    if call.side_effects:
        attrs["agent_replay.step.side_effects"] = True
    return attrs


def content_attributes(call: StepCall, inputs: Any, output: Any) -> dict[str, str]:
    """Opt-in content attributes (strict JSON strings on spans): the GenAI conventions' ones
    for any backend, and ``agent_replay.step.*`` in the store's own encoding, from which a
    receiver gets the exact values back (bytes, sets, NaN: see ``canonical``)."""
    inputs_json = _json(inputs)
    output_json = _json(output)
    attrs = {
        "agent_replay.step.inputs": _stored_json(inputs, inputs_json),
        "agent_replay.step.output": _stored_json(output, output_json),
    }
    if call.kind is StepKind.TOOL:
        attrs["gen_ai.tool.call.arguments"] = inputs_json
        attrs["gen_ai.tool.call.result"] = output_json
    elif call.kind is StepKind.LLM:
        attrs["gen_ai.input.messages"] = json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": inputs_json}]}]
        )
        attrs["gen_ai.output.messages"] = json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": output_json}],
                    "finish_reason": "stop",
                }
            ]
        )
    return attrs


def _json(value: Any) -> str:
    """``value`` as strict JSON text that any backend parses (what has no JSON form as
    ``plain_json`` writes it: no NaN tokens, bytes and other objects as their repr)."""
    try:  # (one encoding for the common case: plain data)
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = json.dumps(plain_json(value), sort_keys=True, ensure_ascii=False)
    return escape_text(text)


def _stored_json(value: Any, plain: str) -> str:
    """``value``'s stored encoding as text (``plain`` when it has none)."""
    try:
        return escape_text(stored_bytes(value).decode("utf-8"))
    except CanonicalEncodingError:
        return plain


def _span_ids(span: Any) -> tuple[str | None, str | None, str | None]:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None, None, None
    parent = getattr(span, "parent", None)
    return (
        format(ctx.trace_id, "032x"),
        format(ctx.span_id, "016x"),
        format(parent.span_id, "016x") if parent is not None else None,
    )


def make_tracer(tracer_provider: trace.TracerProvider | None) -> trace.Tracer:
    """The tracer the ctx API emits on (the global provider unless one is passed)."""
    provider = tracer_provider or trace.get_tracer_provider()
    return provider.get_tracer(SCOPE_NAME, __version__)


_RUNNING: dict[str, int] = {}  # session id -> native runs of it in progress in this process
_RUNNING_LOCK = threading.Lock()


def activate(ctx: AgentContext) -> Any:
    """Make ``ctx`` the ambient context; returns the token for :func:`deactivate`."""
    with _RUNNING_LOCK:
        _RUNNING[ctx.session_id] = _RUNNING.get(ctx.session_id, 0) + 1
    return ctx.session_id, _CURRENT.set(ctx)


def deactivate(token: Any) -> None:
    session_id, inner = token
    _CURRENT.reset(inner)
    with _RUNNING_LOCK:
        left = _RUNNING.get(session_id, 1) - 1
        if left > 0:
            _RUNNING[session_id] = left
        else:
            _RUNNING.pop(session_id, None)


def native_run_in_progress(session_id: str) -> bool:
    """Whether a native run (record or replay) of ``session_id`` is going on in this process:
    its session is not stored yet, so spans captured meanwhile must not take its id."""
    with _RUNNING_LOCK:
        return session_id in _RUNNING


def inside_step() -> bool:
    """Whether the calling code runs inside a recorded or replayed step's policy."""
    return _ACTIVE_STEP.get() is not None
