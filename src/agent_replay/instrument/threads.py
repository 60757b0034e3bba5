"""Carrying the ambient run into threads the agent starts.

The run an instrumented call belongs to is a :mod:`contextvars` variable. asyncio tasks copy
the context when they are created, so they need nothing; a thread does not, so a call made on
a plain worker thread is outside the run (a plain call: not recorded, and live on replay).
:func:`bind_context` and :class:`ContextThreadPoolExecutor` copy the caller's context into the
worker, as ``contextvars.copy_context().run`` would.

Steps started concurrently from several threads are numbered in the order they start; a replay
binds them to the recording deterministically only when that order is deterministic.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

__all__ = ["ContextThreadPoolExecutor", "bind_context"]

P = ParamSpec("P")
R = TypeVar("R")


def bind_context(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` bound to a copy of the calling thread's context (the ambient run included).

    Each call runs in its own copy, so the result may be called from several threads at once.
    """
    captured = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return captured.copy().run(fn, *args, **kwargs)

    return run


class ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose jobs run in a copy of the submitting thread's context."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        context = contextvars.copy_context()
        return super().submit(context.run, fn, *args, **kwargs)
