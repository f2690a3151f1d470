/* gpt_model.h — the model of examples/gpt.c: a small decoder-only transformer in plain C, fp32.
 *
 * Written to be read top to bottom, after llm.c's train_gpt2.c: every buffer's shape beside it,
 * the forward pass, then the backward pass in reverse. Nothing here knows about pipelines; it
 * knows three things a pipelined trainer needs from its model:
 *   - a stage: the model computes any contiguous range of layers, with the token embedding when
 *     the range starts the model and the output layer when it ends it (gpt_stage);
 *   - a microbatch of packed sequences, possibly a context-parallel share of one (gpt_batch):
 *     positions restart at each sequence, attention never crosses one, and under cp each rank
 *     holds 2*cp load-balanced chunks of every sequence while its attention reads every key;
 *   - router choices from elsewhere (replay) and a place to write its own (recording).
 *
 *     tokens (ids) ─► wte[id] + wpe[position in its sequence]              embedding (first stage)
 *     L x  ┌ x += Wo · attention(RMSNorm(x))     causal, within each packed sequence
 *          └ x += MLP(RMSNorm(x))                 dense, or every other layer with --moe a mixture
 *                                                 of experts: softmax router, top-k, weighted sum
 *     logits = RMSNorm(x) · wteᵀ                  output layer tied to the embedding (last stage)
 *     loss = Σ over labelled tokens of -log softmax(logits)[next token]   (padding: no label)
 *
 * No biases: a key bias adds the same amount to every score of a query, which the softmax
 * ignores, so its true gradient is zero and its computed one pure rounding; Adam would turn that
 * noise into steps, and two correct trainers would disagree on it. Llama-style models omit it. */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

typedef struct gpt_config {
    int vocab;              /* V: token ids 0 .. V-1; 0 is padding */
    int width;              /* C: the residual stream */
    int heads;              /* NH: C % NH == 0, head size C / NH */
    int layers;             /* L */
    int max_pos;            /* positions 0 .. max_pos-1: the bin capacity (no packed sequence is longer) */
    int hidden;             /* H: the dense MLP's hidden width */
    int experts, topk;      /* E, K: MoE layers route each token to K of E experts */
    int expert_hidden;      /* He: each expert's hidden width */
    const unsigned char *is_moe;  /* [L] 1: layer l has the mixture of experts (NULL: none has) */
    const int *moe_slot;    /* [L] layer l's slot in a router recording (its MoE index), -1 dense */
} gpt_config;

static int gpt_layer_is_moe(const gpt_config *c, int l) { return c->is_moe && c->is_moe[l]; }

#define GPT_HAS_ATTN(s, k) (!((k) == 0 && (s)->skip_attn))              /* the stage's layer k has its */
#define GPT_HAS_MLP(s, k) (!((k) == (s)->count - 1 && (s)->skip_mlp))    /* attention, its MLP */

/* ------------------------------------------------------------------------------------------
 * parameters: one stage's weights in one array (so one call reduces them), and views into it
 * ------------------------------------------------------------------------------------------ */

typedef struct gpt_layer_weights {
    float *ln1;             /* [C] RMSNorm gain before attention */
    float *ln2;             /* [C] RMSNorm gain before the MLP */
    float *wqkv;            /* [3C, C] query, key and value projections, stacked */
    float *wo;              /* [C, C] attention output projection */
    float *wfc;             /* dense [H, C]; MoE [E, He, C] */
    float *wproj;           /* dense [C, H]; MoE [E, C, He] */
    float *wrouter;         /* MoE [E, C]; NULL in a dense layer (or one whose MLP is not the stage's) */
} gpt_layer_weights;

typedef struct gpt_weights {    /* views into one flat array of a stage's tensors */
    float *wte;             /* [V, C] token embedding; the output layer too (tied) */
    float *wpe;             /* [max_pos, C] position embedding (first stage) */
    float *lnf;             /* [C] final RMSNorm gain (last stage) */
    float *wte_out;         /* [V, C] the output layer: wte itself when one stage holds both ends,
                               else the last stage's copy of it, summed with the first's */
    gpt_layer_weights *layer;   /* [count] */
} gpt_weights;

/* A stage runs units [u0, u1) of the model's 2L: unit 2l is layer l's attention block, unit 2l+1
 * its MLP block (Megatron-LM's hybrid symbols '*' and '-' or 'E'). Both blocks add into the
 * residual stream, so a stage may start or end between a layer's two halves and still pass one
 * [T, C] tensor: a pipeline balances in half layers where whole layers are too coarse. */
typedef struct gpt_stage {
    int first, count;           /* global layers [first, first + count) it touches */
    int skip_attn;              /* 1: layer `first` starts at its MLP (its attention: the stage before) */
    int skip_mlp;               /* 1: layer first + count - 1 ends after its attention (its MLP: the next) */
    int has_embedding;          /* it starts the model: wte, wpe */
    int has_head;               /* it ends the model: lnf and the (tied) output layer */
    size_t n;                   /* floats of the stage's parameters */
    size_t n_gains;             /* the first n_gains of them are RMSNorm gains (no weight decay) */
    float *params, *grads;      /* [n] each */
    float *adam_m, *adam_v;     /* [n] AdamW's moments */
    gpt_weights w, g;           /* views into params and grads, the same layout */
    float *head_dout, *head_in; /* gpt_stage_defer_head: [head_cap, V] the logits' gradients and
                                   [head_cap, C] the output layer's inputs of the rows so far */
    int head_rows, head_cap;
} gpt_stage;

/* A uniform in [-1, 1) from a seeded generator (splitmix64), so that every tensor is drawn from
 * its own name: a stage's weights come out the same whichever rank builds them. */
static uint64_t gpt_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void gpt_fill(float *w, size_t n, float scale, uint64_t seed, uint64_t tensor)
{
    uint64_t s = seed * 0x100000001b3ULL ^ tensor;
    size_t i;
    for (i = 0; i < n; i++) w[i] = scale * ((float)(gpt_mix(&s) >> 40) / 8388608.0f - 1.0f);
}

/* Lays the stage's tensors out in `base` (gains first), or only counts them with base NULL.
 * Returns the float count; *gains gets how many of them are gains. */
static size_t gpt_layout(const gpt_config *c, const gpt_stage *s, float *base, gpt_weights *w, size_t *gains)
{
    size_t at = 0, C = (size_t)c->width, V = (size_t)c->vocab;
    int k;
#define GPT_TAKE(ptr, count) do { if (base) (ptr) = base + at; at += (count); } while (0)
    for (k = 0; k < s->count; k++) {
        if (GPT_HAS_ATTN(s, k)) GPT_TAKE(w->layer[k].ln1, C);
        if (GPT_HAS_MLP(s, k)) GPT_TAKE(w->layer[k].ln2, C);
    }
    if (s->has_head) GPT_TAKE(w->lnf, C);
    if (gains) *gains = at;
    if (s->has_embedding) { GPT_TAKE(w->wte, V * C); GPT_TAKE(w->wpe, (size_t)c->max_pos * C); }
    if (s->has_head) {
        if (s->has_embedding) { if (base) w->wte_out = w->wte; }
        else GPT_TAKE(w->wte_out, V * C);
    }
    for (k = 0; k < s->count; k++) {
        gpt_layer_weights *lw = &w->layer[k];
        if (GPT_HAS_ATTN(s, k)) {
            GPT_TAKE(lw->wqkv, 3 * C * C);
            GPT_TAKE(lw->wo, C * C);
        }
        if (!GPT_HAS_MLP(s, k)) {
            if (base) lw->wrouter = NULL;
        } else if (gpt_layer_is_moe(c, s->first + k)) {
            size_t E = (size_t)c->experts, He = (size_t)c->expert_hidden;
            GPT_TAKE(lw->wrouter, E * C);
            GPT_TAKE(lw->wfc, E * He * C);
            GPT_TAKE(lw->wproj, E * C * He);
        } else {
            if (base) lw->wrouter = NULL;
            GPT_TAKE(lw->wfc, (size_t)c->hidden * C);
            GPT_TAKE(lw->wproj, C * (size_t)c->hidden);
        }
    }
#undef GPT_TAKE
    return at;
}

enum { GPT_EMBEDDING = 1, GPT_HEAD = 2 };     /* the ends of the model a stage holds */

/* gpt_stage_shape: the layers that units [u0, u0 + units) (gpt_stage: two per layer) touch, and
 * the ends of the model the stage holds (GPT_EMBEDDING | GPT_HEAD: the first and the last stage,
 * even one with no units). gpt_stage_init_units: that stage's weights, drawn from `seed` tensor by
 * tensor from its global name, so a stage of a pipeline starts equal to the same units of the
 * whole model. Returns 0, or -1 when out of memory. */
static void gpt_stage_shape(gpt_stage *s, int u0, int units, int ends)
{
    memset(s, 0, sizeof *s);
    s->first = u0 / 2;
    s->count = units > 0 ? (u0 + units + 1) / 2 - u0 / 2 : 0;
    s->skip_attn = units > 0 && u0 % 2;
    s->skip_mlp = units > 0 && (u0 + units) % 2;
    s->has_embedding = (ends & GPT_EMBEDDING) != 0;
    s->has_head = (ends & GPT_HEAD) != 0;
}

static int gpt_stage_init_units(gpt_stage *s, const gpt_config *c, int u0, int units, int ends, uint64_t seed)
{
    size_t C = (size_t)c->width, V = (size_t)c->vocab, i;
    int k, first = u0 / 2, count;
    gpt_stage_shape(s, u0, units, ends);
    count = s->count;
    s->w.layer = (gpt_layer_weights *)calloc((size_t)(count > 0 ? count : 1), sizeof(gpt_layer_weights));
    s->g.layer = (gpt_layer_weights *)calloc((size_t)(count > 0 ? count : 1), sizeof(gpt_layer_weights));
    if (!s->w.layer || !s->g.layer) return -1;
    s->n = gpt_layout(c, s, NULL, &s->w, &s->n_gains);
    s->params = (float *)calloc(s->n, sizeof(float));
    s->grads = (float *)calloc(s->n, sizeof(float));
    s->adam_m = (float *)calloc(s->n, sizeof(float));
    s->adam_v = (float *)calloc(s->n, sizeof(float));
    if (!s->params || !s->grads || !s->adam_m || !s->adam_v) return -1;
    gpt_layout(c, s, s->params, &s->w, NULL);
    gpt_layout(c, s, s->grads, &s->g, NULL);
    for (i = 0; i < s->n_gains; i++) s->params[i] = 1.0f;          /* RMSNorm gains start at 1 */
    /* scales: 1/sqrt(fan_in), and the projections into the residual stream by 1/sqrt(2L) more
     * (GPT-2), so the stream's size does not grow with depth */
    if (s->has_embedding) {
        gpt_fill(s->w.wte, V * C, 0.1f, seed, 1);
        gpt_fill(s->w.wpe, (size_t)c->max_pos * C, 0.1f, seed, 2);
    }
    if (s->has_head && !s->has_embedding) gpt_fill(s->w.wte_out, V * C, 0.1f, seed, 1);   /* wte's copy */
    for (k = 0; k < count; k++) {
        gpt_layer_weights *lw = &s->w.layer[k];
        uint64_t id = 16 + 16 * (uint64_t)(first + k);
        float in = 1.0f / sqrtf((float)C), out = in / sqrtf(2.0f * (float)c->layers);
        if (GPT_HAS_ATTN(s, k)) {
            gpt_fill(lw->wqkv, 3 * C * C, in, seed, id + 1);
            gpt_fill(lw->wo, C * C, out, seed, id + 2);
        }
        if (!GPT_HAS_MLP(s, k)) continue;
        if (lw->wrouter) {
            size_t E = (size_t)c->experts, He = (size_t)c->expert_hidden;
            gpt_fill(lw->wrouter, E * C, in, seed, id + 3);
            gpt_fill(lw->wfc, E * He * C, in, seed, id + 4);
            gpt_fill(lw->wproj, E * C * He, out * sqrtf((float)C / (float)He), seed, id + 5);
        } else {
            gpt_fill(lw->wfc, (size_t)c->hidden * C, in, seed, id + 4);
            gpt_fill(lw->wproj, C * (size_t)c->hidden, out * sqrtf((float)C / (float)c->hidden), seed, id + 5);
        }
    }
    return 0;
}

/* The whole layers [first, first + count), with the ends of the model that they reach. */
static int gpt_stage_init(gpt_stage *s, const gpt_config *c, int first, int count, uint64_t seed)
{
    return gpt_stage_init_units(s, c, 2 * first, 2 * count,
                                (first == 0 ? GPT_EMBEDDING : 0) | (first + count == c->layers ? GPT_HEAD : 0), seed);
}

/* The output layer's weight gradient deferred (Megatron-LM's defer_embedding_wgrad_compute): each
 * backward keeps its rows (at most `rows` of them until gpt_head_wgrad), and gpt_head_wgrad
 * computes the gradient of them all at once, when the stage's last backward of the step is done.
 * Under 1F1B the last stage has finished then while the pipeline drains, so the output layer's
 * weight gradients leave the last stage's share of every microbatch. Only for a
 * stage that holds the head. Returns 0, or -1 when out of memory. */
static int gpt_stage_defer_head(gpt_stage *s, const gpt_config *c, int rows)
{
    if (!s->has_head || rows <= 0) return 0;
    s->head_dout = (float *)malloc(sizeof(float) * (size_t)rows * c->vocab);
    s->head_in = (float *)malloc(sizeof(float) * (size_t)rows * c->width);
    s->head_cap = rows;
    s->head_rows = 0;
    return s->head_dout && s->head_in ? 0 : -1;
}

static void gpt_stage_free(gpt_stage *s)
{
    free(s->head_dout); free(s->head_in);
    free(s->params); free(s->grads); free(s->adam_m); free(s->adam_v);
    free(s->w.layer); free(s->g.layer);
    memset(s, 0, sizeof *s);
}

#ifdef PIPEPAR_H
/* ------------------------------------------------------------------------------------------
 * the pipeline's split: whole layers (a Megatron layout) or half layers (a hybrid pattern)
 * ------------------------------------------------------------------------------------------ */

/* A layout's decoder items are layers; a hybrid pattern's are units, '*' a layer's attention and
 * '-' (or 'E', MoE) its MLP. Returns 0 when l's decoder is a GPT's, L = l->num_layers / 2 pairs
 * of '*' then '-' or 'E' (always so for a layout), else 1 with the rule in why[n]. */
static int gpt_split_check(const pp_layers *l, char *why, size_t n)
{
    int u;
    if (!l->pattern) return 0;
    if (l->mtp_layers) { snprintf(why, n, "the GPT has no MTP depths"); return 1; }
    if (l->num_layers % 2) {
        snprintf(why, n, "has %d blocks: a GPT layer is two, '*' (attention) then '-' or 'E' (its MLP)", l->num_layers);
        return 1;
    }
    for (u = 0; u < l->num_layers; u++) {
        int t = l->layer_type[u];
        if (u % 2 == 0 ? t != PP_LAYER_ATTENTION : t != PP_LAYER_MLP && t != PP_LAYER_MOE) {
            snprintf(why, n, "block %d is '%s': a GPT layer is '*' (attention) then '-' or 'E' (its MLP), so block %d "
                     "must be %s", u, pp_layer_type_name((pp_layer_type)t), u, u % 2 ? "'-' or 'E'" : "'*'");
            return 1;
        }
    }
    return 0;
}

/* The stages a hybrid pattern's '|' separate. */
static int gpt_hybrid_stages(const char *pattern)
{
    int n = 1;
    for (; *pattern; pattern++) n += *pattern == '|';
    return n;
}

static int gpt_split_layers(const pp_layers *l) { return l->pattern ? l->num_layers / 2 : l->num_layers; }

/* Model stage s's units [*u0, *u0 + *units) and the ends it holds (gpt_stage_init_units). */
static void gpt_split_units(const pp_layers *l, int s, int *u0, int *units, int *ends)
{
    int h = l->pattern ? 1 : 2;
    *u0 = h * l->first[s];
    *units = h * l->count[s];
    *ends = (s == 0 ? GPT_EMBEDDING : 0) | (s == l->num_stages - 1 ? GPT_HEAD : 0);
}

/* The decoder item of layer `layer`'s MLP (whose type says dense or MoE), and the layer of an item. */
static int gpt_split_mlp_item(const pp_layers *l, int layer) { return l->pattern ? 2 * layer + 1 : layer; }
static int gpt_split_item_layer(const pp_layers *l, int item) { return l->pattern ? item / 2 : item; }
/* The end of the layers that decoder items [a, end) touch. */
static int gpt_split_layer_end(const pp_layers *l, int end) { return l->pattern ? (end + 1) / 2 : end; }
#endif

/* ------------------------------------------------------------------------------------------
 * a microbatch as one rank sees it, and how attention reaches the other cp ranks
 * ------------------------------------------------------------------------------------------ */

typedef struct gpt_batch {
    int T;                      /* this rank's tokens: the microbatch's padded tokens / cp */
    int Tk;                     /* the microbatch's tokens (every rank's): keys and values */
    const int32_t *ids;         /* [T] token ids (0 for padding) */
    const int32_t *labels;      /* [T] the next token of the same sequence, -1: none (a sequence's
                                   last token, padding) */
    const int32_t *pos;         /* [T] position within its own sequence */
    const int32_t *gidx;        /* [T] position of local token j in the microbatch (0 .. Tk-1) */
    const int32_t *seq_start;   /* [Tk] where the sequence holding microbatch position p starts */
    const int32_t *src;         /* [Tk] cp > 1: row of the all-gathered [cp * T] keys and values
                                   holding position p (pp_cp_thd_gather) */
    const int64_t *rows;        /* [T] the token's row in the rollout's token order, -1 padding */
} gpt_batch;

/* Context parallelism as the model needs it. all_gather: recv[r * count ..] gets cp rank r's
 * `count` floats. all_reduce: the sum over the cp ranks, in place. Return 0 on success. cp == 1
 * calls neither. */
typedef struct gpt_cp {
    int cp;
    void *user;
    int (*all_gather)(void *user, const float *send, float *recv, size_t count);
    int (*all_reduce)(void *user, float *buf, size_t count);
} gpt_cp;

/* Router choices: replay[m][t][k] the expert of local token t in the stage's m-th MoE layer
 * (-1: route it yourself, as for padding), or NULL to route every token; record, or NULL: the
 * choices made are written at record[(rows[t] * record_slots + moe_slot[l]) * K + k] for every
 * real token. */
typedef struct gpt_route {
    const int32_t *replay;
    int32_t *record;
    int record_slots;
} gpt_route;

/* ------------------------------------------------------------------------------------------
 * saved activations: what one (stage, microbatch) keeps for its backward
 * ------------------------------------------------------------------------------------------ */

typedef struct gpt_layer_acts {
    float *x;                   /* [T, C] the layer's input (the residual stream) */
    float *rs1;                 /* [T] 1 / rms(x) */
    float *n1;                  /* [T, C] RMSNorm(x) * ln1 */
    float *qkv;                 /* [T, 3C] */
    float *kv;                  /* [Tk, 2C] every token's key and value, in microbatch order */
    float *att;                 /* [NH, T, Tk] attention probabilities (row t: its sequence up to t) */
    float *ay;                  /* [T, C] attention output before Wo */
    float *x2;                  /* [T, C] x + attention */
    float *rs2;                 /* [T] 1 / rms(x2) */
    float *n2;                  /* [T, C] RMSNorm(x2) * ln2 */
    float *hpre, *hact;         /* dense [T, H]; MoE [T, K, He]: before and after GELU */
    float *probs;               /* MoE [T, E] router probabilities */
    float *eout;                /* MoE [T, K, C] each chosen expert's output */
    int32_t *choice;            /* MoE [T, K] the chosen experts */
} gpt_layer_acts;

typedef struct gpt_acts {
    gpt_layer_acts *layer;      /* [count] */
    float *xf;                  /* head: [T, C] the last layer's output */
    float *rsf;                 /* head: [T] */
    float *nf;                  /* head: [T, C] RMSNorm(xf) * lnf */
} gpt_acts;

/* Carves a stage's saved activations for T local and Tk microbatch tokens out of f (floats) and
 * ip (ints), or only counts with f NULL: *nf floats and *ni ints. The same call before the
 * backward finds the same buffers. */
static void gpt_acts_carve(const gpt_config *c, const gpt_stage *s, int T, int Tk, float *f, int32_t *ip,
                           gpt_acts *a, size_t *nf, size_t *ni)
{
    size_t at = 0, ai = 0, C = (size_t)c->width, t = (size_t)T, tk = (size_t)Tk;
    size_t K = (size_t)c->topk, He = (size_t)c->expert_hidden;
    int k;
#define GPT_F(ptr, count) do { if (f) (ptr) = f + at; at += (count); } while (0)
#define GPT_I(ptr, count) do { if (f) (ptr) = ip + ai; ai += (count); } while (0)
    for (k = 0; k < s->count; k++) {
        gpt_layer_acts *la = &a->layer[k];
        GPT_F(la->x, t * C);
        if (!GPT_HAS_ATTN(s, k)) {      /* the input is x2 already */
            if (f) la->x2 = la->x;
        } else {
            GPT_F(la->rs1, t); GPT_F(la->n1, t * C); GPT_F(la->qkv, t * 3 * C);
            GPT_F(la->kv, tk * 2 * C); GPT_F(la->att, (size_t)c->heads * t * tk); GPT_F(la->ay, t * C);
            if (GPT_HAS_MLP(s, k)) GPT_F(la->x2, t * C);
        }
        if (!GPT_HAS_MLP(s, k)) continue;   /* the attention writes the stage's output */
        GPT_F(la->rs2, t); GPT_F(la->n2, t * C);
        if (gpt_layer_is_moe(c, s->first + k)) {
            GPT_F(la->hpre, t * K * He); GPT_F(la->hact, t * K * He);
            GPT_F(la->probs, t * (size_t)c->experts); GPT_F(la->eout, t * K * C);
            GPT_I(la->choice, t * K);
        } else {
            GPT_F(la->hpre, t * (size_t)c->hidden); GPT_F(la->hact, t * (size_t)c->hidden);
        }
    }
    if (s->has_head) { GPT_F(a->xf, t * C); GPT_F(a->rsf, t); GPT_F(a->nf, t * C); }
#undef GPT_F
#undef GPT_I
    *nf = at;
    *ni = ai;
}

/* Working memory of a backward (nothing in it outlives the call but the unit timing's marks):
 * sized for T, Tk tokens. */
typedef struct gpt_scratch {
    float *dx;                  /* [T, C] gradient of the residual stream */
    float *dn;                  /* [T, C] gradient of a norm's output */
    float *dqkv;                /* [T, 3C] */
    float *dkv;                 /* [Tk, 2C] gradient of every key and value (summed over cp) */
    float *day;                 /* [T, C] */
    float *dh;                  /* [T, H] the dense MLP's hidden gradient; [He] one expert's */
    float *kvsend;              /* [T, 2C] this rank's keys and values, to all-gather */
    float *kvall;               /* [Tk, 2C] every rank's, in rank order */
    float *vec;                 /* [max(V, E)] one token's logits or router gradient */
    double *mark_at;            /* unit timing (gpt --unit-costs), NULL: off: the seconds at which each
                                   part of a pass starts, in the order they run (gpt_mark); unlike the
                                   rest, it collects over many calls */
    int marks, max_marks;       /* marks counts every mark, also those past max_marks (not stored) */
} gpt_scratch;

/* Unit timing: the time the next part of a pass starts, on the monotonic clock. */
static void gpt_mark(gpt_scratch *s)
{
    struct timespec ts;
    if (!s->mark_at) return;
    if (s->marks < s->max_marks) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s->mark_at[s->marks] = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
    s->marks++;
}

static int gpt_scratch_init(gpt_scratch *s, const gpt_config *c, int T, int Tk)
{
    size_t C = (size_t)c->width, t = (size_t)T, tk = (size_t)Tk;
    size_t h = t * (size_t)c->hidden > (size_t)c->expert_hidden ? t * (size_t)c->hidden : (size_t)c->expert_hidden;
    size_t v = (size_t)(c->vocab > c->experts ? c->vocab : c->experts);
    s->dx = (float *)malloc(sizeof(float) * t * C);
    s->dn = (float *)malloc(sizeof(float) * t * C);
    s->dqkv = (float *)malloc(sizeof(float) * t * 3 * C);
    s->dkv = (float *)malloc(sizeof(float) * tk * 2 * C);
    s->day = (float *)malloc(sizeof(float) * t * C);
    s->dh = (float *)malloc(sizeof(float) * (h ? h : 1));
    s->kvsend = (float *)malloc(sizeof(float) * t * 2 * C);
    s->kvall = (float *)malloc(sizeof(float) * tk * 2 * C);
    s->vec = (float *)malloc(sizeof(float) * v);
    s->mark_at = NULL;
    s->marks = s->max_marks = 0;
    return s->dx && s->dn && s->dqkv && s->dkv && s->day && s->dh && s->kvsend && s->kvall && s->vec ? 0 : -1;
}

static void gpt_scratch_free(gpt_scratch *s)
{
    free(s->dx); free(s->dn); free(s->dqkv); free(s->dkv); free(s->day); free(s->dh);
    free(s->kvsend); free(s->kvall); free(s->vec);
}

/* ------------------------------------------------------------------------------------------
 * building blocks, each with its backward beside it
 * ------------------------------------------------------------------------------------------ */

/* out[t, o] = Σ_i in[t, i] w[o, i]: in [T, IC], w [OC, IC], out [T, OC] */
static void gpt_matmul(float *out, const float *in, const float *w, int T, int IC, int OC)
{
    int t, o, i;
    for (t = 0; t < T; t++)
        for (o = 0; o < OC; o++) {
            float a = 0;
            for (i = 0; i < IC; i++) a += in[(size_t)t * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)t * OC + o] = a;
        }
}

/* din = dout w, dw += doutᵀ in (either may be NULL) */
static void gpt_matmul_backward(float *din, float *dw, const float *dout, const float *in, const float *w, int T,
                                int IC, int OC)
{
    int t, o, i;
    for (t = 0; t < T; t++) {
        const float *d = dout + (size_t)t * OC;
        if (din)
            for (i = 0; i < IC; i++) {
                float a = 0;
                for (o = 0; o < OC; o++) a += d[o] * w[(size_t)o * IC + i];
                din[(size_t)t * IC + i] = a;
            }
        if (dw)
            for (o = 0; o < OC; o++)
                for (i = 0; i < IC; i++) dw[(size_t)o * IC + i] += d[o] * in[(size_t)t * IC + i];
    }
}

/* RMSNorm: out = x / rms(x) * g, rms = sqrt(mean(x²) + 1e-5); rs [T] keeps 1 / rms */
static void gpt_rmsnorm(float *out, float *rs, const float *x, const float *g, int T, int C)
{
    int t, i;
    for (t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * C;
        float ss = 0, r;
        for (i = 0; i < C; i++) ss += xt[i] * xt[i];
        r = 1.0f / sqrtf(ss / (float)C + 1e-5f);
        rs[t] = r;
        for (i = 0; i < C; i++) out[(size_t)t * C + i] = xt[i] * r * g[i];
    }
}

/* dx = (or +=, with accumulate) r g dout - x r³/C Σ(g dout x);  dg += Σ_t dout x r */
static void gpt_rmsnorm_backward(float *dx, float *dg, const float *dout, const float *x, const float *rs,
                                 const float *g, int T, int C, int accumulate)
{
    int t, i;
    for (t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * C, *dt = dout + (size_t)t * C;
        float r = rs[t], dot = 0;
        for (i = 0; i < C; i++) dot += g[i] * dt[i] * xt[i];
        for (i = 0; i < C; i++) {
            float d = r * g[i] * dt[i] - xt[i] * r * r * r * dot / (float)C;
            dx[(size_t)t * C + i] = accumulate ? dx[(size_t)t * C + i] + d : d;
            dg[i] += dt[i] * xt[i] * r;
        }
    }
}

static float gpt_gelu(float x)      /* the tanh form (GPT-2, llm.c) */
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

static float gpt_gelu_grad(float x)
{
    float th = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}

/* Causal attention within each packed sequence. qkv [T, 3C] is this rank's tokens; kv [Tk, 2C]
 * gets every token's key and value in microbatch order: under cp, all-gathered from the cp ranks
 * and put back in order by src. Local token t (microbatch position p = gidx[t]) attends to
 * positions seq_start[p] .. p, the same keys in the same order as in the unsplit model, so its
 * output is the unsplit model's, bit for bit. att [NH, T, Tk], ay [T, C]. */
static int gpt_attention(float *ay, float *att, float *kv, const float *qkv, const gpt_batch *b, const gpt_config *c,
                         const gpt_cp *cp, gpt_scratch *s)
{
    int C = c->width, NH = c->heads, hs = C / NH, T = b->T, Tk = b->Tk, t, h, p, i;
    float scale = 1.0f / sqrtf((float)hs);
    for (t = 0; t < T; t++) {           /* this rank's keys and values */
        float *row = cp->cp > 1 ? s->kvsend + (size_t)t * 2 * C : kv + (size_t)t * 2 * C;
        memcpy(row, qkv + (size_t)t * 3 * C + C, sizeof(float) * 2 * (size_t)C);
    }
    if (cp->cp > 1) {
        if (cp->all_gather(cp->user, s->kvsend, s->kvall, (size_t)T * 2 * C)) return -1;
        for (p = 0; p < Tk; p++)
            memcpy(kv + (size_t)p * 2 * C, s->kvall + (size_t)b->src[p] * 2 * C, sizeof(float) * 2 * (size_t)C);
    }
    for (t = 0; t < T; t++) {
        int pt = b->gidx[t], p0 = b->seq_start[pt];
        for (h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)t * 3 * C + h * hs;
            float *a = att + ((size_t)h * T + t) * Tk, mx = -INFINITY, sum = 0;
            float *y = ay + (size_t)t * C + h * hs;
            for (p = p0; p <= pt; p++) {
                const float *k = kv + (size_t)p * 2 * C + h * hs;
                float d = 0;
                for (i = 0; i < hs; i++) d += q[i] * k[i];
                a[p] = d * scale;
                if (a[p] > mx) mx = a[p];
            }
            for (p = p0; p <= pt; p++) { a[p] = expf(a[p] - mx); sum += a[p]; }
            for (i = 0; i < hs; i++) y[i] = 0;
            for (p = p0; p <= pt; p++) {
                const float *v = kv + (size_t)p * 2 * C + C + h * hs;
                a[p] /= sum;
                for (i = 0; i < hs; i++) y[i] += a[p] * v[i];
            }
        }
    }
    return 0;
}

/* dqkv [T, 3C] from day [T, C]. The keys and values of every position get gradient from this
 * rank's queries (dkv [Tk, 2C]); under cp the ranks' shares are summed and each rank keeps the
 * rows of its own tokens: the gradient each key's owner would have got in the unsplit model. */
static int gpt_attention_backward(float *dqkv, const float *day, const float *att, const float *kv, const float *qkv,
                                  const gpt_batch *b, const gpt_config *c, const gpt_cp *cp, gpt_scratch *s)
{
    int C = c->width, NH = c->heads, hs = C / NH, T = b->T, Tk = b->Tk, t, h, p, i;
    float scale = 1.0f / sqrtf((float)hs);
    memset(s->dkv, 0, sizeof(float) * (size_t)Tk * 2 * C);
    for (t = 0; t < T; t++) {
        int pt = b->gidx[t], p0 = b->seq_start[pt];
        for (h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)t * 3 * C + h * hs, *dy = day + (size_t)t * C + h * hs;
            const float *a = att + ((size_t)h * T + t) * Tk;
            float *dq = dqkv + (size_t)t * 3 * C + h * hs, dsum = 0;
            for (i = 0; i < hs; i++) dq[i] = 0;
            /* softmax backward: ds_p = a_p (da_p - Σ a da), with da_p = dy · v_p */
            for (p = p0; p <= pt; p++) {
                const float *v = kv + (size_t)p * 2 * C + C + h * hs;
                float da = 0;
                for (i = 0; i < hs; i++) da += dy[i] * v[i];
                dsum += a[p] * da;
            }
            for (p = p0; p <= pt; p++) {
                const float *k = kv + (size_t)p * 2 * C + h * hs, *v = k + C;
                float *dk = s->dkv + (size_t)p * 2 * C + h * hs, *dv = dk + C, da = 0, ds;
                for (i = 0; i < hs; i++) da += dy[i] * v[i];
                ds = a[p] * (da - dsum) * scale;
                for (i = 0; i < hs; i++) {
                    dq[i] += ds * k[i];
                    dk[i] += ds * q[i];
                    dv[i] += a[p] * dy[i];
                }
            }
        }
    }
    if (cp->cp > 1 && cp->all_reduce(cp->user, s->dkv, (size_t)Tk * 2 * C)) return -1;
    for (t = 0; t < T; t++)
        memcpy(dqkv + (size_t)t * 3 * C + C, s->dkv + (size_t)b->gidx[t] * 2 * C, sizeof(float) * 2 * (size_t)C);
    return 0;
}

/* Dense MLP: out [T, C] = Wproj gelu(Wfc n) */
static void gpt_mlp(float *out, float *hpre, float *hact, const float *n, const gpt_layer_weights *w,
                    const gpt_config *c, int T)
{
    size_t i, nh = (size_t)T * c->hidden;
    gpt_matmul(hpre, n, w->wfc, T, c->width, c->hidden);
    for (i = 0; i < nh; i++) hact[i] = gpt_gelu(hpre[i]);
    gpt_matmul(out, hact, w->wproj, T, c->hidden, c->width);
}

/* dn [T, C] from dout [T, C]; dWproj, dWfc */
static void gpt_mlp_backward(float *dn, const float *dout, const float *hpre, const float *hact, const float *n,
                             const gpt_layer_weights *w, gpt_layer_weights *g, const gpt_config *c, int T,
                             gpt_scratch *s)
{
    size_t i, nh = (size_t)T * c->hidden;
    gpt_matmul_backward(s->dh, g->wproj, dout, hact, w->wproj, T, c->hidden, c->width);
    for (i = 0; i < nh; i++) s->dh[i] *= gpt_gelu_grad(hpre[i]);
    gpt_matmul_backward(dn, g->wfc, s->dh, n, w->wfc, T, c->width, c->hidden);
}

/* Mixture of experts, per token: probs = softmax(Wrouter n) over E; the K experts are the
 * replayed ones, or the K most probable (ties: the lower index); out = Σ_k probs[e_k] E_k(n), each
 * expert a GELU MLP of its own. The chosen experts go to the recording when one is kept. */
static void gpt_moe(float *out, gpt_layer_acts *la, const float *n, const gpt_layer_weights *w, const gpt_config *c,
                    const gpt_batch *b, const int32_t *replay, const gpt_route *r, int slot)
{
    int C = c->width, E = c->experts, K = c->topk, He = c->expert_hidden, t, e, k, i, j;
    for (t = 0; t < b->T; t++) {
        const float *nt = n + (size_t)t * C;
        float *pr = la->probs + (size_t)t * E, mx = -INFINITY, sum = 0, *o = out + (size_t)t * C;
        int32_t *ch = la->choice + (size_t)t * K;
        for (e = 0; e < E; e++) {
            float a = 0;
            for (i = 0; i < C; i++) a += w->wrouter[(size_t)e * C + i] * nt[i];
            pr[e] = a;
            if (a > mx) mx = a;
        }
        for (e = 0; e < E; e++) { pr[e] = expf(pr[e] - mx); sum += pr[e]; }
        for (e = 0; e < E; e++) pr[e] /= sum;
        for (k = 0; k < K; k++) {
            int best = -1;
            if (replay && replay[(size_t)t * K + k] >= 0) {
                best = replay[(size_t)t * K + k];
            } else {
                for (e = 0; e < E; e++) {
                    int taken = 0;
                    for (j = 0; j < k; j++) taken |= ch[j] == e;
                    if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
                }
            }
            ch[k] = best;
        }
        if (r && r->record && b->rows[t] >= 0)
            for (k = 0; k < K; k++) r->record[((size_t)b->rows[t] * r->record_slots + slot) * K + k] = ch[k];
        for (i = 0; i < C; i++) o[i] = 0;
        for (k = 0; k < K; k++) {
            const float *wfc = w->wfc + (size_t)ch[k] * He * C, *wpr = w->wproj + (size_t)ch[k] * C * He;
            float *hp = la->hpre + ((size_t)t * K + k) * He, *ha = la->hact + ((size_t)t * K + k) * He;
            float *eo = la->eout + ((size_t)t * K + k) * C;
            gpt_matmul(hp, nt, wfc, 1, C, He);
            for (j = 0; j < He; j++) ha[j] = gpt_gelu(hp[j]);
            gpt_matmul(eo, ha, wpr, 1, He, C);
            for (i = 0; i < C; i++) o[i] += pr[ch[k]] * eo[i];
        }
    }
}

/* dn [T, C] from dout [T, C]; the experts' and the router's weight gradients */
static void gpt_moe_backward(float *dn, const float *dout, const gpt_layer_acts *la, const float *n,
                             const gpt_layer_weights *w, gpt_layer_weights *g, const gpt_config *c, int T,
                             gpt_scratch *s)
{
    int C = c->width, E = c->experts, K = c->topk, He = c->expert_hidden, t, e, k, i, j;
    for (t = 0; t < T; t++) {
        const float *nt = n + (size_t)t * C, *dt = dout + (size_t)t * C, *pr = la->probs + (size_t)t * E;
        const int32_t *ch = la->choice + (size_t)t * K;
        float *dnt = dn + (size_t)t * C, *dpr = s->vec, dot = 0;
        for (i = 0; i < C; i++) dnt[i] = 0;
        for (e = 0; e < E; e++) dpr[e] = 0;
        for (k = 0; k < K; k++) {
            const float *wfc = w->wfc + (size_t)ch[k] * He * C, *wpr = w->wproj + (size_t)ch[k] * C * He;
            const float *hp = la->hpre + ((size_t)t * K + k) * He, *ha = la->hact + ((size_t)t * K + k) * He;
            const float *eo = la->eout + ((size_t)t * K + k) * C;
            float *gfc = g->wfc + (size_t)ch[k] * He * C, *gpr = g->wproj + (size_t)ch[k] * C * He;
            float *dh = s->dh, p = pr[ch[k]];
            for (i = 0; i < C; i++) dpr[ch[k]] += dt[i] * eo[i];    /* d probs[e_k] = dout · E_k(n) */
            for (j = 0; j < He; j++) dh[j] = 0;
            for (i = 0; i < C; i++)                                 /* through Wproj (dout scaled by p) */
                for (j = 0; j < He; j++) {
                    dh[j] += p * dt[i] * wpr[(size_t)i * He + j];
                    gpr[(size_t)i * He + j] += p * dt[i] * ha[j];
                }
            for (j = 0; j < He; j++) dh[j] *= gpt_gelu_grad(hp[j]);
            for (j = 0; j < He; j++)                                /* through Wfc */
                for (i = 0; i < C; i++) {
                    dnt[i] += dh[j] * wfc[(size_t)j * C + i];
                    gfc[(size_t)j * C + i] += dh[j] * nt[i];
                }
        }
        /* softmax backward: d logit_e = p_e (dp_e - Σ p dp), then through the router */
        for (e = 0; e < E; e++) dot += pr[e] * dpr[e];
        for (e = 0; e < E; e++) {
            float dl = pr[e] * (dpr[e] - dot);
            for (i = 0; i < C; i++) {
                dnt[i] += dl * w->wrouter[(size_t)e * C + i];
                g->wrouter[(size_t)e * C + i] += dl * nt[i];
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * a stage forward: (token ids | the residual stream) -> (the residual stream | logits)
 * ------------------------------------------------------------------------------------------ */

/* in: [T] int32 token ids on the first stage, else [T, C] floats; out: [T, V] logits on the last
 * stage, else [T, C]. replay: [the stage's MoE layers][T][K] or NULL (see gpt_route). Saves what
 * the backward needs in a (from gpt_acts_carve). Returns 0, or -1 when a cp collective failed. */
static int gpt_forward(const gpt_config *c, const gpt_stage *st, const gpt_batch *b, const gpt_route *r,
                       const gpt_cp *cp, const void *in, float *out, gpt_acts *a, gpt_scratch *s)
{
    int C = c->width, T = b->T, k, t, i, moe = 0;
    size_t n = (size_t)T * C;
    float *x = st->count > 0 ? a->layer[0].x : (st->has_head ? a->xf : out);
    gpt_mark(s);
    if (st->has_embedding) {            /* x[t] = wte[id] + wpe[position in its sequence] */
        const int32_t *ids = (const int32_t *)in;
        for (t = 0; t < T; t++)
            for (i = 0; i < C; i++)
                x[(size_t)t * C + i] = st->w.wte[(size_t)ids[t] * C + i] + st->w.wpe[(size_t)b->pos[t] * C + i];
    } else {
        memcpy(x, in, sizeof(float) * n);
    }
    for (k = 0; k < st->count; k++) {
        const gpt_layer_weights *w = &st->w.layer[k];
        gpt_layer_acts *la = &a->layer[k];
        float *y = k + 1 < st->count ? a->layer[k + 1].x : (st->has_head ? a->xf : out);
        if (GPT_HAS_ATTN(st, k)) {      /* attention block: x2 = x + Wo attention(RMSNorm(x)) */
            float *x2 = GPT_HAS_MLP(st, k) ? la->x2 : y;
            gpt_mark(s);
            gpt_rmsnorm(la->n1, la->rs1, la->x, w->ln1, T, C);
            gpt_matmul(la->qkv, la->n1, w->wqkv, T, C, 3 * C);
            if (gpt_attention(la->ay, la->att, la->kv, la->qkv, b, c, cp, s)) return -1;
            gpt_matmul(x2, la->ay, w->wo, T, C, C);
            for (i = 0; i < (int)n; i++) x2[i] += la->x[i];
        }
        if (!GPT_HAS_MLP(st, k)) continue;
        /* MLP block: y = x2 + MLP(RMSNorm(x2)) */
        gpt_mark(s);
        gpt_rmsnorm(la->n2, la->rs2, la->x2, w->ln2, T, C);
        if (w->wrouter) {
            const int32_t *rp = r && r->replay ? r->replay + (size_t)moe * T * c->topk : NULL;
            gpt_moe(y, la, la->n2, w, c, b, rp, r, c->moe_slot[st->first + k]);
            moe++;
        } else {
            gpt_mlp(y, la->hpre, la->hact, la->n2, w, c, T);
        }
        for (i = 0; i < (int)n; i++) y[i] += la->x2[i];
    }
    if (st->has_head) {                 /* logits = RMSNorm(x) wteᵀ: the output layer is the embedding */
        gpt_mark(s);
        gpt_rmsnorm(a->nf, a->rsf, a->xf, st->w.lnf, T, C);
        gpt_matmul(out, a->nf, st->w.wte_out, T, C, c->vocab);
    }
    return 0;
}

/* The loss of a microbatch's local tokens: the sum over labelled tokens of -log p(label), and
 * dlogits = p - onehot(label) (0 for unlabelled rows), not divided by anything: gpt.c divides
 * every gradient by the global token count once the step is summed (pp_loss's rule). dlogits may
 * be NULL (forward only). *count gets the labelled tokens. */
static double gpt_loss(const gpt_config *c, const gpt_batch *b, const float *logits, float *dlogits, int *count)
{
    int V = c->vocab, t, v;
    double sum = 0;
    *count = 0;
    for (t = 0; t < b->T; t++) {
        const float *l = logits + (size_t)t * V;
        float *d = dlogits ? dlogits + (size_t)t * V : NULL, mx = -INFINITY, z = 0;
        if (b->labels[t] < 0) {
            if (d) for (v = 0; v < V; v++) d[v] = 0;
            continue;
        }
        for (v = 0; v < V; v++) if (l[v] > mx) mx = l[v];
        for (v = 0; v < V; v++) z += expf(l[v] - mx);
        sum += (double)(logf(z) + mx - l[b->labels[t]]);
        (*count)++;
        if (d) {
            for (v = 0; v < V; v++) d[v] = expf(l[v] - mx) / z;
            d[b->labels[t]] -= 1.0f;
        }
    }
    return sum;
}

/* ------------------------------------------------------------------------------------------
 * a stage backward, the forward in reverse
 * ------------------------------------------------------------------------------------------ */

/* grad_out: [T, V] dlogits on the last stage, else [T, C]; grad_in: [T, C], or NULL on the first
 * stage (the embedding takes the gradient instead). Adds into the stage's grads (the output
 * layer's weight under gpt_stage_defer_head: keeps its rows). Returns 0, -1 when a cp collective
 * failed, or -2 when the deferred rows would pass gpt_stage_defer_head's count. */
static int gpt_backward(const gpt_config *c, gpt_stage *st, const gpt_batch *b, const gpt_cp *cp,
                        const float *grad_out, float *grad_in, const gpt_acts *a, gpt_scratch *s)
{
    int C = c->width, T = b->T, k, t, i;
    size_t n = (size_t)T * C;
    float *dx = s->dx;
    gpt_mark(s);
    if (st->has_head) {
        int defer = st->head_dout != NULL;
        if (defer && st->head_rows + T > st->head_cap) return -2;
        gpt_matmul_backward(s->dn, NULL, grad_out, a->nf, st->w.wte_out, T, C, c->vocab);
        gpt_rmsnorm_backward(dx, st->g.lnf, s->dn, a->xf, a->rsf, st->w.lnf, T, C, 0);
        gpt_mark(s);                    /* the weight gradient on its own (--unit-costs: what a deferral moves) */
        if (defer) {                    /* the weight gradient's rows, for gpt_head_wgrad */
            memcpy(st->head_dout + (size_t)st->head_rows * c->vocab, grad_out, sizeof(float) * (size_t)T * c->vocab);
            memcpy(st->head_in + (size_t)st->head_rows * C, a->nf, sizeof(float) * n);
            st->head_rows += T;
        } else {
            gpt_matmul_backward(NULL, st->g.wte_out, grad_out, a->nf, st->w.wte_out, T, C, c->vocab);
        }
    } else {
        memcpy(dx, grad_out, sizeof(float) * n);
    }
    for (k = st->count - 1; k >= 0; k--) {
        const gpt_layer_weights *w = &st->w.layer[k];
        gpt_layer_weights *g = &st->g.layer[k];
        const gpt_layer_acts *la = &a->layer[k];
        if (GPT_HAS_MLP(st, k)) {
            /* MLP block: dx holds dy; the residual passes it to x2 unchanged, the MLP adds to it */
            gpt_mark(s);
            if (w->wrouter) gpt_moe_backward(s->dn, dx, la, la->n2, w, g, c, T, s);
            else gpt_mlp_backward(s->dn, dx, la->hpre, la->hact, la->n2, w, g, c, T, s);
            gpt_rmsnorm_backward(dx, g->ln2, s->dn, la->x2, la->rs2, w->ln2, T, C, 1);
        }
        if (!GPT_HAS_ATTN(st, k)) continue;
        /* attention block: dx holds dx2; the residual passes it on, attention adds to it */
        gpt_mark(s);
        gpt_matmul_backward(s->day, g->wo, dx, la->ay, w->wo, T, C, C);
        if (gpt_attention_backward(s->dqkv, s->day, la->att, la->kv, la->qkv, b, c, cp, s)) return -1;
        gpt_matmul_backward(s->dn, g->wqkv, s->dqkv, la->n1, w->wqkv, T, C, 3 * C);
        gpt_rmsnorm_backward(dx, g->ln1, s->dn, la->x, la->rs1, w->ln1, T, C, 1);
    }
    gpt_mark(s);
    if (st->has_embedding) {            /* each token's row of wte and its position's row of wpe */
        for (t = 0; t < T; t++)
            for (i = 0; i < C; i++) {
                st->g.wte[(size_t)b->ids[t] * C + i] += dx[(size_t)t * C + i];
                st->g.wpe[(size_t)b->pos[t] * C + i] += dx[(size_t)t * C + i];
            }
    } else if (grad_in) {
        memcpy(grad_in, dx, sizeof(float) * n);
    }
    gpt_mark(s);
    return 0;
}

/* gpt_stage_defer_head: the output layer's weight gradient of the rows kept since the last call,
 * at once; the rows start again. */
static void gpt_head_wgrad(const gpt_config *c, gpt_stage *st)
{
    if (!st->head_dout || !st->head_rows) return;
    gpt_matmul_backward(NULL, st->g.wte_out, st->head_dout, st->head_in, st->w.wte_out, st->head_rows, c->width, c->vocab);
    st->head_rows = 0;
}

/* ------------------------------------------------------------------------------------------
 * the update
 * ------------------------------------------------------------------------------------------ */

/* AdamW (Loshchilov & Hutter) with the gradients scaled by `scale` (the clip); the gains take no
 * weight decay. step counts from 1. */
static void gpt_adamw(gpt_stage *s, float scale, float lr, float wd, int step)
{
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)step), c2 = 1.0f - powf(b2, (float)step);
    size_t i;
    for (i = 0; i < s->n; i++) {
        float g = s->grads[i] * scale;
        s->adam_m[i] = b1 * s->adam_m[i] + (1.0f - b1) * g;
        s->adam_v[i] = b2 * s->adam_v[i] + (1.0f - b2) * g * g;
        s->params[i] -= lr * ((s->adam_m[i] / c1) / (sqrtf(s->adam_v[i] / c2) + eps) +
                              (i < s->n_gains ? 0.0f : wd * s->params[i]));
    }
}

#endif /* GPT_MODEL_H */
