/* tests/gpu/test_ce_procs.cu — copy-engine transfers between two processes, as pipeline ranks
 * launched one per GPU run them: buffers shared by CUDA IPC (pushed into a receive buffer at an
 * offset in its allocation, pulled out of a send buffer), memory CUDA IPC cannot share (from
 * cudaMallocAsync) through the ring in slot-sized pieces, more allocations than the mapping cache
 * holds, a random mix, and a receive that names other bytes than its send. Every count starts 6
 * below 2^32 (test_count_base), so the first ring transfers carry it across the 32-bit wrap.
 * The parent forks the two ranks before any CUDA call, each takes GPU `rank` and the file
 * bootstrap; each reports its counts through a pipe. Last, the same through pinned host memory
 * (pp_nccl_transport_copy_engine_via_host). Both ways, streamed sends (pp_transport.output_ready):
 * a buffer written in parts after pauses, each part said written, carries every part as written,
 * and its receiver waits less after the compute than for the same send unstreamed. Needs two
 * GPUs; ends with
 * "N passed, N failed". (C code; a .cu so that nvcc links it with the C++ runtime.)          */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <cuda_runtime.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include "../../pipepar.h"

static int passed, failed, my_rank;

#define CHECK_MSG(cond, msg) check_((cond) != 0, __LINE__, #cond, (msg))
#define CHECK_OK(call, e) do { pp_status s_ = (call); check_(s_ == PP_OK, __LINE__, #call, (e)->message); } while (0)
#define CHECK_FAILS(call, e, status, needle) do { pp_status s_ = (call); \
    check_(s_ == (status) && strstr((e)->message, (needle)) != NULL, __LINE__, #call, (e)->message); } while (0)

static void check_(int ok, int line, const char *what, const char *msg)
{
    if (ok) { passed++; return; }
    failed++;
    printf("FAIL rank %d: test_ce_procs.cu:%d: %s %s\n", my_rank, line, what, msg ? msg : "");
    fflush(stdout);
}

static void fill(unsigned char *p, size_t n, int seed)
{
    size_t i;
    for (i = 0; i < n; i++) p[i] = (unsigned char)(seed * 151 + i * 13 + (i >> 11));
}

typedef struct rank_ctx {
    int rank, peer;
    pp_nccl *nc;
    pp_transport t;
    cudaStream_t s;
} rank_ctx;

/* One transfer from rank 0 to rank 1; `first` names the rank that posts first (a barrier between
 * the two posts). Returns whether the bytes arrived (rank 1) or 1 (rank 0). */
static int one(rank_ctx *r, unsigned char *buf, size_t bytes, int first, int seed)
{
    unsigned char *want = (unsigned char *)calloc(1, bytes), *got = (unsigned char *)calloc(1, bytes);
    pp_transfer x;
    void *h = NULL;
    pp_error e;
    int ok = 1;
    fill(want, bytes, seed);
    if (r->rank == 0) cudaMemcpy(buf, want, bytes, cudaMemcpyHostToDevice);
    else cudaMemset(buf, 0, bytes);
    memset(&x, 0, sizeof x);
    x.is_send = r->rank == 0; x.peer = r->peer; x.buf = buf; x.bytes = bytes;
    if (r->rank == first) CHECK_OK(r->t.post(r->t.user, &x, 1, &h, &e), &e);
    CHECK_OK(pp_nccl_barrier(r->nc, 10, &e), &e);
    if (r->rank != first) CHECK_OK(r->t.post(r->t.user, &x, 1, &h, &e), &e);
    CHECK_OK(r->t.wait(r->t.user, h, 10, &e), &e);
    CHECK_OK(pp_nccl_sync(r->nc, r->s, 10, &e), &e);
    if (r->rank == 1) {
        cudaMemcpy(got, buf, bytes, cudaMemcpyDeviceToHost);
        ok = memcmp(want, got, bytes) == 0;
    }
    free(want); free(got);
    return ok;
}

__global__ void spin_kernel(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

/* A streamed send from rank 0 to rank 1: rank 0 writes buf in `parts` parts on the compute
 * stream, each after a pause (a kernel that spins); mark 1 says each one written (output_ready)
 * and posts the send with parts, mark 2 posts it with parts but says nothing (the marks of an
 * earlier send of buf must not count), mark 0 posts it plain. The buffer held other bytes before,
 * so a part sent before it is written arrives wrong. recv_first: the receiver posts first (a push,
 * or the ring), else the sender (a pull, or the ring). Returns whether every byte arrived (rank
 * 1; 1 on rank 0); *exposed gets, on rank 0, the group's time: from where the data was whole. */
static int streamed(rank_ctx *r, unsigned char *buf, size_t bytes, int parts, int mark, int recv_first, int seed,
                    double *exposed)
{
    unsigned char *want = NULL, *got = (unsigned char *)calloc(1, bytes);
    pp_transfer x;
    void *h = NULL;
    pp_error e;
    cudaEvent_t base;
    int ok = 1, k, n = 0;
    cudaMallocHost((void **)&want, bytes);   /* pinned: the writes queue behind the pauses, the host runs on */
    fill(want, bytes, seed);
    cudaMemset(buf, r->rank == 0 ? 0xAB : 0, bytes);
    cudaDeviceSynchronize();
    cudaEventCreate(&base);
    CHECK_OK(pp_nccl_transport_record(&r->t, 1, &e), &e);
    cudaEventRecord(base, r->s);
    memset(&x, 0, sizeof x);
    x.is_send = r->rank == 0; x.peer = r->peer; x.buf = buf; x.bytes = bytes; x.parts = r->rank == 0 && mark;
    if (r->rank == 1 && recv_first) CHECK_OK(r->t.post(r->t.user, &x, 1, &h, &e), &e);
    if (recv_first) CHECK_OK(pp_nccl_barrier(r->nc, 10, &e), &e);
    if (r->rank == 0) {
        for (k = 0; k < parts; k++) {
            size_t from = bytes * (size_t)k / (size_t)parts, to = bytes * (size_t)(k + 1) / (size_t)parts;
            spin_kernel<<<1, 1, 0, r->s>>>(4000000);
            cudaMemcpyAsync(buf + from, want + from, to - from, cudaMemcpyHostToDevice, r->s);
            if (mark == 1) CHECK_OK(r->t.output_ready(r->t.user, buf, to, k == 0, &e), &e);
        }
        CHECK_OK(r->t.post(r->t.user, &x, 1, &h, &e), &e);
    }
    if (!recv_first) CHECK_OK(pp_nccl_barrier(r->nc, 10, &e), &e);
    if (r->rank == 1 && !recv_first) CHECK_OK(r->t.post(r->t.user, &x, 1, &h, &e), &e);
    CHECK_OK(r->t.wait(r->t.user, h, 10, &e), &e);
    CHECK_OK(pp_nccl_sync(r->nc, r->s, 10, &e), &e);
    if (r->rank == 0) {
        pp_nccl_group_time times[4];
        CHECK_OK(pp_nccl_transport_times(&r->t, base, times, 4, &n, &e), &e);
        CHECK_MSG(n == 1, "one group timed");
        *exposed = n == 1 ? times[0].end - times[0].begin : 0;
    } else {
        cudaMemcpy(got, buf, bytes, cudaMemcpyDeviceToHost);
        ok = memcmp(want, got, bytes) == 0;
    }
    CHECK_OK(pp_nccl_transport_record(&r->t, 0, &e), &e);
    cudaEventDestroy(base);
    cudaFreeHost(want);
    free(got);
    return ok;
}

static long long streamed_count(rank_ctx *r)
{
    long long n = -1;
    pp_error e;
    CHECK_OK(pp_nccl_transport_streamed_sends(&r->t, &n, &e), &e);
    return n;
}

/* Streamed sends both ways of the transport in use: 24 MiB in 4 parts and in 3 uneven ones
 * arrive whole, the receiver posting first; unstreamed, the same; the receiver's wait after the
 * data is written (rank 0's group time) streamed under 60% of unstreamed: the last part alone
 * against the whole (the receiver posts first, so the bytes are pushed or ringed as written).
 * Then the sender first (a pull between processes that share memory, else the ring), and a send
 * posted with parts right after a streamed one of the same buffer but with no marks of its own:
 * both arrive whole; the transport counts the streamed sends and not the others. */
static void streamed_sends(rank_ctx *r, const char *how)
{
    const size_t bytes = 24u << 20;
    unsigned char *buf = NULL;
    double plain = 0, parted = 0, other = 0;
    char msg[200];
    long long n0, n1;
    int ok;
    cudaMalloc((void **)&buf, bytes + 4096);
    n0 = streamed_count(r);
    ok = streamed(r, buf, bytes, 4, 0, 1, 700, &plain);
    snprintf(msg, sizeof msg, "%s: 24 MiB written in 4 parts, sent after the whole compute: every byte arrived", how);
    CHECK_MSG(ok, msg);
    n1 = streamed_count(r);
    CHECK_MSG(n1 == n0, "a plain send is not counted as streamed");
    ok = streamed(r, buf, bytes, 4, 1, 1, 701, &parted);
    snprintf(msg, sizeof msg, "%s: 24 MiB written in 4 parts, each sent once said written: every byte arrived", how);
    CHECK_MSG(ok, msg);
    if (r->rank == 0) CHECK_MSG(streamed_count(r) == n1 + 1, "the streamed send counted");
    ok = streamed(r, buf, bytes, 4, 2, 1, 702, &other);
    snprintf(msg, sizeof msg, "%s: parts but no marks after a streamed send of the same buffer: every byte arrived "
             "(the old marks were used up)", how);
    CHECK_MSG(ok, msg);
    ok = streamed(r, buf + 4096 - 17, bytes - 4096, 3, 1, 1, 703, &other);
    snprintf(msg, sizeof msg, "%s: 3 parts of an odd size at an odd offset, streamed: every byte arrived", how);
    CHECK_MSG(ok, msg);
    n1 = streamed_count(r);
    ok = streamed(r, buf, bytes, 4, 1, 0, 704, &other);
    snprintf(msg, sizeof msg, "%s: the sender first, streamed: every byte arrived", how);
    CHECK_MSG(ok, msg);
    if (r->rank == 0) CHECK_MSG(streamed_count(r) == n1 + 1, "the sender-first streamed send counted");
    if (r->rank == 0) {
        snprintf(msg, sizeof msg, "%s: the receiver waits %.1f us after the compute streamed, %.1f us unstreamed", how,
                 parted * 1e6, plain * 1e6);
        printf("  rank 0: %s\n", msg);
        CHECK_MSG(parted > 0 && plain > 0 && parted < 0.6 * plain, msg);
    }
    CHECK_MSG(one(r, buf, 4096, 1, 703), "after the streamed sends, a plain transfer of the same buffer arrives");
    cudaFree(buf);
}

static void counts(rank_ctx *r, long long c[3])
{
    pp_error e;
    CHECK_OK(pp_nccl_transport_copy_engine_counts(&r->t, c, &e), &e);
}

/* n groups, a send and a receive each way, random sizes (up to 200000 bytes) and pauses; whether
 * every byte arrived */
static int random_groups(rank_ctx *r, int n)
{
    size_t *off = (size_t *)calloc((size_t)n, sizeof *off), *size = (size_t *)calloc((size_t)n, sizeof *size), total = 0;
    unsigned char *sendb = NULL, *recvb = NULL, *want, *got;
    unsigned seed = 5u + (unsigned)r->rank;
    pp_error e;
    int k, ok;
    for (k = 0; k < n; k++) { size[k] = 1 + (size_t)((k * 2246822519u) % 200000u); off[k] = total; total += size[k]; }
    cudaMalloc((void **)&sendb, total);
    cudaMalloc((void **)&recvb, total);
    want = (unsigned char *)malloc(total);
    got = (unsigned char *)malloc(total);
    fill(want, total, 60 + r->rank);
    cudaMemcpy(sendb, want, total, cudaMemcpyHostToDevice);
    cudaMemset(recvb, 0, total);
    CHECK_OK(pp_nccl_barrier(r->nc, 10, &e), &e);
    for (k = 0; k < n; k++) {
        pp_transfer x[2];
        void *h = NULL;
        memset(x, 0, sizeof x);
        x[0].is_send = 1; x[0].peer = r->peer; x[0].buf = sendb + off[k]; x[0].bytes = size[k];
        x[1].is_send = 0; x[1].peer = r->peer; x[1].buf = recvb + off[k]; x[1].bytes = size[k];
        if (rand_r(&seed) % 3 == 0) { struct timespec ts = { 0, (long)(rand_r(&seed) % 300) * 1000 }; nanosleep(&ts, NULL); }
        CHECK_OK(r->t.post(r->t.user, x, 2, &h, &e), &e);
        CHECK_OK(r->t.wait(r->t.user, h, 10, &e), &e);
    }
    CHECK_OK(pp_nccl_sync(r->nc, r->s, 30, &e), &e);
    fill(want, total, 60 + r->peer);
    cudaMemcpy(got, recvb, total, cudaMemcpyDeviceToHost);
    ok = memcmp(want, got, total) == 0;
    cudaFree(sendb); cudaFree(recvb);
    free(want); free(got); free(off); free(size);
    return ok;
}

static void run_rank(int rank, const char *id_file)
{
    rank_ctx r;
    pp_nccl_config c;
    pp_error e;
    long long a[3], b[3];
    int peers = -1, k;
    unsigned char *big = NULL, *pool_buf = NULL;
    const size_t mib3 = 3u << 20;
    memset(&r, 0, sizeof r);
    r.rank = rank; r.peer = 1 - rank;
    memset(&c, 0, sizeof c);
    c.world = 2; c.rank = rank; c.device = rank; c.timeout_s = 30;
    c.bootstrap = PP_NCCL_BOOTSTRAP_FILE; c.id_file = id_file;
    c.test_count_base = 4294967290ull;   /* 2^32 - 6 */
    cudaSetDevice(rank);
    CHECK_OK(pp_nccl_init(&c, &r.nc, &e), &e);
    if (!r.nc) return;
    cudaStreamCreateWithFlags(&r.s, cudaStreamNonBlocking);
    CHECK_OK(pp_nccl_transport(r.nc, r.s, &r.t, &e), &e);
    CHECK_OK(pp_nccl_transport_copy_engine(&r.t, 1 << 20, 4, &peers, &e), &e);
    CHECK_MSG(peers == 1, "two processes of one host: the peer goes through the copy engines");
    cudaMalloc((void **)&big, 2 * mib3 + 8192);

    /* CUDA IPC: pushed into a receive buffer 4352 bytes into its allocation; pulled */
    counts(&r, a);
    CHECK_MSG(one(&r, big + 4096 + 256, mib3, 1, 1), "receiver first: 3 MiB pushed into a buffer 4352 bytes into its "
              "allocation (CUDA IPC)");
    counts(&r, b);
    CHECK_MSG(b[0] == a[0] + 1 && b[1] == a[1] && b[2] == a[2], "counted as pushed");
    CHECK_MSG(one(&r, big + mib3, mib3, 0, 2), "sender first: 3 MiB pulled out of the send buffer (CUDA IPC)");
    counts(&r, a);
    CHECK_MSG(a[1] == b[1] + 1 && a[0] == b[0] && a[2] == b[2], "counted as pulled");
    CHECK_MSG(one(&r, big + 17, 1000, 1, 3), "receiver first again, same allocation (its mapping reused), odd offset");

    /* memory from a stream-ordered pool: CUDA IPC cannot share it, the ring carries it, 3 MiB in
     * three pieces of the 4 slots of 1 MiB; the counts (3 messages so far) pass 2^32 in the
     * first two transfers, and every slot is reused */
    if (cudaMallocAsync((void **)&pool_buf, mib3, r.s) == cudaSuccess && cudaStreamSynchronize(r.s) == cudaSuccess) {
        int ok = 1;
        counts(&r, a);
        CHECK_MSG(one(&r, pool_buf, mib3, 1, 4), "receiver first with a cudaMallocAsync buffer: 3 MiB through the ring");
        counts(&r, b);
        if (rank == 1) CHECK_MSG(b[2] == a[2] + 1, "the receiver could not publish it: counted as ring");
        CHECK_MSG(one(&r, pool_buf, mib3, 0, 5), "sender first with a cudaMallocAsync buffer: through the ring");
        counts(&r, a);
        if (rank == 0) CHECK_MSG(a[2] == b[2] + 1, "the sender could not publish it: counted as ring");
        for (k = 0; k < 6; k++) ok &= one(&r, pool_buf, mib3, k % 2, 300 + k);
        CHECK_MSG(ok, "six more through the ring, either side first, counts past 2^32: every byte arrived");
        cudaFreeAsync(pool_buf, r.s);
        cudaStreamSynchronize(r.s);
    } else {
        CHECK_MSG(0, "cudaMallocAsync");
    }

    /* 80 allocations, receiver first for each: rank 0 maps 80 of rank 1's allocations, more than
     * its cache of 64 holds (the least recently used close once the streams drained) */
    {
        unsigned char *bufs[80];
        int ok = 1;
        for (k = 0; k < 80; k++) cudaMalloc((void **)&bufs[k], 65536);
        for (k = 0; k < 80; k++) ok &= one(&r, bufs[k], 65536, 1, 100 + k);
        CHECK_MSG(ok, "80 receive buffers of their own allocations, pushed into: every byte arrived");
        for (k = 0; k < 80; k++) ok &= one(&r, bufs[k], 4096, 1, 200 + k);
        CHECK_MSG(ok, "and again, after the cache turned over");
        CHECK_OK(pp_nccl_barrier(r.nc, 10, &e), &e);
        for (k = 0; k < 80; k++) cudaFree(bufs[k]);
    }

    /* 400 groups, a send and a receive each way, random sizes and pauses: pushes and pulls mixed */
    counts(&r, a);
    CHECK_MSG(random_groups(&r, 400), "400 groups each way in random order, sizes and pauses: every byte arrived");
    counts(&r, b);
    CHECK_MSG(b[0] - a[0] + b[1] - a[1] == 2 * 400, "all pushed or pulled");
    printf("  rank %d: 400 random groups: pushed %lld, pulled %lld\n", rank, b[0] - a[0], b[1] - a[1]);
    streamed_sends(&r, "pushed (CUDA IPC)");

    cudaStreamSynchronize(r.s);
    pp_nccl_transport_free(&r.t);

    /* staged through pinned host memory (pp_nccl_transport_copy_engine_via_host): asked for by
     * one rank only, refused on both; then every transfer through the rings in host memory,
     * either side first, over several slots and sizes, and in random groups */
    CHECK_OK(pp_nccl_transport(r.nc, r.s, &r.t, &e), &e);
    CHECK_OK(pp_nccl_transport_copy_engine_via_host(&r.t, rank == 0, &e), &e);
    CHECK_FAILS(pp_nccl_transport_copy_engine(&r.t, 1 << 20, 4, &peers, &e), &e, PP_EINVAL,
                "pp_nccl_transport_copy_engine_via_host, rank 1 did not: every rank must set the same");
    pp_nccl_transport_free(&r.t);
    CHECK_OK(pp_nccl_transport(r.nc, r.s, &r.t, &e), &e);
    CHECK_OK(pp_nccl_transport_copy_engine_via_host(&r.t, 1, &e), &e);
    peers = -1;
    CHECK_OK(pp_nccl_transport_copy_engine(&r.t, 1 << 20, 4, &peers, &e), &e);
    CHECK_MSG(peers == 1, "via host: the peer goes through the copy engines");
    CHECK_FAILS(pp_nccl_transport_copy_engine_via_host(&r.t, 0, &e), &e, PP_EINVAL,
                "must come before pp_nccl_transport_copy_engine");
    {
        int ok = 1;
        counts(&r, a);
        for (k = 0; k < 8; k++) ok &= one(&r, big + 256 * k, mib3 + 1000 * (size_t)k, k % 2, 500 + k);
        CHECK_MSG(ok, "via host: 8 transfers of 3 MiB and more (4 slots of 1 MiB), either side first: every byte arrived");
        CHECK_MSG(random_groups(&r, 200), "via host: 200 random groups each way: every byte arrived");
        counts(&r, b);
        CHECK_MSG(b[2] - a[2] == 8 + 2 * 200 && b[0] == a[0] && b[1] == a[1], "via host: every transfer through the ring");
    }
    streamed_sends(&r, "via host (the ring)");
    {   /* a buffer in host memory is refused, pinned or not, though the rings could copy it: the
         * group starts nothing, and the next transfer goes through */
        unsigned char host_buf[64];
        void *pinned = NULL, *h = NULL;
        pp_transfer x[2];
        CHECK_MSG(cudaMallocHost(&pinned, 4096) == cudaSuccess, "cudaMallocHost of 4 KiB");
        memset(x, 0, sizeof x);
        x[0].is_send = rank == 0; x[0].peer = r.peer; x[0].buf = big; x[0].bytes = 4096;
        x[1] = x[0]; x[1].buf = host_buf; x[1].bytes = sizeof host_buf;
        CHECK_FAILS(r.t.post(r.t.user, x, 2, &h, &e), &e, PP_EINVAL, "post: transfer 1: buf=");
        CHECK_MSG(strstr(e.message, "host memory") != NULL && h == NULL, e.message);
        x[1].buf = pinned;
        CHECK_FAILS(r.t.post(r.t.user, x, 2, &h, &e), &e, PP_EINVAL, "host memory");
        cudaFreeHost(pinned);
        CHECK_MSG(one(&r, big, 4096, 1, 900), "via host: after a refused group the next transfer arrives");
    }
    cudaStreamSynchronize(r.s);
    pp_nccl_transport_free(&r.t);

    /* (the transfers below abort the communicator: last) */
    CHECK_OK(pp_nccl_transport(r.nc, r.s, &r.t, &e), &e);
    CHECK_OK(pp_nccl_transport_copy_engine(&r.t, 1 << 20, 4, &peers, &e), &e);

    /* a receive that names other bytes than its send: the second to post refuses, naming both */
    {
        pp_transfer x;
        void *h = NULL;
        memset(&x, 0, sizeof x);
        x.is_send = rank == 0; x.peer = r.peer; x.buf = big; x.bytes = rank == 0 ? 8192 : 4096;
        if (rank == 1) CHECK_OK(r.t.post(r.t.user, &x, 1, &h, &e), &e);
        CHECK_OK(pp_nccl_barrier(r.nc, 10, &e), &e);
        if (rank == 0) {
            CHECK_FAILS(r.t.post(r.t.user, &x, 1, &h, &e), &e, PP_ETRANSPORT,
                        "to rank 1: 4096 bytes expected by the receive, 8192 bytes sent here");
            printf("  rank 0: sizes that differ: %s\n", e.message);
        } else {
            pp_status st;
            CHECK_OK(r.t.wait(r.t.user, h, 2, &e), &e);
            st = pp_nccl_sync(r.nc, r.s, 2.0, &e);
            CHECK_MSG(st == PP_ETIMEOUT, e.message);
        }
    }
    cudaStreamSynchronize(r.s);
    pp_nccl_transport_free(&r.t);
    cudaFree(big);
    cudaStreamDestroy(r.s);
    pp_nccl_free(r.nc);
}

int main(void)
{
    char id_file[128];
    int pipes[2][2], r, total_pass = 0, total_fail = 0;
    pid_t pid[2];
    snprintf(id_file, sizeof id_file, "/tmp/pipepar_test_ce_procs_%ld.id", (long)getpid());
    unlink(id_file);
    for (r = 0; r < 2; r++) {
        if (pipe(pipes[r]) != 0) { printf("pipe failed\n0 passed, 1 failed\n"); return 1; }
        fflush(stdout);
        pid[r] = fork();
        if (pid[r] == 0) {   /* a rank: CUDA starts here, after the fork */
            int devices = 0;
            char line[64];
            close(pipes[r][0]);
            my_rank = r;
            if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
                if (r == 0) printf("  one GPU: the two-process tests need two\n");
            } else {
                run_rank(r, id_file);
            }
            fflush(stdout);
            snprintf(line, sizeof line, "%d %d\n", passed, failed);
            if (write(pipes[r][1], line, strlen(line)) < 0) _exit(3);
            _exit(0);
        }
        close(pipes[r][1]);
    }
    for (r = 0; r < 2; r++) {
        char line[64];
        ssize_t n;
        int status = 0, p = 0, f = 1;
        n = read(pipes[r][0], line, sizeof line - 1);
        if (n > 0) { line[n] = 0; if (sscanf(line, "%d %d", &p, &f) != 2) f = 1; }
        waitpid(pid[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("FAIL rank %d: exit status %d\n", r, status);
            f++;
        }
        total_pass += p;
        total_fail += f;
    }
    unlink(id_file);
    printf("%d passed, %d failed\n", total_pass, total_fail);
    return total_fail != 0;
}
