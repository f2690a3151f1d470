/* pipepar pack | cp | replay — the data path: packing, context-parallel splits, router replay.
 *
 *     build/pipepar pack --capacity 65536 --dp 4 --pp 2 --tp 2 --cp 2 < lengths.txt
 *     echo 5 11 | build/pipepar pack --capacity 20 --cp 2 --algo concatenative
 *     build/pipepar cp --cp 2 --lengths 5,11
 *     build/pipepar replay --layers 27 --first-k-dense 1 --stage-layers 0:13 --capacity 20 --cp 2 --lengths 5,11
 *
 * Lengths come from --lengths a,b,c or from a file / stdin (integers separated by spaces, commas
 * or newlines). Every subcommand prints text, or JSON with --json; bad flags exit 2 with one
 * line naming the flag and the rule, bad data exits 1 with pipepar's error message.           */
#include <ctype.h>
#include "cli.h"

const char pp_cli_pack_summary[] = "pack sequence lengths into microbatches for DP x PP (NeMo RL's packers)";
const char pp_cli_cp_summary[] = "context-parallel split of a padded or packed batch: who holds which token";
const char pp_cli_replay_summary[] = "router-replay rows and MoE layer slots of a stage's local tokens";

/* --- shared helpers --------------------------------------------------------------------------- */

/* Value of "--flag value" or "--flag=value"; advances *i past a separate value. */
static const char *data_flag(int argc, char **argv, int *i, const char *flag)
{
    size_t n = strlen(flag);
    if (strncmp(argv[*i], flag, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != '\0') return NULL;
    if (*i + 1 >= argc) return "";
    return argv[++*i];
}

static int data_int(const char *flag, const char *val, long lo, long hi, int *out)
{
    long v;
    if (!cli_parse_int(flag, val, lo, hi, &v)) return 0;
    *out = (int)v;
    return 1;
}

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
 * -3 when out of memory (exit 1). */
static int data_read_lengths(const char *inline_list, const char *path, int32_t **out)
{
    char *text;
    const char *name = path && strcmp(path, "-") ? path : "stdin";
    size_t len = 0;
    int n;
    if (inline_list) n = data_parse_ints("--lengths", inline_list, 1, out);
    else {
        const char *nul;
        text = cli_read_file(path ? path : "-", &len);
        if (!text) return -2;
        /* a NUL would end the text early and silently drop what follows it */
        if ((nul = (const char *)memchr(text, '\0', len)) != NULL) {
            fprintf(stderr, "pipepar: %s: byte %ld is a NUL: expected lengths as text\n", name, (long)(nul - text));
            free(text);
            return -1;
        }
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

/* Flags shared by pack and replay: the pack plan. Returns 1 when argv[*i] was one of them, 0
 * when not, -1 after a usage error (exit 2). */
static int data_plan_flag(int argc, char **argv, int *i, pp_pack_plan_config *cfg)
{
    const char *val;
    long v;
    if ((val = data_flag(argc, argv, i, "--capacity"))) {
        if (!cli_parse_int("--capacity", val, 1, INT32_MAX, &v)) return -1;
        cfg->pack.capacity = (int32_t)v;
    } else if ((val = data_flag(argc, argv, i, "--algo"))) {
        pp_error err;
        if (pp_pack_algo_parse(val, &cfg->pack.algo, &err) != PP_OK) { cli_usage_error("--algo=%s: %s", val, err.message); return -1; }
    } else if ((val = data_flag(argc, argv, i, "--min-bins"))) {
        if (!data_int("--min-bins", val, 0, INT_MAX, &cfg->pack.min_bin_count)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--bin-multiple"))) {
        if (!data_int("--bin-multiple", val, 1, INT_MAX, &cfg->pack.bin_count_multiple)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--max-seqs"))) {
        if (!data_int("--max-seqs", val, 1, INT_MAX, &cfg->pack.max_sequences_per_bin)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--seed"))) {
        char *end;
        unsigned long long s;
        errno = 0;
        s = strtoull(val, &end, 10);
        if (!*val || *end || errno == ERANGE || *val == '-') {
            cli_usage_error("--seed=%s: expected a nonnegative 64-bit integer", val);
            return -1;
        }
        cfg->pack.seed = (uint64_t)s;
    } else if ((val = data_flag(argc, argv, i, "--delta"))) {
        if (!cli_parse_int("--delta", val, 0, 1 << 24, &v)) return -1;
        cfg->pack.knapsack_delta = v == 0 ? -1 : (int)v;
    } else if ((val = data_flag(argc, argv, i, "--dp"))) {
        if (!data_int("--dp", val, 1, 1 << 20, &cfg->dp)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--pp"))) {
        if (!data_int("--pp", val, 1, 1 << 20, &cfg->pp)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--vpp"))) {
        if (!data_int("--vpp", val, 1, 1 << 20, &cfg->vpp)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--tp"))) {
        if (!data_int("--tp", val, 1, 1 << 20, &cfg->tp)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--cp"))) {
        if (!data_int("--cp", val, 1, 1 << 20, &cfg->cp)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--seq-multiple"))) {
        if (!data_int("--seq-multiple", val, 1, INT32_MAX, &cfg->seq_multiple)) return -1;
    } else if ((val = data_flag(argc, argv, i, "--microbatch-multiple"))) {
        if (!data_int("--microbatch-multiple", val, 1, INT32_MAX, &cfg->bin_multiple)) return -1;
    } else if (!strcmp(argv[*i], "--variable-shapes")) {
        if (cfg->same_shape_all_ranks) { cli_usage_error("--variable-shapes: not with --same-shape (one pads, the other does not)"); return -1; }
        cfg->variable_shapes = 1;
    } else if (!strcmp(argv[*i], "--same-shape")) {
        if (cfg->variable_shapes) { cli_usage_error("--same-shape: not with --variable-shapes (one pads, the other does not)"); return -1; }
        cfg->same_shape_all_ranks = 1;
    } else if ((val = data_flag(argc, argv, i, "--assign"))) {
        if (!strcmp(val, "round-robin")) cfg->assign = PP_ASSIGN_ROUND_ROBIN;
        else if (!strcmp(val, "tokens")) cfg->assign = PP_ASSIGN_TOKENS;
        else if (!strcmp(val, "attention")) cfg->assign = PP_ASSIGN_ATTENTION;
        else { cli_usage_error("--assign=%s: must be round-robin, tokens or attention", val); return -1; }
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

int pp_cli_pack(int argc, char **argv)
{
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_error err;
    const char *inline_list = NULL, *path = NULL;
    int32_t *lengths = NULL;
    int i, n, json = 0, quiet = 0, b;
    int64_t real = 0, padded = 0, packed = 0, lb;
    memset(&cfg, 0, sizeof cfg);
    for (i = 1; i < argc; i++) {
        const char *val;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(pack_usage, stdout); return 0; }
        if ((r = data_plan_flag(argc, argv, &i, &cfg)) < 0) return 2;
        if (r) continue;
        if ((val = data_flag(argc, argv, &i, "--lengths"))) inline_list = val;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("%s: unknown flag (try 'pipepar pack --help')", argv[i]);
        else if (path) return cli_usage_error("%s: only one lengths file may be given (already %s)", argv[i], path);
        else path = argv[i];
    }
    if (cfg.pack.capacity == 0) return cli_usage_error("--capacity: required (tokens per microbatch)");
    if (inline_list && path) return cli_usage_error("--lengths: give the lengths either inline or as a file, not both");
    if ((n = data_read_lengths(inline_list, path, &lengths)) < 0) return n == -3 ? 1 : 2;
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

int pp_cli_cp(int argc, char **argv)
{
    const char *seq_len_s = NULL, *cu_s = NULL, *len_s = NULL;
    int cp = 0, rank = -1, tp = 1, mult = 0, json = 0, i, n = 0, r;
    int32_t *cu = NULL, *lengths = NULL, *index = NULL, *source = NULL, *local = NULL;
    int32_t total;
    pp_error err;
    int code = 0;
    for (i = 1; i < argc; i++) {
        const char *val;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(cp_usage, stdout); return 0; }
        if ((val = data_flag(argc, argv, &i, "--cp"))) { if (!data_int("--cp", val, 1, 1 << 20, &cp)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--rank"))) { if (!data_int("--rank", val, 0, 1 << 20, &rank)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--tp"))) { if (!data_int("--tp", val, 1, 1 << 20, &tp)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--seq-multiple"))) { if (!data_int("--seq-multiple", val, 1, INT32_MAX, &mult)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--seq-len"))) seq_len_s = val;
        else if ((val = data_flag(argc, argv, &i, "--cu-seqlens"))) cu_s = val;
        else if ((val = data_flag(argc, argv, &i, "--lengths"))) len_s = val;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else return cli_usage_error("%s: unknown flag (try 'pipepar cp --help')", argv[i]);
    }
    if (cp == 0) return cli_usage_error("--cp: required (the context-parallel size)");
    if ((seq_len_s != NULL) + (cu_s != NULL) + (len_s != NULL) != 1)
        return cli_usage_error("--seq-len, --cu-seqlens, --lengths: give exactly one of them");
    if (rank >= cp) return cli_usage_error("--rank=%d: must be below --cp=%d", rank, cp);
    if (!len_s && (tp != 1 || mult))   /* they set how --lengths pad; the other inputs come padded */
        return cli_usage_error("%s: only with --lengths (it sets the padding of each sequence)", mult ? "--seq-multiple" : "--tp");
    if (seq_len_s) {
        long v;
        if (!cli_parse_int("--seq-len", seq_len_s, 0, 1 << 24, &v)) return 2;   /* the CLI prints every token */
        cu = (int32_t *)malloc(2 * sizeof(int32_t));
        if (!cu) return cli_usage_error("out of memory");
        cu[0] = 0; cu[1] = (int32_t)v; n = 1;
    } else if (cu_s) {
        int k = data_parse_ints("--cu-seqlens", cu_s, 1, &cu);
        if (k < 0) return k == -3 ? 1 : 2;
        if (k < 1) { free(cu); return cli_usage_error("--cu-seqlens: needs at least one boundary (0)"); }
        n = k - 1;
    } else {
        int64_t m = mult ? mult : (cp > 1 ? 2LL * cp * tp : tp), acc = 0;
        if ((n = data_parse_ints("--lengths", len_s, 1, &lengths)) < 0) return n == -3 ? 1 : 2;
        if (cp > 1 && m % (2 * cp)) { free(lengths); return cli_usage_error("--seq-multiple=%lld: must be a multiple of 2*cp=%d", (long long)m, 2 * cp); }
        cu = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        if (!cu) { free(lengths); return cli_usage_error("out of memory"); }
        cu[0] = 0;
        for (i = 0; i < n; i++) {
            if (lengths[i] < 1) {
                fprintf(stderr, "pipepar: lengths[%d]=%d: a sequence needs at least 1 token\n", i, (int)lengths[i]);
                free(lengths); free(cu);
                return 2;
            }
            acc += (lengths[i] + m - 1) / m * m;
            if (acc > INT32_MAX) { fprintf(stderr, "pipepar: --lengths: more than 2^31-1 tokens\n"); free(lengths); free(cu); return 2; }
            cu[i + 1] = (int32_t)acc;
        }
    }
    local = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!local) { code = cli_usage_error("out of memory"); goto done; }
    if (pp_cp_thd_local_cu_seqlens(cu, n, cp, local, &err) != PP_OK) { code = cli_report(&err); goto done; }   /* checks cu */
    total = cu[n];
    index = (int32_t *)malloc(sizeof(int32_t) * (size_t)(total / cp + 1));
    source = (int32_t *)malloc(sizeof(int32_t) * (size_t)(total + 1));
    if (!index || !source) { code = cli_usage_error("out of memory"); goto done; }
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

int pp_cli_replay(int argc, char **argv)
{
    pp_pack_plan_config cfg;
    pp_pack_plan *plan = NULL;
    pp_replay_config rc;
    pp_error err;
    const char *inline_list = NULL, *path = NULL, *payload = "compressed";
    int32_t *lengths = NULL, *layers = NULL, *slots = NULL;
    int i, n, json = 0, bin = -1, cp_rank = -1, tp_rank = -1, sp = 0, have_stage = 0, code = 0, count, b, r, first = 1;
    int pp_rank = -1, chunk = 0, first_stage = 0, last_stage = 0;
    memset(&cfg, 0, sizeof cfg);
    memset(&rc, 0, sizeof rc);
    for (i = 1; i < argc; i++) {
        const char *val;
        int k;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(replay_usage, stdout); return 0; }
        if ((k = data_plan_flag(argc, argv, &i, &cfg)) < 0) return 2;
        if (k) continue;
        if ((val = data_flag(argc, argv, &i, "--layers"))) { if (!data_int("--layers", val, 1, 1 << 20, &rc.model.num_layers)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--first-k-dense"))) { if (!data_int("--first-k-dense", val, 0, 1 << 20, &rc.model.first_k_dense)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--moe-freq"))) { if (!data_int("--moe-freq", val, 1, 1 << 20, &rc.model.moe_freq)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--payload"))) {
            if (strcmp(val, "compressed") && strcmp(val, "full")) return cli_usage_error("--payload=%s: must be compressed or full", val);
            payload = val;
        } else if ((val = data_flag(argc, argv, &i, "--stage-layers"))) {
            char *end;
            long a, z;
            errno = 0;
            a = strtol(val, &end, 10);
            if (end == val || *end != ':' || errno) return cli_usage_error("--stage-layers=%s: expected A:B, e.g. 0:13", val);
            val = end + 1;
            z = strtol(val, &end, 10);
            if (end == val || *end || errno || a < 0 || z < a || z > (1 << 20))
                return cli_usage_error("--stage-layers=%ld:%s: expected A:B with 0 <= A <= B", a, val);
            rc.first_layer = (int)a; rc.last_layer = (int)z; have_stage = 1;
        } else if ((val = data_flag(argc, argv, &i, "--pp-rank"))) { if (!data_int("--pp-rank", val, 0, 1 << 20, &pp_rank)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--chunk"))) { if (!data_int("--chunk", val, 0, 1 << 20, &chunk)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--first-stage-layers"))) { if (!data_int("--first-stage-layers", val, 1, 1 << 20, &first_stage)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--last-stage-layers"))) { if (!data_int("--last-stage-layers", val, 1, 1 << 20, &last_stage)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--bin"))) { if (!data_int("--bin", val, 0, INT_MAX, &bin)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--cp-rank"))) { if (!data_int("--cp-rank", val, 0, 1 << 20, &cp_rank)) return 2; }
        else if ((val = data_flag(argc, argv, &i, "--tp-rank"))) { if (!data_int("--tp-rank", val, 0, 1 << 20, &tp_rank)) return 2; }
        else if (!strcmp(argv[i], "--sequence-parallel")) sp = 1;
        else if ((val = data_flag(argc, argv, &i, "--lengths"))) inline_list = val;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("%s: unknown flag (try 'pipepar replay --help')", argv[i]);
        else if (path) return cli_usage_error("%s: only one lengths file may be given (already %s)", argv[i], path);
        else path = argv[i];
    }
    if (rc.model.num_layers == 0) return cli_usage_error("--layers: required (decoder layers of the model)");
    if (have_stage && pp_rank >= 0) return cli_usage_error("--stage-layers, --pp-rank: give one of them, not both");
    if (!have_stage && pp_rank < 0) return cli_usage_error("--stage-layers: required, e.g. --stage-layers 0:13 (or --pp-rank R)");
    if (pp_rank < 0 && (first_stage || last_stage || chunk))
        return cli_usage_error("--first-stage-layers, --last-stage-layers, --chunk: only with --pp-rank");
    if (pp_rank >= 0) {   /* the stage's layers from the split (>>layers) */
        pp_layers_config lc;
        pp_layers *split = NULL;
        int stage, lfirst, lcount;
        memset(&lc, 0, sizeof lc);
        lc.num_layers = rc.model.num_layers; lc.pp = cfg.pp; lc.vpp = cfg.vpp; lc.first = first_stage; lc.last = last_stage;
        if (pp_layers_build(&lc, &split, &err) != PP_OK) return cli_report(&err);
        stage = pp_layers_stage(split, pp_rank, chunk);
        if (stage < 0) {
            pp_layers_free(split);
            return cli_usage_error("--pp-rank=%d, --chunk=%d: the split has --pp=%d ranks of --vpp=%d chunks", pp_rank, chunk,
                                   cfg.pp ? cfg.pp : 1, cfg.vpp ? cfg.vpp : 1);
        }
        if (pp_layers_stage_range(split, stage, &lfirst, &lcount, &err) != PP_OK) { pp_layers_free(split); return cli_report(&err); }
        rc.first_layer = lfirst; rc.last_layer = lfirst + lcount;
        pp_layers_free(split);
    }
    if (cfg.pack.capacity == 0) return cli_usage_error("--capacity: required (tokens per microbatch)");
    if (tp_rank >= 0 && !sp) return cli_usage_error("--tp-rank=%d: only with --sequence-parallel", tp_rank);
    if (inline_list && path) return cli_usage_error("--lengths: give the lengths either inline or as a file, not both");
    if (!strcmp(payload, "full")) rc.model.payload_layers = rc.model.num_layers;
    if ((n = data_read_lengths(inline_list, path, &lengths)) < 0) return n == -3 ? 1 : 2;
    layers = (int32_t *)malloc(sizeof(int32_t) * (size_t)(rc.model.num_layers + 1));
    slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)(rc.model.num_layers + 1));
    if (!layers || !slots) { code = cli_usage_error("out of memory"); goto done; }
    if (pp_moe_stage_layers(&rc.model, rc.first_layer, rc.last_layer, layers, slots, &count, &err) != PP_OK ||
        pp_pack_plan_build(lengths, n, &cfg, &plan, &err) != PP_OK) { code = cli_report(&err); goto done; }
    if (bin >= plan->num_bins) { code = cli_usage_error("--bin=%d: the plan has %d microbatches", bin, plan->num_bins); goto done; }
    if (cp_rank >= plan->cp) { code = cli_usage_error("--cp-rank=%d: must be below --cp=%d", cp_rank, plan->cp); goto done; }
    if (tp_rank >= plan->tp) { code = cli_usage_error("--tp-rank=%d: must be below --tp=%d", tp_rank, plan->tp); goto done; }
    if (json) {
        printf("{\"layers\": %d, \"moe_layers\": %d, \"payload_layers\": %d, \"stage_layers\": [%d, %d], ", rc.model.num_layers,
               pp_moe_count(&rc.model), rc.model.payload_layers ? rc.model.payload_layers : pp_moe_count(&rc.model),
               rc.first_layer, rc.last_layer);
        data_print_ints("\"stage_moe_layers\": ", layers, count, 1);
        data_print_ints(", \"slots\": ", slots, count, 1);
        fputs(", \"maps\": [", stdout);
    } else {
        printf("model: %d layers, %d MoE (layers < %d dense, then every %d); recording slots: %d (%s)\n", rc.model.num_layers,
               pp_moe_count(&rc.model), rc.model.first_k_dense, rc.model.moe_freq ? rc.model.moe_freq : 1,
               rc.model.payload_layers ? rc.model.payload_layers : pp_moe_count(&rc.model), payload);
        printf("stage layers [%d, %d): %d MoE layer%s", rc.first_layer, rc.last_layer, count, count == 1 ? "" : "s");
        if (count) { data_print_ints(" ", layers, count, 0); data_print_ints(" at slots ", slots, count, 0); }
        putchar('\n');
        if (!count) puts("no MoE layer on this stage: nothing to replay");
    }
    for (b = 0; b < plan->num_bins && count; b++) {
        if (bin >= 0 && b != bin) continue;
        for (r = 0; r < plan->cp; r++) {
            int t, tps = sp ? plan->tp : 1;
            if (cp_rank >= 0 && r != cp_rank) continue;
            for (t = 0; t < tps; t++) {
                pp_replay_map *map = NULL;
                if (tp_rank >= 0 && t != tp_rank) continue;
                rc.cp_rank = r; rc.tp = plan->tp; rc.tp_rank = t; rc.sequence_parallel = sp;
                if (pp_replay_map_build(plan, b, &rc, &map, &err) != PP_OK) { code = cli_report(&err); goto done; }
                if (json) {
                    printf("%s{\"bin\": %d, \"rank\": %d, \"microbatch\": %d, \"cp_rank\": %d, \"tp_rank\": %d, ", first ? "" : ", ",
                           b, (int)plan->bin_rank[b], (int)plan->bin_microbatch[b], r, t);
                    data_print_rows("\"rows\": ", map->rows, map->num_tokens, 1);
                    putchar('}');
                } else {
                    printf("bin %d (dp rank %d, microbatch %d) cp rank %d", b, (int)plan->bin_rank[b],
                           (int)plan->bin_microbatch[b], r);
                    if (sp) printf(" tp rank %d", t);
                    printf(": %d tokens  ", (int)map->num_tokens);
                    data_print_rows("rows ", map->rows, map->num_tokens, 0);
                    putchar('\n');
                }
                first = 0;
                pp_replay_map_free(map);
            }
        }
    }
    if (json) puts("]}");
done:
    pp_pack_plan_free(plan);
    free(lengths); free(layers); free(slots);
    return code;
}
