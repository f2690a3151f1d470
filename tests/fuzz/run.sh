#!/bin/sh
# tests/fuzz/run.sh — build and run the libFuzzer harnesses of tests/fuzz/ (see each fuzz_*.c).
#
#   sh tests/fuzz/run.sh replay [TARGET...]     gcc (or $CC) + ASan/UBSan: replay corpus/TARGET/
#   sh tests/fuzz/run.sh crashes [TARGET...]    the same over crashes/TARGET-* (FAIL until fixed;
#                                               the slow ones pass here: no time limit)
#   sh tests/fuzz/run.sh fuzz TARGET [SECONDS]  clang libFuzzer: fuzz TARGET (default 420 s) into
#                                               build/fuzz/corpus/TARGET, artifacts in build/fuzz/
# Run from the repository root. Binaries go to build/fuzz/. Without TARGETs: every harness.
# pipepar's implementation (fuzz_impl.c) is compiled once and linked into every harness; the
# replay binaries are built JOBS at a time (default 2) and kept while no source is newer, so
# `replay` then `crashes` builds once.
set -e
cd "$(dirname "$0")/../.."
OUT=build/fuzz
FLAGS="-std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all"
JOBS=${JOBS:-2}
mode=${1:-replay}; [ $# -gt 0 ] && shift
all=$(ls tests/fuzz/fuzz_*.c | sed 's#tests/fuzz/fuzz_\(.*\)\.c#\1#' | grep -v '^impl$')
mkdir -p $OUT
dict_of() {
    case $1 in
    action_parse|schedule_csv) echo tests/fuzz/schedule.dict ;;
    layers_*|moe_freq) echo tests/fuzz/layers.dict ;;
    grid_dims|mimo_module) echo tests/fuzz/grid.dict ;;
    schedule_kind|pack_algo) echo tests/fuzz/names.dict ;;
    cli_args) echo tests/fuzz/cli.dict ;;
    *) echo tests/fuzz/data.dict ;;
    esac
}
stale() {   # stale FILE SOURCES...: FILE is missing or older than one of SOURCES
    [ -e "$1" ] || return 0
    f=$1; shift
    [ -n "$(find "$@" -newer "$f" 2>/dev/null | head -n 1)" ]
}
# Every file a harness's translation unit can include: a change to any of them rebuilds them all.
DEPS="pipepar.h tests/fuzz/fuzz_common.h tests/fuzz/fuzz_fopen.h tests/fuzz/fuzz_layers_check.h
      tests/fuzz/replay_main.c examples/cli.h examples/text_file.h $(ls examples/cli_*.c)"
build_replays() {   # build_replays TARGET...: build/fuzz/replay_TARGET, JOBS compilers at a time
    if stale $OUT/impl_replay.o pipepar.h tests/fuzz/fuzz_impl.c; then
        ${CC:-gcc} $FLAGS -c -o $OUT/impl_replay.o tests/fuzz/fuzz_impl.c
    fi
    n=0; pids=""
    for t in "$@"; do
        stale $OUT/replay_$t tests/fuzz/fuzz_$t.c $OUT/impl_replay.o $DEPS || continue
        rm -f $OUT/replay_$t
        ${CC:-gcc} $FLAGS -o $OUT/replay_$t tests/fuzz/fuzz_$t.c tests/fuzz/replay_main.c \
            $OUT/impl_replay.o -lpthread -lm &
        pids="$pids $!"; n=$((n + 1))
        if [ $n -ge "$JOBS" ]; then for p in $pids; do wait $p || true; done; n=0; pids=""; fi
    done
    for p in $pids; do wait $p || true; done
    for t in "$@"; do [ -x $OUT/replay_$t ] || { echo "FAIL $t: the replay binary did not build"; return 1; }; done
}
case $mode in
replay|crashes)
    fail=0
    targets=${*:-$all}
    build_replays $targets
    for t in $targets; do
        if [ $mode = replay ]; then set -- tests/fuzz/corpus/$t; else set -- $(ls tests/fuzz/crashes/$t-* 2>/dev/null); fi
        for f in "$@"; do       # one process per crash file, so each one is reported
            if $OUT/replay_$t "$f" >/dev/null 2>$OUT/replay_$t.err; then echo "ok   $t $f"
            else echo "FAIL $t $f"; grep -E 'runtime error|ERROR|invariant|SUMMARY' $OUT/replay_$t.err | head -n 3; fail=1; fi
        done
    done
    exit $fail ;;
fuzz)
    t=$1; secs=${2:-420}
    clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer-no-link,address,undefined \
        -fno-sanitize-recover=all -c -o $OUT/impl_fuzz.o tests/fuzz/fuzz_impl.c
    clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=all -o $OUT/fuzz_$t tests/fuzz/fuzz_$t.c $OUT/impl_fuzz.o -lpthread -lm
    mkdir -p $OUT/corpus/$t $OUT/artifacts/$t
    $OUT/fuzz_$t -max_total_time=$secs -max_len=4096 -timeout=1 -close_fd_mask=2 -dict=$(dict_of $t) \
        -artifact_prefix=$OUT/artifacts/$t/ $OUT/corpus/$t tests/fuzz/corpus/$t ;;
*)
    echo "usage: sh tests/fuzz/run.sh replay|crashes [TARGET...] | fuzz TARGET [SECONDS]" >&2; exit 2 ;;
esac
