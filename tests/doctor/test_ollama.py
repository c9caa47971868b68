"""Ollama checks against a real HTTP server on loopback that answers with real /api/ps captures."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from doctor_harness import FakeMachine, ids, only


class OllamaStub:
    """A real aiohttp server on 127.0.0.1 serving captured /api/version and /api/ps bodies."""

    def __init__(self, version: bytes, ps: bytes) -> None:
        self.bodies = {"/api/version": version, "/api/ps": ps}
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    async def _handle(self, request: web.Request) -> web.Response:
        body = self.bodies.get(request.path)
        if body is None:
            return web.Response(status=404)
        return web.Response(body=body, content_type="application/json")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> str:
        self.thread.start()
        assert self.ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def ollama_bodies(fixtures_dir: Path) -> Iterator[dict[str, bytes]]:
    base = fixtures_dir / "servers/ollama"
    partial = (base / "attogram-api-ps-partial-offload-mistral-7b.json").read_bytes()
    cpu = json.loads(partial)
    cpu["models"][0]["size_vram"] = 0  # what Ollama reports when no layer is on the GPU (see data/SOURCES.md)
    yield {
        "version": (base / "attogram-api-version-0.11.6.json").read_bytes(),
        "gpu": (base / "attogram-api-ps-two-models-gpu.json").read_bytes(),
        "partial": partial,
        "cpu": json.dumps(cpu, indent=2).encode(),
    }


def test_models_fully_on_the_gpu_are_ok(machine: FakeMachine, ollama_bodies: dict[str, bytes]) -> None:
    machine.nvidia_a100()
    with OllamaStub(ollama_bodies["version"], ollama_bodies["gpu"]) as url:
        report = machine.doctor(check_ollama=True, ollama_url=url)
    assert report.facts.ollama.version == "0.11.6"
    assert [m.name for m in report.facts.ollama.models] == ["granite3.3:2b", "smollm2:1.7b"]
    finding = only(report.findings, "ollama.ok")
    assert "granite3.3:2b: 2.6 GB, 100% in GPU memory" in finding.evidence
    assert not {"ollama.running_on_cpu", "ollama.partial_offload"} & ids(report.findings)
    assert report.exit_code == 0


def test_partial_offload_is_a_warning(machine: FakeMachine, ollama_bodies: dict[str, bytes]) -> None:
    machine.nvidia_a100()
    with OllamaStub(ollama_bodies["version"], ollama_bodies["partial"]) as url:
        report = machine.doctor(check_ollama=True, ollama_url=url)
    finding = only(report.findings, "ollama.partial_offload")
    assert finding.title == "Ollama runs 13% of mistral:7b on the CPU"  # ollama ps: 13%/87% CPU/GPU
    assert "context length: 16384" in finding.evidence
    assert report.exit_code == 1


def test_model_on_the_cpu_on_an_nvidia_host(machine: FakeMachine, ollama_bodies: dict[str, bytes]) -> None:
    machine.nvidia_a100()
    with OllamaStub(ollama_bodies["version"], ollama_bodies["cpu"]) as url:
        report = machine.doctor(check_ollama=True, ollama_url=url)
    finding = only(report.findings, "ollama.running_on_cpu")
    assert finding.severity == "warning"
    assert "mistral:7b: size 8.3 GB, size_vram 0 (100% CPU)" in finding.evidence
    assert any(e.startswith("NVIDIA:") for e in finding.evidence)
    assert "ollama ps   # PROCESSOR should say 100% GPU" in finding.fix


def test_model_on_the_cpu_on_an_rdna2_host_names_the_override(
    machine: FakeMachine, ollama_bodies: dict[str, bytes]
) -> None:
    machine.amd_rx6700xt()
    machine.env["HSA_OVERRIDE_GFX_VERSION"] = "10.3.0"  # the shell has it; the service may not
    with OllamaStub(ollama_bodies["version"], ollama_bodies["cpu"]) as url:
        finding = only(machine.doctor(check_ollama=True, ollama_url=url).findings, "ollama.running_on_cpu")
    assert (
        "AMD: gfx1031 needs HSA_OVERRIDE_GFX_VERSION=10.3.0 in the Ollama service environment"
        in finding.evidence
    )
    assert any('Environment="HSA_OVERRIDE_GFX_VERSION=10.3.0"' in step for step in finding.fix)


def test_model_on_the_cpu_without_any_gpu_is_only_info(
    machine: FakeMachine, ollama_bodies: dict[str, bytes]
) -> None:
    machine.no_pci_gpu()
    with OllamaStub(ollama_bodies["version"], ollama_bodies["cpu"]) as url:
        report = machine.doctor(check_ollama=True, ollama_url=url)
    assert only(report.findings, "ollama.running_on_cpu").severity == "info"
    assert report.exit_code == 0


def test_unreachable_explicit_url_is_a_warning(machine: FakeMachine) -> None:
    machine.no_pci_gpu()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    report = machine.doctor(check_ollama=True, ollama_url=f"127.0.0.1:{port}")
    finding = only(report.findings, "ollama.unreachable")
    assert f"http://127.0.0.1:{port}" in finding.evidence[0]
    assert report.exit_code == 1


def test_garbage_answer_is_an_error_value_not_a_crash(machine: FakeMachine) -> None:
    machine.no_pci_gpu()
    with OllamaStub(b'{"version":"0.11.6"}', b"<html>proxy error</html>") as url:
        facts = machine.facts(check_ollama=True, ollama_url=url)
    assert facts.ollama.reachable and facts.ollama.error is not None and facts.ollama.models == []
