"""The memory the span sink counts for remembered traces (``remember_bytes``) is an estimate
from the spans' text and number of values; checked here against what tracemalloc measures
for spans of several shapes, so that the bound means roughly what it says."""

import gc
import tracemalloc
from pathlib import Path

import pytest

from agent_replay.ingest import read_source
from agent_replay.mapping.spans import LogEvent, NormalizedSpan
from agent_replay.store.sink import _memory_size

GENERATED = next(
    p / "shared" / "fixtures" / "generated"
    for p in Path(__file__).resolve().parents
    if (p / "shared").is_dir()
)


def shaped(i: int, attributes: int, text: int, events: int, char: str = "x") -> NormalizedSpan:
    values = {f"gen_ai.attr.{k}": f"v{k}-{i}" for k in range(1, attributes)}
    return NormalizedSpan(
        trace_id=f"{i:032x}",
        span_id=f"{i:016x}",
        name=f"chat {i}",
        parent_span_id=f"{i + 1:016x}",
        start_ns=i,
        end_ns=i + 1,
        attributes={"gen_ai.input.messages": char * text + str(i), **values, "tokens": i},
        logs=tuple(LogEvent(name="e", time_ns=i, attributes={"a": f"b{i}"}) for _ in range(events)),
    )


def measured(make) -> tuple[float, float]:
    """Bytes per span that tracemalloc sees ``make()`` allocate (the least of three tries:
    another thread allocating meanwhile can only add), and the estimate's mean."""
    tries = []
    for _ in range(3):
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            spans = make()
            gc.collect()
            tries.append((tracemalloc.get_traced_memory()[0] - before) / len(spans))
        finally:
            tracemalloc.stop()
    return min(tries), sum(map(_memory_size, spans)) / len(spans)


@pytest.mark.parametrize(
    "attributes,text,events",
    [(3, 10, 0), (20, 10, 0), (3, 5000, 0), (10, 1000, 0), (5, 100, 5)],
)
def test_the_estimate_is_near_the_measured_memory_of_made_spans(attributes, text, events):
    real, estimate = measured(lambda: [shaped(i, attributes, text, events) for i in range(2000)])
    assert 0.7 < estimate / real < 1.3, (real, estimate)


@pytest.mark.parametrize("char", ["\u4e2d", "\U0001f600"])
def test_the_estimate_counts_the_memory_of_wide_text(char):
    """CJK text takes two bytes a character, emoji four (the estimate counted one)."""
    real, estimate = measured(lambda: [shaped(i, 3, 5000, 0, char) for i in range(2000)])
    assert 0.7 < estimate / real < 1.3, (real, estimate)


def test_the_estimate_is_near_the_measured_memory_of_imported_spans():
    raw = (GENERATED / "otel_span_only.jsonl").read_bytes()
    many = b"\n".join([raw.strip()] * 300)  # 1200 spans, each parsed into its own objects
    real, estimate = measured(lambda: read_source(many, "otlp-json").spans)
    assert 0.6 < estimate / real < 1.4, (real, estimate)
