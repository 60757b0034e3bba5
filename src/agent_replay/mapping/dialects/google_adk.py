"""Google Agent Development Kit (``gcp.vertex.agent.*``).

ADK spans carry the whole Gemini request and response as JSON (``llm_request`` /
``llm_response``) and the tool call's arguments and response, beside a few ``gen_ai.*`` keys
(and, through OpenInference, a third dialect), so this dialect ranks above both. ADK writes
``{}`` for the keys that do not apply to a span; those are ignored. Span names: ``call_llm``,
``execute_tool {name}``, ``invoke_agent {name}`` / ``agent_run [name]``, ``invocation [app]``.
"""

from __future__ import annotations

import re
from typing import Any

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect
from ..messages import normalize_parts

PREFIX = "gcp.vertex.agent."
_AGENT_RUN = re.compile(r"^(?:agent_run|invoke_agent)\s*\[?([^\]]+)\]?$")


def _present(attrs: Any, key: str) -> Any:
    value = parse_json(attrs.get(PREFIX + key))
    return None if value in (None, {}, "", "{}") else value


def _system(config: Any) -> Any:
    if not isinstance(config, dict):
        return None
    system = config.get("system_instruction", config.get("systemInstruction"))
    if isinstance(system, dict) and isinstance(system.get("parts"), list):
        return normalize_parts(system["parts"])
    return system


def _tools(config: Any) -> list[dict[str, Any]] | None:
    if not isinstance(config, dict) or not isinstance(config.get("tools"), list):
        return None
    tools = []
    for tool in config["tools"]:
        declarations = None
        if isinstance(tool, dict):
            declarations = tool.get("function_declarations", tool.get("functionDeclarations"))
        for declaration in declarations if isinstance(declarations, list) else ():
            if isinstance(declaration, dict):
                tools.append({"type": "function", **declaration})
    return tools or None


_MARKERS = tuple(
    PREFIX + key
    for key in (
        "llm_request",
        "llm_response",
        "tool_call_args",
        "tool_response",
        "invocation_id",
        "session_id",
        "event_id",
    )
)


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    attrs = span.attributes
    if not any(key in attrs for key in _MARKERS):  # ADK sets these keys on all of its spans
        return False
    mapped.set_conversation(attrs.get(PREFIX + "session_id"))
    agent_run = _AGENT_RUN.match(span.name)
    if agent_run and mapped.role == Role.OTHER:
        mapped.role, mapped.kind = Role.AGENT, StepKind.AGENT
        mapped.agent = mapped.agent or agent_run.group(1).strip()
        mapped.name = mapped.name or mapped.agent
        return True

    request = _present(attrs, "llm_request")
    response = _present(attrs, "llm_response")
    if request is not None or response is not None:
        mapped.set_step(StepKind.LLM, span.name)
        if isinstance(request, dict):
            config = request.get("config")
            mapped.set_llm_inputs(
                request.get("contents"),
                system=_system(config),
                tools=_tools(config),
                model=request.get("model"),
            )
            mapped.set_attr("model", request.get("model"))
        if isinstance(response, dict):
            content = response.get("content")
            if content is not None:
                mapped.set_llm_output([content])
            reason = response.get("finish_reason")
            if reason:
                mapped.set_attr("finish_reasons", [str(reason)])
            usage = response.get("usage_metadata")
            if isinstance(usage, dict):
                mapped.set_attr("input_tokens", usage.get("prompt_token_count"))
                mapped.set_attr("output_tokens", usage.get("candidates_token_count"))
        return True

    arguments = _present(attrs, "tool_call_args")
    tool_response = _present(attrs, "tool_response")
    if arguments is not None or tool_response is not None or span.name.startswith("execute_tool"):
        name = attrs.get("gen_ai.tool.name") or span.name.removeprefix("execute_tool").strip()
        mapped.set_step(StepKind.TOOL, str(name or span.name))
        if arguments is not None:
            mapped.set_inputs({"arguments": arguments})
        if tool_response is not None:
            mapped.set_output(tool_response)
    return True


register_dialect("google_adk", read)
