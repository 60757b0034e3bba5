"""The collect process gives back the memory of large requests once they are answered (glibc's
malloc kept it: agent_replay/ingest/receiver/memory.py)."""

import gzip
import http.client
import os
import platform
import subprocess
import sys
import threading
import time

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collect_process import start_collect_process

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="about glibc's malloc",
)


def _env(**extra):
    """This environment without the operator's malloc settings (they would be kept)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"
    }
    return {**env, **extra}


def _rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _export(size, tag):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": "x" * size + tag}
    with provider.get_tracer("t").start_as_current_span("chat", attributes=attributes):
        pass
    provider.shutdown()
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def _post(port, body, encoding=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/x-protobuf"}
    if encoding:
        headers["Content-Encoding"] = encoding
    try:
        connection.request("POST", "/v1/traces", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError as exc:  # refused (429) while the body was still being sent
        return type(exc).__name__
    finally:
        connection.close()


@glibc
@pytest.mark.slow
def test_large_requests_on_many_connections_leave_no_memory_behind(tmp_path):
    """Eight clients each send gzip bombs (413 at the 64 MiB cap, or 429 while the others
    hold the memory budget) and 3 MiB exports. Before the mmap threshold was pinned, 88 to
    102 MiB of freed memory stayed resident afterwards (three runs); pinned, 14 to 16 MiB."""
    process, port = start_collect_process(tmp_path / "store.sqlite", env=_env())
    try:
        for n in range(20):  # warm up: imports, the store's connections, caches
            assert _post(port, _export(1000, f"warm{n}")) == 200
        time.sleep(2)
        before = _rss_mib(process.pid)
        bomb = gzip.compress(b"\0" * (80 << 20), 6)
        big = [_export(3 << 20, f"big{k}") for k in range(8)]
        answers = []

        def client(k):
            for _ in range(3):
                answers.append(_post(port, bomb, "gzip"))
                answers.append(_post(port, big[k]))

        clients = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        assert 200 in answers
        time.sleep(3)  # assembled and stored meanwhile
        grown = _rss_mib(process.pid) - before
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert grown < 48, f"RSS grew {grown:.0f} MiB and stayed"


@glibc
def test_the_threshold_is_pinned_unless_the_environment_sets_it():
    code = "from agent_replay.ingest.receiver import memory; print(memory.pin_mmap_threshold())"

    def run(env):
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    assert run(_env()) == "True"
    assert run(_env(MALLOC_MMAP_THRESHOLD_="1048576")) == "False"
    assert run(_env(GLIBC_TUNABLES="glibc.malloc.mmap_threshold=1048576")) == "False"
