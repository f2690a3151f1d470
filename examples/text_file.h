/* text_file.h — reading a whole text file, bounded: the one reader of the CLI (examples/cli.h)
 * and the examples (mlp_plan.c, mlp_gpu.cu). pipepar.h reads no files; its readers take text.
 *
 * Bounds: at most TEXT_FILE_MAX_BYTES (a device or pipe that never ends stops there), no NUL byte
 * (the library's text readers refuse one anyway; here the message says where). Compiles as C and
 * as C++. */
#ifndef TEXT_FILE_H
#define TEXT_FILE_H
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TEXT_FILE_MAX_BYTES (64L << 20)     /* the largest file (or stdin) read whole */

/* Reads path (stdin for "-") into *text, NUL-terminated, *len bytes without it; the caller frees
 * it. Returns 0; or 2, the input refused (it cannot be opened, is a directory, holds more than
 * TEXT_FILE_MAX_BYTES or a NUL byte), or 1, the environment failed (a read error, no memory),
 * with why[size] saying which in a few words ("cannot open: No such file or directory"). */
static int text_file_read(const char *path, char **text, size_t *len, char *why, size_t size)
{
    int is_stdin = !strcmp(path, "-"), rc = 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0, cap = 0;
    struct stat sb;
    *text = NULL; *len = 0; why[0] = '\0';
    if (!f) { snprintf(why, size, "cannot open: %s", strerror(errno)); return 2; }
    if (fileno(f) >= 0 && fstat(fileno(f), &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) { snprintf(why, size, "is a directory"); rc = 2; }
        else if (S_ISREG(sb.st_mode) && sb.st_size > TEXT_FILE_MAX_BYTES) {
            snprintf(why, size, "%lld bytes, more than %ld (64 MiB, the most read from one input)", (long long)sb.st_size,
                     TEXT_FILE_MAX_BYTES);
            rc = 2;
        }
    }
    while (rc == 0) {
        size_t got;
        const char *nul;
        if (cap - n < 2) {
            size_t ncap = cap ? 2 * cap : 65536;
            char *b;
            if (ncap > (size_t)TEXT_FILE_MAX_BYTES + 2) ncap = (size_t)TEXT_FILE_MAX_BYTES + 2;
            if (!(b = (char *)realloc(buf, ncap))) { snprintf(why, size, "out of memory reading it"); rc = 1; break; }
            buf = b; cap = ncap;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        if ((nul = (const char *)memchr(buf + n, '\0', got)) != NULL) {
            snprintf(why, size, "byte %lu is a NUL: expected text", (unsigned long)(nul - buf));
            rc = 2;
        }
        n += got;
        if (rc == 0 && n > (size_t)TEXT_FILE_MAX_BYTES) {
            snprintf(why, size, "more than %ld bytes (64 MiB, the most read from one input)", TEXT_FILE_MAX_BYTES);
            rc = 2;
        }
        if (got == 0) break;
    }
    if (rc == 0 && ferror(f)) { snprintf(why, size, "read error: %s", strerror(errno)); rc = 1; }
    if (!is_stdin) fclose(f);
    if (rc) { free(buf); return rc; }
    buf[n] = '\0';
    *text = buf; *len = n;
    return 0;
}
#endif
