"""The human summary of a bench run on the terminal (``gpuledger bench``): the answer first — the same block
``gpuledger show`` opens with (``report.headline.measured_answer``, printed by
``report.terminal.print_answer``) for every kind of run — then each stage of a sweep, the throughput and
latency tables, and what the server and the telemetry said; an image or training run has its own figures
after the answer (``bench_image``, ``bench_train``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from gpuledger.cli.common import console
from gpuledger.records.kinds import kind_named

if TYPE_CHECKING:
    from gpuledger.bench.rundocs import ClientView, WorkloadView
    from gpuledger.bench.server_state import ServerState, StateStats, StateUnavailable
    from gpuledger.kinds.text.summary import TextGenerationSummary
    from gpuledger.records import RunInfo
    from gpuledger.records.itemstats import Latency
    from gpuledger.report.layout import Notes


def _num(v: float | None, fmt: str = ".1f", unit: str = "") -> str:
    if v is None:
        return "n/a"
    return f"{v:{fmt}}{unit}"


def _lat_cells(name: str, b: Latency) -> tuple[str, ...]:
    if not b.n:
        return (name, "n/a", "", "", "", "", "0")
    return (
        name,
        _num(b.mean, ".2f"),
        _num(b.p50, ".2f"),
        _num(b.p90, ".2f"),
        _num(b.p99, ".2f"),
        _num(b.std, ".2f"),
        f"{b.n:,}",
    )


def render_run(info: RunInfo) -> None:
    """The human summary of a run on stdout: the answer first (the headline rate — for a sweep, of the
    stage ``gpuledger cost`` prices, with the rule that picks it — and the key figures), each stage of a
    sweep, then the tables, fitted to the terminal's width; long notes once, at the end."""
    from rich.text import Text

    from gpuledger.report.headline import measured_answer
    from gpuledger.report.layout import Notes, paragraph
    from gpuledger.report.terminal import print_answer

    notes = Notes()
    print_answer(measured_answer(info, f"run {info.id}"), console, notes)
    own = _own_renderer(info.summary.kind if info.summary is not None else "")
    if own is not None:  # a kind of run with its own figures (image generation, training)
        own(info, notes)
        return

    from gpuledger.bench.rundocs import ClientView, ServerView, WorkloadView
    summary = info.summary
    # the text tables draw a measured text-generation summary (the registry's first summary kind of the
    # text task); anything else — no summary, a published figure — has none to draw
    text = kind_named("text")
    s = cast("TextGenerationSummary", summary) if (
        summary is not None and summary.kind == text.summary_kinds[0]
    ) else None
    server = ServerView.of(info.server)
    client = ClientView.of(info.client) if info.client else None
    paragraph(
        console,
        f"  {info.status}  engine={info.engine}  server={server.who()}  model={info.model}"
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
    if s is not None:
        _text_tables(info, s, client, WorkloadView.of(info.workload))
    if summary is not None:
        for kind, n in (summary.errors or {}).items():
            paragraph(console, f"{n} × {kind}", lead=Text("failed: ", style="red"), indent=2)
        for ex in (summary.error_examples or [])[:3]:
            paragraph(console, str(ex.error), lead=f"  e.g. request {ex.index}: ", indent=4)
    st = s.server_timings if s is not None else None
    if st is not None:
        paragraph(
            console,
            f"server's own timings ({', '.join(st.servers)}, {st.n} requests): "
            f"time to first token {_num(st.server_time_to_first_token_ms_mean, '.1f', ' ms')} "
            f"(client TTFT {_num(st.client_ttft_ms_mean, '.1f', ' ms')}), "
            f"decode {_num(st.server_decode_tokens_per_s_mean, '.1f', ' tok/s')} "
            f"(client {_num(st.client_decode_tokens_per_s_mean, '.1f', ' tok/s')})",
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
    print_state(server.state)
    if client is not None:
        user, system, wall = client.cpu_user_s, client.cpu_system_s, client.wall_s
        seconds = (
            f"{user + system:.2f} s CPU over {wall:.2f} s"
            if user is not None and system is not None and wall is not None
            else "its CPU seconds not recorded"
        )
        paragraph(
            console,
            f"{_num(client.cpu_util_ratio, '.0%')} of one core ({seconds})",
            lead="client CPU: ",
            indent=2,
        )
    for w in [*server.warnings, *(client.warnings if client is not None else [])]:
        paragraph(console, notes.shorten(w), lead=Text("warning: ", style="yellow"), indent=2)
    if summary is not None and summary.aborted:
        paragraph(console, summary.aborted, lead=Text("stopped: ", style="red"), indent=2)
    it = summary.interrupted if summary is not None else None
    if it is not None:
        paragraph(
            console,
            f"{it.finished_requests} finished requests kept, {it.cancelled_in_flight} in flight were "
            "cancelled",
            lead=Text(f"interrupted by {it.signal}: ", style="yellow"),
            indent=2,
        )
    notes.print(console)
    console.print(Text("run id: ") + Text(info.id, style="bold"))


def _text_tables(
    info: RunInfo, s: TextGenerationSummary, client: ClientView | None, workload: WorkloadView
) -> None:
    """A text-generation run's stages, throughput and latency tables, its workload's own lines and the
    requests that did not get the length they asked for."""
    from rich.text import Text

    from gpuledger.cli.bench_workloads import latency_rows, print_extras, throughput_rows
    from gpuledger.report.headline import stage_table
    from gpuledger.report.layout import paragraph, print_grid, print_table
    from gpuledger.report.terminal import grid_of

    stages = stage_table(info)
    if stages is not None:
        print_grid(console, grid_of(stages))
    sweep = ", every stage together" if stages is not None else ""
    rows: list[tuple[str, str]] = [
        (
            "requests ok / failed",
            f"{s.num_ok} / {s.num_failed}" + (f"  (error rate {s.error_rate:.1%})" if s.error_rate else ""),
        ),
        ("window", _num(s.window_s, ".2f", " s")),
        ("output tokens", f"{s.output_tokens_total:,}"),
        (f"output throughput{sweep}", _num(s.output_tokens_per_s, ",.1f", " tok/s")),
        ("total throughput (in+out)", _num(s.total_tokens_per_s, ",.1f", " tok/s")),
        ("requests/s", _num(s.requests_per_s, ".3f", " req/s")),
    ]
    if s.slo is not None:
        limits = ", ".join(f"{k}≤{v:g}" for k, v in s.slo.limits().items())
        rows.append((
            f"goodput ({limits})",
            _num(s.goodput_requests_per_s, ".3f", " req/s") + f"  ({s.slo.met} met)",
        ))
    rows += throughput_rows(s)
    sources = ", ".join(f"{k}: {v}" for k, v in s.token_source.items())
    rows.append(("token counts from", sources or "n/a"))
    print_table(console, f"Throughput (measured window{sweep})", ("metric", "value"), rows, header=False)
    print_table(
        console,
        f"Latency (ms{sweep}; std: the population standard deviation, ÷ n)",
        ("metric", "mean", "p50", "p90", "p99", "std", "n"),
        [
            _lat_cells("TTFT", s.ttft_ms),
            _lat_cells("TPOT", s.tpot_ms),
            _lat_cells("ITL (per token)", s.itl_ms),
            _lat_cells("E2E", s.e2e_ms),
            *latency_rows(s, _lat_cells),
        ],
    )
    print_extras(console, s, info.config.stages(), workload, client)
    mm = s.output_len_mismatch
    if mm.count:
        paragraph(
            console,
            f"{mm.count} of {mm.checked} requests did not return the requested length (requested "
            f"{mm.requested_tokens_total} tokens, received {mm.received_tokens_total})",
            lead=Text("output length mismatch: ", style="yellow"),
            indent=2,
        )


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


def render_state(stored: Mapping[str, Any] | None) -> None:
    """The server's own view of the run from its stored ``server.state`` document (``gpuledger show``),
    read as ``bench.server_state`` types it."""
    from gpuledger.bench.server_state import load_state

    print_state(load_state(stored))


def print_state(state: ServerState | StateUnavailable | None) -> None:
    """The server's own view of the run (``server.state``), and what it says about the numbers."""
    from rich.text import Text

    from gpuledger.bench.server_state import StateUnavailable
    from gpuledger.report.layout import paragraph

    if state is None:
        return
    if isinstance(state, StateUnavailable):
        paragraph(console, state.reason, lead="server state: ", indent=2)
        return

    def stat(block: StateStats | None, fmt: str) -> str:
        if block is None:
            return "n/a"
        return f"{block.mean:{fmt}} mean / {block.max:{fmt}} max"

    queue = _num(state.queue_time_ms_mean, ".1f", " ms mean")
    if state.queued_requests is not None:
        queue += f" over {state.queued_requests:g} requests"
    paragraph(
        console,
        f"server state ({state.source}): queue time {queue}, preemptions {_num(state.preemptions, 'g')}",
        indent=2,
    )
    if state.interval_s:
        kv = state.kv_cache_usage_ratio
        kv_text = f"{kv.mean:.0%} mean / {kv.max:.0%} max" if kv is not None else "n/a (not exported)"
        paragraph(
            console,
            f"during the window (every {state.interval_s:g} s, {state.scrapes} samples): "
            f"running {stat(state.running, '.1f')}, waiting {stat(state.waiting, '.1f')}, "
            f"KV cache {kv_text}",
            lead="  ",
            indent=4,
        )
    elif state.gauges_reason:
        paragraph(console, state.gauges_reason, lead="  running / waiting / KV cache: ", indent=4)
    for note in state.notes:
        paragraph(console, note, lead=Text("  why: ", style="yellow"), indent=4)
