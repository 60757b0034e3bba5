"""``agent-replay prune``: delete sessions and the stored rows no session uses any more."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import click

from ..console.app import reports_dir_for
from .common import (
    Duration,
    db_option,
    echo,
    echo_json,
    friendly_errors,
    json_option,
    open_store,
    plural,
)


@click.command("prune")
@db_option
@click.option("--session", "session_ids", multiple=True, help="Delete this session (repeatable).")
@click.option(
    "--older-than",
    type=Duration(),
    default=None,
    help="Delete the sessions not saved for this long (30d, 12h, 45m, 90s; a bare number is "
    "seconds; a conversation counts from its latest turn).",
)
@click.option(
    "--reports-dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where `attribute` kept its reports; those of deleted sessions go too [default: "
    "DB.reports/].",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; change nothing.")
@click.option("--vacuum", is_flag=True, help="Then shrink the file (needs room for a copy).")
@json_option
def prune_command(
    db: Path,
    session_ids: tuple[str, ...],
    older_than: float | None,
    reports_dir: Path | None,
    dry_run: bool,
    vacuum: bool,
    as_json: bool,
) -> None:
    """Delete sessions, then the steps and content no remaining session uses.

    Without --session or --older-than, only the unused rows go: those of sessions deleted
    before, and the rows a trace merged into a stored conversation left behind. The spans a
    receiver kept of the deleted sessions' traces go too. Writers (a receiver on the same
    store) wait only while it deletes; --dry-run only reads."""
    # (a duration longer than the time since 1970 leaves nothing old enough: cut off at 0)
    cutoff = None if older_than is None else max(0, time.time_ns() - int(older_than * 1e9))
    with friendly_errors(), open_store(db, read_only=dry_run) as store:
        unknown = [s for s in session_ids if s not in store]
        if unknown:
            raise click.ClickException(f"no session {unknown[0]!r} in {db}; nothing deleted")
        result = store.prune(session_ids, saved_before_ns=cutoff, dry_run=dry_run)
        remaining = set(store.session_ids()) - set(result.sessions)
        sizes = store.vacuum() if vacuum and not dry_run else None
    gone = set(result.sessions)
    if reports_dir is None:
        # the store's own reports folder holds nothing but its sessions' reports: those of
        # sessions deleted before (by CheckpointStore.prune, or with another --reports-dir)
        # go too
        reports = _reports_of(reports_dir_for(db), lambda session: session not in remaining)
    else:
        reports = _reports_of(reports_dir, lambda session: session in gone)
    if not dry_run:
        for path in reports:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise click.ClickException(
                    f"deleted the sessions but not their report {path}: {exc.strerror or exc}"
                ) from None
    if as_json:
        data = result.to_dict()
        data["reports"] = [str(path) for path in reports]
        if sizes is not None:
            data["file_bytes"] = {"before": sizes[0], "after": sizes[1]}
        echo_json(data)
        return
    verb = "would delete" if dry_run else "deleted"
    listed = f": {', '.join(result.sessions)}" if result.sessions else ""
    echo(f"{verb} {plural(len(result.sessions), 'session')}{listed}")
    echo(
        f"{'would remove' if dry_run else 'removed'} {plural(result.steps, 'step row')} and "
        f"{plural(result.blobs, 'blob')} ({_size(result.blob_bytes)} of content) that no "
        "remaining session uses"
    )
    if result.pending:
        echo(
            f"{'would remove' if dry_run else 'removed'} "
            f"{plural(result.pending, 'span or log record')} the receiver kept of their traces"
        )
    if reports:
        echo(
            f"{'would remove' if dry_run else 'removed'} {plural(len(reports), 'report')} "
            f"on them from {reports[0].parent}"
        )
    if sizes is not None:
        echo(f"file: {_size(sizes[0])} -> {_size(sizes[1])} after vacuum")


def _reports_of(folder: Path, deleted: Callable[[str], bool]) -> list[Path]:
    """The attribution reports in ``folder`` on a session ``deleted`` says is gone: a report
    holds the run's content, so what prunes a session prunes them too."""
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not a report (or not readable): not ours to delete
        session = data.get("session_id") if isinstance(data, dict) else None
        if isinstance(session, str) and deleted(session):
            found.append(path)
    return found


def _size(n: float) -> str:
    """``n`` bytes for people: 812 bytes, 3.4 KiB, 1.2 GiB."""
    units = ("bytes", "KiB", "MiB", "GiB")
    unit = 0
    while n >= 1024 and unit < len(units) - 1:
        n, unit = n / 1024, unit + 1
    return f"{int(n)} bytes" if unit == 0 else f"{n:.1f} {units[unit]}"
