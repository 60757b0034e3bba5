"""Dialect mapping: the one place where a normalised span becomes (part of) a step.

Each dialect is a function that looks at a :class:`NormalizedSpan` and fills the fields of a
:class:`MappedSpan` it knows about; it leaves fields another dialect already filled alone. All
registered dialects run on every span in precedence order, because one span can carry several
dialects at once (Google ADK spans carry three). :func:`map_span` never raises: a span no
dialect recognises maps to an opaque ``span`` step, and a dialect that fails on odd input is
recorded in ``notes`` and skipped.

Precedence is fixed by :data:`PRECEDENCE`, not by import order, so a dialect module can be
added with one import line anywhere below: the most explicit signals come first (agent-replay's
own spans, then SDKs that state the observation type outright), the generic GenAI conventions
after the vendor dialects that also set a few ``gen_ai.*`` keys, and pure fallbacks last.
LLM content goes through :mod:`.messages`, so every dialect produces the same input shape
(:func:`llm_inputs`) and the same output shape (a list of OTel parts messages).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import StepKind
from .messages import (
    loads_stripped,
    normalize_messages,
    normalize_system,
    normalize_tools,
    requested_tool_calls,
    tool_message,
)
from .spans import LogEvent, NormalizedSpan, SpanEvent, storable

__all__ = [
    "ABANDONED_NOTE",
    "CUT_SHORT_NOTE",
    "DIALECTS",
    "PRECEDENCE",
    "LogEvent",
    "MappedSpan",
    "NormalizedSpan",
    "Role",
    "SpanEvent",
    "llm_inputs",
    "map_span",
    "parse_json",
    "register_dialect",
    "span_error",
]

#: Dialect names from highest to lowest precedence; unknown names rank after all of these.
PRECEDENCE: tuple[str, ...] = (
    "agent_replay",  # our own spans: exact inputs and outputs
    "langfuse",  # langfuse.observation.*: the user set type and I/O explicitly
    "langsmith",  # langsmith.*: gen_ai.prompt there holds whole inputs, not legacy events
    "google_adk",  # gcp.vertex.agent.*: the full request beside a few gen_ai.* keys
    "openinference",
    "openllmetry",  # flattened gen_ai.prompt.N.* and traceloop.* entity spans
    "gen_ai",  # the OTel GenAI conventions, all four generations
    "pydantic_ai",  # fills what pydantic-ai adds around its gen_ai spans
)

_log = logging.getLogger(__name__)

#: the status description of a stream the application abandoned (see :func:`_abandoned`)
ABANDONED_STREAM = "abandoned stream"
ABANDONED_NOTE = (
    "the application stopped reading this call's stream and did not close it (recorded as an "
    "abandoned stream, not a failed call): the output is the part that was read"
)
CUT_SHORT_NOTE = (
    'the call ended before the model finished (finish reason "error": a stream that failed or '
    "that the application closed early): the output is the part received"
)


class Role:
    """What a span is to a trajectory."""

    STEP = "step"  # a GenAI operation: becomes a step
    AGENT = "agent"  # an agent invocation: names the agent of the steps inside it
    WORKFLOW = "workflow"  # a workflow / chain around steps
    PLAN = "plan"  # a planning phase: contains the llm call that plans, else is that call
    OTHER = "other"  # not GenAI: opaque step, container, or internal detail of a step


@dataclass
class MappedSpan:
    """What the dialects could read from one span."""

    span: NormalizedSpan
    role: str = Role.OTHER
    kind: StepKind = StepKind.SPAN
    name: str | None = None
    inputs: Any = None
    action: Any = None
    has_inputs: bool = False
    has_output: bool = False
    agent: str | None = None
    conversation_id: str | None = None
    tool_call_ids: list[str] = field(default_factory=list)  # ids this tool span answers
    requested_tool_calls: list[str] = field(default_factory=list)  # ids an llm output asked for
    attributes: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    dialects: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def set_inputs(self, value: Any) -> None:
        if not self.has_inputs and value is not None:
            self.inputs, self.has_inputs = value, True

    def set_output(self, value: Any) -> None:
        if not self.has_output and value is not None:
            self.action, self.has_output = value, True

    def set_llm_inputs(
        self, messages: Any, *, system: Any = None, tools: Any = None, model: Any = None
    ) -> None:
        """Set an llm step's inputs from raw messages in any accepted form (see
        :func:`llm_inputs`); nothing happens when there are no messages and no system text."""
        if not self.has_inputs:
            self.set_inputs(llm_inputs(messages, system=system, tools=tools, model=model))

    def set_llm_output(self, messages: Any, *, default_role: str = "assistant") -> None:
        """Set an llm step's action from raw output messages (normalised to OTel parts) and
        remember which tool calls they request."""
        if self.has_output:
            return
        normalized = normalize_messages(messages, default_role=default_role)
        if normalized is None:
            return
        self.set_output(normalized)
        if not self.requested_tool_calls:
            self.requested_tool_calls = [i for i, _ in requested_tool_calls(normalized) if i]

    def set_tool_output(self, value: Any) -> None:
        """Set a tool step's result from its recorded output: a LangChain ``ToolMessage`` (see
        :func:`~.messages.tool_message`) gives its content, what the model got; one of
        ``status="error"`` (a tool error LangChain handled, ``handle_tool_error``) is a failed
        step too, unless a dialect with precedence already said how the step failed."""
        fields = tool_message(value)
        if fields is None:
            self.set_output(value)
            return
        content = fields["content"]
        self.set_output(content)
        if fields.get("status") == "error" and self.error is None:
            message = content if isinstance(content, str) else json.dumps(content, default=str)
            self.error = {"type": "error", "message": message}

    def set_step(self, kind: StepKind, name: str | None) -> None:
        """Claim the span as a step of ``kind`` unless a dialect with precedence already said
        what it is (a step, or an agent, workflow or plan around steps)."""
        if self.role != Role.OTHER:
            return
        self.role, self.kind = Role.STEP, kind
        if name and not self.name:
            self.name = name

    def set_conversation(self, value: Any) -> None:
        """Group the span under conversation ``value`` (as text) unless a dialect with
        precedence already did; ``None`` and ``""`` name no conversation."""
        if self.conversation_id is None and value not in (None, ""):
            self.conversation_id = str(value)

    def set_attr(self, key: str, value: Any) -> None:
        if key.endswith("_tokens"):  # a count, whatever type the exporter wrote it as
            value = token_count(value)
        if value is not None and key not in self.attributes:
            self.attributes[key] = value


def token_count(value: Any) -> Any:
    """A token count as an int when it is one written as a float or as text (Langfuse's
    copied attributes hold ``"631"``); anything else as it is (nothing is lost)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


Dialect = Callable[[NormalizedSpan, MappedSpan], bool]
"""Fills what it knows; returns whether the span is in its dialect."""

DIALECTS: list[tuple[str, Dialect]] = []


def _rank(name: str) -> int:
    return PRECEDENCE.index(name) if name in PRECEDENCE else len(PRECEDENCE)


def register_dialect(name: str, dialect: Dialect, *, before: str | None = None) -> None:
    """Add a dialect at its place in :data:`PRECEDENCE` (unknown names: after every known
    one, or just before the dialect named ``before``). Registering a name twice is a no-op."""
    if any(existing == name for existing, _ in DIALECTS):
        return
    position = len(DIALECTS)
    for i, (existing, _) in enumerate(DIALECTS):
        if existing == before or (before is None and _rank(existing) > _rank(name)):
            position = i
            break
    DIALECTS.insert(position, (name, dialect))


def llm_inputs(
    messages: Any, *, system: Any = None, tools: Any = None, model: Any = None
) -> dict[str, Any] | None:
    """The one shape of an llm step's inputs: ``{"messages": [...], "system": [parts],
    "tools": [...], "model": str}``, each key present only when known. Messages, system
    instructions and tool definitions are normalised (:mod:`.messages`); ``None`` when there
    are neither messages nor system instructions."""
    inputs: dict[str, Any] = {}
    normalized = normalize_messages(messages)
    if normalized is not None:
        inputs["messages"] = normalized
    system_parts = normalize_system(system)
    if system_parts:
        inputs["system"] = system_parts
    if not inputs:
        return None
    inputs.setdefault("messages", [])
    tool_list = normalize_tools(tools)
    if tool_list:
        inputs["tools"] = tool_list
    if isinstance(model, str) and model:
        inputs["model"] = model
    return inputs


def map_span(span: NormalizedSpan) -> MappedSpan:
    """Everything every dialect reads from ``span`` (made :func:`storable` first). Never
    raises."""
    span = storable(span)
    mapped = MappedSpan(span=span)
    for name, dialect in DIALECTS:
        try:
            if dialect(span, mapped):
                mapped.dialects.append(name)
        except Exception as exc:  # a malformed span must not stop an import or a capture
            _log.debug("dialect %s failed on span %s", name, span.span_id, exc_info=True)
            mapped.notes.append(f"{name} dialect could not read this span ({type(exc).__name__})")
    if mapped.name is None:
        mapped.name = span.name or "span"
    abandoned = mapped.error is None and _abandoned(span)
    if abandoned:
        mapped.notes.append(ABANDONED_NOTE)
    elif mapped.error is None and span.status_code == 2:
        mapped.error = span_error(span)
    if (
        not abandoned
        and mapped.has_output
        and "error" in (mapped.attributes.get("finish_reasons") or ())
    ):
        mapped.notes.append(CUT_SHORT_NOTE)
    return mapped


def _abandoned(span: NormalizedSpan) -> bool:
    """Whether ``span`` is a model call whose stream the application dropped before the end
    without closing it, as ``opentelemetry-util-genai`` 1.3b0 (under the OTel GenAI OpenAI and
    Anthropic instrumentations) ends it when the stream is garbage-collected: status ERROR
    described ``"abandoned stream"``, ``error.type=_OTHER``, no exception event. The call did
    not fail: nothing raised, the application stopped reading."""
    return (
        span.status_code == 2
        and span.status_message == ABANDONED_STREAM
        and span.attributes.get("error.type") == "_OTHER"
        and not any(event.name == "exception" for event in span.events)
    )


def span_error(span: NormalizedSpan) -> dict[str, str]:
    """``{type, message}`` of a span that ended in error. The last OTel ``exception`` event
    (``span.record_exception``) names the exception that ended it, as every instrumentation
    checked writes it (the type qualified by its module, the bare message); without one,
    ``error.type`` and the status description (which some write as ``"Type: message"`` or
    with a traceback, others leave empty) say what they can."""
    raised = next((e.attributes for e in reversed(span.events) if e.name == "exception"), {})
    return {
        "type": str(raised.get("exception.type") or span.attributes.get("error.type") or "error"),
        "message": str(raised.get("exception.message") or span.status_message or ""),
    }


def parse_json(value: Any) -> Any:
    """Attribute values that hold JSON as a string are decoded; anything else is kept."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "[", '"') or text in ("true", "false", "null"):
            try:
                return loads_stripped(text)
            except (ValueError, RecursionError):
                return value
    return value


# Built-in dialects register themselves on import; PRECEDENCE orders them, not these lines.
from .dialects import genai as _genai  # noqa: E402,F401
from .dialects import google_adk as _google_adk  # noqa: E402,F401
from .dialects import langfuse as _langfuse  # noqa: E402,F401
from .dialects import langsmith as _langsmith  # noqa: E402,F401
from .dialects import native as _native  # noqa: E402,F401
from .dialects import openinference as _openinference  # noqa: E402,F401
from .dialects import openllmetry as _openllmetry  # noqa: E402,F401
from .dialects import pydantic_ai as _pydantic_ai  # noqa: E402,F401
