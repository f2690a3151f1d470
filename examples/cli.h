/* cli.h — flag parsing shared by the subcommands of build/pipepar.
 *
 * A subcommand lives in examples/cli_*.c and defines two things; the Makefile finds them:
 *     const char pp_cli_NAME_summary[] = "one line for `pipepar help`";
 *     int pp_cli_NAME(int argc, char **argv)   // argv[0] is "NAME"; returns the exit code
 * Every bad flag exits 2 with one line on stderr naming the flag and the rule.              */
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

/* Prints a pp_error as "pipepar: message" and returns exit code 1. */
static int cli_report(const pp_error *err)
#if defined(__GNUC__)
    __attribute__((unused))
#endif
    ;
static int cli_report(const pp_error *err)
{
    fprintf(stderr, "pipepar: %s\n", err->message);
    return 1;
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
    if (end == text || *end != '\0' || errno == ERANGE || v != v || v > 1e300 || v < -1e300) {
        cli_usage_error("%s: expected a number, got '%s'", flag, text);
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
#endif
