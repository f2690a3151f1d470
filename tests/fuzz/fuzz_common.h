/* fuzz_common.h — helpers shared by the libFuzzer harnesses in tests/fuzz/ (see fuzz_*.c).
 *
 * Every harness is one translation unit that includes pipepar.h (directly, or through an
 * examples/cli_*.c file it drives), then this file; pipepar's implementation comes from
 * fuzz_impl.c, compiled once and linked into every harness. Builds two ways: clang
 * -fsanitize=fuzzer (libFuzzer supplies main) or any C99 compiler with tests/fuzz/replay_main.c
 * (a main that replays corpus files; no clang needed). tests/fuzz/run.sh does both. */
#ifndef PP_FUZZ_COMMON_H
#define PP_FUZZ_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#if defined(__GNUC__) || defined(__clang__)
#define FUZZ_UNUSED __attribute__((unused))
#else
#define FUZZ_UNUSED
#endif

/* An invariant the library documents did not hold: print it and abort (libFuzzer then saves the
 * input as a crash, and the replay program exits non-zero). */
#define FUZZ_CHECK(cond)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* A NUL-terminated copy of the input (inputs may hold NULs: the string then ends early, as it
 * would for a C caller). Never NULL: an allocation failure aborts. */
FUZZ_UNUSED static char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = (char *)malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* A sink for the writers (pp_*_write_*, draw); opened once, kept for the process. */
FUZZ_UNUSED static FILE *fuzz_devnull(void)
{
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    if (!f) abort();
    return f;
}

/* Splits s in place at '\n' into at most max lines; returns the count (>= 1). A missing line
 * stays NULL in the caller's array. */
FUZZ_UNUSED static int fuzz_lines(char *s, char **line, int max)
{
    int n = 0;
    while (n < max) {
        char *nl = strchr(s, '\n');
        line[n++] = s;
        if (!nl) break;
        *nl = '\0';
        s = nl + 1;
    }
    return n;
}

/* Reads up to max whitespace-separated integers from text (NULL gives none) into v[], clamped to
 * [lo, hi]; returns how many were read. Lets a harness take small settings from its input. */
FUZZ_UNUSED static int fuzz_ints(const char *text, long *v, int max, long lo, long hi)
{
    int n = 0;
    const char *p = text;
    while (p && *p && n < max) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        v[n++] = x < lo ? lo : x > hi ? hi : x;
        p = end;
    }
    return n;
}

/* The value of "key=" inside text as a long (clamped to [lo, hi]), or def when absent. */
FUZZ_UNUSED static long fuzz_key_long(const char *text, const char *key, long def, long lo, long hi)
{
    const char *p = text ? strstr(text, key) : NULL;
    char *end;
    long x;
    if (!p) return def;
    p += strlen(key);
    x = strtol(p, &end, 10);
    if (end == p) return def;
    return x < lo ? lo : x > hi ? hi : x;
}
#endif
