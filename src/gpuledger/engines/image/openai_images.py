"""``--engine openai-images``: the OpenAI-compatible image API, ``POST /v1/images/generations`` (OpenAI;
vLLM-Omni, SGLang, LocalAI and others serve it).

Request: ``{"model", "prompt", "n", "size": "WxH", "response_format": "b64_json"}`` (OpenAI's API reference);
the diffusion servers' own fields ``num_inference_steps``, ``seed``, ``guidance_scale`` and
``negative_prompt`` (vLLM-Omni's image generation API) are sent only when the run sets them (``--steps``,
``--seed``, ``--guidance``), since OpenAI itself refuses unknown fields. Response: ``{"created", "data":
[{"b64_json"} | {"url"}, ...]}``; an error is ``{"error": {"message", "type", ...}}`` with a 4xx/5xx status.

Per request: latency = the response read in full − sent; images = the entries of ``data``; their size from
the image headers (PNG, JPEG; a server that returns another size than asked is said in the notes). The
server reports no steps or stage times, so those stay empty.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any

import aiohttp

from gpuledger.boundedio import TooLarge, read_body
from gpuledger.engines.base import CANNOT_CONNECT, ServerInfo
from gpuledger.engines.image.base import ImageRequest, ImageResult
from gpuledger.engines.image.thumbs import NOT_AN_IMAGE, image_size, thumbnail_of_bytes
from gpuledger.errors import EngineError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.urls import Secrets, redact_url

MAX_RESPONSE_BYTES = 512 * 1024**2
MAX_MODELS_BYTES = 4 * 1024**2
MAX_IMAGES = 1024
PATH = "/v1/images/generations"


def _short(value: Any, limit: int = 300) -> str:
    return str(value)[:limit]


class OpenAIImagesEngine:
    """See the module docstring."""

    name = "openai-images"

    def __init__(
        self, spec: ImageSpec, *, api_key: str | None = None, request_timeout_s: float = 600.0
    ) -> None:
        self.spec = spec
        base = str(spec.base_url or "http://127.0.0.1:8000").rstrip("/")
        self.base_url = base[: -len("/v1")] if base.endswith("/v1") else base
        self.display_url = redact_url(self.base_url)
        self.model = spec.model
        self.api_key = api_key
        self.secrets = Secrets.of(self.base_url, api_key=api_key)  # out of every error text (gpuledger.urls)
        self.request_timeout_s = request_timeout_s
        self.chunks_seen = 0
        self._session: aiohttp.ClientSession | None = None

    async def open(self, concurrency: int | None) -> ServerInfo:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        connector = aiohttp.TCPConnector(limit=max(concurrency or 1, 1) * 2)
        self._session = aiohttp.ClientSession(
            headers=headers, connector=connector, timeout=aiohttp.ClientTimeout(total=None)
        )
        models: list[str] = []
        try:
            async with self._session.get(
                self.base_url + "/v1/models", timeout=aiohttp.ClientTimeout(total=10.0)
            ) as r:
                body = await read_body(r.content, MAX_MODELS_BYTES, what=f"{self.display_url}/v1/models")
                if r.status == 200:
                    doc = json.loads(body)
                    data = doc.get("data") if isinstance(doc, dict) else None
                    models = [_short(m.get("id"), 200) for m in data or [] if isinstance(m, dict)][:100]
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            await self.close()
            raise EngineError(
                f"{CANNOT_CONNECT} to {self.display_url}: {self.secrets.redact(_short(exc, 200))}",
                hint="start the image server or give --base-url",
            ) from exc
        except (aiohttp.ClientError, ValueError, TooLarge):
            models = []
        if self.model is None and models:
            self.model = models[0]
        return ServerInfo(kind="openai-images", models=models, details={"endpoint": PATH})

    async def after_run(self) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._session = None

    def body(self, req: ImageRequest) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt": req.prompt, "n": req.batch_size, "response_format": "b64_json"}
        if self.model:
            out["model"] = self.model
        if req.width and req.height:
            out["size"] = f"{req.width}x{req.height}"
        if self.spec.steps is not None:
            out["num_inference_steps"] = self.spec.steps
        if self.spec.seed is not None:
            out["seed"] = req.seed
        if self.spec.guidance is not None:
            out["guidance_scale"] = self.spec.guidance
        if req.negative_prompt:
            out["negative_prompt"] = req.negative_prompt
        return out

    async def generate_image(self, req: ImageRequest) -> ImageResult:
        if self._session is None:
            raise EngineError("the openai-images engine was used before open()")
        t_send = time.perf_counter()
        result = ImageResult(index=req.index, t_send=t_send, t_end=t_send, engine=self.name, stage=req.stage)
        try:
            async with self._session.post(
                self.base_url + PATH,
                json=self.body(req),
                timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
            ) as r:
                raw = await read_body(r.content, MAX_RESPONSE_BYTES, what="the answer")
                status = r.status
        except TooLarge:
            result.t_end = time.perf_counter()
            result.error = f"the answer is over {MAX_RESPONSE_BYTES} bytes"
            return result
        except (aiohttp.ClientConnectionError, OSError) as exc:
            result.t_end = time.perf_counter()
            said = self.secrets.redact(_short(exc, 200))
            result.error = f"{CANNOT_CONNECT} to {self.display_url}{PATH}: {said}"
            return result
        except TimeoutError:
            result.t_end = time.perf_counter()
            result.error = f"timeout: no full answer within {self.request_timeout_s:g} s"
            return result
        except aiohttp.ClientError as exc:
            result.t_end = time.perf_counter()
            result.error = f"{type(exc).__name__}: {self.secrets.redact(_short(exc, 200))}"
            return result
        result.t_end = time.perf_counter()
        try:
            doc = json.loads(raw)
        except ValueError:
            result.error = f"HTTP {status}: the answer is not JSON"
            return result
        if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
            err = doc.get("error") if isinstance(doc, dict) else None
            msg = err.get("message") if isinstance(err, dict) else err
            said = f": {self.secrets.redact(_short(msg))}" if msg else ": no 'data' in the answer"
            result.error = f"HTTP {status}{said}"
            return result
        self._read_images(doc["data"][:MAX_IMAGES], req, result)
        return result

    def _read_images(self, items: list[Any], req: ImageRequest, result: ImageResult) -> None:
        sizes: set[tuple[int, int]] = set()
        total = 0
        urls = 0
        junk = 0
        for item in items:
            if not isinstance(item, dict):
                continue
            b64 = item.get("b64_json")
            if isinstance(b64, str):
                try:
                    blob = base64.b64decode(b64, validate=True)
                except (binascii.Error, ValueError):
                    result.notes.append("an entry's b64_json is not base64: not counted")
                    continue
                size = image_size(blob)  # every entry's header and structure, not only the thumbnails'
                if size is None:
                    junk += 1
                    continue
                result.images += 1
                total += len(blob)
                sizes.add(size)
                if req.keep_thumbnail and not result.thumbnails:
                    thumb, why = thumbnail_of_bytes(blob, req.index)
                    if thumb is not None:
                        result.thumbnails.append(thumb)
                    elif why:
                        result.notes.append(why)
            elif isinstance(item.get("url"), str):
                result.images += 1
                urls += 1
        result.output_bytes = total or None
        if junk:
            entries = "entry" if junk == 1 else "entries"
            result.notes.append(f"{junk} b64_json {entries} {NOT_AN_IMAGE}: not counted")
        if urls:
            result.notes.append(f"{urls} image(s) came as URLs: not fetched, their size is not known")
        if len(sizes) == 1:
            result.width, result.height = next(iter(sizes))
        elif req.width and req.height:
            result.width, result.height = req.width, req.height
        if req.width and req.height and sizes and sizes != {(req.width, req.height)}:
            got = ", ".join(f"{w}×{h}" for w, h in sorted(sizes))
            result.notes.append(f"asked for {req.width}×{req.height}, the server returned {got}")
        if result.images < req.batch_size:
            result.notes.append(f"asked for {req.batch_size} image(s) per request, got {result.images}")
