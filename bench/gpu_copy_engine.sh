#!/usr/bin/env bash
# bench/gpu_copy_engine.sh — NCCL's kernels against the copy engines for a pipeline's transfers,
# on 2 GPUs of one host (nvidia-h200-x2), in one call:
#
#   1. build/bench_nccl_overlap   a 64 MiB exchange while GPU 1 (or both) runs GEMMs: NCCL, the
#                                 copy engines' push into a staging ring + local copy (with and
#                                 without the hint that keeps the local copy off the SMs), and
#                                 one copy straight into (push) or out of (pull) the peer's buffer
#   2. mlp_gpu, the model of gpu_pipeline.sh: 1F1B, interleaved vpp 4, ZB-V, each through NCCL
#      (with the arrival gate), through the copy engines' ring only (PIPEPAR_NCCL_CE_DIRECT=0),
#      and through direct copies (the default), with the breakdown of the step (compute +
#      waiting for the peer's compute + for transfers + ...)
#
#     bash bench/gpu_copy_engine.sh [OUTDIR]    (OUTDIR defaults to $OUT, else bench/out)
# Env: SKIP_BUILD=1 uses binaries already in build/; SCHEDULES="interleaved:4 zbv:2 1f1b:1";
#      VIAS="nccl ring direct"; SKIP_OVERLAP=1 leaves out step 1.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    make -s -j16 build/mlp_gpu build/bench_nccl_overlap >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }
fi
echo "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
if [ "${SKIP_OVERLAP:-0}" != 1 ]; then
    echo "== a 64 MiB exchange while GPU 1 (both: both GPUs) computes"
    build/bench_nccl_overlap --transfers 40
fi
MODEL="--hidden 4096 --layers 16 --tokens 8192 --mb 8"
build/mlp_gpu --single $MODEL >"$OUTDIR/single.log" 2>&1
SINGLE_MS=$(single_step_ms "$OUTDIR/single.log")
echo "== single-GPU step ${SINGLE_MS:-?} ms"
for cfg in ${SCHEDULES:-interleaved:4 zbv:2 1f1b:1}; do
    kind=${cfg%:*}; vpp=${cfg#*:}
    for via in ${VIAS:-nccl ring direct}; do
        flag=--copy-engine; direct=1
        [ "$via" = nccl ] && flag=--no-copy-engine
        [ "$via" = ring ] && direct=0
        name=$kind-vpp$vpp-$via
        export PIPEPAR_NCCL_CE_DIRECT=$direct
        ranks_run 2 "$OUTDIR/$name" build/mlp_gpu $MODEL --schedule "$kind" --vpp "$vpp" \
            --single-ms "${SINGLE_MS:-0}" $flag
        echo "-- $name (exit $?)"
        grep -E "^pipeline|efficiency|exposed transfer|transfers:|compute busy|^    rank [01]:|copy engines:|copy-engine transfers" \
            "$OUTDIR/$name.rank0.log"
    done
done
unset PIPEPAR_NCCL_CE_DIRECT
