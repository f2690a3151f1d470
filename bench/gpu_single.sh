#!/usr/bin/env bash
# bench/gpu_single.sh — pipepar's single-GPU step against PyTorch's, on one GPU of any kind: the
# comparison model (H=4096, L=16, 8192 tokens, 8 microbatches, bf16, tanh GELU on both sides) run
# whole by examples/mlp_gpu.cu (--single) and by bench/torch_pp_bench.py on one process (its
# single-GPU step: eager nn.Linear, autograd, the same microbatches): pipepar's single-GPU step
# should be at least as fast as PyTorch's, and this measures it without a second GPU.
#
#     bash bench/gpu_single.sh [OUTDIR]   (OUTDIR defaults to $OUT, else bench/out)
#
# Alternates three times: pipepar as a user runs it (each process tunes its GEMMs on its own),
# pipepar with the GEMM picks tuned in real steps (tune_picks, bench/gpu_lib.sh: what the
# pipeline benchmarks use), PyTorch. Prints each step, peak memory and the ratios PyTorch / pipepar
# (above 1: pipepar faster). The GPU's SM clock and power are logged to OUTDIR/clocks.csv.
# Env: SKIP_BUILD=1 uses binaries already in build/; PASSES (default 3).
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
H=4096 L=16 T=8192 M=8
MODEL="--hidden $H --layers $L --tokens $T --mb $M"
LOG=$OUTDIR/single.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
if [ "${SKIP_BUILD:-0}" != 1 ]; then make -s -j16 build/mlp_gpu >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }; fi
clocks_start "$OUTDIR"
PLAIN_MODEL=$MODEL
tune_picks "$OUTDIR"   # appends --gemm-picks FILE to MODEL when the tuning ran
PICKED_MODEL=$MODEL

peak_of() { sed -n 's/.*peak \([0-9.]*\) GiB.*/\1/p' "$1" | head -n 1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else printf "?" }'; }
say "pass | pipepar, own tuning | pipepar, shared picks | PyTorch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null) | PyTorch / pipepar (own, picks)"
for pass in $(seq 1 "${PASSES:-3}"); do
    CUDA_VISIBLE_DEVICES=0 timeout 300 build/mlp_gpu --single $PLAIN_MODEL >"$OUTDIR/own-$pass.log" 2>&1
    CUDA_VISIBLE_DEVICES=0 timeout 300 build/mlp_gpu --single $PICKED_MODEL >"$OUTDIR/picks-$pass.log" 2>&1
    CUDA_VISIBLE_DEVICES=0 H=$H L=$L T=$T M=$M GELU=tanh CONFIGS=none PYTHONUNBUFFERED=1 timeout 300 \
        python3 -m torch.distributed.run --nproc_per_node=1 bench/torch_pp_bench.py >"$OUTDIR/torch-$pass.log" 2>&1
    cat "$OUTDIR/own-$pass.log" "$OUTDIR/picks-$pass.log" "$OUTDIR/torch-$pass.log" >>"$LOG"
    own=$(single_step_ms "$OUTDIR/own-$pass.log"); picks=$(single_step_ms "$OUTDIR/picks-$pass.log")
    torch=$(single_step_ms "$OUTDIR/torch-$pass.log")
    say "$pass | ${own:-?} ms, $(peak_of "$OUTDIR/own-$pass.log") GiB | ${picks:-?} ms | ${torch:-?} ms, $(peak_of "$OUTDIR/torch-$pass.log") GiB | $(ratio "${torch:-0}" "${own:-0}"), $(ratio "${torch:-0}" "${picks:-0}")"
done
say "clocks (SM MHz, W): $(clocks_summary "$OUTDIR/clocks.csv" | tr '\n' ' ')"
