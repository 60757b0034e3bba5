"""The SQLite checkpoint store: content-addressed blobs, hash-keyed steps, sessions by head.

Layout (schema version in ``meta``):

* ``blobs(hash, data)``: stored bytes of step inputs and outputs (see
  :mod:`agent_replay.canonical`), keyed by their digest, one row per distinct content, shared
  by every step, session and fork that holds it. A step's header names its content by its
  canonical hash and, when the stored bytes differ from the canonical ones (a dict whose keys
  are not in sorted order), the blob they are in (``input_blob`` / ``output_blob``).
* ``steps(hash, prev, idx, header)``: a step's hashed header (its content by hash); keyed by
  ``step_hash``, so a prefix shared by a fork and its parent is stored once.
* ``sessions(session_id, head, header, digest, ...)``: a trajectory is its head step plus the
  session header (task, seed, outcome, lineage, metadata); the chain is walked back from the
  head through ``prev``.
* ``pending_spans`` / ``pending_logs`` (schema 2): spans and log records the OTLP receiver has
  acknowledged but not yet assembled into trajectories (``state`` 0), and, for a while after
  assembly (``state`` 1), the spans of assembled traces so that late spans re-assemble the
  whole trace. Rows are keyed by trace and span id (log records by a digest of their content),
  so a retried export is stored once; they are stored in the order they arrived (rowid
  tables, the key a unique index: see ``_PENDING_TABLES``).
* ``session_traces(trace_id, session_id)`` (schema 3): which sessions hold steps of which
  OTel trace, written with the session rows, so that spans of a trace stored earlier (late
  spans, another service's part of a distributed trace, the next file of an import, spans
  received after a restart) join the session the trace went to. An index derived from the
  hashed session headers (``metadata["trace_ids"]``), not part of any hash.

Schema history: 1 → 2 added the two pending tables; 2 → 3 the trace index, filled from the
stored session headers; 3 → 4 the step headers' blob addresses (no table changes: a version-3
file reads as it is, every dict's keys in sorted order, the only order it kept). An older
file is migrated in place, in one transaction, the first time this version opens it (nothing
else changes, so everything in it stays readable); a file of a newer schema is refused by
agent-replay versions that do not know it.

Loading checks every blob hash, every step hash, every link and the session digest, and raises
:class:`ChainIntegrityError` at the first mismatch: a tampered or corrupted session never
loads silently. The summary columns of ``sessions`` (source, outcome, lineage, step count) are
copies of the hashed session header kept for listing; loading checks them too. Only
``saved_ns`` (when the row was written, used for ordering) is outside every hash.

The file is in WAL mode and writes take ``BEGIN IMMEDIATE`` with a busy timeout, so several
threads and processes can write to one file. Each thread gets its own connection, and a process
forked after the store was opened opens fresh connections instead of using inherited ones
(SQLite connections must not cross ``fork()``). SQLite failures (a corrupt file, a lock held
past the busy timeout, a read-only file) arrive as :class:`StoreError`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import canonical
from ..errors import ChainIntegrityError, SessionChangedError, SessionNotFoundError, StoreError
from ..model import (
    GENESIS_HASH,
    NOT_LOADED,
    Continuation,
    Lineage,
    Outcome,
    SessionEnd,
    Step,
    StepKind,
    Trajectory,
    session_header_bytes,
)
from . import prune as pruning
from .prune import PruneResult

__all__ = ["CheckpointStore", "PruneResult", "SessionSummary", "VerifyResult", "open_store"]

SCHEMA_VERSION = 4
PAGE_SIZE = 8192
"""Of a new store: a step's header (a row of ``steps``, a WITHOUT ROWID table) is kept whole
on its page up to about 2 KB, where 4096-byte pages spilled rows of about 1 KB onto overflow
pages (the blob addresses of schema 4 made capture's store stage 1.7x slower with 4 KiB
pages: ``benchmarks/compare.py``, see docs/store.md)."""
WAL_LIMIT_BYTES = 64 << 20
"""What the write-ahead log is truncated to after a checkpoint."""
# what SQLite raises on a damaged file: its errors, and text (its own messages included) that
# is not UTF-8
_SQLITE_FAILURES = (sqlite3.DatabaseError, UnicodeDecodeError)
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
CREATE TABLE IF NOT EXISTS session_traces (
    trace_id TEXT NOT NULL, session_id TEXT NOT NULL, PRIMARY KEY (trace_id, session_id)
);
CREATE INDEX IF NOT EXISTS session_traces_session ON session_traces(session_id);
"""

# The receiver's pending tables (schema 2): their columns, and the indexes every store has.
# Rowid tables (their key, trace and span id or a log record's digest, a unique index beside
# them), so that rows are stored in the order they arrive: a commit of received spans fills
# the table's last pages, marking a trace assembled rewrites the recent pages its rows are on,
# and the purge empties the first pages; a row is kept whole on its page up to about 8 KB.
# Stores made before were WITHOUT ROWID tables ordered by that key: every commit's traces went
# to random pages of the table (and split them), rows over about 2 KB spilled onto overflow
# pages, and a receiver wrote more to disk per span received (docs/receiver.md, "Disk
# writes"). Every statement reads and writes both layouts alike, so a store of the
# older one works as it is (as does a store of this one for a version that knows only the
# older); a receiver moves an older store's tables to rowid tables when it starts
# (:meth:`CheckpointStore.index_pending`).
_PENDING_TABLES = {
    "pending_spans": """
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    data BLOB NOT NULL,
    is_root INTEGER NOT NULL,
    received_ns INTEGER NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (trace_id, span_id)
""",
    "pending_logs": """
    digest TEXT PRIMARY KEY,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    data BLOB NOT NULL,
    received_ns INTEGER NOT NULL,
    state INTEGER NOT NULL DEFAULT 0
""",
}
_PENDING_TABLE_INDEXES = {
    "pending_spans_state": ("pending_spans", "state, trace_id"),
    "pending_logs_trace": ("pending_logs", "trace_id, state"),
}
# Indexes of the pending tables that no schema version requires (a store without them reads
# and writes the same, slower): new stores have them, and a receiver adds them to an older
# store when it starts. Without them, the purge and every look for traces ready to assemble
# read the whole tables, span data included (the purge, under the write lock every minute:
# 0.55 s at 100k spans of 4 kB, 1.2 s at 150k).
_PENDING_INDEXES = {
    "pending_spans_received": ("pending_spans", "received_ns"),
    "pending_logs_received": ("pending_logs", "received_ns"),
    "pending_logs_waiting": ("pending_logs", "state, trace_id, received_ns"),
}


def _pending_statements(table: str | None = None) -> list[str]:
    """The statements that make the pending tables (only ``table`` if given) and all their
    indexes, where they are missing."""
    tables = [table] if table is not None else list(_PENDING_TABLES)
    indexes = {**_PENDING_TABLE_INDEXES, **_PENDING_INDEXES}
    return [f"CREATE TABLE IF NOT EXISTS {name} ({_PENDING_TABLES[name]})" for name in tables] + [
        f"CREATE INDEX IF NOT EXISTS {name} ON {on}({columns})"
        for name, (on, columns) in indexes.items()
        if on in tables
    ]


_TABLES = frozenset({"meta", "blobs", "steps", "sessions"})

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
    Raises :class:`StoreError` when ``path`` is not an agent-replay store. ``read_only`` opens
    an existing store for reading without changing anything in the file (no migration of an
    older schema; every write raises :class:`StoreError`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durable: bool = True,
        busy_timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        if not os.fspath(path):
            raise StoreError("no store path given (an empty path names no file)")
        self.path = Path(path)
        if self.path.is_dir():
            raise StoreError(f"{self.path}: is a directory, not a store file")
        # a store this process cannot write is opened read-only, saying why (writes raise
        # it); one on a read-only file system (a mounted snapshot, a read-only volume) as
        # immutable: SQLite cannot make the shared-memory file that reading a WAL database
        # otherwise needs, and nobody can change the file under the reader
        self.unwritable = _unwritable(self.path) if self.path.is_file() else None
        # (nor can it in a directory this user cannot write: the store is then read as it
        # was last checkpointed, which is all of it once its writers have closed it)
        self._immutable = self.unwritable in (READ_ONLY_FILE_SYSTEM, UNWRITABLE_DIRECTORY)
        self.read_only = read_only or self.unwritable is not None
        self._durable = durable
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        # every connection with the thread that opened it (closed once that thread has ended)
        self._connections: list[tuple[weakref.ref[threading.Thread], sqlite3.Connection]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        self._init_schema()
        self._identity = _file_identity(self.path)

    # -- connections ----------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._pid != os.getpid():
            self._forget_inherited_connections()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreError(f"{self.path}: store is closed")
        try:
            mode = "?mode=ro&immutable=1" if self._immutable else "?mode=ro"
            conn = sqlite3.connect(
                f"{self.path.absolute().as_uri()}{mode}" if self.read_only else self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=self.read_only,
            )
            conn.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'NORMAL'}")
            conn.execute("PRAGMA foreign_keys=OFF")
            # the WAL file is truncated back to this after a checkpoint (a big transaction,
            # a receiver's purge, grew it to hundreds of MB and it stayed that size)
            conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        except _SQLITE_FAILURES as exc:
            if self.path.exists():
                raise StoreError(
                    f"{self.path}: not a usable SQLite database ({exc}){_full_disk(self.path)}"
                ) from exc
            where = self.path.absolute().parent
            if not where.is_dir():
                why = f"{where} is not a directory"
            elif _on_read_only_file_system(where):
                why = "its directory is on a read-only file system"
            else:
                why = str(exc)
            raise StoreError(f"{self.path}: cannot create a store there ({why})") from exc
        self._local.conn = conn
        with self._lock:
            # a server that runs each request on a new thread kept one open connection (two
            # files, and its cache) per thread it ever ran, until the store was closed
            self._close_orphans()
            self._connections.append((weakref.ref(threading.current_thread()), conn))
        return conn

    def _close_orphans(self) -> None:
        """Close the connections of threads that have ended (under ``_lock``)."""
        kept = []
        for owner, conn in self._connections:
            thread = owner()
            if thread is not None and thread.is_alive():
                kept.append((owner, conn))
            else:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
        self._connections = kept

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        # WAL is a property of the file, so it is switched on once, when the store is created.
        # Switching a new file to WAL needs an exclusive lock and SQLite reports "database is
        # locked" at once, without its busy handler, while another process does the same: so
        # several processes creating one store at the same moment retry here until the timeout.
        deadline = time.monotonic() + self._busy_timeout
        delay = 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL").fetchone()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _forget_inherited_connections(self) -> None:
        # In a forked child: the parent's connections (and lock) are the parent's. They are
        # closed here, before this process opens its own: kept open, SQLite's per-process
        # lock bookkeeping they carry made the child's own connections take no file lock,
        # and the parent, closing its last connection, checkpointed and deleted the WAL the
        # child was writing to (its sessions vanished). Closing them cannot remove the WAL
        # from under the parent, which holds its own lock on it.
        for _, conn in self._connections:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._lock = threading.Lock()
        self._connections = []
        self._local = threading.local()
        self._pid = os.getpid()

    @contextlib.contextmanager
    def _sqlite_errors(self, action: str) -> Iterator[None]:
        """Report SQLite failures as :class:`StoreError` naming the file and the action."""
        try:
            yield
        except _SQLITE_FAILURES as exc:
            raise StoreError(f"{self.path}: cannot {action} ({exc})") from exc

    def _init_schema(self) -> None:
        if self.read_only and not self.path.is_file():
            raise StoreError(f"{self.path}: no such store")
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as handle:
                if handle.read(16) != b"SQLite format 3\x00":
                    raise StoreError(
                        f"{self.path}: not a SQLite database (agent-replay store expected)"
                    )
        created = not self.path.exists()
        if created and not self.read_only:
            # readable by its owner only (SQLite gives the -wal and -shm files the same mode):
            # a store holds whole prompts, answers and tool arguments
            with contextlib.suppress(OSError):  # (a missing directory: SQLite says so below)
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        conn = self._conn()
        try:
            # Identify the file before changing anything in it: enabling WAL is persistent, and
            # a foreign database must be left exactly as it was.
            conn.execute("BEGIN")  # one consistent snapshot for the reads below
            state = self._inspect(conn)
            conn.execute("COMMIT")
            if state == (APPLICATION_ID, True, SCHEMA_VERSION):
                return  # an existing store: nothing to create (and no write lock needed)
            if self.read_only:
                if state[:2] != (APPLICATION_ID, True):
                    raise StoreError(f"{self.path}: not an agent-replay store (no sessions)")
                return  # an older schema reads as it is: loading needs no newer table
            if state[2] == 0:  # an empty file: its page size can still be chosen
                conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            self._enable_wal(conn)
            conn.execute("BEGIN IMMEDIATE")
            # again under the write lock: another process may have won
            version = self._inspect(conn)[2]
            for statement in [*_SCHEMA.strip().split(";"), *_pending_statements()]:
                if statement.strip():
                    conn.execute(statement)
            if version < 3:  # migration → 3: the table above indexes the stored sessions
                _index_traces(conn)
            conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            # migrations 1 → 2 → 3 → 4: the statements above added the pending tables and the
            # trace index (4 changes no table)
            conn.execute(
                "UPDATE meta SET value=? WHERE key='schema_version' AND CAST(value AS INTEGER) < ?",
                (str(SCHEMA_VERSION), SCHEMA_VERSION),
            )
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute("COMMIT")
        except (*_SQLITE_FAILURES, StoreError) as exc:
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            self.close()
            if created and self.path.is_file() and self.path.stat().st_size == 0:
                self.path.unlink()  # not left behind as an empty "store" (a full disk)
            if isinstance(exc, StoreError):
                raise
            raise StoreError(
                f"{self.path}: cannot be opened as an agent-replay store ({exc})"
                f"{_full_disk(self.path)}"
            ) from exc

    def _inspect(self, conn: sqlite3.Connection) -> tuple[int, bool, int]:
        """``(application_id, has our tables, schema version)``; raises :class:`StoreError`
        for a foreign database or one written by a newer agent-replay."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        # every store gets its application id in the transaction that creates its tables, so
        # tables without the id belong to someone else (a "meta" table is a common name)
        if app_id != APPLICATION_ID and (app_id != 0 or tables):
            raise StoreError(
                f"{self.path}: a SQLite database but not an agent-replay store "
                f"(tables: {', '.join(sorted(tables)) or 'none'}); pass a new file name"
            )
        version = 0
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            try:
                version = int(row[0]) if row else 0
            except (TypeError, ValueError):
                raise StoreError(
                    f"{self.path}: unreadable schema version {row[0]!r} in the meta table"
                ) from None
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: written by a newer agent-replay (schema {version}, this "
                    f"version reads up to {SCHEMA_VERSION}); upgrade agent-replay"
                )
        return app_id, tables >= _TABLES, version

    def close(self) -> None:
        """Close every connection this store opened (from any thread). A connection another
        thread may be using right now is not closed under it (that crashed the process): it
        is let go, and closes once that thread is done with it and the garbage collector
        frees it; the store refuses every call after this one."""
        me = threading.current_thread()
        with self._lock:
            self._closed = True
            for owner, conn in self._connections:
                thread = owner()
                if thread is None or thread is me or not thread.is_alive():
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()
            self._connections = []
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

    def save_many(
        self,
        trajectories: Sequence[Trajectory | Continuation],
        *,
        replace: bool = True,
        delete: Mapping[str, str] | None = None,
        expect: Mapping[str, str | None] | None = None,
    ) -> None:
        """Store several trajectories in one transaction (all or nothing). A
        :class:`~agent_replay.model.Continuation` adds its steps to the stored session it
        continues; :class:`SessionChangedError` when that session changed meanwhile.
        ``delete`` maps sessions to forget in the same transaction to the digest they were
        read with (:class:`SessionChangedError` when one changed meanwhile): sessions whose
        steps the new ones took over. ``expect`` maps sessions to the digest they had when
        they were read (``None``: absent); :class:`SessionChangedError` when one is no longer
        so (a whole session merged with what was read, written while another writer added
        to it, would drop what that writer added)."""
        rows = self._rows(trajectories)
        with self._sqlite_errors("save"), self._transaction() as conn:
            self._check_read(expect or {})
            self._delete_read(conn, delete or {})
            self._write(conn, rows, replace=replace)

    def digests(self, session_ids: Iterable[str]) -> dict[str, str | None]:
        """The stored sessions' digests (``None`` for one there is not), in one query: what
        ``expect`` of :meth:`save_many` checks."""
        wanted = list(dict.fromkeys(session_ids))
        found: dict[str, str | None] = dict.fromkeys(wanted)
        with self._sqlite_errors("read sessions"):
            conn = self._conn()
            for start in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found.update(
                    conn.execute(
                        f"SELECT session_id, digest FROM sessions WHERE session_id IN ({marks})",
                        chunk,
                    ).fetchall()
                )
        return found

    def _check_read(self, expect: Mapping[str, str | None]) -> None:
        """Inside a write transaction (this thread's connection): the sessions still have the
        digests ``expect`` names."""
        stored = self.digests(expect) if expect else {}
        for session_id, digest in expect.items():
            if stored[session_id] != digest:
                raise SessionChangedError(
                    f"session {session_id!r} in {self.path} changed after it was read; "
                    "read it again"
                )

    def check_writable(self) -> None:
        """Raise :class:`StoreError` unless the store takes a write now: a row written and
        removed again, committed (a page is written: a full file system, a read-only store,
        a lock held past the busy timeout, a file deleted while open fail it as a real write
        would; a write-ahead log with room left can still take it when a large write would
        not fit)."""
        with self._sqlite_errors("write"), self._transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('write_check', '')")
            conn.execute("DELETE FROM meta WHERE key='write_check'")

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction on this thread's connection: every statement inside sees one
        state of the file (a prune's survey). Hold it briefly: while it is open the
        write-ahead log cannot start over. Inside a transaction already, that one."""
        conn = self._conn()
        if conn.in_transaction:
            yield conn
            return
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:  # (SQLite may have ended it on an I/O error)
                conn.execute("COMMIT")

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            why = f" ({self.unwritable})" if self.unwritable else ""
            raise StoreError(f"{self.path}: opened read-only{why}; nothing can be written")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` on this thread's connection, rolled back on any
        error; refuses a store file deleted or replaced while open."""
        self._refuse_if_read_only()
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        # An open connection keeps writing to a file that was deleted or replaced meanwhile,
        # and everything written there is lost without an error: refuse instead.
        if _file_identity(self.path) != self._identity:
            conn.execute("ROLLBACK")
            raise StoreError(
                f"{self.path}: the store file was deleted or replaced while open; "
                "open the store again"
            )
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # SQLite may already have rolled back (disk full, I/O error); a second ROLLBACK
            # would then raise and hide the real error
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _rows(self, sessions: Sequence[Trajectory | Continuation]) -> tuple[dict, dict, list]:
        """Blob, step and session rows (encoded before any transaction starts). A
        :class:`Continuation` writes only its new steps; its session row carries the chain end
        it was sealed after, which :meth:`_write` checks is still the stored one."""
        blobs: dict[str, bytes] = {}
        steps: dict[str, tuple] = {}
        rows = []
        now = time.time_ns()
        for item in sessions:
            if isinstance(item, Continuation):
                traj, header, after = item.session, item.header(), item.end
            else:
                traj, header, after = item, item.header(), None
            for step in traj.steps:
                if step.inputs is not NOT_LOADED:  # (else stored: it was loaded without them)
                    _add_blob(blobs, step.input_address, step.input_bytes, lambda s=step: s.inputs)
                _add_blob(blobs, step.output_address, step.output_bytes, step.output_payload)
                if step.step_hash not in steps:
                    data = step.header_bytes or canonical.encode(step.header())
                    steps[step.step_hash] = (step.step_hash, step.prev_hash, step.index, data)
            header_bytes = session_header_bytes(header)  # (the task's dicts in their order)
            row = (
                traj.session_id,
                header["head"],
                header["n_steps"],
                header_bytes,
                canonical.digest(header_bytes),
                *_summary(traj),
                now,
            )
            traces = _trace_ids(traj.metadata)
            if isinstance(item, Continuation):  # only its new traces: the rest are indexed
                # (inserting every trace of a long conversation again made each turn O(n))
                known = set(_trace_ids(item.end.session.metadata))
                traces = tuple(t for t in traces if t not in known)
            rows.append((row, after, traces))
        return blobs, steps, rows

    def _delete_read(self, conn: sqlite3.Connection, sessions: Mapping[str, str]) -> None:
        """Forget ``sessions`` (id → the digest they were read with), or raise
        :class:`SessionChangedError` when one is no longer the one that was read."""
        for session_id, digest in sessions.items():
            gone = conn.execute(
                "DELETE FROM sessions WHERE session_id=? AND digest=?", (session_id, digest)
            ).rowcount
            if gone != 1:
                raise SessionChangedError(
                    f"session {session_id!r} in {self.path} changed after it was read; "
                    "read it again"
                )
            conn.execute("DELETE FROM session_traces WHERE session_id=?", (session_id,))

    def _write(self, conn: sqlite3.Connection, rows: tuple, *, replace: bool) -> None:
        blobs, steps, sessions = rows
        for row, after, _ in sessions:
            if after is None and replace:
                continue
            old = conn.execute(
                "SELECT head, n_steps, digest FROM sessions WHERE session_id=?", (row[0],)
            ).fetchone()
            if after is not None:
                if old is None or old[:2] != (after.head_hash, after.n_steps):
                    raise SessionChangedError(
                        f"session {row[0]!r} in {self.path} changed after its end was read; "
                        "read it again"
                    )
            elif old is not None and old[2] != row[4]:
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
            [row for row, _, _ in sessions],
        )
        for row, after, traces in sessions:
            session_id = row[0]
            if after is None:  # rewritten whole: it may hold fewer traces than before
                stale = [
                    (session_id, trace_id)
                    for (trace_id,) in conn.execute(
                        "SELECT trace_id FROM session_traces WHERE session_id=?", (session_id,)
                    )
                    if trace_id not in traces
                ]
                conn.executemany(
                    "DELETE FROM session_traces WHERE session_id=? AND trace_id=?", stale
                )
            conn.executemany(
                "INSERT OR IGNORE INTO session_traces(trace_id, session_id) VALUES (?, ?)",
                [(trace_id, session_id) for trace_id in traces],
            )

    # -- the receiver's pending spans ------------------------------------------------------

    def add_pending(
        self, spans: list[tuple[str, str, bytes, bool]], logs: list[tuple[str, str, str, bytes]]
    ) -> tuple[int, int, int]:
        """Durably store received spans ``(trace_id, span_id, data, is_root)`` and log records
        ``(digest, trace_id, span_id, data)`` in one transaction; returns how many of each were
        new (a span or record already stored, from a retried export, is not stored again) and
        how many spans came again with other content than the stored copy (a producer that
        reuses span ids: the first copy is kept). When this returns, the rows survive a
        crash."""
        now = time.time_ns()
        with self._sqlite_errors("store received spans"), self._transaction() as conn:
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO pending_spans(trace_id, span_id, data, is_root, "
                "received_ns) VALUES (?, ?, ?, ?, ?)",
                [(t, s, d, int(r), now) for t, s, d, r in spans],
            )
            new_spans = conn.total_changes - before
            conflicting = 0
            if new_spans < len(spans):  # some were there: a retry, or another span's id
                for trace_id, span_id, data, _ in spans:
                    row = conn.execute(
                        "SELECT data FROM pending_spans WHERE trace_id=? AND span_id=?",
                        (trace_id, span_id),
                    ).fetchone()
                    conflicting += row is not None and bytes(row[0]) != data
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO pending_logs(digest, trace_id, span_id, data, "
                "received_ns) VALUES (?, ?, ?, ?, ?)",
                [(h, t, s, d, now) for h, t, s, d in logs],
            )
            new_logs = conn.total_changes - before
            # a log record whose trace has no span here waits apart (state 2), unread by the
            # look for ready traces twice a second (150k such records took it 0.47 s a call); the
            # first span of its trace brings it back
            if logs:
                _execute_in(
                    conn,
                    "UPDATE pending_logs SET state=2 WHERE state=0 AND trace_id IN ({}) AND NOT "
                    "EXISTS (SELECT 1 FROM pending_spans s WHERE s.trace_id=pending_logs.trace_id)",
                    list({t for _, t, _, _ in logs}),
                )
            if spans:
                _execute_in(
                    conn,
                    "UPDATE pending_logs SET state=0 WHERE state=2 AND trace_id IN ({})",
                    list({t for t, _, _, _ in spans}),
                )
        return new_spans, new_logs, conflicting

    def ready_traces(self, *, idle_ns: int, force: bool = False) -> list[str]:
        """Traces with spans or log records waiting to be assembled whose local root span has
        arrived, or whose last arrival is ``idle_ns`` old (every waiting trace when ``force``),
        in the order their first waiting rows arrived (so that the turns of a conversation
        are assembled in order even when a backlog takes several batches)."""
        cutoff = time.time_ns() - idle_ns
        rows = (
            self._conn()
            .execute(
                """
            WITH waiting(trace_id, first, last) AS (
                SELECT trace_id, MIN(received_ns), MAX(received_ns) FROM pending_spans
                WHERE state=0 GROUP BY trace_id
                UNION ALL
                SELECT trace_id, MIN(received_ns), MAX(received_ns) FROM pending_logs
                WHERE state=0 GROUP BY trace_id
            )
            SELECT w.trace_id, MAX(w.last),
                   EXISTS(SELECT 1 FROM pending_spans r WHERE r.trace_id=w.trace_id
                          AND r.is_root=1),
                   EXISTS(SELECT 1 FROM pending_spans r WHERE r.trace_id=w.trace_id)
            FROM waiting AS w GROUP BY w.trace_id ORDER BY MIN(w.first), w.trace_id
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
        of ``trace_ids``, assembled or not, in key order (whichever layout the tables have:
        log records of one span with equal times join it in that order)."""
        conn = self._conn()
        spans = _execute_in(
            conn,
            "SELECT trace_id, span_id, data FROM pending_spans WHERE trace_id IN ({})",
            trace_ids,
        )
        logs = _execute_in(
            conn, "SELECT digest, data FROM pending_logs WHERE trace_id IN ({})", trace_ids
        )
        spans.sort(key=lambda row: (row[0], row[1]))
        logs.sort(key=lambda row: row[0])
        return spans, logs

    def commit_assembled(
        self,
        trajectories: Sequence[Trajectory | Continuation],
        spans: list[tuple[str, str]],
        logs: list[str],
        *,
        delete: Mapping[str, str] | None = None,
        expect: Mapping[str, str | None] | None = None,
    ) -> None:
        """Save ``trajectories`` (``delete``, ``expect`` as in :meth:`save_many`) and mark the span
        ``(trace_id, span_id)`` and log-record ``digest`` rows they were built from as
        assembled, in one transaction (rows that arrived meanwhile stay waiting, so they are
        assembled next time)."""
        rows = self._rows(trajectories)
        with self._sqlite_errors("save assembled traces"), self._transaction() as conn:
            self._check_read(expect or {})
            self._delete_read(conn, delete or {})
            self._write(conn, rows, replace=True)
            conn.executemany(
                "UPDATE pending_spans SET state=1 WHERE trace_id=? AND span_id=?", spans
            )
            conn.executemany("UPDATE pending_logs SET state=1 WHERE digest=?", [(d,) for d in logs])

    def index_pending(self) -> None:
        """Add the pending tables' indexes to a store made before they existed, and move
        pending tables of the older layout (WITHOUT ROWID, see ``_PENDING_TABLES``) to rowid
        tables with their rows, in one transaction (a one-time cost on a large table; nothing
        when the store has both)."""
        if self._pending_prepared(self._conn()):
            return
        with self._sqlite_errors("index pending spans"), self._transaction() as conn:
            for table in _PENDING_TABLES:  # (again under the write lock)
                if not _has_rowid(conn, table):
                    _pending_by_rowid(conn, table)
            for statement in _pending_statements():
                conn.execute(statement)

    @staticmethod
    def _pending_prepared(conn: sqlite3.Connection) -> bool:
        """Whether the pending tables are rowid tables with every index."""
        indexes = conn.execute("SELECT name FROM sqlite_master WHERE type='index'")
        return {row[0] for row in indexes} >= _PENDING_INDEXES.keys() and all(
            _has_rowid(conn, table) for table in _PENDING_TABLES
        )

    def purge_pending(self, *, older_than_ns: int) -> int:
        """Forget assembled spans (and log records that never found their span) received
        before ``older_than_ns`` ago; returns rows deleted. Late spans of a purged trace are
        assembled on their own and merged into the stored session."""
        cutoff = time.time_ns() - older_than_ns
        with self._sqlite_errors("purge assembled spans"), self._transaction() as conn:
            before = conn.total_changes
            # (the traces with a row old enough first, from the index on received_ns: the
            # rest of the table is not read)
            conn.execute(
                "DELETE FROM pending_spans WHERE state=1 AND trace_id IN ("
                "SELECT trace_id FROM pending_spans WHERE trace_id IN ("
                "SELECT trace_id FROM pending_spans WHERE received_ns < ?) GROUP BY trace_id "
                "HAVING MAX(state)=1 AND MIN(state)=1 AND MAX(received_ns) < ?)",
                (cutoff, cutoff),
            )
            conn.execute("DELETE FROM pending_logs WHERE received_ns < ?", (cutoff,))
            deleted = conn.total_changes - before
        return deleted

    def forget_pending(self, trace_ids: Sequence[str]) -> int:
        """Forget the assembled span and log-record rows of ``trace_ids`` (rows still waiting
        stay); returns rows deleted. For imports, whose spans are staged only to be
        assembled."""
        with self._sqlite_errors("forget assembled spans"), self._transaction() as conn:
            before = conn.total_changes
            for table in ("pending_spans", "pending_logs"):
                _execute_in(
                    conn, f"DELETE FROM {table} WHERE state=1 AND trace_id IN ({{}})", trace_ids
                )
            return conn.total_changes - before

    def pending_counts(self) -> dict[str, int]:
        """Rows in the pending tables: waiting and assembled spans and log records."""
        conn = self._conn()
        out = {}
        for table in ("pending_spans", "pending_logs"):
            # (log records waiting for their trace's first span, state 2, wait too)
            for where, name in (("state<>1", "waiting"), ("state=1", "assembled")):
                out[f"{table.split('_')[1]}_{name}"] = conn.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE {where}"
                ).fetchone()[0]
        return out

    def delete(self, session_id: str) -> None:
        """Forget a session. Its steps and blobs stay in the file: they are content-addressed
        and may be shared by other sessions (no garbage collection)."""
        with self._sqlite_errors("delete a session"), self._transaction() as conn:
            conn.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))
            conn.execute("DELETE FROM session_traces WHERE session_id=?", (session_id,))

    def prune(
        self,
        session_ids: Iterable[str] = (),
        *,
        saved_before_ns: int | None = None,
        dry_run: bool = False,
    ) -> PruneResult:
        """Delete ``session_ids`` and every session last saved before ``saved_before_ns``
        (nanoseconds since the epoch), then the step rows and blobs no remaining session uses
        (left by deleted sessions, and by steps a merge moved), and the spans and log records
        the receiver kept of traces only the deleted sessions held; with neither, only the
        unused rows. The long part, walking every session, reads one snapshot and takes no
        lock; the deletion is one write transaction, in which only the sessions written
        since are walked again (writers wait for it: the busy timeout, the receiver answers
        503 past it). With ``dry_run``, what would be deleted, that snapshot alone (no write,
        no lock: it works on a store opened read-only). The file keeps its size,
        its free pages reused by later writes: :meth:`vacuum` gives them back. A fork of a
        deleted session keeps every step it uses; its lineage still names the parent. Raises
        :class:`StoreError`, having deleted nothing, when a remaining session's chain is
        damaged."""
        ids = list(session_ids)
        with self._sqlite_errors("prune"):
            try:
                with self._snapshot() as conn:  # the long part, under no lock
                    found = pruning.survey(conn, ids, saved_before_ns)
                if dry_run:
                    return found
                # what is deleted on purpose is zeroed, freed pages included, whatever the
                # SQLite build does by default (Debian's zeroes, upstream's does not)
                (default,) = conn.execute("PRAGMA secure_delete").fetchone()
                conn.execute("PRAGMA secure_delete=ON")
                try:
                    with self._transaction() as conn:
                        return pruning.apply(conn, ids, saved_before_ns)
                finally:
                    conn.execute(f"PRAGMA secure_delete={int(default)}")
            finally:
                with contextlib.suppress(*_SQLITE_FAILURES, StoreError):
                    pruning.clear(self._conn())

    def vacuum(self) -> tuple[int, int]:
        """Rebuild the file without its free pages (SQLite's ``VACUUM``: it needs free disk
        room for a copy of the store, and holds the store against every other reader and
        writer while it runs). Returns the bytes the store took on disk before and after, its
        write-ahead log included (a checkpoint moves the log into the file first, but one that
        other connections keep busy cannot)."""
        self._refuse_if_read_only()
        with self._sqlite_errors("vacuum"):
            conn = self._conn()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            before = self._disk_bytes()
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return before, self._disk_bytes()

    def _disk_bytes(self) -> int:
        wal = self.path.with_name(self.path.name + "-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    def trace_sessions(self, trace_ids: Iterable[str]) -> dict[str, list[str]]:
        """The stored sessions holding each of ``trace_ids``, the one written first first
        (traces no stored session holds are absent). A session named by the trace id itself
        holds spans of the trace stored before the conversation it belongs to was known."""
        with self._sqlite_errors("read the trace index"):
            rows = _execute_in(
                self._conn(),
                "SELECT trace_id, session_id FROM session_traces WHERE trace_id IN ({}) "
                "ORDER BY rowid",
                list(dict.fromkeys(trace_ids)),
            )
        sessions: dict[str, list[str]] = {}
        for trace_id, session_id in rows:  # a trace's rows are all in one chunk
            sessions.setdefault(trace_id, []).append(session_id)
        return sessions

    # -- reading --------------------------------------------------------------------------

    def __contains__(self, session_id: object) -> bool:
        with self._sqlite_errors("read sessions"):
            row = (
                self._conn()
                .execute("SELECT 1 FROM sessions WHERE session_id=?", (session_id,))
                .fetchone()
            )
        return row is not None

    def session_ids(self) -> list[str]:
        with self._sqlite_errors("list sessions"):
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
        with self._sqlite_errors("list sessions"):
            rows = self._conn().execute(sql, args).fetchall()
        # a row damaged by hand (a text score, a blob id: verify names it) is listed as well
        # as it can be, never a crash of the listing
        return [
            SessionSummary(
                session_id=_listed_text(r[0]),
                steps=r[1] if type(r[1]) is int else 0,
                failed=None if r[2] is None else bool(r[2]),
                score=r[3] if type(r[3]) in (int, float) else None,
                source=_listed_text(r[4] or "native"),
                parent_session=None if r[5] is None else _listed_text(r[5]),
                fork_step=r[6] if type(r[6]) is int else None,
                saved_ns=r[7] if type(r[7]) is int else 0,
            )
            for r in rows
        ]

    def children(self, session_id: str) -> list[str]:
        """Sessions forked from ``session_id``."""
        with self._sqlite_errors("list sessions"):
            return [
                r[0]
                for r in self._conn().execute(
                    "SELECT session_id FROM sessions WHERE parent_session=? ORDER BY saved_ns",
                    (session_id,),
                )
            ]

    def load(self, session_id: str, *, inputs: bool = True) -> Trajectory:
        """The stored trajectory, every hash checked.

        With ``inputs=False`` the steps' inputs are checked against their addresses but not
        decoded: each step's ``inputs`` is ``None`` when it recorded none, else
        :data:`~agent_replay.model.NOT_LOADED`. Such a trajectory can only be merged and saved
        again (what the sinks do with a stored conversation a late trace joins: the prompts
        of a chat repeat the conversation so far, so decoding them is most of the work).

        Raises :class:`SessionNotFoundError` for an unknown id,
        :class:`ChainIntegrityError` naming the first bad step for a damaged session and
        :class:`StoreError` when SQLite cannot read the file.
        """
        with self._sqlite_errors(f"load session {session_id!r}"):
            return self._read(session_id, lambda: self._load(session_id, inputs))

    def load_end(self, session_id: str) -> SessionEnd:
        """The stored session's header and its last step, without the steps before: what is
        needed to seal new steps after it (:class:`~agent_replay.model.Continuation`). The
        header, the last step and its content are checked as :meth:`load` checks them; the
        steps before are not read. Raises what :meth:`load` raises."""
        with self._sqlite_errors(f"load session {session_id!r}"):
            return self._read(session_id, lambda: self._load_end(session_id))

    READ_ATTEMPTS = 5
    """How often a load is read again when the session changed while it was read."""

    def _read(self, session_id: str, read: Callable[[], Any]) -> Any:
        """``read()`` (a load of ``session_id``), read again when what looked damaged was the
        session changing meanwhile. A load reads the session row, then its steps and blobs,
        statement by statement (one read transaction held across a load kept readers such as
        the console always inside one, and the write-ahead log then grew without bound); a
        merge and a prune committed between them (its moved steps' old rows deleted) made a
        sound session look damaged. Damage is only damage if the session row is still the one
        that was read; :class:`SessionChangedError` if it keeps changing."""
        for _ in range(self.READ_ATTEMPTS):
            try:
                return read()
            except _Moved:
                continue
        raise SessionChangedError(
            f"session {session_id!r} in {self.path} kept changing while it was read; read it again"
        )

    def _load_end(self, session_id: str) -> SessionEnd:
        conn = self._conn()
        session, head, n_steps, broken = self._session(conn, session_id)
        if not n_steps:
            return SessionEnd(session, 0, None)
        with self._unless_moved(conn, session_id, head):
            row = conn.execute(
                "SELECT hash, prev, idx, header FROM steps WHERE hash=?", (head,)
            ).fetchone()
            if row is None:
                raise broken("head step is missing", n_steps - 1)
            (entry,) = _checked_headers([row], n_steps - 1, row[1], broken)
            (last,) = self._checked_steps([entry], n_steps - 1, broken)
        return SessionEnd(session, n_steps, last)

    @contextlib.contextmanager
    def _unless_moved(self, conn: sqlite3.Connection, session_id: str, head: str) -> Iterator[None]:
        """Raise :class:`_Moved` instead of a :class:`ChainIntegrityError` from the block when
        the session's head is no longer ``head`` (or the session is gone): it changed while
        it was being read, and is to be read again."""
        try:
            yield
        except ChainIntegrityError:
            row = conn.execute("SELECT head FROM sessions WHERE session_id=?", (session_id,))
            now = row.fetchone()
            if now is None or now[0] != head:
                raise _Moved from None
            raise

    def _load(self, session_id: str, inputs: bool = True) -> Trajectory:
        conn = self._conn()
        session, head, n_steps, broken = self._session(conn, session_id)
        with self._unless_moved(conn, session_id, head):
            steps = self._chain(conn, head, n_steps, broken, inputs)
        return replace(session, steps=steps)

    def _chain(
        self,
        conn: sqlite3.Connection,
        head: str,
        n_steps: int,
        broken: Callable[..., ChainIntegrityError],
        inputs: bool,
    ) -> tuple[Step, ...]:
        """The ``n_steps`` steps of the chain that ends at ``head``, every hash checked."""
        chain = conn.execute(_CHAIN_QUERY, (head, n_steps)).fetchall() if n_steps else []
        if head != GENESIS_HASH and not chain:
            raise broken("head step is missing", n_steps - 1 if n_steps else None)
        if chain and chain[0][1] != GENESIS_HASH:
            raise broken(
                "chain does not reach the genesis step (steps missing)",
                0 if n_steps == len(chain) else None,
            )
        # chain is ordered genesis-first; walk it and check links and hashes
        headers = _checked_headers(chain, 0, GENESIS_HASH, broken)
        if len(chain) != n_steps:
            raise broken(f"{len(chain)} steps found, {n_steps} recorded", len(chain))
        if (headers[-1][0] if headers else GENESIS_HASH) != head:
            raise broken("chain does not end at the session head", n_steps - 1)
        return self._checked_steps(headers, 0, broken, inputs)

    def _session(
        self, conn: sqlite3.Connection, session_id: str
    ) -> tuple[Trajectory, str, int, Callable[..., ChainIntegrityError]]:
        """The session's header fields (a trajectory without steps), its head and step count,
        every session-level check done, and the error maker for its steps."""
        row = conn.execute(
            "SELECT head, n_steps, header, digest, source, failed, score, parent_session, "
            "fork_step FROM sessions WHERE session_id=?",
            (session_id,),
        ).fetchone()
        if row is None:
            raise SessionNotFoundError(f"no session {session_id!r} in {self.path}")
        head, n_steps, session_header, session_digest = row[:4]
        summary = row[4:]

        def broken(problem: str, index: int | None = None) -> ChainIntegrityError:
            where = "session header" if index is None else f"step {index}"
            return ChainIntegrityError(
                f"session {session_id!r}: {where}: {problem}",
                session_id=session_id,
                step_index=index,
            )

        if not isinstance(head, str) or not isinstance(n_steps, int) or n_steps < 0:
            raise broken("session row is not readable (head or step count has the wrong type)")
        if not isinstance(session_header, bytes):
            raise broken("session header is not stored as bytes")
        if canonical.digest(session_header) != session_digest:
            raise broken("session header does not match its digest")
        try:
            data = canonical.decode(session_header)
            session = Trajectory(
                session_id=data["session_id"],
                task=data.get("task"),
                seed=data.get("seed"),
                outcome=Outcome.from_dict(data.get("outcome")),
                lineage=Lineage.from_dict(data.get("lineage")),
                metadata=data.get("metadata") or {},
                effects=tuple(tuple(e) for e in data.get("effects") or ()),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise broken(f"session header is not readable ({exc})") from None
        if data.get("head") != head or session.session_id != session_id:
            raise broken("session header does not match the stored head")
        if data.get("n_steps") != n_steps:
            raise broken("session header does not match the stored step count")
        if not _same_summary(summary, _summary(session)):
            raise broken("summary columns (source, outcome, lineage) do not match the header")
        return session, head, n_steps, broken

    def _checked_steps(
        self,
        headers: list[tuple[str, dict, bytes]],
        first: int,
        broken: Callable[..., ChainIntegrityError],
        inputs: bool = True,
    ) -> tuple[Step, ...]:
        """Steps from checked headers (the first at index ``first``), their content loaded and
        checked against its hashes (the inputs only checked when not ``inputs``: see
        :meth:`load`)."""
        addresses = []
        for position, (_, header, _) in enumerate(headers, first):
            try:
                addresses.append((_blob(header, "input"), _blob(header, "output")))
            except (KeyError, TypeError, AttributeError) as exc:
                raise broken(f"stored step is not readable ({exc})", position) from None
        if inputs:
            blobs, bad_input = self._blobs({blob for pair in addresses for blob in pair}), None
        else:
            blobs = self._blobs({output for _, output in addresses})
            bad_input = self._bad_blob([pair[0] for pair in addresses], first)
        steps = []
        for position, (step_hash, header, header_bytes) in enumerate(headers, first):
            input_blob, output_blob = addresses[position - first]
            if bad_input is not None and bad_input[0] == position:
                raise broken(bad_input[1], position)
            try:
                input_bytes = blobs[input_blob] if inputs else b""
                output_bytes = blobs[output_blob]
            except KeyError:
                raise broken("content blob is missing", position) from None
            if not isinstance(input_bytes, bytes) or not isinstance(output_bytes, bytes):
                raise broken("content blob is not stored as bytes", position)
            if inputs and canonical.digest(input_bytes) != input_blob:
                raise broken("inputs do not match their content address", position)
            if canonical.digest(output_bytes) != output_blob:
                raise broken("outputs do not match their content address", position)
            try:
                steps.append(
                    _step_from_stored(step_hash, header, header_bytes, input_bytes, output_bytes)
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise broken(f"stored step is not readable ({exc})", position) from None
        return tuple(steps)

    def _blobs(self, hashes: set[str]) -> dict[str, Any]:
        # bytes checked by the caller: their digest must be the key
        rows = _execute_in(
            self._conn(), "SELECT hash, data FROM blobs WHERE hash IN ({})", list(hashes)
        )
        return dict(rows)

    def _bad_blob(self, addresses: Sequence[str], first: int) -> tuple[int, str] | None:
        """The first step (``addresses[i]`` is step ``first + i``'s inputs) whose blob is
        missing or does not match its address, and what is wrong, or ``None``. The blobs are
        read one at a time and not kept: a long chat's prompts never sit in memory together."""
        where: dict[str, int] = {}
        for position, address in enumerate(addresses, first):
            where.setdefault(address, position)
        problems, missing = [], set(where)
        query = "SELECT hash, data FROM blobs WHERE hash IN ({})"
        for address, data in _rows_in(self._conn(), query, list(where)):
            missing.discard(address)
            if not isinstance(data, bytes):
                problems.append((where[address], "content blob is not stored as bytes"))
            elif canonical.digest(data) != address:
                problems.append((where[address], "inputs do not match their content address"))
        problems += [(where[address], "content blob is missing") for address in missing]
        return min(problems) if problems else None

    def load_all(self) -> Iterator[Trajectory]:
        """Every session, oldest first, each verified as :meth:`load` does."""
        for session_id in self.session_ids():
            yield self.load(session_id)

    def verify(self, session_id: str | None = None) -> list[VerifyResult]:
        """Check one session (or all): every blob, step and session hash and every link."""
        ids = [session_id] if session_id is not None else self.session_ids()
        results = []
        for sid in ids:
            try:
                traj = self.load(sid)
            except SessionNotFoundError:
                if session_id is not None:
                    raise
                continue  # deleted since it was listed (a prune meanwhile)
            except ChainIntegrityError as exc:
                with self._sqlite_errors("verify"):
                    row = (
                        self._conn()
                        .execute("SELECT n_steps FROM sessions WHERE session_id=?", (sid,))
                        .fetchone()
                    )
                steps = row[0] if row and isinstance(row[0], int) else 0
                results.append(VerifyResult(sid, False, steps, exc.step_index, str(exc)))
            else:
                results.append(VerifyResult(sid, True, len(traj.steps)))
        return results

    def file_problems(self, limit: int = 10) -> list[str]:
        """What SQLite's own check (``PRAGMA quick_check``) finds wrong with the file's pages
        and indexes (damage that no hash covers: a write to the store would fail on it);
        empty when it finds nothing."""
        with self._sqlite_errors("check the file"):
            rows = self._conn().execute(f"PRAGMA quick_check({int(limit)})").fetchall()
        problems = ["; ".join(str(row[0]).splitlines()) for row in rows]  # one line each
        return [] if problems == ["ok"] else problems

    def stats(self) -> dict[str, int]:
        """Row counts: how much the CAS is sharing."""
        with self._sqlite_errors("count rows"):
            conn = self._conn()
            return {
                table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                for table in ("sessions", "steps", "blobs")
            }


class _Moved(Exception):
    """A session changed while it was being read (see :meth:`CheckpointStore._read`)."""


def open_store(store: CheckpointStore | str | os.PathLike[str]) -> tuple[CheckpointStore, bool]:
    """``store`` itself, or the store at that path, and whether it was opened here (so the
    caller closes it when done). For writers (capture, sessions): a path this user cannot
    write is a :class:`StoreError` at once, not a failure of every write later."""
    if isinstance(store, CheckpointStore):
        return store, False
    opened = CheckpointStore(store)
    if opened.unwritable:
        opened.close()
        raise StoreError(f"{opened.path}: cannot be written: {opened.unwritable}")
    return opened, True


READ_ONLY_FILE_SYSTEM = "it is on a read-only file system"
UNWRITABLE_DIRECTORY = (
    "its directory is not writable by this user, and SQLite keeps its -wal and -shm files there"
)


def _unwritable(path: Path) -> str | None:
    """Why this process cannot write the store at ``path`` (``None`` if it can)."""
    if _on_read_only_file_system(path):
        return READ_ONLY_FILE_SYSTEM
    if not os.access(path.absolute().parent, os.W_OK | os.X_OK):
        return UNWRITABLE_DIRECTORY
    if not os.access(path, os.W_OK):
        return "the file is not writable by this user"
    return None


def _full_disk(path: Path) -> str:
    """A note for an error when the file system holding ``path`` is (nearly) full."""
    try:
        stats = os.statvfs(path.absolute().parent)
    except (OSError, AttributeError):
        return ""
    if stats.f_bavail * stats.f_frsize >= 1 << 20:
        return ""
    return "; its file system is full" + (
        ", and SQLite needs room beside the store even to read it" if path.exists() else ""
    )


def _on_read_only_file_system(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs on Windows
        return False


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _execute_in(conn: sqlite3.Connection, query: str, values: Sequence[Any]) -> list[tuple]:
    """Run ``query``, whose ``IN ({})`` takes ``values``, 500 values at a time (SQLite caps the
    number of parameters of one statement); the rows it returned."""
    return list(_rows_in(conn, query, values))


def _rows_in(conn: sqlite3.Connection, query: str, values: Sequence[Any]) -> Iterator[tuple]:
    """The rows of :func:`_execute_in`, one at a time (none is kept once the next is read)."""
    for start in range(0, len(values), 500):
        chunk = values[start : start + 500]
        yield from conn.execute(query.format(",".join("?" * len(chunk))), chunk)


def _trace_ids(metadata: dict[str, Any]) -> tuple[str, ...]:
    """The trace ids a session's metadata names (sessions captured from OTel traces)."""
    traces = metadata.get("trace_ids")
    if not isinstance(traces, (list, tuple)):
        return ()
    return tuple(t for t in traces if isinstance(t, str))


def _has_rowid(conn: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` is a rowid table (a WITHOUT ROWID table has no ``rowid`` column), or
    there is none (nothing to move)."""
    try:
        conn.execute(f"SELECT rowid FROM {table} LIMIT 0")
    except sqlite3.OperationalError as exc:
        return "no such column" not in str(exc)
    return True


def _pending_by_rowid(conn: sqlite3.Connection, table: str) -> None:
    """Move pending table ``table`` of the older layout to a rowid table of the same name,
    columns, key and indexes, its rows in the order they arrived (in the caller's
    transaction)."""
    columns = ", ".join(row[1] for row in conn.execute(f"PRAGMA table_info({table})"))
    old = f"{table}_without_rowid"
    names = conn.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name=? AND sql IS NOT NULL",
        (table,),
    ).fetchall()
    for (name,) in names:  # the new table's take these names
        conn.execute(f"DROP INDEX {name}")
    conn.execute(f"ALTER TABLE {table} RENAME TO {old}")
    for statement in _pending_statements(table):
        conn.execute(statement)
    conn.execute(f"INSERT INTO {table}({columns}) SELECT {columns} FROM {old} ORDER BY received_ns")
    conn.execute(f"DROP TABLE {old}")


def _index_traces(conn: sqlite3.Connection) -> None:
    """Fill the trace index from the stored session headers, oldest first (the migration to
    schema 3). An unreadable header is skipped: reading that session reports it."""
    rows = conn.execute("SELECT session_id, header FROM sessions ORDER BY saved_ns, session_id")
    for session_id, header in rows.fetchall():
        try:
            metadata = canonical.decode(header).get("metadata") or {}
            traces = _trace_ids(metadata)
        except (ValueError, TypeError, AttributeError):
            continue
        conn.executemany(
            "INSERT OR IGNORE INTO session_traces(trace_id, session_id) VALUES (?, ?)",
            [(trace_id, session_id) for trace_id in traces],
        )


def _summary(traj: Trajectory) -> tuple[Any, ...]:
    """The denormalised ``sessions`` columns: source, failed, score, parent_session, fork_step.

    Values are coerced to what SQLite stores back unchanged (SQLite turns a NaN score into
    NULL and would convert numeric-looking text in a REAL column), so that loading can compare
    the row with the header exactly.
    """
    outcome, lineage = traj.outcome, traj.lineage
    failed = None if outcome is None or outcome.failed is None else int(bool(outcome.failed))
    score = None if outcome is None else outcome.score
    if isinstance(score, bool) or not isinstance(score, (int, float)) or score != score:
        score = None
    else:
        score = float(score)
    parent = None if lineage is None else lineage.parent_session
    fork_step = None if lineage is None else lineage.fork_step
    return (
        traj.source,
        failed,
        score,
        parent if isinstance(parent, str) else None if parent is None else str(parent),
        fork_step if isinstance(fork_step, int) and -(2**63) <= fork_step < 2**63 else None,
    )


def _checked_headers(
    rows: list[tuple],
    first: int,
    prev: str,
    broken: Callable[..., ChainIntegrityError],
) -> list[tuple[str, dict, bytes]]:
    """``(step_hash, header, header_bytes)`` of consecutive step rows ``(hash, prev, idx,
    header)``, the first at index ``first`` after ``prev``: each header checked against its
    hash, its link and its index."""
    out = []
    for position, (step_hash, step_prev, idx, header_bytes) in enumerate(rows, first):
        if not isinstance(header_bytes, bytes):
            raise broken("stored header is not stored as bytes", position)
        if canonical.digest(header_bytes) != step_hash:
            raise broken("stored header does not match its hash", position)
        try:
            header = canonical.decode(header_bytes)
        except ValueError as exc:
            raise broken(f"stored header is not readable ({exc})", position) from None
        if step_prev != prev or header.get("prev") != prev:
            raise broken("prev_hash does not link to the previous step", position)
        if idx != position or header.get("index") != position:
            raise broken(f"index {idx} at position {position}", position)
        out.append((step_hash, header, header_bytes))
        prev = step_hash
    return out


def _same_summary(stored: tuple[Any, ...], expected: tuple[Any, ...]) -> bool:
    return all(type(a) is type(b) and a == b for a, b in zip(stored, expected, strict=True))


def _add_blob(blobs: dict[str, bytes], address: str, data: bytes, value: Callable[[], Any]) -> None:
    """``data`` under ``address`` in ``blobs`` (the stored bytes of ``value()`` under their own
    address when ``data`` is empty: a :class:`Step` built by hand, without its bytes)."""
    if address in blobs:
        return
    if not data:
        stored = canonical.encode_stored(value())
        address, data = stored.blob, stored.data
    blobs[address] = data


def _blob(header: dict, part: str) -> str:
    """Where a step's ``part`` ("input" or "output") is stored (a ``KeyError`` or
    ``TypeError`` on a header that does not say)."""
    blob = header.get(f"{part}_blob") or header[f"{part}_hash"]
    if not isinstance(blob, str):
        raise TypeError(f"{part} address is not a string")
    return blob


_NO_INPUTS = canonical.encode_stored(None).hash  # the input_hash of a step without inputs


def _unloaded(header: dict) -> Any:
    """The inputs of a step loaded without them: ``None`` when it has none."""
    return None if header["input_hash"] == _NO_INPUTS else NOT_LOADED


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
        inputs=canonical.decode(input_bytes) if input_bytes else _unloaded(header),
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
        input_blob=header.get("input_blob", ""),
        output_blob=header.get("output_blob", ""),
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        header_bytes=header_bytes,
    )


def _listed_text(value: Any) -> str:
    """A text column as listed: itself, or the ``repr`` of what a damaged row holds there."""
    return value if isinstance(value, str) else repr(value)
