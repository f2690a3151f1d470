/* bench/kernels.cu — achieved bandwidth of every pipepar_cuda.cu kernel against the device's own
 * measured device-to-device copy bandwidth, at sizes a trainer meets.
 *
 *     build/bench_kernels [--reps N]
 *
 * Bandwidth counts the fewest bytes each job must move: every input byte read once, every output
 * byte written once (index maps and cu_seqlens included where the kernel reads them). The
 * reference is cudaMemcpyAsync device-to-device of 1 GiB, counted as read + write. Each line is
 * the median of N timed launches (CUDA events around each), after warm-up launches; buffers are
 * filled with random data and are several times larger than the L2 cache unless the job itself
 * is small (those lines say so: they are launch-bound, not bandwidth-bound). Results go to stdout
 * as a Markdown table (bench/RESULTS.md keeps the current one, with its device and date). */
#include <cuda_runtime.h>
#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "../pipepar.h"

#define CUDA(call) do { cudaError_t c_ = (call); if (c_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(c_)); exit(1); } } while (0)
#define PP(call) do { pp_error e_; if ((call) != PP_OK) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, e_.message); exit(1); } } while (0)
#define E (&e_)

static int g_reps = 20;
static double g_copy_gbs;

__global__ void fill_u32(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
        p[i] = x;
    }
}

/* values in [-1, 1) as fp32 (dtype 0) or bf16 (1) */
__global__ void fill_values(void *p, size_t n, int dtype, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15;
        float f = (float)(x & 0xFFFFFF) / 8388608.f - 1.f;
        if (dtype == 0) ((float *)p)[i] = f;
        else ((unsigned short *)p)[i] = (unsigned short)(__float_as_uint(f) >> 16);
    }
}

static void *dalloc(size_t bytes)
{
    void *p;
    CUDA(cudaMalloc(&p, bytes ? bytes : 16));
    fill_u32<<<1024, 256>>>((uint32_t *)p, bytes / 4, (uint32_t)bytes);
    CUDA(cudaGetLastError());
    return p;
}

template <class F>
static double median_us(F fn)
{
    cudaEvent_t a, b;
    CUDA(cudaEventCreate(&a));
    CUDA(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) fn();
    CUDA(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < g_reps; i++) {
        CUDA(cudaEventRecord(a));
        fn();
        CUDA(cudaEventRecord(b));
        CUDA(cudaEventSynchronize(b));
        float ms;
        CUDA(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CUDA(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return 1000.0 * t[t.size() / 2];
}

static void line(const char *name, const char *size, double bytes, double us, const char *note = "")
{
    double gbs = bytes / (us * 1e-6) / 1e9;
    printf("| %-34s | %-30s | %9.1f | %8.1f | %6.1f%% | %s\n", name, size, us, gbs,
           g_copy_gbs > 0 ? 100.0 * gbs / g_copy_gbs : 100.0, note);
    fflush(stdout);
}

/* The same job's bytes through cudaMemcpyAsync (bytes/2 copied = bytes read + written), timed
 * the same way: at a few hundred MB the launch ramp and tail weigh more than at 1 GiB, and this
 * says how far the kernel is from a copy of its own size. Returns the note for line(). */
static const char *same_size_copy(double bytes, double us, void *dst, const void *src)
{
    static char note[96];
    size_t half = ((size_t)(bytes / 2) + 15) / 16 * 16;
    double ref = median_us([&] { CUDA(cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice)); });
    snprintf(note, sizeof note, "%.1f%% of a copy of the same bytes (%.1f us)", 100.0 * ref / us, ref);
    return note;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
    cudaDeviceProp prop;
    CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MiB, %zu MiB\n\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, prop.totalGlobalMem >> 20);
    printf("| %-34s | %-30s | %9s | %8s | %7s | %s\n", "kernel", "size", "us (med)", "GB/s", "of copy", "note");
    printf("|%s|%s|%s|%s|%s|---\n", "------------------------------------", "--------------------------------",
           "-----------", "----------", "---------");

    /* --- the reference: cudaMemcpy device to device, 1 GiB ------------------------------- */
    const size_t GiB = (size_t)1 << 30;
    char *A = (char *)dalloc(GiB), *B = (char *)dalloc(GiB), *C = (char *)dalloc(GiB);
    double us = median_us([&] { CUDA(cudaMemcpyAsync(B, A, GiB, cudaMemcpyDeviceToDevice, 0)); });
    g_copy_gbs = 2.0 * GiB / (us * 1e-6) / 1e9;
    line("cudaMemcpyAsync D2D (reference)", "1 GiB", 2.0 * GiB, us);
    us = median_us([&] { PP(pp_cuda_copy_rows(A, B, 65536, 16384, NULL, E)); });
    line("pp_cuda_copy_rows (engine)", "64k x 16 KiB rows", 2.0 * GiB, us);

    /* --- CP split / merge, BSHD: 64k tokens x 8192 hidden bf16 ---------------------------- */
    const long long T = 65536, RB = 8192 * 2;
    int cps[] = {2, 4, 8};
    for (int cp : cps) {
        char name[64], size[64];
        double bytes = 2.0 * (double)(T / cp) * RB;
        snprintf(name, sizeof name, "pp_cuda_cp_split cp=%d", cp);
        snprintf(size, sizeof size, "[1, 64k, 8192] bf16 -> 1/%d", cp);
        us = median_us([&] { PP(pp_cuda_cp_split(A, B, 1, T, RB, cp, 1, NULL, E)); });
        line(name, size, bytes, us);
    }
    us = median_us([&] { PP(pp_cuda_cp_split(A, B, 4, T / 4, RB, 2, 1, NULL, E)); });
    line("pp_cuda_cp_split cp=2 (BSHD b=4)", "[4, 16k, 8192] bf16", 2.0 * (T / 2) * RB, us);
    us = median_us([&] { PP(pp_cuda_cp_unsplit(B, A, 1, T, RB, 2, 1, NULL, E)); });
    line("pp_cuda_cp_unsplit cp=2", "[1, 32k, 8192] -> [1, 64k]", 2.0 * (T / 2) * RB, us);
    us = median_us([&] { PP(pp_cuda_cp_merge(A, B, 1, T, RB, 2, NULL, E)); });
    line("pp_cuda_cp_merge cp=2", "2 x [1, 32k, 8192] -> [1, 64k]", 2.0 * T * RB, us);
    us = median_us([&] { PP(pp_cuda_cp_merge(A, B, 1, T, RB, 8, NULL, E)); });
    line("pp_cuda_cp_merge cp=8", "8 x [1, 8k, 8192] -> [1, 64k]", 2.0 * T * RB, us);
    /* SBHD as Megatron's activations: [s, b, h] with b*h*2 bytes per position */
    us = median_us([&] { PP(pp_cuda_cp_split(A, B, 1, 16384, 4 * RB, 2, 0, NULL, E)); });
    line("pp_cuda_cp_split cp=2 (SBHD)", "[16k, 4, 8192] bf16", 2.0 * (16384 / 2) * 4 * RB, us);
    /* a narrow row: 64k x 1024 hidden bf16 (2 KiB rows), 4 rows of 256 threads per block */
    us = median_us([&] { PP(pp_cuda_cp_split(A, B, 1, 8 * T, 2048, 2, 1, NULL, E)); });
    line("pp_cuda_cp_split cp=2 (2 KiB rows)", "[1, 512k, 1024] bf16", 2.0 * (8 * T / 2) * 2048, us);

    /* --- CP split, THD: 64k packed tokens in sequences of random length ------------------ */
    {
        int cp = 2;
        std::vector<int> cu(1, 0);
        srand(7);
        while (cu.back() < T) {
            int len = (64 + rand() % 8000) / (2 * cp) * (2 * cp);
            if (cu.back() + len > T) len = (int)(T - cu.back());
            cu.push_back(cu.back() + len);
        }
        int nseq = (int)cu.size() - 1;
        int *dcu;
        CUDA(cudaMalloc((void **)&dcu, cu.size() * 4));
        CUDA(cudaMemcpy(dcu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
        char size[64];
        snprintf(size, sizeof size, "64k tok (%d seqs) x 8192 bf16", nseq);
        us = median_us([&] { PP(pp_cuda_cp_split_thd(A, B, dcu, nseq, T, RB, cp, 1, NULL, E)); });
        line("pp_cuda_cp_split_thd cp=2", size, 2.0 * (T / cp) * RB + cu.size() * 4, us);
        us = median_us([&] { PP(pp_cuda_cp_merge_thd(A, B, dcu, nseq, T, RB, cp, NULL, E)); });
        line("pp_cuda_cp_merge_thd cp=2", size, 2.0 * T * RB + cu.size() * 4, us);
        /* the same THD split on a token-id-sized row: launch-bound at this size */
        us = median_us([&] { PP(pp_cuda_cp_split_thd(A, B, dcu, nseq, T, 4, cp, 1, NULL, E)); });
        line("pp_cuda_cp_split_thd cp=2 (int32)", "64k token ids", 2.0 * (T / cp) * 4 + cu.size() * 4, us,
             "0.3 MB: launch-bound");
        cudaFree(dcu);
    }

    /* --- gather / scatter by map: a random permutation with 5% padding ------------------- */
    {
        std::vector<int64_t> map(T);
        for (long long i = 0; i < T; i++) map[i] = i;
        for (long long i = T - 1; i > 0; i--) std::swap(map[i], map[rand() % (i + 1)]);
        for (long long i = 0; i < T; i += 20) map[i] = -1;
        int64_t *dmap;
        CUDA(cudaMalloc((void **)&dmap, T * 8));
        CUDA(cudaMemcpy(dmap, map.data(), T * 8, cudaMemcpyHostToDevice));
        double pad = (double)((T + 19) / 20);
        us = median_us([&] { PP(pp_cuda_gather_rows(A, B, dmap, 8, T, RB, NULL, E)); });
        line("pp_cuda_gather_rows (int64 map)", "64k x 8192 bf16, permuted", (2.0 * T - pad) * RB + T * 8.0, us);
        us = median_us([&] { PP(pp_cuda_scatter_rows(A, B, dmap, 8, T, RB, NULL, E)); });
        line("pp_cuda_scatter_rows (int64 map)", "64k x 8192 bf16, permuted", 2.0 * (T - pad) * RB + T * 8.0, us);
        cudaFree(dmap);
    }

    /* --- pack: token ids, labels, loss mask, positions of one bin; unpack logprobs ------- */
    long long sizes[] = {65536, 16ll << 20};
    for (long long NT : sizes) {
        /* sequences of 64..8000 tokens back to back in the source, each padded to a multiple of 8 */
        std::vector<int64_t> rows;
        std::vector<int> cu(1, 0);
        long long src = 0;
        srand(11);
        while ((long long)rows.size() < NT) {
            int len = 64 + rand() % 8000, padded = (len + 7) / 8 * 8;
            if ((long long)rows.size() + padded > NT) { padded = (int)(NT - (long long)rows.size()); len = std::min(len, padded); }
            for (int t = 0; t < padded; t++) rows.push_back(t < len ? src + t : -1);
            src += len;
            cu.push_back(cu.back() + padded);
        }
        int nseq = (int)cu.size() - 1;
        long long real = src;
        int64_t *drows;
        int *dcu;
        CUDA(cudaMalloc((void **)&drows, NT * 8));
        CUDA(cudaMalloc((void **)&dcu, cu.size() * 4));
        CUDA(cudaMemcpy(drows, rows.data(), NT * 8, cudaMemcpyHostToDevice));
        CUDA(cudaMemcpy(dcu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
        /* sources at A (tokens int32), A + 256 MiB (labels int32), A + 512 MiB (mask u8); outputs in B */
        pp_cuda_pack_field f[3] = {
            { A, B, 4, 0 },
            { A + (256 << 20), B + (256 << 20), 4, -100 },
            { A + (512 << 20), B + (512 << 20), 1, 0 },
        };
        char name[64], size[64];
        double bytes = NT * 8.0 + cu.size() * 4.0 + real * 9.0 + NT * (9.0 + 4.0);
        snprintf(name, sizeof name, "pp_cuda_pack (3 fields + pos)");
        snprintf(size, sizeof size, "%lld tokens, %d seqs", NT, nseq);
        us = median_us([&] { PP(pp_cuda_pack(drows, dcu, nseq, NT, f, 3, B + (768 << 20), 4, NULL, E)); });
        line(name, size, bytes, us, NT <= 65536 ? "1.6 MB: launch-bound" : "");
        us = median_us([&] { PP(pp_cuda_scatter_rows(A, C, drows, 8, NT, 4, NULL, E)); });
        line("unpack fp32 (pp_cuda_scatter_rows)", size, NT * 8.0 + real * 8.0, us, NT <= 65536 ? "launch-bound" : "");
        cudaFree(drows);
        cudaFree(dcu);
    }

    /* --- router replay: DeepSeek-V3-like 58 MoE layers, topk 8; a stage of 15 layers; the
     *     local tokens are every other chunk of a 512k-token batch (a CP split), recorded uint8 */
    {
        const long long RT = 1 << 19, LT = RT / 2;
        const int L = 58, K = 8, LB = 15, LC = 15;
        std::vector<int64_t> rows(LT);
        for (long long i = 0; i < LT; i++) rows[i] = (i / 4096) * 8192 + (i % 4096) + ((i / 4096) % 2) * 4096;
        int64_t *drows;
        CUDA(cudaMalloc((void **)&drows, LT * 8));
        CUDA(cudaMemcpy(drows, rows.data(), LT * 8, cudaMemcpyHostToDevice));
        int outs[] = {8, 4};
        int ins[] = {1, 4};
        for (int in_b : ins)
            for (int out_b : outs) {
                pp_cuda_replay d;
                memset(&d, 0, sizeof d);
                d.recorded = A; d.recorded_bytes = in_b; d.moe_layers = L; d.topk = K;
                d.layer_begin = LB; d.layer_count = LC; d.rows = drows; d.index_bytes = 8;
                d.tokens = LT; d.dst = B; d.dst_bytes = out_b;
                char name[64], size[64];
                snprintf(name, sizeof name, "pp_cuda_replay_gather %s->%s", in_b == 1 ? "u8" : "i32", out_b == 8 ? "i64" : "i32");
                snprintf(size, sizeof size, "256k tok x 15 of 58 layers x 8");
                double bytes = LT * 8.0 + (double)LT * LC * K * (in_b + out_b);
                us = median_us([&] { PP(pp_cuda_replay_gather(&d, NULL, E)); });
                line(name, size, bytes, us, same_size_copy(bytes, us, C, A));
            }
        {
            pp_cuda_replay d;
            memset(&d, 0, sizeof d);
            d.recorded = A; d.recorded_bytes = 1; d.moe_layers = L; d.topk = K;
            d.layer_begin = LB; d.layer_count = LC; d.rows = drows; d.index_bytes = 8;
            d.tokens = LT; d.dst = B; d.dst_bytes = 8; d.token_major = 1;
            us = median_us([&] { PP(pp_cuda_replay_gather(&d, NULL, E)); });
            line("pp_cuda_replay_gather u8->i64 tok-major", "256k tok x 15 of 58 layers x 8", LT * 8.0 + (double)LT * LC * K * 9, us,
                 same_size_copy(LT * 8.0 + (double)LT * LC * K * 9, us, C, A));
        }
        cudaFree(drows);
    }

    /* --- multi-tensor L2 norm: 1000 mixed tensors vs one tensor of the same bytes --------- */
    {
        srand(3);
        std::vector<pp_cuda_tensor> ts;
        size_t total = 0;
        for (int i = 0; i < 1000; i++) {
            int kind = rand() % 10;
            long long n = kind < 3 ? 1024 + rand() % 16384                 /* norms, biases */
                        : kind < 7 ? 100000 + (long long)(rand() % 2000) * 1000  /* medium */
                        : 2000000 + (long long)(rand() % 4000) * 1000;       /* large matrices */
            pp_cuda_dtype dt = rand() % 2 ? PP_CUDA_BF16 : PP_CUDA_F32;
            size_t bytes = (size_t)n * (dt == PP_CUDA_F32 ? 4 : 2);
            void *p;
            CUDA(cudaMalloc(&p, bytes));
            fill_values<<<1024, 256>>>(p, (size_t)n, dt == PP_CUDA_F32 ? 0 : 1, (uint32_t)i);
            pp_cuda_tensor t = { p, n, dt };
            ts.push_back(t);
            total += bytes;
        }
        CUDA(cudaGetLastError());
        pp_cuda_l2norm *multi, *single_f32, *single_bf16;
        PP(pp_cuda_l2norm_create(ts.data(), (int)ts.size(), &multi, E));
        void *one;
        CUDA(cudaMalloc(&one, total));
        fill_values<<<1024, 256>>>(one, total / 4, 0, 99);
        pp_cuda_tensor t1 = { one, (int64_t)(total / 4), PP_CUDA_F32 }, t2 = { one, (int64_t)(total / 2), PP_CUDA_BF16 };
        PP(pp_cuda_l2norm_create(&t1, 1, &single_f32, E));
        PP(pp_cuda_l2norm_create(&t2, 1, &single_bf16, E));
        float *out;
        CUDA(cudaMalloc((void **)&out, 16));
        char size[64];
        snprintf(size, sizeof size, "1000 tensors, %.2f GB", total / 1e9);
        double um = median_us([&] { PP(pp_cuda_l2norm_sumsq(multi, out, 1.f, out + 1, NULL, E)); });
        line("pp_cuda_l2norm_sumsq (1000 mixed)", size, (double)total, um, "read-only");
        snprintf(size, sizeof size, "1 fp32 tensor, %.2f GB", total / 1e9);
        double u1 = median_us([&] { PP(pp_cuda_l2norm_sumsq(single_f32, out, 1.f, out + 1, NULL, E)); });
        line("pp_cuda_l2norm_sumsq (single fp32)", size, (double)total, u1, "read-only");
        snprintf(size, sizeof size, "1 bf16 tensor, %.2f GB", total / 1e9);
        double u2 = median_us([&] { PP(pp_cuda_l2norm_sumsq(single_bf16, out, 1.f, out + 1, NULL, E)); });
        line("pp_cuda_l2norm_sumsq (single bf16)", size, (double)total, u2, "read-only");
        /* scale in place with a scale below 1 (the clipping case): read + write */
        float h = 0.999f;
        CUDA(cudaMemcpy(out + 2, &h, 4, cudaMemcpyHostToDevice));
        snprintf(size, sizeof size, "1000 tensors, %.2f GB", total / 1e9);
        us = median_us([&] { PP(pp_cuda_l2norm_scale(multi, out + 2, NULL, E)); });
        line("pp_cuda_l2norm_scale (1000 mixed)", size, 2.0 * total, us);
        printf("\nmulti-tensor L2 over 1000 tensors vs one tensor of the same bytes: %.1f%% (fp32), %.1f%% (bf16) "
               "of the single-tensor speed (target >= 90%%)\n", 100.0 * u1 / um, 100.0 * u2 / um);
        pp_cuda_l2norm_free(multi);
        pp_cuda_l2norm_free(single_f32);
        pp_cuda_l2norm_free(single_bf16);
        for (auto &t : ts) cudaFree(t.data);
        cudaFree(one);
        cudaFree(out);
    }
    printf("\nreference copy bandwidth: %.1f GB/s (read + write)\n", g_copy_gbs);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    return 0;
}
