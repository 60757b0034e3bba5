"""Connect any framework: a real OTel instrumentation around the real `openai` client.

The agent below is ordinary OpenAI SDK code, instrumented by
`opentelemetry-instrumentation-genai-openai`; agent-replay captures its spans with
`agent_replay.otel.attach` (a SpanProcessor on your TracerProvider). The HTTP calls go to a
mock transport so the example runs offline; with a real endpoint nothing else changes.

The captured trajectory has no agent code behind it, so it is replayed through the replay
agent (`replayable_agent`) with a scripted resample policy standing in for the model, and
attributed: which of the three LLM calls made the answer wrong?

Run: python examples/otel_openai_agent.py   (writes otel-openai.sqlite, otel-openai-report.*)
"""

from __future__ import annotations

import json
import os
from typing import Any

# capture message content on spans (the instrumentation's opt-in)
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")

import httpx
import openai
from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from agent_replay import CheckpointStore, ScriptedPolicy, attribute, replayable_agent
from agent_replay.otel import attach

RECORDED = [  # what the (mock) model answered in the recorded run
    "I will answer from memory.",
    "The capital of Australia is Sydney.",
    "Summary: The capital of Australia is Sydney.",
]


def mock_transport() -> httpx.MockTransport:
    replies = iter(RECORDED)

    def handler(request: httpx.Request) -> httpx.Response:
        message = {"role": "assistant", "content": next(replies)}
        return httpx.Response(
            200,
            json={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1700000000,
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
            },
        )

    return httpx.MockTransport(handler)


def geography_agent(client: openai.OpenAI, tracer: Any, question: str) -> str:
    """Plain OpenAI SDK code: plan, answer, summarise."""
    with tracer.start_as_current_span(
        "invoke_agent geo",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "geo",
        },
    ):

        def ask(prompt: str) -> str:
            reply = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
            )
            return reply.choices[0].message.content or ""

        plan = ask(f"Plan how to answer: {question}")
        answer = ask(f"{plan} Question: {question}")
        return ask(f"Summarise: {answer}")


# -- replay: the model re-drawn by a scripted policy -------------------------------------------


def text_of(inputs: Any) -> str:
    return " ".join(
        part.get("content", "")
        for message in inputs.get("messages", [])
        for part in message.get("parts", [])
        if isinstance(part, dict)
    )


def reply(content: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": content}],
            "finish_reason": "stop",
        }
    ]


SCRIPT = {
    # step 0: harmless variation in the plan
    0: lambda r: reply(r.rng.choice(["I will answer from memory.", "I will recall it."])),
    # step 1: the model gets the capital right 80% of the time
    1: lambda r: reply(
        "The capital of Australia is " + ("Canberra." if r.rng.random() < 0.8 else "Sydney.")
    ),
    # step 2: summarises whatever it is given (its inputs are rewritten when step 1 changes)
    2: lambda r: reply("Summary: " + text_of(r.inputs).removeprefix("Summarise: ")),
}


def says_canberra(result: dict[str, Any]) -> float:
    final = json.dumps(result["final"])
    return 1.0 if "Canberra" in final else 0.0


def main() -> int:
    for stale in ("otel-openai.sqlite", "otel-openai.sqlite-wal", "otel-openai.sqlite-shm"):
        if os.path.exists(stale):
            os.remove(stale)
    provider = TracerProvider()
    store = CheckpointStore("otel-openai.sqlite")
    processor = attach(store, tracer_provider=provider)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    client = openai.OpenAI(
        api_key="sk-test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.Client(transport=mock_transport()),
    )
    final = geography_agent(client, provider.get_tracer("example"), "Capital of Australia?")
    print(f"agent answered: {final}")
    processor.force_flush()
    instrumentor.uninstrument()
    (summary,) = store.list_sessions()
    run = store.load(summary.session_id)
    print(
        f"captured {len(run.steps)} steps from OTel spans: "
        + ", ".join(f"{s.index} {s.label}" for s in run.steps)
    )

    agent = replayable_agent(run, {"llm": ScriptedPolicy(SCRIPT)})
    result = attribute(run, agent, says_canberra, repair=True)
    print(result.to_text(run))
    explanation = result.explain(run)
    print()
    print(explanation.to_text())
    result.to_json("otel-openai-report.json", explanation=explanation)
    result.to_html("otel-openai-report.html", run, explanation)
    store.close()
    provider.shutdown()
    return 0 if result.culprit_index == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
