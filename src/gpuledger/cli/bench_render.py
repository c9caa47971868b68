"""The human summary of a bench run on the terminal (``gpuledger bench``): the answer first — the same block
``gpuledger show`` opens with (``report.headline.measured_answer``, printed by
``report.terminal.print_answer``) for every kind of run — then each stage of a sweep, the throughput and
latency tables, and what the server and the telemetry said; an image or training run has its own figures
after the answer (``bench_image``, ``bench_train``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuledger.cli.common import console
from gpuledger.records import dump_summary

if TYPE_CHECKING:
    from gpuledger.records import RunInfo
    from gpuledger.report.layout import Notes


def _num(v: Any, fmt: str = ".1f", unit: str = "") -> str:
    if v is None:
        return "n/a"
    return f"{v:{fmt}}{unit}"


def _lat_cells(name: str, block: dict[str, Any] | None) -> tuple[str, ...]:
    b = block or {}
    if not b.get("n"):
        return (name, "n/a", "", "", "", "", "0")
    return (
        name,
        _num(b["mean"], ".2f"),
        _num(b["p50"], ".2f"),
        _num(b["p90"], ".2f"),
        _num(b["p99"], ".2f"),
        _num(b["std"], ".2f"),
        f"{b['n']:,}",
    )


def render_run(info: RunInfo) -> None:
    """The human summary of a run on stdout: the answer first (the headline rate — for a sweep, of the
    stage ``gpuledger cost`` prices, with the rule that picks it — and the key figures), each stage of a
    sweep, then the tables, fitted to the terminal's width; long notes once, at the end."""
    from rich.text import Text

    from gpuledger.cli.bench_workloads import latency_rows, print_extras, throughput_rows
    from gpuledger.report.headline import measured_answer, stage_table
    from gpuledger.report.layout import Notes, paragraph, print_grid, print_table
    from gpuledger.report.terminal import grid_of, print_answer

    notes = Notes()
    print_answer(measured_answer(info, f"run {info.id}"), console, notes)
    own = _own_renderer(info.summary.kind if info.summary is not None else "")
    if own is not None:  # a kind of run with its own figures (image generation, training)
        own(info, notes)
        return

    s = dump_summary(info.summary)
    srv = info.server
    who = srv.get("kind", "unknown") + (f" {srv['version']}" if srv.get("version") else "")
    paragraph(
        console,
        f"  {info.status}  engine={info.engine}  server={who}  model={info.model}"
        + (f"  label={info.label}" if info.label else ""),
        style="dim",
        indent=4,
    )
    like = info.config.like
    if like is not None:
        changed = ", ".join("--" + n.replace("_", "-") for n in like.overridden)
        paragraph(
            console,
            f"workload of run {like.run_id}" + (f" (overridden here: {changed})" if changed else ""),
            indent=2,
        )
    stages = stage_table(info)
    if stages is not None:
        print_grid(console, grid_of(stages))
    sweep = ", every stage together" if stages is not None else ""
    rows: list[tuple[str, str]] = [
        (
            "requests ok / failed",
            f"{s.get('num_ok', 0)} / {s.get('num_failed', 0)}"
            + (f"  (error rate {s['error_rate']:.1%})" if s.get("error_rate") else ""),
        ),
        ("window", _num(s.get("window_s"), ".2f", " s")),
        ("output tokens", f"{s.get('output_tokens_total', 0):,}"),
        (f"output throughput{sweep}", _num(s.get("output_tokens_per_s"), ",.1f", " tok/s")),
        ("total throughput (in+out)", _num(s.get("total_tokens_per_s"), ",.1f", " tok/s")),
        ("requests/s", _num(s.get("requests_per_s"), ".3f", " req/s")),
    ]
    if "goodput_requests_per_s" in s:
        slo = s.get("slo", {})
        limits = ", ".join(f"{k}≤{v:g}" for k, v in slo.items() if k.endswith("_ms"))
        rows.append((
            f"goodput ({limits})",
            _num(s["goodput_requests_per_s"], ".3f", " req/s") + f"  ({slo.get('met', 0)} met)",
        ))
    rows += throughput_rows(s)
    sources = ", ".join(f"{k}: {v}" for k, v in s.get("token_source", {}).items())
    rows.append(("token counts from", sources or "n/a"))
    print_table(console, f"Throughput (measured window{sweep})", ("metric", "value"), rows, header=False)
    print_table(
        console,
        f"Latency (ms{sweep}; std: the population standard deviation, ÷ n)",
        ("metric", "mean", "p50", "p90", "p99", "std", "n"),
        [
            _lat_cells("TTFT", s.get("ttft_ms")),
            _lat_cells("TPOT", s.get("tpot_ms")),
            _lat_cells("ITL (per token)", s.get("itl_ms")),
            _lat_cells("E2E", s.get("e2e_ms")),
            *latency_rows(s, _lat_cells),
        ],
    )
    print_extras(console, s, info.workload, info.client)
    mm = s.get("output_len_mismatch") or {}
    if mm.get("count"):
        paragraph(
            console,
            f"{mm['count']} of {mm['checked']} requests did not return the requested length (requested "
            f"{mm['requested_tokens_total']} tokens, received {mm['received_tokens_total']})",
            lead=Text("output length mismatch: ", style="yellow"),
            indent=2,
        )
    for kind, n in (s.get("errors") or {}).items():
        paragraph(console, f"{n} × {kind}", lead=Text("failed: ", style="red"), indent=2)
    for ex in (s.get("error_examples") or [])[:3]:
        paragraph(console, str(ex["error"]), lead=f"  e.g. request {ex['index']}: ", indent=4)
    st = s.get("server_timings")
    if st:
        paragraph(
            console,
            f"server's own timings ({', '.join(st.get('servers', []))}, {st['n']} requests): "
            f"time to first token {_num(st.get('server_time_to_first_token_ms_mean'), '.1f', ' ms')} "
            f"(client TTFT {_num(st.get('client_ttft_ms_mean'), '.1f', ' ms')}), "
            f"decode {_num(st.get('server_decode_tokens_per_s_mean'), '.1f', ' tok/s')} "
            f"(client {_num(st.get('client_decode_tokens_per_s_mean'), '.1f', ' tok/s')})",
            indent=2,
        )
    for dev in info.telemetry_summary:
        energy = (
            f"{dev.energy_j:.1f} J ({dev.energy_method})"
            if dev.energy_j is not None
            else f"energy n/a — {dev.energy_reason or 'not measured'}"
        )
        power = f"{dev.mean_power_w:.1f} W mean" if dev.mean_power_w is not None else "power n/a"
        util = f"util {dev.mean_util_ratio:.0%} mean" if dev.mean_util_ratio is not None else "util n/a"
        paragraph(
            console,
            notes.shorten(f"{dev.device} ({dev.name}): {util}, {power}, {energy}"),
            lead="telemetry ",
            indent=2,
        )
    render_state(srv.get("state"))
    cl = info.client
    if cl:
        paragraph(
            console,
            f"{cl.get('cpu_util_ratio', 0):.0%} of one core "
            f"({cl.get('cpu_user_s', 0) + cl.get('cpu_system_s', 0):.2f} s CPU over "
            f"{cl.get('wall_s', 0):.2f} s)",
            lead="client CPU: ",
            indent=2,
        )
    for w in [*srv.get("warnings", []), *cl.get("warnings", [])]:
        paragraph(console, notes.shorten(str(w)), lead=Text("warning: ", style="yellow"), indent=2)
    if s.get("aborted"):
        paragraph(console, str(s["aborted"]), lead=Text("stopped: ", style="red"), indent=2)
    if s.get("interrupted"):
        it = s["interrupted"]
        paragraph(
            console,
            f"{it['finished_requests']} finished requests kept, {it['cancelled_in_flight']} in flight were "
            "cancelled",
            lead=Text(f"interrupted by {it['signal']}: ", style="yellow"),
            indent=2,
        )
    notes.print(console)
    console.print(Text("run id: ") + Text(info.id, style="bold"))


def _own_renderer(kind: str) -> Callable[[RunInfo, Notes], None] | None:
    """The figures of a kind of run that has its own, printed after the answer (its task's module), else
    None. The kinds' report facets hold their report sections; these are the terminal's tables."""
    if kind == "image_generation":
        from gpuledger.cli.bench_image import render_image_run

        return render_image_run
    if kind == "training":
        from gpuledger.cli.bench_train import render_train_run

        return render_train_run
    return None


def render_state(state: dict[str, Any] | None) -> None:
    """The server's own view of the run (``server.state``), and what it says about the numbers."""
    from rich.text import Text

    from gpuledger.report.layout import paragraph

    if not state:
        return
    if "reason" in state:
        paragraph(console, str(state["reason"]), lead="server state: ", indent=2)
        return

    def stat(block: Any, fmt: str) -> str:
        if not block:
            return "n/a"
        return f"{block['mean']:{fmt}} mean / {block['max']:{fmt}} max"

    def num(value: Any, fmt: str, unit: str = "") -> str:
        return "n/a" if value is None else f"{value:{fmt}}{unit}"

    queue = num(state.get("queue_time_ms_mean"), ".1f", " ms mean")
    if state.get("queued_requests") is not None:
        queue += f" over {state['queued_requests']:g} requests"
    paragraph(
        console,
        f"server state ({state.get('source')}): queue time {queue}, "
        f"preemptions {num(state.get('preemptions'), 'g')}",
        indent=2,
    )
    if state.get("interval_s"):
        kv = state.get("kv_cache_usage_ratio")
        kv_text = f"{kv['mean']:.0%} mean / {kv['max']:.0%} max" if kv else "n/a (not exported)"
        paragraph(
            console,
            f"during the window (every {state['interval_s']:g} s, {state.get('scrapes', 0)} samples): "
            f"running {stat(state.get('running'), '.1f')}, waiting {stat(state.get('waiting'), '.1f')}, "
            f"KV cache {kv_text}",
            lead="  ",
            indent=4,
        )
    elif state.get("gauges_reason"):
        paragraph(console, str(state["gauges_reason"]), lead="  running / waiting / KV cache: ", indent=4)
    for note in state.get("notes", []):
        paragraph(console, str(note), lead=Text("  why: ", style="yellow"), indent=4)
