"""Runs the attribution suite through the published package (trajectory-causal-attribution 1.0.0).

Executed by ``attribution_suite.py`` inside a separate virtual environment where that package,
and not this repository, provides ``agent_replay``. Prints one JSON object per instance.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import families

from agent_replay import attribute, record


def main() -> None:
    wanted = sys.argv[1]
    instances = int(sys.argv[2])
    rollouts = int(sys.argv[3])
    for name in wanted:
        for index in range(instances):
            instance = families.FAMILIES[name](index)
            found = families.find_failing_recording(instance, record)
            if found is None:
                print(json.dumps({"family": name, "index": index, "skipped": True}), flush=True)
                continue
            trajectory, truth = found
            families.LIVE[0] = 0
            started = time.perf_counter()
            try:
                result = attribute(
                    trajectory,
                    instance.agent,
                    instance.verifier,
                    rollouts=rollouts,
                    method="contrastive",
                )
                culprit = result.culprit_index
                error = None
            except Exception as exc:  # the published package may fail on some instances
                culprit, error = None, f"{type(exc).__name__}: {exc}"
            print(
                json.dumps(
                    {
                        "family": name,
                        "index": index,
                        "truth": truth,
                        "culprit": culprit,
                        "live_steps": families.LIVE[0],
                        "n_steps": len(trajectory.steps),
                        "seconds": time.perf_counter() - started,
                        "error": error,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
