#!/usr/bin/env bash
# bench_summary.sh — the GPU benchmarks' summary arithmetic, on the host: bench/gpu_lib.sh's
# best_against_best and efficiency_against read logs in the formats mlp_gpu, PyTorch's bench and
# Megatron-LM's bench print, and give the ratios RESULTS quotes. Fixture logs below, shaped as
# those programs write them (a pp 4 run beside both peers).
. "$(dirname "$0")/cli_lib.sh"
. bench/gpu_lib.sh
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

cat >"$T/pipepar.log" <<'EOF'
-- zbv
pipeline zbv            pp 4 vpp 2 mb 16  step    681.9 ms (min    676.0)   619.1 TFLOP/s/gpu  loss 2.92026
-- greedy-searched-via-host-mem
search: its layout 'Et*2|t*2|t*2|t*3|t|t*2|t*2|t*2L'
pipeline custom         pp 4 vpp 2 mb 16  step    669.4 ms (min    663.8)   630.7 TFLOP/s/gpu  loss 2.92026
EOF
cat >"$T/torch.log" <<'EOF'
single-gpu       step   2660.1 ms   634.9 TFLOP/s  ideal pp4    665.0 ms  peak 20.1 GiB
1F1B                   v=1 step    783.4 ms (min   780.0)   540.0 TFLOP/s/gpu  eff  84.9%  peak  21.5 GiB
ZBVZeroBubble          v=2 step    746.1 ms (min   740.0)   565.9 TFLOP/s/gpu  eff  89.1%  peak  21.5 GiB
pipepar plan in PyTorch: greedy         n=8 step    729.4 ms (min   722.2)   578.8 TFLOP/s/gpu  eff  91.2%  peak  35.1 GiB
EOF
cat >"$T/megatron.log" <<'EOF'
megatron-core 0.20.0 torch 2.11.0+cu130 dev NVIDIA H100 80GB HBM3 H=4096 L=16 T=8192 M=16 world=4 gelu=tanh
megatron-interleaved   v=2 overlap_p2p=1 step    750.1 ms (min   741.0)   563.0 TFLOP/s/gpu  peak  15.1 GiB
megatron-interleaved   v=4 overlap_p2p=1 step    730.6 ms (min   715.1)   577.9 TFLOP/s/gpu  peak  15.1 GiB
EOF

# pipepar's fastest run, each peer's fastest own schedule (pipepar's plan in PyTorch's runtime,
# 729.4 ms, is pipepar's order and stays out; so does the single step)
out=$(best_against_best "$T/pipepar.log" "$T/torch.log" "$T/megatron.log")
want="  pipepar greedy-searched-via-host-mem: 669.4 ms
  PyTorch ZBVZeroBubble v=2: 746.1 ms, pipepar 1.115x faster
  Megatron-LM megatron-interleaved v=4 overlap_p2p=1: 730.6 ms, pipepar 1.091x faster"
[ "$out" = "$want" ] && ok || bad "best_against_best: got
$out"
# a peer not run, and one whose log holds no step, are said so
out=$(best_against_best "$T/pipepar.log" "" "$T/pipepar.log")
case "$out" in *"PyTorch: not run"*"Megatron-LM: no step in pipepar.log"*) ok ;; *) bad "peers missing: $out" ;; esac
: >"$T/empty.log"
out=$(best_against_best "$T/empty.log" "$T/torch.log" "$T/megatron.log")
[ "$out" = "  (no pipepar run gave a step)" ] && ok || bad "no pipepar step: $out"

# efficiency against a baseline: single / pp / step, each run under its name
out=$(efficiency_against "$T/pipepar.log" 4 2591.3 "the single steps")
want="  zbv                          95.0% against the single steps
  greedy-searched-via-host-mem 96.8% against the single steps"
[ "$out" = "$want" ] && ok || bad "efficiency_against: got
$out"
out=$(efficiency_against "$T/pipepar.log" 4 0 "the single steps at once")
[ "$out" = "  (no baseline: the single steps at once did not run)" ] && ok || bad "no baseline: $out"
finish
