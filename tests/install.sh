#!/usr/bin/env bash
# install.sh — pipepar the way a trainer gets it. `make install` into a temporary prefix, then a
# small trainer (tests/install/consumer.c: a schedule built and validated, one step on 2 threads,
# its loss and gradients checked against hand-worked values) built and run three ways: through
# pkg-config, through CMake's find_package on the installed tree, and through add_subdirectory on
# a vendored copy. Where nvcc and NCCL exist, the GPU consumer (consumer_gpu.c) is linked against
# the companions' library both ways too (not run: CI has no GPU). Then what an install promises
# besides: the exact files, DESTDIR staging, uninstall leaving nothing, an install without the
# GPU parts, version requests. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | tail -n 15; }
# run NAME LOG COMMAND...: ok when COMMAND succeeds (its output in LOG); returns its status
run() {
    local name=$1 log=$2; shift 2
    if "$@" >"$log" 2>&1; then ok "$name"; return 0; fi
    bad "$name: exit $?" "$log"; return 1
}

for tool in cmake pkg-config; do
    command -v $tool >/dev/null 2>&1 || { echo "FAIL $tool is not installed"; echo "0 passed, 1 failed"; exit 1; }
done

# the GPU parts build where the Makefile finds nvcc and nccl.h (its HAVE_GPU)
have_gpu=0
if command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    for d in /usr /usr/local "${CUDA_HOME:-/usr/local/cuda}"; do [ -f "$d/include/nccl.h" ] && have_gpu=1; done
fi
# the version every package file must carry: the header's (a header without the macro: its first line's vX.Y.Z)
version=$(sed -n 's/^#define PIPEPAR_VERSION_STRING "\([0-9.]*\)".*/\1/p' pipepar.h)
[ -n "$version" ] || version=$(sed -n '1s/.* v\([0-9][0-9.]*\)$/\1/p' pipepar.h)

cpu_files="bin/pipepar include/pipepar.h lib/cmake/pipepar/pipepar-config-version.cmake
lib/cmake/pipepar/pipepar-config.cmake lib/cmake/pipepar/pipepar-deps.cmake lib/pkgconfig/pipepar.pc
share/doc/pipepar/LICENSE"
gpu_files="lib/libpipepar_gpu.a lib/pkgconfig/pipepar-gpu.pc"
# same_files DIR LIST: the regular files under DIR are exactly LIST (paths relative to DIR)
same_files() {
    [ "$( (cd "$1" && find . -type f | sed 's|^\./||') | sort)" = "$(printf '%s\n' $2 | sort)" ]
}

# 1. the install itself ---------------------------------------------------------------------
P=$tmp/prefix
if run "make install PREFIX=<tmp>" "$tmp/install.log" make -s -j"${JOBS:-2}" install PREFIX="$P"; then
    want=$cpu_files; [ $have_gpu = 1 ] && want="$cpu_files $gpu_files"
    if same_files "$P" "$want"; then ok "installs exactly: $(echo $want)"
    else bad "installed files differ from: $(echo $want)"; (cd "$P" && find . -type f | sort); fi
    if "$P/bin/pipepar" schedule --kind 1f1b --pp 2 --mb 4 --format torch >"$tmp/cli.txt" 2>&1 &&
       grep -q '^rank1: ' "$tmp/cli.txt"; then ok "the installed CLI runs"
    else bad "the installed CLI: pipepar schedule" "$tmp/cli.txt"; fi
fi

# 2. pkg-config ------------------------------------------------------------------------------
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
got=$(pkg-config --modversion pipepar 2>&1)
if [ "$got" = "$version" ]; then ok "pkg-config --modversion pipepar: $got (the header's)"
else bad "pkg-config --modversion pipepar: '$got', the header says '$version'"; fi
# strict C99 plus the POSIX define, as the header asks; the flags a user would use
if run "pkg-config: consumer.c builds (cc -std=c99 -Wall -Wextra -Wpedantic -Werror)" "$tmp/pc.log" \
       sh -c "${CC:-cc} -std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -Werror -Wno-unused-function \
              -o '$tmp/consumer_pc' tests/install/consumer.c \$(pkg-config --cflags --libs pipepar)"; then
    run "pkg-config: consumer runs a 2-rank step with the hand-worked loss and gradients" "$tmp/pc.run" \
        "$tmp/consumer_pc"
fi
if [ $have_gpu = 1 ]; then
    run "pkg-config: consumer_gpu.c links the companions (pipepar-gpu: $(pkg-config --libs-only-l pipepar-gpu | xargs))" \
        "$tmp/pcg.log" sh -c "${CC:-cc} -std=gnu99 -Wall -Wextra -Werror -Wno-unused-function \
              -o '$tmp/consumer_gpu_pc' tests/install/consumer_gpu.c \$(pkg-config --cflags --libs pipepar-gpu)"
else echo "skip pkg-config GPU consumer: no nvcc or NCCL here"; fi

# 3. CMake, find_package on the installed tree -------------------------------------------------
B=$tmp/cmake-installed
if run "find_package(pipepar): configures" "$tmp/fp.log" \
       cmake -S tests/install -B "$B" -DCMAKE_PREFIX_PATH="$P"; then
    if grep -q -- "-- pipepar $version\$" "$tmp/fp.log"; then ok "find_package(pipepar): pipepar_VERSION is $version"
    else bad "find_package(pipepar): pipepar_VERSION is not $version" "$tmp/fp.log"; fi
    if run "find_package(pipepar): builds" "$tmp/fpb.log" cmake --build "$B" -j 2; then
        run "find_package(pipepar): consumer runs a 2-rank step with the hand-worked loss and gradients" \
            "$tmp/fp.run" "$B/consumer"
        if [ $have_gpu = 1 ]; then
            if [ -x "$B/consumer_gpu" ]; then ok "find_package(pipepar): pipepar::gpu exists, consumer_gpu links"
            else bad "find_package(pipepar): no pipepar::gpu target (consumer_gpu not built)" "$tmp/fp.log"; fi
        fi
    fi
fi
# which version requests this install answers (0.x: the same minor version, not newer)
cat >"$tmp/ver.cmake" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(ver C)
find_package(pipepar ${WANT} REQUIRED ${EXTRA})
EOF
mkdir -p "$tmp/ver" && cp "$tmp/ver.cmake" "$tmp/ver/CMakeLists.txt"
find_version() {   # find_version PREFIX WANT [EXTRA]: configures a project asking for that version
    rm -rf "$tmp/ver/b"
    cmake -S "$tmp/ver" -B "$tmp/ver/b" -DCMAKE_PREFIX_PATH="$1" -DWANT="$2" -DEXTRA="${3:-}" >"$tmp/ver.log" 2>&1
}
major=${version%%.*}; rest=${version#*.}; minor=${rest%%.*}
if find_version "$P" "$version" "EXACT"; then ok "find_package(pipepar $version EXACT) is found"
else bad "find_package(pipepar $version EXACT)" "$tmp/ver.log"; fi
if ! find_version "$P" "$major.$((minor + 1))"; then ok "find_package(pipepar $major.$((minor + 1))) is refused"
else bad "find_package(pipepar $major.$((minor + 1))) was accepted by $version"; fi

# 4. CMake, add_subdirectory on a vendored copy -------------------------------------------------
# the files a trainer copies into its tree (the README names the same set)
V=$tmp/vendor/pipepar
mkdir -p "$V/cmake" && cp pipepar.h pipepar_cuda.cu pipepar_nccl.c CMakeLists.txt LICENSE "$V/" &&
    cp cmake/pipepar-deps.cmake "$V/cmake/"
B=$tmp/cmake-vendored
if run "add_subdirectory(pipepar): configures" "$tmp/vd.log" \
       cmake -S tests/install -B "$B" -DPIPEPAR_VENDORED="$V"; then
    if grep -q -- "-- pipepar $version\$" "$tmp/vd.log"; then ok "add_subdirectory(pipepar): pipepar_VERSION is $version"
    else bad "add_subdirectory(pipepar): pipepar_VERSION is not $version" "$tmp/vd.log"; fi
    # the GPU library is not compiled here (nvcc takes most of a minute): its target must exist
    if [ $have_gpu = 1 ]; then
        if cmake --build "$B" --target help 2>/dev/null | grep -q 'consumer_gpu'; then
            ok "add_subdirectory(pipepar): pipepar::gpu exists (nvcc, CUDA and NCCL found)"
        else bad "add_subdirectory(pipepar): no pipepar::gpu target" "$tmp/vd.log"; fi
    fi
    if run "add_subdirectory(pipepar): builds consumer" "$tmp/vdb.log" cmake --build "$B" -j 2 --target consumer; then
        run "add_subdirectory(pipepar): consumer runs a 2-rank step with the hand-worked loss and gradients" \
            "$tmp/vd.run" "$B/consumer"
    fi
fi

# 5. an install without the GPU parts (what a machine without nvcc gets) ------------------------
C=$tmp/cpu
if run "make install NVCC= (no GPU parts)" "$tmp/cpu.log" make -s install NVCC= PREFIX="$C"; then
    if same_files "$C" "$cpu_files" && grep -q 'no nvcc or NCCL here: installed without the GPU companions' "$tmp/cpu.log"
    then ok "without nvcc: the header, the CLI, pipepar.pc and the CMake package, and says so"
    else bad "without nvcc: files or message differ" "$tmp/cpu.log"; (cd "$C" && find . -type f | sort); fi
    if find_version "$C" "" "COMPONENTS;gpu"; then bad "find_package(pipepar COMPONENTS gpu) found a GPU-less install"
    elif grep -q 'pipepar::gpu is not available; not found: the companions' "$tmp/ver.log"; then ok "find_package(pipepar COMPONENTS gpu) on it: refused, saying why"
    else bad "find_package(pipepar COMPONENTS gpu): refused without the reason" "$tmp/ver.log"; fi
    if find_version "$C" ""; then ok "find_package(pipepar) on it: found"
    else bad "find_package(pipepar) on a GPU-less install" "$tmp/ver.log"; fi
fi

# 6. DESTDIR staging, uninstall, a relative PREFIX --------------------------------------------
S=$tmp/stage
if run "make install DESTDIR=<tmp> PREFIX=/opt/pipepar" "$tmp/dest.log" \
       make -s install DESTDIR="$S" PREFIX=/opt/pipepar; then
    if [ -f "$S/opt/pipepar/include/pipepar.h" ] && grep -q '^prefix=/opt/pipepar$' "$S/opt/pipepar/lib/pkgconfig/pipepar.pc" &&
       grep -q '"/opt/pipepar/include"' "$S/opt/pipepar/lib/cmake/pipepar/pipepar-config.cmake"
    then ok "DESTDIR: files under the staging root, paths inside them without it"
    else bad "DESTDIR: files or recorded paths wrong" "$tmp/dest.log"; fi
    if run "make uninstall DESTDIR=<tmp> PREFIX=/opt/pipepar" "$tmp/un.log" make -s uninstall DESTDIR="$S" PREFIX=/opt/pipepar &&
       [ -z "$(find "$S" -type f)" ] && [ ! -e "$S/opt/pipepar/lib/cmake/pipepar" ]
    then ok "uninstall leaves no file (and no pipepar directory) behind"
    else bad "uninstall left: $(find "$S" \( -type f -o -path '*/cmake/pipepar' \) -print | tr '\n' ' ')"; fi
fi
if make -s install DESTDIR="$tmp/rel" PREFIX=relative/dir >"$tmp/rel.log" 2>&1; then
    bad "make install PREFIX=relative/dir succeeded"
elif grep -q 'PREFIX=relative/dir: must be an absolute path' "$tmp/rel.log" && [ ! -e "$tmp/relrelative" ]; then
    ok "make install PREFIX=relative/dir: refused, installs nothing"
else bad "make install PREFIX=relative/dir: refused without the reason" "$tmp/rel.log"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
