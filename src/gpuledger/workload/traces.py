"""Trace replay (``--trace FILE``): a production trace's arrival times and lengths, sent as recorded
(``bench/replay.py``), ``--trace-speed X`` times faster.

Layouts read (told apart by the file's first line; the record's ``trace_format`` says which):

- ``mooncake`` — JSONL, the layout of kvcache-ai/Mooncake's published traces: ``{"timestamp": ms,
  "input_length": tokens, "output_length": tokens, "hash_ids": [block ids]}``. ``hash_ids`` name the prompt's
  blocks of ``BLOCK_TOKENS`` (512) tokens: two requests with the same id at the same place share that block
  of their prompt (and every block before it), so the replay reproduces the trace's prefix sharing.
- ``burstgpt-csv`` — HPMLL/BurstGPT's CSV: ``Timestamp`` (seconds), ``Model``, ``Request tokens``,
  ``Response tokens``, ``Total tokens``, ``Log Type`` (BurstGPT_3's ``Session ID`` and ``Elapsed time``
  columns are read past). No prefix identity.
- ``burstgpt-jsonl`` — the same columns as JSON objects, one per line.

Arrival times are made relative to the first arrival (rows are replayed in time order; a file out of order
is sorted, and the record says so). Rows with 0 input or 0 output tokens (BurstGPT's failed requests) are
left out and counted. At most ``MAX_ARRIVALS`` arrivals are replayed (the most a stage may send).

Times are bounded: an arrival more than ``MAX_SPAN_S`` (366 days) after the first is refused naming its
line (a timestamp of 10^15 ms is 31,000 years: a corrupt row, not a trace); and before the run starts,
a replay that would last longer than the longest stage (``MAX_REPLAY_S``, 7 days: the trace's span ÷
``--trace-speed``, when no ``--duration`` ends it sooner) is refused with the speed that would fit
(``check_replay``).

Each arrival is a prompt of exactly its input length as this server's tokenizer counts it (the chat template
included), asking for exactly its output length (``--output-len`` replaces it). With ``hash_ids`` the prompt
is its blocks' text, each block made from its id's own seed (so shared ids are shared text); the first block
holds the template's fixed tokens too. Without the server's tokenizer one word is one token (an estimate).
"""

from __future__ import annotations

import csv
import io
import math
import random
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from gpuledger.errors import EngineError, InvalidInputError, UsageError
from gpuledger.records.load import TraceStage
from gpuledger.records.spec import DatasetSpec, Stage
from gpuledger.tokenizer import Tokenizer
from gpuledger.workload.composer import Composer, Step, learn, random_words
from gpuledger.workload.datasets import Prompt, file_sha256, read_file
from gpuledger.workload.source import LOOKAHEAD, Make, Prompts, check_counts

BLOCK_TOKENS = 512  # Mooncake's hash block: the tokens each hash id stands for
MAX_ARRIVALS = 1_000_000
MAX_LENGTH = 10_000_000
CACHED_BLOCKS = 4096
MAX_BLOCKS = MAX_LENGTH // BLOCK_TOKENS + 1  # the blocks of the longest prompt
DAY_S = 86_400.0
MAX_SPAN_S = 366 * DAY_S  # the longest published traces span months (BurstGPT: 121 days)
MAX_REPLAY_S = 7 * DAY_S  # the longest stage (bench.bounds.MAX_DURATION_S)


class Trace:
    """A trace as read: arrival seconds (from the first), input and output tokens, and each arrival's block
    ids when the layout has them."""

    def __init__(self, fmt: str) -> None:
        self.format = fmt
        self.times = array("d")
        self.inputs = array("q")
        self.outputs = array("q")
        self.blocks: list[tuple[int, ...]] | None = None
        self.skipped = 0
        self.sorted = False
        self.truncated = 0

    def __len__(self) -> int:
        return len(self.times)


def _int(value: Any, what: str, where: str, low: int = 0) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int or not low <= value <= MAX_LENGTH:
        raise InvalidInputError(
            f"{where}: {what} must be a whole number {low} to {MAX_LENGTH:,}, got {value!r}"
        )
    return value


def _time(value: Any, where: str) -> float:
    if type(value) in (int, float) and math.isfinite(value) and value >= 0:
        return float(value)
    raise InvalidInputError(f"{where}: the timestamp must be a number of 0 or more, got {value!r}")


def read_trace(path: Path) -> Trace:
    """The trace in ``path`` (see the module docstring); ``InvalidInputError`` naming the line otherwise."""
    data = read_file(path)
    first = next((line for line in data.splitlines() if line.strip()), b"")
    if first.lstrip().startswith(b"{"):
        rows = _jsonl(path, data)
    else:
        rows = _csv(path, data)
    return _finish(path, *rows)


Row = tuple[float, int, int, tuple[int, ...] | None]


def _jsonl(path: Path, data: bytes) -> tuple[str, list[Row]]:
    fmt = ""
    rows: list[Row] = []
    for lineno, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidInputError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(obj, dict):
            raise InvalidInputError(f"{where}: a trace line is a JSON object")
        if not fmt:
            fmt = "mooncake" if "input_length" in obj else "burstgpt-jsonl" if "Request tokens" in obj else ""
            if not fmt:
                raise InvalidInputError(
                    f'{where}: not a trace line: expected Mooncake\'s "timestamp", "input_length", '
                    '"output_length" (and "hash_ids") or BurstGPT\'s "Timestamp", "Request tokens", '
                    '"Response tokens"'
                )
        if fmt == "mooncake":
            ids = obj.get("hash_ids")
            if ids is not None and (not isinstance(ids, list) or len(ids) > MAX_BLOCKS or not all(
                    type(h) is int and 0 <= h < 2**63 for h in ids)):
                raise InvalidInputError(
                    f'{where}: "hash_ids" must be a list of at most {MAX_BLOCKS:,} block ids (integers 0 or '
                    "more)"
                )
            # Mooncake's timestamps are milliseconds.
            ts = _time(obj.get("timestamp"), where) / 1e3
            inp = _int(obj.get("input_length"), "input_length", where)
            out = _int(obj.get("output_length"), "output_length", where)
            rows.append((ts, inp, out, tuple(ids) if ids is not None else None))
        else:
            ts = _time(obj.get("Timestamp"), where)
            inp = _int(obj.get("Request tokens"), "Request tokens", where)
            out = _int(obj.get("Response tokens"), "Response tokens", where)
            rows.append((ts, inp, out, None))
    return fmt, rows


def _csv(path: Path, data: bytes) -> tuple[str, list[Row]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: a trace is UTF-8 text ({exc.reason})") from exc
    try:
        return _csv_rows(path, csv.reader(io.StringIO(text)))
    except csv.Error as exc:  # a field over csv's limit, a NUL: the file's problem, said in one line
        raise InvalidInputError(f"{path}: not a readable CSV trace ({exc})") from None


def _csv_rows(path: Path, reader: Iterator[list[str]]) -> tuple[str, list[Row]]:
    header = [h.strip() for h in next(reader, [])]
    need = ("Timestamp", "Request tokens", "Response tokens")
    if not all(h in header for h in need):
        raise InvalidInputError(
            f"{path}: not a trace: a JSONL line of Mooncake's layout, or BurstGPT's CSV header with "
            f"{', '.join(need)} (got {', '.join(header[:8]) or 'nothing'})"
        )
    at = [header.index(h) for h in need]
    rows: list[Row] = []
    for lineno, cells in enumerate(reader, 2):
        if not cells or not "".join(cells).strip():
            continue
        where = f"{path}:{lineno}"
        if len(cells) < len(header):
            raise InvalidInputError(f"{where}: {len(cells)} columns where the header has {len(header)}")
        try:
            ts, req, resp = (float(cells[at[0]]), float(cells[at[1]]), float(cells[at[2]]))
        except ValueError as exc:
            raise InvalidInputError(f"{where}: not a number ({exc})") from exc
        rows.append((_time(ts, where), _int(req, "Request tokens", where),
                     _int(resp, "Response tokens", where), None))
    return "burstgpt-csv", rows


def _finish(path: Path, fmt: str, rows: list[Row]) -> Trace:
    trace = Trace(fmt)
    kept = [r for r in rows if r[1] > 0 and r[2] > 0]
    trace.skipped = len(rows) - len(kept)
    if any(b[0] < a[0] for a, b in zip(kept, kept[1:], strict=False)):
        kept.sort(key=lambda r: r[0])  # stable: rows of one time keep their order
        trace.sorted = True
    if len(kept) > MAX_ARRIVALS:
        trace.truncated = len(kept) - MAX_ARRIVALS
        kept = kept[:MAX_ARRIVALS]
    if not kept:
        raise InvalidInputError(f"{path}: no arrival with input and output tokens in the trace")
    t0 = kept[0][0]
    if kept[-1][0] - t0 > MAX_SPAN_S:
        late = next(i for i, r in enumerate(kept) if r[0] - t0 > MAX_SPAN_S)
        raise InvalidInputError(
            f"{path}: an arrival {(kept[late][0] - t0) / DAY_S:,.0f} days after the first (its row "
            f"{late + 1} in time order): a trace spans at most {MAX_SPAN_S / DAY_S:g} days",
            hint="is a timestamp in the wrong unit? Mooncake's are milliseconds, BurstGPT's seconds")
    with_blocks = fmt == "mooncake" and any(r[3] for r in kept)
    trace.blocks = [r[3] or () for r in kept] if with_blocks else None
    for ts, inp, out, _ in kept:
        trace.times.append(ts - t0)
        trace.inputs.append(inp)
        trace.outputs.append(out)
    return trace


def check_replay(source: Prompts, stage: Stage, duration_s: float | None) -> None:
    """UsageError (before the run) when replaying ``source``'s trace at the stage's speed would last longer
    than the longest stage, and no ``--duration`` ends it sooner; nothing for other sources."""
    if not isinstance(source, TracePrompts) or not isinstance(stage, TraceStage) or duration_s is not None:
        return
    span = source.trace.times[-1]
    if span / stage.speed <= MAX_REPLAY_S:
        return
    need = span / MAX_REPLAY_S
    raise UsageError(
        f"the trace spans {span / DAY_S:,.1f} days: replayed at --trace-speed {stage.speed:g} it would take "
        f"{span / stage.speed / DAY_S:,.1f} days, more than the longest stage ({MAX_REPLAY_S / DAY_S:g} "
        "days)",
        hint=f"give --trace-speed {need:.3g} or more, or --duration to replay its beginning")


def describe(trace: Trace) -> dict[str, Any]:
    """The record of the trace (``workload.trace``): its layout, arrivals, span, lengths and block sharing."""
    n = len(trace)
    out: dict[str, Any] = {
        "format": trace.format,
        "arrivals": n,
        "span_s": trace.times[-1],
        "input_tokens_mean": sum(trace.inputs) / n,
        "output_tokens_mean": sum(trace.outputs) / n,
        "time_origin": "the first arrival (arrival times are kept relative to it)",
    }
    if trace.skipped:
        out["rows_left_out"] = f"{trace.skipped} rows with 0 input or 0 output tokens (failed in the trace)"
    if trace.sorted:
        out["sorted"] = "the file was out of time order: its rows are replayed sorted by time"
    if trace.truncated:
        out["truncated"] = f"{trace.truncated} arrivals after the first {MAX_ARRIVALS:,} are not replayed"
    if trace.blocks is not None:
        total = sum(len(b) for b in trace.blocks)
        distinct = len({(pos, h) for b in trace.blocks for pos, h in enumerate(b)})
        out["hash_blocks"] = {
            "block_tokens": BLOCK_TOKENS,
            "blocks": total,
            "distinct": distinct,
            "repeated_share": (total - distinct) / total if total else 0.0,
            "how": "each hash id is a block of the prompt made from the id's own seed: shared ids are shared "
            "text",
        }
    return out


class TracePrompts(Prompts):
    """The trace's arrivals as prompts (``next_arrival`` says when the next one is due)."""

    def __init__(self, trace: Trace, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, limit=len(trace), **kwargs)
        self.trace = trace
        self.warm_make: Make | None = None
        self.lengthened = 0  # arrivals shorter than the chat template: made one token longer than it

    def report(self) -> dict[str, Any]:
        out = super().report()
        if self.lengthened:
            out["trace_prompts_lengthened"] = (
                f"{self.lengthened} arrivals asked for no more input tokens than the chat template has: "
                "they were made one token longer than it"
            )
        return out

    def next_arrival(self) -> float | None:
        """Seconds after the first arrival at which the next prompt is due (None: the trace has ended)."""
        i = self._next
        return self.trace.times[i] if self._within(i) else None

    def warmup(self, count: int) -> Prompts:
        """Prompts for an unmeasured warm-up: the lengths of the trace's first arrivals, text of their own
        (no shared blocks, so the warm-up fills no cache the replay would find)."""
        assert self.warm_make is not None
        return Prompts(self.warm_make, {}, label="making warm-up prompts", limit=max(0, count))


async def open_trace(spec: DatasetSpec, tok: Tokenizer | None, chat: bool,
                     on_step: Step | None) -> TracePrompts:
    """The source of the trace ``spec.path`` (the module docstring)."""
    assert spec.path is not None
    trace = read_trace(spec.path)
    meta: dict[str, Any] = {"dataset": "trace", "path": str(spec.path), "sha256": file_sha256(spec.path),
                            "seed": spec.seed, "trace": describe(trace), "trace_format": trace.format,
                            "distinct_prompts": len(trace)}
    if spec.output_len is not None:
        meta["output_len"] = spec.output_len
    maker: Composer | None = None
    if tok is not None:
        try:
            maker = await learn(tok, chat, spec.seed, meta, on_step)
        except EngineError as exc:
            meta["input_len_note"] = f"server tokenizer failed ({exc.message}); lengths estimated"
    if maker is None:
        meta["input_len_method"] = "estimate: one word per token" + (
            " (chat template tokens not counted)" if chat else "")
    blocks = _Blocks(maker, spec.seed)

    async def prompt(i: int, seed: str, shared: bool) -> Prompt:
        rng = random.Random(f"{seed}/{spec.seed}/{i}")
        want = trace.inputs[i]
        if maker is not None and want <= maker.fixed:
            source.lengthened += 1
            want = maker.fixed + 1
        out = spec.output_len if spec.output_len is not None else trace.outputs[i]
        ids = trace.blocks[i] if shared and trace.blocks is not None else ()
        if maker is None:
            text = await blocks.words(ids, want, rng)
            return Prompt(text=text, output_len=out, target_len=want, arrival_s=trace.times[i])
        if ids and not maker.exact:
            text, n = await blocks.compose(ids, want, rng)
        else:
            text, n = await maker.make(rng, want)
        return Prompt(text=text, output_len=out, input_len=n, target_len=want, arrival_s=trace.times[i])

    async def make(i: int) -> Prompt:
        return await prompt(i, "gpuledger-trace", True)

    async def warm(i: int) -> Prompt:
        return await prompt(i % len(trace), "gpuledger-trace-warmup", False)

    source = TracePrompts(trace, make, meta, lookahead=LOOKAHEAD, label="making the trace's prompts")
    source.warm_make = warm
    if maker is not None:
        await check_counts(maker, source, on_step)
        source.notes = maker.notes
        if maker.exact and trace.blocks is not None:
            meta["trace"]["hash_blocks"]["note"] = (
                "the server's tokenizer counts did not add up word by word: each prompt was cut to length on "
                "its own, so the trace's shared blocks are not shared text in this replay"
            )
    return source


class _Blocks:
    """The text of a trace's blocks: block id ``h`` at position ``j`` of a prompt, ``n`` tokens of it, made
    from ``h``'s own seed (kept for the last ``CACHED_BLOCKS`` blocks used)."""

    def __init__(self, maker: Composer | None, seed: int) -> None:
        self._maker = maker
        self._seed = seed
        self._cache: OrderedDict[tuple[int, int, bool], tuple[str, int]] = OrderedDict()

    def _sizes(self, count: int, want: int, fixed: int) -> list[int]:
        """Content tokens of each of ``count`` blocks in a prompt of ``want`` tokens (the first holds the
        template's ``fixed``; the last what is left)."""
        sizes = []
        left = want - fixed
        for j in range(count):
            size = min(left, BLOCK_TOKENS - (fixed if j == 0 else 0))
            if size <= 0:
                break
            sizes.append(size)
            left -= size
        if left > 0:  # more tokens than the blocks cover: the rest is the prompt's own
            sizes.append(-left)
        return sizes

    async def _block(self, h: int, n: int, first: bool) -> tuple[str, int]:
        key = (h, n, first)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        rng = random.Random(f"gpuledger-block/{self._seed}/{h}")
        if self._maker is None:
            made = (await random_words(rng, n), n)
        else:
            made = await self._maker.span(rng, n, first=first)
        self._cache[key] = made
        if len(self._cache) > CACHED_BLOCKS:
            self._cache.popitem(last=False)
        return made

    async def compose(self, ids: tuple[int, ...], want: int, rng: random.Random) -> tuple[str, int]:
        assert self._maker is not None
        fixed = self._maker.fixed
        parts: list[str] = []
        got = fixed
        for j, size in enumerate(self._sizes(len(ids), want, fixed)):
            if size < 0:
                text, n = await self._maker.span(rng, -size, first=not parts)
            else:
                text, n = await self._block(ids[j], size, j == 0)
            if text:
                parts.append(text)
                got += n
        return " ".join(parts), got

    async def words(self, ids: tuple[int, ...], want: int, rng: random.Random) -> str:
        parts = []
        for j, size in enumerate(self._sizes(len(ids), want, 0)):
            if size < 0:
                parts.append(await random_words(rng, -size))
            else:
                parts.append((await self._block(ids[j], size, j == 0))[0])
        return " ".join(p for p in parts if p)


__all__ = ["BLOCK_TOKENS", "MAX_ARRIVALS", "MAX_REPLAY_S", "MAX_SPAN_S", "Trace", "TracePrompts",
           "check_replay", "describe", "open_trace", "read_trace"]
