"""The console's pages: sessions, step viewer, branch graph, attribution reports, diff.

Every page is built with :func:`html.escape` on every value that comes from the store or a
report (session ids, step names and content, agents, fork interventions, capture notes), and
is sent with a Content-Security-Policy that allows no script at all: escaping is the defence,
the policy is the seat belt. URLs carry ids in query strings built with
:func:`urllib.parse.urlencode`, never spliced raw.

:class:`Console` is thread-safe: request threads share it; store reads run on a fixed pool of
two threads so the number of SQLite connections stays bounded however many requests arrive.
Errors become pages (404 for an unknown session or report, 409 for a session that fails its
integrity check, 500 otherwise); nothing raises out of :meth:`Console.handle`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

from ..errors import ChainIntegrityError, SessionNotFoundError
from ..model import Trajectory
from ..report._data import clip, trajectory_section
from ..report.html import CSS as REPORT_CSS
from ..report.html import h, pretty, render_html
from ..report.schema import ReportSchemaError, validate_report
from ..store import CheckpointStore, SessionSummary

__all__ = ["CSP", "Console", "Response", "reports_dir_for"]

_log = logging.getLogger(__name__)
T = TypeVar("T")

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)


def url(path: str, **params: Any) -> str:
    """A same-origin link; parameters encoded, then the whole thing escaped for an attribute."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return h(path + ("?" + query if query else ""))


def reports_dir_for(db: str | os.PathLike[str]) -> Path:
    """Where ``agent-replay attribute`` keeps its reports and the console looks for them."""
    db = Path(db)
    return db.with_name(db.name + ".reports")


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    extra: dict[str, str] = field(default_factory=dict)

    def headers(self) -> list[tuple[str, str]]:
        base = [
            ("Content-Type", self.content_type),
            ("Content-Length", str(len(self.body))),
            ("Content-Security-Policy", CSP),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
            ("Cache-Control", "no-store"),
        ]
        return base + list(self.extra.items())


PAGE_ROWS = 500
"""Sessions a page lists at most (the newest; search narrows the list)."""


class HttpError(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


_PAGE = Template(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>$title · agent-replay console</title>
<style>$css</style></head>
<body><main>
<nav class="top"><a href="/">Sessions</a> · <a href="/graph">Branches</a> ·
<a href="/reports">Attributions</a> · <a href="/diff">Diff</a>
<span class="sub"> · $db</span></nav>
$body
</main></body></html>
"""
)

CSS = (
    REPORT_CSS
    + """
nav.top { margin-bottom:16px; font-size:14px; } nav.top a { color:var(--accent); }
.nowrap { white-space:nowrap; word-break:normal; }
.grid dd { min-width:0; overflow-wrap:anywhere; }
a { color:var(--accent); }
form.inline { display:flex; gap:8px; flex-wrap:wrap; align-items:center; margin:8px 0 14px; }
input[type=search], select { padding:5px 8px; border:1px solid var(--line); border-radius:6px;
  font:inherit; }
button { padding:5px 12px; border-radius:6px; border:1px solid var(--accent);
  background:var(--accent); color:#fff; font:inherit; cursor:pointer; }
.outcome-failed { color:var(--bad); font-weight:600; } .outcome-passed { color:var(--good); }
.hash { font-family:ui-monospace,monospace; font-size:12px; color:var(--muted); }
td.changed { background:#fff4d6; } .cols { display:grid; grid-template-columns:1fr 1fr; gap:14px; }
svg a text { fill:var(--accent); }
"""
)


class Console:
    """The read-only console over the store at ``db`` (see the module docstring).

    ``reports_dir`` holds JSON attribution reports (``attribute`` keeps a copy of each in
    ``DB.reports/``, the default). Raises :class:`StoreError` when ``db`` is not a store.
    """

    def __init__(
        self, db: str | os.PathLike[str], *, reports_dir: str | os.PathLike[str] | None = None
    ) -> None:
        self.db = Path(db)
        self.reports_dir = Path(reports_dir) if reports_dir else reports_dir_for(self.db)
        self._report_cache: dict[tuple[str, int, int], dict[str, Any] | None] = {}
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="agent-replay-console")
        # it only reads: an older store keeps its schema (an older agent-replay can still
        # open it), and a receiver writing into the file meanwhile is seen as it commits
        self.store = self._pool.submit(CheckpointStore, self.db, read_only=True).result()

    def close(self) -> None:
        self._pool.submit(self.store.close).result()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Console:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return self._pool.submit(fn, *args).result()

    # -- dispatch -----------------------------------------------------------------------

    def handle(self, method: str, target: str) -> Response:
        """The response to ``method target``; never raises."""
        if method not in ("GET", "HEAD"):
            return self._error(
                HttpError(405, "Read-only", "The console only reads; use the CLI."),
                {"Allow": "GET, HEAD"},
            )
        parts = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        routes: dict[str, Callable[[dict[str, str]], tuple[str, str]]] = {
            "/": self.sessions_page,
            "/session": self.session_page,
            "/graph": self.graph_page,
            "/reports": self.reports_page,
            "/report": self.report_page,
            "/diff": self.diff_page,
        }
        if parts.path == "/healthz":
            return Response(200, b"ok\n", "text/plain; charset=utf-8")
        page = routes.get(parts.path)
        try:
            if page is None:
                raise HttpError(404, "Not found", f"No page at {parts.path}.")
            title, body = page(query)
            if title == "":  # a full document (the attribution report)
                return Response(200, body.encode("utf-8"))
            return Response(200, self._page(title, body))
        except HttpError as exc:
            return self._error(exc)
        except SessionNotFoundError as exc:
            return self._error(HttpError(404, "No such session", str(exc)))
        except ChainIntegrityError as exc:
            return self._error(
                HttpError(
                    409, "Integrity check failed", f"{exc}. Run `agent-replay verify` on the store."
                )
            )
        except Exception as exc:  # a page must never take the server down
            _log.exception("console: %s failed", target)
            return self._error(HttpError(500, "Internal error", f"{type(exc).__name__}: {exc}"))

    def _page(self, title: str, body: str) -> bytes:
        return _PAGE.substitute(title=h(title), css=CSS, db=h(self.db), body=body).encode("utf-8")

    def _error(self, exc: HttpError, extra: Mapping[str, str] | None = None) -> Response:
        body = (
            f'<h1>{h(exc.title)}</h1><p>{h(exc.message)}</p><p><a href="/">Back to sessions</a></p>'
        )
        return Response(exc.status, self._page(exc.title, body), extra=dict(extra or {}))

    # -- data -----------------------------------------------------------------------------

    def _sessions(self) -> list[SessionSummary]:
        return self._read(self.store.list_sessions)

    def _load(self, session_id: str) -> Trajectory:
        if not session_id:
            raise HttpError(400, "Which session?", "Pass ?id=SESSION.")
        return self._read(self.store.load, session_id)

    def reports(self) -> list[dict[str, Any]]:
        """The JSON reports in :attr:`reports_dir`, newest first; ``error`` says why one that
        looks like a report does not validate (as ``agent-replay report`` checks it: an
        older schema, a hand-made file), so it is listed but not rendered."""
        out = []
        if not self.reports_dir.is_dir():
            return out
        for path in sorted(self.reports_dir.glob("*.json")):
            try:
                stat = path.stat()
                key = (path.name, stat.st_mtime_ns, stat.st_size)
                entry = self._report_cache.get(key)
                if key not in self._report_cache:  # read and checked once per version
                    for stale in [k for k in self._report_cache if k[0] == path.name]:
                        del self._report_cache[stale]
                    self._report_cache[key] = _read_report(path, stat.st_mtime)
                entry = self._report_cache[key]
            except OSError:
                continue
            if entry is not None:
                out.append(entry)
        return sorted(out, key=lambda r: -r["mtime"])

    # -- pages ----------------------------------------------------------------------------

    def sessions_page(self, query: dict[str, str]) -> tuple[str, str]:
        search = query.get("q", "")
        outcome = query.get("outcome", "")
        source = query.get("source", "")
        rows = self._sessions()
        sources = sorted({r.source for r in rows})
        if search:
            needle = search.lower()
            rows = [r for r in rows if needle in r.session_id.lower()]
        if outcome:
            rows = [r for r in rows if r.outcome == outcome]
        if source:
            rows = [r for r in rows if r.source == source]
        attributed = {r["data"]["session_id"] for r in self.reports() if r["error"] is None}
        matching = len(rows)
        rows = rows[-PAGE_ROWS:][::-1]  # the newest first; a store of 50,000 made an 11 MB page

        def options(values: Iterable[str], chosen: str, empty: str) -> str:
            return f'<option value="">{h(empty)}</option>' + "".join(
                f'<option value="{h(v)}"{" selected" if v == chosen else ""}>{h(v)}</option>'
                for v in values
            )

        body = [
            f'<h1>Sessions</h1><div class="sub">{len(rows)} shown'
            + (
                f" (the newest of {matching}: search or filter to find the others)"
                if matching > len(rows)
                else ""
            )
            + "</div>",
            '<form class="inline" method="get" action="/">'
            f'<input type="search" name="q" value="{h(search)}" placeholder="search session ids" aria-label="search">'
            f'<select name="outcome" aria-label="outcome">{options(["failed", "passed", "unknown"], outcome, "any outcome")}</select>'
            f'<select name="source" aria-label="source">{options(sources, source, "any source")}</select>'
            '<button type="submit">Filter</button></form>',
            "<div class='scroll'><table><thead><tr><th>session</th><th>steps</th><th>outcome</th><th>score</th>"
            "<th>source</th><th>forked from</th><th>attribution</th><th>saved</th></tr></thead><tbody>",
        ]
        for r in rows:
            parent = (
                f'<a href="{url("/session", id=r.parent_session)}">{h(clip(r.parent_session, 40))}</a> @ step {h(r.fork_step)}'
                if r.parent_session
                else ""
            )
            score = "-" if r.score is None else f"{r.score:.2f}"
            saved = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.saved_ns / 1e9))
            body.append(
                f'<tr><td><a href="{url("/session", id=r.session_id)}">{h(clip(r.session_id, 60))}</a></td>'
                f'<td class="num">{h(r.steps)}</td><td class="outcome-{h(r.outcome)}">{h(r.outcome)}</td>'
                f'<td class="num">{h(score)}</td><td>{h(r.source)}</td><td>{parent}</td>'
                f'<td>{"yes" if r.session_id in attributed else ""}</td><td class="sub nowrap">{h(saved)}</td></tr>'
            )
        body.append("</tbody></table></div>")
        if not rows:
            body.append(
                "<p>No sessions match. Record or import some: <code>agent-replay demo</code>.</p>"
            )
        return "Sessions", "".join(body)

    def session_page(self, query: dict[str, str]) -> tuple[str, str]:
        session_id = query.get("id", "")
        traj = self._load(session_id)
        children = self._read(self.store.children, session_id)
        # the runs to compare with: its family first (parent, forks), then the newest others
        rows = self._sessions()
        family = (
            {c for c in children} | {traj.lineage.parent_session} if traj.lineage else set(children)
        )
        others = [
            r.session_id for r in rows if r.session_id in family and r.session_id != session_id
        ]
        others += [
            r.session_id
            for r in rows[::-1]
            if r.session_id not in family and r.session_id != session_id
        ][: max(0, PAGE_ROWS - len(others))]
        reports = [r for r in self.reports() if r["data"]["session_id"] == session_id]
        o = traj.outcome
        state = "unknown" if o is None or o.failed is None else ("failed" if o.failed else "passed")
        facts = [
            (
                "outcome",
                f'<span class="outcome-{h(state)}">{h(state)}</span>'
                + ("" if o is None or o.score is None else f" · score {h(f'{o.score:.3f}')}"),
            ),
            ("source", h(traj.source)),
            ("head hash", f'<span class="hash">{h(traj.head_hash)}</span>'),
            ("digest", f'<span class="hash">{h(traj.digest)}</span>'),
            ("seed", h("-" if traj.seed is None else traj.seed)),  # (captured runs have none)
        ]
        if o is not None and o.error:
            facts.append(("error", f"<pre>{h(pretty(dict(o.error)))}</pre>"))
        if traj.lineage is not None:
            lin = traj.lineage
            facts.append(
                (
                    "forked from",
                    f'<a href="{url("/session", id=lin.parent_session)}">{h(lin.parent_session)}</a> at step '
                    f"{h(lin.fork_step)} · intervention <pre>{h(pretty(dict(lin.intervention)))}</pre>",
                )
            )
        if children:
            facts.append(
                (
                    "branches",
                    ", ".join(
                        f'<a href="{url("/session", id=c)}">{h(clip(c, 50))}</a>' for c in children
                    ),
                )
            )
        facts.append(("graph", f'<a href="{url("/graph", id=session_id)}">branch graph</a>'))
        if reports:
            facts.append(
                (
                    "attribution",
                    " · ".join(
                        f'<a href="{url("/report", file=r["file"])}">{h(r["data"]["verdict"])}'
                        f"{'' if r['data'].get('culprit_index') is None else ' · step ' + h(r['data']['culprit_index'])}</a>"
                        for r in reports
                    ),
                )
            )
        facts.append(("task", f"<pre>{h(pretty(traj.task))}</pre>"))
        capture = traj.metadata.get("capture")
        if capture:
            notes = "".join(f"<li>{h(n)}</li>" for n in capture.get("notes") or ())
            facts.append(
                (
                    "capture",
                    (f"<ul>{notes}</ul>" if notes else "nothing reported missing")
                    + f"<details><summary>capture report</summary><pre>{h(pretty(capture))}</pre></details>",
                )
            )
        other_meta = {k: v for k, v in traj.metadata.items() if k != "capture"}
        if other_meta:
            facts.append(
                (
                    "metadata",
                    f"<details><summary>{h(clip(other_meta, 60))}</summary><pre>{h(pretty(other_meta))}</pre></details>",
                )
            )
        compare = (
            '<form class="inline" method="get" action="/diff">'
            f'<input type="hidden" name="a" value="{h(session_id)}">'
            '<label>Compare with <select name="b" aria-label="compare with">'
            + "".join(f'<option value="{h(s)}">{h(clip(s, 60))}</option>' for s in others)
            + '</select></label><button type="submit">Diff</button></form>'
            if others
            else ""
        )
        rows = []
        for s in traj.steps:
            flags = [
                f
                for f, on in (
                    ("side effects", s.side_effects),
                    ("observation-only", not s.resamplable),
                    ("error", bool(s.error)),
                )
                if on
            ]
            blocks = [("inputs", s.inputs), ("action", s.action)]
            if s.observed:
                blocks.append(("observation", s.observation))
            if s.error:
                blocks.append(("error", dict(s.error)))
            if s.attributes:
                blocks.append(("attributes", dict(s.attributes)))
            inner = "".join(f"<b>{h(n)}</b><pre>{h(pretty(v))}</pre>" for n, v in blocks)
            ids = f"span {h(s.span_id)} · trace {h(s.trace_id)}" if s.span_id else "no span id"
            rows.append(
                f'<tr id="step-{h(s.index)}"><td class="num">{h(s.index)}</td>'
                f'<td><b>{h(s.label)}</b><div class="sub">{h(", ".join(flags))}</div></td>'
                f"<td>{h(s.agent or '-')}</td>"
                f"<td><details><summary>{h(clip(s.output, 70))}</summary>{inner}</details></td>"
                f'<td class="hash" title="{h(s.step_hash)}">{h(s.step_hash[:12])}…'
                f"<div>in {h(s.input_hash[:10])}… out {h(s.output_hash[:10])}…</div><div>{ids}</div></td></tr>"
            )
        body = (
            f'<h1>Session {h(session_id)}</h1><div class="sub">{h(len(traj.steps))} steps</div>'
            + '<dl class="grid">'
            + "".join(f"<dt>{h(k)}</dt><dd>{v}</dd>" for k, v in facts)
            + "</dl>"
            + compare
            + "<h2>Steps</h2><div class='scroll'><table><thead><tr><th>#</th><th>step</th><th>agent</th>"
            "<th>inputs / action / observation</th><th>hashes</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table></div>"
        )
        return f"Session {clip(session_id, 40)}", body

    def graph_page(self, query: dict[str, str]) -> tuple[str, str]:
        rows = {r.session_id: r for r in self._sessions()}
        focus = query.get("id") or None
        if focus is not None and focus not in rows:
            raise SessionNotFoundError(f"no session {focus!r} in {self.db}")
        children: dict[str | None, list[str]] = {}
        for r in rows.values():
            parent = r.parent_session if r.parent_session in rows else None
            children.setdefault(parent, []).append(r.session_id)
        for ids in children.values():
            ids.sort(key=lambda s: rows[s].saved_ns)
        if focus is not None:
            root = focus
            seen = {root}
            while rows[root].parent_session in rows and rows[root].parent_session not in seen:
                root = rows[root].parent_session  # type: ignore[assignment]
                seen.add(root)
            roots = [root]
        else:
            # only trees with at least one fork are interesting here
            roots = [s for s in children.get(None, []) if children.get(s)]
        placed: list[tuple[str, int, int]] = []  # (session, depth, row)

        # depth first, parents before children, with a stack (a chain of forks can be deeper
        # than Python's recursion limit); each session is placed once (a corrupt store could
        # hold a cycle)
        seen: set[str] = set()
        for root in roots:
            stack = [(root, 0)]
            while stack:
                node, depth = stack.pop()
                if node in seen:
                    continue
                seen.add(node)
                placed.append((node, depth, len(placed)))
                stack.extend((child, depth + 1) for child in reversed(children.get(node, [])))
        interventions = {}
        for node, depth, _ in placed:
            if depth:
                try:
                    lineage = self._load(node).lineage
                    interventions[node] = None if lineage is None else dict(lineage.intervention)
                except (ChainIntegrityError, SessionNotFoundError) as exc:
                    interventions[node] = {"unreadable": str(exc)}
        svg = self._graph_svg(placed, rows, interventions, focus)
        table = "".join(
            f'<tr><td><a href="{url("/session", id=node)}">{h(clip(node, 50))}</a></td>'
            f"<td>{h(rows[node].parent_session or '-')}</td><td>{h('-' if rows[node].fork_step is None else rows[node].fork_step)}</td>"
            f"<td><pre>{h(pretty(interventions.get(node)))}</pre></td>"
            f'<td class="outcome-{h(rows[node].outcome)}">{h(rows[node].outcome)}</td></tr>'
            for node, depth, _ in placed
            if depth
        )
        body = "<h1>Branch graph</h1>"
        if not placed:
            body += "<p>No forks yet. Make one with <code>agent-replay fork</code>.</p>"
        else:
            body += (
                '<p class="sub">Each branch is a fork of its parent at a step, under one intervention. '
                "Click a node to open it.</p>"
                + svg
                + "<h2>Forks</h2><div class='scroll'><table><thead><tr><th>branch</th><th>parent</th><th>fork step</th>"
                "<th>intervention</th><th>outcome</th></tr></thead><tbody>"
                + table
                + "</tbody></table></div>"
            )
        return "Branch graph", body

    def _graph_svg(
        self,
        placed: list[tuple[str, int, int]],
        rows: Mapping[str, SessionSummary],
        interventions: Mapping[str, Any],
        focus: str | None,
    ) -> str:
        row_h, col_w, box_w, box_h = 46, 230, 200, 30
        height = max(1, len(placed)) * row_h + 10
        width = (max((d for _, d, _ in placed), default=0) + 1) * col_w + 20
        where = {node: (10 + depth * col_w, 8 + row * row_h) for node, depth, row in placed}
        parts = []
        for node, depth, _ in placed:
            parent = rows[node].parent_session
            if depth and parent in where:
                (px, py), (x, y) = where[parent], where[node]
                parts.append(
                    f'<path d="M{px + box_w} {py + box_h / 2} C{px + box_w + 20} {py + box_h / 2} '
                    f'{x - 20} {y + box_h / 2} {x} {y + box_h / 2}" fill="none" stroke="#9aa3b2"/>'
                    f'<text x="{x - 4}" y="{y - 2}" text-anchor="end">step {h(rows[node].fork_step)}</text>'
                )
        for node, _, _ in placed:
            x, y = where[node]
            r = rows[node]
            color = {"failed": "#c0392b", "passed": "#1e8449"}.get(r.outcome, "#5d6677")
            title = f"{node} · {r.outcome}"
            if node in interventions:
                title += f" · intervention {clip(interventions[node], 120)}"
            stroke = 3 if node == focus else 1.5
            parts.append(
                f'<a href="{url("/session", id=node)}"><title>{h(title)}</title>'
                f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6" fill="#fff" '
                f'stroke="{color}" stroke-width="{stroke}"/>'
                f'<text x="{x + 8}" y="{y + 19}">{h(clip(node, 28))}</text></a>'
            )
        return (
            f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="branch graph">{"".join(parts)}</svg>'
        )

    def reports_page(self, query: dict[str, str]) -> tuple[str, str]:
        reports = self.reports()
        rows = "".join(
            f'<tr><td><a href="{url("/report", file=r["file"])}">{h(clip(r["data"]["session_id"], 50))}</a></td>'
            f"<td>{h(r['data']['verdict'] if r['error'] is None else 'unreadable: ' + clip(r['error'], 80))}</td>"
            f"<td>{h('-' if r['data'].get('culprit_index') is None else str(r['data']['culprit_index']) + ' · ' + str(r['data'].get('culprit_label')))}</td>"
            f"<td>{h(r['data'].get('culprit_agent') or '-')}</td>"
            f'<td class="sub">{h(time.strftime("%Y-%m-%d %H:%M", time.localtime(r["mtime"])))}</td></tr>'
            for r in reports
        )
        body = f'<h1>Attributions</h1><div class="sub">reports in {h(self.reports_dir)}</div>' + (
            "<div class='scroll'><table><thead><tr><th>session</th><th>verdict</th><th>culprit</th><th>agent</th>"
            f"<th>written</th></tr></thead><tbody>{rows}</tbody></table></div>"
            if reports
            else "<p>No attribution reports yet: run <code>agent-replay attribute --db DB --session S "
            "--agent mod:fn --verifier mod:fn</code> (it keeps a copy here), or pass "
            "<code>--reports DIR</code>.</p>"
        )
        return "Attributions", body

    def report_page(self, query: dict[str, str]) -> tuple[str, str]:
        name = query.get("file", "")
        match = next((r for r in self.reports() if r["file"] == name), None)
        if match is None:  # only names listed from the folder: no path tricks
            raise HttpError(
                404, "No such report", f"No report named {name!r} in {self.reports_dir}."
            )
        if match["error"] is not None:
            raise HttpError(
                422,
                "Report not readable",
                f"{name}: {match['error']} (agent-replay report refuses it too)",
            )
        data = dict(match["data"])
        if "trajectory" not in data:
            with contextlib.suppress(SessionNotFoundError):  # the report alone still renders
                data["trajectory"] = trajectory_section(self._load(data["session_id"]))
        page = render_html(data)
        back = (
            '<nav class="top"><a href="/">Sessions</a> · <a href="/reports">Attributions</a> · '
            + (f'<a href="{url("/session", id=data["session_id"])}">this session</a></nav>')
        )
        return "", page.replace("<main>", "<main>" + back, 1)

    def diff_page(self, query: dict[str, str]) -> tuple[str, str]:
        from ..replay.multiverse import diff

        a_id, b_id = query.get("a", ""), query.get("b", "")
        ids = [r.session_id for r in self._sessions()]

        def select(name: str, chosen: str) -> str:
            return (
                f'<select name="{name}" aria-label="run {name}">'
                + "".join(
                    f'<option value="{h(s)}"{" selected" if s == chosen else ""}>{h(clip(s, 60))}</option>'
                    for s in ids
                )
                + "</select>"
            )

        form = (
            '<form class="inline" method="get" action="/diff">'
            f'{select("a", a_id)} vs {select("b", b_id)}<button type="submit">Diff</button></form>'
        )
        if not a_id or not b_id:
            return "Diff", "<h1>Diff two runs</h1>" + form
        a, b = self._load(a_id), self._load(b_id)
        d = diff(a, b)
        first = (
            "they never diverge"
            if d.first_divergence is None
            else f"first divergence at step {d.first_divergence}"
        )
        rows = []
        for s in d.steps:
            # steps are paired by operation: a step only one run has is on its own row, and
            # the positions of a pair can differ (``index`` in a, ``index_b`` in b)
            sa = a.steps[s.index] if s.a is not None else None
            sb = b.steps[s.index_b] if s.b is not None and s.index_b is not None else None
            where = str(s.index) if s.index_b in (s.index, None) else f"{s.index}/{s.index_b}"
            klass = "" if s.same else ' class="changed"'

            def cell(step: Any, klass: str = klass) -> str:
                if step is None:
                    return '<td><span class="muted">—</span></td>'
                return (
                    f'<td{klass}><b>{h(step.label)}</b> <span class="sub">{h(step.agent or "")}</span>'
                    f"<details><summary>{h(clip(step.output, 60))}</summary><b>inputs</b>"
                    f"<pre>{h(pretty(step.inputs))}</pre><b>output</b><pre>{h(pretty(step.output))}</pre></details></td>"
                )

            rows.append(
                f'<tr><td class="num">{h(where)}</td>{cell(sa)}{cell(sb)}<td>{h(", ".join(s.changes) or "same")}</td></tr>'
            )

        def outcome(data: Mapping[str, Any] | None) -> str:
            if not data:
                return "unknown"
            return ("failed" if data.get("failed") else "passed") + (
                "" if data.get("score") is None else f" · score {data['score']}"
            )

        body = (
            f"<h1>Diff</h1>{form}<p>{h(first)}</p><div class='scroll'><table><thead><tr><th>#</th>"
            f'<th><a href="{url("/session", id=a_id)}">{h(clip(a_id, 40))}</a> · {h(outcome(d.outcome_a))}</th>'
            f'<th><a href="{url("/session", id=b_id)}">{h(clip(b_id, 40))}</a> · {h(outcome(d.outcome_b))}</th>'
            "<th>what differs</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
        )
        return "Diff", body


def _read_report(path: Path, mtime: float) -> dict[str, Any] | None:
    """A reports-folder entry: the report, when it was written, and why it does not validate
    (``None`` for a file that is not a report at all)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        # a report cut short (a full disk, a copy interrupted) is listed as unreadable, not
        # hidden; a file that is not even text is not a report
        if isinstance(exc, UnicodeDecodeError) or not isinstance(exc, ValueError):
            return None
        unknown = {"session_id": path.stem, "verdict": "-"}
        return {"file": path.name, "mtime": mtime, "data": unknown, "error": f"not JSON: {exc}"}
    if not isinstance(data, dict) or "session_id" not in data or "verdict" not in data:
        return None
    try:
        validate_report(data)
        error = None
    except ReportSchemaError as exc:
        error = str(exc)
    return {"file": path.name, "mtime": mtime, "data": data, "error": error}
