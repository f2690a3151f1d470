/* test_runtime.c — the runtime: threads transport, executor, timeline.
 *
 * The model under test is a stack of residual blocks y = x + W2 gelu(W1 x + b1) + b2 (width D,
 * hidden H), one block per virtual stage, trained on a squared error. Every pipeline run is
 * compared with the same model run as one stage by plain loops here (tm_reference): same loss,
 * same gradients (relative error < 1e-5; only the order in which microbatches add into a weight
 * gradient differs between schedules), same outputs. Ranks are threads (pp_threads_run). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "pp_test.h"

#define TM_D 4
#define TM_H 6
#define TM_MAX_ROWS 8
#define TM_MAX_STAGES 16
#define TM_MAX_MB 16
#define TM_MAX_STEPS 4
#define TM_MAX_BATCH 64

/* --- the model ------------------------------------------------------------------------------ */

typedef struct tm_mb {       /* one microbatch's data: the metadata every callback receives */
    int rows;
    float x[TM_MAX_ROWS * TM_D];
    float t[TM_MAX_ROWS * TM_D];
} tm_mb;

typedef struct tm_params {
    float w1[TM_MAX_STAGES][TM_H * TM_D], b1[TM_MAX_STAGES][TM_H];
    float w2[TM_MAX_STAGES][TM_D * TM_H], b2[TM_MAX_STAGES][TM_D];
} tm_params;

static float tm_gelu(float x)
{
    const float a = 0.7978845608f;
    return 0.5f * x * (1.0f + tanhf(a * (x + 0.044715f * x * x * x)));
}

static float tm_gelu_grad(float x)
{
    const float a = 0.7978845608f;
    float th = tanhf(a * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * a * (1.0f + 3.0f * 0.044715f * x * x);
}

static void tm_init_params(tm_params *p, int stages)
{
    unsigned s = 12345u;
    int st, i;
    memset(p, 0, sizeof *p);
    for (st = 0; st < stages; st++) {
#define TM_RND() ((s = s * 1103515245u + 12345u), ((float)((s >> 8) & 0xffff) / 65536.0f - 0.5f))
        for (i = 0; i < TM_H * TM_D; i++) p->w1[st][i] = TM_RND();
        for (i = 0; i < TM_H; i++) p->b1[st][i] = 0.1f * TM_RND();
        for (i = 0; i < TM_D * TM_H; i++) p->w2[st][i] = TM_RND();
        for (i = 0; i < TM_D; i++) p->b2[st][i] = 0.1f * TM_RND();
    }
}

static void tm_make_mb(tm_mb *mb, int rows, int seed)
{
    int i;
    unsigned s = 777u + 31u * (unsigned)seed;
    memset(mb, 0, sizeof *mb);
    mb->rows = rows;
    for (i = 0; i < rows * TM_D; i++) { mb->x[i] = TM_RND(); mb->t[i] = TM_RND(); }
}
#undef TM_RND

/* block forward on `rows` rows; pre [rows*H] saved for backward */
static void tm_block_forward(const tm_params *p, int s, int rows, const float *x, float *pre, float *y)
{
    int r, i, j;
    for (r = 0; r < rows; r++) {
        float h[TM_H];
        for (i = 0; i < TM_H; i++) {
            float a = p->b1[s][i];
            for (j = 0; j < TM_D; j++) a += p->w1[s][i * TM_D + j] * x[r * TM_D + j];
            pre[r * TM_H + i] = a;
            h[i] = tm_gelu(a);
        }
        for (i = 0; i < TM_D; i++) {
            float a = x[r * TM_D + i] + p->b2[s][i];
            for (j = 0; j < TM_H; j++) a += p->w2[s][i * TM_H + j] * h[j];
            y[r * TM_D + i] = a;
        }
    }
}

/* input-gradient half: dpre (saved for the weight half) and gx (may be NULL) */
static void tm_block_backward_input(const tm_params *p, int s, int rows, const float *pre, const float *gy,
                                    float *dpre, float *gx)
{
    int r, i, j;
    for (r = 0; r < rows; r++) {
        for (j = 0; j < TM_H; j++) {
            float a = 0;
            for (i = 0; i < TM_D; i++) a += p->w2[s][i * TM_H + j] * gy[r * TM_D + i];
            dpre[r * TM_H + j] = a * tm_gelu_grad(pre[r * TM_H + j]);
        }
        if (gx)
            for (i = 0; i < TM_D; i++) {
                float a = gy[r * TM_D + i];
                for (j = 0; j < TM_H; j++) a += p->w1[s][j * TM_D + i] * dpre[r * TM_H + j];
                gx[r * TM_D + i] = a;
            }
    }
}

/* weight-gradient half: adds into g */
static void tm_block_backward_weight(tm_params *g, int s, int rows, const float *x, const float *pre,
                                     const float *dpre, const float *gy)
{
    int r, i, j;
    for (r = 0; r < rows; r++) {
        for (i = 0; i < TM_D; i++) {
            g->b2[s][i] += gy[r * TM_D + i];
            for (j = 0; j < TM_H; j++) g->w2[s][i * TM_H + j] += gy[r * TM_D + i] * tm_gelu(pre[r * TM_H + j]);
        }
        for (j = 0; j < TM_H; j++) {
            g->b1[s][j] += dpre[r * TM_H + j];
            for (i = 0; i < TM_D; i++) g->w1[s][j * TM_D + i] += dpre[r * TM_H + j] * x[r * TM_D + i];
        }
    }
}

/* loss of `rows` rows (the first `valid` real), sum of 0.5*(y-t)^2; grad = (y-t)*scale, 0 on padding */
static float tm_loss(int rows, int valid, const float *y, const float *t, float scale, float *gy)
{
    float l = 0;
    int i;
    for (i = 0; i < rows * TM_D; i++) {
        float d = y[i] - t[i];
        if (i < valid * TM_D) { l += 0.5f * d * d; if (gy) gy[i] = d * scale; }
        else if (gy) gy[i] = 0;
    }
    return l;
}

/* --- the single-stage reference ------------------------------------------------------------- */

/* Runs mbs[0..n) through all stages one after the other; loss = sum over mbs of the mb's sum of
 * squares times scale (the objective's gradient); adds gradients into g; outputs into out[m]. */
static double tm_reference(const tm_params *p, int stages, const tm_mb *mbs, int n, float scale, tm_params *g,
                           float (*out)[TM_MAX_ROWS * TM_D])
{
    double loss = 0;
    int m, s;
    for (m = 0; m < n; m++) {
        float act[TM_MAX_STAGES + 1][TM_MAX_ROWS * TM_D], pre[TM_MAX_STAGES][TM_MAX_ROWS * TM_H];
        float gy[TM_MAX_ROWS * TM_D], gx[TM_MAX_ROWS * TM_D], dpre[TM_MAX_ROWS * TM_H];
        int rows = mbs[m].rows;
        memcpy(act[0], mbs[m].x, sizeof act[0]);
        for (s = 0; s < stages; s++) tm_block_forward(p, s, rows, act[s], pre[s], act[s + 1]);
        if (out) memcpy(out[m], act[stages], sizeof out[m]);
        loss += tm_loss(rows, rows, act[stages], mbs[m].t, scale, gy);
        if (!g) continue;
        for (s = stages - 1; s >= 0; s--) {
            tm_block_backward_input(p, s, rows, pre[s], gy, dpre, gx);
            tm_block_backward_weight(g, s, rows, act[s], pre[s], dpre, gy);
            memcpy(gy, gx, sizeof gy);
        }
    }
    return loss;
}

/* max |a-b| / max |b| over one stage's parameters */
static double tm_rel_err(const tm_params *a, const tm_params *b, int s)
{
    double num = 0, den = 1e-30;
    const float *pa[4] = { a->w1[s], a->b1[s], a->w2[s], a->b2[s] };
    const float *pb[4] = { b->w1[s], b->b1[s], b->w2[s], b->b2[s] };
    int n[4] = { TM_H * TM_D, TM_H, TM_D * TM_H, TM_D }, k, i;
    for (k = 0; k < 4; k++)
        for (i = 0; i < n[k]; i++) {
            double d = fabs((double)pa[k][i] - (double)pb[k][i]);
            if (d > num) num = d;
            if (fabs((double)pb[k][i]) > den) den = fabs((double)pb[k][i]);
        }
    return num / den;
}

/* DualPipe keeps two copies of every model stage j (stage j going down, stage pp+j going up),
 * which read the same weights (params by pp_mb_info.model_stage) and each add into their own
 * gradient (grads by stage, written only by the stage's rank). The trainer then sums the two
 * copies (DualPipe all-reduces them); here into g[j]. Elsewhere the model stage is the stage. */
static int tm_model_stages(const pp_schedule *s)
{
    return s->placement == PP_PLACEMENT_DUAL ? s->pp : s->num_stages;
}

static void tm_sum_copies(const pp_schedule *s, const tm_params *grads, tm_params *g)
{
    int stg, i;
    memset(g, 0, sizeof *g);
    for (stg = 0; stg < s->num_stages; stg++) {
        int j = pp_stage_model_stage(s, stg);
        for (i = 0; i < TM_H * TM_D; i++) { g->w1[j][i] += grads->w1[stg][i]; g->w2[j][i] += grads->w2[stg][i]; }
        for (i = 0; i < TM_H; i++) g->b1[j][i] += grads->b1[stg][i];
        for (i = 0; i < TM_D; i++) g->b2[j][i] += grads->b2[stg][i];
    }
}

/* --- the pipeline run: callbacks and harness ------------------------------------------------ */

/* A transport around a rank's own that checks pp_transfer.buf_free_posts: a receive that says
 * its buffer has been free for `a` posts must not name a buffer a callback touched after the
 * post `a` back was made (a device transport lets the receive land from that post's point on). */
typedef struct tm_watch {
    pp_transport inner;
    long long posts;                /* posts made */
    long long sends;                /* sends among them */
    const void *ptr[256];           /* buffers callbacks touched ... */
    long long touched[256];         /* ... and the posts made by then */
    int n;
    long long receives, early, violations;
    char first_violation[160];
    /* which peers each posted group has (a bit each), and the waits since the last compute */
    void *handle_of[512];
    unsigned peers_of[512];
    int nhandles;
    unsigned waited[64];
    int nwaited;
    long long mixed_posts, waits, foreign;  /* groups with two peers or more; waits for another
                                               peer's group than the input of the next compute */
    long long foreign_recv;                 /* of those, groups that send nothing (none is a wait
                                               for buffers: pp__acquire waits for sends alone) */
    char first_foreign[160];
    /* output_ready (run->parts): what the callbacks said of each buffer since its send, and every
     * send's parts flag checked against it */
    const void *said_buf[64];
    size_t said_bytes[64];
    int said_count[64], nsaid, expect_parts;
    long long said_calls, parted_sends, plain_sends, part_errors;
    char first_part_error[160];
} tm_watch;

typedef struct tm_run {
    /* given */
    const pp_schedule *sched;               /* every rank's schedule ... */
    const pp_schedule *rank_sched[TM_MAX_STAGES];   /* ... or one per rank (mismatch tests) */
    int steps;
    tm_mb mbs[TM_MAX_STEPS][TM_MAX_MB];     /* data of each step's microbatches */
    float batch_x[TM_MAX_BATCH * TM_D], batch_t[TM_MAX_BATCH * TM_D];   /* with batch_rows: the batch */
    int batch_rows, forward_only, use_fb_callback, record, num_metrics;
    double timeout;
    int fail_rank, fail_mode, fail_stage, fail_mb;   /* fail_mode 1: callback error, 2: hang */
    int wrong_bytes_rank;                   /* >= 0: this rank's tensor_bytes says 4 more */
    /* model state: params read by all, grads and stashes written by the stage's owner */
    tm_params params, grads;
    float pre[TM_MAX_STAGES][TM_MAX_MB][TM_MAX_ROWS * TM_H];
    float dpre[TM_MAX_STAGES][TM_MAX_MB][TM_MAX_ROWS * TM_H];
    const void *f_out_ptr[TM_MAX_STAGES][TM_MAX_MB], *f_in_ptr[TM_MAX_STAGES][TM_MAX_MB];
    const void *b_gin_ptr[TM_MAX_STAGES][TM_MAX_MB], *b_gout_ptr[TM_MAX_STAGES][TM_MAX_MB];
    int fb_calls[TM_MAX_STAGES];
    /* results per rank */
    pp_step_result result[TM_MAX_STAGES][TM_MAX_STEPS];
    float outputs[TM_MAX_MB][TM_MAX_ROWS * TM_D];
    int outputs_seen;
    pp_executor_stats stats[TM_MAX_STAGES];
    double seconds[TM_MAX_STAGES];
    pp_status status[TM_MAX_STAGES];
    pp_error errors[TM_MAX_STAGES];
    /* the hang: released once every other rank returned */
    pthread_mutex_t mu;
    int returned;
    int current_step[TM_MAX_STAGES];
    int keep;                               /* 1: leave the executors in ex[] for the test to read */
    pp_timer timer[TM_MAX_STAGES];          /* a rank's timer when its mark is set */
    pp_executor *ex[TM_MAX_STAGES];
    int watch;                              /* 1: every rank's transport is a tm_watch */
    tm_watch watches[TM_MAX_STAGES];
    int unsplit;                            /* 1: no backward_input / backward_weight callbacks */
    /* a recipe instead of the schedule (recipe.kind set): each step's microbatch count, or
     * rank_mb[rank] for every step of that rank when set; allocations after each step */
    pp_schedule_config recipe;
    int max_mb, split_backward, split_overlaps;
    int step_mb[TM_MAX_STEPS], rank_mb[TM_MAX_STAGES];
    long long step_allocs[TM_MAX_STAGES][TM_MAX_STEPS];
    int mixed_peers;                        /* 1: the transport says independent_peers = 0 */
    int no_test;                            /* 1: the transport without test(): sends' buffers come back
                                               at the program's own waits, whatever the timing */
    /* saved-state slots (pp_mb_info.slot), by rank: which (stage, mb) holds each slot (stage *
     * TM_MAX_MB + mb + 1; 0 free), the slot each pair got at its F (by stage), one past the
     * highest slot seen, pp_executor_saved_slots, and the first misuse */
    int slot_owner[TM_MAX_STAGES][TM_MAX_STAGES * TM_MAX_MB];
    int slot_at_f[TM_MAX_STAGES][TM_MAX_MB];
    int slot_max[TM_MAX_STAGES], saved_slots[TM_MAX_STAGES], slot_bad[TM_MAX_STAGES];
    char slot_why[TM_MAX_STAGES][160];
    int chunk_done_calls[TM_MAX_STAGES];
    long long sends_at_done[TM_MAX_STAGES][2 * TM_MAX_STAGES];   /* watch: sends posted at each chunk_done */
    /* log_calls: each rank's callbacks in order, "F1.0 B1.0 D0:1.0 " (D: chunk_done, chunk:stage.mb) */
    int log_calls;
    char log[TM_MAX_STAGES][8192];
    /* parts > 0: forward, backward and backward_input say their output written in `parts` steps
     * (pp_executor_output_ready); misuse: rank 0's first forward also tries every wrong call,
     * and misuse_status[k] keeps what call k returned */
    int parts, misuse;
    pp_status misuse_status[8];
    char misuse_message[8][PP_ERROR_MESSAGE_SIZE];
    int parts_failed;
} tm_run;

static void tm_log(tm_run *run, int rank, const char *fmt, int a, int b, int c)
{
    size_t n;
    if (!run->log_calls) return;
    n = strlen(run->log[rank]);
    snprintf(run->log[rank] + n, sizeof run->log[rank] - n, fmt, a, b, c);
}

static void tm_slot_error(tm_run *run, const pp_mb_info *info, const char *what)
{
    if (!run->slot_bad[info->rank]++)
        snprintf(run->slot_why[info->rank], sizeof run->slot_why[0], "%s (stage %d, mb %d, slot %d, step %d)", what,
                 info->stage, info->mb, info->slot, info->step);
}

/* At a forward: no slot in a forward-only step; else a free one, now this pair's. */
static void tm_slot_take(tm_run *run, const pp_mb_info *info)
{
    int *own = run->slot_owner[info->rank];
    if (info->forward_only) {
        if (info->slot != -1) tm_slot_error(run, info, "a forward-only step names a slot");
        return;
    }
    if (info->slot < 0 || info->slot >= TM_MAX_STAGES * TM_MAX_MB) { tm_slot_error(run, info, "no slot"); return; }
    if (own[info->slot]) { tm_slot_error(run, info, "the slot of a pair still live"); return; }
    own[info->slot] = info->stage * TM_MAX_MB + info->mb + 1;
    run->slot_at_f[info->stage][info->mb] = info->slot;
    if (info->slot + 1 > run->slot_max[info->rank]) run->slot_max[info->rank] = info->slot + 1;
}

/* At a backward half: the slot its forward got; the weight half (or a whole B) ends the pair. */
static void tm_slot_use(tm_run *run, const pp_mb_info *info, int release)
{
    int *own = run->slot_owner[info->rank];
    if (info->slot != run->slot_at_f[info->stage][info->mb] || info->slot < 0 ||
        info->slot >= TM_MAX_STAGES * TM_MAX_MB || own[info->slot] != info->stage * TM_MAX_MB + info->mb + 1) {
        tm_slot_error(run, info, "a backward's slot is not its forward's");
        return;
    }
    if (release) own[info->slot] = 0;
}

static void tm_touch(tm_run *run, int rank, const void *ptr)
{
    tm_watch *w = &run->watches[rank];
    int i;
    if (!run->watch || !ptr) return;
    for (i = 0; i < w->n && w->ptr[i] != ptr; i++) {}
    if (i == w->n) {
        if (w->n == 256) return;
        w->ptr[w->n++] = ptr;
    }
    w->touched[i] = w->posts;
}

static void tm_part_error(tm_watch *w, const char *what, long long a, long long b)
{
    if (!w->part_errors++) snprintf(w->first_part_error, sizeof w->first_part_error, "%s (%lld, %lld)", what, a, b);
}

static int tm_said(tm_watch *w, const void *buf)
{
    int j;
    for (j = 0; j < w->nsaid && w->said_buf[j] != buf; j++) {}
    return j < w->nsaid ? j : -1;
}

/* pp_transport.output_ready: a buffer's marks start with first = 1 and grow. */
static pp_status tm_watch_output_ready(void *user, const void *buf, size_t bytes, int first, pp_error *err)
{
    tm_watch *w = (tm_watch *)user;
    int j = tm_said(w, buf);
    w->said_calls++;
    if (first) {
        if (j < 0 && w->nsaid == 64) { tm_part_error(w, "too many buffers said at once", w->nsaid, 0); return PP_OK; }
        if (j < 0) j = w->nsaid++;
        w->said_buf[j] = buf;
        w->said_count[j] = 0;
        w->said_bytes[j] = 0;
    } else if (j < 0) {
        tm_part_error(w, "a mark without first for a buffer never said", (long long)bytes, 0);
        return PP_OK;
    }
    if (bytes <= w->said_bytes[j]) tm_part_error(w, "marks that do not grow", (long long)w->said_bytes[j], (long long)bytes);
    w->said_count[j]++;
    w->said_bytes[j] = bytes;
    (void)err;
    return PP_OK;
}

/* A send: parts = 1 exactly when its buffer's marks are all there, the last one its whole size. */
static void tm_watch_parts(tm_watch *w, const pp_transfer *x)
{
    int j = tm_said(w, x->buf);
    if (x->parts) {
        w->parted_sends++;
        if (j < 0) { tm_part_error(w, "a send with parts whose buffer was never said", (long long)x->bytes, 0); return; }
        if (w->said_count[j] != w->expect_parts || w->said_bytes[j] != x->bytes)
            tm_part_error(w, "a send whose marks are not the callback's", w->said_count[j], (long long)w->said_bytes[j]);
    } else {
        w->plain_sends++;
        if (j >= 0) tm_part_error(w, "a send without parts of a buffer said", w->said_count[j], (long long)x->bytes);
    }
    if (j >= 0) {   /* used up */
        w->nsaid--;
        w->said_buf[j] = w->said_buf[w->nsaid];
        w->said_bytes[j] = w->said_bytes[w->nsaid];
        w->said_count[j] = w->said_count[w->nsaid];
    }
}

static pp_status tm_watch_post(void *user, const pp_transfer *x, int count, void **handle, pp_error *err)
{
    tm_watch *w = (tm_watch *)user;
    pp_status st;
    int i, j;
    for (i = 0; i < count; i++) {
        if (x[i].is_send) { w->sends++; tm_watch_parts(w, &x[i]); continue; }
        w->receives++;
        if (x[i].buf_free_posts > 0) w->early++;
        for (j = 0; j < w->n && w->ptr[j] != x[i].buf; j++) {}
        if (x[i].buf_free_posts < 0 || (j < w->n && w->posts - x[i].buf_free_posts < w->touched[j])) {
            if (!w->violations++)
                snprintf(w->first_violation, sizeof w->first_violation, "post %lld: a receive says free for %d posts, "
                         "a callback touched its buffer once %lld posts were made", w->posts, x[i].buf_free_posts,
                         j < w->n ? w->touched[j] : -1);
        }
    }
    st = w->inner.post(w->inner.user, x, count, handle, err);
    if (st == PP_OK) {
        unsigned peers = 0, sends = 0;
        for (i = 0; i < count; i++) { peers |= 1u << x[i].peer; sends |= x[i].is_send ? 1u << 31 : 0; }
        if (peers & (peers - 1)) w->mixed_posts++;
        w->handle_of[w->nhandles % 512] = *handle;
        w->peers_of[w->nhandles % 512] = peers | sends;
        w->nhandles++;
        w->posts++;
    }
    return st;
}

static pp_status tm_watch_wait(void *user, void *h, double timeout_s, pp_error *err)
{
    tm_watch *w = (tm_watch *)user;
    int i;
    for (i = w->nhandles - 1; i >= 0 && i >= w->nhandles - 512; i--)
        if (w->handle_of[i % 512] == h) {
            if (w->nwaited < 64) w->waited[w->nwaited++] = w->peers_of[i % 512];
            break;
        }
    w->waits++;
    return w->inner.wait(w->inner.user, h, timeout_s, err);
}

/* A compute of (stage, mb) that reads the input `op` brings (F: the activation, else the output
 * gradient): each wait since the last compute must be for a group of that input's peer alone. */
static void tm_watch_compute(tm_run *run, const pp_mb_info *info, int op)
{
    tm_watch *w = &run->watches[info->rank];
    int from = -1, i;
    if (!run->watch) return;
    if (op == PP_OP_F && info->stage != pp_mb_first_stage(run->sched, info->mb))
        from = pp_stage_rank(run->sched, info->stage - 1);
    if (op != PP_OP_F && info->stage != pp_mb_last_stage(run->sched, info->mb))
        from = pp_stage_rank(run->sched, info->stage + 1);
    for (i = 0; i < w->nwaited; i++) {
        unsigned peers = w->waited[i] & ~(1u << 31);
        if (from < 0 || from == info->rank || peers != 1u << from) {
            w->foreign_recv += !(w->waited[i] >> 31);
            if (!w->foreign++)
                snprintf(w->first_foreign, sizeof w->first_foreign, "before %s%d.%d (input from rank %d) it waited "
                         "for a group with peers 0x%x%s", op == PP_OP_F ? "F" : "B", info->stage, info->mb, from,
                         peers, w->waited[i] >> 31 ? " that sends" : "");
        }
    }
    w->nwaited = 0;
}

static pp_status tm_watch_test(void *user, void *h, int *done, pp_error *err)
{
    tm_watch *w = (tm_watch *)user;
    return w->inner.test(w->inner.user, h, done, err);
}

static pp_status tm_watch_all_reduce(void *user, float *values, int count, double timeout_s, pp_error *err)
{
    tm_watch *w = (tm_watch *)user;
    return w->inner.all_reduce(w->inner.user, values, count, timeout_s, err);
}

static void tm_watch_abort(void *user, pp_status status, const char *reason)
{
    tm_watch *w = (tm_watch *)user;
    w->inner.abort(w->inner.user, status, reason);
}

static const tm_mb *tm_meta(const pp_mb_info *info) { return (const tm_mb *)info->meta; }
static int tm_rows(const pp_mb_info *info) { return info->batch_rows > 0 ? info->rows : tm_meta(info)->rows; }

static size_t tm_bytes(void *user, int boundary, const pp_mb_info *info)
{
    tm_run *run = (tm_run *)user;
    (void)boundary;
    if (info->slot != -1) tm_slot_error(run, info, "tensor_bytes names a slot");
    return (size_t)tm_rows(info) * TM_D * sizeof(float) + (info->rank == run->wrong_bytes_rank ? 4 : 0);
}

static int tm_rows_of(tm_run *run, int m)
{
    if (run->batch_rows > 0) return (run->batch_rows + run->sched->mb - 1) / run->sched->mb;
    return run->mbs[0][m].rows;
}

static int tm_maybe_fail(tm_run *run, const pp_mb_info *info)
{
    if (info->rank != run->fail_rank || info->stage != run->fail_stage || info->mb != run->fail_mb) return 0;
    if (run->fail_mode == 1) return 7;
    if (run->fail_mode == 2) {   /* hang until every other rank has given up */
        for (;;) {
            struct timespec ts = { 0, 2000000 };
            int done;
            pthread_mutex_lock(&run->mu);
            done = run->returned >= run->sched->pp - 1;
            pthread_mutex_unlock(&run->mu);
            if (done) return 0;
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

/* x (which = 0) or t (1) of the microbatch: with batch_rows, rows [first_row, first_row + rows)
 * of the step's batch (batch_x, batch_t); otherwise the microbatch's own data (its metadata). */
static const float *tm_data(tm_run *run, const pp_mb_info *info, int which)
{
    if (info->batch_rows > 0) return (which ? run->batch_t : run->batch_x) + (size_t)info->first_row * TM_D;
    return which ? tm_meta(info)->t : tm_meta(info)->x;
}

static int tm_input(void *user, const pp_mb_info *info, void *x)
{
    tm_run *run = (tm_run *)user;
    int rows = tm_rows(info), valid = info->batch_rows > 0 ? info->valid_rows : rows;
    tm_touch(run, info->rank, x);
    memset(x, 0, (size_t)rows * TM_D * sizeof(float));
    memcpy(x, tm_data(run, info, 0), (size_t)valid * TM_D * sizeof(float));
    return 0;
}

/* run->parts: the output said written in `parts` steps, the last its whole size; run->misuse: on
 * rank 0's first forward, every wrong call first (misuse_status), then one mark. */
static void tm_mark_parts(tm_run *run, const pp_mb_info *info, const void *in, const void *out)
{
    pp_executor *ex = run->ex[info->rank];
    size_t size = (size_t)tm_rows(info) * TM_D * sizeof(float);
    pp_error err;
    int k;
    if (!out) return;
    if (run->misuse && info->rank == 0 && info->mb == 0 && info->step == 0 && in) {
        size_t at = size / 2;
        pp_status *ms = run->misuse_status;
        ms[0] = pp_executor_output_ready(NULL, out, 1, &err);
        ms[1] = pp_executor_output_ready(ex, in, 1, &err);          /* not an output */
        snprintf(run->misuse_message[1], PP_ERROR_MESSAGE_SIZE, "%s", err.message);
        ms[2] = pp_executor_output_ready(ex, out, 0, &err);
        snprintf(run->misuse_message[2], PP_ERROR_MESSAGE_SIZE, "%s", err.message);
        ms[3] = pp_executor_output_ready(ex, out, size + 1, &err);
        snprintf(run->misuse_message[3], PP_ERROR_MESSAGE_SIZE, "%s", err.message);
        ms[4] = pp_executor_output_ready(ex, out, at, &err);          /* right */
        ms[5] = pp_executor_output_ready(ex, out, at, &err);          /* does not grow */
        snprintf(run->misuse_message[5], PP_ERROR_MESSAGE_SIZE, "%s", err.message);
        ms[6] = PP_OK;
        for (k = 1; k < PP_MAX_OUTPUT_PARTS; k++)   /* up to the bound: all right */
            if ((ms[6] = pp_executor_output_ready(ex, out, at + (size_t)k, &err)) != PP_OK) break;
        ms[7] = pp_executor_output_ready(ex, out, at + (size_t)k, &err);   /* one past it */
        snprintf(run->misuse_message[7], PP_ERROR_MESSAGE_SIZE, "%s", err.message);
        return;
    }
    for (k = 1; k <= run->parts; k++)
        if (pp_executor_output_ready(ex, out, size * (size_t)k / (size_t)run->parts, &err) != PP_OK) run->parts_failed++;
}

static int tm_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    tm_run *run = (tm_run *)user;
    int rc = tm_maybe_fail(run, info);
    if (rc) return rc;
    tm_touch(run, info->rank, in);
    tm_touch(run, info->rank, out);
    tm_slot_take(run, info);
    tm_watch_compute(run, info, PP_OP_F);
    tm_log(run, info->rank, "F%d.%d ", info->stage, info->mb, 0);
    run->f_in_ptr[info->stage][info->mb] = in;
    run->f_out_ptr[info->stage][info->mb] = out;
    tm_block_forward(&run->params, info->model_stage, tm_rows(info), (const float *)in, run->pre[info->stage][info->mb],
                     (float *)out);
    if (run->parts || run->misuse) tm_mark_parts(run, info, in, out);
    return 0;
}

static int tm_loss_cb(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *l)
{
    tm_run *run = (tm_run *)user;
    int rows = tm_rows(info), valid = info->batch_rows > 0 ? info->valid_rows : rows;
    float t[TM_MAX_ROWS * TM_D];
    float scale = info->batch_rows > 0 ? 1.0f / (float)info->batch_rows : 1.0f / (float)info->num_mb;
    tm_touch(run, info->rank, out);
    tm_touch(run, info->rank, grad_out);
    memset(t, 0, sizeof t);
    memcpy(t, tm_data(run, info, 1), (size_t)valid * TM_D * sizeof(float));
    l->loss = tm_loss(rows, valid, (const float *)out, t, scale, (float *)grad_out);
    if (run->num_metrics) { l->metrics[0] = (float)valid; l->metrics[1] = 1.0f; }
    if (info->forward_only && info->mb < TM_MAX_MB) {
        memcpy(run->outputs[info->mb], out, (size_t)rows * TM_D * sizeof(float));
    }
    return 0;
}

static void tm_backward_input_math(tm_run *run, const pp_mb_info *info, const void *in, const void *gout, void *gin)
{
    int s = info->stage, m = info->mb;
    tm_touch(run, info->rank, in);
    tm_touch(run, info->rank, gout);
    tm_touch(run, info->rank, gin);
    run->b_gin_ptr[s][m] = gin;
    run->b_gout_ptr[s][m] = gout;
    tm_block_backward_input(&run->params, info->model_stage, tm_rows(info), run->pre[s][m], (const float *)gout, run->dpre[s][m],
                            (float *)gin);
}

static void tm_backward_weight_math(tm_run *run, const pp_mb_info *info, const void *in, const void *gout)
{
    int s = info->stage, m = info->mb;
    tm_touch(run, info->rank, in);
    tm_touch(run, info->rank, gout);
    tm_block_backward_weight(&run->grads, s, tm_rows(info), (const float *)in, run->pre[s][m], run->dpre[s][m],
                             (const float *)gout);
}

static int tm_backward_input(void *user, const pp_mb_info *info, const void *in, const void *gout, void *gin)
{
    tm_run *run = (tm_run *)user;
    tm_slot_use(run, info, 0);
    tm_watch_compute(run, info, PP_OP_I);
    tm_log(run, info->rank, "I%d.%d ", info->stage, info->mb, 0);
    tm_backward_input_math(run, info, in, gout, gin);
    if (run->parts) tm_mark_parts(run, info, NULL, gin);
    return 0;
}

static int tm_backward_weight(void *user, const pp_mb_info *info, const void *in, const void *gout)
{
    tm_run *run = (tm_run *)user;
    tm_slot_use(run, info, 1);
    tm_log(run, info->rank, "W%d.%d ", info->stage, info->mb, 0);
    tm_backward_weight_math(run, info, in, gout);
    return 0;
}

static int tm_backward(void *user, const pp_mb_info *info, const void *in, const void *gout, void *gin)
{
    tm_run *run = (tm_run *)user;
    int rc = tm_maybe_fail(run, info);
    if (rc) return rc;
    tm_slot_use(run, info, 1);
    tm_watch_compute(run, info, PP_OP_B);
    tm_log(run, info->rank, "B%d.%d ", info->stage, info->mb, 0);
    tm_backward_input_math(run, info, in, gout, gin);
    if (run->parts) tm_mark_parts(run, info, NULL, gin);
    tm_backward_weight_math(run, info, in, gout);
    return 0;
}

static int tm_chunk_done(void *user, const pp_mb_info *info)
{
    tm_run *run = (tm_run *)user;
    if (info->slot != -1) tm_slot_error(run, info, "chunk_done names a slot");
    if (info->forward_only) tm_slot_error(run, info, "chunk_done in a forward-only step");
    if (run->watch && run->chunk_done_calls[info->rank] < 2 * TM_MAX_STAGES)
        run->sends_at_done[info->rank][run->chunk_done_calls[info->rank]] = run->watches[info->rank].sends;
    run->chunk_done_calls[info->rank]++;
    tm_log(run, info->rank, "D%d:%d.%d ", info->chunk, info->stage, info->mb);
    return 0;
}

static int tm_forward_backward(void *user, const pp_mb_info *f, const void *f_in, void *f_out, const pp_mb_info *b,
                               const void *b_in, const void *b_gout, void *b_gin)
{
    tm_run *run = (tm_run *)user;
    int rc = tm_forward(user, f, f_in, f_out);
    run->fb_calls[f->rank]++;
    return rc ? rc : tm_backward(user, b, b_in, b_gout, b_gin);
}

static pp_status tm_rank(void *user, int rank, pp_transport *t, pp_error *err)
{
    tm_run *run = (tm_run *)user;
    pp_executor_config cfg;
    pp_executor *ex = NULL;
    pp_status st;
    int step;
    double t0 = 0;
    struct timespec ts;
    memset(&cfg, 0, sizeof cfg);
    cfg.schedule = run->rank_sched[rank] ? run->rank_sched[rank] : run->sched;
    if (run->recipe.kind != PP_KIND_NONE) {
        cfg.schedule = NULL;
        cfg.recipe = run->recipe;
        cfg.max_mb = run->max_mb;
        cfg.split_backward = run->split_backward;
        cfg.split_overlaps = run->split_overlaps;
    }
    cfg.transport = *t;
    if (run->watch) {
        tm_watch *w = &run->watches[rank];
        w->inner = *t;
        cfg.transport.user = w;
        cfg.transport.post = tm_watch_post;
        cfg.transport.wait = tm_watch_wait;
        cfg.transport.test = t->test ? tm_watch_test : NULL;
        cfg.transport.all_reduce = tm_watch_all_reduce;
        cfg.transport.abort = tm_watch_abort;
        cfg.transport.output_ready = tm_watch_output_ready;
        w->expect_parts = run->parts;
    }
    if (run->no_test) cfg.transport.test = NULL;
    if (run->mixed_peers) cfg.transport.independent_peers = 0;
    cfg.callbacks.user = run;
    cfg.callbacks.tensor_bytes = tm_bytes;
    cfg.callbacks.input = tm_input;
    cfg.callbacks.forward = tm_forward;
    cfg.callbacks.loss = tm_loss_cb;
    cfg.callbacks.backward = tm_backward;
    if (!run->unsplit) {
        cfg.callbacks.backward_input = tm_backward_input;
        cfg.callbacks.backward_weight = tm_backward_weight;
    }
    cfg.callbacks.chunk_done = tm_chunk_done;
    if (run->use_fb_callback) cfg.callbacks.forward_backward = tm_forward_backward;
    cfg.timeout_s = run->timeout > 0 ? run->timeout : 10.0;
    cfg.num_metrics = run->num_metrics;
    cfg.record_timeline = run->record;
    if (run->timer[rank].mark) cfg.timer = run->timer[rank];
    st = pp_executor_create(&cfg, &ex, err);
    if (st == PP_OK) {
        run->ex[rank] = ex;   /* for the callbacks (pp_executor_output_ready) */
        run->saved_slots[rank] = pp_executor_saved_slots(ex);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
        for (step = 0; step < run->steps && st == PP_OK; step++) {
            pp_step sp;
            void *meta[TM_MAX_MB];
            int m;
            for (m = 0; m < TM_MAX_MB; m++) meta[m] = &run->mbs[step][m];
            memset(&sp, 0, sizeof sp);
            sp.mb_meta = meta;
            sp.batch_rows = run->batch_rows;
            sp.forward_only = run->forward_only;
            sp.num_mb = run->rank_mb[rank] ? run->rank_mb[rank] : run->step_mb[step];
            run->current_step[rank] = step;
            st = pp_run_step(ex, &sp, &run->result[rank][step], err);
            if (st == PP_OK) {
                pp_executor_stats now;
                pp_executor_get_stats(ex, &now);
                run->step_allocs[rank][step] = now.allocations;
            }
            if (st == PP_OK && run->result[rank][step].outputs) {
                /* forward-only outputs handed back in microbatch order: compare with what loss saw */
                const pp_step_result *r = &run->result[rank][step];
                int seen = 0;
                for (m = 0; m < r->num_outputs && m < TM_MAX_MB; m++)
                    if (r->output_bytes[m] == (size_t)tm_rows_of(run, m) * TM_D * sizeof(float) &&
                        memcmp(r->outputs[m], run->outputs[m], r->output_bytes[m]) == 0)
                        seen++;
                pthread_mutex_lock(&run->mu);   /* DualPipe: two ranks hand back outputs */
                run->outputs_seen += seen;
                pthread_mutex_unlock(&run->mu);
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        run->seconds[rank] = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0;
        pp_executor_get_stats(ex, &run->stats[rank]);
        if (!run->keep) { pp_executor_free(ex); run->ex[rank] = NULL; }
    }
    pthread_mutex_lock(&run->mu);
    run->returned++;
    pthread_mutex_unlock(&run->mu);
    return st;
}

static tm_run *tm_new(const pp_schedule *s, int rows)
{
    tm_run *run = (tm_run *)calloc(1, sizeof *run);
    int step, m;
    run->sched = s;
    run->steps = 1;
    run->fail_rank = -1;
    run->wrong_bytes_rank = -1;
    tm_init_params(&run->params, s->num_stages);
    for (step = 0; step < TM_MAX_STEPS; step++)
        for (m = 0; m < TM_MAX_MB; m++) tm_make_mb(&run->mbs[step][m], rows, 100 * step + m);
    for (m = 0; m < TM_MAX_BATCH * TM_D; m++) {
        run->batch_x[m] = (float)((m * 37) % 101) / 101.0f - 0.5f;
        run->batch_t[m] = (float)((m * 53) % 97) / 97.0f - 0.5f;
    }
    pthread_mutex_init(&run->mu, NULL);
    return run;
}

static void tm_free(tm_run *run)
{
    pthread_mutex_destroy(&run->mu);
    free(run);
}

static pp_status tm_go(tm_run *run, pp_error *err)
{
    return pp_threads_run(run->sched->pp, tm_rank, run, run->status, run->errors, err);
}

static pp_schedule *tm_schedule(pp_schedule_kind kind, int pp, int vpp, int mb)
{
    pp_schedule_config c;
    pp_schedule *s = NULL;
    pp_error err;
    memset(&c, 0, sizeof c);
    c.kind = kind; c.pp = pp; c.vpp = vpp; c.mb = mb;
    if (pp_schedule_build(&c, &s, &err) != PP_OK || pp_schedule_lower(s, &err) != PP_OK) {
        pp_test_fail(__FILE__, __LINE__, "%s pp=%d vpp=%d mb=%d: %s", pp_schedule_kind_name(kind), pp, vpp, mb, err.message);
        pp_schedule_free(s);
        return NULL;
    }
    return s;
}

/* After a run: no rank misused a saved-state slot (two live pairs in one, a backward in another
 * pair's, a slot in forward-only steps or tensor_bytes), every slot is free at the end, and after
 * training steps each rank used exactly pp_schedule_rank_peaks' live peak of slots, which
 * pp_executor_saved_slots announced and stats.saved_slots_used counted. */
static int tm_check_slots(tm_run *run, const char *what)
{
    const pp_schedule *s = run->sched;
    int r, k, ok = 1;
    for (r = 0; r < s->pp; r++) {
        int live = -1;
        pp_error err;
        if (run->slot_bad[r]) {
            pp_test_fail(__FILE__, __LINE__, "%s: rank %d: %d slot misuses, first: %s", what, r, run->slot_bad[r],
                         run->slot_why[r]);
            ok = 0;
        }
        for (k = 0; k < TM_MAX_STAGES * TM_MAX_MB; k++)
            if (run->slot_owner[r][k]) {
                pp_test_fail(__FILE__, __LINE__, "%s: rank %d: slot %d still held at the end", what, r, k);
                ok = 0;
                break;
            }
        if (run->forward_only || run->rank_sched[r]) continue;
        PP_CHECK_OK(pp_schedule_rank_peaks(s, r, NULL, 1, &live, NULL, &err), &err);
        if (run->saved_slots[r] != live || run->slot_max[r] != live || run->stats[r].saved_slots_used != live) {
            pp_test_fail(__FILE__, __LINE__, "%s: rank %d: live peak %d, saved_slots %d, highest slot + 1 %d, "
                         "saved_slots_used %d", what, r, live, run->saved_slots[r], run->slot_max[r],
                         run->stats[r].saved_slots_used);
            ok = 0;
        }
    }
    return ok;
}

/* Runs one step and checks loss on every rank and every stage's gradients against the reference. */
static int tm_check_against_reference(tm_run *run, const char *what)
{
    const pp_schedule *s = run->sched;
    tm_params ref, got;
    pp_error err;
    pp_status st;
    double loss, worst = 0;
    int r, stg, ok = 1;
    memset(&ref, 0, sizeof ref);
    st = tm_go(run, &err);
    if (st != PP_OK) { pp_test_fail(__FILE__, __LINE__, "%s: %s", what, err.message); return 0; }
    loss = tm_reference(&run->params, tm_model_stages(s), run->mbs[0], s->mb, 1.0f / (float)s->mb, &ref, NULL) / s->mb;
    tm_sum_copies(s, &run->grads, &got);
    for (r = 0; r < s->pp; r++)
        if (fabs(run->result[r][0].loss - loss) > 1e-5 * fabs(loss)) {
            pp_test_fail(__FILE__, __LINE__, "%s: rank %d loss %.9g, single stage %.9g", what, r,
                         (double)run->result[r][0].loss, loss);
            ok = 0;
        }
    for (stg = 0; stg < tm_model_stages(s); stg++) {
        double e = tm_rel_err(&got, &ref, stg);
        if (e > worst) worst = e;
    }
    if (!(worst < 1e-5)) {
        pp_test_fail(__FILE__, __LINE__, "%s: gradients differ from single stage, max relative error %g", what, worst);
        ok = 0;
    }
    for (r = 0; r < s->pp; r++)
        if (run->stats[r].peak_slots > run->stats[r].planned_slots) {
            pp_test_fail(__FILE__, __LINE__, "%s: rank %d used %d slots, planned %d", what, r, run->stats[r].peak_slots,
                         run->stats[r].planned_slots);
            ok = 0;
        }
    return tm_check_slots(run, what) && ok;
}

/* The longest any rank but `skip` ran its steps. */
static double tm_max_seconds(const tm_run *run, int skip)
{
    double m = 0;
    int r;
    for (r = 0; r < run->sched->pp; r++) if (r != skip && run->seconds[r] > m) m = run->seconds[r];
    return m;
}

/* --- tests: gradients ------------------------------------------------------------------------ */

/* pp_transfer.buf_free_posts: over schedules of every shape (looped, interleaved, V, split I/W,
 * DualPipeV; 1 and 3 steps), no receive claims a buffer free since a post after a callback last
 * touched it, many receives are free since an earlier post (what lets pipepar_nccl.c's copy
 * engines land them while compute runs), and the gradients are still the single stage's. */
static void receives_name_how_long_their_buffer_has_been_free(void)
{
    static const struct { pp_schedule_kind kind; int pp, vpp, mb; } cfgs[] = {
        { PP_1F1B, 2, 1, 8 }, { PP_1F1B, 4, 1, 8 }, { PP_INTERLEAVED_1F1B, 2, 4, 8 }, { PP_INTERLEAVED_1F1B, 4, 2, 8 },
        { PP_GPIPE, 3, 1, 4 }, { PP_ZBV, 2, 2, 8 }, { PP_ZBV, 4, 2, 8 }, { PP_ZB_H1, 4, 1, 8 },
        { PP_DUALPIPEV, 4, 2, 8 }, { PP_INTERLEAVED_ZB, 2, 2, 8 }, { PP_ZB_H2, 4, 1, 8 }, { PP_DUALPIPE, 4, 2, 8 },
    };
    size_t c;
    long long receives = 0, early = 0;
    for (c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        pp_schedule *s = tm_schedule(cfgs[c].kind, cfgs[c].pp, cfgs[c].vpp, cfgs[c].mb);
        tm_run *run;
        char what[96];
        int r;
        if (!s) continue;
        snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d", pp_schedule_kind_name(cfgs[c].kind), cfgs[c].pp,
                 cfgs[c].vpp, cfgs[c].mb);
        run = tm_new(s, 2);   /* one step against the reference, through the watch */
        run->watch = 1;
        tm_check_against_reference(run, what);
        tm_free(run);
        run = tm_new(s, 2);   /* three steps: buffers freed in one step are received into in the next */
        run->watch = 1;
        run->steps = 3;
        {
            pp_error err;
            PP_CHECK_OK(tm_go(run, &err), &err);
        }
        for (r = 0; r < s->pp; r++) {
            tm_watch *w = &run->watches[r];
            PP_CHECK_MSG(w->violations == 0, "%s rank %d: %lld receives claim too much: %s", what, r, w->violations,
                         w->first_violation);
            receives += w->receives;
            early += w->early;
        }
        tm_free(run);
        pp_schedule_free(s);
    }
    PP_CHECK_MSG(receives > 0 && early * 2 > receives, "%lld of %lld receives free since an earlier post", early, receives);
}

/* The watch's view of a run with parts: no wrong mark, every send with parts and its marks, only
 * sent outputs' marks at the transport, none left over. Returns the sends seen. */
static long long tm_check_parts(tm_run *run, const char *what)
{
    long long sends = 0;
    int r;
    PP_CHECK_MSG(run->parts_failed == 0, "%s: %d calls refused", what, run->parts_failed);
    for (r = 0; r < run->sched->pp; r++) {
        tm_watch *w = &run->watches[r];
        PP_CHECK_MSG(w->part_errors == 0, "%s rank %d: %lld wrong: %s", what, r, w->part_errors, w->first_part_error);
        PP_CHECK_MSG(w->plain_sends == 0 && w->parted_sends == w->sends, "%s rank %d: %lld of %lld sends without parts",
                     what, r, w->plain_sends, w->sends);
        PP_CHECK_MSG(w->said_calls == run->parts * w->parted_sends, "%s rank %d: %lld marks reached the transport for "
                     "%lld sends of %d parts", what, r, w->said_calls, w->parted_sends, run->parts);
        PP_CHECK_MSG(w->nsaid == 0, "%s rank %d: marks of %d buffers never sent", what, r, w->nsaid);
        sends += w->sends;
    }
    return sends;
}

/* pp_executor_output_ready: callbacks that say their output written in 3 steps (and in 1) over
 * schedules of every shape, DualPipeV's and DualPipe's overlapped FB callbacks among them (two
 * routes: both ends' outputs). Every send carries parts = 1 and the marks of its very buffer,
 * first = 1 on the first, the last the whole size; the marks of outputs that stay on the rank
 * (the last stage's, a V's turn) never reach the transport; none is left over; the gradients are
 * the single stage's. The same in forward-only steps, with a round's transfers in one group
 * (independent_peers 0), and with a recipe whose steps change their microbatch count. A
 * transport without output_ready takes the same calls and sends as before. */
static void outputs_said_in_parts_reach_their_sends(void)
{
    static const struct { pp_schedule_kind kind; int pp, vpp, mb, fb; } cfgs[] = {
        { PP_1F1B, 2, 1, 8, 0 }, { PP_1F1B, 4, 1, 8, 0 }, { PP_INTERLEAVED_1F1B, 4, 2, 8, 0 }, { PP_ZBV, 4, 2, 8, 0 },
        { PP_ZB_H1, 3, 1, 6, 0 }, { PP_GPIPE, 3, 1, 4, 0 }, { PP_DUALPIPEV, 4, 2, 8, 1 }, { PP_DUALPIPE, 4, 2, 8, 1 },
    };
    size_t c;
    int parts, watch;
    long long sends = 0;
    for (c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        pp_schedule *s = tm_schedule(cfgs[c].kind, cfgs[c].pp, cfgs[c].vpp, cfgs[c].mb);
        tm_run *run;
        char what[112];
        pp_error err;
        if (!s) continue;
        snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d, 3 parts, forward only", pp_schedule_kind_name(cfgs[c].kind),
                 cfgs[c].pp, cfgs[c].vpp, cfgs[c].mb);
        run = tm_new(s, 2);
        run->watch = 1;
        run->parts = 3;
        run->forward_only = 1;
        PP_CHECK_OK(tm_go(run, &err), &err);
        sends += tm_check_parts(run, what);
        tm_free(run);
        if (cfgs[c].pp >= 3) {
            snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d, 3 parts, independent_peers 0",
                     pp_schedule_kind_name(cfgs[c].kind), cfgs[c].pp, cfgs[c].vpp, cfgs[c].mb);
            run = tm_new(s, 2);
            run->watch = 1;
            run->parts = 3;
            run->mixed_peers = 1;
            run->use_fb_callback = cfgs[c].fb;
            tm_check_against_reference(run, what);
            sends += tm_check_parts(run, what);
            tm_free(run);
        }
        pp_schedule_free(s);
    }
    {   /* a recipe: 1F1B on 3 ranks, steps of 6, 2 and 5 microbatches */
        pp_schedule *s = tm_schedule(PP_1F1B, 3, 1, 6);
        tm_run *run = s ? tm_new(s, 2) : NULL;
        pp_error err;
        if (run) {
            run->watch = 1;
            run->parts = 3;
            run->recipe.kind = PP_1F1B;
            run->recipe.pp = 3;
            run->max_mb = 6;
            run->steps = 3;
            run->step_mb[0] = 6; run->step_mb[1] = 2; run->step_mb[2] = 5;
            PP_CHECK_OK(tm_go(run, &err), &err);
            sends += tm_check_parts(run, "1F1B pp=3 recipe, steps of 6, 2, 5 microbatches, 3 parts");
            tm_free(run);
        }
        pp_schedule_free(s);
    }
    for (c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
        for (parts = 1; parts <= 3; parts += 2)
            for (watch = 0; watch < 2; watch++) {
                pp_schedule *s = tm_schedule(cfgs[c].kind, cfgs[c].pp, cfgs[c].vpp, cfgs[c].mb);
                tm_run *run;
                char what[112];
                if (!s) continue;
                snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d, %d parts%s", pp_schedule_kind_name(cfgs[c].kind),
                         cfgs[c].pp, cfgs[c].vpp, cfgs[c].mb, parts, watch ? "" : ", no output_ready");
                run = tm_new(s, 2);
                run->watch = watch;
                run->parts = parts;
                run->use_fb_callback = cfgs[c].fb;
                tm_check_against_reference(run, what);
                if (watch) sends += tm_check_parts(run, what);
                else PP_CHECK_MSG(run->parts_failed == 0, "%s: %d calls refused", what, run->parts_failed);
                tm_free(run);
                pp_schedule_free(s);
            }
    PP_CHECK_MSG(sends > 100, "%lld sends checked", sends);
}

/* pp_executor_output_ready refuses, naming the rule: no executor, a pointer that is not the
 * running callback's output, 0 bytes, more than the output, bytes that do not grow, a 65th call
 * for one output, a call outside any callback. The right calls among them pass, and the step
 * still gives the single stage's gradients. */
static void output_ready_refuses_misuse(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 2, 1, 4);
    tm_run *run;
    pp_error err;
    float x[4];
    static const char *const says[8] = { "ex must not be NULL", "is not an output of the running callback", "bytes=0",
                                         "must be from 1 to the output's 128 bytes", "", "must exceed the previous",
                                         "", "PP_MAX_OUTPUT_PARTS" };
    int k;
    if (!s) return;
    run = tm_new(s, 8);   /* 8 rows of 4 floats: 128 bytes an output */
    run->misuse = 1;
    run->keep = 1;
    tm_check_against_reference(run, "1F1B pp=2, wrong calls in a forward");
    for (k = 0; k < 8; k++) {
        int right = k == 4 || k == 6;
        PP_CHECK_MSG(run->misuse_status[k] == (right ? PP_OK : PP_EINVAL), "call %d returned %s", k,
                     pp_status_name(run->misuse_status[k]));
        if (k > 0 && !right)
            PP_CHECK_MSG(strstr(run->misuse_message[k], says[k]) != NULL, "call %d says: %s", k, run->misuse_message[k]);
    }
    PP_CHECK(pp_executor_output_ready(run->ex[0], x, 1, &err) == PP_EINVAL);
    PP_CHECK_MSG(strstr(err.message, "called outside a forward") != NULL, "%s", err.message);
    for (k = 0; k < 2; k++) pp_executor_free(run->ex[k]);
    tm_free(run);
    pp_schedule_free(s);
}

/* pp_transport.independent_peers (the threads transport has it): the executor posts each round's
 * transfers as one group per peer and waits only for the group that brings a compute's input (and
 * that peer's earlier ones), so at pp >= 3 a rank's receive from one neighbour no longer waits
 * behind its transfers with the other. Over schedules of pp 3 and 4 (no test(): nothing given
 * back by timing, so the pool is as tight as it gets), every posted group has one peer, every
 * wait for another peer's group than a compute's input is for one that sends (the pool giving
 * a buffer back, pp__acquire), there are fewer of those than in order, and the gradients are the
 * single stage's. Told independent_peers = 0, the same runs post a round's transfers with both
 * neighbours in one group and wait for them in order. Every rank plans as many slots either way
 * and uses no more; in order with test() the gradients hold too. */
static void independent_peers_wait_only_for_the_input_s_peer(void)
{
    static const struct { pp_schedule_kind kind; int pp, vpp, mb; } cfgs[] = {
        { PP_1F1B, 3, 1, 6 }, { PP_1F1B, 4, 1, 8 }, { PP_INTERLEAVED_1F1B, 4, 2, 8 }, { PP_ZBV, 4, 2, 8 },
        { PP_ZB_H1, 3, 1, 6 }, { PP_GPIPE, 3, 1, 4 },
    };
    size_t c;
    int mixed, planned[2][8][4];
    long long foreign_mixed = 0, foreign_peer = 0, waits = 0;
    for (mixed = 0; mixed < 3; mixed++)
        for (c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
            pp_schedule *s = tm_schedule(cfgs[c].kind, cfgs[c].pp, cfgs[c].vpp, cfgs[c].mb);
            tm_run *run;
            char what[112];
            int r;
            if (!s) continue;
            snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d%s", pp_schedule_kind_name(cfgs[c].kind), cfgs[c].pp,
                     cfgs[c].vpp, cfgs[c].mb, mixed == 1 ? ", independent_peers 0" : mixed ? ", in order, test()" : "");
            run = tm_new(s, 2);
            run->watch = 1;
            run->no_test = mixed < 2;   /* every group waited for by the program, none reclaimed by timing */
            run->mixed_peers = mixed > 0;
            tm_check_against_reference(run, what);
            for (r = 0; r < s->pp; r++) {
                tm_watch *w = &run->watches[r];
                PP_CHECK_MSG(run->stats[r].slots <= run->stats[r].planned_slots, "%s rank %d: %d slots, %d planned",
                             what, r, run->stats[r].slots, run->stats[r].planned_slots);
                if (mixed == 2) continue;
                planned[mixed][c][r] = run->stats[r].planned_slots;
                waits += w->waits;
                if (mixed) { foreign_mixed += w->foreign; continue; }
                foreign_peer += w->foreign;
                PP_CHECK_MSG(w->mixed_posts == 0, "%s rank %d: %lld groups with two peers", what, r, w->mixed_posts);
                PP_CHECK_MSG(w->foreign_recv == 0, "%s rank %d: %lld waits for another peer's group that sends "
                             "nothing: %s", what, r, w->foreign_recv, w->first_foreign);
            }
            for (r = 0; mixed == 1 && r < s->pp; r++)
                PP_CHECK_MSG(planned[0][c][r] == planned[1][c][r], "%s rank %d: %d slots planned per peer, %d in order",
                             what, r, planned[0][c][r], planned[1][c][r]);
            tm_free(run);
            pp_schedule_free(s);
        }
    PP_CHECK_MSG(waits > 0 && foreign_peer < foreign_mixed, "waits for another peer's group: %lld per peer, %lld in "
                 "order (of %lld waits)", foreign_peer, foreign_mixed, waits);
}

/* Every kind pp_schedule_build knows (the zero-bubble family included: I, W and FB actions) on a
 * grid of (pp, vpp, mb); combinations a kind refuses (e.g. vpp != 2 for V-shaped kinds) are
 * skipped, but every kind must run on some of them. */
static void every_schedule_kind_gives_single_stage_loss_and_gradients(void)
{
    static const int pps[] = { 1, 2, 3, 4 }, mbs[] = { 1, 3, 4, 8 };
    size_t a, c;
    int kind, vpp, configs = 0;
    for (kind = PP_KIND_NONE + 1; kind < PP_CUSTOM; kind++) {
        int runs = 0;
        for (a = 0; a < sizeof pps / sizeof pps[0]; a++)
            for (vpp = 1; vpp <= 3; vpp++)
                for (c = 0; c < sizeof mbs / sizeof mbs[0]; c++) {
                    char what[96];
                    pp_schedule_config cfg;
                    pp_schedule *s = NULL;
                    pp_error err;
                    tm_run *run;
                    memset(&cfg, 0, sizeof cfg);
                    cfg.kind = (pp_schedule_kind)kind; cfg.pp = pps[a]; cfg.vpp = vpp; cfg.mb = mbs[c];
                    if (pp_schedule_build(&cfg, &s, &err) != PP_OK) continue;   /* a combination the kind refuses */
                    snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d", pp_schedule_kind_name(cfg.kind), pps[a], vpp,
                             mbs[c]);
                    if (pp_schedule_lower(s, &err) != PP_OK) {
                        pp_test_fail(__FILE__, __LINE__, "%s: %s", what, err.message);
                        pp_schedule_free(s);
                        continue;
                    }
                    run = tm_new(s, 1 + (configs % 3));
                    tm_check_against_reference(run, what);
                    tm_free(run);
                    pp_schedule_free(s);
                    configs++;
                    runs++;
                }
        PP_CHECK_MSG(runs > 0, "kind %s: no (pp, vpp, mb) of the grid could be built",
                     pp_schedule_kind_name((pp_schedule_kind)kind));
    }
    PP_CHECK(configs >= 100);
}

/* A zero-bubble-style program made by hand: every B split into I then W, and the W's of each
 * rank deferred to the end of its program (ZB-H2's trick of filling the drain with W). */
static pp_schedule *tm_split_schedule(pp_schedule_kind kind, int pp, int vpp, int mb, int defer_w)
{
    pp_schedule *base = tm_schedule(kind, pp, vpp, mb), *s = NULL;
    pp_error err;
    int r, i;
    if (!base) return NULL;
    PP_CHECK_OK(pp_schedule_create(pp, vpp, mb, base->placement, &s, &err), &err);
    for (r = 0; r < pp && s; r++) {
        for (i = 0; i < base->length[r]; i++) {
            pp_action a = base->actions[r][i];
            if (a.op >= PP_OP_SEND_F) continue;
            if (a.op == PP_OP_B) {
                a.op = PP_OP_I;
                pp_schedule_append(s, r, a, &err);
                if (!defer_w) { a.op = PP_OP_W; pp_schedule_append(s, r, a, &err); }
            } else {
                pp_schedule_append(s, r, a, &err);
            }
        }
        if (defer_w)
            for (i = 0; i < base->length[r]; i++) {
                pp_action a = base->actions[r][i];
                if (a.op != PP_OP_B) continue;
                a.op = PP_OP_W;
                pp_schedule_append(s, r, a, &err);
            }
    }
    pp_schedule_free(base);
    if (s) PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    return s;
}

static void split_backward_i_then_w_gives_single_stage_gradients(void)
{
    int defer, pp, configs = 0;
    for (defer = 0; defer <= 1; defer++)
        for (pp = 1; pp <= 4; pp++) {
            pp_schedule *s1 = tm_split_schedule(PP_1F1B, pp, 1, 6, defer);
            pp_schedule *s2 = tm_split_schedule(PP_INTERLEAVED_1F1B, pp, 2, 4, defer);
            pp_schedule *v[2];
            int k;
            v[0] = s1; v[1] = s2;
            for (k = 0; k < 2; k++) {
                tm_run *run;
                char what[64];
                if (!v[k]) continue;
                snprintf(what, sizeof what, "split %s pp=%d defer_w=%d", k ? "interleaved" : "1f1b", pp, defer);
                run = tm_new(v[k], 2);
                tm_check_against_reference(run, what);
                tm_free(run);
                configs++;
            }
            pp_schedule_free(s1);
            pp_schedule_free(s2);
        }
    PP_CHECK_INT(configs, 16);
}

/* Neighbouring F and B of different microbatches in the last rank's 1F1B program are independent:
 * fuse each such pair into one FB action (what DualPipe overlaps). (Fusing on every rank would
 * make each rank's FB wait for the other's: a cycle the lowering pass reports.) */
static pp_schedule *tm_fb_schedule(int pp, int mb)
{
    pp_schedule *base = tm_schedule(PP_1F1B, pp, 1, mb), *s = NULL;
    pp_error err;
    int r, i;
    if (!base) return NULL;
    pp_schedule_strip_comm(base);
    PP_CHECK_OK(pp_schedule_create(pp, 1, mb, PP_PLACEMENT_LOOPED, &s, &err), &err);
    for (r = 0; r < pp; r++)
        for (i = 0; i < base->length[r]; i++) {
            pp_action a = base->actions[r][i], b;
            if (r == pp - 1 && i + 1 < base->length[r]) {
                b = base->actions[r][i + 1];
                if (a.op != b.op && (a.op == PP_OP_F || a.op == PP_OP_B) && (b.op == PP_OP_F || b.op == PP_OP_B) &&
                    a.mb != b.mb) {
                    pp_action f = a.op == PP_OP_F ? a : b, bw = a.op == PP_OP_B ? a : b;
                    a = f;
                    a.op = PP_OP_FB;
                    a.stage2 = bw.stage;
                    a.mb2 = bw.mb;
                    i++;
                }
            }
            pp_schedule_append(s, r, a, &err);
        }
    pp_schedule_free(base);
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
    return s;
}

/* The orders pp_search picks (the greedy schedules among them) for stages of unequal cost, and
 * greedy schedules at several caps: the executor runs them to the single-stage gradients. */
static void searched_and_greedy_schedules_give_single_stage_gradients(void)
{
    static const double costs4[4] = { 1, 3, 1, 3 }, costs6[6] = { 2, 1, 1, 1, 1, 2 }, costs8[8] = { 1, 2, 3, 2, 2, 3, 2, 1 };
    static const int pps[] = { 2, 3, 4 }, mbs[] = { 4, 6, 8 };
    int k, runs = 0;
    for (k = 0; k < 3; k++) {
        const double *c = k == 0 ? costs4 : k == 1 ? costs6 : costs8;
        pp_search_config cfg;
        pp_search_result *res = NULL;
        pp_error err;
        char what[160];
        memset(&cfg, 0, sizeof cfg);
        cfg.pp = pps[k]; cfg.mb = mbs[k]; cfg.vpp = 2;
        cfg.costs.f_stage = c; cfg.costs.i_stage = c; cfg.costs.w_stage = c; cfg.costs.memory_stage = c;
        PP_CHECK_OK(pp_search(&cfg, &res, &err), &err);
        if (res && res->best) {
            tm_run *run = tm_new(res->best, 2);
            snprintf(what, sizeof what, "search pp=%d mb=%d: %s", pps[k], mbs[k], res->entries[0].name);
            tm_check_against_reference(run, what);
            tm_free(run);
            runs++;
        }
        pp_search_result_free(res);
    }
    for (k = 0; k < 3; k++) {
        int pl, cap;
        for (pl = 0; pl < 2; pl++)
            for (cap = 2; cap <= 2 * pps[k] * 2; cap += pps[k]) {
                pp_greedy_config g;
                pp_schedule *s = NULL;
                pp_sim_costs c;
                pp_error err;
                char what[96];
                memset(&c, 0, sizeof c);
                c.f_stage = k == 0 ? costs4 : k == 1 ? costs6 : costs8; c.i_stage = c.f_stage; c.w_stage = c.f_stage;
                memset(&g, 0, sizeof g);
                g.pp = pps[k]; g.mb = mbs[k]; g.vpp = 2; g.placement = pl ? PP_PLACEMENT_V : PP_PLACEMENT_LOOPED;
                g.max_live = cap; g.costs = &c; g.flags = (unsigned)(cap * 7 + pl) % PP_GREEDY_FLAG_LIMIT;
                if (pp_schedule_build_greedy(&g, &s, &err) != PP_OK || pp_schedule_lower(s, &err) != PP_OK) {
                    pp_test_fail(__FILE__, __LINE__, "greedy pp=%d %s cap %d: %s", pps[k], pl ? "V" : "looped", cap,
                                 err.message);
                    pp_schedule_free(s);
                    continue;
                }
                snprintf(what, sizeof what, "greedy pp=%d mb=%d %s cap %d flags %u", pps[k], mbs[k], pl ? "V" : "looped",
                         cap, g.flags);
                {
                    tm_run *run = tm_new(s, 1);
                    tm_check_against_reference(run, what);
                    tm_free(run);
                }
                pp_schedule_free(s);
                runs++;
            }
    }
    PP_CHECK(runs >= 10);
}

static void overlapped_fb_actions_give_single_stage_gradients(void)
{
    int pp, cb;
    for (pp = 1; pp <= 4; pp++)
        for (cb = 0; cb <= 1; cb++) {
            pp_schedule *s = tm_fb_schedule(pp, 6);
            tm_run *run;
            char what[64];
            int r, n = 0, calls = 0;
            if (!s) continue;
            snprintf(what, sizeof what, "FB pp=%d forward_backward callback=%d", pp, cb);
            run = tm_new(s, 2);
            run->use_fb_callback = cb;
            tm_check_against_reference(run, what);
            for (r = 0; r < pp; r++) {
                int i;
                for (i = 0; i < s->length[r]; i++) n += s->actions[r][i].op == PP_OP_FB;
                calls += run->fb_calls[r];
            }
            PP_CHECK(n > 0);
            PP_CHECK_INT(calls, cb ? n : 0);
            tm_free(run);
            pp_schedule_free(s);
        }
}

/* DualPipeV with its FBs split (pp_schedule_split_overlaps), as a caller with no forward_backward
 * callback runs it: the same gradients, with no FB left to call. */
static void split_dualpipev_gives_single_stage_gradients(void)
{
    int pp, extra;
    for (pp = 2; pp <= 4; pp++)
        for (extra = 0; extra <= 4; extra += 2) {
            {
                pp_schedule *s = tm_schedule(PP_DUALPIPEV, pp, 2, 2 * pp + extra);
                pp_error err;
                tm_run *run;
                char what[64];
                int r;
                if (!s) continue;
                PP_CHECK_OK(pp_schedule_split_overlaps(s, &err), &err);
                PP_CHECK_INT(pp_test_count_op(s, PP_OP_FB), 0);
                snprintf(what, sizeof what, "split dualpipev pp=%d mb=%d", pp, 2 * pp + extra);
                run = tm_new(s, 2);
                run->use_fb_callback = 1;   /* offered, never called: no FB is left */
                tm_check_against_reference(run, what);
                for (r = 0; r < pp; r++) PP_CHECK_INT(run->fb_calls[r], 0);
                tm_free(run);
                pp_schedule_free(s);
            }
        }
}

/* Each B split into I then W (pp_schedule_split_backward): the gradients equal the single stage's
 * exactly as the whole B's did, for GPipe, 1F1B and interleaved 1F1B (vpp 2 and 4) over the
 * threads transport; no B is left, so only the two halves are called. */
static void split_backward_gives_single_stage_gradients(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_INTERLEAVED_1F1B };
    static const int vpps[] = { 1, 1, 2, 4 };
    int pp, k;
    for (k = 0; k < 4; k++)
        for (pp = 2; pp <= 4; pp++) {
            pp_schedule *s = tm_schedule(kinds[k], pp, vpps[k], 2 * pp);
            pp_error err;
            tm_run *run;
            char what[80];
            if (!s) continue;
            PP_CHECK_OK(pp_schedule_split_backward(s, &err), &err);
            PP_CHECK_INT(pp_test_count_op(s, PP_OP_B), 0);
            PP_CHECK(pp_test_count_op(s, PP_OP_I) == pp_test_count_op(s, PP_OP_W) && pp_test_count_op(s, PP_OP_I) > 0);
            snprintf(what, sizeof what, "%s pp=%d vpp=%d, B as I then W", pp_schedule_kind_name(kinds[k]), pp, vpps[k]);
            run = tm_new(s, 2);
            tm_check_against_reference(run, what);
            tm_free(run);
            pp_schedule_free(s);
        }
}

/* V placement: rank pp-1 holds stages pp-1 and pp, which pass tensors in place. */
static pp_schedule *tm_v_schedule(int pp, int mb)
{
    pp_schedule *s = NULL;
    pp_error err;
    int r, m;
    PP_CHECK_OK(pp_schedule_create(pp, 2, mb, PP_PLACEMENT_V, &s, &err), &err);
    for (r = 0; r < pp; r++) {
        pp_action a;
        a.stage2 = a.mb2 = -1;
        for (m = 0; m < mb; m++) { a.op = PP_OP_F; a.stage = r; a.mb = m; pp_schedule_append(s, r, a, &err); }
        for (m = 0; m < mb; m++) { a.op = PP_OP_F; a.stage = 2 * pp - 1 - r; a.mb = m; pp_schedule_append(s, r, a, &err); }
        for (m = 0; m < mb; m++) { a.op = PP_OP_B; a.stage = 2 * pp - 1 - r; a.mb = m; pp_schedule_append(s, r, a, &err); }
        for (m = 0; m < mb; m++) { a.op = PP_OP_B; a.stage = r; a.mb = m; pp_schedule_append(s, r, a, &err); }
    }
    PP_CHECK_OK(pp_schedule_lower(s, &err), &err);
    return s;
}

static void same_rank_neighbours_pass_tensors_in_place(void)
{
    int pp;
    for (pp = 1; pp <= 3; pp++) {
        pp_schedule *s = tm_v_schedule(pp, 3);
        tm_run *run = tm_new(s, 2);
        int m;
        tm_check_against_reference(run, "V placement");
        for (m = 0; m < 3; m++) {
            /* F(pp-1)'s output buffer is F(pp)'s input; B(pp)'s input-gradient is B(pp-1)'s output-gradient */
            PP_CHECK(run->f_out_ptr[pp - 1][m] == run->f_in_ptr[pp][m]);
            PP_CHECK(run->b_gin_ptr[pp][m] == run->b_gout_ptr[pp - 1][m]);
            PP_CHECK(run->b_gin_ptr[0][m] == NULL);   /* stage 0 computes no input-gradient */
        }
        tm_free(run);
        pp_schedule_free(s);
    }
}

static void pp_1_runs_through_the_same_calls(void)
{
    pp_schedule *s = tm_schedule(PP_INTERLEAVED_1F1B, 1, 3, 4);
    tm_run *run = tm_new(s, 3);
    tm_check_against_reference(run, "pp=1 vpp=3");
    PP_CHECK_INT(run->stats[0].transfers, 0);
    tm_free(run);
    pp_schedule_free(s);
}

/* --- tests: around a step ------------------------------------------------------------------ */

static void loss_and_metrics_reach_every_rank(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 4, 1, 5);
    tm_run *run = tm_new(s, 2);
    pp_error err;
    int r;
    run->num_metrics = 2;
    PP_CHECK_OK(tm_go(run, &err), &err);
    for (r = 0; r < 4; r++) {
        PP_CHECK_NEAR(run->result[r][0].loss, run->result[3][0].loss, 0);
        PP_CHECK(run->result[r][0].loss > 0);
        PP_CHECK_NEAR(run->result[r][0].weight, 5, 0);        /* weight 1 per microbatch */
        PP_CHECK_NEAR(run->result[r][0].metrics[0], 10, 0);   /* 2 rows in each of 5 microbatches */
        PP_CHECK_NEAR(run->result[r][0].metrics[1], 5, 0);
    }
    tm_free(run);
    pp_schedule_free(s);
}

/* DualPipe: each model stage j runs on two ranks (stage j going down, stage pp+j going up) from
 * the same weights; the sum of the two copies' gradients is the single-stage gradient, with the
 * overlapped forward_backward callback too (F of one direction next to B of the other). Forward
 * only: ranks pp-1 (down) and 0 (up) each hand back their own microbatches' outputs. */
static void dualpipe_sums_both_weight_copies_to_the_single_stage_gradients(void)
{
    static const int cfgs[][2] = { { 2, 2 }, { 2, 6 }, { 4, 4 }, { 4, 8 }, { 4, 10 }, { 6, 12 } };
    size_t k;
    for (k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        int pp = cfgs[k][0], mb = cfgs[k][1], r, m, fb = 0;
        pp_schedule *s = tm_schedule(PP_DUALPIPE, pp, 2, mb);
        tm_run *run;
        char what[64];
        float ref[TM_MAX_MB][TM_MAX_ROWS * TM_D];
        pp_error err;
        double loss;
        if (!s) continue;
        snprintf(what, sizeof what, "dualpipe pp=%d mb=%d", pp, mb);
        run = tm_new(s, 2);
        run->use_fb_callback = 1;
        tm_check_against_reference(run, what);
        for (r = 0; r < pp; r++) fb += run->fb_calls[r];
        /* below mb = 2*pp the dropped microbatches can take every FB's partner with them */
        if (mb >= 2 * pp) PP_CHECK_MSG(fb > 0, "%s: no overlapped forward_backward call", what);
        tm_free(run);
        run = tm_new(s, 2);
        run->forward_only = 1;
        PP_CHECK_OK(tm_go(run, &err), &err);
        loss = tm_reference(&run->params, pp, run->mbs[0], mb, 1.0f, NULL, ref) / mb;
        for (r = 0; r < pp; r++) {
            PP_CHECK_NEAR(run->result[r][0].loss, loss, 1e-5 * loss);
            PP_CHECK_INT(run->result[r][0].num_outputs, r == 0 || r == pp - 1 ? mb : 0);
        }
        /* each microbatch's output came back once, on one of the two ends, equal to what loss saw */
        PP_CHECK_INT(run->outputs_seen, mb);
        for (m = 0; m < mb; m++) PP_CHECK(memcmp(run->outputs[m], ref[m], 2 * TM_D * sizeof(float)) == 0);
        tm_free(run);
        pp_schedule_free(s);
    }
}

static void forward_only_outputs_equal_single_stage_outputs_in_microbatch_order(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_LOOPED_BFS };
    size_t k;
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int vpp = (kinds[k] == PP_GPIPE || kinds[k] == PP_1F1B) ? 1 : 2, r, m, last;
        pp_schedule *s = tm_schedule(kinds[k], 3, vpp, 6);
        tm_run *run = tm_new(s, 3);
        float ref[TM_MAX_MB][TM_MAX_ROWS * TM_D];
        tm_params zero;
        pp_error err;
        double loss;
        run->forward_only = 1;
        PP_CHECK_OK(tm_go(run, &err), &err);
        loss = tm_reference(&run->params, s->num_stages, run->mbs[0], 6, 1.0f, NULL, ref) / 6;
        last = pp_stage_rank(s, s->num_stages - 1);
        for (r = 0; r < 3; r++) {
            PP_CHECK_NEAR(run->result[r][0].loss, loss, 1e-5 * loss);
            PP_CHECK_INT(run->result[r][0].num_outputs, r == last ? 6 : 0);
        }
        PP_CHECK_INT(run->outputs_seen, 6);
        for (m = 0; m < 6; m++) PP_CHECK(memcmp(run->outputs[m], ref[m], 3 * TM_D * sizeof(float)) == 0);
        /* no backward ran: no gradient */
        memset(&zero, 0, sizeof zero);
        PP_CHECK(memcmp(&run->grads, &zero, sizeof zero) == 0);
        tm_free(run);
        pp_schedule_free(s);
    }
}

/* 13 rows over 4 microbatches: ceil(13/4) = 4 rows each, so the last microbatch holds 1 real row
 * and 3 rows of padding. The step must give the loss and gradients of the 13 real rows alone. */
static void padded_batch_gives_the_loss_and_gradients_of_its_real_rows(void)
{
    pp_schedule *s = tm_schedule(PP_INTERLEAVED_1F1B, 2, 2, 4);
    tm_run *run = tm_new(s, 4);
    tm_params ref;
    tm_mb real[2];
    pp_error err;
    double loss;
    int r, stg;
    run->batch_rows = 13;
    PP_CHECK_OK(tm_go(run, &err), &err);
    /* the reference: the same 13 rows (batch_x) in two plain microbatches of 8 and 5, no padding */
    memset(&ref, 0, sizeof ref);
    memset(real, 0, sizeof real);
    real[0].rows = 8; real[1].rows = 5;
    memcpy(real[0].x, run->batch_x, 8 * TM_D * sizeof(float));
    memcpy(real[0].t, run->batch_t, 8 * TM_D * sizeof(float));
    memcpy(real[1].x, run->batch_x + 8 * TM_D, 5 * TM_D * sizeof(float));
    memcpy(real[1].t, run->batch_t + 8 * TM_D, 5 * TM_D * sizeof(float));
    loss = tm_reference(&run->params, s->num_stages, real, 2, 1.0f / 13, &ref, NULL) / 13;
    for (r = 0; r < 2; r++) {
        PP_CHECK_NEAR(run->result[r][0].loss, loss, 1e-5 * loss);
        PP_CHECK_NEAR(run->result[r][0].weight, 13, 0);   /* valid rows 4 + 4 + 4 + 1 */
    }
    for (stg = 0; stg < s->num_stages; stg++) PP_CHECK(tm_rel_err(&run->grads, &ref, stg) < 1e-5);
    tm_free(run);
    pp_schedule_free(s);
}

static void shapes_may_change_between_steps_and_microbatches(void)
{
    pp_schedule *s = tm_schedule(PP_INTERLEAVED_1F1B, 2, 2, 4);
    tm_run *run = tm_new(s, 1);
    tm_params ref;
    pp_error err;
    int step, m, r, stg;
    run->steps = 3;
    for (step = 0; step < 3; step++)
        for (m = 0; m < 4; m++) tm_make_mb(&run->mbs[step][m], 1 + (step * 3 + m * 5) % TM_MAX_ROWS, 10 * step + m);
    PP_CHECK_OK(tm_go(run, &err), &err);
    memset(&ref, 0, sizeof ref);
    for (step = 0; step < 3; step++) {
        double loss = tm_reference(&run->params, s->num_stages, run->mbs[step], 4, 0.25f, &ref, NULL) / 4;
        for (r = 0; r < 2; r++) PP_CHECK_NEAR(run->result[r][step].loss, loss, 1e-5 * loss);
    }
    /* gradients add up over the three steps (the test never steps the optimizer) */
    for (stg = 0; stg < s->num_stages; stg++) PP_CHECK(tm_rel_err(&run->grads, &ref, stg) < 1e-5);
    tm_free(run);
    pp_schedule_free(s);
}

static void the_pool_stays_within_the_planned_slots_and_a_steady_step_allocates_nothing(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 4, 1, 8);
    long long alloc1[4];
    int r, steps;
    for (steps = 1; steps <= 3; steps += 2) {
        tm_run *run = tm_new(s, 3);
        pp_error err;
        run->steps = steps;
        PP_CHECK_OK(tm_go(run, &err), &err);
        for (r = 0; r < 4; r++) {
            PP_CHECK(run->stats[r].peak_slots <= run->stats[r].planned_slots);
            /* 1F1B keeps at most pp - r microbatches' inputs on rank r, plus a few tensors in
             * transit (a send, a received gradient, the gradient being made) */
            PP_CHECK(run->stats[r].peak_slots <= (4 - r) + 3);
            PP_CHECK_INT(run->stats[r].slots, run->stats[r].allocations);
            if (steps == 1) alloc1[r] = run->stats[r].allocations;
            else PP_CHECK_INT(run->stats[r].allocations, alloc1[r]);
        }
        tm_free(run);
    }
    pp_schedule_free(s);
}

/* --- tests: saved-state slots, chunk_done, the unsplit backward ----------------------------- */

/* A copy of s split as variant says (0: as built, 1: pp_schedule_split_backward, 2:
 * pp_schedule_split_overlaps) and lowered; NULL when the split changes nothing (no B, no FB). */
static pp_schedule *tm_variant(const pp_schedule *s, int variant)
{
    pp_schedule *c = NULL;
    pp_error err;
    if (variant == 1 && pp_test_count_op(s, PP_OP_B) == 0) return NULL;
    if (variant == 2 && pp_test_count_op(s, PP_OP_FB) == 0) return NULL;
    PP_CHECK_OK(pp_schedule_copy(s, &c, &err), &err);
    if (c && variant == 1) PP_CHECK_OK(pp_schedule_split_backward(c, &err), &err);
    if (c && variant == 2) PP_CHECK_OK(pp_schedule_split_overlaps(c, &err), &err);
    if (c) PP_CHECK_OK(pp_schedule_lower(c, &err), &err);
    return c;
}

/* pp_mb_info.slot, for every kind at several (pp, vpp, mb), as built and with its B split into
 * I + W or its FB into F then B, and for hand-made programs whose W's wait for the end: no two
 * live (stage, microbatch) pairs of a rank share a slot, each backward half gets its forward's
 * slot, and each rank uses exactly pp_schedule_rank_peaks' live peak of slots (its highest slot
 * is peak - 1: a forward takes the lowest free slot), which pp_executor_saved_slots announced
 * (tm_check_slots). Two steps in a row free and reuse them. */
static void saved_state_slots_are_never_shared_and_number_the_live_peak(void)
{
    static const int pps[] = { 2, 3, 4 }, mbs[] = { 3, 8 };
    int kind, vpp, variant, runs = 0, split_runs = 0;
    size_t a, c;
    for (kind = PP_KIND_NONE + 1; kind < PP_CUSTOM; kind++) {
        int kind_runs = 0;
        for (a = 0; a < sizeof pps / sizeof pps[0]; a++)
            for (vpp = 1; vpp <= 2; vpp++)
                for (c = 0; c < sizeof mbs / sizeof mbs[0]; c++) {
                    pp_schedule_config cfg;
                    pp_schedule *s = NULL;
                    pp_error err;
                    memset(&cfg, 0, sizeof cfg);
                    cfg.kind = (pp_schedule_kind)kind; cfg.pp = pps[a]; cfg.vpp = vpp; cfg.mb = mbs[c];
                    if (pp_schedule_build(&cfg, &s, &err) != PP_OK) continue;   /* a combination the kind refuses */
                    for (variant = 0; variant < 3; variant++) {
                        pp_schedule *v = tm_variant(s, variant);
                        tm_run *run;
                        char what[96];
                        if (!v) continue;
                        snprintf(what, sizeof what, "%s pp=%d vpp=%d mb=%d%s", pp_schedule_kind_name(cfg.kind), pps[a],
                                 vpp, mbs[c], variant == 1 ? " split backward" : variant == 2 ? " split overlaps" : "");
                        run = tm_new(v, 2);
                        tm_check_against_reference(run, what);
                        tm_free(run);
                        run = tm_new(v, 2);
                        run->steps = 2;
                        PP_CHECK_OK(tm_go(run, &err), &err);
                        tm_check_slots(run, what);
                        tm_free(run);
                        pp_schedule_free(v);
                        runs++;
                        kind_runs++;
                        split_runs += variant > 0;
                    }
                    pp_schedule_free(s);
                }
        PP_CHECK_MSG(kind_runs > 0, "kind %s: nothing ran", pp_schedule_kind_name((pp_schedule_kind)kind));
    }
    for (a = 0; a < 2; a++) {   /* every W deferred to the end of its rank's program: slots held longest */
        pp_schedule *s = a ? tm_split_schedule(PP_INTERLEAVED_1F1B, 2, 2, 4, 1) : tm_split_schedule(PP_1F1B, 3, 1, 6, 1);
        tm_run *run = tm_new(s, 2);
        tm_check_against_reference(run, a ? "interleaved, W deferred" : "1f1b, W deferred");
        tm_free(run);
        pp_schedule_free(s);
    }
    PP_CHECK(runs >= 60);
    PP_CHECK(split_runs >= 20);
}

/* What a rank's callbacks must log over `steps` steps of its program, by the rule of chunk_done:
 * D right after the last action of each chunk among its B, W and FB (the B half's chunk), once a
 * step; never after an I (its W comes later) and never in forward-only steps. Under the unsplit
 * backward (no backward_input / backward_weight) an I logs the whole backward (B) and a W nothing. */
static void tm_expected_log(const pp_schedule *s, int rank, int unsplit, int forward_only, int steps, char *buf,
                            size_t size)
{
    int last[TM_MAX_STAGES], i, c, step;
    size_t n = 0;
#define TM_ADD(...) do { n += (size_t)snprintf(buf + n, n < size ? size - n : 0, __VA_ARGS__); } while (0)
    for (c = 0; c < TM_MAX_STAGES; c++) last[c] = -1;
    for (i = 0; i < s->length[rank]; i++) {
        pp_action a = s->actions[rank][i];
        if (a.op == PP_OP_B || a.op == PP_OP_W) last[pp_stage_chunk(s, a.stage)] = i;
        if (a.op == PP_OP_FB) last[pp_stage_chunk(s, a.stage2)] = i;
    }
    buf[0] = '\0';
    for (step = 0; step < steps; step++)
        for (i = 0; i < s->length[rank]; i++) {
            pp_action a = s->actions[rank][i];
            int bs = a.op == PP_OP_FB ? a.stage2 : a.stage, bm = a.op == PP_OP_FB ? a.mb2 : a.mb;
            if (a.op == PP_OP_F || a.op == PP_OP_FB) TM_ADD("F%d.%d ", a.stage, a.mb);
            if (forward_only) continue;
            if (a.op == PP_OP_B || a.op == PP_OP_FB || (a.op == PP_OP_I && unsplit)) TM_ADD("B%d.%d ", bs, bm);
            if (a.op == PP_OP_I && !unsplit) TM_ADD("I%d.%d ", a.stage, a.mb);
            if (a.op == PP_OP_W && !unsplit) TM_ADD("W%d.%d ", a.stage, a.mb);
            if (a.op <= PP_OP_FB && last[pp_stage_chunk(s, bs)] == i) TM_ADD("D%d:%d.%d ", pp_stage_chunk(s, bs), bs, bm);
        }
#undef TM_ADD
}

/* chunk_done comes once per chunk per training step, right after that chunk's last backward
 * action in the program (so after all its backward work), in program order: each rank's whole
 * sequence of callbacks over two steps equals tm_expected_log's, under one and several chunks, V
 * placements, split I/W (and W's deferred to the end), FB actions with and without their own
 * callback, DualPipe's two routes, and the unsplit backward. Forward-only steps call it never. */
static void chunk_done_follows_each_chunks_last_backward_once_per_step(void)
{
    static const struct { pp_schedule_kind kind; int pp, vpp, mb, variant, fb_callback, unsplit; } cfgs[] = {
        { PP_1F1B, 3, 1, 5, 0, 0, 0 }, { PP_INTERLEAVED_1F1B, 2, 2, 4, 0, 0, 0 }, { PP_INTERLEAVED_1F1B, 2, 2, 4, 1, 0, 0 },
        { PP_ZBV, 2, 2, 4, 0, 0, 0 }, { PP_ZBV, 2, 2, 4, 0, 0, 1 }, { PP_ZB_H1, 3, 1, 4, 0, 0, 0 },
        { PP_ZB_H1, 3, 1, 4, 0, 0, 1 }, { PP_DUALPIPEV, 4, 2, 8, 0, 0, 0 }, { PP_DUALPIPEV, 4, 2, 8, 0, 1, 0 },
        { PP_DUALPIPEV, 4, 2, 8, 2, 0, 0 }, { PP_DUALPIPE, 4, 2, 8, 0, 1, 0 }, { PP_INTERLEAVED_ZB, 2, 2, 4, 0, 0, 1 },
        { PP_KIND_NONE, 3, 1, 6, 0, 0, 0 },   /* 1F1B split by hand, every W deferred to the end */
    };
    static char want[8192];
    size_t k;
    int fwd;
    for (k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++)
        for (fwd = 0; fwd <= 1; fwd++) {
            pp_schedule *base = cfgs[k].kind == PP_KIND_NONE ? tm_split_schedule(PP_1F1B, 3, 1, 6, 1)
                                                             : tm_schedule(cfgs[k].kind, cfgs[k].pp, cfgs[k].vpp, cfgs[k].mb);
            pp_schedule *s = base ? tm_variant(base, cfgs[k].variant) : NULL;
            tm_run *run;
            pp_error err;
            char what[96];
            int r;
            if (!s) { pp_test_fail(__FILE__, __LINE__, "config %d: no schedule", (int)k); pp_schedule_free(base); continue; }
            snprintf(what, sizeof what, "%s pp=%d mb=%d variant %d%s%s%s", pp_schedule_kind_name(s->kind), s->pp, s->mb,
                     cfgs[k].variant, cfgs[k].fb_callback ? " fb callback" : "", cfgs[k].unsplit ? " unsplit" : "",
                     fwd ? " forward only" : "");
            run = tm_new(s, 2);
            run->steps = 2;
            run->log_calls = 1;
            run->forward_only = fwd;
            run->use_fb_callback = cfgs[k].fb_callback;
            run->unsplit = cfgs[k].unsplit;
            PP_CHECK_OK(tm_go(run, &err), &err);
            for (r = 0; r < s->pp; r++) {
                tm_expected_log(s, r, cfgs[k].unsplit, fwd, 2, want, sizeof want);
                PP_CHECK_MSG(strcmp(run->log[r], want) == 0, "%s rank %d:\n     got  %s\n     want %s", what, r,
                             run->log[r], want);
                PP_CHECK_INT(run->chunk_done_calls[r], fwd ? 0 : 2 * s->vpp);
            }
            tm_check_slots(run, what);
            tm_free(run);
            pp_schedule_free(s);
            pp_schedule_free(base);
        }
}

/* chunk_done comes after the transfers that follow the chunk's last backward in the program are
 * posted, so what a trainer queues there (a deferred weight gradient, a gradient reduce on the
 * compute stream) does not hold back the send the next stage waits for: at each call, the sends a
 * rank has posted are all those of its lowered program up to the next compute action. */
static void chunk_done_comes_after_the_sends_that_follow_it(void)
{
    static const struct { pp_schedule_kind kind; int pp, vpp, mb; } cfgs[] = {
        { PP_1F1B, 3, 1, 5 }, { PP_INTERLEAVED_1F1B, 2, 2, 4 }, { PP_ZBV, 2, 2, 4 }, { PP_DUALPIPEV, 4, 2, 8 },
        { PP_ZB_H1, 3, 1, 4 },
    };
    size_t k;
    for (k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        pp_schedule *s = tm_schedule(cfgs[k].kind, cfgs[k].pp, cfgs[k].vpp, cfgs[k].mb);
        tm_run *run;
        pp_error err;
        int r, i, step;
        if (!s) continue;
        run = tm_new(s, 2);
        run->steps = 2;
        run->watch = 1;
        PP_CHECK_OK(tm_go(run, &err), &err);
        for (r = 0; r < s->pp; r++) {
            long long per_step = 0, want[2 * TM_MAX_STAGES];
            int last[TM_MAX_STAGES], c, nd = 0;
            for (c = 0; c < TM_MAX_STAGES; c++) last[c] = -1;
            for (i = 0; i < s->length[r]; i++) {
                pp_action a = s->actions[r][i];
                if (a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B) per_step++;
                if (a.op == PP_OP_B || a.op == PP_OP_W) last[pp_stage_chunk(s, a.stage)] = i;
                if (a.op == PP_OP_FB) last[pp_stage_chunk(s, a.stage2)] = i;
            }
            for (step = 0; step < 2; step++) {
                long long sent = step * per_step;
                for (i = 0; i < s->length[r]; i++) {
                    pp_action a = s->actions[r][i];
                    int bs = a.op == PP_OP_FB ? a.stage2 : a.stage, j;
                    if (a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B) sent++;
                    if (a.op > PP_OP_FB || last[pp_stage_chunk(s, bs)] != i) continue;
                    for (j = i + 1; j < s->length[r] && s->actions[r][j].op > PP_OP_FB; j++)
                        if (s->actions[r][j].op == PP_OP_SEND_F || s->actions[r][j].op == PP_OP_SEND_B) sent++;
                    if (nd < 2 * TM_MAX_STAGES) want[nd++] = sent;
                    for (j = i + 1; j < s->length[r] && s->actions[r][j].op > PP_OP_FB; j++)
                        if (s->actions[r][j].op == PP_OP_SEND_F || s->actions[r][j].op == PP_OP_SEND_B) sent--;
                }
            }
            PP_CHECK_INT(run->chunk_done_calls[r], nd);
            for (i = 0; i < nd && i < run->chunk_done_calls[r]; i++)
                PP_CHECK_MSG(run->sends_at_done[r][i] == want[i], "%s rank %d: chunk_done %d came with %lld sends posted, "
                             "want %lld (all up to the next compute action)", pp_schedule_kind_name(s->kind), r, i,
                             run->sends_at_done[r][i], want[i]);
        }
        tm_free(run);
        pp_schedule_free(s);
    }
}

/* Without backward_input / backward_weight, a schedule with I and W still runs: each I calls
 * backward (the whole backward) and each W nothing. The gradients equal the single stage's and
 * the split run's (up to the order in which microbatches add into a weight gradient). */
static void an_unsplit_backward_runs_split_schedules_to_the_split_gradients(void)
{
    static const struct { pp_schedule_kind kind; int pp, vpp, mb; } cfgs[] = {
        { PP_ZBV, 2, 2, 4 }, { PP_ZBV, 4, 2, 8 }, { PP_ZB_H1, 3, 1, 6 }, { PP_ZB_H1, 4, 1, 8 },
        { PP_ZB_H2, 4, 1, 8 }, { PP_INTERLEAVED_ZB, 2, 2, 4 }, { PP_KIND_NONE, 3, 1, 6 },
    };
    size_t k;
    for (k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        pp_schedule *s = cfgs[k].kind == PP_KIND_NONE ? tm_split_schedule(PP_1F1B, 3, 1, 6, 1)
                                                      : tm_schedule(cfgs[k].kind, cfgs[k].pp, cfgs[k].vpp, cfgs[k].mb);
        tm_params split, unsplit;
        tm_run *run;
        char what[96];
        int stg;
        if (!s) continue;
        PP_CHECK(pp_test_count_op(s, PP_OP_I) > 0 && pp_test_count_op(s, PP_OP_W) > 0);
        snprintf(what, sizeof what, "%s pp=%d mb=%d", pp_schedule_kind_name(s->kind), s->pp, s->mb);
        run = tm_new(s, 2);
        tm_check_against_reference(run, what);
        tm_sum_copies(s, &run->grads, &split);
        tm_free(run);
        run = tm_new(s, 2);
        run->unsplit = 1;
        tm_check_against_reference(run, what);
        tm_sum_copies(s, &run->grads, &unsplit);
        tm_free(run);
        for (stg = 0; stg < tm_model_stages(s); stg++)
            PP_CHECK_MSG(tm_rel_err(&unsplit, &split, stg) < 1e-5, "%s stage %d: unsplit and split gradients differ by %g",
                         what, stg, tm_rel_err(&unsplit, &split, stg));
        pp_schedule_free(s);
    }
}

/* The backward callbacks a program needs: a split pair is both or neither (half of one is
 * refused whatever the schedule), and a schedule with I/W runs with backward alone. */
static void executor_refuses_half_a_split_backward(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 2, 1, 2), *zb = tm_schedule(PP_ZBV, 2, 2, 4);
    pp_threads_world *w = NULL;
    pp_executor_config cfg;
    pp_executor *ex = NULL;
    pp_error err;
    PP_CHECK_OK(pp_threads_world_create(2, &w, &err), &err);
    memset(&cfg, 0, sizeof cfg);
    cfg.schedule = s;
    PP_CHECK_OK(pp_threads_transport(w, 0, &cfg.transport, &err), &err);
    cfg.callbacks.tensor_bytes = tm_bytes;
    cfg.callbacks.input = tm_input;
    cfg.callbacks.forward = tm_forward;
    cfg.callbacks.backward = tm_backward;
    cfg.callbacks.backward_input = tm_backward_input;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL,
                   "callbacks.backward_weight: must not be NULL when callbacks.backward_input is given");
    cfg.callbacks.backward_input = NULL;
    cfg.callbacks.backward_weight = tm_backward_weight;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL,
                   "callbacks.backward_input: must not be NULL when callbacks.backward_weight is given");
    cfg.callbacks.backward_weight = NULL;
    cfg.schedule = zb;
    PP_CHECK_OK(pp_executor_create(&cfg, &ex, &err), &err);   /* I/W with backward alone */
    pp_executor_free(ex);
    ex = NULL;
    cfg.callbacks.backward = NULL;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL,
                   "callbacks.backward_input: must not be NULL, rank 0's program has split backwards (I, W): give "
                   "backward_input and backward_weight, or backward");
    PP_CHECK(ex == NULL);
    pp_threads_world_free(w);
    pp_schedule_free(s);
    pp_schedule_free(zb);
}

/* Two data-parallel replicas of a two-stage pipeline in one world of four ranks (grid dp 2 x
 * pp 2: pipelines {0, 2} and {1, 3}): each rank runs its executor over its pipeline's group
 * transport (pp_threads_transport_grid), then sums its stage's gradients over its dp group
 * (pp_group_all_reduce), the trainer's step after the pipeline's. Same data on both replicas:
 * both hold twice the single stage's gradients, bit for bit alike. */
typedef struct tm_dp { tm_run *run[2]; pp_grid grid; } tm_dp;

static pp_status tm_dp_rank(void *user, int rank, pp_transport *world, pp_error *err)
{
    tm_dp *d = (tm_dp *)user;
    pp_threads_world *w = pp_threads_transport_world(world);
    pp_transport pipe, dp;
    int coord[PP_DIM_COUNT], s;
    tm_run *run;
    pp_status st = pp_grid_coords(&d->grid, rank, coord, err);
    if (st == PP_OK) st = pp_threads_transport_grid(w, &d->grid, PP_GROUP_PP, rank, &pipe, err);
    if (st == PP_OK) st = pp_threads_transport_grid(w, &d->grid, PP_GROUP_DP, rank, &dp, err);
    if (st != PP_OK) return st;
    run = d->run[coord[PP_DIM_DP]];
    st = tm_rank(run, coord[PP_DIM_PP], &pipe, err);
    s = coord[PP_DIM_PP];   /* 1F1B: rank r holds stage r */
    if (st == PP_OK) st = pp_group_all_reduce(&dp, run->grads.w1[s], TM_H * TM_D, 10, err);
    if (st == PP_OK) st = pp_group_all_reduce(&dp, run->grads.b1[s], TM_H, 10, err);
    if (st == PP_OK) st = pp_group_all_reduce(&dp, run->grads.w2[s], TM_D * TM_H, 10, err);
    if (st == PP_OK) st = pp_group_all_reduce(&dp, run->grads.b2[s], TM_D, 10, err);
    return st;
}

static void data_parallel_pipelines_run_on_group_transports_and_sum_over_dp(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 2, 1, 4);
    pp_grid_config gc;
    tm_params ref;
    tm_dp d;
    pp_error err;
    int k, stg, i;
    memset(&gc, 0, sizeof gc);
    gc.world = 4; gc.pp = 2;
    PP_CHECK_OK(pp_grid_init(&gc, &d.grid, &err), &err);
    d.run[0] = tm_new(s, 2);
    d.run[1] = tm_new(s, 2);
    PP_CHECK_OK(pp_threads_run(4, tm_dp_rank, &d, NULL, NULL, &err), &err);
    memset(&ref, 0, sizeof ref);
    tm_reference(&d.run[0]->params, 2, d.run[0]->mbs[0], 4, 0.25f, &ref, NULL);
    for (stg = 0; stg < 2; stg++) {
        for (i = 0; i < TM_H * TM_D; i++) { ref.w1[stg][i] *= 2; ref.w2[stg][i] *= 2; }
        for (i = 0; i < TM_H; i++) ref.b1[stg][i] *= 2;
        for (i = 0; i < TM_D; i++) ref.b2[stg][i] *= 2;
    }
    for (k = 0; k < 2; k++) {
        tm_check_slots(d.run[k], "dp replica");
        for (stg = 0; stg < 2; stg++)
            PP_CHECK_MSG(tm_rel_err(&d.run[k]->grads, &ref, stg) < 1e-5, "replica %d stage %d: %g", k, stg,
                         tm_rel_err(&d.run[k]->grads, &ref, stg));
    }
    PP_CHECK(memcmp(&d.run[0]->grads, &d.run[1]->grads, sizeof d.run[0]->grads) == 0);
    tm_free(d.run[0]);
    tm_free(d.run[1]);
    pp_schedule_free(s);
}

/* --- tests: a recipe, for steps whose microbatch count changes ------------------------------ */

/* This rank's live peak over counts 1 .. max_mb of the recipe's schedule split as asked, from
 * the public calls (what pp_executor_saved_slots must give); counts the kind refuses count none.
 * With `only` > 0, that count's peak alone. */
static int tm_recipe_peak(const pp_schedule_config *recipe, int split_backward, int split_overlaps, int max_mb,
                          int only, int rank)
{
    int n, best = 0;
    for (n = only > 0 ? only : 1; n <= (only > 0 ? only : max_mb); n++) {
        pp_schedule_config c = *recipe;
        pp_schedule *s = NULL;
        pp_error err;
        int live = 0;
        c.mb = n;
        if (pp_schedule_build(&c, &s, &err) != PP_OK) continue;
        if (split_backward) PP_CHECK_OK(pp_schedule_split_backward(s, &err), &err);
        if (split_overlaps) PP_CHECK_OK(pp_schedule_split_overlaps(s, &err), &err);
        PP_CHECK_OK(pp_schedule_rank_peaks(s, rank, NULL, 1, &live, NULL, &err), &err);
        if (live > best) best = live;
        pp_schedule_free(s);
    }
    return best;
}

/* One executor per rank, made from a recipe (no schedule), runs steps of 3, 8, 5 and 8
 * microbatches in a row: every step's loss and the gradients summed over the four steps equal
 * the single stage's; the second step of 8 allocates nothing (its program and buffers were made
 * by the first; the transport has no test(), so live tensors follow the program alone and the
 * step of 8 holds as many at once both times); pp_executor_saved_slots is the largest live peak
 * of counts 1 .. max_mb, the slots stay unshared, and those in use reach the largest peak of the
 * counts run. Kinds: 1F1B, interleaved (counts that are no multiple of pp included), ZB-V,
 * ZB-H1, DualPipeV with its FB split, 1F1B with its B split. */
static void a_recipe_runs_steps_of_3_8_5_8_microbatches_to_single_stage_gradients(void)
{
    static const struct { pp_schedule_kind kind; int pp, vpp, split_backward, split_overlaps; } cfgs[] = {
        { PP_1F1B, 3, 1, 0, 0 }, { PP_INTERLEAVED_1F1B, 2, 2, 0, 0 }, { PP_INTERLEAVED_1F1B, 4, 2, 0, 0 },
        { PP_ZBV, 2, 2, 0, 0 }, { PP_ZB_H1, 3, 1, 0, 0 }, { PP_DUALPIPEV, 2, 2, 0, 1 }, { PP_1F1B, 2, 1, 1, 0 },
    };
    static const int counts[4] = { 3, 8, 5, 8 };
    size_t k;
    for (k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        pp_schedule_config rc;
        pp_schedule *s;
        tm_params ref, got;
        tm_run *run;
        pp_error err;
        char what[96];
        int step, r, stg, k2;
        memset(&rc, 0, sizeof rc);
        rc.kind = cfgs[k].kind; rc.pp = cfgs[k].pp; rc.vpp = cfgs[k].vpp;
        s = tm_schedule(rc.kind, rc.pp, rc.vpp, 8);   /* the shape (pp, stages) for the harness and the reference */
        if (!s) continue;
        snprintf(what, sizeof what, "recipe %s pp=%d vpp=%d%s%s", pp_schedule_kind_name(rc.kind), rc.pp, rc.vpp,
                 cfgs[k].split_backward ? " split backward" : "", cfgs[k].split_overlaps ? " split overlaps" : "");
        run = tm_new(s, 2);
        run->recipe = rc;
        run->max_mb = 8;
        run->split_backward = cfgs[k].split_backward;
        run->split_overlaps = cfgs[k].split_overlaps;
        run->steps = 4;
        run->no_test = 1;
        for (step = 0; step < 4; step++) run->step_mb[step] = counts[step];
        if (tm_go(run, &err) != PP_OK) {
            pp_test_fail(__FILE__, __LINE__, "%s: %s", what, err.message);
            tm_free(run);
            pp_schedule_free(s);
            continue;
        }
        memset(&ref, 0, sizeof ref);
        for (step = 0; step < 4; step++) {
            int n = counts[step];
            double loss = tm_reference(&run->params, tm_model_stages(s), run->mbs[step], n, 1.0f / (float)n, &ref, NULL) / n;
            for (r = 0; r < s->pp; r++)
                PP_CHECK_MSG(fabs(run->result[r][step].loss - loss) <= 1e-5 * fabs(loss), "%s step %d rank %d: loss %.9g, "
                             "single stage %.9g", what, step, r, (double)run->result[r][step].loss, loss);
        }
        tm_sum_copies(s, &run->grads, &got);
        for (stg = 0; stg < tm_model_stages(s); stg++)
            PP_CHECK_MSG(tm_rel_err(&got, &ref, stg) < 1e-5, "%s: stage %d gradients differ by %g", what, stg,
                         tm_rel_err(&got, &ref, stg));
        for (r = 0; r < s->pp; r++) {
            int used = 0;
            for (k2 = 0; k2 < 3; k2++) {
                int p = tm_recipe_peak(&rc, cfgs[k].split_backward, cfgs[k].split_overlaps, 8, counts[k2], r);
                if (p > used) used = p;
            }
            PP_CHECK_MSG(run->step_allocs[r][3] == run->step_allocs[r][2], "%s rank %d: the second step of 8 made %lld "
                         "allocations", what, r, run->step_allocs[r][3] - run->step_allocs[r][2]);
            PP_CHECK_INT(run->saved_slots[r], tm_recipe_peak(&rc, cfgs[k].split_backward, cfgs[k].split_overlaps, 8, 0, r));
            PP_CHECK_INT(run->stats[r].saved_slots_used, used);
            PP_CHECK_INT(run->slot_max[r], used);
            PP_CHECK_MSG(run->slot_bad[r] == 0, "%s rank %d: %s", what, r, run->slot_why[r]);
            PP_CHECK(run->stats[r].peak_slots <= run->stats[r].planned_slots);
        }
        tm_free(run);
        pp_schedule_free(s);
    }
}

/* DualPipe needs an even count: a recipe's step of 3 fails on every rank with the kind's own
 * reason, naming step.num_mb, after a step of 4 ran. */
static void a_recipe_step_of_a_count_the_kind_refuses_fails_with_its_reason(void)
{
    pp_schedule *s = tm_schedule(PP_DUALPIPE, 2, 2, 4);
    tm_run *run = tm_new(s, 2);
    pp_error err;
    int r;
    run->recipe.kind = PP_DUALPIPE;
    run->recipe.pp = 2;
    run->max_mb = 6;
    run->steps = 2;
    run->step_mb[0] = 4;
    run->step_mb[1] = 3;
    PP_CHECK_FAILS(tm_go(run, &err), &err, PP_EUNSUPPORTED, "step.num_mb=3: mb=3: dualpipe needs an even mb");
    for (r = 0; r < 2; r++) {
        PP_CHECK(run->status[r] == PP_EUNSUPPORTED || run->status[r] == PP_EABORTED);
        PP_CHECK(run->result[r][0].weight > 0);   /* the step of 4 ran */
        PP_CHECK_INT(run->saved_slots[r], tm_recipe_peak(&run->recipe, 0, 0, 6, 0, r));
    }
    tm_free(run);
    pp_schedule_free(s);
}

/* Ranks whose steps name different counts fail before any tensor moves, naming both counts. */
static void ranks_that_disagree_on_num_mb_are_named_with_both_counts(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 3, 1, 8);
    tm_run *run = tm_new(s, 2);
    pp_error err;
    int r;
    run->recipe.kind = PP_1F1B;
    run->recipe.pp = 3;
    run->max_mb = 8;
    run->rank_mb[0] = run->rank_mb[2] = 8;
    run->rank_mb[1] = 5;
    run->timeout = 20;
    PP_CHECK_FAILS(tm_go(run, &err), &err, PP_EINVALID_SCHEDULE, "num_mb differs (this rank: ");
    PP_CHECK(strstr(err.message, "num_mb differs (this rank: 8, rank 1: 5)") ||
             strstr(err.message, "num_mb differs (this rank: 5, rank 0: 8)"));
    for (r = 0; r < 3; r++) PP_CHECK(run->status[r] == PP_EINVALID_SCHEDULE || run->status[r] == PP_EABORTED);
    PP_CHECK(tm_max_seconds(run, -1) < 5);
    tm_free(run);
    pp_schedule_free(s);
}

/* A schedule or a recipe, not both and not neither; the recipe's fields only with a recipe; a
 * step's num_mb within the recipe's 1 .. max_mb, or 0 or the fixed schedule's mb. One rank (a
 * world of one, made anew after each failed step: a failure aborts it). */
static pp_status tm_one_rank_step(const pp_executor_config *base, int num_mb, pp_error *err)
{
    pp_threads_world *w = NULL;
    pp_executor_config cfg = *base;
    pp_executor *ex = NULL;
    pp_step step;
    void *meta[TM_MAX_MB];
    pp_status st;
    int m;
    tm_run *run = (tm_run *)base->callbacks.user;
    for (m = 0; m < TM_MAX_MB; m++) meta[m] = &run->mbs[0][m];
    memset(&step, 0, sizeof step);
    step.mb_meta = meta;
    step.num_mb = num_mb;
    st = pp_threads_world_create(1, &w, err);
    if (st == PP_OK) st = pp_threads_transport(w, 0, &cfg.transport, err);
    if (st == PP_OK) st = pp_executor_create(&cfg, &ex, err);
    if (st == PP_OK) st = pp_run_step(ex, &step, NULL, err);
    pp_executor_free(ex);
    pp_threads_world_free(w);
    return st;
}

static void executor_takes_a_schedule_or_a_recipe_and_checks_num_mb(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 1, 1, 3);
    tm_run *run = tm_new(s, 2);
    pp_executor_config cfg;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.transport.world = 1;
    cfg.callbacks.user = run;
    cfg.callbacks.tensor_bytes = tm_bytes;
    cfg.callbacks.input = tm_input;
    cfg.callbacks.forward = tm_forward;
    cfg.callbacks.loss = tm_loss_cb;
    cfg.callbacks.backward = tm_backward;
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 0, &err), &err, PP_EINVAL, "schedule: must not be NULL (or give a recipe");
    cfg.schedule = s;
    cfg.recipe.kind = PP_1F1B;
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 0, &err), &err, PP_EINVAL, "schedule and recipe: give one, not both");
    cfg.recipe.kind = PP_KIND_NONE;
    cfg.max_mb = 4;
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 0, &err), &err, PP_EINVAL, "max_mb=4: only with a recipe");
    cfg.max_mb = 0;
    cfg.split_backward = 1;
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 0, &err), &err, PP_EINVAL, "split_backward=1: only with a recipe");
    cfg.split_backward = 0;
    /* the fixed schedule: num_mb 0 or its mb */
    PP_CHECK_OK(tm_one_rank_step(&cfg, 0, &err), &err);
    PP_CHECK_OK(tm_one_rank_step(&cfg, 3, &err), &err);
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 4, &err), &err, PP_EINVAL,
                   "step.num_mb=4: this executor runs a fixed schedule of mb=3");
    /* a recipe */
    cfg.schedule = NULL;
    cfg.recipe.kind = PP_1F1B;
    cfg.recipe.pp = 1;
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 2, &err), &err, PP_EINVAL, "max_mb=0: must be between 1 and 1024 with a recipe");
    cfg.max_mb = 4;
    cfg.recipe.pp = 2;
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 2, &err), &err, PP_EINVAL, "transport.world=1: must equal the recipe's pp (2)");
    cfg.recipe.pp = 1;
    cfg.recipe.kind = PP_ZBV;
    cfg.recipe.vpp = 3;
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 2, &err), &err, PP_EUNSUPPORTED,
                   "recipe: no microbatch count 1 .. max_mb=4 gives a zbv schedule (max_mb: vpp=3:");
    cfg.recipe.kind = PP_1F1B;
    cfg.recipe.vpp = 0;
    PP_CHECK_OK(tm_one_rank_step(&cfg, 2, &err), &err);
    PP_CHECK_OK(tm_one_rank_step(&cfg, 4, &err), &err);
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 0, &err), &err, PP_EINVAL, "step.num_mb=0: must be between 1 and max_mb=4");
    PP_CHECK_FAILS(tm_one_rank_step(&cfg, 5, &err), &err, PP_EINVAL, "step.num_mb=5: must be between 1 and max_mb=4");
    tm_free(run);
    pp_schedule_free(s);
}

/* --- tests: failures ------------------------------------------------------------------------- */

static void a_failing_callback_stops_every_rank_at_once(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 4, 1, 8);
    tm_run *run = tm_new(s, 2);
    pp_error err;
    int r;
    run->timeout = 30;
    run->fail_mode = 1; run->fail_rank = 2; run->fail_stage = 2; run->fail_mb = 3;
    PP_CHECK_FAILS(tm_go(run, &err), &err, PP_ECALLBACK, "rank 2 position");
    PP_CHECK(strncmp(err.message, "rank 2 position", 15) == 0);   /* the rank named once */
    PP_CHECK_CONTAINS(err.message, "(2F3): the forward callback returned 7");
    for (r = 0; r < 4; r++) {
        PP_CHECK_INT(run->status[r], r == 2 ? PP_ECALLBACK : PP_EABORTED);
        if (r != 2) PP_CHECK_CONTAINS(run->errors[r].message, "because rank 2 failed");
    }
    PP_CHECK(tm_max_seconds(run, -1) < 5);   /* far below the 30 s deadline: nobody waited it out */
    tm_free(run);
    pp_schedule_free(s);
}

static void a_rank_that_stops_mid_step_makes_the_others_time_out(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 4, 1, 8);
    tm_run *run = tm_new(s, 2);
    pp_error err;
    pp_status st;
    int r, timeouts = 0;
    run->timeout = 0.3;
    run->fail_mode = 2; run->fail_rank = 1; run->fail_stage = 1; run->fail_mb = 4;
    st = tm_go(run, &err);
    PP_CHECK_INT(st, PP_ETIMEOUT);
    /* the root cause is the first rank whose deadline passed: a neighbour of rank 1, or a rank
     * further down that waited on a neighbour (its wait began earlier) */
    PP_CHECK_CONTAINS(err.message, "timed out after 0.3 s waiting for rank ");
    for (r = 0; r < 4; r++) {
        if (r == 1) { PP_CHECK_INT(run->status[r], PP_EABORTED); continue; }
        PP_CHECK(run->status[r] == PP_ETIMEOUT || run->status[r] == PP_EABORTED);
        if (run->status[r] == PP_ETIMEOUT) {
            timeouts++;
            /* names this rank, the action it was at, and the peer */
            PP_CHECK_CONTAINS(run->errors[r].message, "position");
            PP_CHECK_CONTAINS(run->errors[r].message, "waiting for rank");
        }
    }
    PP_CHECK(timeouts >= 1);
    PP_CHECK(tm_max_seconds(run, 1) < 0.3 + 2.0);
    tm_free(run);
    pp_schedule_free(s);
}

static void mismatched_schedules_are_reported_before_any_tensor_moves(void)
{
    pp_schedule *a = tm_schedule(PP_1F1B, 3, 1, 8), *b = tm_schedule(PP_1F1B, 3, 1, 4);
    pp_schedule *g = tm_schedule(PP_GPIPE, 3, 1, 8), *disguised = NULL;
    pp_error err;
    int r, k;
    for (k = 0; k < 3; k++) {
        tm_run *run = tm_new(a, 2);
        run->timeout = 20;
        if (k == 0) run->rank_sched[1] = b;          /* different mb */
        if (k == 1) run->rank_sched[0] = g;          /* different kind */
        if (k == 2) {                                /* same header, different programs */
            PP_CHECK_OK(pp_schedule_copy(g, &disguised, &err), &err);
            disguised->kind = PP_1F1B;
            run->rank_sched[2] = disguised;
        }
        PP_CHECK_FAILS(tm_go(run, &err), &err, PP_EINVALID_SCHEDULE, "the pipeline ranks run different schedules");
        PP_CHECK_CONTAINS(err.message, k == 0 ? "mb differs" : k == 1 ? "schedule kind differs" : "the programs differ");
        for (r = 0; r < 3; r++) PP_CHECK(run->status[r] == PP_EINVALID_SCHEDULE || run->status[r] == PP_EABORTED);
        PP_CHECK(tm_max_seconds(run, -1) < 5);
        tm_free(run);
    }
    pp_schedule_free(a); pp_schedule_free(b); pp_schedule_free(g); pp_schedule_free(disguised);
}

static void ranks_that_disagree_on_a_tensor_size_are_reported(void)
{
    pp_schedule *s = tm_schedule(PP_GPIPE, 3, 1, 2);
    tm_run *run = tm_new(s, 2);
    pp_error err;
    run->wrong_bytes_rank = 1;
    run->timeout = 20;
    PP_CHECK_FAILS(tm_go(run, &err), &err, PP_ETRANSPORT, "tensor_bytes differs between the ranks");
    PP_CHECK(tm_max_seconds(run, -1) < 5);
    tm_free(run);
    pp_schedule_free(s);
}

/* The executor on one thread (pp = 1): a failed step leaves it refusing further steps. */
static void a_failed_step_leaves_the_executor_refusing_more(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 1, 1, 3);
    tm_run *run = tm_new(s, 2);
    pp_threads_world *w = NULL;
    pp_executor_config cfg;
    pp_executor *ex = NULL;
    pp_step step;
    void *meta[TM_MAX_MB];
    pp_error err;
    int m;
    for (m = 0; m < TM_MAX_MB; m++) meta[m] = &run->mbs[0][m];
    memset(&step, 0, sizeof step);
    step.mb_meta = meta;
    PP_CHECK_OK(pp_threads_world_create(1, &w, &err), &err);
    memset(&cfg, 0, sizeof cfg);
    cfg.schedule = s;
    PP_CHECK_OK(pp_threads_transport(w, 0, &cfg.transport, &err), &err);
    cfg.callbacks.user = run;
    cfg.callbacks.tensor_bytes = tm_bytes;
    cfg.callbacks.input = tm_input;
    cfg.callbacks.forward = tm_forward;
    cfg.callbacks.loss = tm_loss_cb;
    cfg.callbacks.backward = tm_backward;
    PP_CHECK_OK(pp_executor_create(&cfg, &ex, &err), &err);
    run->fail_mode = 1; run->fail_rank = 0; run->fail_stage = 0; run->fail_mb = 1;
    PP_CHECK_FAILS(pp_run_step(ex, &step, NULL, &err), &err, PP_ECALLBACK, "rank 0 position 2 (0F1): the forward callback returned 7");
    run->fail_mode = 0;
    PP_CHECK_FAILS(pp_run_step(ex, &step, NULL, &err), &err, PP_EINVAL, "an earlier step failed");
    pp_executor_free(ex);
    pp_threads_world_free(w);
    tm_free(run);
    pp_schedule_free(s);
}

static void bad_executor_configs_name_the_field(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 2, 1, 2), *split = tm_split_schedule(PP_1F1B, 2, 1, 2, 0);
    pp_schedule *raw = NULL;
    pp_schedule_config c;
    pp_threads_world *w = NULL;
    pp_executor_config cfg;
    pp_executor *ex = NULL;
    pp_error err;
    memset(&c, 0, sizeof c);
    c.kind = PP_1F1B; c.pp = 2; c.mb = 2;
    PP_CHECK_OK(pp_schedule_build(&c, &raw, &err), &err);
    PP_CHECK_OK(pp_threads_world_create(2, &w, &err), &err);
    memset(&cfg, 0, sizeof cfg);
    cfg.schedule = s;
    PP_CHECK_OK(pp_threads_transport(w, 1, &cfg.transport, &err), &err);
    cfg.callbacks.tensor_bytes = tm_bytes;
    cfg.callbacks.input = tm_input;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL, "callbacks.forward: must not be NULL");
    cfg.callbacks.forward = tm_forward;
    cfg.timeout_s = -1;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL, "timeout_s=-1: must be >= 0");
    cfg.timeout_s = 0;
    cfg.schedule = raw;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL, "schedule: not lowered");
    cfg.schedule = split;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL, "callbacks.backward_input: must not be NULL");
    cfg.schedule = s;
    cfg.transport.world = 3;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL, "transport.world=3: must equal the schedule's pp (2)");
    cfg.transport.world = 2;
    cfg.transport.all_reduce = NULL;
    PP_CHECK_FAILS(pp_executor_create(&cfg, &ex, &err), &err, PP_EINVAL, "transport.all_reduce: must not be NULL");
    PP_CHECK(ex == NULL);
    pp_threads_world_free(w);
    pp_schedule_free(s); pp_schedule_free(split); pp_schedule_free(raw);
}

/* --- tests: the threads transport ------------------------------------------------------------ */

static void threads_transport_matches_messages_by_source_and_tag(void)
{
    pp_threads_world *w = NULL;
    pp_transport t0, t1;
    pp_transfer x[2];
    void *h = NULL, *h2 = NULL;
    float a = 1.5f, b = 2.5f, ra = 0, rb = 0;
    pp_error err;
    int done = 0;
    PP_CHECK_OK(pp_threads_world_create(2, &w, &err), &err);
    PP_CHECK_OK(pp_threads_transport(w, 0, &t0, &err), &err);
    PP_CHECK_OK(pp_threads_transport(w, 1, &t1, &err), &err);
    memset(x, 0, sizeof x);
    x[0].is_send = 1; x[0].peer = 1; x[0].tag = pp_transfer_tag(PP_OP_SEND_F, 0, 0, 0); x[0].buf = &a; x[0].bytes = 4;
    x[1].is_send = 1; x[1].peer = 1; x[1].tag = pp_transfer_tag(PP_OP_SEND_F, 0, 1, 0); x[1].buf = &b; x[1].bytes = 4;
    PP_CHECK_OK(t0.post(t0.user, x, 2, &h, &err), &err);
    PP_CHECK_OK(t0.wait(t0.user, h, 1.0, &err), &err);   /* sends are buffered: done at once */
    /* receive in the other order: matched by tag, not by arrival */
    memset(x, 0, sizeof x);
    x[0].peer = 0; x[0].tag = pp_transfer_tag(PP_OP_SEND_F, 0, 1, 0); x[0].buf = &rb; x[0].bytes = 4;
    PP_CHECK_OK(t1.post(t1.user, x, 1, &h, &err), &err);
    x[0].tag = pp_transfer_tag(PP_OP_SEND_F, 0, 0, 0); x[0].buf = &ra;
    PP_CHECK_OK(t1.post(t1.user, x, 1, &h2, &err), &err);
    PP_CHECK_OK(t1.test(t1.user, h, &done, &err), &err);
    PP_CHECK_INT(done, 1);
    PP_CHECK_OK(t1.wait(t1.user, h2, 1.0, &err), &err);
    PP_CHECK(ra == 1.5f && rb == 2.5f);
    /* a receive nobody sends: the deadline names the peer and the tag */
    x[0].tag = pp_transfer_tag(PP_OP_SEND_F, 0, 2, 0);
    PP_CHECK_OK(t1.post(t1.user, x, 1, &h, &err), &err);
    PP_CHECK_FAILS(t1.wait(t1.user, h, 0.05, &err), &err, PP_ETIMEOUT,
                   "rank 1: timed out after 0.05 s waiting for rank 0 to send 0SEND_F2 (step 0)");
    /* abort: the other side stops at once with the reason */
    t0.abort(t0.user, PP_ECALLBACK, "the model blew up");
    PP_CHECK_FAILS(t1.post(t1.user, x, 1, &h, &err), &err, PP_EABORTED,
                   "rank 1: stopped because rank 0 failed (PP_ECALLBACK): the model blew up");
    pp_threads_world_free(w);
}

static pp_status tm_reduce_rank(void *user, int rank, pp_transport *t, pp_error *err)
{
    float v[3];
    int round;
    (void)user;
    for (round = 0; round < 50; round++) {
        pp_status st;
        v[0] = (float)rank; v[1] = 1.0f; v[2] = (float)round;
        st = t->all_reduce(t->user, v, 3, 5.0, err);
        if (st != PP_OK) return st;
        if (v[0] != 0 + 1 + 2 + 3 + 4 || v[1] != 5 || v[2] != 5.0f * (float)round) {
            snprintf(err->message, sizeof err->message, "round %d: got %g %g %g", round, v[0], v[1], v[2]);
            return PP_EINVAL;
        }
    }
    return PP_OK;
}

static void threads_all_reduce_sums_over_ranks_round_after_round(void)
{
    pp_error err;
    PP_CHECK_OK(pp_threads_run(5, tm_reduce_rank, NULL, NULL, NULL, &err), &err);
}

static void transfer_tags_name_direction_stage_microbatch_and_step(void)
{
    char buf[64];
    uint64_t t = pp_transfer_tag(PP_OP_SEND_B, 1000, 70000, 300);
    pp_transfer_tag_format(t, buf, sizeof buf);
    PP_CHECK_STR(buf, "1000SEND_B70000 (step 44)");
    PP_CHECK(pp_transfer_tag(PP_OP_SEND_F, 1, 2, 0) != pp_transfer_tag(PP_OP_SEND_B, 1, 2, 0));
    PP_CHECK(pp_transfer_tag(PP_OP_SEND_F, 1, 2, 0) != pp_transfer_tag(PP_OP_SEND_F, 2, 1, 0));
    PP_CHECK(pp_transfer_tag(PP_OP_SEND_F, 1, 2, 0) != pp_transfer_tag(PP_OP_SEND_F, 1, 2, 1));
}

/* --- tests: timeline -------------------------------------------------------------------------- */

/* A timer that counts how often each index is marked (pp_timer: at most once per step). */
typedef struct tm_marks { int count[4096]; int bad; } tm_marks;
static void tm_marks_mark(void *user, int index)
{
    tm_marks *m = (tm_marks *)user;
    if (index < 0 || index >= 4096 || ++m->count[index] > 1) m->bad++;
}
static pp_status tm_marks_resolve(void *user, double *seconds, int count, pp_error *err)
{
    tm_marks *m = (tm_marks *)user;
    int i;
    (void)err;
    for (i = 0; i < count && i < 4096; i++) if (m->count[i]) seconds[i] = (double)i;   /* ordered by index */
    memset(m->count, 0, sizeof m->count);   /* the next step starts afresh */
    return PP_OK;
}

static void an_fb_run_as_f_then_b_marks_each_timer_index_once(void)
{
    /* DualPipeV without a forward_backward callback runs each FB as F then B; its "inputs ready"
     * must be the F half's, not re-marked by the B half (that hid the F half's time from
     * mlp_gpu's busy figure on GPUs) */
    pp_schedule *s = tm_schedule(PP_DUALPIPEV, 2, 2, 8);
    tm_run *run = tm_new(s, 2);
    static tm_marks marks[2];
    pp_error err;
    int r, fbs;
    memset(marks, 0, sizeof marks);
    run->record = 1;
    run->steps = 1;
    for (r = 0; r < 2; r++) {
        run->timer[r].user = &marks[r];
        run->timer[r].mark = tm_marks_mark;
        run->timer[r].resolve = tm_marks_resolve;
    }
    fbs = pp_test_count_op(s, PP_OP_FB);
    PP_CHECK_MSG(fbs > 0, "the schedule has FB actions: %d", fbs);
    PP_CHECK_OK(tm_go(run, &err), &err);
    for (r = 0; r < 2; r++) PP_CHECK_INT(marks[r].bad, 0);
    tm_free(run);
    pp_schedule_free(s);
}

static void the_timeline_orders_each_rank_and_exports_a_chrome_trace(void)
{
    pp_schedule *s = tm_schedule(PP_INTERLEAVED_1F1B, 2, 2, 4);
    tm_run *run = tm_new(s, 2);
    pp_timeline tl[2];
    pp_error err;
    FILE *f;
    char *text;
    long n;
    int r, i, computes = 0, events = 0;
    const char *p;
    run->record = 1;
    run->keep = 1;
    PP_CHECK_OK(tm_go(run, &err), &err);
    for (r = 0; r < 2; r++) {
        double last = -1;
        PP_CHECK_OK(pp_executor_timeline(run->ex[r], &tl[r], &err), &err);
        PP_CHECK_INT(tl[r].length, s->length[r]);
        for (i = 0; i < tl[r].length; i++) {
            PP_CHECK(tl[r].start[i] >= 0);
            PP_CHECK(tl[r].start[i] <= tl[r].ready[i] && tl[r].ready[i] <= tl[r].end[i]);
            if (tl[r].actions[i].op < PP_OP_SEND_F) { PP_CHECK(tl[r].start[i] >= last); last = tl[r].end[i]; computes++; }
        }
    }
    f = tmpfile();
    PP_CHECK(f != NULL);
    if (!f) return;
    PP_CHECK_OK(pp_timeline_write_chrome_trace(tl, 2, f, &err), &err);
    n = ftell(f);
    rewind(f);
    text = (char *)calloc(1, (size_t)n + 1);
    PP_CHECK(fread(text, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    PP_CHECK(strncmp(text, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 38) == 0);
    for (p = text; (p = strstr(p, "\"cat\":\"F\"")) != NULL; p++) events++;
    for (p = text; (p = strstr(p, "\"cat\":\"B\"")) != NULL; p++) events++;
    PP_CHECK_INT(events, computes);
    PP_CHECK_CONTAINS(text, "\"name\":\"rank 1\"");
    free(text);
    f = tmpfile();
    if (f) {
        char line[512];
        int rows = 0;
        PP_CHECK_OK(pp_timeline_draw_ascii(tl, 2, 40, f, &err), &err);
        rewind(f);
        while (fgets(line, sizeof line, f)) rows += strncmp(line, "rank ", 5) == 0;
        PP_CHECK_INT(rows, 2);
        fclose(f);
    }
    for (r = 0; r < 2; r++) pp_executor_free(run->ex[r]);
    tm_free(run);
    pp_schedule_free(s);
}

/* pp_timeline_idle on timelines made by the simulator, where every wait's cause is known. */
static void sim_timelines(const pp_schedule *s, const pp_sim_result *res, pp_timeline *tl, double **rdy)
{
    int r;
    for (r = 0; r < s->pp; r++) {
        memset(&tl[r], 0, sizeof tl[r]);
        tl[r].rank = r; tl[r].length = s->length[r]; tl[r].schedule = s; tl[r].actions = s->actions[r];
        tl[r].start = res->start[r]; tl[r].end = res->end[r];
        rdy[r] = res->start[r];
        tl[r].ready = rdy[r];   /* compute starts as soon as it is issued */
    }
}

static void idle_time_splits_into_the_peers_compute_transfers_and_overhead(void)
{
    pp_schedule *s = tm_schedule(PP_1F1B, 2, 1, 4);
    pp_sim_costs c;
    pp_sim_result *res = NULL;
    pp_timeline tl[2], swapped[2];
    double *rdy[2];
    pp_idle idle[2], again[2];
    pp_error err;
    int r, i;
    if (!s) return;
    /* free transfers: every wait is the schedule's bubble; F = 1, B = 2 per stage */
    memset(&c, 0, sizeof c);
    c.f = 1; c.b = 2;
    PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
    sim_timelines(s, res, tl, rdy);
    PP_CHECK_OK(pp_timeline_idle(tl, 2, idle, &err), &err);
    for (r = 0; r < 2; r++) {
        PP_CHECK_NEAR(idle[r].step, res->makespan, 1e-12);
        PP_CHECK_NEAR(idle[r].busy, 4 * 3.0, 1e-12);
        PP_CHECK_NEAR(idle[r].wait_transfer, 0, 1e-12);
        PP_CHECK_NEAR(idle[r].wait_other, 0, 1e-12);
        PP_CHECK_NEAR(idle[r].busy + idle[r].wait_compute + idle[r].wait_transfer + idle[r].wait_other + idle[r].tail,
                      idle[r].step, 1e-12);
    }
    /* 1F1B pp 2, mb 4 (step 15): rank 1 waits one F at the start and idles through rank 0's
     * last B (tail 2); rank 0 waits for rank 1's first B (2, after its two warm-up F) and its
     * last (1) */
    PP_CHECK_NEAR(idle[0].step, 15.0, 1e-12);
    PP_CHECK_NEAR(idle[1].wait_compute, 1.0, 1e-12);
    PP_CHECK_NEAR(idle[1].tail, 2.0, 1e-12);
    PP_CHECK_NEAR(idle[0].tail, 0, 1e-12);
    PP_CHECK_NEAR(idle[0].wait_compute, 3.0, 1e-12);
    /* the timelines in the other order give the same figures, indexed by rank */
    swapped[0] = tl[1]; swapped[1] = tl[0];
    PP_CHECK_OK(pp_timeline_idle(swapped, 2, again, &err), &err);
    for (r = 0; r < 2; r++) PP_CHECK_NEAR(again[r].wait_compute, idle[r].wait_compute, 1e-12);
    pp_sim_result_free(res);
    res = NULL;

    /* each transfer 0.25: rank 1's first F waits 1 for rank 0's F and 0.25 for the transfer */
    c.p2p_latency = 0.25;
    PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
    sim_timelines(s, res, tl, rdy);
    PP_CHECK_OK(pp_timeline_idle(tl, 2, idle, &err), &err);
    PP_CHECK(idle[1].wait_transfer >= 0.25 - 1e-12);
    PP_CHECK(idle[0].wait_transfer > 0);
    for (r = 0; r < 2; r++) {
        PP_CHECK_NEAR(idle[r].wait_other, 0, 1e-12);
        PP_CHECK_NEAR(idle[r].busy + idle[r].wait_compute + idle[r].wait_transfer + idle[r].wait_other + idle[r].tail,
                      idle[r].step, 1e-12);
    }
    /* rank 0's first action starts 0.5 late, with nothing to wait for: overhead, not bubble */
    {
        double late[64];
        int n = s->length[0];
        PP_CHECK(n <= 64);
        for (i = 0; i < n && i < 64; i++) late[i] = res->start[0][i] + 0.5;
        tl[0].ready = late;
        PP_CHECK_OK(pp_timeline_idle(tl, 2, idle, &err), &err);
        PP_CHECK(idle[0].wait_other >= 0.5 - 1e-12);
        tl[0].ready = rdy[0];
    }
    /* errors name the rule */
    PP_CHECK_FAILS(pp_timeline_idle(tl, 1, idle, &err), &err, PP_EINVAL, "count=1: must be the schedule's pp=2");
    swapped[0] = tl[0]; swapped[1] = tl[0];
    PP_CHECK_FAILS(pp_timeline_idle(swapped, 2, idle, &err), &err, PP_EINVAL, "rank=0: must be one of 0..1, each once");
    swapped[1] = tl[1]; swapped[1].schedule = NULL;   /* allowed: timeline 0's is used */
    PP_CHECK_OK(pp_timeline_idle(swapped, 2, idle, &err), &err);
    {
        pp_schedule *other = tm_schedule(PP_1F1B, 2, 1, 2);
        swapped[1].schedule = other;
        PP_CHECK_FAILS(pp_timeline_idle(swapped, 2, idle, &err), &err, PP_EINVAL,
                       "timeline 1: a different schedule than timeline 0's (1f1b pp 2, 2 stages, mb 2 against 1f1b pp 2, "
                       "2 stages, mb 4)");
        pp_schedule_free(other);
    }
    swapped[0].schedule = NULL;
    PP_CHECK_FAILS(pp_timeline_idle(swapped, 2, idle, &err), &err, PP_EINVAL, "schedule is NULL");
    swapped[0] = tl[0]; swapped[1] = tl[1]; swapped[1].length = 3;
    PP_CHECK_FAILS(pp_timeline_idle(swapped, 2, idle, &err), &err, PP_EINVAL, "length=3");
    PP_CHECK_FAILS(pp_timeline_idle(tl, 2, NULL, &err), &err, PP_EINVAL, "per_rank: must be given");
    /* an action off its microbatch's route (not the schedule's own program) is only compute:
     * no producer is looked up for it (read out of bounds before; ASan in CI) */
    {
        pp_action odd[64];
        int n = s->length[1];
        PP_CHECK(n <= 64);
        for (i = 0; i < n && i < 64; i++) odd[i] = s->actions[1][i];
        odd[1].stage = 7;   /* rank 1's first compute, F(1,0), moved to a stage 1F1B pp 2 does not have */
        PP_CHECK(odd[1].op == PP_OP_F);
        swapped[0] = tl[0]; swapped[1] = tl[1]; swapped[1].actions = odd;
        PP_CHECK_OK(pp_timeline_idle(swapped, 2, idle, &err), &err);
        PP_CHECK(idle[1].wait_other >= 1.0 - 1e-12);   /* its wait for rank 0's F is no longer traced to it */
    }
    pp_sim_result_free(res);
    pp_schedule_free(s);
}

/* DualPipe: microbatches on two routes through two copies of the stages; every F, B and W of
 * the simulated timeline finds its producer within the stages (ASan in CI) and the parts add up. */
static void idle_time_of_a_dualpipe_timeline_stays_on_each_route(void)
{
    pp_schedule *s = tm_schedule(PP_DUALPIPE, 4, 2, 8);
    pp_sim_costs c;
    pp_sim_result *res = NULL;
    pp_timeline tl[4];
    double *rdy[4];
    pp_idle idle[4];
    pp_error err;
    int r;
    if (!s) return;
    memset(&c, 0, sizeof c);
    c.f = 1; c.b = 2;
    PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
    sim_timelines(s, res, tl, rdy);
    PP_CHECK_OK(pp_timeline_idle(tl, 4, idle, &err), &err);
    for (r = 0; r < 4; r++) {
        PP_CHECK_NEAR(idle[r].wait_transfer, 0, 1e-12);   /* free transfers */
        PP_CHECK_NEAR(idle[r].busy + idle[r].wait_compute + idle[r].wait_transfer + idle[r].wait_other + idle[r].tail,
                      idle[r].step, 1e-12);
    }
    pp_sim_result_free(res);
    pp_schedule_free(s);
}

/* On a real run (threads) the parts add up to the step on every rank, and rank 1 of ZB-V waits
 * for rank 0's first forward before its own first action. */
static void idle_time_of_a_threads_run_adds_up_to_the_step(void)
{
    pp_schedule *s = tm_schedule(PP_ZBV, 2, 2, 4);
    tm_run *run;
    pp_timeline tl[2];
    pp_idle idle[2];
    pp_error err;
    int r;
    if (!s) return;
    run = tm_new(s, 2);
    run->record = 1;
    run->keep = 1;
    PP_CHECK_OK(tm_go(run, &err), &err);
    for (r = 0; r < 2; r++) {
        PP_CHECK_OK(pp_executor_timeline(run->ex[r], &tl[r], &err), &err);
        tl[r].schedule = s;
    }
    PP_CHECK_OK(pp_timeline_idle(tl, 2, idle, &err), &err);
    for (r = 0; r < 2; r++) {
        double sum = idle[r].busy + idle[r].wait_compute + idle[r].wait_transfer + idle[r].wait_other + idle[r].tail;
        PP_CHECK(idle[r].step > 0 && idle[r].busy > 0);
        PP_CHECK(idle[r].wait_compute >= 0 && idle[r].wait_transfer >= 0 && idle[r].wait_other >= 0 && idle[r].tail >= -1e-9);
        PP_CHECK_MSG(fabs(sum - idle[r].step) <= 1e-6 * idle[r].step + 1e-9, "rank %d: parts %.9f, step %.9f", r, sum,
                     idle[r].step);
    }
    PP_CHECK_MSG(idle[1].wait_compute > 0, "rank 1 waited %.9f s for rank 0's compute", idle[1].wait_compute);
    for (r = 0; r < 2; r++) pp_executor_free(run->ex[r]);
    tm_free(run);
    pp_schedule_free(s);
}

/* Every kind, random per-action times: with free transfers no wait is ever put on a transfer
 * (each input is there the moment its producer ends, so a wrong producer would show up as
 * one); with a transfer time every part stays >= 0; the parts always add up to the step. */
static void idle_time_of_random_timelines_of_every_kind_adds_up(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_ZB_H1, PP_ZBV,
                                              PP_DUALPIPEV, PP_INTERLEAVED_ZB, PP_DUALPIPE };
    unsigned seed = 12345;
    int k, trial;
    for (k = 0; k < (int)(sizeof kinds / sizeof kinds[0]); k++)
        for (trial = 0; trial < 6; trial++) {
            int pp = 2 + trial % 3, vpp = kinds[k] == PP_INTERLEAVED_1F1B || kinds[k] == PP_INTERLEAVED_ZB ? 2 : 1;
            int mb = kinds[k] == PP_DUALPIPE || kinds[k] == PP_DUALPIPEV ? 2 * pp : 2 * pp + trial;
            pp_schedule *s;
            pp_sim_costs c;
            pp_sim_result *res = NULL;
            pp_timeline tl[4];
            double *rdy[4], *cost[4];
            pp_idle idle[4];
            pp_error err;
            int r, i, lat;
            if (kinds[k] == PP_ZBV || kinds[k] == PP_DUALPIPEV || kinds[k] == PP_DUALPIPE) vpp = 2;
            if (kinds[k] == PP_DUALPIPE && pp % 2) pp = 2;
            if (kinds[k] == PP_DUALPIPE) mb = 2 * pp;
            s = tm_schedule(kinds[k], pp, vpp, mb);
            if (!s) continue;
            for (r = 0; r < pp; r++) {
                cost[r] = (double *)calloc((size_t)s->length[r] + 1, sizeof(double));
                for (i = 0; i < s->length[r]; i++) {
                    seed = seed * 1103515245u + 12345u;
                    cost[r][i] = 0.5 + (double)((seed >> 16) % 1000) / 1000.0;
                }
            }
            for (lat = 0; lat < 2; lat++) {
                memset(&c, 0, sizeof c);
                c.action_cost = (const double *const *)cost;
                c.p2p_latency = lat ? 0.3 : 0;
                res = NULL;
                PP_CHECK_OK(pp_simulate(s, &c, &res, &err), &err);
                if (!res) continue;
                sim_timelines(s, res, tl, rdy);
                PP_CHECK_OK(pp_timeline_idle(tl, pp, idle, &err), &err);
                for (r = 0; r < pp; r++) {
                    double sum = idle[r].busy + idle[r].wait_compute + idle[r].wait_transfer + idle[r].wait_other +
                                 idle[r].tail;
                    PP_CHECK_MSG(fabs(sum - idle[r].step) < 1e-9 * (1 + idle[r].step), "%s pp %d rank %d: %.12f vs %.12f",
                                 pp_schedule_kind_name(kinds[k]), pp, r, sum, idle[r].step);
                    PP_CHECK(idle[r].wait_compute >= 0 && idle[r].wait_transfer >= 0 && idle[r].wait_other >= 0 &&
                             idle[r].tail >= -1e-12);
                    if (!lat)
                        PP_CHECK_MSG(idle[r].wait_transfer < 1e-12 && idle[r].wait_other < 1e-12,
                                     "%s pp %d rank %d, free transfers: %.9f waiting for transfers, %.9f other",
                                     pp_schedule_kind_name(kinds[k]), pp, r, idle[r].wait_transfer, idle[r].wait_other);
                }
                pp_sim_result_free(res);
            }
            for (r = 0; r < pp; r++) free(cost[r]);
            pp_schedule_free(s);
        }
}

const pp_test_case pp_suite_runtime[] = {
    PP_TEST(every_schedule_kind_gives_single_stage_loss_and_gradients),
    PP_TEST(split_backward_i_then_w_gives_single_stage_gradients),
    PP_TEST(receives_name_how_long_their_buffer_has_been_free),
    PP_TEST(outputs_said_in_parts_reach_their_sends),
    PP_TEST(output_ready_refuses_misuse),
    PP_TEST(independent_peers_wait_only_for_the_input_s_peer),
    PP_TEST(searched_and_greedy_schedules_give_single_stage_gradients),
    PP_TEST(overlapped_fb_actions_give_single_stage_gradients),
    PP_TEST(split_dualpipev_gives_single_stage_gradients),
    PP_TEST(split_backward_gives_single_stage_gradients),
    PP_TEST(same_rank_neighbours_pass_tensors_in_place),
    PP_TEST(pp_1_runs_through_the_same_calls),
    PP_TEST(loss_and_metrics_reach_every_rank),
    PP_TEST(forward_only_outputs_equal_single_stage_outputs_in_microbatch_order),
    PP_TEST(dualpipe_sums_both_weight_copies_to_the_single_stage_gradients),
    PP_TEST(padded_batch_gives_the_loss_and_gradients_of_its_real_rows),
    PP_TEST(shapes_may_change_between_steps_and_microbatches),
    PP_TEST(the_pool_stays_within_the_planned_slots_and_a_steady_step_allocates_nothing),
    PP_TEST(saved_state_slots_are_never_shared_and_number_the_live_peak),
    PP_TEST(chunk_done_follows_each_chunks_last_backward_once_per_step),
    PP_TEST(chunk_done_comes_after_the_sends_that_follow_it),
    PP_TEST(an_unsplit_backward_runs_split_schedules_to_the_split_gradients),
    PP_TEST(executor_refuses_half_a_split_backward),
    PP_TEST(data_parallel_pipelines_run_on_group_transports_and_sum_over_dp),
    PP_TEST(a_recipe_runs_steps_of_3_8_5_8_microbatches_to_single_stage_gradients),
    PP_TEST(a_recipe_step_of_a_count_the_kind_refuses_fails_with_its_reason),
    PP_TEST(ranks_that_disagree_on_num_mb_are_named_with_both_counts),
    PP_TEST(executor_takes_a_schedule_or_a_recipe_and_checks_num_mb),
    PP_TEST(a_failing_callback_stops_every_rank_at_once),
    PP_TEST(a_rank_that_stops_mid_step_makes_the_others_time_out),
    PP_TEST(mismatched_schedules_are_reported_before_any_tensor_moves),
    PP_TEST(ranks_that_disagree_on_a_tensor_size_are_reported),
    PP_TEST(a_failed_step_leaves_the_executor_refusing_more),
    PP_TEST(bad_executor_configs_name_the_field),
    PP_TEST(threads_transport_matches_messages_by_source_and_tag),
    PP_TEST(threads_all_reduce_sums_over_ranks_round_after_round),
    PP_TEST(transfer_tags_name_direction_stage_microbatch_and_step),
    PP_TEST(the_timeline_orders_each_rank_and_exports_a_chrome_trace),
    PP_TEST(an_fb_run_as_f_then_b_marks_each_timer_index_once),
    PP_TEST(idle_time_splits_into_the_peers_compute_transfers_and_overhead),
    PP_TEST(idle_time_of_a_threads_run_adds_up_to_the_step),
    PP_TEST(idle_time_of_a_dualpipe_timeline_stays_on_each_route),
    PP_TEST(idle_time_of_random_timelines_of_every_kind_adds_up),
    { 0, 0 }
};
