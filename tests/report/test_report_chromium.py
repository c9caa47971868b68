"""The HTML report opened in a real headless Chromium (Debian's, driven by Playwright): every plot drew,
no console error, no request but the file itself, and labels containing markup never ran.

Without Chromium the tests are skipped with the reason — except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from report_factory import CPU, MI300X, XSS_LABEL, make_run, synth_requests

from gpuledger.report import build_report, render_html
from gpuledger.store import Store

pytestmark = pytest.mark.chromium

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the Chromium report test cannot run: {reason}")
    pytest.skip(f"Chromium report test skipped: {reason}")


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
    console: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


def _wait_until(page: Any, expression: str, timeout_s: float = 30.0) -> None:
    """Poll ``expression`` from outside the page (Playwright's wait_for_function evaluates strings with
    eval inside the page, which the report's Content-Security-Policy rightly forbids)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout_s:g} s: {expression}")
        page.wait_for_timeout(100)


def _open(browser: Any, path: Path, *, dark: bool = False) -> tuple[Any, Visit]:
    visit = Visit()
    page = browser.new_page(viewport={"width": 1280, "height": 900}, color_scheme="dark" if dark else "light")
    page.on(
        "console",
        lambda m: visit.console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda e: visit.console.append(f"pageerror: {e}"))
    page.on("request", lambda r: visit.requests.append(r.url))

    def on_dialog(d: Any) -> None:
        visit.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)
    page.goto(path.as_uri(), wait_until="load")
    _wait_until(
        page, "Array.from(document.querySelectorAll('.plot')).every(p => p.querySelector('.main-svg'))"
    )
    return page, visit


# For each plot: how many traces it drew and how many of them left visible marks (paths with a
# non-empty outline and a non-zero bounding box).
_DRAWN = """
() => Array.from(document.querySelectorAll('.plot')).map(p => {
  const traces = p.querySelectorAll('.cartesianlayer .trace');
  let drawn = 0;
  traces.forEach(t => {
    const marks = Array.from(t.querySelectorAll('path')).filter(el => {
      const d = el.getAttribute('d') || '';
      if (d.length < 4 || d === 'M0,0Z') return false;
      const box = el.getBBox();
      return box.width > 0 || box.height > 0;
    });
    if (marks.length) drawn += 1;
  });
  return {id: p.id, svgs: p.querySelectorAll('.main-svg').length, traces: traces.length, drawn: drawn};
})
"""


def _assert_report_drew(browser: Any, path: Path, n_figures: int, shots: Path) -> Any:
    page, visit = _open(browser, path)
    plots = page.evaluate(_DRAWN)
    assert len(plots) == n_figures
    for p in plots:
        assert p["svgs"] >= 1, p
        assert p["traces"] >= 1 and p["drawn"] == p["traces"], p
    page.screenshot(path=str(shots / f"{path.stem}-light.png"), full_page=True)
    # Non-blank pixels: a drawn plot's screenshot compresses far worse than the same box left empty.
    elements = page.query_selector_all(".plot")
    drawn = [el.screenshot() for el in elements]
    page.evaluate(
        "document.querySelectorAll('.plot .svg-container').forEach(c => c.style.visibility = 'hidden')"
    )
    blank = elements[0].screenshot()
    for i, png in enumerate(drawn):
        (shots / f"{path.stem}-plot{i}.png").write_bytes(png)
        assert len(png) > 4 * len(blank), (
            f"plot {plots[i]['id']} looks blank ({len(png)} vs {len(blank)} bytes)"
        )
    page.evaluate("document.querySelectorAll('.plot .svg-container').forEach(c => c.style.visibility = '')")
    assert visit.console == []
    assert visit.dialogs == []
    assert visit.requests == [path.as_uri()]
    return page


def test_a_single_run_report_opens_offline_with_every_plot_drawn(
    browser: Any, store: Store, tmp_path: Path
) -> None:
    run = make_run(store, synth_requests(60), label="single")
    data = build_report(store, [run])
    path = tmp_path / "single.html"
    path.write_text(render_html(data))
    n = sum(len(s.figures) for s in data.sections)
    assert n == 8  # 3 CDFs, throughput vs concurrency, Pareto, power, utilisation, cost bars
    _assert_report_drew(browser, path, n, tmp_path).close()


def test_a_two_run_comparison_opens_with_every_plot_drawn_and_scripts_in_labels_never_run(
    browser: Any, store: Store, tmp_path: Path
) -> None:
    a = make_run(store, synth_requests(80), label=XSS_LABEL, model="<img src=y onerror=alert(3)>")
    stages = [{"stage": f"c={c}", "concurrency": c} for c in (1, 4, 16)]
    reqs = []
    for i, c in enumerate((1, 4, 16)):
        reqs += synth_requests(24, concurrency=c, stage=f"c={c}", first_index=24 * i, start=3.0 * i, seed=i)
    b = make_run(
        store,
        reqs,
        label="mi300x <b>sweep</b>",
        devices=(MI300X, CPU),
        stages=stages,
        config={"load": {"kind": "sweep", "stages": stages}},
    )
    data = build_report(store, [a, b])
    path = tmp_path / "comparison.html"
    path.write_text(render_html(data))
    n = sum(len(s.figures) for s in data.sections)
    page = _assert_report_drew(browser, path, n, tmp_path)
    assert page.evaluate("typeof window.__xss") == "undefined"
    text = page.evaluate("document.body.innerText")
    assert XSS_LABEL in text and "mi300x <b>sweep</b>" in text  # shown as text, literally
    assert page.evaluate("document.querySelectorAll('main script, main img, main b').length") == 0
    legend = page.evaluate(
        "Array.from(document.querySelectorAll('#fig-cdf_ttft_ms .legendtext')).map(e => e.textContent)"
    )
    assert XSS_LABEL in legend
    page.close()


def test_the_report_follows_a_dark_colour_scheme(browser: Any, store: Store, tmp_path: Path) -> None:
    run = make_run(store, synth_requests(30), label="dark")
    path = tmp_path / "dark.html"
    path.write_text(render_html(build_report(store, [run])))
    page, visit = _open(browser, path, dark=True)
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(13, 17, 23)"
    assert page.evaluate("document.getElementById('fig-cdf_ttft_ms')._fullLayout.font.color") == "#e6edf3"
    page.screenshot(path=str(tmp_path / "dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    _wait_until(page, "document.getElementById('fig-cdf_ttft_ms')._fullLayout.font.color === '#1f2328'")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(255, 255, 255)"
    assert visit.console == [] and visit.requests == [path.as_uri()]
    page.close()


def test_the_first_screen_of_a_run_report_is_its_answer(browser: Any, store: Store, tmp_path: Path) -> None:
    """At 1000 x 900 the price per 1M output tokens (the figure of `numbers`) is on the first screen, above
    the environment, in both colour schemes; the screenshots are kept next to the report."""
    from gpuledger.report import fmt

    run = make_run(store, synth_requests(60), label="h200-vllm")
    data = build_report(store, [run])
    cost = data.numbers.runs[0].cost
    assert cost is not None
    figure = fmt.num(cost.price("output_token"))
    path = tmp_path / "answer.html"
    path.write_text(render_html(data))
    for dark in (False, True):
        scheme = "dark" if dark else "light"
        page = browser.new_page(viewport={"width": 1000, "height": 900}, color_scheme=scheme)
        page.goto(path.as_uri(), wait_until="load")
        headline = page.query_selector(".headline")
        assert headline is not None
        box = headline.bounding_box()
        env = page.query_selector("#environment").bounding_box()
        assert box is not None and env is not None
        assert box["y"] >= 0 and box["y"] + box["height"] < 900, box
        assert box["y"] + box["height"] <= env["y"], (box, env)
        text = headline.inner_text()
        assert f"{figure} USD per 1M output tokens" in text, text
        page.screenshot(path=str(tmp_path / f"first-screen-{scheme}.png"))
        page.close()
