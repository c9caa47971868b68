"""Secrets in URLs and redirects (issue 16, items 5 and 12).

Credentials in ``--base-url`` are used for the requests (a ``Basic`` header) and appear nowhere else in
clear: not in the stored run (``show``, ``export``), not in an error line, not in ``doctor``'s facts
(``OLLAMA_HOST``). Query parameters named like secrets are redacted the same way. A redirect to another
server is refused; one within the server is followed and noted. Servers: ``hostile_server`` on loopback.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostile_server import HostileServer, Reply, Request, completion_stream, redirect, stream_handler

from gpuledger.cli.main import main
from gpuledger.engines import GenRequest, GenResult
from gpuledger.engines.ollama import OllamaEngine
from gpuledger.engines.openai import OpenAIEngine
from gpuledger.errors import EngineError, UsageError
from gpuledger.facts import collect_system
from gpuledger.facts.fs import RootFS
from gpuledger.facts.model import Identity
from gpuledger.facts.ollama import collect_ollama
from gpuledger.urls import parse_server_url, redact_env, redact_text, redact_url

Hostile = Callable[..., HostileServer]
PASSWORD = "s3cr/et:p@ss"  # needs percent-encoding in a URL: / : @
QUOTED = "s3cr%2Fet%3Ap%40ss"


def with_creds(url: str, user: str = "alice", password: str = QUOTED) -> str:
    return url.replace("http://", f"http://{user}:{password}@")


def gen(i: int = 0, n: int = 8) -> GenRequest:
    return GenRequest(index=i, prompt="hello", max_tokens=n, fixed_output=True)


def run(engine: Any, reqs: list[GenRequest]) -> tuple[Any, list[GenResult], dict[str, Any]]:
    async def go() -> tuple[Any, list[GenResult], dict[str, Any]]:
        info = await engine.open(2)
        try:
            results = [await engine.generate(r) for r in reqs]
            return info, results, await engine.after_run()
        finally:
            await engine.close()

    return asyncio.run(go())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_no_secret(text: str) -> None:
    for secret in (PASSWORD, QUOTED, "s3cr", "sekrit"):
        assert secret not in text


# ---- redaction, the one module -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pass@host:8000/v1", "http://user:***@host:8000/v1"),
        ("https://TOKEN@host/v1", "https://***@host/v1"),
        ("http://host:8000/v1?api_key=sk-1&model=m", "http://host:8000/v1?api_key=***&model=m"),
        ("http://host/v1?token=abc;sig=x#access_token=y", "http://host/v1?token=***;sig=***#access_token=***"),
        ("http://host/v1?email=a@b.c", "http://host/v1?email=a@b.c"),
        ("http://user:pa/ss@host/v1", "http://user:***@host/v1"),  # a "/" in the password, not encoded
        ("http://u:p?w@host/v1", "http://u:***@host/v1"),
        ("http://u:p@ss@host", "http://u:***@host"),
        ("user:pw@host:11434", "user:***@host:11434"),  # OLLAMA_HOST without a scheme
        ("host:11434", "host:11434"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_redact_url_hides_credentials_and_secret_parameters(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redaction_of_text_and_environment_values() -> None:
    assert redact_text("GET http://a:b@h:1/x?token=t, then (http://u:p@h/).") == (
        "GET http://a:***@h:1/x?token=***, then (http://u:***@h/)."
    )
    assert redact_env("OLLAMA_HOST", "bob:pw@10.0.0.2:11434") == "bob:***@10.0.0.2:11434"
    assert redact_env("HF_TOKEN", "hf_abc") == "***"
    assert redact_env("CUDA_VISIBLE_DEVICES", "0,1") == "0,1"


def test_a_server_url_is_taken_apart_for_use() -> None:
    u = parse_server_url(f"http://alice:{QUOTED}@Host:8000/v1/?api_key=k1")
    assert u.base == "http://host:8000" and u.query == "?api_key=k1"
    assert u.authorization == "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert u.display == "http://alice:***@host:8000?api_key=***"
    assert u.url("/v1/completions") == "http://host:8000/v1/completions?api_key=k1"
    with pytest.raises(ValueError, match=r"not a valid URL: 'http://user:\*\*\*@host/v1'"):
        parse_server_url("http://user:pa/ss@host/v1")  # the error shows the URL redacted


# ---- credentials are used ---------------------------------------------------------------------------


def test_credentials_in_the_base_url_are_sent_as_basic_auth_on_every_request(hostile: Hostile) -> None:
    srv = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(8))})
    eng = OpenAIEngine(with_creds(srv.url) + "/v1?api_key=sekrit", None)
    assert eng.display_url == f"http://alice:***@127.0.0.1:{srv.port}?api_key=***"
    assert "alice" not in eng.base_url
    _, (r,), _ = run(eng, [gen()])
    assert r.error is None and r.output_tokens == 8
    basic = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert srv.requests and all(q.headers.get("authorization") == basic for q in srv.requests)
    assert all(q.query.get("api_key") == ["sekrit"] for q in srv.requests)  # the query travels too
    assert len(srv.of("POST", "/v1/completions")) == 1


def test_credentials_in_the_url_and_an_api_key_are_refused_in_one_line() -> None:
    with pytest.raises(UsageError) as exc:
        OpenAIEngine(with_creds("http://127.0.0.1:9"), None, api_key="sk-test")
    assert "\n" not in exc.value.message and "carries credentials and an API key" in exc.value.message
    assert_no_secret(exc.value.message + (exc.value.hint or ""))
    # An API key alone, or credentials alone, are fine.
    OpenAIEngine("http://127.0.0.1:9", None, api_key="sk-test")
    OpenAIEngine(with_creds("http://127.0.0.1:9"), None)


def test_bench_with_credentials_and_openai_api_key_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    code = main(["bench", "--no-telemetry", "--no-progress", "--base-url", with_creds("http://127.0.0.1:9")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "carries credentials and an API key" in err
    assert_no_secret(err)


@pytest.mark.parametrize("engine", [OpenAIEngine, OllamaEngine])
def test_cannot_reach_names_the_server_without_its_password(engine: Any) -> None:
    url = with_creds(f"http://127.0.0.1:{free_port()}") + "?token=sekrit"
    with pytest.raises(EngineError) as exc:
        run(engine(url, "m"), [])
    assert exc.value.message.startswith("cannot reach the inference server at http://alice:***@127.0.0.1:")
    assert "token=***" in exc.value.message
    assert_no_secret(exc.value.message)


def test_a_stored_run_shown_and_exported_carries_no_secret(
    hostile: Hostile, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    srv = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(8))})
    url = with_creds(srv.url) + "/v1?api_key=sekrit"
    code = main(["bench", "--no-telemetry", "--no-progress", "--json", "--base-url", url,
                 "--num-requests", "3", "--output-len", "8", "--input-len", "8", "--dataset", "random"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    shown = f"http://alice:***@127.0.0.1:{srv.port}?api_key=***"
    assert doc["base_url"] == shown and doc["config"]["base_url"] == f"{shown.replace('?', '/v1?')}"
    assert_no_secret(out + err)
    for args in (["show", doc["id"]], ["show", doc["id"], "--json"], ["export", doc["id"]]):
        assert main(args) == 0
        text = capsys.readouterr().out
        assert "alice:***@" in text
        assert_no_secret(text)


# ---- doctor: OLLAMA_HOST and --ollama ---------------------------------------------------------------


def test_doctor_facts_keep_ollama_host_redacted(tmp_path: Path) -> None:
    facts = collect_system(
        RootFS(tmp_path), {"OLLAMA_HOST": f"http://bob:{QUOTED}@10.0.0.2:11434", "PATH": "/bin"},
        Identity(uid=0), live=False,
    )
    assert facts.env == {"OLLAMA_HOST": "http://bob:***@10.0.0.2:11434"}


def test_doctor_json_prints_ollama_host_redacted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", f"http://bob:{QUOTED}@127.0.0.1:{free_port()}")
    main(["doctor", "--json"])  # its exit code is the machine's findings
    out = capsys.readouterr().out
    assert "bob:***@127.0.0.1" in out
    assert_no_secret(out)


def test_ollama_facts_use_the_urls_credentials_and_keep_the_url_redacted(hostile: Hostile) -> None:
    srv = hostile(identity="ollama")
    facts = collect_ollama(with_creds(srv.url))
    assert facts.reachable and facts.version == "0.11.6" and facts.error is None
    assert facts.url == f"http://alice:***@127.0.0.1:{srv.port}"
    basic = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert [q.headers.get("authorization") for q in srv.requests] == [basic, basic]
    down = collect_ollama(with_creds(f"http://127.0.0.1:{free_port()}"))
    assert down.error is not None
    assert_no_secret(down.model_dump_json())


# ---- redirects --------------------------------------------------------------------------------------------


def test_a_redirect_to_another_server_fails_the_request_and_sends_it_nowhere(hostile: Hostile) -> None:
    elsewhere = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(8))})
    srv = hostile({("POST", "/v1/completions"): redirect(elsewhere.url + "/v1/completions?k=1", 307)})
    _, (r,), _ = run(OpenAIEngine(srv.url, None, api_key="sk-test"), [gen()])
    assert r.error == (
        f"the server redirected to another server (HTTP 307 → {elsewhere.url}/v1/completions?k=1): "
        "not followed; give that server's URL as --base-url if it is the one to measure"
    )
    assert elsewhere.requests == []  # neither the prompt nor the key went there


def test_a_redirect_to_another_server_at_open_is_an_engine_error(hostile: Hostile) -> None:
    elsewhere = hostile()
    srv = hostile({("GET", "/v1/models"): redirect(with_creds(elsewhere.url) + "/v1/models", 308)})
    with pytest.raises(EngineError) as exc:
        run(OpenAIEngine(srv.url, None), [])
    assert exc.value.message == (
        f"GET /v1/models at {srv.url}: the server redirected to another server "
        f"(HTTP 308 → {elsewhere.url}/v1/models): not followed; "
        "give that server's URL as --base-url if it is the one to measure"
    )
    assert elsewhere.requests == []


def test_a_redirect_within_the_server_is_followed_and_noted(hostile: Hostile) -> None:
    srv = hostile({
        ("POST", "/v1/completions"): redirect("/v2/completions", 307),
        ("POST", "/v2/completions"): stream_handler(completion_stream(8)),
        ("GET", "/v1/models"): redirect("/v2/models", 301),
        ("GET", "/v2/models"): lambda req, reply: models(reply),
    })
    info, (r,), after = run(OpenAIEngine(srv.url, None), [gen()])
    assert info.models == ["hostile-model"]
    assert info.warnings == [
        f"redirect within the server followed: HTTP 301 {srv.url}/v1/models → {srv.url}/v2/models"
    ]
    assert r.error is None and r.output_tokens == 8
    note = "redirect within the server followed: "
    note += f"HTTP 307 {srv.url}/v1/completions → {srv.url}/v2/completions"
    assert r.notes == [note]
    assert after["warnings"] == [*info.warnings, note]


async def models(reply: Reply) -> None:
    body = json.dumps({"object": "list", "data": [{"id": "hostile-model", "owned_by": "vllm"}]}).encode()
    await reply.start(200, {"Content-Type": "application/json"}, length=len(body))
    await reply.write(body)


@pytest.mark.parametrize(
    ("status", "location", "expected"),
    [
        (302, "/v2/completions", "HTTP 302 redirect of the POST to {url}/v2/completions: not followed"),
        (307, "/v1/completions", "more than 3 redirects: not followed"),  # to itself, for ever
        (307, "", "HTTP 307 redirect without a Location: not followed"),
        (308, "https://127.0.0.1:{port}/v1/completions", "the server redirected to another server"),
    ],
)
def test_redirects_that_are_not_followed(hostile: Hostile, status: int, location: str, expected: str) -> None:
    srv = hostile()
    srv.handlers[("POST", "/v1/completions")] = redirect(location.format(port=srv.port), status)
    _, (r,), _ = run(OpenAIEngine(srv.url, None), [gen()])
    assert r.error is not None and r.error.startswith(expected.format(url=srv.url)), r.error


def test_credentials_a_redirect_puts_in_its_location_are_not_used(hostile: Hostile) -> None:
    async def where(req: Request, reply: Reply) -> None:
        await redirect(f"http://mallory:pw@127.0.0.1:{srv.port}/v2/completions", 307)(req, reply)

    srv = hostile({
        ("POST", "/v1/completions"): where,
        ("POST", "/v2/completions"): stream_handler(completion_stream(8)),
    })
    _, (r,), _ = run(OpenAIEngine(srv.url, None, api_key="sk-test"), [gen()])
    assert r.error is None  # aiohttp would have refused an Authorization header next to URL credentials
    assert srv.of("POST", "/v2/completions")[0].headers["authorization"] == "Bearer sk-test"
