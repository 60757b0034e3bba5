"""``agent-replay verify``: recompute every hash; exit 1 on any integrity failure."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .common import db_option, echo, echo_json, friendly_errors, json_option, open_store, plural


@click.command("verify")
@db_option
@click.option("--session", "session_id", default=None, help="Only this session.")
@json_option
def verify_command(db: Path, session_id: str | None, as_json: bool) -> None:
    """Check blobs, step hashes, chain links and session digests. Exit 1 if anything is off."""
    with friendly_errors(), open_store(db, read_only=True) as store:
        if session_id is not None and session_id not in store:
            raise click.ClickException(f"no session {session_id!r} in {db}")
        results = store.verify(session_id)
    bad = [r for r in results if not r.ok]
    if as_json:
        echo_json([r.to_dict() for r in results])
    else:
        for r in results:
            if r.ok:
                echo(f"ok    {r.session_id}  ({plural(r.steps, 'step')})")
            else:
                echo(
                    f"BAD   {r.session_id}  first bad step: "
                    f"{'header' if r.step_index is None else r.step_index}  {r.problem}"
                )
        echo(f"{len(results) - len(bad)} of {len(results)} sessions verified")
    if bad:
        sys.exit(1)
