"""Generating a batch in-process: prompts of random token ids (seeded, special ids avoided), a forced output
length (``min_new_tokens == max_new_tokens``) and a timestamp per decode step.

``generate`` calls the streamer once with the prompt, then once per decode step with one token per sequence,
after ``.cpu()`` brought them to the host: the device has finished that step, so ``time.perf_counter()``
there is when the step's tokens exist. The streamer also checks a stop flag at every step, so a batch
that is cancelled (Ctrl-C, SIGTERM) ends within one decode step instead of running to its end.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from typing import Any

from gpuledger.engines.torch.imports import import_torch, streamer_base
from gpuledger.engines.torch.models import LoadedModel, device_hint, first_line
from gpuledger.errors import EngineError, ResourceError


class BatchStopped(Exception):
    """The batch was stopped at a decode step (its requests never finished)."""


@functools.cache
def _step_clock_class() -> type:
    """A transformers ``BaseStreamer`` that stamps every decode step (defined lazily: the base class
    lives in transformers)."""
    base: Any = streamer_base()

    class StepClock(base):  # type: ignore[misc]
        def __init__(self, stop: threading.Event) -> None:
            self.stop = stop
            self.prompt_seen = False
            self.times: list[float] = []
            self.tokens: list[list[int]] = []
            self.t_end: float | None = None

        def put(self, value: Any) -> None:
            now = time.perf_counter()
            if self.stop.is_set():
                raise BatchStopped("stopped at a decode step")
            if not self.prompt_seen:
                self.prompt_seen = True
                return
            self.times.append(now)
            self.tokens.append([int(x) for x in value.reshape(-1).tolist()])

        def end(self) -> None:
            self.t_end = time.perf_counter()

    return StepClock


@dataclass(slots=True)
class BatchTiming:
    """One batch: sent at ``t_send``; step ``i`` finished at ``step_times[i]``; sequence ``j`` produced
    ``output_lengths[j]`` tokens (all of them, unless it emitted EOS after the forced minimum)."""

    t_send: float
    step_times: list[float]
    t_end: float
    output_lengths: list[int]


def make_prompts(loaded: LoadedModel, count: int, input_tokens: int, seed: int) -> Any:
    """``count`` prompts of ``input_tokens`` random token ids (seeded; special ids avoided)."""
    torch = import_torch()
    gen = torch.Generator().manual_seed(seed)
    vocab = loaded.plan.shape.vocab_size
    ids = torch.randint(0, vocab, (count, input_tokens), generator=gen)
    for sid in loaded.special_ids:
        if 0 <= sid < vocab:
            ids[ids == sid] = (sid + 1) % vocab
    return ids


def generate_batch(loaded: LoadedModel, prompt_ids: Any, output_tokens: int,
                   stop: threading.Event | None = None) -> BatchTiming:
    """Run one batch with forced output length and per-step timestamps. Whatever PyTorch raises is the
    engine's failure (``EngineError``; out of GPU memory: ``ResourceError``); ``BatchStopped`` when
    ``stop`` was set during the batch."""
    torch = import_torch()
    clock = _step_clock_class()(stop if stop is not None else threading.Event())
    ids = prompt_ids.to(loaded.device.torch_device)
    mask = torch.ones_like(ids)
    kwargs: dict[str, Any] = {
        "max_new_tokens": output_tokens,
        "min_new_tokens": output_tokens,
        "do_sample": False,
        "num_beams": 1,
        "use_cache": True,
        "pad_token_id": loaded.pad_token_id,
        "eos_token_id": loaded.eos_token_id,
        "streamer": clock,
    }
    if loaded.device.type == "cuda":
        torch.cuda.synchronize(loaded.device.torch_device)
    t_send = time.perf_counter()
    try:
        with torch.inference_mode():
            loaded.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    except BatchStopped:
        raise
    except torch.cuda.OutOfMemoryError as exc:
        raise ResourceError(
            f"out of GPU memory while generating (batch {ids.shape[0]}, "
            f"{ids.shape[1]}+{output_tokens} tokens): {first_line(exc)}",
            hint="lower --batch or the lengths",
        ) from exc
    except Exception as exc:  # the vendor boundary: anything torch or the model raises ends the batch
        raise EngineError(
            f"generation failed on {loaded.device.name}: {type(exc).__name__}: {first_line(exc)}",
            hint=device_hint(loaded.device),
        ) from exc
    batch = int(ids.shape[0])
    lengths = [len(clock.times)] * batch
    eos = loaded.eos_token_id
    if eos is not None:
        for j in range(batch):
            for i, step in enumerate(clock.tokens):
                if j < len(step) and step[j] == eos:
                    lengths[j] = i + 1
                    break
    t_end = clock.times[-1] if clock.times else (clock.t_end or time.perf_counter())
    return BatchTiming(t_send=t_send, step_times=list(clock.times), t_end=t_end, output_lengths=lengths)


GENERATION = {
    "do_sample": False,
    "num_beams": 1,
    "use_cache": True,
    "timestamps": "per decode step: streamer, after the step's tokens reached the host",
}
