"""The doctor's training probe (``doctor --deep``): the seed essay's ``check_gpu.py`` grown up — not only "is
a GPU there" but "does it train": on each device the deep probe measures, a small network (two linear layers)
runs a few full training steps — forward, backward, an SGD update — on fixed data, in the same child
process as the deep probe's matmul (``facts/frameworks.py``; torch is never imported by gpuledger itself
here). The child reports, per device, the loss of every step, the gradient norm and how far the weights
moved; ``doctor/train_probe.py`` judges them: a loss that is NaN or inf, or a step that changes nothing
(no gradient, weights that do not move, the same loss every step), is a device that does not compute.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from gpuledger.facts.model import TrainProbeResult

TRAIN_STEPS = 4
LEARNING_RATE = 0.1

# Runs in the probe's child process after the deep measurement (``targets`` and ``torch`` are defined there).
TRAIN_PROBE_SCRIPT = r"""
if "deep" in sys.argv[1:]:
    trained = []
    for dev in targets:
        gpu = dev != "cpu"
        r = {"device": dev, "device_name": dev if gpu else "cpu", "dtype": "float32", "steps": __STEPS__,
             "learning_rate": __LR__, "losses": [], "grad_norm": None, "param_change": None, "error": None}
        try:
            if gpu:  # a device that fails here is this device's error, not the whole probe's
                r["device_name"] = torch.cuda.get_device_name(dev)
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(256, 64, generator=gen).to(dev)
            y = (x[:, :1] * 0.5 - x[:, 1:2]).to(dev)
            w1 = (torch.randn(64, 64, generator=gen) * 0.1).to(dev).requires_grad_()
            w2 = (torch.randn(64, 1, generator=gen) * 0.1).to(dev).requires_grad_()
            start = torch.cat([w1.detach().flatten(), w2.detach().flatten()]).clone()
            opt = torch.optim.SGD([w1, w2], lr=__LR__)
            for _ in range(__STEPS__):
                loss = ((torch.tanh(x @ w1) @ w2 - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in (w1, w2)))
                opt.step()
                value = float(loss.item())
                r["losses"].append(value if value == value and abs(value) != float("inf") else None)
                g = float(norm.item())
                r["grad_norm"] = g if g == g and abs(g) != float("inf") else None
            end = torch.cat([w1.detach().flatten(), w2.detach().flatten()])
            moved = float((end - start).abs().max().item())
            r["param_change"] = moved if moved == moved and abs(moved) != float("inf") else None
            r["nonfinite"] = any(v is None for v in r["losses"]) or r["param_change"] is None
        except Exception as exc:
            r["error"] = "%s: %s" % (type(exc).__name__, exc)
        trained.append(r)
    out["train"] = trained
""".replace("__STEPS__", str(TRAIN_STEPS)).replace("__LR__", repr(LEARNING_RATE))


def parse_train(items: Any) -> tuple[list[TrainProbeResult], str | None]:
    """The child's per-device results; a malformed one is left out and the first problem returned."""
    out: list[TrainProbeResult] = []
    problem: str | None = None
    for item in items if isinstance(items, list) else []:
        try:
            out.append(TrainProbeResult.model_validate(item))
        except ValidationError as exc:
            problem = problem or f"unreadable training probe result: {exc.errors()[0]['msg']}"
    return out, problem
