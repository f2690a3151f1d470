/* gpt_gpu.cu — the GPT of examples/gpt.c (dense, or --moe with router replay) trained on GPUs,
 * one process per GPU, with everything pipepar composes: a dp x cp x pp grid of NCCL
 * communicators, any schedule, packed variable-length sequences, context parallelism, router
 * replay, a tied embedding, the data-parallel gradient reduce, a global clip and AdamW.
 *
 *     build/gpt_gpu --selftest                                 one GPU: the GPU model against
 *                                                              gpt_model.h's, every gradient
 *     build/gpt_gpu --unit-costs units.txt                     one GPU: each half layer's time,
 *                                                              for pipepar search --hybrid
 *     torchrun --nproc-per-node 2 --no-python build/gpt_gpu --pp 2 --schedule interleaved --vpp 2 --check
 *     RANK=r WORLD_SIZE=4 LOCAL_RANK=r PIPEPAR_NCCL_ID_FILE=/tmp/id build/gpt_gpu --dp 2 --cp 2 --moe --replay
 *     build/gpt_gpu --help
 *
 * The model (examples/gpt_gpu_model.h, the GPU twin of examples/gpt_model.h) computes a range of
 * layers of one packed microbatch; this file is the trainer around it, the same trainer as
 * examples/gpt.c, on GPUs (build/gpt_gpu_fp32 is the same program in fp32):
 *
 *   data     each step a global batch of sequences of random lengths (gpt.c's counting task),
 *            packed with pp_pack_plan_build under NeMo RL's rules; a dp rank's bins are its
 *            microbatches, their count free to change from step to step (the executor's recipe)
 *   pack     per microbatch the host uploads its maps (pp_pack_plan_gather's rows, cu_seqlens,
 *            the cp indices) once, and the device packs the step's tokens, labels and positions
 *            (pp_cuda_pack) and, with cp > 1, keeps this rank's share (pp_cuda_cp_split_thd)
 *   cp       attention all-gathers keys and values over the cp group (the transport's all_gather)
 *            and restores their order (pp_cuda_cp_merge_thd); their gradients are summed back
 *   replay   with --moe --replay a forward-only rollout records every MoE layer's choices; the
 *            training step replays them, each chunk taking its layers' part for this cp rank's
 *            tokens (pp_replay_map_build, pp_cuda_replay_gather), and checks it routed the same
 *   step     pp_run_step calls the model per (stage, microbatch) in the schedule's order; saved
 *            activations live in pp_executor_saved_slots slots indexed by pp_mb_info.slot; when a
 *            chunk's last backward is done (chunk_done) its gradients start their sum over the
 *            dp x cp group on a stream of their own, while the pipeline drains
 *   update   the tied embedding's copies summed over the embedding group (pp_nccl_split_group);
 *            every gradient is already divided by the global count of labelled tokens (the loss
 *            gradient is scaled by it: pp_loss's rule); the global norm (pp_cuda_l2norm,
 *            pp_nccl_grad_norm), the clip and AdamW on the device, with no host round trip
 *   check    --check: the same model whole on each rank's GPU, the same batch unsplit; the first
 *            step's loss and every gradient, every step's loss (gpt_gpu_check.h)               */
#include "gpt_gpu_model.h"
#include <errno.h>
#include <math.h>
#include <time.h>
#include <string>

#define MAX_CHUNKS 8        /* chunks per rank: --vpp's bound */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ============================================================================================
 * options
 * ============================================================================================ */

typedef struct options {
    int dp, cp, pp, vpp, first_stage_layers, group;
    char *schedule, *hybrid;
    int layers, width, heads, vocab, moe, experts, topk, replay;
    int steps, warmup, seqs, min_len, max_len, capacity, attn_block;
    double lr, clip, timeout;
    int seed, check, selftest, defer_head_wgrad;
    char *unit_costs;
} options;

typedef struct flag {
    const char *name;
    char type;              /* 'i' int, 'f' number, 'b' switch, 's' text */
    size_t at;              /* offsetof(options, field) */
    double lo, hi;
    const char *help;
} flag;

#define OPT(field) offsetof(options, field)
static const flag FLAGS[] = {
    {"--dp", 'i', OPT(dp), 1, 64, "data-parallel replicas"},
    {"--cp", 'i', OPT(cp), 1, 16, "context-parallel ranks per replica"},
    {"--pp", 'i', OPT(pp), 1, 64, "pipeline ranks (the processes must number dp*cp*pp)"},
    {"--schedule", 's', OPT(schedule), 0, 0, "1f1b, interleaved, zbv, dualpipev, gpipe, ... (default 1f1b)"},
    {"--vpp", 'i', OPT(vpp), 1, MAX_CHUNKS, "chunks per rank (default: the schedule's)"},
    {"--first-stage-layers", 'i', OPT(first_stage_layers), 1, GPT_MAX_LAYERS,
     "layers of pipeline rank 0 (Megatron's, over its chunks)"},
    {"--group", 'i', OPT(group), 1, 1024,
     "interleaved: microbatches a chunk runs before the next (Megatron's microbatch_group_size_per_vp_stage; "
     "default pp)"},
    {"--hybrid", 's', OPT(hybrid), 0, 0,
     "the split in half layers: Megatron's hybrid pattern, '*' a layer's attention, '-' its MLP ('E' MoE), "
     "'|' between stages, e.g. '*-*-*|-*-*-' (default: whole layers, even)"},
    {"--layers", 'i', OPT(layers), 1, GPT_MAX_LAYERS, "decoder layers (default 4; with --hybrid, the pattern's)"},
    {"--width", 'i', OPT(width), 8, 8192, "the residual stream (default 64)"},
    {"--heads", 'i', OPT(heads), 1, 128, "attention heads (default 4)"},
    {"--vocab", 'i', OPT(vocab), 4, 262144, "tokens (default 64)"},
    {"--moe", 'b', OPT(moe), 0, 1, "a mixture of experts in every other layer"},
    {"--experts", 'i', OPT(experts), 2, GPT_MAX_EXPERTS, "experts per MoE layer (default 8)"},
    {"--topk", 'i', OPT(topk), 1, GPT_MAX_EXPERTS, "experts per token (default 2)"},
    {"--replay", 'b', OPT(replay), 0, 1, "record the routing in a rollout, replay it in training"},
    {"--steps", 'i', OPT(steps), 1, 100000, "training steps (default 3)"},
    {"--warmup", 'i', OPT(warmup), 0, 100000, "of the steps, the first ones left out of the timing (default 1)"},
    {"--seqs", 'i', OPT(seqs), 1, 65536, "sequences per step (default 24)"},
    {"--min-len", 'i', OPT(min_len), 1, 65536, "shortest sequence (default 3)"},
    {"--max-len", 'i', OPT(max_len), 1, 65536, "longest sequence (default 48)"},
    {"--capacity", 'i', OPT(capacity), 1, 65536, "tokens per bin (microbatch) (default 64)"},
    {"--attn-block", 'i', OPT(attn_block), 1, 65536,
     "attention computes query blocks of at most this many rows, each against the keys up to its last "
     "query, skipping the masked blocks above (default 1024)"},
    {"--lr", 'f', OPT(lr), 0, 1, "AdamW's learning rate (default 0.01)"},
    {"--clip", 'f', OPT(clip), 0, 1e6, "largest gradient norm, 0: none (default 1)"},
    {"--seed", 'i', OPT(seed), 0, 2147483647, "weights and data (default 1)"},
    {"--timeout", 'f', OPT(timeout), 1, 3600, "seconds any wait for another rank may take (default 120)"},
    {"--defer-head-wgrad", 'b', OPT(defer_head_wgrad), 0, 1,
     "the output layer's weight gradient in one product when its stage's last backward is done "
     "(Megatron-LM's defer_embedding_wgrad_compute): under 1F1B, while the pipeline drains; keeps every "
     "microbatch's logits' gradient until then"},
    {"--check", 'b', OPT(check), 0, 1, "compare with the same model whole on one GPU (see gpt_gpu_check.h)"},
    {"--selftest", 'b', OPT(selftest), 0, 1, "one GPU: this model against gpt_model.h's on the CPU, then exit"},
    {"--unit-costs", 's', OPT(unit_costs), 0, 0,
     "one GPU: time each layer's attention and MLP, forward and backward, into FILE, then exit "
     "(pipepar search --layer-costs FILE ... --hybrid finds half-layer splits on them)"},
};
#define NFLAGS ((int)(sizeof FLAGS / sizeof FLAGS[0]))

static int usage_error(const char *flag_name, const char *value, const char *rule)
{
    if (value) fprintf(stderr, "gpt_gpu: %s=%s: %s\n", flag_name, value, rule);
    else fprintf(stderr, "gpt_gpu: %s: %s\n", flag_name, rule);
    return 2;
}

static void print_help(void)
{
    printf("usage: gpt_gpu [flags]   (train a small GPT over a dp x cp x pp grid, one process per GPU;\n"
           "                          the launcher sets RANK, WORLD_SIZE, LOCAL_RANK; none: one GPU)\n");
    for (int i = 0; i < NFLAGS; i++) {
        char bounds[48] = "";
        if (FLAGS[i].type == 'i' || FLAGS[i].type == 'f')
            snprintf(bounds, sizeof bounds, " (%g..%g)", FLAGS[i].lo, FLAGS[i].hi);
        printf("  %-22s %s%s\n", FLAGS[i].name, FLAGS[i].help, bounds);
    }
}

/* Fills o from argv; returns -1 to go on, else the exit code (0 after --help, 2 on bad input). */
static int parse_flags(int argc, char **argv, options *o)
{
    int seen[NFLAGS] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        char *end;
        int f;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { print_help(); return 0; }
        for (f = 0; f < NFLAGS && strcmp(a, FLAGS[f].name); f++) {}
        if (f == NFLAGS) return usage_error(a, NULL, "unknown flag (see --help)");
        if (seen[f]++) return usage_error(a, NULL, "given twice");
        if (FLAGS[f].type == 'b') { *(int *)((char *)o + FLAGS[f].at) = 1; continue; }
        if (i + 1 >= argc) return usage_error(a, NULL, "needs a value");
        v = argv[++i];
        if (FLAGS[f].type == 's') { *(char **)((char *)o + FLAGS[f].at) = (char *)v; continue; }
        errno = 0;
        char rule[64];
        if (FLAGS[f].type == 'i') {
            long x = strtol(v, &end, 10);
            snprintf(rule, sizeof rule, "must be an integer in %g..%g", FLAGS[f].lo, FLAGS[f].hi);
            if (end == v || *end || errno || x < FLAGS[f].lo || x > FLAGS[f].hi) return usage_error(a, v, rule);
            *(int *)((char *)o + FLAGS[f].at) = (int)x;
        } else {
            double x = strtod(v, &end);
            snprintf(rule, sizeof rule, "must be a number in %g..%g", FLAGS[f].lo, FLAGS[f].hi);
            if (end == v || *end || errno || !(x >= FLAGS[f].lo && x <= FLAGS[f].hi)) return usage_error(a, v, rule);
            *(double *)((char *)o + FLAGS[f].at) = x;
        }
    }
    return -1;
}

/* ============================================================================================
 * data: one global batch per step, packed
 * ============================================================================================ */

typedef struct step_data {
    int n;                      /* sequences */
    std::vector<int32_t> lengths;
    int64_t tokens;             /* sum of lengths */
    std::vector<int32_t> ids;   /* [tokens] the sequences back to back: the rollout's token order */
    std::vector<int32_t> labels;/* [tokens] each token's successor in its sequence, -1 for the last */
    int64_t labelled;           /* tokens with a label: what every gradient is divided by */
    pp_pack_plan *plan;         /* bins -> (dp rank, microbatch), cu_seqlens, padding */
} step_data;

/* gpt.c's counting task: sequence i counts from a random token by a random stride 1..3 (tokens
 * 1 .. V-1, 0 is padding), so attention must find the stride. */
static void make_sequences(step_data *d, const options *o, int step)
{
    uint64_t rng = (uint64_t)o->seed * 1000003u + (uint64_t)step;
    int64_t at = 0;
    const int V1 = o->vocab - 1;
    for (int i = 0; i < d->n; i++) {
        int32_t first = (int32_t)(gpt_mix(&rng) % (uint64_t)V1), stride = 1 + (int32_t)(gpt_mix(&rng) % 3);
        for (int t = 0; t < d->lengths[i]; t++, at++) {
            d->ids[at] = 1 + (int32_t)(((int64_t)first + (int64_t)t * stride) % V1);
            d->labels[at] = t + 1 < d->lengths[i] ? 1 + (int32_t)(((int64_t)first + (int64_t)(t + 1) * stride) % V1) : -1;
        }
    }
}

/* Every step's batch and its packing under NeMo RL's rules (as gpt.c: at least dp*pp bins, a
 * multiple of dp*pp, whenever pp > 1; each sequence padded to a multiple of 2*cp). Returns 0, or
 * 2 (bad input). */
static int make_steps(std::vector<step_data> &steps, const options *o)
{
    for (int s = 0; s < o->steps; s++) {
        step_data &d = steps[s];
        uint64_t rng = (uint64_t)o->seed * 7919u + (uint64_t)s + 1;
        d.n = o->seqs;
        d.lengths.resize(d.n);
        d.tokens = 0;
        for (int i = 0; i < d.n; i++) {
            d.lengths[i] = o->min_len + (int32_t)(gpt_mix(&rng) % (uint64_t)(o->max_len - o->min_len + 1));
            d.tokens += d.lengths[i];
        }
        d.ids.resize(d.tokens); d.labels.resize(d.tokens);
        make_sequences(&d, o, s);
        d.labelled = d.tokens - d.n;
        pp_pack_plan_config pc;
        pp_error err;
        memset(&pc, 0, sizeof pc);
        pc.pack.capacity = o->capacity;
        pc.pack.min_bin_count = pc.pack.bin_count_multiple = o->pp > 1 ? o->dp * o->pp : o->dp;
        pc.dp = o->dp; pc.pp = o->pp; pc.cp = o->cp;
        if (pp_pack_plan_build(d.lengths.data(), d.n, &pc, &d.plan, &err) != PP_OK) {
            char what[64];
            snprintf(what, sizeof what, "packing step %d's batch", s + 1);
            return usage_error(what, NULL, err.message);
        }
    }
    return 0;
}

/* ============================================================================================
 * the job: what every rank shares and derives alike
 * ============================================================================================ */

struct Job {
    options o;
    gpt_config cfg;
    pp_schedule_kind kind;
    pp_schedule *shape = nullptr;   /* the first step's schedule: which stages each rank holds */
    pp_layers *layers = nullptr;    /* the model split into stages: layers, or units with --hybrid
                                       (gpt_split_units) */
    std::vector<int> moe_slot;      /* [L] each layer's slot in a recording (its MoE index), -1 dense */
    std::vector<unsigned char> is_moe;  /* [L] 1: layer l's MLP is a mixture of experts */
    int replay_slots = 0;           /* MoE layers: the recording's layer axis */
    std::vector<step_data> steps;
    int max_mb = 0, max_tokens = 0; /* the most microbatches per dp rank, tokens per microbatch */
    int64_t max_step_tokens = 0;
};

static void job_free(Job &J)
{
    for (step_data &d : J.steps) pp_pack_plan_free(d.plan);
    pp_layers_free(J.layers);
    pp_schedule_free(J.shape);
}

/* The rules between flags, the data, the first step's schedule and the layer split. Returns 0,
 * or 2 with the reason printed. */
static int job_setup(Job &J)
{
    options *o = &J.o;
    pp_error err;
    if (o->hybrid && o->moe)
        return usage_error("--moe", NULL, "not with --hybrid: its 'E' blocks are the MoE layers");
    if (o->hybrid && o->first_stage_layers) return usage_error("--first-stage-layers", NULL, "not with --hybrid (its '|' split)");
    if (o->hybrid) o->moe = strchr(o->hybrid, 'E') != NULL;
    if (!o->hybrid && !o->layers) o->layers = 4;
    if (o->width % o->heads) return usage_error("--heads", NULL, "must divide --width");
    if (o->topk > o->experts) return usage_error("--topk", NULL, "must be at most --experts");
    if (o->min_len > o->max_len) return usage_error("--min-len", NULL, "must be at most --max-len");
    if (o->max_len > o->capacity) return usage_error("--max-len", NULL, "must be at most --capacity (a bin's tokens)");
    if (o->replay && !o->moe)
        return usage_error("--replay", NULL, o->hybrid ? "needs MoE layers ('E' in --hybrid): there is no routing to replay"
                                                       : "needs --moe (there is no routing to replay)");
    if (o->warmup >= o->steps && o->warmup > 0) return usage_error("--warmup", NULL, "must be less than --steps");
    if (pp_schedule_kind_parse(o->schedule, &J.kind, &err) != PP_OK) return usage_error("--schedule", o->schedule, err.message);
    if (J.kind == PP_DUALPIPE)
        return usage_error("--schedule", o->schedule, "DualPipe keeps two copies of every stage: this example keeps "
                           "one (use dualpipev; examples/gpt.c shows DualPipe on CPU)");
    J.steps.resize(o->steps);
    int rc = make_steps(J.steps, o);
    if (rc) return rc;
    for (const step_data &d : J.steps) {
        J.max_mb = std::max(J.max_mb, d.plan->num_microbatches);
        J.max_step_tokens = std::max(J.max_step_tokens, d.tokens);
        for (int b = 0; b < d.plan->num_bins; b++) J.max_tokens = std::max(J.max_tokens, (int)d.plan->bin_padded_tokens[b]);
    }
    pp_schedule_config sc;
    memset(&sc, 0, sizeof sc);
    sc.kind = J.kind; sc.pp = o->pp; sc.vpp = o->vpp; sc.mb = J.steps[0].plan->num_microbatches; sc.group = o->group;
    if (o->hybrid && !o->vpp && gpt_hybrid_stages(o->hybrid) % o->pp == 0 && gpt_hybrid_stages(o->hybrid) > o->pp)
        sc.vpp = gpt_hybrid_stages(o->hybrid) / o->pp;  /* the pattern's '|' split says the chunks per rank */
    if (pp_schedule_build(&sc, &J.shape, &err) != PP_OK) {
        if (o->group && strstr(err.message, "group=")) return usage_error("--group", NULL, err.message);
        if (!sc.vpp || o->vpp) return usage_error("--schedule", o->schedule, err.message);
        char why[sizeof err.message + 64];  /* the vpp came from the pattern: say so */
        snprintf(why, sizeof why, "its %d stages on pp %d make vpp %d, and %s", gpt_hybrid_stages(o->hybrid), o->pp,
                 sc.vpp, err.message);
        return usage_error("--hybrid", o->hybrid, why);
    }
    pp_layers_config lc;
    memset(&lc, 0, sizeof lc);
    lc.num_layers = o->hybrid ? 0 : o->layers; lc.pp = o->pp; lc.vpp = J.shape->vpp; lc.first = o->first_stage_layers;
    lc.moe_layer_freq = o->moe && !o->hybrid ? "2" : NULL;
    lc.hybrid = o->hybrid;
    if (pp_layers_build(&lc, &J.layers, &err) != PP_OK)
        return usage_error(o->hybrid ? "--hybrid" : o->first_stage_layers ? "--first-stage-layers" : "--layers", o->hybrid,
                           err.message);
    if (o->hybrid) {
        char why[160];
        const int L = gpt_split_layers(J.layers);
        if (gpt_split_check(J.layers, why, sizeof why)) return usage_error("--hybrid", o->hybrid, why);
        if (o->layers && o->layers != L) {
            snprintf(why, sizeof why, "has %d layers, --layers says %d", L, o->layers);
            return usage_error("--hybrid", o->hybrid, why);
        }
        if (L > GPT_MAX_LAYERS) {
            snprintf(why, sizeof why, "has %d layers, at most %d", L, GPT_MAX_LAYERS);
            return usage_error("--hybrid", o->hybrid, why);
        }
        o->layers = L;
    }
    J.moe_slot.resize(o->layers);
    J.is_moe.resize(o->layers);
    for (int l = 0; l < o->layers; l++) {   /* a recording keeps one slot per MoE layer, in layer order */
        J.moe_slot[l] = pp_layers_type_index(J.layers, gpt_split_mlp_item(J.layers, l), PP_LAYER_MOE);
        J.is_moe[l] = J.moe_slot[l] >= 0;
        J.replay_slots += J.moe_slot[l] >= 0;
    }
    gpt_config &c = J.cfg;
    memset(&c, 0, sizeof c);
    c.vocab = o->vocab; c.width = o->width; c.heads = o->heads; c.layers = o->layers; c.max_pos = o->capacity;
    c.hidden = 4 * o->width; c.experts = o->experts; c.topk = o->topk; c.expert_hidden = 2 * o->width;
    c.is_moe = o->moe ? J.is_moe.data() : NULL;
    c.moe_slot = J.moe_slot.data();
    return 0;
}

/* ============================================================================================
 * a microbatch: its host metadata and its device buffers
 * ============================================================================================ */

/* One view of bin `bin` (this cp rank's share, or with cp 1 the whole): what the host decides. */
struct MbHost {
    int bin, T, Tk, nseq;
    const int32_t *cu;              /* the plan's cu_seqlens_padded of the bin */
    std::vector<int64_t> rows;      /* [Tk] pp_pack_plan_gather: the packed position's row, -1 padding */
    std::vector<int32_t> gidx;      /* [T] local token -> microbatch position (pp_cp_plan_indices) */
    std::vector<int32_t> row_span;  /* [T] */
    std::vector<Span> spans;
    int64_t P;
    int labelled;
    pp_replay_map *map[MAX_CHUNKS]; /* with replay: each chunk's layers for these tokens */
};

/* The attention spans of a microbatch view (gpt_gpu_model.h): per sequence, its local rows in
 * runs of consecutive positions (one run, or a chunk pair under cp) cut into blocks of at most
 * `block` rows, each against keys [sequence start, its last query]; per sequence the span with
 * the most keys first. Returns the probabilities' elements (P). */
static int64_t build_spans(MbHost &h, int cp, int NH, int block)
{
    h.spans.clear();
    h.row_span.assign(h.T, -1);
    int64_t P = 0;
    for (int s = 0; s < h.nseq; s++) {
        const int start = h.cu[s], t0 = h.cu[s] / cp, t1 = h.cu[s + 1] / cp;
        const size_t first = h.spans.size();
        for (int t = t0; t < t1;) {
            int e = t + 1;
            while (e < t1 && e - t < block && h.gidx[e] == h.gidx[e - 1] + 1) e++;
            Span sp;
            sp.q0 = t; sp.lq = e - t; sp.k0 = start; sp.lk = h.gidx[e - 1] - start + 1;
            sp.ldp = (sp.lk + 7) / 8 * 8; sp.kv_overwrite = 0; sp.poff = 0;
            h.spans.push_back(sp);
            t = e;
        }
        std::stable_sort(h.spans.begin() + first, h.spans.end(), [](const Span &a, const Span &b) { return a.lk > b.lk; });
        if (cp == 1 && h.spans.size() > first) h.spans[first].kv_overwrite = 1;   /* it holds all the sequence's keys */
    }
    for (size_t i = 0; i < h.spans.size(); i++) {
        Span &sp = h.spans[i];
        sp.poff = P;
        P += (int64_t)NH * sp.lq * sp.ldp;
        for (int t = sp.q0; t < sp.q0 + sp.lq; t++) h.row_span[t] = (int)i;
    }
    return P;
}

/* The host side of bin `bin` for cp rank cp_rank of cp (cp 1: the whole bin, whatever the plan's). */
static pp_status mb_host_build(MbHost &h, const step_data &d, int bin, int cp, int cp_rank, int NH, int block,
                               pp_error *err)
{
    const pp_pack_plan *plan = d.plan;
    pp_status s;
    h.bin = bin;
    h.cu = pp_pack_plan_cu_seqlens_padded(plan, bin);
    h.nseq = pp_pack_plan_bin_size(plan, bin);
    h.Tk = plan->bin_padded_tokens[bin];
    h.T = h.Tk / cp;
    h.rows.resize(h.Tk);
    h.gidx.resize(h.T);
    if ((s = pp_pack_plan_gather(plan, bin, NULL, h.rows.data(), err)) != PP_OK) return s;
    if (cp == 1) for (int t = 0; t < h.T; t++) h.gidx[t] = t;
    else if ((s = pp_cp_plan_indices(plan, bin, cp_rank, h.gidx.data(), err)) != PP_OK) return s;
    h.labelled = 0;
    for (int t = 0; t < h.T; t++) {
        const int64_t r = h.rows[h.gidx[t]];
        h.labelled += r >= 0 && d.labels[r] >= 0;
    }
    h.P = build_spans(h, cp, NH, block);
    return PP_OK;
}

/* Where a microbatch's buffers sit in its regions: the first `upload` bytes the host writes
 * (pinned) and copies up in one call; the rest the device computes. Sized for the most tokens. */
struct MbLayout {
    size_t rows, cu, gidx, row_span, spans, map_rows[MAX_CHUNKS], upload;
    size_t pids, plabels, ppos, ids, labels, pos, lrows, replay[MAX_CHUNKS], total;
};

static MbLayout mb_layout(int Tk, int T, int nchunks, const int *moe_layers, int K, int replay)
{
    MbLayout L;
    size_t at = 0;
    auto take = [&](size_t bytes) { size_t o = at; at += (bytes + 255) & ~(size_t)255; return o; };
    L.rows = take((size_t)Tk * 8); L.cu = take(((size_t)Tk + 1) * 4); L.gidx = take((size_t)T * 4);
    L.row_span = take((size_t)T * 4); L.spans = take((size_t)T * sizeof(Span));
    for (int c = 0; c < MAX_CHUNKS; c++) L.map_rows[c] = take(replay && c < nchunks ? (size_t)T * 8 : 0);
    L.upload = at;
    L.pids = take((size_t)Tk * 4); L.plabels = take((size_t)Tk * 4); L.ppos = take((size_t)Tk * 4);
    L.ids = take((size_t)T * 4); L.labels = take((size_t)T * 4); L.pos = take((size_t)T * 4); L.lrows = take((size_t)T * 8);
    for (int c = 0; c < MAX_CHUNKS; c++)
        L.replay[c] = take(replay && c < nchunks ? (size_t)moe_layers[c] * T * K * 4 : 0);
    L.total = at;
    return L;
}

/* A microbatch on the device: the model's view (Batch) and the buffers behind it. */
struct MbDev {
    Batch b;
    char *host, *dev;           /* its regions (MbLayout) */
    int *replay[MAX_CHUNKS];    /* [the chunk's MoE layers][T][K] */
};

/* Writes h into the microbatch's pinned region, copies it up, then packs on the device: the
 * step's token ids and labels (d_ids, d_labels: [tokens]) into the bin's order with positions
 * restarting at every sequence (pp_cuda_pack), and with cp > 1 this rank's share of each
 * (pp_cuda_cp_split_thd). Returns 0, or 1 with the reason in *err. */
static int mb_upload_and_pack(MbDev &m, const MbHost &h, const MbLayout &L, int cp, int cp_rank, const int *d_ids,
                              const int *d_labels, int nchunks, cudaStream_t s, DataPathTimer &dpt, pp_error *err)
{
    memcpy(m.host + L.rows, h.rows.data(), (size_t)h.Tk * 8);
    memcpy(m.host + L.cu, h.cu, ((size_t)h.nseq + 1) * 4);
    memcpy(m.host + L.gidx, h.gidx.data(), (size_t)h.T * 4);
    memcpy(m.host + L.row_span, h.row_span.data(), (size_t)h.T * 4);
    memcpy(m.host + L.spans, h.spans.data(), h.spans.size() * sizeof(Span));
    for (int c = 0; c < nchunks; c++)
        if (h.map[c] && h.map[c]->num_layers > 0) memcpy(m.host + L.map_rows[c], h.map[c]->rows, (size_t)h.T * 8);
    CK(cudaMemcpyAsync(m.dev, m.host, L.upload, cudaMemcpyHostToDevice, s));
    Batch &b = m.b;
    b.T = h.T; b.Tk = h.Tk; b.nseq = h.nseq;
    b.cu = (const int *)(m.dev + L.cu);
    b.gidx = (const int *)(m.dev + L.gidx);
    b.row_span = (const int *)(m.dev + L.row_span);
    b.spans_dev = (const Span *)(m.dev + L.spans);
    b.spans = h.spans.data(); b.nspans = (int)h.spans.size(); b.P = h.P; b.labelled = h.labelled;
    int *pids = (int *)(m.dev + L.pids), *plabels = (int *)(m.dev + L.plabels), *ppos = (int *)(m.dev + L.ppos);
    int64_t *rows = (int64_t *)(m.dev + L.rows);
    pp_cuda_pack_field f[2] = { { d_ids, pids, 4, 0 }, { d_labels, plabels, 4, -1 } };
    dp_begin(dpt, s);
    if (pp_cuda_pack(rows, b.cu, h.nseq, h.Tk, f, 2, ppos, 4, s, err) != PP_OK) return 1;
    dp_end(dpt, s, DP_PACK);
    if (cp == 1) {
        b.ids = pids; b.labels = plabels; b.pos = ppos; b.rows = rows;
    } else {
        int *ids = (int *)(m.dev + L.ids), *labels = (int *)(m.dev + L.labels), *pos = (int *)(m.dev + L.pos);
        int64_t *lrows = (int64_t *)(m.dev + L.lrows);
        dp_begin(dpt, s);
        if (pp_cuda_cp_split_thd(pids, ids, b.cu, h.nseq, h.Tk, 4, cp, cp_rank, s, err) != PP_OK ||
            pp_cuda_cp_split_thd(plabels, labels, b.cu, h.nseq, h.Tk, 4, cp, cp_rank, s, err) != PP_OK ||
            pp_cuda_cp_split_thd(ppos, pos, b.cu, h.nseq, h.Tk, 4, cp, cp_rank, s, err) != PP_OK ||
            pp_cuda_cp_split_thd(rows, lrows, b.cu, h.nseq, h.Tk, 8, cp, cp_rank, s, err) != PP_OK)
            return 1;
        dp_end(dpt, s, DP_CP);
        b.ids = ids; b.labels = labels; b.pos = pos; b.rows = lrows;
    }
    for (int c = 0; c < MAX_CHUNKS; c++) m.replay[c] = (int *)(m.dev + L.replay[c]);
    return 0;
}

/* ============================================================================================
 * one rank: its communicators, its chunks, its saved-activation slots
 * ============================================================================================ */

/* The executor's boundary tensors (token ids, the residual stream, logits) in blocks of three
 * sizes, the largest each can be, carved from one allocation made before the first step: no
 * cudaMalloc runs while transfers are in flight, and a block freed when the executor regrows a
 * slot is only reused, never given back (the copy engines' peers map it until the end). A class
 * that runs out takes a block of its own (counted in `grown`). */
struct Pool {
    size_t cls[3] = { 0, 0, 0 };
    std::vector<void *> free_blocks[3];
    char *arena = nullptr;
    long long grown = 0;
    size_t *bytes = nullptr;
};

static int pool_class(const Pool &p, size_t bytes)
{
    for (int c = 0; c < 3; c++) if (bytes <= p.cls[c]) return c;
    return -1;
}

static void pool_create(Pool &p, const size_t cls[3], const int count[3], size_t *bytes)
{
    size_t total = 0;
    for (int c = 0; c < 3; c++) { p.cls[c] = (cls[c] + 255) & ~(size_t)255; total += p.cls[c] * count[c]; }
    CK(cudaMalloc(&p.arena, total ? total : 1));
    *bytes += total;
    p.bytes = bytes;
    char *at = p.arena;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < count[c]; i++, at += p.cls[c]) p.free_blocks[c].push_back(at);
}

struct Reference;   /* gpt_gpu_check.h */

struct Rank {
    Job *job = nullptr;
    int rank = 0, world = 1, pp_rank = 0, dp_rank = 0, cp_rank = 0;
    bool lead = true;
    pp_nccl *world_c = nullptr, *pipe_c = nullptr, *cp_c = nullptr, *dpcp_c = nullptr, *emb_c = nullptr;
    pp_transport tp, dpg, embg, worldg;     /* pipeline (executor), dp x cp (gradients), embedding, world */
    bool have_tp = false, have_dpg = false, have_embg = false, have_worldg = false, have_cpg = false;
    cudaStream_t stream = nullptr, grad_stream = nullptr;
    cudaEvent_t ev_chunk = nullptr, ev_grads = nullptr;
    GpuModel M;
    pp_executor *ex = nullptr;
    int nchunks = 0;
    int stage_of[MAX_CHUNKS];       /* chunk -> virtual stage */
    Stage chunk[MAX_CHUNKS];
    int has_head = 0;               /* a chunk of this rank computes the loss */
    /* saved activations: nslots slots (and with replay one for the rollout's forward-only pass),
     * allocated once */
    int nslots = 0;
    size_t slot_bytes = 0;
    char *slots = nullptr;
    int *slot_offs = nullptr;       /* pinned: per slot, per MoE layer, E + 1 expert row offsets */
    std::vector<Acts> acts;
    Pool pool;
    /* this step's microbatches */
    MbLayout lay;
    std::vector<MbHost> mh;
    std::vector<MbDev> md;
    std::vector<void *> meta;
    char *mb_host = nullptr, *mb_dev = nullptr;
    int *d_ids = nullptr, *d_labels = nullptr;     /* [max step tokens] */
    /* router recordings [tokens, MoE layers, K]: as sums of expert + 1 (float), assembled (int) */
    float *rec_sum = nullptr;
    int *recording = nullptr, *rec_again = nullptr, *d_count = nullptr;
    float *record_to = nullptr;     /* the pass now recording, or NULL */
    bool replaying = false;
    double *d_loss = nullptr;
    float *d_norm = nullptr;        /* [2]: sum of squares, then the clip scale */
    pp_cuda_l2norm *norm_plan = nullptr;
    float grad_scale = 1;           /* 1 / the step's labelled tokens */
    size_t bytes = 0;               /* device memory this program allocated */
    std::vector<double> step_ms;
    std::vector<floatX *> head_at;      /* --defer-head-wgrad: each microbatch's logits' gradient (stage_head_rows) */
    std::vector<double> busy_ms;    /* this rank's compute in each timed step (the executor's timeline) */
    double dp_ms[DP_KINDS] = { 0, 0, 0 };
    pp_timer timer = {};            /* CUDA events around every action, for the timeline */
    Reference *ref = nullptr;
    int check_failures = 0;
};

static void *dev_alloc(Rank &R, size_t bytes)
{
    void *p = nullptr;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    R.bytes += bytes;
    return p;
}

/* Exit codes: 1 a failure, 3 a timeout (a peer died or hangs), as mlp_gpu. */
static int exit_code(pp_status s) { return s == PP_ETIMEOUT ? 3 : 1; }
#define PPCK(R, call) do { pp_error e_; pp_status s_ = (call); if (s_ != PP_OK) { \
    fprintf(stderr, "gpt_gpu: rank %d: %s: %s%s%s\n", (R).rank, pp_status_name(s_), e_.message, \
            (R).M.why[0] ? ": " : "", (R).M.why); return exit_code(s_); } } while (0)
#define PHASE(call) do { int rc_ = (call); if (rc_) return rc_; } while (0)

/* ============================================================================================
 * the callbacks pipepar calls
 * ============================================================================================ */

/* A microbatch enters as token ids, crosses stages as the residual stream [T, C] and leaves the
 * last stage as logits [T, V]; T is this cp rank's tokens of the microbatch. */
static size_t cb_tensor_bytes(void *user, int boundary, const pp_mb_info *info)
{
    const gpt_config &c = ((Rank *)user)->M.cfg;
    const size_t T = (size_t)((const MbDev *)info->meta)->b.T;
    if (boundary == info->first_stage) return T * sizeof(int32_t);
    if (boundary == info->last_stage + 1) return T * (size_t)c.vocab * sizeof(floatX);
    return T * (size_t)c.width * sizeof(floatX);
}

static int cb_input(void *user, const pp_mb_info *info, void *x)
{
    Rank &R = *(Rank *)user;
    const Batch &b = ((const MbDev *)info->meta)->b;
    return cudaMemcpyAsync(x, b.ids, (size_t)b.T * sizeof(int32_t), cudaMemcpyDeviceToDevice, R.stream) != cudaSuccess;
}

/* The saved activations of (stage, microbatch): slot info->slot, or the forward-only set (slot
 * -1: the rollout, the only forward-only pass). */
static Acts &acts_of(Rank &R, const pp_mb_info *info, const Batch &b)
{
    const int s = info->slot >= 0 ? info->slot : R.nslots;
    const size_t offs = (size_t)R.M.cfg.layers * (R.M.cfg.experts + 1);
    acts_carve(&R.M.cfg, R.chunk[info->chunk], b.T, b.Tk, b.P, R.M.cp, R.slots + (size_t)s * R.slot_bytes,
               R.slot_offs + (size_t)s * offs, &R.acts[s]);
    return R.acts[s];
}

static int cb_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    Rank &R = *(Rank *)user;
    MbDev &m = *(MbDev *)info->meta;
    Route route;
    route.replay = R.replaying ? m.replay[info->chunk] : nullptr;
    route.record = R.record_to;
    route.record_slots = R.job->replay_slots;
    return stage_forward(R.M, R.chunk[info->chunk], m.b, &route, in, (floatX *)out, acts_of(R, info, m.b));
}

/* The loss stays on the device (reading it here would stall the host every microbatch): weight
 * is the microbatch's labelled tokens, which the host knows; loss 0, the trainer reads d_loss.
 * With --defer-head-wgrad the logits' gradient goes to the rows the deferred product will read
 * (stage_head_rows), and the backward reads it there, not in grad_out. */
static int cb_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss)
{
    Rank &R = *(Rank *)user;
    const Batch &b = ((const MbDev *)info->meta)->b;
    Stage &st = R.chunk[info->chunk];
    if (grad_out && st.head_dout) {
        floatX *rows = stage_head_rows(R.M, st, b.T);
        if (!rows) return 1;
        R.head_at[info->mb] = rows;
        grad_out = rows;
    }
    if (grad_out) stage_loss(R.M, b, (const floatX *)out, (floatX *)grad_out, R.grad_scale, R.d_loss);
    loss->loss = 0;
    loss->weight = (float)b.labelled;
    return 0;
}

/* The whole backward: the model does not split it, so under the zero-bubble kinds each I runs
 * it and each W runs nothing (pipepar's unsplit fallback). */
static int cb_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    Rank &R = *(Rank *)user;
    MbDev &m = *(MbDev *)info->meta;
    Stage &st = R.chunk[info->chunk];
    (void)in;
    if (st.shape.has_head && st.head_dout) grad_out = R.head_at[info->mb];   /* cb_loss wrote it there */
    return stage_backward(R.M, st, m.b, (const floatX *)grad_out, (floatX *)grad_in, acts_of(R, info, m.b));
}

/* The chunk's backwards are done: with --defer-head-wgrad its output layer's weight gradient first;
 * then its gradients are complete, and their sum over the ranks that split the batch (dp x cp)
 * starts on the gradient stream, while the pipeline drains (Megatron-LM's grad_sync_func). */
static int cb_chunk_done(void *user, const pp_mb_info *info)
{
    Rank &R = *(Rank *)user;
    Stage &st = R.chunk[info->chunk];
    stage_head_wgrad(R.M, st);
    if (!R.have_dpg) return 0;
    pp_error e;
    CK(cudaEventRecord(R.ev_chunk, R.stream));
    CK(cudaStreamWaitEvent(R.grad_stream, R.ev_chunk, 0));
    if (pp_group_all_reduce(&R.dpg, st.grads, st.shape.n, R.M.timeout_s, &e) != PP_OK) {
        snprintf(R.M.why, sizeof R.M.why, "chunk_done: the dp x cp gradient sum: %s", e.message);
        return 1;
    }
    return 0;
}

static void *cb_alloc(void *user, size_t bytes)
{
    Rank &R = *(Rank *)user;
    const int c = pool_class(R.pool, bytes);
    if (c >= 0 && !R.pool.free_blocks[c].empty()) {
        void *p = R.pool.free_blocks[c].back();
        R.pool.free_blocks[c].pop_back();
        return p;
    }
    R.pool.grown++;
    void *p = nullptr;
    if (cudaMalloc(&p, c >= 0 ? R.pool.cls[c] : bytes) != cudaSuccess) return nullptr;
    R.bytes += c >= 0 ? R.pool.cls[c] : bytes;
    return p;
}

static void cb_free(void *user, void *ptr, size_t bytes)
{
    Rank &R = *(Rank *)user;
    const int c = pool_class(R.pool, bytes);
    if (c >= 0) R.pool.free_blocks[c].push_back(ptr);  /* freed with the process */
}

/* ============================================================================================
 * setting a rank up
 * ============================================================================================ */

/* The world communicator (rank, world and device from the launcher's environment; without one a
 * world of one process), the grid's coordinates and the groups: the pipeline, cp, dp x cp and
 * embedding communicators, each split from the world. */
static int rank_connect(Rank &R)
{
    const options &o = R.job->o;
    pp_nccl_config nc;
    pp_nccl_id id;
    pp_error e0;
    memset(&nc, 0, sizeof nc);
    nc.timeout_s = o.timeout;
    if (!getenv("WORLD_SIZE")) {        /* one process, one GPU: its own id */
        const char *lr = getenv("LOCAL_RANK");
        nc.world = 1; nc.rank = 0; nc.device = lr ? atoi(lr) : 0;
        nc.bootstrap = PP_NCCL_BOOTSTRAP_ID; nc.id = &id;
        if (pp_nccl_unique_id(&id, &e0) != PP_OK) { fprintf(stderr, "gpt_gpu: %s\n", e0.message); return 1; }
    }
    if (pp_nccl_init(&nc, &R.world_c, &e0) != PP_OK) {
        fprintf(stderr, "gpt_gpu: %s: %s\n", pp_status_name(e0.status), e0.message);
        return exit_code(e0.status);
    }
    R.rank = pp_nccl_rank(R.world_c);
    R.world = pp_nccl_world(R.world_c);
    R.lead = R.rank == 0;
    if (R.world != o.dp * o.cp * o.pp) {
        if (R.lead) fprintf(stderr, "gpt_gpu: --dp=%d --cp=%d --pp=%d: %d ranks, but %d processes run (WORLD_SIZE)\n",
                            o.dp, o.cp, o.pp, o.dp * o.cp * o.pp, R.world);
        return 2;
    }
    pp_grid grid;
    pp_grid_config gc;
    int coord[PP_DIM_COUNT], members[2], nemb = 0;
    memset(&gc, 0, sizeof gc);
    gc.world = R.world; gc.cp = o.cp; gc.dp = o.dp; gc.pp = o.pp;     /* Megatron's order tp-cp-dp-pp */
    PPCK(R, pp_grid_init(&gc, &grid, &e_));
    PPCK(R, pp_grid_coords(&grid, R.rank, coord, &e_));
    R.pp_rank = coord[PP_DIM_PP]; R.dp_rank = coord[PP_DIM_DP]; R.cp_rank = coord[PP_DIM_CP];
    PPCK(R, pp_nccl_split(R.world_c, &grid, PP_GROUP_PP, &R.pipe_c, &e_));
    PPCK(R, pp_nccl_split(R.world_c, &grid, PP_GROUP_CP, &R.cp_c, &e_));
    PPCK(R, pp_nccl_split(R.world_c, &grid, PP_GROUP_DP | PP_GROUP_CP, &R.dpcp_c, &e_));
    const pp_schedule *sh = R.job->shape;
    PPCK(R, pp_grid_embedding_group(&grid, R.rank, pp_stage_rank(sh, sh->num_stages - 1), members, &nemb, &e_));
    PPCK(R, pp_nccl_split_group(R.world_c, members, nemb == 2 ? 2 : 0, &R.emb_c, &e_));
    if (R.lead) printf("%s\n", pp_nccl_describe(R.pipe_c));
    return 0;
}

/* The transports: the pipeline's (the executor's: copy engines between processes of one host,
 * the arrival gate for what stays on NCCL), and the group collectives' of the cp group and the
 * world on the compute stream, of the dp x cp group on the gradient stream. */
static int rank_transports(Rank &R)
{
    const Job &J = *R.job;
    PPCK(R, pp_nccl_transport(R.pipe_c, R.stream, &R.tp, &e_));
    R.have_tp = true;
    if (J.o.pp > 1) {
        const size_t tensor = (size_t)J.max_tokens / J.o.cp * J.o.width * sizeof(floatX);
        const size_t slot = std::max<size_t>(4096, std::min<size_t>((size_t)16 << 20, (tensor + 4095) / 4096 * 4096));
        PPCK(R, pp_nccl_transport_copy_engine(&R.tp, slot, 8, NULL, &e_));
        PPCK(R, pp_nccl_transport_gate(&R.tp, NULL, &e_));
    }
    PPCK(R, pp_nccl_transport(R.world_c, R.stream, &R.worldg, &e_));
    R.have_worldg = true;
    if (J.o.cp > 1) {
        PPCK(R, pp_nccl_transport(R.cp_c, R.stream, &R.M.cpg, &e_));
        R.have_cpg = true;
    }
    if (J.o.dp * J.o.cp > 1) {
        PPCK(R, pp_nccl_transport(R.dpcp_c, R.grad_stream, &R.dpg, &e_));
        R.have_dpg = true;
    }
    if (R.emb_c) {
        PPCK(R, pp_nccl_transport(R.emb_c, R.stream, &R.embg, &e_));
        R.have_embg = true;
    }
    return 0;
}

/* This rank's chunks: the stages its schedule's placement gives it, their layers from the layer
 * split, their weights drawn as gpt_model.h draws them. */
static void rank_chunks(Rank &R)
{
    const Job &J = *R.job;
    const pp_schedule *sh = J.shape;
    R.nchunks = sh->vpp;
    for (int c = 0; c < R.nchunks; c++) {
        const int st = pp_rank_chunk_stage(sh, R.pp_rank, c), ms = pp_stage_model_stage(sh, st);
        R.stage_of[c] = st;
        int u0, units, ends;
        gpt_split_units(J.layers, ms, &u0, &units, &ends);
        stage_create(R.chunk[c], &J.cfg, u0, units, ends, (uint64_t)J.o.seed, R.stream, &R.bytes);
        if (J.o.defer_head_wgrad) stage_defer_head(R.chunk[c], &J.cfg, J.max_mb * (J.max_tokens / J.o.cp), &R.bytes);
        R.has_head |= R.chunk[c].shape.has_head;
    }
    if (J.o.defer_head_wgrad) R.head_at.assign((size_t)J.max_mb, nullptr);
}

/* The largest attention probabilities (elements) of any of this rank's microbatch views. */
static int64_t rank_max_P(const Rank &R, int cp, int cp_rank, bool all_bins)
{
    const Job &J = *R.job;
    int64_t most = 0;
    for (const step_data &d : J.steps) {
        const int nmb = d.plan->num_microbatches;
        for (int i = 0; i < (all_bins ? d.plan->num_bins : nmb); i++) {
            MbHost h;
            pp_error e;
            const int bin = all_bins ? i : d.plan->microbatch_bin[R.dp_rank * nmb + i];
            if (mb_host_build(h, d, bin, cp, cp_rank, J.o.heads, J.o.attn_block, &e) == PP_OK) most = std::max(most, h.P);
        }
    }
    return most;
}

/* The executor (a recipe: any microbatch count up to the most a step has), the saved-activation
 * slots it asks for (pp_executor_saved_slots), the boundary tensors' pool, the microbatches'
 * buffers, the recordings, the gradient norm's plan: every allocation before the first step. */
static int rank_build(Rank &R)
{
    Job &J = *R.job;
    const options &o = J.o;
    const gpt_config &c = J.cfg;
    CK(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&R.grad_stream, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&R.ev_chunk, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&R.ev_grads, cudaEventDisableTiming));
    GpuModel &M = R.M;
    M.cfg = c; M.attn_block = o.attn_block; M.stream = R.stream; M.cp = o.cp; M.cp_rank = R.cp_rank;
    M.sync_comm = R.pipe_c; M.timeout_s = o.timeout; M.why[0] = '\0';
    blas_create(M.blas, R.stream);
    R.bytes += M.blas.workspace_bytes;
    PHASE(rank_transports(R));
    rank_chunks(R);

    pp_executor_config ec;
    memset(&ec, 0, sizeof ec);
    ec.recipe.kind = J.kind; ec.recipe.pp = o.pp; ec.recipe.vpp = J.shape->vpp; ec.recipe.group = o.group;
    ec.split_overlaps = 1;      /* no forward_backward callback: DualPipeV's F&B pairs run as F then B */
    ec.max_mb = J.max_mb;
    ec.transport = R.tp;
    ec.callbacks.user = &R;
    ec.callbacks.tensor_bytes = cb_tensor_bytes;
    ec.callbacks.input = cb_input;
    ec.callbacks.forward = cb_forward;
    ec.callbacks.loss = cb_loss;
    ec.callbacks.backward = cb_backward;
    ec.callbacks.chunk_done = cb_chunk_done;
    ec.allocator.user = &R;
    ec.allocator.alloc = cb_alloc;
    ec.allocator.free = cb_free;
    ec.timeout_s = o.timeout;
    /* every action timed: each rank's compute per step, beside the step, shows how even the stages
     * are. A lowered program holds at most a few actions (compute, sends, receives) per microbatch
     * and chunk; 3 events each. */
    PPCK(R, pp_nccl_event_timer(R.stream, 3 * (8 * J.max_mb * R.nchunks + 16), &R.timer, &e_));
    ec.timer = R.timer;
    ec.record_timeline = 1;
    PPCK(R, pp_executor_create(&ec, &R.ex, &e_));

    /* saved activations: one slot holds this rank's largest chunk at the most tokens */
    const int Tk = J.max_tokens, T = Tk / o.cp;
    const int64_t P = rank_max_P(R, o.cp, R.cp_rank, false);
    R.nslots = pp_executor_saved_slots(R.ex);
    for (int k = 0; k < R.nchunks; k++)
        R.slot_bytes = std::max(R.slot_bytes, acts_carve(&c, R.chunk[k], T, Tk, P, o.cp, nullptr, nullptr, nullptr));
    R.slots = (char *)dev_alloc(R, R.slot_bytes * (R.nslots + (o.replay ? 1 : 0)));   /* + the rollout's */
    CK(cudaMallocHost(&R.slot_offs, sizeof(int) * (size_t)(R.nslots + 1) * c.layers * (c.experts + 1)));
    R.acts.resize(R.nslots + 1);
    scratch_create(M.s, &c, T, Tk, P, o.cp, &R.bytes);

    /* the executor's boundary tensors: ids, the residual stream, logits (where the head is; a
     * rollout keeps every microbatch's until the step ends: pp_step_result.outputs) */
    const size_t cls[3] = { (size_t)T * 4, (size_t)T * c.width * sizeof(floatX), (size_t)T * c.vocab * sizeof(floatX) };
    const int inflight = R.nchunks * std::min(J.max_mb, o.pp + 2);
    const int count[3] = { 4 * inflight + 8, 4 * inflight + 8, R.has_head ? (o.replay ? J.max_mb : 0) + 4 : 0 };
    pool_create(R.pool, cls, count, &R.bytes);

    /* the microbatches' regions, the step's tokens, the recordings, the loss and the norm */
    int moe_of[MAX_CHUNKS] = { 0 };
    for (int k = 0; k < R.nchunks; k++) moe_of[k] = R.chunk[k].moe_layers;
    R.lay = mb_layout(Tk, T, R.nchunks, moe_of, c.topk, o.replay);
    R.mh.resize(J.max_mb); R.md.resize(J.max_mb); R.meta.resize(J.max_mb);
    CK(cudaMallocHost(&R.mb_host, R.lay.upload * J.max_mb));
    R.mb_dev = (char *)dev_alloc(R, R.lay.total * J.max_mb);
    for (int m = 0; m < J.max_mb; m++) {
        R.md[m].host = R.mb_host + (size_t)m * R.lay.upload;
        R.md[m].dev = R.mb_dev + (size_t)m * R.lay.total;
        R.meta[m] = &R.md[m];
        memset(R.mh[m].map, 0, sizeof R.mh[m].map);
    }
    R.d_ids = (int *)dev_alloc(R, (size_t)J.max_step_tokens * 4);
    R.d_labels = (int *)dev_alloc(R, (size_t)J.max_step_tokens * 4);
    if (J.replay_slots) {
        const size_t n = (size_t)J.max_step_tokens * J.replay_slots * c.topk;
        R.rec_sum = (float *)dev_alloc(R, n * 4);
        R.recording = (int *)dev_alloc(R, n * 4);
        R.rec_again = (int *)dev_alloc(R, n * 4);
    }
    R.d_count = (int *)dev_alloc(R, 4);
    R.d_loss = (double *)dev_alloc(R, sizeof(double));
    R.d_norm = (float *)dev_alloc(R, 2 * sizeof(float));
    /* the norm counts each parameter once: not the head's copy of the tied weight */
    std::vector<pp_cuda_tensor> grads;
    for (int k = 0; k < R.nchunks; k++) {
        Stage &st = R.chunk[k];
        if (st.shape.has_head && !st.shape.has_embedding) {
            const size_t a = st.g.wte_out - st.grads, b = a + (size_t)c.vocab * c.width;
            grads.push_back({ st.grads, (int64_t)a, PP_CUDA_F32 });
            grads.push_back({ st.grads + b, (int64_t)(st.shape.n - b), PP_CUDA_F32 });
        } else {
            grads.push_back({ st.grads, (int64_t)st.shape.n, PP_CUDA_F32 });
        }
    }
    PPCK(R, pp_cuda_l2norm_create(grads.data(), (int)grads.size(), &R.norm_plan, &e_));
    CK(cudaStreamSynchronize(R.stream));
    return 0;
}

static void rank_free(Rank &R)
{
    pp_executor_free(R.ex);
    pp_nccl_timer_free(&R.timer);
    if (R.have_tp) pp_nccl_transport_free(&R.tp);
    if (R.have_dpg) pp_nccl_transport_free(&R.dpg);
    if (R.have_embg) pp_nccl_transport_free(&R.embg);
    if (R.have_worldg) pp_nccl_transport_free(&R.worldg);
    if (R.have_cpg) pp_nccl_transport_free(&R.M.cpg);
    pp_cuda_l2norm_free(R.norm_plan);
    for (int k = 0; k < R.nchunks; k++) stage_free(R.chunk[k]);
    for (MbHost &h : R.mh) for (int c = 0; c < MAX_CHUNKS; c++) pp_replay_map_free(h.map[c]);
    scratch_free(R.M.s);
    blas_free(R.M.blas);
    if (R.slot_offs) cudaFreeHost(R.slot_offs);
    if (R.mb_host) cudaFreeHost(R.mb_host);
    pp_nccl_free(R.emb_c); pp_nccl_free(R.dpcp_c); pp_nccl_free(R.cp_c); pp_nccl_free(R.pipe_c); pp_nccl_free(R.world_c);
}

#include "gpt_gpu_check.h"      /* Reference (the model whole on one GPU), --check, --selftest */

/* ============================================================================================
 * a training step
 * ============================================================================================ */

/* Router replay maps for microbatch m: each chunk's MoE layers, for this cp rank's tokens, in
 * its local order (pp_replay_config_from_stage, pp_replay_map_build), checked against the layers
 * the chunk computes (a map from another split would replay other layers' routes). */
static pp_status build_replay_maps(Rank &R, MbHost &h, const step_data &d, pp_error *err)
{
    const Job &J = *R.job;
    for (int k = 0; k < R.nchunks; k++) {
        const Stage &st = R.chunk[k];
        pp_replay_config rc;
        pp_status s;
        memset(&rc, 0, sizeof rc);
        rc.cp_rank = R.cp_rank;
        pp_replay_map_free(h.map[k]);
        h.map[k] = nullptr;
        if ((s = pp_replay_config_from_stage(J.layers, pp_stage_model_stage(J.shape, R.stage_of[k]), &rc, err)) != PP_OK ||
            (s = pp_replay_map_build(d.plan, h.bin, &rc, &h.map[k], err)) != PP_OK)
            return s;
        int ok = h.map[k]->num_layers == st.moe_layers && (h.map[k]->num_layers == 0 || h.map[k]->num_tokens == h.T);
        for (int i = 0; ok && i < h.map[k]->num_layers; i++) {
            const int l = gpt_split_item_layer(J.layers, h.map[k]->layers[i]);
            ok = l >= st.shape.first && l < st.shape.first + st.shape.count && gpt_layer_is_moe(&J.cfg, l) &&
                 GPT_HAS_MLP(&st.shape, l - st.shape.first);
        }
        if (!ok)
            return pp_error_set(err, PP_EINVAL, "stage %d computes layers [%d,%d) (%d MoE), but its replay map is for "
                                "layers [%d,%d) (%d MoE): built from another layer split or stage numbering",
                                R.stage_of[k], st.shape.first, st.shape.first + st.shape.count, st.moe_layers,
                                gpt_split_item_layer(J.layers, rc.first_layer),
                                gpt_split_layer_end(J.layers, rc.last_layer), h.map[k]->num_layers);
    }
    return PP_OK;
}

/* This rank's microbatches of the step: its dp rank's bins, its cp share of each, packed on the
 * device; with replay, each chunk's replay map too. */
static int prepare_microbatches(Rank &R, const step_data &d)
{
    const Job &J = *R.job;
    const int nmb = d.plan->num_microbatches;
    CK(cudaMemcpyAsync(R.d_ids, d.ids.data(), (size_t)d.tokens * 4, cudaMemcpyHostToDevice, R.stream));
    CK(cudaMemcpyAsync(R.d_labels, d.labels.data(), (size_t)d.tokens * 4, cudaMemcpyHostToDevice, R.stream));
    for (int m = 0; m < nmb; m++) {
        MbHost &h = R.mh[m];
        const int bin = d.plan->microbatch_bin[R.dp_rank * nmb + m];
        PPCK(R, mb_host_build(h, d, bin, J.o.cp, R.cp_rank, J.o.heads, J.o.attn_block, &e_));
        if (J.o.replay) PPCK(R, build_replay_maps(R, h, d, &e_));
        pp_error e;
        if (mb_upload_and_pack(R.md[m], h, R.lay, J.o.cp, R.cp_rank, R.d_ids, R.d_labels, R.nchunks, R.stream, R.M.dpt, &e)) {
            fprintf(stderr, "gpt_gpu: rank %d: microbatch %d: %s\n", R.rank, m, e.message);
            return 1;
        }
    }
    return 0;
}

/* Replay: each microbatch's chunks take their layers' recorded routes for their tokens, on the
 * device (pp_cuda_replay_gather over the map's rows and recording slots). */
static int replay_gather(Rank &R, int nmb)
{
    const Job &J = *R.job;
    for (int m = 0; m < nmb; m++)
        for (int k = 0; k < R.nchunks; k++) {
            const pp_replay_map *map = R.mh[m].map[k];
            if (!map || map->num_layers == 0) continue;
            pp_cuda_replay r;
            memset(&r, 0, sizeof r);
            r.recorded = R.recording; r.recorded_bytes = 4; r.moe_layers = J.replay_slots; r.topk = J.cfg.topk;
            r.slots = map->payload; r.layer_count = map->num_layers;
            r.rows = R.md[m].dev + R.lay.map_rows[k]; r.index_bytes = 8; r.tokens = map->num_tokens;
            r.dst = R.md[m].replay[k]; r.dst_bytes = 4;
            dp_begin(R.M.dpt, R.stream);
            PPCK(R, pp_cuda_replay_gather(&r, R.stream, &e_));
            dp_end(R.M.dpt, R.stream, DP_REPLAY);
        }
    return 0;
}

/* A pass of the step that records the routing: every rank writes its layers' choices for its
 * tokens (as expert + 1, zeros elsewhere) and one sum over the world assembles the recording into
 * `out` on every rank. A token of an MoE layer that no rank recorded fails the step. */
static int run_recorded(Rank &R, const pp_step *ps, const step_data &d, int *out, pp_step_result *res)
{
    const size_t n = (size_t)d.tokens * R.job->replay_slots * R.job->cfg.topk;
    int bad = 0;
    CK(cudaMemsetAsync(R.rec_sum, 0, n * sizeof(float), R.stream));
    R.record_to = R.rec_sum;
    pp_error e;
    pp_status s = pp_run_step(R.ex, ps, res, &e);
    R.record_to = nullptr;
    if (s != PP_OK) {
        fprintf(stderr, "gpt_gpu: rank %d: %s: %s%s%s\n", R.rank, pp_status_name(s), e.message, R.M.why[0] ? ": " : "", R.M.why);
        return exit_code(s);
    }
    PPCK(R, pp_group_all_reduce(&R.worldg, R.rec_sum, n, R.M.timeout_s, &e_));
    CK(cudaMemsetAsync(R.d_count, 0, sizeof(int), R.stream));
    recording_finish_kernel<<<grid_for(n), 256, 0, R.stream>>>(out, R.rec_sum, n, R.job->cfg.experts, R.d_count);
    CK(cudaMemcpyAsync(&bad, R.d_count, sizeof(int), cudaMemcpyDeviceToHost, R.stream));
    PPCK(R, pp_nccl_sync(R.world_c, R.stream, R.M.timeout_s, &e_));
    if (bad) {
        fprintf(stderr, "gpt_gpu: rank %d: the recording has %d entries that no rank (or more than one) wrote\n", R.rank, bad);
        return 1;
    }
    return 0;
}

/* The gradients, complete: the gradient stream's dp x cp sums joined, then the tied weight: a
 * rank holding both ends adds its two copies, then the embedding group sums over its members. */
static int finish_gradients(Rank &R)
{
    const size_t n = (size_t)R.M.cfg.vocab * R.M.cfg.width;
    float *a = nullptr, *b = nullptr;
    if (R.have_dpg) {
        CK(cudaEventRecord(R.ev_grads, R.grad_stream));
        CK(cudaStreamWaitEvent(R.stream, R.ev_grads, 0));
    }
    for (int k = 0; k < R.nchunks; k++) {
        Stage &st = R.chunk[k];
        if (st.shape.has_embedding) a = st.g.wte;
        if (st.shape.has_head && !st.shape.has_embedding) b = st.g.wte_out;
    }
    if (a && b) tied_sum_kernel<<<grid_for(n), 256, 0, R.stream>>>(a, b, n);
    if (R.have_embg) PPCK(R, pp_group_all_reduce(&R.embg, a ? a : b, n, R.M.timeout_s, &e_));
    return 0;
}

/* The global norm over the pipeline (every dp x cp replica holds the same gradients, so the
 * pipeline's sum is the model's), the clip scale and AdamW, all on the device; the gradients are
 * zeroed for the next step. */
static int update(Rank &R, int step)
{
    const options &o = R.job->o;
    PPCK(R, pp_cuda_l2norm_sumsq(R.norm_plan, R.d_norm, 0, NULL, R.stream, &e_));
    PPCK(R, pp_nccl_grad_norm(R.pipe_c, R.d_norm, (float)o.clip, o.clip > 0 ? R.d_norm + 1 : NULL, R.stream, &e_));
    for (int k = 0; k < R.nchunks; k++) {
        stage_adamw(R.M, R.chunk[k], o.clip > 0 ? R.d_norm + 1 : nullptr, (float)o.lr, 0.1f, step + 1);
        CK(cudaMemsetAsync(R.chunk[k].grads, 0, R.chunk[k].shape.n * sizeof(float), R.stream));
    }
    return 0;
}

/* Every rank meets with its stream drained: the bounds of a timed step. */
static int meet(Rank &R)
{
    PPCK(R, pp_nccl_sync(R.world_c, R.stream, R.M.timeout_s, &e_));
    PPCK(R, pp_nccl_barrier(R.world_c, R.M.timeout_s, &e_));
    return 0;
}

/* One training step of this rank, from the data to the update. Timed: from the data's upload to
 * complete gradients, the tied weight's copies summed (what bench/megatron_gpt_bench.py times of
 * Megatron-LM: its forward_backward_func, then that sum); the update after. */
static int rank_step(Rank &R, int step)
{
    Job &J = *R.job;
    const step_data &d = J.steps[step];
    const int nmb = d.plan->num_microbatches;
    pp_step ps;
    pp_step_result res;
    memset(&ps, 0, sizeof ps);
    ps.mb_meta = R.meta.data();
    ps.num_mb = nmb;                    /* this step's bin count: the executor's recipe runs any */
    R.grad_scale = 1.0f / (float)d.labelled;
    R.M.why[0] = '\0';
    PHASE(meet(R));
    const double t0 = now_s();
    CK(cudaMemsetAsync(R.d_loss, 0, sizeof(double), R.stream));
    PHASE(prepare_microbatches(R, d));
    if (J.o.replay) {                   /* a rollout records the routing, training replays it */
        pp_step fo = ps;
        fo.forward_only = 1;
        PHASE(run_recorded(R, &fo, d, R.recording, &res));
        PHASE(replay_gather(R, nmb));
        R.replaying = true;
        PHASE(run_recorded(R, &ps, d, R.rec_again, &res));
        R.replaying = false;
        int differ = 0;
        const size_t n = (size_t)d.tokens * J.replay_slots * J.cfg.topk;
        CK(cudaMemsetAsync(R.d_count, 0, sizeof(int), R.stream));
        count_diff_kernel<<<grid_for(n), 256, 0, R.stream>>>(R.recording, R.rec_again, n, R.d_count);
        CK(cudaMemcpyAsync(&differ, R.d_count, sizeof(int), cudaMemcpyDeviceToHost, R.stream));
        PPCK(R, pp_nccl_sync(R.world_c, R.stream, R.M.timeout_s, &e_));
        if (differ) {
            fprintf(stderr, "gpt_gpu: rank %d: step %d: the routing in training differs from the rollout's in %d "
                    "choices\n", R.rank, step + 1, differ);
            return 1;
        }
    } else {
        PPCK(R, pp_run_step(R.ex, &ps, &res, &e_));
    }
    PHASE(finish_gradients(R));
    PHASE(meet(R));
    const double ms = (now_s() - t0) * 1e3;
    double dp_ms[DP_KINDS] = { 0, 0, 0 };
    dp_collect(R.M.dpt, dp_ms);
    if (step >= J.o.warmup) {
        pp_timeline tl;
        double busy = 0;
        PPCK(R, pp_executor_timeline(R.ex, &tl, &e_));
        for (int i = 0; i < tl.length; i++)
            if (tl.actions[i].op <= PP_OP_FB && tl.ready[i] >= 0) busy += tl.end[i] - tl.ready[i];
        R.busy_ms.push_back(busy * 1e3);
        R.step_ms.push_back(ms);
        for (int k = 0; k < DP_KINDS; k++) R.dp_ms[k] += dp_ms[k];
    }

    /* the loss: summed over the ranks holding the last stage, over the global labelled tokens */
    double lsum = 0;
    CK(cudaMemcpyAsync(&lsum, R.d_loss, sizeof lsum, cudaMemcpyDeviceToHost, R.stream));
    CK(cudaStreamSynchronize(R.stream));        /* drained already (meet): no peer to wait for */
    float total[1] = { R.has_head ? (float)lsum : 0.0f };
    PPCK(R, pp_nccl_all_reduce_host(R.world_c, total, 1, R.M.timeout_s, &e_));
    const double loss = total[0] / (double)d.labelled;
    if (J.o.check) PHASE(check_step(R, step, loss));
    PHASE(update(R, step));
    float norm[2] = { 0, 0 };
    CK(cudaMemcpyAsync(norm, R.d_norm, sizeof norm, cudaMemcpyDeviceToHost, R.stream));
    PPCK(R, pp_nccl_sync(R.world_c, R.stream, R.M.timeout_s, &e_));
    if (R.lead) {
        printf("%5d  %8.5f  %7lld  %4d  %8.5f  %9.1f", step + 1, loss, (long long)d.tokens, nmb, sqrt((double)norm[0]), ms);
        if (J.o.check && R.ref) print_check(R, step);
        printf("%s\n", J.o.replay ? "  routing = rollout's" : "");
        fflush(stdout);
    }
    return 0;
}

/* ============================================================================================
 * the report: step time, tokens per second per GPU, peak memory, the data path's share
 * ============================================================================================ */

static double median_of(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One line per run, on rank 0 (the bench reads it): the median timed step, tokens per second per
 * GPU, each rank's peak memory (the most of any rank printed), the data path's share of the step
 * (rank 0's and the largest of any rank); then each rank's compute (its median over the timed
 * steps): no step is shorter than the busiest rank's, so it shows what uneven stages cost. */
static int report(Rank &R)
{
    const Job &J = *R.job;
    const int n = (int)R.step_ms.size();
    if (n == 0) return 0;
    double tokens = 0;
    for (int s = J.o.warmup; s < J.o.steps; s++) tokens += (double)J.steps[s].tokens;
    tokens /= n;
    const double step = median_of(R.step_ms), dp = (R.dp_ms[0] + R.dp_ms[1] + R.dp_ms[2]) / n;
    std::vector<float> v(4 * (size_t)R.world, 0.0f);
    v[4 * R.rank] = (float)(R.bytes / 1073741824.0);
    v[4 * R.rank + 1] = (float)dp;
    v[4 * R.rank + 2] = (float)step;
    v[4 * R.rank + 3] = (float)median_of(R.busy_ms);
    PPCK(R, pp_nccl_all_reduce_host(R.world_c, v.data(), (int)v.size(), R.M.timeout_s, &e_));
    if (!R.lead) return 0;
    float peak = 0, dp_most = 0, busiest = 0;
    for (int r = 0; r < R.world; r++) {
        peak = std::max(peak, v[4 * r]);
        dp_most = std::max(dp_most, v[4 * r + 1] / v[4 * r + 2]);
        busiest = std::max(busiest, v[4 * r + 3]);
    }
    printf("timing: step %.1f ms (median of %d, min %.1f)  tokens/s/gpu %.0f  peak %.2f GiB (the most of any rank)  "
           "data path %.3f ms = %.3f%% of the step (pack %.3f, cp %.3f, replay %.3f; the most of any rank %.3f%%)\n",
           step, n, *std::min_element(R.step_ms.begin(), R.step_ms.end()), tokens / (step * 1e-3) / R.world, peak, dp,
           100.0 * dp / step, R.dp_ms[DP_PACK] / n, R.dp_ms[DP_CP] / n, R.dp_ms[DP_REPLAY] / n, 100.0 * dp_most);
    printf("compute per rank, ms of the step:");
    for (int r = 0; r < R.world; r++) printf(" %.1f", v[4 * r + 3]);
    printf("; the busiest rank computes %.1f%% of the step%s\n", 100.0 * busiest / step,
           R.job->o.defer_head_wgrad ? " (the schedule's actions: not the deferred output-layer weight gradient)" : "");
    if (R.pool.grown) printf("note: the boundary-tensor pool grew by %lld blocks during steps\n", R.pool.grown);
    return 0;
}

/* ============================================================================================
 * main
 * ============================================================================================ */

int main(int argc, char **argv)
{
    /* Kernels load when the program starts, not at their first launch inside a step, where a
     * load may wait for kernels that wait on a peer (NCCL's), across ranks (CUDA's lazy-loading
     * caveat); NCCL connects its peers at set-up, not inside the step. A value the user set wins. */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    setvbuf(stdout, NULL, _IOLBF, 0);
    static Job J;
    options *o = &J.o;
    memset(o, 0, sizeof *o);
    o->schedule = (char *)"1f1b"; o->dp = o->cp = o->pp = 1; o->width = 64; o->heads = 4;
    o->vocab = 64; o->experts = 8; o->topk = 2; o->steps = 3; o->warmup = 1; o->seqs = 24; o->min_len = 3;
    o->max_len = 48; o->capacity = 64; o->attn_block = 1024; o->lr = 0.01; o->clip = 1.0; o->seed = 1; o->timeout = 120;
    int rc = parse_flags(argc, argv, o);
    if (rc >= 0) return rc;
    if (o->steps == 1) o->warmup = 0;
    if (o->unit_costs) {                /* one GPU, the model whole: each part's time */
        if (o->hybrid || o->pp > 1 || o->cp > 1 || o->dp > 1 || o->selftest || o->check)
            return usage_error("--unit-costs", o->unit_costs, "times the model whole on one GPU: not with --hybrid, "
                               "--pp, --cp, --dp, --selftest or --check");
        if ((rc = job_setup(J)) != 0) return rc;
        rc = unit_costs(J);
        job_free(J);
        return rc;
    }
    if (o->selftest) {                  /* one GPU, the model against gpt_model.h's */
        if (o->hybrid) return usage_error("--selftest", NULL, "runs the model whole on one GPU: not with --hybrid");
        o->moe = 1; o->dp = o->cp = o->pp = 1; o->steps = 1; o->warmup = 0;
        if ((rc = job_setup(J)) != 0) return rc;
        rc = selftest(J);
        job_free(J);
        return rc;
    }
    if ((rc = job_setup(J)) != 0) return rc;

    static Rank R;
    R.job = &J;
    if ((rc = rank_connect(R)) != 0) return rc;
    if ((rc = rank_build(R)) != 0) return rc;
    if (R.lead) {
        printf("gpt_gpu (%s): %d layers (%s), width %d, %d heads, vocab %d; %d ranks = dp %d x cp %d x pp %d\n",
               GPT_PRECISION, o->layers, !o->moe ? "dense" : o->hybrid ? "MoE where the pattern says 'E'" :
               "MoE in every other layer", o->width, o->heads, o->vocab,
               R.world, o->dp, o->cp, o->pp);
        printf("        %s, vpp %d, stages %s; %d sequences a step of %d..%d tokens, bins of %d, attention blocks "
               "of %d rows%s%s\n", pp_schedule_kind_name(J.kind), J.shape->vpp, J.layers->layout ? J.layers->layout : J.layers->pattern,
               o->seqs, o->min_len, o->max_len, o->capacity, o->attn_block, o->replay ? ", router replay" : "",
               o->check ? ", checked against the model whole on one GPU" : "");
        printf("rank 0: %d saved-activation slots of %.1f MiB (pp_executor_saved_slots), %.2f GiB allocated\n",
               R.nslots, R.slot_bytes / 1048576.0, R.bytes / 1073741824.0);
        if (o->check) print_check_header(J);
        printf(" step      loss   tokens  mb/rank |grad|    step ms%s\n",
               o->check ? "   one-GPU loss  loss err  grad err  match" : "");
    }
    if (o->check && (rc = check_setup(R)) != 0) return rc;
    for (int step = 0; step < o->steps; step++)
        if ((rc = rank_step(R, step)) != 0) return rc;
    if ((rc = report(R)) != 0) return rc;
    if (o->check && (rc = check_verdict(R)) != 0) { rank_free(R); job_free(J); return rc; }
    rank_free(R);
    job_free(J);
    return 0;
}
