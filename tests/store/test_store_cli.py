"""``gpuledger runs | show | export | delete | import`` as a user runs them."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from store_factories import make_request, make_run, make_samples

from gpuledger.cli.main import main
from gpuledger.cli.store_cmds import parse_since
from gpuledger.errors import InvalidInputError
from gpuledger.kinds.text.summary import TextGenerationSummary
from gpuledger.store import Store, open_store

# What the store keeps and prints (a small typed summary: these tests are about the store, not metrics).
SUMMARY_DOC = {
    "output_tokens_per_s": 1234.5, "input_tokens_per_s": 400.0, "requests_per_s": 3.2, "num_ok": 3,
    "num_failed": 1, "error_rate": 0.25, "window_s": 10.0,
    "ttft_ms": {"mean": 41.0, "p50": 40.0, "p90": 55.0, "p95": 60.0, "p99": 70.0, "max": 80.0, "n": 3},
    "token_source": {"server_usage": 3},
}
SUMMARY = TextGenerationSummary.model_validate(SUMMARY_DOC)


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    # COLUMNS, as a user's shell sets it (the console reads it when asked its width); setting the console's
    # width attribute instead would outlive the test: its undo writes back the width it read, fixed
    monkeypatch.setenv("COLUMNS", "200")


def _url(store: Store) -> str:
    return store._url.render_as_string(hide_password=False)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _finished_run(store: Store, **fields: object) -> str:
    run_id = store.create_run(make_run(**fields))
    store.add_requests(run_id, [make_request(i) for i in range(3)] + [make_request(3, error="HTTP 503")])
    store.add_telemetry(run_id, make_samples(3))
    device = {"device": "nvidia:0", "name": "NVIDIA H200", "mean_util_ratio": 0.62,
              "peak_memory_bytes": 2**34, "mean_power_w": 410.0, "energy_j": 4100.0,
              "energy_method": "counter", "valid": True, "unavailable": {}}
    store.update_run(run_id, status="complete", summary=SUMMARY, telemetry_summary=[device],
                     environment={"hash": "sha256:e1", "cuda": "12.4"})
    return run_id


def test_runs_json_prints_only_a_json_list_on_stdout(db_url: str) -> None:
    cmd = [sys.executable, "-m", "gpuledger.cli.main", "runs", "--json", "--db", db_url]
    empty = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    assert orjson.loads(empty.stdout) == []
    with open_store(db_url) as store:
        done = _finished_run(store, label="h200")
        live = store.create_run(make_run(label="live"))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    listing = orjson.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert isinstance(listing, list)
    assert [r["id"] for r in listing] == [live, done]
    assert listing[1]["output_tokens_per_s"] == {
        "value": 1234.5, "unit": "token/s", "source": "bench summary",
        "method": "output tokens ÷ measured window", "reason": None,
    }
    assert listing[0]["output_tokens_per_s"]["value"] is None
    assert listing[0]["output_tokens_per_s"]["reason"] == "still running"
    assert (listing[1]["status"], listing[1]["num_requests"], listing[1]["label"]) == ("complete", 4, "h200")


def test_runs_table_shows_the_columns_with_units_and_reasons(
    sqlite_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    done = _finished_run(sqlite_store, label="h200-bf16", engine="vllm", model="llama-8b")
    live = sqlite_store.create_run(make_run(label="still-going"))
    code, out, err = _cli(capsys, "runs", "--db", _url(sqlite_store))
    assert code == 0 and err == ""
    for header in ("id", "when", "label", "engine", "model", "status", "requests", "rate"):
        assert header in out
    done_line = next(line for line in out.splitlines() if done in line)
    # the rate of the run's headline unit, with its unit (an image run would say images/s)
    assert all(v in done_line for v in ("h200-bf16", "vllm", "llama-8b", "complete", "1,234.5 output tok/s"))
    live_line = next(line for line in out.splitlines() if live in line)
    assert "running" in live_line and "— (still running)" in live_line


def test_runs_filters_by_label_and_since_and_rejects_a_bad_date(
    sqlite_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    old = sqlite_store.create_run(make_run(label="a", created_at=datetime.now(UTC) - timedelta(days=10)))
    new = sqlite_store.create_run(make_run(label="a"))
    other = sqlite_store.create_run(make_run(label="b"))
    url = _url(sqlite_store)

    def ids(out: str) -> list[str]:
        return [r["id"] for r in orjson.loads(out)]

    assert ids(_cli(capsys, "runs", "--json", "--label", "a", "--db", url)[1]) == [new, old]
    assert ids(_cli(capsys, "runs", "--json", "--since", "7d", "--db", url)[1]) == [other, new]
    assert ids(_cli(capsys, "runs", "--json", "--label", "a", "--since", "3d", "--db", url)[1]) == [new]
    code, out, err = _cli(capsys, "runs", "--since", "last tuesday", "--db", url)
    assert (code, out) == (4, "") and "--since 'last tuesday'" in err


def test_since_takes_dates_in_local_time_and_ages() -> None:
    now = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
    assert parse_since("12h", now) == now - timedelta(hours=12)
    assert parse_since("2w", now) == now - timedelta(weeks=2)
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("2025-03-01") == datetime(2025, 3, 1).astimezone()
    assert parse_since("2025-03-01T08:00:00+00:00") == datetime(2025, 3, 1, 8, tzinfo=UTC)
    assert parse_since(None) is None
    with pytest.raises(InvalidInputError):
        parse_since("soon")


def test_show_prints_header_summary_environment_and_telemetry(
    sqlite_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _finished_run(sqlite_store, label="h200-bf16")
    sqlite_store.save_cost_evaluation(run_id, "h200-rental", {"usd_per_hour": 3.5}, {"usd_per_1m": 0.79})
    code, out, _ = _cli(capsys, "show", run_id[:5], "--db", _url(sqlite_store))
    assert code == 0
    for expected in (f"run {run_id}", "h200-bf16", "complete", "1,234.5 output tok/s",
                     "3 / 1 (error rate 25.0%)", "TTFT", "sha256:e1", "cuda", "12.4", "NVIDIA H200", "62.0 %",
                     "16.00 GiB", "410.0 W",
                     "4,100 J (counter)", "h200-rental"):
        assert expected in out, expected


def test_show_json_is_the_whole_run_with_its_cost_evaluations(
    sqlite_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _finished_run(sqlite_store)
    sqlite_store.save_cost_evaluation(run_id, "h200-rental", {"usd_per_hour": 3.5}, {"usd_per_1m": 0.79})
    code, out, _ = _cli(capsys, "show", run_id, "--json", "--db", _url(sqlite_store))
    doc = orjson.loads(out)
    assert code == 0
    assert doc["id"] == run_id and doc["summary"] == SUMMARY_DOC and doc["env_hash"] == "sha256:e1"
    assert [c["profile_name"] for c in doc["cost_evaluations"]] == ["h200-rental"]
    assert doc["output_tokens_per_s"]["unit"] == "token/s"


def test_export_csv_has_one_row_per_request_with_units_in_the_header(
    sqlite_store: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_id = _finished_run(sqlite_store)
    code, out, _ = _cli(capsys, "export", run_id, "--format", "csv", "--db", _url(sqlite_store))
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["index", "stage", "t_send_s", "ttft_ms", "e2e_ms", "input_tokens",
                             "output_tokens", "token_source", "error", "run_output_tokens_per_s"]
    assert len(rows) == 4
    rate = repr(sqlite_store.get_run(run_id).summary.output_tokens_per_s)  # type: ignore[union-attr]
    assert rows[1] == {"index": "1", "stage": "", "t_send_s": "0.1", "ttft_ms": "50.0", "e2e_ms": "81.0",
                       "input_tokens": "32", "output_tokens": "4", "token_source": "server_usage",
                       "error": "", "run_output_tokens_per_s": rate}
    assert rows[3]["error"] == "HTTP 503"
    target = tmp_path / "requests.csv"
    code, out, _ = _cli(capsys, "export", run_id, "-f", "csv", "-o", str(target), "--json", "--db",
                        _url(sqlite_store))
    assert code == 0 and orjson.loads(out)["requests"] == 4
    assert list(csv.DictReader(io.StringIO(target.read_text()))) == rows


@pytest.mark.postgres
def test_a_run_exported_from_one_store_imports_into_another_unchanged(
    sqlite_store: Store, pg_fresh_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A laptop's SQLite store and the team's PostgreSQL server: merge by file, no server access needed.
    run_id = _finished_run(sqlite_store, label="from-laptop")
    path = tmp_path / "run.json"
    code, out, _ = _cli(capsys, "export", run_id[:6], "-o", str(path), "--db", _url(sqlite_store))
    assert code == 0 and f"exported run {run_id}" in out
    code, out, _ = _cli(capsys, "import", str(path), "--db", pg_fresh_url)
    assert code == 0 and f"imported run {run_id} (4 requests, 3 telemetry samples)" in out
    with open_store(pg_fresh_url) as team:
        assert team.export_run(run_id) == sqlite_store.export_run(run_id)
        assert team.get_requests(run_id) == sqlite_store.get_requests(run_id)


def test_export_to_stdout_and_import_from_stdin(
    sqlite_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _finished_run(sqlite_store)
    code, out, _ = _cli(capsys, "export", run_id, "--db", _url(sqlite_store))
    assert code == 0 and orjson.loads(out)["format"] == "gpuledger-run"
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(out.encode())))
    code, out2, _ = _cli(capsys, "import", "-", "--json", "--db", other)
    assert code == 0 and orjson.loads(out2) == {"imported": run_id, "requests": 4, "telemetry_samples": 3}
    with open_store(other) as store:
        assert store.export_run(run_id) == orjson.loads(out)


def test_a_run_exported_while_running_is_imported_as_incomplete(sqlite_store: Store, tmp_path: Path) -> None:
    run_id = sqlite_store.create_run(make_run())
    sqlite_store.add_requests(run_id, [make_request(0)])
    doc = sqlite_store.export_run(run_id)
    assert doc["run"]["status"] == "running"
    with open_store(f"sqlite:///{tmp_path / 'other.sqlite'}") as other:
        other.import_run(doc)
        assert other.get_run(run_id).status == "incomplete"


def test_delete_removes_the_run(sqlite_store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = _finished_run(sqlite_store)
    keep = _finished_run(sqlite_store)
    code, out, _ = _cli(capsys, "delete", run_id, "--json", "--db", _url(sqlite_store))
    assert code == 0 and orjson.loads(out) == {"deleted": run_id, "requests": 4}
    assert [r.id for r in sqlite_store.list_runs()] == [keep]
    code, _, err = _cli(capsys, "show", run_id, "--db", _url(sqlite_store))
    assert code == 3 and "no run" in err


def test_labels_are_shown_literally_never_as_markup(
    sqlite_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = sqlite_store.create_run(make_run(label="[bold]bf16[/] [/oops]", model="[red]m"))
    code, out, _ = _cli(capsys, "runs", "--db", _url(sqlite_store))
    assert code == 0 and "[bold]bf16[/] [/oops]" in out and "[red]m" in out
    code, out, _ = _cli(capsys, "show", run_id, "--db", _url(sqlite_store))
    assert code == 0 and "[bold]bf16[/] [/oops]" in out
