/* pipepar layers — which layers each (pipeline rank, virtual stage) builds.
 *
 *     build/pipepar layers --layers 27 --pp 2 --first 13                 Moonlight-16B
 *     build/pipepar layers --pp 2 --layout 'Et*3|(tt|)*29,m|L' --moe-freq '[0]*3+[1]*58'
 *     build/pipepar layers --pp 2 --hybrid 'M*-M*-|M*-M*-'
 *     build/pipepar layers --pp 4 --costs '3,1*30,4' --embedding-cost 2 --loss-cost 5
 *
 * One line per stage, "stage S rank R chunk C layers [a,b) items TEXT" and, for each other
 * layer type of the model, " TYPE [a,b)" in that type's own index space (e.g. MoE indices);
 * then the same split as a Megatron layout string. --json prints one JSON object instead.
 * With --costs it finds the split that minimises the largest stage cost (exactly).          */
#include "cli.h"

const char pp_cli_layers_summary[] = "layers of each (rank, virtual stage): even, uneven, layouts, hybrid, balanced";

static const char layers_usage[] =
    "usage: pipepar layers --layers L --pp P [--vpp V] [--first N] [--last N] [--embedding] [--loss]\n"
    "                      [--mtp N] [--layout STR | --hybrid STR] [--moe-freq STR] [--json]\n"
    "                      [--rank R [--chunk C]]\n"
    "       pipepar layers --costs LIST --pp P [--vpp V] [--memory LIST --memory-cap X] [--json] ...\n"
    "  --layers L      decoder layers (num_layers); optional with --layout, --hybrid or --costs\n"
    "  --pp P          pipeline ranks (default 1)\n"
    "  --vpp V         virtual stages per rank (default 1, or what the layout / pattern implies)\n"
    "  --first N       num_layers_in_first_pipeline_stage (layers of rank 0, all its chunks)\n"
    "  --last N        num_layers_in_last_pipeline_stage\n"
    "  --embedding     account_for_embedding_in_pipeline_split\n"
    "  --loss          account_for_loss_in_pipeline_split\n"
    "  --mtp N         MTP depths (mtp_num_layers), on the last stage\n"
    "  --layout STR    pipeline_model_parallel_layout, e.g. 'Et*3|(tt|)*29,m|L' with --pp 16\n"
    "  --hybrid STR    hybrid layer pattern with '|' between stages, e.g. 'M*-M*-|M*-M*-'\n"
    "  --moe-freq STR  --moe-layer-freq: N (layer i is MoE when i % N == 0) or '[0]*3+[1]*58'\n"
    "  --costs LIST    balanced split: cost of each decoder layer, e.g. '3,1*30,4' (x*N repeats)\n"
    "  --memory LIST   memory of each decoder layer (same form); --memory-cap X per stage\n"
    "  --embedding-cost X, --loss-cost X, --mtp-cost X, --embedding-memory X, --loss-memory X,\n"
    "  --mtp-memory X  cost / memory of the embedding (first stage), loss and MTP depths (last)\n"
    "  --rank R        print only the stages of rank R (and --chunk C: only that one)\n"
    "  --json          one JSON object instead of text\n";

static int layers_flag(int argc, char **argv, int *i, const char *flag, const char **val)
{
    size_t n = strlen(flag);
    if (strncmp(argv[*i], flag, n) != 0) return 0;
    if (argv[*i][n] == '=') { *val = argv[*i] + n + 1; return 1; }
    if (argv[*i][n] != '\0') return 0;
    *val = *i + 1 < argc ? argv[++*i] : NULL;
    return 1;
}

/* "3,1*30,4" -> {3, 1 x 30, 4}. Returns the count, or -1 after printing why. */
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
        if (end == p || errno == ERANGE || x != x || x < 0 || x > 1e300) {
            cli_usage_error("%s='%s': expected numbers >= 0 separated by ',' (x*N repeats x), at '%s'", flag, text, p);
            free(v);
            return -1;
        }
        p = end;
        if (*p == '*') {
            times = strtol(p + 1, &end, 10);
            if (end == p + 1 || times < 1 || times > (1 << 20)) {
                cli_usage_error("%s='%s': a repeat count must be between 1 and %d, at '%s'", flag, text, 1 << 20, p);
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
            if (!d) { free(v); cli_usage_error("out of memory"); return -1; }
            v = d;
        }
        for (k = 0; k < times; k++) v[n++] = x;
        if (*p == ',') { p++; if (!*p) break; continue; }
        if (*p) {
            cli_usage_error("%s='%s': expected ',' at '%s'", flag, text, p);
            free(v);
            return -1;
        }
    }
    *out = v;
    return n;
}

int pp_cli_layers(int argc, char **argv)
{
    pp_layers_config cfg;
    pp_balance_config bal;
    pp_layers *l = NULL;
    pp_error err;
    pp_status st;
    long v, rank = -1, chunk = -1;
    int i, json = 0, n_cost = -1, n_mem = -1, rc = 0;
    double *costs = NULL, *memory = NULL, x;
    const char *costs_text = NULL, *memory_text = NULL;
    memset(&cfg, 0, sizeof cfg);
    memset(&bal, 0, sizeof bal);
    for (i = 1; i < argc; i++) {
        const char *val = NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(layers_usage, stdout); return 0; }
#define LAYERS_INT(flag, lo, hi, dst) \
        else if (layers_flag(argc, argv, &i, flag, &val)) { \
            if (!cli_parse_int(flag, val, lo, hi, &v)) return 2; \
            dst = (int)v; }
#define LAYERS_NUM(flag, dst) \
        else if (layers_flag(argc, argv, &i, flag, &val)) { \
            if (!cli_parse_double(flag, val, 0, &x)) return 2; \
            dst = x; }
#define LAYERS_STR(flag, dst) \
        else if (layers_flag(argc, argv, &i, flag, &val)) { \
            if (!val) return cli_usage_error("%s: needs a value", flag); \
            dst = val; }
        if (0) {}
        LAYERS_INT("--layers", 1, 1 << 20, cfg.num_layers)
        LAYERS_INT("--pp", 1, 65536, cfg.pp)
        LAYERS_INT("--vpp", 1, 65536, cfg.vpp)
        LAYERS_INT("--first", 1, 1 << 20, cfg.first)
        LAYERS_INT("--last", 1, 1 << 20, cfg.last)
        LAYERS_INT("--mtp", 0, 1 << 20, cfg.mtp_layers)
        LAYERS_STR("--layout", cfg.layout)
        LAYERS_STR("--hybrid", cfg.hybrid)
        LAYERS_STR("--moe-freq", cfg.moe_layer_freq)
        LAYERS_STR("--costs", costs_text)
        LAYERS_STR("--memory", memory_text)
        LAYERS_NUM("--memory-cap", bal.memory_cap)
        LAYERS_NUM("--embedding-cost", bal.embedding_cost)
        LAYERS_NUM("--embedding-memory", bal.embedding_memory)
        LAYERS_NUM("--loss-cost", bal.loss_cost)
        LAYERS_NUM("--loss-memory", bal.loss_memory)
        LAYERS_NUM("--mtp-cost", bal.mtp_cost)
        LAYERS_NUM("--mtp-memory", bal.mtp_memory)
        else if (layers_flag(argc, argv, &i, "--rank", &val)) { if (!cli_parse_int("--rank", val, 0, 65535, &rank)) return 2; }
        else if (layers_flag(argc, argv, &i, "--chunk", &val)) { if (!cli_parse_int("--chunk", val, 0, 65535, &chunk)) return 2; }
        else if (!strcmp(argv[i], "--embedding")) cfg.account_for_embedding = 1;
        else if (!strcmp(argv[i], "--loss")) cfg.account_for_loss = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else return cli_usage_error("%s: unknown flag (try 'pipepar layers --help')", argv[i]);
#undef LAYERS_INT
#undef LAYERS_NUM
#undef LAYERS_STR
    }
    if (chunk >= 0 && rank < 0) return cli_usage_error("--chunk=%ld: needs --rank", chunk);
    if (costs_text) {
        if (cfg.layout || cfg.hybrid || cfg.first || cfg.last || cfg.account_for_embedding || cfg.account_for_loss)
            return cli_usage_error("--costs: finds its own split; it cannot be combined with --layout, --hybrid, "
                                   "--first, --last, --embedding or --loss");
        if ((n_cost = layers_parse_list("--costs", costs_text, &costs)) < 0) return 2;
        if (memory_text && (n_mem = layers_parse_list("--memory", memory_text, &memory)) < 0) { free(costs); return 2; }
        if (cfg.num_layers && cfg.num_layers != n_cost) {
            rc = cli_usage_error("--costs: %d values, but --layers=%d", n_cost, cfg.num_layers);
            goto out;
        }
        if (memory && n_mem != n_cost) {
            rc = cli_usage_error("--memory: %d values, but --costs has %d", n_mem, n_cost);
            goto out;
        }
        bal.num_layers = n_cost;
        bal.pp = cfg.pp; bal.vpp = cfg.vpp;
        bal.cost = costs; bal.memory = memory;
        bal.mtp_layers = cfg.mtp_layers;
        bal.moe_layer_freq = cfg.moe_layer_freq;
        st = pp_layers_balance(&bal, &l, &err);
    } else {
        if (memory_text || bal.memory_cap > 0 || bal.embedding_cost > 0 || bal.loss_cost > 0 || bal.mtp_cost > 0 ||
            bal.embedding_memory > 0 || bal.loss_memory > 0 || bal.mtp_memory > 0)
            return cli_usage_error("--memory, --memory-cap and the --*-cost / --*-memory flags need --costs");
        if (!cfg.num_layers && !cfg.layout && !cfg.hybrid)
            return cli_usage_error("--layers: required (or give --layout, --hybrid or --costs)");
        st = pp_layers_build(&cfg, &l, &err);
    }
    if (st != PP_OK) { rc = cli_usage_error("%s", err.message); goto out; }
    if (rank >= l->pp) { rc = cli_usage_error("--rank=%ld: must be below pp=%d", rank, l->pp); goto out; }
    if (chunk >= l->vpp) { rc = cli_usage_error("--chunk=%ld: must be below vpp=%d", chunk, l->vpp); goto out; }
    if (json) {
        st = pp_layers_write_json(l, stdout, &err);
    } else if (rank >= 0) {
        int s;
        char items[4096];
        for (s = 0; s < l->num_stages; s++) {
            if (s % l->pp != rank || (chunk >= 0 && s / l->pp != chunk)) continue;
            pp_layers_stage_text(l, s, items, sizeof items);
            printf("stage %d rank %d chunk %d layers [%d,%d) items %s\n", s, s % l->pp, s / l->pp, l->first[s],
                   l->first[s] + l->count[s], items[0] ? items : "-");
        }
        st = PP_OK;
    } else {
        st = pp_layers_write_text(l, stdout, &err);
    }
    if (st != PP_OK) rc = cli_report(&err);
out:
    pp_layers_free(l);
    free(costs);
    free(memory);
    return rc;
}
