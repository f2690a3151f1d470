/* mlp_model.h — the model of examples/mlp_threads.c (and mlp_plan.c): a residual MLP in plain C.
 *
 *     L blocks, each   x <- x + W2 gelu(W1 x + b1) + b2      x [rows, D], hidden [rows, H], fp32
 *     loss             mean over rows and features of 0.5 (y - t)^2, per microbatch
 *     task             t = tanh(A x) for a fixed random "teacher" A [D, D], on fresh random x
 *
 * Nothing here knows about pipelines. A block's forward keeps what its backward reads in an
 * mlp_saved the caller hands it, and the backward comes in the two halves zero-bubble schedules
 * run apart: I, the input gradient (what the previous block waits for), and W, the weight
 * gradient (what nobody waits for). Running I then W at once is the whole backward. */
#ifndef MLP_MODEL_H
#define MLP_MODEL_H
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One block's tensors: its weights, or (the same shapes) their gradients. */
typedef struct mlp_block {
    float *w1, *b1, *w2, *b2;       /* [H*D] [H] [D*H] [D] */
} mlp_block;

/* What one block's backward reads of one microbatch, kept by its forward and its I half. */
typedef struct mlp_saved {
    float *x;                       /* [rows*D] the block's input */
    float *pre, *act;               /* [rows*H] W1 x + b1, and gelu of it */
    float *dpre;                    /* [rows*H] the loss's gradient at pre (from I, for W) */
    float *gy;                      /* [rows*D] the loss's gradient at the output (from I, for W) */
} mlp_saved;

typedef struct mlp_model {
    int D, H, L, rows, mb;          /* width, hidden, blocks, rows a microbatch, microbatches a step */
    mlp_block *w;                   /* [L] the weights */
    float *teacher;                 /* [D*D] A */
    float *x, *t;                   /* this step's batch: [mb][rows*D] inputs and targets */
    unsigned long long rng;
} mlp_model;

static float mlp_gelu(float x)      /* the tanh form (GPT-2, llm.c) */
{
    const float c = 0.7978845608f;  /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static float mlp_gelu_grad(float x)
{
    const float c = 0.7978845608f;
    float th = tanhf(c * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * c * (1.0f + 3.0f * 0.044715f * x * x);
}

static float mlp_uniform(unsigned long long *rng)  /* in [-1, 1) */
{
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* --- memory ------------------------------------------------------------------------------------ */

/* n blocks' tensors, zeroed, in one allocation that b[0].w1 owns; NULL when out of memory. */
static mlp_block *mlp_blocks_new(int n, int D, int H)
{
    size_t per = 2 * (size_t)H * D + (size_t)H + (size_t)D;
    mlp_block *b = (mlp_block *)calloc((size_t)n + 1, sizeof *b);
    float *f = (float *)calloc(per * (size_t)n + 1, sizeof(float));
    int k;
    if (!b || !f) { free(b); free(f); return NULL; }
    for (k = 0; k < n; k++) {
        b[k].w1 = f + per * (size_t)k; b[k].b1 = b[k].w1 + (size_t)H * D;
        b[k].w2 = b[k].b1 + H; b[k].b2 = b[k].w2 + (size_t)D * H;
    }
    b[0].w1 = f;                    /* also for n = 0: the owner */
    return b;
}

static void mlp_blocks_free(mlp_block *b)
{
    if (b) free(b[0].w1);
    free(b);
}

/* n blocks' saved state for one microbatch each, in one allocation; NULL when out of memory. */
static mlp_saved *mlp_saved_new(int n, const mlp_model *m)
{
    size_t xd = (size_t)m->rows * m->D, xh = (size_t)m->rows * m->H, per = 2 * xd + 3 * xh;
    mlp_saved *s = (mlp_saved *)calloc((size_t)n + 1, sizeof *s);
    float *f = (float *)calloc(per * (size_t)n + 1, sizeof(float));
    int k;
    if (!s || !f) { free(s); free(f); return NULL; }
    for (k = 0; k < n; k++) {
        s[k].x = f + per * (size_t)k; s[k].gy = s[k].x + xd;
        s[k].pre = s[k].gy + xd; s[k].act = s[k].pre + xh; s[k].dpre = s[k].act + xh;
    }
    s[0].x = f;
    return s;
}

static void mlp_saved_free(mlp_saved *s)
{
    if (s) free(s[0].x);
    free(s);
}

static void mlp_model_free(mlp_model *m)
{
    mlp_blocks_free(m->w);
    free(m->teacher); free(m->x); free(m->t);
    memset(m, 0, sizeof *m);
}

/* L blocks, each close to the identity at first (a small W2), and the teacher; 0 or -1. */
static int mlp_model_init(mlp_model *m, int D, int H, int L, int rows, int mb)
{
    int l, i;
    memset(m, 0, sizeof *m);
    m->D = D; m->H = H; m->L = L; m->rows = rows; m->mb = mb;
    m->rng = 42;
    m->w = mlp_blocks_new(L, D, H);
    m->teacher = (float *)malloc(sizeof(float) * (size_t)D * D);
    m->x = (float *)malloc(sizeof(float) * (size_t)mb * rows * D);
    m->t = (float *)malloc(sizeof(float) * (size_t)mb * rows * D);
    if (!m->w || !m->teacher || !m->x || !m->t) { mlp_model_free(m); return -1; }
    for (i = 0; i < D * D; i++) m->teacher[i] = 2.0f * mlp_uniform(&m->rng) / sqrtf((float)D);
    for (l = 0; l < L; l++) {
        mlp_block *b = &m->w[l];
        for (i = 0; i < H * D; i++) b->w1[i] = mlp_uniform(&m->rng) / sqrtf((float)D);
        for (i = 0; i < D * H; i++) b->w2[i] = 0.1f * mlp_uniform(&m->rng) / sqrtf((float)H);
    }
    return 0;
}

/* A fresh batch: mb * rows random inputs and the teacher's answers. */
static void mlp_new_batch(mlp_model *m)
{
    int i, j, n;
    for (n = 0; n < m->mb * m->rows; n++) {
        float *x = m->x + (size_t)n * m->D, *t = m->t + (size_t)n * m->D;
        for (i = 0; i < m->D; i++) x[i] = mlp_uniform(&m->rng);
        for (i = 0; i < m->D; i++) {
            float a = 0;
            for (j = 0; j < m->D; j++) a += m->teacher[(size_t)i * m->D + j] * x[j];
            t[i] = tanhf(a);
        }
    }
}

/* --- one block: forward, then the backward as I and W ------------------------------------------ */

/* x [rows*D] -> y [rows*D] (y may be x); keeps x, pre and act in s. */
static void mlp_forward(const mlp_model *m, const mlp_block *w, mlp_saved *s, const float *x, float *y)
{
    int r, i, j, D = m->D, H = m->H;
    memcpy(s->x, x, sizeof(float) * (size_t)m->rows * D);
    for (r = 0; r < m->rows; r++) {
        const float *xr = s->x + (size_t)r * D;
        float *pre = s->pre + (size_t)r * H, *act = s->act + (size_t)r * H;
        for (i = 0; i < H; i++) {
            float a = w->b1[i];
            for (j = 0; j < D; j++) a += w->w1[(size_t)i * D + j] * xr[j];
            pre[i] = a;
            act[i] = mlp_gelu(a);
        }
        for (i = 0; i < D; i++) {
            float a = xr[i] + w->b2[i];
            for (j = 0; j < H; j++) a += w->w2[(size_t)i * H + j] * act[j];
            y[(size_t)r * D + i] = a;
        }
    }
}

/* I: gy [rows*D] -> gx [rows*D] (gx may be gy; NULL: not wanted, the model's first block);
 * keeps gy and dpre in s for W. */
static void mlp_backward_input(const mlp_model *m, const mlp_block *w, mlp_saved *s, const float *gy, float *gx)
{
    int r, i, j, D = m->D, H = m->H;
    memcpy(s->gy, gy, sizeof(float) * (size_t)m->rows * D);
    for (r = 0; r < m->rows; r++) {
        const float *g = s->gy + (size_t)r * D, *pre = s->pre + (size_t)r * H;
        float *dp = s->dpre + (size_t)r * H;
        for (j = 0; j < H; j++) dp[j] = 0;
        for (i = 0; i < D; i++)
            for (j = 0; j < H; j++) dp[j] += w->w2[(size_t)i * H + j] * g[i];
        for (j = 0; j < H; j++) dp[j] *= mlp_gelu_grad(pre[j]);
        if (!gx) continue;
        for (i = 0; i < D; i++) {
            float a = g[i];                                  /* the residual path */
            for (j = 0; j < H; j++) a += w->w1[(size_t)j * D + i] * dp[j];
            gx[(size_t)r * D + i] = a;
        }
    }
}

/* W: adds this microbatch's weight gradients into g. */
static void mlp_backward_weight(const mlp_model *m, const mlp_saved *s, mlp_block *g)
{
    int r, i, j, D = m->D, H = m->H;
    for (r = 0; r < m->rows; r++) {
        const float *gr = s->gy + (size_t)r * D, *dp = s->dpre + (size_t)r * H;
        const float *xr = s->x + (size_t)r * D, *act = s->act + (size_t)r * H;
        for (i = 0; i < D; i++) {
            g->b2[i] += gr[i];
            for (j = 0; j < H; j++) g->w2[(size_t)i * H + j] += gr[i] * act[j];
        }
        for (j = 0; j < H; j++) {
            g->b1[j] += dp[j];
            for (i = 0; i < D; i++) g->w1[(size_t)j * D + i] += dp[j] * xr[i];
        }
    }
}

/* Microbatch mb's loss, mean over rows and features of 0.5 (y - t)^2. The step's loss is the mean
 * over the mb microbatches, so gy (when not NULL) gets dLoss/dy = (y - t) / (rows * D * mb). */
static float mlp_loss(const mlp_model *m, int mb, const float *y, float *gy)
{
    const float *t = m->t + (size_t)mb * m->rows * m->D;
    int i, n = m->rows * m->D;
    double l = 0;
    for (i = 0; i < n; i++) {
        float d = y[i] - t[i];
        l += 0.5 * (double)d * d;
        if (gy) gy[i] = d / (float)(n * m->mb);
    }
    return (float)(l / n);
}

/* --- the tensors of a block, for loops over all four ------------------------------------------ */

static void mlp_tensors(const mlp_block *b, int D, int H, float **t, size_t *len)
{
    t[0] = b->w1; t[1] = b->b1; t[2] = b->w2; t[3] = b->b2;
    len[0] = (size_t)H * D; len[1] = (size_t)H; len[2] = (size_t)D * H; len[3] = (size_t)D;
}

static void mlp_block_zero(mlp_block *b, int D, int H)
{
    float *t[4];
    size_t len[4];
    int k;
    mlp_tensors(b, D, H, t, len);
    for (k = 0; k < 4; k++) memset(t[k], 0, sizeof(float) * len[k]);
}

/* a += b */
static void mlp_block_add(mlp_block *a, const mlp_block *b, int D, int H)
{
    float *ta[4], *tb[4];
    size_t len[4], i;
    int k;
    mlp_tensors(a, D, H, ta, len);
    mlp_tensors(b, D, H, tb, len);
    for (k = 0; k < 4; k++)
        for (i = 0; i < len[k]; i++) ta[k][i] += tb[k][i];
}

/* One SGD step: w -= lr * g. */
static void mlp_sgd(mlp_block *w, const mlp_block *g, int D, int H, float lr)
{
    float *tw[4], *tg[4];
    size_t len[4], i;
    int k;
    mlp_tensors(w, D, H, tw, len);
    mlp_tensors(g, D, H, tg, len);
    for (k = 0; k < 4; k++)
        for (i = 0; i < len[k]; i++) tw[k][i] -= lr * tg[k][i];
}

/* --- the whole model's step on one thread: what a pipelined step must give ------------------- */

typedef struct mlp_whole {
    mlp_block *g;                   /* [L] the step's gradients */
    mlp_saved *sv;                  /* [L] one microbatch's saved state at a time */
    float *y;                       /* [rows*D] the activation, then its gradient */
} mlp_whole;

static void mlp_whole_free(mlp_whole *w)
{
    mlp_blocks_free(w->g); mlp_saved_free(w->sv); free(w->y);
    memset(w, 0, sizeof *w);
}

static int mlp_whole_init(mlp_whole *w, const mlp_model *m)
{
    w->g = mlp_blocks_new(m->L, m->D, m->H);
    w->sv = mlp_saved_new(m->L, m);
    w->y = (float *)malloc(sizeof(float) * (size_t)m->rows * m->D);
    if (w->g && w->sv && w->y) return 0;
    mlp_whole_free(w);
    return -1;
}

/* Every microbatch of this step's batch through all L blocks and back, in order; returns the
 * step's loss (the mean over microbatches) with its gradients in w->g. */
static double mlp_whole_step(mlp_whole *w, const mlp_model *m)
{
    double loss = 0;
    int mb, l;
    for (l = 0; l < m->L; l++) mlp_block_zero(&w->g[l], m->D, m->H);
    for (mb = 0; mb < m->mb; mb++) {
        memcpy(w->y, m->x + (size_t)mb * m->rows * m->D, sizeof(float) * (size_t)m->rows * m->D);
        for (l = 0; l < m->L; l++) mlp_forward(m, &m->w[l], &w->sv[l], w->y, w->y);
        loss += mlp_loss(m, mb, w->y, w->y) / m->mb;
        for (l = m->L - 1; l >= 0; l--) {
            mlp_backward_input(m, &m->w[l], &w->sv[l], w->y, l ? w->y : NULL);
            mlp_backward_weight(m, &w->sv[l], &w->g[l]);
        }
    }
    return loss;
}
#endif
