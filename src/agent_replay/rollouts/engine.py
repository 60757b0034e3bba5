"""The rollout engine: runs batches of replays under plans and accounts for their cost.

An :class:`Executor` maps a function over rollout requests: :class:`SerialExecutor`,
:class:`ThreadExecutor` (sync agents whose steps wait on I/O) and :class:`AsyncExecutor`
(``async def`` agents, run concurrently up to a limit). Anything with a ``map`` method of the
same shape plugs in (a distributed executor, for instance). Rollout ``r`` of every plan uses
seed ``r``: common random numbers across plans. An engine made with another ``seed`` draws
from another family of streams (rollout ``r`` then uses a seed derived from ``(seed, r)``):
an independent repetition of the same analysis.

:class:`RolloutEngine` (the seed called it ``AblationEngine``) keeps per-attribution state:
the coupling of prefix-plan rollouts (work shared exactly, see
:class:`~agent_replay.replay.replayer.Coupling`), an optional :class:`RolloutCache` shared by
several analyses, a record per rollout, and the cost: rollouts, live step executions, tokens,
exceptions, divergences, rollouts stopped by their :class:`RolloutLimits` (by default
ten times the recorded run's steps, at least 100: an intervention that sends the agent into
a loop costs a bounded number of steps and counts as a failure).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..capture.run import Verifier, is_async_agent
from ..capture.seeds import derive_seed
from ..errors import VerifierError
from ..model import Trajectory
from ..replay.limits import RolloutLimits
from ..replay.plan import ReplayPlan
from ..replay.replayer import Coupling, ReplayResult, areplay, ensure_verified, replay

__all__ = [
    "AblationEngine",
    "AsyncExecutor",
    "Executor",
    "RolloutCache",
    "RolloutEngine",
    "SerialExecutor",
    "ThreadExecutor",
]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(slots=True)  # not frozen: one is made per rollout, and a frozen init costs 4x
class RolloutRequest:
    plan: ReplayPlan
    seed: int
    coupled: bool = False
    stop_if_same: bool = False


class Executor(Protocol):
    """Runs rollouts. ``map`` keeps order.

    ``map`` is handed a plain function returning each rollout's result, whether the agent is
    ``async def`` or not (a sync executor runs an async agent's event loop per rollout); an
    executor whose ``map`` awaits what the function returns says so with
    ``runs_coroutines = True`` and is handed a coroutine function (a plain agent then runs
    on its loop's thread). An executor may say how many rollouts it runs at once as
    ``concurrency`` (1 if it does not); the search batches its probes to that width.
    """

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]: ...


class SerialExecutor:
    """One rollout after another on the calling thread."""

    concurrency = 1

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        return [fn(item) for item in items]


class ThreadExecutor:
    """Rollouts of a sync agent on a thread pool (useful when steps wait on I/O)."""

    def __init__(self, max_workers: int = 8) -> None:
        self.max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None

    @property
    def concurrency(self) -> int:
        return self.max_workers

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="agent-replay")
        return list(self._pool.map(fn, items))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class AsyncExecutor:
    """Rollouts of an ``async def`` agent, ``concurrency`` at a time on one event loop.

    Called from synchronous code; when the calling thread already runs an event loop, the
    batch runs on a private loop in a helper thread.
    """

    runs_coroutines = True

    def __init__(self, concurrency: int = 64) -> None:
        self.concurrency = concurrency

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> list[Any]:
        async def run_all() -> list[Any]:
            limit = asyncio.Semaphore(self.concurrency)

            async def one(item: T) -> Any:
                async with limit:
                    return await fn(item)

            return list(await asyncio.gather(*(one(item) for item in items)))

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(run_all())
        box: dict[str, Any] = {}

        def in_thread() -> None:
            try:
                box["value"] = asyncio.run(run_all())
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=in_thread, name="agent-replay-async")
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]


class RolloutCache:
    """Prefix-plan rollout outcomes shared by several analyses of one run (``analyze``).

    Keyed by plan and seed; holds only prefix/factual plans, never Shapley coalitions (those
    must stay independent draws). Results are identical to computing each analysis alone.
    One cache serves rollouts run under one set of :class:`RolloutLimits` (a rollout's
    outcome depends on them): an engine with other limits is refused.
    """

    limits: RolloutLimits | None = None

    def __init__(self) -> None:
        self._results: dict[tuple, ReplayResult] = {}
        self.coupling = Coupling()
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def claim(self, limits: RolloutLimits) -> None:
        """Serve rollouts run under ``limits`` (``ValueError`` if it served others)."""
        with self._lock:
            if self.limits is None:
                self.limits = limits
            elif self.limits != limits:
                raise ValueError(
                    f"this RolloutCache holds rollouts run under limits {self.limits}; "
                    f"rollouts under {limits} would differ: use one cache per set of limits"
                )

    @staticmethod
    def key(plan: ReplayPlan, seed: int) -> tuple:
        return (plan.hold_before, plan.model_override, seed)

    def get(self, plan: ReplayPlan, seed: int) -> ReplayResult | None:
        with self._lock:
            found = self._results.get(self.key(plan, seed))
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
            return found

    def put(self, plan: ReplayPlan, seed: int, result: ReplayResult) -> None:
        with self._lock:
            self._results[self.key(plan, seed)] = result


def is_prefix_plan(plan: ReplayPlan) -> bool:
    """A plan that holds a prefix and re-draws the rest, with no other intervention."""
    return not (
        plan.held
        or plan.forced
        or plan.removed
        or plan.observed
        or plan.edited
        or plan.models
        or plan.resume
    )


@dataclass
class Cost:
    """What an analysis spent. ``live_steps``: step executions that ran live (each an LLM or
    tool call in real life); ``tokens``: their token usage when known."""

    rollouts: int = 0
    live_steps: int = 0
    tokens: int = 0
    tokens_estimated: bool = False
    coupled_steps: int = 0
    rejoined_rollouts: int = 0
    rollout_seconds: float = 0.0
    exceptions: Counter = field(default_factory=Counter)
    diverged: int = 0
    stopped: int = 0
    blocked: Counter = field(default_factory=Counter)  # tool → rollouts that stopped at it
    mocked: Counter = field(default_factory=Counter)  # tool → rollouts that ran its mock
    blocked_rollouts: int = 0  # rollouts that stopped at one or more such tools
    mocked_rollouts: int = 0  # rollouts that ran one or more such mocks

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollouts": self.rollouts,
            "live_steps": self.live_steps,
            "tokens": self.tokens,
            "tokens_estimated": self.tokens_estimated,
            "coupled_steps": self.coupled_steps,
            "rejoined_rollouts": self.rejoined_rollouts,
            "rollout_seconds": round(self.rollout_seconds, 6),
            "exceptions": dict(self.exceptions),
            "diverged": self.diverged,
            "stopped": self.stopped,
            "side_effects": {
                "blocked": dict(self.blocked),
                "mocked": dict(self.mocked),
                "blocked_rollouts": self.blocked_rollouts,
                "mocked_rollouts": self.mocked_rollouts,
            },
        }


class RolloutEngine:
    """Runs rollouts of one recorded run (see the module docstring).

    ``keep_records`` keeps a JSON-able record of every rollout (plan, outcome, divergence,
    exception with traceback) in :attr:`records`. ``limits`` bounds each rollout (``None``:
    :meth:`RolloutLimits.default` for the recording; ``RolloutLimits()`` for no limit).
    ``seed`` chooses the family of random streams (see the module docstring); callers name
    rollouts ``0, 1, ...`` whatever it is.
    """

    def __init__(
        self,
        trajectory: Trajectory,
        agent: Callable[..., Any],
        verifier: Verifier,
        *,
        executor: Executor | None = None,
        pass_context: bool = True,
        cache: RolloutCache | None = None,
        coupling: bool = True,
        keep_records: bool = True,
        max_concurrency: int = 64,
        limits: RolloutLimits | None = None,
        seed: int = 0,
    ) -> None:
        if type(seed) is not int or seed < 0:
            raise ValueError(f"seed must be a whole number of at least 0; got {seed!r}")
        ensure_verified(trajectory)
        self.seed = seed
        self.trajectory = trajectory
        self.agent = agent
        self.verifier = verifier
        self.is_async = is_async_agent(agent)
        self.executor = executor or (
            AsyncExecutor(max_concurrency) if self.is_async else SerialExecutor()
        )
        self.pass_context = pass_context
        self.concurrency = max(1, int(getattr(self.executor, "concurrency", 1)))
        self.cache = cache
        self.coupling = (cache.coupling if cache is not None else Coupling()) if coupling else None
        self.keep_records = keep_records
        self.limits = RolloutLimits.default(trajectory) if limits is None else limits
        if cache is not None:
            cache.claim(self.limits)
        self.records: list[dict[str, Any]] = []
        self.cost = Cost()
        self.longest = 0  # the most steps a rollout has taken (a budget sizes batches on it)
        self._lock = threading.Lock()

    def run(
        self,
        plan: ReplayPlan,
        seeds: Iterable[int],
        *,
        share: bool = True,
        stop_if_same: bool = False,
    ) -> list[ReplayResult]:
        """Rollouts of ``plan`` for each seed (in order).

        ``share=False`` executes every rollout in full (no coupling, no cache), for callers
        that need each rollout's steps rather than only its outcome. ``stop_if_same`` (prefix
        plans) stops a rollout as soon as the first re-drawn step reproduces the recording:
        its result then has ``same_at`` set and no outcome - all a paired comparison with the
        next position needs to know.
        """
        seeds = list(seeds)
        prefix_plan = is_prefix_plan(plan)
        prefix = share and prefix_plan
        stop_if_same = stop_if_same and prefix
        cacheable = self.cache is not None and prefix_plan and not stop_if_same
        results: dict[int, ReplayResult] = {}
        todo = []
        for seed in seeds:
            cached = self.cache.get(plan, self.stream(seed)) if cacheable else None
            # the cache never holds stopped rollouts (same_at); callers wanting the steps
            # need a full execution, not a rejoined one
            if cached is not None and (share or not cached.rejoined):
                results[seed] = cached
            else:
                todo.append(RolloutRequest(plan, seed, prefix, stop_if_same))
        started = time.perf_counter()
        if todo:
            coroutines = getattr(self.executor, "runs_coroutines", False)
            fresh = self.executor.map(self._rollout_async if coroutines else self._rollout, todo)
            for request, result in zip(todo, fresh, strict=True):
                results[request.seed] = result
                self._account(result)
                if cacheable and result.same_at is None:
                    self.cache.put(plan, self.stream(request.seed), result)
        self.cost.rollout_seconds += time.perf_counter() - started
        return [results[seed] for seed in seeds]

    def failure_rate(self, plan: ReplayPlan, rollouts: int) -> float:
        """Share of ``rollouts`` failing under ``plan`` (seeds 0..rollouts-1)."""
        outcomes = self.run(plan, range(rollouts))
        return sum(r.failed for r in outcomes) / max(1, len(outcomes))

    def stream(self, rollout: int) -> int:
        """The replay seed of rollout ``rollout`` (itself under the default ``seed=0``)."""
        return rollout if not self.seed else derive_seed("rollouts", self.seed, rollout)

    def _rollout(self, request: RolloutRequest) -> ReplayResult:
        with _naming_rollout(request):
            return replay(self.agent, self.trajectory, request.plan, **self._options(request))

    async def _rollout_async(self, request: RolloutRequest) -> ReplayResult:
        with _naming_rollout(request):
            return await areplay(
                self.agent, self.trajectory, request.plan, **self._options(request)
            )

    def _options(self, request: RolloutRequest) -> dict[str, Any]:
        return {
            "seed": self.stream(request.seed),
            "verifier": self.verifier,
            "pass_context": self.pass_context,
            "verify": False,
            "coupling": self.coupling if request.coupled else None,
            "stop_if_same_at": request.plan.hold_before if request.stop_if_same else None,
            "limits": self.limits,
        }

    def _account(self, result: ReplayResult) -> None:
        with self._lock:
            cost = self.cost
            cost.rollouts += 1
            cost.live_steps += result.live_steps
            self.longest = max(self.longest, len(result.positions))
            cost.tokens += result.tokens
            cost.tokens_estimated |= result.tokens_estimated
            cost.coupled_steps += result.coupled_steps
            cost.rejoined_rollouts += result.rejoined or result.same_at is not None
            if result.exception is not None:
                cost.exceptions[result.exception["type"]] += 1
            if result.diverged:
                cost.diverged += 1
            if result.stopped is not None:
                cost.stopped += 1
            if result.blocked_tools:
                cost.blocked.update(set(result.blocked_tools))
                cost.blocked_rollouts += 1
            if result.mocked_tools:
                cost.mocked.update(set(result.mocked_tools))
                cost.mocked_rollouts += 1
            if self.keep_records:
                self.records.append(result.to_record())


@contextmanager
def _naming_rollout(request: RolloutRequest) -> Iterator[None]:
    """Name the rollout and plan in a verifier error raised inside."""
    try:
        yield
    except VerifierError as exc:
        raise VerifierError(
            f"{exc} [rollout {request.seed}, plan {request.plan.describe()}]"
        ) from exc


AblationEngine = RolloutEngine
"""The seed's name for the rollout engine."""
