"""PyTorch training in-process, on one device or data parallel under torchrun, measured in training tokens
(step time by phase, loss, MFU)."""

from gpuledger.records.kinds import WorkloadKind

KIND = WorkloadKind(
    name="train",
    about="training: in-process PyTorch, data parallel under torchrun (docs/train.md)",
    package=__name__,
    unit="training_token",
    summary_kinds=("training",),
    spec_kinds=("training",),
    order=3,
)
