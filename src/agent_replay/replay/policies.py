"""Resample policies: how a step of an imported trace is re-drawn when no agent code exists.

A policy receives a :class:`ResampleRequest` (the recorded step, its inputs as rewritten by
upstream changes, a random stream keyed for common random numbers, the plan's model hint) and
returns a new output for the step, in the same shape as the recorded one. Built in:

* :class:`OpenAIChatPolicy` - any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp
  server, hosted APIs) through the official ``openai`` client;
* :class:`ScriptedPolicy` - outputs drawn from a table or computed by a function (tests,
  surrogate simulations);
* :class:`HoldPolicy` - re-drawing returns the recorded output (a deterministic step).

Errors a policy raises are wrapped in :class:`PolicyError` naming the step, which
:func:`~agent_replay.replay` raises instead of making the rollout a failure: a broken
endpoint is told apart from a failing agent. Third-party policies can be registered under the
``agent_replay.policies`` entry-point group and named in ``AGENT_REPLAY_POLICY``.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from ..errors import AgentReplayError
from ..model import Step

__all__ = [
    "HoldPolicy",
    "OpenAIChatPolicy",
    "PolicyError",
    "ResamplePolicy",
    "ResampleRequest",
    "ScriptedPolicy",
    "as_policy",
    "load_policy",
]


class PolicyError(AgentReplayError):
    """A resample policy failed (endpoint down, bad response); not the agent's failure."""


@dataclass
class ResampleRequest:
    """What a policy gets: the recorded ``step``, its current ``inputs``, a keyed ``rng``,
    the plan's ``model_hint``, a ``usage`` dict to report token counts into, ``history``:
    the earlier steps of this rollout with the outputs the run actually got from them
    (re-drawn ones included) - the conversation so far, for traces whose inputs do not carry
    it - and the run's ``task`` (the trajectory's)."""

    step: Step
    inputs: Any
    rng: random.Random
    model_hint: str | None = None
    ctx: Any = None
    usage: dict[str, Any] = field(default_factory=dict)
    history: tuple[tuple[Step, Any], ...] = ()
    task: Any = None


@runtime_checkable
class ResamplePolicy(Protocol):
    """Re-draws one step. Called on the rollout's thread; must not mutate ``request.inputs``."""

    def resample(self, request: ResampleRequest) -> Any: ...


class HoldPolicy:
    """Re-drawing returns the recorded output: for steps known to be deterministic."""

    def resample(self, request: ResampleRequest) -> Any:
        return request.step.output


class ScriptedPolicy:
    """Outputs from a script: a list of alternatives (drawn with ``weights``), a function of
    the request, or a mapping from step name (or index, ``"agent:<name>"``, kind, ``"*"``) to
    either. A list is always a list of alternatives: an output that is itself a list (an OTel
    message list) is written ``[messages]``.

    An empty list of alternatives, or weights that are negative, not finite, all zero or not
    one per alternative, are refused here (``ValueError``). A step the mapping has no entry
    for is not covered (:meth:`covers`): the replay agent holds it and flags it like a step
    without a policy, rather than serve its recorded output as a re-draw (which attribution
    would score as having no effect); asked to re-draw it anyway, it raises
    :class:`PolicyError`."""

    def __init__(self, script: Any, *, weights: Sequence[float] | None = None) -> None:
        self.script = script
        self.weights = None if weights is None else _checked_weights(weights)
        entries = script.items() if isinstance(script, Mapping) else [(None, script)]
        for key, entry in entries:
            where = "the script" if key is None else f"the script's entry {key!r}"
            if _alternatives(entry):
                if not entry:
                    raise ValueError(
                        f"ScriptedPolicy: {where} is an empty list: it has no output to draw "
                        "(a list is a list of alternatives; an empty output is written [[]])"
                    )
                if self.weights is not None and len(self.weights) != len(entry):
                    raise ValueError(
                        f"ScriptedPolicy: {len(self.weights)} weights for the "
                        f"{len(entry)} alternatives of {where}: give one weight per alternative"
                    )

    def _entry(self, step: Step) -> Any:
        entry = self.script
        if isinstance(entry, Mapping):
            for key in (step.name, step.index, f"agent:{step.agent}", step.kind.value, "*"):
                if key in entry:
                    return entry[key]
            return _MISSING
        return entry

    def covers(self, step: Step) -> bool:
        """Whether the script has an entry for ``step`` (a mapping may not)."""
        return self._entry(step) is not _MISSING

    def resample(self, request: ResampleRequest) -> Any:
        step = request.step
        entry = self._entry(step)
        if entry is _MISSING:
            raise PolicyError(
                f"step {step.index} ({step.label}): the ScriptedPolicy table has no entry for "
                f"it (keys tried: {step.name!r}, {step.index}, 'agent:{step.agent}', "
                f"{step.kind.value!r}, '*')"
            )
        if callable(entry):
            return entry(request)
        if _alternatives(entry):
            if self.weights is not None:
                return request.rng.choices(list(entry), weights=self.weights)[0]
            return entry[request.rng.randrange(len(entry))]
        return entry


_MISSING = object()


def _alternatives(entry: Any) -> bool:
    """Whether a script entry is a list of alternatives (not text, not a function)."""
    return (
        isinstance(entry, Sequence)
        and not isinstance(entry, (str, bytes, bytearray))
        and not callable(entry)
    )


def _checked_weights(weights: Sequence[float]) -> list[float]:
    values = list(weights)
    for w in values:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(
                f"ScriptedPolicy: weights must be finite numbers of at least 0; got {values!r}"
            )
    if not sum(values) > 0:
        raise ValueError(f"ScriptedPolicy: weights must not all be 0; got {values!r}")
    return values


class OpenAIChatPolicy:
    """Re-draw LLM steps from an OpenAI-compatible chat completions endpoint.

    ``base_url``, ``api_key`` and ``model`` default to ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``
    and ``AGENT_REPLAY_MODEL``; without a model from either, the recorded call's model is used
    (the plan's model hint wins over all). ``instructions`` is a
    system prompt, or a function of the recorded step returning one (e.g. "You are
    {step.agent}; reply as that agent would"), put before the recorded one. A step whose
    inputs are a prompt (messages, or text) is sent that prompt; one whose inputs are not (a
    turn of a multi-agent conversation: its system prompt at most) is sent
    :func:`transcript_messages`: its system prompt, the task, its other inputs and the
    conversation so far. The request's random stream supplies the
    ``seed`` so rollouts are reproducible where the server honours it. Inputs in the OTel
    GenAI parts shape, OpenAI message lists, plain strings and arbitrary JSON are accepted; the
    output mirrors the recorded output's shape.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        instructions: str | Callable[[Step], str] | None = None,
        client: Any = None,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self.model = model or os.environ.get("AGENT_REPLAY_MODEL")
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.instructions = instructions
        self._client = client
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if client is None and not base_url and not api_key:
            # the client would call api.openai.com with a dummy key: every re-draw fails,
            # and the error ("Connection error.") does not say where it tried
            raise PolicyError(
                "OpenAIChatPolicy has no endpoint: pass base_url= or set OPENAI_BASE_URL to "
                "an OpenAI-compatible server (vLLM, Ollama, ...); for api.openai.com itself, "
                "set OPENAI_API_KEY"
            )
        self._client_args = {
            "base_url": base_url,
            "api_key": api_key or "not-needed",
            "timeout": timeout,
            "max_retries": max_retries,
        }

    @property
    def endpoint(self) -> str:
        """The base URL re-draws are asked of (named in the errors a failed request raises)."""
        if self._client is not None:
            return str(getattr(self._client, "base_url", None) or "a client passed in")
        return str(self._client_args["base_url"] or "https://api.openai.com/v1")

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import openai
            except ImportError as exc:  # pragma: no cover - openai is an optional dependency
                raise PolicyError(
                    "OpenAIChatPolicy needs the openai package: pip install openai"
                ) from exc
            self._client = openai.OpenAI(**self._client_args)
        return self._client

    def resample(self, request: ResampleRequest) -> Any:
        step = request.step
        model = (
            request.model_hint
            or self.model
            or _input_model(request.inputs)
            or _input_model(step.attributes)  # the model the recorded call used
        )
        if not model:
            raise PolicyError(
                f"step {step.index} ({step.label}): no model to re-draw with; "
                "pass model= or set AGENT_REPLAY_MODEL"
            )
        if isinstance(request.inputs, str) or _has_messages(request.inputs):
            messages = to_openai_messages(request.inputs)
        else:
            messages = transcript_messages(
                request.history, step, inputs=request.inputs, task=request.task
            )
        instructions = self.instructions(step) if callable(self.instructions) else self.instructions
        if instructions:
            messages = [{"role": "system", "content": instructions}, *messages]
        # sampled as the recorded call was, unless told otherwise (a step recorded at
        # temperature 0.2 re-drawn at 1.0 measures another policy than the agent's)
        recorded = _recorded_parameters(step, request.inputs)
        temperature = self.temperature
        if temperature is None:
            temperature = recorded.get("temperature", 1.0)
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": temperature,
            "seed": request.rng.getrandbits(31),
        }
        for key in _PASSED_ON:
            if key in recorded:
                kwargs[key] = recorded[key]
        if self.max_tokens is not None:  # in place of the recorded cap, whatever its name
            kwargs.pop("max_completion_tokens", None)
            kwargs["max_tokens"] = self.max_tokens
        tools = _openai_tools(request.inputs)
        if tools:
            kwargs["tools"] = tools
        response = self.client.chat.completions.create(**kwargs)
        if inspect.isawaitable(response):
            close = getattr(response, "close", None)
            if close is not None:
                close()  # (never awaited: no request was sent)
            raise PolicyError(
                "OpenAIChatPolicy takes a synchronous client (openai.OpenAI); an async one "
                "(openai.AsyncOpenAI) was given"
            )
        # the model that answered (the recorded step's attributes name the old one)
        request.usage["model"] = getattr(response, "model", None) or model
        usage = getattr(response, "usage", None)
        if usage is not None:
            request.usage["input_tokens"] = getattr(usage, "prompt_tokens", 0) or 0
            request.usage["output_tokens"] = getattr(usage, "completion_tokens", 0) or 0
        choices = getattr(response, "choices", None)
        message = getattr(choices[0], "message", None) if choices else None
        if message is None:
            missing = "no choices" if not choices else "no message in choices[0]"
            raise PolicyError(
                f"step {step.index} ({step.label}): the endpoint answered without a message "
                f"({missing} in its reply: {_reply_text(response)})"
            )
        return shape_like(step.output, message, choices[0].finish_reason)


def _reply_text(response: Any, limit: int = 500) -> str:
    """A reply for an error message: its JSON without the empty fields, whole or cut with
    a note of its length (a repr cut at a fixed length ended mid-field)."""
    try:
        data = response.model_dump(exclude_none=True)
    except Exception:  # not a pydantic model (a client passed in)
        data = response
    try:
        text = json.dumps(data, default=repr, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(data)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


# -- message conversion --------------------------------------------------------------------


def _has_messages(inputs: Any) -> bool:
    if isinstance(inputs, list):
        return True
    return isinstance(inputs, Mapping) and isinstance(inputs.get("messages"), list)


def transcript_messages(
    history: Sequence[tuple[Step, Any]],
    step: Step,
    *,
    inputs: Any = None,
    task: Any = None,
) -> list[dict[str, Any]]:
    """Chat messages for a step whose inputs are not a prompt: its system prompt (``inputs``'
    ``system``), the ``task``, its other ``inputs`` (``turn``, a position, left out), then the
    conversation so far from ``step.agent``'s point of view: its own earlier turns as the
    assistant's, everyone else's as user turns prefixed with the speaker's name; ends with a
    user turn asking for the agent's next message (unless there is no conversation yet and
    its other inputs are the request)."""
    messages: list[dict[str, Any]] = []
    own = inputs
    if isinstance(inputs, Mapping):
        if inputs.get("system"):
            messages.append({"role": "system", "content": _text(inputs["system"])})
        own = {k: v for k, v in inputs.items() if k not in ("system", "turn")}
    if task is not None and task != {}:
        messages.append({"role": "user", "content": f"The task: {_as_text(task)}"})
    asked = own is not None and own != {}
    if asked:
        messages.append({"role": "user", "content": _as_text(own)})
    for earlier, output in history:
        text = (
            _text(output[0].get("parts"))
            if (isinstance(output, list) and output and isinstance(output[0], Mapping))
            else _as_text(output)
        )
        if earlier.agent is not None and earlier.agent == step.agent:
            messages.append({"role": "assistant", "content": text})
        else:
            speaker = earlier.agent or earlier.name
            messages.append({"role": "user", "content": f"[{speaker}] {text}"})
    if history or not asked:
        messages.append(
            {
                "role": "user",
                "content": f"Continue the conversation as {step.agent or step.name}: "
                "write your next message.",
            }
        )
    return messages


def _as_text(value: Any) -> str:
    """``value`` as message text: itself if it is text, else its JSON."""
    return value if isinstance(value, str) else json.dumps(value, default=repr)


def _input_model(inputs: Any) -> str | None:
    return (
        inputs.get("model")
        if isinstance(inputs, Mapping) and isinstance(inputs.get("model"), str)
        else None
    )


def _text(parts: Any) -> str:
    """The text parts of a message (not its reasoning: an endpoint does not take a model's
    reasoning back as what it said)."""
    if isinstance(parts, str):
        return parts
    texts = []
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, Mapping) and part.get("type") in ("text", None):
            content = part.get("content", part.get("text"))
            if isinstance(content, str):
                texts.append(content)
    return "\n".join(texts)


def to_openai_messages(inputs: Any) -> list[dict[str, Any]]:
    """OpenAI chat messages from step inputs (OTel parts, OpenAI messages, text or JSON)."""
    if isinstance(inputs, str):
        return [{"role": "user", "content": inputs}]
    messages: list[dict[str, Any]] = []
    raw = inputs.get("messages") if isinstance(inputs, Mapping) else inputs
    if isinstance(inputs, Mapping) and inputs.get("system"):
        messages.append({"role": "system", "content": _text(inputs["system"])})
    if not isinstance(raw, list):
        return [*messages, {"role": "user", "content": json.dumps(inputs, default=repr)}]
    for message in raw:
        if not isinstance(message, Mapping):
            messages.append({"role": "user", "content": str(message)})
            continue
        role = str(message.get("role") or "user")
        if "parts" not in message:  # already OpenAI-shaped
            messages.append({k: v for k, v in message.items() if v is not None})
            continue
        parts = message.get("parts") or []
        calls = [p for p in parts if isinstance(p, Mapping) and p.get("type") == "tool_call"]
        replies = [
            p for p in parts if isinstance(p, Mapping) and p.get("type") == "tool_call_response"
        ]
        if replies:
            for reply in replies:
                body = reply.get("response", reply.get("result"))
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(reply.get("id") or ""),
                        "content": body if isinstance(body, str) else json.dumps(body),
                    }
                )
            said = _text(parts)  # text sent with the results ("Also, answer in French")
            if said:
                messages.append({"role": role, "content": said})
            continue
        entry: dict[str, Any] = {"role": role, "content": _text(parts)}
        if calls:
            entry["tool_calls"] = [
                {
                    "id": str(c.get("id") or f"call_{i}"),
                    "type": "function",
                    "function": {
                        "name": c.get("name"),
                        "arguments": c.get("arguments")
                        if isinstance(c.get("arguments"), str)
                        else json.dumps(c.get("arguments") or {}),
                    },
                }
                for i, c in enumerate(calls)
            ]
        messages.append(entry)
    return _answered_in_order(messages)


def _answered_in_order(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as an OpenAI endpoint takes them: each tool message answering a call of
    the assistant message before it. A result recorded without its call's id (Koog) takes
    the id of the next call not yet answered; one that answers no call there (the call was
    re-drawn away, upstream in this rollout) becomes text, so the request stays valid; a
    call left unanswered is dropped from its message."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # calls of the last assistant message not yet answered
    for message in messages:
        role = message.get("role")
        if role == "tool":
            cid = message.get("tool_call_id")
            if cid and cid in pending:
                pending.remove(cid)
            elif not cid and pending:
                message = {**message, "tool_call_id": pending.pop(0)}
            else:
                message = {"role": "user", "content": f"(tool result) {message.get('content')}"}
        else:
            _drop_unanswered(out, pending)
            calls = message.get("tool_calls") if role == "assistant" else None
            pending = [str(c.get("id")) for c in calls or () if isinstance(c, Mapping)]
        out.append(message)
    if out and not out[-1].get("tool_calls"):  # (calls ending the request are the question)
        _drop_unanswered(out, pending)
    return out


def _drop_unanswered(out: list[dict[str, Any]], pending: list[str]) -> None:
    """Drop the calls in ``pending`` from the last assistant message in ``out`` that has
    calls (an endpoint refuses an assistant message whose calls are not all answered)."""
    if not pending:
        return
    index = next(i for i in range(len(out) - 1, -1, -1) if out[i].get("tool_calls"))
    message = dict(out[index])
    calls = [c for c in message["tool_calls"] if str(c.get("id")) not in pending]
    if calls:
        message["tool_calls"] = calls
    else:
        del message["tool_calls"]
        message["content"] = message.get("content") or ""
    out[index] = message


def _openai_tools(inputs: Any) -> list[dict[str, Any]]:
    tools = inputs.get("tools") if isinstance(inputs, Mapping) else None
    out = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, Mapping) and tool.get("name"):
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": tool.get("description", ""),
                        "parameters": tool.get("parameters")
                        or {"type": "object", "properties": {}},
                    },
                }
            )
        elif isinstance(tool, Mapping) and tool.get("type") == "function":
            out.append(dict(tool))
    return out


def shape_like(recorded: Any, message: Any, finish_reason: str | None) -> Any:
    """The model's reply in the shape of the recorded output."""
    text = getattr(message, "content", None) or ""
    calls = getattr(message, "tool_calls", None) or []
    if isinstance(recorded, list) and _openai_shaped(recorded):  # OpenAI messages
        return [_openai_reply({"role": "assistant"}, text, calls)]
    if isinstance(recorded, Mapping) and _openai_shaped([recorded]):  # one OpenAI message
        return _openai_reply(recorded, text, calls)
    if isinstance(recorded, list):  # OTel output messages
        parts: list[dict[str, Any]] = []
        if text:
            parts.append({"type": "text", "content": text})
        for call in calls:
            try:
                arguments = json.loads(call.function.arguments)
            except (TypeError, ValueError):
                arguments = call.function.arguments
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.function.name,
                    "arguments": arguments,
                }
            )
        return [{"role": "assistant", "parts": parts, "finish_reason": finish_reason or "stop"}]
    return text


def _openai_reply(recorded: Mapping[str, Any], text: str, calls: list[Any]) -> dict[str, Any]:
    """The model's reply as an OpenAI message, in place of ``recorded`` (its text and its
    calls both: the recorded calls are not kept beside a re-drawn reply)."""
    reply = {k: v for k, v in recorded.items() if k != "tool_calls"}
    reply["content"] = text or (None if calls else "")
    if calls:
        reply["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in calls
        ]
    return reply


def _openai_shaped(messages: list[Any]) -> bool:
    """Whether recorded output messages are OpenAI's (``content`` / ``tool_calls``) rather
    than the OTel parts shape."""
    said = [m for m in messages if isinstance(m, Mapping)]
    return bool(said) and all(
        "parts" not in m and ("content" in m or "tool_calls" in m) for m in said
    )


# -- choosing policies -------------------------------------------------------------------------


def as_policy(obj: Any) -> Callable[[ResampleRequest], Any]:
    """A callable ``request -> output`` from a policy object, a ``fn(request)`` or the seed's
    ``fn(ctx, inputs)``."""
    if isinstance(obj, ResamplePolicy):
        return obj.resample
    if not callable(obj):
        raise TypeError(
            f"{obj!r} is not a resample policy (needs .resample(request) or to be callable)"
        )
    try:
        params = [  # required ones: ``fn(request, unit="F")`` takes the request alone
            p
            for p in inspect.signature(obj).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
    except (TypeError, ValueError):
        params = []
    if len(params) >= 2:
        return lambda request: obj(request.ctx, request.inputs)
    return obj


#: recorded request parameters a re-draw is sent with, besides the temperature (``seed`` comes
#: from the rollout's stream; ``top_k`` is no chat completions parameter)
_PASSED_ON = (
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "frequency_penalty",
    "presence_penalty",
    "stop",
)
_COUNTS = ("max_tokens", "max_completion_tokens")


def _recorded_parameters(step: Step, inputs: Any) -> dict[str, Any]:
    """The parameters the recorded call was made with (``temperature`` and
    :data:`_PASSED_ON`), as the import keeps them: ``parameters`` in the step's attributes or
    its inputs. Numbers written as text (Langfuse keeps attributes so) are read as numbers;
    ``stop`` is a string or a list of strings."""
    out: dict[str, Any] = {}
    for where in (inputs, step.attributes):
        params = where.get("parameters") if isinstance(where, Mapping) else None
        if not isinstance(params, Mapping):
            continue
        for key in ("temperature", *_PASSED_ON):
            raw = params.get(key)
            if key == "stop":
                if isinstance(raw, str) or (
                    isinstance(raw, list) and raw and all(isinstance(s, str) for s in raw)
                ):
                    out.setdefault(key, raw)
                continue
            value = _number(raw)
            if value is not None:
                out.setdefault(key, int(value) if key in _COUNTS else value)
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def load_policy(name: str) -> ResamplePolicy:
    """A policy registered under the ``agent_replay.policies`` entry-point group (``openai``,
    ``hold`` are built in), constructed with no arguments."""
    builtin = {"openai": OpenAIChatPolicy, "hold": HoldPolicy}
    if name in builtin:
        return builtin[name]()
    for ep in entry_points(group="agent_replay.policies"):
        if ep.name == name:
            return ep.load()()
    raise PolicyError(
        f"no resample policy named {name!r} (built in: openai, hold; others "
        "register under the agent_replay.policies entry-point group)"
    )
