"""``agent-replay import``: trace files of any supported format into a store."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click

from ..ingest import FORMATS, SourceReport, import_into
from .common import db_option, echo, echo_json, friendly_errors, json_option, open_store, plural

_SKIP = (".", "_")
#: what a directory walk picks up (files named on the command line are always read)
TRACE_SUFFIXES = frozenset(
    {".json", ".jsonl", ".ndjson", ".gz", ".zst", ".zstd", ".pb", ".binpb", ".bin", ".otlp"}
)
MAX_LISTED = 10


def _expand(paths: tuple[Path, ...]) -> list[Path]:
    """Files of ``paths``; a directory stands for every trace-looking file below it (by
    suffix, see :data:`TRACE_SUFFIXES`; hidden ones skipped). A link that leads nowhere is
    listed too, so that it is reported as a file that cannot be read, not skipped silently."""
    files: list[Path] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        for candidate in sorted(path.rglob("*")):
            relative = candidate.relative_to(path).parts
            if (
                (candidate.is_file() or (candidate.is_symlink() and not candidate.exists()))
                and candidate.suffix.lower() in TRACE_SUFFIXES
                and not any(part.startswith(_SKIP) for part in relative)
            ):
                files.append(candidate)
    return files


@click.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@db_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", *FORMATS]),
    default="auto",
    show_default=True,
    help="Input format; auto detects it from each file's content.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Also exit 1 when anything read was not imported (a warning: skipped records, "
    "traces without an agent span, log records without their span).",
)
@json_option
def import_command(
    paths: tuple[Path, ...], db: Path, fmt: str, strict: bool, as_json: bool
) -> None:
    """Import trace files (OTLP JSON/protobuf, Langfuse, LangSmith, ATIF, Who&When, JSONL)
    or other stores.

    Directories are imported recursively. OTLP files of one call are assembled together, so
    give a span file and its logs file in the same call. Another store's sessions join what
    DB holds (stores of load-balanced receivers). A file that cannot be read is reported and
    the others are still imported; the exit code is 1 if any file failed.
    """
    missing = [path for path in paths if not path.exists()]
    if len(missing) == len(paths):  # nothing to read: no store is made either
        raise click.UsageError(f"no such file or directory: {', '.join(map(str, missing))}")
    files = _expand(paths)
    if not files:
        raise click.UsageError("no files to import")
    progress = click.progressbar(
        length=len(files), label="Importing", file=sys.stderr, show_pos=True
    )
    assembling: list = []  # the second phase's bar, drawn over the first one's line (whose
    # end, when the import returns, ends the line)

    def assembled(done: int, total: int) -> None:
        if not assembling:
            assembling.append(
                click.progressbar(length=total, label="Assembling", file=sys.stderr, show_pos=True)
            )
        assembling[0].update(done - assembling[0].pos)

    with friendly_errors(), open_store(db, must_exist=False) as store, progress as bar:

        def advance(report: SourceReport) -> None:
            bar.update(1)

        before = store.digests(store.session_ids())  # to tell new, updated and unchanged
        try:
            result = import_into(store, files, fmt, on_source=advance, on_assembled=assembled)
        except KeyboardInterrupt:
            # every transaction is whole: what was committed stays, nothing is half-written
            echo(
                f"\ninterrupted after reading {bar.pos} of {len(files)} files; the sessions "
                "already stored are kept (importing the same files again completes it)",
                err=True,
            )
            raise
        after = store.digests(s.session_id for s in result.sessions)
    status = {
        session_id: "new"
        if session_id not in before
        else "unchanged"
        if before[session_id] == digest
        else "updated"
        for session_id, digest in after.items()
    }
    failed = [s for s in result.sources if s.error is not None]
    skipped = [s for s in result.sources if s.rejected]
    sessions = result.sessions
    steps = sum(s.steps for s in sessions)
    # a session with no capture report was recorded natively: its agent replays it
    replayable = sum(1 for s in sessions if not s.capture or s.capture.get("replayable"))
    formats = Counter(s.format for s in result.sources if s.format and s.ok)  # files read
    if as_json:
        echo_json(
            {
                "db": str(db),
                "files": len(files),
                "failed": [{"file": s.source, "error": str(s.error)} for s in failed],
                "trajectories": [
                    {
                        "session_id": s.session_id,
                        "status": status[s.session_id],
                        "steps": s.steps,
                        "source": s.source,
                        "capture": s.capture,
                    }
                    for s in sessions
                ],
                "formats": dict(formats),
                "warnings": result.warnings,
            }
        )
    else:
        by_format = ", ".join(f"{n} {f}" for f, n in sorted(formats.items()))
        echo(
            f"Imported {plural(len(sessions), 'trajectory', 'trajectories')} "
            f"({plural(steps, 'step')}) from "
            f"{len(files) - len(failed)} of {len(files)} files into {db}"
            + (f" [{by_format}]" if by_format else "")
        )
        if sessions:
            counts = Counter(status.values())
            echo(
                "  "
                + ", ".join(
                    f"{counts[k]} {k}" for k in ("new", "updated", "unchanged") if counts[k]
                )
                + (
                    " (the store already held these runs as imported)"
                    if set(counts) == {"unchanged"}
                    else ""
                )
            )
            echo(
                f"  {replayable} of {len(sessions)} fully replayable; see "
                "`agent-replay show --json` for each capture report"
            )
        for source in failed:
            echo(f"  FAILED {source.error}", err=True)
        for warning in result.warnings[:MAX_LISTED]:
            echo(f"  warning: {warning}", err=True)
        if len(result.warnings) > MAX_LISTED:
            echo(f"  ... and {len(result.warnings) - MAX_LISTED} more warnings", err=True)
    if failed or (strict and (skipped or result.warnings)):
        sys.exit(1)
