/* gpt.c — a small GPT (dense or mixture-of-experts) trained with everything pipepar composes:
 * a dp x cp x pp rank grid, any schedule, packed variable-length sequences, context parallelism,
 * router replay, a tied embedding, data-parallel gradient reduction, a global clip and AdamW.
 *
 *     build/gpt --pp 2 --vpp 2 --cp 2 --dp 2 --schedule interleaved --moe --replay --steps 3 --check
 *     build/gpt --pp 4 --schedule zbv --check
 *     build/gpt --help
 *
 * The model (examples/gpt_model.h) computes a range of layers of one packed microbatch; this file
 * is the trainer around it, one thread per rank, as a multi-GPU trainer runs one process per GPU:
 *
 *   data     each step a global batch of sequences of random lengths (a counting task: every
 *            sequence counts up from a random token by a random stride) packed into bins with
 *            pp_pack_plan_build under NeMo RL's rules; a dp rank's bins are its microbatches, and
 *            how many there are changes from step to step (the executor's recipe takes any count)
 *   cp       each microbatch split 2*cp ways, load-balanced (pp_cp_plan_indices); attention
 *            all-gathers keys and values over the cp group and sums their gradients back
 *   replay   with --moe --replay, a forward-only rollout records every MoE layer's choices per
 *            token; training replays them, each stage and cp rank taking its part through the
 *            replay maps (pp_replay_map_build, pp_replay_gather)
 *   step     pp_run_step calls the model per (stage, microbatch) in the schedule's order; saved
 *            activations live in pp_executor_saved_slots(ex) slots, allocated once and indexed by
 *            pp_mb_info.slot; when a chunk's last backward is done (chunk_done) its gradients are
 *            summed over the dp x cp group at once, while the pipeline drains
 *   update   the tied embedding's two copies summed over the embedding group; every gradient and
 *            the loss divided by the global count of labelled tokens (pp_loss's rule); one gradient
 *            norm over the whole pipeline, the tied weight counted once; clip; AdamW
 *   check    --check trains the same model on one thread, unsplit (no pipeline, no cp, every dp
 *            rank's bins in one pass), on the same packed batches, and compares the loss and every
 *            gradient each step (relative error at most 1e-5, see reference_step)                    */
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
#include "gpt_model.h"
#include <errno.h>
#include <stdio.h>

#define TOLERANCE 1e-5      /* --check: the largest relative error of the loss and of any gradient */
#define MAX_CHUNKS 8        /* chunks per rank: --vpp's bound */
#define MAX_LAYERS 64       /* --layers' bound */

/* ============================================================================================
 * options
 * ============================================================================================ */

typedef struct options {
    int dp, cp, pp, ranks, vpp, first_stage_layers, group;
    char *schedule, *hybrid;
    int layers, width, heads, vocab, moe, experts, topk, replay;
    char *replay_save, *replay_file, *unit_costs;
    int steps, seqs, min_len, max_len, capacity, seq_multiple;
    char *lengths;
    double lr, clip;
    int seed, check, gradcheck, defer_head_wgrad;
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
    {"--dp", 'i', OPT(dp), 1, 8, "data-parallel replicas"},
    {"--cp", 'i', OPT(cp), 1, 8, "context-parallel ranks per replica"},
    {"--pp", 'i', OPT(pp), 1, 8, "pipeline ranks"},
    {"--ranks", 'i', OPT(ranks), 1, 512, "threads (default dp*cp*pp; must equal it)"},
    {"--schedule", 's', OPT(schedule), 0, 0, "1f1b, interleaved, zbv, dualpipev, ... (default 1f1b)"},
    {"--vpp", 'i', OPT(vpp), 1, MAX_CHUNKS, "chunks per rank (default: the schedule's)"},
    {"--group", 'i', OPT(group), 1, 1024,
     "interleaved: microbatches a chunk runs before the next (Megatron's microbatch_group_size_per_vp_stage; "
     "default pp)"},
    {"--first-stage-layers", 'i', OPT(first_stage_layers), 1, MAX_LAYERS,
     "layers of pipeline rank 0 (Megatron's, over its chunks)"},
    {"--hybrid", 's', OPT(hybrid), 0, 0,
     "the split in half layers: Megatron's hybrid pattern, '*' a layer's attention, '-' its MLP ('E' MoE), "
     "'|' between stages, e.g. '*-*-*|-*-*-' (default: whole layers, even)"},
    {"--layers", 'i', OPT(layers), 1, MAX_LAYERS, "decoder layers (default 8; with --hybrid, the pattern's)"},
    {"--width", 'i', OPT(width), 2, 256, "the residual stream (default 16)"},
    {"--heads", 'i', OPT(heads), 1, 16, "attention heads (default 2)"},
    {"--vocab", 'i', OPT(vocab), 4, 4096, "tokens (default 32)"},
    {"--moe", 'b', OPT(moe), 0, 1, "a mixture of experts in every other layer"},
    {"--experts", 'i', OPT(experts), 2, 64, "experts per MoE layer (default 4)"},
    {"--topk", 'i', OPT(topk), 1, 64, "experts per token (default 2)"},
    {"--replay", 'b', OPT(replay), 0, 1, "record the routing in a rollout, replay it in training"},
    {"--replay-save", 's', OPT(replay_save), 0, 0, "write every step's recorded routing to FILE"},
    {"--replay-file", 's', OPT(replay_file), 0, 0, "replay the routing in FILE (no rollout)"},
    {"--steps", 'i', OPT(steps), 1, 10000, "training steps (default 3)"},
    {"--seqs", 'i', OPT(seqs), 1, 4096, "sequences per step (default 16)"},
    {"--min-len", 'i', OPT(min_len), 1, 512, "shortest sequence (default 3)"},
    {"--max-len", 'i', OPT(max_len), 1, 512, "longest sequence (default 24)"},
    {"--lengths", 's', OPT(lengths), 0, 0, "every step's sequence lengths, e.g. 5,17,9 (not random)"},
    {"--capacity", 'i', OPT(capacity), 1, 512, "tokens per bin (microbatch) (default 32)"},
    {"--seq-multiple", 'i', OPT(seq_multiple), 1, 512, "pad each sequence to a multiple (default 2*cp)"},
    {"--lr", 'f', OPT(lr), 0, 1, "AdamW's learning rate (default 0.01)"},
    {"--clip", 'f', OPT(clip), 0, 1e6, "largest gradient norm, 0: none (default 1)"},
    {"--seed", 'i', OPT(seed), 0, 2147483647, "weights and data (default 1)"},
    {"--defer-head-wgrad", 'b', OPT(defer_head_wgrad), 0, 1,
     "the output layer's weight gradient in one product when its stage's last backward is done "
     "(Megatron-LM's defer_embedding_wgrad_compute): under 1F1B, while the pipeline drains; keeps every "
     "microbatch's logits' gradient until then"},
    {"--check", 'b', OPT(check), 0, 1, "train the one-thread model alongside and compare"},
    {"--gradcheck", 'b', OPT(gradcheck), 0, 1, "check the model's backward by finite differences, then exit"},
    {"--unit-costs", 's', OPT(unit_costs), 0, 0,
     "time each layer's attention and MLP, forward and backward, on one thread into FILE, then exit "
     "(pipepar search --layer-costs FILE ... --hybrid finds half-layer splits on them)"},
};
#define NFLAGS ((int)(sizeof FLAGS / sizeof FLAGS[0]))

static int usage_error(const char *flag_name, const char *value, const char *rule)
{
    if (value) fprintf(stderr, "gpt: %s=%s: %s\n", flag_name, value, rule);
    else fprintf(stderr, "gpt: %s: %s\n", flag_name, rule);
    return 2;
}

static void print_help(void)
{
    int i;
    printf("usage: gpt [flags]   (train a small GPT over a dp x cp x pp grid of threads)\n");
    for (i = 0; i < NFLAGS; i++) {
        char bounds[48] = "";
        if (FLAGS[i].type == 'i' || FLAGS[i].type == 'f')
            snprintf(bounds, sizeof bounds, " (%g..%g)", FLAGS[i].lo, FLAGS[i].hi);
        printf("  %-22s %s%s\n", FLAGS[i].name, FLAGS[i].help, bounds);
    }
}

/* Fills o from argv; returns -1 to go on, else the exit code (0 after --help, 2 on bad input). */
static int parse_flags(int argc, char **argv, options *o)
{
    int seen[NFLAGS] = {0}, i, f;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        char *end;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { print_help(); return 0; }
        for (f = 0; f < NFLAGS && strcmp(a, FLAGS[f].name); f++) {}
        if (f == NFLAGS) return usage_error(a, NULL, "unknown flag (see --help)");
        if (seen[f]++) return usage_error(a, NULL, "given twice");
        if (FLAGS[f].type == 'b') { *(int *)((char *)o + FLAGS[f].at) = 1; continue; }
        if (i + 1 >= argc) return usage_error(a, NULL, "needs a value");
        v = argv[++i];
        if (FLAGS[f].type == 's') { *(char **)((char *)o + FLAGS[f].at) = (char *)v; continue; }
        errno = 0;
        if (FLAGS[f].type == 'i') {
            long x = strtol(v, &end, 10);
            if (end == v || *end || errno || x < FLAGS[f].lo || x > FLAGS[f].hi) {
                char rule[64];
                snprintf(rule, sizeof rule, "must be an integer in %g..%g", FLAGS[f].lo, FLAGS[f].hi);
                return usage_error(a, v, rule);
            }
            *(int *)((char *)o + FLAGS[f].at) = (int)x;
        } else {
            double x = strtod(v, &end);
            if (end == v || *end || errno || !(x >= FLAGS[f].lo && x <= FLAGS[f].hi)) {
                char rule[64];
                snprintf(rule, sizeof rule, "must be a number in %g..%g", FLAGS[f].lo, FLAGS[f].hi);
                return usage_error(a, v, rule);
            }
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
    int32_t *lengths;           /* [n] */
    int64_t tokens;             /* Σ lengths */
    int32_t *ids;               /* [tokens] the sequences back to back: the rollout's token order */
    int32_t *labels;            /* [tokens] each token's successor in its sequence, -1 for the last */
    uint64_t hash;              /* of lengths and ids: names the data in a replay file */
    pp_pack_plan *plan;         /* bins -> (dp rank, microbatch), cu_seqlens, padding */
    int32_t *recording;         /* [tokens, MoE layers, topk] the rollout's router choices (--replay) */
} step_data;

/* A counting task: sequence i counts from a random token by a random stride 1..3 (tokens
 * 1 .. V-1, 0 is padding). Its first token is random; the others follow from the two before
 * them, so attention must find the stride. */
static void make_sequences(step_data *d, const options *o, int step)
{
    uint64_t rng = (uint64_t)o->seed * 1000003u + (uint64_t)step;
    int64_t at = 0;
    int i, t, V1 = o->vocab - 1;
    for (i = 0; i < d->n; i++) {
        int32_t first = (int32_t)(gpt_mix(&rng) % (uint64_t)V1), stride = 1 + (int32_t)(gpt_mix(&rng) % 3);
        for (t = 0; t < d->lengths[i]; t++, at++) {
            d->ids[at] = 1 + (first + t * stride) % V1;
            d->labels[at] = t + 1 < d->lengths[i] ? 1 + (first + (t + 1) * stride) % V1 : -1;
        }
    }
    d->hash = 1469598103934665603ULL;               /* FNV-1a */
    for (i = 0; i < d->n; i++) d->hash = (d->hash ^ (uint64_t)d->lengths[i]) * 1099511628211ULL;
    for (at = 0; at < d->tokens; at++) d->hash = (d->hash ^ (uint64_t)d->ids[at]) * 1099511628211ULL;
}

/* Every step's batch and its packing. NeMo RL's rules: each sequence padded to a multiple of
 * tp*cp*2 (so its 2*cp chunks are equal), and at least dp*pp bins, a multiple of dp*pp, whenever
 * pp > 1 (dp otherwise), so every dp rank gets the same number of microbatches and a pipeline
 * never runs fewer microbatches than it has ranks. pipepar's own default asks for dp*pp only with
 * vpp > 1: the example sets both fields to follow NeMo RL. Returns 0, or 2 (bad input). */
static int make_steps(step_data *steps, const options *o)
{
    int s, i;
    for (s = 0; s < o->steps; s++) {
        step_data *d = &steps[s];
        pp_pack_plan_config pc;
        pp_error err;
        uint64_t rng = (uint64_t)o->seed * 7919u + (uint64_t)s + 1;
        const char *p = o->lengths;
        d->n = o->lengths ? 1 : o->seqs;
        if (p) for (; *p; p++) d->n += *p == ',';
        d->lengths = (int32_t *)calloc((size_t)d->n, sizeof(int32_t));
        for (i = 0, p = o->lengths; i < d->n; i++) {
            if (o->lengths) {
                char *end;
                long x = strtol(p, &end, 10);
                if (end == p || (*end && *end != ',') || x < 1 || x > 512) {
                    return usage_error("--lengths", o->lengths, "a comma-separated list of lengths, each 1..512");
                }
                d->lengths[i] = (int32_t)x;
                p = *end ? end + 1 : end;
            } else {
                d->lengths[i] = o->min_len + (int32_t)(gpt_mix(&rng) % (uint64_t)(o->max_len - o->min_len + 1));
            }
            d->tokens += d->lengths[i];
        }
        d->ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)d->tokens);
        d->labels = (int32_t *)malloc(sizeof(int32_t) * (size_t)d->tokens);
        make_sequences(d, o, s);
        memset(&pc, 0, sizeof pc);
        pc.pack.capacity = o->capacity;
        pc.pack.min_bin_count = pc.pack.bin_count_multiple = o->pp > 1 ? o->dp * o->pp : o->dp;
        pc.dp = o->dp; pc.pp = o->pp; pc.cp = o->cp;
        pc.seq_multiple = o->seq_multiple;          /* 0: the default, tp*cp*2 (or 1 without cp) */
        if (pp_pack_plan_build(d->lengths, d->n, &pc, &d->plan, &err) != PP_OK) {
            char flag_text[64];
            snprintf(flag_text, sizeof flag_text, "packing step %d's batch", s + 1);
            return usage_error(flag_text, NULL, err.message);
        }
    }
    return 0;
}

static void free_steps(step_data *steps, int n)
{
    int s;
    for (s = 0; steps && s < n; s++) {
        free(steps[s].lengths); free(steps[s].ids); free(steps[s].labels); free(steps[s].recording);
        pp_pack_plan_free(steps[s].plan);
    }
    free(steps);
}

/* ============================================================================================
 * the job: what every rank shares (read-only during a step)
 * ============================================================================================ */

typedef struct rank_state rank_state;

typedef struct reference {  /* --check: the whole model on one thread */
    gpt_stage solo;         /* trained on its own from the same start: its loss curve is compared */
    gpt_stage at;           /* the pipeline's weights of the step: its gradients are compared */
    gpt_scratch scratch;
    gpt_acts acts;
    float *f, *out;
    int32_t *ints;
    double loss;            /* the one-thread training's mean loss per labelled token this step */
    double grad_err, loss_err;
    char worst[96];         /* the tensor with the largest gradient error, or the replica that differs */
} reference;

typedef struct rank_report {   /* a rank's saved activations, printed once the ranks are done */
    int slots, peak_live;
    size_t slot_bytes;
} rank_report;

typedef struct job {
    options o;
    gpt_config cfg;
    pp_grid grid;
    pp_schedule_kind kind;
    pp_layers *layers;          /* the model split into model stages: layers, or units with --hybrid
                                   (gpt_split_units) */
    pp_schedule *shape;         /* the first step's schedule: which stages each rank holds */
    int replay_slots;           /* MoE layers: the recording's layer axis */
    step_data *steps;
    int max_mb, max_tokens;     /* the most microbatches per dp rank, tokens per microbatch */
    int *sched_peak;            /* [pp] the largest live peak of any step's schedule (pp_schedule_rank_peaks) */
    rank_state **ranks;         /* [world], for the check on rank 0 */
    rank_report *report;        /* [world] */
    reference ref;
    int mismatches;
    int *moe_slot;              /* [L] each layer's slot in a recording (its MoE index), -1 dense */
    unsigned char *is_moe;      /* [L] 1: layer l's MLP is a mixture of experts */
} job;

/* ============================================================================================
 * one rank: its groups, its stages, its saved-activation slots
 * ============================================================================================ */

typedef struct mb_meta {    /* one microbatch of this rank, handed to every callback */
    gpt_batch b;
    int32_t *ids, *labels, *pos, *gidx, *seq_start, *src;
    int64_t *rows;
    int32_t *replay[MAX_CHUNKS];    /* [MoE layers of the chunk's stage][T][K]: choices to replay */
} mb_meta;

struct rank_state {
    job *job;
    int rank, pp_rank, dp_rank, cp_rank;
    pp_transport pipe;          /* this pipeline (the executor's) */
    pp_transport cpg;           /* cp group: attention's all-gather and reduce */
    pp_transport dpcp;          /* dp x cp group: the ranks that split the batch, gradients summed */
    pp_transport emb;           /* embedding group: first and last stage (emb_size 2) */
    pp_transport pair;          /* dualpipe: the rank holding the same two model stages */
    pp_transport world;         /* every rank: the rollout's recording is assembled over it */
    int emb_size, has_pair;
    pp_executor *ex;
    int nchunks;
    int stage_of[MAX_CHUNKS];   /* chunk -> virtual stage */
    int model_stage[MAX_CHUNKS];/* chunk -> model stage (its layers): the stage, or stage % pp (dualpipe) */
    gpt_stage model[MAX_CHUNKS];/* chunk's weights */
    /* saved activations: slots of slot_nf floats and slot_ni ints, allocated once */
    int nslots;
    size_t slot_nf, slot_ni;
    float *slot_f;
    int32_t *slot_i;
    gpt_layer_acts *slot_layers;/* [nslots + 1][MAX_LAYERS]: each slot's views (the last: forward only) */
    int *slot_owner;            /* [nslots] stage * 65536 + microbatch holding it, -1 free */
    int live, peak_live;
    gpt_scratch scratch;
    gpt_cp cpx;
    mb_meta *meta;              /* [max_mb] this step's microbatches */
    void **meta_ptrs;
    int32_t *record;            /* [tokens, slots, K] routing this rank saw (rollout or training) */
    int recording;              /* 1 while a pass records */
    int replaying;
    const int32_t *replay_src;  /* the recording being replayed */
    char why[256];              /* why a callback failed (the executor reports only its return value) */
};

/* A callback's failure: the reason kept for the rank's error message, nonzero returned. */
static int callback_failed(rank_state *r, const char *what, const pp_mb_info *info)
{
    snprintf(r->why, sizeof r->why, "%s (stage %d, microbatch %d, slot %d)", what, info->stage, info->mb, info->slot);
    return 1;
}

static int cp_all_gather(void *user, const float *send, float *recv, size_t count)
{
    rank_state *r = (rank_state *)user;
    return pp_group_all_gather(&r->cpg, send, recv, count * sizeof(float), 0, NULL) != PP_OK;
}

static int cp_all_reduce(void *user, float *buf, size_t count)
{
    rank_state *r = (rank_state *)user;
    return pp_group_all_reduce(&r->cpg, buf, count, 0, NULL) != PP_OK;
}

static int slot_key(const pp_mb_info *info) { return info->stage * 65536 + info->mb; }

/* The saved activations of (stage, microbatch): slot info->slot, or the forward-only buffer. */
static gpt_acts acts_of(rank_state *r, const pp_mb_info *info, const mb_meta *mm)
{
    gpt_acts a;
    size_t nf, ni;
    int s = info->slot >= 0 ? info->slot : r->nslots;
    a.layer = r->slot_layers + (size_t)s * MAX_LAYERS;
    gpt_acts_carve(&r->job->cfg, &r->model[info->chunk], mm->b.T, mm->b.Tk, r->slot_f + (size_t)s * r->slot_nf,
                   r->slot_i + (size_t)s * r->slot_ni, &a, &nf, &ni);
    return a;
}

/* ============================================================================================
 * microbatches: what a rank's chunks need of microbatch `bin`
 * ============================================================================================ */

/* This rank's view of bin `bin`: its cp share (pp_cp_plan_indices, _rows), or with whole set the
 * unsplit microbatch (the check's). Token ids and labels come from the batch by the rows. */
static int meta_build(mb_meta *mm, const step_data *d, int bin, int cp_rank, int whole, pp_error *err)
{
    const pp_pack_plan *plan = d->plan;
    const int32_t *cu = pp_pack_plan_cu_seqlens_padded(plan, bin);
    int nseq = pp_pack_plan_bin_size(plan, bin), Tk = plan->bin_padded_tokens[bin], T = whole ? Tk : Tk / plan->cp;
    int i, j, p;
    memset(mm, 0, sizeof *mm);
    mm->ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
    mm->labels = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
    mm->pos = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
    mm->gidx = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
    mm->rows = (int64_t *)malloc(sizeof(int64_t) * (size_t)Tk);
    mm->seq_start = (int32_t *)malloc(sizeof(int32_t) * (size_t)Tk);
    mm->src = (int32_t *)malloc(sizeof(int32_t) * (size_t)Tk);
    if (!mm->ids || !mm->labels || !mm->pos || !mm->gidx || !mm->rows || !mm->seq_start || !mm->src)
        return pp_error_set(err, PP_ENOMEM, "out of memory");
    for (i = 0; i < nseq; i++)
        for (p = cu[i]; p < cu[i + 1]; p++) mm->seq_start[p] = cu[i];
    if (whole) {
        for (j = 0; j < T; j++) mm->gidx[j] = j;
        if (pp_pack_plan_gather(plan, bin, NULL, mm->rows, err) != PP_OK) return err->status;
    } else if (pp_cp_plan_indices(plan, bin, cp_rank, mm->gidx, err) != PP_OK ||
               pp_cp_plan_rows(plan, bin, cp_rank, NULL, mm->rows, err) != PP_OK ||
               pp_cp_thd_gather(cu, nseq, plan->cp, mm->src, err) != PP_OK) {
        return err->status;
    }
    for (j = 0; j < T; j++) {
        mm->ids[j] = mm->rows[j] >= 0 ? d->ids[mm->rows[j]] : 0;
        mm->labels[j] = mm->rows[j] >= 0 ? d->labels[mm->rows[j]] : -1;
        mm->pos[j] = mm->gidx[j] - mm->seq_start[mm->gidx[j]];
    }
    mm->b.T = T; mm->b.Tk = Tk;
    mm->b.ids = mm->ids; mm->b.labels = mm->labels; mm->b.pos = mm->pos; mm->b.gidx = mm->gidx;
    mm->b.seq_start = mm->seq_start; mm->b.src = mm->src; mm->b.rows = mm->rows;
    return PP_OK;
}

static void meta_free(mb_meta *mm)
{
    int c;
    free(mm->ids); free(mm->labels); free(mm->pos); free(mm->gidx); free(mm->rows); free(mm->seq_start); free(mm->src);
    for (c = 0; c < MAX_CHUNKS; c++) free(mm->replay[c]);
    memset(mm, 0, sizeof *mm);
}

/* Router replay for one microbatch: each chunk takes the recorded choices of its own MoE layers
 * for this cp rank's tokens, in its local order (pp_replay_config_from_stage, pp_replay_map_build,
 * pp_replay_gather). The map is checked against the layers the chunk computes: a map built from
 * another layer split, or for (rank, chunk) in another placement's numbering, would replay other
 * layers' routes. */
static pp_status meta_replay(mb_meta *mm, rank_state *r, const step_data *d, int bin, pp_error *err)
{
    job *jb = r->job;
    int c, i, K = jb->cfg.topk;
    for (c = 0; c < r->nchunks; c++) {
        const gpt_stage *st = &r->model[c];
        int want = 0;
        pp_replay_config rc;
        pp_replay_map *map = NULL;
        pp_status s;
        memset(&rc, 0, sizeof rc);
        rc.cp_rank = r->cp_rank;
        if ((s = pp_replay_config_from_stage(jb->layers, r->model_stage[c], &rc, err)) != PP_OK ||
            (s = pp_replay_map_build(d->plan, bin, &rc, &map, err)) != PP_OK)
            return s;
        for (i = 0; i < st->count; i++) want += st->w.layer[i].wrouter != NULL;
        for (i = 0; i < map->num_layers && want == map->num_layers; i++) {
            int l = gpt_split_item_layer(jb->layers, map->layers[i]);
            if (!gpt_layer_is_moe(&jb->cfg, l) || l < st->first || l >= st->first + st->count ||
                !GPT_HAS_MLP(st, l - st->first))
                want = -1;
        }
        if (want != map->num_layers) {
            s = pp_error_set(err, PP_EINVAL, "stage %d computes layers [%d,%d), but its replay map is for layers "
                             "[%d,%d): built from another layer split or stage numbering", r->stage_of[c], st->first,
                             st->first + st->count, gpt_split_item_layer(jb->layers, rc.first_layer),
                             gpt_split_layer_end(jb->layers, rc.last_layer));
            pp_replay_map_free(map);
            return s;
        }
        if (map->num_layers > 0) {
            mm->replay[c] = (int32_t *)malloc(sizeof(int32_t) * (size_t)map->num_layers * map->num_tokens * K);
            if (!mm->replay[c]) { pp_replay_map_free(map); return pp_error_set(err, PP_ENOMEM, "out of memory"); }
            s = pp_replay_gather(map, r->replay_src, d->tokens, jb->replay_slots, K, mm->replay[c], err);
        }
        pp_replay_map_free(map);
        if (s != PP_OK) return s;
    }
    return PP_OK;
}

/* ============================================================================================
 * the callbacks pipepar calls
 * ============================================================================================ */

/* A microbatch enters as token ids, crosses stages as the residual stream [T, C] and leaves the
 * last stage as logits [T, V]; T is this cp rank's tokens of the microbatch. */
static size_t cb_tensor_bytes(void *user, int boundary, const pp_mb_info *info)
{
    const gpt_config *c = &((rank_state *)user)->job->cfg;
    size_t T = (size_t)((const mb_meta *)info->meta)->b.T;
    if (boundary == info->first_stage) return T * sizeof(int32_t);
    if (boundary == info->last_stage + 1) return T * (size_t)c->vocab * sizeof(float);
    return T * (size_t)c->width * sizeof(float);
}

static int cb_input(void *user, const pp_mb_info *info, void *x)
{
    const mb_meta *mm = (const mb_meta *)info->meta;
    (void)user;
    memcpy(x, mm->ids, sizeof(int32_t) * (size_t)mm->b.T);
    return 0;
}

static int cb_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    rank_state *r = (rank_state *)user;
    mb_meta *mm = (mb_meta *)info->meta;
    gpt_acts a = acts_of(r, info, mm);
    gpt_route route;
    if (info->slot >= 0) {      /* the slot is this (stage, microbatch)'s until its backward ends */
        if (r->slot_owner[info->slot] != -1) return callback_failed(r, "forward: its slot is another's, still live", info);
        r->slot_owner[info->slot] = slot_key(info);
        if (++r->live > r->peak_live) r->peak_live = r->live;
    }
    route.replay = r->replaying ? mm->replay[info->chunk] : NULL;
    route.record = r->recording ? r->record : NULL;
    route.record_slots = r->job->replay_slots;
    if (gpt_forward(&r->job->cfg, &r->model[info->chunk], &mm->b, &route, &r->cpx, in, (float *)out, &a, &r->scratch))
        return callback_failed(r, "forward: the cp group's all-gather failed", info);
    return 0;
}

/* The sum of the local tokens' losses and its count (the weight): pp_loss's per-token rule. */
static int cb_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss)
{
    const mb_meta *mm = (const mb_meta *)info->meta;
    int count;
    double sum = gpt_loss(&((rank_state *)user)->job->cfg, &mm->b, (const float *)out, (float *)grad_out, &count);
    loss->loss = (float)sum;
    loss->weight = (float)count;
    loss->metrics[0] = (float)sum;
    return 0;
}

static int release_slot(rank_state *r, const pp_mb_info *info)
{
    if (r->slot_owner[info->slot] != slot_key(info))
        return callback_failed(r, "backward: its slot holds another (stage, microbatch)", info);
    r->slot_owner[info->slot] = -1;
    r->live--;
    return 0;
}

/* backward_input does the whole backward: this model does not split its backward (I then W), so
 * under the zero-bubble kinds the W only ends the slot's life, as the executor counts it. */
static int cb_backward_input(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    rank_state *r = (rank_state *)user;
    mb_meta *mm = (mb_meta *)info->meta;
    gpt_acts a = acts_of(r, info, mm);
    (void)in;                   /* the slot holds the stage's input (and, on stage 0, mm the ids) */
    if (r->slot_owner[info->slot] != slot_key(info))
        return callback_failed(r, "backward: its slot holds another (stage, microbatch)", info);
    switch (gpt_backward(&r->job->cfg, &r->model[info->chunk], &mm->b, &r->cpx, (const float *)grad_out,
                         (float *)grad_in, &a, &r->scratch)) {
    case 0: break;
    case -2: return callback_failed(r, "backward: more output-layer rows than --defer-head-wgrad keeps", info);
    default: return callback_failed(r, "backward: the cp group's all-reduce failed", info);
    }
    return 0;
}

static int cb_backward_weight(void *user, const pp_mb_info *info, const void *in, const void *grad_out)
{
    (void)in; (void)grad_out;
    return release_slot((rank_state *)user, info);
}

static int cb_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    int rc = cb_backward_input(user, info, in, grad_out, grad_in);
    return rc ? rc : release_slot((rank_state *)user, info);
}

/* The chunk's backwards are done: with --defer-head-wgrad its output layer's weight gradient
 * first, then its gradients are complete: sum them over the ranks that split the batch (dp x cp)
 * now, while the pipeline drains (Megatron-LM's grad_sync_func). */
static int cb_chunk_done(void *user, const pp_mb_info *info)
{
    rank_state *r = (rank_state *)user;
    gpt_stage *st = &r->model[info->chunk];
    gpt_head_wgrad(&r->job->cfg, st);  /* --defer-head-wgrad: the output layer's, now */
    if (pp_group_all_reduce(&r->dpcp, st->grads, st->n, 0, NULL) != PP_OK)
        return callback_failed(r, "chunk_done: the dp x cp gradient all-reduce failed", info);
    return 0;
}

/* ============================================================================================
 * router recordings: assembled from every rank, compared, written and read
 * ============================================================================================ */

/* Every rank wrote the choices of its own layers for its own tokens into r->record (-1
 * elsewhere); one sum over the world (each entry written by exactly one rank) gives every rank
 * the whole recording in the rollout's token order. Returns nonzero on a collective failure or
 * when a token of some MoE layer was recorded by no rank. */
static pp_status assemble_recording(rank_state *r, int64_t tokens, int32_t *out, pp_error *err)
{
    size_t n = (size_t)tokens * r->job->replay_slots * r->job->cfg.topk, i;
    float *f = (float *)malloc(sizeof(float) * n);
    pp_status s;
    if (!f) return pp_error_set(err, PP_ENOMEM, "out of memory");
    for (i = 0; i < n; i++) f[i] = (float)(r->record[i] + 1);
    s = pp_group_all_reduce(&r->world, f, n, 0, err);
    for (i = 0; s == PP_OK && i < n; i++) {
        out[i] = (int32_t)f[i] - 1;
        if (out[i] < 0 || out[i] >= r->job->cfg.experts)
            s = pp_error_set(err, PP_EINVAL, "recording entry %zu: %d: not one rank's expert choice", i, (int)out[i]);
    }
    free(f);
    return s;
}

/* The replay file: a header naming the model, then per step its data and one line per token
 * (K experts for each MoE layer, in layer order):
 *     pipepar gpt router recording
 *     moe-layers 0,2,4,6 experts 4 topk 2
 *     step 1 tokens 187 data 5e0c6f3a81d2b9e4
 *     3 1 0 2 1 3 2 0
 *     ...                                                                                    */
static void moe_layers_text(const job *jb, char *buf, size_t size)
{
    int l, at = 0;
    buf[0] = '\0';
    for (l = 0; l < jb->cfg.layers && (size_t)at < size; l++)
        if (gpt_layer_is_moe(&jb->cfg, l)) at += snprintf(buf + at, size - (size_t)at, "%s%d", at ? "," : "", l);
}

static int write_recordings(const job *jb, const char *path)
{
    FILE *f = fopen(path, "w");
    char moe[256];
    int s, k, per = jb->replay_slots * jb->cfg.topk;
    int64_t t;
    if (!f) { fprintf(stderr, "gpt: --replay-save=%s: %s\n", path, strerror(errno)); return 1; }
    moe_layers_text(jb, moe, sizeof moe);
    fprintf(f, "pipepar gpt router recording\nmoe-layers %s experts %d topk %d\n", moe, jb->cfg.experts, jb->cfg.topk);
    for (s = 0; s < jb->o.steps; s++) {
        const step_data *d = &jb->steps[s];
        fprintf(f, "step %d tokens %lld data %016llx\n", s + 1, (long long)d->tokens, (unsigned long long)d->hash);
        for (t = 0; t < d->tokens; t++)
            for (k = 0; k < per; k++) fprintf(f, "%d%c", (int)d->recording[t * per + k], k + 1 < per ? ' ' : '\n');
    }
    if (ferror(f) | (fclose(f) != 0)) { fprintf(stderr, "gpt: --replay-save=%s: write failed\n", path); return 1; }
    return 0;
}

/* Reads every step's recording from path into jb->steps[].recording. A file from another model
 * (MoE layers, experts, top-k) or other data (a step's tokens) is refused, naming what differs.
 * Returns 0, or 2 (bad input). */
static int read_recordings(job *jb, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512], moe[256], want[256];
    int s, k, experts, topk, per = jb->replay_slots * jb->cfg.topk;
    if (!f) return usage_error("--replay-file", path, strerror(errno));
    moe_layers_text(jb, want, sizeof want);
    if (!fgets(line, sizeof line, f) || strcmp(line, "pipepar gpt router recording\n") ||
        !fgets(line, sizeof line, f) || sscanf(line, "moe-layers %255s experts %d topk %d", moe, &experts, &topk) != 3) {
        fclose(f);
        return usage_error("--replay-file", path, "not a router recording of build/gpt (see --replay-save)");
    }
    if (strcmp(moe, want) || experts != jb->cfg.experts || topk != jb->cfg.topk) {
        char rule[700];
        snprintf(rule, sizeof rule, "recorded from a model with MoE layers %s, %d experts, top-%d; this model has "
                 "MoE layers %s, %d experts, top-%d", moe, experts, topk, want, jb->cfg.experts, jb->cfg.topk);
        fclose(f);
        return usage_error("--replay-file", path, rule);
    }
    for (s = 0; s < jb->o.steps; s++) {
        step_data *d = &jb->steps[s];
        long long tokens;
        unsigned long long hash;
        int step;
        int64_t t;
        if (!fgets(line, sizeof line, f) || sscanf(line, "step %d tokens %lld data %llx", &step, &tokens, &hash) != 3 ||
            step != s + 1) {
            char rule[96];
            snprintf(rule, sizeof rule, "holds fewer than the %d steps asked for, or is cut short", jb->o.steps);
            fclose(f);
            return usage_error("--replay-file", path, rule);
        }
        if (tokens != d->tokens || hash != d->hash) {
            char rule[200];
            snprintf(rule, sizeof rule, "step %d was recorded over other data (%lld tokens; this run's batch has %lld): "
                     "use the --seed, --seqs and lengths it was recorded with", s + 1, tokens, (long long)d->tokens);
            fclose(f);
            return usage_error("--replay-file", path, rule);
        }
        for (t = 0; t < d->tokens; t++)
            for (k = 0; k < per; k++) {
                int e;
                if (fscanf(f, "%d", &e) != 1 || e < 0 || e >= experts) {
                    char rule[96];
                    snprintf(rule, sizeof rule, "step %d, token %lld: expected %d experts in 0..%d", s + 1,
                             (long long)t, per, experts - 1);
                    fclose(f);
                    return usage_error("--replay-file", path, rule);
                }
                d->recording[t * per + k] = e;
            }
        if (!fgets(line, sizeof line, f)) line[0] = '\0';     /* the end of the last token's line */
    }
    fclose(f);
    return 0;
}

/* ============================================================================================
 * after the step: the tied embedding, the scaling rule, the global norm, AdamW
 * ============================================================================================ */

/* The tied weight lives twice, in the first stage (the embedding) and the last (the output
 * layer), each copy with half of the gradient. Under the V placements both ends sit on pipeline
 * rank 0, under DualPipe on ranks 0 and pp-1 twice over: a rank first adds the copies it holds,
 * then the embedding group (two ranks under the looped placement) sums over its members. */
static pp_status sum_tied_embedding(rank_state *r, pp_error *err)
{
    float *a = NULL, *b = NULL;
    size_t n = (size_t)r->job->cfg.vocab * r->job->cfg.width, i;
    int c;
    for (c = 0; c < r->nchunks; c++) {
        gpt_stage *st = &r->model[c];
        if (st->has_embedding) a = st->g.wte;
        if (st->has_head && st->g.wte_out != st->g.wte) b = st->g.wte_out;
    }
    if (a && b)
        for (i = 0; i < n; i++) { a[i] += b[i]; b[i] = a[i]; }
    if (r->emb_size == 2) return pp_group_all_reduce(&r->emb, a ? a : b, n, 0, err);
    return PP_OK;
}

/* DualPipe holds every model stage twice (down on rank j, up on rank pp-1-j): the two copies'
 * gradients are summed, the lower model stage first on both ranks. */
static pp_status sum_dual_copies(rank_state *r, pp_error *err)
{
    int lo = r->model_stage[0] < r->model_stage[1] ? 0 : 1;
    pp_status s = pp_group_all_reduce(&r->pair, r->model[lo].grads, r->model[lo].n, 0, err);
    return s == PP_OK ? pp_group_all_reduce(&r->pair, r->model[1 - lo].grads, r->model[1 - lo].n, 0, err) : s;
}

/* Σ g² of the chunks' gradients, each parameter of the model once: DualPipe's up copies and the
 * output layer's copy of the tied weight are left out. */
static double grad_sumsq(const rank_state *r)
{
    double ss = 0;
    size_t i, n = (size_t)r->job->cfg.vocab * r->job->cfg.width;
    int c;
    for (c = 0; c < r->nchunks; c++) {
        const gpt_stage *st = &r->model[c];
        if (r->stage_of[c] != r->model_stage[c]) continue;
        for (i = 0; i < st->n; i++) ss += (double)st->grads[i] * st->grads[i];
        if (st->has_head && st->g.wte_out != st->g.wte)
            for (i = 0; i < n; i++) ss -= (double)st->g.wte_out[i] * st->g.wte_out[i];
    }
    return ss;
}

static float clip_scale(double norm, double max_norm)
{
    return max_norm > 0 && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
}

/* ============================================================================================
 * the check: the same model, the same batch, one thread, no split
 * ============================================================================================ */

static int reference_init(reference *ref, const job *jb)
{
    const gpt_config *c = &jb->cfg;
    size_t nf, ni;
    memset(ref, 0, sizeof *ref);
    if (gpt_stage_init(&ref->solo, c, 0, c->layers, (uint64_t)jb->o.seed) ||
        gpt_stage_init(&ref->at, c, 0, c->layers, (uint64_t)jb->o.seed) ||
        gpt_scratch_init(&ref->scratch, c, jb->max_tokens, jb->max_tokens))
        return -1;
    ref->acts.layer = (gpt_layer_acts *)calloc((size_t)c->layers, sizeof(gpt_layer_acts));
    if (!ref->acts.layer) return -1;
    gpt_acts_carve(c, &ref->solo, jb->max_tokens, jb->max_tokens, NULL, NULL, &ref->acts, &nf, &ni);
    ref->f = (float *)malloc(sizeof(float) * (nf ? nf : 1));
    ref->ints = (int32_t *)malloc(sizeof(int32_t) * (ni ? ni : 1));
    ref->out = (float *)malloc(sizeof(float) * (size_t)jb->max_tokens * c->vocab);
    return ref->f && ref->ints && ref->out ? 0 : -1;
}

static void reference_free(reference *ref)
{
    gpt_stage_free(&ref->solo);
    gpt_stage_free(&ref->at);
    gpt_scratch_free(&ref->scratch);
    free(ref->acts.layer); free(ref->f); free(ref->ints); free(ref->out);
}

/* The tensors of a stage, by layer and name (layer -1: the embedding, L: the head); the output
 * layer's copy of the tied weight is "wte" too, so both copies meet the one-thread model's. */
typedef struct tensor { int layer; const char *name; float *w, *g; size_t n; } tensor;

static int stage_tensors(const gpt_config *c, const gpt_stage *st, tensor *out)
{
    size_t C = (size_t)c->width, V = (size_t)c->vocab;
    int k, n = 0;
#define TENSOR(l, nm, field, count) do { out[n].layer = (l); out[n].name = (nm); out[n].w = st->w.field; \
        out[n].g = st->g.field; out[n].n = (count); n++; } while (0)
    if (st->has_embedding) { TENSOR(-1, "wte", wte, V * C); TENSOR(-1, "wpe", wpe, (size_t)c->max_pos * C); }
    for (k = 0; k < st->count; k++) {
        int l = st->first + k, moe = st->w.layer[k].wrouter != NULL;
        size_t nfc = moe ? (size_t)c->experts * c->expert_hidden * C : (size_t)c->hidden * C;
        if (GPT_HAS_ATTN(st, k)) {      /* a stage may hold half a layer (gpt_stage) */
            TENSOR(l, "ln1", layer[k].ln1, C); TENSOR(l, "wqkv", layer[k].wqkv, 3 * C * C);
            TENSOR(l, "wo", layer[k].wo, C * C);
        }
        if (!GPT_HAS_MLP(st, k)) continue;
        TENSOR(l, "ln2", layer[k].ln2, C);
        if (moe) TENSOR(l, "wrouter", layer[k].wrouter, (size_t)c->experts * C);
        TENSOR(l, "wfc", layer[k].wfc, nfc); TENSOR(l, "wproj", layer[k].wproj, nfc);
    }
    if (st->has_head) {
        TENSOR(c->layers, "lnf", lnf, C);
        if (!st->has_embedding) TENSOR(-1, "wte", wte_out, V * C);
    }
#undef TENSOR
    return n;
}
#define MAX_TENSORS (7 * MAX_LAYERS + 4)

/* Largest |a - b| over the largest |b|: the error relative to the tensor's scale, so that entries
 * near zero (where rounding is all there is) do not count as large relative errors. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 1e-30;
    size_t i;
    for (i = 0; i < n; i++) {
        if (fabs((double)a[i] - b[i]) > num) num = fabs((double)a[i] - b[i]);
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / den;
}

/* Compares one rank's chunk gradients with the same tensors of the one-thread model. */
static void compare_stage(reference *ref, const gpt_config *c, const gpt_stage *st, int rank)
{
    static tensor mine[MAX_TENSORS], whole[MAX_TENSORS];    /* rank 0's thread only */
    int n = stage_tensors(c, st, mine), nw = stage_tensors(c, &ref->at, whole), i, j;
    for (i = 0; i < n; i++) {
        double e;
        for (j = 0; j < nw && (whole[j].layer != mine[i].layer || strcmp(whole[j].name, mine[i].name)); j++) {}
        e = j < nw ? rel_err(mine[i].g, whole[j].g, mine[i].n) : 1.0;
        if (e > ref->grad_err) {
            ref->grad_err = e;
            snprintf(ref->worst, sizeof ref->worst, "%s of layer %d on rank %d", mine[i].name, mine[i].layer, rank);
        }
    }
}

/* One pass of the one-thread model over every bin of the step (every dp rank's), unsplit: the
 * gradients of the summed loss into model.grads (zeroed first). Routes: replayed from `replay`
 * (a recording in the rollout's token order, read by row: no replay map involved), or chosen by
 * the routers; the routes taken are written to `record` when not NULL. Returns Σ loss; *count
 * gets the labelled tokens. */
static double reference_pass(reference *ref, gpt_stage *model, const job *jb, const step_data *d,
                             const int32_t *replay_rec, int32_t *record, int *count)
{
    const gpt_config *c = &jb->cfg;
    gpt_cp none = {1, NULL, NULL, NULL};
    double sum = 0;
    int b, k, n, slots = jb->replay_slots, K = c->topk;
    size_t i, nf, ni;
    memset(model->grads, 0, sizeof(float) * model->n);
    *count = 0;
    for (b = 0; b < d->plan->num_bins; b++) {
        mb_meta mm;
        gpt_route route;
        pp_error e;
        if (meta_build(&mm, d, b, 0, 1, &e) != PP_OK) { meta_free(&mm); return NAN; }
        route.replay = NULL; route.record = record; route.record_slots = slots;
        if (replay_rec) {
            mm.replay[0] = (int32_t *)malloc(sizeof(int32_t) * (size_t)mm.b.T * K * (slots ? slots : 1));
            if (!mm.replay[0]) { meta_free(&mm); return NAN; }
            for (n = 0; n < slots; n++)
                for (i = 0; i < (size_t)mm.b.T; i++)
                    for (k = 0; k < K; k++)
                        mm.replay[0][((size_t)n * mm.b.T + i) * K + k] =
                            mm.rows[i] >= 0 ? replay_rec[((size_t)mm.rows[i] * slots + n) * K + k] : -1;
            route.replay = mm.replay[0];
        }
        gpt_acts_carve(c, model, mm.b.T, mm.b.Tk, ref->f, ref->ints, &ref->acts, &nf, &ni);
        gpt_forward(c, model, &mm.b, &route, &none, mm.ids, ref->out, &ref->acts, &ref->scratch);
        sum += gpt_loss(c, &mm.b, ref->out, ref->out, &n);
        gpt_backward(c, model, &mm.b, &none, ref->out, NULL, &ref->acts, &ref->scratch);
        *count += n;
        meta_free(&mm);
    }
    return sum;
}

/* The pipeline's weights into ref->at, tensor by tensor from whichever rank holds it first; every
 * other holder (the dp and cp replicas, the tied weight's two copies, DualPipe's two copies) must
 * hold the same bits, since every sum they took gave every rank the same result. */
static void gather_weights(reference *ref, const job *jb)
{
    static tensor mine[MAX_TENSORS], whole[MAX_TENSORS];    /* rank 0's thread only */
    static unsigned char taken[MAX_TENSORS];
    int nw = stage_tensors(&jb->cfg, &ref->at, whole), r, c, i, j, n;
    memset(taken, 0, sizeof taken);
    for (r = 0; r < jb->grid.world; r++)
        for (c = 0; c < jb->ranks[r]->nchunks; c++)
            for (n = stage_tensors(&jb->cfg, &jb->ranks[r]->model[c], mine), i = 0; i < n; i++) {
                for (j = 0; j < nw && (whole[j].layer != mine[i].layer || strcmp(whole[j].name, mine[i].name)); j++) {}
                if (j == nw) continue;
                if (!taken[j]) {
                    memcpy(whole[j].w, mine[i].w, sizeof(float) * mine[i].n);
                    taken[j] = 1;
                } else if (memcmp(whole[j].w, mine[i].w, sizeof(float) * mine[i].n)) {
                    ref->grad_err = 1;
                    snprintf(ref->worst, sizeof ref->worst, "the weights %s of layer %d differ on rank %d",
                             mine[i].name, mine[i].layer, r);
                }
            }
}

/* The check of one step, two ways. The gradients: the one-thread model at the pipeline's weights
 * over the same batch, its gradients divided by its own token count, against every rank's (summed
 * over the ranks and divided by theirs), tensor by tensor. The loss: the one-thread model trained
 * on its own from the same start (its own clip and AdamW), against the pipeline's loss; over many
 * steps the two loss curves stay together. (Its gradients would not stay within the tolerance:
 * the two trainings' weights part by rounding, which Adam's division by sqrt(v) enlarges.) */
static void reference_step(job *jb, int step, double loss, double weight)
{
    reference *ref = &jb->ref;
    const step_data *d = &jb->steps[step];
    const int32_t *replay = jb->o.replay ? d->recording : NULL;
    double sum, ss = 0;
    int count, r, k;
    size_t i;
    ref->grad_err = 0;
    snprintf(ref->worst, sizeof ref->worst, "-");
    gather_weights(ref, jb);
    reference_pass(ref, &ref->at, jb, d, replay, NULL, &count);
    for (i = 0; i < ref->at.n; i++) ref->at.grads[i] /= (float)count;
    for (r = 0; r < jb->grid.world; r++)
        for (k = 0; k < jb->ranks[r]->nchunks; k++) compare_stage(ref, &jb->cfg, &jb->ranks[r]->model[k], r);
    sum = reference_pass(ref, &ref->solo, jb, d, replay, NULL, &count);
    ref->loss = sum / count;
    ref->loss_err = weight == count ? fabs(loss - ref->loss) / fabs(ref->loss) : 1.0;  /* counts agree exactly */
    if (!(ref->loss_err <= TOLERANCE && ref->grad_err <= TOLERANCE)) jb->mismatches++;
    for (i = 0; i < ref->solo.n; i++) {
        ref->solo.grads[i] /= (float)count;
        ss += (double)ref->solo.grads[i] * ref->solo.grads[i];
    }
    gpt_adamw(&ref->solo, clip_scale(sqrt(ss), jb->o.clip), (float)jb->o.lr, 0.1f, step + 1);
}

/* --gradcheck: the model's backward against central differences of the mean loss over the first
 * step's batch, at each tensor's entry of largest gradient (fp32: eps 1e-2, agreement within 2%).
 * The routes are fixed to those of the unperturbed pass, so the loss is smooth in every weight.
 * The pipeline check compares the model with itself; this compares it with its derivative. */
static int gradcheck(job *jb)
{
    static tensor t[MAX_TENSORS];
    reference *ref = &jb->ref;
    const step_data *d = &jb->steps[0];
    size_t n = (size_t)d->tokens * (jb->replay_slots ? jb->replay_slots : 1) * jb->cfg.topk, i, best;
    int32_t *routes = (int32_t *)malloc(sizeof(int32_t) * n);
    float *g0 = (float *)malloc(sizeof(float) * ref->solo.n);
    int nt = stage_tensors(&jb->cfg, &ref->solo, t), k, count, bad = 0;
    double sum;
    if (!routes || !g0) { free(routes); free(g0); fprintf(stderr, "gpt: out of memory\n"); return 1; }
    sum = reference_pass(ref, &ref->solo, jb, d, NULL, jb->replay_slots ? routes : NULL, &count);
    for (i = 0; i < ref->solo.n; i++) g0[i] = ref->solo.grads[i] / (float)count;
    printf("gradcheck: the mean loss %.6f over %d tokens; d loss / d w at each tensor's largest gradient\n", sum / count,
           count);
    for (k = 0; k < nt; k++) {
        const float eps = 1e-2f;
        float w0, g;
        double plus, minus, fd, e;
        int cnt;
        for (best = 0, i = 1; i < t[k].n; i++) if (fabsf(t[k].g[i]) > fabsf(t[k].g[best])) best = i;
        g = g0[(size_t)(t[k].g - ref->solo.grads) + best];
        w0 = t[k].w[best];
        t[k].w[best] = w0 + eps;
        plus = reference_pass(ref, &ref->solo, jb, d, jb->replay_slots ? routes : NULL, NULL, &cnt) / cnt;
        t[k].w[best] = w0 - eps;
        minus = reference_pass(ref, &ref->solo, jb, d, jb->replay_slots ? routes : NULL, NULL, &cnt) / cnt;
        t[k].w[best] = w0;
        fd = (plus - minus) / (2.0 * eps);
        e = fabs(fd - g) / fmax(fabs(g), 1e-4);
        if (!(e <= 0.02)) bad++;
        printf("  %-8s layer %2d  backward %+.6e  differences %+.6e  rel err %.1e%s\n", t[k].name, t[k].layer, (double)g,
               fd, e, e <= 0.02 ? "" : "  MISMATCH");
    }
    printf("%s\n", bad ? "gradcheck: MISMATCH" : "gradcheck: the backward agrees with central differences");
    free(routes); free(g0);
    return bad ? 1 : 0;
}

/* ============================================================================================
 * a rank's life
 * ============================================================================================ */

/* The groups (pp_grid), the executor with the schedule recipe, the chunks' weights and the saved
 * activation slots, sized once by pp_executor_saved_slots. */
static pp_status rank_setup(rank_state *r, pp_threads_world *w, pp_error *err)
{
    job *jb = r->job;
    const pp_schedule *sh = jb->shape;
    pp_executor_config ec;
    int coord[PP_DIM_COUNT], members[2], c, Tmax = jb->max_tokens / jb->o.cp;
    size_t nf, ni;
    pp_status s;
    if ((s = pp_grid_coords(&jb->grid, r->rank, coord, err)) != PP_OK) return s;
    r->pp_rank = coord[PP_DIM_PP]; r->dp_rank = coord[PP_DIM_DP]; r->cp_rank = coord[PP_DIM_CP];
    if ((s = pp_threads_transport_grid(w, &jb->grid, PP_GROUP_PP, r->rank, &r->pipe, err)) != PP_OK ||
        (s = pp_threads_transport_grid(w, &jb->grid, PP_GROUP_CP, r->rank, &r->cpg, err)) != PP_OK ||
        (s = pp_threads_transport_grid(w, &jb->grid, PP_GROUP_DP | PP_GROUP_CP, r->rank, &r->dpcp, err)) != PP_OK ||
        (s = pp_grid_embedding_group(&jb->grid, r->rank, pp_stage_rank(sh, sh->num_stages - 1), members,
                                     &r->emb_size, err)) != PP_OK)
        return s;
    if (r->emb_size == 2 && (s = pp_threads_transport_group(w, members, 2, r->rank, &r->emb, err)) != PP_OK) return s;
    if (sh->placement == PP_PLACEMENT_DUAL && sh->pp > 1) {    /* the partner holding our two model stages */
        int pc[PP_DIM_COUNT], pair[2];
        memcpy(pc, coord, sizeof pc);
        pc[PP_DIM_PP] = sh->pp - 1 - r->pp_rank;
        pair[0] = r->pp_rank < pc[PP_DIM_PP] ? r->rank : pp_grid_rank(&jb->grid, pc);
        pair[1] = r->pp_rank < pc[PP_DIM_PP] ? pp_grid_rank(&jb->grid, pc) : r->rank;
        if ((s = pp_threads_transport_group(w, pair, 2, r->rank, &r->pair, err)) != PP_OK) return s;
        r->has_pair = 1;
    }
    r->cpx.cp = jb->o.cp; r->cpx.user = r; r->cpx.all_gather = cp_all_gather; r->cpx.all_reduce = cp_all_reduce;

    memset(&ec, 0, sizeof ec);
    ec.recipe.kind = jb->kind; ec.recipe.pp = sh->pp; ec.recipe.vpp = sh->vpp; ec.recipe.group = jb->o.group;
    ec.split_overlaps = 1;      /* no forward_backward callback: DualPipeV's F&B pairs run as F then B */
    ec.max_mb = jb->max_mb;
    ec.transport = r->pipe;
    ec.callbacks.user = r;
    ec.callbacks.tensor_bytes = cb_tensor_bytes;
    ec.callbacks.input = cb_input;
    ec.callbacks.forward = cb_forward;
    ec.callbacks.loss = cb_loss;
    ec.callbacks.backward = cb_backward;
    ec.callbacks.backward_input = cb_backward_input;
    ec.callbacks.backward_weight = cb_backward_weight;
    ec.callbacks.chunk_done = cb_chunk_done;
    ec.num_metrics = 1;         /* metrics[0]: the loss sum */
    if ((s = pp_executor_create(&ec, &r->ex, err)) != PP_OK) return s;

    r->nchunks = sh->vpp;
    for (c = 0; c < r->nchunks; c++) {
        int st = pp_rank_chunk_stage(sh, r->pp_rank, c);
        r->stage_of[c] = st;
        r->model_stage[c] = pp_stage_model_stage(sh, st);
        int u0, units, ends;
        gpt_split_units(jb->layers, r->model_stage[c], &u0, &units, &ends);
        if (gpt_stage_init_units(&r->model[c], &jb->cfg, u0, units, ends, (uint64_t)jb->o.seed) ||
            (jb->o.defer_head_wgrad && gpt_stage_defer_head(&r->model[c], &jb->cfg, jb->max_mb * Tmax)))
            return pp_error_set(err, PP_ENOMEM, "out of memory");
    }
    /* one slot holds the saved activations of this rank's largest chunk at the most tokens */
    r->nslots = pp_executor_saved_slots(r->ex);
    for (c = 0; c < r->nchunks; c++) {
        gpt_acts a;
        gpt_layer_acts la[MAX_LAYERS];
        a.layer = la;
        gpt_acts_carve(&jb->cfg, &r->model[c], Tmax, jb->max_tokens, NULL, NULL, &a, &nf, &ni);
        if (nf > r->slot_nf) r->slot_nf = nf;
        if (ni > r->slot_ni) r->slot_ni = ni;
    }
    r->slot_f = (float *)malloc(sizeof(float) * (r->slot_nf ? r->slot_nf : 1) * (size_t)(r->nslots + 1));
    r->slot_i = (int32_t *)malloc(sizeof(int32_t) * (r->slot_ni ? r->slot_ni : 1) * (size_t)(r->nslots + 1));
    r->slot_layers = (gpt_layer_acts *)calloc((size_t)(r->nslots + 1) * MAX_LAYERS, sizeof(gpt_layer_acts));
    r->slot_owner = (int *)malloc(sizeof(int) * (size_t)(r->nslots > 0 ? r->nslots : 1));
    r->meta = (mb_meta *)calloc((size_t)jb->max_mb, sizeof(mb_meta));
    r->meta_ptrs = (void **)calloc((size_t)jb->max_mb, sizeof(void *));
    if (!r->slot_f || !r->slot_i || !r->slot_layers || !r->slot_owner || !r->meta || !r->meta_ptrs ||
        gpt_scratch_init(&r->scratch, &jb->cfg, Tmax, jb->max_tokens))
        return pp_error_set(err, PP_ENOMEM, "out of memory");
    for (c = 0; c < r->nslots; c++) r->slot_owner[c] = -1;
    return PP_OK;
}

static void rank_teardown(rank_state *r)
{
    int c;
    pp_executor_free(r->ex);
    for (c = 0; c < r->nchunks; c++) gpt_stage_free(&r->model[c]);
    for (c = 0; r->meta && c < r->job->max_mb; c++) meta_free(&r->meta[c]);
    free(r->slot_f); free(r->slot_i); free(r->slot_layers); free(r->slot_owner);
    free(r->meta); free(r->meta_ptrs); free(r->record);
    gpt_scratch_free(&r->scratch);
}

/* A recording pass: routing written to r->record, then assembled into out over the world. */
static pp_status run_recorded(rank_state *r, const pp_step *ps, const step_data *d, int32_t *out,
                              pp_step_result *res, pp_error *err)
{
    size_t n = (size_t)d->tokens * r->job->replay_slots * r->job->cfg.topk, i;
    int32_t *rec = (int32_t *)realloc(r->record, sizeof(int32_t) * (n ? n : 1));
    pp_status s;
    if (!rec) return pp_error_set(err, PP_ENOMEM, "out of memory");
    r->record = rec;
    for (i = 0; i < n; i++) rec[i] = -1;
    r->recording = 1;
    s = pp_run_step(r->ex, ps, res, err);
    r->recording = 0;
    return s == PP_OK ? assemble_recording(r, d->tokens, out, err) : s;
}

/* The rollout: a forward-only pass of the step's microbatches whose routing, assembled over the
 * world, becomes the step's recording (rank 0 stores it for the check and --replay-save). */
static pp_status rollout(rank_state *r, const pp_step *ps, step_data *d, pp_error *err)
{
    size_t n = (size_t)d->tokens * r->job->replay_slots * r->job->cfg.topk;
    int32_t *routing = (int32_t *)malloc(sizeof(int32_t) * (n ? n : 1));
    pp_step fo = *ps;
    pp_step_result res;
    pp_status s;
    if (!routing) return pp_error_set(err, PP_ENOMEM, "out of memory");
    fo.forward_only = 1;
    s = run_recorded(r, &fo, d, routing, &res, err);
    if (s == PP_OK && r->rank == 0) memcpy(d->recording, routing, sizeof(int32_t) * n);
    free(routing);
    return s == PP_OK ? pp_group_barrier(&r->world, 0, err) : s;     /* d->recording is written */
}

/* The training step. With replay the routing it used is recorded too, and must be the rollout's:
 * every token of every MoE layer, whichever stage and cp rank computed it. */
static pp_status train(rank_state *r, const pp_step *ps, const step_data *d, int step, pp_step_result *res,
                       pp_error *err)
{
    size_t n = (size_t)d->tokens * r->job->replay_slots * r->job->cfg.topk;
    int32_t *routing;
    pp_status s;
    if (!r->job->o.replay) return pp_run_step(r->ex, ps, res, err);
    if (!(routing = (int32_t *)malloc(sizeof(int32_t) * (n ? n : 1)))) return pp_error_set(err, PP_ENOMEM, "out of memory");
    r->replaying = 1;
    s = run_recorded(r, ps, d, routing, res, err);
    r->replaying = 0;
    if (s == PP_OK && memcmp(routing, d->recording, sizeof(int32_t) * n))
        s = pp_error_set(err, PP_EINVAL, "step %d: the routing in training differs from the rollout's", step + 1);
    free(routing);
    return s;
}

/* The gradients, complete: the chunks were summed over dp x cp in chunk_done; now DualPipe's two
 * copies, the tied weight, then the loss and the token count over dp x cp (totals), and every
 * gradient divided by that count (pp_loss's rule). */
static pp_status finish_gradients(rank_state *r, const pp_step_result *res, float totals[2], pp_error *err)
{
    pp_status s = r->has_pair ? sum_dual_copies(r, err) : PP_OK;
    size_t i;
    int c;
    if (s == PP_OK) s = sum_tied_embedding(r, err);
    totals[0] = res->metrics[0];
    totals[1] = res->weight;
    if (s == PP_OK) s = pp_group_all_reduce(&r->dpcp, totals, 2, 0, err);
    for (c = 0; s == PP_OK && c < r->nchunks; c++)
        for (i = 0; i < r->model[c].n; i++) r->model[c].grads[i] /= totals[1];
    return s;
}

/* The global norm over the pipeline (every dp x cp replica holds the same gradients, so the
 * pipeline's sum is the whole model's), the clip, AdamW; *norm gets the norm. */
static pp_status update(rank_state *r, int step, double *norm, pp_error *err)
{
    float ss = (float)grad_sumsq(r);
    pp_status s = pp_group_all_reduce(&r->pipe, &ss, 1, 0, err);
    int c;
    *norm = sqrt((double)ss);
    for (c = 0; s == PP_OK && c < r->nchunks; c++) {
        gpt_adamw(&r->model[c], clip_scale(*norm, r->job->o.clip), (float)r->job->o.lr, 0.1f, step + 1);
        memset(r->model[c].grads, 0, sizeof(float) * r->model[c].n);
    }
    return s;
}

static void print_step(const job *jb, int step, const float totals[2], int nmb, double norm)
{
    const reference *ref = &jb->ref;
    int match = ref->loss_err <= TOLERANCE && ref->grad_err <= TOLERANCE;
    printf("%5d  %8.5f  %6lld  %4d  %8.5f", step + 1, totals[0] / totals[1], (long long)jb->steps[step].tokens, nmb, norm);
    if (jb->o.check)
        printf("   %8.5f  %8.1e  %8.1e  %s%s", ref->loss, ref->loss_err, ref->grad_err, match ? "yes" : "NO, worst: ",
               match ? "" : ref->worst);
    printf("%s\n", jb->o.replay ? "  routing = rollout's" : "");
    fflush(stdout);
}

/* One training step of this rank, from the data to the update. */
static pp_status rank_step(rank_state *r, int step, pp_error *err)
{
    job *jb = r->job;
    step_data *d = &jb->steps[step];
    const pp_pack_plan *plan = d->plan;
    int nmb = plan->num_microbatches, m;
    pp_step ps;
    pp_step_result res;
    float totals[2] = {0, 0};
    double norm = 0;
    pp_status s = PP_OK;
    /* this rank's microbatches: its dp rank's bins, its cp share of each; with replay, a rollout
     * first, then each chunk's part of its recording */
    for (m = 0; m < nmb && s == PP_OK; m++) {
        s = meta_build(&r->meta[m], d, plan->microbatch_bin[r->dp_rank * nmb + m], r->cp_rank, 0, err);
        r->meta_ptrs[m] = &r->meta[m];
    }
    memset(&ps, 0, sizeof ps);
    ps.mb_meta = r->meta_ptrs;
    ps.num_mb = nmb;                    /* this step's bin count: the executor's recipe runs any */
    if (s == PP_OK && jb->o.replay && !jb->o.replay_file) s = rollout(r, &ps, d, err);
    r->replay_src = d->recording;
    for (m = 0; m < nmb && s == PP_OK && jb->o.replay; m++)
        s = meta_replay(&r->meta[m], r, d, plan->microbatch_bin[r->dp_rank * nmb + m], err);
    if (s == PP_OK) s = train(r, &ps, d, step, &res, err);
    if (s == PP_OK) s = finish_gradients(r, &res, totals, err);
    if (s == PP_OK && jb->o.check) {    /* rank 0 reads every rank's gradients between two barriers */
        if ((s = pp_group_barrier(&r->world, 0, err)) == PP_OK && r->rank == 0)
            reference_step(jb, step, (double)totals[0] / totals[1], totals[1]);
        if (s == PP_OK) s = pp_group_barrier(&r->world, 0, err);
    }
    if (s == PP_OK) s = update(r, step, &norm, err);
    if (s == PP_OK && r->rank == 0) print_step(jb, step, totals, nmb, norm);
    for (m = 0; m < nmb; m++) meta_free(&r->meta[m]);
    return s;
}

/* A rank's thread (pp_threads_run starts one per rank): its groups come from the world of the
 * transport it is given. A failure outside the executor aborts that world too, so that no other
 * rank waits for this one in a collective. */
static pp_status rank_main(void *user, int rank, pp_transport *world, pp_error *err)
{
    job *jb = (job *)user;
    rank_state *r = jb->ranks[rank];
    pp_status s;
    int step;
    r->job = jb;
    r->rank = rank;
    r->world = *world;
    s = rank_setup(r, pp_threads_transport_world(world), err);
    for (step = 0; step < jb->o.steps && s == PP_OK; step++) s = rank_step(r, step, err);
    if (s == PP_ECALLBACK && r->why[0]) {
        size_t at = strlen(err->message);
        snprintf(err->message + at, sizeof err->message - at, ": %s", r->why);
    }
    if (s != PP_OK) world->abort(world->user, s, err->message);
    jb->report[rank].slots = r->nslots;
    jb->report[rank].peak_live = r->peak_live;
    jb->report[rank].slot_bytes = r->slot_nf * sizeof(float) + r->slot_ni * sizeof(int32_t);
    rank_teardown(r);
    return s;
}

/* ============================================================================================
 * main
 * ============================================================================================ */

/* Each pipeline rank's largest saved-activation peak over the steps' schedules
 * (pp_schedule_rank_peaks), to print beside what the rank measured. */
static int schedule_peaks(job *jb, pp_schedule_config sc, pp_error *err)
{
    int s, r;
    jb->sched_peak = (int *)calloc((size_t)jb->o.pp, sizeof(int));
    for (s = 0; s < jb->o.steps; s++) {
        pp_schedule *sch = NULL;
        sc.mb = jb->steps[s].plan->num_microbatches;
        if (pp_schedule_build(&sc, &sch, err) != PP_OK) return -1;
        for (r = 0; r < jb->o.pp; r++) {
            int peak = 0;
            pp_schedule_rank_peaks(sch, r, NULL, 1, &peak, NULL, NULL);
            if (peak > jb->sched_peak[r]) jb->sched_peak[r] = peak;
        }
        pp_schedule_free(sch);
    }
    return 0;
}

/* Each rank's saved activations: the most (stage, microbatch) sets it held at once, against its
 * schedule's peak; returns 1 if any differ. */
static int print_memory(const job *jb)
{
    int r, differ = 0;
    for (r = 0; r < jb->grid.world; r++) {
        const rank_report *q = &jb->report[r];
        int coord[PP_DIM_COUNT], peak;
        pp_grid_coords(&jb->grid, r, coord, NULL);
        peak = jb->sched_peak[coord[PP_DIM_PP]];
        printf("rank %d: saved activations at most %d (stage, microbatch) sets live = %.1f KiB, in %d slots of %.1f "
               "KiB allocated once; the schedule's peak %d: %s\n", r, q->peak_live, q->peak_live * q->slot_bytes / 1024.0,
               q->slots, q->slot_bytes / 1024.0, peak, q->peak_live == peak ? "agree" : "DIFFER");
        differ |= q->peak_live != peak;
    }
    return differ;
}

/* --unit-costs: the model whole on one thread over step 1's bins, passes after a warm-up one, the
 * time at which each part starts (gpt_mark): the mean forward and backward of every unit (a
 * layer's attention, its MLP), of the embedding and of the output layer with its loss, in ms per
 * microbatch. Writes one line per unit, "F B 0" (the backward runs whole), for pipepar search
 * --layer-costs, and prints the --embedding and --loss flags that go with it, and the
 * --loss-deferred that goes with --defer-head-wgrad (the output layer's weight gradient). Returns 0; 2 when
 * the file cannot be opened (before any timing); 1 when writing it fails. */
static int unit_costs(job *jb)
{
    reference *ref = &jb->ref;
    const step_data *d = &jb->steps[0];
    const int L = jb->cfg.layers, per = 4 * L + 6, passes = 3, bins = d->plan->num_bins;
    double *t;
    int count, k, i, u, rc = 0;
    FILE *f = fopen(jb->o.unit_costs, "w");
    if (!f) return usage_error("--unit-costs", jb->o.unit_costs, strerror(errno));
    t = (double *)calloc((size_t)per, sizeof(double));
    ref->scratch.max_marks = passes * bins * per;
    ref->scratch.mark_at = (double *)malloc(sizeof(double) * (size_t)ref->scratch.max_marks);
    if (!t || !ref->scratch.mark_at) { fprintf(stderr, "gpt: out of memory\n"); rc = 1; goto out; }
    reference_pass(ref, &ref->solo, jb, d, NULL, NULL, &count);             /* warm-up */
    ref->scratch.marks = 0;
    for (k = 0; k < passes; k++) reference_pass(ref, &ref->solo, jb, d, NULL, NULL, &count);
    if (ref->scratch.marks != passes * bins * per) {
        fprintf(stderr, "gpt: --unit-costs: %d marks, expected %d\n", ref->scratch.marks, passes * bins * per);
        rc = 1;
        goto out;
    }
    /* per microbatch, in the order they run: embedding F; attention 0 F, MLP 0 F, ...; head F (and
     * the loss); head B: its input gradient, then its weight gradient; MLP L-1 B, attention L-1 B,
     * ...; embedding B */
    for (k = 0; k < passes * bins; k++)
        for (i = 0; i + 1 < per; i++)
            t[i] += 1e3 * (ref->scratch.mark_at[k * per + i + 1] - ref->scratch.mark_at[k * per + i]) / (passes * bins);
    fprintf(f, "# gpt --unit-costs: ms per microbatch of up to %d tokens, forward, backward, 0; a line per unit in\n"
               "# model order, layer l's attention then its MLP (pipepar search --layer-costs)\n", jb->max_tokens);
    for (u = 0; u < 2 * L; u++)
        fprintf(f, "%.6f %.6f 0  # layer %d %s\n", t[1 + u], t[4 * L + 3 - u], u / 2,
                u % 2 == 0 ? "attention" : gpt_layer_is_moe(&jb->cfg, u / 2) ? "moe" : "mlp");
    if (fflush(f) != 0 || ferror(f)) rc = 1;
    if (fclose(f) != 0) rc = 1;
    f = NULL;
    if (rc) { fprintf(stderr, "gpt: --unit-costs=%s: write failed: %s\n", jb->o.unit_costs, strerror(errno)); goto out; }
    printf("unit costs (ms per microbatch, one thread, the mean of %d passes over %d microbatches): embedding F %.4f "
           "B %.4f; output layer and loss F %.4f B %.4f (its weight gradient %.4f)\nwrote %s; search with: "
           "--layer-costs '%s' --embedding %.6f,%.6f,0 --loss %.6f,%.6f,0 --hybrid '", passes, bins, t[0], t[per - 2],
           t[2 * L + 1], t[2 * L + 2] + t[2 * L + 3], t[2 * L + 3], jb->o.unit_costs, jb->o.unit_costs, t[0],
           t[per - 2], t[2 * L + 1], t[2 * L + 2] + t[2 * L + 3]);
    for (u = 0; u < L; u++) fputs(gpt_layer_is_moe(&jb->cfg, u) ? "*E" : "*-", stdout);
    printf("'\nwith --defer-head-wgrad, add: --loss-deferred %.6f\n", t[2 * L + 3]);
out:
    if (f) fclose(f);
    free(ref->scratch.mark_at);
    ref->scratch.mark_at = NULL;
    free(t);
    return rc;
}

int main(int argc, char **argv)
{
    job jb;
    options *o = &jb.o;
    pp_error err;
    pp_layers_config lc;
    pp_grid_config gc;
    pp_schedule_config sc;
    int rc, r, s, l, world;

    memset(&jb, 0, sizeof jb);
    o->schedule = (char *)"1f1b"; o->dp = o->cp = o->pp = 1; o->width = 16; o->heads = 2;
    o->vocab = 32; o->experts = 4; o->topk = 2; o->steps = 3; o->seqs = 16; o->min_len = 3; o->max_len = 24;
    o->capacity = 32; o->lr = 0.01; o->clip = 1.0; o->seed = 1;
    if ((rc = parse_flags(argc, argv, o)) >= 0) return rc;
    world = o->ranks ? o->ranks : o->dp * o->cp * o->pp;
    if (o->hybrid && o->moe) return usage_error("--moe", NULL, "not with --hybrid: its 'E' blocks are the MoE layers");
    if (o->unit_costs && (o->hybrid || o->pp > 1 || o->cp > 1 || o->dp > 1 || o->gradcheck || o->check))
        return usage_error("--unit-costs", o->unit_costs, "times the model whole on one thread: not with --hybrid, "
                           "--pp, --cp, --dp, --check or --gradcheck");
    if (o->hybrid && o->first_stage_layers) return usage_error("--first-stage-layers", NULL, "not with --hybrid (its '|' split)");
    if (o->hybrid) o->moe = strchr(o->hybrid, 'E') != NULL;
    if (!o->hybrid && !o->layers) o->layers = 8;

    /* the rules between flags */
    if (o->width % o->heads) return usage_error("--heads", NULL, "must divide --width");
    if (o->topk > o->experts) return usage_error("--topk", NULL, "must be at most --experts");
    if (o->min_len > o->max_len) return usage_error("--min-len", NULL, "must be at most --max-len");
    if (o->replay && !o->moe)
        return usage_error("--replay", NULL, o->hybrid ? "needs MoE layers ('E' in --hybrid): there is no routing to replay"
                                                       : "needs --moe (there is no routing to replay)");
    if ((o->replay_save || o->replay_file) && !o->replay)
        return usage_error(o->replay_save ? "--replay-save" : "--replay-file", NULL, "needs --replay");
    if (o->replay_save && o->replay_file) return usage_error("--replay-save", NULL, "not with --replay-file");
    if (pp_schedule_kind_parse(o->schedule, &jb.kind, &err) != PP_OK)
        return usage_error("--schedule", o->schedule, err.message);

    /* the grid: rank = cp + CP * (dp + DP * pp), Megatron's order tp-cp-dp-pp */
    memset(&gc, 0, sizeof gc);
    gc.world = world; gc.cp = o->cp; gc.dp = o->dp; gc.pp = o->pp;
    if (pp_grid_init(&gc, &jb.grid, &err) != PP_OK) return usage_error("--ranks", NULL, err.message);

    /* every step's data, packed: the microbatch counts decide the schedules */
    jb.steps = (step_data *)calloc((size_t)o->steps, sizeof(step_data));
    if ((rc = make_steps(jb.steps, o)) != 0) goto out;
    for (s = 0; s < o->steps; s++) {
        const pp_pack_plan *p = jb.steps[s].plan;
        if (p->num_microbatches > jb.max_mb) jb.max_mb = p->num_microbatches;
        for (r = 0; r < p->num_bins; r++)
            if (p->bin_padded_tokens[r] > jb.max_tokens) jb.max_tokens = p->bin_padded_tokens[r];
    }

    /* the schedule of the first step: its placement says which stages each rank holds */
    memset(&sc, 0, sizeof sc);
    sc.kind = jb.kind; sc.pp = o->pp; sc.vpp = o->vpp; sc.mb = jb.steps[0].plan->num_microbatches; sc.group = o->group;
    if (o->hybrid && !o->vpp && gpt_hybrid_stages(o->hybrid) % o->pp == 0 && gpt_hybrid_stages(o->hybrid) > o->pp)
        sc.vpp = gpt_hybrid_stages(o->hybrid) / o->pp;  /* the pattern's '|' split says the chunks per rank */
    rc = 2;
    if (pp_schedule_build(&sc, &jb.shape, &err) != PP_OK || schedule_peaks(&jb, sc, &err)) {
        if (sc.vpp && !o->vpp) {        /* the vpp came from the pattern: say so */
            char why[sizeof err.message + 64];
            snprintf(why, sizeof why, "its %d stages on pp %d make vpp %d, and %s", gpt_hybrid_stages(o->hybrid), o->pp,
                     sc.vpp, err.message);
            usage_error("--hybrid", o->hybrid, why);
        } else if (o->group && strstr(err.message, "group=")) {
            usage_error("--group", NULL, err.message);
        } else {
            usage_error("--schedule", o->schedule, err.message);
        }
        goto out;
    }

    /* the layers of each model stage: pp * vpp stages, or pp under DualPipe (each held twice) */
    memset(&lc, 0, sizeof lc);
    lc.num_layers = o->hybrid ? 0 : o->layers; lc.pp = o->pp;
    lc.vpp = jb.shape->placement == PP_PLACEMENT_DUAL ? 1 : jb.shape->vpp;
    lc.first = o->first_stage_layers;
    lc.moe_layer_freq = o->moe && !o->hybrid ? "2" : NULL;
    lc.hybrid = o->hybrid;
    if (pp_layers_build(&lc, &jb.layers, &err) != PP_OK) {
        usage_error(o->hybrid ? "--hybrid" : o->first_stage_layers ? "--first-stage-layers" : "--layers", o->hybrid,
                    err.message);
        goto out;
    }
    if (o->hybrid) {
        char why[160];
        if (gpt_split_check(jb.layers, why, sizeof why)) { usage_error("--hybrid", o->hybrid, why); goto out; }
        if (o->layers && o->layers != gpt_split_layers(jb.layers)) {
            snprintf(why, sizeof why, "has %d layers, --layers says %d", gpt_split_layers(jb.layers), o->layers);
            usage_error("--hybrid", o->hybrid, why);
            goto out;
        }
        if ((o->layers = gpt_split_layers(jb.layers)) > MAX_LAYERS) {
            snprintf(why, sizeof why, "has %d layers, at most %d", o->layers, MAX_LAYERS);
            usage_error("--hybrid", o->hybrid, why);
            goto out;
        }
    }
    jb.moe_slot = (int *)malloc(sizeof(int) * (size_t)o->layers);
    jb.is_moe = (unsigned char *)malloc((size_t)o->layers);
    for (l = 0; l < o->layers; l++) {   /* a recording keeps one slot per MoE layer, in layer order */
        jb.moe_slot[l] = pp_layers_type_index(jb.layers, gpt_split_mlp_item(jb.layers, l), PP_LAYER_MOE);
        jb.is_moe[l] = jb.moe_slot[l] >= 0;
        jb.replay_slots += jb.moe_slot[l] >= 0;
    }
    for (s = 0; jb.replay_slots && s < o->steps; s++)
        jb.steps[s].recording = (int32_t *)malloc(sizeof(int32_t) * (size_t)jb.steps[s].tokens * jb.replay_slots * o->topk);

    /* the model */
    jb.cfg.vocab = o->vocab; jb.cfg.width = o->width; jb.cfg.heads = o->heads; jb.cfg.layers = o->layers;
    jb.cfg.max_pos = o->capacity; jb.cfg.hidden = 4 * o->width; jb.cfg.experts = o->experts; jb.cfg.topk = o->topk;
    jb.cfg.expert_hidden = 2 * o->width;
    jb.cfg.is_moe = jb.is_moe;
    jb.cfg.moe_slot = jb.moe_slot;
    if (o->replay_file && (rc = read_recordings(&jb, o->replay_file)) != 0) goto out;
    rc = 1;
    if ((o->check || o->gradcheck || o->unit_costs) && reference_init(&jb.ref, &jb)) {
        fprintf(stderr, "gpt: out of memory\n");
        goto out;
    }
    if (o->gradcheck) { rc = gradcheck(&jb); goto out; }
    if (o->unit_costs) { rc = unit_costs(&jb); goto out; }

    printf("gpt: %d layers (%s), width %d, %d heads, vocab %d; %d ranks = dp %d x cp %d x pp %d\n", o->layers,
           !o->moe ? "dense" : o->hybrid ? "MoE where the pattern says 'E'" : "MoE in every other layer", o->width,
           o->heads, o->vocab, world, o->dp, o->cp, o->pp);
    printf("     %s, vpp %d, stages %s; %d sequences a step of %s tokens, bins of %d%s%s\n",
           pp_schedule_kind_name(jb.kind), jb.shape->vpp, jb.layers->layout ? jb.layers->layout : jb.layers->pattern, jb.steps[0].n,
           o->lengths ? o->lengths : "random", o->capacity, o->replay ? ", router replay" : "",
           o->check ? ", checked against one thread" : "");
    if (o->check)
        printf("     check: the one-thread model's own run's loss, and its gradients at the pipeline's weights; errors\n"
               "     relative (the loss's; per tensor the largest difference over its largest entry), at most %g\n",
               TOLERANCE);
    printf(" step      loss  tokens  mb/rank  |grad|%s\n", o->check ? "   one-thread  loss err  grad err  match" : "");

    /* the ranks, one thread each */
    jb.ranks = (rank_state **)calloc((size_t)world, sizeof(rank_state *));
    jb.report = (rank_report *)calloc((size_t)world, sizeof(rank_report));
    for (r = 0; r < world; r++) jb.ranks[r] = (rank_state *)calloc(1, sizeof(rank_state));
    if (pp_threads_run(world, rank_main, &jb, NULL, NULL, &err) != PP_OK) {
        fprintf(stderr, "gpt: %s\n", err.message);
        goto out;
    }
    rc = print_memory(&jb);
    if (rc == 0 && o->replay_save) rc = write_recordings(&jb, o->replay_save);
    if (rc == 0 && o->check && jb.mismatches) {
        printf("MISMATCH: %d step(s) differ from the one-thread model\n", jb.mismatches);
        rc = 1;
    } else if (rc == 0 && o->check) {
        printf("gradients match: loss and every gradient within %g of the one-thread model on all %d steps\n",
               TOLERANCE, o->steps);
    }
out:
    reference_free(&jb.ref);
    for (r = 0; jb.ranks && r < world; r++) free(jb.ranks[r]);
    free(jb.ranks); free(jb.report); free(jb.sched_peak); free(jb.moe_slot); free(jb.is_moe);
    free_steps(jb.steps, o->steps);
    pp_layers_free(jb.layers);
    pp_schedule_free(jb.shape);
    return rc;
}
