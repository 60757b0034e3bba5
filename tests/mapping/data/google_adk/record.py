"""Record the spans the real ``google-adk`` package emits for the weather agent, offline.

google-adk cannot join the dev extra (it caps ``opentelemetry-sdk`` at 1.44, ``websockets``
below 16 and, through google-genai, ``tenacity`` below 9.2; the dev environment has newer
ones), so its spans are recorded here once, in a scratch environment, and the suite reads the
recordings (``tests/mapping/test_google_adk_recorded.py``)::

    python3.11 -m venv /tmp/adkvenv
    /tmp/adkvenv/bin/pip install google-adk==2.13.0
    /tmp/adkvenv/bin/python tests/mapping/data/google_adk/record.py

A real ``LlmAgent`` with one Python function tool runs under the real ``InMemoryRunner`` on a
``BaseLlm`` subclass that answers without any network (first a function call, then the text);
ADK's own tracer writes through the global SDK ``TracerProvider`` set here, and the finished
spans are written with the OTel OTLP encoder as one OTLP/JSON request per file (hex ids), the
file a collector's file exporter would write. One process per mode, because ADK reads its
telemetry environment variables once per run:

* ``v2_default``: schema 2 (the default since ADK 2.0), no content (the OTel default).
* ``v2_span_only``: schema 2 with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``.
* ``v1_legacy``: ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``, the ``gcp.vertex.agent.*`` spans
  (content on by default).
* ``v1_no_content``: the same with ``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false``.

``adk_1_10.jsonl`` is the same agent on google-adk 1.10.0 (its own spans, before the telemetry
schemas; pip resolved google-genai 2.34.0 beside it), recorded with
``pip install google-adk==1.10.0`` in another scratch environment and
``python record.py adk_1_10``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = {
    "v2_default": {},
    "v2_span_only": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"},
    "v1_legacy": {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1"},
    "v1_no_content": {
        "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1",
        "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false",
    },
}
SESSION_ID = "weather-session"


def record(mode: str) -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    sys.path.insert(0, str(HERE.parents[3] / "src"))  # this checkout's OTLP/JSON writer
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agent_replay.ingest.otlp import to_otlp_json

    provider = TracerProvider(resource=Resource.create({"service.name": "adk-weather"}))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # ADK's module-level tracer is the global proxy

    from google.adk import version
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    # older ADK (1.x) responses have no finish reason
    STOP = (
        {"finish_reason": types.FinishReason.STOP}
        if "finish_reason" in LlmResponse.model_fields
        else {}
    )

    class FakeGemini(BaseLlm):
        """Asks for the weather first; answers once the function response is in."""

        model: str = "fake-gemini"

        async def generate_content_async(self, llm_request, stream=False):
            last = llm_request.contents[-1]
            if any(part.function_response for part in last.parts or ()):
                yield LlmResponse(
                    content=types.Content(
                        role="model", parts=[types.Part(text="It is rainy in Paris.")]
                    ),
                    usage_metadata=types.GenerateContentResponseUsageMetadata(
                        prompt_token_count=30, candidates_token_count=7, total_token_count=37
                    ),
                    **STOP,
                )
                return
            call = types.FunctionCall(id="call-1", name="get_weather", args={"city": "Paris"})
            yield LlmResponse(
                content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=20, candidates_token_count=5, total_token_count=25
                ),
                **STOP,
            )

    def get_weather(city: str) -> str:
        """Weather of a city."""
        return f"rainy in {city}"

    async def run() -> None:
        agent = LlmAgent(
            name="weather",
            model=FakeGemini(),
            instruction="Answer in one sentence.",
            tools=[get_weather],
        )
        runner = InMemoryRunner(agent=agent, app_name="weather_app")
        await runner.session_service.create_session(
            app_name="weather_app", user_id="u1", session_id=SESSION_ID
        )
        question = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
        async for _ in runner.run_async(user_id="u1", session_id=SESSION_ID, new_message=question):
            pass

    asyncio.run(run())
    spans = exporter.get_finished_spans()
    request = to_otlp_json(encode_spans(spans))
    path = HERE / f"{mode}.jsonl"
    path.write_text(json.dumps(request, separators=(",", ":")) + "\n")
    print(f"{path.name}: {len(spans)} spans, google-adk {version.__version__}")


def main() -> None:
    if len(sys.argv) == 2:
        record(sys.argv[1])
        return
    for mode, env in MODES.items():
        subprocess.run([sys.executable, __file__, mode], env={**os.environ, **env}, check=True)


if __name__ == "__main__":
    main()
