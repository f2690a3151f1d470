
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <limits.h>

#ifndef PIPEPAR_MALLOC
#define PIPEPAR_MALLOC(sz) malloc(sz)
#define PIPEPAR_REALLOC(p, sz) realloc(p, sz)
#define PIPEPAR_FREE(p) free(p)
#endif
#ifndef PIPEPAR_ASSERT
#include <assert.h>
#define PIPEPAR_ASSERT(x) assert(x)
#endif

/* --- >>errors (implementation) ----------------------------------------------------------- */

const char *pp_status_name(pp_status status)
{
    switch (status) {
#define PP__STATUS_NAME(code, text) case code: return #code;
    PP_STATUS_LIST(PP__STATUS_NAME)
#undef PP__STATUS_NAME
    default: return "PP_UNKNOWN";
    }
}

const char *pp_status_description(pp_status status)
{
    switch (status) {
#define PP__STATUS_TEXT(code, text) case code: return text;
    PP_STATUS_LIST(PP__STATUS_TEXT)
#undef PP__STATUS_TEXT
    default: return "unknown status";
    }
}

/* Records a failure in *err (if given) and returns the status, so a check reads as one line:
 *     if (pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", pp);         */
pp_status pp_error_set(pp_error *err, pp_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->status = status;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}
#define pp__fail pp_error_set

static pp_status pp__ok(pp_error *err)
{
    if (err) { err->status = PP_OK; err->message[0] = '\0'; }
    return PP_OK;
}

/* Allocation helpers: zeroed, overflow-checked. */
static void *pp__calloc(size_t count, size_t size)
{
    void *p;
    size_t bytes;
    if (size && count > SIZE_MAX / size) return NULL;
    bytes = count * size;
    p = PIPEPAR_MALLOC(bytes > 0 ? bytes : 1);
    if (p) memset(p, 0, bytes);
    return p;
}

/* A growable byte buffer for text output (CSV, SVG, JSON) and a growable int array. */
typedef struct pp__text { char *data; size_t len, cap; int failed; } pp__text;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void pp__text_printf(pp__text *t, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (t->failed) return;
    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        n = vsnprintf(t->data ? t->data + t->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) { t->failed = 1; return; }
        if ((size_t)n < room) { t->len += (size_t)n; return; }
        {
            size_t cap = t->cap ? t->cap * 2 : 256;
            char *d;
            while (cap - t->len <= (size_t)n) cap *= 2;
            d = (char *)PIPEPAR_REALLOC(t->data, cap);
            if (!d) { t->failed = 1; return; }
            t->data = d; t->cap = cap;
        }
    }
}

static void pp__text_free(pp__text *t) { PIPEPAR_FREE(t->data); t->data = NULL; t->len = t->cap = 0; }
