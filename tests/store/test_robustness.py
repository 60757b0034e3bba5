"""The store under concurrent processes, forks, corrupt and foreign files, newer schemas."""

from __future__ import annotations

import multiprocessing
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_replay import CheckpointStore, Trajectory
from agent_replay.cli import main as cli
from agent_replay.errors import AgentReplayError, ChainIntegrityError, StoreError
from agent_replay.model import StepDraft, StepKind, chain_steps
from agent_replay.store.sqlite import SCHEMA_VERSION

SRC = Path(__file__).resolve().parents[2] / "src"

# A writer process: waits for the start signal so that all writers race, then saves sessions
# whose first steps (and their blobs) are the same in every process.
WRITER = textwrap.dedent(
    """
    import os, sys, time
    from agent_replay import CheckpointStore, Trajectory
    from agent_replay.model import StepDraft, StepKind, chain_steps

    path, worker, sessions, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    while not os.path.exists(go):
        time.sleep(0.001)
    store = CheckpointStore(path)
    for i in range(sessions):
        drafts = [
            StepDraft(StepKind.LLM, "plan", inputs={"shared": "prompt " * 50}, action="plan"),
            StepDraft(StepKind.TOOL, "search", inputs={"q": "shared"}, action="result " * 50),
            StepDraft(StepKind.LLM, "answer", inputs={"worker": worker, "i": i}, action=i),
        ]
        store.save(Trajectory(f"w{worker}-s{i}", chain_steps(drafts), metadata={"w": worker}))
    store.close()
    """
)


def run_writers(path: Path, tmp_path: Path, processes: int, sessions: int) -> None:
    go = tmp_path / f"go-{path.name}"
    env = dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(w), str(sessions), str(go)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(processes)
    ]
    go.touch()
    failures = []
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        if writer.returncode:
            failures.append(err)
    assert not failures, failures[0]


def test_processes_write_one_store_at_once(tmp_path):
    path = tmp_path / "shared.sqlite"
    run_writers(path, tmp_path, processes=4, sessions=50)
    with CheckpointStore(path) as store:
        results = store.verify()
        assert len(results) == 200 and all(r.ok for r in results)
        assert store.load("w3-s49").steps[2].inputs == {"worker": 3, "i": 49}
        stats = store.stats()
    # the two shared steps and their blobs are stored once for all 200 sessions
    assert stats["steps"] == 2 + 200
    assert stats["blobs"] == 4 + 200 + 50  # inputs per (worker, i); outputs per i


@pytest.mark.parametrize("round_", range(8))
def test_processes_creating_a_new_store_at_once(tmp_path, round_):
    """Every writer opens the same *new* file at the same moment (switching a new file to WAL
    used to fail at once with "database is locked" in all but one of them)."""
    path = tmp_path / f"new-{round_}.sqlite"
    run_writers(path, tmp_path, processes=4, sessions=1)
    with CheckpointStore(path) as store:
        assert len(store.session_ids()) == 4


def _save_in_child(store: CheckpointStore, parent_conn: sqlite3.Connection, name: str) -> None:
    try:
        assert store._conn() is not parent_conn, "the child reused the parent's connection"
        for i in range(20):
            step = StepDraft(StepKind.LLM, "x", inputs={"who": name, "i": i}, action=i)
            store.save(Trajectory(f"{name}-{i}", chain_steps([step])))
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def test_a_store_opened_before_fork_is_safe_in_the_children(db_path):
    store = CheckpointStore(db_path)
    store.save(Trajectory("before", chain_steps([StepDraft(StepKind.LLM, "x", action=0)])))
    parent_conn = store._conn()
    ctx = multiprocessing.get_context("fork")
    children = [
        ctx.Process(target=_save_in_child, args=(store, parent_conn, f"child{n}")) for n in range(2)
    ]
    for child in children:
        child.start()
    for i in range(20):  # the parent keeps writing through its own connection meanwhile
        step = StepDraft(StepKind.TOOL, "y", inputs={"i": i}, action=i)
        store.save(Trajectory(f"parent-{i}", chain_steps([step])))
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    results = store.verify()
    assert len(results) == 61 and all(r.ok for r in results)
    store.close()


def test_a_thread_that_ends_takes_its_connection_with_it(db_path):
    """A server running each request on a new thread (ThreadingHTTPServer, a per-request
    executor, anyio's idle worker threads) used to keep one connection - two open files and
    its page cache - per thread it ever ran, until the store was closed."""

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    with CheckpointStore(db_path) as store:
        store.save(Trajectory("main", chain_steps([StepDraft(StepKind.LLM, "x", action=0)])))
        before = open_files()
        for i in range(60):
            step = StepDraft(StepKind.TOOL, "t", inputs={"i": i}, action=i)
            worker = threading.Thread(
                target=store.save, args=(Trajectory(f"t{i}", chain_steps([step])),)
            )
            worker.start()
            worker.join()
        assert len(store._connections) <= 2  # the main thread's and the last worker's
        assert open_files() - before <= 4
        # a thread still running keeps its connection, and it keeps working
        go, done = threading.Event(), threading.Event()

        def long_lived() -> None:
            store.save(Trajectory("long-1", chain_steps([StepDraft(StepKind.LLM, "a", action=1)])))
            go.wait(10)
            store.save(Trajectory("long-2", chain_steps([StepDraft(StepKind.LLM, "b", action=2)])))
            done.set()

        keeper = threading.Thread(target=long_lived)
        keeper.start()
        for _ in range(5):  # new threads meanwhile: the sweep must not close a live one's
            worker = threading.Thread(target=store.load, args=("main",))
            worker.start()
            worker.join()
        go.set()
        keeper.join()
        assert done.is_set()
        assert {"long-1", "long-2"} <= {s.session_id for s in store.list_sessions()}
    assert all(r.ok for r in CheckpointStore(db_path, read_only=True).verify())


# -- bad files --------------------------------------------------------------------------------


def _good_store(path: Path, sessions: int = 30) -> None:
    with CheckpointStore(path) as store:
        store.save_many(
            [
                Trajectory(
                    f"s{i}",
                    chain_steps(
                        StepDraft(StepKind.TOOL, f"t{j}", inputs={"i": i, "j": j}, action="v" * 300)
                        for j in range(4)
                    ),
                )
                for i in range(sessions)
            ]
        )


def _damage(path: Path, how: str) -> None:
    rng = random.Random(how)
    data = path.read_bytes()
    if how == "random bytes":
        path.write_bytes(rng.randbytes(8192))
    elif how == "sqlite header, random body":
        path.write_bytes(data[:100] + rng.randbytes(len(data) - 100))
    elif how.startswith("truncated to "):
        keep = {"half": len(data) // 2, "one page": 4096, "100 bytes": 100, "10 bytes": 10}
        path.write_bytes(data[: keep[how.removeprefix("truncated to ")]])
    elif how == "one page overwritten":
        page = 4096 * 3
        path.write_bytes(data[:page] + rng.randbytes(4096) + data[page + 4096 :])
    else:
        raise AssertionError(how)


DAMAGE = [
    "random bytes",
    "sqlite header, random body",
    "truncated to half",
    "truncated to one page",
    "truncated to 100 bytes",
    "truncated to 10 bytes",
    "one page overwritten",
]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_corrupt_file_gives_a_clear_store_error(db_path, how):
    _good_store(db_path)
    _damage(db_path, how)
    with pytest.raises(AgentReplayError) as caught:
        with CheckpointStore(db_path) as store:
            for session_id in store.session_ids():
                store.load(session_id)
            assert all(r.ok for r in store.verify())
    # a corrupt file is a StoreError naming the file; damage that SQLite cannot see but the
    # hashes can (a page of content) is a ChainIntegrityError naming the session
    assert isinstance(caught.value, (StoreError, ChainIntegrityError))
    if isinstance(caught.value, StoreError):
        assert str(db_path) in str(caught.value)
    assert not isinstance(caught.value, sqlite3.Error)


@pytest.mark.parametrize("how", DAMAGE)
def test_cli_verify_reports_a_corrupt_file_without_a_traceback(db_path, how):
    _good_store(db_path)
    _damage(db_path, how)
    result = CliRunner().invoke(cli, ["verify", "--db", str(db_path)])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


def _foreign(path: Path, application_id: int = 0) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")  # a common table name
    conn.execute("INSERT INTO meta VALUES ('owner', 'someone else')")
    conn.execute(f"PRAGMA application_id={application_id}")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("application_id", [0, 0x12345678])
def test_a_foreign_sqlite_file_is_refused_and_left_untouched(tmp_path, application_id):
    path = tmp_path / "theirs.db"
    _foreign(path, application_id)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not an agent-replay store"):
        CheckpointStore(path)
    assert path.read_bytes() == before  # not even switched to WAL
    assert not Path(f"{path}-wal").exists()


def test_a_store_from_a_newer_agent_replay_is_refused(db_path):
    _good_store(db_path, sessions=1)
    conn = sqlite3.connect(db_path)
    newer = SCHEMA_VERSION + 1
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(newer),))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=rf"newer agent-replay \(schema {newer}.*upgrade"):
        CheckpointStore(db_path)


def test_an_unreadable_schema_version_is_a_store_error(db_path):
    _good_store(db_path, sessions=1)
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value='two' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="unreadable schema version"):
        CheckpointStore(db_path)


def test_an_empty_file_becomes_a_new_store(db_path):
    db_path.touch()
    with CheckpointStore(db_path) as store:
        assert store.session_ids() == []


def test_a_missing_directory_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match=r"cannot create a store there .*no/such is not a dir"):
        CheckpointStore(tmp_path / "no" / "such" / "dir.sqlite")


@pytest.fixture
def read_only_mount(tmp_path):
    """A tmpfs remounted read-only holding a copy of a store (needs root and mount rights:
    skipped where they are missing)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                      capture_output=True).returncode:  # fmt: skip
        pytest.skip("cannot mount a tmpfs here")
    try:
        with CheckpointStore(mount / "s.sqlite") as store:
            store.save(Trajectory("s0", chain_steps([StepDraft(StepKind.LLM, "x", "in", 1)])))
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_store_on_a_read_only_file_system_is_read_and_refuses_writes(read_only_mount):
    """Reading a WAL database needs its shared-memory file, which a read-only file system
    cannot hold: it is opened immutable (it was 'not a usable SQLite database')."""
    with CheckpointStore(read_only_mount / "s.sqlite") as store:
        assert store.read_only and store.session_ids() == ["s0"]
        assert store.verify()[0].ok
        with pytest.raises(StoreError, match=r"read-only file system\); nothing can be written"):
            store.save(Trajectory("s1", []))
    with pytest.raises(StoreError, match="directory is on a read-only file system"):
        CheckpointStore(read_only_mount / "new.sqlite")
    trace = read_only_mount.parent / "t.jsonl"
    trace.write_text("{}\n")
    for args in (["import", str(trace)], ["collect", "--http", "127.0.0.1:0"]):
        result = CliRunner().invoke(cli, [*args, "--db", str(read_only_mount / "s.sqlite")])
        assert result.exit_code == 1 and "read-only file system" in result.output, result.output
    assert sorted(p.name for p in read_only_mount.iterdir()) == ["s.sqlite"]


@pytest.mark.parametrize("denied", ["file", "directory"])
def test_a_store_this_user_cannot_write_is_read_and_refused_to_writers(
    tmp_path, monkeypatch, denied
):
    """(os.access stands in for the permissions: the tests run as root.) A file or directory
    without write permission for this user: every read command failed ('attempt to write a
    readonly database'), and the receiver answered every export 503 for a whole run."""
    import agent_replay.store.sqlite as sqlite_module

    path = tmp_path / "s.sqlite"
    with CheckpointStore(path) as store:
        store.save(Trajectory("s0", chain_steps([StepDraft(StepKind.LLM, "x", "in", 1)])))
    barred = path if denied == "file" else tmp_path
    real = os.access
    monkeypatch.setattr(
        sqlite_module.os,
        "access",
        lambda p, mode: not (Path(p) == barred and mode & os.W_OK) and real(p, mode),
    )
    with CheckpointStore(path) as store:
        assert store.read_only and denied in store.unwritable
        assert store.session_ids() == ["s0"] and store.verify()[0].ok
        with pytest.raises(StoreError, match="nothing can be written"):
            store.delete("s0")
    with pytest.raises(StoreError, match=f"cannot be written: .*{denied}"):
        sqlite_module.open_store(path)  # what capture and sessions open
    result = CliRunner().invoke(cli, ["collect", "--http", "127.0.0.1:0", "--db", str(path)])
    assert result.exit_code == 1 and "cannot be written" in result.output, result.output


def test_a_directory_or_an_empty_path_is_a_store_error(tmp_path):
    """Not an IsADirectoryError from deep inside, and an empty path does not open '.'."""
    with pytest.raises(StoreError, match="is a directory"):
        CheckpointStore(tmp_path)
    with pytest.raises(StoreError, match="no store path"):
        CheckpointStore("")


def test_a_closed_store_says_so(db_path):
    store = CheckpointStore(db_path)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.session_ids()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), read_only=st.booleans())
def test_any_damage_is_an_agent_replay_error_or_data(data, read_only):
    """Bytes overwritten anywhere after the SQLite header, or the file cut short: opening,
    listing and loading give verified data or an :class:`AgentReplayError`, never another
    exception (SQLite's own messages about a damaged file can be undecodable text)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.sqlite"
        _good_store(path)
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        raw = bytearray(path.read_bytes())
        for _ in range(data.draw(st.integers(1, 8))):
            raw[data.draw(st.integers(16, len(raw) - 1))] = data.draw(st.integers(0, 255))
        path.write_bytes(bytes(raw[: data.draw(st.integers(16, len(raw)))]))
        try:
            with CheckpointStore(path, read_only=read_only) as store:
                for session_id in store.session_ids():
                    store.load(session_id).verify()
        except AgentReplayError:
            pass


def test_the_write_ahead_log_is_truncated_after_a_checkpoint(db_path):
    """A big transaction (an import's staging, a receiver's purge) grew the -wal file to
    hundreds of MB and it stayed so; each connection now sets a size limit SQLite truncates
    the log back to after a checkpoint."""
    from agent_replay import record
    from agent_replay.store.sqlite import WAL_LIMIT_BYTES

    with CheckpointStore(db_path) as store:
        store.save(record(lambda ctx: ctx.llm("s", produce=lambda: "x" * 1_000_000)))
        conn = store._conn()
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == WAL_LIMIT_BYTES


def test_a_full_file_system_is_named_and_a_store_that_could_not_be_made_is_not_left_empty(
    tmp_path, monkeypatch
):
    import agent_replay.store.sqlite as sqlite_module

    class Full:
        f_bavail, f_frsize, f_flag = 0, 4096, 0

    monkeypatch.setattr(sqlite_module.os, "statvfs", lambda path: Full())
    path = tmp_path / "new.sqlite"
    real_connect = sqlite3.connect

    class NoRoom:  # SQLite's answer on a full disk, at the first write
        def __init__(self, conn):
            self._conn = conn

        def execute(self, sql, *args):
            if sql.startswith("PRAGMA journal_mode"):
                raise sqlite3.OperationalError("database or disk is full")
            return self._conn.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._conn, name)

    monkeypatch.setattr(
        sqlite_module.sqlite3, "connect", lambda *a, **k: NoRoom(real_connect(*a, **k))
    )
    with pytest.raises(StoreError, match=r"disk is full\); its file system is full$"):
        CheckpointStore(path)
    assert not path.exists()


def test_a_new_store_and_its_wal_are_readable_by_their_owner_only(tmp_path):
    """A store holds whole prompts, answers and tool arguments: it was created 0644, and the
    reports folder 0755 (the security review)."""
    path = tmp_path / "s.sqlite"
    with CheckpointStore(path) as store:
        store.save(Trajectory("s0", chain_steps([StepDraft(StepKind.LLM, "x", "in", 1)])))
        for name in ("s.sqlite", "s.sqlite-wal", "s.sqlite-shm"):
            assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name
    result = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "demo" / "demo.sqlite.reports").stat().st_mode & 0o777 == 0o700


CLOSE_UNDER_WRITERS = textwrap.dedent(
    """
    import sys, threading, time
    from agent_replay import CheckpointStore, Trajectory
    from agent_replay.model import StepDraft, StepKind, chain_steps

    store = CheckpointStore(sys.argv[1])
    stop = threading.Event()

    def writer(k):
        i = 0
        while not stop.is_set():
            try:
                step = StepDraft(StepKind.LLM, "x", inputs=i, action=k)
                store.save(Trajectory(f"w{k}-{i}", chain_steps([step])))
                store.session_ids()
            except Exception:
                pass
            i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    store.close()
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join()
    print("survived")
    """
)


def test_closing_a_store_other_threads_are_using_does_not_crash(db_path):
    """close() closed connections other threads were running statements on: the process
    died (SIGSEGV) in 5 of 5 runs. Those are now let go, and close when their threads are
    done with them; the threads' next calls get a StoreError."""
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", CLOSE_UNDER_WRITERS, str(db_path)],
            env={**os.environ, "PYTHONPATH": str(SRC)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and "survived" in done.stdout, done.stderr[-2000:]


def test_a_forked_child_writing_after_its_parent_closed_the_store_loses_nothing(db_path):
    """The child kept its parent's connections open: SQLite's per-process lock state came
    with them, the child's own connection took no file lock, and the parent, closing the
    store, checkpointed and deleted the WAL the child was writing to (its sessions vanished
    without an error)."""

    def traj(name):
        return Trajectory(name, chain_steps([StepDraft(StepKind.LLM, "x", inputs=name, action=1)]))

    store = CheckpointStore(db_path)
    store.save(traj("parent"))
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            store.save(traj("child-0"))
            os.write(ready_w, b"x")
            os.read(go_r, 1)  # the parent has closed the store
            for i in range(1, 6):
                store.save(traj(f"child-{i}"))
            code = 0
        finally:
            os._exit(code)
    os.read(ready_r, 1)
    store.close()
    os.write(go_w, b"x")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with CheckpointStore(db_path, read_only=True) as fresh:
        assert set(fresh.session_ids()) == {"parent", *(f"child-{i}" for i in range(6))}
        assert all(r.ok for r in fresh.verify())
