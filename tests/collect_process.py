"""``agent-replay collect`` as a process of its own, on a free HTTP port (gRPC off)."""

import subprocess
import sys


def start_collect_process(db_path, *extra, env=None):
    """The running process and its HTTP port, once it says it listens."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from agent_replay.cli import main; main()",
            "collect",
            "--db",
            str(db_path),
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "off",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = process.stdout.readline()
    assert line.startswith("listening otlp/http"), line + process.stderr.read()
    return process, int(line.rsplit(":", 1)[1])
