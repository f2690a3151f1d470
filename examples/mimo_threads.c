/* mimo_threads — a vision encoder and a language model with different grids, trained on CPU
 * threads, checked against the same model trained in one process.
 *
 *     build/mimo_threads                       both layouts below, 5 steps
 *     build/mimo_threads --layout colocated --steps 10 --schedule zb-h1
 *
 * Non-colocated (encoder and language model on ranks of their own):
 *     vision   dp=2 on ranks 0, 1   (each encodes half of every microbatch's rows)
 *     language pp=2 on ranks 2, 3   (stage 0 gets both halves, concatenated: fan-in 2:1)
 *   One pipeline of 3 stages runs under the unchanged executor; pp_mimo_transport turns the
 *   transfers across the bridge into the fan-in / fan-out sends and receives.
 * Colocated:
 *     vision   dp=2 on ranks 0, 1   language pp=2 on ranks 0, 1
 *   Every rank encodes its rows for all microbatches, pp_mimo_bridge_exchange moves them to the
 *   language model's first stage, its 2-stage pipeline runs, the gradients go back.
 *
 * After each step every rank sums its module's gradients over the module's dp replicas
 * (pp_mimo_group_sum), takes the global norm over both modules, each parameter counted once
 * (pp_mimo_grad_norm), clips and steps. The model and both rank programs are in
 * examples/mimo_model.h.                                                                       */
#define PIPEPAR_IMPLEMENTATION
#include "mimo_model.h"

static int run_layout(const char *title, pp_mimo_module_config vision, pp_mimo_module_config language, int colocated,
                      pp_schedule_kind kind, int steps)
{
    pp_mimo_module_config mods[2];
    pp_mimo_config cfg;
    pp_mimo m;
    pp_mimo_pipeline_config pc;
    pp_mimo_pipeline *pl = NULL;
    pp_error err;
    mm_job job;
    mm_params ref;
    mm_step_result res;
    double worst = 0;
    int s, r, bad = 0;

    mods[0] = vision; mods[1] = language;
    memset(&cfg, 0, sizeof cfg);
    cfg.num_modules = 2; cfg.modules = mods;
    if (pp_mimo_init(&cfg, &m, &err) != PP_OK) { fprintf(stderr, "mimo_threads: %s\n", err.message); return 1; }
    memset(&pc, 0, sizeof pc);
    pc.kind = kind;
    pc.mb = 4;
    if (pp_mimo_pipeline_create(&m, &pc, &pl, &err) != PP_OK) { fprintf(stderr, "mimo_threads: %s\n", err.message); return 1; }
    printf("== %s: %d ranks, %s; pipeline %s of %d stages, %d microbatches of 8 rows\n", title, m.world,
           pp_mimo_layout_name(m.layout), pp_schedule_kind_name(pl->schedule->kind), pl->schedule->pp, pc.mb);

    memset(&job, 0, sizeof job);
    job.pl = pl;
    job.cfg.mb = pc.mb; job.cfg.rows = 8; job.cfg.lr = 0.5f; job.cfg.max_norm = 0.25f;
    job.steps = steps;
    job.vision = 0; job.language = 1;
    job.timeout_s = 30;
    if (mm_run_threads(&job, colocated, &err) != PP_OK) {
        fprintf(stderr, "mimo_threads: %s\n", err.message);
        mm_job_free(&job);
        pp_mimo_pipeline_free(pl);
        return 1;
    }
    /* the same steps in one process */
    mm_init(&ref);
    printf("  step   loss (threads / one process)    grad norm (threads / one process)   clip\n");
    for (s = 0; s < steps; s++) {
        mm_reference_step(&ref, &job.cfg, s, &res, NULL);
        printf("  %4d   %.7f / %.7f          %.7f / %.7f           %.4f\n", s, job.loss[0][s], res.loss, job.norm[0][s],
               res.norm, job.clip[0][s]);
        for (r = 0; r < m.world; r++)
            if (fabs(job.loss[r][s] - res.loss) > 1e-5 || fabs(job.norm[r][s] - res.norm) > 1e-5 * res.norm) bad = 1;
    }
    for (r = 0; r < m.world; r++) worst = fmax(worst, mm_max_param_diff(&job, r, &ref));
    printf("  largest weight difference to the one-process run, over every rank's stages: %.3g\n", worst);
    if (worst > 1e-4) bad = 1;
    printf("  %s\n", bad ? "MISMATCH" : "equal to float rounding");
    mm_job_free(&job);
    pp_mimo_pipeline_free(pl);
    return bad;
}

static pp_mimo_module_config module(const char *name, int offset, int dp, int pp)
{
    pp_mimo_module_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.offset = offset; c.dp = dp; c.pp = pp;
    return c;
}

int main(int argc, char **argv)
{
    const char *layout = "both";
    pp_schedule_kind kind = PP_1F1B;
    int steps = 5, i, rc = 0;
    pp_error err;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layout") && i + 1 < argc) layout = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--schedule") && i + 1 < argc) {
            if (pp_schedule_kind_parse(argv[++i], &kind, &err) != PP_OK) { fprintf(stderr, "mimo_threads: %s\n", err.message); return 2; }
        } else {
            fprintf(stderr, "usage: mimo_threads [--layout both|non-colocated|colocated] [--steps N (1..%d)] "
                    "[--schedule gpipe|1f1b|zb-h1|zb-h2]\n", MM_MAX_STEPS);
            return 2;
        }
    }
    if (steps < 1 || steps > MM_MAX_STEPS) { fprintf(stderr, "mimo_threads: --steps=%d: must be 1..%d\n", steps, MM_MAX_STEPS); return 2; }
    if (strcmp(layout, "both") && strcmp(layout, "non-colocated") && strcmp(layout, "colocated")) {
        fprintf(stderr, "mimo_threads: --layout=%s: must be both, non-colocated or colocated\n", layout);
        return 2;
    }
    if (strcmp(layout, "colocated"))
        rc |= run_layout("non-colocated: vision dp=2 on ranks 0-1, language pp=2 on ranks 2-3",
                         module("vision", 0, 2, 1), module("language", 2, 1, 2), 0, kind, steps);
    if (strcmp(layout, "non-colocated"))
        rc |= run_layout("colocated: vision dp=2 and language pp=2 on ranks 0-1",
                         module("vision", 0, 2, 1), module("language", 0, 1, 2), 1, kind, steps);
    return rc;
}
