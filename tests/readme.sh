#!/usr/bin/env bash
# The README runs as written: its C program (the ```c block) compiles as C99 and as C++ and
# trains (the loss it prints falls as the README says), and every `build/...` command of its
# ```sh blocks exits 0 in a fresh folder that sees the repo's build/ and examples/ (make lines
# are what `make test` and CI already run). Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | tail -n 15; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

awk '/^```c$/ { f = 1; next } /^```$/ { f = 0 } f' README.md >"$tmp/loop.c"
if [ ! -s "$tmp/loop.c" ]; then bad "the README has a C program"
elif ${CC:-cc} -std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -Werror -I. "$tmp/loop.c" -o "$tmp/loop" \
        -lpthread -lm >"$tmp/cc.log" 2>&1; then
    ok "the README's program builds with the command it gives (strict C99, -Werror)"
    if "$tmp/loop" >"$tmp/run.log" 2>&1; then
        first=$(awk '$1 == "step" && $2 == 1 { print $4 }' "$tmp/run.log")
        last=$(awk '$1 == "step" && $2 == 16 { print $4 }' "$tmp/run.log")
        said=$(sed -n 's/.*loss falls from \([0-9.]*\) at step 1 to \([0-9.]*\) at step 16.*/\1 \2/p' README.md)
        if [ -n "$first" ] && [ -n "$last" ] && [ "$(printf '%.1f %.3f' "$first" "$last")" = "$said" ]; then
            ok "it trains: loss $first at step 1, $last at step 16, as the README says ($said)"
        else bad "its loss (step 1: '$first', step 16: '$last') is not what the README says ('$said')" "$tmp/run.log"; fi
    else bad "the README's program exits non-zero" "$tmp/run.log"; fi
else bad "the README's program does not build" "$tmp/cc.log"; fi
if ${CXX:-c++} -x c++ -std=c++11 -Wall -Wextra -Werror -I. -fsyntax-only "$tmp/loop.c" >"$tmp/cxx.log" 2>&1; then
    ok "the README's program compiles as C++11"
else bad "the README's program does not compile as C++11" "$tmp/cxx.log"; fi

# the commands: each ```sh line that starts with build/, its comment dropped
mkdir -p "$tmp/run" && ln -s "$PWD/build" "$tmp/run/build" && ln -s "$PWD/examples" "$tmp/run/examples"
awk '/^```sh$/ { f = 1; next } /^```$/ { f = 0 } f && /^build\//' README.md | sed 's/  *# .*$//' >"$tmp/commands"
n=$(wc -l <"$tmp/commands")
[ "$n" -ge 5 ] && ok "the README has $n commands to run" || bad "the README has only $n build/ commands"
while IFS= read -r cmd; do
    [ -x "$(echo "$cmd" | cut -d' ' -f1)" ] || { bad "$cmd: its program is not built (make)"; continue; }
    if (cd "$tmp/run" && bash -c "$cmd") >"$tmp/cmd.log" 2>&1 </dev/null; then ok "$cmd"
    else bad "$cmd (exit $?)" "$tmp/cmd.log"; fi
done <"$tmp/commands"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
