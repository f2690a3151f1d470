/* pipepar schedule | simulate — build, prove and show a pipeline schedule.
 *
 *   pipepar schedule --kind interleaved --pp 4 --vpp 2 --mb 8 [--group G] --format text
 *   pipepar schedule --from-csv order.csv --format svg > order.svg
 *   pipepar simulate --kind 1f1b --pp 4 --mb 8 --f 1 --b 2 [--w 0] [--p2p 0] [--groups] [--json]
 *
 * Every schedule is lowered (sends and receives added) and validated before it is printed:
 * what you see has been proven deadlock-free.                                               */
#include "cli.h"

const char pp_cli_schedule_summary[] = "build, validate and print a schedule (text, torch, csv, svg, json)";
const char pp_cli_simulate_summary[] = "time a schedule with per-action costs: step time, bubble, memory";

typedef struct schedule_flags {
    pp_schedule_config cfg;
    const char *format;      /* text | torch | csv | svg | json */
    const char *from_csv;
    const char *out_path;
    pp_sim_costs costs;
    double bytes, bandwidth_gbps;
    int json;
    int relower;             /* --relower: drop the CSV's communication and lower it again */
    int split_overlaps;      /* --split-overlaps: each FB as F then B (pp_schedule_split_overlaps) */
    int split_backward;      /* --split-backward: each B as I then W (pp_schedule_split_backward) */
    const char *layout;      /* simulate --layout: stages of unequal size */
    const char *speed_text;  /* simulate --rank-speed: each rank's speed, pp values */
    const char *gpu_text;    /* simulate --gpu-time: each GPU's time, pp values (placed by simulation) */
    double *speed, *gpu_time;
    int *rank_of;            /* --gpu-time: the rank GPU g takes */
    double place_gain;       /* --gpu-time: the fraction the placed step is shorter than the launch's */
} schedule_flags;

static void schedule_usage(FILE *out, int simulate)
{
    fprintf(out,
            "usage: pipepar %s --kind KIND --pp P [--vpp V] --mb M [--group G] [--max-live N]\n"
            "       pipepar %s --from-csv FILE\n"
            "  --kind      gpipe | 1f1b | interleaved | looped-bfs | zb-h1 | zb-h2 | zbv | dualpipev | interleaved-zb |\n"
            "              dualpipe (bidirectional: even pp and mb, mb/2 microbatches down from rank 0, mb/2 up\n"
            "              from rank pp-1, each rank holding two copies of the model's stages: 2x parameters) |\n"
            "              greedy (the greedy zero-bubble scheduler's default policy on a looped placement, for\n"
            "              the costs given: F=1, B=2 for schedule; 'pipepar search --kind greedy' tries every\n"
            "              policy, the V placement and caps, and writes the best as a CSV)\n"
            "  --pp        pipeline ranks (1..4096)       --vpp   chunks per rank (default 1; 2 for zbv, dualpipev,\n"
            "                                                     dualpipe)\n"
            "  --mb        microbatches per step (>= 1)   --group microbatches per chunk round, interleaved only (default pp)\n"
            "  --max-live  zb-h2, greedy: cap on live activations per rank (zb-h2: default 2*pp-1, at least pp)\n"
            "  --from-csv  read PyTorch's pipeline-order CSV instead of building (one row per rank, at most\n"
            "              4096 rows and 64 MiB)\n"
            "  --relower   with --from-csv: drop its SEND/RECV actions and place them with pipepar's lowering\n"
            "              (for CSVs from other tools whose groups do not pair one to one)\n"
            "  --split-overlaps  each overlapped F&B (DualPipeV) as its F then its B, lowered so: the F's\n"
            "              output leaves before the B runs (for a runtime with no overlapped F&B callback)\n"
            "  --split-backward  each whole backward B as its I then its W (a trainer with both halves),\n"
            "              lowered so: the B's output gradient leaves before its weight gradient is computed\n"
            "  --layout STR  stages of unequal size, a Megatron layout ('Et*2|t*6|t*2|t*6L': E input,\n"
            "              t layer, L loss, '|' between stages; vpp = stages / pp, or the CSV's stages): the\n"
            "              costs are then per layer, each stage costs its layers' sum, and peak memory\n"
            "              weighs stages by their layers (schedule: the timeline pictures use those costs)\n",
            simulate ? "simulate" : "schedule", simulate ? "simulate" : "schedule");
    if (simulate)
        fprintf(out,
                "  costs, in time units for one rank's share of the model (a chunk costs 1/vpp of it; a dualpipe\n"
                "  chunk is a whole model stage and costs all of it)\n"
                "  --f F (default 1)  --b B (full backward, default 2F)  --i I  --w W (split backward; default B/2 each)\n"
                "  --p2p L (latency per transfer)  --bytes N (per transfer)  --bandwidth GBPS\n"
                "              (bench/RESULTS.md has a transfer's time measured on GPUs beside a busy peer)\n"
                "  --rank-speed LIST  each rank's speed, pp values from 1e-6 to 1e6 (1 / 1.35 for a GPU 1.35x\n"
                "              slower): rank r computes an action of cost c in c / speed\n"
                "  --gpu-time LIST  each GPU's time for one fixed piece of work, pp values > 0, none more than\n"
                "              1e6 times the fastest: the GPUs are placed on the ranks where the simulated step\n"
                "              is shortest (pp_place_by_simulation: every assignment up to 6 ranks, a search by\n"
                "              swaps up to 16, above that the heaviest rank on the fastest GPU if it is\n"
                "              shorter; a simulation each), each rank then at its GPU's speed; the placement\n"
                "              is printed (not with --rank-speed; --kind greedy builds its order for equal\n"
                "              speeds, then places)\n"
                "  --groups    transfers as the runtime posts them: a round's transfers in one group that ends\n"
                "              as a whole, one group after another on each rank (default: each on its own)\n"
                "  --peer-groups  as the runtime posts them over a transport with independent peers (threads;\n"
                "              NCCL with every peer on copy engines): a round's transfers with each peer in a\n"
                "              group of their own, each peer's groups one after another\n"
                "  --json      machine-readable output\n");
    else
        fprintf(out,
                "  --format    text (order + timeline) | torch (one line per rank, PyTorch spelling) | csv (pipepar's\n"
                "              pipeline-order CSV with communication) | svg (timeline for a browser) | json |\n"
                "              torch-compute-only, torch-compute-comms (CSVs for PyTorch's _PipelineScheduleRuntime:\n"
                "              sched._load_csv(path, format=\"compute_only\" or \"compute_comms\"))\n"
                "  --out FILE  write there instead of stdout\n");
}

#define SCHEDULE_COMMON_FLAGS                                                                         \
    { "--kind", CLI_VALUE }, { "--pp", CLI_VALUE }, { "--vpp", CLI_VALUE }, { "--mb", CLI_VALUE },    \
    { "--group", CLI_VALUE }, { "--max-live", CLI_VALUE }, { "--from-csv", CLI_VALUE },                 \
    { "--layout", CLI_VALUE }, { "--relower", CLI_SWITCH }, { "--split-overlaps", CLI_SWITCH },         \
    { "--split-backward", CLI_SWITCH }
static const cli_flag_spec schedule_specs[] = {
    SCHEDULE_COMMON_FLAGS, { "--format", CLI_VALUE }, { "--out", CLI_VALUE }, { NULL, 0 }
};
static const cli_flag_spec simulate_specs[] = {
    SCHEDULE_COMMON_FLAGS, { "--f", CLI_VALUE }, { "--b", CLI_VALUE }, { "--i", CLI_VALUE }, { "--w", CLI_VALUE },
    { "--p2p", CLI_VALUE }, { "--bytes", CLI_VALUE }, { "--bandwidth", CLI_VALUE }, { "--groups", CLI_SWITCH },
    { "--peer-groups", CLI_SWITCH }, { "--json", CLI_SWITCH }, { "--rank-speed", CLI_VALUE },
    { "--gpu-time", CLI_VALUE }, { NULL, 0 }
};

/* One flag of either subcommand into *fl; 1, or 0 after printing why. */
static int schedule_flag(schedule_flags *fl, const char *a, const char *val)
{
    long v;
    if (!strcmp(a, "--kind")) return cli_parse_kind("--kind", val, &fl->cfg.kind);
    if (!strcmp(a, "--pp")) {
        if (!cli_parse_int("--pp", val, 1, PP_CSV_MAX_RANKS, &v)) return 0;
        fl->cfg.pp = (int)v;
    } else if (!strcmp(a, "--vpp")) return cli_parse_int32("--vpp", val, 1, 1024, &fl->cfg.vpp);
    else if (!strcmp(a, "--mb")) return cli_parse_int32("--mb", val, 1, 1 << 24, &fl->cfg.mb);
    else if (!strcmp(a, "--group")) return cli_parse_int32("--group", val, 1, 1 << 24, &fl->cfg.group);
    else if (!strcmp(a, "--max-live")) return cli_parse_int32("--max-live", val, 1, 1 << 24, &fl->cfg.max_live);
    else if (!strcmp(a, "--from-csv")) fl->from_csv = val;
    else if (!strcmp(a, "--layout")) fl->layout = val;
    else if (!strcmp(a, "--relower")) fl->relower = 1;
    else if (!strcmp(a, "--split-overlaps")) fl->split_overlaps = 1;
    else if (!strcmp(a, "--split-backward")) fl->split_backward = 1;
    else if (!strcmp(a, "--format")) {
        if (strcmp(val, "text") && strcmp(val, "torch") && strcmp(val, "csv") && strcmp(val, "svg") && strcmp(val, "json") &&
            strcmp(val, "torch-compute-only") && strcmp(val, "torch-compute-comms"))
            return cli_usage_error("--format=%s: one of text, torch, csv, svg, json, torch-compute-only, "
                                   "torch-compute-comms", cli_short(val)), 0;
        fl->format = val;
    } else if (!strcmp(a, "--out")) fl->out_path = val;
    else if (!strcmp(a, "--f")) return cli_parse_double("--f", val, 1e-12, &fl->costs.f);
    else if (!strcmp(a, "--b")) return cli_parse_double("--b", val, 1e-12, &fl->costs.b);
    else if (!strcmp(a, "--i")) return cli_parse_double("--i", val, 0, &fl->costs.i);
    else if (!strcmp(a, "--w")) return cli_parse_double("--w", val, 0, &fl->costs.w);
    else if (!strcmp(a, "--p2p")) return cli_parse_double("--p2p", val, 0, &fl->costs.p2p_latency);
    else if (!strcmp(a, "--bytes")) return cli_parse_double("--bytes", val, 0, &fl->bytes);
    else if (!strcmp(a, "--bandwidth")) return cli_parse_double("--bandwidth", val, 1e-9, &fl->bandwidth_gbps);
    else if (!strcmp(a, "--groups") || !strcmp(a, "--peer-groups")) {
        int g = a[2] == 'g' ? 1 : 2;
        if (fl->costs.grouped && fl->costs.grouped != g) { cli_usage_error("--groups and --peer-groups: give one"); return 0; }
        fl->costs.grouped = g;
    }
    else if (!strcmp(a, "--json")) fl->json = 1;
    else if (!strcmp(a, "--rank-speed")) fl->speed_text = val;
    else if (!strcmp(a, "--gpu-time")) fl->gpu_text = val;
    return 1;
}

/* Parses the flags of schedule (simulate = 0) or simulate into *fl and checks how they combine.
 * Returns 0, -1 after printing the usage (--help), or an exit code after printing why. */
static int parse_schedule_flags(int argc, char **argv, int simulate, schedule_flags *fl)
{
    cli_args args;
    const char *a, *val;
    int k;
    memset(fl, 0, sizeof *fl);
    fl->format = "text";
    cli_args_init(&args, argc, argv, simulate ? "simulate" : "schedule", simulate ? simulate_specs : schedule_specs, 0);
    while ((k = cli_next(&args, &a, &val)) > 0) {
        if (!strcmp(a, "--help")) { schedule_usage(stdout, simulate); return -1; }
        if (!schedule_flag(fl, a, val)) return 2;
    }
    if (k < 0) return 2;
    if (fl->relower && !fl->from_csv) return cli_usage_error("--relower: only with --from-csv");
    if (fl->from_csv) {
        if (fl->cfg.kind || fl->cfg.pp || fl->cfg.mb || fl->cfg.vpp || fl->cfg.group || fl->cfg.max_live)
            return cli_usage_error("--from-csv: the CSV defines the schedule; drop --kind, --pp, --vpp, --mb, --group, "
                                   "--max-live");
    } else {
        if (!fl->cfg.kind) return cli_usage_error("--kind: required (gpipe, 1f1b, interleaved, looped-bfs, ..., greedy)");
        if (!fl->cfg.pp) return cli_usage_error("--pp: required (pipeline ranks, >= 1)");
        if (!fl->cfg.mb) return cli_usage_error("--mb: required (microbatches per step, >= 1)");
    }
    if (simulate && fl->costs.i > 0 && fl->costs.w == 0 && fl->costs.b == 0)
        return cli_usage_error("--i given without --w: give both halves of the split backward");
    if (simulate && fl->costs.b > 0 && (fl->costs.i > 0 || fl->costs.w > 0))
        return cli_usage_error("--b: not with --i/--w (a whole backward costs --b; with the halves given it costs "
                               "--i + --w)");
    if (fl->bandwidth_gbps > 0 && fl->bytes <= 0)
        return cli_usage_error("--bandwidth: needs --bytes too (a transfer's time is bytes / bandwidth)");
    if (fl->bytes > 0) {
        fl->costs.activation_bytes = fl->bytes;
        if (fl->bandwidth_gbps <= 0) return cli_usage_error("--bytes: needs --bandwidth (GB/s) too");
        fl->costs.p2p_seconds_per_byte = 1.0 / (fl->bandwidth_gbps * 1e9);
    }
    return 0;
}

/* The plan the flags describe (pp_plan_build): the schedule built, or read from --from-csv (its
 * own sends and receives kept unless --relower), lowered, split as asked and proven; with --layout
 * the stages' costs, the flags' costs per layer (the pictures' F = 1, B = 2 for schedule); a
 * greedy schedule built for them. Returns 0 or the exit code after printing why. */
static int make_plan(const schedule_flags *fl, pp_plan **out)
{
    pp_plan_config pc;
    pp_error err;
    pp_status st;
    char *text = NULL;
    size_t len = 0;
    int rc;
    memset(&pc, 0, sizeof pc);
    if (fl->from_csv) {
        if ((rc = cli_read_file("--from-csv", fl->from_csv, &text, &len)) != 0) return rc;
        pc.csv = text; pc.csv_len = len; pc.keep_csv_comm = !fl->relower;
    } else {
        pc.kind = fl->cfg.kind; pc.pp = fl->cfg.pp; pc.vpp = fl->cfg.vpp; pc.mb = fl->cfg.mb;
        pc.group = fl->cfg.group; pc.max_live = fl->cfg.max_live;
    }
    pc.layout = fl->layout;
    pc.costs = fl->costs;
    pc.split_overlaps = fl->split_overlaps;
    pc.split_backward = fl->split_backward;
    st = pp_plan_build(&pc, out, &err);
    free(text);
    if (st == PP_OK) return 0;
    /* a file's schedule breaks a rule (a built one never does: the tests prove it) */
    if (st == PP_EINVALID_SCHEDULE || st == PP_EDEADLOCK) return cli_usage_error("the schedule is invalid: %s", err.message);
    return cli_report(&err);
}

/* The kind a text or JSON output names: a built greedy schedule is "greedy", a CSV's "custom". */
static const char *shown_kind(const schedule_flags *fl, const pp_schedule *s)
{
    return fl->from_csv ? pp_schedule_kind_name(s->kind) : cli_kind_name(s->kind);
}

/* The text form: validity, the compute order, the ASCII timeline, the bubble. */
static int schedule_write_text(const schedule_flags *fl, const pp_schedule *s, const pp_sim_result *sim, FILE *out,
                               const char *out_name)
{
    pp_error err;
    pp_status st;
    int r, n;
    fprintf(out, "%s schedule, pp=%d, vpp=%d, mb=%d: valid (every dependency holds; no deadlock even when sends wait "
                 "for their receives)\n\n", shown_kind(fl, s), s->pp, s->vpp, s->mb);
    fprintf(out, "compute order (<stage><F|B|I|W><microbatch>, PyTorch's spelling):\n");
    if ((st = pp_schedule_write_torch(s, out, &err)) != PP_OK) return cli_written(st, &err, out_name);
    fprintf(out, "\ntimeline with F=1, B=2 per %s, free communication:\n",
            fl->layout ? "layer of the layout" : "rank's share of the model");
    if ((st = pp_schedule_draw_ascii(s, sim, out, &err)) != PP_OK) return cli_written(st, &err, out_name);
    for (r = 0, n = 0; r < s->pp; r++) n += s->length[r];
    if (s->placement == PP_PLACEMENT_DUAL)   /* deepseek-ai/DualPipe README, with F&B = F + B */
        fprintf(out, "\n%d actions in all, communication included; DualPipe README bubble (pp/2-1)(F&B+B-3W) = "
                     CLI_TIME " time units with F=1, B=2, W=1 (a chunk is a whole model stage)\n", n,
                (s->pp / 2 - 1) * (1.0 + 2.0 + 2.0 - 3.0));
    else
        fprintf(out, "\n%d actions in all, communication included; textbook bubble (pp-1)/(vpp*mb+pp-1) = %.1f%%\n", n,
                100.0 * (s->pp - 1) / ((double)s->vpp * s->mb + s->pp - 1));
    return 0;
}

int pp_cli_schedule(int argc, char **argv)
{
    schedule_flags fl;
    pp_plan *plan = NULL;
    const pp_schedule *s;
    pp_sim_result *sim = NULL;
    pp_error err;
    pp_status st = PP_OK;
    FILE *out = stdout;
    char out_name[CLI_SHORT + 16] = "stdout";
    int rc = parse_schedule_flags(argc, argv, 0, &fl);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = make_plan(&fl, &plan)) != 0) goto done;
    s = plan->schedule;
    /* the pictures time the schedule with F = 1, B = 2 per rank's share, or per layer of --layout */
    if (pp_simulate(s, &plan->costs, &sim, &err) != PP_OK) { rc = cli_report(&err); goto done; }
    if (fl.out_path) {
        snprintf(out_name, sizeof out_name, "--out '%s'", cli_short(fl.out_path));
        if (!(out = fopen(fl.out_path, "w"))) {
            out = stdout;
            rc = cli_usage_error("%s: cannot open for writing: %s", out_name, strerror(errno));
            goto done;
        }
    } else {
        snprintf(out_name, sizeof out_name, "stdout");
    }
    errno = 0;
    if (!strcmp(fl.format, "torch")) st = pp_schedule_write_torch(s, out, &err);
    else if (!strcmp(fl.format, "csv")) st = pp_schedule_write_csv(s, out, &err);
    else if (!strncmp(fl.format, "torch-compute-", 14))
        st = pp_schedule_write_torch_csv(s, strcmp(fl.format, "torch-compute-only") ? PP_TORCH_COMPUTE_COMMS
                                         : PP_TORCH_COMPUTE_ONLY, out, &err);
    else if (!strcmp(fl.format, "svg")) st = pp_schedule_write_svg(s, sim, out, &err);
    else if (!strcmp(fl.format, "json")) st = pp_schedule_write_json(s, sim, out, &err);
    else rc = schedule_write_text(&fl, s, sim, out, out_name);
    if (st != PP_OK) rc = cli_written(st, &err, out_name);
done:
    if (out != stdout) {   /* a failed write is reported once: by the writer, else here */
        if (rc == 0) rc = cli_close_output(out, out_name);
        else fclose(out);
    }
    pp_sim_result_free(sim);
    pp_plan_free(plan);
    return rc;
}

/* simulate's output: the step time, the bubble, and per rank the peaks (JSON or a table). */
static void simulate_write(const schedule_flags *fl, const pp_schedule *s, const pp_sim_result *sim,
                           const int *awaiting, int any_awaiting)
{
    int r, g;
    if (fl->json) {
        printf("{\"kind\": \"%s\", \"pp\": %d, \"vpp\": %d, \"mb\": %d, \"makespan\": %.9g, \"bound\": %.9g, "
               "\"bound_rank\": %d, \"bubble_mean\": %.9g, \"bubble\": [", shown_kind(fl, s), s->pp, s->vpp, s->mb,
               sim->makespan, sim->bound, sim->bound_rank, sim->bubble_mean);
        for (r = 0; r < s->pp; r++) printf("%s%.9g", r ? ", " : "", sim->bubble[r]);
        printf("], \"peak_live\": [");
        for (r = 0; r < s->pp; r++) printf("%s%d", r ? ", " : "", sim->peak_live[r]);
        printf("], \"peak_memory\": [");
        for (r = 0; r < s->pp; r++) printf("%s%.9g", r ? ", " : "", sim->peak_memory[r]);
        printf("], \"awaiting_w\": [");
        for (r = 0; r < s->pp; r++) printf("%s%d", r ? ", " : "", awaiting[r]);
        printf("]");
        if (fl->rank_of) {
            printf(", \"rank_of_gpu\": [");
            for (g = 0; g < s->pp; g++) printf("%s%d", g ? ", " : "", fl->rank_of[g]);
            printf("], \"placement_gain\": %.9g", fl->place_gain);
        }
        printf("}\n");
        return;
    }
    printf("%s  pp=%d vpp=%d mb=%d\n", shown_kind(fl, s), s->pp, s->vpp, s->mb);
    printf("step time (makespan)  " CLI_TIME "\n", sim->makespan);
    printf("bound                 " CLI_TIME "  (no order of these actions on these ranks is faster; rank %d sets it; "
           "this order is %.2f%% above)\n", sim->bound, sim->bound_rank,
           sim->bound > 0 ? 100.0 * (sim->makespan / sim->bound - 1) : 0.0);
    printf("mean bubble           %.2f%%\n", 100.0 * sim->bubble_mean);
    printf("rank  bubble   peak live activations (chunks)   peak memory (x one rank's layers%s)%s\n",
           s->placement == PP_PLACEMENT_DUAL ? "; dualpipe: x one model stage, the rank holds two" : "",
           any_awaiting ? "   I's awaiting their W (chunks, at most)" : "");
    for (r = 0; r < s->pp; r++) {
        printf("%4d  %5.2f%%   %6d                           %8.3f", r, 100.0 * sim->bubble[r], sim->peak_live[r],
               sim->peak_memory[r]);
        if (any_awaiting) printf("                            %6d", awaiting[r]);
        printf("\n");
    }
    if (fl->rank_of) {
        printf("placement (--gpu-time):");
        for (g = 0; g < s->pp; g++) printf(" GPU %d -> rank %d%s", g, fl->rank_of[g], g + 1 < s->pp ? "," : "");
        printf("; the step %.3g%% shorter than with GPU g on rank g\n", 100.0 * fl->place_gain);
    }
}

/* --rank-speed's list for pp ranks into fl->speed, and costs->rank_speed pointing at it: 0, or
 * the exit code after printing why. */
static int simulate_speeds(schedule_flags *fl, int pp, pp_sim_costs *costs)
{
    if (!(fl->speed = (double *)calloc((size_t)pp, sizeof(double)))) return cli_env_error("out of memory");
    if (!cli_parse_list("--rank-speed", fl->speed_text, pp, "pp", 1, fl->speed) ||
        !cli_check_range("--rank-speed", fl->speed, pp, 1e-6, 1e6, "a rank's speed"))
        return 2;
    costs->rank_speed = fl->speed;
    return 0;
}

/* --gpu-time's list for pp GPUs: the placement pp_place_by_simulation finds for them, and
 * costs->rank_speed each rank's GPU's speed: 0, or the exit code after printing why. */
static int simulate_place(schedule_flags *fl, const pp_schedule *s, pp_sim_costs *costs)
{
    pp_error err;
    double fastest;
    int g, pp = s->pp;
    fl->gpu_time = (double *)calloc((size_t)pp, sizeof(double));
    fl->speed = (double *)calloc((size_t)pp, sizeof(double));
    fl->rank_of = (int *)calloc((size_t)pp, sizeof(int));
    if (!fl->gpu_time || !fl->speed || !fl->rank_of) return cli_env_error("out of memory");
    if (!cli_parse_list("--gpu-time", fl->gpu_text, pp, "pp", 1, fl->gpu_time)) return 2;
    for (fastest = fl->gpu_time[0], g = 1; g < pp; g++) if (fl->gpu_time[g] < fastest) fastest = fl->gpu_time[g];
    for (g = 0; g < pp; g++)
        if (fl->gpu_time[g] > 1e6 * fastest)
            return cli_usage_error("--gpu-time: value %d is %g, more than 1e6 times the fastest (%g)", g + 1,
                                   fl->gpu_time[g], fastest);
    if (pp_place_by_simulation(s, costs, fl->gpu_time, 0, fl->rank_of, &fl->place_gain, &err) != PP_OK)
        return cli_report(&err);
    for (g = 0; g < pp; g++) fl->speed[fl->rank_of[g]] = fastest / fl->gpu_time[g];
    costs->rank_speed = fl->speed;
    return 0;
}

int pp_cli_simulate(int argc, char **argv)
{
    schedule_flags fl;
    pp_plan *plan = NULL;
    const pp_schedule *s;
    pp_sim_result *sim = NULL;
    pp_error err;
    int rc = parse_schedule_flags(argc, argv, 1, &fl), r, *awaiting = NULL, any_awaiting = 0;
    if (rc) return rc < 0 ? 0 : rc;
    if (fl.speed_text && fl.gpu_text) {
        rc = cli_usage_error("--rank-speed and --gpu-time: give one (--gpu-time sets each rank's speed from its GPU's)");
        goto done;
    }
    /* --rank-speed: one a rank; a built schedule's ranks are --pp's (a greedy order is then built
     * for the speeds too), a CSV's are the file's */
    if (fl.speed_text && !fl.from_csv && (rc = simulate_speeds(&fl, fl.cfg.pp, &fl.costs)) != 0) goto done;
    if ((rc = make_plan(&fl, &plan)) != 0) goto done;
    s = plan->schedule;
    if (fl.speed_text && fl.from_csv && (rc = simulate_speeds(&fl, s->pp, &plan->costs)) != 0) goto done;
    if (fl.gpu_text && (rc = simulate_place(&fl, s, &plan->costs)) != 0) goto done;
    if (pp_simulate(s, &plan->costs, &sim, &err) != PP_OK) { rc = cli_report(&err); goto done; }
    /* what a trainer sizes its I->W buffers by (pp_schedule_rank_peaks); any I at all shows it */
    if (!(awaiting = (int *)calloc((size_t)s->pp, sizeof(int)))) { rc = cli_env_error("out of memory"); goto done; }
    for (r = 0; r < s->pp; r++) {
        if (pp_schedule_rank_peaks(s, r, NULL, 1, NULL, &awaiting[r], &err) != PP_OK) { rc = cli_report(&err); goto done; }
        any_awaiting |= awaiting[r] > 0;
    }
    simulate_write(&fl, s, sim, awaiting, any_awaiting);
done:
    free(awaiting);
    free(fl.speed);
    free(fl.gpu_time);
    free(fl.rank_of);
    pp_sim_result_free(sim);
    pp_plan_free(plan);
    return rc;
}
