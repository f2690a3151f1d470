/* fuzz_fopen.h — for harnesses that drive a CLI file reader unchanged: include this, then the
 * CLI's .c file, then #undef fopen. Its fopen opens the fuzz input (fuzz_file, fuzz_file_size)
 * for the path FUZZ_PATH and the real file for any other path. */
#ifndef FUZZ_FOPEN_H
#define FUZZ_FOPEN_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define FUZZ_PATH "<fuzz input>"
static const uint8_t *fuzz_file;
static size_t fuzz_file_size;

static FILE *fuzz_fopen(const char *path, const char *mode)
{
    if (strcmp(path, FUZZ_PATH) != 0) return fopen(path, mode);
    if (fuzz_file_size == 0) return fopen("/dev/null", "r");
    return fmemopen((void *)(uintptr_t)fuzz_file, fuzz_file_size, "r");
}
#define fopen(path, mode) fuzz_fopen(path, mode)
#endif
