"""The ``agent-replay`` command line (click): a thin group, one module per command.

Exit codes: 0 success; 1 an error the message explains (integrity failure, unreadable input);
2 a usage error (bad option or argument); 3 (``attribute``) no culprit could be named; 130
interrupted (Ctrl-C); 141 the reader of the output went away (``| head``), as a shell reports
a command killed by SIGPIPE.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from .._version import __version__
from .analysis import aggregate_command, drift_command
from .attribute import attribute_command
from .collect import collect_command
from .demo import demo_command
from .fork import diff_command, fork_command, resume_command
from .import_ import import_command
from .prune import prune_command
from .record import record_command
from .replay import replay_command
from .report import report_command
from .serve import serve_command
from .sessions import sessions_command
from .show import show_command
from .verify import verify_command

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class _Group(click.Group):
    """The command group, with the two ways a terminal ends a command given their own exit
    codes (click reports both as exit 1, the code of an integrity failure)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            value = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
            return value
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            # nothing more can be written; point stdout at /dev/null so that the
            # interpreter's final flush does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(EXIT_BROKEN_PIPE)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
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
    prune_command,
    aggregate_command,
    drift_command,
    attribute_command,
    report_command,
    serve_command,
    import_command,
    collect_command,
):
    main.add_command(command)
