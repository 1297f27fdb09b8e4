#!/usr/bin/env bash
# What a session lent a GPU runs, in one device call: the cuda tests, then benchmarks/gpu.py, everything
# written under $OUT (benchmarks/results/gpu/ where OUT is unset), inside about 9 minutes.
#
# 1. Here, on the machine with the package index and git (once per session):
#        bash benchmarks/gpu_session.sh --prepare
#    writes build/gpu-session/ (ignored by git): the peers the GPU machine lacks as wheels (x-transformers
#    and its einx, frozendict, loguru, torch-einops-utils; rotary-embedding-torch: pure Python, ~0.5 MB;
#    transformers, torch and the rest are there already) and the commit, which the copy of the tree that
#    travels has no git to tell.
# 2. One device call: command `bash benchmarks/gpu_session.sh`, carry ["build/gpu-session"], timeout_s 600.
#    $OUT then holds session.log (the GPU, the versions, gpu.py's progress), tests_flex.txt and
#    tests_rest.txt (the cuda tests), gpu.json and gpu.md (the benchmark).
# 3. Copy gpu.json and gpu.md into benchmarks/results/gpu/ and commit them with the session's findings.
#
# The tests are `make test-gpu`'s selection (pytest -m cuda -rs; every cuda test is in tests/gpu/), in two
# processes side by side as on the H200 on 2026-11-28 (FlexAttention's in one, the rest in the other:
# 98 s and 77 s there); the benchmark gets what is left of GPU_SESSION_SECONDS (560) as its --budget-s
# (less a minute to finish the part it is in), and `timeout` ends anything that overruns.
set -uo pipefail
cd "$(dirname "$0")/.."
PREP=build/gpu-session
PY=${PYTHON:-python3}

if [ "${1:-}" = "--prepare" ]; then
    mkdir -p "$PREP/wheels"
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$PREP/wheels" x-transformers==2.31.10 einx==0.4.3 frozendict==2.5.1 loguru==0.7.3 \
        torch-einops-utils==0.2.0 rotary-embedding-torch==0.9.1 || exit
    git rev-parse HEAD > "$PREP/commit"
    if [ -n "$(git status --porcelain -- . ':(exclude)benchmarks/results')" ]; then echo 1; else echo 0; fi \
        > "$PREP/uncommitted"
    ls -l "$PREP/wheels"
    echo "commit $(cat "$PREP/commit") (uncommitted changes: $(cat "$PREP/uncommitted"))"
    exit 0
fi

START=$(date +%s)
TOTAL=${GPU_SESSION_SECONDS:-560}
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
LOG="$OUT/session.log"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONDONTWRITEBYTECODE=
left() { echo $(( TOTAL - ($(date +%s) - START) )); }

if ls "$PREP"/wheels/*.whl > /dev/null 2>&1; then
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-site \
        "$PREP"/wheels/*.whl >> "$LOG" 2>&1 && export PYTHONPATH=/tmp/gpu-site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -f "$PREP/commit" ]; then
    ATTNLAB_COMMIT=$(cat "$PREP/commit") ATTNLAB_UNCOMMITTED=$(cat "$PREP/uncommitted" 2> /dev/null || echo "")
    export ATTNLAB_COMMIT ATTNLAB_UNCOMMITTED
fi
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
    "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', \
torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
    "$PY" -m pip list 2> /dev/null | grep -i -E "^(transformers|x-transformers|rotary-embedding-torch|triton) " || true
} >> "$LOG" 2>&1

echo "== cuda tests ($(left) s left)" | tee -a "$LOG"
timeout 240 "$PY" -m pytest -m cuda -rs --durations=8 -p no:cacheprovider tests/gpu/test_flex_cuda.py \
    > "$OUT/tests_flex.txt" 2>&1 &
FLEX=$!
timeout 240 "$PY" -m pytest -m cuda -rs --durations=8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_flex_cuda.py \
    > "$OUT/tests_rest.txt" 2>&1
REST=$?
wait "$FLEX"
FLEX=$?
tail -n 1 "$OUT/tests_flex.txt" "$OUT/tests_rest.txt" | tee -a "$LOG"

BUDGET=$(( $(left) - 60 ))
echo "== benchmarks/gpu.py, --budget-s $BUDGET ($(left) s left)" | tee -a "$LOG"
timeout "$(( $(left) > 30 ? $(left) : 30 ))" "$PY" benchmarks/gpu.py --device cuda --out "$OUT" \
    --budget-s "$(( BUDGET > 0 ? BUDGET : 0 ))" >> "$LOG" 2>&1
BENCH=$?
grep -E "^\[|wrote|MISS|pass" "$LOG" | tail -n 40
echo "== done in $(( $(date +%s) - START )) s: tests (flex $FLEX, rest $REST), gpu.py $BENCH" | tee -a "$LOG"
exit $(( FLEX || REST || BENCH ))
