"""``agent-replay attribute``: which step made a stored run fail, why, and the fix."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from ..canonical import plain_json
from ..console.app import reports_dir_for
from ..model import Trajectory
from .common import (
    agent_option,
    db_option,
    echo,
    friendly_errors,
    limits_options,
    load_entrypoint,
    open_store,
    output_dir,
    output_path,
    policy_option,
    required_verifier_option,
    resolve_agent,
    rollout_limits,
    seed_option,
    session_option,
    write_text,
)
from .progress import RolloutProgress

EXIT_DECIDED = 0
EXIT_ERROR = 1
EXIT_UNDECIDED = 3

EXIT_CODES_HELP = """\b
Exit codes:
  0  a culprit was named (verdict separated or likely)
  1  error (bad input, a run that passed in failure mode, export failed, ...)
  2  usage error (bad option)
  3  no culprit: verdict undecided or nothing to attribute
"""


def report_file_name(session_id: str, when: datetime | None = None) -> str:
    """A safe file name for a report on a session (session ids are arbitrary text), with the
    time it was written (UTC, to the microsecond) so that each attribution of a session keeps
    its own file."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", session_id)[:48].strip("._") or "session"
    stamp = (when or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{slug}-{hashlib.sha256(session_id.encode()).hexdigest()[:10]}-{stamp}.json"


def keep_report(folder: Path, data: dict[str, Any]) -> Path:
    """Keep a copy of the report in ``folder`` (for `agent-replay serve`) under a name no
    earlier report has: a second attribution of a session adds a file, it does not replace
    the first one's."""
    text = report_json(data) + "\n"
    for attempt in range(100):
        path = folder / report_file_name(data["session_id"])
        if attempt:
            path = path.with_name(f"{path.stem}-{attempt}.json")
        try:
            with path.open("x", encoding="utf-8") as out:
                out.write(text)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None
    raise click.ClickException(f"cannot find a free report name in {folder}")


def build_report(result: Any, trajectory: Trajectory, explanation: Any) -> dict[str, Any]:
    """The full JSON report: the result, its explanation and the recorded run."""
    from ..report._data import trajectory_section

    data = result.to_dict()
    data["explanation"] = explanation.to_dict()
    data["trajectory"] = trajectory_section(trajectory)
    return data


def report_json(data: dict[str, Any]) -> str:
    """The report as the JSON text every copy of it holds."""
    return json.dumps(plain_json(data), indent=2, ensure_ascii=False)


def write_reports(data: dict[str, Any], prefix: Path) -> tuple[Path, Path]:
    """``PREFIX.json`` and ``PREFIX.html``; returns both paths."""
    from ..report.html import render_html

    prefix.parent.mkdir(parents=True, exist_ok=True)
    json_path = prefix.with_name(prefix.name + ".json")
    html_path = prefix.with_name(prefix.name + ".html")
    write_text(json_path, report_json(data) + "\n")
    write_text(html_path, render_html(data))
    return json_path, html_path


def export_otlp(data: dict[str, Any], url: str) -> str:
    """Send the verdict spans to an OTLP/HTTP endpoint; returns the attribution's trace id.

    The spans are collected first and handed to the real exporter in one call, so a refused
    or unreachable endpoint is reported as an error rather than logged and forgotten.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ..report.otel import to_otel

    endpoint = url.rstrip("/")
    if not endpoint.endswith("/v1/traces"):
        endpoint += "/v1/traces"
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent-replay"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    context = to_otel(data, provider, explanation=data.get("explanation"))
    provider.shutdown()
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=10)
    # the exporter logs each retry; a failure is reported below, once, as our own error
    quiet = logging.getLogger("opentelemetry.exporter.otlp")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    reason = ""
    try:
        outcome = exporter.export(memory.get_finished_spans())
    except Exception as exc:  # the OTLP/HTTP exporter of 1.27 raises what requests raised
        outcome, reason = SpanExportResult.FAILURE, f" ({type(exc).__name__})"
    finally:
        quiet.setLevel(level)
        exporter.shutdown()
    if outcome is not SpanExportResult.SUCCESS:
        raise click.ClickException(
            f"could not export the verdict to {endpoint}{reason}: is an OTLP/HTTP receiver "
            "listening there? (agent-replay collect, an OTel Collector, Jaeger, Phoenix ...)"
        )
    return format(context.trace_id, "032x")


@click.command("attribute", epilog=EXIT_CODES_HELP)
@db_option
@session_option
@agent_option
@required_verifier_option
@policy_option
@click.option(
    "--rollouts",
    default=None,
    type=click.IntRange(1),
    help="Cap on rollouts per evaluated prefix position [default: 200; 1600 with --budget].",
)
@click.option(
    "--budget",
    default=None,
    type=click.IntRange(1),
    help="Cap on live step executions (each is one LLM or tool call in real life), "
    "--repair and Shapley values included.",
)
@click.option(
    "--method",
    default="contrastive",
    show_default=True,
    type=click.Choice(["contrastive", "shapley", "both"]),
    help="Step effects (contrastive), Shapley values, or both.",
)
@click.option("--repair", is_flag=True, help="Search a minimal validated repair of the culprit.")
@click.option(
    "--mode",
    default="failure",
    show_default=True,
    type=click.Choice(["failure", "credit"]),
    help="failure: which step made it fail; credit: which step secured a success.",
)
@click.option(
    "--confidence",
    default=0.95,
    show_default=True,
    type=click.FloatRange(0.5, 1, min_open=True, max_open=True),
    help="Confidence level of the intervals, strictly between 0.5 and 1.",
)
@seed_option
@limits_options
@click.option(
    "--out",
    "out_prefix",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write PREFIX.json and PREFIX.html.",
)
@click.option(
    "--reports-dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Also keep the JSON report here for `agent-replay serve` [default: DB.reports/].",
)
@click.option("--no-save", is_flag=True, help="Do not keep a copy in the reports folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report (for scripts).")
@click.option("--no-explain", is_flag=True, help="Print the summary without the explanation.")
@click.option(
    "--export-otlp",
    "otlp_url",
    default=None,
    metavar="URL",
    help="Send the verdict as spans to an OTLP/HTTP endpoint (e.g. http://localhost:4318).",
)
def attribute_command(
    db: Path,
    session_id: str,
    agent_spec: str | None,
    verifier_spec: str,
    policy_specs: tuple[str, ...],
    rollouts: int | None,
    budget: int | None,
    method: str,
    repair: bool,
    mode: str,
    confidence: float,
    seed: int,
    max_rollout_steps: int | None,
    rollout_timeout: float | None,
    out_prefix: Path | None,
    reports_dir: Path | None,
    no_save: bool,
    as_json: bool,
    no_explain: bool,
    otlp_url: str | None,
) -> None:
    """Find which step of a stored run made it fail, with counterfactual rollouts.

    Prints the verdict (culprit step and agent, effect with interval, repair) and the
    explanation; the report is kept in DB.reports/ for `agent-replay serve`.
    """
    from ..attribution import attribute

    verifier = load_entrypoint(verifier_spec, "--verifier")
    if otlp_url is not None and not otlp_url.startswith(("http://", "https://")):
        raise click.BadParameter(
            f"{otlp_url!r}: give the URL with its scheme, e.g. http://{otlp_url}",
            param_hint="--export-otlp",
        )
    if no_save and reports_dir is not None:
        raise click.UsageError(
            "--reports-dir names where to save the report; --no-save says not to"
        )
    # where the reports go is checked before the rollouts are spent
    if out_prefix is not None:
        if str(out_prefix) == "-":
            raise click.BadParameter(
                "'-' cannot name two files (PREFIX.json and PREFIX.html); print the JSON "
                "report with --json, or write the page with `agent-replay report`",
                param_hint="--out",
            )
        output_path(out_prefix, "--out")
    folder = (
        None
        if no_save
        else output_dir(reports_dir or reports_dir_for(db), "--reports-dir", private=True)
    )
    with friendly_errors(), open_store(db) as store:
        trajectory = store.load(session_id)
        agent = resolve_agent(agent_spec, trajectory, policy_specs, needs_code=True)
    limits = rollout_limits([trajectory], max_rollout_steps, rollout_timeout)
    progress = RolloutProgress(agent, budget=budget)
    # friendly_errors turns SuccessfulRunError ("this run passed; use --mode credit") and the
    # other package errors into one-line messages with exit code 1
    with friendly_errors(), progress:
        result = attribute(
            trajectory,
            agent,
            verifier,
            rollouts=rollouts,
            method=method,
            repair=repair,
            confidence=confidence,
            budget=budget,
            mode=mode,
            executor=progress,
            limits=limits,
            seed=seed,
        )
    explanation = result.explain(trajectory)
    data = build_report(result, trajectory, explanation)
    written = []
    if out_prefix is not None:
        written += write_reports(data, out_prefix)
    if folder is not None:
        written.append(keep_report(folder, data))
    if as_json:
        echo(report_json(data))
    else:
        from ..report.text import render_text

        echo(render_text(data))
        if not no_explain:
            echo("")
            echo(explanation.to_text())
        echo("")
        for path in written:
            echo(f"wrote {path}")
    if otlp_url:  # after the verdict is out: a refused export loses nothing but itself
        trace_id = export_otlp(data, otlp_url)
        echo(f"exported the verdict to {otlp_url} (trace {trace_id})", err=as_json)
    sys.exit(EXIT_DECIDED if result.decided else EXIT_UNDECIDED)
