/* bench_pack — how fast pipepar packs a big RL batch, and how close to the optimum it lands.
 *
 *     build/bench_pack                         1,000,000 long-tailed lengths into 65,536-token bins
 *     build/bench_pack --n 100000 --algo bfd   one algorithm, another size
 *     build/bench_pack --write-lengths FILE    also write the lengths (one a line) for
 *                                              bench/pack_python.py, which times NeMo RL's way
 *
 * Lengths: a Pareto tail, len = min(capacity, floor(256 / u^(1/1.2))) for u uniform in (0, 1]
 * from a fixed xorshift seed: most sequences a few hundred tokens, a few thousand near the
 * capacity, the shape of RL rollouts with a long-answer tail. Each algorithm packs them --repeat
 * times on one core; the median wall time and the median CPU time of the packing thread (they
 * differ when other work shares the machine) are reported with the bin count, the lower bound
 * ceil(sum/capacity) and a checksum of the bins (bench/pack_python.py computes the same one, so
 * the two can be compared bin for bin). */
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y);
}

/* FNV-1a over the bins: each sequence index + 1, then 0 after each bin (same in Python). */
static uint64_t bins_checksum(const pp_packing *p)
{
    uint64_t h = 1469598103934665603ull;
    int b, k;
    for (b = 0; b < p->num_bins; b++) {
        for (k = p->bin_offsets[b]; k < p->bin_offsets[b + 1]; k++) {
            h ^= (uint64_t)p->seqs[k] + 1u;
            h *= 1099511628211ull;
        }
        h ^= 0u;
        h *= 1099511628211ull;
    }
    return h;
}

static void make_lengths(int32_t *len, int n, int32_t capacity, uint64_t seed)
{
    uint64_t x = seed ? seed : 88172645463325252ull;
    int i;
    for (i = 0; i < n; i++) {
        double u, v;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        u = ((double)(x >> 11) + 1.0) / 9007199254740992.0;    /* (0, 1] */
        v = floor(256.0 / pow(u, 1.0 / 1.2));
        len[i] = v >= (double)capacity ? capacity : (int32_t)v;
    }
}

int main(int argc, char **argv)
{
    int n = 1000000, repeat = 5, i, a, only = -1;
    int32_t capacity = 65536;
    const char *write_path = NULL;
    int32_t *len;
    int64_t sum = 0, lb;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--capacity") && i + 1 < argc) capacity = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--write-lengths") && i + 1 < argc) write_path = argv[++i];
        else if (!strcmp(argv[i], "--algo") && i + 1 < argc) {
            pp_pack_algo algo;
            pp_error err;
            if (pp_pack_algo_parse(argv[++i], &algo, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 2; }
            only = (int)algo;
        } else {
            fprintf(stderr, "usage: bench_pack [--n N] [--capacity C] [--algo A] [--repeat R] [--write-lengths FILE]\n");
            return 2;
        }
    }
    if (n < 1 || capacity < 1 || repeat < 1 || repeat > 100) { fprintf(stderr, "bench_pack: bad arguments\n"); return 2; }
    len = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    if (!len) { fprintf(stderr, "bench_pack: out of memory\n"); return 1; }
    make_lengths(len, n, capacity, 0);
    for (i = 0; i < n; i++) sum += len[i];
    lb = pp_pack_lower_bound(len, n, capacity);
    if (write_path) {
        FILE *f = fopen(write_path, "w");
        if (!f) { fprintf(stderr, "bench_pack: cannot write %s\n", write_path); return 1; }
        for (i = 0; i < n; i++) fprintf(f, "%d\n", (int)len[i]);
        fclose(f);
    }
    printf("bench_pack: %d sequences, capacity %d, %lld tokens (mean %.1f), lower bound %lld bins, one core\n",
           n, (int)capacity, (long long)sum, (double)sum / n, (long long)lb);
    printf("%-30s %8s %8s %8s %8s %10s  %s\n", "algorithm", "wall_ms", "cpu_ms", "bins", "vs_lb", "fill", "checksum");
    for (a = 0; a < (int)PP_PACK_ALGO_COUNT; a++) {
        pp_pack_config cfg;
        double t[100], c[100];
        pp_packing *p = NULL;
        pp_error err;
        int r;
        if (only >= 0 && a != only) continue;
        memset(&cfg, 0, sizeof cfg);
        cfg.capacity = capacity;
        cfg.algo = (pp_pack_algo)a;
        for (r = 0; r < repeat; r++) {
            double t0, c0;
            pp_packing_free(p);
            p = NULL;
            t0 = clock_ms(CLOCK_MONOTONIC);
            c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
            if (pp_pack(len, n, &cfg, &p, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
            c[r] = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
            t[r] = clock_ms(CLOCK_MONOTONIC) - t0;
        }
        qsort(t, (size_t)repeat, sizeof t[0], cmp_double);
        qsort(c, (size_t)repeat, sizeof c[0], cmp_double);
        printf("%-30s %8.2f %8.2f %8d %+7.3f%% %9.4f%%  %016llx\n", pp_pack_algo_name(cfg.algo), t[repeat / 2],
               c[repeat / 2], p->num_bins,
               100.0 * (double)(p->num_bins - lb) / (double)lb,
               100.0 * (double)sum / ((double)p->num_bins * capacity), (unsigned long long)bins_checksum(p));
        pp_packing_free(p);
    }
    free(len);
    return 0;
}
