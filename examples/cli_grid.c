/* pipepar grid — print a rank grid's groups.
 *
 *     build/pipepar grid --world 16 --tp 2 --pp 4
 *     build/pipepar grid --world 8 --tp 2 --cp 2 --order tp-cp-dp-pp --rank 5
 *     build/pipepar grid --world 8 --tp 2 --pp 2 --group dp-cp
 *
 * Without --rank it lists every group of each kind (tp, cp, dp, pp, the gradient all-reduce
 * group dp-cp, the model-parallel group tp-pp); with --rank, that rank's coordinates, its group
 * of each kind and its place in it (what ncclCommSplit gets as color and key).              */
#include "cli.h"

const char pp_cli_grid_summary[] = "a rank grid's (tp, cp, dp, pp) coordinates and groups";

static const char grid_usage[] =
    "usage: pipepar grid --world W [--tp T] [--cp C] [--pp P] [--dp D] [--order tp-cp-dp-pp]\n"
    "                    [--rank R] [--group MASK]\n"
    "  --world W    ranks in the job (required)\n"
    "  --tp/--cp/--pp/--dp N   sizes (default 1; dp defaults to world / (tp*cp*pp))\n"
    "  --order O    dimension names fastest first (default tp-cp-dp-pp, Megatron-LM's)\n"
    "  --rank R     print only rank R's coordinates and groups\n"
    "  --group M    print only groups of mask M, e.g. pp, dp-cp, tp-pp\n";

static void grid_print_group(const pp_grid *g, unsigned dims, int color, int *members)
{
    int k, size = pp_grid_group_size(g, dims);
    pp_grid_group_members(g, dims, color, members, g->world, NULL);
    putchar('[');
    for (k = 0; k < size; k++) printf(k ? " %d" : "%d", members[k]);
    putchar(']');
}

typedef struct grid_opts {
    pp_grid_config cfg;
    long rank;
    unsigned only;   /* --group: the one mask to print, 0 for every kind */
} grid_opts;

static const cli_flag_spec grid_specs[] = {
    { "--world", CLI_VALUE }, { "--tp", CLI_VALUE }, { "--cp", CLI_VALUE }, { "--pp", CLI_VALUE },
    { "--dp", CLI_VALUE }, { "--rank", CLI_VALUE }, { "--order", CLI_VALUE }, { "--group", CLI_VALUE }, { NULL, 0 }
};

/* grid's flags into *o: 0, -1 after the usage (--help), or an exit code after printing why. */
static int grid_parse(int argc, char **argv, grid_opts *o)
{
    cli_args args;
    const char *a, *val;
    pp_error err;
    int k;
    memset(o, 0, sizeof *o);
    o->rank = -1;
    cli_args_init(&args, argc, argv, "grid", grid_specs, 0);
    while ((k = cli_next(&args, &a, &val)) > 0) {
        if (!strcmp(a, "--help")) { fputs(grid_usage, stdout); return -1; }
        if (!strcmp(a, "--world")) { if (!cli_parse_int32("--world", val, 1, 1 << 24, &o->cfg.world)) return 2; }
        else if (!strcmp(a, "--tp")) { if (!cli_parse_int32("--tp", val, 1, 1 << 24, &o->cfg.tp)) return 2; }
        else if (!strcmp(a, "--cp")) { if (!cli_parse_int32("--cp", val, 1, 1 << 24, &o->cfg.cp)) return 2; }
        else if (!strcmp(a, "--pp")) { if (!cli_parse_int32("--pp", val, 1, 1 << 24, &o->cfg.pp)) return 2; }
        else if (!strcmp(a, "--dp")) { if (!cli_parse_int32("--dp", val, 1, 1 << 24, &o->cfg.dp)) return 2; }
        else if (!strcmp(a, "--rank")) { if (!cli_parse_int("--rank", val, 0, INT_MAX, &o->rank)) return 2; }
        else if (!strcmp(a, "--order")) {
            if (!*val) return cli_usage_error("--order: needs a value, e.g. tp-cp-dp-pp");
            o->cfg.order = val;
        } else if (!strcmp(a, "--group")) {
            if (pp_grid_dims_parse(val, &o->only, &err) != PP_OK)
                return cli_usage_error("--group=%s: %s", cli_short(val), err.message);
        }
    }
    if (k < 0) return 2;
    if (o->cfg.world == 0) return cli_usage_error("--world: required (the number of ranks)");
    return 0;
}

int pp_cli_grid(int argc, char **argv)
{
    static const struct { unsigned dims; const char *note; } kinds[] = {
        { PP_GROUP_TP, "tensor parallel" },
        { PP_GROUP_CP, "context parallel" },
        { PP_GROUP_DP, "data parallel" },
        { PP_GROUP_PP, "pipeline" },
        { PP_GROUP_DP | PP_GROUP_CP, "gradient all-reduce" },
        { PP_GROUP_TP | PP_GROUP_PP, "model parallel: grad-norm reduce" },
    };
    grid_opts o;
    pp_grid g;
    pp_error err;
    long rank;
    unsigned only;
    int k, nkinds, *members, coord[PP_DIM_COUNT];
    char order[32], name[32];
    if ((k = grid_parse(argc, argv, &o)) != 0) return k < 0 ? 0 : k;
    rank = o.rank; only = o.only;
    if (pp_grid_init(&o.cfg, &g, &err) != PP_OK) return cli_report(&err);
    if (rank >= g.world) return cli_usage_error("--rank=%ld: must be below --world=%d", rank, g.world);
    members = (int *)malloc(sizeof(int) * (size_t)g.world);
    if (!members) return cli_env_error("out of memory");
    pp_grid_order_format(&g, order, sizeof order);
    printf("world %d = tp %d x cp %d x dp %d x pp %d, order %s (first fastest)\n", g.world, g.size[PP_DIM_TP],
           g.size[PP_DIM_CP], g.size[PP_DIM_DP], g.size[PP_DIM_PP], order);
    if (rank >= 0) {
        pp_grid_coords(&g, (int)rank, coord, NULL);
        printf("rank %ld: tp %d, cp %d, dp %d, pp %d\n", rank, coord[PP_DIM_TP], coord[PP_DIM_CP],
               coord[PP_DIM_DP], coord[PP_DIM_PP]);
    }
    nkinds = only ? 1 : (int)(sizeof kinds / sizeof kinds[0]);
    for (k = 0; k < nkinds; k++) {
        unsigned dims = only ? only : kinds[k].dims;
        const char *note = "";
        int c, j, count = g.world / pp_grid_group_size(&g, dims);
        for (j = 0; j < (int)(sizeof kinds / sizeof kinds[0]); j++)
            if (kinds[j].dims == dims) note = kinds[j].note;
        pp_grid_dims_format(dims, name, sizeof name);
        if (rank >= 0) {
            pp_grid_group_info info;
            pp_grid_group(&g, (int)rank, dims, &info, NULL);
            printf("%-6s group %d of %d: ", name, info.color, info.count);
            grid_print_group(&g, dims, info.color, members);
            printf("  index %d%s%s%s\n", info.index, *note ? "  (" : "", note, *note ? ")" : "");
            continue;
        }
        printf("%-6s %d group%s of %d%s%s%s:", name, count, count == 1 ? "" : "s", pp_grid_group_size(&g, dims),
               *note ? " (" : "", note, *note ? ")" : "");
        for (c = 0; c < count; c++) { putchar(' '); grid_print_group(&g, dims, c, members); }
        putchar('\n');
    }
    if (rank >= 0 && g.size[PP_DIM_PP] > 1)
        printf("pipeline neighbours of rank %ld: previous stage %d, next stage %d\n", rank,
               pp_grid_shift(&g, (int)rank, PP_DIM_PP, -1), pp_grid_shift(&g, (int)rank, PP_DIM_PP, 1));
    free(members);
    return 0;
}
