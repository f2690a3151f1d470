#!/usr/bin/env bash
# bench/gpu_pipeline.sh — pipepar against PyTorch's torch.distributed.pipelining, same model,
# same GPUs, one run: the residual MLP x + W2·gelu(W1·x), H=4096, L=16 blocks, 8192 tokens per
# microbatch, 8 microbatches, bf16, on 2 GPUs (nvidia-h200-x2).
#
#     bash bench/gpu_pipeline.sh [OUTDIR]          (OUTDIR defaults to $OUT, else bench/out)
#     NPROC=4 M=16 bash bench/gpu_pipeline.sh      a pipeline of 4 GPUs (nvidia-h200-x4): L defaults
#                                                  to 4 blocks per GPU, 16 microbatches
#
# In order: build; NCCL point-to-point bandwidth (raw and through pipepar's transport);
# pipepar single-GPU baseline (each GPU alone, then all at once, warm, and warm with the links
# busy); pipepar's schedules on NPROC GPUs
# (gradient check on most; interleaved also with each B as I then W); the
# best schedules again with NCCL forced onto sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, a
# stand-in for two nodes) and the failure test (both skipped by SKIP_SOCKET=1); PyTorch's bench (GELU=tanh: the same model);
# Megatron-LM's; the summary table (each run under its "-- name" line) and best against best,
# pipepar's fastest run against each peer's fastest schedule of this run. Logs of every run land in OUTDIR. Env: H, L, T, M override the model size;
# SKIP_TORCH=1, SKIP_MEGATRON=1, SKIP_SOCKET=1 skip parts; ONLY=REGEX runs only the pipepar runs it matches (SKIP_PIPEPAR=1: only the peers, with pipepar's plans in PyTorch's runtime) (Megatron-LM runs where .megatron/megatron/core is); FULL=1 adds more runs (interleaved vpp 2,
# looped-BFS, interleaved ZB vpp 2, ZB-H1, runs through NCCL with and without the arrival gate); TORCH_CONFIGS picks PyTorch's schedules;
# BASELINES=alone skips the single steps at once, warm and with the links busy (minutes at pp 4).
# SKIP_BUILD=1 uses binaries already in build/ when they run. STEPS=N: timed steps of every pipeline run,
# pipepar's and the peers' alike (default 5; each reports the median). Under the power cap a step
# swings by a few percent with the clock, in the same pattern run after run, so a longer series
# (STEPS=12) gives a steadier median at the cost of a longer run. SEND_PARTS=P: a sent output's last
# GEMM in P parts, each sent once written (mlp_gpu --send-parts; default 4; 1: whole tensors; runs
# through NCCL's kernels send whole tensors); the runs named *-whole send whole tensors beside them.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NPROC=${NPROC:-2}       # pipeline ranks, one process (GPU) each
if [ "$NPROC" -gt "$(nvidia-smi -L | wc -l)" ]; then echo "NPROC=$NPROC: this machine has $(nvidia-smi -L | wc -l) GPUs"; exit 2; fi
H=${H:-4096}; T=${T:-8192}; M=${M:-8}
if [ "$NPROC" -gt 2 ]; then L=${L:-$((4 * NPROC))}; else L=${L:-16}; fi
PARTS=${SEND_PARTS:-4}
MODEL="--hidden $H --layers $L --tokens $T --mb $M --send-parts $PARTS"
STEPS=${STEPS:-5}
export STEPS            # the peers' benches read it too
BASELINES=${BASELINES:-all}   # all: the single steps alone, at once, warm and with the links busy;
                              # alone: only the first, which every efficiency counts against
case $BASELINES in all|alone) ;; *) echo "BASELINES=$BASELINES: must be all or alone"; exit 2;; esac
GATE=${GATE-}           # extra mlp_gpu flags of every pipepar run (GATE=--no-copy-engine: transfers through
                        # NCCL with the arrival gate instead of the copy engines, mlp_gpu's default;
                        # GATE="--no-copy-engine --no-gate": NCCL alone); the FULL set adds NCCL runs
LOG=$OUTDIR/pipepar.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }

say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
say "== build"
t0=$(date +%s)
if [ "${SKIP_BUILD:-0}" = 1 ] && build/mlp_gpu --help >/dev/null 2>&1 && [ -x build/bench_link_traffic ] && ! ldd build/bench_nccl_bw build/gpu/test_nccl | grep -q "not found"; then
    say "using the binaries in build/ (SKIP_BUILD=1)"
else
    make -s -j16 build/pipepar build/mlp_gpu build/bench_nccl_bw build/bench_link_traffic build/gpu/test_nccl >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }
    say "built in $(( $(date +%s) - t0 )) s"
fi

# launchn N NAME ARGS...: N processes, one per GPU (ranks_run), rank 0's output into the log.
launchn() {
    local n=$1 name=$2 rc=0 r; shift 2
    RANK_TIMEOUT=100 ranks_run "$n" "$OUTDIR/$name" "$@" || rc=$?
    cat "$OUTDIR/$name.rank0.log" >>"$LOG"
    for ((r = 1; r < n; r++)); do
        grep -h "mlp_gpu:" "$OUTDIR/$name.rank$r.log" | sed "s/^/rank $r: /" >>"$LOG" 2>/dev/null
    done
    return $rc
}
launch2() { launchn 2 "$@"; }

if [ "${SKIP_PIPEPAR:-0}" != 1 ]; then
say "== NCCL point-to-point bandwidth"
launch2 nccl_bw build/bench_nccl_bw || say "nccl_bw failed ($?)"
cat "$OUTDIR/nccl_bw.rank0.log"

say "== GEMM kernels"
tune_picks "$OUTDIR"
# pipepar's baseline on every pipeline GPU (single_baseline, bench/gpu_lib.sh): GPUs of one host
# differ by about 1% (power, silicon), so the efficiency is against what these GPUs would take with
# the work split in proportion to their speeds
say "== pipepar single GPU, on each of the $NPROC GPUs"
single_baseline "$NPROC" "$OUTDIR" $MODEL
cp "$OUTDIR/single-gpu0.log" "$OUTDIR/single.log"   # GPU 0's, against PyTorch's on GPU 0
if [ "$BASELINES" = all ]; then
say "== pipepar single GPU, on all $NPROC GPUs at once (the pipeline's power and thermal conditions)"
single_concurrent "$NPROC" "$OUTDIR" $MODEL
say "== pipepar single GPU, on all $NPROC GPUs at once after 12 warm-up steps (the pipeline's temperature)"
single_warm "$NPROC" "$OUTDIR" $MODEL
say "== pipepar single GPU, on all $NPROC GPUs at once after 12 warm-up steps, the links busy (a pipeline's traffic)"
single_linked "$NPROC" "$OUTDIR" $MODEL
fi

run_pp() {   # run_pp NAME ARGS...: a pipepar run on NPROC GPUs (ONLY=REGEX: only the names it matches)
    local name=$1; shift
    [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]] && return 0
    local whole= speeds=   # NCCL's kernels send a tensor whole
    case " $GATE $* " in *" --no-copy-engine "*) whole="--send-parts 1" ;; esac
    [ "${NCCL_P2P_DISABLE:-0}" = 1 ] && whole="--send-parts 1"   # the socket runs: no copy engines either
    # placed by speed: each GPU's single step above is its speed, a whole step under the power cap
    # (mlp_gpu's own measure, a burst of one GEMM at start-up, runs at the clock before the cap bites)
    case " $* " in *" --place-by-speed "*) [ -n "${SINGLE_GPU_MS:-}" ] && speeds="--gpu-ms $SINGLE_GPU_MS" ;; esac
    say "-- $name"
    clocks_during "$OUTDIR/$name.clocks.csv" launchn "$NPROC" "$name" build/mlp_gpu $MODEL --single-ms "$SINGLE_MS" --quiet \
        --steps "$STEPS" --timeout 30 $GATE "$@" $whole $speeds || say "$name: exit $?"
    clocks_brief "$OUTDIR/$name.clocks.csv" | tee -a "$LOG" >/dev/null
}
say "== pipepar on $NPROC GPUs"
run_pp gpipe             --schedule gpipe
run_pp 1f1b              --schedule 1f1b --check
run_pp interleaved4      --schedule interleaved --vpp 4 --check --trace "$OUTDIR/trace_interleaved4.json"
run_pp zbv               --schedule zbv --check
run_pp interleaved-zb4   --schedule interleaved-zb --vpp 4 --check
run_pp dualpipev         --schedule dualpipev --check
run_pp dualpipev-fb      --schedule dualpipev --keep-overlaps
# interleaved 1F1B with its microbatch group and stages chosen by pp_search (a 1-block first stage
# and group 4 on 2 GPUs; bench/gpu_interleaved.sh), then with the heavier rank on the faster GPU
run_pp interleaved4-searched --schedule search --search-kind interleaved --search-layout --vpp 4 --check
run_pp interleaved4-searched-placed --schedule search --search-kind interleaved --search-layout --vpp 4 --place-by-speed
# the same order with each B as I then W (--split-backward): a B's gradient leaves before its
# weight gradients are computed, so the previous stage's rank starts its B sooner
run_pp interleaved4-split --schedule search --search-kind interleaved --search-layout --vpp 4 --split-backward --check
run_pp interleaved4-megatron-split --schedule interleaved --vpp 4 --split-backward
# the greedy V order on the split the search chooses for it (at pp 4 and 16 microbatches it beats
# ZB-V's start-up in simulation, keeping up to twice ZB-V's activations)
run_pp greedy-searched   --schedule search --search-kind greedy --search-layout --vpp 2 --check
# the same with the busier rank on the faster GPU: at pp 2 whole blocks leave one rank a block's
# input gradient more (block 0 has none), and the GPUs of one host differ by up to 2%
run_pp greedy-searched-placed --schedule search --search-kind greedy --search-layout --vpp 2 --place-by-speed --check
# the same with every transfer staged through pinned host memory over PCIe (--via-host): under the
# power cap NVLink's traffic lowers the SM clock and PCIe's does not (RESULTS 3.15); the search
# ranks its candidates with the slower transfers
run_pp greedy-searched-via-host --schedule search --search-kind greedy --search-layout --vpp 2 --place-by-speed --via-host --check
# the same sending whole tensors (--send-parts 1): the receiver waits for the whole copy after the
# compute, where streamed it waits for the last part
run_pp greedy-searched-via-host-whole --schedule search --search-kind greedy --search-layout --vpp 2 --place-by-speed \
    --via-host --send-parts 1
# slower transfers are hidden by more microbatches in flight: at pp >= 3 the search also gets a cap
# of four times 1F1B's activations (--max-memory counts microbatches through a rank's blocks, and
# 1F1B's first rank holds pp; without a cap the greedy orders keep twice 1F1B's; at pp 4 and 16
# microbatches a higher cap gains nothing in simulation)
if [ "$NPROC" -gt 2 ]; then
    run_pp greedy-searched-via-host-mem --schedule search --search-kind greedy --search-layout --vpp 2 --place-by-speed \
        --via-host --max-memory $((4 * NPROC)) --check
    run_pp greedy-searched-via-host-mem-whole --schedule search --search-kind greedy --search-layout --vpp 2 \
        --place-by-speed --via-host --max-memory $((4 * NPROC)) --send-parts 1
fi
# at pp >= 3, runs above again with a round's transfers in one group waited in order (--in-order),
# the runtime before transfers were posted and waited per peer: a rank's receive from one
# neighbour then waits behind its transfers with the other (the fixed orders: the same plan both
# ways; the greedy search also ranks its candidates for that runtime)
if [ "$NPROC" -gt 2 ]; then
    run_pp interleaved4-in-order --schedule interleaved --vpp 4 --in-order
    run_pp dualpipev-in-order    --schedule dualpipev --in-order
    run_pp greedy-searched-in-order --schedule search --search-kind greedy --search-layout --vpp 2 --in-order
fi
# the blocks re-split for each GPU's measured speed (--adapt, round after round until a split is
# kept): GPUs of one host differ, by power and heat, more than a pipeline's start-up costs
run_pp zbv-adapt         --schedule zbv --adapt --check
run_pp dualpipev-adapt   --schedule dualpipev --adapt
# the greedy order and its split searched again on each round's measured costs (pp_plan_replan)
run_pp greedy-searched-adapt --schedule search --search-kind greedy --search-layout --vpp 2 --adapt --check
if [ "$NPROC" = 2 ] && [ "$L" = 16 ]; then   # uneven stages: small first and last chunk, pp_search's order
    run_pp search-2-6-2-6 --schedule search --layout 'Et*2|t*6|t*2|t*6L'
fi
if [ "${FULL:-0}" = 1 ]; then
    run_pp interleaved2      --schedule interleaved --vpp 2
    run_pp looped-bfs2       --schedule looped-bfs --vpp 2
    run_pp interleaved-zb2   --schedule interleaved-zb --vpp 2
    run_pp zb-h1             --schedule zb-h1
    GATE=--no-gate run_pp interleaved4-nogate --schedule interleaved --vpp 4 --no-copy-engine
    GATE=--no-gate run_pp zbv-nogate  --schedule zbv --no-copy-engine
    run_pp interleaved4-nccl --schedule interleaved --vpp 4 --no-copy-engine
    run_pp zbv-nccl          --schedule zbv --no-copy-engine
fi
if [ -z "${ONLY:-}" ] || [[ 1f1b-threads =~ $ONLY ]]; then
    say "-- 1f1b-threads (one process, a thread per GPU)"
    # threads stay on NCCL, whose kernels send a tensor whole (--send-parts 1)
    timeout 100 build/mlp_gpu $MODEL --single-ms "$SINGLE_MS" --quiet --timeout 30 $GATE --schedule 1f1b --threads $NPROC \
        --warmup 1 --steps 3 --send-parts 1 >"$OUTDIR/1f1b-threads.log" 2>&1 || say "1f1b-threads: exit $?"
    cat "$OUTDIR/1f1b-threads.log" >>"$LOG"
fi

if [ "${SKIP_SOCKET:-0}" != 1 ]; then
    say "== NCCL over sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)"
    export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
    run_pp socket-1f1b --schedule 1f1b
    run_pp socket-zbv  --schedule zbv
    unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE
    say "== failure test"
    bash tests/gpu/nccl_failure.sh build 2>&1 | tee -a "$LOG" | tail -n 3
fi
fi

if [ "${SKIP_TORCH:-0}" != 1 ]; then
    say "== PyTorch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null), torch.distributed.pipelining"
    # pipepar plans, PyTorch runs: the greedy search's winner for these per-block costs (the model's
    # measured F, I, W per block and transfer time) and pipepar's ZB-V, in PyTorch's own runtime
    PLANS=""
    for plan in "greedy:search --pp $NPROC --mb $M --f 3.25 --i 3.58 --w 3.33 --p2p 0.2 --kind greedy --vpp 2 --csv" \
                "zbv:schedule --kind zbv --pp $NPROC --mb $M --out"; do
        name=${plan%%:*}; args=${plan#*:}
        # shellcheck disable=SC2086
        if build/pipepar $args "$OUTDIR/$name.pipepar.csv" $([ "$name" = zbv ] && echo --format csv) >"$OUTDIR/plan_$name.log" 2>&1 &&
           build/pipepar schedule --from-csv "$OUTDIR/$name.pipepar.csv" --format torch-compute-comms \
               --out "$OUTDIR/$name.torch.csv" >>"$OUTDIR/plan_$name.log" 2>&1; then
            PLANS="$PLANS${PLANS:+,}$name=$OUTDIR/$name.torch.csv"
        else say "pipepar plan $name for PyTorch failed:"; tail -n 5 "$OUTDIR/plan_$name.log" | tee -a "$LOG"; fi
    done
    grep -m1 -E "^ +1 " "$OUTDIR/plan_greedy.log" | sed 's/^/searched plan: /' | tee -a "$LOG"
    PIPEPAR_CSVS=$PLANS H=$H L=$L T=$T M=$M GELU=tanh PYTHONUNBUFFERED=1 CONFIGS=${TORCH_CONFIGS:-GPipe:1,1F1B:1,Interleaved1F1B:2,Interleaved1F1B:4,InterleavedZeroBubble:2,ZBVZeroBubble:2,DualPipeV:2} timeout 600 python3 -m torch.distributed.run --nproc_per_node=$NPROC \
        bench/torch_pp_bench.py >"$OUTDIR/torch.log" 2>&1 || say "torch bench exit $?"
    grep -vE "^(W|I)[0-9]{4}|warn|Warning" "$OUTDIR/torch.log" | tee -a "$LOG"
fi

# Megatron-LM's own schedules (1F1B; interleaved with and without overlap_p2p_comm) on the same model,
# when its megatron/core package is at $MEGATRON (default .megatron: a folder holding megatron/core,
# from Megatron-LM's public source; never committed)
MEGATRON=${MEGATRON:-.megatron}
if [ "${SKIP_MEGATRON:-0}" != 1 ] && [ -d "$MEGATRON/megatron/core" ]; then
    say "== Megatron-LM, megatron.core.pipeline_parallel.schedules"
    PYTHONPATH="$MEGATRON${PYTHONPATH:+:$PYTHONPATH}" H=$H L=$L T=$T M=$M GELU=tanh PYTHONUNBUFFERED=1 \
        CONFIGS=${MEGATRON_CONFIGS:-1:0,2:1,4:0,4:1} timeout 600 python3 -m torch.distributed.run --nproc_per_node=$NPROC \
        bench/megatron_pp_bench.py >"$OUTDIR/megatron.log" 2>&1 || say "megatron bench exit $?"
    grep -E "^(megatron|vpp=)" "$OUTDIR/megatron.log" | tee -a "$LOG"
    grep -qE "^megatron-core" "$OUTDIR/megatron.log" || tail -n 15 "$OUTDIR/megatron.log" | tee -a "$LOG"
fi

[ "${SKIP_PIPEPAR:-0}" = 1 ] && exit 0
say "== summary (step ms, efficiency = single / $NPROC / step)"
grep -E "^(-- |== NCCL over|adapt: |single-gpu|single-GPU|search:|placement by speed|schedule |pipeline|  efficiency|  simulator|  compute busy|  each timed step|  clocks while|  rank 0|  peak|gradient check|  where the last|    rank [0-9]+:|  exposed transfer \(the|  exposed on the critical|  bound:)" "$LOG" | tee "$OUTDIR/summary.txt"
say "== best against best (median steps, this run)"
best_against_best "$LOG" "$([ "${SKIP_TORCH:-0}" != 1 ] && echo "$OUTDIR/torch.log")" \
    "$([ "${SKIP_MEGATRON:-0}" != 1 ] && [ -d "$MEGATRON/megatron/core" ] && echo "$OUTDIR/megatron.log")" |
    tee -a "$LOG" "$OUTDIR/summary.txt"
say "== pipepar against the fastest GPU's single step alone (the most conservative baseline)"
efficiency_vs_fastest "$LOG" "$NPROC" | tee -a "$LOG" "$OUTDIR/summary.txt"
[ "$BASELINES" = all ] || exit 0
say "== against the single steps run on every GPU at once (harmonic mean $SINGLE_TOGETHER_MS ms)"
efficiency_against "$LOG" "$NPROC" "$SINGLE_TOGETHER_MS" "single steps run together" | tee -a "$LOG" "$OUTDIR/summary.txt"
say "== against the single steps run on every GPU at once, warm (harmonic mean $SINGLE_WARM_MS ms)"
efficiency_against "$LOG" "$NPROC" "$SINGLE_WARM_MS" "single steps run together, warm" | tee -a "$LOG" "$OUTDIR/summary.txt"
say "== against the single steps run on every GPU at once, warm, the links busy (harmonic mean $SINGLE_LINKED_MS ms)"
efficiency_against "$LOG" "$NPROC" "$SINGLE_LINKED_MS" "single steps, links busy" | tee -a "$LOG" "$OUTDIR/summary.txt"
