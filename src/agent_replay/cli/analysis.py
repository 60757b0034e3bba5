"""``agent-replay aggregate`` and ``agent-replay drift``: analyses beyond one verdict."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..attribution import aggregate_runs, drift
from .common import (
    agent_option,
    check_policy_keys,
    db_option,
    echo,
    echo_json,
    friendly_errors,
    json_option,
    limits_options,
    load_entrypoint,
    load_optional,
    open_store,
    output_path,
    plural,
    policy_keys,
    policy_option,
    required_verifier_option,
    resolve_agent,
    rollout_limits,
    seed_option,
    session_option,
    write_text,
)


@click.command("aggregate")
@db_option
@agent_option
@required_verifier_option
@policy_option
@click.option("--search", default=None, help="Only sessions whose id contains this text.")
@click.option(
    "--include-branches",
    is_flag=True,
    help="Also attribute forks and resumed runs (copies of another session's prefix, which "
    "are not independent runs: left out by default).",
)
@click.option(
    "--rollouts",
    default=None,
    type=click.IntRange(1),
    help="Rollout cap per evaluated position [default: 200; 1600 with --budget].",
)
@click.option(
    "--budget",
    default=None,
    type=click.IntRange(1),
    help="Cap on live step executions per run (each is one LLM or tool call in real life).",
)
@seed_option
@limits_options
@json_option
def aggregate_command(
    db: Path,
    agent_spec: str | None,
    verifier_spec: str,
    policy_specs: tuple[str, ...],
    search: str | None,
    include_branches: bool,
    rollouts: int | None,
    budget: int | None,
    seed: int,
    max_rollout_steps: int | None,
    rollout_timeout: float | None,
    as_json: bool,
) -> None:
    """Attribute every failing session and rank step names by how often they are to blame.

    Forks and resumed runs are left out unless --include-branches: they repeat the prefix of
    the session they branched from, so counting them would count one failure several times."""
    verifier = load_entrypoint(verifier_spec, "--verifier")
    with friendly_errors(), open_store(db, read_only=True) as store:
        listed = store.list_sessions(search=search)
        branches = [s for s in listed if s.parent_session is not None]
        if not include_branches:
            listed = [s for s in listed if s.parent_session is None]
        summaries = [s for s in listed if s.failed is not False]
        passed = len(listed) - len(summaries)
        trajectories = []
        with click.progressbar(summaries, label="loading", file=sys.stderr) as bar:
            for summary in bar:
                trajectories.append(store.load(summary.session_id))
        if not trajectories:
            where = f"whose id contains {search!r} " if search else ""
            but = (
                f" ({plural(len(branches), 'fork or resumed run')} left out: "
                "--include-branches attributes them)"
                if branches and not include_branches
                else ""
            )
            raise click.ClickException(f"no failing sessions {where}in {db}{but}")
        if policy_specs and agent_spec is None:  # a key may match steps of some runs only
            check_policy_keys(trajectories, policy_keys(policy_specs))
        with click.progressbar(
            length=len(trajectories), label="attributing", file=sys.stderr
        ) as bar:

            def agent_for(trajectory):
                bar.update(1)
                return resolve_agent(
                    agent_spec, trajectory, policy_specs, needs_code=True, check_keys=False
                )

            result = aggregate_runs(
                trajectories,
                None,
                verifier,
                agent_for=agent_for,
                rollouts=rollouts,
                budget=budget,
                limits=rollout_limits(trajectories, max_rollout_steps, rollout_timeout),
                seed=seed,
            )
    left_out = 0 if include_branches else len(branches)
    if as_json:
        echo_json({**result.to_dict(), "passed_sessions": passed, "branches_left_out": left_out})
    else:
        echo(result.to_text())
        if passed:
            echo(f"  ({plural(passed, 'session')} that passed when recorded not attributed)")
        if left_out:
            echo(
                f"  ({plural(left_out, 'fork or resumed run')} left out: they repeat another "
                "session's prefix; --include-branches attributes them)"
            )


@click.command("drift")
@db_option
@session_option
@agent_option
@required_verifier_option
@policy_option
@click.option(
    "--state-scorer",
    "scorer_spec",
    default=None,
    metavar="MODULE:FUNCTION",
    help="Health of a step in [0, 1], for the silent-decay check.",
)
@click.option(
    "--rollouts",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="Rollouts per prefix position.",
)
@click.option(
    "--out",
    "out_path",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the drift curve as a standalone HTML file.",
)
@limits_options
@json_option
def drift_command(
    db: Path,
    session_id: str,
    agent_spec: str | None,
    verifier_spec: str,
    policy_specs: tuple[str, ...],
    scorer_spec: str | None,
    rollouts: int,
    out_path: Path | None,
    max_rollout_steps: int | None,
    rollout_timeout: float | None,
    as_json: bool,
) -> None:
    """How open the run's fate was at each step, and where it sealed."""
    verifier = load_entrypoint(verifier_spec, "--verifier")
    scorer = load_optional(scorer_spec, "--state-scorer")
    to_stdout = out_path is not None and str(out_path) == "-"  # the page on stdout
    if to_stdout and as_json:
        raise click.UsageError("--out - and --json would both print to standard output")
    if out_path is not None and not to_stdout:
        output_path(out_path, "--out")
    with friendly_errors(), open_store(db, read_only=True) as store:
        trajectory = store.load(session_id)
        agent = resolve_agent(agent_spec, trajectory, policy_specs, needs_code=True)
        limits = rollout_limits([trajectory], max_rollout_steps, rollout_timeout)
        result = drift(trajectory, agent, verifier, rollouts, state_scorer=scorer, limits=limits)
    if to_stdout:
        echo(result.render_html(), nl=False)
        return
    if out_path:
        write_text(out_path, result.render_html())
    if as_json:
        echo_json(result.to_dict())
        return
    echo(
        f"drift of {session_id} ({result.rollouts} rollouts, {result.live_steps} live "
        "step executions)"
    )
    if result.stopped:
        echo(
            f"{result.stopped} rollouts ran into their limits and were stopped; they count as "
            "failures (see docs/attribution.md, Rollout limits)"
        )
    echo(f"{'position':>8}  {'F(p)':>6}  {'entropy':>7}")
    for position, (rate, bits) in enumerate(zip(result.failure_rates, result.entropy, strict=True)):
        echo(f"{position:>8}  {rate:>6.2f}  {bits:>7.2f}  " + "#" * round(bits * 20))
    echo(f"fate sealed: {result.fate}")
    for warning in result.warnings:
        echo(f"warning: {warning}")
    if result.health is not None:
        echo(
            "silent decay: "
            + (f"yes, from step {result.decay_step}" if result.silent_decay else "no")
        )
    if out_path:
        echo(f"wrote {out_path}")
