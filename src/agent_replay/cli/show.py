"""``agent-replay show``: one session as a readable step table."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from ..model import Trajectory
from ..report._data import clip
from .common import (
    db_option,
    echo,
    echo_json,
    friendly_errors,
    json_option,
    one_line,
    open_store,
    outcome_word,
    plural,
    short,
)


def trajectory_json(traj: Trajectory) -> dict:
    return {
        "session_id": traj.session_id,
        "head_hash": traj.head_hash,
        "digest": traj.digest,
        "task": traj.task,
        "seed": traj.seed,
        "outcome": None if traj.outcome is None else traj.outcome.to_dict(),
        "lineage": None if traj.lineage is None else traj.lineage.to_dict(),
        "metadata": dict(traj.metadata),
        "steps": [
            {
                "index": s.index,
                "kind": s.kind.value,
                "name": s.name,
                "agent": s.agent,
                "inputs": s.inputs,
                "action": s.action,
                "observation": s.observation if s.observed else None,
                "error": s.error,
                "resamplable": s.resamplable,
                "side_effects": s.side_effects,
                "attributes": dict(s.attributes),
                "step_hash": s.step_hash,
                "span_id": s.span_id,
                "trace_id": s.trace_id,
            }
            for s in traj.steps
        ],
    }


def render_table(traj: Trajectory, width: int | None = None) -> str:
    """The session as a step table; ``width`` of the inputs and output columns (default: what
    fits the terminal, ``COLUMNS`` when not a terminal, else 48)."""
    if width is None:
        columns = shutil.get_terminal_size((150, 24)).columns
        width = max(12, min(48, (columns - 50) // 2))  # a row is 50 + 2 * width
    lines = [
        f"session {one_line(traj.session_id)}  ({plural(len(traj.steps), 'step')}, "
        f"source {one_line(traj.source)})"
    ]
    if traj.outcome is not None:
        o = traj.outcome
        score = "" if o.score is None else f" score {o.score:.3f}"
        lines.append(
            f"outcome {outcome_word(o.failed)}{score}"
            + (f"  error {o.error['type']}" if o.error else "")
        )
        if o.error and o.error.get("message"):  # what went wrong, not only its type
            lines.append(f"  {clip(' '.join(str(o.error['message']).split()), 300)}")
    if traj.lineage is not None:
        lines.append(f"forked from {traj.lineage.parent_session} at step {traj.lineage.fork_step}")
    lines.append(f"head {traj.head_hash}")
    lines.append("")
    if not traj.steps:
        lines.append("(no steps)")
        return "\n".join(lines)
    lines.append(f"{'#':>3}  {'step':<28} {'agent':<14} {'inputs':<{width}} output")
    for s in traj.steps:
        flags = ("!" if s.side_effects else "") + ("x" if s.error else "")
        label = clip(s.label + (f" [{flags}]" if flags else ""), 28)
        out = (
            f"{s.error['type']}: {s.error.get('message', '')}"
            if s.error
            else short(s.output, width)
        )
        lines.append(
            f"{s.index:>3}  {label:<28} {clip(s.agent or '-', 14):<14} "
            f"{short(s.inputs, width):<{width}} {out}"
        )
    return "\n".join(lines)


@click.command("show")
@db_option
@click.option("--session", "session_id", required=True, help="Session id (see `sessions`).")
@json_option
def show_command(db: Path, session_id: str, as_json: bool) -> None:
    """Show one session's steps (verified on load)."""
    with friendly_errors(), open_store(db, read_only=True) as store:
        traj = store.load(session_id)
    if as_json:
        echo_json(trajectory_json(traj))
    else:
        echo(render_table(traj))
