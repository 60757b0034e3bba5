"""The ``agent-replay`` command line (click): a thin group, one module per command.

Exit codes: 0 success; 1 an error the message explains (integrity failure, unreadable input);
2 a usage error (bad option or argument); 3 (``attribute``) no culprit could be named.
"""

from __future__ import annotations

import click

from .._version import __version__
from .analysis import aggregate_command, drift_command
from .attribute import attribute_command
from .collect import collect_command
from .demo import demo_command
from .fork import diff_command, fork_command, resume_command
from .import_ import import_command
from .record import record_command
from .replay import replay_command
from .report import report_command
from .serve import serve_command
from .sessions import sessions_command
from .show import show_command
from .verify import verify_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agent-replay")
def main() -> None:
    """Find which step made your agent fail, why, and what fix would have saved it."""


for command in (
    demo_command,
    record_command,
    replay_command,
    fork_command,
    resume_command,
    diff_command,
    sessions_command,
    show_command,
    verify_command,
    aggregate_command,
    drift_command,
    attribute_command,
    report_command,
    serve_command,
    import_command,
    collect_command,
):
    main.add_command(command)
