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

typedef struct mimo_opts {
    pp_mimo_module_config mods[PP_MIMO_MAX_MODULES];
    pp_mimo_config cfg;
    pp_mimo_pipeline_config pc;
    long rank;
    int program, asked_pipeline;   /* asked_pipeline: --program, --schedule or --mb given */
} mimo_opts;

static const cli_flag_spec mimo_specs[] = {
    { "--grid", CLI_REPEAT }, { "--world", CLI_VALUE }, { "--language", CLI_VALUE }, { "--rank", CLI_VALUE },
    { "--mb", CLI_VALUE }, { "--schedule", CLI_VALUE }, { "--program", CLI_SWITCH }, { NULL, 0 }
};

/* mimo's flags into *o: 0, -1 after the usage (--help), or an exit code after printing why. */
static int mimo_parse(int argc, char **argv, mimo_opts *o)
{
    cli_args args;
    const char *a, *val;
    pp_error err;
    int k, n = 0;
    memset(o, 0, sizeof *o);
    o->pc.mb = 4;
    o->pc.kind = PP_1F1B;
    o->rank = -1;
    cli_args_init(&args, argc, argv, "mimo", mimo_specs, 0);
    while ((k = cli_next(&args, &a, &val)) > 0) {
        if (!strcmp(a, "--help")) { fputs(mimo_usage, stdout); return -1; }
        if (!strcmp(a, "--program")) { o->program = 1; o->asked_pipeline = 1; }
        else if (!strcmp(a, "--grid")) {
            if (n == PP_MIMO_MAX_MODULES) return cli_usage_error("--grid: at most %d modules", PP_MIMO_MAX_MODULES);
            if (pp_mimo_module_parse(val, &o->mods[n], &err) != PP_OK) return cli_usage_error("--grid=%s", err.message);
            n++;
        } else if (!strcmp(a, "--world")) {
            if (!cli_parse_int32("--world", val, 1, 1 << 24, &o->cfg.world)) return 2;
        } else if (!strcmp(a, "--language")) {
            if (!*val) return cli_usage_error("--language: needs a module name");
            o->cfg.language = val;
        } else if (!strcmp(a, "--rank")) {
            if (!cli_parse_int("--rank", val, 0, INT_MAX, &o->rank)) return 2;
        } else if (!strcmp(a, "--mb")) {
            if (!cli_parse_int32("--mb", val, 1, 1 << 16, &o->pc.mb)) return 2;
            o->asked_pipeline = 1;
        } else if (!strcmp(a, "--schedule")) {
            if (pp_schedule_kind_parse(val, &o->pc.kind, &err) != PP_OK)
                return cli_usage_error("--schedule=%s: %s", cli_short(val), err.message);
            if (o->pc.kind == PP_ZBV || o->pc.kind == PP_DUALPIPEV || o->pc.kind == PP_DUALPIPE || o->pc.kind == PP_CUSTOM)
                return cli_usage_error("--schedule=%s: a MIMO pipeline runs one stage per rank (gpipe, 1f1b, zb-h1, "
                                       "zb-h2)", val);
            o->asked_pipeline = 1;
        }
    }
    if (k < 0) return 2;
    if (n == 0) return cli_usage_error("--grid: required, one per module (e.g. --grid language:pp=2)");
    if (o->program && o->rank < 0) return cli_usage_error("--program: needs --rank R");
    o->cfg.num_modules = n;
    o->cfg.modules = o->mods;
    return 0;
}

int pp_cli_mimo(int argc, char **argv)
{
    mimo_opts o;
    pp_mimo m;
    pp_mimo_pipeline *pl = NULL;
    pp_error err;
    pp_status st;
    long rank;
    int i, k, program;
    if ((k = mimo_parse(argc, argv, &o)) != 0) return k < 0 ? 0 : k;
    rank = o.rank; program = o.program;
    if (pp_mimo_init(&o.cfg, &m, &err) != PP_OK) return cli_report(&err);
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
            return cli_report(&err);
        }
        if (a == b) printf("bridge %s -> %s: one to one (dp %d on both sides)\n", e->name, l->name, a);
        else if (a > b) printf("bridge %s -> %s: fan-in %d:1 (dp %d -> dp %d), the batch concatenated in dp order\n",
                               e->name, l->name, a / b, a, b);
        else printf("bridge %s -> %s: fan-out 1:%d (dp %d -> dp %d), the batch split in dp order\n", e->name, l->name,
                    b / a, a, b);
        mimo_print_bridge_direction(&m, k, 0);
        mimo_print_bridge_direction(&m, k, 1);
    }
    st = pp_mimo_pipeline_create(&m, &o.pc, &pl, &err);
    if (st == PP_EUNSUPPORTED && o.asked_pipeline) {   /* what was asked for cannot be shown */
        return cli_usage_error("%s: no pipeline for these modules: %s", program ? "--program" : "--schedule, --mb",
                               err.message);
    } else if (st == PP_EUNSUPPORTED) {
        printf("pipeline: not available: %s\n", err.message);
    } else if (st != PP_OK) {
        return cli_report(&err);
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
                pp_mimo_op op = p->ops[rank][k];
                pp_mimo_op_format(&m, op, txt, sizeof txt);
                printf("    %c %s\n", op.group >= 0 && op.group == last_group ? '+' : ' ', txt);
                last_group = op.group;
            }
        }
    }
    pp_mimo_pipeline_free(pl);
    return 0;
}
