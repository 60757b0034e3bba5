"""GenAI spans of an agent turn as real instrumentations write them, for the benchmarks that
feed the importer and the receiver (``ingest.py``, ``write_amp.py``): a ``chat`` span whose
output asks the ``search`` tool for a call, then the ``execute_tool`` span answering it."""

from __future__ import annotations

import json
from typing import Any


def recording_tracer(service: str) -> tuple[Any, Any]:
    """A tracer of the real OpenTelemetry SDK and the in-memory exporter its finished spans
    collect in (attributes up to 256 a span: prompts are many message fields)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        span_limits=SpanLimits(max_span_attributes=256),
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider.get_tracer(service), memory


def question(tag: str) -> list:
    """The start of a conversation: the system prompt and the user's question."""
    return [
        {"role": "system", "parts": [{"type": "text", "content": "You are an analyst."}]},
        {"role": "user", "parts": [{"type": "text", "content": f"Question {tag}: " + TEXT}]},
    ]


TEXT = (
    "The quarterly report shows revenue up 12% with strong growth in the cloud segment; "
    "operating margin improved while hardware sales declined slightly. "
)


def chat_then_tool(
    tracer: Any,
    call_id: str,
    messages: list,
    *,
    answer: str,
    result: str,
    input_tokens: int = 100,
    turn: int = 0,
) -> list:
    """Emit the two spans of a turn on ``tracer`` (the prompt is ``messages``, the model says
    ``answer`` and asks for call ``call_id``, the tool answers ``result``); returns the
    conversation with the turn appended."""
    output = [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": answer},
                {
                    "type": "tool_call",
                    "id": call_id,
                    "name": "search",
                    "arguments": {"query": f"q{turn}", "limit": 5},
                },
            ],
        }
    ]
    chat = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.input.messages": json.dumps(messages),
        "gen_ai.output.messages": json.dumps(output),
        "server.address": "api.openai.com",
        "server.port": 443,
    }
    with tracer.start_as_current_span("chat gpt-4o-mini", attributes=chat):
        pass
    tool = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": json.dumps({"query": f"q{turn}", "limit": 5}),
        "gen_ai.tool.call.result": json.dumps(result),
    }
    with tracer.start_as_current_span("execute_tool search", attributes=tool):
        pass
    part = {"type": "tool_call_response", "id": call_id, "response": result}
    return [*messages, output[0], {"role": "tool", "parts": [part]}]
