"""Record the spans Traceloop's real OpenAI instrumentation 0.54.0 emits for the weather agent.

0.54 is the last release that writes OpenLLMetry's legacy flattened form (``gen_ai.prompt.N.*``,
``gen_ai.completion.N.*``, ``llm.request.functions.N.*``, ``llm.request.type``), still the
common form in the wild; the dev extra holds 0.62.4, which writes the GenAI conventions' JSON
attributes instead, and both cannot be installed at once. So the legacy spans are recorded
here once, in a scratch environment, and the suite reads the recordings
(``tests/mapping/test_openllmetry_real.py``)::

    python3.11 -m venv /tmp/v054
    /tmp/v054/bin/pip install opentelemetry-instrumentation-openai==0.54.0 openai==3.57.0 \\
        opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2
    /tmp/v054/bin/python tests/mapping/data/openllmetry/record.py

The agent is the weather run of ``tests/weather_run.py`` on the real ``openai`` client whose
transport is an ``httpx2.MockTransport`` (no network): an ``invoke_agent weather_agent`` span
around a chat that asks for ``get_weather``, an ``execute_tool`` span (GenAI conventions, made
by the app), and the chat that answers. The finished spans are written with the OTel OTLP
encoder as one OTLP/JSON request per file (hex ids). One process per mode:

* ``legacy_0_54``: the defaults (content on: ``TRACELOOP_TRACE_CONTENT`` unset).
* ``legacy_0_54_no_content``: ``TRACELOOP_TRACE_CONTENT=false``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES = {
    "legacy_0_54": {},
    "legacy_0_54_no_content": {"TRACELOOP_TRACE_CONTENT": "false"},
}
# the weather run of tests/weather_run.py (this runs without the project installed)
SYSTEM, QUESTION, ANSWER = "Be brief.", "Weather in Paris?", "It is rainy in Paris."
CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SERVED_MODEL = "gpt-4o-2024-08-06"


def _api(request: Any) -> Any:
    import httpx2

    sent = json.loads(request.content)
    if sent["messages"][-1]["role"] == "tool":
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
        number, finish, usage = 2, "stop", (20, 6)
    else:
        message = {"role": "assistant", "content": None, "tool_calls": [CALL]}
        number, finish, usage = 1, "tool_calls", (12, 5)
    body = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": SERVED_MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }
    return httpx2.Response(200, json=body)


def record(mode: str) -> None:
    from importlib.metadata import version

    import httpx2
    import openai
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    sys.path.insert(0, str(HERE.parents[3] / "src"))  # this checkout's OTLP/JSON writer
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agent_replay.ingest.otlp import to_otlp_json

    provider = TracerProvider(resource=Resource.create({"service.name": "openllmetry-weather"}))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    client = openai.OpenAI(
        api_key="sk-test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(_api)),
        max_retries=0,
    )
    tracer = provider.get_tracer("weather.app")
    with tracer.start_as_current_span(
        "invoke_agent weather_agent",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"},
    ):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ]
        first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=[TOOL])
        (call,) = first.choices[0].message.tool_calls
        with tracer.start_as_current_span(
            "execute_tool get_weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": call.id,
                "gen_ai.tool.call.arguments": call.function.arguments,
                "gen_ai.tool.call.result": "rainy in Paris",
            },
        ):
            pass
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "rainy in Paris"},
        ]
        final = client.chat.completions.create(model="gpt-4o", messages=messages, tools=[TOOL])
    assert final.choices[0].message.content == ANSWER

    spans = exporter.get_finished_spans()
    request = to_otlp_json(encode_spans(spans))
    path = HERE / f"{mode}.jsonl"
    path.write_text(json.dumps(request, separators=(",", ":")) + "\n")
    package = version("opentelemetry-instrumentation-openai")
    print(f"{path.name}: {len(spans)} spans, opentelemetry-instrumentation-openai {package}")


def main() -> None:
    if len(sys.argv) == 2:
        record(sys.argv[1])
        return
    for mode, env in MODES.items():
        subprocess.run([sys.executable, __file__, mode], env={**os.environ, **env}, check=True)


if __name__ == "__main__":
    main()
