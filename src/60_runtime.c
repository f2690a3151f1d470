
/* ============================================================================================
 * >>runtime (implementation)
 * ============================================================================================ */

#include <time.h>

/* --- >>transport (implementation): tags and the clock ------------------------------------- */

uint64_t pp_transfer_tag(int op, int stage, int mb, int step)
{
    return ((uint64_t)(unsigned)(step & 0xff) << 56) | ((uint64_t)(unsigned)(op & 0xff) << 48) |
           ((uint64_t)(unsigned)(stage & 0xffffff) << 24) | (uint64_t)(unsigned)(mb & 0xffffff);
}

int pp_transfer_tag_format(uint64_t tag, char *buf, size_t size)
{
    int step = (int)(tag >> 56), op = (int)((tag >> 48) & 0xff);
    int stage = (int)((tag >> 24) & 0xffffff), mb = (int)(tag & 0xffffff);
    return snprintf(buf, size, "%d%s%d (step %d)", stage, pp_op_name((pp_op)op), mb, step);
}

/* Seconds of a monotonic host clock. */
static double pp__now(void)
{
#if defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

/* --- >>threads (implementation) --------------------------------------------------------------
 * One mutex guards the whole world: the mailboxes (one singly linked FIFO per destination), the
 * abort state and the all-reduce. Each rank sleeps on its own condition variable (a message for
 * it arrived, or the world was aborted); all-reduce waiters sleep on reduce_cv. Conditions use
 * CLOCK_MONOTONIC so a change of the wall clock cannot stretch a deadline. */
#ifndef PIPEPAR_NO_THREADS
#include <pthread.h>
#include <errno.h>
#if !defined(CLOCK_MONOTONIC)
#error "pipepar: the threads transport needs POSIX clocks: compile with -D_POSIX_C_SOURCE=200809L (or -std=gnu99), or define PIPEPAR_NO_THREADS"
#endif

typedef struct pp__msg {
    struct pp__msg *next;
    int src;
    uint64_t tag;
    size_t bytes;   /* the payload follows the struct */
} pp__msg;

typedef struct pp__threads_rank {
    struct pp_threads_world *w;
    int rank;
} pp__threads_rank;

struct pp_threads_world {
    int world;
    pthread_mutex_t mu;
    pthread_cond_t *cv;             /* [world] */
    pthread_cond_t reduce_cv;
    pp__msg **head, **tail;         /* [world] mailbox of each destination rank */
    pp__threads_rank *ranks;        /* [world] the `user` of each rank's transport */
    int aborted, abort_rank;
    pp_status abort_status;
    char abort_reason[PP_ERROR_MESSAGE_SIZE];
    float *acc, *result;            /* all-reduce: running sum, last result */
    int acc_cap, arrived, count, count_rank;
    unsigned long generation;
    int cv_ready, mu_ready, reduce_ready;
};

/* A posted group: its receives, matched when waited or tested. A matched message is taken out
 * of the mailbox under the lock and copied into the receive buffer after unlocking, so a large
 * copy never holds up the other ranks. */
typedef struct pp__threads_group {
    int nrecv, matched;
    pp_transfer *recv;              /* [nrecv] */
    unsigned char *done;            /* [nrecv] */
    pp__msg **msg;                  /* [nrecv] matched, not yet copied */
} pp__threads_group;

static void pp__deadline(double timeout_s, struct timespec *ts)
{
    double t;
    clock_gettime(CLOCK_MONOTONIC, ts);
    t = (double)ts->tv_sec + 1e-9 * (double)ts->tv_nsec + (timeout_s > 0 ? timeout_s : 0);
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) { ts->tv_sec++; ts->tv_nsec -= 1000000000L; }
    if (ts->tv_nsec < 0) ts->tv_nsec = 0;
}

static pp_status pp__threads_aborted(pp_threads_world *w, int rank, pp_error *err)
{
    return pp__fail(err, PP_EABORTED, "rank %d: stopped because rank %d failed (%s): %s", rank, w->abort_rank,
                    pp_status_name(w->abort_status), w->abort_reason);
}

/* Abort with the world's mutex held. */
static void pp__threads_abort_locked(pp_threads_world *w, int rank, pp_status status, const char *reason)
{
    int r;
    if (w->aborted) return;
    w->aborted = 1;
    w->abort_rank = rank;
    w->abort_status = status;
    snprintf(w->abort_reason, sizeof w->abort_reason, "%s", reason ? reason : "");
    for (r = 0; r < w->world; r++) pthread_cond_broadcast(&w->cv[r]);
    pthread_cond_broadcast(&w->reduce_cv);
}

static void pp__threads_abort(void *user, pp_status status, const char *reason)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pthread_mutex_lock(&me->w->mu);
    pp__threads_abort_locked(me->w, me->rank, status, reason);
    pthread_mutex_unlock(&me->w->mu);
}

/* Copies the matched messages into their receive buffers (without the lock) and frees them. */
static void pp__threads_copy_out(pp__threads_group *g)
{
    int i;
    for (i = 0; i < g->nrecv; i++) {
        pp__msg *m = g->msg[i];
        if (!m) continue;
        if (m->bytes) memcpy(g->recv[i].buf, m + 1, m->bytes);
        PIPEPAR_FREE(m);
        g->msg[i] = NULL;
    }
}

static void pp__threads_group_free(pp__threads_group *g)
{
    int i;
    if (!g) return;
    if (g->msg) for (i = 0; i < g->nrecv; i++) PIPEPAR_FREE(g->msg[i]);
    PIPEPAR_FREE(g->recv); PIPEPAR_FREE(g->done); PIPEPAR_FREE(g->msg); PIPEPAR_FREE(g);
}

static pp_status pp__threads_post(void *user, const pp_transfer *xf, int count, void **handle, pp_error *err)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pp_threads_world *w = me->w;
    pp__msg **msgs = NULL;
    pp__threads_group *g = NULL;
    int i, nsend = 0, nrecv = 0, k;
    char tagtxt[64];
    if (!handle || (count > 0 && !xf)) return pp__fail(err, PP_EINVAL, "post: transfers and handle must not be NULL");
    *handle = NULL;
    for (i = 0; i < count; i++) {
        if (xf[i].peer < 0 || xf[i].peer >= w->world) {
            pp_transfer_tag_format(xf[i].tag, tagtxt, sizeof tagtxt);
            return pp__fail(err, PP_EINVAL, "rank %d: transfer %s: peer=%d, must be between 0 and %d", me->rank,
                            tagtxt, xf[i].peer, w->world - 1);
        }
        if (xf[i].bytes > 0 && !xf[i].buf)
            return pp__fail(err, PP_EINVAL, "rank %d: transfer %d: buf is NULL for %zu bytes", me->rank, i, xf[i].bytes);
        if (xf[i].is_send) nsend++; else nrecv++;
    }
    /* copy the sends and set up the receives outside the lock */
    g = (pp__threads_group *)pp__calloc(1, sizeof *g);
    msgs = (pp__msg **)pp__calloc((size_t)(nsend > 0 ? nsend : 1), sizeof(pp__msg *));
    if (g) {
        g->recv = (pp_transfer *)pp__calloc((size_t)(nrecv > 0 ? nrecv : 1), sizeof(pp_transfer));
        g->done = (unsigned char *)pp__calloc((size_t)(nrecv > 0 ? nrecv : 1), 1);
        g->msg = (pp__msg **)pp__calloc((size_t)(nrecv > 0 ? nrecv : 1), sizeof(pp__msg *));
    }
    if (!g || !msgs || !g->recv || !g->done || !g->msg) goto oom;
    for (i = 0, k = 0; i < count; i++) {
        if (!xf[i].is_send) { g->recv[g->nrecv++] = xf[i]; continue; }
        if (xf[i].bytes > SIZE_MAX - sizeof(pp__msg)) goto oom;
        msgs[k] = (pp__msg *)PIPEPAR_MALLOC(sizeof(pp__msg) + xf[i].bytes);
        if (!msgs[k]) goto oom;
        msgs[k]->next = NULL;
        msgs[k]->src = me->rank;
        msgs[k]->tag = xf[i].tag;
        msgs[k]->bytes = xf[i].bytes;
        if (xf[i].bytes) memcpy(msgs[k] + 1, xf[i].buf, xf[i].bytes);
        msgs[k]->src = me->rank;
        k++;
    }
    pthread_mutex_lock(&w->mu);
    if (w->aborted) {
        pp_status st = pp__threads_aborted(w, me->rank, err);
        pthread_mutex_unlock(&w->mu);
        for (k = 0; k < nsend; k++) PIPEPAR_FREE(msgs[k]);
        PIPEPAR_FREE(msgs);
        pp__threads_group_free(g);
        return st;
    }
    for (i = 0, k = 0; i < count; i++) {
        int to;
        if (!xf[i].is_send) continue;
        to = xf[i].peer;
        if (w->tail[to]) w->tail[to]->next = msgs[k]; else w->head[to] = msgs[k];
        w->tail[to] = msgs[k];
        pthread_cond_broadcast(&w->cv[to]);
        k++;
    }
    pthread_mutex_unlock(&w->mu);
    PIPEPAR_FREE(msgs);
    *handle = g;
    return pp__ok(err);
oom:
    if (msgs) for (k = 0; k < nsend; k++) PIPEPAR_FREE(msgs[k]);
    PIPEPAR_FREE(msgs);
    pp__threads_group_free(g);
    return pp__fail(err, PP_ENOMEM, "rank %d: out of memory posting %d transfers", me->rank, count);
}


/* Matches what can be matched of g's receives (mutex held): takes the messages out of the
 * mailbox into g->msg. PP_OK, or PP_ETRANSPORT when a message with the right tag has the wrong
 * size. */
static pp_status pp__threads_match(pp_threads_world *w, int rank, pp__threads_group *g, pp_error *err)
{
    int i;
    for (i = 0; i < g->nrecv; i++) {
        pp__msg *m, *prev = NULL;
        if (g->done[i]) continue;
        for (m = w->head[rank]; m; prev = m, m = m->next)
            if (m->src == g->recv[i].peer && m->tag == g->recv[i].tag) break;
        if (!m) continue;
        if (prev) prev->next = m->next; else w->head[rank] = m->next;
        if (w->tail[rank] == m) w->tail[rank] = prev;
        if (m->bytes != g->recv[i].bytes) {
            char tagtxt[64];
            pp_status st;
            pp_transfer_tag_format(m->tag, tagtxt, sizeof tagtxt);
            st = pp__fail(err, PP_ETRANSPORT,
                          "rank %d: the tensor %s from rank %d has %zu bytes, but this rank expects %zu "
                          "(tensor_bytes differs between the ranks)", rank, tagtxt, m->src, m->bytes,
                          g->recv[i].bytes);
            PIPEPAR_FREE(m);
            return st;
        }
        g->msg[i] = m;
        g->done[i] = 1;
        g->matched++;
    }
    return PP_OK;
}

static pp_status pp__threads_wait(void *user, void *handle, double timeout_s, pp_error *err)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pp_threads_world *w = me->w;
    pp__threads_group *g = (pp__threads_group *)handle;
    struct timespec deadline;
    pp_status st = PP_OK;
    if (!g) return pp__fail(err, PP_EINVAL, "rank %d: wait: handle is NULL", me->rank);
    pp__deadline(timeout_s, &deadline);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int rc;
        if (w->aborted) { st = pp__threads_aborted(w, me->rank, err); break; }
        st = pp__threads_match(w, me->rank, g, err);
        if (st != PP_OK) { pp__threads_abort_locked(w, me->rank, st, err ? err->message : "size mismatch"); break; }
        if (g->matched == g->nrecv) break;
        rc = pthread_cond_timedwait(&w->cv[me->rank], &w->mu, &deadline);
        if (rc == ETIMEDOUT) {
            st = pp__threads_match(w, me->rank, g, err);
            if (st != PP_OK) { pp__threads_abort_locked(w, me->rank, st, err ? err->message : "size mismatch"); break; }
            if (g->matched == g->nrecv) break;
            if (w->aborted) { st = pp__threads_aborted(w, me->rank, err); break; }
            {
                char want[64], queued[64];
                pp__msg *m;
                int i;
                for (i = 0; i < g->nrecv && g->done[i]; i++) {}
                pp_transfer_tag_format(g->recv[i].tag, want, sizeof want);
                for (m = w->head[me->rank]; m && m->src != g->recv[i].peer; m = m->next) {}
                if (m) pp_transfer_tag_format(m->tag, queued, sizeof queued);
                st = pp__fail(err, PP_ETIMEOUT, "rank %d: timed out after %.3g s waiting for rank %d to send %s%s%s%s",
                              me->rank, timeout_s, g->recv[i].peer, want,
                              m ? "; the oldest message queued from that rank is " : "", m ? queued : "",
                              m ? " (do the ranks run the same schedule?)" : "");
            }
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (st == PP_OK) pp__threads_copy_out(g);
    pp__threads_group_free(g);
    return st == PP_OK ? pp__ok(err) : st;
}

static pp_status pp__threads_test(void *user, void *handle, int *done, pp_error *err)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pp_threads_world *w = me->w;
    pp__threads_group *g = (pp__threads_group *)handle;
    pp_status st;
    if (!g || !done) return pp__fail(err, PP_EINVAL, "rank %d: test: handle and done must not be NULL", me->rank);
    *done = 0;
    pthread_mutex_lock(&w->mu);
    if (w->aborted) st = pp__threads_aborted(w, me->rank, err);
    else {
        st = pp__threads_match(w, me->rank, g, err);
        if (st != PP_OK) pp__threads_abort_locked(w, me->rank, st, err ? err->message : "size mismatch");
    }
    pthread_mutex_unlock(&w->mu);
    if (st != PP_OK) { pp__threads_group_free(g); *done = 1; return st; }
    pp__threads_copy_out(g);   /* what matched so far; the rest arrives later */
    if (g->matched == g->nrecv) { pp__threads_group_free(g); *done = 1; }
    return pp__ok(err);
}

/* Sum over ranks: the first rank to arrive zeroes the accumulator; the last publishes the sum
 * and bumps the generation, which wakes the others. A rank cannot start the next reduction's
 * publication before everyone has left this one (it needs them all to arrive again). */
static pp_status pp__threads_all_reduce(void *user, float *values, int count, double timeout_s, pp_error *err)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pp_threads_world *w = me->w;
    struct timespec deadline;
    unsigned long gen;
    pp_status st = PP_OK;
    int i;
    if (count < 0 || (count > 0 && !values))
        return pp__fail(err, PP_EINVAL, "rank %d: all_reduce: count=%d with values=%p", me->rank, count, (void *)values);
    pp__deadline(timeout_s, &deadline);
    pthread_mutex_lock(&w->mu);
    if (w->aborted) { st = pp__threads_aborted(w, me->rank, err); goto out; }
    if (w->arrived == 0) {
        if (count > w->acc_cap) {
            float *a = (float *)PIPEPAR_REALLOC(w->acc, (size_t)count * sizeof(float));
            float *r;
            if (a) w->acc = a;
            r = (float *)PIPEPAR_REALLOC(w->result, (size_t)count * sizeof(float));
            if (r) w->result = r;
            if (!a || !r) {
                st = pp__fail(err, PP_ENOMEM, "rank %d: all_reduce: out of memory", me->rank);
                pp__threads_abort_locked(w, me->rank, st, err ? err->message : "out of memory");
                goto out;
            }
            w->acc_cap = count;
        }
        for (i = 0; i < count; i++) w->acc[i] = 0;
        w->count = count;
        w->count_rank = me->rank;
    } else if (count != w->count) {
        st = pp__fail(err, PP_EINVAL, "rank %d: all_reduce of %d values, but rank %d reduces %d "
                      "(the ranks are not running the same program)", me->rank, count, w->count_rank, w->count);
        pp__threads_abort_locked(w, me->rank, st, err ? err->message : "all_reduce count mismatch");
        goto out;
    }
    for (i = 0; i < count; i++) w->acc[i] += values[i];
    gen = w->generation;
    if (++w->arrived == w->world) {
        if (count) memcpy(w->result, w->acc, (size_t)count * sizeof(float));
        w->arrived = 0;
        w->generation++;
        pthread_cond_broadcast(&w->reduce_cv);
    } else {
        while (w->generation == gen && !w->aborted) {
            if (pthread_cond_timedwait(&w->reduce_cv, &w->mu, &deadline) == ETIMEDOUT && w->generation == gen) {
                if (w->aborted) break;
                st = pp__fail(err, PP_ETIMEOUT, "rank %d: all_reduce timed out after %.3g s: %d of %d ranks arrived",
                              me->rank, timeout_s, w->arrived, w->world);
                pp__threads_abort_locked(w, me->rank, st, err ? err->message : "all_reduce timed out");
                goto out;
            }
        }
        if (w->generation == gen) { st = pp__threads_aborted(w, me->rank, err); goto out; }
    }
    if (count) memcpy(values, w->result, (size_t)count * sizeof(float));
out:
    pthread_mutex_unlock(&w->mu);
    return st == PP_OK ? pp__ok(err) : st;
}

void pp_threads_world_free(pp_threads_world *w)
{
    int r;
    if (!w) return;
    if (w->head)
        for (r = 0; r < w->world; r++) {
            pp__msg *m = w->head[r];
            while (m) { pp__msg *n = m->next; PIPEPAR_FREE(m); m = n; }
        }
    if (w->cv) for (r = 0; r < w->cv_ready; r++) pthread_cond_destroy(&w->cv[r]);
    if (w->reduce_ready) pthread_cond_destroy(&w->reduce_cv);
    if (w->mu_ready) pthread_mutex_destroy(&w->mu);
    PIPEPAR_FREE(w->cv); PIPEPAR_FREE(w->head); PIPEPAR_FREE(w->tail); PIPEPAR_FREE(w->ranks);
    PIPEPAR_FREE(w->acc); PIPEPAR_FREE(w->result);
    PIPEPAR_FREE(w);
}

pp_status pp_threads_world_create(int world, pp_threads_world **out, pp_error *err)
{
    pp_threads_world *w;
    pthread_condattr_t attr;
    int r, ok = 1;
    if (!out) return pp__fail(err, PP_EINVAL, "out: must not be NULL");
    *out = NULL;
    if (world < 1 || world > 4096) return pp__fail(err, PP_EINVAL, "world=%d: must be between 1 and 4096", world);
    w = (pp_threads_world *)pp__calloc(1, sizeof *w);
    if (!w) return pp__fail(err, PP_ENOMEM, "out of memory");
    w->world = world;
    w->cv = (pthread_cond_t *)pp__calloc((size_t)world, sizeof(pthread_cond_t));
    w->head = (pp__msg **)pp__calloc((size_t)world, sizeof(pp__msg *));
    w->tail = (pp__msg **)pp__calloc((size_t)world, sizeof(pp__msg *));
    w->ranks = (pp__threads_rank *)pp__calloc((size_t)world, sizeof(pp__threads_rank));
    if (!w->cv || !w->head || !w->tail || !w->ranks) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    if (pthread_mutex_init(&w->mu, NULL) != 0) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "pthread_mutex_init failed"); }
    w->mu_ready = 1;
    if (pthread_condattr_init(&attr) != 0) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "pthread_condattr_init failed"); }
#if defined(CLOCK_MONOTONIC) && !defined(__APPLE__)
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
#endif
    for (r = 0; r < world && ok; r++) {
        if (pthread_cond_init(&w->cv[r], &attr) != 0) ok = 0; else w->cv_ready++;
        w->ranks[r].w = w;
        w->ranks[r].rank = r;
    }
    if (ok && pthread_cond_init(&w->reduce_cv, &attr) == 0) w->reduce_ready = 1; else ok = 0;
    pthread_condattr_destroy(&attr);
    if (!ok) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "pthread_cond_init failed"); }
    *out = w;
    return pp__ok(err);
}

pp_status pp_threads_transport(pp_threads_world *w, int rank, pp_transport *out, pp_error *err)
{
    if (!w || !out) return pp__fail(err, PP_EINVAL, "world and out: must not be NULL");
    if (rank < 0 || rank >= w->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1=%d", rank, w->world - 1);
    memset(out, 0, sizeof *out);
    out->user = &w->ranks[rank];
    out->rank = rank;
    out->world = w->world;
    out->post = pp__threads_post;
    out->wait = pp__threads_wait;
    out->test = pp__threads_test;
    out->all_reduce = pp__threads_all_reduce;
    out->abort = pp__threads_abort;
    return pp__ok(err);
}

typedef struct pp__thread_arg {
    pp_rank_fn fn;
    void *user;
    int rank;
    pp_transport transport;
    pp_status status;
    pp_error err;
} pp__thread_arg;

static void *pp__thread_main(void *p)
{
    pp__thread_arg *a = (pp__thread_arg *)p;
    a->err.status = PP_OK;
    a->err.message[0] = '\0';
    a->status = a->fn(a->user, a->rank, &a->transport, &a->err);
    if (a->status != PP_OK && a->err.message[0] == '\0')
        snprintf(a->err.message, sizeof a->err.message, "%s", pp_status_description(a->status));
    return NULL;
}

pp_status pp_threads_run(int world, pp_rank_fn fn, void *user, pp_status *status, pp_error *errors, pp_error *err)
{
    pp_threads_world *w = NULL;
    pp__thread_arg *args = NULL;
    pthread_t *tid = NULL;
    pp_status st;
    int r, started = 0, root = -1;
    if (!fn) return pp__fail(err, PP_EINVAL, "fn: must not be NULL");
    st = pp_threads_world_create(world, &w, err);
    if (st != PP_OK) return st;
    args = (pp__thread_arg *)pp__calloc((size_t)world, sizeof *args);
    tid = (pthread_t *)pp__calloc((size_t)world, sizeof *tid);
    if (!args || !tid) {
        PIPEPAR_FREE(args); PIPEPAR_FREE(tid); pp_threads_world_free(w);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    for (r = 0; r < world; r++) {
        args[r].fn = fn; args[r].user = user; args[r].rank = r;
        pp_threads_transport(w, r, &args[r].transport, NULL);
        args[r].status = PP_EABORTED;
        snprintf(args[r].err.message, sizeof args[r].err.message, "rank %d: thread not started", r);
    }
    for (r = 0; r < world; r++) {
        if (pthread_create(&tid[r], NULL, pp__thread_main, &args[r]) != 0) {
            pp__threads_abort(&w->ranks[r], PP_ENOMEM, "could not start a thread");
            break;
        }
        started++;
    }
    for (r = 0; r < started; r++) pthread_join(tid[r], NULL);
    if (started < world) {
        st = pp__fail(err, PP_ENOMEM, "pthread_create failed for rank %d of %d", started, world);
    } else {
        /* the root cause: the rank that aborted the world first, else the first failure */
        if (w->aborted && args[w->abort_rank].status != PP_OK) root = w->abort_rank;
        for (r = 0; r < world && root < 0; r++)
            if (args[r].status != PP_OK && args[r].status != PP_EABORTED) root = r;
        for (r = 0; r < world && root < 0; r++)
            if (args[r].status != PP_OK) root = r;
        if (root >= 0)
            st = pp__fail(err, args[root].status, "rank %d: %s", root, args[root].err.message);
        else
            st = pp__ok(err);
    }
    for (r = 0; r < world; r++) {
        if (status) status[r] = args[r].status;
        if (errors) { errors[r] = args[r].err; errors[r].status = args[r].status; }
    }
    PIPEPAR_FREE(args); PIPEPAR_FREE(tid);
    pp_threads_world_free(w);
    return st;
}
#endif /* PIPEPAR_NO_THREADS */

/* --- >>executor (implementation) -------------------------------------------------------------
 * State of a step, per (chunk c, microbatch m) of this rank, k = c * mb + m; each entry is a
 * slot index or -1:
 *     in[k]     x_s: the stage's input (received, passed in place, or read by input())
 *     gout[k]   dLoss/d(stage output): received, passed in place, or written by loss()
 *     sendf[k]  F's output waiting for its SEND_F;  sendb[k]  B's input-gradient for SEND_B
 *     in_group[k], gout_group[k]   the group whose completion makes in/gout valid, or -1
 * Groups are waited in posting order (FIFO, as they finish on one NCCL stream): waiting for
 * group g waits for every older one too, and then releases the buffers their sends used.
 * The same walk runs once at setup without callbacks or transport ("planning"), which counts
 * the peak number of live tensors; the pool reserves that many slots. */

typedef struct pp__slot {
    void *ptr;
    size_t cap;     /* bytes allocated */
    size_t bytes;   /* bytes of the tensor now held */
    int used;
    long long free_since;   /* groups_posted when released: no work issued on it after that post */
} pp__slot;

typedef struct pp__group {
    void *handle;
    int first, end;             /* program positions of its actions */
    int rel_begin, rel_end;     /* range of ex->release: slots its sends read */
    int done;
} pp__group;

struct pp_executor {
    pp_schedule *sched;
    const pp_action *prog;
    int rank, len, S, M, vpp, world;
    pp_transport tp;
    pp_callbacks cb;
    pp_allocator al;
    pp_timer timer;
    double timeout;
    int num_metrics, record, has_split, has_b;
    uint64_t hash;
    int steps, failed, planning;
    int in_fb_second_half;      /* an FB without its own callback is running its B half */
    /* the pool */
    pp__slot *slots;
    int nslots, cap_slots, live, peak_live, planned;
    long long allocations, transfers_posted, groups_posted;
    size_t bytes_held;
    /* per-step state */
    int *in, *gout, *sendf, *sendb, *in_group, *gout_group;   /* [vpp * M] */
    int *out_slot;                                             /* [M] forward-only outputs */
    void **out_ptr;
    size_t *out_bytes;
    pp__group *groups;
    int ngroups, cap_groups, next_wait;
    int *release;
    int nrelease, cap_release;
    pp_transfer *xfers;
    int cap_xfers;
    /* the step being run */
    const pp_step *step;
    int forward_only;
    double loss_sum, weight_sum, metric_sum[PP_MAX_METRICS];
    /* timeline */
    double *times;                  /* [3 * len] */
    double *t_start, *t_ready, *t_end;
    int timeline_valid;
};

/* --- the pool --- */

static void pp__pool_free_memory(pp_executor *ex)
{
    int i;
    for (i = 0; i < ex->nslots; i++) {
        if (ex->slots[i].ptr) {
            if (ex->al.free) ex->al.free(ex->al.user, ex->slots[i].ptr, ex->slots[i].cap);
            else PIPEPAR_FREE(ex->slots[i].ptr);
        }
        ex->slots[i].ptr = NULL;
        ex->slots[i].cap = 0;
        ex->slots[i].used = 0;
    }
    ex->bytes_held = 0;
}

static void *pp__alloc(pp_executor *ex, size_t bytes)
{
    ex->allocations++;
    return ex->al.alloc ? ex->al.alloc(ex->al.user, bytes) : PIPEPAR_MALLOC(bytes);
}

/* A slot holding `bytes` bytes: the smallest free slot that fits, else a free slot without
 * memory, else the largest free slot regrown, else a new slot (only past the planned peak).
 * Returns the slot index, or -1 with *st set. */
static int pp__acquire(pp_executor *ex, size_t bytes, pp_status *st, pp_error *err)
{
    int i, fit = -1, empty = -1, big = -1;
    pp__slot *sl;
    *st = PP_OK;
    for (i = 0; i < ex->nslots; i++) {
        sl = &ex->slots[i];
        if (sl->used) continue;
        if (ex->planning) { fit = i; break; }
        /* the smallest that fits; of equal ones the longest free, whose receive may land earliest */
        if (sl->ptr && sl->cap >= bytes &&
            (fit < 0 || sl->cap < ex->slots[fit].cap ||
             (sl->cap == ex->slots[fit].cap && sl->free_since < ex->slots[fit].free_since)))
            fit = i;
        if (!sl->ptr && empty < 0) empty = i;
        if (sl->ptr && (big < 0 || sl->cap > ex->slots[big].cap)) big = i;
    }
    if (fit < 0 && bytes == 0 && (empty >= 0 || big >= 0)) fit = empty >= 0 ? empty : big;
    if (fit < 0) fit = empty >= 0 ? empty : big;
    if (fit < 0) {
        if (ex->nslots == ex->cap_slots) {
            int cap = ex->cap_slots ? 2 * ex->cap_slots : 8;
            pp__slot *ns = (pp__slot *)PIPEPAR_REALLOC(ex->slots, (size_t)cap * sizeof(pp__slot));
            if (!ns) { *st = pp__fail(err, PP_ENOMEM, "rank %d: out of memory (slot table)", ex->rank); return -1; }
            ex->slots = ns;
            ex->cap_slots = cap;
        }
        fit = ex->nslots++;
        memset(&ex->slots[fit], 0, sizeof(pp__slot));
    }
    sl = &ex->slots[fit];
    if (!ex->planning && bytes > sl->cap) {
        void *p;
        if (sl->ptr) {
            if (ex->al.free) ex->al.free(ex->al.user, sl->ptr, sl->cap); else PIPEPAR_FREE(sl->ptr);
            ex->bytes_held -= sl->cap;
            sl->ptr = NULL; sl->cap = 0;
        }
        p = pp__alloc(ex, bytes);
        if (!p) {
            *st = pp__fail(err, PP_ENOMEM, "rank %d: allocator failed for a tensor of %zu bytes", ex->rank, bytes);
            return -1;
        }
        sl->ptr = p; sl->cap = bytes;
        sl->free_since = ex->groups_posted;   /* an allocator may hand back memory just freed */
        ex->bytes_held += bytes;
    }
    sl->used = 1;
    sl->bytes = bytes;
    if (++ex->live > ex->peak_live) ex->peak_live = ex->live;
    return fit;
}

static void pp__release(pp_executor *ex, int slot)
{
    if (slot < 0) return;
    PIPEPAR_ASSERT(ex->slots[slot].used);
    ex->slots[slot].used = 0;
    ex->slots[slot].free_since = ex->groups_posted;
    ex->live--;
}

static void *pp__ptr(pp_executor *ex, int slot) { return slot >= 0 ? ex->slots[slot].ptr : NULL; }

/* --- timeline marks --- */

static void pp__mark(pp_executor *ex, int index)
{
    if (!ex->record || ex->planning) return;
    if (ex->in_fb_second_half && index % 3 == 1) return;   /* see pp__run_fb */
    if (ex->timer.mark) ex->timer.mark(ex->timer.user, index);
    else ex->times[index] = pp__now();
}

/* --- groups --- */

static void pp__group_finished(pp_executor *ex, int g)
{
    pp__group *gr = &ex->groups[g];
    int i;
    gr->done = 1;
    gr->handle = NULL;
    for (i = gr->rel_begin; i < gr->rel_end; i++) pp__release(ex, ex->release[i]);
    if (ex->record && !ex->planning)
        for (i = gr->first; i < gr->end; i++) pp__mark(ex, 3 * i + 2);
}

/* The message of a failure at program position i, with the transport's reason after it. */
static pp_status pp__at(pp_executor *ex, int i, pp_status st, pp_error *err, const char *what)
{
    char txt[64], inner[PP_ERROR_MESSAGE_SIZE];
    if (!err) return st;
    snprintf(inner, sizeof inner, "%s", err->message);
    if (i >= 0 && i < ex->len) pp_action_format(ex->prog[i], txt, sizeof txt);
    else snprintf(txt, sizeof txt, "end of step");
    return pp__fail(err, st, "rank %d position %d (%s) %s: %s", ex->rank, i, txt, what, inner);
}

/* Waits for groups next_wait..g (FIFO). `pos` is the program position that needs group g. */
static pp_status pp__wait_upto(pp_executor *ex, int g, int pos, pp_error *err)
{
    pp_status st;
    for (; ex->next_wait <= g; ex->next_wait++) {
        pp__group *gr = &ex->groups[ex->next_wait];
        if (gr->done) continue;
        if (!ex->planning) {
            char what[192], txt[64];
            pp_action_format(ex->prog[gr->first], txt, sizeof txt);
            st = ex->tp.wait(ex->tp.user, gr->handle, ex->timeout, err);
            gr->handle = NULL;
            gr->done = 1;
            if (st != PP_OK) {
                snprintf(what, sizeof what, "waiting for the group posted at position %d (%s%s)", gr->first, txt,
                         gr->end - gr->first > 1 ? ", ..." : "");
                return pp__at(ex, pos, st, err, what);
            }
        }
        pp__group_finished(ex, ex->next_wait);
    }
    return PP_OK;
}

/* Collects the groups that finished on their own (transport->test), in any order, so the
 * buffers their sends read go back to the pool early. */
static pp_status pp__try_reclaim(pp_executor *ex, pp_error *err)
{
    int g;
    if (!ex->tp.test) return PP_OK;
    for (g = ex->next_wait; g < ex->ngroups; g++) {
        int done = 0;
        pp_status st;
        if (ex->groups[g].done) continue;
        st = ex->tp.test(ex->tp.user, ex->groups[g].handle, &done, err);
        if (st != PP_OK) {
            ex->groups[g].handle = NULL;
            ex->groups[g].done = 1;
            return pp__at(ex, ex->groups[g].first, st, err, "testing its group");
        }
        if (done) pp__group_finished(ex, g);
    }
    while (ex->next_wait < ex->ngroups && ex->groups[ex->next_wait].done) ex->next_wait++;
    return PP_OK;
}

/* --- microbatch info --- */

static pp_mb_info pp__info(const pp_executor *ex, int stage, int m)
{
    pp_mb_info in;
    memset(&in, 0, sizeof in);
    in.rank = ex->rank;
    in.stage = stage;
    in.chunk = stage < ex->S ? pp_stage_chunk(ex->sched, stage) : -1;
    if (stage < ex->S && pp_stage_rank(ex->sched, stage) != ex->rank) in.chunk = -1;
    in.num_stages = ex->S;
    in.first_stage = pp__first(ex->sched, m);
    in.last_stage = pp__last(ex->sched, m);
    in.model_stage = stage - in.first_stage;
    in.mb = m;
    in.num_mb = ex->M;
    in.step = ex->steps;
    in.forward_only = ex->forward_only;
    if (ex->step) {
        if (ex->step->mb_meta) in.meta = ex->step->mb_meta[m];
        if (ex->step->batch_rows > 0) {
            int per = (ex->step->batch_rows + ex->M - 1) / ex->M, valid;
            in.batch_rows = ex->step->batch_rows;
            in.rows = per;
            in.first_row = m * per;
            valid = in.batch_rows - in.first_row;
            in.valid_rows = valid < 0 ? 0 : valid > per ? per : valid;
        }
    }
    return in;
}

static size_t pp__bytes(pp_executor *ex, int boundary, int m)
{
    pp_mb_info info;
    if (ex->planning) return 0;
    info = pp__info(ex, boundary, m);
    info.chunk = -1;
    return ex->cb.tensor_bytes(ex->cb.user, boundary, &info);
}

static pp_status pp__callback_failed(pp_executor *ex, int i, const char *name, int rc, pp_error *err)
{
    char txt[64];
    pp_action_format(ex->prog[i], txt, sizeof txt);
    return pp__fail(err, PP_ECALLBACK, "rank %d position %d (%s): the %s callback returned %d", ex->rank, i, txt,
                    name, rc);
}

static pp_status pp__missing(pp_executor *ex, int i, const char *what, pp_error *err)
{
    char txt[64];
    pp_action_format(ex->prog[i], txt, sizeof txt);
    return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d (%s): %s was never produced before it", ex->rank,
                    i, txt, what);
}

/* --- F and B halves --- */

typedef struct pp__fwd { int s, m, k, in, out; pp_mb_info info; } pp__fwd;
typedef struct pp__bwd { int s, m, k, in, gout, gin; pp_mb_info info; } pp__bwd;

#define PP__K(ex, s, m) (pp_stage_chunk((ex)->sched, (s)) * (ex)->M + (m))
#define PP__HERE(ex, s) (pp_stage_rank((ex)->sched, (s)) == (ex)->rank)

/* Whether this rank holds the last stage of some microbatch's route (the loss is computed here):
 * the last stage's rank, or under DualPipe's two routes ranks pp-1 (down) and 0 (up). */
static int pp__ends_a_route(const pp_executor *ex)
{
    return pp_stage_rank(ex->sched, pp__last(ex->sched, 0)) == ex->rank ||
           pp_stage_rank(ex->sched, pp__last(ex->sched, ex->M - 1)) == ex->rank;
}

/* Waits until F(s,m)'s input is here. */
static pp_status pp__f_wait(pp_executor *ex, int i, pp__fwd *f, int s, int m, pp_error *err)
{
    f->s = s; f->m = m; f->k = PP__K(ex, s, m); f->in = f->out = -1;
    f->info = pp__info(ex, s, m);
    if (s != f->info.first_stage) {
        if (ex->in_group[f->k] >= 0) {
            pp_status st = pp__wait_upto(ex, ex->in_group[f->k], i, err);
            if (st != PP_OK) return st;
            ex->in_group[f->k] = -1;
        }
        if (ex->in[f->k] < 0) return pp__missing(ex, i, "the input of this forward", err);
    }
    return PP_OK;
}

/* Reads the first stage's input and takes the output buffer. */
static pp_status pp__f_prepare(pp_executor *ex, int i, pp__fwd *f, pp_error *err)
{
    pp_status st;
    if (f->s == f->info.first_stage) {   /* the start of the microbatch's route: stage 0 but for DualPipe */
        f->in = pp__acquire(ex, pp__bytes(ex, f->s, f->m), &st, err);
        if (f->in < 0) return st;
        ex->in[f->k] = f->in;
        if (!ex->planning) {
            int rc = ex->cb.input(ex->cb.user, &f->info, pp__ptr(ex, f->in));
            if (rc) return pp__callback_failed(ex, i, "input", rc, err);
        }
    }
    f->in = ex->in[f->k];
    f->out = pp__acquire(ex, pp__bytes(ex, f->s + 1, f->m), &st, err);
    return f->out < 0 ? st : PP_OK;
}

/* After the forward: the loss on the last stage, then route the output. */
static pp_status pp__f_finish(pp_executor *ex, int i, pp__fwd *f, pp_error *err)
{
    pp_status st;
    if (f->s == f->info.last_stage) {
        int g = -1;
        if (!ex->forward_only) {
            g = pp__acquire(ex, pp__bytes(ex, f->s + 1, f->m), &st, err);
            if (g < 0) return st;
            ex->gout[f->k] = g;
            ex->gout_group[f->k] = -1;
        }
        if (!ex->planning && ex->cb.loss) {
            pp_loss l;
            int rc;
            memset(&l, 0, sizeof l);
            l.weight = f->info.batch_rows > 0 ? (float)f->info.valid_rows : 1.0f;
            rc = ex->cb.loss(ex->cb.user, &f->info, pp__ptr(ex, f->out), pp__ptr(ex, g), &l);
            if (rc) return pp__callback_failed(ex, i, "loss", rc, err);
            ex->loss_sum += l.loss;
            ex->weight_sum += l.weight;
            for (rc = 0; rc < ex->num_metrics; rc++) ex->metric_sum[rc] += l.metrics[rc];
        }
        if (ex->forward_only) ex->out_slot[f->m] = f->out;
        else pp__release(ex, f->out);
    } else if (PP__HERE(ex, f->s + 1)) {
        int k2 = PP__K(ex, f->s + 1, f->m);
        ex->in[k2] = f->out;             /* in place: the next stage reads this very buffer */
        ex->in_group[k2] = -1;
    } else {
        ex->sendf[f->k] = f->out;
    }
    if (ex->forward_only) { pp__release(ex, ex->in[f->k]); ex->in[f->k] = -1; }
    return PP_OK;
}

/* Waits until B/I(s,m)'s output-gradient is here. */
static pp_status pp__b_wait(pp_executor *ex, int i, pp__bwd *b, int s, int m, pp_error *err)
{
    b->s = s; b->m = m; b->k = PP__K(ex, s, m); b->gin = -1;
    b->info = pp__info(ex, s, m);
    if (ex->gout_group[b->k] >= 0) {
        pp_status st = pp__wait_upto(ex, ex->gout_group[b->k], i, err);
        if (st != PP_OK) return st;
        ex->gout_group[b->k] = -1;
    }
    b->in = ex->in[b->k];
    b->gout = ex->gout[b->k];
    if (b->in < 0) return pp__missing(ex, i, "the forward input this backward needs", err);
    if (b->gout < 0) return pp__missing(ex, i, "the output-gradient of this backward", err);
    return PP_OK;
}

static pp_status pp__b_prepare(pp_executor *ex, pp__bwd *b, pp_error *err)
{
    pp_status st = PP_OK;
    if (b->s > b->info.first_stage) {
        b->gin = pp__acquire(ex, pp__bytes(ex, b->s, b->m), &st, err);
        if (b->gin < 0) return st;
    }
    return PP_OK;
}

static void pp__b_finish(pp_executor *ex, pp__bwd *b, int full)
{
    if (b->s > b->info.first_stage) {
        if (PP__HERE(ex, b->s - 1)) {
            int k2 = PP__K(ex, b->s - 1, b->m);
            ex->gout[k2] = b->gin;       /* in place */
            ex->gout_group[k2] = -1;
        } else {
            ex->sendb[b->k] = b->gin;
        }
    }
    if (full) {
        pp__release(ex, b->in); ex->in[b->k] = -1;
        pp__release(ex, b->gout); ex->gout[b->k] = -1;
    }
}

static pp_status pp__run_f(pp_executor *ex, int i, int s, int m, pp_error *err)
{
    pp__fwd f;
    pp_status st = pp__f_wait(ex, i, &f, s, m, err);
    if (st != PP_OK) return st;
    pp__mark(ex, 3 * i + 1);
    if ((st = pp__f_prepare(ex, i, &f, err)) != PP_OK) return st;
    if (!ex->planning) {
        int rc = ex->cb.forward(ex->cb.user, &f.info, pp__ptr(ex, f.in), pp__ptr(ex, f.out));
        if (rc) return pp__callback_failed(ex, i, "forward", rc, err);
    }
    return pp__f_finish(ex, i, &f, err);
}

static pp_status pp__run_b(pp_executor *ex, int i, int op, int s, int m, pp_error *err)
{
    pp__bwd b;
    pp_status st = pp__b_wait(ex, i, &b, s, m, err);
    if (st != PP_OK) return st;
    pp__mark(ex, 3 * i + 1);
    if ((st = pp__b_prepare(ex, &b, err)) != PP_OK) return st;
    if (!ex->planning) {
        int rc = op == PP_OP_I
            ? ex->cb.backward_input(ex->cb.user, &b.info, pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin))
            : ex->cb.backward(ex->cb.user, &b.info, pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin));
        if (rc) return pp__callback_failed(ex, i, op == PP_OP_I ? "backward_input" : "backward", rc, err);
    }
    pp__b_finish(ex, &b, op == PP_OP_B);
    return PP_OK;
}

static pp_status pp__run_w(pp_executor *ex, int i, int s, int m, pp_error *err)
{
    int k = PP__K(ex, s, m);
    pp_mb_info info = pp__info(ex, s, m);
    pp__mark(ex, 3 * i + 1);
    if (ex->in[k] < 0 || ex->gout[k] < 0) return pp__missing(ex, i, "the I this weight-gradient follows", err);
    if (!ex->planning) {
        int rc = ex->cb.backward_weight(ex->cb.user, &info, pp__ptr(ex, ex->in[k]), pp__ptr(ex, ex->gout[k]));
        if (rc) return pp__callback_failed(ex, i, "backward_weight", rc, err);
    }
    pp__release(ex, ex->in[k]); ex->in[k] = -1;
    pp__release(ex, ex->gout[k]); ex->gout[k] = -1;
    return PP_OK;
}

/* FB: the F half and the B half, in one overlapped call when the user gave one. */
static pp_status pp__run_fb(pp_executor *ex, int i, pp_action a, pp_error *err)
{
    pp__fwd f;
    pp__bwd b;
    pp_status st;
    if (ex->forward_only) return pp__run_f(ex, i, a.stage, a.mb, err);
    if (!ex->cb.forward_backward) {
        /* F then B. The action's "inputs ready" time is its F half's: the B half's waits fall
         * inside the action, and each timer index is marked once (pp_timer's rule). */
        st = pp__run_f(ex, i, a.stage, a.mb, err);
        if (st != PP_OK) return st;
        ex->in_fb_second_half = 1;
        st = pp__run_b(ex, i, PP_OP_B, a.stage2, a.mb2, err);
        ex->in_fb_second_half = 0;
        return st;
    }
    if ((st = pp__f_wait(ex, i, &f, a.stage, a.mb, err)) != PP_OK) return st;
    if ((st = pp__b_wait(ex, i, &b, a.stage2, a.mb2, err)) != PP_OK) return st;
    pp__mark(ex, 3 * i + 1);
    if ((st = pp__f_prepare(ex, i, &f, err)) != PP_OK) return st;
    if ((st = pp__b_prepare(ex, &b, err)) != PP_OK) return st;
    if (!ex->planning) {
        int rc = ex->cb.forward_backward(ex->cb.user, &f.info, pp__ptr(ex, f.in), pp__ptr(ex, f.out), &b.info,
                                         pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin));
        if (rc) return pp__callback_failed(ex, i, "forward_backward", rc, err);
    }
    if ((st = pp__f_finish(ex, i, &f, err)) != PP_OK) return st;
    pp__b_finish(ex, &b, 1);
    return PP_OK;
}

static int pp__is_b_comm(int op) { return op == PP_OP_SEND_B || op == PP_OP_RECV_B; }

/* Posts the communication actions [i, j) as one group. */
static pp_status pp__post_group(pp_executor *ex, int i, int j, pp_error *err)
{
    pp_status st;
    pp__group *gr;
    int p, n = 0, g = ex->ngroups;
    if (ex->ngroups == ex->cap_groups) {
        int cap = ex->cap_groups ? 2 * ex->cap_groups : 16;
        pp__group *ng = (pp__group *)PIPEPAR_REALLOC(ex->groups, (size_t)cap * sizeof(pp__group));
        if (!ng) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (groups)", ex->rank);
        ex->groups = ng; ex->cap_groups = cap;
    }
    if (ex->nrelease + (j - i) > ex->cap_release) {
        int cap = ex->cap_release ? ex->cap_release : 16;
        int *nr;
        while (cap < ex->nrelease + (j - i)) cap *= 2;
        nr = (int *)PIPEPAR_REALLOC(ex->release, (size_t)cap * sizeof(int));
        if (!nr) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (groups)", ex->rank);
        ex->release = nr; ex->cap_release = cap;
    }
    gr = &ex->groups[g];
    memset(gr, 0, sizeof *gr);
    gr->first = i; gr->end = j;
    gr->rel_begin = gr->rel_end = ex->nrelease;
    for (p = i; p < j; p++) {
        pp_action a = ex->prog[p];
        pp_transfer *t = &ex->xfers[n];
        int k = PP__K(ex, a.stage, a.mb), slot;
        if (ex->forward_only && pp__is_b_comm(a.op)) continue;
        pp__mark(ex, 3 * p);
        pp__mark(ex, 3 * p + 1);
        memset(t, 0, sizeof *t);
        switch (a.op) {
        case PP_OP_SEND_F:
            slot = ex->sendf[k];
            if (slot < 0) return pp__missing(ex, p, "the output this send carries", err);
            ex->sendf[k] = -1;
            t->is_send = 1; t->peer = pp_stage_rank(ex->sched, a.stage + 1);
            t->tag = pp_transfer_tag(PP_OP_SEND_F, a.stage, a.mb, ex->steps);
            break;
        case PP_OP_SEND_B:
            slot = ex->sendb[k];
            if (slot < 0) return pp__missing(ex, p, "the input-gradient this send carries", err);
            ex->sendb[k] = -1;
            t->is_send = 1; t->peer = pp_stage_rank(ex->sched, a.stage - 1);
            t->tag = pp_transfer_tag(PP_OP_SEND_B, a.stage, a.mb, ex->steps);
            break;
        case PP_OP_RECV_F:
            slot = pp__acquire(ex, pp__bytes(ex, a.stage, a.mb), &st, err);
            if (slot < 0) return st;
            ex->in[k] = slot; ex->in_group[k] = g;
            t->peer = pp_stage_rank(ex->sched, a.stage - 1);
            t->tag = pp_transfer_tag(PP_OP_SEND_F, a.stage - 1, a.mb, ex->steps);
            break;
        default: /* PP_OP_RECV_B */
            slot = pp__acquire(ex, pp__bytes(ex, a.stage + 1, a.mb), &st, err);
            if (slot < 0) return st;
            ex->gout[k] = slot; ex->gout_group[k] = g;
            t->peer = pp_stage_rank(ex->sched, a.stage + 1);
            t->tag = pp_transfer_tag(PP_OP_SEND_B, a.stage + 1, a.mb, ex->steps);
            break;
        }
        if (t->is_send) ex->release[ex->nrelease++] = slot;
        else {
            long long idle = ex->groups_posted - ex->slots[slot].free_since;
            t->buf_free_posts = idle < 0 ? 0 : idle > 1000000 ? 1000000 : (int)idle;
        }
        t->buf = pp__ptr(ex, slot);
        t->bytes = ex->slots[slot].bytes;
        n++;
    }
    if (n == 0) return PP_OK;   /* forward only: a group of backward transfers */
    gr->rel_end = ex->nrelease;
    ex->ngroups++;
    if (ex->planning) return PP_OK;
    st = ex->tp.post(ex->tp.user, ex->xfers, n, &gr->handle, err);
    if (st != PP_OK) {
        gr->done = 1; gr->handle = NULL;
        return pp__at(ex, i, st, err, "posting its group");
    }
    ex->transfers_posted += n;
    ex->groups_posted++;
    return PP_OK;
}

/* Walks the program once. */
static pp_status pp__walk(pp_executor *ex, pp_error *err)
{
    pp_status st = PP_OK;
    int i = 0;
    while (i < ex->len && st == PP_OK) {
        pp_action a = ex->prog[i];
        if (pp__is_comm(a.op)) {
            int j = i;
            while (j < ex->len && pp__is_comm(ex->prog[j].op) && ex->prog[j].group == a.group) j++;
            st = pp__post_group(ex, i, j, err);
            i = j;
            continue;
        }
        if (ex->forward_only && (a.op == PP_OP_B || a.op == PP_OP_I || a.op == PP_OP_W)) { i++; continue; }
        pp__mark(ex, 3 * i);
        if (!ex->planning && ex->next_wait < ex->ngroups) {
            st = pp__try_reclaim(ex, err);   /* sends that finished give their buffers back */
            if (st != PP_OK) break;
        }
        switch (a.op) {
        case PP_OP_F: st = pp__run_f(ex, i, a.stage, a.mb, err); break;
        case PP_OP_B: case PP_OP_I: st = pp__run_b(ex, i, a.op, a.stage, a.mb, err); break;
        case PP_OP_W: st = pp__run_w(ex, i, a.stage, a.mb, err); break;
        default: st = pp__run_fb(ex, i, a, err); break;
        }
        if (st == PP_OK) pp__mark(ex, 3 * i + 2);
        i++;
    }
    if (st == PP_OK && ex->ngroups > 0) st = pp__wait_upto(ex, ex->ngroups - 1, ex->len, err);
    return st;
}

static void pp__reset_step(pp_executor *ex)
{
    int k, n = ex->vpp * ex->M;
    for (k = 0; k < n; k++) {
        ex->in[k] = ex->gout[k] = ex->sendf[k] = ex->sendb[k] = -1;
        ex->in_group[k] = ex->gout_group[k] = -1;
    }
    for (k = 0; k < ex->M; k++) {
        if (ex->out_slot[k] >= 0) pp__release(ex, ex->out_slot[k]);
        ex->out_slot[k] = -1;
        ex->out_ptr[k] = NULL;
        ex->out_bytes[k] = 0;
    }
    ex->ngroups = ex->next_wait = ex->nrelease = 0;
    ex->loss_sum = ex->weight_sum = 0;
    memset(ex->metric_sum, 0, sizeof ex->metric_sum);
}

/* Every slot back to free (after a failure or planning). */
static void pp__release_all(pp_executor *ex)
{
    int i;
    for (i = 0; i < ex->nslots; i++) { ex->slots[i].used = 0; ex->slots[i].free_since = ex->groups_posted; }
    for (i = 0; i < ex->M; i++) ex->out_slot[i] = -1;
    ex->live = 0;
}

/* FNV-1a over the schedule: everything a rank's partners rely on. */
static uint64_t pp__hash_ints(uint64_t h, const int32_t *v, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        uint32_t x = (uint32_t)v[i];
        int b;
        for (b = 0; b < 4; b++) { h ^= (x >> (8 * b)) & 0xffu; h *= 1099511628211ull; }
    }
    return h;
}

static uint64_t pp__schedule_hash(const pp_schedule *s)
{
    uint64_t h = 1469598103934665603ull;
    int32_t head[6];
    int r;
    head[0] = (int32_t)s->kind; head[1] = (int32_t)s->placement; head[2] = s->pp;
    head[3] = s->vpp; head[4] = s->mb; head[5] = s->group;
    h = pp__hash_ints(h, head, 6);
    for (r = 0; r < s->pp; r++) {
        int32_t len = s->length[r];
        h = pp__hash_ints(h, &len, 1);
        if (len) h = pp__hash_ints(h, (const int32_t *)(const void *)s->actions[r], (size_t)len * 5);
    }
    return h;
}

void pp_executor_free(pp_executor *ex)
{
    if (!ex) return;
    pp__pool_free_memory(ex);
    pp_schedule_free(ex->sched);
    PIPEPAR_FREE(ex->slots);
    PIPEPAR_FREE(ex->in); PIPEPAR_FREE(ex->gout); PIPEPAR_FREE(ex->sendf); PIPEPAR_FREE(ex->sendb);
    PIPEPAR_FREE(ex->in_group); PIPEPAR_FREE(ex->gout_group);
    PIPEPAR_FREE(ex->out_slot); PIPEPAR_FREE(ex->out_ptr); PIPEPAR_FREE(ex->out_bytes);
    PIPEPAR_FREE(ex->groups); PIPEPAR_FREE(ex->release); PIPEPAR_FREE(ex->xfers);
    PIPEPAR_FREE(ex->times); PIPEPAR_FREE(ex->t_start); PIPEPAR_FREE(ex->t_ready); PIPEPAR_FREE(ex->t_end);
    PIPEPAR_FREE(ex);
}

pp_status pp_executor_create(const pp_executor_config *cfg, pp_executor **out, pp_error *err)
{
    pp_executor *ex;
    const pp_schedule *s;
    pp_status st;
    int i, n, maxgroup = 0, run = 0, peak = 0, mode;
    if (!cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    s = cfg->schedule;
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    if (cfg->transport.world != s->pp)
        return pp__fail(err, PP_EINVAL, "transport.world=%d: must equal the schedule's pp (%d)", cfg->transport.world, s->pp);
    if (cfg->transport.rank < 0 || cfg->transport.rank >= s->pp)
        return pp__fail(err, PP_EINVAL, "transport.rank=%d: must be between 0 and pp-1=%d", cfg->transport.rank, s->pp - 1);
    if (!cfg->transport.post || !cfg->transport.wait || !cfg->transport.all_reduce || !cfg->transport.abort)
        return pp__fail(err, PP_EINVAL, "transport.%s: must not be NULL (post, wait, all_reduce and abort are required)",
                        !cfg->transport.post ? "post" : !cfg->transport.wait ? "wait" :
                        !cfg->transport.all_reduce ? "all_reduce" : "abort");
    if (!cfg->callbacks.tensor_bytes || !cfg->callbacks.input || !cfg->callbacks.forward)
        return pp__fail(err, PP_EINVAL, "callbacks.%s: must not be NULL",
                        !cfg->callbacks.tensor_bytes ? "tensor_bytes" : !cfg->callbacks.input ? "input" : "forward");
    if ((cfg->allocator.alloc == NULL) != (cfg->allocator.free == NULL))
        return pp__fail(err, PP_EINVAL, "allocator: give both alloc and free, or neither");
    if ((cfg->timer.mark == NULL) != (cfg->timer.resolve == NULL))
        return pp__fail(err, PP_EINVAL, "timer: give both mark and resolve, or neither");
    if (!(cfg->timeout_s >= 0) || cfg->timeout_s > 1e9)
        return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", cfg->timeout_s);
    if (cfg->num_metrics < 0 || cfg->num_metrics > PP_MAX_METRICS)
        return pp__fail(err, PP_EINVAL, "num_metrics=%d: must be between 0 and PP_MAX_METRICS=%d", cfg->num_metrics,
                        PP_MAX_METRICS);
    if (s->pp > 1 && !s->lowered)
        return pp__fail(err, PP_EINVAL, "schedule: not lowered; call pp_schedule_lower first (pp=%d needs "
                        "SEND/RECV actions)", s->pp);
    st = pp_schedule_validate(s, err);
    if (st != PP_OK) return st;

    ex = (pp_executor *)pp__calloc(1, sizeof *ex);
    if (!ex) return pp__fail(err, PP_ENOMEM, "out of memory");
    st = pp_schedule_copy(s, &ex->sched, err);
    if (st != PP_OK) { PIPEPAR_FREE(ex); return st; }
    ex->rank = cfg->transport.rank;
    ex->prog = ex->sched->actions[ex->rank];
    ex->len = ex->sched->length[ex->rank];
    ex->S = s->num_stages; ex->M = s->mb; ex->vpp = s->vpp; ex->world = s->pp;
    ex->tp = cfg->transport;
    ex->cb = cfg->callbacks;
    ex->al = cfg->allocator;
    ex->timer = cfg->timer;
    ex->timeout = cfg->timeout_s > 0 ? cfg->timeout_s : 60.0;
    ex->num_metrics = cfg->num_metrics;
    ex->record = cfg->record_timeline != 0;
    ex->hash = pp__schedule_hash(ex->sched);
    for (i = 0; i < ex->len; i++) {
        int op = ex->prog[i].op;
        if (op == PP_OP_I || op == PP_OP_W) ex->has_split = 1;
        if (op == PP_OP_B || (op == PP_OP_FB)) ex->has_b = 1;
        if (pp__is_comm(op)) {
            run = (i > 0 && pp__is_comm(ex->prog[i - 1].op) && ex->prog[i - 1].group == ex->prog[i].group) ? run + 1 : 1;
            if (run > maxgroup) maxgroup = run;
        } else run = 0;
    }
    if (ex->has_split && (!ex->cb.backward_input || !ex->cb.backward_weight)) {
        pp_executor_free(ex);
        return pp__fail(err, PP_EINVAL, "callbacks.%s: must not be NULL, rank %d's program has split backwards (I, W)",
                        !cfg->callbacks.backward_input ? "backward_input" : "backward_weight", cfg->transport.rank);
    }
    n = ex->vpp * ex->M;
    ex->in = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->gout = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->sendf = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->sendb = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->in_group = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->gout_group = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->out_slot = (int *)pp__calloc((size_t)ex->M, sizeof(int));
    ex->out_ptr = (void **)pp__calloc((size_t)ex->M, sizeof(void *));
    ex->out_bytes = (size_t *)pp__calloc((size_t)ex->M, sizeof(size_t));
    ex->xfers = (pp_transfer *)pp__calloc((size_t)(maxgroup > 0 ? maxgroup : 1), sizeof(pp_transfer));
    ex->cap_xfers = maxgroup;
    if (!ex->in || !ex->gout || !ex->sendf || !ex->sendb || !ex->in_group || !ex->gout_group || !ex->out_slot ||
        !ex->out_ptr || !ex->out_bytes || !ex->xfers) {
        pp_executor_free(ex);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    for (i = 0; i < ex->M; i++) ex->out_slot[i] = -1;
    if (ex->record) {
        ex->times = (double *)pp__calloc((size_t)ex->len * 3 + 1, sizeof(double));
        ex->t_start = (double *)pp__calloc((size_t)ex->len + 1, sizeof(double));
        ex->t_ready = (double *)pp__calloc((size_t)ex->len + 1, sizeof(double));
        ex->t_end = (double *)pp__calloc((size_t)ex->len + 1, sizeof(double));
        if (!ex->times || !ex->t_start || !ex->t_ready || !ex->t_end) {
            pp_executor_free(ex);
            return pp__fail(err, PP_ENOMEM, "out of memory");
        }
    }
    /* plan: the peak count of live tensors, training and forward-only */
    ex->planning = 1;
    for (mode = 0; mode < 2; mode++) {
        ex->forward_only = mode;
        ex->peak_live = 0;
        pp__reset_step(ex);
        st = pp__walk(ex, err);
        if (st != PP_OK) { pp_executor_free(ex); return st; }
        if (ex->peak_live > peak) peak = ex->peak_live;
        pp__release_all(ex);
    }
    ex->planning = 0;
    ex->forward_only = 0;
    ex->planned = peak;
    ex->peak_live = 0;
    pp__reset_step(ex);
    *out = ex;
    return pp__ok(err);
}

/* After a failure: abort the transport (unless another rank did), finish every handle, and
 * account for every buffer. */
static pp_status pp__step_failed(pp_executor *ex, pp_status st, pp_error *err)
{
    int g;
    if (st != PP_EABORTED) ex->tp.abort(ex->tp.user, st, err ? err->message : pp_status_description(st));
    for (g = 0; g < ex->ngroups; g++)
        if (!ex->groups[g].done && ex->groups[g].handle) {
            ex->tp.wait(ex->tp.user, ex->groups[g].handle, 1.0, NULL);   /* aborted: returns at once */
            ex->groups[g].handle = NULL;
            ex->groups[g].done = 1;
        }
    ex->ngroups = ex->next_wait = 0;
    pp__release_all(ex);
    ex->failed = 1;
    ex->timeline_valid = 0;
    return st;
}

/* Before a step: the ranks all-reduce the schedule hash (8 nibbles n and their squares n*n; all
 * ranks agree exactly when sum(n) = world*n and sum(n*n) = world*n*n for every nibble, exact in
 * float for up to 74565 ranks) and a few fields, to name the one that differs. */
#define PP__CHECK_FIELDS 9
static pp_status pp__check_ranks_agree(pp_executor *ex, const pp_step *step, pp_error *err)
{
    float v[16 + 2 * PP__CHECK_FIELDS];
    double f[PP__CHECK_FIELDS];
    static const char *const names[PP__CHECK_FIELDS] = {
        "schedule kind", "vpp", "mb", "group", "placement", "step number", "forward_only", "batch_rows", "num_metrics"
    };
    uint64_t h = ex->hash;
    uint32_t h32;
    int32_t extra[4];
    pp_status st;
    int i, bad = 0;
    double w = (double)ex->world;
    extra[0] = ex->steps; extra[1] = step->forward_only != 0; extra[2] = step->batch_rows; extra[3] = ex->num_metrics;
    h = pp__hash_ints(h, extra, 4);
    h32 = (uint32_t)(h ^ (h >> 32));
    for (i = 0; i < 8; i++) {
        int nib = (int)((h32 >> (4 * i)) & 0xf);
        v[i] = (float)nib;
        v[8 + i] = (float)(nib * nib);
    }
    f[0] = ex->sched->kind; f[1] = ex->vpp; f[2] = ex->M; f[3] = ex->sched->group; f[4] = ex->sched->placement;
    f[5] = ex->steps; f[6] = step->forward_only != 0; f[7] = step->batch_rows; f[8] = ex->num_metrics;
    for (i = 0; i < PP__CHECK_FIELDS; i++) { v[16 + 2 * i] = (float)f[i]; v[17 + 2 * i] = (float)(f[i] * f[i]); }
    st = ex->tp.all_reduce(ex->tp.user, v, (int)(sizeof v / sizeof v[0]), ex->timeout, err);
    if (st != PP_OK) return pp__at(ex, -1, st, err, "checking that the ranks run the same schedule");
    for (i = 0; i < 8; i++) {
        double nib = (double)((h32 >> (4 * i)) & 0xf);
        if ((double)v[i] != w * nib || (double)v[8 + i] != w * nib * nib) bad = 1;
    }
    if (!bad) return PP_OK;
    for (i = 0; i < PP__CHECK_FIELDS; i++) {
        double mean = (double)v[16 + 2 * i] / w, meansq = (double)v[17 + 2 * i] / w;
        if (fabs(mean - f[i]) > 1e-3 * (1 + fabs(f[i])) || fabs(meansq - f[i] * f[i]) > 1e-3 * (1 + f[i] * f[i]))
            return pp__fail(err, PP_EINVALID_SCHEDULE,
                            "rank %d: the pipeline ranks run different schedules: %s differs (this rank: %g, mean "
                            "over the %d ranks: %g)", ex->rank, names[i], f[i], ex->world, mean);
    }
    return pp__fail(err, PP_EINVALID_SCHEDULE,
                    "rank %d: the pipeline ranks run different schedules (same kind, pp, vpp and mb, but the "
                    "programs differ: schedule hash %08x on this rank)", ex->rank, (unsigned)h32);
}

pp_status pp_run_step(pp_executor *ex, const pp_step *step, pp_step_result *result, pp_error *err)
{
    pp_step zero;
    pp_status st;
    double t0 = pp__now();
    float red[2 + PP_MAX_METRICS];
    int i;
    if (!ex) return pp__fail(err, PP_EINVAL, "executor: must not be NULL");
    if (result) memset(result, 0, sizeof *result);
    if (ex->failed)
        return pp__fail(err, PP_EINVAL, "rank %d: an earlier step failed and aborted the transport; create a new "
                        "transport and executor", ex->rank);
    if (!step) { memset(&zero, 0, sizeof zero); step = &zero; }
    ex->step = step;
    ex->forward_only = step->forward_only != 0;
    pp__reset_step(ex);
    ex->timeline_valid = 0;
    if (step->batch_rows < 0) {
        st = pp__fail(err, PP_EINVAL, "rank %d: step.batch_rows=%d: must be >= 0 (0 means no padding)", ex->rank,
                      step->batch_rows);
        return pp__step_failed(ex, st, err);
    }
    if (!ex->forward_only && pp__ends_a_route(ex) && !ex->cb.loss) {
        st = pp__fail(err, PP_EINVAL, "rank %d: callbacks.loss: must not be NULL for a training step on the last "
                      "stage's rank", ex->rank);
        return pp__step_failed(ex, st, err);
    }
    if (!ex->forward_only && ex->has_b && !ex->cb.backward) {
        st = pp__fail(err, PP_EINVAL, "rank %d: callbacks.backward: must not be NULL for a training step", ex->rank);
        return pp__step_failed(ex, st, err);
    }
    if (ex->record) for (i = 0; i < 3 * ex->len; i++) ex->times[i] = -1;   /* -1: not run */
    st = pp__check_ranks_agree(ex, step, err);
    if (st != PP_OK) return pp__step_failed(ex, st, err);
    st = pp__walk(ex, err);
    if (st != PP_OK) return pp__step_failed(ex, st, err);
    {
        int kept = 0;
        for (i = 0; i < ex->M; i++) kept += ex->out_slot[i] >= 0;
        if (ex->live != kept) {
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d: %d tensors are still live at the end of the step "
                          "(a forward without its backward?)", ex->rank, ex->live - kept);
            return pp__step_failed(ex, st, err);
        }
    }
    /* loss and metrics: the last stage's sums, to every rank */
    memset(red, 0, sizeof red);
    red[0] = (float)ex->loss_sum;
    red[1] = (float)ex->weight_sum;
    for (i = 0; i < ex->num_metrics; i++) red[2 + i] = (float)ex->metric_sum[i];
    st = ex->tp.all_reduce(ex->tp.user, red, 2 + ex->num_metrics, ex->timeout, err);
    if (st != PP_OK) return pp__step_failed(ex, pp__at(ex, ex->len, st, err, "broadcasting the loss"), err);
    if (ex->record) {
        if (ex->timer.resolve) {
            st = ex->timer.resolve(ex->timer.user, ex->times, 3 * ex->len, err);
            if (st != PP_OK) return pp__step_failed(ex, st, err);
        }
        for (i = 0; i < ex->len; i++) {
            ex->t_start[i] = ex->times[3 * i];
            ex->t_ready[i] = ex->times[3 * i + 1];
            ex->t_end[i] = ex->times[3 * i + 2];
        }
        ex->timeline_valid = 1;
    }
    if (result) {
        result->weight = red[1];
        result->loss = red[1] != 0 ? red[0] / red[1] : 0.0f;
        for (i = 0; i < ex->num_metrics; i++) result->metrics[i] = red[2 + i];
        if (ex->forward_only && pp__ends_a_route(ex)) {
            for (i = 0; i < ex->M; i++) {
                ex->out_ptr[i] = pp__ptr(ex, ex->out_slot[i]);
                ex->out_bytes[i] = ex->out_slot[i] >= 0 ? ex->slots[ex->out_slot[i]].bytes : 0;
            }
            result->outputs = (const void *const *)ex->out_ptr;
            result->output_bytes = ex->out_bytes;
            result->num_outputs = ex->M;
        }
    }
    ex->steps++;
    if (result) result->seconds = pp__now() - t0;
    return pp__ok(err);
}

void pp_executor_get_stats(const pp_executor *ex, pp_executor_stats *out)
{
    int i;
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!ex) return;
    out->planned_slots = ex->planned;
    out->peak_slots = ex->peak_live;
    for (i = 0; i < ex->nslots; i++) out->slots += ex->slots[i].ptr != NULL;
    out->bytes = ex->bytes_held;
    out->allocations = ex->allocations;
    out->transfers = ex->transfers_posted;
    out->groups = ex->groups_posted;
    out->steps = ex->steps;
}

/* --- >>timeline (implementation) ------------------------------------------------------------ */

pp_status pp_executor_timeline(const pp_executor *ex, pp_timeline *out, pp_error *err)
{
    if (!ex || !out) return pp__fail(err, PP_EINVAL, "executor and out: must not be NULL");
    memset(out, 0, sizeof *out);
    if (!ex->record) return pp__fail(err, PP_EINVAL, "record_timeline: was 0 when the executor was created");
    if (!ex->timeline_valid) return pp__fail(err, PP_EINVAL, "rank %d: no step has completed yet", ex->rank);
    out->rank = ex->rank;
    out->length = ex->len;
    out->schedule = ex->sched;
    out->actions = ex->prog;
    out->start = ex->t_start;
    out->ready = ex->t_ready;
    out->end = ex->t_end;
    return pp__ok(err);
}

/* Checks the timelines' arrays; *t0, *t1: the earliest start and the latest end of any action. */
static pp_status pp__check_timelines(const pp_timeline *t, int count, double *t0, double *t1, pp_error *err)
{
    int r, i;
    if (!t || count < 1) return pp__fail(err, PP_EINVAL, "timelines (count=%d): must be given", count);
    *t0 = DBL_MAX; *t1 = -DBL_MAX;
    for (r = 0; r < count; r++) {
        if (t[r].length < 0 || (t[r].length > 0 && (!t[r].actions || !t[r].start || !t[r].ready || !t[r].end)))
            return pp__fail(err, PP_EINVAL, "timeline %d: length=%d but an array is NULL", r, t[r].length);
        for (i = 0; i < t[r].length; i++) {
            if (t[r].start[i] < 0) continue;
            if (t[r].start[i] < *t0) *t0 = t[r].start[i];
            if (t[r].end[i] > *t1) *t1 = t[r].end[i];
        }
    }
    if (*t0 == DBL_MAX) { *t0 = 0; *t1 = 0; }
    return PP_OK;
}

pp_status pp_timeline_write_chrome_trace(const pp_timeline *t, int count, FILE *out, pp_error *err)
{
    pp__text x = { NULL, 0, 0, 0 };
    double t0, t1;
    int r, i, first = 1;
    char txt[64];
    pp_status st = out ? pp__check_timelines(t, count, &t0, &t1, err)
                       : pp__fail(err, PP_EINVAL, "out: must be given");
    if (st != PP_OK) return st;
    pp__text_printf(&x, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
#define PP__SEP() do { pp__text_printf(&x, first ? "" : ",\n"); first = 0; } while (0)
    for (r = 0; r < count; r++) {
        int pid = t[r].rank;
        PP__SEP();
        pp__text_printf(&x, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", pid, pid);
        PP__SEP();
        pp__text_printf(&x, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", pid, pid);
        PP__SEP();
        pp__text_printf(&x, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}}", pid);
        PP__SEP();
        pp__text_printf(&x, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"comm\"}}", pid);
        for (i = 0; i < t[r].length; i++) {
            pp_action a = t[r].actions[i];
            if (t[r].start[i] < 0) continue;
            if (pp__is_comm(a.op)) {
                /* one slice per group: its first action names it, the rest go in args */
                int j = i, k;
                while (j + 1 < t[r].length && pp__is_comm(t[r].actions[j + 1].op) &&
                       t[r].actions[j + 1].group == a.group && t[r].start[j + 1] >= 0 &&
                       t[r].start[j + 1] == t[r].start[i])
                    j++;
                PP__SEP();
                pp_action_format(a, txt, sizeof txt);
                pp__text_printf(&x, "{\"name\":\"%s%s\",\"cat\":\"comm\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,"
                                "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"actions\":\"", txt, j > i ? " +" : "", pid,
                                1e6 * (t[r].start[i] - t0), 1e6 * (t[r].end[i] - t[r].start[i]));
                for (k = i; k <= j; k++) {
                    pp_action_format(t[r].actions[k], txt, sizeof txt);
                    pp__text_printf(&x, "%s%s", k > i ? " " : "", txt);
                }
                pp__text_printf(&x, "\"}}");
                i = j;
                continue;
            }
            pp_action_format(a, txt, sizeof txt);
            if (t[r].ready[i] - t[r].start[i] > 1e-7) {
                PP__SEP();
                pp__text_printf(&x, "{\"name\":\"wait\",\"cat\":\"wait\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,"
                                "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"before\":\"%s\"}}", pid,
                                1e6 * (t[r].start[i] - t0), 1e6 * (t[r].ready[i] - t[r].start[i]), txt);
            }
            PP__SEP();
            pp__text_printf(&x, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
                            "\"dur\":%.3f,\"args\":{\"stage\":%d,\"microbatch\":%d}}", txt, pp_op_name((pp_op)a.op),
                            pid, 1e6 * (t[r].ready[i] - t0), 1e6 * (t[r].end[i] - t[r].ready[i]), (int)a.stage,
                            (int)a.mb);
        }
    }
#undef PP__SEP
    pp__text_printf(&x, "\n]}\n");
    if (x.failed) { pp__text_free(&x); return pp__fail(err, PP_ENOMEM, "out of memory while writing the trace"); }
    if (x.len && fwrite(x.data, 1, x.len, out) != x.len) { pp__text_free(&x); return pp__fail(err, PP_EIO, "trace: write failed"); }
    pp__text_free(&x);
    return pp__ok(err);
}

static char pp__mb_digit(int m)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    return m >= 0 && m < 62 ? digits[m] : '#';
}

pp_status pp_timeline_idle(const pp_timeline *t, int count, pp_idle *idle, pp_error *err)
{
    const pp_schedule *s;
    double t0 = 0, t1 = 0, *f_end = NULL, *b_end = NULL;
    unsigned char *seen = NULL;
    size_t n, k;
    int r, i, h;
    pp_status st = PP_OK;
    if (!t || count < 1 || !idle) return pp__fail(err, PP_EINVAL, "timelines (count=%d) and per_rank: must be given", count);
    s = t[0].schedule;
    if (!s) return pp__fail(err, PP_EINVAL, "timeline 0: schedule is NULL (the producers of each input come from it)");
    if (count != s->pp)
        return pp__fail(err, PP_EINVAL, "count=%d: must be the schedule's pp=%d (every rank's timeline)", count, s->pp);
    seen = (unsigned char *)pp__calloc((size_t)count, 1);
    if (!seen) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < count && st == PP_OK; r++) {
        const pp_schedule *o = t[r].schedule;   /* executors keep copies: same shape is the same schedule */
        if (o && (o->pp != s->pp || o->num_stages != s->num_stages || o->mb != s->mb || o->kind != s->kind))
            st = pp__fail(err, PP_EINVAL, "timeline %d: a different schedule than timeline 0's (%s pp %d, %d stages, "
                          "mb %d against %s pp %d, %d stages, mb %d)", r, pp_schedule_kind_name(o->kind), o->pp,
                          o->num_stages, o->mb, pp_schedule_kind_name(s->kind), s->pp, s->num_stages, s->mb);
        else if (t[r].rank < 0 || t[r].rank >= s->pp || seen[t[r].rank])
            st = pp__fail(err, PP_EINVAL, "timeline %d: rank=%d: must be one of 0..%d, each once", r, t[r].rank, s->pp - 1);
        else if (t[r].length != s->length[t[r].rank])
            st = pp__fail(err, PP_EINVAL, "timeline %d: length=%d: rank %d's program has %d actions", r, t[r].length,
                          t[r].rank, s->length[t[r].rank]);
        else seen[t[r].rank] = 1;
    }
    PIPEPAR_FREE(seen);
    if (st == PP_OK) st = pp__check_timelines(t, count, &t0, &t1, err);
    if (st != PP_OK) return st;
    n = (size_t)s->num_stages * (size_t)s->mb;
    f_end = (double *)PIPEPAR_MALLOC((n ? n : 1) * sizeof(double));
    b_end = (double *)PIPEPAR_MALLOC((n ? n : 1) * sizeof(double));
    if (!f_end || !b_end) { PIPEPAR_FREE(f_end); PIPEPAR_FREE(b_end); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    for (k = 0; k < n; k++) f_end[k] = b_end[k] = -DBL_MAX;
    /* when each tensor was made: an overlapped F&B hands both halves' outputs over at its end */
    for (r = 0; r < count; r++)
        for (i = 0; i < t[r].length; i++) {
            int ops[2], stg[2], mbs[2], nh;
            if (t[r].start[i] < 0 || pp__is_comm(t[r].actions[i].op) || t[r].ready[i] < 0) continue;
            nh = pp__halves(t[r].actions[i], ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                if (stg[h] < 0 || stg[h] >= s->num_stages || mbs[h] < 0 || mbs[h] >= s->mb) continue;
                k = PP__SM(s, stg[h], mbs[h]);
                if (ops[h] == PP_OP_F) f_end[k] = t[r].end[i];
                else if (ops[h] == PP_OP_B || ops[h] == PP_OP_I) b_end[k] = t[r].end[i];
            }
        }
    for (r = 0; r < count; r++) {
        pp_idle *o = &idle[t[r].rank];   /* by rank, whatever order the timelines came in */
        double prev = t0;
        memset(o, 0, sizeof *o);
        o->step = t1 - t0;
        for (i = 0; i < t[r].length; i++) {
            int ops[2], stg[2], mbs[2], nh, from;
            double gap, made = -DBL_MAX;
            if (pp__is_comm(t[r].actions[i].op) || t[r].start[i] < 0 || t[r].ready[i] < 0) continue;
            o->busy += t[r].end[i] - t[r].ready[i];
            gap = t[r].ready[i] - prev;
            if (gap > 0) {
                nh = pp__halves(t[r].actions[i], ops, stg, mbs);
                for (h = 0; h < nh; h++) {
                    double at;
                    if (stg[h] < 0 || stg[h] >= s->num_stages || mbs[h] < 0 || mbs[h] >= s->mb) continue;
                    /* off its microbatch's route (a timeline that is not the schedule's): no input to find */
                    if (!pp__on_route(s, stg[h], mbs[h])) continue;
                    if (!pp__cross_input(s, ops[h], stg[h], mbs[h], &from) || from < 0 || from >= s->num_stages) continue;
                    at = ops[h] == PP_OP_F ? f_end[PP__SM(s, from, mbs[h])] : b_end[PP__SM(s, from, mbs[h])];
                    if (at > made) made = at;
                }
                if (made == -DBL_MAX) o->wait_other += gap;
                else {
                    double c = made - prev;
                    if (c < 0) c = 0;
                    if (c > gap) c = gap;
                    o->wait_compute += c;
                    o->wait_transfer += gap - c;
                }
            }
            if (t[r].end[i] > prev) prev = t[r].end[i];
        }
        o->tail = t1 - prev;
    }
    PIPEPAR_FREE(f_end); PIPEPAR_FREE(b_end);
    return pp__ok(err);
}

pp_status pp_timeline_draw_ascii(const pp_timeline *t, int count, int width, FILE *out, pp_error *err)
{
    pp__text x = { NULL, 0, 0, 0 };
    double t0, t1, unit;
    char *line;
    int r, i, c, row, has_w = 0, has_i = 0;
    pp_status st = out ? pp__check_timelines(t, count, &t0, &t1, err)
                       : pp__fail(err, PP_EINVAL, "out: must be given");
    if (st != PP_OK) return st;
    if (width < 0 || width > 100000) return pp__fail(err, PP_EINVAL, "width=%d: must be between 1 and 100000 (0 means 96)", width);
    if (width == 0) width = 96;
    unit = t1 > t0 ? (t1 - t0) / width : 1;
    for (r = 0; r < count; r++)
        for (i = 0; i < t[r].length; i++) {
            if (t[r].actions[i].op == PP_OP_W) has_w = 1;
            if (t[r].actions[i].op == PP_OP_I) has_i = 1;
        }
    line = (char *)PIPEPAR_MALLOC((size_t)width + 1);
    if (!line) return pp__fail(err, PP_ENOMEM, "out of memory");
    pp__text_printf(&x, "measured  (one column = %.3g %s; cells show the microbatch)\n", unit < 1e-3 ? 1e6 * unit : 1e3 * unit,
                    unit < 1e-3 ? "us" : "ms");
    for (r = 0; r < count; r++) {
        const pp_schedule *sc = t[r].schedule;
        int nrows = 2 + has_w + (sc && sc->vpp > 1);
        for (row = 0; row < nrows; row++) {
            int want_chunk = sc && sc->vpp > 1 && row == nrows - 1;
            memset(line, want_chunk ? '.' : ' ', (size_t)width);
            line[width] = '\0';
            for (i = 0; i < t[r].length; i++) {
                pp_action a = t[r].actions[i];
                int ops[2], stg[2], mbs[2], nh, h, from, to;
                double a0 = t[r].ready[i], a1 = t[r].end[i];
                if (pp__is_comm(a.op) || t[r].start[i] < 0) continue;
                nh = pp__halves(a, ops, stg, mbs);
                from = (int)floor((a0 - t0) / unit + 0.5);
                to = (int)floor((a1 - t0) / unit + 0.5);
                if (to == from) to = from + 1;   /* show every action, however short */
                if (from < 0) from = 0;
                if (to > width) to = width;
                for (h = 0; h < nh; h++) {
                    int show = want_chunk || (row == 0 ? ops[h] == PP_OP_F
                                              : row == 1 ? (ops[h] == PP_OP_B || ops[h] == PP_OP_I)
                                                         : ops[h] == PP_OP_W);
                    if (!show) continue;
                    for (c = from; c < to; c++)
                        line[c] = want_chunk ? (char)('0' + pp_stage_chunk(sc, stg[h]) % 10) : pp__mb_digit(mbs[h]);
                }
            }
            if (row == 0) pp__text_printf(&x, "rank %-3d %5s |%s|\n", t[r].rank, "F", line);
            else pp__text_printf(&x, "         %5s |%s|\n",
                                 want_chunk ? "chunk" : row == 1 ? (has_i ? "B/I" : "B") : "W", line);
        }
    }
    pp__text_printf(&x, "step %.3g ms; busy per rank:", 1e3 * (t1 - t0));
    for (r = 0; r < count; r++) {
        double busy = 0;
        for (i = 0; i < t[r].length; i++)
            if (!pp__is_comm(t[r].actions[i].op) && t[r].start[i] >= 0) busy += t[r].end[i] - t[r].ready[i];
        pp__text_printf(&x, " %.0f%%", t1 > t0 ? 100.0 * busy / (t1 - t0) : 0.0);
    }
    pp__text_printf(&x, "\n");
    PIPEPAR_FREE(line);
    if (x.failed) { pp__text_free(&x); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    if (x.len && fwrite(x.data, 1, x.len, out) != x.len) { pp__text_free(&x); return pp__fail(err, PP_EIO, "write failed"); }
    pp__text_free(&x);
    return pp__ok(err);
}
