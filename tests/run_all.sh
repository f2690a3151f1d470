#!/usr/bin/env bash
# The whole host test run (what `make test` and CI do):
#   1. the test runner, plain build          (every suite)
#   2. the shell-level tests tests/*.sh       (CLI exit codes and messages, demo, ...); beside them,
#      in a second lane, the search suite under ASan + UBSan and the CLI's shell tests
#      (tests/*cli*.sh) again against an ASan + UBSan build of the CLI (build-asan/pipepar)
#   3. the test runner under ASan + UBSan    (every other suite)
#   4. the test runner under TSan            (the suites that start threads)
#   5. the fuzz corpora and fixed findings, replayed under ASan + UBSan (tests/fuzz/run.sh)
#   6. compile checks: the header as C++, and the GPU companions with nvcc where it exists, with
#      the host tests of pipepar_nccl.c's internals (tests/gpu/host_*.c) that build with them
# Each part prints "N passed, N failed" and when it started; the last line sums them all.
# JOBS (default 2) is make's -j and the fuzz build's.
set -u
cd "$(dirname "$0")/.."
export JOBS=${JOBS:-2}
total_pass=0; total_fail=0
log=$(mktemp -d)
t_start=$(date +%s)
part() { echo "== $* (at $(( $(date +%s) - t_start )) s)"; }   # a part's title and when it starts

count() {   # count NAME LOGFILE EXITCODE: add the log's last "N passed, N failed" to the totals
    local name=$1 file=$2 rc=$3 line p f
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$file" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $name: no result line (exit $rc); last output:"; tail -n 20 "$file" | sed 's/^/    /'
        total_fail=$((total_fail + 1)); return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name: exit $rc"; fi
    grep -E '^(FAIL|skip|     )' "$file" | head -n 60
    echo "  $name: $p passed, $f failed"
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
}

compile_check() {   # compile_check NAME COMMAND...: one test that passes when the command does
    local name=$1; shift
    if "$@" >"$log/cc.txt" 2>&1; then total_pass=$((total_pass + 1)); echo "  $name: ok"
    else total_fail=$((total_fail + 1)); echo "FAIL $name"; tail -n 30 "$log/cc.txt" | sed 's/^/    /'; fi
}

part "build (plain)"
make -s -j"$JOBS" host >"$log/b1.txt" 2>&1 || { cat "$log/b1.txt"; echo "0 passed, 1 failed"; exit 1; }
part "tests (plain)"
build/run_tests >"$log/t1.txt" 2>&1; count "plain" "$log/t1.txt" $?

ASAN_MAKE=(make -s -j"$JOBS" BUILD=build-asan OPT="-O1 -g"
           SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all")
ASAN_RUN=(env ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1)
part "build (ASan + UBSan: the test runner and the CLI)"
asan_ok=0
if "${ASAN_MAKE[@]}" build-asan/run_tests build-asan/pipepar >"$log/b2.txt" 2>&1; then asan_ok=1
else cat "$log/b2.txt"; total_fail=$((total_fail + 1)); fi

# The shell tests below leave a core idle, so a second lane runs beside them: the ASan suite that
# takes longest (search: computation alone) and the CLI shell tests again against the ASan CLI
# (leaks and undefined behaviour fail them). Nothing in either lane times the wall clock; the
# lane's logs are counted after the shell tests, in a fixed order.
lane=""
if [ "$asan_ok" = 1 ]; then
    (
        "${ASAN_RUN[@]}" build-asan/run_tests search >"$log/t2s.txt" 2>&1; echo $? >"$log/t2s.rc"
        i=0
        for t in tests/*cli*.sh; do
            case "$t" in tests/*_lib.sh) continue;; esac
            t0=$(date +%s)
            PIPEPAR=build-asan/pipepar ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1 \
                bash "$t" >"$log/acli.$i.txt" 2>&1
            echo "$? $(basename "$t") $(( $(date +%s) - t0 ))" >"$log/acli.$i.rc"
            i=$((i + 1))
        done
    ) &
    lane=$!
fi

part "shell tests"
for t in tests/*.sh; do
    case "$t" in tests/run_all.sh|tests/*_lib.sh) continue;; esac   # the runner and sourced helpers
    t0=$(date +%s)
    bash "$t" >"$log/sh.txt" 2>&1; count "$(basename "$t") ($(( $(date +%s) - t0 )) s)" "$log/sh.txt" $?
done
[ -n "$lane" ] && wait "$lane"

part "tests (ASan + UBSan)"
if [ "$asan_ok" = 1 ]; then
    count "asan+ubsan: search (beside the shell tests)" "$log/t2s.txt" "$(cat "$log/t2s.rc" 2>/dev/null || echo 1)"
    OTHER_SUITES=$(ls tests/test_*.c | sed -E 's#tests/test_(.*)\.c#\1#' | grep -vx search)
    "${ASAN_RUN[@]}" build-asan/run_tests $OTHER_SUITES >"$log/t2.txt" 2>&1; count "asan+ubsan" "$log/t2.txt" $?
fi

part "CLI shell tests under ASan + UBSan (PIPEPAR=build-asan/pipepar, beside the shell tests)"
if [ "$asan_ok" = 1 ]; then
    n_ran=0
    for rcfile in $(ls "$log"/acli.*.rc 2>/dev/null | sort -t. -k2 -n); do
        read -r rc name secs <"$rcfile"
        count "asan: $name ($secs s)" "${rcfile%.rc}.txt" "$rc"
        n_ran=$((n_ran + 1))
    done
    n_cli=$(ls tests/*cli*.sh | grep -vc '_lib\.sh$')
    if [ "$n_ran" -ne "$n_cli" ]; then
        echo "FAIL asan CLI lane: $n_ran of $n_cli CLI shell tests reported"; total_fail=$((total_fail + 1))
    fi
fi

part "tests (TSan: suites that start threads)"
TSAN_SUITES=$(ls tests/test_runtime*.c tests/test_threads*.c tests/test_mimo*.c 2>/dev/null | sed -E 's#tests/test_(.*)\.c#\1#')
if [ -n "$TSAN_SUITES" ]; then
    if make -s -j"$JOBS" BUILD=build-tsan OPT="-O1 -g" SAN="-fsanitize=thread" \
         build-tsan/run_tests >"$log/b3.txt" 2>&1; then
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
            build-tsan/run_tests $TSAN_SUITES >"$log/t3.txt" 2>&1; count "tsan" "$log/t3.txt" $?
    else cat "$log/b3.txt"; total_fail=$((total_fail + 1)); fi
fi

part "fuzz corpora and fixed findings, replayed (tests/fuzz: gcc + ASan/UBSan, no libFuzzer needed)"
sh tests/fuzz/run.sh replay >"$log/fz.txt" 2>&1; rc=$?
sh tests/fuzz/run.sh crashes >>"$log/fz.txt" 2>&1 || rc=$?
fz_ok=$(grep -c '^ok ' "$log/fz.txt"); fz_bad=$(grep -c '^FAIL' "$log/fz.txt")
[ "$rc" -ne 0 ] && [ "$fz_bad" -eq 0 ] && fz_bad=1
grep '^FAIL' -A3 "$log/fz.txt" | head -n 30
echo "  fuzz replay: $fz_ok passed, $fz_bad failed"
total_pass=$((total_pass + fz_ok)); total_fail=$((total_fail + fz_bad))

part "compile checks"
compile_check "header compiles as C++" ${CXX:-c++} -x c++ -std=c++11 -Wall -Wextra -Werror \
    -Wno-unused-function -fsyntax-only tests/impl.c
# strict C99 with no POSIX feature macro: the header stops with one clear #error naming the two
# fixes, and no other error after it; with PIPEPAR_NO_THREADS (the threads transport left out) it
# compiles
printf '#define PIPEPAR_IMPLEMENTATION\n#include "pipepar.h"\n' >"$log/strict.c"
compile_check "strict C99 names its fix, in its one error" sh -c "! ${CC:-cc} -std=c99 -Wall -Wextra -I. -c -o /dev/null \
    $log/strict.c 2>$log/strict.err && [ \$(grep -c 'error:' $log/strict.err) -eq 1 ] && ! grep -q 'warning:' $log/strict.err &&
    grep -q 'error: .*compile with -D_POSIX_C_SOURCE=200809L (or -std=gnu99), or define PIPEPAR_NO_THREADS' $log/strict.err"
compile_check "strict C99 with PIPEPAR_NO_THREADS" ${CC:-cc} -std=c99 -Wall -Wextra -Werror -Wno-unused-function \
    -DPIPEPAR_NO_THREADS -I. -c -o /dev/null "$log/strict.c"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    compile_check "GPU companions build (nvcc, NCCL)" make -s -j"$JOBS" gpu
    for t in build/gpu/host_*; do   # pipepar_nccl.c's host-side logic, no GPU needed
        [ -x "$t" ] || continue
        "$t" >"$log/h.txt" 2>&1; count "$(basename "$t")" "$log/h.txt" $?
    done
fi

rm -rf "$log"
echo "== done in $(( $(date +%s) - t_start )) s"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
