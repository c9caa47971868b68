"""PyTorch training in-process, on one device or data parallel under torchrun, measured in training tokens
(step time by phase, loss, MFU)."""

from gpuledger.records.kinds import EngineName, WorkloadKind

KIND = WorkloadKind(
    name="train",
    about="training: in-process PyTorch, data parallel under torchrun (docs/train.md)",
    package=__name__,
    unit="training_token",
    summary_kinds=("training",),
    spec_kinds=("training",),
    order=3,
    engines=(
        EngineName("torch-train", "in-process PyTorch training (--task train --engine torch)", "training"),
    ),
    default_engine="torch-train",
    items="steps",
    engine_aliases={"torch": "torch-train"},
    flags=("steps", "batch_size", "seq_len", "grad_accum", "warmup_steps", "optimizer", "learning_rate",
           "activation_checkpointing", "compile", "data"),
)
