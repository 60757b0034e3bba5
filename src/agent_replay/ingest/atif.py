"""ATIF, Harbor's Agent Trajectory Interchange Format (``schema_version: "ATIF-v1.x"``).

Each ``agent`` step is one llm step: its inputs are the conversation up to it (system and user
steps, earlier agent messages and tool results, all as OTel parts messages) plus the model and
the agent's tool definitions; its action is the assistant message (text, ``reasoning_content``
as a reasoning part, and one ``tool_call`` part per tool call). Each tool call becomes a tool
step right after it whose result is the observation with the matching ``source_call_id``;
observation results that answer no call become an ``observation`` tool step. User and system
steps are context, not steps (the first user message is the trajectory's task).
``subagent_trajectories`` are imported as trajectories of their own.
"""

from __future__ import annotations

from typing import Any

from ..mapping.messages import normalize_parts, normalize_tools
from ..model import StepDraft, StepKind, Trajectory
from ._common import Reject, read_documents, timestamp_ns, trajectory_from_drafts

__all__ = ["is_atif", "read_atif"]

SOURCE = "import:atif"


def is_atif(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    version = doc.get("schema_version")
    if isinstance(version, str) and version.upper().startswith("ATIF"):
        return True
    return isinstance(doc.get("steps"), list) and "session_id" in doc and "agent" in doc


def _message_parts(message: Any) -> list[dict[str, Any]]:
    if isinstance(message, list):
        parts = []
        for item in message:
            if isinstance(item, dict) and item.get("type") == "image":
                source = item.get("source") if isinstance(item.get("source"), dict) else {}
                parts.append(
                    {
                        "type": "uri",
                        "modality": "image",
                        "uri": source.get("path"),
                        "mime_type": source.get("media_type"),
                    }
                )
            else:
                parts.extend(normalize_parts(item))
        return parts
    return normalize_parts(message)


def _content(result: dict) -> Any:
    """What an observation result gave: its content, else the subagent run it points to (a
    spawned subagent's result is its trajectory, imported as a session of its own)."""
    if result.get("content") is None and result.get("subagent_trajectory_ref") is not None:
        return {"subagent_trajectory_ref": result["subagent_trajectory_ref"]}
    return result.get("content")


def _results(step: dict) -> list[dict]:
    observation = step.get("observation")
    if not isinstance(observation, dict) or not isinstance(observation.get("results"), list):
        return []
    return [r for r in observation["results"] if isinstance(r, dict)]


def _one(doc: dict, position: str) -> list[Trajectory]:
    steps = doc.get("steps")
    if not isinstance(steps, list):
        raise Reject("steps must be a list", f"{position}steps")
    agent_info = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
    agent = agent_info.get("name")
    agent = str(agent) if agent else None
    tools = normalize_tools(agent_info.get("tool_definitions"))
    session_id = str(doc.get("trajectory_id") or doc.get("session_id") or "atif")
    history: list[dict[str, Any]] = []
    drafts: list[StepDraft] = []
    task = None
    for i, step in enumerate(steps):
        where = f"{position}steps[{i}]"
        if not isinstance(step, dict):
            raise Reject("step must be an object", where)
        source = str(step.get("source") or "agent").lower()
        parts = _message_parts(step.get("message"))
        when = timestamp_ns(step.get("timestamp"))
        if source in ("user", "system"):
            if source == "user" and task is None:
                task = step.get("message")
            history.append({"role": source, "parts": parts})
            continue
        reasoning = step.get("reasoning_content")
        action_parts = list(parts)
        if reasoning:
            action_parts.insert(0, {"type": "reasoning", "content": reasoning})
        calls = step.get("tool_calls") if isinstance(step.get("tool_calls"), list) else []
        for call in calls:
            if not isinstance(call, dict):
                raise Reject("tool call must be an object", where)
            part: dict[str, Any] = {
                "type": "tool_call",
                "name": str(call.get("function_name") or ""),
                "arguments": call.get("arguments"),
            }
            if call.get("tool_call_id") is not None:
                part["id"] = str(call["tool_call_id"])
            action_parts.append(part)
        model = step.get("model_name") or agent_info.get("model_name")
        inputs: dict[str, Any] = {"messages": list(history)}
        if tools:
            inputs["tools"] = tools
        if isinstance(model, str) and model:
            inputs["model"] = model
        action = [{"role": "assistant", "parts": action_parts}]
        attributes: dict[str, Any] = {"atif_step_id": step.get("step_id")}
        metrics = step.get("metrics") if isinstance(step.get("metrics"), dict) else {}
        for key, attr in (
            ("prompt_tokens", "input_tokens"),
            ("completion_tokens", "output_tokens"),
            ("cached_tokens", "cached_tokens"),
            ("cost_usd", "cost_usd"),
        ):
            if metrics.get(key) is not None:
                attributes[attr] = metrics[key]
        if model:
            attributes["model"] = model
        llm_index = len(drafts)
        drafts.append(
            StepDraft(
                kind=StepKind.LLM,
                name=str(model or "llm"),
                inputs=inputs,
                action=action,
                agent=agent,
                started_ns=when,
                ended_ns=when,
                attributes={k: v for k, v in attributes.items() if v is not None},
            )
        )
        history.append({"role": "assistant", "parts": action_parts})
        results = _results(step)
        by_call = {str(r.get("source_call_id")): r for r in results if r.get("source_call_id")}
        responses = []
        for call in calls:
            cid = call.get("tool_call_id")
            result = by_call.pop(str(cid), None) if cid is not None else None
            tool_attributes: dict[str, Any] = {"requested_by": llm_index}
            if cid is not None:
                tool_attributes["tool_call_id"] = str(cid)
            drafts.append(
                StepDraft(
                    kind=StepKind.TOOL,
                    name=str(call.get("function_name") or "tool"),
                    inputs={"arguments": call.get("arguments")},
                    action=None if result is None else _content(result),
                    agent=agent,
                    started_ns=when,
                    ended_ns=when,
                    attributes=tool_attributes,
                )
            )
            if result is not None:
                response = {"type": "tool_call_response", "response": _content(result)}
                if cid is not None:
                    response["id"] = str(cid)
                responses.append(response)
        for result in [r for r in results if not r.get("source_call_id")] + list(by_call.values()):
            drafts.append(
                StepDraft(
                    kind=StepKind.TOOL,
                    name="observation",
                    inputs=None,
                    action=_content(result),
                    agent=agent,
                    started_ns=when,
                    ended_ns=when,
                    attributes={"requested_by": llm_index},
                )
            )
            responses.append({"type": "tool_call_response", "response": _content(result)})
        if responses:
            history.append({"role": "tool", "parts": responses})
    metadata: dict[str, Any] = {
        "atif": {
            k: v
            for k, v in {
                "schema_version": doc.get("schema_version"),
                "session_id": doc.get("session_id"),
                "agent": agent_info or None,
                "final_metrics": doc.get("final_metrics"),
                "notes": doc.get("notes"),
            }.items()
            if v is not None
        }
    }
    out = [trajectory_from_drafts(session_id, drafts, source=SOURCE, task=task, metadata=metadata)]
    for j, sub in enumerate(doc.get("subagent_trajectories") or ()):
        if isinstance(sub, dict) and is_atif(sub):
            out.extend(_one(sub, f"{position}subagent_trajectories[{j}]."))
    return out


def read_atif(doc: Any) -> list[Trajectory]:
    """Trajectories of a parsed ATIF document (or a list of them). Raises :class:`Reject`."""
    return read_documents(doc, is_atif, _one, "an ATIF trajectory", "schema_version ATIF-v1.x")
