"""OpenAI-compatible servers: vLLM, SGLang, llama.cpp, TGI, Ollama's /v1 — streaming SSE.

One ``aiohttp.ClientSession`` per run (connector limit = the run's concurrency). The server is
identified first (``/v1/models`` owner, then ``/get_server_info``, ``/info``, ``/props``,
``/version``, ``/api/version``) so that ``ignore_eos`` / ``min_tokens`` / continuous usage are only
sent where the server accepts them. Token counts: the server's usage when reported and believable
(``gpuledger.engines.base.implausible_output_count`` / ``implausible_input_count``; a count that is not is
replaced by the client's, with a note on the request and a warning on the run); else the server's own
tokenizer endpoint (vLLM and llama.cpp ``/tokenize``); else the client's chunk count.

What bounds a request is learnt at open where the server says it (``ServerInfo.details``:
``context_length`` and its ``context_length_source``): ``max_model_len`` of the model in ``/v1/models``
(vLLM, SGLang), llama.cpp's ``/props`` ``n_ctx`` (per slot), TGI's ``/info`` ``max_total_tokens`` (and
``max_input_tokens``), SGLang's ``/get_server_info`` ``context_length``. The server's tokenizer also counts
a templated chat the way the server builds it (``ServerTokenizer.chat_tokens``: vLLM's /tokenize with
``messages``, llama.cpp's /apply-template then /tokenize), so a chat prompt can have the requested length.
The tokenizer has its own connections: its calls never wait for (or hold) one the requests need.
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
from gpuledger.engines.http import PROBE_TIMEOUT_S, HttpEngine, exc_text, get_json, http_error_text
from gpuledger.engines.sse import OpenAIStream
from gpuledger.errors import EngineError
from gpuledger.kinds.text.summary import REASONING_KEY
from gpuledger.urls import Secrets, ServerUrl, parse_server_url

# Servers that honour the length-control and usage extensions (checked against their APIs).
_IGNORE_EOS = {"vllm", "sglang", "llamacpp"}
_MIN_TOKENS = {"vllm", "sglang"}
_CONTINUOUS_USAGE = {"vllm", "sglang"}
TOKENIZER_CONNECTIONS = 8
MAX_CONTEXT = 2**31 - 1


class ServerTokenizer:
    """vLLM (``/tokenize`` + ``/detokenize`` with ``model``) or llama.cpp (``content`` / ``tokens``), at
    ``server`` (a :class:`ServerUrl`, or a base URL)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        server: ServerUrl | str,
        kind: str,
        model: str,
        headers: dict[str, str],
        secrets: Secrets | None = None,
    ) -> None:
        self._session = session
        self._server = server if isinstance(server, ServerUrl) else parse_server_url(server)
        self._secrets = secrets or self._server.secrets  # taken out of the endpoint's error texts
        self._kind = kind
        self._model = model
        self._headers = {**headers, "Content-Type": "application/json"}
        self.chat_source = (
            "POST /tokenize with the chat's messages (vLLM: its chat template, add_generation_prompt)"
            if kind == "vllm"
            else "POST /apply-template, then /tokenize of the templated prompt (llama.cpp)"
        )

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with self._session.post(
                self._server.url(path),
                data=orjson.dumps(body),
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S),
                allow_redirects=False,
            ) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    said = self._secrets.redact(http_error_text(resp.status, raw))
                    raise EngineError(f"tokenizer endpoint {path}: {said}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise EngineError(f"tokenizer endpoint {path}: {self._secrets.redact(exc_text(exc))}") from exc
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise EngineError(f"tokenizer endpoint {path}: malformed JSON") from exc
        if not isinstance(obj, dict):
            raise EngineError(f"tokenizer endpoint {path}: unexpected answer")
        return obj

    async def tokenize(self, text: str, add_special: bool = False) -> list[int]:
        if self._kind == "vllm":
            obj = await self._post(
                "/tokenize", {"model": self._model, "prompt": text, "add_special_tokens": add_special}
            )
        else:
            obj = await self._post("/tokenize", {"content": text, "add_special": add_special})
        toks = obj.get("tokens")
        if not isinstance(toks, list):
            raise EngineError("tokenizer endpoint /tokenize: no token list in the answer")
        # llama.cpp answers [{"id":..,"piece":..}] when asked with_pieces; ids otherwise.
        return [int(t["id"]) if isinstance(t, dict) else int(t) for t in toks]

    async def chat_tokens(self, messages: list[dict[str, str]]) -> int:
        """The tokens of ``messages`` as the server templates them for a chat request (generation prompt
        included): what its ``usage.prompt_tokens`` will say."""
        if self._kind == "vllm":
            obj = await self._post(
                "/tokenize", {"model": self._model, "messages": messages, "add_generation_prompt": True}
            )
            toks = obj.get("tokens")
            if not isinstance(toks, list):
                raise EngineError("tokenizer endpoint /tokenize: no token list in the chat's answer")
            return len(toks)
        obj = await self._post("/apply-template", {"messages": messages})
        prompt = obj.get("prompt")
        if not isinstance(prompt, str):
            raise EngineError("chat template endpoint /apply-template: no prompt in the answer")
        return len(await self.tokenize(prompt, add_special=True))

    async def detokenize(self, ids: list[int]) -> str:
        if self._kind == "vllm":
            obj = await self._post("/detokenize", {"model": self._model, "tokens": ids})
            text = obj.get("prompt")
        else:
            obj = await self._post("/detokenize", {"tokens": ids})
            text = obj.get("content")
        if not isinstance(text, str):
            raise EngineError("tokenizer endpoint /detokenize: no text in the answer")
        return text


async def identify_server(
    session: aiohttp.ClientSession, server: ServerUrl, headers: dict[str, str], owner: str | None
) -> ServerInfo:
    """Who is serving? Each engine family exposes a distinctive endpoint (a redirect is no answer)."""
    info = ServerInfo()
    owner = (owner or "").lower()
    probes: list[tuple[str, str]] = [
        ("sglang", "/get_server_info"),
        ("tgi", "/info"),
        ("llamacpp", "/props"),
        ("vllm", "/version"),
        ("ollama", "/api/version"),
    ]
    # The /v1/models owner is a strong hint: ask that family first.
    probes.sort(key=lambda p: 0 if p[0] in owner else 1)
    for kind, path in probes:
        try:
            status, obj = await get_json(session, server.url(path), headers=headers)
        except (aiohttp.ClientError, TimeoutError):
            continue
        if status != 200 or not isinstance(obj, dict):
            continue
        version: Any = None
        if kind == "sglang" and ("version" in obj or "tokenizer_path" in obj or "model_path" in obj):
            version = obj.get("version")
            _context(info, obj.get("context_length"), "GET /get_server_info context_length (SGLang)")
        elif kind == "tgi" and "model_id" in obj:
            version = obj.get("version")
            info.details["model_id"] = obj.get("model_id")
            info.details["sha"] = obj.get("sha")
            _context(info, obj.get("max_total_tokens"), "GET /info max_total_tokens (TGI)")
            longest = obj.get("max_input_tokens", obj.get("max_input_length"))
            if _count(longest) is not None:
                info.details["max_input_tokens"] = longest
        elif kind == "llamacpp" and ("default_generation_settings" in obj or "build_info" in obj):
            version = obj.get("build_info")
            if "total_slots" in obj:
                info.details["total_slots"] = obj.get("total_slots")
            settings = obj.get("default_generation_settings")
            n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
            _context(info, n_ctx, "GET /props default_generation_settings.n_ctx (llama.cpp, per slot)")
        elif (
            kind == "vllm"
            and set(obj) == {"version"}
            and "ollama" not in owner
            or kind == "ollama"
            and "version" in obj
        ):
            version = obj.get("version")
        else:
            continue
        info.kind = kind
        info.version = str(version) if version is not None else None
        info.version_source = f"GET {path}"
        break
    if info.kind == "unknown" and owner:
        info.details["owned_by"] = owner
    info.accepts_ignore_eos = info.kind in _IGNORE_EOS
    info.accepts_min_tokens = info.kind in _MIN_TOKENS
    info.accepts_continuous_usage = info.kind in _CONTINUOUS_USAGE
    if info.kind in ("vllm", "llamacpp"):
        info.tokenizer_endpoint = "/tokenize"
    return info


def _count(value: object) -> int | None:
    """A token count a server reported, when it is one (an integer, not a bool, 1 .. 2^31 - 1)."""
    return value if type(value) is int and 1 <= value <= MAX_CONTEXT else None


def _context(info: ServerInfo, value: object, source: str) -> None:
    """Record the server's context length (``details``) when ``value`` is a believable one."""
    n = _count(value)
    if n is not None:
        info.details["context_length"] = n
        info.details["context_length_source"] = source


class OpenAIEngine(HttpEngine):
    """``/v1/completions`` (``endpoint="completions"``, default) or ``/v1/chat/completions`` (``"chat"``)."""

    name = "openai"
    label = "OpenAI"
    paths = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
    accept = "text/event-stream"

    def _init_state(self) -> None:
        self._info = ServerInfo()
        self._tokenizer: ServerTokenizer | None = None
        self._tokenizer_session: aiohttp.ClientSession | None = None
        self._stream_options: dict[str, bool] = {"include_usage": True}
        self.fingerprint: str | None = None

    @property
    def tokenizer(self) -> Tokenizer | None:
        return self._tokenizer

    async def open(self, concurrency: int | None) -> ServerInfo:
        session = self.open_session(concurrency)
        status, obj = await self.probe("/v1/models")
        if status in (401, 403):
            raise await self.refuse(
                f"the server at {self.display_url} refused the API key (HTTP {status})",
                hint="put the key in an environment variable and name it with --api-key-env",
            )
        models: list[str] = []
        owner: str | None = None
        lengths: dict[str, object] = {}
        if status == 200 and isinstance(obj, dict) and isinstance(obj.get("data"), list):
            for m in obj["data"]:
                if isinstance(m, dict) and m.get("id"):
                    models.append(str(m["id"]))
                    owner = owner or (str(m["owned_by"]) if m.get("owned_by") else None)
                    lengths[str(m["id"])] = m.get("max_model_len")
        info = await identify_server(session, self.server_url, self._auth, owner)
        info.models = models
        info.warnings.extend(self.probe_notes)
        if self.model is None:
            if not models:
                raise await self.refuse(
                    f"the server at {self.display_url} lists no model and --model was not given",
                    hint="pass --model NAME",
                )
            self.model = models[0]
        elif models and self.model not in models and info.kind in ("vllm", "sglang"):
            raise await self.refuse(
                f"model {self.model!r} is not served at {self.display_url}; it serves: {', '.join(models)}"
            )
        if info.kind == "llamacpp":
            # llama-server closes the connection after each stream while announcing keep-alive: do not
            # pool connections it is about to close (each request opens its own, as it would anyway).
            self._headers = {**self._headers, "Connection": "close"}
        if info.accepts_continuous_usage:
            self._stream_options = {"include_usage": True, "continuous_usage_stats": True}
        _context(info, lengths.get(self.model), "GET /v1/models max_model_len")
        if info.tokenizer_endpoint:
            own = aiohttp.TCPConnector(limit=TOKENIZER_CONNECTIONS, ttl_dns_cache=None)
            self._tokenizer_session = aiohttp.ClientSession(connector=own)
            self._tokenizer = ServerTokenizer(
                self._tokenizer_session, self.server_url, info.kind, self.model, self._auth, self.secrets
            )
        self._info = info
        return info

    async def close(self) -> None:
        if self._tokenizer_session is not None:
            session, self._tokenizer_session = self._tokenizer_session, None
            await session.close()
        await super().close()

    def _body(self, req: GenRequest) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": req.max_tokens,
            "stream": True,
            "stream_options": self._stream_options,
        }
        if self._chat:
            body["messages"] = req.as_messages()
        else:
            body["prompt"] = req.as_prompt()
        if req.fixed_output:
            if self._info.accepts_ignore_eos:
                body["ignore_eos"] = True
            elif self._info.accepts_min_tokens:
                # Only without ignore_eos: vLLM lowers max_tokens to what fits the context, and a
                # min_tokens above that turns a length the summary reports as a mismatch into a 400.
                body["min_tokens"] = req.max_tokens
        return orjson.dumps(body)

    async def generate(self, req: GenRequest) -> GenResult:
        chat, max_tokens = self._chat, req.max_tokens
        st, res = await self.stream(
            req, self._body(req), lambda: OpenAIStream(chat, max_tokens), require_stream=True
        )
        res.system_fingerprint = st.fingerprint
        if st.continuous and any(k != 1 for k in st.chunk_tokens):
            res.chunk_tokens = st.chunk_tokens  # exact per-chunk counts; None means one token each
        if st.fingerprint and self.fingerprint is None:
            self.fingerprint = st.fingerprint
        if st.timings:
            res.server_timings = llamacpp_timings(st.timings)
        usage = st.usage
        if st.usage_note is not None:
            self.note(req, res, "usage", st.usage_note)
            usage = None
        if usage and "completion_tokens" in usage:
            # The server's counts, when they can be believed (base.implausible_*_count); else the client's.
            why = implausible_output_count(
                usage["completion_tokens"], max_tokens=req.max_tokens, chunks=len(st.chunk_times)
            )
            if why is None:
                res.output_tokens = usage["completion_tokens"]
                res.token_source = "server_usage"
                res.input_tokens = self._input_count(req, res, usage.get("prompt_tokens"))
            else:
                res.output_tokens = st.tokens_counted
                res.input_tokens = req.input_tokens_hint
                used = f"the client's count ({res.output_tokens}) was used"
                self.note(req, res, "completion_tokens", f"the server's completion_tokens {why}: {used}")
        elif st.usage_note is None and res.error is None and self._tokenizer is not None:
            text = "".join(st.reasoning_texts) + "".join(st.texts)
            try:
                res.output_tokens = len(await self._tokenizer.tokenize(text, add_special=False))
                if req.input_tokens_hint is not None:
                    res.input_tokens = req.input_tokens_hint
                else:
                    res.input_tokens = len(await self._tokenizer.tokenize(req.as_prompt(), add_special=True))
                res.token_source = "server_tokenizer"
            except EngineError:
                res.output_tokens = st.tokens_counted
                res.input_tokens = req.input_tokens_hint
        else:
            res.output_tokens = st.tokens_counted
            res.input_tokens = req.input_tokens_hint
        res.text = answer_text(st.texts)
        split = reasoning_split(st, usage, res.output_tokens)
        if split is not None:
            res.server_timings = {**(res.server_timings or {}), REASONING_KEY: split}
        return res

    def _input_count(self, req: GenRequest, res: GenResult, value: object) -> int | None:
        """The server's ``prompt_tokens`` when believable, else the client's (the dataset's) count."""
        if value is None:
            return req.input_tokens_hint
        why = implausible_input_count(value, prompt_chars=req.prompt_chars())
        if why is None and isinstance(value, int):
            return value
        self.note(
            req,
            res,
            "prompt_tokens",
            f"the server's prompt_tokens {why}: the client's count ({req.input_tokens_hint}) was used",
        )
        return req.input_tokens_hint

    async def after_run(self) -> dict[str, Any]:
        out: dict[str, Any] = {"system_fingerprint": self.fingerprint} if self.fingerprint else {}
        notes = self.note_warnings()
        if notes:
            out["warnings"] = [*self._info.warnings, *notes]
        return out


def answer_text(texts: list[str]) -> str:
    """The answer as a conversation's history keeps it: the content less its reasoning (up to the first
    ``</think>``, or all of it when it opens ``<think>`` and never closes; engines.sse's rule)."""
    text = "".join(texts)
    if "</think>" in text:
        return text.split("</think>", 1)[1].lstrip()
    return "" if text.lstrip().startswith("<think>") else text


def reasoning_split(st: OpenAIStream, usage: dict[str, Any] | None,
                    output: int | None) -> dict[str, Any] | None:
    """The request's reasoning and answer tokens (``server_timings["reasoning"]``), None when it had no
    reasoning: the server's ``usage.completion_tokens_details.reasoning_tokens`` when it reports more than 0
    and no more than the output tokens, else the reasoning chunks the client counted (engines.sse); the
    answer is the output less the reasoning. The first reasoning and answer chunks (indexes into the
    request's chunk times) give the two TTFTs."""
    client = st.reasoning_counted
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    server = details.get("reasoning_tokens") if isinstance(details, dict) else None
    believed = type(server) is int and server > 0 and (output is None or server <= output)
    if not believed and not client and st.first_reasoning_chunk is None:
        return None
    reasoning = server if believed and isinstance(server, int) else client
    total = output if output is not None else st.tokens_counted
    return {
        "reasoning_tokens": reasoning,
        "answer_tokens": max(0, total - reasoning),
        "source": "server_usage" if believed else "client_count",
        "client_reasoning_tokens": client,
        "first_reasoning_chunk": st.first_reasoning_chunk,
        "first_answer_chunk": st.first_answer_chunk,
    }


def llamacpp_timings(tm: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's ``timings`` object, kept whole, plus the normalised keys the summary compares."""
    out: dict[str, Any] = {"server": "llamacpp", **tm}
    if isinstance(tm.get("prompt_ms"), int | float):
        out["prefill_ms"] = float(tm["prompt_ms"])
    if isinstance(tm.get("predicted_ms"), int | float):
        out["decode_ms"] = float(tm["predicted_ms"])
    if in_count_range(tm.get("predicted_n")):
        out["decode_tokens"] = tm["predicted_n"]
    if in_count_range(tm.get("prompt_n")):
        out["prefill_tokens"] = tm["prompt_n"]
    return out
