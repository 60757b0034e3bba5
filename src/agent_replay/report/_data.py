"""The one shape every renderer reads: the JSON report (``AttributionResult.to_dict()``).

Renderers take an :class:`~agent_replay.attribution.AttributionResult` *or* its dict, so a
report regenerated from a JSON file looks exactly like one rendered straight after the
attribution. The recorded run travels in the optional ``trajectory`` key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ..canonical import plain_json
from ..model import Trajectory

__all__ = ["as_report", "clip", "finite", "plain_json", "trajectory_section", "visible"]


def trajectory_section(trajectory: Trajectory) -> dict[str, Any]:
    """The recorded run as the report's ``trajectory`` key (content included)."""
    return {
        "session_id": trajectory.session_id,
        "head_hash": trajectory.head_hash,
        "source": trajectory.source,
        "task": plain_json(trajectory.task),
        "seed": trajectory.seed,
        "outcome": None if trajectory.outcome is None else plain_json(trajectory.outcome.to_dict()),
        "lineage": None if trajectory.lineage is None else plain_json(trajectory.lineage.to_dict()),
        "capture": plain_json(dict(trajectory.metadata.get("capture") or {})) or None,
        "steps": [
            {
                "index": s.index,
                "kind": s.kind.value,
                "name": s.name,
                "agent": s.agent,
                "inputs": plain_json(s.inputs),
                "action": plain_json(s.action),
                "observation": plain_json(s.observation) if s.observed else None,
                "observed": s.observed,
                "error": plain_json(dict(s.error)) if s.error else None,
                "side_effects": s.side_effects,
                "resamplable": s.resamplable,
                "step_hash": s.step_hash,
                "trace_id": s.trace_id,
                "span_id": s.span_id,
            }
            for s in trajectory.steps
        ],
    }


def as_report(
    result: Any, trajectory: Trajectory | Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The report dict of ``result`` (an AttributionResult or an already-loaded report), with
    the ``trajectory`` section added when ``trajectory`` is given. Never mutates its input."""
    if isinstance(result, Mapping):
        data = dict(result)
    elif hasattr(result, "to_dict"):
        data = result.to_dict()
    else:
        raise TypeError(f"expected an AttributionResult or a report dict, got {type(result)!r}")
    if isinstance(trajectory, Trajectory):
        data["trajectory"] = trajectory_section(trajectory)
    elif isinstance(trajectory, Mapping):
        data["trajectory"] = dict(trajectory)
    return data


def finite(value: Any) -> bool:
    """Whether ``value`` is a number that is not NaN (report numbers may be null or NaN)."""
    return isinstance(value, (int, float)) and not math.isnan(value)


def fmt_effect(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f}"


def fmt_interval(interval: Mapping[str, Any] | None, signed: bool = True) -> str:
    if not interval:
        return ""
    spec = "+.2f" if signed else ".2f"
    return f"[{format(interval['low'], spec)}, {format(interval['high'], spec)}]"


def fmt_rate(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.0%}"


def fmt_spend(cost: Mapping[str, Any]) -> str:
    """The budget and what each part of the analysis spent of it, when either is known:
    "budget 3000: search 1043, Shapley 1248, repair 176" ("" for a search alone, unbudgeted)."""
    parts = cost.get("live_steps_by_part") or {}
    names = {"search": "search", "shapley": "Shapley", "repair": "repair"}
    extras = any(parts.get(name) for name in ("shapley", "repair"))
    split = (
        ", ".join(f"{names[k]} {v}" for k, v in parts.items() if k in names and v) if extras else ""
    )
    budget = cost.get("budget")
    head = f"budget {budget:g}" if isinstance(budget, (int, float)) else ""
    return f"{head}: {split}" if head and split else head or split


def _message_text(value: Any) -> str | None:
    """``role: text`` for a message list (OTel GenAI ``parts``, or the providers' own
    ``content``: the common LLM step shape), else None."""
    if not (isinstance(value, list) and value and all(isinstance(m, Mapping) for m in value)):
        return None
    if not all("parts" in m or "content" in m or "tool_calls" in m for m in value):
        return None
    out = []
    for message in value:
        role = message.get("role", "?")
        for part in _parts(message):
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind in ("tool_call", "tool_use", "function"):
                call = part.get("function") if isinstance(part.get("function"), Mapping) else part
                args = call.get("arguments", call.get("input"))
                if not isinstance(args, str):
                    args = json.dumps(args, ensure_ascii=False, default=repr)
                out.append(f"{role}: {call.get('name')}({args})")
            elif isinstance(part.get("content"), str):
                out.append(f"{role}: {part['content']}")
            elif isinstance(part.get("text"), str):
                out.append(f"{role}: {part['text']}")
            elif kind == "tool_call_response":
                out.append(f"tool: {part.get('response')}")
    return " | ".join(out) if out else None


def _parts(message: Mapping[str, Any]) -> list[Any]:
    """A message's parts in one shape: OTel ``parts``; a provider's ``content`` (text, or a
    list of blocks) and OpenAI's ``tool_calls``."""
    if "parts" in message:
        return list(message.get("parts") or ())
    content = message.get("content")
    parts: list[Any] = [{"content": content}] if isinstance(content, str) else list(content or ())
    return parts + list(message.get("tool_calls") or ())


def _unwrapped(value: Any) -> Any:
    """A recorded SDK object (an envelope of the instrument path: ``{"__agent_replay__":
    "pydantic", "type", "data"}``) as what a reader looks for: the reply's messages for a
    chat completion or a message, else its data."""
    while isinstance(value, Mapping) and value.get("__agent_replay__") and "data" in value:
        value = value["data"]
    if isinstance(value, Mapping):
        choices = value.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            messages = [c.get("message") for c in choices if isinstance(c, Mapping)]
            if all(isinstance(m, Mapping) for m in messages):
                return messages  # OpenAI chat completion
        if value.get("type") == "message" and isinstance(value.get("content"), list):
            return [value]  # Anthropic message
    return value


# Characters recorded content may hold that would act on whoever shows it instead of being
# shown: C0 and C1 controls (a terminal's escape sequences: colours, cursor moves, window
# titles, "swallow everything until BEL") and the bidirectional formatting characters (an
# unclosed right-to-left override reverses the text after it, the report's own numbers
# included). Tab and line feed are kept.
_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control and bidirectional formatting character written as its
    escape (``\\u001b``, ``\\u202e``): shown, never obeyed, by a terminal or a browser."""
    return _ACTIVE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


#: what ``attribute`` calls the repair in the warning it gives when the budget leaves it out
#: ("the repair search left out: ..."), by which the reports recognise that warning
REPAIR_SEARCH = "the repair search"


def repair_left_out(data: Mapping[str, Any]) -> bool:
    """Whether a repair was asked for and the budget left it out (a warning says so)."""
    prefix = f"{REPAIR_SEARCH} left out"
    return any(str(w).startswith(prefix) for w in data.get("warnings") or ())


def clip(value: Any, width: int = 60) -> str:
    """``value`` on one line (JSON unless it is a string), cut to ``width`` characters."""
    text = value if isinstance(value, str) else json.dumps(plain_json(value), ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def preview(value: Any, width: int = 60) -> str:
    """One-line preview of recorded content (chat messages shown as ``role: text``)."""
    if value is None:
        return "-"
    value = _unwrapped(value)
    messages = _message_text(value)
    if messages is None and isinstance(value, Mapping):
        messages = _message_text(value.get("messages"))
    return clip(value if messages is None else messages, width)


def step_content(data: Mapping[str, Any], index: int) -> Mapping[str, Any] | None:
    """The recorded step ``index`` from the report's ``trajectory`` section, if present."""
    traj = data.get("trajectory") or {}
    steps = traj.get("steps") or []
    return steps[index] if 0 <= index < len(steps) else None


def curve_value(data: Mapping[str, Any], position: int) -> Mapping[str, Any] | None:
    return next((p for p in data.get("curve") or () if p["position"] == position), None)
