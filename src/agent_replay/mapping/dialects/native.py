"""Spans emitted by agent-replay's own ctx API (scope ``agent_replay``).

Content arrives only when the user opted in to content capture; then ``agent_replay.step.inputs``
and ``agent_replay.step.output`` hold the step's values as JSON. ``agent_replay.session.id``
groups the spans of one recorded session (they reach the receiver from another process).
"""

from __future__ import annotations

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
        mapped.set_inputs(parse_json(attrs[PREFIX + "inputs"]))
    if PREFIX + "output" in attrs:
        mapped.set_output(parse_json(attrs[PREFIX + "output"]))
    if attrs.get(PREFIX + "side_effects"):
        mapped.attributes["side_effects"] = True
    return True


register_dialect("agent_replay", read)
