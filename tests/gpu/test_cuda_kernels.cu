/* test_cuda_kernels.cu — every kernel of pipepar_cuda.cu against a CPU reference on the device.
 *
 *     build/gpu/test_cuda_kernels [--quick] [name-substring]
 *
 * Each test draws fresh random inputs over many shapes (row sizes from 1 byte to wider than a
 * block's tile, odd sizes and misaligned pointers that force narrower accesses, cp from 1 to 8),
 * poisons every output with 0xA5 bytes before the kernel runs, and compares all bytes with the
 * reference, so an element the kernel forgot to write, or wrote where it must not, fails. The CPU
 * references follow the upstream formulations (Megatron-LM's view/index_select of 2*cp chunks,
 * TransformerEngine's per-sequence THD partition) rather than the kernels' formulas, and, where
 * the header has the host function for the same job (pack maps), call it. --quick shrinks the
 * shape sweep for compute-sanitizer. Prints one line per failure and ends "N passed, N failed". */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "../../pipepar.h"

/* --- tiny harness ----------------------------------------------------------------------------- */

static int g_quick;
static const char *g_test;
static int g_test_failures;

static void fail_at(const char *file, int line, const char *fmt, ...)
{
    g_test_failures++;
    if (g_test_failures > 8) return;
    va_list ap;
    printf("FAIL %s (%s:%d): ", g_test, file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}
#define CHECK(cond, ...) do { if (!(cond)) fail_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CHECK_OK(call) do { pp_error e_; pp_status s_ = (call); \
    if (s_ != PP_OK) fail_at(__FILE__, __LINE__, "%s -> %s: %s", #call, pp_status_name(s_), e_.message); } while (0)
#define CUDA(call) do { cudaError_t c_ = (call); if (c_ != cudaSuccess) { \
    fail_at(__FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(c_)); exit(2); } } while (0)
/* Calls with an error out-parameter named e_ (CHECK_OK supplies it). */
#define E (&e_)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rndi(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }   /* [lo, hi] */
static void fill_random(void *p, size_t n) { unsigned char *c = (unsigned char *)p; for (size_t i = 0; i < n; i++) c[i] = (unsigned char)rnd(); }

#define POISON 0xA5

/* Device buffer with a misalignment offset: ptr = base + off. */
struct dbuf {
    char *base = nullptr;
    char *ptr = nullptr;
    size_t bytes = 0;
    dbuf(size_t n, size_t off = 0) { bytes = n; CUDA(cudaMalloc((void **)&base, n + off + 16)); ptr = base + off; }
    ~dbuf() { cudaFree(base); }
    void up(const void *h) { if (bytes) CUDA(cudaMemcpy(ptr, h, bytes, cudaMemcpyHostToDevice)); }
    void down(void *h) const { if (bytes) CUDA(cudaMemcpy(h, ptr, bytes, cudaMemcpyDeviceToHost)); }
    void poison() { CUDA(cudaMemset(base, POISON, bytes + 16 + (size_t)(ptr - base))); }
    /* bytes just past the end must still hold the poison */
    bool tail_intact() const
    {
        unsigned char t[16];
        CUDA(cudaMemcpy(t, ptr + bytes, 16, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 16; i++) if (t[i] != POISON) return false;
        return true;
    }
};

static void sync_check(void)
{
    CUDA(cudaGetLastError());
    CUDA(cudaDeviceSynchronize());
}

static long long first_diff(const void *a, const void *b, size_t n)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    for (size_t i = 0; i < n; i++) if (x[i] != y[i]) return (long long)i;
    return -1;
}

/* Row sizes in bytes: single bytes, odd widths, 16-byte multiples, a bf16 hidden row, and rows
 * wider than one block's 64 KiB tile (the segmented path). */
static std::vector<long long> row_sizes(void)
{
    if (g_quick) return {1, 6, 16, 48, 2 * 1000 + 2, 65536 + 48};
    return {1, 2, 3, 4, 6, 8, 12, 16, 24, 48, 100, 2 * 1000 + 2, 2 * 4096, 65536 + 48, 3 * 65536 + 16};
}

/* --- references (upstream formulations) ------------------------------------------------------- */

/* Megatron-LM get_batch_on_this_cp_rank: view seq as [2*cp, seq/(2*cp)], index_select chunks
 * [r, 2*cp-1-r], view back. ref_split returns the local [outer, seq/cp, row]. */
static void ref_split_bshd(const unsigned char *src, unsigned char *dst, long long outer, long long seq,
                           long long rb, int cp, int r)
{
    long long c = seq / (2 * cp);
    int chosen[2] = { r, 2 * cp - 1 - r };
    for (long long o = 0; o < outer; o++)
        for (int h = 0; h < 2; h++)
            memcpy(dst + ((o * 2 + h) * c) * rb, src + (o * seq + (long long)chosen[h] * c) * rb, (size_t)(c * rb));
}

/* TransformerEngine thd_get_partitioned_indices: for every sequence of cu_seqlens_padded, the
 * token indices of chunks r and 2*cp-1-r, in order. */
static std::vector<long long> ref_thd_indices(const std::vector<int> &cu, int cp, int r)
{
    std::vector<long long> idx;
    for (size_t k = 0; k + 1 < cu.size(); k++) {
        long long len = cu[k + 1] - cu[k], c = len / (2 * cp);
        for (long long j = 0; j < c; j++) idx.push_back(cu[k] + (long long)r * c + j);
        for (long long j = 0; j < c; j++) idx.push_back(cu[k] + (long long)(2 * cp - 1 - r) * c + j);
    }
    return idx;
}

/* --- context parallel, BSHD ------------------------------------------------------------------- */

static void cp_bshd_one(long long outer, long long seq, long long rb, int cp, size_t mis_src, size_t mis_dst)
{
    size_t full = (size_t)(outer * seq * rb), local = full / cp;
    std::vector<unsigned char> h(full), out(local), ref(local), back(full), stack(full), want(full);
    fill_random(h.data(), full);
    dbuf d_full(full, mis_src), d_local(local, mis_dst), d_back(full, mis_src), d_stack(full, mis_dst);
    d_full.up(h.data());
    for (int r = 0; r < cp; r++) {
        d_local.poison();
        CHECK_OK(pp_cuda_cp_split(d_full.ptr, d_local.ptr, outer, seq, rb, cp, r, NULL, E));
        sync_check();
        d_local.down(out.data());
        ref_split_bshd(h.data(), ref.data(), outer, seq, rb, cp, r);
        long long at = first_diff(out.data(), ref.data(), local);
        CHECK(at < 0, "split outer=%lld seq=%lld row=%lld cp=%d r=%d mis=%zu/%zu: byte %lld differs",
              outer, seq, rb, cp, r, mis_src, mis_dst, at);
        CHECK(d_local.tail_intact(), "split wrote past the end (row=%lld cp=%d r=%d)", rb, cp, r);
        memcpy(stack.data() + (size_t)r * local, ref.data(), local);

        /* unsplit of this rank only: its positions hold the data, every other byte the poison */
        d_back.poison();
        d_local.up(ref.data());
        CHECK_OK(pp_cuda_cp_unsplit(d_local.ptr, d_back.ptr, outer, seq, rb, cp, r, NULL, E));
        sync_check();
        d_back.down(back.data());
        memset(want.data(), POISON, full);
        long long c = seq / (2 * cp);
        for (long long o = 0; o < outer; o++)
            for (long long s = 0; s < seq; s++) {
                long long k = s / c;
                if (k == r || k == 2 * cp - 1 - r)
                    memcpy(want.data() + (o * seq + s) * rb, h.data() + (o * seq + s) * rb, (size_t)rb);
            }
        at = first_diff(back.data(), want.data(), full);
        CHECK(at < 0, "unsplit row=%lld cp=%d r=%d: byte %lld differs", rb, cp, r, at);
    }
    /* merge of all shards, as an all-gather leaves them, gives the original back */
    d_stack.up(stack.data());
    d_back.poison();
    CHECK_OK(pp_cuda_cp_merge(d_stack.ptr, d_back.ptr, outer, seq, rb, cp, NULL, E));
    sync_check();
    d_back.down(back.data());
    long long at = first_diff(back.data(), h.data(), full);
    CHECK(at < 0, "merge outer=%lld seq=%lld row=%lld cp=%d: byte %lld differs", outer, seq, rb, cp, at);
    CHECK(d_back.tail_intact(), "merge wrote past the end");
    /* shard_all is merge's inverse */
    d_stack.poison();
    CHECK_OK(pp_cuda_cp_shard_all(d_full.ptr, d_stack.ptr, outer, seq, rb, cp, NULL, E));
    sync_check();
    d_stack.down(back.data());
    at = first_diff(back.data(), stack.data(), full);
    CHECK(at < 0, "shard_all row=%lld cp=%d: byte %lld differs", rb, cp, at);
}

static void cp_split_bshd_keeps_chunks_r_and_2cp_minus_1_minus_r(void)
{
    int cps[] = {1, 2, 3, 4, 8};
    for (long long rb : row_sizes())
        for (int cp : cps) {
            long long outer = rndi(1, 3);
            long long c = rb > 4096 ? rndi(1, 2) : rndi(1, g_quick ? 3 : 9);
            cp_bshd_one(outer, 2 * cp * c, rb, cp, 0, 0);
        }
}

static void cp_split_bshd_handles_misaligned_pointers(void)
{
    size_t offs[] = {1, 2, 4, 8};
    for (size_t o : offs) {
        cp_bshd_one(2, 8, 64, 2, o, 0);
        cp_bshd_one(1, 12, 2048, 3, 0, o);
        cp_bshd_one(3, 16, 48, 4, o, o);
    }
}

/* A hand-worked vector: seq 8, cp 2, one byte per row holding its global position. */
static void cp_split_bshd_hand_vector_cp2(void)
{
    unsigned char h[8] = {0, 1, 2, 3, 4, 5, 6, 7}, out[4];
    unsigned char want[2][4] = { {0, 1, 6, 7}, {2, 3, 4, 5} };
    dbuf d(8), l(4);
    d.up(h);
    for (int r = 0; r < 2; r++) {
        l.poison();
        CHECK_OK(pp_cuda_cp_split(d.ptr, l.ptr, 1, 8, 1, 2, r, NULL, E));
        sync_check();
        l.down(out);
        CHECK(memcmp(out, want[r], 4) == 0, "rank %d holds %d %d %d %d", r, out[0], out[1], out[2], out[3]);
    }
}

/* --- context parallel, THD -------------------------------------------------------------------- */

static void cp_thd_one(const std::vector<int> &cu, long long rb, int cp, size_t mis)
{
    int nseq = (int)cu.size() - 1;
    long long total = cu.back(), local_rows = total / cp;
    size_t full = (size_t)(total * rb), local = (size_t)(local_rows * rb);
    std::vector<unsigned char> h(full), out(local), ref(local), back(full), want(full), stack(full);
    fill_random(h.data(), full);
    dbuf d_full(full, mis), d_local(local, mis), d_back(full), d_stack(full), d_cu(cu.size() * sizeof(int));
    d_full.up(h.data());
    d_cu.up(cu.data());
    const int *dcu = (const int *)d_cu.ptr;
    for (int r = 0; r < cp; r++) {
        std::vector<long long> idx = ref_thd_indices(cu, cp, r);
        CHECK((long long)idx.size() == local_rows, "reference has %zu rows, expected %lld", idx.size(), local_rows);
        for (size_t i = 0; i < idx.size(); i++) memcpy(ref.data() + i * rb, h.data() + idx[i] * rb, (size_t)rb);
        d_local.poison();
        CHECK_OK(pp_cuda_cp_split_thd(d_full.ptr, d_local.ptr, dcu, nseq, total, rb, cp, r, NULL, E));
        sync_check();
        d_local.down(out.data());
        long long at = first_diff(out.data(), ref.data(), local);
        CHECK(at < 0, "thd split nseq=%d total=%lld row=%lld cp=%d r=%d: byte %lld (row %lld) differs",
              nseq, total, rb, cp, r, at, at < 0 ? -1 : at / rb);
        CHECK(d_local.tail_intact(), "thd split wrote past the end");
        memcpy(stack.data() + (size_t)r * local, ref.data(), local);

        d_back.poison();
        d_local.up(ref.data());
        CHECK_OK(pp_cuda_cp_unsplit_thd(d_local.ptr, d_back.ptr, dcu, nseq, total, rb, cp, r, NULL, E));
        sync_check();
        d_back.down(back.data());
        memset(want.data(), POISON, full);
        for (size_t i = 0; i < idx.size(); i++) memcpy(want.data() + idx[i] * rb, h.data() + idx[i] * rb, (size_t)rb);
        at = first_diff(back.data(), want.data(), full);
        CHECK(at < 0, "thd unsplit row=%lld cp=%d r=%d: byte %lld differs", rb, cp, r, at);
    }
    d_stack.up(stack.data());
    d_back.poison();
    CHECK_OK(pp_cuda_cp_merge_thd(d_stack.ptr, d_back.ptr, dcu, nseq, total, rb, cp, NULL, E));
    sync_check();
    d_back.down(back.data());
    long long at = first_diff(back.data(), h.data(), full);
    CHECK(at < 0, "thd merge nseq=%d row=%lld cp=%d: byte %lld differs", nseq, rb, cp, at);
    d_stack.poison();
    CHECK_OK(pp_cuda_cp_shard_all_thd(d_full.ptr, d_stack.ptr, dcu, nseq, total, rb, cp, NULL, E));
    sync_check();
    d_stack.down(back.data());
    at = first_diff(back.data(), stack.data(), full);
    CHECK(at < 0, "thd shard_all row=%lld cp=%d: byte %lld differs", rb, cp, at);
}

static std::vector<int> random_cu(int nseq, int multiple, int max_chunks)
{
    std::vector<int> cu(1, 0);
    for (int k = 0; k < nseq; k++) cu.push_back(cu.back() + multiple * rndi(1, max_chunks));
    return cu;
}

static void cp_split_thd_matches_te_partitioned_indices(void)
{
    int cps[] = {1, 2, 3, 4, 8};
    for (long long rb : row_sizes())
        for (int cp : cps) {
            int nseq = rndi(1, g_quick || rb > 4096 ? 4 : 24);
            cp_thd_one(random_cu(nseq, 2 * cp, rb > 4096 ? 2 : 6), rb, cp, 0);
        }
    cp_thd_one(random_cu(5, 4, 5), 6, 2, 2);   /* misaligned, 2-byte accesses */
    cp_thd_one(random_cu(7, 8, 3), 40, 4, 8);
}

/* The issue's hand-worked vector: sequences of 5 and 11 tokens, cp = 2, padded to multiples of
 * 2*cp = 4: 8 and 12, cu_seqlens_padded = {0, 8, 20}, chunks of 2 and 3 tokens.
 *   rank 0: seq 0 chunks 0,3 -> 0 1 6 7;   seq 1 chunks 0,3 -> 8 9 10 17 18 19
 *   rank 1: seq 0 chunks 1,2 -> 2 3 4 5;   seq 1 chunks 1,2 -> 11 12 13 14 15 16          */
static void cp_split_thd_hand_vector_5_and_11_tokens(void)
{
    std::vector<int> cu = {0, 8, 20};
    int h[20];
    for (int i = 0; i < 20; i++) h[i] = i;
    int want[2][10] = { {0, 1, 6, 7, 8, 9, 10, 17, 18, 19}, {2, 3, 4, 5, 11, 12, 13, 14, 15, 16} };
    dbuf d(sizeof h), l(10 * sizeof(int)), dcu(3 * sizeof(int));
    d.up(h);
    dcu.up(cu.data());
    for (int r = 0; r < 2; r++) {
        int out[10];
        l.poison();
        CHECK_OK(pp_cuda_cp_split_thd(d.ptr, l.ptr, (const int *)dcu.ptr, 2, 20, 4, 2, r, NULL, E));
        sync_check();
        l.down(out);
        CHECK(memcmp(out, want[r], sizeof out) == 0, "rank %d: %d %d %d %d %d %d %d %d %d %d", r, out[0], out[1],
              out[2], out[3], out[4], out[5], out[6], out[7], out[8], out[9]);
    }
}

/* --- gather / scatter by index map ------------------------------------------------------------ */

template <typename I>
static void gather_scatter_one(long long src_rows, long long rows, long long rb, size_t mis)
{
    std::vector<I> map((size_t)rows);
    for (auto &m : map) m = (rnd() % 5 == 0) ? (I)-1 : (I)(rnd() % (uint64_t)src_rows);
    size_t sb = (size_t)(src_rows * rb), db = (size_t)(rows * rb);
    std::vector<unsigned char> h(sb), out(db), want(db);
    fill_random(h.data(), sb);
    dbuf d_src(sb, mis), d_dst(db, mis), d_map(map.size() * sizeof(I));
    d_src.up(h.data());
    d_map.up(map.data());
    d_dst.poison();
    CHECK_OK(pp_cuda_gather_rows(d_src.ptr, d_dst.ptr, d_map.ptr, (int)sizeof(I), rows, rb, NULL, E));
    sync_check();
    d_dst.down(out.data());
    for (long long i = 0; i < rows; i++) {
        if (map[i] < 0) memset(want.data() + i * rb, 0, (size_t)rb);
        else memcpy(want.data() + i * rb, h.data() + (long long)map[i] * rb, (size_t)rb);
    }
    long long at = first_diff(out.data(), want.data(), db);
    CHECK(at < 0, "gather index=%zu rows=%lld row=%lld mis=%zu: byte %lld differs", sizeof(I), rows, rb, mis, at);
    CHECK(d_dst.tail_intact(), "gather wrote past the end");

    /* scatter with a map that is injective (a permutation of a subset, holes = -1) */
    std::vector<I> perm((size_t)src_rows);
    for (long long i = 0; i < src_rows; i++) perm[i] = (I)i;
    for (long long i = src_rows - 1; i > 0; i--) { long long j = (long long)(rnd() % (uint64_t)(i + 1)); I t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
    std::vector<I> smap((size_t)rows);
    for (long long i = 0; i < rows; i++) smap[i] = (i < src_rows && rnd() % 4) ? perm[i] : (I)-1;
    /* scatter: src [rows] -> dst [src_rows] */
    dbuf s_src(db, mis), s_dst(sb, mis), s_map(smap.size() * sizeof(I));
    std::vector<unsigned char> hs(db), outs(sb), wants(sb, POISON);
    fill_random(hs.data(), db);
    s_src.up(hs.data());
    s_map.up(smap.data());
    s_dst.poison();
    CHECK_OK(pp_cuda_scatter_rows(s_src.ptr, s_dst.ptr, s_map.ptr, (int)sizeof(I), rows, rb, NULL, E));
    sync_check();
    s_dst.down(outs.data());
    for (long long i = 0; i < rows; i++)
        if (smap[i] >= 0) memcpy(wants.data() + (long long)smap[i] * rb, hs.data() + i * rb, (size_t)rb);
    at = first_diff(outs.data(), wants.data(), sb);
    CHECK(at < 0, "scatter index=%zu rows=%lld row=%lld mis=%zu: byte %lld differs", sizeof(I), rows, rb, mis, at);
    CHECK(s_dst.tail_intact(), "scatter wrote past the end");
}

static void gather_and_scatter_rows_follow_the_map_and_pad_with_zeros(void)
{
    for (long long rb : row_sizes()) {
        long long rows = rb > 4096 ? rndi(1, 7) : rndi(1, g_quick ? 300 : 3000);
        long long src_rows = rndi(1, (int)rows + 5);
        gather_scatter_one<int32_t>(src_rows, rows, rb, 0);
        gather_scatter_one<int64_t>(src_rows, rows, rb, 0);
    }
    gather_scatter_one<int64_t>(50, 70, 32, 4);
    gather_scatter_one<int32_t>(50, 70, 2048, 2);
}

static void copy_rows_is_a_plain_copy(void)
{
    for (long long rb : row_sizes()) {
        long long rows = rb > 4096 ? 3 : 257;
        size_t n = (size_t)(rows * rb);
        std::vector<unsigned char> h(n), out(n);
        fill_random(h.data(), n);
        dbuf s(n), d(n);
        s.up(h.data());
        d.poison();
        CHECK_OK(pp_cuda_copy_rows(s.ptr, d.ptr, rows, rb, NULL, E));
        sync_check();
        d.down(out.data());
        CHECK(first_diff(out.data(), h.data(), n) < 0, "copy row=%lld differs", rb);
        CHECK(d.tail_intact(), "copy wrote past the end");
    }
}

/* --- pack / unpack ---------------------------------------------------------------------------- */

/* A microbatch the way pp_pack_plan_gather describes it: sequences at seq_offsets of a flat
 * source, in the bin's order, each padded to a multiple of `mult`, the last one also taking the
 * bin's tail padding. rows[t] = source row or -1. */
struct bin_case {
    std::vector<int> cu;            /* padded */
    std::vector<long long> rows;
    long long src_rows;
};

static bin_case make_bin(int nseq, int mult, int tail)
{
    bin_case b;
    std::vector<int> len(nseq);
    long long src = 0;
    std::vector<long long> off(nseq);
    for (int k = 0; k < nseq; k++) { len[k] = rndi(1, 40); off[k] = src; src += len[k] + rndi(0, 3); }
    /* a shuffled bin order, as a packer produces */
    std::vector<int> order(nseq);
    for (int k = 0; k < nseq; k++) order[k] = k;
    for (int k = nseq - 1; k > 0; k--) { int j = rndi(0, k); int t = order[k]; order[k] = order[j]; order[j] = t; }
    b.cu.push_back(0);
    for (int i = 0; i < nseq; i++) {
        int k = order[i];
        int padded = (len[k] + mult - 1) / mult * mult + (i == nseq - 1 ? tail : 0);
        for (int t = 0; t < padded; t++) b.rows.push_back(t < len[k] ? off[k] + t : -1);
        b.cu.push_back(b.cu.back() + padded);
    }
    b.src_rows = src;
    return b;
}

static void pack_fills_fields_positions_and_padding(void)
{
    int iters = g_quick ? 3 : 20;
    for (int it = 0; it < iters; it++) {
        int nseq = rndi(1, 12);
        bin_case b = make_bin(nseq, rndi(1, 4) * 2, rndi(0, 9));
        long long total = (long long)b.rows.size(), S = b.src_rows;
        std::vector<int32_t> tok(S); std::vector<int64_t> lab(S); std::vector<uint8_t> mask(S); std::vector<uint16_t> w(S);
        for (long long i = 0; i < S; i++) { tok[i] = (int32_t)rnd(); lab[i] = (int64_t)rnd(); mask[i] = (uint8_t)rnd(); w[i] = (uint16_t)rnd(); }
        dbuf s0(S * 4), s1(S * 8), s2(S), s3(S * 2), d0(total * 4), d1(total * 8), d2(total), d3(total * 2);
        dbuf dpos(total * (it % 2 ? 8 : 4)), drows(total * 8), dcu(b.cu.size() * 4);
        s0.up(tok.data()); s1.up(lab.data()); s2.up(mask.data()); s3.up(w.data());
        drows.up(b.rows.data()); dcu.up(b.cu.data());
        d0.poison(); d1.poison(); d2.poison(); d3.poison(); dpos.poison();
        pp_cuda_pack_field f[4] = {
            { s0.ptr, d0.ptr, 4, 151643 },     /* token ids, pad token */
            { s1.ptr, d1.ptr, 8, -100 },       /* labels, ignore index */
            { s2.ptr, d2.ptr, 1, 0 },          /* loss mask */
            { s3.ptr, d3.ptr, 2, 0x7FC0 },     /* a bf16 per-token weight, pad NaN */
        };
        int pb = it % 2 ? 8 : 4;
        CHECK_OK(pp_cuda_pack((const int64_t *)drows.ptr, (const int *)dcu.ptr, nseq, total, f, 4, dpos.ptr, pb, NULL, E));
        sync_check();
        std::vector<int32_t> o0(total); std::vector<int64_t> o1(total); std::vector<uint8_t> o2(total); std::vector<uint16_t> o3(total);
        std::vector<unsigned char> op((size_t)(total * pb));
        d0.down(o0.data()); d1.down(o1.data()); d2.down(o2.data()); d3.down(o3.data()); dpos.down(op.data());
        int bad = 0;
        for (long long t = 0, k = 0; t < total; t++) {
            while (t >= b.cu[k + 1]) k++;
            long long r = b.rows[t];
            long long pos = pb == 8 ? ((int64_t *)op.data())[t] : ((int32_t *)op.data())[t];
            if (o0[t] != (r >= 0 ? tok[r] : 151643) || o1[t] != (r >= 0 ? lab[r] : -100) ||
                o2[t] != (r >= 0 ? mask[r] : 0) || o3[t] != (r >= 0 ? w[r] : 0x7FC0) || pos != t - b.cu[k]) {
                if (bad++ < 3) CHECK(0, "pack t=%lld (seq %lld, row %lld): got tok %d lab %lld mask %d w %d pos %lld",
                                     t, k, r, o0[t], (long long)o1[t], o2[t], o3[t], pos);
            }
        }
        CHECK(bad == 0, "pack: %d wrong positions of %lld", bad, total);
        CHECK(d0.tail_intact() && d1.tail_intact() && d2.tail_intact() && d3.tail_intact() && dpos.tail_intact(),
              "pack wrote past the end");

        /* unpack a per-token output (fp32 logprobs) with the same map: padding dropped, rows that
         * no sequence owns untouched */
        std::vector<float> lp(total), back(S);
        for (auto &x : lp) x = (float)(rnd() % 1000) / 7.f;
        dbuf dlp(total * 4), dback(S * 4);
        dlp.up(lp.data());
        dback.poison();
        CHECK_OK(pp_cuda_scatter_rows(dlp.ptr, dback.ptr, drows.ptr, 8, total, 4, NULL, E));
        sync_check();
        dback.down(back.data());
        std::vector<float> want(S);
        memset(want.data(), POISON, S * 4);
        for (long long t = 0; t < total; t++) if (b.rows[t] >= 0) want[b.rows[t]] = lp[t];
        CHECK(first_diff(back.data(), want.data(), S * 4) < 0, "unpack differs");
    }
}

/* A whole global batch through the header's own planner: every bin of pp_pack_plan_build, its
 * gather map from pp_pack_plan_gather (the CPU function is the reference: the packed tokens must
 * be exactly src[rows[t]] or the pad), then the THD CP split of the packed bin per rank. */
static void pack_runs_every_bin_of_a_pp_pack_plan(void)
{
    int n = g_quick ? 40 : 400;
    std::vector<int32_t> len((size_t)n);
    long long src_total = 0;
    for (auto &l : len) { l = rndi(1, 3000); src_total += l; }
    pp_pack_plan_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.pack.capacity = 8192;
    cfg.dp = 2; cfg.pp = 2; cfg.cp = 2; cfg.tp = 1;
    pp_pack_plan *plan = NULL;
    CHECK_OK(pp_pack_plan_build(len.data(), n, &cfg, &plan, E));
    if (!plan) return;
    std::vector<int32_t> tok((size_t)src_total);
    for (auto &t : tok) t = (int32_t)(rnd() & 0x7FFFFFFF);
    dbuf dtok(tok.size() * 4);
    dtok.up(tok.data());
    for (int b = 0; b < plan->num_bins; b++) {
        long long total = plan->bin_padded_tokens[b];
        int nseq = pp_pack_plan_bin_size(plan, b);
        std::vector<int64_t> rows((size_t)total);
        CHECK_OK(pp_pack_plan_gather(plan, b, NULL, rows.data(), E));
        const int32_t *cu = pp_pack_plan_cu_seqlens_padded(plan, b);
        dbuf drows(rows.size() * 8), dcu((size_t)(nseq + 1) * 4), dout(total * 4), dpos(total * 4);
        drows.up(rows.data());
        dcu.up(cu);
        dout.poison();
        dpos.poison();
        pp_cuda_pack_field f = { dtok.ptr, dout.ptr, 4, -1 };
        CHECK_OK(pp_cuda_pack((const int64_t *)drows.ptr, (const int *)dcu.ptr, nseq, total, &f, 1, dpos.ptr, 4, NULL, E));
        sync_check();
        std::vector<int32_t> out((size_t)total), pos((size_t)total);
        dout.down(out.data());
        dpos.down(pos.data());
        int bad = 0;
        for (long long t = 0, k = 0; t < total; t++) {
            while (t >= cu[k + 1]) k++;
            if (out[t] != (rows[t] >= 0 ? tok[rows[t]] : -1) || pos[t] != t - cu[k]) bad++;
        }
        CHECK(bad == 0, "bin %d: %d of %lld packed tokens wrong", b, bad, total);
        /* THD split of the packed bin on each CP rank matches TE's partition of the same bins */
        std::vector<int> cuv(cu, cu + nseq + 1);
        for (int r = 0; r < 2; r++) {
            dbuf dl(total / 2 * 4);
            dl.poison();
            CHECK_OK(pp_cuda_cp_split_thd(dout.ptr, dl.ptr, (const int *)dcu.ptr, nseq, total, 4, 2, r, NULL, E));
            sync_check();
            std::vector<int32_t> l((size_t)(total / 2));
            dl.down(l.data());
            std::vector<long long> idx = ref_thd_indices(cuv, 2, r);
            int wrong = 0;
            for (size_t i = 0; i < idx.size(); i++) if (l[i] != out[idx[i]]) wrong++;
            CHECK(wrong == 0 && (long long)idx.size() == total / 2, "bin %d rank %d: %d wrong", b, r, wrong);
        }
    }
    pp_pack_plan_free(plan);
}

/* --- router replay ---------------------------------------------------------------------------- */

static long long rec_value(const std::vector<unsigned char> &rec, long long idx, int eb)
{
    const unsigned char *p = rec.data() + idx * eb;
    switch (eb) {
    case 1: return *p;
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { int32_t v; memcpy(&v, p, 4); return v; }
    default: { int64_t v; memcpy(&v, p, 8); return v; }
    }
}

static long long out_value(const std::vector<unsigned char> &o, long long idx, int eb)
{
    return rec_value(o, idx, eb);   /* same decoding; values compared after truncation below */
}

static long long truncate_to(long long v, int eb)
{
    switch (eb) {
    case 1: return (uint8_t)v;
    case 2: return (uint16_t)v;
    case 4: return (int32_t)v;
    default: return v;
    }
}

/* rows: recorded row of each local token or -1; checks every output element and the layout */
template <typename I>
static void replay_one(long long R, int L, int topk, int in_b, int out_b, const std::vector<I> &rows,
                       int lb, int lc, int token_major, int pad_distinct = 0, size_t rec_off = 0, size_t dst_off = 0)
{
    long long T = (long long)rows.size();
    std::vector<unsigned char> rec((size_t)(R * L * topk * in_b));
    for (long long e = 0; e < R * L * topk; e++) {
        long long v = in_b == 1 ? (long long)(rnd() % 256) : (long long)(rnd() % 384);   /* expert ids */
        memcpy(rec.data() + e * in_b, &v, (size_t)in_b);                               /* little-endian */
    }
    dbuf drec(rec.size(), rec_off), drows(rows.size() * sizeof(I)), ddst((size_t)(T * lc * topk * out_b), dst_off);
    drec.up(rec.data());
    drows.up(rows.data());
    ddst.poison();
    pp_cuda_replay d;
    memset(&d, 0, sizeof d);
    d.recorded = drec.ptr; d.recorded_bytes = in_b; d.moe_layers = L; d.topk = topk;
    d.layer_begin = lb; d.layer_count = lc; d.rows = drows.ptr; d.index_bytes = (int)sizeof(I);
    d.tokens = T; d.dst = ddst.ptr; d.dst_bytes = out_b; d.token_major = token_major; d.pad_distinct = pad_distinct;
    CHECK_OK(pp_cuda_replay_gather(&d, NULL, E));
    sync_check();
    std::vector<unsigned char> out(ddst.bytes);
    ddst.down(out.data());
    int bad = 0;
    for (long long i = 0; i < T; i++)
        for (int l = 0; l < lc; l++)
            for (int k = 0; k < topk; k++) {
                long long o = token_major ? ((i * lc + l) * topk + k) : (((long long)l * T + i) * topk + k);
                long long want = rows[i] >= 0 ? rec_value(rec, ((long long)rows[i] * L + lb + l) * topk + k, in_b)
                                              : pad_distinct ? k : -1;
                if (out_value(out, o, out_b) != truncate_to(want, out_b) && bad++ < 3)
                    CHECK(0, "replay token %lld layer %d k %d: got %lld want %lld (in %d out %d major %d)", i, l, k,
                          out_value(out, o, out_b), truncate_to(want, out_b), in_b, out_b, token_major);
            }
    CHECK(bad == 0, "replay: %d wrong of %lld", bad, T * lc * topk);
    CHECK(ddst.tail_intact(), "replay wrote past the end");
}

static void replay_gathers_this_stages_layers_in_local_token_order(void)
{
    int ins[] = {1, 2, 4, 8}, outs[] = {8, 4, 1, 2};
    int iters = g_quick ? 4 : 16;
    for (int it = 0; it < iters; it++) {
        long long R = rndi(1, 500);
        int L = rndi(1, 60), topk = it % 4 == 1 ? 8 : rndi(1, 9);    /* topk 8: the 16-byte store path */
        int lb = rndi(0, L - 1), lc = rndi(0, L - lb);
        long long T = it % 4 == 1 ? 2 * rndi(0, 350) : rndi(0, 700);
        int in_b = ins[it % 4], out_b = outs[(it / 4) % 4];
        if (it % 2) {
            std::vector<int64_t> rows((size_t)T);
            for (auto &r : rows) r = rnd() % 6 == 0 ? -1 : (int64_t)(rnd() % (uint64_t)R);
            replay_one<int64_t>(R, L, topk, in_b, out_b, rows, lb, lc, it % 3 == 0, it % 5 == 0);
        } else {
            std::vector<int32_t> rows((size_t)T);
            for (auto &r : rows) r = rnd() % 6 == 0 ? -1 : (int32_t)(rnd() % (uint64_t)R);
            replay_one<int32_t>(R, L, topk, in_b, out_b, rows, lb, lc, it % 3 == 0, it % 5 == 0);
        }
    }
}

/* topk 8 and 4 make whole 16-byte output runs (the vector stores) and 8..64-byte recorded runs
 * (the wide loads); every type pair, both layouts, padding included. */
static void replay_vector_and_wide_load_paths_match_the_scalar_reference(void)
{
    int sizes[] = {1, 2, 4, 8};
    int topks[] = {8, 4, 16};
    for (int topk : topks)
        for (int in_b : sizes)
            for (int out_b : sizes)
                for (int major = 0; major < 2; major++) {
                    if (g_quick && (topk == 16 || out_b == 2)) continue;
                    long long R = rndi(1, 200), T = rndi(1, 300);
                    int L = rndi(1, 30), lb = rndi(0, L - 1), lc = rndi(1, L - lb);
                    std::vector<int64_t> rows((size_t)T);
                    for (auto &r : rows) r = rnd() % 7 == 0 ? -1 : (int64_t)(rnd() % (uint64_t)R);
                    replay_one<int64_t>(R, L, topk, in_b, out_b, rows, lb, lc, major, (in_b + out_b) % 3 == 0);
                }
}

/* The direct and staged paths at their edges, with int32 rows: recordings that are not 16-byte
 * aligned (the staged path's narrower loads; the direct path refused), destinations that are not
 * (the transpose instead), and a stage so deep that its runs do not fit the staged tile (uint8 ->
 * int32 then goes direct, layer-major). */
static void replay_paths_at_their_edges_match_the_reference(void)
{
    struct { int in_b, out_b, topk, L, lc; size_t rec_off, dst_off; int major; } cases[] = {
        {1, 8, 8, 40, 15, 1, 0, 0}, {1, 8, 8, 40, 15, 2, 0, 1}, {1, 4, 8, 40, 15, 4, 0, 0}, {1, 4, 8, 40, 15, 8, 0, 1},
        {4, 8, 8, 40, 15, 4, 0, 0}, {4, 4, 8, 40, 15, 8, 0, 0}, {4, 4, 8, 40, 15, 4, 0, 1}, {4, 8, 4, 40, 15, 12, 0, 0},
        {1, 8, 8, 40, 15, 0, 8, 0}, {4, 4, 8, 40, 15, 0, 4, 1},
        {1, 4, 8, 320, 300, 0, 0, 0}, {1, 4, 8, 320, 300, 3, 0, 0}, {1, 8, 8, 320, 300, 0, 0, 0},
        /* the staged path's 16-byte windows (aligned recording, rows of whole 16-byte units;
         * layer_begin odd or even: the window starts 8 bytes below the span or on it), and
         * rows that are not whole units (41 x 8 bytes: per-run loads) */
        {1, 4, 8, 40, 15, 0, 0, 0}, {1, 8, 8, 40, 15, 0, 0, 0}, {2, 4, 4, 40, 15, 0, 0, 0}, {1, 4, 8, 40, 1, 0, 0, 0},
        {1, 4, 8, 41, 15, 0, 0, 0}, {1, 4, 8, 58, 15, 16, 0, 0},
    };
    int n = 0;
    for (auto &c : cases) {
        long long R = rndi(1, 60), T = rndi(1, 200);
        int lb = rndi(0, c.L - c.lc);
        std::vector<int32_t> rows((size_t)T);
        for (auto &r : rows) r = rnd() % 6 == 0 ? -1 : (int32_t)(rnd() % (uint64_t)R);
        replay_one<int32_t>(R, c.L, c.topk, c.in_b, c.out_b, rows, lb, c.lc, c.major, n++ % 2, c.rec_off, c.dst_off);
    }
}

/* The data path end to end on the device: the pack map of a bin (int64 rows) split for CP rank r
 * with the THD kernel (rows are 8-byte rows), then the replay gather by the local rows. The
 * reference composes TE's THD partition with the map on the CPU. */
static void replay_follows_pack_then_cp_split_maps(void)
{
    int cp = 2;
    bin_case b = make_bin(rndi(2, 9), 2 * cp, 2 * cp * rndi(0, 3));
    long long total = (long long)b.rows.size();
    int nseq = (int)b.cu.size() - 1;
    dbuf drows(total * 8), dcu(b.cu.size() * 4);
    drows.up(b.rows.data());
    dcu.up(b.cu.data());
    for (int r = 0; r < cp; r++) {
        dbuf dlocal(total / cp * 8);
        dlocal.poison();
        CHECK_OK(pp_cuda_cp_split_thd(drows.ptr, dlocal.ptr, (const int *)dcu.ptr, nseq, total, 8, cp, r, NULL, E));
        sync_check();
        std::vector<int64_t> local((size_t)(total / cp));
        dlocal.down(local.data());
        std::vector<long long> idx = ref_thd_indices(b.cu, cp, r);
        int bad = 0;
        for (size_t i = 0; i < idx.size(); i++) if (local[i] != b.rows[idx[i]]) bad++;
        CHECK(bad == 0, "local rows of rank %d: %d wrong", r, bad);
        replay_one<int64_t>(b.src_rows, 7, 4, 1, 8, local, 2, 3, 0);
    }
}

/* --- against the header's own index maps (>>cp, >>replay) ----------------------------------- */

/* pp_cp_*_indices and pp_cp_*_gather are the host's word on which token goes where: the
 * formula kernels must move exactly what a gather by those maps moves. */
static void cp_kernels_agree_with_the_headers_index_maps(void)
{
    int cps[] = {1, 2, 3, 4, 8};
    for (int cp : cps) {
        long long rb = 2 * rndi(1, 300);
        /* THD */
        std::vector<int> cu = random_cu(rndi(1, 12), 2 * cp, 6);
        int nseq = (int)cu.size() - 1;
        long long total = cu.back(), local = total / cp;
        std::vector<unsigned char> h((size_t)(total * rb));
        fill_random(h.data(), h.size());
        dbuf dsrc(h.size()), dcu(cu.size() * 4), a(local * rb), b(local * rb), dmap(total * 4), full1(h.size()), full2(h.size());
        dsrc.up(h.data());
        dcu.up(cu.data());
        std::vector<int32_t> cu32(cu.begin(), cu.end()), index((size_t)local), source((size_t)total);
        for (int r = 0; r < cp; r++) {
            CHECK_OK(pp_cp_thd_indices(cu32.data(), nseq, cp, r, index.data(), E));
            dmap.up(index.data());
            a.poison(); b.poison();
            CHECK_OK(pp_cuda_cp_split_thd(dsrc.ptr, a.ptr, (const int *)dcu.ptr, nseq, total, rb, cp, r, NULL, E));
            CHECK_OK(pp_cuda_gather_rows(dsrc.ptr, b.ptr, dmap.ptr, 4, local, rb, NULL, E));
            sync_check();
            std::vector<unsigned char> x(a.bytes), y(b.bytes);
            a.down(x.data()); b.down(y.data());
            CHECK(first_diff(x.data(), y.data(), x.size()) < 0, "thd split cp=%d r=%d differs from pp_cp_thd_indices", cp, r);
        }
        /* merge = gather by pp_cp_thd_gather's source map over the all-gathered shards */
        CHECK_OK(pp_cp_thd_gather(cu32.data(), nseq, cp, source.data(), E));
        dbuf dsource(total * 4);
        dsource.up(source.data());
        full1.poison(); full2.poison();
        CHECK_OK(pp_cuda_cp_merge_thd(dsrc.ptr, full1.ptr, (const int *)dcu.ptr, nseq, total, rb, cp, NULL, E));
        CHECK_OK(pp_cuda_gather_rows(dsrc.ptr, full2.ptr, dsource.ptr, 4, total, rb, NULL, E));
        sync_check();
        std::vector<unsigned char> x(full1.bytes), y(full2.bytes);
        full1.down(x.data()); full2.down(y.data());
        CHECK(first_diff(x.data(), y.data(), x.size()) < 0, "thd merge cp=%d differs from pp_cp_thd_gather", cp);

        /* BSHD, one row of seq tokens */
        int32_t seq = 2 * cp * rndi(1, 20);
        std::vector<int32_t> bi((size_t)(seq / cp)), bs((size_t)seq);
        std::vector<unsigned char> hb((size_t)(seq * rb));
        fill_random(hb.data(), hb.size());
        dbuf bsrc(hb.size()), ba(seq / cp * rb), bb(seq / cp * rb), bmap(seq * 4), bf1(hb.size()), bf2(hb.size());
        bsrc.up(hb.data());
        for (int r = 0; r < cp; r++) {
            CHECK_OK(pp_cp_bshd_indices(seq, cp, r, bi.data(), E));
            bmap.up(bi.data());
            ba.poison(); bb.poison();
            CHECK_OK(pp_cuda_cp_split(bsrc.ptr, ba.ptr, 1, seq, rb, cp, r, NULL, E));
            CHECK_OK(pp_cuda_gather_rows(bsrc.ptr, bb.ptr, bmap.ptr, 4, seq / cp, rb, NULL, E));
            sync_check();
            std::vector<unsigned char> p1(ba.bytes), p2(bb.bytes);
            ba.down(p1.data()); bb.down(p2.data());
            CHECK(first_diff(p1.data(), p2.data(), p1.size()) < 0, "bshd split cp=%d r=%d differs from pp_cp_bshd_indices", cp, r);
        }
        CHECK_OK(pp_cp_bshd_gather(seq, cp, bs.data(), E));
        bmap.up(bs.data());
        bf1.poison(); bf2.poison();
        CHECK_OK(pp_cuda_cp_merge(bsrc.ptr, bf1.ptr, 1, seq, rb, cp, NULL, E));
        CHECK_OK(pp_cuda_gather_rows(bsrc.ptr, bf2.ptr, bmap.ptr, 4, seq, rb, NULL, E));
        sync_check();
        std::vector<unsigned char> p1(bf1.bytes), p2(bf2.bytes);
        bf1.down(p1.data()); bf2.down(p2.data());
        CHECK(first_diff(p1.data(), p2.data(), p1.size()) < 0, "bshd merge cp=%d differs from pp_cp_bshd_gather", cp);
    }
}

/* A pack plan with cp = 2, a model whose MoE layers are every other layer after 3 dense ones and
 * a full-layout recording (one slot per decoder layer), so a stage's slots are not contiguous:
 * pp_cuda_replay_gather with the map's payload and rows must give pp_replay_gather's bytes. */
static void replay_matches_pp_replay_gather_on_a_plan(void)
{
    int n = g_quick ? 30 : 120;
    std::vector<int32_t> len((size_t)n);
    for (auto &l : len) l = rndi(1, 900);
    pp_pack_plan_config pc;
    memset(&pc, 0, sizeof pc);
    pc.pack.capacity = 4096;
    pc.dp = 1; pc.pp = 2; pc.cp = 2;
    pp_pack_plan *plan = NULL;
    CHECK_OK(pp_pack_plan_build(len.data(), n, &pc, &plan, E));
    if (!plan) return;
    long long recorded_rows = 0;
    for (auto l : len) recorded_rows += l;
    const int NL = 27, topk = 8;
    std::vector<int32_t> rec32((size_t)(recorded_rows * NL * topk));
    for (auto &v : rec32) v = (int32_t)(rnd() % 256);
    std::vector<uint8_t> rec8(rec32.begin(), rec32.end());
    dbuf d32(rec32.size() * 4), d8(rec8.size());
    d32.up(rec32.data());
    d8.up(rec8.data());
    int stages[][2] = { {0, 13}, {13, 27}, {4, 5}, {0, 3} };       /* uneven split; one MoE layer; all dense */
    for (int b = 0; b < plan->num_bins && b < 3; b++)
        for (auto &st : stages)
            for (int r = 0; r < 2; r++) {
                pp_replay_config rc;
                memset(&rc, 0, sizeof rc);
                rc.model.num_layers = NL; rc.model.first_k_dense = 3; rc.model.moe_freq = 2;
                rc.model.payload_layers = NL;
                rc.first_layer = st[0]; rc.last_layer = st[1]; rc.cp_rank = r;
                pp_replay_map *m = NULL;
                CHECK_OK(pp_replay_map_build(plan, b, &rc, &m, E));
                if (!m) continue;
                long long T = m->num_tokens, lc = m->num_layers;
                std::vector<int32_t> want((size_t)(lc * T * topk + 1));
                CHECK_OK(pp_replay_gather(m, rec32.data(), recorded_rows, NL, topk, want.data(), E));
                dbuf drows((size_t)T * 8), out32((size_t)(lc * T * topk * 4)), out64((size_t)(lc * T * topk * 8));
                if (T) drows.up(m->rows);
                for (int major = 0; major < 2; major++) {
                    pp_cuda_replay d;
                    memset(&d, 0, sizeof d);
                    d.recorded = d32.ptr; d.recorded_bytes = 4; d.moe_layers = NL; d.topk = topk;
                    d.slots = m->payload; d.layer_count = (int)lc; d.rows = drows.ptr; d.index_bytes = 8;
                    d.tokens = T; d.dst = out32.ptr; d.dst_bytes = 4; d.token_major = major;
                    out32.poison();
                    CHECK_OK(pp_cuda_replay_gather(&d, NULL, E));
                    d.recorded = d8.ptr; d.recorded_bytes = 1; d.dst = out64.ptr; d.dst_bytes = 8;
                    out64.poison();
                    CHECK_OK(pp_cuda_replay_gather(&d, NULL, E));
                    sync_check();
                    std::vector<int32_t> g32((size_t)(lc * T * topk + 1));
                    std::vector<int64_t> g64((size_t)(lc * T * topk + 1));
                    out32.down(g32.data());
                    out64.down(g64.data());
                    int bad = 0;
                    for (long long l = 0; l < lc; l++)
                        for (long long t = 0; t < T; t++)
                            for (int k = 0; k < topk; k++) {
                                long long o = major ? (t * lc + l) * topk + k : (l * T + t) * topk + k;
                                int32_t w = want[(size_t)((l * T + t) * topk + k)];
                                if (g32[o] != w || g64[o] != (int64_t)w) bad++;
                            }
                    CHECK(bad == 0 && out32.tail_intact() && out64.tail_intact(),
                          "bin %d layers [%d, %d) cp rank %d major %d: %d of %lld differ from pp_replay_gather",
                          b, st[0], st[1], r, major, bad, lc * T * topk);
                }
                pp_replay_map_free(m);
            }
    pp_pack_plan_free(plan);
}

/* --- multi-tensor L2 norm --------------------------------------------------------------------- */

static float bf16_to_f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }

struct host_tensor {
    pp_cuda_dtype dtype;
    long long n;
    size_t off;              /* elements of misalignment */
    std::vector<unsigned char> bytes;
    dbuf *dev;
};

static size_t esize(pp_cuda_dtype d) { return d == PP_CUDA_F32 ? 4 : 2; }

static double elem(const host_tensor &t, long long i)
{
    if (t.dtype == PP_CUDA_F32) { float f; memcpy(&f, t.bytes.data() + i * 4, 4); return f; }
    uint16_t h; memcpy(&h, t.bytes.data() + i * 2, 2);
    if (t.dtype == PP_CUDA_BF16) return bf16_to_f(h);
    __half_raw raw; raw.x = h; return __half2float(__half(raw));
}

static void put_value(host_tensor &t, long long i, float v)
{
    if (t.dtype == PP_CUDA_F32) memcpy(t.bytes.data() + i * 4, &v, 4);
    else if (t.dtype == PP_CUDA_BF16) { __nv_bfloat16_raw b = __nv_bfloat16_raw(__float2bfloat16_rn(v)); memcpy(t.bytes.data() + i * 2, &b.x, 2); }
    else { __half_raw h = __half_raw(__float2half_rn(v)); memcpy(t.bytes.data() + i * 2, &h.x, 2); }
}

static std::vector<host_tensor> make_tensors(int count, long long max_n)
{
    std::vector<host_tensor> ts((size_t)count);
    for (auto &t : ts) {
        int d = rndi(0, 2);
        t.dtype = (pp_cuda_dtype)d;
        int kind = rndi(0, 9);
        t.n = kind == 0 ? 0 : kind < 4 ? rndi(1, 40) : (long long)(rnd() % (uint64_t)max_n) + 1;
        t.off = rnd() % 3 == 0 ? (size_t)rndi(1, 7) : 0;
        t.bytes.resize((size_t)t.n * esize(t.dtype));
        for (long long i = 0; i < t.n; i++) put_value(t, i, (float)((double)(rnd() % 20001) / 10000.0 - 1.0) * 3.f);
        t.dev = new dbuf(t.bytes.size(), t.off * esize(t.dtype));
        t.dev->poison();                 /* so tail_intact() can tell a write past the end */
        t.dev->up(t.bytes.data());
    }
    return ts;
}

static void free_tensors(std::vector<host_tensor> &ts) { for (auto &t : ts) delete t.dev; }

static std::vector<pp_cuda_tensor> descs(std::vector<host_tensor> &ts)
{
    std::vector<pp_cuda_tensor> d;
    for (auto &t : ts) { pp_cuda_tensor x = { t.dev->ptr, t.n, t.dtype }; d.push_back(x); }
    return d;
}

static void l2norm_sums_squares_of_mixed_tensors_in_one_launch(void)
{
    int iters = g_quick ? 2 : 8;
    for (int it = 0; it < iters; it++) {
        int count = it == 0 ? 1 : rndi(1, g_quick ? 30 : 300);
        std::vector<host_tensor> ts = make_tensors(count, it % 2 ? 70000 : 3000);
        double want = 0;
        for (auto &t : ts) for (long long i = 0; i < t.n; i++) { double x = elem(t, i); want += x * x; }
        std::vector<pp_cuda_tensor> d = descs(ts);
        pp_cuda_l2norm *plan = NULL;
        CHECK_OK(pp_cuda_l2norm_create(d.data(), count, &plan, E));
        dbuf out(8);
        out.poison();
        float *sumsq = (float *)out.ptr, *scale = (float *)out.ptr + 1;
        float max_norm = (float)(sqrt(want) * (it % 2 ? 0.5 : 2.0)) + 1e-3f;
        CHECK_OK(pp_cuda_l2norm_sumsq(plan, sumsq, max_norm, scale, NULL, E));
        sync_check();
        float got[2], again[2];
        out.down(got);
        CHECK(fabs(got[0] - want) <= 2e-6 * want + 1e-30, "sumsq %.9g, expected %.9g (rel %.3g), %d tensors",
              got[0], want, fabs(got[0] - want) / want, count);
        float norm = sqrtf((float)want), s = max_norm / (norm + 1e-6f);
        float want_scale = s < 1.f ? s : 1.f;
        CHECK(fabsf(got[1] - want_scale) <= 1e-6f * want_scale, "scale %.9g, expected %.9g", got[1], want_scale);
        /* same bits on a second run (fixed reduction order; the ticket was reset) */
        CHECK_OK(pp_cuda_l2norm_sumsq(plan, sumsq, max_norm, scale, NULL, E));
        sync_check();
        out.down(again);
        CHECK(memcmp(got, again, 8) == 0, "second run differs: %.9g vs %.9g", got[0], again[0]);
        CHECK(pp_cuda_l2norm_bytes(plan) >= 0, "bytes");
        pp_cuda_l2norm_free(plan);
        free_tensors(ts);
    }
}

static void l2norm_of_no_tensors_is_zero(void)
{
    pp_cuda_l2norm *plan = NULL;
    CHECK_OK(pp_cuda_l2norm_create(NULL, 0, &plan, E));
    dbuf out(8);
    out.poison();
    CHECK_OK(pp_cuda_l2norm_sumsq(plan, (float *)out.ptr, 1.f, (float *)out.ptr + 1, NULL, E));
    sync_check();
    float got[2];
    out.down(got);
    CHECK(got[0] == 0.f && got[1] == 1.f, "sumsq %g scale %g, expected 0 and 1", got[0], got[1]);
    pp_cuda_l2norm_free(plan);
}

static void clip_scale_after_a_reduce_and_scale_in_place(void)
{
    int iters = g_quick ? 2 : 6;
    for (int it = 0; it < iters; it++) {
        std::vector<host_tensor> ts = make_tensors(rndi(1, 60), 20000);
        std::vector<pp_cuda_tensor> d = descs(ts);
        pp_cuda_l2norm *plan = NULL;
        CHECK_OK(pp_cuda_l2norm_create(d.data(), (int)d.size(), &plan, E));
        float sumsq = 1000.f + (float)(rnd() % 1000), max_norm = it % 2 ? 1.f : 1e6f;
        dbuf dv(8);
        dv.up(&sumsq);
        CHECK_OK(pp_cuda_clip_scale((const float *)dv.ptr, max_norm, (float *)dv.ptr + 1, NULL, E));
        sync_check();
        float v[2];
        dv.down(v);
        float s = max_norm / (sqrtf(sumsq) + 1e-6f);
        s = s < 1.f ? s : 1.f;
        CHECK(fabsf(v[1] - s) <= 1e-6f * s, "clip scale %.9g, expected %.9g", v[1], s);
        CHECK_OK(pp_cuda_l2norm_scale(plan, (const float *)dv.ptr + 1, NULL, E));
        sync_check();
        int bad = 0;
        for (auto &t : ts) {
            host_tensor want = t;
            want.dev = NULL;
            if (v[1] != 1.f) for (long long i = 0; i < t.n; i++) put_value(want, i, (float)elem(t, i) * v[1]);
            std::vector<unsigned char> got(t.bytes.size());
            t.dev->down(got.data());
            if (first_diff(got.data(), want.bytes.data(), got.size()) >= 0) bad++;
            if (!t.dev->tail_intact()) bad++;
        }
        CHECK(bad == 0, "%d tensors scaled wrongly (scale %.9g)", bad, v[1]);
        pp_cuda_l2norm_free(plan);
        free_tensors(ts);
    }
}

static void clip_scale_is_nan_for_a_nan_norm_and_zero_for_an_infinite_one(void)
{
    float in[4] = { NAN, INFINITY, 0.f, 0.f };
    dbuf d(16);
    d.up(in);
    CHECK_OK(pp_cuda_clip_scale((const float *)d.ptr, 1.f, (float *)d.ptr + 2, NULL, E));
    CHECK_OK(pp_cuda_clip_scale((const float *)d.ptr + 1, 1.f, (float *)d.ptr + 3, NULL, E));
    sync_check();
    float out[4];
    d.down(out);
    CHECK(isnan(out[2]), "NaN norm gave scale %g", out[2]);
    CHECK(out[3] == 0.f, "infinite norm gave scale %g", out[3]);
}

/* --- errors ----------------------------------------------------------------------------------- */

static void bad_arguments_fail_with_a_message_naming_them(void)
{
    pp_error e;
    dbuf a(64), b(64);
    struct { pp_status got; const char *needle; } cases[] = {
        { pp_cuda_cp_split(a.ptr, b.ptr, 1, 8, 4, 2, 2, NULL, &e), "cp_rank=2" },
        { pp_cuda_cp_split(a.ptr, b.ptr, 1, 6, 4, 2, 0, NULL, &e), "seq=6" },
        { pp_cuda_cp_split(a.ptr, b.ptr, 1, 8, 4, 0, 0, NULL, &e), "cp=0" },
        { pp_cuda_cp_merge(NULL, b.ptr, 1, 8, 4, 2, NULL, &e), "src=NULL" },
        { pp_cuda_cp_split_thd(a.ptr, b.ptr, NULL, 1, 8, 4, 2, 0, NULL, &e), "cu_seqlens_padded=NULL" },
        { pp_cuda_cp_split_thd(a.ptr, b.ptr, (const int *)a.ptr, 1, 10, 4, 2, 0, NULL, &e), "total=10" },
        { pp_cuda_gather_rows(a.ptr, b.ptr, a.ptr, 3, 4, 4, NULL, &e), "index_bytes=3" },
        { pp_cuda_scatter_rows(a.ptr, b.ptr, NULL, 4, 4, 4, NULL, &e), "map=NULL" },
        { pp_cuda_copy_rows(a.ptr, b.ptr, -1, 4, NULL, &e), "rows=-1" },
        { pp_cuda_replay_gather(NULL, NULL, &e), "replay=NULL" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(cases[i].got == PP_EINVAL, "case %zu returned %s", i, pp_status_name(cases[i].got));
    }
    /* messages: re-run each separately so e holds its own message */
    pp_cuda_cp_split(a.ptr, b.ptr, 1, 8, 4, 2, 2, NULL, &e);
    CHECK(strstr(e.message, "cp_rank=2") && e.status == PP_EINVAL, "message: %s", e.message);
    pp_cuda_cp_split(a.ptr, b.ptr, 1, 6, 4, 2, 0, NULL, &e);
    CHECK(strstr(e.message, "seq=6") != NULL, "message: %s", e.message);
    pp_cuda_gather_rows(a.ptr, b.ptr, a.ptr, 3, 4, 4, NULL, &e);
    CHECK(strstr(e.message, "index_bytes=3") != NULL, "message: %s", e.message);
    pp_cuda_cp_split_thd(a.ptr, b.ptr, (const int *)a.ptr, 1, 10, 4, 2, 0, NULL, &e);
    CHECK(strstr(e.message, "total=10") != NULL, "message: %s", e.message);

    pp_cuda_replay rp;
    memset(&rp, 0, sizeof rp);
    rp.recorded = a.ptr; rp.moe_layers = 4; rp.topk = 2; rp.layer_begin = 3; rp.layer_count = 2;
    rp.rows = a.ptr; rp.index_bytes = 4; rp.tokens = 1; rp.dst = b.ptr;
    CHECK(pp_cuda_replay_gather(&rp, NULL, &e) == PP_EINVAL && strstr(e.message, "layer_begin=3, layer_count=2"),
          "replay range: %s", e.message);
    int32_t bad_slots[2] = { 1, 4 };
    rp.slots = bad_slots;
    CHECK(pp_cuda_replay_gather(&rp, NULL, &e) == PP_EINVAL && strstr(e.message, "slots[1]=4"), "replay slots: %s", e.message);
    pp_cuda_tensor t = { a.ptr, 4, (pp_cuda_dtype)7 };
    pp_cuda_l2norm *plan = NULL;
    CHECK(pp_cuda_l2norm_create(&t, 1, &plan, &e) == PP_EINVAL && strstr(e.message, "dtype=7") && !plan,
          "bad dtype: %s", e.message);
    pp_cuda_tensor t2 = { a.ptr + 1, 4, PP_CUDA_F32 };
    CHECK(pp_cuda_l2norm_create(&t2, 1, &plan, &e) == PP_EINVAL && strstr(e.message, "aligned"), "misaligned: %s", e.message);
    pp_cuda_pack_field f = { a.ptr, b.ptr, 3, 0 };
    CHECK(pp_cuda_pack((const int64_t *)a.ptr, NULL, 1, 4, &f, 1, NULL, 0, NULL, &e) == PP_EINVAL &&
          strstr(e.message, "elem_bytes=3"), "pack: %s", e.message);
    CHECK(pp_cuda_l2norm_sumsq(NULL, (float *)a.ptr, 0, NULL, NULL, NULL) == PP_EINVAL, "NULL err must be allowed");
    /* zero rows is a no-op, never a launch with an empty grid */
    CHECK(pp_cuda_cp_split(NULL, NULL, 0, 8, 4, 2, 1, NULL, &e) == PP_OK, "empty split: %s", e.message);
    sync_check();
}

/* --- main ------------------------------------------------------------------------------------- */

struct test_case { const char *name; void (*fn)(void); };
static const test_case tests[] = {
    { "cp_split_bshd_hand_vector_cp2", cp_split_bshd_hand_vector_cp2 },
    { "cp_split_bshd_keeps_chunks_r_and_2cp_minus_1_minus_r", cp_split_bshd_keeps_chunks_r_and_2cp_minus_1_minus_r },
    { "cp_split_bshd_handles_misaligned_pointers", cp_split_bshd_handles_misaligned_pointers },
    { "cp_split_thd_hand_vector_5_and_11_tokens", cp_split_thd_hand_vector_5_and_11_tokens },
    { "cp_split_thd_matches_te_partitioned_indices", cp_split_thd_matches_te_partitioned_indices },
    { "gather_and_scatter_rows_follow_the_map_and_pad_with_zeros", gather_and_scatter_rows_follow_the_map_and_pad_with_zeros },
    { "copy_rows_is_a_plain_copy", copy_rows_is_a_plain_copy },
    { "pack_fills_fields_positions_and_padding", pack_fills_fields_positions_and_padding },
    { "pack_runs_every_bin_of_a_pp_pack_plan", pack_runs_every_bin_of_a_pp_pack_plan },
    { "replay_gathers_this_stages_layers_in_local_token_order", replay_gathers_this_stages_layers_in_local_token_order },
    { "replay_vector_and_wide_load_paths_match_the_scalar_reference", replay_vector_and_wide_load_paths_match_the_scalar_reference },
    { "replay_paths_at_their_edges_match_the_reference", replay_paths_at_their_edges_match_the_reference },
    { "replay_follows_pack_then_cp_split_maps", replay_follows_pack_then_cp_split_maps },
    { "cp_kernels_agree_with_the_headers_index_maps", cp_kernels_agree_with_the_headers_index_maps },
    { "replay_matches_pp_replay_gather_on_a_plan", replay_matches_pp_replay_gather_on_a_plan },
    { "l2norm_sums_squares_of_mixed_tensors_in_one_launch", l2norm_sums_squares_of_mixed_tensors_in_one_launch },
    { "l2norm_of_no_tensors_is_zero", l2norm_of_no_tensors_is_zero },
    { "clip_scale_after_a_reduce_and_scale_in_place", clip_scale_after_a_reduce_and_scale_in_place },
    { "clip_scale_is_nan_for_a_nan_norm_and_zero_for_an_infinite_one", clip_scale_is_nan_for_a_nan_norm_and_zero_for_an_infinite_one },
    { "bad_arguments_fail_with_a_message_naming_them", bad_arguments_fail_with_a_message_naming_them },
};

int main(int argc, char **argv)
{
    const char *filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) g_quick = 1;
        else filter = argv[i];
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("no CUDA device\n0 passed, 1 failed\n");
        return 1;
    }
    int passed = 0, failed = 0;
    for (const test_case &t : tests) {
        if (filter && !strstr(t.name, filter)) continue;
        g_test = t.name;
        g_test_failures = 0;
        t.fn();
        if (g_test_failures) { failed++; printf("FAIL %s (%d checks)\n", t.name, g_test_failures); }
        else { passed++; printf("ok   %s\n", t.name); }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
