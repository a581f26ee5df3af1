/*
 * fuzz_util.h -- what the harnesses of tests/fuzz share: an invariant check that aborts (which
 * libFuzzer and the CTest replay report as a crash) and an exact-size copy of an input, so that
 * AddressSanitizer catches a read one byte past it even where the code expects a NUL.
 */
#ifndef SG_TESTS_FUZZ_UTIL_H
#define SG_TESTS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(c)                                                                                                              \
    do {                                                                                                                           \
        if (!(c)) {                                                                                                                \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c);                                              \
            abort();                                                                                                               \
        }                                                                                                                          \
    } while (0)

/* malloc'ed copy of exactly `n` bytes (never NULL; 1 byte allocated for n == 0) */
static inline char *fuzz_copy(const uint8_t *p, size_t n)
{
    char *c = malloc(n != 0 ? n : 1);
    if (c == NULL)
        abort();
    if (n != 0)
        memcpy(c, p, n);
    else
        c[0] = '\0';
    return c;
}

#endif
