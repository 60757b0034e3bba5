"""OpenTelemetry GenAI semantic conventions, all four generations in use.

* ≥ v1.37 (and the semantic-conventions-genai repo): content in the span attributes
  ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.system_instructions`` /
  ``gen_ai.tool.definitions`` (JSON strings on spans), or, in event-only capture, in the
  attributes of the ``gen_ai.client.inference.operation.details`` log record (structured
  values). Span attributes win over the log record's.
* v1.28–v1.36: log events ``gen_ai.{system,user,assistant,tool}.message`` and
  ``gen_ai.choice`` (their body holds the message), joined to the span as ``span.logs``; a few
  SDKs emitted the same names as span events, which are read too.
* ≤ v1.27: span events ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` whose
  ``gen_ai.prompt`` / ``gen_ai.completion`` attributes hold OpenAI-style messages as JSON.
* Operations: inference (``chat``, ``text_completion``, ``generate_content``) → llm steps;
  ``execute_tool`` → tool steps; ``embeddings``, ``retrieval``, the memory operations
  (``search_memory``, ``create_memory``, ...) → their kinds; ``invoke_agent`` /
  ``create_agent`` name the agent of the steps inside them; ``invoke_workflow`` groups; ``plan``
  wraps the llm call that produces a plan (a step itself only when nothing is inside it).

A span with no ``gen_ai.operation.name`` still counts when it names a tool (Pydantic AI) or a
model with content (older SDKs). Messages are normalised to the OTel parts shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect
from ..messages import finish_reasons, normalize_messages, text_message

LLM_OPERATIONS = frozenset(
    {"chat", "text_completion", "generate_content", "completion", "generate", "chat.completions"}
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
}
_PARAMETERS = {
    "gen_ai.request.temperature": "temperature",
    "gen_ai.request.max_tokens": "max_tokens",
    "gen_ai.request.top_p": "top_p",
    "gen_ai.request.top_k": "top_k",
    "gen_ai.request.seed": "seed",
    "gen_ai.request.stop_sequences": "stop",
    "gen_ai.request.frequency_penalty": "frequency_penalty",
    "gen_ai.request.presence_penalty": "presence_penalty",
}
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT = "gen_ai.choice"
PROMPT_EVENT = "gen_ai.content.prompt"
COMPLETION_EVENT = "gen_ai.content.completion"
_MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model")
_CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions")


def _ids(value: Any) -> list[str]:
    """Every id a ``gen_ai.tool.call.id`` value holds (it may be an array)."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value if v not in (None, "")]
    return [str(value)]


def _events(span: NormalizedSpan) -> Iterable[tuple[str, Any, Any]]:
    """``(name, body, attributes)`` of every GenAI event, from span events and joined logs."""
    for event in span.events:
        body = event.attributes.get("gen_ai.event.content")  # some SDKs put the body here
        yield event.name, parse_json(body), event.attributes
    for log in span.logs:
        yield log.name, log.body, log.attributes


def _event_message(name: str, body: Any) -> dict[str, Any] | None:
    """One message from a v1.28–v1.36 event body."""
    role = _MESSAGE_EVENTS[name]
    if isinstance(body, str):
        return text_message(role, body)
    if not isinstance(body, dict):
        return None
    data = dict(body)
    data.setdefault("role", role)
    if role == "tool" and "tool_call_id" not in data and "id" in data:
        data["tool_call_id"] = data["id"]
    messages = normalize_messages([data], default_role=role)
    return messages[0] if messages else None


def read_event_content(span: NormalizedSpan) -> tuple[list | None, list | None, list[str]]:
    """Input messages, output messages and finish reasons from the ≤1.27 span events and the
    v1.28–v1.36 message events (``None`` when the span has none of them)."""
    inputs: list[dict[str, Any]] = []
    choices: list[tuple[int, dict[str, Any]]] = []
    reasons: list[str] = []
    prompt = completion = None
    seen = False
    for name, body, attrs in _events(span):
        if name in _MESSAGE_EVENTS:
            seen = True
            message = _event_message(name, body)
            if message is not None:
                inputs.append(message)
        elif name == CHOICE_EVENT:
            seen = True
            if isinstance(body, dict):
                index = body.get("index")
                messages = normalize_messages([body], default_role="assistant")
                if messages:
                    position = index if isinstance(index, int) else len(choices)
                    choices.append((position, messages[0]))
                reasons.extend(finish_reasons([body]))
        elif name == PROMPT_EVENT:
            prompt = normalize_messages(attrs.get("gen_ai.prompt"))
        elif name == COMPLETION_EVENT:
            raw = attrs.get("gen_ai.completion")
            completion = normalize_messages(raw, default_role="assistant")
            reasons.extend(finish_reasons(parse_json(raw)))
    if prompt is not None or completion is not None:
        return prompt, completion, reasons
    if not seen:
        return None, None, reasons
    choices.sort(key=lambda c: c[0])
    return inputs or None, [m for _, m in choices] or None, reasons


def _attributes(span: NormalizedSpan) -> dict[str, Any]:
    """Span attributes over those of the inference details log record (event-only mode)."""
    details = [log for log in span.logs if log.name == DETAILS_EVENT]
    if not details:
        return span.attributes  # type: ignore[return-value]
    merged: dict[str, Any] = {}
    for log in details:
        merged.update(log.attributes)
    merged.update(span.attributes)
    return merged


def _has_event_content(span: NormalizedSpan) -> bool:
    names = {e.name for e in span.events} | {log.name for log in span.logs}
    return bool(
        names & {PROMPT_EVENT, COMPLETION_EVENT, CHOICE_EVENT, DETAILS_EVENT, *_MESSAGE_EVENTS}
    )


def _operation(span: NormalizedSpan, attrs: dict[str, Any]) -> str | None:
    operation = attrs.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation:
        return operation.lower()
    if "gen_ai.tool.name" in attrs:
        return "execute_tool"  # Pydantic AI sets no operation name on tool spans
    if not attrs.keys().isdisjoint(_CONTENT_KEYS) or (
        not attrs.keys().isdisjoint(_MODEL_KEYS) and _has_event_content(span)
    ):
        return "chat"  # SDKs older than the operation name, with content
    return None


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    attrs = _attributes(span)
    operation = _operation(span, attrs)
    if operation is None:
        return False
    agent = attrs.get("gen_ai.agent.name")
    if isinstance(agent, str) and agent:
        mapped.agent = mapped.agent or agent
    mapped.set_conversation(attrs.get("gen_ai.conversation.id"))

    if operation in ("invoke_agent", "create_agent"):
        if mapped.role == Role.OTHER:
            mapped.role = Role.AGENT
            mapped.kind = StepKind.AGENT
            mapped.name = mapped.name or _agent_name(span, attrs)
        _read_messages(span, attrs, mapped)
        return True
    if operation == "invoke_workflow":
        if mapped.role == Role.OTHER:
            mapped.role = Role.WORKFLOW
            mapped.name = mapped.name or str(attrs.get("gen_ai.workflow.name") or span.name)
        _read_messages(span, attrs, mapped)
        return True
    if operation == "plan":
        if mapped.role == Role.OTHER:
            mapped.role = Role.PLAN
            mapped.kind = StepKind.LLM
            mapped.name = mapped.name or span.name
        _read_messages(span, attrs, mapped)
        return True

    if operation in MEMORY_OPERATIONS:
        kind = StepKind.MEMORY
    elif operation in _KINDS:
        kind = _KINDS[operation]
    elif operation in LLM_OPERATIONS:
        kind = StepKind.LLM
    elif mapped.role != Role.OTHER:
        # an operation the conventions do not define (LangSmith writes its run type there,
        # e.g. "chain"): a dialect with precedence already said what this span is
        return False
    else:
        kind = StepKind.SPAN
    name = (attrs.get("gen_ai.tool.name") or span.name) if kind is StepKind.TOOL else span.name
    mapped.set_step(kind, str(name))
    if kind is StepKind.MEMORY:
        mapped.set_attr("operation", operation)
    _usage(attrs, mapped)

    if kind is StepKind.TOOL:
        if not mapped.tool_call_ids:
            mapped.tool_call_ids = _ids(attrs.get("gen_ai.tool.call.id"))
        mapped.set_attr("tool_type", attrs.get("gen_ai.tool.type"))
        mapped.set_attr("tool_description", attrs.get("gen_ai.tool.description") or None)
        # generic input.value / output.value (Koog, MLflow-style) when the opt-in keys are absent
        arguments = attrs.get("gen_ai.tool.call.arguments", attrs.get("input.value"))
        result = attrs.get("gen_ai.tool.call.result", attrs.get("output.value"))
        if arguments is not None:
            mapped.set_inputs({"arguments": parse_json(arguments)})
        if result is not None:
            mapped.set_output(parse_json(result))
        return True
    if kind is StepKind.RETRIEVAL and "gen_ai.retrieval.query.text" in attrs:
        mapped.set_inputs({"query": attrs["gen_ai.retrieval.query.text"]})
        if "gen_ai.retrieval.documents" in attrs:
            mapped.set_output(parse_json(attrs["gen_ai.retrieval.documents"]))
    if kind is StepKind.MEMORY:
        memory_inputs = {
            short: attrs[key]
            for key, short in (
                ("gen_ai.memory.store.id", "store"),
                ("gen_ai.memory.record.id", "record"),
                ("gen_ai.memory.query.text", "query"),
            )
            if key in attrs
        }
        if memory_inputs:
            mapped.set_inputs(memory_inputs)
        if "gen_ai.memory.records" in attrs:
            mapped.set_output(parse_json(attrs["gen_ai.memory.records"]))
    _read_messages(span, attrs, mapped)
    return True


def _agent_name(span: NormalizedSpan, attrs: dict[str, Any]) -> str:
    name = attrs.get("gen_ai.agent.name") or attrs.get("gen_ai.agent.id")
    if isinstance(name, str) and name:
        return name
    for prefix in ("invoke_agent ", "create_agent "):
        if span.name.startswith(prefix) and len(span.name) > len(prefix):
            return span.name[len(prefix) :]
    return span.name


def _usage(attrs: dict[str, Any], mapped: MappedSpan) -> None:
    model = attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model")
    mapped.set_attr("model", model)
    mapped.set_attr("provider", attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system"))
    mapped.set_attr(
        "input_tokens",
        attrs.get("gen_ai.usage.input_tokens", attrs.get("gen_ai.usage.prompt_tokens")),
    )
    mapped.set_attr(
        "output_tokens",
        attrs.get("gen_ai.usage.output_tokens", attrs.get("gen_ai.usage.completion_tokens")),
    )
    mapped.set_attr("response_id", attrs.get("gen_ai.response.id"))
    # a parameter recorded as None was not set (Traceloop's OpenAI instrumentation writes the
    # ``omit`` of every parameter the ``chat.completions.stream`` helper left out that way)
    params = {short: attrs[key] for key, short in _PARAMETERS.items() if attrs.get(key) is not None}
    if params:
        mapped.set_attr("parameters", params)


def _read_messages(span: NormalizedSpan, attrs: dict[str, Any], mapped: MappedSpan) -> None:
    model = attrs.get("gen_ai.request.model")
    if model == "unknown":  # Traceloop's LangChain spans: the model another reader found
        model = mapped.attributes.get("model", model)
    tools = attrs.get("gen_ai.tool.definitions")
    system = attrs.get("gen_ai.system_instructions")
    reasons = attrs.get("gen_ai.response.finish_reasons")
    if "gen_ai.input.messages" in attrs or system is not None:
        mapped.set_llm_inputs(
            attrs.get("gen_ai.input.messages"), system=system, tools=tools, model=model
        )
    if "gen_ai.output.messages" in attrs:
        output = parse_json(attrs["gen_ai.output.messages"])
        mapped.set_llm_output(output)
        if reasons is None:
            reasons = finish_reasons(output) or None
    if not (mapped.has_inputs and mapped.has_output):
        event_inputs, event_outputs, event_reasons = read_event_content(span)
        if event_inputs is not None:
            mapped.set_llm_inputs(event_inputs, tools=tools, model=model)
        if event_outputs is not None:
            mapped.set_llm_output(event_outputs)
        if reasons is None and event_reasons:
            reasons = event_reasons
    mapped.set_attr("finish_reasons", reasons)


register_dialect("gen_ai", read)
