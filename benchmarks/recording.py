"""Recording overhead per step: ``record()`` vs the same agent run with a pass-through ctx.

The agent makes ``--steps`` steps (alternating ``ctx.llm`` and ``ctx.tool`` with small inputs
and outputs). The bare run hands it a minimal context whose methods just call ``produce``;
the recorded run goes through :func:`agent_replay.record` (sealing and hashing every step,
plus run setup, amortised over the run's steps). Three tracing setups: no SDK (the OTel API's
no-op tracer), an SDK ``TracerProvider`` without processors, and one with a
``BatchSpanProcessor`` exporting to a no-op exporter. Medians over alternating repetitions.

Run: ``python benchmarks/recording.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agent_replay import record


class NoOpExporter(SpanExporter):
    def export(self, spans) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class PassThrough:
    """The least a ctx can do: call ``produce`` (with the inputs when it takes them)."""

    def llm(self, name: str, produce: Callable[..., Any] | None = None, **inputs: Any) -> Any:
        return produce() if produce is not None else None

    tool = llm
    memory = llm


def make_agent(steps: int) -> Callable[..., Any]:
    def agent(ctx, question):
        answer = question
        for i in range(steps // 2):
            plan = ctx.llm("plan", produce=lambda i=i: {"next": "search", "i": i}, prompt=answer)
            answer = ctx.tool("search", produce=lambda i=i: f"result {i}", q=plan["next"])
        return answer

    return agent


def provider(kind: str) -> TracerProvider | None:
    if kind == "none":
        return None
    tracer_provider = TracerProvider()
    if kind == "sdk+batch":
        # a queue large enough that no span is dropped (dropping would be cheaper)
        tracer_provider.add_span_processor(
            BatchSpanProcessor(NoOpExporter(), max_queue_size=1_000_000)
        )
    return tracer_provider


def per_step(fn: Callable[[], Any], runs: int, steps: int) -> float:
    fn()  # warm caches
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / (runs * steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per run (even)")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.repeats = 30, 3
    agent = make_agent(args.steps)
    task = {"question": "why?"}
    bare_ctx = PassThrough()
    kinds = ("none", "sdk", "sdk+batch")
    samples: dict[str, list[float]] = {}
    for repeat in range(args.repeats):
        order = kinds if repeat % 2 == 0 else tuple(reversed(kinds))
        samples.setdefault("bare", []).append(
            per_step(lambda: agent(bare_ctx, **task), args.runs, args.steps)
        )
        for kind in order:
            tracer_provider = provider(kind)
            samples.setdefault(kind, []).append(
                per_step(
                    lambda tp=tracer_provider: record(agent, task, tracer_provider=tp),
                    args.runs,
                    args.steps,
                )
            )
            if tracer_provider is not None:
                tracer_provider.shutdown()
    med = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
    print(
        f"recording benchmark: {args.runs} runs x {args.steps} steps, {args.repeats} repeats, "
        "medians, per step"
    )
    print(f"bare agent (pass-through ctx): {med['bare']:.2f} us/step")
    labels = {
        "none": "record(), no SDK (API no-op tracer)",
        "sdk": "record(), SDK TracerProvider",
        "sdk+batch": "record(), SDK + BatchSpanProcessor",
    }
    for kind in kinds:
        print(
            f"{labels[kind]:38} {med[kind]:7.2f} us/step, overhead {med[kind] - med['bare']:.2f} us"
        )


if __name__ == "__main__":
    main()
