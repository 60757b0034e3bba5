"""Quickstart: record a native agent, find the step that made it fail, write the report.

Run: python examples/quickstart.py   (writes quickstart.sqlite, quickstart-report.html/json)
"""

from __future__ import annotations

import random
from typing import Any

from agent_replay import Session
from agent_replay.attribution import attribute

TASK = {"question": "What is 17 * 23?"}


def math_agent(ctx: Any, question: str) -> dict[str, Any]:
    """Three steps: a harmless rephrasing, a tool choice that is sometimes wrong, the answer."""
    ctx.llm("rephrase", produce=lambda: ctx.rng.choice(["17 times 23", "17 * 23"]), q=question)
    tool = ctx.llm(
        "choose_tool",
        produce=lambda: "calculator" if ctx.rng.random() < 0.8 else "mental_math",
        q=question,
    )
    value = ctx.tool(
        tool,
        produce=lambda: 391 if tool == "calculator" else 381,  # mental math slips
        expression="17 * 23",
    )
    answer = ctx.llm("answer", produce=lambda: f"The answer is {value}.", value=value)
    return {"answer": answer}


def is_correct(result: dict[str, Any]) -> float:
    return 1.0 if "391" in result["answer"] else 0.0


def main() -> int:
    with Session("quickstart.sqlite") as session:
        # find a run that failed (in production you would pick one from your store)
        for seed in range(100):
            run = session.record(
                math_agent,
                TASK,
                seed=seed,
                verifier=is_correct,
                session_id=f"quickstart-{seed}-{random.getrandbits(32):08x}",
            )
            if run.failed:
                break
        print(f"recorded failing run {run.session_id} ({len(run.steps)} steps)")
        result = attribute(run, math_agent, is_correct, repair=True)
    print(result.to_text(run))
    explanation = result.explain(run)
    print()
    print(explanation.to_text())
    result.to_json("quickstart-report.json", explanation=explanation)
    result.to_html("quickstart-report.html", run, explanation)
    print("\nwrote quickstart-report.html and quickstart-report.json")
    return 0 if result.culprit_index == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
