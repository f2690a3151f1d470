/* mlp_threads.c — train a small residual MLP pipeline-parallel, with one CPU thread per pipeline rank.
 *
 *     make demo          (= build/mlp_threads --pp 4 --vpp 2 --mb 8 --schedule interleaved --steps 20)
 *     build/mlp_threads --pp 3 --schedule 1f1b --trace trace.json     (open in ui.perfetto.dev)
 *     build/mlp_threads --pp 4 --schedule zbv --svg step.svg          (the step drawn, as planned and as run)
 *
 * The model: L blocks  x <- x + W2 gelu(W1 x + b1) + b2  (width D, hidden H, fp32, plain C loops),
 * cut into pp * vpp stages of L / (pp * vpp) blocks. It learns a fixed random "teacher" function
 * t = tanh(A x) from fresh random inputs with SGD. Every rank is a thread running the same code a
 * multi-GPU trainer runs on each GPU:
 *
 *     executor = pp_executor_create(schedule, transport, callbacks)
 *     for each step:  pp_run_step(executor)  ->  SGD on this rank's own blocks
 *
 * pipepar calls our forward / backward / loss for (stage, microbatch) in the schedule's order and
 * moves the tensors between ranks. To show that this changes nothing but the order, rank 0 also
 * runs the whole model as one stage every step and checks that the loss and every gradient match.
 * This file reads top to bottom: model, callbacks, the rank's loop, main.                        */
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <errno.h>

/* --- the model --------------------------------------------------------------------------- */

typedef struct block {
    float *w1, *b1, *w2, *b2;           /* [H*D] [H] [D*H] [D] */
    float *gw1, *gb1, *gw2, *gb2;       /* their gradients, summed over microbatches */
} block;

typedef struct model {
    int D, H, L, rows, mb;              /* width, hidden, blocks, rows per microbatch, microbatches */
    int copies;                         /* blocks held by the pipeline: L, or 2L under DualPipe */
    block *blocks;                      /* [copies]: block l and, under DualPipe, its second copy
                                           l + L (the up pipeline's), with their own gradients */
    float *teacher;                     /* [D*D]: the task is t = tanh(teacher x) */
    /* saved for backward, per (block, microbatch): the block's input, W1 x + b1, and for the
     * split backward (I then W) the gradients the W half needs */
    float *x_in, *pre, *dpre, *gy;      /* [L][mb][rows*D], [L][mb][rows*H], same, [L][mb][rows*D] */
    float *data_x, *data_t;             /* this step's batch: [mb][rows*D] */
    unsigned long long rng;
} model;

static float gelu(float x)
{
    const float c = 0.7978845608f;      /* sqrt(2/pi): the tanh form of GELU (GPT-2, llm.c) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static float gelu_grad(float x)
{
    const float c = 0.7978845608f;
    float th = tanhf(c * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * c * (1.0f + 3.0f * 0.044715f * x * x);
}

static float uniform(unsigned long long *rng)   /* in [-1, 1) */
{
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* the saved tensors of block l (either copy: a microbatch passes through one of them) */
static float *slot(float *base, const model *m, int l, int mb, int width)
{
    return base + ((size_t)(l % m->L) * m->mb + (size_t)mb) * (size_t)m->rows * (size_t)width;
}

/* one block forward: x [rows*D] -> y [rows*D]; saves x and pre for backward */
static void block_forward(model *m, int l, int mb, const float *x, float *y)
{
    block *b = &m->blocks[l];
    float *pre = slot(m->pre, m, l, mb, m->H), *g = (float *)malloc(sizeof(float) * (size_t)m->H);
    int r, i, j, D = m->D, H = m->H;
    memcpy(slot(m->x_in, m, l, mb, D), x, sizeof(float) * (size_t)m->rows * D);
    for (r = 0; r < m->rows; r++) {
        const float *xr = x + (size_t)r * D;
        for (i = 0; i < H; i++) {
            float a = b->b1[i];
            for (j = 0; j < D; j++) a += b->w1[(size_t)i * D + j] * xr[j];
            pre[(size_t)r * H + i] = a;
            g[i] = gelu(a);
        }
        for (i = 0; i < D; i++) {
            float a = xr[i] + b->b2[i];
            for (j = 0; j < H; j++) a += b->w2[(size_t)i * H + j] * g[j];
            y[(size_t)r * D + i] = a;
        }
    }
    free(g);
}

/* input-gradient half: gy [rows*D] -> gx [rows*D] (gx may be NULL); saves dpre and gy for W */
static void block_backward_input(model *m, int l, int mb, const float *gy, float *gx)
{
    block *b = &m->blocks[l];
    const float *pre = slot(m->pre, m, l, mb, m->H);
    float *dpre = slot(m->dpre, m, l, mb, m->H);
    int r, i, j, D = m->D, H = m->H;
    memcpy(slot(m->gy, m, l, mb, D), gy, sizeof(float) * (size_t)m->rows * D);
    for (r = 0; r < m->rows; r++) {
        const float *gr = gy + (size_t)r * D;
        float *dp = dpre + (size_t)r * H;
        for (j = 0; j < H; j++) dp[j] = 0;
        for (i = 0; i < D; i++)
            for (j = 0; j < H; j++) dp[j] += b->w2[(size_t)i * H + j] * gr[i];
        for (j = 0; j < H; j++) dp[j] *= gelu_grad(pre[(size_t)r * H + j]);
        if (gx)
            for (i = 0; i < D; i++) {
                float a = gr[i];                          /* the residual path */
                for (j = 0; j < H; j++) a += b->w1[(size_t)j * D + i] * dp[j];
                gx[(size_t)r * D + i] = a;
            }
    }
}

/* weight-gradient half: adds this microbatch's share into the block's gradients */
static void block_backward_weight(model *m, int l, int mb)
{
    block *b = &m->blocks[l];
    const float *x = slot(m->x_in, m, l, mb, m->D), *pre = slot(m->pre, m, l, mb, m->H);
    const float *dpre = slot(m->dpre, m, l, mb, m->H), *gy = slot(m->gy, m, l, mb, m->D);
    float *h = (float *)malloc(sizeof(float) * (size_t)m->H);
    int r, i, j, D = m->D, H = m->H;
    for (r = 0; r < m->rows; r++) {
        const float *gr = gy + (size_t)r * D, *dp = dpre + (size_t)r * H, *xr = x + (size_t)r * D;
        for (j = 0; j < H; j++) h[j] = gelu(pre[(size_t)r * H + j]);
        for (i = 0; i < D; i++) {
            b->gb2[i] += gr[i];
            for (j = 0; j < H; j++) b->gw2[(size_t)i * H + j] += gr[i] * h[j];
        }
        for (j = 0; j < H; j++) {
            b->gb1[j] += dp[j];
            for (i = 0; i < D; i++) b->gw1[(size_t)j * D + i] += dp[j] * xr[i];
        }
    }
    free(h);
}

/* loss of one microbatch: mean over rows and features of 0.5 (y - t)^2; the step's loss is the
 * mean over microbatches, so dLoss/dy = (y - t) / (rows * D * mb) */
static float mse(const model *m, int mb, const float *y, float *gy)
{
    const float *t = m->data_t + (size_t)mb * m->rows * m->D;
    int i, n = m->rows * m->D;
    double l = 0;
    for (i = 0; i < n; i++) {
        float d = y[i] - t[i];
        l += 0.5 * (double)d * d;
        if (gy) gy[i] = d / (float)(n * m->mb);
    }
    return (float)(l / n);
}

/* --- the callbacks pipepar calls: one stage = blocks [first, first + per) --------------------- */
/* Stage s holds blocks [stage_first[s], + stage_count[s]) of m->blocks: s * per onwards with
 * L / stages each, or what --layout says. Under DualPipe the stages pp..2pp-1
 * are the up pipeline, which runs the same model again: stage pp + j holds the second copy of
 * model stage j's blocks (index l + L for block l), so the two copies never write one gradient. */

typedef struct run {
    model *m;
    pp_schedule *schedule;
    int *stage_first, *stage_count;   /* [num_stages]: stage s holds blocks [first, first + count) */
    int steps;
    float lr;
    double timeout;
    const char *trace, *svg;
    pp_timeline timelines[64];
    int failures;
} run;

static size_t cb_bytes(void *user, int boundary, const pp_mb_info *info)
{
    model *m = ((run *)user)->m;
    (void)boundary; (void)info;             /* every boundary is [rows, D]; a transformer with packed
                                               sequences would read info->meta's cu_seqlens here */
    return sizeof(float) * (size_t)m->rows * m->D;
}

static int cb_input(void *user, const pp_mb_info *info, void *x)
{
    model *m = ((run *)user)->m;
    memcpy(x, m->data_x + (size_t)info->mb * m->rows * m->D, sizeof(float) * (size_t)m->rows * m->D);
    return 0;
}

static int cb_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    run *rn = (run *)user;
    model *m = rn->m;
    int k, first = rn->stage_first[info->stage], count = rn->stage_count[info->stage];
    size_t n = (size_t)m->rows * m->D;
    float *tmp = (float *)malloc(sizeof(float) * n);
    memcpy(out, in, sizeof(float) * n);
    for (k = 0; k < count; k++) {
        block_forward(m, first + k, info->mb, (const float *)out, tmp);
        memcpy(out, tmp, sizeof(float) * n);
    }
    free(tmp);
    return 0;
}

static int cb_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss)
{
    loss->loss = mse(((run *)user)->m, info->mb, (const float *)out, (float *)grad_out);
    return 0;                               /* weight stays 1: the step's loss is the mean over mb */
}

static int cb_backward_input(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    run *rn = (run *)user;
    model *m = rn->m;
    int k, first = rn->stage_first[info->stage], count = rn->stage_count[info->stage];
    size_t n = (size_t)m->rows * m->D;
    float *g = (float *)malloc(sizeof(float) * n), *h = (float *)malloc(sizeof(float) * n);
    (void)in;                               /* the blocks saved their own inputs */
    memcpy(g, grad_out, sizeof(float) * n);
    for (k = count - 1; k >= 0; k--) {
        /* the stage's first block on stage 0 needs no input-gradient (grad_in is NULL there) */
        block_backward_input(m, first + k, info->mb, g, (k == 0 && !grad_in) ? NULL : h);
        memcpy(g, h, sizeof(float) * n);
    }
    if (grad_in) memcpy(grad_in, g, sizeof(float) * n);
    free(g); free(h);
    return 0;
}

static int cb_backward_weight(void *user, const pp_mb_info *info, const void *in, const void *grad_out)
{
    run *rn = (run *)user;
    int k, first = rn->stage_first[info->stage], count = rn->stage_count[info->stage];
    (void)in; (void)grad_out;
    for (k = 0; k < count; k++) block_backward_weight(rn->m, first + k, info->mb);
    return 0;
}

static int cb_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    cb_backward_input(user, info, in, grad_out, grad_in);
    return cb_backward_weight(user, info, in, grad_out);
}

/* --- the check: the same step as one stage, on rank 0 --------------------------------------- */

typedef struct reference { model m; float *x, *y, *g; double loss, max_rel_err; } reference;

/* Runs every microbatch through all L blocks into a private copy of the saved tensors and
 * gradients, then compares with the pipeline's gradients. */
static void check_single_stage(const model *pm, reference *ref)
{
    model *m = &ref->m;
    int l, mb, k;
    size_t n = (size_t)pm->rows * pm->D;
    double worst = 0;
    ref->loss = 0;
    for (l = 0; l < m->L; l++) {
        memcpy(m->blocks[l].w1, pm->blocks[l].w1, sizeof(float) * (size_t)m->H * m->D);
        memcpy(m->blocks[l].b1, pm->blocks[l].b1, sizeof(float) * (size_t)m->H);
        memcpy(m->blocks[l].w2, pm->blocks[l].w2, sizeof(float) * (size_t)m->D * m->H);
        memcpy(m->blocks[l].b2, pm->blocks[l].b2, sizeof(float) * (size_t)m->D);
        memset(m->blocks[l].gw1, 0, sizeof(float) * (size_t)m->H * m->D);
        memset(m->blocks[l].gb1, 0, sizeof(float) * (size_t)m->H);
        memset(m->blocks[l].gw2, 0, sizeof(float) * (size_t)m->D * m->H);
        memset(m->blocks[l].gb2, 0, sizeof(float) * (size_t)m->D);
    }
    m->data_x = pm->data_x;
    m->data_t = pm->data_t;
    for (mb = 0; mb < m->mb; mb++) {
        memcpy(ref->x, m->data_x + (size_t)mb * n, sizeof(float) * n);
        for (l = 0; l < m->L; l++) { block_forward(m, l, mb, ref->x, ref->y); memcpy(ref->x, ref->y, sizeof(float) * n); }
        ref->loss += mse(m, mb, ref->x, ref->g) / m->mb;
        for (l = m->L - 1; l >= 0; l--) {
            block_backward_input(m, l, mb, ref->g, ref->y);
            block_backward_weight(m, l, mb);
            memcpy(ref->g, ref->y, sizeof(float) * n);
        }
    }
    for (l = 0; l < m->L; l++) {
        const float *a[4], *b[4];
        size_t len[4];
        a[0] = pm->blocks[l].gw1; a[1] = pm->blocks[l].gb1; a[2] = pm->blocks[l].gw2; a[3] = pm->blocks[l].gb2;
        b[0] = m->blocks[l].gw1; b[1] = m->blocks[l].gb1; b[2] = m->blocks[l].gw2; b[3] = m->blocks[l].gb2;
        len[0] = (size_t)m->H * m->D; len[1] = (size_t)m->H; len[2] = (size_t)m->D * m->H; len[3] = (size_t)m->D;
        for (k = 0; k < 4; k++) {
            double num = 0, den = 1e-30;
            size_t i;
            for (i = 0; i < len[k]; i++) {
                double d = fabs((double)a[k][i] - (double)b[k][i]);
                if (d > num) num = d;
                if (fabs((double)b[k][i]) > den) den = fabs((double)b[k][i]);
            }
            if (num / den > worst) worst = num / den;   /* relative to the tensor's largest entry */
        }
    }
    ref->max_rel_err = worst;
}

/* --- one rank ------------------------------------------------------------------------------ */

static void new_batch(model *m)
{
    int i, j, n;
    for (n = 0; n < m->mb * m->rows; n++) {
        float *x = m->data_x + (size_t)n * m->D, *t = m->data_t + (size_t)n * m->D;
        for (i = 0; i < m->D; i++) x[i] = uniform(&m->rng);
        for (i = 0; i < m->D; i++) {
            float a = 0;
            for (j = 0; j < m->D; j++) a += m->teacher[(size_t)i * m->D + j] * x[j];
            t[i] = tanhf(a);
        }
    }
}

static void add_into(float *a, float *b, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) { a[i] += b[i]; b[i] = a[i]; }
}

/* the two copies of a block: both get the sum of their gradients */
static void sum_copies(block *a, block *b, int D, int H)
{
    add_into(a->gw1, b->gw1, (size_t)H * D);
    add_into(a->gb1, b->gb1, (size_t)H);
    add_into(a->gw2, b->gw2, (size_t)D * H);
    add_into(a->gb2, b->gb2, (size_t)D);
}

static void sgd(block *b, int D, int H, float lr)
{
    int i;
    for (i = 0; i < H * D; i++) { b->w1[i] -= lr * b->gw1[i]; b->gw1[i] = 0; }
    for (i = 0; i < H; i++) { b->b1[i] -= lr * b->gb1[i]; b->gb1[i] = 0; }
    for (i = 0; i < D * H; i++) { b->w2[i] -= lr * b->gw2[i]; b->gw2[i] = 0; }
    for (i = 0; i < D; i++) { b->b2[i] -= lr * b->gb2[i]; b->gb2[i] = 0; }
}

/* Ranks meet here between steps (the transport's all-reduce of nothing is a barrier): rank 0 makes
 * the batch and checks the step while the others wait. */
static pp_status barrier(pp_transport *t, double timeout, pp_error *err)
{
    float none = 0;
    return t->all_reduce(t->user, &none, 1, timeout, err);
}

static pp_status rank_main(void *user, int rank, pp_transport *t, pp_error *err)
{
    run *rn = (run *)user;
    model *m = rn->m;
    pp_executor_config cfg;
    pp_executor *ex = NULL;
    reference ref;
    pp_status st;
    int step, stage, chunk;
    memset(&cfg, 0, sizeof cfg);
    memset(&ref, 0, sizeof ref);
    cfg.schedule = rn->schedule;
    cfg.transport = *t;
    cfg.callbacks.user = rn;
    cfg.callbacks.tensor_bytes = cb_bytes;
    cfg.callbacks.input = cb_input;
    cfg.callbacks.forward = cb_forward;
    cfg.callbacks.loss = cb_loss;
    cfg.callbacks.backward = cb_backward;
    cfg.callbacks.backward_input = cb_backward_input;     /* zero-bubble schedules split B into I + W */
    cfg.callbacks.backward_weight = cb_backward_weight;
    cfg.timeout_s = rn->timeout;
    cfg.record_timeline = 1;
    st = pp_executor_create(&cfg, &ex, err);
    if (st != PP_OK) { t->abort(t->user, st, err->message); return st; }
    if (rank == 0) {
        /* the single-stage copy of the model */
        int l;
        ref.m = *m;
        ref.m.blocks = (block *)calloc((size_t)m->L, sizeof(block));
        ref.m.x_in = (float *)calloc((size_t)m->L * m->mb * m->rows * m->D, sizeof(float));
        ref.m.gy = (float *)calloc((size_t)m->L * m->mb * m->rows * m->D, sizeof(float));
        ref.m.pre = (float *)calloc((size_t)m->L * m->mb * m->rows * m->H, sizeof(float));
        ref.m.dpre = (float *)calloc((size_t)m->L * m->mb * m->rows * m->H, sizeof(float));
        for (l = 0; l < m->L; l++) {
            block *b = &ref.m.blocks[l];
            b->w1 = (float *)calloc((size_t)m->H * m->D, sizeof(float)); b->gw1 = (float *)calloc((size_t)m->H * m->D, sizeof(float));
            b->b1 = (float *)calloc((size_t)m->H, sizeof(float)); b->gb1 = (float *)calloc((size_t)m->H, sizeof(float));
            b->w2 = (float *)calloc((size_t)m->D * m->H, sizeof(float)); b->gw2 = (float *)calloc((size_t)m->D * m->H, sizeof(float));
            b->b2 = (float *)calloc((size_t)m->D, sizeof(float)); b->gb2 = (float *)calloc((size_t)m->D, sizeof(float));
        }
        ref.x = (float *)malloc(sizeof(float) * (size_t)m->rows * m->D);
        ref.y = (float *)malloc(sizeof(float) * (size_t)m->rows * m->D);
        ref.g = (float *)malloc(sizeof(float) * (size_t)m->rows * m->D);
        printf("step   loss      grads match single-stage\n");
    }
    for (step = 0; step < rn->steps && st == PP_OK; step++) {
        pp_step_result res;
        if (rank == 0) new_batch(m);
        if ((st = barrier(t, rn->timeout, err)) != PP_OK) break;          /* the batch is ready */
        if ((st = pp_run_step(ex, NULL, &res, err)) != PP_OK) break;      /* forward, backward: all of it */
        if ((st = barrier(t, rn->timeout, err)) != PP_OK) break;          /* every gradient is in */
        if (rn->schedule->placement == PP_PLACEMENT_DUAL) {
            /* DualPipe: model stage j lives twice, going down on rank j (stage j) and going up on
             * rank pp-1-j (stage pp+j); its gradient is the sum of both copies' (DualPipe
             * all-reduces them). Rank j adds the two and gives both copies the sum, so both take
             * the same SGD step and stay equal. */
            int k;
            for (k = 0; k < rn->stage_count[rank]; k++) {
                int l = rn->stage_first[rank] + k;
                sum_copies(&m->blocks[l], &m->blocks[l + m->L], m->D, m->H);
            }
            if ((st = barrier(t, rn->timeout, err)) != PP_OK) break;      /* every sum is in */
        }
        if (rank == 0) {
            int ok;
            check_single_stage(m, &ref);
            ok = fabs(res.loss - ref.loss) <= 1e-5 * fabs(ref.loss) && ref.max_rel_err < 1e-5;
            if (m->copies > m->L) {   /* DualPipe: both copies of every block still hold the same weights */
                int l;
                for (l = 0; l < m->L; l++)
                    if (memcmp(m->blocks[l].w1, m->blocks[l + m->L].w1, sizeof(float) * (size_t)m->H * m->D) ||
                        memcmp(m->blocks[l].w2, m->blocks[l + m->L].w2, sizeof(float) * (size_t)m->D * m->H) ||
                        memcmp(m->blocks[l].b1, m->blocks[l + m->L].b1, sizeof(float) * (size_t)m->H) ||
                        memcmp(m->blocks[l].b2, m->blocks[l + m->L].b2, sizeof(float) * (size_t)m->D)) {
                        printf("     block %d: its two copies hold different weights\n", l);
                        ok = 0;
                    }
            }
            if (!ok) rn->failures++;
            if (ok && ref.max_rel_err == 0 && res.loss == (float)ref.loss)
                printf("%4d   %.5f   yes (bit-identical)\n", step + 1, res.loss);
            else
                printf("%4d   %.5f   %s (max rel err %.1e)\n", step + 1, res.loss, ok ? "yes" : "NO", ref.max_rel_err);
        }
        if ((st = barrier(t, rn->timeout, err)) != PP_OK) break;          /* checked: now step */
        for (chunk = 0; chunk < rn->schedule->vpp; chunk++) {             /* SGD on my own blocks */
            int k;
            stage = pp_rank_chunk_stage(rn->schedule, rank, chunk);
            for (k = 0; k < rn->stage_count[stage]; k++)
                sgd(&m->blocks[rn->stage_first[stage] + k], m->D, m->H, rn->lr);
        }
    }
    if (st == PP_OK) {
        pp_executor_timeline(ex, &rn->timelines[rank], NULL);
        st = barrier(t, rn->timeout, err);                                /* every timeline is in */
        if (st == PP_OK && rank == 0) {
            printf("\nthe last step as it ran (measured; %d thread%s on this machine's cores)\n", rn->schedule->pp,
                   rn->schedule->pp > 1 ? "s" : "");
            pp_timeline_draw_ascii(rn->timelines, rn->schedule->pp, 0, stdout, NULL);
            {   /* each rank's idle time by what it waited for (pp_timeline_idle) */
                pp_idle idle[64];
                int r;
                if (pp_timeline_idle(rn->timelines, rn->schedule->pp, idle, err) == PP_OK) {
                    printf("where the step went, ms = compute + waiting for another rank's compute + for transfers + "
                           "other gaps + tail:\n");
                    for (r = 0; r < rn->schedule->pp; r++)
                        printf("  rank %d: %.2f = %.2f + %.2f + %.2f + %.2f + %.2f\n", r, 1e3 * idle[r].step,
                               1e3 * idle[r].busy, 1e3 * idle[r].wait_compute, 1e3 * idle[r].wait_transfer,
                               1e3 * idle[r].wait_other, 1e3 * idle[r].tail);
                } else {
                    printf("where the step went: %s\n", err->message);
                }
            }
            if (rn->trace) {
                FILE *f = fopen(rn->trace, "w");
                if (!f || pp_timeline_write_chrome_trace(rn->timelines, rn->schedule->pp, f, err) != PP_OK)
                    fprintf(stderr, "mlp_threads: --trace %s: could not write it\n", rn->trace);
                else printf("trace written to %s (open it in ui.perfetto.dev)\n", rn->trace);
                if (f) fclose(f);
            } else {
                printf("(--trace FILE writes this step as a Chrome/Perfetto trace)\n");
            }
            if (rn->svg) {   /* the step as it ran, below the simulation of the same programs */
                pp_sim_result *sim = NULL;
                FILE *f = fopen(rn->svg, "w");
                if (!f || pp_simulate(rn->timelines[0].schedule, NULL, &sim, err) != PP_OK ||
                    pp_timeline_write_svg(rn->timelines, rn->schedule->pp, sim, f, err) != PP_OK || fflush(f) != 0)
                    fprintf(stderr, "mlp_threads: --svg %s: could not write it: %s\n", rn->svg,
                            f ? err->message : strerror(errno));
                else printf("the step drawn in %s: simulated above, measured below\n", rn->svg);
                if (f) fclose(f);
                pp_sim_result_free(sim);
            }
        }
        if (st == PP_OK) st = barrier(t, rn->timeout, err);               /* drawn: free */
    }
    if (rank == 0) {
        int l;
        for (l = 0; l < m->L; l++) {
            block *b = &ref.m.blocks[l];
            free(b->w1); free(b->gw1); free(b->b1); free(b->gb1); free(b->w2); free(b->gw2); free(b->b2); free(b->gb2);
        }
        free(ref.m.blocks); free(ref.m.x_in); free(ref.m.gy); free(ref.m.pre); free(ref.m.dpre);
        free(ref.x); free(ref.y); free(ref.g);
    }
    pp_executor_free(ex);
    return st;
}

/* --- main ------------------------------------------------------------------------------------ */

static int usage(const char *flag, const char *value, const char *rule)
{
    if (value && !*value) fprintf(stderr, "mlp_threads: %s: %s\n", flag, rule);   /* a flag without a value */
    else fprintf(stderr, "mlp_threads: %s=%s: %s\n", flag, value ? value : "", rule);
    return 2;
}

/* How many whole backwards (B) the schedule holds: --split-backward names the run only if some. */
static int count_b(const pp_schedule *s)
{
    int r, i, n = 0;
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) n += s->actions[r][i].op == PP_OP_B;
    return n;
}

static int int_flag(const char *v, int lo, int hi, int *out)
{
    char *end;
    long x;
    if (!v) return 0;
    x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) return 0;
    *out = (int)x;
    return 1;
}

int main(int argc, char **argv)
{
    run rn;
    model m;
    pp_schedule_config sc;
    pp_schedule_kind kind = PP_INTERLEAVED_1F1B;
    pp_error err;
    pp_status st;
    const char *kind_name = "interleaved", *trace = NULL, *svg = NULL, *layout = NULL, *csv = NULL;
    char csv_name[192] = "";
    int given_pp = 0, given_mb = 0, given_schedule = 0;
    pp_layers *lay = NULL;
    int search = 0, search_layout = 0, split_backward = 0, split_bs = 0;
    pp_schedule_kind search_kind = PP_KIND_NONE;
    char search_name[192] = "";
    int i, l, pp = 4, vpp = 0, group = 0, mb = 8, steps = 20, D = 64, H = 256, rows = 16, L = 0, model_stages;
    double lr = 4, timeout = 60;

    memset(&rn, 0, sizeof rn);
    for (i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            printf("usage: mlp_threads [--pp N] [--vpp N] [--group G] [--mb N] [--schedule KIND] [--steps N]\n"
                   "                   [--layers L] [--width D] [--hidden H] [--rows R] [--lr X]\n"
                   "                   [--timeout S] [--trace FILE] [--svg FILE] [--layout STR] [--search-layout]\n"
                   "                   [--search-kind K] [--split-backward] [--schedule-csv FILE]\n"
                   "Trains a residual MLP pipeline-parallel on CPU threads and checks every step\n"
                   "against the same model run as one stage. KIND: gpipe, 1f1b, interleaved,\n"
                   "looped-bfs, the zero-bubble kinds, dualpipe (even pp and mb: two copies of every\n"
                   "stage, their gradients summed), or search: the fastest schedule pp_search finds\n"
                   "for the stages' sizes (F = I = W per block). --layout: blocks per stage as a\n"
                   "Megatron layout in stage order, e.g. 'Et*1|t*3|t*1|t*3L' for pp 2 (E input,\n"
                   "t block, L loss). --group: interleaved's microbatches per chunk round (Megatron's\n"
                   "microbatch group size; default pp). --search-layout: with --schedule search, the\n"
                   "split of --layers blocks into stages chosen too (pp_search's layers). --search-kind K:\n"
                   "with search, only schedules of kind K (or greedy). --split-backward:\n"
                   "each whole backward as its input-gradient half then its weight-gradient half\n"
                   "(pp_schedule_split_backward; with search, pp_search's split_backward). --schedule-csv:\n"
                   "the schedule in FILE (PyTorch's pipeline-order CSV, as 'pipepar search --csv' writes\n"
                   "it; pp, vpp and mb are the file's; its sends and receives are lowered again). Defaults: --pp 4\n"
                   "--mb 8 --schedule interleaved (vpp 2) --steps 20 --layers pp*vpp --width 64\n"
                   "--hidden 256 --rows 16 --lr 4.\n");
            return 0;
        }
        if (!strcmp(f, "--search-layout")) { search_layout = 1; continue; }
        if (!strcmp(f, "--split-backward")) { split_backward = 1; continue; }
        if (!strcmp(f, "--pp")) { ok = int_flag(v, 1, 64, &pp); given_pp = 1; }
        else if (!strcmp(f, "--vpp")) ok = int_flag(v, 1, 64, &vpp);
        else if (!strcmp(f, "--group")) ok = int_flag(v, 1, 4096, &group);
        else if (!strcmp(f, "--mb")) { ok = int_flag(v, 1, 4096, &mb); given_mb = 1; }
        else if (!strcmp(f, "--steps")) ok = int_flag(v, 1, 100000, &steps);
        else if (!strcmp(f, "--layers")) ok = int_flag(v, 1, 4096, &L);
        else if (!strcmp(f, "--width")) ok = int_flag(v, 1, 4096, &D);
        else if (!strcmp(f, "--hidden")) ok = int_flag(v, 1, 16384, &H);
        else if (!strcmp(f, "--rows")) ok = int_flag(v, 1, 65536, &rows);
        else if (!strcmp(f, "--lr")) ok = v && (lr = atof(v)) > 0;
        else if (!strcmp(f, "--timeout")) ok = v && (timeout = atof(v)) > 0;
        else if (!strcmp(f, "--trace")) ok = v != NULL;
        else if (!strcmp(f, "--svg")) { ok = v != NULL; svg = v; }
        else if (!strcmp(f, "--layout")) { ok = v != NULL; layout = v; }
        else if (!strcmp(f, "--schedule-csv")) { ok = v != NULL; csv = v; }
        else if (!strcmp(f, "--search-kind")) {
            if (!v) ok = 0;
            else if (!strcmp(v, "greedy")) search_kind = PP_CUSTOM;
            else if (pp_schedule_kind_parse(v, &search_kind, &err) != PP_OK) return usage(f, v, err.message);
        }
        else if (!strcmp(f, "--schedule")) {
            given_schedule = 1;
            if (!v) ok = 0;
            else if (!strcmp(v, "search")) { search = 1; kind_name = v; }
            else if (pp_schedule_kind_parse(v, &kind, &err) != PP_OK) return usage(f, v, err.message);
            else { search = 0; kind_name = v; }
        } else { fprintf(stderr, "mlp_threads: %s: unknown flag (see --help)\n", f); return 2; }
        if (!ok) return usage(f, v, v ? "expected a positive number in range (see --help)" : "needs a value");
        if (!strcmp(f, "--trace")) trace = v;
        i++;
    }

    if (search_kind != PP_KIND_NONE && !search) return usage("--search-kind", "", "only with --schedule search");
    if (csv && (given_schedule || group || vpp))
        return usage("--schedule-csv", csv, given_schedule ? "not with --schedule (the file is the schedule)"
                     : group ? "not with --group (the file is the schedule)" : "not with --vpp (the file's stages say it)");
    /* a schedule from a file: its pp and mb, unless the flags say otherwise (then they must agree) */
    if (csv) {
        FILE *fp = fopen(csv, "rb");
        char *text = NULL;
        size_t len = 0, cap = 0, n;
        if (!fp) return usage("--schedule-csv", csv, strerror(errno));
        for (;;) {
            if (len + 65536 + 1 > cap) {
                char *t = (char *)realloc(text, cap = 2 * cap + 65536 + 1);
                if (!t) { free(text); fclose(fp); return usage("--schedule-csv", csv, "out of memory"); }
                text = t;
            }
            if ((n = fread(text + len, 1, 65536, fp)) == 0) break;
            len += n;
        }
        if (ferror(fp)) {   /* a directory, say: its error, not "no actions found" */
            const int e = errno;
            free(text); fclose(fp);
            return usage("--schedule-csv", csv, strerror(e));
        }
        fclose(fp);
        text[len] = '\0';
        st = pp_schedule_read_csv(text, len, &rn.schedule, &err);
        free(text);
        if (st != PP_OK) return usage("--schedule-csv", csv, err.message);
        if ((given_pp && rn.schedule->pp != pp) || (given_mb && rn.schedule->mb != mb)) {
            char rule[160];
            snprintf(rule, sizeof rule, "the file has %d rank(s) and %d microbatch(es), the flags say%s%.0d%s%.0d",
                     rn.schedule->pp, rn.schedule->mb, given_pp ? " --pp " : "", given_pp ? pp : 0,
                     given_mb ? " --mb " : "", given_mb ? mb : 0);
            pp_schedule_free(rn.schedule);
            return usage("--schedule-csv", csv, rule);
        }
        if (rn.schedule->pp > 64 || rn.schedule->vpp > 64 || rn.schedule->mb > 4096) {
            /* the flags' limits hold for a file too: the demo keeps 64 ranks' timelines */
            char rule[160];
            snprintf(rule, sizeof rule, "the file has %d rank(s), %d chunk(s) per rank and %d microbatch(es); this demo "
                     "runs at most 64, 64 and 4096", rn.schedule->pp, rn.schedule->vpp, rn.schedule->mb);
            pp_schedule_free(rn.schedule);
            return usage("--schedule-csv", csv, rule);
        }
        pp = rn.schedule->pp; mb = rn.schedule->mb; vpp = rn.schedule->vpp;
        snprintf(csv_name, sizeof csv_name, "from %.150s", strrchr(csv, '/') ? strrchr(csv, '/') + 1 : csv);
        kind_name = csv_name;
        search = 0;
    }
    if (search_layout && (!search || layout || L == 0))
        return usage("--search-layout", "", !search ? "only with --schedule search"
                     : layout ? "not with --layout (it chooses the layout)" : "needs --layers (the blocks to split)");
    /* the stages' sizes, when --layout gives them (pp_layers_build applies Megatron's rules) */
    if (layout) {
        pp_layers_config lc;
        memset(&lc, 0, sizeof lc);
        lc.num_layers = L; lc.pp = pp; lc.layout = layout;
        if ((st = pp_layers_build(&lc, &lay, &err)) != PP_OK) return usage("--layout", layout, err.message);
        for (i = 0; i < lay->num_stages; i++)
            if (lay->count[i] < 1) {
                pp_layers_free(lay);
                return usage("--layout", layout, "every stage needs at least one block ('t')");
            }
        if (vpp && vpp != lay->vpp) {
            char v[32];
            snprintf(v, sizeof v, "%d", vpp);
            pp_layers_free(lay);
            if (csv) {
                pp_schedule_free(rn.schedule);
                return usage("--layout", layout, "must have as many stages as the --schedule-csv file (pp * vpp)");
            }
            return usage("--vpp", v, "must match the layout's stages / pp (or be left out)");
        }
        vpp = lay->vpp;
        L = lay->num_layers;
    }

    /* the schedule: build the compute order, lower it (adds the sends and receives), validate;
     * or let pp_search time every kind and its own greedy schedules for these stage sizes */
    memset(&sc, 0, sizeof sc);
    sc.kind = kind; sc.pp = pp; sc.vpp = vpp; sc.mb = mb; sc.group = group;
    if (group && search) {
        char v[32];
        snprintf(v, sizeof v, "%d", group);
        pp_layers_free(lay);
        return usage("--group", v, "not with --schedule search (it tries the group sizes itself)");
    }
    if (vpp == 0 && (kind == PP_INTERLEAVED_1F1B || kind == PP_LOOPED_BFS || kind == PP_INTERLEAVED_ZB)) sc.vpp = 2;
    rn.trace = trace;
    rn.svg = svg;
    if (csv) {
        /* its compute order proven first, then lowered by pipepar (a file's own sends may not pair) */
        pp_schedule_strip_comm(rn.schedule);
        if ((st = pp_schedule_validate(rn.schedule, &err)) == PP_OK && (st = pp_schedule_lower(rn.schedule, &err)) == PP_OK &&
            (!split_backward || ((split_bs = count_b(rn.schedule)) >= 0 &&
                                 (st = pp_schedule_split_backward(rn.schedule, &err)) == PP_OK)))
            st = pp_schedule_validate(rn.schedule, &err);
        if (st != PP_OK) {
            fprintf(stderr, "mlp_threads: --schedule-csv=%s: %s\n", csv, err.message);
            pp_schedule_free(rn.schedule);
            pp_layers_free(lay);
            return 2;
        }
    } else if (search) {
        pp_search_config q;
        pp_search_result *found = NULL;
        int S0, s0;
        double *cost;
        memset(&q, 0, sizeof q);
        q.split_backward = split_backward;
        q.kind = search_kind;
        q.pp = pp; q.mb = mb; q.vpp = vpp ? vpp : (search_layout ? 0 : 2);
        S0 = pp * (q.vpp ? q.vpp : 1);
        cost = (double *)malloc(sizeof(double) * 2 * (size_t)S0);
        for (s0 = 0; s0 < S0; s0++) {
            cost[s0] = lay ? lay->count[s0] : 1;      /* F = I = W per block, B = I + W */
            cost[S0 + s0] = 2 * cost[s0];
        }
        if (search_layout) {   /* per block; the search splits the blocks into stages too */
            q.layers = L;
            q.costs.f = q.costs.i = q.costs.w = 1;
        } else {
            q.costs.f = cost[0];
            q.costs.f_stage = cost; q.costs.i_stage = cost; q.costs.w_stage = cost; q.costs.b_stage = cost + S0;
            q.costs.memory_stage = cost;           /* activations grow with a stage's blocks too */
        }
        st = pp_search(&q, &found, &err);
        free(cost);
        if (st != PP_OK) { fprintf(stderr, "mlp_threads: %s\n", err.message); pp_layers_free(lay); return 1; }
        if (found->best && found->entries[0].stage_layers) {   /* the model's stages from here on */
            char text[1024];
            pp_layers_config lc;
            int n = pp * found->entries[0].vpp;
            if ((size_t)pp_search_layout_text(found->entries[0].stage_layers, n, text, sizeof text) >= sizeof text) {
                fprintf(stderr, "mlp_threads: the searched layout is over %zu characters\n", sizeof text);
                pp_search_result_free(found);
                return 1;
            }
            memset(&lc, 0, sizeof lc);
            lc.num_layers = L; lc.pp = pp; lc.layout = text;
            if ((st = pp_layers_build(&lc, &lay, &err)) != PP_OK) {
                fprintf(stderr, "mlp_threads: %s: %s\n", text, err.message);
                pp_search_result_free(found);
                return 1;
            }
            printf("  search    %ld splits of %d blocks; the fastest: %s on '%s'\n", found->layouts, L,
                   found->entries[0].name, text);
        }
        rn.schedule = found->best;
        found->best = NULL;
        if (!rn.schedule) snprintf(err.message, sizeof err.message, "--schedule=search: no schedule was built");
        snprintf(search_name, sizeof search_name, "search: %s (of %d simulated)", found->count ? found->entries[0].name : "",
                 found->count);
        kind_name = search_name;
        pp_search_result_free(found);
        st = rn.schedule ? pp_schedule_validate(rn.schedule, &err) : PP_EINVAL;
    } else if ((st = pp_schedule_build(&sc, &rn.schedule, &err)) == PP_OK &&
               (st = pp_schedule_lower(rn.schedule, &err)) == PP_OK &&
               (!split_backward || ((split_bs = count_b(rn.schedule)) >= 0 &&
                                    (st = pp_schedule_split_backward(rn.schedule, &err)) == PP_OK))) {
        st = pp_schedule_validate(rn.schedule, &err);
    }
    if (st != PP_OK) {
        fprintf(stderr, "mlp_threads: %s\n", err.message);
        pp_schedule_free(rn.schedule);
        pp_layers_free(lay);
        return st == PP_EINVAL || st == PP_EUNSUPPORTED ? 2 : 1;
    }
    /* the model's stages: pp * vpp, but DualPipe runs pp model stages twice (down and up) */
    model_stages = rn.schedule->placement == PP_PLACEMENT_DUAL ? pp : rn.schedule->num_stages;
    if (lay && (rn.schedule->placement == PP_PLACEMENT_DUAL || lay->num_stages != model_stages)) {
        char v[32];
        snprintf(v, sizeof v, "%d stages", lay->num_stages);
        pp_schedule_free(rn.schedule);
        pp_layers_free(lay);
        return usage("--layout", v, "must have pp * vpp stages, the schedule's (and dualpipe keeps even stages)");
    }
    if (L == 0) L = model_stages;
    if (!lay && L % model_stages != 0) {
        char v[32];
        snprintf(v, sizeof v, "%d", L);
        pp_schedule_free(rn.schedule);
        return usage("--layers", v, "must be a multiple of the number of model stages (pp * vpp; pp for dualpipe)");
    }
    rn.stage_first = (int *)malloc(sizeof(int) * (size_t)rn.schedule->num_stages);
    rn.stage_count = (int *)malloc(sizeof(int) * (size_t)rn.schedule->num_stages);
    for (i = 0; i < rn.schedule->num_stages; i++) {
        rn.stage_first[i] = lay ? lay->first[i] : i * (L / model_stages);
        rn.stage_count[i] = lay ? lay->count[i] : L / model_stages;
    }
    pp_layers_free(lay);

    /* the model: small W2 so each block starts close to the identity */
    memset(&m, 0, sizeof m);
    m.D = D; m.H = H; m.L = L; m.rows = rows; m.mb = mb;
    m.copies = rn.schedule->placement == PP_PLACEMENT_DUAL ? 2 * L : L;   /* DualPipe: two of each */
    m.blocks = (block *)calloc((size_t)m.copies, sizeof(block));
    m.teacher = (float *)malloc(sizeof(float) * (size_t)D * D);
    m.x_in = (float *)calloc((size_t)L * mb * rows * D, sizeof(float));
    m.gy = (float *)calloc((size_t)L * mb * rows * D, sizeof(float));
    m.pre = (float *)calloc((size_t)L * mb * rows * H, sizeof(float));
    m.dpre = (float *)calloc((size_t)L * mb * rows * H, sizeof(float));
    m.data_x = (float *)malloc(sizeof(float) * (size_t)mb * rows * D);
    m.data_t = (float *)malloc(sizeof(float) * (size_t)mb * rows * D);
    m.rng = 42;
    for (i = 0; i < D * D; i++) m.teacher[i] = 2.0f * uniform(&m.rng) / sqrtf((float)D);
    for (l = 0; l < m.copies; l++) {
        block *b = &m.blocks[l];
        b->w1 = (float *)malloc(sizeof(float) * (size_t)H * D); b->gw1 = (float *)calloc((size_t)H * D, sizeof(float));
        b->b1 = (float *)calloc((size_t)H, sizeof(float)); b->gb1 = (float *)calloc((size_t)H, sizeof(float));
        b->w2 = (float *)malloc(sizeof(float) * (size_t)D * H); b->gw2 = (float *)calloc((size_t)D * H, sizeof(float));
        b->b2 = (float *)calloc((size_t)D, sizeof(float)); b->gb2 = (float *)calloc((size_t)D, sizeof(float));
        if (l >= L) {   /* DualPipe's second copy starts equal to the first */
            memcpy(b->w1, m.blocks[l - L].w1, sizeof(float) * (size_t)H * D);
            memcpy(b->w2, m.blocks[l - L].w2, sizeof(float) * (size_t)D * H);
            continue;
        }
        for (i = 0; i < H * D; i++) b->w1[i] = uniform(&m.rng) / sqrtf((float)D);
        for (i = 0; i < D * H; i++) b->w2[i] = 0.1f * uniform(&m.rng) / sqrtf((float)H);
    }
    rn.m = &m;
    rn.steps = steps;
    rn.lr = (float)lr;
    rn.timeout = timeout;

    printf("pipepar demo: a residual MLP trained pipeline-parallel, one CPU thread per rank\n\n");
    printf("  model     %d blocks of x + W2 gelu(W1 x + b1) + b2, width %d, hidden %d (fp32)\n", L, D, H);
    printf("  pipeline  %s%s, pp=%d vpp=%d mb=%d: %d stages of ", kind_name,
           split_bs > 0 ? ", B as I then W" : "", pp, rn.schedule->vpp, mb,
           rn.schedule->num_stages);
    for (i = 1; i < rn.schedule->num_stages && rn.stage_count[i] == rn.stage_count[0]; i++) {}
    if (i == rn.schedule->num_stages) {   /* even: one number */
        printf("%d block%s\n", rn.stage_count[0], rn.stage_count[0] > 1 ? "s" : "");
    } else {
        for (i = 0; i < rn.schedule->num_stages; i++) {
            if (rn.schedule->num_stages > 16 && i == 8) { printf(",..."); break; }
            printf("%s%d", i ? "," : "", rn.stage_count[i]);
        }
        printf(" blocks\n");
    }
    if (m.copies > L)
        printf("  dualpipe  microbatches 0..%d run down stages 0..%d, %d..%d up stages %d..%d (ranks %d..0); stage\n"
               "            %d+j holds a second copy of stage j's blocks, whose gradients are summed each step\n",
               mb / 2 - 1, pp - 1, mb / 2, mb - 1, pp, 2 * pp - 1, pp - 1, pp);
    printf("  stages   ");
    for (i = 0; i < pp && i < 8; i++) {
        int c;
        printf(" rank %d:", i);
        for (c = 0; c < rn.schedule->vpp; c++) printf("%s%d", c ? "," : " ", pp_rank_chunk_stage(rn.schedule, i, c));
        printf(i + 1 < pp ? " |" : "");
    }
    printf(pp > 8 ? " ...\n" : "\n");
    printf("  task      fit t = tanh(A x) on fresh random x: %d microbatches of %d rows a step, SGD lr %g\n\n",
           mb, rows, lr);
    {
        /* the picture: F = 1, B = 2 per block, so stages of unequal size show as they run */
        pp_sim_costs c;
        pp_sim_result *sim = NULL;
        int ns = rn.schedule->num_stages;
        double *cost = (double *)malloc(sizeof(double) * 2 * (size_t)ns);
        memset(&c, 0, sizeof c);
        if (cost) {
            for (i = 0; i < ns; i++) { cost[i] = rn.stage_count[i]; cost[ns + i] = 2.0 * rn.stage_count[i]; }
            c.f_stage = cost; c.b_stage = cost + ns; c.i_stage = cost; c.w_stage = cost; c.memory_stage = cost;
        }
        printf("the schedule (simulated: F = 1, B = 2 time units per block)\n");
        if (!cost || pp_simulate(rn.schedule, &c, &sim, &err) != PP_OK ||
            pp_schedule_draw_ascii(rn.schedule, sim, stdout, &err) != PP_OK)
            fprintf(stderr, "mlp_threads: %s\n", cost ? err.message : "out of memory");
        pp_sim_result_free(sim);
        free(cost);
    }
    printf("\n");
    fflush(stdout);

    st = pp_threads_run(pp, rank_main, &rn, NULL, NULL, &err);
    if (st != PP_OK) fprintf(stderr, "mlp_threads: %s\n", err.message);
    else if (rn.failures) fprintf(stderr, "mlp_threads: %d step(s) did not match the single-stage run\n", rn.failures);

    for (l = 0; l < m.copies; l++) {
        block *b = &m.blocks[l];
        free(b->w1); free(b->gw1); free(b->b1); free(b->gb1); free(b->w2); free(b->gw2); free(b->b2); free(b->gb2);
    }
    free(m.blocks); free(m.teacher); free(m.x_in); free(m.gy); free(m.pre); free(m.dpre); free(m.data_x); free(m.data_t);
    pp_schedule_free(rn.schedule);
    free(rn.stage_first); free(rn.stage_count);
    return st != PP_OK ? 1 : rn.failures ? 1 : 0;
}
