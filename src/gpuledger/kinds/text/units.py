"""The units a run of LLM inference counts (``records.units``: how each is named and priced), and the names
``compare --basis`` knows them by. Imported by the kind's summaries (``summary.py``, ``published.py``)."""

from __future__ import annotations

from gpuledger.records.units import register_alias, register_unit

register_unit("output_token", "output tokens", 1e6, short="output tok")
register_unit("input_token", "input tokens", 1e6, short="input tok")
register_unit("token", "tokens", 1e6, short="tok")
register_unit("request", "requests", 1)
register_unit("good_request", "good requests", 1)
register_unit("answer_token", "answer tokens", 1e6, short="answer tok")
register_unit("good_output_token", "good output tokens", 1e6, short="good output tok")
# compare --basis output | total (the names it always had)
register_alias("output", "output_token", "output tokens")
register_alias("total", "token", "total tokens")
