"""A ``--base-url`` with credentials (``http://user:password@host``) sends THOSE credentials, as a Basic
header, on every request of ``gpuledger bench`` — in this process and from ``--workers`` load processes —
while every stored and printed form of the spec keeps the URL redacted.

The spec a run is made from is ``settled`` (every field marked set) by re-validating its dump; the dump
redacts the base URL, so the spec the engine was given carried ``user:***`` and the server received
``Basic base64("user:***")``. The programmed server on 127.0.0.1 records each request's headers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
from hostile_server import HostileServer, completion_stream, stream_handler

from gpuledger.cli.main import main
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.text.options import server_spec
from gpuledger.records.spec import dump_spec
from gpuledger.store import open_store

Hostile = Callable[..., HostileServer]
USER, PASSWORD = "alice", "s3cret-pw"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def bench(srv: HostileServer, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    url = srv.url.replace("http://", f"http://{USER}:{PASSWORD}@")
    code = main(["bench", "--no-telemetry", "--no-progress", "--json", "--base-url", url,
                 "--num-requests", "4", "--output-len", "8", "--input-len", "8", "--dataset", "random",
                 "--warmup", "0", *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("extra", [(), ("--workers", "2", "--concurrency", "2")],
                         ids=["in-process", "workers"])
def test_bench_sends_the_urls_own_credentials_and_stores_them_redacted(
    hostile: Hostile, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...]
) -> None:
    srv = hostile({("POST", "/v1/completions"): stream_handler(completion_stream(8))})
    code, out, err = bench(srv, capsys, *extra)
    assert code == 0, err
    sent = {r.headers.get("authorization") for r in srv.requests}
    assert sent == {basic(USER, PASSWORD)}  # probes, /tokenize and every completion
    assert len(srv.of("POST", "/v1/completions")) == 4
    doc = json.loads(out)
    assert doc["config"]["base_url"] == f"http://{USER}:***@127.0.0.1:{srv.port}"
    with open_store(None) as store:
        exported = json.dumps(store.export_run(doc["id"]))
    assert PASSWORD not in out + err + exported


def test_a_settled_spec_keeps_the_password_and_its_dumps_do_not() -> None:
    spec = server_spec("openai", base_url=f"http://{USER}:{PASSWORD}@127.0.0.1:9/v1", model="m")
    assert spec.base_url == f"http://{USER}:{PASSWORD}@127.0.0.1:9/v1"  # what the engine is made from
    assert dump_spec(spec)["base_url"] == f"http://{USER}:***@127.0.0.1:9/v1"
    assert dump_spec(spec, stored=True)["base_url"] == f"http://{USER}:***@127.0.0.1:9/v1"
    assert PASSWORD not in spec.model_dump_json() and PASSWORD not in repr(spec.model_dump())
    assert dump_spec(spec, keep_secrets=True)["base_url"] == spec.base_url  # for this run's own processes


def test_an_image_specs_server_url_is_redacted_in_every_dump_but_the_runs_own() -> None:
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:9/v1"
    spec = ImageSpec(engine="openai-images", base_url=url)
    assert spec.base_url == url
    assert dump_spec(spec, stored=True)["base_url"] == f"http://{USER}:***@127.0.0.1:9/v1"
    assert PASSWORD not in spec.model_dump_json()
    assert dump_spec(spec, keep_secrets=True)["base_url"] == url
    assert dump_spec(spec, stored=True, keep_secrets=True)["base_url"] != url  # the store never keeps it
