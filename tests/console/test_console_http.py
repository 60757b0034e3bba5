"""The console over HTTP (no browser): status codes, headers, escaping, read-only."""

from __future__ import annotations

import html
import re
import urllib.error
import urllib.request
from urllib.parse import quote, unquote_plus

import pytest

from agent_replay.console.app import CSP
from surface_helpers import XSS_IMG, XSS_SCRIPT


def fetch(url, method="GET"):
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_pages_answer_with_security_headers(console_url, console_db):
    _, evil = console_db
    for path in (
        "/",
        "/?q=demo&outcome=failed&source=native",
        "/session?id=demo",
        f"/session?id={quote(evil)}",
        "/graph",
        f"/graph?id={quote(evil)}",
        "/reports",
        "/diff",
        "/diff?a=demo&b=demo-fork-2",
    ):
        status, headers, body = fetch(console_url + path)
        assert status == 200, path
        assert headers["Content-Security-Policy"] == CSP
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert XSS_SCRIPT not in body and XSS_IMG not in body, path
        assert "<script" not in body, path


def listed(body):
    """Session ids in the first column of the sessions table."""
    return [
        html.unescape(unquote_plus(m))
        for m in re.findall(r'<tr><td><a href="/session\?id=([^"]+)"', body)
    ]


def test_search_filters_sessions(console_url, console_db):
    _, evil = console_db
    assert sorted(listed(fetch(console_url + "/")[2])) == sorted(
        ["demo", "demo-fork-2", evil, XSS_IMG + "-fork"]
    )
    assert sorted(listed(fetch(console_url + "/?q=fork")[2])) == sorted(
        ["demo-fork-2", XSS_IMG + "-fork"]
    )
    assert listed(fetch(console_url + "/?outcome=passed")[2]) == ["demo-fork-2"]
    assert listed(fetch(console_url + "/?source=fork&q=demo")[2]) == ["demo-fork-2"]
    assert listed(fetch(console_url + "/?q=" + quote("<script>"))[2]) == [evil]


def test_errors_are_pages(console_url):
    status, _, body = fetch(console_url + "/session?id=" + quote(XSS_SCRIPT + "missing"))
    assert status == 404 and XSS_SCRIPT not in body and "No such session" in body
    assert fetch(console_url + "/nowhere")[0] == 404
    assert fetch(console_url + "/session")[0] == 400
    assert fetch(console_url + "/report?file=../runs.sqlite")[0] == 404
    status, headers, _ = fetch(console_url + "/", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    assert fetch(console_url + "/", method="DELETE")[0] == 405
    for method in ("OPTIONS", "TRACE", "BREW"):  # the standard library answered 501 pages
        status, headers, _ = fetch(console_url + "/", method=method)
        assert status == 405 and headers["Content-Security-Policy"] == CSP, method
    assert fetch(console_url + "/", method="HEAD")[0] == 200


def test_report_page_renders_the_attribution(console_url):
    _, _, listing = fetch(console_url + "/reports")
    assert "separated" in listing
    status, _, page = fetch(
        console_url
        + "/report?file="
        + quote(listing.split("file=")[1].split('"')[0].replace("&amp;", "&"))
    )
    assert status == 200 and "Culprit: step" in page


@pytest.mark.parametrize("bad", ["not a store", ""])
def test_console_refuses_a_foreign_file(tmp_path, bad):
    from agent_replay.console import Console
    from agent_replay.errors import StoreError

    path = tmp_path / "x.sqlite"
    path.write_text(bad or "x")
    with pytest.raises(StoreError):
        Console(path)


def test_diff_page_pairs_steps_as_diff_does(tmp_path):
    """Run B has an extra step at position 1: the page showed B's steps shifted against A's
    (and never B's last one); it now pairs them by operation, as ``diff`` does."""
    from agent_replay import CheckpointStore, record
    from agent_replay.console.app import Console

    def agent(ctx, extra=False):
        ctx.llm("plan", produce=lambda: "P", q=1)
        if extra:
            ctx.tool("lookup", produce=lambda: "L", q=2)
        ctx.tool("search", produce=lambda: "S", q=3)
        return ctx.llm("write", produce=lambda: "W", q=4)

    db = tmp_path / "d.sqlite"
    with CheckpointStore(db) as store:
        store.save(record(agent, {"extra": False}, session_id="A"))
        store.save(record(agent, {"extra": True}, session_id="B"))
    with Console(db) as console:
        page = console.handle("GET", "/diff?a=A&b=B").body.decode()
    page = re.sub(r"<details>.*?</details>", "", page, flags=re.S)
    rows = [
        [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in cells]
        for cells in (
            re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)
            for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S)
        )
        if cells
    ]
    labels = [(row[0], row[1], row[2]) for row in rows]
    assert labels == [
        ("0", "llm:plan", "llm:plan"),
        ("1", "—", "tool:lookup"),
        ("1/2", "tool:search", "tool:search"),
        ("2/3", "llm:write", "llm:write"),
    ]


def test_graph_of_a_fork_chain_deeper_than_the_recursion_limit(tmp_path):
    """Each branch forked from the last: /graph walked the chain recursively and answered 500
    past Python's recursion limit (about 1,000 levels)."""
    import dataclasses
    import sys

    from agent_replay import CheckpointStore, Lineage, record
    from agent_replay.console.app import Console

    traj = record(lambda ctx: ctx.llm("s", produce=lambda: 1), session_id="root")
    depth = sys.getrecursionlimit() + 100
    db = tmp_path / "deep.sqlite"
    with CheckpointStore(db) as store:
        parent = "root"
        chain = [traj]
        for i in range(depth):
            lineage = Lineage(parent, 0, {"do": i})
            chain.append(dataclasses.replace(traj, session_id=f"f{i}", lineage=lineage))
            parent = f"f{i}"
        store.save_many(chain)
    with Console(db) as console:
        response = console.handle("GET", "/graph")
    assert response.status == 200
    assert f"f{depth - 1}" in response.body.decode()


def test_a_report_that_does_not_validate_is_listed_as_unreadable_not_rendered(tmp_path):
    """A hand-made or older report in the reports folder answered 500 (or rendered without
    the version check ``agent-replay report`` makes); now 422 with that check's message."""
    import json

    from agent_replay import CheckpointStore, attribute, record
    from agent_replay.console.app import Console

    db = tmp_path / "d.sqlite"
    with CheckpointStore(db) as store:
        store.save(record(lambda ctx: ctx.llm("s", produce=lambda: 1), session_id="A"))
    folder = tmp_path / "d.sqlite.reports"
    folder.mkdir()
    minimal = {"session_id": "A", "verdict": "likely", "culprit_index": 1, "n_steps": 3}
    (folder / "old.json").write_text(json.dumps(minimal))
    with Console(db) as console:
        listing = console.handle("GET", "/reports").body.decode()
        page = console.handle("GET", "/report?file=old.json")
        home = console.handle("GET", "/").body.decode()
    assert "unreadable" in listing
    assert page.status == 422 and "schema_version" in page.body.decode()
    assert "<td>yes</td>" not in home  # the session is not marked attributed

    def agent(ctx):
        return ctx.llm("s", produce=lambda: 1)

    with CheckpointStore(db) as store:
        result = attribute(store.load("A"), agent, lambda r: 0.0, rollouts=8)
    result.to_json(folder / "good.json")
    with Console(db) as console:
        assert "<td>yes</td>" in console.handle("GET", "/").body.decode()
        assert console.handle("GET", "/report?file=good.json").status == 200


def test_the_sessions_page_lists_the_newest_and_says_how_many_match(tmp_path, monkeypatch):
    """A store of 50,000 sessions made an 11 MB home page and 2 MB session pages (every id in
    the compare list); pages list at most PAGE_ROWS, the newest first."""
    from agent_replay import CheckpointStore, record
    from agent_replay.console import app

    monkeypatch.setattr(app, "PAGE_ROWS", 3)
    db = tmp_path / "many.sqlite"
    with CheckpointStore(db) as store:
        for i in range(5):
            store.save(record(lambda ctx: ctx.llm("s", produce=lambda: 1), session_id=f"s{i}"))
    with app.Console(db) as console:
        home = console.handle("GET", "/").body.decode()
        session = console.handle("GET", "/session?id=s0").body.decode()
        found = console.handle("GET", "/?q=s1").body.decode()
    assert listed(home) == ["s4", "s3", "s2"] and "the newest of 5" in home
    assert listed(found) == ["s1"] and "the newest of" not in found
    assert session.count('<option value="s') == 3  # s4, s3, s2: the newest others


def test_a_page_asked_for_under_another_host_name_is_refused(console_url):
    """DNS rebinding: a web page whose name resolves to 127.0.0.1 read every session (and the
    store's path) through the console, which answered any Host."""
    for host, status in (("attacker.example", 421), ("localhost", 200)):
        request = urllib.request.Request(console_url + "/", headers={"Host": host})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == status == 200
        except urllib.error.HTTPError as error:
            assert error.code == status == 421


def test_a_report_cut_short_is_listed_as_unreadable_not_hidden(tmp_path):
    """A truncated report was left out of /reports and /report answered 404 "No report
    named ..." although the file was there."""
    from agent_replay import CheckpointStore, record
    from agent_replay.console.app import Console

    db = tmp_path / "d.sqlite"
    with CheckpointStore(db) as store:
        store.save(record(lambda ctx: ctx.llm("s", produce=lambda: 1), session_id="A"))
    folder = tmp_path / "d.sqlite.reports"
    folder.mkdir()
    (folder / "cut.json").write_text('{"session_id": "A", "verdict": "separ')
    (folder / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    with Console(db) as console:
        listing = console.handle("GET", "/reports").body.decode()
        page = console.handle("GET", "/report?file=cut.json")
        missing = console.handle("GET", "/report?file=binary.json")
    assert "unreadable: not JSON" in listing and "binary" not in listing
    assert page.status == 422 and "not JSON" in page.body.decode()
    assert missing.status == 404


def test_a_captured_session_without_a_seed_shows_a_dash(tmp_path):
    """QA: its page said ``seed None`` (Python's None) where other empty facts say ``-``."""
    import dataclasses

    from agent_replay import CheckpointStore, record
    from agent_replay.console import app

    db = tmp_path / "captured.sqlite"
    run = record(lambda ctx: ctx.llm("s", produce=lambda: 1), session_id="c")
    with CheckpointStore(db) as store:
        store.save(dataclasses.replace(run, seed=None))
    with app.Console(db) as console:
        page = console.handle("GET", "/session?id=c").body.decode()
    assert "None" not in page and re.search(r"seed</\w+>\s*<\w+[^>]*>-<", page)
