"""Image generation: diffusers in-process, a ComfyUI workflow, an OpenAI-style image server, measured in
images (seconds per image, denoising steps per second)."""

from gpuledger.records.kinds import WorkloadKind

KIND = WorkloadKind(
    name="image",
    about="image generation: diffusers (default), comfyui or openai-images (docs/image.md)",
    package=__name__,
    unit="image",
    summary_kinds=("image_generation",),
    spec_kinds=("image",),
    order=2,
)
