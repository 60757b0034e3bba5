"""``agent-replay record``: run your agent once and store the trajectory."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import StoreError
from ..session import Session
from .common import (
    db_option,
    echo,
    echo_json,
    friendly_errors,
    json_option,
    load_entrypoint,
    load_optional,
    parse_json_arg,
    verifier_option,
)
from .show import render_table, trajectory_json


@click.command("record")
@db_option
@click.option(
    "--agent",
    "agent_spec",
    required=True,
    metavar="MODULE:FUNCTION",
    help="Your agent: agent(ctx, **task) for a JSON object task, agent(ctx, task) otherwise.",
)
@verifier_option
@click.option(
    "--task",
    "task_text",
    default=None,
    help="The task as JSON, @file.json, or a bare word (taken as a string).",
)
@click.option("--session", "session_id", default=None, help="Session id (default: random).")
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed of the run's random streams."
)
@json_option
def record_command(
    db: Path,
    agent_spec: str,
    verifier_spec: str | None,
    task_text: str | None,
    session_id: str | None,
    seed: int,
    as_json: bool,
) -> None:
    """Record one live run of your agent into the store."""
    agent = load_entrypoint(agent_spec, "--agent")
    verifier = load_optional(verifier_spec, "--verifier")
    task = parse_json_arg(task_text, "--task")
    with friendly_errors(), Session(db) as session:
        if session_id is not None and session_id in session.store:
            # refused before the agent runs: a live run (model calls, side effects) that
            # could not be stored afterwards would be lost
            raise StoreError(
                f"session {session_id!r} already exists in {db}; choose another session id "
                "(nothing was run)"
            )
        traj = session.record(agent, task, session_id=session_id, seed=seed, verifier=verifier)
    if as_json:
        echo_json(trajectory_json(traj))
    else:
        echo(render_table(traj))
