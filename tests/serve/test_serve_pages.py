"""The dashboard's pages hold what the CLI's reports hold: a run's page the sections of ``report ID``, the
answer first; a matrix's page and ``/api/matrix/<id>`` the matrix ``matrix show ID --json`` gives; groups of
repeats compared as ``compare GROUP GROUP``; the published points with who published them; a trend with its
figure; a list paged and sorted by links."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report_factory import make_run, synth_requests
from serve_support import H200, MI300X, Running, golden_copy, request

from gpuledger.cost.comparison.groups import REPEAT_KEY, new_group_id, repeat_record
from gpuledger.store import open_store

INFERENCEX = Path(__file__).resolve().parents[1] / "published" / "data" / \
    "inferencex_deepseek_r1_b200_vs_mi300x.csv"


def _sections(html: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', html)


def _figures(html: str) -> list[str]:
    return re.findall(r'<div class="plot" id="(fig-[^"]+)"', html)


def test_a_run_s_page_has_the_sections_of_its_report_answer_first(
    serve: Callable[..., Running], tmp_path: Path, cli_json: Callable[..., Any]
) -> None:
    db = golden_copy(tmp_path / "golden.sqlite")
    server = serve(db=db)
    page = request(f"{server.url}/runs/{MI300X[:5]}")
    assert page.status == 200
    report = cli_json("report", MI300X, db=db)
    keys = [s["key"] for s in report["sections"]]
    assert _sections(page.text) == keys and keys[0] == "answer"
    assert len(_figures(page.text)) == sum(len(s["figures"]) for s in report["sections"]) > 0
    assert page.text.index('<section id="answer"') < page.text.index("<nav><strong>Contents")


def test_the_list_pages_and_sorts_by_links(serve: Callable[..., Running], tmp_path: Path) -> None:
    server = serve(db=golden_copy(tmp_path / "golden.sqlite"))
    first = request(f"{server.url}/?per_page=25").text
    assert "page 1 of 1" in first
    # the smallest page the form offers is 25; the query takes any size up to 200
    one = request(f"{server.url}/?per_page=3").text
    assert "page 1 of 3" in one and 'rel="next" href="/?per_page=3&amp;page=2"' in one
    assert 'rel="prev"' not in one
    last = request(f"{server.url}/?per_page=3&page=3").text
    assert len(re.findall(r'<tr data-run="', last)) == 2 and 'rel="first" href="/?per_page=3"' in last
    by_model = request(f"{server.url}/?sort=model").text
    assert '<a href="/?sort=model&amp;order=asc">model ▼</a>' in by_model


def test_groups_of_repeats_are_compared_as_compare_compares_them(
    serve: Callable[..., Running], tmp_path: Path, cli_json: Callable[..., Any]
) -> None:
    db = f"sqlite:///{tmp_path / 'groups.sqlite'}"
    groups = {}
    with open_store(db) as store:
        for name, itl in (("fast", 0.010), ("slow", 0.016)):
            group = groups[name] = new_group_id()
            for i in range(1, 4):
                run = make_run(store, synth_requests(30, itl_s=itl, seed=i), label=f"{name}-{i}")
                workload = store.get_run(run).workload
                store.update_run(run, workload={**workload, REPEAT_KEY: repeat_record(group, i, 3)})
    server = serve(db=db)
    api = request(f"{server.url}/api/compare?a={groups['fast']}&b={groups['slow']}")
    assert api.status == 200, api.text
    assert api.json() == cli_json("compare", groups["fast"], groups["slow"], db=db)
    page = request(f"{server.url}/compare?a={groups['fast']}&b={groups['slow']}").text
    ratio = api.json()["ratio"]["ratio"]
    assert f'<data id="ratio" value="{ratio!r}">' in page
    assert "95 %" in page and groups["fast"] in page and groups["slow"] in page


def test_the_published_points_list_who_published_them(
    serve: Callable[..., Running], tmp_path: Path, cli_json: Callable[..., Any]
) -> None:
    db = golden_copy(tmp_path / "golden.sqlite")
    imported = cli_json("import-results", str(INFERENCEX), db=db)["imported"]
    server = serve(db=db)
    page = request(f"{server.url}/published").text
    assert f"{len(imported)} runs in the store." in page
    for row in imported:
        assert f'<tr data-run="{row["id"]}">' in page
        assert row["published_by"] in page
    assert f'<tr data-run="{H200}">' not in page  # measured runs are not published points
    api = request(f"{server.url}/api/runs?engine=published&per_page=200").json()
    assert sorted(r["id"] for r in api) == sorted(r["id"] for r in imported)
    a, b = imported[0]["id"], imported[1]["id"]
    assert request(f"{server.url}/compare?a={a}&b={b}").status == 200


def test_a_matrix_page_and_its_json_are_the_matrix_report(
    serve: Callable[..., Running], matrix_store: tuple[str, str], cli_json: Callable[..., Any]
) -> None:
    db, matrix_id = matrix_store
    server = serve(db=db)
    index = request(f"{server.url}/matrix").text
    assert f'<a href="/matrix/{matrix_id}">{matrix_id}</a>' in index
    api = request(f"{server.url}/api/matrix/{matrix_id}")
    assert api.json() == cli_json("matrix", "show", matrix_id, db=db)
    page = request(f"{server.url}/matrix/{matrix_id}").text
    assert _figures(page) == ["fig-cost_vs_interactivity", "fig-throughput_vs_latency"]
    assert "fast" in page and "slow" in page


def test_a_trend_follows_a_model_s_runs_with_its_figure(
    serve: Callable[..., Running], tmp_path: Path
) -> None:
    server = serve(db=golden_copy(tmp_path / "golden.sqlite"))
    start = request(f"{server.url}/trend").text
    assert "<select name=\"label\">" in start and _figures(start) == []
    page = request(f"{server.url}/trend?model=test-model&metric=throughput").text
    assert len(_figures(page)) == 1
    for label in ("srv-c4", "srv-sweep", "srv-chat", "srv-faults", "srv-interrupted"):
        assert label in page
    assert request(f"{server.url}/trend?model=test-model&metric=no_such_metric").status == 400


def test_a_page_kept_after_its_first_view_follows_the_run_when_it_changes(
    serve: Callable[..., Running], tmp_path: Path
) -> None:
    db = golden_copy(tmp_path / "golden.sqlite")
    server = serve(db=db)
    first = request(f"{server.url}/runs/{H200}").text
    assert "h200-vllm" in first and request(f"{server.url}/runs/{H200}").text == first  # kept
    compared = request(f"{server.url}/compare?a={H200}&b={MI300X}").text
    with open_store(db) as store:  # another process with write access relabels the run
        store.update_run(H200, label="h200 after the driver upgrade")
    again = request(f"{server.url}/runs/{H200}").text
    assert "h200 after the driver upgrade" in again and "h200-vllm" not in again
    assert "h200 after the driver upgrade" in request(f"{server.url}/compare?a={H200}&b={MI300X}").text
    assert "h200-vllm" in compared


def test_every_page_is_served_from_either_store(serve: Callable[..., Running], store_url: str) -> None:
    server = serve(db=store_url)
    pages = {
        "/": ["8 runs in the store.", f'<tr data-run="{H200}">', "NVIDIA H200"],
        "/?gpu=AMD+Instinct+MI300X": ["1 run match the filters.", f'<tr data-run="{MI300X}">'],
        f"/runs/{H200}": ['<section id="answer"', "h200-vllm"],
        f"/compare?a={H200}&b={MI300X}": ['<data id="ratio"', "What the ratio is made of", "Like for like"],
        "/published": ["0 runs in the store."],
        "/matrix": ["No matrix in this store."],
        "/trend?label=h200-vllm": ['<div class="plot" id="fig-'],
    }
    for path, says in pages.items():
        page = request(server.url + path)
        assert page.status == 200, (path, page.text[-500:])
        for text in says:
            assert text in page.text, (path, text)
