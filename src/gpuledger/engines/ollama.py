"""Ollama's native API: ``/api/generate`` and ``/api/chat`` streaming NDJSON, ``options.num_predict``.

Ollama reports its own counts and durations on the final ``done: true`` line (``eval_count``,
``eval_duration``, ``prompt_eval_count``, ``prompt_eval_duration``, ``load_duration``,
``total_duration``, all durations in ns); they are kept per request in ``server_timings`` and compared
with the client's timings in the summary. The counts are used when believable (the rules of
``gpuledger.engines.base.implausible_output_count`` / ``implausible_input_count``, ``num_predict`` as
``max_tokens``); else the client's count is, with a note. After the run ``/api/ps`` says where the model
sits: ``size_vram`` 0 means it ran on the CPU (seed §6: "Ollama falling back to CPU").
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from gpuledger.engines.base import (
    GenRequest,
    GenResult,
    ServerInfo,
    Tokenizer,
    implausible_input_count,
    implausible_output_count,
    in_count_range,
)
from gpuledger.engines.http import HttpEngine, exc_text, get_json
from gpuledger.engines.sse import OllamaStream

_NS_TO_MS = 1e-6


def ollama_timings(final: dict[str, Any]) -> dict[str, Any]:
    """The ``done: true`` line's counters, kept as Ollama names them, plus normalised keys in ms."""
    keys = (
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
        "done_reason",
    )
    out: dict[str, Any] = {"server": "ollama"}
    for k in keys:
        if k in final:
            out[k] = final[k]

    def ms(key: str) -> float | None:
        v = final.get(key)
        return float(v) * _NS_TO_MS if isinstance(v, int | float) else None

    load, prompt, decode, total = (
        ms("load_duration"),
        ms("prompt_eval_duration"),
        ms("eval_duration"),
        ms("total_duration"),
    )
    if load is not None:
        out["load_ms"] = load
    if prompt is not None:
        out["prefill_ms"] = prompt
    if decode is not None:
        out["decode_ms"] = decode
    if total is not None:
        out["total_ms"] = total
    if in_count_range(final.get("eval_count")):
        out["decode_tokens"] = final["eval_count"]
    if in_count_range(final.get("prompt_eval_count")):
        out["prefill_tokens"] = final["prompt_eval_count"]
    return out


def placement(ps: dict[str, Any], model: str) -> dict[str, Any] | None:
    """``model``'s ``/api/ps`` entry: size, size_vram, and the CPU/GPU split as ``ollama ps`` shows it."""
    models = ps.get("models")
    if not isinstance(models, list):
        return None
    wanted = {model, model if ":" in model else f"{model}:latest"}
    for m in models:
        if not isinstance(m, dict) or (m.get("name") not in wanted and m.get("model") not in wanted):
            continue
        size = m.get("size")
        vram = m.get("size_vram")
        out: dict[str, Any] = {
            "name": m.get("name"),
            "size_bytes": size,
            "size_vram_bytes": vram,
            "context_length": m.get("context_length"),
        }
        if isinstance(size, int) and isinstance(vram, int) and size > 0:
            gpu = round(100 * vram / size)
            out["gpu_ratio"] = vram / size
            out["processor"] = (
                "100% GPU" if gpu >= 100 else ("100% CPU" if vram == 0 else f"{100 - gpu}%/{gpu}% CPU/GPU")
            )
        return out
    return None


class OllamaEngine(HttpEngine):
    """``endpoint="generate"`` (``/api/generate``, default) or ``"chat"`` (``/api/chat``)."""

    name = "ollama"
    label = "Ollama"
    paths = {"generate": "/api/generate", "chat": "/api/chat"}

    @property
    def tokenizer(self) -> Tokenizer | None:
        return None  # Ollama has no tokenizer endpoint; its counts come with every response

    def _init_state(self) -> None:
        self._info = ServerInfo(kind="ollama")

    async def open(self, concurrency: int | None) -> ServerInfo:
        self.open_session(concurrency)
        status, obj = await self.probe("/api/version")
        tstatus, tags = await self.probe("/api/tags")
        if status != 200 or not isinstance(obj, dict) or "version" not in obj:
            raise await self.refuse(
                f"{self.display_url} does not answer like an Ollama server (GET /api/version: HTTP {status})",
                hint="for vLLM, SGLang, llama.cpp or TGI use --engine openai",
            )
        info = ServerInfo(kind="ollama", version=str(obj["version"]), version_source="GET /api/version")
        info.warnings.extend(self.probe_notes)
        models: list[str] = []
        if tstatus == 200 and isinstance(tags, dict) and isinstance(tags.get("models"), list):
            models = [str(m.get("name")) for m in tags["models"] if isinstance(m, dict) and m.get("name")]
        info.models = models
        if self.model is None:
            if not models:
                raise await self.refuse(
                    "the Ollama server has no model and --model was not given",
                    hint="ollama pull MODEL, then pass --model MODEL",
                )
            self.model = models[0]
        elif models and self.model not in models and f"{self.model}:latest" not in models:
            raise await self.refuse(
                f"model {self.model!r} is not on the Ollama server at {self.display_url}; "
                f"it has: {', '.join(models)}",
                hint=f"ollama pull {self.model}",
            )
        info.warnings.append(
            "Ollama cannot force an output length (no ignore_eos): num_predict only caps it; "
            "requested vs received lengths are compared in the summary"
        )
        self._info = info
        return info

    def _body(self, req: GenRequest) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "stream": True,
            "options": {"num_predict": req.max_tokens},
        }
        if self._chat:
            body["messages"] = req.as_messages()
        else:
            body["prompt"] = req.as_prompt()
        return orjson.dumps(body)

    async def generate(self, req: GenRequest) -> GenResult:
        chat, num_predict = self._chat, req.max_tokens
        st, res = await self.stream(
            req, self._body(req), lambda: OllamaStream(chat, num_predict), require_stream=False
        )
        res.text = "".join(st.texts)  # the answer as a session's history keeps it
        final = st.final
        if final is not None:
            res.server_timings = ollama_timings(final)
        if final is not None and "eval_count" in final:
            chunks = len(st.chunk_times)
            why = implausible_output_count(final["eval_count"], max_tokens=req.max_tokens, chunks=chunks)
            if why is None:
                res.output_tokens = final["eval_count"]
                res.token_source = "server_usage"
                res.input_tokens = self._input_count(req, res, final.get("prompt_eval_count"))
                return res
            res.output_tokens = len(st.chunk_times)
            res.input_tokens = req.input_tokens_hint
            used = f"the client's count ({res.output_tokens}) was used"
            self.note(req, res, "eval_count", f"Ollama's eval_count {why}: {used}")
            return res
        res.output_tokens = len(st.chunk_times)
        res.input_tokens = req.input_tokens_hint
        return res

    def _input_count(self, req: GenRequest, res: GenResult, value: object) -> int | None:
        """Ollama's ``prompt_eval_count`` when believable, else the client's (the dataset's) count."""
        if value is None:
            return req.input_tokens_hint
        why = implausible_input_count(value, prompt_chars=req.prompt_chars())
        if why is None and isinstance(value, int):
            return value
        used = f"the client's count ({req.input_tokens_hint}) was used"
        self.note(req, res, "prompt_eval_count", f"Ollama's prompt_eval_count {why}: {used}")
        return req.input_tokens_hint

    async def after_run(self) -> dict[str, Any]:
        """Where the model sits now (``/api/ps``), with a warning when it is (partly) on the CPU."""
        out = await self._placement()
        # The run's warnings: those of the start, where the model sat, what the requests showed.
        warnings = [*out.pop("warnings", []), *self.note_warnings()]
        if warnings:
            out["warnings"] = [*self._info.warnings, *warnings]
        return out

    async def _placement(self) -> dict[str, Any]:
        try:
            status, ps = await get_json(self.session, self.server_url.url("/api/ps"), headers=self._auth)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return {"placement_error": f"GET /api/ps failed: {self.secrets.redact(exc_text(exc))}"}
        if status != 200 or not isinstance(ps, dict):
            return {"placement_error": f"GET /api/ps: HTTP {status}"}
        pl = placement(ps, self.model or "")
        if pl is None:
            return {"placement_error": f"model {self.model!r} not loaded according to /api/ps"}
        out: dict[str, Any] = {"placement": pl}
        vram = pl.get("size_vram_bytes")
        if vram == 0:
            out["warnings"] = [
                f"Ollama ran {self.model} entirely on the CPU (/api/ps size_vram = 0): the GPU was not used"
            ]
        elif isinstance(pl.get("gpu_ratio"), float) and pl["gpu_ratio"] < 0.999:
            out["warnings"] = [
                f"Ollama split {self.model} between CPU and GPU ({pl['processor']}): "
                "layers on the CPU slow every token"
            ]
        return out
