"""Image generation: diffusers in-process, a ComfyUI workflow, an OpenAI-style image server, measured in
images (seconds per image, denoising steps per second)."""

from gpuledger.records.kinds import EngineName, WorkloadKind

KIND = WorkloadKind(
    name="image",
    about="image generation: diffusers (default), comfyui or openai-images (docs/image.md)",
    package=__name__,
    unit="image",
    summary_kinds=("image_generation",),
    spec_kinds=("image",),
    order=2,
    engines=(
        EngineName("diffusers", "in-process image generation (diffusers pipelines)", "image"),
        EngineName("comfyui", "a ComfyUI server running your workflow (API format)", "image",
                   default_base_url="http://127.0.0.1:8188"),
        EngineName("openai-images",
                   "OpenAI-compatible /v1/images/generations (vLLM-Omni, SGLang, LocalAI, …)", "image",
                   default_base_url="http://127.0.0.1:8000"),
    ),
    default_engine="diffusers",
    items="requests",
    flags=("steps", "height", "width", "batch_size", "guidance", "scheduler", "num_images", "workflow", "set",
           "prompt", "negative_prompt"),
)
