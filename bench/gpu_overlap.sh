#!/usr/bin/env bash
# bench/gpu_overlap.sh — why a pipeline's NCCL transfers are slow while the peer computes, and what
# freeing SMs for them costs, on 2 GPUs (nvidia-h200-x2), in one call:
#
#   1. build/bench_gemm_yield    each cuBLASLt candidate of mlp_gpu's six GEMMs: its time, and how
#                                long a high-priority kernel waits for SMs while it runs
#   2. build/bench_nccl_overlap  a 64 MiB send/recv pair's time while GPU 1 runs GEMMs: whole,
#                                in pieces, planned for fewer SMs
#   3. mlp_gpu, interleaved vpp 4, the model of gpu_pipeline.sh: as is, with GEMMs that yield
#      (--yield-us 150) in 4 pieces (--gemm-split 4), and on 100 SMs (--sm-margin 32), each with
#      its breakdown (compute + waiting for the peer's compute + for transfers + ...)
#
#     bash bench/gpu_overlap.sh [OUTDIR]        (OUTDIR defaults to $OUT, else bench/out)
# Env: SKIP_BUILD=1 uses binaries already in build/.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    make -s -j16 build/mlp_gpu build/bench_gemm_yield build/bench_nccl_overlap >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }
fi
echo "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
echo "== GEMM candidates: time and the wait of a high-priority kernel (full table: $OUTDIR/gemm_yield.txt)"
build/bench_gemm_yield >"$OUTDIR/gemm_yield.txt" 2>&1
cut -c1-100 "$OUTDIR/gemm_yield.txt" | head -60
echo "== a 64 MiB pair while GPU 1 computes"
build/bench_nccl_overlap
MODEL="--hidden 4096 --layers 16 --tokens 8192 --mb 8"
build/mlp_gpu --single $MODEL >"$OUTDIR/single.log" 2>&1
SINGLE_MS=$(single_step_ms "$OUTDIR/single.log")
echo "== interleaved vpp 4; single-GPU step ${SINGLE_MS:-?} ms"
run() {
    local name=$1; shift
    ranks_run 2 "$OUTDIR/$name" build/mlp_gpu $MODEL --schedule interleaved --vpp 4 --single-ms "${SINGLE_MS:-0}" --no-copy-engine "$@"
    echo "-- $name: $*"
    grep -E "^pipeline|efficiency|transfers:|compute busy|^    rank [01]:|in [0-9]+ pieces" "$OUTDIR/$name.rank0.log"
}
run as-is
run yield-pieces4 --yield-us 150 --gemm-split 4
run margin32 --sm-margin 32
