"""``agent-replay sessions``: list what a store holds."""

from __future__ import annotations

from pathlib import Path

import click

from .common import db_option, echo, echo_json, friendly_errors, json_option, one_line, open_store


@click.command("sessions")
@db_option
@json_option
@click.option("--search", default=None, help="Only sessions whose id contains this text.")
def sessions_command(db: Path, as_json: bool, search: str | None) -> None:
    """List the sessions in a store (id, steps, outcome, source, lineage)."""
    with friendly_errors(), open_store(db, read_only=True) as store:
        rows = store.list_sessions(search=search)
    if as_json:
        echo_json([row.to_dict() for row in rows])
        return
    if not rows:
        where = f"whose id contains {search!r} " if search else ""
        echo(f"no sessions {where}in {db}")
        return
    ids = {r.session_id: one_line(r.session_id) for r in rows}
    width = max(len("session"), *(len(i) for i in ids.values()))
    source_width = max(len("source"), *(len(one_line(r.source)) for r in rows))
    echo(
        f"{'session':<{width}}  {'steps':>5}  {'outcome':<8} {'score':>5}  "
        f"{'source':<{source_width}} parent"
    )
    for r in rows:
        score = "-" if r.score is None else f"{r.score:.2f}"
        parent = f"{one_line(r.parent_session)}@{r.fork_step}" if r.parent_session else ""
        echo(
            f"{ids[r.session_id]:<{width}}  {r.steps:>5}  {r.outcome:<8} {score:>5}  "
            f"{one_line(r.source):<{source_width}} {parent}"
        )
