/* Copyright (c) 2026 the pipepar authors. SPDX-License-Identifier: MIT */
/* pipepar_cuda.cu — the GPU companion of pipepar.h: kernels that move the bytes the header's
 * host logic decides (see the >>cuda section of pipepar.h for the API and its contracts).
 *
 *     nvcc -O3 -std=c++17 -arch=sm_90 -c pipepar_cuda.cu      (the Makefile: build/pipepar_cuda.o)
 *
 * Link the object next to the one translation unit that defines PIPEPAR_IMPLEMENTATION; this
 * file includes pipepar.h for the declarations only and calls none of its functions.
 *
 * CONTENTS (search for the marker)
 *     >>cuda-common   errors, launch checks, vector widths
 *     >>cuda-rows     the row-move engine every data-path kernel is an instance of
 *     >>cuda-cp       context-parallel split / unsplit / merge for BSHD and THD layouts
 *     >>cuda-gather   index-map gather and scatter of rows (unpack, THD maps, anything)
 *     >>cuda-pack     packing variable-length sequences into one THD buffer
 *     >>cuda-replay   router-replay gather of recorded expert indices
 *     >>cuda-l2norm   multi-tensor sum of squares, clip scale, scale in place
 *
 * Design. Every copy kernel here is one pass: each output byte is written once, each input
 * byte read once, with 16-byte loads and stores where the row size and the pointers allow it.
 * The work is cut into tiles of rows; a tile first works out, once per row, where the row comes
 * from and goes to (a formula or an index map, kept in shared memory), then all threads of the
 * block stream the tile's bytes with several loads in flight per thread. No atomics, no second
 * pass, and no host synchronisation: every entry point only enqueues work on the given stream.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pipepar.h"

/* ============================================================================================
 * >>cuda-common
 * ============================================================================================ */

/* errors are reported the header's way (pp_error_set, from the implementation object) */
#define pp__cuda_fail pp_error_set

static pp_status pp__cuda_ok(pp_error *err)
{
    if (err) { err->status = PP_OK; err->message[0] = '\0'; }
    return PP_OK;
}

/* A CUDA runtime failure: PP_ENOMEM for allocations, otherwise PP_ECUDA. */
static pp_status pp__cuda_error(pp_error *err, const char *what, cudaError_t e)
{
    pp_status st = e == cudaErrorMemoryAllocation ? PP_ENOMEM : PP_ECUDA;
    return pp__cuda_fail(err, st, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e),
                         cudaGetErrorString(e));
}

/* After a launch: a bad configuration or an earlier sticky error shows up here. */
static pp_status pp__cuda_launched(pp_error *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return pp__cuda_error(err, what, e);
    return pp__cuda_ok(err);
}

static cudaStream_t pp__stream(void *stream) { return (cudaStream_t)stream; }

/* The widest access (16, 8, 4, 2 or 1 bytes) that divides every byte quantity given. */
static int pp__vec_width(const uint64_t *v, int n)
{
    uint64_t bits = 16;
    for (int i = 0; i < n; i++) bits |= v[i];
    if (bits & 1) return 1;
    if (bits & 2) return 2;
    if (bits & 4) return 4;
    if (bits & 8) return 8;
    return 16;
}

template <int W> struct pp__vec;
template <> struct pp__vec<16> { typedef uint4 t; };
template <> struct pp__vec<8>  { typedef uint2 t; };
template <> struct pp__vec<4>  { typedef unsigned int t; };
template <> struct pp__vec<2>  { typedef unsigned short t; };
template <> struct pp__vec<1>  { typedef unsigned char t; };

template <typename T> __device__ __forceinline__ T pp__zero();
template <> __device__ __forceinline__ uint4 pp__zero<uint4>() { return make_uint4(0, 0, 0, 0); }
template <> __device__ __forceinline__ uint2 pp__zero<uint2>() { return make_uint2(0, 0); }
template <> __device__ __forceinline__ unsigned int pp__zero<unsigned int>() { return 0u; }
template <> __device__ __forceinline__ unsigned short pp__zero<unsigned short>() { return 0; }
template <> __device__ __forceinline__ unsigned char pp__zero<unsigned char>() { return 0; }

static int pp__device_sms(void)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 132;
    return sms > 0 ? sms : 132;
}

/* ============================================================================================
 * >>cuda-rows
 * The engine. A "row" is row_bytes contiguous bytes. For row i of the job, a map functor says
 * where it comes from and where it goes (byte offsets from the src and dst bases):
 *     src < 0  -> the row is written with zeros (padding)
 *     dst < 0  -> the row is skipped (not this rank's, or a dropped token)
 * Tiling: a block takes up to PP__ROWS_TILE_ROWS rows of at most PP__ROWS_TILE_VECS vectors in
 * total, or, for a row wider than that, one segment of one row. Threads first fill the tile's
 * row table (one map call per row, not per byte), then stream the vectors, PP__ROWS_UNROLL
 * independent loads in flight before the first store.
 * ============================================================================================ */

#define PP__ROWS_THREADS 256
#define PP__ROWS_UNROLL 4
#define PP__ROWS_TILE_VECS 4096     /* 64 KiB of 16-byte vectors per block */
#define PP__ROWS_TILE_ROWS 1024

struct pp__rowmove { long long src, dst; };

template <int W, class Map>
__global__ void __launch_bounds__(PP__ROWS_THREADS)
pp__rows_kernel(char *__restrict__ dst, const char *__restrict__ src, long long nrows,
                unsigned row_vecs, unsigned tile_rows, unsigned segs, Map map)
{
    typedef typename pp__vec<W>::t V;
    __shared__ pp__rowmove table[PP__ROWS_TILE_ROWS];
    long long row0;
    unsigned nr, seg_begin, seg_vecs;
    if (segs > 1) {                          /* one segment of one wide row */
        row0 = (long long)(blockIdx.x / segs);
        unsigned seg = blockIdx.x % segs;
        seg_begin = seg * PP__ROWS_TILE_VECS;
        seg_vecs = min(row_vecs - seg_begin, (unsigned)PP__ROWS_TILE_VECS);
        nr = 1;
    } else {
        row0 = (long long)blockIdx.x * tile_rows;
        long long left = nrows - row0;
        nr = left < (long long)tile_rows ? (unsigned)left : tile_rows;
        seg_begin = 0;
        seg_vecs = row_vecs;
    }
    for (unsigned t = threadIdx.x; t < nr; t += PP__ROWS_THREADS) table[t] = map(row0 + t);
    __syncthreads();

    const unsigned total = nr * seg_vecs;
    for (unsigned e0 = threadIdx.x; e0 < total; e0 += PP__ROWS_THREADS * PP__ROWS_UNROLL) {
        V v[PP__ROWS_UNROLL];
        long long d[PP__ROWS_UNROLL];
#pragma unroll
        for (int k = 0; k < PP__ROWS_UNROLL; k++) {
            unsigned e = e0 + k * PP__ROWS_THREADS;
            d[k] = -1;
            if (e < total) {
                unsigned r = nr == 1 ? 0u : e / seg_vecs;
                unsigned c = e - r * seg_vecs + seg_begin;
                pp__rowmove m = table[r];
                if (m.dst >= 0) {
                    d[k] = m.dst + (long long)c * W;
                    v[k] = m.src >= 0 ? *(const V *)(src + m.src + (long long)c * W) : pp__zero<V>();
                }
            }
        }
#pragma unroll
        for (int k = 0; k < PP__ROWS_UNROLL; k++)
            if (d[k] >= 0) *(V *)(dst + d[k]) = v[k];
    }
}

/* Launches the engine for nrows rows of row_bytes, at the widest vector width that divides the
 * row size, the two base pointers and every stride/offset the map uses (align_extra). */
template <class Map>
static pp_status pp__rows_launch(void *dst, const void *src, long long nrows, long long row_bytes,
                                 const uint64_t *align_extra, int n_extra, Map map,
                                 cudaStream_t stream, const char *what, pp_error *err)
{
    if (nrows == 0 || row_bytes == 0) return pp__cuda_ok(err);
    uint64_t a[8];
    int n = 0;
    a[n++] = (uint64_t)row_bytes;
    a[n++] = (uint64_t)(uintptr_t)dst;
    a[n++] = (uint64_t)(uintptr_t)src;
    for (int i = 0; i < n_extra && n < 8; i++) a[n++] = align_extra[i];
    int w = pp__vec_width(a, n);
    long long vecs = row_bytes / w;
    if (vecs > 0xFFFFFFFFll / 2)
        return pp__cuda_fail(err, PP_EINVAL, "%s: row_bytes=%lld: a row may be at most %lld bytes",
                             what, row_bytes, (0xFFFFFFFFll / 2) * w);
    unsigned row_vecs = (unsigned)vecs, tile_rows = 1, segs = 1;
    long long blocks;
    if (row_vecs > PP__ROWS_TILE_VECS) {
        segs = (row_vecs + PP__ROWS_TILE_VECS - 1) / PP__ROWS_TILE_VECS;
        blocks = nrows * segs;
    } else {
        tile_rows = PP__ROWS_TILE_VECS / row_vecs;
        if (tile_rows > PP__ROWS_TILE_ROWS) tile_rows = PP__ROWS_TILE_ROWS;
        blocks = (nrows + tile_rows - 1) / tile_rows;
    }
    if (blocks > 0x7FFFFFFFll)
        return pp__cuda_fail(err, PP_EINVAL, "%s: %lld rows of %lld bytes need %lld blocks, more than "
                             "one launch takes", what, nrows, row_bytes, blocks);
    dim3 grid((unsigned)blocks), block(PP__ROWS_THREADS);
    char *d = (char *)dst;
    const char *s = (const char *)src;
    switch (w) {
    case 16: pp__rows_kernel<16, Map><<<grid, block, 0, stream>>>(d, s, nrows, row_vecs, tile_rows, segs, map); break;
    case 8:  pp__rows_kernel<8, Map><<<grid, block, 0, stream>>>(d, s, nrows, row_vecs, tile_rows, segs, map); break;
    case 4:  pp__rows_kernel<4, Map><<<grid, block, 0, stream>>>(d, s, nrows, row_vecs, tile_rows, segs, map); break;
    case 2:  pp__rows_kernel<2, Map><<<grid, block, 0, stream>>>(d, s, nrows, row_vecs, tile_rows, segs, map); break;
    default: pp__rows_kernel<1, Map><<<grid, block, 0, stream>>>(d, s, nrows, row_vecs, tile_rows, segs, map); break;
    }
    return pp__cuda_launched(err, what);
}

/* Plain contiguous copy through the engine: used by the bench as the engine's own baseline. */
struct pp__map_identity {
    long long rb;
    __device__ pp__rowmove operator()(long long i) const { pp__rowmove m = { i * rb, i * rb }; return m; }
};

/* ============================================================================================
 * >>cuda-cp
 * The load-balanced context-parallel split: a sequence of length L (a multiple of 2*cp) is cut
 * into 2*cp chunks of c = L/(2*cp) tokens; rank r keeps chunk r then chunk 2*cp-1-r, so its local
 * sequence is L/cp tokens. (Megatron-LM's get_batch_on_this_cp_rank; TransformerEngine's
 * thd_get_partitioned_indices per sequence of cu_seqlens_padded.)
 *     local j < c  :  global r*c + j              local j >= c :  global (2cp-1-r)*c + (j - c)
 *     global s     :  chunk k = s / c, owner k < cp ? k : 2cp-1-k,
 *                     local (k < cp ? s % c : c + s % c)
 * ============================================================================================ */

__device__ __forceinline__ long long pp__cp_local_to_global(long long j, long long c, int cp, int r)
{
    return j < c ? (long long)r * c + j : (long long)(2 * cp - 1 - r) * c + (j - c);
}

__device__ __forceinline__ void pp__cp_global_to_local(long long s, long long c, int cp,
                                                       int *rank, long long *j)
{
    long long k = s / c, w = s - k * c;
    if (k < cp) { *rank = (int)k; *j = w; }
    else { *rank = (int)(2 * cp - 1 - k); *j = c + w; }
}

/* BSHD-like: [outer, seq, row] -> [outer, seq/cp, row] (split); unsplit writes the other way. */
struct pp__map_cp_split_bshd {
    long long seq, local, c, rb;
    int cp, r, inverse;
    __device__ pp__rowmove operator()(long long i) const
    {
        long long o = i / local, j = i - o * local;
        long long g = o * seq + pp__cp_local_to_global(j, c, cp, r);
        pp__rowmove m;
        if (inverse) { m.src = i * rb; m.dst = g * rb; }
        else { m.src = g * rb; m.dst = i * rb; }
        return m;
    }
};

/* [cp, outer, seq/cp, row] (every rank's shard, stacked as an all-gather leaves them)
 * -> [outer, seq, row] in global order; with inverse, the other way (full -> all shards). */
struct pp__map_cp_merge_bshd {
    long long seq, local, outer, c, rb;
    int cp, inverse;
    __device__ pp__rowmove operator()(long long i) const
    {
        long long o = i / seq, s = i - o * seq, j;
        int rank;
        pp__cp_global_to_local(s, c, cp, &rank, &j);
        long long l = ((long long)rank * outer + o) * local + j;
        pp__rowmove m;
        if (inverse) { m.src = i * rb; m.dst = l * rb; }
        else { m.src = l * rb; m.dst = i * rb; }
        return m;
    }
};

/* Index k of the sequence holding position p: cu[k] <= p < cu[k+1] (cu ascending, cu[0] = 0),
 * positions scaled by 1/div. Positions past the end land in the last sequence. */
__device__ __forceinline__ int pp__seq_of(const int *__restrict__ cu, int nseq, long long p, int div)
{
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if ((long long)(__ldg(cu + mid) / div) <= p) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* THD split/unsplit: packed [total, row] with sequences at cu_seqlens_padded -> [total/cp, row]:
 * each sequence contributes its two chunks, in sequence order, at offset cu[k]/cp. */
struct pp__map_cp_split_thd {
    const int *cu;
    long long rb;
    int nseq, cp, r, inverse;
    __device__ pp__rowmove operator()(long long i) const
    {
        int k = pp__seq_of(cu, nseq, i, cp);
        long long b = __ldg(cu + k), len = __ldg(cu + k + 1) - b;
        long long c = len / (2 * cp);
        long long g = b + pp__cp_local_to_global(i - b / cp, c, cp, r);
        pp__rowmove m;
        if (inverse) { m.src = i * rb; m.dst = g * rb; }
        else { m.src = g * rb; m.dst = i * rb; }
        return m;
    }
};

/* THD merge: [cp, total/cp, row] (all-gathered shards) -> [total, row]; inverse: full -> shards. */
struct pp__map_cp_merge_thd {
    const int *cu;
    long long rb, local_total;
    int nseq, cp, inverse;
    __device__ pp__rowmove operator()(long long i) const
    {
        int k = pp__seq_of(cu, nseq, i, 1);
        long long b = __ldg(cu + k), len = __ldg(cu + k + 1) - b;
        long long c = len / (2 * cp), j;
        int rank;
        pp__cp_global_to_local(i - b, c, cp, &rank, &j);
        long long l = (long long)rank * local_total + b / cp + j;
        pp__rowmove m;
        if (inverse) { m.src = i * rb; m.dst = l * rb; }
        else { m.src = l * rb; m.dst = i * rb; }
        return m;
    }
};

static pp_status pp__check_cp(const char *fn, int cp, int cp_rank, int need_rank, pp_error *err)
{
    if (cp < 1) return pp__cuda_fail(err, PP_EINVAL, "%s: cp=%d: must be at least 1", fn, cp);
    if (need_rank && (cp_rank < 0 || cp_rank >= cp))
        return pp__cuda_fail(err, PP_EINVAL, "%s: cp_rank=%d: must be in [0, cp=%d)", fn, cp_rank, cp);
    return PP_OK;
}

static pp_status pp__check_ptrs(const char *fn, const void *src, const void *dst, long long rows,
                                long long row_bytes, pp_error *err)
{
    if (rows < 0) return pp__cuda_fail(err, PP_EINVAL, "%s: rows=%lld: must not be negative", fn, rows);
    if (row_bytes < 0)
        return pp__cuda_fail(err, PP_EINVAL, "%s: row_bytes=%lld: must not be negative", fn, row_bytes);
    if (rows > 0 && row_bytes > 0) {
        if (!src) return pp__cuda_fail(err, PP_EINVAL, "%s: src=NULL: needs a device pointer", fn);
        if (!dst) return pp__cuda_fail(err, PP_EINVAL, "%s: dst=NULL: needs a device pointer", fn);
    }
    return PP_OK;
}

static pp_status pp__cp_bshd(const char *fn, const void *src, void *dst, int64_t outer, int64_t seq,
                             int64_t row_bytes, int cp, int cp_rank, int inverse, void *stream,
                             pp_error *err)
{
    pp_status st;
    if ((st = pp__check_cp(fn, cp, cp_rank, 1, err)) != PP_OK) return st;
    if (outer < 0) return pp__cuda_fail(err, PP_EINVAL, "%s: outer=%lld: must not be negative", fn, (long long)outer);
    if (seq < 0 || seq % (2 * cp) != 0)
        return pp__cuda_fail(err, PP_EINVAL, "%s: seq=%lld: must be a multiple of 2*cp (%d)", fn,
                             (long long)seq, 2 * cp);
    long long local = seq / cp;
    if ((st = pp__check_ptrs(fn, src, dst, outer * local, row_bytes, err)) != PP_OK) return st;
    pp__map_cp_split_bshd m;
    m.seq = seq; m.local = local; m.c = seq / (2 * cp); m.rb = row_bytes;
    m.cp = cp; m.r = cp_rank; m.inverse = inverse;
    return pp__rows_launch(dst, src, outer * local, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
}

extern "C" pp_status pp_cuda_cp_split(const void *src, void *dst, int64_t outer, int64_t seq,
                                      int64_t row_bytes, int cp, int cp_rank, void *stream, pp_error *err)
{
    return pp__cp_bshd("pp_cuda_cp_split", src, dst, outer, seq, row_bytes, cp, cp_rank, 0, stream, err);
}

extern "C" pp_status pp_cuda_cp_unsplit(const void *src, void *dst, int64_t outer, int64_t seq,
                                        int64_t row_bytes, int cp, int cp_rank, void *stream, pp_error *err)
{
    return pp__cp_bshd("pp_cuda_cp_unsplit", src, dst, outer, seq, row_bytes, cp, cp_rank, 1, stream, err);
}

static pp_status pp__cp_merge_bshd(const char *fn, const void *src, void *dst, int64_t outer,
                                   int64_t seq, int64_t row_bytes, int cp, int inverse, void *stream,
                                   pp_error *err)
{
    pp_status st;
    if ((st = pp__check_cp(fn, cp, 0, 0, err)) != PP_OK) return st;
    if (outer < 0) return pp__cuda_fail(err, PP_EINVAL, "%s: outer=%lld: must not be negative", fn, (long long)outer);
    if (seq < 0 || seq % (2 * cp) != 0)
        return pp__cuda_fail(err, PP_EINVAL, "%s: seq=%lld: must be a multiple of 2*cp (%d)", fn,
                             (long long)seq, 2 * cp);
    if ((st = pp__check_ptrs(fn, src, dst, outer * seq, row_bytes, err)) != PP_OK) return st;
    pp__map_cp_merge_bshd m;
    m.seq = seq; m.local = seq / cp; m.outer = outer; m.c = seq / (2 * cp); m.rb = row_bytes;
    m.cp = cp; m.inverse = inverse;
    return pp__rows_launch(dst, src, outer * seq, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
}

extern "C" pp_status pp_cuda_cp_merge(const void *shards, void *dst, int64_t outer, int64_t seq,
                                      int64_t row_bytes, int cp, void *stream, pp_error *err)
{
    return pp__cp_merge_bshd("pp_cuda_cp_merge", shards, dst, outer, seq, row_bytes, cp, 0, stream, err);
}

extern "C" pp_status pp_cuda_cp_shard_all(const void *src, void *shards, int64_t outer, int64_t seq,
                                          int64_t row_bytes, int cp, void *stream, pp_error *err)
{
    return pp__cp_merge_bshd("pp_cuda_cp_shard_all", src, shards, outer, seq, row_bytes, cp, 1, stream, err);
}

static pp_status pp__check_thd(const char *fn, const int *cu, int nseq, int64_t total, int cp,
                               pp_error *err)
{
    if (nseq < 1) return pp__cuda_fail(err, PP_EINVAL, "%s: nseq=%d: must be at least 1", fn, nseq);
    if (!cu) return pp__cuda_fail(err, PP_EINVAL, "%s: cu_seqlens_padded=NULL: needs nseq+1 ints on the device", fn);
    if (total < 0 || total % (2 * cp) != 0)
        return pp__cuda_fail(err, PP_EINVAL, "%s: total=%lld: must be cu_seqlens_padded[nseq], a multiple "
                             "of 2*cp (%d)", fn, (long long)total, 2 * cp);
    if (total > 0x7FFFFFFFll)
        return pp__cuda_fail(err, PP_EINVAL, "%s: total=%lld: int32 cu_seqlens hold at most %d tokens",
                             fn, (long long)total, 0x7FFFFFFF);
    return PP_OK;
}

static pp_status pp__cp_thd(const char *fn, const void *src, void *dst, const int *cu, int nseq,
                            int64_t total, int64_t row_bytes, int cp, int cp_rank, int inverse,
                            void *stream, pp_error *err)
{
    pp_status st;
    if ((st = pp__check_cp(fn, cp, cp_rank, 1, err)) != PP_OK) return st;
    if ((st = pp__check_thd(fn, cu, nseq, total, cp, err)) != PP_OK) return st;
    if ((st = pp__check_ptrs(fn, src, dst, total / cp, row_bytes, err)) != PP_OK) return st;
    pp__map_cp_split_thd m;
    m.cu = cu; m.rb = row_bytes; m.nseq = nseq; m.cp = cp; m.r = cp_rank; m.inverse = inverse;
    return pp__rows_launch(dst, src, total / cp, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
}

extern "C" pp_status pp_cuda_cp_split_thd(const void *src, void *dst, const int *cu_seqlens_padded,
                                          int nseq, int64_t total, int64_t row_bytes, int cp,
                                          int cp_rank, void *stream, pp_error *err)
{
    return pp__cp_thd("pp_cuda_cp_split_thd", src, dst, cu_seqlens_padded, nseq, total, row_bytes,
                      cp, cp_rank, 0, stream, err);
}

extern "C" pp_status pp_cuda_cp_unsplit_thd(const void *src, void *dst, const int *cu_seqlens_padded,
                                            int nseq, int64_t total, int64_t row_bytes, int cp,
                                            int cp_rank, void *stream, pp_error *err)
{
    return pp__cp_thd("pp_cuda_cp_unsplit_thd", src, dst, cu_seqlens_padded, nseq, total, row_bytes,
                      cp, cp_rank, 1, stream, err);
}

static pp_status pp__cp_merge_thd(const char *fn, const void *src, void *dst, const int *cu, int nseq,
                                  int64_t total, int64_t row_bytes, int cp, int inverse, void *stream,
                                  pp_error *err)
{
    pp_status st;
    if ((st = pp__check_cp(fn, cp, 0, 0, err)) != PP_OK) return st;
    if ((st = pp__check_thd(fn, cu, nseq, total, cp, err)) != PP_OK) return st;
    if ((st = pp__check_ptrs(fn, src, dst, total, row_bytes, err)) != PP_OK) return st;
    pp__map_cp_merge_thd m;
    m.cu = cu; m.rb = row_bytes; m.local_total = total / cp; m.nseq = nseq; m.cp = cp; m.inverse = inverse;
    return pp__rows_launch(dst, src, total, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
}

extern "C" pp_status pp_cuda_cp_merge_thd(const void *shards, void *dst, const int *cu_seqlens_padded,
                                          int nseq, int64_t total, int64_t row_bytes, int cp,
                                          void *stream, pp_error *err)
{
    return pp__cp_merge_thd("pp_cuda_cp_merge_thd", shards, dst, cu_seqlens_padded, nseq, total,
                            row_bytes, cp, 0, stream, err);
}

extern "C" pp_status pp_cuda_cp_shard_all_thd(const void *src, void *shards, const int *cu_seqlens_padded,
                                              int nseq, int64_t total, int64_t row_bytes, int cp,
                                              void *stream, pp_error *err)
{
    return pp__cp_merge_thd("pp_cuda_cp_shard_all_thd", src, shards, cu_seqlens_padded, nseq, total,
                            row_bytes, cp, 1, stream, err);
}

/* ============================================================================================
 * >>cuda-gather
 * dst row i = src row map[i] (gather) or dst row map[i] = src row i (scatter); map entries < 0
 * mean "padding" (gather writes zeros) or "dropped" (scatter skips the row). Index maps are int32
 * or int64, as the host functions produce them.
 * ============================================================================================ */

template <typename I>
struct pp__map_gather {
    const I *map;
    long long src_stride, src_offset, dst_stride;
    __device__ pp__rowmove operator()(long long i) const
    {
        long long s = (long long)__ldg(map + i);
        pp__rowmove m = { s >= 0 ? s * src_stride + src_offset : -1, i * dst_stride };
        return m;
    }
};

template <typename I>
struct pp__map_scatter {
    const I *map;
    long long src_stride, dst_stride;
    __device__ pp__rowmove operator()(long long i) const
    {
        long long d = (long long)__ldg(map + i);
        pp__rowmove m = { i * src_stride, d >= 0 ? d * dst_stride : -1 };
        return m;
    }
};

static pp_status pp__check_index(const char *fn, const void *map, int index_bytes, int64_t rows,
                                 pp_error *err)
{
    if (index_bytes != 4 && index_bytes != 8)
        return pp__cuda_fail(err, PP_EINVAL, "%s: index_bytes=%d: must be 4 (int32) or 8 (int64)", fn,
                             index_bytes);
    if (rows > 0 && !map) return pp__cuda_fail(err, PP_EINVAL, "%s: map=NULL: needs rows indices on the device", fn);
    return PP_OK;
}

extern "C" pp_status pp_cuda_gather_rows(const void *src, void *dst, const void *map, int index_bytes,
                                         int64_t rows, int64_t row_bytes, void *stream, pp_error *err)
{
    const char *fn = "pp_cuda_gather_rows";
    pp_status st;
    if ((st = pp__check_ptrs(fn, src, dst, rows, row_bytes, err)) != PP_OK) return st;
    if ((st = pp__check_index(fn, map, index_bytes, rows, err)) != PP_OK) return st;
    if (index_bytes == 4) {
        pp__map_gather<int32_t> m = { (const int32_t *)map, row_bytes, 0, row_bytes };
        return pp__rows_launch(dst, src, rows, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
    }
    pp__map_gather<int64_t> m = { (const int64_t *)map, row_bytes, 0, row_bytes };
    return pp__rows_launch(dst, src, rows, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
}

extern "C" pp_status pp_cuda_scatter_rows(const void *src, void *dst, const void *map, int index_bytes,
                                          int64_t rows, int64_t row_bytes, void *stream, pp_error *err)
{
    const char *fn = "pp_cuda_scatter_rows";
    pp_status st;
    if ((st = pp__check_ptrs(fn, src, dst, rows, row_bytes, err)) != PP_OK) return st;
    if ((st = pp__check_index(fn, map, index_bytes, rows, err)) != PP_OK) return st;
    if (index_bytes == 4) {
        pp__map_scatter<int32_t> m = { (const int32_t *)map, row_bytes, row_bytes };
        return pp__rows_launch(dst, src, rows, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
    }
    pp__map_scatter<int64_t> m = { (const int64_t *)map, row_bytes, row_bytes };
    return pp__rows_launch(dst, src, rows, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
}

extern "C" pp_status pp_cuda_copy_rows(const void *src, void *dst, int64_t rows, int64_t row_bytes,
                                       void *stream, pp_error *err)
{
    const char *fn = "pp_cuda_copy_rows";
    pp_status st;
    if ((st = pp__check_ptrs(fn, src, dst, rows, row_bytes, err)) != PP_OK) return st;
    pp__map_identity m = { row_bytes };
    return pp__rows_launch(dst, src, rows, row_bytes, NULL, 0, m, pp__stream(stream), fn, err);
}

/* ============================================================================================
 * >>cuda-pack
 * One microbatch (bin) in one launch: for every packed position t < total, with s = rows[t] (the
 * map pp_pack_plan_gather makes; -1 for padding) and k the sequence whose padded span holds t,
 *     field f:    dst_f[t] = s >= 0 ? src_f[s] : pad_value_f           (token ids, labels, mask)
 *     positions:  t - cu_seqlens_padded[k]       (restarting at 0 for every sequence; padding
 *                                                 tokens go on counting, as arange(padded length))
 * Per-token outputs go back with pp_cuda_scatter_rows over the same rows map.
 * ============================================================================================ */

struct pp__pack_args {
    const void *src[PP_CUDA_PACK_MAX_FIELDS];
    void *dst[PP_CUDA_PACK_MAX_FIELDS];
    unsigned long long pad[PP_CUDA_PACK_MAX_FIELDS];
    int elem[PP_CUDA_PACK_MAX_FIELDS];
    int nfields;
    int pos_bytes;
    void *positions;
};

__device__ __forceinline__ void pp__put(void *base, long long i, int eb, unsigned long long v)
{
    switch (eb) {
    case 1: ((unsigned char *)base)[i] = (unsigned char)v; break;
    case 2: ((unsigned short *)base)[i] = (unsigned short)v; break;
    case 4: ((unsigned int *)base)[i] = (unsigned int)v; break;
    default: ((unsigned long long *)base)[i] = v; break;
    }
}

__device__ __forceinline__ unsigned long long pp__get(const void *base, long long i, int eb)
{
    switch (eb) {
    case 1: return __ldg((const unsigned char *)base + i);
    case 2: return __ldg((const unsigned short *)base + i);
    case 4: return __ldg((const unsigned int *)base + i);
    default: return __ldg((const unsigned long long *)base + i);
    }
}

/* A block packs one tile of PP__PACK_TILE consecutive positions. Its first thread finds the
 * sequences the tile touches (two binary searches over cu_seqlens_padded) and the block caches
 * their starts in shared memory, so a position's sequence is a short search there instead of a
 * chain of dependent global loads per token; the lookups overlap the field copies. Each thread
 * handles PP__PACK_UNROLL positions with all loads of a field issued before its stores. */
#define PP__PACK_THREADS 256
#define PP__PACK_UNROLL 4
#define PP__PACK_TILE (PP__PACK_THREADS * PP__PACK_UNROLL)
#define PP__PACK_STARTS 64

__global__ void __launch_bounds__(PP__PACK_THREADS)
pp__pack_kernel(const long long *__restrict__ rows, const int *__restrict__ cu, int nseq, long long total,
                pp__pack_args a)
{
    __shared__ int starts[PP__PACK_STARTS];
    __shared__ int k0s, k1s;
    const long long t0 = (long long)blockIdx.x * PP__PACK_TILE;
    /* two threads of different warps look up the tile's first and last sequence while the other
     * warps already move the fields; the block meets only before the positions */
    if (a.positions) {
        if (threadIdx.x == 0) k0s = pp__seq_of(cu, nseq, t0, 1);
        if (threadIdx.x == 32) {
            long long tl = (t0 + PP__PACK_TILE < total ? t0 + PP__PACK_TILE : total) - 1;
            k1s = pp__seq_of(cu, nseq, tl, 1);
        }
    }
    long long s[PP__PACK_UNROLL];
#pragma unroll
    for (int u = 0; u < PP__PACK_UNROLL; u++) {
        long long t = t0 + u * PP__PACK_THREADS + threadIdx.x;
        s[u] = t < total ? __ldg(rows + t) : -1;
    }
#pragma unroll
    for (int f = 0; f < PP_CUDA_PACK_MAX_FIELDS; f++) {
        if (f >= a.nfields) break;
        unsigned long long v[PP__PACK_UNROLL];
#pragma unroll
        for (int u = 0; u < PP__PACK_UNROLL; u++) v[u] = s[u] >= 0 ? pp__get(a.src[f], s[u], a.elem[f]) : a.pad[f];
#pragma unroll
        for (int u = 0; u < PP__PACK_UNROLL; u++) {
            long long t = t0 + u * PP__PACK_THREADS + threadIdx.x;
            if (t < total) pp__put(a.dst[f], t, a.elem[f], v[u]);
        }
    }
    if (!a.positions) return;
    __syncthreads();
    const int kbase = k0s, nstarts = k1s - k0s + 1;
    for (int j = threadIdx.x; j < nstarts && j < PP__PACK_STARTS; j += PP__PACK_THREADS) starts[j] = __ldg(cu + kbase + j);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < PP__PACK_UNROLL; u++) {
        long long t = t0 + u * PP__PACK_THREADS + threadIdx.x;
        if (t >= total) continue;
        long long start;
        if (nstarts <= PP__PACK_STARTS) {               /* largest j with starts[j] <= t */
            int lo = 0, hi = nstarts - 1;
            while (lo < hi) { int mid = (lo + hi + 1) >> 1; if (starts[mid] <= t) lo = mid; else hi = mid - 1; }
            start = starts[lo];
        } else {                                        /* a tile of many tiny sequences */
            start = __ldg(cu + pp__seq_of(cu, nseq, t, 1));
        }
        pp__put(a.positions, t, a.pos_bytes, (unsigned long long)(t - start));
    }
}

extern "C" pp_status pp_cuda_pack(const int64_t *rows, const int *cu_seqlens_padded, int nseq,
                                  int64_t total, const pp_cuda_pack_field *fields, int nfields,
                                  void *positions, int position_bytes, void *stream, pp_error *err)
{
    const char *fn = "pp_cuda_pack";
    if (total < 0) return pp__cuda_fail(err, PP_EINVAL, "%s: total=%lld: must not be negative", fn, (long long)total);
    if (nfields < 0 || nfields > PP_CUDA_PACK_MAX_FIELDS)
        return pp__cuda_fail(err, PP_EINVAL, "%s: nfields=%d: must be 0 .. %d", fn, nfields, PP_CUDA_PACK_MAX_FIELDS);
    if (nfields > 0 && !fields) return pp__cuda_fail(err, PP_EINVAL, "%s: fields=NULL with nfields=%d", fn, nfields);
    pp__pack_args a;
    memset(&a, 0, sizeof a);
    a.nfields = nfields;
    for (int f = 0; f < nfields; f++) {
        int eb = fields[f].elem_bytes;
        if (eb != 1 && eb != 2 && eb != 4 && eb != 8)
            return pp__cuda_fail(err, PP_EINVAL, "%s: fields[%d].elem_bytes=%d: must be 1, 2, 4 or 8", fn, f, eb);
        if (total > 0 && (!fields[f].src || !fields[f].dst))
            return pp__cuda_fail(err, PP_EINVAL, "%s: fields[%d].%s=NULL: needs a device pointer", fn, f,
                                 fields[f].src ? "dst" : "src");
        if ((uintptr_t)fields[f].src % eb || (uintptr_t)fields[f].dst % eb)
            return pp__cuda_fail(err, PP_EINVAL, "%s: fields[%d]: src and dst must be aligned to elem_bytes=%d",
                                 fn, f, eb);
        a.src[f] = fields[f].src;
        a.dst[f] = fields[f].dst;
        a.elem[f] = eb;
        a.pad[f] = (unsigned long long)fields[f].pad_value;
    }
    if (positions) {
        if (position_bytes != 4 && position_bytes != 8)
            return pp__cuda_fail(err, PP_EINVAL, "%s: position_bytes=%d: must be 4 (int32) or 8 (int64)", fn,
                                 position_bytes);
        if ((uintptr_t)positions % position_bytes)
            return pp__cuda_fail(err, PP_EINVAL, "%s: positions=%p: must be aligned to position_bytes=%d", fn,
                                 positions, position_bytes);
        if (nseq < 1) return pp__cuda_fail(err, PP_EINVAL, "%s: nseq=%d: positions need at least 1 sequence", fn, nseq);
        if (!cu_seqlens_padded)
            return pp__cuda_fail(err, PP_EINVAL, "%s: cu_seqlens_padded=NULL: positions need nseq+1 ints on the device", fn);
        a.positions = positions;
        a.pos_bytes = position_bytes;
    }
    if (total == 0) return pp__cuda_ok(err);
    if (!rows) return pp__cuda_fail(err, PP_EINVAL, "%s: rows=NULL: needs total int64 indices on the device", fn);
    long long blocks = (total + PP__PACK_TILE - 1) / PP__PACK_TILE;
    if (blocks > 0x7FFFFFFFll)
        return pp__cuda_fail(err, PP_EINVAL, "%s: total=%lld: too many positions for one launch", fn, (long long)total);
    pp__pack_kernel<<<(unsigned)blocks, PP__PACK_THREADS, 0, pp__stream(stream)>>>((const long long *)rows,
                                                                                   cu_seqlens_padded, nseq, total, a);
    return pp__cuda_launched(err, fn);
}

/* ============================================================================================
 * >>cuda-replay
 * Recorded routed experts [recorded_tokens, moe_layers, topk] -> what this rank's routers replay:
 * the MoE layers [layer_begin, layer_begin + layer_count) of the local tokens, in local order
 * (rows[i] = recorded row of local token i, -1 for padding), or the layers of an explicit slot
 * list, converting the integer type (recorded uint8 / uint16 are unsigned, int32 / int64
 * signed). Padding tokens get -1 (the missing-route sentinel, as pp_replay_gather on the host),
 * or with pad_distinct experts 0, 1, ..., topk-1.
 * ============================================================================================ */

#ifndef PP__REPLAY_THREADS          /* tuning knobs; bench/kernels.cu measured 512/2/64 and */
#define PP__REPLAY_THREADS 256      /* 256/6/32 slower than these on an H100 (RESULTS_kernels.md) */
#endif
#ifndef PP__REPLAY_MINB
#define PP__REPLAY_MINB 4           /* blocks per SM the register budget must allow */
#endif
#ifndef PP__REPLAY_WIDE
#define PP__REPLAY_WIDE 32          /* longest run (bytes) read with wide loads into registers */
#endif
#define PP__REPLAY_SMEM 32768
#ifndef PP__REPLAY_DIRECT
#define PP__REPLAY_DIRECT 1         /* 0: never the direct path (for comparison) */
#endif
#ifndef PP__REPLAY_STAGED_ON
#define PP__REPLAY_STAGED_ON 1      /* 0: never the staged path (for comparison) */
#endif
/* Staged-path knobs. Measured on an H100 (2026-11-23, two rounds, u8 -> i32 against a copy of
 * the same bytes): the defaults 84.9 .. 85.3%; 8 loads in flight 84.8 .. 86.3%; streaming
 * stores 84.3 .. 84.9%; 32 KiB staged (128 tokens) 84.5%, and int32 recordings fall to 85%;
 * 8 KiB 84.3 .. 84.7%. Loading each token's 15-layer span as 16-byte words (8 loads instead of
 * 15, same sectors; built, tested, then removed): 84.3 .. 85.7% against 85.1 .. 86.5% in the
 * same three rounds. What holds uint8 -> int32 there: each token's 120 recorded bytes span 4 or
 * 5 of DRAM's 32-byte sectors (144 bytes on average): 4% more bytes fetched than counted. */
#ifndef PP__REPLAY_STAGED_BYTES
#define PP__REPLAY_STAGED_BYTES 16384   /* staged path: recorded bytes a block stages */
#endif
#ifndef PP__REPLAY_STAGED_UNROLL
#define PP__REPLAY_STAGED_UNROLL 4  /* staged path: loads in flight per thread */
#endif
#ifndef PP__REPLAY_STCS
#define PP__REPLAY_STCS 0           /* 1: streaming (evict-first) stores of the staged output */
#endif       /* bytes of shared memory for one block's tile */

/* The recording slot of local layer l: slots.s[l] when the caller gave a list (the replay map's
 * payload[]), else layer_begin + l. Passed by value: the list lives in the launch's parameters. */
struct pp__replay_slots { int n; int s[PP_CUDA_REPLAY_MAX_SLOTS]; };

/* One (token, layer) run: topk recorded values at r (s < 0: padding) -> topk outputs at o.
 * vec: o is 16-byte aligned and topk outputs are whole 16-byte vectors, stored as such.
 * wide (8 or 16): the run, at most PP__REPLAY_WIDE bytes, is read with loads of that width into
 * registers. */
template <typename IN, typename OUT>
__device__ __forceinline__ OUT pp__replay_pad(int k, int pad_distinct)
{
    return pad_distinct ? (OUT)k : (OUT)(long long)-1;
}

template <typename IN, typename OUT>
__device__ __forceinline__ void pp__replay_run(const IN *__restrict__ r, long long s, int topk,
                                               OUT *__restrict__ o, int vec, int wide, int pad_distinct)
{
    enum { V = 16 / sizeof(OUT), NI = PP__REPLAY_WIDE / sizeof(IN) };
    typedef union { uint4 u; OUT v[V]; } pack16;
    if (vec && wide && s >= 0) {
        union { uint4 q[PP__REPLAY_WIDE / 16]; uint2 d[PP__REPLAY_WIDE / 8]; IN v[NI]; } b;
        const int bytes = topk * (int)sizeof(IN);
        if (wide == 16) {
#pragma unroll
            for (int i = 0; i < PP__REPLAY_WIDE / 16; i++) if (i * 16 < bytes) b.q[i] = __ldg((const uint4 *)r + i);
        } else {
#pragma unroll
            for (int i = 0; i < PP__REPLAY_WIDE / 8; i++) if (i * 8 < bytes) b.d[i] = __ldg((const uint2 *)r + i);
        }
#pragma unroll
        for (int c = 0; c < (NI + V - 1) / V; c++) {
            if (c * V >= topk) break;
            pack16 x;
#pragma unroll
            for (int v = 0; v < V; v++) x.v[v] = c * V + v < NI ? (OUT)(long long)b.v[c * V + v < NI ? c * V + v : 0] : (OUT)0;
            ((uint4 *)o)[c] = x.u;
        }
    } else if (vec) {
        for (int k0 = 0; k0 < topk; k0 += V) {
            pack16 x;
#pragma unroll
            for (int v = 0; v < V; v++)
                x.v[v] = s >= 0 ? (OUT)(long long)__ldg(r + k0 + v) : pp__replay_pad<IN, OUT>(k0 + v, pad_distinct);
            *(uint4 *)(o + k0) = x.u;
        }
    } else {
#pragma unroll 4
        for (int k = 0; k < topk; k++) o[k] = s >= 0 ? (OUT)(long long)__ldg(r + k) : pp__replay_pad<IN, OUT>(k, pad_distinct);
    }
}

/* A block takes `tile` local tokens and all local layers.
 *   token-major output: the tile is one contiguous block of dst, each token's part of it one
 *     contiguous run of the recording: a flat copy, 16 bytes per thread step when vec.
 *   layer-major output: in (token, layer) pairs, pair p = token p / layer_count, layer p %
 *     layer_count, so consecutive threads read consecutive runs of the recording; a transpose
 *     through shared memory, where layer l's [token][k] block
 *     starts at l * lstride elements (the tile's run of one layer padded to an odd number of
 *     16-byte units, so threads on consecutive layers hit different banks); then per layer one
 *     contiguous run of the tile's tokens, also contiguous in shared memory: a flat copy, 16
 *     bytes per thread when vec. */
template <typename IN, typename OUT>
__global__ void __launch_bounds__(PP__REPLAY_THREADS, PP__REPLAY_MINB)
pp__replay_kernel(const IN *__restrict__ rec, const void *__restrict__ rows, int index_bytes,
                  OUT *__restrict__ dst, long long tokens, int moe_layers, int topk, int layer_begin,
                  int layer_count, int token_major, int tile, int lstride, int vec, int wide,
                  int pad_distinct, const __grid_constant__ pp__replay_slots slots)
{
    enum { V = 16 / sizeof(OUT) };
    extern __shared__ __align__(16) unsigned char pp__replay_smem[];
    __shared__ long long src[PP__REPLAY_THREADS];
    OUT *t = (OUT *)pp__replay_smem;
    const long long t0 = (long long)blockIdx.x * tile;
    const int nt = (int)(tokens - t0 < tile ? tokens - t0 : tile);
    for (int j = threadIdx.x; j < nt; j += PP__REPLAY_THREADS)
        src[j] = index_bytes == 4 ? (long long)__ldg((const int *)rows + t0 + j) : __ldg((const long long *)rows + t0 + j);
    __syncthreads();
    const unsigned lc = (unsigned)layer_count, pairs = (unsigned)nt * lc;
    if (token_major) {
        /* the tile is one contiguous block of dst, and each token's part of it comes from one
         * contiguous run of the recording: a flat copy, V outputs (16 bytes) per thread step */
        typedef union { uint4 u; OUT v[V]; } pack16;
        const unsigned row = lc * (unsigned)topk, n = (unsigned)nt * row;
        OUT *o = dst + t0 * (long long)row;
        if (vec) {
            for (unsigned e = threadIdx.x * V; e < n; e += PP__REPLAY_THREADS * V) {
                unsigned j = e / row, r = e - j * row;      /* topk % V == 0: one run per vector */
                unsigned l = r / (unsigned)topk, k = r - l * (unsigned)topk;
                long long s = src[j];
                const IN *from = rec + (s * moe_layers + (slots.n ? slots.s[l] : layer_begin + (int)l)) * topk + k;
                pack16 x;
#pragma unroll
                for (int v = 0; v < V; v++)
                    x.v[v] = s >= 0 ? (OUT)(long long)__ldg(from + v) : pp__replay_pad<IN, OUT>((int)k + v, pad_distinct);
                *(uint4 *)(o + e) = x.u;
            }
        } else {
            for (unsigned e = threadIdx.x; e < n; e += PP__REPLAY_THREADS) {
                unsigned j = e / row, r = e - j * row;
                unsigned l = r / (unsigned)topk, k = r - l * (unsigned)topk;
                long long s = src[j];
                o[e] = s >= 0 ? (OUT)(long long)__ldg(rec + (s * moe_layers + (slots.n ? slots.s[l] : layer_begin + (int)l)) * topk + k)
                              : pp__replay_pad<IN, OUT>((int)k, pad_distinct);
            }
        }
        return;
    }
    for (unsigned p = threadIdx.x; p < pairs; p += PP__REPLAY_THREADS) {
        unsigned j = p / lc, l = p - j * lc;
        long long s = src[j];
        OUT *o = t + (long long)l * lstride + (long long)j * topk;
        int slot = slots.n ? slots.s[l] : layer_begin + (int)l;
        pp__replay_run<IN, OUT>(rec + (s * moe_layers + slot) * topk, s, topk, o, vec, wide, pad_distinct);
    }
    __syncthreads();
    const unsigned run = (unsigned)nt * (unsigned)topk;      /* elements of one layer's block */
    if (vec) {
        const unsigned nv = run / V, sv = (unsigned)lstride / V;
        for (unsigned e = threadIdx.x; e < lc * nv; e += PP__REPLAY_THREADS) {
            unsigned l = e / nv, q = e - l * nv;
            ((uint4 *)(dst + ((long long)l * tokens + t0) * topk))[q] = ((const uint4 *)t)[(long long)l * sv + q];
        }
    } else {
        for (unsigned e = threadIdx.x; e < lc * run; e += PP__REPLAY_THREADS) {
            unsigned l = e / run, q = e - l * run;
            dst[((long long)l * tokens + t0) * topk + q] = t[(long long)l * lstride + q];
        }
    }
}

/* The direct path: when every token's topk outputs are whole 16-byte vectors and each vector's
 * V inputs can be read with one aligned load, a block takes `tile` tokens (at most
 * PP__REPLAY_DIRECT_TILE) and writes their part of dst in dst's own order (per layer one
 * contiguous run when layer-major, one contiguous block when token-major), so every store
 * instruction of a warp covers 512 contiguous bytes; the inputs, a few bytes per vector, come
 * through L1 (the layers of one token share sectors and the block reads them close together in
 * time). Each thread keeps PP__REPLAY_UNROLL loads in flight before its stores: with one, the
 * latency of the gather set the speed. Which path and tile run is measured, per layout and
 * type pair, in pp_cuda_replay_gather. */
#ifndef PP__REPLAY_DIRECT_TILE
#define PP__REPLAY_DIRECT_TILE 64
#endif
#ifndef PP__REPLAY_UNROLL
#define PP__REPLAY_UNROLL 8
#endif
template <int BYTES> struct pp__replay_word { typedef uint4 T; };   /* > 16: never launched */
template <> struct pp__replay_word<1> { typedef uint8_t T; };
template <> struct pp__replay_word<2> { typedef uint16_t T; };
template <> struct pp__replay_word<4> { typedef uint32_t T; };
template <> struct pp__replay_word<8> { typedef uint2 T; };

template <typename IN, typename OUT>
__global__ void __launch_bounds__(PP__REPLAY_THREADS)
pp__replay_direct_kernel(const IN *__restrict__ rec, const void *__restrict__ rows, int index_bytes,
                         OUT *__restrict__ dst, long long tokens, int moe_layers, int topk, int layer_begin,
                         int layer_count, int token_major, int tile, int pad_distinct,
                         const __grid_constant__ pp__replay_slots slots)
{
    enum { V = 16 / sizeof(OUT), INB = V * sizeof(IN) };
    typedef typename pp__replay_word<INB>::T word;
    typedef union { word w; IN v[V]; } in_pack;
    typedef union { uint4 u; OUT v[V]; } out_pack;
    __shared__ long long src[PP__REPLAY_DIRECT_TILE];
    const long long t0 = (long long)blockIdx.x * tile;
    const unsigned nt = (unsigned)(tokens - t0 < tile ? tokens - t0 : tile);
    for (unsigned j = threadIdx.x; j < nt; j += PP__REPLAY_THREADS)
        src[j] = index_bytes == 4 ? (long long)__ldg((const int *)rows + t0 + j) : __ldg((const long long *)rows + t0 + j);
    __syncthreads();
    const unsigned vpt = (unsigned)topk / V;                 /* vectors per (token, layer) run */
    const unsigned lc = (unsigned)layer_count, n = nt * lc * vpt;
    const unsigned per_layer = nt * vpt, per_token = lc * vpt;
    for (unsigned base = threadIdx.x; base < n; base += PP__REPLAY_THREADS * PP__REPLAY_UNROLL) {
        in_pack x[PP__REPLAY_UNROLL];
        long long at[PP__REPLAY_UNROLL];
        int k0[PP__REPLAY_UNROLL];
        bool pad[PP__REPLAY_UNROLL];
#pragma unroll
        for (int u = 0; u < PP__REPLAY_UNROLL; u++) {
            unsigned q = base + u * PP__REPLAY_THREADS, j, l, c;
            at[u] = -1;
            pad[u] = false;
            if (q >= n) continue;
            if (token_major) { j = q / per_token; unsigned r = q - j * per_token; l = r / vpt; c = r - l * vpt; }
            else { l = q / per_layer; unsigned r = q - l * per_layer; j = r / vpt; c = r - j * vpt; }
            k0[u] = (int)(c * V);
            at[u] = token_major ? ((t0 + j) * lc + l) * (long long)topk + k0[u]
                                : ((long long)l * tokens + t0 + j) * topk + k0[u];
            long long s = src[j];
            pad[u] = s < 0;
            if (s >= 0) {
                int slot = slots.n ? slots.s[l] : layer_begin + (int)l;
                x[u].w = __ldg((const word *)(rec + (s * moe_layers + slot) * topk + k0[u]));
            }
        }
#pragma unroll
        for (int u = 0; u < PP__REPLAY_UNROLL; u++) {
            if (at[u] < 0) continue;
            out_pack o;
#pragma unroll
            for (int v = 0; v < V; v++)
                o.v[v] = pad[u] ? pp__replay_pad<IN, OUT>(k0[u] + v, pad_distinct) : (OUT)(long long)x[u].v[v];
            *(uint4 *)(dst + at[u]) = o.u;
        }
    }
}

/* The staged path (layer-major): a block copies its tokens' recorded runs, few bytes each, into
 * shared memory with coalesced loads of W bytes (the runs of one token lie side by side in the
 * recording), then writes dst in dst's order from there, 16 bytes per thread and 512 contiguous
 * bytes per warp instruction. Shared memory holds the input, not the 2-8x wider output, so a
 * block takes more tokens than the transpose does. Token j's runs start at j * tstride bytes:
 * an odd number of 16-byte units, so the lanes of a warp, on consecutive tokens, hit different
 * banks. */
template <typename IN, typename OUT, int W>
__global__ void __launch_bounds__(PP__REPLAY_THREADS)
pp__replay_staged_kernel(const IN *__restrict__ rec, const void *__restrict__ rows, int index_bytes,
                         OUT *__restrict__ dst, long long tokens, int moe_layers, int topk, int layer_begin,
                         int layer_count, int tile, int tstride, int pad_distinct,
                         const __grid_constant__ pp__replay_slots slots)
{
    enum { V = 16 / sizeof(OUT), INB = V * sizeof(IN) };
    typedef typename pp__replay_word<INB>::T word;
    typedef typename pp__replay_word<W>::T wword;
    typedef union { word w; IN v[V]; } in_pack;
    typedef union { uint4 u; OUT v[V]; } out_pack;
    extern __shared__ __align__(16) unsigned char pp__replay_stage[];
    __shared__ long long src[PP__REPLAY_DIRECT_TILE];
    const long long t0 = (long long)blockIdx.x * tile;
    const unsigned nt = (unsigned)(tokens - t0 < tile ? tokens - t0 : tile);
    for (unsigned j = threadIdx.x; j < nt; j += PP__REPLAY_THREADS)
        src[j] = index_bytes == 4 ? (long long)__ldg((const int *)rows + t0 + j) : __ldg((const long long *)rows + t0 + j);
    __syncthreads();
    const unsigned lc = (unsigned)layer_count, run = (unsigned)topk * sizeof(IN), wpr = run / W;
    const unsigned nload = nt * lc * wpr, per_token_w = lc * wpr;
    for (unsigned base = threadIdx.x; base < nload; base += PP__REPLAY_THREADS * PP__REPLAY_STAGED_UNROLL) {
        wword x[PP__REPLAY_STAGED_UNROLL];
        unsigned to[PP__REPLAY_STAGED_UNROLL];
#pragma unroll
        for (int u = 0; u < PP__REPLAY_STAGED_UNROLL; u++) {
            unsigned i = base + u * PP__REPLAY_THREADS;
            to[u] = 0xFFFFFFFFu;
            if (i >= nload) continue;
            unsigned j = i / per_token_w, r = i - j * per_token_w, l = r / wpr, w = r - l * wpr;
            long long s = src[j];
            if (s < 0) continue;
            int slot = slots.n ? slots.s[l] : layer_begin + (int)l;
            x[u] = __ldg((const wword *)((const unsigned char *)rec + ((s * moe_layers + slot) * topk) * (long long)sizeof(IN)) + w);
            to[u] = j * (unsigned)tstride + l * run + w * W;
        }
#pragma unroll
        for (int u = 0; u < PP__REPLAY_STAGED_UNROLL; u++)
            if (to[u] != 0xFFFFFFFFu) *(wword *)(pp__replay_stage + to[u]) = x[u];
    }
    __syncthreads();
    const unsigned vpt = (unsigned)topk / V, per_layer = nt * vpt, n = per_layer * lc;
    for (unsigned q = threadIdx.x; q < n; q += PP__REPLAY_THREADS) {
        unsigned l = q / per_layer, r = q - l * per_layer, j = r / vpt, c = r - j * vpt;
        out_pack o;
        if (src[j] < 0) {
#pragma unroll
            for (int v = 0; v < V; v++) o.v[v] = pp__replay_pad<IN, OUT>((int)(c * V) + v, pad_distinct);
        } else {
            in_pack x;
            x.w = *(const word *)(pp__replay_stage + j * (unsigned)tstride + l * run + c * INB);
#pragma unroll
            for (int v = 0; v < V; v++) o.v[v] = (OUT)(long long)x.v[v];
        }
#if PP__REPLAY_STCS
        __stcs((uint4 *)(dst + ((long long)l * tokens + t0 + j) * topk + c * V), o.u);
#else
        *(uint4 *)(dst + ((long long)l * tokens + t0 + j) * topk + c * V) = o.u;
#endif
    }
}

template <typename IN, typename OUT>
static void pp__replay_staged_launch(const pp_cuda_replay *d, int staged, int tstride, int wload,
                                     const pp__replay_slots *slots, cudaStream_t st)
{
    unsigned nblocks = (unsigned)((d->tokens + staged - 1) / staged);
    size_t smem = (size_t)staged * tstride;
#define PP__REPLAY_STAGED(WB) pp__replay_staged_kernel<IN, OUT, WB><<<nblocks, PP__REPLAY_THREADS, smem, st>>>( \
        (const IN *)d->recorded, d->rows, d->index_bytes, (OUT *)d->dst, d->tokens, d->moe_layers, d->topk, \
        d->layer_begin, d->layer_count, staged, tstride, d->pad_distinct, *slots)
    switch (wload) {
    case 16: PP__REPLAY_STAGED(16); break;
    case 8: PP__REPLAY_STAGED(8); break;
    case 4: PP__REPLAY_STAGED(4); break;
    case 2: PP__REPLAY_STAGED(2); break;
    default: PP__REPLAY_STAGED(1); break;
    }
#undef PP__REPLAY_STAGED
}

template <typename IN>
static void pp__replay_launch_in(const pp_cuda_replay *d, int out_bytes, unsigned blocks, int tile, int lstride,
                                 int vec, int wide, int direct, int staged, int tstride, int wload,
                                 const pp__replay_slots *slots, cudaStream_t st)
{
    if (staged) {
        switch (out_bytes) {
        case 1: pp__replay_staged_launch<IN, uint8_t>(d, staged, tstride, wload, slots, st); break;
        case 2: pp__replay_staged_launch<IN, uint16_t>(d, staged, tstride, wload, slots, st); break;
        case 4: pp__replay_staged_launch<IN, int32_t>(d, staged, tstride, wload, slots, st); break;
        default: pp__replay_staged_launch<IN, int64_t>(d, staged, tstride, wload, slots, st); break;
        }
        return;
    }
    if (direct) {
        unsigned nblocks = (unsigned)((d->tokens + direct - 1) / direct);
#define PP__REPLAY_DIRECT_ARGS (const IN *)d->recorded, d->rows, d->index_bytes, (OUT *)d->dst, d->tokens, \
                               d->moe_layers, d->topk, d->layer_begin, d->layer_count, d->token_major, direct, d->pad_distinct, *slots
        switch (out_bytes) {
        case 1: { typedef uint8_t OUT; pp__replay_direct_kernel<IN, OUT><<<nblocks, PP__REPLAY_THREADS, 0, st>>>(PP__REPLAY_DIRECT_ARGS); break; }
        case 2: { typedef uint16_t OUT; pp__replay_direct_kernel<IN, OUT><<<nblocks, PP__REPLAY_THREADS, 0, st>>>(PP__REPLAY_DIRECT_ARGS); break; }
        case 4: { typedef int32_t OUT; pp__replay_direct_kernel<IN, OUT><<<nblocks, PP__REPLAY_THREADS, 0, st>>>(PP__REPLAY_DIRECT_ARGS); break; }
        default: { typedef int64_t OUT; pp__replay_direct_kernel<IN, OUT><<<nblocks, PP__REPLAY_THREADS, 0, st>>>(PP__REPLAY_DIRECT_ARGS); break; }
        }
#undef PP__REPLAY_DIRECT_ARGS
        return;
    }
    size_t smem = d->token_major ? 0 : (size_t)lstride * d->layer_count * out_bytes;
#define PP__REPLAY_ARGS (const IN *)d->recorded, d->rows, d->index_bytes, (OUT *)d->dst, d->tokens, d->moe_layers, \
                        d->topk, d->layer_begin, d->layer_count, d->token_major, tile, lstride, vec, wide, \
                        d->pad_distinct, *slots
    switch (out_bytes) {
    case 1: { typedef uint8_t OUT; pp__replay_kernel<IN, OUT><<<blocks, PP__REPLAY_THREADS, smem, st>>>(PP__REPLAY_ARGS); break; }
    case 2: { typedef uint16_t OUT; pp__replay_kernel<IN, OUT><<<blocks, PP__REPLAY_THREADS, smem, st>>>(PP__REPLAY_ARGS); break; }
    case 4: { typedef int32_t OUT; pp__replay_kernel<IN, OUT><<<blocks, PP__REPLAY_THREADS, smem, st>>>(PP__REPLAY_ARGS); break; }
    default: { typedef int64_t OUT; pp__replay_kernel<IN, OUT><<<blocks, PP__REPLAY_THREADS, smem, st>>>(PP__REPLAY_ARGS); break; }
    }
#undef PP__REPLAY_ARGS
}

extern "C" pp_status pp_cuda_replay_gather(const pp_cuda_replay *d, void *stream, pp_error *err)
{
    const char *fn = "pp_cuda_replay_gather";
    if (!d) return pp__cuda_fail(err, PP_EINVAL, "%s: replay=NULL: needs a description", fn);
    int in_bytes = d->recorded_bytes ? d->recorded_bytes : 4;
    int out_bytes = d->dst_bytes ? d->dst_bytes : 8;
    if (in_bytes != 1 && in_bytes != 2 && in_bytes != 4 && in_bytes != 8)
        return pp__cuda_fail(err, PP_EINVAL, "%s: recorded_bytes=%d: must be 1, 2, 4 or 8", fn, d->recorded_bytes);
    if (out_bytes != 1 && out_bytes != 2 && out_bytes != 4 && out_bytes != 8)
        return pp__cuda_fail(err, PP_EINVAL, "%s: dst_bytes=%d: must be 1, 2, 4 or 8", fn, d->dst_bytes);
    if (d->index_bytes != 4 && d->index_bytes != 8)
        return pp__cuda_fail(err, PP_EINVAL, "%s: index_bytes=%d: must be 4 (int32) or 8 (int64)", fn, d->index_bytes);
    if (d->moe_layers < 1) return pp__cuda_fail(err, PP_EINVAL, "%s: moe_layers=%d: must be at least 1", fn, d->moe_layers);
    if (d->topk < 1) return pp__cuda_fail(err, PP_EINVAL, "%s: topk=%d: must be at least 1", fn, d->topk);
    if (d->layer_count < 0 || (!d->slots && (d->layer_begin < 0 || d->layer_begin + d->layer_count > d->moe_layers)))
        return pp__cuda_fail(err, PP_EINVAL, "%s: layer_begin=%d, layer_count=%d: the range must lie in [0, "
                             "moe_layers=%d)", fn, d->layer_begin, d->layer_count, d->moe_layers);
    if (d->tokens < 0) return pp__cuda_fail(err, PP_EINVAL, "%s: tokens=%lld: must not be negative", fn, (long long)d->tokens);
    pp__replay_slots slots;
    memset(&slots, 0, sizeof slots);
    if (d->slots) {
        if (d->layer_count > PP_CUDA_REPLAY_MAX_SLOTS)
            return pp__cuda_fail(err, PP_EINVAL, "%s: layer_count=%d: a slot list holds at most %d layers", fn,
                                 d->layer_count, PP_CUDA_REPLAY_MAX_SLOTS);
        for (int l = 0; l < d->layer_count; l++) {
            if (d->slots[l] < 0 || d->slots[l] >= d->moe_layers)
                return pp__cuda_fail(err, PP_EINVAL, "%s: slots[%d]=%d: must be in [0, moe_layers=%d)", fn, l,
                                     (int)d->slots[l], d->moe_layers);
            slots.s[l] = d->slots[l];
        }
        slots.n = d->layer_count;
    }
    if (d->tokens == 0 || d->layer_count == 0) return pp__cuda_ok(err);
    if (!d->recorded || !d->rows || !d->dst)
        return pp__cuda_fail(err, PP_EINVAL, "%s: %s=NULL: needs a device pointer", fn,
                             !d->recorded ? "recorded" : !d->rows ? "rows" : "dst");
    if ((uintptr_t)d->recorded % in_bytes || (uintptr_t)d->dst % out_bytes || (uintptr_t)d->rows % d->index_bytes)
        return pp__cuda_fail(err, PP_EINVAL, "%s: recorded, rows and dst must be aligned to their element sizes", fn);
    /* tokens per block: as many as fit the shared tile, at most one per thread */
    long long per_token = (long long)d->layer_count * d->topk * out_bytes;
    if (per_token > PP__REPLAY_SMEM)
        return pp__cuda_fail(err, PP_EINVAL, "%s: layer_count=%d x topk=%d x dst_bytes=%d: one token's output "
                             "must fit %d bytes", fn, d->layer_count, d->topk, out_bytes, PP__REPLAY_SMEM);
    /* whole 16-byte accesses when a token's topk run is whole vectors and dst is aligned */
    int vec = (uintptr_t)d->dst % 16 == 0 && ((long long)d->topk * out_bytes) % 16 == 0;
    long long tile = PP__REPLAY_SMEM / per_token, lbytes = 0;
    if (tile > PP__REPLAY_THREADS) tile = PP__REPLAY_THREADS;
    for (; tile > 1; tile--) {               /* the padded layer stride must fit too */
        lbytes = (tile * d->topk * out_bytes + 15) / 16;
        if (lbytes % 2 == 0) lbytes++;
        if (lbytes * 16 * d->layer_count <= PP__REPLAY_SMEM) break;
    }
    lbytes = (tile * d->topk * out_bytes + 15) / 16;
    if (lbytes % 2 == 0) lbytes++;
    lbytes *= 16;
    if (lbytes * d->layer_count > 48 * 1024)
        return pp__cuda_fail(err, PP_EINVAL, "%s: layer_count=%d x topk=%d x dst_bytes=%d: one token's output, "
                             "padded per layer, must fit 48 KiB", fn, d->layer_count, d->topk, out_bytes);
    int lstride = (int)(lbytes / out_bytes);
    /* wide loads: a run of at most 64 bytes, in whole 16- or 8-byte pieces, from an aligned base */
    long long run_in = (long long)d->topk * in_bytes;
    int wide = run_in > PP__REPLAY_WIDE ? 0
             : run_in % 16 == 0 && (uintptr_t)d->recorded % 16 == 0 ? 16
             : run_in % 8 == 0 && (uintptr_t)d->recorded % 8 == 0 ? 8 : 0;
    /* the direct path: whole output vectors whose V inputs are one aligned load of at most 16
     * bytes (V * in_bytes; the recording's runs start at multiples of topk, a multiple of V) */
    int in_load = (16 / out_bytes) * in_bytes;
    int direct = 0;     /* > 0: the direct path with this many tokens per block */
    if (PP__REPLAY_DIRECT && vec && in_load <= 16 && (uintptr_t)d->recorded % in_load == 0) {
        /* measured on an H100 (bench/RESULTS.md, 256k tokens x 15 layers x topk 8): token-major
         * output 84% of copy bandwidth direct (32 tokens a block) against 67% through the
         * transpose. Layer-major output takes the staged path below when it can (77 .. 87%
         * against 68 .. 86% through the transpose and 72 .. 79% direct). */
        if (d->token_major) direct = PP__REPLAY_DIRECT_TILE / 2;
        else if (in_bytes == 1 && out_bytes == 4) direct = PP__REPLAY_DIRECT_TILE;
    }
    /* the staged path (layer-major): tokens per block so that their runs fill about 16 KiB
     * (measured: uint8 recordings best at 64 tokens, 9 KiB; int32 at 32 tokens, 16 KiB) */
    int staged = 0, tstride = 0, wload = 1;
    if (PP__REPLAY_STAGED_ON && vec && in_load <= 16 && !d->token_major) {
        long long run = (long long)d->topk * in_bytes, ts = ((long long)d->layer_count * run + 15) / 16;
        if (ts % 2 == 0) ts++;
        ts *= 16;
        long long fit = PP__REPLAY_STAGED_BYTES / ts;
        if (fit >= 8) {
            staged = (int)(fit < PP__REPLAY_DIRECT_TILE ? fit : PP__REPLAY_DIRECT_TILE);
            tstride = (int)ts;
            for (wload = 16; wload > 1; wload /= 2)
                if (run % wload == 0 && (uintptr_t)d->recorded % wload == 0) break;
            direct = 0;
        }
    }
    long long blocks = (d->tokens + tile - 1) / tile;
    if (blocks > 0x7FFFFFFFll || (direct && (d->tokens + direct - 1) / direct > 0x7FFFFFFFll) ||
        (staged && (d->tokens + staged - 1) / staged > 0x7FFFFFFFll))
        return pp__cuda_fail(err, PP_EINVAL, "%s: tokens=%lld: too many for one launch", fn, (long long)d->tokens);
    cudaStream_t st = pp__stream(stream);
    switch (in_bytes) {
    case 1: pp__replay_launch_in<uint8_t>(d, out_bytes, (unsigned)blocks, (int)tile, lstride, vec, wide, direct, staged, tstride, wload, &slots, st); break;
    case 2: pp__replay_launch_in<uint16_t>(d, out_bytes, (unsigned)blocks, (int)tile, lstride, vec, wide, direct, staged, tstride, wload, &slots, st); break;
    case 4: pp__replay_launch_in<int32_t>(d, out_bytes, (unsigned)blocks, (int)tile, lstride, vec, wide, direct, staged, tstride, wload, &slots, st); break;
    default: pp__replay_launch_in<int64_t>(d, out_bytes, (unsigned)blocks, (int)tile, lstride, vec, wide, direct, staged, tstride, wload, &slots, st); break;
    }
    return pp__cuda_launched(err, fn);
}

/* ============================================================================================
 * >>cuda-l2norm
 * The tensors are cut, once at plan time, into chunks of at most PP__L2_CHUNK elements; the
 * device-side chunk table holds (pointer, count, dtype) so one launch covers any number of
 * tensors. A persistent grid walks the chunks (block b takes b, b+grid, ...), sums squares in
 * fp32 per thread within a chunk and in fp64 across chunks, reduces per block, and the last block
 * to finish (a ticket counter, the one atomic of this file) adds the block partials in a fixed
 * order, so the result is the same bit for bit from run to run on the same device. It then
 * writes the sum of squares and, if asked, the clip scale min(1, max_norm / (norm + 1e-6)).
 * ============================================================================================ */

#define PP__L2_THREADS 512
#define PP__L2_UNROLL 4
#define PP__L2_CHUNK 16384   /* elements; a multiple of 8, so chunks of aligned tensors stay aligned */
#define PP__CLIP_EPS 1e-6f   /* as torch.nn.utils.clip_grad_norm_ and Megatron-LM */

struct pp__l2chunk {
    void *p;
    unsigned n;       /* elements */
    unsigned dtype;   /* pp_cuda_dtype, | 0x100 when p is 16-byte aligned */
};

struct pp_cuda_l2norm {
    pp__l2chunk *chunks;     /* device */
    double *partials;        /* device, one per block */
    unsigned *ticket;        /* device, zero between launches */
    int nchunks;
    int grid;
    int count;
    long long elements;
    long long bytes;
};

__device__ __forceinline__ float pp__bf16_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float pp__bf16_hi(unsigned u) { return __uint_as_float(u & 0xFFFF0000u); }
__device__ __forceinline__ float pp__f16_lo(unsigned u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xFFFF))); }
__device__ __forceinline__ float pp__f16_hi(unsigned u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }

__device__ __forceinline__ float pp__sq4_f32(uint4 v)
{
    float a = __uint_as_float(v.x), b = __uint_as_float(v.y), c = __uint_as_float(v.z), d = __uint_as_float(v.w);
    return a * a + b * b + c * c + d * d;
}
__device__ __forceinline__ float pp__sq2_bf16(unsigned u) { float a = pp__bf16_lo(u), b = pp__bf16_hi(u); return a * a + b * b; }
__device__ __forceinline__ float pp__sq2_f16(unsigned u) { float a = pp__f16_lo(u), b = pp__f16_hi(u); return a * a + b * b; }

__device__ __forceinline__ float pp__load_elem(const void *p, unsigned i, unsigned dtype)
{
    switch (dtype) {
    case PP_CUDA_F32: return ((const float *)p)[i];
    case PP_CUDA_BF16: return pp__bf16_lo(((const unsigned short *)p)[i]);
    default: return __half2float(__ushort_as_half(((const unsigned short *)p)[i]));
    }
}

/* Sum of squares of one chunk, this thread's share. */
__device__ __forceinline__ float pp__chunk_sumsq(pp__l2chunk ch)
{
    unsigned dtype = ch.dtype & 0xFF;
    unsigned per_vec = dtype == PP_CUDA_F32 ? 4 : 8;
    unsigned nvec = (ch.dtype & 0x100) ? ch.n / per_vec : 0;
    const uint4 *v = (const uint4 *)ch.p;
    float acc = 0.f;
    for (unsigned i0 = threadIdx.x; i0 < nvec; i0 += PP__L2_THREADS * PP__L2_UNROLL) {
        uint4 x[PP__L2_UNROLL];
#pragma unroll
        for (int k = 0; k < PP__L2_UNROLL; k++) {
            unsigned i = i0 + k * PP__L2_THREADS;
            x[k] = i < nvec ? __ldg(v + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < PP__L2_UNROLL; k++) {
            if (dtype == PP_CUDA_F32) acc += pp__sq4_f32(x[k]);
            else if (dtype == PP_CUDA_BF16)
                acc += pp__sq2_bf16(x[k].x) + pp__sq2_bf16(x[k].y) + pp__sq2_bf16(x[k].z) + pp__sq2_bf16(x[k].w);
            else
                acc += pp__sq2_f16(x[k].x) + pp__sq2_f16(x[k].y) + pp__sq2_f16(x[k].z) + pp__sq2_f16(x[k].w);
        }
    }
    for (unsigned i = nvec * per_vec + threadIdx.x; i < ch.n; i += PP__L2_THREADS) {
        float a = pp__load_elem(ch.p, i, dtype);
        acc += a * a;
    }
    return acc;
}

__device__ __forceinline__ double pp__block_sum(double x, double *smem)
{
    for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xFFFFFFFFu, x, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();                      /* smem may still be read by a previous call */
    if (lane == 0) smem[warp] = x;
    __syncthreads();
    x = 0;
    if (warp == 0) {
        x = lane < (int)(blockDim.x >> 5) ? smem[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xFFFFFFFFu, x, o);
    }
    return x;                             /* valid in thread 0 */
}

__device__ __forceinline__ float pp__clip_scale_of(float sumsq, float max_norm)
{
    float norm = sqrtf(sumsq);
    float s = max_norm / (norm + PP__CLIP_EPS);
    return s >= 1.f ? 1.f : s;            /* a NaN norm gives NaN, as torch.clamp does */
}

__global__ void __launch_bounds__(PP__L2_THREADS)
pp__l2_kernel(const pp__l2chunk *__restrict__ chunks, int nchunks, double *__restrict__ partials,
              unsigned *ticket, float *sumsq_out, float *scale_out, float max_norm)
{
    __shared__ double smem[32];
    __shared__ bool last;
    double acc = 0.0;
    for (int c = blockIdx.x; c < nchunks; c += gridDim.x) acc += (double)pp__chunk_sumsq(chunks[c]);
    acc = pp__block_sum(acc, smem);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = acc;
        __threadfence();                  /* the partial is visible before the ticket is taken */
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    double s = 0.0;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += PP__L2_THREADS) s += ((volatile double *)partials)[b];
    s = pp__block_sum(s, smem);
    if (threadIdx.x == 0) {
        float f = (float)s;
        *sumsq_out = f;
        if (scale_out) *scale_out = pp__clip_scale_of(f, max_norm);
        *ticket = 0;                      /* ready for the next launch on this stream */
    }
}

__global__ void pp__clip_scale_kernel(const float *sumsq, float max_norm, float *scale)
{
    *scale = pp__clip_scale_of(*sumsq, max_norm);
}

/* x *= *scale over every chunk, in the tensor's own dtype (round to nearest even); when the scale
 * is exactly 1 the kernel reads nothing else and returns. */
__global__ void __launch_bounds__(PP__L2_THREADS)
pp__scale_kernel(const pp__l2chunk *__restrict__ chunks, int nchunks, const float *scale_p)
{
    float s = __ldg(scale_p);
    if (s == 1.f) return;
    for (int c = blockIdx.x; c < nchunks; c += gridDim.x) {
        pp__l2chunk ch = chunks[c];
        unsigned dtype = ch.dtype & 0xFF;
        unsigned per_vec = dtype == PP_CUDA_F32 ? 4 : 8;
        unsigned nvec = (ch.dtype & 0x100) ? ch.n / per_vec : 0;
        uint4 *v = (uint4 *)ch.p;
        for (unsigned i = threadIdx.x; i < nvec; i += PP__L2_THREADS) {
            uint4 x = v[i];
            unsigned *w = (unsigned *)&x;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (dtype == PP_CUDA_F32) w[k] = __float_as_uint(__uint_as_float(w[k]) * s);
                else if (dtype == PP_CUDA_BF16) {
                    __nv_bfloat162 h = __floats2bfloat162_rn(pp__bf16_lo(w[k]) * s, pp__bf16_hi(w[k]) * s);
                    w[k] = *(unsigned *)&h;
                } else {
                    __half2 h = __floats2half2_rn(pp__f16_lo(w[k]) * s, pp__f16_hi(w[k]) * s);
                    w[k] = *(unsigned *)&h;
                }
            }
            v[i] = x;
        }
        for (unsigned i = nvec * per_vec + threadIdx.x; i < ch.n; i += PP__L2_THREADS) {
            if (dtype == PP_CUDA_F32) ((float *)ch.p)[i] *= s;
            else if (dtype == PP_CUDA_BF16) {
                __nv_bfloat16 h = __float2bfloat16_rn(pp__load_elem(ch.p, i, dtype) * s);
                ((__nv_bfloat16 *)ch.p)[i] = h;
            } else {
                __half h = __float2half_rn(pp__load_elem(ch.p, i, dtype) * s);
                ((__half *)ch.p)[i] = h;
            }
        }
    }
}

static size_t pp__dtype_bytes(int dtype) { return dtype == PP_CUDA_F32 ? 4 : 2; }

extern "C" void pp_cuda_l2norm_free(pp_cuda_l2norm *plan)
{
    if (!plan) return;
    cudaFree(plan->chunks);
    cudaFree(plan->partials);
    cudaFree(plan->ticket);
    free(plan);
}

extern "C" pp_status pp_cuda_l2norm_create(const pp_cuda_tensor *tensors, int count,
                                           pp_cuda_l2norm **out, pp_error *err)
{
    const char *fn = "pp_cuda_l2norm_create";
    if (!out) return pp__cuda_fail(err, PP_EINVAL, "%s: out=NULL: needs somewhere to put the plan", fn);
    *out = NULL;
    if (count < 0) return pp__cuda_fail(err, PP_EINVAL, "%s: count=%d: must not be negative", fn, count);
    if (count > 0 && !tensors) return pp__cuda_fail(err, PP_EINVAL, "%s: tensors=NULL with count=%d", fn, count);
    long long nchunks = 0, elements = 0, bytes = 0;
    for (int i = 0; i < count; i++) {
        const pp_cuda_tensor *t = &tensors[i];
        if (t->dtype != PP_CUDA_F32 && t->dtype != PP_CUDA_BF16 && t->dtype != PP_CUDA_F16)
            return pp__cuda_fail(err, PP_EINVAL, "%s: tensors[%d].dtype=%d: must be PP_CUDA_F32, "
                                 "PP_CUDA_BF16 or PP_CUDA_F16", fn, i, (int)t->dtype);
        if (t->numel < 0)
            return pp__cuda_fail(err, PP_EINVAL, "%s: tensors[%d].numel=%lld: must not be negative", fn,
                                 i, (long long)t->numel);
        if (t->numel > 0 && !t->data)
            return pp__cuda_fail(err, PP_EINVAL, "%s: tensors[%d].data=NULL with numel=%lld", fn, i,
                                 (long long)t->numel);
        if (t->numel > 0 && (uintptr_t)t->data % pp__dtype_bytes(t->dtype) != 0)
            return pp__cuda_fail(err, PP_EINVAL, "%s: tensors[%d].data=%p: must be aligned to its element "
                                 "size (%zu bytes)", fn, i, t->data, pp__dtype_bytes(t->dtype));
        nchunks += (t->numel + PP__L2_CHUNK - 1) / PP__L2_CHUNK;
        elements += t->numel;
        bytes += t->numel * (long long)pp__dtype_bytes(t->dtype);
    }
    if (nchunks > 0x7FFFFFFFll)
        return pp__cuda_fail(err, PP_EINVAL, "%s: %lld elements make %lld chunks, more than %d", fn,
                             elements, nchunks, 0x7FFFFFFF);

    pp_cuda_l2norm *plan = (pp_cuda_l2norm *)calloc(1, sizeof *plan);
    if (!plan) return pp__cuda_fail(err, PP_ENOMEM, "%s: out of host memory", fn);
    plan->nchunks = (int)nchunks;
    plan->count = count;
    plan->elements = elements;
    plan->bytes = bytes;
    {
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pp__l2_kernel, PP__L2_THREADS, 0) != cudaSuccess
            || per_sm < 1)
            per_sm = 1;
        long long g = (long long)pp__device_sms() * per_sm;
        plan->grid = (int)(nchunks < g ? (nchunks > 0 ? nchunks : 1) : g);
    }
    pp__l2chunk *host = (pp__l2chunk *)calloc((size_t)(nchunks > 0 ? nchunks : 1), sizeof *host);
    if (!host) { free(plan); return pp__cuda_fail(err, PP_ENOMEM, "%s: out of host memory", fn); }
    long long c = 0;
    for (int i = 0; i < count; i++) {
        const pp_cuda_tensor *t = &tensors[i];
        size_t eb = pp__dtype_bytes(t->dtype);
        for (long long s = 0; s < t->numel; s += PP__L2_CHUNK) {
            long long n = t->numel - s < PP__L2_CHUNK ? t->numel - s : PP__L2_CHUNK;
            char *p = (char *)t->data + s * (long long)eb;
            host[c].p = p;
            host[c].n = (unsigned)n;
            host[c].dtype = (unsigned)t->dtype | ((uintptr_t)p % 16 == 0 ? 0x100u : 0u);
            c++;
        }
    }
    cudaError_t e;
    if ((e = cudaMalloc((void **)&plan->chunks, sizeof *host * (size_t)(nchunks > 0 ? nchunks : 1))) != cudaSuccess
        || (e = cudaMalloc((void **)&plan->partials, sizeof(double) * (size_t)plan->grid)) != cudaSuccess
        || (e = cudaMalloc((void **)&plan->ticket, sizeof(unsigned))) != cudaSuccess
        || (e = cudaMemcpy(plan->chunks, host, sizeof *host * (size_t)nchunks, cudaMemcpyHostToDevice)) != cudaSuccess
        || (e = cudaMemset(plan->ticket, 0, sizeof(unsigned))) != cudaSuccess) {
        free(host);
        pp_cuda_l2norm_free(plan);
        return pp__cuda_error(err, fn, e);
    }
    free(host);
    *out = plan;
    return pp__cuda_ok(err);
}

extern "C" pp_status pp_cuda_l2norm_sumsq(const pp_cuda_l2norm *plan, float *sumsq, float max_norm,
                                          float *scale, void *stream, pp_error *err)
{
    const char *fn = "pp_cuda_l2norm_sumsq";
    if (!plan) return pp__cuda_fail(err, PP_EINVAL, "%s: plan=NULL: make one with pp_cuda_l2norm_create", fn);
    if (!sumsq) return pp__cuda_fail(err, PP_EINVAL, "%s: sumsq=NULL: needs one float on the device", fn);
    if (scale && !(max_norm > 0.f))
        return pp__cuda_fail(err, PP_EINVAL, "%s: max_norm=%g: must be positive when a scale is asked for",
                             fn, (double)max_norm);
    pp__l2_kernel<<<plan->grid, PP__L2_THREADS, 0, pp__stream(stream)>>>(
        plan->chunks, plan->nchunks, plan->partials, plan->ticket, sumsq, scale, max_norm);
    return pp__cuda_launched(err, fn);
}

extern "C" pp_status pp_cuda_clip_scale(const float *sumsq, float max_norm, float *scale, void *stream,
                                        pp_error *err)
{
    const char *fn = "pp_cuda_clip_scale";
    if (!sumsq) return pp__cuda_fail(err, PP_EINVAL, "%s: sumsq=NULL: needs one float on the device", fn);
    if (!scale) return pp__cuda_fail(err, PP_EINVAL, "%s: scale=NULL: needs one float on the device", fn);
    if (!(max_norm > 0.f))
        return pp__cuda_fail(err, PP_EINVAL, "%s: max_norm=%g: must be positive", fn, (double)max_norm);
    pp__clip_scale_kernel<<<1, 1, 0, pp__stream(stream)>>>(sumsq, max_norm, scale);
    return pp__cuda_launched(err, fn);
}

extern "C" pp_status pp_cuda_l2norm_scale(const pp_cuda_l2norm *plan, const float *scale, void *stream,
                                          pp_error *err)
{
    const char *fn = "pp_cuda_l2norm_scale";
    if (!plan) return pp__cuda_fail(err, PP_EINVAL, "%s: plan=NULL: make one with pp_cuda_l2norm_create", fn);
    if (!scale) return pp__cuda_fail(err, PP_EINVAL, "%s: scale=NULL: needs one float on the device", fn);
    if (plan->nchunks == 0) return pp__cuda_ok(err);
    pp__scale_kernel<<<plan->grid, PP__L2_THREADS, 0, pp__stream(stream)>>>(plan->chunks, plan->nchunks, scale);
    return pp__cuda_launched(err, fn);
}

extern "C" int64_t pp_cuda_l2norm_bytes(const pp_cuda_l2norm *plan) { return plan ? plan->bytes : 0; }
