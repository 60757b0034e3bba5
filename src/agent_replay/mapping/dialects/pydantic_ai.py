"""Pydantic AI / Logfire: what pydantic-ai adds around its GenAI spans (scope ``pydantic-ai``).

Its ``chat {model}`` spans follow the GenAI conventions (read by that dialect). This fills the
rest: the ``{agent} run`` span (``agent_name`` / ``gen_ai.agent.name``,
``pydantic_ai.all_messages``, ``final_result``) names the agent; ``running tool`` spans carry
``tool_arguments`` / ``tool_response``; with ``InstrumentationSettings(version=1,
event_mode="attributes")`` the legacy message events sit in a JSON attribute ``events``.

Checked against pydantic-ai 2.68 (``version=2`` to ``6``): the run span (``agent run`` or
``invoke_agent {agent}``) has ``gen_ai.system_instructions`` but no ``gen_ai.input.messages``,
so its first user message comes from ``pydantic_ai.all_messages``. With
``include_content=False`` the messages keep their shape but their text parts lose
``content``; such a span is read as having no content at all (as the other SDKs leave it)
rather than as empty prompts and answers.
"""

from __future__ import annotations

from typing import Any

from ...model import StepKind
from .. import LogEvent, MappedSpan, NormalizedSpan, Role, parse_json, register_dialect
from .genai import read_event_content

NO_CONTENT = (
    "pydantic-ai recorded this step without its content; instrument with "
    "InstrumentationSettings(include_content=True) to make it replayable"
)


def _is_pydantic(span: NormalizedSpan) -> bool:
    attrs = span.attributes
    return (
        span.scope_name in ("pydantic-ai", "pydantic_ai")
        or "pydantic_ai.all_messages" in attrs
        or "tool_arguments" in attrs
        or "logfire.msg" in attrs
    )


def _events_attribute(span: NormalizedSpan) -> list[LogEvent]:
    events = parse_json(span.attributes.get("events"))
    out = []
    for event in events if isinstance(events, list) else ():
        if isinstance(event, dict) and isinstance(event.get("event.name"), str):
            body: dict[str, Any] = {k: v for k, v in event.items() if k != "event.name"}
            out.append(LogEvent(name=event["event.name"], time_ns=0, body=body))
    return out


def _without_content(*values: Any) -> bool:
    """Whether pydantic-ai left the content out of these messages (``include_content=False``):
    a text or thinking part without ``content``, which it never writes otherwise."""
    for value in values:
        messages = parse_json(value)
        for message in messages if isinstance(messages, list) else ():
            parts = message.get("parts") if isinstance(message, dict) else None
            for part in parts if isinstance(parts, list) else ():
                if (
                    isinstance(part, dict)
                    and part.get("type") in ("text", "thinking")
                    and "content" not in part
                ):
                    return True
    return False


def _forget_content(mapped: MappedSpan) -> None:
    """Drop the empty shells another dialect read as content; keep the tool call ids."""
    mapped.set_attr("tool_calls", mapped.requested_tool_calls or None)
    mapped.inputs = mapped.action = None
    mapped.has_inputs = mapped.has_output = False
    mapped.notes.append(NO_CONTENT)


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    if not _is_pydantic(span):
        return False
    attrs = span.attributes
    agent = attrs.get("agent_name") or attrs.get("gen_ai.agent.name")
    if (
        "pydantic_ai.all_messages" in attrs
        or "final_result" in attrs
        or (span.name.endswith(" run") and agent)
    ):
        if mapped.role == Role.OTHER:
            mapped.role, mapped.kind = Role.AGENT, StepKind.AGENT
            mapped.name = mapped.name or str(agent or span.name)
        if isinstance(agent, str) and mapped.agent is None:
            mapped.agent = agent
        messages = parse_json(attrs.get("pydantic_ai.all_messages"))
        if isinstance(messages, list) and not _without_content(messages):
            first_user = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
            if isinstance(mapped.inputs, dict) and not mapped.inputs.get("messages"):
                mapped.has_inputs = False  # the GenAI dialect found the instructions only
            mapped.set_llm_inputs(first_user[:1], system=attrs.get("gen_ai.system_instructions"))
        if "final_result" in attrs:
            mapped.set_output(parse_json(attrs["final_result"]))
        return True
    if "tool_arguments" in attrs or "tool_response" in attrs:
        mapped.set_step(StepKind.TOOL, str(attrs.get("gen_ai.tool.name") or span.name))
        if "tool_arguments" in attrs:
            mapped.set_inputs({"arguments": parse_json(attrs["tool_arguments"])})
        if "tool_response" in attrs:
            mapped.set_output(parse_json(attrs["tool_response"]))
        return True
    if mapped.kind is StepKind.LLM and _without_content(
        attrs.get("gen_ai.input.messages"), attrs.get("gen_ai.output.messages")
    ):
        _forget_content(mapped)
        return True
    if "events" in attrs and mapped.kind is StepKind.LLM:
        events = _events_attribute(span)
        if events:
            inputs, outputs, reasons = read_event_content(
                NormalizedSpan(
                    trace_id=span.trace_id, span_id=span.span_id, name=span.name, logs=events
                )
            )
            if inputs is not None:
                mapped.set_llm_inputs(inputs, model=attrs.get("gen_ai.request.model"))
            if outputs is not None:
                mapped.set_llm_output(outputs)
            if reasons:
                mapped.set_attr("finish_reasons", reasons)
    return True


register_dialect("pydantic_ai", read)
