"""Honest progress for adaptive attribution: counts what has actually run.

``attribute`` decides how many rollouts it needs as it goes (it stops once the culprit is
separated), so no total is known up front. :class:`RolloutProgress` wraps the rollout
executor and counts finished rollouts and their live step executions; with ``--budget`` the
live steps are shown against that cap (the only true upper bound). It draws one status line
on stderr, only when stderr is a terminal, at most ten times a second. ``tick`` may be
called from executor threads (a lock guards the counters).
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..capture.run import is_async_agent
from ..rollouts.engine import AsyncExecutor, SerialExecutor

__all__ = ["RolloutProgress"]


class RolloutProgress:
    """An executor (``map``) that counts rollouts; a context manager that draws them."""

    def __init__(
        self,
        agent: Callable[..., Any],
        *,
        label: str = "attributing",
        budget: int | None = None,
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        self.inner = AsyncExecutor() if is_async_agent(agent) else SerialExecutor()
        # what the engine reads off its executor: an async agent's rollouts are handed over
        # as coroutine functions (a plain function would run the agent's loop inside this one's)
        self.runs_coroutines = getattr(self.inner, "runs_coroutines", False)
        self.concurrency = getattr(self.inner, "concurrency", 1)
        self.label = label
        self.budget = budget
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.rollouts = 0
        self.live_steps = 0
        self._started = time.monotonic()
        self._drawn = 0.0
        self._lock = threading.Lock()

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if inspect.iscoroutinefunction(fn):

            async def counted_async(item: Any) -> Any:
                result = await fn(item)
                self.tick(result)
                return result

            return self.inner.map(counted_async, items)

        def counted(item: Any) -> Any:
            result = fn(item)
            self.tick(result)
            return result

        return self.inner.map(counted, items)

    def tick(self, result: Any) -> None:
        with self._lock:
            self.rollouts += 1
            self.live_steps += int(getattr(result, "live_steps", 0) or 0)
            now = time.monotonic()
            if self.enabled and now - self._drawn >= 0.1:
                self._drawn = now
                self._draw()

    def status(self) -> str:
        spent = f"{self.live_steps} live step executions"
        if self.budget:
            spent += f" of a {self.budget} budget ({min(1.0, self.live_steps / self.budget):.0%})"
        return (
            f"{self.label}: {self.rollouts} rollouts · {spent} · "
            f"{time.monotonic() - self._started:.1f}s"
        )

    def _draw(self) -> None:
        self.stream.write("\r\x1b[2K" + self.status())
        self.stream.flush()

    def __enter__(self) -> RolloutProgress:
        self._started = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
