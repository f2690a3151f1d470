/* consumer.c — a trainer's first program against pipepar, installed or vendored (tests/install.sh
 * builds it through pkg-config, CMake's find_package and add_subdirectory). It builds and
 * validates a 1F1B schedule for 2 ranks and 4 microbatches, then runs one training step on 2
 * threads (the threads transport).
 *
 * The model: stage s multiplies its input by w[s]; microbatch m's input is m + 1 and its loss is
 * the last stage's output. With w = (2, 3) the outputs are 6, 12, 18, 24: the step's loss (the
 * mean over microbatches) is 15; the gradient of the summed loss is, for w[1], the sum of stage
 * 1's inputs 2 + 4 + 6 + 8 = 20, and for w[0], w[1] times the sum of the inputs, 3 * 10 = 30.
 * Exits 0 when the step gives exactly these (small integers: no rounding), 1 otherwise. */
#define PIPEPAR_IMPLEMENTATION
#include "pipepar.h"

#include <string.h>

typedef struct model {
    const pp_schedule *schedule;
    float w[2], grad[2];   /* rank r owns stage r: each thread writes its own entry */
    float loss[2];         /* the step's loss as each rank sees it */
} model;

static size_t tensor_bytes(void *user, int boundary, const pp_mb_info *info)
{
    (void)user; (void)boundary; (void)info;
    return sizeof(float);
}
static int input(void *user, const pp_mb_info *info, void *x)
{
    (void)user;
    *(float *)x = (float)(info->mb + 1);
    return 0;
}
static int forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    const model *m = (const model *)user;
    *(float *)out = m->w[info->stage] * *(const float *)in;
    return 0;
}
static int loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *l)
{
    (void)user; (void)info;
    l->loss = *(const float *)out;
    if (grad_out) *(float *)grad_out = 1.0f;
    return 0;
}
static int backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    model *m = (model *)user;
    float g = *(const float *)grad_out;
    m->grad[info->stage] += g * *(const float *)in;
    if (grad_in) *(float *)grad_in = g * m->w[info->stage];   /* NULL on stage 0 */
    return 0;
}

static pp_status rank_main(void *user, int rank, pp_transport *transport, pp_error *err)
{
    model *m = (model *)user;
    pp_executor *ex = NULL;
    pp_step_result res;
    pp_status st;
    pp_executor_config ec;
    memset(&ec, 0, sizeof ec);
    ec.schedule = m->schedule;
    ec.transport = *transport;
    ec.callbacks.user = m;
    ec.callbacks.tensor_bytes = tensor_bytes;
    ec.callbacks.input = input;
    ec.callbacks.forward = forward;
    ec.callbacks.loss = loss;
    ec.callbacks.backward = backward;
    st = pp_executor_create(&ec, &ex, err);
    if (st == PP_OK) st = pp_run_step(ex, NULL, &res, err);
    if (st == PP_OK) m->loss[rank] = res.loss;
    pp_executor_free(ex);
    return st;
}

int main(void)
{
    pp_error err;
    pp_schedule *s = NULL;
    pp_schedule_config cfg;
    model m;
    int ok;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = PP_1F1B;
    cfg.pp = 2;
    cfg.mb = 4;
    if (pp_schedule_build(&cfg, &s, &err) != PP_OK || pp_schedule_lower(s, &err) != PP_OK ||
        pp_schedule_validate(s, &err) != PP_OK) {
        fprintf(stderr, "consumer: %s\n", err.message);
        pp_schedule_free(s);
        return 1;
    }
    memset(&m, 0, sizeof m);
    m.schedule = s;
    m.w[0] = 2.0f;
    m.w[1] = 3.0f;
    if (pp_threads_run(2, rank_main, &m, NULL, NULL, &err) != PP_OK) {
        fprintf(stderr, "consumer: %s\n", err.message);
        pp_schedule_free(s);
        return 1;
    }
    pp_schedule_free(s);
    ok = m.loss[0] == 15.0f && m.loss[1] == 15.0f && m.grad[0] == 30.0f && m.grad[1] == 20.0f;
    printf("1f1b pp=2 mb=4 on 2 threads: loss %g (rank 0) %g (rank 1), grad w0 %g w1 %g: %s\n",
           (double)m.loss[0], (double)m.loss[1], (double)m.grad[0], (double)m.grad[1],
           ok ? "as worked out by hand" : "WRONG (expected 15, 15, 30, 20)");
    return ok ? 0 : 1;
}
