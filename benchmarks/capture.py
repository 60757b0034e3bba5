"""Capture cost on the application thread: TrajectorySpanProcessor vs BatchSpanProcessor.

Both processors get the same GenAI spans (an agent run: ``invoke_agent`` > ``chat`` >
``execute_tool`` > ``chat``, with the attributes and message JSON that
opentelemetry-instrumentation-genai-openai writes with content capture on). The SDK's
``BatchSpanProcessor`` exports to a no-op exporter. Three figures, each a median over
alternating repetitions in one run:

* hooks: ``on_start`` + ``on_end`` called directly on finished spans, both workers kept
  asleep (the processor alone, on the application thread);
* span, wall: creating, filling and ending a span through a tracer, wall clock;
* span, CPU: the same, CPU time of the application thread only (excludes time the worker
  thread holds the GIL);
* paced: agent runs separated by 0.5 ms of idle time (an agent waits for its LLM far longer),
  mean span cost and the slowest run (a run that waited for the worker's GIL).

In a tight loop the worker's own work (mapping, hashing, SQLite: far more than a no-op export)
competes with the application for the GIL, which the wall figure includes and the CPU figure
does not.

Run: ``python benchmarks/capture.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agent_replay.otel import TrajectorySpanProcessor

SPANS_PER_RUN = 4

_INPUT = json.dumps(
    [
        {"role": "system", "parts": [{"type": "text", "content": "You are a weather bot."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris? " * 20}]},
    ]
)
_CALL = {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "P"}}
_OUTPUT = json.dumps([{"role": "assistant", "parts": [_CALL], "finish_reason": "tool_call"}])
_TOOLS = json.dumps(
    [
        {
            "name": "get_weather",
            "description": "Get weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "type": "function",
        }
    ]
)
CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "gpt-4o-mini",
    "gen_ai.request.temperature": 0.2,
    "server.address": "api.openai.com",
    "server.port": 443,
    "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
    "gen_ai.response.id": "chatcmpl-1",
    "gen_ai.response.finish_reasons": ("tool_calls",),
    "gen_ai.usage.input_tokens": 57,
    "gen_ai.usage.output_tokens": 15,
    "gen_ai.input.messages": _INPUT,
    "gen_ai.output.messages": _OUTPUT,
    "gen_ai.tool.definitions": _TOOLS,
}
TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "get_weather",
    "gen_ai.tool.call.id": "call_1",
    "gen_ai.tool.type": "function",
    "gen_ai.tool.call.arguments": '{"city": "P"}',
    "gen_ai.tool.call.result": '{"temp_f": 57, "conditions": "rainy"}',
}
AGENT = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "weather_agent",
    "gen_ai.provider.name": "openai",
}


class NoOpExporter(SpanExporter):
    def export(self, spans) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def agent_run(tracer) -> None:
    with tracer.start_as_current_span("invoke_agent weather_agent", attributes=AGENT):
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes=CHAT):
            pass
        with tracer.start_as_current_span("execute_tool get_weather", attributes=TOOL):
            pass
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes=CHAT):
            pass


def finished_spans(count: int) -> list[ReadableSpan]:
    """Real ended SDK spans (from a provider without processors), to feed hooks directly."""
    collected: list[ReadableSpan] = []

    class Collect(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            collected.append(span)

    provider = TracerProvider()
    provider.add_span_processor(Collect())
    tracer = provider.get_tracer("bench")
    while len(collected) < count:
        agent_run(tracer)
    return collected[:count]


def make_processor(kind: str, directory: Path, quiet_for: int = 0) -> SpanProcessor | None:
    """``quiet_for`` > 0: a queue and batch threshold above that many spans and no scheduled
    wake-up, so that the worker stays asleep while the hooks alone are timed."""
    options: dict = {}
    if quiet_for:
        options = {
            "max_queue_size": quiet_for + 1,
            "max_export_batch_size": quiet_for + 1,
            "schedule_delay_millis": 600_000,
        }
    if kind == "batch":
        return BatchSpanProcessor(NoOpExporter(), **options)
    if kind == "trajectory":
        return TrajectorySpanProcessor(directory / f"{time.perf_counter_ns()}.sqlite", **options)
    return None


def time_spans(kind: str, runs: int, directory: Path) -> tuple[float, float]:
    """Per-span (wall, CPU) seconds for creating and ending spans with ``kind`` installed."""
    provider = TracerProvider()
    processor = make_processor(kind, directory)
    if processor is not None:
        provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    agent_run(tracer)  # warm caches
    gc.collect()  # start every sample from the same heap: earlier samples leave garbage
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(runs):
        agent_run(tracer)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    provider.shutdown()  # drains and stores, outside the timed block
    return wall / (runs * SPANS_PER_RUN), cpu / (runs * SPANS_PER_RUN)


def time_paced(kind: str, runs: int, directory: Path) -> tuple[float, float]:
    """(mean per-span seconds, slowest agent run seconds) with idle gaps between runs."""
    provider = TracerProvider()
    processor = make_processor(kind, directory)
    if processor is not None:
        provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    agent_run(tracer)
    gc.collect()
    total = slowest = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        agent_run(tracer)
        elapsed = time.perf_counter() - start
        total += elapsed
        slowest = max(slowest, elapsed)
        time.sleep(0.0005)
    provider.shutdown()
    return total / (runs * SPANS_PER_RUN), slowest


def time_hooks(kind: str, spans: list[ReadableSpan], directory: Path) -> float:
    """Per-span seconds of ``on_start`` + ``on_end`` alone (the worker kept asleep)."""
    processor = make_processor(kind, directory, quiet_for=len(spans))
    assert processor is not None
    on_start: Callable = processor.on_start
    on_end: Callable = processor.on_end
    gc.collect()
    start = time.perf_counter()
    for span in spans:
        on_start(span)  # type: ignore[arg-type]  # both only read the span here
        on_end(span)
    elapsed = time.perf_counter() - start
    processor.shutdown()
    return elapsed / len(spans)


def time_worker(spans: list[ReadableSpan], directory: Path) -> tuple[float, float, float]:
    """Per-span seconds of the worker's stages (normalise, map + assemble + seal, store) for
    ``spans`` (fresh trace ids each call, so nothing merges with earlier samples)."""
    from agent_replay.mapping.assemble import assemble
    from agent_replay.mapping.spans import from_readable_span
    from agent_replay.store import CheckpointStore
    from agent_replay.store.sink import rehome, save_merged

    spans = finished_spans(len(spans))  # new trace ids
    with CheckpointStore(directory / f"w{time.perf_counter_ns()}.sqlite") as store:
        start = time.perf_counter()
        normalized = [from_readable_span(s) for s in spans]
        mapped = time.perf_counter()
        trajectories = assemble(normalized)
        assembled = time.perf_counter()
        # what the sink does with them: the trace index asked, merged with the store, saved
        covered = {(s.trace_id, s.span_id) for s in normalized}
        save_merged(store, rehome(store, trajectories), store.save_many, covered)
        saved = time.perf_counter()
    n = len(spans)
    return (mapped - start) / n, (assembled - mapped) / n, (saved - assembled) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--runs", type=int, default=500, help="agent runs (4 spans) per sample")
    parser.add_argument("--paced-repeats", type=int, default=5)
    parser.add_argument(
        "--gc-off",
        action="store_true",
        help="disable the cyclic garbage collector during the paced runs (its pauses, which the "
        "worker's allocations make more frequent, dominate the slowest run)",
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.runs, args.paced_repeats = 3, 50, 1
    spans = finished_spans(args.runs * SPANS_PER_RUN)
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for repeat in range(args.repeats):
            # alternate the order so that drift on a noisy machine hits both sides alike
            kinds = ("batch", "trajectory") if repeat % 2 == 0 else ("trajectory", "batch")
            for kind in kinds:
                results.setdefault(f"hooks {kind}", []).append(time_hooks(kind, spans, directory))
            for kind in ("none", *kinds):
                wall, cpu = time_spans(kind, args.runs, directory)
                results.setdefault(f"wall {kind}", []).append(wall)
                results.setdefault(f"cpu {kind}", []).append(cpu)
            if repeat < args.paced_repeats:
                stages = time_worker(spans, directory)
                for name, value in zip(("normalise", "assemble", "store"), stages, strict=True):
                    results.setdefault(f"worker {name}", []).append(value)
                if args.gc_off:
                    gc.disable()
                for kind in kinds:
                    mean, slowest = time_paced(kind, args.runs, directory)
                    results.setdefault(f"paced {kind}", []).append(mean)
                    results.setdefault(f"slowest {kind}", []).append(slowest)
                gc.enable()
    med = {k: statistics.median(v) for k, v in results.items()}
    print(
        f"capture benchmark: {args.repeats} repeats x {args.runs * SPANS_PER_RUN} GenAI spans, "
        "medians, per span"
    )
    print(f"{'':26}{'Batch(no-op)':>14}{'Trajectory':>14}{'ratio':>8}")
    for label, key in (
        ("hooks on_start+on_end", "hooks"),
        ("span lifecycle, wall", "wall"),
        ("span lifecycle, CPU", "cpu"),
        ("paced, mean", "paced"),
    ):
        batch, ours = med[f"{key} batch"], med[f"{key} trajectory"]
        print(f"{label:26}{batch * 1e6:11.2f} us{ours * 1e6:11.2f} us{ours / batch:7.2f}x")
    print(
        f"paced, slowest agent run: median {med['slowest batch'] * 1e3:.2f} ms / max "
        f"{max(results['slowest batch']) * 1e3:.2f} ms (Batch) vs median "
        f"{med['slowest trajectory'] * 1e3:.2f} ms / max "
        f"{max(results['slowest trajectory']) * 1e3:.2f} ms (Trajectory), "
        f"{args.paced_repeats} samples{', cyclic GC off' if args.gc_off else ''}"
    )
    stages = {name: med[f"worker {name}"] * 1e6 for name in ("normalise", "assemble", "store")}
    print(
        "worker thread, per span (off the application thread, same GIL): "
        + ", ".join(f"{name} {value:.1f} us" for name, value in stages.items())
        + f", total {sum(stages.values()):.1f} us"
    )
    print(
        f"(no processor at all: span lifecycle {med['wall none'] * 1e6:.2f} us wall, "
        f"{med['cpu none'] * 1e6:.2f} us CPU)"
    )


if __name__ == "__main__":
    main()
