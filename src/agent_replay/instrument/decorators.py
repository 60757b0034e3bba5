"""``@instrument.llm`` / ``@instrument.tool`` / ``@instrument.memory``: functions as steps.

A decorated function called inside a recorded or replayed run is one step: named after its
``__qualname__`` (or ``name=``), with its bound arguments as inputs (a first ``self`` / ``cls``
is left out, and so are the names in ``exclude=``) and its return value as the action. Outside
a run, or inside another step, it is a plain call. Sync and async functions, generators and
async generators (their items are recorded as a list and yielded again) are all supported.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast, overload

from ..capture.context import check_mock
from ..model import StepKind
from ._intercept import Interceptor, StepSpec

__all__ = ["llm", "memory", "tool"]

F = TypeVar("F", bound=Callable[..., Any])


def _decorate(
    fn: Any,
    kind: StepKind,
    name: str | None,
    side_effects: bool,
    resamplable: bool | None,
    exclude: tuple[str, ...],
    model_arg: str | None,
    mock: Callable[..., Any] | None = None,
) -> Any:
    if isinstance(fn, (staticmethod, classmethod)):
        return type(fn)(
            _decorate(fn.__func__, kind, name, side_effects, resamplable, exclude, model_arg, mock)
        )
    if not callable(fn):
        raise TypeError(f"@instrument.{kind.value} needs a function, not {type(fn).__name__}")
    if mock is not None:
        check_mock(mock, side_effects, f"@instrument.{kind.value} {name or fn.__qualname__}")
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    if model_arg is None and kind is StepKind.LLM and "model" in params:
        model_arg = "model"  # a swap-model plan changes the argument named model
    spec = StepSpec(
        kind=kind,
        name=name or getattr(fn, "__qualname__", None) or repr(fn),
        side_effects=side_effects,
        resamplable=resamplable,
        exclude=frozenset(exclude),
        drop_first=bool(params) and params[0] in ("self", "cls"),
        model_arg=model_arg,
        mock=mock,
    )
    return Interceptor(fn, spec).wrapper()


class StepDecorator(Protocol):
    """``@instrument.llm`` and its kin: bare, or called with options."""

    @overload
    def __call__(self, fn: F, /) -> F: ...

    @overload
    def __call__(
        self,
        *,
        name: str | None = None,
        side_effects: bool = False,
        resamplable: bool | None = None,
        exclude: tuple[str, ...] = (),
        model_arg: str | None = None,
        mock: Callable[..., Any] | None = None,
    ) -> Callable[[F], F]: ...


def _factory(kind: StepKind) -> StepDecorator:
    def decorator(
        fn: Any = None,
        /,
        *,
        name: str | None = None,
        side_effects: bool = False,
        resamplable: bool | None = None,
        exclude: tuple[str, ...] = (),
        model_arg: str | None = None,
        mock: Callable[..., Any] | None = None,
    ) -> Any:
        def apply(f: Any) -> Any:
            return _decorate(
                f, kind, name, side_effects, resamplable, tuple(exclude), model_arg, mock
            )

        return apply if fn is None else apply(fn)

    decorator.__name__ = decorator.__qualname__ = kind.value
    decorator.__doc__ = (
        f"Make calls of the decorated function {kind.value} steps of the ambient run.\n\n"
        "Use bare (``@instrument.{k}``) or with options: ``name=`` (default: the function's "
        "qualname), ``side_effects=True`` (never run live during a replay; ``mock=``, called "
        "with the same arguments, is what a replay that cannot hold it runs instead), "
        "``resamplable=``, "
        "``exclude=`` (argument names not stored), ``model_arg=`` (the argument a swap-model "
        "plan replaces). Arguments or a result that cannot be stored as data raise "
        "CanonicalEncodingError naming the step, at record time."
    ).replace("{k}", kind.value)
    return cast(StepDecorator, decorator)


llm = _factory(StepKind.LLM)
tool = _factory(StepKind.TOOL)
memory = _factory(StepKind.MEMORY)
