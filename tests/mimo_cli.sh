#!/usr/bin/env bash
# CLI checks of `pipepar mimo`: grids, layouts, bridges, roles, programs; exit codes and messages.
set -u
. "$(dirname "$0")/cli_lib.sh"
# expect_out NAME EXPECTED_SUBSTRING ARGS...: exit 0 and stdout contains the text
expect_out() {
    local name=$1 want=$2; shift 2
    local out; out=$("$P" mimo "$@" 2>&1); local rc=$?
    if [ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"; then ok; else bad "$name: rc=$rc, output: $out"; fi
}
# expect_err NAME EXPECTED_STDERR ARGS...: exit 2, one line on stderr containing the text
expect_err() {
    local name=$1 want=$2; shift 2
    local err; err=$("$P" mimo "$@" 2>&1 >/dev/null); local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$err" && [ "$(wc -l <<<"$err")" -eq 1 ]; then ok
    else bad "$name: rc=$rc, stderr: $err"; fi
}
V='vision:offset=0,tp=1,pp=1,dp=2'
L='language:offset=2,tp=1,pp=2,dp=1'
expect_out "issue example layout" "world 4, 2 modules, non-colocated" --grid "$V" --grid "$L"
expect_out "module line" "language   ranks 2-3   tp 1 x cp 1 x dp 1 x pp 2, order tp-cp-dp-pp  (language model)" --grid "$V" --grid "$L"
expect_out "fan-in" "bridge vision -> language: fan-in 2:1 (dp 2 -> dp 1)" --grid "$V" --grid "$L"
expect_out "fan-in transfers" "forward:  0 -> 2 [into part 0 of 2], 1 -> 2 [into part 1 of 2]" --grid "$V" --grid "$L"
expect_out "gradients back" "backward: 2 [part 0 of 2] -> 0, 2 [part 1 of 2] -> 1" --grid "$V" --grid "$L"
expect_out "pipeline proven" "pipeline: 1f1b, 3 stages (vision 0, language 1-2), mb 4: schedule validated; physical programs of 4 ranks" --grid "$V" --grid "$L"
expect_out "encoder role" "rank 1: encoders only; sends the output over the bridge" --grid "$V" --grid "$L" --rank 1
expect_out "language first stage role" "language   stage 0 of 2 (first), tp 0, cp 0, dp 0, local rank 0" --grid "$V" --grid "$L" --rank 2
expect_out "language last stage role" "language   stage 1 of 2 (last)" --grid "$V" --grid "$L" --rank 3
expect_out "program: fan-in group" "+ RECV_F language.0 mb0 from rank 1 [part 1 of 2]" --grid "$V" --grid "$L" --rank 2 --program
expect_out "gpipe" "pipeline: gpipe, 3 stages" --grid "$V" --grid "$L" --schedule gpipe --mb 8
expect_out "zb-h1" "pipeline: zb-h1, 3 stages" --grid "$V" --grid "$L" --schedule zb-h1
expect_out "colocated" "world 4, 2 modules, colocated" --grid vision:dp=4 --grid language:pp=2,dp=2
expect_out "colocated role" "rank 3: encoders, then the language model (colocated)" --grid vision:dp=4 --grid language:pp=2,dp=2 --rank 3
expect_out "colocated bridge around" "vision runs outside the pipeline" --grid vision:dp=4 --grid language:pp=2,dp=2
expect_out "fan-out" "bridge vision -> language: fan-out 1:2 (dp 1 -> dp 2)" --grid vision:dp=1 --grid language:offset=1,dp=2
expect_out "tp pairs" "forward:  0 [part 0 of 2] -> 1, 0 [part 0 of 2] -> 2, 0 [part 1 of 2] -> 3" --grid vision:dp=1 --grid language:offset=1,dp=2,tp=2
expect_out "custom language" "(language model)" --grid vision:dp=2 --grid text:offset=2,pp=2 --language text
expect_out "expert coordinates" "ep 1, expert dp 1" --grid vision:dp=4 --grid language:dp=4,ep=2 --rank 3
expect_out "mixed has no pipeline" "pipeline: not available: layout mixed" --grid vision:dp=2 --grid audio:tp=2 --grid language:offset=2,pp=2
expect_out "help" "usage: pipepar mimo" --help
expect_err "overlap" "modules vision (ranks 0-3) and language (ranks 2-5) share ranks 2-3 but do not coincide" --grid vision:dp=4 --grid language:offset=2,dp=4
expect_err "gap" "ranks 2-3 of world=6 belong to no module grid (vision: ranks 0-1, language: ranks 4-5)" --grid vision:dp=2 --grid language:offset=4,pp=2
expect_err "rank in no grid (world)" "rank 4 of world=5 belongs to no module grid" --grid "$V" --grid "$L" --world 5
expect_err "past world" "module language: ranks 2-3 (offset 2 + tp*cp*dp*pp 2) go past world=3" --grid "$V" --grid "$L" --world 3
expect_err "no language" "no module named 'language'" --grid vision:dp=2 --grid text:offset=2
expect_err "dp does not divide" "bridge vision -> language: dp=3 and dp=2: one must be a multiple of the other" --grid vision:dp=3 --grid language:offset=3,dp=2
expect_out "colocated encoder pp" "pipeline: not available: module vision: pp=2: a colocated encoder runs outside" --grid vision:pp=2 --grid language:dp=2
expect_err "bad key" "'xp' is not a key" --grid vision:xp=2 --grid language:offset=2
expect_err "bad grid text" "expected NAME:key=value" --grid vision
expect_err "bad order" "module vision: order='tp-ep': 'ep' is not a dimension" --grid vision:dp=2,order=tp-ep --grid language:offset=2
expect_err "rank out of range" "--rank=4: must be below the world of 4 ranks" --grid "$V" --grid "$L" --rank 4
expect_err "program needs rank" "--program: needs --rank R" --grid "$V" --grid "$L" --program
expect_err "bad schedule" "--schedule=zbv: a MIMO pipeline runs one stage per rank" --grid "$V" --grid "$L" --schedule zbv
expect_err "missing grid" "--grid: required" --rank 0
expect_err "unknown flag" "--bogus: unknown flag" --grid "$V" --bogus
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
