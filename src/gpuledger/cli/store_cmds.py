"""Run history: ``gpuledger runs``, ``show``, ``export``, ``delete``, ``import`` (docs/store.md)."""

from __future__ import annotations

import math
import sys
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.text import Text

from gpuledger.boundedio import MAX_DOCUMENT_BYTES, read_file_arg
from gpuledger.cli.common import DbOpt, JsonOpt, console, err_console, print_json
from gpuledger.cli.files import check_target, write_output
from gpuledger.cli.since import parse_since  # bounded: cli/since.py
from gpuledger.errors import InvalidInputError
from gpuledger.records import DeviceWindow, RequestRecord, RunInfo, dump_summary
from gpuledger.records.validity import Verdict
from gpuledger.textsafe import csv_text
from gpuledger.urls import redact_url

if TYPE_CHECKING:
    from gpuledger.report.run_documents import QuantityDoc, WorkDoc
    from gpuledger.store import Store

NA = "—"
_LATENCIES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E"))


class ExportFormat(StrEnum):
    json = "json"
    csv = "csv"


# ---- helpers ------------------------------------------------------------------------------------


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _local(when: datetime | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    return NA if when is None else when.astimezone().strftime(fmt)


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _rate_text(q: QuantityDoc) -> str:
    return f"{q.value:,.1f} {q.unit}" if q.value is not None else f"{NA} ({q.reason})"


def _work_text(work: list[WorkDoc]) -> str:
    """The run's headline count in its unit: ``4 images``, ``12,800 output tokens``."""
    if not work:
        return NA
    head = work[0]
    return f"{_count(head.count):,} {head.plural}"


def _open(db: str | None) -> Store:
    from gpuledger.store import open_store

    return open_store(db)


# ---- runs ---------------------------------------------------------------------------------------


def runs(
    label: Annotated[str | None, typer.Option("--label", help="Only runs with this label.")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only runs created since DATE (2025-01-31[T14:00], local time) or an "
                     "age (30m, 12h, 7d, 2w)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most N runs (newest first).")
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List stored runs, newest first: id, when, label, engine, model, status, requests (steps), what each
    made in its own unit (output tokens, images, training tokens) and its rate."""
    from gpuledger.report.run_documents import RunEntry, runs_document

    cutoff = parse_since(since)
    with _open(db) as store:
        found = store.list_runs(label=label, since=cutoff, limit=limit)
    if json_out:
        print_json(runs_document(found, [(u.id, u.reason) for u in found.unreadable]))
        return
    if not found and not found.unreadable:
        console.print("no runs" + (" matching the filters" if label or since else "") + f" in {store.url}",
                      markup=False)
        return
    from gpuledger.report.layout import Grid, fit, print_grid

    colours = {"complete": "green", "running": "cyan", "incomplete": "yellow", "failed": "red"}
    title = f"runs in {store.url}"
    rows: list[tuple[str | Text, ...]] = []
    for r in found:
        entry = RunEntry.of(r)
        rows.append((
            r.id, _local(r.created_at), Text(r.label), Text(r.engine), Text(r.model),
            Text(r.status, style=colours.get(r.status, "")), f"{r.num_requests:,} {_items(r)}",
            _work_text(entry.work), _rate_text(entry.rate),
        ))
    for u in found.unreadable:  # a corrupt row (store.list_runs): its id and why, the others as usual
        rows.append((u.id, NA, Text(u.reason), "", "", Text("unreadable", style="red"), "", "", ""))
    columns = ("id", "when", "label", "engine", "model", "status", "items", "made", "rate")
    grid = Grid(title, columns, tuple(rows), compact=True)
    if fit(grid, console.width) is None:
        # A narrow terminal: each run on a few lines (id over label, model over engine, rate over unit).
        stacked = tuple(
            (
                Text("\n").join((Text(_plain(r[0])), _text(r[2]))), r[1],
                Text("\n").join((_text(r[4]), _text(r[3]))), r[5],
                Text("\n").join((_text(r[6]), _text(r[7]))), _plain(r[8]).replace(" ", "\n", 1),
            )
            for r in rows
        )
        grid = Grid(title, ("id / label", "when", "model / engine", "status", "items / made", "rate"),
                    stacked, compact=True)
    print_grid(console, grid)


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _text(cell: str | Text) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


# ---- show ---------------------------------------------------------------------------------------


def _fmt_ms(block: dict[str, Any], key: str) -> str:
    value = _finite(block.get(key))
    return NA if value is None else f"{value:,.1f}"


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, out)
    else:
        out.append((prefix, orjson.dumps(value).decode() if not isinstance(value, str) else value))


def _kv_table(rows: list[tuple[str, str]]) -> None:
    """Print ``key  value`` lines, the values wrapped at the console width (user data is never read as
    rich markup)."""
    from gpuledger.report.layout import print_table

    cells = [(Text(k, style="bold"), v) for k, v in rows]
    print_table(console, "", ("", ""), cells, compact=True, header=False)


def _header_rows(run: RunInfo, env_hash: str | None) -> list[tuple[str, str]]:
    rows = [
        ("id", run.id), ("label", run.label or NA), ("status", run.status),
        ("created", _local(run.created_at, "%Y-%m-%d %H:%M:%S %Z")),
        ("started", _local(run.started_at, "%Y-%m-%d %H:%M:%S %Z")),
        ("finished", _local(run.finished_at, "%Y-%m-%d %H:%M:%S %Z")),
        ("duration", NA if run.duration_s is None else f"{run.duration_s:,.1f} s"),
        ("engine", run.engine or NA), ("model", run.model or NA),
        ("server URL", redact_url(run.base_url) if run.base_url else NA),
        ("unit of work", run.unit), (f"{_items(run)} stored", f"{run.num_requests:,}"),
        ("environment hash", env_hash or NA),
    ]
    return rows


def _items(run: RunInfo) -> str:
    """What the run's items are (requests, steps): its kind's word, from the registry."""
    from gpuledger.records.kinds import items_of

    return items_of(run.summary.kind if run.summary is not None else None, run.config.kind)


def _summary_rows(run: RunInfo) -> list[tuple[str, str]]:
    """The run's rate and counts in its own units (every unit its summary counted, headline first), its
    window and its items ok / failed."""
    from gpuledger.report.run_documents import QuantityDoc, headline_rate, work_of

    summary = run.summary
    work = work_of(summary)
    head = work[0].plural if work else "output"
    rows: list[tuple[str, str]] = [(f"{head} rate", _rate_text(QuantityDoc.of(headline_rate(run))))]
    if summary is None:
        return rows
    origin = summary.origin()
    if origin is not None:
        rows.insert(0, ("origin", origin.label))
    for w in work[1:]:
        if w.per_s is not None:
            rows.append((f"{w.plural} rate", f"{w.per_s:,.2f} {summary.unit(w.unit).rate_text}"))
    if origin is None:
        rows.append(("measured window", f"{summary.window_s:,.2f} s"))
        err = summary.error_rate
        rows.append((f"{_items(run)} ok / failed", f"{summary.num_ok} / {summary.num_failed}"
                     + (f" (error rate {err:.1%})" if err is not None else "")))
        rows.extend((w.plural, f"{_count(w.count):,}") for w in work)
    return rows


def _latency_table(summary: dict[str, Any]) -> None:
    from gpuledger.report.layout import print_table

    blocks = [(label, summary[key]) for key, label in _LATENCIES if isinstance(summary.get(key), dict)]
    if not blocks:
        return
    stats = ("mean", "p50", "p90", "p95", "p99", "max")
    rows = []
    for label, block in blocks:
        n = block.get("n")
        rows.append((label, *(_fmt_ms(block, c) for c in stats), f"{n:,}" if isinstance(n, int) else NA))
    print_table(console, "latency (ms)", ("metric", *stats, "n"), rows)


def _scaled(value: Any, scale: float, fmt: str, unit: str) -> str:
    v = _finite(value)
    return NA if v is None else f"{v * scale:{fmt}} {unit}"


def _telemetry_table(summaries: list[DeviceWindow]) -> list[str]:
    """Print the telemetry table; answer the lines that explain it (printed under it)."""
    from gpuledger.report.layout import print_table

    notes: list[str] = []
    rows = []
    for d in summaries:
        energy = _scaled(d.energy_j, 1.0, ",.0f", "J")
        if d.energy_method:
            energy += f" ({d.energy_method})"
        elif d.energy_reason:
            notes.append(f"{d.device}: energy — {d.energy_reason}")
        if not d.valid and d.validity_reason:
            notes.append(f"{d.device}: not valid — {d.validity_reason}")
        notes.extend(f"{d.device}: {metric} unavailable — {why}" for metric, why in d.unavailable.items())
        rows.append((
            d.device, d.name or NA,
            _scaled(d.mean_util_ratio, 100.0, ".1f", "%"),
            _scaled(d.peak_util_ratio, 100.0, ".1f", "%"),
            _scaled(d.peak_memory_bytes, 1 / 2**30, ",.2f", "GiB"),
            _scaled(d.mean_power_w, 1.0, ",.1f", "W"),
            energy, "yes" if d.valid else "no",
        ))
    print_table(
        console,
        "telemetry (measured window)",
        ("device", "name", "mean util", "peak util", "peak memory", "mean power", "energy", "valid"),
        rows,
    )
    return notes


def _validity(info: RunInfo, verdict: Verdict | None) -> None:
    """Every check of the run's validity verdict (bench.validity), with its figure, rule and why."""
    from gpuledger.report.layout import paragraph, print_grid
    from gpuledger.report.terminal import grid_of
    from gpuledger.report.verdict import rule_lines, verdict_table

    if verdict is not None:
        console.rule("validity", align="left")
        print_grid(console, grid_of(verdict_table(verdict, f"run {info.id}", rules=False)))
        for line in rule_lines(verdict):
            paragraph(console, line, lead="  rule ", style="dim", indent=4)


def show(
    run: Annotated[str, typer.Argument(help="Run id or unambiguous prefix (4+ characters).")],
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one run: header, summary (its rate and counts in its own units), latency, environment,
    telemetry, saved cost evaluations."""
    with _open(db) as store:
        info = store.get_run(run)
        env_hash = store.env_hash(info.id)
        costs = store.list_cost_evaluations(info.id)
        # A run stored before the validity verdict existed is judged now, from its requests (not for --json:
        # that prints what is stored).
        old = not json_out and info.summary is not None and info.summary.verdict is None
        records = store.get_requests(info.id) if old else None
    if json_out:
        from gpuledger.report.show_document import ShowDocument

        print_json(ShowDocument.of(info, env_hash, costs).model_dump(mode="json"))
        return
    from gpuledger.bench.validity import run_verdict
    from gpuledger.report.headline import measured_answer, saved_price, stage_table
    from gpuledger.report.layout import paragraph, print_grid
    from gpuledger.report.terminal import grid_of, print_answer

    verdict = run_verdict(info, records)  # judged once: the answer's why lines and the validity table
    answer = measured_answer(
        info, f"run {info.id}" + (f" ({info.label})" if info.label.strip() else ""), records, verdict
    )
    if costs:
        last = costs[-1]
        price = saved_price(info, last.get("result"))
        if price:
            answer = answer.model_copy(
                update={"facts": (
                    *answer.facts[:-1],
                    ("last priced", f"{price} (profile {last['profile_name']}, {last['created_at']})"),
                )},
            )
    print_answer(answer, console)
    stages = stage_table(info)
    if stages is not None:
        print_grid(console, grid_of(stages))
    _validity(info, verdict)
    console.rule(f"run {info.id}", align="left")
    _kv_table(_header_rows(info, env_hash))
    console.rule("summary", align="left")
    _kv_table(_summary_rows(info))
    _latency_table(dump_summary(info.summary))
    if info.workload:
        console.rule("workload", align="left")
        rows: list[tuple[str, str]] = []
        _flatten("", info.workload, rows)
        _kv_table(rows)
    console.rule("environment", align="left")
    if not info.environment.empty:
        rows = []
        _flatten("", info.environment.to_dict(), rows)
        _kv_table(rows)
    else:
        console.print(f"{NA} (no environment fingerprint stored)", markup=False)
    if info.server.get("state"):
        from gpuledger.cli.bench_render import render_state

        console.rule("server state", align="left")
        render_state(info.server["state"])
    console.rule("telemetry", align="left")
    if info.telemetry_summary:
        for note in _telemetry_table(info.telemetry_summary):
            paragraph(console, note, lead="  ", indent=4)
    else:
        console.print(f"{NA} (no telemetry summary stored)", markup=False)
    if costs:
        console.rule("cost evaluations", align="left")
        for c in costs:
            price = saved_price(info, c.get("result")) or NA
            line = f"{c['created_at']}  profile {c['profile_name']}: {price}"
            paragraph(console, line, lead="  ", indent=4)


# ---- export -------------------------------------------------------------------------------------


def _count(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _run_columns(
    info: RunInfo, requests: list[RequestRecord]
) -> tuple[list[str], list[list[Any]], list[Any]]:
    """What the per-request columns do not say about the run, in its own units: for a kind of run with a
    summary of its own (training: training tokens, steps, samples; images: images, denoise steps,
    requests), a column per unit with each row's count (that row summarised alone, as the run's summary
    counts it); then the run's headline rate (``run_<rate key>``, the stored summary's, on every row)."""
    summary = info.summary
    if summary is None:
        return [], [[] for _ in requests], []
    head = summary.headline()
    run_rate = [f"run_{summary.rate_key(head)}"] if head else []
    own = info.config.summarize(requests[:1]) is not None if requests else False
    units = list(summary.work()) if own else []
    per_row: list[list[Any]] = []
    for r in requests:
        one = info.config.summarize([r]) if units else None
        work = one.work() if one is not None else {}
        per_row.append([_count(work[u].count) if u in work else 0 for u in units])
    names = [summary.unit(u).key for u in units]
    return [*names, *run_rate], per_row, [summary.rate(head)] if head else []


def _csv_bytes(info: RunInfo, requests: list[RequestRecord]) -> bytes:
    from gpuledger.store.document import CSV_COLUMNS, csv_rows

    extra, per_row, run_values = _run_columns(info, requests)
    rows = ((*row, *counts, *run_values) for row, counts in zip(csv_rows(requests), per_row, strict=True))
    return csv_text([(*CSV_COLUMNS, *extra), *rows]).encode()  # no cell a formula (textsafe.csv_text)


def export(
    run: Annotated[str, typer.Argument(help="Run id or unambiguous prefix.")],
    fmt: Annotated[
        ExportFormat,
        typer.Option("--format", "-f", case_sensitive=False,
                     help="json: the whole run (gpuledger import reads it); csv: one row per request "
                          "(a training or image run's counts in its own units; the run's headline rate)."),
    ] = ExportFormat.json,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to FILE instead of stdout.")
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Export a run: JSON document (to import elsewhere) or per-request CSV."""
    if output is not None:
        check_target(output)  # refused before the run is read
    with _open(db) as store, err_console.status("reading the run…"):
        if fmt is ExportFormat.json:
            doc = store.export_run(run)
            run_id, n = doc["run"]["id"], len(doc["requests"])
            data = orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)
        else:
            info = store.get_run(run)
            reqs = store.get_requests(info.id)
            run_id, n = info.id, len(reqs)
            data = _csv_bytes(info, reqs)
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    write_output(output, data)
    if json_out:
        print_json({"run": run_id, "format": fmt.value, "path": str(output), "requests": n,
                    "size_bytes": len(data)})
    else:
        console.print(f"exported run {run_id} ({n:,} requests, {fmt.value}) to {output}", markup=False)


# ---- delete / import ----------------------------------------------------------------------------


def delete(
    run: Annotated[str, typer.Argument(help="Run id or unambiguous prefix.")],
    force: Annotated[bool, typer.Option("--force", help="Delete a run that reads as running (its writer "
                                                        "alive, or seen alive from another host).")] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Delete a run with its requests, telemetry and cost evaluations."""
    with _open(db) as store:
        info = store.get_run(run)
        store.delete_run(info.id, force=force)  # a run being written is refused (store.liveness)
    if json_out:
        print_json({"deleted": info.id, "requests": info.num_requests})
    else:
        console.print(f"deleted run {info.id} ({info.num_requests:,} requests)", markup=False)


def _read_document(file: str) -> Any:
    data = read_file_arg(file, MAX_DOCUMENT_BYTES)  # '-': stdin; /dev/zero, a FIFO: bounded too
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"{file} is not valid JSON: {exc}") from None


def import_(
    file: Annotated[str, typer.Argument(help="A file written by `gpuledger export RUN` ('-' = stdin).")],
    new_id: Annotated[
        bool, typer.Option("--new-id", help="Give the run a fresh id (when its id is already in this store).")
    ] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Add a run exported elsewhere to this store (all or nothing)."""
    doc = _read_document(file)
    with _open(db) as store, err_console.status("importing…"):
        run_id = store.import_run(doc, new_id=new_id)
    n_req = len(doc.get("requests", [])) if isinstance(doc, dict) else 0
    n_tel = len(doc.get("telemetry", [])) if isinstance(doc, dict) else 0
    if json_out:
        print_json({"imported": run_id, "requests": n_req, "telemetry_samples": n_tel})
    else:
        console.print(f"imported run {run_id} ({n_req:,} requests, {n_tel:,} telemetry samples) from {file}",
                      markup=False)


def register(app: typer.Typer) -> None:
    """Add ``runs``, ``show``, ``export``, ``delete`` and ``import``."""
    app.command("runs")(runs)
    app.command("show")(show)
    app.command("export")(export)
    app.command("delete")(delete)
    app.command("import")(import_)
