"""``agent-replay replay``: deterministic replay of a stored session."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..replay import ReplayPlan, replay
from .common import (
    agent_option,
    db_option,
    echo,
    echo_json,
    friendly_errors,
    json_option,
    load_optional,
    open_store,
    outcome_word,
    policy_option,
    resolve_agent,
    session_option,
    verifier_option,
)


@click.command("replay")
@db_option
@session_option
@agent_option
@verifier_option
@policy_option
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=int,
    help="Seed of the random streams of the steps the replay re-draws.",
)
@click.option("--strict", is_flag=True, help="Fail (exit 1) on any divergence.")
@json_option
def replay_command(
    db: Path,
    session_id: str,
    agent_spec: str | None,
    verifier_spec: str | None,
    policy_specs: tuple[str, ...],
    seed: int,
    strict: bool,
    as_json: bool,
) -> None:
    """Replay a session with every step held: does the recording reproduce its outcome?"""
    verifier = load_optional(verifier_spec, "--verifier")
    with friendly_errors(), open_store(db) as store:
        traj = store.load(session_id)
        agent = resolve_agent(agent_spec, traj, policy_specs)
        result = replay(
            agent, traj, ReplayPlan.factual(), seed=seed, verifier=verifier, strict=strict
        )
    # a replay that left the recording does not reproduce it, whatever its outcome (an agent
    # that raises before its first step "fails" as the recording did)
    reproduced = (
        False
        if result.diverged
        else result.outcome.failed == traj.outcome.failed
        if traj.outcome is not None and result.outcome.failed is not None
        else None
    )
    if as_json:
        echo_json(
            {**result.to_record(), "reproduced": reproduced, "served_steps": result.served_steps}
        )
    else:
        echo(f"replayed {session_id}: {result.served_steps} steps served, {result.live_steps} live")
        if result.diverged:
            d = result.divergence
            echo(
                f"DIVERGED at step {d.position}: {d.reason}\n  live: {d.live}\n"
                f"  recorded: {d.recorded}"
            )
        echo(
            f"outcome: {outcome_word(result.outcome.failed)}"
            + (
                ""
                if reproduced is None
                else f" ({'reproduces' if reproduced else 'does NOT reproduce'} the recording"
                + (": the replay left it" if result.diverged else "")
                + ")"
            )
        )
        if result.exception:
            echo(f"agent raised {result.exception['type']}: {result.exception['message']}")
    if strict and result.diverged:
        sys.exit(1)
