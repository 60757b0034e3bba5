"""Helpers shared by the report, console, CLI and gate tests (tests/ is on sys.path)."""

from __future__ import annotations

# -- reports: every report a test produces is validated against the shipped schema ------------
import jsonschema  # dev extra; imported here so a missing install fails loudly

from agent_replay.report.schema import load_schema

XSS_SCRIPT = "<script>window.__pwned = 'script'; alert(1)</script>"
XSS_IMG = "<img src=x onerror=\"window.__pwned = 'img'; alert(2)\">"
XSS_SVG = "</title></text><svg onload=\"window.__pwned='svg'\"></svg>"


def assert_valid_report(data: dict) -> dict:
    """Validate against the shipped JSON Schema with jsonschema (never the fallback)."""
    jsonschema.Draft202012Validator(load_schema()).validate(data)
    return data


def evil_agent(ctx, question):
    """An agent whose names, agents and content are all script-injection payloads; it fails
    when step 0 draws the payload (verifier ``evil_verifier``)."""
    with ctx.agent(XSS_IMG):
        choice = ctx.llm(
            XSS_SCRIPT,
            produce=lambda: ctx.rng.choice(["good", "good", XSS_IMG]),
            prompt=XSS_SCRIPT + question,
        )
        ctx.tool(
            "lookup</script><script>window.__pwned='tool'</script>",
            produce=lambda: {"html": XSS_SVG, "echo": choice},
            q=choice,
        )
    return {"answer": choice}


def evil_verifier(result) -> float:
    return 1.0 if result.get("answer") == "good" else 0.0
