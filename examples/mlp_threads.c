/* mlp_threads.c — the lesson: a small MLP trained pipeline-parallel with interleaved 1F1B, one CPU
 * thread per pipeline rank, every step checked against the model run whole.
 *
 *     make demo        (= build/mlp_threads --pp 4 --vpp 2 --mb 8 --schedule interleaved --steps 20)
 *     build/mlp_threads --pp 3 --schedule 1f1b --trace trace.json      (open in ui.perfetto.dev)
 *     build/mlp_threads --pp 4 --schedule zbv --svg step.svg          (the step as planned and as run)
 *
 * Pipeline parallelism. The model's blocks are cut into stages and each of the pp ranks (a GPU;
 * here a thread) holds some. A step's batch is cut into mb microbatches; each goes forward through
 * every stage, then backward, so that while rank 1 runs microbatch 0's forward, rank 0 already
 * runs microbatch 1's. Interleaved 1F1B (Megatron-LM's virtual pipeline, Narayanan et al. 2021)
 * gives every rank vpp stages, round robin: stage s lives on rank s % pp as its chunk s / pp.
 *
 *     pp 4, vpp 2:   rank 0: stages 0, 4   rank 1: 1, 5   rank 2: 2, 6   rank 3: 3, 7
 *
 * A rank warms up with forwards, then runs one forward, one backward (1F1B: it keeps few
 * microbatches' activations at once) and drains with backwards. While the pipeline fills and
 * drains, ranks wait: that bubble is (pp-1) / (vpp*mb + pp-1) of the step, smaller the more
 * chunks a rank has (the pictures this program draws show it).
 *
 * Who does what. pipepar builds every rank's order of work (pp_schedule_build), adds the sends and
 * receives between ranks (pp_schedule_lower), proves that the programs finish
 * (pp_schedule_validate), and on each rank runs an executor that walks the rank's program, calls
 * the model and moves the tensors (pp_run_step). This file gives it the model as callbacks: run a
 * stage's blocks forward, or backward, for one microbatch. The model (mlp_model.h) is L residual
 * blocks x + W2 gelu(W1 x + b1) + b2 learning t = tanh(A x); here stage s holds block s.
 *
 * The check. Rank 0 also runs every step unsplit, the whole model on one thread, and compares the
 * loss and every gradient: pipelining changes the order of the work, not its result.
 *
 * Read on: the trainer's state, the callbacks, the check, one rank's loop, the run, then main.
 * examples/mlp_plan.c includes this file (all but main) to train the same model on the schedule a
 * trainer's options describe: a search, a CSV, stages of unequal size, the backward split. */
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
#include "mlp_model.h"
#include <stdio.h>

#define MAX_RANKS 64                /* --pp's bound: the ranks' timelines are kept for the picture;
                                       --vpp's is 64 too */

/* --- the trainer's state -------------------------------------------------------------------- */

typedef struct rank_state {         /* one rank's own memory */
    mlp_saved *saved;               /* [slots * most]: slot k keeps its stage's blocks at [k * most, ...) */
    int most;                       /* the most blocks a stage of the rank holds */
    float *scratch;                 /* [rows*D] the backward's gradient where pipepar wants none back */
} rank_state;

typedef struct trainer {
    mlp_model m;                    /* the weights, read by every rank, stepped by their owners */
    const pp_schedule *schedule;    /* lowered and proven */
    int model_stages;               /* pp * vpp; pp under DualPipe, which runs every one twice */
    const int *first, *count;       /* [model_stages] model stage j holds blocks [first[j], + count[j]) */
    mlp_block **grads;              /* [num_stages][count of its model stage] each stage's own gradients */
    rank_state rank[MAX_RANKS];
    pp_timeline timelines[MAX_RANKS];
    const char *prog, *name, *trace, *svg; /* the program; what runs; --trace FILE; --svg FILE */
    int steps, failures, write_failed;
    float lr;
    double timeout;
} trainer;

/* --- what pipepar calls: one stage, one microbatch ------------------------------------------ */
/* Stage info->stage runs model stage info->model_stage: itself, except under DualPipe, whose
 * stages pp..2pp-1 run the model again from the other end. Its blocks keep what their backward
 * reads in slot info->slot of the rank's saved state: a slot for each (stage, microbatch) the
 * rank holds at once, at most pp_executor_saved_slots() of them, the schedule's memory bound. */

static mlp_saved *saved_of(trainer *tr, const pp_mb_info *info)
{
    rank_state *rs = &tr->rank[info->rank];
    return rs->saved + (size_t)info->slot * (size_t)rs->most;
}

static size_t cb_bytes(void *user, int boundary, const pp_mb_info *info)
{
    const mlp_model *m = &((trainer *)user)->m;
    (void)boundary; (void)info;     /* every boundary is [rows, D]; a transformer with packed
                                       sequences would read info->meta's cu_seqlens here */
    return sizeof(float) * (size_t)m->rows * m->D;
}

static int cb_input(void *user, const pp_mb_info *info, void *x)    /* the first stage's input */
{
    const mlp_model *m = &((trainer *)user)->m;
    memcpy(x, m->x + (size_t)info->mb * m->rows * m->D, cb_bytes(user, 0, info));
    return 0;
}

static int cb_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    trainer *tr = (trainer *)user;
    int k, first = tr->first[info->model_stage];
    mlp_saved *sv = saved_of(tr, info);
    memcpy(out, in, cb_bytes(user, 0, info));
    for (k = 0; k < tr->count[info->model_stage]; k++)
        mlp_forward(&tr->m, &tr->m.w[first + k], &sv[k], (const float *)out, (float *)out);
    return 0;
}

/* the last stage: the loss and its gradient (weight stays 1: the step's loss is the mean) */
static int cb_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss)
{
    loss->loss = mlp_loss(&((trainer *)user)->m, info->mb, (const float *)out, (float *)grad_out);
    return 0;
}

/* I: the gradient back through the stage's blocks, last first. grad_in is NULL on the model's
 * first stage: nothing before it waits for a gradient. */
static int cb_backward_input(void *user, const pp_mb_info *info, const void *in, const void *grad_out,
                             void *grad_in)
{
    trainer *tr = (trainer *)user;
    int k, first = tr->first[info->model_stage];
    float *g = grad_in ? (float *)grad_in : tr->rank[info->rank].scratch;
    mlp_saved *sv = saved_of(tr, info);
    (void)in;                       /* the blocks kept their own inputs */
    memcpy(g, grad_out, cb_bytes(user, 0, info));
    for (k = tr->count[info->model_stage] - 1; k >= 0; k--)
        mlp_backward_input(&tr->m, &tr->m.w[first + k], &sv[k], g, k == 0 && !grad_in ? NULL : g);
    return 0;
}

/* W: the microbatch's weight gradients, added into the stage's own */
static int cb_backward_weight(void *user, const pp_mb_info *info, const void *in, const void *grad_out)
{
    trainer *tr = (trainer *)user;
    const mlp_saved *sv = saved_of(tr, info);
    int k;
    (void)in; (void)grad_out;
    for (k = 0; k < tr->count[info->model_stage]; k++) mlp_backward_weight(&tr->m, &sv[k], &tr->grads[info->stage][k]);
    return 0;
}

/* B, the whole backward: I then W (zero-bubble schedules call the two apart) */
static int cb_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    cb_backward_input(user, info, in, grad_out, grad_in);
    return cb_backward_weight(user, info, in, grad_out);
}

/* --- the check: the same step unsplit, on rank 0 -------------------------------------------- */

/* The largest difference between a gradient tensor of the unsplit step and the pipeline's,
 * relative to the tensor's largest entry. The pipeline's gradient of a block is the sum over the
 * stages that run its model stage: one stage, or two under DualPipe. */
static double compare_gradients(const trainer *tr, const mlp_whole *ref)
{
    const mlp_model *m = &tr->m;
    const pp_schedule *s = tr->schedule;
    double worst = 0;
    int l, j, st, k, n;
    for (l = 0, j = 0; l < m->L; l++) {
        const mlp_block *parts[2];
        float *want[4], *part[2][4];
        size_t len[4], i;
        while (l >= tr->first[j] + tr->count[j]) j++;       /* block l's model stage */
        for (st = 0, n = 0; st < s->num_stages && n < 2; st++)
            if (pp_stage_model_stage(s, st) == j) parts[n++] = &tr->grads[st][l - tr->first[j]];
        mlp_tensors(&ref->g[l], m->D, m->H, want, len);
        for (k = 0; k < n; k++) mlp_tensors(parts[k], m->D, m->H, part[k], len);
        for (k = 0; k < 4; k++) {
            double num = 0, den = 1e-30;
            for (i = 0; i < len[k]; i++) {
                double got = part[0][k][i] + (n > 1 ? part[1][k][i] : 0.0f);
                if (fabs(got - want[k][i]) > num) num = fabs(got - want[k][i]);
                if (fabs(want[k][i]) > den) den = fabs(want[k][i]);
            }
            if (num / den > worst) worst = num / den;
        }
    }
    return worst;
}

/* The unsplit step on the same batch and weights, then the step's line: whether the loss and
 * every gradient match the pipeline's (to 1e-5, relative). */
static int check_step(trainer *tr, mlp_whole *ref, int step, float loss)
{
    double want = mlp_whole_step(ref, &tr->m), err = compare_gradients(tr, ref);
    int ok = fabs(loss - want) <= 1e-5 * fabs(want) && err < 1e-5;
    if (ok && err == 0 && loss == (float)want) printf("%4d   %.5f   yes (bit-identical)\n", step + 1, loss);
    else printf("%4d   %.5f   %s (max rel err %.1e)\n", step + 1, loss, ok ? "yes" : "NO", err);
    return ok;
}

/* --- one rank ------------------------------------------------------------------------------ */

/* Ranks meet here between steps (an all-reduce of nothing is a barrier): rank 0 makes the batch
 * and checks the step while the others wait. */
static pp_status barrier(pp_transport *t, double timeout, pp_error *err)
{
    float none = 0;
    return t->all_reduce(t->user, &none, 1, timeout, err);
}

static void rank_free(trainer *tr, int rank)
{
    mlp_saved_free(tr->rank[rank].saved);
    free(tr->rank[rank].scratch);
    memset(&tr->rank[rank], 0, sizeof tr->rank[rank]);
}

/* The rank's saved state, allocated once: `slots` of its largest stage's blocks. 0 or -1. */
static int rank_alloc(trainer *tr, int rank, int slots)
{
    rank_state *rs = &tr->rank[rank];
    int c;
    for (c = 0; c < tr->schedule->vpp; c++) {
        int j = pp_stage_model_stage(tr->schedule, pp_rank_chunk_stage(tr->schedule, rank, c));
        if (tr->count[j] > rs->most) rs->most = tr->count[j];
    }
    rs->saved = mlp_saved_new(slots * rs->most, &tr->m);
    rs->scratch = (float *)malloc(sizeof(float) * (size_t)tr->m.rows * tr->m.D);
    if (rs->saved && rs->scratch) return 0;
    rank_free(tr, rank);
    return -1;
}

/* After the step: every model stage's weights step once, by the rank that runs it first, with the
 * sum of the gradients of every stage that runs it (DualPipe's two copies, which DualPipe's own
 * trainers all-reduce). */
static void sgd_rank(trainer *tr, int rank)
{
    const pp_schedule *s = tr->schedule;
    mlp_model *m = &tr->m;
    int c, k, other;
    for (c = 0; c < s->vpp; c++) {
        int st = pp_rank_chunk_stage(s, rank, c), j = pp_stage_model_stage(s, st);
        if (st != j) continue;      /* DualPipe's second run of model stage j: stepped with stage j */
        for (other = 0; other < s->num_stages; other++)
            if (other != st && pp_stage_model_stage(s, other) == j)
                for (k = 0; k < tr->count[j]; k++) mlp_block_add(&tr->grads[st][k], &tr->grads[other][k], m->D, m->H);
        for (k = 0; k < tr->count[j]; k++) mlp_sgd(&m->w[tr->first[j] + k], &tr->grads[st][k], m->D, m->H, tr->lr);
    }
}

/* The rank's stages' gradients start each step from zero: after the batch's barrier, as under
 * DualPipe another rank's SGD reads them until then. */
static void zero_grads(trainer *tr, int rank)
{
    int c, k;
    for (c = 0; c < tr->schedule->vpp; c++) {
        int st = pp_rank_chunk_stage(tr->schedule, rank, c);
        for (k = 0; k < tr->count[pp_stage_model_stage(tr->schedule, st)]; k++)
            mlp_block_zero(&tr->grads[st][k], tr->m.D, tr->m.H);
    }
}

/* Rank 0, once every rank's timeline of the last step is in: the step as it ran, where each
 * rank's time went (pp_timeline_idle), and the Chrome trace. */
static void report_timelines(trainer *tr, pp_error *err)
{
    pp_idle idle[MAX_RANKS];
    int r, pp = tr->schedule->pp;
    printf("\nthe last step as it ran (measured; %d thread%s on this machine's cores)\n", pp, pp > 1 ? "s" : "");
    pp_timeline_draw_ascii(tr->timelines, pp, 0, stdout, NULL);
    if (pp_timeline_idle(tr->timelines, pp, idle, err) == PP_OK) {
        printf("where the step went, ms = compute + waiting for another rank's compute + for transfers + other "
               "gaps + tail:\n");
        for (r = 0; r < pp; r++)
            printf("  rank %d: %.2f = %.2f + %.2f + %.2f + %.2f + %.2f\n", r, 1e3 * idle[r].step, 1e3 * idle[r].busy,
                   1e3 * idle[r].wait_compute, 1e3 * idle[r].wait_transfer, 1e3 * idle[r].wait_other, 1e3 * idle[r].tail);
    } else {
        printf("where the step went: %s\n", err->message);
    }
    if (tr->trace) {
        FILE *f = fopen(tr->trace, "w");
        int ok = f && pp_timeline_write_chrome_trace(tr->timelines, pp, f, err) == PP_OK;
        if (f && fclose(f) != 0) ok = 0;
        if (ok) printf("trace written to %s (open it in ui.perfetto.dev)\n", tr->trace);
        else fprintf(stderr, "%s: --trace=%s: could not write it\n", tr->prog, tr->trace);
        tr->write_failed = !ok;
    } else {
        printf("(--trace FILE writes this step as a Chrome/Perfetto trace)\n");
    }
    if (tr->svg) {   /* the step as it ran, below the simulation of the same programs */
        pp_sim_result *sim = NULL;
        FILE *f = fopen(tr->svg, "w");
        int ok = f && pp_simulate(tr->schedule, NULL, &sim, err) == PP_OK &&
                 pp_timeline_write_svg(tr->timelines, pp, sim, f, err) == PP_OK;
        if (f && fclose(f) != 0) ok = 0;
        if (ok) printf("the step drawn in %s: simulated above, measured below\n", tr->svg);
        else fprintf(stderr, "%s: --svg=%s: could not write it\n", tr->prog, tr->svg);
        tr->write_failed |= !ok;
        pp_sim_result_free(sim);
    }
}

/* One rank: the executor over its program, then per step: the batch (rank 0), pp_run_step, the
 * check (rank 0), SGD on the rank's own stages. */
static pp_status rank_main(void *user, int rank, pp_transport *t, pp_error *err)
{
    trainer *tr = (trainer *)user;
    pp_executor_config cfg;
    pp_executor *ex = NULL;
    mlp_whole ref;
    pp_status st;
    int step;
    memset(&cfg, 0, sizeof cfg);
    memset(&ref, 0, sizeof ref);
    cfg.schedule = tr->schedule;
    cfg.transport = *t;
    cfg.callbacks.user = tr;
    cfg.callbacks.tensor_bytes = cb_bytes;
    cfg.callbacks.input = cb_input;
    cfg.callbacks.forward = cb_forward;
    cfg.callbacks.loss = cb_loss;
    cfg.callbacks.backward = cb_backward;
    cfg.callbacks.backward_input = cb_backward_input;     /* zero-bubble schedules run B as I + W */
    cfg.callbacks.backward_weight = cb_backward_weight;
    cfg.timeout_s = tr->timeout;
    cfg.record_timeline = 1;
    st = pp_executor_create(&cfg, &ex, err);
    if (st == PP_OK && (rank_alloc(tr, rank, pp_executor_saved_slots(ex)) ||
                        (rank == 0 && mlp_whole_init(&ref, &tr->m))))
        st = pp_error_set(err, PP_ENOMEM, "rank %d: out of memory", rank);
    if (st != PP_OK) t->abort(t->user, st, err->message);
    if (st == PP_OK && rank == 0) printf("step   loss      grads match single-stage\n");
    for (step = 0; step < tr->steps && st == PP_OK; step++) {
        pp_step_result res;
        if (rank == 0) mlp_new_batch(&tr->m);
        if ((st = barrier(t, tr->timeout, err)) != PP_OK) break;          /* the batch is ready */
        zero_grads(tr, rank);
        if ((st = pp_run_step(ex, NULL, &res, err)) != PP_OK) break;      /* every F and B of the step */
        if ((st = barrier(t, tr->timeout, err)) != PP_OK) break;          /* every gradient is in */
        if (rank == 0 && !check_step(tr, &ref, step, res.loss)) tr->failures++;
        if ((st = barrier(t, tr->timeout, err)) != PP_OK) break;          /* checked: now step */
        sgd_rank(tr, rank);
    }
    if (st == PP_OK && (st = pp_executor_timeline(ex, &tr->timelines[rank], err)) == PP_OK &&
        (st = barrier(t, tr->timeout, err)) == PP_OK) {                    /* every timeline is in */
        if (rank == 0) report_timelines(tr, err);
        st = barrier(t, tr->timeout, err);                                 /* drawn: free */
    }
    if (rank == 0) mlp_whole_free(&ref);
    rank_free(tr, rank);
    pp_executor_free(ex);
    return st;
}

/* --- the run ------------------------------------------------------------------------------- */

static void grads_free(trainer *tr)
{
    int st;
    for (st = 0; tr->grads && st < tr->schedule->num_stages; st++) mlp_blocks_free(tr->grads[st]);
    free(tr->grads);
    tr->grads = NULL;
}

/* Each stage's own gradients, for the blocks of its model stage. 0 or -1. */
static int grads_alloc(trainer *tr)
{
    const pp_schedule *s = tr->schedule;
    int st;
    if (!(tr->grads = (mlp_block **)calloc((size_t)s->num_stages, sizeof(mlp_block *)))) return -1;
    for (st = 0; st < s->num_stages; st++)
        if (!(tr->grads[st] = mlp_blocks_new(tr->count[pp_stage_model_stage(s, st)], tr->m.D, tr->m.H))) return -1;
    return 0;
}

/* What runs: the model, the stages and their ranks, the memory it keeps, the task. */
static void describe(const trainer *tr)
{
    const pp_schedule *s = tr->schedule;
    const mlp_model *m = &tr->m;
    int st, r, c, even = 1;
    printf("pipepar demo: a residual MLP trained pipeline-parallel, one CPU thread per rank\n\n");
    printf("  model     %d blocks of x + W2 gelu(W1 x + b1) + b2, width %d, hidden %d (fp32)\n", m->L, m->D, m->H);
    printf("  pipeline  %s, pp=%d vpp=%d mb=%d: %d stages of ", tr->name, s->pp, s->vpp, s->mb, s->num_stages);
    for (st = 1; st < tr->model_stages; st++) even &= tr->count[st] == tr->count[0];
    if (even) printf("%d block%s\n", tr->count[0], tr->count[0] > 1 ? "s" : "");
    for (st = 0; !even && st < s->num_stages; st++) {
        if (s->num_stages > 16 && st == 8) { printf(",..."); break; }
        printf("%s%d", st ? "," : "", tr->count[pp_stage_model_stage(s, st)]);
    }
    if (!even) printf(" blocks\n");
    printf("  stages   ");
    for (r = 0; r < s->pp && r < 8; r++) {
        printf(" rank %d:", r);
        for (c = 0; c < s->vpp; c++) printf("%s%d", c ? "," : " ", pp_rank_chunk_stage(s, r, c));
        printf(r + 1 < s->pp ? " |" : "");
    }
    printf(s->pp > 8 ? " ...\n" : "\n");
    printf("  memory    (stage, microbatch) activations a rank holds at once, of its vpp*mb = %d:", s->vpp * s->mb);
    for (r = 0; r < s->pp && r < 16; r++) {
        int live = 0;
        pp_schedule_rank_peaks(s, r, NULL, 1, &live, NULL, NULL);
        printf("%s%d", r ? "," : " ", live);
    }
    printf("%s\n            (pp_schedule_rank_peaks): its saved state is that many slots, allocated once\n",
           s->pp > 16 ? ",..." : "");
    printf("  task      fit t = tanh(A x) on fresh random x: %d microbatches of %d rows a step, SGD lr %g\n\n", m->mb,
           m->rows, tr->lr);
}

/* The schedule as pp_simulate plays it with F = 1, B = 2 time units per block. */
static void draw_schedule(const trainer *tr)
{
    const pp_schedule *s = tr->schedule;
    pp_sim_costs c;
    pp_sim_result *sim = NULL;
    pp_error err;
    double *cost = (double *)malloc(sizeof(double) * 2 * (size_t)s->num_stages);
    int st;
    memset(&c, 0, sizeof c);
    printf("the schedule (simulated: F = 1, B = 2 time units per block)\n");
    if (!cost) { printf("(out of memory)\n\n"); return; }
    for (st = 0; st < s->num_stages; st++) {
        cost[st] = tr->count[pp_stage_model_stage(s, st)];
        cost[s->num_stages + st] = 2 * cost[st];
    }
    c.f_stage = cost; c.b_stage = cost + s->num_stages; c.i_stage = cost; c.w_stage = cost; c.memory_stage = cost;
    if (pp_simulate(s, &c, &sim, &err) != PP_OK || pp_schedule_draw_ascii(s, sim, stdout, &err) != PP_OK)
        printf("(%s)\n", err.message);
    printf("\n");
    pp_sim_result_free(sim);
    free(cost);
}

/* Builds the model and the stages' gradients, prints what runs, draws it, runs one thread a rank
 * (pp_threads_run), frees. tr holds the schedule, the blocks of each model stage and the options.
 * Returns the exit code: 0, or 1 when a step did not match, the run or the trace's write failed. */
static int train(trainer *tr, int D, int H, int rows)
{
    const pp_schedule *s = tr->schedule;
    pp_error err;
    pp_status st;
    int L = tr->first[tr->model_stages - 1] + tr->count[tr->model_stages - 1];
    if (mlp_model_init(&tr->m, D, H, L, rows, s->mb) || grads_alloc(tr)) {
        fprintf(stderr, "%s: out of memory\n", tr->prog);
        grads_free(tr);
        mlp_model_free(&tr->m);
        return 1;
    }
    describe(tr);
    draw_schedule(tr);
    fflush(stdout);
    st = pp_threads_run(s->pp, rank_main, tr, NULL, NULL, &err);
    if (st != PP_OK) fprintf(stderr, "%s: %s\n", tr->prog, err.message);
    else if (tr->failures) fprintf(stderr, "%s: %d step(s) did not match the single-stage run\n", tr->prog, tr->failures);
    grads_free(tr);
    mlp_model_free(&tr->m);
    return st != PP_OK || tr->failures || tr->write_failed ? 1 : 0;
}

/* --- flags ---------------------------------------------------------------------------------- */

/* "PROG: --flag=value: rule" (or "PROG: --flag: rule" without a value) on stderr; returns 2. */
static int usage(const char *prog, const char *flag, const char *value, const char *rule)
{
    if (!value || !*value) fprintf(stderr, "%s: %s: %s\n", prog, flag, rule);
    else fprintf(stderr, "%s: %s=%s: %s\n", prog, flag, value, rule);
    return 2;
}

static int int_flag(const char *v, int lo, int hi, int *out)
{
    char *end;
    long x;
    if (!v) return 0;
    x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) return 0;
    *out = (int)x;
    return 1;
}

/* --- main: the lesson's flags (mlp_plan.c, which includes everything above, has its own) ------- */
#ifndef MLP_THREADS_NO_MAIN

int main(int argc, char **argv)
{
    trainer tr;
    pp_schedule_config sc;
    pp_schedule *s = NULL;
    pp_error err;
    pp_status st;
    static int first[MAX_RANKS * 64], count[MAX_RANKS * 64];
    int i, j, rc;
    memset(&tr, 0, sizeof tr);
    memset(&sc, 0, sizeof sc);
    sc.kind = PP_INTERLEAVED_1F1B; sc.pp = 4; sc.mb = 8;
    tr.prog = "mlp_threads"; tr.name = "interleaved"; tr.steps = 20; tr.lr = 4; tr.timeout = 60;
    for (i = 1; i < argc; i += 2) {    /* a flag and its value */
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            printf("usage: mlp_threads [--pp N] [--vpp N] [--mb N] [--schedule KIND] [--steps N] [--trace FILE]\n"
                   "                   [--svg FILE]\n"
                   "Trains a residual MLP pipeline-parallel on CPU threads, one a rank, and checks every step\n"
                   "against the model run whole. KIND: interleaved (default, vpp 2), 1f1b, gpipe, looped-bfs,\n"
                   "zb-h1, zb-h2, zbv, dualpipev, interleaved-zb, dualpipe. --trace FILE: the last step as a\n"
                   "Chrome/Perfetto trace. --svg FILE: the last step drawn as run, under its simulation.\n"
                   "Defaults: --pp 4 --mb 8 --steps 20; one block a stage.\n"
                   "Searched schedules, CSVs, stages of unequal size, the backward split: mlp_plan --help.\n");
            return 0;
        }
        if (!strcmp(f, "--pp")) ok = int_flag(v, 1, MAX_RANKS, &sc.pp);
        else if (!strcmp(f, "--vpp")) ok = int_flag(v, 1, 64, &sc.vpp);
        else if (!strcmp(f, "--mb")) ok = int_flag(v, 1, 4096, &sc.mb);
        else if (!strcmp(f, "--steps")) ok = int_flag(v, 1, 100000, &tr.steps);
        else if (!strcmp(f, "--trace")) { ok = v != NULL; tr.trace = v; }
        else if (!strcmp(f, "--svg")) { ok = v != NULL; tr.svg = v; }
        else if (!strcmp(f, "--schedule")) {
            if (v && pp_schedule_kind_parse(v, &sc.kind, &err) != PP_OK) return usage("mlp_threads", f, v, err.message);
            ok = v != NULL; tr.name = v;
        } else { fprintf(stderr, "mlp_threads: %s: unknown flag (see --help)\n", f); return 2; }
        if (!ok) return usage("mlp_threads", f, v, v ? "expected a positive number in range (see --help)" : "needs a value");
    }
    if (!sc.vpp && (sc.kind == PP_INTERLEAVED_1F1B || sc.kind == PP_LOOPED_BFS || sc.kind == PP_INTERLEAVED_ZB))
        sc.vpp = 2;                 /* interleaved kinds with one chunk a rank are 1F1B */

    /* 1. the schedule: every rank's order of work, then the sends and receives, then the proof */
    if ((st = pp_schedule_build(&sc, &s, &err)) != PP_OK || (st = pp_schedule_lower(s, &err)) != PP_OK ||
        (st = pp_schedule_validate(s, &err)) != PP_OK) {
        fprintf(stderr, "mlp_threads: %s\n", err.message);
        pp_schedule_free(s);
        return st == PP_EINVAL || st == PP_EUNSUPPORTED ? 2 : 1;
    }
    /* 2. the model stages' blocks: one each (pp_layers_build splits a real model's layers) */
    tr.schedule = s;
    tr.model_stages = s->placement == PP_PLACEMENT_DUAL ? s->pp : s->num_stages;
    for (j = 0; j < tr.model_stages; j++) { first[j] = j; count[j] = 1; }
    tr.first = first; tr.count = count;
    /* 3. train: a thread a rank, each running rank_main */
    rc = train(&tr, 64, 256, 16);
    pp_schedule_free(s);
    return rc;
}
#endif
