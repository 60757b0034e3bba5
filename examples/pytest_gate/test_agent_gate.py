"""A CI gate for an agent: run it many times and fail the build if it fails too often.

`assert_agent_passes` comes with agent-replay (a pytest plugin). On failure the message names
the step that made the agent fail, why, and a validated fix, and the HTML report is written
where you ask. Run: pytest examples/pytest_gate
"""

from __future__ import annotations

from typing import Any

from agent_replay.pytest_plugin import assert_agent_passes


def triage_agent(ctx: Any, ticket: str) -> dict[str, Any]:
    """Routes a ticket; the routing step is reliable (it only varies its wording)."""
    wording = ctx.llm("summarise", produce=lambda: ctx.rng.choice(["short", "detailed"]), t=ticket)
    queue = ctx.llm(
        "route", produce=lambda: "billing" if "invoice" in ticket else "support", t=ticket
    )
    return {"queue": queue, "summary": wording}


def routed_to_billing(result: dict[str, Any]) -> float:
    return 1.0 if result["queue"] == "billing" else 0.0


def test_triage_agent_routes_invoices(tmp_path):
    gate = assert_agent_passes(
        triage_agent,
        {"ticket": "my invoice is wrong"},
        routed_to_billing,
        p_fail_max=0.05,
        report_path=tmp_path / "triage-report.html",
    )
    assert gate.passed and gate.failures == 0
