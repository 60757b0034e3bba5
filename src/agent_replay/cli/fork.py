"""``agent-replay fork`` / ``resume`` / ``diff``: branches of a recorded run."""

from __future__ import annotations

from pathlib import Path

import click

from ..replay import diff, fork, resume
from .common import (
    agent_option,
    db_option,
    echo_json,
    friendly_errors,
    json_option,
    load_entrypoint,
    load_optional,
    open_store,
    parse_json_arg,
    policy_option,
    resolve_agent,
    session_option,
    verifier_option,
)


@click.command("fork")
@db_option
@session_option
@agent_option
@verifier_option
@policy_option
@click.option("--at-step", required=True, type=int, help="The step to intervene on.")
@click.option("--do", "do_text", default=None, help="Force this action (JSON).")
@click.option("--remove", is_flag=True, help="Remove the step.")
@click.option("--observe", "observe_text", default=None, help="Mock the observation (JSON).")
@click.option("--model", default=None, help="Re-draw from here with this model hint.")
@click.option("--child", "child_id", default=None, help="Session id of the branch.")
@click.option("--seed", default=0, show_default=True, type=int)
@json_option
def fork_command(
    db: Path,
    session_id: str,
    agent_spec: str | None,
    verifier_spec: str | None,
    policy_specs: tuple[str, ...],
    at_step: int,
    do_text: str | None,
    remove: bool,
    observe_text: str | None,
    model: str | None,
    child_id: str | None,
    seed: int,
    as_json: bool,
) -> None:
    """Record a branch: the recorded prefix, one intervention, then a live continuation."""
    verifier = load_optional(verifier_spec, "--verifier")
    kwargs: dict = {}
    if do_text is not None:
        kwargs["do"] = parse_json_arg(do_text, "--do")
    if observe_text is not None:
        kwargs["observe"] = parse_json_arg(observe_text, "--observe")
    if remove:
        kwargs["remove"] = True
    if model is not None:
        kwargs["model"] = model
    with friendly_errors(), open_store(db) as store:
        parent = store.load(session_id)
        agent = resolve_agent(agent_spec, parent, policy_specs)
        child = fork(
            agent,
            parent,
            at_step,
            session_id=child_id,
            seed=seed,
            verifier=verifier,
            store=store,
            **kwargs,
        )
    comparison = diff(parent, child)
    if as_json:
        echo_json({"child": child.session_id, "diff": comparison.to_dict()})
    else:
        click.echo(f"forked {session_id} at step {at_step} -> {child.session_id}")
        click.echo(comparison.to_text())


@click.command("resume")
@db_option
@session_option
@agent_option
@verifier_option
@click.option("--child", "child_id", default=None, help="Session id of the resumed run.")
def resume_command(
    db: Path,
    session_id: str,
    agent_spec: str | None,
    verifier_spec: str | None,
    child_id: str | None,
) -> None:
    """Fast-forward through a recording and continue live past its end."""
    if agent_spec is None:
        raise click.UsageError("resume needs --agent: it continues your agent live")
    agent = load_entrypoint(agent_spec, "--agent")
    verifier = load_optional(verifier_spec, "--verifier")
    with friendly_errors(), open_store(db) as store:
        traj = store.load(session_id)
        resumed = resume(agent, traj, session_id=child_id, verifier=verifier, store=store)
    click.echo(
        f"resumed {session_id} -> {resumed.session_id}: {len(traj.steps)} steps "
        f"fast-forwarded, {len(resumed.steps) - len(traj.steps)} new"
    )


@click.command("diff")
@db_option
@click.argument("session_a")
@click.argument("session_b")
@json_option
def diff_command(db: Path, session_a: str, session_b: str, as_json: bool) -> None:
    """Compare two sessions step by step; show the first divergence."""
    with friendly_errors(), open_store(db) as store:
        comparison = diff(store.load(session_a), store.load(session_b))
    if as_json:
        echo_json(comparison.to_dict())
    else:
        click.echo(comparison.to_text())
