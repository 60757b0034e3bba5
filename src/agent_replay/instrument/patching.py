"""``instrument.patch``: make any function or method a step, for the length of a handle.

The target is a dotted path, ``package.module.Class.method`` or ``package.module.function``.
The longest importable prefix is the module, the rest is looked up attribute by attribute.
The attribute is replaced by a wrapper of the same shape (sync, async, generator, instance /
static / class method) and put back by :meth:`Patch.undo`.

Undo is safe when something else wrapped the target after us (an OpenTelemetry
instrumentation installed later): taking our wrapper out from under theirs would remove theirs
too, so in that case ours is switched off in place and stays a plain pass-through.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from dataclasses import replace
from typing import Any

from ..errors import PatchTargetError
from ..model import StepKind
from ._intercept import Interceptor, StepSpec

__all__ = ["Patch", "patch", "resolve_target"]

_KINDS = {
    "llm": StepKind.LLM,
    "tool": StepKind.TOOL,
    "memory": StepKind.MEMORY,
    "embedding": StepKind.EMBEDDING,
}
_AUTO = object()  # model_arg not given: "model" for llm targets, none for the others
_ABSENT = object()  # no such attribute
_LOCK = threading.Lock()


def resolve_target(target: str) -> tuple[Any, str, Any]:
    """``(owner, attribute, current value)`` for ``target``.

    Raises :class:`PatchTargetError` naming the target when no prefix imports, an attribute
    is missing, or the value is not callable.
    """
    if not isinstance(target, str) or not target or "." not in target:
        raise PatchTargetError(
            f"cannot patch {target!r}: give a dotted path such as "
            "'package.module.Class.method' or 'package.module.function'",
            target=str(target),
        )
    parts = target.split(".")
    module = None
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not name.startswith(exc.name):
                # the module exists but one of its own imports is missing
                raise PatchTargetError(
                    f"cannot patch {target!r}: importing {name!r} failed: {exc}", target=target
                ) from exc
            continue
        except ImportError as exc:
            raise PatchTargetError(
                f"cannot patch {target!r}: importing {name!r} failed: {exc}", target=target
            ) from exc
        rest = parts[cut:]
        break
    if module is None:
        raise PatchTargetError(
            f"cannot patch {target!r}: module {parts[0]!r} is not installed", target=target
        )
    owner: Any = module
    walked = [module.__name__]
    for attr in rest[:-1]:
        try:
            owner = getattr(owner, attr)
        except AttributeError:
            raise PatchTargetError(
                f"cannot patch {target!r}: {'.'.join(walked)} has no attribute {attr!r}",
                target=target,
            ) from None
        walked.append(attr)
    attr = rest[-1]
    raw = _raw_attribute(owner, attr)
    if raw is _ABSENT:
        raise PatchTargetError(
            f"cannot patch {target!r}: {'.'.join(walked)} has no attribute {attr!r}",
            target=target,
        )
    func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    if not callable(func):
        raise PatchTargetError(
            f"cannot patch {target!r}: it is a {type(func).__name__}, not a function or method",
            target=target,
        )
    return owner, attr, raw


def _raw_attribute(owner: Any, attr: str) -> Any:
    """The attribute as stored (descriptors unbound), searching a class's MRO."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in klass.__dict__:
                return klass.__dict__[attr]
        return _ABSENT
    return getattr(owner, attr, _ABSENT)


class Patch:
    """A patched target; :meth:`undo` restores it. Also a context manager.

    ``target``, ``kind`` and ``name`` describe it; ``active`` says whether calls are still
    intercepted. Undo is idempotent and thread-safe.
    """

    def __init__(
        self, target: str, owner: Any, attr: str, raw: Any, spec: StepSpec, *, owned: bool
    ) -> None:
        self.target = target
        self.kind = spec.kind.value
        self.name = spec.name
        self.spec = spec
        self._owner = owner
        self._attr = attr
        self._raw = raw
        self._owned = owned  # the attribute was in owner.__dict__ (else it was inherited)
        self.active = True
        self._installed: Any = None
        self._interceptor = self._build()

    def _build(self) -> Interceptor:
        raw, owner = self._raw, self._owner
        is_class = isinstance(owner, type)
        if isinstance(raw, (staticmethod, classmethod)):
            func = original = raw.__func__
            method = isinstance(raw, classmethod)
        elif is_class and inspect.isfunction(raw):
            func = original = raw
            method = True
        elif is_class and hasattr(raw, "__get__"):
            # a descriptor such as another instrumentation's wrapt FunctionWrapper: bind it the
            # way attribute access would, so it sees its instance
            func = raw

            def original(self_: Any, *args: Any, **kwargs: Any) -> Any:
                return raw.__get__(self_, type(self_))(*args, **kwargs)

            method = True
        else:
            func = original = raw
            method = False
        spec = self.spec
        if method and not spec.drop_first:
            spec = replace(spec, drop_first=True)
            self.spec = spec
        interceptor = Interceptor(
            original, spec, signature_of=func, outer_check=self._outer_modules
        )
        wrapper = interceptor.wrapper()
        wrapper.__agent_replay_patch__ = self  # type: ignore[attr-defined]
        if isinstance(raw, staticmethod):
            self._installed = staticmethod(wrapper)
        elif isinstance(raw, classmethod):
            self._installed = classmethod(wrapper)
        else:
            self._installed = wrapper
        self._wrapper = wrapper
        return interceptor

    def _apply(self) -> None:
        setattr(self._owner, self._attr, self._installed)

    def _outer_modules(self) -> list[str]:
        """Modules of the wrappers others installed around ours (empty: we are outermost)."""
        current = _raw_attribute(self._owner, self._attr)
        if current is self._installed:
            return []
        modules = []
        node = current
        for _ in range(16):  # wrapper chains are short; never loop on a cycle
            if node is None or node is self._installed or node is self._wrapper:
                break
            wrapper = getattr(node, "_self_wrapper", None)  # wrapt's FunctionWrapper
            source = wrapper if wrapper is not None else node
            module = getattr(source, "__module__", None) or type(source).__module__
            if module:
                modules.append(module)
            node = getattr(node, "__wrapped__", None)
        return modules

    def undo(self) -> None:
        """Stop intercepting and restore the original attribute where that is safe."""
        with _LOCK:
            if not self.active:
                return
            self.active = False
            current = _raw_attribute(self._owner, self._attr)
            if current is self._installed:
                if self._owned:
                    setattr(self._owner, self._attr, self._raw)
                else:
                    delattr(self._owner, self._attr)
            else:
                # wrapped by someone after us: leave the chain intact, make ours a pass-through
                self._interceptor.disabled = True

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        state = "active" if self.active else "undone"
        return f"<Patch {self.target} kind={self.kind} name={self.name!r} {state}>"


def patch(
    target: str,
    kind: str = "llm",
    name: str | None = None,
    side_effects: bool = False,
    *,
    resamplable: bool | None = None,
    exclude: tuple[str, ...] = (),
    model_arg: str | object | None = _AUTO,
    model_attrs: tuple[str, ...] = (),
    stream_arg: str | None = None,
    iterator: bool = False,
    stream_class: str | None = None,
    response_type: str | None = None,
    manager_class: str | None = None,
    manager_args: tuple[str, ...] = (),
    usage_input: tuple[str, ...] = (),
    usage_output: tuple[str, ...] = (),
    reparse: str | None = None,
    reparse_response: str = "response",
    reparse_args: tuple[tuple[str, str], ...] = (),
) -> Patch:
    """Make every call of ``target`` inside a recorded or replayed run one step.

    ``kind`` is ``"llm"``, ``"tool"``, ``"memory"`` or ``"embedding"``; ``name`` defaults to
    ``target`` and may be a template over the call's arguments (``"{self.name}"``).
    ``side_effects=True`` marks a call that must never run live during a replay. The other
    options are those of the recipe registry (:mod:`agent_replay.instrument.recipes`);
    ``model_arg`` (the argument a swap-model plan replaces) defaults to ``"model"`` for
    ``kind="llm"`` and to none otherwise. Returns a :class:`Patch` (undo it, or use it as a
    context manager). Raises :class:`PatchTargetError` naming the target when it does not exist
    or is not callable, ``ValueError`` for an unknown ``kind``. Patching is process-wide; do not
    patch or undo the same target from several threads at once.
    """
    step_kind = _KINDS.get(kind)
    if step_kind is None:
        raise ValueError(f"kind must be one of {sorted(_KINDS)}, not {kind!r}")
    owner, attr, raw = resolve_target(target)
    if model_arg is _AUTO:
        model_arg = "model" if step_kind is StepKind.LLM else None
    spec = StepSpec(
        kind=step_kind,
        name=name or target,
        side_effects=side_effects,
        resamplable=resamplable,
        exclude=frozenset(exclude),
        model_arg=model_arg,  # type: ignore[arg-type]
        model_attrs=tuple(model_attrs),
        stream_arg=stream_arg,
        iterator=iterator,
        stream_class=stream_class,
        response_type=response_type,
        manager_class=manager_class,
        manager_args=tuple(manager_args),
        usage_input=tuple(usage_input),
        usage_output=tuple(usage_output),
        reparse=reparse,
        reparse_response=reparse_response,
        reparse_args=tuple(tuple(pair) for pair in reparse_args),  # type: ignore[misc]
    )
    owned = not isinstance(owner, type) or attr in owner.__dict__
    handle = Patch(target, owner, attr, raw, spec, owned=owned)
    with _LOCK:
        handle._apply()
    return handle
