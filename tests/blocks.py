"""Import a file read whole and read in blocks, for tests that compare the two."""

from __future__ import annotations

from pathlib import Path

import agent_replay.ingest as ingest
from agent_replay.ingest import ImportResult, load_many


def whole_and_in_blocks(path: Path, block: int) -> list[ImportResult]:
    """``load_many([path])`` read whole, then read in blocks of ``block`` bytes."""
    results = []
    for size in (1 << 30, block):
        saved = ingest.BLOCK_BYTES
        ingest.BLOCK_BYTES = size
        try:
            results.append(load_many([path]))
        finally:
            ingest.BLOCK_BYTES = saved
    return results
