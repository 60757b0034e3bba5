"""How long a prune holds the store's write lock, against how long it takes.

A store of ``--sessions`` runs of ``--steps`` steps (every other one a fork sharing the first
half of the run before it), a third of them deleted, so that a prune has sessions to walk and
rows to remove. ``CheckpointStore.prune()`` surveys a snapshot under no lock (every remaining
session walked, every header read) and then deletes in one write transaction (walking only
the sessions written since): printed, the time of each.

Run: ``python benchmarks/prune.py [--sessions 2000] [--steps 50]`` (``--quick``: a few).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from agent_replay import CheckpointStore, Trajectory
from agent_replay.model import Lineage, StepDraft, StepKind, chain_steps
from agent_replay.store import prune as pruning


def build(path: Path, sessions: int, steps: int) -> dict[str, int]:
    with CheckpointStore(path, durable=False) as store:
        batch, previous = [], None
        for i in range(sessions):
            fork = previous is not None and i % 2 == 1
            cut = steps // 2 if fork else 0
            drafts = [s.draft() for s in previous.steps[:cut]] if fork else []
            drafts += [
                StepDraft(
                    StepKind.LLM,
                    f"s{j}",
                    inputs={"prompt": f"run {i} step {j} " + "p" * 300},
                    action=f"answer {i}/{j}",
                )
                for j in range(cut, steps)
            ]
            lineage = Lineage(previous.session_id, cut) if fork else None
            previous = Trajectory(f"s{i}", chain_steps(drafts), lineage=lineage)
            batch.append(previous)
            if len(batch) == 50:
                store.save_many(batch)
                batch = []
        store.save_many(batch)
        for i in range(0, sessions, 3):
            store.delete(f"s{i}")
        return store.stats()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sessions, steps = (30, 10) if args.quick else (args.sessions, args.steps)
    seconds: dict[str, float] = {}
    for name in ("survey", "apply"):
        phase = getattr(pruning, name, None)
        if phase is None:  # a tree from before the survey: all of it under the lock
            continue

        def timed(*a, _phase=phase, _name=name, **k):
            start = time.perf_counter()
            try:
                return _phase(*a, **k)
            finally:
                seconds[_name] = time.perf_counter() - start

        setattr(pruning, name, timed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prune.sqlite"
        stats = build(path, sessions, steps)
        with CheckpointStore(path) as store:
            start = time.perf_counter()
            result = store.prune()
            total = time.perf_counter() - start
    print(
        f"store: {stats['sessions']} sessions, {stats['steps']} step rows, {stats['blobs']} blobs"
    )
    print(f"prune removed {result.steps} step rows and {result.blobs} blobs in {total:.2f} s:")
    if seconds:
        print(f"  survey, no lock       {seconds['survey']:.2f} s")
        print(f"  deletion, write lock  {seconds['apply']:.2f} s")
    else:
        print("  all of it under the write lock")


if __name__ == "__main__":
    main()
