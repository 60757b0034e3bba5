"""collector-config/ under a real OpenTelemetry Collector: agent-replay's receiver on free
ports, a shipped config adapted to them, and the Collector binary running it (for
tests/test_real_collector.py and benchmarks/collector_relay.py).

The binary: ``$AGENT_REPLAY_OTELCOL``, else ``otelcol-contrib`` or ``otelcol`` on the PATH
(``.ci/install-otelcol`` builds one with the core components)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from agent_replay import CheckpointStore
from agent_replay.ingest.receiver import Collector, ReceiverConfig, TLSConfig

CONFIGS = Path(__file__).resolve().parents[1] / "collector-config"
TOKEN = "real-collector-token"  # the Collector's AGENT_REPLAY_TOKEN


def otelcol_binary() -> str | None:
    named = os.environ.get("AGENT_REPLAY_OTELCOL")
    if named:
        return named
    return shutil.which("otelcol-contrib") or shutil.which("otelcol")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@contextlib.contextmanager
def receiver(
    path: Path, tls: TLSConfig | None = None, **config
) -> Iterator[tuple[Collector, CheckpointStore]]:
    """agent-replay's receiver (what `agent-replay collect` serves) on free ports."""
    store = CheckpointStore(path)
    options = {"assemble_interval": 0.05, "retry_after": 1.0, **config}
    collector = Collector(
        store, http="127.0.0.1:0", grpc="127.0.0.1:0", config=ReceiverConfig(**options), tls=tls
    ).start()
    try:
        yield collector, store
    finally:
        collector.stop(grace=2)
        store.close()


def shipped(name: str, **exporters) -> tuple[dict, int, int]:
    """collector-config/NAME with its OTLP receiver on free ports, the named exporters'
    settings updated, and the Collector's own metrics endpoint off (two Collectors, or
    anything else on :8888, would clash). Returns it and the receiver's gRPC and HTTP ports."""
    config = yaml.safe_load((CONFIGS / name).read_text())
    ports = free_port(), free_port()
    protocols = config["receivers"]["otlp"]["protocols"]
    protocols["grpc"]["endpoint"], protocols["http"]["endpoint"] = (
        f"127.0.0.1:{port}" for port in ports
    )
    for exporter, settings in exporters.items():
        config["exporters"][exporter].update(settings)
    config["service"]["telemetry"] = {"metrics": {"level": "none"}}
    return config, *ports


@contextlib.contextmanager
def otelcol(
    config: dict, http_port: int, tmp_path: Path, *, show_log: bool = True
) -> Iterator[subprocess.Popen]:
    """The Collector running ``config`` until the block ends; its log is printed at the end
    (pytest shows it for a failing test) unless ``show_log`` is false."""
    config_file = tmp_path / "otelcol.yaml"
    config_file.write_text(yaml.safe_dump(config))
    log = tmp_path / "otelcol.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [otelcol_binary(), "--config", str(config_file)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "AGENT_REPLAY_TOKEN": TOKEN},
        )
    try:
        deadline = time.monotonic() + 30
        while not listening(http_port):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if show_log:
            print(log.read_text())


def arrived(collector: Collector, db_path: Path) -> tuple[set, int]:
    """The spans in the receiver's durable table, and how many log records it stored."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        spans = set(conn.execute("SELECT trace_id, span_id FROM pending_spans").fetchall())
    return spans, collector.receiver.snapshot()["logs_stored"]


def fanout(backend_port: int, agent_replay_port: int) -> tuple[dict, int, int]:
    """fanout.yaml with "your existing backend" and agent-replay on these gRPC ports."""
    return shipped(
        "fanout.yaml",
        **{
            "otlp/backend": {"endpoint": f"127.0.0.1:{backend_port}"},
            "otlp/agent_replay": {"endpoint": f"127.0.0.1:{agent_replay_port}"},
        },
    )
