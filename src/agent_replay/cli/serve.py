"""``agent-replay serve``: the read-only web console."""

from __future__ import annotations

from pathlib import Path

import click

from .common import db_option, echo, friendly_errors, open_store


@click.command("serve")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port",
    default=8765,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--reports",
    "reports_dir",
    default=None,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Folder of JSON attribution reports [default: DB.reports/, where `attribute` keeps them].",
)
def serve_command(db: Path, host: str, port: int, reports_dir: Path | None) -> None:
    """Browse sessions, steps, forks, attributions and diffs in a browser (read-only).

    The console has no authentication: keep it on 127.0.0.1 unless the network is yours.
    Exit codes: 0 stopped with Ctrl-C; 1 the store cannot be opened or the port is taken.
    """
    from ..console import Console, make_server

    open_store(db, read_only=True).close()  # a clear error for a missing or foreign file
    if host not in ("127.0.0.1", "localhost", "::1"):
        echo(f"warning: serving on {host} without authentication", err=True)
    with friendly_errors(), Console(db, reports_dir=reports_dir) as console:
        try:
            server = make_server(console, host, port)
        except OSError as exc:
            raise click.ClickException(
                f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port"
            ) from exc
        address = server.server_address
        echo(f"agent-replay console on http://{address[0]}:{address[1]}/  (Ctrl-C to stop)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            echo("stopped")
        finally:
            server.server_close()
