"""The seed essay's selection criteria (§7.1 "when AMD is worth it", §7.2 "when NVIDIA's advantage is
clear") as explicit questions the advisor asks, and what each answer does to the ranking.

Each answer acts on numbers the ranking already has — never a hidden weight:

- ``framework`` (§7.2 "relies on PyTorch, TensorFlow, vLLM, TensorRT"; "needs to debug CUDA kernels"):
  ``tensorrt-llm`` and ``cuda-kernels`` exist on NVIDIA only, so AMD GPUs are not ranked; ``vllm``,
  ``sglang``, ``pytorch``, ``ollama`` run on both (ROCm builds), so nothing is removed.
- ``team`` (§7.1 "time and energy to troubleshoot ROCm", §7.2 "no dedicated driver and platform people"):
  ``rocm`` or ``both`` — the team has set ROCm up before, so the essay's two-week ROCm setup is replaced by
  the CUDA afternoon; ``cuda`` or ``none`` keep the essay's example. (Setup hours you state or the doctor
  ledger measured are never replaced.)
- ``time_to_production_days`` (§7.2 "needs to go to production fast"): a deployment whose setup takes more
  working days (8 h each) than you have is not ranked.
- ``memory_gb`` (§7.1 "needs large memory on a limited budget"): a deployment whose GPUs together have less
  memory than you need (weights, context and headroom you plan for) is not ranked.
- ``budget_per_hour`` (§7.1 "budget-sensitive"): a deployment whose hourly cost (hardware or rental, energy,
  labour) is over it is not ranked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuledger.catalog.catalog import parse_yaml_mapping
from gpuledger.errors import InvalidInputError, NotFoundError

Framework = Literal["any", "vllm", "sglang", "pytorch", "ollama", "tensorrt-llm", "cuda-kernels"]
Team = Literal["cuda", "rocm", "both", "none"]
NVIDIA_ONLY: tuple[str, ...] = ("tensorrt-llm", "cuda-kernels")
MAX_ANSWERS_BYTES = 100_000


class Answers(BaseModel):
    """The answers (flags, or a YAML file with these keys). Unanswered: the question does not act."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    framework: Framework | None = None
    team: Team | None = None
    time_to_production_days: float | None = Field(default=None, gt=0, le=3650)
    memory_gb: float | None = Field(default=None, gt=0, le=1e6)
    budget_per_hour: float | None = Field(default=None, gt=0, le=1e9)

    def merged(self, other: Answers) -> Answers:
        """These answers with ``other``'s given ones on top (flags over the file)."""
        return self.model_copy(update=other.model_dump(exclude_none=True))


# key -> (question, the essay's words it comes from, what the answers are)
QUESTIONS: dict[str, tuple[str, str, str]] = {
    "framework": (
        "Which serving stack must it run?",
        "§7.2: relies on mainstream frameworks (PyTorch, vLLM, TensorRT); needs to debug CUDA kernels",
        "any | vllm | sglang | pytorch | ollama | tensorrt-llm | cuda-kernels",
    ),
    "team": (
        "Which stack has your team set up and maintained before?",
        "§7.1: time and energy to troubleshoot ROCm; §7.2: no dedicated driver and platform people",
        "cuda | rocm | both | none",
    ),
    "time_to_production_days": (
        "In how many working days must it serve production?",
        "§7.2: needs to go to production fast and run stably",
        "a number of days",
    ),
    "memory_gb": (
        "How much GPU memory must one deployment have (GB)?",
        "§7.1: needs large memory on a limited budget",
        "a number of GB",
    ),
    "budget_per_hour": (
        "What may the deployment cost per hour (the profiles' currency)?",
        "§7.1: budget-sensitive, mostly well-supported inference",
        "a money amount per hour",
    ),
}


def read_answers(path: Path) -> Answers:
    """``--answers FILE``: a YAML mapping of the questions' keys; a wrong key or value is one line naming
    it."""
    where = f"answers file {path}"
    if not path.is_file():
        raise NotFoundError(f"{where}: no such file")
    if path.stat().st_size > MAX_ANSWERS_BYTES:
        raise InvalidInputError(f"{where}: larger than {MAX_ANSWERS_BYTES:,} bytes: not an answers file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{where}: not readable as UTF-8 text ({type(exc).__name__})") from exc
    data = parse_yaml_mapping(text, where)
    return answers_from(data, where)


def answers_from(data: dict[str, object], where: str) -> Answers:
    try:
        return Answers.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(answers)"
        if err["type"] == "extra_forbidden":
            raise InvalidInputError(
                f"{where}: {key!r} is not a question (the questions: {', '.join(QUESTIONS)})"
            ) from None
        raise InvalidInputError(f"{where}: {key}: {err['msg']}") from None
