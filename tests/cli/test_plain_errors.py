"""What a user reads when something is off says it plainly (issue #33, item 10): a ``--base-url`` without a
scheme is a usage error (exit 2, as ``monitor --engine-metrics`` already was), not the engine's exit 6; an
argument is named as the help names it (``RUN_ID``); a refused connection says host:port and the reason,
not aiohttp's ``ssl:default`` connector key, with the URL's credentials redacted; the torch build is said
once (``torch 2.13.0+cpu``, not ``torch 2.13.0+cpu cpu``)."""

from __future__ import annotations

import socket

import pytest

from gpuledger.cli.main import main
from gpuledger.engines.torch.device import DeviceInfo, torch_text


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, " ".join(out.err.split())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: nothing listens there


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "localhost:11434/v1", "ftp://127.0.0.1:8000"])
def test_a_base_url_without_http_is_a_usage_error(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, _, err = run(capsys, "bench", "--base-url", url, "--num-requests", "1", "--no-telemetry")
    assert code == 2, err
    assert err == f"error: --base-url must start with http:// or https://, got {url!r}"


def test_an_image_servers_base_url_is_checked_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "bench", "--task", "image", "--engine", "openai-images", "--base-url",
                       "127.0.0.1:8000", "--model", "m", "--no-telemetry")
    assert code == 2 and "--base-url must start with http:// or https://" in err, err


def test_a_missing_argument_is_named_as_the_help_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "cost")
    assert code == 2
    assert err == "error: gpuledger cost: Missing argument 'RUN_ID'. (see gpuledger cost --help)"
    code, out, _ = run(capsys, "cost", "--help")
    assert code == 0 and "RUN_ID" in out and "run_id" not in out


def test_a_refused_connection_says_host_port_and_why_with_the_credentials_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = closed_port()
    code, _, err = run(capsys, "bench", "--base-url", f"http://user:s3cret@127.0.0.1:{port}/v1",
                       "--num-requests", "1", "--no-telemetry")
    assert code == 6
    assert err.startswith(f"error: cannot reach the inference server at http://user:***@127.0.0.1:{port}: "
                          f"connecting to 127.0.0.1:{port} failed: connection refused")
    assert "ssl:default" not in err and "s3cret" not in err


def test_the_torch_build_is_said_once() -> None:
    assert torch_text("2.13.0+cpu", "cpu") == "torch 2.13.0+cpu"
    assert torch_text("2.8.0+cu128", "cuda 12.8") == "torch 2.8.0+cu128"
    assert torch_text("2.8.0+rocm6.4", "rocm 6.4.43482") == "torch 2.8.0+rocm6.4"
    assert torch_text("2.8.0", "cuda 12.8") == "torch 2.8.0 cuda 12.8"  # PyPI's default wheel: no tag
    cpu = DeviceInfo(type="cpu", torch_device="cpu", vendor="cpu", name="AMD EPYC 7B13", build="cpu",
                     torch_version="2.13.0+cpu", total_memory_bytes=None, free_memory_bytes=None,
                     memory_source="psutil.virtual_memory().available", bf16_supported=True)
    assert cpu.text() == "AMD EPYC 7B13 (cpu, torch 2.13.0+cpu)"
