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
            "                      [--loss F,I,W[,M] [--loss-deferred W]] [--layer-costs FILE [--hybrid STR]]\n"
            "                      [--threads T]]\n"
            "                      [--split-backward] [--rank-speed LIST] [--groups | --peer-groups] [--csv FILE] [--json]\n"
            "  costs, in time units for one rank's share of the model (a chunk costs 1/vpp of it):\n"
            "  --f F          forward (default 1)\n"
            "  --i I --w W    input-gradient and weight-gradient halves of the backward (default B/2 each)\n"
            "  --b B          full backward, when --i/--w are not given (default 2F)\n"
            "  --f-stage LIST per-stage costs instead, comma-separated, pp*vpp values (needs --vpp);\n"
            "  --i-stage, --w-stage, --b-stage likewise; --mem-stage LIST: activation memory of each\n"
            "                 stage (peak memory and --max-mem then weigh stages by it)\n"
            "  --layout STR   stages of unequal size, a Megatron layout (E input, t layer, L loss, '|'\n"
            "                 between stages, e.g. 'Et*2|t*6|t*2|t*6L'): vpp = stages / pp, and each stage\n"
            "                 costs its layers times --f, --i, --w per layer (defaults as above), or the sum of\n"
            "                 their --layer-costs lines, and keeps activations in proportion (stage s is model\n"
            "                 piece s; the schedule places it)\n"
            "  --layers N     choose the layout too: N layers split into pp*vpp stages every way that keeps\n"
            "                 each stage within --spread S (default 1) layers of the even split; --f, --i,\n"
            "                 --w are per layer; each schedule is shown with its fastest split. Above\n"
            "                 --max-layouts splits per vpp (default 4096), a descent from the even split\n"
            "                 (one layer moved at a time) that tries at most that many\n"
            "  --threads T    with --layers: search a vpp's splits on T threads (default: this machine's\n"
            "                 cores; the result is the same for any T)\n"
            "  --embedding F,I,W[,M]  --loss F,I,W[,M]   with --layers or a split: the input layer's\n"
            "                 costs on the first stage and the output layer and loss's on the last\n"
            "                 (forward, input and weight gradient, and activation memory in layers;\n"
            "                 default 0): a dear loss gets a last stage with fewer layers\n"
            "  --loss-deferred W  of the loss's backward (per microbatch), the part the trainer runs once a\n"
            "                 step after the last stage's last backward instead: the output layer's weight\n"
            "                 gradient under gpt --defer-head-wgrad (Megatron-LM's\n"
            "                 defer_embedding_wgrad_compute); out of --loss's W first, then its I\n"
            "  --layer-costs FILE  each layer's own costs, a line per layer in model order: F I W [M]\n"
            "                 (blank lines and # comments skipped); sets --layers to the line count, or\n"
            "                 with a split (--layout, --hybrid with '|') gives its layers' costs\n"
            "  --hybrid STR   the layers are this hybrid pattern's symbols (e.g. '*-*-' for two GPT layers\n"
            "                 cut between attention and MLP): the winner's split is shown as the pattern\n"
            "                 with '|' between stages too, for gpt --hybrid. With '|' between its stages it\n"
            "                 is a split to simulate, as --layout is\n"
            "  --kind K       only this kind (interleaved, zbv, ..., greedy): a trainer without a split\n"
            "                 backward wants --kind interleaved or 1f1b\n"
            "  --split-backward  each whole backward B as its I then its W (a trainer with both halves):\n"
            "                 the B's output gradient leaves before its weight gradient is computed\n"
            "  --p2p L        latency per transfer; --bytes N --bandwidth GBPS add N bytes at GBPS\n");
    fprintf(out,
            "  --groups      rank every schedule with its transfers as the runtime posts them (a round's\n"
            "                 transfers in one group that ends as a whole, one group after another on\n"
            "                 each rank: pipepar simulate --groups), as mlp_gpu's search does; the greedy\n"
            "                 scheduler still places each transfer on its own\n"
            "  --peer-groups each peer's transfers of a round in a group of their own, as the runtime posts\n"
            "                 them over a transport with independent peers (pipepar simulate --peer-groups)\n"
            "  --rank-speed LIST  each rank's speed, pp values from 1e-6 to 1e6 (1 / 1.35 for a GPU 1.35x slower, e.g.\n"
            "                 as mlp_gpu --adapt measures them): rank r computes an action of cost c in\n"
            "                 c / speed; with --layers the slow rank's stages get fewer layers\n"
            "  --max-mem X    cap on every rank's peak activations, in microbatches through the rank's\n"
            "                 layers (1F1B's first rank needs pp); default: no cap\n"
            "  --vpp V        try only this vpp (default: 1..max-vpp); --max-vpp V (default 4)\n"
            "  --top N        rows to print (default 15; 0 = all)\n"
            "  --csv FILE     write the winner (with its sends and receives) as PyTorch's CSV\n"
            "  --json         the ranking as JSON instead of a table\n");
}


/* Parses "F,I,W" or "F,I,W,M" (numbers >= 0) into *c; 0 after printing why on failure. */
static int parse_layer_costs(const char *flag, const char *text, pp_layer_costs *c)
{
    double v[4] = { 0, 0, 0, 0 };
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end;
        if (n == 4) { cli_usage_error("%s: '%s': at most 4 numbers (F,I,W[,M])", flag, cli_short(text)); return 0; }
        v[n] = strtod(p, &end);
        if (end == p || v[n] != v[n] || v[n] < 0 || v[n] > 1e300 || (*end != ',' && *end != '\0') ||
            isspace((unsigned char)*p)) {
            cli_usage_error("%s: '%s': expected F,I,W or F,I,W,M, numbers >= 0", flag, cli_short(text));
            return 0;
        }
        n++;
        if (*end == '\0') break;
        p = end + 1;
    }
    if (n < 3) { cli_usage_error("%s: '%s': expected F,I,W or F,I,W,M, numbers >= 0", flag, cli_short(text)); return 0; }
    c->f = v[0]; c->i = v[1]; c->w = v[2]; c->memory = v[3];
    return 1;
}

/* Reads FILE's "F I W [M]" lines (spaces, tabs or commas between; '#' comments and blank lines
 * skipped; at most 4096 layers, and cli_read_file's bounds) into a new array; *count receives
 * the number of layers. Returns 0, or the exit code after printing why. */
static int read_layer_costs(const char *path, pp_layer_costs **out, int *count)
{
    char *text = NULL, *line, *next;
    size_t len = 0;
    int n = 0, cap = 0, lineno = 0, rc;
    pp_layer_costs *all = NULL;
    *out = NULL; *count = 0;
    if ((rc = cli_read_file("--layer-costs", path, &text, &len)) != 0) return rc;
    for (line = text; line; line = next) {
        double v[4] = { 0, 0, 0, 0 };
        char *p = line, *hash;
        int k = 0;
        lineno++;
        if ((next = strchr(line, '\n')) != NULL) *next++ = '\0';
        if ((hash = strchr(line, '#')) != NULL) *hash = '\0';
        for (;;) {
            char *end;
            while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r') p++;
            if (!*p) break;
            if (k == 4) {
                rc = cli_usage_error("--layer-costs '%s': line %d: more than 4 numbers (F I W [M])", cli_short(path), lineno);
                goto fail;
            }
            v[k] = strtod(p, &end);
            if (end == p || v[k] != v[k] || v[k] < 0 || v[k] > 1e300 || (*end && !strchr(" \t,\r", *end))) {
                int w = (int)strcspn(p, " \t,\r");
                rc = cli_usage_error("--layer-costs '%s': line %d: '%.*s' is not a number >= 0", cli_short(path), lineno,
                                     w < 20 ? w : 20, p);
                goto fail;
            }
            k++;
            p = end;
        }
        if (k == 0) continue;
        if (k < 3) {
            rc = cli_usage_error("--layer-costs '%s': line %d: %d number(s), expected F I W [M]", cli_short(path), lineno, k);
            goto fail;
        }
        if (n == 4096) { rc = cli_usage_error("--layer-costs '%s': more than 4096 layers", cli_short(path)); goto fail; }
        if (n == cap) {
            pp_layer_costs *na = (pp_layer_costs *)realloc(all, (size_t)(cap ? 2 * cap : 64) * sizeof *na);
            if (!na) { rc = cli_env_error("out of memory"); goto fail; }
            all = na; cap = cap ? 2 * cap : 64;
        }
        all[n].f = v[0]; all[n].i = v[1]; all[n].w = v[2]; all[n].memory = k == 4 ? v[3] : 1;
        n++;
    }
    free(text);
    if (n == 0) { free(all); return cli_usage_error("--layer-costs '%s': no layers in it", cli_short(path)); }
    *out = all; *count = n;
    return 0;
fail:
    free(text);
    free(all);
    return rc;
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

/* --hybrid: an entry's split as the hybrid pattern whose symbols are the layers, '|' between
 * stages, for --hybrid of gpt and gpt_gpu. */
static void print_pattern(const pp_search_entry *e, int pp, const char *hybrid)
{
    int s, k, at = 0;
    for (s = 0; s < pp * e->vpp; s++) {
        if (s) putchar('|');
        for (k = 0; k < e->stage_layers[s]; k++) putchar(hybrid[at++]);
    }
}

/* What the flags ask for. stage[k] (allocated by search_parse) holds --f-stage .. --mem-stage. */
typedef struct search_opts {
    pp_search_config cfg;
    const char *csv, *layout, *layer_costs_path, *hybrid, *speed_text;
    double *stage[5];
    double *speed;              /* --rank-speed: pp entries */
    double bytes, gbps;
    long top;
    int json, have_threads, have_ends;
    int fixed;                  /* a split to simulate: --layout, or --hybrid with '|' */
} search_opts;

static const char *const search_stage_flag[5] = { "--f-stage", "--i-stage", "--w-stage", "--b-stage", "--mem-stage" };

static const cli_flag_spec search_specs[] = {
    { "--pp", CLI_VALUE }, { "--mb", CLI_VALUE }, { "--vpp", CLI_VALUE }, { "--max-vpp", CLI_VALUE },
    { "--top", CLI_VALUE }, { "--f", CLI_VALUE }, { "--b", CLI_VALUE }, { "--i", CLI_VALUE }, { "--w", CLI_VALUE },
    { "--p2p", CLI_VALUE }, { "--bytes", CLI_VALUE }, { "--bandwidth", CLI_VALUE }, { "--max-mem", CLI_VALUE },
    { "--layers", CLI_VALUE }, { "--spread", CLI_VALUE }, { "--threads", CLI_VALUE }, { "--max-layouts", CLI_VALUE },
    { "--layer-costs", CLI_VALUE }, { "--embedding", CLI_VALUE }, { "--loss", CLI_VALUE }, { "--kind", CLI_VALUE },
    { "--csv", CLI_VALUE }, { "--layout", CLI_VALUE }, { "--f-stage", CLI_VALUE }, { "--i-stage", CLI_VALUE },
    { "--w-stage", CLI_VALUE }, { "--b-stage", CLI_VALUE }, { "--mem-stage", CLI_VALUE }, { "--json", CLI_SWITCH },
    { "--split-backward", CLI_SWITCH }, { "--hybrid", CLI_VALUE }, { "--loss-deferred", CLI_VALUE },
    { "--rank-speed", CLI_VALUE }, { "--groups", CLI_SWITCH }, { "--peer-groups", CLI_SWITCH }, { NULL, 0 }
};

static void search_opts_free(search_opts *o)
{
    int k;
    for (k = 0; k < 5; k++) { free(o->stage[k]); o->stage[k] = NULL; }
    free(o->speed); o->speed = NULL;
}

/* One flag into *o; 1, or 0 after printing why. stage_text[k] keeps the per-stage lists for later. */
static int search_flag(search_opts *o, const char *a, const char *val, const char **stage_text)
{
    pp_search_config *cfg = &o->cfg;
    long v;
    int k;
    if (!strcmp(a, "--pp")) return cli_parse_int32("--pp", val, 1, PP_CSV_MAX_RANKS, &cfg->pp);
    if (!strcmp(a, "--mb")) return cli_parse_int32("--mb", val, 1, 1 << 20, &cfg->mb);
    if (!strcmp(a, "--vpp")) return cli_parse_int32("--vpp", val, 1, 64, &cfg->vpp);
    if (!strcmp(a, "--max-vpp")) return cli_parse_int32("--max-vpp", val, 1, 64, &cfg->max_vpp);
    if (!strcmp(a, "--top")) return cli_parse_int("--top", val, 0, 1 << 20, &o->top);
    if (!strcmp(a, "--f")) return cli_parse_double("--f", val, 1e-12, &cfg->costs.f);
    if (!strcmp(a, "--b")) return cli_parse_double("--b", val, 1e-12, &cfg->costs.b);
    if (!strcmp(a, "--i")) return cli_parse_double("--i", val, 0, &cfg->costs.i);
    if (!strcmp(a, "--w")) return cli_parse_double("--w", val, 0, &cfg->costs.w);
    if (!strcmp(a, "--p2p")) return cli_parse_double("--p2p", val, 0, &cfg->costs.p2p_latency);
    if (!strcmp(a, "--bytes")) return cli_parse_double("--bytes", val, 0, &o->bytes);
    if (!strcmp(a, "--bandwidth")) return cli_parse_double("--bandwidth", val, 1e-9, &o->gbps);
    if (!strcmp(a, "--max-mem")) return cli_parse_double("--max-mem", val, 0, &cfg->max_memory);
    if (!strcmp(a, "--layers")) return cli_parse_int32("--layers", val, 1, 1 << 20, &cfg->layers);
    if (!strcmp(a, "--spread")) return cli_parse_int32("--spread", val, 1, 1 << 20, &cfg->layout_spread);
    if (!strcmp(a, "--threads")) { o->have_threads = 1; return cli_parse_int32("--threads", val, 1, 1024, &cfg->threads); }
    if (!strcmp(a, "--max-layouts")) {
        if (!cli_parse_int("--max-layouts", val, 1, 1L << 30, &v)) return 0;
        cfg->max_layouts = v;
        return 1;
    }
    if (!strcmp(a, "--loss-deferred")) {
        o->have_ends = 1;
        return cli_parse_double("--loss-deferred", val, 0, &cfg->loss_deferred);
    }
    if (!strcmp(a, "--embedding") || !strcmp(a, "--loss")) {
        o->have_ends = 1;
        return parse_layer_costs(a, val, !strcmp(a, "--loss") ? &cfg->loss : &cfg->embedding);
    }
    if (!strcmp(a, "--kind")) return cli_parse_kind("--kind", val, &cfg->kind);
    if (!strcmp(a, "--layer-costs")) o->layer_costs_path = val;
    else if (!strcmp(a, "--csv")) o->csv = val;
    else if (!strcmp(a, "--layout")) o->layout = val;
    else if (!strcmp(a, "--hybrid")) o->hybrid = val;
    else if (!strcmp(a, "--rank-speed")) o->speed_text = val;
    else if (!strcmp(a, "--json")) o->json = 1;
    else if (!strcmp(a, "--split-backward")) cfg->split_backward = 1;
    else if (!strcmp(a, "--groups") || !strcmp(a, "--peer-groups")) {
        int g = a[2] == 'g' ? 1 : 2;
        if (cfg->costs.grouped && cfg->costs.grouped != g) { cli_usage_error("--groups and --peer-groups: give one"); return 0; }
        cfg->costs.grouped = g;
    }
    else
        for (k = 0; k < 5; k++)
            if (!strcmp(a, search_stage_flag[k])) stage_text[k] = val;
    return 1;
}

/* search's flags into *o, and every rule on how they combine that needs no file or library:
 * 0, -1 after the usage (--help), or an exit code after printing why. */
static int search_parse(int argc, char **argv, search_opts *o)
{
    pp_search_config *cfg = &o->cfg;
    const char *stage_text[5] = { NULL, NULL, NULL, NULL, NULL }, *a, *val;
    cli_args args;
    int k, layered;
    memset(o, 0, sizeof *o);
    o->top = 15;
    cli_args_init(&args, argc, argv, "search", search_specs, 0);
    while ((k = cli_next(&args, &a, &val)) > 0) {
        if (!strcmp(a, "--help")) { search_usage(stdout); return -1; }
        if (!search_flag(o, a, val, stage_text)) return 2;
    }
    if (k < 0) return 2;
    if (!cfg->pp) return cli_usage_error("--pp: required (pipeline ranks, >= 1)");
    if (!cfg->mb) return cli_usage_error("--mb: required (microbatches per step, >= 1)");
    /* the search proves and simulates some 200 schedules, each in time about pp*mb */
    if ((long)cfg->pp * cfg->mb > 8192)
        return cli_usage_error("--pp %d --mb %d: pp*mb=%ld, at most 8192 for a search (it simulates ~200 schedules; "
                               "time one kind with 'pipepar simulate')", cfg->pp, cfg->mb, (long)cfg->pp * cfg->mb);
    if ((cfg->costs.i > 0) != (cfg->costs.w > 0))
        return cli_usage_error("%s given without %s: give both halves of the split backward",
                               cfg->costs.i > 0 ? "--i" : "--w", cfg->costs.i > 0 ? "--w" : "--i");
    if (cfg->costs.i > 0 && cfg->costs.b > 0 && cfg->costs.b != cfg->costs.i + cfg->costs.w)
        return cli_usage_error("--b=%g: with --i and --w it must be their sum (%g), or leave it out", cfg->costs.b,
                               cfg->costs.i + cfg->costs.w);
    if (cfg->vpp && cfg->max_vpp) return cli_usage_error("--vpp and --max-vpp: give one (--vpp tries only that vpp)");
    if (o->layer_costs_path && (cfg->costs.f > 0 || cfg->costs.i > 0 || cfg->costs.w > 0 || cfg->costs.b > 0))
        return cli_usage_error("--layer-costs and --f/--i/--w/--b: give one (the file has every layer's)");
    if (o->layout && o->hybrid)
        return cli_usage_error("--layout and --hybrid: give one (a --hybrid pattern with '|' is a split too)");
    o->fixed = o->layout || (o->hybrid && strchr(o->hybrid, '|'));
    if (o->hybrid && strchr(o->hybrid, '/'))
        return cli_usage_error("--hybrid=%s: one symbol a layer, without MTP depths ('/')", cli_short(o->hybrid));
    layered = cfg->layers || (o->layer_costs_path && !o->fixed);
    if (!layered && !o->fixed && o->have_ends)
        return cli_usage_error("--embedding/--loss%s: with --layers (the layout search) or a split (--layout, --hybrid "
                               "with '|')", cfg->loss_deferred > 0 ? "/--loss-deferred" : "");
    if (cfg->loss_deferred > cfg->loss.i + cfg->loss.w)
        return cli_usage_error("--loss-deferred=%g: more than the loss's backward (--loss's I + W = %g), of which it "
                               "is a part", cfg->loss_deferred, cfg->loss.i + cfg->loss.w);
    if (!layered && (cfg->layout_spread || cfg->max_layouts || o->have_threads))
        return cli_usage_error("%s: only with --layers (the layout search)", cfg->layout_spread ? "--spread" :
                               cfg->max_layouts ? "--max-layouts" : "--threads");
    if (cfg->layers && o->fixed)
        return cli_usage_error("--layers and %s: give one (--layers searches the layouts)",
                               o->layout ? "--layout" : "--hybrid with '|'");
    if (o->hybrid && !layered && !o->fixed)
        return cli_usage_error("--hybrid: names the layers of a layout search (needs --layers or --layer-costs), or "
                               "with '|' between its stages is a split to simulate");
    if (layered && cfg->costs.b > 0 && cfg->costs.i <= 0)
        return cli_usage_error("--layers with --b: give the halves --i and --w per layer instead");
    for (k = 0; k < 5; k++) {
        if (!stage_text[k]) continue;
        if (layered) return cli_usage_error("--layers and %s: give one (each split sets every stage's cost)", search_stage_flag[k]);
        if (o->fixed)
            return cli_usage_error("%s and %s: give one (the split sets every stage's cost)",
                                   o->layout ? "--layout" : "--hybrid", search_stage_flag[k]);
    }
    if (o->bytes > 0 && o->gbps <= 0) return cli_usage_error("--bytes: needs --bandwidth (GB/s) too");
    if (o->gbps > 0 && o->bytes <= 0)
        return cli_usage_error("--bandwidth: needs --bytes too (a transfer's time is bytes / bandwidth)");
    if (o->fixed && cfg->costs.b > 0 && cfg->costs.i <= 0)
        return cli_usage_error("%s with --b: give the halves --i and --w per layer instead",
                               o->layout ? "--layout" : "--hybrid");
    if (o->fixed && cfg->max_vpp)
        return cli_usage_error("%s and --max-vpp: the split fixes vpp", o->layout ? "--layout" : "--hybrid");
    for (k = 0; k < 5; k++) {
        if (!stage_text[k]) continue;
        if (!cfg->vpp) return cli_usage_error("%s: per-stage costs need --vpp (they hold pp*vpp values)", search_stage_flag[k]);
        if (!(o->stage[k] = (double *)calloc((size_t)cfg->pp * (size_t)cfg->vpp, sizeof(double))))
            return cli_env_error("out of memory");
        if (!cli_parse_list(search_stage_flag[k], stage_text[k], cfg->pp * cfg->vpp, "pp*vpp", 0, o->stage[k])) return 2;
    }
    if (o->speed_text) {
        if (!(o->speed = (double *)calloc((size_t)cfg->pp, sizeof(double)))) return cli_env_error("out of memory");
        if (!cli_parse_list("--rank-speed", o->speed_text, cfg->pp, "pp", 1, o->speed) ||
            !cli_check_range("--rank-speed", o->speed, cfg->pp, 1e-6, 1e6, "a rank's speed"))
            return 2;
        cfg->costs.rank_speed = o->speed;
    }
    if (o->bytes > 0) {
        cfg->costs.activation_bytes = o->bytes;
        cfg->costs.p2p_seconds_per_byte = 1.0 / (o->gbps * 1e9);
    }
    cfg->costs.f_stage = o->stage[0]; cfg->costs.i_stage = o->stage[1]; cfg->costs.w_stage = o->stage[2];
    cfg->costs.b_stage = o->stage[3]; cfg->costs.memory_stage = o->stage[4];
    return 0;
}

/* --csv: before the search, which can take minutes, a path that cannot be written fails now. A
 * file (or none yet) is written aside (*tmp, size 4200) and renamed over the path once there is a
 * winner, so a failed or interrupted search leaves what was there; anything else (/dev/stdout, a
 * pipe) is written directly at the end (*f stays NULL). Returns 0 or the exit code. */
static int search_open_csv(const char *csv, FILE **f, char *tmp)
{
    struct stat sb;
    *f = NULL;
    tmp[0] = '\0';
    if (stat(csv, &sb) != 0 || S_ISREG(sb.st_mode)) {
        snprintf(tmp, 4200, "%s.tmp.%ld", csv, (long)getpid());
        if (!(*f = fopen(tmp, "w"))) {
            tmp[0] = '\0';
            return cli_usage_error("--csv '%s': cannot open for writing: %s", cli_short(csv), strerror(errno));
        }
    } else if (access(csv, W_OK) != 0) {
        return cli_usage_error("--csv '%s': cannot open for writing: %s", cli_short(csv), strerror(errno));
    }
    return 0;
}

/* The winner into --csv (f from search_open_csv, or opened now), then the rename. */
static int search_write_csv(const char *csv, FILE *f, char *tmp, const pp_schedule *best)
{
    char name[CLI_SHORT + 16];
    pp_error err;
    int rc = 0;
    snprintf(name, sizeof name, "--csv '%s'", cli_short(csv));
    if (!f && !(f = fopen(csv, "w"))) return cli_usage_error("%s: cannot open for writing: %s", name, strerror(errno));
    errno = 0;
    if ((rc = cli_written(pp_schedule_write_csv(best, f, &err), &err, name)) != 0) fclose(f);
    else rc = cli_close_output(f, name);
    if (tmp[0] && rc == 0 && rename(tmp, csv) != 0)
        rc = cli_env_error("%s: cannot rename %s to it: %s", name, cli_short(tmp), strerror(errno));
    if (tmp[0] && rc != 0) remove(tmp);
    tmp[0] = '\0';
    return rc;
}

/* The ranking as JSON. */
static void search_print_json(const search_opts *o, const pp_search_result *res)
{
    const pp_search_config *cfg = &o->cfg;
    int k;
    printf("{\"pp\": %d, \"mb\": %d, \"max_memory\": %.9g, ", cfg->pp, cfg->mb, cfg->max_memory);
    if (cfg->layers) printf("\"layers\": %d, \"layouts\": %ld, \"layouts_local\": %s, \"simulated\": %ld, \"ruled_out\": %ld, ",
                            cfg->layers, res->layouts, res->layouts_local ? "true" : "false", res->simulated, res->ruled_out);
    printf("\"entries\": [");
    for (k = 0; k < res->count; k++) {
        const pp_search_entry *e = &res->entries[k];
        printf("%s\n  {\"name\": \"%s\", \"kind\": \"%s\", \"vpp\": %d, \"group\": %d, \"max_live\": %d, "
               "\"split_overlaps\": %s, \"split_backward\": %s, \"makespan\": %.9g, \"bound\": %.9g, \"bubble\": %.9g, "
               "\"peak_memory\": %.9g, \"peak_live\": %d, \"fits\": %s",
               k ? "," : "", e->name, cli_kind_name(e->kind), e->vpp, e->group, e->max_live,
               e->split_overlaps ? "true" : "false", e->split_backward ? "true" : "false", e->makespan, e->bound,
               e->bubble, e->peak_memory, e->peak_live, e->fits ? "true" : "false");
        if (e->stage_layers) {
            printf(", \"layout\": \"");
            print_layout(e, cfg->pp);
            printf("\"");
            if (o->hybrid) {
                printf(", \"pattern\": \"");
                print_pattern(e, cfg->pp, o->hybrid);
                printf("\"");
            }
        }
        printf("}");
    }
    printf("\n]}\n");
}

/* The ranking as a table, and the winner. */
static void search_print_table(const search_opts *o, const pp_search_result *res)
{
    const pp_search_config *cfg = &o->cfg;
    const pp_search_entry *base = NULL;
    int k, name_width = 54;
    for (k = 0; k < res->count; k++)
        if (res->entries[k].kind == PP_1F1B) base = &res->entries[k];
    printf("pipepar search  pp=%d mb=%d  %d schedule%s", cfg->pp, cfg->mb, res->count, res->count == 1 ? "" : "s");
    if (!cfg->layers) printf(" proven and simulated");
    else if (!res->layouts_local) printf(", each on every split of %d layers (%ld splits)", cfg->layers, res->layouts);
    else
        printf(", each on %ld splits of %d layers (where a vpp has more than --max-layouts, found by descent "
               "from the even split)", res->layouts, cfg->layers);
    if (cfg->layers)   /* the pairs whose bound exceeds their schedule's best split so far are never built */
        printf(": %ld schedule-split pairs proven and simulated, %ld ruled out by their bound", res->simulated,
               res->ruled_out);
    if (cfg->max_memory > 0) printf("; memory cap %g (1F1B needs %d)", cfg->max_memory, cfg->pp);
    for (k = 0; k < res->count && (o->top == 0 || k < o->top); k++)   /* the widest name shown sets the column */
        if ((int)strlen(res->entries[k].name) > name_width) name_width = (int)strlen(res->entries[k].name);
    printf("\n\n  #  %-*s %12s %8s %9s  %s\n", name_width, "schedule", "step time", "bubble", "peak mem",
           cfg->layers ? "its fastest layout" : "");
    for (k = 0; k < res->count && (o->top == 0 || k < o->top); k++) {
        const pp_search_entry *e = &res->entries[k];
        printf("%3d  %-*s %12.3f %7.2f%% %9.3f  ", k + 1, name_width, e->name, e->makespan, 100.0 * e->bubble,
               e->peak_memory);
        if (e->stage_layers) print_layout(e, cfg->pp);
        printf("%s%s\n", e->stage_layers && !e->fits ? "  " : "", e->fits ? "" : "over the cap");
    }
    if (o->top && res->count > o->top) printf("  ... %d more (--top 0 shows all)\n", res->count - (int)o->top);
    if (!res->best) return;
    printf("\nbest: %s, step time " CLI_TIME, res->entries[0].name, res->entries[0].makespan);
    if (base) printf(" (1f1b " CLI_TIME ": %.3fx)", base->makespan, base->makespan / res->entries[0].makespan);
    if (res->entries[0].bound > 0)
        printf("\nbound: " CLI_TIME " (no order of its actions on its ranks is faster; it is %.2f%% above)",
               res->entries[0].bound, 100.0 * (res->entries[0].makespan / res->entries[0].bound - 1));
    if (res->entries[0].stage_layers) {
        printf("\nlayout: '");
        print_layout(&res->entries[0], cfg->pp);
        printf("'");
        if (o->hybrid) {
            printf("\npattern: '");
            print_pattern(&res->entries[0], cfg->pp, o->hybrid);
            printf("'");
        }
    }
    printf("\n");
}

int pp_cli_search(int argc, char **argv)
{
    search_opts o;
    pp_search_config *cfg = &o.cfg;
    pp_search_result *res = NULL;
    pp_error err;
    pp_layers *lay = NULL;
    pp_layer_costs *layer_costs = NULL;
    int n_layer_costs = 0;
    double *layout_costs = NULL, *tail = NULL;
    FILE *csv_file = NULL;
    char csv_tmp[4200] = "";
    search_meter meter = { { 0, 0 }, { 0, 0 }, 0 };
    pp_status st;
    int k, rc = search_parse(argc, argv, &o);
    if (rc) { search_opts_free(&o); return rc < 0 ? 0 : rc; }
    if (o.layer_costs_path) {
        int n = 0;
        if ((rc = read_layer_costs(o.layer_costs_path, &layer_costs, &n)) != 0) goto done;
        if (cfg->layers && cfg->layers != n) {
            rc = cli_usage_error("--layers=%d: --layer-costs '%s' has %d layers", cfg->layers, cli_short(o.layer_costs_path), n);
            goto done;
        }
        if (!o.fixed) {
            cfg->layers = n;
            cfg->layer_costs = layer_costs;
        }
        n_layer_costs = n;
    }
    if (o.hybrid && !o.fixed) {     /* Megatron's symbols, one a layer, no stage breaks (the search places them) */
        pp_layers_config hc;
        memset(&hc, 0, sizeof hc);
        hc.hybrid = o.hybrid;
        if (pp_layers_build(&hc, &lay, &err) != PP_OK) { rc = cli_report(&err); goto done; }
        if ((int)strlen(o.hybrid) != cfg->layers) {
            rc = cli_usage_error("--hybrid: %d symbols, but the search has %d layers", (int)strlen(o.hybrid), cfg->layers);
            goto done;
        }
        pp_layers_free(lay);
        lay = NULL;
    }
    if (o.fixed) {    /* each stage costs its layers' sum (per layer as the flags or the file say), and the ends' */
        pp_layers_config lc;
        int S, e;
        memset(&lc, 0, sizeof lc);
        lc.pp = cfg->pp; lc.layout = o.layout; lc.hybrid = o.layout ? NULL : o.hybrid;
        if (pp_layers_build(&lc, &lay, &err) != PP_OK) { rc = cli_report(&err); goto done; }
        if (cfg->vpp && cfg->vpp != lay->vpp) {
            rc = cli_usage_error("--vpp=%d: the %s has %d stages, so vpp = %d (or leave --vpp out)", cfg->vpp,
                                 o.layout ? "layout" : "pattern", lay->num_stages, lay->vpp);
            goto done;
        }
        if (layer_costs && n_layer_costs != lay->num_layers) {
            rc = cli_usage_error("--layer-costs '%s': %d layers, but the %s has %d", cli_short(o.layer_costs_path),
                                 n_layer_costs, o.layout ? "layout" : "pattern", lay->num_layers);
            goto done;
        }
        S = lay->num_stages;
        if (!(layout_costs = (double *)calloc((size_t)S * 5, sizeof(double)))) {
            rc = cli_env_error("out of memory");
            goto done;
        }
        if (pp_plan_stage_costs(lay, &cfg->costs, layer_costs, layout_costs, &cfg->costs, &err) != PP_OK) {
            rc = cli_report(&err);
            goto done;
        }
        for (e = 0; e < 2; e++) {       /* f, b, i, w, memory: the embedding on the first stage, the loss on the last */
            const pp_layer_costs *end = e ? &cfg->loss : &cfg->embedding;
            int s = e ? S - 1 : 0;
            layout_costs[s] += end->f; layout_costs[S + s] += end->i + end->w;
            layout_costs[2 * S + s] += end->i; layout_costs[3 * S + s] += end->w; layout_costs[4 * S + s] += end->memory;
        }
        if (cfg->loss_deferred > 0) {   /* out of the last stage's backwards, into its tail (pp_search_config.loss_deferred) */
            const double d = cfg->loss_deferred, from_w = d < cfg->loss.w ? d : cfg->loss.w;
            if (!(tail = (double *)calloc((size_t)S, sizeof(double)))) { rc = cli_env_error("out of memory"); goto done; }
            double *b = &layout_costs[2 * S - 1], *i = &layout_costs[3 * S - 1], *w = &layout_costs[4 * S - 1];
            *b = *b > d ? *b - d : 0;                           /* at 0 at least, give or take rounding */
            *i = *i > d - from_w ? *i - (d - from_w) : 0;
            *w = *w > from_w ? *w - from_w : 0;
            tail[S - 1] = d * cfg->mb;
            cfg->costs.tail_stage = tail;
            cfg->loss_deferred = 0;
        }
        memset(&cfg->embedding, 0, sizeof cfg->embedding);   /* in the stages' costs now */
        memset(&cfg->loss, 0, sizeof cfg->loss);
        cfg->vpp = lay->vpp;
    }
    if (o.csv && (rc = search_open_csv(o.csv, &csv_file, csv_tmp)) != 0) goto done;
    if (!o.have_threads) {   /* every core: the splits are independent */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = cores > 1 ? (int)(cores < 64 ? cores : 64) : 1;
    }
    if (isatty(STDERR_FILENO)) {
        clock_gettime(CLOCK_MONOTONIC, &meter.start);
        cfg->progress = search_progress;
        cfg->progress_user = &meter;
    }
    st = pp_search(cfg, &res, &err);
    if (meter.shown) fprintf(stderr, "\r%*s\r", 100, "");   /* the meter's line, cleared */
    if (st != PP_OK) { rc = cli_report(&err); goto done; }
    if (o.json) search_print_json(&o, res);
    else search_print_table(&o, res);
    if (!res->best) {
        const pp_search_entry *least = NULL;
        for (k = 0; k < res->count; k++)
            if (!least || res->entries[k].peak_memory < least->peak_memory) least = &res->entries[k];
        rc = cli_env_error("--max-mem=%g: no schedule fits; the least memory is %.3f (%s): every schedule holds one "
                           "microbatch through all of a rank's layers at once", cfg->max_memory,
                           least ? least->peak_memory : 0.0, least ? least->name : "none");
        goto done;
    }
    if (o.csv) {
        rc = search_write_csv(o.csv, csv_file, csv_tmp, res->best);
        csv_file = NULL;
        if (rc == 0 && !o.json) printf("wrote %s (PyTorch's pipeline-order CSV, sends and receives included)\n", o.csv);
    }
done:
    if (csv_file) fclose(csv_file);
    if (csv_tmp[0]) remove(csv_tmp);   /* no winner: the path keeps what it held */
    pp_search_result_free(res);
    pp_layers_free(lay);
    free(layer_costs);
    free(layout_costs);
    free(tail);
    search_opts_free(&o);
    return rc;
}
