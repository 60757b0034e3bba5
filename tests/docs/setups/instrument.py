"""``instrument`` imported, for the decorator examples."""

from agent_replay import instrument  # noqa: F401
