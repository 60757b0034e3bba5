"""Interception overhead per call, side by side with the bare SDK call over the same transport.

One agent makes CALLS ``client.chat.completions.create`` calls with the real ``openai`` client
over an ``httpx2.MockTransport`` (a canned JSON response: no network, so the SDK's own work is
all that is measured). Variants, each timed per call, interleaved and repeated; printed: the
median per call, its ratio to the bare call, and the overhead as the median of per-repeat
differences to the bare run of the same repeat (paired, so slow drift of a shared machine
cancels out):

* bare             - the SDK as installed, no patch
* patched, no run  - ``instrument.installed("openai")``, called outside any run (pass-through)
* recording        - the same calls inside ``record_agent`` (each one a step, data stored)
* replay, re-drawn - inside ``replay_agent`` with ``ablate_from(0)``: every call live again
* replay, held     - a factual replay: every call served from the recording, no HTTP

    python benchmarks/interception.py    [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx2
import openai

from agent_replay import ReplayPlan, instrument
from agent_replay.instrument import record_agent, replay_agent

CALLS = 20
REPEATS = 25
RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "It is rainy in Paris, 14C."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49},
}
MESSAGES = [
    {"role": "system", "content": "You are a helpful weather assistant."},
    {"role": "user", "content": "What is the weather in Paris today?"},
]


def make_client() -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-bench",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(
            transport=httpx2.MockTransport(lambda request: httpx2.Response(200, json=RESPONSE))
        ),
    )


CLIENT = make_client()


def agent() -> str:
    text = ""
    for i in range(CALLS):
        reply = CLIENT.chat.completions.create(
            model="gpt-4o-mini", messages=[*MESSAGES, {"role": "user", "content": f"#{i}"}]
        )
        text = reply.choices[0].message.content
    return text


def per_call_us(run) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) / CALLS * 1e6


def main(repeats: int = REPEATS) -> None:
    agent()  # warm up the client (connection pool, model classes)
    with instrument.installed("openai"):
        trajectory = record_agent(agent)
    samples: dict[str, list[float]] = {
        "bare": [],
        "patched, no run": [],
        "recording": [],
        "replay, re-drawn": [],
        "replay, held": [],
    }
    redraw = ReplayPlan.ablate_from(0)
    for _ in range(repeats):
        samples["bare"].append(per_call_us(agent))
        with instrument.installed("openai"):
            samples["patched, no run"].append(per_call_us(agent))
            samples["recording"].append(per_call_us(lambda: record_agent(agent)))
            samples["replay, re-drawn"].append(
                per_call_us(lambda: replay_agent(agent, trajectory, redraw))
            )
            samples["replay, held"].append(per_call_us(lambda: replay_agent(agent, trajectory)))
    bare = statistics.median(samples["bare"])
    print(f"openai {openai.__version__}, {CALLS} calls per run, median of {repeats} runs")
    print(f"{'variant':<18}{'us/call':>10}{'vs bare':>10}{'paired overhead us':>20}")
    for name, values in samples.items():
        median = statistics.median(values)
        paired = statistics.median(v - b for v, b in zip(values, samples["bare"], strict=True))
        print(f"{name:<18}{median:>10.1f}{median / bare:>9.2f}x{paired:>20.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few runs: checks it runs")
    main(repeats=3 if parser.parse_args().quick else REPEATS)
