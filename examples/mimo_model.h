/* mimo_model.h — the two-module model of examples/mimo_threads.c and tests/test_mimo.c.
 *
 * A "vision" encoder (a two-layer MLP) turns each row's features into an embedding; a small
 * residual-MLP "language" model adds the row's token embedding, runs residual blocks and
 * classifies. Three ways to train it, which must agree:
 *
 *   mm_reference_step   one process, the whole global batch: the ground truth
 *   mm_rank_nonco       a rank of a non-colocated job: encoder and language model on different
 *                       ranks, one pipeline of pp(vision) + pp(language) stages (pp_mimo_pipeline,
 *                       pp_mimo_transport under the unchanged executor)
 *   mm_rank_coloc       a rank of a colocated job: every rank runs the encoder (pp = 1) for all
 *                       microbatches, pp_mimo_bridge_exchange moves the outputs to the language
 *                       model's first stage, its pipeline runs, the gradients go back
 *
 * Shapes (rows = the rows of a microbatch this rank holds; a dp replica d of a module with dp D
 * holds the global rows [d*R/D, (d+1)*R/D) of every microbatch of R rows):
 *     encoder   x [rows, MM_DIN] -> relu(W1 x + b1) = h [rows, MM_H] -> W2 h + b2 = e [rows, MM_D]
 *     language  y = e + Emb[tok]  [rows, MM_D]; per block: y += Cw relu(A y + a) + c;
 *               logits = Wo y + bo [rows, MM_C]; loss = sum of cross-entropies / (mb * R)
 * Every tensor is row-major with the batch outermost, so a bridge part is a byte range.       */
#ifndef MIMO_MODEL_H
#define MIMO_MODEL_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../pipepar.h"

#define MM_DIN 6        /* encoder input features */
#define MM_H 12         /* encoder hidden */
#define MM_D 8          /* embedding width (the bridged tensor: [rows, MM_D]) */
#define MM_F 16         /* language block hidden */
#define MM_V 7          /* tokens */
#define MM_C 5          /* classes */
#define MM_BLOCKS 4     /* residual blocks of the language model */

/* parameter layout: encoder [W1 b1 | W2 b2], language [Emb | blocks (A a Cw c) | Wo bo] */
#define MM_E1 (MM_H * MM_DIN + MM_H)
#define MM_E2 (MM_D * MM_H + MM_D)
#define MM_ENC_N (MM_E1 + MM_E2)
#define MM_EMB (MM_V * MM_D)
#define MM_BLK (MM_F * MM_D + MM_F + MM_D * MM_F + MM_D)
#define MM_HEAD (MM_C * MM_D + MM_C)
#define MM_LM_N (MM_EMB + MM_BLOCKS * MM_BLK + MM_HEAD)

typedef struct mm_params {
    float enc[MM_ENC_N];
    float lm[MM_LM_N];
} mm_params;

typedef struct mm_config {
    int mb;             /* microbatches per step */
    int rows;           /* global rows per microbatch */
    float lr;
    float max_norm;     /* clip the global gradient norm to this (<= 0: no clipping) */
} mm_config;

/* --- data and initial weights: a hash, so every rank makes the same numbers ------------------- */

static unsigned mm_hash(unsigned a, unsigned b, unsigned c, unsigned d)
{
    unsigned h = 2166136261u;
    unsigned v[4];
    int i;
    v[0] = a; v[1] = b; v[2] = c; v[3] = d;
    for (i = 0; i < 4; i++) { h ^= v[i]; h *= 16777619u; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; }
    return h;
}

static float mm_uniform(unsigned a, unsigned b, unsigned c, unsigned d)   /* [-1, 1) */
{
    return (float)((double)(mm_hash(a, b, c, d) >> 8) / 8388608.0 - 1.0);
}

/* Row `row` of microbatch `mb` of step `step`: features, token, label. */
static void mm_row(int step, int mb, int row, float x[MM_DIN], int *tok, int *label)
{
    int j;
    for (j = 0; j < MM_DIN; j++) x[j] = mm_uniform(1u, (unsigned)step, (unsigned)(mb * 4096 + row), (unsigned)j);
    *tok = (int)(mm_hash(2u, (unsigned)step, (unsigned)mb, (unsigned)row) % MM_V);
    *label = (*tok + (x[0] > 0) + 2 * (x[1] > 0.3f)) % MM_C;
}

static void mm_init(mm_params *p)
{
    int i;
    for (i = 0; i < MM_ENC_N; i++) p->enc[i] = 0.4f * mm_uniform(3u, 0u, 0u, (unsigned)i);
    for (i = 0; i < MM_LM_N; i++) p->lm[i] = 0.3f * mm_uniform(4u, 0u, 0u, (unsigned)i);
}

/* --- the math of one stage over `rows` rows ---------------------------------------------------- */

/* out[r][i] = sum_j W[i][j] in[r][j] + b[i]   (W [n_out][n_in], then b [n_out]) */
static void mm_linear(const float *W, int n_out, int n_in, const float *in, int rows, float *out)
{
    int r, i, j;
    const float *b = W + n_out * n_in;
    for (r = 0; r < rows; r++)
        for (i = 0; i < n_out; i++) {
            float s = b[i];
            for (j = 0; j < n_in; j++) s += W[i * n_in + j] * in[r * n_in + j];
            out[r * n_out + i] = s;
        }
}

/* dW += dout^T in, db += sum dout, din = W^T dout (din may be NULL; it is overwritten) */
static void mm_linear_back(const float *W, float *dW, int n_out, int n_in, const float *in, const float *dout, int rows,
                           float *din)
{
    int r, i, j;
    float *db = dW + n_out * n_in;
    for (r = 0; r < rows; r++)
        for (i = 0; i < n_out; i++) {
            float g = dout[r * n_out + i];
            db[i] += g;
            for (j = 0; j < n_in; j++) dW[i * n_in + j] += g * in[r * n_in + j];
        }
    if (din)
        for (r = 0; r < rows; r++)
            for (j = 0; j < n_in; j++) {
                float s = 0;
                for (i = 0; i < n_out; i++) s += W[i * n_in + j] * dout[r * n_out + i];
                din[r * n_in + j] = s;
            }
}

/* Encoder layers [l0, l1) of 2: layer 0 is x -> h (relu), layer 1 is h -> e. */
static void mm_enc_forward(const float *P, int l0, int l1, const float *in, int rows, float *out)
{
    int i;
    if (l0 == 0 && l1 == 2) {
        float *h = (float *)calloc((size_t)rows * MM_H, sizeof(float));
        mm_linear(P, MM_H, MM_DIN, in, rows, h);
        for (i = 0; i < rows * MM_H; i++) h[i] = h[i] > 0 ? h[i] : 0;
        mm_linear(P + MM_E1, MM_D, MM_H, h, rows, out);
        free(h);
    } else if (l0 == 0) {
        mm_linear(P, MM_H, MM_DIN, in, rows, out);
        for (i = 0; i < rows * MM_H; i++) out[i] = out[i] > 0 ? out[i] : 0;
    } else {
        mm_linear(P + MM_E1, MM_D, MM_H, in, rows, out);
    }
}

/* Recomputes the forward from `in`, then adds the gradients to dP; din (may be NULL) gets the
 * input's gradient. */
static void mm_enc_backward(const float *P, float *dP, int l0, int l1, const float *in, const float *dout, int rows,
                            float *din)
{
    int i;
    float *h = NULL, *dh = NULL;
    if (l1 == 2 && l0 == 0) {
        h = (float *)calloc((size_t)rows * MM_H, sizeof(float));
        dh = (float *)calloc((size_t)rows * MM_H, sizeof(float));
        mm_linear(P, MM_H, MM_DIN, in, rows, h);
        for (i = 0; i < rows * MM_H; i++) h[i] = h[i] > 0 ? h[i] : 0;
        mm_linear_back(P + MM_E1, dP + MM_E1, MM_D, MM_H, h, dout, rows, dh);
        for (i = 0; i < rows * MM_H; i++) dh[i] = h[i] > 0 ? dh[i] : 0;
        mm_linear_back(P, dP, MM_H, MM_DIN, in, dh, rows, din);
    } else if (l0 == 0) {
        h = (float *)calloc((size_t)rows * MM_H, sizeof(float));
        dh = (float *)calloc((size_t)rows * MM_H, sizeof(float));
        mm_linear(P, MM_H, MM_DIN, in, rows, h);
        for (i = 0; i < rows * MM_H; i++) dh[i] = h[i] > 0 ? dout[i] : 0;
        mm_linear_back(P, dP, MM_H, MM_DIN, in, dh, rows, din);
    } else {
        mm_linear_back(P + MM_E1, dP + MM_E1, MM_D, MM_H, in, dout, rows, din);
    }
    free(h);
    free(dh);
}

/* Language model blocks [b0, b1); `first` adds the token embedding, `last` applies the head.
 * ys (optional, [(b1-b0+1) * rows * MM_D]) keeps each block's input and the final y;
 * us (optional, [(b1-b0) * rows * MM_F]) each block's pre-activation. */
static void mm_lm_forward(const float *P, int b0, int b1, int first, int last, const float *in, const int *tok,
                          int rows, float *out, float *ys, float *us)
{
    size_t yd = (size_t)rows * MM_D;
    float *y = (float *)calloc(yd, sizeof(float)), *u = (float *)calloc((size_t)rows * MM_F, sizeof(float));
    float *r = (float *)calloc((size_t)rows * MM_F, sizeof(float)), *d = (float *)calloc(yd, sizeof(float));
    int b, i, k;
    memcpy(y, in, sizeof(float) * yd);
    if (first)
        for (i = 0; i < rows; i++)
            for (k = 0; k < MM_D; k++) y[i * MM_D + k] += P[tok[i] * MM_D + k];
    for (b = b0; b < b1; b++) {
        const float *B = P + MM_EMB + b * MM_BLK;
        if (ys) memcpy(ys + (size_t)(b - b0) * yd, y, sizeof(float) * yd);
        mm_linear(B, MM_F, MM_D, y, rows, u);
        if (us) memcpy(us + (size_t)(b - b0) * rows * MM_F, u, sizeof(float) * (size_t)rows * MM_F);
        for (i = 0; i < rows * MM_F; i++) r[i] = u[i] > 0 ? u[i] : 0;
        mm_linear(B + MM_F * MM_D + MM_F, MM_D, MM_F, r, rows, d);
        for (i = 0; i < rows * MM_D; i++) y[i] += d[i];
    }
    if (ys) memcpy(ys + (size_t)(b1 - b0) * yd, y, sizeof(float) * yd);
    if (last) mm_linear(P + MM_EMB + MM_BLOCKS * MM_BLK, MM_C, MM_D, y, rows, out);
    else memcpy(out, y, sizeof(float) * yd);
    free(y); free(u); free(r); free(d);
}

static void mm_lm_backward(const float *P, float *dP, int b0, int b1, int first, int last, const float *in,
                           const int *tok, const float *dout, int rows, float *din)
{
    size_t yd = (size_t)rows * MM_D;
    int nb = b1 - b0, b, i, k;
    float *ys = (float *)calloc((size_t)(nb + 1) * yd, sizeof(float));
    float *us = (float *)calloc((size_t)(nb > 0 ? nb : 1) * rows * MM_F, sizeof(float));
    float *out = (float *)calloc((size_t)rows * (MM_C > MM_D ? MM_C : MM_D), sizeof(float));
    float *dy = (float *)calloc(yd, sizeof(float)), *r = (float *)calloc((size_t)rows * MM_F, sizeof(float));
    float *du = (float *)calloc((size_t)rows * MM_F, sizeof(float)), *t = (float *)calloc(yd, sizeof(float));
    mm_lm_forward(P, b0, b1, first, last, in, tok, rows, out, ys, us);
    if (last)
        mm_linear_back(P + MM_EMB + MM_BLOCKS * MM_BLK, dP + MM_EMB + MM_BLOCKS * MM_BLK, MM_C, MM_D,
                       ys + (size_t)nb * yd, dout, rows, dy);
    else
        memcpy(dy, dout, sizeof(float) * yd);
    for (b = b1 - 1; b >= b0; b--) {
        const float *B = P + MM_EMB + b * MM_BLK;
        float *dB = dP + MM_EMB + b * MM_BLK;
        const float *u = us + (size_t)(b - b0) * rows * MM_F;
        for (i = 0; i < rows * MM_F; i++) r[i] = u[i] > 0 ? u[i] : 0;
        mm_linear_back(B + MM_F * MM_D + MM_F, dB + MM_F * MM_D + MM_F, MM_D, MM_F, r, dy, rows, du);
        for (i = 0; i < rows * MM_F; i++) du[i] = u[i] > 0 ? du[i] : 0;
        mm_linear_back(B, dB, MM_F, MM_D, ys + (size_t)(b - b0) * yd, du, rows, t);
        for (i = 0; i < rows * MM_D; i++) dy[i] += t[i];    /* the residual path */
    }
    if (first)
        for (i = 0; i < rows; i++)
            for (k = 0; k < MM_D; k++) dP[tok[i] * MM_D + k] += dy[i * MM_D + k];
    if (din) memcpy(din, dy, sizeof(float) * yd);
    free(ys); free(us); free(out); free(dy); free(r); free(du); free(t);
}

/* Cross-entropy of `rows` rows: returns the sum; grad = (softmax - onehot) * scale. */
static double mm_loss(const float *logits, const int *label, int rows, float scale, float *grad)
{
    double total = 0;
    int r, c;
    for (r = 0; r < rows; r++) {
        const float *z = logits + r * MM_C;
        double mx = z[0], s = 0;
        for (c = 1; c < MM_C; c++) if (z[c] > mx) mx = z[c];
        for (c = 0; c < MM_C; c++) s += exp((double)z[c] - mx);
        total += mx + log(s) - (double)z[label[r]];
        if (grad)
            for (c = 0; c < MM_C; c++)
                grad[r * MM_C + c] = (float)((exp((double)z[c] - mx) / s - (c == label[r])) * scale);
    }
    return total;
}

/* Blocks and layers of a stage: module stage s of pp. */
static void mm_enc_layers(int s, int pp, int *l0, int *l1) { *l0 = s * 2 / pp; *l1 = (s + 1) * 2 / pp; }
static void mm_lm_blocks(int s, int pp, int *b0, int *b1) { *b0 = s * MM_BLOCKS / pp; *b1 = (s + 1) * MM_BLOCKS / pp; }

/* --- the ground truth: one process, the whole batch ------------------------------------------ */

typedef struct mm_step_result {
    double loss;        /* mean cross-entropy over the step's rows */
    double norm;        /* global gradient norm before clipping */
    double clip;
} mm_step_result;

/* One training step of the whole model on one process; grads (optional) receives the gradients. */
static void mm_reference_step(mm_params *p, const mm_config *cfg, int step, mm_step_result *res, mm_params *grads)
{
    int R = cfg->rows, m, r, i;
    mm_params *g = (mm_params *)calloc(1, sizeof *g);
    float *x = (float *)calloc((size_t)R * MM_DIN, sizeof(float)), *e = (float *)calloc((size_t)R * MM_D, sizeof(float));
    float *z = (float *)calloc((size_t)R * MM_C, sizeof(float)), *dz = (float *)calloc((size_t)R * MM_C, sizeof(float));
    float *de = (float *)calloc((size_t)R * MM_D, sizeof(float));
    int *tok = (int *)calloc((size_t)R, sizeof(int)), *lab = (int *)calloc((size_t)R, sizeof(int));
    double loss = 0, ss = 0, clip = 1;
    float scale = 1.0f / (float)(cfg->mb * R);
    for (m = 0; m < cfg->mb; m++) {
        for (r = 0; r < R; r++) mm_row(step, m, r, x + r * MM_DIN, &tok[r], &lab[r]);
        mm_enc_forward(p->enc, 0, 2, x, R, e);
        mm_lm_forward(p->lm, 0, MM_BLOCKS, 1, 1, e, tok, R, z, NULL, NULL);
        loss += mm_loss(z, lab, R, scale, dz);
        mm_lm_backward(p->lm, g->lm, 0, MM_BLOCKS, 1, 1, e, tok, dz, R, de);
        mm_enc_backward(p->enc, g->enc, 0, 2, x, de, R, NULL);
    }
    for (i = 0; i < MM_ENC_N; i++) ss += (double)g->enc[i] * g->enc[i];
    for (i = 0; i < MM_LM_N; i++) ss += (double)g->lm[i] * g->lm[i];
    res->loss = loss / (cfg->mb * R);
    res->norm = sqrt(ss);
    if (cfg->max_norm > 0 && cfg->max_norm / (res->norm + 1e-6) < 1) clip = cfg->max_norm / (res->norm + 1e-6);
    res->clip = clip;
    for (i = 0; i < MM_ENC_N; i++) p->enc[i] -= cfg->lr * (float)(clip * g->enc[i]);
    for (i = 0; i < MM_LM_N; i++) p->lm[i] -= cfg->lr * (float)(clip * g->lm[i]);
    if (grads) *grads = *g;
    free(g); free(x); free(e); free(z); free(dz); free(de); free(tok); free(lab);
}

/* --- the same model on the ranks of a MIMO job ------------------------------------------------ */

#define MM_MAX_STEPS 16

/* What the ranks share: the pipeline (built once), the config, and what each rank reports. */
typedef struct mm_job {
    const pp_mimo_pipeline *pl;
    mm_config cfg;
    int steps;
    int vision, language;           /* module indices */
    double timeout_s;
    /* per rank, filled by the rank's thread */
    mm_params *params;              /* [world] the rank's copy of the weights after the steps */
    mm_params *grads;               /* [world] its gradients of the last step (after dp sums) */
    float (*loss)[MM_MAX_STEPS];    /* [world][steps] pp_step_result.loss */
    double (*norm)[MM_MAX_STEPS];   /* [world][steps] */
    double (*clip)[MM_MAX_STEPS];
} mm_job;

/* One rank's state, the `user` of its callbacks. */
typedef struct mm_rank {
    const mm_job *job;
    const pp_mimo *m;
    int rank, step;
    int module;                     /* the module of this rank's pipeline stage */
    int rows_vision, rows_language; /* rows of a microbatch in each module's replicas */
    int row0_vision, row0_language; /* the first global row of this rank's replica */
    mm_params P, G;
    float **lm_in, **lm_grad;       /* colocated: [mb] the bridged input and its gradient */
} mm_rank;

static void mm_rank_init(mm_rank *st, const mm_job *job, int rank)
{
    const pp_mimo *m = &job->pl->mimo;
    pp_mimo_role role;
    const pp_mimo_stage_info *si;
    int dv = m->modules[job->vision].grid.size[PP_DIM_DP], dl = m->modules[job->language].grid.size[PP_DIM_DP];
    memset(st, 0, sizeof *st);
    st->job = job;
    st->m = m;
    st->rank = rank;
    pp_mimo_rank_role(m, rank, &role, NULL);
    st->rows_vision = job->cfg.rows / dv;
    st->rows_language = job->cfg.rows / dl;
    if ((si = pp_mimo_role_module(&role, job->vision)) != NULL) st->row0_vision = si->coord[PP_DIM_DP] * st->rows_vision;
    if ((si = pp_mimo_role_module(&role, job->language)) != NULL)
        st->row0_language = si->coord[PP_DIM_DP] * st->rows_language;
    st->module = pp_mimo_role_module(&role, job->language) && (job->pl->encoder < 0 || !pp_mimo_role_module(&role, job->vision))
               ? job->language : job->vision;
    mm_init(&st->P);
}

/* The pipeline stage's module and module stage. */
static void mm_stage(const mm_rank *st, int stage, int *module, int *ms)
{
    pp_mimo_pipeline_stage(st->job->pl, stage, module, ms, NULL);
}

static size_t mm_tensor_bytes(void *user, int boundary, const pp_mb_info *info)
{
    mm_rank *st = (mm_rank *)user;
    int S = info->num_stages, mod, ms, rows = st->module == st->job->vision ? st->rows_vision : st->rows_language;
    if (boundary == S) return sizeof(float) * (size_t)rows * MM_C;
    mm_stage(st, boundary, &mod, &ms);
    if (mod == st->job->vision) return sizeof(float) * (size_t)rows * (ms == 0 ? MM_DIN : MM_H);
    return sizeof(float) * (size_t)rows * MM_D;
}

/* The tokens and labels of this rank's language rows of microbatch mb. */
static void mm_language_rows(const mm_rank *st, int mb, int *tok, int *lab)
{
    float x[MM_DIN];
    int r;
    for (r = 0; r < st->rows_language; r++) mm_row(st->step, mb, st->row0_language + r, x, &tok[r], &lab[r]);
}

static void mm_vision_rows(const mm_rank *st, int mb, float *x)
{
    int r, tok, lab;
    for (r = 0; r < st->rows_vision; r++) mm_row(st->step, mb, st->row0_vision + r, x + r * MM_DIN, &tok, &lab);
}

static int mm_input(void *user, const pp_mb_info *info, void *x)
{
    mm_rank *st = (mm_rank *)user;
    int mod, ms;
    mm_stage(st, 0, &mod, &ms);
    if (mod == st->job->vision) mm_vision_rows(st, info->mb, (float *)x);
    else memcpy(x, st->lm_in[info->mb], sizeof(float) * (size_t)st->rows_language * MM_D);   /* colocated */
    return 0;
}

static int mm_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    mm_rank *st = (mm_rank *)user;
    const pp_mimo *m = st->m;
    int mod, ms, a, b, pp;
    mm_stage(st, info->stage, &mod, &ms);
    pp = m->modules[mod].grid.size[PP_DIM_PP];
    if (mod == st->job->vision) {
        mm_enc_layers(ms, pp, &a, &b);
        mm_enc_forward(st->P.enc, a, b, (const float *)in, st->rows_vision, (float *)out);
    } else {
        int tok[4096], lab[4096];
        mm_language_rows(st, info->mb, tok, lab);
        mm_lm_blocks(ms, pp, &a, &b);
        mm_lm_forward(st->P.lm, a, b, ms == 0, ms == pp - 1, (const float *)in, tok, st->rows_language, (float *)out,
                      NULL, NULL);
    }
    return 0;
}

static int mm_loss_cb(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *l)
{
    mm_rank *st = (mm_rank *)user;
    int tok[4096], lab[4096];
    mm_language_rows(st, info->mb, tok, lab);
    l->loss = (float)mm_loss((const float *)out, lab, st->rows_language,
                             1.0f / (float)(st->job->cfg.mb * st->job->cfg.rows), (float *)grad_out);
    l->weight = (float)st->rows_language;
    return 0;
}

static int mm_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    mm_rank *st = (mm_rank *)user;
    const pp_mimo *m = st->m;
    int mod, ms, a, b, pp;
    mm_stage(st, info->stage, &mod, &ms);
    pp = m->modules[mod].grid.size[PP_DIM_PP];
    if (mod == st->job->vision) {
        mm_enc_layers(ms, pp, &a, &b);
        mm_enc_backward(st->P.enc, st->G.enc, a, b, (const float *)in, (const float *)grad_out, st->rows_vision,
                        (float *)grad_in);
    } else {
        int tok[4096], lab[4096];
        float *din = (float *)grad_in;
        mm_language_rows(st, info->mb, tok, lab);
        mm_lm_blocks(ms, pp, &a, &b);
        if (!din) din = st->lm_grad ? st->lm_grad[info->mb] : NULL;   /* colocated: the bridge's gradient */
        mm_lm_backward(st->P.lm, st->G.lm, a, b, ms == 0, ms == pp - 1, (const float *)in, tok,
                       (const float *)grad_out, st->rows_language, din);
    }
    return 0;
}

/* The split backward of zero-bubble schedules: I gives the input's gradient, W the weights'. */
static int mm_backward_input(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    mm_rank *st = (mm_rank *)user;
    mm_params keep = st->G;
    int rc = mm_backward(user, info, in, grad_out, grad_in);
    st->G = keep;
    return rc;
}

static int mm_backward_weight(void *user, const pp_mb_info *info, const void *in, const void *grad_out)
{
    mm_rank *st = (mm_rank *)user;
    float **lm_grad = st->lm_grad;
    int rc;
    st->lm_grad = NULL;
    rc = mm_backward(user, info, in, grad_out, NULL);
    st->lm_grad = lm_grad;
    return rc;
}

/* After the backward: sum each module's gradients over its dp replicas (same tp and pp
 * coordinates), the global norm, clip, SGD. */
static pp_status mm_finish_step(mm_rank *st, pp_transport *world, int step, pp_error *err)
{
    const pp_mimo *m = st->m;
    const mm_job *job = st->job;
    pp_mimo_role role;
    pp_mimo_grad g[2];
    double sumsq[PP_MIMO_MAX_MODULES];
    pp_mimo_norm norm;
    pp_status s;
    int k, i, members[64];
    pp_mimo_rank_role(m, st->rank, &role, NULL);
    for (k = 0; k < role.num_modules; k++) {
        const pp_mimo_stage_info *si = &role.modules[k];
        const pp_mimo_module *mod = &m->modules[si->module];
        pp_grid_group_info gi;
        float *grad = si->module == job->vision ? st->G.enc : st->G.lm;
        int n = si->module == job->vision ? MM_ENC_N : MM_LM_N;
        pp_grid_group(&mod->grid, si->local_rank, PP_GROUP_DP, &gi, NULL);
        pp_grid_group_members(&mod->grid, PP_GROUP_DP, gi.color, members, 64, NULL);
        for (i = 0; i < gi.size; i++) members[i] += mod->offset;
        s = pp_mimo_group_sum(world, members, gi.size, grad, n, si->module, job->timeout_s, err);
        if (s != PP_OK) return s;
    }
    memset(sumsq, 0, sizeof sumsq);
    memset(g, 0, sizeof g);
    for (k = 0; k < role.num_modules; k++) {
        int mod = role.modules[k].module;
        g[k].module = mod;
        g[k].grad = mod == job->vision ? st->G.enc : st->G.lm;
        g[k].count = mod == job->vision ? MM_ENC_N : MM_LM_N;
    }
    if ((s = pp_mimo_grad_sumsq(m, st->rank, g, role.num_modules, sumsq, err)) != PP_OK) return s;
    if ((s = pp_mimo_grad_norm(m, world, sumsq, job->cfg.max_norm, job->timeout_s, &norm, err)) != PP_OK) return s;
    job->norm[st->rank][step] = norm.norm;
    job->clip[st->rank][step] = norm.clip;
    /* gradients of stages this rank does not run are zero: updating the whole copy is harmless */
    for (i = 0; i < MM_ENC_N; i++) st->P.enc[i] -= job->cfg.lr * (float)(norm.clip * st->G.enc[i]);
    for (i = 0; i < MM_LM_N; i++) st->P.lm[i] -= job->cfg.lr * (float)(norm.clip * st->G.lm[i]);
    job->grads[st->rank] = st->G;
    return PP_OK;
}

static pp_callbacks mm_callbacks(mm_rank *st)
{
    pp_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.user = st;
    cb.tensor_bytes = mm_tensor_bytes;
    cb.input = mm_input;
    cb.forward = mm_forward;
    cb.loss = mm_loss_cb;
    cb.backward = mm_backward;
    cb.backward_input = mm_backward_input;
    cb.backward_weight = mm_backward_weight;
    return cb;
}

/* A rank of the non-colocated job: the executor over pp_mimo_transport, nothing else. */
static pp_status mm_rank_nonco(void *user, int rank, pp_transport *world, pp_error *err)
{
    mm_job *job = (mm_job *)user;
    mm_rank *st = (mm_rank *)calloc(1, sizeof *st);
    pp_mimo_transport *mt = NULL;
    pp_executor *ex = NULL;
    pp_executor_config ec;
    pp_step_result res;
    pp_status s;
    int step;
    if (!st) return PP_ENOMEM;
    mm_rank_init(st, job, rank);
    memset(&ec, 0, sizeof ec);
    s = pp_mimo_transport_create(job->pl, rank, world, &mt, &ec.transport, err);
    if (s == PP_OK) {
        ec.schedule = job->pl->schedule;
        ec.callbacks = mm_callbacks(st);
        ec.timeout_s = job->timeout_s;
        s = pp_executor_create(&ec, &ex, err);
    }
    for (step = 0; step < job->steps && s == PP_OK; step++) {
        st->step = step;
        memset(&st->G, 0, sizeof st->G);
        s = pp_run_step(ex, NULL, &res, err);
        if (s == PP_OK) {
            job->loss[rank][step] = res.loss;
            s = mm_finish_step(st, world, step, err);
        }
    }
    if (s != PP_OK && s != PP_EABORTED) world->abort(world->user, s, err ? err->message : "failed");
    job->params[rank] = st->P;
    pp_executor_free(ex);
    pp_mimo_transport_free(mt);
    free(st);
    return s;
}

/* A rank of the colocated job: the encoder for every microbatch, the bridge, the language
 * model's pipeline, the bridge back, the encoder's backward. */
static pp_status mm_rank_coloc(void *user, int rank, pp_transport *world, pp_error *err)
{
    mm_job *job = (mm_job *)user;
    const pp_mimo_pipeline *pl = job->pl;
    mm_rank *st = (mm_rank *)calloc(1, sizeof *st);
    int M = job->cfg.mb, step, k;
    pp_mimo_transport *mt = NULL;
    pp_executor *ex = NULL;
    pp_executor_config ec;
    pp_step_result res;
    pp_status s;
    float **enc_out = NULL, **enc_grad = NULL;
    size_t *enc_bytes = NULL, *lm_bytes = NULL;
    pp_mimo_bridge_io fwd, bwd;
    float *x = NULL;
    if (!st) return PP_ENOMEM;
    mm_rank_init(st, job, rank);
    st->lm_in = (float **)calloc((size_t)M, sizeof(float *));
    st->lm_grad = (float **)calloc((size_t)M, sizeof(float *));
    enc_out = (float **)calloc((size_t)M, sizeof(float *));
    enc_grad = (float **)calloc((size_t)M, sizeof(float *));
    enc_bytes = (size_t *)calloc((size_t)M, sizeof(size_t));
    lm_bytes = (size_t *)calloc((size_t)M, sizeof(size_t));
    x = (float *)calloc((size_t)st->rows_vision * MM_DIN, sizeof(float));
    for (k = 0; k < M; k++) {
        enc_bytes[k] = sizeof(float) * (size_t)st->rows_vision * MM_D;
        lm_bytes[k] = sizeof(float) * (size_t)st->rows_language * MM_D;
        enc_out[k] = (float *)malloc(enc_bytes[k]);
        enc_grad[k] = (float *)malloc(enc_bytes[k]);
        st->lm_in[k] = (float *)malloc(lm_bytes[k]);
        st->lm_grad[k] = (float *)malloc(lm_bytes[k]);
    }
    fwd.encoder_out = (void *const *)enc_out; fwd.encoder_bytes = enc_bytes;
    fwd.language_in = (void *const *)st->lm_in; fwd.language_bytes = lm_bytes;
    bwd.encoder_out = (void *const *)enc_grad; bwd.encoder_bytes = enc_bytes;
    bwd.language_in = (void *const *)st->lm_grad; bwd.language_bytes = lm_bytes;
    memset(&ec, 0, sizeof ec);
    s = pp_mimo_transport_create(pl, rank, world, &mt, &ec.transport, err);
    if (s == PP_OK) {
        ec.schedule = pl->schedule;
        ec.callbacks = mm_callbacks(st);
        ec.timeout_s = job->timeout_s;
        s = pp_executor_create(&ec, &ex, err);
    }
    for (step = 0; step < job->steps && s == PP_OK; step++) {
        st->step = step;
        memset(&st->G, 0, sizeof st->G);
        /* phase 1: the encoder (pp = 1) for every microbatch, then the bridge */
        for (k = 0; k < M; k++) {
            mm_vision_rows(st, k, x);
            mm_enc_forward(st->P.enc, 0, 2, x, st->rows_vision, enc_out[k]);
        }
        s = pp_mimo_bridge_exchange(pl, job->vision, rank, world, 0, &fwd, step, job->timeout_s, err);
        /* phase 2: the language model's pipeline */
        if (s == PP_OK) s = pp_run_step(ex, NULL, &res, err);
        /* phase 3: gradients back over the bridge, the encoder's backward */
        if (s == PP_OK) s = pp_mimo_bridge_exchange(pl, job->vision, rank, world, 1, &bwd, step, job->timeout_s, err);
        for (k = 0; k < M && s == PP_OK; k++) {
            mm_vision_rows(st, k, x);
            mm_enc_backward(st->P.enc, st->G.enc, 0, 2, x, enc_grad[k], st->rows_vision, NULL);
        }
        if (s == PP_OK) {
            job->loss[rank][step] = res.loss;
            s = mm_finish_step(st, world, step, err);
        }
    }
    if (s != PP_OK && s != PP_EABORTED) world->abort(world->user, s, err ? err->message : "failed");
    job->params[rank] = st->P;
    pp_executor_free(ex);
    pp_mimo_transport_free(mt);
    for (k = 0; k < M; k++) { free(enc_out[k]); free(enc_grad[k]); free(st->lm_in[k]); free(st->lm_grad[k]); }
    free(enc_out); free(enc_grad); free(enc_bytes); free(lm_bytes); free(x);
    free(st->lm_in); free(st->lm_grad);
    free(st);
    return s;
}

/* Runs `steps` steps of the job on CPU threads (one per rank); per-rank results in job. */
static pp_status mm_run_threads(mm_job *job, int colocated, pp_error *err)
{
    int W = job->pl->mimo.world;
    pp_status s;
    job->params = (mm_params *)calloc((size_t)W, sizeof(mm_params));
    job->grads = (mm_params *)calloc((size_t)W, sizeof(mm_params));
    job->loss = (float (*)[MM_MAX_STEPS])calloc((size_t)W, sizeof *job->loss);
    job->norm = (double (*)[MM_MAX_STEPS])calloc((size_t)W, sizeof *job->norm);
    job->clip = (double (*)[MM_MAX_STEPS])calloc((size_t)W, sizeof *job->clip);
    if (!job->params || !job->grads || !job->loss || !job->norm || !job->clip) return PP_ENOMEM;
    s = pp_threads_run(W, colocated ? mm_rank_coloc : mm_rank_nonco, job, NULL, NULL, err);
    return s;
}

static void mm_job_free(mm_job *job)
{
    free(job->params); free(job->grads); free(job->loss); free(job->norm); free(job->clip);
    job->params = job->grads = NULL; job->loss = NULL; job->norm = job->clip = NULL;
}

/* The largest difference between a rank's weights (of the stages it runs) and the reference's. */
static double mm_max_param_diff(const mm_job *job, int rank, const mm_params *ref)
{
    const pp_mimo *m = &job->pl->mimo;
    pp_mimo_role role;
    double d = 0;
    int k, i, lo, hi;
    pp_mimo_rank_role(m, rank, &role, NULL);
    for (k = 0; k < role.num_modules; k++) {
        const pp_mimo_stage_info *si = &role.modules[k];
        int a, b;
        if (si->module == job->vision) {
            mm_enc_layers(si->stage, si->num_stages, &a, &b);
            lo = a == 0 ? 0 : MM_E1; hi = b == 2 ? MM_ENC_N : MM_E1;
            for (i = lo; i < hi; i++) d = fmax(d, fabs((double)job->params[rank].enc[i] - ref->enc[i]));
        } else {
            mm_lm_blocks(si->stage, si->num_stages, &a, &b);
            lo = si->is_first_stage ? 0 : MM_EMB + a * MM_BLK;
            hi = si->is_last_stage ? MM_LM_N : MM_EMB + b * MM_BLK;
            for (i = lo; i < hi; i++) d = fmax(d, fabs((double)job->params[rank].lm[i] - ref->lm[i]));
        }
    }
    return d;
}
#endif
