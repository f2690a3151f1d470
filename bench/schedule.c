/* bench/schedule.c — how long the host side of a schedule takes at a large scale.
 *
 * Builds, lowers, validates and simulates interleaved 1F1B with pp=64, vpp=8, mb=1024
 * (1,048,576 compute actions, 2,064,384 with communication), one thread, and prints the
 * time of each phase, best of 5. Target: the whole under 1 second on one core.
 *     build/bench_schedule [pp vpp mb]                                                      */
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    pp_schedule_config cfg;
    double best[5] = { 1e9, 1e9, 1e9, 1e9, 1e9 };
    int rep, r;
    long actions = 0;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = PP_INTERLEAVED_1F1B;
    cfg.pp = argc > 1 ? atoi(argv[1]) : 64;
    cfg.vpp = argc > 2 ? atoi(argv[2]) : 8;
    cfg.mb = argc > 3 ? atoi(argv[3]) : 1024;
    for (rep = 0; rep < 5; rep++) {
        pp_schedule *s = NULL;
        pp_sim_result *sim = NULL;
        pp_error err;
        double t0 = now(), t1, t2, t3, t4;
        if (pp_schedule_build(&cfg, &s, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
        t1 = now();
        if (pp_schedule_lower(s, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
        t2 = now();
        if (pp_schedule_validate(s, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
        t3 = now();
        if (pp_simulate(s, NULL, &sim, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
        t4 = now();
        if (t1 - t0 < best[0]) best[0] = t1 - t0;
        if (t2 - t1 < best[1]) best[1] = t2 - t1;
        if (t3 - t2 < best[2]) best[2] = t3 - t2;
        if (t4 - t3 < best[3]) best[3] = t4 - t3;
        if (t4 - t0 < best[4]) best[4] = t4 - t0;
        for (actions = 0, r = 0; r < s->pp; r++) actions += s->length[r];
        if (rep == 0)
            printf("interleaved pp=%d vpp=%d mb=%d: %ld actions with communication, bubble %.2f%%\n", cfg.pp, cfg.vpp,
                   cfg.mb, actions, 100.0 * sim->bubble_mean);
        pp_sim_result_free(sim);
        pp_schedule_free(s);
    }
    printf("best of 5, seconds: build %.3f  lower %.3f  validate %.3f  simulate %.3f  total %.3f  (target < 1.000)\n",
           best[0], best[1], best[2], best[3], best[4]);
    return best[4] < 1.0 ? 0 : 1;
}
