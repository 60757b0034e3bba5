"""OpenInference (Arize Phoenix) spans: ``openinference.span.kind`` and flattened attributes.

``openinference.span.kind`` decides the role: ``LLM`` → llm step, ``TOOL`` → tool step,
``RETRIEVER`` → retrieval step, ``EMBEDDING`` → embedding step, ``AGENT`` names the agent of the
steps inside it, ``CHAIN`` is a workflow around steps and so is ``PROMPT`` (a prompt template
formatting the messages of the llm call after it: no step); every other kind (``RERANKER``,
``GUARDRAIL``, ``EVALUATOR``, ``UNKNOWN``) stays unrecognised.

Messages arrive flattened, one attribute per field (``llm.input_messages.0.message.role``,
``llm.output_messages.0.message.tool_calls.0.tool_call.function.name``, ...). They are rebuilt
in the OTel GenAI *parts* shape (``{"role", "parts": [...]}``) and LLM inputs get the same
layout the ``gen_ai`` dialect produces (``messages``, ``tools``, ``model``, ``parameters``), so a
step reads the same whichever instrumentation recorded it. ``input.value`` / ``output.value``
(decoded when their mime type is JSON) are the fallback content. The nested form some exporters
write (``llm.input_messages`` holding a list of objects) is read too.

Content an instrumentation hid (``OPENINFERENCE_HIDE_INPUTS`` / ``..._OUTPUTS`` / ``..._TEXT``,
``TraceConfig(hide_...)``) is written as the placeholder ``__REDACTED__``: that side of the step
is read as not captured (with a note naming the settings), never as content.

What ``openinference-instrumentation-langchain`` 0.1.80 writes, and how it is read (see
``tests/mapping/test_openinference_langchain_real.py``): a TOOL span's ``output.value`` is the
serialised ``ToolMessage`` (``{"type": "tool", "data": {"content", "tool_call_id", ...}}``): the
step's result is its ``content`` and its call id is ``tool_call_id``. A tool whose one argument
is a string has that bare string as ``input.value``; the trajectory takes the named arguments
from the llm call that requested it. AGENT and CHAIN inputs holding ``{"messages": [...]}``
(LangGraph state) get those messages in the parts shape. Every run whose name contains "agent"
is an AGENT span, so the model node ``agent`` of LangGraph's ``create_react_agent`` is one: that
node (``metadata.langgraph_node == "agent"``) is read as a workflow inside the agent, so the
agent's steps keep the agent's name.

What ``openinference-instrumentation-anthropic`` 3.1.0 writes (scope
``openinference.instrumentation.anthropic``; see
``tests/capture/test_real_anthropic_instrumentations.py``): the ``system`` parameter as a first
message of role ``system``, each ``tool_result`` block as a ``tool`` message of its own, and a
``tool_use`` block both under ``message.tool_calls`` and as a ``message.contents`` entry
(``tool_call.*`` beside ``message_content.type=tool_use``). Its llm steps are read in the API's
shape, as the OTel GenAI instrumentation records the same call: ``system`` beside the messages,
the results back in their user turn, each call once; its Anthropic tool definitions have their
``input_schema`` as ``parameters``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, Role, parse_json, register_dialect, token_count
from ..messages import tool_message, with_normalized_messages

SPAN_KIND = "openinference.span.kind"
INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
INPUT_MESSAGES = "llm.input_messages"
OUTPUT_MESSAGES = "llm.output_messages"
PROMPTS = "llm.prompts"
CHOICES = "llm.choices"
TOOLS = "llm.tools"
MODEL_NAME = "llm.model_name"
REQUEST_MODEL_NAME = "llm.request.model_name"
RESPONSE_MODEL_NAME = "llm.response.model_name"
INVOCATION_PARAMETERS = "llm.invocation_parameters"
PROVIDER = "llm.provider"
SYSTEM = "llm.system"
FINISH_REASON = "llm.finish_reason"
TOKENS_PROMPT = "llm.token_count.prompt"
TOKENS_COMPLETION = "llm.token_count.completion"
TOKENS_TOTAL = "llm.token_count.total"
TOKENS_CACHE_READ = "llm.token_count.prompt_details.cache_read"
TOKENS_REASONING = "llm.token_count.completion_details.reasoning"
TOOL_NAME = "tool.name"
TOOL_ID = "tool.id"
TOOL_DESCRIPTION = "tool.description"
SESSION_ID = "session.id"
AGENT_NAME = "agent.name"
RETRIEVAL_DOCUMENTS = "retrieval.documents"
EMBEDDINGS = "embedding.embeddings"
EMBEDDING_MODEL_NAME = "embedding.model_name"
METADATA = "metadata"
# what OpenInference writes in place of hidden content (``openinference.instrumentation.config``)
REDACTED = "__REDACTED__"
HIDDEN = (
    "OpenInference hid this step's {side} (__REDACTED__); unset OPENINFERENCE_HIDE_INPUTS / "
    "OPENINFERENCE_HIDE_OUTPUTS / OPENINFERENCE_HIDE_INPUT_TEXT / OPENINFERENCE_HIDE_OUTPUT_TEXT "
    "(or the TraceConfig(hide_...) options) to make it replayable"
)
# LangGraph's create_react_agent runs the model in this node
REACT_MODEL_NODE = "agent"

_STEP_KINDS = {
    "LLM": StepKind.LLM,
    "TOOL": StepKind.TOOL,
    "RETRIEVER": StepKind.RETRIEVAL,
    "EMBEDDING": StepKind.EMBEDDING,
}
# request parameters worth keeping as step inputs, under the gen_ai dialect's short names
_PARAMETERS = {
    "temperature": "temperature",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_completion_tokens",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "stop": "stop",
    "stop_sequences": "stop",  # Anthropic's name
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
}
_INDEX = re.compile(r"\d+")
_OUTPUT_KEYS = (OUTPUT_MESSAGES, CHOICES, RETRIEVAL_DOCUMENTS)
_FIRST_MESSAGE_ROLE = INPUT_MESSAGES + ".0.message.role"
ANTHROPIC_SCOPE = "openinference.instrumentation.anthropic"


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    attrs = span.attributes
    raw_kind = attrs.get(SPAN_KIND)
    if raw_kind is None:
        # an LLM span whose kind attribute was dropped still has this OpenInference-only key
        # (a dict lookup: this runs for every span of every dialect)
        if _FIRST_MESSAGE_ROLE not in attrs:
            return False
        raw_kind = "LLM"
    kind_name = str(raw_kind).strip().upper()
    hidden = _hidden_sides(attrs)
    if hidden:
        # the placeholders are not content: read the span without them
        span = replace(span, attributes={k: v for k, v in attrs.items() if v != REDACTED})
        attrs = span.attributes

    agent = attrs.get(AGENT_NAME)
    if isinstance(agent, str) and agent:
        mapped.agent = mapped.agent or agent
    session = attrs.get(SESSION_ID)
    if isinstance(session, (str, int)) and not isinstance(session, bool):
        mapped.set_conversation(session)

    if kind_name == "AGENT" and not _is_react_model_node(attrs, span.name):
        if mapped.role == Role.OTHER:
            mapped.role = Role.AGENT
            mapped.kind = StepKind.AGENT
            mapped.name = mapped.name or (agent if isinstance(agent, str) and agent else span.name)
            _fallback_content(span, mapped, state=True)
        return True
    if kind_name in ("AGENT", "CHAIN", "PROMPT"):
        if mapped.role == Role.OTHER:
            mapped.role = Role.WORKFLOW
            mapped.name = mapped.name or span.name
            _fallback_content(span, mapped, state=True)
        return True

    had = (mapped.has_inputs, mapped.has_output)
    kind = _STEP_KINDS.get(kind_name)
    if kind is StepKind.LLM:
        mapped.set_step(kind, span.name)
        _read_llm(span, mapped)
    elif kind is StepKind.TOOL:
        name = attrs.get(TOOL_NAME)
        mapped.set_step(kind, str(name) if name not in (None, "") else span.name)
        _read_tool(span, mapped)
    elif kind is StepKind.RETRIEVAL:
        mapped.set_step(kind, span.name)
        _read_retrieval(span, mapped)
    elif kind is StepKind.EMBEDDING:
        mapped.set_step(kind, span.name)
        _read_embedding(span, mapped)
    # other kinds (RERANKER, GUARDRAIL, ...) stay OTHER; their I/O is still worth keeping
    _fallback_content(span, mapped)
    if hidden:
        _forget_hidden(mapped, hidden, had)
    return True


def _hidden_sides(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    """Which sides (``inputs``, ``output``) hold OpenInference's ``__REDACTED__`` placeholder.
    Image URLs over ``OPENINFERENCE_BASE64_IMAGE_MAX_LENGTH`` are redacted too; an image part
    without its URL is still read, so they hide nothing here."""
    if REDACTED not in attrs.values():
        return ()
    sides = set()
    for key, value in attrs.items():
        if value != REDACTED or not isinstance(key, str) or key.endswith(".url"):
            continue
        output = key == OUTPUT_VALUE or key.startswith(_OUTPUT_KEYS) or key.endswith(".vector")
        # the rest: input.value, llm.input_messages, llm.prompts, embedding text, reranker query
        sides.add("output" if output else "inputs")
    return tuple(sorted(sides))


def _forget_hidden(mapped: MappedSpan, hidden: tuple[str, ...], had: tuple[bool, bool]) -> None:
    """A side with hidden parts is not captured: drop the shells read from it (messages with a
    role and no text), keep the tool call ids (they still link tool steps), and say so."""
    if mapped.role != Role.STEP:
        return
    if "inputs" in hidden and not had[0]:
        mapped.inputs, mapped.has_inputs = None, False
    if "output" in hidden and not had[1]:
        mapped.set_attr("tool_calls", mapped.requested_tool_calls or None)
        mapped.action, mapped.has_output = None, False
    mapped.notes.append(HIDDEN.format(side=" and ".join(hidden)))


def _is_react_model_node(attrs: Mapping[str, Any], name: str) -> bool:
    """The model node of LangGraph's ``create_react_agent``: the LangChain instrumentation
    calls it AGENT for the word in its name, but it is a node inside the agent (the graph)."""
    if name != REACT_MODEL_NODE:
        return False
    metadata = parse_json(attrs.get(METADATA))
    return isinstance(metadata, Mapping) and metadata.get("langgraph_node") == REACT_MODEL_NODE


# -- LLM ----------------------------------------------------------------------------------------


def _read_llm(span: NormalizedSpan, mapped: MappedSpan) -> None:
    attrs = span.attributes
    invocation = parse_json(attrs.get(INVOCATION_PARAMETERS))
    if not isinstance(invocation, Mapping):
        invocation = {}

    mapped.set_attr("model", _text(attrs.get(RESPONSE_MODEL_NAME)) or _text(attrs.get(MODEL_NAME)))
    mapped.set_attr("provider", _text(attrs.get(PROVIDER)) or _text(attrs.get(SYSTEM)))
    mapped.set_attr("input_tokens", _count(attrs.get(TOKENS_PROMPT)))
    mapped.set_attr("output_tokens", _count(attrs.get(TOKENS_COMPLETION)))
    mapped.set_attr("total_tokens", _count(attrs.get(TOKENS_TOTAL)))
    mapped.set_attr("cache_read_input_tokens", _count(attrs.get(TOKENS_CACHE_READ)))
    mapped.set_attr("reasoning_output_tokens", _count(attrs.get(TOKENS_REASONING)))
    finish = _text(attrs.get(FINISH_REASON))
    if finish:
        mapped.set_attr("finish_reasons", [finish])

    messages = [_message(m) for m in _items(_tree(attrs, INPUT_MESSAGES))]
    messages = [m for m in messages if m is not None]
    if not messages:
        messages = [
            {"role": "user", "parts": [{"type": "text", "content": text}]}
            for text in _texts(_tree(attrs, PROMPTS), ("prompt", "text"))
        ]
    system = None
    if span.scope_name == ANTHROPIC_SCOPE:
        messages, system = _anthropic_request(messages)
    if messages or system:
        tools = [_tool_definition(t) for t in _items(_tree(attrs, TOOLS))]
        model = _text(attrs.get(REQUEST_MODEL_NAME)) or _text(invocation.get("model"))
        mapped.set_llm_inputs(
            messages,
            system=system,
            tools=[t for t in tools if t is not None] or None,
            model=model or None,
        )
    # LangChain writes every parameter, unset ones as null ("stop": null)
    params = {
        short: invocation[key]
        for key, short in _PARAMETERS.items()
        if invocation.get(key) is not None
    }
    if params:
        mapped.set_attr("parameters", params)  # beside the inputs, as every dialect keeps them

    outputs = [_message(m) for m in _items(_tree(attrs, OUTPUT_MESSAGES))]
    outputs = [m for m in outputs if m is not None]
    if not outputs:
        outputs = [
            {"role": "assistant", "parts": [{"type": "text", "content": text}]}
            for text in _texts(_tree(attrs, CHOICES), ("completion", "text"))
        ]
    if outputs:
        mapped.set_llm_output(outputs)


def _anthropic_request(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and the ``system`` parameter of an Anthropic Messages request, undoing
    how ``openinference-instrumentation-anthropic`` flattens them: it writes ``system`` as a
    first message of role ``system`` (the API has no such role), and each ``tool_result``
    block of a user turn as a message of its own with role ``tool``, before the rest of that
    turn. Back in the API's shape they read as the OTel instrumentation writes the same call:
    instructions beside the messages, the results as ``tool_call_response`` parts of a
    ``user`` message. A results message is joined by the user message right after it (the
    rest of the turn; the API merges consecutive user turns anyway)."""
    system = None
    if messages and messages[0]["role"] == "system":
        system, messages = messages[0]["parts"], messages[1:]
    turns: list[dict[str, Any]] = []
    results: dict[str, Any] | None = None  # the user turn the tool results go back into
    for message in messages:
        if message["role"] == "tool":
            if results is None:
                results = {"role": "user", "parts": []}
                turns.append(results)
            results["parts"].extend(_block_result(p) for p in message["parts"])
        elif results is not None and message["role"] == "user":
            results["parts"].extend(message["parts"])
            results = None
        else:
            results = None
            turns.append(message)
    return turns, system


def _block_result(part: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_result`` whose content was a list of blocks is written as their JSON text;
    read back, it is the list (as the OTel instrumentation records it)."""
    response = part.get("response")
    if part.get("type") == "tool_call_response" and isinstance(response, str):
        blocks = parse_json(response)
        if isinstance(blocks, list) and all(isinstance(b, Mapping) and "type" in b for b in blocks):
            return {**part, "response": blocks}
    return part


def _message(node: Any) -> dict[str, Any] | None:
    """One flattened OpenInference message as a GenAI ``{"role", "parts"}`` message."""
    if not isinstance(node, Mapping):
        return None
    message = node.get("message", node)
    if not isinstance(message, Mapping):
        return None
    role = _text(message.get("role")) or "user"
    parts: list[dict[str, Any]] = []
    call_id = _text(message.get("tool_call_id"))
    content = message.get("content")
    if role == "tool" or call_id:
        if content is not None or call_id:
            part: dict[str, Any] = {"type": "tool_call_response", "response": content}
            if call_id:
                part["id"] = call_id
            parts.append(part)
    elif isinstance(content, str):
        parts.append({"type": "text", "content": content})
    elif content is not None:
        parts.append({"type": "text", "content": _text(content) or str(content)})
    for item in _items(message.get("contents")):
        converted = _content_part(item)
        if converted is not None:
            parts.append(converted)
    # a call already read from the contents (Anthropic's tool_use block) is written under
    # tool_calls too, with the same id
    in_contents = {p.get("id") for p in parts if p["type"] == "tool_call" and p.get("id")}
    for item in _items(message.get("tool_calls")):
        call = item.get("tool_call", item) if isinstance(item, Mapping) else None
        part = _tool_call(call)
        if part is not None and (part.get("id") is None or part["id"] not in in_contents):
            parts.append(part)
    legacy_name = _text(message.get("function_call_name"))
    if legacy_name:
        parts.append(
            {
                "type": "tool_call",
                "name": legacy_name,
                "arguments": parse_json(message.get("function_call_arguments_json")),
            }
        )
    out: dict[str, Any] = {"role": role, "parts": parts}
    name = _text(message.get("name"))
    if name:
        out["name"] = name
    return out


def _tool_call(call: Any) -> dict[str, Any] | None:
    """A flattened ``tool_call`` (``id``, ``function.name``, ``function.arguments``) as a
    ``tool_call`` part."""
    if not isinstance(call, Mapping):
        return None
    function = call.get("function")
    function = function if isinstance(function, Mapping) else {}
    part = {"type": "tool_call", "name": _text(function.get("name")) or ""}
    if _text(call.get("id")):
        part["id"] = _text(call.get("id"))
    if "arguments" in function:
        part["arguments"] = parse_json(function.get("arguments"))
    return part


def _content_part(item: Any) -> dict[str, Any] | None:
    if isinstance(item, Mapping) and isinstance(item.get("tool_call"), Mapping):
        # openinference-anthropic: a tool_use block is ``message_content.type = tool_use``
        # beside the call itself, ``contents.N.tool_call.{id, function.name, ...}``
        return _tool_call(item["tool_call"])
    content = item.get("message_content", item) if isinstance(item, Mapping) else None
    if not isinstance(content, Mapping):
        return None
    kind = _text(content.get("type")) or "text"
    if kind == "text":
        return {"type": "text", "content": _text(content.get("text")) or ""}
    if kind == "reasoning":
        return {"type": "reasoning", "content": _text(content.get("text")) or ""}
    if kind in ("image", "audio", "video", "document"):
        media = content.get(kind)
        media = media.get(kind, media) if isinstance(media, Mapping) else {}
        url = _text(media.get("url")) if isinstance(media, Mapping) else None
        if url:
            return {"type": "uri", "modality": kind, "uri": url}
        return {"type": kind}
    # anything else (blocks recorded as JSON text, newer types): kept under a generic part
    part = {"type": kind}
    part.update({str(k): v for k, v in content.items() if k != "type"})
    return part


def _tool_definition(node: Any) -> dict[str, Any] | None:
    """``llm.tools.N.tool.json_schema`` (OpenAI tool format) as a GenAI tool definition."""
    tool = node.get("tool", node) if isinstance(node, Mapping) else None
    if not isinstance(tool, Mapping):
        return None
    schema = parse_json(tool.get("json_schema"))
    if not isinstance(schema, Mapping):
        return None
    function = schema.get("function")
    if isinstance(function, Mapping):
        keys = ("name", "description", "parameters")
        definition = {k: function[k] for k in keys if k in function}
        definition["type"] = schema.get("type", "function")
        return definition
    return dict(schema)


# -- tools, retrieval, embeddings ---------------------------------------------------------------


def _read_tool(span: NormalizedSpan, mapped: MappedSpan) -> None:
    attrs = span.attributes
    if INPUT_VALUE in attrs:
        mapped.set_inputs({"arguments": _io_value(attrs, INPUT_VALUE, INPUT_MIME_TYPE)})
    output = _io_value(attrs, OUTPUT_VALUE, OUTPUT_MIME_TYPE) if OUTPUT_VALUE in attrs else None
    mapped.set_tool_output(output)
    message = tool_message(output)
    if not mapped.tool_call_ids:
        # the call id may only be inside the output: in the ToolMessage, or a bare JSON object
        holder = message if message is not None else output
        embedded = holder.get("tool_call_id") if isinstance(holder, Mapping) else None
        call_id = _text(attrs.get(TOOL_ID)) or _text(embedded)
        if call_id:
            mapped.tool_call_ids = [call_id]
    description = _text(attrs.get(TOOL_DESCRIPTION))
    if description:
        mapped.set_attr("tool_description", description)


def _read_retrieval(span: NormalizedSpan, mapped: MappedSpan) -> None:
    attrs = span.attributes
    if INPUT_VALUE in attrs:
        mapped.set_inputs({"query": _io_value(attrs, INPUT_VALUE, INPUT_MIME_TYPE)})
    documents = []
    for node in _items(_tree(attrs, RETRIEVAL_DOCUMENTS)):
        document = node.get("document", node) if isinstance(node, Mapping) else None
        if isinstance(document, Mapping):
            documents.append(
                {str(k): parse_json(v) if k == "metadata" else v for k, v in document.items()}
            )
    if documents:
        mapped.set_output(documents)


def _read_embedding(span: NormalizedSpan, mapped: MappedSpan) -> None:
    attrs = span.attributes
    mapped.set_attr("model", _text(attrs.get(EMBEDDING_MODEL_NAME)))
    texts = _texts(_tree(attrs, EMBEDDINGS), ("embedding", "text"))
    if texts:
        mapped.set_inputs({"input": texts})
    vectors = []
    for node in _items(_tree(attrs, EMBEDDINGS)):
        embedding = node.get("embedding") if isinstance(node, Mapping) else None
        if isinstance(embedding, Mapping) and "vector" in embedding:
            vectors.append(embedding["vector"])
    if vectors:
        mapped.set_output(vectors)


def _fallback_content(span: NormalizedSpan, mapped: MappedSpan, *, state: bool = False) -> None:
    """``input.value`` / ``output.value`` as the content; with ``state`` (agents and chains), a
    LangGraph state's ``messages`` are put in the parts shape (LangChain serialises them with
    per-run message ids, which would make every run's task differ)."""
    attrs = span.attributes
    if INPUT_VALUE in attrs:
        value = _io_value(attrs, INPUT_VALUE, INPUT_MIME_TYPE)
        mapped.set_inputs(with_normalized_messages(value) if state else value)
    if OUTPUT_VALUE in attrs:
        value = _io_value(attrs, OUTPUT_VALUE, OUTPUT_MIME_TYPE)
        mapped.set_output(with_normalized_messages(value) if state else value)


# -- flattened attributes -----------------------------------------------------------------------


def _io_value(attrs: Mapping[str, Any], key: str, mime_key: str) -> Any:
    """``input.value`` / ``output.value``: decoded JSON when the mime type says JSON."""
    value = attrs.get(key)
    mime = attrs.get(mime_key)
    if isinstance(value, str) and isinstance(mime, str) and "json" in mime.lower():
        return parse_json(value)
    return value


def _tree(attrs: Mapping[str, Any], prefix: str) -> dict[Any, Any]:
    """Every attribute under ``prefix.`` (plus a nested value at ``prefix`` itself) as a tree;
    numeric path segments become ``int`` keys. Conflicting paths keep the first value."""
    root: dict[Any, Any] = {}
    nested = parse_json(attrs.get(prefix)) if prefix in attrs else None
    if _is_structure(nested):
        _merge(root, nested)
    dotted = prefix + "."
    for key, value in attrs.items():
        if isinstance(key, str) and key.startswith(dotted):
            _insert(root, key[len(dotted) :].split("."), value)
    return root


def _segment(text: str) -> Any:
    return int(text) if _INDEX.fullmatch(text) else text


def _insert(node: dict[Any, Any], path: list[str], value: Any) -> None:
    for segment in path[:-1]:
        child = node.setdefault(_segment(segment), {})
        if not isinstance(child, dict):
            return  # a leaf already sits here
        node = child
    last = _segment(path[-1])
    if last in node:
        return
    if _is_structure(value):
        node[last] = {}
        _merge(node[last], value)
    else:
        node[last] = value


def _is_structure(value: Any) -> bool:
    # objects and lists of objects are trees; a list of scalars (a vector, tags) is a leaf
    if isinstance(value, Mapping):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(v, Mapping) for v in value)


def _merge(node: dict[Any, Any], value: Any) -> None:
    items = enumerate(value) if isinstance(value, (list, tuple)) else value.items()
    for key, item in items:
        path = [str(key)] if isinstance(key, int) else str(key).split(".")
        _insert(node, path, item)


def _items(node: Any) -> list[Any]:
    """The children of a tree node that have integer keys, in index order."""
    if not isinstance(node, dict):
        return []
    return [node[k] for k in sorted(k for k in node if isinstance(k, int))]


def _texts(node: Any, path: tuple[str, str]) -> list[str]:
    texts = []
    for item in _items(node):
        inner = item.get(path[0]) if isinstance(item, Mapping) else None
        text = inner.get(path[1]) if isinstance(inner, Mapping) else None
        if isinstance(text, str):
            texts.append(text)
    return texts


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _count(value: Any) -> int | None:
    count = token_count(value)
    return count if type(count) is int else None


# before gen_ai: a span carrying both dialects (google-adk) is read the OpenInference way first
register_dialect("openinference", read)
