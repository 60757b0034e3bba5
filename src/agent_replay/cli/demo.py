"""``agent-replay demo``: the whole story on a small agent with a planted failure."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import click

from ..attribution import attribute
from ..console.app import reports_dir_for
from ..demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent
from ..report.text import render_text
from ..session import Session
from .attribute import build_report, keep_report, write_reports
from .common import echo, output_dir, plural
from .progress import RolloutProgress
from .show import render_table


@click.command("demo")
@click.option(
    "--out",
    "out_dir",
    default="agent-replay-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the demo store and reports (the store and report.* are replaced on each "
    "run; other files are kept).",
)
def demo_command(out_dir: Path) -> None:
    """The whole story: record a failing agent through OpenTelemetry, store and verify it,
    attribute the failure (with a repair), write report.html and report.json, explain it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    output_dir(out_dir, "--out")
    db = out_dir / "demo.sqlite"
    for stale in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        stale.unlink(missing_ok=True)

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))

    click.secho(
        "1. Recording the refund-desk agent (GenAI spans on an OTel TracerProvider)", bold=True
    )
    with Session(db, tracer_provider=provider) as session:
        traj = session.record(
            support_agent,
            DEMO_TASK,
            session_id="demo-refund",
            seed=DEMO_SEED,
            verifier=refund_approved,
        )
        finished = spans.get_finished_spans()
        names = collections.Counter(s.name.split(" ")[0] for s in finished)
        echo(
            f"   {len(finished)} spans emitted: "
            + ", ".join(f"{n} x{c}" for n, c in sorted(names.items()))
        )
        echo(f"   stored in {db} as session {traj.session_id!r}")

        click.secho("2. Verifying the hash chain", bold=True)
        (result,) = session.store.verify(traj.session_id)
        status = "ok" if result.ok else "BAD"
        echo(f"   {status}: {plural(result.steps, 'step')}, head {traj.head_hash[:16]}…")

        click.secho("3. The recorded run", bold=True)
        stored = session.load(traj.session_id)
        echo(render_table(stored))
    provider.shutdown()

    click.secho(
        "4. Attributing the failure: counterfactual rollouts re-draw steps from each prefix",
        bold=True,
    )
    started = time.perf_counter()
    progress = RolloutProgress(support_agent)
    with progress:
        result = attribute(stored, support_agent, refund_approved, repair=True, executor=progress)
    explanation = result.explain(stored)
    data = build_report(result, stored, explanation)
    json_path, html_path = write_reports(data, out_dir / "report")
    # where `agent-replay serve` looks for it
    keep_report(output_dir(reports_dir_for(db), "--out", private=True), data)
    echo(f"   {progress.status()} (attribution {time.perf_counter() - started:.2f}s)")
    echo("")
    echo(render_text(data))
    echo("")
    echo(explanation.to_text())
    echo("")
    echo(f"wrote {html_path} and {json_path}")
    echo(f"next: open {html_path}, or browse the store with `agent-replay serve --db {db}`")
