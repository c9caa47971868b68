"""The dashboard in a real headless Chromium (Debian's, driven by Playwright): open the list, filter it, open
a run (every plot drawn), pick two runs with two clicks and read the comparison's ratio — the one ``compare
--json`` prints; a hostile label stays text; the login form; a matrix's plots. No request leaves 127.0.0.1
and no page logs an error (the Content-Security-Policy refuses anything inline: a violation would be one).

Without Chromium the tests are skipped with the reason — except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from report_factory import XSS_LABEL, make_run, synth_requests
from serve_support import H200, MI300X, Running, golden_copy

from gpuledger.report.fmt import num
from gpuledger.store import open_store

pytestmark = pytest.mark.chromium

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
TOKEN = "a-long-enough-dashboard-token"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the dashboard's Chromium tests cannot run: {reason}")
    pytest.skip(f"dashboard Chromium test skipped: {reason}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        _unavailable(f"playwright is not installed ({exc}); pip install -e '.[test]'")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()


@dataclass
class Visit:
    page: Any
    base: str
    console: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def offsite(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(self.base + "/") and not u.startswith("data:")]


@pytest.fixture
def visit(browser: Any) -> Iterator[Callable[[Running], Visit]]:
    contexts: list[Any] = []

    def open_tab(server: Running) -> Visit:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        v = Visit(page, server.url)
        page.on("console", lambda m: v.console.append(f"{m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: v.console.append(f"pageerror: {e}"))
        page.on("request", lambda r: v.requests.append(r.url))

        def on_dialog(d: Any) -> None:
            v.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", on_dialog)
        return v

    yield open_tab
    for context in contexts:
        context.close()


def _wait_until(page: Any, expression: str, timeout_s: float = 60.0) -> None:
    """Poll ``expression`` from outside the page (Playwright's wait_for_function evaluates strings with eval
    inside the page, which the dashboard's Content-Security-Policy rightly forbids)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout_s:g} s: {expression}")
        page.wait_for_timeout(100)


PLOTS_DRAWN = "Array.from(document.querySelectorAll('.plot')).every(p => p.querySelector('.main-svg'))"


def _rows(page: Any) -> list[str]:
    return list(page.eval_on_selector_all("#runs tbody tr", "rows => rows.map(r => r.dataset.run)"))


def test_list_filter_run_and_compare_with_two_clicks(
    serve: Callable[..., Running], visit: Callable[[Running], Visit], tmp_path: Path,
    cli_json: Callable[..., Any]
) -> None:
    db = golden_copy(tmp_path / "golden.sqlite")
    v = visit(serve(db=db))
    page = v.page
    page.goto(v.base + "/", wait_until="load")
    assert len(_rows(page)) == 8 and page.text_content("#count") == "8 runs in the store."

    # filter: the runs on an H200
    page.select_option("select[name=gpu]", "NVIDIA H200")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**/?*gpu=NVIDIA*")
    assert _rows(page) == [H200]
    assert page.text_content("#count") == "1 run match the filters."
    page.click("form.filters >> text=clear")
    page.wait_for_url(v.base + "/")

    # open a run: its report, every plot drawn
    page.click(f"a.run[href='/runs/{H200}']")
    page.wait_for_url(f"**/runs/{H200}")
    _wait_until(page, PLOTS_DRAWN)
    assert page.eval_on_selector_all(".plot", "ps => ps.length") >= 4
    assert "h200-vllm" in page.text_content("h1")
    assert page.text_content("section .answer .headline")  # the answer first
    page.go_back()

    # two clicks: A, then B, and the comparison opens
    page.click(f"tr[data-run='{H200}'] input[name=a]")
    page.click(f"tr[data-run='{MI300X}'] input[name=b]")
    page.wait_for_url(f"**/compare?a={H200}&b={MI300X}")
    expected = cli_json("compare", H200, MI300X, db=db)
    shown = page.get_attribute("data#ratio", "value")
    assert shown is not None and float(shown) == expected["ratio"]
    assert page.text_content(".answer .headline").startswith(f"{num(expected['ratio'])}x the output tokens")

    assert v.console == [] and v.dialogs == []
    assert v.offsite() == []


def test_a_hostile_label_stays_text_in_the_browser(
    serve: Callable[..., Running], visit: Callable[[Running], Visit], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'hostile.sqlite'}"
    with open_store(url) as store:
        a = make_run(store, synth_requests(40), label=XSS_LABEL, model="<img src=y onerror=alert(3)>")
        b = make_run(store, synth_requests(40), label="mi300x <b>sweep</b>")
    v = visit(serve(db=url))
    for path, both in (("/", True), (f"/runs/{a}", False), (f"/compare?a={a}&b={b}", True)):
        v.page.goto(v.base + path, wait_until="load")
        _wait_until(v.page, PLOTS_DRAWN)
        text = v.page.inner_text("main")
        assert XSS_LABEL in text, path  # shown as text, literally
        assert ("mi300x <b>sweep</b>" in text) is both, path
        assert v.page.evaluate("typeof window.__xss") == "undefined"
    assert "<img src=y onerror=alert(3)>" in v.page.inner_text("main")
    assert v.dialogs == [] and v.console == [] and v.offsite() == []


def test_the_login_form_lets_a_browser_in_with_a_cookie_scripts_cannot_read(
    serve: Callable[..., Running], visit: Callable[[Running], Visit], tmp_path: Path
) -> None:
    v = visit(serve(db=golden_copy(tmp_path / "golden.sqlite"), token=TOKEN))
    v.page.goto(f"{v.base}/runs/{H200}", wait_until="load")
    assert "/login" in v.page.url
    v.page.fill("input[name=token]", "not the token, but long")
    v.page.click("form.login button")
    assert v.page.text_content("#error") == "That is not the token."
    v.page.fill("input[name=token]", TOKEN)
    v.page.click("form.login button")
    v.page.wait_for_url(f"**/runs/{H200}")
    _wait_until(v.page, PLOTS_DRAWN)
    assert v.page.evaluate("document.cookie") == ""  # HttpOnly
    cookies = v.page.context.cookies()
    assert [(c["httpOnly"], c["sameSite"]) for c in cookies] == [(True, "Strict")]
    v.page.click("form.logout button")
    v.page.wait_for_url("**/login")
    assert v.page.context.cookies() == []
    assert [m for m in v.console if "401" not in m] == [] and v.offsite() == []


def test_a_matrix_page_draws_its_pareto_plots(
    serve: Callable[..., Running], visit: Callable[[Running], Visit], matrix_store: tuple[str, str]
) -> None:
    db, matrix_id = matrix_store
    v = visit(serve(db=db))
    v.page.goto(v.base + "/matrix", wait_until="load")
    v.page.click(f"a[href='/matrix/{matrix_id}']")
    v.page.wait_for_url(f"**/matrix/{matrix_id}")
    _wait_until(v.page, PLOTS_DRAWN)
    assert v.page.eval_on_selector_all(".plot", "ps => ps.map(p => p.id)") == [
        "fig-cost_vs_interactivity", "fig-throughput_vs_latency"]
    assert "cheapest" in v.page.inner_text("main").lower()
    assert v.console == [] and v.offsite() == []
