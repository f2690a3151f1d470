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
 * holds at most TEXT_FILE_MAX_BYTES (text_file.h); each numeric flag states its range in its message; output
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
#include "../pipepar.h"
#include "text_file.h"

#if defined(__GNUC__)
#define CLI_UNUSED __attribute__((unused))
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_UNUSED
#define CLI_PRINTF(a, b)
#endif

#define CLI_SHORT 64                         /* longest value a message echoes whole */
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

/* Prints "pipepar: <message>" on stderr and returns code. */
static CLI_UNUSED CLI_PRINTF(2, 0) int cli_verror(int code, const char *fmt, va_list ap)
{
    fputs("pipepar: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    return code;
}

/* Prints "pipepar: <message>" on stderr and returns exit code 2 (the request is refused). */
static CLI_UNUSED CLI_PRINTF(1, 2) int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = cli_verror(2, fmt, ap);
    va_end(ap);
    return rc;
}

/* Prints "pipepar: <message>" on stderr and returns exit code 1 (the environment failed). */
static CLI_UNUSED CLI_PRINTF(1, 2) int cli_env_error(const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = cli_verror(1, fmt, ap);
    va_end(ap);
    return rc;
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

/* Parses "1,1.5,2" into exactly `want` numbers, each >= 0 (> 0 with positive); `what` names the
 * count in the message ("pp*vpp" for per-stage lists, "pp" for per-rank ones). 0 after printing why. */
static CLI_UNUSED int cli_parse_list(const char *flag, const char *text, int want, const char *what, int positive,
                                     double *out)
{
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end, buf[64];
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        double v;
        if (len == 0 || len >= sizeof buf) {
            cli_usage_error("%s: '%s': expected comma-separated numbers", flag, cli_short(text));
            return 0;
        }
        memcpy(buf, p, len); buf[len] = '\0';
        v = strtod(buf, &end);
        if (end == buf || *end != '\0' || v != v || v < 0 || (positive && v == 0) || v > 1e300 ||
            isspace((unsigned char)buf[0])) {
            cli_usage_error("%s: '%s' is not a number %s (up to 1e300)", flag, buf, positive ? "> 0" : ">= 0");
            return 0;
        }
        if (n < want) out[n] = v;
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    if (n != want) {
        cli_usage_error("%s: %d value%s, expected %s = %d", flag, n, n == 1 ? "" : "s", what, want);
        return 0;
    }
    return 1;
}

/* Each of v[0..n-1] within [lo, hi], or one line naming the flag, the value and the bounds: 0
 * after printing why. `what` says what a value is ("a rank's speed"). */
static CLI_UNUSED int cli_check_range(const char *flag, const double *v, int n, double lo, double hi, const char *what)
{
    int k;
    for (k = 0; k < n; k++)
        if (!(v[k] >= lo && v[k] <= hi)) {
            cli_usage_error("%s: value %d is %g: %s must be from %g to %g", flag, k + 1, v[k], what, lo, hi);
            return 0;
        }
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
 * frees it) with text_file_read's bounds. what (a flag, or NULL) and the path name it in
 * messages. Returns 0, or the exit code after printing why (2: refused, 1: a read error, no
 * memory). */
static CLI_UNUSED int cli_read_file(const char *what, const char *path, char **text, size_t *len)
{
    char why[160];
    int rc = text_file_read(path, text, len, why, sizeof why);
    if (rc == 0) return 0;
    fprintf(stderr, "pipepar: %s%s", what ? what : "", what ? " " : "");
    if (!strcmp(path, "-")) fprintf(stderr, "stdin: %s\n", why);
    else fprintf(stderr, "'%s': %s\n", cli_short(path), why);
    return rc;
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

#endif
