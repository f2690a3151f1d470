/* pipepar layers — which layers each (pipeline rank, virtual stage) builds.
 *
 *     build/pipepar layers --layers 27 --pp 2 --first 13                 Moonlight-16B
 *     build/pipepar layers --pp 2 --layout 'Et*3|(tt|)*29,m|L' --moe-freq '[0]*3+[1]*58'
 *     build/pipepar layers --pp 2 --hybrid 'M*-M*-|M*-M*-'
 *     build/pipepar layers --pp 4 --costs '3,1*30,4' --embedding-cost 2 --loss-cost 5
 *     build/pipepar layers --pp 2 --vpp 2 --hybrid '*-*-*-*-' --costs '0.7,0.3*8' --loss-cost 0.6
 *
 * One line per stage, "stage S rank R chunk C layers [a,b) items TEXT" and, for each other
 * layer type of the model, " TYPE [a,b)" in that type's own index space (e.g. MoE indices);
 * then the same split as a Megatron layout string. --json prints one JSON object instead.
 * With --costs it finds the split that minimises the largest stage cost (exactly).          */
#include <stddef.h>
#include "cli.h"

const char pp_cli_layers_summary[] = "layers of each (rank, virtual stage): even, uneven, layouts, hybrid, balanced";

static const char layers_usage[] =
    "usage: pipepar layers --layers L --pp P [--vpp V] [--first N] [--last N] [--embedding] [--loss]\n"
    "                      [--mtp N] [--layout STR | --hybrid STR] [--moe-freq STR] [--json]\n"
    "                      [--rank R [--chunk C]]\n"
    "       pipepar layers --costs LIST --pp P [--vpp V] [--hybrid STR] [--memory LIST --memory-cap X]\n"
    "                      [--rank-speed LIST] [--v-placement] [--json] ...\n"
    "  --layers L      decoder layers (num_layers); optional with --layout, --hybrid or --costs\n"
    "  --pp P          pipeline ranks (default 1)\n"
    "  --vpp V         virtual stages per rank (default 1, or what the layout / pattern implies)\n"
    "  --first N       num_layers_in_first_pipeline_stage (layers of rank 0, all its chunks)\n"
    "  --last N        num_layers_in_last_pipeline_stage\n"
    "  --embedding     account_for_embedding_in_pipeline_split\n"
    "  --loss          account_for_loss_in_pipeline_split\n"
    "  --mtp N         MTP depths (mtp_num_layers), on the last stage\n"
    "  --layout STR    pipeline_model_parallel_layout, e.g. 'Et*3|(tt|)*29,m|L' with --pp 16\n"
    "  --hybrid STR    hybrid layer pattern with '|' between stages, e.g. 'M*-M*-|M*-M*-'; with\n"
    "                  --costs, without '|': the balance places the breaks, between any two symbols\n"
    "  --moe-freq STR  --moe-layer-freq: N (layer i is MoE when i % N == 0) or '[0]*3+[1]*58'\n"
    "  --costs LIST    balanced split: cost of each decoder layer (hybrid symbol), e.g. '3,1*30,4'\n"
    "                  (x*N repeats)\n"
    "  --memory LIST   memory of each decoder layer (same form); --memory-cap X per stage\n"
    "  --embedding-cost X, --loss-cost X, --mtp-cost X, --embedding-memory X, --loss-memory X,\n"
    "  --mtp-memory X  cost / memory of the embedding (first stage), loss and MTP depths (last)\n"
    "  --rank-speed LIST  each rank's speed, pp values from 1e-6 to 1e6 (1 / 1.35 for a GPU 1.35x slower): the\n"
    "                  split that makes the slowest rank's time (its stages' cost / its speed) least\n"
    "  --v-placement   with --vpp 2: rank r holds stages r and 2pp-1-r (ZB-V, DualPipeV)\n"
    "  --rank R        print only the stages of rank R (and --chunk C: only that one)\n"
    "  --json          one JSON object instead of text\n";

/* "3,1*30,4" -> {3, 1 x 30, 4}. Returns the count, or -1 after printing why (exit 2), -3 when out
 * of memory (exit 1). */
static int layers_parse_list(const char *flag, const char *text, double **out)
{
    double *v = NULL;
    int n = 0, cap = 0;
    const char *p = text;
    if (!text || !*text) { cli_usage_error("%s: needs a value, e.g. '1,2*4,1'", flag); return -1; }
    while (*p) {
        char *end;
        double x;
        long times = 1, k;
        errno = 0;
        x = strtod(p, &end);
        if (end == p || errno == ERANGE || x != x || x < 0 || x > 1e300 || isspace((unsigned char)*p)) {
            cli_usage_error("%s='%s': expected numbers >= 0 separated by ',' (x*N repeats x), at '%s'", flag,
                            cli_short(text), cli_short(p));
            free(v);
            return -1;
        }
        p = end;
        if (*p == '*') {
            errno = 0;
            times = strtol(p + 1, &end, 10);
            if (end == p + 1 || errno || !isdigit((unsigned char)p[1]) || times < 1 || times > (1 << 20)) {
                cli_usage_error("%s='%s': a repeat count must be between 1 and %d, at '%s'", flag, cli_short(text),
                                1 << 20, cli_short(p));
                free(v);
                return -1;
            }
            p = end;
        }
        if ((long)n + times > (1 << 20)) {
            cli_usage_error("%s: more than %d values", flag, 1 << 20);
            free(v);
            return -1;
        }
        while (n + times > cap) {
            double *d;
            cap = cap ? cap * 2 : 64;
            d = (double *)realloc(v, sizeof(double) * (size_t)cap);
            if (!d) { free(v); cli_env_error("out of memory"); return -3; }
            v = d;
        }
        for (k = 0; k < times; k++) v[n++] = x;
        if (*p == ',') { p++; if (!*p) break; continue; }
        if (*p) {
            cli_usage_error("%s='%s': expected ',' at '%s'", flag, cli_short(text), cli_short(p));
            free(v);
            return -1;
        }
    }
    *out = v;
    return n;
}

typedef struct layers_opts {
    pp_layers_config cfg;
    pp_balance_config bal;
    const char *costs_text, *memory_text, *speed_text;
    long rank, chunk;
    int json;
} layers_opts;

static const cli_flag_spec layers_specs[] = {
    { "--layers", CLI_VALUE }, { "--pp", CLI_VALUE }, { "--vpp", CLI_VALUE }, { "--first", CLI_VALUE },
    { "--last", CLI_VALUE }, { "--mtp", CLI_VALUE }, { "--layout", CLI_VALUE }, { "--hybrid", CLI_VALUE },
    { "--moe-freq", CLI_VALUE }, { "--costs", CLI_VALUE }, { "--memory", CLI_VALUE }, { "--memory-cap", CLI_VALUE },
    { "--embedding-cost", CLI_VALUE }, { "--embedding-memory", CLI_VALUE }, { "--loss-cost", CLI_VALUE },
    { "--loss-memory", CLI_VALUE }, { "--mtp-cost", CLI_VALUE }, { "--mtp-memory", CLI_VALUE }, { "--rank", CLI_VALUE },
    { "--chunk", CLI_VALUE }, { "--embedding", CLI_SWITCH }, { "--loss", CLI_SWITCH }, { "--json", CLI_SWITCH },
    { "--rank-speed", CLI_VALUE }, { "--v-placement", CLI_SWITCH }, { NULL, 0 }
};

/* One flag into *o; 1, or 0 after printing why. */
static int layers_flag(layers_opts *o, const char *a, const char *val)
{
    static const struct { const char *flag; size_t offset; } nums[] = {
        { "--memory-cap", offsetof(pp_balance_config, memory_cap) },
        { "--embedding-cost", offsetof(pp_balance_config, embedding_cost) },
        { "--embedding-memory", offsetof(pp_balance_config, embedding_memory) },
        { "--loss-cost", offsetof(pp_balance_config, loss_cost) },
        { "--loss-memory", offsetof(pp_balance_config, loss_memory) },
        { "--mtp-cost", offsetof(pp_balance_config, mtp_cost) },
        { "--mtp-memory", offsetof(pp_balance_config, mtp_memory) },
    };
    size_t q;
    for (q = 0; q < sizeof nums / sizeof nums[0]; q++)
        if (!strcmp(a, nums[q].flag)) return cli_parse_double(a, val, 0, (double *)((char *)&o->bal + nums[q].offset));
    if (!strcmp(a, "--layers")) return cli_parse_int32(a, val, 1, 1 << 20, &o->cfg.num_layers);
    if (!strcmp(a, "--pp")) return cli_parse_int32(a, val, 1, 65536, &o->cfg.pp);
    if (!strcmp(a, "--vpp")) return cli_parse_int32(a, val, 1, 65536, &o->cfg.vpp);
    if (!strcmp(a, "--first")) return cli_parse_int32(a, val, 1, 1 << 20, &o->cfg.first);
    if (!strcmp(a, "--last")) return cli_parse_int32(a, val, 1, 1 << 20, &o->cfg.last);
    if (!strcmp(a, "--mtp")) return cli_parse_int32(a, val, 0, 1 << 20, &o->cfg.mtp_layers);
    if (!strcmp(a, "--rank")) return cli_parse_int(a, val, 0, 65535, &o->rank);
    if (!strcmp(a, "--chunk")) return cli_parse_int(a, val, 0, 65535, &o->chunk);
    if (!strcmp(a, "--layout")) o->cfg.layout = val;
    else if (!strcmp(a, "--hybrid")) o->cfg.hybrid = val;
    else if (!strcmp(a, "--moe-freq")) o->cfg.moe_layer_freq = val;
    else if (!strcmp(a, "--costs")) o->costs_text = val;
    else if (!strcmp(a, "--memory")) o->memory_text = val;
    else if (!strcmp(a, "--rank-speed")) o->speed_text = val;
    else if (!strcmp(a, "--v-placement")) o->bal.v_placement = 1;
    else if (!strcmp(a, "--embedding")) o->cfg.account_for_embedding = 1;
    else if (!strcmp(a, "--loss")) o->cfg.account_for_loss = 1;
    else if (!strcmp(a, "--json")) o->json = 1;
    return 1;
}

/* layers' flags into *o and how they combine: 0, -1 after the usage (--help), or an exit code
 * after printing why. */
static int layers_parse(int argc, char **argv, layers_opts *o)
{
    const pp_balance_config *bal = &o->bal;
    cli_args args;
    const char *a, *val;
    int k;
    memset(o, 0, sizeof *o);
    o->rank = -1; o->chunk = -1;
    cli_args_init(&args, argc, argv, "layers", layers_specs, 0);
    while ((k = cli_next(&args, &a, &val)) > 0) {
        if (!strcmp(a, "--help")) { fputs(layers_usage, stdout); return -1; }
        if (!layers_flag(o, a, val)) return 2;
    }
    if (k < 0) return 2;
    if (o->chunk >= 0 && o->rank < 0) return cli_usage_error("--chunk=%ld: needs --rank", o->chunk);
    if (o->costs_text) {
        if (o->cfg.layout || o->cfg.first || o->cfg.last || o->cfg.account_for_embedding || o->cfg.account_for_loss)
            return cli_usage_error("--costs: finds its own split; it cannot be combined with --layout, --first, "
                                   "--last, --embedding or --loss");
        if (o->cfg.hybrid && strchr(o->cfg.hybrid, '|'))
            return cli_usage_error("--hybrid=%s: with --costs the balance places the stage breaks: give the pattern "
                                   "without '|'", o->cfg.hybrid);
    } else {
        if (o->memory_text || bal->memory_cap > 0 || bal->embedding_cost > 0 || bal->loss_cost > 0 || bal->mtp_cost > 0 ||
            bal->embedding_memory > 0 || bal->loss_memory > 0 || bal->mtp_memory > 0)
            return cli_usage_error("--memory, --memory-cap and the --*-cost / --*-memory flags need --costs");
        if (o->speed_text || bal->v_placement)
            return cli_usage_error("%s: balances a split, so it needs --costs (e.g. --costs '1*24')",
                                   o->speed_text ? "--rank-speed" : "--v-placement");
        if (!o->cfg.num_layers && !o->cfg.layout && !o->cfg.hybrid)
            return cli_usage_error("--layers: required (or give --layout, --hybrid or --costs)");
    }
    return 0;
}

int pp_cli_layers(int argc, char **argv)
{
    layers_opts o;
    pp_layers_config cfg;
    pp_balance_config bal;
    pp_layers *l = NULL;
    pp_error err;
    pp_status st;
    long rank, chunk;
    int json, n_cost = -1, n_mem = -1, n_speed = -1, rc;
    double *costs = NULL, *memory = NULL, *speed = NULL;
    if ((rc = layers_parse(argc, argv, &o)) != 0) return rc < 0 ? 0 : rc;
    cfg = o.cfg; bal = o.bal; rank = o.rank; chunk = o.chunk; json = o.json;
    if (o.costs_text) {
        if ((n_cost = layers_parse_list("--costs", o.costs_text, &costs)) < 0) return n_cost == -3 ? 1 : 2;
        if (o.memory_text && (n_mem = layers_parse_list("--memory", o.memory_text, &memory)) < 0) {
            free(costs);
            return n_mem == -3 ? 1 : 2;
        }
        if (cfg.num_layers && cfg.num_layers != n_cost) {
            rc = cli_usage_error("--costs: %d values, but --layers=%d", n_cost, cfg.num_layers);
            goto out;
        }
        if (memory && n_mem != n_cost) {
            rc = cli_usage_error("--memory: %d values, but --costs has %d", n_mem, n_cost);
            goto out;
        }
        if (o.speed_text) {
            if ((n_speed = layers_parse_list("--rank-speed", o.speed_text, &speed)) < 0) {
                rc = n_speed == -3 ? 1 : 2;
                goto out;
            }
            if (n_speed != (cfg.pp ? cfg.pp : 1)) {
                rc = cli_usage_error("--rank-speed: %d values, but --pp=%d (one speed a rank)", n_speed, cfg.pp ? cfg.pp : 1);
                goto out;
            }
            if (!cli_check_range("--rank-speed", speed, n_speed, 1e-6, 1e6, "a rank's speed")) {
                rc = 2;
                goto out;
            }
            bal.rank_speed = speed;
        }
        bal.num_layers = n_cost;
        bal.pp = cfg.pp; bal.vpp = cfg.vpp;
        bal.cost = costs; bal.memory = memory;
        bal.mtp_layers = cfg.mtp_layers;
        bal.moe_layer_freq = cfg.moe_layer_freq;
        bal.hybrid = cfg.hybrid;
        st = pp_layers_balance(&bal, &l, &err);
    } else {
        st = pp_layers_build(&cfg, &l, &err);
    }
    if (st != PP_OK) { rc = cli_report(&err); goto out; }
    if (rank >= l->pp) { rc = cli_usage_error("--rank=%ld: must be below pp=%d", rank, l->pp); goto out; }
    if (chunk >= l->vpp) { rc = cli_usage_error("--chunk=%ld: must be below vpp=%d", chunk, l->vpp); goto out; }
    errno = 0;
    if (json) {
        st = pp_layers_write_json(l, stdout, &err);
    } else if (rank >= 0) {
        int s;
        char items[4096];
        for (s = 0; s < l->num_stages; s++) {
            if (pp_layers_rank(l, s) != rank || (chunk >= 0 && s / l->pp != chunk)) continue;
            pp_layers_stage_text(l, s, items, sizeof items);
            printf("stage %d rank %d chunk %d layers [%d,%d) items %s\n", s, pp_layers_rank(l, s), s / l->pp, l->first[s],
                   l->first[s] + l->count[s], items[0] ? items : "(none)");
        }
        st = PP_OK;
    } else {
        st = pp_layers_write_text(l, stdout, &err);
    }
    if (st != PP_OK) rc = cli_written(st, &err, "stdout");
out:
    pp_layers_free(l);
    free(costs);
    free(memory);
    free(speed);
    return rc;
}
