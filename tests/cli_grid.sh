#!/usr/bin/env bash
# CLI checks of `pipepar grid`: the groups it prints, its exit codes and messages.
set -u
. "$(dirname "$0")/cli_lib.sh"
# expect_out NAME EXPECTED_SUBSTRING ARGS...: exit 0 and stdout contains the text
expect_out() {
    local name=$1 want=$2; shift 2
    local out; out=$("$P" grid "$@" 2>&1); local rc=$?
    if [ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"; then ok; else bad "$name: rc=$rc, output: $out"; fi
}
# expect_err NAME EXPECTED_STDERR ARGS...: exit 2, one line on stderr containing the text
expect_err() {
    local name=$1 want=$2; shift 2
    local err; err=$("$P" grid "$@" 2>&1 >/dev/null); local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$err" && [ "$(wc -l <<<"$err")" -eq 1 ]; then ok
    else bad "$name: rc=$rc, stderr: $err"; fi
}
expect_out "megatron pipeline groups" "pp     4 groups of 4 (pipeline): [0 4 8 12] [1 5 9 13] [2 6 10 14] [3 7 11 15]" --world 16 --tp 2 --pp 4
expect_out "megatron dp groups" "dp     8 groups of 2 (data parallel): [0 2] [1 3] [4 6] [5 7]" --world 16 --tp 2 --pp 4
expect_out "model-parallel group" "tp-pp  2 groups of 8" --world 16 --tp 2 --pp 4
expect_out "rank coordinates" "rank 5: tp 1, cp 0, dp 1, pp 0" --world 8 --tp 2 --cp 2 --rank 5
expect_out "rank's dp-cp group" "cp-dp  group 1 of 2: [1 3 5 7]  index 2" --world 8 --tp 2 --cp 2 --rank 5
expect_out "pipeline neighbours" "previous stage 12, next stage 4" --world 16 --tp 2 --pp 4 --rank 0
expect_out "custom order" "pp     4 groups of 2 (pipeline): [0 2] [1 3] [4 6] [5 7]" --world 8 --tp 2 --pp 2 --order tp-pp-dp
expect_out "one mask" "cp-dp  4 groups of 2" --world=8 --tp=2 --pp=2 --group dp-cp
expect_out "help" "usage: pipepar grid" --help
expect_err "world not a multiple" "world=6: must be a multiple of tp*cp*pp = 4" --world 6 --tp 4
expect_err "dp disagrees" "world=8: must equal tp*cp*dp*pp = 4" --world 8 --tp 2 --dp 2
expect_err "bad order" "order='tp-ep': 'ep' is not a dimension" --world 8 --tp 2 --order tp-ep
expect_err "order leaves out a dimension" "leaves out pp, whose size is 2" --world 8 --tp 2 --pp 2 --order tp-dp
expect_err "rank out of range" "--rank=9: must be below --world=8" --world 8 --rank 9
expect_err "missing world" "--world: required" --tp 2
expect_err "zero size" "--tp=0: must be between 1" --world 8 --tp 0
expect_err "negative size" "--pp=-2: must be between 1" --world 8 --pp -2
expect_err "not a number" "--cp: expected an integer, got 'two'" --world 8 --cp two
expect_err "missing value" "--tp: needs a value" --world 8 --tp
expect_err "unknown flag" "--bogus: unknown flag" --world 8 --bogus
expect_err "bad group" "'xx' is not a dimension" --world 8 --group xx
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
