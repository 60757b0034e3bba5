"""Instrumenting a real client for one test: the instrumentor writes to the test's SDK provider,
and once it is uninstrumented a call proves that the client emits no span any more."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.instrumentation.utils import unwrap
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def _unwrap(obj: Any, attr: str) -> None:
    """``unwrap`` as Traceloop's OpenAI and LangChain instrumentors 0.62.4 call it: a module path
    and ``"Class.method"``, which ``unwrap`` of opentelemetry-instrumentation 0.66b2 reads as
    attribute ``"Class.method"`` of ``module.Class``, so their ``uninstrument()`` leaves every
    wrapper in place. This names the class in the path instead."""
    if isinstance(obj, str) and "." in attr:
        owner, attr = attr.rsplit(".", 1)
        obj = f"{obj}.{owner}"
    unwrap(obj, attr)


def openai_instrumentor(vendor: str) -> Any:
    """The OpenAI instrumentor of ``vendor``: ``gen_ai`` (the OTel GenAI one),
    ``openinference`` or ``traceloop`` (OpenLLMetry's)."""
    if vendor == "gen_ai":
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
    elif vendor == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
    else:
        assert vendor == "traceloop", vendor
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    return OpenAIInstrumentor()


def uninstrument(instrumentor: Any) -> None:
    """``instrumentor.uninstrument()``, with Traceloop's calls of ``unwrap`` made to work."""
    from opentelemetry.instrumentation import langchain as traceloop_langchain
    from opentelemetry.instrumentation.openai import v1 as traceloop_openai

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(traceloop_openai, "unwrap", _unwrap)
        patch.setattr(traceloop_langchain, "unwrap", _unwrap)
        instrumentor.uninstrument()


@contextlib.contextmanager
def instrumented(
    instrumentor: Any,
    provider: tuple[TracerProvider, InMemorySpanExporter],
    call: Callable[[], Any],
    **options: Any,
) -> Iterator[Any]:
    """Instrument with ``provider``'s SDK provider (and ``options``) for the ``with`` block; then
    uninstrument, run ``call`` (the instrumented client's calls) and prove it left no span."""
    tracer_provider, exporter = provider
    instrumentor.instrument(tracer_provider=tracer_provider, **options)
    try:
        yield instrumentor
    finally:
        uninstrument(instrumentor)
        exporter.clear()
        call()
        leaked = [s.name for s in exporter.get_finished_spans()]
        assert not leaked, f"instrumentation still active after uninstrument: {leaked}"
