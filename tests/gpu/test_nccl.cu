/* tests/gpu/test_nccl.cu — pipepar_nccl.c on real GPUs: set-up errors, the transport (cross-rank
 * and same-rank transfers, stream ordering, many groups in flight), all-reduce, barrier,
 * ncclCommSplit by the rank grid, the gradient norm, the event timer, group times, and the
 * watchdog (an unmatched send ends in PP_ETIMEOUT within the deadline, then PP_EABORTED), and
 * the arrival gate's 64-bit flags (counts across 2^32; a late announcement after an abort), and
 * copy-engine transfers (direct: pushed, pulled, random orders, 4096 posts ahead, sizes that
 * differ, counts across 2^32; a sender with every SM taken, a dead peer; the ring between
 * processes is tests/gpu/test_ce_procs.cu's), the transport's group collectives (all-reduce
 * bits on both ranks, all-gather order, stream order, barrier, refusals, timeout and abort, with
 * and without the copy engines) and pp_nccl_split_group (an embedding group, groups of one, a rank
 * in no group, lists that disagree).
 * Ranks are threads of this process, one GPU each (the file bootstrap and the in-memory id);
 * with one GPU only the one-rank tests run. Ends with "N passed, N failed".
 * (C code; a .cu so that nvcc links it with the C++ runtime pipepar_cuda.o needs.)         */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <cuda_runtime.h>
#include <nccl.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../pipepar.h"

static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;
static int passed, failed;

#define CHECK(cond) check_((cond) != 0, __FILE__, __LINE__, #cond, "")
#define CHECK_MSG(cond, msg) check_((cond) != 0, __FILE__, __LINE__, #cond, (msg))
#define CHECK_OK(call, e) do { pp_status s_ = (call); check_(s_ == PP_OK, __FILE__, __LINE__, #call, (e)->message); } while (0)
#define CHECK_FAILS(call, e, status, needle) do { pp_status s_ = (call); \
    check_(s_ == (status) && strstr((e)->message, (needle)) != NULL, __FILE__, __LINE__, #call, (e)->message); } while (0)

static void check_(int ok, const char *file, int line, const char *what, const char *msg)
{
    pthread_mutex_lock(&count_mu);
    if (ok) passed++;
    else { failed++; printf("FAIL %s:%d: %s %s\n", file, line, what, msg ? msg : ""); fflush(stdout); }
    pthread_mutex_unlock(&count_mu);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* --- set-up errors (host-checkable) -------------------------------------------------------- */

static void setup_errors_name_the_parameter(void)
{
    pp_nccl_config c;
    pp_nccl *nc = NULL;
    pp_error e;
    memset(&c, 0, sizeof c);
    unsetenv("RANK"); unsetenv("OMPI_COMM_WORLD_RANK"); unsetenv("PMI_RANK"); unsetenv("PMIX_RANK"); unsetenv("SLURM_PROCID");
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "none of RANK");
    setenv("RANK", "abc", 1);
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "RANK='abc'");
    setenv("RANK", "3", 1); setenv("WORLD_SIZE", "2", 1);
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "rank=3: must be below world=2");
    unsetenv("RANK"); unsetenv("WORLD_SIZE");
    c.world = 2; c.rank = 2;
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "rank=2: must be between 0 and world-1 = 1");
    c.rank = 0; c.device = 99;
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "device=99");
    c.device = 0; c.bootstrap = PP_NCCL_BOOTSTRAP_ID;
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "bootstrap=ID needs the id");
    c.bootstrap = PP_NCCL_BOOTSTRAP_MPI;
#ifndef PIPEPAR_NCCL_MPI
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EUNSUPPORTED, "built without -DPIPEPAR_NCCL_MPI");
#endif
    c.bootstrap = PP_NCCL_BOOTSTRAP_FILE; c.timeout_s = -1;
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "timeout_s=-1");
    c.timeout_s = 0; c.cta_policy = 3;
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "cta_policy=3: must be 0 (default), 1 (efficiency) or 2 (zero)");
    c.cta_policy = 0; c.test_count_base = 1ull << 62;
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "test_count_base=4611686018427387904: must be below 2^62");
    c.test_count_base = 0;
    unsetenv("PIPEPAR_NCCL_ID_FILE"); unsetenv("TORCHELASTIC_RUN_ID"); unsetenv("SLURM_JOB_ID"); unsetenv("MASTER_PORT");
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_EINVAL, "set PIPEPAR_NCCL_ID_FILE");
    /* rank 1 waiting for a file nobody writes: a timeout, not a hang */
    c.rank = 1; c.id_file = "/tmp/pipepar_test_no_such_id_file"; c.timeout_s = 0.5;
    remove(c.id_file);
    CHECK_FAILS(pp_nccl_init(&c, &nc, &e), &e, PP_ETIMEOUT, "did not write it within");
    CHECK(nc == NULL);
}

/* --- one rank -------------------------------------------------------------------------------- */

static void one_rank_transport_all_reduce_and_grad_norm(void)
{
    pp_nccl_config c;
    pp_nccl_id id;
    pp_nccl *nc = NULL;
    pp_transport t;
    pp_error e;
    cudaStream_t s;
    unsigned char *a, *b, host[1024];
    void *h = NULL;
    float v[3] = { 1.5f, -2.0f, 3.0f }, *d;
    int i, ok = 1;
    memset(&c, 0, sizeof c);
    CHECK_OK(pp_nccl_unique_id(&id, &e), &e);
    c.world = 1; c.rank = 0; c.device = 0; c.bootstrap = PP_NCCL_BOOTSTRAP_ID; c.id = &id; c.timeout_s = 20;
    CHECK_OK(pp_nccl_init(&c, &nc, &e), &e);
    if (!nc) return;
    CHECK(pp_nccl_rank(nc) == 0 && pp_nccl_world(nc) == 1 && pp_nccl_comm(nc) && pp_nccl_stream(nc));
    CHECK(strstr(pp_nccl_describe(nc), "rank 0 of 1") != NULL);
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMalloc((void **)&a, 1024); cudaMalloc((void **)&b, 1024);
    CHECK_OK(pp_nccl_transport(nc, s, &t, &e), &e);
    /* the arrival gate: collective; alone there is no peer to gate, and posts run as before */
    {
        int gated = -1;
        pp_transport none;
        memset(&none, 0, sizeof none);
        CHECK_FAILS(pp_nccl_transport_gate(&none, &gated, &e), &e, PP_EINVAL, "not a transport made by pp_nccl_transport");
        CHECK_OK(pp_nccl_transport_gate(&t, &gated, &e), &e);
        CHECK_MSG(gated == 0, "a rank alone gates no peer");
        CHECK_FAILS(pp_nccl_transport_gate(&t, &gated, &e), &e, PP_EINVAL, "called twice on one transport");
    }
    /* a same-rank send and its receive in one group: copied on the device, no NCCL */
    cudaMemsetAsync(a, 0x5a, 1024, s);
    cudaMemsetAsync(b, 0, 1024, s);
    {
        pp_transfer x[2];
        memset(x, 0, sizeof x);
        x[0].is_send = 1; x[0].peer = 0; x[0].tag = pp_transfer_tag(PP_OP_SEND_F, 0, 3, 0); x[0].buf = a; x[0].bytes = 1024;
        x[1].is_send = 0; x[1].peer = 0; x[1].tag = x[0].tag; x[1].buf = b; x[1].bytes = 1024;
        CHECK_OK(t.post(t.user, x, 2, &h, &e), &e);
        CHECK_OK(t.wait(t.user, h, 5, &e), &e);
        cudaMemcpyAsync(host, b, 1024, cudaMemcpyDeviceToHost, s);
        CHECK_OK(pp_nccl_sync(nc, s, 5, &e), &e);
        for (i = 0; i < 1024; i++) ok &= host[i] == 0x5a;
        CHECK_MSG(ok, "same-rank transfer delivered the bytes");
        /* a receive with no send before it */
        x[1].tag = pp_transfer_tag(PP_OP_SEND_F, 0, 4, 0);
        CHECK_FAILS(t.post(t.user, &x[1], 1, &h, &e), &e, PP_EUNSUPPORTED, "posted before its send");
        x[1].peer = 1;
        CHECK_FAILS(t.post(t.user, &x[1], 1, &h, &e), &e, PP_EINVAL, "peer=1: must be between 0 and 0");
    }
    /* the gate after a post: refused (the counts would no longer pair) */
    {
        pp_transport t2;
        pp_transfer x[2];
        void *h2 = NULL;
        int gated = -1;
        CHECK_OK(pp_nccl_transport(nc, s, &t2, &e), &e);
        memset(x, 0, sizeof x);
        x[0].is_send = 1; x[0].peer = 0; x[0].tag = pp_transfer_tag(PP_OP_SEND_F, 0, 5, 0); x[0].buf = a; x[0].bytes = 64;
        x[1].is_send = 0; x[1].peer = 0; x[1].tag = x[0].tag; x[1].buf = b; x[1].bytes = 64;
        CHECK_OK(t2.post(t2.user, x, 2, &h2, &e), &e);
        CHECK_OK(t2.wait(t2.user, h2, 5, &e), &e);
        CHECK_FAILS(pp_nccl_transport_gate(&t2, &gated, &e), &e, PP_EINVAL, "before the first post (rank 0 has posted 1 groups)");
        CHECK_OK(pp_nccl_sync(nc, s, 5, &e), &e);
        pp_nccl_transport_free(&t2);
    }
    CHECK_OK(pp_nccl_all_reduce_host(nc, v, 3, 5, &e), &e);
    CHECK(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.0f);
    CHECK_OK(pp_nccl_barrier(nc, 5, &e), &e);
    /* grad norm: sum of squares 16 -> norm 4 -> scale min(1, 2 / 4) */
    cudaMalloc((void **)&d, 2 * sizeof(float));
    v[0] = 16.0f;
    cudaMemcpy(d, v, sizeof(float), cudaMemcpyHostToDevice);
    CHECK_OK(pp_nccl_grad_norm(nc, d, 2.0f, d + 1, s, &e), &e);
    cudaStreamSynchronize(s);
    cudaMemcpy(v, d, 2 * sizeof(float), cudaMemcpyDeviceToHost);
    CHECK(v[0] == 16.0f && v[1] > 0.4999f && v[1] < 0.5001f);
    CHECK_FAILS(pp_nccl_grad_norm(nc, d, 0.0f, d + 1, s, &e), &e, PP_EINVAL, "max_norm=0");
    /* the group collectives alone: the sum of one rank is its values, the gather a copy */
    {
        float hv[4] = { 1.5f, -2.0f, 0.25f, 8.0f }, got[4] = { 0, 0, 0, 0 };
        unsigned char *g1 = NULL, *g2 = NULL, hb[100];
        float *dv = NULL;
        cudaMalloc((void **)&dv, sizeof hv);
        cudaMalloc((void **)&g1, 100);
        cudaMalloc((void **)&g2, 100);
        cudaMemcpy(dv, hv, sizeof hv, cudaMemcpyHostToDevice);
        cudaMemset(g1, 0x7e, 100);
        cudaMemset(g2, 0, 100);
        CHECK_OK(t.all_reduce_buf(t.user, dv, 4, 5, &e), &e);
        CHECK_OK(t.all_gather(t.user, g1, g2, 100, 5, &e), &e);
        CHECK_OK(t.barrier(t.user, 5, &e), &e);
        CHECK_OK(pp_nccl_sync(nc, s, 5, &e), &e);
        cudaMemcpy(got, dv, sizeof got, cudaMemcpyDeviceToHost);
        cudaMemcpy(hb, g2, 100, cudaMemcpyDeviceToHost);
        CHECK_MSG(!memcmp(got, hv, sizeof hv), "one rank: all_reduce_buf leaves the values");
        for (i = 0, ok = 1; i < 100; i++) ok &= hb[i] == 0x7e;
        CHECK_MSG(ok, "one rank: all_gather copies send into recv");
        cudaFree(dv); cudaFree(g1); cudaFree(g2);
    }
    /* pp_nccl_split_group alone: a group of one, no group, a member that is no rank */
    {
        const int zero[1] = { 0 }, one[1] = { 1 };
        pp_nccl *grp = NULL;
        CHECK_OK(pp_nccl_split_group(nc, zero, 1, &grp, &e), &e);
        CHECK(grp && pp_nccl_world(grp) == 1 && pp_nccl_rank(grp) == 0);
        pp_nccl_free(grp);
        grp = NULL;
        CHECK_OK(pp_nccl_split_group(nc, NULL, 0, &grp, &e), &e);
        CHECK_MSG(grp == NULL, "size 0: in no group, no communicator");
        CHECK_FAILS(pp_nccl_split_group(nc, one, 1, &grp, &e), &e, PP_EINVAL, "members[0]=1: must be a rank of the parent, 0..0");
        CHECK_FAILS(pp_nccl_split_group(nc, NULL, 1, &grp, &e), &e, PP_EINVAL, "members=NULL: needs size=1 parent ranks");
    }
    /* the event timer: marks come back as increasing host-clock seconds */
    {
        pp_timer tm;
        double sec[4] = { -1, -1, -1, -1 }, t0 = now_s();
        CHECK_OK(pp_nccl_event_timer(s, 4, &tm, &e), &e);
        tm.mark(tm.user, 0);
        cudaMemsetAsync(a, 1, 1024, s);
        tm.mark(tm.user, 2);
        CHECK_OK(tm.resolve(tm.user, sec, 4, &e), &e);
        CHECK(sec[0] >= t0 - 1 && sec[2] >= sec[0] && sec[1] == -1 && sec[3] == -1);
        pp_nccl_timer_free(&tm);
    }
    pp_nccl_transport_free(&t);
    cudaFree(a); cudaFree(b); cudaFree(d);
    cudaStreamDestroy(s);
    pp_nccl_free(nc);
}

/* --- two ranks as two threads -------------------------------------------------------------- */

typedef struct two_ranks {
    pp_nccl_id id;
    const char *id_file;
    pthread_barrier_t bar;
} two_ranks;

typedef struct rank_arg { two_ranks *tr; int rank; } rank_arg;

/* Frees a communicator that both threads hold, then waits until the other thread has freed its
 * rank's too: the rule for ranks that are threads of one process (pipepar.h, THREADS). The last
 * thread into ncclCommDestroy releases both ranks' shares of it, on both GPUs, and waits for
 * both GPUs; a thread whose free returned first and that went straight on to a collective on
 * another communicator (the parent's all-reduce in pp_nccl_split_group) would keep its GPU in a
 * kernel that waits for the peer's, which the peer launches only after that wait. */
static void free_and_meet(pthread_barrier_t *bar, pp_nccl *comm)
{
    pp_nccl_free(comm);
    pthread_barrier_wait(bar);
}

#define NBIG (64u << 20)   /* 64 MiB: more than NCCL buffers, so a send needs its receive */

static void *rank_main(void *argp)
{
    rank_arg *arg = (rank_arg *)argp;
    two_ranks *tr = arg->tr;
    int rank = arg->rank, peer = 1 - rank, i, g;
    pp_nccl_config c;
    pp_nccl *world = NULL, *tpc = NULL, *ppc = NULL;
    pp_transport t;
    pp_error e;
    cudaStream_t s;
    unsigned char *sendb[20], *recvb[20], host[256];
    void *h[20];
    pp_grid grid;
    pp_grid_config gc;

    memset(&c, 0, sizeof c);
    c.world = 2; c.rank = rank; c.device = rank; c.timeout_s = 30;
    if (tr->id_file) { c.bootstrap = PP_NCCL_BOOTSTRAP_FILE; c.id_file = tr->id_file; }
    else { c.bootstrap = PP_NCCL_BOOTSTRAP_ID; c.id = &tr->id; }
    CHECK_OK(pp_nccl_init(&c, &world, &e), &e);
    if (!world) return NULL;
    if (tr->id_file && rank == 0) CHECK_MSG(access(tr->id_file, F_OK) != 0, "rank 0 removed the id file after init");

    /* split by the grid: tp 2 -> both ranks in one group, index = rank; pp groups of one */
    memset(&gc, 0, sizeof gc);
    gc.world = 2; gc.tp = 2;
    CHECK_OK(pp_grid_init(&gc, &grid, &e), &e);
    CHECK_OK(pp_nccl_split(world, &grid, PP_GROUP_TP, &tpc, &e), &e);
    CHECK_OK(pp_nccl_split(world, &grid, PP_GROUP_PP, &ppc, &e), &e);
    CHECK(tpc && pp_nccl_world(tpc) == 2 && pp_nccl_rank(tpc) == rank);
    CHECK(ppc && pp_nccl_world(ppc) == 1 && pp_nccl_rank(ppc) == 0);
    {
        float v[2] = { (float)(rank + 1), 10.0f };
        CHECK_OK(pp_nccl_all_reduce_host(tpc, v, 2, 10, &e), &e);
        CHECK(v[0] == 3.0f && v[1] == 20.0f);
        v[0] = 7.0f;
        CHECK_OK(pp_nccl_all_reduce_host(ppc, v, 1, 10, &e), &e);
        CHECK(v[0] == 7.0f);
    }
    free_and_meet(&tr->bar, ppc);   /* before the transfers on tpc */

    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    CHECK_OK(pp_nccl_transport(tpc, s, &t, &e), &e);
    CHECK(t.rank == rank && t.world == 2);
    for (g = 0; g < 20; g++) { cudaMalloc((void **)&sendb[g], NBIG); cudaMalloc((void **)&recvb[g], NBIG); }

    /* 20 groups in flight, each a send and a receive; every buffer is written on the compute
     * stream right before its post, so a transport that did not order the communication stream
     * after the compute stream would send stale bytes. */
    CHECK_OK(pp_nccl_transport_record(&t, 1, &e), &e);
    {
        cudaEvent_t base;
        pp_nccl_group_time times[32];
        int count = 0;
        cudaEventCreate(&base);
        cudaEventRecord(base, s);
        for (g = 0; g < 20; g++) {
            pp_transfer x[2];
            cudaMemsetAsync(recvb[g], 0, NBIG, s);
            cudaMemsetAsync(sendb[g], 16 * rank + g, NBIG, s);
            memset(x, 0, sizeof x);
            x[0].is_send = 1; x[0].peer = peer; x[0].buf = sendb[g]; x[0].bytes = NBIG;
            x[1].is_send = 0; x[1].peer = peer; x[1].buf = recvb[g]; x[1].bytes = NBIG;
            if (rank == 1) { pp_transfer tmp = x[0]; x[0] = x[1]; x[1] = tmp; }   /* order within a group is free */
            CHECK_OK(t.post(t.user, x, 2, &h[g], &e), &e);
        }
        for (g = 0; g < 20; g++) CHECK_OK(t.wait(t.user, h[g], 10, &e), &e);
        CHECK_OK(pp_nccl_sync(tpc, s, 20, &e), &e);
        for (g = 0; g < 20; g++) {
            int ok = 1;
            cudaMemcpy(host, recvb[g] + NBIG - 256, 256, cudaMemcpyDeviceToHost);
            for (i = 0; i < 256; i++) ok &= host[i] == (unsigned char)(16 * peer + g);
            CHECK_MSG(ok, "group received the bytes written right before the peer's post");
        }
        CHECK_OK(pp_nccl_transport_times(&t, base, times, 32, &count, &e), &e);
        CHECK(count == 20);
        for (g = 0; g < count && g < 20; g++)
            CHECK(times[g].end >= times[g].begin && times[g].begin >= 0 && times[g].bytes_sent == NBIG &&
                  times[g].bytes_received == NBIG && times[g].peer == peer && times[g].transfers == 2);
        if (rank == 0 && count > 1)
            printf("  2 ranks, 20 groups of 64 MiB each way: %.1f GB/s per direction (group %d)\n",
                   (double)NBIG / (times[count - 1].end - times[count - 2].end) / 1e9, count - 1);
        cudaEventDestroy(base);
    }
    /* test(): a finished group reports done */
    {
        pp_transfer x;
        void *hh = NULL;
        int done = 0, polls = 0;
        memset(&x, 0, sizeof x);
        x.is_send = rank == 0; x.peer = peer; x.buf = rank == 0 ? sendb[0] : recvb[0]; x.bytes = 4096;
        CHECK_OK(t.post(t.user, &x, 1, &hh, &e), &e);
        while (!done && polls++ < 100000) { CHECK_OK(t.test(t.user, hh, &done, &e), &e); if (!done) { struct timespec ts = { 0, 100000 }; nanosleep(&ts, NULL); } }
        CHECK(done);
    }
    CHECK_OK(pp_nccl_barrier(tpc, 10, &e), &e);

    /* grad norm over both ranks: 9 + 16 = 25 -> norm 5 -> scale min(1, 1 / 5) */
    {
        float *d, v[2];
        cudaMalloc((void **)&d, 2 * sizeof(float));
        v[0] = rank == 0 ? 9.0f : 16.0f;
        cudaMemcpy(d, v, sizeof(float), cudaMemcpyHostToDevice);
        CHECK_OK(pp_nccl_grad_norm(tpc, d, 1.0f, d + 1, s, &e), &e);
        CHECK_OK(pp_nccl_sync(tpc, s, 10, &e), &e);
        cudaMemcpy(v, d, 2 * sizeof(float), cudaMemcpyDeviceToHost);
        CHECK(v[0] == 25.0f && v[1] > 0.1999f && v[1] < 0.2001f);
        cudaFree(d);
    }

    /* the watchdog: rank 0 sends 1 GiB that rank 1 never receives (NCCL's p2p buffers absorb a
     * 64 MiB send without its receive: seen on H200s with NCCL 2.28.3). Rank 0's wait on the
     * compute stream must end in PP_ETIMEOUT within its deadline (2 s), not hang; afterwards
     * every call says PP_EABORTED. Rank 1 aborts its side once rank 0 is done. */
    pthread_barrier_wait(&tr->bar);
    if (rank == 0) {
        pp_transfer x;
        void *hh = NULL, *huge = NULL;
        double t0;
        pp_status st;
        cudaMalloc(&huge, (size_t)1 << 30);
        memset(&x, 0, sizeof x);
        x.is_send = 1; x.peer = 1; x.buf = huge; x.bytes = (size_t)1 << 30;
        t0 = now_s();
        st = t.post(t.user, &x, 1, &hh, &e);
        if (st == PP_OK) {
            CHECK_OK(t.wait(t.user, hh, 2, &e), &e);
            st = pp_nccl_sync(tpc, s, 2.0, &e);
        }
        CHECK_MSG(st == PP_ETIMEOUT, e.message);
        CHECK_MSG(now_s() - t0 < 2.0 + 5.0, "the timeout came within the deadline");
        CHECK(strstr(e.message, "timed out") != NULL);
        CHECK_FAILS(pp_nccl_barrier(tpc, 1, &e), &e, PP_EABORTED, "was aborted");
        CHECK_FAILS(t.post(t.user, &x, 1, &hh, &e), &e, PP_EABORTED, "was aborted");
        printf("  watchdog: unmatched send -> %s after %.2f s (deadline 2 s)\n", pp_status_name(st), now_s() - t0);
        cudaStreamSynchronize(s);   /* the aborted kernel ended: the buffer is free */
        cudaFree(huge);
    }
    pthread_barrier_wait(&tr->bar);
    if (rank == 1) pp_nccl_abort(tpc, PP_EABORTED, "test over: the peer aborted");
    pp_nccl_sync(tpc, s, 1, &e);   /* aborted: returns at once */
    cudaStreamSynchronize(s);       /* the aborted NCCL kernel has ended, so this returns */
    pp_nccl_transport_free(&t);
    for (g = 0; g < 20; g++) { cudaFree(sendb[g]); cudaFree(recvb[g]); }
    cudaStreamDestroy(s);
    pp_nccl_free(tpc);
    pp_nccl_free(world);
    return NULL;
}

static void two_ranks_run(const char *id_file)
{
    two_ranks tr;
    pthread_t th[2];
    rank_arg args[2];
    pp_error e;
    int r;
    memset(&tr, 0, sizeof tr);
    tr.id_file = id_file;
    if (!id_file) CHECK_OK(pp_nccl_unique_id(&tr.id, &e), &e);
    pthread_barrier_init(&tr.bar, NULL, 2);
    for (r = 0; r < 2; r++) { args[r].tr = &tr; args[r].rank = r; pthread_create(&th[r], NULL, rank_main, &args[r]); }
    for (r = 0; r < 2; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&tr.bar);
}

/* --- the arrival gate's flags, two ranks as two threads ------------------------------------- */

/* Holds a stream until the host lets go: what keeps a communication stream's gate waits queued. */
__global__ void hold_until(volatile int *release)
{
    while (*release == 0) { }
}

static int stream_drains(cudaStream_t s, double seconds)
{
    double t0 = now_s();
    while (now_s() - t0 < seconds) {
        cudaError_t q = cudaStreamQuery(s);
        if (q == cudaSuccess) return 1;
        if (q != cudaErrorNotReady) return 0;
        { struct timespec ts = { 0, 1000000 }; nanosleep(&ts, NULL); }
    }
    return 0;
}

typedef struct gate_test {      /* one rank's thread in the gate's and the copy engines' tests */
    two_ranks *tr;
    int rank;
    int mode;                   /* which test of the thread function (see each) */
    volatile int *release;      /* mapped host flag that holds a kernel until the host lets go */
    volatile int abort_done;
    pp_nccl *nc;
} gate_test;

/* Two ranks as two threads running fn(gate_test *), one GPU each, with a fresh unique id, a
 * barrier and a release flag they share. */
static void two_rank_threads(void *(*fn)(void *), int mode)
{
    two_ranks tr;
    pthread_t th[2];
    gate_test g[2];
    pp_error e;
    int r, *release = NULL;
    memset(&tr, 0, sizeof tr);
    memset(g, 0, sizeof g);
    CHECK_OK(pp_nccl_unique_id(&tr.id, &e), &e);
    pthread_barrier_init(&tr.bar, NULL, 2);
    cudaHostAlloc((void **)&release, sizeof *release, cudaHostAllocMapped | cudaHostAllocPortable);
    *release = 0;
    for (r = 0; r < 2; r++) {
        g[r].tr = &tr; g[r].rank = r; g[r].mode = mode; g[r].release = release;
        pthread_create(&th[r], NULL, fn, &g[r]);
    }
    for (r = 0; r < 2; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&tr.bar);
    cudaFreeHost(release);
}

/* The test fields of every communicator two_rank_init makes (main sets them per test). */
static uint64_t g_count_base;   /* pp_nccl_config.test_count_base */
static int g_ce_threads;        /* pp_nccl_config.test_ce_threads */

/* One rank's communicator in those tests: GPU `rank`, the shared id, a 30 s deadline. NULL (a
 * failed check counted) when it cannot be made. */
static pp_nccl *two_rank_init(gate_test *g)
{
    pp_nccl_config c;
    pp_nccl *nc = NULL;
    pp_error e;
    memset(&c, 0, sizeof c);
    c.world = 2; c.rank = g->rank; c.device = g->rank; c.timeout_s = 30;
    c.bootstrap = PP_NCCL_BOOTSTRAP_ID; c.id = &g->tr->id;
    c.test_count_base = g_count_base;
    c.test_ce_threads = g_ce_threads;
    cudaSetDevice(g->rank);
    CHECK_OK(pp_nccl_init(&c, &nc, &e), &e);
    return nc;
}

static void *gate_abort_thread(void *argp)
{
    gate_test *g = (gate_test *)argp;
    cudaSetDevice(g->rank);
    pp_nccl_abort(g->nc, PP_EABORTED, "gate test: abort with gate waits queued");
    g->abort_done = 1;
    return NULL;
}

static void *gate_rank_main(void *argp)
{
    gate_test *g = (gate_test *)argp;
    two_ranks *tr = g->tr;
    int rank = g->rank, peer = 1 - rank, gated = -1, i, k;
    pp_nccl *nc = NULL;
    pp_transport t;
    pp_error e;
    cudaStream_t s;
    unsigned char *sendb, *recvb, host[64];
    void *h[12];
    if (!(nc = two_rank_init(g))) return NULL;
    g->nc = nc;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    CHECK_OK(pp_nccl_transport(nc, s, &t, &e), &e);
    CHECK_OK(pp_nccl_transport_gate(&t, &gated, &e), &e);
    CHECK_MSG(gated == 1, "threads on two GPUs: the peer is gated");
    cudaMalloc((void **)&sendb, 12 << 20);
    cudaMalloc((void **)&recvb, 12 << 20);
    if (g->mode == 0) {
        /* 12 groups each way from a count of 2^32 - 6: the low word wraps at the 6th, and the
         * peer must then write the high word too, after the low one: without it the 64-bit
         * waits after the wrap never pass (a hang this catches); written first, a wait could
         * open one group early (the bytes would still pair: NCCL matches in order) */
        for (k = 0; k < 12; k++) {
            pp_transfer x[2];
            cudaMemsetAsync(sendb + ((size_t)k << 20), 32 * rank + k, 1 << 20, s);
            memset(x, 0, sizeof x);
            x[0].is_send = 1; x[0].peer = peer; x[0].buf = sendb + ((size_t)k << 20); x[0].bytes = 1 << 20;
            x[1].is_send = 0; x[1].peer = peer; x[1].buf = recvb + ((size_t)k << 20); x[1].bytes = 1 << 20;
            CHECK_OK(t.post(t.user, x, 2, &h[k], &e), &e);
        }
        for (k = 0; k < 12; k++) CHECK_OK(t.wait(t.user, h[k], 10, &e), &e);
        CHECK_OK(pp_nccl_sync(nc, s, 10, &e), &e);
        for (k = 0; k < 12; k++) {
            int ok = 1;
            cudaMemcpy(host, recvb + ((size_t)k << 20) + 1000, 64, cudaMemcpyDeviceToHost);
            for (i = 0; i < 64; i++) ok &= host[i] == (unsigned char)(32 * peer + k);
            CHECK_MSG(ok, "gate counts across 2^32: each group got its bytes");
        }
        CHECK_OK(pp_nccl_barrier(nc, 10, &e), &e);
    } else {
        /* Rank 0 queues three gated groups behind a held compute stream, then aborts: its abort
         * opens the gates. Rank 1, alive but behind, announces its next group only after that,
         * writing a lower count into rank 0's flag. Rank 0's later waits must still pass once the
         * compute stream is let go, so that its communication stream drains: with one 32-bit
         * word the late announcement shut them again and the stream never drained. A first
         * exchange both ways sets up NCCL's connections (made at a pair's first transfer, with
         * both sides there), so counts are then 1 and rank 1's late announcement writes 2 under
         * rank 0's queued 2, 3 and 4. */
        {
            pp_transfer x[2];
            memset(x, 0, sizeof x);
            x[0].is_send = 1; x[0].peer = peer; x[0].buf = sendb; x[0].bytes = 4096;
            x[1].is_send = 0; x[1].peer = peer; x[1].buf = recvb; x[1].bytes = 4096;
            CHECK_OK(t.post(t.user, x, 2, &h[0], &e), &e);
            CHECK_OK(t.wait(t.user, h[0], 10, &e), &e);
            CHECK_OK(pp_nccl_sync(nc, s, 10, &e), &e);
        }
        pthread_barrier_wait(&tr->bar);
        if (rank == 0) {
            pthread_t th;
            hold_until<<<1, 1, 0, s>>>(g->release);
            for (k = 0; k < 3; k++) {
                pp_transfer x;
                memset(&x, 0, sizeof x);
                x.is_send = 1; x.peer = 1; x.buf = sendb; x.bytes = 4096;
                CHECK_OK(t.post(t.user, &x, 1, &h[k], &e), &e);
            }
            pthread_create(&th, NULL, gate_abort_thread, g);
            pthread_barrier_wait(&tr->bar);   /* the abort thread has started: its hook runs at once,
                                                 well inside rank 1's 150 ms */
            { struct timespec ts = { 0, 300000000 }; nanosleep(&ts, NULL); }
            *g->release = 1;                               /* after rank 1's late announcement */
            CHECK_MSG(stream_drains((cudaStream_t)pp_nccl_stream(nc), 15), "a peer behind cannot shut an opened gate: the "
                      "communication stream drained after the abort");
            CHECK_MSG(stream_drains(s, 15), "the compute stream drained");
            for (i = 0; i < 150 && !g->abort_done; i++) { struct timespec ts = { 0, 100000000 }; nanosleep(&ts, NULL); }
            CHECK_MSG(g->abort_done, "pp_nccl_abort returned");
            if (!g->abort_done) { printf("gate test: abort hangs; giving up\n%d passed, %d failed\n", passed, failed + 1); fflush(stdout); _exit(1); }
            pthread_join(th, NULL);
            pthread_barrier_wait(&tr->bar);
        } else {
            pp_transfer x;
            pthread_barrier_wait(&tr->bar);
            { struct timespec ts = { 0, 150000000 }; nanosleep(&ts, NULL); }   /* rank 0's hook has run */
            memset(&x, 0, sizeof x);
            x.is_send = 0; x.peer = 0; x.buf = recvb; x.bytes = 4096;
            CHECK_OK(t.post(t.user, &x, 1, &h[0], &e), &e);
            pthread_barrier_wait(&tr->bar);                /* rank 0 is done */
            pp_nccl_abort(nc, PP_EABORTED, "gate test: the peer aborted");
            CHECK_MSG(stream_drains((cudaStream_t)pp_nccl_stream(nc), 15), "rank 1's stream drained after its abort");
        }
        printf("  gate: rank %d drained after an abort with a late announcement from the peer\n", rank);
    }
    cudaStreamSynchronize(s);
    pp_nccl_transport_free(&t);
    cudaFree(sendb); cudaFree(recvb);
    cudaStreamDestroy(s);
    pp_nccl_free(nc);
    return NULL;
}

/* pp_nccl_reorder: the two ranks swap numbers; the new communicator's rank, size and a transfer
 * between the renumbered ranks agree; new numbers that are not a permutation fail on both ranks. */
static void *reorder_rank(void *argp)
{
    gate_test *g = (gate_test *)argp;
    pp_nccl *nc = NULL, *swapped = NULL, *dup = NULL;
    pp_error e;
    float *d = NULL, h = -1;
    if (!(nc = two_rank_init(g))) return NULL;
    /* one rank out of range: it is told why, the other that a rank gave a bad number; neither waits */
    if (g->rank == 0) CHECK_FAILS(pp_nccl_reorder(nc, 2, &swapped, &e), &e, PP_EINVAL, "new_rank=2: must be in 0..1");
    else CHECK_FAILS(pp_nccl_reorder(nc, 0, &swapped, &e), &e, PP_EINVAL, "1 other rank(s) gave a number outside 0..1");
    CHECK_OK(pp_nccl_reorder(nc, 1 - g->rank, &swapped, &e), &e);
    if (swapped) {
        CHECK(pp_nccl_rank(swapped) == 1 - g->rank);
        CHECK(pp_nccl_world(swapped) == 2);
        CHECK(pp_nccl_device(swapped) == g->rank);
        /* new rank 0 (GPU 1) sends its new number plus 40 to new rank 1 (GPU 0) */
        cudaMalloc((void **)&d, sizeof(float));
        h = pp_nccl_rank(swapped) == 0 ? 40.0f : -1.0f;
        cudaMemcpy(d, &h, sizeof h, cudaMemcpyHostToDevice);
        ncclGroupStart();
        if (pp_nccl_rank(swapped) == 0) ncclSend(d, 1, ncclFloat, 1, (ncclComm_t)pp_nccl_comm(swapped), (cudaStream_t)pp_nccl_stream(swapped));
        else ncclRecv(d, 1, ncclFloat, 0, (ncclComm_t)pp_nccl_comm(swapped), (cudaStream_t)pp_nccl_stream(swapped));
        ncclGroupEnd();
        CHECK_OK(pp_nccl_sync(swapped, NULL, 30, &e), &e);
        cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
        CHECK(h == 40.0f);
        cudaFree(d);
    }
    /* both ask for 0: refused on both, naming the number asked for twice */
    CHECK_FAILS(pp_nccl_reorder(nc, 0, &dup, &e), &e, PP_EINVAL, "not a permutation of 0..1 (2 ranks asked for 0)");
    CHECK(dup == NULL);
    pp_nccl_free(swapped);
    pp_nccl_free(nc);
    return NULL;
}

/* --- copy-engine transfers, two ranks as two threads ---------------------------------------- */

/* Takes every SM of the device until the host lets go: blocks of 1024 threads, as many as can be
 * resident at once, all spinning. A transfer that needed an SM could not run beside it. */
__global__ void take_every_sm(volatile int *release)
{
    while (*release == 0) { }
}

static int blocks_for_every_sm(int device)
{
    int sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, take_every_sm, 1024, 0);
    return sms * (per_sm > 0 ? per_sm : 1);
}


static void fill_pattern(unsigned char *host, size_t n, int seed)
{
    size_t i;
    for (i = 0; i < n; i++) host[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 12));
}

/* mode 0: data, pieces, counts across 2^32, a sender with every SM taken; 1: a dead peer;
 * 2: refusals */
static void *ce_rank_main(void *argp)
{
    gate_test *g = (gate_test *)argp;
    two_ranks *tr = g->tr;
    int rank = g->rank, peer = 1 - rank, peers = -1, gated = -1, k;
    pp_nccl *nc = NULL;
    pp_transport t;
    pp_error e;
    cudaStream_t s, hog;
    const size_t piece = 1 << 20, bytes = 5 * (piece / 2) + 4096;   /* 2.5 MiB + 4 KiB: three pieces, the last short */
    unsigned char *sendb = NULL, *recvb = NULL, *want = NULL, *got = NULL;
    void *h[12];
    if (!(nc = two_rank_init(g))) return NULL;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&hog, cudaStreamNonBlocking);
    CHECK_OK(pp_nccl_transport(nc, s, &t, &e), &e);
    if (g->mode == 2) {
        /* refusals: the rule and the value, on every rank alike */
        CHECK_FAILS(pp_nccl_transport_copy_engine(&t, piece, 1, &peers, &e), &e, PP_EINVAL, "slots=1: must be between 2 and 64");
        CHECK_FAILS(pp_nccl_transport_copy_engine(&t, 1000, 4, &peers, &e), &e, PP_EINVAL,
                    "slot_bytes=1000: must be a multiple of 256 from 4096 to 2^32");
        /* one rank's bad value: both refuse (after the first all-gather), the other naming it */
        CHECK_FAILS(pp_nccl_transport_copy_engine(&t, piece, rank == 1 ? 1 : 4, &peers, &e), &e, PP_EINVAL,
                    rank == 1 ? "slots=1: must be between 2 and 64" : "rank 1 passed slots=1, slot_bytes=1048576");
        /* ranks that disagree: both refuse, naming both */
        CHECK_FAILS(pp_nccl_transport_copy_engine(&t, piece, rank == 0 ? 4 : 3, &peers, &e), &e, PP_EINVAL,
                    "slot_bytes and slots differ between ranks (rank 0: 1048576 x 4, rank 1: 1048576 x 3)");
        CHECK(peers == 0);
        /* refusals leave nothing behind: a good call then goes through, once */
        CHECK_OK(pp_nccl_transport_copy_engine(&t, piece, 4, &peers, &e), &e);
        CHECK_MSG(peers == 1, "after refusals, a good call sets the copy engines up");
        CHECK_FAILS(pp_nccl_transport_copy_engine(&t, piece, 4, &peers, &e), &e, PP_EINVAL, "called twice on one transport");
        pp_nccl_transport_free(&t);
        /* after a post: refused everywhere (the counts would no longer pair) */
        CHECK_OK(pp_nccl_transport(nc, s, &t, &e), &e);
        {
            pp_transfer x;
            void *hh = NULL;
            cudaMalloc((void **)&sendb, 4096);
            memset(&x, 0, sizeof x);
            x.is_send = rank == 0; x.peer = peer; x.buf = sendb; x.bytes = 4096;
            CHECK_OK(t.post(t.user, &x, 1, &hh, &e), &e);
            CHECK_OK(t.wait(t.user, hh, 10, &e), &e);
            CHECK_OK(pp_nccl_sync(nc, s, 10, &e), &e);
            CHECK_FAILS(pp_nccl_transport_copy_engine(&t, piece, 4, &peers, &e), &e, PP_EINVAL,
                        "must be called before the first post (rank 0 has posted 1 groups)");
        }
        pp_nccl_transport_free(&t);
        cudaFree(sendb);
        cudaStreamDestroy(s); cudaStreamDestroy(hog);
        pp_nccl_free(nc);
        return NULL;
    }
    CHECK_OK(pp_nccl_transport_copy_engine(&t, piece, 3, &peers, &e), &e);
    CHECK_MSG(peers == 1, "threads on two GPUs: the peer goes through the copy engines");
    CHECK_OK(pp_nccl_transport_gate(&t, &gated, &e), &e);
    CHECK_MSG(gated == 0, "the gate leaves copy-engine peers alone");
    cudaMalloc((void **)&sendb, 12 * bytes);
    cudaMalloc((void **)&recvb, 12 * bytes);
    want = (unsigned char *)malloc(bytes);
    got = (unsigned char *)malloc(bytes);
    if (g->mode == 0) {
        /* 12 groups each way of 2.5 MiB, pushed or pulled, counts from 2^32 - 6
         * (test_count_base): the low word wraps within; every byte is checked. Each buffer is
         * written on the compute stream right before its post. */
        cudaEvent_t base;
        pp_nccl_group_time times[16];
        int count = 0, ok = 1;
        cudaEventCreate(&base);
        CHECK_OK(pp_nccl_transport_record(&t, 1, &e), &e);
        cudaEventRecord(base, s);
        for (k = 0; k < 12; k++) {
            pp_transfer x[2];
            fill_pattern(want, bytes, 16 * rank + k);
            cudaMemcpyAsync(sendb + k * bytes, want, bytes, cudaMemcpyHostToDevice, s);
            cudaMemsetAsync(recvb + k * bytes, 0, bytes, s);
            cudaStreamSynchronize(s);   /* `want` is reused */
            memset(x, 0, sizeof x);
            x[0].is_send = 1; x[0].peer = peer; x[0].buf = sendb + k * bytes; x[0].bytes = bytes;
            x[1].is_send = 0; x[1].peer = peer; x[1].buf = recvb + k * bytes; x[1].bytes = bytes;
            if (rank == 1) { pp_transfer tmp = x[0]; x[0] = x[1]; x[1] = tmp; }
            CHECK_OK(t.post(t.user, x, 2, &h[k], &e), &e);
        }
        for (k = 0; k < 12; k++) CHECK_OK(t.wait(t.user, h[k], 10, &e), &e);
        CHECK_OK(pp_nccl_sync(nc, s, 20, &e), &e);
        for (k = 0; k < 12; k++) {
            fill_pattern(want, bytes, 16 * peer + k);
            cudaMemcpy(got, recvb + k * bytes, bytes, cudaMemcpyDeviceToHost);
            ok &= memcmp(want, got, bytes) == 0;
        }
        {
            long long how[3] = { -1, -1, -1 };
            CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, how, &e), &e);
            CHECK_MSG(ok, "copy engines, direct: 12 groups of 2.5 MiB each way, counts across 2^32: every byte arrived");
            CHECK_MSG(how[0] + how[1] == 24 && how[2] == 0, "direct: each of the 24 transfers pushed or pulled");
            printf("  copy engines, both ranks posting at once: rank %d pushed %lld, pulled %lld\n", rank, how[0], how[1]);
        }
        CHECK_OK(pp_nccl_transport_times(&t, base, times, 16, &count, &e), &e);
        CHECK(count == 12);
        for (k = 0; k < count && k < 12; k++)
            CHECK(times[k].end >= times[k].begin && times[k].begin >= 0 && times[k].bytes_sent == bytes &&
                  times[k].bytes_received == bytes && times[k].peer == peer && times[k].transfers == 2);
        cudaEventDestroy(base);

        /* every SM of the sender taken by a spinning kernel: its send still goes (the push into
         * the receive buffer or the ring, or the receiver's pull, runs on a copy engine, the
         * counts are stream memory operations), and the receiver, whose SMs are free, gets every
         * byte. Twice: the receive posted first (the sender pushes), then the send (the receiver
         * pulls). */
        for (k = 0; k < 2; k++) {
            pp_transfer x;
            void *hh = NULL;
            int done = 0, polls = 0, receiver_first = k == 0;
            long long before[3], after[3];
            pp_status st = PP_OK;
            double t0;
            CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, before, &e), &e);
            pthread_barrier_wait(&tr->bar);
            if (rank == 0) {
                *g->release = 0;
                take_every_sm<<<blocks_for_every_sm(rank), 1024, 0, hog>>>(g->release);
            }
            memset(&x, 0, sizeof x);
            x.is_send = rank == 0; x.peer = peer; x.buf = rank == 0 ? sendb : recvb; x.bytes = bytes;
            if ((rank == 1) == receiver_first) CHECK_OK(t.post(t.user, &x, 1, &hh, &e), &e);
            pthread_barrier_wait(&tr->bar);
            if ((rank == 1) != receiver_first) CHECK_OK(t.post(t.user, &x, 1, &hh, &e), &e);
            t0 = now_s();
            while (!done && st == PP_OK && polls++ < 5000) {   /* up to 5 s */
                st = t.test(t.user, hh, &done, &e);
                if (!done) { struct timespec ts = { 0, 1000000 }; nanosleep(&ts, NULL); }
            }
            CHECK_OK(st, &e);
            CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, after, &e), &e);
            printf("  copy engines, every SM of rank 0 taken, %s first (rank %d: %s): %s after %.1f ms\n",
                   receiver_first ? "receive" : "send", rank,
                   after[0] > before[0] ? "pushed" : after[1] > before[1] ? "pulled" : "ring",
                   done ? "done" : "NOT done", 1e3 * (now_s() - t0));
            CHECK_MSG(done, rank == 0 ? "copy engines: a send completes while every SM of the sender is taken"
                                      : "copy engines: the receive of a sender whose SMs are all taken completes");
            if (rank == 0) CHECK_MSG(cudaStreamQuery(hog) == cudaErrorNotReady, "(the SMs were still taken when it did)");
            pthread_barrier_wait(&tr->bar);
            if (rank == 0) *g->release = 1;
            cudaStreamSynchronize(hog);
            if (!done) {   /* with the SMs free again */
                st = t.wait(t.user, hh, 10, &e);
                CHECK_OK(pp_nccl_sync(nc, s, 10, &e), &e);
                CHECK_MSG(st == PP_OK, "and it completes once they are free");
            }
            if (rank == 1) {
                fill_pattern(want, bytes, 16 * peer + 0);
                cudaMemcpy(got, recvb, bytes, cudaMemcpyDeviceToHost);
                CHECK_MSG(memcmp(want, got, bytes) == 0, "and its bytes arrived");
            }
            pthread_barrier_wait(&tr->bar);
        }
        CHECK_OK(pp_nccl_barrier(nc, 10, &e), &e);
    } else {
        /* a dead peer: rank 1 never sends. Rank 0's receive waits on the copy-engine stream; its
         * compute stream waits for it; pp_nccl_sync must give PP_ETIMEOUT within the deadline, and
         * the abort must open the wait so that every stream drains. */
        if (rank == 0) {
            pp_transfer x;
            void *hh = NULL;
            double t0 = now_s();
            pp_status st;
            memset(&x, 0, sizeof x);
            x.is_send = 0; x.peer = 1; x.buf = recvb; x.bytes = bytes;
            CHECK_OK(t.post(t.user, &x, 1, &hh, &e), &e);
            CHECK_OK(t.wait(t.user, hh, 2, &e), &e);
            st = pp_nccl_sync(nc, s, 2.0, &e);
            CHECK_MSG(st == PP_ETIMEOUT, e.message);
            CHECK_MSG(now_s() - t0 < 2.0 + 5.0, "the timeout came within the deadline");
            CHECK_MSG(stream_drains(s, 15), "copy engines: after the abort the compute stream drained");
            printf("  copy engines: a receive whose send never comes -> %s after %.2f s (deadline 2 s)\n",
                   pp_status_name(st), now_s() - t0);
        }
        pthread_barrier_wait(&tr->bar);
        if (rank == 1) pp_nccl_abort(nc, PP_EABORTED, "copy-engine test: the peer aborted");
    }
    cudaStreamSynchronize(s);
    pp_nccl_transport_free(&t);
    cudaFree(sendb); cudaFree(recvb);
    free(want); free(got);
    cudaStreamDestroy(s); cudaStreamDestroy(hog);
    pp_nccl_free(nc);
    return NULL;
}

/* One transfer from rank 0 to rank 1, the two posts in the order given (the first posts, both
 * meet at the barrier, the second posts); returns whether the bytes arrived. */
static int ce_one_transfer(gate_test *g, pp_transport *t, pp_nccl *nc, cudaStream_t s, unsigned char *buf, size_t bytes,
                           int receiver_first, int seed)
{
    int rank = g->rank, ok = 1;
    unsigned char *want = (unsigned char *)calloc(1, bytes ? bytes : 1), *got = (unsigned char *)calloc(1, bytes ? bytes : 1);
    pp_transfer x;
    void *hh = NULL;
    pp_error e;
    fill_pattern(want, bytes, seed);
    if (rank == 0) cudaMemcpyAsync(buf, want, bytes, cudaMemcpyHostToDevice, s);
    else cudaMemsetAsync(buf, 0, bytes, s);
    memset(&x, 0, sizeof x);
    x.is_send = rank == 0; x.peer = 1 - rank; x.buf = buf; x.bytes = bytes;
    if ((rank == 1) == receiver_first) CHECK_OK(t->post(t->user, &x, 1, &hh, &e), &e);
    pthread_barrier_wait(&g->tr->bar);
    if ((rank == 1) != receiver_first) CHECK_OK(t->post(t->user, &x, 1, &hh, &e), &e);
    CHECK_OK(t->wait(t->user, hh, 10, &e), &e);
    CHECK_OK(pp_nccl_sync(nc, s, 10, &e), &e);
    if (rank == 1) {
        cudaMemcpy(got, buf, bytes, cudaMemcpyDeviceToHost);
        ok = memcmp(want, got, bytes) == 0;
    }
    free(want); free(got);
    return ok;
}

/* Direct copies between two threads: the receiver first (pushed), the sender first (pulled), at
 * an offset inside an allocation; 600 transfers each way in random order, sizes and pauses;
 * more than PP__NCCL_CLAIMS (4096) transfers posted ahead of the peer. mode 4: a receive that
 * names other bytes than its send. */
static void *ce_direct_rank(void *argp)
{
    gate_test *g = (gate_test *)argp;
    two_ranks *tr = g->tr;
    int rank = g->rank, peer = 1 - rank, peers = -1, k;
    pp_nccl *nc = NULL;
    pp_transport t;
    pp_error e;
    cudaStream_t s;
    unsigned char *buf = NULL;
    long long how[3], before[3];
    const size_t big = 3u << 20;
    if (!(nc = two_rank_init(g))) return NULL;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    CHECK_OK(pp_nccl_transport(nc, s, &t, &e), &e);
    CHECK_OK(pp_nccl_transport_copy_engine(&t, 1 << 20, 4, &peers, &e), &e);
    CHECK(peers == 1);
    cudaMalloc((void **)&buf, 2 * big + 8192);
    if (g->mode == 4) {
        /* rank 0 sends 4096 bytes, rank 1 receives 8192: the second to post (rank 1) refuses,
         * naming both sizes, and aborts; rank 0's send never completes: PP_ETIMEOUT */
        pp_transfer x;
        void *hh = NULL;
        pp_status st;
        memset(&x, 0, sizeof x);
        x.is_send = rank == 0; x.peer = peer; x.buf = buf; x.bytes = rank == 0 ? 4096 : 8192;
        if (rank == 0) CHECK_OK(t.post(t.user, &x, 1, &hh, &e), &e);
        pthread_barrier_wait(&tr->bar);
        if (rank == 1) {
            CHECK_FAILS(t.post(t.user, &x, 1, &hh, &e), &e, PP_ETRANSPORT,
                        "transfer 0 from rank 0: 4096 bytes sent, 8192 bytes expected here (each receive must name its "
                        "send's size)");
            printf("  copy engines, sizes that differ: %s\n", e.message);
        } else {
            CHECK_OK(t.wait(t.user, hh, 2, &e), &e);
            st = pp_nccl_sync(nc, s, 2.0, &e);
            CHECK_MSG(st == PP_ETIMEOUT, e.message);
            CHECK_MSG(stream_drains(s, 15), "after the abort the compute stream drained");
        }
        pthread_barrier_wait(&tr->bar);   /* rank 1's failed post aborted its communicator */
        goto done;
    }
    CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, before, &e), &e);
    CHECK_MSG(ce_one_transfer(g, &t, nc, s, buf + 4096 + 256, big, 1, 11), "receiver first: 3 MiB pushed into the "
              "receive buffer, 4352 bytes into its allocation");
    CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, how, &e), &e);
    CHECK_MSG(how[0] == before[0] + 1 && how[1] == before[1] && how[2] == before[2], "counted as pushed, on both sides");
    CHECK_MSG(ce_one_transfer(g, &t, nc, s, buf + big, big, 0, 12), "sender first: 3 MiB pulled out of the send buffer");
    CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, before, &e), &e);
    CHECK_MSG(before[1] == how[1] + 1 && before[0] == how[0], "counted as pulled, on both sides");
    CHECK_MSG(ce_one_transfer(g, &t, nc, s, buf, 0, 1, 13), "an empty transfer, receiver first");
    CHECK_MSG(ce_one_transfer(g, &t, nc, s, buf, 0, 0, 14), "an empty transfer, sender first");
    {
        /* 600 groups, each a send and a receive of 1 .. 64 KiB (both ranks draw the same sizes),
         * posted with random pauses so that either side comes first, each waited for stream-wise
         * right away: both directions, pushes and pulls mixed in one run */
        enum { N = 600 };
        size_t *size = (size_t *)malloc(N * sizeof *size), total = 0, *off = (size_t *)malloc(N * sizeof *off);
        unsigned char *sendb = NULL, *recvb = NULL, *want, *got;
        unsigned seed = 99u + (unsigned)rank;
        int ok = 1;
        for (k = 0; k < N; k++) { size[k] = 1 + (size_t)((k * 2654435761u) % 65536u); off[k] = total; total += size[k]; }
        cudaMalloc((void **)&sendb, total);
        cudaMalloc((void **)&recvb, total);
        want = (unsigned char *)malloc(total);
        got = (unsigned char *)malloc(total);
        fill_pattern(want, total, 40 + rank);
        cudaMemcpy(sendb, want, total, cudaMemcpyHostToDevice);
        cudaMemset(recvb, 0, total);
        CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, before, &e), &e);
        pthread_barrier_wait(&tr->bar);
        for (k = 0; k < N; k++) {
            pp_transfer x[2];
            void *hh = NULL;
            memset(x, 0, sizeof x);
            x[0].is_send = 1; x[0].peer = peer; x[0].buf = sendb + off[k]; x[0].bytes = size[k];
            x[1].is_send = 0; x[1].peer = peer; x[1].buf = recvb + off[k]; x[1].bytes = size[k];
            if (rand_r(&seed) % 4 == 0) { struct timespec ts = { 0, (long)(rand_r(&seed) % 200) * 1000 }; nanosleep(&ts, NULL); }
            CHECK_OK(t.post(t.user, x, 2, &hh, &e), &e);
            CHECK_OK(t.wait(t.user, hh, 10, &e), &e);
        }
        CHECK_OK(pp_nccl_sync(nc, s, 20, &e), &e);
        fill_pattern(want, total, 40 + peer);
        cudaMemcpy(got, recvb, total, cudaMemcpyDeviceToHost);
        ok = memcmp(want, got, total) == 0;
        CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, how, &e), &e);
        CHECK_MSG(ok, "600 groups each way in random order, sizes and pauses: every byte arrived");
        CHECK_MSG(how[0] - before[0] + how[1] - before[1] == 2 * N && how[2] == before[2], "all pushed or pulled");
        printf("  copy engines, 600 groups in random order: rank %d pushed %lld, pulled %lld\n", rank, how[0] - before[0],
               how[1] - before[1]);
        cudaFree(sendb); cudaFree(recvb);
        free(want); free(got); free(size); free(off);
    }
    {
        /* rank 0 posts 4296 sends of 64 bytes at once while rank 1 sleeps 1 s before its first
         * receive: rank 0's 4097th post finds its own claim of transfer 0's place unseen and waits
         * for rank 1's posts (it returns only after rank 1 began); every transfer arrives. (The
         * first 4096 may wait too: a stream holds about a thousand queued operations.) */
        static volatile double rank1_began;
        enum { M = 4296 };
        unsigned char *dev = NULL, *want = (unsigned char *)malloc((size_t)M * 64), *got = (unsigned char *)malloc((size_t)M * 64);
        double t0;
        cudaMalloc((void **)&dev, (size_t)M * 64);
        fill_pattern(want, (size_t)M * 64, 77);
        if (rank == 0) cudaMemcpy(dev, want, (size_t)M * 64, cudaMemcpyHostToDevice);
        else cudaMemset(dev, 0, (size_t)M * 64);
        pthread_barrier_wait(&tr->bar);
        t0 = now_s();
        if (rank == 1) { struct timespec ts = { 1, 0 }; nanosleep(&ts, NULL); rank1_began = now_s(); }
        for (k = 0; k < M; k++) {
            pp_transfer x;
            void *hh = NULL;
            memset(&x, 0, sizeof x);
            x.is_send = rank == 0; x.peer = peer; x.buf = dev + (size_t)k * 64; x.bytes = 64;
            CHECK_OK(t.post(t.user, &x, 1, &hh, &e), &e);
            CHECK_OK(t.wait(t.user, hh, 10, &e), &e);
            if (rank == 0 && k == 4096)
                CHECK_MSG(rank1_began > t0 && now_s() >= rank1_began, "the 4097th post waits for the peer's posts");
        }
        CHECK_OK(pp_nccl_sync(nc, s, 20, &e), &e);
        if (rank == 1) {
            cudaMemcpy(got, dev, (size_t)M * 64, cudaMemcpyDeviceToHost);
            CHECK_MSG(memcmp(want, got, (size_t)M * 64) == 0, "4296 transfers, 200 past the claims' wrap: every byte arrived");
        }
        cudaFree(dev);
        free(want); free(got);
    }
done:
    cudaStreamSynchronize(s);
    pp_nccl_transport_free(&t);
    cudaFree(buf);
    cudaStreamDestroy(s);
    pp_nccl_free(nc);
    return NULL;
}

/* Without test_ce_threads, threads of one process stay on NCCL: no copy-engine peer, and a
 * transfer goes through NCCL as before. */
static void *ce_left_rank(void *argp)
{
    gate_test *g = (gate_test *)argp;
    int rank = g->rank, peers = -1;
    pp_nccl *nc = NULL;
    pp_transport t;
    pp_error e;
    cudaStream_t s;
    unsigned char *buf = NULL, host[16];
    void *hh = NULL;
    pp_transfer x;
    if (!(nc = two_rank_init(g))) return NULL;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    CHECK_OK(pp_nccl_transport(nc, s, &t, &e), &e);
    CHECK_OK(pp_nccl_transport_copy_engine(&t, 1 << 20, 4, &peers, &e), &e);
    CHECK_MSG(peers == 0, "threads of one process stay on NCCL without test_ce_threads");
    cudaMalloc((void **)&buf, 4096);
    cudaMemsetAsync(buf, rank == 0 ? 0x5a : 0, 4096, s);
    memset(&x, 0, sizeof x);
    x.is_send = rank == 0; x.peer = 1 - rank; x.buf = buf; x.bytes = 4096;
    CHECK_OK(t.post(t.user, &x, 1, &hh, &e), &e);
    CHECK_OK(t.wait(t.user, hh, 10, &e), &e);
    CHECK_OK(pp_nccl_sync(nc, s, 10, &e), &e);
    cudaMemcpy(host, buf + 4000, sizeof host, cudaMemcpyDeviceToHost);
    CHECK_MSG(host[0] == 0x5a && host[15] == 0x5a, "and its transfers go through NCCL");
    pp_nccl_transport_free(&t);
    cudaFree(buf);
    cudaStreamDestroy(s);
    pp_nccl_free(nc);
    return NULL;
}

/* --- the transport's group collectives, two ranks as two threads ---------------------------- */

enum { COLL_DATA, COLL_BARRIER_ALONE, COLL_ALL_REDUCE_ALONE, COLL_ABORTED, COLL_WITH_CE };

/* Values of every sign and of magnitudes 2^-12 .. 2^12, a different one per rank and element, so
 * that a sum that lost or doubled a term, or came from stale bytes, shows. */
__host__ __device__ static float coll_value(int rank, size_t i)
{
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(rank + 1) * 0x9e3779b9u;
    h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12;
    return (h & 0x80000000u ? -1.0f : 1.0f) * ldexpf(0.5f + (float)(h & 0xffffffu) / 16777216.0f, (int)((h >> 24) % 25) - 12);
}

__global__ void coll_fill(float *p, size_t n, int rank)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = coll_value(rank, i);
}

/* Keeps a stream busy for about ns nanoseconds: work that a collective issued after it must wait
 * for (a collective that ran early would read the buffer before coll_fill wrote it). */
__global__ void spin_ns(long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < ns);
}

static float *coll_result[2];           /* each rank's all-reduce result, for the bits compared */
static volatile double coll_called_at;  /* when rank 1 called the barrier */

/* One exchange of 1 MiB each way through the transport's post and wait (with the copy engines:
 * their path), checked: what the collectives must not disturb. */
static void coll_exchange(gate_test *g, pp_nccl *nc, pp_transport *t, cudaStream_t s, unsigned char *sendb,
                          unsigned char *recvb, int seed)
{
    unsigned char host[64];
    pp_transfer x[2];
    void *h = NULL;
    pp_error e;
    int i, ok = 1;
    cudaMemsetAsync(sendb, seed + 16 * g->rank, 1 << 20, s);
    cudaMemsetAsync(recvb, 0, 1 << 20, s);
    memset(x, 0, sizeof x);
    x[0].is_send = 1; x[0].peer = 1 - g->rank; x[0].buf = sendb; x[0].bytes = 1 << 20;
    x[1].is_send = 0; x[1].peer = 1 - g->rank; x[1].buf = recvb; x[1].bytes = 1 << 20;
    CHECK_OK(t->post(t->user, x, 2, &h, &e), &e);
    CHECK_OK(t->wait(t->user, h, 10, &e), &e);
    CHECK_OK(pp_nccl_sync(nc, s, 10, &e), &e);
    cudaMemcpy(host, recvb + 4000, sizeof host, cudaMemcpyDeviceToHost);
    for (i = 0; i < 64; i++) ok &= host[i] == (unsigned char)(seed + 16 * (1 - g->rank));
    CHECK_MSG(ok, "a transfer beside the collectives delivered its bytes");
}

/* all_reduce_buf and all_gather: right bytes, the same bits on both ranks, in the compute
 * stream's order; refusals that need no peer; barrier. */
static void coll_data(gate_test *g, pp_nccl *nc, pp_transport *t, cudaStream_t s)
{
    const size_t n = (4u << 20) + 3, gb = 1003;   /* 16 MiB of floats and a ragged tail; an odd byte count */
    int rank = g->rank, r, ok = 1;
    size_t i;
    float *d = NULL, *h = NULL, *other = NULL;
    unsigned char *gs = NULL, *gr = NULL, *hg = NULL, *sendb = NULL, *recvb = NULL;
    pp_error e;
    cudaMalloc((void **)&d, n * sizeof(float));
    cudaMallocHost((void **)&h, n * sizeof(float));
    cudaMalloc((void **)&gs, gb);
    cudaMalloc((void **)&gr, 2 * gb);
    hg = (unsigned char *)malloc(2 * gb);
    cudaMalloc((void **)&sendb, 1 << 20);
    cudaMalloc((void **)&recvb, 1 << 20);
    coll_exchange(g, nc, t, s, sendb, recvb, 1);

    /* all-reduce: the buffer is written behind 50 ms of other work on the compute stream and read
     * back right after the call, with no host wait between: the collective must come after the
     * one and before the other */
    spin_ns<<<1, 1, 0, s>>>(50000000);
    coll_fill<<<264, 256, 0, s>>>(d, n, rank);
    CHECK_OK(t->all_reduce_buf(t->user, d, n, 10, &e), &e);
    cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    CHECK_OK(pp_nccl_sync(nc, s, 20, &e), &e);
    for (i = 0; i < n; i++) ok &= h[i] == coll_value(0, i) + coll_value(1, i);
    CHECK_MSG(ok, "all_reduce_buf: every element is the sum of both ranks' values");
    coll_result[rank] = h;
    pthread_barrier_wait(&g->tr->bar);
    other = coll_result[1 - rank];
    CHECK_MSG(other && memcmp(h, other, n * sizeof(float)) == 0, "all_reduce_buf: both ranks got the same bits");
    pthread_barrier_wait(&g->tr->bar);   /* both compared before either frees */
    CHECK_OK(t->all_reduce_buf(t->user, d, 0, 10, &e), &e);   /* nothing to sum: no NCCL call on any rank */
    coll_exchange(g, nc, t, s, sendb, recvb, 2);

    /* all-gather: rank r's bytes at recv + r * bytes, written behind other work too; then in
     * place (send = recv + rank * bytes) */
    for (r = 0; r < 2; r++) {
        int in_place = r == 1;
        unsigned char *src = in_place ? gr + (size_t)rank * gb : gs;
        unsigned char want[1003];
        cudaMemsetAsync(gr, 0, 2 * gb, s);
        spin_ns<<<1, 1, 0, s>>>(20000000);
        cudaMemsetAsync(src, 0x30 + rank + 4 * r, gb, s);
        CHECK_OK(t->all_gather(t->user, src, gr, gb, 10, &e), &e);
        cudaMemcpyAsync(hg, gr, 2 * gb, cudaMemcpyDeviceToHost, s);
        CHECK_OK(pp_nccl_sync(nc, s, 20, &e), &e);
        memset(want, 0x30 + 4 * r, gb);
        ok = memcmp(hg, want, gb) == 0;
        memset(want, 0x31 + 4 * r, gb);
        ok &= memcmp(hg + gb, want, gb) == 0;
        CHECK_MSG(ok, in_place ? "all_gather in place: rank r's bytes at recv + r * bytes"
                               : "all_gather: rank r's bytes at recv + r * bytes, in rank order");
    }

    /* refusals that need no peer (no rank calls NCCL): the parameter and the rule */
    {
        float host_buf[4] = { 0 }, *on_peer = NULL;
        CHECK_FAILS(t->all_reduce_buf(t->user, host_buf, 4, 10, &e), &e, PP_EINVAL, "buf=");
        CHECK(strstr(e.message, "host memory") != NULL);
        CHECK_FAILS(t->all_reduce_buf(t->user, NULL, 4, 10, &e), &e, PP_EINVAL, "buf=NULL for 4 floats");
        CHECK_FAILS(t->all_gather(t->user, gr + 1, gr, gb, 10, &e), &e, PP_EINVAL, "overlaps recv=");
        CHECK_FAILS(t->all_gather(t->user, NULL, gr, gb, 10, &e), &e, PP_EINVAL, "send and recv must not be NULL");
        cudaSetDevice(1 - rank);
        cudaMalloc((void **)&on_peer, 4 * sizeof(float));
        cudaSetDevice(rank);
        CHECK_FAILS(t->all_reduce_buf(t->user, on_peer, 4, 10, &e), &e, PP_EINVAL, "this rank's device is");
        {   /* a transfer's buffer too, before any of its group starts */
            pp_transfer x[2];
            void *h = NULL;
            memset(x, 0, sizeof x);
            x[0].is_send = 1; x[0].peer = 1 - rank; x[0].buf = gr; x[0].bytes = 16;
            x[1] = x[0]; x[1].buf = host_buf; x[1].bytes = sizeof host_buf;
            CHECK_FAILS(t->post(t->user, x, 2, &h, &e), &e, PP_EINVAL, "post: transfer 1: buf=");
            CHECK(strstr(e.message, "host memory") != NULL && h == NULL);
            x[1].buf = on_peer;
            CHECK_FAILS(t->post(t->user, x, 2, &h, &e), &e, PP_EINVAL, "this rank's device is");
        }
        cudaFree(on_peer);
        cudaSetDevice(rank);
    }

    /* barrier: rank 1 comes 300 ms late; rank 0 must not return before it came */
    pthread_barrier_wait(&g->tr->bar);
    if (rank == 1) {
        struct timespec ts = { 0, 300000000 };
        nanosleep(&ts, NULL);
        coll_called_at = now_s();
        CHECK_OK(t->barrier(t->user, 10, &e), &e);
    } else {
        double t0 = now_s();
        CHECK_OK(t->barrier(t->user, 10, &e), &e);
        CHECK_MSG(coll_called_at > t0 && now_s() >= coll_called_at, "barrier: returns only once the late rank called it");
        printf("  barrier: rank 0 waited %.0f ms for rank 1\n", 1e3 * (now_s() - t0));
    }
    coll_exchange(g, nc, t, s, sendb, recvb, 3);
    cudaFree(d); cudaFreeHost(h); cudaFree(gs); cudaFree(gr); free(hg); cudaFree(sendb); cudaFree(recvb);
}

static void *coll_rank_main(void *argp)
{
    gate_test *g = (gate_test *)argp;
    int rank = g->rank;
    pp_nccl *nc = NULL;
    pp_transport t;
    pp_error e;
    cudaStream_t s;
    float *d = NULL;
    if (!(nc = two_rank_init(g))) return NULL;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    CHECK_OK(pp_nccl_transport(nc, s, &t, &e), &e);
    CHECK_MSG(t.all_reduce_buf && t.all_gather && t.barrier, "the NCCL transport has the group collectives");
    cudaMalloc((void **)&d, 1024 * sizeof(float));
    if (g->mode == COLL_WITH_CE) {
        int peers = -1;
        CHECK_OK(pp_nccl_transport_copy_engine(&t, 1 << 20, 4, &peers, &e), &e);
        CHECK_MSG(peers == 1, "collectives with copy engines: the peer's transfers go through the copy engines");
    }
    if (g->mode == COLL_DATA || g->mode == COLL_WITH_CE) {
        coll_data(g, nc, &t, s);
        if (g->mode == COLL_WITH_CE) {
            long long how[3] = { 0, 0, 0 };
            CHECK_OK(pp_nccl_transport_copy_engine_counts(&t, how, &e), &e);
            CHECK_MSG(how[0] + how[1] == 6 && how[2] == 0, "and the transfers beside them took the copy engines (3 groups of "
                      "a send and a receive)");
        }
        CHECK_OK(pp_nccl_barrier(nc, 10, &e), &e);
    } else if (g->mode == COLL_BARRIER_ALONE || g->mode == COLL_ALL_REDUCE_ALONE) {
        /* a peer that never comes: rank 0 gets PP_ETIMEOUT within its deadline (2 s), then
         * PP_EABORTED; its streams drain. Rank 1 aborts its side once rank 0 is done. */
        pthread_barrier_wait(&g->tr->bar);
        if (rank == 0) {
            double t0 = now_s();
            pp_status st;
            if (g->mode == COLL_BARRIER_ALONE) {
                st = t.barrier(t.user, 2.0, &e);
            } else {
                st = t.all_reduce_buf(t.user, d, 1024, 2.0, &e);   /* enqueued: the wait is the stream's */
                if (st == PP_OK) st = pp_nccl_sync(nc, s, 2.0, &e);
            }
            CHECK_MSG(st == PP_ETIMEOUT, e.message);
            CHECK_MSG(now_s() - t0 < 2.0 + 5.0, "the timeout came within the deadline");
            CHECK_MSG(stream_drains(s, 15), "after the abort the compute stream drained");
            CHECK_FAILS(t.all_gather(t.user, d, d, 16, 1, &e), &e, PP_EABORTED, "was aborted");
            printf("  %s without its peer -> %s after %.2f s (deadline 2 s)\n",
                   g->mode == COLL_BARRIER_ALONE ? "barrier" : "all_reduce_buf", pp_status_name(st), now_s() - t0);
        }
        pthread_barrier_wait(&g->tr->bar);
        if (rank == 1) pp_nccl_abort(nc, PP_EABORTED, "collective test: the peer aborted");
    } else {
        /* after an abort every collective says so, naming the reason, and returns at once */
        pp_nccl_abort(nc, PP_EABORTED, "collective test: aborted on purpose");
        CHECK_FAILS(t.all_reduce_buf(t.user, d, 1024, 1, &e), &e, PP_EABORTED, "aborted on purpose");
        CHECK_FAILS(t.all_gather(t.user, d, d + 512, 64, 1, &e), &e, PP_EABORTED, "aborted on purpose");
        CHECK_FAILS(t.barrier(t.user, 1, &e), &e, PP_EABORTED, "aborted on purpose");
    }
    cudaStreamSynchronize(s);
    pp_nccl_transport_free(&t);
    cudaFree(d);
    cudaStreamDestroy(s);
    pp_nccl_free(nc);
    return NULL;
}

/* pp_nccl_split_group on two ranks: the embedding group of a pp = 2 pipeline (its first and last
 * stage, ranks 0 and 1) summing a tied weight's gradient, the same group numbered the other way,
 * groups of one, a rank in no group, and lists that break a rule: every rank refuses alike, the
 * one at fault naming the member, and the parent still works afterwards. */
static void split_group_expect(gate_test *g, pp_nccl *nc, const int *members, int size, const char *needle)
{
    pp_nccl *grp = NULL;
    pp_error e;
    char what[PP_ERROR_MESSAGE_SIZE + 32];
    pp_status st = pp_nccl_split_group(nc, members, size, &grp, &e);
    snprintf(what, sizeof what, "rank %d: %s", g->rank, e.message);
    check_(st == PP_EINVAL && strstr(e.message, needle) != NULL, __FILE__, __LINE__, needle, what);
    CHECK(grp == NULL);
}

static void *split_group_rank(void *argp)
{
    gate_test *g = (gate_test *)argp;
    int rank = g->rank;
    pp_nccl *nc = NULL, *grp = NULL;
    pp_error e;
    if (!(nc = two_rank_init(g))) return NULL;
    {
        /* the tied embedding's gradient, summed over the group through a transport on it */
        const int emb[2] = { 0, 1 };
        cudaStream_t s;
        pp_transport t;
        float *d = NULL, h[256];
        int i, ok = 1;
        CHECK_OK(pp_nccl_split_group(nc, emb, 2, &grp, &e), &e);
        CHECK(grp && pp_nccl_world(grp) == 2 && pp_nccl_rank(grp) == rank && pp_nccl_device(grp) == rank);
        if (grp) {
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            cudaMalloc((void **)&d, sizeof h);
            for (i = 0; i < 256; i++) h[i] = (float)((rank + 1) * i);
            cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
            CHECK_OK(pp_nccl_transport(grp, s, &t, &e), &e);
            CHECK_OK(t.all_reduce_buf(t.user, d, 256, 10, &e), &e);
            CHECK_OK(pp_nccl_sync(grp, s, 10, &e), &e);
            cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
            for (i = 0; i < 256; i++) ok &= h[i] == (float)(3 * i);
            CHECK_MSG(ok, "embedding group: the tied weight's gradient summed over its first and last stage");
            pp_nccl_transport_free(&t);
            cudaFree(d);
            cudaStreamDestroy(s);
        }
        free_and_meet(&g->tr->bar, grp);   /* before the parent's next all-reduce */
        grp = NULL;
    }
    {
        const int rev[2] = { 1, 0 };
        CHECK_OK(pp_nccl_split_group(nc, rev, 2, &grp, &e), &e);
        CHECK_MSG(grp && pp_nccl_rank(grp) == 1 - rank, "the list numbers the new communicator");
        free_and_meet(&g->tr->bar, grp);   /* before the parent's next all-reduce */
        grp = NULL;
    }
    {
        const int me[1] = { rank };
        CHECK_OK(pp_nccl_split_group(nc, me, 1, &grp, &e), &e);
        CHECK_MSG(grp && pp_nccl_world(grp) == 1 && pp_nccl_rank(grp) == 0, "groups of one: a communicator each");
        free_and_meet(&g->tr->bar, grp);   /* before the parent's next all-reduce */
        grp = NULL;
    }
    {
        const int zero[1] = { 0 };
        CHECK_OK(pp_nccl_split_group(nc, zero, rank == 0 ? 1 : 0, &grp, &e), &e);
        CHECK_MSG(rank == 0 ? grp && pp_nccl_world(grp) == 1 : grp == NULL, "a rank in no group gets no communicator");
        free_and_meet(&g->tr->bar, grp);   /* before the parent's next all-reduce */
        grp = NULL;
    }
    {
        const int both[2] = { 0, 1 }, rev[2] = { 1, 0 }, dup[2] = { 0, 0 }, far[2] = { 0, 2 }, one[1] = { 1 };
        const char *others = "1 other rank(s) passed members that are not a group";
        const char *disagree = "1 rank(s) found that the ranks' members do not agree";
        split_group_expect(g, nc, rank == 0 ? dup : both, 2, rank == 0 ? "members[1]=0: appears twice (also members[0])" : others);
        split_group_expect(g, nc, rank == 0 ? far : both, 2, rank == 0 ? "members[1]=2: must be a rank of the parent, 0..1" : others);
        split_group_expect(g, nc, one, 1, rank == 0 ? "this rank (0) is not among its 1 members" : others);
        split_group_expect(g, nc, both, rank == 1 ? 3 : 2, rank == 1 ? "size=3: must be between 0" : others);
        split_group_expect(g, nc, rank == 0 ? both : one, rank == 0 ? 2 : 1,
                           rank == 0 ? "members[1]=1: rank 1 gave another group (its smallest member is 1, this one's 0)"
                                     : disagree);
        split_group_expect(g, nc, rank == 0 ? both : rev, 2,
                           rank == 0 ? "members[1]=1: rank 1 puts itself at members[0]" : "members[1]=0: rank 0 puts itself at members[0]");
        split_group_expect(g, nc, both, rank == 0 ? 0 : 2, rank == 1 ? "members[0]=0: rank 0 passed size 0 (in no group)" : disagree);
        CHECK_FAILS(pp_nccl_split_group(nc, both, 2, NULL, &e), &e, PP_EINVAL, "parent and out must not be NULL");
        /* the parent was not aborted by any of it */
        CHECK_OK(pp_nccl_split_group(nc, both, 2, &grp, &e), &e);
        CHECK_MSG(grp && pp_nccl_world(grp) == 2, "after the refusals a good split goes through");
        pp_nccl_free(grp);
    }
    pp_nccl_free(nc);
    return NULL;
}

int main(void)
{
    int devices = 0;
    char path[128];
    double t0 = now_s();
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
        printf("no CUDA device\n0 passed, 1 failed\n");
        return 1;
    }
    setup_errors_name_the_parameter();
    one_rank_transport_all_reduce_and_grad_norm();
    if (devices >= 2) {
        snprintf(path, sizeof path, "/tmp/pipepar_test_nccl_%ld.id", (long)getpid());
        two_ranks_run(path);   /* file bootstrap */
        two_ranks_run(NULL);   /* in-memory id */
        g_count_base = 4294967290ull;   /* 2^32 - 6 */
        two_rank_threads(gate_rank_main, 0);
        g_count_base = 0;
        two_rank_threads(reorder_rank, 0);
        two_rank_threads(gate_rank_main, 1);
        /* the group collectives and pp_nccl_split_group (through NCCL) */
        two_rank_threads(coll_rank_main, COLL_DATA);
        two_rank_threads(coll_rank_main, COLL_BARRIER_ALONE);
        two_rank_threads(coll_rank_main, COLL_ALL_REDUCE_ALONE);
        two_rank_threads(coll_rank_main, COLL_ABORTED);
        two_rank_threads(split_group_rank, 0);
        /* threads of one process: the copy engines only with test_ce_threads */
        two_rank_threads(ce_left_rank, 0);
        g_ce_threads = 1;
        g_count_base = 4294967290ull;
        two_rank_threads(ce_rank_main, 0);
        /* counts from 2^32 - 4: the fourth transfer (a pull) is the one whose count wraps, so the
         * posted counts of the pushes after it must carry the high word themselves */
        g_count_base = 4294967292ull;
        two_rank_threads(ce_direct_rank, 0);
        g_count_base = 0;
        two_rank_threads(ce_direct_rank, 4);
        two_rank_threads(ce_rank_main, 2);
        two_rank_threads(ce_rank_main, 1);
        /* the group collectives beside copy-engine transfers on the same transport */
        two_rank_threads(coll_rank_main, COLL_WITH_CE);
        g_ce_threads = 0;
    } else {
        printf("  one GPU: the two-rank tests need two\n");
    }
    printf("(%.1f s)\n%d passed, %d failed\n", now_s() - t0, passed, failed);
    return failed != 0;
}
