#!/usr/bin/env bash
# The staff's one prepared run for a lent GPU machine (one H100 or H200, a bare image with torch, pytest and
# hypothesis; ~15 minutes of device time in all, start-up included): what CPU runs cannot show, in one command
# of at most 9.6 minutes (give it 600 s), every result in a handful of files under $OUT (default out/gpu-check).
#
#     bash scripts/grading/gpu_check.sh            # from the repository root; PYTHON=... for another python
#
#   1. env.log         the GPU, torch, CUDA and NCCL versions
#   2. acceptance.md   python -m scripts.grading.acceptance --world-sizes 1: the public suite, the hidden tests and
#                      the grader on the reference on NCCL (side by side, <= 240 s), then the collectives, DDP and
#                      FSDP benchmarks at their smallest sizes (<= 40 s each); acceptance.tgz holds every log
#   3. ckpt_gpu.log    the checkpoint benchmark on GPU tensors (issue 46): save, load and async blocking against
#                      DCP, beside the bare pinned device-to-host and host-to-device copies of the same bytes
#   4. staging.log     the pinned staging tests on CUDA (tests/staff/test_checkpoint_staging.py -k cuda)
#
# Each step has its own time limit, so one that hangs cannot take the others' time. Paste summary.txt into the
# session's note. NCCL refuses two ranks on one GPU: everything runs at world size 1.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
start=$SECONDS

step() {  # step NAME LIMIT_S LOG COMMAND...: run it, note its exit status and seconds in summary.txt
    local name=$1 limit=$2 log=$3 t0=$SECONDS
    shift 3
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
    local rc=$?
    printf '%-12s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$log" | tee -a "$OUT/summary.txt"
}

: >"$OUT/summary.txt"
{
    nvidia-smi -L
    echo "cores: $(nproc)"
    "$py" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None, torch.cuda.device_count(), "GPU(s)")'
    "$py" -c 'import isal' 2>/dev/null && echo "isal present" || echo "isal absent (zlib.crc32 instead)"
} >"$OUT/env.log" 2>&1

step acceptance 375 "$OUT/acceptance.log" "$py" -m scripts.grading.acceptance --world-sizes 1 --out out/acceptance
cp out/acceptance/report.md "$OUT/acceptance.md" 2>/dev/null
tar -czf "$OUT/acceptance.tgz" -C out acceptance 2>/dev/null

step ckpt_gpu 150 "$OUT/ckpt_gpu.log" "$py" -m torch.distributed.run --standalone --nproc_per_node=1 \
    -m scripts.bench.checkpoint --backend nccl --world-sizes 1 --sizes-mb 16,64,256 --rounds 3 --out out/gpu-bench
step staging 50 "$OUT/staging.log" "$py" -m pytest tests/staff/test_checkpoint_staging.py -k cuda -q \
    -p no:cacheprovider

echo "total $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
