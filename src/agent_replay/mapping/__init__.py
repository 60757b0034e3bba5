"""Dialect mapping: the one place where a normalised span becomes (part of) a step.

Each dialect is a function that looks at a :class:`NormalizedSpan` and fills the fields of a
:class:`MappedSpan` it knows about; it leaves fields another dialect already filled alone. All
registered dialects run on every span in precedence order, because one span can carry several
dialects at once (Google ADK spans carry three). :func:`map_span` never raises: a span no
dialect recognises maps to an opaque ``span`` step, and a dialect that fails on odd input is
recorded in ``notes`` and skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import StepKind
from .spans import LogEvent, NormalizedSpan, SpanEvent

__all__ = [
    "DIALECTS",
    "LogEvent",
    "MappedSpan",
    "NormalizedSpan",
    "Role",
    "SpanEvent",
    "map_span",
    "parse_json",
    "register_dialect",
]

_log = logging.getLogger(__name__)


class Role:
    """What a span is to a trajectory."""

    STEP = "step"  # a GenAI operation: becomes a step
    AGENT = "agent"  # an agent invocation: names the agent of the steps inside it
    WORKFLOW = "workflow"  # a workflow / chain around steps
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

    def set_step(self, kind: StepKind, name: str | None) -> None:
        """Claim the span as a step of ``kind`` unless a dialect with precedence already did."""
        if self.role == Role.STEP:
            return
        self.role, self.kind = Role.STEP, kind
        if name and not self.name:
            self.name = name

    def set_attr(self, key: str, value: Any) -> None:
        if value is not None and key not in self.attributes:
            self.attributes[key] = value


Dialect = Callable[[NormalizedSpan, MappedSpan], bool]
"""Fills what it knows; returns whether the span is in its dialect."""

DIALECTS: list[tuple[str, Dialect]] = []


def register_dialect(name: str, dialect: Dialect, *, before: str | None = None) -> None:
    """Add a dialect (by default with the lowest precedence)."""
    if any(existing == name for existing, _ in DIALECTS):
        return
    position = len(DIALECTS)
    if before is not None:
        for i, (existing, _) in enumerate(DIALECTS):
            if existing == before:
                position = i
                break
    DIALECTS.insert(position, (name, dialect))


def map_span(span: NormalizedSpan) -> MappedSpan:
    """Everything every dialect reads from ``span``. Never raises."""
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
    if mapped.error is None and span.status_code == 2:
        mapped.error = {
            "type": str(span.attributes.get("error.type") or "error"),
            "message": span.status_message or "",
        }
    return mapped


def parse_json(value: Any) -> Any:
    """Attribute values that hold JSON as a string are decoded; anything else is kept."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "[", '"') or text in ("true", "false", "null"):
            try:
                return json.loads(text)
            except ValueError:
                return value
    return value


# Built-in dialects register themselves on import, in precedence order.
from .dialects import genai as _genai  # noqa: E402,F401
from .dialects import native as _native  # noqa: E402,F401  (first: most specific)
from .dialects import openinference as _openinference  # noqa: E402,F401
