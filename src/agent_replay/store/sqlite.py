"""The SQLite checkpoint store: content-addressed blobs, hash-keyed steps, sessions by head.

Layout (schema version in ``meta``):

* ``blobs(hash, data)``: canonical bytes of step inputs and outputs, one row per distinct
  content, shared by every step, session and fork that holds it.
* ``steps(hash, prev, idx, header)``: a step's hashed header (its content by hash); keyed by
  ``step_hash``, so a prefix shared by a fork and its parent is stored once.
* ``sessions(session_id, head, header, digest, ...)``: a trajectory is its head step plus the
  session header (task, seed, outcome, lineage, metadata); the chain is walked back from the
  head through ``prev``.
* ``pending_spans`` / ``pending_logs`` (schema 2): spans and log records the OTLP receiver has
  acknowledged but not yet assembled into trajectories (``state`` 0), and, for a while after
  assembly (``state`` 1), the spans of assembled traces so that late spans re-assemble the
  whole trace. Rows are keyed by trace and span id (log records by a digest of their content),
  so a retried export is stored once.

Schema history: 1 → 2 added the two pending tables. A schema-1 file is migrated in place, in
one transaction, the first time this version opens it (nothing else changes, so everything in
it stays readable); a schema-2 file is refused by agent-replay versions that only know 1.

Loading checks every blob hash, every step hash, every link and the session digest, and raises
:class:`ChainIntegrityError` at the first mismatch: a tampered or corrupted session never
loads silently. The file is in WAL mode and writes take ``BEGIN IMMEDIATE`` with a busy
timeout, so several threads and processes can write to one file. Each thread gets its own
connection.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import canonical
from ..errors import ChainIntegrityError, SessionNotFoundError, StoreError
from ..model import GENESIS_HASH, Lineage, Outcome, Step, StepKind, Trajectory

__all__ = ["CheckpointStore", "SessionSummary", "VerifyResult"]

SCHEMA_VERSION = 2
APPLICATION_ID = 0x41525031  # "ARP1": marks the file as an agent-replay store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (hash TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS steps (
    hash TEXT PRIMARY KEY, prev TEXT NOT NULL, idx INTEGER NOT NULL, header BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    head TEXT NOT NULL,
    n_steps INTEGER NOT NULL,
    header BLOB NOT NULL,
    digest TEXT NOT NULL,
    source TEXT,
    failed INTEGER,
    score REAL,
    parent_session TEXT,
    fork_step INTEGER,
    saved_ns INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_session);
CREATE TABLE IF NOT EXISTS pending_spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    data BLOB NOT NULL,
    is_root INTEGER NOT NULL,
    received_ns INTEGER NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pending_spans_state ON pending_spans(state, trace_id);
CREATE TABLE IF NOT EXISTS pending_logs (
    digest TEXT PRIMARY KEY,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    data BLOB NOT NULL,
    received_ns INTEGER NOT NULL,
    state INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pending_logs_trace ON pending_logs(trace_id, state);
"""

_CHAIN_QUERY = """
WITH RECURSIVE chain(hash, prev, idx, header, depth) AS (
    SELECT hash, prev, idx, header, 0 FROM steps WHERE hash = ?
    UNION ALL
    SELECT s.hash, s.prev, s.idx, s.header, c.depth + 1
    FROM steps AS s JOIN chain AS c ON s.hash = c.prev
    WHERE c.depth < ?
)
SELECT hash, prev, idx, header FROM chain ORDER BY depth DESC
"""


@dataclass(frozen=True)
class SessionSummary:
    """One row of :meth:`CheckpointStore.list_sessions`."""

    session_id: str
    steps: int
    failed: bool | None
    score: float | None
    source: str
    parent_session: str | None
    fork_step: int | None
    saved_ns: int

    @property
    def outcome(self) -> str:
        if self.failed is None:
            return "unknown"
        return "failed" if self.failed else "passed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "steps": self.steps,
            "outcome": self.outcome,
            "score": self.score,
            "source": self.source,
            "parent_session": self.parent_session,
            "fork_step": self.fork_step,
            "saved_ns": self.saved_ns,
        }


@dataclass(frozen=True)
class VerifyResult:
    """Result of verifying one session: ``ok``, or the first bad step and what is wrong."""

    session_id: str
    ok: bool
    steps: int
    step_index: int | None = None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "ok": self.ok,
            "steps": self.steps,
            "step_index": self.step_index,
            "problem": self.problem,
        }


class CheckpointStore:
    """A SQLite file of content-addressed, hash-chained trajectories.

    Thread-safe (one connection per thread); several processes may write the same file.
    Raises :class:`StoreError` when ``path`` is not an agent-replay store.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, durable: bool = True, busy_timeout: float = 30.0
    ) -> None:
        self.path = Path(path)
        self._durable = durable
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._init_schema()

    # -- connections ----------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreError(f"{self.path}: store is closed")
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'NORMAL'}")
            conn.execute("PRAGMA foreign_keys=OFF")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a usable SQLite database ({exc})") from exc
        self._local.conn = conn
        with self._lock:
            self._connections.append(conn)
        return conn

    def _init_schema(self) -> None:
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as handle:
                if handle.read(16) != b"SQLite format 3\x00":
                    raise StoreError(
                        f"{self.path}: not a SQLite database (agent-replay store expected)"
                    )
        conn = self._conn()
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if app_id not in (0, APPLICATION_ID) or (
                tables and app_id == 0 and "meta" not in tables
            ):
                raise StoreError(
                    f"{self.path}: a SQLite database but not an agent-replay store "
                    f"(tables: {', '.join(sorted(tables)) or 'none'}); pass a new file name"
                )
            if "meta" in tables:
                row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path}: written by a newer agent-replay (schema {version}, this "
                        f"version reads up to {SCHEMA_VERSION}); upgrade agent-replay"
                    )
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            # migration 1 → 2: the statements above added the pending tables
            conn.execute(
                "UPDATE meta SET value=? WHERE key='schema_version' AND CAST(value AS INTEGER) < ?",
                (str(SCHEMA_VERSION), SCHEMA_VERSION),
            )
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(
                f"{self.path}: cannot be opened as an agent-replay store ({exc})"
            ) from exc

    def close(self) -> None:
        """Close every connection this store opened (from any thread)."""
        with self._lock:
            self._closed = True
            for conn in self._connections:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._connections.clear()
        self._local = threading.local()

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --------------------------------------------------------------------------

    def save(self, trajectory: Trajectory, *, replace: bool = True) -> str:
        """Store ``trajectory`` atomically; returns its session digest.

        Blobs and steps already present (from other sessions or forks) are not written again.
        With ``replace=False`` an existing session with a different digest raises
        :class:`StoreError`.
        """
        self.save_many([trajectory], replace=replace)
        return trajectory.digest

    def save_many(self, trajectories: list[Trajectory], *, replace: bool = True) -> None:
        """Store several trajectories in one transaction (all or nothing)."""
        rows = self._rows(trajectories)
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._write(conn, rows, replace=replace)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _rows(self, trajectories: list[Trajectory]) -> tuple[dict, dict, list]:
        """Blob, step and session rows (encoded before any transaction starts)."""
        blobs: dict[str, bytes] = {}
        steps: dict[str, tuple] = {}
        sessions = []
        now = time.time_ns()
        for traj in trajectories:
            for step in traj.steps:
                blobs.setdefault(step.input_hash, step.input_bytes or canonical.encode(step.inputs))
                if step.output_hash not in blobs:
                    blobs[step.output_hash] = step.output_bytes or canonical.encode(
                        step.output_payload()
                    )
                if step.step_hash not in steps:
                    header = step.header_bytes or canonical.encode(step.header())
                    steps[step.step_hash] = (step.step_hash, step.prev_hash, step.index, header)
            header_bytes = canonical.encode(traj.header())
            outcome, lineage = traj.outcome, traj.lineage
            sessions.append(
                (
                    traj.session_id,
                    traj.head_hash,
                    len(traj.steps),
                    header_bytes,
                    canonical.digest(header_bytes),
                    traj.source,
                    None if outcome is None or outcome.failed is None else int(outcome.failed),
                    None if outcome is None else outcome.score,
                    None if lineage is None else lineage.parent_session,
                    None if lineage is None else lineage.fork_step,
                    now,
                )
            )
        return blobs, steps, sessions

    def _write(self, conn: sqlite3.Connection, rows: tuple, *, replace: bool) -> None:
        blobs, steps, sessions = rows
        if not replace:
            for row in sessions:
                old = conn.execute(
                    "SELECT digest FROM sessions WHERE session_id=?", (row[0],)
                ).fetchone()
                if old is not None and old[0] != row[4]:
                    raise StoreError(
                        f"session {row[0]!r} already exists in {self.path} with other "
                        "content; choose another session id"
                    )
        conn.executemany("INSERT OR IGNORE INTO blobs(hash, data) VALUES (?, ?)", blobs.items())
        conn.executemany(
            "INSERT OR IGNORE INTO steps(hash, prev, idx, header) VALUES (?, ?, ?, ?)",
            steps.values(),
        )
        conn.executemany(
            "INSERT OR REPLACE INTO sessions(session_id, head, n_steps, header, digest, "
            "source, failed, score, parent_session, fork_step, saved_ns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            sessions,
        )

    # -- the receiver's pending spans ------------------------------------------------------

    def add_pending(
        self, spans: list[tuple[str, str, bytes, bool]], logs: list[tuple[str, str, str, bytes]]
    ) -> tuple[int, int]:
        """Durably store received spans ``(trace_id, span_id, data, is_root)`` and log records
        ``(digest, trace_id, span_id, data)`` in one transaction; returns how many of each were
        new (a span or record already stored, from a retried export, is not stored again).
        When this returns, the rows survive a crash."""
        now = time.time_ns()
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO pending_spans(trace_id, span_id, data, is_root, "
                "received_ns) VALUES (?, ?, ?, ?, ?)",
                [(t, s, d, int(r), now) for t, s, d, r in spans],
            )
            new_spans = conn.total_changes - before
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO pending_logs(digest, trace_id, span_id, data, "
                "received_ns) VALUES (?, ?, ?, ?, ?)",
                [(h, t, s, d, now) for h, t, s, d in logs],
            )
            new_logs = conn.total_changes - before
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return new_spans, new_logs

    def ready_traces(self, *, idle_ns: int, force: bool = False) -> list[str]:
        """Traces with spans or log records waiting to be assembled whose local root span has
        arrived, or whose last arrival is ``idle_ns`` old (every waiting trace when ``force``)."""
        cutoff = time.time_ns() - idle_ns
        rows = (
            self._conn()
            .execute(
                """
            WITH waiting(trace_id, last) AS (
                SELECT trace_id, MAX(received_ns) FROM pending_spans WHERE state=0
                GROUP BY trace_id
                UNION ALL
                SELECT trace_id, MAX(received_ns) FROM pending_logs WHERE state=0
                GROUP BY trace_id
            )
            SELECT w.trace_id, MAX(w.last),
                   EXISTS(SELECT 1 FROM pending_spans r WHERE r.trace_id=w.trace_id
                          AND r.is_root=1),
                   EXISTS(SELECT 1 FROM pending_spans r WHERE r.trace_id=w.trace_id)
            FROM waiting AS w GROUP BY w.trace_id
            """
            )
            .fetchall()
        )
        return [
            trace
            for trace, last, has_root, has_spans in rows
            if has_spans and (force or has_root or last <= cutoff)
        ]

    def pending_rows(self, trace_ids: list[str]) -> tuple[list[tuple], list[tuple]]:
        """Every stored span ``(trace_id, span_id, data)`` and log record ``(digest, data)``
        of ``trace_ids``, assembled or not."""
        conn = self._conn()
        spans: list[tuple] = []
        logs: list[tuple] = []
        for start in range(0, len(trace_ids), 500):
            chunk = trace_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT trace_id, span_id, data FROM pending_spans WHERE trace_id IN ({marks})"
            spans.extend(conn.execute(query, chunk))
            logs.extend(
                conn.execute(
                    f"SELECT digest, data FROM pending_logs WHERE trace_id IN ({marks})", chunk
                )
            )
        return spans, logs

    def commit_assembled(
        self,
        trajectories: list[Trajectory],
        spans: list[tuple[str, str]],
        logs: list[str],
    ) -> None:
        """Save ``trajectories`` and mark the span ``(trace_id, span_id)`` and log-record
        ``digest`` rows they were built from as assembled, in one transaction (rows that
        arrived meanwhile stay waiting, so they are assembled next time)."""
        rows = self._rows(trajectories)
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._write(conn, rows, replace=True)
            conn.executemany(
                "UPDATE pending_spans SET state=1 WHERE trace_id=? AND span_id=?", spans
            )
            conn.executemany("UPDATE pending_logs SET state=1 WHERE digest=?", [(d,) for d in logs])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def purge_pending(self, *, older_than_ns: int) -> int:
        """Forget assembled spans (and log records that never found their span) received
        before ``older_than_ns`` ago; returns rows deleted. Late spans of a purged trace are
        assembled on their own and merged into the stored session."""
        cutoff = time.time_ns() - older_than_ns
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            before = conn.total_changes
            conn.execute(
                "DELETE FROM pending_spans WHERE state=1 AND trace_id IN ("
                "SELECT trace_id FROM pending_spans GROUP BY trace_id "
                "HAVING MAX(state)=1 AND MIN(state)=1 AND MAX(received_ns) < ?)",
                (cutoff,),
            )
            conn.execute("DELETE FROM pending_logs WHERE received_ns < ?", (cutoff,))
            deleted = conn.total_changes - before
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return deleted

    def pending_counts(self) -> dict[str, int]:
        """Rows in the pending tables: waiting and assembled spans and log records."""
        conn = self._conn()
        out = {}
        for table in ("pending_spans", "pending_logs"):
            for state, name in ((0, "waiting"), (1, "assembled")):
                out[f"{table.split('_')[1]}_{name}"] = conn.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE state=?", (state,)
                ).fetchone()[0]
        return out

    def delete(self, session_id: str) -> None:
        """Forget a session (its blobs and steps stay while other sessions share them)."""
        conn = self._conn()
        conn.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))

    # -- reading --------------------------------------------------------------------------

    def __contains__(self, session_id: object) -> bool:
        row = (
            self._conn()
            .execute("SELECT 1 FROM sessions WHERE session_id=?", (session_id,))
            .fetchone()
        )
        return row is not None

    def session_ids(self) -> list[str]:
        return [
            r[0]
            for r in self._conn().execute(
                "SELECT session_id FROM sessions ORDER BY saved_ns, session_id"
            )
        ]

    def list_sessions(self, *, search: str | None = None) -> list[SessionSummary]:
        """Summaries of every session (optionally whose id contains ``search``), oldest first."""
        sql = (
            "SELECT session_id, n_steps, failed, score, source, parent_session, fork_step, "
            "saved_ns FROM sessions"
        )
        args: tuple = ()
        if search:
            sql += " WHERE instr(session_id, ?) > 0"
            args = (search,)
        sql += " ORDER BY saved_ns, session_id"
        return [
            SessionSummary(
                session_id=r[0],
                steps=r[1],
                failed=None if r[2] is None else bool(r[2]),
                score=r[3],
                source=r[4] or "native",
                parent_session=r[5],
                fork_step=r[6],
                saved_ns=r[7],
            )
            for r in self._conn().execute(sql, args)
        ]

    def children(self, session_id: str) -> list[str]:
        """Sessions forked from ``session_id``."""
        return [
            r[0]
            for r in self._conn().execute(
                "SELECT session_id FROM sessions WHERE parent_session=? ORDER BY saved_ns",
                (session_id,),
            )
        ]

    def load(self, session_id: str) -> Trajectory:
        """The stored trajectory, every hash checked.

        Raises :class:`SessionNotFoundError` for an unknown id and
        :class:`ChainIntegrityError` naming the first bad step for a damaged session.
        """
        conn = self._conn()
        row = conn.execute(
            "SELECT head, n_steps, header, digest FROM sessions WHERE session_id=?", (session_id,)
        ).fetchone()
        if row is None:
            raise SessionNotFoundError(f"no session {session_id!r} in {self.path}")
        head, n_steps, session_header, session_digest = row

        def broken(problem: str, index: int | None = None) -> ChainIntegrityError:
            where = "session header" if index is None else f"step {index}"
            return ChainIntegrityError(
                f"session {session_id!r}: {where}: {problem}",
                session_id=session_id,
                step_index=index,
            )

        chain = conn.execute(_CHAIN_QUERY, (head, n_steps)).fetchall() if n_steps else []
        if head != GENESIS_HASH and not chain:
            raise broken("head step is missing", n_steps - 1 if n_steps else None)
        # chain is ordered genesis-first; walk it and check links and hashes
        wanted = set()
        headers = []
        prev = GENESIS_HASH
        for position, (step_hash, step_prev, idx, header_bytes) in enumerate(chain):
            if position == 0 and step_prev != GENESIS_HASH:
                raise broken(
                    "chain does not reach the genesis step (steps missing)",
                    0 if n_steps == len(chain) else None,
                )
            if canonical.digest(bytes(header_bytes)) != step_hash:
                raise broken("stored header does not match its hash", position)
            try:
                header = canonical.decode(bytes(header_bytes))
            except ValueError as exc:
                raise broken(f"stored header is not readable ({exc})", position) from None
            if step_prev != prev or header.get("prev") != prev:
                raise broken("prev_hash does not link to the previous step", position)
            if idx != position or header.get("index") != position:
                raise broken(f"index {idx} at position {position}", position)
            headers.append((step_hash, header, bytes(header_bytes)))
            wanted.add(header["input_hash"])
            wanted.add(header["output_hash"])
            prev = step_hash
        if len(chain) != n_steps:
            raise broken(f"{len(chain)} steps found, {n_steps} recorded", len(chain))
        if prev != head:
            raise broken("chain does not end at the session head", n_steps - 1)

        blobs = self._blobs(wanted)
        steps = []
        for position, (step_hash, header, header_bytes) in enumerate(headers):
            try:
                input_bytes = blobs[header["input_hash"]]
                output_bytes = blobs[header["output_hash"]]
            except KeyError:
                raise broken("content blob is missing", position) from None
            if canonical.digest(input_bytes) != header["input_hash"]:
                raise broken("inputs do not match input_hash", position)
            if canonical.digest(output_bytes) != header["output_hash"]:
                raise broken("outputs do not match output_hash", position)
            try:
                steps.append(
                    _step_from_stored(step_hash, header, header_bytes, input_bytes, output_bytes)
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise broken(f"stored step is not readable ({exc})", position) from None

        session_header = bytes(session_header)
        if canonical.digest(session_header) != session_digest:
            raise broken("session header does not match its digest")
        try:
            data = canonical.decode(session_header)
            traj = Trajectory(
                session_id=data["session_id"],
                steps=tuple(steps),
                task=data.get("task"),
                seed=data.get("seed"),
                outcome=Outcome.from_dict(data.get("outcome")),
                lineage=Lineage.from_dict(data.get("lineage")),
                metadata=data.get("metadata") or {},
                effects=tuple(tuple(e) for e in data.get("effects") or ()),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise broken(f"session header is not readable ({exc})") from None
        if data.get("head") != head or traj.session_id != session_id:
            raise broken("session header does not match the stored head")
        return traj

    def _blobs(self, hashes: set[str]) -> dict[str, bytes]:
        conn = self._conn()
        found: dict[str, bytes] = {}
        ordered = list(hashes)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for h, data in conn.execute(
                f"SELECT hash, data FROM blobs WHERE hash IN ({marks})", chunk
            ):
                found[h] = bytes(data)
        return found

    def load_all(self) -> Iterator[Trajectory]:
        for session_id in self.session_ids():
            yield self.load(session_id)

    def verify(self, session_id: str | None = None) -> list[VerifyResult]:
        """Check one session (or all): every blob, step and session hash and every link."""
        ids = [session_id] if session_id is not None else self.session_ids()
        results = []
        for sid in ids:
            try:
                traj = self.load(sid)
            except ChainIntegrityError as exc:
                row = (
                    self._conn()
                    .execute("SELECT n_steps FROM sessions WHERE session_id=?", (sid,))
                    .fetchone()
                )
                results.append(
                    VerifyResult(sid, False, row[0] if row else 0, exc.step_index, str(exc))
                )
            else:
                results.append(VerifyResult(sid, True, len(traj.steps)))
        return results

    def stats(self) -> dict[str, int]:
        """Row counts: how much the CAS is sharing."""
        conn = self._conn()
        return {
            table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("sessions", "steps", "blobs")
        }


def _step_from_stored(
    step_hash: str, header: dict, header_bytes: bytes, input_bytes: bytes, output_bytes: bytes
) -> Step:
    output = canonical.decode(output_bytes)
    started, ended = header["timing"]
    trace_id, span_id, parent_span_id = header["ids"]
    return Step(
        index=header["index"],
        kind=StepKind(header["kind"]),
        name=header["name"],
        inputs=canonical.decode(input_bytes),
        action=output.get("action"),
        observation=output.get("observation"),
        observed="observation" in output,
        agent=header["agent"],
        resamplable=header["resamplable"],
        side_effects=header["side_effects"],
        error=output.get("error"),
        started_ns=started,
        ended_ns=ended,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        attributes=header["attributes"],
        prev_hash=header["prev"],
        input_hash=header["input_hash"],
        output_hash=header["output_hash"],
        step_hash=step_hash,
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        header_bytes=header_bytes,
    )
