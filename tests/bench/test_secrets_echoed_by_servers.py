"""A server that echoes the secrets it was sent — the bearer token, the Basic header, the URL's password —
in its error text: none of them reaches what gpuledger stores (``requests.error``, the run's summary), exports
(JSON, CSV) or prints (stderr).

The secret values a run knows (``gpuledger.urls.Secrets``: the API key read from its environment variable,
the URL's password and its Basic header) are taken out of a server's text where it enters gpuledger: a
request's error (HTTP status body, a stream's error event), a refusal at open, the tokenizer endpoint's
errors; in the OpenAI, Ollama and openai-images engines. Servers: programmed ones on 127.0.0.1 that read
back the request's own ``Authorization`` header into their answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from hostile_server import HostileServer, Reply, Request, json_reply, ndjson

from gpuledger.cli.main import main
from gpuledger.engines import GenRequest
from gpuledger.engines.image.base import request_for
from gpuledger.engines.image.openai_images import OpenAIImagesEngine
from gpuledger.engines.ollama import OllamaEngine
from gpuledger.engines.openai import OpenAIEngine
from gpuledger.errors import EngineError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.store import open_store
from gpuledger.urls import Secrets, secret_values

Hostile = Callable[..., HostileServer]
KEY = "sk-live-4f9a8b7c6d5e"
PASSWORD = "PlanSecret-77"
BASIC = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()


def assert_clean(text: str) -> None:
    for secret in (KEY, PASSWORD, BASIC, "4f9a8b7c6d5e"):
        assert secret not in text


def echo_status(status: int, shape: Callable[[str], Any]) -> Callable[[Request, Reply], Any]:
    """A handler answering ``status`` with the request's own Authorization header in its body."""

    async def handler(req: Request, reply: Reply) -> None:
        await json_reply(reply, shape(req.headers.get("authorization", "")), status=status)

    return handler


def gen(i: int = 0) -> GenRequest:
    return GenRequest(index=i, prompt="hello", max_tokens=8, fixed_output=True)


def run(engine: Any, reqs: list[GenRequest]) -> list[Any]:
    async def go() -> list[Any]:
        await engine.open(2)
        try:
            return [await engine.generate(r) for r in reqs]
        finally:
            await engine.close()

    return asyncio.run(go())


# ---- the helper -------------------------------------------------------------------------------------------


def test_the_secret_values_of_a_url_and_a_key_are_found_in_every_form_a_server_echoes() -> None:
    url = "http://alice:s3cr%2Fet-pw@host:8000/v1?api_key=q-token-1&model=m"
    values = secret_values(url, api_key=KEY)
    basic = base64.b64encode(b"alice:s3cr/et-pw").decode()
    assert set(values) == {KEY, "s3cr%2Fet-pw", "s3cr/et-pw", basic, "q-token-1"}
    text = (f"denied: Bearer {KEY}; Basic {basic}; password s3cr/et-pw (s3cr%2Fet-pw) token q-token-1 "
            f"at {url}")
    shown = Secrets.of(url, api_key=KEY).redact(text)
    assert shown == ("denied: Bearer ***; Basic ***; password *** (***) token *** "
                     "at http://alice:***@host:8000/v1?api_key=***&model=m")


def test_a_token_given_as_the_urls_user_is_a_secret_and_short_values_are_not_searched_for() -> None:
    assert secret_values("https://ghp_TOKEN123@host/v1")[-1] == "ghp_TOKEN123"
    assert Secrets.of("http://a:pw@host", api_key="k").redact("a pw k awkward") == "a pw k awkward"


# ---- HTTP errors: stored, exported as CSV and JSON, printed ----------------------------------------------


def test_a_server_echoing_the_bearer_token_leaves_it_nowhere(
    hostile: Hostile, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    srv = hostile({("POST", "/v1/completions"): echo_status(
        401, lambda auth: {"error": {"message": f"Incorrect API key provided: {auth}", "type": "auth"}})})
    code = main(["bench", "--no-telemetry", "--no-progress", "--base-url", srv.url, "--num-requests", "3",
                 "--output-len", "8", "--input-len", "8", "--dataset", "random", "--warmup", "0"])
    out, err = capsys.readouterr()
    assert code == 6 and "HTTP 401: Incorrect API key provided: Bearer ***" in " ".join(err.split())
    assert {q.headers.get("authorization") for q in srv.of("POST", "/v1/completions")} == {f"Bearer {KEY}"}
    with open_store(None) as store:
        (info,) = store.list_runs()
        errors = [r.error or "" for r in store.get_requests(info.id)]
        exported = json.dumps(store.export_run(info.id))
    assert errors == ["HTTP 401: Incorrect API key provided: Bearer ***"] * 3
    assert main(["export", info.id, "--format", "csv"]) == 0
    csv_text = capsys.readouterr().out
    assert "Bearer ***" in csv_text
    for text in (out, err, exported, csv_text, *errors):
        assert_clean(text)


def test_a_server_echoing_the_urls_password_and_basic_header_leaves_them_nowhere(
    hostile: Hostile, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = hostile({("POST", "/v1/completions"): echo_status(
        500, lambda auth: {"detail": f"no user alice with password {PASSWORD} ({auth})"})})
    url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
    code = main(["bench", "--no-telemetry", "--no-progress", "--json", "--base-url", url, "--num-requests",
                 "2", "--output-len", "8", "--input-len", "8", "--dataset", "random", "--warmup", "0"])
    out, err = capsys.readouterr()
    assert code == 6
    assert {q.headers.get("authorization") for q in srv.requests} == {f"Basic {BASIC}"}
    with open_store(None) as store:
        (info,) = store.list_runs()
        errors = {r.error for r in store.get_requests(info.id)}
    assert errors == {"HTTP 500: no user alice with password *** (Basic ***)"}
    assert_clean(out + err)


def test_an_error_event_in_the_stream_echoing_the_key_is_stored_without_it(hostile: Hostile) -> None:
    async def stream(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "text/event-stream"})
        event = {"error": {"message": f"quota exceeded for {req.headers['authorization']}"}}
        await reply.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await reply.end()

    srv = hostile({("POST", "/v1/completions"): stream})
    (r,) = run(OpenAIEngine(srv.url, None, api_key=KEY), [gen()])
    assert r.error == "server error event: quota exceeded for Bearer ***"


def test_a_refusal_at_open_quoting_the_token_says_it_without_the_token(hostile: Hostile) -> None:
    srv = hostile({("GET", "/v1/models"): echo_status(
        200, lambda auth: {"object": "list", "data": [{"id": f"served-for-{auth}"}]})})
    with pytest.raises(EngineError) as exc:
        run(OpenAIEngine(srv.url, "another-model", api_key=KEY), [])
    assert "it serves: served-for-Bearer ***" in exc.value.message
    assert_clean(exc.value.message)


def test_the_tokenizer_endpoints_error_quoting_the_token_says_it_without_the_token(hostile: Hostile) -> None:
    srv = hostile({("POST", "/tokenize"): echo_status(403, lambda a: {"error": f"{a} may not tokenize"})})

    async def go() -> str:
        engine = OpenAIEngine(srv.url, None, api_key=KEY)
        await engine.open(1)
        try:
            assert engine.tokenizer is not None
            with pytest.raises(EngineError) as exc:
                await engine.tokenizer.tokenize("hello")
            return exc.value.message
        finally:
            await engine.close()

    message = asyncio.run(go())
    assert message == "tokenizer endpoint /tokenize: HTTP 403: Bearer *** may not tokenize"


def test_an_ollama_error_line_echoing_the_password_is_stored_without_it(hostile: Hostile) -> None:
    async def generate(req: Request, reply: Reply) -> None:
        await reply.start(200, {"Content-Type": "application/x-ndjson"})
        await reply.write(ndjson(None, error=f"auth {req.headers['authorization']} ({PASSWORD}) expired"))
        await reply.end()

    srv = hostile({("POST", "/api/generate"): generate}, identity="ollama")
    url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
    (r,) = run(OllamaEngine(url, srv.model), [gen()])
    assert r.error == "server error event: auth Basic *** (***) expired"


def test_an_image_server_echoing_the_bearer_token_is_stored_without_it() -> None:
    async def go() -> str | None:
        async def generations(request: web.Request) -> web.Response:
            auth = request.headers.get("Authorization", "")
            return web.json_response({"error": {"message": f"bad key {auth}"}}, status=401)

        app = web.Application()
        app.router.add_post("/v1/images/generations", generations)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            spec = ImageSpec(engine="openai-images", base_url=f"http://127.0.0.1:{port}/v1", model="m")
            engine = OpenAIImagesEngine(spec, api_key=KEY)
            await engine.open(1)
            try:
                result = await engine.generate_image(request_for(
                    0, seed=1, steps=None, height=64, width=64, batch_size=1, guidance=None,
                    keep_thumbnail=False))
            finally:
                await engine.close()
            return result.error
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) == "HTTP 401: bad key Bearer ***"
