"""Layer 4, training: does each device train? (``doctor --deep``: a few steps of a small network in the
probe's child process, ``facts/train_probe.py``.) A device whose loss is NaN or inf, or whose step changes
nothing — no gradient, weights that do not move, the same loss every step — computes wrongly or not at all,
whatever ``torch.cuda.is_available()`` said; one whose loss moves is reported with its figures."""

from __future__ import annotations

from gpuledger.doctor.context import Context
from gpuledger.doctor.findings import Finding, make
from gpuledger.facts.model import TrainProbeResult

METHOD = (
    "a two-layer network (64 → 64 → 1, tanh) trained with SGD on fixed data in the probe's child process: "
    "forward, backward, optimizer step"
)


def _label(r: TrainProbeResult) -> str:
    return r.device if r.device_name in (None, r.device) else f"{r.device} {r.device_name}"


def _losses(r: TrainProbeResult) -> str:
    return ", ".join("NaN/inf" if v is None else f"{v:.4g}" for v in r.losses)


def _one(r: TrainProbeResult) -> Finding:
    head = f"{_label(r)}: {r.steps} training steps ({r.dtype}, lr {r.learning_rate:g})" if r.learning_rate \
        else f"{_label(r)}: {r.steps} training steps ({r.dtype})"
    if r.error:
        return make("torch.train_step_failed", [f"{_label(r)}: {r.error}", METHOD])
    norm = "NaN/inf" if r.grad_norm is None else f"{r.grad_norm:.4g}"
    moved = "NaN/inf" if r.param_change is None else f"{r.param_change:.4g}"
    lines = [head, f"loss per step: {_losses(r)}", f"gradient norm {norm}, weights moved by at most {moved}",
             METHOD]
    if r.nonfinite or any(v is None for v in r.losses) or r.param_change is None:
        return make("torch.train_step_nan", lines)
    finite = [v for v in r.losses if v is not None]
    still = len(set(finite)) <= 1 or not r.param_change or not r.grad_norm
    if not finite or still:
        return make("torch.train_step_no_change", lines)
    return make("torch.train_step_ok", lines)


def check_train_probe(ctx: Context) -> list[Finding]:
    """One finding per device the training probe ran on (nothing when ``--deep`` did not run it)."""
    probe = ctx.facts.frameworks.torch.probe
    if probe is None:
        return []
    out = [_one(r) for r in probe.train]
    if probe.train_error:
        out.append(make("torch.train_step_failed", [probe.train_error, METHOD]))
    return out
