/* pipepar mimo — module grids of a multimodal job: who runs what, the bridges, the pipeline.
 *
 *     build/pipepar mimo --grid 'vision:offset=0,tp=1,pp=1,dp=2' --grid 'language:offset=2,tp=1,pp=2,dp=1'
 *     build/pipepar mimo --grid vision:dp=4 --grid language:pp=2,dp=2 --rank 3 --program
 *
 * Prints each module's ranks and sizes, the layout (colocated or non-colocated), every bridge's
 * transfers (fan-in or fan-out along the batch), and the step's pipeline: its schedule proven by
 * the validator and every rank's physical program (real peers) proven deadlock-free. With
 * --rank, that rank's role: its modules, stages, coordinates and forward path; --program adds
 * its physical program.                                                                       */
#include "cli.h"

const char pp_cli_mimo_summary[] = "multimodal module grids: rank roles, encoder->language bridges, the step's pipeline";

static const char mimo_usage[] =
    "usage: pipepar mimo --grid NAME:key=value,... [--grid ...] [--world W] [--language NAME]\n"
    "                    [--rank R [--program]] [--mb M] [--schedule KIND]\n"
    "  --grid SPEC      one module: NAME:offset=O,tp=T,cp=C,dp=D,pp=P,ep=E,order=tp-cp-dp-pp\n"
    "                   (all keys optional, sizes default to 1, offset to 0); give one per module\n"
    "  --world W        ranks in the job (default: the end of the last grid)\n"
    "  --language NAME  the language model (default: the module named 'language')\n"
    "  --rank R         print rank R's role (its modules, stages, coordinates, forward path)\n"
    "  --program        with --rank: print its physical program (every action, every real peer)\n"
    "  --mb M           microbatches of the step's pipeline (default 4)\n"
    "  --schedule KIND  a kind with one stage per rank: gpipe | 1f1b | zb-h1 | zb-h2 (default 1f1b);\n"
    "                   interleaved and looped-bfs run with one chunk per rank, as 1F1B and GPipe do\n";

/* "--flag value" or "--flag=value" (see cli_grid.c). */
static int mimo_flag(int argc, char **argv, int *i, const char *flag, const char **val)
{
    size_t n = strlen(flag);
    if (strncmp(argv[*i], flag, n) != 0) return 0;
    if (argv[*i][n] == '=') { *val = argv[*i] + n + 1; return 1; }
    if (argv[*i][n] != '\0') return 0;
    *val = *i + 1 < argc ? argv[++*i] : NULL;
    return 1;
}

static void mimo_ranks(char *buf, size_t size, int first, int count)
{
    if (count == 1) snprintf(buf, size, "rank %d", first);
    else snprintf(buf, size, "ranks %d-%d", first, first + count - 1);
}

/* Every transfer of one direction of a bridge, as "0 -> 2 [into part 0 of 2]". */
static void mimo_print_bridge_direction(const pp_mimo *m, int enc, int backward)
{
    int r, k, j, shown = 0, total = 0;
    int send_op = backward ? PP_OP_SEND_B : PP_OP_SEND_F, recv_op = backward ? PP_OP_RECV_B : PP_OP_RECV_F;
    pp_mimo_link s[64], rl[64];
    printf("  %-9s", backward ? "backward:" : "forward:");
    for (r = 0; r < m->world; r++) {
        int ns = 0;
        if (pp_mimo_bridge_links(m, enc, r, send_op, s, 64, &ns, NULL) != PP_OK) continue;
        for (k = 0; k < ns; k++) {
            int nr = 0;
            total++;
            if (shown >= 16) continue;
            pp_mimo_bridge_links(m, enc, s[k].peer, recv_op, rl, 64, &nr, NULL);
            printf("%s%d", shown ? ", " : " ", r);
            if (s[k].parts > 1) printf(" [part %d of %d]", s[k].part, s[k].parts);
            printf(" -> %d", s[k].peer);
            for (j = 0; j < nr; j++)
                if (rl[j].peer == r && rl[j].parts > 1) printf(" [into part %d of %d]", rl[j].part, rl[j].parts);
            shown++;
        }
    }
    if (total > shown) printf(", ... (%d transfers in all)", total);
    if (total == 0) printf(" none");
    putchar('\n');
}

static const char *mimo_path_text(const pp_mimo *m, const pp_mimo_role *role)
{
    int k;
    switch (role->path) {
    case PP_MIMO_PATH_BOTH: return "encoders, then the language model (colocated)";
    case PP_MIMO_PATH_LANGUAGE: {
        const pp_mimo_stage_info *si = pp_mimo_role_module(role, m->language);
        return si && si->is_first_stage ? "language model only; receives the encoders' output at its first stage"
                                        : "language model only";
    }
    default:
        for (k = 0; k < role->num_modules; k++)
            if (role->modules[k].is_last_stage) return "encoders only; sends the output over the bridge";
        return "encoders only";
    }
}

static void mimo_print_role(const pp_mimo *m, int rank)
{
    pp_mimo_role role;
    int k;
    pp_mimo_rank_role(m, rank, &role, NULL);
    printf("rank %d: %s\n", rank, mimo_path_text(m, &role));
    for (k = 0; k < role.num_modules; k++) {
        const pp_mimo_stage_info *si = &role.modules[k];
        const pp_mimo_module *mod = &m->modules[si->module];
        printf("  %-10s stage %d of %d%s%s%s, tp %d, cp %d, dp %d", mod->name, si->stage, si->num_stages,
               si->is_first_stage || si->is_last_stage ? " (" : "",
               si->is_first_stage && si->is_last_stage ? "first, last" : si->is_first_stage ? "first" :
               si->is_last_stage ? "last" : "", si->is_first_stage || si->is_last_stage ? ")" : "",
               si->coord[PP_DIM_TP], si->coord[PP_DIM_CP], si->coord[PP_DIM_DP]);
        if (mod->ep > 1) printf(", ep %d, expert dp %d", si->ep_rank, si->expert_dp_rank);
        printf(", local rank %d\n", si->local_rank);
    }
}

int pp_cli_mimo(int argc, char **argv)
{
    pp_mimo_module_config mods[PP_MIMO_MAX_MODULES];
    pp_mimo_config cfg;
    pp_mimo m;
    pp_mimo_pipeline *pl = NULL;
    pp_mimo_pipeline_config pc;
    pp_error err;
    pp_status st;
    long v, rank = -1;
    int i, k, n = 0, program = 0;
    memset(&cfg, 0, sizeof cfg);
    memset(&pc, 0, sizeof pc);
    pc.mb = 4;
    pc.kind = PP_1F1B;
    for (i = 1; i < argc; i++) {
        const char *val = NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(mimo_usage, stdout); return 0; }
        if (!strcmp(argv[i], "--program")) { program = 1; continue; }
        if (mimo_flag(argc, argv, &i, "--grid", &val)) {
            if (!val) return cli_usage_error("--grid: needs a value, e.g. vision:offset=0,dp=2");
            if (n == PP_MIMO_MAX_MODULES) return cli_usage_error("--grid: at most %d modules", PP_MIMO_MAX_MODULES);
            if (pp_mimo_module_parse(val, &mods[n], &err) != PP_OK) return cli_usage_error("--grid=%s", err.message);
            n++;
        } else if (mimo_flag(argc, argv, &i, "--world", &val)) {
            if (!cli_parse_int("--world", val, 1, 1 << 24, &v)) return 2;
            cfg.world = (int)v;
        } else if (mimo_flag(argc, argv, &i, "--language", &val)) {
            if (!val || !*val) return cli_usage_error("--language: needs a module name");
            cfg.language = val;
        } else if (mimo_flag(argc, argv, &i, "--rank", &val)) {
            if (!cli_parse_int("--rank", val, 0, INT_MAX, &rank)) return 2;
        } else if (mimo_flag(argc, argv, &i, "--mb", &val)) {
            if (!cli_parse_int("--mb", val, 1, 1 << 16, &v)) return 2;
            pc.mb = (int)v;
        } else if (mimo_flag(argc, argv, &i, "--schedule", &val)) {
            if (!val) return cli_usage_error("--schedule: needs a kind, e.g. 1f1b");
            if (pp_schedule_kind_parse(val, &pc.kind, &err) != PP_OK) return cli_usage_error("--schedule=%s: %s", val, err.message);
            if (pc.kind == PP_ZBV || pc.kind == PP_DUALPIPEV)
                return cli_usage_error("--schedule=%s: a MIMO pipeline runs one stage per rank (gpipe, 1f1b, zb-h1, zb-h2)", val);
        } else {
            return cli_usage_error("%s: unknown flag (try 'pipepar mimo --help')", argv[i]);
        }
    }
    if (n == 0) return cli_usage_error("--grid: required, one per module (e.g. --grid language:pp=2)");
    if (program && rank < 0) return cli_usage_error("--program: needs --rank R");
    cfg.num_modules = n;
    cfg.modules = mods;
    if (pp_mimo_init(&cfg, &m, &err) != PP_OK) return cli_usage_error("%s", err.message);
    if (rank >= m.world) return cli_usage_error("--rank=%ld: must be below the world of %d ranks", rank, m.world);

    printf("world %d, %d module%s, %s\n", m.world, m.num_modules, m.num_modules == 1 ? "" : "s",
           pp_mimo_layout_name(m.layout));
    for (k = 0; k < m.num_modules; k++) {
        const pp_mimo_module *mod = &m.modules[k];
        char ranks[48], order[32];
        mimo_ranks(ranks, sizeof ranks, mod->offset, mod->size);
        pp_grid_order_format(&mod->grid, order, sizeof order);
        printf("  %-10s %-11s tp %d x cp %d x dp %d x pp %d", mod->name, ranks, mod->grid.size[PP_DIM_TP],
               mod->grid.size[PP_DIM_CP], mod->grid.size[PP_DIM_DP], mod->grid.size[PP_DIM_PP]);
        if (mod->ep > 1) printf(", ep %d", mod->ep);
        printf(", order %s%s\n", order, k == m.language ? "  (language model)" : "");
    }
    for (k = 0; k < m.num_modules; k++) {
        const pp_mimo_module *e = &m.modules[k], *l = &m.modules[m.language];
        int a, b, cnt;
        if (k == m.language) continue;
        a = e->grid.size[PP_DIM_DP]; b = l->grid.size[PP_DIM_DP];
        if (pp_mimo_bridge_links(&m, k, 0, PP_OP_SEND_F, NULL, 0, &cnt, &err) != PP_OK) {
            if (err.status == PP_EUNSUPPORTED) { printf("bridge %s -> %s: %s\n", e->name, l->name, err.message); continue; }
            return cli_usage_error("%s", err.message);
        }
        if (a == b) printf("bridge %s -> %s: one to one (dp %d on both sides)\n", e->name, l->name, a);
        else if (a > b) printf("bridge %s -> %s: fan-in %d:1 (dp %d -> dp %d), the batch concatenated in dp order\n",
                               e->name, l->name, a / b, a, b);
        else printf("bridge %s -> %s: fan-out 1:%d (dp %d -> dp %d), the batch split in dp order\n", e->name, l->name,
                    b / a, a, b);
        mimo_print_bridge_direction(&m, k, 0);
        mimo_print_bridge_direction(&m, k, 1);
    }
    st = pp_mimo_pipeline_create(&m, &pc, &pl, &err);
    if (st == PP_EUNSUPPORTED) {
        printf("pipeline: not available: %s\n", err.message);
    } else if (st != PP_OK) {
        return cli_usage_error("%s", err.message);
    } else {
        int total = 0;
        for (k = 0; k < m.world; k++) total += pl->programs->length[k];
        printf("pipeline: %s, %d stage%s (", pp_schedule_kind_name(pl->schedule->kind), pl->schedule->pp,
               pl->schedule->pp == 1 ? "" : "s");
        for (k = 0, i = 0; k < m.num_modules; k++) {
            int p = m.modules[k].grid.size[PP_DIM_PP];
            if (pl->base[k] < 0) continue;
            if (p == 1) printf("%s%s %d", i++ ? ", " : "", m.modules[k].name, pl->base[k]);
            else printf("%s%s %d-%d", i++ ? ", " : "", m.modules[k].name, pl->base[k], pl->base[k] + p - 1);
        }
        printf("), mb %d: schedule validated; physical programs of %d ranks (%d actions) deadlock-free\n", pl->mb,
               m.world, total);
        for (k = 0; k < pl->num_bridged; k++)
            printf("  %s runs outside the pipeline: forward for every microbatch, bridge, pipeline, bridge back, "
                   "backward\n", m.modules[pl->bridged[k]].name);
    }
    if (rank >= 0) {
        mimo_print_role(&m, (int)rank);
        if (pl) printf("  pipeline stage %d\n", pp_mimo_pipeline_rank(pl, (int)rank));
        if (program && pl) {
            const pp_mimo_programs *p = pl->programs;
            int last_group = -1;
            printf("  program (%d actions; a '+' continues the group posted at once):\n", p->length[rank]);
            for (k = 0; k < p->length[rank]; k++) {
                char txt[160];
                pp_mimo_op o = p->ops[rank][k];
                pp_mimo_op_format(&m, o, txt, sizeof txt);
                printf("    %c %s\n", o.group >= 0 && o.group == last_group ? '+' : ' ', txt);
                last_group = o.group;
            }
        } else if (program) {
            printf("  program: not available (no pipeline)\n");
        }
    }
    pp_mimo_pipeline_free(pl);
    return 0;
}
