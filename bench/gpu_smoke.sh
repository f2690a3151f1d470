#!/usr/bin/env bash
# bench/gpu_smoke.sh — the first device call of a session: do the NCCL pieces work at all?
# NCCL unit tests, the small pipeline tests, the failure test, then the full-size single-GPU
# step and three pipelined schedules (one with the gradient check). Logs into OUTDIR.
#     bash bench/gpu_smoke.sh [OUTDIR]       (SKIP_BUILD=1: use build/ as it is when it runs)
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L; nvidia-smi topo -m 2>&1 | head -4
if [ "${SKIP_BUILD:-0}" = 1 ] && build/mlp_gpu --help >/dev/null 2>&1 && ! ldd build/gpu/test_nccl build/bench_nccl_bw | grep -q "not found"; then
    echo "using build/ as carried"
else
    make -s -j16 build/mlp_gpu build/bench_nccl_bw build/gpu/test_nccl >"$OUTDIR/build.log" 2>&1 || { tail -30 "$OUTDIR/build.log"; exit 1; }
fi
echo "== test_nccl";      timeout 120 build/gpu/test_nccl >"$OUTDIR/test_nccl.log" 2>&1; tail -n 12 "$OUTDIR/test_nccl.log"
echo "== nccl_pipeline";  timeout 240 bash tests/gpu/nccl_pipeline.sh build >"$OUTDIR/nccl_pipeline.log" 2>&1; grep -E "^(ok|FAIL|[0-9]+ passed)" "$OUTDIR/nccl_pipeline.log" | tail -n 20
echo "== nccl_failure";   timeout 90 bash tests/gpu/nccl_failure.sh build >"$OUTDIR/nccl_failure.log" 2>&1; tail -n 6 "$OUTDIR/nccl_failure.log"
echo "== full size"
timeout 90 build/mlp_gpu --single 2>&1 | tee "$OUTDIR/single.log"
ms=$(single_step_ms "$OUTDIR/single.log"); ms=${ms:-0}
for cfg in "1f1b 1 --check" "interleaved 4" "zbv 2"; do
    set -- $cfg
    ranks_run 2 "$OUTDIR/smoke_$1_$2" build/mlp_gpu --quiet --single-ms "$ms" --schedule "$1" --vpp "$2" ${3:-}
    cat "$OUTDIR/smoke_$1_$2.rank0.log"; grep "mlp_gpu:" "$OUTDIR/smoke_$1_$2.rank1.log"
done
