"""The dashboard's JSON API is the CLI's ``--json``: ``/api/runs`` a page of ``runs --json``,
``/api/runs/<id>`` ``show ID --json``, ``/api/compare?a=&b=`` ``compare A B --json`` — on SQLite and on the
real PostgreSQL, over the golden store's runs (measured by ``gpuledger bench`` against loopback servers, an
in-process torch run, an H200 run and an MI300X sweep)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from serve_support import H200, MI300X, TORCH, Running, request


def test_a_page_of_runs_is_what_runs_json_prints_for_the_same_runs(
    serve: Callable[..., Running], store_url: str, cli_json: Callable[..., Any]
) -> None:
    server = serve(db=store_url)
    everything = cli_json("runs", db=store_url)
    assert len(everything) == 8

    first = request(f"{server.url}/api/runs?per_page=3")
    assert first.status == 200 and first.headers["content-type"].startswith("application/json")
    assert first.json() == cli_json("runs", "--limit", "3", db=store_url)
    assert (first.headers["x-total-count"], first.headers["x-pages"]) == ("8", "3")
    assert 'rel="next"' in first.headers["link"] and "page=2" in first.headers["link"]

    pages = [request(f"{server.url}/api/runs?per_page=3&page={n}").json() for n in (1, 2, 3)]
    assert [run for page in pages for run in page] == everything

    by_label = request(f"{server.url}/api/runs?label=h200-vllm")
    assert by_label.json() == cli_json("runs", "--label", "h200-vllm", db=store_url)
    assert by_label.headers["x-total-count"] == "1"


def test_filters_select_by_gpu_engine_and_kind_and_sort_by_rate(
    serve: Callable[..., Running], store_url: str
) -> None:
    server = serve(db=store_url)

    def ids(query: str) -> list[str]:
        answer = request(f"{server.url}/api/runs?{query}")
        assert answer.status == 200, answer.text
        return [r["id"] for r in answer.json()]

    assert ids("gpu=NVIDIA+H200") == [H200]
    assert ids("gpu=AMD+Instinct+MI300X") == [MI300X]
    assert ids("engine=torch") == [TORCH]
    assert len(ids("kind=text")) == 8 and ids("kind=train") == []
    rates = [r["rate"]["value"] for r in request(f"{server.url}/api/runs?sort=rate&order=desc").json()]
    known = [r for r in rates if r is not None]
    assert known == sorted(known, reverse=True) and rates[: len(known)] == known


@pytest.mark.parametrize("run", [H200, MI300X, TORCH])
def test_a_run_s_document_is_what_show_json_prints(
    serve: Callable[..., Running], store_url: str, cli_json: Callable[..., Any], run: str
) -> None:
    server = serve(db=store_url)
    answer = request(f"{server.url}/api/runs/{run}")
    assert answer.status == 200
    assert answer.json() == cli_json("show", run, db=store_url)
    # a prefix names the run as it does on the command line
    assert request(f"{server.url}/api/runs/{run[:5]}").json() == answer.json()


def test_a_comparison_is_what_compare_json_prints(
    serve: Callable[..., Running], store_url: str, cli_json: Callable[..., Any]
) -> None:
    server = serve(db=store_url)
    answer = request(f"{server.url}/api/compare?a={H200}&b={MI300X}")
    assert answer.status == 200, answer.text
    expected = cli_json("compare", H200, MI300X, db=store_url)
    assert answer.json() == expected
    assert answer.json()["ratio"] == expected["ratio"] and expected["reference"] == H200
    by_total = request(f"{server.url}/api/compare?a={MI300X}&b={H200}&basis=total")
    assert by_total.json() == cli_json("compare", MI300X, H200, "--basis", "total", db=store_url)


def test_the_server_s_profile_prices_every_comparison(
    serve: Callable[..., Running], store_url: str, cli_json: Callable[..., Any]
) -> None:
    server = serve(db=store_url, profile="h200-rent")
    answer = request(f"{server.url}/api/compare?a={H200}&b={MI300X}")
    assert answer.json() == cli_json("compare", H200, MI300X, "--profile", "h200-rent", db=store_url)
    assert {r["profile"] for r in answer.json()["runs"]} == {"h200-rent"}


@pytest.mark.parametrize(("path", "status", "says"), [
    ("/api/runs/nosuchrun", 404, "no run 'nosuchrun'"),
    ("/api/runs?per_page=100000", 400, "per_page"),
    ("/api/runs?sort=summary", 400, "sort"),
    ("/api/runs?color=red", 400, "unknown query parameter 'color'"),
    ("/api/runs?label=a&label=b", 400, "given twice"),
    ("/api/compare?a=" + H200, 400, "'b'"),
    ("/api/compare?a=x%27%3B--&b=" + H200, 400, "'a'"),
    ("/api/compare?a=nosuchrun&b=" + H200, 404, "no run 'nosuchrun'"),
    ("/api/nothing", 404, "nothing at /api/nothing"),
])
def test_a_bad_request_is_one_line_of_json_with_its_status(
    serve: Callable[..., Running], store_url: str, path: str, status: int, says: str
) -> None:
    server = serve(db=store_url)
    answer = request(server.url + path)
    assert answer.status == status
    doc = answer.json()
    assert doc["status"] == status and says in doc["error"] and "\n" not in doc["error"]
    assert "Traceback" not in answer.text
