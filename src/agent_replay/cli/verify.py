"""``agent-replay verify``: recompute every hash; exit 1 on any integrity failure."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .common import (
    db_option,
    echo,
    echo_json,
    friendly_errors,
    json_option,
    one_line,
    open_store,
    plural,
)


@click.command("verify")
@db_option
@click.option("--session", "session_id", default=None, help="Only this session.")
@json_option
def verify_command(db: Path, session_id: str | None, as_json: bool) -> None:
    """Check blobs, step hashes, chain links and session digests, and the file's pages and
    indexes (SQLite's quick_check). Exit 1 if anything is off."""
    with friendly_errors(), open_store(db, read_only=True) as store:
        if session_id is not None and session_id not in store:
            raise click.ClickException(f"no session {session_id!r} in {db}")
        damage = store.file_problems()
        results = store.verify(session_id)
    bad = [r for r in results if not r.ok]
    if as_json:
        file = [{"file": str(db), "ok": False, "problem": problem} for problem in damage]
        echo_json([*file, *(r.to_dict() for r in results)])
    else:
        for problem in damage:
            echo(f"BAD   file  SQLite's integrity check: {problem}")
        for r in results:
            if r.ok:
                echo(f"ok    {one_line(r.session_id)}  ({plural(r.steps, 'step')})")
            else:
                echo(
                    f"BAD   {one_line(str(r.session_id))}  first bad step: "
                    f"{'header' if r.step_index is None else r.step_index}  {r.problem}"
                )
        echo(f"{len(results) - len(bad)} of {len(results)} sessions verified")
    if bad or damage:
        sys.exit(1)
