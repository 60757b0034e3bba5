"""OpenLLMetry / Traceloop: the legacy flattened form, the SDK's entity spans, and what the
current instrumentations add to the GenAI conventions.

* Legacy (≤ 0.54, still the common form in the wild, also JetBrains Koog; checked on spans
  recorded from the real OpenAI instrumentation 0.54.0): one attribute per message field,
  ``gen_ai.prompt.{i}.role|content|tool_call_id|tool_calls.{j}.id|name|arguments`` and
  ``gen_ai.completion.{i}.…`` (plus ``finish_reason``), ``llm.request.type`` for the kind and
  ``llm.request.functions.{k}.name|description|parameters`` (the schema as JSON text) for the
  tools offered. The SDK's attribute-count limit silently cuts long conversations, so gaps in
  the indices and dropped attributes are reported as capture notes.
* Traceloop SDK decorators: ``traceloop.span.kind`` ∈ workflow | task | agent | tool, with
  ``traceloop.entity.name`` and ``traceloop.entity.input`` / ``.output`` (JSON
  ``{"args": [...], "kwargs": {...}}`` / the return value). A ``@tool`` is a tool step. A
  ``@task`` is not claimed: like a Langfuse ``span`` observation it is named by its entity and
  carries its arguments and return value, so the assembler makes it an opaque ``span`` step
  when nothing is below it and it is inside no step (an action of its own), a container around
  what is below it, and a detail of a step it is inside. (A LangChain run's task span, below,
  stays a workflow: a prompt template or a parser is no step.) A task or tool recorded with
  neither input nor output gets a note naming ``TRACELOOP_TRACE_CONTENT``.
* The current form (≥ 0.55; checked on the OpenAI, Anthropic and LangChain instrumentations
  0.62.4) writes no flattened keys: ``gen_ai.input.messages`` / ``gen_ai.output.messages`` /
  ``gen_ai.system_instructions`` / ``gen_ai.tool.definitions`` as OTel parts JSON, read by the
  GenAI dialect (so is the ``use_attributes=False`` form: 1.28-style log events). This one adds:

  - LangChain (scope ``opentelemetry.instrumentation.langchain``): one span per run. A run
    without a parent, ``{name}.workflow``, also says ``gen_ai.operation.name=invoke_agent`` and
    ``gen_ai.agent.name``: it names the acting agent. Nested chain runs (``execute_task
    {name}``, ``traceloop.span.kind=task``: sequences, prompt templates, parsers, graph nodes)
    are workflows, and so are the spans of ``create_agent`` middleware hooks (``execute_task
    {middleware}.{hook}``, ``gen_ai.operation.name=execute_task`` and ``gen_ai.task.kind``
    without ``traceloop.span.kind``: the instrumentation wraps ``AgentMiddleware``'s hooks,
    so every middleware gets all four hook nodes in the graph); retriever runs
    (``vector_db_retrieve {name}``) retrieval steps, tool runs (``execute_tool {name}``) tool
    steps. Their ``traceloop.entity.input`` / ``.output``
    (copied to ``gen_ai.tool.call.arguments`` / ``.result``) hold the callback's arguments:
    ``{"inputs" | "input_str" | "query", "tags", "metadata", "kwargs"}`` and ``{"outputs" |
    "output", "kwargs"}``; the run's own value is taken out, a tool's ``ToolMessage`` gives its
    content, and the call id is the tool run's ``kwargs.tool_call_id``. A chat model whose
    parameters name no model gets ``gen_ai.request.model = "unknown"``; LangChain's
    ``ls_model_name`` (``traceloop.association.properties.ls_model_name``) names it.

* An llm or tool span of these instrumentations (either form) recorded without content
  (``TRACELOOP_TRACE_CONTENT=false``, or ``use_attributes=False`` whose log records were not
  imported with the spans) gets a note naming the setting.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect
from ..messages import finish_reasons, tool_message, with_normalized_messages

LANGCHAIN_SCOPE = "opentelemetry.instrumentation.langchain"
#: tracer scopes of the Traceloop instrumentations checked on real spans (0.62.4); OTel's own
#: GenAI instrumentations use other names (``opentelemetry.instrumentation.genai.openai``, ...)
TRACELOOP_SCOPES = frozenset(
    {
        "opentelemetry.instrumentation.openai.v1",
        "opentelemetry.instrumentation.anthropic",
        LANGCHAIN_SCOPE,
    }
)
NO_CONTENT = (
    "OpenLLMetry recorded this step without its content: it writes none with "
    "TRACELOOP_TRACE_CONTENT=false, and with use_attributes=False (before 0.55: "
    "use_legacy_attributes=False) the model messages are log records (import the logs file "
    "with the spans)"
)
ENTITY_NO_CONTENT = (
    "Traceloop recorded this task or tool without its input and output: the SDK's decorators "
    "write none with TRACELOOP_TRACE_CONTENT=false"
)
_CONTENT_KEYS = {
    "chat": ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"),
    "text_completion": ("gen_ai.input.messages", "gen_ai.output.messages"),
    "execute_tool": ("traceloop.entity.input", "traceloop.entity.output"),
}
#: the keys of the LangChain callback arguments Traceloop records as a run's input / output
_CALLBACK_KEYS = frozenset(
    {"inputs", "input_str", "query", "outputs", "output", "tags", "metadata", "kwargs"}
)
_RUN_VALUE_KEYS = ("inputs", "outputs", "output", "query", "input_str")

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
            field = match.group(2)  # the parameters' JSON schema arrives as JSON text
            parsed = parse_json(value) if field == "parameters" else value
            functions.setdefault(int(match.group(1)), {})[field] = parsed
    for messages in groups.values():
        for message in messages.values():
            calls = message.pop("_calls", None)
            if calls:
                message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return groups["prompt"], groups["completion"], functions


def _gaps(indexed: dict[int, Any]) -> bool:
    return bool(indexed) and sorted(indexed) != list(range(len(indexed)))


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _entity_value(value: Any) -> Any:
    """A ``traceloop.entity.input`` / ``.output`` value: the SDK writes it with ``json.dumps``,
    so a number returned is ``"3"`` (decoded as well as strings, lists, objects)."""
    if isinstance(value, str) and _JSON_NUMBER.fullmatch(value.strip()):
        number = json.loads(value)
        return number if math.isfinite(number) else value  # "1e999" stays text
    return parse_json(value)


def _entity_arguments(value: Any) -> Any:
    value = _entity_value(value)
    if isinstance(value, dict) and set(value) <= {"args", "kwargs"}:
        args, kwargs = value.get("args") or [], value.get("kwargs") or {}
        if not args:
            return kwargs
        if not kwargs and len(args) == 1:
            return args[0]
    return value


def _callback(value: Any) -> tuple[Any, dict[str, Any]]:
    """``(the run's own value, the callback's kwargs)`` from what Traceloop's LangChain
    instrumentation records as a run's input or output (see the module doc); a value that is
    not such a record is returned as it is."""
    value = parse_json(value)
    if isinstance(value, dict) and set(value) <= _CALLBACK_KEYS and "kwargs" in value:
        kwargs = value["kwargs"] if isinstance(value["kwargs"], dict) else {}
        for key in _RUN_VALUE_KEYS:
            if value.get(key) is not None:
                return value[key], kwargs
        return None, kwargs
    if isinstance(value, dict) and set(value) == {"documents", "count"}:  # a retriever's output
        return value["documents"], {}
    return value, {}


def _read_langchain_entity(kind: str, attrs: Any, mapped: MappedSpan) -> None:
    """Inputs, output and tool-call id of a LangChain run's span (``kind`` as Traceloop says)."""
    inputs, input_kwargs = _callback(attrs.get("traceloop.entity.input"))
    output, _ = _callback(attrs.get("traceloop.entity.output"))
    if kind == "tool":
        fields = tool_message(output)
        call = input_kwargs.get("tool_call_id") or (fields or {}).get("tool_call_id")
        if call and not mapped.tool_call_ids:
            mapped.tool_call_ids = [str(call)]
        if inputs is not None:
            mapped.set_inputs({"arguments": inputs})
        if output is not None:
            mapped.set_tool_output(output)
    elif kind == "retriever":
        if inputs is not None:
            mapped.set_inputs({"query": inputs})
        mapped.set_output(output)
    else:
        if inputs is not None:
            mapped.set_inputs(with_normalized_messages(inputs))
        if output is not None:
            mapped.set_output(with_normalized_messages(output))


def _read_entity(span: NormalizedSpan, mapped: MappedSpan, kind: str) -> None:
    """A span of the Traceloop SDK's decorators or of its LangChain instrumentation."""
    attrs = span.attributes
    entity = attrs.get("traceloop.entity.name")
    operation = attrs.get("gen_ai.operation.name")
    if kind == "workflow" and operation == "invoke_agent":
        kind = "agent"  # LangChain's outermost run: the instrumentation calls it the agent
    elif kind == "task" and operation == "vector_db_retrieve":
        kind = "retriever"  # LangChain's retriever runs
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
        mapped.set_step(StepKind.TOOL, str(entity or attrs.get("gen_ai.tool.name") or span.name))
    elif kind == "retriever":
        mapped.set_step(StepKind.RETRIEVAL, str(entity or span.name))
    elif kind == "task" and mapped.role == Role.OTHER:
        if span.scope_name == LANGCHAIN_SCOPE:
            mapped.role = Role.WORKFLOW  # a chain run: around steps, or a prompt / parser
        # else an SDK ``@task``, left unclaimed (see the module doc): an opaque step when it is a
        # leaf outside any step, a container around steps, a detail inside a step
        mapped.name = mapped.name or str(entity or span.name)
    if span.scope_name == LANGCHAIN_SCOPE:
        _read_langchain_entity(kind, attrs, mapped)
    else:
        if "traceloop.entity.input" in attrs:
            arguments = _entity_arguments(attrs["traceloop.entity.input"])
            mapped.set_inputs({"arguments": arguments} if kind == "tool" else arguments)
        if "traceloop.entity.output" in attrs:
            mapped.set_output(_entity_value(attrs["traceloop.entity.output"]))
        if (
            kind in ("task", "tool")
            and "traceloop.entity.input" not in attrs
            and "traceloop.entity.output" not in attrs
            and not (mapped.has_inputs or mapped.has_output)
        ):
            mapped.notes.append(ENTITY_NO_CONTENT)
    mapped.set_conversation(
        attrs.get("traceloop.association.properties.session_id")
        or attrs.get("traceloop.association.properties.thread_id")
    )


def _read_instrumentation(span: NormalizedSpan, mapped: MappedSpan, flattened: bool) -> None:
    """What only Traceloop's instrumentations tell (``flattened``: the span holds legacy
    flattened messages)."""
    attrs = span.attributes
    model = attrs.get("traceloop.association.properties.ls_model_name")
    if attrs.get("gen_ai.request.model") == "unknown" and isinstance(model, str) and model:
        mapped.set_attr("model", model)  # the gen_ai dialect reads the content with it
    operation = attrs.get("gen_ai.operation.name", attrs.get("llm.request.type"))
    content_keys = _CONTENT_KEYS.get(str(operation))
    if (
        content_keys is not None
        and not flattened
        and attrs.keys().isdisjoint(content_keys)
        and not span.logs
        and not any(event.name.startswith("gen_ai.") for event in span.events)
    ):
        mapped.notes.append(NO_CONTENT)


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
    traceloop = span.scope_name in TRACELOOP_SCOPES
    if (
        entity_kind is None
        and request_type is None
        and not traceloop
        and attrs.keys().isdisjoint(_MARKERS)
    ):
        return False
    prompts, completions, functions = flattened_messages(attrs)
    if (
        entity_kind is None
        and request_type is None
        and not traceloop
        and not prompts
        and not completions
    ):
        return False

    if entity_kind is None and traceloop and attrs.get("gen_ai.operation.name") == "execute_task":
        entity_kind = "task"  # a hook of a LangChain agent middleware, a task around steps
    if isinstance(entity_kind, str):
        _read_entity(span, mapped, entity_kind.lower())
    if traceloop:
        _read_instrumentation(span, mapped, bool(prompts or completions))

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
