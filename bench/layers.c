/* bench/layers.c — how long layer assignment takes: the exact balanced split (dynamic
 * programme, O(stages * layers^2)) at model sizes people train, and parsing a layout string.
 *
 *     build/bench_layers            prints one line per case: size, best of 5 runs, bottleneck
 */
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    static const struct { int layers, pp, vpp; const char *what; } cases[] = {
        { 61, 16, 2, "DeepSeek-V3 (61 layers), pp 16 x vpp 2" },
        { 128, 8, 4, "128 layers, pp 8 x vpp 4" },
        { 512, 32, 2, "512 blocks, pp 32 x vpp 2" },
        { 1024, 64, 1, "1024 blocks, pp 64" },
        { 2048, 16, 2, "2048 blocks, pp 16 x vpp 2" },
    };
    size_t c;
    int rep;
    pp_error err;
    printf("%-40s %12s %14s\n", "balanced split", "best of 5", "max stage cost");
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c].layers, i;
        double *cost = (double *)malloc(sizeof(double) * (size_t)n), best = 1e30, bottleneck = 0;
        unsigned s = 1;
        for (i = 0; i < n; i++) {           /* dense-ish first layers, then MoE-ish noise */
            s = s * 1664525u + 1013904223u;
            cost[i] = (i < 3 ? 0.6 : 1.0) + (double)(s >> 24) / 1024.0;
        }
        for (rep = 0; rep < 5; rep++) {
            pp_balance_config b;
            pp_layers *l = NULL;
            double t0;
            memset(&b, 0, sizeof b);
            b.num_layers = n; b.pp = cases[c].pp; b.vpp = cases[c].vpp; b.cost = cost;
            b.embedding_cost = 1.5; b.loss_cost = 2.5;
            t0 = now();
            if (pp_layers_balance(&b, &l, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
            t0 = now() - t0;
            if (t0 < best) best = t0;
            bottleneck = l->max_cost;
            pp_layers_free(l);
        }
        printf("%-40s %9.3f ms %14.4f\n", cases[c].what, best * 1e3, bottleneck);
        free(cost);
    }
    {
        pp_layers_config cfg;
        double t0, best = 1e30;
        memset(&cfg, 0, sizeof cfg);
        cfg.pp = 16; cfg.layout = "Et*3|(tt|)*29,m|L"; cfg.moe_layer_freq = "[0]*3+[1]*58";
        for (rep = 0; rep < 5; rep++) {
            int k;
            t0 = now();
            for (k = 0; k < 1000; k++) {
                pp_layers *l = NULL;
                if (pp_layers_build(&cfg, &l, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
                pp_layers_free(l);
            }
            t0 = (now() - t0) / 1000;
            if (t0 < best) best = t0;
        }
        printf("%-40s %9.3f us\n", "build DeepSeek-V3 layout + moe freq", best * 1e6);
    }
    return 0;
}
