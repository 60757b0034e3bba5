"""What users see after an attribution: JSON schema, text summary, explanation, HTML, OTel.

Every renderer accepts an :class:`~agent_replay.attribution.AttributionResult` or the report
dict it serialises to (``to_dict()`` / a loaded ``report.json``), so reports regenerate from
JSON unchanged.
"""

from ..attribution.result import REPORT_SCHEMA_VERSION
from .explain import Explanation, TraceEntry, explain, point_of_no_return
from .html import render_html, write_html
from .otel import to_otel
from .schema import ReportSchemaError, load_schema, validate_report
from .text import render_text

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "Explanation",
    "ReportSchemaError",
    "TraceEntry",
    "explain",
    "load_schema",
    "point_of_no_return",
    "render_html",
    "render_text",
    "to_otel",
    "validate_report",
    "write_html",
]
