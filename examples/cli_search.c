/* pipepar search — which schedule is fastest for these costs under this memory cap?
 *
 *   pipepar search --pp 4 --mb 16 --f 1 --i 1 --w 0.8 --p2p 0.05 --max-mem 4 --csv best.csv
 *
 * Builds every schedule kind with the parameters worth trying (vpp, microbatch group, zb-h2's
 * cap) plus greedy zero-bubble schedules (pp_search in pipepar.h), proves and simulates each,
 * prints the ranking and writes the winner as PyTorch's pipeline-order CSV, which
 * `pipepar schedule --from-csv` and the runtime read back.                                   */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

/* A search can take minutes (a layout search simulates every schedule on every split): on a
 * terminal, after a second, one line on stderr says where it is, rewritten twice a second. */
typedef struct search_meter {
    struct timespec start, last;
    int shown;
} search_meter;

static double search_seconds(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + 1e-9 * (double)(b->tv_nsec - a->tv_nsec);
}

static void search_progress(void *user, const pp_search_progress *where)
{
    search_meter *m = (search_meter *)user;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (search_seconds(&m->start, &now) < 1.0 || (m->shown && search_seconds(&m->last, &now) < 0.5)) return;
    m->last = now;
    m->shown = 1;
    if (where->splits_total)
        fprintf(stderr, "\rsearching: vpp %d, split %ld of at most %ld; %ld schedules simulated, %.0f s   ", where->vpp,
                where->splits_done, where->splits_total, where->simulated, search_seconds(&m->start, &now));
    else
        fprintf(stderr, "\rsearching: vpp %d; %ld schedules simulated, %.0f s   ", where->vpp, where->simulated,
                search_seconds(&m->start, &now));
    fflush(stderr);
}

const char pp_cli_search_summary[] = "rank every schedule by simulated step time under a memory cap; emit the best";

static void search_usage(FILE *out)
{
    fprintf(out,
            "usage: pipepar search --pp P --mb M [costs] [--max-mem X] [--vpp V | --max-vpp V] [--top N]\n"
            "                      [--kind K] [--layers N [--spread S] [--max-layouts N] [--embedding F,I,W[,M]]\n"
            "                      [--loss F,I,W[,M]] [--layer-costs FILE] [--threads T]] [--split-backward] [--csv FILE]\n"
            "                      [--json]\n"
            "  costs, in time units for one rank's share of the model (a chunk costs 1/vpp of it):\n"
            "  --f F          forward (default 1)\n"
            "  --i I --w W    input-gradient and weight-gradient halves of the backward (default B/2 each)\n"
            "  --b B          full backward, when --i/--w are not given (default 2F)\n"
            "  --f-stage LIST per-stage costs instead, comma-separated, pp*vpp values (needs --vpp);\n"
            "  --i-stage, --w-stage, --b-stage likewise; --mem-stage LIST: activation memory of each\n"
            "                 stage (peak memory and --max-mem then weigh stages by it)\n"
            "  --layout STR   stages of unequal size, a Megatron layout (E input, t layer, L loss, '|'\n"
            "                 between stages, e.g. 'Et*2|t*6|t*2|t*6L'): vpp = stages / pp, and each stage\n"
            "                 costs its layers times --f, --i, --w per layer (default 1 each) and keeps\n"
            "                 activations in proportion (stage s is model piece s; the schedule places it)\n"
            "  --layers N     choose the layout too: N layers split into pp*vpp stages every way that keeps\n"
            "                 each stage within --spread S (default 1) layers of the even split; --f, --i,\n"
            "                 --w are per layer; each schedule is shown with its fastest split. Above\n"
            "                 --max-layouts splits per vpp (default 4096), a descent from the even split\n"
            "                 (one layer moved at a time) that tries at most that many\n"
            "  --threads T    with --layers: search a vpp's splits on T threads (default: this machine's\n"
            "                 cores; the result is the same for any T)\n"
            "  --embedding F,I,W[,M]  --loss F,I,W[,M]   with --layers: the input layer's costs on the first\n"
            "                 stage and the output layer and loss's on the last (forward, input and weight\n"
            "                 gradient, and activation memory in layers; default 0): a dear loss gets a\n"
            "                 last stage with fewer layers\n"
            "  --layer-costs FILE  each layer's own costs, a line per layer in model order: F I W [M]\n"
            "                 (blank lines and # comments skipped); sets --layers to the line count\n"
            "  --kind K       only this kind (interleaved, zbv, ..., greedy): a trainer without a split\n"
            "                 backward wants --kind interleaved or 1f1b\n"
            "  --split-backward  each whole backward B as its I then its W (a trainer with both halves):\n"
            "                 the B's output gradient leaves before its weight gradient is computed\n"
            "  --p2p L        latency per transfer; --bytes N --bandwidth GBPS add N bytes at GBPS\n"
            "  --max-mem X    cap on every rank's peak activations, in microbatches through the rank's\n"
            "                 layers (1F1B's first rank needs pp); default: no cap\n"
            "  --vpp V        try only this vpp (default: 1..max-vpp); --max-vpp V (default 4)\n"
            "  --top N        rows to print (default 15; 0 = all)\n"
            "  --csv FILE     write the winner (with its sends and receives) as PyTorch's CSV\n"
            "  --json         the ranking as JSON instead of a table\n");
}

/* Parses "1,1.5,2" into exactly `want` non-negative numbers. */
static int parse_list(const char *flag, const char *text, int want, double *out)
{
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end, buf[64];
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        double v;
        if (len == 0 || len >= sizeof buf) {
            cli_usage_error("%s: '%s': expected comma-separated numbers", flag, text);
            return 0;
        }
        memcpy(buf, p, len); buf[len] = '\0';
        v = strtod(buf, &end);
        if (end == buf || *end != '\0' || v != v || v < 0 || v > 1e300) {
            cli_usage_error("%s: '%s' is not a number >= 0", flag, buf);
            return 0;
        }
        if (n < want) out[n] = v;
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    if (n != want) {
        cli_usage_error("%s: %d values, expected pp*vpp = %d", flag, n, want);
        return 0;
    }
    return 1;
}

/* Parses "F,I,W" or "F,I,W,M" (numbers >= 0) into *c; 0 after printing why on failure. */
static int parse_layer_costs(const char *flag, const char *text, pp_layer_costs *c)
{
    double v[4] = { 0, 0, 0, 0 };
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end;
        if (n == 4) { cli_usage_error("%s: '%s': at most 4 numbers (F,I,W[,M])", flag, text); return 0; }
        v[n] = strtod(p, &end);
        if (end == p || v[n] != v[n] || v[n] < 0 || v[n] > 1e300 || (*end != ',' && *end != '\0')) {
            cli_usage_error("%s: '%s': expected F,I,W or F,I,W,M, numbers >= 0", flag, text);
            return 0;
        }
        n++;
        if (*end == '\0') break;
        p = end + 1;
    }
    if (n < 3) { cli_usage_error("%s: '%s': expected F,I,W or F,I,W,M, numbers >= 0", flag, text); return 0; }
    c->f = v[0]; c->i = v[1]; c->w = v[2]; c->memory = v[3];
    return 1;
}

/* Reads FILE's "F I W [M]" lines (spaces, tabs or commas between; '#' comments and blank lines
 * skipped) into a new array; *count receives the number of layers. 0 after printing why. */
static int read_layer_costs(const char *path, pp_layer_costs **out, int *count)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int n = 0, cap = 0, lineno = 0;
    pp_layer_costs *all = NULL;
    *out = NULL; *count = 0;
    if (!f) { cli_usage_error("--layer-costs '%s': cannot open for reading", path); return 0; }
    while (fgets(line, sizeof line, f)) {
        double v[4] = { 0, 0, 0, 0 };
        char *p = line, *hash = strchr(line, '#');
        int k = 0;
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            cli_usage_error("--layer-costs '%s': line %d: over %d characters", path, lineno, (int)sizeof line - 2);
            goto fail;
        }
        if (hash) *hash = '\0';
        for (;;) {
            char *end;
            while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r' || *p == '\n') p++;
            if (!*p) break;
            if (k == 4) { cli_usage_error("--layer-costs '%s': line %d: more than 4 numbers (F I W [M])", path, lineno); goto fail; }
            v[k] = strtod(p, &end);
            if (end == p || v[k] != v[k] || v[k] < 0 || v[k] > 1e300) {
                int len = (int)strcspn(p, " \t,\r\n");
                cli_usage_error("--layer-costs '%s': line %d: '%.*s' is not a number >= 0", path, lineno,
                                len < 20 ? len : 20, p);
                goto fail;
            }
            k++;
            p = end;
        }
        if (k == 0) continue;
        if (k < 3) { cli_usage_error("--layer-costs '%s': line %d: %d number(s), expected F I W [M]", path, lineno, k); goto fail; }
        if (n == 4096) { cli_usage_error("--layer-costs '%s': more than 4096 layers", path); goto fail; }
        if (n == cap) {
            pp_layer_costs *na = (pp_layer_costs *)realloc(all, (size_t)(cap ? 2 * cap : 64) * sizeof *na);
            if (!na) { cli_usage_error("out of memory"); goto fail; }
            all = na; cap = cap ? 2 * cap : 64;
        }
        all[n].f = v[0]; all[n].i = v[1]; all[n].w = v[2]; all[n].memory = k == 4 ? v[3] : 1;
        n++;
    }
    if (ferror(f)) { cli_usage_error("--layer-costs '%s': read error", path); goto fail; }
    fclose(f);
    if (n == 0) { free(all); cli_usage_error("--layer-costs '%s': no layers in it", path); return 0; }
    *out = all; *count = n;
    return 1;
fail:
    fclose(f);
    free(all);
    return 0;
}

/* An entry's split as a Megatron layout string ('Et|t*2|t*3L'), for --layout of schedule and mlp_gpu. */
static void print_layout(const pp_search_entry *e, int pp)
{
    char small[256], *buf = small;
    int stages = pp * e->vpp, need = pp_search_layout_text(e->stage_layers, stages, small, sizeof small);
    if ((size_t)need >= sizeof small && (buf = (char *)malloc((size_t)need + 1)) != NULL)
        pp_search_layout_text(e->stage_layers, stages, buf, (size_t)need + 1);
    fputs(buf ? buf : "(out of memory)", stdout);
    if (buf != small) free(buf);
}

int pp_cli_search(int argc, char **argv)
{
    pp_search_config cfg;
    pp_search_result *res = NULL;
    pp_error err;
    const char *csv = NULL, *layout = NULL, *layer_costs_path = NULL, *stage_text[5] = { NULL, NULL, NULL, NULL, NULL };
    static const char *const stage_flag[5] = { "--f-stage", "--i-stage", "--w-stage", "--b-stage", "--mem-stage" };
    double *stage[5] = { NULL, NULL, NULL, NULL, NULL }, bytes = 0, gbps = 0;
    pp_layers *lay = NULL;
    pp_layer_costs *layer_costs = NULL;
    FILE *csv_file = NULL;
    char csv_tmp[4200] = "";
    search_meter meter = { { 0, 0 }, { 0, 0 }, 0 };
    pp_status st;
    long v, top = 15, spread = 0;
    int i, k, name_width = 54, have_threads = 0, json = 0, have_pp = 0, have_mb = 0, have_ends = 0, rc = 0;
    memset(&cfg, 0, sizeof cfg);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { search_usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--split-backward")) { cfg.split_backward = 1; continue; }
        if (a[0] != '-') return cli_usage_error("unexpected argument '%s' (see pipepar search --help)", a);
        /* a flag's value is the next word; at the end of the line there is none, and each kind of
         * flag says so (cli_parse_* print "needs a value"; an unknown flag stays unknown) */
        if (val) i++;
#define SEARCH_NEEDS_VALUE() do { if (!val) return cli_usage_error("%s: needs a value", a); } while (0)
        if (!strcmp(a, "--pp")) {
            if (!cli_parse_int("--pp", val, 1, 4096, &v)) return 2;
            cfg.pp = (int)v; have_pp = 1;
        } else if (!strcmp(a, "--mb")) {
            if (!cli_parse_int("--mb", val, 1, 1 << 20, &v)) return 2;
            cfg.mb = (int)v; have_mb = 1;
        } else if (!strcmp(a, "--vpp")) {
            if (!cli_parse_int("--vpp", val, 1, 64, &v)) return 2;
            cfg.vpp = (int)v;
        } else if (!strcmp(a, "--max-vpp")) {
            if (!cli_parse_int("--max-vpp", val, 1, 64, &v)) return 2;
            cfg.max_vpp = (int)v;
        } else if (!strcmp(a, "--top")) {
            if (!cli_parse_int("--top", val, 0, 1 << 20, &top)) return 2;
        } else if (!strcmp(a, "--f")) {
            if (!cli_parse_double("--f", val, 1e-12, &cfg.costs.f)) return 2;
        } else if (!strcmp(a, "--b")) {
            if (!cli_parse_double("--b", val, 1e-12, &cfg.costs.b)) return 2;
        } else if (!strcmp(a, "--i")) {
            if (!cli_parse_double("--i", val, 0, &cfg.costs.i)) return 2;
        } else if (!strcmp(a, "--w")) {
            if (!cli_parse_double("--w", val, 0, &cfg.costs.w)) return 2;
        } else if (!strcmp(a, "--p2p")) {
            if (!cli_parse_double("--p2p", val, 0, &cfg.costs.p2p_latency)) return 2;
        } else if (!strcmp(a, "--bytes")) {
            if (!cli_parse_double("--bytes", val, 0, &bytes)) return 2;
        } else if (!strcmp(a, "--bandwidth")) {
            if (!cli_parse_double("--bandwidth", val, 1e-9, &gbps)) return 2;
        } else if (!strcmp(a, "--max-mem")) {
            if (!cli_parse_double("--max-mem", val, 0, &cfg.max_memory)) return 2;
        } else if (!strcmp(a, "--layers")) {
            if (!cli_parse_int("--layers", val, 1, 1 << 20, &v)) return 2;
            cfg.layers = (int)v;
        } else if (!strcmp(a, "--spread")) {
            if (!cli_parse_int("--spread", val, 1, 1 << 20, &spread)) return 2;
            cfg.layout_spread = (int)spread;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int("--threads", val, 1, 1024, &v)) return 2;
            cfg.threads = (int)v; have_threads = 1;
        } else if (!strcmp(a, "--max-layouts")) {
            if (!cli_parse_int("--max-layouts", val, 1, 1L << 30, &cfg.max_layouts)) return 2;
        } else if (!strcmp(a, "--layer-costs")) {
            SEARCH_NEEDS_VALUE();
            layer_costs_path = val;
        } else if (!strcmp(a, "--embedding") || !strcmp(a, "--loss")) {
            SEARCH_NEEDS_VALUE();
            if (!parse_layer_costs(a, val, !strcmp(a, "--loss") ? &cfg.loss : &cfg.embedding)) return 2;
            have_ends = 1;
        } else if (!strcmp(a, "--kind")) {
            SEARCH_NEEDS_VALUE();
            if (!strcmp(val, "greedy")) cfg.kind = PP_CUSTOM;
            else if (pp_schedule_kind_parse(val, &cfg.kind, &err) != PP_OK)
                return cli_usage_error("--kind=%s: %s", val, err.message);
        } else if (!strcmp(a, "--csv")) {
            SEARCH_NEEDS_VALUE();
            csv = val;
        } else if (!strcmp(a, "--layout")) {
            SEARCH_NEEDS_VALUE();
            layout = val;
        } else {
            for (k = 0; k < 5 && strcmp(a, stage_flag[k]); k++) {}
            if (k == 5) return cli_usage_error("unknown flag '%s' (see pipepar search --help)", a);
            SEARCH_NEEDS_VALUE();
            stage_text[k] = val;
        }
#undef SEARCH_NEEDS_VALUE
    }
    if (!have_pp) return cli_usage_error("--pp: required (pipeline ranks, >= 1)");
    if (!have_mb) return cli_usage_error("--mb: required (microbatches per step, >= 1)");
    /* the search proves and simulates some 200 schedules: pp=32 mb=128 takes about 9 s here */
    if ((long)cfg.pp * cfg.mb > 8192)
        return cli_usage_error("--pp %d --mb %d: pp*mb=%ld, at most 8192 for a search (it simulates ~200 schedules; "
                               "time one kind with 'pipepar simulate')", cfg.pp, cfg.mb, (long)cfg.pp * cfg.mb);
    if ((cfg.costs.i > 0) != (cfg.costs.w > 0))
        return cli_usage_error("%s given without %s: give both halves of the split backward",
                               cfg.costs.i > 0 ? "--i" : "--w", cfg.costs.i > 0 ? "--w" : "--i");
    if (cfg.costs.i > 0 && cfg.costs.b > 0 && cfg.costs.b != cfg.costs.i + cfg.costs.w)
        return cli_usage_error("--b=%g: with --i and --w it must be their sum (%g), or leave it out", cfg.costs.b,
                               cfg.costs.i + cfg.costs.w);
    if (cfg.vpp && cfg.max_vpp) return cli_usage_error("--vpp and --max-vpp: give one (--vpp tries only that vpp)");
    if (layer_costs_path) {
        int n = 0;
        if (!read_layer_costs(layer_costs_path, &layer_costs, &n)) return 2;
        if (cfg.layers && cfg.layers != n) {
            free(layer_costs);
            return cli_usage_error("--layers=%d: --layer-costs '%s' has %d layers", cfg.layers, layer_costs_path, n);
        }
        cfg.layers = n;
        cfg.layer_costs = layer_costs;
        if (cfg.costs.f > 0 || cfg.costs.i > 0 || cfg.costs.w > 0 || cfg.costs.b > 0) {
            free(layer_costs);
            return cli_usage_error("--layer-costs and --f/--i/--w/--b: give one (the file has every layer's)");
        }
    }
    if (!cfg.layers && have_ends) {
        rc = cli_usage_error("--embedding/--loss: only with --layers (the layout search; a --layout's E and L cost "
                             "nothing)");
        goto done;
    }
    if (!cfg.layers && (cfg.layout_spread || cfg.max_layouts || have_threads)) {
        rc = cli_usage_error("%s: only with --layers (the layout search)", cfg.layout_spread ? "--spread" :
                             cfg.max_layouts ? "--max-layouts" : "--threads");
        goto done;
    }
    if (cfg.layers && layout) { rc = cli_usage_error("--layers and --layout: give one (--layers searches the layouts)"); goto done; }
    if (cfg.layers && cfg.costs.b > 0 && cfg.costs.i <= 0) {
        rc = cli_usage_error("--layers with --b: give the halves --i and --w per layer instead");
        goto done;
    }
    for (k = 0; k < 5 && cfg.layers; k++)
        if (stage_text[k]) { rc = cli_usage_error("--layers and %s: give one (each split sets every stage's cost)", stage_flag[k]); goto done; }
    if (bytes > 0) {
        if (gbps <= 0) { rc = cli_usage_error("--bytes: needs --bandwidth (GB/s) too"); goto done; }
        cfg.costs.activation_bytes = bytes;
        cfg.costs.p2p_seconds_per_byte = 1.0 / (gbps * 1e9);
    }
    if (layout) {
        /* per layer F, I, W (default 1 each), B = I + W, and one unit of memory */
        double per[5];
        for (k = 0; k < 5; k++)
            if (stage_text[k]) { rc = cli_usage_error("--layout and %s: give one (the layout sets every stage's cost)", stage_flag[k]); goto done; }
        if (cfg.costs.b > 0 && cfg.costs.i <= 0)
            { rc = cli_usage_error("--layout with --b: give the halves --i and --w per layer instead"); goto done; }
        per[0] = cfg.costs.f > 0 ? cfg.costs.f : 1;
        per[1] = cfg.costs.i > 0 ? cfg.costs.i : 1;
        per[2] = cfg.costs.w > 0 ? cfg.costs.w : 1;
        per[3] = per[1] + per[2];
        per[4] = 1;
        if ((rc = cli_layout_stages(layout, cfg.pp, per, 5, stage, &lay)) != 0) goto done;
        if (cfg.vpp && cfg.vpp != lay->vpp) {
            rc = cli_usage_error("--vpp=%d: the layout has %d stages, so vpp = %d (or leave --vpp out)", cfg.vpp,
                                 lay->num_stages, lay->vpp);
            goto done;
        }
        if (cfg.max_vpp) { rc = cli_usage_error("--layout and --max-vpp: the layout fixes vpp = %d", lay->vpp); goto done; }
        cfg.vpp = lay->vpp;
    }
    for (k = 0; k < 5; k++) {
        if (!stage_text[k]) continue;
        if (!cfg.vpp) { rc = cli_usage_error("%s: per-stage costs need --vpp (they hold pp*vpp values)", stage_flag[k]); goto done; }
        stage[k] = (double *)calloc((size_t)cfg.pp * (size_t)cfg.vpp, sizeof(double));
        if (!stage[k]) { rc = cli_usage_error("out of memory"); goto done; }
        if (!parse_list(stage_flag[k], stage_text[k], cfg.pp * cfg.vpp, stage[k])) { rc = 2; goto done; }
    }
    cfg.costs.f_stage = stage[0]; cfg.costs.i_stage = stage[1]; cfg.costs.w_stage = stage[2]; cfg.costs.b_stage = stage[3];
    cfg.costs.memory_stage = stage[4];

    if (csv) {
        /* Before the search, which can take minutes, a path that cannot be written fails now. A
         * file (or none yet) is written aside and renamed over the path once there is a winner,
         * so a failed or interrupted search leaves what was there; anything else (/dev/stdout,
         * a pipe) is written directly at the end. */
        struct stat sb;
        if (stat(csv, &sb) != 0 || S_ISREG(sb.st_mode)) {
            snprintf(csv_tmp, sizeof csv_tmp, "%s.tmp.%ld", csv, (long)getpid());
            csv_file = fopen(csv_tmp, "w");
            if (!csv_file) { rc = cli_usage_error("--csv '%s': cannot open for writing: %s", csv, strerror(errno)); goto done; }
        } else if (access(csv, W_OK) != 0) {
            rc = cli_usage_error("--csv '%s': cannot open for writing: %s", csv, strerror(errno));
            goto done;
        }
    }
    if (!have_threads) {   /* every core: the splits are independent */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg.threads = cores > 1 ? (int)(cores < 64 ? cores : 64) : 1;
    }
    if (isatty(STDERR_FILENO)) {
        clock_gettime(CLOCK_MONOTONIC, &meter.start);
        cfg.progress = search_progress;
        cfg.progress_user = &meter;
    }
    st = pp_search(&cfg, &res, &err);
    if (meter.shown) fprintf(stderr, "\r%*s\r", 100, "");   /* the meter's line, cleared */
    if (st != PP_OK) { rc = cli_report(&err); goto done; }
    if (json) {
        printf("{\"pp\": %d, \"mb\": %d, \"max_memory\": %.9g, ", cfg.pp, cfg.mb, cfg.max_memory);
        if (cfg.layers) printf("\"layers\": %d, \"layouts\": %ld, \"layouts_local\": %s, ", cfg.layers, res->layouts,
                               res->layouts_local ? "true" : "false");
        printf("\"entries\": [");
        for (k = 0; k < res->count; k++) {
            const pp_search_entry *e = &res->entries[k];
            printf("%s\n  {\"name\": \"%s\", \"kind\": \"%s\", \"vpp\": %d, \"group\": %d, \"max_live\": %d, "
                   "\"split_overlaps\": %s, \"split_backward\": %s, \"makespan\": %.9g, \"bubble\": %.9g, \"peak_memory\": %.9g, "
                   "\"peak_live\": %d, \"fits\": %s",
                   k ? "," : "", e->name, e->kind == PP_CUSTOM ? "greedy" : pp_schedule_kind_name(e->kind), e->vpp,
                   e->group, e->max_live, e->split_overlaps ? "true" : "false",
                   e->split_backward ? "true" : "false", e->makespan, e->bubble, e->peak_memory,
                   e->peak_live, e->fits ? "true" : "false");
            if (e->stage_layers) {
                printf(", \"layout\": \"");
                print_layout(e, cfg.pp);
                printf("\"");
            }
            printf("}");
        }
        printf("\n]}\n");
    } else {
        const pp_search_entry *base = NULL;
        for (k = 0; k < res->count; k++)
            if (res->entries[k].kind == PP_1F1B) base = &res->entries[k];
        printf("pipepar search  pp=%d mb=%d  %d schedule%s proven and simulated", cfg.pp, cfg.mb, res->count,
               res->count == 1 ? "" : "s");
        if (cfg.layers && !res->layouts_local) printf(", each on every split of %d layers (%ld splits)", cfg.layers, res->layouts);
        if (cfg.layers && res->layouts_local)
            printf(", each on %ld splits of %d layers (where a vpp has more than --max-layouts, found by descent "
                   "from the even split)", res->layouts, cfg.layers);
        if (cfg.max_memory > 0) printf("; memory cap %g (1F1B needs %d)", cfg.max_memory, cfg.pp);
        for (k = 0; k < res->count && (top == 0 || k < top); k++)   /* the widest name shown sets the column */
            if ((int)strlen(res->entries[k].name) > name_width) name_width = (int)strlen(res->entries[k].name);
        printf("\n\n  #  %-*s %12s %8s %9s  %s\n", name_width, "schedule", "step time", "bubble", "peak mem",
               cfg.layers ? "its fastest layout" : "");
        for (k = 0; k < res->count && (top == 0 || k < top); k++) {
            const pp_search_entry *e = &res->entries[k];
            printf("%3d  %-*s %12.6g %7.2f%% %9.3f  ", k + 1, name_width, e->name, e->makespan, 100.0 * e->bubble, e->peak_memory);
            if (e->stage_layers) print_layout(e, cfg.pp);
            printf("%s%s\n", e->stage_layers && !e->fits ? "  " : "", e->fits ? "" : "over the cap");
        }
        if (top && res->count > top) printf("  ... %d more (--top 0 shows all)\n", res->count - (int)top);
        if (res->best) {
            printf("\nbest: %s, step time %.6g", res->entries[0].name, res->entries[0].makespan);
            if (base) printf(" (1f1b %.6g: %.3fx)", base->makespan, base->makespan / res->entries[0].makespan);
            if (res->entries[0].stage_layers) {
                printf("\nlayout: '");
                print_layout(&res->entries[0], cfg.pp);
                printf("'");
            }
            printf("\n");
        }
    }
    if (!res->best) {
        const pp_search_entry *least = NULL;
        for (k = 0; k < res->count; k++)
            if (!least || res->entries[k].peak_memory < least->peak_memory) least = &res->entries[k];
        fprintf(stderr, "pipepar: --max-mem=%g: no schedule fits; the least memory is %.3f (%s): every schedule "
                "holds one microbatch through all of a rank's layers at once\n", cfg.max_memory,
                least ? least->peak_memory : 0.0, least ? least->name : "none");
        rc = 1;
        goto done;
    }
    if (csv) {
        FILE *f = csv_file ? csv_file : fopen(csv, "w");
        csv_file = NULL;
        if (!f) { rc = cli_usage_error("--csv '%s': cannot open for writing: %s", csv, strerror(errno)); goto done; }
        if (pp_schedule_write_csv(res->best, f, &err) != PP_OK) rc = cli_report(&err);
        if (fclose(f) != 0 && rc == 0) rc = cli_usage_error("--csv '%s': write failed: %s", csv, strerror(errno));
        if (csv_tmp[0] && rc == 0 && rename(csv_tmp, csv) != 0)
            rc = cli_usage_error("--csv '%s': cannot rename %s to it: %s", csv, csv_tmp, strerror(errno));
        if (csv_tmp[0] && rc != 0) remove(csv_tmp);
        csv_tmp[0] = '\0';
        if (rc == 0 && !json) printf("wrote %s (PyTorch's pipeline-order CSV, sends and receives included)\n", csv);
    }
done:
    if (csv_file) fclose(csv_file);
    if (csv_tmp[0]) remove(csv_tmp);   /* no winner: the path keeps what it held */
    pp_search_result_free(res);
    pp_layers_free(lay);
    free(layer_costs);
    for (k = 0; k < 5; k++) free(stage[k]);
    return rc;
}
