"""Enabling capture without code: ``opentelemetry-instrument`` + ``OTEL_TRACES_EXPORTER``.

The application below only uses the OpenTelemetry API; ``opentelemetry-distro`` builds the SDK
pipeline from environment variables and finds our exporter through the
``opentelemetry_traces_exporter`` entry point.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from agent_replay import CheckpointStore, StepKind
from agent_replay.otel import TrajectorySpanExporter

APP = textwrap.dedent(
    """
    import json
    import sys
    from importlib.metadata import entry_points

    from opentelemetry import trace

    tracer = trace.get_tracer("my.app")
    assert type(trace.get_tracer_provider()).__name__ == "TracerProvider", "SDK not configured"
    installed = entry_points(group="opentelemetry_instrumentor")
    loaded = sorted({e.value.split(":")[0] for e in installed} & set(sys.modules))
    assert not loaded, f"instrumentors loaded: {loaded}"
    messages = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
    call = {"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Paris"}}
    with tracer.start_as_current_span(
        "invoke_agent helper",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(messages),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "weather",
                "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.result": '"rainy"',
            },
        ):
            pass
    print("app done")
    """
)


def instrument_bin() -> str:
    script = Path(sys.executable).with_name("opentelemetry-instrument")
    if not script.exists():
        pytest.skip("opentelemetry-instrument is not installed (pip install -e '.[dev]')")
    return str(script)


def installed_instrumentors() -> str:
    """The names of every installed instrumentor, for ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``:
    ``opentelemetry-instrument`` loads each one it finds, and the dev extra installs several
    (OpenAI, Anthropic, LangChain, from more than one project)."""
    return ",".join(sorted({e.name for e in entry_points(group="opentelemetry_instrumentor")}))


def run_instrumented(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    app = tmp_path / "app.py"
    app.write_text(APP)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENT_REPLAY_"))}
    full_env.update(
        {
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            # only the SDK: the auto-instrumentations installed here are not under test (the
            # app checks that none of them was imported)
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": installed_instrumentors(),
            **env,
        }
    )
    result = subprocess.run(
        [instrument_bin(), sys.executable, str(app)],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "app done" in result.stdout
    return result


def assert_captured(path: Path) -> None:
    assert path.exists(), "nothing was stored"
    with CheckpointStore(path) as store:
        (summary,) = store.list_sessions()
        assert summary.source == "otel"
        traj = store.load(summary.session_id)
        assert all(r.ok for r in store.verify())
    assert [s.kind for s in traj.steps] == [StepKind.LLM, StepKind.TOOL]
    assert traj.steps[0].inputs["messages"][0]["parts"][0]["content"] == "Weather in Paris?"
    assert traj.steps[1].action == "rainy"
    assert traj.steps[1].attributes["requested_by"] == 0
    assert {s.agent for s in traj.steps} == {"helper"}


def test_otel_traces_exporter_agent_replay(tmp_path):
    db = tmp_path / "runs.sqlite"
    run_instrumented(tmp_path, OTEL_TRACES_EXPORTER="agent_replay", AGENT_REPLAY_DB=str(db))
    assert_captured(db)


def test_beside_another_exporter_and_with_the_default_path(tmp_path):
    result = run_instrumented(tmp_path, OTEL_TRACES_EXPORTER="console,agent_replay")
    assert '"name": "chat gpt-4o"' in result.stdout  # the console exporter still ran
    assert_captured(tmp_path / "agent-replay.sqlite")


def test_the_entry_point_builds_an_exporter_without_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_REPLAY_DB", str(tmp_path / "ep.sqlite"))
    (entry,) = entry_points(group="opentelemetry_traces_exporter", name="agent_replay")
    exporter_class = entry.load()
    assert exporter_class is TrajectorySpanExporter
    exporter = exporter_class()
    assert exporter.store.path == tmp_path / "ep.sqlite"
    exporter.shutdown()


def test_a_store_that_cannot_be_opened_turns_capture_off_not_opentelemetry(tmp_path):
    """The SDK abandons its whole configuration when an exporter raises on construction: the
    application's other exporters (here the console) must keep working."""
    result = run_instrumented(
        tmp_path,
        OTEL_TRACES_EXPORTER="agent_replay,console",
        AGENT_REPLAY_DB=str(tmp_path / "missing" / "dir" / "runs.sqlite"),
    )
    assert '"name": "chat gpt-4o"' in result.stdout  # the console exporter ran
    assert "capture is off" in result.stderr
    assert "Failed to auto initialize" not in result.stderr
