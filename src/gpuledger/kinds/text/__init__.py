"""LLM inference: requests to a server (OpenAI-compatible, Ollama) or an in-process PyTorch model, measured in
output tokens (TTFT, TPOT, ITL, E2E per request)."""

from gpuledger.records.kinds import EngineName, WorkloadKind

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
    engines=(
        EngineName("openai", "OpenAI-compatible servers: vLLM, SGLang, llama.cpp, TGI, …", "server",
                   (("completions", "prompt"), ("chat", "chat")), "http://127.0.0.1:8000"),
        EngineName("ollama", "Ollama's native API", "server", (("generate", "prompt"), ("chat", "chat")),
                   "http://127.0.0.1:11434"),
        EngineName("torch", "in-process PyTorch", "torch"),
    ),
    default_engine="openai",
    items="requests",
    flags=("model_config", "turns", "think_time", "prefix_len", "prefix_groups", "prefix_ratio", "trace",
           "trace_speed"),
)
