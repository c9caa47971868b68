"""The telemetry section: per device utilisation, power, memory and energy over the measured window (energy
per unit of work in the run's own headline unit: J per output token, J per image, J per training token),
and power and utilisation over time."""

from __future__ import annotations

from collections import defaultdict

from gpuledger.records.units import UnitInfo
from gpuledger.report import fmt
from gpuledger.report.model import Figure, Section, Series
from gpuledger.report.rundata import RunData
from gpuledger.report.sections.base import aligned, line_mode, tabulate
from gpuledger.report.series import bucket_means

# (figure key, title, y axis, scale, stored metrics drawn): GPUs report util_ratio, the CPU cpu_util_ratio.
_TS_FIGURES: tuple[tuple[str, str, str, float, tuple[str, ...]], ...] = (
    ("power", "Power over time", "power (W)", 1.0, ("power_w",)),
    ("utilisation", "Utilisation over time", "utilisation (%)", 100.0, ("util_ratio", "cpu_util_ratio")),
)


def _headline(r: RunData) -> tuple[UnitInfo, float] | None:
    """The run's headline unit and how many of it the run did over its window (None: no work)."""
    s = r.info.summary
    head = s.headline() if s is not None else ""
    work = s.work().get(head) if s is not None and head else None
    if s is None or work is None:
        return None
    return s.unit(head), work.count


def _per_unit_heading(runs: list[RunData]) -> tuple[str, str]:
    """The energy-per-unit column's heading and its line in the provenance: of the runs' one headline unit
    (``J per output token``), or of each run's own (``J per unit of work``) when they differ."""
    units = {h[0].singular: h[0] for r in runs if (h := _headline(r)) is not None}
    if len(units) == 1:
        (info,) = units.values()
        return f"J per {info.singular}", f"J per {info.singular} = energy ÷ {info.plural}"
    return "J per unit of work", (
        "J per unit of work = energy ÷ the units of the run's headline (named in the cell)"
    )


def telemetry_section(runs: list[RunData]) -> Section:
    rows = []
    missing = []
    per_heading, per_note = _per_unit_heading(runs)
    one_unit = per_heading != "J per unit of work"
    for r in runs:
        devices = r.info.telemetry_summary
        if not devices:
            missing.append(
                f"{r.ref.name}: no telemetry — the run was benched with --no-telemetry, or no source "
                "could be read (gpuledger sample lists each source and why)"
            )
            continue
        head = _headline(r)
        for d in devices:
            energy = d.energy_j
            jpu = energy / head[1] if energy is not None and head is not None and head[1] else None
            per_unit = fmt.num(jpu)
            if jpu is not None and head is not None and not one_unit:
                per_unit += f" per {head[0].singular}"
            subject = f"{r.ref.name} {fmt.text(d.device)} ({fmt.text(d.name)})"
            if d.mean_power_w is None:
                why = d.unavailable.get("power_w") or d.energy_reason or "no power readings"
                missing.append(f"{subject} power and energy: {fmt.text(why)}")
            elif energy is None:
                missing.append(f"{subject} energy: {fmt.text(d.energy_reason or 'no energy figure')}")
            for metric, reason in d.unavailable.items():
                if metric not in ("power_w", "energy_j"):
                    missing.append(f"{subject} {metric}: {fmt.text(reason)}")
            method_text = fmt.text(d.energy_method) if d.energy_method else fmt.MISSING
            if d.energy_method and d.energy_reason:
                method_text += f" ({fmt.text(d.energy_reason)})"
            validity = "valid" if d.valid is not False else f"invalid: {fmt.text(d.validity_reason)}"
            mem_total = d.memory_total_bytes
            memory = fmt.gib(d.peak_memory_bytes) + (f" / {fmt.gib(mem_total)}" if mem_total else "")
            rows.append(
                {
                    "run": r.ref.name,
                    "device": fmt.text(d.device),
                    "name": fmt.text(d.name),
                    "mean util (%)": fmt.pct(d.mean_util_ratio),
                    "peak util (%)": fmt.pct(d.peak_util_ratio),
                    "mean power (W)": fmt.num(d.mean_power_w),
                    "peak power (W)": fmt.num(d.peak_power_w),
                    "energy (J)": fmt.num(energy),
                    "energy method": method_text,
                    per_heading: per_unit,
                    "peak / total memory (GiB)": memory,
                    "samples": fmt.num(d.samples),
                    "interval (s)": fmt.num(d.interval_s),
                    "sources": fmt.text(d.sources),
                    "validity": validity,
                }
            )
    figures = []
    for key, title, y_title, scale, metrics in _TS_FIGURES:
        series = []
        buckets = 1
        for r in runs:
            grouped: dict[str, list[tuple[float, float]]] = defaultdict(list)
            for sample in r.telemetry:
                if sample.metric in metrics:
                    grouped[sample.device].append((sample.t, sample.value * scale))
            for device, pts in sorted(grouped.items()):
                pts.sort()
                t, v, size = bucket_means([p[0] for p in pts], [p[1] for p in pts])
                buckets = max(buckets, size)
                series.append(
                    Series(
                        name=f"{r.ref.name} · {device}" if len(runs) > 1 else device,
                        x=tuple(t),
                        y=tuple(v),
                        mode=line_mode(len(t)),
                    )
                )
        if not series:
            missing.append(f"{title}: no {' or '.join(metrics)} samples stored for any run in this report")
            continue
        how = (
            "raw samples"
            if buckets == 1
            else f"means of {buckets} consecutive samples (to keep the file small)"
        )
        figures.append(
            Figure(
                key=f"ts_{key}",
                title=title,
                kind="line",
                x_title="time since run start (s)",
                y_title=y_title,
                series=tuple(series),
                provenance=f"Telemetry samples from the store (source per device in the table), {how}.",
            )
        )
    return Section(
        key="telemetry",
        title="Power and utilisation",
        intro="What the hardware did during the measured window: utilisation, power, memory, energy.",
        tables=tabulate(
            "telemetry",
            "Per device over the measured window",
            aligned(rows),
            "RunInfo.telemetry_summary from the telemetry sampler; energy = validated hardware counter, "
            f"else integral of sampled power; {per_note}.",
        ),
        figures=tuple(figures),
        not_measured=tuple(missing),
    )
