"""Deleting sessions and the rows no session uses any more (``CheckpointStore.prune``).

Steps and blobs are content-addressed and shared (a fork shares its parent's prefix, the
sessions of one agent share their system prompt), so deleting a session deletes only its
row; the step rows and blobs it alone used stay until a prune finds that no remaining session
reaches them. Merging a trace into a stored conversation leaves rows behind too: the steps
after the first one that moved get new rows, the old ones are reached by no session.

Everything here runs on one connection inside the caller's transaction: a write transaction
for a prune (no writer can add a reference to a row between the moment it is found unused
and its deletion), a read transaction for a dry run (which only counts).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import canonical
from ..canonical import GENESIS_HASH
from ..errors import StoreError

__all__ = ["PruneResult", "apply", "clear", "survey"]

_TEMP = {
    "doomed": "session_id TEXT PRIMARY KEY",
    "heads": "session_id TEXT PRIMARY KEY, head TEXT NOT NULL",  # of the remaining, surveyed
    "live_steps": "hash TEXT PRIMARY KEY",
    "new_live": "hash TEXT PRIMARY KEY",  # reached by sessions written since the survey
    "live_blobs": "hash TEXT PRIMARY KEY",
    "dead_steps": "hash TEXT PRIMARY KEY",  # unused when surveyed: what may be deleted
    "dead_blobs": "hash TEXT PRIMARY KEY",
    "gone_traces": "trace_id TEXT PRIMARY KEY",
}

# Every step the given heads reach: each head, then each step's predecessor (UNION keeps each
# once, so prefixes shared by forks are walked once).
_WALK = """
INSERT OR IGNORE INTO temp.{into}(hash)
WITH RECURSIVE live(hash) AS (
    {heads}
    UNION
    SELECT s.prev FROM main.steps AS s JOIN live ON s.hash = live.hash
)
SELECT hash FROM live
"""
_REMAINING_HEADS = (
    "SELECT head FROM main.sessions WHERE session_id NOT IN (SELECT session_id FROM temp.doomed)"
)
# sessions written since the survey (a new head, or none then: new, or kept from deletion)
_CHANGED_HEADS = """
SELECT s.head FROM main.sessions AS s LEFT JOIN temp.heads AS h ON h.session_id = s.session_id
WHERE s.session_id NOT IN (SELECT session_id FROM temp.doomed)
  AND (h.head IS NULL OR h.head != s.head)
"""

# Traces only deleted sessions held: their spans and log records the receiver keeps (for
# late spans, --retain-seconds) go too, or a late span would bring the session back.
_GONE_TRACES = """
INSERT OR IGNORE INTO temp.gone_traces(trace_id)
SELECT DISTINCT trace_id FROM main.session_traces
WHERE session_id IN (SELECT session_id FROM temp.doomed)
  AND trace_id NOT IN (
    SELECT trace_id FROM main.session_traces
    WHERE session_id NOT IN (SELECT session_id FROM temp.doomed)
  )
"""

_DEAD_STEPS = "FROM main.steps WHERE hash IN (SELECT hash FROM temp.dead_steps)"
_DEAD_BLOBS = "FROM main.blobs WHERE hash IN (SELECT hash FROM temp.dead_blobs)"
_GONE_SPANS = "FROM main.pending_spans WHERE trace_id IN (SELECT trace_id FROM temp.gone_traces)"
_GONE_LOGS = "FROM main.pending_logs WHERE trace_id IN (SELECT trace_id FROM temp.gone_traces)"


@dataclass(frozen=True)
class PruneResult:
    """What :meth:`CheckpointStore.prune` deleted (or, with ``dry_run``, would delete):
    ``sessions``, then the ``steps`` rows and ``blobs`` (``blob_bytes`` of content) that no
    remaining session uses, and the ``pending`` span and log rows the receiver kept of traces
    only those sessions held."""

    sessions: list[str] = field(default_factory=list)
    steps: int = 0
    blobs: int = 0
    blob_bytes: int = 0
    pending: int = 0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": list(self.sessions),
            "steps": self.steps,
            "blobs": self.blobs,
            "blob_bytes": self.blob_bytes,
            "pending": self.pending,
            "dry_run": self.dry_run,
        }


def survey(
    conn: sqlite3.Connection, session_ids: Collection[str], saved_before_ns: int | None
) -> PruneResult:
    """What a prune of ``session_ids`` and the sessions last saved before ``saved_before_ns``
    (ns since the epoch) would delete: every step row and blob no other session reaches, and
    the pending rows of traces only they held. Read in the caller's read transaction (no
    lock: writers go on), and left in this connection's temp tables for :func:`apply`.
    Raises :class:`StoreError` when a remaining session's chain is damaged (a step missing,
    a header that cannot be read or does not link as its row does): the content it uses
    could not be told from unused content."""
    for name, columns in _TEMP.items():
        conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name}({columns}) WITHOUT ROWID")
    clear(conn)
    doomed = _doomed(conn, session_ids, saved_before_ns)
    conn.executemany("INSERT INTO temp.doomed(session_id) VALUES (?)", ((s,) for s in doomed))
    conn.execute(
        "INSERT INTO temp.heads(session_id, head) SELECT session_id, head FROM main.sessions "
        "WHERE session_id NOT IN (SELECT session_id FROM temp.doomed)"
    )
    conn.execute(_WALK.format(into="live_steps", heads=_REMAINING_HEADS))
    _check_chains(conn, "live_steps")
    _add_live_blobs(conn, "live_steps")
    conn.execute(
        "INSERT INTO temp.dead_steps(hash) SELECT hash FROM main.steps "
        "WHERE hash NOT IN (SELECT hash FROM temp.live_steps)"
    )
    conn.execute(
        "INSERT INTO temp.dead_blobs(hash) SELECT hash FROM main.blobs "
        "WHERE hash NOT IN (SELECT hash FROM temp.live_blobs)"
    )
    tables = _tables(conn)
    if "session_traces" in tables:
        conn.execute(_GONE_TRACES)
    (steps,) = conn.execute("SELECT COUNT(*) FROM temp.dead_steps").fetchone()
    blobs, blob_bytes = conn.execute(
        f"SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) {_DEAD_BLOBS}"
    ).fetchone()
    rows = sum(conn.execute(f"SELECT COUNT(*) {q}").fetchone()[0] for q in _pending(tables))
    return PruneResult(doomed, steps, blobs, blob_bytes, rows, dry_run=True)


def apply(
    conn: sqlite3.Connection, session_ids: Collection[str], saved_before_ns: int | None
) -> PruneResult:
    """Delete what :func:`survey` found on this connection, in the caller's write
    transaction: the sessions that still match (a conversation continued since is kept),
    and of the rows unused when surveyed, those no session written since reaches (only
    those sessions are walked again: the write lock is held for them, not for the store)."""
    doomed = _doomed(conn, session_ids, saved_before_ns)
    conn.execute("DELETE FROM temp.doomed")
    conn.executemany("INSERT INTO temp.doomed(session_id) VALUES (?)", ((s,) for s in doomed))
    conn.execute(_WALK.format(into="new_live", heads=_CHANGED_HEADS))
    _check_chains(conn, "new_live")
    _add_live_blobs(conn, "new_live")
    for table in ("dead_steps", "dead_blobs"):
        live = "new_live" if table == "dead_steps" else "live_blobs"
        conn.execute(f"DELETE FROM temp.{table} WHERE hash IN (SELECT hash FROM temp.{live})")
    tables = _tables(conn)
    conn.execute("DELETE FROM temp.gone_traces")  # (again: a session may hold them since)
    if "session_traces" in tables:
        conn.execute(_GONE_TRACES)
    for table in ("sessions", "session_traces"):
        if table in tables:
            conn.execute(
                f"DELETE FROM main.{table} WHERE session_id IN (SELECT session_id FROM temp.doomed)"
            )
    (blob_bytes,) = conn.execute(f"SELECT COALESCE(SUM(LENGTH(data)), 0) {_DEAD_BLOBS}").fetchone()
    steps = conn.execute(f"DELETE {_DEAD_STEPS}").rowcount
    blobs = conn.execute(f"DELETE {_DEAD_BLOBS}").rowcount
    rows = sum(conn.execute(f"DELETE {query}").rowcount for query in _pending(tables))
    return PruneResult(doomed, steps, blobs, blob_bytes, rows)


def clear(conn: sqlite3.Connection) -> None:
    """Empty the temp tables of a survey (they live as long as the connection)."""
    for name in _TEMP:
        conn.execute(f"DELETE FROM temp.{name}")


def _tables(conn: sqlite3.Connection) -> set[str]:
    # (a store older than the trace index or the pending tables, read for a dry run, has
    # neither: nothing of them to count)
    return {name for (name,) in conn.execute("SELECT name FROM main.sqlite_master")}


def _pending(tables: set[str]) -> list[str]:
    """The pending rows of the gone traces, in the tables the store has."""
    return [q for q, t in ((_GONE_SPANS, "pending_spans"), (_GONE_LOGS, "pending_logs"))
            if t in tables]  # fmt: skip


def _doomed(
    conn: sqlite3.Connection, session_ids: Collection[str], saved_before_ns: int | None
) -> list[str]:
    """The stored sessions among ``session_ids``, then those saved before the time."""
    doomed = dict.fromkeys(
        sid
        for sid in session_ids
        if conn.execute("SELECT 1 FROM sessions WHERE session_id=?", (sid,)).fetchone()
    )
    if saved_before_ns is not None:
        query = "SELECT session_id FROM sessions WHERE saved_ns < ? ORDER BY saved_ns"
        doomed.update(dict.fromkeys(sid for (sid,) in conn.execute(query, (saved_before_ns,))))
    return list(doomed)


def _check_chains(conn: sqlite3.Connection, walked: str) -> None:
    """Every walk (into temp table ``walked``) reached the genesis step: none stopped at a
    step whose row is missing (the steps before it would look unused)."""
    missing = conn.execute(
        f"SELECT hash FROM temp.{walked} WHERE hash != ? "
        "AND hash NOT IN (SELECT hash FROM main.steps) LIMIT 1",
        (GENESIS_HASH,),
    ).fetchone()
    if missing is not None:
        raise StoreError(
            f"a session's chain is broken (step {missing[0]} is missing), so the steps and "
            "content before the break cannot be told from unused ones: nothing was pruned "
            "(agent-replay verify names the damaged session; prune it by its id first)"
        )


def _add_live_blobs(conn: sqlite3.Connection, walked: str) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO temp.live_blobs(hash) VALUES (?)",
        ((address,) for address in _live_blobs(conn, walked)),
    )


def _live_blobs(conn: sqlite3.Connection, walked: str) -> Iterator[str]:
    """Where the inputs and output of every step in temp table ``walked`` are stored; a step
    header that cannot be read, or that names another predecessor than its row, stops the
    prune."""
    rows = conn.execute(
        "SELECT s.hash, s.prev, s.header FROM main.steps AS s "
        f"JOIN temp.{walked} AS l ON s.hash = l.hash"
    )
    for step_hash, prev, header_bytes in rows:
        try:
            header = canonical.decode(header_bytes)
            addresses = [header.get(f"{part}_blob") or header[f"{part}_hash"] for part in _PARTS]
            linked = header["prev"] == prev
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problem = f"cannot be read ({exc})"
        else:
            problem = None if linked else "names another predecessor than its row"
            if problem is None and not all(isinstance(a, str) for a in addresses):
                problem = "names its content with something other than a string"
        if problem is not None:
            raise StoreError(
                f"step {step_hash} {problem}, so the content it uses cannot be told from "
                "unused content: nothing was pruned (agent-replay verify names the damaged "
                "session; prune it by its id first)"
            )
        yield from addresses


_PARTS = ("input", "output")
