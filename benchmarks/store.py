"""Store throughput: CheckpointStore.save_many vs raw sqlite3 executemany of the same rows.

Both sides write the same rows (blobs, steps, sessions) into a fresh file with the same
schema and pragmas (WAL, synchronous=FULL), in the same transaction shape: one transaction
for the whole batch, or one per session. The trajectories are built (and hashed) before the
clock starts, so the store's figure is what ``save_many`` adds on top of SQLite: collecting
rows, encoding and hashing the session header, the summary columns. Loading is measured with
every hash verified. Medians over alternating repetitions in one run.

Run: ``python benchmarks/store.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from agent_replay import CheckpointStore, Outcome, Trajectory, canonical
from agent_replay.model import StepDraft, StepKind, chain_steps
from agent_replay.store.sqlite import _summary

PROMPT = "You are a careful assistant. " * 20  # shared by every session: stored once


def build(sessions: int, steps: int) -> list[Trajectory]:
    out = []
    for s in range(sessions):
        drafts = []
        for i in range(steps):
            if i % 2 == 0:
                messages = [
                    {"role": "system", "parts": [{"type": "text", "content": PROMPT}]},
                    {"role": "user", "parts": [{"type": "text", "content": f"task {s} turn {i}"}]},
                ]
                reply = [{"role": "assistant", "parts": [{"type": "text", "content": f"r{s}.{i}"}]}]
                drafts.append(
                    StepDraft(
                        StepKind.LLM,
                        "chat",
                        inputs={"messages": messages, "model": "gpt-4o-mini"},
                        action=reply,
                        agent="bot",
                        attributes={"model": "gpt-4o-mini", "input_tokens": 57},
                    )
                )
            else:
                drafts.append(
                    StepDraft(
                        StepKind.TOOL,
                        "search",
                        inputs={"arguments": {"q": f"query {s}.{i}"}},
                        action={"hits": [f"doc {s}.{i}.{k}" for k in range(5)]},
                        agent="bot",
                    )
                )
        out.append(
            Trajectory(
                f"session-{s}",
                chain_steps(drafts),
                task={"q": s},
                seed=s,
                outcome=Outcome.from_score(float(s % 2)),
                metadata={"source": "native"},
            )
        )
    return out


def rows(trajectories: list[Trajectory]) -> tuple[list, list, list]:
    """The exact rows CheckpointStore writes, computed ahead for the raw side."""
    blobs: dict[str, bytes] = {}
    steps: dict[str, tuple] = {}
    sessions = []
    for traj in trajectories:
        for step in traj.steps:
            blobs.setdefault(step.input_hash, step.input_bytes)
            blobs.setdefault(step.output_hash, step.output_bytes)
            steps.setdefault(
                step.step_hash, (step.step_hash, step.prev_hash, step.index, step.header_bytes)
            )
        header = canonical.encode(traj.header())
        sessions.append(
            (
                traj.session_id,
                traj.head_hash,
                len(traj.steps),
                header,
                canonical.digest(header),
                *_summary(traj),
                time.time_ns(),
            )
        )
    return list(blobs.items()), list(steps.values()), sessions


def fresh(directory: Path) -> Path:
    path = directory / f"{time.perf_counter_ns()}.sqlite"
    CheckpointStore(path).close()  # the same schema on both sides
    return path


def raw_write(path: Path, batches: list[tuple[list, list, list]]) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    start = time.perf_counter()
    for blobs, steps, sessions in batches:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT OR IGNORE INTO blobs(hash, data) VALUES (?, ?)", blobs)
        conn.executemany(
            "INSERT OR IGNORE INTO steps(hash, prev, idx, header) VALUES (?, ?, ?, ?)", steps
        )
        conn.executemany(
            "INSERT OR REPLACE INTO sessions(session_id, head, n_steps, header, digest, source, "
            "failed, score, parent_session, fork_step, saved_ns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            sessions,
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def store_write(path: Path, batches: list[list[Trajectory]]) -> float:
    store = CheckpointStore(path)
    store.session_ids()  # open the connection before the clock starts, as raw_write does
    start = time.perf_counter()
    for batch in batches:
        store.save_many(batch)
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed


def store_load(path: Path, ids: list[str]) -> float:
    with CheckpointStore(path) as store:
        store.session_ids()
        start = time.perf_counter()
        for session_id in ids:
            store.load(session_id)
        return time.perf_counter() - start


def raw_read(path: Path) -> float:
    """Reading the same rows back with plain SELECTs, nothing decoded or checked."""
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    conn.execute("SELECT * FROM sessions").fetchall()
    conn.execute("SELECT * FROM steps").fetchall()
    conn.execute("SELECT * FROM blobs").fetchall()
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.repeats = 40, 3
    trajectories = build(args.sessions, args.steps)
    total = args.sessions * args.steps
    shapes = {
        "one transaction": [trajectories],
        "one per session": [[t] for t in trajectories],
    }
    raw_rows = {name: [rows(b) for b in batches] for name, batches in shapes.items()}
    ids = [t.session_id for t in trajectories]
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for repeat in range(args.repeats):
            for name, batches in shapes.items():
                order = ("store", "raw") if repeat % 2 == 0 else ("raw", "store")
                for side in order:
                    path = fresh(directory)
                    if side == "store":
                        elapsed = store_write(path, batches)
                        samples.setdefault("load verified", []).append(store_load(path, ids))
                        samples.setdefault("raw select", []).append(raw_read(path))
                    else:
                        elapsed = raw_write(path, raw_rows[name])
                    samples.setdefault(f"{name} {side}", []).append(elapsed)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(
        f"store benchmark: {args.sessions} sessions x {args.steps} steps = {total} steps, "
        f"{args.repeats} repeats, medians (WAL, synchronous=FULL)"
    )
    print(f"{'writes, steps/s':20}{'save_many':>12}{'raw sqlite3':>13}{'ratio':>8}")
    for name in shapes:
        ours, raw = total / med[f"{name} store"], total / med[f"{name} raw"]
        print(f"{name:20}{ours:12,.0f}{raw:13,.0f}{ours / raw:7.2f}x")
    print(
        f"load, every hash verified: {total / med['load verified']:,.0f} steps/s "
        f"(plain SELECT of the same rows: {total / med['raw select']:,.0f} steps/s)"
    )


if __name__ == "__main__":
    main()
