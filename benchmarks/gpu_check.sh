#!/usr/bin/env bash
# The ONE prepared script for a real GPU (issue 10): `gpuledger doctor --deep --json` and
# `gpuledger run --model dummy:qwen2.5-7b --html ...`, kept under benchmarks/results/<date>-<gpu>/.
#
#   benchmarks/gpu_check.sh prepare       HERE (needs PyPI): download into .whl/ the Python wheels the GPU
#                                         machine lacks. Its image has torch, transformers, typer's world,
#                                         psutil, aiohttp, PyYAML, nvidia-ml-py ... but not pydantic,
#                                         SQLAlchemy, alembic, orjson, plotly, platformdirs (KINDS.md).
#   benchmarks/gpu_check.sh run           ON THE GPU MACHINE: writes ${OUT:-benchmarks/results}/<date>-<gpu>/
#                                         (9 files: doctor-deep.json, run.json, image-sdxl.json,
#                                         train-qwen2.5-0.5b.json, report.html, report.md, gpuledger.sqlite,
#                                         nvidia-smi.txt, log.txt). Needs no network. image-sdxl.json:
#                                         `bench --task image --model dummy:sdxl` at 1024×1024, 20 steps
#                                         (issue 18). train-qwen2.5-0.5b.json: `bench --task train --model
#                                         dummy:qwen2.5-0.5b`, bf16, 4 × 1,024 tokens, 20 steps (issue 17).
#   benchmarks/gpu_check.sh collect DIR   HERE: copy DIR/<date>-<gpu>/ (what came back from $OUT) into
#                                         benchmarks/results/.
#
# With this workplace's device tool (one call, ~4-5 minutes of the 15 device minutes; see
# /work/.library/device/README.md):
#   1. benchmarks/gpu_check.sh prepare
#   2. run(command="bash benchmarks/gpu_check.sh run", carry=[".whl"], timeout_s=540)
#   3. benchmarks/gpu_check.sh collect <files_at>      then quote the figures in README.md
# On your own GPU box with gpuledger installed (`pip install -e '.[torch]'`), `run` works as is: without
# .whl/ it uses the installed packages and writes straight into benchmarks/results/.
# Environment: GPU_CHECK_MODEL (default dummy:qwen2.5-7b), GPU_CHECK_RUN_ARGS (more `gpuledger run` flags,
# e.g. "--quick"), GPU_CHECK_STEP_TIMEOUT_S (each step's limit, default 240).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHL="$REPO/.whl"
# Pure-Python or cp312 manylinux wheels, pinned to the versions gpuledger is tested with. --no-deps: each
# dependency the GPU image lacks is named here (typing-extensions and narwhals are newer than some images').
WHEELS=(
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing-extensions==4.16.0 SQLAlchemy==2.1.9 greenlet==3.5.6 alembic==1.20.1 Mako==1.4.3
  platformdirs==4.14.8 orjson==3.13.0 plotly==7.1.0 narwhals==2.29.0 typer==0.29.2 click==8.5.1
  rich==15.0.0 diffusers==0.42.1 accelerate==1.15.0
)
MODEL="${GPU_CHECK_MODEL:-dummy:qwen2.5-7b}"
read -r -a RUN_EXTRA <<<"${GPU_CHECK_RUN_ARGS:-}"   # e.g. "--quick" or "--device cpu"
STEP_TIMEOUT_S="${GPU_CHECK_STEP_TIMEOUT_S:-240}"

prepare() {
  local py="${PYTHON:-$REPO/.venv/bin/python}"
  [ -x "$py" ] || py=python3
  mkdir -p "$WHL"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHL" "${WHEELS[@]}"
  ls -1 "$WHL"
  du -sh "$WHL"
}

slug() { tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//'; }

run() {
  cd "$REPO"
  local site="" gpu date res log
  if compgen -G "$WHL/*.whl" >/dev/null; then
    site="$(mktemp -d /tmp/gpuledger-site.XXXXXX)"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "$WHL"/*.whl
  fi
  export PYTHONPATH="$REPO/src${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 | slug || true)"
  if [ -z "$gpu" ]; then
    gpu="$(python3 -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")' \
      2>/dev/null | slug || true)"
  fi
  date="$(date -u +%Y-%m-%d)"
  res="${OUT:-$REPO/benchmarks/results}/$date-${gpu:-unknown}"
  mkdir -p "$res"
  log="$res/log.txt"
  export GPULEDGER_DB="sqlite:///$res/gpuledger.sqlite"
  GPULEDGER_DATA_DIR="$(mktemp -d /tmp/gpuledger-data.XXXXXX)"
  export GPULEDGER_DATA_DIR

  {
    echo "gpu_check $(date -u +%FT%TZ) on $(hostname) — model $MODEL"
    echo "git: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
      "$(git -C "$REPO" status --porcelain 2>/dev/null | wc -l | tr -d ' ') changed files"
    python3 - <<'PY'
import importlib, platform
print("python", platform.python_version())
for name in ("torch", "transformers", "diffusers", "pydantic", "sqlalchemy", "plotly", "typer", "gpuledger"):
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', '?')} ({getattr(mod, '__file__', '?')})")
    except ImportError as exc:
        print(f"{name} MISSING: {exc}")
try:
    import torch
    print("torch build: cuda", torch.version.cuda, "hip", getattr(torch.version, "hip", None),
          "| cuda available:", torch.cuda.is_available())
except ImportError:
    pass
PY
  } >"$log" 2>&1
  nvidia-smi -q >"$res/nvidia-smi.txt" 2>&1 || echo "nvidia-smi -q failed (exit $?)" >>"$log"

  # Each step: its own time limit (SIGINT first: gpuledger keeps a partial run as `incomplete`).
  # doctor exits 1/2 for warnings/errors: that is a finding, not a failure of this script.
  step() {
    local out="$1"; shift
    local rc=0 t0=$SECONDS
    echo "== gpuledger $*" >>"$log"
    timeout --signal=INT --kill-after=30 "$STEP_TIMEOUT_S" python3 -m gpuledger.cli.main "$@" \
      >"$out" 2>>"$log" || rc=$?
    echo "   exit $rc after $((SECONDS - t0)) s" >>"$log"
    return 0
  }
  step "$res/doctor-deep.json" doctor --deep --json
  step "$res/run.json" run --model "$MODEL" --html "$res/report.html" --json --label "gpu_check $date" \
    ${RUN_EXTRA[@]+"${RUN_EXTRA[@]}"}

  # Image generation (issue 18): the SDXL architecture with random weights, 1024×1024, 20 steps.
  step "$res/image-sdxl.json" bench --task image --engine diffusers --model dummy:sdxl --steps 20 \
    --height 1024 --width 1024 --num-images 4 --dtype bf16 --json --label "gpu_check $date image"

  # Training (issue 17): Qwen2.5-0.5B's architecture with random weights, bf16 autocast, AdamW, 20 steps of
  # 4 sequences of 1,024 tokens; MFU against the catalog's peak of the GPU.
  step "$res/train-qwen2.5-0.5b.json" bench --task train --engine torch --model dummy:qwen2.5-0.5b \
    --batch-size 4 --seq-len 1024 --steps 20 --warmup-steps 3 --dtype bf16 --json \
    --label "gpu_check $date train"

  local run_id
  run_id="$(python3 - "$res/run.json" <<'PY'
import json, sys
try:
    print(json.load(open(sys.argv[1]))["run_id"])
except (OSError, ValueError, KeyError):
    pass
PY
)"
  if [ -n "$run_id" ]; then
    step /dev/null report "$run_id" --md "$res/report.md"
  else
    echo "no run id in run.json: report.md not written" >>"$log"
  fi
  cat "$log"
  echo "results in $res:"
  ls -la "$res"
}

collect() {
  local src="${1:?usage: gpu_check.sh collect DIR (the folder the device files came back in)}"
  local found=0 d
  for d in "$src"/*/; do
    [ -f "$d/run.json" ] || [ -f "$d/doctor-deep.json" ] || continue
    mkdir -p "$REPO/benchmarks/results"
    cp -R "$d" "$REPO/benchmarks/results/"
    chmod -R u+w "$REPO/benchmarks/results/$(basename "$d")"
    echo "copied $(basename "$d") -> benchmarks/results/$(basename "$d")"
    found=1
  done
  [ "$found" = 1 ] || { echo "no <date>-<gpu>/ folder with run.json under $src" >&2; exit 3; }
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  collect) shift; collect "$@" ;;
  *) sed -n '2,27p' "$0"; exit 2 ;;
esac
