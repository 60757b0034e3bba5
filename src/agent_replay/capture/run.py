"""Running an agent once and judging the result: shared by recording and every replay."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import decimal
import inspect
import math
import numbers
import traceback
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ..canonical import escape_texts, snapshot
from ..errors import CanonicalEncodingError, VerifierError
from ..model import Outcome
from .context import activate, deactivate, exception_text

__all__ = ["arun_agent", "call_agent", "is_async_agent", "judge", "run_agent", "run_coroutine"]

Verifier = Callable[[Any], Any]

# a stop raised inside an ``asyncio.TaskGroup`` (or ``except*`` code) comes out wrapped in a
# group; Python 3.10 has no groups, and nothing there can wrap one
_GROUP: type[BaseException] = getattr(builtins, "BaseExceptionGroup", ())  # type: ignore[assignment]


def _ended(
    exc: BaseException, stop: tuple[type[BaseException], ...]
) -> tuple[Any, BaseException | None]:
    """What a run that raised ``exc`` ends with: nothing for a ``stop`` exception in a group
    (the bare ones are caught before), the error for an ``Exception`` or a ``SystemExit`` (an
    agent calling ``sys.exit()`` ends its run, not the analysis running it, nor lends the
    command its exit code); anything else (a ``KeyboardInterrupt``) propagates."""
    if stop and isinstance(exc, _GROUP) and exc.subgroup(stop) is not None:  # type: ignore[attr-defined]
        return None, None
    if isinstance(exc, (Exception, SystemExit)):
        return None, exc
    raise exc


def is_async_agent(agent_fn: Callable[..., Any]) -> bool:
    """Whether ``agent_fn`` is an ``async def`` function, partial or callable object."""
    if inspect.iscoroutinefunction(agent_fn):
        return True
    func = getattr(agent_fn, "func", None)  # functools.partial
    if func is not None and inspect.iscoroutinefunction(func):
        return True
    if inspect.isfunction(agent_fn) or inspect.ismethod(agent_fn):
        return False
    return inspect.iscoroutinefunction(type(agent_fn).__call__)


_EXPANDS: dict[Any, bool] = {}


def call_agent(
    agent_fn: Callable[..., Any], ctx: Any, task: Any, *, pass_context: bool = True
) -> Any:
    """Call the agent the way the seed did: ``agent(ctx, **task)`` when the task is a mapping
    whose keys the agent takes as parameters, else ``agent(ctx, task)``; without ``ctx`` when
    ``pass_context`` is false (agents using the ambient context)."""
    args: tuple = (ctx,) if pass_context else ()
    if task is None:
        return agent_fn(*args)
    if isinstance(task, Mapping) and _expands(agent_fn, args, task):
        return agent_fn(*args, **task)
    return agent_fn(*args, task)


def run_agent(
    agent_fn: Callable[..., Any],
    ctx: Any,
    task: Any,
    *,
    pass_context: bool = True,
    reraise: tuple[type[BaseException], ...] = (),
    stop: tuple[type[BaseException], ...] = (),
) -> tuple[Any, BaseException | None]:
    """Run the agent once with ``ctx`` as the ambient context: ``(result, None)``, or
    ``(None, exc)`` when it raised ``exc`` (the run's outcome). ``reraise`` exceptions
    propagate; ``stop`` ones end the run quietly, with neither result nor error."""
    token = activate(ctx)
    try:
        return call_agent(agent_fn, ctx, task, pass_context=pass_context), None
    except reraise:
        raise
    except stop:
        return None, None
    except BaseException as exc:
        return _ended(exc, stop)
    finally:
        deactivate(token)


async def arun_agent(
    agent_fn: Callable[..., Any],
    ctx: Any,
    task: Any,
    *,
    pass_context: bool = True,
    reraise: tuple[type[BaseException], ...] = (),
    stop: tuple[type[BaseException], ...] = (),
) -> tuple[Any, BaseException | None]:
    """:func:`run_agent` for ``async def`` agents (the result is awaited)."""
    token = activate(ctx)
    try:
        result = call_agent(agent_fn, ctx, task, pass_context=pass_context)
        if hasattr(result, "__await__"):
            result = await result
        return result, None
    except reraise:
        raise
    except stop:
        return None, None
    except BaseException as exc:
        return _ended(exc, stop)
    finally:
        deactivate(token)


def _signature_key(agent_fn: Any) -> tuple[Any, ...] | None:
    """What the agent's signature depends on, to cache it by: the code of the function and of
    every function it wraps (``functools.wraps`` wrappers of one decorator share their code,
    ``inspect.signature`` follows ``__wrapped__``); ``None`` when it cannot be cached."""
    key: list[Any] = []
    while agent_fn is not None and len(key) < 100:
        if "__signature__" in getattr(agent_fn, "__dict__", ()):
            return None
        key.append(getattr(agent_fn, "__code__", agent_fn))
        agent_fn = getattr(agent_fn, "__wrapped__", None)
    return tuple(key)


def _expands(agent_fn: Callable[..., Any], args: tuple, task: Mapping[str, Any]) -> bool:
    key = (_signature_key(agent_fn), len(args), tuple(task))
    try:
        cached = _EXPANDS.get(key) if key[0] is not None else None
    except TypeError:  # an unhashable callable
        key = (None, *key[1:])
        cached = None
    if cached is None:
        try:
            signature = inspect.signature(agent_fn)
            signature.bind(*args, **task)
            cached = True
        except TypeError:
            cached = False
            _warn_partial_match(agent_fn, signature, task)
        except ValueError:  # no signature available (builtins)
            cached = True
        if key[0] is not None and len(_EXPANDS) < 10_000:
            _EXPANDS[key] = cached
    return cached


def _warn_partial_match(
    agent_fn: Callable[..., Any], signature: inspect.Signature, task: Mapping[str, Any]
) -> None:
    """The task is passed whole, ``agent(ctx, task)``: say so when some of its keys are the
    agent's parameters (a misspelt key made a silently wrong run: ``question`` got the whole
    task). Once per agent and set of keys: the answer is cached."""
    named = {
        name
        for name, parameter in signature.parameters.items()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    }
    taken, left = [k for k in task if k in named], [k for k in task if k not in named]
    if taken and left:
        name = getattr(agent_fn, "__qualname__", repr(agent_fn))
        warnings.warn(
            f"the task's keys {taken} are parameters of {name} but {left} are not, so the "
            f"whole task is passed as its one argument, {name}(ctx, task); misspelt?",
            UserWarning,
            stacklevel=5,
        )


def run_coroutine(coro: Any) -> Any:
    """Run ``coro`` to completion from synchronous code."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(
        "an async agent was called from synchronous code inside a running event loop; "
        "use the async variant (arecord / areplay) instead"
    )


def judge(
    verifier: Verifier | None,
    result: Any,
    error: BaseException | None = None,
    *,
    where: str = "run",
) -> Outcome:
    """The :class:`Outcome` of a run: the verifier's score, or a failure when the agent raised.

    Raises :class:`VerifierError` (naming ``where``) when the verifier raises or returns
    something that is not a number in [0, 1].
    """
    if error is not None:
        return Outcome.from_score(0.0, None, describe_failure(error))
    if verifier is None:
        return Outcome.from_score(None, result)
    try:  # what the agent returned, kept from a verifier that changes what it is handed
        kept = snapshot(result)
    except CanonicalEncodingError:
        kept = result  # not storable as it is: recorded as its repr
    try:
        raw = verifier(result)
    except Exception as exc:
        raise VerifierError(
            f"{where}: the verifier raised {type(exc).__name__}: {exception_text(exc)}"
        ) from exc
    return Outcome.from_score(coerce_score(raw, where), kept)


def coerce_score(raw: Any, where: str) -> float:
    """A verifier's return value as a score in [0, 1]: a bool, or any real number (a
    ``Fraction``, a ``Decimal``, a NumPy or other array library's scalar: a value with
    ``.item()`` and an empty ``shape``)."""
    if getattr(raw, "shape", None) == () and callable(getattr(raw, "item", None)):
        with contextlib.suppress(Exception):
            raw = raw.item()  # numpy.bool_(True) -> True, numpy.float32(0.7) -> 0.7
    if isinstance(raw, bool):
        return 1.0 if raw else 0.0
    if isinstance(raw, (numbers.Real, decimal.Decimal)):
        value = float(raw)
        if math.isfinite(value) and 0.0 <= value <= 1.0:
            return value
        raise VerifierError(
            f"{where}: the verifier returned {_shown(raw)}; a score in [0, 1] is needed"
        )
    kind = type(raw)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    raise VerifierError(
        f"{where}: the verifier returned {name} {_shown(raw)}; it must return a number in "
        "[0, 1] (1.0 = success) or a bool"
    )


def _shown(value: Any) -> str:
    """``repr(value)`` for an error message, or a placeholder when that repr itself fails."""
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__} (repr() failed)>"


def describe_failure(error: BaseException) -> dict[str, Any]:
    """The stored form of an exception that ended a run (with its traceback; text that
    cannot be stored as UTF-8 escaped)."""
    return escape_texts(
        {
            "type": type(error).__qualname__,
            "module": type(error).__module__,
            "message": exception_text(error),
            "traceback": "".join(
                traceback.format_exception(type(error), error, error.__traceback__)
            ),
        }
    )
