#!/usr/bin/env bash
# CLI checks of `pipepar layers`: the stages it prints, its exit codes and messages.
set -u
. "$(dirname "$0")/cli_lib.sh"
# expect_out NAME EXPECTED_SUBSTRING ARGS...: exit 0 and stdout contains the text
expect_out() {
    local name=$1 want=$2; shift 2
    local out; out=$("$P" layers "$@" 2>&1); local rc=$?
    if [ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"; then ok; else bad "$name: rc=$rc, output: $out"; fi
}
# expect_lines NAME N ARGS...: exit 0 and exactly N lines on stdout
expect_lines() {
    local name=$1 want=$2; shift 2
    local out; out=$("$P" layers "$@" 2>/dev/null); local rc=$?
    if [ $rc -eq 0 ] && [ "$(wc -l <<<"$out")" -eq "$want" ]; then ok; else bad "$name: rc=$rc, output: $out"; fi
}
# expect_err NAME EXPECTED_STDERR ARGS...: exit 2, one line on stderr containing the text
expect_err() {
    local name=$1 want=$2; shift 2
    local err; err=$("$P" layers "$@" 2>&1 >/dev/null); local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$err" && [ "$(wc -l <<<"$err")" -eq 1 ]; then ok
    else bad "$name: rc=$rc, stderr: $err"; fi
}

expect_out "moonlight rank 0" "stage 0 rank 0 chunk 0 layers [0,13) items Et*13" --layers 27 --pp 2 --first 13
expect_out "moonlight rank 1" "stage 1 rank 1 chunk 0 layers [13,27) items t*14L" --layers 27 --pp 2 --first 13
expect_out "moonlight layout" "layout Et*13|t*14L" --layers 27 --pp 2 --first 13
expect_lines "one line per stage plus the layout" 9 --layers 32 --pp 4 --vpp 2
expect_out "interleaved stage" "stage 5 rank 1 chunk 1 layers [20,24) items t*4" --layers 32 --pp 4 --vpp 2
expect_out "accounted split" "layout Et*7|(t*8|)*2t*7L" --layers 30 --pp 4 --embedding --loss
expect_out "deepseek layout mtp" "stage 30 rank 14 chunk 1 layers [61,61) items m" --pp 16 --layout 'Et*3|(tt|)*29,m|L'
expect_out "deepseek moe indices" "stage 1 rank 1 chunk 0 layers [3,5) items t*2 moe [0,2) dense [3,3) mtp [0,0)" \
    --pp 16 --layout 'Et*3|(tt|)*29,m|L' --moe-freq '[0]*3+[1]*58'
expect_out "rank and chunk filter" "stage 16 rank 0 chunk 1 layers [33,35) items t*2" \
    --pp 16 --layout 'Et*3|(tt|)*29,m|L' --rank 0 --chunk 1
expect_lines "rank filter prints its chunks" 2 --pp 16 --layout 'Et*3|(tt|)*29,m|L' --rank 3
expect_out "hybrid pattern" "stage 1 rank 1 chunk 0 layers [6,12) items M*-M*- mamba [2,4) attention [2,4) mlp [2,4)" \
    --pp 2 --hybrid 'M*-M*-|M*-M*-'
expect_out "hybrid moe" "stage 0 rank 0 chunk 0 layers [0,3) items MEM moe [0,1) mamba [0,2) attention [0,0)" --pp 2 --hybrid 'MEM|*E'
expect_out "balanced" "layout Et*7|(t*11|)*2t*3L" --pp 4 --costs '3,1*30,4' --embedding-cost 2 --loss-cost 5
expect_out "balanced bottleneck" "max stage cost 11" --pp 4 --costs '3,1*30,4' --embedding-cost 2 --loss-cost 5
expect_out "balanced memory" "stage 0 rank 0 chunk 0 layers [0,3) items Et*3 cost 3 memory 6" \
    --pp 2 --costs '1*4' --memory '1,2,3,4' --memory-cap 6
# a GPU at 0.808 of its neighbour's speed, ZB-V's V placement: rank 0 holds stages 0 and 3
expect_out "speeds, V" "stage 3 rank 0 chunk 1 layers [18,24) items t*6L cost 6.56" \
    --pp 2 --vpp 2 --costs '1*24' --loss-cost 0.56 --rank-speed 1,0.808 --v-placement
expect_out "speeds, V: rank times" "rank time 13.56 13.6138614" \
    --pp 2 --vpp 2 --costs '1*24' --loss-cost 0.56 --rank-speed 1,0.808 --v-placement
expect_out "speeds, V: json" '"v_placement":true,"rank_time":[13.56,13.613861386138613]' \
    --pp 2 --vpp 2 --costs '1*24' --loss-cost 0.56 --rank-speed 1,0.808 --v-placement --json
expect_lines "speeds, V: rank filter" 2 --pp 2 --vpp 2 --costs '1*24' --rank-speed 1,0.808 --v-placement --rank 0
expect_out "speeds, looped: the slow rank gets less" "layout Et*13|t*11L" --pp 2 --costs '1*24' --rank-speed 1,0.808
# a GPT of 24 layers in half layers ('*' attention 0.69, '-' MLP 0.31, the head 0.56): the rank
# that holds the head gives one MLP to the other, looped and V
GPT24=$(printf '*-%.0s' $(seq 24)); GPTC=$(printf '0.69,0.31,%.0s' $(seq 24)); GPTC=${GPTC%,}
expect_out "hybrid balance, interleaved" "pattern *-*-*-*-*-*-|*-*-*-*-*-*|-*-*-*-*-*-*-|*-*-*-*-*-*-" \
    --pp 2 --vpp 2 --hybrid "$GPT24" --costs "$GPTC" --loss-cost 0.56 --rank-speed 1,1
expect_out "hybrid balance, V" "pattern *-*-*-*-*-*|-*-*-*-*-*-*-|*-*-*-*-*-*-|*-*-*-*-*-*-" \
    --pp 2 --vpp 2 --hybrid "$GPT24" --costs "$GPTC" --loss-cost 0.56 --rank-speed 1,1 --v-placement
expect_out "hybrid balance: rank times" "rank time 12.25 12.31" \
    --pp 2 --vpp 2 --hybrid "$GPT24" --costs "$GPTC" --loss-cost 0.56 --rank-speed 1,1 --v-placement
expect_out "hybrid balance: json" '"pattern":"*-|*E","max_cost":2' --pp 2 --hybrid '*-*E' --costs '1*4' --json
expect_err "hybrid balance places the breaks" "--hybrid=*-|*-: with --costs the balance places the stage breaks" \
    --pp 2 --hybrid '*-|*-' --costs '1*4'
expect_err "hybrid balance symbols" "hybrid='*-x-': 'x' at position 2 is not a layer symbol" --pp 2 --hybrid '*-x-' --costs '1*4'
expect_err "hybrid balance count" "num_layers=4: the hybrid pattern has 3 layers" --pp 2 --hybrid '*-*' --costs '1*4'
expect_out "json" '"stages":[{"stage":0,"rank":0,"chunk":0,"first":0,"count":13,"items":"Et*13"' \
    --layers 27 --pp 2 --first 13 --json
expect_lines "json is one line" 1 --layers 27 --pp 2 --first 13 --json
expect_out "help" "usage: pipepar layers" --help

expect_err "not divisible" "pipepar: num_layers=27: does not divide evenly over pp=2" --layers 27 --pp 2
expect_err "no middle stage" "num_layers=27 minus first stage 13 and last stage 10 leaves 4 layers, but pp=2 has 0 middle stages" \
    --layers 27 --pp 2 --first 13 --last 10
expect_err "bad layout letter" "layout 'Ett|x': 'x' at position 4 (stage 1) is not a layer" --pp 2 --layout 'Ett|x'
expect_err "layout stage count" "3 stages, not a multiple of pp=2" --pp 2 --layout 'Et|t|tL'
expect_err "layout first layer" "the first layer must be E (embedding)" --pp 2 --layout 'tE|tL'
expect_err "layout vs layers" "num_layers=5: the layout has 2 decoder layers (t)" --layers 5 --pp 2 --layout 'Et|tL'
expect_err "hybrid segments" "3 '|'-separated segments, not a multiple of pp=2" --pp 2 --hybrid 'M*|M*|M*'
expect_err "moe freq length" "the list has 3 entries, but the model has 4 decoder layers" --layers 4 --moe-freq '[1]*3'
expect_err "memory cap" "the layers need at least 3 stages under this cap, but pp*vpp = 2" \
    --pp 2 --costs '1*4' --memory '1,2,3,4' --memory-cap 5
expect_err "costs list" "--costs='1,x': expected numbers >= 0" --pp 2 --costs '1,x'
expect_err "speeds need costs" "--rank-speed: balances a split, so it needs --costs" --layers 8 --pp 2 --rank-speed 1,1
expect_err "V needs costs" "--v-placement: balances a split, so it needs --costs" --layers 8 --pp 2 --vpp 2 --v-placement
expect_err "a speed a rank" "--rank-speed: 3 values, but --pp=2 (one speed a rank)" --pp 2 --costs '1*8' --rank-speed 1,1,1
expect_err "speeds above 0" "--rank-speed: value 2 is 0: a rank's speed must be from 1e-06 to 1e+06" --pp 2 --costs '1*8' --rank-speed 1,0
expect_err "V at vpp 2" "v_placement=1: the V placement holds 2 stages a rank, but vpp=1" --pp 2 --costs '1*8' --v-placement
expect_err "costs vs layers" "--costs: 3 values, but --layers=4" --layers 4 --costs '1,1,1'
expect_err "costs with layout" "--costs: finds its own split" --pp 2 --costs '1,1' --layout 'Et|tL'
expect_err "memory needs costs" "need --costs" --layers 4 --memory-cap 3
expect_err "missing layers" "--layers: required" --pp 2
expect_err "zero pp" "--pp=0: must be between 1" --layers 4 --pp 0
expect_err "not a number" "--layers: expected an integer, got 'many'" --layers many
expect_err "missing value" "--pp: needs a value" --layers 4 --pp
expect_err "unknown flag" "--bogus: unknown flag" --layers 4 --bogus
expect_err "rank out of range" "--rank=2: must be below pp=2" --layers 4 --pp 2 --rank 2
expect_err "chunk without rank" "--chunk=0: needs --rank" --layers 4 --pp 2 --chunk 0
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
