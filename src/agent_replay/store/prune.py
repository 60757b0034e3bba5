"""Deleting sessions and the rows no session uses any more (``CheckpointStore.prune``).

Steps and blobs are content-addressed and shared (a fork shares its parent's prefix, the
sessions of one agent share their system prompt), so deleting a session deletes only its
row; the step rows and blobs it alone used stay until a prune finds that no remaining session
reaches them. Merging a trace into a stored conversation leaves rows behind too: the steps
after the first one that moved get new rows, the old ones are reached by no session.

Everything here runs on one connection inside the caller's write transaction: no writer
can add a reference to a row between the moment it is found unused and its deletion.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import canonical
from ..errors import StoreError

__all__ = ["PruneResult", "prune"]

# Every step a session reaches: its head, then each step's predecessor (UNION keeps each
# once, so prefixes shared by forks are walked once).
_LIVE_STEPS = """
INSERT INTO temp.live_steps(hash)
WITH RECURSIVE live(hash) AS (
    SELECT head FROM main.sessions
    UNION
    SELECT s.prev FROM main.steps AS s JOIN live ON s.hash = live.hash
)
SELECT hash FROM live
"""


@dataclass(frozen=True)
class PruneResult:
    """What :meth:`CheckpointStore.prune` deleted (or, with ``dry_run``, would delete):
    ``sessions``, then the ``steps`` rows and ``blobs`` (``blob_bytes`` of content) that no
    remaining session uses."""

    sessions: list[str] = field(default_factory=list)
    steps: int = 0
    blobs: int = 0
    blob_bytes: int = 0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": list(self.sessions),
            "steps": self.steps,
            "blobs": self.blobs,
            "blob_bytes": self.blob_bytes,
            "dry_run": self.dry_run,
        }


def prune(
    conn: sqlite3.Connection,
    session_ids: Collection[str],
    saved_before_ns: int | None,
) -> PruneResult:
    """Delete ``session_ids`` and the sessions last saved before ``saved_before_ns`` (ns since
    the epoch), then every step row and blob no remaining session reaches, on ``conn`` (in a
    write transaction: the caller commits or rolls back)."""
    doomed = dict.fromkeys(session_ids)
    if saved_before_ns is not None:
        doomed.update(
            dict.fromkeys(
                sid
                for (sid,) in conn.execute(
                    "SELECT session_id FROM sessions WHERE saved_ns < ? ORDER BY saved_ns",
                    (saved_before_ns,),
                )
            )
        )
    deleted = []
    for session_id in doomed:
        if conn.execute("DELETE FROM sessions WHERE session_id=?", (session_id,)).rowcount:
            conn.execute("DELETE FROM session_traces WHERE session_id=?", (session_id,))
            deleted.append(session_id)
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS live_steps(hash TEXT PRIMARY KEY) WITHOUT ROWID")
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS live_blobs(hash TEXT PRIMARY KEY) WITHOUT ROWID")
    try:
        conn.execute(_LIVE_STEPS)
        conn.executemany(
            "INSERT OR IGNORE INTO temp.live_blobs(hash) VALUES (?)",
            ((address,) for address in _live_blobs(conn)),
        )
        steps = conn.execute(
            "DELETE FROM main.steps WHERE hash NOT IN (SELECT hash FROM temp.live_steps)"
        ).rowcount
        (blob_bytes,) = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM main.blobs "
            "WHERE hash NOT IN (SELECT hash FROM temp.live_blobs)"
        ).fetchone()
        blobs = conn.execute(
            "DELETE FROM main.blobs WHERE hash NOT IN (SELECT hash FROM temp.live_blobs)"
        ).rowcount
    finally:
        conn.execute("DELETE FROM temp.live_steps")
        conn.execute("DELETE FROM temp.live_blobs")
    return PruneResult(deleted, steps, blobs, blob_bytes)


def _live_blobs(conn: sqlite3.Connection) -> Iterator[str]:
    """Where the inputs and output of every reached step are stored; a step header that
    cannot be read stops the prune (its blobs cannot be told from unused ones)."""
    rows = conn.execute(
        "SELECT s.hash, s.header FROM main.steps AS s JOIN temp.live_steps AS l ON s.hash = l.hash"
    )
    for step_hash, header_bytes in rows:
        try:
            header = canonical.decode(header_bytes)
            addresses = [header.get(f"{part}_blob") or header[f"{part}_hash"] for part in _PARTS]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(
                f"step {step_hash} cannot be read ({exc}), so the content it uses cannot be "
                "told from unused content: nothing was pruned (agent-replay verify names the "
                "damaged session; prune it by its id first)"
            ) from None
        for address in addresses:
            if not isinstance(address, str):
                raise StoreError(
                    f"step {step_hash} names its content with a {type(address).__name__}: "
                    "nothing was pruned (agent-replay verify names the damaged session)"
                )
            yield address


_PARTS = ("input", "output")
