/* cli.h — what the subcommands of build/pipepar share: flags, numbers, files, exit codes.
 *
 * A subcommand lives in examples/cli_*.c and defines two things; the Makefile finds them:
 *     const char pp_cli_NAME_summary[] = "one line for `pipepar help`";
 *     int pp_cli_NAME(int argc, char **argv)   // argv[0] is "NAME"; returns the exit code
 * Each reads its flags in a parse step (search_parse, grid_parse, ..., parse_schedule_flags: flags
 * to options, every rule that needs no file and no library work), then does the work;
 * tests/fuzz/fuzz_cli_args.c drives the parse steps.
 *
 * Exit codes, the same for every subcommand:
 *   0  done;
 *   2  the request is refused: a flag, a value, a combination the library refuses, a file's
 *      contents, a path that cannot be opened, an input past its bound. One line on stderr
 *      names the parameter, its value (cut to CLI_SHORT characters) and the rule;
 *   1  the environment failed what the request could have done: out of memory, a read or write
 *      error (a full disk: every output is flushed and closed, and checked), and `search`
 *      finding no schedule under --max-mem. One line on stderr says which.
 * Flags: "--flag value" or "--flag=value"; a flag given twice is refused (mimo's --grid, one per
 * module, excepted). Numbers are whole words: no blank before or after. Bounds: a file read
 * holds at most CLI_MAX_INPUT_BYTES; each numeric flag states its range in its message; output
 * that grows with a number (cp's and replay's tokens) is capped where that number is read. */
#ifndef PP_CLI_H
#define PP_CLI_H
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../pipepar.h"

#if defined(__GNUC__)
#define CLI_UNUSED __attribute__((unused))
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_UNUSED
#define CLI_PRINTF(a, b)
#endif

#define CLI_SHORT 64                         /* longest value a message echoes whole */
#define CLI_MAX_INPUT_BYTES (64L << 20)      /* largest file (or stdin) a subcommand reads */
#define CLI_MAX_PRINTED_TOKENS (1L << 24)    /* cp and replay print every token: at most this many */
#define CLI_TIME "%.3f"                      /* step times in text output (JSON keeps 9 digits) */

/* --- messages ----------------------------------------------------------------------------------- */

/* s itself when at most CLI_SHORT characters, else its first CLI_SHORT - 4 and "...", so that a
 * message never echoes a long value whole. Up to 4 results are valid at once. */
static CLI_UNUSED const char *cli_short(const char *s)
{
    static char slot[4][CLI_SHORT + 1];
    static int next;
    char *b;
    if (!s || strlen(s) <= CLI_SHORT) return s;
    b = slot[next++ & 3];
    memcpy(b, s, CLI_SHORT - 4);
    memcpy(b + CLI_SHORT - 4, "...", 4);
    return b;
}

/* Prints "pipepar: <message>" on stderr and returns exit code 2 (the request is refused). */
static CLI_UNUSED CLI_PRINTF(1, 2) int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("pipepar: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

/* Prints "pipepar: <message>" on stderr and returns exit code 1 (the environment failed). */
static CLI_UNUSED CLI_PRINTF(1, 2) int cli_env_error(const char *fmt, ...)
{
    va_list ap;
    fputs("pipepar: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

/* Prints a pp_error as "pipepar: message"; returns 2 when the input broke a rule (the library
 * names the parameter and the rule), else 1 (out of memory, an I/O error). */
static CLI_UNUSED int cli_report(const pp_error *err)
{
    fprintf(stderr, "pipepar: %s\n", err->message);
    switch (err->status) {
    case PP_EINVAL: case PP_EPARSE: case PP_EUNSUPPORTED: case PP_EINVALID_SCHEDULE: case PP_EDEADLOCK: return 2;
    default: return 1;
    }
}

/* A library writer's result into out (named by what: "stdout", "--out 'x.svg'"): 0, or the exit
 * code after printing why; a failed write (PP_EIO) names the output and the system's reason. */
static CLI_UNUSED int cli_written(pp_status st, const pp_error *err, const char *what)
{
    if (st == PP_OK) return 0;
    if (st == PP_EIO) return cli_env_error("%s: write failed: %s", what, errno ? strerror(errno) : err->message);
    return cli_report(err);
}

/* --- flags -------------------------------------------------------------------------------------- */

enum { CLI_VALUE, CLI_SWITCH, CLI_REPEAT };   /* takes one value | takes none | a value, may repeat */

typedef struct cli_flag_spec {
    const char *name;    /* "--pp" */
    int kind;            /* CLI_VALUE, CLI_SWITCH or CLI_REPEAT */
} cli_flag_spec;

#define CLI_MAX_SPECS 64

/* One command line being read: cli_args_init, then cli_next until it returns 0. */
typedef struct cli_args {
    int argc, i;
    char **argv;
    const char *command;               /* "schedule", for "see 'pipepar schedule --help'" */
    const cli_flag_spec *specs;        /* ends with a { NULL } entry */
    int positional;                    /* 1: words that are not flags are handed back (a file) */
    const char *given[CLI_MAX_SPECS];  /* each flag's value once given ("" for a switch) */
} cli_args;

static CLI_UNUSED void cli_args_init(cli_args *a, int argc, char **argv, const char *command,
                                     const cli_flag_spec *specs, int positional)
{
    memset(a, 0, sizeof *a);
    a->argc = argc; a->argv = argv; a->command = command; a->specs = specs; a->positional = positional;
}

/* Reads the next flag: 1 with *flag its spec's name ("--help" for -h too) and *val its value
 * (NULL for a switch), or *flag NULL and *val the word for a positional one; 0 at the end; -1
 * after printing why the line is refused (exit 2): an unknown flag, a missing value, a value
 * given to a switch, a flag given twice, a word where none is taken. */
static CLI_UNUSED int cli_next(cli_args *a, const char **flag, const char **val)
{
    const char *w, *eq;
    size_t len;
    int k;
    *flag = NULL; *val = NULL;
    if (++a->i >= a->argc) return 0;
    w = a->argv[a->i];
    if (!strcmp(w, "--help") || !strcmp(w, "-h")) { *flag = "--help"; return 1; }
    if (w[0] != '-' || w[1] == '\0') {
        if (!a->positional)
            return cli_usage_error("unexpected argument '%s' (see 'pipepar %s --help')", cli_short(w), a->command), -1;
        *val = w;
        return 1;
    }
    eq = strchr(w, '=');
    len = eq ? (size_t)(eq - w) : strlen(w);
    for (k = 0; a->specs[k].name; k++)
        if (strlen(a->specs[k].name) == len && !strncmp(a->specs[k].name, w, len)) break;
    if (!a->specs[k].name || k >= CLI_MAX_SPECS)
        return cli_usage_error("%s: unknown flag (see 'pipepar %s --help')", cli_short(w), a->command), -1;
    *flag = a->specs[k].name;
    if (a->specs[k].kind == CLI_SWITCH) {
        if (eq) return cli_usage_error("%s: %s takes no value", cli_short(w), *flag), -1;
        if (a->given[k]) return cli_usage_error("%s given twice: give it once", *flag), -1;
        a->given[k] = "";
        return 1;
    }
    if (eq) *val = eq + 1;
    else if (a->i + 1 < a->argc) *val = a->argv[++a->i];
    else return cli_usage_error("%s: needs a value", *flag), -1;
    if (a->given[k] && a->specs[k].kind == CLI_VALUE)
        return cli_usage_error("%s given twice ('%s', then '%s'): give it once", *flag, cli_short(a->given[k]),
                               cli_short(*val)), -1;
    a->given[k] = *val;
    return 1;
}

/* --- numbers and names ---------------------------------------------------------------------------- */

/* Parses a whole decimal integer in [lo, hi] (no blank before or after it); on failure prints
 * why and returns 0. */
static CLI_UNUSED int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out)
{
    char *end;
    long v;
    if (!text) { cli_usage_error("%s: needs a value", flag); return 0; }
    errno = 0;
    v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || isspace((unsigned char)text[0])) {
        cli_usage_error("%s: expected an integer, got '%s'", flag, cli_short(text));
        return 0;
    }
    if (v < lo || v > hi) {
        cli_usage_error("%s=%ld: must be between %ld and %ld", flag, v, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

/* cli_parse_int into an int (hi must fit one). */
static CLI_UNUSED int cli_parse_int32(const char *flag, const char *text, long lo, long hi, int *out)
{
    long v;
    if (!cli_parse_int(flag, text, lo, hi, &v)) return 0;
    *out = (int)v;
    return 1;
}

/* Parses a finite number >= lo, a whole word; on failure prints why and returns 0. */
static CLI_UNUSED int cli_parse_double(const char *flag, const char *text, double lo, double *out)
{
    char *end;
    double v;
    if (!text) { cli_usage_error("%s: needs a value", flag); return 0; }
    errno = 0;
    v = strtod(text, &end);
    if (end == text || *end != '\0' || v != v || isspace((unsigned char)text[0])) {
        cli_usage_error("%s: expected a number, got '%s'", flag, cli_short(text));
        return 0;
    }
    if (v > 1e300 || v < -1e300) {   /* sums and products must stay finite (an underflow reads as tiny) */
        cli_usage_error("%s=%s: out of range (at most 1e300 in size)", flag, cli_short(text));
        return 0;
    }
    if (v < lo) { cli_usage_error("%s=%g: must be at least %g", flag, v, lo); return 0; }
    *out = v;
    return 1;
}

/* A schedule kind: pp_schedule_kind_parse's names, and "greedy" (the greedy zero-bubble
 * scheduler, kind PP_CUSTOM). 0 after printing why. */
static CLI_UNUSED int cli_parse_kind(const char *flag, const char *text, pp_schedule_kind *out)
{
    pp_error err;
    if (!strcmp(text, "greedy")) { *out = PP_CUSTOM; return 1; }
    if (pp_schedule_kind_parse(text, out, &err) == PP_OK && *out != PP_CUSTOM) return 1;
    if (*out == PP_CUSTOM) cli_usage_error("%s=custom: not a kind that can be built (a CSV's schedule is custom)", flag);
    else cli_usage_error("%s: %s, or greedy", flag, err.message);
    return 0;
}

static CLI_UNUSED const char *cli_kind_name(pp_schedule_kind kind)
{
    return kind == PP_CUSTOM ? "greedy" : pp_schedule_kind_name(kind);
}

/* --- files ---------------------------------------------------------------------------------------- */

/* Reads a whole text file (stdin for "-") into *text (NUL-terminated, *len bytes; the caller
 * frees it). what (a flag, or NULL) and the path name it in messages. Refused (exit 2): a path
 * that cannot be opened or is a directory, more than CLI_MAX_INPUT_BYTES (a device or pipe that
 * never ends stops there), a NUL byte. Exit 1: a read error, no memory. Returns 0, or the exit
 * code after printing why. */
static CLI_UNUSED int cli_read_file(const char *what, const char *path, char **text, size_t *len)
{
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    char *buf = NULL, name[CLI_SHORT + 64];
    size_t n = 0, cap = 0;
    struct stat sb;
    int rc = 0;
    *text = NULL; *len = 0;
    if (is_stdin) snprintf(name, sizeof name, "%s%sstdin", what ? what : "", what ? " " : "");
    else snprintf(name, sizeof name, "%s%s'%s'", what ? what : "", what ? " " : "", cli_short(path));
    if (!f) return cli_usage_error("%s: cannot open: %s", name, strerror(errno));
    if (fileno(f) >= 0 && fstat(fileno(f), &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) rc = cli_usage_error("%s: is a directory", name);
        else if (S_ISREG(sb.st_mode) && sb.st_size > CLI_MAX_INPUT_BYTES)
            rc = cli_usage_error("%s: %lld bytes, more than %ld (64 MiB, the most pipepar reads from one input)", name,
                                 (long long)sb.st_size, CLI_MAX_INPUT_BYTES);
    }
    while (rc == 0) {
        size_t got;
        const char *nul;
        if (cap - n < 2) {
            size_t ncap = cap ? 2 * cap : 65536;
            char *b;
            if (ncap > (size_t)CLI_MAX_INPUT_BYTES + 2) ncap = (size_t)CLI_MAX_INPUT_BYTES + 2;
            b = (char *)realloc(buf, ncap);
            if (!b) { rc = cli_env_error("%s: out of memory reading it", name); break; }
            buf = b; cap = ncap;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        if ((nul = (const char *)memchr(buf + n, '\0', got)) != NULL)
            rc = cli_usage_error("%s: byte %lu is a NUL: expected text", name, (unsigned long)(nul - buf));
        n += got;
        if (rc == 0 && n > (size_t)CLI_MAX_INPUT_BYTES)
            rc = cli_usage_error("%s: more than %ld bytes (64 MiB, the most pipepar reads from one input)", name,
                                 CLI_MAX_INPUT_BYTES);
        if (got == 0) break;
    }
    if (rc == 0 && ferror(f)) rc = cli_env_error("%s: read error: %s", name, strerror(errno));
    if (!is_stdin) fclose(f);
    if (rc) { free(buf); return rc; }
    buf[n] = '\0';
    *text = buf; *len = n;
    return 0;
}

/* Flushes and closes an output (stdout too), then checks that every write reached it. what
 * names it ("stdout", "--out 'x.svg'"). Returns 0, or 1 after printing the error. */
static CLI_UNUSED int cli_close_output(FILE *f, const char *what)
{
    int failed = ferror(f), e = 0;
    errno = 0;
    if (fflush(f) != 0) { failed = 1; e = errno; }
    if (fclose(f) != 0 && !failed) { failed = 1; e = errno; }
    if (!failed) return 0;
    return cli_env_error("%s: write failed: %s", what, e ? strerror(e) : "an earlier write did not complete");
}

/* --- layouts ------------------------------------------------------------------------------------- */

/* --layout: the stages of a Megatron layout string on pp ranks (pp_layers_build's rules), each
 * holding at least one layer ('t'), since a stage's costs and memory scale with its layers. Then
 * arrays[k][s] = per_layer[k] * layers of stage s, for k < n (callers pick which costs; allocated,
 * the caller frees them). Returns 0, or an exit code with the message printed. */
static CLI_UNUSED int cli_layout_stages(const char *layout, int pp, const double *per_layer, int n, double **arrays,
                                        pp_layers **out)
{
    pp_layers_config lc;
    pp_layers *lay = NULL;
    pp_error err;
    int s, k;
    *out = NULL;
    memset(&lc, 0, sizeof lc);
    lc.pp = pp; lc.layout = layout;
    if (pp_layers_build(&lc, &lay, &err) != PP_OK) return cli_report(&err);
    for (s = 0; s < lay->num_stages; s++)
        if (lay->count[s] < 1) {
            pp_layers_free(lay);
            return cli_usage_error("--layout=%s: stage %d holds no layer ('t'): every stage needs one", cli_short(layout), s);
        }
    for (k = 0; k < n; k++) {
        arrays[k] = (double *)calloc((size_t)lay->num_stages, sizeof(double));
        if (!arrays[k]) { pp_layers_free(lay); return cli_env_error("out of memory"); }
        for (s = 0; s < lay->num_stages; s++) arrays[k][s] = per_layer[k] * lay->count[s];
    }
    *out = lay;
    return 0;
}
#endif
