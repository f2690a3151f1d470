/* mlp_gpu.cu — train a residual MLP pipeline-parallel on GPUs with pipepar and NCCL.
 *
 * The model: L blocks, each  x <- x + W2 · gelu(W1 · x)  with hidden H and inner width F = 4H,
 * bf16 weights and activations, fp32 accumulation, the mean-squared error against a random
 * target as the loss. It is the model of ../bench/torch_pp_bench.py, so the two can be timed side
 * by side (GELU is the tanh form, cuBLASLt's epilogue; the bench runs PyTorch with
 * gelu(approximate="tanh") to match).
 *
 *     build/mlp_gpu --single                                   whole model on one GPU (baseline)
 *     RANK=0 WORLD_SIZE=2 ... build/mlp_gpu --schedule 1f1b    one process per GPU (torchrun,
 *     torchrun --nproc-per-node 2 --no-python build/mlp_gpu    mpirun, srun, or by hand)
 *     build/mlp_gpu --threads 2 --schedule interleaved --vpp 4 one process, one thread per GPU
 *     ... --layout 'Et*2|t*6|t*2|t*6L' --schedule search     stages of unequal size, in the order
 *                                                              pp_search picks for their costs
 *     ... --schedule-csv best.csv                              a schedule from a file ('pipepar
 *                                                              search --csv', or any tool's CSV)
 *
 * Transfers between processes on one host go through the copy engines
 * (pp_nccl_transport_copy_engine) unless --no-copy-engine: one copy from the send buffer into
 * the receive buffer that needs no SM on either GPU, so a transfer does not wait for GEMMs to end. The rest go through NCCL, whose groups pass the
 * arrival gate (pp_nccl_transport_gate) unless --no-gate: a group launches only once its peer has
 * reached the matching one, so no NCCL kernel sits on SMs waiting for it.
 *
 * What a rank does, top to bottom (search for the step names):
 *   1. set-up      NCCL communicators (pp_nccl_init, then ncclCommSplit by the rank grid), the
 *                  schedule (build, lower, validate; pp_search for --schedule search; or read
 *                  from --schedule-csv), this rank's I->W buffers (pp_schedule_rank_peaks), this
 *                  rank's blocks (L / stages each, or --layout's), cuBLASLt plans
 *   2. callbacks   forward / loss / backward (or the I and W halves) of a stage, called by the
 *                  executor pp_run_step as it walks this rank's program; every GEMM is one
 *                  cuBLASLt call with its epilogue fused (GELU_AUX forward, DGELU backward,
 *                  the residual add as beta = 1, gradient accumulation in fp32 as beta = 1)
 *   3. timing      warm-up, then timed steps (fwd + bwd of every microbatch, as PyTorch's bench
 *                  times): step time, TFLOP/s per GPU, pipeline efficiency against the single-
 *                  GPU step, exposed (not hidden) transfer time, peak memory, and the simulator's
 *                  prediction of the step from the measured per-stage and per-action times
 *   4. check       (--check) the pipelined gradients against a single-GPU run of the whole
 *                  model on the same GPU, relative error per weight
 *   5. trace       (--trace FILE) the measured timeline of the last timed step as Perfetto JSON
 *   6. training    (--train N) N steps of SGD or AdamW with the gradient norm clipped over all
 *                  pipeline ranks (pp_cuda_l2norm + pp_nccl_grad_norm), printing the loss
 *
 * Shapes (row-major, as PyTorch stores them; cuBLASLt sees the same bytes column-major):
 *   x, y, dy        [T, H]     a microbatch's activation and its gradient
 *   h, g, dh        [T, F]     pre-activation (kept for GELU's backward), gelu(h), dL/dh
 *   W1 [F, H], W2 [H, F]  bf16;  dW1, dW2 same shapes, fp32 (summed over microbatches)        */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <time.h>
#include <algorithm>
#include <functional>
#include <vector>
#include "../pipepar.h"

typedef __nv_bfloat16 bf16;

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "mlp_gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CKLT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "mlp_gpu: %s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, (int)s_); exit(1); } } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* $MLP_GPU_DEBUG=1: a line on stderr at every callback and allocation, with the host clock,
 * to see where a rank's host stops (with $PIPEPAR_NCCL_DEBUG=1 for the transport's side). */
static int debug_on(void)
{
    static int on = -1;   /* read once; the same in every thread */
    if (on < 0) on = getenv("MLP_GPU_DEBUG") && atoi(getenv("MLP_GPU_DEBUG")) > 0;
    return on;
}
#define DBG(...) do { if (debug_on()) { fprintf(stderr, "[mlp_gpu %.6f] ", now_s()); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); } } while (0)

/* ============================================================================================
 * Options
 * ============================================================================================ */
struct Options {
    int single = 0, threads = 0;
    int pp = 0, vpp = 0, group = 0, mb = 8, tokens = 8192, hidden = 4096, layers = 16;
    const char *schedule = "1f1b";
    int schedule_given = 0;
    const char *schedule_csv = nullptr;  /* --schedule-csv FILE: this schedule instead of building one */
    int steps = 5, warmup = 2, check = 0, train = 0;
    const char *optimizer = "sgd";
    float lr = 1e-3f, clip = 1.0f;
    const char *trace = NULL;
    double timeout = 60, single_ms = 0;
    int kill_rank = -1, kill_step = -1;
    int sm_margin = 0, max_ctas = 0, cta_policy = 0, gate = 1, tune = 1, quiet = 0;
    int copy_engine = 1;            /* transfers between GPUs of this host through the copy engines */
    const char *layout = nullptr;   /* Megatron layout string: blocks per stage */
    double max_memory = 0;          /* --schedule search: cap on activation memory */
    double yield_us = 0;            /* GEMMs must let a high-priority kernel in within this (0: any) */
    int gemm_split = 1;             /* GEMMs that do not (or all, without --yield-us) run as this many pieces */
    int gemm_times = 0;             /* --gemm-times: every GEMM of the last step timed with events */
    const char *gemm_picks = nullptr; /* --gemm-picks FILE: the tuned GEMM kernels, shared between runs */
    int tune_in_step = 0;           /* --tune-in-step N: --single picks each GEMM's kernel in N real steps */
    int keep_overlaps = 0;          /* --keep-overlaps: DualPipeV's FBs lowered as one action each */
    int split_backward = 0;         /* --split-backward: each B as I then W (its output leaves after the I) */
    int search_layout = 0;          /* --search-layout: --schedule search splits the blocks into stages too */
    const char *search_kind = nullptr; /* --search-kind K: --schedule search tries only kind K */
    int place_by_speed = 0;         /* --place-by-speed: the heaviest pipeline rank on the fastest GPU */
    const char *gpu_ms = nullptr;   /* --gpu-ms LIST: those GPU times instead of measuring (tests) */
};

static const char usage[] =
    "usage: mlp_gpu [--single | --threads N] [--schedule 1f1b] [--pp P] [--vpp V] [--group G] [--mb M] [--tokens T]\n"
    "               [--hidden H] [--layers L] [--steps N] [--warmup N] [--check] [--train N]\n"
    "               [--optimizer sgd|adamw] [--lr X] [--clip X] [--trace FILE] [--timeout S]\n"
    "               [--single-ms X] [--sm-margin N] [--max-ctas N] [--cta-policy P] [--no-gate] [--no-copy-engine]\n"
    "               [--no-tune] [--quiet]\n"
    "               [--layout STR] [--max-memory X] [--yield-us X] [--gemm-split N] [--gemm-times] [--keep-overlaps]\n"
    "               [--split-backward] [--schedule-csv FILE] [--gemm-picks FILE] [--tune-in-step N]\n"
    "               [--search-layout] [--search-kind K] [--place-by-speed [--gpu-ms LIST]]\n"
    "               [--kill-rank R --kill-step K]\n"
    "  --single        the whole model on one GPU: the baseline of the pipeline efficiency\n"
    "  --threads N     one process driving N GPUs, one thread each (else one process per GPU,\n"
    "                  rank and world from RANK/WORLD_SIZE/LOCAL_RANK, MPI or Slurm variables)\n"
    "  --schedule K    gpipe, 1f1b, interleaved, looped-bfs, zb-h1, zbv, interleaved-zb, ..., or search:\n"
    "                  pp_search's fastest for this layout (simulated; --max-memory X caps activations\n"
    "                  at X microbatches through one rank's blocks)\n"
    "  --schedule-csv FILE  run the schedule in FILE instead: PyTorch's pipeline-order CSV, one row per rank\n"
    "                  (what 'pipepar schedule --format csv' and 'pipepar search --csv' write); its rows must be\n"
    "                  the pipeline's ranks and its microbatches --mb; sends and receives are lowered again\n"
    "  --search-layout with --schedule search: split the blocks into stages too (pp_search's layers:\n"
    "                  every split near the even one; each block F = I = W, block 0's I half), and run\n"
    "                  the fastest\n"
    "  --search-kind K with --schedule search: only schedules of kind K (e.g. interleaved: Megatron's\n"
    "                  order, its microbatch group and, with --search-layout, its stages chosen)\n"
    "  --place-by-speed time every GPU on the model's largest GEMM (all at once, under load, 3.5 s) and\n"
    "                  renumber the pipeline (pp_place_by_speed, pp_nccl_reorder) so that the rank with\n"
    "                  the most GEMMs runs on the fastest GPU; GPUs of one host differ by about 1%\n"
    "                  (one host: ranks on several stay as launched, so neighbours stay on their nodes)\n"
    "  --gpu-ms LIST   with --place-by-speed: these per-GPU times (ms, by process) instead of measuring\n"
    "  --layout STR    blocks per stage, a Megatron layout in stage order: 'Et*2|t*6|t*2|t*6L' (E input,\n"
    "                  t block, L loss; '|' between stages); which rank holds stage s is the schedule's\n"
    "  --pp P          pipeline ranks (default: the world size); --vpp V chunks per rank\n"
    "  --group G       interleaved: microbatches per chunk round, Megatron's microbatch group size per\n"
    "                  virtual stage (default pp); with a small first stage, a larger group starts the\n"
    "                  later ranks sooner ('pipepar search --layers' finds layout and group together)\n"
    "  --mb M          microbatches per step (8); --tokens T tokens per microbatch (8192)\n"
    "  --check         compare the pipelined gradients with a single-GPU run (bf16 tolerance)\n"
    "  --single-ms X   the single-GPU step time for the efficiency (else measured with --check)\n"
    "  --train N       N training steps (SGD/AdamW, gradient norm clipped to --clip), loss printed\n"
    "  --trace FILE    the last timed step as Perfetto / Chrome trace JSON (ui.perfetto.dev)\n"
    "  --timeout S     deadline of every wait (60): a dead peer gives PP_ETIMEOUT, not a hang\n"
    "  --sm-margin N   cuBLASLt plans for N fewer SMs (room for NCCL's kernels); --max-ctas N caps NCCL's\n"
    "  --cta-policy P  NCCL's CTA policy: default, efficiency (fewer CTAs) or zero (copy engines)\n"
    "  --yield-us X    keep only GEMM kernels that let a high-priority kernel (NCCL's) onto SMs within X us\n"
    "                  while they run (persistent kernels free none until they end); the fastest of those\n"
    "  --gemm-picks FILE  the GEMM kernels from FILE if it exists, else tuned and written there: every\n"
    "                  run and rank that reads it runs the same kernels (tuning picks near-ties that run\n"
    "                  2-3% apart in a step by chance, so a pipeline's ranks and its single-GPU baseline\n"
    "                  would otherwise compute at different speeds); for the same GPU and cuBLASLt, not with\n"
    "                  --sm-margin, --yield-us, --gemm-split or --no-tune; runs that tuned at once all take\n"
    "                  the picks of the one that wrote the file first\n"
    "  --tune-in-step N  with --single: after the usual tuning, N steps in which each GEMM kind's calls take its\n"
    "                  candidates in turn, each timed in place (the step's data, neighbours and clock), and\n"
    "                  each kind keeps its fastest median; with --gemm-picks, those are what the file holds\n"
    "  --gemm-split N  run each GEMM whose kernel does not let one in (every GEMM, without --yield-us) as N\n"
    "                  GEMMs over 1/N of its output columns: NCCL's kernel waits for one piece, not one GEMM\n"
    "  --no-gate       launch NCCL groups at once (default: the arrival gate, pp_nccl_transport_gate:\n"
    "                  a group launches only once its peer has reached its matching group; one node)\n"
    "  --no-copy-engine  every transfer through NCCL (default: between processes on one host through the\n"
    "                  copy engines, pp_nccl_transport_copy_engine: one copy straight between the two buffers,\n"
    "                  no SM on either GPU; others, threads of one process, and NCCL_P2P_DISABLE=1 on NCCL;\n"
    "                  PIPEPAR_NCCL_CE_DIRECT=0: through a ring of 8 slots of up to 16 MiB per peer instead)\n"
    "  --keep-overlaps lower DualPipeV's overlapped F&B as one action (default: split into F then B by\n"
    "                  pp_schedule_split_overlaps, as this example has no overlapped F&B callback, so that\n"
    "                  the F's output leaves before the B runs)\n"
    "  --split-backward  run each whole backward B as its input-gradient half then its weight-gradient\n"
    "                  half (pp_schedule_split_backward): the B's output gradient leaves for the previous\n"
    "                  stage before the weight gradients are computed, so that rank starts its B sooner;\n"
    "                  with --schedule search, every candidate with whole B's so (pp_search's split_backward)\n"
    "  --gemm-times    time every GEMM of the last step (CUDA events around each): per GEMM kind, its\n"
    "                  count and mean, and the step's GEMM time against its compute (a slow rank: slower\n"
    "                  kernels, or gaps between them?)\n"
    "  --kill-rank R --kill-step K   failure test: rank R kills itself in the middle of step K\n";

static int parse_args(int argc, char **argv, Options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char flag[64];
        const char *eq = strchr(a, '=');
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(usage, stdout); exit(0); }
        if (strncmp(a, "--", 2) != 0) { fprintf(stderr, "mlp_gpu: %s: not a flag (try --help)\n", a); return 2; }
        snprintf(flag, sizeof flag, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        static const char *const bools[] = { "--single", "--check", "--no-tune", "--quiet", "--gate", "--no-gate",
                                              "--copy-engine", "--no-copy-engine", "--gemm-times",
                                              "--keep-overlaps", "--search-layout", "--place-by-speed", "--split-backward", NULL };
        static const char *const valued[] = { "--threads", "--pp", "--vpp", "--group", "--mb", "--tokens", "--hidden", "--layers",
            "--steps", "--warmup", "--train", "--schedule", "--optimizer", "--lr", "--clip", "--trace", "--timeout",
            "--single-ms", "--sm-margin", "--max-ctas", "--cta-policy", "--kill-rank", "--kill-step", "--layout",
            "--max-memory", "--yield-us", "--gemm-split", "--search-kind", "--gpu-ms", "--schedule-csv",
            "--gemm-picks", "--tune-in-step", NULL };
        bool is_bool = false, known = false;
        for (int b = 0; bools[b]; b++) if (!strcmp(flag, bools[b])) is_bool = known = true;
        for (int b = 0; valued[b]; b++) if (!strcmp(flag, valued[b])) known = true;
        if (!known) { fprintf(stderr, "mlp_gpu: %s: unknown flag (try --help)\n", flag); return 2; }
        if (is_bool && eq) { fprintf(stderr, "mlp_gpu: %s: takes no value\n", flag); return 2; }
        if (!is_bool) {
            v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) { fprintf(stderr, "mlp_gpu: %s: needs a value\n", flag); return 2; }
        }
        auto num = [&](double lo, double hi, double *out) -> bool {
            char *end;
            double x = strtod(v, &end);
            if (end == v || *end || !(x >= lo && x <= hi)) {
                fprintf(stderr, "mlp_gpu: %s=%s: must be a number between %g and %g\n", flag, v, lo, hi);
                return false;
            }
            *out = x;
            return true;
        };
        auto integer = [&](int lo, int hi, int *out) -> bool {
            double x;
            if (!num(lo, hi, &x)) return false;
            if (x != (int)x) { fprintf(stderr, "mlp_gpu: %s=%s: must be a whole number\n", flag, v); return false; }
            *out = (int)x;
            return true;
        };
        double d;
        bool ok = true;
        if (!strcmp(flag, "--single")) o->single = 1;
        else if (!strcmp(flag, "--check")) o->check = 1;
        else if (!strcmp(flag, "--no-tune")) o->tune = 0;
        else if (!strcmp(flag, "--quiet")) o->quiet = 1;
        else if (!strcmp(flag, "--gate")) o->gate = 1;      /* the default; kept for older scripts */
        else if (!strcmp(flag, "--no-gate")) o->gate = 0;
        else if (!strcmp(flag, "--copy-engine")) o->copy_engine = 1;   /* the default */
        else if (!strcmp(flag, "--no-copy-engine")) o->copy_engine = 0;
        else if (!strcmp(flag, "--gemm-times")) o->gemm_times = 1;
        else if (!strcmp(flag, "--keep-overlaps")) o->keep_overlaps = 1;
        else if (!strcmp(flag, "--split-backward")) o->split_backward = 1;
        else if (!strcmp(flag, "--search-layout")) o->search_layout = 1;
        else if (!strcmp(flag, "--place-by-speed")) o->place_by_speed = 1;
        else if (!strcmp(flag, "--gpu-ms")) o->gpu_ms = v;
        else if (!strcmp(flag, "--search-kind")) {
            pp_schedule_kind k;
            pp_error ke;
            o->search_kind = v;
            if (strcmp(v, "greedy") && pp_schedule_kind_parse(v, &k, &ke) != PP_OK) {
                fprintf(stderr, "mlp_gpu: --search-kind=%s: %s (or greedy)\n", v, ke.message);
                ok = false;
            }
        }
        else if (!strcmp(flag, "--threads")) ok = integer(1, 64, &o->threads);
        else if (!strcmp(flag, "--pp")) ok = integer(1, 1024, &o->pp);
        else if (!strcmp(flag, "--vpp")) ok = integer(1, 64, &o->vpp);
        else if (!strcmp(flag, "--group")) ok = integer(1, 4096, &o->group);
        else if (!strcmp(flag, "--mb")) ok = integer(1, 4096, &o->mb);
        else if (!strcmp(flag, "--tokens")) ok = integer(8, 1 << 20, &o->tokens);
        else if (!strcmp(flag, "--hidden")) ok = integer(64, 65536, &o->hidden);
        else if (!strcmp(flag, "--layers")) ok = integer(1, 4096, &o->layers);
        else if (!strcmp(flag, "--steps")) ok = integer(1, 100000, &o->steps);
        else if (!strcmp(flag, "--warmup")) ok = integer(0, 100000, &o->warmup);
        else if (!strcmp(flag, "--train")) ok = integer(0, 1000000, &o->train);
        else if (!strcmp(flag, "--schedule")) { o->schedule = v; o->schedule_given = 1; }
        else if (!strcmp(flag, "--schedule-csv")) o->schedule_csv = v;
        else if (!strcmp(flag, "--gemm-picks")) o->gemm_picks = v;
        else if (!strcmp(flag, "--tune-in-step")) ok = integer(0, 100, &o->tune_in_step);
        else if (!strcmp(flag, "--optimizer")) {
            o->optimizer = v;
            if (strcmp(v, "sgd") && strcmp(v, "adamw")) { fprintf(stderr, "mlp_gpu: --optimizer=%s: sgd or adamw\n", v); ok = false; }
        }
        else if (!strcmp(flag, "--lr")) { ok = num(0, 10, &d); o->lr = (float)d; }
        else if (!strcmp(flag, "--clip")) { ok = num(1e-6, 1e9, &d); o->clip = (float)d; }
        else if (!strcmp(flag, "--trace")) o->trace = v;
        else if (!strcmp(flag, "--timeout")) ok = num(0.1, 1e6, &o->timeout);
        else if (!strcmp(flag, "--single-ms")) ok = num(0, 1e9, &o->single_ms);
        else if (!strcmp(flag, "--sm-margin")) ok = integer(0, 128, &o->sm_margin);
        else if (!strcmp(flag, "--max-ctas")) ok = integer(0, 64, &o->max_ctas);
        else if (!strcmp(flag, "--cta-policy")) {
            if (!strcmp(v, "default")) o->cta_policy = 0;
            else if (!strcmp(v, "efficiency")) o->cta_policy = 1;
            else if (!strcmp(v, "zero")) o->cta_policy = 2;
            else { fprintf(stderr, "mlp_gpu: --cta-policy=%s: default, efficiency or zero\n", v); ok = false; }
        }
        else if (!strcmp(flag, "--layout")) o->layout = v;
        else if (!strcmp(flag, "--max-memory")) ok = num(0, 1e6, &o->max_memory);
        else if (!strcmp(flag, "--yield-us")) ok = num(0, 1e6, &o->yield_us);
        else if (!strcmp(flag, "--gemm-split")) ok = integer(1, 16, &o->gemm_split);
        else if (!strcmp(flag, "--kill-rank")) ok = integer(0, 1 << 20, &o->kill_rank);
        else if (!strcmp(flag, "--kill-step")) ok = integer(0, 1 << 20, &o->kill_step);
        else { fprintf(stderr, "mlp_gpu: %s: unknown flag (try --help)\n", flag); return 2; }
        if (!ok) return 2;
    }
    if (o->hidden % 64) { fprintf(stderr, "mlp_gpu: --hidden=%d: must be a multiple of 64\n", o->hidden); return 2; }
    if (o->tokens % 8) { fprintf(stderr, "mlp_gpu: --tokens=%d: must be a multiple of 8\n", o->tokens); return 2; }
    if (o->tokens % (8 * o->gemm_split) || o->hidden % (8 * o->gemm_split)) {
        fprintf(stderr, "mlp_gpu: --gemm-split=%d: --tokens=%d and --hidden=%d must be multiples of 8 x the pieces\n",
                o->gemm_split, o->tokens, o->hidden);
        return 2;
    }
    if (o->group && strcmp(o->schedule, "interleaved") && strcmp(o->schedule, "interleaved-zb")) {
        fprintf(stderr, "mlp_gpu: --group=%d: only --schedule interleaved or interleaved-zb takes a microbatch group "
                "(--schedule search tries the sizes itself)\n", o->group);
        return 2;
    }
    if ((o->search_layout || o->search_kind) && strcmp(o->schedule, "search")) {
        fprintf(stderr, "mlp_gpu: %s: only with --schedule search\n", o->search_layout ? "--search-layout" : "--search-kind");
        return 2;
    }
    if (o->schedule_csv && (o->schedule_given || o->group || o->single)) {
        fprintf(stderr, "mlp_gpu: --schedule-csv: the file is the whole schedule (not with --%s)\n",
                o->schedule_given ? "schedule" : o->group ? "group" : "single");
        return 2;
    }
    if (o->gpu_ms && !o->place_by_speed) {
        fprintf(stderr, "mlp_gpu: --gpu-ms: only with --place-by-speed\n");
        return 2;
    }
    if (o->place_by_speed && (o->threads || o->single)) {
        fprintf(stderr, "mlp_gpu: --place-by-speed: one process per GPU only (not with --%s)\n", o->threads ? "threads" : "single");
        return 2;
    }
    if (o->search_layout && o->layout) {
        fprintf(stderr, "mlp_gpu: --search-layout and --layout: give one (--search-layout chooses the layout)\n");
        return 2;
    }
    if (o->single && o->threads) { fprintf(stderr, "mlp_gpu: --single and --threads: choose one\n"); return 2; }
    if (o->tune_in_step && (!o->single || o->yield_us > 0 || o->gemm_split > 1 || !o->tune)) {
        fprintf(stderr, "mlp_gpu: --tune-in-step: %s\n", !o->single ? "only with --single (pipelines take its picks "
                "through --gemm-picks)" : "not with --yield-us, --gemm-split or --no-tune");
        return 2;
    }
    if (o->gemm_picks && (o->yield_us > 0 || o->gemm_split > 1 || !o->tune || o->sm_margin > 0)) {
        fprintf(stderr, "mlp_gpu: --gemm-picks: not with %s (the file holds whole GEMMs' kernels tuned for all SMs)\n",
                o->yield_us > 0 ? "--yield-us" : o->gemm_split > 1 ? "--gemm-split" : !o->tune ? "--no-tune" : "--sm-margin");
        return 2;
    }
    if (o->yield_us > 0 && !o->tune) {
        fprintf(stderr, "mlp_gpu: --yield-us is measured while the GEMMs are tuned: drop --no-tune\n");
        return 2;
    }
    return 0;
}

/* ============================================================================================
 * Kernels: deterministic random init, the loss, optimizers, comparison
 * ============================================================================================ */

/* Counter-based random numbers (splitmix64): element i of a tensor is the same on every rank
 * and every run, so the pipeline stages and the single-GPU reference hold identical weights. */
__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t i)
{
    return ((mix64(seed * 0x632be59bd9b4e019ull ^ i) >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

/* bound > 0: uniform(-bound, bound) (nn.Linear's init); bound == 0: standard normal. */
__global__ void init_kernel(bf16 *p, size_t n, uint64_t seed, float bound)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v;
        if (bound > 0) v = (2.0f * uniform01(seed, i) - 1.0f) * bound;
        else {
            float u1 = uniform01(seed, 2 * i), u2 = uniform01(seed, 2 * i + 1);
            v = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        }
        p[i] = __float2bfloat16(v);
    }
}

/* dy = scale * (o - t), 8 elements per thread (16-byte loads); *loss += sum((o - t)^2) * inv.
 * scale = 2 / (T*H*M): the loss is the mean over microbatches of each microbatch's MSE. */
__global__ void mse_kernel(const bf16 *__restrict__ o, const bf16 *__restrict__ t, bf16 *__restrict__ dy,
                           size_t n8, float scale, float inv, float *loss)
{
    float acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        uint4 ov = ((const uint4 *)o)[i], tv = ((const uint4 *)t)[i], dv;
        const __nv_bfloat162 *o2 = (const __nv_bfloat162 *)&ov, *t2 = (const __nv_bfloat162 *)&tv;
        __nv_bfloat162 *d2 = (__nv_bfloat162 *)&dv;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 a = __bfloat1622float2(o2[k]), b = __bfloat1622float2(t2[k]);
            float e0 = a.x - b.x, e1 = a.y - b.y;
            acc += e0 * e0 + e1 * e1;
            d2[k] = __floats2bfloat162_rn(scale * e0, scale * e1);
        }
        ((uint4 *)dy)[i] = dv;
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    __shared__ float part[32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0;
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (threadIdx.x == 0) atomicAdd(loss, acc * inv);
    }
}

/* w -= lr * clip * g (weights bf16, gradients fp32). */
__global__ void sgd_kernel(bf16 *w, const float *g, size_t n, float lr, const float *clip)
{
    float s = lr * (clip ? *clip : 1.0f);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        w[i] = __float2bfloat16(__bfloat162float(w[i]) - s * g[i]);
}

/* AdamW (Loshchilov & Hutter) with PyTorch's defaults betas (0.9, 0.999), eps 1e-8, wd 0.01. */
__global__ void adamw_kernel(bf16 *w, const float *g, float *m, float *v, size_t n, float lr, int t, const float *clip)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float c = clip ? *clip : 1.0f, bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] * c, wi = __bfloat162float(w[i]);
        float mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
        m[i] = mi; v[i] = vi;
        wi -= lr * (wd * wi + (mi / bc1) / (sqrtf(vi / bc2) + eps));
        w[i] = __float2bfloat16(wi);
    }
}

/* out[0] += sum (a - b)^2, out[1] += sum b^2 (fp64). */
__global__ void diff_kernel(const float *a, const float *b, size_t n, double *out)
{
    double d2 = 0, b2 = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double d = (double)a[i] - (double)b[i];
        d2 += d * d;
        b2 += (double)b[i] * (double)b[i];
    }
    for (int off = 16; off > 0; off >>= 1) {
        d2 += __shfl_xor_sync(0xffffffffu, d2, off);
        b2 += __shfl_xor_sync(0xffffffffu, b2, off);
    }
    if ((threadIdx.x & 31) == 0) { atomicAdd(&out[0], d2); atomicAdd(&out[1], b2); }
}

static int grid_for(size_t n) { size_t b = (n + 255) / 256; return (int)(b > 132 * 16 ? 132 * 16 : (b ? b : 1)); }

/* ============================================================================================
 * cuBLASLt GEMMs. Row-major [rows, cols] is column-major [cols, rows], so with T tokens:
 *   forward   g  = gelu(x W1^T), h kept   D[F,T] = op_T(W1 as [H,F]) · x[H,T]      GELU_AUX
 *             y  = x + g W2^T            D[H,T] = op_T(W2 as [F,H]) · g[F,T] + x   beta 1
 *   backward  dW2 += dy^T g              D[F,H] = g[F,T] · op_T(dy[H,T])          fp32, beta 0/1
 *             dh = (dy W2) * gelu'(h)    D[F,T] = W2 as [F,H] · dy[H,T]           DGELU
 *             dW1 += dh^T x              D[H,F] = x[H,T] · op_T(dh[F,T])          fp32, beta 0/1
 *             dx = dy + dh W1            D[H,T] = W1 as [H,F] · dh[F,T] + dy      beta 1
 * ============================================================================================ */
enum { G_FWD1, G_FWD2, G_DW2, G_DH, G_DW1, G_DX, G_COUNT };
static const char *const gemm_names[G_COUNT] = { "fwd1 gelu_aux", "fwd2 +residual", "dW2", "dh dgelu", "dW1",
                                                 "dx +residual" };

struct Gemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool aux = false;
    double flops = 0;
    int m = 0, n = 0, k = 0;
    /* --gemm-split: the GEMM as `pieces` GEMMs over 1/pieces of its output columns each (A is
     * whole in every piece, so layout a serves them too), with B, C layouts and a kernel of their own */
    int pieces = 1;
    cublasOperation_t tb = CUBLAS_OP_N;
    int ldb = 0, ldc = 0;
    cudaDataType_t ctype = CUDA_R_16BF;
    cublasLtMatrixLayout_t pb = nullptr, pc = nullptr;
    cublasLtMatmulAlgo_t palgo;
};

struct Gemms {
    cublasLtHandle_t lt = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 64u << 20;
    Gemm g[G_COUNT];
    /* --gemm-times: an event before and after every GEMM of a step (ev_used = 0 at each step's
     * start). The pool grows in the first step (a warm-up one unless --warmup 0); later steps
     * of the same schedule reuse it. */
    bool timing = false;
    std::vector<cudaEvent_t> ev;
    std::vector<int> ev_id;
    size_t ev_used = 0;
    /* The candidates each GEMM kind was timed on (the heuristic's index of each, what --gemm-picks
     * holds) and the index in use. While `rotating` (--tune-in-step), each call of a kind takes its
     * next candidate in turn, timed with events (ev_id = kind * 16 + position in cand). */
    std::vector<cublasLtMatmulAlgo_t> cand[G_COUNT];
    std::vector<int> cand_index[G_COUNT];
    int picks[G_COUNT] = { 0 };
    bool picked_from_file = false, rotating = false;
    unsigned rot_next[G_COUNT] = { 0 };
    std::vector<int> rot_order[G_COUNT];   /* each round of a kind's candidates in a fresh random order */
    uint64_t rot_seed = 1;
    const char *picks_pending = nullptr;   /* --gemm-picks file to write once --tune-in-step chose */
    std::string picks_header;
};

static void gemm_plan(Gemm &g, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
                      int ldc, cudaDataType_t ctype, cublasLtEpilogue_t epi, int sm_target)
{
    CKLT(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_DGELU) {
        int64_t ld = m;
        cudaDataType_t at = CUDA_R_16BF;
        g.aux = true;
        CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at));
    }
    if (sm_target > 0)
        CKLT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target, sizeof sm_target));
    CKLT(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
    CKLT(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
    CKLT(cublasLtMatrixLayoutCreate(&g.c, ctype, m, n, ldc));
    g.flops = 2.0 * m * n * k;
    g.m = m; g.n = n; g.k = k;
    g.tb = tb; g.ldb = ldb; g.ldc = ldc; g.ctype = ctype;
}

/* A GEMM in pieces splits its output's columns (n): the tokens for the activations' GEMMs, and the
 * weight gradients' second dimension (H for dW2, F for dW1), so that each piece still reduces
 * over all T tokens and writes its part of the fp32 gradient once (pieces along the tokens would
 * read and write the whole gradient once per piece: 10% slower on H200). */
static void gemm_plan_pieces(Gemm &g, int pieces)
{
    int n = g.n / pieces, k = g.k;
    CKLT(cublasLtMatrixLayoutCreate(&g.pb, CUDA_R_16BF, g.tb == CUBLAS_OP_N ? k : n, g.tb == CUBLAS_OP_N ? n : k, g.ldb));
    CKLT(cublasLtMatrixLayoutCreate(&g.pc, g.ctype, g.m, n, g.ldc));
}

static cublasStatus_t gemm_try(Gemms &G, int id, const void *A, const void *B, const void *C, void *D, float beta,
                               void *aux, cudaStream_t s)
{
    Gemm &g = G.g[id];
    float alpha = 1.0f;
    if (g.pieces == 1) {
        if (g.aux) {
            cublasStatus_t st = cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
        }
        return cublasLtMatmul(G.lt, g.desc, &alpha, A, g.a, B, g.b, &beta, C, g.c, D, g.c, &g.algo, G.workspace,
                              G.workspace_bytes, s);
    }
    /* Piece p is columns [p n/P, (p+1) n/P) of C, D and aux, and the same columns of op(B): of B
     * itself when it is not transposed, its rows when it is. A (the weight, or the activation that
     * a weight gradient reduces over) is whole in every piece. */
    const size_t step = (size_t)g.n / g.pieces, csize = g.ctype == CUDA_R_32F ? 4 : 2;
    for (int p = 0; p < g.pieces; p++) {
        const char *b = (const char *)B + p * step * (g.tb == CUBLAS_OP_N ? (size_t)g.ldb : 1) * 2;
        const char *c = (const char *)C + p * step * g.ldc * csize;
        char *d = (char *)D + p * step * g.ldc * csize;
        if (g.aux) {
            void *ap = (char *)aux + p * step * g.m * 2;
            cublasStatus_t st = cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof ap);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
        }
        cublasStatus_t st = cublasLtMatmul(G.lt, g.desc, &alpha, A, g.a, b, g.pb, &beta, c, g.pc, d, g.pc, &g.palgo,
                                           G.workspace, G.workspace_bytes, s);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

static void gemm_run(Gemms &G, int id, const void *A, const void *B, const void *C, void *D, float beta, void *aux,
                     cudaStream_t s)
{
    int slot_id = id;
    const bool rotate = G.rotating && !G.cand[id].empty();
    if (rotate) {
        /* every candidate once per round, each round in a new order: a candidate's neighbours (the
         * other kinds' calls beside it) change from round to round */
        std::vector<int> &order = G.rot_order[id];
        const unsigned n = (unsigned)G.cand[id].size(), at = G.rot_next[id]++ % n;
        if (at == 0 || order.size() != n) {
            order.resize(n);
            for (unsigned i = 0; i < n; i++) order[i] = (int)i;
            for (unsigned i = n - 1; i > 0; i--) {   /* Fisher-Yates on splitmix64 */
                uint64_t z = (G.rot_seed += 0x9E3779B97F4A7C15ull);
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; z ^= z >> 31;
                std::swap(order[i], order[z % (i + 1)]);
            }
        }
        const int c = order[at];
        G.g[id].algo = G.cand[id][c];
        slot_id = id * 16 + c;
    }
    if (G.timing || rotate) {   /* while rotating, a kind without candidates goes untimed */
        if (G.ev_used + 2 > G.ev.size()) {
            size_t n = G.ev.size();
            G.ev.resize(n ? 2 * n : 1024);
            G.ev_id.resize(G.ev.size() / 2);
            for (size_t i = n; i < G.ev.size(); i++) CK(cudaEventCreate(&G.ev[i]));
        }
        G.ev_id[G.ev_used / 2] = slot_id;
        CK(cudaEventRecord(G.ev[G.ev_used], s));
    }
    CKLT(gemm_try(G, id, A, B, C, D, beta, aux, s));
    if (G.timing || rotate) {
        CK(cudaEventRecord(G.ev[G.ev_used + 1], s));
        G.ev_used += 2;
    }
}

/* --gemm-times: after a step's work is synchronised, each GEMM kind's count and mean time, the
 * sum of all, and the gaps between consecutive GEMMs (shorter than 1 ms: longer ones are waits
 * for another rank, not launch gaps); `who` names the run in the line. */
static void gemm_times_report(Gemms &G, const char *who, double compute_ms)
{
    double sum[G_COUNT] = { 0 }, total = 0, gaps = 0;
    int n[G_COUNT] = { 0 };
    for (size_t i = 0; i + 1 < G.ev_used; i += 2) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, G.ev[i], G.ev[i + 1]));
        sum[G.ev_id[i / 2]] += ms; n[G.ev_id[i / 2]]++; total += ms;
        if (i + 2 < G.ev_used) {
            float gap = 0;
            CK(cudaEventElapsedTime(&gap, G.ev[i + 1], G.ev[i + 2]));
            if (gap < 1.0f) gaps += gap;
        }
    }
    char line[1024];
    int len = snprintf(line, sizeof line, "gemm times, %s: %.1f ms in %zu GEMMs", who, total, G.ev_used / 2);
    auto add = [&](int wrote) { if (wrote > 0) len = std::min((int)sizeof line - 1, len + wrote); };
    if (compute_ms > 0) add(snprintf(line + len, sizeof line - len, " (compute %.1f ms)", compute_ms));
    add(snprintf(line + len, sizeof line - len, "; gaps under 1 ms between them (launch gaps and short waits) %.2f ms; mean us:", gaps));
    for (int k = 0; k < G_COUNT; k++)
        if (n[k]) add(snprintf(line + len, sizeof line - len, " %s %d x %.1f;", gemm_names[k], n[k], 1e3 * sum[k] / n[k]));
    printf("%s\n", line);   /* one call: the ranks of --threads print whole lines */
    fflush(stdout);
}

/* The yield probe. A pipeline rank launches NCCL's kernel while its GEMMs run; the kernel's CTAs
 * need SMs, and a GEMM whose CTAs stay resident to its end (a persistent kernel) frees none until
 * then, whatever the communication stream's priority. probe_gap_us runs three GEMMs on the
 * compute stream and, on a high-priority stream, a chain of small kernels of 16 CTAs x 512
 * threads (about NCCL's p2p kernel for one peer) that stamp the GPU clock; the answer is the
 * longest gap between stamps inside the GEMMs' window: how long a kernel launched mid-GEMM may
 * wait for SMs (bench/gemm_yield.cu prints it for every candidate). */
__global__ void probe_stamp_kernel(unsigned long long *stamps, int i)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (threadIdx.x == 0) atomicMax(&stamps[i], t);
}

static double probe_gap_us(const std::function<cublasStatus_t(void)> &gemm, cudaStream_t s, cudaStream_t probe_stream,
                           unsigned long long *stamps, int probes)
{
    CK(cudaMemsetAsync(stamps, 0, (probes + 2) * sizeof *stamps, s));
    CK(cudaStreamSynchronize(s));
    probe_stamp_kernel<<<1, 32, 0, s>>>(stamps, probes);
    for (int r = 0; r < 3; r++) if (gemm() != CUBLAS_STATUS_SUCCESS) return 1e30;
    probe_stamp_kernel<<<1, 32, 0, s>>>(stamps, probes + 1);
    usleep(200); /* the GEMMs are under way before the first probe */
    for (int k = 0; k < probes; k++) probe_stamp_kernel<<<16, 512, 0, probe_stream>>>(stamps, k);
    CK(cudaStreamSynchronize(probe_stream));
    CK(cudaStreamSynchronize(s));
    std::vector<unsigned long long> h(probes + 2);
    CK(cudaMemcpy(h.data(), stamps, h.size() * sizeof h[0], cudaMemcpyDeviceToHost));
    unsigned long long w0 = h[probes], w1 = h[probes + 1], prev = 0;
    double gap = 0;
    int inside = 0;
    for (int k = 0; k < probes; k++) {
        if (h[k] > w0 && h[k] < w1 && inside++ > 0) gap = std::max(gap, (h[k] - prev) / 1e3);
        prev = h[k];
    }
    /* fewer than two probes inside the GEMMs saw no gap: the window itself is the bound (short
     * GEMMs: their length; GEMMs that never let a probe in: all three) */
    if (inside < 2) return (w1 - w0) / 1e3;
    if (h[probes - 1] < w1) gap = std::max(gap, (w1 - h[probes - 1]) / 1e3); /* ran out: upper bound */
    return gap;
}

/* --gemm-picks FILE: the candidate each GEMM was tuned to, so that other runs and ranks run the
 * same kernels. Line 1 names what the picks hold for (the GPU, cuBLASLt's version, the SMs the
 * plans target); then one line per GEMM: "m n k candidate name". */
static std::string picks_header(int sm_target)
{
    cudaDeviceProp prop;
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    return std::string("# mlp_gpu GEMM picks: ") + prop.name + ", cuBLASLt " + std::to_string(cublasLtGetVersion()) +
           ", SM target " + std::to_string(sm_target);
}

/* One line of a picks file: "m n k candidate name", each number a decimal in [0, 2^31), the name
 * one of gemm_names, blanks around it ignored. Returns the GEMM kind, or -1 if it does not parse. */
static int picks_parse_line(const char *line, long v[4])
{
    const char *p = line;
    for (int i = 0; i < 4; i++) {
        char *end;
        while (*p == ' ' || *p == '\t') p++;
        if (*p < '0' || *p > '9') return -1;   /* no sign, no blank value */
        errno = 0;
        v[i] = strtol(p, &end, 10);
        if (errno || v[i] > 0x7fffffffL || (*end != ' ' && *end != '\t')) return -1;
        p = end;
    }
    while (*p == ' ' || *p == '\t') p++;
    size_t len = strcspn(p, "\r\n");
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    for (int id = 0; id < G_COUNT; id++)
        if (strlen(gemm_names[id]) == len && !strncmp(p, gemm_names[id], len)) return id;
    return -1;
}

/* Reads FILE into picks[G_COUNT]. Returns false if there is no file; exits with the reason if it
 * cannot be read, is for another GPU, library or SM target, or a line does not parse. */
static bool picks_read(const char *path, const std::string &header, const Gemms &G, int picks[G_COUNT])
{
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT) return false;
    if (!f) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", path, strerror(errno)); exit(2); }
    char line[512];
    std::string first = fgets(line, sizeof line, f) ? std::string(line) : std::string();
    if (ferror(f)) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", path, strerror(errno)); exit(2); }
    while (!first.empty() && (first.back() == '\n' || first.back() == '\r')) first.pop_back();
    if (first != header) {
        fprintf(stderr, "mlp_gpu: --gemm-picks=%s: holds \"%s\", but this run needs \"%s\" (delete the file to tune "
                "again)\n", path, first.c_str(), header.c_str());
        exit(2);
    }
    for (int id = 0; id < G_COUNT; id++) picks[id] = -1;
    for (int no = 2; fgets(line, sizeof line, f); no++) {
        if (line[strspn(line, " \t\r\n")] == '\0') continue;   /* blank lines */
        long v[4];
        const int id = picks_parse_line(line, v);
        if (id < 0) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s line %d: expected \"m n k candidate name\" (numbers from 0 to "
                    "2147483647, then a GEMM's name as mlp_gpu writes it: fwd1 gelu_aux, fwd2 +residual, dW2, dh dgelu, "
                    "dW1, dx +residual)\n", path, no);
            exit(2);
        }
        if (v[0] != G.g[id].m || v[1] != G.g[id].n || v[2] != G.g[id].k) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s line %d: GEMM '%s' is %ld x %ld x %ld there and %d x %d x %d in "
                    "this run (its --hidden and --tokens must match)\n", path, no, gemm_names[id], v[0], v[1], v[2],
                    G.g[id].m, G.g[id].n, G.g[id].k);
            exit(2);
        }
        if (picks[id] >= 0) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s line %d: a second line for GEMM '%s'\n", path, no, gemm_names[id]);
            exit(2);
        }
        picks[id] = (int)v[3];
    }
    if (ferror(f)) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", path, strerror(errno)); exit(2); }
    fclose(f);
    for (int id = 0; id < G_COUNT; id++)
        if (picks[id] < 0) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s: no line for GEMM '%s'\n", path, gemm_names[id]);
            exit(2);
        }
    return true;
}

/* Another process (or rank thread) wrote FILE while this one tuned: run its picks, so that every
 * run given the file runs the same kernels. Each pick must be among this run's timed candidates. */
static void picks_adopt(const char *path, const std::string &header, Gemms &G)
{
    int picks[G_COUNT];
    if (!picks_read(path, header, G, picks)) {
        fprintf(stderr, "mlp_gpu: --gemm-picks=%s: vanished while this run tuned\n", path);
        exit(2);
    }
    for (int id = 0; id < G_COUNT; id++) {
        size_t c = 0;
        while (c < G.cand_index[id].size() && G.cand_index[id][c] != picks[id]) c++;
        if (c == G.cand_index[id].size()) {
            fprintf(stderr, "mlp_gpu: --gemm-picks=%s: written by another run while this one tuned, and its GEMM '%s' "
                    "candidate %d did not run here (delete the file to tune again)\n", path, gemm_names[id], picks[id]);
            exit(2);
        }
        G.g[id].algo = G.cand[id][c];
        G.picks[id] = picks[id];
    }
    G.picked_from_file = true;
    printf("GEMM picks: %s was written by another run while this one tuned; running its picks\n", path);
    fflush(stdout);
}

/* Writes the picks to FILE unless another process got there first (written aside, then linked:
 * a reader sees a whole file or none); then this run takes the file's picks instead (picks_adopt)
 * and the return is true: its kernels changed. */
static bool picks_write(const char *path, const std::string &header, Gemms &G, const int picks[G_COUNT])
{
    std::string tmp = std::string(path) + ".tmp." + std::to_string((long)getpid()) + "." +
                      std::to_string((unsigned long long)(uintptr_t)&G);   /* --threads: one per rank */
    FILE *f = fopen(tmp.c_str(), "w");
    if (!f) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", tmp.c_str(), strerror(errno)); exit(2); }
    fprintf(f, "%s\n", header.c_str());
    for (int id = 0; id < G_COUNT; id++)
        fprintf(f, "%d %d %d %d %s\n", G.g[id].m, G.g[id].n, G.g[id].k, picks[id], gemm_names[id]);
    bool ok = fclose(f) == 0, lost = false;
    if (ok && link(tmp.c_str(), path) != 0) { if (errno == EEXIST) lost = true; else ok = false; }
    if (!ok) { fprintf(stderr, "mlp_gpu: --gemm-picks=%s: %s\n", path, strerror(errno)); unlink(tmp.c_str()); exit(2); }
    unlink(tmp.c_str());
    if (lost) picks_adopt(path, header, G);
    return lost;
}

/* Plans the six GEMMs; with tune, times the heuristic's top candidates on real-size buffers and
 * keeps the fastest of each (cuBLASLt's first choice is not always its best). With yield_us > 0,
 * only candidates whose probe gap is at most yield_us compete (the fastest overall if none).
 * With split > 1, a GEMM left with a kernel that does not yield (every GEMM if yield_us is 0)
 * runs as split pieces of its output columns, their kernel tuned the same way. */
static void gemms_create(Gemms &G, int H, int T, int sm_target, int tune, double yield_us, int split, cudaStream_t s,
                         int verbose, const char *picks_path = nullptr, bool defer_picks = false)
{
    const int F = 4 * H;
    CKLT(cublasLtCreate(&G.lt));
    CK(cudaMalloc(&G.workspace, G.workspace_bytes));
    const cublasOperation_t N = CUBLAS_OP_N, Tr = CUBLAS_OP_T;
    gemm_plan(G.g[G_FWD1], Tr, N, F, T, H, H, H, F, CUDA_R_16BF, CUBLASLT_EPILOGUE_GELU_AUX, sm_target);
    gemm_plan(G.g[G_FWD2], Tr, N, H, T, F, F, F, H, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, sm_target);
    gemm_plan(G.g[G_DW2], N, Tr, F, H, T, F, H, F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, sm_target);
    gemm_plan(G.g[G_DH], N, N, F, T, H, F, H, F, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU, sm_target);
    gemm_plan(G.g[G_DW1], N, Tr, H, F, T, H, F, H, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, sm_target);
    gemm_plan(G.g[G_DX], N, N, H, T, F, H, F, H, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, sm_target);

    /* buffers for tuning: every operand of every GEMM fits in these */
    size_t big = (size_t)F * std::max(T, H);
    bf16 *A, *B, *C, *aux;
    float *C32;
    CK(cudaMalloc(&A, big * 2)); CK(cudaMalloc(&B, big * 2)); CK(cudaMalloc(&C, big * 2));
    CK(cudaMalloc(&aux, big * 2)); CK(cudaMalloc(&C32, (size_t)F * H * 4));
    init_kernel<<<grid_for(big), 256, 0, s>>>(A, big, 1, 0.02f);
    init_kernel<<<grid_for(big), 256, 0, s>>>(B, big, 2, 0.02f);
    init_kernel<<<grid_for(big), 256, 0, s>>>(C, big, 3, 0.02f);
    init_kernel<<<grid_for(big), 256, 0, s>>>(aux, big, 4, 1.0f);
    CK(cudaMemsetAsync(C32, 0, (size_t)F * H * 4, s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    cublasLtMatmulPreference_t pref;
    CKLT(cublasLtMatmulPreferenceCreate(&pref));
    CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &G.workspace_bytes,
                                              sizeof G.workspace_bytes));
    const int probes = 3000, max_cands = 16;
    int picks[G_COUNT];
    const std::string header = picks_path ? picks_header(sm_target) : std::string();
    const bool picked = picks_path && picks_read(picks_path, header, G, picks);
    cudaStream_t probe_stream = nullptr;
    unsigned long long *stamps = nullptr;
    if (tune && yield_us > 0) {
        int lo, hi;
        CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        CK(cudaStreamCreateWithPriority(&probe_stream, cudaStreamNonBlocking, hi));
        CK(cudaMalloc(&stamps, (probes + 2) * sizeof *stamps));
    }
    if (tune && !picked) {
        /* 1.5 s of the largest GEMM first: candidates timed on a cold GPU at its boost clock are
         * ranked for a clock the steps never see (they run at the power cap's, ~1430 MHz on H200) */
        Gemm &g = G.g[G_FWD2];
        cublasLtMatmulHeuristicResult_t first;
        int found = 0;
        CKLT(cublasLtMatmulAlgoGetHeuristic(G.lt, g.desc, g.a, g.b, g.c, g.c, pref, 1, &first, &found));
        if (found == 1) {
            g.algo = first.algo;
            float total = 0;
            while (total < 1500.0f) {
                float ms = 0;
                CK(cudaEventRecord(e0, s));
                for (int r = 0; r < 50; r++) CKLT(gemm_try(G, G_FWD2, A, B, C, C, 1.0f, aux, s));
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                total += ms;
            }
        }
    }
    for (int id = 0; id < G_COUNT; id++) {
        Gemm &g = G.g[id];
        cublasLtMatmulHeuristicResult_t res[max_cands];
        int found = 0;
        CKLT(cublasLtMatmulAlgoGetHeuristic(G.lt, g.desc, g.a, g.b, g.c, g.c, pref, !tune ? 1 : yield_us > 0 ? max_cands : 8,
                                            res, &found));
        if (found < 1) { fprintf(stderr, "mlp_gpu: cuBLASLt has no algorithm for GEMM %s\n", gemm_names[id]); exit(1); }
        const bool f32 = id == G_DW1 || id == G_DW2;
        const float beta = (id == G_FWD2 || id == G_DX || f32) ? 1.0f : 0.0f;
        void *const cd = f32 ? (void *)C32 : (void *)C;
        /* the GEMM as planned now (g.algo, or g.palgo in pieces): one run, then ms for three; < 0 if refused */
        auto time3 = [&](void) -> float {
            if (gemm_try(G, id, A, B, cd, cd, beta, aux, s) != CUBLAS_STATUS_SUCCESS) return -1;
            bool ok = true;
            float ms = 0;
            CK(cudaEventRecord(e0, s));
            for (int r = 0; r < 3 && ok; r++) ok = gemm_try(G, id, A, B, cd, cd, beta, aux, s) == CUBLAS_STATUS_SUCCESS;
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            return ok ? ms : -1;
        };
        /* each candidate's median of 5 rounds, the candidates taking turns, so that all see the
         * same clock: a GPU under its power cap slows as it warms, and timed one after another
         * the later candidates looked slower (two processes picked dW1 kernels 5% apart) */
        const int rounds = 5;
        std::vector<float> med(found, -1.0f), runs((size_t)found * rounds, -1.0f);
        if (picked) {   /* what the file says, after checking the heuristic still offers it */
            const int c = picks[id];
            if (c >= found || res[c].state != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "mlp_gpu: --gemm-picks=%s: GEMM '%s' candidate %d: cuBLASLt offers %d here (delete the "
                        "file to tune again)\n", picks_path, gemm_names[id], c, found);
                exit(2);
            }
            g.algo = res[c].algo;
            G.picks[id] = c;
            CKLT(gemm_try(G, id, A, B, cd, cd, 1.0f, aux, s));   /* loaded now, not mid-step */
            if (verbose) printf("  gemm %-15s %5d x %5d x %5d  (candidate %d of %d, from %s)\n", gemm_names[id], g.m, g.n,
                                g.k, c, found, picks_path);
            continue;
        }
        for (int r = 0; r < rounds && tune; r++)
            for (int i = 0; i < found; i++) {
                if (res[i].state != CUBLAS_STATUS_SUCCESS || (r > 0 && runs[(size_t)i * rounds] < 0)) continue;
                g.algo = res[i].algo;
                runs[(size_t)i * rounds + r] = time3();
            }
        for (int i = 0; i < found && tune; i++) {
            float *x = &runs[(size_t)i * rounds];
            if (x[0] < 0) continue;
            std::sort(x, x + rounds);
            med[i] = x[0] < 0 ? -1.0f : x[rounds / 2];
        }
        float best = 1e30f, best_any = 1e30f;
        int best_i = -1, best_any_i = 0;
        double best_gap = 0;
        for (int i = 0; i < found && tune; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
            g.algo = res[i].algo;
            const float ms = med[i];
            if (ms < 0) continue;
            if (ms < best_any) { best_any = ms; best_any_i = i; }
            double gap = 0;
            if (yield_us > 0) {
                gap = probe_gap_us([&]() { return gemm_try(G, id, A, B, cd, cd, beta, aux, s); }, s, probe_stream,
                                   stamps, probes);
                if (verbose)
                    printf("  gemm %-15s candidate %2d  %7.3f ms  probe gap %8.1f us\n", gemm_names[id], i, ms / 3, gap);
                if (gap > yield_us) continue;
            }
            if (ms < best) { best = ms; best_i = i; best_gap = gap; }
        }
        /* The choice: a kernel that yields (when asked for) if it is within 3% of the fastest;
         * else pieces (when allowed) if they beat that yielding kernel; else the yielding kernel,
         * and with none, the fastest. */
        const bool yields = best_i >= 0;
        const int yield_i = best_i;
        const float yield_ms = best;
        const double yield_gap = best_gap;
        const bool try_pieces = split > 1 && (yield_us <= 0 || !yields || yield_ms > 1.03f * best_any);
        if (!yields) {
            if (tune && yield_us > 0 && verbose)
                printf("  gemm %-15s no candidate lets a kernel in within %g us\n", gemm_names[id], yield_us);
            best_i = best_any_i; best = best_any;
        }
        g.algo = res[best_i].algo;
        picks[id] = G.picks[id] = best_i;
        for (int i = 0; i < found && tune; i++)
            if (med[i] >= 0) { G.cand[id].push_back(res[i].algo); G.cand_index[id].push_back(i); }
        float pbest = 1e30f;
        if (try_pieces) {
            /* each piece's B and C/D start p * (n / pieces) columns (or rows of a transposed B) in:
             * tell the heuristic how aligned those pointers are (it assumes 256 bytes) */
            const size_t step = (size_t)g.n / split, csize = g.ctype == CUDA_R_32F ? 4 : 2;
            auto low_bit = [](size_t x) -> uint32_t { return (uint32_t)std::min<size_t>(256, x & (~x + 1)); };
            uint32_t align_a = 256, align_b = low_bit(step * (g.tb == CUBLAS_OP_N ? (size_t)g.ldb : 1) * 2),
                     align_c = low_bit(step * g.ldc * csize);
            cublasLtMatmulPreference_t ppref;
            CKLT(cublasLtMatmulPreferenceCreate(&ppref));
            CKLT(cublasLtMatmulPreferenceSetAttribute(ppref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &G.workspace_bytes,
                                                      sizeof G.workspace_bytes));
            CKLT(cublasLtMatmulPreferenceSetAttribute(ppref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
            CKLT(cublasLtMatmulPreferenceSetAttribute(ppref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
            CKLT(cublasLtMatmulPreferenceSetAttribute(ppref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
            CKLT(cublasLtMatmulPreferenceSetAttribute(ppref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c));
            gemm_plan_pieces(g, split);
            int pfound = 0;
            cublasLtMatmulHeuristicResult_t pres[8];
            CKLT(cublasLtMatmulAlgoGetHeuristic(G.lt, g.desc, g.a, g.pb, g.pc, g.pc, ppref, tune ? 8 : 1, pres, &pfound));
            CKLT(cublasLtMatmulPreferenceDestroy(ppref));
            int pbest_i = -1;
            g.pieces = split;
            for (int i = 0; i < pfound; i++) {   /* timed once each: --gemm-split is an experiment knob */
                if (pres[i].state != CUBLAS_STATUS_SUCCESS) continue;
                g.palgo = pres[i].algo;
                if (!tune) {   /* the heuristic's first that runs */
                    if (gemm_try(G, id, A, B, cd, cd, beta, aux, s) == CUBLAS_STATUS_SUCCESS) { pbest = 0; pbest_i = i; }
                    break;
                }
                const float ms = time3();
                if (ms >= 0 && ms < pbest) { pbest = ms; pbest_i = i; }
            }
            if (pbest_i < 0) {
                fprintf(stderr, "mlp_gpu: cuBLASLt has no algorithm for GEMM %s in %d pieces (try another --gemm-split)\n",
                        gemm_names[id], split);
                exit(1);
            }
            g.palgo = pres[pbest_i].algo;
            if (yield_us > 0 && yields && tune && pbest >= yield_ms) g.pieces = 1;   /* the yielding kernel is faster */
        }
        if (g.pieces == 1 && yields) { best_i = yield_i; best = yield_ms; g.algo = res[best_i].algo; }
        /* run the chosen kernel once: CUDA loads modules lazily, and a first load in the middle of
         * a step would happen while NCCL kernels may be waiting on a peer */
        CKLT(gemm_try(G, id, A, B, cd, cd, 1.0f, aux, s));
        if (verbose && tune) {
            if (g.pieces > 1)
                printf("  gemm %-15s %5d x %5d x %5d  %7.3f ms  %6.1f TFLOP/s  in %d pieces of its output columns "
                       "(whole: %.3f ms)\n", gemm_names[id], g.m, g.n, g.k, pbest / 3,
                       g.flops / (pbest / 3 * 1e-3) / 1e12, g.pieces, best_any / 3);
            else if (yield_us > 0 && yields)
                printf("  gemm %-15s %5d x %5d x %5d  %7.3f ms  %6.1f TFLOP/s  (candidate %d of %d, lets a kernel in "
                       "within %.0f us; fastest of all %.3f ms)\n", gemm_names[id], g.m, g.n, g.k, best / 3,
                       g.flops / (best / 3 * 1e-3) / 1e12, best_i, found, yield_gap, best_any / 3);
            else
                printf("  gemm %-15s %5d x %5d x %5d  %7.3f ms  %6.1f TFLOP/s  (candidate %d of %d)\n", gemm_names[id],
                       g.m, g.n, g.k, best / 3, g.flops / (best / 3 * 1e-3) / 1e12, best_i, found);
        }
    }
    G.picked_from_file = picked;
    G.picks_header = header;
    if (picks_path && !picked) {
        if (defer_picks) G.picks_pending = picks_path;   /* --tune-in-step picks again, then writes */
        else if (picks_write(picks_path, header, G, picks))
            for (int id = 0; id < G_COUNT; id++) {   /* load the adopted kernels now, not mid-step */
                const bool f32 = id == G_DW1 || id == G_DW2;
                CKLT(gemm_try(G, id, A, B, f32 ? (void *)C32 : (void *)C, f32 ? (void *)C32 : (void *)C, 1.0f, aux, s));
            }
    }
    if (probe_stream) { CK(cudaStreamDestroy(probe_stream)); CK(cudaFree(stamps)); }
    CKLT(cublasLtMatmulPreferenceDestroy(pref));
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    CK(cudaFree(A)); CK(cudaFree(B)); CK(cudaFree(C)); CK(cudaFree(aux)); CK(cudaFree(C32));
}

static void gemms_free(Gemms &G)
{
    for (int id = 0; id < G_COUNT; id++) {
        Gemm &g = G.g[id];
        if (g.desc) cublasLtMatmulDescDestroy(g.desc);
        if (g.a) cublasLtMatrixLayoutDestroy(g.a);
        if (g.b) cublasLtMatrixLayoutDestroy(g.b);
        if (g.c) cublasLtMatrixLayoutDestroy(g.c);
        if (g.pb) cublasLtMatrixLayoutDestroy(g.pb);
        if (g.pc) cublasLtMatrixLayoutDestroy(g.pc);
    }
    for (cudaEvent_t e : G.ev) cudaEventDestroy(e);
    G.ev.clear();
    if (G.workspace) cudaFree(G.workspace);
    if (G.lt) cublasLtDestroy(G.lt);
}

/* ============================================================================================
 * The model on one rank: its blocks, the activations it keeps for backward, the GEMM calls
 * ============================================================================================ */
struct Model {
    int H, F, T, L, M, S, nb;       /* nb = the most blocks a stage holds (L / S unless --layout) */
    std::vector<int> first, count;  /* [S] stage s holds blocks [first[s], first[s] + count[s]) */
    /* Between an I and its W, the I's dh and dy of every block wait for the W in one of this
     * rank's I->W buffers: dh[j] [T, F] for j < iw_nb, then dy[j] [T, H] for j < iw_nb - 1 (the
     * last block's dy is the grad_out), iw_nb = the rank's largest stage. There are as many as the
     * most I's awaiting their W at once in the rank's program (pp_schedule_rank_peaks): one after
     * pp_schedule_split_backward, where each W follows its I at once; ZB-V's held W's need more,
     * but fewer than its live activations, which is why they are not kept in the slots. */
    int iw_nb = 0;
    std::vector<bf16 *> iw_bufs;
    std::vector<int> iw_free;       /* buffers not awaiting a W */
    std::vector<int> iw_of;         /* [num_chunks * M] buffer of (chunk, mb) between its I and W, or -1 */
    cudaStream_t stream;
    Gemms G;
    std::vector<bf16 *> W1, W2;     /* [L], NULL where another rank holds the block */
    std::vector<float *> dW1, dW2;  /* [L] */
    std::vector<float *> m1, v1, m2, v2;   /* AdamW state */
    std::vector<char> fresh;        /* [L] the block's gradient was not written yet this step */
    /* Saved activations of one (stage, microbatch) of nb blocks, in one slot of slot_size(nb):
     *   h[j], g[j]  [T, F] for j < nb;  x[j] [T, H] for 1 <= j < nb (x[0] is the stage input).
     * Slots are kept by their stage size (stages of a --layout differ), so a small stage's
     * activations do not take a large stage's room. */
    size_t slot_bytes = 0;                      /* slot_size(nb), the largest */
    std::vector<char *> slots;
    std::vector<int> slot_nb;                   /* [slot] the stage size it was made for */
    std::vector<std::vector<int>> free_slots;   /* [nb] free slots of that size */
    std::vector<int> saved;         /* [num_chunks * M] slot of (chunk, mb), or -1 */
    bf16 *dh = nullptr, *work[2] = { nullptr, nullptr };
    bf16 *inputs = nullptr, *targets = nullptr;  /* [M, T, H] on the first / last stage's rank */
    float *d_loss = nullptr;
    size_t bytes = 0, peak_bytes = 0;            /* what this program allocated */
    int kill_step = -1, step_no = 0;             /* failure test */
};

static void *dev_alloc(Model &m, size_t bytes)
{
    void *p = nullptr;
    DBG("cudaMalloc %zu bytes", bytes);
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    DBG("cudaMalloc done");
    m.bytes += bytes;
    m.peak_bytes = std::max(m.peak_bytes, m.bytes);
    return p;
}

static bf16 *sub(char *slot, size_t offset_elems) { return (bf16 *)slot + offset_elems; }

/* Slot layout offsets, in bf16 elements, for a stage of nb blocks. */
static size_t off_h(const Model &m, int j) { return (size_t)j * 2 * m.T * m.F; }
static size_t off_g(const Model &m, int j) { return off_h(m, j) + (size_t)m.T * m.F; }
static size_t off_x(const Model &m, int nb, int j) { return (size_t)nb * 2 * m.T * m.F + (size_t)(j - 1) * m.T * m.H; }
static size_t slot_size(const Model &m, int nb) { return 2 * off_x(m, nb, nb); }
/* Where the I leaves block j's dh and dy for the W: in its I->W buffer (a smaller stage uses the
 * start of each half). */
static size_t iw_size(const Model &m) { return ((size_t)m.iw_nb * m.T * m.F + (size_t)(m.iw_nb - 1) * m.T * m.H) * 2; }
static bf16 *iw_dh(const Model &m, bf16 *iw, int j) { return iw + (size_t)j * m.T * m.F; }
static bf16 *iw_dy(const Model &m, bf16 *iw, int j) { return iw + (size_t)m.iw_nb * m.T * m.F + (size_t)j * m.T * m.H; }

static int slot_get(Model &m, int nb)
{
    std::vector<int> &fl = m.free_slots[nb];
    if (fl.empty()) {
        m.slots.push_back((char *)dev_alloc(m, slot_size(m, nb)));
        m.slot_nb.push_back(nb);
        return (int)m.slots.size() - 1;
    }
    int s = fl.back();
    fl.pop_back();
    return s;
}

static void model_init_blocks(Model &m, const std::vector<int> &blocks, bool adamw)
{
    size_t wn = (size_t)m.F * m.H;
    for (int b : blocks) {
        m.W1[b] = (bf16 *)dev_alloc(m, wn * 2);
        m.W2[b] = (bf16 *)dev_alloc(m, wn * 2);
        m.dW1[b] = (float *)dev_alloc(m, wn * 4);
        m.dW2[b] = (float *)dev_alloc(m, wn * 4);
        /* nn.Linear's default init: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
        init_kernel<<<grid_for(wn), 256, 0, m.stream>>>(m.W1[b], wn, 1000 + 2 * b, 1.0f / sqrtf((float)m.H));
        init_kernel<<<grid_for(wn), 256, 0, m.stream>>>(m.W2[b], wn, 1001 + 2 * b, 1.0f / sqrtf((float)m.F));
        if (adamw) {
            m.m1[b] = (float *)dev_alloc(m, wn * 4); m.v1[b] = (float *)dev_alloc(m, wn * 4);
            m.m2[b] = (float *)dev_alloc(m, wn * 4); m.v2[b] = (float *)dev_alloc(m, wn * 4);
            CK(cudaMemsetAsync(m.m1[b], 0, wn * 4, m.stream)); CK(cudaMemsetAsync(m.v1[b], 0, wn * 4, m.stream));
            CK(cudaMemsetAsync(m.m2[b], 0, wn * 4, m.stream)); CK(cudaMemsetAsync(m.v2[b], 0, wn * 4, m.stream));
        }
    }
    CK(cudaGetLastError());
}

/* counts: blocks of each of the S stages (NULL: L / S each) */
static void model_setup(Model &m, const Options &o, int S, const int *counts, cudaStream_t stream,
                        int sm_target, int verbose)
{
    m.H = o.hidden; m.F = 4 * o.hidden; m.T = o.tokens; m.L = o.layers; m.M = o.mb; m.S = S;
    m.first.assign(S, 0); m.count.assign(S, 0);
    m.nb = 0;
    for (int s = 0, b = 0; s < S; s++) {
        m.first[s] = b;
        m.count[s] = counts ? counts[s] : m.L / S;
        b += m.count[s];
        m.nb = std::max(m.nb, m.count[s]);
    }
    m.stream = stream;
    m.W1.assign(m.L, nullptr); m.W2.assign(m.L, nullptr);
    m.dW1.assign(m.L, nullptr); m.dW2.assign(m.L, nullptr);
    m.m1.assign(m.L, nullptr); m.v1.assign(m.L, nullptr); m.m2.assign(m.L, nullptr); m.v2.assign(m.L, nullptr);
    m.fresh.assign(m.L, 1);
    m.slot_bytes = slot_size(m, m.nb);
    m.free_slots.assign(m.nb + 1, std::vector<int>());
    size_t th = (size_t)m.T * m.H;
    m.dh = (bf16 *)dev_alloc(m, (size_t)m.T * m.F * 2);
    m.work[0] = (bf16 *)dev_alloc(m, th * 2);
    m.work[1] = (bf16 *)dev_alloc(m, th * 2);
    m.d_loss = (float *)dev_alloc(m, sizeof(float));
    gemms_create(m.G, m.H, m.T, sm_target, o.tune, o.yield_us, o.gemm_split, stream, verbose, o.gemm_picks,
                 o.single && o.tune_in_step > 0);
    m.G.timing = o.gemm_times != 0;
    /* Load every kernel of this file now (CUDA loads modules lazily by default): a first launch
     * in the middle of a step would load it while NCCL kernels may be waiting on a peer. */
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, init_kernel)); CK(cudaFuncGetAttributes(&fa, mse_kernel));
    CK(cudaFuncGetAttributes(&fa, sgd_kernel));  CK(cudaFuncGetAttributes(&fa, adamw_kernel));
    CK(cudaFuncGetAttributes(&fa, diff_kernel));
}

static void model_data(Model &m, bool first, bool last)
{
    size_t n = (size_t)m.M * m.T * m.H;
    if (first) {
        m.inputs = (bf16 *)dev_alloc(m, n * 2);
        init_kernel<<<grid_for(n), 256, 0, m.stream>>>(m.inputs, n, 7, 0.0f);
    }
    if (last) {
        m.targets = (bf16 *)dev_alloc(m, n * 2);
        init_kernel<<<grid_for(n), 256, 0, m.stream>>>(m.targets, n, 8, 0.0f);
    }
    CK(cudaGetLastError());
}

static float grad_beta(Model &m, int b)
{
    float beta = m.fresh[b] ? 0.0f : 1.0f;
    m.fresh[b] = 0;
    return beta;
}

/* Forward of blocks [b0, b0 + nb) for one microbatch: in -> out, keeping h, g, x in the slot. */
static void forward_blocks(Model &m, int b0, int nb, const bf16 *in, bf16 *out, char *slot)
{
    const bf16 *x = in;
    for (int j = 0; j < nb; j++) {
        int b = b0 + j;
        bf16 *h = sub(slot, off_h(m, j)), *g = sub(slot, off_g(m, j));
        bf16 *y = j + 1 < nb ? sub(slot, off_x(m, nb, j + 1)) : out;
        gemm_run(m.G, G_FWD1, m.W1[b], x, g, g, 0.0f, h, m.stream);           /* g = gelu(x W1^T), h kept */
        gemm_run(m.G, G_FWD2, m.W2[b], g, x, y, 1.0f, nullptr, m.stream);    /* y = x + g W2^T */
        x = y;
    }
}

/* Full backward of the blocks (B): weight gradients accumulated, grad_in = dL/d(stage input)
 * (not computed when grad_in is NULL: the first stage's input needs none). */
static void backward_blocks(Model &m, int b0, int nb, const bf16 *in, const bf16 *grad_out, bf16 *grad_in, char *slot)
{
    const bf16 *dy = grad_out;
    for (int j = nb - 1; j >= 0; j--) {
        int b = b0 + j;
        const bf16 *x = j > 0 ? sub(slot, off_x(m, nb, j)) : in;
        bf16 *h = sub(slot, off_h(m, j)), *g = sub(slot, off_g(m, j));
        float beta = grad_beta(m, b);
        gemm_run(m.G, G_DW2, g, dy, m.dW2[b], m.dW2[b], beta, nullptr, m.stream);    /* dW2 += dy^T g */
        gemm_run(m.G, G_DH, m.W2[b], dy, m.dh, m.dh, 0.0f, h, m.stream);             /* dh = dy W2 * gelu'(h) */
        gemm_run(m.G, G_DW1, x, m.dh, m.dW1[b], m.dW1[b], beta, nullptr, m.stream);  /* dW1 += dh^T x */
        if (j == 0 && !grad_in) break;
        bf16 *dx = j > 0 ? m.work[j & 1] : grad_in;
        gemm_run(m.G, G_DX, m.W1[b], m.dh, dy, dx, 1.0f, nullptr, m.stream);         /* dx = dy + dh W1 */
        dy = dx;
    }
}

/* The input-gradient half (I): dh and dy of every block are left in the I->W buffer iw for W. */
static void backward_input_blocks(Model &m, const bf16 *grad_out, bf16 *grad_in, int b0, int nb, char *slot, bf16 *iw)
{
    const bf16 *dy = grad_out;
    for (int j = nb - 1; j >= 0; j--) {
        int b = b0 + j;
        bf16 *h = sub(slot, off_h(m, j)), *dh = iw_dh(m, iw, j);
        gemm_run(m.G, G_DH, m.W2[b], dy, dh, dh, 0.0f, h, m.stream);
        if (j == 0 && !grad_in) break;
        bf16 *dx = j > 0 ? iw_dy(m, iw, j - 1) : grad_in;
        gemm_run(m.G, G_DX, m.W1[b], dh, dy, dx, 1.0f, nullptr, m.stream);
        dy = dx;
    }
}

/* The weight-gradient half (W). */
static void backward_weight_blocks(Model &m, const bf16 *in, const bf16 *grad_out, int b0, int nb, char *slot,
                                   const bf16 *iw)
{
    for (int j = nb - 1; j >= 0; j--) {
        int b = b0 + j;
        const bf16 *x = j > 0 ? sub(slot, off_x(m, nb, j)) : in;
        const bf16 *dy = j == nb - 1 ? grad_out : iw_dy(m, (bf16 *)iw, j);
        float beta = grad_beta(m, b);
        gemm_run(m.G, G_DW2, sub(slot, off_g(m, j)), dy, m.dW2[b], m.dW2[b], beta, nullptr, m.stream);
        gemm_run(m.G, G_DW1, x, iw_dh(m, (bf16 *)iw, j), m.dW1[b], m.dW1[b], beta, nullptr, m.stream);
    }
}

static void loss_grad(Model &m, const bf16 *out, int mb, bf16 *grad_out)
{
    size_t n = (size_t)m.T * m.H;
    float inv = 1.0f / ((float)n * (float)m.M);
    mse_kernel<<<grid_for(n / 8), 256, 0, m.stream>>>(out, m.targets + (size_t)mb * n, grad_out, n / 8, 2.0f * inv, inv,
                                                      m.d_loss);
}

static void model_begin_step(Model &m)
{
    std::fill(m.fresh.begin(), m.fresh.end(), 1);
    CK(cudaMemsetAsync(m.d_loss, 0, sizeof(float), m.stream));
}

/* ============================================================================================
 * The single-GPU step: every microbatch forward through all L blocks, loss, backward
 * (exactly what the PyTorch bench's single() does).
 * ============================================================================================ */
struct Single {
    Model m;
    bf16 *out = nullptr, *dy = nullptr;
    char *slot = nullptr;
};

static void single_setup(Single &s, const Options &o, cudaStream_t stream, bool adamw, int verbose)
{
    model_setup(s.m, o, 1, nullptr, stream, 0, verbose);
    std::vector<int> all(o.layers);
    for (int b = 0; b < o.layers; b++) all[b] = b;
    model_init_blocks(s.m, all, adamw);
    model_data(s.m, true, true);
    size_t th = (size_t)s.m.T * s.m.H;
    s.out = (bf16 *)dev_alloc(s.m, th * 2);
    s.dy = (bf16 *)dev_alloc(s.m, th * 2);
    s.slot = (char *)dev_alloc(s.m, s.m.slot_bytes);
}

static void single_step(Single &s)
{
    Model &m = s.m;
    size_t th = (size_t)m.T * m.H;
    model_begin_step(m);
    for (int mb = 0; mb < m.M; mb++) {
        const bf16 *x = m.inputs + (size_t)mb * th;
        forward_blocks(m, 0, m.L, x, s.out, s.slot);
        loss_grad(m, s.out, mb, s.dy);
        backward_blocks(m, 0, m.L, x, s.dy, nullptr, s.slot);
    }
}

static void single_free(Single &s)
{
    /* the process exits right after; the driver frees device memory */
    gemms_free(s.m.G);
}

/* ============================================================================================
 * Pipeline rank: callbacks for the executor
 * ============================================================================================ */
struct Rank {
    const Options *o;
    int rank, world;
    Model m;
    pp_schedule *sched = nullptr;
    char sched_name[128] = "";      /* what --schedule search picked */
    pp_nccl *world_comm = nullptr, *pipe = nullptr;
    pp_transport tp;
    pp_executor *ex = nullptr;
    pp_timer timer;
    cudaStream_t stream;
    int chunks;
    /* The executor's boundary tensors come from one arena allocated at set-up: no cudaMalloc
     * runs while NCCL kernels are in flight (a cudaMalloc then can wait on a kernel that waits on
     * the peer, whose NCCL connection set-up waits on this rank: a cross-rank deadlock). */
    char *arena = nullptr;
    size_t arena_bytes = 0, arena_used = 0;
    std::string slot_summary;       /* this rank's activation slots by stage size, for the log */
};

static size_t cb_tensor_bytes(void *user, int boundary, const pp_mb_info *info)
{
    (void)boundary; (void)info;
    Rank *r = (Rank *)user;
    return (size_t)r->m.T * r->m.H * sizeof(bf16);
}

static int cb_input(void *user, const pp_mb_info *info, void *x)
{
    Rank *r = (Rank *)user;
    size_t th = (size_t)r->m.T * r->m.H;
    return cudaMemcpyAsync(x, r->m.inputs + (size_t)info->mb * th, th * 2, cudaMemcpyDeviceToDevice, r->stream) != cudaSuccess;
}

static void maybe_die(Rank *r, const pp_mb_info *info)
{
    /* failure test: die in the middle of a step, with transfers in flight on both sides */
    if (r->o->kill_rank == r->rank && r->m.step_no == r->o->kill_step && info->mb == r->m.M / 2) {
        fprintf(stderr, "mlp_gpu: rank %d: killing itself in step %d (failure test)\n", r->rank, r->m.step_no);
        fflush(stderr);
        kill(getpid(), SIGKILL);
    }
}

static int cb_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    Rank *r = (Rank *)user;
    Model &m = r->m;
    DBG("rank %d: F stage %d mb %d", r->rank, info->stage, info->mb);
    maybe_die(r, info);
    int k = info->chunk * m.M + info->mb;
    if (m.saved[k] >= 0) return 2;   /* a forward twice without its backward */
    m.saved[k] = slot_get(m, m.count[info->stage]);
    forward_blocks(m, m.first[info->stage], m.count[info->stage], (const bf16 *)in, (bf16 *)out, m.slots[m.saved[k]]);
    return cudaGetLastError() != cudaSuccess;
}

static int cb_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss)
{
    Rank *r = (Rank *)user;
    DBG("rank %d: loss mb %d", r->rank, info->mb);
    loss_grad(r->m, (const bf16 *)out, info->mb, (bf16 *)grad_out);
    /* The loss stays on the device (reading it here would stall the host every microbatch);
     * weight 0 tells the executor there is nothing to average. The trainer reads d_loss. */
    loss->loss = 0;
    loss->weight = 0;
    return cudaGetLastError() != cudaSuccess;
}

static int take_slot(Model &m, const pp_mb_info *info, char **slot, int release)
{
    int k = info->chunk * m.M + info->mb;
    if (m.saved[k] < 0) return 0;
    *slot = m.slots[m.saved[k]];
    if (release) {   /* reuse is stream-ordered */
        m.free_slots[m.slot_nb[m.saved[k]]].push_back(m.saved[k]);
        m.saved[k] = -1;
    }
    return 1;
}

static int cb_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    Rank *r = (Rank *)user;
    char *slot;
    DBG("rank %d: B stage %d mb %d", r->rank, info->stage, info->mb);
    if (!take_slot(r->m, info, &slot, 1)) return 3;
    backward_blocks(r->m, r->m.first[info->stage], r->m.count[info->stage], (const bf16 *)in, (const bf16 *)grad_out, (bf16 *)grad_in, slot);
    return cudaGetLastError() != cudaSuccess;
}

static int cb_backward_input(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    Rank *r = (Rank *)user;
    Model &m = r->m;
    char *slot;
    (void)in;
    int k = info->chunk * m.M + info->mb;
    if (!take_slot(m, info, &slot, 0)) return 3;
    /* the buffers were counted from this program, whose I's and W's run in its order */
    if (m.iw_of[k] >= 0 || m.iw_free.empty()) {
        fprintf(stderr, "mlp_gpu: rank %d: I of stage %d microbatch %d: %s\n", r->rank, info->stage, info->mb,
                m.iw_of[k] >= 0 ? "an I twice without its W" : "no free I->W buffer (the program's count was short)");
        return 4;
    }
    m.iw_of[k] = m.iw_free.back();   /* reuse is stream-ordered */
    m.iw_free.pop_back();
    backward_input_blocks(m, (const bf16 *)grad_out, (bf16 *)grad_in, m.first[info->stage], m.count[info->stage], slot,
                          m.iw_bufs[m.iw_of[k]]);
    return cudaGetLastError() != cudaSuccess;
}

static int cb_backward_weight(void *user, const pp_mb_info *info, const void *in, const void *grad_out)
{
    Rank *r = (Rank *)user;
    Model &m = r->m;
    char *slot;
    int k = info->chunk * m.M + info->mb;
    if (m.iw_of[k] < 0) {
        fprintf(stderr, "mlp_gpu: rank %d: W of stage %d microbatch %d before its I\n", r->rank, info->stage, info->mb);
        return 4;
    }
    if (!take_slot(m, info, &slot, 1)) return 3;
    backward_weight_blocks(m, (const bf16 *)in, (const bf16 *)grad_out, m.first[info->stage], m.count[info->stage], slot,
                           m.iw_bufs[m.iw_of[k]]);
    m.iw_free.push_back(m.iw_of[k]);
    m.iw_of[k] = -1;
    return cudaGetLastError() != cudaSuccess;
}

/* How many actions of kind op the schedule holds (what a split will rename the run by). */
static int count_op(const pp_schedule *s, int op)
{
    int n = 0;
    for (int r = 0; r < s->pp; r++)
        for (int i = 0; i < s->length[r]; i++) n += s->actions[r][i].op == op;
    return n;
}

static void *cb_alloc(void *user, size_t bytes)
{
    Rank *r = (Rank *)user;
    size_t need = (bytes + 255) & ~(size_t)255;
    if (r->arena && r->arena_used + need <= r->arena_bytes) {
        void *p = r->arena + r->arena_used;
        r->arena_used += need;
        return p;
    }
    DBG("rank %d: arena exhausted, cudaMalloc %zu bytes mid-run", r->rank, bytes);
    return dev_alloc(r->m, bytes);
}
static void cb_free(void *user, void *ptr, size_t bytes)
{
    Rank *r = (Rank *)user;
    if (r->arena && (char *)ptr >= r->arena && (char *)ptr < r->arena + r->arena_bytes) return;   /* freed with the arena */
    cudaStreamSynchronize(r->stream);
    cudaFree(ptr);
    r->m.bytes -= bytes;
}

/* ============================================================================================
 * Driving a rank
 * ============================================================================================ */
struct Shared {                 /* --threads: what the rank threads share */
    const Options *o;
    pp_nccl_id id;
    int world;
    int status[64];
};

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define PPCK(call) do { pp_error e_; pp_status s_ = (call); if (s_ != PP_OK) { \
    fprintf(stderr, "mlp_gpu: rank %d: %s: %s\n", rank, pp_status_name(s_), e_.message); return fail(s_); } } while (0)

/* --tune-in-step N: tuning times each candidate alone, on random operands, the same GEMM again
 * and again; in a step the kernels run on the model's data between other GEMMs, under the power
 * cap, and near-ties there come out 2-3% apart in either order (session 11). So: N steps in which
 * each kind's calls take its candidates in turn, each round of them in a new random order (128
 * calls a step: 16 per candidate of 8; the other kinds' calls beside a candidate vary), each
 * call timed with events; the first step is a warm-up; each kind keeps the candidate of the
 * lowest median, and --gemm-picks (if given and not read) is written with those. */
static void tune_in_steps(Single &s, int steps, bool print)
{
    Gemms &G = s.m.G;
    const bool timing = G.timing;
    std::vector<float> t[G_COUNT][16];
    G.timing = false;
    G.rotating = true;
    for (int i = 0; i < steps + 1; i++) {
        G.ev_used = 0;
        single_step(s);
        CK(cudaStreamSynchronize(s.m.stream));
        if (i == 0) continue;
        for (size_t e = 0; e + 1 < G.ev_used; e += 2) {
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, G.ev[e], G.ev[e + 1]));
            const int id = G.ev_id[e / 2] / 16, c = G.ev_id[e / 2] % 16;
            t[id][c].push_back(ms);
        }
    }
    G.rotating = false;
    G.timing = timing;
    G.ev_used = 0;
    std::string line = "in-step tuning (" + std::to_string(steps) + " steps), median ms per call:";
    for (int id = 0; id < G_COUNT; id++) {
        int best = -1;
        float best_ms = 0;
        char part[64];
        line += std::string(" ") + gemm_names[id] + ":";
        for (size_t c = 0; c < G.cand[id].size(); c++) {
            if (t[id][c].empty()) continue;
            const float ms = (float)median(std::vector<double>(t[id][c].begin(), t[id][c].end()));
            snprintf(part, sizeof part, " %d %.3f%s", G.cand_index[id][c], ms, G.cand_index[id][c] == G.picks[id] ? "*" : "");
            line += part;
            if (best < 0 || ms < best_ms) { best = (int)c; best_ms = ms; }
        }
        if (best >= 0) { G.g[id].algo = G.cand[id][best]; G.picks[id] = G.cand_index[id][best]; }
        snprintf(part, sizeof part, " -> %d;", G.picks[id]);
        line += part;
    }
    if (print) { printf("%s\n  (* the isolated tuning's pick)\n", line.c_str()); fflush(stdout); }
    if (G.picks_pending) picks_write(G.picks_pending, G.picks_header, G, G.picks);
    G.picks_pending = nullptr;
}

/* The single-GPU baseline: set up, time, report. Returns the median step time (s). */
static double run_single(const Options &o, int device, bool print, Single *keep)
{
    CK(cudaSetDevice(device));
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Single local, &s = keep ? *keep : local;
    single_setup(s, o, stream, false, print && !o.quiet);
    if (!print) s.m.G.timing = false;   /* --gemm-times reports the runs it prints, not --check's reference */
    if (o.tune_in_step > 0 && !s.m.G.picked_from_file) tune_in_steps(s, o.tune_in_step, print && !o.quiet);
    std::vector<double> times;
    for (int i = 0; i < o.warmup + o.steps; i++) {
        CK(cudaStreamSynchronize(stream));
        double t0 = now_s();
        s.m.G.ev_used = 0;
        single_step(s);
        CK(cudaStreamSynchronize(stream));
        if (i >= o.warmup) times.push_back(now_s() - t0);
    }
    CK(cudaGetLastError());
    double med = median(times), mn = *std::min_element(times.begin(), times.end());
    if (s.m.G.timing && print) gemm_times_report(s.m.G, "single GPU, last step", times.back() * 1e3);
    float loss = 0;
    CK(cudaMemcpy(&loss, s.m.d_loss, sizeof loss, cudaMemcpyDeviceToHost));
    double flop = 6.0 * 2.0 * o.tokens * (double)o.hidden * 4.0 * o.hidden * o.layers * o.mb;
    if (print) {
        size_t free_b, total_b;
        CK(cudaMemGetInfo(&free_b, &total_b));
        printf("single-gpu   step %8.1f ms (min %8.1f)  %6.1f TFLOP/s  loss %.5f  peak %.1f GiB allocated\n",
               med * 1e3, mn * 1e3, flop / med / 1e12, loss, s.m.peak_bytes / 1073741824.0);
        fflush(stdout);
    }
    if (!keep) { single_free(s); CK(cudaStreamDestroy(stream)); }
    return med;
}

/* Gradient check: the same step on one GPU, whole model, and the relative error of every
 * weight gradient this rank holds. Returns the worst relative error. */
static double check_gradients(Rank &R, double *ref_step_s)
{
    const Options &o = *R.o;
    Single ref;
    Options quiet = o;
    quiet.warmup = 1; quiet.steps = 3;
    *ref_step_s = run_single(quiet, pp_nccl_device(R.pipe), false, &ref);
    CK(cudaSetDevice(pp_nccl_device(R.pipe)));
    double *d;
    CK(cudaMalloc(&d, 2 * sizeof(double)));
    double worst = 0;
    size_t wn = (size_t)R.m.F * R.m.H;
    for (int b = 0; b < o.layers; b++) {
        if (!R.m.W1[b]) continue;
        for (int w = 0; w < 2; w++) {
            double h[2];
            CK(cudaMemset(d, 0, 2 * sizeof(double)));
            diff_kernel<<<grid_for(wn), 256>>>(w ? R.m.dW2[b] : R.m.dW1[b], w ? ref.m.dW2[b] : ref.m.dW1[b], wn, d);
            CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
            double rel = h[1] > 0 ? sqrt(h[0] / h[1]) : (h[0] > 0 ? INFINITY : 0);
            if (!(rel <= worst)) worst = rel;   /* NaN propagates */
        }
    }
    CK(cudaFree(d));
    single_free(ref);
    return worst;
}

/* --place-by-speed: the mean time of the model's fwd2 GEMM (H x T x 4H, bf16) on this GPU over
 * 1.5 s, after 2 s of the same work, so that the GPU runs at the clock its power cap allows it in
 * a step rather than a cold one's (with 1 s + 1 s, one of five measurements on 2 H200s all but
 * missed a 1.1% difference). Every rank runs it at once (the caller's barrier). */
static double measure_gpu_ms(const Options &o, int device)
{
    const int H = o.hidden, T = o.tokens, F = 4 * H, batch = 20;
    const double warm_s = 2.0, measure_s = 1.5;
    bf16 *A, *B, *C;
    cublasHandle_t h;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    float alpha = 1, beta = 0, ms = 0;
    double total_ms = 0, t0;
    long gemms = 0;
    CK(cudaSetDevice(device));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&A, (size_t)H * F * 2)); CK(cudaMalloc(&B, (size_t)F * T * 2)); CK(cudaMalloc(&C, (size_t)H * T * 2));
    init_kernel<<<grid_for((size_t)H * F), 256, 0, s>>>(A, (size_t)H * F, 11, 0.02f);
    init_kernel<<<grid_for((size_t)F * T), 256, 0, s>>>(B, (size_t)F * T, 12, 0.02f);
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "mlp_gpu: cublasCreate failed\n"); exit(1); }
    cublasSetStream(h, s);
    auto run = [&](int n) {
        for (int i = 0; i < n; i++)
            if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, H, T, F, &alpha, A, CUDA_R_16BF, H, B, CUDA_R_16BF, F, &beta,
                             C, CUDA_R_16BF, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "mlp_gpu: cublasGemmEx failed\n");
                exit(1);
            }
    };
    t0 = now_s();
    while (now_s() - t0 < warm_s) { run(batch); CK(cudaStreamSynchronize(s)); }
    t0 = now_s();
    while (now_s() - t0 < measure_s) {
        CK(cudaEventRecord(e0, s));
        run(batch);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        total_ms += ms;
        gemms += batch;
    }
    cublasDestroy(h);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    CK(cudaFree(A)); CK(cudaFree(B)); CK(cudaFree(C));
    CK(cudaStreamDestroy(s));
    return total_ms / (double)gemms;
}

static int run_rank(const Options &o, Shared *sh, int thread_rank)
{
    Rank R;
    R.o = &o;
    int rank = sh ? thread_rank : -1, world = 0;
    pp_error e0;
    /* After a failure the process only reports and exits: freeing the executor would wait for
     * streams that may still hold work of the aborted communicator. */
    auto fail = [&](pp_status s) -> int { return s == PP_ETIMEOUT ? 3 : 1; };
    double t_start = now_s();

    /* 1. set-up: communicators. Rank, world and device come from the launcher's environment
     *    (or, with --threads, from the thread). */
    pp_nccl_config nc;
    memset(&nc, 0, sizeof nc);
    if (sh) { nc.world = sh->world; nc.rank = thread_rank; nc.device = thread_rank; nc.bootstrap = PP_NCCL_BOOTSTRAP_ID; nc.id = &sh->id; }
    nc.timeout_s = o.timeout;
    nc.max_ctas = o.max_ctas;
    nc.cta_policy = o.cta_policy;
    if (pp_nccl_init(&nc, &R.world_comm, &e0) != PP_OK) {
        fprintf(stderr, "mlp_gpu: rank %d: %s: %s\n", rank, pp_status_name(e0.status), e0.message);
        return e0.status == PP_ETIMEOUT ? 3 : 1;
    }
    rank = pp_nccl_rank(R.world_comm);
    world = pp_nccl_world(R.world_comm);
    R.rank = rank; R.world = world;
    bool lead = rank == 0;
    int pp = o.pp ? o.pp : world;
    if (pp != world) {
        fprintf(stderr, "mlp_gpu: --pp=%d: this example runs one pipeline, so pp must equal the world size (%d)\n", pp, world);
        return 2;
    }
    pp_grid grid;
    pp_grid_config gc;
    memset(&gc, 0, sizeof gc);
    gc.world = world; gc.pp = pp;
    PPCK(pp_grid_init(&gc, &grid, &e_));
    PPCK(pp_nccl_split(R.world_comm, &grid, PP_GROUP_PP, &R.pipe, &e_));   /* the pipeline's communicator */
    if (lead && !o.quiet) printf("%s\n", pp_nccl_describe(R.pipe));

    /* the blocks of each stage: --layout, parsed by pp_layers_build (Megatron's rules), or L / S */
    pp_layers *lay = nullptr;
    if (o.layout) {
        pp_layers_config lc;
        memset(&lc, 0, sizeof lc);
        lc.num_layers = o.layers;
        lc.pp = pp;
        lc.layout = o.layout;
        pp_error le;
        if (pp_layers_build(&lc, &lay, &le) != PP_OK) {
            if (lead) fprintf(stderr, "mlp_gpu: --layout=%s: %s\n", o.layout, le.message);
            return 2;
        }
        for (int st = 0; st < lay->num_stages; st++)
            if (lay->count[st] < 1) {
                if (lead) fprintf(stderr, "mlp_gpu: --layout=%s: stage %d holds no block (every stage needs one)\n",
                                  o.layout, st);
                return 2;
            }
    }

    /* the schedule: build the compute order (or let pp_search pick it), add the transfers, prove it */
    pp_schedule_config sc;
    memset(&sc, 0, sizeof sc);
    pp_search_result *found = nullptr;
    if (o.schedule_csv) {
        FILE *f = fopen(o.schedule_csv, "rb");
        std::vector<char> text;
        if (f) {
            char buf[65536];
            size_t n;
            while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.insert(text.end(), buf, buf + n);
            if (ferror(f)) { fclose(f); f = nullptr; }
            else fclose(f);
        }
        if (!f) {
            if (lead) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: %s\n", o.schedule_csv, strerror(errno));
            return 2;
        }
        pp_error csv_err;
        text.push_back('\0');   /* never an empty buffer; the length excludes it */
        if (pp_schedule_read_csv(text.data(), text.size() - 1, &R.sched, &csv_err) != PP_OK) {
            if (lead) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: %s\n", o.schedule_csv, csv_err.message);
            return 2;
        }
        if (R.sched->placement == PP_PLACEMENT_DUAL) {
            if (lead) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: a DualPipe schedule (two copies of every stage, their "
                              "gradients summed): not supported by this example (it keeps one copy of each stage's "
                              "weights); use dualpipev, or examples/mlp_threads.c on CPU\n", o.schedule_csv);
            return 2;
        }
        if (R.sched->pp != pp || R.sched->mb != o.mb || (o.vpp && R.sched->vpp != o.vpp)) {
            if (lead) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: %d ranks, %d microbatches, %d chunks per rank; the run "
                              "has pp=%d and --mb=%d%s%s\n", o.schedule_csv, R.sched->pp, R.sched->mb, R.sched->vpp,
                              pp, o.mb, o.vpp ? " and --vpp=" : "", o.vpp ? std::to_string(o.vpp).c_str() : "");
            return 2;
        }
        pp_schedule_strip_comm(R.sched);
        if (pp_schedule_validate(R.sched, &csv_err) != PP_OK) {   /* its compute order, before any set-up */
            if (lead) fprintf(stderr, "mlp_gpu: --schedule-csv=%s: %s\n", o.schedule_csv, csv_err.message);
            return 2;
        }
        PPCK(pp_schedule_lower(R.sched, &e_));
        const char *base = strrchr(o.schedule_csv, '/');
        snprintf(R.sched_name, sizeof R.sched_name, "from %.100s", base ? base + 1 : o.schedule_csv);
    } else if (!strcmp(o.schedule, "search")) {
        /* costs in units of one block's forward: F = I = W per block (each is two GEMMs of the
         * same size); a transfer of T x H bf16 at ~300 GB/s against 16 T H^2 flops at ~700
         * TFLOP/s is about 290 / H of that, plus ~20 us of latency */
        if (lay && o.vpp && o.vpp != lay->vpp) {
            if (lead) fprintf(stderr, "mlp_gpu: --vpp=%d: the layout has %d stages, so vpp = %d (or leave --vpp out)\n",
                              o.vpp, lay->num_stages, lay->vpp);
            return 2;
        }
        bool choose = o.search_layout;   /* pp_search splits the blocks too: any vpp unless --vpp */
        int vpp = lay ? lay->vpp : (o.vpp ? o.vpp : (choose ? 0 : 2)), S0 = pp * (vpp ? vpp : 1);
        if (!lay && !choose && o.layers % S0) {
            if (lead) fprintf(stderr, "mlp_gpu: --layers=%d: must be a multiple of pp*vpp = %d stages\n", o.layers, S0);
            return 2;
        }
        std::vector<double> fs(S0), bs(S0);
        for (int st = 0; st < S0; st++) { fs[st] = lay ? lay->count[st] : o.layers / S0; bs[st] = 2 * fs[st]; }
        pp_search_config q;
        memset(&q, 0, sizeof q);
        q.pp = pp; q.mb = o.mb; q.vpp = vpp; q.max_memory = o.max_memory;
        std::vector<pp_layer_costs> per_block((size_t)o.layers);
        if (choose) {
            /* per block, in units of its forward (2 GEMMs): I = W = 1 too, but block 0 skips its
             * input gradient (one GEMM of I's two) */
            for (int b = 0; b < o.layers; b++) {
                per_block[b].f = 1; per_block[b].i = b == 0 ? 0.5 : 1; per_block[b].w = 1; per_block[b].memory = 1;
            }
            q.layers = o.layers;
            q.layer_costs = per_block.data();
            q.costs.f = q.costs.i = q.costs.w = 1;
        } else {
            q.costs.f = fs[0];
            q.costs.f_stage = fs.data(); q.costs.i_stage = fs.data(); q.costs.w_stage = fs.data(); q.costs.b_stage = bs.data();
            q.costs.memory_stage = fs.data();   /* a stage's activations grow with its blocks too */
        }
        if (o.search_kind && !strcmp(o.search_kind, "greedy")) q.kind = PP_CUSTOM;
        else if (o.search_kind) PPCK(pp_schedule_kind_parse(o.search_kind, &q.kind, &e_));
        q.costs.p2p_latency = 290.0 / o.hidden + 0.01;
        q.split_backward = o.split_backward;
        PPCK(pp_search(&q, &found, &e_));
        if (!found->best) {
            double leanest = 0;
            for (int k = 0; k < found->count; k++)
                if (k == 0 || found->entries[k].peak_memory < leanest) leanest = found->entries[k].peak_memory;
            if (lead) fprintf(stderr, "mlp_gpu: --schedule=search: no schedule fits --max-memory=%g (the leanest "
                              "needs %.2f)\n", o.max_memory, leanest);
            pp_search_result_free(found);
            return 2;
        }
        const pp_search_entry *won = &found->entries[0];
        std::vector<char> text;
        if (won->stage_layers) {   /* the split it chose: the model's stages from here on */
            int stages = pp * won->vpp;
            text.resize((size_t)pp_search_layout_text(won->stage_layers, stages, nullptr, 0) + 1);
            pp_search_layout_text(won->stage_layers, stages, text.data(), text.size());
            pp_layers_config lc;
            memset(&lc, 0, sizeof lc);
            lc.num_layers = o.layers;
            lc.pp = pp;
            lc.layout = text.data();
            PPCK(pp_layers_build(&lc, &lay, &e_));
        }
        if (lead) {   /* even with --quiet: what ran is part of every result */
            double work = 0;   /* F + I + W of every stage and microbatch, over pp ranks */
            if (choose) work = (3.0 * o.layers - 0.5) * o.mb;
            else for (int st = 0; st < S0; st++) work += 3.0 * fs[st] * o.mb;
            printf("search: %d schedules simulated", found->count);
            if (choose) printf(", each on %ld splits of the %d blocks", found->layouts, o.layers);
            printf("; the fastest: %s (simulated efficiency %.2f%%, memory %.2f)\n", won->name,
                   100.0 * work / pp / won->makespan, won->peak_memory);
            if (won->stage_layers) printf("search: its layout '%s'\n", text.data());
        }
        R.sched = found->best;
        found->best = nullptr;   /* ours now: freed with the rank */
        snprintf(R.sched_name, sizeof R.sched_name, "%s", found->entries[0].name);
        pp_search_result_free(found);
    } else {
        PPCK(pp_schedule_kind_parse(o.schedule, &sc.kind, &e_));
        if (sc.kind == PP_DUALPIPE) {
            /* two copies of every stage and their gradients summed: examples/mlp_threads.c shows it on CPU */
            if (lead) fprintf(stderr, "mlp_gpu: --schedule=dualpipe: not supported by this example (it keeps one copy "
                              "of each stage's weights); use dualpipev, or examples/mlp_threads.c on CPU\n");
            return 2;
        }
        sc.pp = pp; sc.vpp = lay && !o.vpp ? lay->vpp : o.vpp; sc.mb = o.mb; sc.group = o.group;
        PPCK(pp_schedule_build(&sc, &R.sched, &e_));
        PPCK(pp_schedule_lower(R.sched, &e_));
        if (o.group)
            snprintf(R.sched_name, sizeof R.sched_name, "%s group=%d", pp_schedule_kind_name(R.sched->kind), o.group);
    }
    /* this example gives the executor no forward_backward callback, so an FB runs as F then B;
     * lowered split, the F's output leaves before the B runs (2% off DualPipeV's step on H200) */
    if (!o.keep_overlaps) {
        int fbs = count_op(R.sched, PP_OP_FB);
        PPCK(pp_schedule_split_overlaps(R.sched, &e_));
        if (fbs) {   /* what ran: a searched one's simulated time was of the FBs lowered whole */
            char named[sizeof R.sched_name];
            snprintf(named, sizeof named, "%s", R.sched_name[0] ? R.sched_name : pp_schedule_kind_name(R.sched->kind));
            snprintf(R.sched_name, sizeof R.sched_name, "%.90s, each FB as F then B", named);
        }
    }
    if (o.split_backward) {
        int bs = count_op(R.sched, PP_OP_B);
        /* a searched one is split already, unless it kept overlapped FBs (split above into F and a
         * whole B): those B's are split here, and the name already says so */
        PPCK(pp_schedule_split_backward(R.sched, &e_));
        if (bs && !strstr(R.sched_name, "B as I then W")) {
            char named[sizeof R.sched_name];
            snprintf(named, sizeof named, "%s", R.sched_name[0] ? R.sched_name : pp_schedule_kind_name(R.sched->kind));
            snprintf(R.sched_name, sizeof R.sched_name, "%.90s, B as I then W", named);
        }
    }
    PPCK(pp_schedule_validate(R.sched, &e_));
    int S = R.sched->num_stages, vpp = R.sched->vpp;
    if (lay && lay->num_stages != S) {
        if (lead) fprintf(stderr, "mlp_gpu: --layout=%s: %d stages, but the schedule has pp*vpp = %d\n", o.layout,
                          lay->num_stages, S);
        return 2;
    }
    if (!lay && o.layers % S) {
        fprintf(stderr, "mlp_gpu: --layers=%d: must be a multiple of pp*vpp = %d stages\n", o.layers, S);
        return 2;
    }
    int split = count_op(R.sched, PP_OP_I) > 0, maxlen = 0;
    for (int r = 0; r < pp; r++) maxlen = std::max(maxlen, R.sched->length[r]);

    /* placement by speed: the rank with the most GEMMs on the fastest GPU. A block costs 6 GEMMs a
     * microbatch (2 forward, 4 backward); block 0 skips its input gradient, one fewer. */
    bool one_host = true;
    if (o.place_by_speed) {
        /* one host only: renumbered across nodes, pipeline neighbours could land on other hosts */
        std::vector<float> host(pp, 0.0f);
        char name[256] = "";
        unsigned hash = 2166136261u;   /* FNV-1a, 24 bits: exact in a float */
        gethostname(name, sizeof name - 1);
        for (const char *c = name; *c; c++) hash = (hash ^ (unsigned char)*c) * 16777619u;
        host[pp_nccl_rank(R.pipe)] = (float)(hash & 0xffffffu);
        PPCK(pp_nccl_all_reduce_host(R.pipe, host.data(), pp, o.timeout, &e_));
        for (int g = 1; g < pp; g++) one_host = one_host && host[g] == host[0];
        if (!one_host && lead)
            printf("placement by speed: the ranks are on more than one host; kept as launched (renumbered, "
                   "pipeline neighbours could land on other hosts)\n");
    }
    if (o.place_by_speed && one_host) {
        std::vector<double> load(pp, 0.0), gpu(pp, 0.0);
        std::vector<float> shared(pp, 0.0f);
        std::vector<int> rank_of(pp);
        double gain = 0;
        for (int st = 0; st < S; st++)
            load[pp_stage_rank(R.sched, st)] += 6.0 * (lay ? lay->count[st] : o.layers / S) - (st == 0 ? 1 : 0);
        if (o.gpu_ms) {
            const char *p = o.gpu_ms;
            for (int g = 0; g < pp; g++) {
                char *end;
                double x = strtod(p, &end);
                if (end == p || !(x > 0) || (g + 1 < pp ? *end != ',' : *end != '\0')) {
                    if (lead) fprintf(stderr, "mlp_gpu: --gpu-ms=%s: expected %d positive numbers, comma-separated\n", o.gpu_ms, pp);
                    return 2;
                }
                shared[g] = (float)x;
                p = end + 1;
            }
        } else {
            PPCK(pp_nccl_barrier(R.pipe, o.timeout, &e_));
            shared[pp_nccl_rank(R.pipe)] = (float)measure_gpu_ms(o, pp_nccl_device(R.pipe));
            PPCK(pp_nccl_all_reduce_host(R.pipe, shared.data(), pp, o.timeout, &e_));
        }
        for (int g = 0; g < pp; g++) gpu[g] = shared[g];
        /* any measured gain moves the ranks: a wrong call on noise costs what the GPUs differ by, which
         * is then little */
        PPCK(pp_place_by_speed(pp, load.data(), gpu.data(), 0.0005, rank_of.data(), &gain, &e_));
        if (lead) {   /* even with --quiet, as the search's choice */
            printf("placement by speed: fwd2 GEMM");
            for (int g = 0; g < pp; g++) printf(" %.4f", gpu[g]);
            printf(" ms by process; GEMMs per rank");
            for (int r = 0; r < pp; r++) printf(" %.0f", load[r] * o.mb);
            printf(";");
            for (int g = 0; g < pp; g++) printf(" process %d -> rank %d%s", g, rank_of[g], g + 1 < pp ? "," : "");
            printf(" (bottleneck %.2f%% lower)\n", 100 * gain);
        }
        if (gain > 0) {   /* the same decision on every rank: the same inputs */
            pp_nccl *renumbered = nullptr;
            PPCK(pp_nccl_reorder(R.pipe, rank_of[rank], &renumbered, &e_));
            pp_nccl_free(R.pipe);
            R.pipe = renumbered;
            if (rank_of[rank] != rank)   /* this process's messages name its pipeline rank from here on */
                fprintf(stderr, "mlp_gpu: process %d runs pipeline rank %d (placement by speed)\n", rank, rank_of[rank]);
            rank = rank_of[rank];
            R.rank = rank;   /* `lead`, the process that prints, stays world rank 0 */
        }
    }

    /* this rank's blocks: stage s holds blocks [first[s], first[s] + count[s]), placed by the schedule */
    CK(cudaSetDevice(pp_nccl_device(R.pipe)));
    CK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, pp_nccl_device(R.pipe)));
    model_setup(R.m, o, S, lay ? lay->count : nullptr, R.stream, o.sm_margin ? sms - o.sm_margin : 0,
                lead && !o.quiet);
    pp_layers_free(lay);   /* the stages' sizes now live in R.m.first / count */
    lay = nullptr;
    std::vector<int> blocks;
    bool first = false, last = false;
    for (int c = 0; c < vpp; c++) {
        int s = pp_rank_chunk_stage(R.sched, rank, c);
        first |= s == 0;
        last |= s == S - 1;
        for (int j = 0; j < R.m.count[s]; j++) blocks.push_back(R.m.first[s] + j);
    }
    bool adamw = !strcmp(o.optimizer, "adamw") && o.train > 0;
    model_init_blocks(R.m, blocks, adamw);
    model_data(R.m, first, last);
    R.m.saved.assign((size_t)vpp * o.mb, -1);
    R.m.iw_of.assign((size_t)vpp * o.mb, -1);

    /* the executor over the NCCL transport, timing every action with CUDA events */
    PPCK(pp_nccl_transport(R.pipe, R.stream, &R.tp, &e_));
    if (o.copy_engine) {
        /* each transfer is one copy straight between the two buffers (the arena is cudaMalloc'ed,
         * so CUDA IPC shares it); the ring only carries what cannot be shared: slots of one
         * boundary tensor, at most 16 MiB (a 64 MiB tensor goes as 4 pieces, so the receiver's
         * copy out of the ring overlaps the next piece's arrival); 8 of them */
        size_t tensor = (size_t)o.tokens * o.hidden * sizeof(bf16);
        size_t slot = std::min<size_t>((size_t)16 << 20, (tensor + 4095) / 4096 * 4096);
        int peers = 0;
        PPCK(pp_nccl_transport_copy_engine(&R.tp, slot, 8, &peers, &e_));
        if (lead && !o.quiet) printf("copy engines: %d peer(s), 8 slots of %.2f MiB each\n", peers, slot / 1048576.0);
    }
    if (o.gate) {
        int gated = 0;
        PPCK(pp_nccl_transport_gate(&R.tp, &gated, &e_));
        if (lead && !o.quiet) printf("arrival gate: %d peer(s) gated\n", gated);
    }
    PPCK(pp_nccl_event_timer(R.stream, 3 * maxlen + 3, &R.timer, &e_));
    pp_executor_config ec;
    memset(&ec, 0, sizeof ec);
    ec.schedule = R.sched;
    ec.transport = R.tp;
    ec.callbacks.user = &R;
    ec.callbacks.tensor_bytes = cb_tensor_bytes;
    ec.callbacks.input = cb_input;
    ec.callbacks.forward = cb_forward;
    ec.callbacks.loss = cb_loss;
    ec.callbacks.backward = cb_backward;
    ec.callbacks.backward_input = cb_backward_input;
    ec.callbacks.backward_weight = cb_backward_weight;
    ec.allocator.user = &R;
    ec.allocator.alloc = cb_alloc;
    ec.allocator.free = cb_free;
    ec.timeout_s = o.timeout;
    ec.record_timeline = 1;
    ec.timer = R.timer;
    PPCK(pp_executor_create(&ec, &R.ex, &e_));
    {
        /* all memory of a step now, before any transfer: the executor's planned peak of boundary
         * tensors, and this rank's peak of live (stage, microbatch) activations, from its program */
        pp_executor_stats stats;
        pp_executor_get_stats(R.ex, &stats);
        size_t tb = ((size_t)R.m.T * R.m.H * sizeof(bf16) + 255) & ~(size_t)255;
        R.arena_bytes = tb * (size_t)(stats.planned_slots > 0 ? stats.planned_slots : 1);
        R.arena = (char *)dev_alloc(R.m, R.arena_bytes);
        /* per stage size: slots of one size serve only stages of that size */
        std::vector<int> peak(R.m.nb + 1, 0), unused(R.m.nb + 1, 0);
        int awaiting = 0;
        PPCK(pp_schedule_rank_peaks(R.sched, rank, R.m.count.data(), R.m.nb + 1, peak.data(), unused.data(), &e_));
        PPCK(pp_schedule_rank_peaks(R.sched, rank, nullptr, 1, nullptr, &awaiting, &e_));
        for (int c = 0; c < vpp; c++) R.m.iw_nb = std::max(R.m.iw_nb, R.m.count[pp_rank_chunk_stage(R.sched, rank, c)]);
        for (int i = 0; i < awaiting; i++) {
            R.m.iw_bufs.push_back((bf16 *)dev_alloc(R.m, iw_size(R.m)));
            R.m.iw_free.push_back(i);
        }
        int nslots = 0;
        for (int c = 1; c <= R.m.nb; c++) {
            std::vector<int> held;
            for (int i = 0; i < peak[c]; i++) held.push_back(slot_get(R.m, c));
            for (int i : held) R.m.free_slots[c].push_back(i);
            nslots += peak[c];
            if (peak[c]) R.slot_summary += (R.slot_summary.empty() ? "" : ", ") + std::to_string(peak[c]) + " of " +
                                           std::to_string(c) + " block" + (c > 1 ? "s" : "");
        }
        DBG("rank %d: %d boundary tensors in the arena, %d activation slots", rank, stats.planned_slots, nslots);
    }
    CK(cudaStreamSynchronize(R.stream));
    if (lead && !o.quiet) {
        std::string per;
        for (int st = 0; st < S; st++) per += (st ? "," : "") + std::to_string(R.m.count[st]);
        printf("schedule %s pp %d vpp %d mb %d: %d stages of %s blocks, H %d, %d tokens per microbatch; set-up %.1f s\n",
               R.sched_name[0] ? R.sched_name : pp_schedule_kind_name(R.sched->kind), pp, vpp, o.mb, S, per.c_str(), o.hidden, o.tokens, now_s() - t_start);
        printf("rank %d activation slots (one per live stage and microbatch, by stage size): %s\n", R.rank,
               R.slot_summary.c_str());
        fflush(stdout);
    }
    if (!o.quiet && !R.m.iw_bufs.empty()) {   /* every rank: their programs hold different numbers */
        char line[200];
        snprintf(line, sizeof line, "rank %d I->W buffers (each I's dh and dy until its W): %zu of %d block%s, for the "
                 "most I's awaiting their W at once", R.rank, R.m.iw_bufs.size(), R.m.iw_nb, R.m.iw_nb > 1 ? "s" : "");
        printf("%s\n", line);
        fflush(stdout);
    }

    /* 3. timing: each step between a device sync and a barrier on both ends, as the PyTorch bench */
    std::vector<double> times;
    std::vector<pp_nccl_group_time> groups(4096);
    int ngroups = 0;
    double step_t0 = 0, last_t0 = 0;
    for (int i = 0; i < o.warmup + o.steps; i++) {
        pp_step_result res;
        bool final_step = i == o.warmup + o.steps - 1;
        PPCK(pp_nccl_sync(R.pipe, R.stream, 0, &e_));
        PPCK(pp_nccl_barrier(R.pipe, 0, &e_));
        if (final_step) PPCK(pp_nccl_transport_record(&R.tp, 1, &e_));
        step_t0 = now_s();
        cudaEvent_t base;
        CK(cudaEventCreate(&base));
        CK(cudaEventRecord(base, R.stream));
        model_begin_step(R.m);
        R.m.step_no = i;
        R.m.G.ev_used = 0;
        {
            pp_error e_;
            pp_status s_ = pp_run_step(R.ex, NULL, &res, &e_);
            if (s_ != PP_OK) {
                fprintf(stderr, "mlp_gpu: rank %d: %s after %.2f s in step %d: %s\n", rank, pp_status_name(s_),
                        now_s() - step_t0, i, e_.message);
                return fail(s_);
            }
        }
        PPCK(pp_nccl_sync(R.pipe, R.stream, 0, &e_));
        PPCK(pp_nccl_barrier(R.pipe, 0, &e_));
        if (i >= o.warmup) times.push_back(now_s() - step_t0);
        if (final_step) {
            PPCK(pp_nccl_transport_times(&R.tp, base, groups.data(), (int)groups.size(), &ngroups, &e_));
            PPCK(pp_nccl_transport_record(&R.tp, 0, &e_));
            last_t0 = step_t0;
        }
        CK(cudaEventDestroy(base));
    }
    double step = median(times), step_min = *std::min_element(times.begin(), times.end());
    float h_loss = 0;
    CK(cudaMemcpy(&h_loss, R.m.d_loss, sizeof h_loss, cudaMemcpyDeviceToHost));
    float lossv = last ? h_loss : 0;
    PPCK(pp_nccl_all_reduce_host(R.pipe, &lossv, 1, 0, &e_));

    /* the measured timeline of the last step: per-stage compute times -> the simulator's
     * prediction with free communication; what the measured step exceeds it by is exposed
     * transfer and launch overhead. */
    pp_timeline tl;
    PPCK(pp_executor_timeline(R.ex, &tl, &e_));
    std::vector<float> stage_cost(4 * S, 0.0f);     /* F, B, I, W per stage: summed durations */
    std::vector<float> stage_n(4 * S, 0.0f);
    double busy = 0, first_ready = 1e300, last_end = -1e300;
    for (int i = 0; i < tl.length; i++) {
        int op = tl.actions[i].op;
        if (op > PP_OP_FB || tl.ready[i] < 0) continue;
        double d = tl.end[i] - tl.ready[i];
        busy += d;
        first_ready = std::min(first_ready, tl.ready[i]);
        last_end = std::max(last_end, tl.end[i]);
        if (op == PP_OP_FB) continue;   /* an overlapped F&B: the stage costs come from plain F and B */
        int col = op == PP_OP_F ? 0 : op == PP_OP_B ? 1 : op == PP_OP_I ? 2 : 3;
        stage_cost[4 * tl.actions[i].stage + col] += (float)d;
        stage_n[4 * tl.actions[i].stage + col] += 1;
    }
    std::vector<float> red(8 * S + 4, 0.0f);
    for (int k = 0; k < 4 * S; k++) { red[k] = stage_cost[k]; red[4 * S + k] = stage_n[k]; }
    red[8 * S] = (float)(last_end - last_t0);          /* this rank's compute span end, from the step start */
    red[8 * S + 1] = (float)busy;
    red[8 * S + 2] = (float)(R.m.peak_bytes / 1073741824.0);
    {
        size_t free_b, total_b;
        CK(cudaMemGetInfo(&free_b, &total_b));
        red[8 * S + 3] = (float)((total_b - free_b) / 1073741824.0);
    }
    std::vector<float> mine = red;
    if (R.m.G.timing) {
        char who[64];
        snprintf(who, sizeof who, "rank %d, last step", rank);
        gemm_times_report(R.m.G, who, busy * 1e3);
    }
    PPCK(pp_nccl_all_reduce_host(R.pipe, red.data(), (int)red.size(), 0, &e_));
    std::vector<float> busy_of(world, 0.0f);      /* each rank's compute time: shows a slow rank */
    busy_of[rank] = (float)busy;
    PPCK(pp_nccl_all_reduce_host(R.pipe, busy_of.data(), world, 0, &e_));
    std::vector<float> mem_of(2 * (size_t)world, 0.0f);   /* the sum reduces: each rank fills its own pair */
    mem_of[2 * rank] = mine[8 * S + 2]; mem_of[2 * rank + 1] = mine[8 * S + 3];   /* red is summed by now */
    PPCK(pp_nccl_all_reduce_host(R.pipe, mem_of.data(), 2 * world, 0, &e_));
    float mem_alloc = 0, mem_used = 0;
    for (int r = 0; r < world; r++) { mem_alloc = std::max(mem_alloc, mem_of[2 * r]); mem_used = std::max(mem_used, mem_of[2 * r + 1]); }
    printf("rank %d peak memory: %.2f GiB allocated by the program, %.2f GiB in use on the device\n", rank,
           (double)mine[8 * S + 2], (double)mine[8 * S + 3]);
    std::vector<double> fst(S), bst(S), ist(S), wst(S);
    for (int s = 0; s < S; s++) {
        auto avg = [&](int col) { return red[4 * S + 4 * s + col] > 0 ? red[4 * s + col] / red[4 * S + 4 * s + col] : 0.0; };
        fst[s] = avg(0); bst[s] = avg(1); ist[s] = avg(2); wst[s] = avg(3);
        if (split) bst[s] = ist[s] + wst[s];
    }
    pp_sim_costs costs;
    memset(&costs, 0, sizeof costs);
    costs.f = fst[0] > 0 ? fst[0] : 1e-3;
    costs.f_stage = fst.data();
    costs.b_stage = bst.data();
    if (split) { costs.i_stage = ist.data(); costs.w_stage = wst.data(); }
    pp_sim_result *sim = NULL;
    PPCK(pp_simulate(R.sched, &costs, &sim, &e_));
    double sim_step = sim->makespan;
    pp_sim_result_free(sim);

    /* transfers of the last step: bytes and device time of every group (its begin is when the
     * communication stream may start it: the compute that produced its data is done) */
    double bytes_moved = 0, best_bw = 0, xfer_time = 0;
    for (int g = 0; g < ngroups; g++) {
        double dt = groups[g].end - groups[g].begin, b = (double)std::max(groups[g].bytes_sent, groups[g].bytes_received);
        bytes_moved += (double)(groups[g].bytes_sent + groups[g].bytes_received);
        xfer_time += dt;
        /* the link's speed from groups that send: a copy-engine group that only receives is
         * timed by its local copy out of the ring, once the bytes are there */
        if (dt > 0 && groups[g].bytes_sent > 0 && b / dt > best_bw) best_bw = b / dt;
    }

    /* the simulator again, with every action's own measured time (they drift within a step: the
     * GPUs run at their power cap, so later actions are slower than early ones) and each
     * transfer at the best bandwidth a group reached: what the step would take
     * with no launch gaps, waits or overheads beyond those */
    double sim_action = 0, sim_grouped = 0, sim_free = 0, p2p_s = 0;
    bool has_fb = false;   /* FB actions run as F then B: the B half's waits fall inside the action */
    for (int i = 0; i < tl.length; i++) has_fb = has_fb || tl.actions[i].op == PP_OP_FB;
    {
        std::vector<int> aoff(pp + 1, 0);
        for (int r = 0; r < pp; r++) aoff[r + 1] = aoff[r] + R.sched->length[r];
        std::vector<float> adur(aoff[pp] + 1, 0.0f);
        for (int i = 0; i < tl.length; i++)
            if (tl.actions[i].op <= PP_OP_FB && tl.ready[i] >= 0) adur[aoff[rank] + i] = (float)(tl.end[i] - tl.ready[i]);
        PPCK(pp_nccl_all_reduce_host(R.pipe, adur.data(), (int)adur.size(), 0, &e_));
        std::vector<std::vector<double>> acost(pp);
        std::vector<const double *> aptr(pp);
        for (int r = 0; r < pp; r++) {
            acost[r].assign(R.sched->length[r] + 1, 0.0);
            for (int i = 0; i < R.sched->length[r]; i++) acost[r][i] = adur[aoff[r] + i];
            aptr[r] = acost[r].data();
        }
        pp_sim_costs ac;
        memset(&ac, 0, sizeof ac);
        ac.action_cost = aptr.data();
        /* every transfer free: what communication adds to the step is the measured step less this
         * (a rank that waits for a transfer while the other rank is the bottleneck adds nothing) */
        pp_sim_result *fsim = NULL;
        PPCK(pp_simulate(R.sched, &ac, &fsim, &e_));
        sim_free = fsim->makespan;
        pp_sim_result_free(fsim);
        /* the best group of any rank: a group's time includes its wait for the peer, and in some
         * schedules every group of one rank waits a little */
        std::vector<float> bw_of(world, 0.0f);
        bw_of[rank] = (float)(best_bw / 1e9);
        PPCK(pp_nccl_all_reduce_host(R.pipe, bw_of.data(), world, 0, &e_));
        double bw = 0;
        for (int r = 0; r < world; r++) bw = std::max(bw, (double)bw_of[r] * 1e9);
        p2p_s = bw > 0 ? (double)o.tokens * o.hidden * sizeof(bf16) / bw : 0;
        ac.p2p_latency = p2p_s;
        pp_sim_result *asim = NULL;
        PPCK(pp_simulate(R.sched, &ac, &asim, &e_));
        sim_action = asim->makespan;
        pp_sim_result_free(asim);
        /* and with the transfers grouped as the runtime posts them (a group ends as a whole,
         * one after another on a rank's stream) */
        ac.grouped = 1;
        PPCK(pp_simulate(R.sched, &ac, &asim, &e_));
        sim_grouped = asim->makespan;
        pp_sim_result_free(asim);
    }

    /* 4. check: the pipelined gradients against the single-GPU run of the whole model */
    double single_s = o.single_ms > 0 ? o.single_ms * 1e-3 : 0;
    int check_failed = 0;
    if (o.check) {
        double ref_s = 0;
        double worst = check_gradients(R, &ref_s);
        float v[2] = { (float)worst, lead ? (float)ref_s : 0.0f };
        float wmax[64] = { 0 };
        wmax[rank] = (float)worst;
        PPCK(pp_nccl_all_reduce_host(R.pipe, v, 2, 0, &e_));
        PPCK(pp_nccl_all_reduce_host(R.pipe, wmax, world, 0, &e_));
        double w = 0;
        for (int r = 0; r < world; r++) if (!(wmax[r] <= w)) w = wmax[r];
        check_failed = !(w <= 2e-2);
        if (single_s <= 0) single_s = v[1];
        if (lead) {
            printf("gradient check vs single GPU: worst relative error %.3g over %d weight tensors (tolerance 2e-2): %s\n",
                   w, 2 * o.layers, check_failed ? "FAIL" : "ok, gradients match");
            fflush(stdout);
        }
    }

    double flop = 6.0 * 2.0 * o.tokens * (double)o.hidden * 4.0 * o.hidden * o.layers * o.mb;
    if (lead) {
        double ideal = (double)o.mb * vpp / ((double)o.mb * vpp + pp - 1);
        printf("pipeline %-14s pp %d vpp %d mb %d  step %8.1f ms (min %8.1f)  %6.1f TFLOP/s/gpu  loss %.5f\n",
               pp_schedule_kind_name(R.sched->kind), pp, vpp, o.mb, step * 1e3, step_min * 1e3, flop / step / world / 1e12,
               (double)lossv);
        if (single_s > 0)
            printf("  efficiency %.1f%% (single %.1f ms / pp / step)   textbook mb*vpp/(mb*vpp+pp-1) %.1f%%\n",
                   100.0 * single_s / pp / step, single_s * 1e3, 100.0 * ideal);
        printf("  simulator with measured compute (free transfers): %.1f ms; measured compute span %.1f ms; "
               "exposed transfer + overhead %.2f%% of the step\n",
               sim_step * 1e3, (double)mine[8 * S] * 1e3, 100.0 * std::max(0.0, (double)mine[8 * S] - sim_step) / step);
        printf("  simulator with each action's measured time, transfers %.2f ms each: %.1f ms; that step took %.1f ms, "
               "%.2f%% more (%.1f ms with the transfers grouped as posted)\n", p2p_s * 1e3, sim_action * 1e3,
               times.back() * 1e3, 100.0 * (times.back() - sim_action) / sim_action, sim_grouped * 1e3);
        printf("  exposed on the critical path: each action as measured with every transfer free takes %.1f ms; "
               "transfers, waits and launch gaps added %.1f ms, %.2f%% of that step%s\n", sim_free * 1e3,
               (times.back() - sim_free) * 1e3, 100.0 * (times.back() - sim_free) / times.back(),
               has_fb ? " (an FB's B half waits inside its action: this counts it as compute)" : "");
        if (single_s > 0) {
            double most = 0;
            for (int r = 0; r < world; r++) most = std::max(most, (double)busy_of[r]);
            printf("  bound: the busiest rank computed %.1f ms, so with this compute no step is faster than %.1f%%\n",
                   most * 1e3, 100.0 * single_s / pp / most);
        }
        printf("  compute busy per rank (ms of %.1f):", step * 1e3);
        for (int r = 0; r < world; r++) printf(" %.1f", busy_of[r] * 1e3);
        printf("\n  rank %d transfers: %d groups, %.0f MiB, best %.1f GB/s per group, %.1f ms on the comm stream\n",
               R.rank, ngroups, bytes_moved / 1048576.0, best_bw / 1e9, xfer_time * 1e3);
        if (o.copy_engine) {
            long long how[3] = { 0, 0, 0 };
            PPCK(pp_nccl_transport_copy_engine_counts(&R.tp, how, &e_));
            if (how[0] + how[1] + how[2] > 0)
                printf("  rank %d copy-engine transfers (every step): %lld pushed (receive posted first), %lld pulled "
                       "(send posted first), %lld through the ring\n", R.rank, how[0], how[1], how[2]);
        }
        printf("  peak memory (max over ranks): %.2f GiB allocated by the program, %.2f GiB in use on the device\n",
               (double)mem_alloc, (double)mem_used);
        fflush(stdout);
    }

    /* 5. every rank's timeline of the last timed step (times from that step's start) to rank 0,
     *    through the pipeline communicator: where each rank's idle time went, and the trace */
    {
        /* one clock for all ranks (the host's: processes and threads of one machine share it),
         * from rank 0's step start: each rank's own start differs by how it left the barrier,
         * which would shift every cross-rank wait. The start travels as two floats, whole
         * 16-second periods (exact below 2^24) and the seconds within one (microsecond
         * precision); ranks more than a second apart do not share a clock (other hosts) and
         * keep their own start. */
        std::vector<float> start_at(2 * world, 0.0f);
        start_at[2 * rank] = (float)fmod(floor(last_t0 / 16.0), 16777216.0);
        start_at[2 * rank + 1] = (float)(last_t0 - 16.0 * floor(last_t0 / 16.0));
        PPCK(pp_nccl_all_reduce_host(R.pipe, start_at.data(), 2 * world, 0, &e_));
        double shift = 16.0 * ((double)start_at[2 * rank] - (double)start_at[0]) +
                       ((double)start_at[2 * rank + 1] - (double)start_at[1]);
        if (fabs(shift) > 1.0) shift = 0;
        int total = 0;
        std::vector<int> off(pp + 1, 0);
        for (int r = 0; r < pp; r++) { off[r] = total; total += 3 * R.sched->length[r]; }
        std::vector<float> all(total, 0.0f);
        for (int i = 0; i < tl.length; i++) {
            const double *src[3] = { tl.start, tl.ready, tl.end };
            for (int k = 0; k < 3; k++)
                all[off[rank] + 3 * i + k] = src[k][i] < 0 ? -1e9f : (float)(src[k][i] - last_t0 + shift);
        }
        PPCK(pp_nccl_all_reduce_host(R.pipe, all.data(), total, 0, &e_));
        if (lead) {
            std::vector<pp_timeline> tls(pp);   /* zeroed: fields not set here stay 0 */
            std::vector<std::vector<double>> buf(3 * pp);
            for (int r = 0; r < pp; r++) {
                int len = R.sched->length[r];
                for (int k = 0; k < 3; k++) {
                    buf[3 * r + k].resize(len);
                    for (int i = 0; i < len; i++) {
                        float v = all[off[r] + 3 * i + k];
                        buf[3 * r + k][i] = v < -1e8f ? -1.0 : (double)v;
                    }
                }
                tls[r].rank = r; tls[r].length = len; tls[r].actions = R.sched->actions[r]; tls[r].schedule = R.sched;
                tls[r].start = buf[3 * r].data(); tls[r].ready = buf[3 * r + 1].data(); tls[r].end = buf[3 * r + 2].data();
            }
            /* each idle stretch by what ended it: the peer's compute (the schedule's bubble), a
             * transfer after the peer had computed (communication not hidden), or neither */
            std::vector<pp_idle> idle(pp);
            if (pp_timeline_idle(tls.data(), pp, idle.data(), &e0) == PP_OK) {
                double worst_xfer = 0;
                printf("  where the last step went, ms = compute + waiting for the peer's compute + for transfers + "
                       "other gaps + tail:\n");
                for (int r = 0; r < pp; r++) {
                    printf("    rank %d: %.1f = %.1f + %.1f + %.2f + %.2f + %.1f\n", r, idle[r].step * 1e3,
                           idle[r].busy * 1e3, idle[r].wait_compute * 1e3, idle[r].wait_transfer * 1e3,
                           idle[r].wait_other * 1e3, idle[r].tail * 1e3);
                    worst_xfer = std::max(worst_xfer, idle[r].wait_transfer);
                }
                printf("  exposed transfer (the most of any rank): %.2f ms, %.2f%% of the step\n", worst_xfer * 1e3,
                       100.0 * worst_xfer / std::max(1e-12, idle[0].step));
            } else {
                printf("  where the last step went: %s\n", e0.message);
            }
            if (o.trace) {
                FILE *f = fopen(o.trace, "w");
                if (!f) { fprintf(stderr, "mlp_gpu: --trace=%s: cannot create the file\n", o.trace); return 1; }
                pp_status st = pp_timeline_write_chrome_trace(tls.data(), pp, f, &e0);
                fclose(f);
                if (st != PP_OK) { fprintf(stderr, "mlp_gpu: trace: %s\n", e0.message); return 1; }
                printf("trace of the last step written to %s (open in ui.perfetto.dev)\n", o.trace);
                pp_timeline_draw_ascii(tls.data(), pp, 100, stdout, NULL);
            }
            fflush(stdout);
        }
    }

    /* 6. training: clip the global gradient norm (all pipeline ranks' sums of squares), step */
    R.m.G.timing = false;   /* --gemm-times covers the timed steps, not training */
    if (o.train > 0) {
        std::vector<pp_cuda_tensor> tens;
        size_t wn = (size_t)R.m.F * R.m.H;
        for (int b : blocks) {
            pp_cuda_tensor t1 = { R.m.dW1[b], (int64_t)wn, PP_CUDA_F32 }, t2 = { R.m.dW2[b], (int64_t)wn, PP_CUDA_F32 };
            tens.push_back(t1); tens.push_back(t2);
        }
        pp_cuda_l2norm *plan = NULL;
        PPCK(pp_cuda_l2norm_create(tens.data(), (int)tens.size(), &plan, &e_));
        float *d_norm;
        CK(cudaMalloc(&d_norm, 2 * sizeof(float)));
        for (int t = 1; t <= o.train; t++) {
            model_begin_step(R.m);
            R.m.step_no = o.warmup + o.steps + t;
            PPCK(pp_run_step(R.ex, NULL, NULL, &e_));
            PPCK(pp_cuda_l2norm_sumsq(plan, d_norm, 0, NULL, R.stream, &e_));
            PPCK(pp_nccl_grad_norm(R.pipe, d_norm, o.clip, d_norm + 1, R.stream, &e_));
            for (int b : blocks) {
                if (adamw) {
                    adamw_kernel<<<grid_for(wn), 256, 0, R.stream>>>(R.m.W1[b], R.m.dW1[b], R.m.m1[b], R.m.v1[b], wn, o.lr, t, d_norm + 1);
                    adamw_kernel<<<grid_for(wn), 256, 0, R.stream>>>(R.m.W2[b], R.m.dW2[b], R.m.m2[b], R.m.v2[b], wn, o.lr, t, d_norm + 1);
                } else {
                    sgd_kernel<<<grid_for(wn), 256, 0, R.stream>>>(R.m.W1[b], R.m.dW1[b], wn, o.lr, d_norm + 1);
                    sgd_kernel<<<grid_for(wn), 256, 0, R.stream>>>(R.m.W2[b], R.m.dW2[b], wn, o.lr, d_norm + 1);
                }
            }
            CK(cudaGetLastError());
            PPCK(pp_nccl_sync(R.pipe, R.stream, 0, &e_));
            float hv[3] = { 0, 0, 0 };
            CK(cudaMemcpy(hv, d_norm, 2 * sizeof(float), cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(&hv[2], R.m.d_loss, sizeof(float), cudaMemcpyDeviceToHost));
            float lv = last ? hv[2] : 0;
            PPCK(pp_nccl_all_reduce_host(R.pipe, &lv, 1, 0, &e_));
            if (lead) printf("train step %3d  loss %.6f  grad norm %.4f  clip scale %.4f\n", t, (double)lv, sqrt((double)hv[0]), (double)hv[1]);
        }
        if (lead) fflush(stdout);
        pp_cuda_l2norm_free(plan);
        CK(cudaFree(d_norm));
    }

    pp_executor_free(R.ex);
    pp_nccl_timer_free(&R.timer);
    pp_nccl_transport_free(&R.tp);
    pp_schedule_free(R.sched);
    pp_nccl_free(R.pipe);
    pp_nccl_free(R.world_comm);
    gemms_free(R.m.G);
    return check_failed ? 4 : 0;
}

static void *rank_thread(void *arg)
{
    Shared *sh = ((std::pair<Shared *, int> *)arg)->first;
    int r = ((std::pair<Shared *, int> *)arg)->second;
    sh->status[r] = run_rank(*sh->o, sh, r);
    return NULL;
}

int main(int argc, char **argv)
{
    Options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* NCCL >= 2.22 connects peers lazily, at the first transfer, inside a step; the connection
     * set-up allocates device memory on both ranks, which can wait behind kernels already in
     * flight. Connecting everything at init (NCCL's behaviour before 2.22) keeps set-up out of the
     * step. A value the user set wins. */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    if (o.single) {
        const char *lr = getenv("LOCAL_RANK");
        int device = lr ? atoi(lr) : 0;
        run_single(o, device, true, NULL);
        return 0;
    }
    if (o.threads) {
        /* one process, one thread per GPU: the unique id is passed in memory */
        Shared sh;
        pp_error err;
        sh.o = &o;
        sh.world = o.threads;
        if (pp_nccl_unique_id(&sh.id, &err) != PP_OK) { fprintf(stderr, "mlp_gpu: %s\n", err.message); return 1; }
        std::vector<pthread_t> th(o.threads);
        std::vector<std::pair<Shared *, int>> args(o.threads);
        for (int r = 0; r < o.threads; r++) {
            args[r] = std::make_pair(&sh, r);
            pthread_create(&th[r], NULL, rank_thread, &args[r]);
        }
        rc = 0;
        for (int r = 0; r < o.threads; r++) { pthread_join(th[r], NULL); if (sh.status[r] > rc) rc = sh.status[r]; }
        return rc;
    }
    return run_rank(o, NULL, 0);
}
