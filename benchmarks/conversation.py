"""A conversation stored turn by turn, one trace per turn (a chat app whose every request is its
own trace, tied together by ``gen_ai.conversation.id``), the way the span processor and the
receiver store it: each turn's spans are assembled and saved beside the stored session.

Two ways side by side in one run, on the same turns, into fresh store files:

* **continue**: the turn follows the stored session, so only the session's end is read and
  the new steps are sealed after it (what the sinks do);
* **merge whole**: the whole stored session is read (every hash checked) and the turn merged
  into it (what they did before continuing existed; still what happens when a turn does not
  simply follow, e.g. a late span of a stored trace).

Each turn's prompt repeats the conversation so far, as chat APIs are called, so the content
itself grows with the turn number. Printed: total time, the mean cost of the first and last 10
turns, and the ratio of the two ways.

Then a trace that does not follow (a late span of a stored trace, say) merged into a longer
conversation, ``--late-at`` turns: the time of one merge (median of 3) and the memory it
allocates at its peak (``tracemalloc``, a separate run).

Run: ``python benchmarks/conversation.py [--turns N] [--late-at N]`` (``--quick`` for a smoke
run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from agent_replay import CheckpointStore
from agent_replay.mapping.assemble import assemble
from agent_replay.mapping.spans import NormalizedSpan
from agent_replay.store.sink import merged_with_stored


def turns(n: int) -> list[list[NormalizedSpan]]:
    history = [{"role": "system", "parts": [{"type": "text", "content": "You are helpful."}]}]
    out = []
    for t in range(n):
        trace, base = f"{t + 1:032x}", (t + 1) * 1_000_000
        history.append(
            {"role": "user", "parts": [{"type": "text", "content": f"question {t} " + "x" * 150}]}
        )
        answer = {
            "role": "assistant",
            "parts": [{"type": "text", "content": f"answer {t} " + "y" * 150}],
        }
        agent = NormalizedSpan(
            trace_id=trace,
            span_id=f"{2 * t + 1:016x}",
            name="invoke_agent bot",
            start_ns=base,
            end_ns=base + 900,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "bot",
                "gen_ai.conversation.id": "conversation",
            },
        )
        chat = NormalizedSpan(
            trace_id=trace,
            span_id=f"{2 * t + 2:016x}",
            name="chat m",
            parent_span_id=agent.span_id,
            start_ns=base + 100,
            end_ns=base + 800,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "m",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps([answer]),
            },
        )
        history.append(answer)
        out.append([agent, chat])
    return out


def store_turns(path: Path, spans_by_turn: list, *, follow: bool) -> list[float]:
    """Seconds each turn took to assemble and save beside the stored session."""
    costs = []
    with CheckpointStore(path) as store:
        for spans in spans_by_turn:
            start = time.perf_counter()
            for trajectory in assemble(spans):
                store.save_many([merged_with_stored(store, trajectory, follow=follow)])
            costs.append(time.perf_counter() - start)
        assert len(store.load("conversation").steps) == len(spans_by_turn)
    return costs


def late_trace(n: int) -> tuple[float, float]:
    """Seconds and peak MiB allocated to merge a turn that does not follow (merged whole) into
    an ``n``-turn conversation stored turn by turn."""
    spans_by_turn = turns(n + 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "late.sqlite"
        store_turns(path, spans_by_turn[:n], follow=True)
        (late,) = assemble(spans_by_turn[n])
        del spans_by_turn
        with CheckpointStore(path) as store:
            seconds = []
            for _ in range(3):
                start = time.perf_counter()
                merged_with_stored(store, late, follow=False)
                seconds.append(time.perf_counter() - start)
            tracemalloc.start()
            merged_with_stored(store, late, follow=False)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return statistics.median(seconds), peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--late-at", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="a few turns: checks it runs")
    args = parser.parse_args()
    n = 20 if args.quick else args.turns
    late_at = 30 if args.quick else args.late_at
    spans_by_turn = turns(n)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, follow in (("continue", True), ("merge whole", False)):
            results[name] = store_turns(Path(tmp) / f"{name}.sqlite", spans_by_turn, follow=follow)
    print(f"one conversation, {n} turns, one trace each (prompt repeats the conversation)")
    print(f"  {'':<12} {'total s':>9} {'first 10 ms/turn':>17} {'last 10 ms/turn':>16}")
    for name, costs in results.items():
        first, last = sum(costs[:10]) / 10 * 1e3, sum(costs[-10:]) / 10 * 1e3
        print(f"  {name:<12} {sum(costs):9.2f} {first:17.2f} {last:16.2f}")
    ratio = sum(results["merge whole"]) / sum(results["continue"])
    last_ratio = sum(results["merge whole"][-10:]) / sum(results["continue"][-10:])
    print(
        f"  merge whole / continue: {ratio:.1f}x in total, {last_ratio:.1f}x on the last 10 turns"
    )
    seconds, mib = late_trace(late_at)
    print(
        f"a turn that does not follow, merged into {late_at} stored turns: "
        f"{seconds * 1e3:.0f} ms, {mib:.1f} MiB allocated at the peak"
    )


if __name__ == "__main__":
    main()
