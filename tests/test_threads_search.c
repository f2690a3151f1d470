/* test_threads_search.c — pp_search_config.threads: the layout search's splits on several
 * threads give exactly what one thread gives (every entry's time, memory and split, the count of
 * splits, the winner), and progress is called once per schedule, one call at a time. Its name
 * puts it in CI's TSan run (tests/run_all.sh runs the suites test_threads* there). */
#include <stdlib.h>
#include "pp_test.h"

typedef struct ts_meter { long calls, last, out_of_order; } ts_meter;

static void ts_hook(void *user, const pp_search_progress *w)
{
    ts_meter *m = (ts_meter *)user;   /* the search serialises the calls: no lock here */
    m->calls++;
    if (w->simulated != m->last + 1) m->out_of_order++;
    m->last = w->simulated;
}

/* Runs cfg with 1 thread and with `threads`, and compares the results entry by entry. */
static void ts_same(pp_search_config cfg, int threads, const char *what)
{
    pp_search_result *one = NULL, *many = NULL;
    pp_error err;
    ts_meter m;
    int k, s;
    memset(&m, 0, sizeof m);
    cfg.threads = 1;
    PP_CHECK_OK(pp_search(&cfg, &one, &err), &err);
    cfg.threads = threads;
    cfg.progress = ts_hook;
    cfg.progress_user = &m;
    PP_CHECK_OK(pp_search(&cfg, &many, &err), &err);
    if (!one || !many) goto done;
    PP_CHECK_MSG(one->count == many->count, "%s: %d entries with one thread, %d with %d", what, one->count,
                 many->count, threads);
    PP_CHECK_MSG(one->layouts == many->layouts, "%s: %ld splits with one thread, %ld with %d", what, one->layouts,
                 many->layouts, threads);
    PP_CHECK_INT(m.out_of_order, 0);
    PP_CHECK(m.calls > 0);
    for (k = 0; k < one->count && k < many->count; k++) {
        const pp_search_entry *a = &one->entries[k], *b = &many->entries[k];
        int same = !strcmp(a->name, b->name) && a->makespan == b->makespan && a->peak_memory == b->peak_memory &&
                   a->fits == b->fits;
        for (s = 0; same && a->stage_layers && s < cfg.pp * a->vpp; s++) same = a->stage_layers[s] == b->stage_layers[s];
        PP_CHECK_MSG(same, "%s, entry %d: '%s' %.9g with one thread, '%s' %.9g with %d", what, k, a->name,
                     a->makespan, b->name, b->makespan, threads);
        if (!same) break;
    }
    PP_CHECK((one->best != NULL) == (many->best != NULL));
done:
    pp_search_result_free(one);
    pp_search_result_free(many);
}

static void threads_give_the_single_threaded_result(void)
{
    pp_search_config cfg;
    pp_layer_costs lc[16];
    int k;
    /* every kind, vpp 1..3, 12 layers on 2 ranks: 141 splits at vpp 3, many ties */
    memset(&cfg, 0, sizeof cfg);
    cfg.pp = 2; cfg.mb = 6; cfg.layers = 12; cfg.max_vpp = 3;
    cfg.costs.f = 1; cfg.costs.i = 1; cfg.costs.w = 1;
    ts_same(cfg, 3, "unit costs, every kind");
    /* per-layer costs of the GPU comparison model's blocks (block 0's I skips its input gradient),
     * B as I then W, interleaved only, with transfers */
    for (k = 0; k < 16; k++) { lc[k].f = 3.25; lc[k].i = k ? 3.58 : 1.88; lc[k].w = 3.33; lc[k].memory = 1; }
    memset(&cfg, 0, sizeof cfg);
    cfg.pp = 2; cfg.mb = 8; cfg.vpp = 4; cfg.layers = 16; cfg.kind = PP_INTERLEAVED_1F1B;
    cfg.layer_costs = lc; cfg.split_backward = 1; cfg.costs.p2p_latency = 0.2;
    ts_same(cfg, 4, "measured costs, interleaved");
    /* a memory cap, an embedding and a loss, more threads than some vpps have splits */
    memset(&cfg, 0, sizeof cfg);
    cfg.pp = 3; cfg.mb = 6; cfg.layers = 9; cfg.max_memory = 3;
    cfg.costs.f = 1; cfg.costs.i = 1; cfg.costs.w = 0.5;
    cfg.embedding.f = 0.5; cfg.loss.f = 1.5; cfg.loss.i = 1;
    ts_same(cfg, 64, "a cap, embedding and loss");
}

static void threads_out_of_range_are_refused(void)
{
    pp_search_config cfg;
    pp_search_result *res = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.pp = 2; cfg.mb = 4; cfg.threads = -1;
    PP_CHECK_FAILS(pp_search(&cfg, &res, &err), &err, PP_EINVAL, "threads=-1: must be in 0..1024");
    cfg.threads = 1025;
    PP_CHECK_FAILS(pp_search(&cfg, &res, &err), &err, PP_EINVAL, "threads=1025");
    PP_CHECK(res == NULL);
}

const pp_test_case pp_suite_threads_search[] = {
    PP_TEST(threads_give_the_single_threaded_result),
    PP_TEST(threads_out_of_range_are_refused),
    {0}
};
