"""The built-in image pipelines: each published architecture built from its authors' configs has the
published parameter count (within 2 %, on the meta device: no memory), every config names its source, and
the tiny one runs on this CPU through the diffusers engine with its stage times measured."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import psutil
import pytest

pytest.importorskip("diffusers")

from gpuledger.engines.image.base import ImageResult, request_for
from gpuledger.engines.image.catalog import dummy_pipeline, dummy_pipelines
from gpuledger.engines.image.diffusers_engine import CPU_MEMORY_NOTE, DiffusersEngine
from gpuledger.engines.image.pipelines import build_dummy, component_parameters, estimate_memory
from gpuledger.errors import ResourceError, UsageError
from gpuledger.kinds.image.spec import ImageSpec
from gpuledger.kinds.image.summary import summarize_images

PUBLISHED = ["sd15", "sdxl", "sd3-medium", "flux-dev"]


@pytest.mark.parametrize("name", PUBLISHED)
def test_each_architecture_has_its_published_parameter_count(name: str) -> None:
    spec = dummy_pipeline(f"dummy:{name}")
    counts = component_parameters(spec)
    assert spec.published, f"{name} states no published size"
    for pub in spec.published:
        built = sum(counts[c] for c in pub.components())
        assert built == pytest.approx(pub.params, rel=0.02), (name, pub.components(), built, pub.params)


def test_every_component_config_names_where_it_was_published() -> None:
    for name, spec in dummy_pipelines().items():
        for comp, model in spec.models().items():
            if name != "tiny-sd":
                assert model.source.startswith(f"https://huggingface.co/{spec.hf_id}/blob/main/{comp}/"), comp
        for pub in spec.published:
            assert pub.source.startswith("https://") and pub.text


def test_the_tiny_pipeline_is_a_few_megabytes() -> None:
    assert sum(component_parameters(dummy_pipeline("dummy:tiny-sd")).values()) < 3_000_000


def test_an_unknown_dummy_names_the_built_in_ones() -> None:
    with pytest.raises(UsageError, match="dummy:sd15, dummy:sdxl"):
        dummy_pipeline("dummy:sd9")


def _run(spec: ImageSpec, n: int, thumbs: int = 1) -> tuple[list[ImageResult], DiffusersEngine]:
    async def go() -> tuple[list[ImageResult], DiffusersEngine]:
        engine = DiffusersEngine(spec)
        await engine.open(1)
        out = []
        try:
            for i in range(n):
                out.append(
                    await engine.generate_image(
                        request_for(
                            i,
                            seed=spec.seed or 0,
                            steps=spec.steps,
                            height=spec.height,
                            width=spec.width,
                            batch_size=spec.batch_size or 1,
                            guidance=spec.guidance,
                            keep_thumbnail=i < thumbs,
                        )
                    )
                )
        finally:
            await engine.close()
        return out, engine

    return asyncio.run(go())


@pytest.mark.slow
def test_tiny_sd_on_the_cpu_measures_each_stage_and_every_step() -> None:
    spec = ImageSpec(
        engine="diffusers",
        model="dummy:tiny-sd",
        steps=4,
        height=64,
        width=64,
        batch_size=2,
        seed=3,
        device="cpu",
    )
    results, engine = _run(spec, 2)
    for r in results:
        assert r.error is None and r.images == 2 and (r.width, r.height) == (64, 64)
        # PNDM with skip_prk_steps runs one step more than asked (its published behaviour): what ran counts
        assert r.steps == len(r.step_end) >= 4
        enc, den, dec = r.text_encode_s, r.denoise_s, r.decode_s
        assert enc and den and dec and enc + den + dec <= r.t_end - r.t_send
        assert r.peak_memory_bytes is None
        assert r.notes == ([] if r.steps == 4 else [
            f"PNDMScheduler ran {r.steps} denoising steps for num_inference_steps=4: steps are counted as "
            "the pipeline ran them"
        ])
    thumb = results[0].thumbnails[0]
    assert (thumb.width, thumb.height, thumb.source_width) == (64, 64, 64)
    assert base64.b64decode(thumb.png_base64)[:4] == b"\x89PNG"
    assert engine.details()["peak_device_memory"] == CPU_MEMORY_NOTE
    resolved = engine.resolved(spec)
    assert resolved.pipeline == "StableDiffusionPipeline" and resolved.attention
    assert resolved.parameters == sum(component_parameters(dummy_pipeline("dummy:tiny-sd")).values())
    s = summarize_images([r.to_record(results[0].t_send) for r in results])
    assert s.images_total == 4 and s.stage_times.denoise_s.n == 2 and s.step_it_per_s.n == 2
    assert s.steps_total == sum(r.steps * 2 for r in results)


@pytest.mark.slow
def test_a_scheduler_is_chosen_by_short_name_and_an_incompatible_one_refused() -> None:
    spec = ImageSpec(
        engine="diffusers",
        model="dummy:tiny-sd",
        steps=3,
        height=64,
        width=64,
        device="cpu",
        scheduler="euler",
    )
    results, engine = _run(spec, 1, thumbs=0)
    assert results[0].steps == 3
    assert engine.resolved(spec).scheduler == "EulerDiscreteScheduler"
    with pytest.raises(UsageError, match="--scheduler flow_euler: StableDiffusionPipeline takes"):
        _run(spec.model_copy(update={"scheduler": "flow_euler"}), 1)


def test_the_memory_estimate_counts_weights_activations_and_overhead() -> None:
    est = estimate_memory(1_000_000_000, "bf16", 2, 1024, 1024, 8 * 1024**3, "test")
    assert est.weights_bytes == 2_000_000_000
    assert est.activations_bytes == 2 * 1024 * 1024 * 128 * 6 * 2
    assert est.overhead_bytes == 100_000_000 + 512 * 1024**2
    assert est.fits is True and "available" in est.text()
    assert not estimate_memory(4_000_000_000, "fp32", 1, 1024, 1024, 8 * 1024**3, "test").fits


def test_a_pipeline_that_cannot_fit_is_refused_before_it_is_built() -> None:
    # FLUX.1-dev in fp32 on the CPU needs ~68 GB: more than this machine's RAM (else nothing to refuse)
    if psutil.virtual_memory().available > 80 * 1024**3:
        pytest.skip("this machine has the RAM for flux-dev in fp32")
    spec = ImageSpec(engine="diffusers", model="dummy:flux-dev", device="cpu", dtype="fp32")
    with pytest.raises(
        ResourceError, match=r"dummy:flux-dev \(16.9B params, fp32\) at 1024×1024.*does not fit"
    ):
        asyncio.run(DiffusersEngine(spec).open(1))


# The published architectures scaled down (every other field as published), so that each pipeline class
# runs on this CPU with the tokenizers the dummies build: SDXL's two CLIPs, SD3's two CLIPs and T5, FLUX's
# CLIP and T5.
TOY = {
    "sdxl": {
        "unet": dict(
            block_out_channels=[32, 64],
            attention_head_dim=[2, 4],
            transformer_layers_per_block=[1, 1],
            down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"],
            up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"],
            cross_attention_dim=64,
            projection_class_embeddings_input_dim=8 * 6 + 32,
            addition_time_embed_dim=8,
        ),
        "text_encoder": dict(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            projection_dim=32,
        ),
        "text_encoder_2": dict(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            projection_dim=32,
        ),
        "vae": dict(
            block_out_channels=[32, 64],
            down_block_types=["DownEncoderBlock2D"] * 2,
            up_block_types=["UpDecoderBlock2D"] * 2,
        ),
    },
    "sd3-medium": {
        "transformer": dict(
            num_layers=2,
            attention_head_dim=8,
            num_attention_heads=4,
            caption_projection_dim=32,
            joint_attention_dim=32,
            pooled_projection_dim=64,
            pos_embed_max_size=32,
            sample_size=32,
        ),
        "text_encoder": dict(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            projection_dim=32,
        ),
        "text_encoder_2": dict(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            projection_dim=32,
        ),
        "text_encoder_3": dict(d_model=32, d_ff=37, d_kv=8, num_heads=4, num_layers=2),
        "vae": dict(
            block_out_channels=[32, 64],
            down_block_types=["DownEncoderBlock2D"] * 2,
            up_block_types=["UpDecoderBlock2D"] * 2,
        ),
    },
    "flux-dev": {
        "transformer": dict(
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            pooled_projection_dim=32,
            axes_dims_rope=[4, 6, 6],
        ),
        "text_encoder": dict(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            projection_dim=32,
        ),
        "text_encoder_2": dict(d_model=32, d_ff=37, d_kv=8, num_heads=4, num_layers=2),
        "vae": dict(
            block_out_channels=[32, 64],
            down_block_types=["DownEncoderBlock2D"] * 2,
            up_block_types=["UpDecoderBlock2D"] * 2,
        ),
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TOY))
def test_each_pipeline_class_runs_with_the_built_in_tokenizers(name: str) -> None:
    import torch

    spec = dummy_pipeline(f"dummy:{name}")
    comps = {
        k: (c.model_copy(update={"config": {**c.config, **TOY[name][k]}}) if k in TOY[name] else c)
        for k, c in spec.components.items()
    }
    built = build_dummy(spec.model_copy(update={"components": comps}), torch.float32, "cpu")
    extra = {"max_sequence_length": 32} if built.max_sequence_length else {}
    out = built.pipe("a cat", num_inference_steps=2, height=64, width=64, guidance_scale=3.0, **extra)
    assert built.pipeline_class == spec.pipeline and out.images[0].size == (64, 64)


@pytest.mark.slow
def test_a_diffusers_folder_is_loaded_with_from_pretrained(tmp_path: Path) -> None:
    import torch

    from gpuledger.engines.image.pipelines import folder_parameters

    built = build_dummy(dummy_pipeline("dummy:tiny-sd"), torch.float32, "cpu")
    built.pipe.save_pretrained(tmp_path / "tiny", safe_serialization=True)
    assert folder_parameters(tmp_path / "tiny") == built.components  # read from the safetensors headers
    spec = ImageSpec(
        engine="diffusers", model=str(tmp_path / "tiny"), steps=2, height=64, width=64, device="cpu"
    )
    results, engine = _run(spec, 1, thumbs=0)
    assert results[0].error is None and results[0].images == 1
    resolved = engine.resolved(spec)
    assert resolved.pipeline == "StableDiffusionPipeline" and resolved.parameters == built.parameters
    assert resolved.memory_estimate_bytes is not None


def test_a_folder_that_is_not_a_diffusers_pipeline_is_refused(tmp_path: Path) -> None:
    from gpuledger.errors import InvalidInputError

    spec = ImageSpec(engine="diffusers", model=str(tmp_path), device="cpu")
    with pytest.raises(InvalidInputError, match="not a diffusers folder"):
        asyncio.run(DiffusersEngine(spec).open(1))
