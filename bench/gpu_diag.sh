#!/usr/bin/env bash
# bench/gpu_diag.sh — where do 1F1B and GPipe stall? (seen on nvidia-h200-x2, 2026-11-22: rank 0
# blocks in ncclGroupEnd of its 2nd group (1F1B) / 8th group (GPipe) until the watchdog aborts it
# after --timeout; rank 1 prints nothing and has to be killed; every vpp > 1 schedule runs.)
# Runs 1F1B at full size for two steps under three settings, with a line per callback,
# allocation and NCCL group on stderr (MLP_GPU_DEBUG=1, PIPEPAR_NCCL_DEBUG=1), and shows where
# each rank's host stopped:
#   default | NCCL_RUNTIME_CONNECT=0 (all p2p connections at init) | CUDA_MODULE_LOADING=EAGER
#     bash bench/gpu_diag.sh [OUTDIR]        (about 2 minutes on nvidia-h200-x2 when it hangs)
set -u
cd "$(dirname "$0")/.."
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 MLP_GPU_DEBUG=1 PIPEPAR_NCCL_DEBUG=1
[ -x build/mlp_gpu ] || make -s -j16 build/mlp_gpu >/dev/null
n=0
for setting in "" "NCCL_RUNTIME_CONNECT=0" "CUDA_MODULE_LOADING=EAGER"; do
    n=$((n + 1)); id=/tmp/pp_diag_$$_$n.id
    echo "=== 1f1b ${setting:-default}"
    for r in 0 1; do
        env $setting RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r PIPEPAR_NCCL_ID_FILE=$id timeout 45 build/mlp_gpu --quiet --no-tune \
            --schedule 1f1b --warmup 1 --steps 2 --timeout 15 >"$OUTDIR/diag$n.rank$r.log" 2>&1 &
    done
    wait
    for r in 0 1; do echo "--- rank $r (last lines)"; grep -v "cudaMalloc done" "$OUTDIR/diag$n.rank$r.log" | tail -n 12; done
done
