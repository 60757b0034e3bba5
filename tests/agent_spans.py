"""Agent and tool spans made with the OTel API, the way each ecosystem's framework
instrumentations write them, for the tests whose real instrumentation traces only the model
calls (the OpenAI and Anthropic instrumentations make no agent or tool span). A tool span
factory takes ``(tracer, name, call_id, arguments_json, result_json)``."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

QUESTION = "Weather in Paris?"


def genai_agent_span(tracer: trace.Tracer, provider: str = "openai") -> Any:
    return tracer.start_as_current_span(
        "invoke_agent weather_agent",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "weather_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.conversation.id": "conv_1",
        },
    )


def genai_tool_span(
    tracer: trace.Tracer, name: str, call_id: str, arguments: str, result: str
) -> Any:
    return tracer.start_as_current_span(
        f"execute_tool {name}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.arguments": arguments,
            "gen_ai.tool.call.result": result,
        },
    )


def openinference_agent_span(tracer: trace.Tracer) -> Any:
    return tracer.start_as_current_span(
        "weather_agent",
        attributes={
            "openinference.span.kind": "AGENT",
            "agent.name": "weather_agent",
            "session.id": "conv_1",
            "input.value": QUESTION,
            "input.mime_type": "text/plain",
        },
    )


def openinference_tool_span(
    tracer: trace.Tracer, name: str, call_id: str, arguments: str, result: str
) -> Any:
    """A TOOL span as OpenInference framework instrumentations write it (with ``tool.id``)."""
    return tracer.start_as_current_span(
        name,
        attributes={
            "openinference.span.kind": "TOOL",
            "tool.name": name,
            "tool.id": call_id,
            "input.value": arguments,
            "input.mime_type": "application/json",
            "output.value": result,
            "output.mime_type": "application/json",
        },
    )
