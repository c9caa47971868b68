"""``gpuledger bench``'s options for ``--task train`` (docs/train.md): their declarations, importable alone
(the help imports nothing of the bench). The values make ``kinds.train.options.TrainOptions``, which checks
them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SeqLenOpt = Annotated[int | None, typer.Option("--seq-len", help="train: tokens per sequence (default 512).")]
GradAccumOpt = Annotated[
    int | None, typer.Option("--grad-accum", help="train: micro-batches per optimizer step (default 1).")
]
WarmupStepsOpt = Annotated[
    int | None, typer.Option("--warmup-steps", help="train: steps run first and not measured (default 2).")
]
OptimizerOpt = Annotated[
    str | None, typer.Option("--optimizer", help="train: adamw (default) or sgd (momentum 0.9).")
]
LearningRateOpt = Annotated[
    float | None, typer.Option("--learning-rate", help="train: the optimizer's learning rate (default 1e-4).")
]
CheckpointingOpt = Annotated[
    bool, typer.Option("--activation-checkpointing", help="train: recompute activations in the backward.")
]
CompileOpt = Annotated[bool, typer.Option("--compile", help="train: torch.compile the model.")]
DataOpt = Annotated[
    Path | None,
    typer.Option("--data", help='train: a text or JSONL ({"text": ...} per line) file, tokenised with the '
                 "model folder's tokenizer (default: random token ids)."),
]
