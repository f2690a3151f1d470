#!/usr/bin/env bash
# bench/gpu_gpt.sh — examples/gpt_gpu.cu (the GPT of examples/gpt.c on GPUs) beside Megatron-LM's
# GPTModel on the same 2 GPUs, in one run: the same model (24 layers, hidden 2048, 16 heads, a vocab
# of 32768, 8 microbatches of one 4096-token sequence each: Megatron's local layer spec takes no
# packed sequences, so both run unpacked fixed-length sequences), bf16.
#
#     bash bench/gpu_gpt.sh [OUTDIR]        (OUTDIR defaults to $OUT, else bench/out; results in
#                                           OUTDIR/gpt/gpt.log, each run's log in OUTDIR/gpt/runs.tar.gz)
#
# In order: build; gpt_gpu's single-GPU step on both GPUs at once (each GPU's, and their harmonic
# mean: the efficiency baseline); gpt_gpu's pp 2 schedules (1F1B, interleaved vpp 2, ZB-V,
# DualPipeV, and 1F1B with FIRST layers on the first stage: the last stage also holds the output
# layer and the loss; then interleaved, ZB-V and DualPipeV with half-layer stages, --hybrid, that
# move one MLP off the rank holding the output layer; all four again on the half-layer split that
# pipepar search finds for each on the units' costs that gpt_gpu --unit-costs measures; 1F1B, and
# 1F1B and interleaved on the split searched for it, with the output layer's weight gradient
# deferred (--defer-head-wgrad; the search told so with --loss-deferred));
# Megatron-LM's (bench/megatron_gpt_bench.py:
# single-GPU on both GPUs at once, 1F1B, interleaved vpp 2 with overlap_p2p_comm, 1F1B with FIRST
# layers on the first stage (num_layers_in_first_pipeline_stage); PYTHONPATH must reach
# megatron/core, default .megatron); the summary: step time, tokens/s per GPU, pipeline efficiency against each framework's own
# single-GPU step (baseline / (2 x step)), peak memory, and gpt_gpu's data-path kernels' share of
# the step (CUDA events around packing, the cp split and the replay gather). A step is the forward
# and backward of every microbatch and the tied weight's copies summed over the first and the last
# stage (Megatron's forward_backward_func, then that sum; gpt_gpu's from the data's upload to
# complete gradients), the update excluded.
# Env: LAYERS, HIDDEN, HEADS, SEQ, VOCAB, MB, STEPS (timed), WARMUP override the sizes; FIRST
# (default LAYERS/2 + 1);
# SKIP_MEGATRON=1, SKIP_BUILD=1; MEGATRON_PATH (default .megatron); ONLY=REGEX runs only the
# pipepar runs whose names it matches (the single-GPU baseline always runs), CONFIGS picks
# Megatron-LM's runs (bench/megatron_gpt_bench.py's variable).
set -u
cd "$(dirname "$0")/.." || exit 1
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}/gpt
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
LAYERS=${LAYERS:-24} HIDDEN=${HIDDEN:-2048} HEADS=${HEADS:-16} SEQ=${SEQ:-4096} VOCAB=${VOCAB:-32768}
MB=${MB:-8} STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} FIRST=${FIRST:-$((LAYERS / 2 + 1))}
MODEL=(--layers "$LAYERS" --width "$HIDDEN" --heads "$HEADS" --vocab "$VOCAB" --capacity "$SEQ" --min-len "$SEQ"
       --max-len "$SEQ" --seqs "$MB" --steps $((WARMUP + STEPS)) --warmup "$WARMUP")
LOG=$OUTDIR/gpt.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
if [ "$(nvidia-smi -L | grep -c '^GPU ')" -lt 2 ]; then echo "needs 2 GPUs"; exit 2; fi
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1) x 2"
say "   $LAYERS layers, hidden $HIDDEN, $HEADS heads, vocab $VOCAB, $MB microbatches of one $SEQ-token sequence; $STEPS steps timed after $WARMUP"
t0=$(date +%s)
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    make -s -j16 build/gpt_gpu build/pipepar >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }
    say "== built in $(( $(date +%s) - t0 )) s"
fi

step_of() { sed -n 's/^timing: step \([0-9.]*\) ms.*/\1/p' "$1" | head -n 1; }
field_of() { sed -n "s|^timing: .*$2 \\([0-9.]*\\).*|\\1|p" "$1" | head -n 1; }   # field_of LOG "tokens/s/gpu"
dpshare_of() { sed -n 's/^timing: .* = \([0-9.]*\)% of the step.*/\1/p' "$1" | head -n 1; }
eff() { awk -v b="$1" -v s="$2" 'BEGIN { if (b > 0 && s > 0) printf "%.1f%%", 100 * b / (2 * s); else printf "?" }'; }

say "== gpt_gpu, single GPU: both GPUs at once, each its own world of one"
pids=()
for g in 0 1; do
    CUDA_VISIBLE_DEVICES=$g timeout 300 build/gpt_gpu "${MODEL[@]}" >"$OUTDIR/single-gpu$g.log" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
inv=0; SINGLE=0
for g in 0 1; do
    cat "$OUTDIR/single-gpu$g.log" >>"$LOG"
    ms=$(step_of "$OUTDIR/single-gpu$g.log")
    say "   GPU $g: step ${ms:-?} ms, peak $(field_of "$OUTDIR/single-gpu$g.log" "peak") GiB"
    [ -n "$ms" ] && inv=$(awk -v a="$inv" -v b="$ms" 'BEGIN { print a + 1 / b }')
done
[ "$inv" != 0 ] && SINGLE=$(awk -v i="$inv" 'BEGIN { printf "%.1f", 2 / i }')
say "   baseline (harmonic mean): $SINGLE ms"

# hybrid_of UNITS...: the hybrid pattern (gpt_gpu --hybrid) of stages of these many units, a unit
# being a layer's attention ('*') or its MLP ('-'), in model order
hybrid_of() {
    local out="" u=0 n i
    for n in "$@"; do
        [ -n "$out" ] && out+="|"
        for ((i = 0; i < n; i++)); do if (( (u + i) % 2 == 0 )); then out+="*"; else out+="-"; fi; done
        u=$((u + n))
    done
    echo "$out"
}
# Half-layer stages: the rank that also holds the output layer gives one MLP to the other rank.
# Interleaved (stages 0-3 on ranks 0,1,0,1; the head on rank 1): stage 1's last MLP goes to stage 2.
# ZB-V and DualPipeV (rank 0 holds stages 0 and 3, the head): stage 0's last MLP goes to stage 1.
# Each stage's last unit is an MLP when it holds whole layers: LAYERS a multiple of 4.
U=$((LAYERS / 2))   # units per stage of 4: 2 * LAYERS / 4
HALF_INTERLEAVED="" HALF_V=""
if [ $((LAYERS % 4)) = 0 ]; then
    HALF_INTERLEAVED=$(hybrid_of "$U" $((U - 1)) $((U + 1)) "$U")
    HALF_V=$(hybrid_of $((U - 1)) $((U + 1)) "$U" "$U")
fi
# The split pipepar search finds for each kind on the units' measured costs (gpt_gpu --unit-costs
# on GPU 0: every attention and MLP, forward and backward; the search simulates the schedule on
# every split within 4 units of the even one)
# (skipped when ONLY picks no searched run)
declare -A SEARCHED GROUP
SEARCH_FLAGS=""
want_search=1
if [ -n "${ONLY:-}" ]; then
    want_search=0
    for n in 1f1b-searched interleaved-vpp2-searched zbv-searched dualpipev-searched; do
        [[ $n =~ $ONLY || $n-defer =~ $ONLY ]] && want_search=1
    done
fi
if [ "$want_search" = 1 ]; then
    say "== gpt_gpu --unit-costs, then pipepar search --hybrid for each kind"
    CUDA_VISIBLE_DEVICES=0 timeout 300 build/gpt_gpu "${MODEL[@]}" --unit-costs "$OUTDIR/units.txt" >"$OUTDIR/units.log" 2>&1
    grep -E "^(unit costs|  attention|wrote|with --defer)" "$OUTDIR/units.log" | tee -a "$LOG"
    SEARCH_FLAGS=$(sed -n 's/^wrote .*; search with: //p' "$OUTDIR/units.log")
    DEFER_FLAG=$(sed -n 's/^with --defer-head-wgrad, add: //p' "$OUTDIR/units.log")
fi
# each kind's split, and for the deferred runs (1F1B, interleaved) the split searched with the
# output layer's weight gradient out of every backward and in the stage's tail (--loss-deferred)
for key in 1f1b interleaved zbv dualpipev 1f1b-defer interleaved-defer; do
    kind=${key%-defer}; flags=$SEARCH_FLAGS; [ "$key" != "$kind" ] && flags="$SEARCH_FLAGS ${DEFER_FLAG:-}"
    SEARCHED[$key]=""; GROUP[$key]=""
    [ -n "$SEARCH_FLAGS" ] || continue
    v=2; [ "$kind" = 1f1b ] && v=1
    eval build/pipepar search --pp 2 --mb "$MB" --kind "$kind" --vpp "$v" --spread 4 "$flags" >"$OUTDIR/search-$key.log" 2>&1
    SEARCHED[$key]=$(sed -n "s/^pattern: '\(.*\)'$/\1/p" "$OUTDIR/search-$key.log")
    GROUP[$key]=$(sed -n 's/^best: [a-z]* vpp=[0-9]* group=\([0-9]*\),.*/\1/p' "$OUTDIR/search-$key.log")
    say "   $key: $(grep -E '^best' "$OUTDIR/search-$key.log") (simulated); split '${SEARCHED[$key]:-none}'"
done
declare -A STEP TOK PEAK DPS
NAMES="1f1b interleaved-vpp2 zbv dualpipev 1f1b-first$FIRST interleaved-vpp2-half zbv-half dualpipev-half"
NAMES="$NAMES 1f1b-searched interleaved-vpp2-searched zbv-searched dualpipev-searched 1f1b-defer 1f1b-searched-defer"
NAMES="$NAMES interleaved-vpp2-searched-defer"
# "defer": the output layer's weight gradient in one product once its stage's backwards are done
# (--defer-head-wgrad, Megatron-LM's defer_embedding_wgrad_compute, which these Megatron-LM runs
# leave off: it needs gradient_accumulation_fusion)
for cfg in "1f1b 1 0" "interleaved 2 0" "zbv 2 0" "dualpipev 2 0" "1f1b 1 $FIRST" "interleaved 2 0 half $HALF_INTERLEAVED" \
           "zbv 2 0 half $HALF_V" "dualpipev 2 0 half $HALF_V" "1f1b 1 0 searched ${SEARCHED[1f1b]}" \
           "interleaved 2 0 searched ${SEARCHED[interleaved]}" "zbv 2 0 searched ${SEARCHED[zbv]}" \
           "dualpipev 2 0 searched ${SEARCHED[dualpipev]}" "1f1b 1 0 defer" "1f1b 1 0 searched-defer ${SEARCHED[1f1b-defer]}" \
           "interleaved 2 0 searched-defer ${SEARCHED[interleaved-defer]}"; do
    read -r kind vpp first how pattern <<<"$cfg"
    name=$kind; [ "$kind" = interleaved ] && name="interleaved-vpp$vpp"
    extra=(); [ "$first" != 0 ] && name="$kind-first$first" && extra=(--first-stage-layers "$first")
    if [ -n "${ONLY:-}" ]; then
        full=$name; [ -n "$how" ] && full="$full-$how"
        [[ $full =~ $ONLY ]] || continue
    fi
    if [ "$how" = defer ]; then
        name="$name-defer"; extra=(--defer-head-wgrad)
    elif [ -n "$how" ]; then
        name="$name-$how"
        key=$kind; [ "$how" = searched-defer ] && key=$kind-defer
        [ -n "$pattern" ] || { say "== gpt_gpu pp 2 $name: skipped, no split (half: LAYERS not a multiple of 4;" \
                                   "searched: see $OUTDIR/units.log, search-$key.log)"; continue; }
        extra=(--hybrid "$pattern")
        [ "$how" != half ] && [ -n "${GROUP[$key]:-}" ] && extra+=(--group "${GROUP[$key]}")   # the search's group too
        [ "$how" = searched-defer ] && extra+=(--defer-head-wgrad)
    fi
    RANK_TIMEOUT=300 ranks_run 2 "$OUTDIR/$name" build/gpt_gpu "${MODEL[@]}" --pp 2 --schedule "$kind" --vpp "$vpp" "${extra[@]}"
    rc=$?
    cat "$OUTDIR/$name.rank0.log" >>"$LOG"
    grep -h "gpt_gpu:" "$OUTDIR/$name.rank1.log" | sed "s/^/rank 1: /" >>"$LOG"
    STEP[$name]=$(step_of "$OUTDIR/$name.rank0.log"); TOK[$name]=$(field_of "$OUTDIR/$name.rank0.log" "tokens/s/gpu")
    PEAK[$name]=$(field_of "$OUTDIR/$name.rank0.log" "peak"); DPS[$name]=$(dpshare_of "$OUTDIR/$name.rank0.log")
    say "== gpt_gpu pp 2 $name (exit $rc): step ${STEP[$name]:-?} ms, efficiency $(eff "$SINGLE" "${STEP[$name]:-0}")"
done

MEG=$OUTDIR/megatron.log
if [ "${SKIP_MEGATRON:-0}" != 1 ]; then
    say "== Megatron-LM: bench/megatron_gpt_bench.py"
    LAYERS=$LAYERS HIDDEN=$HIDDEN HEADS=$HEADS SEQ=$SEQ VOCAB=$VOCAB MB=$MB STEPS=$STEPS WARMUP=$WARMUP FIRST=$FIRST \
        PYTHONPATH=${MEGATRON_PATH:-.megatron}${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 timeout 360 \
        python3 -m torch.distributed.run --nproc_per_node=2 bench/megatron_gpt_bench.py >"$MEG" 2>&1
    say "   (exit $?)"
    grep -E "^megatron" "$MEG" | tee -a "$LOG"
fi
MSINGLE=$(sed -n 's/.*harmonic mean \([0-9.]*\) ms.*/\1/p' "$MEG" 2>/dev/null | head -n 1)
meg() { sed -n "s/^megatron $1.*step \\([0-9.]*\\) ms.*/\\1/p" "$MEG" 2>/dev/null | head -n 1; }
megfield() { sed -n "s|^megatron $1.*$2 \\([0-9.]*\\).*|\\1|p" "$MEG" 2>/dev/null | head -n 1; }
M1=$(meg "1f1b pp 2:"); MI=$(meg "interleaved pp 2 vpp 2"); MF=$(meg "1f1b pp 2 first stage $FIRST layers")

say ""
say "== summary (2 GPUs; efficiency: each framework's own single-GPU baseline / (2 x step))"
say "| schedule | gpt_gpu step | tokens/s/GPU | efficiency | peak GiB | data path | Megatron-LM step | tokens/s/GPU | efficiency | peak GiB |"
say "|---|---|---|---|---|---|---|---|---|---|"
say "| single GPU (harmonic mean) | $SINGLE ms | | | $(field_of "$OUTDIR/single-gpu0.log" "peak") | | ${MSINGLE:-?} ms | $(megfield "single-gpu" "tokens/s/gpu") | | $(megfield "single-gpu" "peak") |"
for name in $NAMES; do
    [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]] && continue
    # each row beside Megatron-LM's run of the same kind (its whole-layer split, no deferral)
    case $name in 1f1b|1f1b-defer|1f1b-searched*) m=$M1; k="1f1b pp 2:" ;; interleaved-vpp2*) m=$MI; k="interleaved pp 2 vpp 2" ;;
                  1f1b-first*) m=$MF; k="1f1b pp 2 first stage $FIRST layers" ;; *) m=""; k="" ;; esac
    mt=""; mp=""
    [ -n "$k" ] && mt=$(megfield "$k" "tokens/s/gpu") && mp=$(megfield "$k" "peak")
    say "| $name | ${STEP[$name]:-?} ms | ${TOK[$name]:-?} | $(eff "$SINGLE" "${STEP[$name]:-0}") | ${PEAK[$name]:-?} | ${DPS[$name]:-?}% | ${m:-—} ms | ${mt:-—} | $( [ -n "$m" ] && eff "${MSINGLE:-0}" "$m" || echo —) | ${mp:-—} |"
done
best=$(for n in $NAMES; do echo "${STEP[$n]:-}"; done | grep -v '^$' | sort -g | head -n 1)
mbest=$(printf '%s\n%s\n%s\n' "$M1" "$MI" "$MF" | grep -v '^$' | sort -g | head -n 1)
say "best against best: gpt_gpu ${best:-?} ms, Megatron-LM ${mbest:-?} ms: $(awk -v a="${best:-0}" -v b="${mbest:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.3fx", b / a; else printf "?" }') (target 1.05x)"
# every run's own log in one archive beside gpt.log (a device machine sends back only a few files)
runs=$(cd "$OUTDIR" && ls *.rank*.log single-gpu*.log megatron.log build.log units.log units.txt search-*.log 2>/dev/null)
[ -n "$runs" ] && (cd "$OUTDIR" && tar czf runs.tar.gz --remove-files $runs)
say "== done in $(( $(date +%s) - t0 )) s; $OUTDIR/gpt.log, each run's log in $OUTDIR/runs.tar.gz"
