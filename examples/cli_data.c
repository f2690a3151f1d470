/* pipepar pack | cp | replay — the data path: packing, context-parallel splits, router replay.
 *
 *     build/pipepar pack --capacity 65536 --dp 4 --pp 2 --tp 2 --cp 2 < lengths.txt
 *     echo 5 11 | build/pipepar pack --capacity 20 --cp 2 --algo concatenative
 *     build/pipepar cp --cp 2 --lengths 5,11
 *     build/pipepar replay --layers 27 --first-k-dense 1 --stage-layers 0:13 --capacity 20 --cp 2 --lengths 5,11
 *
 * Lengths come from --lengths a,b,c or from a file / stdin (integers separated by spaces, commas
 * or newlines; at most 64 MiB). Every subcommand prints text, or JSON with --json; bad flags
 * and bad data exit 2 with one line naming the flag or the entry and the rule (examples/cli.h).
 * cp and replay print every token: at most CLI_MAX_PRINTED_TOKENS of them.                    */
#include "cli.h"

const char pp_cli_pack_summary[] = "pack sequence lengths into microbatches for DP x PP (NeMo RL's packers)";
const char pp_cli_cp_summary[] = "context-parallel split of a padded or packed batch: who holds which token";
const char pp_cli_replay_summary[] = "router-replay rows and MoE layer slots of a stage's local tokens";

/* --- shared helpers --------------------------------------------------------------------------- */

/* Integers separated by blanks, newlines or single commas; '#' starts a comment to the end of the
 * line. A comma needs a number before it and after it (the next line will do). An empty entry ("1,,2", a leading or trailing comma) is refused, not
 * skipped: it is a length the user meant to give. Where is "line N" for a file, "entry N" for a
 * flag's list (inline). Returns the count (>= 0), or -1 after printing why (exit code 2 then:
 * the input breaks a rule), or -3 when out of memory (exit 1). */
static int data_parse_ints(const char *what, const char *text, int inline_list, int32_t **out)
{
    int n = 0, cap = 0, line = 1, after_comma = 1, commas = 0, comma_line = 1;
    int32_t *v = NULL;
    const char *p = text;
    for (;;) {
        char *end;
        long x;
        for (;;) {   /* separators; a comma needs an entry before it and after it */
            if (*p == ',') {
                if (after_comma) break;
                after_comma = 1; commas++; comma_line = line; p++;
            } else if (*p == '#') {
                while (*p && *p != '\n') p++;
            } else if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
                if (*p == '\n') line++;   /* a comma still needs its number, on this line or the next */
                p++;
            } else break;
        }
        if (*p == ',' || (!*p && after_comma && commas > 0)) {
            if (inline_list)
                fprintf(stderr, "pipepar: %s: entry %d is empty (a comma with no number %s it)\n", what, n + 1,
                        n == 0 ? "before" : "after");
            else
                fprintf(stderr, "pipepar: %s, line %d: an empty entry (a comma with no number %s it)\n", what,
                        *p == ',' ? line : comma_line, n == 0 || *p == ',' ? "before" : "after");
            free(v);
            return -1;
        }
        if (!*p) break;
        errno = 0;
        x = strtol(p, &end, 10);
        if (end == p || errno == ERANGE || x < INT32_MIN || x > INT32_MAX ||
            (*end && !isspace((unsigned char)*end) && *end != ',' && *end != '#')) {
            int k = 0;
            while (p[k] && !isspace((unsigned char)p[k]) && p[k] != ',' && k < 20) k++;
            if (inline_list)
                fprintf(stderr, "pipepar: %s: entry %d, '%.*s', is not a 32-bit integer\n", what, n + 1, k, p);
            else
                fprintf(stderr, "pipepar: %s, line %d: '%.*s' is not a 32-bit integer\n", what, line, k, p);
            free(v);
            return -1;
        }
        if (n == cap) {
            int32_t *w;
            cap = cap ? cap * 2 : 1024;
            w = (int32_t *)realloc(v, sizeof(int32_t) * (size_t)cap);
            if (!w) { free(v); fprintf(stderr, "pipepar: out of memory reading %s\n", what); return -3; }
            v = w;
        }
        v[n++] = (int32_t)x;
        after_comma = 0;
        p = end;
    }
    *out = v;
    return n;
}

static void data_print_ints(const char *prefix, const int32_t *v, int n, int json)
{
    int i;
    fputs(prefix, stdout);
    putchar('[');
    for (i = 0; i < n; i++) printf(json ? (i ? ", %d" : "%d") : (i ? " %d" : "%d"), (int)v[i]);
    putchar(']');
}

static void data_print_rows(const char *prefix, const int64_t *v, int n, int json)
{
    int i;
    fputs(prefix, stdout);
    putchar('[');
    for (i = 0; i < n; i++) printf(json ? (i ? ", %lld" : "%lld") : (i ? " %lld" : "%lld"), (long long)v[i]);
    putchar(']');
}

/* The lengths of --lengths, else of the file argument, else of stdin. Returns the count, -1
 * for bad data or -2 when the file cannot be read (exit 2 either way: the input breaks a rule),
 * -3 when out of memory or on a read error (exit 1). */
static int data_read_lengths(const char *inline_list, const char *path, int32_t **out)
{
    const char *name = path && strcmp(path, "-") ? cli_short(path) : "stdin";
    int n;
    *out = NULL;
    if (inline_list) n = data_parse_ints("--lengths", inline_list, 1, out);
    else {
        char *text = NULL;
        size_t len = 0;
        int rc = cli_read_file(NULL, path ? path : "-", &text, &len);
        if (rc) return rc == 1 ? -3 : -2;
        n = data_parse_ints(name, text, 0, out);
        free(text);
    }
    if (n < 0) return n;
    if (n == 0) {
        fprintf(stderr, "pipepar: %s: no sequence lengths (give --lengths a,b,..., a file or stdin)\n",
                inline_list ? "--lengths" : name);
        free(*out);
        *out = NULL;
        return -1;
    }
    return n;
}

/* Flags shared by pack and replay: the pack plan. */
#define DATA_PLAN_SPECS                                                                                  \
    { "--capacity", CLI_VALUE }, { "--algo", CLI_VALUE }, { "--min-bins", CLI_VALUE },                   \
    { "--bin-multiple", CLI_VALUE }, { "--max-seqs", CLI_VALUE }, { "--seed", CLI_VALUE },                \
    { "--delta", CLI_VALUE }, { "--dp", CLI_VALUE }, { "--pp", CLI_VALUE }, { "--vpp", CLI_VALUE },       \
    { "--tp", CLI_VALUE }, { "--cp", CLI_VALUE }, { "--seq-multiple", CLI_VALUE },                        \
    { "--microbatch-multiple", CLI_VALUE }, { "--variable-shapes", CLI_SWITCH },                         \
    { "--same-shape", CLI_SWITCH }, { "--assign", CLI_VALUE }, { "--lengths", CLI_VALUE },                \
    { "--json", CLI_SWITCH }

/* One of DATA_PLAN_SPECS's plan flags into *cfg: 1 when it was one, 0 when not, -1 after printing
 * why it is refused (exit 2). */
static int data_plan_flag(pp_pack_plan_config *cfg, const char *a, const char *val)
{
    long v;
    if (!strcmp(a, "--capacity")) {
        if (!cli_parse_int("--capacity", val, 1, INT32_MAX, &v)) return -1;
        cfg->pack.capacity = (int32_t)v;
    } else if (!strcmp(a, "--algo")) {
        pp_error err;
        if (pp_pack_algo_parse(val, &cfg->pack.algo, &err) != PP_OK) {
            cli_usage_error("--algo=%s: %s", cli_short(val), err.message);
            return -1;
        }
    } else if (!strcmp(a, "--min-bins")) {
        if (!cli_parse_int32("--min-bins", val, 0, INT_MAX, &cfg->pack.min_bin_count)) return -1;
    } else if (!strcmp(a, "--bin-multiple")) {
        if (!cli_parse_int32("--bin-multiple", val, 1, INT_MAX, &cfg->pack.bin_count_multiple)) return -1;
    } else if (!strcmp(a, "--max-seqs")) {
        if (!cli_parse_int32("--max-seqs", val, 1, INT_MAX, &cfg->pack.max_sequences_per_bin)) return -1;
    } else if (!strcmp(a, "--seed")) {
        char *end;
        unsigned long long s;
        errno = 0;
        s = strtoull(val, &end, 10);
        if (!*val || *end || errno == ERANGE || !isdigit((unsigned char)*val)) {
            cli_usage_error("--seed=%s: expected a nonnegative 64-bit integer", cli_short(val));
            return -1;
        }
        cfg->pack.seed = (uint64_t)s;
    } else if (!strcmp(a, "--delta")) {
        if (!cli_parse_int("--delta", val, 0, 1 << 24, &v)) return -1;
        cfg->pack.knapsack_delta = v == 0 ? -1 : (int)v;
    } else if (!strcmp(a, "--dp")) {
        if (!cli_parse_int32("--dp", val, 1, 1 << 20, &cfg->dp)) return -1;
    } else if (!strcmp(a, "--pp")) {
        if (!cli_parse_int32("--pp", val, 1, 1 << 20, &cfg->pp)) return -1;
    } else if (!strcmp(a, "--vpp")) {
        if (!cli_parse_int32("--vpp", val, 1, 1 << 20, &cfg->vpp)) return -1;
    } else if (!strcmp(a, "--tp")) {
        if (!cli_parse_int32("--tp", val, 1, 1 << 20, &cfg->tp)) return -1;
    } else if (!strcmp(a, "--cp")) {
        if (!cli_parse_int32("--cp", val, 1, 1 << 20, &cfg->cp)) return -1;
    } else if (!strcmp(a, "--seq-multiple")) {
        if (!cli_parse_int32("--seq-multiple", val, 1, INT32_MAX, &cfg->seq_multiple)) return -1;
    } else if (!strcmp(a, "--microbatch-multiple")) {
        if (!cli_parse_int32("--microbatch-multiple", val, 1, INT32_MAX, &cfg->bin_multiple)) return -1;
    } else if (!strcmp(a, "--variable-shapes")) {
        if (cfg->same_shape_all_ranks) {
            cli_usage_error("--variable-shapes: not with --same-shape (one pads, the other does not)");
            return -1;
        }
        cfg->variable_shapes = 1;
    } else if (!strcmp(a, "--same-shape")) {
        if (cfg->variable_shapes) {
            cli_usage_error("--same-shape: not with --variable-shapes (one pads, the other does not)");
            return -1;
        }
        cfg->same_shape_all_ranks = 1;
    } else if (!strcmp(a, "--assign")) {
        if (!strcmp(val, "round-robin")) cfg->assign = PP_ASSIGN_ROUND_ROBIN;
        else if (!strcmp(val, "tokens")) cfg->assign = PP_ASSIGN_TOKENS;
        else if (!strcmp(val, "attention")) cfg->assign = PP_ASSIGN_ATTENTION;
        else { cli_usage_error("--assign=%s: must be round-robin, tokens or attention", cli_short(val)); return -1; }
    } else {
        return 0;
    }
    return 1;
}

#define DATA_PLAN_USAGE \
    "  --capacity C         tokens per microbatch (required)\n" \
    "  --algo A             first_fit_decreasing (default), best_fit_decreasing, first_fit_shuffle,\n" \
    "                       modified_first_fit_decreasing, concatenative, greedy_knapsack,\n" \
    "                       balanced_greedy_knapsack (or ffd, bfd, ffs, mffd, concat, knapsack, ...)\n" \
    "  --min-bins N         at least N microbatches (default dp, or dp*pp with --vpp > 1)\n" \
    "  --bin-multiple N     microbatch count a multiple of N (default as --min-bins; a multiple of dp)\n" \
    "  --max-seqs N         at most N sequences per microbatch\n" \
    "  --seed S             first_fit_shuffle: Python's random.seed(S)\n" \
    "  --delta D            balanced_greedy_knapsack: start with ceil(sum/C) + D bins (default 20)\n" \
    "  --dp/--pp/--vpp/--tp/--cp N   parallel sizes (default 1)\n" \
    "  --seq-multiple M     pad each sequence to a multiple of M (default tp*cp*2 when cp > 1, else tp)\n" \
    "  --microbatch-multiple M   pad each microbatch's token count to a multiple of M\n" \
    "  --variable-shapes    with --pp > 1, do not pad every microbatch of a rank to the rank's largest\n" \
    "  --same-shape         with --pp > 1, pad to the largest microbatch of all dp ranks\n" \
    "  --assign A           round-robin (NeMo RL, default), tokens or attention: bins to dp ranks\n"

/* --- pipepar pack ------------------------------------------------------------------------------ */

static const char pack_usage[] =
    "usage: pipepar pack --capacity C [flags] [--lengths a,b,c | FILE]\n"
    "Packs sequence lengths (from --lengths, FILE or stdin) into microbatches and prints each with\n"
    "its dp rank, microbatch index, sequences, tokens, padded tokens, cu_seqlens and\n"
    "cu_seqlens_padded, then a summary (bins, fill, the lower bound ceil(sum/capacity)).\n"
    DATA_PLAN_USAGE
    "  --quiet              the summary only\n"
    "  --json               one JSON object instead of text\n";

typedef struct pack_opts {
    pp_pack_plan_config cfg;
    const char *inline_list, *path;
    int json, quiet;
} pack_opts;

static const cli_flag_spec pack_specs[] = { DATA_PLAN_SPECS, { "--quiet", CLI_SWITCH }, { NULL, 0 } };

/* pack's flags into *o: 0, -1 after the usage (--help), or an exit code after printing why. */
static int pack_parse(int argc, char **argv, pack_opts *o)
{
    cli_args args;
    const char *a, *val;
    int k;
    memset(o, 0, sizeof *o);
    cli_args_init(&args, argc, argv, "pack", pack_specs, 1);
    while ((k = cli_next(&args, &a, &val)) > 0) {
        int r;
        if (!a) {
            if (o->path) return cli_usage_error("%s: only one lengths file may be given (already %s)", cli_short(val),
                                                cli_short(o->path));
            o->path = val;
        } else if (!strcmp(a, "--help")) { fputs(pack_usage, stdout); return -1; }
        else if ((r = data_plan_flag(&o->cfg, a, val)) < 0) return 2;
        else if (r) continue;
        else if (!strcmp(a, "--lengths")) o->inline_list = val;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
    }
    if (k < 0) return 2;
    if (o->cfg.pack.capacity == 0) return cli_usage_error("--capacity: required (tokens per microbatch)");
    if (o->inline_list && o->path) return cli_usage_error("--lengths: give the lengths either inline or as a file, not both");
    return 0;
}

int pp_cli_pack(int argc, char **argv)
{
    pack_opts o;
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    int32_t *lengths = NULL;
    int i, n, json, quiet, b;
    int64_t real = 0, padded = 0, packed = 0, lb;
    if ((n = pack_parse(argc, argv, &o)) != 0) return n < 0 ? 0 : n;
    cfg = o.cfg; json = o.json; quiet = o.quiet;
    if ((n = data_read_lengths(o.inline_list, o.path, &lengths)) < 0) return n == -3 ? 1 : 2;
    if (pp_pack_plan_build(lengths, n, &cfg, &plan, &err) != PP_OK) { free(lengths); return cli_report(&err); }
    for (i = 0; i < n; i++) { real += lengths[i]; packed += plan->padded_lengths[i]; }
    for (b = 0; b < plan->num_bins; b++) padded += plan->bin_padded_tokens[b];
    lb = pp_pack_lower_bound(plan->padded_lengths, n, cfg.pack.capacity);
    if (json) {
        printf("{\"algorithm\": \"%s\", \"capacity\": %d, \"sequences\": %d, \"tokens\": %lld, \"packed_tokens\": %lld, "
               "\"padded_tokens\": %lld, \"bins\": %d, \"lower_bound\": %lld, \"fill\": %.6f, \"dp\": %d, "
               "\"microbatches_per_rank\": %d, \"seq_multiple\": %d",
               pp_pack_algo_name(cfg.pack.algo), (int)cfg.pack.capacity, n, (long long)real, (long long)packed,
               (long long)padded, plan->num_bins, (long long)lb,
               plan->num_bins ? (double)real / ((double)plan->num_bins * cfg.pack.capacity) : 0.0, plan->dp,
               plan->num_microbatches, plan->seq_multiple);
        if (!quiet) {
            fputs(", \"microbatches\": [", stdout);
            for (b = 0; b < plan->num_bins; b++) {
                int cnt = pp_pack_plan_bin_size(plan, b);
                printf("%s{\"bin\": %d, \"rank\": %d, \"microbatch\": %d, ", b ? ", " : "", b, (int)plan->bin_rank[b],
                       (int)plan->bin_microbatch[b]);
                data_print_ints("\"seqs\": ", plan->bins->seqs + plan->bins->bin_offsets[b], cnt, 1);
                printf(", \"tokens\": %d, \"padded_tokens\": %d, ", (int)plan->bin_real_tokens[b], (int)plan->bin_padded_tokens[b]);
                data_print_ints("\"cu_seqlens\": ", pp_pack_plan_cu_seqlens(plan, b), cnt + 1, 1);
                data_print_ints(", \"cu_seqlens_padded\": ", pp_pack_plan_cu_seqlens_padded(plan, b), cnt + 1, 1);
                putchar('}');
            }
            putchar(']');
        }
        puts("}");
    } else {
        if (!quiet)
            for (b = 0; b < plan->num_bins; b++) {
                int cnt = pp_pack_plan_bin_size(plan, b);
                printf("bin %d  rank %d  microbatch %d  ", b, (int)plan->bin_rank[b], (int)plan->bin_microbatch[b]);
                data_print_ints("seqs ", plan->bins->seqs + plan->bins->bin_offsets[b], cnt, 0);
                printf("  tokens %d  padded %d  ", (int)plan->bin_real_tokens[b], (int)plan->bin_padded_tokens[b]);
                data_print_ints("cu_seqlens ", pp_pack_plan_cu_seqlens(plan, b), cnt + 1, 0);
                data_print_ints("  cu_seqlens_padded ", pp_pack_plan_cu_seqlens_padded(plan, b), cnt + 1, 0);
                putchar('\n');
            }
        printf("%d sequences, %lld tokens (%lld after padding each to a multiple of %d) -> %d bin%s of capacity %d by %s\n",
               n, (long long)real, (long long)packed, plan->seq_multiple, plan->num_bins, plan->num_bins == 1 ? "" : "s",
               (int)cfg.pack.capacity, pp_pack_algo_name(cfg.pack.algo));
        printf("lower bound ceil(%lld / %d) = %lld; fill %.2f%% (real tokens over bins x capacity); %lld tokens run "
               "after microbatch padding\n", (long long)packed, (int)cfg.pack.capacity, (long long)lb,
               plan->num_bins ? 100.0 * (double)real / ((double)plan->num_bins * cfg.pack.capacity) : 0.0, (long long)padded);
        printf("dp %d x %d microbatch%s each\n", plan->dp, plan->num_microbatches, plan->num_microbatches == 1 ? "" : "es");
    }
    pp_pack_plan_free(plan);
    free(lengths);
    return 0;
}

/* --- pipepar cp --------------------------------------------------------------------------------- */

static const char cp_usage[] =
    "usage: pipepar cp --cp C [--rank R] (--seq-len S | --cu-seqlens 0,a,b,... | --lengths a,b,... [--tp T]\n"
    "                  [--seq-multiple M]) [--json]\n"
    "The load-balanced split: every sequence cut into 2*C chunks, rank r holding chunks r and 2C-1-r.\n"
    "  --seq-len S        a BSHD row of S tokens (Megatron-LM's get_batch_on_this_cp_rank)\n"
    "  --cu-seqlens L     packed THD boundaries cu_seqlens_padded (TransformerEngine's\n"
    "                     thd_get_partitioned_indices)\n"
    "  --lengths L        sequence lengths, padded to --seq-multiple (default tp*cp*2 when C > 1) and\n"
    "                     packed in this order; tokens print as s<seq>:<pos>, '*' marking padding\n"
    "  --rank R           only rank R (default every rank)\n"
    "Prints for each rank its local cu_seqlens, the index map (global position of each local token)\n"
    "and the gather map (slot of each global position in the rank-major all-gathered buffer).\n";

typedef struct cp_opts {
    const char *seq_len_s, *cu_s, *len_s;
    int cp, rank, tp, mult, json, seq_len;
} cp_opts;

static const cli_flag_spec cp_specs[] = {
    { "--cp", CLI_VALUE }, { "--rank", CLI_VALUE }, { "--tp", CLI_VALUE }, { "--seq-multiple", CLI_VALUE },
    { "--seq-len", CLI_VALUE }, { "--cu-seqlens", CLI_VALUE }, { "--lengths", CLI_VALUE }, { "--json", CLI_SWITCH },
    { NULL, 0 }
};

/* cp's flags into *o: 0, -1 after the usage (--help), or an exit code after printing why. */
static int cp_parse(int argc, char **argv, cp_opts *o)
{
    cli_args args;
    const char *a, *val;
    int k;
    memset(o, 0, sizeof *o);
    o->rank = -1; o->tp = 1;
    cli_args_init(&args, argc, argv, "cp", cp_specs, 0);
    while ((k = cli_next(&args, &a, &val)) > 0) {
        if (!strcmp(a, "--help")) { fputs(cp_usage, stdout); return -1; }
        if (!strcmp(a, "--cp")) { if (!cli_parse_int32("--cp", val, 1, 1 << 20, &o->cp)) return 2; }
        else if (!strcmp(a, "--rank")) { if (!cli_parse_int32("--rank", val, 0, 1 << 20, &o->rank)) return 2; }
        else if (!strcmp(a, "--tp")) { if (!cli_parse_int32("--tp", val, 1, 1 << 20, &o->tp)) return 2; }
        else if (!strcmp(a, "--seq-multiple")) { if (!cli_parse_int32("--seq-multiple", val, 1, INT32_MAX, &o->mult)) return 2; }
        else if (!strcmp(a, "--seq-len")) {   /* printed token by token */
            if (!cli_parse_int32("--seq-len", val, 0, CLI_MAX_PRINTED_TOKENS, &o->seq_len)) return 2;
            o->seq_len_s = val;
        }
        else if (!strcmp(a, "--cu-seqlens")) o->cu_s = val;
        else if (!strcmp(a, "--lengths")) o->len_s = val;
        else if (!strcmp(a, "--json")) o->json = 1;
    }
    if (k < 0) return 2;
    if (o->cp == 0) return cli_usage_error("--cp: required (the context-parallel size)");
    if ((o->seq_len_s != NULL) + (o->cu_s != NULL) + (o->len_s != NULL) != 1)
        return cli_usage_error("--seq-len, --cu-seqlens, --lengths: give exactly one of them");
    if (o->rank >= o->cp) return cli_usage_error("--rank=%d: must be below --cp=%d", o->rank, o->cp);
    if (!o->len_s && (o->tp != 1 || o->mult))   /* they set how --lengths pad; the other inputs come padded */
        return cli_usage_error("%s: only with --lengths (it sets the padding of each sequence)",
                               o->mult ? "--seq-multiple" : "--tp");
    return 0;
}

/* cp's boundaries (cu_seqlens_padded, *n sequences) from --seq-len, --cu-seqlens or --lengths
 * (padded to the multiple); *lengths keeps --lengths' own. At most CLI_MAX_PRINTED_TOKENS
 * tokens: cp prints every one. Returns 0 or the exit code after printing why. */
static int cp_boundaries(const cp_opts *o, int32_t **cu_out, int32_t **lengths_out, int *n_out)
{
    int32_t *cu = NULL, *lengths = NULL;
    int n, i;
    *cu_out = NULL; *lengths_out = NULL; *n_out = 0;
    if (o->seq_len_s) {
        if (!(cu = (int32_t *)malloc(2 * sizeof(int32_t)))) return cli_env_error("out of memory");
        cu[0] = 0; cu[1] = o->seq_len; n = 1;
    } else if (o->cu_s) {
        int k = data_parse_ints("--cu-seqlens", o->cu_s, 1, &cu);
        if (k < 0) return k == -3 ? 1 : 2;
        if (k < 1) { free(cu); return cli_usage_error("--cu-seqlens: needs at least one boundary (0)"); }
        n = k - 1;
        if (cu[n] > CLI_MAX_PRINTED_TOKENS) {
            i = cu[n];
            free(cu);
            return cli_usage_error("--cu-seqlens: %d tokens, more than %ld (cp prints every token)", i, CLI_MAX_PRINTED_TOKENS);
        }
    } else {
        int64_t m = o->mult ? o->mult : (o->cp > 1 ? 2LL * o->cp * o->tp : o->tp), acc = 0;
        if ((n = data_parse_ints("--lengths", o->len_s, 1, &lengths)) < 0) return n == -3 ? 1 : 2;
        if (o->cp > 1 && m % (2 * o->cp)) {
            free(lengths);
            return cli_usage_error("--seq-multiple=%lld: must be a multiple of 2*cp=%d", (long long)m, 2 * o->cp);
        }
        if (!(cu = (int32_t *)malloc(sizeof(int32_t) * ((size_t)n + 1)))) { free(lengths); return cli_env_error("out of memory"); }
        cu[0] = 0;
        for (i = 0; i < n; i++) {
            if (lengths[i] < 1) {
                int bad = (int)lengths[i];
                free(lengths); free(cu);
                return cli_usage_error("lengths[%d]=%d: a sequence needs at least 1 token", i, bad);
            }
            acc += (lengths[i] + m - 1) / m * m;
            if (acc > CLI_MAX_PRINTED_TOKENS) {
                free(lengths); free(cu);
                return cli_usage_error("--lengths: more than %ld tokens once padded (cp prints every token)",
                                       CLI_MAX_PRINTED_TOKENS);
            }
            cu[i + 1] = (int32_t)acc;
        }
    }
    *cu_out = cu; *lengths_out = lengths; *n_out = n;
    return 0;
}

int pp_cli_cp(int argc, char **argv)
{
    cp_opts o;
    const char *seq_len_s;
    int cp, rank, json, n = 0, r;
    int32_t *cu = NULL, *lengths = NULL, *index = NULL, *source = NULL, *local = NULL;
    int32_t total;
    pp_error err;
    int code = cp_parse(argc, argv, &o);
    if (code) return code < 0 ? 0 : code;
    seq_len_s = o.seq_len_s; cp = o.cp; rank = o.rank; json = o.json;
    if ((code = cp_boundaries(&o, &cu, &lengths, &n)) != 0) return code;
    if ((long long)(rank >= 0 ? 1 : cp) * (n + 1) > CLI_MAX_PRINTED_TOKENS) {
        code = cli_usage_error("--cp=%d: %d ranks' boundaries of %d sequences, more than %ld numbers (pick one with "
                               "--rank)", cp, cp, n, CLI_MAX_PRINTED_TOKENS);
        goto done;
    }
    local = (int32_t *)malloc(sizeof(int32_t) * ((size_t)n + 1));
    if (!local) { code = cli_env_error("out of memory"); goto done; }
    if (pp_cp_thd_local_cu_seqlens(cu, n, cp, local, &err) != PP_OK) { code = cli_report(&err); goto done; }   /* checks cu */
    total = cu[n];
    index = (int32_t *)malloc(sizeof(int32_t) * ((size_t)total / (size_t)cp + 1));
    source = (int32_t *)malloc(sizeof(int32_t) * ((size_t)total + 1));
    if (!index || !source) { code = cli_env_error("out of memory"); goto done; }
    if (pp_cp_thd_gather(cu, n, cp, source, &err) != PP_OK) { code = cli_report(&err); goto done; }
    if (json) {
        printf("{\"cp\": %d, \"format\": \"%s\", \"sequences\": %d, \"tokens\": %d, \"tokens_per_rank\": %d, ", cp,
               seq_len_s ? "bshd" : "thd", n, (int)total, (int)(total / cp));
        data_print_ints("\"cu_seqlens_padded\": ", cu, n + 1, 1);
        fputs(", \"ranks\": [", stdout);
    } else {
        printf("cp %d, %s, %d sequence%s, %d tokens, %d per rank; ", cp, seq_len_s ? "BSHD row" : "THD", n,
               n == 1 ? "" : "s", (int)total, (int)(total / cp));
        data_print_ints("cu_seqlens_padded ", cu, n + 1, 0);
        putchar('\n');
    }
    for (r = 0; r < cp; r++) {
        int32_t j;
        if (rank >= 0 && r != rank) continue;
        if (pp_cp_thd_indices(cu, n, cp, r, index, &err) != PP_OK ||
            pp_cp_thd_local_cu_seqlens(cu, n, cp, local, &err) != PP_OK) { code = cli_report(&err); goto done; }
        if (json) {
            printf("%s{\"rank\": %d, ", (rank < 0 && r > 0) ? ", " : "", r);
            data_print_ints("\"local_cu_seqlens_padded\": ", local, n + 1, 1);
            data_print_ints(", \"index\": ", index, (int)(total / cp), 1);
            putchar('}');
            continue;
        }
        printf("rank %d: chunks %d and %d of each sequence; ", r, r, 2 * cp - 1 - r);
        data_print_ints("local cu_seqlens_padded ", local, n + 1, 0);
        putchar('\n');
        data_print_ints("  index ", index, (int)(total / cp), 0);
        putchar('\n');
        if (lengths) {
            int s = 0;
            fputs("  token [", stdout);
            for (j = 0; j < total / cp; j++) {
                while (index[j] >= cu[s + 1]) s++;
                printf("%ss%d:%d%s", j ? " " : "", s, (int)(index[j] - cu[s]), index[j] - cu[s] >= lengths[s] ? "*" : "");
            }
            puts("]   (* padding)");
        }
    }
    if (json) {
        data_print_ints("], \"gather\": ", source, (int)total, 1);
        puts("}");
    } else {
        data_print_ints("gather (slot of each global position in the [cp, tokens/cp] all-gathered buffer) ", source,
                        (int)total, 0);
        putchar('\n');
    }
done:
    free(cu); free(lengths); free(index); free(source); free(local);
    return code;
}

/* --- pipepar replay ---------------------------------------------------------------------------- */

static const char replay_usage[] =
    "usage: pipepar replay --layers N [--first-k-dense K] [--moe-freq F] [--payload compressed|full]\n"
    "                      (--stage-layers A:B | --pp-rank R [--chunk C] [--first-stage-layers N]\n"
    "                      [--last-stage-layers N]) --capacity C [plan flags] [--bin B] [--cp-rank R]\n"
    "                      [--tp-rank R --sequence-parallel] [--json] [--lengths a,b,c | FILE]\n"
    "For one pipeline stage (decoder layers [A, B)), every microbatch of the pack plan and every cp\n"
    "rank (or the ones asked for): the stage's MoE layers and their slots in the recording, and for\n"
    "each local token the recorded row it replays (-1: padding). The recording is [tokens,\n"
    "payload layers, topk] with the sequences back to back in index order.\n"
    "  --layers N           decoder layers of the model (required)\n"
    "  --first-k-dense K    layers 0 .. K-1 are dense\n"
    "  --moe-freq F         layer i >= K is MoE when i % F == 0 (default 1)\n"
    "  --payload P          compressed: one recording slot per MoE layer (default); full: one per layer\n"
    "  --stage-layers A:B   this stage's decoder layers\n"
    "  --pp-rank R          or: the layers of pipeline rank R, chunk C (default 0) in the split of\n"
    "                       --layers over --pp ranks and --vpp chunks (>>layers), optionally uneven:\n"
    "                       --first-stage-layers / --last-stage-layers N on the first / last rank\n"
    "  --bin B, --cp-rank R only that microbatch / cp rank\n"
    "  --sequence-parallel  with --tp T: the local tokens split over T ranks; --tp-rank R picks one\n"
    DATA_PLAN_USAGE
    "  --json               one JSON object instead of text\n";

typedef struct replay_opts {
    pp_pack_plan_config cfg;
    pp_replay_config rc;
    const char *inline_list, *path, *payload;
    int json, bin, cp_rank, tp_rank, sp, have_stage, pp_rank, chunk, first_stage, last_stage;
} replay_opts;

static const cli_flag_spec replay_specs[] = {
    DATA_PLAN_SPECS, { "--layers", CLI_VALUE }, { "--first-k-dense", CLI_VALUE }, { "--moe-freq", CLI_VALUE },
    { "--payload", CLI_VALUE }, { "--stage-layers", CLI_VALUE }, { "--pp-rank", CLI_VALUE }, { "--chunk", CLI_VALUE },
    { "--first-stage-layers", CLI_VALUE }, { "--last-stage-layers", CLI_VALUE }, { "--bin", CLI_VALUE },
    { "--cp-rank", CLI_VALUE }, { "--tp-rank", CLI_VALUE }, { "--sequence-parallel", CLI_SWITCH }, { NULL, 0 }
};

/* --stage-layers A:B, 0 <= A <= B <= 2^20. 0 after printing why. */
static int replay_stage_layers(const char *val, replay_opts *o)
{
    char *end;
    long a, z;
    errno = 0;
    a = strtol(val, &end, 10);
    if (end == val || *end != ':' || errno || !isdigit((unsigned char)*val))
        return cli_usage_error("--stage-layers=%s: expected A:B, e.g. 0:13", cli_short(val)), 0;
    val = end + 1;
    z = strtol(val, &end, 10);
    if (end == val || *end || errno || !isdigit((unsigned char)*val) || a < 0 || z < a || z > (1 << 20))
        return cli_usage_error("--stage-layers=%ld:%s: expected A:B with 0 <= A <= B <= %d", a, cli_short(val), 1 << 20), 0;
    o->rc.first_layer = (int)a; o->rc.last_layer = (int)z; o->have_stage = 1;
    return 1;
}

/* One of replay's own flags into *o; 1, or 0 after printing why. */
static int replay_flag(replay_opts *o, const char *a, const char *val)
{
    if (!strcmp(a, "--layers")) return cli_parse_int32("--layers", val, 1, 1 << 20, &o->rc.model.num_layers);
    if (!strcmp(a, "--first-k-dense")) return cli_parse_int32("--first-k-dense", val, 0, 1 << 20, &o->rc.model.first_k_dense);
    if (!strcmp(a, "--moe-freq")) return cli_parse_int32("--moe-freq", val, 1, 1 << 20, &o->rc.model.moe_freq);
    if (!strcmp(a, "--pp-rank")) return cli_parse_int32("--pp-rank", val, 0, 1 << 20, &o->pp_rank);
    if (!strcmp(a, "--chunk")) return cli_parse_int32("--chunk", val, 0, 1 << 20, &o->chunk);
    if (!strcmp(a, "--first-stage-layers")) return cli_parse_int32("--first-stage-layers", val, 1, 1 << 20, &o->first_stage);
    if (!strcmp(a, "--last-stage-layers")) return cli_parse_int32("--last-stage-layers", val, 1, 1 << 20, &o->last_stage);
    if (!strcmp(a, "--bin")) return cli_parse_int32("--bin", val, 0, INT_MAX, &o->bin);
    if (!strcmp(a, "--cp-rank")) return cli_parse_int32("--cp-rank", val, 0, 1 << 20, &o->cp_rank);
    if (!strcmp(a, "--tp-rank")) return cli_parse_int32("--tp-rank", val, 0, 1 << 20, &o->tp_rank);
    if (!strcmp(a, "--stage-layers")) return replay_stage_layers(val, o);
    if (!strcmp(a, "--payload")) {
        if (strcmp(val, "compressed") && strcmp(val, "full"))
            return cli_usage_error("--payload=%s: must be compressed or full", cli_short(val)), 0;
        o->payload = val;
    } else if (!strcmp(a, "--sequence-parallel")) o->sp = 1;
    else if (!strcmp(a, "--lengths")) o->inline_list = val;
    else if (!strcmp(a, "--json")) o->json = 1;
    return 1;
}

/* replay's flags into *o: 0, -1 after the usage (--help), or an exit code after printing why. */
static int replay_parse(int argc, char **argv, replay_opts *o)
{
    cli_args args;
    const char *a, *val;
    int k, r;
    memset(o, 0, sizeof *o);
    o->payload = "compressed"; o->bin = -1; o->cp_rank = -1; o->tp_rank = -1; o->pp_rank = -1;
    cli_args_init(&args, argc, argv, "replay", replay_specs, 1);
    while ((k = cli_next(&args, &a, &val)) > 0) {
        if (!a) {
            if (o->path) return cli_usage_error("%s: only one lengths file may be given (already %s)", cli_short(val),
                                                cli_short(o->path));
            o->path = val;
        } else if (!strcmp(a, "--help")) { fputs(replay_usage, stdout); return -1; }
        else if ((r = data_plan_flag(&o->cfg, a, val)) < 0) return 2;
        else if (!r && !replay_flag(o, a, val)) return 2;
    }
    if (k < 0) return 2;
    if (o->rc.model.num_layers == 0) return cli_usage_error("--layers: required (decoder layers of the model)");
    if (o->have_stage && o->pp_rank >= 0) return cli_usage_error("--stage-layers, --pp-rank: give one of them, not both");
    if (!o->have_stage && o->pp_rank < 0)
        return cli_usage_error("--stage-layers: required, e.g. --stage-layers 0:13 (or --pp-rank R)");
    if (o->pp_rank < 0 && (o->first_stage || o->last_stage || o->chunk))
        return cli_usage_error("--first-stage-layers, --last-stage-layers, --chunk: only with --pp-rank");
    if (o->cfg.pack.capacity == 0) return cli_usage_error("--capacity: required (tokens per microbatch)");
    if (o->tp_rank >= 0 && !o->sp) return cli_usage_error("--tp-rank=%d: only with --sequence-parallel", o->tp_rank);
    if (o->inline_list && o->path) return cli_usage_error("--lengths: give the lengths either inline or as a file, not both");
    if (!strcmp(o->payload, "full")) o->rc.model.payload_layers = o->rc.model.num_layers;
    return 0;
}

/* --pp-rank: the stage's layers from the split of --layers over --pp and --vpp (>>layers). */
static int replay_stage_of_rank(replay_opts *o)
{
    pp_layers_config lc;
    pp_layers *split = NULL;
    pp_error err;
    int stage, lfirst, lcount;
    memset(&lc, 0, sizeof lc);
    lc.num_layers = o->rc.model.num_layers; lc.pp = o->cfg.pp; lc.vpp = o->cfg.vpp;
    lc.first = o->first_stage; lc.last = o->last_stage;
    if (pp_layers_build(&lc, &split, &err) != PP_OK) return cli_report(&err);
    stage = pp_layers_stage(split, o->pp_rank, o->chunk);
    if (stage < 0) {
        pp_layers_free(split);
        return cli_usage_error("--pp-rank=%d, --chunk=%d: the split has --pp=%d ranks of --vpp=%d chunks", o->pp_rank,
                               o->chunk, o->cfg.pp ? o->cfg.pp : 1, o->cfg.vpp ? o->cfg.vpp : 1);
    }
    if (pp_layers_stage_range(split, stage, &lfirst, &lcount, &err) != PP_OK) { pp_layers_free(split); return cli_report(&err); }
    o->rc.first_layer = lfirst; o->rc.last_layer = lfirst + lcount;
    pp_layers_free(split);
    return 0;
}

/* Every (bin, cp rank, tp rank) asked for: its replay map's rows. Returns 0 or the exit code. */
static int replay_print_maps(const replay_opts *o, const pp_pack_plan *plan)
{
    pp_replay_config rc = o->rc;
    pp_error err;
    int b, r, t, first = 1;
    for (b = 0; b < plan->num_bins; b++) {
        if (o->bin >= 0 && b != o->bin) continue;
        for (r = 0; r < plan->cp; r++) {
            if (o->cp_rank >= 0 && r != o->cp_rank) continue;
            for (t = 0; t < (o->sp ? plan->tp : 1); t++) {
                pp_replay_map *map = NULL;
                if (o->tp_rank >= 0 && t != o->tp_rank) continue;
                rc.cp_rank = r; rc.tp = plan->tp; rc.tp_rank = t; rc.sequence_parallel = o->sp;
                if (pp_replay_map_build(plan, b, &rc, &map, &err) != PP_OK) return cli_report(&err);
                if (o->json) {
                    printf("%s{\"bin\": %d, \"rank\": %d, \"microbatch\": %d, \"cp_rank\": %d, \"tp_rank\": %d, ",
                           first ? "" : ", ", b, (int)plan->bin_rank[b], (int)plan->bin_microbatch[b], r, t);
                    data_print_rows("\"rows\": ", map->rows, map->num_tokens, 1);
                    putchar('}');
                } else {
                    printf("bin %d (dp rank %d, microbatch %d) cp rank %d", b, (int)plan->bin_rank[b],
                           (int)plan->bin_microbatch[b], r);
                    if (o->sp) printf(" tp rank %d", t);
                    printf(": %d tokens  ", (int)map->num_tokens);
                    data_print_rows("rows ", map->rows, map->num_tokens, 0);
                    putchar('\n');
                }
                first = 0;
                pp_replay_map_free(map);
            }
        }
    }
    return 0;
}

int pp_cli_replay(int argc, char **argv)
{
    replay_opts o;
    pp_pack_plan *plan = NULL;
    pp_error err;
    int32_t *lengths = NULL, *layers = NULL, *slots = NULL;
    int64_t printed = 0;
    int n, code, count, b, moe, payload;
    if ((code = replay_parse(argc, argv, &o)) != 0) return code < 0 ? 0 : code;
    if (o.pp_rank >= 0 && (code = replay_stage_of_rank(&o)) != 0) return code;
    if ((n = data_read_lengths(o.inline_list, o.path, &lengths)) < 0) return n == -3 ? 1 : 2;
    layers = (int32_t *)malloc(sizeof(int32_t) * ((size_t)o.rc.model.num_layers + 1));
    slots = (int32_t *)malloc(sizeof(int32_t) * ((size_t)o.rc.model.num_layers + 1));
    if (!layers || !slots) { code = cli_env_error("out of memory"); goto done; }
    if (pp_moe_stage_layers(&o.rc.model, o.rc.first_layer, o.rc.last_layer, layers, slots, &count, &err) != PP_OK ||
        pp_pack_plan_build(lengths, n, &o.cfg, &plan, &err) != PP_OK) { code = cli_report(&err); goto done; }
    if (o.bin >= plan->num_bins) { code = cli_usage_error("--bin=%d: the plan has %d microbatches", o.bin, plan->num_bins); goto done; }
    if (o.cp_rank >= plan->cp) { code = cli_usage_error("--cp-rank=%d: must be below --cp=%d", o.cp_rank, plan->cp); goto done; }
    if (o.tp_rank >= plan->tp) { code = cli_usage_error("--tp-rank=%d: must be below --tp=%d", o.tp_rank, plan->tp); goto done; }
    for (b = 0; b < plan->num_bins; b++)
        if (o.bin < 0 || b == o.bin) printed += plan->bin_padded_tokens[b];
    if (count && printed > CLI_MAX_PRINTED_TOKENS) {
        code = cli_usage_error("%s: %lld tokens to print, more than %ld (replay prints every token's row; pick fewer "
                               "with --bin, --cp-rank)", o.bin >= 0 ? "--bin" : "the plan's microbatches",
                               (long long)printed, CLI_MAX_PRINTED_TOKENS);
        goto done;
    }
    moe = pp_moe_count(&o.rc.model);
    payload = o.rc.model.payload_layers ? o.rc.model.payload_layers : moe;
    if (o.json) {
        printf("{\"layers\": %d, \"moe_layers\": %d, \"payload_layers\": %d, \"stage_layers\": [%d, %d], ",
               o.rc.model.num_layers, moe, payload, o.rc.first_layer, o.rc.last_layer);
        data_print_ints("\"stage_moe_layers\": ", layers, count, 1);
        data_print_ints(", \"slots\": ", slots, count, 1);
        fputs(", \"maps\": [", stdout);
    } else {
        printf("model: %d layers, %d MoE (layers < %d dense, then every %d); recording slots: %d (%s)\n",
               o.rc.model.num_layers, moe, o.rc.model.first_k_dense, o.rc.model.moe_freq ? o.rc.model.moe_freq : 1,
               payload, o.payload);
        printf("stage layers [%d, %d): %d MoE layer%s", o.rc.first_layer, o.rc.last_layer, count, count == 1 ? "" : "s");
        if (count) { data_print_ints(" ", layers, count, 0); data_print_ints(" at slots ", slots, count, 0); }
        putchar('\n');
        if (!count) puts("no MoE layer on this stage: nothing to replay");
    }
    if (count && (code = replay_print_maps(&o, plan)) != 0) goto done;
    if (o.json) puts("]}");
done:
    pp_pack_plan_free(plan);
    free(lengths); free(layers); free(slots);
    return code;
}
