"""Spans written by the Langfuse SDK (``langfuse.observation.*``, scope ``langfuse-sdk``).

The SDK states the observation type outright (``generation``, ``tool``, ``agent``, ...) and
puts the observation's input and output in ``langfuse.observation.input`` / ``.output`` as
JSON, so this dialect ranks above the generic ones. :func:`read_observation` is shared with
the Langfuse export importer, which fills from an observation's own ``type`` / ``input`` /
``output`` whatever the original span attributes did not give.

What the SDK's integrations put there (langfuse 5.0.4): the OpenAI drop-in's generation input
is the messages, or ``{"tools": [...], "messages": [...]}`` when the call offered tools; the
LangChain ``CallbackHandler`` appends a chat model's bound tools to its input messages as
``{"role": "tool", "content": <OpenAI tool definition>}``, records a tool's output as the
``ToolMessage`` it returned and the call id in ``metadata.tool_call_id``.
"""

from __future__ import annotations

from typing import Any

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect

PREFIX = "langfuse.observation."
_STEP_TYPES = {
    "generation": StepKind.LLM,
    "embedding": StepKind.EMBEDDING,
    "tool": StepKind.TOOL,
    "retriever": StepKind.RETRIEVAL,
    "evaluator": StepKind.SPAN,
    "guardrail": StepKind.SPAN,
}


def read_observation(
    mapped: MappedSpan,
    *,
    obs_type: Any,
    name: str,
    inputs: Any,
    output: Any,
    model: Any = None,
    has_inputs: bool = True,
    has_output: bool = True,
) -> bool:
    """Fill ``mapped`` from a Langfuse observation's type, input and output (only the fields
    no dialect with precedence filled). Returns whether the type was recognised."""
    kind = str(obs_type or "").lower()
    inputs, output = observed_arguments(decode_json_text(inputs)), decode_json_text(output)
    if kind in ("agent", "chain") and mapped.role == Role.OTHER:
        mapped.role = Role.AGENT if kind == "agent" else Role.WORKFLOW
        mapped.kind = StepKind.AGENT if kind == "agent" else StepKind.SPAN
        mapped.name = mapped.name or name
        if kind == "agent" and mapped.agent is None and name:
            mapped.agent = name
    elif kind in _STEP_TYPES:
        mapped.set_step(_STEP_TYPES[kind], name)
    recognised = kind in _STEP_TYPES or kind in ("agent", "chain", "span", "event")
    if mapped.role == Role.STEP and mapped.kind is StepKind.LLM:
        if has_inputs:
            messages, tools = _prompt_and_tools(inputs)
            mapped.set_llm_inputs(messages, tools=tools, model=model)
            mapped.set_inputs(inputs)  # a prompt that is not messages
        if has_output:
            mapped.set_llm_output(output)
            mapped.set_output(output)
        mapped.set_attr("model", model)
    elif mapped.role == Role.STEP and mapped.kind is StepKind.TOOL:
        if has_inputs and inputs is not None:
            mapped.set_inputs({"arguments": inputs})
        if has_output:
            mapped.set_tool_output(output)
    else:
        if has_inputs:
            if mapped.role in (Role.AGENT, Role.WORKFLOW) and _looks_like_messages(inputs):
                mapped.set_llm_inputs(inputs)
            mapped.set_inputs(inputs)
        if has_output:
            mapped.set_output(output)
    return recognised


def decode_json_text(value: Any) -> Any:
    """Langfuse exports sometimes hold JSON text (even JSON text of JSON text): decode it."""
    for _ in range(2):
        decoded = parse_json(value)
        if decoded is value or not isinstance(decoded, (str, dict, list)):
            return decoded
        value = decoded
    return value


def observed_arguments(value: Any) -> Any:
    """``@observe`` records a function's arguments as ``{"args": [...], "kwargs": {...}}``:
    keyword arguments alone are the input, and so is a single positional argument."""
    if isinstance(value, dict) and set(value) == {"args", "kwargs"}:
        args, kwargs = value["args"], value["kwargs"]
        if isinstance(kwargs, dict) and not args:
            return kwargs
        if isinstance(args, list) and len(args) == 1 and not kwargs:
            return args[0]
    return value


def _prompt_and_tools(inputs: Any) -> tuple[Any, Any]:
    """A generation's messages and the tool definitions offered with them: the OpenAI drop-in's
    ``{"tools": [...], "messages": [...]}``, or the LangChain handler's messages followed by
    ``{"role": "tool", "content": {definition}}`` (a tool result has a ``tool_call_id`` and
    text content)."""
    if isinstance(inputs, dict) and isinstance(inputs.get("messages"), list):
        return inputs, inputs.get("tools")
    if not isinstance(inputs, list):
        return inputs, None
    messages, tools = [], []
    for message in inputs:
        if (
            isinstance(message, dict)
            and message.get("role") == "tool"
            and "tool_call_id" not in message
            and isinstance(message.get("content"), dict)
        ):
            tools.append(message["content"])
        else:
            messages.append(message)
    return (messages, tools) if tools else (inputs, None)


def _looks_like_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and ("role" in v or "parts" in v) for v in value)
    )


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    attrs = span.attributes
    obs_type = attrs.get(PREFIX + "type")
    if obs_type is None:
        return False
    mapped.set_conversation(attrs.get("langfuse.session.id") or attrs.get("session.id"))
    level = attrs.get(PREFIX + "level")
    if level == "ERROR" and mapped.error is None:
        mapped.error = {"type": "error", "message": str(attrs.get(PREFIX + "status_message") or "")}
    call_id = parse_json(attrs.get(PREFIX + "metadata.tool_call_id"))  # the LangChain handler's
    if isinstance(call_id, str) and call_id and not mapped.tool_call_ids:
        mapped.tool_call_ids = [call_id]
    usage = parse_json(attrs.get(PREFIX + "usage_details"))
    if isinstance(usage, dict):  # Langfuse's keys, or the provider's (its OpenAI wrapper)
        for key in ("input", "prompt_tokens", "input_tokens"):
            mapped.set_attr("input_tokens", usage.get(key))
        for key in ("output", "completion_tokens", "output_tokens"):
            mapped.set_attr("output_tokens", usage.get(key))
    return read_observation(
        mapped,
        obs_type=obs_type,
        name=span.name,
        inputs=parse_json(attrs.get(PREFIX + "input")),
        output=parse_json(attrs.get(PREFIX + "output")),
        model=attrs.get(PREFIX + "model.name"),
        has_inputs=PREFIX + "input" in attrs,
        has_output=PREFIX + "output" in attrs,
    )


register_dialect("langfuse", read)
