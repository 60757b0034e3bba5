"""OTLP/JSON files of a real instrumentation with event-only content capture (spans and their
log records, from ../shared/fixtures/generated) as traces.jsonl and logs.jsonl, and a store."""

import shutil

from docs_paths import FIXTURES

from agent_replay import CheckpointStore

shutil.copy(FIXTURES / "generated" / "otel_event_only.jsonl", "traces.jsonl")
shutil.copy(FIXTURES / "generated" / "otel_event_only.logs.jsonl", "logs.jsonl")
paths = ["traces.jsonl", "logs.jsonl"]
store = CheckpointStore("runs.sqlite")
