/* mlp_plan.c — the lesson's MLP trained on the schedule a trainer's options describe: a kind or
 * pp_search's fastest, a schedule from a CSV, stages of unequal size, the backward as I then W.
 *
 *     build/mlp_plan --pp 2 --mb 8 --schedule search --layout 'Et*1|t*3|t*1|t*3L'
 *     build/mlp_plan --pp 2 --vpp 4 --mb 8 --layers 16 --schedule search --search-kind interleaved --search-layout
 *     build/pipepar search --pp 2 --mb 8 --vpp 2 --kind greedy --csv best.csv
 *     build/mlp_plan --schedule-csv best.csv --layout 'Et*1|t*3|t*1|t*3L' --split-backward
 *
 * A trainer that offers these options turns them into what it runs with one call, pp_plan_build
 * (pipepar.h, >>plan): the layer split, the schedule built, searched or read, lowered, split as
 * asked and proven. mlp_gpu.cu and the CLI's schedule and simulate make the same call, so all of
 * them accept and refuse the same things. The rest is the lesson's trainer, included whole from
 * mlp_threads.c (callbacks, the unsplit check every step, one rank's loop): stage s runs the
 * blocks the plan's layers give its model stage. */
#define MLP_THREADS_NO_MAIN
#include "mlp_threads.c"
#include "text_file.h"
#include <unistd.h>       /* sysconf: the cores for a layout search */

static const char help[] =
    "usage: mlp_plan [--pp N] [--vpp N] [--mb N] [--schedule KIND|search] [--group G] [--steps N]\n"
    "                [--layers L] [--layout STR] [--schedule-csv FILE] [--split-backward]\n"
    "                [--search-kind K] [--search-layout] [--width D] [--hidden H] [--rows R]\n"
    "                [--lr X] [--timeout S] [--trace FILE]\n"
    "Trains the residual MLP of mlp_threads pipeline-parallel on CPU threads and checks every step\n"
    "against the model run whole, on the schedule these options make (pp_plan_build):\n"
    "  --schedule KIND   a kind (interleaved, the default, with vpp 2; 1f1b, zbv, dualpipe, ...), or\n"
    "                    search: the fastest pp_search finds for the stages (F = I = W per block)\n"
    "  --search-kind K   with search: only kind K (or greedy)\n"
    "  --search-layout   with search and --layers: the split of the blocks into stages chosen too\n"
    "  --group G         interleaved: microbatches per chunk round (Megatron's microbatch group; default pp)\n"
    "  --layers L        blocks, split evenly over the model stages (default: one a stage)\n"
    "  --layout STR      blocks per stage as a Megatron layout in stage order, 'Et*1|t*3|t*1|t*3L' on pp 2\n"
    "                    (E input, t block, L loss, '|' between stages); vpp = stages / pp\n"
    "  --schedule-csv F  the schedule in F, PyTorch's pipeline-order CSV ('pipepar search --csv' writes it):\n"
    "                    pp, vpp and mb are the file's (given, they must agree); its sends and receives\n"
    "                    are lowered again\n"
    "  --split-backward  each whole backward as its input-gradient half, then its weight-gradient half\n"
    "  --trace FILE      the last step as a Chrome/Perfetto trace\n"
    "Defaults: --pp 4 --mb 8 --steps 20 --width 64 --hidden 256 --rows 16 --lr 4 --timeout 60.\n";

/* The options: the plan's, and the model's sizes. Returns 0, -1 after --help, or 2 after why. */
static int parse(int argc, char **argv, pp_plan_config *pc, trainer *tr, const char **csv, int *D, int *H,
                 int *rows)
{
    pp_error err;
    int i, used, given_schedule = 0, search_kind = 0;
    double x;
    for (i = 1; i < argc; i += used) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        used = 2;                   /* a flag and its value; a switch is one word */
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { fputs(help, stdout); return -1; }
        if (!strcmp(f, "--split-backward")) { pc->split_backward = used = 1; continue; }
        if (!strcmp(f, "--search-layout")) { pc->search_layout = used = 1; continue; }
        if (!strcmp(f, "--pp")) ok = int_flag(v, 1, MAX_RANKS, &pc->pp);
        else if (!strcmp(f, "--vpp")) ok = int_flag(v, 1, 64, &pc->vpp);
        else if (!strcmp(f, "--mb")) ok = int_flag(v, 1, 4096, &pc->mb);
        else if (!strcmp(f, "--group")) ok = int_flag(v, 1, 4096, &pc->group);
        else if (!strcmp(f, "--steps")) ok = int_flag(v, 1, 100000, &tr->steps);
        else if (!strcmp(f, "--layers")) ok = int_flag(v, 1, 4096, &pc->layers);
        else if (!strcmp(f, "--width")) ok = int_flag(v, 1, 4096, D);
        else if (!strcmp(f, "--hidden")) ok = int_flag(v, 1, 16384, H);
        else if (!strcmp(f, "--rows")) ok = int_flag(v, 1, 65536, rows);
        else if (!strcmp(f, "--lr")) { x = v ? atof(v) : 0; ok = x > 0; tr->lr = (float)x; }
        else if (!strcmp(f, "--timeout")) ok = v && (tr->timeout = atof(v)) > 0;
        else if (!strcmp(f, "--trace")) { ok = v != NULL; tr->trace = v; }
        else if (!strcmp(f, "--layout")) { ok = v != NULL; pc->layout = v; }
        else if (!strcmp(f, "--schedule-csv")) { ok = v != NULL; *csv = v; }
        else if (!strcmp(f, "--schedule") || !strcmp(f, "--search-kind")) {
            int is_kind = !strcmp(f, "--schedule");
            given_schedule |= is_kind;
            search_kind |= !is_kind;
            if (!v) ok = 0;
            else if (is_kind && !strcmp(v, "search")) pc->search = 1;
            else if (!is_kind && !strcmp(v, "greedy")) pc->kind = PP_CUSTOM;
            else if (pp_schedule_kind_parse(v, &pc->kind, &err) != PP_OK) return usage("mlp_plan", f, v, err.message);
            if (v && is_kind) tr->name = v;
        } else { fprintf(stderr, "mlp_plan: %s: unknown flag (see --help)\n", f); return 2; }
        if (!ok) return usage("mlp_plan", f, v, v ? "expected a positive number in range (see --help)" : "needs a value");
    }
    if (search_kind && !pc->search) return usage("mlp_plan", "--search-kind", "", "only with --schedule search");
    if (!given_schedule && !*csv) pc->kind = PP_INTERLEAVED_1F1B;
    if (!pc->vpp && !pc->search && !pc->layout && !*csv &&
        (pc->kind == PP_INTERLEAVED_1F1B || pc->kind == PP_LOOPED_BFS || pc->kind == PP_INTERLEAVED_ZB))
        pc->vpp = 2;                /* as the lesson: interleaved kinds with one chunk a rank are 1F1B */
    if (!*csv && !pc->pp) pc->pp = 4;
    if (!*csv && !pc->mb) pc->mb = 8;
    return 0;
}

/* The exit code for a plan the library refused: 2 for the request, 1 for the environment. */
static int refused(pp_status st) { return st == PP_ENOMEM || st == PP_EIO ? 1 : 2; }

int main(int argc, char **argv)
{
    trainer tr;
    pp_plan_config pc;
    pp_plan *plan = NULL;
    pp_error err;
    pp_status st;
    const char *csv = NULL;
    char *text = NULL, why[160], name[192], where[160] = "";
    size_t len = 0;
    int D = 64, H = 256, rows = 16, rc;
    memset(&tr, 0, sizeof tr);
    memset(&pc, 0, sizeof pc);
    tr.prog = "mlp_plan"; tr.name = "interleaved"; tr.steps = 20; tr.lr = 4; tr.timeout = 60;
    if ((rc = parse(argc, argv, &pc, &tr, &csv, &D, &H, &rows)) != 0) return rc < 0 ? 0 : rc;
    if (csv) {   /* the file's text: pp_plan_build reads no files */
        if ((rc = text_file_read(csv, &text, &len, why, sizeof why)) != 0)
            return fprintf(stderr, "mlp_plan: --schedule-csv=%s: %s\n", csv, why), rc;
        pc.csv = text; pc.csv_len = len;
        pc.csv_name = strrchr(csv, '/') ? strrchr(csv, '/') + 1 : csv;
        snprintf(where, sizeof where, "--schedule-csv=%.140s: ", csv);
    }
    /* the plan: the layer split; the schedule built, searched or read; lowered, split, proven (a
     * layout search on every core: its splits are independent) */
    if (pc.search_layout) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        pc.threads = cores > 1 ? (int)(cores < 64 ? cores : 64) : 1;
    }
    st = pp_plan_build(&pc, &plan, &err);
    free(text);
    if (st != PP_OK) return fprintf(stderr, "mlp_plan: %s%s\n", where, err.message), refused(st);
    if (plan->schedule->pp > MAX_RANKS || plan->schedule->vpp > 64 || plan->schedule->mb > 4096) {
        fprintf(stderr, "mlp_plan: %sthe file has %d rank(s), %d chunk(s) per rank and %d microbatch(es); this example "
                "runs at most %d, 64 and 4096\n", where, plan->schedule->pp, plan->schedule->vpp, plan->schedule->mb,
                MAX_RANKS);
        pp_plan_free(plan);
        return 2;
    }
    snprintf(name, sizeof name, "%s", plan->name);
    if (plan->search) {
        const pp_search_entry *won = &plan->search->entries[0];
        if (won->stage_layers) {
            char layout[1024];
            int need = pp_search_layout_text(won->stage_layers, plan->layers->num_stages, layout, sizeof layout);
            printf("  search    %ld splits of %d blocks; the fastest: %s on '%s'\n", plan->search->layouts,
                   plan->layers->num_layers, won->name, need < (int)sizeof layout ? layout : plan->layers->layout);
        }
        snprintf(name, sizeof name, "search: %.120s (of %d simulated)", plan->name, plan->search->count);
    }
    tr.name = name;
    tr.schedule = plan->schedule;
    tr.model_stages = plan->layers->num_stages;
    tr.first = plan->layers->first;
    tr.count = plan->layers->count;
    rc = train(&tr, D, H, rows);
    pp_plan_free(plan);
    return rc;
}
