/* tests/gpu/host_ce_claims.c — the copy engines' claim protocol (pipepar_nccl.c), on the host
 * alone: no GPU is touched, so `make test` runs it wherever the CUDA and NCCL headers and
 * libraries are (CI too).
 *
 * Two threads play the two ranks of a pair as two processes would: each publishes its buffers
 * as allocations (a stand-in for the driver's pointer attributes says which allocation a buffer
 * is in, and that about one buffer in five cannot be shared by CUDA IPC, as memory from
 * cudaMallocAsync cannot), and each finds the other's allocation already mapped. Each claims
 * 20,000 sends to the other and 20,000 receives from it, interleaved at random, with random
 * pauses, bursts that run up to 2,000 transfers ahead of the peer (every claim table entry is
 * reused about five times) and random sizes (a transfer through the ring takes one message per
 * 4 KiB slot, a direct one exactly one); a transfer whose first side cannot share its buffer
 * goes through the ring. Afterwards both sides must have taken every transfer the same way, at
 * the same first message, with the other side's buffer where they copy; then a receive that
 * names other bytes than its send is refused by the side that comes second, naming both sizes.
 * Then the same pair via host (pp_nccl_transport_copy_engine_via_host), fewer transfers: every one
 * goes through the ring, on both sides alike, and sizes that differ are still refused.
 * Ends with "N passed, N failed". */
#include "../../pipepar_nccl.c"

#define N_XFERS 20000
#define LEAD 2000

static int passed, failed;

static void check(int ok, const char *what)
{
    if (ok) { passed++; return; }
    failed++;
    printf("FAIL %s\n", what);
}

typedef struct side {
    pp_nccl nc;
    pp__nccl_transport t;
    pp_transfer xf;
    int rank;
    unsigned seed;
    /* per direction (0: this side sends, 1: this side receives) and transfer */
    int how[2][N_XFERS];
    uint64_t k[2][N_XFERS];
    CUdeviceptr remote[2][N_XFERS];
    int ring_first[2];
    pp_status status;
    char message[PP_ERROR_MESSAGE_SIZE];
    volatile long progress;         /* transfers claimed, both directions */
    volatile int finished;          /* the thread has returned (done or failed) */
} side;

static side sides[2];
static int n_xfers = N_XFERS;   /* each way, this round */

static size_t bytes_of(int from, int j) { return (size_t)((j * 2654435761u + (unsigned)from * 97u) % 20000u); }
/* Rank r's buffers lie in one allocation at base_of(r), its id r + 1. */
static uint64_t base_of(int rank) { return 0x10000000u * (uint64_t)(rank + 1); }
static void *buffer_of(int rank, int is_send, int j)
{
    return (void *)(uintptr_t)(base_of(rank) + 0x1000000u * (unsigned)is_send + 64u * (unsigned)j);
}

/* The driver's cuPointerGetAttributes as pp__nccl_ce_publish asks it: the buffer's allocation (id
 * and base, from its address) and whether CUDA IPC can share it (not for one buffer in five). */
static CUresult fake_attributes(unsigned int n, CUpointer_attribute *which, void **data, CUdeviceptr ptr)
{
    uint64_t a = (uint64_t)ptr, rank = (a >> 28) - 1, is_send = (a >> 24) & 1, j = (a & 0xffffffu) / 64;
    (void)n; (void)which;
    *(uint64_t *)data[0] = rank + 1;                                  /* BUFFER_ID */
    *(uint64_t *)data[1] = base_of((int)rank);                        /* RANGE_START_ADDR */
    *(uint64_t *)data[2] = (j * 31u + rank * 7u + is_send * 3u) % 5u != 0;   /* IS_LEGACY_CUDA_IPC_CAPABLE */
    return CUDA_SUCCESS;
}

static void side_init(side *s, int rank, pp__nccl_ce_claim *out, pp__nccl_ce_claim *in)
{
    int peer = 1 - rank;
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->seed = 17u + (unsigned)rank;
    s->nc.rank = rank;
    s->nc.world = 2;
    s->nc.timeout_s = 30;
    s->t.nc = &s->nc;
    s->t.ce_slot_bytes = 4096;
    s->t.ce_slots = 4;
    s->t.ce_xsent = (uint64_t *)calloc(2, sizeof(uint64_t));
    s->t.ce_xrecv = (uint64_t *)calloc(2, sizeof(uint64_t));
    s->t.ce_sent = (uint64_t *)calloc(2, sizeof(uint64_t));
    s->t.ce_taken = (uint64_t *)calloc(2, sizeof(uint64_t));
    s->t.ce_same = (unsigned char *)calloc(2, 1);   /* as two processes: allocations, not pointers */
    s->t.ce_claims_out = (pp__nccl_ce_claim **)calloc(2, sizeof(pp__nccl_ce_claim *));
    s->t.ce_claims_in = (pp__nccl_ce_claim **)calloc(2, sizeof(pp__nccl_ce_claim *));
    s->t.ce_claims_out[peer] = out;
    s->t.ce_claims_in[peer] = in;
    s->t.attrs = fake_attributes;
    /* this side's allocation already exported, the peer's already mapped (at its own address):
     * publishing and mapping then need no CUDA call */
    s->t.ce_exports[0].buffer_id = (uint64_t)rank + 1;
    s->t.ce_exports[0].base = base_of(rank);
    s->t.ce_num_exports = 1;
    s->t.ce_maps = (pp__nccl_ce_map *)calloc(1, sizeof(pp__nccl_ce_map));
    s->t.ce_maps[0].peer = peer;
    s->t.ce_maps[0].buffer_id = (uint64_t)peer + 1;
    s->t.ce_maps[0].ptr = (void *)(uintptr_t)base_of(peer);
    s->t.ce_num_maps = s->t.ce_cap_maps = 1;
}

static void side_free(side *s)
{
    free(s->t.ce_xsent); free(s->t.ce_xrecv); free(s->t.ce_sent); free(s->t.ce_taken);
    free(s->t.ce_same); free(s->t.ce_claims_out); free(s->t.ce_claims_in); free(s->t.ce_maps);
}

static pp_status claim(side *s, int is_send, int j, size_t bytes, pp__nccl_ce_plan *pl, pp_error *err)
{
    pp_transfer x;
    memset(&x, 0, sizeof x);
    x.is_send = is_send;
    x.peer = 1 - s->rank;
    x.buf = buffer_of(s->rank, is_send, j);
    x.bytes = bytes;
    return pp__nccl_ce_claim_next(&s->t, &x, pl, err);
}

static void *side_main(void *arg)
{
    side *s = (side *)arg;
    side *other = &sides[1 - s->rank];
    int done[2] = { 0, 0 }, burst = 0;
    pp_error err;
    while (done[0] < n_xfers || done[1] < n_xfers) {
        int dir = done[0] >= n_xfers ? 1 : done[1] >= n_xfers ? 0 : (int)(rand_r(&s->seed) % 2);
        int j = done[dir], is_send = dir == 0, from = is_send ? s->rank : 1 - s->rank;
        pp__nccl_ce_plan pl;
        uint64_t before_k;
        if (__atomic_load_n(&other->finished, __ATOMIC_ACQUIRE) && other->status != PP_OK) break;   /* no hang */
        /* sometimes a burst ahead; otherwise stay within LEAD of the peer */
        if (burst == 0 && rand_r(&s->seed) % 500 == 0) burst = (int)(rand_r(&s->seed) % LEAD);
        if (burst > 0) burst--;
        else {
            while (s->progress - other->progress > LEAD / 2 && !__atomic_load_n(&other->finished, __ATOMIC_ACQUIRE))
                sched_yield();
            if (rand_r(&s->seed) % 64 == 0) { struct timespec ts = { 0, (long)(rand_r(&s->seed) % 50) * 1000 }; nanosleep(&ts, NULL); }
        }
        before_k = is_send ? s->t.ce_sent[1 - s->rank] : s->t.ce_taken[1 - s->rank];
        s->status = claim(s, is_send, j, bytes_of(from, j), &pl, &err);
        if (s->status != PP_OK) { snprintf(s->message, sizeof s->message, "%s", err.message); break; }
        s->how[dir][j] = pl.how;
        s->k[dir][j] = pl.k;
        s->remote[dir][j] = pl.remote;
        if (pl.k != before_k) { s->status = PP_ETRANSPORT; snprintf(s->message, sizeof s->message, "k"); break; }
        done[dir]++;
        __atomic_add_fetch(&s->progress, 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&s->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* One round: both sides from fresh claims (via host or not), n transfers each way, each side's
 * status checked. */
static void run_round(pp__nccl_ce_claim *table[2], int via_host, int n)
{
    pthread_t th[2];
    char what[256];
    int r;
    memset(table[0], 0, PP__NCCL_CLAIMS * sizeof(pp__nccl_ce_claim));
    memset(table[1], 0, PP__NCCL_CLAIMS * sizeof(pp__nccl_ce_claim));
    side_init(&sides[0], 0, table[0], table[1]);
    side_init(&sides[1], 1, table[1], table[0]);
    sides[0].t.ce_via_host = sides[1].t.ce_via_host = via_host;
    n_xfers = n;
    for (r = 0; r < 2; r++) pthread_create(&th[r], NULL, side_main, &sides[r]);
    for (r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (r = 0; r < 2; r++) {
        snprintf(what, sizeof what, "%srank %d claimed %d transfers each way: %s", via_host ? "via host: " : "", r, n,
                 sides[r].status == PP_OK ? "ok" : sides[r].message);
        check(sides[r].status == PP_OK, what);
    }
}

int main(void)
{
    pp__nccl_ce_claim *table[2];   /* [d]: the claims of rank d's sends to rank 1 - d */
    int r, j, d, agree = 1, remote_ok = 1, counts_ok = 1;
    long long how_seen[4] = { 0, 0, 0, 0 };
    char what[256];
    table[0] = (pp__nccl_ce_claim *)calloc(PP__NCCL_CLAIMS, sizeof(pp__nccl_ce_claim));
    table[1] = (pp__nccl_ce_claim *)calloc(PP__NCCL_CLAIMS, sizeof(pp__nccl_ce_claim));
    run_round(table, 0, N_XFERS);
    /* d: the sending rank; its direction 0 against the receiver's direction 1 */
    for (d = 0; d < 2 && sides[0].status == PP_OK && sides[1].status == PP_OK; d++) {
        side *snd = &sides[d], *rcv = &sides[1 - d];
        for (j = 0; j < N_XFERS; j++) {
            int how = snd->how[0][j];
            if (how != rcv->how[1][j] || snd->k[0][j] != rcv->k[1][j]) {
                if (agree) printf("  transfer %d from rank %d: sender %d at %llu, receiver %d at %llu\n", j, d, how,
                                  (unsigned long long)snd->k[0][j], rcv->how[1][j], (unsigned long long)rcv->k[1][j]);
                agree = 0;
            }
            if (how >= 1 && how <= 3) how_seen[how]++;
            /* the side that copies has the other's buffer: a push's sender the receive buffer, a
             * pull's receiver the send buffer (an empty transfer may publish no buffer) */
            if (bytes_of(d, j) > 0 && how == PP__NCCL_CLAIM_PUSH &&
                snd->remote[0][j] != (CUdeviceptr)(uintptr_t)buffer_of(1 - d, 0, j))
                remote_ok = 0;
            if (bytes_of(d, j) > 0 && how == PP__NCCL_CLAIM_PULL &&
                rcv->remote[1][j] != (CUdeviceptr)(uintptr_t)buffer_of(d, 1, j))
                remote_ok = 0;
        }
        /* messages: one per direct transfer, one per slot-sized piece through the ring */
        {
            uint64_t messages = 0;
            for (j = 0; j < N_XFERS; j++)
                messages += snd->how[0][j] != PP__NCCL_CLAIM_RING ? 1 : (bytes_of(d, j) + 4095) / 4096;
            if (snd->t.ce_sent[1 - d] != messages || rcv->t.ce_taken[d] != messages) counts_ok = 0;
        }
    }
    check(agree, "both sides took every transfer the same way, from the same first message");
    check(remote_ok, "the side that copies holds the other side's buffer");
    check(counts_ok, "both sides counted the same messages: one per direct transfer, one per 4 KiB piece of the ring");
    snprintf(what, sizeof what, "pushed %lld, pulled %lld, through the ring %lld: all three happen", how_seen[1],
             how_seen[2], how_seen[3]);
    check(how_seen[1] > 1000 && how_seen[2] > 1000 && how_seen[3] > 1000, what);
    printf("  %s\n", what);
    {
        /* sizes that differ: rank 0 sends 8192 bytes first, rank 1's receive of 4096 comes second */
        pp__nccl_ce_plan pl;
        pp_error err;
        pp_status st;
        int n = N_XFERS;
        st = claim(&sides[0], 1, n, 8192, &pl, &err);
        check(st == PP_OK, "the first side's claim of a mismatched transfer goes through");
        st = claim(&sides[1], 0, n, 4096, &pl, &err);
        check(st == PP_ETRANSPORT && strstr(err.message, "8192 bytes sent, 4096 bytes expected here") != NULL,
              "the second side refuses sizes that differ, naming both");
        printf("  %s\n", err.message);
    }
    for (r = 0; r < 2; r++) side_free(&sides[r]);

    /* via host: fresh claims, every transfer through the ring (no buffer is published) */
    run_round(table, 1, 3000);
    agree = counts_ok = 1;
    for (d = 0; d < 2 && sides[0].status == PP_OK && sides[1].status == PP_OK; d++) {
        side *snd = &sides[d], *rcv = &sides[1 - d];
        uint64_t messages = 0;
        for (j = 0; j < n_xfers; j++) {
            if (snd->how[0][j] != PP__NCCL_CLAIM_RING || rcv->how[1][j] != PP__NCCL_CLAIM_RING ||
                snd->k[0][j] != rcv->k[1][j])
                agree = 0;
            messages += (bytes_of(d, j) + 4095) / 4096;
        }
        if (snd->t.ce_sent[1 - d] != messages || rcv->t.ce_taken[d] != messages) counts_ok = 0;
    }
    check(agree, "via host: both sides took every transfer through the ring, from the same first message");
    check(counts_ok, "via host: both sides counted one message per 4 KiB piece");
    {
        pp__nccl_ce_plan pl;
        pp_error err;
        pp_status st;
        st = claim(&sides[1], 1, n_xfers, 100, &pl, &err);
        check(st == PP_OK && pl.how == PP__NCCL_CLAIM_RING, "via host: the first side's claim of a mismatched transfer");
        st = claim(&sides[0], 0, n_xfers, 200, &pl, &err);
        check(st == PP_ETRANSPORT && strstr(err.message, "100 bytes sent, 200 bytes expected here") != NULL,
              "via host: the second side refuses sizes that differ, naming both");
    }
    for (r = 0; r < 2; r++) side_free(&sides[r]);
    free(table[0]); free(table[1]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
