"""``gpuledger bench --like RUN``: the stored run's workload, run again against another server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stream_server import Scenario, StreamServer

from gpuledger.bench.like import engine_of_repeat, repeat
from gpuledger.cli.main import main
from gpuledger.errors import UsageError
from gpuledger.kinds.text.options import server_document, server_spec
from gpuledger.records import RunInfo
from gpuledger.records.spec import LikeOrigin

Serve = Callable[..., StreamServer]

# What a repeat must carry over: everything in the stored config except the server, the label and the
# record of where the workload came from.
NOT_WORKLOAD = {"base_url", "model", "label", "like"}


def bench_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["bench", "--no-telemetry", "--no-progress", "--json", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc: dict[str, Any] = json.loads(out.out)
    return doc


def bench_fails(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["bench", "--no-telemetry", "--no-progress", *args])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.err


def workload(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc["config"].items() if k not in NOT_WORKLOAD}


def test_a_repeat_runs_the_same_workload_against_another_server(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    a_srv = serve(Scenario(identity="vllm", itl_s=0.001))
    b_srv = serve(Scenario(identity="sglang", itl_s=0.001))
    a = bench_json(
        capsys, "--base-url", a_srv.url, "--endpoint", "chat", "--input-len", "24", "--output-len", "9",
        "--range-ratio", "0.25", "--sweep", "1,2", "--num-requests", "4", "--warmup", "2", "--seed", "7",
        "--slo", "ttft_ms=500,tpot_ms=40", "--request-timeout", "30", "--label", "machine A",
    )
    b = bench_json(capsys, "--like", a["id"][:8], "--base-url", b_srv.url, "--label", "machine B")

    assert b["id"] != a["id"] and b["label"] == "machine B"
    assert b["config"]["base_url"] == b_srv.url and b["server"]["kind"] == "sglang"
    assert workload(b) == workload(a)
    assert b["config"]["like"] == {"run_id": a["id"], "overridden": []}
    # The same prompts and lengths were sent: the seed and the lengths came along.
    assert b["summary"]["num_requests"] == a["summary"]["num_requests"] == 8
    assert b["summary"]["output_tokens_total"] == a["summary"]["output_tokens_total"]
    assert b["summary"]["slo"]["ttft_ms"] == 500 and b["summary"]["slo"]["tpot_ms"] == 40
    assert [st["stage"] for st in b["summary"]["stages"]] == ["c=1", "c=2"]


def test_flags_given_with_like_override_the_stored_workload_and_are_recorded(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.001))
    a = bench_json(
        capsys, "--base-url", srv.url, "--input-len", "16", "--output-len", "6", "--sweep", "1,2",
        "--num-requests", "3", "--warmup", "0",
    )
    b = bench_json(
        capsys, "--like", a["id"], "--base-url", srv.url, "--concurrency", "3", "--output-len", "4"
    )

    # A load pattern given here replaces the stored one whole (a sweep and a concurrency do not mix).
    assert b["config"]["load"] == {"kind": "concurrency", "stages": [{"stage": "c=3", "concurrency": 3}]}
    assert b["config"]["dataset"]["output_len"] == 4
    assert b["config"]["dataset"]["input_len"] == 16 and b["config"]["warmup"] == 0
    assert b["config"]["num_requests_per_stage"] == 3
    assert b["config"]["like"] == {"run_id": a["id"], "overridden": ["concurrency", "output_len"]}
    assert b["summary"]["output_tokens_total"] == 3 * 4


def test_a_dataset_file_must_be_the_bytes_the_stored_run_read(
    serve: Serve, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.001))
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        '{"prompt": "hello there", "output_len": 5}\n{"prompt": "how are you", "output_len": 3}\n'
    )
    a = bench_json(
        capsys, "--base-url", srv.url, "--dataset", "jsonl", "--dataset-path", str(data),
        "--num-requests", "2", "--concurrency", "1", "--warmup", "0",
    )
    assert a["workload"]["sha256"].startswith("sha256:") and len(a["workload"]["sha256"]) == 7 + 64

    copy = tmp_path / "elsewhere.jsonl"
    copy.write_bytes(data.read_bytes())
    b = bench_json(capsys, "--like", a["id"], "--base-url", srv.url, "--dataset-path", str(copy))
    assert b["workload"]["sha256"] == a["workload"]["sha256"]
    assert b["config"]["like"]["overridden"] == ["dataset_path"]

    data.write_text('{"prompt": "something else entirely", "output_len": 5}\n')
    code, err = bench_fails(capsys, "--like", a["id"], "--base-url", srv.url)
    assert code == 4
    assert f"is not the one run {a['id']} used" in err and "--dataset-path" in err

    data.unlink()
    code, err = bench_fails(capsys, "--like", a["id"], "--base-url", srv.url)
    assert code == 3 and "dataset file not found" in err


def test_an_unknown_run_is_exit_3_and_starts_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = bench_fails(capsys, "--like", "0123456789ab")
    assert code == 3 and "0123456789ab" in err


def test_a_torch_run_repeats_with_its_model_batch_and_lengths(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    from support.tiny_model import make_tiny_llama

    model_dir = make_tiny_llama(tmp_path / "tiny")
    a = bench_json(
        capsys, "--engine", "torch", "--model", str(model_dir), "--device", "cpu", "--input-len", "8",
        "--output-len", "3", "--num-requests", "4", "--concurrency", "2", "--seed", "5",
    )
    b = bench_json(capsys, "--like", a["id"], "--device", "cpu", "--label", "again")
    assert b["engine"] == "torch" and b["model"] == a["model"]
    assert b["config"]["batch_size"] == 2
    assert b["workload"] == a["workload"]
    assert b["config"]["like"] == {"run_id": a["id"], "overridden": []}
    assert b["summary"]["output_tokens_total"] == a["summary"]["output_tokens_total"] == 4 * 3

    code, err = bench_fails(capsys, "--like", a["id"], "--engine", "openai")
    assert code == 2 and "--engine torch" in err


def _stored(engine: str, endpoint: str) -> RunInfo:
    spec = server_spec(engine, endpoint=endpoint, seed=3, concurrency=2)
    return RunInfo(id="abc", engine=engine, config=spec)


def test_a_server_run_can_be_repeated_on_the_other_server_api_with_the_same_request_shape() -> None:
    stored = _stored("openai", "completions")
    on_ollama = engine_of_repeat(stored, "ollama", {"engine"})
    spec = repeat(stored, server_document("ollama"), on_ollama, {"engine"})
    assert (spec.engine, spec.endpoint, spec.seed, spec.fixed_concurrency()) == ("ollama", "generate", 3, 2)
    assert spec.like == LikeOrigin(run_id="abc", overridden=[])
    chat = repeat(_stored("openai", "chat"), server_document("ollama"), on_ollama, {"engine"})
    assert chat.endpoint == "chat"
    same = repeat(stored, server_document("openai"), engine_of_repeat(stored, "openai", set()), set())
    assert (same.engine, same.endpoint) == ("openai", "completions")


def test_a_server_workload_is_not_repeated_on_the_torch_engine() -> None:
    with pytest.raises(UsageError, match="--engine openai or ollama"):
        engine_of_repeat(_stored("openai", "chat"), "torch", {"engine"})


def test_the_readme_workflow_export_import_then_like_on_the_other_machine(
    serve: Serve, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    srv = serve(Scenario(identity="vllm", itl_s=0.001))
    a = bench_json(
        capsys, "--base-url", srv.url, "--input-len", "12", "--output-len", "5", "--num-requests", "3"
    )
    exported = tmp_path / "a.json"
    assert main(["export", a["id"], "--format", "json", "-o", str(exported)]) == 0
    machine_b = f"sqlite:///{tmp_path / 'b.sqlite'}"
    assert main(["import", str(exported), "--db", machine_b]) == 0
    capsys.readouterr()

    b = bench_json(capsys, "--like", a["id"], "--base-url", srv.url, "--db", machine_b)
    assert workload(b) == workload(a) and b["config"]["like"]["run_id"] == a["id"]
    assert b["summary"]["output_tokens_total"] == 3 * 5
