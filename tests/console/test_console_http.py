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
