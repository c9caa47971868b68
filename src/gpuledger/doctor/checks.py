"""Checks: pure functions from :class:`Facts` to findings, one per layer, bottom up.

A layer is only judged for a vendor when the layers below hold for it: when the kernel driver layer
has an error for NVIDIA, the NVIDIA management/runtime/container/application checks are replaced by a
single ``layer.not_judged`` finding naming the error to fix first.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuledger.catalog.amd import amd_reference
from gpuledger.doctor.applications import check_applications
from gpuledger.doctor.containers import check_containers, check_wsl
from gpuledger.doctor.context import Context, fill_values
from gpuledger.doctor.findings import Finding, make, sort_findings
from gpuledger.doctor.hardware import check_hardware, check_kernel
from gpuledger.doctor.image_stack import check_image_stack
from gpuledger.doctor.knowledge import Layer, knowledge_base
from gpuledger.doctor.management import check_management
from gpuledger.doctor.runtime import check_runtime
from gpuledger.doctor.train_probe import check_train_probe
from gpuledger.facts.model import Facts

LAYER_CHECKS: tuple[tuple[Layer, Callable[[Context], list[Finding]]], ...] = (
    ("hardware", check_hardware),
    ("kernel", check_kernel),
    ("management", check_management),
    ("runtime", check_runtime),
    ("runtime", check_train_probe),
    ("containers", check_containers),
    ("wsl", check_wsl),
    ("applications", check_applications),
    ("applications", check_image_stack),
)
_NEXT_LAYER: dict[str, Layer] = {"kernel": "management", "management": "runtime"}


def diagnose(facts: Facts) -> list[Finding]:
    """Every finding for ``facts``, bottom layer first."""
    ctx = Context(facts=facts, kb=knowledge_base(), amd_ref=amd_reference())
    findings: list[Finding] = []
    announced: set[str] = set()
    for layer, check in LAYER_CHECKS:
        findings += check(ctx)
        if layer == "hardware":
            fill_values(ctx)
        for vendor, rule in ctx.blocked.items():
            if vendor in announced:
                continue
            announced.add(vendor)
            blocker = next((x for x in findings if x.id == rule), None)
            above = _NEXT_LAYER.get(blocker.layer if blocker else "kernel", "runtime")
            skipped = ["management", "runtime", "containers", "applications"]
            skipped = skipped[skipped.index(above) :] if above in skipped else skipped
            findings.append(
                make(
                    "layer.not_judged",
                    [f"{vendor.upper()}: {', '.join(skipped)} not judged until {rule} is fixed"],
                    layer=above,
                    title=f"{vendor.upper()}: layers above not judged until {rule} is fixed",
                )
            )
    return sort_findings(findings)
