/* replay_main.c — a main() for the fuzz harnesses, for compilers without libFuzzer (gcc in CI).
 *
 *     gcc -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=address,undefined \
 *         -fno-sanitize-recover=all -o build/replay_action_parse \
 *         tests/fuzz/fuzz_action_parse.c tests/fuzz/fuzz_impl.c tests/fuzz/replay_main.c -lpthread -lm
 *     build/replay_action_parse tests/fuzz/corpus/action_parse tests/fuzz/crashes/action_parse-*
 *
 * Runs LLVMFuzzerTestOneInput once on every file named on the command line and on every regular
 * file inside the directories named there (not recursive, in sorted order). A crash, sanitizer
 * report or failed invariant ends the process with its own status, as in libFuzzer; otherwise
 * it prints how many inputs ran and exits 0 (1 when a path cannot be read). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path, long *count)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return 1; }
    for (;;) {
        size_t n;
        if (len == cap) {
            uint8_t *b = (uint8_t *)realloc(buf, cap ? 2 * cap : 4096);
            if (!b) { free(buf); fclose(f); fprintf(stderr, "replay: out of memory\n"); return 1; }
            buf = b; cap = cap ? 2 * cap : 4096;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    if (ferror(f)) { free(buf); fclose(f); fprintf(stderr, "replay: cannot read %s\n", path); return 1; }
    fclose(f);
    /* a private copy of exactly len bytes, so ASan sees a read past the end of the input */
    {
        uint8_t *exact = (uint8_t *)malloc(len ? len : 1);
        if (!exact) { free(buf); return 1; }
        if (len) memcpy(exact, buf, len);
        free(buf);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
    }
    (*count)++;
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int replay_dir(const char *dir, long *count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0, i;
    int rc = 0;
    if (!d) { fprintf(stderr, "replay: cannot open directory %s\n", dir); return 1; }
    while ((e = readdir(d)) != NULL) {
        size_t len;
        char *p;
        struct stat st;
        if (e->d_name[0] == '.') continue;
        len = strlen(dir) + strlen(e->d_name) + 2;
        p = (char *)malloc(len);
        if (!p) { rc = 1; break; }
        snprintf(p, len, "%s/%s", dir, e->d_name);
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) { free(p); continue; }
        if (n == cap) {
            char **nn = (char **)realloc(names, (cap ? 2 * cap : 64) * sizeof *nn);
            if (!nn) { free(p); rc = 1; break; }
            names = nn; cap = cap ? 2 * cap : 64;
        }
        names[n++] = p;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    for (i = 0; i < n; i++) {
        if (!rc) rc = replay_file(names[i], count);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    long count = 0;
    int i, rc = 0;
    for (i = 1; i < argc; i++) {
        struct stat st;
        if (argv[i][0] == '-') continue;            /* libFuzzer-style flags are ignored */
        if (stat(argv[i], &st) != 0) { fprintf(stderr, "replay: %s: no such file\n", argv[i]); rc = 1; continue; }
        if (S_ISDIR(st.st_mode)) rc |= replay_dir(argv[i], &count);
        else rc |= replay_file(argv[i], &count);
    }
    printf("replay: %ld input%s ran\n", count, count == 1 ? "" : "s");
    return rc;
}
