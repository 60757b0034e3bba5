"""A refund-desk agent with a planted failure.

The agent answers a refund request for an order placed 20 days ago. Step 2 (``choose_policy``)
picks the current 30-day refund policy most of the time but sometimes the outdated 14-day one;
with the outdated policy the draft denies a refund the customer is owed. A reviewer catches the
mistake now and then. Every other step has harmless randomness. The verifier passes a run that
approves the refund.

All randomness flows through ``ctx.rng`` so every run is replayable; ``send_reply`` is declared
side-effecting, so no replay ever sends a second email.
"""

from __future__ import annotations

from typing import Any

POLICIES = {
    "refund_policy_2026": {"window_days": 30, "text": "Refunds within 30 days of purchase."},
    "refund_policy_2019": {"window_days": 14, "text": "Refunds within 14 days of purchase."},
}
ORDERS = {"A-1042": {"item": "headphones", "days_since_purchase": 20, "amount": 89.0}}


def support_agent(ctx: Any, ticket: str, order_id: str) -> dict[str, Any]:
    with ctx.agent("triage"):
        category = ctx.llm(
            "classify",
            produce=lambda: ctx.rng.choice(["refund", "refund", "refund", "billing"]),
            ticket=ticket,
        )
        order = ctx.tool("lookup_order", produce=lambda: dict(ORDERS[order_id]), order_id=order_id)
    with ctx.agent("policy"):
        policy_name = ctx.llm(
            "choose_policy",
            produce=lambda: (
                "refund_policy_2026" if ctx.rng.random() < 0.75 else "refund_policy_2019"
            ),
            category=category,
            item=order["item"],
        )
        policy = ctx.tool(
            "fetch_policy", produce=lambda: dict(POLICIES[policy_name]), policy=policy_name
        )
    with ctx.agent("writer"):
        approve = order["days_since_purchase"] <= policy["window_days"]
        tone = ctx.rng.choice(["warm", "formal", "brief"])
        draft = ctx.llm(
            "draft_reply",
            produce=lambda: {"decision": "approve" if approve else "deny", "tone": tone},
            policy=policy["text"],
            days=order["days_since_purchase"],
        )
        reviewed = ctx.llm(
            "review",
            produce=lambda: (
                {**draft, "decision": "approve", "reviewed": "policy corrected"}
                if draft["decision"] == "deny" and ctx.rng.random() < 0.15
                else {**draft, "reviewed": "ok"}
            ),
            draft=draft,
        )
        receipt = ctx.tool(
            "send_reply",
            produce=lambda: {"sent": True, "id": ctx.uuid()},
            reply=reviewed,
            side_effects=True,
        )
    return {"decision": reviewed["decision"], "receipt": receipt}


def refund_approved(result: dict[str, Any]) -> float:
    """1.0 when the customer, who is owed a refund, gets one."""
    return 1.0 if result.get("decision") == "approve" else 0.0


DEMO_SEED = 1  # a seed whose recorded run fails (outdated policy chosen, not caught)
DEMO_TASK = {"ticket": "My headphones stopped working, can I get a refund?", "order_id": "A-1042"}
