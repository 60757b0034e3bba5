"""Import a Langfuse trace export and attribute it with a resample policy.

The trace (`examples/data/`, a real Langfuse export; or pass your own export's path) is an agent
built on Microsoft's agent framework: the model asks a weather tool, then answers. Langfuse
scored it as a hallucination. There is no agent code to re-run, so each step gets a resample
policy: the model's tool call is re-issued as recorded, the weather tool is re-drawn from a
simulated service, and the final answer is re-drawn by a policy that summarises what the tool
said (in real use: `OpenAIChatPolicy` against your model endpoint). Then: which step made it
fail?

Run: python examples/langfuse_import.py [EXPORT.json]   (writes langfuse-report.html/json)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agent_replay import (
    HoldPolicy,
    ImportFormatError,
    ScriptedPolicy,
    attribute,
    replayable_agent,
)
from agent_replay.ingest import load

SAMPLE = "microsoft-agent-2025-10-14.json"


def default_export() -> Path:
    """The sample export shipped beside this example (see data/SOURCES.txt)."""
    return Path(__file__).resolve().parent / "data" / SAMPLE


TRUTH = "sunny"  # what the weather station actually reported that day


def weather_service(request: Any) -> str:
    """The weather tool, re-drawn: a flaky upstream that serves a stale report 20% of the time."""
    condition = "stormy" if request.rng.random() < 0.2 else TRUTH
    return f"The weather in Portland is {condition} with a high of 19°C."


def summarise(request: Any) -> list[dict[str, Any]]:
    """The final answer, re-drawn: repeats what the tool said (its inputs follow upstream)."""
    said = [
        part.get("response")
        for message in request.inputs.get("messages", [])
        for part in message.get("parts", [])
        if isinstance(part, dict) and part.get("type") == "tool_call_response"
    ]
    text = str(said[-1]) if said else "I could not get the weather."
    return [{"role": "assistant", "parts": [{"type": "text", "content": f"Currently: {text}"}]}]


def accurate(result: dict[str, Any]) -> float:
    return 1.0 if TRUTH in json.dumps(result["final"]) else 0.0


def main(path: Path) -> int:
    try:
        (run,) = load(path)
    except (OSError, ImportFormatError) as exc:
        raise SystemExit(f"cannot import {path}: {exc}") from None
    print(
        f"imported {run.session_id} from {path.name}: "
        + ", ".join(f"{s.index} {s.label}" for s in run.steps)
    )
    agent = replayable_agent(
        run,
        {
            "get_weather": ScriptedPolicy(weather_service),
            # step 0 re-issues its recorded tool call (HoldPolicy's behaviour); step 2 is
            # re-drawn by the summariser
            "llm": ScriptedPolicy({0: HoldPolicy().resample, 2: summarise}),
        },
    )
    result = attribute(run, agent, accurate, repair=True)
    print(result.to_text(run))
    explanation = result.explain(run)
    print()
    print(explanation.to_text())
    result.to_json("langfuse-report.json", explanation=explanation)
    result.to_html("langfuse-report.html", run, explanation)
    return 0 if result.culprit_index == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else default_export()))
