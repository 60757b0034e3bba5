"""Turning one call of a function into one step of the ambient run.

An :class:`Interceptor` wraps a callable (a decorated function, or a patched SDK method). Called
outside a recorded or replayed run, or inside another step's policy, it is a plain call: the
outermost instrumented call is the step, and whatever it does inside (an SDK call made by a
decorated tool, the HTTP call a LangChain model makes through the OpenAI SDK) belongs to it.

Inside a run it goes through :meth:`AgentContext._step` (``_astep`` for coroutines), the same
entry point as ``ctx.llm``: the driver decides whether the original runs (recording, a
re-drawn step) or the recorded result is served (a held step). The step's inputs are the
call's bound arguments as data; its action is the result as data (see :mod:`._data`). The agent
receives the SDK's own object either way: the original one when the call ran, one rebuilt from
the recording when it was held. Streamed results are recorded chunk by chunk and handed back
as a stream.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from ..capture.context import (
    INTERCEPTED_ATTRIBUTE,
    SCOPE_NAME,
    AgentContext,
    AsyncAgentContext,
    StepCall,
    claim_span,
    current_context,
    describe_exception,
    inside_step,
    rebuild_exception,
)
from ..errors import CanonicalEncodingError, RebuildError
from ..model import StepKind
from . import _data
from ._streams import make_stream

__all__ = ["Interceptor", "StepSpec", "model_hint"]


@dataclass(frozen=True)
class StepSpec:
    """How calls of one callable become steps (the per-target part of a recipe).

    ``name`` may be a template over the bound arguments (``"{self.name}"``). ``stream_arg``
    names the argument that asks for a streamed result (``stream=True``); ``iterator`` says
    the callable itself returns an iterator or is a generator. ``stream_class`` /
    ``response_type`` / ``manager_class`` are ``module:Name`` paths of the SDK's stream class,
    its non-streamed response class (used to rebuild a forced plain dict), and a stream manager
    the SDK returns instead of a stream (``anthropic`` ``messages.stream()``). ``model_arg`` /
    ``model_attrs`` say where a swap-model hint goes. ``usage_input`` / ``usage_output`` are
    dotted paths to token counts inside the response data. ``reparse`` (``module:function``)
    is what the SDK applies to the raw response before returning it (``parse`` turns a chat
    completion into one whose ``parsed`` is the caller's class): a held response is passed
    through it again, as keyword ``reparse_response``, with the call's own arguments as named
    by ``reparse_args`` (pairs of its keyword and the argument's name).
    """

    kind: StepKind
    name: str
    side_effects: bool = False
    resamplable: bool | None = None
    mock: Callable[..., Any] | None = None
    exclude: frozenset[str] = frozenset()
    drop_first: bool = False
    model_arg: str | None = None
    model_attrs: tuple[str, ...] = ()
    stream_arg: str | None = None
    iterator: bool = False
    stream_class: str | None = None
    response_type: str | None = None
    manager_class: str | None = None
    manager_args: tuple[str, ...] = ()
    usage_input: tuple[str, ...] = ()
    usage_output: tuple[str, ...] = ()
    reparse: str | None = None
    reparse_response: str = "response"
    reparse_args: tuple[tuple[str, str], ...] = ()


@dataclass
class _Prepared:
    """One call, bound: what is stored and how to make the call again."""

    name: str
    inputs: dict[str, Any]
    args: tuple
    kwargs: dict[str, Any]
    arguments: dict[str, Any]  # bound arguments as the caller gave them
    hidden: dict[str, Any]  # excluded arguments, passed through but never stored
    streaming: bool
    where: str
    live: list = field(default_factory=list)  # (action, live value, live stream error)


@dataclass
class _Read:
    """The chunks read from a stream, and the exception it broke off with (if it did)."""

    items: list[Any]
    error: Exception | None = None


class Interceptor:
    """Runs calls of ``original`` as steps of the ambient run (see the module docstring).

    ``original`` is called with the same positional arguments the wrapper received (including
    ``self`` for methods). Thread-safe: it keeps no per-call state on itself.
    """

    def __init__(
        self,
        original: Callable[..., Any],
        spec: StepSpec,
        *,
        signature_of: Callable[..., Any] | None = None,
        outer_check: Callable[[], list[str]] | None = None,
    ) -> None:
        self.original = original
        self.spec = spec
        self._signature_of = signature_of if signature_of is not None else original
        self._signature: inspect.Signature | None = None
        self._outer_check = outer_check
        self.disabled = False  # an undone patch that others still wrap: a plain pass-through
        self.is_async = _is_async(self._signature_of)
        self.is_async_gen = inspect.isasyncgenfunction(inspect.unwrap(self._signature_of))
        self.is_gen = inspect.isgeneratorfunction(inspect.unwrap(self._signature_of))

    # -- wrappers -------------------------------------------------------------------------

    def wrapper(self) -> Callable[..., Any]:
        """The function that replaces ``original`` (same sync/async/generator shape)."""
        original = self.original
        if self.is_async_gen:

            async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
                ctx = current_context()
                if ctx is None or self.disabled or inside_step():
                    async for item in original(*args, **kwargs):
                        yield item
                    return
                for item in await self.run_async(ctx, args, kwargs):
                    yield item

            wrapped: Callable[..., Any] = agen_wrapper
        elif self.is_gen:

            def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
                ctx = current_context()
                if ctx is None or self.disabled or inside_step():
                    yield from original(*args, **kwargs)
                    return
                yield from self.run_sync(ctx, args, kwargs)

            wrapped = gen_wrapper
        elif self.is_async:

            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                ctx = current_context()
                if ctx is None or self.disabled or inside_step():
                    return await original(*args, **kwargs)
                return await self.run_async(ctx, args, kwargs)

            wrapped = async_wrapper
        else:

            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                ctx = current_context()
                if ctx is None or self.disabled or inside_step():
                    return original(*args, **kwargs)
                return self.run_sync(ctx, args, kwargs)

            wrapped = sync_wrapper
        functools.update_wrapper(wrapped, self._signature_of)
        wrapped.__agent_replay_interceptor__ = self  # type: ignore[attr-defined]
        return wrapped

    # -- running --------------------------------------------------------------------------

    def run_sync(self, ctx: AgentContext, args: tuple, kwargs: dict[str, Any]) -> Any:
        prepared = self._prepare(ctx, args, kwargs)
        if prepared is None:  # arguments do not bind: let the callable raise its own error
            return self.original(*args, **kwargs)

        def produce(inputs: Any) -> Any:
            call_args, call_kwargs = self._call_arguments(prepared, inputs, step)
            result = self.original(*call_args, **call_kwargs)
            return self._record(ctx, prepared, step, result)

        step = self._step_call(ctx, prepared, produce)
        action = ctx._step(step)
        return self._deliver(prepared, action, is_async=False)

    async def run_async(self, ctx: AgentContext, args: tuple, kwargs: dict[str, Any]) -> Any:
        prepared = self._prepare(ctx, args, kwargs)
        if prepared is None:
            if self.is_async_gen:
                return [item async for item in self.original(*args, **kwargs)]
            return await self.original(*args, **kwargs)

        async def produce(inputs: Any) -> Any:
            call_args, call_kwargs = self._call_arguments(prepared, inputs, step)
            if self.is_async_gen:
                result: Any = [item async for item in self.original(*call_args, **call_kwargs)]
            else:
                result = await self.original(*call_args, **call_kwargs)
                if prepared.streaming:
                    result = await _drain_async(result)
            return self._record(ctx, prepared, step, result)

        step = self._step_call(ctx, prepared, produce)
        # _astep only uses what every AgentContext has: an async SDK call made under a sync
        # run (an agent calling asyncio.run itself) is a step like any other
        action = await AsyncAgentContext._astep(ctx, step)  # type: ignore[arg-type]
        return self._deliver(prepared, action, is_async=not self.is_async_gen)

    # -- binding --------------------------------------------------------------------------

    @property
    def signature(self) -> inspect.Signature:
        sig = self._signature
        if sig is None:
            try:
                sig = inspect.signature(self._signature_of)
            except (TypeError, ValueError):
                sig = inspect.Signature(
                    [
                        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
                    ]
                )
            self._signature = sig
        return sig

    def _prepare(self, ctx: AgentContext, args: tuple, kwargs: dict[str, Any]) -> _Prepared | None:
        if self._outer_check is not None:
            _claim_outer_span(self._outer_check)
        spec = self.spec
        sig = self.signature
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return None
        params = sig.parameters
        arguments = bound.arguments
        inputs: dict[str, Any] = {}
        hidden: dict[str, Any] = {}
        for position, (pname, value) in enumerate(arguments.items()):
            if position == 0 and spec.drop_first:
                continue
            param = params[pname]
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                for key, item in value.items():
                    if key in spec.exclude:
                        hidden[key] = item
                    else:
                        inputs[key] = item
                continue
            if pname in spec.exclude:
                hidden[pname] = value
                continue
            if value is param.default:  # an explicit sentinel (NOT_GIVEN, omit): not given
                continue
            inputs[pname] = value
        name = spec.name
        if "{" in name:
            try:
                name = name.format(**arguments)
            except Exception:  # a template that does not fit this call: keep it as written
                name = spec.name
        where = f"step {ctx.position} ({spec.kind.value}:{name})"
        try:
            stored = _data.to_data(inputs, where=f"{where} inputs", inputs=True)
        except CanonicalEncodingError as exc:
            _keep_encoding_error(ctx, exc)
            raise
        streaming = spec.stream_arg is not None and inputs.get(spec.stream_arg) is True
        return _Prepared(
            name=name,
            inputs=stored,
            args=args,
            kwargs=kwargs,
            arguments=arguments,
            hidden=hidden,
            streaming=streaming or spec.manager_class is not None,
            where=where,
        )

    def _step_call(self, ctx: AgentContext, prepared: _Prepared, produce: Any) -> StepCall:
        spec = self.spec
        resamplable = (not spec.side_effects) if spec.resamplable is None else spec.resamplable
        call = StepCall(
            spec.kind,
            prepared.name,
            prepared.inputs,
            produce,
            None,
            spec.side_effects,
            resamplable,
            None,
            ctx._acting_agent(),
        )
        if spec.mock is not None:  # called as the function is; its result recorded as one
            mock = spec.mock

            def mocked() -> Any:
                result = mock(*prepared.args, **prepared.kwargs)
                if inspect.isawaitable(result):  # an async mock (of an async tool): awaited
                    return self._record_awaited(ctx, prepared, call, result)
                return self._record(ctx, prepared, call, result)

            call.mock = mocked
        return call

    async def _record_awaited(
        self, ctx: AgentContext, prepared: _Prepared, step: StepCall, result: Any
    ) -> Any:
        return self._record(ctx, prepared, step, await result)

    def _call_arguments(
        self, prepared: _Prepared, inputs: Any, step: StepCall
    ) -> tuple[tuple, dict[str, Any]]:
        """The arguments of the live call: as given, or rebuilt from edited inputs, plus the
        model a swap-model plan asks for."""
        spec = self.spec
        args, kwargs = prepared.args, prepared.kwargs
        if inputs is not prepared.inputs:  # a plan edited the inputs: call with those
            arguments = dict(prepared.hidden)
            for key, value in inputs.items():
                if (
                    _data.is_envelope(value, "class")
                    and value == prepared.inputs.get(key)
                    and key in prepared.arguments
                ):
                    # the class the caller passed, which may not be importable by its name
                    arguments[key] = prepared.arguments[key]
                else:
                    arguments[key] = _data.from_data(value)
            if spec.drop_first and args:
                arguments = {next(iter(self.signature.parameters)): args[0], **arguments}
            args, kwargs = self._split(arguments)
        hint = model_hint()
        if hint is not None:
            args, kwargs = self._with_model(args, kwargs, hint)
            step.attributes = {**(step.attributes or {}), "model": hint}
        return args, kwargs

    def _split(self, arguments: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """Positional and keyword arguments for ``arguments`` (names, in any order)."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        positional = True  # until a parameter is skipped, later ones may still go by position
        remaining = dict(arguments)
        for pname, param in self.signature.parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                kwargs.update(remaining.pop(pname, None) or {})
                continue
            if pname not in remaining:
                positional = positional and param.kind is inspect.Parameter.VAR_POSITIONAL
                continue
            value = remaining.pop(pname)
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                args.extend(value)
            elif param.kind is inspect.Parameter.POSITIONAL_ONLY or (
                positional and param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            ):
                args.append(value)
            else:
                positional = False
                kwargs[pname] = value
        kwargs.update(remaining)  # flattened **kwargs entries
        return tuple(args), kwargs

    def _with_model(self, args: tuple, kwargs: dict[str, Any], hint: str) -> tuple[tuple, dict]:
        spec = self.spec
        if spec.model_attrs and spec.drop_first and args:
            owner = args[0]
            fields = getattr(type(owner), "model_fields", {})
            for attr in spec.model_attrs:
                if attr in fields and hasattr(owner, "model_copy"):
                    return (owner.model_copy(update={attr: hint}), *args[1:]), kwargs
            return args, kwargs
        if spec.model_arg is None:
            return args, kwargs
        if spec.model_arg in kwargs:
            return args, {**kwargs, spec.model_arg: hint}
        params = list(self.signature.parameters)
        if spec.model_arg in params:
            index = params.index(spec.model_arg)
            if index < len(args):
                return (*args[:index], hint, *args[index + 1 :]), kwargs
            return args, {**kwargs, spec.model_arg: hint}
        return args, kwargs

    # -- results --------------------------------------------------------------------------

    def _record(self, ctx: AgentContext, prepared: _Prepared, step: StepCall, result: Any) -> Any:
        """The result as data (the step's action); the live object is kept for the agent."""
        spec = self.spec
        where = f"{prepared.where} output"
        try:
            if self.is_gen or self.is_async_gen or spec.iterator:
                envelope, live = "iterator", result if isinstance(result, list) else list(result)
            elif spec.manager_class is not None:
                envelope, live = "stream", _drain_manager(result)
            elif prepared.streaming:
                envelope, live = "stream", result if isinstance(result, _Read) else _drain(result)
            else:
                envelope, live = None, result
            error = None
            if isinstance(live, _Read):
                live, error = live.items, live.error
            if envelope is None:
                data = _data.to_data(live, where=where)
            else:
                items = [_data.to_data(item, where=where) for item in live]
                data = {_data.ENVELOPE: envelope, "items": items}
                if error is not None:
                    # the call returned a stream, which broke off after these chunks: the step
                    # keeps them, and the agent reads them before the error, as it would have
                    data["error"] = describe_exception(error)
        except CanonicalEncodingError as exc:
            _keep_encoding_error(ctx, exc)
            raise
        usage = _usage(spec, data)
        if usage:
            step.attributes = {**(step.attributes or {}), **usage}
        prepared.live.append((data, live, error))
        return data

    def _deliver(self, prepared: _Prepared, action: Any, *, is_async: bool) -> Any:
        """What the agent receives for ``action`` (the live object when the call just ran)."""
        spec = self.spec
        error: BaseException | None = None
        if prepared.live and prepared.live[-1][0] is action:
            _, value, error = prepared.live[-1]
        else:
            value = self._rebuild(action, prepared)
            if _data.is_envelope(action, "stream") and isinstance(action.get("error"), dict):
                error = rebuild_exception(action["error"])
            elif spec.reparse is not None and not prepared.streaming:
                value = self._reparse(value, prepared)
        if self.is_gen or self.is_async_gen:
            return value  # the generator wrapper yields from the list
        if spec.iterator:
            return iter(value) if isinstance(value, list) else value
        if spec.manager_class is not None or prepared.streaming:
            if not isinstance(value, list):  # a forced or mocked action that is not a stream
                return value
            stream = make_stream(
                value,
                is_async=is_async,
                sdk_class=_optional_class(spec.stream_class),
                error=error,
            )
            if spec.manager_class is not None:
                manager = _data_class(spec.manager_class)
                extra = {
                    name: prepared.arguments.get(name, self.signature.parameters[name].default)
                    for name in spec.manager_args
                    if name in self.signature.parameters
                }
                return manager(lambda: stream, **extra)
            return stream
        return value

    def _reparse(self, value: Any, prepared: _Prepared) -> Any:
        """A held raw response as the SDK returns it: passed through ``spec.reparse`` with the
        arguments of this call (the caller's ``response_format`` class, its tools)."""
        spec = self.spec
        params = self.signature.parameters
        arguments: dict[str, Any] = {spec.reparse_response: value}
        for keyword, name in spec.reparse_args:
            if name in prepared.arguments:
                arguments[keyword] = prepared.arguments[name]
            elif name in params and params[name].default is not inspect.Parameter.empty:
                arguments[keyword] = params[name].default
        try:
            parsed = _data_class(spec.reparse)(**arguments)  # type: ignore[arg-type]
        except Exception as exc:
            raise RebuildError(
                f"{prepared.where}: the recorded response does not parse again with this call's "
                f"arguments ({type(exc).__name__}: {exc})"
            ) from exc
        _data.copy_response_ids(value, parsed)  # a new object: keep the recorded request id
        return parsed

    def _rebuild(self, action: Any, prepared: _Prepared) -> Any:
        try:
            if _data.is_envelope(action):
                return _data.from_data(action)
            if (
                self.spec.response_type is not None
                and isinstance(action, dict)
                and not prepared.streaming
            ):
                # a plan forced a plain dict as the response: give the agent the SDK's type
                cls = _optional_class(self.spec.response_type)
                if cls is not None:
                    return _data.validate(cls, action, self.spec.response_type)
            return _data.from_data(action)
        except RebuildError as exc:
            raise RebuildError(f"{prepared.where}: {exc}") from exc


# -- helpers ------------------------------------------------------------------------------


def _is_async(fn: Any) -> bool:
    target = inspect.unwrap(fn)
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(fn)


def model_hint() -> str | None:
    """The model a replay plan asks the running step to use (``None``: its own choice)."""
    ctx = current_context()
    return ctx.model_hint if ctx is not None else None


def _drain(stream: Any) -> _Read:
    read = _Read([])
    try:
        for item in stream:
            read.items.append(item)
    except Exception as exc:  # broke off mid-way (an error event, a dropped connection)
        read.error = exc
    finally:
        close = getattr(stream, "close", None)
        if callable(close):
            close()
    return read


async def _drain_async(stream: Any) -> _Read:
    read = _Read([])
    try:
        async for item in stream:
            read.items.append(item)
    except Exception as exc:
        read.error = exc
    finally:
        close = getattr(stream, "close", None) or getattr(stream, "aclose", None)
        if callable(close):
            closing = close()
            if inspect.isawaitable(closing):
                await closing
    return read


def _drain_manager(manager: Any) -> _Read:
    # the manager's helper stream adds derived events; the raw server events are what the
    # SDK rebuilds everything else from, so those are recorded
    with manager as helper:
        raw = getattr(helper, "_raw_stream", None)
        if raw is None:
            raise CanonicalEncodingError(
                f"{type(helper).__qualname__} exposes no raw event stream; this SDK version is "
                "not supported by the recipe"
            )
        return _drain(raw)


def _usage(spec: StepSpec, data: Any) -> dict[str, int]:
    if not (spec.usage_input or spec.usage_output):
        return {}
    sources = data["items"] if _data.is_envelope(data, "stream") else [data]
    usage: dict[str, int] = {}
    for source in sources:
        for key, paths in (
            ("input_tokens", spec.usage_input),
            ("output_tokens", spec.usage_output),
        ):
            value = _data.dig(source, paths)
            if isinstance(value, int) and not isinstance(value, bool):
                usage[key] = value
    return usage


def _keep_encoding_error(ctx: AgentContext, exc: CanonicalEncodingError) -> None:
    # the recorder re-raises the first encoding error at the end of the run even when the
    # agent swallowed it, so an unstorable call can never leave a recording that replays wrong
    driver = ctx._driver
    if hasattr(driver, "encoding_error") and driver.encoding_error is None:
        driver.encoding_error = exc


@functools.cache
def _optional_class(path: str | None) -> type | None:
    """The class at ``path``, or ``None`` when there is none (looked up once per path)."""
    if path is None:
        return None
    try:
        return _data_class(path)
    except (ImportError, AttributeError):
        return None


def _data_class(path: str) -> Any:
    import importlib

    module_name, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _claim_outer_span(outer_modules: Callable[[], list[str]]) -> None:
    """Mark the span another instrumentation opened around this call, when it wraps us.

    An instrumentation installed *after* the patch wraps it, so its span starts before the
    step and ``inside_step()`` cannot cover it. Its span is the current one here; it is
    recognised by its instrumentation scope sharing the package of the wrapper that called us.
    """
    modules = outer_modules()
    if not modules:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    scope = getattr(span, "instrumentation_scope", None)
    scope_name = getattr(scope, "name", None)
    if not scope_name or scope_name == SCOPE_NAME:
        return
    if any(_same_package(scope_name, module) for module in modules):
        span.set_attribute(INTERCEPTED_ATTRIBUTE, True)  # for exporters and other processes
        claim_span(span.get_span_context().span_id)  # for this process's span processor


def _same_package(scope_name: str, module: str) -> bool:
    a, b = scope_name.split("."), module.split(".")
    depth = min(3, len(a), len(b))
    return a[:depth] == b[:depth]
