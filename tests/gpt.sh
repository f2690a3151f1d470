#!/usr/bin/env bash
# gpt.sh — build/gpt, the small GPT trained with everything composed, equals the same model trained
# on one thread: for a matrix of grids (pp 1/2/4, vpp 1/2, cp 1/2, dp 1/2), schedule kinds, dense
# and MoE, router replay on and off, each run with --check must say that the loss and every
# gradient match on every step (relative error at most 1e-5, measured per tensor as the largest
# difference over the tensor's largest entry), that the routing replayed in training is the
# rollout's, and that each rank's saved-activation peak is its schedule's. Then the model's
# backward against finite differences, replay files, the bad inputs (exit 2, one line), and a
# few configurations under ThreadSanitizer. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BIN=build/gpt
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | tail -n 15; }

if [ ! -x "$BIN" ]; then
    echo "FAIL $BIN is not built (make host)"
    echo "0 passed, 1 failed"
    exit 1
fi

# checked NAME ARGS...: a --check run that exits 0, says every step matches (and with --replay that
# training routed as the rollout did), and that every rank's saved-activation peak agrees
checked() {
    local name=$1; shift
    local out="$tmp/run.txt" bin=${GPT_BIN:-$BIN}
    if ${GPT_ENV:-} "$bin" "$@" --check >"$out" 2>&1; then
        local steps nyes ranks nagree
        steps=$(awk '/^ +[0-9]+ +[0-9.]+ +[0-9]+/ { n++ } END { print n + 0 }' "$out")
        nyes=$(awk '/^ +[0-9]+ +[0-9.]+ +[0-9]+/ && / yes/ { n++ } END { print n + 0 }' "$out")
        ranks=$(grep -c '^rank [0-9]*: saved activations' "$out")
        nagree=$(grep -c '^rank [0-9]*: saved activations.*: agree$' "$out")
        if [ "$steps" -gt 0 ] && [ "$steps" -eq "$nyes" ] && [ "$ranks" -gt 0 ] && [ "$ranks" -eq "$nagree" ] &&
           grep -q '^gradients match' "$out"; then ok "$name: $steps steps match one thread, $ranks ranks' peaks agree"
        else bad "$name: $nyes of $steps steps match, $nagree of $ranks peaks agree" "$out"; fi
    else bad "$name: exit $?" "$out"; fi
}

# 1. the matrix
checked "pp 1, dense"                      --pp 1
checked "pp 1, MoE, replay"                --pp 1 --moe --replay
checked "pp 1, dp 2 x cp 2, MoE"           --pp 1 --dp 2 --cp 2 --moe
checked "pp 2 1f1b"                        --pp 2 --schedule 1f1b
checked "pp 2 1f1b, dp 2, MoE, replay"     --pp 2 --schedule 1f1b --dp 2 --moe --replay
checked "pp 2 1f1b, cp 2, MoE"             --pp 2 --schedule 1f1b --cp 2 --moe
checked "pp 2 interleaved vpp 2, cp 2 x dp 2, MoE, replay (the issue's)" \
                                           --pp 2 --vpp 2 --cp 2 --dp 2 --schedule interleaved --moe --replay
checked "pp 2 interleaved vpp 2, dense"    --pp 2 --vpp 2 --schedule interleaved
checked "pp 2 interleaved vpp 2, microbatch group 4" --pp 2 --vpp 2 --schedule interleaved --group 4
checked "pp 2 zbv, cp 2, MoE, replay"      --pp 2 --schedule zbv --cp 2 --moe --replay
checked "pp 2 dualpipev, dp 2"             --pp 2 --schedule dualpipev --dp 2
checked "pp 2 dualpipev, cp 2, MoE, replay" --pp 2 --schedule dualpipev --cp 2 --moe --replay
checked "pp 4 1f1b, MoE"                   --pp 4 --schedule 1f1b --moe
checked "pp 4 interleaved vpp 2, MoE, replay" --pp 4 --vpp 2 --schedule interleaved --moe --replay
checked "pp 4 zbv (the issue's)"           --pp 4 --schedule zbv
checked "pp 4 zbv, cp 2, MoE, replay"      --pp 4 --schedule zbv --cp 2 --moe --replay
checked "pp 4 dualpipev, MoE"              --pp 4 --schedule dualpipev --moe
# the other kinds, uneven stages, and a step whose microbatch count changes
checked "pp 2 gpipe, dp 2"                 --pp 2 --schedule gpipe --dp 2
checked "pp 2 zb-h1, MoE, replay"          --pp 2 --schedule zb-h1 --moe --replay
checked "pp 2 interleaved-zb vpp 2, cp 2"  --pp 2 --vpp 2 --schedule interleaved-zb --cp 2
checked "pp 2 dualpipe, MoE"               --pp 2 --schedule dualpipe --moe
checked "pp 2 1f1b, first stage 3 of 8 layers" --pp 2 --schedule 1f1b --first-stage-layers 3 --moe --replay
checked "pp 2 interleaved vpp 2, first stage 2 of 8 layers, cp 2" --pp 2 --vpp 2 --schedule interleaved \
                                           --first-stage-layers 2 --cp 2
# stages cut between a layer's attention and its MLP (--hybrid: Megatron's hybrid pattern, '*' a
# layer's attention, '-' its MLP, 'E' an MoE MLP), under every placement; and empty end stages
checked "pp 2 1f1b, half layers ('*-*-*-*-*|-*-*-*-')" --pp 2 --schedule 1f1b --hybrid '*-*-*-*-*|-*-*-*-'
checked "pp 2 interleaved, half layers, cp 2 x dp 2, MoE, replay (vpp from the pattern)" --pp 2 --schedule interleaved \
                                           --cp 2 --dp 2 --replay --hybrid '*-*E*|-*E|*-*|E*-*E'
checked "pp 2 zbv, half layers, MoE, replay" --pp 2 --schedule zbv --replay --hybrid '*-*E*|-*E|*-*|E*-*E'
checked "pp 2 dualpipev, a stage of one attention" --pp 2 --schedule dualpipev --hybrid '*|-*-*-*-*-*-|*-*|-'
checked "pp 2 dualpipe, half layers, MoE"   --pp 2 --schedule dualpipe --hybrid '*-*E*-*|E*-*E'
checked "pp 4 interleaved vpp 2, stages of one block" --pp 4 --schedule interleaved \
                                           --hybrid '*|-|*-|*-*|-*-|*-*-|*|-*-*-'
checked "pp 2 zbv, empty first and last stages" --pp 2 --schedule zbv --hybrid '|*-*-*-*|-*-*-*-|'
checked "pp 2 1f1b, an empty last stage (first stage 8 of 8 layers)" --pp 2 --first-stage-layers 8
# the half-layer split found from measured costs: --unit-costs times every attention and MLP,
# pipepar search --hybrid finds ZB-V's fastest split of them, and that split trains as the whole
# model does (the search's choice depends on the timings; any split it gives must match)
if "$BIN" --moe --unit-costs "$tmp/units.txt" >"$tmp/units.out" 2>&1 && [ "$(grep -vc '^#' "$tmp/units.txt")" -eq 16 ] &&
   flags=$(sed -n 's/^wrote .*; search with: //p' "$tmp/units.out") && [ -n "$flags" ]; then
    ok "--unit-costs: 16 units timed, and the search flags printed"
    if eval build/pipepar search --pp 2 --mb 8 --kind zbv --vpp 2 --spread 4 "$flags" >"$tmp/search.out" 2>&1 &&
       pattern=$(sed -n "s/^pattern: '\\(.*\\)'$/\\1/p" "$tmp/search.out") && [ -n "$pattern" ]; then
        ok "pipepar search --hybrid on the measured units: '$pattern'"
        checked "pp 2 zbv on the searched half-layer split, MoE, replay" --pp 2 --schedule zbv --replay --hybrid "$pattern"
    else bad "pipepar search on the measured units" "$tmp/search.out"; fi
    # with the output layer's weight gradient deferred: the part of the loss's backward it moves,
    # timed on its own, less than the whole; the search takes it, and its 1F1B split trains
    lb=$(sed -n 's/^wrote .* --loss [0-9.]*,\([0-9.]*\),0 .*/\1/p' "$tmp/units.out")
    dw=$(sed -n 's/^with --defer-head-wgrad, add: --loss-deferred \([0-9.]*\)$/\1/p' "$tmp/units.out")
    if [ -n "$lb" ] && [ -n "$dw" ] && awk -v d="$dw" -v b="$lb" 'BEGIN { exit !(d > 0 && d < b) }' &&
       eval build/pipepar search --pp 2 --mb 8 --kind 1f1b --spread 4 "$flags" --loss-deferred "$dw" >"$tmp/search-d.out" 2>&1 &&
       pattern=$(sed -n "s/^pattern: '\\(.*\\)'$/\\1/p" "$tmp/search-d.out") && [ -n "$pattern" ]; then
        ok "--loss-deferred $dw of the loss's backward $lb, searched: '$pattern'"
        checked "pp 2 1f1b on the split searched with the deferral, deferred" --pp 2 --schedule 1f1b --replay \
                --defer-head-wgrad --hybrid "$pattern"
    else bad "--loss-deferred from --unit-costs (loss B '$lb', deferred '$dw')" "$tmp/units.out"; fi
else bad "--unit-costs" "$tmp/units.out"; fi
# the output layer's weight gradient deferred to the end of its stage's backwards, in one product
checked "pp 2 1f1b, deferred output-layer weight gradient" --pp 2 --schedule 1f1b --defer-head-wgrad
checked "pp 2 interleaved, deferred output-layer weight gradient, cp 2 x dp 2, MoE, replay" --pp 2 --vpp 2 \
                                           --schedule interleaved --cp 2 --dp 2 --moe --replay --defer-head-wgrad
checked "pp 2 dualpipe (two copies of the head), deferred output-layer weight gradient" --pp 2 --schedule dualpipe \
                                           --defer-head-wgrad
checked "pp 2 zbv, half layers, deferred output-layer weight gradient" --pp 2 --schedule zbv --defer-head-wgrad \
                                           --hybrid '*-*-*|-*-*-|*-*-*-|*-*-*-'
# 20 steps: the two trainings' loss curves stay together, and the loss falls
out="$tmp/curve.txt"
if "$BIN" --pp 2 --vpp 2 --dp 2 --schedule interleaved --moe --replay --steps 20 --check >"$out" 2>&1; then
    n=$(awk '/^ +[0-9]+ +[0-9.]+ +[0-9]+/ && / yes/ { n++ } END { print n + 0 }' "$out")
    first=$(awk '/^ +1 +[0-9.]+/ { print $2 }' "$out"); last=$(awk '/^ +20 +[0-9.]+/ { print $2 }' "$out")
    if [ "$n" -eq 20 ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }'; then
        ok "20 steps: the loss curve is the one-thread model's at every step, and falls ($first -> $last)"
    else bad "20 steps: $n of 20 match, loss $first -> $last" "$out"; fi
else bad "20 steps: exit $?" "$out"; fi

# 2. the model's backward against central differences (what --check cannot see: both sides share it)
for moe in "" --moe; do
    if "$BIN" --gradcheck $moe >"$tmp/gc.txt" 2>&1 && grep -q 'agrees with central differences' "$tmp/gc.txt"
    then ok "--gradcheck $moe: every tensor's backward agrees with finite differences"
    else bad "--gradcheck $moe" "$tmp/gc.txt"; fi
done

# 3. replay files: written under one layer split, replayed under another (the recording's layer
#    axis is the model's, so any split reads it), and refused for another model or other data
if "$BIN" --pp 2 --moe --replay --steps 2 --replay-save "$tmp/rec.txt" >"$tmp/save.txt" 2>&1 &&
   grep -q '^pipepar gpt router recording' "$tmp/rec.txt"; then ok "--replay-save writes the recording"
else bad "--replay-save" "$tmp/save.txt"; fi
checked "replayed from the file under another split (first stage 5 of 8), cp 2" --pp 2 --moe --replay --steps 2 \
    --replay-file "$tmp/rec.txt" --first-stage-layers 5 --cp 2

expect_usage() {   # expect_usage NEEDLE ARGS...: exit 2 and one stderr line containing NEEDLE
    local needle=$1; shift
    "$BIN" "$@" >"$tmp/u.out" 2>"$tmp/u.err"; local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$needle" "$tmp/u.err" && [ "$(wc -l <"$tmp/u.err")" -eq 1 ]
    then ok "exit 2: $(cat "$tmp/u.err")"
    else bad "$* -> exit $rc, wanted 2 and '$needle'" "$tmp/u.err"; fi
}
# 4. bad input
expect_usage "world=6: must equal tp*cp*dp*pp = 8" --ranks 6 --dp 2 --cp 2 --pp 2
expect_usage "with cp=2 it must be a multiple of 2*cp=4" --cp 2 --seq-multiple 6
expect_usage "lengths[1]=40: exceeds the bin capacity (32)" --lengths 5,40 --capacity 32
expect_usage "padded to a multiple of 4 it is 36 tokens, more than the bin capacity (34)" --cp 2 --lengths 5,33 --capacity 34
expect_usage "recorded from a model with MoE layers 0,2,4,6, 4 experts, top-2; this model has MoE layers 0,2,4" \
    --pp 2 --moe --replay --steps 2 --layers 6 --replay-file "$tmp/rec.txt"
expect_usage "step 1 was recorded over other data" --pp 2 --moe --replay --steps 2 --seed 7 --replay-file "$tmp/rec.txt"
expect_usage "holds fewer than the 3 steps asked for" --pp 2 --moe --replay --steps 3 --replay-file "$tmp/rec.txt"
expect_usage "gpt: --replay-file=$tmp/none.txt: No such file" --moe --replay --replay-file "$tmp/none.txt"
expect_usage "gpt: --bogus: unknown flag (see --help)" --bogus
expect_usage "gpt: --pp: given twice" --pp 2 --pp 2
expect_usage "gpt: --pp=0: must be an integer in 1..8" --pp 0
expect_usage "gpt: --lr=2: must be a number in 0..1" --lr 2
expect_usage "gpt: --steps: needs a value" --steps
expect_usage "gpt: --replay: needs --moe" --replay
expect_usage "gpt: --topk: must be at most --experts" --moe --experts 2 --topk 3
expect_usage "gpt: --schedule=nope:" --schedule nope
expect_usage "gpt: --lengths=5,,3: a comma-separated list" --lengths 5,,3
expect_usage "gpt: --hybrid=*-*--*: block 4 is 'mlp': a GPT layer is '*' (attention) then '-' or 'E' (its MLP), so block 4 must be '*'" \
    --pp 2 --hybrid '*-*--*'
expect_usage "gpt: --hybrid=*-*-*: has 5 blocks: a GPT layer is two" --hybrid '*-*-*'
expect_usage "gpt: --hybrid=*-*-|*-: has 3 layers, --layers says 4" --pp 2 --hybrid '*-*-|*-' --layers 4
expect_usage "gpt: --hybrid=*-|*-|*-|*-: its 4 stages on pp 2 make vpp 2, and vpp=2: 1f1b runs one chunk per rank" \
    --pp 2 --hybrid '*-|*-|*-|*-' --schedule 1f1b
expect_usage "3 '|'-separated segments, but pp=2 x vpp=2 needs 4" --pp 2 --hybrid '*-|*-|*-*-' --schedule zbv
expect_usage "gpt: --moe: not with --hybrid" --moe --hybrid '*E'
expect_usage "gpt: --group: group=4: only interleaved schedules take a microbatch group size" --pp 2 --group 4
expect_usage "gpt: --unit-costs=$tmp/u.txt: times the model whole on one thread: not with --hybrid" --unit-costs "$tmp/u.txt" --pp 2
expect_usage "gpt: --unit-costs=/nonexistent/u.txt: No such file or directory" --unit-costs /nonexistent/u.txt
expect_usage "gpt: --first-stage-layers: not with --hybrid" --pp 2 --first-stage-layers 1 --hybrid '*-|*-'
if "$BIN" --help >"$tmp/h.txt" 2>&1 && grep -q '^usage: gpt' "$tmp/h.txt"; then ok "--help"; else bad "--help" "$tmp/h.txt"; fi

# 5. under ThreadSanitizer: every rank a thread, the cp and dp collectives inside the callbacks
if make -s BUILD=build-tsan OPT="-O1 -g" SAN="-fsanitize=thread" build-tsan/gpt >"$tmp/tsan-build.txt" 2>&1; then
    GPT_BIN=build-tsan/gpt GPT_ENV="env TSAN_OPTIONS=halt_on_error=1" checked "TSan: pp 2 interleaved, cp 2 x dp 2, MoE, replay" \
        --pp 2 --vpp 2 --cp 2 --dp 2 --schedule interleaved --moe --replay --steps 2
    GPT_BIN=build-tsan/gpt GPT_ENV="env TSAN_OPTIONS=halt_on_error=1" checked "TSan: pp 2 dualpipev, cp 2" \
        --pp 2 --schedule dualpipev --cp 2 --steps 2
else bad "TSan build of gpt" "$tmp/tsan-build.txt"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
