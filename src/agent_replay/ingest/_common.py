"""Helpers shared by the importers: timestamps, results, and sealing drafts into trajectories."""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ImportFormatError
from ..mapping.assemble import capture_report
from ..mapping.spans import LogEvent, NormalizedSpan
from ..model import Outcome, StepDraft, Trajectory

__all__ = ["Parsed", "Reject", "read_documents", "timestamp_ns", "trajectory_from_drafts"]


class Reject(Exception):
    """A document is not in the expected format: ``message`` and ``position`` (the caller
    adds the source and raises :class:`~agent_replay.errors.ImportFormatError`)."""

    def __init__(self, message: str, position: str = "") -> None:
        self.message = message
        self.position = position
        super().__init__(message)

    def located(self, source: str, line: str = "") -> ImportFormatError:
        """This error as an :class:`ImportFormatError` of ``source``, at ``line`` (if any)
        followed by :attr:`position`."""
        position = ": ".join(p for p in (line, self.position) if p)
        return ImportFormatError(self.message, source=source, position=position)


@dataclass
class Parsed:
    """What one source held. OTLP sources give spans and log records (assembled together with
    those of the other files of the same import, because a trace can span files); the other
    formats give finished trajectories, an agent-replay store its sessions (read one at a time
    from ``store``), LangSmith files their runs (``runs``, a :class:`.langsmith.LangSmithRuns`,
    assembled with those of the other files of the same import, because the runs of a trace
    and the patches that complete them can be in several files). ``rejected`` lists records
    that were skipped."""

    format: str
    source: str
    spans: list[NormalizedSpan] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    store: Any = None  # another agent-replay store, open read-only: its sessions, one by one
    runs: Any = None  # LangSmith runs (langsmith.LangSmithRuns), not yet assembled


def read_documents(
    doc: Any,
    is_format: Callable[[Any], bool],
    read_one: Callable[[Any, str], list[Trajectory]],
    what: str,
    expected: str,
) -> list[Trajectory]:
    """``read_one(document, position prefix)`` for ``doc`` or for each document of a list;
    raises :class:`Reject` ("not ``what``") for one that ``is_format`` refuses."""
    if isinstance(doc, list):
        out = []
        for i, item in enumerate(doc):
            if not is_format(item):
                raise Reject(f"not {what}", f"[{i}]")
            out.extend(read_one(item, f"[{i}]."))
        return out
    if not is_format(doc):
        raise Reject(f"not {what} (expected {expected})")
    return read_one(doc, "")


def timestamp_ns(value: Any) -> int | None:
    """Nanoseconds since the epoch from an ISO-8601 string or a number (seconds,
    milliseconds, microseconds or nanoseconds, told apart by magnitude); ``None`` if unreadable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if isinstance(value, float):
            if not math.isfinite(value) or value < 0:
                return None
            # the decimal the float was written as, not its binary neighbour: 1728803137.17 s
            # is ...170000000 ns, not ...169999872
            number = decimal.Decimal(repr(value))
        elif value < 0:
            return None
        else:
            number = decimal.Decimal(value)
        for limit, scale in ((10**17, 1), (10**14, 1_000), (10**11, 1_000_000)):
            if number >= limit:
                return int(number * scale)
        return int(number * 1_000_000_000)
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.isdigit():
        return timestamp_ns(int(text))
    # LangSmith's dotted_order form: 20241013T070537170001Z
    if len(text) == 22 and text[8] == "T" and text.endswith("Z") and text[:8].isdigit():
        try:
            moment = _dt.datetime.strptime(text, "%Y%m%dT%H%M%S%fZ").replace(
                tzinfo=_dt.timezone.utc
            )
        except ValueError:
            return None
        return _ns(moment)
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    fraction = ""
    # fromisoformat before 3.11 accepts only 3 or 6 fractional digits: keep the digits aside
    if "." in text:
        head, _, rest = text.partition(".")
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        fraction, text = digits, head + rest
    try:
        moment = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return _ns(moment) + int((fraction + "000000000")[:9] or 0)


def _ns(moment: _dt.datetime) -> int:
    epoch = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
    delta = moment - epoch
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def trajectory_from_drafts(
    session_id: str,
    drafts: Sequence[StepDraft],
    *,
    source: str,
    task: Any = None,
    outcome: Outcome | None = None,
    metadata: Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> Trajectory:
    """A sealed trajectory whose metadata holds ``source`` and the capture report (plus
    ``notes`` the importer wants readers of the report to see)."""
    meta: dict[str, Any] = {"source": source}
    meta.update(metadata or {})
    meta["capture"] = capture_report(drafts)
    meta["capture"]["notes"].extend(notes)
    return Trajectory(session_id=session_id, task=task, outcome=outcome, metadata=meta).with_steps(
        list(drafts)
    )
