"""OpenLLMetry / Traceloop: the legacy flattened form and the SDK's entity spans.

* Legacy (≤ 0.54, still the common form in the wild, also JetBrains Koog): one attribute per
  message field, ``gen_ai.prompt.{i}.role|content|tool_call_id|tool_calls.{j}.id|name|arguments``
  and ``gen_ai.completion.{i}.…`` (plus ``finish_reason``), ``llm.request.type`` for the kind
  and ``llm.request.functions.{k}.name|description|parameters`` for the tools offered. The SDK's
  attribute-count limit silently cuts long conversations, so gaps in the indices and dropped
  attributes are reported as capture notes.
* Traceloop SDK decorators: ``traceloop.span.kind`` ∈ workflow | task | agent | tool, with
  ``traceloop.entity.name`` and ``traceloop.entity.input`` / ``.output`` (JSON
  ``{"args": [...], "kwargs": {...}}`` / the return value).
* The current form (≥ 0.55) writes ``gen_ai.input.messages`` etc. and is read by the GenAI
  dialect; this one only adds what the flattened keys hold.
"""

from __future__ import annotations

import re
from typing import Any

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect
from ..messages import finish_reasons

_FLAT = re.compile(r"^gen_ai\.(prompt|completion)\.(\d+)\.(.+)$")
_FUNCTION = re.compile(r"^llm\.request\.functions\.(\d+)\.(.+)$")
_TOOL_CALL = re.compile(r"^tool_calls\.(\d+)\.(.+)$")
_REQUEST_KINDS = {
    "chat": StepKind.LLM,
    "completion": StepKind.LLM,
    "embedding": StepKind.EMBEDDING,
    "rerank": StepKind.RETRIEVAL,
}


def _content(value: Any) -> Any:
    """Multimodal content arrives JSON-encoded; plain text stays text."""
    parsed = parse_json(value)
    if isinstance(parsed, list) and all(isinstance(item, dict) for item in parsed):
        return parsed
    return value


def flattened_messages(attrs: Any) -> tuple[dict[int, dict], dict[int, dict], dict[int, dict]]:
    """``(prompts, completions, functions)`` by index from the flattened keys."""
    groups: dict[str, dict[int, dict]] = {"prompt": {}, "completion": {}}
    functions: dict[int, dict] = {}
    for key, value in attrs.items():
        if not key.startswith(("gen_ai.p", "gen_ai.c", "llm.request.f")):
            continue  # cheap filter: most keys are not flattened messages
        match = _FLAT.match(key)
        if match:
            which, index, field = match.group(1), int(match.group(2)), match.group(3)
            message = groups[which].setdefault(index, {})
            call = _TOOL_CALL.match(field)
            if call:
                calls = message.setdefault("_calls", {})
                calls.setdefault(int(call.group(1)), {})[call.group(2)] = value
            else:
                message[field] = _content(value) if field == "content" else value
            continue
        match = _FUNCTION.match(key)
        if match:
            functions.setdefault(int(match.group(1)), {})[match.group(2)] = value
    for messages in groups.values():
        for message in messages.values():
            calls = message.pop("_calls", None)
            if calls:
                message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return groups["prompt"], groups["completion"], functions


def _gaps(indexed: dict[int, Any]) -> bool:
    return bool(indexed) and sorted(indexed) != list(range(len(indexed)))


def _entity_arguments(value: Any) -> Any:
    value = parse_json(value)
    if isinstance(value, dict) and set(value) <= {"args", "kwargs"}:
        args, kwargs = value.get("args") or [], value.get("kwargs") or {}
        if not args:
            return kwargs
        if not kwargs and len(args) == 1:
            return args[0]
    return value


# Cheap membership tests before any scan of all keys: truncation at the attribute-count limit
# drops the *last* attributes set, so index 0 survives whenever anything does.
_MARKERS = (
    "gen_ai.prompt.0.role",
    "gen_ai.prompt.0.content",
    "gen_ai.completion.0.role",
    "gen_ai.completion.0.content",
    "gen_ai.completion.0.tool_calls.0.name",
)


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    attrs = span.attributes
    entity_kind = attrs.get("traceloop.span.kind")
    request_type = attrs.get("llm.request.type")
    if entity_kind is None and request_type is None and not any(k in attrs for k in _MARKERS):
        return False
    prompts, completions, functions = flattened_messages(attrs)
    if entity_kind is None and request_type is None and not prompts and not completions:
        return False

    entity = attrs.get("traceloop.entity.name")
    if isinstance(entity_kind, str):
        kind = entity_kind.lower()
        if kind == "workflow" and mapped.role == Role.OTHER:
            mapped.role = Role.WORKFLOW
            mapped.name = mapped.name or str(
                attrs.get("traceloop.workflow.name") or entity or span.name
            )
        elif kind == "agent" and mapped.role == Role.OTHER:
            mapped.role, mapped.kind = Role.AGENT, StepKind.AGENT
            mapped.agent = mapped.agent or (str(entity) if entity else None)
            mapped.name = mapped.name or str(entity or span.name)
        elif kind == "tool":
            mapped.set_step(
                StepKind.TOOL, str(entity or attrs.get("gen_ai.tool.name") or span.name)
            )
        if "traceloop.entity.input" in attrs:
            arguments = _entity_arguments(attrs["traceloop.entity.input"])
            mapped.set_inputs({"arguments": arguments} if kind == "tool" else arguments)
        if "traceloop.entity.output" in attrs:
            mapped.set_output(parse_json(attrs["traceloop.entity.output"]))
        mapped.set_conversation(
            attrs.get("traceloop.association.properties.session_id")
            or attrs.get("traceloop.association.properties.thread_id")
        )

    if request_type is not None or prompts or completions:
        step_kind = _REQUEST_KINDS.get(str(request_type).lower(), StepKind.LLM)
        mapped.set_step(step_kind, span.name)
        model = attrs.get("gen_ai.request.model")
        if prompts:
            tools = [functions[i] for i in sorted(functions)] or None
            mapped.set_llm_inputs([prompts[i] for i in sorted(prompts)], tools=tools, model=model)
        if completions:
            ordered = [completions[i] for i in sorted(completions)]
            mapped.set_llm_output(ordered)
            mapped.set_attr("finish_reasons", finish_reasons(ordered) or None)
        mapped.set_attr("model", attrs.get("gen_ai.response.model") or model)
        mapped.set_attr("provider", attrs.get("gen_ai.system"))
        mapped.set_attr(
            "input_tokens",
            attrs.get("gen_ai.usage.input_tokens", attrs.get("gen_ai.usage.prompt_tokens")),
        )
        mapped.set_attr(
            "output_tokens",
            attrs.get("gen_ai.usage.output_tokens", attrs.get("gen_ai.usage.completion_tokens")),
        )
        if _gaps(prompts) or _gaps(completions):
            mapped.notes.append(
                "flattened gen_ai.prompt.N / gen_ai.completion.N indices have gaps: "
                "messages were lost (attribute count limit?)"
            )
    return True


register_dialect("openllmetry", read)
