"""Before the window: the prompt source a run pulls from, and after it, whether the prompts the server
counted are the ones the run asked for.

``open_prompts`` opens the spec's prompt source (``workload.prompts``: learning the server's tokenizer and
chat template, reading a dataset file) and makes the first prompts the first requests need, at most
``PREPARE_MAX`` of them (and ``PREPARE_BYTES`` of text): the rest are made as the run sends, so the time
before the first request does not grow with ``--num-requests``. The runner runs it as a task a signal
cancels (``Interrupted``: no run was created).

``PromptCheck`` compares, over the measured requests whose prompt asked a length, the prompt tokens the
server reported (``usage.prompt_tokens``) with the requested ones: more than ``PROMPT_TOLERANCE`` apart in
total is a warning (one line, stored with the run's warnings) and the record's ``prompt_tokens_check``.
"""

from __future__ import annotations

from typing import Any

from gpuledger.engines import GenResult
from gpuledger.records.spec import DatasetSpec, TokenIdDataset
from gpuledger.tokenizer import Tokenizer
from gpuledger.workload.prompts import Prompts, Step, open_source

PREPARE_MAX = 256
PREPARE_BYTES = 64 * 2**20
BYTES_PER_TOKEN = 8  # a generous estimate of a random prompt's text per token
PROMPT_TOLERANCE = 0.05


def prepare_count(spec: DatasetSpec | TokenIdDataset, wanted: int) -> int:
    """How many prompts to make before the window: ``wanted`` (the warm-up and the first requests in
    flight), at most ``PREPARE_MAX`` and ``PREPARE_BYTES`` of text."""
    length = spec.input_len if isinstance(spec, DatasetSpec) and spec.input_len else 128
    by_bytes = max(1, PREPARE_BYTES // max(1, length * BYTES_PER_TOKEN))
    return max(0, min(wanted, PREPARE_MAX, by_bytes))


async def open_prompts(spec: DatasetSpec | TokenIdDataset, tokenizer: Tokenizer | None, *, chat: bool,
                       first: int, on_step: Step | None = None) -> Prompts:
    """The opened source with its first ``first`` prompts made (see the module docstring)."""
    source = await open_source(spec, tokenizer, chat=chat, on_step=on_step)
    try:
        await source.prepare(prepare_count(spec, first), on_step)
    except BaseException:
        await source.aclose()
        raise
    return source


class PromptCheck:
    """Server-reported prompt tokens against the requested ones (see the module docstring)."""

    def __init__(self, meta: dict[str, Any]) -> None:
        self._meta = meta
        self.requests = 0
        self.requested = 0
        self.reported = 0
        self.off = 0

    def add(self, target: int, res: GenResult) -> None:
        """One finished request whose prompt asked ``target`` tokens."""
        got = res.input_tokens
        if res.error is not None or res.token_source != "server_usage" or got is None:
            return
        self.requests += 1
        self.requested += target
        self.reported += got
        self.off += abs(got - target) > PROMPT_TOLERANCE * target

    def record(self) -> dict[str, Any] | None:
        """``workload.prompt_tokens_check`` (None: no request to compare: the server reported no usage)."""
        if not self.requests:
            return None
        return {
            "requests": self.requests,
            "requested_tokens_total": self.requested,
            "server_tokens_total": self.reported,
            "requests_off_by_more_than_5_percent": self.off,
            "source": "the server's usage.prompt_tokens of the measured requests",
        }

    def warning(self) -> str | None:
        """One line when the totals are more than 5 % apart, with the likely reason."""
        if not self.requests or not self.requested:
            return None
        ratio = self.reported / self.requested - 1
        if abs(ratio) <= PROMPT_TOLERANCE:
            return None
        asked, got = self.requested / self.requests, self.reported / self.requests
        method = str(self._meta.get("input_len_method") or "")
        if method.startswith("estimate"):
            why = "the lengths were estimated (the server has no tokenizer endpoint to count them)"
        elif self._meta.get("chat_template_tokens") is None and "chat_template_note" in self._meta:
            why = str(self._meta["chat_template_note"])
        else:
            why = "the server counts the prompts differently from its tokenizer endpoint"
        return (
            f"prompt tokens: the server counted {got:,.1f} per request where {asked:,.1f} were asked "
            f"({ratio:+.0%}; {self.off} of {self.requests} requests off by more than 5 %): {why}"
        )
