"""LLM inference: requests to a server (OpenAI-compatible, Ollama) or an in-process PyTorch model, measured in
output tokens (TTFT, TPOT, ITL, E2E per request)."""

from gpuledger.records.kinds import WorkloadKind

KIND = WorkloadKind(
    name="text",
    about="LLM inference: a server (openai, ollama) or in-process PyTorch (torch)",
    package=__name__,
    # What RunInfo.unit of a text run has always said (every document of one pins it); its summaries'
    # headline unit is output_token (TextGenerationSummary.HEADLINE).
    unit="token",
    summary_kinds=("text_generation", "published_inference"),
    spec_kinds=("server", "torch"),
    order=1,
)
