/* runtime.c — what the executor itself costs per action (build/bench_runtime).
 *
 * The callbacks do nothing but touch their tensors, so a step's time is the executor's walk,
 * the pool, and the threads transport (copying each tensor once, waking the receiver). Printed:
 * microseconds per step and per action, for pp = 1 (no transport traffic) and pp = 4 (every
 * boundary crosses threads), at two tensor sizes. Each configuration runs 20 warm-up steps then
 * times 200.                                                                                     */
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
#include <stdio.h>
#include <string.h>

typedef struct bench { size_t bytes; int steps; double seconds[64]; long long actions[64]; } bench;

static size_t b_bytes(void *u, int boundary, const pp_mb_info *info) { (void)boundary; (void)info; return ((bench *)u)->bytes; }
static int b_input(void *u, const pp_mb_info *info, void *x) { (void)info; memset(x, 1, ((bench *)u)->bytes > 64 ? 64 : ((bench *)u)->bytes); return 0; }
static int b_forward(void *u, const pp_mb_info *info, const void *in, void *out)
{
    (void)info;
    memcpy(out, in, ((bench *)u)->bytes > 64 ? 64 : ((bench *)u)->bytes);
    return 0;
}
static int b_loss(void *u, const pp_mb_info *info, const void *out, void *g, pp_loss *l)
{
    (void)u; (void)info; (void)out; (void)g;
    l->loss = 1;
    return 0;
}
static int b_backward(void *u, const pp_mb_info *info, const void *in, const void *gout, void *gin)
{
    (void)u; (void)info; (void)in; (void)gout; (void)gin;
    return 0;
}

static pp_schedule *g_sched;

static pp_status b_rank(void *user, int rank, pp_transport *t, pp_error *err)
{
    bench *b = (bench *)user;
    pp_executor_config cfg;
    pp_executor *ex = NULL;
    pp_status st;
    struct timespec t0, t1;
    int i;
    memset(&cfg, 0, sizeof cfg);
    cfg.schedule = g_sched;
    cfg.transport = *t;
    cfg.callbacks.user = b;
    cfg.callbacks.tensor_bytes = b_bytes;
    cfg.callbacks.input = b_input;
    cfg.callbacks.forward = b_forward;
    cfg.callbacks.loss = b_loss;
    cfg.callbacks.backward = b_backward;
    st = pp_executor_create(&cfg, &ex, err);
    if (st != PP_OK) return st;
    for (i = 0; i < 20 && st == PP_OK; i++) st = pp_run_step(ex, NULL, NULL, err);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 0; i < b->steps && st == PP_OK; i++) st = pp_run_step(ex, NULL, NULL, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    b->seconds[rank] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    b->actions[rank] = g_sched->length[rank];
    pp_executor_free(ex);
    return st;
}

int main(void)
{
    static const struct { pp_schedule_kind kind; int pp, vpp, mb; } cfgs[] = {
        { PP_1F1B, 1, 1, 32 }, { PP_1F1B, 4, 1, 32 }, { PP_INTERLEAVED_1F1B, 4, 2, 32 },
    };
    static const size_t sizes[] = { 4096, 1 << 20 };
    size_t c, z;
    printf("executor + threads transport, no-op model: 200 timed steps after 20 warm-up\n");
    printf("%-12s %3s %3s %4s %9s %12s %14s\n", "schedule", "pp", "vpp", "mb", "tensor", "us/step", "us/action");
    for (c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
        for (z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            pp_schedule_config sc;
            pp_error err;
            bench b;
            double worst = 0;
            long long actions = 0;
            int r;
            memset(&sc, 0, sizeof sc);
            sc.kind = cfgs[c].kind; sc.pp = cfgs[c].pp; sc.vpp = cfgs[c].vpp; sc.mb = cfgs[c].mb;
            if (pp_schedule_build(&sc, &g_sched, &err) != PP_OK || pp_schedule_lower(g_sched, &err) != PP_OK) {
                fprintf(stderr, "bench_runtime: %s\n", err.message);
                return 1;
            }
            memset(&b, 0, sizeof b);
            b.bytes = sizes[z];
            b.steps = 200;
            if (pp_threads_run(sc.pp, b_rank, &b, NULL, NULL, &err) != PP_OK) {
                fprintf(stderr, "bench_runtime: %s\n", err.message);
                return 1;
            }
            for (r = 0; r < sc.pp; r++) {
                if (b.seconds[r] > worst) worst = b.seconds[r];
                if (b.actions[r] > actions) actions = b.actions[r];
            }
            printf("%-12s %3d %3d %4d %8zuB %12.1f %14.2f\n", pp_schedule_kind_name(sc.kind), sc.pp, sc.vpp, sc.mb,
                   sizes[z], 1e6 * worst / b.steps, 1e6 * worst / b.steps / (double)actions);
            pp_schedule_free(g_sched);
        }
    return 0;
}
