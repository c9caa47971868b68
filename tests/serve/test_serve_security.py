"""The dashboard's guards, one test each: loopback unless there is a token; the token on every request
(bearer header, or the login form's HttpOnly SameSite=Strict cookie), never in a URL or a log line; only
reads (405 for every write); a strict Content-Security-Policy on every answer; bounded requests; every store
string escaped; a store that cannot be read is a page that says so (503), never a traceback; the store is
opened read-only."""

from __future__ import annotations

import logging
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest
from report_factory import XSS_LABEL, make_run, synth_requests
from serve_support import GOLDEN, H200, MI300X, Running, golden_copy, request

from gpuledger.cli.main import main
from gpuledger.errors import UsageError
from gpuledger.serve import settings_from
from gpuledger.serve.security import CSP, SESSION_COOKIE
from gpuledger.store import open_store

TOKEN = "correct-horse-battery-staple-42"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def golden(tmp_path: Path) -> str:
    return golden_copy(tmp_path / "golden.sqlite")


# ---- where it listens -------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "dashboard.example.com"])
def test_a_listener_beyond_loopback_without_a_token_is_refused_with_exit_2(
    host: str, golden: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPULEDGER_SERVE_TOKEN", raising=False)
    code = main(["serve", "--host", host, "--port", "0", "--db", golden])
    err = capsys.readouterr().err
    assert code == 2
    assert "listens beyond this machine: give --token" in err and "Traceback" not in err


def test_loopback_needs_no_token_and_a_remote_bind_takes_one_from_the_environment(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPULEDGER_SERVE_TOKEN", raising=False)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert settings_from(db=None, host=host, port=0, token=None, profile=None).token is None
    monkeypatch.setenv("GPULEDGER_SERVE_TOKEN", TOKEN)
    remote = settings_from(db=None, host="0.0.0.0", port=0, token=None, profile=None)
    assert remote.token is not None and remote.token.get_secret_value() == TOKEN
    assert TOKEN not in repr(remote) and TOKEN not in str(remote.model_dump())


def test_a_token_too_short_to_guard_anything_is_refused() -> None:
    with pytest.raises(UsageError, match="16 to 512 characters"):
        settings_from(db=None, host="0.0.0.0", port=0, token="hunter2", profile=None)


# ---- the token ------------------------------------------------------------------------------------------


def test_with_a_token_every_request_needs_it(serve: Callable[..., Running], golden: str) -> None:
    server = serve(db=golden, token=TOKEN)
    api = request(f"{server.url}/api/runs")
    assert api.status == 401 and api.headers["www-authenticate"].startswith("Bearer")
    page = request(f"{server.url}/runs/{H200}")
    location = urlsplit(page.headers["location"])
    assert page.status == 303 and location.path == "/login"
    assert parse_qs(location.query) == {"next": [f"/runs/{H200}"]}
    wrong = request(f"{server.url}/api/runs", headers={"Authorization": "Bearer wrong-token-but-long"})
    assert wrong.status == 401
    good = request(f"{server.url}/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert good.status == 200 and len(good.json()) == 8
    # static files carry nothing of the store: the login page needs them before any token
    assert request(f"{server.url}/login").status == 200


def test_the_login_form_sets_an_http_only_strict_cookie_that_is_not_the_token(
    serve: Callable[..., Running], golden: str
) -> None:
    server = serve(db=golden, token=TOKEN)
    wrong = request(f"{server.url}/login", "POST", headers=FORM,
                    body=urlencode({"token": "not-the-token-at-all", "next": "/"}).encode())
    assert wrong.status == 401 and wrong.cookies == [] and "That is not the token" in wrong.text

    right = request(f"{server.url}/login", "POST", headers=FORM,
                    body=urlencode({"token": TOKEN, "next": f"/runs/{H200}"}).encode())
    assert right.status == 303 and right.headers["location"] == f"/runs/{H200}"
    (cookie,) = right.cookies
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "samesite", "path", "max-age"} <= attributes and "samesite=strict" in cookie.lower()
    value = cookie.split(";")[0].split("=", 1)[1]
    assert TOKEN not in cookie and value
    page = request(f"{server.url}/runs/{H200}", headers={"Cookie": f"{SESSION_COOKIE}={value}"})
    assert page.status == 200 and "h200-vllm" in page.text
    forged = request(f"{server.url}/runs/{H200}", headers={"Cookie": f"{SESSION_COOKIE}={TOKEN}"})
    assert forged.status == 303


@pytest.mark.parametrize("target", ["//evil.example/", "https://evil.example/", "/\\evil.example", "x"])
def test_a_login_goes_back_to_this_server_only(
    serve: Callable[..., Running], golden: str, target: str
) -> None:
    server = serve(db=golden, token=TOKEN)
    right = request(f"{server.url}/login", "POST", headers=FORM,
                    body=urlencode({"token": TOKEN, "next": target}).encode())
    assert right.status == 303 and right.headers["location"] == "/"


def test_the_token_is_never_taken_from_a_url_nor_written_to_the_log(
    serve: Callable[..., Running], golden: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = serve(db=golden, token=TOKEN)
    with caplog.at_level(logging.DEBUG, logger="gpuledger.serve"):
        in_url = request(f"{server.url}/api/runs?token={quote(TOKEN)}",
                         headers={"Authorization": f"Bearer {TOKEN}"})
        request(f"{server.url}/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        request(f"{server.url}/login", "POST", headers=FORM,
                body=urlencode({"token": TOKEN + "x", "next": "/"}).encode())
    assert in_url.status == 400 and "not accepted in a URL" in in_url.json()["error"]
    assert TOKEN not in in_url.text
    lines = [r.getMessage() for r in caplog.records]
    assert any("GET /api/runs 200" in line for line in lines)  # the access log is there ...
    assert not any(TOKEN in line for line in lines)  # ... and holds no token


# ---- only reads -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize("path", ["/", "/api/runs", f"/api/runs/{H200}", f"/runs/{H200}", "/api/compare"])
def test_every_write_is_405(serve: Callable[..., Running], golden: str, method: str, path: str) -> None:
    server = serve(db=golden)
    answer = request(server.url + path, method, body=b"{}")
    assert answer.status == 405
    assert answer.headers["allow"] == "GET,HEAD"
    assert answer.headers["content-security-policy"] == CSP


def test_the_store_is_opened_read_only_and_left_as_it_was(
    serve: Callable[..., Running], tmp_path: Path
) -> None:
    url = golden_copy(tmp_path / "golden.sqlite")
    path = tmp_path / "golden.sqlite"
    before = path.read_bytes()
    server = serve(db=url)
    for page in ("/", f"/runs/{H200}", f"/compare?a={H200}&b={MI300X}", f"/api/runs/{H200}",
                 "/trend?label=srv-c4", "/published", "/matrix"):
        assert request(server.url + page).status == 200, page
    assert path.read_bytes() == before
    with open_store(url) as store:  # a cost page priced runs: nothing was saved
        assert store.list_cost_evaluations(H200) == []


# ---- headers, bounds, escaping --------------------------------------------------------------------------


def test_every_answer_carries_a_strict_content_security_policy(
    serve: Callable[..., Running], golden: str
) -> None:
    server = serve(db=golden)
    for path in ("/", f"/runs/{H200}", "/api/runs", "/nowhere", "/api/runs?sort=x"):
        answer = request(server.url + path)
        csp = answer.headers["content-security-policy"]
        assert csp == CSP, path
        assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp and "script-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-store"
    page = request(f"{server.url}/runs/{H200}").text
    assert "<script>" not in page and " onload=" not in page and " style=" not in page  # nothing inline
    plotly = [part.split('"')[1] for part in page.split('<script src=')[1:]]
    static = request(server.url + plotly[0])
    assert static.status == 200 and "immutable" in static.headers["cache-control"]


@pytest.mark.parametrize(("query", "status"), [
    ("label=" + "x" * 600, 400),
    ("&".join(f"p{i}=1" for i in range(30)), 400),
    ("label=" + "x" * 5000, 414),
])
def test_a_request_beyond_its_bounds_is_refused(
    serve: Callable[..., Running], golden: str, query: str, status: int
) -> None:
    server = serve(db=golden)
    assert request(f"{server.url}/api/runs?{query}").status == status


def test_a_body_beyond_its_bound_is_refused(serve: Callable[..., Running], golden: str) -> None:
    server = serve(db=golden, token=TOKEN)
    answer = request(f"{server.url}/login", "POST", headers=FORM, body=b"token=" + b"x" * 100_000)
    assert answer.status == 413


def test_a_header_beyond_its_bound_is_refused(serve: Callable[..., Running], golden: str) -> None:
    server = serve(db=golden)
    assert request(f"{server.url}/", headers={"X-Big": "y" * 20_000}).status in (400, 431)


def test_every_string_from_the_store_is_escaped(serve: Callable[..., Running], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hostile.sqlite'}"
    with open_store(url) as store:
        a = make_run(store, synth_requests(20), label=XSS_LABEL, model="<img src=y onerror=alert(3)>")
        b = make_run(store, synth_requests(20), label='"><svg onload=alert(4)>', engine="<b>engine</b>")
    server = serve(db=url)
    for path in ("/", f"/runs/{a}", f"/compare?a={a}&b={b}", "/?label=" + quote(XSS_LABEL)):
        page = request(server.url + path)
        assert page.status == 200, path
        for raw in ("<script>window.__xss", "<img src=y", "<svg onload", "<b>engine</b>", "<img src=x"):
            assert raw not in page.text, (path, raw)
    listed = request(server.url + "/").text
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in listed
    assert "&lt;img src=y onerror=alert(3)&gt;" in listed and "&lt;b&gt;engine&lt;/b&gt;" in listed


# ---- a store that cannot be read -------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_database_that_is_down_is_a_page_that_says_so(
    serve: Callable[..., Running], caplog: pytest.LogCaptureFixture
) -> None:
    server = serve(db=f"postgresql+psycopg://gpuledger:secret-pw@127.0.0.1:{_closed_port()}/gpuledger")
    with caplog.at_level(logging.WARNING, logger="gpuledger.serve"):
        page = request(server.url + "/")
        api = request(server.url + "/api/runs")
    assert page.status == 503 and "The store is unavailable" in page.text
    assert "connection refused" in page.text
    assert "Traceback" not in page.text and "secret-pw" not in page.text
    assert api.status == 503 and "connection refused" in api.json()["error"]
    assert any("store unavailable on /: " in r.getMessage() for r in caplog.records)
    assert not any("secret-pw" in r.getMessage() for r in caplog.records)


def test_a_store_behind_this_gpuledger_says_to_upgrade_it_and_is_served_once_upgraded(
    serve: Callable[..., Running], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN, path)
    server = serve(db=f"sqlite:///{path}")
    page = request(server.url + "/")
    assert page.status == 503
    assert "schema revision" in page.text and "any gpuledger command with write access" in page.text
    assert main(["runs", "--db", f"sqlite:///{path}", "--json"]) == 0  # with write access: upgraded
    capsys.readouterr()
    assert request(server.url + "/").status == 200
