"""The JSON Schema of attribution reports, shipped in the package.

``attribution.schema.json`` (draft 2020-12) describes ``AttributionResult.to_dict()`` exactly,
plus the optional ``explanation``, ``trajectory`` and ``rollouts`` keys. Its version is
``REPORT_SCHEMA_VERSION``; a change to the report's shape changes both.

:func:`validate_report` uses the ``jsonschema`` package when it is installed (a dev extra) and
otherwise checks the version and the required top-level keys only. Raises
:class:`ReportSchemaError` (a ``ValueError``) saying where the report is wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

from ..attribution.result import REPORT_SCHEMA_VERSION
from ..errors import AgentReplayError

__all__ = ["SCHEMA_FILE", "ReportSchemaError", "load_schema", "validate_report"]

SCHEMA_FILE = "attribution.schema.json"


class ReportSchemaError(AgentReplayError, ValueError):
    """A report does not match the shipped schema; the message names the path."""


@lru_cache(maxsize=1)
def _schema_text() -> str:
    return resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def load_schema() -> dict[str, Any]:
    """The report schema (a fresh copy; safe to mutate)."""
    return json.loads(_schema_text())


def validate_report(data: Any) -> None:
    """Raise :class:`ReportSchemaError` unless ``data`` is a valid report of this version."""
    if not isinstance(data, Mapping):
        raise ReportSchemaError(f"a report is a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version != REPORT_SCHEMA_VERSION:
        raise ReportSchemaError(
            f"report schema_version {version!r}; this agent-replay reads "
            f"{REPORT_SCHEMA_VERSION!r} (regenerate the report with this version)"
        )
    try:
        import jsonschema
    except ImportError:
        missing = [k for k in load_schema()["required"] if k not in data]
        if missing:
            raise ReportSchemaError(f"report lacks {', '.join(missing)}") from None
        return
    bad = _non_finite(data)
    if bad is not None:
        raise ReportSchemaError(f"report invalid at {bad}: NaN and infinities are not JSON")
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(dict(data)), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ReportSchemaError(f"report invalid at {where}: {first.message}{more}")


def _non_finite(value: Any, path: str = "") -> str | None:
    """The path of the first NaN or infinite number in ``value`` (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "(top level)"
    if isinstance(value, Mapping):
        items: Any = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _non_finite(item, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None
