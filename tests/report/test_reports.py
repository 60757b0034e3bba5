"""Reports: schema, text, explanation, HTML (escaping, offline) - on real attributions."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest

from agent_replay.cli.attribute import build_report
from agent_replay.report import (
    ReportSchemaError,
    explain,
    point_of_no_return,
    render_html,
    render_text,
    validate_report,
)
from agent_replay.report._data import trajectory_section
from agent_replay.report.html import embed_json
from surface_helpers import XSS_IMG, XSS_SCRIPT, assert_valid_report

ROOT = Path(__file__).resolve().parents[2]


def full_report(traj, result):
    """The report as ``attribute`` writes it: result, explanation and recorded run."""
    return build_report(result, traj, explain(result, traj))


# -- schema ---------------------------------------------------------------------------------


def test_every_shape_of_report_validates(demo_attribution, evil_attribution):
    for traj, result in (demo_attribution, evil_attribution):
        assert_valid_report(result.to_dict())
        assert_valid_report(full_report(traj, result))
        assert_valid_report(json.loads(result.to_json(explanation=result.explain(traj))))
        validate_report(full_report(traj, result))


def test_schema_catches_drift(demo_attribution):
    traj, result = demo_attribution
    good = full_report(traj, result)
    broken = []
    missing = copy.deepcopy(good)
    del missing["verdict"]
    broken.append(missing)
    extra = copy.deepcopy(good)
    extra["new_field_nobody_documented"] = 1
    broken.append(extra)
    wrong = copy.deepcopy(good)
    wrong["steps"][0]["effect"] = "big"
    broken.append(wrong)
    role = copy.deepcopy(good)
    role["explanation"]["trace"][0]["role"] = "villain"
    broken.append(role)
    for data in broken:
        with pytest.raises(jsonschema.ValidationError):
            assert_valid_report(data)
        with pytest.raises(ReportSchemaError):
            validate_report(data)
    old = copy.deepcopy(good)
    old["schema_version"] = "0.9"
    with pytest.raises(ReportSchemaError, match="schema_version"):
        validate_report(old)


def test_schema_version_matches_the_code():
    from agent_replay.attribution.result import REPORT_SCHEMA_VERSION
    from agent_replay.report import load_schema

    assert load_schema()["properties"]["schema_version"]["const"] == REPORT_SCHEMA_VERSION


@pytest.mark.slow
def test_schema_ships_in_the_wheel(tmp_path):
    def build_wheel(*options):
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", *options, "-q"]
        return subprocess.run(
            [*command, "-w", str(tmp_path), str(ROOT)],
            capture_output=True,
            text=True,
            timeout=240,
        )

    out = build_wheel("--no-build-isolation")
    if out.returncode != 0 and "hatchling" in out.stderr:
        out = build_wheel()
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "agent_replay/report/attribution.schema.json" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]" in text and "agent_replay.pytest_plugin" in text


# -- text and explanation --------------------------------------------------------------------


def test_text_summary_puts_the_verdict_first(demo_attribution):
    traj, result = demo_attribution
    text = render_text(result, traj)
    lines = text.splitlines()
    assert lines[2].startswith("CULPRIT  step 2 · llm:choose_policy · agent policy")
    assert "separated" in lines[4]
    assert "REPAIR   step 2: refund_policy_2019 -> refund_policy_2026" in text
    assert re.search(r"^> 2  llm:choose_policy .*\|#+", text, re.M)
    assert "COST" in text and "FIDELITY" in text and "WARNING" in text
    assert result.to_text(traj) == text
    # from the JSON, the same text
    assert render_text(json.loads(result.to_json()), trajectory_section(traj)) == text


def test_explanation_of_the_demo(demo_attribution):
    traj, result = demo_attribution
    ex = result.explain(traj)
    assert ex.verdict == "separated"
    assert "Step 2 · llm:choose_policy" in ex.where
    assert "refund_policy_2019" in ex.why and "F(2)" in ex.why and "F(3)" in ex.why
    assert "refund_policy_2026" in ex.fix
    roles = {t.index: t.role for t in ex.trace}
    assert roles[2] == "decisive"
    assert roles[6] == "observation-only"
    assert roles[0] == roles[1] == "neutral"
    # where the failure is locked in depends on the rollouts drawn (the demo's receipt uuid
    # makes every recording, so every session's rollouts, different): check its definition
    por = ex.point_of_no_return
    assert 2 < por <= len(traj.steps)
    assert all(roles[i] in ("locked-in", "observation-only") for i in roles if i >= por)
    assert "locked-in" not in [roles[i] for i in roles if i < por]
    assert list(roles.values()).count("decisive") == 1
    text = ex.to_text()
    assert text.index("What") < text.index("Where") < text.index("Why") < text.index("Fix")
    assert "point of no return" in text


def test_explanation_is_honest_when_undecided(demo_attribution):
    traj, result = demo_attribution
    data = result.to_dict()
    data.update(
        culprit_index=None,
        culprit_agent=None,
        culprit_label=None,
        verdict="undecided",
        stop_reason="budget",
        repair=None,
        decisive=[],
    )
    for step in data["steps"]:
        step["decisive"] = False
    ex = explain(data, traj)
    assert ex.where.startswith("Undecided")
    assert "step 2" in ex.where  # the leading candidate is named, not crowned
    assert "decisive" not in {t.role for t in ex.trace}
    assert "No fix to propose" in ex.fix
    assert_valid_report({**data, "explanation": ex.to_dict()})


def test_point_of_no_return():
    def curve(*rates):
        return [
            {
                "position": i,
                "failure_rate": r,
                "interval": {"low": max(0, r - 0.05), "high": min(1, r + 0.05)},
            }
            for i, r in enumerate(rates)
        ]

    assert point_of_no_return(curve(0.1, 0.1, 0.9, 1.0, 1.0), 4) == 3
    assert point_of_no_return(curve(1.0, 1.0, 1.0), 2) == 0  # locked in from the start
    assert point_of_no_return(curve(0.0, 0.1, 0.2), 2) is None  # replay does not reproduce
    assert point_of_no_return(curve(0.0, 0.5, 1.0), 2) == 2
    # F(2) = 1.00 from 8 rollouts, [0.50, 1.00]: it covers F(n) but does not show that
    # re-drawing steps 2-3 changes nothing (their true effect was 0.19)
    few = curve(0.1, 0.2, 1.0, 1.0, 1.0)
    few[2]["interval"] = {"low": 0.5, "high": 1.0}
    assert point_of_no_return(few, 4) == 3
    few[2]["interval"] = {"low": 0.91, "high": 1.0}  # many rollouts: within the margin
    assert point_of_no_return(few, 4) == 2
    # steps 2 and 3 are never re-drawn (observation-only): F(2) is F(4) by construction
    few[2]["interval"] = {"low": 0.5, "high": 1.0}
    assert point_of_no_return(few, 4, held={2, 3}) == 2


# -- HTML -------------------------------------------------------------------------------------


class Inventory(HTMLParser):
    """Every tag, attribute and script element of a page."""

    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.scripts, self._in_script = [], [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append([dict(attrs), ""])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None:
            self.scripts[-1][1] += data


def test_html_escapes_every_recorded_value(evil_attribution):
    traj, result = evil_attribution
    page = render_html(result, traj)
    assert XSS_SCRIPT not in page and XSS_IMG not in page
    assert "<svg onload" not in page and "</script><script>" not in page
    inv = Inventory()
    inv.feed(page)
    # the only script is the inert JSON block, and no element carries an event handler
    assert [s[0] for s in inv.scripts] == [
        {"type": "application/json", "id": "agent-replay-report"}
    ]
    assert not [name for name, _ in inv.attrs if name.startswith("on")]
    assert "img" not in inv.tags
    # the embedded JSON parses back to the report, payloads intact
    embedded = json.loads(inv.scripts[0][1])
    assert embedded["session_id"] == traj.session_id
    assert embedded["trajectory"]["steps"][0]["name"] == XSS_SCRIPT
    assert_valid_report(embedded)
    # and the payload text is visible to a reader, escaped
    assert "&lt;script&gt;window.__pwned" in page


def test_html_is_offline_and_complete(demo_attribution, tmp_path):
    traj, result = demo_attribution
    path = tmp_path / "report.html"
    page = result.to_html(path, traj)
    assert path.read_text() == page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)
    assert "Content-Security-Policy" in page
    for anchor in ('id="verdict"', 'id="timeline"', 'id="curves"', 'id="cost"', "<details>"):
        assert anchor in page
    assert page.index('id="verdict"') < page.index('id="timeline"') < page.index('id="curves"')
    assert page.count("<svg") >= len(traj.steps) + 1
    assert "Culprit: step 2 · llm:choose_policy" in page


def test_html_regenerates_identically_from_json(demo_attribution):
    traj, result = demo_attribution
    direct = render_html(result, traj)
    loaded = json.loads(result.to_json(trajectory=trajectory_section(traj)))
    assert render_html(loaded) == direct


def test_embed_json_cannot_close_the_script():
    text = embed_json({"a": "</script><script>alert(1)</script>", "b": "\u2028&"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text)["a"].startswith("</script>")


def test_chart_labels_fit_inside_the_chart():
    """The tick labels and the axis title sit inside the viewBox with room for descenders
    (11px text): the axis title's baseline was the chart's last pixel and was clipped."""
    import re

    from agent_replay.report.html import _chart

    svg = _chart([(0, 0.2, 0.1, 0.3), (5, 0.9, None, None)], 5, title="t", y_label="F(i)")
    height = float(re.search(r'viewBox="0 0 [\d.]+ ([\d.]+)"', svg).group(1))
    texts = re.findall(r'<text x="[^"]*" y="([\d.]+)"[^>]*>([^<]*)</text>', svg)
    title = next(float(y) for y, text in texts if text.startswith("prefix position"))
    ticks = [float(y) for y, text in texts if text == "5"]  # the last x tick
    assert title <= height - 4  # room for descenders: "p", "(", ")"
    assert ticks and title - max(ticks) >= 14  # the tick row and the title do not touch


def test_a_step_no_rollout_pair_compared_is_shown_as_not_measured(demo_attribution):
    """An interval of the whole [-1, 1] means nothing compared the step; the text table and
    the HTML showed it as an effect of +0.00."""
    import copy

    from agent_replay.report import render_html, render_text

    traj, result = demo_attribution
    data = copy.deepcopy(result.to_dict())
    step = next(s for s in data["steps"] if s["segment"] == [s["index"], s["index"] + 1]
                and not s["observation_only"] and s["index"] != data["culprit_index"])  # fmt: skip
    step["effect"] = 0.0
    step["interval"] = {**step["interval"], "low": -1.0, "high": 1.0}
    text = render_text(data)
    row = next(line for line in text.splitlines() if f"{step['kind']}:{step['name']}" in line)
    assert "not measured" in row and "+0.00" not in row
    assert "not measured" in render_html(data, traj)


def test_a_segment_starting_with_an_observation_only_step_still_shows_its_total(
    demo_attribution,
):
    """The total went on the segment's first row, which an observation-only step shows as
    "held": the text had it nowhere (the HTML had it)."""
    _, result = demo_attribution
    data = copy.deepcopy(result.to_dict())
    first, second, third = data["steps"][3:6]
    interval = {"low": -0.25, "high": 0.75, "confidence": 0.95, "method": "test"}
    for step in (first, second, third):
        step.update(segment=[3, 6], segment_effect=0.25, segment_interval=interval)
    first["observation_only"] = True
    table = render_text(data).splitlines()
    rows = {int(line[1:3]): line for line in table if line[1:3].strip().isdigit()}
    assert "held" in rows[3] and "together" not in rows[3]
    assert "steps 3-5 together +0.25 [-0.25, +0.75]" in rows[4]
    assert "(in steps 3-5)" in rows[5]


@pytest.mark.parametrize(
    "fixture,span_id",
    [
        ("langsmith/langsmith_py_wrap_openai_.json", r"^[0-9a-f]{32}$"),  # a run id
        ("langfuse/google-vertex-tools-langchain-2025-09-19.json", r"^vertex-"),
    ],
)
def test_a_report_of_a_backend_export_keeps_its_ids_and_is_valid(fixture, span_id):
    """The ids of a Langfuse or LangSmith export are the backend's own: the report keeps them
    (the schema used to require OTel hex ids, so such reports were refused by `report` and
    the console), and no OTel link is made of them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agent_replay import attribute, replayable_agent
    from agent_replay.ingest import load
    from agent_replay.replay.policies import ScriptedPolicy
    from conftest import FIXTURES

    (trajectory,) = load(FIXTURES / fixture)
    first = trajectory.steps[0]  # its first step says "good" half the time
    agent = replayable_agent(trajectory, {first.name: ScriptedPolicy(["good", "bad"])})

    def verifier(result):
        return float('"good"' in json.dumps(result, default=str))

    result = attribute(trajectory, agent, verifier, rollouts=16)
    data = assert_valid_report(json.loads(result.to_json()))
    assert data["culprit_index"] == 0
    assert data["trace_id"] == first.trace_id
    assert re.match(span_id, data["culprit_span_id"])
    validate_report(data)  # what `agent-replay report` and the console check
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result.to_otel(provider, trajectory=trajectory)
    root = next(s for s in exporter.get_finished_spans() if s.name == "agent_replay.attribution")
    assert root.attributes["agent_replay.original_trace_id"] == data["trace_id"]
    assert not root.links


def _odd_agent(ctx, kind):
    """A run whose values are storable but not plain JSON."""
    odd = {
        "datetime": __import__("datetime").datetime(2024, 1, 1, 12, 30),
        "set": {3, 1, 2},
        "nan": float("nan"),
        "inf": {"hi": float("inf"), "lo": float("-inf")},
    }[kind]
    plan = ctx.llm("plan", produce=lambda: {"value": odd}, kind=kind)
    pick = ctx.tool("pick", produce=lambda: "bad" if ctx.rng.random() < 0.8 else "ok", plan=plan)
    return {"answer": pick, "extra": odd}


@pytest.mark.parametrize("kind", ["datetime", "set", "nan", "inf"])
def test_a_run_whose_values_are_not_plain_json_gives_a_valid_report(kind, tmp_path):
    """A result holding a datetime or a set became the repr *string* of the whole outcome, so
    the explanation crashed (``'str' object has no attribute 'get'``) after every rollout was
    spent; NaN and infinities were written bare, JSON that ``agent-replay report``, the console
    and browsers refuse."""
    from agent_replay import attribute, record

    def verifier(result):
        return 1.0 if result["answer"] == "ok" else 0.0

    traj = record(_odd_agent, {"kind": kind}, seed=1, verifier=verifier)
    assert traj.outcome.failed
    result = attribute(traj, _odd_agent, verifier, budget=200)
    data = full_report(traj, result)
    from agent_replay.cli.attribute import report_json

    text = report_json(data)
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    validate_report(strict)
    assert isinstance(strict["trajectory"]["outcome"], dict)
    assert "Culprit" in render_text(strict) or "CULPRIT" in render_text(strict)
    explain(result, traj).to_text()
    page = render_html(data)
    embedded = re.search(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
    json.loads(embedded.group(1), parse_constant=lambda name: pytest.fail(f"bare {name}"))
    json.loads(result.to_json(), parse_constant=lambda name: pytest.fail(f"bare {name}"))


def test_html_shows_control_and_bidi_characters_instead_of_obeying_them():
    """An unclosed U+202E in a task reversed the report's own sentences after it in the
    browser ("100%" read "%001")."""
    from agent_replay import attribute, record

    def agent(ctx, q):
        return ctx.tool("pick", produce=lambda: "bad" if ctx.rng.random() < 0.8 else "ok", q=q)

    def verifier(result):
        return 1.0 if result == "ok" else 0.0

    traj = record(agent, {"q": "please \u202eobviously fine\x1b[0m"}, seed=1, verifier=verifier)
    result = attribute(traj, agent, verifier, budget=100)
    page = render_html(full_report(traj, result))
    body = page.split('<script type="application/json"')[0]
    assert "\u202e" not in body and "\x1b" not in body
    assert "please \\u202eobviously fine\\u001b[0m" in body


def test_previews_show_what_a_recorded_sdk_reply_says():
    """A step recorded through the SDK interception holds the SDK's object in an envelope;
    the explanation and the repair showed two identical cut-off envelopes
    (``{"__agent_replay__": "pydantic", "type": "openai.types.chat…``), so a user could not
    see the fix."""
    from agent_replay.report._data import preview

    def envelope(kind, data):
        return {"__agent_replay__": "pydantic", "type": kind, "data": data}

    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "w", "arguments": '{"city": "Lyon"}'},
    }
    completion = envelope(
        "openai.types.chat.chat_completion.ChatCompletion",
        {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]},
    )
    assert preview(completion, 80) == 'assistant: w({"city": "Lyon"})'
    message = envelope(
        "anthropic.types.message.Message",
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "t", "name": "w", "input": {"city": "Paris"}},
            ],
        },
    )
    assert preview(message, 80) == 'assistant: checking | assistant: w({"city": "Paris"})'
    kwargs = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "model": "m"}
    assert preview(kwargs, 80) == "user: Weather in Paris?"
    other = envelope("openai.types.CreateEmbeddingResponse", {"data": [{"embedding": [0.1]}]})
    assert preview(other, 80).startswith('{"data": [{"embedding"')


def test_long_quiet_stretches_are_cut_to_their_ends_in_text():
    """A 300-step run printed 631 lines: every step in the table and again in the causal
    trace. A segment the search did not split, and a run of steps of one quiet role, show
    their ends and how many steps are between; JSON and HTML keep every step."""
    from agent_replay import attribute, record

    def agent(ctx):
        bad = False
        for i in range(40):
            if i == 20:
                bad = ctx.llm("decide", produce=lambda: ctx.rng.random() < 0.8) is True
            else:
                ctx.tool(f"t{i}", produce=lambda: ctx.rng.random() < 0.5, i=i)
        return {"bad": bad}

    def verifier(result):
        return 0.0 if result["bad"] else 1.0

    traj = record(agent, seed=2, verifier=verifier)
    assert traj.outcome.failed
    result = attribute(traj, agent, verifier)
    assert result.culprit_index == 20
    text = render_text(result)
    assert "… 17 more steps (2-18) of the segment 0-19 …" in text
    assert len(text.splitlines()) < 25 and "\n  20  llm:decide" not in text
    assert ">20  llm:decide" in text
    trace = result.explain(traj).to_text()
    assert re.search(r"… \d+ more (neutral|locked-in) steps \(\d+-\d+\) …", trace)
    assert len(trace.splitlines()) < 25
    assert len(result.explain(traj).trace) == 40 and len(result.to_dict()["steps"]) == 40
