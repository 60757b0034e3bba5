"""Message content in one shape, whatever dialect recorded it: the OTel GenAI parts form.

Every dialect hands its messages to :func:`normalize_messages`, so an llm step's inputs and
action look the same whether the call was recorded by the OTel instrumentations, OpenInference,
OpenLLMetry, Langfuse, LangSmith, ATIF or Who&When::

    {"role": "user" | "assistant" | "system" | "tool" | ..., "parts": [
        {"type": "text", "content": str},
        {"type": "tool_call", "id": str, "name": str, "arguments": object},
        {"type": "tool_call_response", "id": str, "response": any},
        ... other part types (reasoning, uri, blob, ...) kept as given ...
    ], "name": str}          # "name" only when the source gave one

Accepted inputs: OTel parts messages (``tool_call_response`` with ``response`` or ``result``;
ids that are arrays, as Microsoft Agent Framework writes them, become their last element),
OpenAI chat messages (string or list content, ``tool_calls``, ``tool_call_id``,
``function_call``), OpenAI Responses items (``message``, ``function_call``,
``function_call_output``, ``reasoning``), Anthropic content blocks (``tool_use``,
``tool_result``, ``thinking``), Gemini ``parts`` (``text``, ``functionCall``,
``functionResponse``), LangChain messages (serialised ``lc`` constructors and plain dicts), chat
completion / ``gen_ai.choice`` bodies and LangChain ``generations``. ``finish_reason`` is not part
of the shape (it is reported in the step's attributes). Everything here is pure and never
raises: input it cannot read yields ``None`` (or the value kept as a text part).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "call_id",
    "finish_reasons",
    "loads_stripped",
    "normalize_messages",
    "normalize_parts",
    "normalize_system",
    "normalize_tools",
    "requested_tool_calls",
    "text_message",
    "tool_call_parts",
    "tool_message",
    "tool_responses",
    "with_normalized_messages",
]

_ROLE_ALIASES = {
    "human": "user",
    "ai": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "function": "tool",
    "ipython": "tool",
}
_LC_CLASS_ROLES = {
    "HumanMessage": "user",
    "HumanMessageChunk": "user",
    "AIMessage": "assistant",
    "AIMessageChunk": "assistant",
    "SystemMessage": "system",
    "SystemMessageChunk": "system",
    "ToolMessage": "tool",
    "ToolMessageChunk": "tool",
    "FunctionMessage": "tool",
    "FunctionMessageChunk": "tool",
}
_LC_TYPE_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_TEXT_TYPES = frozenset({"text", "input_text", "output_text"})
_MAX_DEPTH = 32  # message structures nest a few levels; deeper input is not a message list


_raw_decode = json.JSONDecoder().raw_decode


def loads_stripped(text: str) -> Any:
    """``json.loads(text)`` for text with no whitespace around it (callers strip it first):
    the decoder's ``raw_decode`` and a check that nothing follows, without the two whitespace
    matches ``json.loads`` makes, which cost more than decoding a small value. Raises
    ``ValueError`` (``json.JSONDecodeError``) where ``json.loads`` does."""
    value, end = _raw_decode(text)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _json(value: Any) -> Any:
    """Decode a JSON string that holds an object or array; anything else is kept."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                return loads_stripped(text)
            except (ValueError, RecursionError):
                return value
    return value


def call_id(value: Any) -> str | None:
    """A tool-call id as one string: arrays (``[run_id, call_id]``) give their last element."""
    if isinstance(value, list):
        for item in reversed(value):
            if item not in (None, ""):
                return call_id(item)
        return None
    if value is None or value == "" or isinstance(value, (dict, bool)):
        return None
    return str(value)


def _type(data: dict) -> str | None:
    kind = data.get("type")
    return kind if isinstance(kind, str) else None


def _role(value: Any, default: str) -> str:
    if not isinstance(value, str) or not value:
        return default
    lowered = value.lower()
    return _ROLE_ALIASES.get(lowered, lowered)


def _tool_call(name: Any, arguments: Any, ident: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call", "name": "" if name is None else str(name)}
    cid = call_id(ident)
    if cid is not None:
        part["id"] = cid
    if isinstance(arguments, str):
        arguments = _json(arguments) if arguments.strip() else {}
    if arguments is not None:
        part["arguments"] = arguments
    return part


def _tool_response(response: Any, ident: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call_response", "response": response}
    cid = call_id(ident)
    if cid is not None:
        part["id"] = cid
    return part


def _text(content: Any) -> dict[str, Any] | None:
    """A text part; ``None`` for no text (``None`` or ``""``: an empty text part is no content,
    as an empty ``content`` string is none; Traceloop's OpenAI instrumentation writes one
    before every streamed tool call)."""
    if content is None or content == "":
        return None
    return {"type": "text", "content": content if isinstance(content, str) else _dump(content)}


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _openai_tool_calls(calls: Any) -> list[dict[str, Any]]:
    parts = []
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if isinstance(function, dict):
            parts.append(
                _tool_call(function.get("name"), function.get("arguments"), call.get("id"))
            )
        elif "name" in call:  # LangChain {name, args, id} and OpenLLMetry flattened calls
            args = call.get("args", call.get("arguments", call.get("input")))
            parts.append(_tool_call(call.get("name"), args, call.get("id")))
    return parts


def normalize_part(part: Any) -> dict[str, Any] | None:
    """One content part in the OTel shape; ``None`` for an empty one."""
    if isinstance(part, str):
        return _text(part)
    if not isinstance(part, dict):
        return _text(part)
    kind = _type(part)
    if kind in _TEXT_TYPES:
        content = part.get("content", part.get("text"))
        return _text(content)
    if kind == "tool_call":
        return _tool_call(part.get("name"), part.get("arguments"), part.get("id"))
    if kind == "tool_call_response":
        response = part["response"] if "response" in part else part.get("result")
        return _tool_response(response, part.get("id"))
    if kind in ("tool_use", "server_tool_use") and "name" in part:  # Anthropic
        return _tool_call(part.get("name"), part.get("input"), part.get("id"))
    if kind == "tool_result":  # Anthropic
        content = part.get("content")
        if isinstance(content, list) and all(
            isinstance(c, dict) and c.get("type") == "text" for c in content
        ):
            content = "".join(str(c.get("text", "")) for c in content)
        return _tool_response(content, part.get("tool_use_id", part.get("id")))
    if kind == "function" and isinstance(part.get("function"), dict):  # OpenAI call in content
        function = part["function"]
        return _tool_call(function.get("name"), function.get("arguments"), part.get("id"))
    if kind in ("function_call", "tool_call_request"):  # Responses item used as a part
        return _tool_call(
            part.get("name"), part.get("arguments"), part.get("call_id", part.get("id"))
        )
    if kind == "function_call_output":
        return _tool_response(part.get("output"), part.get("call_id", part.get("id")))
    if kind in ("thinking", "reasoning") and ("thinking" in part or "content" in part):
        return {"type": "reasoning", "content": part.get("content", part.get("thinking"))}
    if kind == "image_url" and isinstance(part.get("image_url"), dict):
        return {"type": "uri", "modality": "image", "uri": part["image_url"].get("url")}
    if kind is None:
        # Gemini parts carry no type: {"text"}, {"functionCall"}, {"functionResponse"}
        if "text" in part and len(part) <= 2:
            return _text(part["text"])
        call = part.get("functionCall", part.get("function_call"))
        if isinstance(call, dict):
            return _tool_call(call.get("name"), call.get("args"), call.get("id"))
        response = part.get("functionResponse", part.get("function_response"))
        if isinstance(response, dict):
            return _tool_response(response.get("response"), response.get("id"))
        if "content" in part and len(part) == 1:
            return _text(part["content"])
    return dict(part)


def normalize_parts(content: Any) -> list[dict[str, Any]]:
    """The parts of a message's ``content`` (a string, a list of parts, or anything else)."""
    if content is None or content == "":
        return []
    if isinstance(content, list):
        parts = [normalize_part(item) for item in content]
        return [p for p in parts if p is not None]
    part = normalize_part(content)
    return [] if part is None else [part]


def text_message(role: str, content: Any) -> dict[str, Any]:
    """A message holding ``content`` as text (``role`` as given)."""
    return {"role": role, "parts": normalize_parts(content)}


def _finish(message: dict[str, Any], name: Any) -> dict[str, Any]:
    if isinstance(name, str) and name:
        message["name"] = name
    return message


def _lc_message(data: dict[str, Any], default_role: str) -> dict[str, Any] | None:
    """A LangChain message: ``{"lc": 1, "type": "constructor", "id": [..., cls], "kwargs"}``
    or the plain ``{"type": "human" | "ai" | ..., "content", ...}`` form."""
    if data.get("lc") is not None and isinstance(data.get("kwargs"), dict):
        ident = data.get("id")
        cls = ident[-1] if isinstance(ident, list) and ident else ""
        kwargs = data["kwargs"]
        role = _LC_CLASS_ROLES.get(str(cls), _role(kwargs.get("role"), default_role))
    else:
        kwargs = data.get("data") if isinstance(data.get("data"), dict) else data
        role = _LC_TYPE_ROLES.get(str(data.get("type")), default_role)
        if data.get("type") == "chat":
            role = _role(kwargs.get("role"), default_role)
    parts = normalize_parts(kwargs.get("content"))
    parts.extend(_openai_tool_calls(kwargs.get("tool_calls")))
    if role == "tool" and kwargs.get("tool_call_id") is not None:
        parts = [_tool_response(kwargs.get("content"), kwargs.get("tool_call_id"))]
    return _finish({"role": role, "parts": parts}, kwargs.get("name"))


def normalize_message(data: Any, default_role: str = "user") -> dict[str, Any] | None:
    """One message in the OTel shape, or ``None`` when ``data`` is not a message."""
    if isinstance(data, str):
        return text_message(default_role, data)
    if not isinstance(data, dict):
        return None
    kind = _type(data)
    if data.get("lc") is not None or (
        kind in ("human", "ai", "system", "tool", "chat") and ("content" in data or "data" in data)
    ):
        return _lc_message(data, default_role)
    # OpenAI Responses API items
    if kind == "function_call":
        call = _tool_call(
            data.get("name"), data.get("arguments"), data.get("call_id", data.get("id"))
        )
        return {"role": "assistant", "parts": [call]}
    if kind == "function_call_output":
        response = _tool_response(data.get("output"), data.get("call_id", data.get("id")))
        return {"role": "tool", "parts": [response]}
    if kind == "reasoning" and "role" not in data:
        summary = data.get("summary")
        if isinstance(summary, list):
            summary = "".join(
                str(s.get("text", "")) if isinstance(s, dict) else str(s) for s in summary
            )
        return {"role": "assistant", "parts": [{"type": "reasoning", "content": summary}]}
    if "message" in data and isinstance(data["message"], dict) and "role" not in data:
        # a chat completion choice / gen_ai.choice body: {index, finish_reason, message}
        message = data["message"]
        if data.get("tool_calls") and not message.get("tool_calls"):
            # OpenLLMetry's choice event puts the calls beside the message, not in it
            message = {**message, "tool_calls": data["tool_calls"]}
        return normalize_message(message, "assistant")
    role = _role(data.get("role"), default_role)
    if isinstance(data.get("parts"), list):
        parts = normalize_parts(data["parts"])
    else:
        parts = normalize_parts(data.get("content"))
        parts.extend(_openai_tool_calls(data.get("tool_calls")))
        function_call = data.get("function_call")
        if isinstance(function_call, dict):
            parts.append(
                _tool_call(function_call.get("name"), function_call.get("arguments"), None)
            )
        tool_call_id = data.get("tool_call_id", data.get("id") if role == "tool" else None)
        if role == "tool" and parts and all(p.get("type") == "tool_call" for p in parts):
            # JetBrains Koog labels the assistant's tool-call messages "tool": they are calls
            role = "assistant"
        elif role == "tool" and not any(p.get("type") == "tool_call_response" for p in parts):
            content = data.get("content")
            parts = [_tool_response(content, tool_call_id)]
    if "role" not in data and not parts:
        return None
    return _finish({"role": role, "parts": parts}, data.get("name"))


_PLAIN_ROLES = frozenset({"user", "assistant", "system", "tool", "developer"})


def _fast_message(data: Any) -> dict[str, Any] | None:
    """``data`` when it already is an OTel parts message whose parts need no change (the
    common case: instrumentations write exactly this shape), with ``finish_reason`` and an
    empty ``name`` dropped; ``None`` when the full normaliser must look at it. This runs for
    every message of every prompt (prompts repeat the conversation so far), so it checks
    with plain comparisons and copies nothing when nothing needs dropping."""
    if type(data) is not dict:
        return None
    role, parts = data.get("role"), data.get("parts")
    if type(parts) is not list or type(role) is not str or role not in _PLAIN_ROLES:
        return None
    for part in parts:
        if type(part) is not dict:
            return None
        kind = part.get("type")
        if kind == "text":
            if len(part) != 2 or type(part.get("content")) is not str or not part["content"]:
                return None
        elif kind == "tool_call":
            ident = part.get("id")
            if (
                type(part.get("name")) is not str
                or type(part.get("arguments", 0)) is str
                or (ident is not None and (type(ident) is not str or not ident))
                or len(part) > 2 + ("id" in part) + ("arguments" in part)
            ):
                return None
        elif kind == "tool_call_response":
            ident = part.get("id")
            if (
                "response" not in part
                or (ident is not None and (type(ident) is not str or not ident))
                or len(part) > 2 + ("id" in part)
            ):
                return None
        else:
            return None
    if len(data) == 2:
        return data
    message: dict[str, Any] = {"role": role, "parts": parts}
    name = data.get("name")
    if type(name) is str and name:
        message["name"] = name
    return message


def _message_list(value: Any, depth: int = 0) -> list[Any] | None:
    """The list of messages inside common wrappers, or ``None``."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, list):
        if len(value) == 1 and isinstance(value[0], list):  # LangChain batches: [[msg, ...]]
            return _message_list(value[0], depth + 1)
        return value
    if isinstance(value, dict):
        for key in ("messages", "input_messages", "contents", "input", "prompt"):
            inner = value.get(key)
            if isinstance(inner, list):
                return _message_list(inner, depth + 1)
            if isinstance(inner, str) and inner and key != "input":
                return [inner]  # a bare prompt: one user message
        if isinstance(value.get("choices"), list):
            return value["choices"]
        candidates = value.get("candidates")  # Gemini responses
        if isinstance(candidates, list):
            return [
                c.get("content") for c in candidates if isinstance(c, dict) and c.get("content")
            ]
        if isinstance(value.get("output"), list):  # Responses API result
            return value["output"]
        generations = value.get("generations")
        if isinstance(generations, list):
            flat = []
            for batch in generations:
                for gen in batch if isinstance(batch, list) else [batch]:
                    if isinstance(gen, dict):
                        message = gen.get("message")
                        flat.append(message if message is not None else gen.get("text"))
            return flat
        if "role" in value or "parts" in value or "type" in value:
            return [value]
    return None


def normalize_messages(value: Any, *, default_role: str = "user") -> list[dict[str, Any]] | None:
    """Messages in the OTel parts shape from any of the accepted forms (JSON strings are
    decoded first); ``None`` when ``value`` holds no messages. A plain string becomes one
    text message with ``default_role``."""
    try:
        value = _json(value)
        if isinstance(value, str):
            return [text_message(default_role, value)] if value else None
        items = _message_list(value)
        if items is None:
            return None
        messages = []
        for item in items:
            message = _fast_message(item)
            if message is None:
                message = normalize_message(_json(item), default_role)
            if message is not None:
                messages.append(message)
        return messages
    except RecursionError:
        return None


def with_normalized_messages(value: Any) -> Any:
    """A run's state (a LangGraph state, a chain's input) with its ``messages`` list in the
    parts shape when every item is a message; any other value unchanged. LangChain serialises
    messages with per-run ids, which would make every run's task differ."""
    if not isinstance(value, Mapping) or not isinstance(value.get("messages"), list):
        return value
    messages = normalize_messages(value["messages"])
    if not messages or len(messages) != len(value["messages"]):
        return value
    return {**value, "messages": messages}


def normalize_system(value: Any) -> list[dict[str, Any]] | None:
    """System instructions as a list of parts (``gen_ai.system_instructions``)."""
    value = _json(value)
    if value is None:
        return None
    if isinstance(value, list) and all(
        isinstance(v, dict) and "role" in v and "parts" in v for v in value
    ):  # some emitters wrap instructions in a system message
        return [p for v in value for p in normalize_parts(v["parts"])]
    return normalize_parts(value)


def normalize_tools(value: Any) -> list[Any] | None:
    """Tool definitions in the flat OTel form ``{type, name, description, parameters}``
    (OpenAI's ``{type, function: {...}}`` wrapper is unwrapped; an Anthropic tool's
    ``input_schema`` is its ``parameters``, as the OTel Anthropic instrumentation writes it)."""
    value = _json(value)
    if not isinstance(value, list):
        return None if value is None else [value]
    tools = []
    for tool in value:
        tool = _json(tool)
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            flat = {"type": tool.get("type") or "function", **tool["function"]}
            tools.append({k: v for k, v in flat.items() if v is not None})
        elif isinstance(tool, dict):
            flat = dict(tool)
            if "input_schema" in flat and "parameters" not in flat:
                flat["parameters"] = flat.pop("input_schema")
                if flat.get("type") == "custom":  # Anthropic's explicit name for its own tools
                    flat["type"] = "function"
            flat.setdefault("type", "function")
            tools.append({k: v for k, v in flat.items() if v is not None})
        else:
            tools.append(tool)
    return tools


def tool_message(value: Any) -> dict[str, Any] | None:
    """The fields of a LangChain ``ToolMessage`` recorded as a tool's output, or ``None``: the
    ``lc`` constructor form (fields in ``kwargs``), LangChain's ``message_to_dict`` form
    ``{"type": "tool", "data": {...}}`` (openinference-langchain), or the message's own fields
    ``{"type": "tool", "content", "tool_call_id", ...}`` (LangSmith's tracer, Langfuse's
    callback handler)."""
    if not isinstance(value, dict):
        return None
    if value.get("lc") is not None:  # {"lc": 1, "type": "constructor", "id": [..., cls], ...}
        ident = value.get("id")
        cls = ident[-1] if isinstance(ident, list) and ident else None
        fields = value.get("kwargs") if cls in ("ToolMessage", "ToolMessageChunk") else None
    elif value.get("type") == "tool":
        data = value.get("data")
        fields = data if isinstance(data, dict) else value
    else:
        fields = None
    if isinstance(fields, dict) and "content" in fields and "tool_call_id" in fields:
        return fields
    return None


def _parts(messages: Any) -> Iterable[dict[str, Any]]:
    for message in messages if isinstance(messages, list) else ():
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict):
                yield part


def tool_call_parts(messages: Any) -> list[dict[str, Any]]:
    """Every ``tool_call`` part in normalised messages, in order."""
    return [p for p in _parts(messages) if p.get("type") == "tool_call"]


def requested_tool_calls(messages: Any) -> list[tuple[str | None, str]]:
    """``(id, name)`` of every ``tool_call`` part in normalised messages, in order."""
    return [(call_id(p.get("id")), str(p.get("name") or "")) for p in tool_call_parts(messages)]


def tool_responses(messages: Any) -> dict[str, Any]:
    """``{id: response}`` of every ``tool_call_response`` part that has an id."""
    out: dict[str, Any] = {}
    for p in _parts(messages):
        if p.get("type") == "tool_call_response":
            cid = call_id(p.get("id"))
            if cid is not None:
                out[cid] = p.get("response")
    return out


def finish_reasons(value: Any) -> list[str]:
    """``finish_reason`` of each raw output message / choice that has one."""
    value = _json(value)
    items = value if isinstance(value, list) else [value]
    if isinstance(value, dict) and isinstance(value.get("choices"), list):
        items = value["choices"]
    return [
        str(item["finish_reason"])
        for item in items
        if isinstance(item, dict) and item.get("finish_reason") not in (None, "")
    ]
