"""Who&When (failure-attribution benchmark, arXiv 2505.00212): one failed multi-agent run per
file, labelled with the agent and the step responsible for the failure.

Every entry of ``history`` becomes exactly one step, so step ``i`` is ``history[i]`` and the
label's ``mistake_step`` (a string holding a 0-based index into ``history``) is a step index.
The acting agent is the ``name`` field (Algorithm-Generated; its ``role`` is only
assistant/user) or the ``role`` with its parenthetical removed (Hand-Crafted:
``Orchestrator (thought)`` and ``Orchestrator (-> WebSurfer)`` are both ``Orchestrator``, and
the addressee is kept in ``attributes["to"]``). Agents' utterances are llm steps; the code
executor's output (``Computer_terminal``) is a tool step; the human's message is a context
step that replay must not resample. Each step's action is the message in the OTel parts shape
and its inputs are the turn number plus the agent's system prompt when the file has one (the
conversation so far is the earlier steps' actions). The run failed; the label, the question,
the ground truth and the subset go to ``metadata["whowhen"]``, with the label agent spelled as
it is in the run (two files write ``Websurfer``).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from ..model import Outcome, StepDraft, StepKind, Trajectory
from ._common import Reject, trajectory_from_drafts

__all__ = ["agent_of", "is_whowhen", "read_whowhen"]

SOURCE = "import:whowhen"
_TOOL_AGENTS = frozenset({"computer_terminal", "computerterminal"})
_HUMAN = frozenset({"human", "user"})


def is_whowhen(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("history"), list)
        and ("mistake_agent" in doc or "mistake_step" in doc or "question" in doc)
    )


def agent_of(entry: dict) -> tuple[str, str | None, str | None]:
    """``(agent, phase, addressee)`` of a history entry: ``Orchestrator (-> WebSurfer)`` →
    ``("Orchestrator", "-> WebSurfer", "WebSurfer")``."""
    name = entry.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip(), None, None
    role = str(entry.get("role") or "unknown").strip()
    # "Agent (phase)", neither part across lines: split at the first "(" after the last line
    # break of a role ending in ")" (by hand: a regular expression for it backtracked
    # quadratically on long roles)
    start = role.find("(", role.rfind("\n", 0, len(role) - 1) + 1)
    agent = role[: max(start, 0)].rstrip()
    if start < 0 or not role.endswith(")") or "\n" in agent:
        return role, None, None
    agent, phase = agent.strip(), role[start + 1 : -1].strip()
    addressee = phase[2:].strip() if phase.startswith("->") else None
    return agent or role, phase, addressee


def _subset(source: str, doc: dict) -> str:
    parts = PurePath(source).parts
    for part in parts:
        if part.lower() in ("algorithm-generated", "hand-crafted"):
            return part
    return "Algorithm-Generated" if "system_prompt" in doc else "Hand-Crafted"


def read_whowhen(doc: Any, source: str = "whowhen") -> list[Trajectory]:
    """The trajectory of one parsed Who&When file. Raises :class:`Reject` on a wrong shape."""
    if not is_whowhen(doc):
        raise Reject("not a Who&When file (expected history and mistake labels)")
    prompts = doc.get("system_prompt") if isinstance(doc.get("system_prompt"), dict) else {}
    drafts: list[StepDraft] = []
    agents: dict[str, str] = {}
    for i, entry in enumerate(doc["history"]):
        if not isinstance(entry, dict):
            raise Reject("history entry must be an object", f"history[{i}]")
        agent, phase, addressee = agent_of(entry)
        agents.setdefault(agent.lower(), agent)
        content = entry.get("content")
        text = content if isinstance(content, str) else ("" if content is None else str(content))
        lowered = agent.lower()
        if lowered in _HUMAN:
            kind, role = StepKind.SPAN, "user"
        elif lowered in _TOOL_AGENTS:
            kind, role = StepKind.TOOL, "tool"
        else:
            kind, role = StepKind.LLM, "assistant"
        inputs: dict[str, Any] = {"turn": i}
        prompt = prompts.get(agent)
        if isinstance(prompt, str):
            inputs["system"] = [{"type": "text", "content": prompt}]
        attributes: dict[str, Any] = {"speaker": entry.get("role")}
        if phase is not None:
            attributes["phase"] = phase
        if addressee is not None:
            attributes["to"] = addressee
        drafts.append(
            StepDraft(
                kind=kind,
                name=agent,
                inputs=inputs,
                action=[
                    {"role": role, "parts": [{"type": "text", "content": text}], "name": agent}
                ],
                agent=agent,
                resamplable=kind is StepKind.LLM,
                attributes={k: v for k, v in attributes.items() if v is not None},
            )
        )
    label_agent = doc.get("mistake_agent")
    step_label = doc.get("mistake_step")
    try:
        mistake_step = int(str(step_label).strip())
    except ValueError:
        mistake_step = None
    subset = _subset(source, doc)
    stem = PurePath(source).stem
    info = {
        k: v
        for k, v in {
            "subset": subset,
            "file": stem,
            "question_id": doc.get("question_ID"),
            "level": doc.get("level"),
            "ground_truth": doc.get("ground_truth"),
            "mistake_agent": (
                agents.get(str(label_agent).lower(), label_agent) if label_agent else None
            ),
            "mistake_agent_label": label_agent,
            "mistake_step": mistake_step,
            "mistake_reason": doc.get("mistake_reason"),
            "labels": doc.get("labels"),
        }.items()
        if v is not None
    }
    session_id = f"whowhen:{subset.lower()}:{stem}"
    return [
        trajectory_from_drafts(
            session_id,
            drafts,
            source=SOURCE,
            task=doc.get("question"),
            outcome=Outcome(failed=True, score=0.0, result=None),
            metadata={"whowhen": info},
            notes=[
                "Who&When logs hold only what the agents said (no prompts sent, tool I/O or "
                "environment state): replaying a step needs a surrogate policy"
            ],
        )
    ]
