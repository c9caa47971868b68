"""Every shipped MLPerf point's figures are those of the source row its ``how_read`` names: the results table
entry (v5.1) or the results page row (v5.0), and the performance log's lines, as kept in
tests/fixtures/captures/published/ (SOURCES.md there says where each came from)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuledger.cost.published.published import public_points, public_sets
from gpuledger.kinds.text.published import PublishedSummary
from gpuledger.records import RunInfo

V51 = ("mlperf-v5.1-llama2-70b", "mlperf-v5.1-deepseek-r1")
GPU_OF = {"NVIDIA H200-SXM-141GB": "h200", "NVIDIA B200-SXM-180GB": "b200",
          "AMD Instinct MI300X 192GB HBM3": "mi300x", "AMD Instinct MI325X 256GB HBM3e": "mi325x"}
MODEL_OF = {"mlperf-v5.1-llama2-70b": "llama2-70b-99.9", "mlperf-v5.1-deepseek-r1": "deepseek-r1"}


def _summary(run: RunInfo) -> PublishedSummary:
    assert isinstance(run.summary, PublishedSummary)
    return run.summary


def _value(line: str) -> float:
    return float(line.split(":", 1)[1])


def _check_log(s: PublishedSummary, lines: dict[str, str], how: str) -> None:
    """output_len from the tokens and samples lines named, TTFT/TPOT from the means named (ns)."""
    got = re.search(r"output_len = ([\d.]+) / ([\d.]+) \(lines (\d+) and (\d+) of", how)
    assert got is not None, how
    tokens, samples, t_line, s_line = got.groups()
    assert "tokens per second" in lines[t_line].lower() and "samples per second" in lines[s_line].lower()
    assert _value(lines[t_line]) == float(tokens) and _value(lines[s_line]) == float(samples)
    assert s.output_len == round(float(tokens) / float(samples))
    assert lines["9"] == "Result is : VALID"
    means = re.search(r"lines (\d+) and (\d+), ns / 1e6", how)
    if s.scenario == "offline":
        assert s.ttft_ms is None and s.tpot_ms is None and means is None
        assert lines["5"] == "Scenario : Offline"
        return
    assert means is not None and lines["5"] == "Scenario : Server"  # interactive: Server, tighter limits
    ft, tp = lines[means.group(1)], lines[means.group(2)]
    assert ft.startswith("Mean First Token latency (ns)") and tp.startswith("Mean Time to Output Token (ns)")
    assert s.ttft_ms == pytest.approx(_value(ft) / 1e6, rel=1e-12)
    assert s.tpot_ms == pytest.approx(_value(tp) / 1e6, rel=1e-12)
    ttft_limit, tpot_limit = _value(lines["59"]) / 1e6, _value(lines["60"]) / 1e6
    assert f"TTFT {ttft_limit:g} ms and TPOT {tpot_limit:g} ms" in how
    assert (ttft_limit, tpot_limit) == (450.0, 40.0) if s.scenario == "interactive" else ttft_limit == 2000.0


def test_every_v51_point_is_its_results_table_entry_and_its_log(fixtures_dir: Path) -> None:
    doc: dict[str, Any] = json.loads(
        (fixtures_dir / "published" / "mlperf_inference_results_v5.1.json").read_text(encoding="utf-8"))
    entries = {e["index"]: e["entry"] for e in doc["summary_results"]["entries"]}
    seen = set()
    for name in V51:
        for run in public_points(name):
            s = _summary(run)
            how = s.how_read or ""
            assert doc["commit"][:10] in how and "mlcommons/inference_results_v5.1" in how
            index = int(re.search(r"entry \[(\d+)\]", how).group(1))  # type: ignore[union-attr]
            e = entries[index]
            seen.add(index)
            assert e["ID"] in how and e["Location"] in how
            assert (e["Category"], e["Suite"], e["Availability"]) == ("closed", "datacenter", "available")
            assert e["Model"] == MODEL_OF[name] and s.division == "closed"
            assert s.output_tokens_per_s == e["Performance_Result"] and e["Performance_Units"] == "Tokens/s"
            assert s.published_rates == ["output_tokens_per_s"] and s.input_len is None and s.input_len_reason
            assert s.gpu == GPU_OF[e["Accelerator"]] and s.gpus == e["a#"] * e["Nodes"]
            assert s.precision == e["weight_data_types"] and s.system == e["Platform"]
            assert s.scenario == e["Scenario"].lower()
            framework, version = e["Software"].split(",")[0].split(" ", 1)
            assert (s.framework, s.framework_version) == (framework, version)
            vendor = {"h200": "NVIDIA", "b200": "NVIDIA", "mi300x": "AMD", "mi325x": "AMD"}[s.gpu]
            assert s.submitter_role == ("vendor" if e["Submitter"] == vendor else "third party")
            assert s.submitter == e["Submitter"].replace("_", " ")
            assert s.date == "2025-09-09" and s.source == "MLCommons MLPerf Inference v5.1"
            log = doc["log_summaries"][f"{e['Location']}/performance/run_1/mlperf_log_summary.txt"]
            _check_log(s, log, how)
    assert seen == set(entries)  # the fixture keeps the shipped rows, and only those


def _page_value(excerpts: list[str], row: str, scenario: str) -> float:
    """The Tokens/s of ``row`` in a results page's table (its columns: Server, then Offline)."""
    text = "".join(excerpts)
    assert text.index('<th colspan="2">Server</th>') < text.index('<th colspan="2">Offline</th>')
    cells = re.search(rf'<td class="model">{re.escape(row)}</td>(.*?)(?:<tr>|</table>|$)', text)
    assert cells is not None, row
    perf = re.findall(r'<td class="perf">([\d.]+)</td>', cells.group(1))
    return float(perf[0 if scenario == "Server" else 1])


def test_every_v50_point_is_its_results_page_row_and_its_log(fixtures_dir: Path) -> None:
    doc: dict[str, Any] = json.loads(
        (fixtures_dir / "published" / "mlperf_inference_results_v5.0.json").read_text(encoding="utf-8"))
    runs = public_points("mlperf-v5.0-llama2-70b")
    assert len(runs) == 5
    for run in runs:
        s = _summary(run)
        how = s.how_read or ""
        page = re.search(r"(closed/\S+/README\.md) at (\w+), Results Table row (\S+), (Server|Offline)", how)
        assert page is not None, how
        path, commit, row, column = page.groups()
        kept = doc["results_pages"][path]
        assert kept["commit"].startswith(commit)
        assert s.output_tokens_per_s == _page_value(kept["excerpts"], row, column)
        assert f"<td>framework</td><td>{s.framework} {s.framework_version}" in "".join(kept["excerpts"])
        assert ("interactive" in row) == (s.scenario == "interactive")
        log_rel = re.search(r"of (\S+/performance/run_1/mlperf_log_summary\.txt) at (\w+)", how)
        assert log_rel is not None
        log = doc["log_summaries"][f"{Path(path).parent}/{log_rel.group(1)}"]
        assert log["commit"].startswith(log_rel.group(2))
        _check_log(s, log["lines"], how)
        assert s.precision is None and "precision: not read" in how  # not in the files read: not guessed
        assert s.submitter == ("NVIDIA" if s.gpu == "h200" else "AMD") and s.submitter_role == "vendor"


def test_the_mlperf_sets_say_what_they_lack_and_ship_output_rates_only() -> None:
    sets = public_sets()
    for name in (*V51, "mlperf-v5.0-llama2-70b"):
        found = sets[name]
        assert found.about and found.url.startswith("https://github.com/mlcommons/")
        for run in public_points(name):
            s = _summary(run)
            assert s.rate("token") is None and s.rate("input_token") is None
            assert run.summary is not None and "input length is not published" in s.derivation
    assert "MI355X" in (sets["mlperf-v5.1-llama2-70b"].about or "")
    assert "none on an AMD GPU" in (sets["mlperf-v5.1-deepseek-r1"].about or "")
