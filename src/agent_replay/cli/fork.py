"""``agent-replay fork`` / ``resume`` / ``diff``: branches of a recorded run."""

from __future__ import annotations

from pathlib import Path

import click

from ..model import Trajectory
from ..replay import RolloutLimits, diff, fork, resume
from ..replay.agent import following_counts, unfollowed_warnings
from .common import (
    agent_option,
    db_option,
    echo,
    echo_json,
    friendly_errors,
    json_option,
    limits_options,
    load_entrypoint,
    load_optional,
    open_store,
    parse_json_arg,
    plural,
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
@click.option(
    "--do", "do_text", default=None, help="Force this action (JSON, or a bare word as a string)."
)
@click.option("--remove", is_flag=True, help="Remove the step.")
@click.option(
    "--observe",
    "observe_text",
    default=None,
    help="Mock the observation (JSON, or a bare word as a string).",
)
@click.option("--model", default=None, help="Re-draw from here with this model hint.")
@click.option(
    "--edit", "edit_text", default=None, help="Re-draw the step with these inputs replaced (JSON)."
)
@click.option(
    "--child",
    "child_id",
    default=None,
    help="Session id of the branch (default SESSION-fork-STEP, or -2, -3, ... when taken).",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=int,
    help="Seed of the random streams of the steps the branch re-draws.",
)
@limits_options(branch=True)
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
    edit_text: str | None,
    child_id: str | None,
    seed: int,
    max_rollout_steps: int | None,
    rollout_timeout: float | None,
    as_json: bool,
) -> None:
    """Record a branch: the recorded prefix, one intervention, then a live continuation."""
    given = [do_text, observe_text, model, edit_text]
    if sum(value is not None for value in given) + remove != 1:
        raise click.UsageError(
            "fork needs exactly one of --do, --remove, --observe, --model or --edit"
        )
    verifier = load_optional(verifier_spec, "--verifier")
    kwargs: dict = {}
    if edit_text is not None:
        kwargs["edit"] = parse_json_arg(edit_text, "--edit")
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
        before = following_counts(agent)
        child = fork(
            agent,
            parent,
            at_step,
            session_id=child_id,
            seed=seed,
            verifier=verifier,
            store=store,
            limits=_limits(max_rollout_steps, rollout_timeout),
            **kwargs,
        )
    # re-draws the replay agent of an imported trace could not follow (as attribute warns)
    warnings = unfollowed_warnings(agent, before, runs="the branch does")
    comparison = diff(parent, child)
    if as_json:
        echo_json(
            {
                "child": child.session_id,
                "failed": None if child.outcome is None else child.outcome.failed,
                "stopped": _stopped(child),
                "divergence": child.metadata.get("divergence"),
                "diff": comparison.to_dict(),
                "warnings": warnings,
            }
        )
    else:
        echo(f"forked {session_id} at step {at_step} -> {child.session_id}{_ended(child)}")
        echo(comparison.to_text())
        for warning in warnings:
            echo(f"warning: {warning}", err=True)


def _stopped(child: Trajectory) -> str | None:
    """Which limit stopped the branch (``--max-rollout-steps`` / ``--rollout-timeout``)."""
    error = (child.outcome.error if child.outcome is not None else None) or {}
    if error.get("type") != "RolloutLimitExceeded":
        return None
    return str(error.get("message", "")).removeprefix("rollout stopped: ")


def _limits(steps: int | None, seconds: float | None) -> RolloutLimits | None:
    return None if steps is None and seconds is None else RolloutLimits(steps, seconds)


def _ended(child: Trajectory) -> str:
    """How a branch ended, for its one-line summary: ``, passed`` / ``, failed`` (nothing
    without a verifier), and where it left the recording when it did so before the fork."""
    outcome = child.outcome
    text = (
        ""
        if outcome is None or outcome.failed is None
        else (", failed" if outcome.failed else ", passed")
    )
    stopped = _stopped(child)
    if stopped:
        text += f" (stopped: {stopped})"
    divergence = child.metadata.get("divergence")
    if isinstance(divergence, dict):
        text += (
            f"\nnote: the agent left the recording at step {divergence.get('position')} "
            f"({divergence.get('reason')}): from there the branch ran live"
        )
    return text


@click.command("resume")
@db_option
@session_option
@click.option(
    "--agent",
    "agent_spec",
    required=True,
    metavar="MODULE:FUNCTION",
    help="Your agent: it continues live past the recording's end.",
)
@verifier_option
@click.option("--child", "child_id", default=None, help="Session id of the resumed run.")
@limits_options(branch=True)
@json_option
def resume_command(
    db: Path,
    session_id: str,
    agent_spec: str,
    verifier_spec: str | None,
    child_id: str | None,
    max_rollout_steps: int | None,
    rollout_timeout: float | None,
    as_json: bool,
) -> None:
    """Fast-forward through a recording and continue live past its end (a run whose last
    step failed runs that step again)."""
    agent = load_entrypoint(agent_spec, "--agent")
    verifier = load_optional(verifier_spec, "--verifier")
    with friendly_errors(), open_store(db) as store:
        traj = store.load(session_id)
        resumed = resume(
            agent,
            traj,
            session_id=child_id,
            verifier=verifier,
            store=store,
            limits=_limits(max_rollout_steps, rollout_timeout),
        )
    served = resumed.lineage.fork_step if resumed.lineage else len(traj.steps)
    if as_json:
        echo_json(
            {
                "child": resumed.session_id,
                "fast_forwarded": served,
                "new_steps": len(resumed.steps) - served,
                "failed": None if resumed.outcome is None else resumed.outcome.failed,
                "stopped": _stopped(resumed),
                "divergence": resumed.metadata.get("divergence"),
            }
        )
        return
    echo(
        f"resumed {session_id} -> {resumed.session_id}: {plural(served, 'step')} "
        f"fast-forwarded, {len(resumed.steps) - served} new{_ended(resumed)}"
    )


@click.command("diff")
@db_option
@click.argument("session_a")
@click.argument("session_b")
@json_option
def diff_command(db: Path, session_a: str, session_b: str, as_json: bool) -> None:
    """Compare two sessions step by step; show the first divergence."""
    with friendly_errors(), open_store(db, read_only=True) as store:
        comparison = diff(store.load(session_a), store.load(session_b))
    if as_json:
        echo_json(comparison.to_dict())
    else:
        echo(comparison.to_text())
