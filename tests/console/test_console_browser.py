"""The console and the HTML report in headless Chromium (Debian's ``chromium`` package).

Pages load without console errors, every link works, and recorded ``<script>`` / ``onerror``
payloads in step content, session ids, agent names and fork metadata never execute. The
pages also carry a Content-Security-Policy that forbids scripts; the browser here *bypasses*
it, so that escaping alone is what is tested. ``test_detector_sees_an_unescaped_payload``
shows that the detection would catch a payload that did run.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless Chromium not installed: apt-get install -y chromium (CI's .ci/run does)",
)
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            bypass_csp=True,
        )
        yield context
        context.close()


class Watch:
    """Console errors, page errors and dialogs of one page."""

    def __init__(self, page):
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

        def dialog(d):
            self.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)


def pwned(page):
    return page.evaluate("() => window.__pwned === undefined ? null : String(window.__pwned)")


def open_all_details(page):
    page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")


def links(page):
    return page.evaluate(
        "() => Array.from(document.querySelectorAll('a[href]'))"
        ".map(a => new URL(a.getAttribute('href'), location.href).href)"
    )


def test_detector_sees_an_unescaped_payload(browser_context):
    """The canary: the same payloads, *unescaped*, do run here and are detected."""
    page = browser_context.new_page()
    watch = Watch(page)
    page.set_content("<p>x</p><img src=x onerror=\"window.__pwned='img'; alert(2)\">")
    page.wait_for_function("() => window.__pwned !== undefined")
    assert pwned(page) == "img"
    assert watch.dialogs == ["2"]
    page.close()


def test_every_console_page_is_clean(browser_context, console_url, console_db):
    _, evil = console_db
    page = browser_context.new_page()
    watch = Watch(page)
    start = [
        console_url + "/",
        f"{console_url}/diff?a={quote(evil)}&b={quote('demo')}",
        f"{console_url}/graph?id={quote(evil)}",
    ]
    queue, seen = deque(start), set(start)
    visited = 0
    while queue and visited < 80:
        target = queue.popleft()
        response = page.goto(target)
        visited += 1
        assert response is not None and response.status == 200, target
        open_all_details(page)
        page.wait_for_timeout(20)
        assert pwned(page) is None, target
        assert watch.errors == [], (target, watch.errors)
        assert watch.dialogs == [], target
        for link in links(page):
            if urlsplit(link).netloc == urlsplit(console_url).netloc and link not in seen:
                seen.add(link)
                queue.append(link)
    paths = {urlsplit(u).path for u in seen}
    assert {"/", "/session", "/graph", "/reports", "/report", "/diff"} <= paths
    assert visited >= 10
    page.close()


def test_search_and_compare_forms(browser_context, console_url, console_db):
    _, evil = console_db
    page = browser_context.new_page()
    watch = Watch(page)
    page.goto(console_url + "/")
    page.fill("input[name=q]", "<script>")
    page.click("button[type=submit]")
    page.wait_for_url("**/?q=*")
    assert page.locator("tbody tr").count() == 1  # the hostile session, found and inert
    page.click("tbody tr a")
    assert urlsplit(page.url).path == "/session"
    assert page.locator("h1").inner_text() == f"Session {evil}"
    page.select_option("select[name=b]", index=0)
    page.click("form[action='/diff'] button")
    page.wait_for_url("**/diff?*")
    assert "Diff" in page.locator("h1").inner_text()
    assert pwned(page) is None and watch.errors == [] and watch.dialogs == []
    page.close()


def test_standalone_report_file_is_clean(browser_context, evil_attribution, tmp_path):
    traj, result = evil_attribution
    path = tmp_path / "report.html"
    result.to_html(path, traj)
    page = browser_context.new_page()
    watch = Watch(page)
    page.goto(path.as_uri())
    open_all_details(page)
    page.wait_for_timeout(50)
    assert pwned(page) is None and watch.errors == [] and watch.dialogs == []
    assert "Culprit: step 0" in page.locator("#verdict").inner_text()
    # the payload is shown as text to the reader
    assert "<script>window.__pwned" in page.locator("#timeline").inner_text()
    page.close()
