"""A real store on disk with hostile content, attributed, and the console serving it."""

from __future__ import annotations

import json
import threading

import pytest

from agent_replay import CheckpointStore, fork, record
from agent_replay.attribution import attribute
from agent_replay.cli.attribute import build_report, report_file_name
from agent_replay.console import Console, make_server
from agent_replay.demo.agent import DEMO_SEED, DEMO_TASK, refund_approved, support_agent
from surface_helpers import XSS_IMG, XSS_SCRIPT, XSS_SVG, evil_agent, evil_verifier


@pytest.fixture(scope="session")
def console_db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("console")
    db = folder / "runs.sqlite"
    reports = folder / "runs.sqlite.reports"
    reports.mkdir()
    with CheckpointStore(db) as store:
        demo = record(
            support_agent, DEMO_TASK, seed=DEMO_SEED, verifier=refund_approved, session_id="demo"
        )
        store.save(demo)
        fork(support_agent, demo, 2, do="refund_policy_2026", verifier=refund_approved, store=store)
        for seed in range(64):
            evil = record(
                evil_agent,
                {"question": XSS_IMG},
                seed=seed,
                verifier=evil_verifier,
                session_id=f"{XSS_SCRIPT}{seed}",
                metadata={"capture": {"notes": [XSS_SVG], "steps": 2}, "note": XSS_IMG},
            )
            if evil.failed:
                break
        store.save(evil)
        fork(
            evil_agent,
            evil,
            0,
            do=XSS_IMG,
            session_id=XSS_IMG + "-fork",
            verifier=evil_verifier,
            store=store,
        )
        runs = ((demo, support_agent, refund_approved), (evil, evil_agent, evil_verifier))
        for traj, agent, verifier in runs:
            result = attribute(traj, agent, verifier, repair=True)
            data = build_report(result, traj, result.explain(traj))
            (reports / report_file_name(traj.session_id)).write_text(json.dumps(data))
    return db, evil.session_id


@pytest.fixture(scope="session")
def console_url(console_db):
    db, _ = console_db
    console = Console(db)
    server = make_server(console, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    console.close()
