"""Layer 4: the runtime and framework (the PyTorch build against the GPU present, the child-process probe,
and with ``--deep`` the achieved matmul TFLOPS and copy GB/s against the catalog's peaks)."""

from __future__ import annotations

from gpuledger.catalog import GpuSpec, peak_bandwidth, peak_compute
from gpuledger.catalog.versions import version_tuple
from gpuledger.doctor.context import GIB, Context, gib_text, rocm_version
from gpuledger.doctor.findings import Finding, make
from gpuledger.facts.model import TorchProbe
from gpuledger.facts.naming import catalog_spec_for_name, catalog_spec_for_pci


def check_runtime(ctx: Context) -> list[Finding]:
    f, t, v = ctx.facts, ctx.facts.frameworks.torch, ctx.values
    out: list[Finding] = []
    nv_ok, amd_ok = ctx.ok("nvidia"), ctx.ok("amd")
    if not (nv_ok or amd_ok):
        if not ctx.gpu_present and t.probe is not None and t.probe.deep:
            return _deep_findings(ctx)  # --deep on the CPU path: the CPU's own matmul and copy
        return out
    if not t.installed:
        return [make("torch.not_installed", [t.error or "no torch package on the Python path"], values=v)]
    build = t.build
    probe = t.probe
    head = (
        f"PyTorch {t.version or '?'}: {build} build "
        f"(torch.version.cuda={t.cuda}, torch.version.hip={t.hip}; {t.source})"
    )
    if build == "cpu":
        vendor_line = (
            ("NVIDIA GPU ready (driver " + (f.nvidia.driver_version or "?") + ")")
            if nv_ok
            else ("AMD GPU ready (ROCm " + (rocm_version(f) or "?") + ")")
        )
        return [make("torch.cpu_build_on_gpu_host", [head, vendor_line, *_probe_lines(probe)], values=v)]
    if build == "cuda" and amd_ok and not ctx.nvidia_present:
        return [make("torch.cuda_build_on_amd_host", [head, *_probe_lines(probe)], values=v)]
    if build == "rocm" and nv_ok and not ctx.amd_present:
        return [make("torch.rocm_build_on_nvidia_host", [head, *_probe_lines(probe)], values=v)]
    available = probe.is_available if probe is not None and probe.ok else None
    if build == "cuda" and nv_ok and t.cuda:
        driver_cuda = f.nvidia.cuda_version or f.nvidia.nvml.cuda_driver_version
        if driver_cuda and version_tuple(t.cuda)[:2] > version_tuple(driver_cuda)[:2]:
            major_newer = version_tuple(t.cuda)[:1] > version_tuple(driver_cuda)[:1]
            if major_newer or available is False:
                out.append(
                    make(
                        "torch.cuda_newer_than_driver",
                        [head, f"driver supports CUDA {driver_cuda} (nvidia-smi)", *_probe_lines(probe)],
                        values=v,
                    )
                )
                return out
    if probe is None:
        return out
    if probe.timed_out:
        return [make("torch.probe_timeout", [head, *_probe_lines(probe)])]
    if not probe.ok:
        return [make("torch.probe_failed", [head, *_probe_lines(probe)])]
    if not probe.is_available:
        out.append(make("torch.gpu_not_available", [head, *_probe_lines(probe)], values=v))
        return out
    out.append(make("torch.ok", [head, *_probe_lines(probe)]))
    if probe.deep:
        out += _deep_findings(ctx)
    return out


def _probe_lines(probe: TorchProbe | None) -> list[str]:
    if probe is None:
        return []
    if not probe.ran:
        return [f"probe: {probe.error}"] if probe.error else []
    lines = [f"child-process probe ({probe.duration_s} s): torch.cuda.is_available() = {probe.is_available}"]
    if probe.error:
        lines.append(f"probe error: {probe.error}")
    for dev in probe.devices:
        lines.append(
            f"device {dev.index}: {dev.name} ({gib_text(dev.total_memory_bytes)}, "
            f"capability {dev.capability})"
        )
    lines += [f"stderr: {line}" for line in probe.stderr[-3:]]
    return lines


def _spec_by_index(ctx: Context, device: str) -> GpuSpec | None:
    """The catalog entry of ``cuda:N`` through the PCI id of the N-th GPU the tools listed."""
    index = int(device.split(":")[-1]) if device.split(":")[-1].isdigit() else None
    gpus = [g for g in ctx.facts.gpus if g.vendor in ("nvidia", "amd")]
    if index is None or index >= len(gpus) or gpus[index].pci_bus_id is None:
        return None
    pci = next((d for d in ctx.facts.pci.gpus if d.address == gpus[index].pci_bus_id), None)
    return None if pci is None else catalog_spec_for_pci(pci.vendor_id, pci.device_id)


def _deep_findings(ctx: Context) -> list[Finding]:
    probe = ctx.facts.frameworks.torch.probe
    out: list[Finding] = []
    if probe is None:
        return out
    for r in probe.deep:
        if r.error:
            out.append(make("torch.deep_failed", [f"{r.device} ({r.device_name}): {r.error}"]))
            continue
        spec = catalog_spec_for_name(r.device_name) if r.device != "cpu" else None
        if spec is None and r.device != "cpu":
            spec = _spec_by_index(ctx, r.device)
        lines = []
        if r.matmul_tflops is None:
            tflops = "n/a"
        elif r.matmul_tflops >= 1:
            tflops = f"{r.matmul_tflops:.1f} TFLOPS"
        else:
            tflops = f"{r.matmul_tflops * 1000:.1f} GFLOPS"
        gbs = f"{r.copy_gb_s:.1f} GB/s" if r.copy_gb_s is not None else "n/a"
        label = r.device if r.device_name in (None, r.device) else f"{r.device} {r.device_name}"
        lines.append(
            f"{label}: matmul {r.dtype} {r.matmul_n}x{r.matmul_n} x{r.matmul_iterations}: "
            f"{tflops} achieved (2*n^3 FLOP per matmul / wall time after 2 warm-up runs)"
        )
        lines.append(
            f"{r.device}: device copy of {r.copy_bytes / GIB:.2f} GiB x{r.copy_iterations}: {gbs} "
            "(bytes read + written / wall time)"
        )
        if spec is None:
            lines.append(
                "cpu: no catalog peak for CPUs: productive compute % not available"
                if r.device == "cpu"
                else f"no catalog entry for {r.device_name!r}: productive compute % not available"
            )
        else:
            peak, note = peak_compute(spec, r.dtype)
            bw = peak_bandwidth(spec)
            if peak.value and r.matmul_tflops is not None:
                lines.append(
                    f"productive compute: {100 * r.matmul_tflops / peak.value:.0f}% of {peak.value:g} TFLOPS "
                    f"({note}; catalog: {peak.provenance()})"
                )
            if bw.value and r.copy_gb_s is not None:
                lines.append(
                    f"memory bandwidth: {100 * r.copy_gb_s / (bw.value * 1000):.0f}% "
                    f"of {bw.value * 1000:g} GB/s "
                    f"(catalog: {bw.provenance()})"
                )
        out.append(make("torch.deep_benchmark", lines))
    return out
