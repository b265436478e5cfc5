#!/usr/bin/env bash
# On a lent GPU machine (device tool: `run` with command `bash tools/gpu/run.sh`, carry [".whl"],
# timeout_s 595): the main job on CUDA alone first, then README's test suite on the time left. Each
# writes its report, durations and every failure's text under $OUT as it happens, so a cut run still
# says what failed. Compiles stay in process (a Triton torch starts a compile pool per process).
#   MAIN_S: seconds for the main job (default 280); TOTAL_S: for both (default 575)
set -uo pipefail
out="${OUT:-/tmp/out}"; mkdir -p "$out"
start=$(date +%s)
python3 -m pip install --quiet --no-index --find-links .whl --no-deps .whl/*.whl 2>&1 | tail -2
export PYTHONPATH="$PWD" TORCHINDUCTOR_COMPILE_THREADS=1
python3 - <<'PY' | tee "$out/machine.txt"
import platform, torch, triton
print("torch", torch.__version__, "triton", triton.__version__, "python", platform.python_version())
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none", "cores", __import__("os").cpu_count())
PY
workers=$(( $(nproc) - 2 ))
timeout "${MAIN_S:-280}" python3 -m pytest --optim-spec specs/ --optim-device cuda -n "$workers" -p no:randomly -q \
    -p tools.gpu.failures --optim-report "$out/main.json" -o cache_dir=/tmp/pc > "$out/main.txt" 2>&1
echo "main job rc=$? after $(( $(date +%s) - start ))s" | tee -a "$out/main.txt"
left=$(( ${TOTAL_S:-575} - ($(date +%s) - start) ))
FAILURES_FILE="$out/suite_failures.txt" timeout "$left" python3 -m pytest -n "$workers" -q --durations=40 \
    -p tools.gpu.failures -o cache_dir=/tmp/pc > "$out/suite.txt" 2>&1
echo "suite rc=$? after $(( $(date +%s) - start ))s" | tee -a "$out/suite.txt"
tail -5 "$out/main.txt" "$out/suite.txt"
