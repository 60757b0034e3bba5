"""Google Agent Development Kit (``gcp.vertex.agent.*``).

ADK spans carry the whole Gemini request and response as JSON (``llm_request`` /
``llm_response``) and the tool call's arguments and response, beside a few ``gen_ai.*`` keys
(and, through OpenInference, a third dialect), so this dialect ranks above both. ADK writes
``{}`` for the keys that do not apply to a span; those are ignored. Span names: ``call_llm``,
``execute_tool {name}``, ``invoke_agent {name}`` / ``agent_run [name]``, ``invocation [app]``.

Checked against google-adk 2.13.0 (recordings in ``tests/mapping/data/google_adk``):

* Its default telemetry schema 2 writes no ``gcp.vertex.agent.llm_request`` at all: the model
  call is a ``generate_content {model}`` span in the GenAI conventions (content only with
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``), read by that dialect;
  this one only sees ``event_id`` / ``invocation_id`` there.
* Schema 1 (``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``) writes ``call_llm`` with the Gemini
  JSON around a content-less ``generate_content`` span of the same call (assembly folds the
  inner one into it), and the tool keys on ``execute_tool``. Function tools are declared with
  ``parameters_json_schema``, read as ``parameters``; the finish reason is Gemini's enum name
  (``STOP``), written in lower case as ADK's own ``gen_ai.response.finish_reasons`` has it.
  ``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false`` writes ``{}`` for all four content keys:
  ``call_llm`` is still the llm step, noted as recorded without content.
* Agent spans are ``invoke_agent {name}`` with ``gen_ai.agent.name``; the root is
  ``invoke_workflow {agent}`` (schema 2) or a bare ``invocation``.

And against google-adk 1.10.0: ``invocation`` > ``agent_run [name]`` > ``call_llm`` /
``execute_tool {name}``, the same keys as schema 1 without the inner ``generate_content`` span
and without a finish reason; ``agent_run`` and ``invocation`` carry no attribute at all, so
the dialect also recognises ADK's tracer scope (``gcp.vertex.agent``).
"""

from __future__ import annotations

from typing import Any

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect
from ..messages import normalize_parts

SCOPE = "gcp.vertex.agent"
PREFIX = SCOPE + "."
NO_CONTENT = (
    "Google ADK recorded this step without its content; leave ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS"
    " unset (it defaults to true) to make it replayable"
)


def _agent_run(name: str) -> str | None:
    """The agent named by an ``agent_run [name]`` / ``invoke_agent name`` span name. Not a
    regular expression: the one this was backtracked quadratically on a hostile name (a
    120,000-character one held the receiver for two minutes)."""
    for prefix in ("agent_run", "invoke_agent"):
        if name.startswith(prefix):
            rest = name[len(prefix) :].lstrip()
            rest = rest[1:] if rest.startswith("[") else rest
            rest = rest[:-1] if rest.endswith("]") else rest
            return rest if rest and "]" not in rest else None
    return None


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
                flat = {"type": "function", **declaration}
                # ADK 2.13 declares Python function tools with a JSON schema, not Gemini's own
                schema = flat.pop("parameters_json_schema", flat.pop("parametersJsonSchema", None))
                if schema is not None:
                    flat.setdefault("parameters", schema)
                tools.append(flat)
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
    # ADK's tracer scope, or (its spans relayed by another SDK) the keys it writes; ADK 1.x
    # writes no attribute at all on ``agent_run [name]`` and ``invocation``
    if span.scope_name != SCOPE and attrs.keys().isdisjoint(_MARKERS):
        return False
    mapped.set_conversation(attrs.get(PREFIX + "session_id"))
    agent_run = _agent_run(span.name)
    if agent_run and mapped.role == Role.OTHER:
        mapped.role, mapped.kind = Role.AGENT, StepKind.AGENT
        mapped.agent = mapped.agent or agent_run.strip()
        mapped.name = mapped.name or mapped.agent
        return True

    request = _present(attrs, "llm_request")
    response = _present(attrs, "llm_response")
    if request is not None or response is not None or span.name == "call_llm":
        mapped.set_step(StepKind.LLM, span.name)
        if request is None and response is None and PREFIX + "llm_request" in attrs:
            mapped.notes.append(NO_CONTENT)  # ADK writes "{}" when content capture is off
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
            if reason:  # Gemini's enum name (STOP); ADK's gen_ai key has it in lower case
                mapped.set_attr("finish_reasons", [str(reason).lower()])
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
        if arguments is None and tool_response is not None:
            # with content on, "{}" is a call without arguments (content off blanks both keys)
            arguments = parse_json(attrs.get(PREFIX + "tool_call_args"))
        if arguments is not None:
            mapped.set_inputs({"arguments": arguments})
        if tool_response is not None:
            mapped.set_output(tool_response)
    return True


register_dialect("google_adk", read)
