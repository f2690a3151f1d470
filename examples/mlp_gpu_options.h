/* mlp_gpu_options.h — the command line of examples/mlp_gpu.cu: its options, --help, and their
 * parsing and checks (every bad value or combination refused with the flag, the value and the
 * rule, exit 2). Part of mlp_gpu.cu, split out to keep the training example readable; included
 * there after pipepar.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int gate = 1, tune = 1, quiet = 0;
    int copy_engine = 1;            /* transfers between GPUs of this host through the copy engines */
    int via_host = 0;               /* --via-host: those staged through pinned host memory, over PCIe */
    int in_order = 0;               /* --in-order: a round's transfers in one group, waited in order */
    int send_parts = 1;             /* --send-parts P: a sent output's last GEMM in P parts, each sent once written */
    const char *layout = nullptr;   /* Megatron layout string: blocks per stage */
    double max_memory = 0;          /* --schedule search: cap on activation memory */
    const char *gemm_picks = nullptr; /* --gemm-picks FILE: the tuned GEMM kernels, shared between runs */
    int tune_in_step = 0;           /* --tune-in-step N: --single picks each GEMM's kernel in N real steps */
    int keep_overlaps = 0;          /* --keep-overlaps: DualPipeV's FBs lowered as one action each */
    int split_backward = 0;         /* --split-backward: each B as I then W (its output leaves after the I) */
    int search_layout = 0;          /* --search-layout: --schedule search splits the blocks into stages too */
    const char *search_kind = nullptr; /* --search-kind K: --schedule search tries only kind K */
    int place_by_speed = 0;         /* --place-by-speed: each GPU on the rank where the step is shortest */
    const char *gpu_ms = nullptr;   /* --gpu-ms LIST: those GPU times instead of measuring */
    int slow_rank = -1;             /* --slow-rank R: this rank's GPU does slow_factor times the GEMMs */
    double slow_factor = 1.35;      /* --slow-factor X */
    int slow_factor_given = 0;
    int adapt = 0;                  /* --adapt: re-plan the split for the measured speeds, then time again */
};

static const char usage[] =
    "usage: mlp_gpu [--single | --threads N] [--schedule 1f1b] [--pp P] [--vpp V] [--group G] [--mb M] [--tokens T]\n"
    "               [--hidden H] [--layers L] [--steps N] [--warmup N] [--check] [--train N]\n"
    "               [--optimizer sgd|adamw] [--lr X] [--clip X] [--trace FILE] [--timeout S]\n"
    "               [--single-ms X] [--no-gate] [--no-copy-engine] [--in-order] [--no-tune] [--quiet]\n"
    "               [--layout STR] [--max-memory X] [--keep-overlaps] [--split-backward] [--schedule-csv FILE]\n"
    "               [--gemm-picks FILE] [--tune-in-step N] [--search-layout] [--search-kind K]\n"
    "               [--place-by-speed [--gpu-ms LIST]] [--kill-rank R --kill-step K]\n"
    "               [--slow-rank R [--slow-factor X]] [--adapt] [--send-parts P]\n"
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
    "                  each stage from one block up to as many more than the even split, that is\n"
    "                  --layers / (pp * vpp) - 1 more, vpp 1 without --vpp; each block F = I = W, block\n"
    "                  0's I half), and run the fastest\n"
    "  --search-kind K with --schedule search: only schedules of kind K (e.g. interleaved: Megatron's\n"
    "                  order, its microbatch group and, with --search-layout, its stages chosen)\n"
    "  --place-by-speed time every GPU on the model's largest GEMM (all at once, under load, 3.5 s) and\n"
    "                  renumber the pipeline (pp_place_by_simulation, pp_nccl_reorder) so that the\n"
    "                  simulated step, each rank at its GPU's speed, is shortest: a slow GPU where the\n"
    "                  schedule has slack, the rank with the most GEMMs on a fast one (one host: ranks\n"
    "                  on several stay as launched, so that neighbours stay on their nodes)\n"
    "  --gpu-ms LIST   with --place-by-speed: these per-GPU times (ms, by process) instead of measuring,\n"
    "                  e.g. each GPU's --single step (bench/gpu_pipeline.sh passes its baselines)\n"
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
    "  --no-tune       each GEMM takes cuBLASLt's first kernel (default: the fastest of its top 8, timed)\n"
    "  --gemm-picks FILE  the GEMM kernels from FILE if it exists, else tuned and written there: every\n"
    "                  run and rank that reads it runs the same kernels (tuning picks near-ties that run\n"
    "                  a few percent apart in a step by chance, so a pipeline's ranks and its single-GPU\n"
    "                  baseline would otherwise compute at different speeds); for the same GPU and cuBLASLt,\n"
    "                  not with --no-tune; runs that tuned at once all take the picks of the one that\n"
    "                  wrote the file first\n"
    "  --tune-in-step N  with --single: after the usual tuning, N steps in which each GEMM kind's calls take its\n"
    "                  candidates in turn, each timed in place (the step's data, neighbours and clock), and\n"
    "                  each kind keeps its fastest median; with --gemm-picks, those are what the file holds\n"
    "  --no-gate       launch NCCL groups at once (default: the arrival gate, pp_nccl_transport_gate:\n"
    "                  a group launches only once its peer has reached its matching group; one node)\n"
    "  --no-copy-engine  every transfer through NCCL (default: between processes on one host through the\n"
    "                  copy engines, pp_nccl_transport_copy_engine: one copy straight between the two buffers,\n"
    "                  no SM on either GPU; others, threads of one process, and NCCL_P2P_DISABLE=1 on NCCL)\n"
    "  --via-host      the copy engines' transfers staged through pinned host memory, over PCIe instead of\n"
    "                  NVLink (pp_nccl_transport_copy_engine_via_host): under the power cap NVLink's traffic\n"
    "                  lowers the SM clock, PCIe's does not; each transfer takes longer, and the search\n"
    "                  ranks its candidates so. Sets NCCL_P2P_DISABLE=1 unless given: NCCL's own few\n"
    "                  collectives go through host memory too\n"
    "  --send-parts P  streamed sends: the last GEMM of a forward or input gradient whose output goes to\n"
    "                  another rank runs in P parts by tokens, and each part leaves once written\n"
    "                  (pp_executor_output_ready), so the receiver waits for the last part after the\n"
    "                  compute, not for the whole tensor; 1 to 16, each part a multiple of 8 tokens,\n"
    "                  over the copy engines between processes (1: off). With --single it only plans\n"
    "                  the part GEMMs, so that one --gemm-picks file serves the baseline and pipelines\n"
    "  --in-order      over the copy engines too, post a round's transfers with every peer as one group\n"
    "                  and wait for the groups in order (default there: a group per peer, each waited\n"
    "                  for alone, pp_transport.independent_peers); the same at pp 2\n"
    "  --keep-overlaps lower DualPipeV's overlapped F&B as one action (default: split into F then B by\n"
    "                  pp_schedule_split_overlaps, as this example has no overlapped F&B callback, so that\n"
    "                  the F's output leaves before the B runs)\n"
    "  --split-backward  run each whole backward B as its input-gradient half then its weight-gradient\n"
    "                  half (pp_schedule_split_backward): the B's output gradient leaves for the previous\n"
    "                  stage before the weight gradients are computed, so that rank starts its B sooner;\n"
    "                  with --schedule search, every candidate with whole B's so (pp_search's split_backward)\n"
    "  --kill-rank R --kill-step K   failure test: rank R kills itself in the middle of step K\n"
    "  --slow-rank R   a slow GPU on purpose: rank R (with --single: LOCAL_RANK R) runs --slow-factor X\n"
    "                  (1.35) times the GEMMs, the extra ones beside its own, of the same shape\n"
    "  --adapt         after the timed steps, each rank's speed from the last step's timeline\n"
    "                  (pp_speed_exchange), the blocks re-split for them (pp_layers_replan: when the\n"
    "                  slowest rank's time falls by more than 2%), the moved blocks' weights and optimizer\n"
    "                  state sent to their new rank (pp_layers_move), and the steps timed again, round\n"
    "                  after round until a split is kept or one that ran comes back (at most 4 rounds),\n"
    "                  then the fastest split timed is the one that stays; with a --schedule kind, whose\n"
    "                  order stays the same for the new split, or with --schedule search --search-layout:\n"
    "                  order and split searched again on the measured costs and speeds (pp_plan_replan:\n"
    "                  when the simulated step falls by more than 2% and every rank's GPU can hold the\n"
    "                  new plan), and a new executor for the new order\n";

static int parse_args(int argc, char **argv, Options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char flag[64];
        const char *eq = strchr(a, '=');
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(usage, stdout); exit(0); }
        if (strncmp(a, "--", 2) != 0) { fprintf(stderr, "mlp_gpu: %s: not a flag (try --help)\n", a); return 2; }
        snprintf(flag, sizeof flag, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        static const char *const bools[] = { "--single", "--check", "--no-tune", "--quiet", "--no-gate",
                                              "--no-copy-engine", "--keep-overlaps", "--search-layout",
                                              "--place-by-speed", "--split-backward", "--adapt", "--in-order", "--via-host", NULL };
        static const char *const valued[] = { "--threads", "--pp", "--vpp", "--group", "--mb", "--tokens", "--hidden", "--layers",
            "--steps", "--warmup", "--train", "--schedule", "--optimizer", "--lr", "--clip", "--trace", "--timeout",
            "--single-ms", "--kill-rank", "--kill-step", "--layout", "--max-memory", "--search-kind", "--gpu-ms",
            "--schedule-csv", "--gemm-picks", "--tune-in-step", "--slow-rank", "--slow-factor", "--send-parts", NULL };
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
        else if (!strcmp(flag, "--no-gate")) o->gate = 0;
        else if (!strcmp(flag, "--no-copy-engine")) o->copy_engine = 0;
        else if (!strcmp(flag, "--in-order")) o->in_order = 1;
        else if (!strcmp(flag, "--via-host")) o->via_host = 1;
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
        else if (!strcmp(flag, "--send-parts")) ok = integer(1, 16, &o->send_parts);
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
        else if (!strcmp(flag, "--layout")) o->layout = v;
        else if (!strcmp(flag, "--max-memory")) ok = num(0, 1e6, &o->max_memory);
        else if (!strcmp(flag, "--kill-rank")) ok = integer(0, 1 << 20, &o->kill_rank);
        else if (!strcmp(flag, "--kill-step")) ok = integer(0, 1 << 20, &o->kill_step);
        else if (!strcmp(flag, "--slow-rank")) ok = integer(0, 1 << 20, &o->slow_rank);
        else if (!strcmp(flag, "--slow-factor")) { ok = num(1, 10, &o->slow_factor); o->slow_factor_given = 1; }
        else if (!strcmp(flag, "--adapt")) o->adapt = 1;
        if (!ok) return 2;
    }
    return 0;
}

/* The rules between flags, each refused with the reason. */
static int check_args(const Options *o)
{
    if (o->hidden % 64) { fprintf(stderr, "mlp_gpu: --hidden=%d: must be a multiple of 64\n", o->hidden); return 2; }
    if (o->tokens % 8) { fprintf(stderr, "mlp_gpu: --tokens=%d: must be a multiple of 8\n", o->tokens); return 2; }
    if (o->tokens % (8 * o->send_parts)) {
        fprintf(stderr, "mlp_gpu: --send-parts=%d: each part must be a multiple of 8 tokens (--tokens=%d)\n", o->send_parts,
                o->tokens);
        return 2;
    }
    if (o->send_parts > 1 && (!o->copy_engine || o->threads)) {
        fprintf(stderr, "mlp_gpu: --send-parts: streams the copy engines' sends between processes (not with --%s: "
                "NCCL's kernels send a tensor whole)\n", o->threads ? "threads, which stay on NCCL" : "no-copy-engine");
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
    if (o->gpu_ms && !o->place_by_speed) { fprintf(stderr, "mlp_gpu: --gpu-ms: only with --place-by-speed\n"); return 2; }
    if (o->place_by_speed && (o->threads || o->single)) {
        fprintf(stderr, "mlp_gpu: --place-by-speed: one process per GPU only (not with --%s)\n", o->threads ? "threads" : "single");
        return 2;
    }
    if (o->search_layout && o->layout) {
        fprintf(stderr, "mlp_gpu: --search-layout and --layout: give one (--search-layout chooses the layout)\n");
        return 2;
    }
    if (o->single && o->threads) { fprintf(stderr, "mlp_gpu: --single and --threads: choose one\n"); return 2; }
    if (o->via_host && (!o->copy_engine || o->threads || o->single)) {
        fprintf(stderr, "mlp_gpu: --via-host: stages the copy engines' transfers between processes (not with --%s)\n",
                !o->copy_engine ? "no-copy-engine" : o->threads ? "threads" : "single");
        return 2;
    }
    if (o->tune_in_step && (!o->single || !o->tune)) {
        fprintf(stderr, "mlp_gpu: --tune-in-step: %s\n", !o->single ? "only with --single (pipelines take its picks "
                "through --gemm-picks)" : "not with --no-tune");
        return 2;
    }
    if (o->slow_factor_given && o->slow_rank < 0) {
        fprintf(stderr, "mlp_gpu: --slow-factor: only with --slow-rank\n");
        return 2;
    }
    if (o->adapt && (o->single || o->schedule_csv || (!strcmp(o->schedule, "search") && !o->search_layout))) {
        fprintf(stderr, "mlp_gpu: --adapt: with a --schedule kind, whose order suits any split, or with --schedule "
                "search --search-layout, which searches order and split again (not with %s)\n",
                o->single ? "--single" : o->schedule_csv ? "--schedule-csv" : "--schedule search without --search-layout");
        return 2;
    }
    if (o->gemm_picks && !o->tune) {
        fprintf(stderr, "mlp_gpu: --gemm-picks: not with --no-tune (the file holds tuned kernels)\n");
        return 2;
    }
    return 0;
}
