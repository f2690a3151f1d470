
/* ============================================================================================
 * >>zerobubble
 * The zero-bubble family (Qi, Wan, Huang, Lin: "Zero Bubble Pipeline Parallelism", ICLR 2024)
 * splits every backward into I, the input gradient the previous stage waits for, and W, the
 * weight gradient nobody waits for; W then fills the idle time of the pipeline. pp_schedule_build
 * makes these kinds (they emit I and W, DualPipeV also full B and overlapped FB):
 *
 *   kind            placement  vpp  accepts                      compute order
 *   zb-h1           looped     1    any pp, mb                   PyTorch 2.11 ScheduleInterleavedZeroBubble
 *                                                                with one stage per rank = the paper's
 *                                                                ZB-H1 (Fig. 3 top): rank r runs 1F1B and
 *                                                                holds back its first r W's
 *   zb-h2           looped     1    max_live >= pp (default and  the paper's ZB-H2 (Fig. 3 bottom), for any
 *                                   most useful: 2*pp-1)         cap: rank r warms up with
 *                                                                min(2(pp-r)-1, max_live-r) F's, then I,F
 *                                                                pairs until max_live are live, then I,W,F
 *   zbv             V          2    any pp, mb                   PyTorch 2.11 ScheduleZBVZeroBubble
 *   dualpipev       V          2    any pp, mb                   PyTorch 2.11 ScheduleDualPipeV (DeepSeek's
 *                                                                DualPipeV) for mb >= 2*pp; see below
 *   interleaved-zb  looped     any  any pp, mb; for vpp > 1     PyTorch 2.11 ScheduleInterleavedZeroBubble
 *                                   group (microbatches per      (ZB1P over vpp chunks); PyTorch's group is
 *                                   round) >= pp or >= mb        mb / max(1, mb / pp)
 *   dualpipe        dual       2    pp even, mb even             deepseek-ai/DualPipe dualpipe.py (the
 *                                                                original, bidirectional DualPipe): mb/2
 *                                                                microbatches down, mb/2 up, 2x parameters;
 *                                                                for mb >= 2*pp DeepSeek's order exactly
 *
 * "live" counts (stage, microbatch) activations a rank holds: from the F until the W (or B) that
 * releases them. max_live is only taken by zb-h2 (the others have fixed memory: zb-h1 and zbv
 * hold pp rank-sized activations like 1F1B, dualpipev pp + 1/2, dualpipe pp + 1 stages' worth).
 *
 * DualPipeV and small mb. PyTorch and DeepSeek's DualPipeV refuse mb < 2*pp because their
 * executors hard-code each step's sends and receives: step 4 ("F0B1 F1B0" pairs) must run at
 * least once on every rank, which needs mb - 2*pp + rank + 1 >= 1 on rank 0. pipepar derives all
 * communication from the compute order (pp_schedule_lower) and proves it (pp_schedule_validate),
 * so it accepts any mb: below 2*pp it builds the order for 2*pp microbatches and drops every
 * action of the microbatches that do not exist (an FB that loses one half becomes a plain F or B),
 * the same trick PyTorch's own ZBVZeroBubble uses below 2*pp-1. Removing whole microbatches keeps
 * every dependency of the rest, so the order stays valid; for mb >= 2*pp the order is PyTorch's.
 *
 * Overlapped F&B without a callback for it. DualPipeV's (and DualPipe's) FB is meant to run F and
 * B of two microbatches at once (pp_callbacks.forward_backward). A trainer without that callback
 * runs the F half, then the B half; lowered as one action, the F's output would then leave only
 * after the B. pp_schedule_split_overlaps (>>schedule) makes each FB an F then a B and lowers
 * again: the same compute order, the F's output leaving while the B runs (on 2 H200s, 1.2% off
 * DualPipeV's step, and its exposed transfer from 1% to 0.3%; bench/RESULTS.md, session 8).
 *
 * Beyond these fixed orders, >>search builds greedy zero-bubble schedules for given costs and a
 * memory cap, and ranks every kind by simulated step time.
 * ============================================================================================ */
