"""An imported trace (the Langfuse export the example ships) as ``traj``."""

from docs_paths import EXAMPLES

from agent_replay.ingest import load

(traj,) = load(EXAMPLES / "data" / "microsoft-agent-2025-10-14.json")
