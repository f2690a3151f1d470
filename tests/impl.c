/* The one translation unit of the tests that holds pipepar's implementation. Its allocations go
 * through a countdown, so that tests can make the n-th allocation fail (pp_test_alloc_countdown). */
#include <stdlib.h>

long pp_test_alloc_countdown = -1;   /* >= 0: that many more allocations succeed, then all fail */

static int pp_test_alloc_allowed(void)
{
    if (pp_test_alloc_countdown == 0) return 0;
    if (pp_test_alloc_countdown > 0) pp_test_alloc_countdown--;
    return 1;
}
static void *pp_test_malloc(size_t n) { return pp_test_alloc_allowed() ? malloc(n) : NULL; }
static void *pp_test_realloc(void *p, size_t n) { return pp_test_alloc_allowed() ? realloc(p, n) : NULL; }

#define PIPEPAR_MALLOC(n) pp_test_malloc(n)
#define PIPEPAR_REALLOC(p, n) pp_test_realloc(p, n)
#define PIPEPAR_FREE(p) free(p)
#define PIPEPAR_IMPLEMENTATION
#include "../pipepar.h"
