"""LangSmith's OpenTelemetry exporter (``langsmith.span.kind``, ``langsmith.trace.*``).

LangSmith writes the run's whole ``inputs`` as ``gen_ai.prompt`` and whole ``outputs`` as
``gen_ai.completion`` (JSON, not indexed), so it must be read before the generic GenAI dialect.
``@traceable`` records a function's arguments by name and a return value that is not a dict as
``{"output": value}``. A failed run (langsmith 0.15.1) is a span of status ERROR without a
description, its ``gen_ai.completion`` ``{}`` (no output), whose only ``exception`` event is of
type ``Exception``, its message the run's ``error`` text: the ``repr`` of what was raised
followed by its traceback (:func:`run_error` reads the type and message out of it; the run
importer reads a run's ``error`` the same way). LangChain runs (traced by LangSmith's
``LangChainTracer``, langsmith 0.15.1): an llm run's tool definitions are only in
``gen_ai.tool.definitions``, a tool run's output is the ``ToolMessage`` it returned, and
prompt-template and output-parser runs (``prompt`` / ``parser``) are formatting inside the
workflow, not steps, although LangSmith writes ``gen_ai.operation.name = "chat"`` for prompts.
:func:`read_run` maps a run's type, inputs and outputs and is shared with the LangSmith run
importer (``{post, patch}`` payloads).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect, span_error

_STEP_TYPES = {
    "llm": StepKind.LLM,
    "tool": StepKind.TOOL,
    "retriever": StepKind.RETRIEVAL,
    "embedding": StepKind.EMBEDDING,
}
_TRACE_KEYS = ("langsmith.trace.name", "langsmith.trace.session_id", "langsmith.trace.session_name")
#: metadata keys LangSmith uses to group runs of one conversation into a thread
THREAD_KEYS = ("thread_id", "session_id", "conversation_id")
#: ``Type(args)``: the ``repr`` of an exception at the start of a run's error text
_REPR = re.compile(r"([A-Za-z_][\w.]*)\((.*)\)", re.DOTALL)
_TRACEBACK = "Traceback (most recent call last):"


def run_error(text: Any) -> dict[str, str]:
    """``{type, message}`` of a run's ``error`` text, which ``@traceable`` and LangChain's tracer
    write as ``repr(exception)`` followed by the traceback (``TimeoutError('weather service
    timed out')Traceback ...``): the exception's class name and its one argument (its
    arguments' text when there are several). Text not of that form is the message of an
    ``error``."""
    text = str(text or "")
    head = text.split(_TRACEBACK, 1)[0].strip()
    match = _REPR.fullmatch(head)
    if match is None:
        return {"type": "error", "message": text}
    arguments = match.group(2)
    try:
        values = ast.literal_eval(f"({arguments},)") if arguments.strip() else ()
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        values = (arguments,)
    message = values[0] if len(values) == 1 else arguments
    return {"type": match.group(1), "message": str(message)}


def _tool_arguments(inputs: Any) -> Any:
    if isinstance(inputs, dict) and set(inputs) == {"input"}:
        return parse_json(inputs["input"])
    return inputs


def _unwrap_output(outputs: Any) -> Any:
    """What ``@traceable`` returned, when it wrapped it as ``{"output": value}``."""
    if isinstance(outputs, dict) and set(outputs) == {"output"}:
        return outputs["output"]
    return outputs


def read_run(
    mapped: MappedSpan,
    *,
    run_type: Any,
    name: str,
    inputs: Any,
    outputs: Any,
    model: Any = None,
    tools: Any = None,
) -> bool:
    """Fill ``mapped`` from a LangSmith run's type, inputs and outputs (``tools``: an llm
    run's tool definitions when its inputs do not hold them)."""
    kind = str(run_type or "").lower()
    step_kind = _STEP_TYPES.get(kind)
    if step_kind is None:
        if kind in ("chain", "prompt", "parser") and mapped.role == Role.OTHER:
            mapped.role = Role.WORKFLOW
            mapped.name = mapped.name or name
        mapped.set_inputs(inputs)
        mapped.set_output(outputs)
        return kind in ("chain", "prompt", "parser")
    mapped.set_step(step_kind, name)
    if step_kind is StepKind.LLM:
        if isinstance(inputs, dict) and inputs.get("tools"):
            tools = inputs["tools"]
        if model is None and isinstance(inputs, dict):
            model = inputs.get("model")
        mapped.set_llm_inputs(inputs, tools=tools, model=model)
        mapped.set_inputs(inputs)  # a prompt that is not messages
        mapped.set_llm_output(_unwrap_output(outputs))
        mapped.set_output(outputs)
        mapped.set_attr("model", model)
        if isinstance(outputs, dict):
            usage = outputs.get("usage_metadata") or outputs.get("usage")
            if isinstance(usage, dict):
                mapped.set_attr(
                    "input_tokens", usage.get("input_tokens", usage.get("prompt_tokens"))
                )
                mapped.set_attr(
                    "output_tokens", usage.get("output_tokens", usage.get("completion_tokens"))
                )
    elif step_kind is StepKind.TOOL:
        if inputs is not None:
            mapped.set_inputs({"arguments": _tool_arguments(inputs)})
        mapped.set_tool_output(_unwrap_output(outputs))
    else:
        mapped.set_inputs(inputs)
        mapped.set_output(outputs)
    return True


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    attrs = span.attributes
    run_type = attrs.get("langsmith.span.kind")
    if run_type is None and attrs.keys().isdisjoint(_TRACE_KEYS):
        return False
    for key in THREAD_KEYS:
        mapped.set_conversation(attrs.get("langsmith.metadata." + key))
    if span.status_code == 2 and mapped.error is None:
        mapped.error = run_error(span_error(span)["message"])
    if run_type is None:
        return True
    return read_run(
        mapped,
        run_type=run_type,
        name=span.name,
        inputs=parse_json(attrs.get("gen_ai.prompt")),
        outputs=parse_json(attrs.get("gen_ai.completion")) or None,  # a failed run's is {}
        model=attrs.get("gen_ai.request.model") or attrs.get("langsmith.metadata.ls_model_name"),
        tools=attrs.get("gen_ai.tool.definitions"),
    )


register_dialect("langsmith", read)
