"""Spans emitted by agent-replay's own ctx API (scope ``agent_replay``).

Content arrives only when the user opted in to content capture; then ``agent_replay.step.inputs``
and ``agent_replay.step.output`` hold the step's values as JSON in the store's encoding
(``canonical``: bytes, sets, NaN tagged). ``agent_replay.session.id``
groups the spans of one recorded session (they reach the receiver from another process).
"""

from __future__ import annotations

from typing import Any

from ...canonical import decode
from ...model import StepKind
from .. import MappedSpan, NormalizedSpan, parse_json, register_dialect

PREFIX = "agent_replay.step."


def read(span: NormalizedSpan, mapped: MappedSpan) -> bool:
    attrs = span.attributes
    kind = attrs.get(PREFIX + "kind")
    if kind is None:
        return False
    mapped.set_step(StepKind.parse(kind), str(attrs.get(PREFIX + "name") or span.name))
    session = attrs.get("agent_replay.session.id")
    if isinstance(session, str):
        mapped.set_conversation(session)
    if PREFIX + "inputs" in attrs:
        mapped.set_inputs(_value(attrs[PREFIX + "inputs"]))
    if PREFIX + "output" in attrs:
        mapped.set_output(_value(attrs[PREFIX + "output"]))
    if attrs.get(PREFIX + "side_effects"):
        mapped.attributes["side_effects"] = True
    return True


def _value(text: Any) -> Any:
    """A step value as the ctx API writes it (the store's encoding: bytes, sets, NaN come back
    as they were); text it did not write (older versions, other tools) as plain JSON."""
    if isinstance(text, str):
        try:
            return decode(text)
        except Exception:  # arbitrary text from the wire: read as JSON text below
            pass
    return parse_json(text)


register_dialect("agent_replay", read)
