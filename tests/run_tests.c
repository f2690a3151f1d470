/* run_tests.c — runs every registered suite (or those named on the command line) and ends with
 * the line "N passed, N failed" that CI reads. A test passes when none of its checks failed. */
#include <stdarg.h>
#include <stdlib.h>
#include "pp_test.h"
#include "suites.gen.h"   /* written by the Makefile: PP_SUITES(X) lists every tests/test_*.c */

#define PP__DECLARE_SUITE(name) extern const pp_test_case pp_suite_##name[];
PP_SUITES(PP__DECLARE_SUITE)

static const struct { const char *name; const pp_test_case *cases; } suites[] = {
#define PP__LIST_SUITE(name) { #name, pp_suite_##name },
    PP_SUITES(PP__LIST_SUITE)
};

static int current_failed;
static const char *current_name;
static char data_dir[4096] = "tests/data";

void pp_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    if (current_failed < 5) {
        fprintf(stdout, "FAIL %s  (%s:%d)\n     ", current_name, file, line);
        va_start(ap, fmt);
        vfprintf(stdout, fmt, ap);
        va_end(ap);
        fputc('\n', stdout);
    }
    current_failed++;
}

void pp_test_compute_order(const pp_schedule *s, int rank, char *buf, size_t size)
{
    size_t len = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; i < s->length[rank]; i++) {
        char a[64];
        if (s->actions[rank][i].op >= PP_OP_SEND_F) continue;
        pp_action_format(s->actions[rank][i], a, sizeof a);
        len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%s", len ? " " : "", a);
    }
}

int pp_test_count_op(const pp_schedule *s, pp_op op)
{
    int r, i, n = 0;
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) n += s->actions[r][i].op == (int32_t)op;
    return n;
}

const char *pp_test_data_dir(void) { return data_dir; }

static int selected(const char *suite, const char *test, int argc, char **argv)
{
    int i;
    char full[512];
    if (argc <= 1) return 1;
    snprintf(full, sizeof full, "%s/%s", suite, test);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], suite) == 0) return 1;
        if (strncmp(full, argv[i], strlen(argv[i])) == 0) return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, verbose = getenv("PP_TEST_VERBOSE") != NULL;
    size_t s;
    const char *env_dir = getenv("PP_TEST_DATA");
    if (env_dir) snprintf(data_dir, sizeof data_dir, "%s", env_dir);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (s = 0; s < sizeof suites / sizeof suites[0]; s++) {
        const pp_test_case *c;
        for (c = suites[s].cases; c->name; c++) {
            char name[512];
            if (!selected(suites[s].name, c->name, argc, argv)) continue;
            snprintf(name, sizeof name, "%s/%s", suites[s].name, c->name);
            current_name = name;
            current_failed = 0;
            c->fn();
            if (current_failed) failed++; else passed++;
            if (verbose) printf("%s %s\n", current_failed ? "FAIL" : "ok  ", name);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
