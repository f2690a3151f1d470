/* test_runtime_groups.c — group collectives (all_reduce_buf, all_gather, barrier) and group
 * transports of the threads world (pp_threads_transport_group, _grid), with the pp_group_*
 * wrappers that check their arguments.
 *
 * The world is the grid dp 2 x cp 2 x pp 2 (8 ranks, order tp-cp-dp-pp: rank = cp + 2 dp + 4 pp),
 * so every rank sits in a cp, a dp, a dp-cp, a pp group and the whole world at once. Each rank
 * contributes values of very different magnitudes, so that floats added in another order give
 * other bits: an all-reduce must give every rank exactly ((m0 + m1) + m2) + ... over its group's
 * members m0, m1, ... in member order. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "pp_test.h"

#define TG_WORLD 8
#define TG_MAX 1024

static double tg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void tg_sleep(double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

/* What world rank r adds at element i: 1e8 next to 1 and 1e-3, so the order of additions shows. */
static float tg_value(int r, size_t i)
{
    static const float scale[8] = { 1e8f, 1.0f, -1e8f, 3.25f, 1e-3f, 7e7f, -2.5f, 0.1f };
    return scale[((size_t)r * 3 + i) % 8] * (1.0f + (float)(i % 13) / 7.0f);
}

static pp_grid tg_grid(void)
{
    pp_grid_config c;
    pp_grid g;
    pp_error err;
    memset(&c, 0, sizeof c);
    c.world = TG_WORLD; c.cp = 2; c.dp = 2; c.pp = 2;
    PP_CHECK_OK(pp_grid_init(&c, &g, &err), &err);
    return g;
}

/* Shared by the ranks of a run: each writes only its own entries. */
typedef struct tg_ctx {
    pp_grid grid;
    double timeout;
    int bad[TG_WORLD];
    char why[TG_WORLD][640];
    int entered[TG_WORLD];
    pthread_mutex_t mu;
} tg_ctx;

static void tg_bad(tg_ctx *c, int rank, const char *what, unsigned dims, size_t count)
{
    char mask[32];
    pp_grid_dims_format(dims, mask, sizeof mask);
    if (!c->bad[rank]++) snprintf(c->why[rank], sizeof c->why[rank], "%s (group %s, count %zu)", what, mask, count);
}

static tg_ctx *tg_new(void)
{
    tg_ctx *c = (tg_ctx *)calloc(1, sizeof *c);
    c->grid = tg_grid();
    c->timeout = 10;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void tg_free(tg_ctx *c)
{
    int r;
    for (r = 0; r < TG_WORLD; r++) PP_CHECK_MSG(c->bad[r] == 0, "rank %d: %d failures, first: %s", r, c->bad[r], c->why[r]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static const unsigned tg_masks[] = { PP_GROUP_CP, PP_GROUP_DP, PP_GROUP_DP | PP_GROUP_CP, PP_GROUP_PP, PP_GROUP_ALL };

/* Rank's transport of group `dims` and that group's members (world ranks, in member order). */
static pp_status tg_group(tg_ctx *c, pp_transport *world, int rank, unsigned dims, pp_transport *t, int *members,
                          int *n, pp_error *err)
{
    pp_grid_group_info info;
    pp_status st = pp_threads_transport_grid(pp_threads_transport_world(world), &c->grid, dims, rank, t, err);
    memset(&info, 0, sizeof info);
    if (st == PP_OK) st = pp_grid_group(&c->grid, rank, dims, &info, err);
    if (st == PP_OK) st = pp_grid_group_members(&c->grid, dims, info.color, members, TG_WORLD, err);
    *n = info.size;
    return st;
}

/* --- all_reduce ------------------------------------------------------------------------------ */

static pp_status tg_reduce_rank(void *user, int rank, pp_transport *world, pp_error *err)
{
    static const size_t counts[] = { 0, 1, 3, 8, 1001 };
    tg_ctx *c = (tg_ctx *)user;
    float buf[TG_MAX + 8], want[TG_MAX + 8];
    size_t k, a, i;
    int round;
    for (round = 0; round < 3; round++)   /* the same transports again: their collectives keep counting */
        for (k = 0; k <= sizeof tg_masks / sizeof tg_masks[0]; k++) {   /* the grid's groups, then the world's */
            pp_transport t = *world;
            int members[TG_WORLD] = { 0, 1, 2, 3, 4, 5, 6, 7 }, n = TG_WORLD, j;
            pp_status st = k < sizeof tg_masks / sizeof tg_masks[0]
                ? tg_group(c, world, rank, tg_masks[k], &t, members, &n, err) : PP_OK;
            if (st != PP_OK) return st;
            if (t.world != n || members[t.rank] != rank) tg_bad(c, rank, "the transport's rank and world", 0, 0);
            for (a = 0; a < sizeof counts / sizeof counts[0]; a++) {
                size_t count = counts[a];
                for (i = 0; i < count; i++) {
                    buf[i] = tg_value(rank, i + (size_t)round);
                    want[i] = tg_value(members[0], i + (size_t)round);
                    for (j = 1; j < n; j++) want[i] += tg_value(members[j], i + (size_t)round);
                }
                buf[count] = 12345.0f;   /* past the end: untouched */
                st = pp_group_all_reduce(&t, buf, count, c->timeout, err);
                if (st != PP_OK) return st;
                if ((count && memcmp(buf, want, count * sizeof(float)) != 0) || buf[count] != 12345.0f)
                    tg_bad(c, rank, "not the member-order sum, bit for bit", k < 5 ? tg_masks[k] : 0, count);
            }
        }
    return PP_OK;
}

/* Every group of the grid at once (five transports per rank), counts from 0 to 1001 (fewer floats
 * than ranks, uneven shares), three rounds: every rank gets the member-order sum bit for bit. */
static void group_all_reduce_gives_every_rank_the_member_order_sum_bit_for_bit(void)
{
    tg_ctx *c = tg_new();
    pp_error err;
    PP_CHECK_OK(pp_threads_run(TG_WORLD, tg_reduce_rank, c, NULL, NULL, &err), &err);
    tg_free(c);
}

/* The same floats summed in another order give other bits (so the test above can fail). */
static void the_test_values_sum_to_other_bits_in_another_order(void)
{
    size_t i;
    int differ = 0;
    for (i = 0; i < 64; i++) {
        float up = 0, down = 0;
        int r;
        for (r = 0; r < TG_WORLD; r++) up += tg_value(r, i);
        for (r = TG_WORLD - 1; r >= 0; r--) down += tg_value(r, i);
        differ += up != down;
    }
    PP_CHECK(differ > 8);
}

/* --- all_gather and barrier ------------------------------------------------------------------ */

static pp_status tg_gather_rank(void *user, int rank, pp_transport *world, pp_error *err)
{
    tg_ctx *c = (tg_ctx *)user;
    size_t k;
    int bytes;
    for (k = 0; k < sizeof tg_masks / sizeof tg_masks[0]; k++) {
        pp_transport t;
        int members[TG_WORLD], n, j;
        pp_status st = tg_group(c, world, rank, tg_masks[k], &t, members, &n, err);
        if (st != PP_OK) return st;
        for (bytes = 0; bytes <= 13; bytes += 13) {
            unsigned char send[16], recv[TG_WORLD * 16 + 1];
            memset(recv, 0xee, sizeof recv);
            for (j = 0; j < bytes; j++) send[j] = (unsigned char)(rank * 16 + j);
            st = pp_group_all_gather(&t, send, recv, (size_t)bytes, c->timeout, err);
            if (st != PP_OK) return st;
            for (j = 0; j < n * bytes; j++)
                if (recv[j] != (unsigned char)(members[j / bytes] * 16 + j % bytes)) {
                    tg_bad(c, rank, "recv[r * bytes ..] is not member r's bytes", tg_masks[k], (size_t)bytes);
                    break;
                }
            if (recv[n * bytes] != 0xee) tg_bad(c, rank, "written past n * bytes", tg_masks[k], (size_t)bytes);
            /* in place: send is this rank's own part of recv */
            memset(recv, 0, sizeof recv);
            for (j = 0; j < bytes; j++) recv[t.rank * bytes + j] = (unsigned char)(rank * 16 + j);
            st = pp_group_all_gather(&t, recv + t.rank * bytes, recv, (size_t)bytes, c->timeout, err);
            if (st != PP_OK) return st;
            for (j = 0; j < n * bytes; j++)
                if (recv[j] != (unsigned char)(members[j / bytes] * 16 + j % bytes)) {
                    tg_bad(c, rank, "in place: recv[r * bytes ..] is not member r's bytes", tg_masks[k], (size_t)bytes);
                    break;
                }
        }
    }
    return PP_OK;
}

static void group_all_gather_puts_each_members_bytes_at_its_index(void)
{
    tg_ctx *c = tg_new();
    pp_error err;
    PP_CHECK_OK(pp_threads_run(TG_WORLD, tg_gather_rank, c, NULL, NULL, &err), &err);
    tg_free(c);
}

/* Ranks enter the barrier of their dp-cp group (4 ranks) one after another (each waits 20 ms
 * more than the last, so a barrier that let a rank through early would be seen): a rank that
 * returns finds every member of its group counted as entered. The count, not the clock, decides. */
static pp_status tg_barrier_rank(void *user, int rank, pp_transport *world, pp_error *err)
{
    tg_ctx *c = (tg_ctx *)user;
    pp_transport t;
    int members[TG_WORLD], n, round;
    pp_status st = tg_group(c, world, rank, PP_GROUP_DP | PP_GROUP_CP, &t, members, &n, err);
    if (st != PP_OK) return st;
    for (round = 0; round < 3; round++) {
        tg_sleep(0.02 * t.rank);
        pthread_mutex_lock(&c->mu);
        c->entered[members[0]]++;   /* the group's count, kept at its first member */
        pthread_mutex_unlock(&c->mu);
        st = pp_group_barrier(&t, c->timeout, err);
        if (st != PP_OK) return st;
        pthread_mutex_lock(&c->mu);
        if (c->entered[members[0]] < n * (round + 1))
            tg_bad(c, rank, "left the barrier before every member entered it", PP_GROUP_DP | PP_GROUP_CP, 0);
        pthread_mutex_unlock(&c->mu);
        st = pp_group_barrier(&t, c->timeout, err);   /* nobody enters the next round before all checked */
        if (st != PP_OK) return st;
    }
    return PP_OK;
}

static void group_barrier_returns_once_every_member_has_called_it(void)
{
    tg_ctx *c = tg_new();
    pp_error err;
    PP_CHECK_OK(pp_threads_run(TG_WORLD, tg_barrier_rank, c, NULL, NULL, &err), &err);
    PP_CHECK(c->entered[0] == 12 && c->entered[4] == 12);
    tg_free(c);
}

/* --- isolation, deadlines, mismatches, abort ------------------------------------------------- */

/* Two ranks share three transports (the world's, the group {0, 1} and the group {1, 0}). Rank 1
 * sends one tag on each in the opposite order of rank 0's receives: each receive gets its own
 * transport's message. Then rank 1 calls all_gather on the world's transport while rank 0 calls
 * barrier on the group's: had the group's messages met the world's, rank 0 would call it a
 * mismatch; it waits out its deadline instead (and its failure aborts rank 1's wait). */
static pp_status tg_isolation_rank(void *user, int rank, pp_transport *world, pp_error *err)
{
    tg_ctx *c = (tg_ctx *)user;
    pp_threads_world *w = pp_threads_transport_world(world);
    static const int fwd[2] = { 0, 1 }, rev[2] = { 1, 0 };
    pp_transport t[3];
    pp_transfer x;
    void *h[3];
    float v[3] = { 0, 0, 0 };
    pp_status st;
    int k;
    t[0] = *world;
    st = pp_threads_transport_group(w, fwd, 2, rank, &t[1], err);
    if (st == PP_OK) st = pp_threads_transport_group(w, rev, 2, rank, &t[2], err);
    if (st != PP_OK) return st;
    if (t[2].rank != 1 - rank) tg_bad(c, rank, "group {1, 0}: rank is the index in members", 0, 0);
    memset(&x, 0, sizeof x);
    x.tag = pp_transfer_tag(PP_OP_SEND_F, 0, 0, 0);
    x.bytes = sizeof(float);
    if (rank == 1) {
        for (k = 2; k >= 0; k--) {
            float payload = (float)(10 + k);
            x.is_send = 1; x.peer = k == 2 ? 1 : 0; x.buf = &payload;   /* rank 0 is index 1 of {1, 0} */
            st = t[k].post(t[k].user, &x, 1, &h[k], err);
            if (st == PP_OK) st = t[k].wait(t[k].user, h[k], c->timeout, err);
            if (st != PP_OK) return st;
        }
        {   /* waits until rank 0's barrier times out and aborts the world */
            float mine = 1, all[2];
            st = pp_group_all_gather(&t[0], &mine, all, sizeof mine, 30, err);
            if (st != PP_EABORTED) tg_bad(c, rank, "the world's all_gather was not aborted", 0, 0);
            return PP_OK;
        }
    }
    for (k = 0; k < 3; k++) {
        x.is_send = 0; x.peer = k == 2 ? 0 : 1; x.buf = &v[k];
        st = t[k].post(t[k].user, &x, 1, &h[k], err);
        if (st != PP_OK) return st;
    }
    for (k = 0; k < 3; k++) {
        st = t[k].wait(t[k].user, h[k], c->timeout, err);
        if (st != PP_OK) return st;
        if (v[k] != (float)(10 + k)) tg_bad(c, rank, "a receive got another transport's message", 0, (size_t)k);
    }
    st = pp_group_barrier(&t[1], 0.2, err);
    if (st != PP_ETIMEOUT) tg_bad(c, rank, "the group's barrier met the world's all_gather", 0, 0);
    else if (!strstr(err->message, "timed out after 0.2 s in barrier #0 of this transport, waiting for rank 1 (world rank 1)"))
        tg_bad(c, rank, err->message, 0, 0);
    return PP_OK;
}

static void transports_over_the_same_ranks_never_take_each_others_messages(void)
{
    tg_ctx *c = tg_new();
    pp_error err;
    PP_CHECK_OK(pp_threads_run(2, tg_isolation_rank, c, NULL, NULL, &err), &err);
    tg_free(c);
}

/* Ranks that call a transport's collectives differently are named at once: another size, another
 * kind. The world is aborted, so the other rank stops too. */
typedef struct tg_mismatch { int mode; } tg_mismatch;
static pp_status tg_mismatch_rank(void *user, int rank, pp_transport *world, pp_error *err)
{
    const tg_mismatch *m = (const tg_mismatch *)user;
    float v[4] = { 1, 2, 3, 4 }, all[8];
    if (m->mode == 0) return pp_group_all_reduce(world, v, rank == 0 ? 3 : 4, 20, err);
    if (rank == 0) return pp_group_barrier(world, 20, err);
    return pp_group_all_gather(world, v, all, sizeof v, 20, err);
}

static void collectives_called_differently_are_named_at_once(void)
{
    tg_mismatch m;
    pp_status status[2];
    pp_error err;
    double t0 = tg_now();
    m.mode = 0;
    PP_CHECK_FAILS(pp_threads_run(2, tg_mismatch_rank, &m, status, NULL, &err), &err, PP_EINVAL, "all_reduce #0 of ");
    PP_CHECK(strstr(err.message, "rank 0: all_reduce #0 of 3 floats, but rank 1 reduces 4") ||
             strstr(err.message, "rank 1: all_reduce #0 of 4 floats, but rank 0 reduces 3"));
    m.mode = 1;
    PP_CHECK_FAILS(pp_threads_run(2, tg_mismatch_rank, &m, status, NULL, &err), &err, PP_EINVAL, "collective #0 of this transport is ");
    PP_CHECK(strstr(err.message, "is barrier here but all_gather on rank 1") ||
             strstr(err.message, "is all_gather here but barrier on rank 0"));
    PP_CHECK(status[0] != PP_OK && status[1] != PP_OK);
    PP_CHECK(tg_now() - t0 < 5);   /* far below the 20 s deadlines */
}

/* Rank 3 of a group never comes: the others' deadline names the collective and the rank. */
static pp_status tg_late_rank(void *user, int rank, pp_transport *world, pp_error *err)
{
    tg_ctx *c = (tg_ctx *)user;
    static const int members[3] = { 0, 1, 3 };
    pp_transport t;
    float v = 1;
    pp_status st;
    if (rank == 2) return PP_OK;
    st = pp_threads_transport_group(pp_threads_transport_world(world), members, 3, rank, &t, err);
    if (st != PP_OK || rank == 3) return st;   /* rank 3 never calls the collective */
    return pp_group_all_reduce(&t, &v, 1, c->timeout, err);
}

static void a_member_that_never_comes_makes_the_group_time_out(void)
{
    tg_ctx *c = tg_new();
    pp_status status[4];
    pp_error err;
    c->timeout = 0.2;
    PP_CHECK_FAILS(pp_threads_run(4, tg_late_rank, c, status, NULL, &err), &err, PP_ETIMEOUT,
                   "timed out after 0.2 s in all_reduce #0 of this transport, waiting for rank 2 (world rank 3)");
    PP_CHECK(status[0] == PP_ETIMEOUT || status[0] == PP_EABORTED);
    PP_CHECK(status[1] == PP_ETIMEOUT || status[1] == PP_EABORTED);
    PP_CHECK(status[2] == PP_OK && status[3] == PP_OK);
    tg_free(c);
}

/* An abort on one group's transport ends the waits of every transport of the world: rank 1 waits
 * in an all_gather of the group {0, 1}, rank 2 in a barrier of the group {2, 3} that rank 3 never
 * joins, rank 3 in an all-reduce of the world's transport (deadlines 30 s), while rank 0 aborts
 * through the group {0, 1}; everyone returns at once, naming world rank 0 and its reason. */
static pp_status tg_abort_rank(void *user, int rank, pp_transport *world, pp_error *err)
{
    tg_ctx *c = (tg_ctx *)user;
    static const int low[2] = { 0, 1 }, high[2] = { 2, 3 };
    pp_threads_world *w = pp_threads_transport_world(world);
    pp_transport t;
    float v[2] = { 0, 0 };
    pp_status st = pp_threads_transport_group(w, rank < 2 ? low : high, 2, rank, &t, err);
    (void)c;
    if (st != PP_OK) return st;
    if (rank == 0) {
        tg_sleep(0.1);
        t.abort(t.user, PP_ECALLBACK, "the loss was NaN");
        return PP_ECALLBACK;
    }
    if (rank == 1) return pp_group_all_gather(&t, v, v, sizeof v[0], 30, err);
    if (rank == 2) return pp_group_barrier(&t, 30, err);
    return pp_group_all_reduce(world, v, 2, 30, err);
}

static void an_abort_on_any_group_stops_every_rank_of_the_world(void)
{
    tg_ctx *c = tg_new();
    pp_status status[4];
    pp_error errors[4], err;
    double t0 = tg_now();
    int r;
    PP_CHECK_INT(pp_threads_run(4, tg_abort_rank, c, status, errors, &err), PP_ECALLBACK);
    for (r = 1; r < 4; r++) {
        PP_CHECK_INT(status[r], PP_EABORTED);
        PP_CHECK_CONTAINS(errors[r].message, r == 3 ? "rank 3: stopped because rank 0 failed (PP_ECALLBACK): the loss was NaN"
                                                    : "stopped because world rank 0 failed (PP_ECALLBACK): the loss was NaN");
    }
    PP_CHECK(tg_now() - t0 < 5);
    tg_free(c);
}

/* --- the wrappers and the group transports' arguments ---------------------------------------- */

/* A transport of one rank needs no collective functions; one of several names the missing one. */
static void group_wrappers_check_arguments_and_serve_one_rank_without_functions(void)
{
    pp_transport one, two;
    pp_error err;
    float v[3] = { 1, 2, 3 };
    char src[4] = "abc", dst[4] = "xyz";
    memset(&one, 0, sizeof one);
    one.world = 1;
    two = one;
    two.world = 2;
    PP_CHECK_OK(pp_group_all_reduce(&one, v, 3, 0, &err), &err);
    PP_CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3);
    PP_CHECK_OK(pp_group_all_gather(&one, src, dst, 3, 0, &err), &err);
    PP_CHECK(memcmp(dst, "abc", 3) == 0);
    PP_CHECK_OK(pp_group_barrier(&one, 0, &err), &err);
    PP_CHECK_FAILS(pp_group_all_reduce(&two, v, 3, 0, &err), &err, PP_EINVAL,
                   "transport.all_reduce_buf: must not be NULL for pp_group_all_reduce over 2 ranks");
    PP_CHECK_FAILS(pp_group_all_gather(&two, src, dst, 3, 0, &err), &err, PP_EINVAL,
                   "transport.all_gather: must not be NULL for pp_group_all_gather over 2 ranks");
    PP_CHECK_FAILS(pp_group_barrier(&two, 0, &err), &err, PP_EINVAL,
                   "transport.barrier: must not be NULL for pp_group_barrier over 2 ranks");
    PP_CHECK_FAILS(pp_group_barrier(NULL, 0, &err), &err, PP_EINVAL, "pp_group_barrier: transport must not be NULL");
    PP_CHECK_FAILS(pp_group_all_reduce(&one, NULL, 3, 0, &err), &err, PP_EINVAL, "buf is NULL for count=3");
    PP_CHECK_FAILS(pp_group_all_gather(&one, src, NULL, 3, 0, &err), &err, PP_EINVAL, "send and recv must not be NULL");
    PP_CHECK_FAILS(pp_group_all_reduce(&one, v, 3, -1, &err), &err, PP_EINVAL, "timeout_s=-1: must be >= 0");
    two.rank = 2;
    PP_CHECK_FAILS(pp_group_barrier(&two, 0, &err), &err, PP_EINVAL, "transport.rank=2 of world=2");
}

static void group_transports_check_their_members_and_are_made_once(void)
{
    pp_threads_world *w = NULL;
    pp_transport a, b, c;
    pp_grid g = tg_grid();
    pp_grid_config gc;
    pp_grid small;
    pp_error err;
    static const int ok[3] = { 4, 1, 6 }, twice[3] = { 4, 1, 4 }, out[2] = { 1, 8 };
    PP_CHECK_OK(pp_threads_world_create(TG_WORLD, &w, &err), &err);
    PP_CHECK_OK(pp_threads_transport_group(w, ok, 3, 6, &a, &err), &err);
    PP_CHECK(a.rank == 2 && a.world == 3 && a.all_reduce_buf && a.all_gather && a.barrier && a.post);
    PP_CHECK_OK(pp_threads_transport_group(w, ok, 3, 6, &b, &err), &err);
    PP_CHECK(a.user == b.user);   /* the same members and rank: the same transport */
    PP_CHECK_OK(pp_threads_transport_group(w, ok, 3, 1, &c, &err), &err);
    PP_CHECK(c.user != a.user && c.rank == 1);
    PP_CHECK(pp_threads_transport_world(&a) == w && pp_threads_transport_world(&c) == w);
    PP_CHECK_FAILS(pp_threads_transport_group(w, twice, 3, 4, &a, &err), &err, PP_EINVAL, "members[2]=4: appears twice");
    PP_CHECK_FAILS(pp_threads_transport_group(w, out, 2, 1, &a, &err), &err, PP_EINVAL,
                   "members[1]=8: must be a world rank, 0 .. 7");
    PP_CHECK_FAILS(pp_threads_transport_group(w, ok, 3, 5, &a, &err), &err, PP_EINVAL, "rank=5: not one of the group's 3 members");
    PP_CHECK_FAILS(pp_threads_transport_group(w, ok, 0, 4, &a, &err), &err, PP_EINVAL, "size=0: must be between 1 and");
    PP_CHECK_FAILS(pp_threads_transport_group(w, NULL, 3, 4, &a, &err), &err, PP_EINVAL, "members: must not be NULL");
    /* the grid's groups: rank 5 = cp 1, dp 0, pp 1; its dp-cp group is 4 5 6 7 */
    PP_CHECK_OK(pp_threads_transport_grid(w, &g, PP_GROUP_DP | PP_GROUP_CP, 5, &a, &err), &err);
    PP_CHECK(a.rank == 1 && a.world == 4);
    PP_CHECK_FAILS(pp_threads_transport_grid(w, &g, 0, 5, &a, &err), &err, PP_EINVAL, "dims=0x0");
    memset(&gc, 0, sizeof gc);
    gc.world = 4; gc.pp = 2;
    PP_CHECK_OK(pp_grid_init(&gc, &small, &err), &err);
    PP_CHECK_FAILS(pp_threads_transport_grid(w, &small, PP_GROUP_PP, 0, &a, &err), &err, PP_EINVAL,
                   "grid.world=4: must be the threads world's 8 ranks");
    memset(&c, 0, sizeof c);
    PP_CHECK(pp_threads_transport_world(&c) == NULL && pp_threads_transport_world(NULL) == NULL);
    pp_threads_world_free(w);   /* the group transports go with it (ASan: nothing leaks) */
}

const pp_test_case pp_suite_runtime_groups[] = {
    PP_TEST(the_test_values_sum_to_other_bits_in_another_order),
    PP_TEST(group_all_reduce_gives_every_rank_the_member_order_sum_bit_for_bit),
    PP_TEST(group_all_gather_puts_each_members_bytes_at_its_index),
    PP_TEST(group_barrier_returns_once_every_member_has_called_it),
    PP_TEST(transports_over_the_same_ranks_never_take_each_others_messages),
    PP_TEST(collectives_called_differently_are_named_at_once),
    PP_TEST(a_member_that_never_comes_makes_the_group_time_out),
    PP_TEST(an_abort_on_any_group_stops_every_rank_of_the_world),
    PP_TEST(group_wrappers_check_arguments_and_serve_one_rank_without_functions),
    PP_TEST(group_transports_check_their_members_and_are_made_once),
    {0}
};
