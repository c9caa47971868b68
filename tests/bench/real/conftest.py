"""Session fixtures: real vLLM (CPU) and llama.cpp servers on loopback, started once, stopped at the end.

A server that cannot start here SKIPS its tests with a loud reason (the log's tail included) —
except under ``CI=true``, where it FAILS them: CI must never pass with the real servers skipped.
When a test that used a server fails, the last lines of that server's log are attached to the report.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import realservers
from realservers import RealServer, ServerUnavailable

_started: dict[str, RealServer] = {}
_unavailable: dict[str, str] = {}


def _unavailable_now(kind: str, reason: str) -> NoReturn:
    _unavailable[kind] = reason
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"REAL SERVER {kind} COULD NOT START under CI=true: {reason}", pytrace=False)
    pytest.skip(f"REAL SERVER {kind} UNAVAILABLE — its tests did NOT run: {reason}")


@pytest.fixture(scope="session")
def real_cache() -> Path:
    return realservers.cache_dir()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return realservers.make_tiny_model(tmp_path_factory.mktemp("tiny-llama") / "model")
    except ServerUnavailable as exc:
        _unavailable_now("vllm", str(exc))


@pytest.fixture(scope="session")
def vllm_server(
    real_cache: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[RealServer]:
    log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    try:
        server = realservers.external_server("vllm")
        if server is None:
            realservers.vllm_python(real_cache)  # fail fast, before building the model
            model_dir: Path = request.getfixturevalue("tiny_model_dir")
            server = realservers.start_vllm(model_dir, log, cache=real_cache)
    except ServerUnavailable as exc:
        _unavailable_now("vllm", str(exc))
    # The first requests after start pay one-off costs in vLLM's API process (seen in CI: ~0.5 s of client
    # TTFT that its engine histograms do not contain). One request first, so the tests that compare the
    # client's timings with the server's measure the server's steady state; they compare counter deltas.
    realservers.post_json(
        server.base_url + "/v1/completions", {"model": server.model, "prompt": "warm up", "max_tokens": 8}
    )
    _started["vllm"] = server
    yield server
    server.stop()
    _started.pop("vllm", None)


@pytest.fixture(scope="session")
def llamacpp_server(real_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    log = tmp_path_factory.mktemp("llamacpp-log") / "llama-server.log"
    try:
        server = realservers.external_server("llamacpp") or realservers.start_llamacpp(log, cache=real_cache)
    except ServerUnavailable as exc:
        _unavailable_now("llamacpp", str(exc))
    _started["llamacpp"] = server
    yield server
    server.stop()
    _started.pop("llamacpp", None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if getattr(report, "failed", False) and call.when == "call":
        fixturenames = getattr(item, "fixturenames", ())
        for kind, fixture in (("vllm", "vllm_server"), ("llamacpp", "llamacpp_server")):
            server = _started.get(kind)
            if server is not None and fixture in fixturenames:
                state = "running" if server.alive() else "EXITED"
                report.sections.append(  # type: ignore[attr-defined]
                    (f"{kind} server log tail ({state}, {server.log_path})", server.log_tail(60))
                )
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    outcome = "FAILED (CI=true)" if os.environ.get("CI", "").lower() == "true" else "were SKIPPED"
    for kind, reason in _unavailable.items():
        terminalreporter.write_sep("!", f"REAL SERVER {kind} UNAVAILABLE: its tests {outcome}", red=True)
        terminalreporter.write_line(reason)
