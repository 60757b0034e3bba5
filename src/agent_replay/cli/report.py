"""``agent-replay report``: regenerate the HTML report (and the text) from a JSON report."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .common import echo, friendly_errors, open_store, output_path, write_text


@click.command("report")
@click.option(
    "--json",
    "json_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A report written by `attribute --out` (or AttributionResult.to_json).",
)
@click.option(
    "--out",
    "out_path",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="HTML file to write, - for standard output [default: the JSON path with .html].",
)
@click.option(
    "--db",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Store to read the run's step content from, when the JSON does not hold it.",
)
@click.option("--text", "show_text", is_flag=True, help="Also print the text summary.")
def report_command(
    json_path: Path, out_path: Path | None, db: Path | None, show_text: bool
) -> None:
    """Render a JSON report as one standalone HTML file (validated against the schema first).

    Exit codes: 0 written; 1 unreadable or invalid report; 2 usage error.
    """
    from ..report._data import trajectory_section
    from ..report.html import render_html
    from ..report.schema import ReportSchemaError, validate_report
    from ..report.text import render_text

    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"{json_path}: not a JSON report ({exc})") from exc
    try:
        validate_report(data)
    except ReportSchemaError as exc:
        raise click.ClickException(f"{json_path}: {exc}") from exc
    if db is not None and "trajectory" not in data:
        with friendly_errors(), open_store(db, read_only=True) as store:
            data["trajectory"] = trajectory_section(store.load(data["session_id"]))
    elif "trajectory" not in data:
        echo(
            "note: this report does not hold the run's steps (a bare AttributionResult."
            "to_json()); pass --db with the store to show their content",
            err=True,
        )
    if out_path is not None and str(out_path) == "-":  # the page on stdout, for a pipe
        echo(render_html(data), nl=False)
        return
    out_path = output_path(out_path or json_path.with_suffix(".html"), "--out")
    write_text(out_path, render_html(data))
    if show_text:
        echo(render_text(data))
    echo(f"wrote {out_path}")
