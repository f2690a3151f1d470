# cli_lib.sh — what the CLI shell tests share. Source it first thing:  . "$(dirname "$0")/cli_lib.sh"
# It moves to the repository root, sets P to the CLI under test ($PIPEPAR, default build/pipepar;
# tests/run_all.sh runs the CLI tests again with PIPEPAR=build-asan/pipepar) and gives:
#   ok / bad MESSAGE               count a passed / failed check (bad prints the message)
#   expect_error CODE TEXT ARGS..  `pipepar ARGS` exits CODE with one stderr line containing TEXT
#   finish                         prints "N passed, N failed" and exits non-zero on a failure
cd "$(dirname "$0")/.." || exit 1
P=${PIPEPAR:-build/pipepar}
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
expect_error() {
    local code=$1 want=$2; shift 2
    local err; err=$($P "$@" 2>&1 >/dev/null); local rc=$?
    if [ $rc -ne "$code" ]; then bad "pipepar $*: exit $rc, expected $code ($err)"; return; fi
    if [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ]; then bad "pipepar $*: expected one line, got: $err"; return; fi
    case "$err" in *"$want"*) ok ;; *) bad "pipepar $*: '$err' lacks '$want'";; esac
}
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
