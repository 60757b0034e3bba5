"""``agent-replay collect``: an OTLP receiver (HTTP and gRPC) that stores trajectories."""

from __future__ import annotations

import json
import os
import signal
import ssl
import sys
import threading
from pathlib import Path

import click

from ..ingest.receiver import DEFAULT_GRPC, DEFAULT_HTTP, Collector, ReceiverConfig, TLSConfig
from ..ingest.receiver.memory import pin_mmap_threshold
from .common import Duration, db_option, echo, friendly_errors, open_store

_OFF = ("", "off", "none", "no")


def _address(value: str, option: str) -> str | None:
    """``HOST:PORT`` as given (``None`` for ``off``); a port outside 0-65535 is a usage error,
    not a traceback or, with gRPC, another port."""
    if value.strip().lower() in _OFF:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(
            f"{value!r} is not HOST:PORT with a port 0-65535", param_hint=option
        )
    return value


@click.command("collect")
@db_option
@click.option(
    "--http",
    "http",
    default=DEFAULT_HTTP,
    show_default=True,
    help="OTLP/HTTP listen address HOST:PORT (port 0: any free port; 'off' disables).",
)
@click.option(
    "--grpc",
    "grpc_address",
    default=DEFAULT_GRPC,
    show_default=True,
    help="OTLP/gRPC listen address HOST:PORT (port 0: any free port; 'off' disables).",
)
@click.option(
    "--token",
    envvar="AGENT_REPLAY_TOKEN",
    default=None,
    help="Require 'Authorization: Bearer TOKEN' (env AGENT_REPLAY_TOKEN).",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="PEM certificate chain: serve both transports over TLS.",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="PEM private key for --tls-cert.",
)
@click.option(
    "--max-body-mib",
    type=click.FloatRange(min=0.001),
    default=64.0,
    show_default=True,
    help="Largest request body (after decompression) accepted; larger gets 413.",
)
@click.option(
    "--max-inflight",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Requests processed at once; more get 429 with Retry-After.",
)
@click.option(
    "--idle-seconds",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Assemble a trace whose root span never arrives after this much silence.",
)
@click.option(
    "--retain-seconds",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Keep the spans of assembled traces this long so late spans re-assemble them.",
)
@click.option(
    "--keep-sessions",
    type=Duration(),
    default=None,
    metavar="DURATION",
    help="Delete, once an hour, the stored sessions not saved for this long (30d, 12h; a "
    "conversation counts from its latest turn), with what only they used [default: keep "
    "all].",
)
@click.option(
    "--grace-seconds",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="On SIGTERM/SIGINT, how long requests in progress may take to finish.",
)
def collect_command(
    db: Path,
    http: str,
    grpc_address: str,
    token: str | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    max_body_mib: float,
    max_inflight: int,
    idle_seconds: float,
    retain_seconds: float,
    keep_sessions: float | None,
    grace_seconds: float,
) -> None:
    """Receive OTLP traces and logs and store them as trajectories until SIGTERM or Ctrl-C.

    Exports are acknowledged only after their spans are committed to DB; on shutdown the
    receiver drains (requests in progress finish, waiting traces are assembled). Point an
    OpenTelemetry SDK or Collector at it: OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 (or http://127.0.0.1:4317 over gRPC,
    opentelemetry-distro's default) and OTEL_METRICS_EXPORTER=none (metrics are not taken).
    """
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    http_address, grpc_listen = _address(http, "--http"), _address(grpc_address, "--grpc")
    if http_address is None and grpc_listen is None:
        raise click.UsageError("both transports are off; enable --http or --grpc")
    config = ReceiverConfig(
        max_body_bytes=int(max_body_mib * (1 << 20)),
        max_inflight=max_inflight,
        idle_seconds=idle_seconds,
        retain_seconds=retain_seconds,
        keep_seconds=keep_sessions,
        token=token or None,
    )
    tls = TLSConfig(tls_cert, tls_key) if tls_cert is not None and tls_key is not None else None
    # before any receiver thread allocates: large request bodies, once freed, must not leave
    # glibc keeping hundreds of MiB resident in its arenas (memory.py)
    pin_mmap_threshold()
    with friendly_errors(), open_store(db, must_exist=False) as store:
        collector = Collector(store, http=http_address, grpc=grpc_listen, config=config, tls=tls)
        try:
            collector.start()
        except ssl.SSLError as exc:
            raise click.ClickException(
                f"cannot use the TLS certificate {tls_cert} and key {tls_key}: {exc} (are they "
                "PEM files, and does the key match the certificate?)"
            ) from exc
        except OSError as exc:
            where = " and ".join(
                f"{name} {address}"
                for name, address in (("http", http_address), ("grpc", grpc_listen))
                if address is not None
            )
            raise click.ClickException(f"cannot listen on {where}: {exc}") from exc
        for address in collector.insecure_exposure():
            echo(
                f"warning: {address} accepts connections from other hosts without a token "
                "(set --token or AGENT_REPLAY_TOKEN)",
                err=True,
            )
        scheme = "https" if tls else "http"
        # a port is only bound for a transport that was given an address
        if collector.http_port is not None:
            host = http_address.rsplit(":", 1)[0]
            echo(f"listening otlp/http {scheme}://{host}:{collector.http_port}")
        if collector.grpc_port is not None:
            host = grpc_listen.rsplit(":", 1)[0]
            echo(f"listening otlp/grpc {host}:{collector.grpc_port}")
        echo(f"storing into {db} (pid {os.getpid()}); SIGTERM or Ctrl-C drains and stops")
        sys.stdout.flush()
        if threading.current_thread() is threading.main_thread():
            signals = []

            def on_signal(*_: object) -> None:
                signals.append(1)
                if len(signals) > 1:  # a second Ctrl-C or SIGTERM: stop now, not after draining
                    os.write(
                        2,
                        b"stopping now: what was acknowledged is on disk, and the next start "
                        b"assembles what was waiting\n",
                    )
                    os._exit(130)
                collector.request_stop()

            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, on_signal)
        try:
            collector.wait()
        finally:
            echo("draining...", err=True)
            collector.stop(grace=grace_seconds)
        summary = collector.receiver.snapshot()
        summary["pending"] = store.pending_counts()
        echo(json.dumps(summary, sort_keys=True))
