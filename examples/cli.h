/* cli.h — flag parsing shared by the subcommands of build/pipepar.
 *
 * A subcommand lives in examples/cli_*.c and defines two things; the Makefile finds them:
 *     const char pp_cli_NAME_summary[] = "one line for `pipepar help`";
 *     int pp_cli_NAME(int argc, char **argv)   // argv[0] is "NAME"; returns the exit code
 * Exit codes: 0 done; 2 the input breaks a rule (a flag, a value, a file's contents, a combination
 * the library refuses), with one line on stderr naming the parameter and the rule; 1 what the
 * input could not cause (the library out of memory, a failed write) and `search` finding no
 * schedule under --max-mem.                                                                  */
#ifndef PP_CLI_H
#define PP_CLI_H
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../pipepar.h"

/* Prints "pipepar: <message>" on stderr and returns exit code 2 (bad usage). */
static int cli_usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), unused))
#endif
    ;
#include <stdarg.h>
static int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("pipepar: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

/* Prints a pp_error as "pipepar: message"; returns 2 when the input broke a rule (the library
 * names the parameter and the rule), else 1. */
static int cli_report(const pp_error *err)
#if defined(__GNUC__)
    __attribute__((unused))
#endif
    ;
static int cli_report(const pp_error *err)
{
    fprintf(stderr, "pipepar: %s\n", err->message);
    switch (err->status) {
    case PP_EINVAL: case PP_EPARSE: case PP_EUNSUPPORTED: case PP_EINVALID_SCHEDULE: case PP_EDEADLOCK: return 2;
    default: return 1;
    }
}

/* Parses a whole decimal integer in [lo, hi]; on failure prints why and returns 0. */
static int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out)
#if defined(__GNUC__)
    __attribute__((unused))
#endif
    ;
static int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out)
{
    char *end;
    long v;
    if (!text) { cli_usage_error("%s: needs a value", flag); return 0; }
    errno = 0;
    v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE) {
        cli_usage_error("%s: expected an integer, got '%s'", flag, text);
        return 0;
    }
    if (v < lo || v > hi) {
        cli_usage_error("%s=%ld: must be between %ld and %ld", flag, v, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

/* Parses a finite number >= lo; on failure prints why and returns 0. */
static int cli_parse_double(const char *flag, const char *text, double lo, double *out)
#if defined(__GNUC__)
    __attribute__((unused))
#endif
    ;
static int cli_parse_double(const char *flag, const char *text, double lo, double *out)
{
    char *end;
    double v;
    if (!text) { cli_usage_error("%s: needs a value", flag); return 0; }
    errno = 0;
    v = strtod(text, &end);
    if (end == text || *end != '\0' || v != v) {
        cli_usage_error("%s: expected a number, got '%s'", flag, text);
        return 0;
    }
    if (v > 1e300 || v < -1e300) {   /* sums and products must stay finite (an underflow reads as tiny) */
        cli_usage_error("%s=%s: out of range (at most 1e300 in size)", flag, text);
        return 0;
    }
    if (v < lo) { cli_usage_error("%s=%g: must be at least %g", flag, v, lo); return 0; }
    *out = v;
    return 1;
}

/* Reads a whole file (or stdin for "-") into a NUL-terminated buffer; NULL + message on error. */
static char *cli_read_file(const char *path, size_t *len_out)
#if defined(__GNUC__)
    __attribute__((unused))
#endif
    ;
static char *cli_read_file(const char *path, size_t *len_out)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!f) { cli_usage_error("cannot open '%s': %s", path, strerror(errno)); return NULL; }
    for (;;) {
        size_t n;
        if (cap - len < 65536) {
            char *b = (char *)realloc(buf, cap ? cap * 2 : 65536 + 1);
            if (!b) { free(buf); cli_usage_error("out of memory reading '%s'", path); buf = NULL; break; }
            buf = b; cap = cap ? cap * 2 : 65536 + 1;
        }
        n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    if (buf) {
        if (ferror(f)) { cli_usage_error("error reading '%s'", path); free(buf); buf = NULL; }
        else { buf[len] = '\0'; if (len_out) *len_out = len; }
    }
    if (f != stdin) fclose(f);
    return buf;
}

/* --layout: the stages of a Megatron layout string on pp ranks (pp_layers_build's rules), each
 * holding at least one layer ('t'), since a stage's costs and memory scale with its layers. Then
 * arrays[k][s] = per_layer[k] * layers of stage s, for k < n (callers pick which costs; allocated,
 * the caller frees them). Returns 0, or an exit code with the message printed. */
static int cli_layout_stages(const char *layout, int pp, const double *per_layer, int n, double **arrays,
                             pp_layers **out)
#if defined(__GNUC__)
    __attribute__((unused))
#endif
    ;
static int cli_layout_stages(const char *layout, int pp, const double *per_layer, int n, double **arrays,
                             pp_layers **out)
{
    pp_layers_config lc;
    pp_layers *lay = NULL;
    pp_error err;
    int s, k;
    *out = NULL;
    memset(&lc, 0, sizeof lc);
    lc.pp = pp; lc.layout = layout;
    if (pp_layers_build(&lc, &lay, &err) != PP_OK) return cli_usage_error("--layout=%s: %s", layout, err.message);
    for (s = 0; s < lay->num_stages; s++)
        if (lay->count[s] < 1) {
            pp_layers_free(lay);
            return cli_usage_error("--layout=%s: stage %d holds no layer ('t'): every stage needs one", layout, s);
        }
    for (k = 0; k < n; k++) {
        arrays[k] = (double *)calloc((size_t)lay->num_stages, sizeof(double));
        if (!arrays[k]) { pp_layers_free(lay); return cli_usage_error("out of memory"); }
        for (s = 0; s < lay->num_stages; s++) arrays[k][s] = per_layer[k] * lay->count[s];
    }
    *out = lay;
    return 0;
}
#endif
