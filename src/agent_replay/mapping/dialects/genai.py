"""OpenTelemetry GenAI semantic conventions (v1.37+ attributes and the newer operations).

Operations map to step kinds; ``invoke_agent`` / ``create_agent`` name the agent of the steps
inside them and ``invoke_workflow`` groups them. Content comes from ``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions`` and the tool call attributes, which
arrive as JSON strings on spans and as structured values on log events; both are accepted.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as g

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect

LLM_OPERATIONS = frozenset(
    {"chat", "text_completion", "generate_content", "completion", "generate"}
)
MEMORY_OPERATIONS = frozenset(
    {
        "create_memory_store",
        "search_memory",
        "create_memory",
        "update_memory",
        "upsert_memory",
        "delete_memory",
        "delete_memory_store",
    }
)
_KINDS = {
    "embeddings": StepKind.EMBEDDING,
    "retrieval": StepKind.RETRIEVAL,
    "execute_tool": StepKind.TOOL,
    "plan": StepKind.LLM,
}
_PARAMETERS = {
    g.GEN_AI_REQUEST_TEMPERATURE: "temperature",
    g.GEN_AI_REQUEST_MAX_TOKENS: "max_tokens",
    g.GEN_AI_REQUEST_TOP_P: "top_p",
    g.GEN_AI_REQUEST_TOP_K: "top_k",
    g.GEN_AI_REQUEST_SEED: "seed",
    g.GEN_AI_REQUEST_STOP_SEQUENCES: "stop",
    g.GEN_AI_REQUEST_FREQUENCY_PENALTY: "frequency_penalty",
    g.GEN_AI_REQUEST_PRESENCE_PENALTY: "presence_penalty",
}


def tool_call_ids(messages: Any) -> list[str]:
    """Ids of ``tool_call`` parts in GenAI output messages."""
    ids: list[str] = []
    if not isinstance(messages, list):
        return ids
    for message in messages:
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and part.get("type") == "tool_call" and part.get("id"):
                ids.append(str(part["id"]))
    return ids


def _ids(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value if v is not None]
    return [str(value)]


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    attrs = span.attributes
    operation = attrs.get(g.GEN_AI_OPERATION_NAME)
    if operation is None and g.GEN_AI_TOOL_NAME not in attrs:
        return False
    operation = str(operation or "execute_tool").lower()
    agent = attrs.get(g.GEN_AI_AGENT_NAME)
    if isinstance(agent, str):
        mapped.agent = mapped.agent or agent
    conversation = attrs.get(g.GEN_AI_CONVERSATION_ID)
    if conversation is not None:
        mapped.conversation_id = mapped.conversation_id or str(conversation)

    if operation in ("invoke_agent", "create_agent"):
        if mapped.role == Role.OTHER:
            mapped.role = Role.AGENT
            mapped.kind = StepKind.AGENT
            mapped.name = mapped.name or (agent if isinstance(agent, str) else span.name)
        return True
    if operation == "invoke_workflow":
        if mapped.role == Role.OTHER:
            mapped.role = Role.WORKFLOW
            mapped.name = mapped.name or str(attrs.get(g.GEN_AI_WORKFLOW_NAME) or span.name)
        return True

    if operation in LLM_OPERATIONS or operation in _KINDS or operation in MEMORY_OPERATIONS:
        kind = (
            StepKind.MEMORY
            if operation in MEMORY_OPERATIONS
            else _KINDS.get(operation, StepKind.LLM)
        )
    else:
        kind = StepKind.SPAN
    name = attrs.get(g.GEN_AI_TOOL_NAME) or span.name if kind is StepKind.TOOL else span.name
    mapped.set_step(kind, str(name))
    if kind is StepKind.MEMORY:
        mapped.set_attr("operation", operation)

    model = attrs.get(g.GEN_AI_RESPONSE_MODEL) or attrs.get(g.GEN_AI_REQUEST_MODEL)
    mapped.set_attr("model", model)
    mapped.set_attr("provider", attrs.get(g.GEN_AI_PROVIDER_NAME) or attrs.get(g.GEN_AI_SYSTEM))
    mapped.set_attr(
        "input_tokens",
        attrs.get(g.GEN_AI_USAGE_INPUT_TOKENS, attrs.get(g.GEN_AI_USAGE_PROMPT_TOKENS)),
    )
    mapped.set_attr(
        "output_tokens",
        attrs.get(g.GEN_AI_USAGE_OUTPUT_TOKENS, attrs.get(g.GEN_AI_USAGE_COMPLETION_TOKENS)),
    )
    mapped.set_attr("finish_reasons", attrs.get(g.GEN_AI_RESPONSE_FINISH_REASONS))
    mapped.set_attr("response_id", attrs.get(g.GEN_AI_RESPONSE_ID))

    if kind is StepKind.TOOL:
        mapped.tool_call_ids = mapped.tool_call_ids or _ids(attrs.get(g.GEN_AI_TOOL_CALL_ID))
        if g.GEN_AI_TOOL_CALL_ARGUMENTS in attrs:
            mapped.set_inputs({"arguments": parse_json(attrs[g.GEN_AI_TOOL_CALL_ARGUMENTS])})
        if g.GEN_AI_TOOL_CALL_RESULT in attrs:
            mapped.set_output(parse_json(attrs[g.GEN_AI_TOOL_CALL_RESULT]))
        return True

    inputs: dict[str, Any] = {}
    if g.GEN_AI_INPUT_MESSAGES in attrs:
        inputs["messages"] = parse_json(attrs[g.GEN_AI_INPUT_MESSAGES])
    if g.GEN_AI_SYSTEM_INSTRUCTIONS in attrs:
        inputs["system"] = parse_json(attrs[g.GEN_AI_SYSTEM_INSTRUCTIONS])
    if inputs:
        if g.GEN_AI_TOOL_DEFINITIONS in attrs:
            inputs["tools"] = parse_json(attrs[g.GEN_AI_TOOL_DEFINITIONS])
        if isinstance(attrs.get(g.GEN_AI_REQUEST_MODEL), str):
            inputs["model"] = attrs[g.GEN_AI_REQUEST_MODEL]
        params = {short: attrs[key] for key, short in _PARAMETERS.items() if key in attrs}
        if params:
            inputs["parameters"] = params
        mapped.set_inputs(inputs)
    if kind is StepKind.RETRIEVAL and "gen_ai.retrieval.query.text" in attrs:
        mapped.set_inputs({"query": attrs["gen_ai.retrieval.query.text"]})
        if "gen_ai.retrieval.documents" in attrs:
            mapped.set_output(parse_json(attrs["gen_ai.retrieval.documents"]))
    if g.GEN_AI_OUTPUT_MESSAGES in attrs:
        output = parse_json(attrs[g.GEN_AI_OUTPUT_MESSAGES])
        mapped.set_output(output)
        if not mapped.requested_tool_calls:
            mapped.requested_tool_calls = tool_call_ids(output)
    return True


register_dialect("gen_ai", read)
